//! `BlockCache`: the policy made concurrent for the read path, with data and metadata adapted
//! separately and the reads in flight tracked beside the cached blocks.
//!
//! Sharding. Blocks are spread over shards by key hash; each shard holds, under one lock, two
//! `ArcPolicy`s (metadata: indirect and dnode blocks, object-set roots; data: everything else)
//! and the table of reads in flight. A hit takes one shard's lock for a lookup and a list move
//! — never a global lock — and readers of different shards never meet. Looking a block up and
//! claiming its read happen under the same lock, so two readers of one block never both read
//! it: the second waits on the first's `Pending` (an "I/O hit").
//!
//! Data and metadata. A shard's share of the capacity is split by an adaptive metadata target
//! (ZFS 2.2's `arc_meta`): a ghost hit among metadata moves it up by the block's size, one among
//! data moves it down by a fifth of that (a metadata miss costs a chain of reads, so metadata is
//! favoured). The target only decides who gives way when the shard is full: the class over its
//! target is evicted first, and either class may use room the other leaves empty.
//!
//! Eviction. With a background evictor running (`run_evictor`, the read cache's
//! `cairn-arc-evict` thread), an insert may take a shard past its capacity by a small slack
//! (1/`EVICT_SLACK_DIVISOR` of it, at most `EVICT_SLACK_MAX_BYTES`) and only wakes the evictor,
//! which brings the shard back down in batches of at most `EVICT_BATCH_BYTES` per lock hold. A
//! reader evicts for itself only when the evictor has fallen a whole slack behind, and then
//! only its own block's worth, so no reader waits behind a long eviction. A capacity change
//! (memory pressure, `arc_max`) is evicted in the same batches by the thread that made it.
//! Buffers leave the shard's lock before they are freed (the policies defer their drops).
//! Without an evictor (a cache used alone, in tests and trace replays) the slack is 0 and
//! inserts evict down to the capacity themselves.
//!
//! The SSD tier. Evictions are recorded with their buffers, their admission sketch's frequency
//! and whether the block may go below (read on demand or used once read ahead, and not marked
//! otherwise when cached: written, or excluded by `secondarycache`; one flag bit kept on the
//! cached entry). After the shard's lock is released, the eligible ones are offered to their
//! pool's SSD tier, and each eviction is counted by what the tier made of it (`evict_l2_*`:
//! held or accepted, eligible but neither, ineligible; `release`). The data sketches count
//! for the blocks the SSD tiers hold beside the cache's own capacity, grown as the tiers fill
//! (`follow_second_tiers`).
//!
//! Memory. Blocks are kept as `Arc<[u8]>` (16 bytes in the entry, refcounts beside the data) and
//! handed out as `Bytes` that share the cached buffer — no copy; a block evicted while a reader
//! holds it lives until that reader drops it. A block read from a device is kept in the very
//! buffer the read filled (`ReadBuf`, exactly the block's length): no copy on the way in
//! either; only written blocks are copied (their bytes are slices of larger client buffers,
//! which a cached slice would pin). Each block is charged its length plus
//! `BLOCK_OVERHEAD_BYTES` (entry, index, sketch, refcounts, allocator slack), so the capacity is
//! one budget for buffers and headers.

use crate::policy::{
    Access, ArcPolicy, BlockKey, Eviction, PolicySizes, PolicyStats, SKETCH_GROW_MIN_SLOTS,
};
use bytes::Bytes;
use cairn_device::ReadBuf;
use cairn_l2arc::L2Arc;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Shards a cache gets by default: enough that two cores (or sixteen) rarely contend on one.
pub const SHARDS_DEFAULT: usize = 16;
/// What a cached block costs beyond its data: the policy entry (48 B), its share of the index
/// (~6–11 B) and of the frequency sketch (~3.5–6 B), the buffer's refcounts (16 B) and the
/// allocator's chunk header (~16 B).
pub const BLOCK_OVERHEAD_BYTES: u32 = 96;
/// A data ghost hit moves the metadata target by 1/`META_BALANCE` of what a metadata one does.
const META_BALANCE: u64 = 5;
/// The metadata target stays within [capacity / `META_MIN_DIVISOR`, capacity * 3/4].
const META_MIN_DIVISOR: u64 = 32;
/// Initial metadata target: 1/`META_INITIAL_DIVISOR` of the capacity.
const META_INITIAL_DIVISOR: u64 = 4;

