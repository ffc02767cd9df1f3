//! A command's pool-history entry, carried into the txg of its change (`Pool::with_history`).
//!
//! Why: a dataset command (create, destroy, set, clone, promote, rollback, hold, bookmark...)
//! made its change in one sync task and then recorded its command line in a second one, which
//! waited for a txg of its own: two txg syncs (two pairs of device flushes) per command where
//! one does. The engine's operations keep their signatures; instead the caller names the entry
//! for the length of one operation and the first sync task that operation queues on this
//! thread carries it: the entry is recorded in that task's sync, after the task succeeded, so
//! the history never names a change that failed, and both are durable together.
//!
//! Invariants: an entry is taken by at most one task; an entry no task took (an operation that
//! changed nothing through a sync task, or queued it from another thread) is handed back to
//! the caller, who records it the old way; the slot is cleared when the operation returns, on
//! every path, so no later operation of this thread takes a stale entry. Only `Pool`'s own
//! sync tasks look at the slot (threads that hold the core, not the pool, never do).
//! Uses nothing of the engine but `PoolCore`'s directory.

use crate::EngineError;
use crate::core::PoolCore;
use std::cell::RefCell;

thread_local! {
    /// The entry, stamped, of the operation this thread runs inside `with_entry`.
    static PENDING: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Clears the slot when the operation ends, however it ends.
struct ClearOnDrop;

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        PENDING.with(|slot| slot.borrow_mut().take());
    }
}

/// Runs `operation` with `entry` (already stamped with its time) waiting for the first sync
/// task it queues on this thread; returns the operation's outcome and the entry if no task
/// took it.
pub(crate) fn with_entry<T, E>(
    entry: String,
    operation: impl FnOnce() -> Result<T, E>,
) -> (Result<T, E>, Option<String>) {
    PENDING.with(|slot| *slot.borrow_mut() = Some(entry));
    let guard = ClearOnDrop;
    let outcome = operation();
    let left = PENDING.with(|slot| slot.borrow_mut().take());
    drop(guard);
    (outcome, left)
}

/// `task`, recording this thread's pending entry (if any, taking it) in the same sync once
/// `task` succeeded.
pub(crate) fn carrying_entry<F>(
    task: F,
) -> impl FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static
where
    F: FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static,
{
    let entry = PENDING.with(|slot| slot.borrow_mut().take());
    move |core, txg| {
        task(core, txg)?;
        if let Some(entry) = entry {
            core.directory.lock().record_history(entry);
        }
        Ok(())
    }
}
