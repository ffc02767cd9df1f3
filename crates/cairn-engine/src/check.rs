//! The offline checker (`cairn pool check`, our `zdb -b`): walk every block pointer reachable
//! from the current uberblock, verify every copy's checksum, and prove that the space the
//! allocator believes allocated is exactly the space the block pointers reference.
//!
//! Findings:
//! - bad copies (checksum or read errors), by dataset/object/offset;
//! - double references: two pointers whose copies overlap;
//! - references to space the space log says is free;
//! - leaks: allocated space no pointer references;
//! - per-dataset `used` that differs from the sum of its blocks;
//! - deadlists and `usedbysnapshots` that disagree with the trees, and deadlist objects of
//!   the MOS that nothing holds or will free (`check_snapshots.rs`).
//!
//! Each dataset's snapshots are walked oldest first, each from its predecessor's txg, then the
//! head from the newest snapshot's (`PoolCore::tree_roots`), so a block they share is visited
//! and counted once and a double reference still means two pointers to one place.
//!
//! The checker never writes. On a pool opened read-only it sees exactly what is on disk (an
//! exported pool too: `pool check -d DIR`, opened read-only for the check); on a live pool (a
//! running server) it holds the open txg so no sync runs while it looks.
//!
//! `referenced_bytes` counts everything that holds allocated space, the intent logs' blocks
//! included (their chains' blocks and the next block each chain has allocated ahead), so a
//! clean check reports it equal to `allocated_bytes`. The logs' share is also given on its
//! own (`intent_log_bytes`): it is what makes a live pool's figures move between checks, and
//! it is not part of any dataset's `used`. (It once was left out of `referenced_bytes`, and a
//! live check showed the two 4 KiB apart while reporting no problem.)

use crate::scrub::describe;
use crate::{EngineError, Pool};
use bytes::Bytes;
use cairn_format::{BlockPointer, IntentLogHeader};
use cairn_object::{TreeVisitor, VisitedBlock, walk_objset, walk_objset_born_after};
use cairn_pipeline::BlockIo;
use cairn_zil::read_log;
use std::collections::BTreeSet;

type Extent = (u32, u64, u64);

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct CheckReport {
    pub txg: u64,
    pub blocks: u64,
    pub copies_verified: u64,
    /// Space the walked block pointers and the intent logs hold.
    pub referenced_bytes: u64,
    /// Of `referenced_bytes`, what the intent logs hold (their blocks as of the checked txg).
    pub intent_log_bytes: u64,
    pub allocated_bytes: u64,
    pub bad_copies: Vec<String>,
    pub double_references: Vec<String>,
    pub references_to_free_space: Vec<String>,
    pub leaks: Vec<String>,
    pub used_mismatches: Vec<String>,
    /// Deadlists and snapshot space that disagree with the trees (`check_snapshots.rs`).
    #[serde(default)]
    pub snapshot_problems: Vec<String>,
    /// Filesystems whose namespace was walked (not on a live pool: operations in flight
    /// would show half-made changes), and what the walks found.
    pub filesystems_checked: u64,
    pub namespace_problems: Vec<String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        self.bad_copies.is_empty()
            && self.double_references.is_empty()
            && self.references_to_free_space.is_empty()
            && self.leaks.is_empty()
            && self.used_mismatches.is_empty()
            && self.snapshot_problems.is_empty()
            && self.namespace_problems.is_empty()
    }

    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let sections = [
            ("bad copy", &self.bad_copies),
            ("double reference", &self.double_references),
            ("reference to free space", &self.references_to_free_space),
            ("leaked space", &self.leaks),
            ("used mismatch", &self.used_mismatches),
            ("snapshot", &self.snapshot_problems),
            ("namespace", &self.namespace_problems),
        ];
        for (label, items) in sections {
            out.extend(items.iter().map(|item| format!("{label}: {item}")));
        }
        out
    }
}

struct CheckVisitor<'a> {
    io: &'a BlockIo,
    dataset: String,
    extents: Vec<Extent>,
    /// The blocks visited since the last dataset's head: by place (every copy's vdev and
    /// offset) with their allocated bytes, for the snapshot checks.
    visited: Vec<(Vec<(u32, u64)>, u64)>,
    report: CheckReport,
}

