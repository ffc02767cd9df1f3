//! One run of the resilver (`Resilver`): plan the copies a side lacks by walking a synced
//! txg's tree (`Collector`, one window of offsets at a time), copy them in offset order in
//! batches, checkpoint the progress, and finish (record the end, then make the leaf readable).
//!
//! Invariants: `next_offset` moves only past blocks written to the new leaf and flushed; the
//! walk must read every block, or the run stops unfinished; the leaf becomes readable only once
//! the txg recording the end is durable. This file uses `resilver_task` and `vdevs` below it.

use super::vdevs::{detach_replaced, find_leaf_by_guid, layout_error};
use crate::EngineError;
use crate::core::{PoolCore, SyncedTree, run_sync_task_with};
use crate::resilver_task::{Progress, ResilverOptions};
use bytes::Bytes;
use cairn_dataset::MissedTxgs;
use cairn_device::queue::IoClass;
use cairn_format::{BlockPointer, Dva};
use cairn_object::{TreeVisitor, VisitedBlock, walk_objset, walk_objset_born_after};
use cairn_pipeline::BlockIo;
use cairn_pool::txg::TxgEngine;
use cairn_pool::vdev::Leaf;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bytes copied between two flushes of the new leaf.
const BATCH_BYTES_MAX: u64 = 8 << 20;
/// Progress is made durable (a sync task) at most this often.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Copies planned at once by default: about 200 bytes of memory each, so some 50 MiB, which
/// covers 32 GiB of 128 KiB blocks per walk of the tree.
pub const PLANNED_COPIES_MAX: usize = 1 << 18;
/// Longest sleep between two looks at the cancel flag.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

/// One copy to resilver: its address and the block it belongs to.
type Planned = (Dva, BlockPointer);

/// Collects the copies on one vdev born in a range of txgs, by offset: those from
/// `from_offset` on, at most `planned_max` of them, the lowest offsets first (`window_end`
/// shrinks to the first offset left out).
struct Collector<'a> {
    io: &'a BlockIo,
    cancel: &'a AtomicBool,
    vdev: u32,
    /// Copies born in `born_from_txg..=born_by_txg` are planned (a returned side lacks only
    /// its missed txgs; an attached one everything).
    born_from_txg: u64,
    born_by_txg: u64,
    from_offset: u64,
    window_end: u64,
    planned_max: usize,
    copies: BTreeMap<u64, Planned>,
    /// Bytes of every copy from `from_offset` on, planned or not (the resilver's total).
    remaining_bytes: u64,
    unreadable: u64,
}

impl Collector<'_> {
    fn note(&mut self, bp: &BlockPointer) {
        if bp.birth_txg > self.born_by_txg || bp.birth_txg < self.born_from_txg {
            return;
        }
        for dva in bp.copies() {
            if dva.vdev != self.vdev || dva.offset < self.from_offset {
                continue;
            }
            self.remaining_bytes += u64::from(dva.asize);
            if dva.offset >= self.window_end {
                continue;
            }
            self.copies.insert(dva.offset, (*dva, *bp));
            if self.copies.len() > self.planned_max
                && let Some((offset, _)) = self.copies.pop_last()
            {
                self.window_end = offset;
            }
        }
    }
}

impl TreeVisitor for Collector<'_> {
    fn visit(&mut self, block: &VisitedBlock, need_data: bool) -> Option<Bytes> {
        self.note(&block.bp);
        // Asked to stop (pool closing, detach): descend no further, so a walk of a large
        // tree does not hold up the close.
        if !need_data || self.cancel.load(Ordering::SeqCst) {
            return None;
        }
        match self.io.read_block(&block.bp, IoClass::Scrub) {
            Ok(data) => Some(data),
            Err(_) => {
                self.unreadable += 1;
                None
            }
        }
    }
}

