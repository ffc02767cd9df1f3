//! `cairn stat zil [POOL...]`: intent-log counters and latencies of every open volume and
//! filesystem, and the use of each separate log device. DEFERRED counts a filesystem's
//! per-file records (writes and attribute changes that wait for their own file's fsync or NFS
//! COMMIT), DEF-COMMITTED those of them a commit carried; the rest were dropped unlogged once
//! their txg synced or a later write of their file covered them (`deferred_dropped`,
//! `deferred_superseded` with `-H`); DEF-HELD the bytes of data the waiting ones hold now
//! (`deferred_held_peak_bytes`: the most). `cairn stat io [POOL...]`: the pipeline's counters (blocks
//! read and written, checksum errors, repairs) and every leaf device's queue (requests against
//! device calls — the aggregation —, bytes, FUA writes, flushes, promoted reads, latencies),
//! cache devices' queues included (their reads are the tier's hits, their writes its feed).
//! Run against a server (the usual case) they show what the server has done since it opened the
//! pools; without one, the counters start at zero. `cairn stat memory`: the server's memory
//! budget, each part's limit against what it holds now, and the process's resident memory.
//! `cairn stat l2arc [POOL...]`: each pool's SSD tier (cache devices): hits and misses,
//! blocks fed, dropped (the feed never waits) and copied forward, segments reused, bad reads,
//! blocks indexed and the tier's RAM per block (everything included: its index and its share of
//! the RAM tier's admission sketch, `index_ram_bytes` and `sketch_ram_bytes` with `-H`),
//! segments still to rebuild after an import,
//! and the daily write budget (`serve --l2-write-max-per-day`, per device) with what the
//! devices may still be written now.
//!
//! `cairn stat fs [POOL...]`: each mounted or NFS-served filesystem's calls by kind (NFS
//! procedures counted as the calls they match: COMMIT as fsync, READDIRPLUS as readdir...) (count, bytes, errors,
//! p50/p99/max latency as its front end answered them) and its partial-write path: writes
//! recorded without reading their block first, merged at once with a block in memory, merged
//! by a txg sync, and merges whose old block could not be read.
//!
//! `cairn stat snapshots [POOL...]`: per pool, snapshots taken and destroyed, clones created,
//! promotes, rollbacks and datasets destroyed; the background frees' work (deadlist entries
//! scanned, blocks freed from deadlists and from dead trees, txgs that did some); the levels
//! now (snapshots, what deadlists hold, `freeing`); and how long snapshot commands waited from
//! call to durable (p50/p99/max). `-j` prints them as JSON (docs/json.md), `-H` as
//! `POOL.field<TAB>value` lines.
//!
//! With `-H` both print `name<TAB>value` lines for scripts, as `stat arc -H` does: names are
//! `DATASET.counter` and `POOL.logdevN.counter` (zil), `POOL.pipeline.counter`,
//! `POOL.leafN.counter` and `POOL.cacheN.counter` (io), each device's path on a `….name` line; latencies in microseconds.

use crate::ListFormat;
use crate::context::{Context, say, say_raw};
use crate::human;
use crate::remote;
use crate::table::{Column, Table};
use anyhow::Result;
use cairn_frontend::admin::samples::L2arcSample;
use cairn_frontend::admin::stats::{FsSample, LeafIo};
use cairn_frontend::admin::{AdminReply, AdminRequest};

pub fn zil(ctx: &Context, format: ListFormat, pools: &[String]) -> Result<()> {
    let request = AdminRequest::ZilStats {
        pools: pools.to_vec(),
    };
    let sample = match remote::call(ctx, request)? {
        AdminReply::ZilStats(sample) => sample,
        other => return Err(remote::unexpected(&other)),
    };
    let (mut logs, mut devices) = zil_tables();
    let mut device_count = 0;
    for pool in sample.pools {
        let name = &pool.name;
        if format.scripted {
            say_zil_scripted(ctx, name, &pool.logs, &pool.devices);
            continue;
        }
        device_count += pool.devices.len();
        push_zil_rows(
            &mut logs,
            &mut devices,
            name,
            pool.logs,
            pool.devices,
            format,
        );
    }
    if format.scripted {
        return Ok(());
    }
    if !sample.served {
        say!(
            ctx,
            "no server is running: counters cover only this command (start `cairn serve`)"
        );
    }
    say_raw!(ctx, "{}", logs.render(format.scripted));
    if device_count > 0 {
        say_raw!(ctx, "{}", devices.render(format.scripted));
    } else if !format.scripted {
        say!(
            ctx,
            "no separate log devices: log blocks go to the pool's disks"
        );
    }
    Ok(())
}

