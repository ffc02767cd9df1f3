//! The pressure controller: `PressureConfig` (thresholds and steps), `PressureCause`,
//! `Decision` and the deterministic `PressureController` state machine that moves the target.
//!
//! Invariants (detailed in the module doc): every target it returns lies in [min, max]; at most
//! one bounded step per tick; no growth during the hold-off after pressure, nor without demand
//! and room clear of the thresholds; no shrink without pressure. How it fits: consumes
//! `reading`'s `MemoryReading`; `read::ReadCache`'s maintenance thread calls `tick`.

use super::MIB;
use super::reading::MemoryReading;

/// Least shrink step: below it a tick would free too little to matter to the kernel.
const SHRINK_STEP_FLOOR_BYTES: u64 = MIB;
/// Least grow step, so a tiny `arc_max` still grows back in a bounded number of ticks.
const GROW_STEP_FLOOR_BYTES: u64 = MIB;
/// The cache counts as full (there is demand for more room) when within target/this of it:
/// eviction keeps a full cache a little under its target, never exactly at it.
const FULL_SLACK_DIVISOR: u64 = 32;

/// Tunables of the controller. A divisor of 0 drops that proportional part (a step falls back
/// to its 1 MiB floor, a threshold to zero) rather than dividing by zero.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PressureConfig {
    /// A shrink step takes target/this (at least 1 MiB).
    pub shrink_step_divisor: u64,
    /// A grow step adds max/this (at least 1 MiB).
    pub grow_step_divisor: u64,
    /// No growth until this long after the last tick that saw pressure.
    pub grow_holdoff_ms: u64,
    /// Short of memory when available < total/this (ZFS's `arc_sys_free`).
    pub free_min_divisor: u64,
    /// Short when the cgroup's working set > limit - limit/this.
    pub cgroup_headroom_divisor: u64,
    /// Short when PSI `some avg10` is above this.
    pub psi_some_avg10_max_percent: f64,
}

impl Default for PressureConfig {
    fn default() -> Self {
        PressureConfig {
            shrink_step_divisor: 32,
            grow_step_divisor: 64,
            grow_holdoff_ms: 5000,
            free_min_divisor: 64,
            cgroup_headroom_divisor: 16,
            psi_some_avg10_max_percent: 10.0,
        }
    }
}

impl PressureConfig {
    /// One shrink step from `target_bytes`.
    pub fn shrink_step_bytes(&self, target_bytes: u64) -> u64 {
        proportion(target_bytes, self.shrink_step_divisor).max(SHRINK_STEP_FLOOR_BYTES)
    }

    /// One grow step for a cache of at most `max_bytes`.
    pub fn grow_step_bytes(&self, max_bytes: u64) -> u64 {
        proportion(max_bytes, self.grow_step_divisor).max(GROW_STEP_FLOOR_BYTES)
    }

    /// Available memory below which the machine is short.
    pub fn free_min_bytes(&self, ram_total_bytes: u64) -> u64 {
        proportion(ram_total_bytes, self.free_min_divisor)
    }

    /// The margin kept below a cgroup limit.
    pub fn cgroup_headroom_bytes(&self, limit_bytes: u64) -> u64 {
        proportion(limit_bytes, self.cgroup_headroom_divisor)
    }

    /// Whether the reading says memory is short, and which signal says so first.
    pub fn shortage(&self, reading: &MemoryReading) -> Option<PressureCause> {
        if let (Some(total_bytes), Some(available_bytes)) =
            (reading.ram_total_bytes, reading.ram_available_bytes)
            && available_bytes < self.free_min_bytes(total_bytes)
        {
            return Some(PressureCause::LowAvailable);
        }
        if let (Some(limit_bytes), Some(working_set_bytes)) = (
            reading.cgroup_limit_bytes,
            reading.cgroup_working_set_bytes(),
        ) && working_set_bytes > limit_bytes - self.cgroup_headroom_bytes(limit_bytes)
        {
            return Some(PressureCause::CgroupNearLimit);
        }
        if let Some(percent) = reading.psi_some_avg10_percent
            && percent > self.psi_some_avg10_max_percent
        {
            return Some(PressureCause::Stall);
        }
        None
    }

    /// Whether the cache may take `step_bytes` more without the projected usage approaching
    /// pressure: twice the free floor left, the cgroup's headroom kept, stalls under half the
    /// threshold. The gap between these and `shortage`'s thresholds is the hysteresis.
    fn room_to_grow(&self, reading: &MemoryReading, step_bytes: u64) -> bool {
        if let (Some(total_bytes), Some(available_bytes)) =
            (reading.ram_total_bytes, reading.ram_available_bytes)
            && available_bytes.saturating_sub(step_bytes)
                < self.free_min_bytes(total_bytes).saturating_mul(2)
        {
            return false;
        }
        if let (Some(limit_bytes), Some(working_set_bytes)) = (
            reading.cgroup_limit_bytes,
            reading.cgroup_working_set_bytes(),
        ) && working_set_bytes.saturating_add(step_bytes)
            > limit_bytes - self.cgroup_headroom_bytes(limit_bytes)
        {
            return false;
        }
        if let Some(percent) = reading.psi_some_avg10_percent
            && percent > self.psi_some_avg10_max_percent / 2.0
        {
            return false;
        }
        true
    }
}

