//! # Transaction groups (txgs) and the write throttle
//!
//! Every change to the pool joins exactly one transaction group. A txg is the unit of atomicity on
//! disk: the syncer writes everything dirtied in it and commits it with a new uberblock, so after a
//! crash either all of a txg's changes are visible or none are. This module numbers the txgs, moves
//! them through their three states, decides *when* to sync, and paces writers (the write
//! throttle) so dirty data in memory stays bounded without ever stopping writers abruptly.
//!
//! ## The three states
//!
//! ```text
//!   OPEN N ──(trigger; N+1 opens)──▶ QUIESCING N ──(holds drained)──▶ SYNCING N ──(Ok)──▶ SYNCED N
//!   holds join,                      no new holds,                    syncer runs,      │
//!   dirty bytes grow                 old holds may still dirty        N+1 is open       └─(Err)─▶ SUSPENDED
//! ```
//!
//! - **open**: exactly one txg is open at any time. `TxgEngine::hold` joins it; the hold may add
//!   dirty bytes to it (`TxgHold::add_dirty`) for as long as the hold lives.
//! - **quiescing**: the sync thread has closed the txg to new holds (the next txg opened in the
//!   same critical section, so writers never see "no open txg") and waits for the holds already
//!   taken to be dropped. Holds on a quiescing txg may still add dirty bytes.
//! - **syncing**: no holds remain; `TxgSyncer::sync_txg(N)` runs on the sync thread with the
//!   engine lock released. Meanwhile N+1 is open and accepts holds: a sync in progress never
//!   stops a writer (only the throttle does).
//! - **synced**: `last_synced_txg = N`, N's dirty bytes leave the total, waiters and throttled
//!   writers are woken.
//!
//! One thread ("cairn-txg-sync") does both quiescing and syncing, one txg at a time, so at most
//! two txgs are live: the open one and one in flight (quiescing *or* syncing). ZFS runs a separate
//! quiesce thread so a third txg can be quiescing while one syncs. Here N+1 starts quiescing only
//! after N synced; holds are short-lived (a hold covers one in-memory change), so the quiesce is
//! brief and the lost overlap is small. A second thread can be added without changing the API.
//!
//! ## When a txg syncs
//!
//! The sync thread quiesces the open txg N when one of these holds (first match names the
//! trigger recorded in `TxgTiming::trigger` and counted in `TxgStats`):
//! 1. `Requested`: somebody waits for N (`wait_synced`, `sync_now`, `sync_now_forced`). A wait on
//!    a clean open txg syncs it anyway (an empty txg with a new uberblock), or the wait would
//!    never end.
//! 2. `Shutdown`: shutdown was asked and N has dirty bytes or live holds.
//! 3. `DirtyThreshold`: N's dirty bytes exceed `dirty_sync_percent` (20 %) of `dirty_bytes_max`.
//! 4. `Timeout`: N has dirty bytes and was opened `txg_timeout_ms` (5 000 ms) ago or more; or
//!    N is clean but the syncer said, after the last sync, that it has work only later txgs
//!    complete (`TxgSyncer::wants_followup_txg`: frees deferred until more txgs have synced),
//!    so an idle pool still finishes that work, one empty txg per timeout. Otherwise an idle,
//!    clean txg is never synced on its own.
//!
//! ## Who may do what
//!
//! - Writers: `throttle(bytes)` first (may sleep, never while holding a hold), then `hold()` or
//!   `try_hold()`, then `add_dirty`, then drop the hold promptly. A thread must not wait for a
//!   txg (`wait_synced`, `sync_now*`, `shutdown`) while it holds a hold on that txg or an older
//!   one: the quiesce would wait for the hold and the hold for the quiesce (deadlock, as in ZFS).
//! - The syncer: runs only on the sync thread, one txg at a time, in increasing order with no
//!   gaps. It must not call back into `wait_synced`/`sync_now*`/`shutdown` (same deadlock).
//! - Anyone: `open_txg`, `last_synced_txg`, `dirty_bytes`, `history`, `stats` (all cheap).
//!
//! ## Failure and shutdown
//!
//! - If `sync_txg` returns `Err` (or panics), the engine is **suspended**: the txg stays unsynced,
//!   no later txg is synced, every current and future waiter gets `TxgError::Suspended` (a
//!   `Suspension` whose source is the syncer's error, whole), `try_hold` fails with it, and
//!   `throttle` stops pacing (it returns at once, so writers are not hung on a dead pool and
//!   get the error from `try_hold`). `hold()` still succeeds while suspended so code in the
//!   middle of a multi-step change does not panic; front ends should use `try_hold`. Recovery
//!   is export and re-import (not this module's job).
//! - A sync that cannot write because devices fail (every copy of some block unwritable) need
//!   not fail: the syncer may **suspend I/O** instead ([`SuspendHandle::suspend`], ZFS's
//!   `failmode=wait`) and wait in the middle of its txg ([`SuspendHandle::wait_resumed`]) until
//!   an administrator brings the devices back and resumes it ([`SuspendHandle::resume`], from
//!   `pool clear`); the txg then finishes as if nothing happened. While I/O is suspended, callers
//!   see the same refusals as above (`try_hold`, `wait_synced` fail with `Suspended`; `throttle`
//!   does not pace), so clients get errors rather than hang, and nothing already synced or
//!   already in the suspended txg is lost. A shutdown while suspended ends the wait: the syncer
//!   then fails its txg (fatal suspension, as above).
//! - `shutdown()` refuses new holds, lets the sync thread quiesce and sync the open txg if it has
//!   dirty data or live holds (waiting for those holds), then stops the thread and joins it. It is
//!   idempotent: later calls return the same result (`Ok`, or `Suspended` if the engine was). After
//!   shutdown, `try_hold` returns `TxgError::ShutDown` and **`hold()` panics** (a hold after
//!   shutdown is a caller bug: its changes could never reach disk). Waits for txgs that were not
//!   synced get `TxgError::ShutDown`.
//! - Dropping the last `Arc<TxgEngine>` without `shutdown()` asks the sync thread to finish the
//!   same way but does not wait for it. A syncer that owns an `Arc<TxgEngine>` forms a cycle:
//!   call `shutdown()` explicitly.
//!
//! ## Invariants (checked by `State::check_invariants` after every transition, with `assert!`)
//!
//! - `open.txg == last_synced_txg + 1 + (1 if a txg is in flight else 0)`: txg numbers are never
//!   skipped or reused; the in-flight txg is always `open.txg - 1`.
//! - A txg is marked synced only if it is exactly `last_synced_txg + 1` (`finish_sync`).
//! - A syncing txg has zero holds; holds only ever exist on the open or the quiescing txg
//!   (`slot_for_hold_mut`).
//! - `dirty_bytes_total == open.dirty_bytes + in_flight.dirty_bytes` (no underflow, no leak).
//! - `history.len() <= history_len`.
//! - A stopped sync thread implies shutdown was requested.
//!
//! ## The write throttle
//!
//! Dirty bytes (`dirty_bytes_total`, all unsynced txgs) are bounded by `dirty_bytes_max`
//! (default 10 % of RAM, capped at 4 GiB; 1 GiB if RAM is unknown). Each `throttle(bytes)` call
//! evaluates `delay_ns(config, dirty + bytes)`, a hyperbola that is flat, then steep:
//!
//! ```text
//! delay = 0                                                  if dirty <= min   (min = 60 % of max)
//! delay = min(delay_max, delay_scale * (dirty - min) / (max - dirty))   between
//! delay = delay_max                                          if dirty >= max
//! ```
//!
//! With the defaults (`delay_scale_ns` = 500 000, `delay_max_ns` = 100 ms):
//!
//! | dirty / max | delay    | paced rate       |
//! |-------------|----------|------------------|
//! | <= 60 %     | 0        | unlimited        |
//! | 61 %        | 12.8 µs  | ~78 000 ops/s    |
//! | 80 %        | 500 µs   | 2 000 ops/s      |
//! | 90 %        | 1.5 ms   | ~670 ops/s       |
//! | 98 %        | 9.5 ms   | ~105 ops/s       |
//! | 99 %        | 19.5 ms  | ~51 ops/s        |
//! | >= 99.8 %   | 100 ms   | 10 ops/s (cap)   |
//!
//! There is no cliff: the delay rises continuously from 0. Delays are *scheduled*, not just
//! slept: each delayed writer wakes at `max(now, previous_wakeup) + delay`, so N concurrent
//! writers are spaced `delay` apart and the admitted *rate* is `1 / delay` however many threads
//! there are (as ZFS's `dp_last_wakeup`). Only when `dirty >= dirty_bytes_max` does a writer
//! block outright, until a sync brings dirty below the max (counted in
//! `TxgStats::writers_blocked_at_max_count`). A single write larger than the max can still pass
//! when the pool is nearly clean, since blocking looks at current dirty, not dirty + bytes.
//!
//! With `sync_target_ms` > 0 the limit in force is smaller when the pool is slow: after each
//! sync of at least 16 MiB the engine folds the txg's bytes per second of sync time into a
//! moving average, and the limit (for blocking, the delay curve and the early-sync threshold)
//! becomes what that rate writes in `sync_target_ms`, between `DIRTY_LIMIT_FLOOR_BYTES` and
//! `dirty_bytes_max`. Whoever waits for a txg sync (a FLUSH served by one, a writer blocked at
//! the limit) then waits about that long, not `dirty_bytes_max` / rate (seconds, for a few GiB).
//!
//! Dirty bytes leave the total when their txg's sync completes: that total is what memory holds,
//! and it is held to `dirty_bytes_max`. Under a sync target the limit in force is held instead
//! against what a txg-sync waiter would wait for: the open txg's bytes plus what the syncing
//! txg has left to write, estimated as its bytes less what the measured rate writes in the time
//! its sync has run (ZFS releases dirty bytes block by block as their writes complete, for the
//! same reason). Without it a syncing txg counted whole until its last write, and the writers
//! of the next one were delayed for bytes already on their way out. Partial writes showed what
//! that costs: 8 KiB rewrites into 128 KiB records dirty a whole record each, so the txg's size
//! decides how many rewrites each record written absorbs, and holding the open txg to what the
//! sync in flight had *started* with kept txgs at a third of the limit (BENCHMARKS.md, "Txgs
//! that count what is left to sync"). The throttle takes the larger delay of the two levels and
//! blocks at either limit; a writer blocked only by the estimate looks again every millisecond.
//! The estimate trusts the rate: a sync slower than it was measured to be lets the next txg grow
//! to the limit while it still runs, so a waiter may then wait for both (bounded by the memory
//! level all the same).
//!
//! ## Known gaps
//!
//! - Time is the real clock (`Instant`), not an injected one; tests use short timeouts and never
//!   assert durations.
//! - One mutex protects the state; fine for a user-space pool, a per-CPU hold count would scale
//!   further.
//! - `delay_scale_ns` is a fixed number; only the dirty limit follows the measured sync speed
//!   (`sync_target_ms`), and only when asked (see design.md "Where we mean to beat ZFS").

