//! Scrub: read every copy of every block reachable from the current uberblock, verify it, and
//! rewrite bad copies from a good one.
//!
//! The scrub first syncs, then walks the tree of the txg it starts at: the MOS, every dataset's
//! object set and the space-log chain. Unrecoverable blocks are reported by dataset, object and
//! byte offset — the bytes themselves are never returned to anyone. The result is stored in the
//! dataset directory so `cairn pool status` shows it after the process exits.
//!
//! Writers may keep going during a scrub (a server keeps serving): the scrub holds back the
//! reuse of space freed after its txg (`ScanGuard`), so every block of the tree it walks still
//! holds that block's bytes, and rewriting a bad copy can never land on someone else's data.

pub use crate::scrub_progress::ScrubProgress;
use crate::{EngineError, Pool};
use bytes::Bytes;
use cairn_dataset::ScrubRecord;
use cairn_format::ObjectType;
use cairn_object::{TreeVisitor, VisitedBlock, walk_objset, walk_objset_born_after};
use cairn_pipeline::BlockIo;

struct ScrubVisitor<'a> {
    io: &'a BlockIo,
    dataset: String,
    progress: ScrubProgress,
    damaged: Vec<String>,
    report: &'a mut dyn FnMut(&ScrubProgress),
}

impl ScrubVisitor<'_> {
    fn scrub(&mut self, block: &VisitedBlock) -> Option<Bytes> {
        let (outcome, data) = self.io.scrub_block(&block.bp);
        let progress = &mut self.progress;
        progress.blocks += 1;
        progress.scanned_bytes += block.bp.allocated_bytes();
        progress.bad_copies += outcome.bad_copies;
        progress.repaired_copies += outcome.repaired_copies;
        progress.repaired_bytes += outcome.repaired_bytes;
        if outcome.unrecoverable {
            progress.unrecoverable_blocks += 1;
            self.damaged.push(describe(&self.dataset, block));
        }
        if progress.blocks.is_multiple_of(256) {
            (self.report)(&self.progress);
        }
        data
    }
}

/// Where a block sits, for damage reports.
pub(crate) fn describe(dataset: &str, block: &VisitedBlock) -> String {
    let first = block.bp.copies().first().copied().unwrap_or_default();
    let place = format!("at vdev {} offset {}", first.vdev, first.offset);
    match block.bp.object_type {
        ObjectType::SpaceLog => return format!("{dataset}: space-log block {place}"),
        ObjectType::ObjsetRoot => return format!("{dataset}: object-set root {place}"),
        ObjectType::DnodeBlock if block.level == 0 => {
            return format!(
                "{dataset}: dnode block {} (objects {}..{}) {place}",
                block.blkid,
                block.blkid * 32,
                block.blkid * 32 + 31
            );
        }
        _ => {}
    }
    if block.level == 0 && block.object != 0 && block.data_block_size > 0 {
        format!(
            "{dataset}: object {} offset {} ({} bytes)",
            block.object,
            block.blkid * u64::from(block.data_block_size),
            block.data_block_size
        )
    } else {
        format!(
            "{dataset}: object {} level {} indirect block covering block {} {place}",
            block.object, block.level, block.blkid
        )
    }
}

impl TreeVisitor for ScrubVisitor<'_> {
    fn visit(&mut self, block: &VisitedBlock, _need_data: bool) -> Option<Bytes> {
        self.scrub(block)
    }
}

impl Pool {
    /// The progress of the scrub running now, if one is (what `report` last heard).
    pub fn scrub_progress(&self) -> Option<ScrubProgress> {
        self.scrub_running.lock().clone()
    }

    /// Scrubs the whole pool, calling `report` with progress now and then (and keeping it for
    /// `scrub_progress`, so a server's analytics see a scrub another command started).
    pub fn scrub(
        &self,
        report: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<ScrubRecord, EngineError> {
        /// Clears the shared progress however the scrub ends.
        struct Running<'a>(&'a parking_lot::Mutex<Option<ScrubProgress>>);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                *self.0.lock() = None;
            }
        }
        *self.scrub_running.lock() = Some(ScrubProgress::default());
        let _running = Running(&self.scrub_running);
        let shared = &self.scrub_running;
        let mut report = |progress: &ScrubProgress| {
            *shared.lock() = Some(progress.clone());
            report(progress);
        };
        self.scrub_with(&mut report)
    }

    fn scrub_with(
        &self,
        report: &mut dyn FnMut(&ScrubProgress),
    ) -> Result<ScrubRecord, EngineError> {
        self.sync()?;
        let started_ms = crate::now_ms();
        // The roots of one synced txg (a sync running meanwhile would hand out roots whose
        // blocks are still being written: reported unrecoverable, their subtrees unscrubbed).
        let synced =
            crate::core::SyncedTree::take(&self.core, self.txg_engine().ok().map(|e| &**e))?;
        let uberblock = synced.uberblock.clone();
        let roots = synced.roots.clone();
        let chain = synced.chain.clone();
        let mut visitor = ScrubVisitor {
            io: &self.core.io,
            dataset: format!("{} (pool metadata)", self.core.name),
            progress: ScrubProgress {
                total_bytes: self.core.space.lock().stats().allocated_bytes,
                ..Default::default()
            },
            damaged: Vec::new(),
            report,
        };
        walk_objset(&uberblock.root_bp, &mut visitor);
        for bp in &chain {
            let block = VisitedBlock {
                bp: *bp,
                object: 0,
                level: 0,
                blkid: 0,
                data_block_size: 0,
            };
            visitor.scrub(&block);
        }
        for root in roots {
            visitor.dataset = root.name;
            walk_objset_born_after(&root.root_bp, root.born_after_txg, &mut visitor);
        }
        (visitor.report)(&visitor.progress);
        let progress = visitor.progress.clone();
        let record = ScrubRecord {
            start_txg: uberblock.txg,
            started_ms,
            finished_ms: crate::now_ms(),
            bytes_scanned: progress.scanned_bytes,
            blocks_scanned: progress.blocks,
            bad_copies: progress.bad_copies,
            repaired_copies: progress.repaired_copies,
            repaired_bytes: progress.repaired_bytes,
            unrecoverable_blocks: progress.unrecoverable_blocks,
            damaged: visitor.damaged,
            canceled: false,
        };
        let stored = record.clone();
        self.run_sync_task(move |core, _| {
            core.directory.lock().last_scrub = Some(stored);
            Ok(())
        })?;
        Ok(record)
    }
}
