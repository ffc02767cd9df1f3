//! Snapshots as the pool's handle offers them: taking them (`Pool::snapshot`, several and
//! recursive ones atomically in one txg) and listing them with their space figures. The sync's
//! side is `snapshot_sync.rs`; the model and its accounting are `cairn_dataset::snapshots`.
//!
//! A snapshot needs no space of its own beyond a record, so it is never refused for a full
//! pool. Every name is checked, and every snapshot of one call validated, before the txg: one
//! bad name or an existing snapshot refuses the whole call and changes nothing.
//!
//! Every command that completes (snapshot, destroy, rollback; clone and promote in
//! `clones.rs`) adds its wait, from the call until its change is durable, to the pool's
//! snapshot command latency (`snapshot_stats.rs`).

use crate::EngineError;
use crate::core::PendingSnapshot;
use crate::pool::Pool;
use cairn_dataset::snapshots::{Snapshot, SnapshotTable};
use cairn_dataset::{DatasetDirectory, DatasetError, DatasetKind, SnapshotName, Volume};
use cairn_object::ObjectSet;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Txgs a snapshot command tries before giving up, when each already has a snapshot of one of
/// its datasets (taken by another command: one snapshot per dataset per txg).
const SNAPSHOT_TXG_ATTEMPTS: usize = 8;

/// Room a snapshot's creation is taken to need (its record, a deadlist object, the txg's
/// metadata), checked against the pool's free space (`check_snapshot_room`).
const SNAPSHOT_RECORD_ROOM_BYTES: u64 = 1 << 20;

/// One snapshot with its figures, as `list -t snapshot` and `get` show them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotListing {
    /// Unique in the pool among datasets and snapshots and never reused, kept across
    /// renames and imports: what an NFS file handle names a snapshot by (`snapshot_of_id`).
    pub id: u64,
    /// `dataset@snapshot`.
    pub name: String,
    pub dataset: String,
    pub created_txg: u64,
    pub creation_ms: u64,
    /// Bytes only this snapshot holds (`used`).
    pub used_bytes: u64,
    pub referenced_bytes: u64,
    /// Bytes it references that its predecessor did not (`written`).
    pub written_bytes: u64,
    /// Datasets cloned from it, by name (`clones`).
    pub clones: Vec<String>,
    /// Its identity in send streams (`guid`): random when taken, the sender's when received.
    pub guid: u64,
}

/// Who a snapshot is, without its figures (`Pool::snapshot_of_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotIdentity {
    pub id: u64,
    /// `dataset@snapshot`.
    pub name: String,
    pub dataset: String,
    pub created_txg: u64,
}

/// A dataset's snapshot-related figures (`get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SnapshotSpace {
    /// `usedbysnapshots`.
    pub used_by_snapshots_bytes: u64,
    /// `written`: what the head references that its newest snapshot does not.
    pub written_bytes: u64,
    pub snapshot_count: u64,
}

impl Pool {
    /// Takes the snapshots `names` (`dataset@snapshot`), with `recursive` also of every
    /// descendant of each dataset under the same snapshot name, all in one txg: all exist on
    /// return, durable, or none does. Returns the snapshots' full names, sorted.
    pub fn snapshot(&self, names: &[String], recursive: bool) -> Result<Vec<String>, EngineError> {
        self.snapshot_with_history(names, recursive, None)
    }

