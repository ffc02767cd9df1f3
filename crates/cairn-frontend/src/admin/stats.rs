//! The subsystem statistics of `stat zil | io | fs | memory | snapshots | nfs`: what the process that has the
//! pools open (a server, or the front end's own process) counted, taken where it was counted
//! and carried as plain data. Every reply says whether it is a server's (`served`): a one-shot
//! process's counters cover only its own request.
//!
//! Invariants: over every pool (none named), a pool that cannot be opened is a note and
//! skipped; the process's resident memory is read in the process whose memory it is (the
//! server's when one answers).

use super::AdminError;
use super::failures::skip_unavailable;
use super::samples::{Counters, counters};
use crate::PoolAccess;
use cairn_engine::LogDeviceUse;
use cairn_engine::SnapshotStatsSnapshot;
use cairn_engine::ZilStatsSnapshot;
use serde::{Deserialize, Serialize};

/// `stat zil`: each pool's intent logs (per dataset) and log devices.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ZilSample {
    pub served: bool,
    pub pools: Vec<PoolZil>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolZil {
    pub name: String,
    pub logs: Vec<(String, ZilStatsSnapshot)>,
    pub devices: Vec<LogDeviceUse>,
}

/// `stat io`: each pool's pipeline counters and every leaf device's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IoSample {
    pub served: bool,
    pub pools: Vec<PoolIo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolIo {
    pub name: String,
    pub counters: Counters,
    pub leaves: Vec<LeafIo>,
}

/// One device's counters (`None`: the device cannot be read).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LeafIo {
    pub name: String,
    pub is_log: bool,
    pub is_cache: bool,
    pub fields: Option<Counters>,
}

/// `stat fs`: one mounted filesystem's calls, partial writes and memo.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FsSample {
    pub dataset: String,
    pub calls: Vec<CallCounters>,
    pub partial_writes: Counters,
    pub memo: Counters,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CallCounters {
    pub op: String,
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// `stat snapshots`: each pool's snapshot counters (commands, background frees) and levels
/// (freeing, deadlists held), with the latency of snapshot commands.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SnapshotSample {
    pub served: bool,
    pub pools: Vec<(String, SnapshotStatsSnapshot)>,
}

/// `stat nfs`: the NFS server's statistics (all zeros when no server, or one not serving
/// NFS, answers: `served`, `serving` say which).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NfsSample {
    pub served: bool,
    /// The server serves NFS (`serve --nfs`).
    pub serving: bool,
    pub nfs: crate::nfs_stats::NfsReport,
}

/// `stat memory`: the budget's parts (name, limit, what it holds now where counted) and the
/// process's resident memory now and at its peak.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemorySample {
    pub served: bool,
    pub parts: Vec<(String, u64, Option<u64>)>,
    pub resident_bytes: Option<u64>,
    pub peak_resident_bytes: Option<u64>,
}

