//! # space: where blocks go
//!
//! The space allocator of the pool: which bytes of each top-level vdev's data region are free,
//! allocated, or freed-but-not-yet-reusable, and where the next block goes.
//!
//! ```text
//! SpaceAllocator                      pool: vdev rotor, ditto placement, deferred frees,
//!  │                                  per-txg change records, replay, checkpoint, slop
//!  └─ TopVdevSpace (one per vdev)     active metaslab per copy, weight index, deferred set
//!      └─ Metaslab (≈200 per vdev)    first-fit from a cursor below 96% full, best-fit above
//!          └─ RangeTree               free extents: by offset + by size + length histogram
//! ```
//!
//! Persistence is not done here: the engine drains `take_changes(txg)` into the pool-wide space
//! log (`cairn_format::spacelog`) and, when the log grows long, writes `checkpoint_entries`
//! instead; at import it feeds the chain back through `replay`. This module does no I/O, starts
//! no threads and reads no clock; every decision is a function of the calls made, in order.
//!
//! Invariants, checked by `SpaceAllocator::assert_invariants` (and property-tested):
//! - every byte is exactly one of free, allocated, deferred: `allocated + deferred + free ==
//!   size` per metaslab, vdev and pool; no two allocations ever overlap;
//! - a freed extent is not reusable until txg `free_txg + DEFER_TXGS` has synced;
//! - replaying every change ever taken, or a checkpoint, rebuilds the same allocated and
//!   deferred sets;
//! - inconsistent input (double free, extent outside a vdev, log contradicting itself) is an
//!   error, never a panic.

mod allocator;
mod class;
mod error;
mod metaslab;
mod range_tree;
mod top_vdev;

pub use allocator::{
    DeferredFree, ROTOR_CHUNK_BYTES, SLOP_BYTES_MAX, SLOP_BYTES_MIN, SLOP_SHIFT, SpaceAllocator,
    SpaceStats, VdevSpace, VdevSpaceStats,
};
pub use class::SpaceClass;
pub use error::SpaceError;
pub use metaslab::{
    BEST_FIT_FULL_PERCENT, FIRST_FIT_SEGMENTS_VISIT_MAX, METASLAB_COUNT_MAX, METASLAB_COUNT_TARGET,
    METASLAB_SHIFT_MAX, METASLAB_SHIFT_MIN, Metaslab, metaslab_shift_for,
};
pub use range_tree::{HISTOGRAM_BUCKETS, RangeTree};
pub use top_vdev::{ACTIVE_KEEP_SEGMENT_BYTES, ACTIVE_SWITCH_BUCKETS};

/// Txgs a free waits before its space is reused: freed in txg `t`, reusable once txg `t + 3` has
/// synced. The uberblock ring keeps older roots that an import may fall back to (a torn newest
/// uberblock, a rollback of the last txgs); their blocks must still hold their data. Three
/// covers the open, quiescing and syncing txgs in flight at any time.
pub const DEFER_TXGS: u64 = 3;
