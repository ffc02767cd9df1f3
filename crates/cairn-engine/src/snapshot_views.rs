//! The pool's filesystem snapshots open for browsing, and the gate each is read through
//! (`SnapshotFilesystem`): the types `snapshot_fs.rs` hands out and the pool keeps. Why the
//! gate, and its invariants: `snapshot_fs.rs`'s module doc. Uses no sibling module, so the
//! pool's handle (`pool.rs`) can hold them.

use cairn_fs::{Filesystem, FsError};
use parking_lot::RwLock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Weak;

/// A filesystem snapshot open for reading, until it is destroyed (see the module doc).
pub struct SnapshotFilesystem {
    pub(crate) name: String,
    pub(crate) created_txg: u64,
    pub(crate) fs: RwLock<Option<Filesystem>>,
}

impl SnapshotFilesystem {
    /// `dataset@snapshot`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The txg the snapshot was taken in: with the name, what tells it from a snapshot of the
    /// same name taken after it was destroyed.
    pub fn created_txg(&self) -> u64 {
        self.created_txg
    }

    /// Runs `call` on the snapshot's filesystem, which stays readable until `call` returns;
    /// `NotFound` once the snapshot is destroyed.
    pub fn with<T>(
        &self,
        call: impl FnOnce(&Filesystem) -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        match &*self.fs.read() {
            Some(fs) => call(fs),
            None => Err(FsError::NotFound),
        }
    }

    /// Whether it is still open (not destroyed).
    pub fn is_open(&self) -> bool {
        self.fs.read().is_some()
    }

    /// Waits for the calls in flight, then refuses every later one.
    pub(crate) fn close(&self) {
        *self.fs.write() = None;
    }
}

/// The pool's open filesystem snapshots, by full name, and the names being destroyed.
#[derive(Default)]
pub(crate) struct SnapshotViews {
    pub(crate) open: BTreeMap<String, Weak<SnapshotFilesystem>>,
    pub(crate) destroying: BTreeSet<String>,
}

/// Names in `SnapshotViews::destroying` for as long as it lives.
pub(crate) struct DestroyGuard<'a> {
    pub(crate) views: &'a parking_lot::Mutex<SnapshotViews>,
    pub(crate) names: Vec<String>,
}

impl Drop for DestroyGuard<'_> {
    fn drop(&mut self) {
        let mut views = self.views.lock();
        for name in &self.names {
            views.destroying.remove(name);
        }
    }
}
