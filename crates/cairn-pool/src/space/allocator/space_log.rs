//! The allocator and the space log: `replay` (rebuild the state from logged changes or a
//! checkpoint), `checkpoint_entries` (the whole state as entries) and the extent lists they and
//! the checks use (`allocated_extents`, `allocated_extents_as_of`, `deferred_extents`).
//!
//! Invariants: replaying every change ever taken, or a checkpoint, rebuilds the same allocated
//! and deferred sets; a log contradicting itself is an error, never a panic. This file uses
//! `state` below it.

use super::state::{DeferredFree, SpaceAllocator};
use crate::space::range_tree::RangeTree;
use crate::space::{DEFER_TXGS, SpaceError};
use cairn_format::{SpaceLogEntry, SpaceOp};

impl SpaceAllocator {
    /// Applies space-log entries, oldest first, to this allocator (meant to be fresh: all
    /// free). `current_txg` is the last synced txg (the imported uberblock's): a Free whose
    /// `txg + DEFER_TXGS > current_txg` stays deferred, others free the space at once.
    /// Nothing is recorded for `take_changes`. The first inconsistent entry (alloc of space not
    /// free, free of space not allocated, unknown vdev, extent outside the vdev or misaligned)
    /// stops the replay with `SpaceError::Replay` naming it; entries before it stay applied.
    pub fn replay(
        &mut self,
        entries: impl IntoIterator<Item = SpaceLogEntry>,
        current_txg: u64,
    ) -> Result<(), SpaceError> {
        for (index, entry) in entries.into_iter().enumerate() {
            self.replay_entry(&entry, current_txg)
                .map_err(|source| SpaceError::Replay {
                    index,
                    entry,
                    source: Box::new(source),
                })?;
        }
        self.synced_txg = Some(self.synced_txg.map_or(current_txg, |s| s.max(current_txg)));
        Ok(())
    }

    fn replay_entry(&mut self, entry: &SpaceLogEntry, current_txg: u64) -> Result<(), SpaceError> {
        // A free stamped after the imported txg would stay deferred until that txg, leaking
        // its space (an allocation's stamp decides nothing at replay).
        if entry.op == SpaceOp::Free && entry.txg > current_txg {
            return Err(SpaceError::FutureTxg {
                txg: entry.txg,
                current_txg,
            });
        }
        let index = self.vdev_index(entry.vdev)?;
        let vdev = &mut self.vdevs[index];
        vdev.check_extent(entry.offset, entry.length)?;
        match entry.op {
            SpaceOp::Alloc => vdev.claim(entry.offset, entry.length),
            SpaceOp::Free if entry.txg.saturating_add(DEFER_TXGS) > current_txg => {
                vdev.defer_free(entry.offset, entry.length)?;
                Self::record(
                    self.deferred_by_txg.entry(entry.txg).or_default(),
                    entry.vdev,
                    entry.offset,
                    entry.length,
                );
                Ok(())
            }
            SpaceOp::Free => vdev.free_now(entry.offset, entry.length),
        }
    }

    /// The whole state as log entries: one Alloc (stamped `txg`) per run of not-free space
    /// (allocated or deferred) by vdev and offset, then one Free per deferred extent with its
    /// own txg, by txg, vdev and offset. `replay` of exactly these entries on a fresh allocator
    /// with the same last synced txg rebuilds the same allocated and deferred sets.
    pub fn checkpoint_entries(&self, txg: u64) -> Vec<SpaceLogEntry> {
        let mut entries = Vec::new();
        for vdev in &self.vdevs {
            // The checkpoint describes the state as of `txg`. Allocations already made for
            // later, still open txgs (intent-log blocks are allocated while a txg syncs) are
            // not part of it: their own txg's delta records them. Frees made in later txgs
            // need no care: their extents are deferred now, so still counted as not free.
            let not_free_runs = vdev.complement(&vdev.free_runs());
            let mut later = self
                .changes
                .range(txg + 1..)
                .filter_map(|(_, changes)| changes.allocs.get(&vdev.vdev))
                .peekable();
            // Usually nothing is allocated for a later txg yet: the runs go out as they are,
            // without building a tree of a fragmented pool's hundreds of thousands of them.
            let runs: Vec<(u64, u64)> = if later.peek().is_none() {
                not_free_runs
            } else {
                let mut not_free = RangeTree::new();
                for (offset, length) in not_free_runs {
                    not_free
                        .add(offset, length)
                        .expect("complement runs are disjoint");
                }
                for changes in later {
                    for (start, end) in changes.iter() {
                        not_free
                            .remove(start, end - start)
                            .expect("an extent allocated in an open txg is not free");
                    }
                }
                not_free
                    .iter()
                    .map(|(start, end)| (start, end - start))
                    .collect()
            };
            for (offset, length) in runs {
                entries.push(SpaceLogEntry {
                    vdev: vdev.vdev,
                    op: SpaceOp::Alloc,
                    offset,
                    length,
                    txg,
                });
            }
        }
        entries.extend(
            self.deferred_extents()
                .into_iter()
                .filter(|free| free.txg <= txg)
                .map(|free| SpaceLogEntry {
                    vdev: free.vdev,
                    op: SpaceOp::Free,
                    offset: free.offset,
                    length: free.length,
                    txg: free.txg,
                }),
        );
        entries
    }