/// The intent-log table (per dataset) and the log-device table of `stat zil`.
fn zil_tables() -> (Table, Table) {
    let logs = Table::new(vec![
        Column::left("DATASET"),
        Column::right("LANES"),
        Column::right("RECORDS"),
        Column::right("DEFERRED"),
        Column::right("DEF-COMMITTED"),
        Column::right("DEF-HELD"),
        Column::right("COMMITS"),
        Column::right("WAITED"),
        Column::right("BATCHES"),
        Column::right("BLOCKS"),
        Column::right("LOGGED"),
        Column::right("INPLACE"),
        Column::right("FILL%"),
        Column::right("FUA"),
        Column::right("FALLBACK"),
        Column::right("TXGSYNC"),
        Column::right("P50"),
        Column::right("P99"),
        Column::right("MAX"),
    ]);
    let devices = Table::new(vec![
        Column::left("POOL"),
        Column::left("LOG DEVICE"),
        Column::left("HEALTH"),
        Column::right("SIZE"),
        Column::right("ALLOC"),
        Column::right("WRITES"),
        Column::right("WRITTEN"),
        Column::right("FLUSHES"),
        Column::right("W-P50"),
        Column::right("W-P99"),
        Column::right("F-P50"),
    ]);
    (logs, devices)
}

/// `stat zil -H`: one `name.field<TAB>value` line per counter.
fn say_zil_scripted(
    ctx: &Context,
    name: &str,
    stats: &[(String, cairn_engine::ZilStatsSnapshot)],
    log_devices: &[cairn_engine::LogDeviceUse],
) {
    for (dataset, s) in stats {
        for (field, value) in s.fields() {
            say_raw!(ctx, "{dataset}.{field}\t{value}\n");
        }
    }
    for (index, device) in log_devices.iter().enumerate() {
        let prefix = format!("{name}.logdev{index}");
        say_raw!(ctx, "{prefix}.name\t{}\n", device.name);
        for (field, value) in [
            ("size_bytes", device.size_bytes),
            ("allocated_bytes", device.allocated_bytes),
            ("writes", device.writes),
            ("write_bytes", device.write_bytes),
            ("flushes", device.flushes),
            ("write_latency_p50_us", device.write_latency_p50_us),
            ("write_latency_p99_us", device.write_latency_p99_us),
            ("flush_latency_p50_us", device.flush_latency_p50_us),
        ] {
            say_raw!(ctx, "{prefix}.{field}\t{value}\n");
        }
    }
}

/// One pool's rows of the two `stat zil` tables.
fn push_zil_rows(
    logs: &mut Table,
    devices: &mut Table,
    name: &str,
    stats: Vec<(String, cairn_engine::ZilStatsSnapshot)>,
    log_devices: Vec<cairn_engine::LogDeviceUse>,
    format: ListFormat,
) {
    for (dataset, s) in stats {
        logs.push(vec![
            dataset,
            s.lanes.to_string(),
            s.records.to_string(),
            s.records_deferred.to_string(),
            s.deferred_committed.to_string(),
            human::size(s.deferred_held_bytes, format.exact),
            s.commits.to_string(),
            s.commit_waits.to_string(),
            s.batches.to_string(),
            s.blocks_written.to_string(),
            human::size(s.bytes_written, format.exact),
            human::size(s.in_place_bytes, format.exact),
            format!("{:.0}", s.block_fill_mean_percent),
            s.fua_writes.to_string(),
            s.fallbacks.to_string(),
            s.bulk_syncs.to_string(),
            human::micros(s.commit_latency_p50_us, format.exact),
            human::micros(s.commit_latency_p99_us, format.exact),
            human::micros(s.commit_latency_max_us, format.exact),
        ]);
    }
    for device in log_devices {
        devices.push(vec![
            name.to_string(),
            device.name.clone(),
            device.health.as_str().to_string(),
            human::size(device.size_bytes, format.exact),
            human::size(device.allocated_bytes, format.exact),
            device.writes.to_string(),
            human::size(device.write_bytes, format.exact),
            device.flushes.to_string(),
            human::micros(device.write_latency_p50_us, format.exact),
            human::micros(device.write_latency_p99_us, format.exact),
            human::micros(device.flush_latency_p50_us, format.exact),
        ]);
    }
}