/// A shard may go this share of its capacity over it while the background evictor catches up.
const EVICT_SLACK_DIVISOR: u64 = 64;
/// ... but never more than this (a shard of a large cache).
const EVICT_SLACK_MAX_BYTES: u64 = 4 << 20;
/// The evictor's work per shard-lock hold: a batch of about 256 4 KiB blocks.
const EVICT_BATCH_BYTES: u64 = 1 << 20;
/// The sketch's unit: a slot counts for a block of up to 4 KiB (`policy`'s sketch sizing).
const SKETCH_SLOT_BYTES: u64 = 4096;

/// Which of a shard's two policies a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockClass {
    Data,
    Metadata,
}

/// A read in flight: the reader that claimed it completes it; others wait for it.
pub struct Pending {
    result: Mutex<Option<Option<Bytes>>>,
    done: Condvar,
    /// Claimed by read-ahead (its I/O is queued at read-ahead priority).
    prefetch: bool,
    /// A demand reader has waited on it (and raised its priority, once).
    demanded: AtomicBool,
}

impl Pending {
    fn new(prefetch: bool) -> Arc<Pending> {
        Arc::new(Pending {
            result: Mutex::new(None),
            done: Condvar::new(),
            prefetch,
            demanded: AtomicBool::new(false),
        })
    }

    /// Whether the read was claimed by read-ahead.
    pub fn is_prefetch(&self) -> bool {
        self.prefetch
    }

    /// Whether a demand reader waits for this read.
    pub fn is_demanded(&self) -> bool {
        self.demanded.load(Ordering::Acquire)
    }

    /// Marks a demand reader waiting; true for the first one (who raises the I/O's priority).
    pub fn note_demand(&self) -> bool {
        !self.demanded.swap(true, Ordering::AcqRel)
    }

    /// Waits for the claiming reader: the block, or `None` if its read failed (the waiter
    /// then reads for itself and gets the error first hand).
    pub fn wait(&self) -> Option<Bytes> {
        let mut result = self.result.lock();
        while result.is_none() {
            self.done.wait(&mut result);
        }
        result.clone().flatten()
    }
}

/// What a lookup found.
pub enum Lookup {
    Hit(Bytes),
    /// Another reader is reading the block: wait on it.
    InFlight(Arc<Pending>),
    /// Not cached, not being read: the caller reads it and calls `complete`.
    Claimed(Arc<Pending>),
}

