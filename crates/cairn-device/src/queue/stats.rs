//! `QueueStats`, a snapshot of a queue's counters (totals, latency histograms and the per-class
//! statistics of `cairn pool iostat`), and the duration conversions the recording uses.
//!
//! Invariants: everything here is recorded under the lock the scheduler's bookkeeping takes
//! anyway, into fixed arrays; a snapshot is a copy. This file uses only `priority` below it.

use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::priority::{CLASSES, IoClass};
use crate::iostats::ClassStats;

/// A snapshot of a queue's counters, for `pool iostat` and tests.
#[derive(Clone, Debug)]
pub struct QueueStats {
    pub read_requests: u64,
    pub write_requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Device calls made for the requests above (fewer than requests when aggregating).
    pub read_calls: u64,
    pub write_calls: u64,
    /// Writes made durable on their own (FUA), which need no flush.
    pub fua_writes: u64,
    pub flushes: u64,
    pub discards: u64,
    /// Pending reads whose class was raised (`promote_reads`).
    pub promoted_reads: u64,
    /// Failed requests (each request of a failed aggregate counts).
    pub read_errors: u64,
    pub write_errors: u64,
    pub flush_errors: u64,
    pub queued: usize,
    pub active: usize,
    /// Submission to completion, in microseconds.
    pub read_latency_us: Histogram<u64>,
    pub write_latency_us: Histogram<u64>,
    pub flush_latency_us: Histogram<u64>,
    /// Per priority class, indexed by `IoClass::index` (see `class`): queue depths now, and
    /// waits and sizes so far. Direct writes (`write_direct`) count as `IoClass::Log`, with
    /// no queue wait.
    pub classes: [ClassStats; CLASSES],
}

pub(super) fn latency_histogram() -> Histogram<u64> {
    // 1 us to 1 hour, 2 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

impl Default for QueueStats {
    fn default() -> Self {
        QueueStats {
            read_requests: 0,
            write_requests: 0,
            read_bytes: 0,
            write_bytes: 0,
            read_calls: 0,
            write_calls: 0,
            fua_writes: 0,
            flushes: 0,
            discards: 0,
            promoted_reads: 0,
            read_errors: 0,
            write_errors: 0,
            flush_errors: 0,
            queued: 0,
            active: 0,
            read_latency_us: latency_histogram(),
            write_latency_us: latency_histogram(),
            flush_latency_us: latency_histogram(),
            classes: [ClassStats::default(); CLASSES],
        }
    }
}

pub(super) fn quantile(histogram: &Histogram<u64>, q: f64) -> u64 {
    if histogram.is_empty() {
        0
    } else {
        histogram.value_at_quantile(q)
    }
}

impl QueueStats {
    /// The statistics of one priority class.
    pub fn class(&self, class: IoClass) -> &ClassStats {
        &self.classes[class.index()]
    }

    /// Every counter as (name, value), for `cairn stat io`; latencies in microseconds.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("read_requests", self.read_requests),
            ("read_calls", self.read_calls),
            ("read_bytes", self.read_bytes),
            ("write_requests", self.write_requests),
            ("write_calls", self.write_calls),
            ("write_bytes", self.write_bytes),
            ("fua_writes", self.fua_writes),
            ("flushes", self.flushes),
            ("discards", self.discards),
            ("promoted_reads", self.promoted_reads),
            ("read_errors", self.read_errors),
            ("write_errors", self.write_errors),
            ("flush_errors", self.flush_errors),
            ("queued", self.queued as u64),
            ("active", self.active as u64),
            ("read_latency_p50_us", quantile(&self.read_latency_us, 0.5)),
            ("read_latency_p99_us", quantile(&self.read_latency_us, 0.99)),
            (
                "write_latency_p50_us",
                quantile(&self.write_latency_us, 0.5),
            ),
            (
                "write_latency_p99_us",
                quantile(&self.write_latency_us, 0.99),
            ),
            (
                "flush_latency_p50_us",
                quantile(&self.flush_latency_us, 0.5),
            ),
            (
                "flush_latency_p99_us",
                quantile(&self.flush_latency_us, 0.99),
            ),
        ]
    }
}

impl fmt::Display for QueueStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(q)
            }
        };
        write!(
            f,
            "read {} req / {} calls / {} B (p50 {} us, p99 {} us, {} err); \
             write {} req / {} calls / {} B (p50 {} us, p99 {} us, {} err, {} fua); \
             flush {} (p50 {} us, {} err); queued {}, active {}",
            self.read_requests,
            self.read_calls,
            self.read_bytes,
            p(&self.read_latency_us, 0.5),
            p(&self.read_latency_us, 0.99),
            self.read_errors,
            self.write_requests,
            self.write_calls,
            self.write_bytes,
            p(&self.write_latency_us, 0.5),
            p(&self.write_latency_us, 0.99),
            self.write_errors,
            self.fua_writes,
            self.flushes,
            p(&self.flush_latency_us, 0.5),
            self.flush_errors,
            self.queued,
            self.active,
        )
    }
}

pub(super) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
