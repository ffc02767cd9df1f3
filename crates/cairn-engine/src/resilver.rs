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

use crate::create::{CreateOptions, VdevGroup, check_groups, open_leaves};
use crate::pool::{PoolCore, SyncedTree, run_sync_task_with};
use crate::{DeviceOpener, EngineError, Pool};
use bytes::Bytes;
use cairn_dataset::{MissedTxgs, ResilverRecord};
use cairn_device::queue::IoClass;
use cairn_device::spec::DeviceSpec;
use cairn_format::label::{TopVdevKind, VdevRole};
use cairn_format::{BlockPointer, Dva};
use cairn_object::{TreeVisitor, VisitedBlock, walk_objset};
use cairn_pipeline::BlockIo;
use cairn_pool::labels::clear_labels;
use cairn_pool::txg::TxgEngine;
use cairn_pool::vdev::{Leaf, TopVdev, VdevTree};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Bytes copied between two flushes of the new leaf.
const BATCH_BYTES_MAX: u64 = 8 << 20;
/// Progress is made durable (a sync task) at most this often.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Copies planned at once by default: about 200 bytes of memory each, so some 50 MiB, which
/// covers 32 GiB of 128 KiB blocks per walk of the tree.
pub const PLANNED_COPIES_MAX: usize = 1 << 18;
/// Longest sleep between two looks at the cancel flag.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

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
#[derive(Debug, Clone)]
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
struct Progress {
    copied_bytes: AtomicU64,
    total_bytes: AtomicU64,
    unrecoverable_blocks: AtomicU64,
    /// Bytes copied by this process (for the rate).
    copied_here_bytes: AtomicU64,
    error: Mutex<Option<String>>,
    finished: Mutex<bool>,
    finished_cv: Condvar,
}

impl Progress {
    /// Zeroes the counters for the next leaf of the same thread.
    fn reset(&self) {
        self.copied_bytes.store(0, Ordering::Relaxed);
        self.total_bytes.store(0, Ordering::Relaxed);
        self.unrecoverable_blocks.store(0, Ordering::Relaxed);
    }
}

