//! `cairn pool iostat -l | -q | -w | -r [-v] [-H] [-p] [POOL...] [INTERVAL [COUNT]]`: the
//! zpool-style device views, from the per-class statistics of every leaf's I/O queue
//! (`cairn_device::iostats`).
//!
//! Rows: one per pool (its data and log devices summed); with `-v` also every top-level vdev
//! and, under a mirror, its devices, then the log devices and the cache devices in their own
//! sections (`logs`, `cache`), as zpool lists them. Operations and bandwidth count the
//! requests the layers above submitted to the devices (before aggregation).
//!
//! Columns. Every table starts with `ALLOC FREE` (space of the pool or top-level vdev; `-` for
//! a device inside a mirror) and `R-OPS W-OPS R-BW W-BW` (per second over the interval).
//! - `-l`, averages over the interval: `TOTAL-R/W` submission to completion, `DISK-R/W` issue
//!   to completion (the device's own time), `SYNCQ-R/W` queue wait of the sync classes
//!   (sync-read, cache-read, sync-write, log), `ASYNCQ-R/W` queue wait of the async classes
//!   (async-read, async-write, cache-write), `SCRUB` queue wait of scrub I/O. `-` when no
//!   request completed. Intent-log blocks written from the committing thread (no queue) count
//!   as log requests with no queue wait. There is no trim column: discards are not queued.
//! - `-q`, at the moment of the report: per class, requests pending in the queue (`-PEND`)
//!   and inside device calls (`-ACT`): `SYNCR` sync-read, `CACHER` cache-read, `SYNCW`
//!   sync-write, `LOG`, `ASYNCR` async-read, `ASYNCW` async-write, `CACHEW` cache-write,
//!   `SCRUB`.
//! - `-w`, one histogram per row: lines are latency buckets in powers of two from 1 µs (a
//!   line counts waits from its value up to twice it; the first also shorter ones, the last
//!   also longer ones), columns the counts over the interval of `TOTAL-R/W`, `DISK-R/W`,
//!   `SYNCQ-R/W`, `ASYNCQ-R/W` and `SCRUB` as in `-l`. Each request counts once per column
//!   pair, so a `TOTAL` column adds up to the requests of the interval.
//! - `-r`, one histogram per row: lines are size buckets in powers of two from 512 B to
//!   16 MiB, columns per class (names as in `-q`) `-IND`, every request by its size, and
//!   `-AGG`, every device call that merged several requests, by its size (gaps included).
//!
//! `-l` and `-q` may be combined into one table; `-w` and `-r` follow it as blocks, one per
//! row (with `-H`, one table whose first column names the row). `-p` prints exact numbers
//! (bytes, microseconds, bucket floors).
//!
//! Where the numbers come from: a running server answers `AdminRequest::DeviceIo` with
//! cumulative counters (`samples::DeviceIoSample`); the client prints the difference between consecutive
//! snapshots (histograms bucket by bucket), the first report covering everything since the
//! server opened the pool. Without a server the pools are opened here, read-only (so without
//! their cache devices, which a read-only pool does not open), and the counters start from
//! zero at that moment (said on stderr).

use super::{IostatArgs, parse_positional};
use crate::context::{Context, say, say_raw, shout};
use crate::human;
use crate::remote;
use crate::table::{Column, Table};
use anyhow::{Context as _, Result};
use cairn_device::{ClassStats, DirectionStats, IoClass, LatencyHistogram, SizeHistogram};
use cairn_engine::Pool;
use cairn_frontend::admin::samples::{ClassSample, DeviceIoSample, PoolSample, Section};
use cairn_frontend::admin::{AdminReply, AdminRequest};
use std::time::{Duration, Instant};

/// The classes whose queue wait is zpool's `syncq_wait`.
const SYNC_CLASSES: [IoClass; 4] = [
    IoClass::SyncRead,
    IoClass::CacheRead,
    IoClass::SyncWrite,
    IoClass::Log,
];
/// The classes whose queue wait is zpool's `asyncq_wait`.
const ASYNC_CLASSES: [IoClass; 3] = [IoClass::AsyncRead, IoClass::AsyncWrite, IoClass::CacheWrite];

