//! The pool handle and its shared core.
//!
//! Administrative changes (create or destroy a dataset, set a property, export) run as *sync
//! tasks*: closures queued for a txg and executed by the sync thread at the start of that txg's
//! sync, so the dataset directory written in txg t is exactly the directory after t's tasks —
//! never a mix with changes still being made in the open txg. The caller waits for the txg to
//! be durable before returning, as `zfs create` does.

use crate::txg_sync::SpaceLogState;
use crate::{DeviceOpener, EngineError, default_opener};
use cairn_arc::{ArcConfig, ReadCache};
use cairn_dataset::space::SpaceView;
use cairn_dataset::{DatasetDirectory, Volume};
use cairn_format::{PoolState, Uberblock};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::space::SpaceAllocator;
use cairn_pool::txg::{SuspendHandle, TxgConfig, TxgEngine, TxgTiming};
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
    /// Space-log blocks kept before condensing into a checkpoint (tests use tiny values so the
    /// condense path runs often).
    pub space_log_chain_blocks_max: usize,
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
            space_log_chain_blocks_max: crate::txg_sync::SPACE_LOG_CHAIN_BLOCKS_MAX,
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

pub(crate) type SyncTask = Box<dyn FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send>;
type TaskReply = crossbeam_channel::Sender<Result<(), EngineError>>;

pub(crate) struct PoolCore {
    pub(crate) name: String,
    pub(crate) guid: u64,
    /// Holds the vdev tree (`tree()`): the one copy every layer sees, swapped when a vdev is
    /// added or removed.
    pub(crate) io: Arc<BlockIo>,
    pub(crate) space: Arc<Mutex<SpaceAllocator>>,
    pub(crate) mos: ObjectSet,
    pub(crate) directory: Mutex<DatasetDirectory>,
    pub(crate) objsets: Mutex<BTreeMap<String, Arc<ObjectSet>>>,
    /// Intent logs of the open volumes: the sync thread calls their `sync_hook` every txg.
    pub(crate) intent_logs: Mutex<BTreeMap<String, Arc<IntentLog>>>,
    pub(crate) tasks: Mutex<BTreeMap<u64, Vec<(SyncTask, TaskReply)>>>,
    pub(crate) space_log: Mutex<SpaceLogState>,
    pub(crate) uberblock: Mutex<Uberblock>,
    pub(crate) label_state: Mutex<PoolState>,
    pub(crate) config_dirty: AtomicBool,
    pub(crate) space_log_chain_blocks_max: usize,
    /// Reservations as of the last directory change (`refresh_space_view`): read by every
    /// volume write's space check, so it is computed once per change, not per write.
    pub(crate) space_view: Mutex<Arc<SpaceView>>,
    /// Set once the txg engine runs: how the sync thread suspends I/O when writes reach no
    /// device, and `pool clear` resumes it.
    pub(crate) suspend_handle: std::sync::OnceLock<SuspendHandle>,
    /// Release floors of the scans walking the tree now (`ScanGuard`), by txg: a scrub and a
    /// resilver may overlap.
    pub(crate) scan_floors: Mutex<BTreeMap<u64, usize>>,
    /// By leaf guid, the last txg the leaf was seen to take whole (readable at the end of its
    /// sync): where the range of txgs it misses starts if it goes out (`missed.rs`).
    pub(crate) clean_through: Mutex<BTreeMap<u64, u64>>,
}

/// MOS object holding the dataset directory.
pub(crate) const DIRECTORY_OBJECT: u64 = 1;

