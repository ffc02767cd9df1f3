//! # cairn-dataset: the dataset layer (ZFS's DSL) and block volumes
//!
//! A dataset is a named object set with properties: the pool's root dataset (`tank`), volumes
//! (`tank/vol`), filesystems (`tank/home`, whose POSIX layer is `cairn-fs`, built on this
//! crate as ZFS's ZPL is on its DSL), their snapshots, and later clones. The *dataset directory* —
//! every dataset's name, kind, properties, space used and object-set root pointer — is a
//! hashed map in the pool's meta object set, one record per dataset (`directory_records.rs`),
//! so a txg rewrites only the records it changed: 1,000 datasets cost no more per txg than
//! one (snapshots are not in it: their table is a second map beside it).
//!
//! Properties (`properties/`): one public table of names, types, defaults and inheritance,
//! and every property of a dataset parsed once into typed values (`DatasetProperties`): the
//! layers above act on those, never on property text. What volumes and files share when they
//! write blocks (how a change enters a txg: space check, throttle, locks, hold; splitting a
//! range into whole and partial blocks, holes, the stripe locks, writes in place, when a change
//! commits) is `block_write.rs`. Snapshots (`snapshots.rs`): every snapshot's record, the
//! heads' and snapshots' deadlists (`deadlist.rs`: the blocks a head stopped referencing while
//! a snapshot still does, counted by the snapshot interval they were born in, so snapshot space
//! is a sum over a few totals), and the background frees of destroys; `names.rs` checks
//! dataset, snapshot and bookmark names.
//!
//! A volume is object 1 of its object set: a sparse array of `volblocksize` blocks. The volume
//! API (`Volume`) works at byte offsets — read, write, flush, trim, write-zeroes — and is what the
//! NBD server sits on. Unwritten and trimmed ranges are holes: they read as zeros and use no
//! space. A partial-block write patches its bytes in without reading the old block (the object
//! set merges them when the txg syncs) under a per-block stripe lock, so concurrent writers to
//! one block never lose each other's bytes.
//!
//! Space: volumes and filesystems (cairn-fs) ask the same `SpaceCheck` (`space_check.rs`)
//! before a change that can take room; its refusal names a quota (`QuotaExceeded`) or the
//! pool's room (`NoSpace`). The engine supplies the one policy behind it.
//!
//! Durability: `write` returns once the change is in the open txg (like a disk's volatile
//! cache); `flush` returns once every write that completed before it is in a synced txg.

pub mod block_write;
pub mod bookmarks;
mod clones;
pub mod deadlist;
pub mod directory;
pub mod directory_records;
mod figure_cache;
pub mod frees;
mod names;
pub mod properties;
mod records;
mod snapshot_index;
pub mod snapshots;
pub mod space;
pub mod space_check;
mod volume;

pub use directory::{
    DatasetDirectory, DatasetRecord, LeafErrorRecord, MISSED_TXGS_VERSION, MissedTxgs,
    MissedTxgsTable, ResilverRecord, ScrubRecord,
};
pub use directory_records::{DirectoryKey, DirectoryRecord, WrittenRecords};
pub use names::{
    BookmarkName, NAME_BYTES_MAX, RECEIVE_SUFFIX, SnapshotName, is_hidden, receive_name,
    validate_name, validate_stored_name,
};
pub use properties::{DatasetProperties, SyncMode};
pub use space_check::{SpaceAsk, SpaceCheck, SpaceRefusal};
pub use volume::{VOLUME_OBJECT, Volume, VolumeStats, WriteOptions};

use cairn_device::ErrorClass;
use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
pub enum DatasetKind {
    Filesystem,
    Volume,
}

impl DatasetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetKind::Filesystem => "filesystem",
            DatasetKind::Volume => "volume",
        }
    }
}

