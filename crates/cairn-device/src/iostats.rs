//! Per-class I/O statistics of a leaf queue: where each request's time went and how large the
//! requests and device calls were, for `cairn pool iostat -l/-w/-q/-r` and the metrics exporter.
//!
//! Every request a `LeafQueue` completes is timed in three parts: queue wait (submitted →
//! issued to the device inside an aggregate), disk wait (issued → the device call returned) and
//! total wait (their sum, submission → completion). Each is kept as an exact sum (for averages)
//! and as a power-of-two histogram. Sizes are histograms too: `request_size_bytes` counts every
//! request as submitted ("individual"), `aggregate_size_bytes` counts every device call that
//! carried more than one request ("aggregated"); a call of one request is counted once, as
//! individual.
//!
//! Cost: histograms are fixed arrays of counters (no allocation), recorded under the queue's
//! lock that the bookkeeping takes anyway. Counters only grow, so the difference of two
//! snapshots (`saturating_sub`) covers exactly the interval between them.
//!
//! Buckets. Bucket `i` of a `Pow2Histogram<N, BASE_LOG2>` holds values in
//! `[2^(BASE_LOG2+i), 2^(BASE_LOG2+i+1))`; the first bucket also holds everything smaller and
//! the last everything larger. Latencies use `LatencyHistogram` (microseconds, 1 µs .. 2^26 µs
//! ≈ 67 s and above), sizes `SizeHistogram` (bytes, 512 B .. 16 MiB and above).

/// Counts of values in power-of-two buckets (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pow2Histogram<const N: usize, const BASE_LOG2: u32> {
    pub counts: [u64; N],
}

/// Latencies in microseconds: bucket `i` starts at 2^i µs.
pub type LatencyHistogram = Pow2Histogram<LATENCY_BUCKETS, 0>;
/// Sizes in bytes: bucket `i` starts at 512 << i bytes.
pub type SizeHistogram = Pow2Histogram<SIZE_BUCKETS, 9>;

/// 1 µs, 2 µs, ... 2^26 µs (about 67 s, and anything longer).
pub const LATENCY_BUCKETS: usize = 27;
/// 512 B, 1 KiB, ... 16 MiB (and anything larger).
pub const SIZE_BUCKETS: usize = 16;

impl<const N: usize, const BASE_LOG2: u32> Default for Pow2Histogram<N, BASE_LOG2> {
    fn default() -> Self {
        Pow2Histogram { counts: [0; N] }
    }
}

impl<const N: usize, const BASE_LOG2: u32> Pow2Histogram<N, BASE_LOG2> {
    /// The bucket `value` falls in.
    pub fn bucket_of(value: u64) -> usize {
        let log2 = value.checked_ilog2().unwrap_or(0);
        (log2.saturating_sub(BASE_LOG2) as usize).min(N - 1)
    }

    /// The smallest value of bucket `index` (the first bucket also holds smaller ones).
    pub fn bucket_floor(index: usize) -> u64 {
        1u64 << (BASE_LOG2 as usize + index.min(N - 1))
    }

    pub fn record(&mut self, value: u64) {
        let bucket = Self::bucket_of(value);
        self.counts[bucket] = self.counts[bucket].saturating_add(1);
    }

    /// Values recorded.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Bucket by bucket `self - earlier` (what was recorded between two snapshots).
    pub fn saturating_sub(&self, earlier: &Self) -> Self {
        let mut diff = *self;
        for (count, before) in diff.counts.iter_mut().zip(earlier.counts) {
            *count = count.saturating_sub(before);
        }
        diff
    }

    /// Adds `other`'s counts (to sum devices or classes).
    pub fn add(&mut self, other: &Self) {
        for (count, more) in self.counts.iter_mut().zip(other.counts) {
            *count = count.saturating_add(more);
        }
    }
}