/// One run of the resilver thread.
pub(super) struct Resilver<'a> {
    pub(super) core: &'a Arc<PoolCore>,
    pub(super) engine: &'a Arc<TxgEngine>,
    pub(super) leaf_guid: u64,
    /// What a returned side lacks, as recorded when the run started (none: an attached side,
    /// lacking everything). The run ends it only if it is still what is recorded.
    pub(super) missed: Option<MissedTxgs>,
    pub(super) options: ResilverOptions,
    pub(super) cancel: &'a AtomicBool,
    pub(super) progress: &'a Progress,
}

impl Resilver<'_> {
    pub(super) fn run(&self) -> Result<(), EngineError> {
        // Chains begun before the attach may hold blocks the new side lacks; restart them so
        // those are freed once their records are in a synced txg.
        let logs: Vec<_> = self.core.intent_logs.lock().values().cloned().collect();
        for log in logs {
            log.restart_chains()
                .map_err(|err| layout_error(crate::error_chain(&err)))?;
        }
        // The rate limit counts from here, over every window.
        let started = Instant::now();
        loop {
            if let Some(leaf) = self.copy_window(started)? {
                return self.finish(&leaf);
            }
        }
    }

    /// Plans and copies the next window of offsets; the leaf once the window reached the end
    /// of the vdev. Each window walks the tree of a synced txg afresh: the copies below the
    /// window's start are on the new side already (or were born after an earlier window's
    /// txg, and so written to every side).
    fn copy_window(&self, started: Instant) -> Result<Option<Arc<Leaf>>, EngineError> {
        let txg_error = EngineError::Txg;
        // Every txg after the one this syncs opened after the attach: its blocks are on
        // every side. The tree of this txg (or of a later one) holds every block that may be
        // missing.
        self.engine.sync_now_forced().map_err(txg_error)?;
        // All roots of one synced txg: the live directory names blocks of a txg still being
        // synced, which cannot be read yet, and a walk that skips them would leave their
        // subtrees uncopied.
        let synced = SyncedTree::take(self.core, Some(self.engine))?;
        let record = self
            .core
            .directory
            .lock()
            .resilver
            .clone()
            .filter(|record| record.leaf_guid == self.leaf_guid)
            .ok_or_else(|| layout_error("the resilver record is gone"))?;
        let tree = self.core.tree();
        let (top, leaf) = find_leaf_by_guid(&tree, self.leaf_guid)
            .ok_or_else(|| layout_error("the device being resilvered left the pool"))?;
        // A returned side lacks only the blocks born while it was out; one attached (no
        // range) every block born before the walked txg.
        let (born_from_txg, born_by_txg) = match self.missed {
            Some(MissedTxgs {
                first_txg,
                last_txg: Some(last_txg),
            }) => {
                // The range was closed before the record of this resilver was written, and
                // the walked txg was synced after that.
                assert!(
                    last_txg <= synced.uberblock.txg,
                    "missed txgs end at {last_txg}, after the walked txg {}",
                    synced.uberblock.txg
                );
                (first_txg, last_txg)
            }
            Some(_) => {
                return Err(layout_error(format!(
                    "{} is out again; it is resilvered once back",
                    leaf.spec
                )));
            }
            None => (0, synced.uberblock.txg),
        };
        let mut collector = Collector {
            io: &self.core.io,
            cancel: self.cancel,
            vdev: top.id(),
            born_from_txg,
            born_by_txg,
            from_offset: record.next_offset,
            window_end: top.data_size_bytes,
            planned_max: self
                .options
                .planned_copies_max
                .unwrap_or(PLANNED_COPIES_MAX)
                .max(1),
            copies: BTreeMap::new(),
            remaining_bytes: 0,
            unreadable: 0,
        };
        walk_objset(&synced.uberblock.root_bp, &mut collector);
        synced.chain.iter().for_each(|bp| collector.note(bp));
        for root in &synced.roots {
            walk_objset_born_after(&root.root_bp, root.born_after_txg, &mut collector);
        }
        if self.cancel.load(Ordering::SeqCst) {
            return Err(layout_error("stopped"));
        }
        let progress = self.progress;
        progress
            .unrecoverable_blocks
            .store(collector.unreadable, Ordering::Relaxed);
        // A block the walk could not read hides the blocks below it: the new side cannot be
        // known complete, so it stays unreadable (and the record unfinished) until a later
        // run, with the device back or the damage repaired, walks the whole tree.
        if collector.unreadable > 0 {
            return Err(layout_error(format!(
                "{} blocks of the pool's tree could not be read from any other side; {} \
                 stays incomplete",
                collector.unreadable, leaf.spec
            )));
        }
        progress
            .copied_bytes
            .store(record.copied_bytes, Ordering::Relaxed);
        progress.total_bytes.store(
            record.copied_bytes + collector.remaining_bytes,
            Ordering::Relaxed,
        );
        let window_end = collector.window_end;
        let copies: Vec<Planned> = collector.copies.into_values().collect();
        self.copy_all(&leaf, &copies, window_end, started)?;
        Ok((window_end >= top.data_size_bytes).then_some(leaf))
    }

    /// Copies `copies` (sorted by offset, all below `end_offset`) in batches, flushing and
    /// checkpointing as it goes; the last checkpoint records `end_offset`. Stopped (pool
    /// closing, detach), it records how far it got first.
    fn copy_all(
        &self,
        leaf: &Arc<Leaf>,
        copies: &[Planned],
        end_offset: u64,
        started: Instant,
    ) -> Result<(), EngineError> {
        let mut last_checkpoint = Instant::now();
        let mut index = 0;
        let offset_at = |index: usize| copies.get(index).map_or(end_offset, |(dva, _)| dva.offset);
        while index < copies.len() {
            if self.cancel.load(Ordering::SeqCst) || !self.pace(started) {
                self.checkpoint(offset_at(index))?;
                return Err(layout_error("stopped"));
            }
            let batch_end = batch_end(copies, index, self.batch_bytes_max());
            self.copy_batch(leaf, &copies[index..batch_end])?;
            index = batch_end;
            if last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL || index == copies.len() {
                self.checkpoint(offset_at(index))?;
                last_checkpoint = Instant::now();
            }
        }
        Ok(())
    }

    /// Bytes per batch: smaller under a rate limit, so progress moves (and is recorded)
    /// steadily.
    fn batch_bytes_max(&self) -> u64 {
        self.options
            .rate_bytes_per_s
            .map_or(BATCH_BYTES_MAX, |rate| {
                (rate / 4).clamp(64 << 10, BATCH_BYTES_MAX)
            })
    }

    /// Reads (verified) and writes one batch, then flushes the new leaf.
    fn copy_batch(&self, leaf: &Arc<Leaf>, batch: &[Planned]) -> Result<(), EngineError> {
        let io = &self.core.io;
        let mut writes = Vec::with_capacity(batch.len());
        let mut bytes = 0;
        for (dva, bp) in batch {
            // A block no side gives back verified stops the resilver here (it is never
            // recorded as copied): the new side would lack it, and a retry (import, a device
            // back) may read it.
            // As stored: a compressed block is copied compressed.
            let data = io.read_block_stored(bp, IoClass::Scrub).inspect_err(|_| {
                self.progress
                    .unrecoverable_blocks
                    .fetch_add(1, Ordering::Relaxed);
            })?;
            bytes += u64::from(dva.asize);
            let handle = io
                .write_copy(leaf, dva, Bytes::from_owner(data))
                .ok_or_else(|| layout_error(format!("{} is unavailable", leaf.spec)))?;
            writes.push(handle);
        }
        for handle in writes {
            if let Err(err) = handle.wait() {
                leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                leaf.fault();
                return Err(layout_error(format!(
                    "write to {} failed: {}",
                    leaf.spec,
                    crate::error_chain(&err)
                )));
            }
        }
        leaf.flush().map_err(|err| {
            layout_error(format!(
                "flush of {} failed: {}",
                leaf.spec,
                crate::error_chain(&err)
            ))
        })?;
        let progress = self.progress;
        progress.copied_bytes.fetch_add(bytes, Ordering::Relaxed);
        progress
            .copied_here_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Records that every block below `next_offset` is on the new leaf (durable on return).
    fn checkpoint(&self, next_offset: u64) -> Result<(), EngineError> {
        let copied_bytes = self.progress.copied_bytes.load(Ordering::Relaxed);
        let total_bytes = self.progress.total_bytes.load(Ordering::Relaxed);
        let guid = self.leaf_guid;
        run_sync_task_with(self.core, self.engine, move |core, _| {
            if let Some(record) = &mut core.directory.lock().resilver
                && record.leaf_guid == guid
            {
                record.next_offset = next_offset;
                record.copied_bytes = copied_bytes;
                record.total_bytes = total_bytes;
            }
            Ok(())
        })
        .map(|_| ())
    }

    /// Sleeps as long as the rate limit asks; false if asked to stop meanwhile.
    fn pace(&self, started: Instant) -> bool {
        let Some(rate) = self.options.rate_bytes_per_s.filter(|rate| *rate > 0) else {
            return true;
        };
        let copied = self.progress.copied_here_bytes.load(Ordering::Relaxed);
        let due = Duration::from_secs_f64(copied as f64 / rate as f64);
        loop {
            if self.cancel.load(Ordering::SeqCst) {
                return false;
            }
            let left = due.saturating_sub(started.elapsed());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(SLEEP_SLICE.min(left));
        }
    }

    /// Records the resilver as finished; once that txg is durable the leaf becomes readable
    /// (not before: a write that reached only this leaf must not count as written while a
    /// crash would still bring it back as lacking data). For a replace, the old side is then
    /// detached in a txg of its own, so the vdev always has a readable side.
    fn finish(&self, leaf: &Arc<Leaf>) -> Result<(), EngineError> {
        let guid = self.leaf_guid;
        let copied_bytes = self.progress.copied_bytes.load(Ordering::Relaxed);
        let filled = leaf.clone();
        let covered = self.missed;
        run_sync_task_with(self.core, self.engine, move |core, _| {
            // A leaf faulted since the copies (a write to it failed) lacks what that write
            // carried, and nothing records which txgs it missed: it is not complete.
            if !filled.is_usable() {
                return Err(layout_error(format!(
                    "{} failed during the resilver; it stays incomplete",
                    filled.spec
                )));
            }
            let mut directory = core.directory.lock();
            // The side went out and came back meanwhile: a newer run covers the new range.
            if directory.missed_txgs.leaves.get(&guid).copied() != covered {
                return Err(layout_error(format!(
                    "{} missed more txgs during the resilver; it stays incomplete",
                    filled.spec
                )));
            }
            directory.missed_txgs.leaves.remove(&guid);
            let Some(record) = directory.resilver.as_mut().filter(|r| r.leaf_guid == guid) else {
                return Err(layout_error("the resilver record is gone"));
            };
            record.finished_ms = Some(crate::now_ms());
            record.copied_bytes = copied_bytes;
            record.total_bytes = copied_bytes;
            Ok(())
        })?;
        leaf.set_resilvering(false);
        leaf.set_missed(None);
        detach_replaced(self.core, self.engine)
    }
}

/// End (exclusive) of the batch starting at `start`: up to `bytes_max` bytes (at least one
/// copy).
fn batch_end(copies: &[Planned], start: usize, bytes_max: u64) -> usize {
    let mut bytes = 0;
    let mut end = start;
    while end < copies.len() && (end == start || bytes < bytes_max) {
        bytes += u64::from(copies[end].0.asize);
        end += 1;
    }
    end
}
