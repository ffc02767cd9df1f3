//! The FUSE operations: the one `impl fuser::Filesystem` (`init`, names, attributes, data,
//! directories, extended attributes, `lseek`, `statfs`). Each translates its call, runs it on
//! the filesystem timed (`FuseAdapter::timed`) and answers.
//!
//! Invariants: permission checks are the kernel's (`default_permissions`); set-ID bits and
//! capabilities are taken away here (FUSE_HANDLE_KILLPRIV_V2); a request naming a stopped
//! cached writer's handle gets the stop's error. fuser wants the impl in one block, so what
//! several operations share lives in `adapter.rs` (state, helpers) and `policy.rs` (the
//! open policy), the conversions in `convert.rs`; nothing uses this file but fuser.

use super::adapter::{ATTR_TTL, FuseAdapter, REPORTED_BLOCK_BYTES};
use super::convert::{errno, object_of, time_or_now, timestamp};
use super::snapdir::{Node, is_control_name, node_of};
use super::writers::CACHED_WRITER_FH_BIT;
use cairn_device::ErrorClass;
use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_fs::ops::FsOpKind;
use cairn_fs::{Fallocate, FsError, RenameMode, SetAttrs, XattrMode};
use fuser::{
    Errno, FileAttr, FileHandle, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

/// Enters a call on the mounted head (`MountedHead::enter`) for the inodes it names, or
/// answers EIO for one a rollback left stale: `let _entered = enter!(self, reply, ino);`
/// holds off rollbacks until the call ends.
macro_rules! enter {
    ($adapter:expr, $reply:expr $(, $ino:expr)*) => {
        match $adapter.head.enter(&[$($ino),*]) {
            Ok(entered) => entered,
            Err(code) => return $reply.error(code),
        }
    };
}

/// Largest read and write the kernel is asked to send in one request (and read-ahead).
const LARGE_IO_BYTES: u32 = 1 << 20;

/// The extended attribute a file's access ACL is set through.
const ACCESS_ACL_XATTR: &[u8] = b"system.posix_acl_access";

/// Whether the caller of `req` is in group `gid`: its group, or one of its supplementary
/// groups (read from /proc: the request carries only the caller's pid, uid and gid). A
/// caller gone meanwhile counts as outside.
fn caller_in_group(req: &Request, gid: u32) -> bool {
    if req.gid() == gid {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .is_some_and(|groups| {
            groups
                .split_whitespace()
                .any(|group| group.parse::<u32>() == Ok(gid))
        })
}

/// The attributes of a regular file that is gone (no links, empty), with the times
/// `changes` gives: the answer to the kernel writing back the times of a removed file.
fn gone_file_attrs(changes: &SetAttrs) -> InodeAttrs {
    let now = Timestamp::now();
    InodeAttrs {
        kind: FileKind::File,
        mode: 0,
        uid: 0,
        gid: 0,
        links: 0,
        size: 0,
        atime: changes.atime.unwrap_or(now),
        mtime: changes.mtime.unwrap_or(now),
        ctime: changes.ctime.unwrap_or(now),
        crtime: now,
        generation: 0,
        parent: 0,
        rdev: 0,
        xattr_object: 0,
    }
}

/// Answers an xattr query: its size when asked with size 0, ERANGE when it does not fit.
fn sized(reply: ReplyXattr, size: u32, value: &[u8]) {
    if size == 0 {
        reply.size(value.len() as u32);
    } else if value.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

/// Answers a lookup under `.cairn` (`control_ops.rs`), each entry with its own caching time.
fn control_entry(reply: ReplyEntry, found: Result<(FileAttr, Duration, u64), FsError>) {
    match found {
        Ok((attr, ttl, generation)) => reply.entry(&ttl, &attr, Generation(generation)),
        Err(err) => reply.error(errno(&err)),
    }
}

fn empty(reply: ReplyEmpty, result: Result<(), FsError>) {
    match result {
        Ok(()) => reply.ok(),
        Err(err) => reply.error(errno(&err)),
    }
}

impl fuser::Filesystem for FuseAdapter {
    /// Asks the kernel for readdirplus (a listing carries attributes: no lookup per name),
    /// parallel directory calls (the filesystem's own locks order them), POSIX ACLs (the
    /// kernel enforces them; `cairn_fs::acl` keeps mode and ACL agreeing and inherits default
    /// ACLs), 1 MiB reads and writes (read-ahead as large as the kernel allows), and the
    /// writeback cache, for the files opened where it is safe (`open_flags`).
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Readdirplus for every listing (not only its first part, as READDIRPLUS_AUTO would):
        // `ls -l`, `find` and `rm -rf` read a large directory whole before they look at its
        // entries, which would then each cost a LOOKUP.
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_POSIX_ACL
            // The umask is ours to apply (`masked`): a default ACL replaces it.
            | InitFlags::FUSE_DONT_MASK
            // Set-ID bits and capabilities are ours to take away on write, truncate and
            // chown (`Filesystem::remove_privileges`). In return the kernel may remember that
            // a file has none (S_NOSEC) instead of asking for `security.capability` before
            // every write: a second round trip per write(2) without it.
            | InitFlags::FUSE_HANDLE_KILLPRIV_V2
            // Directories need no open call (`opendir`): two round trips per listing saved.
            | InitFlags::FUSE_NO_OPENDIR_SUPPORT
            // Files opened for synchronous writes bypass the page cache (`open_flags`);
            // they may still be mapped shared.
            | InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP
            // Writes of files opened where it is safe are kept by the kernel and written
            // back in large calls (`open_flags`).
            | InitFlags::FUSE_WRITEBACK_CACHE
            // Inodes can be found again from file handles (`lookup` of ".").
            | InitFlags::FUSE_EXPORT_SUPPORT;
        // What this kernel lacks is simply not used.
        let mut granted = wanted & config.capabilities();
        // Without direct opens that can still be mapped, there is no safe way out of the
        // writeback cache for a file: leave it off.
        if !granted.contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP) {
            granted.remove(InitFlags::FUSE_WRITEBACK_CACHE);
        }
        let _ = config.add_capabilities(granted);
        self.opendir_skippable = granted.contains(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        self.sync_opens_direct = granted.contains(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
        self.writeback = granted.contains(InitFlags::FUSE_WRITEBACK_CACHE);
        if let Err(nearest) = config.set_max_write(LARGE_IO_BYTES) {
            let _ = config.set_max_write(nearest);
        }
        if let Err(nearest) = config.set_max_readahead(LARGE_IO_BYTES) {
            let _ = config.set_max_readahead(nearest);
        }
        Ok(())
    }

    /// Also how the kernel finds an inode it no longer caches from a file handle
    /// (`open_by_handle_at`, NFS exports of the mount; FUSE_EXPORT_SUPPORT): it looks up "."
    /// in the inode itself, of any kind, and checks the generation it gets against the
    /// handle's. Inode numbers are object numbers, so handles outlive a remount; an object
    /// number reused by a new file has a new generation, so a handle of the old one is stale.
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _entered = enter!(self, reply, parent);
        let parent_node = node_of(parent);
        if !parent_node.is_head()
            || (self.snapshots.is_some() && is_control_name(parent_node, name.as_bytes()))
        {
            let found = self.timed(FsOpKind::Lookup, || {
                self.control_lookup(parent_node, name.as_bytes())
            });
            return control_entry(reply, found);
        }
        let parent = object_of(parent);
        let found = self.timed(FsOpKind::Lookup, || match name.as_bytes() {
            b"." => self.fs().getattr(parent).map(|attrs| (parent, attrs)),
            name => self.fs().lookup(parent, name),
        });
        self.entry(reply, found);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let _entered = enter!(self, reply, ino);
        let node = node_of(ino);
        if !node.is_head() {
            return match self.timed(FsOpKind::Getattr, || self.control_getattr(node)) {
                Ok((attr, ttl, _)) => reply.attr(&ttl, &attr),
                Err(err) => reply.error(errno(&err)),
            };
        }
        let object = object_of(ino);
        // Asked with a cached writer's handle: the kernel is about to take a write(2) into
        // its cache (see `stop_cached_writers_if_short`).
        if let Some(fh) = fh
            && fh.0 & CACHED_WRITER_FH_BIT != 0
            && let Some(code) = self.stopped_error(object)
        {
            return reply.error(code);
        }
        let found = self.timed(FsOpKind::Getattr, || self.fs().getattr(object));
        let found = match found {
            Err(FsError::NotFound) => self.removed_dirs.get(object).ok_or(FsError::NotFound),
            other => other,
        };
        match found {
            Ok(attrs) => reply.attr(&ATTR_TTL, &self.attr(object, &attrs)),
            Err(err) => reply.error(errno(&err)),
        }
    }

    /// (fuser's `batch_forget` comes here for each inode.)
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Node::Head(object) = node_of(ino) {
            self.removed_dirs.forgotten(object);
            self.head.forgotten(object, nlookup);
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _entered = enter!(self, reply, ino);
        if !node_of(ino).is_head() {
            return reply.error(Errno::EROFS);
        }
        let object = object_of(ino);
        // handle_killpriv_v2 (`init`): a truncate by an unprivileged caller and any change of
        // owner take away set-ID bits and capabilities here, not in the kernel. fuser does not
        // pass the kernel's FATTR_KILL_SUIDGID, which it sets for a truncate by a caller
        // without CAP_FSETID: a caller other than root stands for that.
        let kills = (size.is_some() && req.uid() != 0) || uid.is_some() || gid.is_some();
        if kills
            && let Err(err) = self.timed(FsOpKind::Setattr, || self.fs().remove_privileges(object))
        {
            return reply.error(errno(&err));
        }
        let changes = SetAttrs {
            mode: mode.map(|mode| mode & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(timestamp),
        };
        let times_only = changes.mode.is_none()
            && changes.uid.is_none()
            && changes.gid.is_none()
            && changes.size.is_none();
        let fallback = changes;
        match self.timed(FsOpKind::Setattr, || self.fs().setattr(object, changes)) {
            Ok(attrs) => reply.attr(&ATTR_TTL, &self.attr(object, &attrs)),
            // The kernel writing back the times it kept for an inode removed meanwhile (at
            // `syncfs`, or when it lets the inode go): nothing is left to change, and failing
            // would fail the caller's `syncfs` for a file it no longer has.
            Err(FsError::NotFound) if times_only => {
                let attrs = self
                    .removed_dirs
                    .get(object)
                    .unwrap_or_else(|| gone_file_attrs(&fallback));
                reply.attr(&ATTR_TTL, &self.attr(object, &attrs));
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _entered = enter!(self, reply, ino);
        let node = node_of(ino);
        let target = self.timed(FsOpKind::Other, || match node {
            Node::Head(object) => self.fs().readlink(object),
            node => self.in_snapshot(node, |fs, object| fs.readlink(object)),
        });
        match target {
            Ok(target) => reply.data(&target),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _entered = enter!(self, reply, parent);
        let Some(kind) = FileKind::from_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        if kind == FileKind::Directory || kind == FileKind::Symlink {
            return reply.error(Errno::EINVAL);
        }
        if let Some(code) = self.refused_change(node_of(parent), name.as_bytes()) {
            return reply.error(code);
        }
        let parent = object_of(parent);
        let mode = self.masked(parent, mode, umask);
        let new = self.new_inode(req, parent, kind, mode, u64::from(rdev));
        let made = self.timed(FsOpKind::Create, || {
            self.fs().create(parent, name.as_bytes(), new)
        });
        self.entry(reply, made);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let _entered = enter!(self, reply, parent);
        if let Some(code) = self.refused_change(node_of(parent), name.as_bytes()) {
            return reply.error(code);
        }
        let parent = object_of(parent);
        let mode = self.masked(parent, mode, umask);
        let new = self.new_inode(req, parent, FileKind::Directory, mode, 0);
        let made = self.timed(FsOpKind::Create, || {
            self.fs().mkdir(parent, name.as_bytes(), new)
        });
        self.entry(reply, made);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _entered = enter!(self, reply, parent);
        if self
            .refused_change(node_of(parent), name.as_bytes())
            .is_some()
        {
            return reply.error(Errno::EROFS);
        }
        let removed = self.timed(FsOpKind::Remove, || {
            self.fs().unlink(object_of(parent), name.as_bytes())
        });
        empty(reply, removed);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _entered = enter!(self, reply, parent);
        if self
            .refused_change(node_of(parent), name.as_bytes())
            .is_some()
        {
            return reply.error(Errno::EROFS);
        }
        let parent = object_of(parent);
        let removed = self.timed(FsOpKind::Remove, || {
            let found = self.fs().lookup(parent, name.as_bytes());
            self.fs().rmdir(parent, name.as_bytes())?;
            if let Ok((object, attrs)) = found {
                self.removed_dirs.removed(object, attrs);
            }
            Ok(())
        });
        empty(reply, removed);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _entered = enter!(self, reply, parent);
        if let Some(code) = self.refused_change(node_of(parent), link_name.as_bytes()) {
            return reply.error(code);
        }
        let parent = object_of(parent);
        let new = self.new_inode(req, parent, FileKind::Symlink, 0o777, 0);
        let target = target.as_os_str().as_bytes();
        let made = self.timed(FsOpKind::Create, || {
            self.fs().symlink(parent, link_name.as_bytes(), target, new)
        });
        self.entry(reply, made);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _entered = enter!(self, reply, parent, newparent);
        let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameMode::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameMode::NoReplace
        } else if flags.is_empty() {
            RenameMode::Replace
        } else {
            return reply.error(Errno::EINVAL);
        };
        // The control directory itself moves nowhere; nothing takes its name.
        if self
            .refused_change(node_of(parent), name.as_bytes())
            .is_some()
        {
            return reply.error(Errno::EROFS);
        }
        if let Some(code) = self.refused_change(node_of(newparent), newname.as_bytes()) {
            return reply.error(code);
        }
        let (parent, newparent) = (object_of(parent), object_of(newparent));
        let renamed = self.timed(FsOpKind::Rename, || {
            // A directory this replaces is gone once the rename is done.
            let replaced = match mode {
                RenameMode::Replace => self
                    .fs()
                    .lookup(newparent, newname.as_bytes())
                    .ok()
                    .filter(|(_, attrs)| attrs.kind == FileKind::Directory),
                _ => None,
            };
            self.fs()
                .rename(parent, name.as_bytes(), newparent, newname.as_bytes(), mode)?;
            if let Some((object, attrs)) = replaced
                && self.fs().getattr(object).is_err()
            {
                self.removed_dirs.removed(object, attrs);
            }
            Ok(())
        });
        empty(reply, renamed);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _entered = enter!(self, reply, ino, newparent);
        if !node_of(ino).is_head() {
            return reply.error(Errno::EROFS);
        }
        if let Some(code) = self.refused_change(node_of(newparent), newname.as_bytes()) {
            return reply.error(code);
        }
        let object = object_of(ino);
        let result = self.timed(FsOpKind::Create, || {
            self.fs()
                .link(object, object_of(newparent), newname.as_bytes())
                .map(|attrs| (object, attrs))
        });
        self.entry(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _entered = enter!(self, reply, ino);
        let node = node_of(ino);
        if !node.is_head() {
            if flags.0 & libc::O_ACCMODE != libc::O_RDONLY || flags.0 & libc::O_TRUNC != 0 {
                return reply.error(Errno::EROFS);
            }
            // A snapshot's files never change: their cached pages stay valid across opens.
            return match self.timed(FsOpKind::Other, || {
                self.in_snapshot(node, |fs, object| fs.getattr(object))
            }) {
                Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
                Err(err) => reply.error(errno(&err)),
            };
        }
        let object = object_of(ino);
        match self.timed(FsOpKind::Other, || self.fs().open_inode(object)) {
            Ok(()) => {
                let (open_flags, fh) = self.open_flags(object, flags.0);
                reply.opened(fh, open_flags);
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _entered = enter!(self, reply, parent);
        if let Some(code) = self.refused_change(node_of(parent), name.as_bytes()) {
            return reply.error(code);
        }
        let parent = object_of(parent);
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::File);
        let mode = self.masked(parent, mode, umask);
        let new = self.new_inode(req, parent, kind, mode, 0);
        let made = self.timed(FsOpKind::Create, || {
            self.fs()
                .create(parent, name.as_bytes(), new)
                .and_then(|(object, attrs)| self.fs().open_inode(object).map(|()| (object, attrs)))
        });
        match made {
            Ok((object, attrs)) => {
                let attr = self.attr(object, &attrs);
                let (open_flags, fh) = self.open_flags(object, flags);
                self.head.looked_up(object);
                reply.created(
                    &ATTR_TTL,
                    &attr,
                    Generation(self.head.generation(object, attrs.generation)),
                    fh,
                    open_flags,
                );
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _entered = enter!(self, reply, ino);
        let started = Instant::now();
        let result = match node_of(ino) {
            Node::Head(object) => self.fs().read(object, offset, size as usize),
            node => self.in_snapshot(node, |fs, object| fs.read(object, offset, size as usize)),
        };
        let bytes = result.as_ref().map_or(0, |data| data.len() as u64);
        self.record(FsOpKind::Read, started, bytes, result.is_ok());
        match result {
            Ok(data) => {
                // The kernel sized its buffer to `size`: more would be a protocol error.
                debug_assert!(data.len() <= size as usize, "read returned more than asked");
                reply.data(&data)
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _entered = enter!(self, reply, ino);
        if !node_of(ino).is_head() {
            return reply.error(Errno::EROFS);
        }
        let object = object_of(ino);
        let started = Instant::now();
        // handle_killpriv_v2: the kernel marks a write by a caller without CAP_FSETID into a
        // set-ID file; the bits (and capabilities) go before the data lands.
        // The kernel does not mark a direct (O_DIRECT) write: a caller other than root stands
        // for one without CAP_FSETID, as for truncation in `setattr`. (Written back from the
        // cache, the caller is the kernel's flusher: the mark above was its say.)
        let unprivileged_direct =
            !write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) && req.uid() != 0;
        let killed =
            if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) || unprivileged_direct {
                self.fs().remove_privileges(object)
            } else {
                Ok(())
            };
        // O_SYNC / O_DSYNC: durable before the write returns.
        let sync = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
        // Written back from the kernel's cache: acknowledged to the writer already.
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let written = killed.and_then(|()| {
            if sync {
                self.fs().write_sync(object, offset, data).map(|_| ())
            } else if cached {
                let margin = self.acknowledged_max_bytes.load(Ordering::Relaxed);
                self.fs()
                    .write_acknowledged(object, offset, data, margin)
                    .map(|_| ())
            } else {
                self.fs().write(object, offset, data).map(|_| ())
            }
        });
        self.record(FsOpKind::Write, started, data.len() as u64, written.is_ok());
        match written {
            Ok(()) => {
                reply.written(data.len() as u32);
                if cached {
                    self.stop_cached_writers_if_short(ino, object);
                }
            }
            Err(err) if cached => {
                // Written back from the page cache: the kernel keeps this error for the
                // file's next `fsync` and `close`, as ENOSPC if it is that and EIO otherwise,
                // so a quota's refusal is told as ENOSPC ("no space") rather than EIO.
                let class = match err.class() {
                    ErrorClass::QuotaExceeded => ErrorClass::NoSpace,
                    class => class,
                };
                reply.error(Errno::from_i32(class.errno()));
                self.drop_refused_pages(ino, offset, data.len());
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    /// Nothing to do at close: the kernel writes the file's cached pages back before it would
    /// send FLUSH, and file locks are the kernel's (no `setlk` here), so there are none to
    /// drop. ENOSYS tells the kernel to stop sending FLUSH: one round trip fewer per close(2).
    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    /// Listings need no state per open directory (readdir cookies are stable), so once the
    /// kernel agreed (`init`) it is told not to ask (and sends no `releasedir` either).
    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.opendir_skippable {
            reply.error(Errno::ENOSYS);
        } else {
            reply.opened(FileHandle(0), FopenFlags::empty());
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // A snapshot's file keeps no state while open (`open`).
        if !node_of(ino).is_head() {
            return reply.ok();
        }
        // A file's handle is its object number (`open_flags`), whatever the kernel did since.
        debug_assert_eq!(
            fh.0 & !CACHED_WRITER_FH_BIT,
            object_of(ino),
            "handle of another file"
        );
        let _entered = enter!(self, reply);
        // The kernel has written the file's cached pages back before the last release.
        if fh.0 & CACHED_WRITER_FH_BIT != 0 && self.cached_writers.released(object_of(ino)) {
            self.stopped_writers.lock().remove(&object_of(ino));
        }
        // A file a rollback left stale was not carried over: nothing of it is open here.
        if self.head.any_stale(&[ino]) {
            return reply.ok();
        }
        let released = self.timed(FsOpKind::Other, || self.fs().release_inode(object_of(ino)));
        empty(reply, released);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _entered = enter!(self, reply, ino);
        // Under `.cairn` nothing is ever unsynced.
        if !node_of(ino).is_head() {
            return reply.ok();
        }
        let synced = self.timed(FsOpKind::Fsync, || self.fs().fsync(object_of(ino)));
        empty(reply, synced);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let _entered = enter!(self, reply, ino);
        self.list_directory(ino, offset, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let _entered = enter!(self, reply, ino);
        self.list_directory_plus(ino, offset, reply);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _entered = enter!(self, reply, ino);
        // Under `.cairn` nothing is ever unsynced.
        if !node_of(ino).is_head() {
            return reply.ok();
        }
        let synced = self.timed(FsOpKind::Fsync, || self.fs().fsync(object_of(ino)));
        empty(reply, synced);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _entered = enter!(self, reply, ino);
        if !node_of(ino).is_head() {
            return reply.error(Errno::EROFS);
        }
        let mode = if flags & libc::XATTR_CREATE != 0 {
            XattrMode::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrMode::Replace
        } else {
            XattrMode::Any
        };
        let object = object_of(ino);
        let set = self.timed(FsOpKind::Xattr, || {
            self.fs().setxattr(object, name.as_bytes(), value, mode)?;
            // An access ACL set by a caller outside the file's group (and not root) takes
            // set-group-ID away, as on a local filesystem: the kernel leaves that to a FUSE
            // server only through FUSE_SETXATTR_EXT, which fuser cannot parse.
            if name.as_bytes() == ACCESS_ACL_XATTR
                && req.uid() != 0
                && !caller_in_group(req, self.fs().getattr(object)?.gid)
            {
                self.fs().remove_set_group_id(object)?;
            }
            Ok(())
        });
        empty(reply, set);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _entered = enter!(self, reply, ino);
        let node = node_of(ino);
        match self.timed(FsOpKind::Xattr, || match node {
            Node::Head(object) => self.fs().getxattr(object, name.as_bytes()),
            // `.cairn` and `.cairn/snapshot` have none.
            Node::ControlDir | Node::SnapshotDir => Err(FsError::NoAttribute),
            node => self.in_snapshot(node, |fs, object| fs.getxattr(object, name.as_bytes())),
        }) {
            Ok(value) => sized(reply, size, &value),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _entered = enter!(self, reply, ino);
        let node = node_of(ino);
        match self.timed(FsOpKind::Xattr, || match node {
            Node::Head(object) => self.fs().listxattr(object),
            Node::ControlDir | Node::SnapshotDir => Ok(Vec::new()),
            node => self.in_snapshot(node, |fs, object| fs.listxattr(object)),
        }) {
            Ok(names) => {
                let mut list = Vec::new();
                for name in names {
                    list.extend_from_slice(&name);
                    list.push(0);
                }
                sized(reply, size, &list);
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _entered = enter!(self, reply, ino);
        if !node_of(ino).is_head() {
            return reply.error(Errno::EROFS);
        }
        let removed = self.timed(FsOpKind::Xattr, || {
            self.fs().removexattr(object_of(ino), name.as_bytes())
        });
        empty(reply, removed);
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _entered = enter!(self, reply, ino);
        if !node_of(ino).is_head() {
            return reply.error(Errno::EROFS);
        }
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let op = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => Fallocate::Allocate { keep_size },
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => Fallocate::PunchHole,
            libc::FALLOC_FL_ZERO_RANGE => Fallocate::ZeroRange { keep_size },
            _ => return reply.error(Errno::EOPNOTSUPP),
        };
        let object = object_of(ino);
        let result = self.timed(FsOpKind::Fallocate, || {
            // Every kind of fallocate is a change of the file's contents, which takes set-ID
            // bits and capabilities away from a caller without CAP_FSETID (root stands for
            // it, as in `setattr`).
            if req.uid() != 0 {
                self.fs().remove_privileges(object)?;
            }
            self.fs().fallocate(object, offset, length, op)
        });
        empty(reply, result.map(|_| ()));
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let _entered = enter!(self, reply, ino);
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            // The kernel handles the other kinds itself.
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        let node = node_of(ino);
        if !node.is_head() {
            return match self.in_snapshot(node, |fs, object| {
                fs.seek_data_or_hole(object, offset, data)
            }) {
                Ok(found) => reply.offset(found as i64),
                Err(FsError::NotFound) => reply.error(Errno::ENXIO),
                Err(err) => reply.error(errno(&err)),
            };
        }
        let object = object_of(ino);
        let fs = self.fs();
        let answer = move |reply: ReplyLseek| {
            let started = Instant::now();
            let found = fs.seek_data_or_hole(object, offset, data);
            fs.record_op(FsOpKind::Other, 0, found.is_ok(), started.elapsed());
            match found {
                Ok(found) => reply.offset(found as i64),
                Err(FsError::NotFound) => reply.error(Errno::ENXIO),
                Err(err) => reply.error(errno(&err)),
            }
        };
        if !self.cached_writers.any(object) {
            return answer(reply);
        }
        // The kernel may hold written pages of this file that the filesystem has not seen,
        // which it would call holes: have them written back first (invalidating the file's
        // pages launders the dirty ones, each a WRITE answered by the event loops), then
        // answer, on the kernel worker, so that no event loop waits for the writeback.
        self.kernel_job(Box::new(move |notifier| {
            // A file gone meanwhile (ENOENT) has nothing cached left.
            let _ = notifier.inval_inode(ino, 0, 0);
            answer(reply);
        }));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _entered = enter!(self, reply);
        let (total, available) = (self.space)();
        let space = self.fs().space(total, available);
        let block = u64::from(REPORTED_BLOCK_BYTES);
        let free_objects = space.available_bytes / 512;
        reply.statfs(
            space.total_bytes / block,
            space.available_bytes / block,
            space.available_bytes / block,
            space.used_objects + free_objects,
            free_objects,
            REPORTED_BLOCK_BYTES,
            cairn_fs::NAME_BYTES_MAX as u32,
            REPORTED_BLOCK_BYTES,
        );
    }
}
