//! File handles that survive restarts, and the exports they lead into.
//!
//! A handle is 36 bytes: `b"cN"`, a version byte (1), a node byte, then big-endian the
//! pool's guid, an id, the object number and the object's generation (cairn-fs has no
//! separate generation counter: `InodeAttrs::generation` is the txg that created the inode).
//! The id is a dataset's (`Pool::dataset_id`) or a snapshot's (`SnapshotListing::id`): both
//! are drawn from one counter of the pool, kept across renames and imports and never reused,
//! so an id names one dataset or one snapshot for the pool's whole life, and resolution asks
//! the pool which has it. The node byte (0 in every handle made before snapshots were served)
//! says what the handle names in the dataset: 0 an object (of the dataset, or of the snapshot
//! the id names), 1 its `.cairn` directory, 2 `.cairn/snapshot` (`snapdir.rs`); any other
//! value does not parse.
//!
//! Nothing in a handle depends on the server process, so it resolves after a restart. An
//! object number can be used again after its inode is freed (across imports), but the new
//! inode has a later creation txg, so the old handle's generation no longer matches: STALE,
//! never another file's contents. A handle of a deleted object, of a dataset gone or no longer
//! shared (`sharenfs=off`), of a snapshot destroyed (also when one of the same name was taken
//! since: it has another id) or of a pool not served is STALE too; one that does not parse is
//! BADHANDLE.
//!
//! Exports: every filesystem dataset of a served pool whose `sharenfs` is not off, mounted by
//! the path `/POOL/DATASET`, or a directory below it by `/POOL/DATASET/DIR` (MOUNT MNT); its
//! `sharenfs` options, read at every call (`Export::share`), also say which clients may do
//! what in it and in its snapshots, and whether root is squashed (`access.rs`). A handle
//! resolves to a `Resolved`: the export, where in it (`Place`: the live filesystem, the
//! control directory, or a snapshot read through its gate) and the object's attributes. Only
//! the live filesystem can be changed: `resolve` answers ROFS for the rest, `resolve_any`
//! resolves all (the procedures that only read). Keeps the control directory's places and
//! the gate a snapshot is read through, which `snapdir.rs` (above it) lists and opens. Uses
//! `context.rs` and `convert.rs`.

use super::context::NfsContext;
use super::convert::{fattr, nfs_error};
use cairn_dataset::DatasetProperties;
use cairn_dataset::properties::ShareNfs;
use cairn_engine::{Pool, SnapshotFilesystem};
use cairn_fs::attrs::InodeAttrs;
use cairn_fs::{Filesystem, FsError, InodeStorage};
use cairn_nfs::mount::MountError;
use cairn_nfs::nfs3::{Fattr3, FileHandle, Nfs3Error};
use std::sync::Arc;

const HANDLE_MAGIC: [u8; 2] = *b"cN";
const HANDLE_VERSION: u8 = 1;
/// Bytes of a handle.
pub const HANDLE_BYTES: usize = 36;

/// What a handle names in its dataset (its node byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandleNode {
    /// An object of the dataset or snapshot the id names.
    Object = 0,
    /// `.cairn` in the dataset's root.
    ControlDir = 1,
    /// `.cairn/snapshot`.
    SnapshotDir = 2,
}

impl HandleNode {
    fn of_byte(byte: u8) -> Option<HandleNode> {
        match byte {
            0 => Some(HandleNode::Object),
            1 => Some(HandleNode::ControlDir),
            2 => Some(HandleNode::SnapshotDir),
            _ => None,
        }
    }
}

/// What a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleParts {
    pub pool_guid: u64,
    /// A dataset's id, or a snapshot's (`Object` nodes only).
    pub dataset_id: u64,
    pub node: HandleNode,
    pub object: u64,
    pub generation: u64,
}

impl HandleParts {
    pub fn encode(&self) -> FileHandle {
        let mut bytes = Vec::with_capacity(HANDLE_BYTES);
        bytes.extend_from_slice(&HANDLE_MAGIC);
        bytes.push(HANDLE_VERSION);
        bytes.push(self.node as u8);
        for value in [
            self.pool_guid,
            self.dataset_id,
            self.object,
            self.generation,
        ] {
            bytes.extend_from_slice(&value.to_be_bytes());
        }
        // 36 bytes: within the protocol's 64 (FileHandle::new refuses only longer ones).
        FileHandle::new(bytes).unwrap_or_else(|_| FileHandle::default())
    }