    /// `snapshot`, with `history` (a command line) recorded in the pool's history in the
    /// same txg as the snapshots: one txg for the whole command, both durable on return.
    pub fn snapshot_with_history(
        &self,
        names: &[String],
        recursive: bool,
        history: Option<String>,
    ) -> Result<Vec<String>, EngineError> {
        let started = std::time::Instant::now();
        if names.is_empty() {
            return Err(DatasetError::InvalidName {
                name: String::new(),
                reason: "no snapshot named".into(),
            }
            .into());
        }
        let parsed = names
            .iter()
            .map(|name| SnapshotName::parse(name))
            .collect::<Result<Vec<_>, _>>()?;
        // Validated now for a prompt error; the task validates again in its txg.
        let planned = self.core.plan_snapshots(&parsed, recursive)?;
        let created: Vec<String> = planned.iter().map(ToString::to_string).collect();
        // A dataset has one snapshot per txg: when another command's snapshot of one of these
        // datasets took this txg, the whole call goes to the next.
        for _ in 0..SNAPSHOT_TXG_ATTEMPTS {
            let taken = Arc::new(AtomicBool::new(false));
            let done = taken.clone();
            let parsed = parsed.clone();
            let history = history.clone();
            self.run_snapshot_task(planned.len(), move |core, _txg| {
                let planned = core.plan_snapshots(&parsed, recursive)?;
                let mut directory = core.directory.lock();
                let mut pending = core.pending_snapshots.lock();
                let busy = pending.iter().any(|change| {
                    matches!(change, PendingSnapshot::Create { dataset, .. }
                        if planned.iter().any(|name| name.dataset == *dataset))
                });
                if busy {
                    return Ok(());
                }
                for name in planned {
                    directory.next_id += 1;
                    pending.push(PendingSnapshot::Create {
                        dataset: name.dataset,
                        name: name.snapshot,
                        id: directory.next_id,
                        guid: crate::new_guid(),
                    });
                }
                if let Some(entry) = history {
                    directory.record_history(format!("{} {entry}", crate::now_ms()));
                }
                done.store(true, Ordering::SeqCst);
                Ok(())
            })?;
            if taken.load(Ordering::SeqCst) {
                self.core.snapshot_stats.command_done(started);
                return Ok(created);
            }
        }
        Err(DatasetError::HasDependents {
            name: created.join(" "),
            what: "other snapshots being taken of the same datasets in every txg tried".into(),
        }
        .into())
    }

    /// Destroys snapshot `name` (`dataset@snapshot`), durable on return: what only it held is
    /// freed, at once for what died in this txg and in the background, a bounded amount per
    /// txg, for the rest (`freeing_bytes`), so a large destroy never stalls the pool.
    pub fn destroy_snapshot(&self, name: &str) -> Result<(), EngineError> {
        self.destroy_snapshots(&[name.to_string()])
    }

    /// Rolls dataset `name`'s head back to snapshot `name` (`dataset@snapshot`), durable on
    /// return: everything written since is gone. With `destroy_newer`, newer snapshots are
    /// destroyed first (else they refuse it); with `force`, a volume with open users (NBD
    /// clients) is rolled back under them (their handle turns read-only). An open (mounted)
    /// filesystem is rolled back in place (`filesystems.rs`, "Rollback of an open
    /// filesystem"): its handle is retired (every call on it then fails with `Stale`) and
    /// `filesystem` opens the rolled-back head, with the old one's open files that are the
    /// same file in both; a front end that serves it stops its own calls around this call
    /// (cairn-frontend's `fuse/rollback.rs`).
    pub fn rollback(
        &self,
        name: &str,
        destroy_newer: bool,
        force: bool,
    ) -> Result<(), EngineError> {
        let started = std::time::Instant::now();
        let parsed = SnapshotName::parse(name)?;
        let (_, target_txg) = self.snapshot_root(name)?;
        let newer: Vec<String> = self
            .snapshots(Some(&parsed.dataset))?
            .into_iter()
            .filter(|listing| listing.created_txg > target_txg)
            .map(|listing| listing.name)
            .collect();
        if let Some(first) = newer.first()
            && !destroy_newer
        {
            return Err(DatasetError::HasDependents {
                name: name.to_string(),
                what: format!(
                    "newer snapshots ({first}{}); roll back with -r to destroy them",
                    if newer.len() > 1 { ", ..." } else { "" }
                ),
            }
            .into());
        }
        let volume = self.volumes.lock().get(&parsed.dataset).cloned();
        if let Some(volume) = &volume
            && Arc::strong_count(volume) > 2
            && !force
        {
            return Err(DatasetError::HasDependents {
                name: parsed.dataset.clone(),
                what: "open users (NBD clients); roll back with -f to do it under them".into(),
            }
            .into());
        }
        for snapshot in newer.iter().rev() {
            self.destroy_snapshot(snapshot)?;
        }
        // The old head takes no more writes; what it has goes out before the swap.
        if let Some(volume) = self.volumes.lock().remove(&parsed.dataset) {
            volume.set_readonly(true);
        }
        let carried = self.retire_filesystem(&parsed.dataset);
        let intent_log = self.core.intent_logs.lock().remove(&parsed.dataset);
        let dataset = parsed.dataset.clone();
        let swapped = self.sync().and_then(|_| {
            self.run_sync_task(move |core, txg| {
                if let Some(intent_log) = &intent_log {
                    intent_log.release_all(txg);
                }
                core.rollback_head(txg, &parsed.dataset, &parsed.snapshot)
            })
        });
        // Open again whether or not the swap was made (all or nothing): over the rolled-back
        // head, or the old one again.
        if let Some(carried) = carried {
            self.reopen_filesystem(&dataset, &carried)?;
        }
        swapped?;
        self.core.snapshot_stats.command_done(started);
        crate::core::reclaim_deferred(&self.core, self.txg_engine()?);
        Ok(())
    }