/// Sets `Progress::finished` (and wakes the waiters) when the resilver thread's run ends.
struct FinishOnDrop<'a>(&'a Progress);

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
    leaf_guid: Arc<AtomicU64>,
    cancel: Arc<AtomicBool>,
    progress: Arc<Progress>,
    started: Instant,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ResilverTask {
    fn leaf_guid(&self) -> u64 {
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

fn layout_error(message: impl Into<String>) -> EngineError {
    EngineError::Layout(message.into())
}

/// A leaf of `tree` named by its spec or path, with its top-level vdev.
fn find_leaf<'a>(tree: &'a VdevTree, name: &str) -> Result<(&'a TopVdev, Arc<Leaf>), EngineError> {
    tree.tops
        .iter()
        .find_map(|top| {
            top.leaves
                .iter()
                .find(|leaf| leaf.spec.to_string() == name || leaf.spec.path.as_os_str() == name)
                .map(|leaf| (top, leaf.clone()))
        })
        .ok_or_else(|| layout_error(format!("no device '{name}' in this pool")))
}

fn find_leaf_by_guid(tree: &VdevTree, guid: u64) -> Option<(&TopVdev, Arc<Leaf>)> {
    tree.tops.iter().find_map(|top| {
        top.leaves
            .iter()
            .find(|leaf| leaf.guid == guid)
            .map(|leaf| (top, leaf.clone()))
    })
}

/// `top` with `leaf` added (a single device becomes a mirror).
fn top_with_leaf(top: &TopVdev, leaf: Arc<Leaf>) -> TopVdev {
    let mut grown = top.clone();
    grown.leaves.push(leaf);
    grown.config.kind = TopVdevKind::Mirror;
    grown
}

/// `top` without leaf `guid` (a mirror left with one side becomes a single device).
fn top_without_leaf(top: &TopVdev, guid: u64) -> TopVdev {
    let mut shrunk = top.clone();
    shrunk.leaves.retain(|leaf| leaf.guid != guid);
    if shrunk.leaves.len() == 1 {
        shrunk.config.kind = TopVdevKind::Leaf;
    }
    shrunk
}

/// Swaps in `tree` from inside a sync task and marks the label config dirty.
fn install_tree(core: &PoolCore, tree: VdevTree) {
    core.io.replace_tree(Arc::new(tree));
    core.config_dirty.store(true, Ordering::SeqCst);
}

/// Erases the labels of a leaf that left the pool and closes it.
fn release_leaf(leaf: &Leaf) {
    if let Some(device) = leaf.device() {
        // Best effort: a device that cannot be written is gone anyway, and the pool's labels
        // no longer name it.
        let _ = clear_labels(device.as_ref());
    }
    leaf.shutdown();
}

impl Pool {
    /// Attaches `new` beside `existing` (`pool attach`): a single device becomes a two-way
    /// mirror, a mirror gains a side. The resilver starts in the background. Returns the
    /// vdev's name.
    pub fn attach(
        &self,
        existing: &str,
        new: &DeviceSpec,
        create: &CreateOptions,
        opener: &DeviceOpener,
        options: ResilverOptions,
    ) -> Result<String, EngineError> {
        self.attach_leaf(existing, new, create, opener, options, false)
    }

    /// Replaces `old` by `new` (`pool replace`): attaches `new` beside it, resilvers, then
    /// detaches `old`, all in the background.
    pub fn replace(
        &self,
        old: &str,
        new: &DeviceSpec,
        create: &CreateOptions,
        opener: &DeviceOpener,
        options: ResilverOptions,
    ) -> Result<String, EngineError> {
        self.attach_leaf(old, new, create, opener, options, true)
    }

    fn attach_leaf(
        &self,
        existing: &str,
        new: &DeviceSpec,
        create: &CreateOptions,
        opener: &DeviceOpener,
        options: ResilverOptions,
        replacing: bool,
    ) -> Result<String, EngineError> {
        self.txg_engine()?;
        if self.resilver_running() {
            return Err(layout_error(
                "a resilver is running; wait for it to finish (see `cairn pool status`)",
            ));
        }
        let tree = self.core.tree();
        let (top, old_leaf) = find_leaf(&tree, existing)?;
        check_attachable(top, existing)?;
        if !top.leaves.iter().any(|leaf| leaf.is_readable()) {
            return Err(layout_error(format!(
                "vdev {} has no healthy device to resilver from",
                top.kind_name()
            )));
        }
        let group = VdevGroup {
            mirror: false,
            log: false,
            devices: vec![new.clone()],
        };
        let in_pool: BTreeSet<PathBuf> = tree.leaves().map(|leaf| leaf.spec.path.clone()).collect();
        check_groups(std::slice::from_ref(&group), in_pool, |path| {
            layout_error(format!(
                "{} is already in pool '{}'",
                path.display(),
                self.core.name
            ))
        })?;
        let mut opened = Vec::new();
        let region = match open_leaves(&group, create, opener, &mut opened) {
            Ok(region) => region,
            Err(err) => {
                opened.iter().for_each(|leaf| leaf.shutdown());
                return Err(err);
            }
        };
        let leaf = opened.remove(0);
        if region < top.data_size_bytes {
            leaf.shutdown();
            return Err(layout_error(format!(
                "{new} is too small: vdev {} needs {} bytes of data region, the device has {region}",
                top.kind_name(),
                top.data_size_bytes
            )));
        }
        leaf.set_resilvering(true);
        let top_id = top.id();
        let added = leaf.clone();
        let detach_guid = replacing.then_some(old_leaf.guid);
        let outcome = self.run_sync_task(move |core, txg| {
            let tree = core.tree();
            let top = tree
                .top(top_id)
                .ok_or_else(|| layout_error("the vdev left the pool"))?;
            let grown = top_with_leaf(top, added.clone());
            install_tree(core, tree.with_top_replaced(grown));
            core.directory.lock().resilver = Some(ResilverRecord::starting(
                added.guid,
                detach_guid,
                txg,
                crate::now_ms(),
            ));
            Ok(())
        });
        if let Err(err) = outcome {
            leaf.shutdown();
            return Err(err);
        }
        self.start_resilver(leaf.guid, options)?;
        let tree = self.core.tree();
        Ok(tree
            .top(top_id)
            .map_or_else(String::new, TopVdev::kind_name))
    }

    /// Detaches `device` from its mirror (`pool detach`). Refused if no other side holds
    /// every block. Detaching a side being resilvered stops the resilver.
    pub fn detach(&self, device: &str) -> Result<(), EngineError> {
        self.txg_engine()?;
        let tree = self.core.tree();
        let (top, leaf) = find_leaf(&tree, device)?;
        if top.leaves.len() < 2 {
            return Err(layout_error(format!(
                "'{device}' is not a side of a mirror; only mirror sides can be detached"
            )));
        }
        if !top
            .leaves
            .iter()
            .any(|other| other.guid != leaf.guid && other.is_readable())
        {
            return Err(layout_error(format!(
                "detaching '{device}' would leave vdev {} with no healthy copy of its data",
                top.kind_name()
            )));
        }
        {
            let mut running = self.resilver.lock();
            match running.take() {
                Some(task) if task.leaf_guid() == leaf.guid => task.stop(),
                other => *running = other,
            }
        }
        let (top_id, guid) = (top.id(), leaf.guid);
        self.run_sync_task(move |core, _| {
            let tree = core.tree();
            let top = tree
                .top(top_id)
                .ok_or_else(|| layout_error("the vdev left the pool"))?;
            install_tree(core, tree.with_top_replaced(top_without_leaf(top, guid)));
            let mut directory = core.directory.lock();
            // A side that leaves owes nothing more.
            directory.missed_txgs.leaves.remove(&guid);
            if let Some(record) = &mut directory.resilver {
                if record.leaf_guid == guid && record.finished_ms.is_none() {
                    directory.resilver = None;
                } else if record.detach_guid == Some(guid) {
                    record.detach_guid = None;
                }
            }
            Ok(())
        })?;
        release_leaf(&leaf);
        Ok(())
    }

    /// Whether a resilver thread is running.
    fn resilver_running(&self) -> bool {
        self.resilver
            .lock()
            .as_ref()
            .is_some_and(|task| !*task.progress.finished.lock())
    }

    /// Waits until the running resilver (if any) has finished or stopped; returns its error.
    pub fn wait_resilver(&self) -> Result<(), EngineError> {
        let progress = match self.resilver.lock().as_ref() {
            Some(task) => task.progress.clone(),
            None => return Ok(()),
        };
        let mut finished = progress.finished.lock();
        while !*finished {
            progress.finished_cv.wait(&mut finished);
        }
        drop(finished);
        match progress.error.lock().clone() {
            Some(error) => Err(layout_error(format!("resilver stopped: {error}"))),
            None => Ok(()),
        }
    }

    /// The running or last resilver, for `pool status`.
    pub fn resilver_status(&self) -> Option<ResilverStatus> {
        let record = self.core.directory.lock().resilver.clone()?;
        let tree = self.core.tree();
        let name = |guid: u64| {
            find_leaf_by_guid(&tree, guid)
                .map_or_else(|| format!("guid {guid}"), |(_, leaf)| leaf.spec.to_string())
        };
        let mut status = ResilverStatus {
            leaf: name(record.leaf_guid),
            replacing: record.detach_guid.map(name),
            copied_bytes: record.copied_bytes,
            total_bytes: record.total_bytes,
            started_ms: record.started_ms,
            finished_ms: record.finished_ms,
            rate_bytes_per_s: 0,
            unrecoverable_blocks: 0,
            error: None,
        };
        if let Some(task) = self.resilver.lock().as_ref()
            && task.leaf_guid() == record.leaf_guid
        {
            let progress = &task.progress;
            status.copied_bytes = progress.copied_bytes.load(Ordering::Relaxed);
            status.total_bytes = progress.total_bytes.load(Ordering::Relaxed);
            status.unrecoverable_blocks = progress.unrecoverable_blocks.load(Ordering::Relaxed);
            status.error = progress.error.lock().clone();
            let elapsed_ms = task.started.elapsed().as_millis().max(1) as u64;
            status.rate_bytes_per_s =
                progress.copied_here_bytes.load(Ordering::Relaxed) * 1000 / elapsed_ms;
        }
        Some(status)
    }

    /// Marks the leaf of an unfinished resilver recorded in the directory as lacking data, so
    /// nothing reads it (import, before anything else reads the pool's data).
    pub(crate) fn mark_resilvering_leaf(&self) {
        let record = self.core.directory.lock().resilver.clone();
        if let Some(record) = record
            && record.finished_ms.is_none()
            && let Some((_, leaf)) = find_leaf_by_guid(&self.core.tree(), record.leaf_guid)
        {
            leaf.set_resilvering(true);
        }
    }

    /// Resumes the resilver recorded in the directory, if one is unfinished (import), or
    /// starts that of a side found back (`changed`: leaves whose missed range import changed,
    /// whose resilver starts over). Returns a note for the front end.
    pub(crate) fn resume_resilver(&self, changed: &[u64]) -> Result<Option<String>, EngineError> {
        let record = self.core.directory.lock().resilver.clone();
        if let Some(record) = &record
            && record.finished_ms.is_some()
            && record.detach_guid.is_some()
        {
            detach_replaced(&self.core, self.txg_engine()?)?;
        }
        let returned = crate::missed::next_returned_leaf(&self.core);
        let Some(record) = record.filter(|record| {
            record.finished_ms.is_none()
                && find_leaf_by_guid(&self.core.tree(), record.leaf_guid)
                    .is_some_and(|(_, leaf)| leaf.is_usable() || returned.is_none())
        }) else {
            let Some(guid) = returned else {
                return Ok(None);
            };
            crate::missed::fresh_record(&self.core, self.txg_engine()?, guid)?;
            self.start_resilver(guid, ResilverOptions::default())?;
            let tree = self.core.tree();
            let name = find_leaf_by_guid(&tree, guid)
                .map_or_else(|| format!("guid {guid}"), |(_, leaf)| leaf.spec.to_string());
            let range = self.core.missed_range(guid);
            return Ok(Some(format!(
                "pool '{}': {name} is back after missing txgs {}..={}; resilvering it",
                self.core.name,
                range.map_or(0, |range| range.first_txg),
                range.and_then(|range| range.last_txg).unwrap_or(0)
            )));
        };
        let Some((_, leaf)) = find_leaf_by_guid(&self.core.tree(), record.leaf_guid) else {
            return Ok(None);
        };
        let restarted = changed.contains(&record.leaf_guid);
        if restarted {
            // What it lacks grew since the record was written: start over.
            crate::missed::fresh_record(&self.core, self.txg_engine()?, record.leaf_guid)?;
        }
        if !leaf.is_usable() {
            return Ok(Some(format!(
                "pool '{}': cannot resume the resilver of {}: the device is unavailable",
                self.core.name, leaf.spec
            )));
        }
        self.start_resilver(record.leaf_guid, ResilverOptions::default())?;
        if restarted {
            return Ok(Some(format!(
                "pool '{}': resilver of {} restarted: it missed more txgs since it began",
                self.core.name, leaf.spec
            )));
        }
        Ok(Some(format!(
            "pool '{}': resilver of {} resumed at {} of {} bytes",
            self.core.name, leaf.spec, record.copied_bytes, record.total_bytes
        )))
    }

    pub(crate) fn start_resilver(
        &self,
        leaf_guid: u64,
        options: ResilverOptions,
    ) -> Result<(), EngineError> {
        let engine = self.txg_engine()?.clone();
        let core = self.core.clone();
        let cancel = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Progress::default());
        let current_guid = Arc::new(AtomicU64::new(leaf_guid));
        let thread = {
            let (cancel, progress, current) =
                (cancel.clone(), progress.clone(), current_guid.clone());
            std::thread::Builder::new()
                .name("cairn-resilver".into())
                .spawn(move || {
                    // Marks the run finished however it ends, a panic included: a waiter
                    // (`wait_resilver`) must never wait for a thread that is gone.
                    let _finished = FinishOnDrop(&progress);
                    let mut guid = leaf_guid;
                    loop {
                        let run = Resilver {
                            core: &core,
                            engine: &engine,
                            leaf_guid: guid,
                            missed: core.missed_range(guid),
                            options,
                            cancel: &cancel,
                            progress: &progress,
                        };
                        if let Err(err) = run.run() {
                            *progress.error.lock() = Some(crate::error_chain(&err));
                            return;
                        }
                        // Another returned side waiting its turn: one resilver at a time.
                        let Some(next) = crate::missed::next_returned_leaf(&core) else {
                            return;
                        };
                        if cancel.load(Ordering::SeqCst) {
                            return;
                        }
                        if let Err(err) = crate::missed::fresh_record(&core, &engine, next) {
                            *progress.error.lock() = Some(crate::error_chain(&err));
                            return;
                        }
                        progress.reset();
                        current.store(next, Ordering::SeqCst);
                        guid = next;
                    }
                })
                .map_err(|err| {
                    layout_error(format!(
                        "cannot start the resilver: {}",
                        crate::error_chain(&err)
                    ))
                })?
        };
        let task = ResilverTask {
            leaf_guid: current_guid,
            cancel,
            progress,
            started: Instant::now(),
            thread: Some(thread),
        };
        let previous = self.resilver.lock().replace(task);
        if let Some(previous) = previous {
            previous.stop();
        }
        Ok(())
    }
}

