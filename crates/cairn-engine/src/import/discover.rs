//! Discovery: where to look for a pool's devices (`ImportSource`), what their labels say
//! (`DiscoveredPool`, grouped by pool guid by `discover_pools`), and which of the configs found
//! to import with (`committed_config`, the one the newest uberblock was committed under).
//!
//! Invariants: reads only, read-only opens, no lock taken; a device whose labels do not read is
//! skipped, never an error. This file uses no sibling: `tree`, `load`, `rewind` and the import
//! itself (`mod.rs`) sit above it, and `import_error` lives here so all of them can share it.

use crate::EngineError;
use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::spec::DeviceSpec;
use cairn_format::{LabelConfig, PoolState, Uberblock};
use cairn_pool::labels::{LABEL_HALVES, best_config, read_configs, read_uberblocks};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where to look for a pool's devices.
#[derive(Debug, Clone)]
pub enum ImportSource {
    /// Every regular file (and block device) directly inside the directory.
    Directory(PathBuf),
    /// Every regular file and block device directly inside any of these directories: one
    /// search, so a pool whose devices are spread over several directories is found whole.
    Directories(Vec<PathBuf>),
    /// These devices (e.g. remembered from an earlier import).
    Devices(Vec<DeviceSpec>),
}

impl std::fmt::Display for ImportSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImportSource::Directory(dir) => write!(f, "{}", dir.display()),
            ImportSource::Directories(dirs) => {
                let names: Vec<String> = dirs.iter().map(|dir| dir.display().to_string()).collect();
                write!(f, "{}", names.join(", "))
            }
            ImportSource::Devices(specs) => {
                let names: Vec<String> = specs.iter().map(|spec| spec.to_string()).collect();
                write!(f, "{}", names.join(", "))
            }
        }
    }
}

/// A pool found on devices, before import.
#[derive(Debug, Clone)]
pub struct DiscoveredPool {
    /// The newest config found.
    pub config: LabelConfig,
    /// Every distinct valid config found on the pool's devices, newest first (older ones
    /// survive in the second half of the labels while a vdev-tree change is being committed).
    pub configs: Vec<LabelConfig>,
    /// Present devices with their leaf guid.
    pub devices: Vec<(DeviceSpec, u64)>,
    /// The newest uberblock of the pool that verifies on any of its devices (whatever its vdev
    /// tree), and a device holding it; `None`: not one, as a `pool create` cut before its
    /// first uberblock leaves them.
    pub newest_uberblock: Option<(Uberblock, PathBuf)>,
    /// The newest txg a config in the second half of some label records, and where: that half
    /// is written only after the txg's uberblock was flushed (`cairn_pool::labels`), so that
    /// txg was committed. `None`: no such config (a create cut short writes only the first
    /// half).
    pub committed_config: Option<(u64, String)>,
}

impl DiscoveredPool {
    /// True if the labels show a pool whose creation never committed its first txg: configs
    /// in the first half of the labels only, and no uberblock anywhere.
    pub fn creation_incomplete(&self) -> bool {
        self.newest_uberblock.is_none() && self.committed_config.is_none()
    }

    /// The newest txg the labels prove committed, and what proves it: a verified uberblock
    /// (written only after its txg's blocks were flushed) or a config of the labels' second
    /// half (written after its txg's uberblock was flushed). A torn uberblock fails its
    /// checksum and proves nothing, so a power cut never raises this past what is durable.
    pub fn committed_txg(&self) -> Option<(u64, String)> {
        let from_uberblock = self.newest_uberblock.as_ref().map(|(ub, path)| {
            (
                ub.txg,
                format!(
                    "the uberblock of txg {} on {} verifies",
                    ub.txg,
                    path.display()
                ),
            )
        });
        [from_uberblock, self.committed_config.clone()]
            .into_iter()
            .flatten()
            .max_by_key(|(txg, _)| *txg)
    }
}

pub(crate) fn candidate_paths(source: &ImportSource) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = match source {
        ImportSource::Devices(specs) => {
            return specs.iter().map(|spec| spec.path.clone()).collect();
        }
        ImportSource::Directory(dir) => devices_in(dir),
        ImportSource::Directories(dirs) => dirs.iter().flat_map(|dir| devices_in(dir)).collect(),
    };
    paths.sort();
    paths.dedup();
    paths
}