impl CheckVisitor<'_> {
    fn check(&mut self, block: &VisitedBlock) -> Option<Bytes> {
        let (checked, problems, good) = self.io.verify_all_copies(&block.bp);
        self.report.blocks += 1;
        self.report.copies_verified += checked;
        for problem in problems {
            self.report
                .bad_copies
                .push(format!("{}: {problem}", describe(&self.dataset, block)));
        }
        for dva in block.bp.copies() {
            self.extents
                .push((dva.vdev, dva.offset, u64::from(dva.asize)));
        }
        self.visited.push((
            block
                .bp
                .copies()
                .iter()
                .map(|dva| (dva.vdev, dva.offset))
                .collect(),
            block.bp.allocated_bytes(),
        ));
        self.report.referenced_bytes += block.bp.allocated_bytes();
        good
    }
}

impl TreeVisitor for CheckVisitor<'_> {
    fn visit(&mut self, block: &VisitedBlock, _need_data: bool) -> Option<Bytes> {
        self.check(block)
    }
}

/// Coalesces sorted extents; reports overlaps.
fn coalesce(mut extents: Vec<Extent>, overlaps: &mut Vec<String>) -> Vec<Extent> {
    extents.sort_unstable();
    let mut out: Vec<Extent> = Vec::with_capacity(extents.len());
    for (vdev, offset, len) in extents {
        if let Some(last) = out.last_mut()
            && last.0 == vdev
            && offset <= last.1 + last.2
        {
            if offset < last.1 + last.2 {
                overlaps.push(format!(
                    "vdev {vdev} offset {offset} length {len} is referenced twice"
                ));
            }
            last.2 = last.2.max(offset + len - last.1);
            continue;
        }
        out.push((vdev, offset, len));
    }
    out
}

/// Parts of `a` not covered by `b` (both coalesced and sorted).
fn subtract(a: &[Extent], b: &[Extent]) -> Vec<Extent> {
    let mut out = Vec::new();
    let mut j = 0;
    for &(vdev, start, len) in a {
        let end = start + len;
        let mut cursor = start;
        while j < b.len() && (b[j].0 < vdev || (b[j].0 == vdev && b[j].1 + b[j].2 <= cursor)) {
            j += 1;
        }
        let mut k = j;
        while k < b.len() && b[k].0 == vdev && b[k].1 < end {
            if b[k].1 > cursor {
                out.push((vdev, cursor, b[k].1 - cursor));
            }
            cursor = cursor.max(b[k].1 + b[k].2);
            k += 1;
        }
        if cursor < end {
            out.push((vdev, cursor, end - cursor));
        }
    }
    out
}

impl Pool {
    /// The space a dataset's intent log holds as of `txg`: the blocks of its chains, and where
    /// each chain ends, that `allocated` (the allocations as of `txg`, sorted) has. On a live
    /// pool the chains go on growing into blocks allocated for the open txg; those belong to
    /// that txg, not to the one checked. Not counted in `used`.
    fn intent_log_extents(
        &self,
        root: &BlockPointer,
        txg: u64,
        allocated: &[Extent],
        extents: &mut BTreeSet<Extent>,
    ) {
        if root.is_hole() {
            return;
        }
        let Ok(phys) = cairn_object::read_objset_phys(&self.core.io, root) else {
            return;
        };
        let Ok(header) = IntentLogHeader::decode(&phys.intent_log_header) else {
            return;
        };
        if header.is_empty() {
            return;
        }
        let log = read_log(&self.core.io, self.core.guid, &header, txg);
        for dva in log.blocks.iter().chain(&log.chain_ends) {
            let extent = (dva.vdev, dva.offset, u64::from(dva.asize));
            if within(allocated, extent) {
                extents.insert(extent);
            }
        }
    }

    /// Every block pointer of a dataset's object set as of the last sync, or of a snapshot's
    /// (`dataset@snapshot`), for tools and tests.
    pub fn dataset_blocks(&self, dataset: &str) -> Result<Vec<BlockPointer>, EngineError> {
        let root = if dataset.contains('@') {
            self.snapshot_root(dataset)?.0
        } else {
            self.core.directory.lock().get(dataset)?.objset_bp()?
        };
        Ok(crate::core::collect_tree(&self.core.io, &root, 0))
    }

