//! Frees and what follows them: `free` (deferred, and a refusal kept as the allocator's fault),
//! `unallocate`, the release of deferred frees as txgs sync (`sync_done`, the release and read
//! floors), and the per-txg change records the engine writes to the space log
//! (`take_changes`).
//!
//! Invariants: freed space is not reusable before `DEFER_TXGS` further txgs have synced, nor
//! while a floor at or below its txg is set; changes are taken as all Allocs of a txg, then all
//! Frees. This file uses `state` below it.

use super::state::SpaceAllocator;
use crate::space::range_tree::RangeTree;
use crate::space::{DEFER_TXGS, SpaceError};
use cairn_format::{Dva, SpaceLogEntry, SpaceOp};
use std::collections::BTreeMap;

impl SpaceAllocator {
    /// Frees a copy in txg `txg`: its space becomes reusable once txg `txg + DEFER_TXGS` has
    /// synced. Errors (changing nothing) unless every byte of it is allocated; the first such
    /// refusal also becomes the allocator's fault (see "Faults" above). Records a Free.
    pub fn free(&mut self, dva: &Dva, txg: u64) -> Result<(), SpaceError> {
        self.free_checked(dva, txg).inspect_err(|err| {
            if self.fault.is_none() {
                self.fault = Some(SpaceError::FreeRefused {
                    txg,
                    source: Box::new(err.clone()),
                });
            }
        })
    }

    /// The first free this allocator refused, if any: its space accounting no longer matches
    /// the block pointers, and no txg may be committed (see "Faults" above).
    pub fn fault(&self) -> Option<&SpaceError> {
        self.fault.as_ref()
    }

    fn free_checked(&mut self, dva: &Dva, txg: u64) -> Result<(), SpaceError> {
        self.check_txg_open(txg)?;
        let index = self.vdev_index(dva.vdev)?;
        let length = u64::from(dva.asize);
        let vdev = &mut self.vdevs[index];
        vdev.check_extent(dva.offset, length)?;
        vdev.defer_free(dva.offset, length)?;
        Self::record(
            self.deferred_by_txg.entry(txg).or_default(),
            dva.vdev,
            dva.offset,
            length,
        );
        Self::record(
            &mut self.changes.entry(txg).or_default().frees,
            dva.vdev,
            dva.offset,
            length,
        );
        Ok(())
    }

    /// Undoes an allocation made in txg `txg` whose changes have not been taken yet (a write
    /// that failed and will be retried elsewhere): the space is free again at once, without the
    /// defer window, since no synced state can reference it, and its Alloc record is dropped.
    pub fn unallocate(&mut self, dva: &Dva, txg: u64) -> Result<(), SpaceError> {
        self.check_txg_open(txg)?;
        let index = self.vdev_index(dva.vdev)?;
        let length = u64::from(dva.asize);
        self.vdevs[index].check_extent(dva.offset, length)?;
        let recorded = self
            .changes
            .get(&txg)
            .and_then(|changes| changes.allocs.get(&dva.vdev))
            .is_some_and(|extents| extents.contains(dva.offset, length));
        if !recorded {
            return Err(SpaceError::NotAllocatedInTxg {
                vdev: dva.vdev,
                offset: dva.offset,
                length,
                txg,
            });
        }
        self.vdevs[index].free_now(dva.offset, length)?;
        self.changes
            .get_mut(&txg)
            .and_then(|changes| changes.allocs.get_mut(&dva.vdev))
            .expect("checked recorded above")
            .remove(dva.offset, length)
            .expect("checked recorded above");
        Ok(())
    }

