//! Pool shape changes, all or nothing: create a pool, add log and cache devices.
//!
//! A create that fails after the engine made the pool (its cache devices refused, its final
//! sync failed) destroys or forgets it again and removes the files it created, so a failed
//! create leaves nothing half-made. A log device that failed while being added (the txg went
//! on without it, as it does for a log device) is removed again and the change fails naming
//! it, rather than succeeding with a FAULTED device in the pool. The pool cache lists a pool
//! or device only once the engine has it durably. Uses `devices.rs`.

use super::AdminError;
use super::devices::{CreatedFiles, check_devices_exist, refuse_imported_members};
use crate::pools::{PoolAccess, device_specs};
use cairn_device::spec::DeviceSpec;
use cairn_engine::{CreateOptions, EngineError, Pool, VdevGroup};

/// What `add_devices` added, as people name it (`log mirror-1`, `cache /dev/nvme0n1`).
pub type AddedDevices = Vec<String>;

/// Creates pool `name` on `groups` with `cache_devices`, and remembers it in the pool cache
/// (a server keeps it open and serves it; a one-shot process closes it, syncing).
pub fn create_pool(
    access: &PoolAccess,
    name: &str,
    groups: &[VdevGroup],
    cache_devices: &[DeviceSpec],
    options: &CreateOptions,
) -> Result<Vec<String>, AdminError> {
    if access.cache.devices(name)?.is_some() {
        return Err(AdminError::AlreadyImported(name.to_string()));
    }
    if groups.is_empty() {
        return Err(AdminError::NoDataDevices);
    }
    let every = with_cache_devices(groups, cache_devices);
    refuse_imported_members(&access.cache, &every, None)?;
    check_devices_exist(&every, options.create_size_bytes)?;
    let created = CreatedFiles::missing(&every);
    let pool_options = access.pool_options();
    let opener = pool_options.opener.clone();
    let pool = Pool::create(name, groups, options, pool_options).map_err(|err| {
        created.remove();
        match err {
            // The engine's message says what was wrong; the caller says what failed.
            EngineError::Create(reason) => AdminError::Create(reason),
            other => other.into(),
        }
    })?;
    if !cache_devices.is_empty()
        && let Err(err) = pool.add_cache_devices(
            cache_devices,
            options.create_size_bytes,
            options.force,
            &opener,
        )
    {
        let _ = pool.destroy();
        drop(pool);
        created.remove();
        return Err(err.into());
    }
    let warnings = pool.layout_warnings();
    remember_created(access, pool, &created)?;
    Ok(warnings)
}

/// Puts a pool `Pool::create` made durable into the pool cache. A one-shot process closes it
/// first: if that fails, the pool is not remembered and the files made for it are removed.
fn remember_created(
    access: &PoolAccess,
    pool: Pool,
    created: &CreatedFiles,
) -> Result<(), AdminError> {
    let name = pool.name().to_string();
    let specs = device_specs(&pool);
    let not_remembered = |source| AdminError::NotRemembered {
        pool: name.clone(),
        source,
    };
    if access.served.is_some() {
        access.cache.insert(&name, &specs).map_err(not_remembered)?;
        return Ok(access.adopt(pool)?);
    }
    if let Err(err) = pool.close() {
        drop(pool);
        created.remove();
        return Err(AdminError::FinalSync(Box::new(err)));
    }
    access.cache.insert(&name, &specs).map_err(not_remembered)
}

