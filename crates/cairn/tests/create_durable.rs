//! After a `pool create` that exited 0, a power cut leaves an importable pool, even on a file
//! system that keeps a new directory entry only once its directory has been fsynced (POSIX
//! allows that; ext4 and XFS happen to hide it).
//!
//! `DirSyncFs` is such a file system: a FUSE passthrough over a backing directory (real files,
//! real data, real fsync) that remembers every name created in a directory since that
//! directory's last fsync. `cut_power` unmounts it and removes those names from the backing
//! directory, as a crash of such a file system would. It can also fail file fsyncs with EIO
//! (`FsyncFault`), as a disk going bad does under a real file system. Mounting needs root and /dev/fuse (CI
//! runs as root; .ci/run installs fuse3); `fuser` mounts with mount(2) directly.

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// No attribute or entry caching in the kernel: every stat comes to us.
const TTL: Duration = Duration::ZERO;

/// The tests run one at a time: a process forked by one test (between fork and exec) holds
/// copies of the other's open files for a moment, which can make its unmount fail as busy.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Default)]
struct State {
    /// Inode number → path relative to the backing root ("" is the root).
    paths: BTreeMap<u64, PathBuf>,
    next_ino: u64,
    files: BTreeMap<u64, File>,
    next_fh: u64,
    /// Directory (relative) → names created in it since its last fsync.
    unsynced: BTreeMap<PathBuf, BTreeSet<OsString>>,
    /// How many directory fsyncs arrived (so a test can see the shim was exercised).
    dir_syncs: u64,
    /// File fsyncs seen of files whose name contains `fault.name` (all files when empty).
    file_syncs: u64,
    fault: FsyncFault,
}

/// A disk going bad: file fsyncs fail with EIO from the `fail_from`-th one on (counting from
/// 0 when the fault is set), for files whose name contains `name`.
#[derive(Default, Clone)]
struct FsyncFault {
    fail_from: Option<u64>,
    name: String,
}

#[derive(Clone)]
struct DirSyncFs {
    root: PathBuf,
    state: Arc<Mutex<State>>,
}

impl DirSyncFs {
    fn new(root: &Path) -> DirSyncFs {
        let mut state = State {
            next_ino: 2,
            next_fh: 1,
            ..State::default()
        };
        state.paths.insert(INodeNo::ROOT.0, PathBuf::new());
        DirSyncFs {
            root: root.to_path_buf(),
            state: Arc::new(Mutex::new(state)),
        }
    }

    fn relative(&self, ino: INodeNo) -> Option<PathBuf> {
        self.state.lock().unwrap().paths.get(&ino.0).cloned()
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Option<PathBuf> {
        self.relative(parent).map(|dir| dir.join(name))
    }

    fn ino_of(&self, relative: &Path) -> u64 {
        let mut state = self.state.lock().unwrap();
        if let Some((&ino, _)) = state.paths.iter().find(|(_, p)| p.as_path() == relative) {
            return ino;
        }
        let ino = state.next_ino;
        state.next_ino += 1;
        state.paths.insert(ino, relative.to_path_buf());
        ino
    }

    fn attr_of(&self, relative: &Path) -> std::io::Result<FileAttr> {
        let meta = std::fs::symlink_metadata(self.root.join(relative))?;
        Ok(attr(self.ino_of(relative), &meta))
    }

    fn created(&self, relative: &Path) {
        let (Some(dir), Some(name)) = (relative.parent(), relative.file_name()) else {
            return;
        };
        let mut state = self.state.lock().unwrap();
        state
            .unsynced
            .entry(dir.to_path_buf())
            .or_default()
            .insert(name.to_os_string());
    }

    fn keep_file(&self, file: File) -> FileHandle {
        let mut state = self.state.lock().unwrap();
        let fh = state.next_fh;
        state.next_fh += 1;
        state.files.insert(fh, file);
        FileHandle(fh)
    }

    fn with_file<T>(
        &self,
        fh: FileHandle,
        body: impl FnOnce(&File) -> std::io::Result<T>,
    ) -> Result<T, Errno> {
        let state = self.state.lock().unwrap();
        let file = state.files.get(&fh.0).ok_or(Errno::EBADF)?;
        body(file).map_err(Errno::from)
    }

    fn set_fault(&self, fault: FsyncFault) {
        let mut state = self.state.lock().unwrap();
        state.fault = fault;
        state.file_syncs = 0;
    }

    /// Counts a file fsync; true if the fault makes it fail.
    fn fsync_fails(&self, ino: INodeNo) -> bool {
        let mut state = self.state.lock().unwrap();
        let matches = state
            .paths
            .get(&ino.0)
            .is_some_and(|path| path.to_string_lossy().contains(&state.fault.name));
        if !matches {
            return false;
        }
        let seen = state.file_syncs;
        state.file_syncs += 1;
        state.fault.fail_from.is_some_and(|from| seen >= from)
    }

    /// Unmounts and drops every name not made durable by a directory fsync.
    fn cut_power(&self, session: fuser::BackgroundSession) -> usize {
        session.umount_and_join().expect("unmount");
        let unsynced = std::mem::take(&mut self.state.lock().unwrap().unsynced);
        let mut dropped = 0;
        for (dir, names) in unsynced {
            for name in names {
                let path = self.root.join(&dir).join(&name);
                let removed = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                dropped += usize::from(removed.is_ok());
            }
        }
        dropped
    }
}

fn attr(ino: u64, meta: &Metadata) -> FileAttr {
    let time = |seconds: i64| UNIX_EPOCH + Duration::from_secs(seconds.max(0) as u64);
    FileAttr {
        ino: INodeNo(ino),
        size: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime()),
        mtime: time(meta.mtime()),
        ctime: time(meta.ctime()),
        crtime: UNIX_EPOCH,
        kind: FileType::from_std(meta.file_type()).unwrap_or(FileType::RegularFile),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: 4096,
        flags: 0,
    }
}

