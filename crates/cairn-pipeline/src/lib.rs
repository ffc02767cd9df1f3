//! # cairn-pipeline: from bytes to verified blocks and back
//!
//! Every block the upper layers write goes through `WriteBatch::write`: compress (when asked,
//! and only when it saves space), checksum, allocate one or more copies (`Dva`s), issue the
//! writes to every child of each copy's top-level vdev, and hand back the `BlockPointer` at
//! once — before the I/O completes. The pointer already holds the checksum, so parents can be
//! built while children are still in flight; `WriteBatch::finish` waits for the whole batch,
//! which a txg sync does once before flushing.
//!
//! Every read goes through `BlockIo::read_block`: try the copies (and, within a mirror, the least
//! busy child first) until one verifies against the pointer's checksum; then rewrite the copies
//! that failed (self-heal) and count the error on the leaf that returned bad data. If no copy
//! verifies, the caller gets `PipelineError::Unrecoverable` — never unverified bytes. A
//! compressed block is verified as stored and then decompressed: checksums, scrub and repair
//! deal in physical bytes, every reader above in logical ones.
//!
//! Invariants:
//! - A block pointer handed out by `write` names space the allocator marked allocated in the
//!   batch's txg, and a checksum of exactly the bytes written.
//! - `read_block` returns bytes whose stored form's checksum equals the pointer's, `lsize` of
//!   them, or an error.
//!
//! Nothing here caches: the ARC (`cairn-arc`, the layer above) decides what stays in memory;
//! scrub and check read through this layer directly, so they always see the devices.
//!
//! ## Where the code lives
//!
//! - `error.rs`: `PipelineError`, `CopyError`, `PointerProblem`.
//! - `stats.rs`: `PipelineStats`, the counters.
//! - `io.rs`: `BlockIo`, its tree and allocator, freeing a block, checking a pointer.
//! - `raidz.rs`: a block on a raidz vdev as its stripe's column writes, and read back: data
//!   columns, then combinatorial rebuild from parity, bad columns charged and rewritten.
//! - `copies.rs`: one copy read and verified, every copy surveyed (scrub, check), repair.
//! - `read.rs`: `read_block` and the queued reads (`queue_read`, `QueuedRead`).
//! - `write.rs`: `WriteBatch`, `WriteProps`, `FailedWrites`.
//! - `raw.rs`: raw I/O of self-describing blocks (intent log), `RawWrites`.
//! - `raidz_tests.rs`: unit tests on a raidz vdev of memory devices (queued reads, rebuild,
//!   raw blocks).
//! - `tests.rs`: unit tests on a mirror of memory devices (round trip, compression kept only
//!   when it pays, a damaged side never returned and repaired by scrub, no copy verifying).
//!
//! Files depend one way only, bottom to top: `error` and `stats` (no siblings) < `io` <
//! `raidz` < `copies` < `read`; `raidz` < `write`; `raidz` < `raw`. This file only declares them and
//! re-exports the public API.

mod copies;
mod error;
mod io;
mod raidz;
#[cfg(test)]
mod raidz_tests;
mod raw;
mod read;
mod stats;
#[cfg(test)]
mod tests;
mod write;

pub use cairn_format::compress::DecompressError;

pub use copies::ScrubOutcome;
pub use error::{CopyError, PipelineError, PointerProblem};
pub use io::BlockIo;
pub use raw::RawWrites;
pub use read::QueuedRead;
pub use stats::PipelineStats;
pub use write::{FailedWrites, WriteBatch, WriteProps};
