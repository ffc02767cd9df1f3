//! Taking a pool off this machine: export (durable, labels say exported, importable
//! elsewhere) and destroy (labels say destroyed).
//!
//! Policy kept here: the pool's filesystems are unmounted first (a busy one keeps the pool
//! imported); a pool that cannot be opened cannot be written, so `export` and `destroy -f`
//! only forget it (the pool cache drops it, its devices are left as they are), while plain
//! `destroy` refuses and says how to forget it; a pool another process has open is never
//! forgotten (it is busy, not lost). The pool cache drops a pool only once the engine is done
//! with it. Uses `pools.rs`'s history recording.

use super::AdminError;
use super::pools::record_history;
use crate::PoolsError;
use crate::pools::PoolAccess;
use std::path::PathBuf;

/// What became of a pool that was exported or destroyed.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub enum PoolRemoval {
    /// Done; the filesystems unmounted first, as (dataset, mountpoint).
    Done { unmounted: Vec<(String, PathBuf)> },
    /// The pool could not be opened (`reason`): it is only forgotten, its devices untouched.
    Forgotten { reason: String },
}

/// Exports pool `name`, recording `history_entry` first.
pub fn export_pool(
    access: &PoolAccess,
    name: &str,
    history_entry: &str,
) -> Result<PoolRemoval, AdminError> {
    let (pool, unmounted) = match access.take(name) {
        Ok(taken) => taken,
        Err(err) => return forget_unavailable(access, name, err, "export"),
    };
    if let Err(err) = record_history(&pool, history_entry) {
        let _ = pool.close();
        return Err(err);
    }
    pool.export().map_err(|source| AdminError::Remove {
        verb: "export",
        pool: name.to_string(),
        source: Box::new(source),
    })?;
    access.cache.remove(name)?;
    Ok(PoolRemoval::Done { unmounted })
}

/// Destroys pool `name`; with `force`, a pool that cannot be opened is forgotten instead.
pub fn destroy_pool(
    access: &PoolAccess,
    name: &str,
    force: bool,
) -> Result<PoolRemoval, AdminError> {
    let (pool, unmounted) = match access.take(name) {
        Ok(taken) => taken,
        Err(err) if force || err.unavailable().is_some_and(|found| found.busy) => {
            return forget_unavailable(access, name, err, "destroy");
        }
        Err(err) => {
            return Err(match err.unavailable() {
                Some(found) => AdminError::DestroyUnavailable {
                    pool: name.to_string(),
                    reason: found.reason.clone(),
                },
                None => err.into(),
            });
        }
    };
    pool.destroy().map_err(|source| AdminError::Remove {
        verb: "destroy",
        pool: name.to_string(),
        source: Box::new(source),
    })?;
    access.cache.remove(name)?;
    Ok(PoolRemoval::Done { unmounted })
}

/// `export` or `destroy -f` of a pool that cannot be opened: only forgotten. A busy pool (its
/// devices locked by another process) or any other failure to take it stays an error.
fn forget_unavailable(
    access: &PoolAccess,
    name: &str,
    err: PoolsError,
    verb: &'static str,
) -> Result<PoolRemoval, AdminError> {
    let Some(found) = err.unavailable() else {
        return Err(err.into());
    };
    if found.busy {
        return Err(AdminError::Busy {
            verb,
            pool: name.to_string(),
            reason: found.reason.clone(),
        });
    }
    access
        .cache
        .remove(name)
        .map_err(|source| AdminError::NotForgotten {
            pool: name.to_string(),
            source,
        })?;
    Ok(PoolRemoval::Forgotten {
        reason: found.reason.clone(),
    })
}