/// Short column names of the classes, in `IoClass::ALL` order.
fn class_label(class: IoClass) -> &'static str {
    match class {
        IoClass::SyncRead => "SYNCR",
        IoClass::CacheRead => "CACHER",
        IoClass::SyncWrite => "SYNCW",
        IoClass::Log => "LOG",
        IoClass::AsyncRead => "ASYNCR",
        IoClass::AsyncWrite => "ASYNCW",
        IoClass::CacheWrite => "CACHEW",
        IoClass::Scrub => "SCRUB",
    }
}

/// True when the arguments ask for a device view.
pub(super) fn wanted(args: &IostatArgs) -> bool {
    args.latency || args.queues || args.latency_histograms || args.request_sizes
}

// ---- the snapshot: cumulative counters as they travel from the server ----

/// Every device's cumulative counters (`cairn_frontend::admin::samples`).
type Snapshot = DeviceIoSample;

/// Where snapshots come from: the running server, or pools opened by this command.
enum Source {
    Server,
    Local { pools: Vec<Pool>, opened: Instant },
}

impl Source {
    fn sample(&self, ctx: &Context, pools: &[String]) -> Result<Snapshot> {
        match self {
            Source::Server => match remote::call(ctx, device_io(pools))? {
                AdminReply::DeviceIo(sample) => Ok(sample),
                other => Err(remote::unexpected(&other)),
            },
            Source::Local { pools, opened } => Ok(Snapshot {
                uptime_s: opened.elapsed().as_secs_f64(),
                pools: pools
                    .iter()
                    .map(|pool| PoolSample::new(pool.name(), pool.device_io()))
                    .collect(),
            }),
        }
    }

    fn close(self) -> Result<()> {
        if let Source::Local { pools, .. } = self {
            for pool in pools {
                let name = pool.name().to_string();
                pool.close()
                    .with_context(|| format!("cannot close pool {name}"))?;
            }
        }
        Ok(())
    }
}

fn device_io(pools: &[String]) -> AdminRequest {
    AdminRequest::DeviceIo {
        pools: pools.to_vec(),
    }
}

/// Client side: the device views, once or every `INTERVAL` seconds.
pub(super) fn iostat(ctx: &Context, args: &IostatArgs) -> Result<()> {
    let (pools, interval, count) = parse_positional(&args.args)?;
    // One question to the server tells whether one runs (and checks the pool names).
    let (source, first) = match remote::call_server(ctx, device_io(&pools))? {
        Ok(AdminReply::DeviceIo(sample)) => (Source::Server, Some(sample)),
        Ok(other) => return Err(remote::unexpected(&other)),
        Err(_) => {
            let mut opened = Vec::new();
            for name in ctx.pools_or_all(&pools)? {
                let pool = ctx.open(&name, true).map_err(anyhow::Error::from);
                if let Some(pool) = ctx.skip_unavailable(pool, !pools.is_empty())? {
                    opened.push(pool);
                }
            }
            shout!(
                ctx,
                "cairn: no server runs for {}: the pools were opened here (read-only); device \
                 counters start from zero now and show only this command's own I/O",
                ctx.cache.dir().display()
            );
            let source = Source::Local {
                pools: opened,
                opened: Instant::now(),
            };
            (source, None)
        }
    };
    let result = report(ctx, args, &pools, &source, first, interval, count);
    let closed = source.close();
    result.and(closed)
}

