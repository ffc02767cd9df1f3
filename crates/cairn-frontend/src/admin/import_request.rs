//! `AdminRequest::Import` and `AdminRequest::Check`: finding pools on devices and what may be
//! imported, previewing a rewind, importing (the pool cache updated once the pool is durable),
//! and checking a pool, imported (through its owner) or exported (from its devices, read-only,
//! never imported).
//!
//! Invariants: the search is the engine's one search over every directory named (a pool whose
//! devices are spread over several is found whole); an import of a remembered pool for
//! recovery (`ignore_missing_log`, `rewind`) without directories uses its remembered devices;
//! an imported pool is never checked from its devices (they may be changing under a server).
//! The rules of which pool may be imported are `import.rs`'s.

use super::AdminError;
use super::failures::failed;
use crate::PoolAccess;
use cairn_device::spec::DeviceSpec;
use cairn_engine::{CheckReport, DiscoveredPool, ImportSource, Pool, PoolOptions, discover_pools};
use cairn_format::PoolState;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What `pool import` asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportRequest {
    /// Name or guid to import; `None`: list what could be imported.
    pub pool: Option<String>,
    /// Absolute directories to search (`/dev` when empty).
    pub dirs: Vec<PathBuf>,
    /// List destroyed pools too.
    pub include_destroyed: bool,
    pub ignore_missing_log: bool,
    pub rewind: bool,
    /// With `rewind`: say what a rewind would do, changing nothing.
    pub dry_run: bool,
    pub readonly: bool,
}

/// A pool that could be imported, as `pool import` lists it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportablePool {
    pub name: String,
    pub guid: u64,
    /// The state its labels record.
    pub label_state: PoolState,
    /// Its vdevs: (indented name, ONLINE | DEGRADED | UNAVAIL), a plain vdev's one device or a
    /// mirror's (raidz's) row and its devices.
    pub rows: Vec<(String, String)>,
    /// Every vdev has a device present.
    pub pool_ok: bool,
    /// Some vdev lacks one.
    pub pool_degraded: bool,
    /// No uberblock verifies on any device.
    pub no_uberblock: bool,
    /// A `pool create` cut before its first commit.
    pub creation_incomplete: bool,
}

/// What an import did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ImportOutcome {
    /// What could be imported, and the directories searched (for the message when none).
    Importable {
        pools: Vec<ImportablePool>,
        /// Pools found whose format version this build does not read (listed, not importable).
        #[serde(default)]
        unreadable: Vec<cairn_engine::UnreadablePool>,
        searched: String,
    },
    /// Imported; what the pool says about itself.
    Imported { notes: Vec<String> },
    /// `-F -n`: what a rewind would do (`None`: the pool needs none).
    RewindPreview {
        name: String,
        preview: Option<String>,
    },
}

/// Runs `pool import`.
pub(super) fn import(
    access: &PoolAccess,
    command_line: &str,
    request: &ImportRequest,
) -> Result<ImportOutcome, AdminError> {
    let options = PoolOptions {
        ignore_missing_log: request.ignore_missing_log,
        rewind: request.rewind,
        readonly: request.readonly,
        without_space_log: request.readonly,
        ..access.pool_options()
    };
    let recovery = request.ignore_missing_log || request.rewind;
    if let Some(wanted) = &request.pool
        && recovery
        && request.dirs.is_empty()
        && access.cache.devices(wanted)?.is_some()
    {
        let source = ImportSource::Devices(access.cached_devices(wanted)?);
        return import_from(
            access,
            command_line,
            request,
            &source,
            wanted,
            wanted,
            options,
        );
    }
    let dirs = search_dirs(&request.dirs)?;
    let searched = dirs
        .iter()
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let found: Vec<DiscoveredPool> = discover_pools(&ImportSource::Directories(dirs.clone()));
    let Some(wanted) = &request.pool else {
        let pools = super::importable_pools(access, &found, request.include_destroyed)?
            .into_iter()
            .map(importable)
            .collect();
        let unreadable = cairn_engine::unreadable_pools(&ImportSource::Directories(dirs.clone()));
        return Ok(ImportOutcome::Importable {
            pools,
            unreadable,
            searched,
        });
    };
    let readable = found.iter().any(|pool| {
        pool.config.state != PoolState::Destroyed
            && (pool.config.pool_name == *wanted || pool.config.pool_guid.to_string() == *wanted)
    });
    if !readable
        && let Some(err) =
            cairn_engine::unreadable_pool(&ImportSource::Directories(dirs.clone()), wanted)
    {
        return Err(failed(format!("cannot import pool '{wanted}'"), err));
    }
    let chosen = super::choose_pool(&found, wanted, &searched)?;
    let name = chosen.config.pool_name.clone();
    super::refuse_imported_name(access, wanted, &name, recovery)?;
    // By guid from the directories searched: the one search, which also finds the pool's
    // cache devices there.
    let guid = chosen.config.pool_guid.to_string();
    let source = ImportSource::Directories(dirs);
    import_from(
        access,
        command_line,
        request,
        &source,
        &guid,
        &name,
        options,
    )
}

