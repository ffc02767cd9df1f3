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

use crate::cache::{BlockCache, BlockClass, CacheSnapshot, Lookup, SHARDS_DEFAULT};
use crate::policy::{Access, BlockKey};
use crate::pressure::{self, Decision, PressureConfig, PressureController};
use bytes::Bytes;
use cairn_device::ReadBuf;
use cairn_device::queue::IoClass;
use cairn_format::{BlockPointer, Compression};
use cairn_l2arc::L2Arc;
use cairn_pipeline::{BlockIo, PipelineError};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Threads reading ahead for every pool of the process.
pub const PREFETCH_THREADS_DEFAULT: usize = 4;
/// Read-ahead blocks one prefetch thread reads at once (their reads queued together).
const PREFETCH_BATCH_MAX: usize = 32;
/// Read-ahead blocks waiting for a prefetch thread; beyond this, read-ahead is dropped (it is
/// a hint: a reader that needs the block reads it).
const PREFETCH_QUEUE_MAX: usize = 4096;
/// Evictions worth 1/this of the target since the last heap trim call for another.
const HEAP_TRIM_EVICTED_DIVISOR: u64 = 16;
/// How often the maintenance thread looks at memory.
const MAINTENANCE_INTERVAL_MS: u64 = 1000;
/// A large free (`ReadCache::note_heap_freed`) is handed back to the kernel once no other has
/// come for this long (and the cache has no room for it, `keeps_freed_heap`): a steady writer
/// reuses the freed pages for the next txg instead of faulting in (and the kernel zeroing)
/// fresh ones every txg.
const HEAP_TRIM_QUIET_MS: u64 = 2 * MAINTENANCE_INTERVAL_MS;
/// `Shared::heap_freed_at_ms` when no large free waits for a trim.
const NO_FREE_PENDING: u64 = u64::MAX;

/// What a dataset's reads leave in the cache (`primarycache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    All,
    Metadata,
    None,
}

impl CacheMode {
    pub fn from_property(value: &str) -> CacheMode {
        match value {
            "metadata" => CacheMode::Metadata,
            "none" => CacheMode::None,
            _ => CacheMode::All,
        }
    }

    fn caches(self, class: BlockClass) -> bool {
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

/// One hit/miss counter per (demand | prefetch) x (data | metadata).
#[derive(Default)]
struct ClassCounters {
    hits: AtomicU64,
    /// Found in flight (another reader's I/O).
    iohits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Default)]
struct Counters {
    /// [demand data, demand metadata, prefetch data, prefetch metadata]
    classes: [ClassCounters; 4],
    /// Demand reads that raised a read-ahead I/O's priority.
    promotions: AtomicU64,
    /// Read-ahead dropped because the prefetch queue was full.
    prefetch_dropped: AtomicU64,
    /// Blocks cached as they were written (metadata at txg sync).
    written_inserts: AtomicU64,
    /// Blocks read but not cached (primarycache).
    uncached_reads: AtomicU64,
    shrinks: AtomicU64,
    grows: AtomicU64,
}

fn class_index(access: Access, class: BlockClass) -> usize {
    match (access, class) {
        (Access::Demand, BlockClass::Data) => 0,
        (Access::Demand, BlockClass::Metadata) => 1,
        (Access::Prefetch, BlockClass::Data) => 2,
        (Access::Prefetch, BlockClass::Metadata) => 3,
    }
}

/// Everything `cairn stat arc` shows, at one instant.
#[derive(Debug, Clone, Default)]
pub struct ArcStats {
    /// (name, value) in display order; names follow ZFS's arcstats where one exists.
    pub fields: Vec<(&'static str, u64)>,
}

impl ArcStats {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.fields
            .iter()
            .find(|(field, _)| *field == name)
            .map(|&(_, value)| value)
    }
}

struct Limits {
    min_bytes: u64,
    max_bytes: u64,
}

struct Shared {
    blocks: BlockCache,
    counters: Counters,
    limits: Mutex<Limits>,
    target_bytes: AtomicU64,
    pressure: Mutex<PressureController>,
    memory_available_bytes: AtomicU64,
    /// Time of the last maintenance step (ms since the thread started).
    last_tick_ms: AtomicU64,
    /// Bytes evicted as of the last `release_free_heap`.
    evicted_at_last_trim: AtomicU64,
    /// Maintenance time of the latest large free not yet trimmed, or `NO_FREE_PENDING`.
    heap_freed_at_ms: AtomicU64,
    heap_trims: AtomicU64,
    /// Quiet points after a large free where the free heap fit in the cache's room and was
    /// kept.
    heap_kept: AtomicU64,
}

/// Work for the prefetch threads.
enum Job {
    /// Read one block ahead.
    Block(PrefetchJob),
    /// Anything else read-ahead needs done off the reader's thread (finding the pointers of
    /// the blocks to read ahead, which may read indirect blocks).
    Task(Box<dyn FnOnce() + Send>),
}

struct PrefetchJob {
    io: Arc<BlockIo>,
    /// The pool's cache devices, read before the pool when the block may be there.
    l2: Option<Arc<L2Arc>>,
    bp: BlockPointer,
    key: BlockKey,
    class: BlockClass,
    policy: CachePolicy,
    pending: Arc<crate::cache::Pending>,
}

/// The maintenance thread and its stop flag.
type Maintenance = (Arc<(Mutex<bool>, Condvar)>, JoinHandle<()>);

/// Limits `ReadCache::set_limits` refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitsError {
    #[error("arc_min ({min_bytes} bytes) must not exceed arc_max ({max_bytes} bytes)")]
    MinAboveMax { min_bytes: u64, max_bytes: u64 },
}