use std::collections::VecDeque;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

const GIB: u64 = 1 << 30;
/// `dirty_bytes_max` default: this percentage of RAM ...
const DIRTY_BYTES_MAX_RAM_PERCENT: u64 = 10;
/// ... capped at this many bytes ...
const DIRTY_BYTES_MAX_CAP: u64 = 4 * GIB;
/// ... or this when RAM size is unknown.
const DIRTY_BYTES_MAX_FALLBACK: u64 = GIB;
/// Name of the sync thread (visible in `ps -L`, `top -H`, debuggers).
pub const SYNC_THREAD_NAME: &str = "cairn-txg-sync";

/// Tunables of the txg engine. Defaults follow OpenZFS (see the module comment).
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
    /// milliseconds (never below `DIRTY_LIMIT_FLOOR_BYTES`, never above `dirty_bytes_max`), so
    /// a caller waiting for a txg sync (a FLUSH served by one) waits about this long however
    /// large the max is. 0: the max alone.
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

    fn txg_timeout(&self) -> Duration {
        Duration::from_millis(self.txg_timeout_ms)
    }
}

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

/// How often a writer blocked only by the estimate of a sync's progress looks again.
const THROTTLE_RECHECK: Duration = Duration::from_millis(1);

/// Of a syncing txg's `dirty_bytes`, what is left to write after `elapsed` at
/// `bytes_per_sec` (an estimate: 0 once the sync is overdue).
pub fn sync_left_bytes(dirty_bytes: u64, bytes_per_sec: u64, elapsed: Duration) -> u64 {
    let written = u128::from(bytes_per_sec) * elapsed.as_micros() / 1_000_000;
    let written = u64::try_from(written).unwrap_or(u64::MAX);
    dirty_bytes.saturating_sub(written)
}

fn percent_of(total_bytes: u64, percent: u32) -> u64 {
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

/// The throttle curve: how long a writer must be delayed when dirty data is at `dirty_bytes`.
/// Pure function of the config; 0 at or below `delay_min_dirty_percent`, `delay_max_ns` at or
/// above `dirty_bytes_max`, continuous and non-decreasing in between (see module comment).
pub fn delay_ns(config: &TxgConfig, dirty_bytes: u64) -> u64 {
    delay_ns_within(config, config.dirty_bytes_max, dirty_bytes)
}

/// `delay_ns` with `max_bytes` in force instead of `dirty_bytes_max`.
fn delay_ns_within(config: &TxgConfig, max_bytes: u64, dirty_bytes: u64) -> u64 {
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
fn next_wakeup(now: Instant, last_wakeup: Option<Instant>, delay: Duration) -> Instant {
    let base = match last_wakeup {
        Some(last) if last > now => last,
        _ => now,
    };
    base + delay
}

/// A tunable of `TxgConfig` out of its range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxgConfigError {
    #[error("{0} must be > 0")]
    Zero(&'static str),
    #[error("{name} {value} > 100")]
    PercentOver100 { name: &'static str, value: u32 },
}

/// Why a txg sync failed, as the syncer (the layer above) reports it. Boxed because the pool
/// cannot name the syncer's error type; the box keeps it whole, so the suspension that follows
/// still holds the device error (or full pool) that caused it, for `source()` and downcasts.
pub type SyncError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Writes and commits one txg. Implemented by the layer above the pool (objects, datasets).
pub trait TxgSyncer: Send + Sync + 'static {
    /// Write everything dirtied in `txg` and commit it (new uberblock). Called on the sync thread
    /// only, one txg at a time, in increasing order.
    fn sync_txg(&self, txg: u64) -> Result<(), SyncError>;

    /// Asked on the sync thread after each successful sync: whether work is pending that only
    /// later txgs complete even if nothing new is dirtied (frees that become reusable a few
    /// txgs after they were made). If so, a clean open txg is synced on the timeout.
    fn wants_followup_txg(&self) -> bool {
        false
    }
}

/// Why the engine refuses work: a sync failed (for good), or the syncer suspended I/O until
/// devices come back. Every waiter gets a copy, hence the `Arc` (errors are not `Clone`); the
/// cause keeps its own type, so `source()` leads to the device error (or whatever it was) and
/// a front end can still tell what happened.
#[derive(Clone, Debug)]
pub struct Suspension {
    what: String,
    cause: std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>,
}

/// A suspension reason that is only text: a panic's message, or the syncer's own account of
/// an I/O suspension (`SuspendHandle::suspend`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SuspendReason(pub String);

impl Suspension {
    pub fn new(
        what: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Suspension {
        Suspension {
            what: what.into(),
            cause: std::sync::Arc::from(cause.into()),
        }
    }

    /// What made the engine stop (the first error of the chain below this one).
    pub fn cause(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.cause
    }

    /// The whole story as text: what stopped and every cause below it.
    pub fn reason(&self) -> String {
        cairn_device::error_chain(self)
    }
}

impl fmt::Display for Suspension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Suspension {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.cause)
    }
}

/// Two suspensions are the same when they tell the same story (waiters compare results).
impl PartialEq for Suspension {
    fn eq(&self, other: &Suspension) -> bool {
        std::sync::Arc::ptr_eq(&self.cause, &other.cause) || self.reason() == other.reason()
    }
}

impl Eq for Suspension {}

/// Why waiting for a txg failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxgError {
    /// A sync failed: the pool stops syncing and every waiter gets the error.
    #[error("pool suspended")]
    Suspended(#[source] Suspension),
    /// The engine was shut down before the txg synced (or a hold was asked after shutdown).
    #[error("txg engine shut down")]
    ShutDown,
}

impl TxgError {
    /// Both are I/O errors to a client: the pool cannot write now. A suspension is not "read
    /// only" (the target still takes writes once the devices are back and `pool clear` ran).
    pub fn class(&self) -> cairn_device::ErrorClass {
        match self {
            TxgError::Suspended(_) | TxgError::ShutDown => cairn_device::ErrorClass::Io,
        }
    }
}

/// What made the sync thread quiesce a txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncTrigger {
    /// Someone waited for the txg or asked for a sync.
    Requested,
    /// Shutdown with dirty data or live holds.
    Shutdown,
    /// The open txg's dirty bytes passed `dirty_sync_percent` of the max.
    DirtyThreshold,
    /// `txg_timeout_ms` elapsed since the txg opened.
    Timeout,
}

/// Timings of one synced txg (like ZFS's `txgs` kstat). Instants are microseconds since the
/// engine started; durations are microseconds (milliseconds would round most txgs to 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxgTiming {
    pub txg: u64,
    pub trigger: SyncTrigger,
    /// Dirty bytes the txg carried to the syncer.
    pub dirty_bytes: u64,
    /// Holds taken on this txg.
    pub holds_count: u64,
    pub opened_at_us: u64,
    pub quiesce_started_at_us: u64,
    pub sync_started_at_us: u64,
    /// Time open (opened → quiesce started).
    pub open_us: u64,
    /// Time waiting for holds to drain.
    pub quiesce_us: u64,
    /// Time inside `sync_txg`.
    pub sync_us: u64,
    /// Writers delayed by the throttle while this txg was open, and their total delay.
    pub writer_delays_count: u64,
    pub writer_delay_ns_total: u64,
    /// Writers blocked at `dirty_bytes_max` while this txg was open.
    pub writers_blocked_count: u64,
}

/// Engine-wide counters since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxgStats {
    pub txgs_synced: u64,
    pub bytes_synced_total: u64,
    pub writer_delays_count: u64,
    pub writer_delay_ns_total: u64,
    pub writers_blocked_at_max_count: u64,
    pub syncs_by_timeout: u64,
    pub syncs_by_dirty_threshold: u64,
    pub syncs_by_request: u64,
    pub syncs_at_shutdown: u64,
    /// 0 or 1: the first failure suspends the engine.
    pub sync_failures: u64,
    /// Times the syncer suspended I/O (each ended by a resume or a shutdown).
    pub io_suspensions: u64,
}

/// Which txgs are in which state right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxgPhases {
    pub open_txg: u64,
    pub quiescing_txg: Option<u64>,
    pub syncing_txg: Option<u64>,
    pub last_synced_txg: u64,
}

/// The per-txg counters of a txg that is open or in flight.
#[derive(Debug)]
struct TxgSlot {
    txg: u64,
    /// Live holds; the txg cannot finish quiescing until this is 0.
    holds_live: u64,
    holds_taken: u64,
    dirty_bytes: u64,
    opened_at: Instant,
    writer_delays_count: u64,
    writer_delay_ns_total: u64,
    writers_blocked_count: u64,
}

