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
//! 2. `Shutdown`: shutdown was asked and N has changes or live holds.
//! 3. `DirtyThreshold`: N's dirty bytes exceed `dirty_sync_percent` (20 %) of `dirty_bytes_max`.
//! 4. `Timeout`: N has changes and was opened `txg_timeout_ms` (5 000 ms) ago or more; or
//!    N is clean but the syncer said, after the last sync, that it has work only later txgs
//!    complete (`TxgSyncer::wants_followup_txg`: frees deferred until more txgs have synced),
//!    so an idle pool still finishes that work, one empty txg per timeout. Otherwise an idle,
//!    clean txg is never synced on its own. "Has changes" means dirty bytes or any hold taken
//!    in N that is not a pin (`TxgSlot::has_changes`): some changes count no bytes (a chmod
//!    rewrites a dnode's bonus), and a txg holding only those must still reach disk on its own.
//!    A pin (`try_pin`) holds N open for a reader of the last synced txg and changes nothing.
//! 5. `Background`: the syncer said it has background work that each txg does a bounded share
//!    of (`TxgSyncer::has_background_work`: a destroy's frees), and N was opened
//!    `BACKGROUND_TXG_INTERVAL` (100 ms) ago: txgs follow each other until the work is done,
//!    each short, so the work neither stalls one txg nor waits for timeouts.
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
//! - Each of those events (a failed sync, a suspension of I/O), and each intent-log write
//!   failure its log reports (`TxgEngine::note_durability_failure`), advances
//!   `TxgEngine::durability_epoch`: a count of the moments changes not yet durable may have
//!   been lost, which front ends whose clients keep such changes (NFS's write verifier) watch.
//!   Nothing else moves it.
//! - `shutdown()` refuses new holds, lets the sync thread quiesce and sync the open txg if it has
//!   changes or live holds (waiting for those holds), then stops the thread and joins it. It is
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
//! `dirty_bytes_max`. That floor (64 MiB) leaves room for the largest writes, so it is where
//! writers block; the delay curve ends lower, at what the rate writes in the target but not
//! under `DELAY_TARGET_FLOOR_BYTES` (32 MiB), so a pool slower than 64 MiB per target still
//! keeps its txgs near the target (`delay_target_bytes`). Whoever waits for a txg sync (a FLUSH served by one, a writer blocked at
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
//! ### Reserved sync time
//!
//! A txg's sync also does work that is not its dirty data: a dataset command queued for it (a
//! destroy of 10,000 snapshots takes a few hundred milliseconds of its txg). The layer above
//! estimates that time and reserves it on the txg (`TxgEngine::reserve_sync_time`, or
//! `hold_reserving`, which takes the hold the command queues under); under a sync target with
//! a measured rate, the open txg's writers are then held to what the rate writes in the target
//! less the reserved time (`reserved_allowance_bytes`, at least
//! `RESERVED_ALLOWANCE_FLOOR_BYTES`): the latency level blocks there and its delay curve ends
//! there, so data and command together stay near the target. Bytes already dirty cannot be
//! taken back: `hold_reserving` finds the open txg already past the lowered allowance, it
//! reserves on the next txg instead (which takes the reservation when it opens, before its
//! first byte), asks for the open one's sync, and holds the next. The command stays whole in
//! one txg; only which txg, and how much data rides with it, change. The engine knows nothing
//! of what the time is for. The syncer reports what its last sync spent on such work
//! (`TxgSyncer::command_sync_us`) and on background work; both are left out of the measured
//! sync rate and shown per txg (`TxgTiming`).
//!
//! ## Known gaps
//!
//! - Time is the real clock (`Instant`), not an injected one; tests use short timeouts and never
//!   assert durations.
//! - One mutex protects the state; fine for a user-space pool, a per-CPU hold count would scale
//!   further.
//! - `delay_scale_ns` is a fixed number; only the dirty limit follows the measured sync speed
//!   (`sync_target_ms`), and only when asked (see design.md "Where we mean to beat ZFS").
//!
//! ## Where the code lives
//!
//! - `config.rs`: `TxgConfig`, its defaults and validation.
//! - `stats.rs`: `SyncTrigger`, `TxgTiming`, `TxgStats`, `TxgPhases`.
//! - `error.rs`: `SyncError`, `Suspension`, `SuspendReason`, `TxgError`.
//! - `state.rs`: the state machine's data (`State`, its txg slots) and `Shared` (lock and
//!   condition variables), with `State::check_invariants`.
//! - `throttle.rs`: the delay curve, the dirty limit in force, the sync-rate estimate and the
//!   throttle levels.
//! - `hold.rs`: `TxgHold`. `suspend.rs`: `SuspendHandle` (I/O suspension).
//! - `sync.rs`: `TxgSyncer`, the sync thread (trigger, quiesce, sync, finish). What a pool
//!   writes in a txg (the syncer it is given) is `cairn-engine/src/txg_sync.rs`.
//! - `engine.rs`: `TxgEngine`, the entry points. `tests.rs`: the unit tests.
//!
//! Files depend one way only, bottom to top: `config`, `stats` and `error` (no siblings) <
//! `state` < `throttle` < `hold` and `suspend` < `sync` < `engine`, and this file only declares
//! them and re-exports the public API.

mod config;
mod engine;
mod error;
mod hold;
mod state;
mod stats;
mod suspend;
mod sync;
mod throttle;

#[cfg(test)]
mod byteless_tests;
#[cfg(test)]
mod reserve_tests;
#[cfg(test)]
mod sync_target_tests;
#[cfg(test)]
mod tests;

pub use config::{TxgConfig, TxgConfigError, default_dirty_bytes_max, parse_meminfo_total_bytes};
pub use engine::TxgEngine;
pub use error::{SuspendReason, Suspension, SyncError, TxgError};
pub use hold::TxgHold;
pub use stats::{SyncTrigger, TxgPhases, TxgStats, TxgTiming};
pub use suspend::SuspendHandle;
pub use sync::{BACKGROUND_TXG_INTERVAL, SYNC_THREAD_NAME, TxgSyncer};
pub use throttle::{
    DELAY_TARGET_FLOOR_BYTES, DIRTY_LIMIT_FLOOR_BYTES, RESERVED_ALLOWANCE_FLOOR_BYTES, delay_ns,
    delay_target_bytes, dirty_limit_bytes, reserved_allowance_bytes, sync_left_bytes,
};
