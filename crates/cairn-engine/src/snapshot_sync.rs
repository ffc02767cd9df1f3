//! The txg sync's part in snapshots (the model is `cairn_dataset::snapshots`; the command is
//! `snapshots.rs`), and the snapshot table's place in the MOS.
//!
//! In the sync of txg t, after every dataset object set has synced (`txg_sync.rs`),
//! `sync_snapshots` does:
//! 1. the blocks each object set kept for a snapshot (`SyncedObjset::dead_blocks`) go onto its
//!    head's deadlist (`SnapshotTable::kill`) — before step 2, so the deadlist a snapshot of t
//!    takes holds everything that died by t;
//! 2. the snapshot changes queued by this txg's sync tasks (`PendingSnapshot`), in order: a
//!    snapshot is taken from its head's root of t, so it contains every change of txg t and
//!    before (every write acknowledged before the command started); a destroy frees what died
//!    in t at once and queues the rest;
//! 3. this txg's share of background frees (`SnapshotTable::process_frees`, deadlist
//!    entries, then `process_tree_frees`, blocks of the dead trees destroyed datasets and
//!    rollbacks left), within a budget `free_pacing.rs` sets: `free_time_per_txg_ms` (an
//!    eighth of it when writers dirtied the txg, less what the commands above took), in units
//!    of work priced at what frees cost earlier txgs' whole syncs, at most
//!    `free_entries_per_txg`;
//!
//! then `write_snapshot_table` writes the records that changed, and the deadlists' new
//! pointers, into the MOS with the directory, so the uberblock of t commits them all or none;
//! and once t has committed and the object sets have published, each head is told its newest
//! snapshot txg (`ObjectSet::set_prev_snap_txg`): from t+1 on, the birth-txg rule keeps what
//! its newest snapshot references. A rollback runs in its sync task instead, before the object
//! sets sync (`rollback_head`), so nothing written to the old head since is ever written out.
//!
//! Each change made here, and each txg's background free work, is noted for
//! `snapshot_stats.rs` (counters and events, announced only once the txg commits).
//!
//! The table lives in MOS object 2 (`SNAPSHOT_TABLE`), a record map (`record_map.rs`: a hashed
//! map, large values in blob objects of their own) created with the first snapshot. A pool
//! without the object has no snapshot.

use crate::EngineError;
use crate::core::{PendingSnapshot, PoolCore};
use crate::record_map::RecordMap;
use crate::snapshot_stats::SnapshotChange;
use cairn_dataset::frees::BackgroundFree;
use cairn_dataset::snapshots::{NewSnapshot, SnapshotTable};
use cairn_dataset::{DatasetDirectory, DatasetError};
use cairn_format::ObjectType;
use cairn_object::{ObjectSet, SyncedObjset};
use std::sync::Arc;
use std::time::Instant;

/// The snapshot table: MOS object 2, a hashed map.
const SNAPSHOT_TABLE: RecordMap = RecordMap {
    object: 2,
    map_type: ObjectType::SnapshotTable,
    blob_type: ObjectType::SnapshotRecord,
    what: "snapshot table",
};

/// A dataset's object set synced in this txg, as `sync_objsets` returns it.
pub(crate) type SyncedDataset = (String, Arc<ObjectSet>, SyncedObjset);

