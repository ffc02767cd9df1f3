//! The state panels' data (`/api/status`): what is true now rather than a rate — each pool's
//! vdev tree with health and error counts, cache devices, scrub and resilver progress, the most
//! recent txgs (open, quiesce and sync times, dirty bytes, throttle), each dataset's space with
//! what its snapshots hold and the snapshot levels, and the names the page offers to drill
//! into (datasets with their protocol, devices with their role); and the NFS server's
//! statistics (`cairn stat nfs`'s report: procedures, clients), when it serves NFS.

use super::sample::Sample;
use serde_json::{Value, json};

fn trigger_name(trigger: cairn_pool::txg::SyncTrigger) -> &'static str {
    use cairn_pool::txg::SyncTrigger;
    match trigger {
        SyncTrigger::Requested => "request",
        SyncTrigger::Shutdown => "shutdown",
        SyncTrigger::DirtyThreshold => "dirty",
        SyncTrigger::Timeout => "timeout",
        SyncTrigger::Background => "background",
    }
}

fn pool_json(pool: &super::sample::PoolSample) -> Value {
    let status = &pool.status;
    let scrub = status.last_scrub.as_ref().map(|s| {
        json!({
            "started_ms": s.started_ms,
            "finished_ms": s.finished_ms,
            "bytes_scanned": s.bytes_scanned,
            "repaired_bytes": s.repaired_bytes,
            "unrecoverable_blocks": s.unrecoverable_blocks,
            "canceled": s.canceled,
        })
    });
    let scrub_running = pool.scrub_running.as_ref().map(|p| {
        json!({
            "scanned_bytes": p.scanned_bytes,
            "total_bytes": p.total_bytes,
            "repaired_bytes": p.repaired_bytes,
            "unrecoverable_blocks": p.unrecoverable_blocks,
        })
    });
    let resilver = status.resilver.as_ref().map(|r| {
        json!({
            "leaf": r.leaf,
            "copied_bytes": r.copied_bytes,
            "total_bytes": r.total_bytes,
            "rate_bytes_per_s": r.rate_bytes_per_s,
            "finished_ms": r.finished_ms,
            "error": r.error,
        })
    });
    json!({
        "name": pool.name,
        "health": status.health.as_str(),
        "size_bytes": status.size_bytes,
        "allocated_bytes": status.allocated_bytes,
        "free_bytes": status.free_bytes,
        "fragmentation_percent": status.fragmentation_percent,
        "txg": status.txg,
        "dirty_bytes": pool.dirty_bytes,
        "suspended": status.suspended,
        "tops": tops_json(status),
        "cache": cache_json(pool),
        "scrub": scrub,
        "scrub_running": scrub_running,
        "resilver": resilver,
        "txgs": txgs_json(pool),
        "datasets": pool.datasets.iter().map(|d| json!({"name": d.dataset, "protocol": d.protocol})).collect::<Vec<_>>(),
        "intent_logs": pool.intent_logs.iter().map(|l| l.dataset.clone()).collect::<Vec<_>>(),
        "devices": pool.devices.iter().map(|d| json!({"name": d.device.name, "role": d.device.role.as_str()})).collect::<Vec<_>>(),
        "dataset_space": pool.dataset_space.iter().map(|d| json!({
            "name": d.name,
            "used_bytes": d.used_bytes,
            "referenced_bytes": d.referenced_bytes,
            "snapshots_bytes": d.snapshots_bytes,
        })).collect::<Vec<_>>(),
        "snapshots": {
            "snapshots": pool.snapshots.snapshots,
            "freeing_bytes": pool.snapshots.freeing_bytes,
            "deadlist_bytes": pool.snapshots.deadlist_bytes,
        },
        "l2arc": pool.l2arc.as_ref().map(|fields| fields.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect::<serde_json::Map<_, _>>()),
    })
}

/// The vdev tree: each top-level vdev with its leaves' health and error counts.
fn tops_json(status: &cairn_engine::PoolStatus) -> Vec<Value> {
    status
        .tops
        .iter()
        .map(|top| {
            json!({
                "name": top.name,
                "health": top.health.as_str(),
                "log": top.is_log,
                "mirror": top.is_mirror,
                "leaves": top.leaves.iter().map(|leaf| json!({
                    "name": leaf.name,
                    "health": leaf.health.as_str(),
                    "read_errors": leaf.read_errors,
                    "write_errors": leaf.write_errors,
                    "checksum_errors": leaf.checksum_errors,
                    "repaired_bytes": leaf.repaired_bytes,
                    "resilvering": leaf.resilvering,
                })).collect::<Vec<_>>(),
            })
        })
        .collect()
}

/// The cache devices, which are not in the vdev tree.
fn cache_json(pool: &super::sample::PoolSample) -> Vec<Value> {
    pool.devices
        .iter()
        .filter(|d| d.device.role == cairn_engine::DeviceRole::Cache)
        .map(|d| {
            json!({
                "name": d.device.name,
                "health": d.device.health,
                "read_errors": d.device.read_errors,
                "write_errors": d.device.write_errors,
                "checksum_errors": d.device.checksum_errors,
            })
        })
        .collect()
}

/// The most recent txgs: their timings, dirty bytes and throttling.
fn txgs_json(pool: &super::sample::PoolSample) -> Vec<Value> {
    pool.txg_history
        .iter()
        .map(|t| {
            json!({
                "txg": t.txg,
                "trigger": trigger_name(t.trigger),
                "dirty_bytes": t.dirty_bytes,
                "opened_at_us": t.opened_at_us,
                "open_us": t.open_us,
                "quiesce_us": t.quiesce_us,
                "sync_us": t.sync_us,
                "writer_delays": t.writer_delays_count,
                "writer_delay_us": t.writer_delay_ns_total / 1000,
                "writers_blocked": t.writers_blocked_count,
            })
        })
        .collect()
}

/// The latest sample's state, as the page reads it.
pub fn to_json(sample: &Sample) -> Value {
    json!({
        "t": sample.unix_ms,
        "uptime_s": sample.uptime_s,
        "resident_bytes": sample.resident_bytes,
        "arc": sample.arc.iter().map(|(k, v)| ((*k).to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        "pools": sample.pools.iter().map(pool_json).collect::<Vec<_>>(),
        // The NFS server's statistics as `stat nfs -j` gives them (null: not serving NFS).
        "nfs": sample.nfs.as_ref().and_then(|nfs| serde_json::to_value(nfs.report()).ok()),
        "events": sample.events.iter().map(|e| json!({
            "seq": e.seq,
            "unix_ms": e.unix_ms,
            "source": e.source,
            "message": e.message,
        })).collect::<Vec<_>>(),
    })
}