pub fn io(ctx: &Context, format: ListFormat, pools: &[String]) -> Result<()> {
    let request = AdminRequest::IoStats {
        pools: pools.to_vec(),
    };
    let sample = match remote::call(ctx, request)? {
        AdminReply::IoStats(sample) => sample,
        other => return Err(remote::unexpected(&other)),
    };
    let (mut pipeline, mut devices) = io_tables();
    for pool in &sample.pools {
        let (name, counters, leaves) = (&pool.name, &pool.counters, &pool.leaves);
        if format.scripted {
            say_io_scripted(ctx, name, counters, leaves);
            continue;
        }
        let size = |value: u64| human::size(value, format.exact);
        pipeline.push(vec![
            name.clone(),
            get(counters, "blocks_read").to_string(),
            size(get(counters, "bytes_read")),
            get(counters, "direct_reads").to_string(),
            get(counters, "blocks_written").to_string(),
            size(get(counters, "bytes_written")),
            get(counters, "blocks_freed").to_string(),
            get(counters, "checksum_errors").to_string(),
            get(counters, "repairs").to_string(),
            get(counters, "unrecoverable").to_string(),
            get(counters, "raw_writes").to_string(),
        ]);
        for leaf in leaves {
            devices.push(device_row(name, leaf, format));
        }
    }
    if format.scripted {
        return Ok(());
    }
    if !sample.served {
        say!(
            ctx,
            "no server is running: counters cover only this command (start `cairn serve`)"
        );
    }
    say_raw!(ctx, "{}", pipeline.render(false));
    say_raw!(ctx, "{}", devices.render(false));
    Ok(())
}

/// The value of counter `wanted` among `fields` (0 when absent).
fn get(fields: &[(String, u64)], wanted: &str) -> u64 {
    fields
        .iter()
        .find(|(field, _)| *field == wanted)
        .map_or(0, |&(_, value)| value)
}

/// The pipeline table (per pool) and the device table of `stat io`.
fn io_tables() -> (Table, Table) {
    let pipeline = Table::new(vec![
        Column::left("POOL"),
        Column::right("READ"),
        Column::right("READ-B"),
        Column::right("DIRECT"),
        Column::right("WRITTEN"),
        Column::right("WRITE-B"),
        Column::right("FREED"),
        Column::right("CKSUM"),
        Column::right("REPAIRS"),
        Column::right("UNRECOV"),
        Column::right("LOG-W"),
    ]);
    let devices = Table::new(vec![
        Column::left("POOL"),
        Column::left("DEVICE"),
        Column::right("READS"),
        Column::right("R-CALLS"),
        Column::right("READ"),
        Column::right("WRITES"),
        Column::right("W-CALLS"),
        Column::right("WRITTEN"),
        Column::right("FUA"),
        Column::right("FLUSH"),
        Column::right("PROMO"),
        Column::right("QUEUED"),
        Column::right("R-P50"),
        Column::right("R-P99"),
        Column::right("W-P50"),
        Column::right("W-P99"),
    ]);
    (pipeline, devices)
}

/// `stat io -H`: one `pool.part.field<TAB>value` line per counter.
fn say_io_scripted(ctx: &Context, name: &str, counters: &[(String, u64)], leaves: &[LeafIo]) {
    for (field, value) in counters {
        say_raw!(ctx, "{name}.pipeline.{field}\t{value}\n");
    }
    let (caches, leaves): (Vec<_>, Vec<_>) = leaves.iter().partition(|leaf| leaf.is_cache);
    for (kind, list) in [("leaf", leaves), ("cache", caches)] {
        for (index, leaf) in list.iter().enumerate() {
            say_raw!(ctx, "{name}.{kind}{index}.name\t{}\n", leaf.name);
            for (field, value) in leaf.fields.iter().flatten() {
                say_raw!(ctx, "{name}.{kind}{index}.{field}\t{value}\n");
            }
        }
    }
}

