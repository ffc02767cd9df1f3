//! `dir-scale`: one directory of a cairn filesystem growing to a million files (issue 15: "a
//! directory of 1,000,000 files: creation rate, and lookup time of a random name at 1k, 100k
//! and 1M entries, flat within 2×").
//!
//! A pool on one sparse file (under `--dir`), a filesystem dataset, one directory. Files are
//! created (empty, as `touch` would) through the filesystem layer itself, not FUSE (the kernel
//! round trip would hide the directory's cost); at each checkpoint the creation rate since the
//! previous one is printed, then `--lookups` lookups of random existing names are timed one by
//! one, twice: right away, while the newest entries are still dirty in memory (txgs sync on
//! their usual schedule underneath), and after a txg sync, the directory at rest (the lookups
//! then read the published tree, through the object set's memo). Mean and p99 in
//! microseconds, the cache warm as a running server's would be. Then the ratio of the mean
//! lookup at the largest size to the smallest (the target: ≤ 2).
//!
//! A control follows: as many files again in directories of the smallest size, and lookups
//! of random names in random ones of them. They touch as much memory as the lookups in the
//! large directory, so the ratio of the two separates what a directory's size costs from
//! what a working set larger than the CPU's caches costs any structure.
//!
//! `cargo run --release -p cairn-bench --bin dir-scale -- [--dir DIR] [--files N] [--lookups K]`

use anyhow::{Context, Result, bail};
use cairn_device::spec::DeviceSpec;
use cairn_engine::{CreateOptions, Pool, PoolOptions, VdevGroup};
use cairn_fs::NewInode;
use cairn_fs::attrs::FileKind;
use std::time::Instant;

struct Args {
    dir: std::path::PathBuf,
    files: u64,
    lookups: u64,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        dir: std::path::PathBuf::from("target/bench-dir-scale"),
        files: 1_000_000,
        lookups: 20_000,
    };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--dir" => args.dir = value.into(),
            "--files" => args.files = value.parse().context("--files")?,
            "--lookups" => args.lookups = value.parse().context("--lookups")?,
            other => bail!("unknown argument {other}"),
        }
    }
    Ok(args)
}

fn name(index: u64) -> Vec<u8> {
    format!("file-{index:08}").into_bytes()
}

/// A small deterministic generator (splitmix64): the same names are looked up in every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % bound.max(1)
    }
}

/// Times `count` lookups one by one, each of the (directory, name) `pick` draws: (mean, p99)
/// in microseconds.
fn time_lookups(
    fs: &cairn_fs::Filesystem,
    count: u64,
    rng: &mut Rng,
    mut pick: impl FnMut(&mut Rng) -> (u64, Vec<u8>),
) -> Result<(f64, f64)> {
    let mut latencies_us = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (dir, wanted) = pick(rng);
        let asked = Instant::now();
        let (object, _) = fs.lookup(dir, &wanted)?;
        latencies_us.push(asked.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(object);
    }
    latencies_us.sort_by(f64::total_cmp);
    let mean = latencies_us.iter().sum::<f64>() / latencies_us.len().max(1) as f64;
    let p99 = latencies_us
        .get(latencies_us.len() * 99 / 100)
        .copied()
        .unwrap_or(0.0);
    Ok((mean, p99))
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let pool = create_pool(&args)?;
    pool.create_filesystem("dirs/fs", &[], (0, 0), 0o755)?;
    let fs = pool.filesystem("dirs/fs")?;
    let mut rng = Rng(42);
    let means = grow_one_directory(&pool, &fs, &args, &mut rng)?;
    control(&pool, &fs, &args, &means, &mut rng)?;
    let memo = fs.objset().memo_stats();
    println!(
        "object set memos at the end: dnodes {} ({} MiB, {} hits, {} misses), blocks {} ({} MiB, {} hits, {} misses), generation budget {} MiB",
        memo.dnodes.entries,
        memo.dnodes.bytes >> 20,
        memo.dnodes.hits,
        memo.dnodes.misses,
        memo.blocks.entries,
        memo.blocks.bytes >> 20,
        memo.blocks.hits,
        memo.blocks.misses,
        memo.generation_bytes_max >> 20
    );
    drop(fs);
    pool.export()?;
    std::fs::remove_dir_all(&args.dir)?;
    Ok(())
}

