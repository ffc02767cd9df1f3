//! `snapshot-scale`: 10,000 snapshots of one dataset and 1,000 datasets (issue 34, scope 2:
//! "snapshot create is O(1) in data; `list -t snapshot` of 10,000 returns in under a second";
//! the dataset directory must not be rewritten whole every txg).
//!
//! Through the engine's API (a process per command would hide the engine's cost behind
//! process start-up), on one sparse file under `--dir`:
//! 1. a volume; `--snapshots` times: a 4 KiB write, then a snapshot (one txg each: a dataset
//!    takes one snapshot per txg). Per block of 1,000: snapshot latency p50/p99/max, and the
//!    time to list the dataset's snapshots (`Pool::snapshots`) at that count;
//! 2. the blocks and bytes written by a txg that changes one volume (a 4 KiB write and a
//!    sync), with the pool's few datasets, then again once `--datasets` sparse volumes exist,
//!    and the time to list the datasets (`Pool::datasets`) with every property.
//!
//! The pool is exported at the end and left in `--dir`, so the CLI can be timed on it too
//! (`cairn pool import -d DIR scale`, `cairn list -t snapshot`).
//!
//! `cargo run --release -p cairn-bench --bin snapshot-scale -- [--dir DIR] [--snapshots N]
//! [--datasets M]`

use anyhow::{Context, Result, bail};
use cairn_dataset::directory::Provisioning;
use cairn_device::spec::DeviceSpec;
use cairn_engine::{CreateOptions, Pool, PoolOptions, VdevGroup};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

struct Args {
    dir: std::path::PathBuf,
    snapshots: u64,
    datasets: u64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        dir: std::path::PathBuf::from("target/bench-snapshot-scale"),
        snapshots: 10_000,
        datasets: 1_000,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--dir" => args.dir = value.into(),
            "--snapshots" => args.snapshots = value.parse().context("--snapshots")?,
            "--datasets" => args.datasets = value.parse().context("--datasets")?,
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

const VOLUME: &str = "scale/vol";
const VOLUME_BYTES: u64 = 64 << 20;

fn main() -> Result<()> {
    let args = parse_args()?;
    let pool = create_pool(&args)?;
    pool.create_volume_as(VOLUME, VOLUME_BYTES, Provisioning::Sparse, &[])?;
    snapshots(&pool, &args)?;
    let (blocks, bytes) = one_dataset_txg(&pool)?;
    let mos = pool.mos_writes();
    println!(
        "a txg changing one volume, 2 datasets: {blocks:.1} blocks, {bytes:.0} bytes; the MOS's \
         share of the last: {} blocks, {} bytes",
        mos.last_txg_blocks, mos.last_txg_bytes
    );
    let started = Instant::now();
    for index in 0..args.datasets {
        pool.create_volume_as(
            &format!("scale/v{index:05}"),
            1 << 20,
            Provisioning::Sparse,
            &[],
        )?;
    }
    println!(
        "created {} volumes in {:.1} s",
        args.datasets,
        started.elapsed().as_secs_f64()
    );
    let (blocks, bytes) = one_dataset_txg(&pool)?;
    let mos = pool.mos_writes();
    println!(
        "a txg changing one volume, {} datasets: {blocks:.1} blocks, {bytes:.0} bytes; the \
         MOS's share of the last: {} blocks, {} bytes",
        args.datasets + 2,
        mos.last_txg_blocks,
        mos.last_txg_bytes
    );
    let started = Instant::now();
    let listed = pool.datasets()?.len();
    println!(
        "Pool::datasets: {listed} datasets in {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    pool.export()?;
    Ok(())
}

/// Takes `args.snapshots` snapshots of the volume, a 4 KiB write before each; prints a row
/// per 1,000.
fn snapshots(pool: &Pool, args: &Args) -> Result<()> {
    let volume = pool.volume(VOLUME)?;
    println!(
        "| snapshots | create p50 (ms) | p99 (ms) | max (ms) | list (ms) | blocks / KB written per snapshot | MOS blocks / KB of the last |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut latencies: Vec<Duration> = Vec::new();
    let stats = &pool.io().stats;
    let written = || {
        (
            stats.blocks_written.load(Ordering::Relaxed),
            stats.bytes_written.load(Ordering::Relaxed),
        )
    };
    let mut written_before = written();
    for index in 0..args.snapshots {
        let offset = (index * 4096) % VOLUME_BYTES;
        volume.write(offset, &[index as u8; 4096])?;
        let started = Instant::now();
        pool.snapshot(&[format!("{VOLUME}@s{index:05}")], false)?;
        latencies.push(started.elapsed());
        if (index + 1) % 1000 == 0 || index + 1 == args.snapshots {
            latencies.sort();
            let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
            let started = Instant::now();
            let listed = pool.snapshots(Some(VOLUME))?.len();
            let list = started.elapsed();
            if listed as u64 != index + 1 {
                bail!("listed {listed} snapshots, not {}", index + 1);
            }
            let ms = |d: Duration| d.as_secs_f64() * 1e3;
            // What each snapshot's txg wrote (with its 4 KiB write), on average over the rows'
            // snapshots, and the MOS's share of the last one.
            let now = written();
            let count = latencies.len() as f64;
            let mos = pool.mos_writes();
            println!(
                "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} / {:.1} | {} / {:.1} |",
                index + 1,
                ms(at(0.5)),
                ms(at(0.99)),
                ms(at(1.0)),
                ms(list),
                (now.0 - written_before.0) as f64 / count,
                (now.1 - written_before.1) as f64 / count / 1e3,
                mos.last_txg_blocks,
                mos.last_txg_bytes as f64 / 1e3
            );
            written_before = now;
            latencies.clear();
        }
    }
    Ok(())
}

/// The blocks and bytes written, on average over 5 txgs, by a txg whose only change is a
/// 4 KiB write to the volume (the pool otherwise idle).
fn one_dataset_txg(pool: &Pool) -> Result<(f64, f64)> {
    let volume = pool.volume(VOLUME)?;
    pool.sync()?;
    pool.sync()?;
    let stats = &pool.io().stats;
    let before = (
        stats.blocks_written.load(Ordering::Relaxed),
        stats.bytes_written.load(Ordering::Relaxed),
    );
    const ROUNDS: u64 = 5;
    for round in 0..ROUNDS {
        volume.write(round * 4096, &[7u8; 4096])?;
        pool.sync()?;
    }
    let blocks = stats.blocks_written.load(Ordering::Relaxed) - before.0;
    let bytes = stats.bytes_written.load(Ordering::Relaxed) - before.1;
    Ok((blocks as f64 / ROUNDS as f64, bytes as f64 / ROUNDS as f64))
}

/// A fresh pool on one sparse file under `--dir` (cleared first).
fn create_pool(args: &Args) -> Result<Pool> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir).with_context(|| format!("clear {:?}", args.dir))?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let device = args.dir.join("pool.img");
    Ok(Pool::create(
        "scale",
        &[VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: vec![DeviceSpec {
                path: device,
                model: None,
            }],
        }],
        &CreateOptions {
            create_size_bytes: Some(8 << 30),
            ..CreateOptions::default()
        },
        PoolOptions::default(),
    )?)
}
