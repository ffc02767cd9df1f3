//! Memory pressure: when the machine or this process's cgroup is short of memory, and where the
//! ARC's target size `c` should go because of it.
//!
//! The ARC holds verified blocks in anonymous memory, which the kernel cannot reclaim on its
//! own: if the cache does not give memory back, the kernel swaps, stalls other processes or
//! OOM-kills this one. ZFS hears about pressure from the kernel's shrinker callbacks; a
//! user-space server has no such hook, so it polls what the kernel publishes instead:
//!
//! - **`MemAvailable`** (`/proc/meminfo`): the kernel's estimate of what could be allocated
//!   without swapping (free memory plus page cache and slab it can drop). Below
//!   `MemTotal / free_min_divisor` (ZFS's `arc_sys_free`, 1/64 of RAM) the machine is short.
//! - **The cgroup's limit** (v2 `memory.max`, or the lower `memory.high`; v1
//!   `memory.limit_in_bytes` as a fallback): a container or systemd unit may be far smaller than
//!   the machine, and reaching its limit means reclaim stalls or the OOM killer whatever
//!   `MemAvailable` says. Short when the charge, less the inactive page cache the kernel drops
//!   first (the "working set"), comes within `limit / cgroup_headroom_divisor` of the limit.
//! - **PSI** (`memory.pressure` of the cgroup, else `/proc/pressure/memory`): the share of
//!   time (averaged over about 10 s) in which some task waited for memory. It catches what the
//!   two levels miss — reclaim thrashing with memory nominally available, a parent cgroup at
//!   its own limit.
//!
//! Every signal is optional: one the system does not offer (no cgroup limit, PSI compiled out,
//! not Linux) or a file that does not parse is `None` and simply never says "short".
//!
//! The controller (`PressureController`) is a deterministic state machine: it is given the
//! time, the reading, the current target and the cache's size, and returns a `Decision`.
//! Invariants:
//! - **Bounds.** Every target it hands out lies in [`min_bytes`, `max_bytes`]; shrinking stops
//!   at the floor even if pressure continues (`arc_min` is the cache the pool needs to run).
//! - **Bounded steps.** At most one step per tick: down by `target / shrink_step_divisor` (at
//!   least 1 MiB), up by `max / grow_step_divisor`. A large shortfall is met over several
//!   ticks, not by emptying the cache at once: the kernel reclaims page cache meanwhile, the
//!   reading a second later shows what is still missing, and a hot working set is not thrown
//!   away because of a transient spike.
//! - **Hold-off.** No growth for `grow_holdoff_ms` after the last tick that saw pressure (ZFS's
//!   `arc_no_grow`), so the target does not bounce between shrink and grow.
//! - **Growth needs demand and room.** The target grows only when the cache has (nearly)
//!   filled it — an idle cache never claims memory it does not use — and only when one more
//!   step would leave memory well clear of the pressure thresholds (twice the free-memory floor,
//!   the cgroup's headroom, half the PSI threshold): the hysteresis that keeps a grow from
//!   causing the next shrink. Without pressure the target never shrinks, so the cache does not
//!   collapse on its own.
//!
//! How it fits: `read::ReadCache`'s maintenance thread calls `read_memory()` and `tick()`
//! about once a second and applies a `Shrink` or `Grow` with the cache's `set_capacity`. A
//! target outside [min, max] (after `set_limits` lowered `arc_max`) is the caller's to clamp:
//! `ReadCache::set_limits` does so at once; `tick` only makes sure what it returns is in range.
//!
//! Files: `reading` (the kernel's files parsed into a `MemoryReading`), `limits` (default
//! `arc_max`/`arc_min` from a reading), `controller` (config, decisions, the state machine) and
//! `tests`. Dependencies point one way: `limits` and `controller` each use `reading` (and this
//! file's `MIB`) and not each other; `reading` uses neither.

mod controller;
mod limits;
mod reading;
#[cfg(test)]
mod tests;

pub use controller::{Decision, PressureCause, PressureConfig, PressureController};
pub use limits::{
    ARC_MAX_FLOOR_BYTES, ARC_MIN_FLOOR_BYTES, default_arc_max_bytes, default_arc_min_bytes,
    usable_memory_bytes,
};
pub use reading::{MemoryReading, read_memory, read_memory_at};

const MIB: u64 = 1 << 20;
