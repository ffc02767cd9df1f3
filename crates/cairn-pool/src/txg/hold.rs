//! Holds: a writer's membership of one txg (`TxgHold`). Taking one (`Shared::new_hold`, under
//! the engine lock) joins the open txg; `add_dirty` accounts bytes to it; dropping it lets a
//! quiescing txg finish, waking the sync thread when the last hold of that txg goes.
//!
//! Invariants: a hold lives only on the open or the quiescing txg (`State::slot_for_hold_mut`
//! panics otherwise), each slot's live-hold count is exactly the holds not yet dropped, and every
//! byte added is counted in both its txg and the total. This file sits above `state` and
//! `throttle` (it reads the early-sync threshold); the engine hands holds out.

use std::fmt;
use std::sync::Arc;

use super::state::{Shared, State};

impl Shared {
    /// A hold on the open txg; a `pin` changes nothing (see `TxgEngine::try_pin`).
    pub(super) fn new_hold(self: &Arc<Self>, st: &mut State, pin: bool) -> TxgHold {
        let was_clean = !st.open.has_changes();
        st.open.holds_live += 1;
        st.open.holds_taken += 1;
        if pin {
            st.open.pins_taken += 1;
        }
        // The sync thread sleeps indefinitely on a clean open txg: the first hold that is not a
        // pin makes it one with changes, due at its timeout (a change may dirty no bytes: see
        // `has_changes`).
        if was_clean && !pin {
            self.sync_cv.notify_all();
        }
        TxgHold {
            shared: Arc::clone(self),
            txg: st.open.txg,
        }
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
        // The sync thread sleeps until the timeout on an open txg with changes (the hold made
        // it one): wake it when the open txg crosses the sync threshold.
        let crossed = before_bytes <= threshold_bytes && after_bytes > threshold_bytes;
        if is_open && crossed {
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