fn report(
    ctx: &Context,
    args: &IostatArgs,
    pools: &[String],
    source: &Source,
    first: Option<Snapshot>,
    interval: Option<f64>,
    count: Option<u64>,
) -> Result<()> {
    let mut before = Snapshot::default();
    let mut now = match first {
        Some(snapshot) => snapshot,
        None => source.sample(ctx, pools)?,
    };
    render(ctx, args, &now, &before, now.uptime_s.max(0.001))?;
    let Some(seconds) = interval else {
        return Ok(());
    };
    let mut printed = 1;
    while count.is_none_or(|count| printed < count) {
        std::thread::sleep(Duration::from_secs_f64(seconds));
        before = now;
        now = source.sample(ctx, pools)?;
        if !args.format.scripted {
            say!(ctx);
        }
        let elapsed = (now.uptime_s - before.uptime_s).max(0.001);
        render(ctx, args, &now, &before, elapsed)?;
        printed += 1;
    }
    Ok(())
}

// ---- rows: what happened on each pool, vdev and device over the interval ----

/// One line of the report.
struct Row {
    name: String,
    /// Nesting for people: 0 pool (or section title), 1 top-level vdev, 2 device in a mirror.
    depth: usize,
    /// A section title (`logs`, `cache`): no numbers.
    title: bool,
    /// (allocated, free) bytes; `None` for a device inside a vdev.
    space: Option<(u64, u64)>,
    /// Per class (`IoClass::ALL` order): counters over the interval, queue depths now.
    classes: [ClassStats; cairn_device::queue::CLASSES],
}

impl Row {
    fn new(name: &str, depth: usize, space: Option<(u64, u64)>) -> Row {
        Row {
            name: name.to_string(),
            depth,
            title: false,
            space,
            classes: Default::default(),
        }
    }

    fn add(&mut self, classes: &[ClassStats]) {
        for (sum, class) in self.classes.iter_mut().zip(classes) {
            sum.pending_requests += class.pending_requests;
            sum.active_requests += class.active_requests;
            sum.read.add(&class.read);
            sum.write.add(&class.write);
        }
    }

    fn class(&self, class: IoClass) -> &ClassStats {
        &self.classes[class.index()]
    }

    /// Both directions of every class, or only reads (`Some(false)`) or writes (`Some(true)`).
    fn directions(
        &self,
        classes: &[IoClass],
        write: Option<bool>,
    ) -> impl Iterator<Item = &DirectionStats> {
        classes.iter().flat_map(move |&class| {
            let stats = self.class(class);
            [(false, &stats.read), (true, &stats.write)]
                .into_iter()
                .filter(move |(is_write, _)| write.is_none_or(|w| w == *is_write))
                .map(|(_, direction)| direction)
        })
    }
}

/// A device's counters over the interval: `now` minus the same device's in `before`.
fn leaf_delta(now: &[ClassSample], before: Option<&[ClassSample]>) -> Result<Vec<ClassStats>> {
    now.iter()
        .enumerate()
        .map(|(index, sample)| {
            let mut current = sample.to_stats()?;
            if let Some(earlier) = before.and_then(|classes| classes.get(index)) {
                let earlier = earlier.to_stats()?;
                current.read = current.read.saturating_sub(&earlier.read);
                current.write = current.write.saturating_sub(&earlier.write);
            }
            Ok(current)
        })
        .collect()
}

