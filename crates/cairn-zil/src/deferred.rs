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
//! Memory: a waiting write record holds its data (a copy, or the buffer its whole block was
//! stored with, which the dirty block shares until a later write of the block replaces it).
//! Uncounted, a flood of writes over the same range of a file held every superseded buffer
//! until its txg synced: 8 MiB rewritten by NFS clients for 5 s held ~330 MiB beside 8 MiB of
//! dirty data, which the dirty-data limit never saw (a block dirtied again in its txg counts
//! once). So:
//! - A write record is dropped when a later write record of the same object covers its whole
//!   range (`push`): replay applies records by (txg, sequence), so the later one sets those
//!   bytes whatever the earlier one held, and no other record reads a file's data (a
//!   truncation in between changes bytes the later write sets again, and the later write
//!   extends the file at least as far). A commit moves an object's list whole, under this
//!   lock, so a commit never carries the earlier record without the later one. Whole blocks
//!   are logged one record each, so rewriting a block drops the previous record of it.
//! - The bytes every waiting record holds are counted (`held_bytes`, with its peak): past
//!   `ZilConfig::deferred_bytes_max` the log asks for a txg sync, past twice that writers wait
//!   for one (`IntentLog::throttle_deferred`), for what covering cannot drop (overlapping
//!   unaligned writes, or many files' waiting data).
//!
//! Invariants:
//! - An object's records are kept, and moved, in sequence order, and the move happens under
//!   this module's lock, before the committer looks at the lanes: a commit of the object that
//!   starts after a record was logged always finds the record in a lane (moved by itself or
//!   by a concurrent committer whose appends it then sees), or a later record of the object
//!   that covers it.
//! - `held_bytes` is the sum of the payloads of the records waiting (under the lock).
//! - Lane order is not replay order: replay sorts every record by (txg, sequence), so a
//!   record moved late lands where the change was made. What the lanes' durable prefix holds
//!   is every `log` record up to some point plus, per object, the records moved before it: a
//!   prefix of each object's changes (less writes a later one of them covers), never a change
//!   whose `log` records (the names that reach its object, its creation) are missing, since
//!   those joined the lane before the move.
//! - Records whose txg has synced are never moved (they are on disk) and are dropped as soon
//!   as the txg is durable (`IntentLog::txg_synced`, and again by the next txg's sync hook);
//!   an object's records are dropped when the object is freed (`forget`), as nothing can
//!   commit them any more. Memory stays bounded by the records of the unsynced txgs, less
//!   the covered ones, within the bound above.

use crate::{ItxData, LogOp};
use cairn_format::LogRecordKind;
use parking_lot::{Mutex, MutexGuard};
use std::collections::BTreeMap;
use std::ops::Bound;

/// One record waiting for its object's commit.
pub(crate) struct DeferredRecord {
    pub(crate) lane_hint: usize,
    pub(crate) sequence: u64,
    pub(crate) op: LogOp,
}

impl DeferredRecord {
    /// The bytes of payload the record holds in memory.
    fn held_bytes(&self) -> u64 {
        match &self.op.data {
            ItxData::Copied(bytes) => bytes.len() as u64,
            ItxData::NeedCopy | ItxData::Pointer(_) | ItxData::None => 0,
        }
    }

    /// The byte range a write record sets (`None` for any other record).
    fn written_range(&self) -> Option<(u64, u64)> {
        let op = &self.op;
        let write = matches!(op.kind, LogRecordKind::Write | LogRecordKind::WriteInPlace);
        (write && op.length > 0).then(|| (op.offset, op.offset.saturating_add(op.length)))
    }
}

/// One object's waiting records.
#[derive(Default)]
struct ObjectRecords {
    /// By sequence number: the order they are moved in.
    records: BTreeMap<u64, DeferredRecord>,
    /// The write records among them, by (offset, sequence), to their end offset.
    writes: BTreeMap<(u64, u64), u64>,
}

impl ObjectRecords {
    /// Removes the write records `[start, end)` covers whole; returns how many and their bytes.
    fn drop_covered(&mut self, start: u64, end: u64) -> (u64, u64) {
        let covered: Vec<(u64, u64)> = self
            .writes
            .range((Bound::Included((start, 0)), Bound::Excluded((end, 0))))
            .filter(|&(_, &record_end)| record_end <= end)
            .map(|(&key, _)| key)
            .collect();
        let mut bytes = 0u64;
        for key in &covered {
            self.writes.remove(key);
            if let Some(record) = self.records.remove(&key.1) {
                bytes += record.held_bytes();
            }
        }
        (covered.len() as u64, bytes)
    }

