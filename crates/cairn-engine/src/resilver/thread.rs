//! The resilver thread: starting it (`Pool::start_resilver`), resuming it at import or after
//! `pool clear` (`Pool::resume_resilver`), waiting for it and reporting it (`wait_resilver`,
//! `resilver_status`). One thread resilvers one side at a time, then the next returned side.
//!
//! Invariants: at most one resilver thread per pool (a new one stops the previous one first);
//! a leaf being resilvered is marked so before any read may reach it. This file uses `resilver_task`,
//! `vdevs`, `returned` and `copy` below it.

use super::copy::Resilver;
use super::returned::{fresh_record, next_returned_leaf};
use super::vdevs::{detach_replaced, find_leaf_by_guid, layout_error};
use crate::resilver_task::{FinishOnDrop, Progress, ResilverOptions, ResilverStatus, ResilverTask};
use crate::{EngineError, Pool};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

impl Pool {
    /// Whether a resilver thread is running.
    pub(super) fn resilver_running(&self) -> bool {
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
        let returned = next_returned_leaf(&self.core);
        let Some(record) = record.filter(|record| {
            record.finished_ms.is_none()
                && find_leaf_by_guid(&self.core.tree(), record.leaf_guid)
                    .is_some_and(|(_, leaf)| leaf.is_usable() || returned.is_none())
        }) else {
            let Some(guid) = returned else {
                return Ok(None);
            };
            fresh_record(&self.core, self.txg_engine()?, guid)?;
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
            fresh_record(&self.core, self.txg_engine()?, record.leaf_guid)?;
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
                        let Some(next) = next_returned_leaf(&core) else {
                            return;
                        };
                        if cancel.load(Ordering::SeqCst) {
                            return;
                        }
                        if let Err(err) = fresh_record(&core, &engine, next) {
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
