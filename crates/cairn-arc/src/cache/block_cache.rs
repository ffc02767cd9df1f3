//! `BlockCache`: the sharded cache itself — lookups and read claims, inserts, removal,
//! capacity and sketch sizing, the background evictor, and the offers of evicted blocks to
//! the pools' SSD tiers.
//!
//! Invariants: at most one shard lock held at a time, and none while buffers are freed or
//! evictions are offered to a tier; the evictor brings shards back within capacity in batches
//! of at most `EVICT_BATCH_BYTES` per lock hold. How it fits: built on `shard`, `pending` and
//! `snapshot`; `read::ReadCache` owns one and drives its evictor thread.

use super::pending::{Lookup, Pending};
use super::shard::{Dropped, Shard, ShardState, slack_for, to_bytes};
use super::snapshot::{CacheSnapshot, add_sizes, add_stats};
use super::{
    BlockClass, EVICT_BATCH_BYTES, META_INITIAL_DIVISOR, META_MIN_DIVISOR, SKETCH_SLOT_BYTES,
};
use crate::policy::{Access, ArcPolicy, BlockKey, SKETCH_GROW_MIN_SLOTS};
use bytes::Bytes;
use cairn_device::ReadBuf;
use cairn_l2arc::L2Arc;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

pub struct BlockCache {
    pub(super) shards: Box<[Shard]>,
    evictor: EvictorSignal,
    /// Each pool's SSD tier, by the pool tag in its keys: evictions are counted by whether the
    /// tier held the block (arcstat's evict_l2_*).
    l2_tiers: parking_lot::RwLock<HashMap<u16, std::sync::Weak<L2Arc>>>,
    pub(crate) evict_l2: EvictL2Counters,
    /// What the SSD tiers held (4 KiB per block) when the data sketches were last sized for
    /// them, beyond the cache's own capacity (their admission needs frequencies of blocks RAM
    /// no longer holds).
    below_bytes: AtomicU64,
}

/// Bytes evicted from RAM by the block's state in its pool's SSD tier (pools with cache
/// devices only), as the eviction's offer (the tier's feed) finds it:
/// - `cached`: the tier holds the block, or accepted it (queued for writing);
/// - `eligible` ("uncached eligible"): the feeding rules take it (read on demand, or read ahead
///   and then used; not too large; its dataset's `secondarycache` takes it) but the tier
///   neither holds nor accepted it: refused by admission (read too rarely), or dropped
///   because the writers were behind or no device was usable;
/// - `ineligible`: read ahead and never used, written rather than read, excluded by
///   `secondarycache`, or too large (and not held by the tier anyway).
#[derive(Default)]
pub(crate) struct EvictL2Counters {
    pub(crate) cached: AtomicU64,
    pub(crate) eligible: AtomicU64,
    pub(crate) ineligible: AtomicU64,
}

/// How inserts wake the background evictor, and how it is stopped.
#[derive(Default)]
struct EvictorSignal {
    /// Set by an insert that took a shard over its capacity; cleared by the evictor before a
    /// pass (so only the first insert over capacity takes the lock below).
    requested: AtomicBool,
    state: Mutex<EvictorState>,
    wake: Condvar,
    /// Batches the evictor (and capacity changes) evicted, and their bytes.
    batches: AtomicU64,
    batch_evicted_bytes: AtomicU64,
}

#[derive(Default)]
struct EvictorState {
    running: bool,
    wanted: bool,
    /// Set once, for good.
    stopping: bool,
}

fn shard_index(key: &BlockKey, shards: usize) -> usize {
    // Independent of the policy's own hash (which orders entries within a shard).
    let mixed = (key[0] ^ key[1].rotate_left(17)).wrapping_mul(0xd6e8_feb8_6659_fd93);
    ((mixed >> 40) as usize) % shards
}

impl BlockCache {
    pub fn new(capacity_bytes: u64, shards: usize) -> BlockCache {
        assert!(shards > 0, "a cache has at least one shard");
        let share = capacity_bytes / shards as u64;
        BlockCache {
            shards: (0..shards)
                .map(|_| Shard(Mutex::new(ShardState::new(share))))
                .collect(),
            evictor: EvictorSignal::default(),
            l2_tiers: parking_lot::RwLock::new(HashMap::new()),
            evict_l2: EvictL2Counters::default(),
            below_bytes: AtomicU64::new(0),
        }
    }

