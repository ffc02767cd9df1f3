//! `BlockIo`, the pipeline's handle on a pool: the vdev tree and the allocator it reads and
//! writes through, the reads in flight (which hold back the reuse of freed space), and the
//! operations that need no I/O (freeing a block, checking a pointer against the pool).
//!
//! Invariants: the tree is replaced whole (I/O already started keeps the tree it began with);
//! `reads_in_flight` counts every read by the synced txg it started under, until it ends. The
//! reads, the copy checks and the writes are `impl BlockIo` blocks in `read`, `copies` and
//! `write`, above this file; it uses `error` only.

use crate::error::PointerProblem;
use crate::stats::PipelineStats;
use cairn_format::BlockPointer;
use cairn_pool::space::SpaceAllocator;
use cairn_pool::vdev::VdevTree;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

pub struct BlockIo {
    /// The current vdev tree; replaced whole when a vdev is added or removed (I/O already
    /// started keeps the tree it began with).
    pub(crate) tree: RwLock<Arc<VdevTree>>,
    pub(crate) space: Arc<Mutex<SpaceAllocator>>,
    pub stats: PipelineStats,
    /// Reads in flight, counted by the last synced txg when they started. The block a read
    /// was given may be freed by a later txg; its space must not be reused (and a self-heal
    /// must not write over new data) while the read runs, so the txg sync releases no free of
    /// that txg or later meanwhile (`oldest_read_txg`). Reads can wait longer than a few txgs
    /// under a write flood.
    pub(crate) reads_in_flight: Mutex<BTreeMap<u64, usize>>,
    pub(crate) synced_txg: std::sync::atomic::AtomicU64,
    /// A pool opened read-only: a bad copy is reported, never rewritten (`set_read_only`).
    pub(crate) read_only: std::sync::atomic::AtomicBool,
}

impl BlockIo {
    pub fn new(tree: Arc<VdevTree>, space: Arc<Mutex<SpaceAllocator>>) -> BlockIo {
        BlockIo {
            tree: RwLock::new(tree),
            space,
            stats: PipelineStats::default(),
            reads_in_flight: Mutex::new(BTreeMap::new()),
            synced_txg: std::sync::atomic::AtomicU64::new(0),
            read_only: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes reads write nothing: a bad copy found while another verifies is counted but not
    /// healed. A pool opened read-only promises that no device byte changes (its devices may
    /// be evidence, or about to be copied off).
    pub fn set_read_only(&self) {
        self.read_only.store(true, Ordering::SeqCst);
    }

    /// The last synced txg (the tree readers now see): set by the txg sync once it published.
    pub fn set_synced_txg(&self, txg: u64) {
        self.synced_txg.fetch_max(txg, Ordering::SeqCst);
    }

    /// The synced txg of the oldest read in flight: frees of that txg or later must wait.
    pub fn oldest_read_txg(&self) -> Option<u64> {
        self.reads_in_flight.lock().keys().next().copied()
    }

    pub fn tree(&self) -> Arc<VdevTree> {
        self.tree.read().clone()
    }

    /// The largest sector of the pool's top-level vdevs: compression must save whole sectors
    /// of it to be worth keeping (a block may be placed on any of them).
    pub fn sector_bytes_max(&self) -> usize {
        let ashift = self
            .tree
            .read()
            .tops
            .iter()
            .map(|top| top.config.ashift)
            .max()
            .unwrap_or(cairn_format::ASHIFT_MIN);
        1usize << ashift
    }

    /// Makes `tree` the pool's vdev tree. A tree with a new vdev must be in place before the
    /// allocator may place anything on it; a vdev leaves the allocator before the tree.
    pub fn replace_tree(&self, tree: Arc<VdevTree>) {
        *self.tree.write() = tree;
    }

    pub fn space(&self) -> &Arc<Mutex<SpaceAllocator>> {
        &self.space
    }

    /// Returns every copy of `bp` to the allocator (deferred, see `SpaceAllocator::free`).
    /// A copy the allocator refuses (a block pointer that disagrees with the space map: a
    /// crafted image, or a block referenced twice) becomes the allocator's fault, which keeps
    /// the txg sync from committing and so suspends the pool; the other copies are still freed.
    pub fn free_block(&self, bp: &BlockPointer, txg: u64) {
        if bp.is_hole() {
            return;
        }
        let mut space = self.space.lock();
        for dva in bp.copies() {
            // Refusal is recorded in `space.fault()`; nothing here can do better.
            let _ = space.free(dva, txg);
        }
        self.stats.blocks_freed.fetch_add(1, Ordering::Relaxed);
    }

    /// Checks a decoded pointer against the pool (every copy inside a vdev's data region, born
    /// no later than `newest_txg`), before anything is read through it or trusted about it:
    /// import checks the roots it starts from this way. A hole is always valid.
    pub fn check_pointer(&self, bp: &BlockPointer, newest_txg: u64) -> Result<(), PointerProblem> {
        if bp.is_hole() {
            return Ok(());
        }
        if bp.birth_txg > newest_txg {
            return Err(PointerProblem::FutureBirth {
                birth_txg: bp.birth_txg,
                newest_txg,
            });
        }
        let tree = self.tree();
        for (copy, dva) in bp.copies().iter().enumerate() {
            let Some(top) = tree.top(dva.vdev) else {
                return Err(PointerProblem::UnknownVdev {
                    copy,
                    vdev: dva.vdev,
                });
            };
            if !tree.dva_in_range(dva) {
                return Err(PointerProblem::OutOfRange {
                    copy,
                    vdev: dva.vdev,
                    offset: dva.offset,
                    asize: dva.asize,
                    size_bytes: top.data_size_bytes,
                });
            }
        }
        Ok(())
    }
}