pub struct ReadCache {
    shared: Arc<Shared>,
    prefetch_tx: Option<Sender<Job>>,
    prefetch_threads: Vec<JoinHandle<()>>,
    evictor_thread: Option<JoinHandle<()>>,
    maintenance: Mutex<Option<Maintenance>>,
    next_pool_tag: AtomicU16,
}

impl ReadCache {
    pub fn new(config: ArcConfig) -> Arc<ReadCache> {
        assert!(
            config.min_bytes <= config.max_bytes,
            "arc_min above arc_max"
        );
        let shared = Arc::new(Shared {
            blocks: BlockCache::new(config.max_bytes, config.shards),
            counters: Counters::default(),
            limits: Mutex::new(Limits {
                min_bytes: config.min_bytes,
                max_bytes: config.max_bytes,
            }),
            target_bytes: AtomicU64::new(config.max_bytes),
            pressure: Mutex::new(PressureController::new(
                PressureConfig::default(),
                config.min_bytes,
                config.max_bytes,
            )),
            memory_available_bytes: AtomicU64::new(0),
            last_tick_ms: AtomicU64::new(0),
            evicted_at_last_trim: AtomicU64::new(0),
            heap_freed_at_ms: AtomicU64::new(NO_FREE_PENDING),
            heap_trims: AtomicU64::new(0),
            heap_kept: AtomicU64::new(0),
        });
        let (tx, rx) = crossbeam_channel::bounded::<Job>(PREFETCH_QUEUE_MAX);
        let prefetch_threads = (0..config.prefetch_threads)
            .map(|n| {
                let (shared, rx) = (shared.clone(), rx.clone());
                std::thread::Builder::new()
                    .name(format!("cairn-prefetch-{n}"))
                    .spawn(move || prefetch_worker(&shared, &rx))
                    .expect("spawning a prefetch thread")
            })
            .collect();
        let evictor = shared.clone();
        let evictor_thread = std::thread::Builder::new()
            .name("cairn-arc-evict".into())
            .spawn(move || evictor.blocks.run_evictor())
            .expect("spawning the ARC evictor thread");
        Arc::new(ReadCache {
            shared,
            prefetch_tx: Some(tx),
            prefetch_threads,
            evictor_thread: Some(evictor_thread),
            maintenance: Mutex::new(None),
            next_pool_tag: AtomicU16::new(1),
        })
    }

    /// Someone freed a large amount of heap (a synced txg's dirty buffers): with the
    /// maintenance thread running, the pages go back to the kernel once such frees pause for
    /// `HEAP_TRIM_QUIET_MS` (a writer that keeps going reuses them), unless the cache has room
    /// for all the free heap (`keeps_freed_heap`: it will fill into it); without it, at once.
    pub fn note_heap_freed(&self) {
        if self.maintenance.lock().is_some() {
            let now_ms = self.shared.last_tick_ms.load(Ordering::Relaxed);
            self.shared
                .heap_freed_at_ms
                .store(now_ms, Ordering::Relaxed);
        } else {
            self.shared.trim_heap();
        }
    }

