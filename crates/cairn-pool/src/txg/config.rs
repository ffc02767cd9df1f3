//! The txg engine's tunables: `TxgConfig`, its OpenZFS defaults (the dirty maximum sized from
//! `/proc/meminfo`), its validation, and `percent_of`, the one rounding rule every percentage
//! tunable goes through.
//!
//! Invariant: a config the engine runs with passed `validate` (timeout and maximum > 0,
//! percentages <= 100), so `percent_of` never sees a percentage above 100. This file is at the
//! bottom of the `txg` module: it depends on no sibling, and the throttle, state and sync thread
//! read their limits from here.

use std::time::Duration;

pub(super) const GIB: u64 = 1 << 30;
/// `dirty_bytes_max` default: this percentage of RAM ...
const DIRTY_BYTES_MAX_RAM_PERCENT: u64 = 10;
/// ... capped at this many bytes ...
const DIRTY_BYTES_MAX_CAP: u64 = 4 * GIB;
/// ... or this when RAM size is unknown.
const DIRTY_BYTES_MAX_FALLBACK: u64 = GIB;

/// Tunables of the txg engine. Defaults follow OpenZFS (see the `txg` module comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxgConfig {
    /// Sync an open txg with dirty data at the latest this long after it opened.
    pub txg_timeout_ms: u64,
    /// Upper bound of unsynced dirty bytes; writers block at this level.
    pub dirty_bytes_max: u64,
    /// Start a sync early when the open txg's dirty bytes exceed this percentage of the max.
    pub dirty_sync_percent: u32,
    /// Writers are delayed above this percentage of the max.
    pub delay_min_dirty_percent: u32,
    /// Delay at the midpoint between `delay_min_dirty_percent` and 100 % (1e9 / target ops/s).
    pub delay_scale_ns: u64,
    /// Upper bound of one writer's delay.
    pub delay_max_ns: u64,
    /// Number of synced txgs whose timings `TxgEngine::history` keeps.
    pub history_len: usize,
    /// When > 0: dirty data is also limited to what the pool was measured to sync in this many
    /// milliseconds (never below `DIRTY_LIMIT_FLOOR_BYTES`, never above `dirty_bytes_max`;
    /// writers are delayed from `delay_min_dirty_percent` of what that rate writes in this
    /// time, see `delay_target_bytes`), so a caller waiting for a txg sync (a FLUSH served by
    /// one) waits about this long however large the max is. 0: the max alone.
    pub sync_target_ms: u64,
}

impl Default for TxgConfig {
    fn default() -> Self {
        let mem_total_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| parse_meminfo_total_bytes(&text));
        TxgConfig {
            txg_timeout_ms: 5_000,
            dirty_bytes_max: default_dirty_bytes_max(mem_total_bytes),
            dirty_sync_percent: 20,
            delay_min_dirty_percent: 60,
            delay_scale_ns: 500_000,
            delay_max_ns: 100_000_000,
            history_len: 100,
            sync_target_ms: 0,
        }
    }
}

impl TxgConfig {
    /// Checks the relations between the tunables; `TxgEngine::start` asserts this is `Ok`.
    pub fn validate(&self) -> Result<(), TxgConfigError> {
        if self.txg_timeout_ms == 0 {
            return Err(TxgConfigError::Zero("txg_timeout_ms"));
        }
        if self.dirty_bytes_max == 0 {
            return Err(TxgConfigError::Zero("dirty_bytes_max"));
        }
        if self.dirty_sync_percent > 100 {
            return Err(TxgConfigError::PercentOver100 {
                name: "dirty_sync_percent",
                value: self.dirty_sync_percent,
            });
        }
        if self.delay_min_dirty_percent > 100 {
            return Err(TxgConfigError::PercentOver100 {
                name: "delay_min_dirty_percent",
                value: self.delay_min_dirty_percent,
            });
        }
        Ok(())
    }

    /// Open-txg dirty bytes above which a sync starts before the timeout.
    pub fn dirty_sync_bytes(&self) -> u64 {
        percent_of(self.dirty_bytes_max, self.dirty_sync_percent)
    }

    /// Total dirty bytes above which writers are delayed.
    pub fn delay_min_dirty_bytes(&self) -> u64 {
        percent_of(self.dirty_bytes_max, self.delay_min_dirty_percent)
    }

    pub(super) fn txg_timeout(&self) -> Duration {
        Duration::from_millis(self.txg_timeout_ms)
    }
}

pub(super) fn percent_of(total_bytes: u64, percent: u32) -> u64 {
    assert!(percent <= 100);
    let bytes = u128::from(total_bytes) * u128::from(percent) / 100;
    u64::try_from(bytes).expect("a percentage <= 100 of a u64 fits in a u64")
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
pub fn parse_meminfo_total_bytes(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = fields.next()?.parse().ok()?;
    let multiplier: u64 = match fields.next() {
        Some("kB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    value.checked_mul(multiplier)
}

/// Default `dirty_bytes_max` for a machine with `mem_total_bytes` of RAM (`None`: unknown).
pub fn default_dirty_bytes_max(mem_total_bytes: Option<u64>) -> u64 {
    match mem_total_bytes {
        Some(ram_bytes) if ram_bytes > 0 => {
            (ram_bytes / 100 * DIRTY_BYTES_MAX_RAM_PERCENT).clamp(1, DIRTY_BYTES_MAX_CAP)
        }
        _ => DIRTY_BYTES_MAX_FALLBACK,
    }
}

/// A tunable of `TxgConfig` out of its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxgConfigError {
    #[error("{0} must be > 0")]
    Zero(&'static str),
    #[error("{name} {value} > 100")]
    PercentOver100 { name: &'static str, value: u32 },
}
