//! Dataset changes: create a volume or a filesystem, destroy one, set properties.
//!
//! Policy kept here: a dataset is named `POOL/NAME` (the pool's root dataset is the pool's,
//! made and destroyed with it); every change records its history entry in its own txg (one
//! txg per command: a snapshot every few seconds must not cost two; `Pool::with_history`),
//! after its change succeeded, never for a change that failed. A change that takes several
//! txgs (`destroy -R`, `rollback -r`), or whose entry no txg of its own took, is durable
//! before its entry is recorded, and a failure after that reads as "done, then the pool
//! failed", never as "not done"; mount-flag properties follow onto the server's live mounts; a setting that
//! gives up a guarantee (`sync=disabled`) comes back as a warning for people. Uses
//! `pools.rs`'s history recording.

use super::AdminError;
use super::pools::record_history;
use crate::pools::PoolAccess;
use cairn_dataset::directory::Provisioning;
use cairn_dataset::properties::lookup;

/// What a property change left to tell people.
#[derive(Debug, Default)]
pub struct SetOutcome {
    /// `(property, value)` settings that give up a guarantee (`sync=disabled`).
    pub unsafe_settings: Vec<(String, String)>,
    /// Live mounts whose flags could not follow the properties (they apply at the next mount).
    pub mount_failures: Vec<(String, std::io::Error)>,
}

/// The pool of dataset `name`, which must not be a pool's root dataset.
fn pool_of<'a>(name: &'a str, kind: &'static str) -> Result<&'a str, AdminError> {
    match name.split_once('/') {
        Some((pool, _)) => Ok(pool),
        None => Err(AdminError::RootDataset {
            name: name.to_string(),
            kind,
        }),
    }
}

/// Creates volume `name` of `size_bytes`; durable on return.
pub fn create_volume(
    access: &PoolAccess,
    name: &str,
    size_bytes: u64,
    provisioning: Provisioning,
    properties: &[(String, String)],
    history_entry: &str,
) -> Result<(), AdminError> {
    let pool_name = pool_of(name, "volume")?;
    access.with_pool(pool_name, false, |pool| {
        in_one_txg(pool, name, history_entry, || {
            Ok(pool.create_volume_as(name, size_bytes, provisioning, properties)?)
        })
    })
}

/// Creates filesystem `name`, its root directory owned by `owner` (uid, gid) with `mode`;
/// durable on return.
pub fn create_filesystem(
    access: &PoolAccess,
    name: &str,
    properties: &[(String, String)],
    owner: (u32, u32),
    mode: u32,
    history_entry: &str,
) -> Result<(), AdminError> {
    let pool_name = pool_of(name, "filesystem")?;
    access.with_pool(pool_name, false, |pool| {
        in_one_txg(pool, name, history_entry, || {
            Ok(pool.create_filesystem(name, properties, owner, mode)?)
        })
    })
}

/// Destroys dataset `name` (not a pool's root dataset), or snapshot `name` (`dataset@snap`,
/// a pool's root dataset's too).
pub fn destroy_dataset(
    access: &PoolAccess,
    name: &str,
    history_entry: &str,
) -> Result<(), AdminError> {
    if let Some((dataset, _)) = name.split_once('#') {
        let pool_name = dataset.split('/').next().unwrap_or(dataset);
        return access.with_pool(pool_name, false, |pool| {
            in_one_txg(pool, name, history_entry, || {
                Ok(pool.destroy_bookmark(name)?)
            })
        });
    }
    if let Some((dataset, _)) = name.split_once('@') {
        let pool_name = dataset.split('/').next().unwrap_or(dataset);
        return access.with_pool(pool_name, false, |pool| {
            // The history entry goes in the destroy's own txg (one txg, durable on return).
            let names = snapshots_named(pool, name)?;
            Ok(pool.destroy_snapshots_with_history(&names, history_for(pool, history_entry))?)
        });
    }
    let pool_name = match name.split_once('/') {
        Some((pool, _)) => pool,
        None => return Err(AdminError::DestroyRoot(name.to_string())),
    };
    access.with_pool(pool_name, false, |pool| {
        in_one_txg(
            pool,
            name,
            history_entry,
            || Ok(pool.destroy_dataset(name)?),
        )
    })
}

