//! `cairn pool iostat [-v] [-H] [-p] [POOL...] [INTERVAL [COUNT]]`: per-dataset traffic of a
//! running server (with `-l`, `-q`, `-w` or `-r`: zpool's per-device views, see `devices`), like `zpool iostat`: each volume's NBD requests and each mounted
//! or NFS-shared filesystem's calls (NFS procedures counted as the FUSE calls they match) (reads, writes, fsyncs as flushes, fallocate as trims, and every namespace
//! call — lookups, creates, renames... — as META).
//!
//! The statistics live in the server. The client asks it for cumulative samples over the
//! control socket (`AdminRequest::DatasetIo`: per export and operation, from the same
//! per-dataset samples the analytics take) and prints the difference between consecutive
//! samples, so each line covers exactly one interval; the first
//! report covers everything since the server started, as zpool's does. Mean latencies per
//! interval come from the difference of (mean × count); `-v` adds cumulative p50/p99 latencies.

mod devices;

use crate::context::{Context, say, say_raw};
use crate::human;
use crate::table::{Column, Table};
use crate::{ListFormat, remote};
use anyhow::{Context as _, Result, anyhow, bail};
use cairn_frontend::admin::samples::DatasetIoSample;
use cairn_frontend::admin::{AdminReply, AdminRequest};
use clap::Args;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct IostatArgs {
    #[command(flatten)]
    pub format: ListFormat,
    /// Add latency percentiles (cumulative since the server started); with -l, -q, -w or -r,
    /// every vdev and device.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Per device: average total, disk and queue waits (zpool iostat -l).
    #[arg(short = 'l')]
    pub latency: bool,
    /// Per class: requests pending in the queue and active on the device (zpool iostat -q).
    #[arg(short = 'q')]
    pub queues: bool,
    /// Latency histograms: total, disk and queue waits in power-of-two buckets (zpool -w).
    #[arg(short = 'w')]
    pub latency_histograms: bool,
    /// Request size histograms per class: individual and aggregated I/O (zpool -r).
    #[arg(short = 'r')]
    pub request_sizes: bool,
    /// [POOL...] [INTERVAL [COUNT]]
    pub args: Vec<String>,
}

/// Names of the snapshot's operations: the NBD ones, and filesystems' namespace calls.
const OP_NAMES: [&str; 5] = ["read", "write", "flush", "trim", "meta"];

/// Cumulative counters of one operation kind of one export.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Counters {
    ops: u64,
    bytes: u64,
    errors: u64,
    latency_sum_us: f64,
    p50_us: u64,
    p99_us: u64,
}

/// Cumulative counters by (export, operation), and the server's uptime when they were taken.
#[derive(Debug, Default)]
struct Snapshot {
    uptime_s: f64,
    counters: BTreeMap<(String, &'static str), Counters>,
}

fn op_name(text: &str) -> Option<&'static str> {
    OP_NAMES.iter().copied().find(|name| *name == text)
}

/// The server's sample, keyed for subtraction.
fn snapshot(sample: DatasetIoSample) -> Result<Snapshot> {
    let mut snapshot = Snapshot {
        uptime_s: sample.uptime_s,
        counters: BTreeMap::new(),
    };
    for dataset in sample.datasets {
        for op in dataset.ops {
            let name = op_name(&op.op)
                .ok_or_else(|| anyhow!("unknown operation in the server's sample: {}", op.op))?;
            snapshot.counters.insert(
                (dataset.dataset.clone(), name),
                Counters {
                    ops: op.ops,
                    bytes: op.bytes,
                    errors: op.errors,
                    latency_sum_us: op.latency_sum_us,
                    p50_us: op.p50_us,
                    p99_us: op.p99_us,
                },
            );
        }
    }
    Ok(snapshot)
}

/// Splits `[POOL...] [INTERVAL [COUNT]]`.
pub(crate) fn parse_positional(args: &[String]) -> Result<(Vec<String>, Option<f64>, Option<u64>)> {
    let first_number = args
        .iter()
        .position(|arg| arg.parse::<f64>().is_ok())
        .unwrap_or(args.len());
    let pools = args[..first_number].to_vec();
    let numbers = &args[first_number..];
    if numbers.len() > 2 {
        bail!(
            "expected [POOL...] [INTERVAL [COUNT]], got {}",
            args.join(" ")
        );
    }
    let interval = numbers
        .first()
        .map(|text| text.parse::<f64>())
        .transpose()?;
    if interval.is_some_and(|seconds| !(seconds > 0.0 && seconds.is_finite())) {
        bail!("the interval must be a positive number of seconds");
    }
    let count = numbers
        .get(1)
        .map(|text| text.parse::<u64>())
        .transpose()
        .context("the count must be a whole number")?;
    Ok((pools, interval, count))
}

