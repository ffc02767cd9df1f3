//! Rollback of a mounted filesystem (`FuseMount::roll_back`, which `Mounts::roll_back`
//! calls for `cairn rollback`): the mount stays, and what it shows is the snapshot's at once,
//! as `zfs rollback` of a mounted dataset.
//!
//! The steps, and why:
//! 1. The kernel writes back the pages it holds dirty (`syncfs`): writes acknowledged before
//!    the rollback reach the old head, and are discarded with it, instead of being written
//!    back into the rolled-back head later.
//! 2. Every FUSE call is stopped (`MountedHead::suspend`: those in flight end first), and
//!    what the kernel may cache is read from the old head while it is whole (`Before`): the
//!    generation of every inode the kernel holds, and the names of every directory it holds.
//! 3. The engine rolls the dataset back (`Pool::rollback`: the old `Filesystem` retired, its
//!    unsynced changes and intent log discarded, the head swapped in one durable txg) and
//!    opens the rolled-back head; the mount swaps it in (`After`): inodes the kernel holds
//!    that the new head has not, or has as another file, are marked stale (calls on them
//!    fail with EIO: `head.rs`); regular files whose size or times differ are renewed (the
//!    writeback cache makes the kernel keep its own size and times of a file it holds, so
//!    it is given the file again as a new inode, and its old one, and descriptors open on it,
//!    fail with EIO; a descriptor on a file the rollback did not change keeps working).
//! 4. Calls resume, and the kernel is told to drop what it caches (on the kernel worker,
//!    waited for before the command returns): the entries of every name whose inode
//!    changed (FUSE_NOTIFY_INVAL_ENTRY: created since the snapshot, deleted since, renamed
//!    since, or naming a stale inode), and the attributes and pages of every inode it holds
//!    (FUSE_NOTIFY_INVAL_INODE). Done after the calls resume because dropping a dirty page
//!    makes the kernel write it back first, a WRITE call that needs them.
//!
//! Descriptors open across the rollback, and why they are not all kept working as on ZFS
//! (after `zfs rollback` of a mounted dataset, a descriptor on a file that the snapshot has
//! reads the snapshot's file: the kernel's znode is reloaded). One on a file the snapshot
//! lacks, or has as another file (another generation), fails with EIO, as on ZFS. One on a
//! file the rollback left as it was keeps working. One on a file the snapshot has (same
//! object, same generation) but with another size or other times fails with EIO too, and
//! cannot be kept working safely, because of the kernel's writeback cache (on for this
//! connection, `FUSE_WRITEBACK_CACHE`, and a connection-wide flag):
//! - The descriptor pins the kernel's inode, and under the writeback cache that inode's size,
//!   mtime and ctime are the kernel's own: `fuse_change_attributes` replaces what the server
//!   answers for them with its cached values (`fuse_get_cache_mask`: STATX_SIZE, MTIME and
//!   CTIME for every regular file, opened for writing or not). FUSE_NOTIFY_INVAL_INODE drops
//!   attributes and pages but leaves `i_size`; FUSE_NOTIFY_STORE can only grow it. So the
//!   server has no way to give that inode the snapshot's size or times.
//! - Kept, the descriptor would therefore read a file of the wrong length: zeros past the
//!   snapshot's end up to the kernel's larger size (a short read under the writeback cache is a
//!   hole, not an end of file), or the snapshot's file cut at the kernel's smaller size; its
//!   writes would go where that size says (O_APPEND, extending writes), and `fstat` would show
//!   times of the discarded state, on which tools that trust size and mtime (rsync, make)
//!   would decide wrongly. Read as "the snapshot's contents", that is wrong data, worse than
//!   an error. Were the size unchanged, the contents would be right and the times still not
//!   (the path's `stat` too, since the path reaches the same kernel inode).
//! - Pages the kernel holds dirty for that inode are written back when it is invalidated
//!   (`invalidate_inode_pages2_range` launders a dirty page through a WRITE before dropping
//!   it), and at any later writeback. With the inode kept, the server could not tell such a
//!   page (data of before the rollback, left dirty past step 1's `syncfs` by a racing writer,
//!   or written through the stale descriptor's cache) from a write made after it, and would
//!   write it into the rolled-back file: discarded data silently resurrected.
//!
//! (Seen through the test below with the stale check taken out: a read through such a
//! descriptor returned the kernel's size, the snapshot's 12,388 bytes plus the 14 appended
//! after it, and a page written through it was acknowledged by fsync.) So such a file is renewed instead (`MountedHead::renew`): the kernel is given it again
//! under a new generation, takes it for a new inode with the snapshot's size and times
//! (`fuse_iget` makes the old inode bad once it sees the new generation), and every call on
//! the old inode, the dirty pages' WRITEs included, is answered EIO before it reaches the
//! filesystem (`head.rs`, `enter`). A descriptor open across the rollback on a changed file
//! thus fails with EIO on every read, write and fsync, never returning data other than the
//! snapshot's and never writing into the rolled-back file (`crates/cairn/tests/
//! fuse_rollback.rs` pins both, through a sync and a remount). Keeping it working needs the
//! writeback cache off for the mount (every write(2) a round trip), or a kernel that lets a
//! server reset a cached inode's size and times.
//!
//! Invariant: no call sees two heads, and the kernel is left caching nothing of the old head
//! that differs from the new one. Uses `head.rs`, `convert.rs` and `mount.rs`'s `FuseMount`;
//! `mounts.rs` calls it.