/// Only data mirrors and single data devices take another side.
fn check_attachable(top: &TopVdev, name: &str) -> Result<(), EngineError> {
    if top.config.role != VdevRole::Normal {
        return Err(layout_error(format!(
            "'{name}' is a log device; attach works on data devices"
        )));
    }
    if let TopVdevKind::RaidZ { .. } = top.config.kind {
        return Err(layout_error(format!(
            "'{name}' is part of a raidz vdev; attach works on mirrors and single devices"
        )));
    }
    Ok(())
}

/// One copy to resilver: its address and the block it belongs to.
type Planned = (Dva, BlockPointer);

/// Collects the copies on one vdev born in a range of txgs, by offset: those from
/// `from_offset` on, at most `planned_max` of them, the lowest offsets first (`window_end`
/// shrinks to the first offset left out).
struct Collector<'a> {
    io: &'a BlockIo,
    cancel: &'a AtomicBool,
    vdev: u32,
    /// Copies born in `born_from_txg..=born_by_txg` are planned (a returned side lacks only
    /// its missed txgs; an attached one everything).
    born_from_txg: u64,
    born_by_txg: u64,
    from_offset: u64,
    window_end: u64,
    planned_max: usize,
    copies: BTreeMap<u64, Planned>,
    /// Bytes of every copy from `from_offset` on, planned or not (the resilver's total).
    remaining_bytes: u64,
    unreadable: u64,
}