fn rows(now: &Snapshot, before: &Snapshot, verbose: bool) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for pool in &now.pools {
        let earlier_pool = before.pools.iter().find(|p| p.name == pool.name);
        let mut pool_row = Row::new(&pool.name, 0, Some((pool.allocated_bytes, pool.free_bytes)));
        let mut sections: [Vec<Row>; 3] = Default::default();
        for top in &pool.tops {
            let earlier_top = earlier_pool.and_then(|p| {
                p.tops
                    .iter()
                    .find(|t| t.name == top.name && t.section == top.section)
            });
            let mut top_row = Row::new(&top.name, 1, Some((top.allocated_bytes, top.free_bytes)));
            let mut leaf_rows = Vec::new();
            for leaf in &top.leaves {
                let Some(classes) = &leaf.classes else {
                    leaf_rows.push(Row::new(&leaf.name, 2, None));
                    continue;
                };
                let earlier = earlier_top
                    .and_then(|t| t.leaves.iter().find(|l| l.name == leaf.name))
                    .and_then(|l| l.classes.as_deref());
                let delta = leaf_delta(classes, earlier)?;
                top_row.add(&delta);
                let mut leaf_row = Row::new(&leaf.name, 2, None);
                leaf_row.add(&delta);
                leaf_rows.push(leaf_row);
            }
            if top.section != Section::Cache {
                pool_row.add(&top_row.classes);
            }
            let section = match top.section {
                Section::Data => 0,
                Section::Log => 1,
                Section::Cache => 2,
            };
            // A vdev of one device is that device: one line.
            let single = top.leaves.len() == 1 && top.leaves[0].name == top.name;
            sections[section].push(top_row);
            if !single {
                sections[section].extend(leaf_rows);
            }
        }
        rows.push(pool_row);
        if verbose {
            for (index, section) in sections.into_iter().enumerate() {
                if section.is_empty() {
                    continue;
                }
                if index > 0 {
                    let mut title = Row::new(if index == 1 { "logs" } else { "cache" }, 0, None);
                    title.title = true;
                    rows.push(title);
                }
                rows.extend(section);
            }
        }
    }
    Ok(rows)
}

// ---- rendering ----

fn render(
    ctx: &Context,
    args: &IostatArgs,
    now: &Snapshot,
    before: &Snapshot,
    seconds: f64,
) -> Result<()> {
    let rows = rows(now, before, args.verbose)?;
    if rows.is_empty() {
        say!(ctx, "no pools");
        return Ok(());
    }
    let exact = args.format.exact;
    let scripted = args.format.scripted;
    let mut printed_table = false;
    if args.latency || args.queues || !(args.latency_histograms || args.request_sizes) {
        let table = device_table(args, &rows, seconds);
        say_raw!(ctx, "{}", table.render(scripted));
        printed_table = true;
    }
    for (wanted, kind) in [
        (args.latency_histograms, Histogram::Latency),
        (args.request_sizes, Histogram::Size),
    ] {
        if !wanted {
            continue;
        }
        let columns = kind.columns();
        if scripted {
            let mut header = vec![Column::left("NAME"), Column::right(kind.bucket_header())];
            header.extend(columns.iter().map(|name| Column::right(name)));
            let mut table = Table::new(header);
            for row in rows.iter().filter(|row| !row.title) {
                for mut cells in kind.lines(row, exact) {
                    cells.insert(0, row.name.clone());
                    table.push(cells);
                }
            }
            say_raw!(ctx, "{}", table.render(true));
            continue;
        }
        for row in rows.iter().filter(|row| !row.title) {
            if printed_table {
                say!(ctx);
            }
            printed_table = true;
            say!(ctx, "{}", row.name);
            let mut header = vec![Column::right(kind.bucket_header())];
            header.extend(columns.iter().map(|name| Column::right(name)));
            let mut table = Table::new(header);
            for cells in kind.lines(row, exact) {
                table.push(cells);
            }
            say_raw!(ctx, "{}", table.render(false));
        }
    }
    Ok(())
}

