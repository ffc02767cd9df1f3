//! Replays a request trace (block ranges of one object, all blocks the same size) through the
//! policy and the stream detector exactly as the read path uses them: every request first
//! tells the detector, which may ask for blocks ahead; those not cached are read and inserted
//! with `Access::Prefetch`; then the demand read looks its block up and, on a miss, reads and
//! inserts it.
//!
//! The outcome counts *blocks read from disk* (demand misses plus prefetch reads), not only
//! demand misses: prefetch hides latency but reads the same blocks, so a policy compared
//! against others on a trace must be charged for them.
//!
//! With a second tier (`SecondTier`: the SSD cache, as `bench/cache` drives it), a block the
//! RAM policy misses is looked up there first and counts as read from disk only if it misses
//! there too; a block it serves goes up to RAM (the second tier then counts its copy as a
//! duplicate, the first space it takes back). Blocks are offered to it as the RAM policy evicts
//! them (a victim cache: what RAM holds is not duplicated below while it is hot there), with
//! the admission sketch's frequency and epoch so the tier can admit by value; blocks read on
//! demand only: read-ahead that no demand read used is not eligible (the read path's rule).

use crate::policy::{Access, ArcPolicy, BlockKey, SKETCH_GROW_MIN_SLOTS};
use crate::streams::{StreamConfig, StreamDetector};

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ReplayOutcome {
    pub requests: u64,
    pub demand_misses: u64,
    pub prefetch_reads: u64,
    /// Blocks the RAM policy missed and the second tier served (demand and read-ahead).
    pub second_tier_hits: u64,
}

/// A cache below the RAM policy, by block number.
pub trait SecondTier {
    /// Whether it holds `blkid` (a hit is served from it, not from disk, and goes up to RAM).
    fn read(&mut self, blkid: u64) -> bool;
    /// The RAM policy let `blkid` go (a block a demand read used), read `frequency` times
    /// lately by its sketch at sketch epoch `epoch`.
    fn offer(&mut self, blkid: u64, frequency: u8, epoch: u64);
    /// Blocks it holds now (the RAM policy's sketch grows to count for them).
    fn held_blocks(&self) -> u64;
}

/// Requests between two looks at what the second tier holds (the server's maintenance thread
/// looks once a second).
const SECOND_TIER_CHECK_REQUESTS: u64 = 4096;

impl ReplayOutcome {
    /// Blocks read from disk per request.
    pub fn miss_ratio(&self) -> f64 {
        (self.demand_misses + self.prefetch_reads) as f64 / self.requests.max(1) as f64
    }
}

/// A trace replayer: a policy of `capacity_blocks` blocks of `block_bytes`, with prefetch on
/// or off.
/// What the replayer keeps per cached block: its number, and whether a demand read brought or
/// used it (eligible for the second tier).
type Cached = (u64, bool);

pub struct Replayer {
    policy: ArcPolicy<Cached>,
    streams: Option<StreamDetector>,
    block_bytes: u32,
    outcome: ReplayOutcome,
    second: Option<Box<dyn SecondTier>>,
    /// Blocks read ahead that a demand read then used, while cached.
    used_read_ahead: std::collections::HashSet<u64>,
    /// Blocks the second tier held when the sketch was last grown for it.
    second_sized_blocks: u64,
}

fn key(blkid: u64) -> BlockKey {
    [blkid, 1]
}

impl Replayer {
    pub fn new(capacity_blocks: u64, block_bytes: u32, prefetch: Option<StreamConfig>) -> Self {
        let mut policy = ArcPolicy::new(capacity_blocks * u64::from(block_bytes));
        policy.defer_drops();
        Replayer {
            policy,
            streams: prefetch
                .map(|config| StreamDetector::new(config.within_cache(capacity_blocks))),
            block_bytes,
            outcome: ReplayOutcome::default(),
            second: None,
            used_read_ahead: std::collections::HashSet::new(),
            second_sized_blocks: 0,
        }
    }

    /// The same replayer with `second` below the RAM policy; the admission sketch then counts
    /// over both tiers' blocks, as it must to tell which evicted blocks are worth the second
    /// tier: it grows with the blocks the second tier holds, as the server's does
    /// (`BlockCache::follow_second_tiers`: a tenth more than it was sized for, at least
    /// `SKETCH_GROW_MIN_SLOTS`), looked at every `SECOND_TIER_CHECK_REQUESTS` requests.
    pub fn with_second_tier(mut self, second: Box<dyn SecondTier>) -> Self {
        self.second = Some(second);
        self
    }