/// A fresh pool on one sparse file under `--dir` (cleared first).
fn create_pool(args: &Args) -> Result<Pool> {
    if args.dir.exists() {
        std::fs::remove_dir_all(&args.dir).with_context(|| format!("clear {:?}", args.dir))?;
    }
    std::fs::create_dir_all(&args.dir)?;
    let device = args.dir.join("pool.img");
    Ok(Pool::create(
        "dirs",
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
            create_size_bytes: Some(16 << 30),
            ..CreateOptions::default()
        },
        PoolOptions::default(),
    )?)
}

fn inode(kind: FileKind, mode: u32) -> NewInode {
    NewInode {
        kind,
        mode,
        uid: 0,
        gid: 0,
        rdev: 0,
    }
}

/// The measured run: one directory grown to `--files` entries, a table row per checkpoint.
/// Returns each checkpoint's (entries, mean lookup synced, mean lookup dirty).
fn grow_one_directory(
    pool: &Pool,
    fs: &cairn_fs::Filesystem,
    args: &Args,
    rng: &mut Rng,
) -> Result<Vec<(u64, f64, f64)>> {
    let (dir, _) = fs.mkdir(fs.root(), b"big", inode(FileKind::Directory, 0o755))?;
    let mut checkpoints: Vec<u64> = [1_000, 10_000, 100_000, 1_000_000]
        .into_iter()
        .filter(|&n| n < args.files)
        .collect();
    checkpoints.push(args.files);
    println!(
        "| entries | creates/s (since the previous row) | at rest: lookup mean (µs) | p99 (µs) | newest dirty: mean (µs) | p99 (µs) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    let mut created = 0u64;
    let mut means = Vec::new();
    for target in checkpoints {
        let started = Instant::now();
        let before = created;
        while created < target {
            fs.create(dir, &name(created), inode(FileKind::File, 0o644))?;
            created += 1;
        }
        let creates_per_s = (created - before) as f64 / started.elapsed().as_secs_f64();
        // First while the newest entries are still dirty (as a busy server sees them), then
        // once all of them are synced (a directory at rest: what the target is about).
        let pick = |rng: &mut Rng| (dir, name(rng.below(created)));
        let (dirty_mean, dirty_p99) = time_lookups(fs, args.lookups, rng, pick)?;
        pool.sync()?;
        let (mean, p99) = time_lookups(fs, args.lookups, rng, pick)?;
        println!(
            "| {target} | {creates_per_s:.0} | {mean:.2} | {p99:.2} | {dirty_mean:.2} | {dirty_p99:.2} |"
        );
        means.push((target, mean, dirty_mean));
    }
    if let (Some((small, first, first_dirty)), Some((large, last, last_dirty))) =
        (means.first(), means.last())
    {
        println!(
            "\nmean lookup at {large} entries / at {small}: {:.2}× synced (target: ≤ 2×), {:.2}× with the newest entries dirty",
            last / first,
            last_dirty / first_dirty
        );
    }
    Ok(means)
}

/// The control: as many files again, in directories of the smallest size. Lookups over
/// them touch as much memory as lookups in the one large directory, so the difference
/// between the two is what the directory's size costs, apart from the CPU's caches.
fn control(
    pool: &Pool,
    fs: &cairn_fs::Filesystem,
    args: &Args,
    means: &[(u64, f64, f64)],
    rng: &mut Rng,
) -> Result<()> {
    let small = means.first().map_or(1_000, |(entries, _, _)| *entries);
    let directories = (args.files / small).max(1);
    let started = Instant::now();
    let mut small_dirs = Vec::with_capacity(directories as usize);
    for d in 0..directories {
        let (sub, _) = fs.mkdir(
            fs.root(),
            format!("small-{d:06}").as_bytes(),
            inode(FileKind::Directory, 0o755),
        )?;
        for index in 0..small {
            fs.create(sub, &name(index), inode(FileKind::File, 0o644))?;
        }
        small_dirs.push(sub);
    }
    let control_creates_per_s = (directories * small) as f64 / started.elapsed().as_secs_f64();
    pool.sync()?;
    let (control_mean, control_p99) = time_lookups(fs, args.lookups, rng, |rng| {
        let sub = small_dirs[rng.below(directories) as usize];
        (sub, name(rng.below(small)))
    })?;
    println!(
        "\ncontrol: {directories} directories of {small} entries ({control_creates_per_s:.0} creates/s), synced: lookup mean {control_mean:.2} µs, p99 {control_p99:.2} µs"
    );
    if let Some((large, last, _)) = means.last() {
        println!(
            "mean lookup in one directory of {large} / in directories of {small} holding as many files: {:.2}×",
            last / control_mean
        );
    }
    Ok(())
}
