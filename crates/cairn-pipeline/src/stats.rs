//! Pipeline counters, read by `cairn pool iostat` and `cairn pool status`.

use std::sync::atomic::{AtomicU64, Ordering};

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

impl PipelineStats {
    /// Every counter as (name, value), for `cairn stat io`.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        vec![
            ("blocks_written", load(&self.blocks_written)),
            ("bytes_written", load(&self.bytes_written)),
            ("blocks_read", load(&self.blocks_read)),
            ("direct_reads", load(&self.direct_reads)),
            ("bytes_read", load(&self.bytes_read)),
            ("blocks_freed", load(&self.blocks_freed)),
            ("checksum_errors", load(&self.checksum_errors)),
            ("repairs", load(&self.repairs)),
            ("unrecoverable", load(&self.unrecoverable)),
            ("raw_writes", load(&self.raw_writes)),
            ("raw_bytes_written", load(&self.raw_bytes_written)),
            ("raw_reads", load(&self.raw_reads)),
        ]
    }
}
