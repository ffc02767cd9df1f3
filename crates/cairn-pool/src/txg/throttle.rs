//! The write throttle (see "The write throttle" in the `txg` module comment): the delay curve,
//! the dirty limit in force under a sync target, the estimate of what a syncing txg has left to
//! write, the sync rate those follow, and the `State` methods that hold writers to both levels
//! (memory and latency), the latter lowered for a txg whose sync has work of its own reserved
//! (`reserved_allowance_bytes`). `TxgEngine::throttle` and `try_hold_now` are the entry points.
//!
//! Invariants: the curve is a pure function of the config, 0 at or below the delay minimum,
//! `delay_max_ns` at or above the limit, non-decreasing between; the limit in force stays within
//! [`DIRTY_LIMIT_FLOOR_BYTES`, `dirty_bytes_max`]; the throttle paces only while the engine can
//! still sync (`throttle_active`). This file sits above `state` (whose `State` it extends) and
//! `config`; holds, the sync thread and the engine use it.

use std::time::{Duration, Instant};

use super::config::{TxgConfig, percent_of};
use super::state::{Phase, State};

/// Least dirty limit `sync_target_ms` may set: room for a couple of the largest writes.
pub const DIRTY_LIMIT_FLOOR_BYTES: u64 = 64 << 20;
/// A txg with fewer dirty bytes says little about throughput (fixed costs dominate its sync).
const RATE_SAMPLE_MIN_BYTES: u64 = 16 << 20;

/// The dirty limit in force: `dirty_bytes_max`, or with `sync_target_ms` what the measured
/// sync rate writes in that time, within [`DIRTY_LIMIT_FLOOR_BYTES`, `dirty_bytes_max`].
pub fn dirty_limit_bytes(config: &TxgConfig, sync_bytes_per_sec: Option<u64>) -> u64 {
    match sync_bytes_per_sec {
        Some(rate) if config.sync_target_ms > 0 => {
            let bytes = u128::from(rate) * u128::from(config.sync_target_ms) / 1000;
            let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
            bytes
                .max(DIRTY_LIMIT_FLOOR_BYTES)
                .min(config.dirty_bytes_max)
        }
        _ => config.dirty_bytes_max,
    }
}

/// Least size the latency level's delay curve aims at (`delay_target_bytes`). Its delays start
/// at `delay_min_dirty_percent` of it (19.2 MiB at the default 60 %): above the early-sync
/// threshold a floored limit sets (20 % of 64 MiB), so a txg still starts its sync before its
/// writers are delayed, and above the 16 MiB a txg needs to give a rate sample, so a pool
/// measured slow once is measured again.
pub const DELAY_TARGET_FLOOR_BYTES: u64 = 32 << 20;

/// Where the latency level's delay curve reaches its maximum: what the measured sync rate
/// writes in `sync_target_ms`, within [`DELAY_TARGET_FLOOR_BYTES`, the dirty limit in force].
/// The limit in force keeps its higher floor so that the largest writes are delayed, never
/// blocked; the delays still start where the target says, or a pool whose rate writes less
/// than that floor in the target lets txgs grow to the floor's knee and run past the target
/// (BENCHMARKS.md, "Snapshots after condensing": 41 MiB txgs of 500 ms at ~86 MB/s).
pub fn delay_target_bytes(config: &TxgConfig, sync_bytes_per_sec: Option<u64>) -> u64 {
    let limit = dirty_limit_bytes(config, sync_bytes_per_sec);
    match sync_bytes_per_sec {
        Some(rate) if config.sync_target_ms > 0 => {
            let bytes = u128::from(rate) * u128::from(config.sync_target_ms) / 1000;
            let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
            bytes.max(DELAY_TARGET_FLOOR_BYTES).min(limit)
        }
        _ => limit,
    }
}

/// Least dirty allowance a reservation of sync time leaves a txg (`reserved_allowance_bytes`):
/// writers can always dirty a little, and a write larger than it still passes a txg that is
/// nearly clean (blocking looks at the dirty bytes before the write).
pub const RESERVED_ALLOWANCE_FLOOR_BYTES: u64 = 4 << 20;