/// One device's row of `stat io` (a device that cannot be read says so).
fn device_row(name: &str, leaf: &LeafIo, format: ListFormat) -> Vec<String> {
    let size = |value: u64| human::size(value, format.exact);
    let micros = |value: u64| human::micros(value, format.exact);
    // The pool in its own column: a device name is a path, and `tank//dev/sdb` read badly.
    let role = match (leaf.is_log, leaf.is_cache) {
        (true, _) => " (log)",
        (_, true) => " (cache)",
        _ => "",
    };
    let label = format!("{}{role}", leaf.name);
    let Some(fields) = &leaf.fields else {
        let mut row = vec![name.to_string(), label, "unavailable".to_string()];
        row.resize(16, "-".to_string());
        return row;
    };
    vec![
        name.to_string(),
        label,
        get(fields, "read_requests").to_string(),
        get(fields, "read_calls").to_string(),
        size(get(fields, "read_bytes")),
        get(fields, "write_requests").to_string(),
        get(fields, "write_calls").to_string(),
        size(get(fields, "write_bytes")),
        get(fields, "fua_writes").to_string(),
        get(fields, "flushes").to_string(),
        get(fields, "promoted_reads").to_string(),
        get(fields, "queued").to_string(),
        micros(get(fields, "read_latency_p50_us")),
        micros(get(fields, "read_latency_p99_us")),
        micros(get(fields, "write_latency_p50_us")),
        micros(get(fields, "write_latency_p99_us")),
    ]
}

/// `cairn stat fs`: calls each mounted filesystem answered, its partial writes, and its object
/// set's memo of published dnodes and directory blocks.
pub fn fs(ctx: &Context, format: ListFormat, pools: &[String]) -> Result<()> {
    let mut tables = FsTables::new();
    let request = AdminRequest::FsStats {
        pools: pools.to_vec(),
    };
    let mounted = match remote::call(ctx, request)? {
        AdminReply::FsStats(mounted) => mounted,
        other => return Err(remote::unexpected(&other)),
    };
    for sample in mounted {
        tables.push_calls(ctx, &sample, format);
        tables.push_counters(ctx, &sample, format);
    }
    if format.scripted {
        return Ok(());
    }
    if tables.partial.is_empty() {
        say!(ctx, "no filesystems mounted");
        return Ok(());
    }
    say_raw!(ctx, "{}", tables.calls.render(false));
    say!(ctx);
    say!(
        ctx,
        "partial writes (blocks merged later instead of read first):"
    );
    say_raw!(ctx, "{}", tables.partial.render(false));
    say!(ctx);
    say!(
        ctx,
        "memo of the published tree (dnodes; directory and dnode blocks), bounded by the ARC's target:"
    );
    say_raw!(ctx, "{}", tables.memos.render(false));
    Ok(())
}

/// The three tables of `stat fs`: calls, partial writes, and the memo of the published tree.
struct FsTables {
    calls: Table,
    partial: Table,
    memos: Table,
}

impl FsTables {
    fn new() -> FsTables {
        FsTables {
            calls: Table::new(vec![
                Column::left("DATASET"),
                Column::left("CALL"),
                Column::right("COUNT"),
                Column::right("BYTES"),
                Column::right("ERRORS"),
                Column::right("P50"),
                Column::right("P99"),
                Column::right("MAX"),
            ]),
            partial: Table::new(vec![
                Column::left("DATASET"),
                Column::right("DEFERRED"),
                Column::right("MERGED-NOW"),
                Column::right("MERGED-AT-SYNC"),
                Column::right("LOST"),
            ]),
            memos: Table::new(vec![
                Column::left("DATASET"),
                Column::right("DNODES"),
                Column::right("SIZE"),
                Column::right("HITS"),
                Column::right("MISSES"),
                Column::right("BLOCKS"),
                Column::right("SIZE"),
                Column::right("HITS"),
                Column::right("MISSES"),
            ]),
        }
    }

    /// One filesystem's calls: a row per call made (or, scripted, every call's counters).
    fn push_calls(&mut self, ctx: &Context, sample: &FsSample, format: ListFormat) {
        let (dataset, exact) = (&sample.dataset, format.exact);
        for op in &sample.calls {
            if format.scripted {
                for (field, value) in [
                    ("count", op.ops),
                    ("bytes", op.bytes),
                    ("errors", op.errors),
                    ("p50_us", op.p50_us),
                    ("p99_us", op.p99_us),
                    ("max_us", op.max_us),
                ] {
                    say_raw!(ctx, "{dataset}.{}.{field}\t{value}\n", op.op);
                }
                continue;
            }
            if op.ops == 0 {
                continue;
            }
            self.calls.push(vec![
                dataset.clone(),
                op.op.to_string(),
                op.ops.to_string(),
                human::size(op.bytes, exact),
                op.errors.to_string(),
                human::micros(op.p50_us, exact),
                human::micros(op.p99_us, exact),
                human::micros(op.max_us, exact),
            ]);
        }
    }

