//! Observability of snapshots: counters of what snapshot commands and background frees did
//! (`cairn stat snapshots`, the Prometheus export), a latency histogram of the time a snapshot
//! command waits from its call until its change is durable, and one event per change
//! (`cairn_metrics::events`, source `snapshots`).
//!
//! Changes are *noted* where they are made — in a sync task or in `sync_snapshots`, in sync
//! context — and *announced* (counted, and recorded as events) only once the txg that carries
//! them has committed (`PoolCore::sync`, after the uberblock): a change that failed, or whose
//! txg never committed, is never counted or announced. A txg whose sync failed before its
//! commit keeps its notes: its changes are in memory and go out with the retried sync.
//!
//! Background frees are followed by the table's numbers (`BackgroundFree`): each destroy or
//! rollback that queues work names it right after queuing (`follow_frees`), and when a
//! number leaves the table its work is done ("freed N bytes of X in T txgs"). Work found
//! unnamed (left by a destroy before this import) is followed from the first txg that sees it.
//!
//! Levels (the pool's `freeing` bytes, the deadlists' totals, the number of snapshots) are not
//! kept here: `Pool::snapshot_stats` (`pool_status.rs`) reads them from the table when asked.
//! This module uses no sibling: the core holds its state, the handle reads it.

use cairn_dataset::frees::BackgroundFree;
use cairn_dataset::snapshots::SnapshotTable;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Source name of the events recorded here.
const EVENT_SOURCE: &str = "snapshots";
/// Highest latency the histogram tracks exactly (one minute); slower commands count as this.
const LATENCY_MAX_US: u64 = 60_000_000;

/// A change made in sync context, announced once its txg commits.
#[derive(Debug, Clone)]
pub(crate) enum SnapshotChange {
    Created {
        snapshot: String,
    },
    Destroyed {
        snapshot: String,
        /// What the destroy frees in all (now and in the background).
        freed_bytes: u64,
    },
    CloneCreated {
        clone: String,
        origin: String,
    },
    Promoted {
        clone: String,
        /// The snapshots that moved to the clone.
        moved: u64,
    },
    RolledBack {
        snapshot: String,
        /// What the old head alone held, freed in the background.
        freeing_bytes: u64,
    },
    DatasetDestroyed {
        dataset: String,
        freeing_bytes: u64,
    },
    /// A background free finished.
    Freed {
        what: String,
        bytes: u64,
        txgs: u64,
    },
    /// One txg's share of background frees.
    FreeWork {
        deadlist_entries_scanned: u64,
        deadlist_blocks_freed: u64,
        /// Dead deadlist parts whose objects went with their last scan.
        deadlist_parts_freed: u64,
        tree_blocks_freed: u64,
    },
}

/// A background free being followed.
#[derive(Debug, Clone)]
struct Followed {
    what: String,
    started_txg: u64,
    bytes: u64,
    /// Other destroys of the same txg whose frees joined this one (`queue_free`).
    joined: u64,
}

/// The pool's snapshot counters (see the module doc).
#[derive(Debug)]
pub(crate) struct SnapshotStats {
    snapshots_created: AtomicU64,
    snapshots_destroyed: AtomicU64,
    clones_created: AtomicU64,
    promotes: AtomicU64,
    rollbacks: AtomicU64,
    datasets_destroyed: AtomicU64,
    deadlist_entries_scanned: AtomicU64,
    deadlist_blocks_freed: AtomicU64,
    deadlist_parts_freed: AtomicU64,
    tree_blocks_freed: AtomicU64,
    background_free_txgs: AtomicU64,
    frees_finished: AtomicU64,
    pub(crate) command_latency_us: Mutex<Histogram<u64>>,
    /// Changes of txgs not committed yet, in the order made.
    noted: Mutex<Vec<SnapshotChange>>,
    followed: Mutex<BTreeMap<BackgroundFree, Followed>>,
}

impl Default for SnapshotStats {
    fn default() -> SnapshotStats {
        SnapshotStats {
            snapshots_created: AtomicU64::new(0),
            snapshots_destroyed: AtomicU64::new(0),
            clones_created: AtomicU64::new(0),
            promotes: AtomicU64::new(0),
            rollbacks: AtomicU64::new(0),
            datasets_destroyed: AtomicU64::new(0),
            deadlist_entries_scanned: AtomicU64::new(0),
            deadlist_blocks_freed: AtomicU64::new(0),
            deadlist_parts_freed: AtomicU64::new(0),
            tree_blocks_freed: AtomicU64::new(0),
            background_free_txgs: AtomicU64::new(0),
            frees_finished: AtomicU64::new(0),
            command_latency_us: Mutex::new(
                Histogram::new_with_bounds(1, LATENCY_MAX_US, 2)
                    .expect("static histogram bounds are valid"),
            ),
            noted: Mutex::new(Vec::new()),
            followed: Mutex::new(BTreeMap::new()),
        }
    }
}