    pub fn decode(handle: &FileHandle) -> Option<HandleParts> {
        let bytes = handle.as_bytes();
        if bytes.len() != HANDLE_BYTES || bytes[..2] != HANDLE_MAGIC || bytes[2] != HANDLE_VERSION {
            return None;
        }
        let at = |i: usize| {
            let start = 4 + 8 * i;
            u64::from_be_bytes(bytes[start..start + 8].try_into().unwrap_or([0; 8]))
        };
        Some(HandleParts {
            pool_guid: at(0),
            dataset_id: at(1),
            node: HandleNode::of_byte(bytes[3])?,
            object: at(2),
            generation: at(3),
        })
    }
}

/// One shared filesystem, as a call reaches it.
#[derive(Clone)]
pub struct Export {
    pub pool: Arc<Pool>,
    pub dataset: String,
    pub pool_guid: u64,
    pub dataset_id: u64,
    pub fs: Arc<Filesystem>,
    /// Its `sharenfs`, read when the call reached it: who may do what (`access.rs`).
    pub share: ShareNfs,
}

/// The `fsid` clients see for dataset or snapshot `id` of the pool with `pool_guid`: stable
/// across restarts, and different for every dataset and snapshot of a pool (their ids are).
pub fn fsid_of(pool_guid: u64, id: u64) -> u64 {
    pool_guid.rotate_left(32) ^ id
}

impl Export {
    /// The `fsid` clients see: datasets apart, stable across restarts.
    pub fn fsid(&self) -> u64 {
        fsid_of(self.pool_guid, self.dataset_id)
    }

    pub fn handle(&self, object: u64, attrs: &InodeAttrs) -> FileHandle {
        HandleParts {
            pool_guid: self.pool_guid,
            dataset_id: self.dataset_id,
            node: HandleNode::Object,
            object,
            generation: attrs.generation,
        }
        .encode()
    }

    pub fn fattr(&self, object: u64, attrs: &InodeAttrs) -> Fattr3 {
        let storage = self.fs.storage(object).unwrap_or(InodeStorage {
            allocated_bytes: 0,
            block_bytes: 4096,
        });
        fattr(object, attrs, storage, self.fsid())
    }

    /// The attributes of `object` now, if it can be read (post-operation attributes).
    pub fn post_attr(&self, object: u64) -> Option<Fattr3> {
        let attrs = self.fs.getattr(object).ok()?;
        Some(self.fattr(object, &attrs))
    }

    /// The dataset's size and room (FSSTAT).
    pub fn space(&self) -> (u64, u64) {
        self.pool.filesystem_space(&self.dataset).unwrap_or((0, 0))
    }
}

/// Where in an export a resolved handle is.
#[derive(Clone)]
pub enum Place {
    /// The shared filesystem itself.
    Live,
    /// `.cairn` in its root.
    ControlDir,
    /// `.cairn/snapshot`.
    SnapshotDir,
    /// Snapshot `id` of it, read through its gate (`SnapshotFilesystem::with`).
    Snapshot {
        id: u64,
        fs: Arc<SnapshotFilesystem>,
    },
}

/// A handle resolved: the export, where in it, the object and its attributes now (for
/// `.cairn` and `.cairn/snapshot`, their file ids and made-up attributes: `snapdir.rs`).
#[derive(Clone)]
pub struct Resolved {
    pub export: Export,
    pub place: Place,
    pub object: u64,
    pub attrs: InodeAttrs,
}

impl Resolved {
    pub fn is_live(&self) -> bool {
        matches!(self.place, Place::Live)
    }

    /// Runs `call` on the filesystem this object is in: the live one, or the snapshot's
    /// inside its gate (`Stale` once the snapshot is destroyed: its handles are gone, never
    /// read from freed blocks). `.cairn` and `.cairn/snapshot` have none: `IsDirectory`.
    pub fn with<T>(
        &self,
        call: impl FnOnce(&Filesystem) -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        match &self.place {
            Place::Live => call(&self.export.fs),
            Place::Snapshot { fs, .. } => gated(fs, call),
            Place::ControlDir | Place::SnapshotDir => Err(FsError::IsDirectory),
        }
    }

