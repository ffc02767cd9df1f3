//! Attributes and data: setattr (truncation included), writes, fallocate and holes
//! (extended attributes are `xattr.rs`'s). As in `namespace.rs`, each changing call has a `do_*` twin that replay
//! uses with the logged times; file data is logged as `Write` records.
//! The block mechanics (pieces, whole blocks and holes, partial blocks, writes in place) are
//! cairn-dataset's `block_write`, shared with volumes; what is a file's own stays here (block
//! size growing with a small file, inode attributes, holes left alone where a file has none).

use crate::SpaceAsk;
use crate::attrs::{FileKind, InodeAttrs, Timestamp};
use crate::log::FsOp;
use crate::{
    AtimeMode, Fallocate, Filesystem, FsError, NAMESPACE_CHANGE_BYTES, SetAttrs, small_block_bytes,
};
use bytes::Bytes;
use cairn_dataset::block_write;
use cairn_format::BlockPointer;
use cairn_object::is_all_zero;
use cairn_pool::txg::TxgHold;
use std::sync::atomic::Ordering;

/// The whole blocks a write stored, by file offset, for its log records.
pub(crate) struct StoredBlocks {
    /// Write non-zero whole blocks in place (`write_in_place`).
    pub(crate) in_place: bool,
    pub(crate) blocks: Vec<(u64, StoredBlock)>,
}

pub(crate) enum StoredBlock {
    /// Stored as a dirty block: its buffer, shared with the log record.
    Shared(Bytes),
    /// Written in place: its pointer, all the log record carries.
    InPlace(BlockPointer),
}

/// File capabilities: the extended attribute a write by an unprivileged caller removes.
const CAPABILITY_XATTR: &[u8] = b"security.capability";

impl Filesystem {
    /// Changes attributes; a size change truncates or extends the file.
    pub fn setattr(&self, object: u64, changes: SetAttrs) -> Result<InodeAttrs, FsError> {
        self.check_writable()?;
        // Extending makes a hole (no data), but the change itself needs room: at a quota or on
        // a full pool it is refused, as every growth is.
        let extends = match changes.size {
            Some(size) => size > self.getattr(object)?.size,
            None => false,
        };
        let space = extends.then(|| SpaceAsk::bytes(NAMESPACE_CHANGE_BYTES));
        let (hold, guards) = self.hold_locked(&[object], 0, space)?;
        let time = Timestamp::now();
        let attrs = self.do_setattr(&hold, object, changes, time)?;
        self.logged(
            &hold,
            FsOp::SetAttrs {
                object,
                changes,
                time,
            },
        );
        self.note_dirty(&[object], &hold);
        drop(guards);
        self.commit_if_always(hold)?;
        Ok(attrs)
    }

    /// Takes away what a write, truncate, `fallocate` or change of owner by an unprivileged
    /// caller must not leave on a file (as Linux's `file_remove_privs` does for local
    /// filesystems): set-user-ID, set-group-ID when the group may execute (without it the bit
    /// means mandatory locking), and file capabilities (`security.capability`). A change of
    /// owner takes them from every kind of inode but a directory (fifos, sockets and devices
    /// too, as Linux's `chown`); the other changes only reach regular files. For front ends
    /// whose protocol leaves this to the filesystem (FUSE's handle_killpriv_v2, NFS). Each
    /// removal is an ordinary logged change; nothing is logged when there is nothing to
    /// remove.
    pub fn remove_privileges(&self, object: u64) -> Result<(), FsError> {
        let attrs = self.getattr(object)?;
        if attrs.kind == FileKind::Directory || attrs.kind == FileKind::Symlink {
            return Ok(());
        }
        let mut mode = attrs.mode & !libc::S_ISUID;
        if attrs.mode & libc::S_IXGRP != 0 {
            mode &= !libc::S_ISGID;
        }
        let mut changed = false;
        if mode != attrs.mode {
            let changes = SetAttrs {
                mode: Some(mode),
                ..SetAttrs::default()
            };
            self.setattr(object, changes)?;
            changed = true;
        }
        if attrs.xattr_object != 0 {
            match self.removexattr(object, CAPABILITY_XATTR) {
                Ok(()) => changed = true,
                Err(FsError::NoAttribute) => {}
                Err(err) => return Err(err),
            }
        }
        if changed {
            self.changed_on_own(object);
        }
        Ok(())
    }