impl TxgSlot {
    fn new(txg: u64, opened_at: Instant) -> TxgSlot {
        TxgSlot {
            txg,
            holds_live: 0,
            holds_taken: 0,
            dirty_bytes: 0,
            opened_at,
            writer_delays_count: 0,
            writer_delay_ns_total: 0,
            writers_blocked_count: 0,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Quiescing,
    Syncing,
}

#[derive(Debug)]
struct InFlight {
    slot: TxgSlot,
    phase: Phase,
    trigger: SyncTrigger,
    quiesce_started_at: Instant,
    sync_started_at: Option<Instant>,
}

#[derive(Debug)]
struct State {
    open: TxgSlot,
    /// The txg being quiesced or synced: always `open.txg - 1`.
    in_flight: Option<InFlight>,
    last_synced_txg: u64,
    dirty_bytes_total: u64,
    /// Highest txg somebody asked to sync now.
    sync_requested_txg: u64,
    /// The syncer wants clean txgs synced on the timeout (`TxgSyncer::wants_followup_txg`).
    followup_wanted: bool,
    suspended: Option<Suspension>,
    /// I/O suspended by the syncer until `SuspendHandle::resume`: the reason.
    io_suspended: Option<Suspension>,
    shutdown_requested: bool,
    sync_thread_stopped: bool,
    throttle_last_wakeup: Option<Instant>,
    history: VecDeque<TxgTiming>,
    stats: TxgStats,
    /// Dirty bytes per second the syncs of large txgs achieved (moving average).
    sync_bytes_per_sec: Option<u64>,
}

impl State {
    fn check_invariants(&self, config: &TxgConfig) {
        let in_flight_count = u64::from(self.in_flight.is_some());
        assert_eq!(
            self.open.txg,
            self.last_synced_txg + 1 + in_flight_count,
            "txg numbering: open txg must follow the last synced and in-flight txgs"
        );
        let in_flight_dirty = match &self.in_flight {
            Some(flight) => {
                assert_eq!(flight.slot.txg + 1, self.open.txg);
                if flight.phase == Phase::Syncing {
                    assert_eq!(flight.slot.holds_live, 0, "holds on a syncing txg");
                    assert!(flight.sync_started_at.is_some());
                }
                flight.slot.dirty_bytes
            }
            None => 0,
        };
        assert_eq!(
            self.dirty_bytes_total,
            self.open.dirty_bytes + in_flight_dirty,
            "dirty total must equal the sum over live txgs"
        );
        assert!(self.history.len() <= config.history_len);
        assert!(!self.sync_thread_stopped || self.shutdown_requested);
    }

    /// The slot a hold on `txg` accounts to: the open txg or the quiescing one.
    fn slot_for_hold_mut(&mut self, txg: u64) -> (&mut TxgSlot, bool) {
        if self.open.txg == txg {
            return (&mut self.open, true);
        }
        match &mut self.in_flight {
            Some(flight) if flight.slot.txg == txg => {
                assert_eq!(
                    flight.phase,
                    Phase::Quiescing,
                    "hold alive on syncing txg {txg}"
                );
                (&mut flight.slot, false)
            }
            _ => panic!("hold on txg {txg} is neither open nor quiescing"),
        }
    }

    /// Whether the open txg must be quiesced now, and why.
    fn sync_trigger(&self, config: &TxgConfig, now: Instant) -> Option<SyncTrigger> {
        if self.in_flight.is_some() || self.suspended.is_some() {
            return None;
        }
        let open = &self.open;
        if open.txg <= self.sync_requested_txg {
            return Some(SyncTrigger::Requested);
        }
        if self.shutdown_requested && (open.dirty_bytes > 0 || open.holds_live > 0) {
            return Some(SyncTrigger::Shutdown);
        }
        let timed_out = now >= open.opened_at + config.txg_timeout();
        if open.dirty_bytes == 0 {
            let followup = self.followup_wanted && !self.shutdown_requested && timed_out;
            return followup.then_some(SyncTrigger::Timeout);
        }
        if open.dirty_bytes > self.dirty_sync_bytes(config) {
            return Some(SyncTrigger::DirtyThreshold);
        }
        timed_out.then_some(SyncTrigger::Timeout)
    }

    /// Why new work is refused: the engine failed, or its I/O is suspended.
    fn refusal(&self) -> Option<&Suspension> {
        self.suspended.as_ref().or(self.io_suspended.as_ref())
    }

    /// The dirty limit in force (see `dirty_limit_bytes`).
    fn dirty_limit(&self, config: &TxgConfig) -> u64 {
        dirty_limit_bytes(config, self.sync_bytes_per_sec)
    }

    /// The levels the throttle holds writers to, each as (bytes, limit): all dirty bytes
    /// against `dirty_bytes_max` (memory), and with a sync target and a measured rate, the
    /// bytes a txg-sync waiter would wait for against the limit in force (latency).
    fn throttle_levels(&self, config: &TxgConfig, now: Instant) -> [(u64, u64); 2] {
        let memory = (self.dirty_bytes_total, config.dirty_bytes_max);
        let latency = if self.sync_draining(config) {
            let left = self.in_flight_left_bytes(now);
            (self.open.dirty_bytes + left, self.dirty_limit(config))
        } else {
            (self.dirty_bytes_total, self.dirty_limit(config))
        };
        [memory, latency]
    }

    /// Whether writers block at a throttle level's limit, and if so whether only the latency
    /// level's estimate holds them, which falls as the sync runs (`Some(true)`: look again
    /// soon; `Some(false)`: only a finished sync frees room).
    fn at_limit(&self, config: &TxgConfig, now: Instant) -> Option<bool> {
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
    fn blocked(&self, config: &TxgConfig) -> Option<bool> {
        if self.throttle_active() {
            self.at_limit(config, Instant::now())
        } else {
            None
        }
    }

    /// A writer's delay for `bytes` more: the larger of the levels' delays.
    fn delay_ns_for(&self, config: &TxgConfig, now: Instant, bytes: u64) -> u64 {
        self.throttle_levels(config, now)
            .iter()
            .map(|&(dirty, limit)| delay_ns_within(config, limit, dirty.saturating_add(bytes)))
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
    fn dirty_sync_bytes(&self, config: &TxgConfig) -> u64 {
        percent_of(self.dirty_limit(config), config.dirty_sync_percent)
    }

    /// Folds a synced txg's throughput into the moving average (3/4 old, 1/4 new).
    fn record_sync_rate(&mut self, dirty_bytes: u64, sync_us: u64) {
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
    fn throttle_active(&self) -> bool {
        self.refusal().is_none() && !self.shutdown_requested
    }
}

struct Shared {
    config: TxgConfig,
    started_at: Instant,
    state: Mutex<State>,
    /// Wakes the sync thread: work to do, or the quiescing txg's holds drained.
    sync_cv: Condvar,
    /// Wakes waiters and throttled writers: a txg synced, the engine suspended or stopped.
    progress_cv: Condvar,
}

impl Shared {
    fn micros_since_start(&self, at: Instant) -> u64 {
        duration_us(at.saturating_duration_since(self.started_at))
    }

    /// Waits on `progress_cv` until `txg` is synced, or fails.
    fn wait_synced_locked(&self, mut st: MutexGuard<'_, State>, txg: u64) -> Result<(), TxgError> {
        assert!(
            txg <= st.open.txg,
            "wait_synced({txg}): txg {txg} is not open yet (open txg is {})",
            st.open.txg
        );
        if txg <= st.last_synced_txg {
            return Ok(());
        }
        if let Some(msg) = st.refusal() {
            return Err(TxgError::Suspended(msg.clone()));
        }
        if st.sync_requested_txg < txg {
            st.sync_requested_txg = txg;
            self.sync_cv.notify_all();
        }
        loop {
            if txg <= st.last_synced_txg {
                return Ok(());
            }
            if let Some(msg) = st.refusal() {
                return Err(TxgError::Suspended(msg.clone()));
            }
            if st.sync_thread_stopped {
                return Err(TxgError::ShutDown);
            }
            self.progress_cv.wait(&mut st);
        }
    }

    fn new_hold(self: &Arc<Self>, st: &mut State) -> TxgHold {
        st.open.holds_live += 1;
        st.open.holds_taken += 1;
        TxgHold {
            shared: Arc::clone(self),
            txg: st.open.txg,
        }
    }

    // ---- sync thread ------------------------------------------------------------------------

    fn sync_thread_main(&self, syncer: &dyn TxgSyncer) {
        while let Some(txg) = self.quiesce_next() {
            let result = match catch_unwind(AssertUnwindSafe(|| syncer.sync_txg(txg))) {
                Ok(result) => result,
                Err(payload) => Err(SyncError::from(SuspendReason(format!(
                    "sync_txg panicked: {}",
                    panic_message(&*payload)
                )))),
            };
            let followup = result.is_ok()
                && catch_unwind(AssertUnwindSafe(|| syncer.wants_followup_txg())).unwrap_or(false);
            self.finish_sync(txg, result, followup);
        }
    }

    /// Waits until the open txg must sync, quiesces it (opening the next) and waits for its
    /// holds to drain. Returns the txg to sync, or `None` when the thread must stop.
    fn quiesce_next(&self) -> Option<u64> {
        let config = &self.config;
        let mut st = self.state.lock();
        let trigger = loop {
            let now = Instant::now();
            if let Some(trigger) = st.sync_trigger(config, now) {
                break trigger;
            }
            if st.shutdown_requested {
                // Nothing left to sync (or suspended): stop.
                st.sync_thread_stopped = true;
                st.check_invariants(config);
                self.progress_cv.notify_all();
                return None;
            }
            if st.suspended.is_none() && (st.open.dirty_bytes > 0 || st.followup_wanted) {
                let deadline = st.open.opened_at + config.txg_timeout();
                self.sync_cv.wait_until(&mut st, deadline);
            } else {
                self.sync_cv.wait(&mut st);
            }
        };

        let now = Instant::now();
        let next_txg = st.open.txg.checked_add(1).expect("txg number overflow");
        let slot = std::mem::replace(&mut st.open, TxgSlot::new(next_txg, now));
        let txg = slot.txg;
        st.in_flight = Some(InFlight {
            slot,
            phase: Phase::Quiescing,
            trigger,
            quiesce_started_at: now,
            sync_started_at: None,
        });
        st.check_invariants(config);

        while st.in_flight.as_ref().is_some_and(|f| f.slot.holds_live > 0) {
            self.sync_cv.wait(&mut st);
        }
        let flight = st
            .in_flight
            .as_mut()
            .expect("only the sync thread ends a flight");
        assert_eq!(flight.slot.txg, txg);
        flight.phase = Phase::Syncing;
        flight.sync_started_at = Some(Instant::now());
        st.check_invariants(config);
        Some(txg)
    }

    /// Marks `txg` synced (or suspends the engine) and wakes everybody waiting for progress.
    fn finish_sync(&self, txg: u64, result: Result<(), SyncError>, followup_wanted: bool) {
        let config = &self.config;
        let mut st = self.state.lock();
        let flight = st
            .in_flight
            .as_ref()
            .expect("finish_sync without a txg in flight");
        assert_eq!(flight.slot.txg, txg);
        assert_eq!(flight.phase, Phase::Syncing);
        match result {
            Ok(()) => {
                st.followup_wanted = followup_wanted;
                let flight = st.in_flight.take().expect("checked above");
                assert_eq!(txg, st.last_synced_txg + 1, "txg skipped or reused");
                st.last_synced_txg = txg;
                st.dirty_bytes_total = st
                    .dirty_bytes_total
                    .checked_sub(flight.slot.dirty_bytes)
                    .expect("dirty total underflow");
                let timing = self.timing_of(&flight, Instant::now());
                st.record_sync_rate(flight.slot.dirty_bytes, timing.sync_us);
                let stats = &mut st.stats;
                stats.txgs_synced += 1;
                stats.bytes_synced_total += flight.slot.dirty_bytes;
                match flight.trigger {
                    SyncTrigger::Requested => stats.syncs_by_request += 1,
                    SyncTrigger::Shutdown => stats.syncs_at_shutdown += 1,
                    SyncTrigger::DirtyThreshold => stats.syncs_by_dirty_threshold += 1,
                    SyncTrigger::Timeout => stats.syncs_by_timeout += 1,
                }
                if config.history_len > 0 {
                    if st.history.len() == config.history_len {
                        st.history.pop_front();
                    }
                    st.history.push_back(timing);
                }
            }
            Err(cause) => {
                st.stats.sync_failures += 1;
                st.suspended = Some(Suspension::new(format!("sync of txg {txg} failed"), cause));
            }
        }
        st.check_invariants(config);
        drop(st);
        self.progress_cv.notify_all();
    }

    fn timing_of(&self, flight: &InFlight, synced_at: Instant) -> TxgTiming {
        let slot = &flight.slot;
        let sync_started_at = flight.sync_started_at.expect("synced txg started syncing");
        TxgTiming {
            txg: slot.txg,
            trigger: flight.trigger,
            dirty_bytes: slot.dirty_bytes,
            holds_count: slot.holds_taken,
            opened_at_us: self.micros_since_start(slot.opened_at),
            quiesce_started_at_us: self.micros_since_start(flight.quiesce_started_at),
            sync_started_at_us: self.micros_since_start(sync_started_at),
            open_us: duration_us(
                flight
                    .quiesce_started_at
                    .saturating_duration_since(slot.opened_at),
            ),
            quiesce_us: duration_us(
                sync_started_at.saturating_duration_since(flight.quiesce_started_at),
            ),
            sync_us: duration_us(synced_at.saturating_duration_since(sync_started_at)),
            writer_delays_count: slot.writer_delays_count,
            writer_delay_ns_total: slot.writer_delay_ns_total,
            writers_blocked_count: slot.writers_blocked_count,
        }
    }
}

fn duration_us(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Marks the sync thread stopped however it ends, so no waiter hangs if it panics (a broken
/// invariant): a panic suspends the engine.
struct SyncThreadExitGuard {
    shared: Arc<Shared>,
}

impl Drop for SyncThreadExitGuard {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        if std::thread::panicking() && st.suspended.is_none() {
            st.suspended = Some(Suspension::new(
                "txg sync thread panicked",
                SuspendReason("the sync thread ended without finishing its txg".into()),
            ));
        }
        st.shutdown_requested = true;
        st.sync_thread_stopped = true;
        drop(st);
        self.shared.progress_cv.notify_all();
    }
}

/// The transaction-group engine of one pool. Shared as `Arc<TxgEngine>`.
pub struct TxgEngine {
    shared: Arc<Shared>,
    sync_thread: Mutex<Option<JoinHandle<()>>>,
}

impl fmt::Debug for TxgEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxgEngine")
            .field("phases", &self.phases())
            .field("dirty_bytes", &self.dirty_bytes())
            .finish_non_exhaustive()
    }
}

impl TxgEngine {
    /// Opens txg `last_synced_txg + 1` and spawns the sync thread ("cairn-txg-sync").
    /// Panics if the config is invalid or the thread cannot be spawned.
    pub fn start(
        config: TxgConfig,
        last_synced_txg: u64,
        syncer: Arc<dyn TxgSyncer>,
    ) -> Arc<TxgEngine> {
        if let Err(err) = config.validate() {
            panic!("invalid TxgConfig: {err}");
        }
        assert!(last_synced_txg < u64::MAX - 2, "txg number space exhausted");
        let now = Instant::now();
        let state = State {
            open: TxgSlot::new(last_synced_txg + 1, now),
            in_flight: None,
            last_synced_txg,
            dirty_bytes_total: 0,
            sync_requested_txg: 0,
            followup_wanted: false,
            suspended: None,
            io_suspended: None,
            shutdown_requested: false,
            sync_thread_stopped: false,
            throttle_last_wakeup: None,
            sync_bytes_per_sec: None,
            history: VecDeque::with_capacity(config.history_len),
            stats: TxgStats::default(),
        };
        state.check_invariants(&config);
        let shared = Arc::new(Shared {
            config,
            started_at: now,
            state: Mutex::new(state),
            sync_cv: Condvar::new(),
            progress_cv: Condvar::new(),
        });
        let guard = SyncThreadExitGuard {
            shared: Arc::clone(&shared),
        };
        let handle = std::thread::Builder::new()
            .name(SYNC_THREAD_NAME.to_string())
            .spawn(move || {
                let exit_guard = guard;
                exit_guard.shared.sync_thread_main(&*syncer);
            })
            .expect("spawn the txg sync thread");
        Arc::new(TxgEngine {
            shared,
            sync_thread: Mutex::new(Some(handle)),
        })
    }

    pub fn config(&self) -> &TxgConfig {
        &self.shared.config
    }

    /// Joins the open txg: it cannot quiesce until the returned hold is dropped.
    /// Panics after `shutdown()`; succeeds while suspended (see `try_hold`).
    pub fn hold(&self) -> TxgHold {
        let mut st = self.shared.state.lock();
        assert!(
            !st.shutdown_requested,
            "TxgEngine::hold after shutdown: use try_hold where shutdown can race"
        );
        self.shared.new_hold(&mut st)
    }

    /// Like `hold`, but fails with `ShutDown` after shutdown and `Suspended` while suspended.
    pub fn try_hold(&self) -> Result<TxgHold, TxgError> {
        let mut st = self.shared.state.lock();
        if st.shutdown_requested {
            return Err(TxgError::ShutDown);
        }
        if let Some(msg) = st.refusal() {
            return Err(TxgError::Suspended(msg.clone()));
        }
        Ok(self.shared.new_hold(&mut st))
    }

    /// Call before `hold()` when about to dirty `bytes`: blocks while dirty data is at a limit
    /// (until a sync frees room, or the in-flight sync has written enough by the measured rate),
    /// then sleeps per `delay_ns` scheduled after the previous delayed writer. Returns at once
    /// if the engine is suspended or shut down.
    pub fn throttle(&self, bytes: u64) {
        let shared = &self.shared;
        let config = &shared.config;
        let mut st = shared.state.lock();
        let mut blocked = st.blocked(config);
        if blocked.is_some() {
            st.stats.writers_blocked_at_max_count += 1;
            st.open.writers_blocked_count += 1;
        }
        while let Some(estimate_falls) = blocked {
            if estimate_falls {
                shared.progress_cv.wait_for(&mut st, THROTTLE_RECHECK);
            } else {
                shared.progress_cv.wait(&mut st);
            }
            blocked = st.blocked(config);
        }
        if !st.throttle_active() {
            return;
        }
        let now = Instant::now();
        let delay = st.delay_ns_for(config, now, bytes);
        if delay == 0 {
            return;
        }
        let wakeup = next_wakeup(now, st.throttle_last_wakeup, Duration::from_nanos(delay));
        st.throttle_last_wakeup = Some(wakeup);
        let sleep = wakeup - now;
        let sleep_ns = duration_ns(sleep);
        st.stats.writer_delays_count += 1;
        st.stats.writer_delay_ns_total += sleep_ns;
        st.open.writer_delays_count += 1;
        st.open.writer_delay_ns_total += sleep_ns;
        drop(st);
        std::thread::sleep(sleep);
    }

    /// `throttle(bytes)` then `try_hold()` for a caller that must not wait (a write done on an
    /// async worker): a hold only when the throttle would neither block nor delay a writer of
    /// `bytes` and the engine takes holds; otherwise `None`, and the caller takes the ordinary
    /// path (which waits, or reports why the engine refuses).
    pub fn try_hold_now(&self, bytes: u64) -> Option<TxgHold> {
        let config = &self.shared.config;
        let mut st = self.shared.state.lock();
        if !st.throttle_active() {
            return None;
        }
        let now = Instant::now();
        if st.at_limit(config, now).is_some() || st.delay_ns_for(config, now, bytes) > 0 {
            return None;
        }
        Some(self.shared.new_hold(&mut st))
    }

    pub fn open_txg(&self) -> u64 {
        self.shared.state.lock().open.txg
    }

    pub fn last_synced_txg(&self) -> u64 {
        self.shared.state.lock().last_synced_txg
    }

    /// Which txg is open, quiescing, syncing, last synced.
    pub fn phases(&self) -> TxgPhases {
        let st = self.shared.state.lock();
        let in_flight = |phase| {
            st.in_flight
                .as_ref()
                .filter(|f| f.phase == phase)
                .map(|f| f.slot.txg)
        };
        TxgPhases {
            open_txg: st.open.txg,
            quiescing_txg: in_flight(Phase::Quiescing),
            syncing_txg: in_flight(Phase::Syncing),
            last_synced_txg: st.last_synced_txg,
        }
    }

    /// The suspension message, if a sync failed.
    /// Why the engine refuses work: it failed, or its I/O is suspended.
    pub fn suspended(&self) -> Option<String> {
        self.shared.state.lock().refusal().map(Suspension::reason)
    }

    /// `suspended`, as the error waiters get (its cause intact).
    pub fn suspension(&self) -> Option<Suspension> {
        self.shared.state.lock().refusal().cloned()
    }

    /// Whether I/O is suspended (recoverable by a resume), as opposed to failed for good.
    pub fn io_suspended(&self) -> bool {
        self.shared.state.lock().io_suspended.is_some()
    }

    /// The handle the syncer uses to suspend I/O and an administrator to resume it.
    pub fn suspend_handle(&self) -> SuspendHandle {
        SuspendHandle {
            shared: self.shared.clone(),
        }
    }

    /// Asks for `txg` to sync now if it has not (no waiting for the timeout; a clean open txg is
    /// synced as an empty txg) and waits until `last_synced_txg >= txg`.
    /// Panics if `txg` is newer than the open txg. Must not be called while holding a hold on
    /// `txg` or older.
    pub fn wait_synced(&self, txg: u64) -> Result<(), TxgError> {
        let st = self.shared.state.lock();
        self.shared.wait_synced_locked(st, txg)
    }

    /// Syncs everything dirty now and returns the txg that holds it: the open txg if it is
    /// dirty, else the one in flight if it is dirty; if nothing is dirty, returns
    /// `last_synced_txg` at once without a new txg.
    pub fn sync_now(&self) -> Result<u64, TxgError> {
        let st = self.shared.state.lock();
        if let Some(msg) = st.refusal() {
            return Err(TxgError::Suspended(msg.clone()));
        }
        let target = if st.open.dirty_bytes > 0 {
            st.open.txg
        } else {
            match &st.in_flight {
                Some(flight) if flight.slot.dirty_bytes > 0 => flight.slot.txg,
                _ => return Ok(st.last_synced_txg),
            }
        };
        self.shared.wait_synced_locked(st, target)?;
        Ok(target)
    }

    /// Asks for a sync of the open txg without waiting for it (a log that holds many blocks
    /// wants them released soon, without stalling the commit that noticed).
    pub fn request_sync(&self) {
        let mut st = self.shared.state.lock();
        let target = st.open.txg;
        if st.sync_requested_txg < target {
            st.sync_requested_txg = target;
            self.shared.sync_cv.notify_all();
        }
    }

    /// Syncs the currently open txg even if it is clean (a new uberblock, e.g. after a config
    /// change) and returns it.
    pub fn sync_now_forced(&self) -> Result<u64, TxgError> {
        let st = self.shared.state.lock();
        let target = st.open.txg;
        self.shared.wait_synced_locked(st, target)?;
        Ok(target)
    }

    /// Dirty bytes not yet synced (open and in-flight txgs).
    pub fn dirty_bytes(&self) -> u64 {
        self.shared.state.lock().dirty_bytes_total
    }

    /// Timings of the last `history_len` synced txgs, oldest first.
    pub fn history(&self) -> Vec<TxgTiming> {
        self.shared.state.lock().history.iter().cloned().collect()
    }

    pub fn stats(&self) -> TxgStats {
        self.shared.state.lock().stats.clone()
    }

    /// Refuses new holds, syncs the open txg if it has dirty data or live holds (waiting for
    /// them), stops and joins the sync thread. Idempotent. `Err(Suspended)` if the engine was
    /// suspended (its dirty data is not on disk).
    pub fn shutdown(&self) -> Result<(), TxgError> {
        let shared = &self.shared;
        {
            let mut st = shared.state.lock();
            st.shutdown_requested = true;
        }
        shared.sync_cv.notify_all();
        shared.progress_cv.notify_all();
        let handle = self.sync_thread.lock().take();
        if let Some(handle) = handle {
            // A panic of the sync thread is turned into suspension by its exit guard.
            let _ = handle.join();
        }
        let mut st = shared.state.lock();
        while !st.sync_thread_stopped {
            shared.progress_cv.wait(&mut st);
        }
        match &st.suspended {
            Some(suspension) => Err(TxgError::Suspended(suspension.clone())),
            None => Ok(()),
        }
    }
}

impl Drop for TxgEngine {
    /// Asks the sync thread to sync what is dirty and stop; does not wait (see module comment).
    fn drop(&mut self) {
        self.shared.state.lock().shutdown_requested = true;
        self.shared.sync_cv.notify_all();
        self.shared.progress_cv.notify_all();
    }
}

/// Suspends and resumes a txg engine's I/O (see the module documentation). Cloneable; holds
/// the engine's shared state, not the engine, so it may live in the syncer.
#[derive(Clone)]
pub struct SuspendHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for SuspendHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SuspendHandle")
            .field("io_suspended", &self.shared.state.lock().io_suspended)
            .finish()
    }
}

impl SuspendHandle {
    /// Suspends I/O for `reason`; waiters and new holds are refused from now on.
    pub fn suspend(&self, reason: String) {
        let mut st = self.shared.state.lock();
        if st.io_suspended.is_none() {
            st.stats.io_suspensions += 1;
        }
        st.io_suspended = Some(Suspension::new("I/O suspended", SuspendReason(reason)));
        drop(st);
        self.shared.progress_cv.notify_all();
    }

    /// Blocks until `resume` (true) or a shutdown is requested (false).
    pub fn wait_resumed(&self) -> bool {
        let mut st = self.shared.state.lock();
        while st.io_suspended.is_some() && !st.shutdown_requested {
            self.shared.progress_cv.wait(&mut st);
        }
        st.io_suspended.is_none()
    }

    /// Lets the suspended syncer try again. No effect if I/O is not suspended.
    pub fn resume(&self) {
        self.shared.state.lock().io_suspended = None;
        self.shared.progress_cv.notify_all();
    }

    /// The reason I/O is suspended, if it is.
    pub fn io_suspended(&self) -> Option<String> {
        self.shared
            .state
            .lock()
            .io_suspended
            .as_ref()
            .map(Suspension::reason)
    }
}

/// Membership of one txg. While it lives, that txg cannot finish quiescing.
pub struct TxgHold {
    shared: Arc<Shared>,
    txg: u64,
}

impl fmt::Debug for TxgHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxgHold").field("txg", &self.txg).finish()
    }
}