    /// One filesystem's partial-write and memo counters.
    fn push_counters(&mut self, ctx: &Context, sample: &FsSample, format: ListFormat) {
        let dataset = &sample.dataset;
        if format.scripted {
            for (field, value) in &sample.partial_writes {
                say_raw!(ctx, "{dataset}.partial_{field}\t{value}\n");
            }
            for (field, value) in &sample.memo {
                say_raw!(ctx, "{dataset}.{field}\t{value}\n");
            }
            return;
        }
        let mut row = vec![dataset.clone()];
        row.extend(
            sample
                .partial_writes
                .iter()
                .map(|(_, value)| value.to_string()),
        );
        self.partial.push(row);
        let mut row = vec![dataset.clone()];
        row.extend(sample.memo.iter().enumerate().map(|(index, (_, value))| {
            // Sizes in bytes are the second and sixth columns.
            if index % 4 == 1 {
                human::size(*value, format.exact)
            } else {
                value.to_string()
            }
        }));
        self.memos.push(row);
    }
}

/// `cairn stat memory`: the server's memory budget, each allowance's limit against what it
/// holds now (where that is counted), and the process's resident memory against the whole.
/// Without a server it shows the budget a server with this process's cache would state.
pub fn memory(ctx: &Context, format: ListFormat) -> Result<()> {
    let sample = match remote::call(ctx, AdminRequest::MemoryStats)? {
        AdminReply::MemoryStats(sample) => sample,
        other => return Err(remote::unexpected(&other)),
    };
    if !format.scripted && !sample.served {
        say!(
            ctx,
            "no server is running: this is the budget `cairn serve` would state with this cache"
        );
    }
    let (rss, hwm) = (sample.resident_bytes, sample.peak_resident_bytes);
    let parts = sample.parts;
    let total_bytes: u64 = parts.iter().map(|(_, limit, _)| limit).sum();
    let mut rows: Vec<(String, Option<u64>, Option<u64>)> = parts
        .into_iter()
        .map(|(part, limit, used)| (part, Some(limit), used))
        .collect();
    rows.push(("total".into(), Some(total_bytes), rss));
    rows.push(("peak".into(), Some(total_bytes), hwm));
    let mut table = Table::new(vec![
        Column::left("PART"),
        Column::right("LIMIT"),
        Column::right("NOW"),
    ]);
    let shown = |value: Option<u64>| match value {
        Some(bytes) if format.scripted => bytes.to_string(),
        Some(bytes) => human::size(bytes, format.exact),
        None => "-".into(),
    };
    for (name, limit, now) in rows {
        table.push(vec![name, shown(limit), shown(now)]);
    }
    say_raw!(ctx, "{}", table.render(format.scripted));
    Ok(())
}

pub fn l2arc(ctx: &Context, format: ListFormat, args: &[String]) -> Result<()> {
    let (pools, interval, count) = crate::iostat_cmd::parse_positional(args)?;
    match interval {
        Some(seconds) => l2arc_interval(ctx, format, &pools, seconds, count),
        None => l2arc_table(ctx, format, &pools),
    }
}

type L2Sample = std::collections::BTreeMap<String, u64>;

/// The SSD tier's counters of `pools`, from the server (`served`) or this process.
fn l2arc_counters(ctx: &Context, pools: &[String], served: bool) -> Result<L2arcSample> {
    let request = AdminRequest::L2arcCounters {
        pools: pools.to_vec(),
    };
    let reply = if served {
        match remote::call_server(ctx, request)? {
            Ok(reply) => reply,
            Err(_) => {
                return Err(remote::no_server(ctx, "stat l2arc with an interval watches").into());
            }
        }
    } else {
        remote::call(ctx, request)?
    };
    match reply {
        AdminReply::L2arcCounters(sample) => Ok(sample),
        other => Err(remote::unexpected(&other)),
    }
}

