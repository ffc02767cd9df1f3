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
//! Caching: attributes and entries are cached by the kernel for `ATTR_TTL` (a minute); every
//! change goes through this process, which is the only writer, and the changes the
//! filesystem makes on its own (access times, set-ID bits taken away) are invalidated as they
//! happen (`Filesystem::observe_own_changes`), so the kernel's copy is not stale. Listings are
//! readdirplus (names with their attributes), and reads and writes go up to 1 MiB per request
//! (`init`). Inodes the kernel no longer caches are found again from file handles
//! (FUSE_EXPORT_SUPPORT, `lookup` of "."). A directory removed while the kernel still holds
//! it answers `getattr` with no links until the kernel forgets it (`RemovedDirs`). The kernel's own read-ahead on the
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
//! While a file has opens through the writeback cache, the kernel may hold written pages of
//! it that the filesystem has not seen. `lseek`'s SEEK_DATA and SEEK_HOLE would call them
//! holes, so they first have the kernel write the file's pages back (on the kernel worker
//! thread, so no event loop waits for the WRITEs that brings). `stat` counts data not yet
//! synced in the file's blocks and reports the file's block size as `st_blksize`, the unit
//! SEEK_DATA and SEEK_HOLE answer in.
//!
//! What is decided at open stays for that descriptor. A file opened with room that then
//! nears the dataset's limit (a quota, or the pool's room) is stopped before anything it was
//! told was written can be refused: once a written-back call leaves the dataset less room
//! than the kernel may hold acknowledged (its per-mount dirty limit and 8 MiB), the file's
//! cached write(2)s fail with EDQUOT or ENOSPC (`stop_cached_writers_if_short`: the kernel
//! asks for a file's attributes before a cached write once they are stale, and that request
//! names the writer's handle, which `getattr` answers with the error). What the kernel still
//! holds is written back after and taken, up to that margin past a quota (a quota set live
//! below what is cached is the one way to use it); so the file's size and contents are what
//! write(2) acknowledged. Should even that not fit (the pool itself full), the refusal is
//! reported by `fsync` and `close` (as ENOSPC: the kernel reports anything else as EIO at
//! `close`) and the refused pages are dropped from the cache (`drop_refused_pages`), so
//! nothing the pool did not take is read back. The stop also fails a read at the end of
//! the file through that handle (the kernel asks for the size there too), until room
//! returns or the file's cached writers close. `sync=always` set while a file is open
//! applies to that file from its next open; until then its writes are durable from its next
//! `fsync` or `close`. The headroom is per mount: mounts of several datasets of one pool
//! each count their own.
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
//! Mounts have type `fuse.cairn` and the dataset as their source, and the flags the dataset's
//! `readonly`, `devices`, `setuid` and `exec` properties ask for (`MountFlags`; `cairn mount
//! -o` overrides them for one mount, `cairn set` changes them live by a remount). The server's
//! list of its mounts (`Mounts`) follows the kernel's: a mount let go from outside (a plain
//! `umount`) is forgotten at the next look, a busy one stays listed. A server killed without
//! unmounting leaves mounts that answer ENOTCONN; the next server of the same state directory
//! detaches those its record lists (`clear_dead_cairn_mounts`), and a mount over one detaches
//! it first.
//!
//! Threads: `fuser` runs `FUSE_THREADS` loops, each with its own /dev/fuse descriptor; calls
//! run on them and block on the pool as they must (the filesystem's locks order them).

