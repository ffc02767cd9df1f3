//! The sync thread ("cairn-txg-sync") and the interface it drives (`TxgSyncer`): when the open
//! txg must sync (`State::sync_trigger`, "When a txg syncs" in the `txg` module comment), the
//! quiesce (open the next txg, wait for the holds to drain), the call into the syncer, and the
//! bookkeeping of a finished or failed sync (history, stats, sync rate, suspension).
//!
//! Invariants: one thread quiesces and syncs, one txg at a time, in increasing order with no
//! gaps; the syncer runs with the engine lock released; a panic of the syncer or of the thread
//! itself suspends the engine (`catch_unwind`, `SyncThreadExitGuard`) so no waiter hangs. This
//! file sits above `state`, `throttle` (sync threshold, rate), `stats`, `error` and `config`;
//! only the engine, which spawns the thread, is above it.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use super::config::TxgConfig;
use super::error::{SuspendReason, Suspension, SyncError};
use super::state::{InFlight, Phase, Shared, State, TxgSlot};
use super::stats::{SyncTrigger, TxgTiming, duration_us};

/// Name of the sync thread (visible in `ps -L`, `top -H`, debuggers).
pub const SYNC_THREAD_NAME: &str = "cairn-txg-sync";

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

    /// Asked with `wants_followup_txg`: whether work is pending that each txg does a bounded
    /// share of (a destroy's background frees). If so, the next txg syncs after
    /// `BACKGROUND_TXG_INTERVAL` instead of the timeout, dirty or not, so that work goes on at
    /// speed while no single txg grows long.
    fn has_background_work(&self) -> bool {
        false
    }

    /// Asked with `wants_followup_txg`: how much of the last sync, in microseconds, went to
    /// that background work. Its time is a bounded cost per txg, not a slower device: the
    /// sync rate that sets the dirty limit leaves it out, or background work would throttle
    /// the writers.
    fn background_sync_us(&self) -> u64 {
        0
    }

    /// Asked with `wants_followup_txg`: how much of the last sync, in microseconds, went to
    /// the work of dataset commands (a destroy of many snapshots): like background work, a
    /// cost of the txg and not of its dirty bytes, left out of the measured sync rate. It is
    /// the figure a caller reserving sync time (`TxgEngine::reserve_sync_time`) estimates.
    fn command_sync_us(&self) -> u64 {
        0
    }
}

/// How long an open txg waits before it syncs for background work alone: long enough that
/// writers share the txg, short enough that background work goes on at speed.
pub const BACKGROUND_TXG_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

impl State {
    /// Whether the open txg must be quiesced now, and why.
    fn sync_trigger(&self, config: &TxgConfig, now: Instant) -> Option<SyncTrigger> {
        if self.in_flight.is_some() || self.suspended.is_some() {
            return None;
        }
        let open = &self.open;
        if open.txg <= self.sync_requested_txg {
            return Some(SyncTrigger::Requested);
        }
        if self.shutdown_requested && (open.has_changes() || open.holds_live > 0) {
            return Some(SyncTrigger::Shutdown);
        }
        let timed_out = now >= open.opened_at + config.txg_timeout();
        if self.background_wanted
            && !self.shutdown_requested
            && now >= open.opened_at + BACKGROUND_TXG_INTERVAL
        {
            return Some(SyncTrigger::Background);
        }
        if !open.has_changes() {
            let followup = self.followup_wanted && !self.shutdown_requested && timed_out;
            return followup.then_some(SyncTrigger::Timeout);
        }
        if open.dirty_bytes > self.dirty_sync_bytes(config) {
            return Some(SyncTrigger::DirtyThreshold);
        }
        timed_out.then_some(SyncTrigger::Timeout)
    }
}

