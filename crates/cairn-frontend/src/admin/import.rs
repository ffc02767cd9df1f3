//! Importing pools: which found pools may be imported, which one a name or guid means, and
//! remembering an imported pool.
//!
//! Policy kept here: a pool whose devices the pool cache lists is already imported and not
//! offered again; a destroyed pool is shown only when asked for and never imported; a name
//! that several found pools carry is refused (import by guid); a pool name the cache knows is
//! refused unless the import is a recovery (`--ignore-missing-log`, `-F`), which may take a
//! remembered pool again from its devices. An imported pool is remembered in the pool cache
//! with the devices it actually opened, and its history records the import. Uses
//! `pools.rs`'s history recording.

use super::AdminError;
use super::pools::record_history;
use crate::pools::{PoolAccess, device_specs, parse_cached_device};
use cairn_engine::{DiscoveredPool, Pool};
use cairn_format::PoolState;
use std::collections::BTreeSet;
use std::path::PathBuf;

/// The pools of `found` that may be imported: not already imported (a device the pool cache
/// lists), and not destroyed unless `include_destroyed`.
pub fn importable_pools<'a>(
    access: &PoolAccess,
    found: &'a [DiscoveredPool],
    include_destroyed: bool,
) -> Result<Vec<&'a DiscoveredPool>, AdminError> {
    let imported: BTreeSet<PathBuf> = access
        .cache
        .load()?
        .into_values()
        .flatten()
        .filter_map(|text| parse_cached_device(&text).ok().map(|spec| spec.path))
        .collect();
    Ok(found
        .iter()
        .filter(|pool| {
            let destroyed = pool.config.state == PoolState::Destroyed;
            let already = pool
                .devices
                .iter()
                .any(|(spec, _)| imported.contains(&spec.path));
            !already && (include_destroyed || !destroyed)
        })
        .collect())
}

/// The one pool of `found` that `wanted` (a name or a guid) means; `searched` names where the
/// search looked, for the error.
pub fn choose_pool<'a>(
    found: &'a [DiscoveredPool],
    wanted: &str,
    searched: &str,
) -> Result<&'a DiscoveredPool, AdminError> {
    let matches: Vec<&DiscoveredPool> = found
        .iter()
        .filter(|pool| pool.config.state != PoolState::Destroyed)
        .filter(|pool| {
            pool.config.pool_name == wanted || pool.config.pool_guid.to_string() == wanted
        })
        .collect();
    match matches.as_slice() {
        [] => Err(AdminError::NoPoolFound {
            wanted: wanted.to_string(),
            searched: searched.to_string(),
            only_destroyed: found.iter().any(|pool| {
                pool.config.pool_name == wanted && pool.config.state == PoolState::Destroyed
            }),
        }),
        [one] => Ok(one),
        several => Err(AdminError::AmbiguousPool {
            wanted: wanted.to_string(),
            guids: several
                .iter()
                .map(|pool| pool.config.pool_guid.to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Refuses to import a pool named like one the pool cache lists, unless the import is a
/// recovery of a remembered pool that could not be opened.
pub fn refuse_imported_name(
    access: &PoolAccess,
    wanted: &str,
    name: &str,
    recovery: bool,
) -> Result<(), AdminError> {
    if access.cache.devices(name)?.is_some() && !recovery {
        return Err(AdminError::NameImported {
            wanted: wanted.to_string(),
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Remembers an imported pool and its devices, records `history_entry`, and hands the pool
/// to the server (or closes it, in a one-shot process). Both are attempted; the first
/// failure is returned.
pub fn remember_imported(
    access: &PoolAccess,
    pool: Pool,
    history_entry: &str,
) -> Result<(), AdminError> {
    let name = pool.name().to_string();
    let recorded = access
        .cache
        .insert(&name, &device_specs(&pool))
        .map_err(AdminError::from)
        .and_then(|()| record_history(&pool, history_entry));
    let kept = access
        .adopt(pool)
        .map_err(|source| AdminError::NotKept { pool: name, source });
    recorded.and(kept)
}