use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_fs::ops::FsOpKind;
use cairn_fs::{
    Fallocate, Filesystem, FsError, FsSync, InodeStorage, NewInode, ROOT_OBJECT, RenameMode,
    SetAttrs, XattrMode,
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

/// How long the kernel may keep attributes and names without asking again. Every change of
/// a name or of attributes goes through the kernel, which updates or drops what it keeps,
/// but for those the filesystem makes on its own (access times, set-ID bits taken away),
/// which it invalidates itself (`Filesystem::observe_own_changes`); so the kernel's copy is
/// not stale, and a long time spares a round trip per name and per `stat` (`ls -l`, `find
/// -ls` and `rm -rf` of large trees; the kernel also drops a file's cached ACL whenever it
/// asks again, so ACL lookups cost one more). Bounded all the same, so that what some
/// unforeseen change left stale does not stay.
const ATTR_TTL: Duration = Duration::from_secs(60);
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
/// Block size `statfs` reports (`stat` reports each file's own).
const REPORTED_BLOCK_BYTES: u32 = 4096;
/// Least room a dataset must have for a file opened for writing to go through the kernel's
/// writeback cache (`FuseAdapter::open_flags`). The kernel holds at most its per-mount dirty
/// limit of such writes unanswered (the mount's bdi `max_bytes`, ~45 MB here: 1% of the
/// machine's dirty threshold); the headroom is the larger of this and four times that limit.
const WRITEBACK_HEADROOM_MIN_BYTES: u64 = 128 << 20;
/// Headroom over the kernel's per-mount dirty limit (see `WRITEBACK_HEADROOM_MIN_BYTES`).
const WRITEBACK_HEADROOM_DIRTY_LIMITS: u64 = 4;
/// What the kernel may have acknowledged through the writeback cache and not yet sent, over
/// its per-mount dirty limit: writers overshoot the limit a little between the kernel's
/// checks, and pages being written back count apart.
const ACKNOWLEDGED_SLACK_BYTES: u64 = 8 << 20;
/// `ACKNOWLEDGED_SLACK_BYTES` plus the dirty limit, when the kernel does not say its limit.
const ACKNOWLEDGED_DEFAULT_BYTES: u64 = 64 << 20;

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
    #[error("cannot mount {dataset}")]
    Options {
        dataset: String,
        #[source]
        source: MountOptionError,
    },
    #[error("cannot mount {dataset} at {mountpoint}: {other} is mounted there")]
    MountpointTaken {
        dataset: String,
        mountpoint: String,
        other: String,
    },
    #[error("cannot mount {dataset} at {mountpoint}")]
    Mount {
        dataset: String,
        mountpoint: String,
        #[source]
        source: std::io::Error,
    },
}

/// The flags a mount is made with: the dataset's `readonly`, `devices`, `setuid` and `exec`
/// properties, as ZFS applies them, unless the mount asks otherwise (`cairn mount -o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountFlags {
    pub read_only: bool,
    pub no_devices: bool,
    pub no_setuid: bool,
    pub no_exec: bool,
}

impl MountFlags {
    /// The flags the dataset's properties ask for.
    pub fn of_dataset(
        pool: &cairn_engine::Pool,
        dataset: &str,
    ) -> Result<MountFlags, cairn_engine::EngineError> {
        let properties = pool.properties(dataset)?;
        let is = |name: &str, value: &str| {
            properties
                .iter()
                .any(|(key, found, _)| *key == name && found == value)
        };
        Ok(MountFlags {
            read_only: is("readonly", "on"),
            no_devices: is("devices", "off"),
            no_setuid: is("setuid", "off"),
            no_exec: is("exec", "off"),
        })
    }

    /// These flags with the mount options `options` (`ro`, `rw`, `dev`, `nodev`, `suid`,
    /// `nosuid`, `exec`, `noexec`, comma-separated, as mount(8) takes them) applied over
    /// them. Options that only say what mount(8) says by default (`defaults`, `auto`,
    /// `noauto`, `nofail`, `user`-less `_netdev`...) are taken and ignored.
    pub fn with_options(mut self, options: &str) -> Result<MountFlags, MountOptionError> {
        for option in options.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            match option {
                "ro" => self.read_only = true,
                "rw" => self.read_only = false,
                "dev" => self.no_devices = false,
                "nodev" => self.no_devices = true,
                "suid" => self.no_setuid = false,
                "nosuid" => self.no_setuid = true,
                "exec" => self.no_exec = false,
                "noexec" => self.no_exec = true,
                "defaults" | "auto" | "noauto" | "nofail" | "_netdev" => {}
                other => return Err(MountOptionError(other.to_string())),
            }
        }
        Ok(self)
    }

    /// The flags as mount(2) takes them, for a remount of the mount's own flags.
    fn remount_flags(self) -> libc::c_ulong {
        let mut flags = libc::MS_REMOUNT | libc::MS_BIND;
        if self.read_only {
            flags |= libc::MS_RDONLY;
        }
        if self.no_devices {
            flags |= libc::MS_NODEV;
        }
        if self.no_setuid {
            flags |= libc::MS_NOSUID;
        }
        if self.no_exec {
            flags |= libc::MS_NOEXEC;
        }
        flags
    }

    fn mount_options(self) -> Vec<MountOption> {
        vec![
            if self.read_only {
                MountOption::RO
            } else {
                MountOption::RW
            },
            if self.no_devices {
                MountOption::NoDev
            } else {
                MountOption::Dev
            },
            if self.no_setuid {
                MountOption::NoSuid
            } else {
                MountOption::Suid
            },
            if self.no_exec {
                MountOption::NoExec
            } else {
                MountOption::Exec
            },
        ]
    }
}

/// A mount option `cairn mount -o` does not take.
#[derive(Debug, thiserror::Error)]
#[error(
    "unknown mount option '{0}' (known: ro, rw, dev, nodev, suid, nosuid, exec, noexec; the rest are properties: cairn set)"
)]
pub struct MountOptionError(pub String);

