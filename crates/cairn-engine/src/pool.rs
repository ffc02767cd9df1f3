//! The pool handle (`Pool`): open and close, the txg engine it drives, sync tasks run on its
//! behalf, the pool's notes and history, and the options a pool is opened with. Its shared
//! state is `core.rs`'s `PoolCore`, what the txg sync and the scans work on.

use crate::core::{PoolCore, run_sync_task_reserving, run_sync_task_with};
use crate::{DeviceOpener, EngineError, default_opener};
use cairn_arc::{ArcConfig, ReadCache};
use cairn_dataset::Volume;
use cairn_format::PoolState;
use cairn_pipeline::BlockIo;
use cairn_pool::txg::{TxgConfig, TxgEngine, TxgTiming};
use cairn_pool::vdev::{Health, VdevTree};
use cairn_zil::IntentLog;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub struct PoolOptions {
    pub txg: TxgConfig,
    pub opener: DeviceOpener,
    /// The RAM cache the pool reads through; `None`: the process's (`process_cache`).
    pub arc: Option<Arc<ReadCache>>,
    /// Open for inspection only: no txg engine, nothing is ever written (not even a self-heal
    /// of a bad copy); volumes and filesystems open read-only.
    pub readonly: bool,
    /// Load no allocator state: the space log is not read (`pool import -o readonly=on`, the
    /// rescue of a pool whose space log is damaged; needs `readonly`). Space figures then
    /// count nothing as allocated.
    pub without_space_log: bool,
    /// Space-log delta blocks kept before condensing into a checkpoint, or as many as the
    /// checkpoint has if that is more (tests use tiny values so the condense path runs often).
    pub space_log_delta_blocks_max: usize,
    /// Deadlist entries one txg scans for a destroy's background frees (at least 1).
    pub free_entries_per_txg: u64,
    /// Time one txg's sync spends on background frees (destroys' deadlist scans, dead trees)
    /// before it leaves the rest to the next txg, in milliseconds: what keeps foreground
    /// writes' txgs within the sync target while a large destroy frees (at least one small
    /// step per txg is always made, so frees finish however low it is set).
    pub free_time_per_txg_ms: u64,
    /// Import even if a log device is missing: synchronous writes only it holds are lost and
    /// the pool comes back as of its last synced txg.
    pub ignore_missing_log: bool,
    /// Import even if the newest txg the labels prove committed cannot be opened, at the newest
    /// one that can (ZFS's `zpool import -F`); without it such an import is refused, naming
    /// what a rewind would lose (`import::Rewind`).
    pub rewind: bool,
    /// Every volume opened appends its clients' reads to `DIR/<pool>_<volume>.trace` (a
    /// diagnostic for `bench/record-volume-trace.sh`).
    pub read_trace_dir: Option<std::path::PathBuf>,
    /// The pool's cache devices, as remembered by the front end (import reopens them; one
    /// that is missing leaves the pool ONLINE).
    pub cache_devices: Vec<cairn_device::spec::DeviceSpec>,
    /// How the cache-device tier behaves (segment size, index RAM cap, write budget).
    pub l2: cairn_l2arc::L2Config,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            txg: TxgConfig::default(),
            opener: default_opener(),
            arc: None,
            readonly: false,
            without_space_log: false,
            space_log_delta_blocks_max: crate::core::SPACE_LOG_DELTA_BLOCKS_MAX,
            free_entries_per_txg: crate::core::FREE_ENTRIES_PER_TXG,
            free_time_per_txg_ms: crate::core::FREE_TIME_PER_TXG_MS,
            ignore_missing_log: false,
            rewind: false,
            read_trace_dir: None,
            cache_devices: Vec::new(),
            l2: cairn_l2arc::L2Config::default(),
        }
    }
}

impl PoolOptions {
    pub(crate) fn cache(&self) -> Arc<ReadCache> {
        self.arc.clone().unwrap_or_else(|| process_cache().clone())
    }
}

