//! Which pools a front end works on, and how it gets hold of one.
//!
//! `PoolAccess` is the one way every front end reaches a pool: by name, through the pool cache
//! (the pools this machine imported and their devices). In a one-shot process it opens the pool
//! from those devices for the length of one task and closes it again; inside a server it hands
//! out the server's live pool from `ServedPools`, the registry that the NBD adapter, control
//! requests, FUSE mounts and the metrics page all share, so every front end sees a
//! volume or pool the moment another one creates it.
//!
//! A pool the cache knows but that cannot be opened (device files deleted, labels damaged, a
//! log device missing) is *unavailable*: opening it fails with `PoolsError::Unavailable`, which
//! front ends list as UNAVAIL, skip when working over every pool, and answer `export` by
//! forgetting the pool. It never stops work on another pool. A server keeps no unavailable
//! pool open; it tries again whenever a pool is asked for by name, so a pool whose devices came
//! back is served again.
//!
//! Options come in as parameters (the device opener, a read-trace directory, a memory budget):
//! this library reads no environment and prints nothing.

use crate::cache::{CacheError, PoolCache};
use cairn_device::spec::DeviceSpec;
use cairn_engine::{
    DeviceOpener, EngineError, ImportSource, MemoryBudget, Pool, PoolOptions, default_opener,
};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// The pools a running server holds open, by name, with what its front ends share.
#[derive(Default)]
pub struct ServedPools {
    pub pools: RwLock<BTreeMap<String, Arc<Pool>>>,
    /// The NBD server (per-export I/O statistics).
    pub nbd: OnceLock<Arc<cairn_nbd::NbdServer>>,
    pub started: OnceLock<std::time::Instant>,
    /// The server's memory budget.
    pub budget: OnceLock<MemoryBudget>,
    /// Filesystems mounted through FUSE.
    pub mounts: crate::fuse::Mounts,
    /// The NFS server's statistics, once it serves (`cairn stat nfs`, the analytics).
    pub nfs_stats: OnceLock<Arc<crate::nfs_stats::NfsStats>>,
    /// Filesystems NFS has served calls in, by `POOL/DATASET`, kept weakly (the pool keeps
    /// them open): their calls are counted per dataset for `pool iostat` and `stat fs`.
    nfs_filesystems: parking_lot::Mutex<BTreeMap<String, std::sync::Weak<cairn_fs::Filesystem>>>,
}

impl ServedPools {
    pub fn get(&self, name: &str) -> Option<Arc<Pool>> {
        self.pools.read().get(name).cloned()
    }

    /// Notes that NFS serves `dataset` (`POOL/DATASET`) through `fs`.
    pub fn note_nfs_filesystem(&self, dataset: &str, fs: &Arc<cairn_fs::Filesystem>) {
        let mut served = self.nfs_filesystems.lock();
        let known = served
            .get(dataset)
            .and_then(std::sync::Weak::upgrade)
            .is_some_and(|known| Arc::ptr_eq(&known, fs));
        if !known {
            served.insert(dataset.to_string(), Arc::downgrade(fs));
        }
    }

    /// The filesystems NFS has served calls in and that are still open, by name.
    pub fn nfs_filesystems(&self) -> Vec<(String, Arc<cairn_fs::Filesystem>)> {
        let mut served = self.nfs_filesystems.lock();
        served.retain(|_, fs| fs.strong_count() > 0);
        served
            .iter()
            .filter_map(|(name, fs)| Some((name.clone(), fs.upgrade()?)))
            .collect()
    }

    pub fn insert(&self, pool: Arc<Pool>) {
        self.pools.write().insert(pool.name().to_string(), pool);
    }

    /// Seconds since the server started (0 before it has).
    pub fn uptime_s(&self) -> f64 {
        self.started
            .get()
            .map_or(0.0, |started| started.elapsed().as_secs_f64())
    }

    /// Every served pool, in name order.
    pub fn all(&self) -> Vec<Arc<Pool>> {
        self.pools.read().values().cloned().collect()
    }
}

/// A remembered pool that cannot be opened, and why (the import error with its causes).
#[derive(Debug)]
pub struct PoolUnavailable {
    pub pool: String,
    pub reason: String,
    /// A device is locked by another process that has the pool open: the pool is busy, not
    /// lost, and must not be forgotten.
    pub busy: bool,
}

