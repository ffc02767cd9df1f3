//! Missed txgs: what a mirror side that was out (FAULTED, missing) lacks, and bringing it
//! back (ZFS's dirty-time log, DTL).
//!
//! While a side is out its mirror keeps every write on its other sides. When it returns —
//! `pool clear` once its device answers again, or an import that finds it — it holds every
//! block born before it left, none born while it was out. It must not be read for those, nor
//! counted as a copy, until they have been copied to it: it rejoins *resilvering* (written,
//! never read, its mirror DEGRADED) and the resilver (`resilver.rs`, the machinery of `pool
//! attach`) copies only the blocks born in its missed range, then clears the range. Blocks
//! born outside the range it holds, and it is read for them.
//!
//! The range (`MissedTxgs`, one interval per leaf) lives in the dataset directory, so it is
//! written with the txg and survives a restart (`docs/format.md`):
//! - every txg sync, before the directory is encoded, a data leaf that is out while another
//!   side of its vdev is readable gets `[first, open)`: `first` is one past the last txg it
//!   was seen to take whole (`clean_through`, advanced at the end of every sync for leaves
//!   readable then). A leaf out with no readable sibling gets nothing: its vdev writes nothing
//!   without it (the sync suspends), so it misses nothing;
//! - a side that fails while txg t syncs is recorded only in t+1's directory. A crash between
//!   the two leaves t durable without the record, but also without t's uberblock on that
//!   side (a faulted leaf is written no more): import compares each side's newest uberblock
//!   with the one it opens and adds the gap (`label_gaps`);
//! - at rejoin the range is closed at the txg open right after the leaf took writes again
//!   (every later txg opened with it in the tree) and a fresh resilver record is written in
//!   the same txg; the resilver's finish removes the range in the txg that marks it done;
//! - a side attached and never filled (its resilver unfinished) that goes out gets a range
//!   from txg 0: its resilver must start over in full.
//!
//! Invariants: a leaf with a range is never read for a block born in it (`Leaf::can_read`,
//! `Leaf::set_missed`) while a complete sibling exists, and never counts as a copy
//! (`Leaf::is_readable`); it is read for blocks born outside it, which it holds (an intent-log
//! block or a block written after it came back may have no other good copy); the range only grows until the resilver that covered all of it
//! finishes; a range is cleared only with the resilver record's end, in one txg.

use crate::core::PoolCore;
use crate::resilver::{ResilverOptions, data_tops, fresh_record};
use crate::{EngineError, Pool};
use cairn_dataset::{DatasetDirectory, MissedTxgs};
use cairn_pool::labels::read_uberblocks;
use cairn_pool::vdev::{Health, Leaf, TopVdev, VdevTree};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Adds `range` to what leaf `guid` lacks; true if the directory changed. A leaf whose
/// attach resilver is unfinished lacks everything older as well: its range starts at 0.
pub(crate) fn record_missed(
    directory: &mut DatasetDirectory,
    guid: u64,
    range: MissedTxgs,
) -> bool {
    let unfilled_attach = !directory.missed_txgs.leaves.contains_key(&guid)
        && directory
            .resilver
            .as_ref()
            .is_some_and(|record| record.leaf_guid == guid && record.finished_ms.is_none());
    let range = if unfilled_attach {
        MissedTxgs {
            first_txg: 0,
            ..range
        }
    } else {
        range
    };
    let merged = match directory.missed_txgs.leaves.get(&guid) {
        Some(old) => old.merged(range),
        None => range,
    };
    directory.missed_txgs.leaves.insert(guid, merged) != Some(merged)
}

/// A range as the leaf keeps it (inclusive; `u64::MAX` while open).
pub(crate) fn leaf_range(range: MissedTxgs) -> (u64, u64) {
    (range.first_txg, range.last_txg.unwrap_or(u64::MAX))
}

/// Everything: what a side lacks until its range is known.
const EVERY_TXG: (u64, u64) = (0, u64::MAX);

/// Whether some other side of `top` is readable (holds every block).
fn has_readable_sibling(top: &TopVdev, guid: u64) -> bool {
    top.leaves
        .iter()
        .any(|leaf| leaf.guid != guid && leaf.is_readable())
}

