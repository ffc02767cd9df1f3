//! Replays a request trace (block ranges of one object, all blocks the same size) through the
//! policy and the stream detector exactly as the read path uses them: every request first
//! tells the detector, which may ask for blocks ahead; those not cached are read and inserted
//! with `Access::Prefetch`; then the demand read looks its block up and, on a miss, reads and
//! inserts it.
//!
//! The outcome counts *blocks read from disk* (demand misses plus prefetch reads), not only
//! demand misses: prefetch hides latency but reads the same blocks, so a policy compared
//! against others on a trace must be charged for them.

use crate::policy::{Access, ArcPolicy, BlockKey};
use crate::streams::{StreamConfig, StreamDetector};

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ReplayOutcome {
    pub requests: u64,
    pub demand_misses: u64,
    pub prefetch_reads: u64,
}

impl ReplayOutcome {
    /// Blocks read from disk per request.
    pub fn miss_ratio(&self) -> f64 {
        (self.demand_misses + self.prefetch_reads) as f64 / self.requests.max(1) as f64
    }
}

/// A trace replayer: a policy of `capacity_blocks` blocks of `block_bytes`, with prefetch on
/// or off.
pub struct Replayer {
    policy: ArcPolicy<()>,
    streams: Option<StreamDetector>,
    block_bytes: u32,
    outcome: ReplayOutcome,
}

fn key(blkid: u64) -> BlockKey {
    [blkid, 1]
}

impl Replayer {
    pub fn new(capacity_blocks: u64, block_bytes: u32, prefetch: Option<StreamConfig>) -> Self {
        Replayer {
            policy: ArcPolicy::new(capacity_blocks * u64::from(block_bytes)),
            streams: prefetch
                .map(|config| StreamDetector::new(config.within_cache(capacity_blocks))),
            block_bytes,
            outcome: ReplayOutcome::default(),
        }
    }

    /// One client request for `count` blocks from `first` (each block counts as a request in
    /// the outcome, as in a block trace).
    pub fn request(&mut self, first: u64, count: u64) {
        if let Some(streams) = &mut self.streams {
            for ahead in streams.observe_request(0, first, count) {
                if self.policy.get(&key(ahead), Access::Prefetch).is_none() {
                    self.outcome.prefetch_reads += 1;
                    self.policy
                        .insert(key(ahead), self.block_bytes, (), Access::Prefetch);
                }
            }
        }
        for blkid in first..first + count {
            self.outcome.requests += 1;
            if self.policy.get(&key(blkid), Access::Demand).is_none() {
                self.outcome.demand_misses += 1;
                self.policy
                    .insert(key(blkid), self.block_bytes, (), Access::Demand);
            }
        }
    }

    pub fn outcome(&self) -> ReplayOutcome {
        self.outcome
    }

    pub fn policy(&self) -> &ArcPolicy<()> {
        &self.policy
    }
}
