//! `ReadCache`: the process's one cache — its shared state (`Shared`: blocks, counters, pressure
//! controller), the maintenance thread that follows memory pressure and trims the heap, and the
//! prefetch threads that read ahead in batches.
//!
//! Invariants: the target stays within [`arc_min`, `arc_max`]; a prefetch thread queues a whole
//! batch (at most `PREFETCH_BATCH_MAX`) before waiting on the first read; read-ahead beyond
//! `PREFETCH_QUEUE_MAX` queued blocks is dropped. How it fits: uses `config`, `stats` and
//! `heap`; `cached_io` is each pool's door to it.

use super::config::{ArcConfig, CachePolicy, LimitsError};
use super::heap::{free_heap_bytes, keeps_freed_heap, release_free_heap};
use super::stats::{ArcStats, ClassCounters, Counters, class_index, header_bytes_per_block};
use crate::cache::{BlockCache, BlockClass, CacheSnapshot};
use crate::policy::{Access, BlockKey};
use crate::pressure::{self, Decision, PressureConfig, PressureController};
use cairn_device::ReadBuf;
use cairn_device::queue::IoClass;
use cairn_format::BlockPointer;
use cairn_l2arc::L2Arc;
use cairn_pipeline::{BlockIo, PipelineError};
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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

pub(super) struct Limits {
    pub(super) min_bytes: u64,
    pub(super) max_bytes: u64,
}

pub(super) struct Shared {
    pub(super) blocks: BlockCache,
    pub(super) counters: Counters,
    pub(super) limits: Mutex<Limits>,
    pub(super) target_bytes: AtomicU64,
    pub(super) pressure: Mutex<PressureController>,
    pub(super) memory_available_bytes: AtomicU64,
    /// Time of the last maintenance step (ms since the thread started).
    pub(super) last_tick_ms: AtomicU64,
    /// Bytes evicted as of the last `release_free_heap`.
    pub(super) evicted_at_last_trim: AtomicU64,
    /// Maintenance time of the latest large free not yet trimmed, or `NO_FREE_PENDING`.
    pub(super) heap_freed_at_ms: AtomicU64,
    pub(super) heap_trims: AtomicU64,
    /// Quiet points after a large free where the free heap fit in the cache's room and was
    /// kept.
    pub(super) heap_kept: AtomicU64,
}

/// Work for the prefetch threads.
pub(super) enum Job {
    /// Read one block ahead.
    Block(PrefetchJob),
    /// Anything else read-ahead needs done off the reader's thread (finding the pointers of
    /// the blocks to read ahead, which may read indirect blocks).
    Task(Box<dyn FnOnce() + Send>),
}

pub(super) struct PrefetchJob {
    pub(super) io: Arc<BlockIo>,
    /// The pool's cache devices, read before the pool when the block may be there.
    pub(super) l2: Option<Arc<L2Arc>>,
    pub(super) bp: BlockPointer,
    pub(super) key: BlockKey,
    pub(super) class: BlockClass,
    pub(super) policy: CachePolicy,
    pub(super) pending: Arc<crate::cache::Pending>,
}

/// The maintenance thread and its stop flag.
type Maintenance = (Arc<(Mutex<bool>, Condvar)>, JoinHandle<()>);

