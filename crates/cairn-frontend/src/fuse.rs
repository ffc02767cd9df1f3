//! The FUSE front end: a filesystem dataset (`cairn_fs::Filesystem`) mounted through the
//! kernel's FUSE, with `fuser` speaking the protocol.
//!
//! The adapter translates and nothing more: inode numbers (FUSE's root is inode 1, cairn's
//! root directory is object 2; the two numbers are swapped and every other object keeps its
//! number), attributes, errors (`FsError::errno`) and the caller's identity for new inodes
//! (with set-group-ID directories passing on their group, as POSIX asks). Permission checks
//! are the kernel's (`default_permissions`); the mount admits every user (`allow_other`),
//! which needs root, as `cairn serve` runs.
//!
//! Caching: attributes and entries are cached by the kernel for `ATTR_TTL`; every change goes
//! through this process, which is the only writer, so the kernel's copy is only stale for
//! changes it did not see (none). No writeback cache yet: each write(2) reaches the
//! filesystem, so `fsync` is the durability point and `close` is not.
//!
//! Threads: `fuser` runs `FUSE_THREADS` loops, each with its own /dev/fuse descriptor; calls
//! run on them and block on the pool as they must (the filesystem's locks order them).

use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_fs::{
    Fallocate, Filesystem, FsError, NewInode, ROOT_OBJECT, RenameMode, SetAttrs, XattrMode,
};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, LockOwner,
    MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    SessionACL, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may keep attributes and names without asking again.
const ATTR_TTL: Duration = Duration::from_secs(1);
/// Event loops (each with its own /dev/fuse descriptor).
const FUSE_THREADS: usize = 2;
/// Block size `stat` and `statfs` report.
const REPORTED_BLOCK_BYTES: u32 = 4096;

/// Size and available bytes of the mounted dataset, for `statfs`.
pub type SpaceFn = Arc<dyn Fn() -> (u64, u64) + Send + Sync>;

/// Why a mount failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("cannot open filesystem {dataset}")]
    Open {
        dataset: String,
        #[source]
        source: Box<cairn_engine::EngineError>,
    },
    #[error("{dataset} is already mounted at {mountpoint}")]
    AlreadyMounted { dataset: String, mountpoint: String },
    #[error("{dataset} has no mountpoint (set one, or give one to mount)")]
    NoMountpoint { dataset: String },
    #[error("cannot mount {dataset} at {mountpoint}: {source}")]
    Mount {
        dataset: String,
        mountpoint: String,
        #[source]
        source: std::io::Error,
    },
}

/// A mounted filesystem; dropping it unmounts.
pub struct FuseMount {
    session: Option<fuser::BackgroundSession>,
    mountpoint: std::path::PathBuf,
}

impl FuseMount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Unmounts and waits for the session's threads to end. Fails (leaving nothing mounted
    /// by us, but the kernel's mount in place) when the mount is busy.
    pub fn unmount(mut self) -> std::io::Result<()> {
        match self.session.take() {
            Some(session) => session.umount_and_join(),
            None => Ok(()),
        }
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            // Nothing to report to at drop; `unmount` is the way to see a failure.
            let _ = session.umount_and_join();
        }
    }
}

/// The mounts of a server, by dataset name.
#[derive(Default)]
pub struct Mounts {
    mounts: parking_lot::Mutex<std::collections::BTreeMap<String, FuseMount>>,
}

impl Mounts {
    /// Mounts the filesystem dataset `dataset` of `pool` at `mountpoint` (or its `mountpoint`
    /// property), creating the directory if missing.
    pub fn mount(
        &self,
        pool: &Arc<cairn_engine::Pool>,
        dataset: &str,
        mountpoint: Option<&Path>,
    ) -> Result<std::path::PathBuf, MountError> {
        let open_error = |source| MountError::Open {
            dataset: dataset.to_string(),
            source: Box::new(source),
        };
        let mountpoint = match mountpoint {
            Some(path) => path.to_path_buf(),
            None => {
                let value = pool
                    .properties(dataset)
                    .map_err(open_error)?
                    .into_iter()
                    .find(|(name, _, _)| *name == "mountpoint")
                    .map_or_else(|| "none".to_string(), |(_, value, _)| value);
                if value == "none" {
                    return Err(MountError::NoMountpoint {
                        dataset: dataset.to_string(),
                    });
                }
                std::path::PathBuf::from(value)
            }
        };
        let mut mounts = self.mounts.lock();
        if let Some(existing) = mounts.get(dataset) {
            return Err(MountError::AlreadyMounted {
                dataset: dataset.to_string(),
                mountpoint: existing.mountpoint.display().to_string(),
            });
        }
        let fs = pool.filesystem(dataset).map_err(open_error)?;
        std::fs::create_dir_all(&mountpoint).map_err(|source| MountError::Mount {
            dataset: dataset.to_string(),
            mountpoint: mountpoint.display().to_string(),
            source,
        })?;
        let space_pool = pool.clone();
        let space_dataset = dataset.to_string();
        let space: SpaceFn = Arc::new(move || {
            // The dataset's size and AVAIL (a quota shows as its size, as `df` on ZFS); the
            // pool's figures if the dataset went away under the mount.
            space_pool
                .filesystem_space(&space_dataset)
                .unwrap_or_else(|_| {
                    let status = space_pool.status();
                    (status.size_bytes, status.free_bytes)
                })
        });
        let mounted = mount(fs, &mountpoint, space)?;
        mounts.insert(dataset.to_string(), mounted);
        Ok(mountpoint)
    }