/// `bytes / divisor`, 0 for a divisor of 0.
fn proportion(bytes: u64, divisor: u64) -> u64 {
    bytes.checked_div(divisor).unwrap_or(0)
}

/// Why the controller acted (for counters and `cairn stat arc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PressureCause {
    /// `MemAvailable` under the free floor.
    LowAvailable,
    /// The cgroup's working set within its headroom of the limit.
    CgroupNearLimit,
    /// Tasks stalled on memory (PSI).
    Stall,
}

impl PressureCause {
    /// A stable name for statistics.
    pub fn name(self) -> &'static str {
        match self {
            PressureCause::LowAvailable => "low_available",
            PressureCause::CgroupNearLimit => "cgroup_near_limit",
            PressureCause::Stall => "stall",
        }
    }
}

/// What to do this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Lower the target to `to_bytes` (one step, not below min).
    Shrink {
        to_bytes: u64,
        cause: PressureCause,
    },
    /// Raise the target to `to_bytes` (one step, not above max).
    Grow {
        to_bytes: u64,
    },
    Hold,
}

/// Moves the ARC's target with memory pressure (see the module comment). Time is passed in, so
/// the same inputs always give the same decisions.
#[derive(Debug, Clone)]
pub struct PressureController {
    config: PressureConfig,
    min_bytes: u64,
    max_bytes: u64,
    /// The last tick that saw pressure: growth waits `grow_holdoff_ms` from here.
    last_pressure_ms: Option<u64>,
    last_cause: Option<PressureCause>,
    shrinks: u64,
    grows: u64,
    pressure_ticks: u64,
}

impl PressureController {
    /// A controller keeping the target in [`min_bytes`, `max_bytes`] (a min above max is taken
    /// as max: the bounds must stay a range, and panicking in the maintenance thread would stop
    /// pressure handling altogether).
    pub fn new(config: PressureConfig, min_bytes: u64, max_bytes: u64) -> Self {
        PressureController {
            config,
            min_bytes: min_bytes.min(max_bytes),
            max_bytes,
            last_pressure_ms: None,
            last_cause: None,
            shrinks: 0,
            grows: 0,
            pressure_ticks: 0,
        }
    }

    /// New bounds (`arc_min`, `arc_max`); a min above max is taken as max. The caller moves a
    /// target now outside them (see the module comment).
    pub fn set_limits(&mut self, min_bytes: u64, max_bytes: u64) {
        self.min_bytes = min_bytes.min(max_bytes);
        self.max_bytes = max_bytes;
    }

    /// One tick: given the signals, the current target (`c`) and the cache's current size,
    /// decide. The caller ticks about once a second and applies the decision.
    pub fn tick(
        &mut self,
        now_ms: u64,
        reading: &MemoryReading,
        target_bytes: u64,
        size_bytes: u64,
    ) -> Decision {
        if let Some(cause) = self.config.shortage(reading) {
            self.last_pressure_ms = Some(now_ms);
            self.last_cause = Some(cause);
            self.pressure_ticks += 1;
            // One step whatever the shortfall: the next reading shows what is still missing.
            let to_bytes = target_bytes
                .saturating_sub(self.config.shrink_step_bytes(target_bytes))
                .clamp(self.min_bytes, self.max_bytes);
            if to_bytes < target_bytes {
                self.shrinks += 1;
                return Decision::Shrink { to_bytes, cause };
            }
            // At the floor: pressure persists (and keeps growth held off) but the cache has
            // given what it may.
            return Decision::Hold;
        }
        if self.no_grow(now_ms) || target_bytes >= self.max_bytes {
            return Decision::Hold;
        }
        // Room nobody fills is memory taken from the page cache and the clients for nothing.
        let full_bytes = target_bytes - target_bytes / FULL_SLACK_DIVISOR;
        if size_bytes < full_bytes {
            return Decision::Hold;
        }
        let step_bytes = self.config.grow_step_bytes(self.max_bytes);
        if !self.config.room_to_grow(reading, step_bytes) {
            return Decision::Hold;
        }
        let to_bytes = target_bytes
            .saturating_add(step_bytes)
            .clamp(self.min_bytes, self.max_bytes);
        self.grows += 1;
        Decision::Grow { to_bytes }
    }

    /// Shrink decisions so far.
    pub fn shrinks(&self) -> u64 {
        self.shrinks
    }

    /// Grow decisions so far.
    pub fn grows(&self) -> u64 {
        self.grows
    }

    /// Ticks that saw pressure (including those at the floor, which shrink nothing).
    pub fn pressure_ticks(&self) -> u64 {
        self.pressure_ticks
    }

    /// The signal behind the last pressure seen.
    pub fn last_cause(&self) -> Option<PressureCause> {
        self.last_cause
    }

    /// True while growth is held off (ZFS's `arc_no_grow`). A clock that went backwards counts
    /// as still within the hold-off.
    pub fn no_grow(&self, now_ms: u64) -> bool {
        self.last_pressure_ms
            .is_some_and(|last_ms| now_ms.saturating_sub(last_ms) < self.config.grow_holdoff_ms)
    }

    pub fn config(&self) -> &PressureConfig {
        &self.config
    }

    pub fn min_bytes(&self) -> u64 {
        self.min_bytes
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }
}
