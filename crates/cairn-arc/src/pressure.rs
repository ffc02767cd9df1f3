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

use std::fs;
use std::path::{Path, PathBuf};

const MIB: u64 = 1 << 20;

/// The smallest default `arc_max`: below this the cache cannot hold a pool's hot metadata and
/// reads turn into random I/O.
pub const ARC_MAX_FLOOR_BYTES: u64 = 64 * MIB;
/// The smallest default `arc_min`.
pub const ARC_MIN_FLOOR_BYTES: u64 = 32 * MIB;
/// Least shrink step: below it a tick would free too little to matter to the kernel.
const SHRINK_STEP_FLOOR_BYTES: u64 = MIB;
/// Least grow step, so a tiny `arc_max` still grows back in a bounded number of ticks.
const GROW_STEP_FLOOR_BYTES: u64 = MIB;
/// The cache counts as full (there is demand for more room) when within target/this of it:
/// eviction keeps a full cache a little under its target, never exactly at it.
const FULL_SLACK_DIVISOR: u64 = 32;
/// Limits this large mean "no limit": cgroup v1 reports an unset limit as the page counter's
/// maximum (about 2^63), and nothing real comes near 2^62 bytes.
const CGROUP_UNLIMITED_BYTES: u64 = 1 << 62;

/// One reading of the memory signals (all optional: a signal the system does not offer is
/// `None`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MemoryReading {
    /// `/proc/meminfo` `MemTotal`.
    pub ram_total_bytes: Option<u64>,
    /// `/proc/meminfo` `MemAvailable`.
    pub ram_available_bytes: Option<u64>,
    /// The tightest memory limit on this process's cgroup or an ancestor: the lower of
    /// `memory.max` and `memory.high` (v2), else `memory.limit_in_bytes` (v1). `None` when
    /// unlimited ("max") or unreadable.
    pub cgroup_limit_bytes: Option<u64>,
    /// Memory charged to the cgroup whose limit that is (`memory.current`, v1
    /// `memory.usage_in_bytes`); without a limit, to this process's own cgroup.
    pub cgroup_current_bytes: Option<u64>,
    /// Inactive page cache in that same cgroup (`memory.stat` `inactive_file`): part of the
    /// charge, but the first thing the kernel drops at the limit, so not a sign of shortage.
    pub cgroup_inactive_file_bytes: Option<u64>,
    /// PSI `some avg10` of the cgroup's `memory.pressure`, else of `/proc/pressure/memory`.
    pub psi_some_avg10_percent: Option<f64>,
}

impl MemoryReading {
    /// The cgroup's charge the kernel cannot simply drop: current less inactive page cache
    /// (what Kubernetes calls the working set). Page cache fills a cgroup up to its limit in
    /// normal operation; counting it would shrink the cache for memory nobody is short of.
    pub fn cgroup_working_set_bytes(&self) -> Option<u64> {
        let current_bytes = self.cgroup_current_bytes?;
        Some(current_bytes.saturating_sub(self.cgroup_inactive_file_bytes.unwrap_or(0)))
    }
}

/// Reads the signals from `/proc` and `/sys/fs/cgroup`. Never panics; unreadable or malformed
/// files give `None`.
pub fn read_memory() -> MemoryReading {
    read_memory_at(Path::new("/"))
}

/// `read_memory` with the filesystem root as a parameter (tests point it at a fake tree).
pub fn read_memory_at(root: &Path) -> MemoryReading {
    let meminfo = read_text(&root.join("proc/meminfo"));
    let meminfo = meminfo.as_deref().unwrap_or("");
    let membership = read_text(&root.join("proc/self/cgroup"))
        .map(|text| Membership::parse(&text))
        .unwrap_or_default();
    let v2_mount = root.join("sys/fs/cgroup");
    let v2_levels = membership.v2_path.as_deref().and_then(cgroup_levels);
    let v2 = v2_levels
        .as_deref()
        .map(|levels| cgroup_charge(&v2_mount, levels, &CGROUP_V2))
        .unwrap_or_default();
    // A v1 limit matters only on hosts without the v2 memory controller (hybrid layouts, older
    // container runtimes), where the v2 walk finds nothing.
    let charge = if v2.limit_bytes.is_none() {
        let v1 = membership
            .v1_memory_path
            .as_deref()
            .and_then(cgroup_levels)
            .map(|levels| cgroup_charge(&root.join("sys/fs/cgroup/memory"), &levels, &CGROUP_V1))
            .unwrap_or_default();
        if v1.limit_bytes.is_some() || v2.current_bytes.is_none() {
            v1
        } else {
            v2
        }
    } else {
        v2
    };
    // The cgroup's own PSI counts only this process's cgroup's stalls, including those caused
    // by an ancestor's limit; the system-wide file is the fallback.
    let psi_some_avg10_percent = v2_levels
        .as_deref()
        .and_then(|levels| {
            levels.iter().find_map(|level| {
                read_text(&v2_mount.join(level).join("memory.pressure"))
                    .and_then(|text| parse_psi_some_avg10(&text))
            })
        })
        .or_else(|| {
            read_text(&root.join("proc/pressure/memory"))
                .and_then(|text| parse_psi_some_avg10(&text))
        });
    MemoryReading {
        ram_total_bytes: parse_meminfo_bytes(meminfo, "MemTotal"),
        ram_available_bytes: parse_meminfo_bytes(meminfo, "MemAvailable"),
        cgroup_limit_bytes: charge.limit_bytes,
        cgroup_current_bytes: charge.current_bytes,
        cgroup_inactive_file_bytes: charge.inactive_file_bytes,
        psi_some_avg10_percent,
    }
}

/// The memory the cache may plan for: the smaller of RAM and the cgroup limit.
pub fn usable_memory_bytes(reading: &MemoryReading) -> Option<u64> {
    match (reading.ram_total_bytes, reading.cgroup_limit_bytes) {
        (Some(ram_bytes), Some(limit_bytes)) => Some(ram_bytes.min(limit_bytes)),
        (ram_bytes, limit_bytes) => ram_bytes.or(limit_bytes),
    }
}