    /// Destroys the snapshots `names` (of one dataset or several) in one txg, oldest first:
    /// all or none (each must exist and have no user hold). Durable on return.
    pub fn destroy_snapshots(&self, names: &[String]) -> Result<(), EngineError> {
        self.destroy_snapshots_with_history(names, None)
    }

    /// `destroy_snapshots`, with `history` (a command line) recorded in the pool's history in
    /// the same txg as the destroy.
    pub fn destroy_snapshots_with_history(
        &self,
        names: &[String],
        history: Option<String>,
    ) -> Result<(), EngineError> {
        let started = std::time::Instant::now();
        let parsed = self.destroy_plan(names)?;
        for name in &parsed {
            self.refuse_if_open(&name.to_string())?;
        }
        // Checked now for a prompt error; the task checks again in its txg.
        self.core.order_for_destroy(&parsed)?;
        // Browsed through a mount (`.cairn/snapshot`): closed under its readers, who never
        // see its blocks after they are freed.
        let full_names: Vec<String> = parsed.iter().map(ToString::to_string).collect();
        let _closed = self.close_snapshot_filesystems(&full_names);
        self.run_snapshot_task(parsed.len(), move |core, _txg| {
            let planned = core.order_for_destroy(&parsed)?;
            if let Some(entry) = history {
                core.directory
                    .lock()
                    .record_history(format!("{} {entry}", crate::now_ms()));
            }
            let mut pending = core.pending_snapshots.lock();
            for name in planned {
                pending.push(PendingSnapshot::Destroy {
                    dataset: name.dataset,
                    name: name.snapshot,
                });
            }
            Ok(())
        })?;
        self.core.snapshot_stats.command_done(started);
        Ok(())
    }

    /// What destroying `names` would free (`destroy -n -v`), computed on a copy of the table:
    /// nothing changes.
    pub fn destroy_space(&self, names: &[String]) -> Result<u64, EngineError> {
        let parsed = self.destroy_plan(names)?;
        let planned = self.core.order_for_destroy(&parsed)?;
        let directory = self.core.directory.lock();
        let mut trial = self.core.snapshots.lock().clone();
        let mut freed = 0;
        for name in planned {
            let id = directory.get(&name.dataset)?.id;
            freed += trial.destroy(id, &name.snapshot)?.freed.allocated_bytes;
        }
        Ok(freed)
    }

    /// The snapshots of `dataset` from `first` to `last` by creation (`first%last`; an empty
    /// bound is the oldest or the newest), as full names.
    pub fn snapshot_range(
        &self,
        dataset: &str,
        first: &str,
        last: &str,
    ) -> Result<Vec<String>, EngineError> {
        let listings = self.snapshots(Some(dataset))?;
        let position = |name: &str, default: usize| -> Result<usize, EngineError> {
            if name.is_empty() {
                return Ok(default);
            }
            listings
                .iter()
                .position(|listing| listing.name == format!("{dataset}@{name}"))
                .ok_or_else(|| DatasetError::NoSuchDataset(format!("{dataset}@{name}")).into())
        };
        let from = position(first, 0)?;
        let to = position(last, listings.len().saturating_sub(1))?;
        if listings.is_empty() || from > to {
            return Err(DatasetError::InvalidName {
                name: format!("{dataset}@{first}%{last}"),
                reason: "the range names no snapshot (is the first newer than the last?)".into(),
            }
            .into());
        }
        Ok(listings[from..=to]
            .iter()
            .map(|listing| listing.name.clone())
            .collect())
    }