impl PoolCore {
    /// Steps 1 and 2 of the module doc, and this txg's share of background frees, in txg
    /// `txg`'s sync; returns the object sets to tell their new newest snapshot txg once the
    /// txg has committed (step 4).
    pub(crate) fn sync_snapshots(
        &self,
        txg: u64,
        synced: &[SyncedDataset],
    ) -> Result<Vec<(Arc<ObjectSet>, u64)>, EngineError> {
        let pending = std::mem::take(&mut *self.pending_snapshots.lock());
        // Lock order: the directory, then the table.
        let mut directory = self.directory.lock();
        let mut table = self.snapshots.lock();
        let freeing = table.has_background_frees();
        if pending.is_empty()
            && !freeing
            && synced.iter().all(|(_, _, r)| r.dead_blocks().is_empty())
        {
            return Ok(Vec::new());
        }
        // The datasets whose deadlists or snapshots change here: only their space figures
        // need computing again (a sum over every deadlist of a dataset: with 10,000
        // snapshots, redoing every dataset's in every txg was most of a snapshot's cost).
        let mut touched = std::collections::BTreeSet::new();
        for (name, _, result) in synced {
            if !result.dead_blocks().is_empty() {
                let dataset_id = directory.get(name)?.id;
                table.kill(dataset_id, result.dead_blocks());
                touched.insert(name.clone());
            }
        }
        let mut heads = Vec::new();
        let commands_started = Instant::now();
        let units = u64::try_from(pending.len()).unwrap_or(u64::MAX);
        for change in pending {
            let (dataset, prev_snap_txg) = match change {
                PendingSnapshot::Create {
                    dataset,
                    name,
                    id,
                    guid,
                } => {
                    let record = directory.get(&dataset)?;
                    let snapshot = format!("{dataset}@{name}");
                    table.create(NewSnapshot {
                        id,
                        dataset_id: record.id,
                        name,
                        txg,
                        creation_ms: crate::now_ms(),
                        objset_bp: record.objset_bp()?,
                        referenced_bytes: record.used_bytes,
                        guid,
                    })?;
                    self.snapshot_stats
                        .note(SnapshotChange::Created { snapshot });
                    (dataset, Some(txg))
                }
                PendingSnapshot::Destroy { dataset, name } => {
                    let destroyed = table.destroy(directory.get(&dataset)?.id, &name)?;
                    for bp in &destroyed.free_now {
                        self.mos.cached_io().free_block(bp, txg);
                    }
                    // Parts left holding nothing live that no background free reads.
                    for &object in &destroyed.free_objects {
                        self.free_mos_object(txg, object);
                    }
                    let snapshot = format!("{dataset}@{name}");
                    // Only the work this destroy queued: following every free left would
                    // make a destroy of N snapshots quadratic.
                    if let Some((seq, bytes)) = destroyed.queued_free {
                        self.snapshot_stats.follow_free(
                            BackgroundFree::Deadlist(seq),
                            bytes,
                            txg,
                            &snapshot,
                        );
                    }
                    self.snapshot_stats.note(SnapshotChange::Destroyed {
                        snapshot,
                        freed_bytes: destroyed.freed.allocated_bytes,
                    });
                    (dataset, destroyed.prev_snap_txg)
                }
            };
            if let (Some(prev_snap_txg), Some(objset)) =
                (prev_snap_txg, self.objsets.lock().get(&dataset))
            {
                heads.push((objset.clone(), prev_snap_txg));
            }
            touched.insert(dataset);
        }
        let commands_time = commands_started.elapsed();
        self.background_frees(txg, &mut table, !synced.is_empty(), commands_time)?;
        let refresh_started = Instant::now();
        refresh_changed_snapshot_bytes(&mut directory, &mut table);
        // A head synced in this txg may have changed what it still shares with its origin.
        for name in &touched {
            if let Ok(record) = directory.get_mut(name) {
                record.origin_shared_bytes = table.origin_shared_bytes(record.id);
            }
        }
        // The commands' part of this sync (`command_pacing.rs`): their changes, and the
        // figures refreshed after them.
        if units > 0 {
            self.command_pacing
                .lock()
                .note_work(units, commands_time + refresh_started.elapsed());
        }
        Ok(heads)
    }