/// The server's counters of `pools`, as `POOL.field -> value`.
fn l2arc_sample(ctx: &Context, pools: &[String]) -> Result<L2Sample> {
    let sample = l2arc_counters(ctx, pools, true)?;
    Ok(sample
        .pools
        .into_iter()
        .flat_map(|(pool, fields)| {
            fields
                .into_iter()
                .map(move |(field, value)| (format!("{pool}.{field}"), value))
        })
        .collect())
}

/// One line per pool and interval: lookups, hit ratio, bytes read from the devices, blocks
/// fed and dropped per second; blocks indexed at the interval's end.
fn l2arc_interval(
    ctx: &Context,
    format: ListFormat,
    pools: &[String],
    seconds: f64,
    count: Option<u64>,
) -> Result<()> {
    let mut before = L2Sample::new();
    let mut now = l2arc_sample(ctx, pools)?;
    let mut printed = 0;
    loop {
        let mut table = Table::new(vec![
            Column::left("POOL"),
            Column::right("HITS/S"),
            Column::right("MISS/S"),
            Column::right("HIT%"),
            Column::right("READ/S"),
            Column::right("FED/S"),
            Column::right("DROP/S"),
            Column::right("BLOCKS"),
            Column::right("ALLOC"),
        ]);
        let names: std::collections::BTreeSet<&str> = now
            .keys()
            .filter_map(|key| key.split_once('.').map(|(pool, _)| pool))
            .collect();
        // The first line covers the server's whole life, as zpool iostat's does.
        let span = if printed == 0 { 1.0 } else { seconds };
        for pool in names {
            let delta = |field: &str| {
                let key = format!("{pool}.{field}");
                now.get(&key)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(before.get(&key).copied().unwrap_or(0))
            };
            let at = |field: &str| now.get(&format!("{pool}.{field}")).copied().unwrap_or(0);
            let rate = |value: u64| format!("{:.0}", value as f64 / span);
            let (hits, misses) = (delta("hits"), delta("misses"));
            table.push(vec![
                pool.to_string(),
                rate(hits),
                rate(misses),
                human::percent(hits, hits + misses, format.exact),
                human::size((delta("hit_bytes") as f64 / span) as u64, format.exact),
                rate(delta("feed_blocks")),
                rate(delta("feed_dropped")),
                at("indexed_blocks").to_string(),
                human::size(at("alloc_bytes"), format.exact),
            ]);
        }
        let text = crate::table::interval_text(&table, printed == 0, format.scripted);
        say_raw!(ctx, "{text}");
        printed += 1;
        if count.is_some_and(|count| printed >= count) {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_secs_f64(seconds));
        before = std::mem::replace(&mut now, l2arc_sample(ctx, pools)?);
    }
}

fn l2arc_table(ctx: &Context, format: ListFormat, pools: &[String]) -> Result<()> {
    let sample = l2arc_counters(ctx, pools, false)?;
    let mut table = Table::new(vec![
        Column::left("POOL"),
        Column::right("DEVICES"),
        Column::right("SIZE"),
        Column::right("ALLOC"),
        Column::right("HITS"),
        Column::right("MISSES"),
        Column::right("HIT%"),
        Column::right("FED"),
        Column::right("DROPPED"),
        Column::right("COPIED"),
        Column::right("REUSED"),
        Column::right("BAD"),
        Column::right("BLOCKS"),
        Column::right("RAM/BLOCK"),
        Column::right("REBUILD"),
        Column::right("BUDGET/DAY"),
        Column::right("LEFT"),
    ]);
    for (name, fields) in &sample.pools {
        if format.scripted {
            for (field, value) in fields {
                say_raw!(ctx, "{name}.{field}\t{value}\n");
            }
            continue;
        }
        let get = |wanted: &str| {
            fields
                .iter()
                .find(|(field, _)| *field == wanted)
                .map_or(0, |(_, value)| *value)
        };
        let size = |bytes: u64| human::size(bytes, format.exact);
        let count = |n: u64| n.to_string();
        let (hits, misses) = (get("hits"), get("misses"));
        let lookups = hits + misses;
        let blocks = get("indexed_blocks");
        table.push(vec![
            name.clone(),
            get("devices").to_string(),
            size(get("size_bytes")),
            size(get("alloc_bytes")),
            count(hits),
            count(misses),
            if lookups == 0 {
                "-".into()
            } else {
                format!("{:.1}", 100.0 * hits as f64 / lookups as f64)
            },
            count(get("feed_blocks")),
            count(get("feed_dropped")),
            count(get("copied_forward")),
            count(get("evicted_segments")),
            count(get("bad_reads")),
            count(blocks),
            if blocks == 0 {
                "-".into()
            } else {
                format!(
                    "{:.1} B",
                    (get("index_ram_bytes") + get("sketch_ram_bytes")) as f64 / blocks as f64
                )
            },
            match get("rebuild_pending_segments") {
                0 => "done".into(),
                pending => format!("{pending} seg"),
            },
            match get("write_budget_bytes_per_day") {
                0 => "-".into(),
                per_day => size(per_day),
            },
            match get("write_budget_bytes_per_day") {
                0 => "-".into(),
                _ => size(get("write_budget_left_bytes")),
            },
        ]);
    }
    if !format.scripted {
        say_raw!(ctx, "{}", table.render(false));
        if !sample.served {
            say!(
                ctx,
                "(no server runs: these counters are this command's own; run with cairn serve to see the server's)"
            );
        }
    }
    Ok(())
}

