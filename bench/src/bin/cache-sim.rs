//! `cache-sim`: replays a block trace through cairn's cache policy (the ARC of cairn-arc, with
//! its sequential prefetch as the read path uses it) and prints what it read from disk.
//!
//! ```text
//! cache-sim --trace FILE --capacity BLOCKS [--block-bytes N] [--no-prefetch] [--l2-capacity BLOCKS]
//! ```
//!
//! With `--l2-capacity`, the real SSD tier (`cairn-l2arc`, on an in-memory device sized for that
//! many blocks of 512 bytes, segments of 64 KiB) sits below the RAM policy, as in a server: RAM
//! misses look it up (a verified read; a hit goes up to RAM and its copy is marked promoted),
//! blocks the RAM policy evicts are offered to it with their sketch frequency (`offer_with`:
//! the tier admits by value), the RAM policy's sketch grows with the blocks the tier holds (as
//! in the server, keeping its counts), and the writer is settled every 32 offers (the feed lags
//! a little, as it does in a server). It adds `l2_hits`, `l2_blocks`, `l2_ram_bytes_per_block`
//! (the tier's index), `l2_sketch_bytes_per_block` (what the RAM policy's sketch takes beyond
//! its own capacity's need, per block cached in the tier) and the tier's counters to the output.
//!
//! The trace is text, one request per line: its first block number and, optionally, how many
//! blocks it reads (default 1). With one block per line it is the format libCacheSim reads as
//! a plain-text trace; `bench/cache.py` expands multi-block requests into such a file for
//! libCacheSim, so both replay the same blocks in the same order. Prints one line of `key=value`
//! pairs: requests, demand_misses, prefetch_reads, miss_ratio (blocks read from disk per
//! request: demand misses plus read-ahead, since prefetch reads the blocks all the same),
//! header_bytes_per_block.

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use cairn_arc::StreamConfig;
use cairn_arc::replay::{Replayer, SecondTier};
use cairn_format::{BlockPointer, ChecksumAlgorithm, Dva, ObjectType};
use cairn_l2arc::{Admission, L2Arc, L2Config};
use std::io::{BufRead, BufReader};