    /// Walks the namespace of every filesystem (`cairn_fs::check::check_namespace`).
    fn check_namespaces(&self, report: &mut CheckReport) {
        let filesystems: Vec<(String, std::sync::Arc<cairn_object::ObjectSet>)> = {
            let directory = self.core.directory.lock();
            let objsets = self.core.objsets.lock();
            directory
                .datasets
                .values()
                .filter(|record| record.kind == cairn_dataset::DatasetKind::Filesystem)
                .filter_map(|record| {
                    objsets
                        .get(&record.name)
                        .map(|objset| (record.name.clone(), objset.clone()))
                })
                .collect()
        };
        for (name, objset) in filesystems {
            report.filesystems_checked += 1;
            match cairn_fs::check::check_namespace(&objset) {
                Ok(found) => report.namespace_problems.extend(
                    found
                        .problems
                        .into_iter()
                        .map(|problem| format!("{name}: {problem}")),
                ),
                Err(err) => report
                    .namespace_problems
                    .push(format!("{name}: {}", crate::error_chain(&err))),
            }
        }
    }

    /// Walks every dataset's snapshots and head into `visitor` (see the module doc), checking
    /// each head's `used` and, where it has snapshots, its deadlists; collects the intent
    /// logs' extents as of `txg` into `log_extents`.
    fn check_datasets(
        &self,
        visitor: &mut CheckVisitor<'_>,
        txg: u64,
        allocated: &[Extent],
        log_extents: &mut BTreeSet<Extent>,
    ) -> Result<(), EngineError> {
        let roots = self.core.tree_roots();
        let recorded_used: std::collections::BTreeMap<String, u64> = self
            .core
            .directory
            .lock()
            .datasets
            .values()
            .map(|record| (record.name.clone(), record.used_bytes))
            .collect();
        // Each dataset's snapshots, oldest first, then its head: every block once.
        visitor.visited.clear();
        for root in roots {
            let is_head = !root.name.contains('@');
            visitor.dataset = root.name.clone();
            walk_objset_born_after(&root.root_bp, root.born_after_txg, visitor);
            if !is_head {
                continue;
            }
            let name = root.name;
            self.intent_log_extents(&root.root_bp, txg, allocated, log_extents);
            let visited = std::mem::take(&mut visitor.visited);
            let head_bytes = if root.born_after_txg == 0 {
                visited.iter().map(|(_, bytes)| bytes).sum()
            } else {
                let found = crate::check_snapshots::check_dataset_snapshots(
                    &self.core,
                    &name,
                    &root.root_bp,
                    &visited,
                )?;
                visitor.report.snapshot_problems.extend(found.problems);
                found.head_bytes
            };
            let recorded = recorded_used.get(&name).copied().unwrap_or(0);
            if head_bytes != recorded {
                visitor.report.used_mismatches.push(format!(
                    "{name}: blocks add up to {head_bytes} bytes, directory says {recorded}"
                ));
            }
        }
        // What destroys left to free in the background is still allocated.
        let (freeing, problems) = crate::check_snapshots::pending_free_blocks(&self.core)?;
        visitor.report.snapshot_problems.extend(problems);
        // The MOS walk counts every object as referenced: deadlist parts are accounted for
        // by object.
        let problems = crate::check_snapshots::deadlist_object_problems(&self.core)?;
        visitor.report.snapshot_problems.extend(problems);
        visitor.dataset = format!("{} (being freed)", self.core.name);
        for bp in freeing {
            visitor.check(&VisitedBlock {
                bp,
                object: 0,
                level: bp.level,
                blkid: 0,
                data_block_size: 0,
            });
        }
        Ok(())
    }