    /// Another object of the same filesystem (or snapshot).
    pub fn at(&self, object: u64, attrs: InodeAttrs) -> Resolved {
        Resolved {
            export: self.export.clone(),
            place: self.place.clone(),
            object,
            attrs,
        }
    }

    /// The handle of this object.
    pub fn handle(&self) -> FileHandle {
        let (dataset_id, node) = match &self.place {
            Place::Live => (self.export.dataset_id, HandleNode::Object),
            Place::Snapshot { id, .. } => (*id, HandleNode::Object),
            Place::ControlDir => (self.export.dataset_id, HandleNode::ControlDir),
            Place::SnapshotDir => (self.export.dataset_id, HandleNode::SnapshotDir),
        };
        let object_node = node == HandleNode::Object;
        HandleParts {
            pool_guid: self.export.pool_guid,
            dataset_id,
            node,
            object: if object_node { self.object } else { 0 },
            generation: if object_node {
                self.attrs.generation
            } else {
                0
            },
        }
        .encode()
    }

    /// The attributes of this object as clients see them: a snapshot has its own `fsid`
    /// (the client sees a mount point at its root and gives it its own device, so file ids
    /// of the live filesystem and of each snapshot never meet).
    pub fn fattr(&self) -> Fattr3 {
        match &self.place {
            Place::Live => self.export.fattr(self.object, &self.attrs),
            Place::Snapshot { id, .. } => {
                let storage = self
                    .with(|fs| fs.storage(self.object))
                    .unwrap_or(InodeStorage {
                        allocated_bytes: 0,
                        block_bytes: 4096,
                    });
                fattr(
                    self.object,
                    &self.attrs,
                    storage,
                    fsid_of(self.export.pool_guid, *id),
                )
            }
            Place::ControlDir | Place::SnapshotDir => fattr(
                self.object,
                &self.attrs,
                InodeStorage {
                    allocated_bytes: 0,
                    block_bytes: 4096,
                },
                self.export.fsid(),
            ),
        }
    }

    /// The attributes of this object now, if it can be read (post-operation attributes).
    pub fn post_attr(&self) -> Option<Fattr3> {
        let attrs = match &self.place {
            Place::Live | Place::Snapshot { .. } => self.with(|fs| fs.getattr(self.object)).ok()?,
            Place::ControlDir | Place::SnapshotDir => {
                control_attrs(&self.export, &self.place).ok()?
            }
        };
        Some(self.at(self.object, attrs).fattr())
    }
}

/// The dataset `id` names: itself, or the one whose snapshot it is.
pub(super) fn dataset_of_id(pool: &Pool, id: u64) -> Option<String> {
    pool.dataset_name_of_id(id)
        .or_else(|| Some(pool.snapshot_of_id(id)?.dataset))
}

/// Whether a dataset with these properties is exported: a filesystem with `sharenfs` not off.
pub fn shared(properties: &DatasetProperties) -> bool {
    properties.sharenfs.shared && properties.kind == cairn_dataset::DatasetKind::Filesystem
}

impl NfsContext {
    /// The shared filesystem `dataset` of `pool`, with its `sharenfs` as it reads now.
    pub(super) fn export_of(&self, pool: Arc<Pool>, dataset: String) -> Result<Export, Nfs3Error> {
        let share = match pool.dataset_properties(&dataset) {
            Ok(properties) if shared(&properties) => properties.sharenfs,
            _ => return Err(Nfs3Error::Stale),
        };
        let dataset_id = pool.dataset_id(&dataset).ok_or(Nfs3Error::Stale)?;
        let fs = pool.filesystem(&dataset).map_err(|_| Nfs3Error::Io)?;
        Ok(Export {
            pool_guid: pool.guid(),
            pool,
            dataset,
            dataset_id,
            fs,
            share,
        })
    }