/// The process's one RAM cache, shared by every pool it opens (as ZFS has one ARC per host):
/// sized for the machine (`ArcConfig::for_this_machine`) and following memory pressure. A
/// server changes its limits with `ReadCache::set_limits` (`--arc-max`).
pub fn process_cache() -> &'static Arc<ReadCache> {
    static CACHE: std::sync::OnceLock<Arc<ReadCache>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        let cache = ReadCache::new(ArcConfig::for_this_machine());
        cache.start_maintenance();
        cache
    })
}

pub struct Pool {
    pub(crate) core: Arc<PoolCore>,
    pub(crate) txg: Option<Arc<TxgEngine>>,
    /// A pool opened read-only: its volumes' and filesystems' engine (`readers_engine`), which
    /// commits nothing.
    pub(crate) frozen_txg: std::sync::OnceLock<Arc<TxgEngine>>,
    /// Opened without its space log (`PoolOptions::without_space_log`).
    pub(crate) without_space_log: bool,
    pub(crate) volumes: Mutex<BTreeMap<String, Arc<Volume>>>,
    /// Volume snapshots open as read-only volumes, held by their users only (a listing of
    /// 10,000 snapshots keeps none of them in memory): destroy refuses one still held.
    pub(crate) snapshot_volumes: Mutex<BTreeMap<String, std::sync::Weak<Volume>>>,
    /// Filesystem snapshots open for browsing, held by their users (mounts) only; a destroy
    /// closes them under their users (`snapshot_fs.rs`).
    pub(crate) snapshot_filesystems: Mutex<crate::snapshot_views::SnapshotViews>,
    /// Filesystems opened so far (`filesystems.rs`).
    pub(crate) filesystems: Mutex<BTreeMap<String, Arc<cairn_fs::Filesystem>>>,
    pub(crate) closed: AtomicBool,
    /// The running (or last) resilver's thread (`resilver.rs`).
    pub(crate) resilver: Mutex<Option<crate::resilver_task::ResilverTask>>,
    /// What import had to say (missing devices, a rewind), for the front end to show once.
    pub(crate) notes: Vec<String>,
    pub(crate) read_trace_dir: Option<std::path::PathBuf>,
    /// The SSD tier below the RAM cache (`cache_devices.rs`); none when opened read-only.
    pub(crate) l2: Option<Arc<cairn_l2arc::L2Arc>>,
    /// Cache devices by spec, with the reason of one found missing at import.
    pub(crate) cache_devices: Mutex<Vec<(cairn_device::spec::DeviceSpec, Option<String>)>>,
    /// A scrub's progress while one runs (`scrub.rs`), for watchers other than its caller.
    pub(crate) scrub_running: Mutex<Option<crate::scrub_progress::ScrubProgress>>,
    /// Leaves missing at import whose label's path lies outside where import looked
    /// (`import.rs`): shown by that path, never opened there, never remembered.
    pub(crate) unlocated_leaves: std::collections::BTreeSet<u64>,
    /// Snapshot digests (hex) computed so far, by snapshot id (`Pool::snapshot_digest`).
    pub(crate) digests: Mutex<BTreeMap<u64, String>>,
}

impl Pool {
    pub(crate) fn assemble(core: PoolCore, last_synced_txg: u64, options: &PoolOptions) -> Pool {
        let core = Arc::new(core);
        core.io.set_synced_txg(last_synced_txg);
        // Every leaf opened holds the opened txg (or has a missed range saying otherwise).
        *core.clean_through.lock() = core
            .tree()
            .leaves()
            .map(|leaf| (leaf.guid, last_synced_txg))
            .collect();
        core.refresh_space_view();
        let txg = (!options.readonly).then(|| {
            TxgEngine::start(
                options.txg.clone(),
                last_synced_txg,
                Arc::new(crate::txg_sync::PoolSyncer(core.clone())),
            )
        });
        if let Some(engine) = &txg {
            let _ = core.suspend_handle.set(engine.suspend_handle());
        }
        let l2 = (!options.readonly).then(|| {
            let tier = Arc::new(cairn_l2arc::L2Arc::new(options.l2.clone()));
            core.mos.cached_io().set_l2(tier.clone());
            tier
        });
        let pool = Pool {
            core,
            txg,
            frozen_txg: std::sync::OnceLock::new(),
            without_space_log: options.without_space_log,
            volumes: Mutex::new(BTreeMap::new()),
            snapshot_volumes: Mutex::new(BTreeMap::new()),
            snapshot_filesystems: Mutex::default(),
            filesystems: Mutex::new(BTreeMap::new()),
            closed: AtomicBool::new(false),
            resilver: Mutex::new(None),
            notes: Vec::new(),
            read_trace_dir: options.read_trace_dir.clone(),
            l2,
            cache_devices: Mutex::new(Vec::new()),
            scrub_running: Mutex::new(None),
            unlocated_leaves: Default::default(),
            digests: Mutex::new(BTreeMap::new()),
        };
        pool.apply_properties();
        pool
    }