use super::convert::ino_of;
use super::mount::FuseMount;
use cairn_engine::{EngineError, Pool};
use cairn_fs::Filesystem;
use cairn_fs::attrs::{FileKind, InodeAttrs};
use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

/// Longest wait for the kernel to take the invalidations (it answers each at once; dirty
/// pages it writes back first are answered by the event loops). Past it the command returns
/// and the rest still happens.
const INVALIDATE_WAIT: Duration = Duration::from_secs(60);

/// What the kernel may cache of the old head, read before the rollback.
struct Before {
    /// Each inode the kernel holds, with its attributes in the old head (none: gone there).
    attrs: BTreeMap<u64, Option<InodeAttrs>>,
    /// The names of each directory the kernel holds, with the inode each names.
    names: BTreeMap<u64, HashMap<Vec<u8>, u64>>,
}

impl Before {
    fn gather(fs: &Filesystem, known: &[u64]) -> Before {
        let mut attrs = BTreeMap::new();
        let mut names = BTreeMap::new();
        for &object in known {
            attrs.insert(object, fs.getattr(object).ok());
            if let Ok(listing) = fs.names_of(object) {
                names.insert(object, listing.into_iter().collect());
            }
        }
        Before { attrs, names }
    }
}

/// What the kernel is to drop after the swap.
#[derive(Default)]
struct After {
    /// Inodes it holds that the new head has not, or has as another file.
    stale: Vec<u64>,
    /// Regular files it holds that the new head has with another size or other times
    /// (`MountedHead::renew`).
    renewed: Vec<u64>,
    /// `(directory, name)` of every cached name that may have changed.
    entries: Vec<(u64, Vec<u8>)>,
    /// Every inode it holds: attributes and pages dropped.
    inodes: Vec<u64>,
}

impl After {
    fn compare(before: &Before, fs: &Filesystem) -> After {
        let mut after = After::default();
        for (&object, old) in &before.attrs {
            after.inodes.push(object);
            // One gone in the old head already has no open file and no name there: the kernel
            // finds it again by name, with the generation it has now.
            let Some(old) = old else {
                continue;
            };
            match fs.getattr(object) {
                Ok(new) if new.generation == old.generation => {
                    if new.kind == FileKind::File
                        && (new.size, new.mtime, new.ctime) != (old.size, old.mtime, old.ctime)
                    {
                        after.renewed.push(object);
                    }
                }
                _ => after.stale.push(object),
            }
        }
        let changed = |object: &u64| after.stale.contains(object) || after.renewed.contains(object);
        for (&dir, old_names) in &before.names {
            let same_dir = !after.stale.contains(&dir);
            let new_names: HashMap<Vec<u8>, u64> = match same_dir {
                true => fs.names_of(dir).unwrap_or_default().into_iter().collect(),
                false => HashMap::new(),
            };
            for (name, object) in old_names {
                if new_names.get(name) != Some(object) || changed(object) {
                    after.entries.push((dir, name.clone()));
                }
            }
            for name in new_names.keys() {
                if !old_names.contains_key(name) {
                    after.entries.push((dir, name.clone()));
                }
            }
        }
        after
    }
}

impl FuseMount {
    /// Rolls the mounted dataset back to `snapshot` (`dataset@name`) under the mount (see
    /// the module doc); `destroy_newer` and `force` as `Pool::rollback` takes them. Returns
    /// once the rollback is durable and the kernel has dropped what it cached.
    pub(super) fn roll_back(
        &self,
        pool: &Pool,
        snapshot: &str,
        destroy_newer: bool,
        force: bool,
    ) -> Result<(), EngineError> {
        // 1. A mount that cannot be written back loses nothing by it: its dirty pages are
        // dropped with the invalidation below, or written into the new head.
        if let Ok(dir) = std::fs::File::open(&self.mountpoint) {
            let _ = rustix::fs::syncfs(&dir);
        }
        // 2.
        let mut current = self.head.suspend();
        let old = current.clone();
        let dataset = old.name().to_string();
        let before = Before::gather(&old, &self.head.known());
        // 3.
        let rolled = pool.rollback(snapshot, destroy_newer, force);
        let new = match pool.filesystem(&dataset) {
            Ok(new) => new,
            Err(err) => return rolled.and(Err(err)),
        };
        if Arc::ptr_eq(&new, &old) {
            // Refused before anything changed.
            return rolled;
        }
        let after = After::compare(&before, &new);
        old.observe_own_changes(None);
        new.observe_own_changes(Some(self.own_changes.clone()));
        *current = new;
        self.head.mark_stale(&after.stale);
        self.head.renew(&after.renewed);
        drop(current);
        // 4.
        self.invalidate(after);
        rolled
    }

    /// Has the kernel drop the entries and inodes `after` names, and waits until it has.
    fn invalidate(&self, after: After) {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let sent = self.kernel_jobs.send(Box::new(move |notifier| {
            // ENOENT: the kernel had nothing cached under that name, or of that inode.
            for (dir, name) in &after.entries {
                let _ = notifier.inval_entry(ino_of(*dir), OsStr::from_bytes(name));
            }
            for object in &after.inodes {
                let _ = notifier.inval_inode(ino_of(*object), 0, 0);
            }
            let _ = done.send(());
        }));
        // The worker ends with the session: nothing is cached once it has.
        if sent.is_ok() {
            let _ = finished.recv_timeout(INVALIDATE_WAIT);
        }
    }
}
