//! Pipeline counters, read by `cairn pool iostat` and `cairn pool status`.

use std::sync::atomic::AtomicU64;

#[derive(Debug, Default)]
pub struct PipelineStats {
    pub blocks_written: AtomicU64,
    /// Bytes allocated and written, all copies.
    pub bytes_written: AtomicU64,
    pub blocks_read: AtomicU64,
    /// Synchronous reads from non-rotational devices issued in the caller's thread.
    pub direct_reads: AtomicU64,
    pub bytes_read: AtomicU64,
    pub blocks_freed: AtomicU64,
    pub checksum_errors: AtomicU64,
    pub repairs: AtomicU64,
    pub unrecoverable: AtomicU64,
    /// Self-describing blocks (intent log) written and read without a block pointer.
    pub raw_writes: AtomicU64,
    pub raw_bytes_written: AtomicU64,
    pub raw_reads: AtomicU64,
}
