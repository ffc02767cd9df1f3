//! Snapshots over NFS: a shared filesystem's snapshots, read-only, under
//! `.cairn/snapshot/<name>/` in its root, as the FUSE mount shows them (`fuse/snapdir.rs`)
//! and as ZFS's `.zfs/snapshot` does, but with handles that stay good (ZFS's give stale
//! handles and hangs over NFS: OpenZFS #13974, #5833).
//!
//! What clients see:
//! - `.cairn` can be looked up in the root whatever `snapdir` says; the root's listing shows it
//!   (last, with cookie `CONTROL_DIR_COOKIE`) only under `snapdir=visible`. A file of that name
//!   of the root's own is shadowed by it, and every change naming `.cairn` in the root fails
//!   EXIST (it exists: the control directory), as in the FUSE mount.
//! - `.cairn/snapshot` lists the snapshots live (asked of the pool at each call), by snapshot
//!   id, each entry's cookie its id + 2: stable across restarts, and a listing's place stays
//!   valid as snapshots come and go. `..` leads back up: snapshot root → `.cairn/snapshot` →
//!   `.cairn` → the root.
//! - In a snapshot, every procedure that reads works; every change is NFS3ERR_ROFS (the
//!   handle resolves, then `NfsContext::resolve` refuses it), and so is any change in `.cairn`
//!   and `.cairn/snapshot`; ACCESS never grants a change.
//!
//! Handles (`handle.rs`): a snapshot's object is named by the snapshot's id, which the pool
//! never reuses, so a handle keeps naming that snapshot across restarts and renames, and
//! once it is destroyed every handle of it is STALE, also when a snapshot of the same name
//! is taken again. `.cairn` and `.cairn/snapshot` are the dataset's id with node byte 1 or 2.
//!
//! File ids: a snapshot has its own `fsid` (`handle::fsid_of` of its id), so the Linux
//! client sees its root as a mount point (`nfs_attr_check_mountpoint`: an fsid other than
//! its superblock's marks an automount, and v3 mounts it with `nfs_submount`), and every
//! snapshot gets a device of its own: the same object number in the live filesystem and in
//! a snapshot is two files to `stat`, `diff` and `tar`. `.cairn` and `.cairn/snapshot` are
//! in the live filesystem, with file ids that have bit 63 set (object numbers stay below).
//!
//! Destroy: every read of a snapshot runs inside its gate (`gated`), which a destroy closes
//! under its readers: a call in flight finishes, every later one answers STALE, never data
//! from freed blocks. The server keeps the snapshots it has opened (`open_snapshots.rs`,
//! the least recently used let go first) so that each call does not open one anew, each with
//! the pool it came from (a pool imported again is another pool: its snapshots open anew).
//! Uses `handle.rs` and `context.rs`.

use super::context::NfsContext;
use super::handle::{
    CONTROL_DIR_FILEID, Export, Place, Resolved, SNAPSHOT_DIR_FILEID, control_resolved, gated,
};
use cairn_dataset::properties::SnapdirMode;
use cairn_engine::{Pool, SnapshotFilesystem, SnapshotIdentity};
use cairn_fs::attrs::FileKind;
use cairn_fs::{DirEntry, FsError, ROOT_OBJECT};
use cairn_nfs::nfs3::Nfs3Error;
use std::sync::Arc;

/// The control directory's name in the root of a shared filesystem.
pub const CONTROL_DIR_NAME: &[u8] = b".cairn";
/// The directory of snapshots in the control directory.
pub const SNAPSHOT_DIR_NAME: &[u8] = b"snapshot";
/// The root's listing gives `.cairn` (when visible) last, with a cookie above every entry's
/// (theirs are map keys, below 2^62, plus 3) that a client keeping cookies as signed
/// offsets (Linux) still takes as positive.
pub const CONTROL_DIR_COOKIE: u64 = i64::MAX as u64;

/// Whether `name` in `dir` is the reserved name of the control directory.
pub fn is_control_name(dir: &Resolved, name: &[u8]) -> bool {
    dir.is_live() && dir.object == dir.export.fs.root() && name == CONTROL_DIR_NAME
}

/// Whether the root lists `.cairn` (the `snapdir` property, read live).
pub fn visible(export: &Export) -> bool {
    export
        .pool
        .dataset_properties(&export.dataset)
        .is_ok_and(|properties| properties.snapdir == SnapdirMode::Visible)
}

/// The root of `export`, resolved.
fn live_root(export: &Export) -> Result<Resolved, FsError> {
    let root = export.fs.root();
    Ok(Resolved {
        attrs: export.fs.getattr(root)?,
        export: export.clone(),
        place: Place::Live,
        object: root,
    })
}

