//! Snapshots, destroys, clones, promotes and rollbacks in the filesystem crash workload, and
//! what is checked of them after the cut.
//!
//! While the threads run, the syncer thread (`Admin::tick`) takes snapshots of `tank/fs` and
//! destroys the oldest one between its txg syncs. Such a snapshot is fuzzy for the model: each
//! thread's subtree in it is the thread's state after some operation between the last that
//! had returned before the snapshot was asked for and the last begun when it returned (each
//! operation is one transaction, so a snapshot holds a prefix of a thread's operations). At
//! the boundaries between phases, with the threads stopped, `Admin::boundary` takes an exact
//! snapshot and then clones it, or rolls back to the oldest exact snapshot (`-r`):
//! - a clone cycle clones the snapshot into `tank/clone` (its own model: one thread's subtree
//!   changed by a few operations of its own, the others the snapshot's), promotes the clone,
//!   promotes `tank/fs` back and destroys the clone, each step durable on return;
//! - a rollback drops the workload's handle on `tank/fs` and opens it again after: for each
//!   thread it is one more operation whose state is the snapshot's (open files are closed by
//!   the drop; their orphans go when the filesystem is opened).
//!
//! After the cut and import (`check_snapshots`, `check_clone`, `check_rollback`): every
//! snapshot whose create returned exists (under `tank/fs`, or `tank/clone` between the two
//! promotes) and each subtree in it is a state in its range; one whose create had not
//! returned, or whose destroy had not, may exist and then is such a state too; one whose
//! destroy (or rollback `-r`) returned is gone. A clone exists only during a cycle, holding
//! the origin's subtrees and a prefix of its own thread's operations no shorter than what was
//! durable. A rollback cut short left all subtrees before it or all after it.

use crate::common::Rng;
use crate::model::{Seen, Tree, read_tree};
use crate::ops::{Progress, ThreadRun, run_thread};
use crate::{Scenario, land};
use cairn_emulate::PowerSwitch;
use cairn_engine::Pool;
use cairn_fs::Filesystem;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Operations of the thread a clone cycle changes in the clone.
const CLONE_OPS: usize = 8;

/// Where a snapshot stands, as the workload last heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Asked for; the power went before the create returned.
    Creating,
    /// Reported created.
    Live,
    /// Its destroy (or a rollback `-r` past it) was asked for and had not returned.
    Destroying,
    /// Its destroy returned.
    Destroyed,
}

/// A snapshot of `tank/fs` the workload asked for.
#[derive(Debug, Clone)]
pub struct Snap {
    /// Short name: `pN` (taken while the threads ran) or `bN` (at a boundary: exact).
    pub name: String,
    /// Per thread: the fewest operations the snapshot holds.
    pub lows: Vec<usize>,
    /// Per thread: the most (`None`: its create never returned, so the most begun at all).
    pub highs: Option<Vec<usize>>,
    pub status: Status,
}

impl Snap {
    fn exact(&self) -> bool {
        self.highs.as_ref() == Some(&self.lows)
    }
}

/// A clone cycle under way (the power went in it).
pub struct CloneCycle {
    /// The origin's short name.
    pub origin: String,
    /// The thread whose subtree the clone changes.
    pub thread: usize,
    /// The clone's operations on that subtree, from the origin's state.
    pub run: ThreadRun,
}

/// The administrative side of a round: what it asked for, and what is under way.
#[derive(Default)]
pub struct Admin {
    pub snaps: Vec<Snap>,
    pub next: u32,
    /// Set while a clone cycle runs; cleared when its destroy returns.
    pub clone: Option<CloneCycle>,
    /// A rollback whose call had not returned: each thread's operation count after it.
    pub rollback: Option<Vec<usize>>,
    /// An action failed (the power went).
    pub failed: Option<String>,
    /// Counts for the run's summary: snapshots reported created, destroys returned, clone
    /// cycles and rollbacks completed.
    pub created: u64,
    pub destroyed: u64,
    pub cycles: u64,
    pub rollbacks: u64,
    /// The round, for failure messages.
    pub label: String,
}

