//! The typed requests that change pools and datasets, and the small looks at one pool: each
//! turns its request's plain arguments into the library's calls (`pools.rs`, `removal.rs`,
//! `datasets.rs`) and says what the front end is to tell people (notes, replies).
//!
//! Invariants: an error says what could not be done first (`AdminError::Failed`, "cannot
//! create pool 'tank'"), its causes after; a change is recorded in the pool's history by the
//! call that makes it; nothing here prints.

use super::AdminError;
use super::failures::{failed, skip_unavailable};
use super::request::{AdminReply, DatasetChange, PoolChange, TxgRow, VdevLayout};
use super::samples::{ArcSample, counters};
use crate::PoolAccess;
use cairn_dataset::directory::Provisioning;
use cairn_device::spec::DeviceSpec;
use cairn_engine::{CreateOptions, EngineError, VdevGroup};

/// The layout's groups and cache devices as the engine takes them.
fn vdevs(layout: &VdevLayout) -> Result<(Vec<VdevGroup>, Vec<DeviceSpec>), AdminError> {
    let parse = |text: &String| {
        DeviceSpec::parse(text).map_err(|err| AdminError::Create(format!("invalid device {err}")))
    };
    let groups = layout
        .groups
        .iter()
        .map(|group| {
            Ok(VdevGroup {
                mirror: group.mirror,
                raidz_parity: group.raidz_parity,
                log: group.log,
                devices: group.devices.iter().map(parse).collect::<Result<_, _>>()?,
            })
        })
        .collect::<Result<_, AdminError>>()?;
    let cache = layout.cache.iter().map(parse).collect::<Result<_, _>>()?;
    Ok((groups, cache))
}

/// Runs one pool change.
/// Runs one pool change; warnings for people come back as notes.
pub(super) fn change_pool(
    access: &PoolAccess,
    command_line: &str,
    change: PoolChange,
    notes: &mut Vec<String>,
) -> Result<AdminReply, AdminError> {
    match change {
        PoolChange::Create {
            pool,
            layout,
            create_size_bytes,
            force,
            ashift,
            root_properties,
        } => {
            let fail = |err: AdminError| failed(format!("cannot create pool '{pool}'"), err);
            let (groups, cache) = vdevs(&layout).map_err(fail)?;
            let mut options = CreateOptions {
                create_size_bytes,
                force,
                root_properties,
                history_entry: Some(command_line.to_string()),
                ..CreateOptions::default()
            };
            if let Some(ashift) = ashift {
                options.ashift = ashift;
            }
            let warnings =
                super::create_pool(access, &pool, &groups, &cache, &options).map_err(fail)?;
            notes.extend(warnings);
            Ok(AdminReply::Done)
        }
        PoolChange::Add {
            pool,
            layout,
            create_size_bytes,
            force,
        } => {
            let fail =
                |err: AdminError| failed(format!("cannot add devices to pool '{pool}'"), err);
            let (groups, cache) = vdevs(&layout).map_err(fail)?;
            let options = CreateOptions {
                create_size_bytes,
                force,
                ..CreateOptions::default()
            };
            let added = super::add_devices(access, &pool, &groups, &cache, &options, command_line)
                .map_err(fail)?;
            Ok(AdminReply::Added(added))
        }
        PoolChange::Remove { pool, device } => remove_device(access, command_line, &pool, &device),
        PoolChange::Export { pool } => Ok(AdminReply::Removed(super::export_pool(
            access,
            &pool,
            command_line,
        )?)),
        PoolChange::Destroy { pool, force } => Ok(AdminReply::Removed(super::destroy_pool(
            access, &pool, force,
        )?)),
        PoolChange::SetCacheLimit {
            pool,
            property,
            value,
        } => set_cache_limit(access, &pool, &property, &value),
    }
}

/// Removes a log vdev or a cache device (named as `pool status` names it).
fn remove_device(
    access: &PoolAccess,
    command_line: &str,
    name: &str,
    device: &str,
) -> Result<AdminReply, AdminError> {
    access.with_pool(name, false, |pool| {
        let fail =
            |err: EngineError| failed(format!("cannot remove '{device}' from pool '{name}'"), err);
        let is_cache = pool
            .cache_specs()
            .iter()
            .any(|spec| spec.to_string() == device || spec.path.display().to_string() == device);
        let what = if is_cache {
            pool.remove_cache_device(device).map_err(fail)?;
            "cache device"
        } else {
            pool.remove_log_vdev(device).map_err(fail)?;
            "log device"
        };
        access
            .cache
            .insert(name, &crate::device_specs(pool))
            .map_err(|err| {
                failed(
                    format!("the pool cache still lists '{device}' for '{name}'"),
                    err,
                )
            })?;
        super::pools::record_history(pool, command_line)?;
        Ok(AdminReply::DeviceRemoved {
            what: what.to_string(),
            device: device.to_string(),
        })
    })
}