fn main() -> Result<()> {
    let mut trace = None;
    let mut capacity_blocks = None;
    let mut block_bytes = 4096u32;
    let mut prefetch = true;
    let mut l2_capacity_blocks = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--trace" => trace = Some(value()?),
            "--capacity" => capacity_blocks = Some(value()?.parse::<u64>()?),
            "--block-bytes" => block_bytes = value()?.parse()?,
            "--no-prefetch" => prefetch = false,
            "--l2-capacity" => l2_capacity_blocks = Some(value()?.parse::<u64>()?),
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
    let l2 = match l2_capacity_blocks {
        Some(blocks) => {
            let tier = SsdTier::new(blocks)?;
            let l2 = tier.l2.clone();
            replayer = replayer.with_second_tier(Box::new(tier));
            Some(l2)
        }
        None => None,
    };
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
    let l2_fields = match &l2 {
        Some(l2) => {
            l2.settle();
            let (entries, ram_bytes) = l2.index_usage();
            let counters = l2.counters();
            let load = |counter: &std::sync::atomic::AtomicU64| {
                counter.load(std::sync::atomic::Ordering::Relaxed)
            };
            let ram_only_sketch =
                cairn_arc::ArcPolicy::<()>::new(replayer.policy().capacity_bytes())
                    .sizes()
                    .sketch_bytes;
            let sketch_extra = replayer
                .policy()
                .sizes()
                .sketch_bytes
                .saturating_sub(ram_only_sketch);
            format!(
                " l2_hits={} l2_blocks={entries} l2_ram_bytes_per_block={:.1} l2_sketch_bytes_per_block={:.1} l2_fed={} l2_dropped={} l2_refused={} l2_evicted_segments={} l2_copied_forward={} l2_promoted={}",
                outcome.second_tier_hits,
                ram_bytes as f64 / entries.max(1) as f64,
                sketch_extra as f64 / entries.max(1) as f64,
                load(&counters.feed_blocks),
                load(&counters.feed_dropped),
                load(&counters.feed_refused),
                load(&counters.evicted_segments),
                load(&counters.copied_forward),
                l2.promoted_blocks(),
            )
        }
        None => String::new(),
    };
    let sizes = replayer.policy().sizes();
    let blocks = (sizes.mru_blocks + sizes.mfu_blocks + sizes.ghost_blocks).max(1);
    println!(
        "requests={} demand_misses={} prefetch_reads={} prefetch_used={} miss_ratio={:.6} header_bytes_per_block={:.1} window_target_blocks={} admissions={} mru_ghost_hits={} mfu_ghost_hits={}{l2_fields}",
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

/// Bytes of a simulated block on the SSD tier (small, so a trace's tier stays small in RAM).
const SSD_BLOCK_BYTES: usize = 512;
/// Segment size of the simulated cache device.
const SSD_SEGMENT_BYTES: u64 = 64 << 10;
/// Offers between two waits for the writer.
const OFFERS_PER_SETTLE: u32 = 32;

/// The real SSD tier on an in-memory device, addressed by block number.
struct SsdTier {
    l2: std::sync::Arc<L2Arc>,
    offers_since_settle: u32,
}

impl SsdTier {
    fn new(capacity_blocks: u64) -> Result<SsdTier> {
        // Each segment holds a 4 KiB header, then blocks and their 24-byte summary entries.
        let per_segment = (SSD_SEGMENT_BYTES - 4096) / (SSD_BLOCK_BYTES as u64 + 24);
        let segments = capacity_blocks.div_ceil(per_segment).max(2);
        let device_bytes = (2 << 20) + segments * SSD_SEGMENT_BYTES;
        let config = L2Config {
            segment_bytes: SSD_SEGMENT_BYTES,
            write_chunk_bytes: 16 << 10,
            // Chunks are written when full or settled, never by a timer: runs repeat exactly.
            feed_linger_ms: 3_600_000,
            ..L2Config::default()
        };
        let l2 = std::sync::Arc::new(L2Arc::new(config));
        let device = std::sync::Arc::new(cairn_device::mem::MemDevice::new(device_bytes));
        l2.add_new("sim", device, 1, 1)
            .context("setting up the simulated cache device")?;
        Ok(SsdTier {
            l2,
            offers_since_settle: 0,
        })
    }

    fn block(blkid: u64) -> (BlockPointer, Bytes) {
        let mut data = vec![0u8; SSD_BLOCK_BYTES];
        data[..8].copy_from_slice(&blkid.to_le_bytes());
        let mut bp = BlockPointer::HOLE;
        bp.dvas[0] = Dva {
            vdev: 0,
            offset: blkid * SSD_BLOCK_BYTES as u64,
            asize: SSD_BLOCK_BYTES as u32,
        };
        bp.lsize = SSD_BLOCK_BYTES as u32;
        bp.psize = SSD_BLOCK_BYTES as u32;
        bp.birth_txg = 1;
        bp.object_type = ObjectType::VolumeData;
        bp.checksum_algorithm = ChecksumAlgorithm::Fletcher4;
        bp.checksum = ChecksumAlgorithm::Fletcher4.compute(&data);
        (bp, Bytes::from(data))
    }
}

impl SecondTier for SsdTier {
    fn read(&mut self, blkid: u64) -> bool {
        let (bp, data) = SsdTier::block(blkid);
        match self.l2.read_into_ram(&bp) {
            Some(read) => {
                assert_eq!(
                    read[..],
                    data[..],
                    "the SSD tier returned another block for {blkid}"
                );
                true
            }
            None => false,
        }
    }

    fn offer(&mut self, blkid: u64, frequency: u8, epoch: u64) {
        let (bp, data) = SsdTier::block(blkid);
        self.l2
            .offer_with(&bp, &data, Admission { frequency, epoch });
        self.offers_since_settle += 1;
        if self.offers_since_settle >= OFFERS_PER_SETTLE {
            self.l2.settle();
            self.offers_since_settle = 0;
        }
    }

    fn held_blocks(&self) -> u64 {
        self.l2.indexed_blocks()
    }
}