    /// This txg's share of background frees (step 3), counted; a free that finishes is noted
    /// (`snapshot_stats.rs`). How much it may do is `free_pacing.rs`'s to say: a budget of
    /// time and of units of work priced at what earlier txgs' frees cost their whole sync
    /// (less with `foreground` dirty data in the txg, and less the `commands_time` this sync
    /// already spent on snapshot commands).
    fn background_frees(
        &self,
        txg: u64,
        table: &mut SnapshotTable,
        foreground: bool,
        commands_time: std::time::Duration,
    ) -> Result<(), EngineError> {
        if !table.has_background_frees() {
            return Ok(());
        }
        let started = Instant::now();
        // Work no command of this process queued: left by a destroy before the import.
        self.snapshot_stats
            .follow_frees(table, txg, "a destroy from before this import");
        let budget = self.free_pacing.lock().budget(
            self.free_time_per_txg_ms,
            foreground,
            commands_time,
            self.free_entries_per_txg,
        );
        let mut keep_going = || {
            budget
                .deadline
                .is_none_or(|deadline| Instant::now() < deadline)
        };
        let mut deadlist_blocks_freed = 0;
        // A dead part's object goes in the txg that records its last scan done.
        let done = table.process_frees(
            &self.mos,
            budget.units_max,
            &mut keep_going,
            &mut |bp| {
                self.mos.cached_io().free_block(bp, txg);
                deadlist_blocks_freed += 1;
            },
            &mut |object| self.free_mos_object(txg, object),
        )?;
        let deadlist_entries_scanned = done.entries_scanned;
        // The dead trees get what the deadlists left of the units (at least one step).
        let tree_blocks_freed = table.process_tree_frees(
            &self.io,
            budget
                .units_max
                .saturating_sub(deadlist_entries_scanned)
                .max(1),
            &mut keep_going,
            &mut |bp| {
                self.mos.cached_io().free_block(bp, txg);
            },
        )?;
        self.free_pacing.lock().note_work(
            deadlist_entries_scanned + tree_blocks_freed,
            started.elapsed(),
        );
        self.snapshot_stats.note(SnapshotChange::FreeWork {
            deadlist_entries_scanned,
            deadlist_blocks_freed,
            deadlist_parts_freed: done.parts_freed,
            tree_blocks_freed,
        });
        self.snapshot_stats.frees_done(table, txg);
        Ok(())
    }

    /// Frees MOS object `object` (a deadlist part) in `txg`; its number is given again from
    /// the next txg on (`new_mos_object`).
    pub(crate) fn free_mos_object(&self, txg: u64, object: u64) {
        self.mos.free_object(txg, object);
        self.mos_numbers.lock().freed(object, txg);
    }

    /// A number for a new MOS object (a deadlist part, a large record) in `txg`, in sync
    /// context: a freed one if any (`record_map::MosObjectNumbers`).
    pub(crate) fn new_mos_object(&self, txg: u64) -> u64 {
        self.mos_numbers.lock().take(&self.mos, txg)
    }

    /// Step 3: writes the records changed since the last sync into the MOS in `txg`; true if
    /// anything was written.
    pub(crate) fn write_snapshot_table(&self, txg: u64) -> Result<bool, EngineError> {
        let mut table = self.snapshots.lock();
        if !table.is_dirty() {
            return Ok(false);
        }
        let mut new_object = || self.new_mos_object(txg);
        let changes = table.flush(&self.mos, txg, &mut new_object)?;
        SNAPSHOT_TABLE.write(
            &self.mos,
            self.guid,
            txg,
            changes
                .into_iter()
                .map(|(key, value)| (key.encode(), value)),
            &mut new_object,
        )?;
        Ok(true)
    }
}

/// Sets every dataset's `usedbysnapshots` and a clone's share of its origin from the table
/// (the directory's space figures and the space view follow it).
pub(crate) fn refresh_snapshot_bytes(directory: &mut DatasetDirectory, table: &SnapshotTable) {
    for record in directory.datasets.values_mut() {
        record.snapshots_bytes = table.used_by_snapshots(record.id);
        record.origin_shared_bytes = table.origin_shared_bytes(record.id);
    }
}

/// `refresh_snapshot_bytes` for the datasets whose snapshot figures changed since the last
/// call only (the table knows them, `SnapshotTable::changed_snapshot_bytes`), so a txg's cost
/// does not grow with the number of snapshots it did not touch.
pub(crate) fn refresh_changed_snapshot_bytes(
    directory: &mut DatasetDirectory,
    table: &mut SnapshotTable,
) {
    let Some(changed) = table.changed_snapshot_bytes() else {
        refresh_snapshot_bytes(directory, table);
        return;
    };
    if changed.is_empty() {
        return;
    }
    let changed: std::collections::BTreeMap<u64, u64> = changed.into_iter().collect();
    for record in directory.datasets.values_mut() {
        if let Some(&bytes) = changed.get(&record.id) {
            debug_assert_eq!(bytes, table.used_by_snapshots(record.id));
            record.snapshots_bytes = bytes;
            record.origin_shared_bytes = table.origin_shared_bytes(record.id);
        }
    }
}