/// A mounted filesystem; dropping it unmounts.
pub struct FuseMount {
    session: Option<fuser::BackgroundSession>,
    mountpoint: std::path::PathBuf,
    /// The mount's device number (each FUSE mount has its own): what tells it from
    /// whatever is mounted at the same path once it is gone.
    dev: Option<u64>,
    /// The flags it is mounted with now.
    flags: MountFlags,
    fs: Arc<Filesystem>,
}

/// How long a mount whose path no longer shows it may take to see its session end (a plain
/// `umount` of it: the kernel ends the session, its threads then stop).
const SESSION_END_WAIT: Duration = Duration::from_secs(2);

impl FuseMount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    pub fn filesystem(&self) -> &Arc<Filesystem> {
        &self.fs
    }

    /// Whether the kernel has let this mount go (a plain `umount`, `fusermount -u`, or a
    /// lazy unmount): its session ended. A mount whose path shows another device is given
    /// a moment for its session to end; if it does not, something is mounted over it and
    /// it counts as still there.
    fn ended(&self) -> bool {
        let Some(session) = &self.session else {
            return true;
        };
        if session.guard.is_finished() {
            return true;
        }
        if path_dev(&self.mountpoint) == self.dev {
            return false;
        }
        let waited = Instant::now();
        while waited.elapsed() < SESSION_END_WAIT {
            if session.guard.is_finished() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// Unmounts and waits for the session's threads to end. When the mount is busy (or
    /// something else is mounted over it) it fails and the mount stays as it was, served.
    pub fn unmount(&mut self) -> std::io::Result<()> {
        if !self.ended() {
            let path = self.own_path()?;
            // SAFETY: a valid NUL-terminated path; umount2 only reads it.
            if unsafe { libc::umount2(path.as_ptr(), 0) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        self.fs.observe_own_changes(None);
        // The kernel's mount is gone: only the session's threads are left to end (fuser's
        // own unmount could race the kernel's teardown and try the path again).
        match self.session.take() {
            Some(session) => session.join(),
            None => Ok(()),
        }
    }
}

impl FuseMount {
    /// The mountpoint as a C path, once it is checked to show this mount (not one mounted
    /// over it since): what an unmount or a remount by path may act on.
    fn own_path(&self) -> std::io::Result<std::ffi::CString> {
        if path_dev(&self.mountpoint) != self.dev {
            return Err(std::io::Error::other(format!(
                "something else is mounted over {}",
                self.mountpoint.display()
            )));
        }
        std::ffi::CString::new(self.mountpoint.as_os_str().as_bytes())
            .map_err(std::io::Error::other)
    }

    /// Changes the mount's flags in place (a remount of the mount, as `mount -o remount`),
    /// when they differ.
    fn set_flags(&mut self, flags: MountFlags) -> std::io::Result<()> {
        if flags == self.flags {
            return Ok(());
        }
        let path = self.own_path()?;
        // SAFETY: a valid NUL-terminated path; no source, type or data for a remount of the
        // mount's own flags.
        let status = unsafe {
            libc::mount(
                std::ptr::null(),
                path.as_ptr(),
                std::ptr::null(),
                flags.remount_flags(),
                std::ptr::null(),
            )
        };
        if status != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.flags = flags;
        Ok(())
    }
}

/// The device number of what is mounted at `path` (its root's `st_dev`).
fn path_dev(path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|meta| meta.dev())
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            self.fs.observe_own_changes(None);
            // Nothing to report to at drop; `unmount` is the way to see a failure. (fuser
            // unmounts only a mount of its own session, never one that took its place.)
            let _ = session.umount_and_join();
        }
    }
}

/// What `Mounts::unmount` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmounted {
    /// Unmounted now.
    Now { dataset: String },
    /// It had been unmounted from outside (`umount`); forgotten now.
    Already { dataset: String },
}

/// The mounts of a server, by dataset name. A mount the kernel let go from outside (a plain
/// `umount`) is forgotten at the next look, so the server never believes a dataset is
/// mounted when it is not; a mount that could not be unmounted (busy) stays known. With a
/// record (`keep_record`), the mountpoints are also kept in a file, so that a server started
/// after this one was killed detaches only the dead mounts that were its own.
#[derive(Default)]
pub struct Mounts {
    mounts: parking_lot::Mutex<std::collections::BTreeMap<String, FuseMount>>,
    record: parking_lot::Mutex<Option<std::path::PathBuf>>,
}

impl Mounts {
    /// Keeps the mountpoints in the file at `path` from now on (`clear_dead_cairn_mounts`
    /// reads it).
    pub fn keep_record(&self, path: &Path) {
        *self.record.lock() = Some(path.to_path_buf());
        self.write_record(&self.mounts.lock());
    }

