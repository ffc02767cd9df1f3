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
//! changes it did not see (none). Listings are readdirplus (names with their attributes), and
//! reads and writes go up to 1 MiB per request (`init`). The kernel's own read-ahead on the
//! mount stays at what it offers (128 KiB here: asking for more is capped); sequential readers
//! are read ahead below instead, by the object set's stream detector, which file reads feed.
//!
//! Writes: the kernel's writeback cache is on, and used where it is safe
//! (`FuseAdapter::open_flags`). A file opened for writing on a dataset that is not
//! `sync=always` and has room for all the kernel may hold back (`WRITEBACK_HEADROOM_*`) has its
//! write(2)s kept in the page cache and written back in large calls; `fsync` writes them back
//! and commits, the durability point as on any file system. Everywhere else a file opened for
//! writing is opened direct (FOPEN_DIRECT_IO), so each write(2) reaches the filesystem and gets
//! its own answer: durable under `sync=always`, ENOSPC or EDQUOT when there is no room. Such a
//! file's reads come from the ARC, and it can still be mapped shared
//! (FUSE_DIRECT_IO_ALLOW_MMAP, without which the writeback cache stays off). A file opened
//! O_SYNC or O_DSYNC is always direct, so each of its writes is one round trip.
//!
//! What is decided at open stays for that descriptor. A file opened with room that then fills
//! the dataset learns of the refusal at writeback: the kernel reports it from `fsync` and
//! `close` (as ENOSPC, so a quota's EDQUOT is told as ENOSPC, EIO being the kernel's word for
//! anything else), and the refused pages are dropped from the cache (`drop_refused_pages`), so
//! nothing the pool did not take is read back, as over NFS. Likewise `sync=always` set while a
//! file is open applies to that file from its next open; until then its writes are durable
//! from its next `fsync` or `close`. The headroom is per mount: mounts of several datasets of
//! one pool each count their own.
//!
//! Round trips: each one costs two context switches, which on a small machine is most of a
//! small call's time, so the kernel is spared those it can do without: FLUSH at close (the
//! kernel writes a file's cached pages back itself first; nothing is left to do here),
//! opening directories (`FUSE_NO_OPENDIR_SUPPORT`), and asking for `security.capability`
//! before every write (`FUSE_HANDLE_KILLPRIV_V2`: set-ID bits and capabilities are taken away
//! here, `Filesystem::remove_privileges`). What a small-file create still costs (measured): a
//! negative LOOKUP, CREATE, an IOCTL if the program asks whether the file is a terminal
//! (Python's `open` does; answered ENOSYS, which the kernel does not remember), one GETXATTR
//! of `security.capability` at the inode's first write (the kernel then marks it S_NOSEC),
//! WRITE (at close, from the writeback cache), RELEASE after close (not waited for), and a
//! GETATTR of the directory before the next create (each create invalidates its attributes,
//! and `default_permissions` needs them for the search permission).
//!
//! Observability: each call is timed from its arrival to its answer and recorded in the
//! filesystem's statistics (`cairn_fs::ops`), which `pool iostat` and `stat fs` show.
//!
//! Mounts have type `fuse.cairn` and the dataset as their source. A server killed without
//! unmounting leaves mounts that answer ENOTCONN; the next server detaches them
//! (`clear_dead_cairn_mounts`), and a mount over one detaches it first.
//!
//! Threads: `fuser` runs `FUSE_THREADS` loops, each with its own /dev/fuse descriptor; calls
//! run on them and block on the pool as they must (the filesystem's locks order them).