/// `arc_max`/`arc_min`: the process's cache limits, shared by every pool.
fn set_cache_limit(
    access: &PoolAccess,
    pool: &str,
    property: &str,
    value: &str,
) -> Result<AdminReply, AdminError> {
    if !access.pool_names()?.iter().any(|name| name == pool) {
        return Err(AdminError::Refused(format!(
            "cannot set property for '{pool}': no such pool"
        )));
    }
    let refused =
        |err: String| AdminError::Refused(format!("cannot set {property}={value}: {err}"));
    let bytes =
        cairn_dataset::properties::parse_size(value).map_err(|err| refused(err.to_string()))?;
    let cache = cairn_engine::process_cache();
    let stats = cache.stats();
    let (mut min, mut max) = (
        stats.get("c_min").unwrap_or(0),
        stats.get("c_max").unwrap_or(0),
    );
    match property {
        "arc_max" => {
            max = bytes;
            min = min.min(max);
        }
        "arc_min" => min = bytes,
        other => {
            return Err(AdminError::Refused(format!(
                "unknown pool property '{other}' (settable: arc_max, arc_min)"
            )));
        }
    }
    cache
        .set_limits(min, max)
        .map_err(|err| refused(err.to_string()))?;
    Ok(AdminReply::CacheLimitSet {
        served: access.served.is_some(),
    })
}

/// The cache limits and where the cache stands, for pool `pool`.
pub(super) fn cache_limits(access: &PoolAccess, pool: &str) -> Result<AdminReply, AdminError> {
    if !access.pool_names()?.iter().any(|name| name == pool) {
        return Err(AdminError::Refused(format!(
            "cannot get properties of '{pool}': no such pool"
        )));
    }
    let stats = cairn_engine::process_cache().stats();
    let mut fields = counters(&stats.fields);
    // The pool's own: what destroyed snapshots still hold while the background frees it.
    let freeing = access.with_pool(pool, true, |handle| {
        Ok::<_, AdminError>(handle.freeing_bytes())
    })?;
    fields.push(("freeing".to_string(), freeing));
    Ok(AdminReply::ArcCounters(ArcSample {
        served: access.served.is_some(),
        fields,
    }))
}