/// A copy of the counters and levels, for display (`cairn stat snapshots`) and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SnapshotStatsSnapshot {
    pub snapshots_created: u64,
    pub snapshots_destroyed: u64,
    pub clones_created: u64,
    pub promotes: u64,
    pub rollbacks: u64,
    pub datasets_destroyed: u64,
    /// Deadlist entries the background frees of snapshot destroys read.
    pub deadlist_entries_scanned: u64,
    /// Blocks those scans freed.
    pub deadlist_blocks_freed: u64,
    /// Deadlist parts left holding nothing live whose MOS objects those scans freed.
    pub deadlist_parts_freed: u64,
    /// Blocks freed from dead trees (destroyed datasets, rolled-back heads).
    pub tree_blocks_freed: u64,
    /// Txgs that did background free work.
    pub background_free_txgs: u64,
    /// Background frees finished (each destroy's or rollback's work, whole).
    pub frees_finished: u64,
    /// Level: bytes destroys left to free (the pool property `freeing`).
    pub freeing_bytes: u64,
    /// Level: snapshots in the pool.
    pub snapshots: u64,
    /// Level: blocks on every deadlist (held by snapshots alone).
    pub deadlist_entries: u64,
    /// Level: their allocated bytes.
    pub deadlist_bytes: u64,
    /// Level: deadlist parts (MOS objects) on every list, and those off their lists waiting
    /// for their last scan.
    pub deadlist_parts: u64,
    pub deadlist_parts_retiring: u64,
    /// Level: the MOS's object number bound (every object in use or freed lies below it); it
    /// grows only when no freed number can be given again.
    pub mos_objects_bound: u64,
    /// Snapshot commands that completed (the histogram's count).
    pub commands: u64,
    pub command_latency_p50_us: u64,
    pub command_latency_p99_us: u64,
    pub command_latency_max_us: u64,
}

impl SnapshotStatsSnapshot {
    /// Every field by name, in declaration order (`stat snapshots -H`, Prometheus).
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("snapshots_created", self.snapshots_created),
            ("snapshots_destroyed", self.snapshots_destroyed),
            ("clones_created", self.clones_created),
            ("promotes", self.promotes),
            ("rollbacks", self.rollbacks),
            ("datasets_destroyed", self.datasets_destroyed),
            ("deadlist_entries_scanned", self.deadlist_entries_scanned),
            ("deadlist_blocks_freed", self.deadlist_blocks_freed),
            ("deadlist_parts_freed", self.deadlist_parts_freed),
            ("tree_blocks_freed", self.tree_blocks_freed),
            ("background_free_txgs", self.background_free_txgs),
            ("frees_finished", self.frees_finished),
            ("freeing_bytes", self.freeing_bytes),
            ("snapshots", self.snapshots),
            ("deadlist_entries", self.deadlist_entries),
            ("deadlist_bytes", self.deadlist_bytes),
            ("deadlist_parts", self.deadlist_parts),
            ("deadlist_parts_retiring", self.deadlist_parts_retiring),
            ("mos_objects_bound", self.mos_objects_bound),
            ("commands", self.commands),
            ("command_latency_p50_us", self.command_latency_p50_us),
            ("command_latency_p99_us", self.command_latency_p99_us),
            ("command_latency_max_us", self.command_latency_max_us),
        ]
    }

    /// Whether field `name` is a level (a gauge), not a counter.
    pub fn is_level(name: &str) -> bool {
        matches!(
            name,
            "freeing_bytes"
                | "snapshots"
                | "deadlist_entries"
                | "deadlist_bytes"
                | "deadlist_parts"
                | "deadlist_parts_retiring"
                | "mos_objects_bound"
        ) || name.starts_with("command_latency_")
    }
}

impl SnapshotStats {
    /// Notes a change made in the txg being synced (announced once it commits).
    pub(crate) fn note(&self, change: SnapshotChange) {
        self.noted.lock().push(change);
    }

    /// Follows background free `id` of `bytes` as `what`, started in `txg`; a free already
    /// followed from this txg takes on `bytes` more (the destroys of one txg share one).
    pub(crate) fn follow_free(&self, id: BackgroundFree, bytes: u64, txg: u64, what: &str) {
        self.followed
            .lock()
            .entry(id)
            .and_modify(|free| {
                if free.started_txg == txg {
                    free.bytes += bytes;
                    free.joined += 1;
                }
            })
            .or_insert_with(|| Followed {
                what: what.to_string(),
                started_txg: txg,
                bytes,
                joined: 0,
            });
    }

    /// Follows every background free of `table` not followed yet as `what`, started in
    /// `txg`: called right after a change queued one.
    pub(crate) fn follow_frees(&self, table: &SnapshotTable, txg: u64, what: &str) {
        let mut followed = self.followed.lock();
        for (id, bytes) in table.background_frees() {
            followed.entry(id).or_insert_with(|| Followed {
                what: what.to_string(),
                started_txg: txg,
                bytes,
                joined: 0,
            });
        }
    }

