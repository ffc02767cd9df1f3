//! What every command shares: the pool cache, opening a cached pool, and the command line that
//! state-changing commands record in the pool's history.
//!
//! The CLI holds a pool open only for the length of one command: `with_pool` imports it from the
//! devices the cache lists, runs the command, and closes it (which syncs) even when the command
//! failed, so no run leaves a pool half-open. A pool the cache does not know is "not imported".
//!
//! A pool the cache knows but that cannot be opened (device files deleted, labels damaged, a
//! log device missing) is *unavailable*: opening it fails with a `PoolUnavailable` error (found
//! with `unavailable_reason`), which `pool list`/`status` show as UNAVAIL, commands over every
//! pool skip with a note, and `pool export`/`destroy -f` answer by forgetting the pool. It
//! never stops a command on another pool. A server keeps no unavailable pool open; it tries
//! again whenever a command names it, so a pool whose devices came back is served again.

use crate::cache::PoolCache;
use crate::vdevs::parse_device;
use anyhow::{Context as _, Result, anyhow};
use cairn_device::spec::DeviceSpec;
use cairn_engine::{ImportSource, Pool, PoolOptions};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

/// Where a command's output goes: the process's stdout/stderr, or buffers when a running server
/// executes a forwarded command on a client's behalf.
pub struct Output {
    sink: Mutex<Box<dyn Write + Send>>,
}

impl Output {
    pub fn stdout() -> Output {
        Output {
            sink: Mutex::new(Box::new(std::io::stdout())),
        }
    }

    pub fn stderr() -> Output {
        Output {
            sink: Mutex::new(Box::new(std::io::stderr())),
        }
    }

    /// An output collecting into a shared buffer.
    pub fn buffer() -> (Output, Arc<Mutex<Vec<u8>>>) {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let output = Output {
            sink: Mutex::new(Box::new(SharedBuffer(buffer.clone()))),
        };
        (output, buffer)
    }

    /// Writes formatted text; a reader that went away is not an error worth reporting.
    pub fn text(&self, args: std::fmt::Arguments<'_>) {
        let mut sink = self.sink.lock();
        let _ = sink.write_fmt(args);
        let _ = sink.flush();
    }
}

struct SharedBuffer(Arc<Mutex<Vec<u8>>>);