pub(super) fn zil(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<ZilSample, AdminError> {
    let mut sample = ZilSample {
        served: access.served.is_some(),
        pools: Vec::new(),
    };
    for name in access.pools_or_all(pools)? {
        let opened = access.with_pool(&name, false, |pool| {
            Ok::<_, AdminError>((pool.intent_log_stats(), pool.log_devices()))
        });
        if let Some((logs, devices)) = skip_unavailable(opened, !pools.is_empty(), notes)? {
            sample.pools.push(PoolZil {
                name,
                logs,
                devices,
            });
        }
    }
    Ok(sample)
}

pub(super) fn io(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<IoSample, AdminError> {
    let mut sample = IoSample {
        served: access.served.is_some(),
        pools: Vec::new(),
    };
    for name in access.pools_or_all(pools)? {
        let opened = access.with_pool(&name, false, |pool| Ok::<_, AdminError>(pool.io_stats()));
        if let Some((pipeline, leaves)) = skip_unavailable(opened, !pools.is_empty(), notes)? {
            sample.pools.push(PoolIo {
                name,
                counters: counters(&pipeline),
                leaves: leaves
                    .into_iter()
                    .map(|leaf| LeafIo {
                        name: leaf.name,
                        is_log: leaf.is_log,
                        is_cache: leaf.is_cache,
                        fields: leaf.fields.as_deref().map(counters),
                    })
                    .collect(),
            });
        }
    }
    Ok(sample)
}

pub(super) fn snapshots(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<SnapshotSample, AdminError> {
    let mut sample = SnapshotSample {
        served: access.served.is_some(),
        pools: Vec::new(),
    };
    for name in access.pools_or_all(pools)? {
        let opened = access.with_pool(&name, false, |pool| {
            Ok::<_, AdminError>(pool.snapshot_stats())
        });
        if let Some(stats) = skip_unavailable(opened, !pools.is_empty(), notes)? {
            sample.pools.push((name, stats));
        }
    }
    Ok(sample)
}

/// The mounted filesystems of `pools` (every pool when empty); none without a server.
pub(super) fn fs(access: &PoolAccess, pools: &[String]) -> Vec<FsSample> {
    let Some(served) = &access.served else {
        return Vec::new();
    };
    crate::analytics::sample::dataset_samples(served)
        .into_iter()
        .filter(|sample| sample.protocol == "fuse" || sample.protocol == "nfs")
        .filter(|sample| {
            pools.is_empty()
                || pools
                    .iter()
                    .any(|pool| sample.dataset.split('/').next() == Some(pool))
        })
        .map(|sample| FsSample {
            calls: sample
                .calls
                .iter()
                .map(|op| CallCounters {
                    op: op.op.to_string(),
                    ops: op.ops,
                    bytes: op.bytes,
                    errors: op.errors,
                    p50_us: op.p50_us,
                    p99_us: op.p99_us,
                    max_us: op.max_us,
                })
                .collect(),
            partial_writes: counters(&sample.partial_writes),
            memo: counters(&sample.memo),
            dataset: sample.dataset,
        })
        .collect()
}

/// The NFS server's statistics, if this process is a server serving NFS.
pub(super) fn nfs(access: &PoolAccess) -> NfsSample {
    let stats = access
        .served
        .as_ref()
        .and_then(|served| served.nfs_stats.get().cloned());
    NfsSample {
        served: access.served.is_some(),
        serving: stats.is_some(),
        nfs: stats.map_or_else(crate::nfs_stats::NfsReport::empty, |stats| {
            stats.snapshot().report()
        }),
    }
}

/// The server's memory budget and what each part holds; without a server, the budget a server
/// with this process's cache would state.
pub(super) fn memory(access: &PoolAccess) -> MemorySample {
    let arc = cairn_engine::process_cache().stats();
    let arc_max_bytes = arc.get("c_max").unwrap_or(0);
    let parts = access
        .served
        .as_ref()
        .map(|served| crate::analytics::sample::memory_parts(served, &arc.fields))
        .filter(|parts| !parts.is_empty())
        .unwrap_or_else(|| {
            let request_bytes = cairn_nbd::ServerConfig::default().max_request_bytes;
            cairn_engine::MemoryBudget::for_arc_max(arc_max_bytes, request_bytes.into())
                .parts()
                .iter()
                .map(
                    |&(part, limit_bytes)| crate::analytics::sample::MemoryPart {
                        part,
                        limit_bytes,
                        used_bytes: (part == "arc").then(|| arc.get("size")).flatten(),
                    },
                )
                .collect()
        });
    let (resident_bytes, peak_resident_bytes) = resident();
    MemorySample {
        served: access.served.is_some(),
        parts: parts
            .into_iter()
            .map(|part| (part.part.to_string(), part.limit_bytes, part.used_bytes))
            .collect(),
        resident_bytes,
        peak_resident_bytes,
    }
}

/// `VmRSS` and `VmHWM` of this process.
fn resident() -> (Option<u64>, Option<u64>) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
