//! What a rollback of a filesystem that is in use needs of the filesystem (the command is
//! cairn-engine's `Pool::rollback`; the mount's side is cairn-frontend's `fuse/rollback.rs`).
//!
//! Design: a `Filesystem` serves one head, one object set, for its whole life; a rollback
//! does not re-point it. The engine retires the filesystem of the old head (`retire`) and
//! opens a new one over the rolled-back head, which takes over from the old what must
//! outlive the swap (`carry_over`, `adopt`): the inode numbers handed out (so no number
//! the old head gave a file is given to another while the old one may still be named by a
//! client), and the opens of files that are the same file in both heads (same object, same
//! generation), so that a file unlinked while open stays until its last close.
//!
//! Invariants: once retired, every call fails with `Stale` (EIO) before it reads or changes
//! anything: the old head's object set is no longer synced (what was written to it since the
//! rollback's sync is discarded, never written out) and its blocks born after the snapshot
//! are being freed, so a read of it could see another file's data; its intent log was
//! released with it, so nothing more is committed to it (`commit_log` checks too), and no
//! record of it is ever replayed onto the new head (whose log header the rollback's txg
//! zeroes). A front end that serves the filesystem to clients (the FUSE mount) stops its calls
//! before the rollback and swaps in the new filesystem after (the retire fence is for every
//! other holder of the old handle, which opens the dataset again).

use crate::{FIRST_INODE_OBJECT, Filesystem, FsError};
use std::sync::atomic::Ordering;

/// An open inode of a retired head: what the head that replaces it needs to keep it open if
/// it is the same file there (`Filesystem::adopt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenInode {
    pub object: u64,
    /// Its generation in the old head (the txg that made it).
    pub generation: u64,
    /// Opens of it a front end has not released.
    pub opens: u64,
}

/// What a filesystem opened over a rolled-back head takes over from the one it replaces
/// (`Filesystem::carry_over`).
#[derive(Debug, Clone, Default)]
pub struct CarriedOver {
    /// The old filesystem's next inode number: the new one hands out none below it.
    pub next_object: u64,
    pub open_inodes: Vec<OpenInode>,
}

impl Filesystem {
    /// Fails with `Stale` once the filesystem is retired.
    pub(crate) fn check_current(&self) -> Result<(), FsError> {
        if self.retired.load(Ordering::Acquire) {
            return Err(FsError::Stale);
        }
        Ok(())
    }

    /// Whether a rollback retired this filesystem (`retire`).
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    /// What a filesystem over the head that replaces this one must take over (read before
    /// `retire`): the next inode number and the open inodes with their generations.
    pub fn carry_over(&self) -> CarriedOver {
        let opens: Vec<(u64, u64)> = self
            .opens
            .lock()
            .iter()
            .map(|(object, count)| (*object, *count))
            .collect();
        let open_inodes = opens
            .into_iter()
            .filter_map(|(object, opens)| {
                let attrs = self.getattr(object).ok()?;
                Some(OpenInode {
                    object,
                    generation: attrs.generation,
                    opens,
                })
            })
            .collect();
        CarriedOver {
            next_object: self.next_object.load(Ordering::Relaxed),
            open_inodes,
        }
    }

    /// Retires the filesystem: from now on every call fails with `Stale` (see the module
    /// doc). A call already past its check finishes; a front end that must be sure none is
    /// left stops its own calls first.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Takes over what `carried` says of the filesystem this one replaces (before it is
    /// shared and before its delete queue is drained): inode numbers from its next one on,
    /// and the opens of each inode that is the same file here (same object and generation).
    /// An inode the old head had open that is another file here, or none, is not opened.
    pub fn adopt(&self, carried: &CarriedOver) {
        self.next_object.fetch_max(
            carried.next_object.max(FIRST_INODE_OBJECT),
            Ordering::Relaxed,
        );
        for open in &carried.open_inodes {
            let same = self
                .getattr(open.object)
                .is_ok_and(|attrs| attrs.generation == open.generation);
            if same {
                *self.opens.lock().entry(open.object).or_insert(0) += open.opens;
            }
        }
    }
}

impl Filesystem {
    /// The names in directory `dir` and the inode each names, read without touching its
    /// access time: what a front end compares across a rollback to find the names its
    /// clients cache that changed. `NotFound` if `dir` is no directory here.
    pub fn names_of(&self, dir: u64) -> Result<Vec<(Vec<u8>, u64)>, FsError> {
        let attrs = self.getattr(dir)?;
        if attrs.kind != crate::attrs::FileKind::Directory {
            return Err(FsError::NotFound);
        }
        let _guard = self.stripe(dir).read();
        let mut names = Vec::new();
        let mut failure = None;
        cairn_object::map::HashedMap::new(&self.objset, dir).for_each_from(0, |entry| {
            match crate::decode_entry_value(&entry.value) {
                Ok((object, _)) => {
                    names.push((entry.name.clone(), object));
                    true
                }
                Err(err) => {
                    failure = Some(err);
                    false
                }
            }
        })?;
        failure.map_or(Ok(names), Err)
    }
}