    pub(crate) fn do_setattr(
        &self,
        hold: &TxgHold,
        object: u64,
        changes: SetAttrs,
        now: Timestamp,
    ) -> Result<InodeAttrs, FsError> {
        let mut attrs = self.getattr(object)?;
        if let Some(size) = changes.size {
            match attrs.kind {
                FileKind::File => {}
                FileKind::Directory => return Err(FsError::IsDirectory),
                _ => return Err(FsError::Invalid("truncating a special file".into())),
            }
            if size != attrs.size {
                self.resize(hold, object, attrs.size, size)?;
                attrs.size = size;
            }
            attrs.mtime = now;
            attrs.ctime = now;
        }
        if let Some(mode) = changes.mode {
            attrs.mode = mode & 0o7777;
            attrs.ctime = now;
            self.chmod_access_acl(hold, object, &attrs)?;
        }
        if let Some(uid) = changes.uid {
            attrs.uid = uid;
            attrs.ctime = now;
        }
        if let Some(gid) = changes.gid {
            attrs.gid = gid;
            attrs.ctime = now;
        }
        if let Some(atime) = changes.atime {
            attrs.atime = atime;
            attrs.ctime = now;
        }
        if let Some(mtime) = changes.mtime {
            attrs.mtime = mtime;
            attrs.ctime = now;
        }
        if let Some(ctime) = changes.ctime {
            attrs.ctime = ctime;
        }
        self.put_attrs(hold, object, &attrs)?;
        Ok(attrs)
    }

    /// Updates the access time of inode `object` after a read, as the `atime` property says
    /// (`seen`: its attributes as the read found them). Best effort: a read never fails for
    /// it (a read-only filesystem or a suspended pool leaves the time as it is). The change
    /// joins the open txg and is logged as a `SetAttrs` record keeping the ctime, like any
    /// change (consistent after a crash), but is not committed on its own: neither
    /// `sync=always` nor the file's next `fsync` waits for it, as Linux does not for atime.
    pub(crate) fn touch_atime(&self, object: u64, seen: &InodeAttrs) {
        let (mode, readonly) = {
            let config = self.config.read();
            (config.atime, config.readonly)
        };
        let now = Timestamp::now();
        if readonly || !crate::atime_due(mode, seen, now) {
            return;
        }
        if let Ok(true) = self.update_atime(object, mode, now) {
            self.changed_on_own(object);
        }
    }

    /// Returns whether the access time changed.
    fn update_atime(&self, object: u64, mode: AtimeMode, now: Timestamp) -> Result<bool, FsError> {
        // Not throttled: a bonus change adds no dirty data, and a read must not wait for
        // writers' backpressure.
        let _guard = self.stripe(object).write();
        // The stripe lock keeps the attributes as read; the hold is taken only for a change,
        // so reads that change nothing make no txg sync.
        let attrs = self.getattr(object)?;
        if !crate::atime_due(mode, &attrs, now) {
            return Ok(false);
        }
        let hold = self.txg.try_hold()?;
        let changes = SetAttrs {
            atime: Some(now),
            ctime: Some(attrs.ctime),
            ..SetAttrs::default()
        };
        self.do_setattr(&hold, object, changes, now)?;
        self.logged(
            &hold,
            FsOp::SetAttrs {
                object,
                changes,
                time: now,
            },
        );
        Ok(true)
    }