    /// Starts the thread that follows memory pressure (a server does; tools need not).
    pub fn start_maintenance(self: &Arc<Self>) {
        let mut slot = self.maintenance.lock();
        if slot.is_some() {
            return;
        }
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let (shared, stop_seen) = (self.shared.clone(), stop.clone());
        let handle = std::thread::Builder::new()
            .name("cairn-arc-maint".into())
            .spawn(move || {
                let started = Instant::now();
                let (lock, wake) = &*stop_seen;
                let mut stopped = lock.lock();
                while !*stopped {
                    wake.wait_for(&mut stopped, Duration::from_millis(MAINTENANCE_INTERVAL_MS));
                    if *stopped {
                        break;
                    }
                    let now_ms = started.elapsed().as_millis() as u64;
                    shared.maintain(now_ms, &pressure::read_memory());
                }
            })
            .expect("spawning the ARC maintenance thread");
        *slot = Some((stop, handle));
    }

    /// A tag for a pool joining the process (see `CachedIo`).
    fn claim_pool_tag(&self) -> u16 {
        let tag = self.next_pool_tag.fetch_add(1, Ordering::Relaxed);
        assert!(tag != 0, "more than 65535 pool imports in one process");
        tag
    }

    /// Sets `arc_max` and `arc_min`; the target follows at once (evicting if it must).
    pub fn set_limits(&self, min_bytes: u64, max_bytes: u64) -> Result<(), LimitsError> {
        if min_bytes > max_bytes {
            return Err(LimitsError::MinAboveMax {
                min_bytes,
                max_bytes,
            });
        }
        let old_max_bytes = std::mem::replace(
            &mut *self.shared.limits.lock(),
            Limits {
                min_bytes,
                max_bytes,
            },
        )
        .max_bytes;
        if old_max_bytes != max_bytes {
            self.shared.blocks.resize_sketches(max_bytes);
        }
        self.shared.pressure.lock().set_limits(min_bytes, max_bytes);
        let target = self
            .shared
            .target_bytes
            .load(Ordering::Relaxed)
            .clamp(min_bytes, max_bytes);
        self.shared.set_target(target);
        Ok(())
    }

    /// Follows what the pools' cache devices hold with the admission sketches (grown as they
    /// fill, sized anew when devices are removed; the maintenance thread also checks every
    /// second).
    pub fn follow_second_tiers(&self) {
        let max_bytes = self.shared.limits.lock().max_bytes;
        self.shared.blocks.follow_second_tiers(max_bytes);
    }

    /// RAM the data sketches take for the SSD tiers below (beyond what `arc_max` alone
    /// needs), and the blocks those tiers held when last counted: a tier's share of the
    /// sketch is the first in proportion of its blocks in the second.
    pub fn second_tier_sketch(&self) -> (u64, u64) {
        let max_bytes = self.shared.limits.lock().max_bytes;
        (
            self.shared.blocks.second_tier_sketch_bytes(max_bytes),
            self.shared.blocks.second_tier_blocks(),
        )
    }

    /// One maintenance step with the given memory reading (tests drive it directly).
    pub fn maintain(&self, now_ms: u64, reading: &pressure::MemoryReading) {
        self.shared.maintain(now_ms, reading);
    }

    pub fn target_bytes(&self) -> u64 {
        self.shared.target_bytes.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> CacheSnapshot {
        self.shared.blocks.snapshot()
    }

    /// The arcstat-style counters and sizes.
    pub fn stats(&self) -> ArcStats {
        self.shared.stats()
    }

    /// Checks the cache's invariants (tests).
    pub fn assert_invariants(&self) {
        self.shared.blocks.assert_invariants();
    }
}

impl Drop for ReadCache {
    fn drop(&mut self) {
        self.prefetch_tx = None;
        for handle in self.prefetch_threads.drain(..) {
            let _ = handle.join();
        }
        self.shared.blocks.stop_evictor();
        if let Some(handle) = self.evictor_thread.take() {
            let _ = handle.join();
        }
        if let Some((stop, handle)) = self.maintenance.lock().take() {
            *stop.0.lock() = true;
            stop.1.notify_all();
            let _ = handle.join();
        }
    }
}

impl Shared {
    fn set_target(&self, target_bytes: u64) {
        self.target_bytes.store(target_bytes, Ordering::Relaxed);
        self.blocks.set_capacity(target_bytes);
    }

