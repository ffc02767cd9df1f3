//! Clones as the pool's handle offers them: `Pool::clone_snapshot` makes a new dataset whose
//! head is a snapshot's tree, and `Pool::promote` swaps a clone with its origin's dataset. The
//! accounting (what a clone shares with its origin, keys by lineage, what promote moves) is
//! `cairn_dataset::snapshots`.
//!
//! A clone costs a directory record and an origin record: no block is copied or written but
//! the clone's new object-set root in its first txg, so it is created on a pool full for
//! users (as a snapshot is). It is born sparse: a volume clone promises no space
//! (`refreservation=none`), since what it shares with its origin is already paid for. Its
//! blocks born by the origin's txg are the origin's; reads of them hit the same cache entries
//! as the origin's and every other clone's (the ARC is keyed by block address).
//!
//! The clone's intent log starts empty: the snapshot's tree carries the log header of its
//! dataset at the time, whose chain belongs to that dataset and is never replayed here.
//!
//! Invariants: an origin is never destroyed while it has clones (`destroy` refuses; `-R`
//! destroys the clones first); a clone lives in the pool of its origin; a promote changes no
//! block, only which dataset owns which snapshots, so it is one txg, all or nothing.

use crate::EngineError;
use crate::pool::Pool;
use crate::snapshot_stats::SnapshotChange;
use cairn_dataset::directory::{Provisioning, creation_properties, volume_creation_properties};
use cairn_dataset::{DatasetDirectory, DatasetError, DatasetKind, SnapshotName};
use cairn_object::ObjectSet;
use std::sync::Arc;

impl Pool {
    /// Creates dataset `target` as a clone of snapshot `origin` (`dataset@snapshot`), with
    /// creation properties `requested`, durable on return. The clone is of the origin's kind;
    /// a volume clone keeps the origin's size and block size.
    pub fn clone_snapshot(
        &self,
        origin: &str,
        target: &str,
        requested: &[(String, String)],
    ) -> Result<(), EngineError> {
        let started = std::time::Instant::now();
        let parsed = SnapshotName::parse(origin)?;
        let pool_of = |name: &str| name.split(['/', '@']).next().unwrap_or("").to_string();
        if pool_of(target) != pool_of(origin) {
            return Err(DatasetError::InvalidName {
                name: target.to_string(),
                reason: format!(
                    "a clone lives in the pool of its origin ('{}')",
                    pool_of(origin)
                ),
            }
            .into());
        }
        let (kind, properties) = self.clone_properties(&parsed, requested)?;
        self.check_new_dataset(target, kind)?;
        self.snapshot_root(origin)?;
        // The reservations of the new record checked now for a prompt error; the task checks
        // again.
        let mut trial = self.core.directory.lock().clone();
        trial.insert(target, kind, 0, properties.clone())?;
        self.core.check_reservations(&trial, Some(target))?;
        self.make_clone(parsed, target.to_string(), kind, properties)?;
        self.core.snapshot_stats.command_done(started);
        self.apply_properties();
        Ok(())
    }

    /// The clone's sync task: dataset `target` (checked by the caller; a receive's hidden
    /// name too) made of snapshot `parsed`, durable on return.
    pub(crate) fn make_clone(
        &self,
        parsed: SnapshotName,
        target: String,
        kind: DatasetKind,
        properties: std::collections::BTreeMap<String, String>,
    ) -> Result<(), EngineError> {
        self.run_sync_task(move |core, txg| {
            let (origin_id, root, origin_txg, referenced) = {
                let directory = core.directory.lock();
                let dataset = directory.get(&parsed.dataset)?;
                let table = core.snapshots.lock();
                let snapshot = table
                    .find(dataset.id, &parsed.snapshot)
                    .filter(|_| !core.pending_names().contains(&parsed.to_string()))
                    .ok_or_else(|| DatasetError::NoSuchDataset(parsed.to_string()))?;
                (
                    snapshot.info.id,
                    snapshot.info.objset_bp()?,
                    snapshot.info.created_txg,
                    snapshot.info.referenced_bytes,
                )
            };
            if root.is_hole() {
                return Err(DatasetError::InvalidName {
                    name: parsed.to_string(),
                    reason: "a snapshot of a dataset with no object set has nothing to clone"
                        .into(),
                }
                .into());
            }
            // Checks the name and reservations again, in this txg.
            drop(core.insert_dataset(&target, kind, txg, properties)?);
            let checksum = core.directory.lock().properties_of(&target)?.checksum;
            let objset = Arc::new(ObjectSet::open(
                core.mos.cached_io().clone(),
                root,
                checksum,
                txg - 1,
                Some(referenced),
            )?);
            objset.set_prev_snap_txg(origin_txg);
            objset
                .set_intent_log_header(txg, [0; cairn_format::intent_log::INTENT_LOG_HEADER_SIZE]);
            let mut directory = core.directory.lock();
            let mut table = core.snapshots.lock();
            let record = directory.get_mut(&target)?;
            record.set_objset_bp(&root);
            record.used_bytes = referenced;
            table.add_clone(record.id, origin_id)?;
            crate::snapshot_sync::refresh_snapshot_bytes(&mut directory, &table);
            core.objsets.lock().insert(target.clone(), objset);
            core.snapshot_stats.note(SnapshotChange::CloneCreated {
                clone: target,
                origin: parsed.to_string(),
            });
            Ok(())
        })?;
        Ok(())
    }