    /// After txg `txg`'s share of background frees: notes the frees that left the table.
    pub(crate) fn frees_done(&self, table: &SnapshotTable, txg: u64) {
        let left: std::collections::BTreeSet<BackgroundFree> = table
            .background_frees()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let mut followed = self.followed.lock();
        let done: Vec<BackgroundFree> = followed
            .keys()
            .filter(|id| !left.contains(id))
            .copied()
            .collect();
        for id in done {
            if let Some(free) = followed.remove(&id) {
                let what = match free.joined {
                    0 => free.what,
                    joined => format!("{} and {joined} more destroyed with it", free.what),
                };
                self.note(SnapshotChange::Freed {
                    what,
                    bytes: free.bytes,
                    txgs: txg + 1 - free.started_txg.min(txg),
                });
            }
        }
    }

    /// Txg `txg` has committed: counts and announces every change noted so far.
    pub(crate) fn committed(&self, txg: u64) {
        let changes = std::mem::take(&mut *self.noted.lock());
        for change in changes {
            self.announce(txg, change);
        }
    }

    fn announce(&self, txg: u64, change: SnapshotChange) {
        let bump = |counter: &AtomicU64, by: u64| {
            counter.fetch_add(by, Ordering::Relaxed);
        };
        let message = match change {
            SnapshotChange::Created { snapshot } => {
                bump(&self.snapshots_created, 1);
                format!("snapshot {snapshot} created in txg {txg}")
            }
            SnapshotChange::Destroyed {
                snapshot,
                freed_bytes,
            } => {
                bump(&self.snapshots_destroyed, 1);
                format!("snapshot {snapshot} destroyed in txg {txg}, freeing {freed_bytes} bytes")
            }
            SnapshotChange::CloneCreated { clone, origin } => {
                bump(&self.clones_created, 1);
                format!("clone {clone} of {origin} created in txg {txg}")
            }
            SnapshotChange::Promoted { clone, moved } => {
                bump(&self.promotes, 1);
                format!("clone {clone} promoted in txg {txg}: {moved} snapshots moved to it")
            }
            SnapshotChange::RolledBack {
                snapshot,
                freeing_bytes,
            } => {
                bump(&self.rollbacks, 1);
                format!(
                    "rolled back to {snapshot} in txg {txg}, freeing {freeing_bytes} bytes in the background"
                )
            }
            SnapshotChange::DatasetDestroyed {
                dataset,
                freeing_bytes,
            } => {
                bump(&self.datasets_destroyed, 1);
                format!(
                    "dataset {dataset} destroyed in txg {txg}, freeing {freeing_bytes} bytes in the background"
                )
            }
            SnapshotChange::Freed { what, bytes, txgs } => {
                bump(&self.frees_finished, 1);
                format!("freed {bytes} bytes of {what} in {txgs} txgs (done in txg {txg})")
            }
            SnapshotChange::FreeWork {
                deadlist_entries_scanned,
                deadlist_blocks_freed,
                deadlist_parts_freed,
                tree_blocks_freed,
            } => {
                bump(&self.background_free_txgs, 1);
                bump(&self.deadlist_entries_scanned, deadlist_entries_scanned);
                bump(&self.deadlist_blocks_freed, deadlist_blocks_freed);
                bump(&self.deadlist_parts_freed, deadlist_parts_freed);
                bump(&self.tree_blocks_freed, tree_blocks_freed);
                return;
            }
        };
        cairn_metrics::events::record(EVENT_SOURCE, message);
    }

    /// Records a snapshot command that became durable, `started` at its call.
    pub(crate) fn command_done(&self, started: Instant) {
        let us = u64::try_from(started.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .clamp(1, LATENCY_MAX_US);
        self.command_latency_us.lock().saturating_record(us);
    }

    /// The counters and the latency percentiles (the levels are the caller's to fill).
    pub(crate) fn copy(&self) -> SnapshotStatsSnapshot {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let latency = self.command_latency_us.lock();
        let quantile = |q: f64| {
            if latency.is_empty() {
                0
            } else {
                latency.value_at_quantile(q)
            }
        };
        SnapshotStatsSnapshot {
            snapshots_created: get(&self.snapshots_created),
            snapshots_destroyed: get(&self.snapshots_destroyed),
            clones_created: get(&self.clones_created),
            promotes: get(&self.promotes),
            rollbacks: get(&self.rollbacks),
            datasets_destroyed: get(&self.datasets_destroyed),
            deadlist_entries_scanned: get(&self.deadlist_entries_scanned),
            deadlist_blocks_freed: get(&self.deadlist_blocks_freed),
            deadlist_parts_freed: get(&self.deadlist_parts_freed),
            tree_blocks_freed: get(&self.tree_blocks_freed),
            background_free_txgs: get(&self.background_free_txgs),
            frees_finished: get(&self.frees_finished),
            commands: latency.len(),
            command_latency_p50_us: quantile(0.5),
            command_latency_p99_us: quantile(0.99),
            command_latency_max_us: if latency.is_empty() { 0 } else { latency.max() },
            ..SnapshotStatsSnapshot::default()
        }
    }
}
