//! A `Sample` in the OpenMetrics text format, through `families.rs` (the families of one
//! scrape and `prometheus-client`'s encoder); the NFS server's families are `nfs_metrics.rs`'.
//!
//! Naming: every metric starts with `cairn_`, then the layer (`dataset`, `zil`, `device`,
//! `pool`, `pipeline`, `arc`, `l2arc`, `snapshot`, `process`); units are in the name (`_bytes`,
//! `_seconds`, `_ratio`); counters get `_total` from the encoder. Labels: `pool`, `dataset`,
//! `protocol` (nbd, fuse), `op`, `device`, `role` (data, log, cache), `state`. Latencies are
//! histograms on the analytics' shared buckets (1 µs to 67 s, powers of two). Health is a
//! state set: one series per possible state, 1 for the current one, so an alert can match
//! `cairn_pool_health{state!="ONLINE"} == 1`.

use super::families::{Families, HistogramValue, Labels, encode_text};
use super::sample::Sample;

/// ARC fields that are levels (bytes or counts now), not counters; sizes get `_bytes`.
const ARC_GAUGES: &[(&str, &str)] = &[
    ("size", "size_bytes"),
    ("c", "target_bytes"),
    ("c_min", "target_min_bytes"),
    ("c_max", "target_max_bytes"),
    ("data_size", "data_bytes"),
    ("metadata_size", "metadata_bytes"),
    ("meta_target", "metadata_target_bytes"),
    ("mru_size", "mru_bytes"),
    ("mru_target", "mru_target_bytes"),
    ("mfu_size", "mfu_bytes"),
    ("mru_ghost_size", "mru_ghost_bytes"),
    ("mfu_ghost_size", "mfu_ghost_bytes"),
    ("blocks", "blocks"),
    ("ghost_blocks", "ghost_blocks"),
    ("hdr_size", "header_bytes"),
    ("hdr_bytes_per_block", "header_bytes_per_block"),
    ("inflight", "inflight_reads"),
    ("arc_no_grow", "no_grow"),
    ("memory_available_bytes", "memory_available_bytes"),
];

/// L2ARC fields that are levels, not counters.
const L2ARC_GAUGES: &[&str] = &[
    "devices",
    "size_bytes",
    "alloc_bytes",
    "rebuild_pending_segments",
    "indexed_blocks",
    "index_ram_bytes",
    "sketch_ram_bytes",
    "faulted_devices",
    "write_budget_bytes_per_day",
    "write_budget_left_bytes",
];

/// Whether an ARC field is a level (not a counter).
pub(crate) fn is_arc_level(field: &str) -> bool {
    ARC_GAUGES.iter().any(|(name, _)| *name == field)
}

/// Whether an L2ARC field is a level (not a counter).
pub(crate) fn is_l2arc_level(field: &str) -> bool {
    L2ARC_GAUGES.contains(&field)
}

/// A counter's name for a field (`_total` is added by the encoder).
fn counter_name(prefix: &str, field: &str) -> String {
    format!("{prefix}_{field}")
}

/// ARC evictions by what the SSD tier made of each evicted block, in bytes (arcstat's
/// `evict_l2_*`): one labeled family, as seed 002's Analytics broke evictions down.
const ARC_EVICTED_BY_L2_STATE: &[(&str, &str)] = &[
    ("evict_l2_cached", "cached"),
    ("evict_l2_eligible", "eligible"),
    ("evict_l2_ineligible", "ineligible"),
];