    /// Removes the records of txgs up to `synced_txg`; returns how many and their bytes.
    fn drop_synced(&mut self, synced_txg: u64) -> (u64, u64) {
        let (mut count, mut bytes) = (0u64, 0u64);
        let writes = &mut self.writes;
        self.records.retain(|_, record| {
            if record.op.txg > synced_txg {
                return true;
            }
            if let Some((start, _)) = record.written_range() {
                writes.remove(&(start, record.sequence));
            }
            count += 1;
            bytes += record.held_bytes();
            false
        });
        (count, bytes)
    }

    fn held_bytes(&self) -> u64 {
        self.records.values().map(DeferredRecord::held_bytes).sum()
    }
}

/// What `Deferred` guards.
#[derive(Default)]
struct State {
    /// Every object's waiting records, by object number (a `BTreeMap`: moves in a fixed order).
    objects: BTreeMap<u64, ObjectRecords>,
    held_bytes: u64,
    held_peak_bytes: u64,
}

impl State {
    fn release(&mut self, bytes: u64) {
        self.held_bytes = self
            .held_bytes
            .checked_sub(bytes)
            .expect("deferred bytes released twice");
    }
}

#[derive(Default)]
pub(crate) struct Deferred {
    state: Mutex<State>,
}

/// The records taken under the lock, which stays held until they are in their lanes.
pub(crate) struct Taken<'a> {
    _guard: MutexGuard<'a, State>,
    pub(crate) records: Vec<DeferredRecord>,
}

/// What filing one record did.
pub(crate) struct Pushed {
    /// Earlier write records of the object the new one covers, dropped.
    pub(crate) superseded: u64,
    /// Bytes held by every waiting record, after.
    pub(crate) held_bytes: u64,
}

impl Deferred {
    /// Files `op` under its object, dropping the earlier write records of the object it
    /// covers; `sequence` is drawn by the caller under this lock (through `next`), so each
    /// object's list stays in sequence order.
    pub(crate) fn push(&self, lane_hint: usize, op: LogOp, next: impl FnOnce() -> u64) -> Pushed {
        let mut state = self.state.lock();
        let sequence = next();
        let record = DeferredRecord {
            lane_hint,
            sequence,
            op,
        };
        let added = record.held_bytes();
        let object = state.objects.entry(record.op.object).or_default();
        let (superseded, released) = match record.written_range() {
            Some((start, end)) => {
                let dropped = object.drop_covered(start, end);
                object.writes.insert((start, sequence), end);
                dropped
            }
            None => (0, 0),
        };
        object.records.insert(sequence, record);
        state.release(released);
        state.held_bytes += added;
        state.held_peak_bytes = state.held_peak_bytes.max(state.held_bytes);
        Pushed {
            superseded,
            held_bytes: state.held_bytes,
        }
    }

    /// Takes `object`'s records not in a synced txg (`None`: every object's), in sequence
    /// order per object, keeping the lock until the result is dropped.
    pub(crate) fn take(&self, object: Option<u64>, synced_txg: u64) -> (Taken<'_>, u64) {
        let mut state = self.state.lock();
        let mut records = Vec::new();
        let mut released = 0u64;
        let mut take_list = |list: ObjectRecords| {
            released += list.held_bytes();
            records.extend(list.records.into_values());
        };
        match object {
            Some(object) => {
                if let Some(list) = state.objects.remove(&object) {
                    take_list(list);
                }
            }
            None => {
                for (_, list) in std::mem::take(&mut state.objects) {
                    take_list(list);
                }
            }
        }
        state.release(released);
        let before = records.len();
        records.retain(|record| record.op.txg > synced_txg);
        let dropped = (before - records.len()) as u64;
        (
            Taken {
                _guard: state,
                records,
            },
            dropped,
        )
    }

    /// Drops the records of txgs up to `synced_txg`; returns how many.
    pub(crate) fn drop_synced(&self, synced_txg: u64) -> u64 {
        let mut state = self.state.lock();
        let (mut dropped, mut released) = (0u64, 0u64);
        state.objects.retain(|_, list| {
            let (count, bytes) = list.drop_synced(synced_txg);
            dropped += count;
            released += bytes;
            !list.records.is_empty()
        });
        state.release(released);
        dropped
    }