impl Shared {
    pub(super) fn sync_thread_main(&self, syncer: &dyn TxgSyncer) {
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
            let background = result.is_ok()
                && catch_unwind(AssertUnwindSafe(|| syncer.has_background_work())).unwrap_or(false);
            let split = if result.is_ok() {
                catch_unwind(AssertUnwindSafe(|| SyncSplit {
                    background_us: syncer.background_sync_us(),
                    command_us: syncer.command_sync_us(),
                }))
                .unwrap_or_default()
            } else {
                SyncSplit::default()
            };
            self.finish_sync(txg, result, followup, background, split);
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
            if st.suspended.is_none() && st.background_wanted {
                let deadline = st.open.opened_at + BACKGROUND_TXG_INTERVAL;
                self.sync_cv.wait_until(&mut st, deadline);
            } else if st.suspended.is_none() && (st.open.has_changes() || st.followup_wanted) {
                let deadline = st.open.opened_at + config.txg_timeout();
                self.sync_cv.wait_until(&mut st, deadline);
            } else {
                self.sync_cv.wait(&mut st);
            }
        };

        let now = Instant::now();
        let next_txg = st.open.txg.checked_add(1).expect("txg number overflow");
        let mut next = TxgSlot::new(next_txg, now);
        next.reserved_sync_us = std::mem::take(&mut st.next_reserved_sync_us);
        let slot = std::mem::replace(&mut st.open, next);
        let txg = slot.txg;
        st.in_flight = Some(InFlight {
            slot,
            phase: Phase::Quiescing,
            trigger,
            quiesce_started_at: now,
            sync_started_at: None,
        });
        st.check_invariants(config);
        // A new txg is open: a caller waiting to hold it (`TxgEngine::hold_reserving`), and
        // writers held back by the closed txg's reservation, look again.
        self.progress_cv.notify_all();

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
    fn finish_sync(
        &self,
        txg: u64,
        result: Result<(), SyncError>,
        followup_wanted: bool,
        background_wanted: bool,
        split: SyncSplit,
    ) {
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
                st.background_wanted = background_wanted;
                let flight = st.in_flight.take().expect("checked above");
                assert_eq!(txg, st.last_synced_txg + 1, "txg skipped or reused");
                st.last_synced_txg = txg;
                st.dirty_bytes_total = st
                    .dirty_bytes_total
                    .checked_sub(flight.slot.dirty_bytes)
                    .expect("dirty total underflow");
                let timing = self.timing_of(&flight, Instant::now(), split);
                // Background work's and commands' shares left out (at most three quarters:
                // estimates).
                let written_us = timing
                    .sync_us
                    .saturating_sub(split.background_us)
                    .saturating_sub(split.command_us)
                    .max(timing.sync_us / 4);
                st.record_sync_rate(flight.slot.dirty_bytes, written_us);
                let stats = &mut st.stats;
                stats.txgs_synced += 1;
                stats.bytes_synced_total += flight.slot.dirty_bytes;
                match flight.trigger {
                    SyncTrigger::Requested => stats.syncs_by_request += 1,
                    SyncTrigger::Shutdown => stats.syncs_at_shutdown += 1,
                    SyncTrigger::DirtyThreshold => stats.syncs_by_dirty_threshold += 1,
                    SyncTrigger::Timeout => stats.syncs_by_timeout += 1,
                    SyncTrigger::Background => stats.syncs_for_background += 1,
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
                self.note_durability_failure();
                st.suspended = Some(Suspension::new(format!("sync of txg {txg} failed"), cause));
            }
        }
        st.check_invariants(config);
        drop(st);
        self.progress_cv.notify_all();
    }

    fn timing_of(&self, flight: &InFlight, synced_at: Instant, split: SyncSplit) -> TxgTiming {
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
            reserved_sync_us: slot.reserved_sync_us,
            background_us: split.background_us,
            command_us: split.command_us,
        }
    }
}

/// What the syncer said its last sync spent besides writing dirty data.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SyncSplit {
    background_us: u64,
    command_us: u64,
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
pub(super) struct SyncThreadExitGuard {
    pub(super) shared: Arc<Shared>,
}

impl Drop for SyncThreadExitGuard {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        if std::thread::panicking() && st.suspended.is_none() {
            self.shared.note_durability_failure();
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