    /// Writes `data` into file `object` at `offset`; returns the new attributes.
    pub fn write(&self, object: u64, offset: u64, data: &[u8]) -> Result<InodeAttrs, FsError> {
        self.write_with(object, offset, data, false, 0)
    }

    /// Writes data a front end has already acknowledged to its writer (the kernel's
    /// writeback cache answers write(2) before the data reaches the filesystem): refusing it
    /// now would lose it, so a quota may be exceeded by up to `quota_margin_bytes`, what the
    /// front end can have acknowledged at most before it stops (see cairn-frontend's
    /// `fuse/policy.rs`). The pool's own room is never exceeded.
    pub fn write_acknowledged(
        &self,
        object: u64,
        offset: u64,
        data: &[u8],
        quota_margin_bytes: u64,
    ) -> Result<InodeAttrs, FsError> {
        self.write_with(object, offset, data, false, quota_margin_bytes)
    }

    /// A synchronous write (a file opened O_SYNC or O_DSYNC): the data, and every change it
    /// depends on, are durable when this returns. Under `logbias=throughput` its whole blocks
    /// go to their final place now and only their pointers are logged (written once, not in
    /// the log and again at the txg sync), as for volumes.
    pub fn write_sync(&self, object: u64, offset: u64, data: &[u8]) -> Result<InodeAttrs, FsError> {
        let attrs = self.write_with(object, offset, data, true, 0)?;
        self.fsync(object)?;
        Ok(attrs)
    }

    fn write_with(
        &self,
        object: u64,
        offset: u64,
        data: &[u8],
        sync: bool,
        quota_margin_bytes: u64,
    ) -> Result<InodeAttrs, FsError> {
        self.check_writable()?;
        offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or(FsError::TooLarge)?;
        let space = SpaceAsk {
            // Data, its indirect blocks and the dnode's, with room to spare.
            bytes: data.len() as u64 + data.len() as u64 / 8 + NAMESPACE_CHANGE_BYTES,
            quota_margin_bytes,
            may_wait: true,
        };
        let (hold, guards) = self.hold_locked(&[object], data.len() as u64, Some(space))?;
        let mut stored = StoredBlocks {
            in_place: self.writes_in_place(sync),
            blocks: Vec::new(),
        };
        let attrs = self.do_write(
            &hold,
            object,
            offset,
            data,
            Timestamp::now(),
            Some(&mut stored),
        )?;
        if !data.is_empty() {
            self.logged_write(&hold, object, offset, data, stored.blocks);
        }
        self.note_dirty(&[object], &hold);
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        drop(guards);
        self.commit_if_always(hold)?;
        self.throttle_log();
        Ok(attrs)
    }

    /// Writes `data` at `offset` (the live call and replay of a `Write` record). The whole
    /// blocks stored are reported to `stored`, for the log to share their buffers or, when
    /// `stored.in_place`, written in place first.
    pub(crate) fn do_write(
        &self,
        hold: &TxgHold,
        object: u64,
        offset: u64,
        data: &[u8],
        now: Timestamp,
        mut stored: Option<&mut StoredBlocks>,
    ) -> Result<InodeAttrs, FsError> {
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or(FsError::TooLarge)?;
        let mut attrs = self.getattr(object)?;
        match attrs.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(FsError::IsDirectory),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        if data.is_empty() {
            return Ok(attrs);
        }
        let block_bytes = self.grow_block(hold, object, attrs.size, end)?;
        let in_place = stored.as_ref().is_some_and(|stored| stored.in_place);
        let mut for_in_place: Vec<(u64, Bytes)> = Vec::new();
        let mut position = offset;
        let mut taken = 0usize;
        for (blkid, within, take) in block_write::pieces(block_bytes, offset, data.len() as u64) {
            let piece = &data[taken..taken + take];
            if take as u64 == block_bytes {
                if in_place && !is_all_zero(piece) {
                    for_in_place.push((blkid, Bytes::copy_from_slice(piece)));
                } else {
                    let kept = self.write_block(hold, object, blkid, piece.to_vec());
                    if let (Some(out), Some(bytes)) = (stored.as_deref_mut(), kept) {
                        out.blocks.push((position, StoredBlock::Shared(bytes)));
                    }
                }
            } else {
                let range = within..within + take;
                self.write_part(hold, object, blkid, block_bytes, range, |out| {
                    out.copy_from_slice(piece)
                })?;
            }
            position += take as u64;
            taken += take;
        }
        debug_assert_eq!(taken, data.len(), "the pieces do not cover the write");
        if let Some(out) = stored {
            self.write_in_place(hold, object, block_bytes, for_in_place, out);
        }
        attrs.size = attrs.size.max(end);
        attrs.mtime = now;
        attrs.ctime = now;
        // Writing by someone other than the owner would clear set-id bits; the kernel asks
        // for that through setattr (FUSE's handle_killpriv is off).
        self.put_attrs(hold, object, &attrs)?;
        Ok(attrs)
    }