/// The `-l`/`-q` table (with neither: space, operations and bandwidth only).
fn device_table(args: &IostatArgs, rows: &[Row], seconds: f64) -> Table {
    let exact = args.format.exact;
    let mut columns = vec![Column::left("NAME")];
    for name in ["ALLOC", "FREE", "R-OPS", "W-OPS", "R-BW", "W-BW"] {
        columns.push(Column::right(name));
    }
    if args.latency {
        for name in [
            "TOTAL-R", "TOTAL-W", "DISK-R", "DISK-W", "SYNCQ-R", "SYNCQ-W", "ASYNCQ-R", "ASYNCQ-W",
            "SCRUB",
        ] {
            columns.push(Column::right(name));
        }
    }
    if args.queues {
        for class in IoClass::ALL {
            columns.push(Column::right(&format!("{}-PEND", class_label(class))));
            columns.push(Column::right(&format!("{}-ACT", class_label(class))));
        }
    }
    let width = columns.len();
    let mut table = Table::new(columns);
    for row in rows {
        let name = if args.format.scripted {
            row.name.clone()
        } else {
            format!("{}{}", "  ".repeat(row.depth), row.name)
        };
        if row.title {
            let mut cells = vec![name];
            cells.resize(width, String::new());
            table.push(cells);
            continue;
        }
        let size = |bytes: u64| human::size(bytes, exact);
        let (alloc, free) = match row.space {
            Some((alloc, free)) => (size(alloc), size(free)),
            None => ("-".into(), "-".into()),
        };
        let sum = |write: bool, pick: fn(&DirectionStats) -> u64| -> u64 {
            row.directions(&IoClass::ALL, Some(write)).map(pick).sum()
        };
        let ops = |value: u64| human::per_second_count(value, seconds, exact);
        let bandwidth = |value: u64| human::per_second_bytes(value, seconds, exact);
        let mut cells = vec![
            name,
            alloc,
            free,
            ops(sum(false, |d| d.requests)),
            ops(sum(true, |d| d.requests)),
            bandwidth(sum(false, |d| d.bytes)),
            bandwidth(sum(true, |d| d.bytes)),
        ];
        if args.latency {
            let average =
                |classes: &[IoClass], write: Option<bool>, pick: fn(&DirectionStats) -> u64| {
                    let (total_ns, requests) = row
                        .directions(classes, write)
                        .fold((0u64, 0u64), |(ns, n), d| {
                            (ns.saturating_add(pick(d)), n + d.requests)
                        });
                    total_ns
                        .checked_div(requests)
                        .map_or("-".to_string(), |ns| human::micros(ns / 1000, exact))
                };
            let all = &IoClass::ALL;
            cells.extend([
                average(all, Some(false), |d| d.total_wait_ns),
                average(all, Some(true), |d| d.total_wait_ns),
                average(all, Some(false), |d| d.disk_wait_ns),
                average(all, Some(true), |d| d.disk_wait_ns),
                average(&SYNC_CLASSES, Some(false), |d| d.queue_wait_ns),
                average(&SYNC_CLASSES, Some(true), |d| d.queue_wait_ns),
                average(&ASYNC_CLASSES, Some(false), |d| d.queue_wait_ns),
                average(&ASYNC_CLASSES, Some(true), |d| d.queue_wait_ns),
                average(&[IoClass::Scrub], None, |d| d.queue_wait_ns),
            ]);
        }
        if args.queues {
            for class in IoClass::ALL {
                let stats = row.class(class);
                cells.push(stats.pending_requests.to_string());
                cells.push(stats.active_requests.to_string());
            }
        }
        table.push(cells);
    }
    table
}

#[derive(Clone, Copy)]
enum Histogram {
    Latency,
    Size,
}

