//! What a pool reports about itself: `status` (health, space, scrub and resilver, suspension,
//! every top-level vdev and leaf) and the devices' I/O (`device_io`, `io_stats`,
//! `device_queues`), its intent logs' latency and counters, the log devices' use, and its
//! snapshot counters with each dataset's space (`snapshot_stats`, `dataset_space`).
//!
//! Reads only: nothing here changes the pool or waits for a txg. The figures are snapshots
//! taken under the locks of the structures they come from, one at a time, so two figures of
//! one report may be a moment apart. Uses `pool.rs` (the handle); nothing in the engine uses
//! this file.

use crate::pool::Pool;
use cairn_dataset::ScrubRecord;
use cairn_pool::vdev::Health;
use std::sync::atomic::Ordering;

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LeafStatus {
    pub name: String,
    pub health: Health,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub repaired_bytes: u64,
    /// Attached and still being filled by a resilver.
    pub resilvering: bool,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TopStatus {
    pub name: String,
    pub health: Health,
    pub leaves: Vec<LeafStatus>,
    pub is_mirror: bool,
    /// A separate intent-log device.
    pub is_log: bool,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PoolStatus {
    pub name: String,
    pub guid: u64,
    pub health: Health,
    pub txg: u64,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub fragmentation_percent: u64,
    pub tops: Vec<TopStatus>,
    pub last_scrub: Option<ScrubRecord>,
    /// Why the pool refuses writes: I/O suspended until `pool clear` (`suspended_until_clear`),
    /// or no txg is committed any more (a failed sync, a refused free).
    pub suspended: Option<String>,
    /// The suspension ends with `pool clear` once the devices are back (else: re-import).
    pub suspended_until_clear: bool,
    pub resilver: Option<crate::resilver_task::ResilverStatus>,
    /// Imported read-only (`pool import -o readonly=on`): nothing is written, the space log
    /// was not read (so the space figures count nothing as allocated).
    pub imported_readonly: bool,
}

impl Pool {
    /// What people should know about the vdev layout: each raidz vdev whose children differ
    /// in size uses every child only up to the smallest one's size.
    pub fn layout_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        for top in &self.core.tree().tops {
            if top.raidz().is_none() {
                continue;
            }
            let sizes: Vec<u64> = top
                .leaves
                .iter()
                .filter_map(|leaf| leaf.device().map(|device| device.size_bytes()))
                .collect();
            let (Some(&smallest), Some(&largest)) = (sizes.iter().min(), sizes.iter().max()) else {
                continue;
            };
            if smallest != largest {
                warnings.push(format!(
                    "warning: the devices of {} differ in size ({smallest} to {largest} \
                     bytes); each is used only up to the smallest one's size",
                    top.kind_name()
                ));
            }
        }
        warnings
    }

    pub fn status(&self) -> PoolStatus {
        let stats = self.core.space.lock().stats();
        // (Taken alone: `resilver_status` locks the directory too.)
        let last_scrub = self.core.directory.lock().last_scrub.clone();
        let tops = self
            .core
            .tree()
            .tops
            .iter()
            .map(|top| TopStatus {
                name: top.kind_name(),
                health: top.health(),
                is_mirror: top.leaves.len() > 1,
                is_log: top.config.role == cairn_format::VdevRole::Log,
                leaves: top
                    .leaves
                    .iter()
                    .map(|leaf| {
                        let (read, write, checksum) = leaf.errors.snapshot();
                        LeafStatus {
                            name: leaf.spec.to_string(),
                            health: leaf.health(),
                            read_errors: read,
                            write_errors: write,
                            checksum_errors: checksum,
                            repaired_bytes: leaf.errors.repaired_bytes.load(Ordering::Relaxed),
                            resilvering: leaf.is_resilvering(),
                        }
                    })
                    .collect(),
            })
            .collect();
        PoolStatus {
            name: self.core.name.clone(),
            guid: self.core.guid,
            health: self.core.tree().health(),
            txg: self.last_synced_txg(),
            size_bytes: stats.size_bytes,
            allocated_bytes: stats.allocated_bytes,
            free_bytes: stats.free_bytes,
            fragmentation_percent: u64::from(stats.fragmentation_percent),
            tops,
            last_scrub,
            suspended: self.suspended(),
            suspended_until_clear: self.txg.as_ref().is_some_and(|txg| txg.io_suspended()),
            resilver: self.resilver_status(),
            imported_readonly: self.without_space_log,
        }
    }
}

/// Intent-log use of one log device (a top-level vdev of role `log`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LogDeviceUse {
    pub name: String,
    pub health: Health,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub write_latency_p50_us: u64,
    pub write_latency_p99_us: u64,
    pub flush_latency_p50_us: u64,
}

