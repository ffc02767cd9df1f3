//! One mount: making it (`mount`: the FUSE session and its event loops, the kernel worker,
//! the writeback headroom from the mount's dirty limit), changing its flags in place, and
//! unmounting it (`FuseMount`; dropping one unmounts).
//!
//! Invariant: a mount acts on its path only while the path still shows it (its device
//! number), never on something mounted over it since. Builds the adapter (`adapter.rs`,
//! with `head.rs`, `removed_dirs.rs`, the kernel worker and `policy.rs`'s constants) and mounts with
//! `mount_flags.rs`'s flags and `mountinfo.rs`'s type; `mounts.rs` keeps the list of them.

use super::adapter::{FuseAdapter, SpaceFn};
use super::convert::ino_of;
use super::head::MountedHead;
use super::kernel_worker::{KernelJobs, spawn_kernel_worker};
use super::mount_flags::{MountFlags, MountOptionError};
use super::mountinfo::MOUNT_TYPE;
use super::policy::{
    ACKNOWLEDGED_DEFAULT_BYTES, ACKNOWLEDGED_SLACK_BYTES, WRITEBACK_HEADROOM_DIRTY_LIMITS,
    WRITEBACK_HEADROOM_MIN_BYTES,
};
use super::removed_dirs::RemovedDirs;
use super::snapdir::SnapshotDir;
use cairn_fs::{Filesystem, OwnChanges};
use fuser::{Config, MountOption, Notifier, SessionACL};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Event loops (each with its own /dev/fuse descriptor). A loop blocks for the whole of its
/// call, a log commit included, so this bounds the synchronous writes the server holds at
/// once, and with them what one log commit can group: with 2 loops, 16 writers doing O_DSYNC
/// writes made 5,800 writes/s here, with 16 loops 9,200. Idle loops cost a sleeping thread
/// and a 1 MiB request buffer each.
const FUSE_THREADS: usize = 16;

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

/// A mounted filesystem; dropping it unmounts.
pub struct FuseMount {
    session: Option<fuser::BackgroundSession>,
    pub(super) mountpoint: std::path::PathBuf,
    /// The mount's device number (each FUSE mount has its own): what tells it from
    /// whatever is mounted at the same path once it is gone.
    dev: Option<u64>,
    /// The flags it is mounted with now.
    flags: MountFlags,
    /// The filesystem served, swapped by a rollback (`head.rs`, `rollback.rs`).
    pub(super) head: Arc<MountedHead>,
    /// What the filesystem tells of the attribute changes it makes on its own (given to the
    /// filesystem a rollback swaps in too).
    pub(super) own_changes: OwnChanges,
    /// The mount's kernel worker (`kernel_worker.rs`).
    pub(super) kernel_jobs: KernelJobs,
}

/// How long a mount whose path no longer shows it may take to see its session end (a plain
/// `umount` of it: the kernel ends the session, its threads then stop).
const SESSION_END_WAIT: Duration = Duration::from_secs(2);

impl FuseMount {
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The filesystem served now.
    pub fn filesystem(&self) -> Arc<Filesystem> {
        self.head.fs()
    }

    /// Whether the kernel has let this mount go (a plain `umount`, `fusermount -u`, or a
    /// lazy unmount): its session ended. A mount whose path shows another device is given
    /// a moment for its session to end; if it does not, something is mounted over it and
    /// it counts as still there.
    pub(super) fn ended(&self) -> bool {
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
        self.head.fs().observe_own_changes(None);
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

    /// Has the kernel drop the root's cached listing (its pages): `snapdir` changed whether
    /// it shows `.cairn`, which no mtime records.
    pub(super) fn drop_root_listing(&self) {
        // The worker ends with the session, after which nothing is cached to drop.
        let _ = self.kernel_jobs.send(Box::new(|notifier: &Notifier| {
            let _ = notifier.inval_inode(ino_of(cairn_fs::ROOT_OBJECT), 0, 0);
        }));
    }

    /// Changes the mount's flags in place (a remount of the mount, as `mount -o remount`),
    /// when they differ.
    pub(super) fn set_flags(&mut self, flags: MountFlags) -> std::io::Result<()> {
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
            self.head.fs().observe_own_changes(None);
            // Nothing to report to at drop; `unmount` is the way to see a failure. (fuser
            // unmounts only a mount of its own session, never one that took its place.)
            let _ = session.umount_and_join();
        }
    }
}

/// Mounts `fs` at `mountpoint` (an existing directory) in the background, with `snapshots`
/// shown under `.cairn/snapshot` (none: no control directory).
pub fn mount(
    fs: Arc<Filesystem>,
    mountpoint: &Path,
    space: SpaceFn,
    flags: MountFlags,
    snapshots: Option<SnapshotDir>,
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
    let head = Arc::new(MountedHead::new(fs.clone()));
    let adapter = FuseAdapter {
        head: head.clone(),
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
        snapshots,
    };
    let session =
        fuser::spawn_mount(adapter, mountpoint, &config).map_err(|source| MountError::Mount {
            dataset,
            mountpoint: mountpoint.display().to_string(),
            source,
        })?;
    let jobs = spawn_kernel_worker(session.notifier());
    let _ = kernel_jobs.set(jobs.clone());
    let mount_jobs = jobs.clone();
    // Attribute changes the filesystem makes on its own: the kernel's copy is dropped.
    let jobs = parking_lot::Mutex::new(jobs);
    let own_changes: OwnChanges = Arc::new(move |object| {
        let ino = ino_of(object);
        // The worker ends with the session, after which nothing is cached to drop.
        let _ = jobs.lock().send(Box::new(move |notifier: &Notifier| {
            let _ = notifier.inval_inode(ino, -1, 0);
        }));
    });
    fs.observe_own_changes(Some(own_changes.clone()));
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
        head,
        own_changes,
        kernel_jobs: mount_jobs,
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