use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_fs::ops::FsOpKind;
use cairn_fs::{
    Fallocate, Filesystem, FsError, FsSync, NewInode, ROOT_OBJECT, RenameMode, SetAttrs, XattrMode,
};
use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, MountOption, Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long the kernel may keep attributes and names without asking again.
const ATTR_TTL: Duration = Duration::from_secs(1);
/// Event loops (each with its own /dev/fuse descriptor). A loop blocks for the whole of its
/// call, a log commit included, so this bounds the synchronous writes the server holds at
/// once, and with them what one log commit can group: with 2 loops, 16 writers doing O_DSYNC
/// writes made 5,800 writes/s here, with 16 loops 9,200. Idle loops cost a sleeping thread
/// and a 1 MiB request buffer each.
const FUSE_THREADS: usize = 16;
/// Largest read and write the kernel is asked to send in one request (and read-ahead).
const LARGE_IO_BYTES: u32 = 1 << 20;
/// Entries one readdirplus call gathers before looking up their attributes (the kernel's
/// buffer takes a page or so; what does not fit is read again from its cookie next time).
const READDIRPLUS_ENTRIES_MAX: usize = 128;
/// Block size `stat` and `statfs` report.
const REPORTED_BLOCK_BYTES: u32 = 4096;
/// Least room a dataset must have for a file opened for writing to go through the kernel's
/// writeback cache (`FuseAdapter::open_flags`). The kernel holds at most its per-mount dirty
/// limit of such writes unanswered (the mount's bdi `max_bytes`, ~45 MB here: 1% of the
/// machine's dirty threshold); the headroom is the larger of this and four times that limit.
const WRITEBACK_HEADROOM_MIN_BYTES: u64 = 128 << 20;
/// Headroom over the kernel's per-mount dirty limit (see `WRITEBACK_HEADROOM_MIN_BYTES`).
const WRITEBACK_HEADROOM_DIRTY_LIMITS: u64 = 4;

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
    #[error("cannot mount {dataset} at {mountpoint}")]
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
    fs: Arc<Filesystem>,
}

impl FuseMount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    pub fn filesystem(&self) -> &Arc<Filesystem> {
        &self.fs
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
        // A mount a killed server left there answers nothing: take it away first.
        if dead_cairn_mounts().contains(&mountpoint) {
            detach(&mountpoint);
        }
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

    /// Every mounted filesystem, by dataset name (for statistics).
    pub fn filesystems(&self) -> Vec<(String, Arc<Filesystem>)> {
        self.mounts
            .lock()
            .iter()
            .map(|(dataset, mount)| (dataset.clone(), mount.fs.clone()))
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

/// The mount type of cairn's mounts (`fuser`'s subtype), as /proc/self/mountinfo shows it.
const MOUNT_TYPE: &str = "fuse.cairn";

/// Mountpoints of cairn mounts whose server is gone (a server killed, or crashed, leaves its
/// mounts behind, answering every call with ENOTCONN). A live mount, this server's or another
/// one's, answers and is never listed.
pub fn dead_cairn_mounts() -> Vec<std::path::PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(parse_mountinfo_line)
        .filter(|(fstype, _)| fstype == MOUNT_TYPE)
        .map(|(_, mountpoint)| mountpoint)
        .filter(|mountpoint| statfs_errno(mountpoint) == Some(libc::ENOTCONN))
        .collect()
}

/// The error `statfs(2)` of `path` gives, if any. Asked with statfs because the kernel
/// always sends that to the server: a `stat` can be answered from the attributes it keeps
/// (for up to `ATTR_TTL`), even after the server died.
fn statfs_errno(path: &Path) -> Option<i32> {
    let path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a valid NUL-terminated path and a buffer of the type statfs fills.
    let status = unsafe { libc::statfs(path.as_ptr(), buf.as_mut_ptr()) };
    (status != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// Detaches the mounts of `dead_cairn_mounts` (at server start); returns their mountpoints.
pub fn clear_dead_cairn_mounts() -> Vec<std::path::PathBuf> {
    let dead = dead_cairn_mounts();
    for mountpoint in &dead {
        detach(mountpoint);
    }
    dead
}

/// A lazy unmount: never blocks, even on a mount whose server is gone.
fn detach(mountpoint: &Path) {
    let Ok(path) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a valid NUL-terminated path; umount2 only reads it.
    unsafe {
        libc::umount2(path.as_ptr(), libc::MNT_DETACH);
    }
}

/// (filesystem type, mountpoint) of one /proc/self/mountinfo line; the mountpoint's octal
/// escapes (`\040` for a space) decoded.
fn parse_mountinfo_line(line: &str) -> Option<(String, std::path::PathBuf)> {
    let (before, after) = line.split_once(" - ")?;
    let mountpoint = before.split(' ').nth(4)?;
    let fstype = after.split(' ').next()?;
    Some((fstype.to_string(), unescape_octal(mountpoint)))
}

fn unescape_octal(field: &str) -> std::path::PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let escaped = bytes
            .get(index + 1..index + 4)
            .filter(|digits| {
                bytes[index] == b'\\' && digits.iter().all(|d| (b'0'..=b'7').contains(d))
            })
            .map(|digits| {
                digits
                    .iter()
                    .fold(0u32, |acc, d| acc * 8 + u32::from(d - b'0'))
            });
        match escaped {
            Some(value) if value <= 0xff => {
                out.push(value as u8);
                index += 4;
            }
            _ => {
                out.push(bytes[index]);
                index += 1;
            }
        }
    }
    std::path::PathBuf::from(OsStr::from_bytes(&out))
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
        // As a kernel option, so that the mount's type reads `fuse.cairn` (fuser's `Subtype`
        // reaches only fusermount, not a mount made directly by root).
        MountOption::CUSTOM(format!(
            "subtype={}",
            MOUNT_TYPE.trim_start_matches("fuse.")
        )),
        MountOption::DefaultPermissions,
    ];
    config.acl = SessionACL::All;
    config.n_threads = Some(FUSE_THREADS);
    config.clone_fd = true;
    let dataset = fs.name().to_string();
    let headroom_bytes = Arc::new(AtomicU64::new(WRITEBACK_HEADROOM_MIN_BYTES));
    let page_drops = Arc::new(OnceLock::new());
    let adapter = FuseAdapter {
        fs: fs.clone(),
        space,
        opendir_skippable: false,
        sync_opens_direct: false,
        writeback: false,
        headroom_bytes: headroom_bytes.clone(),
        page_drops: page_drops.clone(),
    };
    let session =
        fuser::spawn_mount(adapter, mountpoint, &config).map_err(|source| MountError::Mount {
            dataset,
            mountpoint: mountpoint.display().to_string(),
            source,
        })?;
    let _ = page_drops.set(spawn_page_dropper(session.notifier()));
    if let Some(dirty_limit) = mount_dirty_limit_bytes(mountpoint) {
        headroom_bytes.fetch_max(
            dirty_limit.saturating_mul(WRITEBACK_HEADROOM_DIRTY_LIMITS),
            Ordering::Relaxed,
        );
    }
    Ok(FuseMount {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
        fs,
    })
}