fn arc(families: &mut Families, fields: &[(&'static str, u64)]) {
    for (field, value) in fields {
        if let Some((_, state)) = ARC_EVICTED_BY_L2_STATE.iter().find(|(f, _)| f == field) {
            families.counter(
                "cairn_arc_evicted_by_l2_state_bytes",
                "bytes the ARC evicted, by L2 state: cached (on a cache device or on its way), eligible (not cached: a feed miss) or ineligible",
                vec![("state", (*state).to_string())],
                *value,
            );
        } else if let Some((_, name)) = ARC_GAUGES.iter().find(|(f, _)| f == field) {
            families.gauge(
                format!("cairn_arc_{name}"),
                "ARC level (see cairn stat arc)",
                Vec::new(),
                *value as f64,
            );
        } else {
            families.counter(
                counter_name("cairn_arc", field),
                "ARC counter (see cairn stat arc)",
                Vec::new(),
                *value,
            );
        }
    }
}

const OP_HELP: &str = "operations answered by the dataset's front end";

fn datasets(families: &mut Families, pool: &str, sample: &super::sample::PoolSample) {
    for dataset in &sample.datasets {
        for op in &dataset.ops {
            let labels = vec![
                ("pool", pool.to_string()),
                ("dataset", dataset.dataset.clone()),
                ("protocol", dataset.protocol.to_string()),
                ("op", op.op.to_string()),
            ];
            families.counter("cairn_dataset_operations", OP_HELP, labels.clone(), op.ops);
            families.counter(
                "cairn_dataset_bytes",
                "bytes moved by successful operations",
                labels.clone(),
                op.bytes,
            );
            families.counter(
                "cairn_dataset_errors",
                "operations answered with an error",
                labels.clone(),
                op.errors,
            );
            families.histogram(
                "cairn_dataset_latency_seconds",
                "latency of operations, as the front end answered them",
                labels,
                &op.latency,
            );
        }
    }
    for dataset in sample.datasets.iter().filter(|d| !d.calls.is_empty()) {
        for call in &dataset.calls {
            let labels = vec![
                ("pool", pool.to_string()),
                ("dataset", dataset.dataset.clone()),
                ("call", call.op.to_string()),
            ];
            families.counter(
                "cairn_fs_calls",
                "filesystem calls by kind (cairn stat fs)",
                labels.clone(),
                call.ops,
            );
            families.counter(
                "cairn_fs_call_errors",
                "filesystem calls answered with an error",
                labels.clone(),
                call.errors,
            );
            families.histogram(
                "cairn_fs_call_latency_seconds",
                "filesystem call latency by kind",
                labels,
                &call.latency,
            );
        }
        for (path, count) in &dataset.partial_writes {
            families.counter(
                "cairn_fs_partial_writes",
                "writes covering part of a record: recorded without a read (deferred), merged at once with a block in memory, merged by a txg sync, or whose old block could not be read (bases_lost)",
                vec![
                    ("pool", pool.to_string()),
                    ("dataset", dataset.dataset.clone()),
                    ("path", (*path).to_string()),
                ],
                *count,
            );
        }
    }
    intent_logs(families, pool, sample);
}

/// Every intent log's counters, its held bytes as gauges, and its commit latency.
fn intent_logs(families: &mut Families, pool: &str, sample: &super::sample::PoolSample) {
    for log in &sample.intent_logs {
        let labels = vec![("pool", pool.to_string()), ("dataset", log.dataset.clone())];
        for (field, value) in log.stats.fields() {
            match field {
                "lanes" => families.gauge(
                    "cairn_zil_lanes",
                    "intent log lanes",
                    labels.clone(),
                    value as f64,
                ),
                "block_fill_mean_percent" => families.gauge(
                    "cairn_zil_block_fill_ratio",
                    "mean fill of log blocks written",
                    labels.clone(),
                    value as f64 / 100.0,
                ),
                "deferred_held_bytes" => families.gauge(
                    "cairn_zil_deferred_held_bytes",
                    "bytes of data the per-file records waiting for their file's commit hold",
                    labels.clone(),
                    value as f64,
                ),
                "deferred_held_peak_bytes" => families.gauge(
                    "cairn_zil_deferred_held_peak_bytes",
                    "the most bytes the per-file records waiting have held",
                    labels.clone(),
                    value as f64,
                ),
                // Percentiles are the histogram's business here.
                f if f.starts_with("commit_latency_") => {}
                f => families.counter(
                    counter_name("cairn_zil", f),
                    "intent log counter (see cairn stat zil)",
                    labels.clone(),
                    value,
                ),
            }
        }
        families.histogram(
            "cairn_zil_commit_latency_seconds",
            "latency of intent log commits (synchronous writes, fsync, FLUSH)",
            labels,
            &log.commit_latency,
        );
    }
}

const HEALTH_STATES: &[&str] = &[
    "ONLINE", "DEGRADED", "FAULTED", "OFFLINE", "UNAVAIL", "REMOVED",
];

fn devices(families: &mut Families, pool: &str, sample: &super::sample::PoolSample) {
    for d in &sample.devices {
        let device = &d.device;
        let labels = vec![
            ("pool", pool.to_string()),
            ("device", device.name.clone()),
            ("role", device.role.as_str().to_string()),
        ];
        let with = |extra: (&'static str, &str)| {
            let mut labels = labels.clone();
            labels.push((extra.0, extra.1.to_string()));
            labels
        };
        families.state_set(
            "cairn_device_health",
            "device health (1 for the current state)",
            &labels,
            HEALTH_STATES,
            &device.health,
        );
        for (kind, count) in [
            ("read", device.read_errors),
            ("write", device.write_errors),
            ("checksum", device.checksum_errors),
        ] {
            families.counter(
                "cairn_device_errors",
                "errors charged to the device (as pool status shows them)",
                with(("kind", kind)),
                count,
            );
        }
        let Some(q) = &device.queue else { continue };
        queue_totals(families, &labels, q);
        queue_classes(families, &labels, q);
        for (op, buckets) in [
            ("read", &d.read_latency),
            ("write", &d.write_latency),
            ("flush", &d.flush_latency),
        ] {
            families.histogram(
                "cairn_device_latency_seconds",
                "device request latency, submission to completion",
                with(("op", op)),
                buckets,
            );
        }
    }
}

/// A device queue's totals: requests, calls and bytes by direction, failures, flushes, FUA
/// writes, discards, and how many requests wait and run now.
fn queue_totals(families: &mut Families, labels: &Labels, q: &cairn_device::QueueStats) {
    let with = |extra: (&'static str, &str)| {
        let mut labels = labels.clone();
        labels.push((extra.0, extra.1.to_string()));
        labels
    };
    for (op, requests, calls, bytes) in [
        ("read", q.read_requests, q.read_calls, q.read_bytes),
        ("write", q.write_requests, q.write_calls, q.write_bytes),
    ] {
        families.counter(
            "cairn_device_requests",
            "I/O requests queued to the device",
            with(("op", op)),
            requests,
        );
        families.counter(
            "cairn_device_calls",
            "device calls made for them (fewer when requests aggregate)",
            with(("op", op)),
            calls,
        );
        families.counter(
            "cairn_device_bytes",
            "bytes read or written",
            with(("op", op)),
            bytes,
        );
    }
    for (op, errors) in [
        ("read", q.read_errors),
        ("write", q.write_errors),
        ("flush", q.flush_errors),
    ] {
        families.counter(
            "cairn_device_io_errors",
            "failed requests",
            with(("op", op)),
            errors,
        );
    }
    families.counter(
        "cairn_device_flushes",
        "cache flushes",
        labels.clone(),
        q.flushes,
    );
    families.counter(
        "cairn_device_fua_writes",
        "writes made durable on their own",
        labels.clone(),
        q.fua_writes,
    );
    families.counter(
        "cairn_device_discards",
        "discards",
        labels.clone(),
        q.discards,
    );
    families.gauge(
        "cairn_device_queued_requests",
        "requests waiting in the queue",
        labels.clone(),
        q.queued as f64,
    );
    families.gauge(
        "cairn_device_active_requests",
        "requests in service",
        labels.clone(),
        q.active as f64,
    );
}

/// A device queue's per-class statistics (`pool iostat -l/-q/-w/-r`'s source): waits and sizes
/// as histograms summed over the classes (per direction, so a device has a few histograms,
/// not one per class), and per class its requests, wait sums and queue depths.
fn queue_classes(families: &mut Families, labels: &Labels, q: &cairn_device::QueueStats) {
    use cairn_device::IoClass;
    use cairn_device::iostats::DirectionStats;
    let with = |extra: &[(&'static str, &str)]| {
        let mut labels = labels.clone();
        labels.extend(extra.iter().map(|(k, v)| (*k, (*v).to_string())));
        labels
    };
    let mut read = DirectionStats::default();
    let mut write = DirectionStats::default();
    for class in IoClass::ALL {
        let stats = q.class(class);
        read.add(&stats.read);
        write.add(&stats.write);
        let name = class.name();
        families.gauge(
            "cairn_device_class_pending_requests",
            "requests of the class waiting in the device's queue",
            with(&[("class", name)]),
            stats.pending_requests as f64,
        );
        families.gauge(
            "cairn_device_class_active_requests",
            "requests of the class in device calls",
            with(&[("class", name)]),
            stats.active_requests as f64,
        );
        for (op, direction) in [("read", &stats.read), ("write", &stats.write)] {
            families.counter(
                "cairn_device_class_requests",
                "requests of the class completed",
                with(&[("class", name), ("op", op)]),
                direction.requests,
            );
            for (wait, ns) in [
                ("queue", direction.queue_wait_ns),
                ("disk", direction.disk_wait_ns),
            ] {
                families.seconds_counter(
                    "cairn_device_class_wait_seconds",
                    "time the class's requests spent queued (queue) and in device calls (disk)",
                    with(&[("class", name), ("op", op), ("wait", wait)]),
                    ns as f64 / 1e9,
                );
            }
        }
    }
    for (op, direction) in [("read", &read), ("write", &write)] {
        for (wait, histogram, ns) in [
            ("queue", &direction.queue_wait_us, direction.queue_wait_ns),
            ("disk", &direction.disk_wait_us, direction.disk_wait_ns),
            ("total", &direction.total_wait_us, direction.total_wait_ns),
        ] {
            families.histogram_value(
                "cairn_device_wait_seconds",
                "per request: queued (queue), in the device call (disk), both (total)",
                with(&[("op", op), ("wait", wait)]),
                HistogramValue::pow2(histogram, 1e-6, ns as f64 / 1e9, false),
            );
        }
        families.histogram_value(
            "cairn_device_request_size_bytes",
            "sizes of requests as submitted (individual) and of device calls that merged several (aggregated)",
            with(&[("op", op), ("kind", "individual")]),
            HistogramValue::pow2(&direction.request_size_bytes, 1.0, direction.bytes as f64, true),
        );
        families.histogram_value(
            "cairn_device_request_size_bytes",
            "sizes of requests as submitted (individual) and of device calls that merged several (aggregated)",
            with(&[("op", op), ("kind", "aggregated")]),
            HistogramValue::pow2(
                &direction.aggregate_size_bytes,
                1.0,
                direction.aggregate_bytes as f64,
                true,
            ),
        );
    }
}

fn pool(families: &mut Families, sample: &super::sample::PoolSample) {
    let name = &sample.name;
    let labels = vec![("pool", name.clone())];
    let status = &sample.status;
    families.state_set(
        "cairn_pool_health",
        "pool health (1 for the current state)",
        &labels,
        HEALTH_STATES,
        status.health.as_str(),
    );
    for (metric, value) in [
        ("cairn_pool_size_bytes", status.size_bytes),
        ("cairn_pool_allocated_bytes", status.allocated_bytes),
        ("cairn_pool_free_bytes", status.free_bytes),
        ("cairn_pool_dirty_bytes", sample.dirty_bytes),
        ("cairn_pool_synced_txg", status.txg),
    ] {
        families.gauge(metric, "pool level", labels.clone(), value as f64);
    }
    families.gauge(
        "cairn_pool_fragmentation_ratio",
        "free space fragmentation",
        labels.clone(),
        status.fragmentation_percent as f64 / 100.0,
    );
    families.gauge(
        "cairn_pool_scrub_running",
        "1 while a scrub runs",
        labels.clone(),
        f64::from(u8::from(sample.scrub_running.is_some())),
    );
    if let Some(progress) = &sample.scrub_running {
        for (metric, value) in [
            ("cairn_pool_scrub_scanned_bytes", progress.scanned_bytes),
            ("cairn_pool_scrub_total_bytes", progress.total_bytes),
            ("cairn_pool_scrub_repaired_bytes", progress.repaired_bytes),
        ] {
            families.gauge(
                metric,
                "the running scrub's progress",
                labels.clone(),
                value as f64,
            );
        }
    }
    families.gauge(
        "cairn_pool_suspended",
        "1 while the pool refuses writes",
        labels.clone(),
        f64::from(u8::from(status.suspended.is_some())),
    );
    if let Some(txg) = &sample.txg_stats {
        pool_txgs(families, &labels, txg);
    }
    for (field, value) in &sample.pipeline {
        families.counter(
            counter_name("cairn_pipeline", field),
            "block pipeline counter (see cairn stat io)",
            labels.clone(),
            *value,
        );
    }
    if let Some(fields) = &sample.l2arc {
        for (field, value) in fields {
            if L2ARC_GAUGES.contains(field) {
                families.gauge(
                    format!("cairn_l2arc_{field}"),
                    "L2ARC level (see cairn stat l2arc)",
                    labels.clone(),
                    *value as f64,
                );
            } else {
                families.counter(
                    counter_name("cairn_l2arc", field),
                    "L2ARC counter (see cairn stat l2arc)",
                    labels.clone(),
                    *value,
                );
            }
        }
    }
}

/// A pool's txg syncs: how many, the bytes they carried, the write throttle's delays, and
/// what started them.
fn pool_txgs(families: &mut Families, labels: &Labels, txg: &cairn_pool::txg::TxgStats) {
    families.counter(
        "cairn_pool_txgs_synced",
        "txgs synced",
        labels.clone(),
        txg.txgs_synced,
    );
    families.counter(
        "cairn_pool_synced_bytes",
        "dirty bytes carried to disk by txg syncs",
        labels.clone(),
        txg.bytes_synced_total,
    );
    families.counter(
        "cairn_pool_writer_delays",
        "writers delayed by the write throttle",
        labels.clone(),
        txg.writer_delays_count,
    );
    families.seconds_counter(
        "cairn_pool_writer_delay_seconds",
        "total delay the write throttle imposed",
        labels.clone(),
        txg.writer_delay_ns_total as f64 / 1e9,
    );
    for (trigger, count) in [
        ("timeout", txg.syncs_by_timeout),
        ("dirty", txg.syncs_by_dirty_threshold),
        ("request", txg.syncs_by_request),
        ("shutdown", txg.syncs_at_shutdown),
        ("background", txg.syncs_for_background),
    ] {
        let mut labels = labels.clone();
        labels.push(("trigger", trigger.to_string()));
        families.counter(
            "cairn_pool_txg_syncs",
            "txg syncs by what started them",
            labels,
            count,
        );
    }
}

/// A pool's snapshot counters and levels (`cairn stat snapshots`) as `cairn_snapshot_*`, the
/// command latency as a histogram (its percentiles are left to queries), and each dataset's
/// space with what its snapshots hold.
fn snapshots(families: &mut Families, sample: &super::sample::PoolSample) {
    let labels = vec![("pool", sample.name.clone())];
    for (field, value) in sample.snapshots.fields() {
        if field.starts_with("command") {
            continue;
        }
        // `cairn_snapshot_created_total`, not `cairn_snapshot_snapshots_created_total`.
        let name = match field {
            "snapshots" => "count",
            other => other.strip_prefix("snapshots_").unwrap_or(other),
        };
        if cairn_engine::SnapshotStatsSnapshot::is_level(field) {
            families.gauge(
                format!("cairn_snapshot_{name}"),
                "snapshot level (see cairn stat snapshots)",
                labels.clone(),
                value as f64,
            );
        } else {
            families.counter(
                counter_name("cairn_snapshot", name),
                "snapshot counter (see cairn stat snapshots)",
                labels.clone(),
                value,
            );
        }
    }
    families.histogram(
        "cairn_snapshot_command_latency_seconds",
        "time snapshot commands waited, from the call until the change was durable",
        labels,
        &sample.snapshot_latency,
    );
    for dataset in &sample.dataset_space {
        let labels = vec![
            ("pool", sample.name.clone()),
            ("dataset", dataset.name.clone()),
        ];
        families.gauge(
            "cairn_dataset_used_bytes",
            "space the dataset uses: itself, its snapshots and its children (used)",
            labels.clone(),
            dataset.used_bytes as f64,
        );
        families.gauge(
            "cairn_dataset_referenced_bytes",
            "bytes the dataset's head references (referenced)",
            labels.clone(),
            dataset.referenced_bytes as f64,
        );
        families.gauge(
            "cairn_dataset_snapshots_used_bytes",
            "bytes only the dataset's snapshots hold (usedbysnapshots)",
            labels,
            dataset.snapshots_bytes as f64,
        );
    }
}

fn families_of(sample: &Sample) -> Families {
    let mut families = Families::default();
    families.gauge(
        "cairn_uptime_seconds",
        "time since the server started",
        Vec::new(),
        sample.uptime_s,
    );
    if let Some(bytes) = sample.resident_bytes {
        families.gauge(
            "cairn_process_resident_memory_bytes",
            "resident memory of the server",
            Vec::new(),
            bytes as f64,
        );
    }
    arc(&mut families, &sample.arc);
    for (source, count) in &sample.event_counts {
        families.counter(
            "cairn_events",
            "notable events recorded (faults, intent-log fallbacks), by the layer that recorded them",
            vec![("source", (*source).to_string())],
            *count,
        );
    }
    for part in &sample.memory {
        let labels = vec![("part", part.part.to_string())];
        families.gauge(
            "cairn_memory_limit_bytes",
            "the server's memory budget by part (cairn stat memory)",
            labels.clone(),
            part.limit_bytes as f64,
        );
        if let Some(used) = part.used_bytes {
            families.gauge(
                "cairn_memory_used_bytes",
                "what each part of the memory budget holds now",
                labels,
                used as f64,
            );
        }
    }
    if let Some(nfs) = &sample.nfs {
        super::nfs_metrics::nfs(&mut families, nfs);
    }
    for p in &sample.pools {
        pool(&mut families, p);
        snapshots(&mut families, p);
        datasets(&mut families, &p.name, p);
        devices(&mut families, &p.name, p);
    }
    families
}

/// The sample as an OpenMetrics text exposition (ends with `# EOF`).
pub fn render(sample: &Sample) -> Result<String, std::fmt::Error> {
    encode_text(families_of(sample))
}

/// The content type of `render`'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analytics::sample::LatencyBuckets;

    #[test]
    fn every_arc_gauge_names_a_field_the_arc_reports() {
        let fields = cairn_engine::process_cache().stats().fields;
        for (gauge, _) in ARC_GAUGES.iter().chain(ARC_EVICTED_BY_L2_STATE) {
            assert!(
                fields.iter().any(|(name, _)| name == gauge),
                "ARC_GAUGES lists {gauge}, which the ARC no longer reports"
            );
        }
    }

    #[test]
    fn histograms_and_counters_come_out_in_the_openmetrics_form() {
        let mut families = Families::default();
        let mut buckets = LatencyBuckets::empty();
        buckets.counts[3] = 2;
        buckets.overflow = 1;
        buckets.sum_us = 70_000_000.0;
        families.histogram(
            "cairn_x_latency_seconds",
            "x",
            vec![("pool", "tank".into())],
            &buckets,
        );
        families.counter("cairn_x_ops", "x", vec![("op", "read".into())], 7);
        let sample = Sample {
            unix_ms: 0,
            uptime_s: 1.5,
            resident_bytes: None,
            arc: vec![("hits", 3), ("size", 4096)],
            memory: Vec::new(),
            events: Vec::new(),
            event_counts: vec![("pool", 2)],
            pools: Vec::new(),
            nfs: None,
        };
        let text = render(&sample).unwrap();
        assert!(text.contains("cairn_arc_hits_total 3"), "{text}");
        assert!(text.contains("cairn_arc_size_bytes 4096"), "{text}");
        assert!(text.contains("cairn_uptime_seconds 1.5"), "{text}");
        assert!(
            text.contains("cairn_events_total{source=\"pool\"} 2"),
            "{text}"
        );
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
        let out = encode_text(families).unwrap();
        assert!(out.contains("cairn_x_ops_total{op=\"read\"} 7"), "{out}");
        // The encoder puts `le` first; label order carries no meaning.
        assert!(
            out.contains("cairn_x_latency_seconds_bucket{le=\"0.000008\",pool=\"tank\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("cairn_x_latency_seconds_bucket{le=\"+Inf\",pool=\"tank\"} 3"),
            "{out}"
        );
        assert!(
            out.contains("cairn_x_latency_seconds_count{pool=\"tank\"} 3"),
            "{out}"
        );
        assert!(
            out.contains("cairn_x_latency_seconds_sum{pool=\"tank\"} 70.0"),
            "{out}"
        );
    }
}
