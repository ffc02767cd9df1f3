//! How the read cache is configured: `ArcConfig` (budget, shards, read-ahead threads), the
//! `primarycache`/`secondarycache` modes (`CacheMode`, `CachePolicy`) and `LimitsError`.
//!
//! Invariant: plain values, no state; a default `ArcConfig` follows the machine's memory
//! (`pressure`'s defaults). How it fits: a leaf of `read` — `read_cache` is built from an
//! `ArcConfig`, `cached_io` applies a dataset's `CachePolicy`.

use crate::cache::{BlockClass, SHARDS_DEFAULT};
use crate::pressure;

/// Threads reading ahead for every pool of the process.
pub const PREFETCH_THREADS_DEFAULT: usize = 4;

/// What a dataset's reads leave in the cache (`primarycache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    All,
    Metadata,
    None,
}

impl CacheMode {
    pub(super) fn caches(self, class: BlockClass) -> bool {
        match self {
            CacheMode::All => true,
            CacheMode::Metadata => class == BlockClass::Metadata,
            CacheMode::None => false,
        }
    }
}

/// What a dataset's reads may leave in each cache tier: RAM (`primarycache`) and the pool's
/// cache devices (`secondarycache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    pub primary: CacheMode,
    pub secondary: CacheMode,
}

impl CachePolicy {
    /// Both tiers take everything (the properties' defaults).
    pub const ALL: CachePolicy = CachePolicy {
        primary: CacheMode::All,
        secondary: CacheMode::All,
    };
}

/// Sizes of the cache: `arc_max` and `arc_min` (see `pressure` for defaults from RAM).
#[derive(Debug, Clone, Copy)]
pub struct ArcConfig {
    pub max_bytes: u64,
    pub min_bytes: u64,
    pub shards: usize,
    pub prefetch_threads: usize,
}

impl ArcConfig {
    /// A cache of `max_bytes` (minimum as `pressure::default_arc_min_bytes`).
    pub fn with_max(max_bytes: u64) -> ArcConfig {
        ArcConfig {
            max_bytes,
            min_bytes: pressure::default_arc_min_bytes(max_bytes),
            shards: SHARDS_DEFAULT,
            prefetch_threads: PREFETCH_THREADS_DEFAULT,
        }
    }

    /// Sized for this machine: half its usable memory (RAM or the cgroup's limit).
    pub fn for_this_machine() -> ArcConfig {
        ArcConfig::with_max(pressure::default_arc_max_bytes(&pressure::read_memory()))
    }
}

/// Limits `ReadCache::set_limits` refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("arc_min ({min_bytes} bytes) must not exceed arc_max ({max_bytes} bytes)")]
    MinAboveMax { min_bytes: u64, max_bytes: u64 },
}