    /// Counts evictions of the blocks of pool `pool_tag` by their state in `tier`.
    pub fn register_l2(&self, pool_tag: u16, tier: &Arc<L2Arc>) {
        self.l2_tiers.write().insert(pool_tag, Arc::downgrade(tier));
    }

    pub fn unregister_l2(&self, pool_tag: u16) {
        self.l2_tiers.write().remove(&pool_tag);
    }

    /// Blocks the registered SSD tiers hold now (indexed, `L2Arc::indexed_blocks`), summed.
    pub fn second_tier_blocks(&self) -> u64 {
        self.l2_tiers
            .read()
            .values()
            .filter_map(std::sync::Weak::upgrade)
            .filter(|tier| tier.has_devices())
            .map(|tier| tier.indexed_blocks())
            .sum()
    }

    /// Follows what the SSD tiers below hold with the data sketches, sized for a cache of
    /// `max_bytes` plus one 4 KiB slot per block held below: widened, keeping their counts and
    /// epoch, once the tiers hold a tenth more blocks than they were sized for (and at least
    /// `SKETCH_GROW_MIN_SLOTS` per shard more); sized anew (forgetting) only when the tiers
    /// hold under half of it (cache devices removed). Never below the cache's own need.
    /// Returns whether they changed.
    pub fn follow_second_tiers(&self, max_bytes: u64) -> bool {
        let held = self.second_tier_blocks() * SKETCH_SLOT_BYTES;
        let sized = self.below_bytes.load(Ordering::Relaxed);
        let grow_min = SKETCH_GROW_MIN_SLOTS * SKETCH_SLOT_BYTES * self.shards.len() as u64;
        if crate::policy::sketch_outgrown(held, sized, grow_min) {
            self.below_bytes.store(held, Ordering::Relaxed);
            let share = (max_bytes + held) / self.shards.len() as u64;
            for shard in self.shards.iter() {
                shard.0.lock().data.grow_sketch(share);
            }
            return true;
        }
        if held < sized / 2 {
            self.below_bytes.store(held, Ordering::Relaxed);
            self.resize_sketches(max_bytes);
            return true;
        }
        false
    }