    /// The kind and creation properties of a clone of `origin`: a volume clone takes its
    /// origin's size and block size (a different block size is refused) and no reservation.
    pub(crate) fn clone_properties(
        &self,
        origin: &SnapshotName,
        requested: &[(String, String)],
    ) -> Result<(DatasetKind, std::collections::BTreeMap<String, String>), EngineError> {
        let directory = self.core.directory.lock();
        let kind = directory.get(&origin.dataset)?.kind;
        let properties = match kind {
            DatasetKind::Filesystem => creation_properties(kind, requested)?,
            DatasetKind::Volume => {
                let resolved = directory.properties_of(&origin.dataset)?;
                let block_bytes = resolved.volblocksize_bytes.to_string();
                let mut requested = requested.to_vec();
                if let Some((_, asked)) = requested.iter().find(|(key, _)| key == "volblocksize")
                    && *asked != block_bytes
                {
                    return Err(DatasetError::InvalidProperty {
                        name: "volblocksize".into(),
                        value: asked.clone(),
                        reason: format!("a clone keeps its origin's ({block_bytes})"),
                    }
                    .into());
                }
                requested.retain(|(key, _)| key != "volblocksize");
                requested.push(("volblocksize".into(), block_bytes));
                volume_creation_properties(
                    resolved.volsize_bytes,
                    Provisioning::Sparse,
                    &requested,
                )?
            }
        };
        Ok((kind, properties))
    }

    /// Promotes clone `clone`: its origin snapshot and every older snapshot of the origin's
    /// dataset become the clone's, and that dataset becomes a clone of the origin, so the
    /// old parent can then be destroyed (`zfs promote`). Durable on return.
    pub fn promote(&self, clone: &str) -> Result<(), EngineError> {
        let started = std::time::Instant::now();
        let moving = self.promote_plan(clone)?;
        for name in &moving {
            if self
                .snapshot_volumes
                .lock()
                .get(name)
                .is_some_and(|volume| volume.strong_count() > 0)
            {
                return Err(DatasetError::HasDependents {
                    name: name.clone(),
                    what: "readers (it is open, exported over NBD) and would change name; \
                           disconnect them first"
                        .into(),
                }
                .into());
            }
        }
        let clone = clone.to_string();
        self.run_sync_task(move |core, _txg| {
            let mut directory = core.directory.lock();
            let id = directory.get(&clone)?.id;
            let mut table = core.snapshots.lock();
            let pending = core.pending_names();
            if let Some(busy) = pending.iter().find(|name| {
                name.starts_with(&format!("{clone}@"))
                    || table
                        .origin_of(id)
                        .and_then(|origin| dataset_name(&directory, origin.info.dataset_id))
                        .is_some_and(|parent| name.starts_with(&format!("{parent}@")))
            }) {
                return Err(DatasetError::HasDependents {
                    name: clone.clone(),
                    what: format!("a snapshot change in this txg ({busy}); try again"),
                }
                .into());
            }
            let before = table.snapshots_of(id).count();
            table.promote(id)?;
            crate::snapshot_sync::refresh_snapshot_bytes(&mut directory, &table);
            core.snapshot_stats.note(SnapshotChange::Promoted {
                moved: table.snapshots_of(id).count().saturating_sub(before) as u64,
                clone,
            });
            Ok(())
        })?;
        self.core.snapshot_stats.command_done(started);
        Ok(())
    }