impl TxgHold {
    /// The txg this hold belongs to.
    pub fn txg(&self) -> u64 {
        self.txg
    }

    /// Accounts `bytes` of newly dirtied data to this hold's txg and to the total.
    pub fn add_dirty(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let shared = &self.shared;
        let config = &shared.config;
        let mut st = shared.state.lock();
        st.dirty_bytes_total = st
            .dirty_bytes_total
            .checked_add(bytes)
            .expect("dirty total overflow");
        let (slot, is_open) = st.slot_for_hold_mut(self.txg);
        let before_bytes = slot.dirty_bytes;
        slot.dirty_bytes += bytes;
        let after_bytes = slot.dirty_bytes;
        st.check_invariants(config);
        let threshold_bytes = st.dirty_sync_bytes(config);
        drop(st);
        // The sync thread sleeps indefinitely on a clean open txg and until the timeout on a
        // dirty one: wake it when the open txg becomes dirty or crosses the sync threshold.
        let crossed = before_bytes <= threshold_bytes && after_bytes > threshold_bytes;
        if is_open && (before_bytes == 0 || crossed) {
            shared.sync_cv.notify_all();
        }
    }
}

impl Drop for TxgHold {
    fn drop(&mut self) {
        let shared = &self.shared;
        let mut st = shared.state.lock();
        let (slot, is_open) = st.slot_for_hold_mut(self.txg);
        slot.holds_live = slot
            .holds_live
            .checked_sub(1)
            .expect("hold count underflow");
        // The sync thread waits for the quiescing txg's holds, and at shutdown for the open's.
        let wake_sync_thread = slot.holds_live == 0 && (!is_open || st.shutdown_requested);
        drop(st);
        if wake_sync_thread {
            shared.sync_cv.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::mpsc;
    use std::thread;

    const PATIENCE: Duration = Duration::from_secs(5);

    /// Polls `cond` until it holds; fails after a generous timeout (never a timing assertion).
    fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + PATIENCE;
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Runs `f` on another thread and returns its result, failing (not hanging) if it blocks.
    fn completes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("{what} did not complete"))
    }