/// Default `arc_max`: half of usable memory, at least `ARC_MAX_FLOOR_BYTES` (also when usable
/// memory is unknown, e.g. off Linux).
///
/// ZFS takes the larger of 5/8 of RAM and RAM less 1 GiB because it lives in the kernel and
/// owns the page cache's role itself. A user-space server shares the machine with its clients,
/// the kernel's page cache (which still caches everything not opened `O_DIRECT`) and its own
/// heap, and cannot be asked by the kernel to give memory back synchronously; half leaves room
/// for all of them while pressure polling catches up.
pub fn default_arc_max_bytes(reading: &MemoryReading) -> u64 {
    usable_memory_bytes(reading)
        .map_or(0, |usable_bytes| usable_bytes / 2)
        .max(ARC_MAX_FLOOR_BYTES)
}

/// Default `arc_min`: max(32 MiB, `arc_max` / 32), never above `arc_max`. A 1/32 floor keeps the
/// pool's hot metadata cached under sustained pressure, small enough to matter little.
pub fn default_arc_min_bytes(arc_max_bytes: u64) -> u64 {
    (arc_max_bytes / 32)
        .max(ARC_MIN_FLOOR_BYTES)
        .min(arc_max_bytes)
}

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

// ---- Reading the kernel's files ----

/// A file's text, or `None` if it cannot be read (missing, permission, not UTF-8, or a
/// pressure file on a kernel booted with PSI off, which fails the read with EOPNOTSUPP).
fn read_text(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// The value of `key` in `/proc/meminfo` ("MemTotal:   24683656 kB"), in bytes. The first line
/// with that key decides; anything but a number followed by "kB" is malformed.
fn parse_meminfo_bytes(text: &str, key: &str) -> Option<u64> {
    let rest = text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        (name.trim() == key).then_some(rest)
    })?;
    let mut words = rest.split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    match (words.next(), words.next()) {
        (Some("kB"), None) => kib.checked_mul(1024),
        _ => None,
    }
}

/// The `some avg10=` percentage of a PSI file ("some avg10=0.12 avg60=... total=...").
fn parse_psi_some_avg10(text: &str) -> Option<f64> {
    let line = text
        .lines()
        .find(|line| line.split_whitespace().next() == Some("some"))?;
    let percent: f64 = line
        .split_whitespace()
        .find_map(|word| word.strip_prefix("avg10="))?
        .parse()
        .ok()?;
    // `parse` accepts "inf" and "NaN"; a share of time is neither.
    (0.0..=100.0).contains(&percent).then_some(percent)
}

/// A whole-file decimal number.
fn parse_u64(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// A limit file: a number, or "max" (v2's "no limit", `None` like anything unparsable).
fn parse_limit_bytes(text: &str) -> Option<u64> {
    parse_u64(text).filter(|&bytes| bytes < CGROUP_UNLIMITED_BYTES)
}

/// The value of `key` in a `memory.stat` file ("inactive_file 93679616").
fn parse_stat_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next()? != key {
            return None;
        }
        let value = words.next()?.parse().ok()?;
        words.next().is_none().then_some(value)
    })
}

/// This process's cgroups, from `/proc/self/cgroup`.
#[derive(Debug, Default, PartialEq)]
struct Membership {
    /// The v2 path ("0::/system.slice/cairn.service").
    v2_path: Option<String>,
    /// The v1 memory controller's path ("4:memory:/docker/abc").
    v1_memory_path: Option<String>,
}

impl Membership {
    fn parse(text: &str) -> Membership {
        let mut membership = Membership::default();
        for line in text.lines() {
            let mut fields = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (fields.next(), fields.next(), fields.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                membership.v2_path.get_or_insert_with(|| path.to_owned());
            } else if controllers.split(',').any(|name| name == "memory") {
                membership
                    .v1_memory_path
                    .get_or_insert_with(|| path.to_owned());
            }
        }
        membership
    }
}

/// The directories of a cgroup and its ancestors, relative to the hierarchy's mount, deepest
/// first and ending with the mount itself. The mount comes last because in a cgroup namespace
/// (or a container that mounts only its own subtree) it is the process's own cgroup even when
/// the path in `/proc/self/cgroup` names a directory that is not there. `None` for a path that
/// is not absolute or that climbs ("..") out of the hierarchy.
fn cgroup_levels(path: &str) -> Option<Vec<PathBuf>> {
    let mut names = Vec::new();
    for name in path.strip_prefix('/')?.split('/') {
        match name {
            "" => {}
            "." | ".." => return None,
            name => names.push(name),
        }
    }
    Some(
        (0..=names.len())
            .rev()
            .map(|depth| names[..depth].iter().collect())
            .collect(),
    )
}

/// The files one cgroup version keeps its memory accounting in.
struct CgroupFiles {
    /// Limit files; the lowest set one binds.
    limits: &'static [&'static str],
    current: &'static str,
    /// `memory.stat` keys for inactive page cache, preferred first (v1's `total_` ones count
    /// the subtree, as the charge does).
    inactive_file_keys: &'static [&'static str],
}

const CGROUP_V2: CgroupFiles = CgroupFiles {
    limits: &["memory.max", "memory.high"],
    current: "memory.current",
    inactive_file_keys: &["inactive_file"],
};

const CGROUP_V1: CgroupFiles = CgroupFiles {
    limits: &["memory.limit_in_bytes"],
    current: "memory.usage_in_bytes",
    inactive_file_keys: &["total_inactive_file", "inactive_file"],
};

#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct CgroupCharge {
    limit_bytes: Option<u64>,
    current_bytes: Option<u64>,
    inactive_file_bytes: Option<u64>,
}

