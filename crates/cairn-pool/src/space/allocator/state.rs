//! The allocator's data: `SpaceAllocator` itself (its vdevs, rotor, deferred frees, per-txg
//! changes, floors and fault) and the types it is given and reports (`VdevSpace`,
//! `VdevSpaceStats`, `SpaceStats`, `DeferredFree`), with the per-txg change record
//! (`TxgChanges`).
//!
//! Invariants: those of the `allocator` module comment; `vdevs` stays sorted by vdev id. The
//! operations are `impl SpaceAllocator` blocks in the siblings above: `vdevs` (the vdev set),
//! `placement` (allocating), `frees` (freeing, deferral, change records), `space_log` (replay,
//! checkpoints) and `accounting` (queries, invariants). This file uses no sibling.

use crate::space::SpaceError;
use crate::space::class::SpaceClass;
use crate::space::range_tree::RangeTree;
use crate::space::top_vdev::TopVdevSpace;
use cairn_format::raidz::RaidzGeometry;
use std::collections::BTreeMap;

/// Space of one top-level vdev, as the allocator is given it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VdevSpace {
    pub vdev: u32,
    pub class: SpaceClass,
    /// Bytes of the data region (DVA offsets run from 0 to this); rounded down to the sector.
    pub data_size_bytes: u64,
    /// log2 of the sector size: the allocation unit and alignment.
    pub ashift: u8,
    /// log2 of the metaslab size (see `metaslab_shift_for`).
    pub metaslab_shift: u8,
    /// The layout of a raidz vdev: a block then allocates `RaidzGeometry::asize` bytes (its
    /// data, parity and skip sectors) instead of its size rounded to the sector.
    pub raidz: Option<RaidzGeometry>,
}

/// Space numbers of one top-level vdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevSpaceStats {
    pub vdev: u32,
    pub class: SpaceClass,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub deferred_bytes: u64,
    pub free_bytes: u64,
    pub fragmentation_percent: u8,
    pub metaslab_count: u64,
}

/// Space numbers of the pool (sums over the vdevs, which are listed in `vdevs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceStats {
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub deferred_bytes: u64,
    pub free_bytes: u64,
    /// Free-space-weighted average of the metaslabs' fragmentation.
    pub fragmentation_percent: u8,
    pub metaslab_count: u64,
    pub vdevs: Vec<VdevSpaceStats>,
}

/// A freed extent waiting for its txg to be `DEFER_TXGS` behind the last synced one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeferredFree {
    pub txg: u64,
    pub vdev: u32,
    pub offset: u64,
    pub length: u64,
}

/// Allocations and frees of one txg, per vdev.
#[derive(Debug, Clone, Default)]
pub(super) struct TxgChanges {
    pub(super) allocs: BTreeMap<u32, RangeTree>,
    pub(super) frees: BTreeMap<u32, RangeTree>,
}

#[derive(Debug, Clone)]
pub struct SpaceAllocator {
    /// Sorted by vdev id.
    pub(super) vdevs: Vec<TopVdevSpace>,
    /// Index (into `vdevs`) of the vdev primary copies go to now.
    pub(super) rotor: usize,
    /// Bytes placed on the rotor vdev since it became the rotor.
    pub(super) rotor_bytes: u64,
    /// Bytes the rotor vdev takes before the rotor moves on.
    pub(super) rotor_chunk_bytes: u64,
    /// txg -> vdev -> extents freed in that txg and not yet reusable.
    pub(super) deferred_by_txg: BTreeMap<u64, BTreeMap<u32, RangeTree>>,
    /// txg -> changes not yet taken by `take_changes`.
    pub(super) changes: BTreeMap<u64, TxgChanges>,
    /// Highest txg passed to `sync_done` (or `replay`).
    pub(super) synced_txg: Option<u64>,
    /// Frees made in this txg or later stay deferred regardless of age while set: a scan
    /// (scrub, check) walking an older tree must never see that space reused.
    pub(super) release_floor: Option<u64>,
    /// The same for reads in flight (`set_read_floor`).
    pub(super) read_floor: Option<u64>,
    /// Log vdevs with an id at or above this are tried first for the next log block (the one
    /// after the last used, wrapping): an id rather than an index, so it stays valid whatever
    /// vdevs are added or removed.
    pub(super) log_rotor_vdev: u32,
    /// The first free this allocator refused (see "Faults" above); never cleared.
    pub(super) fault: Option<SpaceError>,
}