    /// Unmounts the dataset named `target`, or the one mounted at `target`; returns the
    /// dataset, or `None` if nothing matches.
    pub fn unmount(&self, target: &str) -> std::io::Result<Option<String>> {
        let taken = {
            let mut mounts = self.mounts.lock();
            let key = mounts
                .iter()
                .find(|(dataset, mount)| {
                    dataset.as_str() == target || mount.mountpoint == Path::new(target)
                })
                .map(|(dataset, _)| dataset.clone());
            key.and_then(|key| mounts.remove(&key).map(|mount| (key, mount)))
        };
        match taken {
            Some((dataset, mount)) => mount.unmount().map(|()| Some(dataset)),
            None => Ok(None),
        }
    }

    /// Unmounts everything of `pool` (before it is exported), or everything.
    pub fn unmount_all(&self, pool: Option<&str>) -> Vec<(String, std::io::Result<()>)> {
        let taken: Vec<(String, FuseMount)> = {
            let mut mounts = self.mounts.lock();
            let keys: Vec<String> = mounts
                .keys()
                .filter(|dataset| pool.is_none_or(|pool| dataset.split('/').next() == Some(pool)))
                .cloned()
                .collect();
            keys.into_iter()
                .filter_map(|key| mounts.remove(&key).map(|mount| (key, mount)))
                .collect()
        };
        taken
            .into_iter()
            .map(|(dataset, mount)| (dataset, mount.unmount()))
            .collect()
    }

    /// Dataset and mountpoint of every mount.
    pub fn list(&self) -> Vec<(String, std::path::PathBuf)> {
        self.mounts
            .lock()
            .iter()
            .map(|(dataset, mount)| (dataset.clone(), mount.mountpoint.clone()))
            .collect()
    }
}

/// Mounts `fs` at `mountpoint` (an existing directory) in the background.
pub fn mount(
    fs: Arc<Filesystem>,
    mountpoint: &Path,
    space: SpaceFn,
) -> Result<FuseMount, MountError> {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(fs.name().to_string()),
        MountOption::Subtype("cairn".into()),
        MountOption::DefaultPermissions,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(FUSE_THREADS);
    config.clone_fd = true;
    let dataset = fs.name().to_string();
    let adapter = FuseAdapter { fs, space };
    let session =
        fuser::spawn_mount(adapter, mountpoint, &config).map_err(|source| MountError::Mount {
            dataset,
            mountpoint: mountpoint.display().to_string(),
            source,
        })?;
    Ok(FuseMount {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
    })
}

struct FuseAdapter {
    fs: Arc<Filesystem>,
    space: SpaceFn,
}

/// FUSE inode number → object number.
fn object_of(ino: INodeNo) -> u64 {
    match ino.0 {
        1 => ROOT_OBJECT,
        n if n == ROOT_OBJECT => 1,
        n => n,
    }
}

/// Object number → FUSE inode number.
fn ino_of(object: u64) -> INodeNo {
    INodeNo(match object {
        n if n == ROOT_OBJECT => 1,
        1 => ROOT_OBJECT,
        n => n,
    })
}

fn errno(err: &FsError) -> Errno {
    Errno::from_i32(err.errno())
}

fn system_time(t: Timestamp) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs())
            + Duration::from_nanos(u64::from(t.nanos))
    }
}

fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        },
        Err(before) => {
            let d = before.duration();
            match d.subsec_nanos() {
                0 => Timestamp {
                    secs: -(d.as_secs() as i64),
                    nanos: 0,
                },
                n => Timestamp {
                    secs: -(d.as_secs() as i64) - 1,
                    nanos: 1_000_000_000 - n,
                },
            }
        }
    }
}

fn time_or_now(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::SpecificTime(t) => timestamp(t),
        TimeOrNow::Now => Timestamp::now(),
    }
}

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

fn file_attr(object: u64, attrs: &InodeAttrs, allocated_bytes: u64) -> FileAttr {
    FileAttr {
        ino: ino_of(object),
        size: attrs.size,
        blocks: allocated_bytes.div_ceil(512),
        atime: system_time(attrs.atime),
        mtime: system_time(attrs.mtime),
        ctime: system_time(attrs.ctime),
        crtime: system_time(attrs.crtime),
        kind: file_type(attrs.kind),
        perm: (attrs.mode & 0o7777) as u16,
        nlink: attrs.links.min(u64::from(u32::MAX)) as u32,
        uid: attrs.uid,
        gid: attrs.gid,
        rdev: attrs.rdev as u32,
        blksize: REPORTED_BLOCK_BYTES,
        flags: 0,
    }
}

impl FuseAdapter {
    fn attr(&self, object: u64, attrs: &InodeAttrs) -> FileAttr {
        let allocated = self
            .fs
            .objset()
            .dnode(object)
            .map(|dnode| dnode.used_bytes)
            .unwrap_or(0);
        file_attr(object, attrs, allocated)
    }