impl PoolCore {
    /// Records the data leaves that are out now (start of a txg sync, before the directory
    /// is encoded); true if the directory changed.
    pub(crate) fn note_missed_txgs(&self) -> bool {
        let tree = self.tree();
        let clean_through = self.clean_through.lock().clone();
        let mut directory = self.directory.lock();
        let mut changed = false;
        for top in data_tops(&tree) {
            for leaf in &top.leaves {
                if leaf.is_usable() || !has_readable_sibling(top, leaf.guid) {
                    continue;
                }
                let first_txg = clean_through.get(&leaf.guid).map_or(0, |txg| txg + 1);
                changed |= record_missed(
                    &mut directory,
                    leaf.guid,
                    MissedTxgs {
                        first_txg,
                        last_txg: None,
                    },
                );
                // Not read while out anyway; should it be taken back by any path, it is
                // not read for what it lacks.
                let range = directory.missed_txgs.leaves.get(&leaf.guid).copied();
                leaf.set_missed(range.map(leaf_range));
            }
        }
        changed
    }

    /// End of the sync of `txg`: every leaf readable now took all of it.
    pub(crate) fn note_clean_through(&self, txg: u64) {
        let tree = self.tree();
        let mut clean_through = self.clean_through.lock();
        for leaf in tree.leaves() {
            if leaf.is_readable() {
                clean_through.insert(leaf.guid, txg);
            }
        }
    }

    /// What leaf `guid` lacks, if anything.
    pub(crate) fn missed_range(&self, guid: u64) -> Option<MissedTxgs> {
        self.directory.lock().missed_txgs.leaves.get(&guid).copied()
    }
}

/// The newest uberblock txg of this pool on each present leaf (none readable: 0).
pub(crate) fn newest_uberblocks(tree: &VdevTree, pool_guid: u64) -> BTreeMap<u64, u64> {
    tree.leaves()
        .filter_map(|leaf| {
            let device = leaf.device()?;
            let newest = read_uberblocks(device.as_ref())
                .iter()
                .filter(|ub| ub.pool_guid == pool_guid)
                .map(|ub| ub.txg)
                .max()
                .unwrap_or(0);
            Some((leaf.guid, newest))
        })
        .collect()
}

/// The leaves of data vdevs whose newest uberblock is older than `txg` while a complete
/// sibling's is not: they were out when a later txg was committed (a fault the directory of
/// `txg` may not record yet; or only that txg's uberblock write, cut by a crash, which costs a
/// needless copy of that txg's blocks). `incomplete` leaves (an attached side not yet filled,
/// sides already missing txgs) prove no gap: a crash cut between two uberblock writes can
/// leave one of them newer than a complete side. By leaf guid, the first txg each may lack.
pub(crate) fn label_gaps(
    tree: &VdevTree,
    newest: &BTreeMap<u64, u64>,
    incomplete: &[u64],
    txg: u64,
) -> BTreeMap<u64, u64> {
    let mut gaps = BTreeMap::new();
    for top in data_tops(tree) {
        let current = |leaf: &Arc<Leaf>| {
            !incomplete.contains(&leaf.guid) && newest.get(&leaf.guid).is_some_and(|&ub| ub >= txg)
        };
        for leaf in &top.leaves {
            let Some(&leaf_newest) = newest.get(&leaf.guid) else {
                continue;
            };
            if leaf_newest < txg
                && top
                    .leaves
                    .iter()
                    .any(|other| other.guid != leaf.guid && current(other))
            {
                gaps.insert(leaf.guid, leaf_newest + 1);
            }
        }
    }
    gaps
}

impl Pool {
    /// Import, once the directory of `txg` is loaded: adds the label gaps (`label_gaps` of
    /// each leaf's `newest` uberblock) to the recorded ranges, closes the ranges of leaves
    /// present again at `txg` (from the next txg on every write reaches them), drops those of
    /// leaves no longer in the tree, and marks every present leaf with a range and a complete
    /// sibling as resilvering. Returns the leaves whose range changed (their resilver starts
    /// over) and notes for the front end.
    pub(crate) fn settle_missed_at_import(
        &self,
        newest: &BTreeMap<u64, u64>,
        txg: u64,
    ) -> (Vec<u64>, Vec<String>) {
        let tree = self.core.tree();
        let mut changed = Vec::new();
        let mut notes = Vec::new();
        let mut directory = self.core.directory.lock();
        directory
            .missed_txgs
            .leaves
            .retain(|guid, _| tree.leaves().any(|leaf| leaf.guid == *guid));
        let unfilled_attach = directory
            .resilver
            .as_ref()
            .filter(|record| record.finished_ms.is_none())
            .map(|record| record.leaf_guid);
        let incomplete: Vec<u64> = directory
            .missed_txgs
            .leaves
            .keys()
            .copied()
            .chain(unfilled_attach)
            .collect();
        let gaps = label_gaps(&tree, newest, &incomplete, txg);
        for top in data_tops(&tree) {
            for leaf in &top.leaves {
                if !leaf.is_usable() {
                    continue;
                }
                let mut leaf_changed = false;
                if let Some(&first_txg) = gaps.get(&leaf.guid) {
                    leaf_changed |= record_missed(
                        &mut directory,
                        leaf.guid,
                        MissedTxgs {
                            first_txg,
                            last_txg: Some(txg),
                        },
                    );
                }
                let Some(range) = directory.missed_txgs.leaves.get_mut(&leaf.guid) else {
                    continue;
                };
                if range.last_txg.is_none() {
                    range.last_txg = Some(txg);
                    leaf_changed = true;
                }
                let range = *range;
                let others_complete = top.leaves.iter().any(|other| {
                    other.guid != leaf.guid
                        && other.is_usable()
                        && unfilled_attach != Some(other.guid)
                        && !directory.missed_txgs.leaves.contains_key(&other.guid)
                });
                if others_complete {
                    leaf.set_missed(Some(leaf_range(range)));
                    if leaf_changed {
                        changed.push(leaf.guid);
                    }
                } else {
                    // Nothing else holds those blocks: reads go to it (each verified), and
                    // it is resilvered if a complete side comes back.
                    leaf.set_missed(None);
                    notes.push(format!(
                        "pool '{}': {} may lack blocks born in txgs {}..={txg} and no other \
                         side holds them",
                        self.core.name, leaf.spec, range.first_txg
                    ));
                }
            }
        }
        (changed, notes)
    }