    /// Drops every record of `object` (freed: nothing can commit them); returns how many.
    pub(crate) fn forget(&self, object: u64) -> u64 {
        let mut state = self.state.lock();
        let Some(list) = state.objects.remove(&object) else {
            return 0;
        };
        state.release(list.held_bytes());
        list.records.len() as u64
    }

    /// Records waiting, all objects.
    pub(crate) fn len(&self) -> u64 {
        self.state
            .lock()
            .objects
            .values()
            .map(|list| list.records.len() as u64)
            .sum()
    }

    /// Bytes the waiting records hold now, and the most they have held.
    pub(crate) fn held_bytes(&self) -> (u64, u64) {
        let state = self.state.lock();
        (state.held_bytes, state.held_peak_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn write(txg: u64, object: u64, offset: u64, length: u64) -> LogOp {
        LogOp {
            kind: LogRecordKind::Write,
            txg,
            object,
            offset,
            length,
            data: ItxData::Copied(Bytes::from(vec![7u8; length as usize])),
        }
    }

    fn push(deferred: &Deferred, sequence: &mut u64, op: LogOp) -> Pushed {
        deferred.push(0, op, || {
            *sequence += 1;
            *sequence
        })
    }

    #[test]
    fn a_covering_write_drops_the_writes_it_covers_and_only_those() {
        let deferred = Deferred::default();
        let mut sequence = 0;
        for _ in 0..100 {
            push(&deferred, &mut sequence, write(5, 1, 0, 4096));
        }
        assert_eq!(deferred.len(), 1, "rewrites of one range kept");
        assert_eq!(deferred.held_bytes().0, 4096);
        // Partly covered, another object, a record that is not a write: all kept.
        push(&deferred, &mut sequence, write(5, 1, 2048, 4096));
        push(&deferred, &mut sequence, write(5, 2, 0, 4096));
        let attrs = LogOp {
            kind: LogRecordKind::Fs,
            txg: 5,
            object: 1,
            offset: 0,
            length: 10,
            data: ItxData::Copied(Bytes::from(vec![1u8; 10])),
        };
        push(&deferred, &mut sequence, attrs);
        assert_eq!(deferred.len(), 4);
        assert_eq!(deferred.held_bytes().0, 3 * 4096 + 10);
        // Covering both of object 1's writes, from another txg.
        let pushed = push(&deferred, &mut sequence, write(6, 1, 0, 8192));
        assert_eq!(pushed.superseded, 2);
        assert_eq!(pushed.held_bytes, 8192 + 4096 + 10);
        let (taken, dropped) = deferred.take(Some(1), 4);
        assert_eq!(dropped, 0);
        let kept: Vec<(LogRecordKind, u64, u64)> = taken
            .records
            .iter()
            .map(|record| (record.op.kind, record.op.offset, record.op.length))
            .collect();
        assert_eq!(
            kept,
            [(LogRecordKind::Fs, 0, 10), (LogRecordKind::Write, 0, 8192)],
            "in sequence order"
        );
        drop(taken);
        assert_eq!(deferred.held_bytes(), (4096, 3 * 4096 + 10));
    }

    #[test]
    fn held_bytes_follow_synced_txgs_and_forgotten_objects() {
        let deferred = Deferred::default();
        let mut sequence = 0;
        push(&deferred, &mut sequence, write(5, 1, 0, 100));
        push(&deferred, &mut sequence, write(6, 1, 100, 100));
        push(&deferred, &mut sequence, write(6, 2, 0, 100));
        assert_eq!(deferred.drop_synced(5), 1);
        assert_eq!(deferred.held_bytes().0, 200);
        // The dropped record's range is free to cover again without a stale index entry.
        let pushed = push(&deferred, &mut sequence, write(7, 1, 0, 200));
        assert_eq!(pushed.superseded, 1, "the txg-6 record at 100");
        assert_eq!(deferred.forget(1), 1);
        assert_eq!(deferred.held_bytes().0, 100);
        assert_eq!(deferred.forget(2), 1);
        assert_eq!(deferred.held_bytes(), (0, 300));
        assert_eq!(deferred.len(), 0);
    }
}
