//! One look at everything a server can show: `Sample::take` reads the counters and histograms
//! every layer already keeps (front ends' per-dataset operations, intent logs, device queues,
//! the pipeline, txgs, ARC and L2ARC, pool health, snapshot counters and each dataset's space
//! with what its snapshots hold) and copies them out. Nothing here is on an
//! I/O path: taking a sample costs the same short lock holds a `cairn stat` command costs, and
//! only happens when someone scrapes or the history ticks.
//!
//! Latency histograms are folded into `LatencyBuckets`: powers of two of microseconds, from
//! 1 µs to 2^26 µs (67 s), so one scale fits flash (tens of µs) and disks (ms) alike and
//! Prometheus, the history and the page share it.

use crate::pools::ServedPools;
use cairn_engine::{DeviceQueue, Pool, PoolStatus, ZilStatsSnapshot};
use cairn_nbd::OpStats;
use cairn_pool::txg::{TxgStats, TxgTiming};
use hdrhistogram::Histogram;

/// Upper bounds of the latency buckets: 2^k µs for k in 0..LATENCY_BUCKETS.
pub const LATENCY_BUCKETS: usize = 27;

/// A latency distribution on the shared scale: `counts[k]` operations took at most 2^k µs and
/// more than 2^(k-1) µs; `overflow` took longer than the last bound.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct LatencyBuckets {
    pub counts: Vec<u64>,
    pub overflow: u64,
    /// Sum of all latencies, in microseconds (mean × count of the source histogram).
    pub sum_us: f64,
}

impl LatencyBuckets {
    pub fn empty() -> LatencyBuckets {
        LatencyBuckets {
            counts: vec![0; LATENCY_BUCKETS],
            overflow: 0,
            sum_us: 0.0,
        }
    }

    /// Folds an HDR histogram of microseconds into the shared buckets.
    pub fn from_histogram(histogram: &Histogram<u64>) -> LatencyBuckets {
        let mut out = LatencyBuckets::empty();
        for value in histogram.iter_recorded() {
            let us = value.value_iterated_to().max(1);
            // Smallest k with us <= 2^k.
            let k = (u64::BITS - (us - 1).leading_zeros()) as usize;
            match out.counts.get_mut(k) {
                Some(count) => *count += value.count_at_value(),
                None => out.overflow += value.count_at_value(),
            }
        }
        if !histogram.is_empty() {
            out.sum_us = histogram.mean() * histogram.len() as f64;
        }
        out
    }

    /// Counts already in buckets (another histogram's, e.g. a device queue's sizes), no sum.
    pub fn from_counts(counts: &[u64]) -> LatencyBuckets {
        LatencyBuckets {
            counts: counts.to_vec(),
            overflow: 0,
            sum_us: 0.0,
        }
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.overflow
    }

    /// Upper bound of bucket `k` in seconds.
    pub fn bound_seconds(k: usize) -> f64 {
        (1u64 << k) as f64 / 1e6
    }

    /// What happened between `earlier` (a sample of the same source) and `self`.
    pub fn since(&self, earlier: &LatencyBuckets) -> LatencyBuckets {
        LatencyBuckets {
            counts: self
                .counts
                .iter()
                .zip(earlier.counts.iter().chain(std::iter::repeat(&0)))
                .map(|(now, before)| now.saturating_sub(*before))
                .collect(),
            overflow: self.overflow.saturating_sub(earlier.overflow),
            sum_us: (self.sum_us - earlier.sum_us).max(0.0),
        }
    }
}

/// One kind of operation of one dataset, as its front end answered it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct OpSample {
    pub op: &'static str,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub latency: LatencyBuckets,
    /// Median and 99th percentile latency, from the full-resolution histogram (`pool iostat`
    /// shows them; the buckets are coarser).
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl OpSample {
    fn of(op: &'static str, stats: &OpStats) -> OpSample {
        OpSample {
            op,
            ops: stats.ops,
            bytes: stats.bytes,
            errors: stats.errors,
            latency: LatencyBuckets::from_histogram(&stats.latency_us),
            p50_us: stats.latency_quantile_us(0.5),
            p99_us: stats.latency_quantile_us(0.99),
            max_us: if stats.latency_us.is_empty() {
                0
            } else {
                stats.latency_us.max()
            },
        }
    }
}