    /// The RAM cache this pool reads through.
    pub fn read_cache(&self) -> &Arc<ReadCache> {
        self.core.mos.cached_io().cache()
    }

    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Whether leaf `guid` was missing at import and its label's path lies outside where
    /// import looked: that path is only a name, never a device of this pool to open or to
    /// remember (`import.rs`).
    pub fn is_unlocated(&self, guid: u64) -> bool {
        self.unlocated_leaves.contains(&guid)
    }

    pub fn guid(&self) -> u64 {
        self.core.guid
    }

    pub fn txg_engine(&self) -> Result<&Arc<TxgEngine>, EngineError> {
        self.txg
            .as_ref()
            .ok_or_else(|| EngineError::ReadOnlyPool(self.core.name.clone()))
    }

    /// Changes whenever changes not yet durable may have been lost in this pool (a failed txg
    /// sync, a suspension of its I/O, an intent-log write failure of any of its datasets:
    /// `TxgEngine::durability_epoch`), and never otherwise; a new value per import. A pool
    /// opened read-only, which loses nothing, answers 0.
    pub fn durability_epoch(&self) -> u64 {
        self.txg
            .as_ref()
            .map_or(0, |engine| engine.durability_epoch())
    }

    pub fn io(&self) -> &Arc<BlockIo> {
        &self.core.io
    }

    pub fn tree(&self) -> Arc<VdevTree> {
        self.core.tree()
    }

    pub fn last_synced_txg(&self) -> u64 {
        self.core.uberblock.lock().txg
    }

    /// Warnings from import: missing devices, a rewind past a damaged txg.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Resets every leaf's error counters (`cairn pool clear`), durable on return.
    /// `pool clear`: zeroes the error counters and, if I/O is suspended (a vdev lost every
    /// child), takes the devices as back: their leaves are tried again, the suspended txg is
    /// written, and this returns once it is (or fails if the devices still fail).
    pub fn clear_errors(&self) -> Result<(), EngineError> {
        self.clear_errors_with(crate::resilver_task::ResilverOptions::default())
    }

    ///
    /// A faulted mirror side whose device answers again (reads its labels, flushes) rejoins
    /// too, as a side being resilvered for the txgs it missed (`missed.rs`): written at once,
    /// read and counted as a copy only once the resilver is done.
    pub fn clear_errors_with(
        &self,
        options: crate::resilver_task::ResilverOptions,
    ) -> Result<(), EngineError> {
        let tree = self.core.tree();
        for leaf in tree.leaves() {
            leaf.errors.restore(0, 0, 0, 0);
        }
        let mut returning = Vec::new();
        if let Some(handle) = self.core.suspend_handle.get()
            && handle.io_suspended().is_some()
        {
            let missed: Vec<u64> = self
                .core
                .directory
                .lock()
                .missed_txgs
                .leaves
                .keys()
                .copied()
                .collect();
            for top in tree
                .tops
                .iter()
                .filter(|top| top.health() == Health::Unavail)
            {
                for leaf in &top.leaves {
                    // A side that was out before the others failed lacks what they took
                    // meanwhile: it comes back resilvering, never read for it.
                    if missed.contains(&leaf.guid) && leaf.health() == Health::Faulted {
                        leaf.set_missed(Some((0, u64::MAX)));
                        returning.push(leaf.clone());
                    }
                    leaf.unfault();
                }
            }
            handle.resume();
            self.txg_engine()?
                .sync_now_forced()
                .map_err(EngineError::StillSuspended)?;
        }
        self.run_sync_task(|_, _| Ok(()))?;
        self.bring_back_sides(returning, options)
    }