    /// `pool clear`: faulted sides of data mirrors whose device answers again (and that have a
    /// readable sibling) rejoin resilvering, as do `returning` (sides with a range that the
    /// resume of suspended I/O took back, marked resilvering before). Their ranges are closed
    /// at the txg open now, and their resilver starts.
    pub(crate) fn bring_back_sides(
        &self,
        returning: Vec<Arc<Leaf>>,
        options: ResilverOptions,
    ) -> Result<(), EngineError> {
        let engine = self.txg_engine()?.clone();
        let tree = self.core.tree();
        let mut back = returning;
        for top in data_tops(&tree) {
            for leaf in &top.leaves {
                if leaf.health() != Health::Faulted
                    || !has_readable_sibling(top, leaf.guid)
                    || !device_answers(leaf, self.core.guid)
                {
                    continue;
                }
                leaf.set_missed(Some(EVERY_TXG));
                leaf.unfault();
                back.push(leaf.clone());
            }
        }
        if back.is_empty() {
            return Ok(());
        }
        // Every txg opened from now on was opened with these leaves taking writes.
        let last_txg = engine.open_txg();
        let guids: Vec<u64> = back
            .iter()
            .filter(|leaf| leaf.is_usable())
            .map(|leaf| leaf.guid)
            .collect();
        // A leaf's uberblocks say when it last took a whole txg (it may have failed before
        // the directory recorded it).
        let newest = newest_uberblocks(&tree, self.core.guid);
        let sync_guids = guids.clone();
        self.run_sync_task(move |core, _| {
            let clean_through = core.clean_through.lock().clone();
            let tree = core.tree();
            let mut directory = core.directory.lock();
            for guid in sync_guids {
                let first_txg = clean_through
                    .get(&guid)
                    .copied()
                    .into_iter()
                    .chain(newest.get(&guid).copied())
                    .min()
                    .map_or(0, |txg| txg + 1);
                record_missed(
                    &mut directory,
                    guid,
                    MissedTxgs {
                        first_txg,
                        last_txg: Some(last_txg),
                    },
                );
                if let Some(range) = directory.missed_txgs.leaves.get_mut(&guid) {
                    range.last_txg = Some(last_txg);
                    // Read again for every block born outside what it missed.
                    if let Some(leaf) = tree.leaves().find(|leaf| leaf.guid == guid) {
                        leaf.set_missed(Some(leaf_range(*range)));
                    }
                }
            }
            Ok(())
        })?;
        self.resilver_missed(&guids, options)
    }

    /// Starts resilvering the leaves in `guids` (each with a recorded range) one after the
    /// other, each from a fresh record.
    pub(crate) fn resilver_missed(
        &self,
        guids: &[u64],
        options: ResilverOptions,
    ) -> Result<(), EngineError> {
        let Some(&first) = guids.first() else {
            return Ok(());
        };
        self.stop_resilver();
        fresh_record(&self.core, self.txg_engine()?, first)?;
        self.start_resilver(first, options)
    }
}

/// Whether a faulted leaf's device reads its labels and flushes again.
fn device_answers(leaf: &Leaf, pool_guid: u64) -> bool {
    let Some(device) = leaf.device() else {
        return false;
    };
    device.flush().is_ok()
        && read_uberblocks(device.as_ref())
            .iter()
            .any(|ub| ub.pool_guid == pool_guid)
}
