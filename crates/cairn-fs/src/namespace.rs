//! Namespace changes: create, link, remove, rename. Each public call locks what it changes,
//! joins the open txg, makes the change through its `do_*` twin (which replay calls too, with
//! the logged object numbers and times) and logs it (`FsOp`).

use crate::SpaceAsk;
use crate::acl;
use crate::attrs::{FileKind, InodeAttrs, Timestamp};
use crate::log::FsOp;
use crate::{
    DELETE_QUEUE_OBJECT, Filesystem, FsError, NAMESPACE_CHANGE_BYTES, NewInode, ROOT_OBJECT,
    RenameMode, SYMLINK_BYTES_MAX, Tx, XattrMode, check_name, decode_entry_value,
    encode_entry_value, small_block_bytes,
};
use cairn_format::{BLOCK_SIZE_GRANULE, ObjectType};
use cairn_object::map::{HashedMap, MAP_BLOCK_BYTES, MapError};
use cairn_pool::txg::TxgHold;
use std::sync::atomic::Ordering;

impl Filesystem {
    /// Creates `name` in directory `dir`: a file, device, fifo or socket (`mkdir` and
    /// `symlink` have their own calls).
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        new: NewInode,
    ) -> Result<(u64, InodeAttrs), FsError> {
        if matches!(new.kind, FileKind::Directory | FileKind::Symlink) {
            return Err(FsError::Invalid(
                "create makes files, devices, fifos and sockets".into(),
            ));
        }
        self.make(dir, name, new, &[])
    }

    pub fn mkdir(
        &self,
        dir: u64,
        name: &[u8],
        new: NewInode,
    ) -> Result<(u64, InodeAttrs), FsError> {
        self.make(
            dir,
            name,
            NewInode {
                kind: FileKind::Directory,
                ..new
            },
            &[],
        )
    }

    pub fn symlink(
        &self,
        dir: u64,
        name: &[u8],
        target: &[u8],
        new: NewInode,
    ) -> Result<(u64, InodeAttrs), FsError> {
        if target.is_empty() || target.len() > SYMLINK_BYTES_MAX {
            return Err(if target.is_empty() {
                FsError::NotFound
            } else {
                FsError::NameTooLong
            });
        }
        self.make(
            dir,
            name,
            NewInode {
                kind: FileKind::Symlink,
                mode: 0o777,
                ..new
            },
            target,
        )
    }

    /// Creates an inode, inheriting the directory's default ACL (`acl.rs`): the mode the
    /// creator asked for limits the inherited entries, the inode's mode comes from the result,
    /// and the ACLs are set on it right after.
    pub(crate) fn make(
        &self,
        dir: u64,
        name: &[u8],
        mut new: NewInode,
        symlink_target: &[u8],
    ) -> Result<(u64, InodeAttrs), FsError> {
        let inherited = match new.kind {
            FileKind::Symlink => None,
            _ => self.default_acl(dir)?,
        };
        let access = inherited.clone().map(|default| {
            let (access, mode) = default.inherited(new.mode);
            new.mode = mode;
            access
        });
        let (object, attrs) = self.make_inode(dir, name, new, symlink_target)?;
        let mut acls = Vec::new();
        if let Some(access) = access.filter(|access| !access.is_minimal()) {
            acls.push((acl::ACCESS_XATTR, access));
        }
        if let (Some(default), FileKind::Directory) = (inherited, new.kind) {
            acls.push((acl::DEFAULT_XATTR, default));
        }
        if acls.is_empty() {
            return Ok((object, attrs));
        }
        for (name, acl) in acls {
            self.setxattr(object, name, &acl.encode(), XattrMode::Any)?;
        }
        Ok((object, self.getattr(object)?))
    }

    fn make_inode(
        &self,
        dir: u64,
        name: &[u8],
        new: NewInode,
        symlink_target: &[u8],
    ) -> Result<(u64, InodeAttrs), FsError> {
        check_name(name)?;
        self.check_writable()?;
        let space = SpaceAsk::bytes(NAMESPACE_CHANGE_BYTES + symlink_target.len() as u64);
        let object = self.next_object.fetch_add(1, Ordering::Relaxed);
        let (hold, _guards) =
            self.hold_locked(&[dir, object], 3 * u64::from(MAP_BLOCK_BYTES), Some(space))?;
        let time = Timestamp::now();
        let attrs = self.do_create(
            &hold,
            dir,
            name,
            object,
            new,
            symlink_target,
            time,
            hold.txg(),
        )?;
        self.logged(
            &hold,
            FsOp::Create {
                dir,
                name: name.to_vec(),
                object,
                kind: new.kind,
                mode: new.mode,
                uid: new.uid,
                gid: new.gid,
                rdev: new.rdev,
                time,
                target: symlink_target.to_vec(),
            },
        );
        self.note_dirty(&[dir, object], &hold);
        self.stats.creates.fetch_add(1, Ordering::Relaxed);
        drop(_guards);
        self.commit_if_always(hold)?;
        Ok((object, attrs))
    }

    /// Creates inode `object` named `name` in `dir` (the live call and replay).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_create(
        &self,
        hold: &TxgHold,
        dir: u64,
        name: &[u8],
        object: u64,
        new: NewInode,
        symlink_target: &[u8],
        now: Timestamp,
        generation: u64,
    ) -> Result<InodeAttrs, FsError> {
        let txg = hold.txg();
        let mut dir_attrs = self.getattr(dir)?;
        if dir_attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        if dir_attrs.links == 0 {
            // A directory removed while a process still had it as its working directory.
            return Err(FsError::NotFound);
        }
        let map = HashedMap::new(&self.objset, dir);
        if map.get(name)?.is_some() {
            return Err(FsError::Exists);
        }
        let is_dir = new.kind == FileKind::Directory;
        if is_dir && dir_attrs.links >= u64::from(u32::MAX) {
            return Err(FsError::TooManyLinks);
        }
        let attrs = InodeAttrs {
            kind: new.kind,
            mode: new.mode & 0o7777,
            uid: new.uid,
            gid: new.gid,
            links: if is_dir { 2 } else { 1 },
            size: symlink_target.len() as u64,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            generation,
            parent: dir,
            rdev: new.rdev,
            xattr_object: 0,
        };
        let (object_type, block_bytes) = match new.kind {
            FileKind::Directory => (ObjectType::Directory, MAP_BLOCK_BYTES),
            FileKind::Symlink => (
                ObjectType::FileData,
                small_block_bytes(symlink_target.len() as u64, u32::MAX),
            ),
            _ => (ObjectType::FileData, BLOCK_SIZE_GRANULE),
        };
        self.objset.create_object_with_bonus(
            txg,
            object,
            object_type,
            block_bytes,
            attrs.encode(),
        )?;
        if is_dir {
            HashedMap::new(&self.objset, object)
                .create(Tx::held(hold).map_tx(), object ^ generation.rotate_left(32))?;
        }
        if !symlink_target.is_empty() {
            let mut block = vec![0u8; block_bytes as usize];
            block[..symlink_target.len()].copy_from_slice(symlink_target);
            self.write_block(hold, object, 0, block);
        }
        map.insert(
            Tx::held(hold).map_tx(),
            name,
            &encode_entry_value(object, new.kind),
        )?;
        dir_attrs.size += 1;
        if is_dir {
            dir_attrs.links += 1;
        }
        dir_attrs.mtime = now;
        dir_attrs.ctime = now;
        self.put_attrs(hold, dir, &dir_attrs)?;
        Ok(attrs)
    }

    /// A new name `name` in `dir` for inode `object` (not a directory).
    pub fn link(&self, object: u64, dir: u64, name: &[u8]) -> Result<InodeAttrs, FsError> {
        check_name(name)?;
        self.check_writable()?;
        let space = SpaceAsk::bytes(NAMESPACE_CHANGE_BYTES);
        let (hold, _guards) =
            self.hold_locked(&[dir, object], 2 * u64::from(MAP_BLOCK_BYTES), Some(space))?;
        let time = Timestamp::now();
        let attrs = self.do_link(&hold, object, dir, name, time)?;
        self.logged(
            &hold,
            FsOp::Link {
                object,
                dir,
                name: name.to_vec(),
                time,
            },
        );
        self.note_dirty(&[dir, object], &hold);
        drop(_guards);
        self.commit_if_always(hold)?;
        Ok(attrs)
    }

    pub(crate) fn do_link(
        &self,
        hold: &TxgHold,
        object: u64,
        dir: u64,
        name: &[u8],
        now: Timestamp,
    ) -> Result<InodeAttrs, FsError> {
        let mut attrs = self.getattr(object)?;
        if attrs.kind == FileKind::Directory {
            return Err(FsError::Invalid("hard links to directories".into()));
        }
        if attrs.links == 0 {
            return Err(FsError::NotFound);
        }
        if attrs.links >= u64::from(u32::MAX) {
            return Err(FsError::TooManyLinks);
        }
        let mut dir_attrs = self.getattr(dir)?;
        if dir_attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        if dir_attrs.links == 0 {
            return Err(FsError::NotFound);
        }
        HashedMap::new(&self.objset, dir).insert(
            Tx::held(hold).map_tx(),
            name,
            &encode_entry_value(object, attrs.kind),
        )?;
        attrs.links += 1;
        attrs.ctime = now;
        self.put_attrs(hold, object, &attrs)?;
        dir_attrs.size += 1;
        dir_attrs.mtime = now;
        dir_attrs.ctime = now;
        self.put_attrs(hold, dir, &dir_attrs)?;
        Ok(attrs)
    }

    /// Removes `name` (not a directory) from `dir`.
    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, false)
    }

    /// Removes the empty directory `name` from `dir`.
    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, true)
    }

    pub(crate) fn remove(&self, dir: u64, name: &[u8], want_dir: bool) -> Result<(), FsError> {
        if name == b"." {
            return Err(FsError::Invalid("removing '.'".into()));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        check_name(name)?;
        self.check_writable()?;
        loop {
            // The child is found before locking it; if it changed meanwhile, look again.
            let (child, _) = self.lookup(dir, name)?;
            let (hold, guards) =
                self.hold_locked(&[dir, child], 2 * u64::from(MAP_BLOCK_BYTES), None)?;
            let time = Timestamp::now();
            let Some(object) = self.do_remove(&hold, dir, name, want_dir, time, Some(child))?
            else {
                continue;
            };
            self.logged(
                &hold,
                FsOp::Remove {
                    dir,
                    name: name.to_vec(),
                    directory: want_dir,
                    time,
                },
            );
            self.note_dirty(&[dir, object], &hold);
            self.stats.removes.fetch_add(1, Ordering::Relaxed);
            drop(guards);
            return self.commit_if_always(hold);
        }
    }

    /// Removes `name` from `dir` (the live call and replay); the inode it named, or `None`
    /// when it names another inode than `expected` (the caller looks again).
    pub(crate) fn do_remove(
        &self,
        hold: &TxgHold,
        dir: u64,
        name: &[u8],
        want_dir: bool,
        now: Timestamp,
        expected: Option<u64>,
    ) -> Result<Option<u64>, FsError> {
        let map = HashedMap::new(&self.objset, dir);
        let Some(entry) = map.get(name)? else {
            return Err(FsError::NotFound);
        };
        let (object, kind) = decode_entry_value(&entry.value)?;
        if expected.is_some_and(|expected| expected != object) {
            return Ok(None);
        }
        let mut attrs = self.getattr(object)?;
        match (want_dir, kind == FileKind::Directory) {
            (true, false) => return Err(FsError::NotDirectory),
            (false, true) => return Err(FsError::IsDirectory),
            (true, true) if !HashedMap::new(&self.objset, object).is_empty()? => {
                return Err(FsError::NotEmpty);
            }
            _ => {}
        }
        map.remove(Tx::held(hold).map_tx(), name)?;
        let mut dir_attrs = self.getattr(dir)?;
        dir_attrs.size = dir_attrs.size.saturating_sub(1);
        if want_dir {
            dir_attrs.links = dir_attrs.links.saturating_sub(1);
        }
        dir_attrs.mtime = now;
        dir_attrs.ctime = now;
        self.put_attrs(hold, dir, &dir_attrs)?;
        attrs.links = if want_dir {
            0
        } else {
            attrs.links.saturating_sub(1)
        };
        attrs.ctime = now;
        self.drop_link(hold, object, attrs)?;
        Ok(Some(object))
    }

    /// Stores `attrs` after a link went away: an inode with no links left is freed now, or
    /// queued for deletion while it is open (and always during replay: see `for_replay`).
    pub(crate) fn drop_link(
        &self,
        hold: &TxgHold,
        object: u64,
        attrs: InodeAttrs,
    ) -> Result<(), FsError> {
        if attrs.links > 0 {
            return self.put_attrs(hold, object, &attrs);
        }
        if self.replaying || self.opens.lock().get(&object).copied().unwrap_or(0) > 0 {
            self.put_attrs(hold, object, &attrs)?;
            let name = object.to_string();
            match HashedMap::new(&self.objset, DELETE_QUEUE_OBJECT).insert(
                Tx::held(hold).map_tx(),
                name.as_bytes(),
                &[],
            ) {
                Ok(_) | Err(MapError::Exists) => Ok(()),
                Err(err) => Err(err.into()),
            }
        } else {
            self.free_inode(hold, object, &attrs);
            Ok(())
        }
    }

    pub(crate) fn free_inode(&self, hold: &TxgHold, object: u64, attrs: &InodeAttrs) {
        // Its per-object records can never be committed now (no fsync reaches a freed inode).
        if let Some(log) = &self.intent_log {
            log.forget_object(object);
        }
        self.free_xattrs(hold, object, attrs);
        self.objset.free_object(hold.txg(), object);
        self.dirty_txg.lock().txgs.remove(&object);
    }

    /// Renames `old_dir/old_name` to `new_dir/new_name`.
    pub fn rename(
        &self,
        old_dir: u64,
        old_name: &[u8],
        new_dir: u64,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<(), FsError> {
        check_name(old_name)?;
        check_name(new_name)?;
        self.check_writable()?;
        // Directory moves are serialised: the loop check must see a stable tree.
        let _rename = self.rename_lock.lock();
        let (source, _) = self.lookup(old_dir, old_name)?;
        let target = match self.lookup(new_dir, new_name) {
            Ok((object, _)) => Some(object),
            Err(FsError::NotFound) => None,
            Err(err) => return Err(err),
        };
        let mut objects = vec![old_dir, new_dir, source];
        objects.extend(target);
        let (hold, guards) = self.hold_locked(&objects, 4 * u64::from(MAP_BLOCK_BYTES), None)?;
        let time = Timestamp::now();
        let expected = (source, target);
        if self
            .do_rename(
                &hold,
                old_dir,
                old_name,
                new_dir,
                new_name,
                mode,
                time,
                Some(expected),
            )?
            .is_none()
        {
            // Something moved between the lookups and the locks: again.
            drop(guards);
            drop(hold);
            drop(_rename);
            return self.rename(old_dir, old_name, new_dir, new_name, mode);
        }
        self.logged(
            &hold,
            FsOp::Rename {
                old_dir,
                old_name: old_name.to_vec(),
                new_dir,
                new_name: new_name.to_vec(),
                mode,
                time,
            },
        );
        self.note_dirty(&objects, &hold);
        self.stats.renames.fetch_add(1, Ordering::Relaxed);
        drop(guards);
        drop(_rename);
        self.commit_if_always(hold)
    }

    /// Renames (the live call and replay); `None` when the names lead elsewhere than
    /// `expected` (source, target) says.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_rename(
        &self,
        hold: &TxgHold,
        old_dir: u64,
        old_name: &[u8],
        new_dir: u64,
        new_name: &[u8],
        mode: RenameMode,
        now: Timestamp,
        expected: Option<(u64, Option<u64>)>,
    ) -> Result<Option<()>, FsError> {
        let old = RenameEnd {
            dir: old_dir,
            name: old_name,
            map: HashedMap::new(&self.objset, old_dir),
        };
        let new = RenameEnd {
            dir: new_dir,
            name: new_name,
            map: HashedMap::new(&self.objset, new_dir),
        };
        // Looked up again under the locks: only renames change names without the rename
        // lock... no: creates and unlinks do too, so check that nothing moved.
        let source_entry = old.map.get(old_name)?.ok_or(FsError::NotFound)?;
        let (source_now, source_kind) = decode_entry_value(&source_entry.value)?;
        let target_entry = new.map.get(new_name)?;
        let target_now = target_entry
            .as_ref()
            .map(|entry| decode_entry_value(&entry.value))
            .transpose()?;
        let source = source_now;
        let target = target_now.map(|(object, _)| object);
        if expected.is_some_and(|expected| expected != (source, target)) {
            return Ok(None);
        }
        let new_dir_attrs = self.getattr(new_dir)?;
        if new_dir_attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        if source_kind == FileKind::Directory && old_dir != new_dir {
            self.check_not_ancestor(source, new_dir)?;
        }
        if let (RenameMode::Exchange, Some((target_object, FileKind::Directory))) =
            (mode, target_now)
            && old_dir != new_dir
        {
            self.check_not_ancestor(target_object, old_dir)?;
        }
        if source == target.unwrap_or(0) {
            // Two names of one inode: POSIX says do nothing.
            return Ok(Some(()));
        }
        let source = (source, source_kind);
        match (mode, target_now) {
            (RenameMode::Exchange, None) => return Err(FsError::NotFound),
            (RenameMode::NoReplace, Some(_)) => return Err(FsError::Exists),
            (RenameMode::Exchange, Some(target)) => {
                self.rename_exchange(hold, &old, &new, source, target, now)?;
            }
            (_, target_now) => self.rename_move(hold, &old, &new, source, target_now, now)?,
        }
        Ok(Some(()))
    }

    /// `RENAME_EXCHANGE`: the two names swap inodes (`source` and `target`, each an object
    /// and its kind).
    fn rename_exchange(
        &self,
        hold: &TxgHold,
        old: &RenameEnd<'_>,
        new: &RenameEnd<'_>,
        (source, source_kind): (u64, FileKind),
        (target_object, target_kind): (u64, FileKind),
        now: Timestamp,
    ) -> Result<(), FsError> {
        let (old_dir, new_dir) = (old.dir, new.dir);
        old.map.set_value(
            Tx::held(hold).map_tx(),
            old.name,
            &encode_entry_value(target_object, target_kind),
        )?;
        new.map.set_value(
            Tx::held(hold).map_tx(),
            new.name,
            &encode_entry_value(source, source_kind),
        )?;
        if old_dir != new_dir {
            let source_is_dir = source_kind == FileKind::Directory;
            let target_is_dir = target_kind == FileKind::Directory;
            self.reparent(hold, source, new_dir, now)?;
            self.reparent(hold, target_object, old_dir, now)?;
            if source_is_dir != target_is_dir {
                let (gains, loses) = if source_is_dir {
                    (new_dir, old_dir)
                } else {
                    (old_dir, new_dir)
                };
                self.adjust_dir(hold, gains, 0, 1, now)?;
                self.adjust_dir(hold, loses, 0, -1, now)?;
            }
        } else {
            self.touch_ctime(hold, source, now)?;
            self.touch_ctime(hold, target_object, now)?;
        }
        self.adjust_dir(hold, old_dir, 0, 0, now)?;
        self.adjust_dir(hold, new_dir, 0, 0, now)
    }

    /// A plain rename: `source` (object, kind) moves to the new name, replacing the inode
    /// there (`target`), if any.
    fn rename_move(
        &self,
        hold: &TxgHold,
        old: &RenameEnd<'_>,
        new: &RenameEnd<'_>,
        (source, source_kind): (u64, FileKind),
        target: Option<(u64, FileKind)>,
        now: Timestamp,
    ) -> Result<(), FsError> {
        let (old_dir, new_dir) = (old.dir, new.dir);
        if let Some(target) = target {
            self.rename_replace(hold, new, source_kind, target, now)?;
        }
        old.map.remove(Tx::held(hold).map_tx(), old.name)?;
        new.map.insert(
            Tx::held(hold).map_tx(),
            new.name,
            &encode_entry_value(source, source_kind),
        )?;
        let is_dir = source_kind == FileKind::Directory;
        self.adjust_dir(hold, old_dir, -1, if is_dir { -1 } else { 0 }, now)?;
        self.adjust_dir(hold, new_dir, 1, if is_dir { 1 } else { 0 }, now)?;
        if old_dir != new_dir {
            self.reparent(hold, source, new_dir, now)
        } else {
            self.touch_ctime(hold, source, now)
        }
    }

    /// Drops the inode a plain rename replaces (`target`: object, kind) from the new name's
    /// directory, when its kind allows it to be replaced by one of `source_kind`.
    fn rename_replace(
        &self,
        hold: &TxgHold,
        new: &RenameEnd<'_>,
        source_kind: FileKind,
        (target_object, target_kind): (u64, FileKind),
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut target_attrs = self.getattr(target_object)?;
        match (
            source_kind == FileKind::Directory,
            target_kind == FileKind::Directory,
        ) {
            (true, false) => return Err(FsError::NotDirectory),
            (false, true) => return Err(FsError::IsDirectory),
            (true, true) if !HashedMap::new(&self.objset, target_object).is_empty()? => {
                return Err(FsError::NotEmpty);
            }
            _ => {}
        }
        new.map.remove(Tx::held(hold).map_tx(), new.name)?;
        let target_is_dir = target_kind == FileKind::Directory;
        self.adjust_dir(hold, new.dir, -1, if target_is_dir { -1 } else { 0 }, now)?;
        target_attrs.links = if target_is_dir {
            0
        } else {
            target_attrs.links.saturating_sub(1)
        };
        target_attrs.ctime = now;
        self.drop_link(hold, target_object, target_attrs)
    }

    /// Fails with `Invalid` when `dir` is `ancestor` or lies beneath it (a directory cannot
    /// move into itself).
    pub(crate) fn check_not_ancestor(&self, ancestor: u64, dir: u64) -> Result<(), FsError> {
        let mut at = dir;
        for _ in 0..(1 << 16) {
            if at == ancestor {
                return Err(FsError::Invalid(
                    "a directory cannot move beneath itself".into(),
                ));
            }
            if at == ROOT_OBJECT {
                return Ok(());
            }
            at = self.getattr(at)?.parent;
        }
        Err(FsError::Corrupt(format!("the parents of {dir} loop")))
    }

    pub(crate) fn adjust_dir(
        &self,
        hold: &TxgHold,
        dir: u64,
        entries: i64,
        links: i64,
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut attrs = self.getattr(dir)?;
        attrs.size = attrs.size.saturating_add_signed(entries);
        attrs.links = attrs.links.saturating_add_signed(links);
        attrs.mtime = now;
        attrs.ctime = now;
        self.put_attrs(hold, dir, &attrs)
    }

    pub(crate) fn reparent(
        &self,
        hold: &TxgHold,
        object: u64,
        parent: u64,
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut attrs = self.getattr(object)?;
        attrs.parent = parent;
        attrs.ctime = now;
        self.put_attrs(hold, object, &attrs)
    }

    pub(crate) fn touch_ctime(
        &self,
        hold: &TxgHold,
        object: u64,
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut attrs = self.getattr(object)?;
        attrs.ctime = now;
        self.put_attrs(hold, object, &attrs)
    }
}

/// One end of a rename: a directory, the name in it, and the directory's map.
struct RenameEnd<'a> {
    dir: u64,
    name: &'a [u8],
    map: HashedMap<'a>,
}
