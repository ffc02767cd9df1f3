//! The writeback and open policy: how an open file is served (through the kernel's
//! writeback cache or direct, `open_flags`), when the cache is safe (`writeback_safe`: not
//! `sync=always`, and room for all the kernel may hold back), and what is done near the
//! dataset's limit: cached writers stopped before anything they were told was written could
//! be refused (`stop_cached_writers_if_short`, `stopped_error`), refused pages dropped
//! (`drop_refused_pages`). The module doc (`mod.rs`, "Writes") tells the whole story.
//!
//! Invariants: what is decided at open stays for that descriptor (its handle says it,
//! `CACHED_WRITER_FH_BIT`); a file's cached writers are stopped once the dataset's room is
//! less than the kernel may hold acknowledged (`acknowledged_max_bytes`). An `impl` of
//! `adapter.rs`'s `FuseAdapter`, using `convert.rs` and `writers.rs`; `ops.rs` calls it and
//! `mount.rs` sizes the headroom with these constants.

use super::adapter::FuseAdapter;
use super::convert::errno;
use super::writers::CACHED_WRITER_FH_BIT;
use cairn_fs::SyncMode;
use fuser::{Errno, FileHandle, FopenFlags, INodeNo};
use std::sync::atomic::Ordering;

/// Least room a dataset must have for a file opened for writing to go through the kernel's
/// writeback cache (`FuseAdapter::open_flags`). The kernel holds at most its per-mount dirty
/// limit of such writes unanswered (the mount's bdi `max_bytes`, ~45 MB here: 1% of the
/// machine's dirty threshold); the headroom is the larger of this and four times that limit.
pub(super) const WRITEBACK_HEADROOM_MIN_BYTES: u64 = 128 << 20;
/// Headroom over the kernel's per-mount dirty limit (see `WRITEBACK_HEADROOM_MIN_BYTES`).
pub(super) const WRITEBACK_HEADROOM_DIRTY_LIMITS: u64 = 4;
/// What the kernel may have acknowledged through the writeback cache and not yet sent, over
/// its per-mount dirty limit: writers overshoot the limit a little between the kernel's
/// checks, and pages being written back count apart.
pub(super) const ACKNOWLEDGED_SLACK_BYTES: u64 = 8 << 20;
/// `ACKNOWLEDGED_SLACK_BYTES` plus the dirty limit, when the kernel does not say its limit.
pub(super) const ACKNOWLEDGED_DEFAULT_BYTES: u64 = 64 << 20;

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
    pub(super) fn open_flags(&self, object: u64, open_flags: i32) -> (FopenFlags, FileHandle) {
        // The handle's top bit is the cache mark; an object number never reaches it.
        debug_assert_eq!(
            object & CACHED_WRITER_FH_BIT,
            0,
            "object {object} too large"
        );
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
        if self.fs().sync_mode() == SyncMode::Always {
            return false;
        }
        let (_, available) = (self.space)();
        available >= self.headroom_bytes.load(Ordering::Relaxed)
    }

    /// After a refused writeback: has the kernel drop the cached pages of `ino` from
    /// `offset` for `len` bytes (on the kernel worker), so that what the pool did not take is
    /// not read back from the cache.
    pub(super) fn drop_refused_pages(&self, ino: INodeNo, offset: u64, len: usize) {
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
    pub(super) fn stop_cached_writers_if_short(&self, ino: INodeNo, object: u64) {
        let margin = self.acknowledged_max_bytes.load(Ordering::Relaxed);
        if self.stopped_writers.lock().contains_key(&object) {
            return;
        }
        let (_, available) = (self.space)();
        if available >= margin {
            return;
        }
        let Some(refusal) = self.fs().space_refusal(margin) else {
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
    pub(super) fn stopped_error(&self, object: u64) -> Option<Errno> {
        let code = *self.stopped_writers.lock().get(&object)?;
        let margin = self.acknowledged_max_bytes.load(Ordering::Relaxed);
        let (_, available) = (self.space)();
        if available >= margin {
            self.stopped_writers.lock().remove(&object);
            return None;
        }
        Some(Errno::from_i32(code))
    }
}