impl Histogram {
    fn bucket_header(self) -> &'static str {
        match self {
            Histogram::Latency => "LATENCY",
            Histogram::Size => "SIZE",
        }
    }

    fn columns(self) -> Vec<String> {
        match self {
            Histogram::Latency => [
                "TOTAL-R", "TOTAL-W", "DISK-R", "DISK-W", "SYNCQ-R", "SYNCQ-W", "ASYNCQ-R",
                "ASYNCQ-W", "SCRUB",
            ]
            .iter()
            .map(|name| name.to_string())
            .collect(),
            Histogram::Size => IoClass::ALL
                .iter()
                .flat_map(|&class| {
                    let label = class_label(class);
                    [format!("{label}-IND"), format!("{label}-AGG")]
                })
                .collect(),
        }
    }

    /// The histogram's lines for `row`: the bucket's label, then one count per column.
    fn lines(self, row: &Row, exact: bool) -> Vec<Vec<String>> {
        match self {
            Histogram::Latency => {
                let sum =
                    |classes: &[IoClass],
                     write: Option<bool>,
                     pick: fn(&DirectionStats) -> &LatencyHistogram| {
                        let mut total = LatencyHistogram::default();
                        for direction in row.directions(classes, write) {
                            total.add(pick(direction));
                        }
                        total
                    };
                let all = &IoClass::ALL;
                let columns = [
                    sum(all, Some(false), |d| &d.total_wait_us),
                    sum(all, Some(true), |d| &d.total_wait_us),
                    sum(all, Some(false), |d| &d.disk_wait_us),
                    sum(all, Some(true), |d| &d.disk_wait_us),
                    sum(&SYNC_CLASSES, Some(false), |d| &d.queue_wait_us),
                    sum(&SYNC_CLASSES, Some(true), |d| &d.queue_wait_us),
                    sum(&ASYNC_CLASSES, Some(false), |d| &d.queue_wait_us),
                    sum(&ASYNC_CLASSES, Some(true), |d| &d.queue_wait_us),
                    sum(&[IoClass::Scrub], None, |d| &d.queue_wait_us),
                ];
                (0..cairn_device::LATENCY_BUCKETS)
                    .map(|bucket| {
                        let floor_us = LatencyHistogram::bucket_floor(bucket);
                        let label = if exact {
                            floor_us.to_string()
                        } else {
                            latency_label(floor_us)
                        };
                        std::iter::once(label)
                            .chain(columns.iter().map(|h| h.counts[bucket].to_string()))
                            .collect()
                    })
                    .collect()
            }
            Histogram::Size => {
                let columns: Vec<SizeHistogram> = IoClass::ALL
                    .iter()
                    .flat_map(|&class| {
                        let stats = row.class(class);
                        let mut individual = stats.read.request_size_bytes;
                        individual.add(&stats.write.request_size_bytes);
                        let mut aggregated = stats.read.aggregate_size_bytes;
                        aggregated.add(&stats.write.aggregate_size_bytes);
                        [individual, aggregated]
                    })
                    .collect();
                (0..cairn_device::SIZE_BUCKETS)
                    .map(|bucket| {
                        let floor = SizeHistogram::bucket_floor(bucket);
                        let label = if exact {
                            floor.to_string()
                        } else {
                            size_label(floor)
                        };
                        std::iter::once(label)
                            .chain(columns.iter().map(|h| h.counts[bucket].to_string()))
                            .collect()
                    })
                    .collect()
            }
        }
    }
}

/// A bucket's floor in microseconds, short: `1us`, `512us`, `1ms` (1,024 µs), `67s`.
fn latency_label(us: u64) -> String {
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{}ms", us / 1_000)
    } else {
        format!("{}s", us / 1_000_000)
    }
}

