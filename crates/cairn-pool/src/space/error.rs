//! Errors of the space allocator.
//!
//! Every variant names the extent it is about (vdev, byte offset, byte length) so that a message
//! alone is enough to find the block in `cairn pool check` output. Range-tree errors carry no
//! vdev because a tree does not know where it lives; the allocator reports its own variants,
//! which do. Replay wraps the first bad entry with its position in the log.

use cairn_format::SpaceLogEntry;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpaceError {
    /// A zero-length extent, or one whose end does not fit in a u64.
    #[error("invalid extent at offset {offset:#x} length {length:#x}: empty or past 2^64")]
    InvalidExtent { offset: u64, length: u64 },

    /// `RangeTree::add` of an extent that overlaps a segment already in the tree.
    #[error(
        "extent [{offset:#x}, +{length:#x}) overlaps segment [{segment_start:#x}, {segment_end:#x})"
    )]
    RangeOverlap {
        offset: u64,
        length: u64,
        segment_start: u64,
        segment_end: u64,
    },

    /// `RangeTree::remove` of an extent that is not wholly inside one segment.
    #[error("extent [{offset:#x}, +{length:#x}) is not wholly present in the tree")]
    RangeNotPresent { offset: u64, length: u64 },

    /// A DVA or log entry names a top-level vdev the allocator does not have.
    #[error("vdev {vdev} is not a top-level vdev of this pool")]
    UnknownVdev { vdev: u32 },

    /// An extent reaches past the end of its vdev's data region.
    #[error(
        "extent [{offset:#x}, +{length:#x}) on vdev {vdev} is outside its data region of {size_bytes:#x} bytes"
    )]
    OutOfRange {
        vdev: u32,
        offset: u64,
        length: u64,
        size_bytes: u64,
    },

    /// An extent whose offset or length is not a multiple of the vdev's sector size.
    #[error("extent [{offset:#x}, +{length:#x}) on vdev {vdev} is not aligned to 2^{ashift} bytes")]
    Misaligned {
        vdev: u32,
        offset: u64,
        length: u64,
        ashift: u8,
    },

    /// Free of space that is not (wholly) allocated: already free, or freed and still deferred.
    #[error(
        "free of extent [{offset:#x}, +{length:#x}) on vdev {vdev} which is not wholly allocated (double free?)"
    )]
    DoubleFree { vdev: u32, offset: u64, length: u64 },

    /// Allocation (replay) of space that is not wholly free.
    #[error("extent [{offset:#x}, +{length:#x}) on vdev {vdev} is already allocated or deferred")]
    AlreadyAllocated { vdev: u32, offset: u64, length: u64 },

    /// `unallocate` of an extent that was not allocated in that txg (or whose changes were
    /// already taken).
    #[error(
        "extent [{offset:#x}, +{length:#x}) on vdev {vdev} was not allocated in pending txg {txg}"
    )]
    NotAllocatedInTxg {
        vdev: u32,
        offset: u64,
        length: u64,
        txg: u64,
    },

    /// No top-level vdev has a free segment large enough.
    #[error("no space for an allocation of {size_bytes} bytes")]
    NoSpace { size_bytes: u64 },

    /// An allocation request of zero bytes.
    #[error("invalid allocation size {size_bytes}")]
    InvalidSize { size_bytes: u64 },

    /// An allocation or free stamped with a txg that has already synced.
    #[error("txg {txg} has already synced (last synced txg {synced_txg})")]
    TxgAlreadySynced { txg: u64, synced_txg: u64 },

    /// A space-log free stamped with a txg after the one being imported.
    #[error("free of txg {txg} is newer than the imported txg {current_txg}")]
    FutureTxg { txg: u64, current_txg: u64 },

    /// A `VdevSpace` the allocator cannot work with.
    #[error("invalid space configuration for vdev {vdev}: {reason}")]
    InvalidConfig { vdev: u32, reason: String },

    /// `remove_vdev` of a vdev that still holds blocks, frees in their defer window, or changes
    /// not yet taken for the space log.
    #[error(
        "vdev {vdev} is still in use: {allocated_bytes} bytes allocated, {deferred_bytes} bytes freed but not yet reusable, {pending_changes} space-log changes not yet written"
    )]
    VdevInUse {
        vdev: u32,
        allocated_bytes: u64,
        deferred_bytes: u64,
        pending_changes: usize,
    },

    /// A free the allocator refused, kept as its fault: the pool must not commit another txg.
    #[error("a free in txg {txg} was refused")]
    FreeRefused {
        txg: u64,
        #[source]
        source: Box<SpaceError>,
    },

    /// A space-log entry that contradicts the state built from the entries before it.
    #[error("space log entry #{index} {entry:?} is inconsistent")]
    Replay {
        index: usize,
        entry: SpaceLogEntry,
        #[source]
        source: Box<SpaceError>,
    },
}
