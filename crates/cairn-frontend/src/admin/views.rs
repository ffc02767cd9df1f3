//! Looks at pools as `pool status` and `pool list` show them: every named (or remembered) pool
//! opened read-only for the look, or, when it cannot be opened, described from what the pool
//! cache remembers of it (UNAVAIL, why, which of its device files exist).
//!
//! Invariants: a look never writes (one-shot processes open pools read-only) and never stops at
//! one pool: a pool that cannot be opened is a view, a name that is no pool a failure beside the
//! views, worded in full.

use super::AdminError;
use crate::pools::{READONLY_ENTRY, chain_text, parse_cached_device};
use crate::{PoolAccess, PoolsError};
use cairn_engine::{CacheDeviceStatus, PoolStatus};
use serde::{Deserialize, Serialize};

/// A remembered pool as `pool list` and `pool status` show it: opened, or UNAVAIL.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PoolView {
    Open {
        status: Box<PoolStatus>,
        /// What the pool says about itself (`Pool::notes`).
        notes: Vec<String>,
        /// Its cache devices (details only from a pool with its tier running: a server's).
        cache: Vec<CacheDeviceStatus>,
    },
    Unavailable {
        name: String,
        reason: String,
        /// Another process has it open (so it is not lost).
        busy: bool,
        /// The devices the pool cache lists, with whether each file exists.
        devices: Vec<(String, bool)>,
    },
}

impl PoolView {
    pub fn name(&self) -> &str {
        match self {
            PoolView::Open { status, .. } => &status.name,
            PoolView::Unavailable { name, .. } => name,
        }
    }
}

/// The views of the pools asked for, and the failures of names that are no pools.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolViews {
    /// The pools looked at: the named ones, or every remembered one.
    pub names: Vec<String>,
    pub views: Vec<PoolView>,
    /// One line each (error and causes).
    pub failures: Vec<String>,
}

/// Looks at `pools` (every remembered pool when empty).
pub fn pool_views(access: &PoolAccess, pools: &[String]) -> Result<PoolViews, AdminError> {
    let names = if pools.is_empty() {
        access.pool_names()?
    } else {
        pools.to_vec()
    };
    let mut views = Vec::new();
    let mut failures = Vec::new();
    for name in &names {
        match pool_view(access, name) {
            Ok(view) => views.push(view),
            Err(err) => failures.push(chain_text(&err)),
        }
    }
    Ok(PoolViews {
        names,
        views,
        failures,
    })
}

/// Opens `name` read-only for a look; a pool that cannot be opened is a view too, any other
/// failure (not in the cache) is an error.
fn pool_view(access: &PoolAccess, name: &str) -> Result<PoolView, PoolsError> {
    let looked = access.with_pool(name, true, |pool| {
        let cache = if pool.l2().is_some() {
            pool.cache_status()
        } else {
            remembered_cache_devices(access, name)
        };
        Ok::<_, PoolsError>((pool.status(), pool.notes().to_vec(), cache))
    });
    match looked {
        Ok((status, notes, cache)) => Ok(PoolView::Open {
            status: Box::new(status),
            notes,
            cache,
        }),
        Err(PoolsError::Unavailable(unavailable)) => {
            let devices = access
                .cache
                .devices(name)?
                .unwrap_or_default()
                .into_iter()
                .filter(|text| text != READONLY_ENTRY)
                .map(|text| {
                    let present = parse_cached_device(&text).is_ok_and(|spec| spec.path.exists());
                    (text, present)
                })
                .collect();
            Ok(PoolView::Unavailable {
                name: name.to_string(),
                reason: unavailable.reason,
                busy: unavailable.busy,
                devices,
            })
        }
        Err(err) => Err(err),
    }
}

/// The cache devices the pool cache lists for `name`, as far as a look without opening them
/// can tell (a pool opened read-only has no cache tier running).
fn remembered_cache_devices(access: &PoolAccess, name: &str) -> Vec<CacheDeviceStatus> {
    let cache = access
        .cached_device_sets(name)
        .map(|(_, cache)| cache)
        .unwrap_or_default();
    cache
        .into_iter()
        .map(|spec| CacheDeviceStatus {
            name: spec.to_string(),
            report: None,
            missing: (!spec.path.exists()).then(|| "no such file".to_string()),
        })
        .collect()
}
