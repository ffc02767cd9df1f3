//! Snapshots of filesystems opened for browsing (`Pool::snapshot_filesystem`): what a mount
//! shows under `.cairn/snapshot/<name>/` (cairn-frontend's `fuse/snapdir.rs`). A snapshot of a
//! filesystem opens as a read-only `cairn_fs::Filesystem` over the snapshot's object set:
//! every change is refused with `ReadOnly` (EROFS) by the filesystem itself, and access times
//! are not updated (`FsConfig::readonly`).
//!
//! Why a gate around the filesystem (`SnapshotFilesystem`): unlike a volume snapshot exported
//! over NBD (`snapshot_volume`, whose destroy is refused while it is open), a snapshot browsed
//! through a mount is destroyed under its readers, as ZFS unmounts `.zfs/snapshot/<name>` on
//! destroy. Its blocks are then freed and may be reused by the next txgs, so a reader must
//! never reach them afterwards: it would read another file's data, or fail a checksum.
//!
//! Invariants:
//! - Every use of a snapshot's filesystem runs under the gate's read lock (`with`); a destroy
//!   takes the write lock and empties the gate (`close`) before it is queued for the sync, so a
//!   read in flight finishes first and every later one gets `NotFound` (ENOENT). Nothing reads
//!   a destroyed snapshot's blocks after the destroy's txg.
//! - A snapshot being destroyed cannot be opened again meanwhile: its name is in
//!   `SnapshotViews::destroying` from before the gates close until the destroy returns.
//! - Open snapshots are kept weakly: only their users (mounts) keep them in memory.

use crate::EngineError;
use crate::pool::Pool;
use crate::snapshot_views::{DestroyGuard, SnapshotFilesystem};
use cairn_dataset::{DatasetError, DatasetKind, SnapshotName};
use cairn_fs::{Filesystem, FsConfig};
use parking_lot::RwLock;
use std::sync::{Arc, Weak};

impl Pool {
    /// Snapshot `name` (`dataset@snapshot`) of a filesystem, open read-only; shared while
    /// open. A destroy of the snapshot closes it under its users (`with` then answers
    /// `NotFound`).
    pub fn snapshot_filesystem(&self, name: &str) -> Result<Arc<SnapshotFilesystem>, EngineError> {
        let parsed = SnapshotName::parse(name)?;
        {
            let views = self.snapshot_filesystems.lock();
            if views.destroying.contains(name) {
                return Err(DatasetError::NoSuchDataset(name.to_string()).into());
            }
            if let Some(open) = views.open.get(name).and_then(Weak::upgrade) {
                return Ok(open);
            }
        }
        let properties = self
            .core
            .directory
            .lock()
            .properties_of_kind(&parsed.dataset, DatasetKind::Filesystem)?;
        let (_, created_txg) = self.snapshot_root(name)?;
        let objset = self.snapshot_objset(name)?;
        let config = FsConfig {
            recordsize_bytes: properties.recordsize_bytes,
            readonly: true,
            sync: properties.sync,
            atime: properties.atime,
        };
        let fs = Filesystem::open(name.to_string(), objset, self.readers_engine(), config)?;
        let opened = Arc::new(SnapshotFilesystem {
            name: name.to_string(),
            created_txg,
            fs: RwLock::new(Some(fs)),
        });
        let mut views = self.snapshot_filesystems.lock();
        // Destroyed while it was being opened: the destroy closed the others, this one too.
        if views.destroying.contains(name)
            || self.snapshot_root(name).map(|(_, txg)| txg).ok() != Some(created_txg)
        {
            return Err(DatasetError::NoSuchDataset(name.to_string()).into());
        }
        // Another caller opened it meanwhile: one filesystem per snapshot.
        if let Some(open) = views.open.get(name).and_then(Weak::upgrade) {
            return Ok(open);
        }
        views.open.retain(|_, open| open.strong_count() > 0);
        views.open.insert(name.to_string(), Arc::downgrade(&opened));
        Ok(opened)
    }

    /// Before snapshots `names` are destroyed: none can be opened until the returned guard is
    /// dropped, and those open are closed (their calls in flight finished first).
    pub(crate) fn close_snapshot_filesystems(&self, names: &[String]) -> DestroyGuard<'_> {
        let closing: Vec<Arc<SnapshotFilesystem>> = {
            let mut views = self.snapshot_filesystems.lock();
            names
                .iter()
                .filter_map(|name| {
                    views.destroying.insert(name.clone());
                    views.open.remove(name).and_then(|open| open.upgrade())
                })
                .collect()
        };
        // Outside the map's lock: a close waits for the readers of that snapshot.
        for open in closing {
            open.close();
        }
        DestroyGuard {
            views: &self.snapshot_filesystems,
            names: names.to_vec(),
        }
    }
}