/// Takes snapshots `names` (`dataset@snapshot`, all of one pool) in one txg, with `recursive`
/// of every descendant too; durable on return. Filesystems this server mounted have the
/// kernel's dirty pages written back first, so every write an application saw complete
/// before the command is in the snapshot.
pub fn snapshot(
    access: &PoolAccess,
    names: &[String],
    recursive: bool,
    history_entry: &str,
) -> Result<Vec<String>, AdminError> {
    let pool_name = names
        .first()
        .map(|name| name.split(['/', '@']).next().unwrap_or(name))
        .ok_or_else(|| AdminError::Invalid("no snapshot named".into()))?;
    if let Some(other) = names
        .iter()
        .find(|name| name.split(['/', '@']).next() != Some(pool_name))
    {
        return Err(AdminError::Invalid(format!(
            "'{other}' is in another pool than '{}': one command snapshots one pool",
            names[0]
        )));
    }
    access.with_pool(pool_name, false, |pool| {
        if let Some(served) = &access.served {
            let datasets: Vec<String> = pool
                .dataset_names()
                .into_iter()
                .filter(|dataset| {
                    names.iter().any(|name| {
                        let of = name.split('@').next().unwrap_or(name);
                        dataset == of || (recursive && dataset.starts_with(&format!("{of}/")))
                    })
                })
                .collect();
            if let Some((dataset, err)) = served.mounts.write_back(&datasets).into_iter().next() {
                return Err(AdminError::Invalid(format!(
                    "cannot write back the kernel's cached writes of '{dataset}' before the \
                     snapshot: {err}"
                )));
            }
        }
        // The history entry goes in the snapshots' own txg: one txg per command.
        Ok(pool.snapshot_with_history(names, recursive, history_for(pool, history_entry))?)
    })
}

/// The snapshots `name` names: `dataset@snap`, or a range `dataset@first%last` (by creation;
/// an empty bound is the oldest or the newest).
fn snapshots_named(pool: &cairn_engine::Pool, name: &str) -> Result<Vec<String>, AdminError> {
    match name.split_once('@') {
        Some((dataset, range)) if range.contains('%') => {
            let (first, last) = range.split_once('%').unwrap_or((range, ""));
            Ok(pool.snapshot_range(dataset, first, last)?)
        }
        _ => Ok(vec![name.to_string()]),
    }
}

/// `destroy -n`: the snapshots `name` names (a range too) and the bytes destroying them would
/// free; nothing changes.
pub fn destroy_preview(access: &PoolAccess, name: &str) -> Result<(Vec<String>, u64), AdminError> {
    let pool_name = name.split(['/', '@']).next().unwrap_or(name);
    access.with_pool(pool_name, true, |pool| {
        let names = snapshots_named(pool, name)?;
        let bytes = pool.destroy_space(&names)?;
        Ok((names, bytes))
    })
}

/// Runs `change` (one sync task: a hold, a clone, a promote...) on the pool of snapshot
/// `name`, with the command's history entry in the same txg.
pub fn snapshot_change(
    access: &PoolAccess,
    name: &str,
    history_entry: &str,
    change: impl FnOnce(&cairn_engine::Pool) -> Result<(), cairn_engine::EngineError>,
) -> Result<(), AdminError> {
    let pool_name = name.split(['/', '@', '#']).next().unwrap_or(name);
    access.with_pool(pool_name, false, |pool| {
        in_one_txg(pool, name, history_entry, || Ok(change(pool)?))
    })
}

/// Runs `change` of several txgs (`destroy -R`: each clone, snapshot and dataset in its
/// own) on the pool of snapshot `name`, then records the command in its history once all of
/// it is durable: an entry in the first txg would name a command a power cut left half done.
pub fn snapshot_change_in_steps(
    access: &PoolAccess,
    name: &str,
    history_entry: &str,
    change: impl FnOnce(&cairn_engine::Pool) -> Result<(), cairn_engine::EngineError>,
) -> Result<(), AdminError> {
    let pool_name = name.split(['/', '@', '#']).next().unwrap_or(name);
    access.with_pool(pool_name, false, |pool| {
        change(pool)?;
        record_history(pool, history_entry).map_err(|err| done_then_failed(name, err))
    })
}

/// `written@snapshot` of `dataset` (see `Pool::written_since`).
pub fn written_since(
    access: &PoolAccess,
    dataset: &str,
    snapshot: &str,
) -> Result<u64, AdminError> {
    let pool_name = dataset.split('/').next().unwrap_or(dataset);
    access.with_pool(pool_name, true, |pool| {
        Ok(pool.written_since(dataset, snapshot)?)
    })
}

/// `digest` of a snapshot (see `Pool::snapshot_digest`): read-only; a server remembers it.
pub fn snapshot_digest(access: &PoolAccess, snapshot: &str) -> Result<String, AdminError> {
    let pool_name = snapshot.split(['/', '@']).next().unwrap_or(snapshot);
    access.with_pool(pool_name, true, |pool| Ok(pool.snapshot_digest(snapshot)?))
}

/// `diff --blocks` (see `Pool::diff_blocks`): read-only, a pool opened for it is not written.
pub fn diff_blocks(
    access: &PoolAccess,
    older: &str,
    newer: &str,
) -> Result<super::request::BlockDiffReply, AdminError> {
    let pool_name = older.split(['/', '@']).next().unwrap_or(older);
    access.with_pool(pool_name, true, |pool| {
        let diff = pool.diff_blocks(older, newer)?;
        Ok(super::request::BlockDiffReply {
            ranges: diff
                .ranges
                .iter()
                .map(|range| (range.offset_bytes, range.length_bytes))
                .collect(),
            blocks_visited: diff.blocks_visited,
            volsize_bytes: diff.volsize_bytes,
            volblocksize_bytes: diff.volblocksize_bytes,
        })
    })
}