/// What a device is to its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRole {
    Data,
    Log,
    Cache,
}

impl DeviceRole {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceRole::Data => "data",
            DeviceRole::Log => "log",
            DeviceRole::Cache => "cache",
        }
    }
}

/// One device's health, error counts and whole I/O queue statistics (`Pool::device_queues`).
#[derive(Debug, Clone)]
pub struct DeviceQueue {
    pub name: String,
    pub role: DeviceRole,
    pub health: String,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    /// `None`: the device is missing (no queue).
    pub queue: Option<cairn_device::QueueStats>,
}

/// One leaf device's I/O queue counters (`cairn stat io`).
#[derive(Debug, Clone)]
pub struct LeafIo {
    pub name: String,
    pub is_log: bool,
    /// A cache device (the SSD tier), listed after the pool's leaves.
    pub is_cache: bool,
    /// `None`: the device is missing (no queue).
    pub fields: Option<Vec<(&'static str, u64)>>,
}

/// One device's queue statistics, for `pool iostat -l/-w/-q/-r`.
#[derive(Debug, Clone)]
pub struct DeviceIo {
    pub name: String,
    /// `None`: the device is missing (no queue).
    pub queue: Option<cairn_device::QueueStats>,
}

/// A top-level vdev (or a cache device) with its space and its leaves' I/O.
#[derive(Debug, Clone)]
pub struct TopIo {
    /// `mirror-0`, or the leaf's name when the vdev is one device.
    pub name: String,
    pub is_log: bool,
    pub is_cache: bool,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub leaves: Vec<DeviceIo>,
}

/// A pool's space and every device's queue statistics (since this process opened it).
#[derive(Debug, Clone)]
pub struct PoolDeviceIo {
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    /// Data and log vdevs in tree order, then cache devices (`is_cache`, one leaf each).
    pub tops: Vec<TopIo>,
}

impl Pool {
    /// The space and the per-class queue statistics of every device: `pool iostat`'s device
    /// views (`-l`, `-w`, `-q`, `-r`).
    pub fn device_io(&self) -> PoolDeviceIo {
        let stats = self.core.space.lock().stats();
        let mut tops: Vec<TopIo> = self
            .core
            .tree()
            .tops
            .iter()
            .map(|top| {
                let space = stats.vdevs.iter().find(|v| v.vdev == top.id());
                TopIo {
                    name: top.kind_name(),
                    is_log: top.config.role == cairn_format::VdevRole::Log,
                    is_cache: false,
                    size_bytes: space.map_or(0, |v| v.size_bytes),
                    allocated_bytes: space.map_or(0, |v| v.allocated_bytes),
                    free_bytes: space.map_or(0, |v| v.free_bytes),
                    leaves: top
                        .leaves
                        .iter()
                        .map(|leaf| DeviceIo {
                            name: leaf.spec.to_string(),
                            queue: leaf.queue().map(|queue| queue.stats()),
                        })
                        .collect(),
                }
            })
            .collect();
        if let Some(tier) = &self.l2 {
            let reports = tier.reports();
            for device in tier.devices() {
                let report = reports.iter().find(|report| report.name == device.name);
                let size_bytes = report.map_or(0, |report| report.size_bytes);
                let allocated_bytes = report.map_or(0, |report| report.alloc_bytes);
                tops.push(TopIo {
                    name: device.name.clone(),
                    is_log: false,
                    is_cache: true,
                    size_bytes,
                    allocated_bytes,
                    free_bytes: size_bytes.saturating_sub(allocated_bytes),
                    leaves: vec![DeviceIo {
                        name: device.name.clone(),
                        queue: Some(device.queue_stats()),
                    }],
                });
            }
        }
        PoolDeviceIo {
            size_bytes: stats.size_bytes,
            allocated_bytes: stats.allocated_bytes,
            free_bytes: stats.free_bytes,
            tops,
        }
    }