/// The most dirty data the kernel keeps for the mount at `mountpoint` before writers wait
/// for writeback (its bdi's `max_bytes`, in sysfs since Linux 6.2), if it says.
fn mount_dirty_limit_bytes(mountpoint: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(mountpoint).ok()?.dev();
    let path = format!(
        "/sys/class/bdi/{}:{}/max_bytes",
        libc::major(dev),
        libc::minor(dev)
    );
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Ranges of a file's cached pages for the kernel to drop: (inode, offset, length).
type PageDrops = std::sync::mpsc::Sender<(INodeNo, i64, i64)>;

/// A thread that has the kernel drop the page ranges sent to it (FUSE_NOTIFY_INVAL_INODE), one
/// after another, until the session's adapter goes. Not done in the call that refuses a
/// writeback: the kernel waits for that call's answer before it can drop those pages.
fn spawn_page_dropper(notifier: Notifier) -> PageDrops {
    let (sender, receiver) = std::sync::mpsc::channel::<(INodeNo, i64, i64)>();
    std::thread::spawn(move || {
        for (ino, offset, len) in receiver {
            // The file may be gone by now (ENOENT): nothing cached is left to drop.
            let _ = notifier.inval_inode(ino, offset, len);
        }
    });
    sender
}

struct FuseAdapter {
    fs: Arc<Filesystem>,
    space: SpaceFn,
    /// The kernel agreed to open directories without asking (FUSE_NO_OPENDIR_SUPPORT): an
    /// `opendir` answered ENOSYS then means "never ask again", not an error.
    opendir_skippable: bool,
    /// The kernel lets files opened with direct I/O be mapped shared
    /// (FUSE_DIRECT_IO_ALLOW_MMAP), so synchronous opens can bypass the page cache
    /// (`open_flags`) without breaking `mmap`.
    sync_opens_direct: bool,
    /// The kernel keeps written pages and writes them back later (FUSE_WRITEBACK_CACHE);
    /// files are opened through it only where that is safe (`open_flags`).
    writeback: bool,
    /// Room a dataset must have for writes to go through the writeback cache.
    headroom_bytes: Arc<AtomicU64>,
    /// Ranges of pages for the kernel to drop (`spawn_page_dropper`; set once the session
    /// runs).
    page_drops: Arc<OnceLock<PageDrops>>,
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
    /// How an open file is served. A file opened O_SYNC or O_DSYNC bypasses the page cache
    /// (FOPEN_DIRECT_IO): each write(2) is then one WRITE carrying the flag, made durable
    /// before it is answered (`write`), where through the page cache the kernel follows
    /// every such write with an FSYNC, a second round trip that finds nothing left to do.
    /// Reads of that descriptor come from the ARC instead of the page cache; the kernel drops
    /// cached pages a direct write overlaps, so other descriptors of the file stay coherent.
    ///
    /// With the writeback cache, a file opened for writing goes through it only where that is
    /// safe (`writeback_safe`); elsewhere it is opened direct, so that each write(2) reaches
    /// the filesystem and gets its answer: durable under `sync=always`, ENOSPC or EDQUOT
    /// when there is no room.
    ///
    /// A file `created` by this open is opened direct too: its first writer most often writes
    /// it once from start to end (a copy, an archive, a compiler), which the cache does not
    /// help, and with the cache `close` costs one more round trip, a SETATTR of the times the
    /// kernel kept (measured: small files created 6% slower). The cache is for files opened
    /// again, where small writes gather.
    fn open_flags(&self, open_flags: i32, created: bool) -> FopenFlags {
        let sync_open = open_flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let writable = open_flags & libc::O_ACCMODE != libc::O_RDONLY;
        // Only a file opened again for writing asks what the dataset's state allows.
        let direct =
            sync_open || (self.writeback && writable && (created || !self.writeback_safe()));
        if self.sync_opens_direct && direct {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        }
    }

    /// Whether a file opened now for writing may go through the writeback cache: the
    /// dataset is not `sync=always` (each write durable when it returns), and it has room
    /// for all the kernel may hold back (`headroom_bytes`), so that the writes it answers
    /// now will find room when they arrive. A file opened with room keeps its cache mode:
    /// if it then fills the dataset, the refusal comes at writeback and is reported by
    /// `fsync` and `close` (ENOSPC, as over NFS), and the refused pages are dropped
    /// (`write`).
    fn writeback_safe(&self) -> bool {
        if self.fs.sync_mode() == FsSync::Always {
            return false;
        }
        let (_, available) = (self.space)();
        available >= self.headroom_bytes.load(Ordering::Relaxed)
    }

    /// After a refused writeback: has the kernel drop the cached pages of `ino` from
    /// `offset` for `len` bytes (`spawn_page_dropper`), so that what the pool did not take is
    /// not read back from the cache.
    fn drop_refused_pages(&self, ino: INodeNo, offset: u64, len: usize) {
        if let Some(drops) = self.page_drops.get() {
            let offset = i64::try_from(offset).unwrap_or(i64::MAX);
            let len = i64::try_from(len).unwrap_or(i64::MAX);
            // The dropper ends only with the session, which ends after this call.
            let _ = drops.send((ino, offset, len));
        }
    }

    /// Runs one call of the filesystem, recording its latency and outcome (`cairn_fs::ops`).
    fn timed<T>(
        &self,
        kind: FsOpKind,
        call: impl FnOnce() -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        let started = Instant::now();
        let result = call();
        self.record(kind, started, 0, result.is_ok());
        result
    }

    fn record(&self, kind: FsOpKind, started: Instant, bytes: u64, ok: bool) {
        self.fs.record_op(kind, bytes, ok, started.elapsed());
    }

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

    /// The creator's mode with its umask applied, unless `parent` has a default ACL (which
    /// then decides, as POSIX asks; the kernel leaves the umask to a filesystem with ACLs).
    fn masked(&self, parent: u64, mode: u32, umask: u32) -> u32 {
        match self.fs.default_acl(parent) {
            Ok(Some(_)) => mode,
            _ => mode & !umask,
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
    /// Asks the kernel for readdirplus (a listing carries attributes: no lookup per name),
    /// parallel directory calls (the filesystem's own locks order them), POSIX ACLs (the
    /// kernel enforces them; `cairn_fs::acl` keeps mode and ACL agreeing and inherits default
    /// ACLs), 1 MiB reads and writes (read-ahead as large as the kernel allows), and the
    /// writeback cache, for the files opened where it is safe (`open_flags`).
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
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
            | InitFlags::FUSE_WRITEBACK_CACHE;
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

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = self.timed(FsOpKind::Lookup, || {
            self.fs.lookup(object_of(parent), name.as_bytes())
        });
        self.entry(reply, found);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let object = object_of(ino);
        match self.timed(FsOpKind::Getattr, || self.fs.getattr(object)) {
            Ok(attrs) => reply.attr(&ATTR_TTL, &self.attr(object, &attrs)),
            Err(err) => reply.error(errno(&err)),
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
        let object = object_of(ino);
        // handle_killpriv_v2 (`init`): a truncate by an unprivileged caller and any change of
        // owner take away set-ID bits and capabilities here, not in the kernel. fuser does not
        // pass the kernel's FATTR_KILL_SUIDGID, which it sets for a truncate by a caller
        // without CAP_FSETID: a caller other than root stands for that.
        let kills = (size.is_some() && req.uid() != 0) || uid.is_some() || gid.is_some();
        if kills
            && let Err(err) = self.timed(FsOpKind::Setattr, || self.fs.remove_privileges(object))
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
        match self.timed(FsOpKind::Setattr, || self.fs.setattr(object, changes)) {
            Ok(attrs) => reply.attr(&ATTR_TTL, &self.attr(object, &attrs)),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.timed(FsOpKind::Other, || self.fs.readlink(object_of(ino))) {
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
        let mode = self.masked(parent, mode, umask);
        let new = self.new_inode(req, parent, kind, mode, u64::from(rdev));
        let made = self.timed(FsOpKind::Create, || {
            self.fs.create(parent, name.as_bytes(), new)
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
        let parent = object_of(parent);
        let mode = self.masked(parent, mode, umask);
        let new = self.new_inode(req, parent, FileKind::Directory, mode, 0);
        let made = self.timed(FsOpKind::Create, || {
            self.fs.mkdir(parent, name.as_bytes(), new)
        });
        self.entry(reply, made);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let removed = self.timed(FsOpKind::Remove, || {
            self.fs.unlink(object_of(parent), name.as_bytes())
        });
        empty(reply, removed);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let removed = self.timed(FsOpKind::Remove, || {
            self.fs.rmdir(object_of(parent), name.as_bytes())
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
        let parent = object_of(parent);
        let new = self.new_inode(req, parent, FileKind::Symlink, 0o777, 0);
        let target = target.as_os_str().as_bytes();
        let made = self.timed(FsOpKind::Create, || {
            self.fs.symlink(parent, link_name.as_bytes(), target, new)
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
        let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            RenameMode::Exchange
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            RenameMode::NoReplace
        } else if flags.is_empty() {
            RenameMode::Replace
        } else {
            return reply.error(Errno::EINVAL);
        };
        let renamed = self.timed(FsOpKind::Rename, || {
            self.fs.rename(
                object_of(parent),
                name.as_bytes(),
                object_of(newparent),
                newname.as_bytes(),
                mode,
            )
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
        let object = object_of(ino);
        let result = self.timed(FsOpKind::Create, || {
            self.fs
                .link(object, object_of(newparent), newname.as_bytes())
                .map(|attrs| (object, attrs))
        });
        self.entry(reply, result);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let object = object_of(ino);
        match self.timed(FsOpKind::Other, || self.fs.open_inode(object)) {
            Ok(()) => reply.opened(FileHandle(object), self.open_flags(flags.0, false)),
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
        let parent = object_of(parent);
        let kind = FileKind::from_mode(mode).unwrap_or(FileKind::File);
        let mode = self.masked(parent, mode, umask);
        let new = self.new_inode(req, parent, kind, mode, 0);
        let made = self.timed(FsOpKind::Create, || {
            self.fs
                .create(parent, name.as_bytes(), new)
                .and_then(|(object, attrs)| self.fs.open_inode(object).map(|()| (object, attrs)))
        });
        match made {
            Ok((object, attrs)) => {
                let attr = self.attr(object, &attrs);
                reply.created(
                    &ATTR_TTL,
                    &attr,
                    Generation(attrs.generation),
                    FileHandle(object),
                    self.open_flags(flags, true),
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
        let started = Instant::now();
        let result = self.fs.read(object_of(ino), offset, size as usize);
        let bytes = result.as_ref().map_or(0, |data| data.len() as u64);
        self.record(FsOpKind::Read, started, bytes, result.is_ok());
        match result {
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
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let object = object_of(ino);
        let started = Instant::now();
        // handle_killpriv_v2: the kernel marks a write by a caller without CAP_FSETID into a
        // set-ID file; the bits (and capabilities) go before the data lands.
        let killed = if write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            self.fs.remove_privileges(object)
        } else {
            Ok(())
        };
        // O_SYNC / O_DSYNC: durable before the write returns.
        let sync = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let written = killed.and_then(|()| {
            if sync {
                self.fs.write_sync(object, offset, data).map(|_| ())
            } else {
                self.fs.write(object, offset, data).map(|_| ())
            }
        });
        self.record(FsOpKind::Write, started, data.len() as u64, written.is_ok());
        match written {
            Ok(()) => reply.written(data.len() as u32),
            Err(err) if write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) => {
                // Written back from the page cache: the kernel keeps this error for the
                // file's next `fsync` and `close`, as ENOSPC if it is that and EIO otherwise,
                // so a quota's refusal is told as ENOSPC ("no space") rather than EIO.
                let code = match errno(&err) {
                    Errno::EDQUOT => Errno::ENOSPC,
                    code => code,
                };
                reply.error(code);
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
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let released = self.timed(FsOpKind::Other, || self.fs.release_inode(object_of(ino)));
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
        let synced = self.timed(FsOpKind::Fsync, || self.fs.fsync(object_of(ino)));
        empty(reply, synced);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = self.timed(FsOpKind::Readdir, || {
            self.fs.readdir(object_of(ino), offset, |entry| {
                !reply.add(
                    ino_of(entry.object),
                    entry.cookie,
                    file_type(entry.kind),
                    OsStr::from_bytes(&entry.name),
                )
            })
        });
        match result {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        // Entries first, attributes after: no inode is looked at while the directory is read.
        let mut entries = Vec::new();
        let listed = self.timed(FsOpKind::Readdir, || {
            self.fs.readdir(object_of(ino), offset, |entry| {
                entries.push(entry.clone());
                entries.len() < READDIRPLUS_ENTRIES_MAX
            })
        });
        if let Err(err) = listed {
            return reply.error(errno(&err));
        }
        for entry in entries {
            // An entry removed since it was listed is left out, as a later listing would.
            let Ok(attrs) = self.fs.getattr(entry.object) else {
                continue;
            };
            let attr = self.attr(entry.object, &attrs);
            let full = reply.add(
                ino_of(entry.object),
                entry.cookie,
                OsStr::from_bytes(&entry.name),
                &ATTR_TTL,
                &attr,
                Generation(attrs.generation),
            );
            if full {
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
        let synced = self.timed(FsOpKind::Fsync, || self.fs.fsync(object_of(ino)));
        empty(reply, synced);
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
        let set = self.timed(FsOpKind::Xattr, || {
            self.fs
                .setxattr(object_of(ino), name.as_bytes(), value, mode)
        });
        empty(reply, set);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.timed(FsOpKind::Xattr, || {
            self.fs.getxattr(object_of(ino), name.as_bytes())
        }) {
            Ok(value) => sized(reply, size, &value),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.timed(FsOpKind::Xattr, || self.fs.listxattr(object_of(ino))) {
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
        let removed = self.timed(FsOpKind::Xattr, || {
            self.fs.removexattr(object_of(ino), name.as_bytes())
        });
        empty(reply, removed);
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
        let result = self.timed(FsOpKind::Fallocate, || {
            self.fs.fallocate(object_of(ino), offset, length, op)
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
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            // The kernel handles the other kinds itself.
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        match self.timed(FsOpKind::Other, || {
            self.fs.seek_data_or_hole(object_of(ino), offset, data)
        }) {
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

    #[test]
    fn mountinfo_lines_give_type_and_unescaped_mountpoint() {
        let line = "98 29 0:52 / /srv/my\\040db rw,nosuid,nodev,relatime shared:1 - fuse.cairn tank/db rw,user_id=0,group_id=0,default_permissions,allow_other";
        let (fstype, mountpoint) = parse_mountinfo_line(line).unwrap();
        assert_eq!(fstype, "fuse.cairn");
        assert_eq!(mountpoint, Path::new("/srv/my db"));
        assert!(parse_mountinfo_line("garbage").is_none());
        assert_eq!(unescape_octal("a\\134b\\9"), Path::new("a\\b\\9"));
    }
}
