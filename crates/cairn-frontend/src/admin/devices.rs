//! Device safety: which devices a pool change may take.
//!
//! A device of a pool this machine has imported is refused even when forced, as `zpool`
//! refuses a member of an active pool: one the pool cache lists (the same file or block
//! device by identity, whatever path names it), or one whose label names a leaf of an
//! imported pool's current config (pool and leaf guid, read from that pool's cached devices:
//! a copy of a member counts, as in zpool; a device whose `pool add` was cut short does not).
//! Forcing such a device would fault a live pool.
//!
//! Files that a change creates (devices given with a size that do not exist yet) are listed
//! before the change (`CreatedFiles`) so a change that fails removes exactly them. Uses the
//! pool cache and the engine's label discovery; no sibling.

use super::AdminError;
use crate::cache::PoolCache;
use crate::pools::parse_cached_device;
use cairn_device::spec::DeviceSpec;
use cairn_engine::{ImportSource, VdevGroup, discover_pools};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Fails when a device of `groups` belongs to a pool this machine has imported (other than
/// `except`, the pool being changed: its own devices are the engine's to refuse).
pub fn refuse_imported_members(
    cache: &PoolCache,
    groups: &[VdevGroup],
    except: Option<&str>,
) -> Result<(), AdminError> {
    let given: Vec<DeviceSpec> = groups
        .iter()
        .flat_map(|group| group.devices.iter().cloned())
        .collect();
    let (by_identity, by_guid) = imported_members(cache, except)?;
    let refuse = |path: &Path, pool: &str| AdminError::DeviceInUse {
        path: path.to_path_buf(),
        pool: pool.to_string(),
    };
    for spec in &given {
        if let Some(pool) = file_identity(&spec.path).and_then(|id| by_identity.get(&id)) {
            return Err(refuse(&spec.path, pool));
        }
    }
    for found in discover_pools(&ImportSource::Devices(given)) {
        for (spec, leaf_guid) in &found.devices {
            if let Some(pool) = by_guid.get(&(found.config.pool_guid, *leaf_guid)) {
                return Err(refuse(&spec.path, pool));
            }
        }
    }
    Ok(())
}

/// Pools by device identity, and pools by (pool guid, leaf guid) of their current configs.
type Members = (BTreeMap<(u64, u64), String>, BTreeMap<(u64, u64), String>);

fn imported_members(cache: &PoolCache, except: Option<&str>) -> Result<Members, AdminError> {
    let mut by_identity = BTreeMap::new();
    let mut by_guid = BTreeMap::new();
    for (pool, devices) in cache.load()? {
        if except == Some(pool.as_str()) {
            continue;
        }
        let specs: Vec<DeviceSpec> = devices
            .iter()
            .filter_map(|text| parse_cached_device(text).ok())
            .collect();
        for spec in &specs {
            if let Some(identity) = file_identity(&spec.path) {
                by_identity.insert(identity, pool.clone());
            }
        }
        for found in discover_pools(&ImportSource::Devices(specs)) {
            for top in &found.config.tree.tops {
                for leaf in &top.children {
                    by_guid.insert((found.config.pool_guid, leaf.guid), pool.clone());
                }
            }
        }
    }
    Ok((by_identity, by_guid))
}

/// What makes two paths the same device: the block device number, or a file's inode.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let meta = std::fs::metadata(path).ok()?;
    Some(if meta.file_type().is_block_device() {
        (u64::MAX, meta.rdev())
    } else {
        (meta.dev(), meta.ino())
    })
}

/// Without a size to create missing files with, every device must exist.
pub fn check_devices_exist(
    groups: &[VdevGroup],
    create_size_bytes: Option<u64>,
) -> Result<(), AdminError> {
    if create_size_bytes.is_some() {
        return Ok(());
    }
    match groups
        .iter()
        .flat_map(|group| &group.devices)
        .find(|spec| !spec.path.exists())
    {
        Some(spec) => Err(AdminError::DeviceMissing {
            path: spec.path.clone(),
        }),
        None => Ok(()),
    }
}

/// The files a change will create for its devices (those that do not exist yet), to remove
/// again if the change fails.
#[derive(Debug, Default)]
pub struct CreatedFiles(Vec<PathBuf>);

impl CreatedFiles {
    /// The devices of `groups` that do not exist now.
    pub fn missing(groups: &[VdevGroup]) -> CreatedFiles {
        CreatedFiles(
            groups
                .iter()
                .flat_map(|group| &group.devices)
                .filter(|spec| !spec.path.exists())
                .map(|spec| spec.path.clone())
                .collect(),
        )
    }

    /// Removes the files (the change failed). Best effort: a file that cannot be removed
    /// stays, and the removal is durable once its directory is synced.
    pub fn remove(&self) {
        for path in &self.0 {
            if path.is_file() && std::fs::remove_file(path).is_ok() {
                let _ = cairn_device::file::sync_parent_dir(path);
            }
        }
    }
}