    /// Verifies every block and the space accounting of the last synced txg.
    pub fn check(&self) -> Result<CheckReport, EngineError> {
        // On a live pool, freeze txg syncs for the duration: hold the open txg (it cannot
        // quiesce) and wait for any sync already in flight, so the allocator and the tree
        // describe the same txg. Writers keep going into the open txg meanwhile.
        let _freeze = match self.txg_engine() {
            Ok(engine) => {
                self.sync()?;
                Some(crate::core::freeze_syncs(engine)?)
            }
            Err(_) => None,
        };
        let uberblock = self.core.uberblock.lock().clone();
        let _hold = crate::core::ScanGuard::hold(&self.core, uberblock.txg);
        let chain = self.core.space_log.lock().chain.clone();
        // As of the checked txg: on a live pool the intent log keeps allocating blocks for the
        // open txg while we look; they are neither leaks nor part of what is checked.
        let allocated: Vec<Extent> = self
            .core
            .space
            .lock()
            .allocated_extents_as_of(uberblock.txg);
        let mut visitor = CheckVisitor {
            io: &self.core.io,
            dataset: format!("{} (pool metadata)", self.core.name),
            extents: Vec::new(),
            visited: Vec::new(),
            report: CheckReport {
                txg: uberblock.txg,
                ..Default::default()
            },
        };
        walk_objset(&uberblock.root_bp, &mut visitor);
        for bp in &chain {
            visitor.check(&VisitedBlock {
                bp: *bp,
                object: 0,
                level: 0,
                blkid: 0,
                data_block_size: 0,
            });
        }
        let mut log_extents: BTreeSet<Extent> = BTreeSet::new();
        self.check_datasets(&mut visitor, uberblock.txg, &allocated, &mut log_extents)?;
        // Taken last: a block allocated in the checked txg by a commit still building its
        // batch when the check started is in its lane by now.
        for log in self.core.intent_logs.lock().values() {
            for dva in log.held_blocks() {
                let extent = (dva.vdev, dva.offset, u64::from(dva.asize));
                if within(&allocated, extent) {
                    log_extents.insert(extent);
                }
            }
        }
        let mut report = visitor.report;
        report.intent_log_bytes = log_extents.iter().map(|extent| extent.2).sum();
        report.referenced_bytes += report.intent_log_bytes;
        visitor.extents.extend(log_extents);
        if self.txg_engine().is_err() {
            self.check_namespaces(&mut report);
        }
        let referenced = coalesce(visitor.extents, &mut report.double_references);
        report.allocated_bytes = allocated.iter().map(|extent| extent.2).sum();
        if report.double_references.is_empty() {
            // Every referenced byte is counted once, so the two sums describe one set.
            debug_assert_eq!(
                referenced.iter().map(|extent| extent.2).sum::<u64>(),
                report.referenced_bytes,
                "referenced bytes counted apart from the referenced extents"
            );
        }
        for (vdev, offset, len) in subtract(&allocated, &referenced) {
            report
                .leaks
                .push(format!("vdev {vdev} offset {offset} length {len}"));
        }
        for (vdev, offset, len) in subtract(&referenced, &allocated) {
            report
                .references_to_free_space
                .push(format!("vdev {vdev} offset {offset} length {len}"));
        }
        Ok(report)
    }
}

/// Whether `extent` lies inside one of `sorted` (coalesced extents by vdev and offset).
fn within(sorted: &[Extent], (vdev, offset, len): Extent) -> bool {
    let index = sorted.partition_point(|&(v, o, _)| (v, o) <= (vdev, offset));
    index > 0 && {
        let (v, o, l) = sorted[index - 1];
        v == vdev && offset + len <= o + l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtract_leaves_the_uncovered_parts() {
        let a = vec![(0, 0, 100), (1, 0, 50)];
        let b = vec![(0, 10, 10), (0, 50, 100), (1, 0, 50)];
        assert_eq!(subtract(&a, &b), vec![(0, 0, 10), (0, 20, 30)]);
        assert_eq!(subtract(&b, &a), vec![(0, 100, 50)]);
    }

    #[test]
    fn within_finds_the_covering_extent() {
        let sorted = vec![(0, 0, 100), (0, 200, 50), (1, 0, 10)];
        assert!(within(&sorted, (0, 10, 90)));
        assert!(within(&sorted, (0, 200, 50)));
        assert!(!within(&sorted, (0, 90, 20)));
        assert!(!within(&sorted, (0, 150, 10)));
        assert!(!within(&sorted, (1, 5, 10)));
        assert!(!within(&sorted, (2, 0, 1)));
    }

    #[test]
    fn coalesce_reports_overlaps_only() {
        let mut overlaps = Vec::new();
        let merged = coalesce(vec![(0, 10, 10), (0, 0, 10), (0, 15, 10)], &mut overlaps);
        assert_eq!(merged, vec![(0, 0, 25)]);
        assert_eq!(overlaps.len(), 1);
    }
}
