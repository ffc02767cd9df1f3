//! Cumulative counters as they travel to a front end that shows rates: the server takes a
//! sample now, the front end takes another later and shows the difference. Every type here is
//! plain data (serde), the same whether it crossed the control socket or was taken in the
//! front end's own process.
//!
//! Invariants: counters only grow while a server runs (a front end subtracts an earlier sample
//! from a later one, saturating); histograms travel as lists of bucket counts and come back
//! only when they have the buckets the receiver expects (`SampleError` otherwise).

use cairn_device::{ClassStats, DirectionStats, Pow2Histogram};
use cairn_engine::PoolDeviceIo;
use serde::{Deserialize, Serialize};

/// A sample that does not fit the receiver's types.
#[derive(Debug, thiserror::Error)]
#[error("a histogram in the device sample has {buckets} buckets, not {expected}")]
pub struct SampleError {
    pub buckets: usize,
    pub expected: usize,
}

/// `name -> value` counters, in the order their source lists them.
pub type Counters = Vec<(String, u64)>;

/// Every served dataset's traffic (`pool iostat`): cumulative counters by dataset and
/// operation, and the server's uptime when they were taken.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DatasetIoSample {
    pub uptime_s: f64,
    pub datasets: Vec<DatasetIo>,
}

/// One dataset's operations (`read`, `write`, `flush`, `trim`, `meta`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DatasetIo {
    pub dataset: String,
    pub ops: Vec<OpCounters>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OpCounters {
    pub op: String,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub latency_sum_us: f64,
    pub p50_us: u64,
    pub p99_us: u64,
}

/// The ARC's counters and sizes, and whether they are a server's (or this process's own).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ArcSample {
    pub served: bool,
    pub fields: Counters,
}

/// The SSD tier's counters of every pool that has cache devices.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct L2arcSample {
    pub served: bool,
    pub pools: Vec<(String, Counters)>,
}

/// Every device's I/O counters (`pool iostat -l/-q/-w/-r`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeviceIoSample {
    /// Seconds the counters cover (the server's uptime, or since the pools were opened here).
    pub uptime_s: f64,
    pub pools: Vec<PoolSample>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolSample {
    pub name: String,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub tops: Vec<TopSample>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Section {
    Data,
    Log,
    Cache,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopSample {
    pub name: String,
    pub section: Section,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub leaves: Vec<LeafSample>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeafSample {
    pub name: String,
    /// `None`: the device is missing.
    pub classes: Option<Vec<ClassSample>>,
}

/// `ClassStats` in a form serde knows (histograms as lists of bucket counts).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClassSample {
    pub pending_requests: u64,
    pub active_requests: u64,
    pub read: DirectionSample,
    pub write: DirectionSample,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DirectionSample {
    pub requests: u64,
    pub bytes: u64,
    pub queue_wait_ns: u64,
    pub disk_wait_ns: u64,
    pub total_wait_ns: u64,
    pub queue_wait_us: Vec<u64>,
    pub disk_wait_us: Vec<u64>,
    pub total_wait_us: Vec<u64>,
    pub request_size_bytes: Vec<u64>,
    pub aggregate_size_bytes: Vec<u64>,
    #[serde(default)]
    pub aggregate_bytes: u64,
}

impl DirectionSample {
    pub fn from_stats(stats: &DirectionStats) -> DirectionSample {
        DirectionSample {
            requests: stats.requests,
            bytes: stats.bytes,
            queue_wait_ns: stats.queue_wait_ns,
            disk_wait_ns: stats.disk_wait_ns,
            total_wait_ns: stats.total_wait_ns,
            queue_wait_us: stats.queue_wait_us.counts.to_vec(),
            disk_wait_us: stats.disk_wait_us.counts.to_vec(),
            total_wait_us: stats.total_wait_us.counts.to_vec(),
            request_size_bytes: stats.request_size_bytes.counts.to_vec(),
            aggregate_size_bytes: stats.aggregate_size_bytes.counts.to_vec(),
            aggregate_bytes: stats.aggregate_bytes,
        }
    }

    pub fn to_stats(&self) -> Result<DirectionStats, SampleError> {
        fn histogram<const N: usize, const B: u32>(
            counts: &[u64],
        ) -> Result<Pow2Histogram<N, B>, SampleError> {
            let counts: [u64; N] = counts.try_into().map_err(|_| SampleError {
                buckets: counts.len(),
                expected: N,
            })?;
            Ok(Pow2Histogram { counts })
        }
        Ok(DirectionStats {
            requests: self.requests,
            bytes: self.bytes,
            queue_wait_ns: self.queue_wait_ns,
            disk_wait_ns: self.disk_wait_ns,
            total_wait_ns: self.total_wait_ns,
            queue_wait_us: histogram(&self.queue_wait_us)?,
            disk_wait_us: histogram(&self.disk_wait_us)?,
            total_wait_us: histogram(&self.total_wait_us)?,
            request_size_bytes: histogram(&self.request_size_bytes)?,
            aggregate_size_bytes: histogram(&self.aggregate_size_bytes)?,
            aggregate_bytes: self.aggregate_bytes,
        })
    }
}

impl ClassSample {
    pub fn from_stats(stats: &ClassStats) -> ClassSample {
        ClassSample {
            pending_requests: stats.pending_requests,
            active_requests: stats.active_requests,
            read: DirectionSample::from_stats(&stats.read),
            write: DirectionSample::from_stats(&stats.write),
        }
    }

    pub fn to_stats(&self) -> Result<ClassStats, SampleError> {
        Ok(ClassStats {
            pending_requests: self.pending_requests,
            active_requests: self.active_requests,
            read: self.read.to_stats()?,
            write: self.write.to_stats()?,
        })
    }
}

impl PoolSample {
    pub fn new(name: &str, io: PoolDeviceIo) -> PoolSample {
        PoolSample {
            name: name.to_string(),
            size_bytes: io.size_bytes,
            allocated_bytes: io.allocated_bytes,
            free_bytes: io.free_bytes,
            tops: io
                .tops
                .into_iter()
                .map(|top| TopSample {
                    name: top.name,
                    section: match (top.is_cache, top.is_log) {
                        (true, _) => Section::Cache,
                        (_, true) => Section::Log,
                        _ => Section::Data,
                    },
                    size_bytes: top.size_bytes,
                    allocated_bytes: top.allocated_bytes,
                    free_bytes: top.free_bytes,
                    leaves: top
                        .leaves
                        .into_iter()
                        .map(|leaf| LeafSample {
                            name: leaf.name,
                            classes: leaf.queue.map(|queue| {
                                queue.classes.iter().map(ClassSample::from_stats).collect()
                            }),
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// The served datasets' traffic now.
pub fn dataset_io(served: &crate::ServedPools) -> DatasetIoSample {
    DatasetIoSample {
        uptime_s: served.uptime_s(),
        datasets: crate::analytics::sample::dataset_samples(served)
            .into_iter()
            .map(|dataset| DatasetIo {
                dataset: dataset.dataset,
                ops: dataset
                    .ops
                    .iter()
                    .map(|op| OpCounters {
                        op: op.op.to_string(),
                        ops: op.ops,
                        bytes: op.bytes,
                        errors: op.errors,
                        latency_sum_us: op.latency.sum_us.round(),
                        p50_us: op.p50_us,
                        p99_us: op.p99_us,
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// `(name, value)` pairs with owned names.
pub fn counters(fields: &[(&'static str, u64)]) -> Counters {
    fields
        .iter()
        .map(|(name, value)| ((*name).to_string(), *value))
        .collect()
}