/// The user holds of snapshots `names` (all of one pool).
pub fn holds(
    access: &PoolAccess,
    names: &[String],
) -> Result<Vec<(String, String, u64)>, AdminError> {
    let first = names.first().map(String::as_str).unwrap_or_default();
    let pool_name = first.split(['/', '@']).next().unwrap_or(first);
    access.with_pool(pool_name, true, |pool| Ok(pool.holds(names)?))
}

/// Rolls `snapshot`'s dataset back to it (see `Pool::rollback`); durable on return. A
/// filesystem this server mounted is rolled back under its mount, which shows the snapshot's
/// state on return (`Mounts::roll_back`).
pub fn rollback(
    access: &PoolAccess,
    snapshot: &str,
    destroy_newer: bool,
    force: bool,
    history_entry: &str,
) -> Result<(), AdminError> {
    let pool_name = snapshot.split(['/', '@']).next().unwrap_or(snapshot);
    access.with_pool(pool_name, false, |pool| {
        let roll_back = || {
            match &access.served {
                Some(served) => served
                    .mounts
                    .roll_back(pool, snapshot, destroy_newer, force)?,
                None => pool.rollback(snapshot, destroy_newer, force)?,
            }
            Ok(())
        };
        if destroy_newer {
            // Newer snapshots are destroyed in txgs before the rollback's own: the entry
            // follows the whole of it, so it never names a rollback a power cut left undone.
            roll_back()?;
            return record_history(pool, history_entry)
                .map_err(|err| done_then_failed(snapshot, err));
        }
        in_one_txg(pool, snapshot, history_entry, roll_back)
    })
}

/// Sets `assignments` on `dataset` in order (each durable before the next; the first that
/// fails stops the rest), then applies mount flags to the server's live mounts.
pub fn set_properties(
    access: &PoolAccess,
    dataset: &str,
    assignments: &[(String, String)],
    history_entry: &str,
) -> Result<SetOutcome, AdminError> {
    let pool_name = dataset.split('/').next().unwrap_or(dataset);
    access.with_pool(pool_name, false, |pool| {
        let mut outcome = SetOutcome::default();
        let mut history = None;
        for (index, (property, value)) in assignments.iter().enumerate() {
            let set = || {
                pool.set_property(dataset, property, value)
                    .map_err(|source| AdminError::SetProperty {
                        property: property.clone(),
                        value: value.clone(),
                        dataset: dataset.to_string(),
                        source: Box::new(source),
                    })
            };
            // The last assignment's txg carries the history entry (all of them durable then).
            let canonical = if index + 1 == assignments.len() && !pool.is_readonly() {
                let (outcome, left) = pool.with_history(history_entry, set);
                history = left;
                outcome?
            } else {
                set()?
            };
            if lookup(property).is_ok_and(|def| def.is_unsafe(&canonical)) {
                outcome.unsafe_settings.push((property.clone(), canonical));
            }
        }
        // Mount flags and `snapdir` follow their properties on the live mounts (children
        // inherit them).
        let flags_changed = assignments.iter().any(|(property, _)| {
            property == "snapdir" || lookup(property).is_ok_and(|def| def.is_mount_flag())
        });
        if flags_changed && let Some(served) = &access.served {
            outcome.mount_failures = served.mounts.apply_properties(pool);
        }
        // No assignment, or none took a txg: the entry on its own.
        if history.is_some() || assignments.is_empty() {
            record_history(pool, history_entry)?;
        }
        Ok(outcome)
    })
}

/// Runs `change` on `pool` with `history_entry` recorded in the txg of its first sync task
/// (`Pool::with_history`: one txg for the command); when no task took the entry, it is
/// recorded on its own once the change is durable.
fn in_one_txg<T>(
    pool: &cairn_engine::Pool,
    name: &str,
    history_entry: &str,
    change: impl FnOnce() -> Result<T, AdminError>,
) -> Result<T, AdminError> {
    if pool.is_readonly() {
        return change();
    }
    let (outcome, left) = pool.with_history(history_entry, change);
    let value = outcome?;
    if let Some(entry) = left {
        record_history(pool, &entry).map_err(|err| done_then_failed(name, err))?;
    }
    Ok(value)
}

/// A dataset change whose txg is durable, after which recording it failed.
fn done_then_failed(name: &str, err: AdminError) -> AdminError {
    AdminError::DoneThenFailed {
        name: name.to_string(),
        source: Box::new(err),
    }
}

/// The history entry a change records in its own txg (none for a read-only pool, which
/// records nothing: `pools::record_history`).
fn history_for(pool: &cairn_engine::Pool, entry: &str) -> Option<String> {
    (!pool.is_readonly()).then(|| entry.to_string())
}