/// The directories to search (`/dev` without any); each must be a directory.
fn search_dirs(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, AdminError> {
    let dirs: Vec<PathBuf> = if dirs.is_empty() {
        vec![PathBuf::from("/dev")]
    } else {
        dirs.to_vec()
    };
    for dir in &dirs {
        if !dir.is_dir() {
            return Err(AdminError::Refused(format!(
                "cannot search {} for pools: not a directory",
                dir.display()
            )));
        }
    }
    Ok(dirs)
}

/// Imports (or, with `dry_run`, previews the rewind of) the pool `wanted` names in `source`.
fn import_from(
    access: &PoolAccess,
    command_line: &str,
    request: &ImportRequest,
    source: &ImportSource,
    wanted: &str,
    name: &str,
    options: PoolOptions,
) -> Result<ImportOutcome, AdminError> {
    if request.dry_run {
        let preview = Pool::preview_import(source, wanted, &options)
            .map_err(|err| failed(format!("cannot import pool '{name}', even with -F"), err))?
            .map(|rewind| rewind.preview());
        return Ok(ImportOutcome::RewindPreview {
            name: name.to_string(),
            preview,
        });
    }
    let pool = Pool::import(source, wanted, options)
        .map_err(|err| failed(format!("cannot import pool '{name}'"), err))?;
    let notes = pool.notes().to_vec();
    super::remember_imported(access, pool, command_line)?;
    Ok(ImportOutcome::Imported { notes })
}

/// A found pool as `pool import` lists it: each vdev ONLINE where a device was found.
fn importable(pool: &DiscoveredPool) -> ImportablePool {
    let (config, devices) = (&pool.config, &pool.devices);
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut pool_ok = true;
    let mut pool_degraded = false;
    for top in &config.tree.tops {
        let mut leaf_rows = Vec::new();
        let mut present = 0;
        for child in &top.children {
            let located = devices.iter().find(|(_, guid)| *guid == child.guid);
            let spec = DeviceSpec {
                path: located
                    .map_or_else(|| PathBuf::from(&child.path), |(spec, _)| spec.path.clone()),
                model: child.model.clone(),
            };
            if located.is_some() {
                present += 1;
            }
            let state = if located.is_some() {
                "ONLINE"
            } else {
                "UNAVAIL"
            };
            leaf_rows.push((spec.to_string(), state.to_string()));
        }
        let top_state = match present {
            0 => "UNAVAIL",
            n if n == top.children.len() => "ONLINE",
            _ => "DEGRADED",
        };
        pool_ok &= present > 0;
        pool_degraded |= present < top.children.len();
        if top.children.len() == 1 && !matches!(top.kind, cairn_format::label::TopVdevKind::Mirror)
        {
            let (name, state) = leaf_rows.remove(0);
            rows.push((format!("  {name}"), state));
        } else {
            let kind = match top.kind {
                cairn_format::label::TopVdevKind::RaidZ { parity } => format!("raidz{parity}"),
                _ => "mirror".to_string(),
            };
            rows.push((format!("  {kind}-{}", top.id), top_state.to_string()));
            rows.extend(
                leaf_rows
                    .into_iter()
                    .map(|(name, state)| (format!("    {name}"), state)),
            );
        }
    }
    ImportablePool {
        name: config.pool_name.clone(),
        guid: config.pool_guid,
        label_state: config.state,
        rows,
        pool_ok,
        pool_degraded,
        no_uberblock: pool.newest_uberblock.is_none(),
        creation_incomplete: pool.creation_incomplete(),
    }
}

/// Checks pool `name`: through its owner when imported, or (with `dirs`, absolute) a pool that
/// is not imported, from the devices found there, opened read-only and closed again.
pub(super) fn check(
    access: &PoolAccess,
    name: &str,
    dirs: &[PathBuf],
) -> Result<CheckReport, AdminError> {
    let fail = || format!("cannot check pool '{name}'");
    if dirs.is_empty() {
        return access.with_pool(name, true, |pool| {
            pool.check().map_err(|err| failed(fail(), err))
        });
    }
    if access.cache.devices(name)?.is_some() {
        return Err(AdminError::Refused(format!(
            "{}: it is imported; check it with cairn pool check {name} (-d is for pools that are not imported)",
            fail()
        )));
    }
    for dir in dirs {
        if !dir.is_dir() {
            return Err(AdminError::Refused(format!(
                "{}: {} is not a directory",
                fail(),
                dir.display()
            )));
        }
    }
    let options = PoolOptions {
        readonly: true,
        ..access.pool_options()
    };
    let pool = Pool::import(&ImportSource::Directories(dirs.to_vec()), name, options)
        .map_err(|err| failed(fail(), err))?;
    let report = pool.check().map_err(|err| failed(fail(), err));
    let closed = pool.close().map_err(|err| failed(fail(), err));
    let report = report?;
    closed?;
    Ok(report)
}
