//! `LeafQueue`: the per-leaf I/O scheduler.
//!
//! Every leaf device gets one queue and `device.concurrency_hint()` worker threads
//! (`cairn-io-Q.N`). Callers submit reads and writes with a priority class and get an `IoHandle`
//! to wait on; they never call the device directly for data I/O.
//!
//! Scheduling. Pending requests are kept per class: FIFO for `SyncRead`, `CacheRead`,
//! `SyncWrite`, `Log` and `CacheWrite` (latency matters, or the caller chose the order),
//! offset-ordered for `AsyncRead`, `AsyncWrite` and `Scrub` (served in elevator order from the
//! last issued offset, which is what rotational media want). A free worker takes the
//! highest-priority class that has pending work and is below its cap of active requests
//! (`IoClass::max_active`): sync classes before async, scrub last. Strict priority means a
//! saturating sync load starves scrub; that is intended.
//!
//! The cache tier's classes only meet on a cache device's queue: `CacheRead` (a read that
//! stands in for a pool read a caller waits on) right after `SyncRead`, and `CacheWrite`
//! (feeding the tier: nobody waits on it but its writer) just above scrub, with two in service
//! at most, so a demand read queued behind a feed is the next request issued.
//!
//! Aggregation. The request taken is merged with pending requests of the same direction that
//! touch it (any class), in both directions of the offset order: writes must be exactly
//! contiguous, reads may leave gaps of up to 32 KiB (read into a scratch buffer and dropped).
//! An aggregate spans at most 1 MiB and 64 buffers and is ONE vectored device call: write
//! buffers are the callers' `Bytes` (no copy), and each read lands directly in its own request's
//! `ReadBuf`: a shared buffer of exactly the request's length, which the caches above keep as
//! it is (a block read for the ARC is never copied again on its way in). Every merged request completes with the aggregate's result.
//!
//! Flush. `flush()` waits until every write submitted before it has completed, then calls the
//! device's flush from the caller's thread. It reports the flush's result only: write errors
//! are reported on each write's own handle.
//!
//! Direct writes (`write_direct`) run in the caller's thread, optionally as FUA writes that are
//! durable on return; the intent log writes its blocks that way and never flushes.
//!
//! Statistics. Besides the totals and latency percentiles of `cairn stat io`, `QueueStats`
//! carries per class and direction the queue wait, disk wait and total wait of every request,
//! request and aggregate sizes, and the pending and active requests of each class at the
//! snapshot (`iostats`, for `cairn pool iostat -l/-w/-q/-r`). All of it is recorded under the
//! lock the bookkeeping takes anyway, into fixed arrays.
//!
//! Invariants: a request is in exactly one place (pending in its class queue and the offset
//! index, or active in one aggregate); `unfinished_writes` holds exactly the writes submitted
//! and not yet completed; the queue's lock is never held during a device call.
//!
//! ## Where the code lives
//!
//! - `priority.rs`: `IoClass`, `CLASSES`, the aggregation limits.
//! - `request.rs`: `Request`, `IoHandle`, `ReadBuf`, `Aggregate`.
//! - `stats.rs`: `QueueStats`.
//! - `sched.rs`: `Sched`, the pending and active requests and the choice of the next aggregate.
//! - `worker.rs`: `Shared` and the worker threads (execute an aggregate, complete its requests).
//! - `leaf.rs`: `LeafQueue`, the entry points. `tests.rs`: the unit tests.
//!
//! Files depend one way only, bottom to top: `priority` (no siblings) < `request` and `stats` <
//! `sched` < `worker` < `leaf`, and this file only declares them and re-exports the public API.

mod leaf;
mod priority;
mod request;
mod sched;
mod stats;
mod worker;

#[cfg(test)]
mod tests;

pub use leaf::LeafQueue;
pub use priority::{
    AGGREGATE_MAX_BUFFERS, AGGREGATE_MAX_BYTES, CLASSES, IoClass, READ_GAP_MAX_BYTES,
};
pub use request::{IoHandle, ReadBuf};
pub use stats::QueueStats;