/// What one class's requests of one direction did on a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionStats {
    /// Requests completed (failed ones included).
    pub requests: u64,
    pub bytes: u64,
    /// Sums over the requests, in nanoseconds (for exact averages).
    pub queue_wait_ns: u64,
    pub disk_wait_ns: u64,
    pub total_wait_ns: u64,
    /// The same per request, as histograms in microseconds.
    pub queue_wait_us: LatencyHistogram,
    pub disk_wait_us: LatencyHistogram,
    pub total_wait_us: LatencyHistogram,
    /// Every request's size as submitted (zpool's "ind").
    pub request_size_bytes: SizeHistogram,
    /// Device calls of this class (the class of the request an aggregate was built around)
    /// that carried more than one request, by size, gaps included (zpool's "agg").
    pub aggregate_size_bytes: SizeHistogram,
    /// Bytes of those device calls, gaps included (the sum behind `aggregate_size_bytes`).
    pub aggregate_bytes: u64,
}

impl DirectionStats {
    /// Records one device call that carried more than one request, `span_bytes` long.
    pub fn record_aggregate(&mut self, span_bytes: u64) {
        self.aggregate_size_bytes.record(span_bytes);
        self.aggregate_bytes = self.aggregate_bytes.saturating_add(span_bytes);
    }

    /// Records one completed request.
    pub fn record_request(&mut self, bytes: u64, queue_wait_ns: u64, disk_wait_ns: u64) {
        let total_ns = queue_wait_ns.saturating_add(disk_wait_ns);
        self.requests += 1;
        self.bytes = self.bytes.saturating_add(bytes);
        self.queue_wait_ns = self.queue_wait_ns.saturating_add(queue_wait_ns);
        self.disk_wait_ns = self.disk_wait_ns.saturating_add(disk_wait_ns);
        self.total_wait_ns = self.total_wait_ns.saturating_add(total_ns);
        self.queue_wait_us.record(queue_wait_ns / 1000);
        self.disk_wait_us.record(disk_wait_ns / 1000);
        self.total_wait_us.record(total_ns / 1000);
        self.request_size_bytes.record(bytes);
    }

    /// Everything recorded since `earlier` (a snapshot of the same counters).
    pub fn saturating_sub(&self, earlier: &Self) -> Self {
        DirectionStats {
            requests: self.requests.saturating_sub(earlier.requests),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            queue_wait_ns: self.queue_wait_ns.saturating_sub(earlier.queue_wait_ns),
            disk_wait_ns: self.disk_wait_ns.saturating_sub(earlier.disk_wait_ns),
            total_wait_ns: self.total_wait_ns.saturating_sub(earlier.total_wait_ns),
            queue_wait_us: self.queue_wait_us.saturating_sub(&earlier.queue_wait_us),
            disk_wait_us: self.disk_wait_us.saturating_sub(&earlier.disk_wait_us),
            total_wait_us: self.total_wait_us.saturating_sub(&earlier.total_wait_us),
            request_size_bytes: self
                .request_size_bytes
                .saturating_sub(&earlier.request_size_bytes),
            aggregate_size_bytes: self
                .aggregate_size_bytes
                .saturating_sub(&earlier.aggregate_size_bytes),
            aggregate_bytes: self.aggregate_bytes.saturating_sub(earlier.aggregate_bytes),
        }
    }

    /// Adds `other` (to sum classes or devices).
    pub fn add(&mut self, other: &Self) {
        self.requests = self.requests.saturating_add(other.requests);
        self.bytes = self.bytes.saturating_add(other.bytes);
        self.queue_wait_ns = self.queue_wait_ns.saturating_add(other.queue_wait_ns);
        self.disk_wait_ns = self.disk_wait_ns.saturating_add(other.disk_wait_ns);
        self.total_wait_ns = self.total_wait_ns.saturating_add(other.total_wait_ns);
        self.queue_wait_us.add(&other.queue_wait_us);
        self.disk_wait_us.add(&other.disk_wait_us);
        self.total_wait_us.add(&other.total_wait_us);
        self.request_size_bytes.add(&other.request_size_bytes);
        self.aggregate_size_bytes.add(&other.aggregate_size_bytes);
        self.aggregate_bytes = self.aggregate_bytes.saturating_add(other.aggregate_bytes);
    }
}

