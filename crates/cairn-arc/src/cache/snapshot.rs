//! What `BlockCache::snapshot` reports: counters and sizes per class, summed over the shards,
//! and the helpers that sum them.
//!
//! Invariant: plain copies, taken shard by shard (not one atomic view of the whole cache). How
//! it fits: uses only `policy`'s types; `shard` counts ghost hits with `ghost_hits`, and
//! `read::ReadCache` turns a snapshot into arcstat counters.

use crate::policy::{PolicySizes, PolicyStats};

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

pub(super) fn add_stats(total: &mut PolicyStats, s: &PolicyStats) {
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

pub(super) fn add_sizes(total: &mut PolicySizes, z: &PolicySizes) {
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

pub(super) fn ghost_hits(stats: &PolicyStats) -> u64 {
    stats.mru_ghost_hits + stats.mfu_ghost_hits
}