/// A dataset's traffic through one front end (`nbd` for volumes, `fuse` for filesystems).
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatasetSample {
    pub dataset: String,
    pub protocol: &'static str,
    /// The NBD operation kinds (filesystems' calls grouped onto them, namespace calls as
    /// `meta`), so volumes and filesystems compare.
    pub ops: Vec<OpSample>,
    /// A filesystem's calls by kind (`cairn stat fs`), empty for volumes.
    pub calls: Vec<OpSample>,
    /// A filesystem's partial-write path (`stat fs`): (counter, value).
    pub partial_writes: Vec<(&'static str, u64)>,
    /// A filesystem's memo of its published tree (`stat fs`): dnodes, then directory and
    /// dnode blocks, each entries, bytes, hits, misses. Empty for volumes.
    #[serde(skip)]
    pub memo: Vec<(&'static str, u64)>,
}

/// The server's memory budget: each part's limit and what it holds now, if known.
#[derive(Debug, Clone)]
pub struct MemoryPart {
    pub part: &'static str,
    pub limit_bytes: u64,
    pub used_bytes: Option<u64>,
}

/// One dataset's intent log.
#[derive(Debug, Clone)]
pub struct IntentLogSample {
    pub dataset: String,
    pub stats: ZilStatsSnapshot,
    pub commit_latency: LatencyBuckets,
}

/// One device: health, errors and its queue's counters (absent for a missing device).
#[derive(Debug, Clone)]
pub struct DeviceSample {
    pub device: DeviceQueue,
    pub read_latency: LatencyBuckets,
    pub write_latency: LatencyBuckets,
    pub flush_latency: LatencyBuckets,
}

/// Everything about one pool.
#[derive(Debug, Clone)]
pub struct PoolSample {
    pub name: String,
    pub status: PoolStatus,
    pub datasets: Vec<DatasetSample>,
    pub intent_logs: Vec<IntentLogSample>,
    pub devices: Vec<DeviceSample>,
    pub pipeline: Vec<(&'static str, u64)>,
    pub txg_stats: Option<TxgStats>,
    pub dirty_bytes: u64,
    /// The most recent txgs, oldest first.
    pub txg_history: Vec<TxgTiming>,
    pub l2arc: Option<Vec<(&'static str, u64)>>,
    /// The scrub running now, if any.
    pub scrub_running: Option<cairn_engine::ScrubProgress>,
    /// Snapshot counters and levels (`cairn stat snapshots`).
    pub snapshots: cairn_engine::SnapshotStatsSnapshot,
    /// How long snapshot commands waited, call to durable.
    pub snapshot_latency: LatencyBuckets,
    /// Every dataset's `used`, `referenced` and `usedbysnapshots`, by name.
    pub dataset_space: Vec<cairn_engine::DatasetSpaceFigures>,
}

/// Everything a server can show, at one moment.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Wall-clock time of the sample, in milliseconds since the Unix epoch.
    pub unix_ms: u64,
    pub uptime_s: f64,
    /// The process's resident memory now, if the system tells.
    pub resident_bytes: Option<u64>,
    pub arc: Vec<(&'static str, u64)>,
    pub memory: Vec<MemoryPart>,
    pub pools: Vec<PoolSample>,
    /// The most recent events (`cairn_metrics::events`), oldest first, and counts by source.
    pub events: Vec<cairn_metrics::events::Event>,
    pub event_counts: Vec<(&'static str, u64)>,
    /// The NFS server's counters, when it serves NFS (`cairn stat nfs`).
    pub nfs: Option<crate::nfs_stats::NfsSnapshot>,
}

/// How many recent events a sample carries.
const EVENTS_SHOWN: usize = 50;

/// The NBD front end's operation kinds as the analytics name them.
const NBD_OPS: [(cairn_nbd::OpKind, &str); 4] = [
    (cairn_nbd::OpKind::Read, "read"),
    (cairn_nbd::OpKind::Write, "write"),
    (cairn_nbd::OpKind::Flush, "flush"),
    (cairn_nbd::OpKind::Trim, "trim"),
];

/// A filesystem's calls grouped as the NBD ones are (fsync as flush, fallocate as trim) and
/// every namespace call as `meta` (`pool iostat` and the analytics show them so).
pub fn filesystem_op_groups(stats: &cairn_fs::ops::FsOpStats) -> Vec<(&'static str, OpStats)> {
    use cairn_fs::ops::FsOpKind;
    let mut meta = OpStats::default();
    for (kind, op) in stats.iter() {
        if !matches!(
            kind,
            FsOpKind::Read | FsOpKind::Write | FsOpKind::Fsync | FsOpKind::Fallocate
        ) {
            meta.merge(op);
        }
    }
    vec![
        ("read", stats.op(FsOpKind::Read).clone()),
        ("write", stats.op(FsOpKind::Write).clone()),
        ("flush", stats.op(FsOpKind::Fsync).clone()),
        ("trim", stats.op(FsOpKind::Fallocate).clone()),
        ("meta", meta),
    ]
}

fn filesystem_ops(stats: &cairn_fs::ops::FsOpStats) -> Vec<OpSample> {
    filesystem_op_groups(stats)
        .iter()
        .map(|(name, op)| OpSample::of(name, op))
        .collect()
}

fn pool_of(dataset: &str) -> &str {
    dataset.split('/').next().unwrap_or(dataset)
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

/// Resident memory of this process (VmRSS), in bytes.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// How many of a pool's most recent txgs a sample carries.
const TXG_HISTORY_MAX: usize = 64;

fn pool_sample(pool: &Pool, datasets: Vec<DatasetSample>) -> PoolSample {
    let devices = pool
        .device_queues()
        .into_iter()
        .map(|device| {
            let buckets = |pick: fn(&cairn_device::QueueStats) -> &Histogram<u64>| {
                device
                    .queue
                    .as_ref()
                    .map_or_else(LatencyBuckets::empty, |q| {
                        LatencyBuckets::from_histogram(pick(q))
                    })
            };
            DeviceSample {
                read_latency: buckets(|q| &q.read_latency_us),
                write_latency: buckets(|q| &q.write_latency_us),
                flush_latency: buckets(|q| &q.flush_latency_us),
                device,
            }
        })
        .collect();
    let latencies = pool.intent_log_latency();
    let intent_logs = pool
        .intent_log_stats()
        .into_iter()
        .map(|(dataset, stats)| {
            let commit_latency = latencies
                .iter()
                .find(|(name, _)| *name == dataset)
                .map_or_else(LatencyBuckets::empty, |(_, histogram)| {
                    LatencyBuckets::from_histogram(histogram)
                });
            IntentLogSample {
                dataset,
                stats,
                commit_latency,
            }
        })
        .collect();
    let engine = pool.txg_engine().ok();
    let mut txg_history = pool.txg_history();
    if txg_history.len() > TXG_HISTORY_MAX {
        txg_history.drain(..txg_history.len() - TXG_HISTORY_MAX);
    }
    PoolSample {
        name: pool.name().to_string(),
        status: pool.status(),
        datasets,
        intent_logs,
        devices,
        pipeline: pool.io_stats().0,
        txg_stats: engine.map(|engine| engine.stats()),
        dirty_bytes: engine.map_or(0, |engine| engine.dirty_bytes()),
        txg_history,
        l2arc: pool.l2arc_fields(),
        scrub_running: pool.scrub_progress(),
        snapshots: pool.snapshot_stats(),
        snapshot_latency: LatencyBuckets::from_histogram(&pool.snapshot_command_latency()),
        dataset_space: pool.dataset_space(),
    }
}

/// The budget's parts (`cairn stat memory`), with what the cache, dirty data, NBD requests and
/// the cache devices' index hold now.
pub fn memory_parts(served: &ServedPools, arc: &[(&'static str, u64)]) -> Vec<MemoryPart> {
    let Some(budget) = served.budget.get().copied() else {
        return Vec::new();
    };
    let field = |name: &str| arc.iter().find(|(f, _)| *f == name).map(|(_, v)| *v);
    let pools = served.all();
    let dirty: u64 = pools
        .iter()
        .filter_map(|pool| pool.txg_engine().ok().map(|txg| txg.dirty_bytes()))
        .sum();
    let l2_index: u64 = pools
        .iter()
        .filter_map(|pool| pool.l2().map(|tier| tier.index_usage().1))
        .sum();
    let requests = served
        .nbd
        .get()
        .map(|server| server.inflight_bytes() as u64);
    budget
        .parts()
        .iter()
        .map(|&(part, limit_bytes)| MemoryPart {
            part,
            // `pool set arc_max=` moves the cache's limit live; the budget keeps its start.
            limit_bytes: if part == "arc" {
                field("c_max").unwrap_or(limit_bytes)
            } else {
                limit_bytes
            },
            used_bytes: match part {
                "arc" => field("size"),
                "dirty" => Some(dirty),
                "requests" => requests,
                "l2_index" => Some(l2_index),
                _ => None,
            },
        })
        .collect()
}

/// Every served dataset's traffic now: NBD exports, then mounted filesystems. What the
/// analytics sample, and what `pool iostat` reads each interval.
pub fn dataset_samples(served: &ServedPools) -> Vec<DatasetSample> {
    let mut datasets: Vec<DatasetSample> = Vec::new();
    if let Some(server) = served.nbd.get() {
        for (export, stats) in server.stats() {
            datasets.push(DatasetSample {
                ops: NBD_OPS
                    .iter()
                    .map(|&(kind, name)| OpSample::of(name, stats.op(kind)))
                    .collect(),
                dataset: export,
                protocol: "nbd",
                calls: Vec::new(),
                partial_writes: Vec::new(),
                memo: Vec::new(),
            });
        }
    }
    let mounted = served.mounts.filesystems();
    let nfs_only: Vec<(String, std::sync::Arc<cairn_fs::Filesystem>)> = served
        .nfs_filesystems()
        .into_iter()
        .filter(|(name, _)| !mounted.iter().any(|(mounted, _)| mounted == name))
        .collect();
    // A filesystem both mounted and shared counts its calls once, under "fuse" (its calls
    // from both front ends are in the same counters).
    let filesystems = mounted
        .into_iter()
        .map(|entry| (entry, "fuse"))
        .chain(nfs_only.into_iter().map(|entry| (entry, "nfs")));
    for ((dataset, fs), protocol) in filesystems {
        let stats = fs.op_stats();
        let patch = fs.patch_stats();
        datasets.push(DatasetSample {
            ops: filesystem_ops(&stats),
            calls: stats
                .iter()
                .map(|(kind, op)| OpSample::of(kind.name(), op))
                .collect(),
            partial_writes: vec![
                ("deferred", patch.deferred),
                ("merged_at_write", patch.merged_at_write),
                ("merged_at_sync", patch.resolved),
                ("bases_lost", patch.bases_lost),
            ],
            memo: {
                let memo = fs.objset().memo_stats();
                vec![
                    ("memo_dnodes", memo.dnodes.entries),
                    ("memo_dnode_bytes", memo.dnodes.bytes),
                    ("memo_dnode_hits", memo.dnodes.hits),
                    ("memo_dnode_misses", memo.dnodes.misses),
                    ("memo_blocks", memo.blocks.entries),
                    ("memo_block_bytes", memo.blocks.bytes),
                    ("memo_block_hits", memo.blocks.hits),
                    ("memo_block_misses", memo.blocks.misses),
                ]
            },
            dataset,
            protocol,
        });
    }
    datasets
}

impl Sample {
    /// Reads every served pool's counters now.
    pub fn take(served: &ServedPools) -> Sample {
        let datasets = dataset_samples(served);
        let pools = served
            .all()
            .iter()
            .map(|pool| {
                let mine = datasets
                    .iter()
                    .filter(|d| pool_of(&d.dataset) == pool.name())
                    .cloned()
                    .collect();
                pool_sample(pool, mine)
            })
            .collect();
        let arc = cairn_engine::process_cache().stats().fields;
        let mut events = cairn_metrics::events::since(0);
        if events.len() > EVENTS_SHOWN {
            events.drain(..events.len() - EVENTS_SHOWN);
        }
        Sample {
            events,
            event_counts: cairn_metrics::events::counts_by_source(),
            memory: memory_parts(served, &arc),
            nfs: served.nfs_stats.get().map(|stats| stats.snapshot()),
            unix_ms: unix_ms(),
            uptime_s: served.uptime_s(),
            resident_bytes: resident_bytes(),
            arc,
            pools,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_land_in_the_power_of_two_bucket_at_or_above_them() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 2).unwrap();
        for us in [1, 2, 3, 4, 5, 100, 1000, 1_000_000] {
            histogram.record(us).unwrap();
        }
        histogram.record(120_000_000 / 2 - 1).unwrap();
        let buckets = LatencyBuckets::from_histogram(&histogram);
        assert_eq!(buckets.counts[0], 1, "1 µs");
        assert_eq!(buckets.counts[1], 1, "2 µs");
        assert_eq!(buckets.counts[2], 2, "3 and 4 µs");
        assert_eq!(buckets.counts[3], 1, "5 µs");
        assert_eq!(buckets.counts[7], 1, "100 µs: 64 < v <= 128");
        assert_eq!(buckets.counts[10], 1, "1000 µs: 512 < v <= 1024");
        assert_eq!(buckets.counts[20], 1, "1 s: 2^19 < v <= 2^20");
        assert_eq!(buckets.counts[26], 1, "60 s <= 2^26 µs");
        assert_eq!(buckets.count(), histogram.len());
        assert!((buckets.sum_us - histogram.mean() * 9.0).abs() < 1.0);
    }

    #[test]
    fn a_difference_of_buckets_is_what_happened_between() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 2).unwrap();
        histogram.record(10).unwrap();
        let before = LatencyBuckets::from_histogram(&histogram);
        histogram.record(10).unwrap();
        histogram.record(3000).unwrap();
        let delta = LatencyBuckets::from_histogram(&histogram).since(&before);
        assert_eq!(delta.count(), 2);
        assert_eq!(delta.counts[4], 1);
        assert_eq!(delta.counts[12], 1);
    }
}