/// The charge of the level with the tightest limit (on a tie, the fuller one), or without any
/// limit the deepest level's charge. A parent nearer its larger limit than the child is to its
/// own is not reported here; the reclaim it causes shows up in the child's PSI.
fn cgroup_charge(mount: &Path, levels: &[PathBuf], files: &CgroupFiles) -> CgroupCharge {
    let mut chosen: Option<(PathBuf, CgroupCharge)> = None;
    for level in levels {
        let dir = mount.join(level);
        let limit_bytes = files
            .limits
            .iter()
            .filter_map(|name| read_text(&dir.join(name)).and_then(|text| parse_limit_bytes(&text)))
            .min();
        let current_bytes = read_text(&dir.join(files.current)).and_then(|text| parse_u64(&text));
        let candidate = CgroupCharge {
            limit_bytes,
            current_bytes,
            inactive_file_bytes: None,
        };
        let better = match &chosen {
            None => limit_bytes.is_some() || current_bytes.is_some(),
            Some((_, best)) => match (limit_bytes, best.limit_bytes) {
                (Some(limit), Some(best_limit)) => {
                    limit < best_limit
                        || (limit == best_limit && current_bytes > best.current_bytes)
                }
                (Some(_), None) => true,
                (None, _) => false,
            },
        };
        if better {
            chosen = Some((dir, candidate));
        }
    }
    let Some((dir, mut charge)) = chosen else {
        return CgroupCharge::default();
    };
    charge.inactive_file_bytes = read_text(&dir.join("memory.stat")).and_then(|text| {
        files
            .inactive_file_keys
            .iter()
            .find_map(|key| parse_stat_value(&text, key))
    });
    charge
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    const GIB: u64 = 1 << 30;

    /// A fake filesystem root under the temp directory, removed when dropped.
    struct FakeRoot {
        path: PathBuf,
    }

    impl FakeRoot {
        fn new(name: &str) -> FakeRoot {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let path = std::env::temp_dir().join(format!(
                "cairn-pressure-{}-{}-{name}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&path);
            fs::create_dir_all(&path).unwrap();
            FakeRoot { path }
        }

        fn write(&self, relative: &str, contents: &str) -> &FakeRoot {
            let path = self.path.join(relative);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, contents).unwrap();
            self
        }

        fn read(&self) -> MemoryReading {
            read_memory_at(&self.path)
        }
    }

    impl Drop for FakeRoot {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.path);
        }
    }

    const MEMINFO: &str = "MemTotal:       24683656 kB\n\
                           MemFree:        24369936 kB\n\
                           MemAvailable:   24331200 kB\n\
                           Buffers:             680 kB\n";

    const PSI_IDLE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                            full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

    fn psi(some_avg10: &str) -> String {
        format!(
            "some avg10={some_avg10} avg60=1.00 avg300=0.50 total=12345\n\
             full avg10=0.10 avg60=0.00 avg300=0.00 total=99\n"
        )
    }

    #[test]
    fn meminfo_values_are_read_in_bytes() {
        let root = FakeRoot::new("meminfo");
        root.write("proc/meminfo", MEMINFO);
        let reading = root.read();
        assert_eq!(reading.ram_total_bytes, Some(24_683_656 * 1024));
        assert_eq!(reading.ram_available_bytes, Some(24_331_200 * 1024));
        assert_eq!(reading.cgroup_limit_bytes, None);
        assert_eq!(reading.psi_some_avg10_percent, None);
    }

    #[test]
    fn malformed_meminfo_gives_none() {
        let cases = [
            ("", None, None),
            ("garbage\n\n:::\n", None, None),
            (
                "MemTotal: lots kB\nMemAvailable: 100 kB\n",
                None,
                Some(102_400),
            ),
            ("MemTotal: 100\nMemAvailable: 100 MB\n", None, None),
            ("MemTotal: 100 kB extra\nMemAvailable: -5 kB\n", None, None),
            ("MemTotal: 18446744073709551615 kB\n", None, None),
            ("MemTotal: 1 kB\n", Some(1024), None),
            // The first line with the key decides, so a later good one does not mask garbage.
            ("MemTotal: x kB\nMemTotal: 4 kB\n", None, None),
            ("MemTotalish: 4 kB\nMemAvailable:2 kB\n", None, Some(2048)),
        ];
        for (text, total, available) in cases {
            assert_eq!(parse_meminfo_bytes(text, "MemTotal"), total, "{text:?}");
            assert_eq!(
                parse_meminfo_bytes(text, "MemAvailable"),
                available,
                "{text:?}"
            );
        }
        let root = FakeRoot::new("meminfo-bad");
        root.write("proc/meminfo", "MemTotal: 12 bytes\n");
        assert_eq!(root.read(), MemoryReading::default());
    }

    #[test]
    fn a_missing_tree_gives_an_empty_reading() {
        let root = FakeRoot::new("empty");
        assert_eq!(root.read(), MemoryReading::default());
        assert_eq!(
            read_memory_at(&root.path.join("does/not/exist")),
            MemoryReading::default()
        );
    }

    #[test]
    fn cgroup_v2_limit_current_and_inactive_file_are_read() {
        let root = FakeRoot::new("v2");
        root.write("proc/meminfo", MEMINFO)
            .write("proc/self/cgroup", "0::/system.slice/cairn.service\n")
            .write(
                "sys/fs/cgroup/system.slice/cairn.service/memory.max",
                "2147483648\n",
            )
            .write(
                "sys/fs/cgroup/system.slice/cairn.service/memory.high",
                "max\n",
            )
            .write(
                "sys/fs/cgroup/system.slice/cairn.service/memory.current",
                "1073741824\n",
            )
            .write(
                "sys/fs/cgroup/system.slice/cairn.service/memory.stat",
                "anon 600000000\nfile 400000000\nactive_file 100\ninactive_file 300000000\n",
            );
        let reading = root.read();
        assert_eq!(reading.cgroup_limit_bytes, Some(2 * GIB));
        assert_eq!(reading.cgroup_current_bytes, Some(GIB));
        assert_eq!(reading.cgroup_inactive_file_bytes, Some(300_000_000));
        assert_eq!(reading.cgroup_working_set_bytes(), Some(GIB - 300_000_000));
        assert_eq!(usable_memory_bytes(&reading), Some(2 * GIB));
    }

    #[test]
    fn cgroup_v2_max_means_no_limit() {
        let root = FakeRoot::new("v2-max");
        root.write("proc/self/cgroup", "0::/user.slice\n")
            .write("sys/fs/cgroup/user.slice/memory.max", "max\n")
            .write("sys/fs/cgroup/user.slice/memory.high", "max\n")
            .write("sys/fs/cgroup/user.slice/memory.current", "5000\n");
        let reading = root.read();
        assert_eq!(reading.cgroup_limit_bytes, None);
        // Without a limit the process's own charge is still reported, for statistics.
        assert_eq!(reading.cgroup_current_bytes, Some(5000));
        assert_eq!(PressureConfig::default().shortage(&reading), None);
    }

    #[test]
    fn cgroup_v2_high_below_max_binds() {
        let root = FakeRoot::new("v2-high");
        root.write("proc/self/cgroup", "0::/a\n")
            .write("sys/fs/cgroup/a/memory.max", "4294967296\n")
            .write("sys/fs/cgroup/a/memory.high", "1073741824\n")
            .write("sys/fs/cgroup/a/memory.current", "10\n");
        assert_eq!(root.read().cgroup_limit_bytes, Some(GIB));
    }

    #[test]
    fn cgroup_v2_tightest_ancestor_limit_binds() {
        let root = FakeRoot::new("v2-ancestor");
        root.write("proc/self/cgroup", "0::/pod/ctr\n")
            .write("sys/fs/cgroup/pod/ctr/memory.max", "max\n")
            .write("sys/fs/cgroup/pod/ctr/memory.current", "100\n")
            .write("sys/fs/cgroup/pod/memory.max", "536870912\n")
            .write("sys/fs/cgroup/pod/memory.current", "300\n")
            .write("sys/fs/cgroup/pod/memory.stat", "inactive_file 50\n")
            .write("sys/fs/cgroup/memory.max", "1073741824\n");
        let reading = root.read();
        assert_eq!(reading.cgroup_limit_bytes, Some(512 * MIB));
        assert_eq!(
            reading.cgroup_current_bytes,
            Some(300),
            "the pod's charge, not the leaf's"
        );
        assert_eq!(reading.cgroup_inactive_file_bytes, Some(50));

        // Equal limits: the fuller level (the parent, charged for its other children too) is
        // the one that reaches its limit first.
        root.write("sys/fs/cgroup/pod/ctr/memory.max", "536870912\n");
        assert_eq!(root.read().cgroup_current_bytes, Some(300));
        root.write("sys/fs/cgroup/pod/ctr/memory.current", "400\n");
        assert_eq!(root.read().cgroup_current_bytes, Some(400));
    }

    #[test]
    fn cgroup_namespace_root_is_the_process_cgroup() {
        // Inside a cgroup namespace the process sees "0::/" and its cgroup at the mount.
        let root = FakeRoot::new("v2-ns");
        root.write("proc/self/cgroup", "0::/\n")
            .write("sys/fs/cgroup/memory.max", "268435456\n")
            .write("sys/fs/cgroup/memory.current", "1000\n");
        assert_eq!(root.read().cgroup_limit_bytes, Some(256 * MIB));
        // Without a namespace the path may name the host's directory, absent in the container.
        let root = FakeRoot::new("v2-host-path");
        root.write("proc/self/cgroup", "0::/kubepods/burstable/pod1/abc\n")
            .write("sys/fs/cgroup/memory.max", "268435456\n");
        assert_eq!(root.read().cgroup_limit_bytes, Some(256 * MIB));
    }

    #[test]
    fn malformed_cgroup_files_give_none() {
        let root = FakeRoot::new("v2-bad");
        root.write("proc/self/cgroup", "0::/a\n")
            .write("sys/fs/cgroup/a/memory.max", "12 GB\n")
            .write("sys/fs/cgroup/a/memory.high", "-1\n")
            .write("sys/fs/cgroup/a/memory.current", "\n")
            .write(
                "sys/fs/cgroup/a/memory.stat",
                "inactive_file\ninactive_file 5 6\n",
            );
        let reading = root.read();
        assert_eq!(reading.cgroup_limit_bytes, None);
        assert_eq!(reading.cgroup_current_bytes, None);
        assert_eq!(reading.cgroup_inactive_file_bytes, None);

        // A path that climbs out of the hierarchy is refused, not followed.
        let root = FakeRoot::new("v2-climb");
        root.write("proc/self/cgroup", "0::/../../etc\n")
            .write("sys/fs/cgroup/memory.max", "1000000\n");
        assert_eq!(root.read().cgroup_limit_bytes, None);
        assert_eq!(cgroup_levels("relative/path"), None);
        assert_eq!(cgroup_levels("/a/./b"), None);

        // A cgroup file that is not a cgroup file.
        let root = FakeRoot::new("v2-junk");
        root.write("proc/self/cgroup", "nonsense\n\n0:\n")
            .write("sys/fs/cgroup/memory.max", "1000000\n");
        assert_eq!(root.read().cgroup_limit_bytes, None);
    }

    #[test]
    fn cgroup_levels_run_from_the_leaf_to_the_mount() {
        let levels = cgroup_levels("/a//b/").unwrap();
        assert_eq!(
            levels,
            vec![PathBuf::from("a/b"), PathBuf::from("a"), PathBuf::new()]
        );
        assert_eq!(cgroup_levels("/").unwrap(), vec![PathBuf::new()]);
    }

    #[test]
    fn cgroup_v1_is_the_fallback() {
        let root = FakeRoot::new("v1");
        root.write(
            "proc/self/cgroup",
            "9:name=systemd:/\n4:cpu,memory:/docker/abc\n0::/\n",
        )
        .write(
            "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
            "536870912\n",
        )
        .write(
            "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes",
            "400000000\n",
        )
        .write(
            "sys/fs/cgroup/memory/docker/abc/memory.stat",
            "inactive_file 7\ntotal_inactive_file 100000000\n",
        )
        .write(
            "sys/fs/cgroup/memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        let reading = root.read();
        assert_eq!(reading.cgroup_limit_bytes, Some(512 * MIB));
        assert_eq!(reading.cgroup_current_bytes, Some(400_000_000));
        assert_eq!(reading.cgroup_inactive_file_bytes, Some(100_000_000));

        // v1's "unlimited" is a huge number, not a limit.
        let root = FakeRoot::new("v1-unlimited");
        root.write("proc/self/cgroup", "4:memory:/x\n")
            .write(
                "sys/fs/cgroup/memory/x/memory.limit_in_bytes",
                "9223372036854771712\n",
            )
            .write("sys/fs/cgroup/memory/x/memory.usage_in_bytes", "1234\n");
        let reading = root.read();
        assert_eq!(reading.cgroup_limit_bytes, None);
        assert_eq!(reading.cgroup_current_bytes, Some(1234));
    }

    #[test]
    fn cgroup_v2_limit_wins_over_v1() {
        let root = FakeRoot::new("v2-over-v1");
        root.write("proc/self/cgroup", "4:memory:/x\n0::/y\n")
            .write("sys/fs/cgroup/y/memory.max", "1073741824\n")
            .write(
                "sys/fs/cgroup/memory/x/memory.limit_in_bytes",
                "536870912\n",
            );
        assert_eq!(root.read().cgroup_limit_bytes, Some(GIB));
    }

    #[test]
    fn psi_prefers_the_cgroup_file() {
        let root = FakeRoot::new("psi");
        root.write("proc/pressure/memory", &psi("3.25"));
        assert_eq!(root.read().psi_some_avg10_percent, Some(3.25));
        root.write("proc/self/cgroup", "0::/svc\n")
            .write("sys/fs/cgroup/svc/memory.pressure", &psi("42.50"));
        assert_eq!(root.read().psi_some_avg10_percent, Some(42.5));
        // An unreadable cgroup file falls back to the system's.
        root.write("sys/fs/cgroup/svc/memory.pressure", "some avg10=oops\n");
        assert_eq!(root.read().psi_some_avg10_percent, Some(3.25));
        root.write("proc/pressure/memory", PSI_IDLE);
        assert_eq!(root.read().psi_some_avg10_percent, Some(0.0));
    }

    #[test]
    fn malformed_psi_gives_none() {
        for text in [
            "",
            "full avg10=5.00 avg60=0.00 avg300=0.00 total=0\n",
            "some avg60=5.00\n",
            "some avg10=\n",
            "some avg10=NaN avg60=0\n",
            "some avg10=inf\n",
            "some avg10=-1.0\n",
            "some avg10=100.5\n",
            "somewhat avg10=5.0\n",
        ] {
            assert_eq!(parse_psi_some_avg10(text), None, "{text:?}");
        }
        assert_eq!(parse_psi_some_avg10("some avg10=100.00\n"), Some(100.0));
    }

    #[test]
    fn read_memory_on_this_machine() {
        let reading = read_memory();
        if !cfg!(target_os = "linux") {
            assert_eq!(reading.ram_total_bytes, None);
            return;
        }
        let total_bytes = reading.ram_total_bytes.expect("MemTotal on Linux");
        let available_bytes = reading.ram_available_bytes.expect("MemAvailable on Linux");
        assert!(total_bytes >= 64 * MIB, "MemTotal {total_bytes}");
        assert!(available_bytes > 0 && available_bytes <= total_bytes);
        if let Some(percent) = reading.psi_some_avg10_percent {
            assert!((0.0..=100.0).contains(&percent));
        }
        if let Some(limit_bytes) = reading.cgroup_limit_bytes {
            assert!(limit_bytes < CGROUP_UNLIMITED_BYTES);
        }
        let arc_max_bytes = default_arc_max_bytes(&reading);
        assert!(arc_max_bytes >= ARC_MAX_FLOOR_BYTES);
        assert!(arc_max_bytes <= total_bytes.max(2 * ARC_MAX_FLOOR_BYTES) / 2);
    }

    #[test]
    fn defaults_follow_ram_and_the_cgroup_limit() {
        let ram = MemoryReading {
            ram_total_bytes: Some(16 * GIB),
            ..MemoryReading::default()
        };
        assert_eq!(usable_memory_bytes(&ram), Some(16 * GIB));
        assert_eq!(default_arc_max_bytes(&ram), 8 * GIB);
        let contained = MemoryReading {
            cgroup_limit_bytes: Some(2 * GIB),
            ..ram
        };
        assert_eq!(usable_memory_bytes(&contained), Some(2 * GIB));
        assert_eq!(default_arc_max_bytes(&contained), GIB);
        let limit_above_ram = MemoryReading {
            cgroup_limit_bytes: Some(64 * GIB),
            ..ram
        };
        assert_eq!(default_arc_max_bytes(&limit_above_ram), 8 * GIB);
        let limit_only = MemoryReading {
            cgroup_limit_bytes: Some(4 * GIB),
            ..MemoryReading::default()
        };
        assert_eq!(default_arc_max_bytes(&limit_only), 2 * GIB);
        let tiny = MemoryReading {
            cgroup_limit_bytes: Some(100 * MIB),
            ..ram
        };
        assert_eq!(default_arc_max_bytes(&tiny), 64 * MIB);
        assert_eq!(usable_memory_bytes(&MemoryReading::default()), None);
        assert_eq!(default_arc_max_bytes(&MemoryReading::default()), 64 * MIB);

        assert_eq!(default_arc_min_bytes(8 * GIB), 256 * MIB);
        assert_eq!(default_arc_min_bytes(GIB), 32 * MIB);
        assert_eq!(default_arc_min_bytes(64 * MIB), 32 * MIB);
        assert_eq!(
            default_arc_min_bytes(16 * MIB),
            16 * MIB,
            "never above arc_max"
        );
        assert_eq!(default_arc_min_bytes(0), 0);
    }

    // ---- The controller ----

    const MIN: u64 = 256 * MIB;
    const MAX: u64 = 8 * GIB;

    fn plenty() -> MemoryReading {
        MemoryReading {
            ram_total_bytes: Some(64 * GIB),
            ram_available_bytes: Some(40 * GIB),
            cgroup_limit_bytes: Some(32 * GIB),
            cgroup_current_bytes: Some(10 * GIB),
            cgroup_inactive_file_bytes: Some(0),
            psi_some_avg10_percent: Some(0.0),
        }
    }

    fn low_available() -> MemoryReading {
        // The floor is 64 GiB / 64 = 1 GiB.
        MemoryReading {
            ram_available_bytes: Some(GIB - 1),
            ..plenty()
        }
    }

    fn cgroup_near_limit() -> MemoryReading {
        // Headroom 32 GiB / 16 = 2 GiB.
        MemoryReading {
            cgroup_current_bytes: Some(30 * GIB + 1),
            ..plenty()
        }
    }

    fn stalling() -> MemoryReading {
        MemoryReading {
            psi_some_avg10_percent: Some(10.5),
            ..plenty()
        }
    }

    fn controller() -> PressureController {
        PressureController::new(PressureConfig::default(), MIN, MAX)
    }

    #[test]
    fn each_signal_is_recognised_at_its_threshold() {
        let config = PressureConfig::default();
        assert_eq!(config.shortage(&plenty()), None);
        assert_eq!(config.shortage(&MemoryReading::default()), None);
        assert_eq!(
            config.shortage(&low_available()),
            Some(PressureCause::LowAvailable)
        );
        let at_floor = MemoryReading {
            ram_available_bytes: Some(GIB),
            ..plenty()
        };
        assert_eq!(config.shortage(&at_floor), None);
        assert_eq!(
            config.shortage(&cgroup_near_limit()),
            Some(PressureCause::CgroupNearLimit)
        );
        let at_headroom = MemoryReading {
            cgroup_current_bytes: Some(30 * GIB),
            ..plenty()
        };
        assert_eq!(config.shortage(&at_headroom), None);
        assert_eq!(config.shortage(&stalling()), Some(PressureCause::Stall));
        let psi_at_threshold = MemoryReading {
            psi_some_avg10_percent: Some(10.0),
            ..plenty()
        };
        assert_eq!(config.shortage(&psi_at_threshold), None);
        // Both short: the machine-wide signal is named.
        let both = MemoryReading {
            ram_available_bytes: Some(0),
            ..cgroup_near_limit()
        };
        assert_eq!(config.shortage(&both), Some(PressureCause::LowAvailable));
    }

    #[test]
    fn page_cache_near_the_cgroup_limit_is_not_pressure() {
        let full_of_page_cache = MemoryReading {
            cgroup_current_bytes: Some(32 * GIB),
            cgroup_inactive_file_bytes: Some(20 * GIB),
            ..plenty()
        };
        let mut pressure = controller();
        assert_eq!(
            PressureConfig::default().shortage(&full_of_page_cache),
            None
        );
        assert_eq!(
            pressure.tick(0, &full_of_page_cache, MAX, MAX),
            Decision::Hold
        );
        assert_eq!(pressure.shrinks(), 0);
        // Active memory at the limit is.
        let full_of_anon = MemoryReading {
            cgroup_inactive_file_bytes: Some(MIB),
            ..full_of_page_cache
        };
        assert!(matches!(
            pressure.tick(1000, &full_of_anon, MAX, MAX),
            Decision::Shrink {
                cause: PressureCause::CgroupNearLimit,
                ..
            }
        ));
    }

    /// Ticks once a second under `reading` with the cache at its target, applying each decision;
    /// returns the targets reached.
    fn run(
        pressure: &mut PressureController,
        reading: &MemoryReading,
        start_ms: u64,
        ticks: u64,
        mut target_bytes: u64,
    ) -> Vec<u64> {
        let mut targets = Vec::new();
        for tick in 0..ticks {
            match pressure.tick(start_ms + tick * 1000, reading, target_bytes, target_bytes) {
                Decision::Shrink { to_bytes, .. } | Decision::Grow { to_bytes } => {
                    target_bytes = to_bytes;
                }
                Decision::Hold => {}
            }
            targets.push(target_bytes);
        }
        targets
    }

    #[test]
    fn every_signal_shrinks_one_bounded_step_per_tick_down_to_min() {
        for (reading, cause) in [
            (low_available(), PressureCause::LowAvailable),
            (cgroup_near_limit(), PressureCause::CgroupNearLimit),
            (stalling(), PressureCause::Stall),
        ] {
            let mut pressure = controller();
            assert_eq!(
                pressure.tick(0, &reading, MAX, MAX),
                Decision::Shrink {
                    to_bytes: MAX - MAX / 32,
                    cause
                },
                "{cause:?}"
            );
            assert_eq!(pressure.last_cause(), Some(cause));
            let mut target_bytes = MAX - MAX / 32;
            let mut ticks = 1;
            loop {
                match pressure.tick(ticks * 1000, &reading, target_bytes, target_bytes) {
                    Decision::Shrink {
                        to_bytes,
                        cause: seen,
                    } => {
                        assert_eq!(seen, cause);
                        let step = (target_bytes / 32).max(MIB);
                        assert_eq!(to_bytes, (target_bytes - step).max(MIN), "{cause:?}");
                        target_bytes = to_bytes;
                    }
                    Decision::Hold => break,
                    grow @ Decision::Grow { .. } => panic!("{grow:?} under {cause:?}"),
                }
                ticks += 1;
                assert!(ticks < 1000, "never reached the floor");
            }
            assert_eq!(target_bytes, MIN, "stops exactly at min under {cause:?}");
            assert_eq!(pressure.shrinks(), ticks);
            // Pressure at the floor: nothing more to give, still counted and still held off.
            assert_eq!(
                pressure.tick(ticks * 1000 + 1000, &reading, MIN, MIN),
                Decision::Hold
            );
            assert_eq!(pressure.shrinks(), ticks);
            assert_eq!(pressure.pressure_ticks(), ticks + 2);
            assert!(pressure.no_grow(ticks * 1000 + 1000));
        }
    }

    #[test]
    fn a_large_shortfall_still_takes_one_step() {
        let starved = MemoryReading {
            ram_available_bytes: Some(0),
            cgroup_current_bytes: Some(40 * GIB),
            psi_some_avg10_percent: Some(100.0),
            ..plenty()
        };
        let mut pressure = controller();
        assert_eq!(
            pressure.tick(0, &starved, MAX, MAX),
            Decision::Shrink {
                to_bytes: MAX - MAX / 32,
                cause: PressureCause::LowAvailable
            }
        );
        let targets = run(&mut pressure, &starved, 1000, 10, MAX - MAX / 32);
        let mut previous = MAX - MAX / 32;
        for target in targets {
            assert_eq!(target, previous - previous / 32);
            previous = target;
        }
    }

    #[test]
    fn a_shrink_step_is_at_least_one_mib() {
        let mut pressure = PressureController::new(PressureConfig::default(), 0, 40 * MIB);
        assert_eq!(
            pressure.tick(0, &stalling(), 20 * MIB, 20 * MIB),
            Decision::Shrink {
                to_bytes: 19 * MIB,
                cause: PressureCause::Stall
            }
        );
        assert_eq!(
            pressure.tick(1000, &stalling(), MIB / 2, 0),
            Decision::Shrink {
                to_bytes: 0,
                cause: PressureCause::Stall
            }
        );
        assert_eq!(pressure.tick(2000, &stalling(), 0, 0), Decision::Hold);
    }

    #[test]
    fn growth_waits_out_the_holdoff_after_a_shrink() {
        let mut pressure = controller();
        let shrunk_bytes = match pressure.tick(10_000, &low_available(), MAX, MAX) {
            Decision::Shrink { to_bytes, .. } => to_bytes,
            other => panic!("{other:?}"),
        };
        assert!(pressure.no_grow(10_000));
        for now_ms in [10_001, 11_000, 14_999] {
            assert!(pressure.no_grow(now_ms));
            assert_eq!(
                pressure.tick(now_ms, &plenty(), shrunk_bytes, shrunk_bytes),
                Decision::Hold,
                "at {now_ms} ms"
            );
        }
        // A clock that went backwards is still within the hold-off.
        assert!(pressure.no_grow(9_000));
        assert!(!pressure.no_grow(15_000));
        assert_eq!(
            pressure.tick(15_000, &plenty(), shrunk_bytes, shrunk_bytes),
            Decision::Grow {
                to_bytes: shrunk_bytes + MAX / 64
            }
        );
        assert_eq!(pressure.grows(), 1);
        // Pressure again restarts the hold-off.
        assert!(matches!(
            pressure.tick(16_000, &stalling(), MAX, MAX),
            Decision::Shrink { .. }
        ));
        assert!(pressure.no_grow(20_999));
        assert_eq!(pressure.tick(20_999, &plenty(), MIN, MIN), Decision::Hold);
        assert!(matches!(
            pressure.tick(21_000, &plenty(), MIN, MIN),
            Decision::Grow { .. }
        ));
    }

    #[test]
    fn plentiful_memory_and_a_full_cache_grow_back_to_max_in_steps() {
        let mut pressure = controller();
        let targets = run(&mut pressure, &plenty(), 0, 200, MIN);
        let step = MAX / 64;
        let mut previous = MIN;
        for &target in &targets {
            assert!(
                target == previous + step || target == MAX,
                "{previous} -> {target}"
            );
            assert!(target <= MAX);
            previous = target;
            if target == MAX {
                break;
            }
        }
        assert_eq!(*targets.last().unwrap(), MAX);
        let growing_ticks = targets.iter().take_while(|&&target| target < MAX).count() as u64 + 1;
        assert_eq!(pressure.grows(), growing_ticks);
        assert_eq!(growing_ticks, (MAX - MIN).div_ceil(step));
        // At max: hold.
        assert_eq!(pressure.tick(500_000, &plenty(), MAX, MAX), Decision::Hold);
        assert!(!pressure.no_grow(500_000));
    }

    #[test]
    fn no_growth_without_demand_and_no_collapse_without_pressure() {
        let mut pressure = controller();
        let target_bytes = 2 * GIB;
        // Half empty: no reason to claim more memory, and no reason to give any back.
        for tick in 0..100 {
            assert_eq!(
                pressure.tick(tick * 1000, &plenty(), target_bytes, GIB),
                Decision::Hold
            );
        }
        // Just under "nearly full" still holds; at it, grows.
        let full_bytes = target_bytes - target_bytes / 32;
        assert_eq!(
            pressure.tick(100_000, &plenty(), target_bytes, full_bytes - 1),
            Decision::Hold
        );
        assert_eq!(
            pressure.tick(101_000, &plenty(), target_bytes, full_bytes),
            Decision::Grow {
                to_bytes: target_bytes + MAX / 64
            }
        );
        assert_eq!(pressure.shrinks(), 0);
        assert_eq!(pressure.grows(), 1);
        assert_eq!(pressure.last_cause(), None);
    }

    #[test]
    fn growth_keeps_clear_of_the_thresholds() {
        let mut pressure = controller();
        let step = MAX / 64; // 128 MiB
        // Not short (available above the 1 GiB floor), but a step would leave < 2 GiB.
        let tight = MemoryReading {
            ram_available_bytes: Some(2 * GIB + step - 1),
            ..plenty()
        };
        assert_eq!(PressureConfig::default().shortage(&tight), None);
        assert_eq!(pressure.tick(0, &tight, MIN, MIN), Decision::Hold);
        let roomy = MemoryReading {
            ram_available_bytes: Some(2 * GIB + step),
            ..plenty()
        };
        assert!(matches!(
            pressure.tick(1000, &roomy, MIN, MIN),
            Decision::Grow { .. }
        ));

        // The cgroup: limit 32 GiB less 2 GiB headroom.
        let near = MemoryReading {
            cgroup_current_bytes: Some(30 * GIB - step + 1),
            ..plenty()
        };
        assert_eq!(PressureConfig::default().shortage(&near), None);
        assert_eq!(pressure.tick(2000, &near, MIN, MIN), Decision::Hold);
        let clear = MemoryReading {
            cgroup_current_bytes: Some(30 * GIB - step),
            ..plenty()
        };
        assert!(matches!(
            pressure.tick(3000, &clear, MIN, MIN),
            Decision::Grow { .. }
        ));

        // Stalls above half the threshold.
        let stalls = MemoryReading {
            psi_some_avg10_percent: Some(5.5),
            ..plenty()
        };
        assert_eq!(pressure.tick(4000, &stalls, MIN, MIN), Decision::Hold);
        assert_eq!(pressure.shrinks(), 0, "none of these is pressure");
    }

    #[test]
    fn targets_stay_within_limits() {
        let mut pressure = controller();
        // A target above max (arc_max lowered) under pressure lands at max, not beyond.
        assert_eq!(
            pressure.tick(0, &stalling(), 2 * MAX, 2 * MAX),
            Decision::Shrink {
                to_bytes: MAX,
                cause: PressureCause::Stall
            }
        );
        // Without pressure it is the caller's to clamp: the controller does not grow it.
        assert_eq!(
            pressure.tick(10_000, &plenty(), 2 * MAX, 2 * MAX),
            Decision::Hold
        );
        // Lowered limits apply to the next decisions.
        pressure.set_limits(MIN, 4 * GIB);
        assert_eq!(pressure.max_bytes(), 4 * GIB);
        assert_eq!(
            pressure.tick(20_000, &plenty(), 4 * GIB - MIB, 4 * GIB),
            Decision::Grow { to_bytes: 4 * GIB }
        );
        pressure.set_limits(2 * GIB, GIB);
        assert_eq!((pressure.min_bytes(), pressure.max_bytes()), (GIB, GIB));
        assert_eq!(pressure.tick(30_000, &stalling(), GIB, GIB), Decision::Hold);
    }

    #[test]
    fn zero_divisors_do_not_panic() {
        let config = PressureConfig {
            shrink_step_divisor: 0,
            grow_step_divisor: 0,
            grow_holdoff_ms: 0,
            free_min_divisor: 0,
            cgroup_headroom_divisor: 0,
            psi_some_avg10_max_percent: 10.0,
        };
        let mut pressure = PressureController::new(config, 0, GIB);
        // No free floor: available 0 is not "low" by that signal.
        let empty = MemoryReading {
            ram_available_bytes: Some(0),
            psi_some_avg10_percent: None,
            cgroup_limit_bytes: None,
            ..plenty()
        };
        assert_eq!(config.shortage(&empty), None);
        // No headroom: short only beyond the limit itself.
        let over = MemoryReading {
            cgroup_current_bytes: Some(32 * GIB + 1),
            ..plenty()
        };
        assert_eq!(
            pressure.tick(0, &over, GIB, GIB),
            Decision::Shrink {
                to_bytes: GIB - MIB,
                cause: PressureCause::CgroupNearLimit
            }
        );
        assert_eq!(
            pressure.tick(0, &plenty(), GIB - MIB, GIB),
            Decision::Grow { to_bytes: GIB },
            "no hold-off: grows on the next tick"
        );
    }

    #[test]
    fn random_walks_keep_every_invariant() {
        // A small deterministic generator: the test must not need a crate.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let config = PressureConfig::default();
        let mut pressure = PressureController::new(config, MIN, MAX);
        let mut target_bytes = MAX;
        let mut last_pressure_ms = None;
        let mut now_ms = 0;
        for _ in 0..20_000 {
            now_ms += 200 + next(2000);
            let total_bytes = 16 * GIB;
            let limit_bytes = 4 * GIB + next(8) * GIB;
            let reading = MemoryReading {
                ram_total_bytes: Some(total_bytes),
                ram_available_bytes: (next(8) != 0).then(|| next(total_bytes)),
                cgroup_limit_bytes: (next(3) != 0).then_some(limit_bytes),
                cgroup_current_bytes: Some(next(limit_bytes + GIB)),
                cgroup_inactive_file_bytes: Some(next(GIB)),
                psi_some_avg10_percent: (next(4) != 0).then(|| next(20) as f64),
            };
            let size_bytes = target_bytes - next(target_bytes / 16 + 1);
            let short = config.shortage(&reading).is_some();
            let decision = pressure.tick(now_ms, &reading, target_bytes, size_bytes);
            match decision {
                Decision::Shrink { to_bytes, cause } => {
                    assert_eq!(config.shortage(&reading), Some(cause));
                    assert!(to_bytes < target_bytes);
                    assert!(target_bytes - to_bytes <= config.shrink_step_bytes(target_bytes));
                    target_bytes = to_bytes;
                }
                Decision::Grow { to_bytes } => {
                    assert!(!short);
                    assert!(last_pressure_ms.is_none_or(|last| now_ms - last >= 5000));
                    assert!(size_bytes >= target_bytes - target_bytes / 32);
                    assert!(to_bytes > target_bytes);
                    assert!(to_bytes - target_bytes <= config.grow_step_bytes(MAX));
                    target_bytes = to_bytes;
                }
                Decision::Hold => {}
            }
            if short {
                last_pressure_ms = Some(now_ms);
                assert!(!matches!(decision, Decision::Grow { .. }));
                assert!(pressure.no_grow(now_ms));
            }
            assert!((MIN..=MAX).contains(&target_bytes), "{target_bytes}");
        }
        assert!(
            pressure.shrinks() > 10 && pressure.grows() > 10,
            "both directions exercised"
        );
    }
}