    /// What MNT of `path` reaches: `/POOL/DATASET` of a shared filesystem, or a directory
    /// under it (`/POOL/DATASET/DIR/...`, as Linux's nfsd lets clients mount a subdirectory
    /// of an export; libnfs mounts the whole path of its URL). The deepest shared dataset
    /// whose name starts the path wins; the rest is looked up in it, directory by directory.
    pub fn mount_point(&self, path: &[u8]) -> Result<(Export, u64, InodeAttrs), MountError> {
        let path = std::str::from_utf8(path).map_err(|_| MountError::NoEnt)?;
        let parts: Vec<&str> = path.split('/').filter(|part| !part.is_empty()).collect();
        let pool_name = parts.first().ok_or(MountError::NoEnt)?;
        let pool = self
            .served
            .pools
            .read()
            .get(*pool_name)
            .cloned()
            .ok_or(MountError::NoEnt)?;
        let (export, below) = (1..=parts.len())
            .rev()
            .find_map(|depth| {
                let dataset = parts[..depth].join("/");
                let export = self.export_of(pool.clone(), dataset).ok()?;
                Some((export, &parts[depth..]))
            })
            .ok_or(MountError::NoEnt)?;
        let mut object = export.fs.root();
        let mut attrs = export.fs.getattr(object).map_err(|_| MountError::Io)?;
        for name in below {
            if *name == "." || *name == ".." {
                return Err(MountError::Inval);
            }
            let (next, next_attrs) = export
                .fs
                .lookup(object, name.as_bytes())
                .map_err(|_| MountError::NoEnt)?;
            if next_attrs.kind != cairn_fs::attrs::FileKind::Directory {
                return Err(MountError::NotDir);
            }
            (object, attrs) = (next, next_attrs);
        }
        Ok((export, object, attrs))
    }

    /// Finds what `handle` names in the live filesystem, for a call that changes it: as
    /// `resolve_any`, and ROFS for what is under `.cairn` (the control directory and the
    /// snapshots are read-only).
    pub fn resolve(&self, handle: &FileHandle) -> Result<Resolved, Nfs3Error> {
        let resolved = self.resolve_any(handle)?;
        if !resolved.is_live() {
            return Err(Nfs3Error::RoFs);
        }
        Ok(resolved)
    }

    /// Finds what `handle` names: BADHANDLE if it is not one of ours, STALE if what it named
    /// is gone (or is another incarnation of its object number, or its snapshot was
    /// destroyed).
    pub fn resolve_any(&self, handle: &FileHandle) -> Result<Resolved, Nfs3Error> {
        let parts = HandleParts::decode(handle).ok_or(Nfs3Error::BadHandle)?;
        let stale = || {
            self.stats.stale_handle();
            Nfs3Error::Stale
        };
        let pool = self
            .served
            .all()
            .into_iter()
            .find(|pool| pool.guid() == parts.pool_guid)
            .ok_or_else(stale)?;
        let mark_stale = |err| match err {
            Nfs3Error::Stale => stale(),
            other => other,
        };
        let Some(dataset) = pool.dataset_name_of_id(parts.dataset_id) else {
            // Not a dataset's id: a snapshot's, or nothing any more.
            if parts.node != HandleNode::Object {
                return Err(stale());
            }
            let identity = pool.snapshot_of_id(parts.dataset_id).ok_or_else(stale)?;
            let export = self
                .export_of(pool.clone(), identity.dataset.clone())
                .map_err(mark_stale)?;
            let fs = self.open_snapshot(&pool, &identity).map_err(mark_stale)?;
            let attrs = gated(&fs, |fs| fs.getattr(parts.object));
            let place = Place::Snapshot {
                id: parts.dataset_id,
                fs,
            };
            return self
                .checked(export, place, parts, attrs)
                .map_err(mark_stale);
        };
        let export = self.export_of(pool, dataset).map_err(mark_stale)?;
        let place = match parts.node {
            HandleNode::Object => {
                let attrs = export.fs.getattr(parts.object);
                return self
                    .checked(export, Place::Live, parts, attrs)
                    .map_err(mark_stale);
            }
            HandleNode::ControlDir => Place::ControlDir,
            HandleNode::SnapshotDir => Place::SnapshotDir,
        };
        control_resolved(&export, place).map_err(|err| mark_stale(nfs_error(&err)))
    }