    /// Names checked: snapshots, each once.
    fn destroy_plan(&self, names: &[String]) -> Result<Vec<SnapshotName>, EngineError> {
        let parsed = names
            .iter()
            .map(|name| SnapshotName::parse(name))
            .collect::<Result<Vec<_>, _>>()?;
        let distinct: BTreeSet<String> = parsed.iter().map(ToString::to_string).collect();
        if parsed.is_empty() || distinct.len() != parsed.len() {
            return Err(DatasetError::InvalidName {
                name: names.join(" "),
                reason: "name each snapshot once".into(),
            }
            .into());
        }
        Ok(parsed)
    }

    /// A snapshot open as a volume (an NBD export) refuses destroy: its readers would lose
    /// their blocks.
    fn refuse_if_open(&self, name: &str) -> Result<(), EngineError> {
        if self
            .snapshot_volumes
            .lock()
            .get(name)
            .is_some_and(|volume| volume.strong_count() > 0)
        {
            return Err(DatasetError::HasDependents {
                name: name.to_string(),
                what: "readers (it is open, exported over NBD); disconnect them first".into(),
            }
            .into());
        }
        Ok(())
    }

    /// `destroy -d`: destroys snapshot `name` now if it has no user hold, else marks it to be
    /// destroyed when its last hold is released. Durable on return.
    pub fn destroy_snapshot_deferred(&self, name: &str) -> Result<(), EngineError> {
        let parsed = SnapshotName::parse(name)?;
        let held = {
            let directory = self.core.directory.lock();
            let id = directory.get(&parsed.dataset)?.id;
            let table = self.core.snapshots.lock();
            let snapshot = table
                .find(id, &parsed.snapshot)
                .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()))?;
            !snapshot.info.holds.is_empty()
        };
        if !held {
            return self.destroy_snapshot(name);
        }
        self.run_sync_task(move |core, _txg| {
            let id = core.directory.lock().get(&parsed.dataset)?.id;
            Ok(core.snapshots.lock().defer_destroy(id, &parsed.snapshot)?)
        })?;
        Ok(())
    }

    /// Places user hold `tag` on every snapshot of `names`, in one txg: all or none.
    pub fn hold(&self, tag: &str, names: &[String]) -> Result<(), EngineError> {
        let parsed = parse_hold(tag, names)?;
        let tag = tag.to_string();
        self.run_sync_task(move |core, _txg| {
            let ids = core.snapshot_dataset_ids(&parsed)?;
            let mut table = core.snapshots.lock();
            check_holds(&table, &parsed, &ids, &tag, false)?;
            let now_ms = crate::now_ms();
            for (name, id) in parsed.iter().zip(ids) {
                table.hold(id, &name.snapshot, &tag, now_ms)?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Releases user hold `tag` from every snapshot of `names`, in one txg: all or none. A
    /// snapshot `destroy -d` asked for goes with its last hold, in the same txg.
    pub fn release(&self, tag: &str, names: &[String]) -> Result<(), EngineError> {
        let parsed = parse_hold(tag, names)?;
        let tag = tag.to_string();
        // A snapshot `destroy -d` asked for may go with this release: closed first if browsed
        // through a mount, as `destroy_snapshots` does.
        let going = self.released_to_destroy(&parsed, &tag)?;
        let _closed = self.close_snapshot_filesystems(&going);
        self.run_sync_task(move |core, _txg| {
            let ids = core.snapshot_dataset_ids(&parsed)?;
            let mut table = core.snapshots.lock();
            check_holds(&table, &parsed, &ids, &tag, true)?;
            for (name, id) in parsed.into_iter().zip(ids) {
                if table.release(id, &name.snapshot, &tag)? {
                    core.pending_snapshots
                        .lock()
                        .push(PendingSnapshot::Destroy {
                            dataset: name.dataset,
                            name: name.snapshot,
                        });
                }
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Of `names`, the snapshots releasing hold `tag` would destroy (`destroy -d` asked for
    /// them and `tag` is their last hold).
    fn released_to_destroy(
        &self,
        names: &[SnapshotName],
        tag: &str,
    ) -> Result<Vec<String>, EngineError> {
        let ids = self.core.snapshot_dataset_ids(names)?;
        let table = self.core.snapshots.lock();
        Ok(names
            .iter()
            .zip(ids)
            .filter(|(name, id)| {
                table.find(*id, &name.snapshot).is_some_and(|snapshot| {
                    snapshot.info.defer_destroy
                        && snapshot.info.holds.len() == 1
                        && snapshot.info.holds.contains_key(tag)
                })
            })
            .map(|(name, _)| name.to_string())
            .collect())
    }

    /// The user holds of `names`: (snapshot, tag, placed at ms since the epoch).
    pub fn holds(&self, names: &[String]) -> Result<Vec<(String, String, u64)>, EngineError> {
        let parsed = names
            .iter()
            .map(|name| SnapshotName::parse(name))
            .collect::<Result<Vec<_>, _>>()?;
        let ids = self.core.snapshot_dataset_ids(&parsed)?;
        let table = self.core.snapshots.lock();
        let mut out = Vec::new();
        for (name, id) in parsed.iter().zip(ids) {
            let snapshot = table
                .find(id, &name.snapshot)
                .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()))?;
            for (tag, ms) in &snapshot.info.holds {
                out.push((name.to_string(), tag.clone(), *ms));
            }
        }
        Ok(out)
    }

    /// Bytes destroyed snapshots still hold while the background frees them (the pool
    /// property `freeing`).
    pub fn freeing_bytes(&self) -> u64 {
        self.core.snapshots.lock().freeing_bytes()
    }

    /// Why freeing a destroyed dataset's tree is stuck, if a block of it could not be read
    /// at the last try (tried again every txg with background work).
    pub fn freeing_problem(&self) -> Option<String> {
        self.core
            .snapshots
            .lock()
            .tree_free_problem()
            .map(str::to_string)
    }

    /// Every snapshot of `dataset` (all of the pool's when `None`), oldest first within a
    /// dataset, datasets by name.
    pub fn snapshots(&self, dataset: Option<&str>) -> Result<Vec<SnapshotListing>, EngineError> {
        let directory = self.core.directory.lock();
        if let Some(dataset) = dataset {
            directory.get(dataset)?;
        }
        let table = self.core.snapshots.lock();
        // Looked up once for the whole listing: per snapshot, a scan of every clone and of
        // every dataset made 10,000 snapshots of a pool with many clones quadratic.
        let clones_by_origin = table.clones_by_origin();
        let names: BTreeMap<u64, &str> = directory
            .datasets
            .values()
            .map(|record| (record.id, record.name.as_str()))
            .collect();
        let mut out = Vec::new();
        for record in directory.datasets.values() {
            if dataset.is_some_and(|dataset| dataset != record.name) {
                continue;
            }
            for snapshot in table.snapshots_of(record.id) {
                let info = &snapshot.info;
                let mut clones: Vec<String> = clones_by_origin
                    .get(&info.id)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| names.get(id).map(|name| name.to_string()))
                    .collect();
                clones.sort();
                out.push(SnapshotListing {
                    id: info.id,
                    name: format!("{}@{}", record.name, info.name),
                    dataset: record.name.clone(),
                    created_txg: info.created_txg,
                    creation_ms: info.creation_ms,
                    used_bytes: info.unique_bytes,
                    referenced_bytes: info.referenced_bytes,
                    written_bytes: info.written_bytes,
                    clones,
                    guid: crate::send::stored_or_derived_guid(
                        info.guid,
                        self.core.guid,
                        info.id,
                        info.created_txg,
                    ),
                });
            }
        }
        Ok(out)
    }

    /// The snapshot whose id is `id` (`SnapshotListing::id`), if it still exists: what
    /// `dataset_name_of_id` is for datasets. Ids are never reused, so a snapshot destroyed and
    /// taken again under its name is not found by the old one's id. Costs one map lookup and
    /// a scan of the datasets (not of the snapshots): an NFS server asks it at every call on a
    /// snapshot's file.
    pub fn snapshot_of_id(&self, id: u64) -> Option<SnapshotIdentity> {
        let directory = self.core.directory.lock();
        let table = self.core.snapshots.lock();
        let info = &table.get(id)?.info;
        let dataset = directory
            .datasets
            .values()
            .find(|record| record.id == info.dataset_id)?
            .name
            .clone();
        Some(SnapshotIdentity {
            id,
            name: format!("{dataset}@{}", info.name),
            dataset,
            created_txg: info.created_txg,
        })
    }

    /// One snapshot by its full name.
    pub fn snapshot_info(&self, name: &str) -> Result<SnapshotListing, EngineError> {
        let parsed = SnapshotName::parse(name)?;
        self.snapshots(Some(&parsed.dataset))?
            .into_iter()
            .find(|listing| listing.name == name)
            .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()).into())
    }

    /// The root of snapshot `name` (`dataset@snapshot`) and the txg it was taken in.
    pub(crate) fn snapshot_root(
        &self,
        name: &str,
    ) -> Result<(cairn_format::BlockPointer, u64), EngineError> {
        let parsed = SnapshotName::parse(name)?;
        let directory = self.core.directory.lock();
        let record = directory.get(&parsed.dataset)?;
        let table = self.core.snapshots.lock();
        let snapshot = table
            .find(record.id, &parsed.snapshot)
            .ok_or_else(|| EngineError::from(DatasetError::NoSuchDataset(name.to_string())))?;
        Ok((snapshot.info.objset_bp()?, snapshot.info.created_txg))
    }

    /// Snapshot `name`'s object set, opened for reading: its blocks stay allocated while the
    /// snapshot exists, so reads of it need no txg hold. Writing to it is a caller's bug (a
    /// snapshot is read-only everywhere): nothing would ever sync it.
    pub fn snapshot_objset(&self, name: &str) -> Result<Arc<ObjectSet>, EngineError> {
        let (root, txg) = self.snapshot_root(name)?;
        if root.is_hole() {
            return Err(DatasetError::NoSuchDataset(format!(
                "{name} (a snapshot of a dataset with no object set)"
            ))
            .into());
        }
        let objset = ObjectSet::open(
            self.core.mos.cached_io().clone(),
            root,
            cairn_format::ChecksumAlgorithm::Fletcher4,
            txg,
            Some(0),
        )?;
        Ok(Arc::new(objset))
    }

    /// A volume snapshot as a read-only volume (what NBD exports as `pool/vol@snap`): reads
    /// see the volume as it was; every write is refused (`ReadOnly`). Shared while open;
    /// `destroy_snapshot` refuses a snapshot whose volume someone holds.
    pub(crate) fn snapshot_volume(&self, name: &str) -> Result<Arc<Volume>, EngineError> {
        let parsed = SnapshotName::parse(name)?;
        if let Some(volume) = self
            .snapshot_volumes
            .lock()
            .get(name)
            .and_then(std::sync::Weak::upgrade)
        {
            return Ok(volume);
        }
        let properties = self
            .core
            .directory
            .lock()
            .properties_of_kind(&parsed.dataset, DatasetKind::Volume)?;
        let objset = self.snapshot_objset(name)?;
        let engine = self.readers_engine();
        let space_check = self.space_check(&parsed.dataset, &engine, objset.clone());
        let volume = Arc::new(Volume::new(
            name.to_string(),
            objset,
            engine,
            properties.volsize_bytes,
            properties.volblocksize_bytes,
            true,
            space_check,
        ));
        let mut open = self.snapshot_volumes.lock();
        open.retain(|_, volume| volume.strong_count() > 0);
        open.insert(name.to_string(), Arc::downgrade(&volume));
        Ok(volume)
    }

    /// `usedbysnapshots`, `written` and the number of snapshots of `dataset`, as of the last
    /// synced txg.
    pub fn snapshot_space(&self, dataset: &str) -> Result<SnapshotSpace, EngineError> {
        let directory = self.core.directory.lock();
        let record = directory.get(dataset)?;
        let table = self.core.snapshots.lock();
        Ok(SnapshotSpace {
            used_by_snapshots_bytes: table.used_by_snapshots(record.id),
            written_bytes: table.head_written(record.id, record.used_bytes),
            snapshot_count: table.snapshots_of(record.id).count() as u64,
        })
    }

    /// `written@snapshot` of `dataset`: what its head references that `snapshot` (one of its
    /// own, the part after '@') does not.
    pub fn written_since(&self, dataset: &str, snapshot: &str) -> Result<u64, EngineError> {
        let directory = self.core.directory.lock();
        let record = directory.get(dataset)?;
        let table = self.core.snapshots.lock();
        let since = table.find(record.id, snapshot).ok_or_else(|| {
            EngineError::from(DatasetError::NoSuchDataset(format!("{dataset}@{snapshot}")))
        })?;
        Ok(table.head_written_since(record.id, since, record.used_bytes))
    }
}

/// A held snapshot is not destroyed (`destroy -d` defers it instead).
fn refuse_if_held(snapshot: &Snapshot, name: &SnapshotName) -> Result<(), EngineError> {
    if let Some(tag) = snapshot.info.holds.keys().next() {
        return Err(DatasetError::HasDependents {
            name: name.to_string(),
            what: format!(
                "user holds ('{tag}'{}); release them, or destroy -d to destroy it when the \
                 last is released",
                if snapshot.info.holds.len() > 1 {
                    ", ..."
                } else {
                    ""
                }
            ),
        }
        .into());
    }
    Ok(())
}

/// An origin of clones is not destroyed: the clones share its blocks.
fn refuse_if_cloned(
    directory: &DatasetDirectory,
    table: &SnapshotTable,
    snapshot: &Snapshot,
    name: &SnapshotName,
) -> Result<(), EngineError> {
    let clones = crate::clones::dataset_names(directory, &table.clones_of(snapshot.info.id));
    if let Some(first) = clones.first() {
        return Err(DatasetError::HasDependents {
            name: name.to_string(),
            what: format!(
                "clones ({first}{}); destroy them first (destroy -R does), or promote them",
                if clones.len() > 1 { ", ..." } else { "" }
            ),
        }
        .into());
    }
    Ok(())
}

impl crate::core::PoolCore {
    /// `names` checked for a destroy in this txg (each exists, is not held and is not being
    /// changed by another command in this txg), oldest first within each dataset. The
    /// directory and the table are locked once for all the names (in that order): a range
    /// destroy runs this in its txg's sync task, and locking them per name and per check
    /// made it five locks a snapshot.
    fn order_for_destroy(&self, names: &[SnapshotName]) -> Result<Vec<SnapshotName>, EngineError> {
        let pending = self.pending_names();
        let directory = self.directory.lock();
        let table = self.snapshots.lock();
        let mut ordered = Vec::with_capacity(names.len());
        for name in names {
            let id = directory.get(&name.dataset)?.id;
            let snapshot = table
                .find(id, &name.snapshot)
                .filter(|_| pending.is_empty() || !pending.contains(&name.to_string()))
                .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()))?;
            refuse_if_held(snapshot, name)?;
            refuse_if_cloned(&directory, &table, snapshot, name)?;
            ordered.push((id, snapshot.info.created_txg, name.clone()));
        }
        ordered.sort_by_key(|(id, txg, _)| (*id, *txg));
        Ok(ordered.into_iter().map(|(_, _, name)| name).collect())
    }

    /// The dataset id of each snapshot name (its dataset must exist).
    fn snapshot_dataset_ids(&self, names: &[SnapshotName]) -> Result<Vec<u64>, EngineError> {
        let directory = self.directory.lock();
        names
            .iter()
            .map(|name| Ok(directory.get(&name.dataset)?.id))
            .collect()
    }

    /// `dataset@snapshot` of every snapshot change queued for the open txg's sync.
    pub(crate) fn pending_names(&self) -> BTreeSet<String> {
        self.pending_snapshots
            .lock()
            .iter()
            .map(|change| match change {
                PendingSnapshot::Create { dataset, name, .. }
                | PendingSnapshot::Destroy { dataset, name } => format!("{dataset}@{name}"),
            })
            .collect()
    }

    /// The snapshots a call asks for, checked: each dataset exists, no name is asked twice
    /// and none exists already. With `recursive`, each dataset's descendants too.
    pub(crate) fn plan_snapshots(
        &self,
        names: &[SnapshotName],
        recursive: bool,
    ) -> Result<Vec<SnapshotName>, EngineError> {
        let pending = self.pending_names();
        let directory = self.directory.lock();
        let table = self.snapshots.lock();
        let mut planned = BTreeSet::new();
        let mut datasets_planned = BTreeSet::new();
        for name in names {
            directory.get(&name.dataset)?;
            let mut datasets = vec![name.dataset.clone()];
            if recursive {
                // Not a receive's hidden dataset: it has no snapshot until it is received.
                datasets.extend(
                    directory
                        .children(&name.dataset)
                        .filter(|child| !cairn_dataset::is_hidden(&child.name))
                        .map(|child| child.name.clone()),
                );
            }
            for dataset in datasets {
                let id = directory.get(&dataset)?.id;
                let full = format!("{dataset}@{}", name.snapshot);
                // The whole name must stay within the limit for every descendant too.
                SnapshotName::parse(&full)?;
                // A snapshot being made or destroyed by another command in this txg counts as
                // existing.
                if table.find(id, &name.snapshot).is_some()
                    || pending.contains(&full)
                    || !planned.insert(full.clone())
                {
                    return Err(DatasetError::Exists(full).into());
                }
                // One snapshot per dataset per txg (snapshots are ordered by txg).
                if !datasets_planned.insert(dataset.clone()) {
                    return Err(DatasetError::InvalidName {
                        name: full,
                        reason: format!("one command takes one snapshot of '{dataset}'"),
                    }
                    .into());
                }
            }
        }
        self.check_snapshot_room(planned.len())?;
        planned
            .into_iter()
            .map(|full| SnapshotName::parse(&full).map_err(EngineError::from))
            .collect()
    }

    /// Snapshots take no room of their own beyond their records, so they are taken on a pool
    /// full for users: they may use half of the slop (the space kept back from user data for
    /// the pool's own metadata), as ZFS lets them. Below that, refused: the txg syncs need
    /// the rest, and a sync that finds no room suspends the pool.
    fn check_snapshot_room(&self, count: usize) -> Result<(), EngineError> {
        let space = self.space.lock();
        let floor_bytes = space.slop_bytes() / 2;
        let records_bytes = count as u64 * SNAPSHOT_RECORD_ROOM_BYTES;
        if space.free_bytes() < floor_bytes + records_bytes {
            return Err(DatasetError::NoSpace(format!(
                "{} bytes free, and snapshots keep {floor_bytes} bytes (half the pool's reserve) \
                 for the pool's own metadata; destroy snapshots or data to make room",
                space.free_bytes()
            ))
            .into());
        }
        Ok(())
    }
}

/// Every snapshot of `names` (of the datasets `ids`) exists and has hold `tag` (`held`) or
/// has not: what `release` (or `hold`) needs of all before it changes any.
fn check_holds(
    table: &cairn_dataset::snapshots::SnapshotTable,
    names: &[SnapshotName],
    ids: &[u64],
    tag: &str,
    held: bool,
) -> Result<(), EngineError> {
    for (name, id) in names.iter().zip(ids) {
        let snapshot = table
            .find(*id, &name.snapshot)
            .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()))?;
        match (snapshot.info.holds.contains_key(tag), held) {
            (true, false) => {
                return Err(DatasetError::Exists(format!("hold '{tag}' on {name}")).into());
            }
            (false, true) => {
                return Err(DatasetError::NoSuchDataset(format!("hold '{tag}' on {name}")).into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// A hold's tag and snapshot names, checked: a tag of 1 to 255 bytes, no name twice.
fn parse_hold(tag: &str, names: &[String]) -> Result<Vec<SnapshotName>, EngineError> {
    if tag.is_empty() || tag.len() > cairn_dataset::NAME_BYTES_MAX {
        return Err(DatasetError::InvalidName {
            name: tag.to_string(),
            reason: "a hold's tag is 1 to 255 bytes".into(),
        }
        .into());
    }
    let parsed = names
        .iter()
        .map(|name| SnapshotName::parse(name))
        .collect::<Result<Vec<_>, _>>()?;
    let distinct: BTreeSet<String> = parsed.iter().map(ToString::to_string).collect();
    if distinct.len() != parsed.len() || parsed.is_empty() {
        return Err(DatasetError::InvalidName {
            name: names.join(" "),
            reason: "name each snapshot once".into(),
        }
        .into());
    }
    Ok(parsed)
}