    /// Txg `synced_txg` is durable: frees of txgs `<= synced_txg - DEFER_TXGS` become reusable.
    /// Allocations and frees for txgs `<= synced_txg` are refused from now on. A txg lower than
    /// one already reported changes nothing.
    pub fn sync_done(&mut self, synced_txg: u64) {
        let synced_txg = self.synced_txg.map_or(synced_txg, |s| s.max(synced_txg));
        self.synced_txg = Some(synced_txg);
        let Some(mut release_txg_max) = synced_txg.checked_sub(DEFER_TXGS) else {
            return;
        };
        let floor = match (self.release_floor, self.read_floor) {
            (Some(scan), Some(read)) => Some(scan.min(read)),
            (scan, read) => scan.or(read),
        };
        if let Some(floor) = floor {
            let Some(below_floor) = floor.checked_sub(1) else {
                return;
            };
            release_txg_max = release_txg_max.min(below_floor);
        }
        let kept = self.deferred_by_txg.split_off(&(release_txg_max + 1));
        let released = std::mem::replace(&mut self.deferred_by_txg, kept);
        for per_vdev in released.into_values() {
            for (vdev, extents) in per_vdev {
                let index = self
                    .vdev_index(vdev)
                    .expect("deferred frees are only recorded for known vdevs");
                for (start, end) in extents.iter() {
                    self.vdevs[index]
                        .release_deferred(start, end - start)
                        .expect("per-txg deferred extents are part of the vdev's deferred set");
                }
            }
        }
    }

    /// Drains the changes recorded for `txg`: coalesced Alloc entries (by vdev, offset), then
    /// coalesced Free entries (by vdev, offset). Changes of other txgs stay.
    pub fn take_changes(&mut self, txg: u64) -> Vec<SpaceLogEntry> {
        let Some(changes) = self.changes.remove(&txg) else {
            return Vec::new();
        };
        let entries = |op: SpaceOp, per_vdev: BTreeMap<u32, RangeTree>| {
            per_vdev.into_iter().flat_map(move |(vdev, extents)| {
                extents
                    .iter()
                    .map(|(start, end)| SpaceLogEntry {
                        vdev,
                        op,
                        offset: start,
                        length: end - start,
                        txg,
                    })
                    .collect::<Vec<_>>()
            })
        };
        entries(SpaceOp::Alloc, changes.allocs)
            .chain(entries(SpaceOp::Free, changes.frees))
            .collect()
    }

    /// Txgs with recorded changes not yet taken, ascending.
    pub fn pending_change_txgs(&self) -> Vec<u64> {
        self.changes.keys().copied().collect()
    }

    /// Whether some deferred free would be released by syncing more txgs (none is held back
    /// by the release floor): the engine then syncs txgs even while idle, so freed space comes
    /// back without waiting for new writes.
    pub fn has_releasable_deferred(&self) -> bool {
        match (self.deferred_by_txg.keys().next(), self.release_floor) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(&oldest_txg), Some(floor_txg)) => oldest_txg < floor_txg,
        }
    }

    /// Holds back the reuse of space freed in `txg` or later (`Some`) until released (`None`);
    /// frees already older stay on their normal schedule. Used while a scan walks a tree.
    pub fn set_release_floor(&mut self, txg: Option<u64>) {
        self.release_floor = txg;
    }

    /// Like `set_release_floor`, for reads in flight (the oldest one's synced txg); the lower
    /// of the two floors holds.
    pub fn set_read_floor(&mut self, txg: Option<u64>) {
        self.read_floor = txg;
    }

    /// How many entries `take_changes(txg)` would return now (coalesced segments).
    pub fn pending_change_count(&self, txg: u64) -> usize {
        self.changes.get(&txg).map_or(0, |changes| {
            changes
                .allocs
                .values()
                .chain(changes.frees.values())
                .map(|tree| tree.segment_count())
                .sum()
        })
    }

    pub(super) fn check_txg_open(&self, txg: u64) -> Result<(), SpaceError> {
        match self.synced_txg {
            Some(synced_txg) if txg <= synced_txg => {
                Err(SpaceError::TxgAlreadySynced { txg, synced_txg })
            }
            _ => Ok(()),
        }
    }

    /// Adds an extent to a per-vdev change or deferred set. Within one txg an extent is
    /// allocated at most once and freed at most once (see the module comment), so the sets
    /// never see an overlap.
    pub(super) fn record(
        per_vdev: &mut BTreeMap<u32, RangeTree>,
        vdev: u32,
        offset: u64,
        length: u64,
    ) {
        per_vdev
            .entry(vdev)
            .or_default()
            .add(offset, length)
            .expect("an extent is recorded at most once per txg and operation");
    }
}