    /// The pipeline's counters and every leaf's queue counters, then every cache device's
    /// (since this process opened the pool).
    pub fn io_stats(&self) -> (Vec<(&'static str, u64)>, Vec<LeafIo>) {
        let tree = self.core.io.tree();
        let leaves = tree
            .tops
            .iter()
            .flat_map(|top| {
                let is_log = top.config.role == cairn_format::VdevRole::Log;
                top.leaves.iter().map(move |leaf| LeafIo {
                    name: leaf.spec.to_string(),
                    is_log,
                    is_cache: false,
                    fields: leaf.queue().map(|queue| queue.stats().fields()),
                })
            })
            .chain(
                self.l2
                    .iter()
                    .flat_map(|tier| tier.devices())
                    .map(|device| LeafIo {
                        name: device.name.clone(),
                        is_log: false,
                        is_cache: true,
                        fields: Some(device.queue_stats().fields()),
                    }),
            )
            .collect();
        (self.core.io.stats.fields(), leaves)
    }

    /// Every device's I/O queue, whole (latency histograms included): the pool's leaves in
    /// tree order, then its cache devices. For the analytics; `io_stats` is the flat view.
    pub fn device_queues(&self) -> Vec<DeviceQueue> {
        let tree = self.core.io.tree();
        let mut out: Vec<DeviceQueue> = tree
            .tops
            .iter()
            .flat_map(|top| {
                let role = if top.config.role == cairn_format::VdevRole::Log {
                    DeviceRole::Log
                } else {
                    DeviceRole::Data
                };
                top.leaves.iter().map(move |leaf| {
                    let (read_errors, write_errors, checksum_errors) = leaf.errors.snapshot();
                    DeviceQueue {
                        name: leaf.spec.to_string(),
                        role,
                        health: leaf.health().as_str().to_string(),
                        read_errors,
                        write_errors,
                        checksum_errors,
                        queue: leaf.queue().map(|queue| queue.stats()),
                    }
                })
            })
            .collect();
        if let Some(tier) = &self.l2 {
            let reports = tier.reports();
            for device in tier.devices() {
                let report = reports.iter().find(|r| r.name == device.name);
                out.push(DeviceQueue {
                    name: device.name.clone(),
                    role: DeviceRole::Cache,
                    health: match report.map(|r| r.health) {
                        Some(cairn_l2arc::L2Health::Online) => "ONLINE",
                        Some(cairn_l2arc::L2Health::Faulted) => "FAULTED",
                        None => "UNKNOWN",
                    }
                    .to_string(),
                    read_errors: report.map_or(0, |r| r.read_errors),
                    write_errors: report.map_or(0, |r| r.write_errors),
                    checksum_errors: report.map_or(0, |r| r.checksum_errors),
                    queue: Some(device.queue_stats()),
                });
            }
        }
        out
    }

    /// Latency of every commit of each open volume's and filesystem's intent log, in
    /// microseconds (since this process opened it).
    pub fn intent_log_latency(&self) -> Vec<(String, hdrhistogram::Histogram<u64>)> {
        self.core
            .intent_logs
            .lock()
            .iter()
            .map(|(name, log)| (name.clone(), log.commit_latency_us()))
            .collect()
    }

    /// Counters of every open dataset's intent log, volumes and filesystems (since this
    /// process opened it).
    pub fn intent_log_stats(&self) -> Vec<(String, cairn_zil::ZilStatsSnapshot)> {
        self.core
            .intent_logs
            .lock()
            .iter()
            .map(|(name, log)| (name.clone(), log.stats_snapshot()))
            .collect()
    }

    /// Use of each separate log device.
    pub fn log_devices(&self) -> Vec<LogDeviceUse> {
        let stats = self.core.space.lock().stats();
        self.core
            .tree()
            .tops
            .iter()
            .filter(|top| top.config.role == cairn_format::VdevRole::Log)
            .map(|top| {
                let space = stats.vdevs.iter().find(|v| v.vdev == top.id());
                let mut device = LogDeviceUse {
                    name: top.kind_name(),
                    health: top.health(),
                    size_bytes: space.map_or(0, |v| v.size_bytes),
                    allocated_bytes: space.map_or(0, |v| v.allocated_bytes),
                    writes: 0,
                    write_bytes: 0,
                    flushes: 0,
                    write_latency_p50_us: 0,
                    write_latency_p99_us: 0,
                    flush_latency_p50_us: 0,
                };
                for queue in top.leaves.iter().filter_map(|leaf| leaf.queue()) {
                    let q = queue.stats();
                    device.writes += q.write_requests;
                    device.write_bytes += q.write_bytes;
                    device.flushes += q.flushes;
                    device.write_latency_p50_us = device
                        .write_latency_p50_us
                        .max(q.write_latency_us.value_at_quantile(0.5));
                    device.write_latency_p99_us = device
                        .write_latency_p99_us
                        .max(q.write_latency_us.value_at_quantile(0.99));
                    device.flush_latency_p50_us = device
                        .flush_latency_p50_us
                        .max(q.flush_latency_us.value_at_quantile(0.5));
                }
                device
            })
            .collect()
    }
}

/// One dataset's space, as the analytics show what snapshots hold.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DatasetSpaceFigures {
    pub name: String,
    /// `used`: the dataset, its snapshots and children.
    pub used_bytes: u64,
    /// `referenced`.
    pub referenced_bytes: u64,
    /// `usedbysnapshots`.
    pub snapshots_bytes: u64,
}

impl Pool {
    /// The pool's snapshot counters since it was opened in this process, with the table's
    /// levels now.
    pub fn snapshot_stats(&self) -> crate::SnapshotStatsSnapshot {
        let mut stats = self.core.snapshot_stats.copy();
        let table = self.core.snapshots.lock();
        let held = table.deadlist_totals();
        stats.freeing_bytes = table.freeing_bytes();
        stats.snapshots = table.len() as u64;
        stats.deadlist_entries = held.blocks;
        stats.deadlist_bytes = held.allocated_bytes;
        stats.deadlist_parts = table.deadlist_parts();
        stats.deadlist_parts_retiring = table.retiring_parts();
        stats.mos_objects_bound = self.core.mos.object_id_bound();
        stats
    }

    /// The latencies of snapshot commands (µs, call to durable) since the pool was opened.
    pub fn snapshot_command_latency(&self) -> hdrhistogram::Histogram<u64> {
        self.core.snapshot_stats.command_latency_us.lock().clone()
    }

    /// Every dataset's `used`, `referenced` and `usedbysnapshots`, by name (as of the last
    /// synced txg; no property is resolved, so it is cheap enough for every analytics tick).
    pub fn dataset_space(&self) -> Vec<DatasetSpaceFigures> {
        let directory = self.core.directory.lock();
        let view = cairn_dataset::space::SpaceView::of(&directory);
        directory
            .datasets
            .values()
            .map(|record| {
                let space = view.datasets.get(&record.name).copied().unwrap_or_default();
                DatasetSpaceFigures {
                    name: record.name.clone(),
                    used_bytes: space.used_bytes(),
                    referenced_bytes: space.referenced_bytes,
                    snapshots_bytes: space.snapshots_bytes,
                }
            })
            .collect()
    }
}
