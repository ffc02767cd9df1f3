//! `BlockCache`: the policy made concurrent for the read path, with data and metadata adapted
//! separately and the reads in flight tracked beside the cached blocks.
//!
//! Sharding. Blocks are spread over shards by key hash; each shard holds, under one lock, two
//! `ArcPolicy`s (metadata: indirect and dnode blocks, object-set roots; data: everything else)
//! and the table of reads in flight. A hit takes one shard's lock for a lookup and a list move
//! — never a global lock — and readers of different shards never meet. Looking a block up and
//! claiming its read happen under the same lock, so two readers of one block never both read
//! it: the second waits on the first's `Pending` (an "I/O hit").
//!
//! Data and metadata. A shard's share of the capacity is split by an adaptive metadata target
//! (ZFS 2.2's `arc_meta`): a ghost hit among metadata moves it up by the block's size, one among
//! data moves it down by a fifth of that (a metadata miss costs a chain of reads, so metadata is
//! favoured). The target only decides who gives way when the shard is full: the class over its
//! target is evicted first, and either class may use room the other leaves empty.
//!
//! Eviction. With a background evictor running (`run_evictor`, the read cache's
//! `cairn-arc-evict` thread), an insert may take a shard past its capacity by a small slack
//! (1/`EVICT_SLACK_DIVISOR` of it, at most `EVICT_SLACK_MAX_BYTES`) and only wakes the evictor,
//! which brings the shard back down in batches of at most `EVICT_BATCH_BYTES` per lock hold. A
//! reader evicts for itself only when the evictor has fallen a whole slack behind, and then
//! only its own block's worth, so no reader waits behind a long eviction. A capacity change
//! (memory pressure, `arc_max`) is evicted in the same batches by the thread that made it.
//! Buffers leave the shard's lock before they are freed (the policies defer their drops).
//! Without an evictor (a cache used alone, in tests and trace replays) the slack is 0 and
//! inserts evict down to the capacity themselves.
//!
//! The SSD tier. Evictions are recorded with their buffers, their admission sketch's frequency
//! and whether the block may go below (read on demand or used once read ahead, and not marked
//! otherwise when cached: written, or excluded by `secondarycache`; one flag bit kept on the
//! cached entry). After the shard's lock is released, the eligible ones are offered to their
//! pool's SSD tier, and each eviction is counted by what the tier made of it (`evict_l2_*`:
//! held or accepted, eligible but neither, ineligible; `release`). The data sketches count
//! for the blocks the SSD tiers hold beside the cache's own capacity, grown as the tiers fill
//! (`follow_second_tiers`).
//!
//! Memory. Blocks are kept as `Arc<[u8]>` (16 bytes in the entry, refcounts beside the data) and
//! handed out as `Bytes` that share the cached buffer — no copy; a block evicted while a reader
//! holds it lives until that reader drops it. A block read from a device is kept in the very
//! buffer the read filled (`ReadBuf`, exactly the block's length): no copy on the way in
//! either; only written blocks are copied (their bytes are slices of larger client buffers,
//! which a cached slice would pin). Each block is charged its length plus
//! `BLOCK_OVERHEAD_BYTES` (entry, index, sketch, refcounts, allocator slack), so the capacity is
//! one budget for buffers and headers.
//!
//! Files: `pending` (reads in flight), `snapshot` (summed counters), `shard` (one shard's
//! state and eviction), `block_cache` (`BlockCache`) and `tests`; this file holds the tunables
//! and `BlockClass`. Dependencies point one way: `pending` and `snapshot` use no sibling,
//! `shard` uses both, `block_cache` uses all three.

mod block_cache;
mod pending;
mod shard;
mod snapshot;
#[cfg(test)]
mod tests;

pub use block_cache::BlockCache;
pub use pending::{Lookup, Pending};
pub use snapshot::{CacheSnapshot, ClassSnapshot};

/// Shards a cache gets by default: enough that two cores (or sixteen) rarely contend on one.
pub const SHARDS_DEFAULT: usize = 16;
/// What a cached block costs beyond its data: the policy entry (48 B), its share of the index
/// (~6–11 B) and of the frequency sketch (~3.5–6 B), the buffer's refcounts (16 B) and the
/// allocator's chunk header (~16 B).
pub const BLOCK_OVERHEAD_BYTES: u32 = 96;
/// A data ghost hit moves the metadata target by 1/`META_BALANCE` of what a metadata one does.
const META_BALANCE: u64 = 5;
/// The metadata target stays within [capacity / `META_MIN_DIVISOR`, capacity * 3/4].
const META_MIN_DIVISOR: u64 = 32;
/// Initial metadata target: 1/`META_INITIAL_DIVISOR` of the capacity.
const META_INITIAL_DIVISOR: u64 = 4;

/// A shard may go this share of its capacity over it while the background evictor catches up.
const EVICT_SLACK_DIVISOR: u64 = 64;
/// ... but never more than this (a shard of a large cache).
const EVICT_SLACK_MAX_BYTES: u64 = 4 << 20;
/// The evictor's work per shard-lock hold: a batch of about 256 4 KiB blocks.
const EVICT_BATCH_BYTES: u64 = 1 << 20;
/// The sketch's unit: a slot counts for a block of up to 4 KiB (`policy`'s sketch sizing).
const SKETCH_SLOT_BYTES: u64 = 4096;

/// Which of a shard's two policies a block belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockClass {
    Data,
    Metadata,
}
