//! The read path through the ARC: `ReadCache` is the process's one RAM cache (every pool's
//! blocks, one budget, like ZFS's ARC), `CachedIo` a pool's door to it.
//!
//! A demand read looks its block up by physical identity (pool, first copy, birth txg): a hit
//! hands out the cached buffer; a block another reader is already reading is waited for (an
//! "I/O hit"), and if that reader is read-ahead, its queued I/O is raised to sync-read priority
//! first, so a demand read never waits behind read-ahead (ZFS's prefetch priority inversion);
//! otherwise the reader claims the block, reads and verifies it through the pipeline, caches it
//! and wakes whoever waited.
//!
//! Read-ahead (`CachedIo::prefetch`) claims the blocks not cached or in flight and hands them to
//! a few prefetch threads that read them at read-ahead priority and cache them flagged as
//! prefetched (they count as used only once a demand read hits them). A prefetch thread takes
//! up to `PREFETCH_BATCH_MAX` queued blocks at once and queues all their reads before waiting
//! for the first: the device then has them all in flight and its queue merges neighbours into
//! one call (one block at a time per thread kept four reads in flight, and a sequential file
//! read from a pool on flash used a fraction of what the device delivers).
//!
//! The SSD tier (a pool's cache devices, `cairn_l2arc`) sits below: an ARC miss asks it before
//! the pool (a hit into RAM marks the tier's copy a duplicate), and it is fed as the ARC evicts
//! (`cache`: a victim cache; blocks RAM does not keep are offered as they are read), each block
//! with its admission sketch's frequency, which the tier admits by. The data sketches count
//! for the tiers below too (`ReadCache::follow_second_tiers`): the tier's admission needs
//! frequencies of blocks RAM no longer holds. They grow, keeping their counts, with the blocks
//! the tiers hold (indexed; checked by the maintenance thread each second), so the tiers pay
//! 3.6–4 B of sketch per block they hold, at any fill, beside their index; it is not charged
//! to `arc_max` (known gap).
//!
//! `primarycache` decides what a dataset's reads leave behind: `all`, `metadata` (data blocks
//! are read, returned and dropped) or `none`. A block already cached is a hit whatever the
//! setting (another dataset sharing it may cache it). `secondarycache` decides the same for
//! the pool's cache devices (`cairn-l2arc`): whether a miss looks there and whether a block
//! RAM lets go is offered to them. Each cached block remembers whether the tier may have it
//! (`complete_for_tier`, `insert_for_tier`: not if written rather than read, nor if its
//! dataset's `secondarycache` excludes it), so its eviction is offered, and counted, as the
//! tier sees it (`evict_l2_cached`: held or accepted; `_eligible`: offered but neither held nor
//! accepted; `_ineligible`).
//!
//! Budget: the cache's target size `c` lies in [`arc_min`, `arc_max`]; every block is charged
//! its bytes plus its headers (`cache::BLOCK_OVERHEAD_BYTES`). Readers may take the cache a
//! small slack past `c`; the `cairn-arc-evict` thread brings it back in batches (see `cache`).
//! The maintenance thread
//! (`start_maintenance`) reads the kernel's memory signals about once a second and moves `c` in
//! bounded steps: down when memory is short, back up (after a hold-off) when it is plentiful
//! and the cache is full. After a shrink it hands freed heap back to the kernel
//! (`malloc_trim`), so what the cache gives up shows up as free memory at once. The heap a
//! burst of writes freed (a synced txg's dirty buffers, `note_heap_freed`) is handed back once
//! writing pauses, but only what the cache has no room for: memory the process holds already
//! is what the cache fills into and the next burst writes into, and fresh memory costs a page
//! fault and a zeroed page per 4 KiB (a fresh server wrote 1 MiB sequential writes at ~1,000
//! MiB/s against ~1,550 with its heap warm). Resident memory still stays within the cache's
//! target plus what the rest of the budget allows.
//!
//! Keys carry a per-process pool tag (16 bits above the birth txg), so two pools' blocks never
//! share a key; a pool leaving the process (`CachedIo` dropped) takes its blocks with it.
//!
//! Files: `config` (configuration and cache modes), `stats` (arcstat counters), `heap` (the
//! allocator's free heap), `read_cache` (`ReadCache`, its maintenance and prefetch threads),
//! `cached_io` (`CachedIo`) and `tests`. Dependencies point one way: `config`, `stats` and
//! `heap` use no sibling, `read_cache` uses those three, `cached_io` uses `read_cache` and
//! `config`.

mod cached_io;
mod config;
mod heap;
mod read_cache;
mod stats;
#[cfg(test)]
mod tests;

pub use cached_io::CachedIo;
pub use config::{ArcConfig, CacheMode, CachePolicy, LimitsError, PREFETCH_THREADS_DEFAULT};
pub use heap::{free_heap_bytes, keeps_freed_heap, release_free_heap};
pub use read_cache::ReadCache;
pub use stats::ArcStats;
