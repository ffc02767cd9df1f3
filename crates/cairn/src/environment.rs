//! The environment variables cairn reads: all of them here, read once per process. Libraries
//! take options as parameters; this is where the front end turns the environment into them.
//!
//! - `CAIRN_INJECT_POWER_CUT_AFTER_OPS=N` (with `CAIRN_INJECT_SEED`, `CAIRN_INJECT_RECORD_DIR`):
//!   crash tests of the whole program cut the power of every emulated device this process opens
//!   at the N-th device operation (`cairn_engine::FaultInjection`); the process says so on
//!   stderr when it arms the switch and when the power goes, which the tests read.
//! - `CAIRN_READ_TRACE_DIR=DIR`: every volume served appends its clients' reads to a trace in
//!   DIR (`bench/record-volume-trace.sh`).
//!
//! - `XDG_STATE_HOME`, else `HOME`: where the pool cache lives when `--state-dir` is not given.
//!
//! `CAIRN_STATE_DIR`, `CAIRN_ARC_MAX` and `CAIRN_ARC_MIN` are flags' defaults (clap reads them).

use anyhow::{Result, bail};
use cairn_engine::{DeviceOpener, FaultInjection};
use cairn_frontend::{PoolAccess, PoolCache};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

/// What the environment asks of this process.
pub struct Environment {
    /// Opens every device of every pool of this process: one power switch for all of them.
    pub opener: DeviceOpener,
    pub read_trace_dir: Option<PathBuf>,
}

/// The process's environment, read on first use.
pub fn get() -> &'static Environment {
    static ENVIRONMENT: OnceLock<Environment> = OnceLock::new();
    ENVIRONMENT.get_or_init(read)
}

fn read() -> Environment {
    let number = |name: &str| -> Option<u64> { std::env::var(name).ok()?.parse().ok() };
    let injection = FaultInjection {
        power_cut_after_ops: number("CAIRN_INJECT_POWER_CUT_AFTER_OPS"),
        seed: number("CAIRN_INJECT_SEED").unwrap_or(0),
        record_dir: std::env::var_os("CAIRN_INJECT_RECORD_DIR").map(PathBuf::from),
        // Crash tests read this line to prove the power went while they were running.
        on_trip: Some(Arc::new(|report| {
            eprintln!("cairn: fault injection: power {report}")
        })),
    };
    if let Some(ops) = injection.power_cut_after_ops {
        eprintln!("cairn: fault injection: power cut after {ops} device operations");
    }
    Environment {
        opener: cairn_engine::device_opener(&injection),
        read_trace_dir: std::env::var_os("CAIRN_READ_TRACE_DIR").map(PathBuf::from),
    }
}

/// How this process reaches the pools of `state_dir`: with the environment's device opener
/// and read-trace directory.
pub fn pool_access(state_dir: PathBuf) -> PoolAccess {
    let environment = get();
    PoolAccess {
        cache: PoolCache::new(state_dir),
        served: None,
        opener: environment.opener.clone(),
        read_trace_dir: environment.read_trace_dir.clone(),
        l2_write_bytes_per_day: None,
    }
}

/// `$XDG_STATE_HOME/cairn`, else `~/.local/state/cairn`.
pub fn default_state_dir() -> Result<PathBuf> {
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(state).join("cairn"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".local/state/cairn")),
        None => bail!(
            "cannot place the pool cache: neither $XDG_STATE_HOME nor $HOME is set (use --state-dir DIR)"
        ),
    }
}
