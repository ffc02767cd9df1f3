//! The state machine of the txg engine: the open txg's and the in-flight txg's counters
//! (`TxgSlot`, `InFlight`, `Phase`), everything else the engine knows (`State`), and `Shared`,
//! the one mutex and two condition variables the engine, its holds, its `SuspendHandle` and its
//! sync thread all share.
//!
//! Invariants: those listed in the `txg` module comment, checked by `State::check_invariants`
//! after every transition; every field is read and written only under `Shared::state`. The
//! transitions themselves live with who makes them: holds in `hold`, quiesce and sync in `sync`,
//! pacing in `throttle`. This file depends only on `config`, `stats` and `error` below it.

use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};

use super::config::TxgConfig;
use super::error::{Suspension, TxgError};
use super::stats::{SyncTrigger, TxgStats, TxgTiming, duration_us};

/// The per-txg counters of a txg that is open or in flight.
#[derive(Debug)]
pub(super) struct TxgSlot {
    pub(super) txg: u64,
    /// Live holds; the txg cannot finish quiescing until this is 0.
    pub(super) holds_live: u64,
    pub(super) holds_taken: u64,
    /// Of `holds_taken`, those that change nothing (`TxgEngine::try_pin`).
    pub(super) pins_taken: u64,
    pub(super) dirty_bytes: u64,
    pub(super) opened_at: Instant,
    pub(super) writer_delays_count: u64,
    pub(super) writer_delay_ns_total: u64,
    pub(super) writers_blocked_count: u64,
    /// Sync time reserved for work besides the dirty data (`TxgEngine::reserve_sync_time`),
    /// microseconds: the throttle lets writers dirty that much less.
    pub(super) reserved_sync_us: u64,
}

impl TxgSlot {
    pub(super) fn new(txg: u64, opened_at: Instant) -> TxgSlot {
        TxgSlot {
            txg,
            holds_live: 0,
            holds_taken: 0,
            pins_taken: 0,
            dirty_bytes: 0,
            opened_at,
            writer_delays_count: 0,
            writer_delay_ns_total: 0,
            writers_blocked_count: 0,
            reserved_sync_us: 0,
        }
    }

    /// Whether the txg may hold changes and must be synced: it has dirty bytes, or a writer
    /// joined it at all (a hold that is not a pin). A change such as a chmod dirties a dnode's
    /// bonus and counts no bytes; a txg holding only such changes must still sync (at its
    /// timeout, on `sync_now`, at shutdown), never wait for a later write to carry it.
    pub(super) fn has_changes(&self) -> bool {
        self.dirty_bytes > 0 || self.holds_taken > self.pins_taken
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Quiescing,
    Syncing,
}

#[derive(Debug)]
pub(super) struct InFlight {
    pub(super) slot: TxgSlot,
    pub(super) phase: Phase,
    pub(super) trigger: SyncTrigger,
    pub(super) quiesce_started_at: Instant,
    pub(super) sync_started_at: Option<Instant>,
}

#[derive(Debug)]
pub(super) struct State {
    pub(super) open: TxgSlot,
    /// The txg being quiesced or synced: always `open.txg - 1`.
    pub(super) in_flight: Option<InFlight>,
    pub(super) last_synced_txg: u64,
    pub(super) dirty_bytes_total: u64,
    /// Highest txg somebody asked to sync now.
    pub(super) sync_requested_txg: u64,
    /// The syncer wants clean txgs synced on the timeout (`TxgSyncer::wants_followup_txg`).
    pub(super) followup_wanted: bool,
    /// The syncer has background work: the next txg syncs after `BACKGROUND_TXG_INTERVAL`
    /// (`TxgSyncer::has_background_work`).
    pub(super) background_wanted: bool,
    pub(super) suspended: Option<Suspension>,
    /// I/O suspended by the syncer until `SuspendHandle::resume`: the reason.
    pub(super) io_suspended: Option<Suspension>,
    pub(super) shutdown_requested: bool,
    pub(super) sync_thread_stopped: bool,
    pub(super) throttle_last_wakeup: Option<Instant>,
    pub(super) history: VecDeque<TxgTiming>,
    pub(super) stats: TxgStats,
    /// Dirty bytes per second the syncs of large txgs achieved (moving average).
    pub(super) sync_bytes_per_sec: Option<u64>,
    /// Sync time reserved for the txg after the open one, which it takes when it opens.
    pub(super) next_reserved_sync_us: u64,
}

impl State {
    pub(super) fn check_invariants(&self, config: &TxgConfig) {
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
    pub(super) fn slot_for_hold_mut(&mut self, txg: u64) -> (&mut TxgSlot, bool) {
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

    /// Why new work is refused: the engine failed, or its I/O is suspended.
    pub(super) fn refusal(&self) -> Option<&Suspension> {
        self.suspended.as_ref().or(self.io_suspended.as_ref())
    }
}

pub(super) struct Shared {
    pub(super) config: TxgConfig,
    pub(super) started_at: Instant,
    pub(super) state: Mutex<State>,
    /// Wakes the sync thread: work to do, or the quiescing txg's holds drained.
    pub(super) sync_cv: Condvar,
    /// Wakes waiters and throttled writers: a txg synced, the engine suspended or stopped.
    pub(super) progress_cv: Condvar,
    /// Failures that may have lost changes not yet durable (a failed txg sync, a suspension
    /// of I/O, an intent-log write that failed: `TxgEngine::durability_epoch`). Only grows.
    pub(super) durability_epoch: AtomicU64,
}

impl Shared {
    /// See `TxgEngine::durability_epoch`.
    pub(super) fn note_durability_failure(&self) {
        self.durability_epoch
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub(super) fn micros_since_start(&self, at: Instant) -> u64 {
        duration_us(at.saturating_duration_since(self.started_at))
    }

    /// Waits on `progress_cv` until `txg` is synced, or fails.
    pub(super) fn wait_synced_locked(
        &self,
        mut st: MutexGuard<'_, State>,
        txg: u64,
    ) -> Result<(), TxgError> {
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
}
