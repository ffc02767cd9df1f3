//! Clones in the snapshot table: which dataset is a clone of which snapshot, what a clone
//! shares with its origin, and promote. The accounting rules are in `snapshots.rs`'s module
//! doc ("Clones"); this file keeps the operations on the origin records apart from the rest
//! of the table.

use crate::DatasetError;
use crate::snapshots::{ORIGIN_CHAIN_MAX, RecordKey, Snapshot, SnapshotTable};
use std::collections::BTreeMap;

impl SnapshotTable {
    /// The txg a clone's origin was taken in (0 for a dataset that is no clone): the clone
    /// shares every block born by it with the origin, and holds none of them alone.
    pub fn floor_txg(&self, dataset_id: u64) -> u64 {
        self.origin_of(dataset_id)
            .map_or(0, |origin| origin.info.created_txg)
    }

    /// The origin snapshot of a clone.
    pub fn origin_of(&self, dataset_id: u64) -> Option<&Snapshot> {
        self.origins
            .get(&dataset_id)
            .and_then(|id| self.snapshots.get(id))
    }

    /// The clones of snapshot `id`, by dataset id.
    /// Every clone by its origin snapshot's id, in one pass (a listing of every snapshot
    /// asks this once, not `clones_of` per snapshot).
    pub fn clones_by_origin(&self) -> BTreeMap<u64, Vec<u64>> {
        let mut by_origin: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (&clone, &origin) in &self.origins {
            by_origin.entry(origin).or_default().push(clone);
        }
        by_origin
    }

    pub fn clones_of(&self, id: u64) -> Vec<u64> {
        self.origins
            .iter()
            .filter(|&(_, origin)| *origin == id)
            .map(|(&clone, _)| clone)
            .collect()
    }

    /// Bytes the head of a clone still shares with its origin (0 for a dataset that is no
    /// clone): the origin's referenced bytes less those of its blocks the clone's head has
    /// stopped referencing, which sit on the clone's deadlists keyed below the floor.
    pub fn origin_shared_bytes(&self, dataset_id: u64) -> u64 {
        let Some(origin) = self.origin_of(dataset_id) else {
            return 0;
        };
        let floor = origin.info.created_txg;
        let died: u64 = self
            .lists_of(dataset_id)
            .map(|list| list.space_range(0, floor).allocated_bytes)
            .sum();
        origin.info.referenced_bytes.saturating_sub(died)
    }

    /// Dataset `dataset_id`, new in this txg, is a clone of snapshot `origin_id` (its head is
    /// the snapshot's tree): from now on it keeps for the origin every block born by the
    /// origin's txg (`prev_snap_txg`).
    pub fn add_clone(&mut self, dataset_id: u64, origin_id: u64) -> Result<(), DatasetError> {
        if !self.snapshots.contains_key(&origin_id) {
            return Err(DatasetError::NoSuchDataset(format!("snapshot {origin_id}")));
        }
        assert!(
            self.snapshots_of(dataset_id).next().is_none() && !self.heads.contains_key(&dataset_id),
            "a clone must be a new dataset"
        );
        self.origins.insert(dataset_id, origin_id);
        self.dirty.insert(RecordKey::Origin(dataset_id));
        Ok(())
    }

    /// A dataset without snapshots is destroyed: its head's deadlist and its origin record
    /// go. Returns the deadlist's objects no background free still reads, for the caller to
    /// free. (A clone's deadlist holds only blocks born by its origin's txg by then, which
    /// the origin still holds; the rest went with its last snapshot.)
    pub fn forget_dataset(&mut self, dataset_id: u64) -> Vec<u64> {
        self.forget_bookmarks(dataset_id);
        if self.origins.remove(&dataset_id).is_some() {
            self.dirty.insert(RecordKey::Origin(dataset_id));
        }
        self.forget_head(dataset_id)
    }

    /// A receive's swap: clone `clone_id`, made of the newest snapshot of `dataset_id` and
    /// without snapshots of its own, becomes that dataset's head (the engine swaps the trees
    /// and destroys the clone's record). The dataset's own head must have been rolled back
    /// first (`rollback`: its deadlist gone). The clone's deadlist holds what it stopped
    /// referencing of the origin's tree, keyed by the origin's lineage (`key_of`), so the very
    /// keys the dataset's head would have used: it becomes the head's as it is; the newest
    /// snapshot's `used` then counts its blocks born after its predecessor, as `kill` would
    /// have. The clone's origin record goes.
    pub fn adopt_clone_head(&mut self, clone_id: u64, dataset_id: u64) -> Result<(), DatasetError> {
        let newest = self
            .newest(dataset_id)
            .map(|s| (s.info.id, s.info.created_txg));
        let origin = self.origins.get(&clone_id).copied();
        let Some((newest_id, newest_txg)) = newest.filter(|&(id, _)| Some(id) == origin) else {
            return Err(DatasetError::InvalidName {
                name: format!("dataset {clone_id}"),
                reason: format!("not a clone of the newest snapshot of dataset {dataset_id}"),
            });
        };
        assert!(
            self.snapshots_of(clone_id).next().is_none() && !self.heads.contains_key(&dataset_id),
            "a clone swapped in has no snapshot, and the head it replaces was rolled back"
        );
        self.origins.remove(&clone_id);
        self.dirty.insert(RecordKey::Origin(clone_id));
        if let Some(list) = self.heads.remove(&clone_id) {
            self.dirty.insert(RecordKey::Head(clone_id));
            let before_newest = self.neighbour(dataset_id, newest_txg, false).1;
            let unique = list.space_range(before_newest, newest_txg).allocated_bytes;
            self.heads.insert(dataset_id, list);
            self.dirty.insert(RecordKey::Head(dataset_id));
            self.snapshot_mut(newest_id).info.unique_bytes = unique;
            self.dirty.insert(RecordKey::Snapshot(newest_id));
        }
        Ok(())
    }