/// The dirty allowance of a txg whose sync has `reserved` of work besides writing its dirty
/// data (a dataset command's own work): what the measured rate writes in what the sync target
/// leaves after it, at least [`RESERVED_ALLOWANCE_FLOOR_BYTES`]. `None` without a sync target
/// or a measured rate (nothing to convert time into bytes with), or with nothing reserved.
pub fn reserved_allowance_bytes(
    config: &TxgConfig,
    sync_bytes_per_sec: Option<u64>,
    reserved: Duration,
) -> Option<u64> {
    let rate = sync_bytes_per_sec.filter(|_| config.sync_target_ms > 0 && !reserved.is_zero())?;
    let left = Duration::from_millis(config.sync_target_ms).saturating_sub(reserved);
    let bytes = u128::from(rate) * left.as_micros() / 1_000_000;
    Some(
        u64::try_from(bytes)
            .unwrap_or(u64::MAX)
            .max(RESERVED_ALLOWANCE_FLOOR_BYTES),
    )
}

/// How often a writer blocked only by the estimate of a sync's progress looks again.
pub(super) const THROTTLE_RECHECK: Duration = Duration::from_millis(1);

/// Of a syncing txg's `dirty_bytes`, what is left to write after `elapsed` at
/// `bytes_per_sec` (an estimate: 0 once the sync is overdue).
pub fn sync_left_bytes(dirty_bytes: u64, bytes_per_sec: u64, elapsed: Duration) -> u64 {
    let written = u128::from(bytes_per_sec) * elapsed.as_micros() / 1_000_000;
    let written = u64::try_from(written).unwrap_or(u64::MAX);
    dirty_bytes.saturating_sub(written)
}

/// The throttle curve: how long a writer must be delayed when dirty data is at `dirty_bytes`.
/// Pure function of the config; 0 at or below `delay_min_dirty_percent`, `delay_max_ns` at or
/// above `dirty_bytes_max`, continuous and non-decreasing in between (see the `txg` module
/// comment).
pub fn delay_ns(config: &TxgConfig, dirty_bytes: u64) -> u64 {
    delay_ns_within(config, config.dirty_bytes_max, dirty_bytes)
}

/// `delay_ns` with `max_bytes` in force instead of `dirty_bytes_max`.
pub(super) fn delay_ns_within(config: &TxgConfig, max_bytes: u64, dirty_bytes: u64) -> u64 {
    let min_bytes = percent_of(max_bytes, config.delay_min_dirty_percent);
    if dirty_bytes <= min_bytes {
        return 0;
    }
    if dirty_bytes >= max_bytes {
        return config.delay_max_ns;
    }
    // min < dirty < max, so both differences are > 0; u128 cannot overflow (64 x 64 bits).
    let numerator = u128::from(config.delay_scale_ns) * u128::from(dirty_bytes - min_bytes);
    let denominator = u128::from(max_bytes - dirty_bytes);
    let delay = u64::try_from(numerator / denominator).unwrap_or(u64::MAX);
    delay.min(config.delay_max_ns)
}

/// When a delayed writer may go: `delay` after the later of now and the previous delayed
/// writer's wakeup, so concurrent writers are spaced `delay` apart (rate control).
pub(super) fn next_wakeup(now: Instant, last_wakeup: Option<Instant>, delay: Duration) -> Instant {
    let base = match last_wakeup {
        Some(last) if last > now => last,
        _ => now,
    };
    base + delay
}

impl State {
    /// The dirty limit in force (see `dirty_limit_bytes`).
    fn dirty_limit(&self, config: &TxgConfig) -> u64 {
        dirty_limit_bytes(config, self.sync_bytes_per_sec)
    }

    /// The open txg's allowance under the sync time reserved on it, if any
    /// (`reserved_allowance_bytes`).
    pub(super) fn open_reserved_allowance(&self, config: &TxgConfig) -> Option<u64> {
        self.allowance_with(config, self.open.reserved_sync_us)
    }

    /// `reserved_allowance_bytes` for `reserved_us` at the measured rate.
    pub(super) fn allowance_with(&self, config: &TxgConfig, reserved_us: u64) -> Option<u64> {
        reserved_allowance_bytes(
            config,
            self.sync_bytes_per_sec,
            Duration::from_micros(reserved_us),
        )
    }

    /// The latency level's limit: the dirty limit in force, lowered to the open txg's
    /// allowance when sync time is reserved on it.
    pub(super) fn latency_limit(&self, config: &TxgConfig) -> u64 {
        let limit = self.dirty_limit(config);
        self.open_reserved_allowance(config)
            .map_or(limit, |allowance| allowance.min(limit))
    }

