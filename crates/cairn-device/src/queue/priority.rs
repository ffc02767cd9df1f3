//! The priority classes of the queue (`IoClass`: their order, caps of active requests, which
//! are FIFO and which offset-ordered) and the aggregation limits (`AGGREGATE_MAX_BYTES`,
//! `AGGREGATE_MAX_BUFFERS`, `READ_GAP_MAX_BYTES`).
//!
//! Invariants: `IoClass::ALL` lists every class once, highest priority first, and a class's
//! index in it is its slot in every per-class array (`CLASSES` long). This file uses no
//! sibling: every other file of the queue sits above it.

/// Largest aggregate, gaps included.
pub const AGGREGATE_MAX_BYTES: u64 = 1 << 20;
/// Most buffers in one vectored call (gap buffers included).
pub const AGGREGATE_MAX_BUFFERS: usize = 64;
/// Largest hole between two reads that are still merged.
pub const READ_GAP_MAX_BYTES: u64 = 32 << 10;

/// Priority classes, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IoClass {
    SyncRead,
    /// A read from a cache device for a reader waiting on it.
    CacheRead,
    SyncWrite,
    Log,
    AsyncRead,
    AsyncWrite,
    /// Feeding a cache device (and its segment headers and summaries).
    CacheWrite,
    Scrub,
}

/// Number of classes.
pub const CLASSES: usize = IoClass::ALL.len();

impl IoClass {
    /// All classes in priority order.
    pub const ALL: [IoClass; 8] = [
        IoClass::SyncRead,
        IoClass::CacheRead,
        IoClass::SyncWrite,
        IoClass::Log,
        IoClass::AsyncRead,
        IoClass::AsyncWrite,
        IoClass::CacheWrite,
        IoClass::Scrub,
    ];

    pub fn name(self) -> &'static str {
        match self {
            IoClass::SyncRead => "sync-read",
            IoClass::CacheRead => "cache-read",
            IoClass::SyncWrite => "sync-write",
            IoClass::Log => "log",
            IoClass::AsyncRead => "async-read",
            IoClass::AsyncWrite => "async-write",
            IoClass::CacheWrite => "cache-write",
            IoClass::Scrub => "scrub",
        }
    }

    /// Most aggregates of this class in service at once.
    pub fn max_active(self) -> usize {
        match self {
            IoClass::SyncRead | IoClass::CacheRead | IoClass::SyncWrite | IoClass::Log => 10,
            IoClass::AsyncWrite => 10,
            IoClass::AsyncRead => 3,
            IoClass::CacheWrite | IoClass::Scrub => 2,
        }
    }

    /// FIFO classes keep submission order; the others are served by offset.
    pub fn is_fifo(self) -> bool {
        matches!(
            self,
            IoClass::SyncRead
                | IoClass::CacheRead
                | IoClass::SyncWrite
                | IoClass::Log
                | IoClass::CacheWrite
        )
    }

    /// The class's place in `ALL` (and in `QueueStats::classes`).
    pub fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dir {
    Read = 0,
    Write = 1,
}