impl Admin {
    /// One turn of the syncer while the threads run: a txg sync, a snapshot, a destroy of the
    /// oldest snapshot, or nothing. False once an action failed.
    pub fn tick(
        &mut self,
        pool: &Pool,
        rng: &mut Rng,
        progress: &[Progress],
        power: &PowerSwitch,
    ) -> bool {
        let result = match rng.below(12) {
            0..=3 => pool.sync().map(|_| ()).map_err(|err| err.to_string()),
            4 | 5 => {
                let lows = progress
                    .iter()
                    .map(|p| p.done.load(Ordering::SeqCst))
                    .collect();
                self.snapshot(pool, "p", lows, || {
                    progress
                        .iter()
                        .map(|p| p.begun.load(Ordering::SeqCst))
                        .collect()
                })
            }
            6 => self.destroy_oldest(pool),
            _ => return true,
        };
        self.note(result, "a txg sync, snapshot or destroy", power)
    }

    /// Records an action's failure; panics if the power had not gone.
    fn note(&mut self, result: Result<(), String>, what: &str, power: &PowerSwitch) -> bool {
        match result {
            Ok(()) => true,
            Err(err) => {
                assert!(
                    power.tripped(),
                    "{}: {what} failed before the power was cut: {err}",
                    self.label
                );
                self.failed = Some(format!("{what}: {err}"));
                false
            }
        }
    }

    fn snapshot(
        &mut self,
        pool: &Pool,
        prefix: &str,
        lows: Vec<usize>,
        highs: impl FnOnce() -> Vec<usize>,
    ) -> Result<(), String> {
        self.next += 1;
        let name = format!("{prefix}{}", self.next);
        self.snaps.push(Snap {
            name: name.clone(),
            lows,
            highs: None,
            status: Status::Creating,
        });
        pool.snapshot(&[format!("tank/fs@{name}")], false)
            .map_err(|err| err.to_string())?;
        let snap = self.snaps.last_mut().expect("just pushed");
        snap.highs = Some(highs());
        snap.status = Status::Live;
        self.created += 1;
        Ok(())
    }

    fn destroy_oldest(&mut self, pool: &Pool) -> Result<(), String> {
        let Some(snap) = self.snaps.iter_mut().find(|s| s.status == Status::Live) else {
            return Ok(());
        };
        snap.status = Status::Destroying;
        pool.destroy_snapshot(&format!("tank/fs@{}", snap.name))
            .map_err(|err| err.to_string())?;
        snap.status = Status::Destroyed;
        self.destroyed += 1;
        Ok(())
    }

    /// Between two phases, the threads stopped: an exact snapshot, then a clone cycle of it,
    /// a rollback to the oldest exact snapshot, or nothing more. `fs` is the workload's
    /// handle on `tank/fs` (`None` after a failed rollback). False once an action failed.
    #[allow(clippy::too_many_arguments)]
    pub fn boundary(
        &mut self,
        pool: &Pool,
        fs: &mut Option<Arc<Filesystem>>,
        runs: &mut [ThreadRun],
        rng: &mut Rng,
        seed: u64,
        scenario: &Scenario,
        power: &PowerSwitch,
    ) -> bool {
        let counts: Vec<usize> = runs.iter().map(|run| run.started).collect();
        let result = self.snapshot(pool, "b", counts.clone(), || counts);
        if !self.note(result, "an exact snapshot", power) {
            return false;
        }
        match rng.below(5) {
            0 | 1 => {
                let thread = rng.below(runs.len() as u64) as usize;
                let result = self.clone_cycle(pool, runs, thread, seed, scenario, power);
                self.note(result, "a clone cycle", power)
            }
            2 | 3 => {
                let result = self.roll_back(pool, fs, runs);
                self.note(result, "a rollback", power)
            }
            _ => true,
        }
    }

