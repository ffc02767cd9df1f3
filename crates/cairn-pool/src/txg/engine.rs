//! `TxgEngine`, the public face of the txg engine: it starts the sync thread, hands out holds
//! and `SuspendHandle`s, runs the write throttle for writers, serves waits and sync requests,
//! reports phases, history and stats, and shuts down.
//!
//! Invariants: no entry point sleeps holding the engine lock (condition-variable waits release
//! it; the throttle drops it before its delay); `hold` panics after shutdown while `try_hold`
//! refuses; the callers' side of the rules ("Who may do what" in the `txg` module comment) is
//! theirs to keep. This file is the top of the module: it uses every sibling, and none uses it.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::config::TxgConfig;
use super::error::{Suspension, TxgError};
use super::hold::TxgHold;
use super::state::{Phase, Shared, State, TxgSlot};
use super::stats::{TxgPhases, TxgStats, TxgTiming, duration_ns, duration_us};
use super::suspend::SuspendHandle;
use super::sync::{SYNC_THREAD_NAME, SyncThreadExitGuard, TxgSyncer};
use super::throttle::{THROTTLE_RECHECK, next_wakeup};

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
            // Work left by an earlier run (a pool imported mid-destroy) goes on at once.
            background_wanted: syncer.has_background_work(),
            suspended: None,
            io_suspended: None,
            shutdown_requested: false,
            sync_thread_stopped: false,
            throttle_last_wakeup: None,
            sync_bytes_per_sec: None,
            next_reserved_sync_us: 0,
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
            // Random, so an engine started later for the same pool (an export and import in
            // one process, after a failure the old engine counted) never repeats a value.
            durability_epoch: AtomicU64::new(crate::new_guid()),
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
        self.shared.new_hold(&mut st, false)
    }

    /// Like `hold`, but fails with `ShutDown` after shutdown and `Suspended` while suspended.
    pub fn try_hold(&self) -> Result<TxgHold, TxgError> {
        self.try_hold_as(false)
    }

    /// A hold that changes nothing: it keeps the open txg from quiescing (a reader that needs
    /// the last synced txg to stay the last one meanwhile) but does not make the txg one with
    /// changes, so on an idle pool it causes no sync. A hold that changes anything, even
    /// without dirty bytes, must be a `try_hold`: a pinned txg with nothing else in it is never
    /// synced on its own.
    pub fn try_pin(&self) -> Result<TxgHold, TxgError> {
        self.try_hold_as(true)
    }

    fn try_hold_as(&self, pin: bool) -> Result<TxgHold, TxgError> {
        let mut st = self.shared.state.lock();
        if st.shutdown_requested {
            return Err(TxgError::ShutDown);
        }
        if let Some(msg) = st.refusal() {
            return Err(TxgError::Suspended(msg.clone()));
        }
        Ok(self.shared.new_hold(&mut st, pin))
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
        Some(self.shared.new_hold(&mut st, false))
    }

    /// Tells the engine that syncing `txg` will take about `time` besides writing its dirty
    /// data (a dataset command queued for it: a destroy of many snapshots). Under a sync
    /// target with a measured rate, the writers of `txg` are then held to what that rate
    /// writes in the target less `time` (`reserved_allowance_bytes`), so data and command
    /// together stay near the target; reservations on one txg add up. `txg` is the open txg
    /// or the one after it (which takes the reservation when it opens); an older txg is past
    /// helping and is ignored. Returns whether `txg`'s dirty bytes are still within its
    /// lowered allowance (a txg that already carries more will run past the target by the
    /// excess; always true for a txg not open yet, or without a target or rate).
    pub fn reserve_sync_time(&self, txg: u64, time: Duration) -> bool {
        let config = &self.shared.config;
        let mut st = self.shared.state.lock();
        let us = duration_us(time);
        if txg == st.open.txg {
            st.open.reserved_sync_us = st.open.reserved_sync_us.saturating_add(us);
            let fits = st
                .open_reserved_allowance(config)
                .is_none_or(|allowance| st.open.dirty_bytes <= allowance);
            drop(st);
            // The allowance only fell: writers see it at their next throttle call.
            return fits;
        }
        if txg == st.open.txg + 1 {
            st.next_reserved_sync_us = st.next_reserved_sync_us.saturating_add(us);
        }
        true
    }

    /// A hold for a change whose sync will take about `time` besides writing dirty data (see
    /// `reserve_sync_time`): on the open txg, reserving `time` there, if its dirty bytes fit
    /// the allowance that leaves; otherwise `time` is reserved on the next txg, the open one
    /// is asked to sync, and the hold is taken on the next one once it opens (its writers held
    /// to the lowered allowance from its first byte). Should that txg have quiesced already
    /// when this thread wakes, the hold goes to the open txg with the reservation moved there.
    /// Errors as `try_hold`. Like `wait_synced`, must not be called while holding a hold.
    pub fn hold_reserving(&self, time: Duration) -> Result<TxgHold, TxgError> {
        let shared = &self.shared;
        let config = &shared.config;
        let us = duration_us(time);
        let mut st = shared.state.lock();
        let refused = |st: &State| -> Option<TxgError> {
            if st.shutdown_requested {
                Some(TxgError::ShutDown)
            } else {
                st.refusal().map(|msg| TxgError::Suspended(msg.clone()))
            }
        };
        if let Some(err) = refused(&st) {
            return Err(err);
        }
        let reserved_us = st.open.reserved_sync_us.saturating_add(us);
        let fits = st
            .allowance_with(config, reserved_us)
            .is_none_or(|allowance| st.open.dirty_bytes <= allowance);
        if fits {
            st.open.reserved_sync_us = reserved_us;
            return Ok(shared.new_hold(&mut st, false));
        }
        let full_txg = st.open.txg;
        st.next_reserved_sync_us = st.next_reserved_sync_us.saturating_add(us);
        if st.sync_requested_txg < full_txg {
            st.sync_requested_txg = full_txg;
            shared.sync_cv.notify_all();
        }
        while st.open.txg == full_txg {
            if let Some(err) = refused(&st) {
                return Err(err);
            }
            if st.sync_thread_stopped {
                return Err(TxgError::ShutDown);
            }
            shared.progress_cv.wait(&mut st);
        }
        if st.open.txg != full_txg + 1 {
            // The reserved txg came and went before this thread woke: move it here.
            st.open.reserved_sync_us = st.open.reserved_sync_us.saturating_add(us);
        }
        Ok(shared.new_hold(&mut st, false))
    }

    /// What writers may dirty before they block on the latency level: the dirty limit in
    /// force (`dirty_limit_bytes`), lowered to the open txg's reserved allowance if sync time
    /// is reserved on it.
    pub fn dirty_allowance_bytes(&self) -> u64 {
        self.shared.state.lock().latency_limit(&self.shared.config)
    }

    /// The measured sync rate the throttle follows under a sync target (bytes per second of
    /// sync time; `None` until a large enough txg has synced).
    pub fn sync_bytes_per_sec(&self) -> Option<u64> {
        self.shared.state.lock().sync_bytes_per_sec
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

    /// A token that changes whenever a change not yet durable may have been lost: a txg sync
    /// failed, I/O was suspended, or an intent log failed to write (its caller says so with
    /// `note_durability_failure`). It starts at a random value per engine and advances by one
    /// per such failure; ordinary work (txg syncs, commits, a bulk commit served by a txg sync)
    /// never moves it. An NFS server mixes it into its write verifier, so clients resend what
    /// they wrote UNSTABLE whenever it changed.
    pub fn durability_epoch(&self) -> u64 {
        self.shared.durability_epoch.load(Ordering::SeqCst)
    }

    /// Counts a failure outside the engine that may have lost changes not yet durable (an
    /// intent-log write that failed: the log falls back to a txg sync, which may fail too).
    pub fn note_durability_failure(&self) {
        self.shared.note_durability_failure();
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
    /// `last_synced_txg` at once without a new txg. Dirty means dirty bytes or any hold taken
    /// (`TxgSlot::has_changes`: a change of attributes alone counts no bytes).
    pub fn sync_now(&self) -> Result<u64, TxgError> {
        let st = self.shared.state.lock();
        if let Some(msg) = st.refusal() {
            return Err(TxgError::Suspended(msg.clone()));
        }
        let target = if st.open.has_changes() {
            st.open.txg
        } else {
            match &st.in_flight {
                Some(flight) if flight.slot.has_changes() => flight.slot.txg,
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

    /// Refuses new holds, syncs the open txg if it has changes or live holds (waiting for
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
    /// Asks the sync thread to sync what is dirty and stop; does not wait (see the `txg`
    /// module comment).
    fn drop(&mut self) {
        self.shared.state.lock().shutdown_requested = true;
        self.shared.sync_cv.notify_all();
        self.shared.progress_cv.notify_all();
    }
}
