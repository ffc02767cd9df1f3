//! The adapter's state (`FuseAdapter`: the filesystem, its space, what the kernel agreed to
//! at `init`, the writeback bookkeeping) and the helpers its operations share: a call timed
//! into the filesystem's statistics (`cairn_fs::ops`), attributes and entries as the kernel
//! is given them (`ATTR_TTL`), the creator's mode and owner for a new inode, and jobs for
//! the kernel worker.
//!
//! Invariant: the adapter translates and nothing more; every change goes through the
//! filesystem. Uses `convert.rs`, `kernel_worker.rs`, `writers.rs`, `removed_dirs.rs`, `head.rs` and
//! `snapdir.rs`'s `SnapshotDir` (whose requests `snapdir.rs` adds to it); `policy.rs` adds the open policy to `FuseAdapter`, `ops.rs` its FUSE operations, and
//! `mount.rs` builds one per mount.

use super::convert::{errno, file_attr};
use super::head::MountedHead;
use super::kernel_worker::{KernelJob, KernelJobs};
use super::removed_dirs::RemovedDirs;
use super::snapdir::SnapshotDir;
use super::writers::CachedWriters;
use cairn_fs::attrs::{FileKind, InodeAttrs};
use cairn_fs::ops::FsOpKind;
use cairn_fs::{Filesystem, FsError, InodeStorage, NewInode};
use fuser::{FileAttr, Generation, ReplyEntry, Request};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long the kernel may keep attributes and names without asking again. Every change of
/// a name or of attributes goes through the kernel, which updates or drops what it keeps,
/// but for those the filesystem makes on its own (access times, set-ID bits taken away),
/// which it invalidates itself (`Filesystem::observe_own_changes`); so the kernel's copy is
/// not stale, and a long time spares a round trip per name and per `stat` (`ls -l`, `find
/// -ls` and `rm -rf` of large trees; the kernel also drops a file's cached ACL whenever it
/// asks again, so ACL lookups cost one more). Bounded all the same, so that what some
/// unforeseen change left stale does not stay.
pub(super) const ATTR_TTL: Duration = Duration::from_secs(60);
/// Block size `statfs` reports (`stat` reports each file's own).
pub(super) const REPORTED_BLOCK_BYTES: u32 = 4096;

/// Entries one readdirplus call gathers before looking up their attributes (the kernel's
/// buffer takes a page or so; what does not fit is read again from its cookie next time).
pub(super) const READDIRPLUS_ENTRIES_MAX: usize = 128;

/// Size and available bytes of the mounted dataset, for `statfs`.
pub type SpaceFn = Arc<dyn Fn() -> (u64, u64) + Send + Sync>;

pub(super) struct FuseAdapter {
    /// The filesystem served, swapped by a rollback (`head.rs`).
    pub(super) head: Arc<MountedHead>,
    pub(super) space: SpaceFn,
    /// The kernel agreed to open directories without asking (FUSE_NO_OPENDIR_SUPPORT): an
    /// `opendir` answered ENOSYS then means "never ask again", not an error.
    pub(super) opendir_skippable: bool,
    /// The kernel lets files opened with direct I/O be mapped shared
    /// (FUSE_DIRECT_IO_ALLOW_MMAP), so synchronous opens can bypass the page cache
    /// (`open_flags`) without breaking `mmap`.
    pub(super) sync_opens_direct: bool,
    /// The kernel keeps written pages and writes them back later (FUSE_WRITEBACK_CACHE);
    /// files are opened through it only where that is safe (`open_flags`).
    pub(super) writeback: bool,
    /// Room a dataset must have for writes to go through the writeback cache.
    pub(super) headroom_bytes: Arc<AtomicU64>,
    /// Jobs for the kernel worker (`spawn_kernel_worker`; set once the session runs).
    pub(super) kernel_jobs: Arc<OnceLock<KernelJobs>>,
    /// Opens through the writeback cache, per object.
    pub(super) cached_writers: Arc<CachedWriters>,
    /// Removed directories the kernel may still hold.
    pub(super) removed_dirs: RemovedDirs,
    /// The most the kernel may have acknowledged through the writeback cache and not yet
    /// sent (its per-mount dirty limit and `ACKNOWLEDGED_SLACK_BYTES`): how far written-back
    /// data may go past a quota, and the room below which cached writers are stopped.
    pub(super) acknowledged_max_bytes: Arc<AtomicU64>,
    /// Files whose cached writers are to be stopped, with the error their write(2)s get
    /// (`stop_cached_writers_if_short`).
    pub(super) stopped_writers: parking_lot::Mutex<std::collections::HashMap<u64, i32>>,
    /// The snapshots `.cairn/snapshot` shows (`snapdir.rs`); none: no control directory.
    pub(super) snapshots: Option<SnapshotDir>,
}

impl FuseAdapter {
    /// The filesystem served (in a call: the one the call entered with, `MountedHead::enter`).
    pub(super) fn fs(&self) -> Arc<Filesystem> {
        self.head.fs()
    }

    /// Runs `job` on the kernel worker (`spawn_kernel_worker`). Before the session has
    /// started (no file can be open, nothing is cached) there is nothing for it to do.
    pub(super) fn kernel_job(&self, job: KernelJob) {
        match self.kernel_jobs.get() {
            // The worker ends only with the session, which ends after this call.
            Some(jobs) => {
                let _ = jobs.send(job);
            }
            None => drop(job),
        }
    }

    /// Runs one call of the filesystem, recording its latency and outcome (`cairn_fs::ops`).
    pub(super) fn timed<T>(
        &self,
        kind: FsOpKind,
        call: impl FnOnce() -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        let started = Instant::now();
        let result = call();
        self.record(kind, started, 0, result.is_ok());
        result
    }

    pub(super) fn record(&self, kind: FsOpKind, started: Instant, bytes: u64, ok: bool) {
        self.fs().record_op(kind, bytes, ok, started.elapsed());
    }

    /// The attributes the kernel is given: blocks count data not yet synced, and the block
    /// size is the file's own, the granularity of SEEK_DATA and SEEK_HOLE.
    pub(super) fn attr(&self, object: u64, attrs: &InodeAttrs) -> FileAttr {
        let storage = self.fs().storage(object).unwrap_or(InodeStorage {
            allocated_bytes: 0,
            block_bytes: u64::from(REPORTED_BLOCK_BYTES),
        });
        file_attr(object, attrs, storage)
    }

    pub(super) fn entry(&self, reply: ReplyEntry, result: Result<(u64, InodeAttrs), FsError>) {
        match result {
            Ok((object, attrs)) => {
                let attr = self.attr(object, &attrs);
                self.head.looked_up(object);
                let generation = self.head.generation(object, attrs.generation);
                reply.entry(&ATTR_TTL, &attr, Generation(generation));
            }
            Err(err) => reply.error(errno(&err)),
        }
    }

    /// The creator's mode with its umask applied, unless `parent` has a default ACL (which
    /// then decides, as POSIX asks; the kernel leaves the umask to a filesystem with ACLs).
    pub(super) fn masked(&self, parent: u64, mode: u32, umask: u32) -> u32 {
        match self.fs().default_acl(parent) {
            Ok(Some(_)) => mode,
            _ => mode & !umask,
        }
    }

    /// Owner and group of a new inode made by `req` in `parent`, and the mode adjusted for a
    /// set-group-ID parent (its group and, for a directory, the bit itself pass on).
    pub(super) fn new_inode(
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
        if let Ok(parent_attrs) = self.fs().getattr(parent)
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