    /// Grows the sketch for what the second tier holds now, when it outgrew what it was sized
    /// for.
    fn follow_second_tier(&mut self) {
        let Some(second) = &self.second else {
            return;
        };
        let held = second.held_blocks();
        if crate::policy::sketch_outgrown(held, self.second_sized_blocks, SKETCH_GROW_MIN_SLOTS) {
            self.second_sized_blocks = held;
            // One 4 KiB slot per block held below, whatever the block size (as the server).
            self.policy
                .grow_sketch(self.policy.capacity_bytes() + held * 4096);
        }
    }

    /// Offers what the RAM policy evicted to the second tier: blocks read on demand, with how
    /// often they were asked for lately (the tier decides what is worth admitting).
    fn feed_evicted(&mut self) {
        let evicted = self.policy.take_dropped();
        let Some(second) = self.second.as_mut() else {
            return;
        };
        for (blkid, demand) in evicted {
            let eligible = self.used_read_ahead.remove(&blkid) || demand;
            if eligible {
                let frequency = self.policy.frequency(&key(blkid));
                second.offer(blkid, frequency, self.policy.frequency_epoch());
            }
        }
    }

    /// Whether the second tier serves `blkid` (counted).
    fn second_tier_hit(&mut self, blkid: u64) -> bool {
        let hit = self
            .second
            .as_mut()
            .is_some_and(|second| second.read(blkid));
        if hit {
            self.outcome.second_tier_hits += 1;
        }
        hit
    }

    /// One client request for `count` blocks from `first` (each block counts as a request in
    /// the outcome, as in a block trace).
    pub fn request(&mut self, first: u64, count: u64) {
        if let Some(streams) = &mut self.streams {
            for ahead in streams.observe_request(0, first, count) {
                if self.policy.get(&key(ahead), Access::Prefetch).is_none() {
                    if !self.second_tier_hit(ahead) {
                        self.outcome.prefetch_reads += 1;
                    }
                    self.policy.insert(
                        key(ahead),
                        self.block_bytes,
                        (ahead, false),
                        Access::Prefetch,
                    );
                    self.feed_evicted();
                }
            }
        }
        for blkid in first..first + count {
            self.outcome.requests += 1;
            if self
                .outcome
                .requests
                .is_multiple_of(SECOND_TIER_CHECK_REQUESTS)
            {
                self.follow_second_tier();
            }
            match self.policy.get(&key(blkid), Access::Demand).copied() {
                Some((_, true)) => {}
                Some((_, false)) => {
                    // Read ahead, now used on demand: eligible from here on.
                    self.used_read_ahead.insert(blkid);
                }
                None => {
                    if !self.second_tier_hit(blkid) {
                        self.outcome.demand_misses += 1;
                    }
                    self.policy
                        .insert(key(blkid), self.block_bytes, (blkid, true), Access::Demand);
                    self.feed_evicted();
                }
            }
        }
    }

    pub fn outcome(&self) -> ReplayOutcome {
        self.outcome
    }

    pub fn policy(&self) -> &ArcPolicy<Cached> {
        &self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A second tier that keeps everything offered.
    struct Unbounded(HashSet<u64>);

    impl SecondTier for Unbounded {
        fn read(&mut self, blkid: u64) -> bool {
            self.0.contains(&blkid)
        }

        fn offer(&mut self, blkid: u64, frequency: u8, _epoch: u64) {
            if frequency >= 2 {
                self.0.insert(blkid);
            }
        }

        fn held_blocks(&self) -> u64 {
            self.0.len() as u64
        }
    }

    /// A second tier that never holds anything (the RAM policy alone, sized the same way).
    struct Empty;

    impl SecondTier for Empty {
        fn read(&mut self, _blkid: u64) -> bool {
            false
        }

        fn offer(&mut self, _blkid: u64, _frequency: u8, _epoch: u64) {}

        fn held_blocks(&self) -> u64 {
            0
        }
    }

    #[test]
    fn a_second_tier_serves_what_ram_evicted() {
        let mut alone = Replayer::new(10, 4096, None).with_second_tier(Box::new(Empty));
        let mut tiered =
            Replayer::new(10, 4096, None).with_second_tier(Box::new(Unbounded(HashSet::new())));
        for _ in 0..4 {
            for blkid in 0..100 {
                alone.request(blkid, 1);
                tiered.request(blkid, 1);
            }
        }
        // The RAM policy behaves the same either way (a block from the second tier enters RAM
        // as one from disk does): each of its misses is served by one tier or the other.
        let ram_misses = alone.outcome().demand_misses;
        assert!(
            ram_misses > 300,
            "a 10-block cache kept most of a 100-block loop"
        );
        let tiered = tiered.outcome();
        assert_eq!(tiered.second_tier_hits + tiered.demand_misses, ram_misses);
        // Blocks go below once the sketch saw them twice: the later passes come from there.
        assert!(
            tiered.demand_misses >= 100,
            "a first read came from nowhere"
        );
        assert!(
            tiered.second_tier_hits >= 100,
            "the last pass did not come from the second tier: {tiered:?}"
        );
    }
}