/// A bucket's floor in bytes, short: `512`, `8K`, `1M`.
fn size_label(bytes: u64) -> String {
    match bytes {
        b if b < 1 << 10 => b.to_string(),
        b if b < 1 << 20 => format!("{}K", b >> 10),
        b => format!("{}M", b >> 20),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_frontend::admin::samples::{LeafSample, TopSample};

    fn sample_with(write_sizes: &[(u64, u64, u64)], pending: u64) -> Vec<ClassSample> {
        IoClass::ALL
            .iter()
            .map(|&class| {
                let mut stats = ClassStats::default();
                if class == IoClass::AsyncWrite {
                    for &(bytes, queue_ns, disk_ns) in write_sizes {
                        stats.write.record_request(bytes, queue_ns, disk_ns);
                    }
                    stats.pending_requests = pending;
                }
                ClassSample::from_stats(&stats)
            })
            .collect()
    }

    fn snapshot(uptime_s: f64, classes: Vec<ClassSample>) -> Snapshot {
        let leaf = |name: &str| LeafSample {
            name: name.into(),
            classes: Some(classes.clone()),
        };
        Snapshot {
            uptime_s,
            pools: vec![PoolSample {
                name: "tank".into(),
                size_bytes: 100,
                allocated_bytes: 40,
                free_bytes: 60,
                tops: vec![
                    TopSample {
                        name: "mirror-0".into(),
                        section: Section::Data,
                        size_bytes: 100,
                        allocated_bytes: 40,
                        free_bytes: 60,
                        leaves: vec![leaf("/d0"), leaf("/d1")],
                    },
                    TopSample {
                        name: "/ssd".into(),
                        section: Section::Cache,
                        size_bytes: 10,
                        allocated_bytes: 1,
                        free_bytes: 9,
                        leaves: vec![leaf("/ssd")],
                    },
                ],
            }],
        }
    }

    #[test]
    fn rows_sum_devices_into_vdevs_and_pools_and_cover_the_interval_only() {
        let before = snapshot(1.0, sample_with(&[(8192, 1_000, 50_000)], 0));
        let now = snapshot(
            2.0,
            sample_with(
                &[
                    (8192, 1_000, 50_000),
                    (8192, 2_000, 3_000_000),
                    (1 << 20, 0, 10_000),
                ],
                5,
            ),
        );
        let rows = rows(&now, &before, true).unwrap();
        let names: Vec<&str> = rows.iter().map(|row| row.name.as_str()).collect();
        assert_eq!(names, ["tank", "mirror-0", "/d0", "/d1", "cache", "/ssd"]);
        let write = |row: &Row| row.class(IoClass::AsyncWrite).write;
        // Two requests per device in the interval; the pool sums both sides, not the cache.
        assert_eq!(write(&rows[2]).requests, 2);
        assert_eq!(write(&rows[1]).requests, 4);
        assert_eq!(write(&rows[0]).requests, 4);
        assert_eq!(write(&rows[5]).requests, 2);
        assert_eq!(rows[0].class(IoClass::AsyncWrite).pending_requests, 10);
        let pool = write(&rows[0]);
        assert_eq!(
            pool.request_size_bytes.counts[SizeHistogram::bucket_of(8192)],
            2
        );
        assert_eq!(
            pool.request_size_bytes.counts[SizeHistogram::bucket_of(1 << 20)],
            2
        );
        assert_eq!(pool.total_wait_us.total(), 4);
        assert_eq!(pool.queue_wait_ns, 2 * 2_000);
        assert!(rows[4].title);
        // Without -v: the pool only.
        assert_eq!(rows_names(&now, &before), ["tank"]);
    }

    fn rows_names(now: &Snapshot, before: &Snapshot) -> Vec<String> {
        rows(now, before, false)
            .unwrap()
            .into_iter()
            .map(|row| row.name)
            .collect()
    }

    #[test]
    fn snapshots_survive_their_json_form_and_reject_wrong_histograms() {
        let now = snapshot(3.5, sample_with(&[(4096, 10, 20)], 1));
        let text = serde_json::to_string(&now).unwrap();
        let back: Snapshot = serde_json::from_str(&text).unwrap();
        let stats = back.pools[0].tops[0].leaves[0].classes.as_ref().unwrap()
            [IoClass::AsyncWrite.index()]
        .to_stats()
        .unwrap();
        assert_eq!(stats.write.requests, 1);
        assert_eq!(stats.pending_requests, 1);
        let mut broken = back.pools[0].tops[0].leaves[0].classes.clone().unwrap();
        broken[0].read.total_wait_us.pop();
        assert!(broken[0].to_stats().is_err());
    }

    #[test]
    fn bucket_labels_read_like_zpool() {
        assert_eq!(latency_label(1), "1us");
        assert_eq!(latency_label(512), "512us");
        assert_eq!(latency_label(1024), "1ms");
        assert_eq!(latency_label(1 << 26), "67s");
        assert_eq!(size_label(512), "512");
        assert_eq!(size_label(8192), "8K");
        assert_eq!(size_label(16 << 20), "16M");
    }
}
