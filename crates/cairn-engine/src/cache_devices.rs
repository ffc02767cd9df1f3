//! A pool's cache devices: the SSD tier (`cairn-l2arc`) below the RAM cache.
//!
//! Cache devices hold copies only, so they are not part of the vdev tree: no label, no place
//! in the uberblock's guid sum, no redundancy. A pool imports and stays ONLINE whatever
//! happens to them; one that is missing at import is remembered as such (`pool status` lists
//! it UNAVAIL) and one that fails later is FAULTED by the tier itself. Each carries its own
//! superblock naming the pool's guid, which is how import recognises them among the devices
//! it is given (the ones the front end remembered, or every file of an import directory).
//!
//! Life: `add_cache_devices` writes a new tier layout on each device (refusing one that holds
//! data unless forced, like `pool add`); import reopens them and the tier rebuilds its index in
//! the background; `remove_cache_device` stops using one; closing the pool seals what is being
//! written so a restart finds it. Read-only pools (opened for checking) have no tier.

use crate::import::ImportSource;
use crate::pool::{Pool, PoolOptions};
use crate::{DeviceOpener, EngineError, new_guid};
use cairn_device::spec::DeviceSpec;
use cairn_l2arc::{DeviceReport, L2Arc};
use std::sync::Arc;

/// What `pool status` shows of one cache device.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CacheDeviceStatus {
    pub name: String,
    /// `None` when the device is missing (its reason in `missing`).
    pub report: Option<DeviceReport>,
    pub missing: Option<String>,
}

impl Pool {
    /// The pool's cache-device tier (`None` for a pool opened read-only).
    pub fn l2(&self) -> Option<&Arc<L2Arc>> {
        self.l2.as_ref()
    }

    fn tier(&self) -> Result<&Arc<L2Arc>, EngineError> {
        self.l2
            .as_ref()
            .ok_or_else(|| EngineError::ReadOnlyPool(self.core.name.clone()))
    }