    #[derive(Default)]
    struct FakeState {
        entered: Vec<u64>,
        returned: Vec<u64>,
        gate_closed: bool,
        fail_txg: Option<u64>,
        panic_txg: Option<u64>,
        /// Asks for follow-up txgs until this txg has synced.
        followups_until_txg: u64,
    }

    /// Records calls; can be paused (gate) or told to fail or panic at a given txg.
    #[derive(Default)]
    struct FakeSyncer {
        state: Mutex<FakeState>,
        cv: Condvar,
    }

    impl FakeSyncer {
        fn new() -> Arc<FakeSyncer> {
            Arc::new(FakeSyncer::default())
        }
        fn close_gate(&self) {
            self.state.lock().gate_closed = true;
        }
        fn open_gate(&self) {
            self.state.lock().gate_closed = false;
            self.cv.notify_all();
        }
        fn fail_at(&self, txg: u64) {
            self.state.lock().fail_txg = Some(txg);
        }
        fn panic_at(&self, txg: u64) {
            self.state.lock().panic_txg = Some(txg);
        }
        fn entered(&self) -> Vec<u64> {
            self.state.lock().entered.clone()
        }
        fn returned(&self) -> Vec<u64> {
            self.state.lock().returned.clone()
        }
        fn wait_entered(&self, txg: u64) {
            eventually(&format!("syncer entered txg {txg}"), || {
                self.state.lock().entered.contains(&txg)
            });
        }
    }

    impl TxgSyncer for FakeSyncer {
        fn wants_followup_txg(&self) -> bool {
            let s = self.state.lock();
            s.returned.last().copied().unwrap_or(0) < s.followups_until_txg
        }

        fn sync_txg(&self, txg: u64) -> Result<(), SyncError> {
            let mut s = self.state.lock();
            if let Some(&prev) = s.entered.last() {
                assert_eq!(txg, prev + 1, "syncer called out of order");
            }
            s.entered.push(txg);
            while s.gate_closed {
                self.cv.wait(&mut s);
            }
            if s.panic_txg == Some(txg) {
                drop(s);
                panic!("fake syncer told to panic at {txg}");
            }
            if s.fail_txg == Some(txg) {
                return Err(format!("injected failure at txg {txg}").into());
            }
            s.returned.push(txg);
            Ok(())
        }
    }