pub struct Pool {
    pub(crate) core: Arc<PoolCore>,
    pub(crate) txg: Option<Arc<TxgEngine>>,
    /// A pool opened read-only: its volumes' and filesystems' engine (`readers_engine`), which
    /// commits nothing.
    pub(crate) frozen_txg: std::sync::OnceLock<Arc<TxgEngine>>,
    /// Opened without its space log (`PoolOptions::without_space_log`).
    pub(crate) without_space_log: bool,
    pub(crate) volumes: Mutex<BTreeMap<String, Arc<Volume>>>,
    /// Filesystems opened so far (`filesystems.rs`).
    pub(crate) filesystems: Mutex<BTreeMap<String, Arc<cairn_fs::Filesystem>>>,
    pub(crate) closed: AtomicBool,
    /// The running (or last) resilver's thread (`resilver.rs`).
    pub(crate) resilver: Mutex<Option<crate::resilver::ResilverTask>>,
    /// What import had to say (missing devices, a rewind), for the front end to show once.
    pub(crate) notes: Vec<String>,
    pub(crate) read_trace_dir: Option<std::path::PathBuf>,
    /// The SSD tier below the RAM cache (`cache_devices.rs`); none when opened read-only.
    pub(crate) l2: Option<Arc<cairn_l2arc::L2Arc>>,
    /// Cache devices by spec, with the reason of one found missing at import.
    pub(crate) cache_devices: Mutex<Vec<(cairn_device::spec::DeviceSpec, Option<String>)>>,
    /// A scrub's progress while one runs (`scrub.rs`), for watchers other than its caller.
    pub(crate) scrub_running: Mutex<Option<crate::scrub::ScrubProgress>>,
    /// Leaves missing at import whose label's path lies outside where import looked
    /// (`import.rs`): shown by that path, never opened there, never remembered.
    pub(crate) unlocated_leaves: std::collections::BTreeSet<u64>,
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
            filesystems: Mutex::new(BTreeMap::new()),
            closed: AtomicBool::new(false),
            resilver: Mutex::new(None),
            notes: Vec::new(),
            read_trace_dir: options.read_trace_dir.clone(),
            l2,
            cache_devices: Mutex::new(Vec::new()),
            scrub_running: Mutex::new(None),
            unlocated_leaves: Default::default(),
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
        self.clear_errors_with(crate::resilver::ResilverOptions::default())
    }

    ///
    /// A faulted mirror side whose device answers again (reads its labels, flushes) rejoins
    /// too, as a side being resilvered for the txgs it missed (`missed.rs`): written at once,
    /// read and counted as a copy only once the resilver is done.
    pub fn clear_errors_with(
        &self,
        options: crate::resilver::ResilverOptions,
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

    pub fn txg_history(&self) -> Vec<TxgTiming> {
        self.txg
            .as_ref()
            .map(|txg| txg.history())
            .unwrap_or_default()
    }

    /// Runs `task` in the sync of the open txg and waits until that txg is durable.
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

    pub(crate) fn run_sync_task(
        &self,
        task: impl FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static,
    ) -> Result<u64, EngineError> {
        run_sync_task_with(&self.core, self.txg_engine()?, task)
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

/// Runs `task` in the sync of the open txg of `engine` and waits until that txg is durable
/// (`Pool::run_sync_task`, and threads that hold the core rather than the pool).
pub(crate) fn run_sync_task_with(
    core: &PoolCore,
    engine: &TxgEngine,
    task: impl FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static,
) -> Result<u64, EngineError> {
    let (reply, outcome) = crossbeam_channel::bounded(1);
    let txg = {
        let hold = engine.hold();
        // The held txg is open: it cannot have committed, so the task runs in its sync.
        debug_assert!(
            hold.txg() > core.uberblock.lock().txg,
            "a sync task queued for committed txg {}",
            hold.txg()
        );
        core.tasks
            .lock()
            .entry(hold.txg())
            .or_default()
            .push((Box::new(task), reply));
        hold.txg()
    };
    engine.wait_synced(txg).map_err(EngineError::Txg)?;
    match outcome.try_recv() {
        Ok(Ok(())) => Ok(txg),
        Ok(Err(err)) => Err(err),
        Err(_) => Err(EngineError::TaskNotRun { txg }),
    }
}

/// Syncs empty txgs until space freed earlier is reusable (at most the defer window); true if
/// any was pending. Called without a txg hold.
pub(crate) fn reclaim_deferred(core: &PoolCore, engine: &TxgEngine) -> bool {
    if core.space.lock().stats().deferred_bytes == 0 {
        return false;
    }
    for _ in 0..=cairn_pool::space::DEFER_TXGS {
        if engine.sync_now_forced().is_err() || core.space.lock().stats().deferred_bytes == 0 {
            break;
        }
    }
    true
}

/// The roots of one synced txg, all of the same txg, with its blocks kept from reuse: what a
/// scan (scrub, resilver) walks.
pub(crate) struct SyncedTree<'a> {
    pub(crate) uberblock: Uberblock,
    /// Every dataset's object-set root, by name, as the directory of `uberblock.txg` has it.
    pub(crate) roots: Vec<(String, cairn_format::BlockPointer)>,
    /// The space-log chain of `uberblock.txg`.
    pub(crate) chain: Vec<cairn_format::BlockPointer>,
    pub(crate) _guard: ScanGuard<'a>,
}

/// Holds the open txg (it cannot start syncing) and waits out any sync already in flight:
/// while the hold lives, the last synced txg's uberblock, roots and allocator agree. Writers
/// keep going into the open txg meanwhile.
pub(crate) fn freeze_syncs(engine: &TxgEngine) -> Result<cairn_pool::txg::TxgHold, EngineError> {
    let hold = engine.try_hold().map_err(EngineError::Txg)?;
    while engine.last_synced_txg() + 1 < hold.txg() {
        if let Some(suspension) = engine.suspension() {
            return Err(EngineError::Txg(cairn_pool::txg::TxgError::Suspended(
                suspension,
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(hold)
}

impl<'a> SyncedTree<'a> {
    /// Takes the roots of the last synced txg. The directory and the space-log chain in
    /// memory are changed by the txg sync *before* its uberblock is committed (a dataset's
    /// root then names blocks still being written), so a sync running meanwhile would mix
    /// two txgs: the open txg is held (it cannot start syncing) and any sync already in
    /// flight is waited for, just while the roots are read. The guard is taken before the
    /// hold is let go, so no free of a later txg is released before it is in place.
    pub(crate) fn take(
        core: &'a PoolCore,
        engine: Option<&TxgEngine>,
    ) -> Result<SyncedTree<'a>, EngineError> {
        let _freeze = engine.map(freeze_syncs).transpose()?;
        let uberblock = core.uberblock.lock().clone();
        let guard = ScanGuard::hold(core, uberblock.txg);
        let roots = core
            .directory
            .lock()
            .datasets
            .values()
            .filter_map(|record| record.objset_bp().ok().map(|bp| (record.name.clone(), bp)))
            .collect();
        let chain = core.space_log.lock().chain.clone();
        Ok(SyncedTree {
            uberblock,
            roots,
            chain,
            _guard: guard,
        })
    }
}

/// While alive, space freed after `txg` is not reused, so a scan walking the tree of `txg`
/// (scrub, check, resilver) never reads, or repairs over, space that now holds something else.
/// Scans may overlap: the allocator keeps the lowest floor of those alive.
pub(crate) struct ScanGuard<'a> {
    core: &'a PoolCore,
    floor: u64,
}

impl<'a> ScanGuard<'a> {
    pub(crate) fn hold(core: &'a PoolCore, txg: u64) -> ScanGuard<'a> {
        let floor = txg + 1;
        let mut floors = core.scan_floors.lock();
        *floors.entry(floor).or_default() += 1;
        core.space
            .lock()
            .set_release_floor(floors.keys().next().copied());
        ScanGuard { core, floor }
    }
}

impl Drop for ScanGuard<'_> {
    fn drop(&mut self) {
        let mut floors = self.core.scan_floors.lock();
        if let Some(count) = floors.get_mut(&self.floor) {
            *count -= 1;
            if *count == 0 {
                floors.remove(&self.floor);
            }
        }
        self.core
            .space
            .lock()
            .set_release_floor(floors.keys().next().copied());
    }
}