    /// Clones the newest snapshot (exact) into `tank/clone`, changes one thread's subtree
    /// there, promotes the clone, promotes `tank/fs` back, destroys the clone.
    fn clone_cycle(
        &mut self,
        pool: &Pool,
        runs: &[ThreadRun],
        thread: usize,
        seed: u64,
        scenario: &Scenario,
        power: &PowerSwitch,
    ) -> Result<(), String> {
        let origin = self.snaps.last().expect("an exact snapshot").name.clone();
        let start = closed(&runs[thread].model);
        self.clone = Some(CloneCycle {
            origin: origin.clone(),
            thread,
            run: ThreadRun::new(seed, runs.len() + thread, start),
        });
        let err = |err: cairn_engine::EngineError| err.to_string();
        // The clone takes `tank`'s properties, not its origin's (as in ZFS) but for these:
        // its `recordsize` stays the default, larger than files' blocks of 4K or 16K records.
        let sync = if scenario.sync_always {
            "always"
        } else {
            "standard"
        };
        let logbias = if scenario.throughput {
            "throughput"
        } else {
            "latency"
        };
        let properties = [
            ("sync".to_string(), sync.to_string()),
            ("logbias".to_string(), logbias.to_string()),
        ];
        pool.clone_snapshot(&format!("tank/fs@{origin}"), "tank/clone", &properties)
            .map_err(err)?;
        let clone_fs = pool.filesystem("tank/clone").map_err(err)?;
        let cycle = self.clone.as_mut().expect("set above");
        run_thread(
            &clone_fs,
            &mut cycle.run,
            seed,
            CLONE_OPS,
            scenario,
            power,
            &Progress::default(),
        );
        if let Some((op, err, _)) = &cycle.run.failure {
            return Err(format!(
                "the clone's {op}: {err} (its operations on thread {thread}'s subtree: {:?})",
                cycle.run.described
            ));
        }
        drop(clone_fs);
        pool.promote("tank/clone").map_err(err)?;
        // The promote's txg holds every change to the clone.
        let cycle = self.clone.as_mut().expect("set above");
        cycle.run.all_durable();
        pool.promote("tank/fs").map_err(err)?;
        pool.destroy_dataset("tank/clone").map_err(err)?;
        self.clone = None;
        self.cycles += 1;
        Ok(())
    }

    /// Rolls `tank/fs` back to its oldest exact snapshot, destroying newer ones: the handle
    /// dropped first, opened again after.
    fn roll_back(
        &mut self,
        pool: &Pool,
        fs: &mut Option<Arc<Filesystem>>,
        runs: &mut [ThreadRun],
    ) -> Result<(), String> {
        let index = self
            .snaps
            .iter()
            .position(|s| s.status == Status::Live && s.exact())
            .expect("the boundary's snapshot at least");
        let target = self.snaps[index].clone();
        for newer in &mut self.snaps[index + 1..] {
            if newer.status != Status::Destroyed {
                newer.status = Status::Destroying;
            }
        }
        let states: Vec<Tree> = runs
            .iter()
            .zip(&target.lows)
            .map(|(run, &count)| closed(&run.states[count]))
            .collect();
        self.rollback = Some(runs.iter().map(|run| run.started + 1).collect());
        *fs = None;
        let text = format!("rollback to tank/fs@{}", target.name);
        let result = pool
            .rollback(&format!("tank/fs@{}", target.name), true, false)
            .and_then(|()| pool.filesystem("tank/fs"))
            .map_err(|err| err.to_string());
        for (run, state) in runs.iter_mut().zip(states) {
            run.outside_change(
                text.clone(),
                state,
                result.as_ref().map(|_| ()).map_err(Clone::clone),
            );
        }
        *fs = Some(result?);
        for newer in &mut self.snaps[index + 1..] {
            newer.status = Status::Destroyed;
        }
        self.rollback = None;
        self.rollbacks += 1;
        Ok(())
    }

