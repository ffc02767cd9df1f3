//! I/O suspension (ZFS's `failmode=wait`, see "Failure and shutdown" in the `txg` module
//! comment): `SuspendHandle`, with which the syncer suspends I/O in the middle of a txg and waits,
//! and an administrator (`pool clear`) resumes it.
//!
//! Invariants: while `State::io_suspended` is set the engine refuses new work like a failed one
//! (`State::refusal`), yet nothing synced or already in the suspended txg is lost; a resume or a
//! shutdown ends every `wait_resumed`. The handle holds `Shared`, not the engine, so a syncer may
//! keep one without a reference cycle. This file sits above `state` and `error`; the engine
//! hands handles out.

use std::fmt;
use std::sync::Arc;

use super::error::{SuspendReason, Suspension};
use super::state::Shared;

/// Suspends and resumes a txg engine's I/O (see the `txg` module documentation). Cloneable;
/// holds the engine's shared state, not the engine, so it may live in the syncer.
#[derive(Clone)]
pub struct SuspendHandle {
    pub(super) shared: Arc<Shared>,
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
            self.shared.note_durability_failure();
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