    fn maintain(&self, now_ms: u64, reading: &pressure::MemoryReading) {
        self.last_tick_ms.store(now_ms, Ordering::Relaxed);
        // Cache devices come and go: the admission sketches count for them too.
        let max_bytes = self.limits.lock().max_bytes;
        self.blocks.follow_second_tiers(max_bytes);
        if let Some(available) = reading.ram_available_bytes {
            self.memory_available_bytes
                .store(available, Ordering::Relaxed);
        }
        let target = self.target_bytes.load(Ordering::Relaxed);
        let snapshot = self.blocks.snapshot();
        let decision = self
            .pressure
            .lock()
            .tick(now_ms, reading, target, snapshot.size_bytes);
        match decision {
            Decision::Shrink { to_bytes, .. } => {
                self.counters.shrinks.fetch_add(1, Ordering::Relaxed);
                self.set_target(to_bytes);
                self.trim_heap();
            }
            Decision::Grow { to_bytes } => {
                self.counters.grows.fetch_add(1, Ordering::Relaxed);
                self.set_target(to_bytes);
            }
            Decision::Hold => {}
        }
        // A cache that keeps evicting frees buffers in every reader thread's heap arena, and
        // the allocator keeps those pages: once evictions since the last trim reach 1/16 of
        // the target, give the free pages back, so the process's resident size follows the
        // cache's (`arc_max` holds for the whole process, not only for what the cache counts).
        let evicted = snapshot.data.stats.evicted_bytes + snapshot.metadata.stats.evicted_bytes;
        let since = evicted.saturating_sub(self.evicted_at_last_trim.load(Ordering::Relaxed));
        if since >= target / HEAP_TRIM_EVICTED_DIVISOR {
            self.trim_heap();
        }
        let freed_at_ms = self.heap_freed_at_ms.load(Ordering::Relaxed);
        if freed_at_ms != NO_FREE_PENDING
            && now_ms >= freed_at_ms.saturating_add(HEAP_TRIM_QUIET_MS)
            && self
                .heap_freed_at_ms
                .compare_exchange(
                    freed_at_ms,
                    NO_FREE_PENDING,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok()
        {
            let cached_bytes = snapshot.size_bytes;
            if free_heap_bytes().is_some_and(|free| keeps_freed_heap(cached_bytes, free, target)) {
                self.heap_kept.fetch_add(1, Ordering::Relaxed);
            } else {
                self.trim_heap();
            }
        }
    }

    fn trim_heap(&self) {
        let snapshot = self.blocks.snapshot();
        self.evicted_at_last_trim.store(
            snapshot.data.stats.evicted_bytes + snapshot.metadata.stats.evicted_bytes,
            Ordering::Relaxed,
        );
        self.heap_trims.fetch_add(1, Ordering::Relaxed);
        release_free_heap();
    }

    fn count(&self, access: Access, class: BlockClass) -> &ClassCounters {
        &self.counters.classes[class_index(access, class)]
    }

    fn stats(&self) -> ArcStats {
        let snapshot = self.blocks.snapshot();
        let c = &self.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let class = |access, class| {
            let counters = self.count(access, class);
            (
                load(&counters.hits),
                load(&counters.iohits),
                load(&counters.misses),
            )
        };
        let (ddh, ddi, ddm) = class(Access::Demand, BlockClass::Data);
        let (dmh, dmi, dmm) = class(Access::Demand, BlockClass::Metadata);
        let (pdh, pdi, pdm) = class(Access::Prefetch, BlockClass::Data);
        let (pmh, pmi, pmm) = class(Access::Prefetch, BlockClass::Metadata);
        let (data, meta) = (&snapshot.data, &snapshot.metadata);
        let limits = self.limits.lock();
        let pressure = self.pressure.lock();
        let blocks = data.sizes.mru_blocks
            + data.sizes.mfu_blocks
            + meta.sizes.mru_blocks
            + meta.sizes.mfu_blocks;
        let header_bytes = data.sizes.header_bytes + meta.sizes.header_bytes;
        let header_per_block = header_bytes_per_block(&snapshot, limits.max_bytes);
        let evictions = data.stats.evictions + meta.stats.evictions;
        ArcStats {
            fields: vec![
                ("hits", ddh + dmh + pdh + pmh),
                ("iohits", ddi + dmi + pdi + pmi),
                ("misses", ddm + dmm + pdm + pmm),
                ("demand_data_hits", ddh),
                ("demand_data_iohits", ddi),
                ("demand_data_misses", ddm),
                ("demand_metadata_hits", dmh),
                ("demand_metadata_iohits", dmi),
                ("demand_metadata_misses", dmm),
                ("prefetch_data_hits", pdh),
                ("prefetch_data_iohits", pdi),
                ("prefetch_data_misses", pdm),
                ("prefetch_metadata_hits", pmh),
                ("prefetch_metadata_iohits", pmi),
                ("prefetch_metadata_misses", pmm),
                ("mru_hits", data.stats.mru_hits + meta.stats.mru_hits),
                ("mfu_hits", data.stats.mfu_hits + meta.stats.mfu_hits),
                (
                    "mru_ghost_hits",
                    data.stats.mru_ghost_hits + meta.stats.mru_ghost_hits,
                ),
                (
                    "mfu_ghost_hits",
                    data.stats.mfu_ghost_hits + meta.stats.mfu_ghost_hits,
                ),
                ("evictions", evictions),
                (
                    "evicted_bytes",
                    data.stats.evicted_bytes + meta.stats.evicted_bytes,
                ),
                (
                    "evict_skip",
                    data.stats.evict_skips + meta.stats.evict_skips,
                ),
                ("evict_batches", snapshot.evict_batches),
                ("evict_l2_cached", load(&self.blocks.evict_l2.cached)),
                ("evict_l2_eligible", load(&self.blocks.evict_l2.eligible)),
                (
                    "evict_l2_ineligible",
                    load(&self.blocks.evict_l2.ineligible),
                ),
                ("evict_batch_bytes", snapshot.evict_batch_bytes),
                ("evict_inline_bytes", snapshot.evict_inline_bytes),
                (
                    "demand_hit_prefetch",
                    data.stats.demand_hit_prefetched + meta.stats.demand_hit_prefetched,
                ),
                ("prefetch_promotions", load(&c.promotions)),
                ("prefetch_dropped", load(&c.prefetch_dropped)),
                ("written_inserts", load(&c.written_inserts)),
                ("uncached_reads", load(&c.uncached_reads)),
                ("size", snapshot.size_bytes),
                ("c", self.target_bytes.load(Ordering::Relaxed)),
                ("c_min", limits.min_bytes),
                ("c_max", limits.max_bytes),
                ("data_size", data.sizes.mru_bytes + data.sizes.mfu_bytes),
                ("metadata_size", meta.sizes.mru_bytes + meta.sizes.mfu_bytes),
                ("meta_target", snapshot.meta_target_bytes),
                ("mru_size", data.sizes.mru_bytes + meta.sizes.mru_bytes),
                (
                    "mru_target",
                    data.sizes.mru_target_bytes + meta.sizes.mru_target_bytes,
                ),
                ("mfu_size", data.sizes.mfu_bytes + meta.sizes.mfu_bytes),
                (
                    "mru_ghost_size",
                    data.sizes.mru_ghost_bytes + meta.sizes.mru_ghost_bytes,
                ),
                (
                    "mfu_ghost_size",
                    data.sizes.mfu_ghost_bytes + meta.sizes.mfu_ghost_bytes,
                ),
                ("blocks", blocks),
                (
                    "ghost_blocks",
                    data.sizes.ghost_blocks + meta.sizes.ghost_blocks,
                ),
                ("hdr_size", header_bytes),
                ("hdr_bytes_per_block", header_per_block),
                ("inflight", snapshot.inflight),
                ("shrinks", load(&c.shrinks)),
                ("grows", load(&c.grows)),
                ("heap_trims", load(&self.heap_trims)),
                ("heap_kept", load(&self.heap_kept)),
                (
                    "arc_no_grow",
                    u64::from(pressure.no_grow(self.last_tick_ms.load(Ordering::Relaxed))),
                ),
                (
                    "memory_available_bytes",
                    self.memory_available_bytes.load(Ordering::Relaxed),
                ),
            ],
        }
    }
}

/// What one cached block costs in headers: its entry in the policy's slab, its share of the
/// index (buckets per indexed entry, at the table's current load), and the frequency sketch's
/// share per 4 KiB of `arc_max` (the sketch is sized for it, one slot per 4 KiB).
/// Ghost entries cost an entry and an index share each too; `hdr_size` counts them.
fn header_bytes_per_block(snapshot: &CacheSnapshot, max_bytes: u64) -> u64 {
    let (data, meta) = (&snapshot.data.sizes, &snapshot.metadata.sizes);
    let entry = crate::ArcPolicy::<Arc<[u8]>>::entry_bytes() as u64;
    let index = (data.index_bytes + meta.index_bytes)
        .checked_div(data.indexed_entries + meta.indexed_entries)
        .unwrap_or(0);
    let sketch = (data.sketch_bytes + meta.sketch_bytes)
        .checked_div(max_bytes / 4096)
        .unwrap_or(0);
    entry + index + sketch
}

fn prefetch_worker(shared: &Shared, jobs: &Receiver<Job>) {
    let mut batch: Vec<PrefetchJob> = Vec::with_capacity(PREFETCH_BATCH_MAX);
    while let Ok(first) = jobs.recv() {
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Block(job) => batch.push(job),
                // A failing task loses read-ahead, never the thread.
                Job::Task(task) => {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                }
            }
            if batch.len() < PREFETCH_BATCH_MAX {
                next = jobs.try_recv().ok();
            }
        }
        let started: Vec<(PrefetchJob, Started)> = batch
            .drain(..)
            .map(|job| {
                let started = start_prefetch(&job);
                (job, started)
            })
            .collect();
        for (job, started) in started {
            let result = match started {
                Started::Done(result) => result,
                Started::Queued(queued) => job.io.finish_read(queued),
            };
            complete_prefetch(shared, &job, result);
        }
    }
}

