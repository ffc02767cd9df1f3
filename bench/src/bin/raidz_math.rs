//! `raidz_math`: RAID-Z parity generation and reconstruction in memory, in GB/s of block data
//! on one core, for every kernel this CPU runs (AVX2 and portable side by side), next to a
//! memcpy of the same bytes measured in the same run, its batches taking turns with the
//! generation's (the ratio is generation / memcpy).
//!
//! Each row is one raidz layout (parity 1 to 3, widths 4, 6, 8, 12) and one kernel:
//! "generate" computes the parity columns of a block straight from its bytes
//! (`RaidzMap::parity_into_with`); "rebuild k" rebuilds the first k data columns from the
//! others and k parity columns (`RaidzMap::reconstruct_with`), the work a degraded read or a
//! resilver does. Blocks are `--block-kib` (128) at ashift `--ashift` (12). By default the
//! blocks cycle through `--working-set-mib` (64) of memory, so the data comes from RAM as in
//! a pool's writes; `--working-set-mib 0` keeps one block in cache (the CPU's own limit).
//! Each figure is the median of batches of four calls timed over `--seconds` (0.5): the
//! machine may be shared, and a batch that lost the core does not move the median.
//!
//! ```text
//! cargo run --release -p cairn-bench --bin raidz_math -- [--block-kib 128] [--ashift 12]
//!     [--working-set-mib 64] [--seconds 0.5] [--parity 1,2,3] [--widths 4,6,8,12]
//! ```

use anyhow::{Context, Result, bail, ensure};
use cairn_format::raidz::{RaidzGeometry, RaidzKernel, RaidzMap, kernel_name};
use std::hint::black_box;
use std::time::{Duration, Instant};

struct Args {
    block_bytes: usize,
    ashift: u8,
    working_set_bytes: usize,
    run: Duration,
    parities: Vec<u8>,
    widths: Vec<u32>,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        block_bytes: 128 << 10,
        ashift: 12,
        working_set_bytes: 64 << 20,
        run: Duration::from_millis(500),
        parities: vec![1, 2, 3],
        widths: vec![4, 6, 8, 12],
    };
    let mut iter = std::env::args().skip(1);
    while let Some(flag) = iter.next() {
        let value = iter
            .next()
            .with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--block-kib" => args.block_bytes = value.parse::<usize>()? << 10,
            "--ashift" => args.ashift = value.parse()?,
            "--working-set-mib" => args.working_set_bytes = value.parse::<usize>()? << 20,
            "--seconds" => args.run = Duration::from_secs_f64(value.parse()?),
            "--parity" => args.parities = list(&value)?,
            "--widths" => args.widths = list(&value)?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    ensure!(args.block_bytes > 0, "--block-kib must be positive");
    Ok(args)
}

/// A comma-separated list.
fn list<T: std::str::FromStr>(text: &str) -> Result<Vec<T>>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    text.split(',')
        .map(|item| item.trim().parse::<T>().map_err(anyhow::Error::from))
        .collect()
}