/// The regular files and block devices directly inside `dir` (none if it cannot be read).
fn devices_in(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| {
                    std::fs::metadata(path).is_ok_and(|meta| {
                        use std::os::unix::fs::FileTypeExt;
                        meta.is_file() || meta.file_type().is_block_device()
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the labels of every candidate device (read-only, no lock) and groups them by pool.
pub fn discover_pools(source: &ImportSource) -> Vec<DiscoveredPool> {
    let mut pools: BTreeMap<u64, DiscoveredPool> = BTreeMap::new();
    for path in candidate_paths(source) {
        let options = FileOptions {
            read_only: true,
            ..Default::default()
        };
        let Ok(device) = FileDevice::open(&path, options) else {
            continue;
        };
        let Ok(config) = best_config(&device) else {
            continue;
        };
        let entry = pools
            .entry(config.pool_guid)
            .or_insert_with(|| DiscoveredPool {
                config: config.clone(),
                configs: Vec::new(),
                devices: Vec::new(),
                newest_uberblock: None,
                committed_config: None,
            });
        if config.txg > entry.config.txg {
            entry.config = config.clone();
        }
        for (index, other) in read_configs(&device).into_iter().enumerate() {
            let Ok(other) = other else {
                continue;
            };
            if other.pool_guid != config.pool_guid {
                continue;
            }
            let second_half = LABEL_HALVES[1].contains(&index);
            if second_half
                && entry
                    .committed_config
                    .as_ref()
                    .is_none_or(|(txg, _)| other.txg > *txg)
            {
                entry.committed_config = Some((
                    other.txg,
                    format!(
                        "label {index} of {} records txg {}, written once that txg's uberblock \
                         was durable",
                        path.display(),
                        other.txg
                    ),
                ));
            }
            let known = entry
                .configs
                .iter()
                .any(|seen| seen.txg == other.txg && seen.tree.guid_sum() == other.tree.guid_sum());
            if !known {
                entry.configs.push(other);
            }
        }
        if let Some(newest) = read_uberblocks(&device)
            .into_iter()
            .filter(|ub| ub.pool_guid == config.pool_guid)
            .max_by_key(|ub| ub.txg)
            && entry
                .newest_uberblock
                .as_ref()
                .is_none_or(|(seen, _)| newest.txg > seen.txg)
        {
            entry.newest_uberblock = Some((newest, path.clone()));
        }
        let spec = DeviceSpec { path, model: None };
        entry.devices.push((spec, config.leaf_guid));
    }
    let mut pools: Vec<DiscoveredPool> = pools.into_values().collect();
    for pool in &mut pools {
        pool.configs
            .sort_by_key(|config| std::cmp::Reverse(config.txg));
    }
    pools
}

/// The config to import with: the one whose vdev tree matches the newest uberblock on the
/// pool's devices (same guid sum, committed with or after the config). A crash while a vdev
/// was being added or removed can leave a new config in some labels with no uberblock of the
/// new tree yet: the old config, still in the other labels, is then the right one. Without any
/// match, the newest config (and import then explains what is wrong).
pub(super) fn committed_config(found: &DiscoveredPool) -> LabelConfig {
    if found.configs.len() <= 1 {
        return found.config.clone();
    }
    let uberblocks: Vec<Uberblock> = found
        .devices
        .iter()
        .filter_map(|(spec, _)| {
            let options = FileOptions {
                read_only: true,
                ..Default::default()
            };
            FileDevice::open(&spec.path, options).ok()
        })
        .flat_map(|device| read_uberblocks(&device))
        .filter(|ub| ub.pool_guid == found.config.pool_guid)
        .collect();
    found
        .configs
        .iter()
        .filter_map(|config| {
            let guid_sum = config.tree.guid_sum();
            uberblocks
                .iter()
                .filter(|ub| ub.guid_sum == guid_sum && ub.txg >= config.txg)
                .map(|ub| ub.txg)
                .max()
                .map(|newest| ((newest, config.txg), config))
        })
        .max_by_key(|(key, _)| *key)
        .map_or_else(|| found.config.clone(), |(_, config)| config.clone())
}

pub(super) fn import_error(pool: &str, reason: impl Into<String>) -> EngineError {
    EngineError::Import {
        pool: pool.to_string(),
        reason: reason.into(),
    }
}

/// Finds the pool named `name` (or with that decimal guid) among the discovered ones.
pub(super) fn find_pool(source: &ImportSource, name: &str) -> Result<DiscoveredPool, EngineError> {
    let mut matches: Vec<DiscoveredPool> = discover_pools(source)
        .into_iter()
        .filter(|pool| pool.config.pool_name == name || pool.config.pool_guid.to_string() == name)
        .filter(|pool| pool.config.state != PoolState::Destroyed)
        .collect();
    match matches.len() {
        0 => Err(import_error(
            name,
            format!("no devices with its label found in {source}"),
        )),
        1 => Ok(matches.remove(0)),
        _ => Err(import_error(
            name,
            format!(
                "several pools have this name (guids {}); import by guid",
                matches
                    .iter()
                    .map(|pool| pool.config.pool_guid.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}