    /// The full names of the snapshots a promote of `clone` would move, checked: `clone` is a
    /// clone and has no snapshot of the name of one of them.
    fn promote_plan(&self, clone: &str) -> Result<Vec<String>, EngineError> {
        let directory = self.core.directory.lock();
        let id = directory.get(clone)?.id;
        let table = self.core.snapshots.lock();
        let origin = table
            .origin_of(id)
            .ok_or_else(|| DatasetError::InvalidName {
                name: clone.to_string(),
                reason: "not a clone (it has no origin)".into(),
            })?;
        let parent = dataset_name(&directory, origin.info.dataset_id).ok_or_else(|| {
            DatasetError::Corrupt(format!("the origin of {clone} has no dataset"))
        })?;
        let mut moving = Vec::new();
        for snapshot in table.snapshots_of(origin.info.dataset_id) {
            if snapshot.info.created_txg > origin.info.created_txg {
                break;
            }
            if table.find(id, &snapshot.info.name).is_some() {
                return Err(DatasetError::Exists(format!(
                    "{clone}@{} (rename or destroy it: promote would move {parent}@{} here)",
                    snapshot.info.name, snapshot.info.name
                ))
                .into());
            }
            moving.push(format!("{parent}@{}", snapshot.info.name));
        }
        Ok(moving)
    }

    /// `destroy -R`: destroys snapshot `name` (`dataset@snapshot`) after every dataset that
    /// depends on it: its clones, each with its snapshots and their clones in turn (newest
    /// first). Each destroy is durable before the next; a failure stops there, with what was
    /// destroyed so far gone. Returns every destroyed name, in order.
    pub fn destroy_with_dependents(&self, name: &str) -> Result<Vec<String>, EngineError> {
        let mut destroyed = Vec::new();
        for clone in self.clones(name)? {
            self.destroy_clone_tree(&clone, &mut destroyed)?;
        }
        self.destroy_snapshot(name)?;
        destroyed.push(name.to_string());
        Ok(destroyed)
    }

    /// Destroys clone `dataset` with its snapshots and, first, their own clones.
    fn destroy_clone_tree(
        &self,
        dataset: &str,
        destroyed: &mut Vec<String>,
    ) -> Result<(), EngineError> {
        let snapshots = self.snapshots(Some(dataset))?;
        for listing in snapshots.iter().rev() {
            for clone in &listing.clones {
                self.destroy_clone_tree(clone, destroyed)?;
            }
            self.destroy_snapshot(&listing.name)?;
            destroyed.push(listing.name.clone());
        }
        self.destroy_dataset(dataset)?;
        destroyed.push(dataset.to_string());
        Ok(())
    }

    /// The origin of dataset `name` (`dataset@snapshot`), if it is a clone.
    pub fn origin(&self, name: &str) -> Result<Option<String>, EngineError> {
        let directory = self.core.directory.lock();
        let id = directory.get(name)?.id;
        let table = self.core.snapshots.lock();
        Ok(table.origin_of(id).and_then(|origin| {
            dataset_name(&directory, origin.info.dataset_id)
                .map(|dataset| format!("{dataset}@{}", origin.info.name))
        }))
    }

    /// The clones of snapshot `name` (`dataset@snapshot`), by name.
    pub fn clones(&self, name: &str) -> Result<Vec<String>, EngineError> {
        let parsed = SnapshotName::parse(name)?;
        let directory = self.core.directory.lock();
        let id = directory.get(&parsed.dataset)?.id;
        let table = self.core.snapshots.lock();
        let snapshot = table
            .find(id, &parsed.snapshot)
            .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()))?;
        Ok(dataset_names(
            &directory,
            &table.clones_of(snapshot.info.id),
        ))
    }
}

/// The name of the dataset of id `id`.
pub(crate) fn dataset_name(directory: &DatasetDirectory, id: u64) -> Option<String> {
    directory
        .datasets
        .values()
        .find(|record| record.id == id)
        .map(|record| record.name.clone())
}

/// The names of the datasets `ids`, sorted.
pub(crate) fn dataset_names(directory: &DatasetDirectory, ids: &[u64]) -> Vec<String> {
    let mut names: Vec<String> = ids
        .iter()
        .filter_map(|&id| dataset_name(directory, id))
        .collect();
    names.sort();
    names
}