/// One priority class on one device: its queue now, and what its requests did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Requests of this class waiting in the queue at the snapshot.
    pub pending_requests: u64,
    /// Requests of this class inside device calls at the snapshot.
    pub active_requests: u64,
    pub read: DirectionStats,
    pub write: DirectionStats,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_power_of_two_buckets_from_one_microsecond() {
        assert_eq!(LatencyHistogram::bucket_of(0), 0);
        assert_eq!(LatencyHistogram::bucket_of(1), 0);
        assert_eq!(LatencyHistogram::bucket_of(2), 1);
        assert_eq!(LatencyHistogram::bucket_of(3), 1);
        assert_eq!(LatencyHistogram::bucket_of(1000), 9);
        assert_eq!(LatencyHistogram::bucket_of(1024), 10);
        assert_eq!(LatencyHistogram::bucket_of(u64::MAX), LATENCY_BUCKETS - 1);
        assert_eq!(LatencyHistogram::bucket_floor(10), 1024);
        for index in 0..LATENCY_BUCKETS {
            let floor = LatencyHistogram::bucket_floor(index);
            assert_eq!(LatencyHistogram::bucket_of(floor), index);
            if index > 0 {
                assert_eq!(LatencyHistogram::bucket_of(floor - 1), index - 1);
            }
        }
    }

    #[test]
    fn sizes_fall_in_buckets_from_512_bytes_to_16_mib() {
        assert_eq!(SizeHistogram::bucket_of(0), 0);
        assert_eq!(SizeHistogram::bucket_of(512), 0);
        assert_eq!(SizeHistogram::bucket_of(1023), 0);
        assert_eq!(SizeHistogram::bucket_of(8192), 4);
        assert_eq!(SizeHistogram::bucket_of(8193), 4);
        assert_eq!(SizeHistogram::bucket_of(1 << 20), 11);
        assert_eq!(SizeHistogram::bucket_of(16 << 20), SIZE_BUCKETS - 1);
        assert_eq!(SizeHistogram::bucket_of(1 << 40), SIZE_BUCKETS - 1);
        assert_eq!(SizeHistogram::bucket_floor(0), 512);
        assert_eq!(SizeHistogram::bucket_floor(SIZE_BUCKETS - 1), 16 << 20);
    }

    #[test]
    fn snapshots_subtract_to_what_happened_between_them() {
        let mut stats = DirectionStats::default();
        stats.record_request(8192, 5_000, 100_000);
        let earlier = stats;
        stats.record_request(8192, 0, 3_000);
        stats.record_request(131072, 1_000_000, 2_000_000);
        let diff = stats.saturating_sub(&earlier);
        assert_eq!(diff.requests, 2);
        assert_eq!(diff.bytes, 8192 + 131072);
        assert_eq!(diff.queue_wait_ns, 1_000_000);
        assert_eq!(diff.total_wait_ns, 3_000 + 3_000_000);
        assert_eq!(diff.request_size_bytes.counts[4], 1);
        assert_eq!(diff.request_size_bytes.counts[8], 1);
        assert_eq!(diff.request_size_bytes.total(), 2);
        // 3 us, 3000 us total waits; the first request's bucket is gone from the difference.
        assert_eq!(diff.total_wait_us.counts[1], 1);
        assert_eq!(diff.total_wait_us.counts[11], 1);
        assert_eq!(diff.total_wait_us.counts[6], 0);
        assert_eq!(diff.total_wait_us.total(), 2);
        assert_eq!(earlier.total_wait_us.counts[6], 1);
        let mut sum = earlier;
        sum.add(&diff);
        assert_eq!(sum, stats);
        // Never below zero (a counter reset, another process's snapshot).
        assert_eq!(earlier.saturating_sub(&stats).requests, 0);
    }
}
