//! arcstat counters: hits and misses per (demand | prefetch) x (data | metadata), `ArcStats`
//! (the named values `cairn stat arc` prints), and the header cost per cached block.
//!
//! Invariant: counters only grow (relaxed atomics; a snapshot is not one atomic view). How it
//! fits: a leaf of `read` — `read_cache`'s `Shared` holds the `Counters` and builds `ArcStats`.

use crate::cache::{BlockClass, CacheSnapshot};
use crate::policy::Access;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// One hit/miss counter per (demand | prefetch) x (data | metadata).
#[derive(Default)]
pub(super) struct ClassCounters {
    pub(super) hits: AtomicU64,
    /// Found in flight (another reader's I/O).
    pub(super) iohits: AtomicU64,
    pub(super) misses: AtomicU64,
}

#[derive(Default)]
pub(super) struct Counters {
    /// [demand data, demand metadata, prefetch data, prefetch metadata]
    pub(super) classes: [ClassCounters; 4],
    /// Demand reads that raised a read-ahead I/O's priority.
    pub(super) promotions: AtomicU64,
    /// Read-ahead dropped because the prefetch queue was full.
    pub(super) prefetch_dropped: AtomicU64,
    /// Blocks cached as they were written (metadata at txg sync).
    pub(super) written_inserts: AtomicU64,
    /// Blocks read but not cached (primarycache).
    pub(super) uncached_reads: AtomicU64,
    pub(super) shrinks: AtomicU64,
    pub(super) grows: AtomicU64,
}

pub(super) fn class_index(access: Access, class: BlockClass) -> usize {
    match (access, class) {
        (Access::Demand, BlockClass::Data) => 0,
        (Access::Demand, BlockClass::Metadata) => 1,
        (Access::Prefetch, BlockClass::Data) => 2,
        (Access::Prefetch, BlockClass::Metadata) => 3,
    }
}

/// Everything `cairn stat arc` shows, at one instant.
#[derive(Debug, Clone, Default)]
pub struct ArcStats {
    /// (name, value) in display order; names follow ZFS's arcstats where one exists.
    pub fields: Vec<(&'static str, u64)>,
}

impl ArcStats {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.fields
            .iter()
            .find(|(field, _)| *field == name)
            .map(|&(_, value)| value)
    }
}

/// What one cached block costs in headers: its entry in the policy's slab, its share of the
/// index (buckets per indexed entry, at the table's current load), and the frequency sketch's
/// share per 4 KiB of `arc_max` (the sketch is sized for it, one slot per 4 KiB).
/// Ghost entries cost an entry and an index share each too; `hdr_size` counts them.
pub(super) fn header_bytes_per_block(snapshot: &CacheSnapshot, max_bytes: u64) -> u64 {
    let (data, meta) = (&snapshot.data.sizes, &snapshot.metadata.sizes);
    let entry = crate::ArcPolicy::<Arc<[u8]>>::entry_bytes() as u64;
    let index = (data.index_bytes + meta.index_bytes)
        .checked_div(data.indexed_entries + meta.indexed_entries)
        .unwrap_or(0);
    let sketch = (data.sketch_bytes + meta.sketch_bytes)
        .checked_div(max_bytes / 4096)
        .unwrap_or(0);
    entry + index + sketch
}
