//! Per-object records: changes that only one object's commit needs (OpenZFS's async itxs).
//!
//! A record logged with `IntentLog::log_deferred` names one object (a file's write, truncate,
//! attribute change) and takes its sequence number at once, but waits here, in its object's
//! list, instead of joining a lane. A commit of that object (`IntentLog::commit_object`: a
//! file's fsync, an NFS COMMIT) moves the object's list to the end of its lane and then
//! commits every lane up to its newest record; a commit of everything (`commit_all`: syncfs,
//! an NBD FLUSH, `sync=always`) moves every list first. Records logged with `IntentLog::log`
//! (a filesystem's namespace changes; every volume record) join their lane at once, so any
//! commit carries them: they are what other objects' records may depend on.
//!
//! Invariants:
//! - An object's records are kept, and moved, in sequence order, and the move happens under
//!   this module's lock, before the committer looks at the lanes: a commit of the object that
//!   starts after a record was logged always finds the record in a lane (moved by itself or
//!   by a concurrent committer whose appends it then sees).
//! - Lane order is not replay order: replay sorts every record by (txg, sequence), so a
//!   record moved late lands where the change was made. What the lanes' durable prefix holds
//!   is every `log` record up to some point plus, per object, the records moved before it: a
//!   prefix of each object's changes, never a change whose `log` records (the names that
//!   reach its object, its creation) are missing, since those joined the lane before the move.
//! - Records whose txg has synced are never moved (they are on disk) and are dropped by the
//!   sync hook of the next txg (which runs before that txg is durable, so it drops only what
//!   earlier txgs made durable); an object's records are dropped when the object is freed
//!   (`forget`), as nothing can commit them any more. Memory stays bounded by the records of
//!   the unsynced txgs and the last synced one, as in the lanes (whose records of synced
//!   txgs go at the next append or commit).

use crate::LogOp;
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;

/// One record waiting for its object's commit.
pub(crate) struct DeferredRecord {
    pub(crate) lane_hint: usize,
    pub(crate) sequence: u64,
    pub(crate) op: LogOp,
}

/// Every object's waiting records, by object number (a `BTreeMap`: moves in a fixed order).
#[derive(Default)]
pub(crate) struct Deferred {
    objects: Mutex<BTreeMap<u64, Vec<DeferredRecord>>>,
}

/// The records taken under the lock, which stays held until they are in their lanes.
pub(crate) struct Taken<'a> {
    _guard: MutexGuard<'a, BTreeMap<u64, Vec<DeferredRecord>>>,
    pub(crate) records: Vec<DeferredRecord>,
}

impl Deferred {
    /// Files `op` under its object; `sequence` is drawn by the caller under this lock (through
    /// `next`), so each object's list stays in sequence order.
    pub(crate) fn push(&self, lane_hint: usize, op: LogOp, next: impl FnOnce() -> u64) {
        let mut objects = self.objects.lock();
        let sequence = next();
        objects.entry(op.object).or_default().push(DeferredRecord {
            lane_hint,
            sequence,
            op,
        });
    }

    /// Takes `object`'s records not in a synced txg (`None`: every object's), in sequence
    /// order per object, keeping the lock until the result is dropped.
    pub(crate) fn take(&self, object: Option<u64>, synced_txg: u64) -> (Taken<'_>, u64) {
        let mut objects = self.objects.lock();
        let mut records = Vec::new();
        match object {
            Some(object) => records.extend(objects.remove(&object).unwrap_or_default()),
            None => {
                for (_, list) in std::mem::take(&mut *objects) {
                    records.extend(list);
                }
            }
        }
        let before = records.len();
        records.retain(|record| record.op.txg > synced_txg);
        let dropped = (before - records.len()) as u64;
        (
            Taken {
                _guard: objects,
                records,
            },
            dropped,
        )
    }

    /// Drops the records of txgs up to `synced_txg`; returns how many.
    pub(crate) fn drop_synced(&self, synced_txg: u64) -> u64 {
        let mut objects = self.objects.lock();
        let mut dropped = 0u64;
        objects.retain(|_, list| {
            let before = list.len();
            list.retain(|record| record.op.txg > synced_txg);
            dropped += (before - list.len()) as u64;
            !list.is_empty()
        });
        dropped
    }

    /// Drops every record of `object` (freed: nothing can commit them); returns how many.
    pub(crate) fn forget(&self, object: u64) -> u64 {
        self.objects
            .lock()
            .remove(&object)
            .map_or(0, |list| list.len() as u64)
    }

    /// Records waiting, all objects.
    pub(crate) fn len(&self) -> u64 {
        self.objects
            .lock()
            .values()
            .map(|list| list.len() as u64)
            .sum()
    }
}