/// A read-ahead block's read, begun.
enum Started {
    Done(Result<ReadBuf, PipelineError>),
    Queued(cairn_pipeline::QueuedRead),
}

fn start_prefetch(job: &PrefetchJob) -> Started {
    // A demand reader that came while the job waited here found nothing queued to raise:
    // read at its priority.
    let class = if job.pending.is_demanded() {
        IoClass::SyncRead
    } else {
        IoClass::AsyncRead
    };
    // Read-ahead is served by the cache devices when they hold the block (leaving its value
    // there as it was), and fed to them only if a demand read used it before RAM let it go.
    let from_l2 = job
        .l2
        .as_ref()
        .filter(|_| job.policy.secondary.caches(job.class))
        .and_then(|l2| l2.read_ahead(&job.bp));
    if let Some(data) = from_l2 {
        return Started::Done(Ok(data));
    }
    match job.io.queue_read(&job.bp, class) {
        Some(queued) => Started::Queued(queued),
        None => Started::Done(job.io.read_block_buf(&job.bp, class)),
    }
}

fn complete_prefetch(shared: &Shared, job: &PrefetchJob, result: Result<ReadBuf, PipelineError>) {
    // A block a demand reader already waited for has been used: it enters as demanded (and
    // is fed like one when RAM lets it go).
    let access = if job.pending.note_demand() {
        Access::Prefetch
    } else {
        Access::Demand
    };
    let cache_as = job.policy.primary.caches(job.class).then_some(access);
    shared.blocks.complete_for_tier(
        &job.key,
        job.class,
        &job.pending,
        result.as_ref().ok(),
        cache_as,
        job.policy.secondary.caches(job.class),
    );
}

