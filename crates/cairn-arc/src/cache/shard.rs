//! One shard of the cache: `ShardState` (two `ArcPolicy`s, data and metadata, the adaptive
//! metadata target, the reads in flight), the eviction it does under its lock, and `Shard`.
//!
//! Invariants: a shard's live bytes stay within its capacity plus `slack_bytes` (0 without a
//! background evictor); the metadata target stays within [capacity / `META_MIN_DIVISOR`,
//! capacity * 3/4]; evicted buffers are collected in `Dropped` and freed only after the lock is
//! released. How it fits: uses `pending` (the in-flight table) and `snapshot::ghost_hits`;
//! `block_cache` hashes keys to shards and locks one at a time.

use super::pending::Pending;
use super::snapshot::ghost_hits;
use super::{
    BLOCK_OVERHEAD_BYTES, BlockClass, EVICT_BATCH_BYTES, EVICT_SLACK_DIVISOR,
    EVICT_SLACK_MAX_BYTES, META_BALANCE, META_INITIAL_DIVISOR, META_MIN_DIVISOR,
};
use crate::policy::{Access, ArcPolicy, BlockKey, Eviction};
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// A cached buffer handed out as `Bytes` without copying.
struct Shared(Arc<[u8]>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

pub(super) fn to_bytes(buf: &Arc<[u8]>) -> Bytes {
    Bytes::from_owner(Shared(buf.clone()))
}

fn charge(len: usize) -> u32 {
    u32::try_from(len)
        .ok()
        .and_then(|len| len.checked_add(BLOCK_OVERHEAD_BYTES))
        .expect("blocks are smaller than 4 GiB")
}

pub(super) struct ShardState {
    pub(super) data: ArcPolicy<Arc<[u8]>>,
    pub(super) meta: ArcPolicy<Arc<[u8]>>,
    pub(super) capacity_bytes: u64,
    pub(super) meta_target_bytes: u64,
    pub(super) inflight: HashMap<BlockKey, Arc<Pending>>,
    /// How far inserts may take the shard past its capacity (0 without a background evictor).
    pub(super) slack_bytes: u64,
    /// Bytes inserts had to evict themselves.
    pub(super) inline_evicted_bytes: u64,
}

/// Buffers evicted under a shard's lock, freed after it is released, and the evictions (counted
/// by their SSD-tier state after the lock is released).
pub(super) struct Dropped {
    pub(super) buffers: Vec<Arc<[u8]>>,
    pub(super) evictions: Vec<Eviction<Arc<[u8]>>>,
}

pub(super) fn slack_for(capacity_bytes: u64) -> u64 {
    (capacity_bytes / EVICT_SLACK_DIVISOR).min(EVICT_SLACK_MAX_BYTES)
}

impl ShardState {
    pub(super) fn new(capacity_bytes: u64) -> ShardState {
        let mut state = ShardState {
            data: ArcPolicy::new(capacity_bytes),
            // Metadata is a small share of most caches (its target starts at a quarter):
            // counters for a quarter of the capacity keep its sketch accurate at a quarter
            // of the cost.
            meta: ArcPolicy::with_sketch_for(capacity_bytes, capacity_bytes / META_INITIAL_DIVISOR),
            capacity_bytes,
            meta_target_bytes: capacity_bytes / META_INITIAL_DIVISOR,
            inflight: HashMap::new(),
            slack_bytes: 0,
            inline_evicted_bytes: 0,
        };
        state.data.defer_drops();
        state.meta.defer_drops();
        state.data.record_evictions();
        state.meta.record_evictions();
        state
    }

    /// What the policies evicted since the last call, to be dropped outside the lock.
    pub(super) fn take_dropped(&mut self) -> Dropped {
        let mut buffers = self.data.take_dropped();
        buffers.append(&mut self.meta.take_dropped());
        let mut evictions = self.data.take_evictions();
        evictions.append(&mut self.meta.take_evictions());
        Dropped { buffers, evictions }
    }

    pub(super) fn evicted_bytes(&self) -> u64 {
        self.data.stats().evicted_bytes + self.meta.stats().evicted_bytes
    }

    pub(super) fn over_capacity(&self) -> bool {
        self.live_bytes() > self.capacity_bytes
    }

    pub(super) fn policy(&mut self, class: BlockClass) -> &mut ArcPolicy<Arc<[u8]>> {
        match class {
            BlockClass::Data => &mut self.data,
            BlockClass::Metadata => &mut self.meta,
        }
    }

    pub(super) fn live_bytes(&self) -> u64 {
        self.data.live_bytes() + self.meta.live_bytes()
    }

    /// Makes room for `incoming_bytes` of `class` within `limit_bytes`: the other class gives
    /// back what it holds beyond its target first, then `class` may use everything the other
    /// does not hold.
    fn make_room(&mut self, class: BlockClass, incoming_bytes: u64, limit_bytes: u64) {
        let meta_target = self.meta_target_bytes;
        let (this, other, other_target) = match class {
            BlockClass::Data => (&mut self.data, &mut self.meta, meta_target),
            BlockClass::Metadata => (
                &mut self.meta,
                &mut self.data,
                self.capacity_bytes.saturating_sub(meta_target),
            ),
        };
        let total = this.live_bytes() + other.live_bytes() + incoming_bytes;
        if total > limit_bytes && other.live_bytes() > other_target {
            let excess = (total - limit_bytes).min(other.live_bytes() - other_target);
            other.set_capacity(other.live_bytes() - excess);
        }
        this.set_capacity(limit_bytes.saturating_sub(other.live_bytes()));
    }

    /// Evicts until both classes fit in `limit_bytes`, the one over its target first.
    fn fit_to(&mut self, limit_bytes: u64) {
        if self.meta.live_bytes() > self.meta_target_bytes {
            self.make_room(BlockClass::Data, 0, limit_bytes);
            self.make_room(BlockClass::Metadata, 0, limit_bytes);
        } else {
            self.make_room(BlockClass::Metadata, 0, limit_bytes);
            self.make_room(BlockClass::Data, 0, limit_bytes);
        }
    }

    /// One batch of the evictor's work: at most `EVICT_BATCH_BYTES` towards the capacity.
    pub(super) fn evict_batch(&mut self) {
        let live = self.live_bytes();
        self.fit_to(
            self.capacity_bytes
                .max(live.saturating_sub(EVICT_BATCH_BYTES)),
        );
    }

    /// Caches a block; returns whether the shard is now over its capacity (the evictor's
    /// turn). Within the slack, nothing is evicted here; past it (the evictor is behind, or
    /// the capacity just dropped below what is held), only this block's worth.
    pub(super) fn insert(
        &mut self,
        key: BlockKey,
        class: BlockClass,
        data: Arc<[u8]>,
        access: Access,
        tier_eligible: bool,
    ) -> bool {
        let size = charge(data.len());
        let limit = if self.slack_bytes == 0 {
            self.capacity_bytes
        } else {
            (self.capacity_bytes + self.slack_bytes).max(self.live_bytes())
        };
        let evicted_before = self.evicted_bytes();
        self.make_room(class, u64::from(size), limit);
        let policy = self.policy(class);
        let ghost_hits_before = ghost_hits(&policy.stats());
        policy.insert_for_tier(key, size, data, access, tier_eligible);
        if ghost_hits(&policy.stats()) > ghost_hits_before {
            self.adapt(class, u64::from(size));
        }
        self.inline_evicted_bytes += self.evicted_bytes() - evicted_before;
        self.over_capacity()
    }

    /// A ghost hit in `class`: had it held more, the block would have been a hit.
    fn adapt(&mut self, class: BlockClass, size_bytes: u64) {
        let (low, high) = (
            self.capacity_bytes / META_MIN_DIVISOR,
            self.capacity_bytes / 4 * 3,
        );
        self.meta_target_bytes = match class {
            BlockClass::Metadata => self.meta_target_bytes + size_bytes,
            BlockClass::Data => self
                .meta_target_bytes
                .saturating_sub(size_bytes / META_BALANCE),
        }
        .clamp(low, high);
    }

    /// A new capacity; the caller evicts down to it (`BlockCache::evict_pass`).
    pub(super) fn set_capacity(&mut self, capacity_bytes: u64) {
        let old = self.capacity_bytes.max(1);
        self.meta_target_bytes = (u128::from(self.meta_target_bytes) * u128::from(capacity_bytes)
            / u128::from(old)) as u64;
        self.capacity_bytes = capacity_bytes;
        if self.slack_bytes > 0 {
            self.slack_bytes = slack_for(capacity_bytes).max(1);
        }
    }
}

/// One shard, alone on its cache lines (a lock bouncing between cores should not drag its
/// neighbour's with it).
#[repr(align(128))]
pub(super) struct Shard(pub(super) Mutex<ShardState>);
