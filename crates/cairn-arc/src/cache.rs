//! `BlockCache`: the policy made concurrent for the read path. Blocks are spread over shards by
//! key hash, each shard an `ArcPolicy` under its own lock with an equal share of the capacity,
//! so a hit takes one shard's lock for a lookup and a list move — never a global lock — and
//! readers of different shards never meet. Eviction happens in the inserting thread, one block
//! at a time and bounded (`EVICT_SCAN_MAX` entries looked at per step), so no reader waits
//! behind a long eviction; a capacity change (memory pressure) shrinks one shard at a time.
//!
//! Values are `Bytes`: a hit hands out a reference to the cached buffer, not a copy, and a block
//! evicted while a reader still holds it stays alive until that reader drops it (its memory is
//! then no longer counted: the cache's size is what it holds).

use crate::policy::{Access, ArcPolicy, BlockKey, PolicySizes, PolicyStats};
use bytes::Bytes;
use parking_lot::Mutex;

/// Shards a cache gets by default: enough that two cores (or sixteen) rarely contend on one.
pub const SHARDS_DEFAULT: usize = 16;

/// One shard, alone on its cache lines (a lock bouncing between cores should not drag its
/// neighbour's with it).
#[repr(align(128))]
struct Shard(Mutex<ArcPolicy<Bytes>>);

pub struct BlockCache {
    shards: Box<[Shard]>,
}

/// Totals over every shard.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheSnapshot {
    pub stats: PolicyStats,
    pub sizes: PolicySizes,
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
                .map(|_| Shard(Mutex::new(ArcPolicy::new(share))))
                .collect(),
        }
    }

    fn shard(&self, key: &BlockKey) -> &Mutex<ArcPolicy<Bytes>> {
        &self.shards[shard_index(key, self.shards.len())].0
    }

    /// The cached block, if any (a reference to the cached buffer).
    pub fn get(&self, key: &BlockKey, access: Access) -> Option<Bytes> {
        self.shard(key).lock().get(key, access).cloned()
    }

    /// Caches a block just read (and verified) after a miss.
    pub fn insert(&self, key: BlockKey, data: Bytes, access: Access) {
        let size = u32::try_from(data.len()).expect("blocks are smaller than 4 GiB");
        if size == 0 {
            return;
        }
        self.shard(&key).lock().insert(key, size, data, access);
    }

    /// Forgets a block (its contents are known bad, or its space was reused).
    pub fn remove(&self, key: &BlockKey) {
        self.shard(key).lock().remove(key);
    }

    /// Changes the capacity (arc_max, memory pressure): each shard evicts down to its share.
    pub fn set_capacity(&self, capacity_bytes: u64) {
        let share = capacity_bytes / self.shards.len() as u64;
        for shard in self.shards.iter() {
            shard.0.lock().set_capacity(share);
        }
    }

    /// Counters and sizes summed over the shards.
    pub fn snapshot(&self) -> CacheSnapshot {
        let mut total = CacheSnapshot::default();
        for shard in self.shards.iter() {
            let policy = shard.0.lock();
            let (s, z) = (policy.stats(), policy.sizes());
            let t = &mut total.stats;
            t.demand_hits += s.demand_hits;
            t.demand_misses += s.demand_misses;
            t.prefetch_hits += s.prefetch_hits;
            t.prefetch_misses += s.prefetch_misses;
            t.mru_hits += s.mru_hits;
            t.mfu_hits += s.mfu_hits;
            t.mru_ghost_hits += s.mru_ghost_hits;
            t.mfu_ghost_hits += s.mfu_ghost_hits;
            t.evictions += s.evictions;
            t.evicted_bytes += s.evicted_bytes;
            t.admissions += s.admissions;
            t.evict_skips += s.evict_skips;
            t.uncacheable += s.uncacheable;
            let u = &mut total.sizes;
            u.capacity_bytes += z.capacity_bytes;
            u.mru_target_bytes += z.mru_target_bytes;
            u.mru_bytes += z.mru_bytes;
            u.mfu_bytes += z.mfu_bytes;
            u.mru_ghost_bytes += z.mru_ghost_bytes;
            u.mfu_ghost_bytes += z.mfu_ghost_bytes;
            u.mru_blocks += z.mru_blocks;
            u.mfu_blocks += z.mfu_blocks;
            u.ghost_blocks += z.ghost_blocks;
            u.header_bytes += z.header_bytes;
        }
        total
    }

    /// Checks every shard's invariants (tests).
    pub fn assert_invariants(&self) {
        for shard in self.shards.iter() {
            let policy = shard.0.lock();
            policy.assert_invariants();
            assert!(
                policy.live_bytes() <= policy.capacity_bytes() + policy.pinned_bytes(),
                "a shard holds more than its share"
            );
        }
    }
}