/// A cached buffer handed out as `Bytes` without copying.
struct Shared(Arc<[u8]>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

fn to_bytes(buf: &Arc<[u8]>) -> Bytes {
    Bytes::from_owner(Shared(buf.clone()))
}

fn charge(len: usize) -> u32 {
    u32::try_from(len)
        .ok()
        .and_then(|len| len.checked_add(BLOCK_OVERHEAD_BYTES))
        .expect("blocks are smaller than 4 GiB")
}

struct ShardState {
    data: ArcPolicy<Arc<[u8]>>,
    meta: ArcPolicy<Arc<[u8]>>,
    capacity_bytes: u64,
    meta_target_bytes: u64,
    inflight: HashMap<BlockKey, Arc<Pending>>,
    /// How far inserts may take the shard past its capacity (0 without a background evictor).
    slack_bytes: u64,
    /// Bytes inserts had to evict themselves.
    inline_evicted_bytes: u64,
}

/// Buffers evicted under a shard's lock, freed after it is released, and the evictions (counted
/// by their SSD-tier state after the lock is released).
struct Dropped {
    buffers: Vec<Arc<[u8]>>,
    evictions: Vec<Eviction<Arc<[u8]>>>,
}

fn slack_for(capacity_bytes: u64) -> u64 {
    (capacity_bytes / EVICT_SLACK_DIVISOR).min(EVICT_SLACK_MAX_BYTES)
}

impl ShardState {
    fn new(capacity_bytes: u64) -> ShardState {
        let mut state = ShardState {
            data: ArcPolicy::new(capacity_bytes),
            // Metadata is a small share of most caches (its target starts at a quarter):
            // counters for a quarter of the capacity keep its sketch accurate at a quarter
            // of the cost.
            meta: ArcPolicy::with_sketch_for(capacity_bytes, capacity_bytes / META_INITIAL_DIVISOR),
            capacity_bytes,
            meta_target_bytes: capacity_bytes / META_INITIAL_DIVISOR,
            inflight: HashMap::new(),
            slack_bytes: 0,
            inline_evicted_bytes: 0,
        };
        state.data.defer_drops();
        state.meta.defer_drops();
        state.data.record_evictions();
        state.meta.record_evictions();
        state
    }

    /// What the policies evicted since the last call, to be dropped outside the lock.
    fn take_dropped(&mut self) -> Dropped {
        let mut buffers = self.data.take_dropped();
        buffers.append(&mut self.meta.take_dropped());
        let mut evictions = self.data.take_evictions();
        evictions.append(&mut self.meta.take_evictions());
        Dropped { buffers, evictions }
    }

    fn evicted_bytes(&self) -> u64 {
        self.data.stats().evicted_bytes + self.meta.stats().evicted_bytes
    }

    fn over_capacity(&self) -> bool {
        self.live_bytes() > self.capacity_bytes
    }

    fn policy(&mut self, class: BlockClass) -> &mut ArcPolicy<Arc<[u8]>> {
        match class {
            BlockClass::Data => &mut self.data,
            BlockClass::Metadata => &mut self.meta,
        }
    }

    fn live_bytes(&self) -> u64 {
        self.data.live_bytes() + self.meta.live_bytes()
    }

    /// Makes room for `incoming_bytes` of `class` within `limit_bytes`: the other class gives
    /// back what it holds beyond its target first, then `class` may use everything the other
    /// does not hold.
    fn make_room(&mut self, class: BlockClass, incoming_bytes: u64, limit_bytes: u64) {
        let meta_target = self.meta_target_bytes;
        let (this, other, other_target) = match class {
            BlockClass::Data => (&mut self.data, &mut self.meta, meta_target),
            BlockClass::Metadata => (
                &mut self.meta,
                &mut self.data,
                self.capacity_bytes.saturating_sub(meta_target),
            ),
        };
        let total = this.live_bytes() + other.live_bytes() + incoming_bytes;
        if total > limit_bytes && other.live_bytes() > other_target {
            let excess = (total - limit_bytes).min(other.live_bytes() - other_target);
            other.set_capacity(other.live_bytes() - excess);
        }
        this.set_capacity(limit_bytes.saturating_sub(other.live_bytes()));
    }

    /// Evicts until both classes fit in `limit_bytes`, the one over its target first.
    fn fit_to(&mut self, limit_bytes: u64) {
        if self.meta.live_bytes() > self.meta_target_bytes {
            self.make_room(BlockClass::Data, 0, limit_bytes);
            self.make_room(BlockClass::Metadata, 0, limit_bytes);
        } else {
            self.make_room(BlockClass::Metadata, 0, limit_bytes);
            self.make_room(BlockClass::Data, 0, limit_bytes);
        }
    }

    /// One batch of the evictor's work: at most `EVICT_BATCH_BYTES` towards the capacity.
    fn evict_batch(&mut self) {
        let live = self.live_bytes();
        self.fit_to(
            self.capacity_bytes
                .max(live.saturating_sub(EVICT_BATCH_BYTES)),
        );
    }

    /// Caches a block; returns whether the shard is now over its capacity (the evictor's
    /// turn). Within the slack, nothing is evicted here; past it (the evictor is behind, or
    /// the capacity just dropped below what is held), only this block's worth.
    fn insert(
        &mut self,
        key: BlockKey,
        class: BlockClass,
        data: Arc<[u8]>,
        access: Access,
        tier_eligible: bool,
    ) -> bool {
        let size = charge(data.len());
        let limit = if self.slack_bytes == 0 {
            self.capacity_bytes
        } else {
            (self.capacity_bytes + self.slack_bytes).max(self.live_bytes())
        };
        let evicted_before = self.evicted_bytes();
        self.make_room(class, u64::from(size), limit);
        let policy = self.policy(class);
        let ghost_hits_before = ghost_hits(&policy.stats());
        policy.insert_for_tier(key, size, data, access, tier_eligible);
        if ghost_hits(&policy.stats()) > ghost_hits_before {
            self.adapt(class, u64::from(size));
        }
        self.inline_evicted_bytes += self.evicted_bytes() - evicted_before;
        self.over_capacity()
    }

    /// A ghost hit in `class`: had it held more, the block would have been a hit.
    fn adapt(&mut self, class: BlockClass, size_bytes: u64) {
        let (low, high) = (
            self.capacity_bytes / META_MIN_DIVISOR,
            self.capacity_bytes / 4 * 3,
        );
        self.meta_target_bytes = match class {
            BlockClass::Metadata => self.meta_target_bytes + size_bytes,
            BlockClass::Data => self
                .meta_target_bytes
                .saturating_sub(size_bytes / META_BALANCE),
        }
        .clamp(low, high);
    }

    /// A new capacity; the caller evicts down to it (`BlockCache::evict_pass`).
    fn set_capacity(&mut self, capacity_bytes: u64) {
        let old = self.capacity_bytes.max(1);
        self.meta_target_bytes = (u128::from(self.meta_target_bytes) * u128::from(capacity_bytes)
            / u128::from(old)) as u64;
        self.capacity_bytes = capacity_bytes;
        if self.slack_bytes > 0 {
            self.slack_bytes = slack_for(capacity_bytes).max(1);
        }
    }
}

fn ghost_hits(stats: &PolicyStats) -> u64 {
    stats.mru_ghost_hits + stats.mfu_ghost_hits
}

/// One shard, alone on its cache lines (a lock bouncing between cores should not drag its
/// neighbour's with it).
#[repr(align(128))]
struct Shard(Mutex<ShardState>);

pub struct BlockCache {
    shards: Box<[Shard]>,
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

/// Counters and sizes of one class, summed over the shards.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ClassSnapshot {
    pub stats: PolicyStats,
    pub sizes: PolicySizes,
}

/// Totals over every shard.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheSnapshot {
    pub data: ClassSnapshot,
    pub metadata: ClassSnapshot,
    pub capacity_bytes: u64,
    pub meta_target_bytes: u64,
    /// Charged bytes held (data plus `BLOCK_OVERHEAD_BYTES` per block).
    pub size_bytes: u64,
    /// Reads in flight.
    pub inflight: u64,
    /// Eviction batches run off the readers' path (evictor thread, capacity changes), and the
    /// bytes they evicted.
    pub evict_batches: u64,
    pub evict_batch_bytes: u64,
    /// Bytes inserting readers evicted themselves (all of them without an evictor).
    pub evict_inline_bytes: u64,
}