    /// Why the pool refuses writes (I/O suspended, or a failed sync), if it does.
    pub fn suspended(&self) -> Option<String> {
        self.txg.as_ref().and_then(|txg| txg.suspended())
    }

    /// What the meta object set wrote in the last synced txg and since the pool was opened.
    pub fn mos_writes(&self) -> crate::core::MosWrites {
        *self.core.mos_writes.lock()
    }

    pub fn txg_history(&self) -> Vec<TxgTiming> {
        self.txg
            .as_ref()
            .map(|txg| txg.history())
            .unwrap_or_default()
    }

    /// The txg engine, shared (for threads that outlive a borrow of the pool).
    pub(crate) fn txg_engine_arc(&self) -> Result<Arc<TxgEngine>, EngineError> {
        self.txg_engine().cloned()
    }

    /// True if the pool was opened read-only: nothing is ever written to its devices.
    pub fn is_readonly(&self) -> bool {
        self.txg.is_none()
    }

    /// True if the pool was opened without its space log (a read-only rescue import).
    pub fn without_space_log(&self) -> bool {
        self.without_space_log
    }

    /// The engine volumes and filesystems are built on: the pool's, or for a pool opened
    /// read-only one that commits nothing (`FrozenSyncer`): they open read-only there, so no
    /// writer ever joins one of its txgs.
    pub(crate) fn readers_engine(&self) -> Arc<TxgEngine> {
        if let Some(engine) = &self.txg {
            return engine.clone();
        }
        self.frozen_txg
            .get_or_init(|| {
                let last_synced_txg = self.core.uberblock.lock().txg;
                TxgEngine::start(
                    TxgConfig::default(),
                    last_synced_txg,
                    Arc::new(FrozenSyncer),
                )
            })
            .clone()
    }

    /// Runs `task` in the sync of the open txg and waits until that txg is durable. The
    /// first task of an operation run inside `with_history` also records its history entry.
    pub(crate) fn run_sync_task(
        &self,
        task: impl FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static,
    ) -> Result<u64, EngineError> {
        let engine = self.txg_engine()?;
        run_sync_task_with(
            &self.core,
            engine,
            crate::command_history::carrying_entry(task),
        )
    }

    /// `run_sync_task` for a command that changes `snapshots` snapshots in its txg: the sync
    /// time that is expected to take (`command_pacing.rs`) is reserved on the txg, so the
    /// data that rides with it leaves room for it under the sync target.
    pub(crate) fn run_snapshot_task(
        &self,
        snapshots: usize,
        task: impl FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static,
    ) -> Result<u64, EngineError> {
        let engine = self.txg_engine()?;
        let units = u64::try_from(snapshots).unwrap_or(u64::MAX);
        let reserve = self.core.command_pacing.lock().estimate(units);
        run_sync_task_reserving(
            &self.core,
            engine,
            reserve,
            crate::command_history::carrying_entry(task),
        )
    }

    /// Runs `operation` (a change of this pool made on this thread) with `entry`, a command
    /// line for the pool's history, recorded in the txg of the first sync task the operation
    /// runs, once that task succeeded: the change and its history entry in one txg, durable
    /// together. Returns the operation's outcome and, when no sync task took the entry (the
    /// operation failed first, or changed nothing through a sync task), the entry back for
    /// the caller to record itself (`record_history`).
    pub fn with_history<T, E>(
        &self,
        entry: &str,
        operation: impl FnOnce() -> Result<T, E>,
    ) -> (Result<T, E>, Option<String>) {
        let stamped = format!("{} {entry}", crate::now_ms());
        let (outcome, left) = crate::command_history::with_entry(stamped, operation);
        // Handed back as given: `record_history` stamps it again, with its own time.
        (outcome, left.map(|_| entry.to_string()))
    }