    /// Makes the file's block big enough for a file of `end` bytes (a single small block
    /// grows up to `recordsize`); returns the block size. A file past one block keeps its
    /// block size: smaller than `recordsize` when that was raised since (`set`, or a clone,
    /// which takes its parent's `recordsize`, not its origin's), as in ZFS.
    pub(crate) fn grow_block(
        &self,
        hold: &TxgHold,
        object: u64,
        size: u64,
        end: u64,
    ) -> Result<u64, FsError> {
        let recordsize = self.config.read().recordsize_bytes;
        let dnode = self.objset.dnode(object)?;
        let current = dnode.data_block_size;
        if current >= recordsize || end <= u64::from(current) || dnode.max_block_id > 0 {
            return Ok(u64::from(current));
        }
        let wanted = if end > u64::from(recordsize) {
            recordsize
        } else {
            small_block_bytes(end.max(size), recordsize)
        };
        if wanted <= current {
            return Ok(u64::from(current));
        }
        let old = self.objset.read_block(object, 0)?;
        self.objset.set_block_size(hold.txg(), object, wanted)?;
        if let Some(old) = old {
            let mut block = vec![0u8; wanted as usize];
            block[..old.len()].copy_from_slice(&old);
            self.write_block(hold, object, 0, block);
        }
        // A file that grows past one block has blocks of `recordsize`: only a lone block is
        // smaller.
        debug_assert!(wanted >= recordsize || u64::from(wanted) >= end);
        Ok(u64::from(wanted))
    }

    /// Truncates or extends a file's contents from `old_size` to `new_size`.
    pub(crate) fn resize(
        &self,
        hold: &TxgHold,
        object: u64,
        old_size: u64,
        new_size: u64,
    ) -> Result<(), FsError> {
        if new_size > i64::MAX as u64 {
            return Err(FsError::TooLarge);
        }
        if new_size >= old_size {
            // Extending is a hole; a single small block grows only when written.
            return Ok(());
        }
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        let first_free = new_size.div_ceil(block_bytes);
        self.objset
            .free_blocks_from(hold.txg(), object, first_free)?;
        let tail = (new_size % block_bytes) as usize;
        let blkid = new_size / block_bytes;
        if tail > 0 && self.holds_data(object, blkid)? {
            let range = tail..block_bytes as usize;
            self.write_part(hold, object, blkid, block_bytes, range, |out| out.fill(0))?;
        }
        Ok(())
    }

    /// Whether block `blkid` of `object` holds data (a pending version or patch, or a block of
    /// the synced tree), from block pointers only. Zeroing part of a hole must not make a
    /// block: past a small file's single block (a file extended by truncation) it would be
    /// one of the small size, which the file's next growth to records would leave behind.
    fn holds_data(&self, object: u64, blkid: u64) -> Result<bool, FsError> {
        let map = self.objset.block_map(object, blkid, 1)?;
        Ok(map.first().copied().unwrap_or(false))
    }

