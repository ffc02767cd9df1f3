//! Mirror sides: `pool attach`, `detach`, `replace`, and the resilver that fills a new side —
//! or a side back after missing txgs (`missed.rs`), for the blocks born in those txgs only.
//!
//! Attach adds a leaf to a top-level vdev (a single device becomes a two-way mirror) the way
//! `pool add` changes the tree (`layout.rs`): one sync task swaps the tree, marks the label
//! config dirty and records the resilver in the dataset directory, so the commit writes the
//! new config to every label (the new leaf's included) and the resilver record in one txg.
//! From that txg on every write goes to every side, the new one too.
//!
//! The resilver then copies what the new side lacks: the blocks born before that. It syncs,
//! walks the tree of the synced txg `W` (MOS, space log, every dataset, as scrub does; every
//! root taken from that one txg, `SyncedTree`) holding back the reuse of space freed after `W`
//! (`ScanGuard`), collects the copies on the vdev born at or before `W` (anything born later
//! was written after the swap, to every side), sorts them by offset and copies them in that
//! order — sequential reads and writes, as seed 002 praises — each read verified against its
//! block pointer. About 200 bytes of memory per block to copy are held for the sort, for at
//! most `PLANNED_COPIES_MAX` blocks: a vdev holding more is done in windows of offsets, the
//! lowest first, each planned by a walk of a newer synced txg's tree from where the previous
//! one ended (what lies below was copied, or written to every side since).
//!
//! A side back from a fault (`pool clear`, import) runs the same machinery with the copies
//! restricted to the blocks born in its recorded missed range (`Collector::born_from_txg`):
//! the range was closed before its record was written, so every later block reached it. Its
//! finish removes the range in the same txg as it marks the record done, and only if the range
//! is still the one it copied (the side did not go out again meanwhile). One thread resilvers
//! one side at a time; when it is done it goes on with the next returned side, if any.
//!
//! Invariants:
//! - A leaf being resilvered is never read (`Leaf::is_resilvering`) and never counts as a
//!   copy: not for detach, and not for a write (a write that reached only it failed).
//! - The walk must read every block of the tree: one it cannot read hides the blocks below it,
//!   so the resilver stops there, unfinished, rather than record a side it never filled as
//!   complete.
//! - The record's `next_offset` only moves past blocks that were written to the new leaf and
//!   flushed; a block no side can give back stops the resilver there. A re-import resumes
//!   from `next_offset` (blocks born since were written to every side).
//! - The leaf becomes readable only once the txg recording the end is durable; a replace then
//!   detaches the old side in a txg of its own (redone at import if a crash comes between).
//!
//! The resilver runs on its own thread, so a server keeps serving (and answering its control
//! socket) meanwhile; `Pool::wait_resilver` lets a one-shot command wait for it.
//!
//! ## Where the code lives
//!
//! - `../resilver_task.rs` (a module of its own, beside this folder, so the `Pool` handle can
//!   hold a resilver's thread without using the resilver): `ResilverOptions`, `ResilverStatus`,
//!   the thread's handle (`ResilverTask`) and its live `Progress`.
//! - `vdevs.rs`: the vdev-tree edits (find a leaf, add or remove a side, install the tree,
//!   release a leaf), `detach_replaced`, and the data vdevs a resilver walks (`data_tops`).
//! - `attach.rs`: `Pool::attach`, `replace`, `detach`.
//! - `returned.rs`: a side back from missed txgs as the resilver takes it up: the next one
//!   waiting (`next_returned_leaf`) and its fresh record (`fresh_record`).
//! - `copy.rs`: one run of the resilver (`Resilver`: plan, copy, checkpoint, finish).
//! - `thread.rs`: starting, resuming, waiting for and reporting the resilver thread.
//!
//! Files depend one way only, bottom to top: `resilver_task` and `vdevs` (no siblings) < `returned`,
//! `copy` < `thread` < `attach`, and this file only declares them and re-exports what the
//! crate uses.

mod attach;
mod copy;
mod returned;
mod thread;
mod vdevs;

pub use crate::resilver_task::{ResilverOptions, ResilverStatus};
pub(crate) use returned::fresh_record;
pub(crate) use vdevs::data_tops;
