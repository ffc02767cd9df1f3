//! `cache-sim`: replays a block trace through cairn's cache policy (the ARC of cairn-arc, with
//! its sequential prefetch as the read path uses it) and prints what it read from disk.
//!
//! ```text
//! cache-sim --trace FILE --capacity BLOCKS [--block-bytes N] [--no-prefetch]
//! ```
//!
//! The trace is text, one request per line: its first block number and, optionally, how many
//! blocks it reads (default 1). With one block per line it is the format libCacheSim reads as
//! a plain-text trace; `bench/cache.py` expands multi-block requests into such a file for
//! libCacheSim, so both replay the same blocks in the same order. Prints one line of `key=value`
//! pairs: requests, demand_misses, prefetch_reads, miss_ratio (blocks read from disk per
//! request: demand misses plus read-ahead, since prefetch reads the blocks all the same),
//! header_bytes_per_block.

use anyhow::{Context, Result, bail};
use cairn_arc::StreamConfig;
use cairn_arc::replay::Replayer;
use std::io::{BufRead, BufReader};

fn main() -> Result<()> {
    let mut trace = None;
    let mut capacity_blocks = None;
    let mut block_bytes = 4096u32;
    let mut prefetch = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--trace" => trace = Some(value()?),
            "--capacity" => capacity_blocks = Some(value()?.parse::<u64>()?),
            "--block-bytes" => block_bytes = value()?.parse()?,
            "--no-prefetch" => prefetch = false,
            other => bail!("unknown argument {other}"),
        }
    }
    let trace = trace.context("--trace FILE is required")?;
    let capacity_blocks = capacity_blocks.context("--capacity BLOCKS is required")?;
    let mut replayer = Replayer::new(
        capacity_blocks,
        block_bytes,
        prefetch.then(StreamConfig::default),
    );
    let file = std::fs::File::open(&trace).with_context(|| format!("opening {trace}"))?;
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let line = line.with_context(|| format!("reading {trace}"))?;
        let bad = || format!("{trace} line {}: not `BLOCK [COUNT]`", number + 1);
        let mut fields = line.split_whitespace();
        let first: u64 = fields.next().with_context(bad)?.parse().with_context(bad)?;
        let count: u64 = match fields.next() {
            Some(count) => count.parse().with_context(bad)?,
            None => 1,
        };
        if count == 0 {
            bail!(bad());
        }
        replayer.request(first, count);
    }
    let outcome = replayer.outcome();
    let sizes = replayer.policy().sizes();
    let blocks = (sizes.mru_blocks + sizes.mfu_blocks + sizes.ghost_blocks).max(1);
    println!(
        "requests={} demand_misses={} prefetch_reads={} prefetch_used={} miss_ratio={:.6} header_bytes_per_block={:.1} window_target_blocks={} admissions={} mru_ghost_hits={} mfu_ghost_hits={}",
        outcome.requests,
        outcome.demand_misses,
        outcome.prefetch_reads,
        replayer.policy().stats().demand_hit_prefetched,
        outcome.miss_ratio(),
        sizes.header_bytes as f64 / blocks as f64,
        sizes.mru_target_bytes / u64::from(block_bytes),
        replayer.policy().stats().admissions,
        replayer.policy().stats().mru_ghost_hits,
        replayer.policy().stats().mfu_ghost_hits,
    );
    Ok(())
}