    /// Writes bytes `range` of a block through `fill` without reading the old block first:
    /// the object set merges it in later (cairn-object's `patch.rs`). No stripe lock of
    /// blocks: the caller holds the inode's lock, which orders every writer of its blocks.
    fn write_part(
        &self,
        hold: &TxgHold,
        object: u64,
        blkid: u64,
        block_bytes: u64,
        range: std::ops::Range<usize>,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), FsError> {
        block_write::write_part(
            &self.objset,
            hold,
            None,
            object,
            blkid,
            block_bytes as u32,
            range,
            fill,
        )?;
        Ok(())
    }

    /// Whether a write's whole blocks go to their final place at once: a write that is to be
    /// durable on return (`sync`, or any under `sync=always`) on a filesystem whose log
    /// writes in place (`logbias=throughput`).
    fn writes_in_place(&self, sync: bool) -> bool {
        self.config.read().sync.commits(sync)
            && self
                .intent_log
                .as_ref()
                .is_some_and(|log| log.writes_in_place())
    }

    /// Writes `blocks` (block number, whole non-zero block) in place, durably, and reports
    /// them to `stored` in file offset order; if that fails (no room, a device error) they
    /// are stored the ordinary way and reach the log as data.
    fn write_in_place(
        &self,
        hold: &TxgHold,
        object: u64,
        block_bytes: u64,
        blocks: Vec<(u64, Bytes)>,
        stored: &mut StoredBlocks,
    ) {
        if blocks.is_empty() {
            return;
        }
        match block_write::write_in_place(&self.objset, hold, object, block_bytes, blocks.clone()) {
            Ok(written) => {
                for (blkid, bp) in written {
                    let at = blkid * block_bytes;
                    stored.blocks.push((at, StoredBlock::InPlace(bp)));
                }
                self.stats.in_place_writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.stats
                    .in_place_fallbacks
                    .fetch_add(1, Ordering::Relaxed);
                for (blkid, bytes) in blocks {
                    let kept = self.write_block(hold, object, blkid, bytes.to_vec());
                    if let Some(bytes) = kept {
                        stored
                            .blocks
                            .push((blkid * block_bytes, StoredBlock::Shared(bytes)));
                    }
                }
            }
        }
        stored.blocks.sort_by_key(|(at, _)| *at);
    }

    /// Stores a whole block (a hole when it is all zeros); returns the buffer stored, if any.
    pub(crate) fn write_block(
        &self,
        hold: &TxgHold,
        object: u64,
        blkid: u64,
        block: Vec<u8>,
    ) -> Option<Bytes> {
        let bytes = block.len() as u64;
        let stored = block_write::block_or_hole(block);
        block_write::store_block(&self.objset, hold, object, blkid, bytes, stored.clone());
        stored
    }

    pub(crate) fn put_attrs(
        &self,
        hold: &TxgHold,
        object: u64,
        attrs: &InodeAttrs,
    ) -> Result<(), FsError> {
        self.objset.set_bonus(hold.txg(), object, attrs.encode())?;
        Ok(())
    }

    // ----- ranges: fallocate, holes -----

    /// `fallocate(2)` on file `object`.
    pub fn fallocate(
        &self,
        object: u64,
        offset: u64,
        len: u64,
        op: Fallocate,
    ) -> Result<InodeAttrs, FsError> {
        self.check_writable()?;
        offset
            .checked_add(len)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or(FsError::TooLarge)?;
        if len == 0 {
            return Err(FsError::Invalid("fallocate of no bytes".into()));
        }
        let mut space = None;
        if let Fallocate::Allocate { .. } = op {
            // Nothing is reserved (copy-on-write allocates when data is written), but the
            // part of the range past the end of the file is refused if it would not fit
            // now, quota included (holes inside the file are not counted).
            let end = offset.saturating_add(len);
            let beyond = end.saturating_sub(offset.max(self.getattr(object)?.size));
            if beyond > 0 {
                space = Some(SpaceAsk::bytes(
                    beyond.saturating_add(NAMESPACE_CHANGE_BYTES),
                ));
            }
        }
        let (hold, guards) = self.hold_locked(&[object], 0, space)?;
        let time = Timestamp::now();
        let attrs = self.do_fallocate(&hold, object, offset, len, op, time)?;
        self.logged(
            &hold,
            FsOp::Fallocate {
                object,
                offset,
                len,
                op,
                time,
            },
        );
        self.note_dirty(&[object], &hold);
        drop(guards);
        self.commit_if_always(hold)?;
        Ok(attrs)
    }

