//! # cairn-format: the bytes on disk
//!
//! The pool's own structures are defined here: labels, the uberblock ring, block pointers,
//! dnodes, object-set roots, compressed blocks, space-log blocks, intent-log blocks and the
//! intent-log chain header. Layers above define what they keep inside objects and log records:
//! the dataset directory (`cairn-dataset`, directory.rs), hashed maps (`cairn-object`, map.rs),
//! a filesystem's master node, inode attributes and log records (`cairn-fs`: lib.rs, attrs.rs,
//! log.rs); a cache device, which is no part of the pool, has its own layout (`cairn-l2arc`,
//! layout.rs). `docs/format.md` describes all of them. This crate does no I/O, spawns no
//! threads and reads no clock; it turns bytes into typed values and back.
//!
//! ```text
//!  device:  | L0 | L1 | reserved | data region (metaslabs) ......... | L2 | L3 |
//!  label:   | blank 16K | config header + postcard blob | uberblock ring (32 x 4K) |
//!  uberblock ──root_bp──▶ MOS object set ──dnode 1──▶ dataset directory ──▶ dataset object sets
//!            └─space_log_bp──▶ newest space-log block ──prev──▶ ... ──▶ checkpoint
//!  dataset object set ──intent-log header, per lane──▶ head log block ──next──▶ ... ──▶ (end)
//! ```
//!
//! Invariants:
//! - All integers are little-endian; fixed structs are `zerocopy` types whose sizes are asserted
//!   at compile time (`const _: () = assert!(...)`), and `docs/format.md` is checked against the
//!   constants by a test (`tests/format_doc.rs`).
//! - Decoders never trust a length, offset or count read from disk: every decoder returns
//!   `FormatError` on arbitrary bytes and never panics (property-tested and fuzzed).
//! - A block pointer carries the checksum of the block it points to; self-describing blocks
//!   (label config, uberblock, intent-log blocks) carry an embedded checksum of their own bytes.
//!
//! Room is left, by reserved enum values and reserved bytes, for compression, dedup, snapshots
//! and raidz; readers reject values they do not understand instead of guessing.

pub mod blkptr;
pub mod checksum;
pub mod compress;
pub mod dnode;
pub mod error;
pub mod intent_log;
pub mod label;
pub mod raidz;
pub mod send_package;
pub mod send_stream;
pub mod send_token;
pub mod spacelog;
pub mod uberblock;

pub use blkptr::{BlockPointer, Compression, Dva, ObjectType};
pub use checksum::{Checksum, ChecksumAlgorithm};
pub use dnode::{Dnode, ObjsetPhys, ObjsetType};
pub use error::FormatError;
pub use intent_log::{
    ChainPosition, IntentLogHeader, LaneHead, LogBlock, LogRecord, LogRecordKind,
};
pub use label::{
    LabelConfig, LabelIdentity, LeafConfig, PoolState, TopVdevConfig, TopVdevKind, VdevRole,
    VdevTreeConfig,
};
pub use spacelog::{SpaceLogBlock, SpaceLogEntry, SpaceLogKind, SpaceOp};
pub use uberblock::Uberblock;

/// Version of the on-disk format written by this build. Readers refuse newer versions.
///
/// Version 2 is the format of issue 34 (the dataset directory as MOS map records, the
/// snapshot table and deadlists, compressed indirect blocks). Every earlier pool says 1,
/// whichever of several incompatible layouts it has (before issue 34, and in the middle of
/// it): this build cannot tell them apart, so it reads none of them (`FORMAT_VERSION_MIN`).
pub const FORMAT_VERSION: u64 = 2;

/// Oldest on-disk format version this build reads. Labels and uberblocks of an older version
/// are refused (`FormatError::UnreadableVersion`) before anything they point to is read:
/// there was no released build before version 2, so there is no upgrade path.
pub const FORMAT_VERSION_MIN: u64 = 2;

const _: () = assert!(FORMAT_VERSION_MIN <= FORMAT_VERSION);

/// Whether this build reads pools of format `version` (`FORMAT_VERSION_MIN..=FORMAT_VERSION`).
pub fn format_version_readable(version: u64) -> bool {
    (FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version)
}

/// The format versions this build reads, as words for an error message.
pub fn readable_format_versions() -> String {
    if FORMAT_VERSION_MIN == FORMAT_VERSION {
        format!("format version {FORMAT_VERSION} only")
    } else {
        format!("format versions {FORMAT_VERSION_MIN} to {FORMAT_VERSION}")
    }
}

/// Smallest unit of allocation and I/O alignment, as a power of two (4 KiB).
pub const ASHIFT_DEFAULT: u8 = 12;
/// Smallest ashift a pool may use (512-byte sectors).
pub const ASHIFT_MIN: u8 = 9;
/// Largest ashift a pool may use (64 KiB sectors).
pub const ASHIFT_MAX: u8 = 16;

/// Largest logical or physical size of one block.
pub const BLOCK_SIZE_MAX: u32 = 16 * 1024 * 1024;
/// Every block size is a multiple of this.
pub const BLOCK_SIZE_GRANULE: u32 = 512;

const _: () = assert!(BLOCK_SIZE_MAX.is_multiple_of(BLOCK_SIZE_GRANULE));