#[derive(Debug, Error)]
pub enum DatasetError {
    #[error("unknown property '{name}' (known: {known})")]
    UnknownProperty { name: String, known: String },
    #[error("invalid value '{value}' for property '{name}': {reason}")]
    InvalidProperty {
        name: String,
        value: String,
        reason: String,
    },
    #[error("property '{name}' {reason}")]
    PropertyNotAllowed { name: String, reason: String },
    #[error("dataset '{0}' does not exist")]
    NoSuchDataset(String),
    #[error("dataset '{0}' already exists")]
    Exists(String),
    #[error("invalid dataset name '{name}': {reason}")]
    InvalidName { name: String, reason: String },
    #[error("dataset '{0}' is read-only")]
    ReadOnly(String),
    /// A dataset others depend on (its snapshots) cannot go while they exist.
    #[error("'{name}' has {what}")]
    HasDependents { name: String, what: String },
    #[error("{name}: {op} of {len} bytes at offset {offset} is outside the volume ({size} bytes)")]
    OutOfRange {
        name: String,
        op: &'static str,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("out of space in pool: {0}")]
    NoSpace(String),
    /// A `quota` or `refquota` (the dataset's, or an ancestor's `quota`) would be exceeded.
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// Reading or writing the dataset failed below it; the source says why (a device error,
    /// a block no copy of which verifies, a suspended pool), whole.
    #[error("{name}: I/O error")]
    Io {
        name: String,
        #[source]
        source: IoCause,
    },
    /// Replaying a logged write in place found a record or block that cannot be applied; the
    /// source, if any, is the read of the logged block that failed.
    #[error("{name}: replaying the write in place at offset {offset} (txg {txg}): {problem}")]
    Replay {
        name: String,
        offset: u64,
        txg: u64,
        problem: String,
        #[source]
        source: Option<Box<cairn_pipeline::PipelineError>>,
    },
    #[error("{name}: cannot open its read trace in {dir}")]
    ReadTrace {
        name: String,
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("dataset directory is damaged: {0}")]
    Corrupt(String),
    /// A volume whose data object, as read from disk, disagrees with its directory record.
    #[error("volume '{name}' is damaged: its data object {problem}")]
    DamagedVolume { name: String, problem: String },
    /// A record read from disk that checksummed correctly but holds a value this build must not
    /// use (a crafted or buggy image): the directory is refused as a whole at import.
    #[error("dataset directory is damaged: the record of dataset '{dataset}' is invalid")]
    InvalidRecord {
        dataset: String,
        #[source]
        source: Box<DatasetError>,
    },
}

/// Where an I/O error of a dataset came from. Transparent: each cause reads as itself, and its
/// own sources follow it in the chain.
#[derive(Debug, Error)]
pub enum IoCause {
    #[error(transparent)]
    Object(#[from] cairn_object::ObjectError),
    #[error(transparent)]
    Pipeline(#[from] cairn_pipeline::PipelineError),
    #[error(transparent)]
    Log(#[from] cairn_zil::ZilError),
    #[error(transparent)]
    Txg(#[from] cairn_pool::txg::TxgError),
}

impl IoCause {
    pub fn class(&self) -> ErrorClass {
        match self {
            IoCause::Object(err) => err.class(),
            IoCause::Pipeline(err) => err.class(),
            IoCause::Log(err) => err.class(),
            IoCause::Txg(err) => err.class(),
        }
    }
}

impl DatasetError {
    /// What the failure means to a client such as an NBD export (`ErrorClass::errno`), decided
    /// by the error's type down its chain of causes, never by its text:
    /// - a full pool is `NoSpace` (ENOSPC), from the space check or the allocator;
    /// - a quota the space check found exceeded is `QuotaExceeded` (EDQUOT; NBD, which has no
    ///   EDQUOT, answers it as ENOSPC);
    /// - a read-only dataset, or a pool imported read-only, is `ReadOnly` (EROFS);
    /// - a device error, unverifiable data, damaged metadata and a failed log commit are `Io`;
    /// - a suspended or faulted pool is `Io` (EIO) too, not `ReadOnly`: the export is not
    ///   read-only, its pool cannot write *now*, and `pool clear` may bring it back. ZFS with
    ///   `failmode=wait` would block the caller instead; a network client that blocks
    ///   forever holds the kernel's queue, so this pool answers at once (ZFS's
    ///   `failmode=continue`);
    /// - a bad range, name or value is `Invalid` (EINVAL).
    pub fn class(&self) -> ErrorClass {
        match self {
            DatasetError::UnknownProperty { .. }
            | DatasetError::InvalidProperty { .. }
            | DatasetError::PropertyNotAllowed { .. }
            | DatasetError::InvalidName { .. }
            | DatasetError::HasDependents { .. }
            | DatasetError::OutOfRange { .. } => ErrorClass::Invalid,
            DatasetError::NoSuchDataset(_) => ErrorClass::NotFound,
            DatasetError::Exists(_) => ErrorClass::Exists,
            DatasetError::ReadOnly(_) => ErrorClass::ReadOnly,
            DatasetError::NoSpace(_) => ErrorClass::NoSpace,
            DatasetError::QuotaExceeded(_) => ErrorClass::QuotaExceeded,
            DatasetError::Io { source, .. } => source.class(),
            DatasetError::Replay { .. }
            | DatasetError::ReadTrace { .. }
            | DatasetError::Corrupt(_)
            | DatasetError::DamagedVolume { .. }
            | DatasetError::InvalidRecord { .. } => ErrorClass::Io,
        }
    }

    /// `class` as a POSIX errno.
    pub fn errno(&self) -> i32 {
        self.class().errno()
    }
}