    fn entry(&self, reply: ReplyEntry, result: Result<(u64, InodeAttrs), FsError>) {
        match result {
            Ok((object, attrs)) => {
                let attr = self.attr(object, &attrs);
                reply.entry(&ATTR_TTL, &attr, Generation(attrs.generation));
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    /// Owner and group of a new inode made by `req` in `parent`, and the mode adjusted for a
    /// set-group-ID parent (its group and, for a directory, the bit itself pass on).
    fn new_inode(
        &self,
        req: &Request,
        parent: u64,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> NewInode {
        let mut new = NewInode {
            kind,
            mode: mode & 0o7777,
            uid: req.uid(),
            gid: req.gid(),
            rdev,
        };
        if let Ok(parent_attrs) = self.fs.getattr(parent)
            && parent_attrs.mode & 0o2000 != 0
        {
            new.gid = parent_attrs.gid;
            if kind == FileKind::Directory {
                new.mode |= 0o2000;
            }
        }
        new
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

fn empty(reply: ReplyEmpty, result: Result<(), FsError>) {
    match result {
        Ok(()) => reply.ok(),
        Err(err) => reply.error(errno(&err)),
    }
}

impl fuser::Filesystem for FuseAdapter {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(reply, self.fs.lookup(object_of(parent), name.as_bytes()));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let object = object_of(ino);
        match self.fs.getattr(object) {
            Ok(attrs) => reply.attr(&ATTR_TTL, &self.attr(object, &attrs)),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
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
        let object = object_of(ino);
        let changes = SetAttrs {
            mode: mode.map(|mode| mode & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(timestamp),
        };
        match self.fs.setattr(object, changes) {
            Ok(attrs) => reply.attr(&ATTR_TTL, &self.attr(object, &attrs)),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(object_of(ino)) {
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
        let Some(kind) = FileKind::from_mode(mode) else {
            return reply.error(Errno::EINVAL);
        };
        if kind == FileKind::Directory || kind == FileKind::Symlink {
            return reply.error(Errno::EINVAL);
        }
        let parent = object_of(parent);
        let new = self.new_inode(req, parent, kind, mode & !umask, u64::from(rdev));
        self.entry(reply, self.fs.create(parent, name.as_bytes(), new));
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
        let parent = object_of(parent);
        let new = self.new_inode(req, parent, FileKind::Directory, mode & !umask, 0);
        self.entry(reply, self.fs.mkdir(parent, name.as_bytes(), new));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.fs.unlink(object_of(parent), name.as_bytes()));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.fs.rmdir(object_of(parent), name.as_bytes()));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let parent = object_of(parent);
        let new = self.new_inode(req, parent, FileKind::Symlink, 0o777, 0);
        let target = target.as_os_str().as_bytes();
        self.entry(
            reply,
            self.fs.symlink(parent, link_name.as_bytes(), target, new),
        );
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
        let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameMode::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameMode::NoReplace
        } else if flags.is_empty() {
            RenameMode::Replace
        } else {
            return reply.error(Errno::EINVAL);
        };
        empty(
            reply,
            self.fs.rename(
                object_of(parent),
                name.as_bytes(),
                object_of(newparent),
                newname.as_bytes(),
                mode,
            ),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let object = object_of(ino);
        let result = self
            .fs
            .link(object, object_of(newparent), newname.as_bytes())
            .map(|attrs| (object, attrs));
        self.entry(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let object = object_of(ino);
        match self.fs.open_inode(object) {
            Ok(()) => reply.opened(FileHandle(object), FopenFlags::empty()),
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
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let parent = object_of(parent);
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::File);
        let new = self.new_inode(req, parent, kind, mode & !umask, 0);
        let made = self
            .fs
            .create(parent, name.as_bytes(), new)
            .and_then(|(object, attrs)| self.fs.open_inode(object).map(|()| (object, attrs)));
        match made {
            Ok((object, attrs)) => {
                let attr = self.attr(object, &attrs);
                reply.created(
                    &ATTR_TTL,
                    &attr,
                    Generation(attrs.generation),
                    FileHandle(object),
                    FopenFlags::empty(),
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
        match self.fs.read(object_of(ino), offset, size as usize) {
            Ok(data) => reply.data(&data),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let object = object_of(ino);
        let written = self.fs.write(object, offset, data).and_then(|_| {
            // O_SYNC / O_DSYNC: durable before the write returns.
            if flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0 {
                self.fs.fsync(object)?;
            }
            Ok(())
        });
        match written {
            Ok(()) => reply.written(data.len() as u32),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs.release_inode(object_of(ino)));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs.fsync(object_of(ino)));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.fs.readdir(object_of(ino), offset, |entry| {
            !reply.add(
                ino_of(entry.object),
                entry.cookie,
                file_type(entry.kind),
                OsStr::from_bytes(&entry.name),
            )
        });
        match result {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs.fsync(object_of(ino)));
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let mode = if flags & libc::XATTR_CREATE != 0 {
            XattrMode::Create
        } else if flags & libc::XATTR_REPLACE != 0 {
            XattrMode::Replace
        } else {
            XattrMode::Any
        };
        empty(
            reply,
            self.fs
                .setxattr(object_of(ino), name.as_bytes(), value, mode),
        );
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.fs.getxattr(object_of(ino), name.as_bytes()) {
            Ok(value) => sized(reply, size, &value),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.fs.listxattr(object_of(ino)) {
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
        empty(reply, self.fs.removexattr(object_of(ino), name.as_bytes()));
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let op = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => Fallocate::Allocate { keep_size },
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => Fallocate::PunchHole,
            libc::FALLOC_FL_ZERO_RANGE => Fallocate::ZeroRange { keep_size },
            _ => return reply.error(Errno::EOPNOTSUPP),
        };
        let result = self.fs.fallocate(object_of(ino), offset, length, op);
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
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            // The kernel handles the other kinds itself.
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        match self.fs.seek_data_or_hole(object_of(ino), offset, data) {
            Ok(found) => reply.offset(found as i64),
            Err(FsError::NotFound) => reply.error(Errno::ENXIO),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let (total, available) = (self.space)();
        let space = self.fs.space(total, available);
        let block = u64::from(REPORTED_BLOCK_BYTES);
        let free_objects = space.available_bytes / 512;
        reply.statfs(
            space.total_bytes / block,
            space.available_bytes / block,
            space.available_bytes / block,
            space.used_objects + free_objects,
            free_objects,
            REPORTED_BLOCK_BYTES,
            cairn_fs::dirmap::NAME_BYTES_MAX as u32,
            REPORTED_BLOCK_BYTES,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_swap_root_and_master_only() {
        assert_eq!(object_of(INodeNo(1)), ROOT_OBJECT);
        assert_eq!(ino_of(ROOT_OBJECT), INodeNo(1));
        for object in [1, 3, 16, 12345] {
            assert_eq!(object_of(ino_of(object)), object);
        }
    }

    #[test]
    fn times_before_the_epoch_round_trip() {
        for t in [
            Timestamp { secs: -1, nanos: 5 },
            Timestamp { secs: 0, nanos: 0 },
            Timestamp {
                secs: 1_700_000_000,
                nanos: 999_999_999,
            },
            Timestamp {
                secs: -86_400,
                nanos: 0,
            },
        ] {
            assert_eq!(timestamp(system_time(t)), t);
        }
    }
}
