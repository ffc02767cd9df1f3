//! Counters and latency histograms of one dataset's intent log, for `cairn stat zil`.

use crate::LogOp;
use cairn_format::LogRecordKind;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug)]
pub struct ZilStats {
    pub records: AtomicU64,
    pub record_bytes: AtomicU64,
    /// Writes whose data was copied into the record when made.
    pub records_copied: AtomicU64,
    /// Writes logged as block pointers: their data went once to its final place.
    pub records_in_place: AtomicU64,
    pub in_place_bytes: AtomicU64,
    /// Writes whose data was read back from the dataset at commit.
    pub needcopy_reads: AtomicU64,
    pub commits: AtomicU64,
    /// Committers that waited for another builder or batch (group commit at work).
    pub commit_waits: AtomicU64,
    pub batches: AtomicU64,
    pub blocks_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub blocks_freed: AtomicU64,
    /// Device writes that made log blocks durable on their own (FUA): one per run of
    /// contiguous blocks of a batch, so usually one per batch; the log issues no flushes.
    pub fua_writes: AtomicU64,
    /// Commits that fell back to a txg sync after a log failure.
    pub fallbacks: AtomicU64,
    /// Commits served by a txg sync because the log would have taken at least
    /// `ZilConfig::bulk_sync_bytes` (the data is then written once, not twice).
    pub bulk_syncs: AtomicU64,
    pub chains_started: AtomicU64,
    /// Records logged per object (`IntentLog::log_deferred`): written only when their
    /// object, or everything, is committed.
    pub records_deferred: AtomicU64,
    /// Of those, records a commit moved into a lane to be written.
    pub deferred_committed: AtomicU64,
    /// Of those, records dropped unwritten: their txg synced first, or their object was freed.
    pub deferred_dropped: AtomicU64,
    /// Of those, write records dropped unwritten because a later write of their object covered
    /// their whole range (`deferred.rs`).
    pub deferred_superseded: AtomicU64,
    /// Writers held back until a txg sync because the waiting records held twice
    /// `ZilConfig::deferred_bytes_max` (`IntentLog::throttle_deferred`).
    pub deferred_throttles: AtomicU64,
    commit_latency_us: Mutex<Histogram<u64>>,
    block_fill_percent: Mutex<Histogram<u64>>,
}

impl Default for ZilStats {
    fn default() -> Self {
        ZilStats {
            records: AtomicU64::new(0),
            record_bytes: AtomicU64::new(0),
            records_copied: AtomicU64::new(0),
            records_in_place: AtomicU64::new(0),
            in_place_bytes: AtomicU64::new(0),
            needcopy_reads: AtomicU64::new(0),
            commits: AtomicU64::new(0),
            commit_waits: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            blocks_written: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            blocks_freed: AtomicU64::new(0),
            fua_writes: AtomicU64::new(0),
            fallbacks: AtomicU64::new(0),
            bulk_syncs: AtomicU64::new(0),
            chains_started: AtomicU64::new(0),
            records_deferred: AtomicU64::new(0),
            deferred_committed: AtomicU64::new(0),
            deferred_dropped: AtomicU64::new(0),
            deferred_superseded: AtomicU64::new(0),
            deferred_throttles: AtomicU64::new(0),
            commit_latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 60_000_000, 2).expect("valid histogram bounds"),
            ),
            block_fill_percent: Mutex::new(
                Histogram::new_with_bounds(1, 100, 2).expect("valid histogram bounds"),
            ),
        }
    }
}

/// A copy of the counters with latency percentiles, for display and tests.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ZilStatsSnapshot {
    pub lanes: usize,
    pub records: u64,
    pub record_bytes: u64,
    pub records_copied: u64,
    pub records_in_place: u64,
    pub in_place_bytes: u64,
    pub needcopy_reads: u64,
    pub commits: u64,
    pub commit_waits: u64,
    pub batches: u64,
    pub blocks_written: u64,
    pub bytes_written: u64,
    pub blocks_freed: u64,
    pub fua_writes: u64,
    pub fallbacks: u64,
    pub bulk_syncs: u64,
    pub chains_started: u64,
    #[serde(default)]
    pub records_deferred: u64,
    #[serde(default)]
    pub deferred_committed: u64,
    #[serde(default)]
    pub deferred_dropped: u64,
    #[serde(default)]
    pub deferred_superseded: u64,
    #[serde(default)]
    pub deferred_throttles: u64,
    /// Bytes of data the per-object records waiting hold now (a gauge; `IntentLog` fills it).
    #[serde(default)]
    pub deferred_held_bytes: u64,
    /// The most they have held.
    #[serde(default)]
    pub deferred_held_peak_bytes: u64,
    pub commit_latency_p50_us: u64,
    pub commit_latency_p99_us: u64,
    pub commit_latency_max_us: u64,
    pub block_fill_mean_percent: f64,
}