fn shard_index(key: &BlockKey, shards: usize) -> usize {
    // Independent of the policy's own hash (which orders entries within a shard).
    let mixed = (key[0] ^ key[1].rotate_left(17)).wrapping_mul(0xd6e8_feb8_6659_fd93);
    ((mixed >> 40) as usize) % shards
}

fn add_stats(total: &mut PolicyStats, s: &PolicyStats) {
    total.demand_hits += s.demand_hits;
    total.demand_misses += s.demand_misses;
    total.prefetch_hits += s.prefetch_hits;
    total.prefetch_misses += s.prefetch_misses;
    total.demand_hit_prefetched += s.demand_hit_prefetched;
    total.mru_hits += s.mru_hits;
    total.mfu_hits += s.mfu_hits;
    total.mru_ghost_hits += s.mru_ghost_hits;
    total.mfu_ghost_hits += s.mfu_ghost_hits;
    total.evictions += s.evictions;
    total.evicted_bytes += s.evicted_bytes;
    total.admissions += s.admissions;
    total.evict_skips += s.evict_skips;
    total.uncacheable += s.uncacheable;
}

fn add_sizes(total: &mut PolicySizes, z: &PolicySizes) {
    total.capacity_bytes += z.capacity_bytes;
    total.mru_target_bytes += z.mru_target_bytes;
    total.mru_bytes += z.mru_bytes;
    total.mfu_bytes += z.mfu_bytes;
    total.mru_ghost_bytes += z.mru_ghost_bytes;
    total.mfu_ghost_bytes += z.mfu_ghost_bytes;
    total.mru_blocks += z.mru_blocks;
    total.mfu_blocks += z.mfu_blocks;
    total.ghost_blocks += z.ghost_blocks;
    total.header_bytes += z.header_bytes;
    total.index_bytes += z.index_bytes;
    total.indexed_entries += z.indexed_entries;
    total.sketch_bytes += z.sketch_bytes;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn block(fill: u8, len: usize) -> Bytes {
        Bytes::from(vec![fill; len])
    }

    /// Inserts 4 KiB blocks filled with `fill`, keyed `[base | i, 1]` for each `i` of `range`.
    fn insert_blocks(
        cache: &BlockCache,
        base: u64,
        range: std::ops::Range<u64>,
        class: BlockClass,
        fill: u8,
    ) {
        for i in range {
            cache.insert([base | i, 1], class, &block(fill, 4096), Access::Demand);
        }
    }

    #[test]
    fn metadata_keeps_its_share_against_a_flood_of_data() {
        let block_len = 4096usize;
        let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
        let cache = BlockCache::new(400 * per_block, 1);
        insert_blocks(&cache, 0, 0..50u64, BlockClass::Metadata, 1);
        insert_blocks(&cache, 1 << 40, 0..10_000u64, BlockClass::Data, 2);
        cache.assert_invariants();
        let kept = (0..50u64)
            .filter(|&i| cache.contains(&[i, 1], BlockClass::Metadata))
            .count();
        assert_eq!(kept, 50, "metadata under its target was evicted by data");
        let snapshot = cache.snapshot();
        assert!(snapshot.size_bytes <= snapshot.capacity_bytes);
        assert!(snapshot.data.sizes.mru_bytes + snapshot.data.sizes.mfu_bytes > 300 * per_block);
    }

    #[test]
    fn data_may_use_what_metadata_leaves_empty_and_metadata_takes_it_back() {
        let block_len = 4096usize;
        let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
        let cache = BlockCache::new(100 * per_block, 1);
        insert_blocks(&cache, 1 << 40, 0..100u64, BlockClass::Data, 2);
        let data_blocks = |c: &BlockCache| {
            let s = c.snapshot().data.sizes;
            s.mru_blocks + s.mfu_blocks
        };
        assert_eq!(data_blocks(&cache), 100, "data filled the whole cache");
        insert_blocks(&cache, 0, 0..20u64, BlockClass::Metadata, 1);
        cache.assert_invariants();
        assert_eq!(
            data_blocks(&cache),
            80,
            "data over its share gave way to metadata"
        );
        assert!((0..20u64).all(|i| cache.contains(&[i, 1], BlockClass::Metadata)));
    }

    #[test]
    fn ghost_hits_move_the_metadata_target() {
        let block_len = 4096usize;
        let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
        let cache = BlockCache::new(64 * per_block, 1);
        let initial = cache.snapshot().meta_target_bytes;
        // Metadata cycling over more than its share: evicted blocks come back as ghost hits.
        for round in 0..4 {
            for i in 0..40u64 {
                if cache
                    .get(&[i, 1], BlockClass::Metadata, Access::Demand)
                    .is_none()
                {
                    cache.insert(
                        [i, 1],
                        BlockClass::Metadata,
                        &block(round, block_len),
                        Access::Demand,
                    );
                }
                let data_key = [1 << 40 | (round as u64 * 40 + i), 1];
                cache.insert(
                    data_key,
                    BlockClass::Data,
                    &block(2, block_len),
                    Access::Demand,
                );
            }
        }
        cache.assert_invariants();
        let snapshot = cache.snapshot();
        assert!(
            snapshot.metadata.stats.mru_ghost_hits + snapshot.metadata.stats.mfu_ghost_hits > 0
        );
        assert!(
            snapshot.meta_target_bytes > initial,
            "metadata ghost hits did not raise its target ({} <= {initial})",
            snapshot.meta_target_bytes
        );
    }

    #[test]
    fn a_second_reader_of_a_block_in_flight_waits_for_the_first() {
        let cache = BlockCache::new(1 << 20, 2);
        let key = [7, 1];
        let Lookup::Claimed(pending) = cache.lookup(&key, BlockClass::Data, Access::Prefetch)
        else {
            panic!("an empty cache claims the read");
        };
        assert!(pending.is_prefetch());
        let Lookup::InFlight(waiting) = cache.lookup(&key, BlockClass::Data, Access::Demand) else {
            panic!("the second reader must wait for the read in flight");
        };
        assert!(
            waiting.note_demand(),
            "the first demand waiter raises the priority"
        );
        assert!(!waiting.note_demand(), "only once");
        let waiter = std::thread::spawn(move || waiting.wait());
        let data = block(9, 4096);
        cache.complete(
            &key,
            BlockClass::Data,
            &pending,
            Some(&ReadBuf::from(&data[..])),
            Some(Access::Demand),
        );
        assert_eq!(waiter.join().unwrap(), Some(data.clone()));
        match cache.lookup(&key, BlockClass::Data, Access::Demand) {
            Lookup::Hit(hit) => assert_eq!(hit, data),
            _ => panic!("a completed read is cached"),
        }
        assert_eq!(cache.snapshot().inflight, 0);
    }

    #[test]
    fn a_failed_read_caches_nothing_and_waiters_read_for_themselves() {
        let cache = BlockCache::new(1 << 20, 1);
        let key = [8, 1];
        let Lookup::Claimed(pending) = cache.lookup(&key, BlockClass::Data, Access::Demand) else {
            panic!("claimed");
        };
        let Lookup::InFlight(waiting) = cache.lookup(&key, BlockClass::Data, Access::Demand) else {
            panic!("in flight");
        };
        cache.complete(&key, BlockClass::Data, &pending, None, Some(Access::Demand));
        assert_eq!(waiting.wait(), None);
        assert!(!cache.contains(&key, BlockClass::Data));
        assert!(matches!(
            cache.lookup(&key, BlockClass::Data, Access::Demand),
            Lookup::Claimed(_)
        ));
    }

    #[test]
    fn a_hit_shares_the_cached_buffer() {
        let cache = BlockCache::new(1 << 20, 1);
        cache.insert([1, 1], BlockClass::Data, &block(5, 4096), Access::Demand);
        let a = cache
            .get(&[1, 1], BlockClass::Data, Access::Demand)
            .unwrap();
        let b = cache
            .get(&[1, 1], BlockClass::Data, Access::Demand)
            .unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr(), "two hits, one buffer");
        assert!(a.iter().all(|&byte| byte == 5));
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while !done() {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting: {what}"
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }

    #[test]
    fn the_background_evictor_brings_inserts_back_within_the_capacity() {
        let block_len = 4096usize;
        let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
        let capacity = 4096 * per_block; // 16 MiB and a bit, 4 shards
        let cache = Arc::new(BlockCache::new(capacity, 4));
        let evictor = {
            let cache = cache.clone();
            std::thread::spawn(move || cache.run_evictor())
        };
        wait_until("slack set", || {
            cache
                .shards
                .iter()
                .all(|shard| shard.0.lock().slack_bytes > 0)
        });
        for i in 0..3 * 4096u64 {
            cache.insert(
                [i, 1],
                BlockClass::Data,
                &block(1, block_len),
                Access::Demand,
            );
            // Never more than the slack over, whatever the evictor's pace.
            let snapshot = cache.snapshot();
            assert!(
                snapshot.size_bytes <= capacity + slack_for(capacity / 4) * 4 + per_block,
                "{} bytes held in {capacity} (+ slack)",
                snapshot.size_bytes
            );
        }
        wait_until("evicted down to the capacity", || {
            cache.snapshot().size_bytes <= capacity
        });
        let snapshot = cache.snapshot();
        assert!(snapshot.evict_batches > 0, "the evictor never ran");
        assert_eq!(
            snapshot.evict_batch_bytes + snapshot.evict_inline_bytes,
            snapshot.data.stats.evicted_bytes,
            "every eviction is counted once"
        );
        assert!(
            snapshot.evict_batch_bytes > 0,
            "readers evicted everything themselves: {snapshot:?}"
        );
        cache.stop_evictor();
        evictor.join().unwrap();
        // Without the evictor, inserts evict for themselves again and the slack is gone.
        insert_blocks(&cache, 1 << 40, 0..1024u64, BlockClass::Data, 2);
        assert!(cache.snapshot().size_bytes <= capacity);
        cache.assert_invariants();
    }

    #[test]
    fn a_capacity_drop_is_evicted_by_the_caller_and_inserts_evict_only_their_own_size() {
        let block_len = 4096usize;
        let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
        let capacity = 2048 * per_block;
        let cache = BlockCache::new(capacity, 1);
        cache.shards[0].0.lock().slack_bytes = slack_for(capacity); // as under an evictor
        insert_blocks(&cache, 0, 0..2048u64, BlockClass::Data, 1);
        let full = cache.snapshot().size_bytes;
        assert_eq!(full, capacity);
        // A shrink stored without its eviction pass: what a reader sees while a capacity
        // change is being evicted.
        cache.shards[0].0.lock().set_capacity(capacity / 4);
        let inline_before = cache.snapshot().evict_inline_bytes;
        cache.insert(
            [1 << 40, 1],
            BlockClass::Data,
            &block(2, block_len),
            Access::Demand,
        );
        let snapshot = cache.snapshot();
        assert_eq!(
            snapshot.evict_inline_bytes - inline_before,
            per_block,
            "the reader evicted more than its own block"
        );
        assert_eq!(snapshot.size_bytes, full);
        cache.set_capacity(capacity / 4);
        let snapshot = cache.snapshot();
        assert!(snapshot.size_bytes <= capacity / 4);
        assert!(
            snapshot.evict_batches >= (full - capacity / 4) / EVICT_BATCH_BYTES,
            "evicted in batches of at most {EVICT_BATCH_BYTES} bytes: {snapshot:?}"
        );
        cache.assert_invariants();
    }

    #[test]
    fn removing_a_pools_blocks_leaves_the_others() {
        let cache = BlockCache::new(1 << 22, 4);
        for i in 0..64u64 {
            cache.insert(
                [i, 1 << 48 | 5],
                BlockClass::Data,
                &block(1, 4096),
                Access::Demand,
            );
            cache.insert(
                [i, 2 << 48 | 5],
                BlockClass::Metadata,
                &block(2, 4096),
                Access::Demand,
            );
        }
        assert_eq!(cache.remove_matching(|key| key[1] >> 48 == 1), 64);
        assert!((0..64u64).all(|i| !cache.contains(&[i, 1 << 48 | 5], BlockClass::Data)));
        assert!((0..64u64).all(|i| cache.contains(&[i, 2 << 48 | 5], BlockClass::Metadata)));
        cache.assert_invariants();
    }

    #[test]
    fn evictions_feed_the_ssd_tier_and_what_it_holds_sizes_the_sketches() {
        let cache = BlockCache::new(64 * 4096, 1);
        let tier = Arc::new(L2Arc::new(cairn_l2arc::L2Config {
            segment_bytes: 256 << 10,
            write_chunk_bytes: 64 << 10,
            feed_linger_ms: 5,
            ..cairn_l2arc::L2Config::default()
        }));
        let tag = 3u16;
        cache.register_l2(tag, &tier);
        let sketch_before = cache.snapshot().data.sizes.sketch_bytes;
        assert!(!cache.follow_second_tiers(64 * 4096), "no devices yet");
        let device = Arc::new(cairn_device::mem::MemDevice::new(16 << 20));
        tier.add_new("c0", device, 1, 1).unwrap();
        // An empty device holds nothing the sketch must count for.
        assert!(
            !cache.follow_second_tiers(64 * 4096),
            "sized for an empty device"
        );
        assert_eq!(cache.snapshot().data.sizes.sketch_bytes, sketch_before);
        assert_eq!(cache.second_tier_sketch_bytes(64 * 4096), 0);
        let key = |n: u64| [n << 12, 5 | u64::from(tag) << 48];
        for n in 0..200u64 {
            let data = block(n as u8, 4096);
            match cache.lookup(&key(n), BlockClass::Data, Access::Demand) {
                Lookup::Claimed(pending) => {
                    // Every third block's dataset keeps it off the cache devices.
                    cache.complete_for_tier(
                        &key(n),
                        BlockClass::Data,
                        &pending,
                        Some(&ReadBuf::from(&data[..])),
                        Some(Access::Demand),
                        n % 3 != 0,
                    );
                }
                _ => panic!("block {n} was cached already"),
            }
        }
        tier.settle();
        let below = |n: u64| tier.contains([n << 12, 5]);
        let fed: Vec<u64> = (0..200).filter(|n| below(*n)).collect();
        // About 140 evicted, two in three of them eligible.
        assert!(fed.len() >= 80, "only {} evicted blocks fed", fed.len());
        assert!(
            fed.iter().all(|n| n % 3 != 0),
            "a block secondarycache excluded was fed"
        );
        // Offered and taken counts as cached; kept off by secondarycache, as ineligible.
        let counted = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        assert!(counted(&cache.evict_l2.cached) >= fed.len() as u64 * 4096);
        assert!(counted(&cache.evict_l2.ineligible) > 0);
        // The sketch grows by one slot per block the tier now holds, and no more.
        let hot = key(fed[fed.len() - 1]);
        let policy_hash_estimate =
            |cache: &BlockCache| cache.shards[0].0.lock().data.frequency(&hot);
        let estimate_before = policy_hash_estimate(&cache);
        let held = tier.indexed_blocks();
        assert!(
            cache.follow_second_tiers(64 * 4096),
            "not grown for {held} blocks"
        );
        let share = cache.second_tier_sketch_bytes(64 * 4096);
        assert!(
            (held * 4..held * 4 + 8).contains(&share),
            "{share} B of sketch for {held} blocks held below"
        );
        assert!(
            policy_hash_estimate(&cache) >= estimate_before,
            "growing forgot what the sketch counted"
        );
        assert!(!cache.follow_second_tiers(64 * 4096), "grown for nothing");
    }

    /// An eligible block the tier refuses (admission) is "uncached eligible".
    #[test]
    fn evictions_the_tier_refuses_count_as_uncached_eligible() {
        let cache = BlockCache::new(16 * 4096, 1);
        let tier = Arc::new(L2Arc::new(cairn_l2arc::L2Config {
            segment_bytes: 256 << 10,
            write_chunk_bytes: 64 << 10,
            feed_linger_ms: 5,
            // Blocks read once are not worth the device.
            admit_frequency_min: 3,
            ..cairn_l2arc::L2Config::default()
        }));
        let tag = 4u16;
        cache.register_l2(tag, &tier);
        let device = Arc::new(cairn_device::mem::MemDevice::new(16 << 20));
        tier.add_new("c0", device, 1, 1).unwrap();
        let key = |n: u64| [n << 12, 5 | u64::from(tag) << 48];
        for n in 0..64u64 {
            let data = block(n as u8, 4096);
            if let Lookup::Claimed(pending) =
                cache.lookup(&key(n), BlockClass::Data, Access::Demand)
            {
                cache.complete(
                    &key(n),
                    BlockClass::Data,
                    &pending,
                    Some(&ReadBuf::from(&data[..])),
                    Some(Access::Demand),
                );
            }
        }
        tier.settle();
        let counted = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        assert!(counted(&cache.evict_l2.eligible) >= 40 * 4096);
        assert_eq!(counted(&cache.evict_l2.cached), 0);
        assert_eq!(counted(&cache.evict_l2.ineligible), 0);
        assert!((0..64).all(|n| !tier.contains([n << 12, 5])));
    }
}