fn render(
    ctx: &Context,
    args: &IostatArgs,
    pools: &[String],
    now: &Snapshot,
    before: &Snapshot,
    seconds: f64,
) {
    let mut columns = vec![
        Column::left("DATASET"),
        Column::right("R-OPS/S"),
        Column::right("W-OPS/S"),
        Column::right("R-BW/S"),
        Column::right("W-BW/S"),
        Column::right("FLUSH/S"),
        Column::right("TRIM/S"),
        Column::right("META/S"),
        Column::right("R-LAT"),
        Column::right("W-LAT"),
        Column::right("F-LAT"),
        Column::right("ERRORS"),
    ];
    if args.verbose {
        for name in ["R-P50", "R-P99", "W-P50", "W-P99", "F-P99"] {
            columns.push(Column::right(name));
        }
    }
    let mut table = Table::new(columns);
    let exports: std::collections::BTreeSet<&String> =
        now.counters.keys().map(|(export, _)| export).collect();
    let exact = args.format.exact;
    for export in exports {
        if !pools.is_empty()
            && !pools
                .iter()
                .any(|pool| export.split('/').next() == Some(pool))
        {
            continue;
        }
        let delta = |op: &'static str| -> (Counters, Counters) {
            let key = (export.clone(), op);
            let current = now.counters.get(&key).copied().unwrap_or_default();
            let earlier = before.counters.get(&key).copied().unwrap_or_default();
            let diff = Counters {
                ops: current.ops.saturating_sub(earlier.ops),
                bytes: current.bytes.saturating_sub(earlier.bytes),
                errors: current.errors.saturating_sub(earlier.errors),
                latency_sum_us: (current.latency_sum_us - earlier.latency_sum_us).max(0.0),
                ..current
            };
            (diff, current)
        };
        let ops = |value: u64| human::per_second_count(value, seconds, exact);
        let bandwidth = |value: u64| human::per_second_bytes(value, seconds, exact);
        let latency = |counters: &Counters| -> String {
            if counters.ops == 0 {
                "-".into()
            } else {
                human::micros(
                    (counters.latency_sum_us / counters.ops as f64) as u64,
                    exact,
                )
            }
        };
        let (read, read_total) = delta("read");
        let (write, write_total) = delta("write");
        let (flush, flush_total) = delta("flush");
        let (trim, _) = delta("trim");
        let (meta, _) = delta("meta");
        let mut row = vec![
            export.clone(),
            ops(read.ops),
            ops(write.ops),
            bandwidth(read.bytes),
            bandwidth(write.bytes),
            ops(flush.ops),
            ops(trim.ops),
            ops(meta.ops),
            latency(&read),
            latency(&write),
            latency(&flush),
            (read.errors + write.errors + flush.errors + trim.errors + meta.errors).to_string(),
        ];
        if args.verbose {
            for value in [
                read_total.p50_us,
                read_total.p99_us,
                write_total.p50_us,
                write_total.p99_us,
                flush_total.p99_us,
            ] {
                row.push(human::micros(value, exact));
            }
        }
        table.push(row);
    }
    if table.is_empty() {
        say!(ctx, "no volumes served, no filesystems mounted");
    } else {
        say_raw!(ctx, "{}", table.render(args.format.scripted));
    }
}

pub fn iostat(ctx: &Context, args: &IostatArgs) -> Result<()> {
    if devices::wanted(args) {
        return devices::iostat(ctx, args);
    }
    let (pools, interval, count) = parse_positional(&args.args)?;
    let sample = || -> Result<Snapshot> {
        match remote::call(ctx, AdminRequest::DatasetIo)? {
            AdminReply::DatasetIo(sample) => snapshot(sample),
            other => Err(remote::unexpected(&other)),
        }
    };
    let mut before = Snapshot::default();
    let mut now = sample()?;
    // The first report covers the server's whole life, as zpool's does.
    render(ctx, args, &pools, &now, &before, now.uptime_s.max(0.001));
    let Some(seconds) = interval else {
        return Ok(());
    };
    let mut printed = 1;
    while count.is_none_or(|count| printed < count) {
        std::thread::sleep(Duration::from_secs_f64(seconds));
        before = now;
        now = sample()?;
        if !args.format.scripted {
            say!(ctx);
        }
        let elapsed = (now.uptime_s - before.uptime_s).max(0.001);
        render(ctx, args, &pools, &now, &before, elapsed);
        printed += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_arguments_split_into_pools_interval_and_count() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            parse_positional(&args(&["tank", "2", "5"])).unwrap(),
            (vec!["tank".to_string()], Some(2.0), Some(5))
        );
        assert_eq!(parse_positional(&args(&[])).unwrap(), (vec![], None, None));
        assert!(parse_positional(&args(&["1", "2", "3"])).is_err());
        assert!(parse_positional(&args(&["0"])).is_err());
    }

    #[test]
    fn samples_key_by_export_and_operation() {
        use cairn_frontend::admin::samples::{DatasetIo, OpCounters};
        let op = |name: &str, ops: u64, errors: u64| OpCounters {
            op: name.to_string(),
            ops,
            bytes: ops * 4096,
            errors,
            latency_sum_us: 1500.0,
            p50_us: 100,
            p99_us: 900,
        };
        let sample = DatasetIoSample {
            uptime_s: 12.5,
            datasets: vec![DatasetIo {
                dataset: "tank/vol".to_string(),
                ops: vec![op("read", 10, 0), op("write", 3, 1)],
            }],
        };
        let snapshot = snapshot(sample.clone()).unwrap();
        assert_eq!(snapshot.uptime_s, 12.5);
        let read = snapshot.counters[&("tank/vol".to_string(), "read")];
        assert_eq!((read.ops, read.bytes, read.p99_us), (10, 40960, 900));
        assert_eq!(
            snapshot.counters[&("tank/vol".to_string(), "write")].errors,
            1
        );
        let mut unknown = sample;
        unknown.datasets[0].ops.push(op("dance", 1, 0));
        assert!(super::snapshot(unknown).is_err());
    }
}