/// `cairn stat snapshots`: each pool's snapshot counters, levels and command latency.
pub fn snapshots(ctx: &Context, format: ListFormat, json: bool, pools: &[String]) -> Result<()> {
    let request = AdminRequest::SnapshotStats {
        pools: pools.to_vec(),
    };
    let sample = match remote::call(ctx, request)? {
        AdminReply::SnapshotStats(sample) => sample,
        other => return Err(remote::unexpected(&other)),
    };
    if json {
        let entries: std::collections::BTreeMap<String, crate::json::SnapshotStatsEntry> = sample
            .pools
            .into_iter()
            .map(|(name, stats)| {
                let entry = crate::json::SnapshotStatsEntry {
                    name: name.clone(),
                    served: sample.served,
                    stats,
                };
                (name, entry)
            })
            .collect();
        say_raw!(
            ctx,
            "{}",
            crate::json::pools("cairn stat snapshots", &entries)?
        );
        return Ok(());
    }
    if format.scripted {
        for (name, stats) in &sample.pools {
            for (field, value) in stats.fields() {
                say_raw!(ctx, "{name}.{field}\t{value}\n");
            }
        }
        return Ok(());
    }
    let mut table = Table::new(vec![
        Column::left("POOL"),
        Column::right("SNAPS"),
        Column::right("CREATED"),
        Column::right("DESTROYED"),
        Column::right("CLONES"),
        Column::right("PROMOTES"),
        Column::right("ROLLBACKS"),
        Column::right("DS-DESTR"),
        Column::right("HELD"),
        Column::right("HELD-BLK"),
        Column::right("FREEING"),
        Column::right("SCANNED"),
        Column::right("FREED-BLK"),
        Column::right("TREE-BLK"),
        Column::right("FREE-TXGS"),
        Column::right("CMDS"),
        Column::right("P50"),
        Column::right("P99"),
        Column::right("MAX"),
    ]);
    let (size, micros) = (
        |bytes: u64| human::size(bytes, format.exact),
        |us: u64| human::micros(us, format.exact),
    );
    for (name, s) in &sample.pools {
        table.push(vec![
            name.clone(),
            s.snapshots.to_string(),
            s.snapshots_created.to_string(),
            s.snapshots_destroyed.to_string(),
            s.clones_created.to_string(),
            s.promotes.to_string(),
            s.rollbacks.to_string(),
            s.datasets_destroyed.to_string(),
            size(s.deadlist_bytes),
            s.deadlist_entries.to_string(),
            size(s.freeing_bytes),
            s.deadlist_entries_scanned.to_string(),
            s.deadlist_blocks_freed.to_string(),
            s.tree_blocks_freed.to_string(),
            s.background_free_txgs.to_string(),
            s.commands.to_string(),
            micros(s.command_latency_p50_us),
            micros(s.command_latency_p99_us),
            micros(s.command_latency_max_us),
        ]);
    }
    if !sample.served {
        say!(
            ctx,
            "no server is running: counters cover only this command (start `cairn serve`)"
        );
    }
    say_raw!(ctx, "{}", table.render(false));
    Ok(())
}