    pub(crate) fn do_fallocate(
        &self,
        hold: &TxgHold,
        object: u64,
        offset: u64,
        len: u64,
        op: Fallocate,
        now: Timestamp,
    ) -> Result<InodeAttrs, FsError> {
        let end = offset.saturating_add(len);
        let mut attrs = self.getattr(object)?;
        match attrs.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(FsError::IsDirectory),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        let keep_size = match op {
            Fallocate::Allocate { keep_size } => keep_size,
            Fallocate::PunchHole => true,
            Fallocate::ZeroRange { keep_size } => {
                self.zero_range(hold, object, offset, end.min(attrs.size))?;
                keep_size
            }
        };
        if op == Fallocate::PunchHole {
            self.zero_range(hold, object, offset, end.min(attrs.size))?;
        }
        if !keep_size && end > attrs.size {
            attrs.size = end;
        }
        if !matches!(op, Fallocate::Allocate { .. }) || !keep_size {
            attrs.mtime = now;
            attrs.ctime = now;
        }
        self.put_attrs(hold, object, &attrs)?;
        Ok(attrs)
    }

    /// Makes `offset .. end` of a file read as zeros: whole blocks become holes, the edges of
    /// partly covered blocks are zeroed in place.
    pub(crate) fn zero_range(
        &self,
        hold: &TxgHold,
        object: u64,
        offset: u64,
        end: u64,
    ) -> Result<(), FsError> {
        if offset >= end {
            return Ok(());
        }
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        for (blkid, within, take) in block_write::pieces(block_bytes, offset, end - offset) {
            if !self.holds_data(object, blkid)? {
                // A hole already: freeing it would record a block past a small file's
                // single one (which then could never grow), zeroing part of it would make one.
            } else if take as u64 == block_bytes {
                block_write::store_block(&self.objset, hold, object, blkid, block_bytes, None);
            } else {
                let range = within..within + take;
                self.write_part(hold, object, blkid, block_bytes, range, |out| out.fill(0))?;
            }
        }
        Ok(())
    }

    /// `lseek` with SEEK_DATA (`data` true) or SEEK_HOLE from `offset`: the first offset at
    /// or after it that holds data (or is a hole; the end of the file counts as a hole).
    /// `NotFound` (ENXIO to the caller) when `offset` is at or past the end, or no data follows.
    pub fn seek_data_or_hole(&self, object: u64, offset: u64, data: bool) -> Result<u64, FsError> {
        const BLOCKS_PER_LOOK: u64 = 1 << 14;
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        if offset >= attrs.size {
            return Err(FsError::NotFound);
        }
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        let last = (attrs.size - 1) / block_bytes;
        let mut blkid = offset / block_bytes;
        while blkid <= last {
            let count = (last + 1 - blkid).min(BLOCKS_PER_LOOK);
            let map = self.objset.block_map(object, blkid, count)?;
            if let Some(index) = map.iter().position(|has_data| *has_data == data) {
                let found = (blkid + index as u64) * block_bytes;
                return Ok(found.max(offset));
            }
            blkid += count;
        }
        if data {
            Err(FsError::NotFound)
        } else {
            Ok(attrs.size)
        }
    }
}