    /// Suspends I/O in its first sync of `suspend_txg` and finishes that txg once resumed.
    #[derive(Default)]
    struct SuspendingSyncer {
        handle: std::sync::OnceLock<SuspendHandle>,
        suspend_txg: u64,
        synced: Mutex<Vec<u64>>,
    }

    impl TxgSyncer for SuspendingSyncer {
        fn sync_txg(&self, txg: u64) -> Result<(), SyncError> {
            if txg == self.suspend_txg {
                let handle = self.handle.get().expect("handle set before the first sync");
                handle.suspend(format!("device gone in txg {txg}"));
                if !handle.wait_resumed() {
                    return Err("shut down while suspended".into());
                }
            }
            self.synced.lock().push(txg);
            Ok(())
        }
    }

    #[test]
    fn suspended_io_refuses_work_then_resumes_and_finishes_the_txg() {
        let syncer = Arc::new(SuspendingSyncer {
            suspend_txg: 1,
            ..SuspendingSyncer::default()
        });
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        let handle = engine.suspend_handle();
        syncer.handle.set(handle.clone()).expect("set once");
        let first = dirty(&engine, 10);
        let waiter = {
            let engine = engine.clone();
            thread::spawn(move || engine.wait_synced(first))
        };
        eventually("I/O suspended", || handle.io_suspended().is_some());
        // Waiters and new work are refused, not hung.
        assert!(
            matches!(waiter.join().unwrap(), Err(TxgError::Suspended(msg)) if msg.reason().contains("device gone"))
        );
        assert!(matches!(engine.try_hold(), Err(TxgError::Suspended(_))));
        assert!(engine.suspended().is_some());
        assert_eq!(engine.last_synced_txg(), 0);
        // Resumed: the suspended txg finishes, and the engine takes work again.
        handle.resume();
        assert_eq!(engine.wait_synced(first), Ok(()));
        assert!(engine.suspended().is_none());
        let second = {
            let hold = engine.try_hold().expect("holds are accepted again");
            hold.add_dirty(5);
            hold.txg()
        };
        assert_eq!(engine.wait_synced(second), Ok(()));
        assert_eq!(*syncer.synced.lock(), vec![1, 2]);
        assert_eq!(engine.stats().io_suspensions, 1);
        assert_eq!(engine.stats().sync_failures, 0);
        engine.shutdown().unwrap();
    }

    #[test]
    fn a_shutdown_ends_a_suspension_with_a_failed_txg() {
        let syncer = Arc::new(SuspendingSyncer {
            suspend_txg: 1,
            ..SuspendingSyncer::default()
        });
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        syncer
            .handle
            .set(engine.suspend_handle())
            .expect("set once");
        dirty(&engine, 10);
        engine.sync_now().expect_err("suspended");
        let result = {
            let engine = engine.clone();
            completes("shutdown while suspended", move || engine.shutdown())
        };
        assert!(
            matches!(result, Err(TxgError::Suspended(msg)) if msg.reason().contains("shut down while suspended"))
        );
        assert_eq!(engine.last_synced_txg(), 0);
    }

    /// Long timeout and a large max: only explicit requests sync, the throttle stays quiet.
    fn quiet_config() -> TxgConfig {
        TxgConfig {
            txg_timeout_ms: 3_600_000,
            dirty_bytes_max: 1_000_000,
            dirty_sync_percent: 20,
            delay_min_dirty_percent: 60,
            delay_scale_ns: 10_000,
            delay_max_ns: 1_000_000,
            history_len: 100,
            sync_target_ms: 0,
        }
    }

    fn dirty(engine: &TxgEngine, bytes: u64) -> u64 {
        let hold = engine.hold();
        hold.add_dirty(bytes);
        hold.txg()
    }

    #[test]
    fn txg_defaults_follow_zfs_and_ram() {
        let c = TxgConfig::default();
        assert_eq!(c.txg_timeout_ms, 5_000);
        assert_eq!(c.dirty_sync_percent, 20);
        assert_eq!(c.delay_min_dirty_percent, 60);
        assert_eq!(c.delay_scale_ns, 500_000);
        assert_eq!(c.delay_max_ns, 100_000_000);
        assert_eq!(c.history_len, 100);
        assert!(c.dirty_bytes_max > 0 && c.dirty_bytes_max <= 4 * GIB);
        c.validate().unwrap();

        let meminfo = "MemTotal:       24684092 kB\nMemFree:  1 kB\n";
        assert_eq!(parse_meminfo_total_bytes(meminfo), Some(24_684_092 * 1024));
        assert_eq!(parse_meminfo_total_bytes("MemFree: 3 kB\n"), None);
        assert_eq!(parse_meminfo_total_bytes("MemTotal: x kB\n"), None);
        assert_eq!(default_dirty_bytes_max(None), GIB);
        assert_eq!(default_dirty_bytes_max(Some(8 * GIB)), 8 * GIB / 100 * 10);
        assert_eq!(default_dirty_bytes_max(Some(1024 * GIB)), 4 * GIB);
    }

    #[test]
    fn the_dirty_limit_follows_the_measured_sync_rate_within_bounds() {
        let config = TxgConfig {
            dirty_bytes_max: GIB,
            sync_target_ms: 1000,
            ..TxgConfig::default()
        };
        // Nothing measured yet, or no target: the max.
        assert_eq!(dirty_limit_bytes(&config, None), GIB);
        let fixed = TxgConfig {
            sync_target_ms: 0,
            ..config.clone()
        };
        assert_eq!(dirty_limit_bytes(&fixed, Some(1 << 20)), GIB);
        // 200 MiB/s for one second.
        assert_eq!(dirty_limit_bytes(&config, Some(200 << 20)), 200 << 20);
        // Never below the floor, never above the max.
        assert_eq!(dirty_limit_bytes(&config, Some(1)), DIRTY_LIMIT_FLOOR_BYTES);
        assert_eq!(dirty_limit_bytes(&config, Some(u64::MAX)), GIB);
        // The delay curve is the same shape within the smaller limit.
        let limit = 200 << 20;
        assert_eq!(delay_ns_within(&config, limit, limit / 2), 0);
        assert_eq!(delay_ns_within(&config, limit, limit), config.delay_max_ns);
        assert_eq!(
            delay_ns_within(&config, GIB, GIB / 2),
            delay_ns(&config, GIB / 2)
        );
    }

    #[test]
    fn txg_delay_curve_shape() {
        let c = TxgConfig {
            dirty_bytes_max: 1_000_000,
            ..TxgConfig::default()
        };
        // Flat zero up to 60 %.
        assert_eq!(delay_ns(&c, 0), 0);
        assert_eq!(delay_ns(&c, 600_000), 0);
        // Starts small just above (no cliff): 61 % gives ~12.8 µs.
        assert!(delay_ns(&c, 600_001) < 10);
        assert_eq!(delay_ns(&c, 610_000), 12_820);
        // delay_scale at the midpoint (80 %).
        assert_eq!(delay_ns(&c, 800_000), 500_000);
        // The ZFS man page figures: ~10 ms at 98 %, ~20 ms at 99 %.
        assert_eq!(delay_ns(&c, 980_000), 9_500_000);
        assert_eq!(delay_ns(&c, 990_000), 19_500_000);
        // Capped near 100 % and beyond.
        assert_eq!(delay_ns(&c, 999_000), 100_000_000);
        assert_eq!(delay_ns(&c, 1_000_000), 100_000_000);
        assert_eq!(delay_ns(&c, u64::MAX), 100_000_000);
        // Monotonic over the whole range.
        let mut prev = 0;
        for dirty_bytes in (0..=1_100_000).step_by(997) {
            let d = delay_ns(&c, dirty_bytes);
            assert!(d >= prev, "delay fell at {dirty_bytes}: {d} < {prev}");
            assert!(d <= c.delay_max_ns);
            prev = d;
        }
        // Huge values do not overflow.
        let big = TxgConfig {
            dirty_bytes_max: u64::MAX,
            delay_scale_ns: u64::MAX,
            delay_max_ns: u64::MAX,
            ..c.clone()
        };
        assert_eq!(delay_ns(&big, u64::MAX - 1), u64::MAX);
    }

    #[test]
    fn txg_throttle_schedules_after_previous_wakeup() {
        let now = Instant::now();
        let d = Duration::from_millis(2);
        assert_eq!(next_wakeup(now, None, d), now + d);
        // A previous wakeup in the past gives no credit beyond now.
        let past = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
        assert_eq!(next_wakeup(now, Some(past), d), now + d);
        // Writers queue behind each other: the third of three goes 3 delays after now.
        let w1 = next_wakeup(now, None, d);
        let w2 = next_wakeup(now, Some(w1), d);
        let w3 = next_wakeup(now, Some(w2), d);
        assert_eq!(w3, now + 3 * d);
    }