    fn write_record(&self, mounts: &std::collections::BTreeMap<String, FuseMount>) {
        let Some(path) = self.record.lock().clone() else {
            return;
        };
        let mut text = Vec::new();
        for mount in mounts.values() {
            let bytes = mount.mountpoint.as_os_str().as_bytes();
            if !bytes.contains(&b'\n') {
                text.extend_from_slice(bytes);
                text.push(b'\n');
            }
        }
        // A record that cannot be written only means a later server detaches less.
        let _ = std::fs::write(path, text);
    }

    /// Forgets the mounts the kernel let go; returns their datasets.
    fn forget_ended(
        &self,
        mounts: &mut std::collections::BTreeMap<String, FuseMount>,
    ) -> Vec<String> {
        let ended: Vec<String> = mounts
            .iter()
            .filter(|(_, mount)| mount.ended())
            .map(|(dataset, _)| dataset.clone())
            .collect();
        for dataset in &ended {
            // Its session has ended: dropping it only joins the threads.
            mounts.remove(dataset);
        }
        if !ended.is_empty() {
            self.write_record(mounts);
        }
        ended
    }

    /// Mounts the filesystem dataset `dataset` of `pool` at `mountpoint` (or its `mountpoint`
    /// property), creating the directory if missing.
    /// `options`: mount options over the dataset's properties for this mount
    /// (`MountFlags::with_options`).
    pub fn mount(
        &self,
        pool: &Arc<cairn_engine::Pool>,
        dataset: &str,
        mountpoint: Option<&Path>,
        options: &str,
    ) -> Result<std::path::PathBuf, MountError> {
        let open_error = |source| MountError::Open {
            dataset: dataset.to_string(),
            source: Box::new(source),
        };
        let flags = MountFlags::of_dataset(pool, dataset)
            .map_err(open_error)?
            .with_options(options)
            .map_err(|source| MountError::Options {
                dataset: dataset.to_string(),
                source,
            })?;
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
        self.forget_ended(&mut mounts);
        if let Some(existing) = mounts.get(dataset) {
            return Err(MountError::AlreadyMounted {
                dataset: dataset.to_string(),
                mountpoint: existing.mountpoint.display().to_string(),
            });
        }
        if let Some((other, _)) = mounts
            .iter()
            .find(|(_, mount)| mount.mountpoint == mountpoint)
        {
            return Err(MountError::MountpointTaken {
                dataset: dataset.to_string(),
                mountpoint: mountpoint.display().to_string(),
                other: other.clone(),
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
        let mounted = mount(fs, &mountpoint, space, flags)?;
        mounts.insert(dataset.to_string(), mounted);
        self.write_record(&mounts);
        Ok(mountpoint)
    }

    /// Unmounts the dataset named `target`, or the one mounted at `target`; `None` if
    /// nothing matches. A busy mount stays mounted and known (the error says so).
    pub fn unmount(&self, target: &str) -> std::io::Result<Option<Unmounted>> {
        let mut mounts = self.mounts.lock();
        let matches =
            |dataset: &str, mountpoint: &Path| dataset == target || mountpoint == Path::new(target);
        let ended: Vec<(String, std::path::PathBuf)> = mounts
            .iter()
            .filter(|(_, mount)| mount.ended())
            .map(|(dataset, mount)| (dataset.clone(), mount.mountpoint.clone()))
            .collect();
        self.forget_ended(&mut mounts);
        if let Some((dataset, _)) = ended
            .into_iter()
            .find(|(dataset, mountpoint)| matches(dataset, mountpoint))
        {
            return Ok(Some(Unmounted::Already { dataset }));
        }
        let Some(dataset) = mounts
            .iter()
            .find(|(dataset, mount)| matches(dataset, &mount.mountpoint))
            .map(|(dataset, _)| dataset.clone())
        else {
            return Ok(None);
        };
        let Some(mount) = mounts.get_mut(&dataset) else {
            return Ok(None);
        };
        mount.unmount()?;
        mounts.remove(&dataset);
        self.write_record(&mounts);
        Ok(Some(Unmounted::Now { dataset }))
    }

    /// Unmounts everything of `pool` (before it is exported), or everything: each dataset
    /// with its mountpoint and what unmounting it gave. Those that could not be unmounted
    /// (busy) stay mounted and known.
    pub fn unmount_all(
        &self,
        pool: Option<&str>,
    ) -> Vec<(String, std::path::PathBuf, std::io::Result<()>)> {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        let keys: Vec<String> = mounts
            .keys()
            .filter(|dataset| pool.is_none_or(|pool| dataset.split('/').next() == Some(pool)))
            .cloned()
            .collect();
        let mut outcomes = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(mount) = mounts.get_mut(&key) else {
                continue;
            };
            let mountpoint = mount.mountpoint.clone();
            let result = mount.unmount();
            if result.is_ok() {
                mounts.remove(&key);
            }
            outcomes.push((key, mountpoint, result));
        }
        self.write_record(&mounts);
        outcomes
    }

    /// Makes the flags of the mounts of `pool`'s datasets what their properties now say
    /// (after `readonly`, `devices`, `setuid` or `exec` changed; what `cairn mount -o` asked
    /// for is replaced, as ZFS does). Returns the datasets whose mount could not be changed,
    /// with why.
    pub fn apply_properties(&self, pool: &cairn_engine::Pool) -> Vec<(String, std::io::Error)> {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        let mut failures = Vec::new();
        for (dataset, mount) in mounts.iter_mut() {
            if dataset.split('/').next() != Some(pool.name()) {
                continue;
            }
            let readonly = mount.fs.is_readonly();
            let result = MountFlags::of_dataset(pool, dataset)
                .map_err(|err| std::io::Error::other(err.to_string()))
                .and_then(|flags| {
                    mount.set_flags(MountFlags {
                        read_only: flags.read_only || readonly,
                        ..flags
                    })
                });
            if let Err(err) = result {
                failures.push((dataset.clone(), err));
            }
        }
        failures
    }

    /// Whether `dataset` is mounted by this server now.
    pub fn is_mounted(&self, dataset: &str) -> bool {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        mounts.contains_key(dataset)
    }

    /// Every mounted filesystem, by dataset name (for statistics).
    pub fn filesystems(&self) -> Vec<(String, Arc<Filesystem>)> {
        self.mounts
            .lock()
            .iter()
            .map(|(dataset, mount)| (dataset.clone(), mount.fs.clone()))
            .collect()
    }

    /// Dataset and mountpoint of every mount (mounts let go from outside forgotten first).
    pub fn list(&self) -> Vec<(String, std::path::PathBuf)> {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        mounts
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

/// Detaches the mounts of `dead_cairn_mounts` that the record at `record` (written by
/// `Mounts::keep_record` of an earlier server with the same record) lists (at server start):
/// a dead mount of another server (another state directory) is that server's to clear.
/// Returns their mountpoints.
pub fn clear_dead_cairn_mounts(record: &Path) -> Vec<std::path::PathBuf> {
    let Ok(text) = std::fs::read(record) else {
        return Vec::new();
    };
    let ours: Vec<&Path> = text
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| Path::new(OsStr::from_bytes(line)))
        .collect();
    let dead: Vec<std::path::PathBuf> = dead_cairn_mounts()
        .into_iter()
        .filter(|mountpoint| ours.contains(&mountpoint.as_path()))
        .collect();
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
    flags: MountFlags,
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
    // A read-only filesystem (the property, or a pool imported read-only) mounts `ro`: the
    // kernel then refuses every change with EROFS itself, before a write could sit in its
    // page cache with nowhere to go.
    let flags = MountFlags {
        read_only: flags.read_only || fs.is_readonly(),
        ..flags
    };
    config.mount_options.extend(flags.mount_options());
    config.acl = SessionACL::All;
    config.n_threads = Some(FUSE_THREADS);
    config.clone_fd = true;
    let dataset = fs.name().to_string();
    let headroom_bytes = Arc::new(AtomicU64::new(WRITEBACK_HEADROOM_MIN_BYTES));
    let kernel_jobs = Arc::new(OnceLock::new());
    let acknowledged_max_bytes = Arc::new(AtomicU64::new(ACKNOWLEDGED_DEFAULT_BYTES));
    let adapter = FuseAdapter {
        fs: fs.clone(),
        space,
        opendir_skippable: false,
        sync_opens_direct: false,
        writeback: false,
        headroom_bytes: headroom_bytes.clone(),
        kernel_jobs: kernel_jobs.clone(),
        cached_writers: Arc::default(),
        removed_dirs: RemovedDirs::default(),
        acknowledged_max_bytes: acknowledged_max_bytes.clone(),
        stopped_writers: parking_lot::Mutex::default(),
    };
    let session =
        fuser::spawn_mount(adapter, mountpoint, &config).map_err(|source| MountError::Mount {
            dataset,
            mountpoint: mountpoint.display().to_string(),
            source,
        })?;
    let jobs = spawn_kernel_worker(session.notifier());
    let _ = kernel_jobs.set(jobs.clone());
    // Attribute changes the filesystem makes on its own: the kernel's copy is dropped.
    let jobs = parking_lot::Mutex::new(jobs);
    fs.observe_own_changes(Some(Arc::new(move |object| {
        let ino = ino_of(object);
        // The worker ends with the session, after which nothing is cached to drop.
        let _ = jobs.lock().send(Box::new(move |notifier: &Notifier| {
            let _ = notifier.inval_inode(ino, -1, 0);
        }));
    })));
    if let Some(dirty_limit) = mount_dirty_limit_bytes(mountpoint) {
        headroom_bytes.fetch_max(
            dirty_limit.saturating_mul(WRITEBACK_HEADROOM_DIRTY_LIMITS),
            Ordering::Relaxed,
        );
        acknowledged_max_bytes.store(
            dirty_limit.saturating_add(ACKNOWLEDGED_SLACK_BYTES),
            Ordering::Relaxed,
        );
    }
    Ok(FuseMount {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
        dev: path_dev(mountpoint),
        flags,
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

/// Work that tells the kernel something (`Notifier`), done on a thread of its own
/// (`spawn_kernel_worker`).
type KernelJob = Box<dyn FnOnce(&Notifier) + Send>;
type KernelJobs = std::sync::mpsc::Sender<KernelJob>;

/// A thread that runs the jobs sent to it one after another, until the session's adapter
/// goes: having the kernel drop a file's refused pages (FUSE_NOTIFY_INVAL_INODE), or write
/// its dirty pages back before an `lseek` is answered. Never done in a FUSE call itself:
/// the kernel waits for that call's answer before it can drop those pages, and the pages it
/// writes back come as WRITE calls that need a free event loop.
fn spawn_kernel_worker(notifier: Notifier) -> KernelJobs {
    let (sender, receiver) = std::sync::mpsc::channel::<KernelJob>();
    std::thread::spawn(move || {
        for job in receiver {
            job(&notifier);
        }
    });
    sender
}

/// Most removed directories remembered for the kernel (`RemovedDirs`).
const REMOVED_DIRS_MAX: usize = 4096;

/// Directories removed (rmdir, or replaced by a rename) that the kernel may still hold open:
/// their last attributes with no links, until the kernel forgets the inode. Directories need
/// no open call here (FUSE_NO_OPENDIR_SUPPORT), so the filesystem frees one at once; without
/// this, `fstat` of a descriptor still open on it would fail with ENOENT where ext4 shows
/// a link count of 0. Bounded: past `REMOVED_DIRS_MAX` the oldest is dropped.
#[derive(Default)]
struct RemovedDirs {
    dirs: parking_lot::Mutex<std::collections::BTreeMap<u64, (u64, InodeAttrs)>>,
    next_order: AtomicU64,
}

impl RemovedDirs {
    fn removed(&self, object: u64, mut attrs: InodeAttrs) {
        attrs.links = 0;
        attrs.size = 0;
        let order = self.next_order.fetch_add(1, Ordering::Relaxed);
        let mut dirs = self.dirs.lock();
        dirs.insert(object, (order, attrs));
        if dirs.len() > REMOVED_DIRS_MAX {
            let oldest = dirs
                .iter()
                .min_by_key(|(_, (order, _))| *order)
                .map(|(object, _)| *object);
            if let Some(oldest) = oldest {
                dirs.remove(&oldest);
            }
        }
    }

    fn get(&self, object: u64) -> Option<InodeAttrs> {
        self.dirs
            .lock()
            .get(&object)
            .map(|(_, attrs)| attrs.clone())
    }

    fn forgotten(&self, object: u64) {
        self.dirs.lock().remove(&object);
    }
}

/// Bit of a file handle that marks an open for writing served through the kernel's
/// writeback cache (`FuseAdapter::open_flags`); the rest is the object number.
const CACHED_WRITER_FH_BIT: u64 = 1 << 63;

/// Opens for writing through the writeback cache, per object: while a file has any, the
/// kernel may hold data of it the filesystem has not seen (`lseek`).
#[derive(Default)]
struct CachedWriters {
    opens: parking_lot::Mutex<std::collections::HashMap<u64, u32>>,
}

impl CachedWriters {
    fn opened(&self, object: u64) {
        *self.opens.lock().entry(object).or_insert(0) += 1;
    }

    /// Returns whether that was the object's last.
    fn released(&self, object: u64) -> bool {
        let mut opens = self.opens.lock();
        let Some(count) = opens.get_mut(&object) else {
            return false;
        };
        assert!(*count > 0, "cached writers of object {object} underflow");
        *count -= 1;
        if *count > 0 {
            return false;
        }
        opens.remove(&object);
        true
    }

    fn any(&self, object: u64) -> bool {
        self.opens.lock().contains_key(&object)
    }
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
    /// Jobs for the kernel worker (`spawn_kernel_worker`; set once the session runs).
    kernel_jobs: Arc<OnceLock<KernelJobs>>,
    /// Opens through the writeback cache, per object.
    cached_writers: Arc<CachedWriters>,
    /// Removed directories the kernel may still hold.
    removed_dirs: RemovedDirs,
    /// The most the kernel may have acknowledged through the writeback cache and not yet
    /// sent (its per-mount dirty limit and `ACKNOWLEDGED_SLACK_BYTES`): how far written-back
    /// data may go past a quota, and the room below which cached writers are stopped.
    acknowledged_max_bytes: Arc<AtomicU64>,
    /// Files whose cached writers are to be stopped, with the error their write(2)s get
    /// (`stop_cached_writers_if_short`).
    stopped_writers: parking_lot::Mutex<std::collections::HashMap<u64, i32>>,
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

fn file_attr(object: u64, attrs: &InodeAttrs, storage: InodeStorage) -> FileAttr {
    FileAttr {
        ino: ino_of(object),
        size: attrs.size,
        blocks: storage.allocated_bytes.div_ceil(512),
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
        blksize: u32::try_from(storage.block_bytes).unwrap_or(u32::MAX),
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
    /// A file being created goes through the cache like any other. (It was opened direct
    /// once, to spare a SETATTR of the kept times at close; but a shared mapping of a file
    /// goes through the page cache whatever the open says, and a direct pwrite beside it
    /// could be undone by the mapping's page written back later with the old bytes around
    /// what it changed: xfstests' holetest lost writes that way.)
    ///
    /// Returns the flags and the file handle: the object number, with
    /// `CACHED_WRITER_FH_BIT` for an open for writing through the cache (counted in
    /// `cached_writers` until it is released).
    fn open_flags(&self, object: u64, open_flags: i32) -> (FopenFlags, FileHandle) {
        let sync_open = open_flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let writable = open_flags & libc::O_ACCMODE != libc::O_RDONLY;
        // Only a file opened for writing asks what the dataset's state allows.
        let direct = sync_open || (self.writeback && writable && !self.writeback_safe());
        let direct = self.sync_opens_direct && direct;
        if self.writeback && writable && !direct {
            self.cached_writers.opened(object);
            return (
                FopenFlags::empty(),
                FileHandle(object | CACHED_WRITER_FH_BIT),
            );
        }
        let flags = if direct {
            FopenFlags::FOPEN_DIRECT_IO
        } else {
            FopenFlags::empty()
        };
        (flags, FileHandle(object))
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
    /// `offset` for `len` bytes (on the kernel worker), so that what the pool did not take is
    /// not read back from the cache.
    fn drop_refused_pages(&self, ino: INodeNo, offset: u64, len: usize) {
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        let len = i64::try_from(len).unwrap_or(i64::MAX);
        self.kernel_job(Box::new(move |notifier| {
            // The file may be gone by now (ENOENT): nothing cached is left to drop.
            let _ = notifier.inval_inode(ino, offset, len);
        }));
    }

    /// After a cached write reached the filesystem: when the dataset has less room left than
    /// the kernel may have acknowledged and not yet sent, stops the file's cached writers
    /// before what they are told was written could be refused. Their write(2)s then fail
    /// with EDQUOT (or ENOSPC): the kernel asks for the file's attributes before a cached
    /// write once they are stale (told at once here), and `getattr` answers such a request,
    /// which names a cached writer's handle, with the error (`stopped_error`). What the
    /// kernel still holds reaches the filesystem after, and fits.
    fn stop_cached_writers_if_short(&self, ino: INodeNo, object: u64) {
        let margin = self.acknowledged_max_bytes.load(Ordering::Relaxed);
        if self.stopped_writers.lock().contains_key(&object) {
            return;
        }
        let (_, available) = (self.space)();
        if available >= margin {
            return;
        }
        let Some(refusal) = self.fs.space_refusal(margin) else {
            return;
        };
        self.stopped_writers
            .lock()
            .insert(object, errno(&refusal).code());
        self.kernel_job(Box::new(move |notifier| {
            // Attributes only (a negative offset): the cached pages stay.
            let _ = notifier.inval_inode(ino, -1, 0);
        }));
    }

    /// The error a cached writer of `object` is stopped with, if it is and the dataset has
    /// not found room again meanwhile (files deleted, a quota raised).
    fn stopped_error(&self, object: u64) -> Option<Errno> {
        let code = *self.stopped_writers.lock().get(&object)?;
        let margin = self.acknowledged_max_bytes.load(Ordering::Relaxed);
        let (_, available) = (self.space)();
        if available >= margin {
            self.stopped_writers.lock().remove(&object);
            return None;
        }
        Some(Errno::from_i32(code))
    }

    /// Runs `job` on the kernel worker (`spawn_kernel_worker`). Before the session has
    /// started (no file can be open, nothing is cached) there is nothing for it to do.
    fn kernel_job(&self, job: KernelJob) {
        match self.kernel_jobs.get() {
            // The worker ends only with the session, which ends after this call.
            Some(jobs) => {
                let _ = jobs.send(job);
            }
            None => drop(job),
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

    /// The attributes the kernel is given: blocks count data not yet synced, and the block
    /// size is the file's own, the granularity of SEEK_DATA and SEEK_HOLE.
    fn attr(&self, object: u64, attrs: &InodeAttrs) -> FileAttr {
        let storage = self.fs.storage(object).unwrap_or(InodeStorage {
            allocated_bytes: 0,
            block_bytes: u64::from(REPORTED_BLOCK_BYTES),
        });
        file_attr(object, attrs, storage)
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
        let parent = object_of(parent);
        let found = self.timed(FsOpKind::Lookup, || match name.as_bytes() {
            b"." => self.fs.getattr(parent).map(|attrs| (parent, attrs)),
            name => self.fs.lookup(parent, name),
        });
        self.entry(reply, found);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let object = object_of(ino);
        // Asked with a cached writer's handle: the kernel is about to take a write(2) into
        // its cache (see `stop_cached_writers_if_short`).
        if let Some(fh) = fh
            && fh.0 & CACHED_WRITER_FH_BIT != 0
            && let Some(code) = self.stopped_error(object)
        {
            return reply.error(code);
        }
        let found = self.timed(FsOpKind::Getattr, || self.fs.getattr(object));
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
    fn forget(&self, _req: &Request, ino: INodeNo, _nlookup: u64) {
        self.removed_dirs.forgotten(object_of(ino));
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
        let times_only = changes.mode.is_none()
            && changes.uid.is_none()
            && changes.gid.is_none()
            && changes.size.is_none();
        let fallback = changes;
        match self.timed(FsOpKind::Setattr, || self.fs.setattr(object, changes)) {
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
        let parent = object_of(parent);
        let removed = self.timed(FsOpKind::Remove, || {
            let found = self.fs.lookup(parent, name.as_bytes());
            self.fs.rmdir(parent, name.as_bytes())?;
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
        let (parent, newparent) = (object_of(parent), object_of(newparent));
        let renamed = self.timed(FsOpKind::Rename, || {
            // A directory this replaces is gone once the rename is done.
            let replaced = match mode {
                RenameMode::Replace => self
                    .fs
                    .lookup(newparent, newname.as_bytes())
                    .ok()
                    .filter(|(_, attrs)| attrs.kind == FileKind::Directory),
                _ => None,
            };
            self.fs
                .rename(parent, name.as_bytes(), newparent, newname.as_bytes(), mode)?;
            if let Some((object, attrs)) = replaced
                && self.fs.getattr(object).is_err()
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
                let (open_flags, fh) = self.open_flags(object, flags);
                reply.created(
                    &ATTR_TTL,
                    &attr,
                    Generation(attrs.generation),
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
                self.fs.remove_privileges(object)
            } else {
                Ok(())
            };
        // O_SYNC / O_DSYNC: durable before the write returns.
        let sync = flags.0 & (libc::O_SYNC | libc::O_DSYNC) != 0;
        // Written back from the kernel's cache: acknowledged to the writer already.
        let cached = write_flags.contains(WriteFlags::FUSE_WRITE_CACHE);
        let written = killed.and_then(|()| {
            if sync {
                self.fs.write_sync(object, offset, data).map(|_| ())
            } else if cached {
                let margin = self.acknowledged_max_bytes.load(Ordering::Relaxed);
                self.fs
                    .write_acknowledged(object, offset, data, margin)
                    .map(|_| ())
            } else {
                self.fs.write(object, offset, data).map(|_| ())
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
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The kernel has written the file's cached pages back before the last release.
        if fh.0 & CACHED_WRITER_FH_BIT != 0 && self.cached_writers.released(object_of(ino)) {
            self.stopped_writers.lock().remove(&object_of(ino));
        }
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
        req: &Request,
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
        let object = object_of(ino);
        let set = self.timed(FsOpKind::Xattr, || {
            self.fs.setxattr(object, name.as_bytes(), value, mode)?;
            // An access ACL set by a caller outside the file's group (and not root) takes
            // set-group-ID away, as on a local filesystem: the kernel leaves that to a FUSE
            // server only through FUSE_SETXATTR_EXT, which fuser cannot parse.
            if name.as_bytes() == ACCESS_ACL_XATTR
                && req.uid() != 0
                && !caller_in_group(req, self.fs.getattr(object)?.gid)
            {
                self.fs.remove_set_group_id(object)?;
            }
            Ok(())
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
        req: &Request,
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
        let object = object_of(ino);
        let result = self.timed(FsOpKind::Fallocate, || {
            // Every kind of fallocate is a change of the file's contents, which takes set-ID
            // bits and capabilities away from a caller without CAP_FSETID (root stands for
            // it, as in `setattr`).
            if req.uid() != 0 {
                self.fs.remove_privileges(object)?;
            }
            self.fs.fallocate(object, offset, length, op)
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
        let object = object_of(ino);
        let fs = self.fs.clone();
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
