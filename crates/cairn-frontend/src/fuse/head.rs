//! The head a mount serves (`MountedHead`): the dataset's `Filesystem`, swappable so that a
//! rollback shows the snapshot's state through the mount without unmounting
//! (`rollback.rs`), and what the kernel knows of it.
//!
//! Why a swappable handle rather than a filesystem re-pointed in place: a `cairn_fs::Filesystem`
//! serves one head for its life (its locks, open counts and intent log belong to that head);
//! the engine retires the old one and opens a new one over the rolled-back head. The mount
//! swaps between its calls: every FUSE call enters (`enter`) under the read side of one lock
//! and uses the filesystem it found there for its whole length; a rollback takes the write
//! side, so it starts once the calls in flight have ended and no call starts until the new
//! filesystem is in. So no call ever mixes the two heads, and none reaches the old head after
//! the swap (whose blocks born after the snapshot are being freed).
//!
//! What the kernel knows: the inodes it holds, with the lookups it counts for each (every
//! entry it is given adds one, FORGET takes them away: `looked_up`, `forgotten`), so a
//! rollback can have exactly those dropped from its caches; and the inodes a rollback left
//! stale (`mark_stale`): ones the kernel holds that the rolled-back head has not, or has as
//! another file (another generation), or has with another size or other times (`renew`: the
//! kernel's writeback cache keeps those of a regular file it holds as its own, so the file
//! is given to it again as a new inode, under a new generation). A call on a stale inode fails with EIO, as on ZFS,
//! never reaching another file's data; it stops being stale when the kernel lets it go, or is
//! given the inode's new incarnation (it then drops the old one itself: FUSE checks the
//! generation).
//!
//! Invariants: a call holds `enter`'s guard for its whole length and asks for the
//! filesystem through `fs` (a recursive read, which never waits for a rollback waiting on
//! the call itself). Uses `convert.rs` and `snapdir.rs`'s node numbering; `adapter.rs` holds
//! one, and `mount.rs` and `rollback.rs` share it.

use super::convert::object_of;
use super::snapdir::{Node, node_of};
use cairn_fs::Filesystem;
use fuser::{Errno, INodeNo};
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// The filesystem a mount serves and what the kernel knows of it (see the module doc).
pub(super) struct MountedHead {
    fs: RwLock<Arc<Filesystem>>,
    /// Lookups the kernel counts, per object of the head.
    known: Mutex<HashMap<u64, u64>>,
    /// Objects the kernel holds that a rollback made stale.
    stale: Mutex<HashSet<u64>>,
    /// Files a rollback changed under the kernel, with how many times: the kernel is given
    /// them under a new generation (`generation`), so it takes them for new inodes.
    renewed: Mutex<HashMap<u64, u64>>,
}

/// Mixed into the generation the kernel is given, once per renewal: odd, so each renewal
/// changes the low 32 bits, the part the kernel compares (its `i_generation` is 32 bits).
const RENEWAL_MIX: u64 = 0x9e37_79b9;

/// A call entered on the head (`MountedHead::enter`): no rollback while it is held.
pub(super) type Entered<'a> = RwLockReadGuard<'a, Arc<Filesystem>>;

impl MountedHead {
    pub(super) fn new(fs: Arc<Filesystem>) -> MountedHead {
        MountedHead {
            fs: RwLock::new(fs),
            known: Mutex::default(),
            stale: Mutex::default(),
            renewed: Mutex::default(),
        }
    }

    /// Enters a call about `inos`: waits while a rollback runs, then fails with EIO if one of
    /// them is a stale inode of the head.
    pub(super) fn enter(&self, inos: &[INodeNo]) -> Result<Entered<'_>, Errno> {
        let entered = self.fs.read();
        if self.any_stale(inos) {
            return Err(Errno::EIO);
        }
        Ok(entered)
    }

    /// Whether one of `inos` is a stale inode of the head.
    pub(super) fn any_stale(&self, inos: &[INodeNo]) -> bool {
        let stale = self.stale.lock();
        !stale.is_empty()
            && inos.iter().any(|ino| {
                matches!(node_of(*ino), Node::Head(_)) && stale.contains(&object_of(*ino))
            })
    }

    /// The filesystem now (in a call: the one it entered with).
    pub(super) fn fs(&self) -> Arc<Filesystem> {
        self.fs.read_recursive().clone()
    }

    /// The kernel was given an entry for `object` (its lookup count grows by one). Given
    /// the object's incarnation in the head now, the kernel drops a stale one itself.
    pub(super) fn looked_up(&self, object: u64) {
        *self.known.lock().entry(object).or_insert(0) += 1;
        self.stale.lock().remove(&object);
    }

    /// The kernel let `lookups` of its lookups of `object` go (FORGET).
    pub(super) fn forgotten(&self, object: u64, lookups: u64) {
        let mut known = self.known.lock();
        let Some(count) = known.get_mut(&object) else {
            return;
        };
        *count = count.saturating_sub(lookups);
        if *count == 0 {
            known.remove(&object);
            self.stale.lock().remove(&object);
        }
    }

    /// Every object the kernel holds (the root, which it never looks up, included).
    pub(super) fn known(&self) -> Vec<u64> {
        let mut objects: Vec<u64> = self.known.lock().keys().copied().collect();
        if !objects.contains(&cairn_fs::ROOT_OBJECT) {
            objects.push(cairn_fs::ROOT_OBJECT);
        }
        objects.sort_unstable();
        objects
    }

    /// Stops every call for a rollback (those in flight end first); the guard swaps the
    /// filesystem.
    pub(super) fn suspend(&self) -> RwLockWriteGuard<'_, Arc<Filesystem>> {
        self.fs.write()
    }

    /// The generation the kernel is given for `object`, whose own is `generation`: changed
    /// by each renewal (`renew`).
    pub(super) fn generation(&self, object: u64, generation: u64) -> u64 {
        let renewals = self.renewed.lock().get(&object).copied().unwrap_or(0);
        generation ^ (renewals.wrapping_mul(RENEWAL_MIX) & u64::from(u32::MAX))
    }

    /// Renews `objects`: files that are still there but whose size or times a rollback
    /// changed. With the writeback cache the kernel keeps a regular file's size and times as
    /// its own while it holds the inode (it would never take the snapshot's), so the inode
    /// it holds is made stale and the file is given to it again under a new generation, as a
    /// new inode (it drops the old one itself when it sees it).
    pub(super) fn renew(&self, objects: &[u64]) {
        let mut renewed = self.renewed.lock();
        for object in objects {
            *renewed.entry(*object).or_insert(0) += 1;
        }
        drop(renewed);
        self.mark_stale(objects);
    }

    /// Marks `objects` stale (see the module doc); only those the kernel still holds.
    pub(super) fn mark_stale(&self, objects: &[u64]) {
        let known = self.known.lock();
        let mut stale = self.stale.lock();
        stale.extend(objects.iter().filter(|object| known.contains_key(object)));
    }
}
