//! File handles that survive restarts, and the exports they lead into.
//!
//! A handle is 36 bytes: `b"cN"`, a version byte (1), a reserved byte, then big-endian the
//! pool's guid, the dataset's id (`Pool::dataset_id`: kept across renames, never reused in a
//! pool), the object number and the object's generation (cairn-fs has no separate generation
//! counter: `InodeAttrs::generation` is the txg that created the inode). Nothing in it
//! depends on the server process, so a handle resolves after a restart. An object number can
//! be used again after its inode is freed (across imports), but the new inode has a later
//! creation txg, so the old handle's generation no longer matches: STALE, never another
//! file's contents. A handle of a deleted object, of a dataset gone or no longer shared
//! (`sharenfs=off`), or of a pool not served is STALE too; one that does not parse is
//! BADHANDLE.
//!
//! Exports: every filesystem dataset of a served pool whose `sharenfs` is not off, mounted by
//! the path `/POOL/DATASET`, or a directory below it by `/POOL/DATASET/DIR` (MOUNT MNT); its
//! `sharenfs` options, read at every call (`Export::share`), also say which clients may do
//! what in it and whether root is squashed (`access.rs`). Uses `context.rs` and
//! `convert.rs`.

use super::context::NfsContext;
use super::convert::fattr;
use cairn_dataset::DatasetProperties;
use cairn_dataset::properties::ShareNfs;
use cairn_engine::Pool;
use cairn_fs::attrs::InodeAttrs;
use cairn_fs::{Filesystem, FsError, InodeStorage};
use cairn_nfs::mount::MountError;
use cairn_nfs::nfs3::{Fattr3, FileHandle, Nfs3Error};
use std::sync::Arc;

const HANDLE_MAGIC: [u8; 2] = *b"cN";
const HANDLE_VERSION: u8 = 1;
/// Bytes of a handle.
pub const HANDLE_BYTES: usize = 36;

/// What a handle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandleParts {
    pub pool_guid: u64,
    pub dataset_id: u64,
    pub object: u64,
    pub generation: u64,
}

impl HandleParts {
    pub fn encode(&self) -> FileHandle {
        let mut bytes = Vec::with_capacity(HANDLE_BYTES);
        bytes.extend_from_slice(&HANDLE_MAGIC);
        bytes.push(HANDLE_VERSION);
        bytes.push(0);
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

impl Export {
    /// The `fsid` clients see: datasets apart, stable across restarts.
    pub fn fsid(&self) -> u64 {
        self.pool_guid.rotate_left(32) ^ self.dataset_id
    }

    pub fn handle(&self, object: u64, attrs: &InodeAttrs) -> FileHandle {
        HandleParts {
            pool_guid: self.pool_guid,
            dataset_id: self.dataset_id,
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

/// A handle resolved: the export, the object and its attributes now.
pub struct Resolved {
    pub export: Export,
    pub object: u64,
    pub attrs: InodeAttrs,
}

/// Whether a dataset with these properties is exported: a filesystem with `sharenfs` not off.
pub fn shared(properties: &DatasetProperties) -> bool {
    properties.sharenfs.shared && properties.kind == cairn_dataset::DatasetKind::Filesystem
}

impl NfsContext {
    /// The shared filesystem `dataset` of `pool`, with its `sharenfs` as it reads now.
    fn export_of(&self, pool: Arc<Pool>, dataset: String) -> Result<Export, Nfs3Error> {
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

    /// Finds what `handle` names: BADHANDLE if it is not one of ours, STALE if what it named
    /// is gone (or is another incarnation of its object number).
    pub fn resolve(&self, handle: &FileHandle) -> Result<Resolved, Nfs3Error> {
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
        let dataset = pool
            .dataset_name_of_id(parts.dataset_id)
            .ok_or_else(stale)?;
        let export = self.export_of(pool, dataset).map_err(|err| match err {
            Nfs3Error::Stale => stale(),
            other => other,
        })?;
        let attrs = match export.fs.getattr(parts.object) {
            Ok(attrs) => attrs,
            Err(FsError::NotFound | FsError::Stale) => return Err(stale()),
            Err(err) => return Err(super::convert::nfs_error(&err)),
        };
        if attrs.generation != parts.generation || attrs.links == 0 {
            return Err(stale());
        }
        Ok(Resolved {
            export,
            object: parts.object,
            attrs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_refuse_others() {
        let parts = HandleParts {
            pool_guid: 0x1234_5678_9abc_def0,
            dataset_id: 7,
            object: 16,
            generation: 42,
        };
        let handle = parts.encode();
        assert_eq!(handle.as_bytes().len(), HANDLE_BYTES);
        assert_eq!(HandleParts::decode(&handle), Some(parts));
        let mut bytes = handle.as_bytes().to_vec();
        bytes[2] = 9;
        let other = FileHandle::new(bytes).unwrap();
        assert_eq!(HandleParts::decode(&other), None);
        let short = FileHandle::new(vec![1, 2, 3]).unwrap();
        assert_eq!(HandleParts::decode(&short), None);
    }
}
