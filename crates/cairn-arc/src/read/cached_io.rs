//! `CachedIo`: a pool's door to the process's cache — demand reads (cache, then the pool's SSD
//! tier, then the pool), read-ahead, frees and written blocks, keyed by the pool's tag.
//!
//! Invariants: a block is read by one reader at a time (others wait on its `Pending`, raising
//! read-ahead to demand priority); dropping a `CachedIo` takes its pool's blocks out of the
//! cache. How it fits: uses `read_cache` (the shared state and prefetch queue) and `config`.

use super::config::{CacheMode, CachePolicy};
use super::read_cache::{Job, PrefetchJob, ReadCache};
use crate::cache::{BlockClass, Lookup};
use crate::policy::{Access, BlockKey};
use bytes::Bytes;
use cairn_device::ReadBuf;
use cairn_device::queue::IoClass;
use cairn_format::{BlockPointer, Compression};
use cairn_l2arc::L2Arc;
use cairn_pipeline::{BlockIo, PipelineError};
use std::sync::Arc;
use std::sync::atomic::Ordering;

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
