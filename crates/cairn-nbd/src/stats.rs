//! Per-export I/O statistics: operation counts, bytes, errors and latency histograms.
//!
//! One [`ExportStats`] per export name lives in the server for its whole life (connections come
//! and go; the numbers accumulate), behind a mutex held only to record one operation. Snapshots
//! are plain clones, so a front end can print them and diff two snapshots taken an interval
//! apart ([`ExportStats::since`]) the way `iostat` does. Latencies are microseconds from the
//! moment a request was fully received to the moment its result was known (before the reply is
//! queued), recorded in HDR histograms with two significant digits (1 % resolution, ~20 KiB
//! each), saturating at one minute.

pub use cairn_metrics::OpStats;
use std::time::Duration;

/// The kinds of operation counted separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
    BlockStatus,
    Cache,
}

/// A snapshot of one export's statistics.
#[derive(Clone, Debug, Default)]
pub struct ExportStats {
    pub read: OpStats,
    pub write: OpStats,
    pub flush: OpStats,
    pub trim: OpStats,
    pub write_zeroes: OpStats,
    pub block_status: OpStats,
    pub cache: OpStats,
    /// Requests refused before reaching an operation (unknown commands); the per-operation
    /// `errors` fields count the rest.
    pub invalid_requests: u64,
    /// Connections that entered transmission on this export.
    pub connections: u64,
}

impl ExportStats {
    /// The counters of one kind of operation.
    pub fn op(&self, kind: OpKind) -> &OpStats {
        match kind {
            OpKind::Read => &self.read,
            OpKind::Write => &self.write,
            OpKind::Flush => &self.flush,
            OpKind::Trim => &self.trim,
            OpKind::WriteZeroes => &self.write_zeroes,
            OpKind::BlockStatus => &self.block_status,
            OpKind::Cache => &self.cache,
        }
    }

    fn op_mut(&mut self, kind: OpKind) -> &mut OpStats {
        match kind {
            OpKind::Read => &mut self.read,
            OpKind::Write => &mut self.write,
            OpKind::Flush => &mut self.flush,
            OpKind::Trim => &mut self.trim,
            OpKind::WriteZeroes => &mut self.write_zeroes,
            OpKind::BlockStatus => &mut self.block_status,
            OpKind::Cache => &mut self.cache,
        }
    }

    /// Records a request refused before reaching the export (bad range, alignment, flags,
    /// read-only): counted as an operation and an error, but kept out of the latency histogram
    /// so that it describes I/O only.
    pub fn record_refused(&mut self, kind: OpKind) {
        let op = self.op_mut(kind);
        op.ops += 1;
        op.errors += 1;
    }

    /// Records one request the export carried out (successfully or not).
    pub fn record(&mut self, kind: OpKind, bytes: u64, ok: bool, latency: Duration) {
        self.op_mut(kind).record(bytes, ok, latency);
    }

    /// Total errors of all kinds, including refused unknown commands.
    pub fn errors(&self) -> u64 {
        let ops = [
            &self.read,
            &self.write,
            &self.flush,
            &self.trim,
            &self.write_zeroes,
            &self.block_status,
            &self.cache,
        ];
        self.invalid_requests + ops.iter().map(|o| o.errors).sum::<u64>()
    }

    /// What happened between `earlier` (a previous snapshot of the same export) and `self`.
    pub fn since(&self, earlier: &ExportStats) -> ExportStats {
        ExportStats {
            read: self.read.since(&earlier.read),
            write: self.write.since(&earlier.write),
            flush: self.flush.since(&earlier.flush),
            trim: self.trim.since(&earlier.trim),
            write_zeroes: self.write_zeroes.since(&earlier.write_zeroes),
            block_status: self.block_status.since(&earlier.block_status),
            cache: self.cache.since(&earlier.cache),
            invalid_requests: self
                .invalid_requests
                .saturating_sub(earlier.invalid_requests),
            connections: self.connections.saturating_sub(earlier.connections),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_and_diff() {
        let mut s = ExportStats::default();
        s.record(OpKind::Read, 4096, true, Duration::from_micros(100));
        let before = s.clone();
        s.record(OpKind::Read, 4096, true, Duration::from_micros(300));
        s.record(OpKind::Write, 512, false, Duration::from_micros(50));
        s.record_refused(OpKind::Write);
        s.invalid_requests += 1;
        let d = s.since(&before);
        assert_eq!(d.read.ops, 1);
        assert_eq!(d.read.bytes, 4096);
        assert_eq!(d.read.latency_us.len(), 1);
        assert!((297..=303).contains(&d.read.latency_quantile_us(0.5)));
        assert_eq!(d.write.ops, 2);
        assert_eq!(d.write.bytes, 0);
        assert_eq!(d.write.errors, 2);
        assert_eq!(d.write.latency_us.len(), 1);
        assert_eq!(d.errors(), 3);
        assert_eq!(s.read.ops, 2);
        assert_eq!(s.op(OpKind::Read).ops, 2);
    }
}
