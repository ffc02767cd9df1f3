//! Directories removed while the kernel may still hold them (`RemovedDirs`): `getattr` of
//! one answers its last attributes with no links, as ext4 does, until the kernel forgets
//! the inode.
//!
//! Invariant: at most `REMOVED_DIRS_MAX` are kept, the oldest dropped first. Filled by
//! `rmdir` and `rename` and emptied by `forget` (`ops.rs`); uses no sibling.

use cairn_fs::attrs::InodeAttrs;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most removed directories remembered for the kernel (`RemovedDirs`).
const REMOVED_DIRS_MAX: usize = 4096;

/// Directories removed (rmdir, or replaced by a rename) that the kernel may still hold open:
/// their last attributes with no links, until the kernel forgets the inode. Directories need
/// no open call here (FUSE_NO_OPENDIR_SUPPORT), so the filesystem frees one at once; without
/// this, `fstat` of a descriptor still open on it would fail with ENOENT where ext4 shows
/// a link count of 0. Bounded: past `REMOVED_DIRS_MAX` the oldest is dropped.
#[derive(Default)]
pub(super) struct RemovedDirs {
    dirs: parking_lot::Mutex<std::collections::BTreeMap<u64, (u64, InodeAttrs)>>,
    next_order: AtomicU64,
}

impl RemovedDirs {
    pub(super) fn removed(&self, object: u64, mut attrs: InodeAttrs) {
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

    pub(super) fn get(&self, object: u64) -> Option<InodeAttrs> {
        self.dirs
            .lock()
            .get(&object)
            .map(|(_, attrs)| attrs.clone())
    }

    pub(super) fn forgotten(&self, object: u64) {
        self.dirs.lock().remove(&object);
    }
}