fn open_options(flags: i32) -> OpenOptions {
    let mut options = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => options.write(true),
        libc::O_RDWR => options.read(true).write(true),
        _ => options.read(true),
    };
    // O_DIRECT and the like pass through; creation flags are handled by the caller.
    options.custom_flags(flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC | libc::O_ACCMODE));
    options
}

impl Filesystem for DirSyncFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(path) = self.child(parent, name) else {
            return reply.error(Errno::ENOENT);
        };
        match self.attr_of(&path) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(err) => reply.error(Errno::from(err)),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.relative(ino).map(|path| self.attr_of(&path)) {
            Some(Ok(attr)) => reply.attr(&TTL, &attr),
            Some(Err(err)) => reply.error(Errno::from(err)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(path) = self.relative(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let full = self.root.join(&path);
        let changed = (|| -> std::io::Result<FileAttr> {
            if let Some(size) = size {
                OpenOptions::new().write(true).open(&full)?.set_len(size)?;
            }
            if let Some(mode) = mode {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode & 0o7777))?;
            }
            self.attr_of(&path)
        })();
        match changed {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(err) => reply.error(Errno::from(err)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let Some(path) = self.relative(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let mut options = open_options(flags.0);
        options.truncate(flags.0 & libc::O_TRUNC != 0 && flags.acc_mode() != OpenAccMode::O_RDONLY);
        match options.open(self.root.join(path)) {
            Ok(file) => reply.opened(self.keep_file(file), FopenFlags::empty()),
            Err(err) => reply.error(Errno::from(err)),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let Some(path) = self.child(parent, name) else {
            return reply.error(Errno::ENOENT);
        };
        let full = self.root.join(&path);
        let existed = full.exists();
        let mut options = open_options(flags);
        options.create(true).mode(mode & !umask);
        if flags & libc::O_EXCL != 0 {
            options.create_new(true);
        }
        if flags & libc::O_TRUNC != 0 {
            options.truncate(true);
        }
        let opened = options.open(&full).and_then(|file| {
            if !existed {
                self.created(&path);
            }
            Ok((file, self.attr_of(&path)?))
        });
        match opened {
            Ok((file, attr)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                self.keep_file(file),
                FopenFlags::empty(),
            ),
            Err(err) => reply.error(Errno::from(err)),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let Some(path) = self.child(parent, name) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::create_dir(self.root.join(&path)).and_then(|()| {
            self.created(&path);
            self.attr_of(&path)
        }) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(err) => reply.error(Errno::from(err)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let Some(path) = self.child(parent, name) else {
            return reply.error(Errno::ENOENT);
        };
        match std::fs::remove_file(self.root.join(&path)) {
            Ok(()) => {
                let mut state = self.state.lock().unwrap();
                state.paths.retain(|_, p| *p != path);
                if let (Some(dir), Some(file)) = (path.parent(), path.file_name())
                    && let Some(names) = state.unsynced.get_mut(dir)
                {
                    names.remove(file);
                }
                reply.ok();
            }
            Err(err) => reply.error(Errno::from(err)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (Some(from), Some(to)) = (self.child(parent, name), self.child(newparent, newname))
        else {
            return reply.error(Errno::ENOENT);
        };
        if let Err(err) = std::fs::rename(self.root.join(&from), self.root.join(&to)) {
            return reply.error(Errno::from(err));
        }
        {
            let mut state = self.state.lock().unwrap();
            state.paths.retain(|_, p| *p != to);
            for p in state.paths.values_mut() {
                if let Ok(rest) = p.strip_prefix(&from) {
                    *p = if rest.as_os_str().is_empty() {
                        to.clone()
                    } else {
                        to.join(rest)
                    };
                }
            }
        }
        // The new name is a new entry of its directory (the old one's removal is not modelled).
        self.created(&to);
        reply.ok();
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let data = self.with_file(fh, |file| {
            let mut buf = vec![0u8; size as usize];
            let mut done = 0;
            while done < buf.len() {
                match file.read_at(&mut buf[done..], offset + done as u64)? {
                    0 => break,
                    n => done += n,
                }
            }
            buf.truncate(done);
            Ok(buf)
        });
        match data {
            Ok(buf) => reply.data(&buf),
            Err(errno) => reply.error(errno),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.with_file(fh, |file| file.write_all_at(data, offset)) {
            Ok(()) => reply.written(data.len() as u32),
            Err(errno) => reply.error(errno),
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
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state.lock().unwrap().files.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if self.fsync_fails(ino) {
            return reply.error(Errno::EIO);
        }
        match self.with_file(fh, File::sync_all) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(dir) = self.relative(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let mut names: Vec<OsString> = match std::fs::read_dir(self.root.join(&dir)) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.file_name()))
                .collect(),
            Err(err) => return reply.error(Errno::from(err)),
        };
        names.sort();
        for (index, name) in names.iter().enumerate().skip(offset as usize) {
            let path = dir.join(name);
            let Ok(attr) = self.attr_of(&path) else {
                continue;
            };
            if reply.add(attr.ino, index as u64 + 1, attr.kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let Some(dir) = self.relative(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let synced = File::open(self.root.join(&dir)).and_then(|d| d.sync_all());
        let mut state = self.state.lock().unwrap();
        state.unsynced.remove(&dir);
        state.dir_syncs += 1;
        match synced {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(Errno::from(err)),
        }
    }
}

fn mount(fs: &DirSyncFs, at: &Path) -> fuser::BackgroundSession {
    let mut config = Config::default();
    config.mount_options = vec![MountOption::FSName("cairn-dirsync-test".into())];
    fuser::spawn_mount(fs.clone(), at, &config)
        .expect("mount the FUSE shim (needs root and /dev/fuse)")
}

fn cairn(state: &Path, cwd: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--state-dir")
        .arg(state)
        .args(args)
        .env_remove("CAIRN_STATE_DIR")
        .env_remove("CAIRN_INJECT_POWER_CUT_AFTER_OPS")
        .current_dir(cwd)
        .output()
        .expect("run cairn")
}

fn ok(state: &Path, cwd: &Path, args: &[&str]) -> String {
    let out = cairn(state, cwd, args);
    assert!(
        out.status.success(),
        "cairn {args:?} failed:\nstdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn a_pool_created_before_a_power_cut_survives_lost_directory_entries() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(backing.join("disks")).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let fs = DirSyncFs::new(&backing);

    // The shim drops what it should: a file whose directory was never synced is gone.
    let session = mount(&fs, &mnt);
    std::fs::write(mnt.join("disks/unsynced.txt"), b"lost").unwrap();
    File::open(mnt.join("disks/unsynced.txt"))
        .unwrap()
        .sync_all()
        .unwrap();
    assert_eq!(fs.cut_power(session), 1);
    assert!(!backing.join("disks/unsynced.txt").exists());

    // A mirror with a log device, every file made by --size, and the pool cache (with its
    // state directory) on the shim too.
    let session = mount(&fs, &mnt);
    let state = mnt.join("state");
    let disks = mnt.join("disks");
    ok(
        &state,
        &disks,
        &[
            "pool", "create", "--size", "64M", "tank", "mirror", "a.img", "b.img", "log",
            "slog.img",
        ],
    );
    let synced_before_cut = fs.state.lock().unwrap().dir_syncs;
    assert!(synced_before_cut > 0, "cairn never synced a directory");
    fs.cut_power(session);

    let session = mount(&fs, &mnt);
    let names: BTreeSet<String> = std::fs::read_dir(&disks)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        ["a.img", "b.img", "slog.img"]
            .iter()
            .all(|name| names.contains(*name)),
        "device files lost at the power cut: {names:?}"
    );
    let list = ok(&state, &disks, &["pool", "list", "-H"]);
    assert!(
        list.starts_with("tank\t"),
        "the pool cache lost the pool: {list}"
    );
    let status = ok(&state, &disks, &["pool", "status", "tank"]);
    assert!(
        status.contains("ONLINE") && !status.contains("DEGRADED"),
        "{status}"
    );
    ok(&state, &disks, &["pool", "check", "tank"]);
    drop(session);
}

fn run(state: &Path, cwd: &Path, args: &[&str]) -> Option<i32> {
    cairn(state, cwd, args).status.code()
}

#[test]
fn a_create_whose_flushes_fail_with_eio_exits_non_zero_and_leaves_nothing() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(backing.join("disks")).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let fs = DirSyncFs::new(&backing);
    let _session = mount(&fs, &mnt);
    // The cache lives off the shim: only the devices' flushes fail.
    let state = dir.path().join("state");
    let disks = mnt.join("disks");
    let create = ["pool", "create", "--size", "64M", "tank", "a.img"];
    // Fail the device's fsyncs from the k-th on, k = 0, 1, ... until a create needs fewer.
    let mut k = 0;
    loop {
        fs.set_fault(FsyncFault {
            fail_from: Some(k),
            name: "a.img".into(),
        });
        let code = run(&state, &disks, &create);
        let fsyncs = fs.state.lock().unwrap().file_syncs;
        if fsyncs <= k {
            assert_eq!(code, Some(0), "no fsync failed, yet the create failed");
            break;
        }
        assert_eq!(
            code,
            Some(1),
            "fsync {k} of {fsyncs} failed with EIO, yet the create passed"
        );
        assert!(
            !backing.join("disks/a.img").exists(),
            "k={k}: a.img was left"
        );
        assert!(
            ok(&state, &disks, &["pool", "list", "-H"]).is_empty(),
            "k={k}: pool recorded"
        );
        k += 1;
        assert!(k < 200, "create never completed");
    }
    assert!(k > 2, "the create must have flushed several times ({k})");
    fs.set_fault(FsyncFault::default());
    ok(&state, &disks, &["pool", "check", "tank"]);

    // One side of a mirror failing its last flush: no pool that is degraded from birth.
    let mirror = [
        "pool", "create", "--size", "64M", "duo", "mirror", "b.img", "c.img",
    ];
    fs.set_fault(FsyncFault {
        fail_from: Some(0),
        name: "c.img".into(),
    });
    let out = cairn(&state, &disks, &mirror);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("c.img"), "{err}");
    assert!(!backing.join("disks/b.img").exists() && !backing.join("disks/c.img").exists());

    // create -V on the single-device pool: every run that meets a failed flush exits non-zero.
    let mut k = 0;
    loop {
        let volume = format!("tank/vol{k}");
        fs.set_fault(FsyncFault {
            fail_from: Some(k),
            name: "a.img".into(),
        });
        let code = run(&state, &disks, &["create", "-V", "8M", &volume]);
        let fsyncs = fs.state.lock().unwrap().file_syncs;
        if fsyncs <= k {
            assert_eq!(code, Some(0), "no fsync failed, yet create -V failed");
            fs.set_fault(FsyncFault::default());
            let list = ok(&state, &disks, &["list", "-H"]);
            assert!(
                list.lines().any(|l| l.starts_with(&format!("{volume}\t"))),
                "{list}"
            );
            break;
        }
        assert_eq!(
            code,
            Some(1),
            "fsync {k} of {fsyncs} failed, yet create -V passed"
        );
        k += 1;
        assert!(k < 200, "create -V never completed");
    }
    assert!(k > 2, "create -V must have flushed several times ({k})");
    fs.set_fault(FsyncFault::default());
    ok(&state, &disks, &["pool", "check", "tank"]);
}

#[test]
fn a_log_device_failing_its_flushes_is_not_added() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(backing.join("disks")).unwrap();
    std::fs::create_dir(&mnt).unwrap();
    let fs = DirSyncFs::new(&backing);
    let _session = mount(&fs, &mnt);
    let state = dir.path().join("state");
    let disks = mnt.join("disks");
    ok(
        &state,
        &disks,
        &["pool", "create", "--size", "64M", "tank", "a.img"],
    );
    ok(&state, &disks, &["create", "-V", "8M", "tank/vol"]);

    // A log device whose every flush fails (after the one that makes the new file durable):
    // the txg goes on without it, so the add must not.
    fs.set_fault(FsyncFault {
        fail_from: Some(1),
        name: "slog.img".into(),
    });
    let add = ["pool", "add", "--size", "64M", "tank", "log", "slog.img"];
    let out = cairn(&state, &disks, &add);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("slog.img") && err.contains("failed while being added"),
        "{err}"
    );
    assert!(
        !backing.join("disks/slog.img").exists(),
        "the created file was left"
    );
    fs.set_fault(FsyncFault::default());
    let status = ok(&state, &disks, &["pool", "status", "tank"]);
    assert!(
        !status.contains("slog.img") && status.contains("ONLINE"),
        "{status}"
    );
    ok(&state, &disks, &["pool", "check", "tank"]);

    // The same device on a healthy disk is added.
    ok(&state, &disks, &add);
    let status = ok(&state, &disks, &["pool", "status", "tank"]);
    assert!(status.contains("slog.img"), "{status}");
}