/// Returns freed heap to the kernel: after a shrink (or a large txg's dirty buffers freed), the
/// memory given up should be free at once, not kept by the allocator for later.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory at the top of, or inside, glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes the allocator holds free in its heaps (`None`: not known on this platform).
pub fn free_heap_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads glibc's malloc statistics.
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Whether heap freed by a burst of writes (`free_heap_bytes` of it in all) is kept rather
/// than handed back: only while the cache, holding `cached_bytes`, has room for all of it
/// under its `target_bytes`, so resident memory stays within the target.
pub fn keeps_freed_heap(cached_bytes: u64, free_heap_bytes: u64, target_bytes: u64) -> bool {
    cached_bytes.saturating_add(free_heap_bytes) <= target_bytes
}

/// A pool's door to the process's cache, and to the pool's cache devices below it.
pub struct CachedIo {
    cache: Arc<ReadCache>,
    io: Arc<BlockIo>,
    pool_tag: u16,
    /// The pool's SSD tier, once the pool set it up (writable pools; it may have no devices).
    l2: std::sync::OnceLock<Arc<L2Arc>>,
}

fn block_class(bp: &BlockPointer) -> BlockClass {
    if bp.object_type.is_metadata(bp.level) {
        BlockClass::Metadata
    } else {
        BlockClass::Data
    }
}

impl CachedIo {
    pub fn new(cache: Arc<ReadCache>, io: Arc<BlockIo>) -> CachedIo {
        let pool_tag = cache.claim_pool_tag();
        CachedIo {
            cache,
            io,
            pool_tag,
            l2: std::sync::OnceLock::new(),
        }
    }

    /// Puts the pool's cache-device tier below the RAM cache (once).
    pub fn set_l2(&self, l2: Arc<L2Arc>) {
        let shared = &self.cache.shared;
        shared.blocks.register_l2(self.pool_tag, &l2);
        let _ = self.l2.set(l2);
        shared
            .blocks
            .follow_second_tiers(shared.limits.lock().max_bytes);
    }

    /// The pool's cache-device tier, when it has one with devices.
    pub fn l2(&self) -> Option<&Arc<L2Arc>> {
        self.l2.get().filter(|l2| l2.has_devices())
    }

    /// The pipeline underneath (writes, frees, and reads that must not be cached: scrub).
    pub fn io(&self) -> &Arc<BlockIo> {
        &self.io
    }