impl std::fmt::Display for PoolUnavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pool = &self.pool;
        write!(f, "pool '{pool}' is unavailable: {}", self.reason)?;
        if !self.busy {
            // The hint names the CLI's commands, the front end users meet first.
            write!(
                f,
                " (see cairn pool status {pool}; cairn pool export {pool} forgets it)"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for PoolUnavailable {}

/// Why a pool could not be had.
#[derive(Debug, thiserror::Error)]
pub enum PoolsError {
    #[error("no such pool '{0}' (not imported; try cairn pool import -d DIR)")]
    NotImported(String),
    #[error(transparent)]
    Unavailable(#[from] PoolUnavailable),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error("pool cache lists a bad device for pool '{pool}'")]
    BadCachedDevice {
        pool: String,
        #[source]
        source: cairn_device::DeviceError,
    },
    #[error("cannot close pool '{pool}' cleanly")]
    Close {
        pool: String,
        #[source]
        source: Box<EngineError>,
    },
    #[error("cannot unmount {dataset} at {mountpoint}: pool '{pool}' stays imported")]
    Unmount {
        pool: String,
        dataset: String,
        mountpoint: String,
        #[source]
        source: std::io::Error,
    },
}

/// A filesystem unmounted on the way: its dataset and where it was mounted.
pub type UnmountedAt = (String, PathBuf);

impl PoolsError {
    /// The reason, when this says a remembered pool cannot be opened.
    pub fn unavailable(&self) -> Option<&PoolUnavailable> {
        match self {
            PoolsError::Unavailable(unavailable) => Some(unavailable),
            _ => None,
        }
    }
}

/// `err` and its causes, one line (`a: b: c`): a pool's unavailability reason, an error as a
/// front end shows it.
pub fn chain_text(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// Whether another process holds `path` with the exclusive lock an open pool device keeps
/// (`FileDevice` uses `flock`; a shared lock cannot be had while it is held).
fn locked_by_another_process(path: &std::path::Path) -> bool {
    std::fs::File::open(path).is_ok_and(|file| {
        matches!(
            file.try_lock_shared(),
            Err(std::fs::TryLockError::WouldBlock)
        )
    })
}

/// How the pool cache marks a cache device (the SSD tier) among a pool's devices.
pub const CACHE_DEVICE_PREFIX: &str = "cache:";

/// The pool cache's line for a pool imported read-only (`pool import -o readonly=on`): every
/// later open is read-only too, without its space log, until it is exported.
pub const READONLY_ENTRY: &str = "option:readonly=on";

/// A device as the pool cache stores it (a cache device's `cache:` mark taken off), path made
/// absolute.
pub fn parse_cached_device(text: &str) -> Result<DeviceSpec, cairn_device::DeviceError> {
    let text = text.strip_prefix(CACHE_DEVICE_PREFIX).unwrap_or(text);
    let mut spec = DeviceSpec::parse(text)?;
    if let Ok(path) = std::path::absolute(&spec.path) {
        spec.path = path;
    }
    Ok(spec)
}

/// The device specs a pool is open on, in vdev order, then its cache devices (marked), as the
/// cache stores them. A leaf import did not find where it looked is left out: the path its
/// label remembers may be a stale copy or another pool's device (`Pool::is_unlocated`), so
/// no later open may try it; the pool opens DEGRADED without it until imported again.
pub fn device_specs(pool: &Pool) -> Vec<String> {
    pool.tree()
        .leaves()
        .filter(|leaf| !pool.is_unlocated(leaf.guid))
        .map(|leaf| leaf.spec.to_string())
        .chain(
            pool.cache_specs()
                .iter()
                .map(|spec| format!("{CACHE_DEVICE_PREFIX}{spec}")),
        )
        .chain(pool.without_space_log().then(|| READONLY_ENTRY.to_string()))
        .collect()
}

/// How a front end reaches pools: the cache, the server's registry when there is one, and the
/// options every pool it opens gets.
pub struct PoolAccess {
    pub cache: PoolCache,
    /// Set inside a server: its live pools, used instead of opening devices (which it holds).
    pub served: Option<Arc<ServedPools>>,
    /// Opens every device of every pool (one power switch for all of them under fault
    /// injection).
    pub opener: DeviceOpener,
    /// Volumes append their clients' reads to traces here (a benchmark diagnostic).
    pub read_trace_dir: Option<PathBuf>,
    /// Bytes each cache device may be written per day after its first fill (`cairn serve
    /// --l2-write-max-per-day`; `None`: no limit).
    pub l2_write_bytes_per_day: Option<u64>,
}

impl PoolAccess {
    /// Access through `cache` with the engine's default device opener, no server.
    pub fn new(cache: PoolCache) -> PoolAccess {
        PoolAccess {
            cache,
            served: None,
            opener: default_opener(),
            read_trace_dir: None,
            l2_write_bytes_per_day: None,
        }
    }

    /// Options for a pool opened, created or imported here: inside a server, its dirty data
    /// is limited by the server's memory budget like the pools the server started with.
    pub fn pool_options(&self) -> PoolOptions {
        let budget = self.served.as_ref().and_then(|served| served.budget.get());
        self.pool_options_under(budget)
    }

    /// Options under a memory budget (`None`: the engine's defaults): the budget's dirty
    /// data, further limited to what the pool syncs in `SYNC_TARGET_MS`, and its cache-device
    /// index allowance; and the cache devices' daily write budget.
    pub fn pool_options_under(&self, budget: Option<&MemoryBudget>) -> PoolOptions {
        let mut options = PoolOptions {
            opener: self.opener.clone(),
            read_trace_dir: self.read_trace_dir.clone(),
            ..PoolOptions::default()
        };
        options.l2.write_bytes_per_day = self.l2_write_bytes_per_day;
        if let Some(budget) = budget {
            options.txg.dirty_bytes_max = budget.dirty_bytes_max;
            options.txg.sync_target_ms = cairn_engine::SYNC_TARGET_MS;
            options.l2.index_bytes_max = budget.l2_index_bytes;
        }
        options
    }

    /// Names of every cached pool, sorted.
    pub fn pool_names(&self) -> Result<Vec<String>, PoolsError> {
        Ok(self.cache.load()?.into_keys().collect())
    }

    /// The pools named, or every imported pool when none is.
    pub fn pools_or_all(&self, pools: &[String]) -> Result<Vec<String>, PoolsError> {
        if pools.is_empty() {
            self.pool_names()
        } else {
            Ok(pools.to_vec())
        }
    }

    /// The device specs the cache lists for `pool`: its vdev tree's devices.
    pub fn cached_devices(&self, pool: &str) -> Result<Vec<DeviceSpec>, PoolsError> {
        Ok(self.cached_device_sets(pool)?.0)
    }

    /// The cache lists for `pool`: its vdev tree's devices, and its cache devices.
    pub fn cached_device_sets(
        &self,
        pool: &str,
    ) -> Result<(Vec<DeviceSpec>, Vec<DeviceSpec>), PoolsError> {
        let devices = self
            .cache
            .devices(pool)?
            .ok_or_else(|| PoolsError::NotImported(pool.to_string()))?;
        let (mut members, mut cache) = (Vec::new(), Vec::new());
        for text in devices.iter().filter(|text| *text != READONLY_ENTRY) {
            let spec = parse_cached_device(text).map_err(|source| PoolsError::BadCachedDevice {
                pool: pool.to_string(),
                source,
            })?;
            if text.starts_with(CACHE_DEVICE_PREFIX) {
                cache.push(spec);
            } else {
                members.push(spec);
            }
        }
        Ok((members, cache))
    }

    /// Opens a cached pool; `readonly` opens it for inspection only (nothing is written). A
    /// pool the cache lists but that does not open fails with `PoolsError::Unavailable`.
    pub fn open(&self, pool: &str, readonly: bool) -> Result<Pool, PoolsError> {
        let options = PoolOptions {
            readonly,
            ..self.pool_options()
        };
        self.open_with(pool, options)
    }

    /// Whether `pool` was imported read-only (`READONLY_ENTRY`).
    pub fn imported_readonly(&self, pool: &str) -> Result<bool, PoolsError> {
        Ok(self
            .cache
            .devices(pool)?
            .is_some_and(|devices| devices.iter().any(|text| text == READONLY_ENTRY)))
    }

    /// `open` with the caller's options (its cache devices are the ones the pool cache lists).
    /// A pool imported read-only opens read-only, without its space log, whatever is asked.
    pub fn open_with(&self, pool: &str, mut options: PoolOptions) -> Result<Pool, PoolsError> {
        if self.imported_readonly(pool)? {
            options.readonly = true;
            options.without_space_log = true;
        }
        let unavailable = |reason: String, busy: bool| {
            PoolsError::Unavailable(PoolUnavailable {
                pool: pool.to_string(),
                reason,
                busy,
            })
        };
        let devices = match self.cached_device_sets(pool) {
            Ok((devices, cache_devices)) => {
                options.cache_devices = cache_devices;
                devices
            }
            Err(err @ PoolsError::BadCachedDevice { .. }) => {
                return Err(unavailable(chain_text(&err), false));
            }
            Err(err) => return Err(err),
        };
        let absent: Vec<String> = devices
            .iter()
            .filter(|spec| !spec.path.exists())
            .map(|spec| spec.path.display().to_string())
            .collect();
        Pool::import(&ImportSource::Devices(devices.clone()), pool, options).map_err(|err| {
            let busy = devices
                .iter()
                .any(|spec| locked_by_another_process(&spec.path));
            let reason = chain_text(&err);
            if absent.is_empty() {
                unavailable(reason, busy)
            } else {
                unavailable(
                    format!("missing devices {}; {reason}", absent.join(", ")),
                    busy,
                )
            }
        })
    }

    /// The server's live pool `pool`. A remembered pool the server does not hold (it could not
    /// be opened at start, or since) is opened again now.
    pub fn served_pool(&self, served: &ServedPools, pool: &str) -> Result<Arc<Pool>, PoolsError> {
        if let Some(handle) = served.get(pool) {
            return Ok(handle);
        }
        let handle = Arc::new(self.open(pool, false)?);
        served.insert(handle.clone());
        Ok(handle)
    }

    /// Takes a pool for good (export, destroy): out of the server's set when served, else
    /// opened from its devices. Its mounted filesystems are unmounted first; returns the
    /// pool and the (dataset, mountpoint) of each one unmounted. If one cannot be unmounted
    /// (busy), the pool stays imported and served with it mounted (those unmounted before it
    /// stay unmounted).
    pub fn take(&self, pool: &str) -> Result<(Arc<Pool>, Vec<UnmountedAt>), PoolsError> {
        if let Some(served) = &self.served {
            let handle = self.served_pool(served, pool)?;
            // Its filesystems go first: nothing may reach a pool being exported.
            let mut unmounted = Vec::new();
            let mut refusal = None;
            for (dataset, mountpoint, result) in served.mounts.unmount_all(Some(pool)) {
                match result {
                    Ok(()) => unmounted.push((dataset, mountpoint)),
                    Err(source) => {
                        refusal.get_or_insert(PoolsError::Unmount {
                            pool: pool.to_string(),
                            dataset,
                            mountpoint: mountpoint.display().to_string(),
                            source,
                        });
                    }
                }
            }
            if let Some(refusal) = refusal {
                return Err(refusal);
            }
            served.pools.write().remove(pool);
            return Ok((handle, unmounted));
        }
        Ok((Arc::new(self.open(pool, false)?), Vec::new()))
    }

    /// Hands a newly created or imported pool back: a server keeps serving it; a one-shot
    /// process closes it.
    pub fn adopt(&self, pool: Pool) -> Result<(), PoolsError> {
        match &self.served {
            Some(served) => {
                served.insert(Arc::new(pool));
                Ok(())
            }
            None => {
                let name = pool.name().to_string();
                pool.close().map_err(|source| PoolsError::Close {
                    pool: name,
                    source: Box::new(source),
                })
            }
        }
    }

    /// Opens `pool`, runs `body`, and closes the pool whatever `body` returned. When served,
    /// `body` runs on the server's live pool, which stays open.
    pub fn with_pool<T, E: From<PoolsError>>(
        &self,
        pool: &str,
        readonly: bool,
        body: impl FnOnce(&Pool) -> Result<T, E>,
    ) -> Result<T, E> {
        if let Some(served) = &self.served {
            let handle = self.served_pool(served, pool)?;
            return body(&handle);
        }
        let handle = self.open(pool, readonly)?;
        let result = body(&handle);
        let closed = handle.close().map_err(|source| PoolsError::Close {
            pool: pool.to_string(),
            source: Box::new(source),
        });
        match (result, closed) {
            (Err(err), _) => Err(err),
            (Ok(_), Err(err)) => Err(err.into()),
            (Ok(value), Ok(())) => Ok(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_the_cache_does_not_know_is_not_imported() {
        let dir = tempfile::tempdir().unwrap();
        let access = PoolAccess::new(PoolCache::new(dir.path().to_path_buf()));
        assert!(matches!(
            access.open("tank", true),
            Err(PoolsError::NotImported(name)) if name == "tank"
        ));
        assert!(access.pool_names().unwrap().is_empty());
    }

    #[test]
    fn a_remembered_pool_whose_devices_are_gone_is_unavailable_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let cache = PoolCache::new(dir.path().join("state"));
        let gone = dir.path().join("gone.img");
        cache.insert("tank", &[gone.display().to_string()]).unwrap();
        let access = PoolAccess::new(cache);
        let Err(err) = access.open("tank", false) else {
            panic!("a pool without devices opened");
        };
        let unavailable = err.unavailable().expect("unavailable");
        assert!(!unavailable.busy);
        assert!(
            unavailable.reason.contains("missing devices")
                && unavailable.reason.contains("gone.img"),
            "{}",
            unavailable.reason
        );
        assert!(err.to_string().contains("cairn pool export"), "{err}");
    }
}
