//! The resilver as the rest of the pool sees it: how it runs (`ResilverOptions`), what
//! `pool status` shows (`ResilverStatus`), and the handle of the running thread
//! (`ResilverTask`) with the live progress it shares with that thread (`Progress`).
//!
//! Invariants: `Progress::finished` is set exactly once per thread run, when the run ends
//! (`FinishOnDrop`, also on a panic), so no waiter hangs. It uses no other engine module, and
//! lives beside `resilver/` rather than in it so that `pool.rs` can hold a resilver's thread
//! (and take `ResilverOptions`) without an import loop through the resilver.

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// How a resilver runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResilverOptions {
    /// Copy at most this many bytes per second (none: as fast as the devices go).
    pub rate_bytes_per_s: Option<u64>,
    /// Most copies planned (held in memory, sorted) at once (none: `PLANNED_COPIES_MAX`). A
    /// vdev with more is resilvered in windows of offsets, one walk of the tree each.
    pub planned_copies_max: Option<usize>,
}

/// A resilver as `pool status` shows it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ResilverStatus {
    /// The leaf being filled.
    pub leaf: String,
    /// The leaf it replaces (`pool replace`), detached when done.
    pub replacing: Option<String>,
    pub copied_bytes: u64,
    /// Bytes to copy in all; 0 until the block tree has been walked.
    pub total_bytes: u64,
    pub started_ms: u64,
    pub finished_ms: Option<u64>,
    /// Bytes per second since this process started (or resumed) it.
    pub rate_bytes_per_s: u64,
    /// Blocks no side could give verified data for.
    pub unrecoverable_blocks: u64,
    /// Why it stopped, if it stopped before finishing.
    pub error: Option<String>,
}

/// Live progress of the running resilver, shared with its thread.
#[derive(Default)]
pub(crate) struct Progress {
    pub(crate) copied_bytes: AtomicU64,
    pub(crate) total_bytes: AtomicU64,
    pub(crate) unrecoverable_blocks: AtomicU64,
    /// Bytes copied by this process (for the rate).
    pub(crate) copied_here_bytes: AtomicU64,
    pub(crate) error: Mutex<Option<String>>,
    pub(crate) finished: Mutex<bool>,
    pub(crate) finished_cv: Condvar,
}

impl Progress {
    /// Zeroes the counters for the next leaf of the same thread.
    pub(crate) fn reset(&self) {
        self.copied_bytes.store(0, Ordering::Relaxed);
        self.total_bytes.store(0, Ordering::Relaxed);
        self.unrecoverable_blocks.store(0, Ordering::Relaxed);
    }
}

/// Sets `Progress::finished` (and wakes the waiters) when the resilver thread's run ends.
pub(crate) struct FinishOnDrop<'a>(pub(crate) &'a Progress);

impl Drop for FinishOnDrop<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .error
                .lock()
                .get_or_insert_with(|| "the resilver thread panicked".to_string());
        }
        *self.0.finished.lock() = true;
        self.0.finished_cv.notify_all();
    }
}

/// The resilver thread of a pool.
pub(crate) struct ResilverTask {
    /// The leaf being filled now (the thread goes on to the next returned side when done).
    pub(crate) leaf_guid: Arc<AtomicU64>,
    pub(crate) cancel: Arc<AtomicBool>,
    pub(crate) progress: Arc<Progress>,
    pub(crate) started: Instant,
    pub(crate) thread: Option<std::thread::JoinHandle<()>>,
}

impl ResilverTask {
    pub(crate) fn leaf_guid(&self) -> u64 {
        self.leaf_guid.load(Ordering::SeqCst)
    }

    /// Asks the thread to stop and waits for it; progress made so far stays recorded.
    pub(crate) fn stop(mut self) {
        self.cancel.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
