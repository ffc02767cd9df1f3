//! Durability of a filesystem: its intent log (every change logged inside the txg hold that
//! made it, so a record names its txg), `fsync` and `sync`, and replay at import.
//!
//! One log lane, and per-inode records beside it (OpenZFS's sync and async itxs). Namespace
//! changes (create, link, remove, rename) and extended attributes are logged into the lane at
//! once (`IntentLog::log`); an inode's data and attribute changes (writes, truncation and
//! other `setattr`s, `fallocate`: `FsOp::per_object`) wait in that inode's list
//! (`IntentLog::log_deferred`). `fsync(X)` moves X's list to the end of the lane and commits
//! the lane's newest record: X's changes and every namespace change logged before, the ones
//! X depends on (its directory entries, a rename of its parent, the removal of a name it
//! replaced) included, but not other files' data. `sync_all` (syncfs) moves every list first.
//!
//! Why that is safe to replay: replay applies records by (txg, sequence), where the change
//! was made, whatever order they reached the log in. The durable log holds every namespace
//! record up to some point and, per inode, a prefix of its own changes that were moved before
//! that point, so each replayed data change finds its inode created and named, and no
//! namespace change reads what a missing data change would have set (a create carries its
//! mode and owner; a rename or removal needs no file's contents). An inode's own changes keep
//! their order (write, truncate, chmod never reorder: one list, moved whole, in sequence
//! order). A file unlinked while open and then written and fsynced: its removal is in the
//! lane before its later writes are moved, and replay queues it for deletion (below). A
//! freed inode's list is dropped (`IntentLog::forget_object`): nothing can fsync it. Records
//! of synced txgs are dropped as soon as the txg is durable, and a write record goes as soon
//! as a later write of its inode covers its range (its buffer, which the dirty block no
//! longer shares, with it), so memory stays bounded by the unsynced txgs' distinct writes;
//! past `ZilConfig::deferred_bytes_max` a sync is asked for, past twice it writers wait
//! (`throttle_log`).
//!
//! `sync=always` commits everything after every change, `disabled` never (an `fsync` then
//! returns at once; changes are lost if the machine stops before their txg syncs, as with
//! ZFS). Without a log (a filesystem opened for tools) `fsync` waits for a txg sync.
//!
//! Write records: a write's whole blocks share their buffers with the dirty blocks (no copy),
//! the rest is copied. A synchronous write (`write_sync`: a file opened O_SYNC or O_DSYNC, or
//! any write under `sync=always`) under `logbias=throughput` writes its whole non-zero blocks
//! in place first and logs only their pointers (`WriteInPlace`), as volumes do: the data is
//! written once, not in the log and again by the txg. Replay reads such a block, verified
//! against its pointer, and writes it again the ordinary way; the engine claims its space
//! for the replay and frees it after.
//!
//! Replay applies, in order, the records of txgs that never synced, each with the `do_*` twin
//! of the live call and the object numbers and times the record carries: what was
//! acknowledged is rebuilt exactly once (the engine runs all of it in one txg; see
//! `cairn-engine`'s replay). Which inodes were open is not logged, so replay treats every
//! inode as open: one whose last name goes is queued for deletion, not freed, and the records
//! that change it afterwards (writes to a file unlinked while open) still apply; the queue is
//! drained when the filesystem is next opened.