impl Collector<'_> {
    fn note(&mut self, bp: &BlockPointer) {
        if bp.birth_txg > self.born_by_txg || bp.birth_txg < self.born_from_txg {
            return;
        }
        for dva in bp.copies() {
            if dva.vdev != self.vdev || dva.offset < self.from_offset {
                continue;
            }
            self.remaining_bytes += u64::from(dva.asize);
            if dva.offset >= self.window_end {
                continue;
            }
            self.copies.insert(dva.offset, (*dva, *bp));
            if self.copies.len() > self.planned_max
                && let Some((offset, _)) = self.copies.pop_last()
            {
                self.window_end = offset;
            }
        }
    }
}

impl TreeVisitor for Collector<'_> {
    fn visit(&mut self, block: &VisitedBlock, need_data: bool) -> Option<Bytes> {
        self.note(&block.bp);
        // Asked to stop (pool closing, detach): descend no further, so a walk of a large
        // tree does not hold up the close.
        if !need_data || self.cancel.load(Ordering::SeqCst) {
            return None;
        }
        match self.io.read_block(&block.bp, IoClass::Scrub) {
            Ok(data) => Some(data),
            Err(_) => {
                self.unreadable += 1;
                None
            }
        }
    }
}

/// One run of the resilver thread.
struct Resilver<'a> {
    core: &'a Arc<PoolCore>,
    engine: &'a Arc<TxgEngine>,
    leaf_guid: u64,
    /// What a returned side lacks, as recorded when the run started (none: an attached side,
    /// lacking everything). The run ends it only if it is still what is recorded.
    missed: Option<MissedTxgs>,
    options: ResilverOptions,
    cancel: &'a AtomicBool,
    progress: &'a Progress,
}