impl NfsContext {
    /// Snapshot `identity` of `pool`, open for reading: the one this server keeps, or opened
    /// now (STALE if it is gone, or is another snapshot of the name since).
    pub(super) fn open_snapshot(
        &self,
        pool: &Arc<Pool>,
        identity: &SnapshotIdentity,
    ) -> Result<Arc<SnapshotFilesystem>, Nfs3Error> {
        let key = (pool.guid(), identity.id);
        if let Some(fs) = self.snapshots.lock().get(key, pool) {
            return Ok(fs);
        }
        let fs = pool
            .snapshot_filesystem(&identity.name)
            .map_err(|_| Nfs3Error::Stale)?;
        if fs.created_txg() != identity.created_txg {
            return Err(Nfs3Error::Stale);
        }
        self.snapshots.lock().keep(key, &fs, pool);
        Ok(fs)
    }

    /// Snapshot `name` (the part after '@') of `export`, its root resolved.
    fn snapshot_root(&self, export: &Export, name: &[u8]) -> Result<Resolved, FsError> {
        let name = std::str::from_utf8(name).map_err(|_| FsError::NotFound)?;
        if name.contains('@') || name.contains('/') {
            return Err(FsError::NotFound);
        }
        let listing = export
            .pool
            .snapshot_info(&format!("{}@{name}", export.dataset))
            .map_err(|_| FsError::NotFound)?;
        let identity = SnapshotIdentity {
            id: listing.id,
            name: listing.name,
            dataset: listing.dataset,
            created_txg: listing.created_txg,
        };
        // Destroyed between the two looks: not there.
        let fs = self
            .open_snapshot(&export.pool, &identity)
            .map_err(|_| FsError::NotFound)?;
        let attrs = gated(&fs, |fs| fs.getattr(ROOT_OBJECT))?;
        Ok(Resolved {
            export: export.clone(),
            place: Place::Snapshot {
                id: identity.id,
                fs,
            },
            object: ROOT_OBJECT,
            attrs,
        })
    }

    /// What `name` in `dir` is when the answer involves the control directory (`.cairn` in
    /// the root, anything in `.cairn` and `.cairn/snapshot`, `..` of a snapshot's root);
    /// `None`: an ordinary lookup in `dir`'s filesystem.
    pub fn control_lookup(&self, dir: &Resolved, name: &[u8]) -> Option<Result<Resolved, FsError>> {
        let export = &dir.export;
        Some(match (&dir.place, name) {
            (Place::Live, _) if is_control_name(dir, name) => {
                control_resolved(export, Place::ControlDir)
            }
            (Place::Live, _) => return None,
            (Place::ControlDir | Place::SnapshotDir, b".") => Ok(dir.clone()),
            (Place::ControlDir, b"..") => live_root(export),
            (Place::ControlDir, SNAPSHOT_DIR_NAME) => control_resolved(export, Place::SnapshotDir),
            (Place::ControlDir, _) => Err(FsError::NotFound),
            (Place::SnapshotDir, b"..") => control_resolved(export, Place::ControlDir),
            (Place::SnapshotDir, name) => self.snapshot_root(export, name),
            (Place::Snapshot { .. }, b"..") if dir.object == ROOT_OBJECT => {
                // The snapshot must still be there for its parent to be asked.
                dir.with(|fs| fs.getattr(ROOT_OBJECT))
                    .and_then(|_| control_resolved(export, Place::SnapshotDir))
            }
            (Place::Snapshot { .. }, _) => return None,
        })
    }
}

/// The entries of `.cairn` or `.cairn/snapshot` (`dir`), `.` and `..` first, each with the
/// file id the client is given and its cookie; `None`: `dir` is neither.
pub fn control_listing(dir: &Resolved) -> Option<Result<Vec<DirEntry>, FsError>> {
    let entry = |name: &[u8], object, cookie| DirEntry {
        name: name.to_vec(),
        object,
        kind: FileKind::Directory,
        cookie,
    };
    let root = dir.export.fs.root();
    Some(match &dir.place {
        Place::ControlDir => Ok(vec![
            entry(b".", CONTROL_DIR_FILEID, 1),
            entry(b"..", root, 2),
            entry(SNAPSHOT_DIR_NAME, SNAPSHOT_DIR_FILEID, 3),
        ]),
        Place::SnapshotDir => {
            let prefix = format!("{}@", dir.export.dataset);
            dir.export
                .pool
                .snapshots(Some(&dir.export.dataset))
                .map_err(|_| FsError::Stale)
                .map(|mut listings| {
                    // By id, which only grows: a cookie stays valid as snapshots come and go.
                    listings.sort_by_key(|listing| listing.id);
                    let mut entries = vec![
                        entry(b".", SNAPSHOT_DIR_FILEID, 1),
                        entry(b"..", CONTROL_DIR_FILEID, 2),
                    ];
                    entries.extend(listings.iter().filter_map(|listing| {
                        let name = listing.name.strip_prefix(&prefix)?;
                        Some(entry(name.as_bytes(), ROOT_OBJECT, listing.id + 2))
                    }));
                    entries
                })
        }
        Place::Live | Place::Snapshot { .. } => return None,
    })
}

/// The root's own `.cairn` entry, for its listing when visible.
pub fn control_dir_entry() -> DirEntry {
    DirEntry {
        name: CONTROL_DIR_NAME.to_vec(),
        object: CONTROL_DIR_FILEID,
        kind: FileKind::Directory,
        cookie: CONTROL_DIR_COOKIE,
    }
}