use crate::attrs::Timestamp;
use crate::data::StoredBlock;
use crate::log::FsOp;
use crate::xattr::NewObjects;
use crate::{Filesystem, FsError, SyncMode};
use bytes::Bytes;
use cairn_device::queue::IoClass;
use cairn_format::{LogRecord, LogRecordKind, ObjectType};
use cairn_pool::txg::TxgHold;
use cairn_zil::{IntentLog, ItxData, LogOp, LogSource, LogSourceError};
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl Filesystem {
    /// Gives the filesystem its intent log (before it is shared).
    pub fn with_intent_log(mut self, log: Arc<IntentLog>) -> Filesystem {
        self.intent_log = Some(log);
        self
    }

    /// Makes this (unshared) filesystem the one a replay applies records with. An inode
    /// whose last name a replayed record removes goes to the delete queue instead of being
    /// freed, as if it were open: it may have been open when the change was made, and later
    /// records may still change it (a file unlinked while open, then written and fsynced).
    /// The next open of the filesystem drains the queue (`drain_delete_queue`).
    pub fn for_replay(mut self) -> Filesystem {
        self.replaying = true;
        self
    }

    pub fn intent_log(&self) -> Option<&Arc<IntentLog>> {
        self.intent_log.as_ref()
    }

    /// Logs `op`, made under `hold`.
    pub(crate) fn logged(&self, hold: &TxgHold, op: FsOp) {
        let payload = op.encode();
        let record = LogOp {
            kind: LogRecordKind::Fs,
            txg: hold.txg(),
            object: op.object(),
            offset: 0,
            length: payload.len() as u64,
            data: ItxData::Copied(Bytes::from(payload)),
        };
        if op.per_object() {
            self.log_per_object(record);
        } else if let Some(log) = &self.intent_log {
            log.log(0, record);
        }
    }

    /// Logs a write of `data` at `offset` of `object`, made under `hold`, as records in
    /// offset order: the whole blocks it stored (`stored`, in offset order) share their
    /// buffers (no copy, and no memory the dirty blocks do not hold already, until a later
    /// write replaces a block in its txg: that write's record then covers, and drops, the
    /// earlier one) or, written in place, are logged as their pointers; the rest (parts of
    /// blocks, holes) is copied. The records cover exactly the bytes written, so the log
    /// describes the same change however it is cut into records.
    pub(crate) fn logged_write(
        &self,
        hold: &TxgHold,
        object: u64,
        offset: u64,
        data: &[u8],
        stored: Vec<(u64, StoredBlock)>,
    ) {
        if self.intent_log.is_none() {
            return;
        }
        let end = offset + data.len() as u64;
        let mut position = offset;
        let record = |at: u64, length: u64, kind: LogRecordKind, data: ItxData| LogOp {
            kind,
            txg: hold.txg(),
            object,
            offset: at,
            length,
            data,
        };
        let copied = |from: u64, to: u64| {
            let bytes =
                Bytes::copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            record(
                from,
                to - from,
                LogRecordKind::Write,
                ItxData::Copied(bytes),
            )
        };
        for (at, block) in stored {
            let (length, kind, data) = match block {
                StoredBlock::Shared(bytes) => (
                    bytes.len() as u64,
                    LogRecordKind::Write,
                    ItxData::Copied(bytes),
                ),
                StoredBlock::InPlace(bp) => (
                    u64::from(bp.lsize),
                    LogRecordKind::WriteInPlace,
                    ItxData::Pointer(bp),
                ),
            };
            assert!(
                at >= position && at + length <= end,
                "a stored block outside its write, or out of order"
            );
            if at > position {
                self.log_per_object(copied(position, at));
            }
            position = at + length;
            self.log_per_object(record(at, length, kind, data));
        }
        if position < end {
            self.log_per_object(copied(position, end));
        }
    }

    /// Logs a record only a commit of its own inode (or of everything) needs: it waits outside
    /// the lane until then (`IntentLog::log_deferred`).
    fn log_per_object(&self, op: LogOp) {
        if let Some(log) = &self.intent_log {
            log.log_deferred(0, op);
        }
    }

    /// Holds a writer back, with no txg held, while the log's per-inode records waiting for
    /// their fsync hold more than their bound (`IntentLog::throttle_deferred`).
    pub(crate) fn throttle_log(&self) {
        if let Some(log) = &self.intent_log {
            log.throttle_deferred();
        }
    }

    /// Ends a change: lets its txg go, and under `sync=always` commits it.
    pub(crate) fn commit_if_always(&self, hold: TxgHold) -> Result<(), FsError> {
        drop(hold);
        if self.config.read().sync == SyncMode::Always {
            self.commit_log()?;
        }
        Ok(())
    }

    /// Commits every change logged so far, every inode's: the lane's newest record by number,
    /// whatever its txg, after every per-object record joined it. (Not a remembered "last
    /// ticket": two changes log in either order, and a change that joined txg T can log after
    /// one that joined T + 1, opened while T quiesced; a commit of that T record returns at
    /// once once T has synced, leaving the T + 1 record in memory. The crash test
    /// `filesystem_crash.rs` has the regression test.)
    fn commit_log(&self) -> Result<(), FsError> {
        // A retired head's log was released with it: nothing of it may be committed.
        self.check_current()?;
        match &self.intent_log {
            Some(log) => log.commit_all(self).map_err(FsError::from),
            None => self.wait_for_txg(),
        }
    }

    /// Commits inode `object`'s changes and every namespace change logged so far (the lane's
    /// newest record, as `commit_log`), not other inodes' per-object records.
    fn commit_inode(&self, object: u64) -> Result<(), FsError> {
        self.check_current()?;
        match &self.intent_log {
            Some(log) => log.commit_object(object, self).map_err(FsError::from),
            None => self.wait_for_txg(),
        }
    }

    fn wait_for_txg(&self) -> Result<(), FsError> {
        let txg = self.txg.sync_now()?;
        self.txg.wait_synced(txg)?;
        Ok(())
    }

    /// Makes every change of inode `object` durable, and every change it depends on.
    pub fn fsync(&self, object: u64) -> Result<(), FsError> {
        self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
        if self.config.read().sync == SyncMode::Disabled {
            return Ok(());
        }
        if self.intent_log.is_none() {
            let txg = self.dirty_txg.lock().txgs.get(&object).copied();
            if let Some(txg) = txg
                && txg > self.txg.last_synced_txg()
            {
                self.txg.sync_now()?;
                self.txg.wait_synced(txg)?;
            }
            return Ok(());
        }
        self.commit_inode(object)
    }

    /// Makes every change of the filesystem durable.
    pub fn sync_all(&self) -> Result<(), FsError> {
        if self.config.read().sync == SyncMode::Disabled {
            return Ok(());
        }
        self.commit_log()
    }

    /// Applies one replayed record under `hold` (import; nothing is logged).
    pub fn replay_record(&self, hold: &TxgHold, record: &LogRecord) -> Result<(), FsError> {
        match record.kind {
            LogRecordKind::Write => {
                // Writes carry no time: the file's mtime becomes the replay's.
                self.do_write(
                    hold,
                    record.object,
                    record.offset,
                    &record.data,
                    Timestamp::now(),
                    None,
                )?;
            }
            LogRecordKind::WriteInPlace => {
                let data = self.read_in_place_block(record)?;
                self.do_write(
                    hold,
                    record.object,
                    record.offset,
                    &data,
                    Timestamp::now(),
                    None,
                )?;
            }
            LogRecordKind::Fs => self.replay_op(hold, record.txg, FsOp::decode(&record.data)?)?,
            other => {
                return Err(FsError::Corrupt(format!(
                    "a {other:?} record in a filesystem's log"
                )));
            }
        }
        Ok(())
    }

    /// The block a replayed write in place names (its space claimed by the caller, which
    /// frees it once the replay wrote the data again). The log block checksummed, but its
    /// pointer must still name one level-0 block of file data of the record's length, and the
    /// block must verify against it: the change it carries was acknowledged.
    fn read_in_place_block(&self, record: &LogRecord) -> Result<Bytes, FsError> {
        let corrupt = |problem: String| {
            FsError::Corrupt(format!(
                "write in place at offset {} of object {} (txg {}): {problem}",
                record.offset, record.object, record.txg
            ))
        };
        let bp = record
            .block_pointer()
            .ok_or_else(|| corrupt("no block pointer".into()))?;
        if bp.level != 0
            || bp.object_type != ObjectType::FileData
            || u64::from(bp.lsize) != record.length
        {
            return Err(corrupt(format!(
                "the logged pointer is a level-{} {:?} block of {} bytes",
                bp.level, bp.object_type, bp.lsize
            )));
        }
        self.objset
            .io()
            .read_block(&bp, IoClass::SyncRead)
            .map_err(|err| {
                corrupt(format!(
                    "reading the logged block: {}",
                    cairn_device::error_chain(&err)
                ))
            })
    }

    fn replay_op(&self, hold: &TxgHold, txg: u64, op: FsOp) -> Result<(), FsError> {
        match op {
            FsOp::Create {
                dir,
                name,
                object,
                kind,
                mode,
                uid,
                gid,
                rdev,
                time,
                target,
            } => {
                let new = crate::NewInode {
                    kind,
                    mode,
                    uid,
                    gid,
                    rdev,
                };
                self.do_create(hold, dir, &name, object, new, &target, time, txg)?;
            }
            FsOp::Link {
                object,
                dir,
                name,
                time,
            } => {
                self.do_link(hold, object, dir, &name, time)?;
            }
            FsOp::Remove {
                dir,
                name,
                directory,
                time,
            } => {
                self.do_remove(hold, dir, &name, directory, time, None)?;
            }
            FsOp::Rename {
                old_dir,
                old_name,
                new_dir,
                new_name,
                mode,
                time,
            } => {
                self.do_rename(
                    hold, old_dir, &old_name, new_dir, &new_name, mode, time, None,
                )?;
            }
            FsOp::SetAttrs {
                object,
                changes,
                time,
            } => {
                self.do_setattr(hold, object, changes, time)?;
            }
            FsOp::SetXattr {
                object,
                map_object,
                value_object,
                name,
                value,
                mode,
                time,
            } => {
                let new = NewObjects {
                    map: map_object,
                    value: value_object,
                };
                self.do_setxattr(hold, object, new, &name, &value, mode, time)?
            }
            FsOp::RemoveXattr { object, name, time } => {
                self.do_removexattr(hold, object, &name, time)?
            }
            FsOp::Fallocate {
                object,
                offset,
                len,
                op,
                time,
            } => {
                self.do_fallocate(hold, object, offset, len, op, time)?;
            }
        }
        Ok(())
    }
}

impl LogSource for Filesystem {
    fn read_for_log(&self, object: u64, offset: u64, buf: &mut [u8]) -> Result<(), LogSourceError> {
        let (data, _) = self.read_data(object, offset, buf.len(), crate::ReadAhead::None)?;
        buf[..data.len()].copy_from_slice(&data);
        buf[data.len()..].fill(0);
        Ok(())
    }
}