    /// Promotes clone `clone_id`: its origin and every older snapshot of the origin's
    /// dataset become the clone's, the clone takes the origin's dataset's place in a chain
    /// of clones, and that dataset becomes a clone of the origin. Deadlists are keyed by
    /// lineage (`key_of`), so none changes; the origin's `used` is recomputed against its new
    /// successor. Refused when the clone has a snapshot of the name of one that would move.
    /// Returns the moved snapshots' ids, oldest first.
    pub fn promote(&mut self, clone_id: u64) -> Result<Vec<u64>, DatasetError> {
        let origin = self
            .origin_of(clone_id)
            .ok_or_else(|| DatasetError::InvalidName {
                name: format!("dataset {clone_id}"),
                reason: "not a clone".into(),
            })?;
        let (origin_id, origin_txg, parent_id) = (
            origin.info.id,
            origin.info.created_txg,
            origin.info.dataset_id,
        );
        let moving: Vec<(u64, u64)> = self
            .by_dataset
            .range((parent_id, 0)..=(parent_id, origin_txg))
            .map(|(&(_, txg), &id)| (txg, id))
            .collect();
        for &(_, id) in &moving {
            let name = &self.snapshots[&id].info.name;
            if self.find(clone_id, name).is_some() {
                return Err(DatasetError::Exists(format!(
                    "@{name} (the clone has a snapshot of the name of one that would move to it)"
                )));
            }
        }
        self.move_bookmarks(parent_id, clone_id, origin_txg)?;
        for &(txg, id) in &moving {
            self.by_dataset.remove(&(parent_id, txg));
            self.by_dataset.insert((clone_id, txg), id);
            let name = self.snapshots[&id].info.name.clone();
            self.unindex_snapshot(parent_id, &name);
            self.index_snapshot(clone_id, &name, id);
            self.snapshot_mut(id).info.dataset_id = clone_id;
            self.dirty.insert(RecordKey::Snapshot(id));
        }
        match self.origins.remove(&parent_id) {
            Some(grand_origin) => self.origins.insert(clone_id, grand_origin),
            None => self.origins.remove(&clone_id),
        };
        self.origins.insert(parent_id, origin_id);
        self.dirty.insert(RecordKey::Origin(clone_id));
        self.dirty.insert(RecordKey::Origin(parent_id));
        // The origin's successor is now the clone's first snapshot after it, or its head.
        let before_origin = self.neighbour(clone_id, origin_txg, false).1;
        let (next_id, _) = self.neighbour(clone_id, origin_txg, true);
        let successor = match next_id {
            Some(next) => Some(&self.snapshots[&next].deadlist),
            None => self.heads.get(&clone_id),
        };
        let unique = successor.map_or(0, |list| {
            list.space_range(before_origin, origin_txg).allocated_bytes
        });
        self.snapshot_mut(origin_id).info.unique_bytes = unique;
        self.check_name_index();
        self.check_origins()?;
        Ok(moving.into_iter().map(|(_, id)| id).collect())
    }

    /// Every origin is a snapshot of another dataset, and no chain of clones loops.
    pub(crate) fn check_origins(&self) -> Result<(), DatasetError> {
        for (&clone, &origin_id) in &self.origins {
            let origin = self.snapshots.get(&origin_id).ok_or_else(|| {
                DatasetError::Corrupt(format!(
                    "dataset {clone} is a clone of snapshot {origin_id}, which does not exist"
                ))
            })?;
            if self
                .snapshots_of(clone)
                .next()
                .is_some_and(|first| first.info.created_txg <= origin.info.created_txg)
            {
                return Err(DatasetError::Corrupt(format!(
                    "clone {clone} has a snapshot not after its origin {origin_id}"
                )));
            }
            let mut dataset = origin.info.dataset_id;
            let mut steps = 0;
            while let Some(next) = self.origin_of(dataset) {
                steps += 1;
                if dataset == clone || steps > ORIGIN_CHAIN_MAX.min(self.origins.len()) {
                    return Err(DatasetError::Corrupt(format!(
                        "the origins of clone {clone} loop"
                    )));
                }
                dataset = next.info.dataset_id;
            }
            if dataset == clone {
                return Err(DatasetError::Corrupt(format!(
                    "the origins of clone {clone} loop"
                )));
            }
        }
        Ok(())
    }
}