    /// Forces a txg sync of everything dirty; returns the last synced txg.
    pub fn sync(&self) -> Result<u64, EngineError> {
        let engine = self.txg_engine()?;
        engine.sync_now().map_err(EngineError::Txg)
    }

    /// Stops the resilver thread, if any (its progress stays recorded for the next import).
    pub(crate) fn stop_resilver(&self) {
        if let Some(task) = self.resilver.lock().take() {
            task.stop();
        }
    }

    pub fn record_history(&self, entry: String) -> Result<(), EngineError> {
        let stamped = format!("{} {entry}", crate::now_ms());
        self.run_sync_task(move |core, _| {
            core.directory.lock().record_history(stamped);
            Ok(())
        })
        .map(|_| ())
    }

    pub fn history(&self) -> Vec<String> {
        self.core.directory.lock().history.clone()
    }

    /// Stops the engine of a read-only pool's volumes and filesystems, if one was started.
    fn stop_frozen_engine(&self) {
        if let Some(engine) = self.frozen_txg.get() {
            let _ = engine.shutdown();
        }
    }

    /// Syncs, writes the given label state and stops the txg engine and device queues.
    fn shut(&self, state: PoolState) -> Result<(), EngineError> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_resilver();
        // Seal what the cache devices are writing, so the next import finds it.
        if let Some(tier) = &self.l2 {
            tier.shutdown();
        }
        if let Some(engine) = &self.txg {
            self.release_intent_logs(engine)?;
            if *self.core.label_state.lock() != state {
                self.core.config_dirty.store(true, Ordering::SeqCst);
                *self.core.label_state.lock() = state;
                engine.sync_now_forced().map_err(EngineError::Txg)?;
            }
            engine.shutdown().map_err(EngineError::Txg)?;
        }
        self.stop_frozen_engine();
        self.core.tree().shutdown();
        Ok(())
    }

    /// A clean close leaves no intent log behind: once every record is in a synced txg the
    /// log blocks are freed and the chain headers emptied, so a later import has nothing to
    /// replay (and a lost log device then costs nothing).
    fn release_intent_logs(&self, engine: &TxgEngine) -> Result<(), EngineError> {
        let logs: Vec<Arc<IntentLog>> = self.core.intent_logs.lock().values().cloned().collect();
        if !logs.iter().any(|log| log.has_chains()) {
            return Ok(());
        }
        let txg_error = EngineError::Txg;
        engine.sync_now().map_err(txg_error)?;
        {
            let hold = engine.try_hold().map_err(txg_error)?;
            for log in &logs {
                log.release_all(hold.txg());
            }
        }
        engine.sync_now_forced().map_err(txg_error)?;
        Ok(())
    }

    /// Syncs everything and closes the pool, leaving it imported (label state ACTIVE).
    pub fn close(&self) -> Result<(), EngineError> {
        self.shut(PoolState::Active)
    }

    /// Syncs everything, marks the labels EXPORTED and closes the pool.
    pub fn export(&self) -> Result<(), EngineError> {
        self.shut(PoolState::Exported)
    }

    /// Marks the labels DESTROYED and closes the pool; its devices can be reused.
    pub fn destroy(&self) -> Result<(), EngineError> {
        self.shut(PoolState::Destroyed)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if !self.closed.load(Ordering::SeqCst) {
            self.stop_resilver();
            if let Some(tier) = &self.l2 {
                tier.shutdown();
            }
            if let Some(engine) = &self.txg {
                let _ = engine.shutdown();
            }
            self.stop_frozen_engine();
            self.core.tree().shutdown();
        }
    }
}

/// The syncer of a read-only pool's engine (`Pool::readers_engine`): commits nothing. Its
/// volumes and filesystems open read-only and refuse every change before it joins a txg, so
/// the txgs it is asked to sync are empty; nothing reaches a device either way.
struct FrozenSyncer;

impl cairn_pool::txg::TxgSyncer for FrozenSyncer {
    fn sync_txg(&self, _txg: u64) -> Result<(), cairn_pool::txg::SyncError> {
        Ok(())
    }
}