/// Adds log vdevs (`groups`, each a log group) and cache devices to pool `name`, records
/// `history_entry` in its history, and updates the pool cache.
pub fn add_devices(
    access: &PoolAccess,
    name: &str,
    groups: &[VdevGroup],
    cache_devices: &[DeviceSpec],
    options: &CreateOptions,
    history_entry: &str,
) -> Result<AddedDevices, AdminError> {
    if groups.iter().any(|group| !group.log) {
        return Err(AdminError::DataDevicesNotAddable);
    }
    let every = with_cache_devices(groups, cache_devices);
    // Devices of `name` itself are the engine's to refuse ("already in pool").
    refuse_imported_members(&access.cache, &every, Some(name))?;
    check_devices_exist(&every, options.create_size_bytes)?;
    let created = CreatedFiles::missing(&every);
    let added = access.with_pool(name, false, |pool| {
        let opener = access.pool_options().opener;
        let mut added = Vec::new();
        if !groups.is_empty() {
            let tops = pool.add_log_vdevs(groups, options, &opener)?;
            undo_failed_additions(pool, &tops)?;
            added.extend(tops.into_iter().map(|top| format!("log {top}")));
        }
        if !cache_devices.is_empty() {
            pool.add_cache_devices(
                cache_devices,
                options.create_size_bytes,
                options.force,
                &opener,
            )?;
            added.extend(cache_devices.iter().map(|spec| format!("cache {spec}")));
        }
        access
            .cache
            .insert(name, &device_specs(pool))
            .map_err(|source| AdminError::CacheNotUpdated {
                pool: name.to_string(),
                source,
            })?;
        record_history(pool, history_entry)?;
        Ok(added)
    });
    if added.is_err() {
        created.remove();
    }
    added
}

/// Appends a command to the pool's history; a pool imported read-only writes nothing.
pub(super) fn record_history(pool: &Pool, entry: &str) -> Result<(), AdminError> {
    if pool.is_readonly() {
        return Ok(());
    }
    pool.record_history(entry.to_string())
        .map_err(|source| AdminError::History {
            pool: pool.name().to_string(),
            source: Box::new(source),
        })
}

/// `groups` and the cache devices as one list of groups, for the checks that look at every
/// device a change takes.
fn with_cache_devices(groups: &[VdevGroup], cache_devices: &[DeviceSpec]) -> Vec<VdevGroup> {
    let mut every = groups.to_vec();
    every.extend(cache_devices.iter().map(|spec| VdevGroup {
        mirror: false,
        raidz_parity: None,
        log: false,
        devices: vec![spec.clone()],
    }));
    every
}

/// Fails, after removing them again, when log vdevs among `added` have a leaf that is not
/// online: a device that failed while being added.
fn undo_failed_additions(pool: &Pool, added: &[String]) -> Result<(), AdminError> {
    let failed: Vec<(String, Vec<String>)> = pool
        .status()
        .tops
        .into_iter()
        .filter(|top| added.contains(&top.name))
        .map(|top| {
            let leaves = top
                .leaves
                .iter()
                .filter(|leaf| leaf.health != cairn_pool::vdev::Health::Online)
                .map(|leaf| format!("{} ({})", leaf.name, leaf.health.as_str()))
                .collect();
            (top.name, leaves)
        })
        .filter(|(_, leaves): &(String, Vec<String>)| !leaves.is_empty())
        .collect();
    if failed.is_empty() {
        return Ok(());
    }
    let leaves: Vec<&str> = failed
        .iter()
        .flat_map(|(_, leaves)| leaves.iter().map(String::as_str))
        .collect();
    let mut message = format!("{} failed while being added", leaves.join(", "));
    for (top, _) in &failed {
        match pool.remove_log_vdev(top) {
            Ok(()) => message.push_str(&format!("; {top} was removed again")),
            Err(err) => message.push_str(&format!(
                "; {top} could not be removed again ({}): remove it with cairn pool remove {} {top}",
                cairn_device::error_chain(&err),
                pool.name()
            )),
        }
    }
    Err(AdminError::FailedAdditions(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_devices_are_checked_as_plain_groups() {
        let spec = |path: &str| DeviceSpec::parse(path).unwrap();
        let groups = [VdevGroup {
            mirror: true,
            raidz_parity: None,
            log: false,
            devices: vec![spec("/a"), spec("/b")],
        }];
        let every = with_cache_devices(&groups, &[spec("/c0"), spec("/c1")]);
        assert_eq!(every.len(), 3);
        assert!(every[1..].iter().all(|group| !group.mirror && !group.log));
        assert_eq!(every[2].devices, vec![spec("/c1")]);
    }
}