    /// An object found by handle, if it is the one the handle named.
    fn checked(
        &self,
        export: Export,
        place: Place,
        parts: HandleParts,
        attrs: Result<InodeAttrs, FsError>,
    ) -> Result<Resolved, Nfs3Error> {
        let attrs = match attrs {
            Ok(attrs) => attrs,
            Err(FsError::NotFound | FsError::Stale) => return Err(Nfs3Error::Stale),
            Err(err) => return Err(nfs_error(&err)),
        };
        if attrs.generation != parts.generation || attrs.links == 0 {
            return Err(Nfs3Error::Stale);
        }
        Ok(Resolved {
            export,
            place,
            object: parts.object,
            attrs,
        })
    }
}

// ----- the control directory's places (`.cairn`, `.cairn/snapshot`; `snapdir.rs` lists
// and looks up in them) and the snapshots' gate: what a handle resolves to -----

/// File ids of the control directory's two directories: bit 63, which no object number has.
const CONTROL_FILEID_BIT: u64 = 1 << 63;
pub const CONTROL_DIR_FILEID: u64 = CONTROL_FILEID_BIT | 1;
pub const SNAPSHOT_DIR_FILEID: u64 = CONTROL_FILEID_BIT | 2;

/// Runs `call` on snapshot `fs` inside its gate; `Stale` once the snapshot is destroyed (the
/// gate answers `NotFound` then, which inside would mean a name not found).
pub fn gated<T>(
    fs: &SnapshotFilesystem,
    call: impl FnOnce(&Filesystem) -> Result<T, FsError>,
) -> Result<T, FsError> {
    match fs.with(call) {
        Err(FsError::NotFound) if !fs.is_open() => Err(FsError::Stale),
        other => other,
    }
}

/// Attributes of `.cairn` or `.cairn/snapshot` (`crate::control_dir`).
pub fn control_attrs(export: &Export, place: &Place) -> Result<InodeAttrs, FsError> {
    let root = export.fs.getattr(export.fs.root())?;
    Ok(crate::control_dir::control_dir_attrs(
        root,
        matches!(place, Place::SnapshotDir),
    ))
}

/// `.cairn` or `.cairn/snapshot` of `export`, resolved.
pub fn control_resolved(export: &Export, place: Place) -> Result<Resolved, FsError> {
    let object = match place {
        Place::ControlDir => CONTROL_DIR_FILEID,
        Place::SnapshotDir => SNAPSHOT_DIR_FILEID,
        Place::Live | Place::Snapshot { .. } => {
            return Err(FsError::Invalid("not a control directory".into()));
        }
    };
    Ok(Resolved {
        attrs: control_attrs(export, &place)?,
        export: export.clone(),
        place,
        object,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_refuse_others() {
        for node in [
            HandleNode::Object,
            HandleNode::ControlDir,
            HandleNode::SnapshotDir,
        ] {
            let parts = HandleParts {
                pool_guid: 0x1234_5678_9abc_def0,
                dataset_id: 7,
                node,
                object: 16,
                generation: 42,
            };
            let handle = parts.encode();
            assert_eq!(handle.as_bytes().len(), HANDLE_BYTES);
            assert_eq!(HandleParts::decode(&handle), Some(parts));
        }
        let parts = HandleParts {
            pool_guid: 1,
            dataset_id: 7,
            node: HandleNode::Object,
            object: 16,
            generation: 42,
        };
        let handle = parts.encode();
        // A node byte of no known meaning does not parse.
        let mut bytes = handle.as_bytes().to_vec();
        bytes[3] = 3;
        assert_eq!(HandleParts::decode(&FileHandle::new(bytes).unwrap()), None);
        let mut bytes = handle.as_bytes().to_vec();
        bytes[2] = 9;
        let other = FileHandle::new(bytes).unwrap();
        assert_eq!(HandleParts::decode(&other), None);
        let short = FileHandle::new(vec![1, 2, 3]).unwrap();
        assert_eq!(HandleParts::decode(&short), None);
    }
}