impl Resilver<'_> {
    fn run(&self) -> Result<(), EngineError> {
        // Chains begun before the attach may hold blocks the new side lacks; restart them so
        // those are freed once their records are in a synced txg.
        let logs: Vec<_> = self.core.intent_logs.lock().values().cloned().collect();
        for log in logs {
            log.restart_chains()
                .map_err(|err| layout_error(crate::error_chain(&err)))?;
        }
        // The rate limit counts from here, over every window.
        let started = Instant::now();
        loop {
            if let Some(leaf) = self.copy_window(started)? {
                return self.finish(&leaf);
            }
        }
    }

    /// Plans and copies the next window of offsets; the leaf once the window reached the end
    /// of the vdev. Each window walks the tree of a synced txg afresh: the copies below the
    /// window's start are on the new side already (or were born after an earlier window's
    /// txg, and so written to every side).
    fn copy_window(&self, started: Instant) -> Result<Option<Arc<Leaf>>, EngineError> {
        let txg_error = EngineError::Txg;
        // Every txg after the one this syncs opened after the attach: its blocks are on
        // every side. The tree of this txg (or of a later one) holds every block that may be
        // missing.
        self.engine.sync_now_forced().map_err(txg_error)?;
        // All roots of one synced txg: the live directory names blocks of a txg still being
        // synced, which cannot be read yet, and a walk that skips them would leave their
        // subtrees uncopied.
        let synced = SyncedTree::take(self.core, Some(self.engine))?;
        let record = self
            .core
            .directory
            .lock()
            .resilver
            .clone()
            .filter(|record| record.leaf_guid == self.leaf_guid)
            .ok_or_else(|| layout_error("the resilver record is gone"))?;
        let tree = self.core.tree();
        let (top, leaf) = find_leaf_by_guid(&tree, self.leaf_guid)
            .ok_or_else(|| layout_error("the device being resilvered left the pool"))?;
        // A returned side lacks only the blocks born while it was out; one attached (no
        // range) every block born before the walked txg.
        let (born_from_txg, born_by_txg) = match self.missed {
            Some(MissedTxgs {
                first_txg,
                last_txg: Some(last_txg),
            }) => {
                // The range was closed before the record of this resilver was written, and
                // the walked txg was synced after that.
                assert!(
                    last_txg <= synced.uberblock.txg,
                    "missed txgs end at {last_txg}, after the walked txg {}",
                    synced.uberblock.txg
                );
                (first_txg, last_txg)
            }
            Some(_) => {
                return Err(layout_error(format!(
                    "{} is out again; it is resilvered once back",
                    leaf.spec
                )));
            }
            None => (0, synced.uberblock.txg),
        };
        let mut collector = Collector {
            io: &self.core.io,
            cancel: self.cancel,
            vdev: top.id(),
            born_from_txg,
            born_by_txg,
            from_offset: record.next_offset,
            window_end: top.data_size_bytes,
            planned_max: self
                .options
                .planned_copies_max
                .unwrap_or(PLANNED_COPIES_MAX)
                .max(1),
            copies: BTreeMap::new(),
            remaining_bytes: 0,
            unreadable: 0,
        };
        walk_objset(&synced.uberblock.root_bp, &mut collector);
        synced.chain.iter().for_each(|bp| collector.note(bp));
        for (_, root) in &synced.roots {
            walk_objset(root, &mut collector);
        }
        if self.cancel.load(Ordering::SeqCst) {
            return Err(layout_error("stopped"));
        }
        let progress = self.progress;
        progress
            .unrecoverable_blocks
            .store(collector.unreadable, Ordering::Relaxed);
        // A block the walk could not read hides the blocks below it: the new side cannot be
        // known complete, so it stays unreadable (and the record unfinished) until a later
        // run, with the device back or the damage repaired, walks the whole tree.
        if collector.unreadable > 0 {
            return Err(layout_error(format!(
                "{} blocks of the pool's tree could not be read from any other side; {} \
                 stays incomplete",
                collector.unreadable, leaf.spec
            )));
        }
        progress
            .copied_bytes
            .store(record.copied_bytes, Ordering::Relaxed);
        progress.total_bytes.store(
            record.copied_bytes + collector.remaining_bytes,
            Ordering::Relaxed,
        );
        let window_end = collector.window_end;
        let copies: Vec<Planned> = collector.copies.into_values().collect();
        self.copy_all(&leaf, &copies, window_end, started)?;
        Ok((window_end >= top.data_size_bytes).then_some(leaf))
    }

    /// Copies `copies` (sorted by offset, all below `end_offset`) in batches, flushing and
    /// checkpointing as it goes; the last checkpoint records `end_offset`. Stopped (pool
    /// closing, detach), it records how far it got first.
    fn copy_all(
        &self,
        leaf: &Arc<Leaf>,
        copies: &[Planned],
        end_offset: u64,
        started: Instant,
    ) -> Result<(), EngineError> {
        let mut last_checkpoint = Instant::now();
        let mut index = 0;
        let offset_at = |index: usize| copies.get(index).map_or(end_offset, |(dva, _)| dva.offset);
        while index < copies.len() {
            if self.cancel.load(Ordering::SeqCst) || !self.pace(started) {
                self.checkpoint(offset_at(index))?;
                return Err(layout_error("stopped"));
            }
            let batch_end = batch_end(copies, index, self.batch_bytes_max());
            self.copy_batch(leaf, &copies[index..batch_end])?;
            index = batch_end;
            if last_checkpoint.elapsed() >= CHECKPOINT_INTERVAL || index == copies.len() {
                self.checkpoint(offset_at(index))?;
                last_checkpoint = Instant::now();
            }
        }
        Ok(())
    }

    /// Bytes per batch: smaller under a rate limit, so progress moves (and is recorded)
    /// steadily.
    fn batch_bytes_max(&self) -> u64 {
        self.options
            .rate_bytes_per_s
            .map_or(BATCH_BYTES_MAX, |rate| {
                (rate / 4).clamp(64 << 10, BATCH_BYTES_MAX)
            })
    }

    /// Reads (verified) and writes one batch, then flushes the new leaf.
    fn copy_batch(&self, leaf: &Arc<Leaf>, batch: &[Planned]) -> Result<(), EngineError> {
        let io = &self.core.io;
        let mut writes = Vec::with_capacity(batch.len());
        let mut bytes = 0;
        for (dva, bp) in batch {
            // A block no side gives back verified stops the resilver here (it is never
            // recorded as copied): the new side would lack it, and a retry (import, a device
            // back) may read it.
            // As stored: a compressed block is copied compressed.
            let data = io.read_block_stored(bp, IoClass::Scrub).inspect_err(|_| {
                self.progress
                    .unrecoverable_blocks
                    .fetch_add(1, Ordering::Relaxed);
            })?;
            bytes += u64::from(dva.asize);
            let handle = io
                .write_copy(leaf, dva, Bytes::from_owner(data))
                .ok_or_else(|| layout_error(format!("{} is unavailable", leaf.spec)))?;
            writes.push(handle);
        }
        for handle in writes {
            if let Err(err) = handle.wait() {
                leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                leaf.fault();
                return Err(layout_error(format!(
                    "write to {} failed: {}",
                    leaf.spec,
                    crate::error_chain(&err)
                )));
            }
        }
        leaf.flush().map_err(|err| {
            layout_error(format!(
                "flush of {} failed: {}",
                leaf.spec,
                crate::error_chain(&err)
            ))
        })?;
        let progress = self.progress;
        progress.copied_bytes.fetch_add(bytes, Ordering::Relaxed);
        progress
            .copied_here_bytes
            .fetch_add(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Records that every block below `next_offset` is on the new leaf (durable on return).
    fn checkpoint(&self, next_offset: u64) -> Result<(), EngineError> {
        let copied_bytes = self.progress.copied_bytes.load(Ordering::Relaxed);
        let total_bytes = self.progress.total_bytes.load(Ordering::Relaxed);
        let guid = self.leaf_guid;
        run_sync_task_with(self.core, self.engine, move |core, _| {
            if let Some(record) = &mut core.directory.lock().resilver
                && record.leaf_guid == guid
            {
                record.next_offset = next_offset;
                record.copied_bytes = copied_bytes;
                record.total_bytes = total_bytes;
            }
            Ok(())
        })
        .map(|_| ())
    }

    /// Sleeps as long as the rate limit asks; false if asked to stop meanwhile.
    fn pace(&self, started: Instant) -> bool {
        let Some(rate) = self.options.rate_bytes_per_s.filter(|rate| *rate > 0) else {
            return true;
        };
        let copied = self.progress.copied_here_bytes.load(Ordering::Relaxed);
        let due = Duration::from_secs_f64(copied as f64 / rate as f64);
        loop {
            if self.cancel.load(Ordering::SeqCst) {
                return false;
            }
            let left = due.saturating_sub(started.elapsed());
            if left.is_zero() {
                return true;
            }
            std::thread::sleep(SLEEP_SLICE.min(left));
        }
    }

    /// Records the resilver as finished; once that txg is durable the leaf becomes readable
    /// (not before: a write that reached only this leaf must not count as written while a
    /// crash would still bring it back as lacking data). For a replace, the old side is then
    /// detached in a txg of its own, so the vdev always has a readable side.
    fn finish(&self, leaf: &Arc<Leaf>) -> Result<(), EngineError> {
        let guid = self.leaf_guid;
        let copied_bytes = self.progress.copied_bytes.load(Ordering::Relaxed);
        let filled = leaf.clone();
        let covered = self.missed;
        run_sync_task_with(self.core, self.engine, move |core, _| {
            // A leaf faulted since the copies (a write to it failed) lacks what that write
            // carried, and nothing records which txgs it missed: it is not complete.
            if !filled.is_usable() {
                return Err(layout_error(format!(
                    "{} failed during the resilver; it stays incomplete",
                    filled.spec
                )));
            }
            let mut directory = core.directory.lock();
            // The side went out and came back meanwhile: a newer run covers the new range.
            if directory.missed_txgs.leaves.get(&guid).copied() != covered {
                return Err(layout_error(format!(
                    "{} missed more txgs during the resilver; it stays incomplete",
                    filled.spec
                )));
            }
            directory.missed_txgs.leaves.remove(&guid);
            let Some(record) = directory.resilver.as_mut().filter(|r| r.leaf_guid == guid) else {
                return Err(layout_error("the resilver record is gone"));
            };
            record.finished_ms = Some(crate::now_ms());
            record.copied_bytes = copied_bytes;
            record.total_bytes = copied_bytes;
            Ok(())
        })?;
        leaf.set_resilvering(false);
        leaf.set_missed(None);
        detach_replaced(self.core, self.engine)
    }
}

/// Detaches the side a finished replace recorded (after the resilver, or at import when a
/// crash came between the two txgs).
pub(crate) fn detach_replaced(
    core: &Arc<PoolCore>,
    engine: &Arc<TxgEngine>,
) -> Result<(), EngineError> {
    let detached: Arc<Mutex<Option<Arc<Leaf>>>> = Arc::default();
    let detached_out = detached.clone();
    run_sync_task_with(core, engine, move |core, _| {
        let mut directory = core.directory.lock();
        let Some(record) = directory
            .resilver
            .as_mut()
            .filter(|record| record.finished_ms.is_some())
        else {
            return Ok(());
        };
        let Some(old) = record.detach_guid.take() else {
            return Ok(());
        };
        let tree = core.tree();
        if let Some((top, old_leaf)) = find_leaf_by_guid(&tree, old)
            && top
                .leaves
                .iter()
                .any(|leaf| leaf.guid != old && leaf.is_readable())
        {
            install_tree(core, tree.with_top_replaced(top_without_leaf(top, old)));
            *detached_out.lock() = Some(old_leaf);
        }
        Ok(())
    })?;
    if let Some(old) = detached.lock().take() {
        release_leaf(&old);
    }
    Ok(())
}

/// End (exclusive) of the batch starting at `start`: up to `bytes_max` bytes (at least one
/// copy).
fn batch_end(copies: &[Planned], start: usize, bytes_max: u64) -> usize {
    let mut bytes = 0;
    let mut end = start;
    while end < copies.len() && (end == start || bytes < bytes_max) {
        bytes += u64::from(copies[end].0.asize);
        end += 1;
    }
    end
}