impl ZilStatsSnapshot {
    /// Every counter as (name, value), for `name<TAB>value` output.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("lanes", self.lanes as u64),
            ("records", self.records),
            ("record_bytes", self.record_bytes),
            ("records_copied", self.records_copied),
            ("records_in_place", self.records_in_place),
            ("in_place_bytes", self.in_place_bytes),
            ("needcopy_reads", self.needcopy_reads),
            ("commits", self.commits),
            ("commit_waits", self.commit_waits),
            ("batches", self.batches),
            ("blocks_written", self.blocks_written),
            ("bytes_written", self.bytes_written),
            ("blocks_freed", self.blocks_freed),
            ("fua_writes", self.fua_writes),
            ("fallbacks", self.fallbacks),
            ("bulk_syncs", self.bulk_syncs),
            ("chains_started", self.chains_started),
            ("records_deferred", self.records_deferred),
            ("deferred_committed", self.deferred_committed),
            ("deferred_dropped", self.deferred_dropped),
            ("deferred_superseded", self.deferred_superseded),
            ("deferred_throttles", self.deferred_throttles),
            ("deferred_held_bytes", self.deferred_held_bytes),
            ("deferred_held_peak_bytes", self.deferred_held_peak_bytes),
            ("commit_latency_p50_us", self.commit_latency_p50_us),
            ("commit_latency_p99_us", self.commit_latency_p99_us),
            ("commit_latency_max_us", self.commit_latency_max_us),
            (
                "block_fill_mean_percent",
                self.block_fill_mean_percent.round() as u64,
            ),
        ]
    }
}

impl ZilStats {
    pub(crate) fn count_record(&self, op: &LogOp) {
        self.records.fetch_add(1, Ordering::Relaxed);
        match op.kind {
            LogRecordKind::Write => {
                self.record_bytes.fetch_add(op.length, Ordering::Relaxed);
                if matches!(op.data, crate::ItxData::Copied(_)) {
                    self.records_copied.fetch_add(1, Ordering::Relaxed);
                }
            }
            LogRecordKind::WriteInPlace => {
                self.records_in_place.fetch_add(1, Ordering::Relaxed);
                self.in_place_bytes.fetch_add(op.length, Ordering::Relaxed);
            }
            LogRecordKind::Zero | LogRecordKind::Trim | LogRecordKind::Fs => {}
        }
    }

    pub(crate) fn count_commit(&self, latency: Duration) {
        self.commits.fetch_add(1, Ordering::Relaxed);
        let micros = latency.as_micros().min(u128::from(u64::MAX)) as u64;
        self.commit_latency_us
            .lock()
            .saturating_record(micros.max(1));
    }

    pub(crate) fn count_block(&self, used_bytes: usize, capacity_bytes: usize) {
        let percent = (used_bytes * 100 / capacity_bytes.max(1)).clamp(1, 100) as u64;
        self.block_fill_percent.lock().saturating_record(percent);
    }

    pub(crate) fn count_batch<T>(&self, blocks: &[T], bytes: u64) {
        if blocks.is_empty() {
            return;
        }
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.blocks_written
            .fetch_add(blocks.len() as u64, Ordering::Relaxed);
        self.bytes_written.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Every commit's latency so far, in microseconds (a copy: the analytics export the whole
    /// distribution, not the percentiles of the snapshot).
    pub fn commit_latency_us(&self) -> Histogram<u64> {
        self.commit_latency_us.lock().clone()
    }

    pub fn snapshot(&self, lanes: usize) -> ZilStatsSnapshot {
        let latency = self.commit_latency_us.lock();
        let fill = self.block_fill_percent.lock();
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ZilStatsSnapshot {
            lanes,
            records: load(&self.records),
            record_bytes: load(&self.record_bytes),
            records_copied: load(&self.records_copied),
            records_in_place: load(&self.records_in_place),
            in_place_bytes: load(&self.in_place_bytes),
            needcopy_reads: load(&self.needcopy_reads),
            commits: load(&self.commits),
            commit_waits: load(&self.commit_waits),
            batches: load(&self.batches),
            blocks_written: load(&self.blocks_written),
            bytes_written: load(&self.bytes_written),
            blocks_freed: load(&self.blocks_freed),
            fua_writes: load(&self.fua_writes),
            fallbacks: load(&self.fallbacks),
            bulk_syncs: load(&self.bulk_syncs),
            chains_started: load(&self.chains_started),
            records_deferred: load(&self.records_deferred),
            deferred_committed: load(&self.deferred_committed),
            deferred_dropped: load(&self.deferred_dropped),
            deferred_superseded: load(&self.deferred_superseded),
            deferred_throttles: load(&self.deferred_throttles),
            deferred_held_bytes: 0,
            deferred_held_peak_bytes: 0,
            commit_latency_p50_us: latency.value_at_quantile(0.5),
            commit_latency_p99_us: latency.value_at_quantile(0.99),
            commit_latency_max_us: latency.max(),
            block_fill_mean_percent: if fill.is_empty() { 0.0 } else { fill.mean() },
        }
    }
}
