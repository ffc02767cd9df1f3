//! The ends of a receive (`receive.rs`): what an incremental stream is checked against before
//! anything is read (`incremental_plan`), the one txg that makes a received stream visible
//! (`finish_full`, `finish_incremental`), and the import-time destroy of what a killed
//! receive left (`destroy_abandoned_receives`; a resumable one, `receive -s`, is kept).
//!
//! Atomicity: each finish is one sync task, so the rename or swap and the snapshot END names
//! land in the same txg (the task queues the snapshot, which the same txg's sync takes after
//! the object sets synced): an uberblock either has the received snapshot, or the target as it
//! was and the hidden dataset. A swap replaces the target's head the way a rollback does
//! (`PoolCore::rollback_head`): the old head's object set leaves `objsets` before this txg's
//! object sets sync, its blocks born after the source snapshot are freed in the background,
//! its deadlist goes; the clone's object set, deadlist (`SnapshotTable::adopt_clone_head`)
//! and root become the head's, and the clone's record goes.

use crate::EngineError;
use crate::core::{PendingSnapshot, PoolCore, RESUME_TOKEN_KEY};
use crate::pool::Pool;
use cairn_dataset::DatasetKind;
use cairn_dataset::{DatasetError, is_hidden};
use cairn_format::send_stream::{StreamHeader, StreamKind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Txgs a finish tries before giving up when each already has a snapshot of its target being
/// taken by another command (one snapshot per dataset per txg).
const FINISH_TXG_ATTEMPTS: usize = 8;

/// The snapshot of the target an incremental stream applies to.
#[derive(Debug, Clone)]
pub(crate) struct IncrementalSource {
    /// Its name (after the `@`).
    pub(crate) snapshot: String,
    /// `-F`: the head's changes since it go at the swap; without, a change made during the
    /// receive refuses the swap.
    pub(crate) force: bool,
    /// The target's local properties after the swap, when sent with the stream (`-p`): they
    /// replace its own in the swap's txg.
    pub(crate) properties: Option<std::collections::BTreeMap<String, String>>,
    /// `-F`: the target's snapshots newer than the source, full names, destroyed by
    /// `finish_incremental` once the whole stream has verified (a stream that fails leaves
    /// them as they were).
    pub(crate) newer: Vec<String>,
}

/// What `incremental_plan` found.
pub(crate) struct IncrementalPlan {
    pub(crate) source: IncrementalSource,
    /// The target's snapshots newer than the source, full names, oldest first.
    pub(crate) newer: Vec<String>,
    /// What the head references that the source does not.
    pub(crate) written_bytes: u64,
}

/// The dataset kind a stream's kind makes.
pub(crate) fn dataset_kind(kind: StreamKind) -> DatasetKind {
    match kind {
        StreamKind::Volume => DatasetKind::Volume,
        StreamKind::Filesystem => DatasetKind::Filesystem,
    }
}

impl Pool {
    /// Finds the target's snapshot an incremental stream comes from (its guid is the
    /// stream's `from_guid`); refuses a target that does not exist, is of another kind, or
    /// holds no such snapshot (naming both guids).
    pub(crate) fn incremental_plan(
        &self,
        target: &str,
        header: &StreamHeader,
    ) -> Result<IncrementalPlan, EngineError> {
        let refuse =
            |why: String| EngineError::Receive(format!("cannot receive into '{target}': {why}"));
        let directory = self.core.directory.lock();
        let Ok(record) = directory.get(target) else {
            return Err(refuse(format!(
                "it does not exist, and the stream is incremental (from snapshot guid {}): \
                 receive its full stream first",
                header.from_guid
            )));
        };
        let kind = dataset_kind(header.kind);
        if record.kind != kind {
            return Err(refuse(format!(
                "it is a {}, the stream a {}",
                record.kind.as_str(),
                kind.as_str()
            )));
        }
        if kind == DatasetKind::Volume
            && directory.properties_of(target)?.volsize_bytes != header.volsize_bytes
        {
            return Err(refuse(format!(
                "the stream's volume size ({} bytes) is not the target's: a size change is not \
                 received yet",
                header.volsize_bytes
            )));
        }
        let table = self.core.snapshots.lock();
        let guid_of = |info: &cairn_dataset::snapshots::SnapshotInfo| {
            crate::send::stored_or_derived_guid(
                info.guid,
                self.core.guid,
                info.id,
                info.created_txg,
            )
        };
        let snapshots: Vec<_> = table.snapshots_of(record.id).collect();
        let Some(position) = snapshots
            .iter()
            .position(|snapshot| guid_of(&snapshot.info) == header.from_guid)
        else {
            let newest = match snapshots.last() {
                Some(newest) => format!(
                    "its newest snapshot is {target}@{} (guid {})",
                    newest.info.name,
                    guid_of(&newest.info)
                ),
                None => "it has no snapshot".to_string(),
            };
            return Err(refuse(format!(
                "the stream's source snapshot (guid {}) is not on it ({newest})",
                header.from_guid
            )));
        };
        let source = &snapshots[position].info;
        let newer = snapshots[position + 1..]
            .iter()
            .map(|snapshot| format!("{target}@{}", snapshot.info.name))
            .collect();
        let written_bytes =
            table.head_written_since(record.id, snapshots[position], record.used_bytes);
        Ok(IncrementalPlan {
            source: IncrementalSource {
                snapshot: source.name.clone(),
                force: false,
                properties: None,
                newer: Vec::new(),
            },
            newer,
            written_bytes,
        })
    }

    /// Renames the hidden dataset of a full receive to `target` and takes its snapshot
    /// `snapshot` with `guid`, in one txg, durable on return.
    pub(crate) fn finish_full(
        &self,
        target: &str,
        hidden: &str,
        snapshot: &str,
        guid: u64,
    ) -> Result<(), EngineError> {
        let (target, hidden, snapshot) =
            (target.to_string(), hidden.to_string(), snapshot.to_string());
        self.run_sync_task(move |core, _txg| {
            let mut directory = core.directory.lock();
            directory.rename(&hidden, &target)?;
            // A resumable receive's token goes in the txg that makes the snapshot visible.
            directory
                .get_mut(&target)?
                .properties
                .remove(RESUME_TOKEN_KEY);
            let mut objsets = core.objsets.lock();
            if let Some(objset) = objsets.remove(&hidden) {
                objsets.insert(target.clone(), objset);
            }
            directory.next_id += 1;
            core.pending_snapshots.lock().push(PendingSnapshot::Create {
                dataset: target,
                name: snapshot,
                id: directory.next_id,
                guid,
            });
            Ok(())
        })?;
        self.apply_properties();
        Ok(())
    }

    /// Swaps the hidden clone of an incremental receive in as `target`'s head and takes its
    /// snapshot `snapshot` with `guid`, in one txg, durable on return. A mounted filesystem
    /// is retired and opened again over the new head, as a rollback does; a volume's handle
    /// turns read-only (its clients open it again).
    pub(crate) fn finish_incremental(
        &self,
        target: &str,
        hidden: &str,
        source: &IncrementalSource,
        snapshot: &str,
        guid: u64,
    ) -> Result<(), EngineError> {
        // The stream verified to its END: only now may `-F` take the newer snapshots.
        if !source.newer.is_empty() {
            self.destroy_snapshots(&source.newer)?;
        }
        if let Some(volume) = self.volumes.lock().remove(target) {
            volume.set_readonly(true);
        }
        let carried = self.retire_filesystem(target);
        // Its records are all synced below; the head that follows starts a log of its own
        // (as after a rollback).
        let intent_log = self.core.intent_logs.lock().remove(target);
        self.sync()?;
        let mut swapped = Err(EngineError::Receive(format!(
            "'{target}' had snapshots being taken in every txg tried"
        )));
        for _ in 0..FINISH_TXG_ATTEMPTS {
            let done = Arc::new(AtomicBool::new(false));
            let (flag, log) = (done.clone(), intent_log.clone());
            let (target, hidden, source, snapshot) = (
                target.to_string(),
                hidden.to_string(),
                source.clone(),
                snapshot.to_string(),
            );
            swapped = self.run_sync_task(move |core, txg| {
                if core.swap_received(txg, &target, &hidden, &source, &snapshot, guid)? {
                    if let Some(log) = &log {
                        log.release_all(txg);
                    }
                    flag.store(true, Ordering::SeqCst);
                }
                Ok(())
            });
            if swapped.is_err() || done.load(Ordering::SeqCst) {
                break;
            }
        }
        // Opened again whether or not the swap was made: over the new head, or the old one.
        if let Some(carried) = carried {
            self.reopen_filesystem(target, &carried)?;
        }
        swapped?;
        self.apply_properties();
        crate::core::reclaim_deferred(&self.core, self.txg_engine()?);
        Ok(())
    }

    /// Destroys the hidden datasets receives killed mid-stream left (at import, writable):
    /// their trees are freed in the background. One with a resume token (`receive -s`) is
    /// kept: it is resumed with `send -t`, or abandoned with `receive -A`. Returns a note per
    /// dataset destroyed.
    pub(crate) fn destroy_abandoned_receives(&self) -> Vec<String> {
        let hidden: Vec<String> = self
            .core
            .directory
            .lock()
            .datasets
            .values()
            .filter(|record| {
                is_hidden(&record.name) && !record.properties.contains_key(RESUME_TOKEN_KEY)
            })
            .map(|record| record.name.clone())
            .collect();
        hidden
            .into_iter()
            .map(|name| match self.destroy_dataset_any(&name) {
                Ok(()) => format!("destroyed '{name}', left by a receive that did not finish"),
                Err(err) => format!(
                    "could not destroy '{name}', left by a receive that did not finish: {}",
                    crate::error_chain(&err)
                ),
            })
            .collect()
    }
}

impl PoolCore {
    /// The swap of `finish_incremental`, in a sync task of `txg` (see the module doc). False,
    /// changing nothing, when a snapshot of `target` is already being taken in this txg.
    fn swap_received(
        &self,
        txg: u64,
        target: &str,
        hidden: &str,
        source: &IncrementalSource,
        snapshot: &str,
        guid: u64,
    ) -> Result<bool, EngineError> {
        // Lock order: the directory, the table, then the pending changes.
        let mut directory = self.directory.lock();
        let mut table = self.snapshots.lock();
        let mut pending = self.pending_snapshots.lock();
        if pending.iter().any(|change| {
            matches!(change, PendingSnapshot::Create { dataset, .. }
                | PendingSnapshot::Destroy { dataset, .. } if dataset == target)
        }) {
            return Ok(false);
        }
        let record = directory.get(target)?;
        let (id, old_root, used_bytes) = (record.id, record.objset_bp()?, record.used_bytes);
        let clone = directory.get(hidden)?;
        let (clone_id, clone_root, clone_used_bytes) =
            (clone.id, clone.objset_bp()?, clone.used_bytes);
        let changed = |why: String| {
            EngineError::Receive(format!(
                "'{target}' changed during the receive ({why}): nothing received"
            ))
        };
        let source_snapshot = table
            .find(id, &source.snapshot)
            .ok_or_else(|| changed(format!("@{} was destroyed", source.snapshot)))?;
        let source_txg = source_snapshot.info.created_txg;
        if table.prev_snap_txg(id) != source_txg
            || table.origin_of(clone_id).map(|o| o.info.id) != Some(source_snapshot.info.id)
        {
            return Err(changed("a snapshot was taken".into()));
        }
        if table.find(id, snapshot).is_some() {
            return Err(DatasetError::Exists(format!("{target}@{snapshot}")).into());
        }
        let written = table.head_written(id, used_bytes);
        if written > 0 && !source.force {
            return Err(changed(format!(
                "{written} bytes written; -F discards them"
            )));
        }
        // The old head's blocks born after the source were its alone.
        table.queue_tree_free(&old_root, source_txg, written);
        for object in table.rollback(id) {
            self.free_mos_object(txg, object);
        }
        table.adopt_clone_head(clone_id, id)?;
        directory.datasets.remove(hidden);
        for object in table.forget_dataset(clone_id) {
            self.free_mos_object(txg, object);
        }
        let record = directory.get_mut(target)?;
        record.set_objset_bp(&clone_root);
        record.used_bytes = clone_used_bytes;
        if let Some(properties) = &source.properties {
            record.properties = properties.clone();
        }
        crate::snapshot_sync::refresh_snapshot_bytes(&mut directory, &table);
        let mut objsets = self.objsets.lock();
        if let Some(objset) = objsets.remove(hidden) {
            objsets.insert(target.to_string(), objset);
        }
        directory.next_id += 1;
        pending.push(PendingSnapshot::Create {
            dataset: target.to_string(),
            name: snapshot.to_string(),
            id: directory.next_id,
            guid,
        });
        self.snapshot_stats.follow_frees(
            &table,
            txg,
            &format!("the head of {target} replaced by a receive"),
        );
        Ok(true)
    }
}