    /// After the cut and import: every snapshot as its status says (see the module doc).
    /// Returns how many were read and checked.
    pub fn check_snapshots(&self, pool: &Pool, runs: &[ThreadRun], label: &str) -> usize {
        let mut checked = 0;
        for snap in &self.snaps {
            let names = [
                format!("tank/fs@{}", snap.name),
                format!("tank/clone@{}", snap.name),
            ];
            let open = names
                .iter()
                .find_map(|name| pool.snapshot_filesystem(name).ok());
            let Some(open) = open else {
                assert!(
                    snap.status != Status::Live,
                    "{label}: tank/fs@{} was reported created and is gone",
                    snap.name
                );
                continue;
            };
            assert!(
                snap.status != Status::Destroyed,
                "{label}: {} was destroyed and is back",
                open.name()
            );
            for (thread, run) in runs.iter().enumerate() {
                let top = run.states[0].top;
                let found = open
                    .with(|fs| Ok(read_tree(fs, top)))
                    .unwrap_or_else(|err| panic!("{label}: {}: {err}", open.name()))
                    .unwrap_or_else(|err| {
                        panic!("{label}: {} thread {thread}: {err}", open.name())
                    });
                let low = snap.lows[thread];
                let high = snap
                    .highs
                    .as_ref()
                    .map_or(run.started, |highs| highs[thread]);
                assert!(
                    (low..=high.min(run.started)).any(|m| run.states[m].shows(&found)),
                    "{label}: {} ({:?}): thread {thread}'s subtree is not its state after any of \
                     operations {low}..={high}",
                    open.name(),
                    snap.status
                );
            }
            checked += 1;
        }
        checked
    }

    /// After the cut and import: `tank/clone` exists only in a cycle, and then holds the
    /// origin's subtrees but its own thread's, which is a prefix of its operations no shorter
    /// than what was durable. Returns whether one was checked.
    pub fn check_clone(&self, pool: &Pool, runs: &[ThreadRun], label: &str) -> bool {
        let exists = pool
            .datasets()
            .expect("datasets")
            .iter()
            .any(|info| info.name == "tank/clone");
        let Some(cycle) = &self.clone else {
            assert!(!exists, "{label}: a clone exists outside a clone cycle");
            return false;
        };
        if !exists {
            return false;
        }
        let origin = self
            .snaps
            .iter()
            .find(|s| s.name == cycle.origin)
            .expect("the origin");
        let clone_fs = pool
            .filesystem("tank/clone")
            .unwrap_or_else(|err| panic!("{label}: open the clone: {err}"));
        for (thread, run) in runs.iter().enumerate() {
            let found = read_tree(&clone_fs, run.states[0].top)
                .unwrap_or_else(|err| panic!("{label}: the clone's thread {thread}: {err}"));
            if thread == cycle.thread {
                assert!(
                    land(&cycle.run, &found).is_some(),
                    "{label}: the clone's subtree of thread {thread} is not its state after any \
                     of its operations {}..={}",
                    cycle.run.fsynced,
                    cycle.run.started
                );
            } else {
                assert!(
                    run.states[origin.lows[thread]].shows(&found),
                    "{label}: the clone's subtree of thread {thread} is not the origin's"
                );
            }
        }
        true
    }

    /// After the cut and import: a rollback cut short left every subtree (`found`, per
    /// thread) before it or every one after it. Returns whether one was checked.
    pub fn check_rollback(
        &self,
        runs: &[ThreadRun],
        found: &[BTreeMap<u64, Seen>],
        label: &str,
    ) -> bool {
        let Some(after) = &self.rollback else {
            return false;
        };
        // A subtree unchanged since the snapshot shows both.
        let (mut before, mut rolled_back) = (Vec::new(), Vec::new());
        for (thread, run) in runs.iter().enumerate() {
            let shows_after = run.states[after[thread]].shows(&found[thread]);
            let shows_before = (run.fsynced.min(after[thread])..after[thread])
                .any(|m| run.states[m].shows(&found[thread]));
            if !shows_after {
                before.push(thread);
            } else if !shows_before {
                rolled_back.push(thread);
            }
        }
        assert!(
            before.is_empty() || rolled_back.is_empty(),
            "{label}: a rollback cut short left threads {rolled_back:?}'s subtrees rolled back \
             and threads {before:?}'s not"
        );
        true
    }
}

/// `tree` with no file open: what a filesystem opened afresh shows of it (open files are
/// closed, their orphans gone).
fn closed(tree: &Tree) -> Tree {
    let mut tree = tree.clone();
    tree.open.clear();
    tree.orphans.clear();
    tree.unsure_create = None;
    tree.last_write = None;
    tree
}
