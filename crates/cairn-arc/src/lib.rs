//! # cairn-arc: the RAM tier of the hybrid storage pool
//!
//! The adaptive replacement cache (ARC) keeps verified blocks in memory, keyed by their physical
//! identity (first copy's address and birth txg): a key never names two different contents,
//! since a freed address comes back only with a newer birth txg, and a block shared by several
//! trees (snapshots, clones) is cached once. It sits between the object layer, which asks for
//! blocks by pointer, and the pipeline, which reads and verifies them.
//!
//! - `policy`: the replacement policy — recency and frequency lists with ghosts and an adaptive
//!   target, prefetch-aware and scan-resistant, pins — single-threaded and deterministic.
//! - `streams`: sequential-stream detection that decides what to read ahead.
//! - `replay`: runs a request trace through both, as the read path would (for `bench/cache`
//!   and the tests).
//! - `cache`: the policy made concurrent (sharded, no global lock on a hit), data and metadata
//!   adapted separately, reads in flight tracked beside the blocks.
//! - `read`: the read path — `ReadCache` (the process's one cache: budget, read-ahead threads,
//!   arcstat counters) and `CachedIo` (a pool's door to it), between objects and the pipeline.
//! - `pressure`: the kernel's memory signals and the controller that moves the cache's target.
//!
//! The SSD tier (`cairn-l2arc`, the pool's cache devices) sits below: `CachedIo` looks there on
//! a miss before the pool, and offers it the blocks demand reads had to take from the pool.

pub mod cache;
pub mod policy;
pub mod pressure;
pub mod read;
pub mod replay;
mod sketch;
mod slab;
pub mod streams;

pub use cache::BlockClass;
pub use policy::{Access, ArcPolicy, BlockKey, PolicySizes, PolicyStats};
pub use read::{ArcConfig, ArcStats, CacheMode, CachePolicy, CachedIo, LimitsError, ReadCache};
pub use streams::{StreamConfig, StreamDetector};

/// The cache key of a block whose first copy is at (`vdev`, `offset`) and which was born in
/// `birth_txg`: vdev in the top 16 bits and the byte offset (< 2^48) below it, then the txg.
pub fn block_key(vdev: u32, offset: u64, birth_txg: u64) -> BlockKey {
    assert!(vdev < 1 << 16, "vdev id {vdev} beyond the key's 16 bits");
    assert!(offset < 1 << 48, "offset {offset} beyond the key's 48 bits");
    [(u64::from(vdev) << 48) | offset, birth_txg]
}