    pub fn cache(&self) -> &Arc<ReadCache> {
        &self.cache
    }

    /// The cache key of `bp`: the SSD tier's key (which says whether the block is stored
    /// compressed, for the tier to store it the same way when RAM lets it go) and the pool's tag.
    fn key(&self, bp: &BlockPointer) -> BlockKey {
        let first = bp.copies()[0];
        assert!(bp.birth_txg < 1 << 48, "birth txg beyond the key's 48 bits");
        let mut key = crate::block_key(first.vdev, first.offset, bp.birth_txg);
        if bp.compression == Compression::Lz4 {
            key[0] |= cairn_l2arc::KEY_LZ4;
        }
        debug_assert_eq!(Some(key), cairn_l2arc::block_key(bp));
        [key[0], key[1] | u64::from(self.pool_tag) << 48]
    }

    /// A demand read of `bp`: verified bytes, from the cache or the pool.
    pub fn read_block(
        &self,
        bp: &BlockPointer,
        policy: CachePolicy,
    ) -> Result<Bytes, PipelineError> {
        assert!(!bp.is_hole(), "read of a hole");
        let (key, class) = (self.key(bp), block_class(bp));
        let shared = &self.cache.shared;
        let counters = shared.count(Access::Demand, class);
        match shared.blocks.lookup(&key, class, Access::Demand) {
            Lookup::Hit(data) => {
                counters.hits.fetch_add(1, Ordering::Relaxed);
                Ok(data)
            }
            Lookup::InFlight(pending) => {
                counters.iohits.fetch_add(1, Ordering::Relaxed);
                if pending.is_prefetch() && pending.note_demand() {
                    shared.counters.promotions.fetch_add(1, Ordering::Relaxed);
                    self.io.promote_read(bp, IoClass::AsyncRead);
                }
                match pending.wait() {
                    Some(data) => Ok(data),
                    // The other reader failed: read for ourselves, to get the error first hand
                    // (or data, if a copy healed meanwhile).
                    None => self.io.read_block(bp, IoClass::SyncRead),
                }
            }
            Lookup::Claimed(pending) => {
                counters.misses.fetch_add(1, Ordering::Relaxed);
                let result = self.read_below(bp, &key, class, policy);
                let caches = policy.primary.caches(class);
                if !caches {
                    shared
                        .counters
                        .uncached_reads
                        .fetch_add(1, Ordering::Relaxed);
                }
                // Its eviction is offered to the SSD tier (and counted) only if the tier may
                // have it.
                shared.blocks.complete_for_tier(
                    &key,
                    class,
                    &pending,
                    result.as_ref().ok(),
                    caches.then_some(Access::Demand),
                    policy.secondary.caches(class),
                );
                result.map(Bytes::from_owner)
            }
        }
    }

    /// An ARC miss: the cache devices first when the block may be there, else the pool. The
    /// cache devices are fed as RAM lets blocks go (`BlockCache`'s eviction, a victim cache),
    /// so a block RAM will keep is not offered here; one RAM does not keep (`primarycache`)
    /// is let go at once: offered now. Read-ahead no demand read used is never fed, and the
    /// tier admits by frequency, which keeps scans from washing it. A block served by the
    /// cache devices into RAM leaves its copy there marked as a duplicate (the first space
    /// reused).
    fn read_below(
        &self,
        bp: &BlockPointer,
        key: &BlockKey,
        class: BlockClass,
        policy: CachePolicy,
    ) -> Result<ReadBuf, PipelineError> {
        let Some(l2) = self.l2().filter(|_| policy.secondary.caches(class)) else {
            return self.io.read_block_buf(bp, IoClass::SyncRead);
        };
        let kept = policy.primary.caches(class);
        let from_l2 = if kept {
            l2.read_into_ram(bp)
        } else {
            l2.read(bp)
        };
        if let Some(data) = from_l2 {
            return Ok(data);
        }
        let result = self.io.read_block_buf(bp, IoClass::SyncRead);
        if let (false, Ok(data)) = (kept, &result) {
            let (frequency, epoch) = self.cache.shared.blocks.frequency(key, class);
            let data = Bytes::from_owner(data.clone());
            l2.offer_with(bp, &data, cairn_l2arc::Admission { frequency, epoch });
        }
        result
    }