    /// RAM the data sketches take beyond what a cache of `max_bytes` alone would need: the
    /// SSD tiers' share of them.
    pub fn second_tier_sketch_bytes(&self, max_bytes: u64) -> u64 {
        let alone =
            ArcPolicy::<Arc<[u8]>>::sketch_bytes_sized_for(max_bytes / self.shards.len() as u64);
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .0
                    .lock()
                    .data
                    .sizes()
                    .sketch_bytes
                    .saturating_sub(alone)
            })
            .sum()
    }

    /// Frees what a shard dropped, counts its evictions by SSD-tier state and offers the
    /// eligible ones to their pool's SSD tier (outside the shard's lock: the tier has locks of
    /// its own). The tier is fed as RAM lets blocks go (a victim cache): a block read on
    /// demand, that `secondarycache` lets below, with its admission sketch's frequency; the
    /// tier admits it by value (see `cairn_l2arc::L2Arc::offer_with`), or values again the copy
    /// it already has.
    fn release(&self, dropped: Dropped) {
        drop(dropped.buffers);
        if dropped.evictions.is_empty() {
            return;
        }
        let tiers = self.l2_tiers.read();
        if tiers.is_empty() {
            return;
        }
        for eviction in dropped.evictions {
            let tag = (eviction.key[1] >> 48) as u16;
            let Some(tier) = tiers
                .get(&tag)
                .and_then(std::sync::Weak::upgrade)
                .filter(|tier| tier.has_devices())
            else {
                continue;
            };
            let key = [eviction.key[0], eviction.key[1] & ((1 << 48) - 1)];
            let bytes = u64::from(eviction.size_bytes);
            let eligible = eviction.demand_used
                && eviction.tier_eligible
                && eviction.size_bytes <= tier.config().block_bytes_max;
            // An eligible block is offered (the offer finds a copy the tier holds, or queues
            // one for writing, or refuses it); the others are only looked up.
            let taken = match (&eviction.value, eligible) {
                (Some(buf), true) => {
                    let admission = cairn_l2arc::Admission {
                        frequency: eviction.frequency,
                        epoch: eviction.epoch,
                    };
                    tier.offer_evicted(key, to_bytes(buf), admission)
                }
                _ => tier.contains(key),
            };
            let counter = if taken {
                &self.evict_l2.cached
            } else if eligible {
                &self.evict_l2.eligible
            } else {
                &self.evict_l2.ineligible
            };
            counter.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// Runs the background evictor in the calling thread until `stop_evictor` (at once if that
    /// was called already: a stopped cache has no evictor again). While it runs, inserts leave
    /// eviction to it (within each shard's slack).
    pub fn run_evictor(&self) {
        {
            let mut state = self.evictor.state.lock();
            assert!(!state.running, "one evictor per cache");
            if state.stopping {
                return;
            }
            state.running = true;
        }
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            shard.slack_bytes = slack_for(shard.capacity_bytes).max(1);
        }
        loop {
            {
                let mut state = self.evictor.state.lock();
                while !state.wanted && !state.stopping {
                    self.evictor.wake.wait(&mut state);
                }
                if state.stopping {
                    break;
                }
                state.wanted = false;
                self.evictor.requested.store(false, Ordering::Release);
            }
            self.evict_pass();
        }
        // Inserts evict for themselves again, and nothing is left over the capacity.
        for shard in self.shards.iter() {
            shard.0.lock().slack_bytes = 0;
        }
        self.evict_pass();
        self.evictor.state.lock().running = false;
    }

    /// Makes `run_evictor` return (after a last pass), or never start.
    pub fn stop_evictor(&self) {
        self.evictor.state.lock().stopping = true;
        self.evictor.wake.notify_all();
    }

    fn request_eviction(&self) {
        if !self.evictor.requested.swap(true, Ordering::AcqRel) {
            self.evictor.state.lock().wanted = true;
            self.evictor.wake.notify_one();
        }
    }

    /// Evicts every shard down to its capacity now, in the calling thread, in batches: the
    /// lock is released between batches and the evicted buffers are freed outside it.
    pub fn evict_pass(&self) {
        for shard in self.shards.iter() {
            // Bounded by what was over at the start: inserts racing the pass wake the evictor
            // again rather than keep this loop going.
            let mut batches_left = u64::MAX;
            while batches_left > 0 {
                let (dropped, evicted) = {
                    let mut shard = shard.0.lock();
                    if !shard.over_capacity() {
                        break;
                    }
                    let over = shard.live_bytes() - shard.capacity_bytes;
                    batches_left = batches_left.min(over.div_ceil(EVICT_BATCH_BYTES) + 1) - 1;
                    let before = shard.evicted_bytes();
                    shard.evict_batch();
                    (shard.take_dropped(), shard.evicted_bytes() - before)
                };
                self.release(dropped);
                self.evictor.batches.fetch_add(1, Ordering::Relaxed);
                self.evictor
                    .batch_evicted_bytes
                    .fetch_add(evicted, Ordering::Relaxed);
                if evicted == 0 {
                    break; // only pinned blocks left over the capacity
                }
            }
        }
    }

    /// Caches `buf` in its shard, outside of which the evicted buffers are freed.
    fn insert_in_shard(
        &self,
        key: BlockKey,
        class: BlockClass,
        buf: Arc<[u8]>,
        access: Access,
        tier_eligible: bool,
    ) {
        let (over, dropped) = {
            let mut shard = self.shard(&key).lock();
            let over = shard.insert(key, class, buf, access, tier_eligible);
            (over, shard.take_dropped())
        };
        self.release(dropped);
        if over {
            self.request_eviction();
        }
    }

    fn shard(&self, key: &BlockKey) -> &Mutex<ShardState> {
        &self.shards[shard_index(key, self.shards.len())].0
    }

    /// The cached block, if any (sharing the cached buffer).
    pub fn get(&self, key: &BlockKey, class: BlockClass, access: Access) -> Option<Bytes> {
        self.shard(key)
            .lock()
            .policy(class)
            .get(key, access)
            .map(to_bytes)
    }

    /// The cached block if there is one (a hit, counted as such); nothing is counted or
    /// claimed when there is none (a caller that cannot wait for I/O tries this first).
    pub fn get_if_cached(
        &self,
        key: &BlockKey,
        class: BlockClass,
        access: Access,
    ) -> Option<Bytes> {
        let mut shard = self.shard(key).lock();
        let policy = shard.policy(class);
        if !policy.contains(key) {
            return None;
        }
        policy.get(key, access).map(to_bytes)
    }

    /// Looks a block up; on a miss, either joins the read in flight or claims the read (the
    /// caller must then `complete` it, success or not).
    pub fn lookup(&self, key: &BlockKey, class: BlockClass, access: Access) -> Lookup {
        let mut shard = self.shard(key).lock();
        if let Some(buf) = shard.policy(class).get(key, access) {
            return Lookup::Hit(to_bytes(buf));
        }
        if let Some(pending) = shard.inflight.get(key) {
            return Lookup::InFlight(pending.clone());
        }
        let pending = Pending::new(access == Access::Prefetch);
        shard.inflight.insert(*key, pending.clone());
        Lookup::Claimed(pending)
    }

    /// Ends a claimed read: caches the block (if `cache_as` says how) and wakes the waiters.
    /// The block may go to the SSD tier when evicted.
    pub fn complete(
        &self,
        key: &BlockKey,
        class: BlockClass,
        pending: &Arc<Pending>,
        data: Option<&ReadBuf>,
        cache_as: Option<Access>,
    ) {
        self.complete_for_tier(key, class, pending, data, cache_as, true);
    }

    /// `complete`, saying whether the SSD tier's feeding rules take the block (its eviction
    /// is counted as such: `evict_l2_*`).
    pub fn complete_for_tier(
        &self,
        key: &BlockKey,
        class: BlockClass,
        pending: &Arc<Pending>,
        data: Option<&ReadBuf>,
        cache_as: Option<Access>,
        tier_eligible: bool,
    ) {
        // The buffer the read filled is kept as it is: it holds exactly the block.
        let buf: Option<Arc<[u8]>> = match (data, cache_as) {
            (Some(data), Some(_)) if !data.is_empty() => Some(data.clone()),
            _ => None,
        };
        let (over, dropped) = {
            let mut shard = self.shard(key).lock();
            let removed = shard.inflight.remove(key);
            debug_assert!(
                removed.is_some_and(|removed| Arc::ptr_eq(&removed, pending)),
                "completed a read that was not claimed"
            );
            let over = match (buf, cache_as) {
                (Some(buf), Some(access)) => shard.insert(*key, class, buf, access, tier_eligible),
                _ => false,
            };
            (over, shard.take_dropped())
        };
        self.release(dropped);
        if over {
            self.request_eviction();
        }
        *pending.result.lock() = Some(data.map(to_bytes));
        pending.done.notify_all();
    }

    /// Caches a block (just read and verified, or just written).
    pub fn insert(&self, key: BlockKey, class: BlockClass, data: &Bytes, access: Access) {
        self.insert_for_tier(key, class, data, access, true);
    }

    /// `insert`, saying whether the SSD tier's feeding rules take the block.
    pub fn insert_for_tier(
        &self,
        key: BlockKey,
        class: BlockClass,
        data: &Bytes,
        access: Access,
        tier_eligible: bool,
    ) {
        if data.is_empty() {
            return;
        }
        let buf: Arc<[u8]> = Arc::from(&data[..]);
        self.insert_in_shard(key, class, buf, access, tier_eligible);
    }

    /// How often demand reads asked for `key` lately by its shard's admission sketch, and
    /// that sketch's epoch (what the SSD tier admits by).
    pub fn frequency(&self, key: &BlockKey, class: BlockClass) -> (u8, u64) {
        let mut shard = self.shard(key).lock();
        let policy = shard.policy(class);
        (policy.frequency(key), policy.frequency_epoch())
    }

    /// Whether a block is cached (no statistics, no reordering).
    pub fn contains(&self, key: &BlockKey, class: BlockClass) -> bool {
        self.shard(key).lock().policy(class).contains(key)
    }

    /// Forgets a block (its contents are known bad, or its space was reused).
    pub fn remove(&self, key: &BlockKey) {
        let removed = {
            let mut shard = self.shard(key).lock();
            (shard.data.remove(key), shard.meta.remove(key))
        };
        drop(removed);
    }

    /// Forgets every block whose key matches (a pool leaving the process). O(blocks).
    pub fn remove_matching(&self, matches: impl Fn(&BlockKey) -> bool) -> u64 {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut dropped = Vec::new();
            {
                let mut guard = shard.0.lock();
                let state = &mut *guard;
                for policy in [&mut state.data, &mut state.meta] {
                    for key in policy.keys() {
                        if matches(&key) {
                            dropped.extend(policy.remove(&key));
                            removed += 1;
                        }
                    }
                }
            }
            drop(dropped);
        }
        removed
    }

    /// Sizes the frequency sketches for a cache of at most `max_bytes` (a new `arc_max`):
    /// counters sized for a much larger cache would cost memory per cached block for nothing,
    /// for a much smaller one they would overflow. Frequencies seen so far are forgotten.
    pub fn resize_sketches(&self, max_bytes: u64) {
        let share = max_bytes / self.shards.len() as u64;
        // The data sketches also count for the SSD tiers below (see `follow_second_tiers`).
        let below = self.below_bytes.load(Ordering::Relaxed) / self.shards.len() as u64;
        for shard in self.shards.iter() {
            let mut shard = shard.0.lock();
            shard.data.resize_sketch(share + below);
            shard.meta.resize_sketch(share / META_INITIAL_DIVISOR);
        }
    }

    /// Changes the capacity (arc target, memory pressure); the calling thread evicts down to
    /// it, in batches (`evict_pass`).
    pub fn set_capacity(&self, capacity_bytes: u64) {
        let share = capacity_bytes / self.shards.len() as u64;
        for shard in self.shards.iter() {
            shard.0.lock().set_capacity(share);
        }
        self.evict_pass();
    }

    /// Counters and sizes summed over the shards.
    pub fn snapshot(&self) -> CacheSnapshot {
        let mut total = CacheSnapshot::default();
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            add_stats(&mut total.data.stats, &shard.data.stats());
            add_sizes(&mut total.data.sizes, &shard.data.sizes());
            add_stats(&mut total.metadata.stats, &shard.meta.stats());
            add_sizes(&mut total.metadata.sizes, &shard.meta.sizes());
            total.capacity_bytes += shard.capacity_bytes;
            total.meta_target_bytes += shard.meta_target_bytes;
            total.size_bytes += shard.live_bytes();
            total.inflight += shard.inflight.len() as u64;
            total.evict_inline_bytes += shard.inline_evicted_bytes;
        }
        total.evict_batches = self.evictor.batches.load(Ordering::Relaxed);
        total.evict_batch_bytes = self.evictor.batch_evicted_bytes.load(Ordering::Relaxed);
        total
    }

    /// Checks every shard's invariants (tests).
    pub fn assert_invariants(&self) {
        for shard in self.shards.iter() {
            let shard = shard.0.lock();
            shard.data.assert_invariants();
            shard.meta.assert_invariants();
            let pinned = shard.data.pinned_bytes() + shard.meta.pinned_bytes();
            assert!(
                shard.live_bytes() <= shard.capacity_bytes + shard.slack_bytes + pinned,
                "a shard holds more than its share: {} > {}",
                shard.live_bytes(),
                shard.capacity_bytes
            );
            let capacity = shard.capacity_bytes;
            assert!(
                shard.meta_target_bytes <= capacity / 4 * 3 + 1
                    && shard.meta_target_bytes >= capacity / META_MIN_DIVISOR / 2,
                "metadata target {} outside its bounds for capacity {capacity}",
                shard.meta_target_bytes
            );
        }
    }
}
