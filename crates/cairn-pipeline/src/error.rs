//! The pipeline's errors: `PipelineError` (what a caller of a read or a write gets), `CopyError`
//! (why one copy of a block could not be used) and `PointerProblem` (a pointer that decoded
//! cleanly but names something the pool does not have), with the constructors the other files
//! share.
//!
//! Invariants: an error keeps its cause as its `source()`, never as text, so the layers above
//! can classify it. This file uses no sibling: every other file of the crate sits above it.

use cairn_device::{DeviceError, ErrorClass};
use cairn_format::compress::DecompressError;
use cairn_format::{BlockPointer, Dva, ObjectType};
use cairn_pool::space::SpaceError;
use thiserror::Error;

/// Errors keep what caused them as their `source()` (a device's error, the allocator's
/// refusal), never as text: the layers above classify them (`class`) for clients, and people
/// read the whole chain.
#[derive(Debug, Error)]
pub enum PipelineError {
    /// The allocator refused the block: almost always a full pool (`SpaceError::NoSpace`).
    #[error("cannot allocate the block")]
    NoSpace(#[source] SpaceError),
    /// No copy of the block verified; the source is why the last copy tried failed.
    #[error(
        "unrecoverable block (type {object_type:?} level {level}, birth txg {birth_txg}, first copy vdev {vdev} offset {offset})"
    )]
    Unrecoverable {
        object_type: ObjectType,
        level: u8,
        birth_txg: u64,
        vdev: u32,
        offset: u64,
        #[source]
        cause: Box<CopyError>,
    },
    /// Some top-level vdev got no copy of a write; the source is a device error behind it (none
    /// when every child was faulted before the write was issued).
    #[error("write failed on every copy: {reason}")]
    WriteFailed {
        reason: String,
        #[source]
        source: Option<Box<DeviceError>>,
    },
    /// A copy verified against its checksum but would not decompress: the block was written
    /// wrongly (or by a newer build), so no other copy can be better.
    #[error(
        "block (type {object_type:?} level {level}, birth txg {birth_txg}) cannot be decompressed"
    )]
    Decompress {
        object_type: ObjectType,
        level: u8,
        birth_txg: u64,
        #[source]
        cause: DecompressError,
    },
    /// A decoded block pointer that cannot belong to this pool (`BlockIo::check_pointer`).
    #[error("{what}: invalid block pointer")]
    InvalidPointer {
        what: String,
        #[source]
        problem: PointerProblem,
    },
}

impl PipelineError {
    /// What the failure means to a client: a full pool is "no space"; everything else here is
    /// data that could not be read or written (a block no copy of which verifies is EIO, as in
    /// ZFS).
    pub fn class(&self) -> ErrorClass {
        match self {
            PipelineError::NoSpace(SpaceError::NoSpace { .. }) => ErrorClass::NoSpace,
            // Any other refusal is a bug or damage in the space maps, not a full pool.
            PipelineError::NoSpace(_) => ErrorClass::Io,
            PipelineError::Unrecoverable { .. }
            | PipelineError::WriteFailed { .. }
            | PipelineError::Decompress { .. }
            | PipelineError::InvalidPointer { .. } => ErrorClass::Io,
        }
    }
}

/// Why one copy of a block could not be used.
#[derive(Debug, Error)]
pub enum CopyError {
    #[error("{device}: device unavailable")]
    Unavailable { device: String },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("checksum mismatch on {device} at offset {offset}")]
    Checksum { device: String, offset: u64 },
    #[error("copy at vdev {vdev} offset {offset} is outside the pool")]
    OutsidePool { vdev: u32, offset: u64 },
    #[error("no readable copy")]
    NoCopy,
    /// A copy on a raidz vdev that no combination of its columns rebuilt.
    #[error("{vdev}: {reason}")]
    Raidz { vdev: String, reason: String },
}

/// Why a block pointer that decoded cleanly still cannot belong to this pool: the decoder
/// checks what a pointer says about itself, this what it says about the pool.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PointerProblem {
    #[error("copy {copy} names vdev {vdev}, which the pool does not have")]
    UnknownVdev { copy: usize, vdev: u32 },
    #[error(
        "copy {copy} [{offset:#x}, +{asize:#x}) is outside the data region of vdev {vdev} ({size_bytes:#x} bytes)"
    )]
    OutOfRange {
        copy: usize,
        vdev: u32,
        offset: u64,
        asize: u32,
        size_bytes: u64,
    },
    #[error("born in txg {birth_txg}, after txg {newest_txg}, the newest the pool has")]
    FutureBirth { birth_txg: u64, newest_txg: u64 },
}

pub(crate) fn decompress_error(bp: &BlockPointer, cause: DecompressError) -> PipelineError {
    PipelineError::Decompress {
        object_type: bp.object_type,
        level: bp.level,
        birth_txg: bp.birth_txg,
        cause,
    }
}

pub(crate) fn outside_pool(dva: &Dva) -> CopyError {
    CopyError::OutsidePool {
        vdev: dva.vdev,
        offset: dva.offset,
    }
}

pub(crate) fn unrecoverable(bp: &BlockPointer, cause: CopyError) -> PipelineError {
    let first = bp.copies().first().copied().unwrap_or_default();
    PipelineError::Unrecoverable {
        object_type: bp.object_type,
        level: bp.level,
        birth_txg: bp.birth_txg,
        vdev: first.vdev,
        offset: first.offset,
        cause: Box::new(cause),
    }
}