/// splitmix64 bytes: incompressible, seeded, no dependency.
fn random_bytes(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut out = Vec::with_capacity(length + 8);
    while out.len() < length {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(length);
    out
}

/// Calls timed together: about 0.1 ms of work, short next to a scheduler's time slice.
const BATCH_CALLS: usize = 4;

/// Data GB per second of each of `steps`, `step(i)` for i = 0, 1, 2, …, over `run`: batches
/// of calls timed one by one, the steps' batches taking turns, and the median batch of each,
/// so a batch that lost the core to another process (the machine may be shared) does not
/// count, and steps compared with one another ran under the same conditions.
fn rates_gb_s(run: Duration, block_bytes: usize, steps: &mut [&mut dyn FnMut(usize)]) -> Vec<f64> {
    let mut batches: Vec<Vec<Duration>> = vec![Vec::new(); steps.len()];
    let start = Instant::now();
    let mut calls = 0usize;
    while start.elapsed() < run || batches[0].len() < 9 {
        for (step, times) in steps.iter_mut().zip(&mut batches) {
            let batch_start = Instant::now();
            for call in calls..calls + BATCH_CALLS {
                step(call);
            }
            times.push(batch_start.elapsed());
        }
        calls += BATCH_CALLS;
    }
    batches
        .iter_mut()
        .map(|times| {
            times.sort_unstable();
            let median = times[times.len() / 2].as_secs_f64();
            (BATCH_CALLS * block_bytes) as f64 / median / 1e9
        })
        .collect()
}

/// One layout's blocks: each block's bytes and its column buffers (encoded).
struct Blocks {
    map: RaidzMap,
    data: Vec<Vec<u8>>,
    columns: Vec<Vec<Vec<u8>>>,
}

impl Blocks {
    fn new(args: &Args, width: u32, parity: u8) -> Result<Blocks> {
        let geometry = RaidzGeometry::new(width, parity, args.ashift)?;
        let map = geometry.map(0, args.block_bytes as u64);
        let per_block = geometry.asize(args.block_bytes as u64) as usize;
        let count = (args.working_set_bytes / per_block).max(1);
        let data: Vec<Vec<u8>> = (0..count)
            .map(|index| random_bytes(args.block_bytes, index as u64 + 1))
            .collect();
        let columns = data.iter().map(|block| map.encode(block)).collect();
        Ok(Blocks { map, data, columns })
    }
}

/// One row with `kernel`, in GB/s: generation, rebuilds of 1..=parity data columns (as many
/// as there are), and a memcpy of the same blocks taking turns with the generation.
fn measure(args: &Args, blocks: &mut Blocks, kernel: RaidzKernel) -> Result<(Vec<f64>, f64)> {
    let map = blocks.map.clone();
    let parity = map.parity();
    let count = blocks.data.len();
    let mut parity_out = vec![vec![0u8; map.column_buffer_bytes()]; parity];
    let mut target = vec![0u8; args.block_bytes];
    let mut failed = false;
    let data = &blocks.data;
    let mut generate = |i: usize| {
        let generated = map.parity_into_with(kernel, &data[i % count], &mut parity_out);
        failed |= generated.is_err();
        black_box(&parity_out);
    };
    // Half the working set away from the generation's block: not one it just brought in.
    let mut memcpy = |i: usize| {
        target.copy_from_slice(&data[(i + count / 2) % count]);
        black_box(&target);
    };
    let paired = rates_gb_s(
        args.run,
        args.block_bytes,
        &mut [&mut generate, &mut memcpy],
    );
    let mut figures = vec![paired[0]];
    ensure!(!failed, "parity generation refused its buffers");
    let data_columns = map.columns().len() - parity;
    for lost in 1..=parity.min(data_columns) {
        let missing: Vec<usize> = (parity..parity + lost).collect();
        let mut rebuild = |i: usize| {
            let buffers = &mut blocks.columns[i % count];
            failed |= map.reconstruct_with(kernel, buffers, &missing).is_err();
            black_box(buffers);
        };
        figures.extend(rates_gb_s(args.run, args.block_bytes, &mut [&mut rebuild]));
        ensure!(!failed, "rebuild of {lost} columns refused");
    }
    // The rebuilds must have put back exactly what was there.
    for (block, buffers) in blocks.data.iter().zip(&blocks.columns) {
        ensure!(
            map.encode(block) == *buffers,
            "{} rebuilt wrong bytes",
            kernel.name()
        );
    }
    Ok((figures, paired[1]))
}

fn main() -> Result<()> {
    let args = parse_args()?;
    println!(
        "RAID-Z parity in memory: {} KiB blocks, ashift {}, working set {} MiB, one core; \
         kernel in use: {}. GB/s of block data (median of batches over {:.2} s).\n",
        args.block_bytes >> 10,
        args.ashift,
        args.working_set_bytes >> 20,
        kernel_name(),
        args.run.as_secs_f64(),
    );
    println!(
        "| layout | kernel | generate | rebuild 1 | rebuild 2 | rebuild 3 | memcpy | generate / memcpy |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for &parity in &args.parities {
        for &width in &args.widths {
            let mut blocks = Blocks::new(&args, width, parity)?;
            for kernel in RaidzKernel::available() {
                let (figures, memcpy) = measure(&args, &mut blocks, kernel)?;
                let cells: Vec<String> = (0..4)
                    .map(|index| {
                        figures
                            .get(index)
                            .map_or("–".to_string(), |rate| format!("{rate:.2}"))
                    })
                    .collect();
                println!(
                    "| raidz{parity} ×{width} | {} | {} | {memcpy:.2} | {:.2} |",
                    kernel.name(),
                    cells.join(" | "),
                    figures[0] / memcpy,
                );
            }
        }
    }
    Ok(())
}