impl Write for SharedBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `println!` for command output: `say!(ctx, "...", args)`.
macro_rules! say {
    ($ctx:expr) => {
        $ctx.out.text(format_args!("\n"))
    };
    ($ctx:expr, $($arg:tt)*) => {
        $ctx.out.text(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for command output.
macro_rules! say_raw {
    ($ctx:expr, $($arg:tt)*) => {
        $ctx.out.text(format_args!($($arg)*))
    };
}

/// `eprintln!` for progress and diagnostics.
macro_rules! shout {
    ($ctx:expr, $($arg:tt)*) => {
        $ctx.err.text(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {say, say_raw, shout};

pub struct Context {
    pub cache: PoolCache,
    /// The command as typed (without `--state-dir`), for `pool history`.
    pub command_line: String,
    pub out: Output,
    pub err: Output,
    /// Set when a running server executes a forwarded command: its live pools, used instead
    /// of opening devices (which the server holds).
    pub served: Option<Arc<ServedPools>>,
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
        if self.busy {
            write!(f, "pool '{pool}' is unavailable: {}", self.reason)
        } else {
            write!(
                f,
                "pool '{pool}' is unavailable: {} (see cairn pool status {pool}; cairn pool export {pool} forgets it)",
                self.reason
            )
        }
    }
}

impl std::error::Error for PoolUnavailable {}

/// The reason, when `err` says a remembered pool cannot be opened.
pub fn unavailable_reason(err: &anyhow::Error) -> Option<&str> {
    err.downcast_ref::<PoolUnavailable>()
        .map(|unavailable| unavailable.reason.as_str())
}

/// Whether `err` says a remembered pool cannot be opened because another process has it open.
pub fn unavailable_busy(err: &anyhow::Error) -> bool {
    err.downcast_ref::<PoolUnavailable>()
        .is_some_and(|unavailable| unavailable.busy)
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

/// The pools a running server holds open, by name, and its NBD server (for iostat).
#[derive(Default)]
pub struct ServedPools {
    pub pools: RwLock<BTreeMap<String, Arc<Pool>>>,
    pub nbd: std::sync::OnceLock<Arc<cairn_nbd::NbdServer>>,
    pub started: std::sync::OnceLock<std::time::Instant>,
    /// The server's memory budget (`cairn stat memory`).
    pub budget: std::sync::OnceLock<cairn_engine::MemoryBudget>,
}

/// Pool options under a memory budget (`None`: the engine's defaults): the budget's dirty
/// data, further limited to what the pool syncs in `SYNC_TARGET_MS`.
pub fn pool_options_for(budget: Option<&cairn_engine::MemoryBudget>) -> PoolOptions {
    let environment = crate::environment::get();
    let mut options = PoolOptions {
        opener: environment.opener.clone(),
        read_trace_dir: environment.read_trace_dir.clone(),
        ..PoolOptions::default()
    };
    if let Some(budget) = budget {
        options.txg.dirty_bytes_max = budget.dirty_bytes_max;
        options.txg.sync_target_ms = cairn_engine::SYNC_TARGET_MS;
    }
    options
}

impl ServedPools {
    pub fn get(&self, name: &str) -> Option<Arc<Pool>> {
        self.pools.read().get(name).cloned()
    }
}

impl Context {
    pub fn new(cache: PoolCache, command_line: String) -> Context {
        Context {
            cache,
            command_line,
            out: Output::stdout(),
            err: Output::stderr(),
            served: None,
        }
    }

    /// Whether progress may be drawn on this process's terminal.
    pub fn interactive(&self) -> bool {
        use std::io::IsTerminal;
        self.served.is_none() && std::io::stderr().is_terminal()
    }

    /// Takes a pool for good (export, destroy): out of the server's set when served, else
    /// opened from its devices.
    pub fn take(&self, pool: &str) -> Result<Arc<Pool>> {
        if let Some(served) = &self.served {
            let handle = self.served_pool(served, pool)?;
            served.pools.write().remove(pool);
            return Ok(handle);
        }
        Ok(Arc::new(self.open(pool, false)?))
    }

    /// The server's live pool `pool`. A remembered pool the server does not hold (it could not
    /// be opened at start, or since) is opened again now, so one whose devices came back is
    /// served again; if it still cannot be opened, the error is `PoolUnavailable`.
    fn served_pool(&self, served: &ServedPools, pool: &str) -> Result<Arc<Pool>> {
        if let Some(handle) = served.get(pool) {
            return Ok(handle);
        }
        let handle = Arc::new(self.open(pool, false)?);
        served
            .pools
            .write()
            .insert(pool.to_string(), handle.clone());
        Ok(handle)
    }

    /// Hands a newly created or imported pool back: the server keeps serving it; a one-shot
    /// command closes it.
    pub fn adopt(&self, pool: Pool) -> Result<()> {
        match &self.served {
            Some(served) => {
                served
                    .pools
                    .write()
                    .insert(pool.name().to_string(), Arc::new(pool));
                Ok(())
            }
            None => {
                let name = pool.name().to_string();
                pool.close()
                    .with_context(|| format!("cannot close pool '{name}' cleanly"))
            }
        }
    }

    /// Names of every cached pool, sorted.
    pub fn pool_names(&self) -> Result<Vec<String>> {
        Ok(self.cache.load()?.into_keys().collect())
    }

    /// The pools a command names, or every imported pool when it names none.
    pub fn pools_or_all(&self, pools: &[String]) -> Result<Vec<String>> {
        if pools.is_empty() {
            self.pool_names()
        } else {
            Ok(pools.to_vec())
        }
    }

    /// For commands over every pool (the user named none): a pool that cannot be opened is
    /// noted on stderr and skipped (`Ok(None)`) so the others are still served; when the user
    /// named it, or for any other failure, the error stands.
    pub fn skip_unavailable<T>(&self, result: Result<T>, named: bool) -> Result<Option<T>> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(err) if !named && unavailable_reason(&err).is_some() => {
                self.err.text(format_args!("cairn: {err:#}\n"));
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// The device specs the cache lists for `pool`.
    pub fn cached_devices(&self, pool: &str) -> Result<Vec<DeviceSpec>> {
        let devices = self
            .cache
            .devices(pool)?
            .ok_or_else(|| not_imported(pool))?;
        self.parse_cached(pool, &devices)
    }

    fn parse_cached(&self, pool: &str, devices: &[String]) -> Result<Vec<DeviceSpec>> {
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

    /// Opens a cached pool; `readonly` opens it for inspection only (nothing is written). A
    /// pool the cache lists but that does not open fails with `PoolUnavailable`.
    pub fn open(&self, pool: &str, readonly: bool) -> Result<Pool> {
        let options = PoolOptions {
            readonly,
            ..self.pool_options()
        };
        self.open_with(pool, options)
    }

    /// Options for a pool this command opens, creates or imports: inside a server, its dirty
    /// data is limited by the server's memory budget like the pools the server started with.
    pub fn pool_options(&self) -> PoolOptions {
        let budget = self.served.as_ref().and_then(|served| served.budget.get());
        pool_options_for(budget)
    }

    /// `open` with the caller's options (a server passes its memory budget's txg limits).
    pub fn open_with(&self, pool: &str, options: PoolOptions) -> Result<Pool> {
        let unavailable = |reason: String, busy: bool| {
            anyhow::Error::new(PoolUnavailable {
                pool: pool.to_string(),
                reason,
                busy,
            })
        };
        let cached = self
            .cache
            .devices(pool)?
            .ok_or_else(|| not_imported(pool))?;
        let devices = self
            .parse_cached(pool, &cached)
            .map_err(|err| unavailable(format!("{err:#}"), false))?;
        let absent: Vec<String> = devices
            .iter()
            .filter(|spec| !spec.path.exists())
            .map(|spec| spec.path.display().to_string())
            .collect();
        Pool::import(&ImportSource::Devices(devices.clone()), pool, options).map_err(|err| {
            let err = anyhow::Error::new(err);
            let busy = devices
                .iter()
                .any(|spec| locked_by_another_process(&spec.path));
            if absent.is_empty() {
                unavailable(format!("{err:#}"), busy)
            } else {
                unavailable(
                    format!("missing devices {}; {err:#}", absent.join(", ")),
                    busy,
                )
            }
        })
    }

    /// Opens `pool`, runs `body`, and closes the pool whatever `body` returned. When served,
    /// `body` runs on the server's live pool, which stays open.
    pub fn with_pool<T>(
        &self,
        pool: &str,
        readonly: bool,
        body: impl FnOnce(&Pool) -> Result<T>,
    ) -> Result<T> {
        if let Some(served) = &self.served {
            let handle = self.served_pool(served, pool)?;
            return body(&handle);
        }
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

/// The error for a pool the cache does not know.
fn not_imported(pool: &str) -> anyhow::Error {
    anyhow!("no such pool '{pool}' (not imported; try cairn pool import -d DIR)")
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
