//! What every command shares: the pool cache, opening a cached pool, and the command line that
//! state-changing commands record in the pool's history.
//!
//! The CLI holds a pool open only for the length of one command: `with_pool` imports it from the
//! devices the cache lists, runs the command, and closes it (which syncs) even when the command
//! failed, so no run leaves a pool half-open. A pool the cache does not know is "not imported".

use crate::cache::PoolCache;
use crate::vdevs::parse_device;
use anyhow::{Context as _, Result, anyhow};
use cairn_device::spec::DeviceSpec;
use cairn_engine::{ImportSource, Pool, PoolOptions};

pub struct Context {
    pub cache: PoolCache,
    /// The command as typed (without `--state-dir`), for `pool history`.
    pub command_line: String,
}

impl Context {
    pub fn new(cache: PoolCache, command_line: String) -> Context {
        Context {
            cache,
            command_line,
        }
    }

    /// Names of every cached pool, sorted.
    pub fn pool_names(&self) -> Result<Vec<String>> {
        Ok(self.cache.load()?.into_keys().collect())
    }

    /// The device specs the cache lists for `pool`.
    pub fn cached_devices(&self, pool: &str) -> Result<Vec<DeviceSpec>> {
        let devices = self.cache.devices(pool)?.ok_or_else(|| {
            anyhow!("no such pool '{pool}' (not imported; try cairn pool import -d DIR)")
        })?;
        devices
            .iter()
            .map(|text| {
                parse_device(text).with_context(|| {
                    format!(
                        "pool cache {} lists a bad device for pool '{pool}'",
                        self.cache.path().display()
                    )
                })
            })
            .collect()
    }

    /// Opens a cached pool; `readonly` opens it for inspection only (nothing is written).
    pub fn open(&self, pool: &str, readonly: bool) -> Result<Pool> {
        let devices = self.cached_devices(pool)?;
        let options = PoolOptions {
            readonly,
            ..PoolOptions::default()
        };
        let absent: Vec<String> = devices
            .iter()
            .filter(|spec| !spec.path.exists())
            .map(|spec| spec.path.display().to_string())
            .collect();
        Pool::import(&ImportSource::Devices(devices), pool, options).with_context(|| {
            if absent.is_empty() {
                format!("cannot open pool '{pool}'")
            } else {
                format!(
                    "cannot open pool '{pool}' (missing devices: {})",
                    absent.join(", ")
                )
            }
        })
    }

    /// Opens `pool`, runs `body`, and closes the pool whatever `body` returned.
    pub fn with_pool<T>(
        &self,
        pool: &str,
        readonly: bool,
        body: impl FnOnce(&Pool) -> Result<T>,
    ) -> Result<T> {
        let handle = self.open(pool, readonly)?;
        let result = body(&handle);
        let closed = handle
            .close()
            .with_context(|| format!("cannot close pool '{pool}' cleanly"));
        match (result, closed) {
            (Err(err), _) => Err(err),
            (Ok(_), Err(err)) => Err(err),
            (Ok(value), Ok(())) => Ok(value),
        }
    }

    /// Appends this command line to the pool's history.
    pub fn record(&self, pool: &Pool) -> Result<()> {
        pool.record_history(self.command_line.clone())
            .with_context(|| format!("cannot record history of pool '{}'", pool.name()))
    }
}

/// The device specs a pool is open on, in vdev order, as the cache stores them.
pub fn device_specs(pool: &Pool) -> Vec<String> {
    pool.tree()
        .leaves()
        .map(|leaf| leaf.spec.to_string())
        .collect()
}

/// The pool part of a dataset name (`tank` of `tank/vol`).
pub fn pool_of(dataset: &str) -> &str {
    dataset.split_once('/').map_or(dataset, |(pool, _)| pool)
}

/// `cairn ARGS...` for the history, dropping `--state-dir DIR`, quoting words with spaces.
pub fn command_line(args: &[String]) -> String {
    let mut words = vec!["cairn".to_string()];
    let mut skip_next = false;
    for arg in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        if arg == "--state-dir" {
            skip_next = true;
            continue;
        }
        if arg.starts_with("--state-dir=") {
            continue;
        }
        if arg.is_empty() || arg.contains(char::is_whitespace) {
            words.push(format!("'{arg}'"));
        } else {
            words.push(arg.clone());
        }
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_lines_leave_out_the_state_dir() {
        let args: Vec<String> = ["--state-dir", "/tmp/s", "create", "-V", "1G", "tank/my vol"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(command_line(&args), "cairn create -V 1G 'tank/my vol'");
        assert_eq!(pool_of("tank/a/b"), "tank");
        assert_eq!(pool_of("tank"), "tank");
    }
}
