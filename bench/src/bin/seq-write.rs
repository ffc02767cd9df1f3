//! `seq-write`: 1 GiB written sequentially through a cairn volume, compared in the same run with
//! the same bytes written to a plain file on the same file system.
//!
//! Both sides end with a durability point (fdatasync for the file, a volume flush — a synced
//! txg — for cairn), and both start from a fresh sparse file, so the comparison is "bytes made
//! durable per second". Each side runs `--rounds` times, alternating, and the median is reported.
//!
//! ```text
//! cargo run --release -p cairn-bench --bin seq-write -- [--dir DIR] [--size-mib 1024]
//!     [--write-kib 1024] [--volblocksize 16K,128K] [--rounds 3]
//! ```

use anyhow::{Context, Result, bail};
use cairn_device::spec::DeviceSpec;
use cairn_engine::{CreateOptions, Pool, PoolOptions, VdevGroup};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Args {
    dir: PathBuf,
    size_bytes: u64,
    write_bytes: usize,
    volblocksizes: Vec<String>,
    rounds: usize,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        dir: PathBuf::from("target/bench-tmp"),
        size_bytes: 1 << 30,
        write_bytes: 1 << 20,
        volblocksizes: vec!["16K".into(), "128K".into()],
        rounds: 3,
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let mut value = || iter.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => args.dir = PathBuf::from(value()?),
            "--size-mib" => args.size_bytes = value()?.parse::<u64>()? << 20,
            "--write-kib" => args.write_bytes = value()?.parse::<usize>()? << 10,
            "--volblocksize" => {
                args.volblocksizes = value()?.split(',').map(str::to_string).collect()
            }
            "--rounds" => args.rounds = value()?.parse()?,
            other => bail!("unknown option {other}"),
        }
    }
    Ok(args)
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn plain_file(dir: &Path, args: &Args, chunk: &[u8]) -> Result<Duration> {
    let path = dir.join("plain.bin");
    let _ = std::fs::remove_file(&path);
    let file = std::fs::File::create(&path)?;
    let start = Instant::now();
    let mut offset = 0u64;
    while offset < args.size_bytes {
        file.write_all_at(chunk, offset)?;
        offset += chunk.len() as u64;
    }
    file.sync_data()?;
    let elapsed = start.elapsed();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok(elapsed)
}

fn cairn_volume(dir: &Path, args: &Args, chunk: &[u8], volblocksize: &str) -> Result<Duration> {
    let device = dir.join("pool.img");
    let _ = std::fs::remove_file(&device);
    let pool = Pool::create(
        "bench",
        &[VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: vec![DeviceSpec {
                path: device.clone(),
                model: None,
            }],
        }],
        &CreateOptions {
            create_size_bytes: Some(args.size_bytes * 2 + (256 << 20)),
            ..Default::default()
        },
        PoolOptions::default(),
    )?;
    pool.create_volume(
        "bench/vol",
        args.size_bytes,
        &[("volblocksize".into(), volblocksize.into())],
    )?;
    let volume = pool.volume("bench/vol")?;
    let start = Instant::now();
    let mut offset = 0u64;
    while offset < args.size_bytes {
        volume.write(offset, chunk)?;
        offset += chunk.len() as u64;
    }
    volume.flush()?;
    let elapsed = start.elapsed();
    // Sanity: the bytes are allocated on the device and read back (verified by checksum).
    let allocated = pool.status().allocated_bytes;
    if allocated < args.size_bytes {
        bail!(
            "only {allocated} bytes allocated after writing {}",
            args.size_bytes
        );
    }
    let device_bytes = std::fs::metadata(&device)?.len();
    let mut sample = vec![0u8; chunk.len()];
    volume.read(args.size_bytes - chunk.len() as u64, &mut sample)?;
    if sample != chunk {
        bail!("read-back of the last chunk differs");
    }
    let _ = device_bytes;
    pool.destroy()?;
    drop(pool);
    std::fs::remove_file(&device)?;
    Ok(elapsed)
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn mb_per_s(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / 1e6 / elapsed.as_secs_f64()
}

fn main() -> Result<()> {
    let args = parse_args()?;
    std::fs::create_dir_all(&args.dir)?;
    let chunk = pattern(args.write_bytes, 42);
    println!(
        "seq-write: {} MiB in {} KiB writes, {} rounds, files in {}",
        args.size_bytes >> 20,
        args.write_bytes >> 10,
        args.rounds,
        args.dir.display()
    );
    let mut plain = Vec::new();
    let mut cairn: Vec<Vec<Duration>> = vec![Vec::new(); args.volblocksizes.len()];
    for round in 0..args.rounds {
        plain.push(plain_file(&args.dir, &args, &chunk)?);
        for (index, volblocksize) in args.volblocksizes.iter().enumerate() {
            cairn[index].push(cairn_volume(&args.dir, &args, &chunk, volblocksize)?);
        }
        print!(".");
        std::io::stdout().flush()?;
        let _ = round;
    }
    println!();
    let baseline = median(plain);
    let baseline_rate = mb_per_s(args.size_bytes, baseline);
    println!("| writer | MB/s | ratio to plain file |");
    println!("|---|---|---|");
    println!("| plain file + fdatasync | {baseline_rate:.0} | 1.00 |");
    for (volblocksize, times) in args.volblocksizes.iter().zip(cairn) {
        let rate = mb_per_s(args.size_bytes, median(times));
        println!(
            "| cairn volume (volblocksize={volblocksize}) + flush | {rate:.0} | {:.2} |",
            rate / baseline_rate
        );
    }
    Ok(())
}