    /// Adds cache devices: each must hold no data (unless `force`) and belong to no pool.
    /// Missing files are created (sparse) with `create_size` bytes. All or nothing: a device
    /// that fails leaves the ones added before it removed again.
    pub fn add_cache_devices(
        &self,
        specs: &[DeviceSpec],
        create_size: Option<u64>,
        force: bool,
        opener: &DeviceOpener,
    ) -> Result<(), EngineError> {
        let tier = self.tier()?;
        let known: Vec<String> = self
            .tree()
            .leaves()
            .map(|leaf| leaf.spec.path.display().to_string())
            .chain(
                self.cache_specs()
                    .iter()
                    .map(|spec| spec.path.display().to_string()),
            )
            .collect();
        let mut added: Vec<String> = Vec::new();
        let result = (|| {
            for spec in specs {
                let path = spec.path.display().to_string();
                if known.contains(&path) || added.iter().any(|name| name.ends_with(&path)) {
                    return Err(EngineError::Layout(format!(
                        "{spec} is already a device of pool '{}'",
                        self.core.name
                    )));
                }
                let device = opener(spec, create_size)?;
                if !force {
                    crate::vdev_groups::check_free(spec, device.as_ref())?;
                }
                let name = spec.to_string();
                tier.add_new(&name, device, new_guid(), self.core.guid)
                    .map_err(EngineError::Cache)?;
                added.push(name);
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.cache_devices
                    .lock()
                    .extend(specs.iter().map(|spec| (spec.clone(), None::<String>)));
                self.follow_cache_devices();
                Ok(())
            }
            Err(err) => {
                for name in &added {
                    let _ = tier.remove(name);
                }
                Err(err)
            }
        }
    }

    /// Stops using the cache device `name` (as `pool status` names it, or its path).
    pub fn remove_cache_device(&self, name: &str) -> Result<(), EngineError> {
        let mut devices = self.cache_devices.lock();
        let position = devices
            .iter()
            .position(|(spec, _)| {
                spec.to_string() == name || spec.path.display().to_string() == name
            })
            .ok_or_else(|| {
                EngineError::Layout(format!("'{name}' is not a cache device of this pool"))
            })?;
        let (spec, missing) = devices.remove(position);
        if missing.is_none()
            && let Some(tier) = &self.l2
        {
            tier.remove(&spec.to_string()).map_err(EngineError::Cache)?;
            self.follow_cache_devices();
        }
        Ok(())
    }

    /// The RAM cache's admission sketches count for the cache devices too: sized anew when
    /// they change.
    fn follow_cache_devices(&self) {
        self.core.mos.cached_io().cache().follow_second_tiers();
    }

    /// The cache devices the pool knows (attached or missing), as the pool cache lists them.
    pub fn cache_specs(&self) -> Vec<DeviceSpec> {
        self.cache_devices
            .lock()
            .iter()
            .map(|(spec, _)| spec.clone())
            .collect()
    }

    /// The cache tier's counters as (name, value), for `cairn stat l2arc` and the analytics
    /// (`None`: no tier, the pool is open read-only). Sizes in bytes; the rest are counts.
    pub fn l2arc_fields(&self) -> Option<Vec<(&'static str, u64)>> {
        use std::sync::atomic::Ordering::Relaxed;
        let tier = self.l2()?;
        let counters = tier.counters();
        let reports = tier.reports();
        let (blocks, ram_bytes) = tier.index_usage();
        Some(vec![
            ("devices", reports.len() as u64),
            ("size_bytes", reports.iter().map(|r| r.size_bytes).sum()),
            ("alloc_bytes", reports.iter().map(|r| r.alloc_bytes).sum()),
            ("hits", counters.hits.load(Relaxed)),
            ("misses", counters.misses.load(Relaxed)),
            ("hit_bytes", counters.hit_bytes.load(Relaxed)),
            ("feed_blocks", counters.feed_blocks.load(Relaxed)),
            ("feed_bytes", counters.feed_bytes.load(Relaxed)),
            ("feed_dropped", counters.feed_dropped.load(Relaxed)),
            ("feed_over_budget", counters.feed_over_budget.load(Relaxed)),
            ("copied_forward", counters.copied_forward.load(Relaxed)),
            ("evicted_segments", counters.evicted_segments.load(Relaxed)),
            ("evicted_blocks", counters.evicted_blocks.load(Relaxed)),
            ("bad_reads", counters.bad_reads.load(Relaxed)),
            (
                "fingerprint_collisions",
                counters.fingerprint_collisions.load(Relaxed),
            ),
            ("rebuild_segments", counters.rebuild_segments.load(Relaxed)),
            ("rebuild_blocks", counters.rebuild_blocks.load(Relaxed)),
            (
                "rebuild_pending_segments",
                reports.iter().map(|r| r.rebuild_pending as u64).sum(),
            ),
            ("indexed_blocks", blocks),
            ("index_ram_bytes", ram_bytes),
            // The tier's share of the RAM tier's admission sketch (grown with the blocks the
            // tiers below hold; shared by the pools' tiers by their blocks): RAM the tier costs
            // beside its index.
            ("sketch_ram_bytes", {
                let (sketch_bytes, below_blocks) =
                    self.core.mos.cached_io().cache().second_tier_sketch();
                (u128::from(sketch_bytes) * u128::from(blocks))
                    .checked_div(u128::from(below_blocks))
                    .map_or(0, |share| share.min(u128::from(sketch_bytes)) as u64)
            }),
            ("faulted_devices", {
                reports
                    .iter()
                    .filter(|r| r.health == cairn_l2arc::L2Health::Faulted)
                    .count() as u64
            }),
            // Per device and day (0: no budget), and what all devices may still be written now.
            (
                "write_budget_bytes_per_day",
                tier.config().write_bytes_per_day.unwrap_or(0),
            ),
            (
                "write_budget_left_bytes",
                reports
                    .iter()
                    .filter_map(|r| r.write_budget_left_bytes)
                    .sum(),
            ),
        ])
    }

    /// Each cache device's state, in the order they were added.
    pub fn cache_status(&self) -> Vec<CacheDeviceStatus> {
        let reports = self
            .l2
            .as_ref()
            .map(|tier| tier.reports())
            .unwrap_or_default();
        self.cache_devices
            .lock()
            .iter()
            .map(|(spec, missing)| {
                let name = spec.to_string();
                CacheDeviceStatus {
                    report: reports.iter().find(|report| report.name == name).cloned(),
                    missing: missing.clone(),
                    name,
                }
            })
            .collect()
    }

    /// At import: opens the cache devices the front end remembered (`PoolOptions::
    /// cache_devices`; one that cannot be opened is remembered missing, with a note), and for
    /// an import from directories, any device there whose tier superblock names this pool.
    pub(crate) fn find_cache_devices(&mut self, source: &ImportSource, options: &PoolOptions) {
        if self.l2.is_none() {
            return;
        }
        for spec in &options.cache_devices {
            if let Err(err) = self.open_cache_device(spec, &options.opener) {
                let reason = crate::error_chain(&err);
                self.notes.push(format!(
                    "pool '{}': cache device {spec} is unavailable ({reason}); reads go to the pool's disks",
                    self.core.name
                ));
                self.cache_devices.lock().push((spec.clone(), Some(reason)));
            }
        }
        if matches!(source, ImportSource::Devices(_)) {
            self.follow_cache_devices();
            return;
        }
        let known: Vec<std::path::PathBuf> = self
            .tree()
            .leaves()
            .map(|leaf| leaf.spec.path.clone())
            .chain(self.cache_specs().into_iter().map(|spec| spec.path))
            .collect();
        for path in crate::import::candidate_paths(source) {
            if known.contains(&path) {
                continue;
            }
            // A file of the directory that is not one of our cache devices is simply not one.
            let _ = self.open_cache_device(&DeviceSpec { path, model: None }, &options.opener);
        }
        self.follow_cache_devices();
    }

    fn open_cache_device(
        &self,
        spec: &DeviceSpec,
        opener: &DeviceOpener,
    ) -> Result<(), EngineError> {
        let tier = self.tier()?;
        let device = opener(spec, None)?;
        tier.open_existing(&spec.to_string(), device, self.core.guid)
            .map_err(EngineError::Cache)?;
        self.cache_devices.lock().push((spec.clone(), None));
        Ok(())
    }
}