    #[test]
    fn txg_sync_in_order_without_gaps() {
        let syncer = FakeSyncer::new();
        let engine = TxgEngine::start(quiet_config(), 41, syncer.clone());
        assert_eq!(engine.open_txg(), 42);
        assert_eq!(engine.last_synced_txg(), 41);
        for expected in 42..52 {
            let txg = dirty(&engine, 10);
            assert_eq!(txg, expected);
            assert_eq!(engine.sync_now(), Ok(expected));
            assert_eq!(engine.last_synced_txg(), expected);
        }
        // Concurrent writers and syncers: still consecutive (the fake asserts order too).
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let engine = engine.clone();
                thread::spawn(move || {
                    for _ in 0..25 {
                        dirty(&engine, 1);
                        engine.sync_now().unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        engine.shutdown().unwrap();
        let entered = syncer.entered();
        let last = engine.last_synced_txg();
        assert_eq!(entered, (42..=last).collect::<Vec<_>>());
        assert_eq!(syncer.returned(), entered);
        let history = engine.history();
        assert!(history.windows(2).all(|w| w[1].txg == w[0].txg + 1));
        assert_eq!(history.last().map(|t| t.txg), Some(last));
        assert_eq!(engine.dirty_bytes(), 0);
        assert_eq!(engine.stats().bytes_synced_total, 10 * 10 + 4 * 25);
    }

    #[test]
    fn txg_hold_blocks_its_quiesce_but_not_next_holds() {
        let syncer = FakeSyncer::new();
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        let h1 = engine.hold();
        assert_eq!(h1.txg(), 1);
        h1.add_dirty(100);
        let waiter = {
            let engine = engine.clone();
            thread::spawn(move || engine.wait_synced(1))
        };
        eventually("txg 1 quiescing", || {
            engine.phases().quiescing_txg == Some(1)
        });
        assert_eq!(engine.open_txg(), 2);
        // New holds join txg 2 at once, while txg 1 waits for h1.
        let h2 = {
            let engine = engine.clone();
            completes("hold during quiesce", move || engine.hold())
        };
        assert_eq!(h2.txg(), 2);
        h2.add_dirty(7);
        // A hold on a quiescing txg may still dirty it.
        h1.add_dirty(5);
        thread::sleep(Duration::from_millis(30));
        assert!(syncer.entered().is_empty(), "txg 1 synced while held");
        assert!(!waiter.is_finished());
        drop(h1);
        assert_eq!(waiter.join().unwrap(), Ok(()));
        assert_eq!(syncer.returned(), vec![1]);
        assert_eq!(engine.history()[0].dirty_bytes, 105);
        assert_eq!(engine.dirty_bytes(), 7);
        drop(h2);
        engine.shutdown().unwrap();
        assert_eq!(syncer.returned(), vec![1, 2]);
    }

    #[test]
    fn txg_sync_in_progress_does_not_block_holds() {
        let syncer = FakeSyncer::new();
        syncer.close_gate();
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        dirty(&engine, 100);
        let waiter = {
            let engine = engine.clone();
            thread::spawn(move || engine.sync_now())
        };
        syncer.wait_entered(1);
        assert_eq!(engine.phases().syncing_txg, Some(1));
        let holds_txgs = {
            let engine = engine.clone();
            completes("holds while syncing", move || {
                (0..10)
                    .map(|_| {
                        let h = engine.hold();
                        h.add_dirty(3);
                        h.txg()
                    })
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(holds_txgs, vec![2; 10]);
        assert_eq!(engine.dirty_bytes(), 130);
        syncer.open_gate();
        assert_eq!(waiter.join().unwrap(), Ok(1));
        assert_eq!(engine.dirty_bytes(), 30);
        engine.shutdown().unwrap();
        assert_eq!(engine.dirty_bytes(), 0);
    }

    #[test]
    fn txg_dirty_threshold_triggers_early_sync() {
        let syncer = FakeSyncer::new();
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        // 20 % of 1 000 000 = 200 000: at the threshold nothing happens ...
        dirty(&engine, 200_000);
        thread::sleep(Duration::from_millis(30));
        assert!(syncer.entered().is_empty());
        // ... one byte over starts a sync, with no request and a one-hour timeout.
        dirty(&engine, 1);
        eventually("threshold sync", || engine.last_synced_txg() == 1);
        let stats = engine.stats();
        assert_eq!(stats.syncs_by_dirty_threshold, 1);
        assert_eq!(stats.syncs_by_timeout + stats.syncs_by_request, 0);
        assert_eq!(engine.history()[0].trigger, SyncTrigger::DirtyThreshold);
        assert_eq!(engine.history()[0].dirty_bytes, 200_001);
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_timeout_triggers_sync() {
        let syncer = FakeSyncer::new();
        let config = TxgConfig {
            txg_timeout_ms: 50,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, syncer.clone());
        // Clean txgs are never synced on their own.
        thread::sleep(Duration::from_millis(80));
        assert!(syncer.entered().is_empty());
        dirty(&engine, 1);
        eventually("timeout sync", || engine.last_synced_txg() == 1);
        assert_eq!(engine.stats().syncs_by_timeout, 1);
        dirty(&engine, 1);
        eventually("second timeout sync", || engine.last_synced_txg() == 2);
        assert_eq!(engine.stats().syncs_by_timeout, 2);
        assert_eq!(engine.history()[1].trigger, SyncTrigger::Timeout);
        engine.shutdown().unwrap();
    }

    /// A syncer with deferred work gets clean txgs synced on the timeout until it has none.
    #[test]
    fn txg_followups_sync_clean_txgs_until_the_syncer_is_done() {
        let syncer = FakeSyncer::new();
        syncer.state.lock().followups_until_txg = 4;
        let config = TxgConfig {
            txg_timeout_ms: 20,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, syncer.clone());
        // Nothing synced yet, so nothing asked for follow-ups: a clean engine stays idle.
        thread::sleep(Duration::from_millis(60));
        assert!(syncer.entered().is_empty());
        dirty(&engine, 1);
        eventually("follow-up txgs", || engine.last_synced_txg() == 4);
        thread::sleep(Duration::from_millis(100));
        assert_eq!(
            engine.last_synced_txg(),
            4,
            "no follow-up once the syncer is done"
        );
        let history = engine.history();
        assert!(history.iter().all(|t| t.trigger == SyncTrigger::Timeout));
        assert!(history[1..].iter().all(|t| t.dirty_bytes == 0));
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_wait_synced_returns_after_syncer_returned() {
        let syncer = FakeSyncer::new();
        syncer.close_gate();
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        dirty(&engine, 10);
        let done = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (engine, syncer, done) = (engine.clone(), syncer.clone(), done.clone());
            thread::spawn(move || {
                let r = engine.wait_synced(1);
                // The syncer had returned for txg 1 before the wait ended.
                assert_eq!(syncer.returned(), vec![1]);
                done.store(true, Ordering::SeqCst);
                r
            })
        };
        syncer.wait_entered(1);
        thread::sleep(Duration::from_millis(30));
        assert!(
            !done.load(Ordering::SeqCst),
            "wait ended while syncer still running"
        );
        syncer.open_gate();
        assert_eq!(waiter.join().unwrap(), Ok(()));
        assert!(done.load(Ordering::SeqCst));
        // Waiting for an already synced txg returns at once.
        assert_eq!(engine.wait_synced(1), Ok(()));
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_wait_on_clean_open_txg_and_forced_sync_make_empty_txgs() {
        let syncer = FakeSyncer::new();
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        // Nothing dirty: sync_now returns the last synced txg without a new one.
        assert_eq!(engine.sync_now(), Ok(0));
        assert!(syncer.entered().is_empty());
        // Forced: a new (empty) txg every time.
        assert_eq!(engine.sync_now_forced(), Ok(1));
        assert_eq!(engine.sync_now_forced(), Ok(2));
        // Waiting on the clean open txg syncs it instead of hanging.
        let open = engine.open_txg();
        assert_eq!(open, 3);
        assert_eq!(engine.wait_synced(open), Ok(()));
        assert_eq!(syncer.returned(), vec![1, 2, 3]);
        assert_eq!(engine.stats().syncs_by_request, 3);
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_throttle_delays_only_above_min() {
        let syncer = FakeSyncer::new();
        let config = TxgConfig {
            dirty_sync_percent: 100,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, syncer.clone());
        let hold = engine.hold();
        hold.add_dirty(500_000); // 50 %: below the 60 % knee
        engine.throttle(1_000);
        assert_eq!(engine.stats().writer_delays_count, 0);
        hold.add_dirty(200_000); // 70 %
        engine.throttle(1_000);
        engine.throttle(1_000);
        let stats = engine.stats();
        assert_eq!(stats.writer_delays_count, 2);
        assert!(stats.writer_delay_ns_total > 0);
        assert_eq!(stats.writers_blocked_at_max_count, 0);
        drop(hold);
        assert_eq!(engine.sync_now(), Ok(1));
        assert_eq!(engine.history()[0].writer_delays_count, 2);
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_try_hold_now_only_where_the_throttle_would_not_wait() {
        let syncer = FakeSyncer::new();
        let config = TxgConfig {
            dirty_sync_percent: 100,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, syncer.clone());
        let hold = engine.hold();
        hold.add_dirty(500_000); // 50 %: below the 60 % knee
        let now = engine.try_hold_now(1_000).expect("no delay below the knee");
        assert_eq!(now.txg(), hold.txg());
        drop(now);
        // A write that would take dirty data past the knee would be delayed: no hold.
        assert!(engine.try_hold_now(200_000).is_none());
        hold.add_dirty(200_000); // 70 %
        assert!(engine.try_hold_now(1).is_none());
        // Nothing was counted as a delay: the caller takes the ordinary path for that.
        assert_eq!(engine.stats().writer_delays_count, 0);
        drop(hold);
        assert_eq!(engine.sync_now(), Ok(1));
        assert!(engine.try_hold_now(1).is_some());
        engine.shutdown().unwrap();
        assert!(engine.try_hold_now(1).is_none());
    }

    #[test]
    fn txg_throttle_blocks_at_max_until_sync() {
        let syncer = FakeSyncer::new();
        let config = TxgConfig {
            dirty_sync_percent: 100,
            ..quiet_config()
        };
        let max = config.dirty_bytes_max;
        let engine = TxgEngine::start(config, 0, syncer.clone());
        dirty(&engine, max);
        let released = Arc::new(AtomicU64::new(0));
        let writer = {
            let (engine, released) = (engine.clone(), released.clone());
            thread::spawn(move || {
                engine.throttle(1);
                released.store(engine.last_synced_txg(), Ordering::SeqCst);
                let h = engine.hold();
                h.add_dirty(1);
                h.txg()
            })
        };
        eventually("writer blocked at max", || {
            engine.stats().writers_blocked_at_max_count == 1
        });
        thread::sleep(Duration::from_millis(30));
        assert!(!writer.is_finished(), "writer passed the throttle at max");
        assert_eq!(engine.sync_now(), Ok(1));
        assert_eq!(writer.join().unwrap(), 2);
        // The writer was released only by the sync of txg 1.
        assert_eq!(released.load(Ordering::SeqCst), 1);
        assert_eq!(engine.dirty_bytes(), 1);
        assert_eq!(engine.history()[0].writers_blocked_count, 1);
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_a_slow_sync_lowers_the_dirty_limit_under_a_sync_target() {
        const MIB: u64 = 1 << 20;
        let syncer = FakeSyncer::new();
        let config = TxgConfig {
            dirty_bytes_max: GIB,
            dirty_sync_percent: 100,
            sync_target_ms: 100,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, syncer.clone());
        // A 32 MiB txg whose sync takes at least 200 ms: at most 160 MiB/s, so 100 ms of it is
        // at most 16 MiB and the limit falls to its floor, far below the 1 GiB max.
        syncer.close_gate();
        dirty(&engine, 32 * MIB);
        let sync = {
            let engine = engine.clone();
            thread::spawn(move || engine.sync_now())
        };
        syncer.wait_entered(1);
        thread::sleep(Duration::from_millis(200));
        syncer.open_gate();
        assert_eq!(sync.join().unwrap(), Ok(1));
        assert_eq!(engine.stats().writers_blocked_at_max_count, 0);

        dirty(&engine, DIRTY_LIMIT_FLOOR_BYTES);
        let writer = {
            let engine = engine.clone();
            thread::spawn(move || engine.throttle(1))
        };
        eventually("writer blocked at the measured limit", || {
            engine.stats().writers_blocked_at_max_count == 1
        });
        assert_eq!(engine.sync_now(), Ok(2));
        writer.join().unwrap();
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_sync_left_bytes_falls_with_the_rate_and_stops_at_zero() {
        assert_eq!(sync_left_bytes(1000, 100, Duration::ZERO), 1000);
        assert_eq!(sync_left_bytes(1000, 100, Duration::from_secs(4)), 600);
        assert_eq!(sync_left_bytes(1000, 100, Duration::from_secs(10)), 0);
        assert_eq!(sync_left_bytes(1000, 100, Duration::from_secs(60)), 0);
        assert_eq!(sync_left_bytes(1000, u64::MAX, Duration::from_secs(1)), 0);
    }

    #[test]
    fn txg_a_syncing_txg_counts_what_it_has_left_to_write_under_a_sync_target() {
        const MIB: u64 = 1 << 20;
        let syncer = FakeSyncer::new();
        let config = TxgConfig {
            dirty_bytes_max: 96 * MIB,
            dirty_sync_percent: 100,
            sync_target_ms: 100,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, syncer.clone());
        let sync_in_background = |engine: &Arc<TxgEngine>| {
            let engine = engine.clone();
            thread::spawn(move || engine.sync_now())
        };
        // A rate: 32 MiB synced in at least 500 ms, at most 64 MiB/s, so the limit in force
        // is its 64 MiB floor.
        syncer.close_gate();
        dirty(&engine, 32 * MIB);
        let sync = sync_in_background(&engine);
        syncer.wait_entered(1);
        thread::sleep(Duration::from_millis(500));
        syncer.open_gate();
        assert_eq!(sync.join().unwrap(), Ok(1));

        // Txg 2 is over the limit and stays syncing: a writer blocks on it at first, and goes
        // once the rate would have written the 24 MiB over (under 2 s), the sync still running.
        syncer.close_gate();
        dirty(&engine, 88 * MIB);
        let sync = sync_in_background(&engine);
        syncer.wait_entered(2);
        let writer = {
            let engine = engine.clone();
            thread::spawn(move || engine.throttle(1))
        };
        eventually("writer blocked at the limit in force", || {
            engine.stats().writers_blocked_at_max_count == 1
        });
        eventually("writer let through by the sync's progress", || {
            writer.is_finished()
        });
        writer.join().unwrap();
        assert_eq!(engine.last_synced_txg(), 1, "txg 2 is still syncing");

        // Memory still counts the syncing txg whole: 88 + 40 MiB pass the 96 MiB max, though
        // a waiter would wait for less than the limit in force.
        dirty(&engine, 40 * MIB);
        let writer = {
            let engine = engine.clone();
            thread::spawn(move || engine.throttle(1))
        };
        eventually("writer blocked at the memory max", || {
            engine.stats().writers_blocked_at_max_count == 2
        });
        thread::sleep(Duration::from_millis(30));
        assert!(!writer.is_finished(), "writer passed the memory max");
        syncer.open_gate();
        assert_eq!(sync.join().unwrap(), Ok(2));
        writer.join().unwrap();
        assert_eq!(engine.dirty_bytes(), 40 * MIB);
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_failing_sync_suspends_engine() {
        let syncer = FakeSyncer::new();
        syncer.fail_at(2);
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        dirty(&engine, 10);
        assert_eq!(engine.sync_now(), Ok(1));
        syncer.close_gate();
        dirty(&engine, 20);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let engine = engine.clone();
                thread::spawn(move || engine.wait_synced(2))
            })
            .collect();
        syncer.wait_entered(2);
        syncer.open_gate();
        for w in waiters {
            match w.join().unwrap() {
                Err(TxgError::Suspended(msg)) => assert!(msg.reason().contains("injected failure")),
                other => panic!("expected Suspended, got {other:?}"),
            }
        }
        assert!(engine.suspended().is_some());
        assert_eq!(engine.last_synced_txg(), 1);
        // Future waits, syncs and checked holds fail too; nothing more reaches the syncer.
        let h = engine.hold();
        h.add_dirty(5);
        let open = h.txg();
        drop(h);
        assert!(matches!(
            engine.wait_synced(open),
            Err(TxgError::Suspended(_))
        ));
        assert!(matches!(engine.sync_now(), Err(TxgError::Suspended(_))));
        assert!(matches!(
            engine.sync_now_forced(),
            Err(TxgError::Suspended(_))
        ));
        assert!(matches!(engine.try_hold(), Err(TxgError::Suspended(_))));
        // The throttle does not hang writers on a suspended pool, even past the max.
        dirty(&engine, engine.config().dirty_bytes_max);
        {
            let engine = engine.clone();
            completes("throttle while suspended", move || engine.throttle(1));
        }
        assert_eq!(engine.wait_synced(1), Ok(()));
        assert_eq!(syncer.entered(), vec![1, 2]);
        assert_eq!(engine.stats().sync_failures, 1);
        assert!(matches!(engine.shutdown(), Err(TxgError::Suspended(_))));
        assert!(matches!(engine.shutdown(), Err(TxgError::Suspended(_))));
    }

    #[test]
    fn txg_panicking_syncer_suspends_engine() {
        let syncer = FakeSyncer::new();
        syncer.panic_at(1);
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        dirty(&engine, 1);
        match engine.sync_now() {
            Err(TxgError::Suspended(msg)) => assert!(msg.reason().contains("panicked")),
            other => panic!("expected Suspended, got {other:?}"),
        }
        assert!(engine.shutdown().is_err());
    }

    #[test]
    fn txg_shutdown_syncs_dirty_data() {
        let syncer = FakeSyncer::new();
        let engine = TxgEngine::start(quiet_config(), 7, syncer.clone());
        dirty(&engine, 123);
        // A hold still alive at shutdown is waited for and its late dirt is synced too.
        let late = engine.hold();
        let dropper = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            late.add_dirty(1);
            drop(late);
        });
        engine.shutdown().unwrap();
        dropper.join().unwrap();
        assert_eq!(syncer.returned(), vec![8]);
        assert_eq!(engine.last_synced_txg(), 8);
        assert_eq!(engine.dirty_bytes(), 0);
        assert_eq!(engine.stats().syncs_at_shutdown, 1);
        assert_eq!(engine.history()[0].dirty_bytes, 124);
        // Idempotent; afterwards holds are refused and unsynced txgs report ShutDown.
        engine.shutdown().unwrap();
        assert_eq!(engine.try_hold().err(), Some(TxgError::ShutDown));
        assert_eq!(
            engine.wait_synced(engine.open_txg()),
            Err(TxgError::ShutDown)
        );
        assert_eq!(engine.sync_now_forced(), Err(TxgError::ShutDown));
        assert_eq!(engine.sync_now(), Ok(8));
        assert_eq!(engine.wait_synced(8), Ok(()));
        engine.throttle(1);
    }

    #[test]
    fn txg_shutdown_of_clean_engine_syncs_nothing() {
        let syncer = FakeSyncer::new();
        let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
        engine.shutdown().unwrap();
        assert!(syncer.entered().is_empty());
        assert_eq!(engine.last_synced_txg(), 0);
    }

    #[test]
    #[should_panic(expected = "hold after shutdown")]
    fn txg_hold_after_shutdown_panics() {
        let engine = TxgEngine::start(quiet_config(), 0, FakeSyncer::new());
        engine.shutdown().unwrap();
        let _ = engine.hold();
    }

    #[test]
    fn txg_history_is_a_bounded_ring() {
        let config = TxgConfig {
            history_len: 3,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, FakeSyncer::new());
        for _ in 0..5 {
            dirty(&engine, 2);
            engine.sync_now().unwrap();
        }
        let history = engine.history();
        assert_eq!(
            history.iter().map(|t| t.txg).collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        for t in &history {
            assert_eq!(t.dirty_bytes, 2);
            assert_eq!(t.holds_count, 1);
            assert_eq!(t.trigger, SyncTrigger::Requested);
            assert!(t.opened_at_us <= t.quiesce_started_at_us);
            assert!(t.quiesce_started_at_us <= t.sync_started_at_us);
        }
        assert_eq!(engine.stats().txgs_synced, 5);
        engine.shutdown().unwrap();
    }

    #[test]
    fn txg_concurrent_writers_account_every_byte() {
        let syncer = FakeSyncer::new();
        let config = TxgConfig {
            txg_timeout_ms: 2,
            dirty_bytes_max: 20_000,
            delay_scale_ns: 20_000,
            delay_max_ns: 200_000,
            ..quiet_config()
        };
        let engine = TxgEngine::start(config, 0, syncer.clone());
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let engine = engine.clone();
                thread::spawn(move || {
                    for n in 0..200 {
                        engine.throttle(100);
                        let h = engine.hold();
                        h.add_dirty(100);
                        let txg = h.txg();
                        drop(h);
                        if i == 0 && n % 50 == 0 {
                            engine.wait_synced(txg).unwrap();
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        engine.shutdown().unwrap();
        let stats = engine.stats();
        assert_eq!(stats.bytes_synced_total, 4 * 200 * 100);
        assert_eq!(engine.dirty_bytes(), 0);
        let entered = syncer.entered();
        assert_eq!(entered, (1..=engine.last_synced_txg()).collect::<Vec<_>>());
        assert_eq!(stats.txgs_synced, entered.len() as u64);
    }
}