/// Reads the snapshot table of the MOS (empty if the pool has none), checking every record
/// and that each names a dataset of `directory`.
pub(crate) fn load_snapshot_table(
    mos: &ObjectSet,
    directory: &DatasetDirectory,
) -> Result<SnapshotTable, EngineError> {
    let Some(entries) = SNAPSHOT_TABLE.read_all(mos)? else {
        return Ok(SnapshotTable::new());
    };
    let records = entries
        .iter()
        .map(|(key, value)| SnapshotTable::decode_record(key, value))
        .collect::<Result<Vec<_>, _>>()?;
    let ids: std::collections::BTreeSet<u64> = directory
        .datasets
        .values()
        .map(|record| record.id)
        .collect();
    Ok(SnapshotTable::load(records, |id| ids.contains(&id))?)
}

impl PoolCore {
    /// In a sync task of `txg`: makes the head of `dataset` its snapshot `snapshot` again (the
    /// newest: later ones are destroyed first). The head's tree becomes the snapshot's (with
    /// no intent log: its chain of then is long gone), what the old head alone referenced —
    /// every block born after the snapshot — is freed, and its deadlist is dropped (what it
    /// held, the head references again). The old object set leaves `objsets` before this
    /// txg's object sets sync, so nothing written to it since is ever written out.
    ///
    pub(crate) fn rollback_head(
        &self,
        txg: u64,
        dataset: &str,
        snapshot: &str,
    ) -> Result<(), EngineError> {
        let mut directory = self.directory.lock();
        let mut table = self.snapshots.lock();
        let record = directory.get(dataset)?;
        let (id, old_root) = (record.id, record.objset_bp()?);
        let target = table
            .find(id, snapshot)
            .ok_or_else(|| DatasetError::NoSuchDataset(format!("{dataset}@{snapshot}")))?;
        let (target_txg, root, referenced) = (
            target.info.created_txg,
            target.info.objset_bp()?,
            target.info.referenced_bytes,
        );
        if table.prev_snap_txg(id) != target_txg {
            return Err(DatasetError::HasDependents {
                name: format!("{dataset}@{snapshot}"),
                what: "newer snapshots; roll back with -r to destroy them".into(),
            }
            .into());
        }
        let checksum = directory.properties_of(dataset)?.checksum;
        // The old head's blocks born after the snapshot were its alone: freed in the
        // background, a bounded number per txg (`written` since the snapshot is their size).
        let written = table.head_written(id, record.used_bytes);
        table.queue_tree_free(&old_root, target_txg, written);
        let objset = Arc::new(ObjectSet::open(
            self.mos.cached_io().clone(),
            root,
            checksum,
            txg - 1,
            Some(referenced),
        )?);
        objset.set_prev_snap_txg(target_txg);
        objset.set_intent_log_header(txg, [0; cairn_format::intent_log::INTENT_LOG_HEADER_SIZE]);
        let dead_objects = table.rollback(id);
        for object in dead_objects {
            self.free_mos_object(txg, object);
        }
        let record = directory.get_mut(dataset)?;
        record.set_objset_bp(&root);
        record.used_bytes = referenced;
        refresh_snapshot_bytes(&mut directory, &table);
        self.objsets.lock().insert(dataset.to_string(), objset);
        self.snapshot_stats.follow_frees(
            &table,
            txg,
            &format!("the head of {dataset} rolled back to @{snapshot}"),
        );
        self.snapshot_stats.note(SnapshotChange::RolledBack {
            snapshot: format!("{dataset}@{snapshot}"),
            freeing_bytes: written,
        });
        Ok(())
    }
}