pub struct ReadCache {
    pub(super) shared: Arc<Shared>,
    pub(super) prefetch_tx: Option<Sender<Job>>,
    pub(super) prefetch_threads: Vec<JoinHandle<()>>,
    pub(super) evictor_thread: Option<JoinHandle<()>>,
    pub(super) maintenance: Mutex<Option<Maintenance>>,
    pub(super) next_pool_tag: AtomicU16,
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
    pub(super) fn claim_pool_tag(&self) -> u16 {
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

    pub(super) fn count(&self, access: Access, class: BlockClass) -> &ClassCounters {
        &self.counters.classes[class_index(access, class)]
    }

    /// Every statistic, in display order, from one cache snapshot.
    fn stats(&self) -> ArcStats {
        let snapshot = self.blocks.snapshot();
        let limits = self.limits.lock();
        let mut fields = Vec::with_capacity(STATS_FIELDS);
        self.access_fields(&mut fields);
        self.eviction_fields(&snapshot, &mut fields);
        self.size_fields(&snapshot, &limits, &mut fields);
        self.adaptation_fields(&mut fields);
        ArcStats { fields }
    }

    /// Hits, I/O hits and misses: totals, then by access and block class.
    fn access_fields(&self, fields: &mut Vec<(&'static str, u64)>) {
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
        fields.extend([
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
        ]);
    }

    /// Hits by list, evictions, and how blocks entered the cache.
    fn eviction_fields(&self, snapshot: &CacheSnapshot, fields: &mut Vec<(&'static str, u64)>) {
        let c = &self.counters;
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let (data, meta) = (&snapshot.data.stats, &snapshot.metadata.stats);
        fields.extend([
            ("mru_hits", data.mru_hits + meta.mru_hits),
            ("mfu_hits", data.mfu_hits + meta.mfu_hits),
            ("mru_ghost_hits", data.mru_ghost_hits + meta.mru_ghost_hits),
            ("mfu_ghost_hits", data.mfu_ghost_hits + meta.mfu_ghost_hits),
            ("evictions", data.evictions + meta.evictions),
            ("evicted_bytes", data.evicted_bytes + meta.evicted_bytes),
            ("evict_skip", data.evict_skips + meta.evict_skips),
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
                data.demand_hit_prefetched + meta.demand_hit_prefetched,
            ),
            ("prefetch_promotions", load(&c.promotions)),
            ("prefetch_dropped", load(&c.prefetch_dropped)),
            ("written_inserts", load(&c.written_inserts)),
            ("uncached_reads", load(&c.uncached_reads)),
        ]);
    }

    /// The cache's size against its targets and limits, by list and class.
    fn size_fields(
        &self,
        snapshot: &CacheSnapshot,
        limits: &Limits,
        fields: &mut Vec<(&'static str, u64)>,
    ) {
        let (data, meta) = (&snapshot.data.sizes, &snapshot.metadata.sizes);
        let blocks = data.mru_blocks + data.mfu_blocks + meta.mru_blocks + meta.mfu_blocks;
        let header_bytes = data.header_bytes + meta.header_bytes;
        let header_per_block = header_bytes_per_block(snapshot, limits.max_bytes);
        fields.extend([
            ("size", snapshot.size_bytes),
            ("c", self.target_bytes.load(Ordering::Relaxed)),
            ("c_min", limits.min_bytes),
            ("c_max", limits.max_bytes),
            ("data_size", data.mru_bytes + data.mfu_bytes),
            ("metadata_size", meta.mru_bytes + meta.mfu_bytes),
            ("meta_target", snapshot.meta_target_bytes),
            ("mru_size", data.mru_bytes + meta.mru_bytes),
            ("mru_target", data.mru_target_bytes + meta.mru_target_bytes),
            ("mfu_size", data.mfu_bytes + meta.mfu_bytes),
            (
                "mru_ghost_size",
                data.mru_ghost_bytes + meta.mru_ghost_bytes,
            ),
            (
                "mfu_ghost_size",
                data.mfu_ghost_bytes + meta.mfu_ghost_bytes,
            ),
            ("blocks", blocks),
            ("ghost_blocks", data.ghost_blocks + meta.ghost_blocks),
            ("hdr_size", header_bytes),
            ("hdr_bytes_per_block", header_per_block),
            ("inflight", snapshot.inflight),
        ]);
    }

    /// How the target adapted to memory: shrinks, grows, heap trims, pressure.
    fn adaptation_fields(&self, fields: &mut Vec<(&'static str, u64)>) {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let c = &self.counters;
        let pressure = self.pressure.lock();
        fields.extend([
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
        ]);
    }
}

/// How many statistics [`Shared::stats`] reports (its vector is allocated once, to this size).
const STATS_FIELDS: usize = 15 + 18 + 17 + 6;

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