    /// A demand read that must not wait for I/O (a reader on an async runtime): the block if
    /// it is cached, counted as a hit; `None` (nothing counted) if it would need a read.
    pub fn read_cached(&self, bp: &BlockPointer) -> Option<Bytes> {
        if bp.is_hole() {
            return None;
        }
        let (key, class) = (self.key(bp), block_class(bp));
        let shared = &self.cache.shared;
        let data = shared.blocks.get_if_cached(&key, class, Access::Demand)?;
        shared
            .count(Access::Demand, class)
            .hits
            .fetch_add(1, Ordering::Relaxed);
        Some(data)
    }

    /// Runs `task` on a prefetch thread (dropped if they are all busy and their queue is
    /// full: read-ahead is a hint).
    pub fn spawn_prefetch_task(&self, task: impl FnOnce() + Send + 'static) {
        if let Some(tx) = &self.cache.prefetch_tx
            && tx.try_send(Job::Task(Box::new(task))).is_err()
        {
            self.cache
                .shared
                .counters
                .prefetch_dropped
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Reads `bps` ahead in the background (blocks cached or in flight are skipped).
    pub fn prefetch(&self, bps: &[BlockPointer], policy: CachePolicy) {
        let shared = &self.cache.shared;
        let Some(tx) = &self.cache.prefetch_tx else {
            return;
        };
        for bp in bps.iter().filter(|bp| !bp.is_hole()) {
            let (key, class) = (self.key(bp), block_class(bp));
            let counters = shared.count(Access::Prefetch, class);
            match shared.blocks.lookup(&key, class, Access::Prefetch) {
                Lookup::Hit(_) => {
                    counters.hits.fetch_add(1, Ordering::Relaxed);
                }
                Lookup::InFlight(_) => {
                    counters.iohits.fetch_add(1, Ordering::Relaxed);
                }
                Lookup::Claimed(pending) => {
                    counters.misses.fetch_add(1, Ordering::Relaxed);
                    let job = PrefetchJob {
                        io: self.io.clone(),
                        l2: self.l2().cloned(),
                        bp: *bp,
                        key,
                        class,
                        policy,
                        pending,
                    };
                    if let Err(err) = tx.try_send(Job::Block(job)) {
                        let Job::Block(job) = err.into_inner() else {
                            unreachable!("a block job came back");
                        };
                        shared
                            .counters
                            .prefetch_dropped
                            .fetch_add(1, Ordering::Relaxed);
                        shared
                            .blocks
                            .complete(&job.key, job.class, &job.pending, None, None);
                    }
                }
            }
        }
    }

    /// Frees `bp`'s space in `txg` and drops its block from RAM: no new reader will ask for
    /// it (it was rewritten elsewhere, or its object truncated or deleted). Without the drop,
    /// every rewrite of a cached block left its old version in the cache until eviction: a
    /// cache of dead blocks that kept growing, and with it the fresh memory every new version
    /// needed (ZFS drops a freed block's buffer too). A reader still on an older tree reads it
    /// from disk, whose space is kept for it.
    pub fn free_block(&self, bp: &BlockPointer, txg: u64) {
        if bp.is_hole() {
            return;
        }
        self.io.free_block(bp, txg);
        self.cache.shared.blocks.remove(&self.key(bp));
    }

    /// Caches a block just written (metadata at txg sync: the next txg reads it back to
    /// rewrite it), unless `mode` says not to.
    pub fn insert_written(&self, bp: &BlockPointer, data: &Bytes, mode: CacheMode) {
        let class = block_class(bp);
        if !mode.caches(class) {
            return;
        }
        self.cache
            .shared
            .counters
            .written_inserts
            .fetch_add(1, Ordering::Relaxed);
        // Written, not read: the feed never sees it (its eviction is not the feed's miss).
        self.cache
            .shared
            .blocks
            .insert_for_tier(self.key(bp), class, data, Access::Demand, false);
    }
}

impl Drop for CachedIo {
    fn drop(&mut self) {
        self.cache.shared.blocks.unregister_l2(self.pool_tag);
        let tag = u64::from(self.pool_tag);
        self.cache
            .shared
            .blocks
            .remove_matching(|key| key[1] >> 48 == tag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_heap_is_kept_only_while_the_cache_has_room_for_all_of_it() {
        let target = 1 << 30;
        assert!(keeps_freed_heap(0, target, target));
        assert!(keeps_freed_heap(target / 2, target / 2, target));
        assert!(!keeps_freed_heap(target / 2, target / 2 + 1, target));
        assert!(!keeps_freed_heap(target, 1, target));
        // A cache over its target (readers' slack) keeps nothing, and sizes never wrap.
        assert!(!keeps_freed_heap(target + 1, 0, target));
        assert!(!keeps_freed_heap(1, u64::MAX, u64::MAX - 1));
    }
}