    /// At least `checkpoint_entries(txg).len()`, and close to it, without building the
    /// entries: what a sync sizes a checkpoint's blocks by before it allocates them.
    pub fn checkpoint_entry_bound(&self, txg: u64) -> usize {
        // Runs of not-free space alternate with free runs: at most one more of them.
        let not_free_runs: usize = self
            .vdevs
            .iter()
            .map(|vdev| {
                let free_segments: usize = vdev
                    .metaslabs
                    .iter()
                    .map(|metaslab| metaslab.free_tree().segment_count())
                    .sum();
                free_segments + 1
            })
            .sum();
        // An extent allocated for a later txg splits at most one run in two.
        let later_allocs: usize = self
            .changes
            .range(txg + 1..)
            .flat_map(|(_, changes)| changes.allocs.values())
            .map(RangeTree::segment_count)
            .sum();
        let deferred: usize = self
            .deferred_by_txg
            .range(..=txg)
            .flat_map(|(_, per_vdev)| per_vdev.values())
            .map(RangeTree::segment_count)
            .sum();
        not_free_runs + later_allocs + deferred
    }

    /// Allocated extents `(vdev, offset, length)`, coalesced, by vdev and offset. Deferred
    /// frees are not included.
    pub fn allocated_extents(&self) -> Vec<(u32, u64, u64)> {
        self.vdevs
            .iter()
            .flat_map(|vdev| {
                vdev.complement(&vdev.unallocated_runs())
                    .into_iter()
                    .map(|(offset, length)| (vdev.vdev, offset, length))
            })
            .collect()
    }

    /// Allocated extents as the space log of synced txg `txg` has them (for `check` on a live
    /// pool): without the blocks already allocated for later, still open txgs (intent-log
    /// blocks), and with the extents freed in later txgs (still in use as of `txg`). Coalesced,
    /// by vdev and offset.
    pub fn allocated_extents_as_of(&self, txg: u64) -> Vec<(u32, u64, u64)> {
        let mut extents = Vec::new();
        for vdev in &self.vdevs {
            let mut allocated = RangeTree::new();
            for (offset, length) in vdev.complement(&vdev.unallocated_runs()) {
                allocated
                    .add(offset, length)
                    .expect("complement runs are disjoint");
            }
            // Frees first: a block allocated and freed again in an open txg is then removed by
            // its allocation below, as it should be.
            for per_vdev in self
                .deferred_by_txg
                .range(txg + 1..)
                .map(|(_, frees)| frees)
            {
                for (start, end) in per_vdev
                    .get(&vdev.vdev)
                    .into_iter()
                    .flat_map(RangeTree::iter)
                {
                    if !allocated.overlaps(start, end - start) {
                        allocated.add(start, end - start).expect("checked free");
                    }
                }
            }
            for changes in self.changes.range(txg + 1..).map(|(_, changes)| changes) {
                for (start, end) in changes
                    .allocs
                    .get(&vdev.vdev)
                    .into_iter()
                    .flat_map(RangeTree::iter)
                {
                    if allocated.contains(start, end - start) {
                        allocated
                            .remove(start, end - start)
                            .expect("checked allocated");
                    }
                }
            }
            extents.extend(
                allocated
                    .iter()
                    .map(|(start, end)| (vdev.vdev, start, end - start)),
            );
        }
        extents
    }

    /// Deferred frees, coalesced per txg and vdev, by txg, vdev and offset.
    pub fn deferred_extents(&self) -> Vec<DeferredFree> {
        let mut frees = Vec::new();
        for (&txg, per_vdev) in &self.deferred_by_txg {
            for (&vdev, extents) in per_vdev {
                frees.extend(extents.iter().map(|(start, end)| DeferredFree {
                    txg,
                    vdev,
                    offset: start,
                    length: end - start,
                }));
            }
        }
        frees
    }
}