    /// The levels the throttle holds writers to, each as (bytes, limit): all dirty bytes
    /// against `dirty_bytes_max` (memory), and with a sync target and a measured rate, the
    /// bytes a txg-sync waiter would wait for against the limit in force, lowered by the
    /// sync time reserved on the open txg (latency).
    fn throttle_levels(&self, config: &TxgConfig, now: Instant) -> [(u64, u64); 2] {
        let memory = (self.dirty_bytes_total, config.dirty_bytes_max);
        let latency = if self.sync_draining(config) {
            let left = self.in_flight_left_bytes(now);
            (self.open.dirty_bytes + left, self.latency_limit(config))
        } else {
            (self.dirty_bytes_total, self.latency_limit(config))
        };
        [memory, latency]
    }

    /// Whether writers block at a throttle level's limit, and if so whether only the latency
    /// level's estimate holds them, which falls as the sync runs (`Some(true)`: look again
    /// soon; `Some(false)`: only a finished sync frees room).
    pub(super) fn at_limit(&self, config: &TxgConfig, now: Instant) -> Option<bool> {
        let [(dirty, max), (waited_for, limit)] = self.throttle_levels(config, now);
        if dirty >= max {
            Some(false)
        } else if waited_for >= limit {
            Some(self.sync_draining(config))
        } else {
            None
        }
    }

    /// `at_limit`, or `None` when the throttle does not pace (engine refusing or stopping).
    pub(super) fn blocked(&self, config: &TxgConfig) -> Option<bool> {
        if self.throttle_active() {
            self.at_limit(config, Instant::now())
        } else {
            None
        }
    }

    /// A writer's delay for `bytes` more: the larger of the levels' delays, the latency level's
    /// on a curve that ends at `delay_target_bytes` (at or below the limit it blocks at), or
    /// at the open txg's reserved allowance if that is lower.
    pub(super) fn delay_ns_for(&self, config: &TxgConfig, now: Instant, bytes: u64) -> u64 {
        let [memory, (waited_for, limit)] = self.throttle_levels(config, now);
        let target = delay_target_bytes(config, self.sync_bytes_per_sec);
        let target = self
            .open_reserved_allowance(config)
            .map_or(target, |allowance| allowance.min(target));
        debug_assert!(
            target <= limit,
            "the delay curve ends past the blocking limit"
        );
        [memory, (waited_for, target)]
            .iter()
            .map(|&(dirty, end)| delay_ns_within(config, end, dirty.saturating_add(bytes)))
            .max()
            .unwrap_or(0)
    }

    /// Whether the latency level counts the in-flight txg by what it has left to write: a
    /// sync target, a measured rate and a txg syncing.
    fn sync_draining(&self, config: &TxgConfig) -> bool {
        config.sync_target_ms > 0
            && self.sync_bytes_per_sec.is_some()
            && self
                .in_flight
                .as_ref()
                .is_some_and(|flight| flight.phase == Phase::Syncing)
    }

    /// The in-flight txg's dirty bytes less what the measured rate has written since its
    /// sync started (all of them while it quiesces, or with no rate yet).
    fn in_flight_left_bytes(&self, now: Instant) -> u64 {
        let Some(flight) = &self.in_flight else {
            return 0;
        };
        match (flight.sync_started_at, self.sync_bytes_per_sec) {
            (Some(started), Some(rate)) => sync_left_bytes(
                flight.slot.dirty_bytes,
                rate,
                now.saturating_duration_since(started),
            ),
            _ => flight.slot.dirty_bytes,
        }
    }

    /// Open-txg dirty bytes above which a sync starts: `dirty_sync_percent` of the limit.
    pub(super) fn dirty_sync_bytes(&self, config: &TxgConfig) -> u64 {
        percent_of(self.dirty_limit(config), config.dirty_sync_percent)
    }

    /// Folds a synced txg's throughput into the moving average (3/4 old, 1/4 new).
    pub(super) fn record_sync_rate(&mut self, dirty_bytes: u64, sync_us: u64) {
        if dirty_bytes < RATE_SAMPLE_MIN_BYTES {
            return;
        }
        let sample = u128::from(dirty_bytes) * 1_000_000 / u128::from(sync_us.max(1));
        let sample = u64::try_from(sample).unwrap_or(u64::MAX);
        self.sync_bytes_per_sec = Some(match self.sync_bytes_per_sec {
            Some(old) => old / 4 * 3 + sample / 4,
            None => sample,
        });
    }

    /// Writers may be paced only while the engine can still sync.
    pub(super) fn throttle_active(&self) -> bool {
        self.refusal().is_none() && !self.shutdown_requested
    }
}