/// Writes out every named pool's (or every pool's) dirty data.
pub(super) fn sync(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<AdminReply, AdminError> {
    for name in access.pools_or_all(pools)? {
        let synced = access.with_pool(&name, false, |pool| {
            pool.sync()
                .map_err(|err| failed(format!("cannot sync pool '{name}'"), err))
        });
        skip_unavailable(synced, !pools.is_empty(), notes)?;
    }
    Ok(AdminReply::Done)
}

pub(super) fn history(access: &PoolAccess, name: &str) -> Result<AdminReply, AdminError> {
    let entries = access.with_pool(name, true, |pool| Ok::<_, AdminError>(pool.history()))?;
    Ok(AdminReply::History(entries))
}

pub(super) fn txgs(access: &PoolAccess, name: &str) -> Result<AdminReply, AdminError> {
    let timings = access.with_pool(name, false, |pool| Ok::<_, AdminError>(pool.txg_history()))?;
    Ok(AdminReply::Txgs(
        timings
            .iter()
            .map(|timing| TxgRow {
                txg: timing.txg,
                trigger: format!("{:?}", timing.trigger),
                dirty_bytes: timing.dirty_bytes,
                holds_count: timing.holds_count,
                open_us: timing.open_us,
                quiesce_us: timing.quiesce_us,
                sync_us: timing.sync_us,
                writer_delays_count: timing.writer_delays_count,
                writer_delay_ns_total: timing.writer_delay_ns_total,
                writers_blocked_count: timing.writers_blocked_count,
                reserved_us: timing.reserved_sync_us,
                background_us: timing.background_us,
                command_us: timing.command_us,
            })
            .collect(),
    ))
}

/// Runs one dataset change; warnings for people come back as notes.
pub(super) fn change_dataset(
    access: &PoolAccess,
    command_line: &str,
    change: DatasetChange,
    notes: &mut Vec<String>,
) -> Result<AdminReply, AdminError> {
    match change {
        DatasetChange::CreateVolume {
            dataset,
            size_bytes,
            sparse,
            properties,
        } => {
            let provisioning = if sparse {
                Provisioning::Sparse
            } else {
                Provisioning::Thick
            };
            super::create_volume(access, &dataset, size_bytes, provisioning, &properties, command_line)
                .map_err(|err| {
                    let no_space = matches!(
                        &err,
                        AdminError::Engine(engine)
                            if matches!(**engine, EngineError::Dataset(cairn_dataset::DatasetError::NoSpace(_)))
                    );
                    let err = if no_space && !sparse {
                        failed(
                            "a volume reserves its full size; create -s -V makes a sparse one"
                                .to_string(),
                            err,
                        )
                    } else {
                        err
                    };
                    failed(format!("cannot create volume '{dataset}'"), err)
                })?;
        }
        DatasetChange::CreateFilesystem {
            dataset,
            properties,
        } => {
            // As in ZFS, a new filesystem's root directory is root's, mode 0755.
            super::create_filesystem(access, &dataset, &properties, (0, 0), 0o755, command_line)
                .map_err(|err| failed(format!("cannot create filesystem '{dataset}'"), err))?;
        }
        DatasetChange::Destroy { dataset } => {
            super::destroy_dataset(access, &dataset, command_line)
                .map_err(|err| failed(format!("cannot destroy '{dataset}'"), err))?;
        }
        change @ (DatasetChange::DestroyDeferred { .. }
        | DatasetChange::Hold { .. }
        | DatasetChange::Clone { .. }
        | DatasetChange::Promote { .. }
        | DatasetChange::Bookmark { .. }
        | DatasetChange::DestroyDependents { .. }
        | DatasetChange::Rollback { .. }) => change_snapshots(access, command_line, change)?,
        DatasetChange::Snapshot { names, recursive } => {
            let taken = super::snapshot(access, &names, recursive, command_line)
                .map_err(|err| failed(format!("cannot snapshot {}", names.join(" ")), err))?;
            return Ok(AdminReply::Snapshots(taken));
        }
        DatasetChange::Set {
            dataset,
            assignments,
        } => {
            let outcome = super::set_properties(access, &dataset, &assignments, command_line)?;
            for (property, value) in &outcome.unsafe_settings {
                notes.push(format!(
                    "warning: {property}={value} on '{dataset}' is UNSAFE: acknowledged synchronous writes can be lost at a crash"
                ));
            }
            for (mounted, err) in &outcome.mount_failures {
                notes.push(format!(
                    "cannot change the mount flags of {mounted}: {err}; they apply from its next mount"
                ));
            }
        }
    }
    Ok(AdminReply::Done)
}

/// The changes of snapshots and of what depends on them (holds, clones, rollback).
fn change_snapshots(
    access: &PoolAccess,
    command_line: &str,
    change: DatasetChange,
) -> Result<(), AdminError> {
    match change {
        DatasetChange::DestroyDeferred { snapshot } => {
            super::snapshot_change(access, &snapshot, command_line, |pool| {
                pool.destroy_snapshot_deferred(&snapshot)
            })
            .map_err(|err| failed(format!("cannot destroy '{snapshot}'"), err))?;
        }
        DatasetChange::Hold {
            tag,
            names,
            release,
        } => {
            let first = names.first().cloned().unwrap_or_default();
            let verb = if release { "release" } else { "hold" };
            super::snapshot_change(access, &first, command_line, |pool| {
                if release {
                    pool.release(&tag, &names)
                } else {
                    pool.hold(&tag, &names)
                }
            })
            .map_err(|err| failed(format!("cannot {verb} '{tag}' on {}", names.join(" ")), err))?;
        }
        DatasetChange::Clone {
            origin,
            target,
            properties,
        } => {
            super::snapshot_change(access, &origin, command_line, |pool| {
                pool.clone_snapshot(&origin, &target, &properties)
            })
            .map_err(|err| failed(format!("cannot clone '{origin}' to '{target}'"), err))?;
        }
        DatasetChange::Bookmark { source, target } => {
            super::snapshot_change(access, &target, command_line, |pool| {
                pool.bookmark(&source, &target)
            })
            .map_err(|err| failed(format!("cannot bookmark '{source}' as '{target}'"), err))?;
        }
        DatasetChange::Promote { dataset } => {
            super::snapshot_change(access, &dataset, command_line, |pool| {
                pool.promote(&dataset)
            })
            .map_err(|err| failed(format!("cannot promote '{dataset}'"), err))?;
        }
        DatasetChange::DestroyDependents { snapshot } => {
            super::snapshot_change_in_steps(access, &snapshot, command_line, |pool| {
                pool.destroy_with_dependents(&snapshot).map(drop)
            })
            .map_err(|err| failed(format!("cannot destroy '{snapshot}'"), err))?;
        }
        DatasetChange::Rollback {
            snapshot,
            destroy_newer,
            force,
        } => {
            super::rollback(access, &snapshot, destroy_newer, force, command_line)
                .map_err(|err| failed(format!("cannot roll back to '{snapshot}'"), err))?;
        }
        other => unreachable!("not a snapshot change: {other:?}"),
    }
    Ok(())
}
