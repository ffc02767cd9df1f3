//! # cairn-metrics: counters and latency histograms
//!
//! The measuring types every layer shares, so that a volume's NBD traffic, a filesystem's
//! operations and (later) the Prometheus exporter count and bucket the same way. An [`OpStats`]
//! is one kind of operation: how many, bytes, errors, and an HDR histogram of latencies in
//! microseconds (two significant digits: 1 % resolution, ~20 KiB each, saturating at one
//! minute). Snapshots are plain clones; [`OpStats::since`] gives what happened between two of
//! them, as `iostat` prints it. `events` is the process's bounded log of notable events (faults,
//! fallbacks): what libraries have to tell a person, since they print nothing. Recording takes `&mut self`: the owner keeps it behind the lock
//! it already holds for the operation's bookkeeping, held for the record only.

pub mod events;
pub mod time;

use hdrhistogram::Histogram;
use std::time::Duration;

/// Highest latency a histogram tracks exactly; slower operations are recorded as this value.
const MAX_LATENCY_US: u64 = 60_000_000;

/// Counters of one kind of operation.
#[derive(Clone, Debug)]
pub struct OpStats {
    /// Requests answered (successes and failures).
    pub ops: u64,
    /// Bytes transferred or affected by successful requests.
    pub bytes: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// Latency in microseconds of every request the export carried out (refused requests
    /// are counted in `ops` and `errors` only).
    pub latency_us: Histogram<u64>,
}

impl Default for OpStats {
    fn default() -> OpStats {
        OpStats {
            ops: 0,
            bytes: 0,
            errors: 0,
            latency_us: Histogram::new_with_bounds(1, MAX_LATENCY_US, 2)
                .expect("static histogram bounds are valid"),
        }
    }
}

impl OpStats {
    /// Records one operation: its bytes (counted when it succeeded) and latency.
    pub fn record(&mut self, bytes: u64, ok: bool, latency: Duration) {
        self.ops += 1;
        if ok {
            self.bytes += bytes;
        } else {
            self.errors += 1;
        }
        let us = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.latency_us.saturating_record(us.min(MAX_LATENCY_US));
    }

    /// Mean latency in microseconds (0 without samples).
    pub fn mean_latency_us(&self) -> f64 {
        if self.latency_us.is_empty() {
            0.0
        } else {
            self.latency_us.mean()
        }
    }

    /// Latency at quantile `q` (0.0..=1.0) in microseconds (0 without samples).
    pub fn latency_quantile_us(&self, q: f64) -> u64 {
        if self.latency_us.is_empty() {
            0
        } else {
            self.latency_us.value_at_quantile(q)
        }
    }

    /// Adds `other`'s operations to these (several kinds shown as one).
    pub fn merge(&mut self, other: &OpStats) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.errors += other.errors;
        // Both histograms have the same bounds, so adding cannot fail; if it ever did, the
        // counts above still hold and only the latencies miss `other`.
        let _ = self.latency_us.add(&other.latency_us);
    }

    /// What happened between `earlier` (a previous snapshot of the same counters) and `self`.
    pub fn since(&self, earlier: &OpStats) -> OpStats {
        let mut latency_us = self.latency_us.clone();
        if latency_us.subtract(&earlier.latency_us).is_err() {
            // `earlier` is not a prefix of `self` (e.g. snapshots swapped): report the total.
            latency_us = self.latency_us.clone();
        }
        OpStats {
            ops: self.ops.saturating_sub(earlier.ops),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            errors: self.errors.saturating_sub(earlier.errors),
            latency_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_counts_add_and_latencies_join() {
        let mut a = OpStats::default();
        a.record(100, true, Duration::from_micros(10));
        let mut b = OpStats::default();
        b.record(50, false, Duration::from_micros(1000));
        b.record(50, true, Duration::from_micros(1000));
        a.merge(&b);
        assert_eq!((a.ops, a.bytes, a.errors), (3, 150, 1));
        assert_eq!(a.latency_us.len(), 3);
        assert!(a.latency_quantile_us(0.99) >= 990);
        assert!(a.latency_quantile_us(0.2) <= 11);
    }

    #[test]
    fn huge_latency_saturates() {
        let mut s = OpStats::default();
        s.record(1, true, Duration::from_secs(3600));
        assert_eq!(s.latency_us.len(), 1);
        assert!(s.latency_quantile_us(1.0) >= MAX_LATENCY_US / 2);
        assert_eq!(OpStats::default().mean_latency_us(), 0.0);
    }
}
