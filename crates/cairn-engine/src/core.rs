//! The pool's shared core (`PoolCore`): the state that the txg sync, scans (scrub, resilver,
//! check) and the `Pool` handle all work on, and the few mechanisms they share: sync tasks run
//! in a txg's sync (`run_sync_task_with`), freed space made reusable (`reclaim_deferred`), a
//! synced tree held still for a scan (`SyncedTree`, `freeze_syncs`, `ScanGuard`), and the
//! space log's chain (`SpaceLogState`).
//!
//! Administrative changes (create or destroy a dataset, set a property, export) run as *sync
//! tasks*: closures queued for a txg and executed by the sync thread at the start of that txg's
//! sync, so the dataset directory written in txg t is exactly the directory after t's tasks —
//! never a mix with changes still being made in the open txg. The caller waits for the txg to
//! be durable before returning, as `zfs create` does.
//!
//! Layering: this file uses no sibling module. `txg_sync.rs`, `scrub.rs`, `resilver/` and
//! `pool.rs` (the handle) sit above it, so none of them needs another to reach the core.

use crate::EngineError;
use cairn_dataset::properties::LogBias;
use cairn_dataset::snapshots::SnapshotTable;
use cairn_dataset::space::SpaceView;
use cairn_dataset::{DatasetDirectory, DatasetError, WrittenRecords};
use cairn_format::{BlockPointer, PoolState, Uberblock};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::space::SpaceAllocator;
use cairn_pool::txg::{SuspendHandle, TxgEngine};
use cairn_zil::{IntentLog, ZilConfig};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Space-log delta blocks kept before the log is condensed into a checkpoint (default), raised
/// to the checkpoint's own length when that is longer (`SpaceLogState::wants_condense`).
pub(crate) const SPACE_LOG_DELTA_BLOCKS_MAX: usize = 64;
/// Deadlist entries a txg scans for a destroy's background frees (default): bounds the work
/// one sync does, so destroying a large snapshot never stalls the pool (OpenZFS #13064).
pub(crate) const FREE_ENTRIES_PER_TXG: u64 = 8192;
/// Milliseconds of a txg's sync given to background frees (default): a fifth of the default
/// 500 ms sync target, so the txgs of a pool that frees still leave foreground writes most
/// of theirs, on a slow or busy machine as on a fast one.
pub(crate) const FREE_TIME_PER_TXG_MS: u64 = 100;

#[derive(Debug, Default)]
pub(crate) struct SpaceLogState {
    /// Blocks of the current chain, oldest (the checkpoint start) first.
    pub(crate) chain: Vec<BlockPointer>,
    /// How many of `chain`'s first blocks are the checkpoint (the rest are deltas).
    pub(crate) checkpoint_blocks: usize,
    /// Write a checkpoint at the next sync whatever the chain's length: after a vdev left the
    /// pool, so no delta naming it stays in the chain (its id may be given out again).
    pub(crate) condense_next: bool,
}

impl SpaceLogState {
    pub(crate) fn head(&self) -> BlockPointer {
        self.chain.last().copied().unwrap_or(BlockPointer::HOLE)
    }

    /// True when the next sync should write a checkpoint instead of a delta: when asked, when
    /// there is no chain, or once the deltas are at least `delta_blocks_max` and at least as
    /// long as the checkpoint. The second bound keeps condensing's cost (proportional to the
    /// checkpoint: every allocated extent of the pool) amortised over as many blocks of deltas
    /// on a fragmented pool, whose checkpoint alone may be longer than `delta_blocks_max`:
    /// with one bound only, such a pool condensed every few txgs, each time adding 100–170 ms
    /// to a txg of a large destroy. Import replays at most twice the checkpoint, plus one
    /// txg's deltas.
    pub(crate) fn wants_condense(&self, delta_blocks_max: usize) -> bool {
        let delta_blocks = self.chain.len().saturating_sub(self.checkpoint_blocks);
        self.condense_next
            || self.chain.is_empty()
            || delta_blocks >= delta_blocks_max.max(self.checkpoint_blocks)
    }
}

/// A snapshot change a sync task asked for, made by the same txg's sync once the heads have
/// synced (`snapshot_sync.rs`), in the order asked.
#[derive(Debug, Clone)]
pub(crate) enum PendingSnapshot {
    Create {
        dataset: String,
        name: String,
        id: u64,
        /// Its guid: random, or the sender's for a received snapshot.
        guid: u64,
    },
    Destroy {
        dataset: String,
        name: String,
    },
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
    /// What the MOS holds of the directory: the txg sync writes only the records that differ
    /// (`txg_sync.rs`). Lock order: after `directory`.
    pub(crate) directory_written: Mutex<WrittenRecords>,
    /// Every snapshot and deadlist (`snapshot_sync.rs`). Lock order: `directory` first.
    pub(crate) snapshots: Mutex<SnapshotTable>,
    /// Snapshots this txg's sync task queued, taken by the same sync once the heads synced.
    pub(crate) pending_snapshots: Mutex<Vec<PendingSnapshot>>,
    pub(crate) objsets: Mutex<BTreeMap<String, Arc<ObjectSet>>>,
    /// Intent logs of the open volumes: the sync thread calls their `sync_hook` every txg.
    pub(crate) intent_logs: Mutex<BTreeMap<String, Arc<IntentLog>>>,
    pub(crate) tasks: Mutex<BTreeMap<u64, Vec<(SyncTask, TaskReply)>>>,
    pub(crate) space_log: Mutex<SpaceLogState>,
    pub(crate) uberblock: Mutex<Uberblock>,
    pub(crate) label_state: Mutex<PoolState>,
    pub(crate) config_dirty: AtomicBool,
    pub(crate) space_log_delta_blocks_max: usize,
    /// Deadlist entries one txg scans for background frees (`snapshot_sync.rs`).
    pub(crate) free_entries_per_txg: u64,
    /// Milliseconds of a txg's sync given to background frees (`PoolOptions`).
    pub(crate) free_time_per_txg_ms: u64,
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
    /// Snapshot counters, and changes waiting for their txg to commit (`snapshot_stats.rs`).
    pub(crate) snapshot_stats: crate::snapshot_stats::SnapshotStats,
    /// What the MOS cost the txgs synced so far (`Pool::mos_writes`).
    pub(crate) mos_writes: Mutex<MosWrites>,
    /// What background frees cost the txgs that did them, and so how much the next may do
    /// (`free_pacing.rs`). The sync thread alone uses it.
    pub(crate) free_pacing: Mutex<crate::free_pacing::FreePacing>,
    /// The measured sync cost of snapshot commands, per snapshot changed, and what the last
    /// txg spent on commands (`command_pacing.rs`).
    pub(crate) command_pacing: Mutex<crate::command_pacing::CommandPacing>,
    /// MOS object numbers freed, to give again (`record_map::MosObjectNumbers`). The sync
    /// thread alone uses it.
    pub(crate) mos_numbers: Mutex<crate::record_map::MosObjectNumbers>,
    /// The receives under way, by hidden dataset (`receive_resume.rs`).
    pub(crate) receives: Mutex<BTreeMap<String, ReceiveUnderWay>>,
}

/// Key, in a receive's hidden dataset's record, of the resume token of a partial receive
/// (`receive -s`): a name no command can set (see `receive_resume.rs`).
pub(crate) const RESUME_TOKEN_KEY: &str = "%resume_token";

/// A receive under way (`receive_resume.rs`): its hidden dataset is not a leftover, and with
/// `-s` the token each txg's sync stores with the records it describes.
#[derive(Debug, Default)]
pub(crate) struct ReceiveUnderWay {
    /// `-s`: what the receive leaves if cut is kept, with its token.
    pub(crate) resumable: bool,
    /// By txg: the token describing the records applied up to the end of that txg.
    pub(crate) tokens_by_txg: BTreeMap<u64, cairn_format::send_token::ResumeToken>,
}

/// Blocks and bytes (allocated, every copy) the meta object set wrote: in the last txg that
/// synced, and in all since the pool was opened. The directory and the snapshot table are
/// MOS objects, so this is what their records cost a txg.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MosWrites {
    pub last_txg: u64,
    pub last_txg_blocks: u64,
    pub last_txg_bytes: u64,
    pub total_blocks: u64,
    pub total_bytes: u64,
}

/// Every block pointer of the tree rooted at `root_bp` born after `born_after_txg` (0: the
/// whole tree), reading one verified copy of each metadata block on the way; a subtree that
/// cannot be read is left out (the checker reports those, through its own walk).
pub(crate) fn collect_tree(
    io: &BlockIo,
    root_bp: &BlockPointer,
    born_after_txg: u64,
) -> Vec<BlockPointer> {
    struct Collector<'a> {
        io: &'a BlockIo,
        blocks: Vec<BlockPointer>,
    }
    impl cairn_object::TreeVisitor for Collector<'_> {
        fn visit(
            &mut self,
            block: &cairn_object::VisitedBlock,
            need_data: bool,
        ) -> Option<bytes::Bytes> {
            self.blocks.push(block.bp);
            need_data
                .then(|| {
                    self.io
                        .read_block(&block.bp, cairn_device::queue::IoClass::SyncRead)
                        .ok()
                })
                .flatten()
        }
    }
    let mut collector = Collector {
        io,
        blocks: Vec::new(),
    };
    cairn_object::walk_objset_born_after(root_bp, born_after_txg, &mut collector);
    collector.blocks
}

/// The dataset directory: MOS object 1, a record map (`record_map.rs`) of
/// `cairn_dataset::directory_records`.
pub(crate) const DIRECTORY: crate::record_map::RecordMap = crate::record_map::RecordMap {
    object: 1,
    map_type: cairn_format::ObjectType::DatasetDirectory,
    blob_type: cairn_format::ObjectType::DatasetDirectory,
    what: "dataset directory",
};

/// Runs `task` in the sync of the open txg of `engine` and waits until that txg is durable
/// (`Pool::run_sync_task`, and threads that hold the core rather than the pool).
pub(crate) fn run_sync_task_with(
    core: &PoolCore,
    engine: &TxgEngine,
    task: impl FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static,
) -> Result<u64, EngineError> {
    run_sync_task_reserving(core, engine, None, task)
}

/// `run_sync_task_with` for a task whose sync work is expected to take `reserve` (a command
/// on many snapshots, `command_pacing.rs`): the txg that carries it is held to less dirty
/// data, or the task goes to the next txg if the open one already carries too much
/// (`TxgEngine::hold_reserving`). The task stays whole in one txg either way.
pub(crate) fn run_sync_task_reserving(
    core: &PoolCore,
    engine: &TxgEngine,
    reserve: Option<std::time::Duration>,
    task: impl FnOnce(&PoolCore, u64) -> Result<(), EngineError> + Send + 'static,
) -> Result<u64, EngineError> {
    let (reply, outcome) = crossbeam_channel::bounded(1);
    let txg = {
        let hold = match reserve {
            Some(time) => engine.hold_reserving(time).map_err(EngineError::Txg)?,
            None => engine.hold(),
        };
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
    /// Every dataset's and snapshot's object-set root as of `uberblock.txg` (`tree_roots`).
    pub(crate) roots: Vec<TreeRoot>,
    /// The space-log chain of `uberblock.txg`.
    pub(crate) chain: Vec<cairn_format::BlockPointer>,
    pub(crate) _guard: ScanGuard<'a>,
}

/// Holds the open txg (it cannot start syncing) and waits out any sync already in flight:
/// while the hold lives, the last synced txg's uberblock, roots and allocator agree. Writers
/// keep going into the open txg meanwhile.
pub(crate) fn freeze_syncs(engine: &TxgEngine) -> Result<cairn_pool::txg::TxgHold, EngineError> {
    // A pin: reading the synced tree changes nothing, and must not make an idle pool sync.
    let hold = engine.try_pin().map_err(EngineError::Txg)?;
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
        let roots = core.tree_roots();
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

/// An object-set root to walk: a dataset's head or one of its snapshots, by name, with the
/// txg its walk starts after (`walk_objset_born_after`).
#[derive(Debug, Clone)]
pub(crate) struct TreeRoot {
    pub(crate) name: String,
    pub(crate) root_bp: BlockPointer,
    pub(crate) born_after_txg: u64,
}

impl PoolCore {
    /// Every dataset's and snapshot's root as the directory and snapshot table have them
    /// (the last synced txg's, from the sync thread's point of view): each dataset's snapshots
    /// oldest first, each to be walked from its predecessor's txg, then its head from its
    /// newest snapshot's. Walked that way, every block is visited once: a clone's walk starts
    /// after its origin's txg, as its blocks born by then are its origin's.
    pub(crate) fn tree_roots(&self) -> Vec<TreeRoot> {
        let directory = self.directory.lock();
        let snapshots = self.snapshots.lock();
        let mut roots = Vec::new();
        for record in directory.datasets.values() {
            let mut born_after_txg = snapshots.floor_txg(record.id);
            for snapshot in snapshots.snapshots_of(record.id) {
                if let Ok(root_bp) = snapshot.info.objset_bp() {
                    roots.push(TreeRoot {
                        name: format!("{}@{}", record.name, snapshot.info.name),
                        root_bp,
                        born_after_txg,
                    });
                }
                born_after_txg = snapshot.info.created_txg;
            }
            if let Ok(root_bp) = record.objset_bp() {
                roots.push(TreeRoot {
                    name: record.name.clone(),
                    root_bp,
                    born_after_txg,
                });
            }
        }
        roots
    }

    /// The open object set of dataset `name`.
    pub(crate) fn objset(&self, name: &str) -> Result<Arc<ObjectSet>, DatasetError> {
        self.objsets
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| DatasetError::NoSuchDataset(name.into()))
    }

    /// A new intent log for dataset `name` over `objset`, with `lanes` chains, its blocks on
    /// the log devices or not as `logbias` says.
    pub(crate) fn new_intent_log(
        &self,
        name: &str,
        engine: Arc<TxgEngine>,
        objset: Arc<ObjectSet>,
        lanes: usize,
        logbias: LogBias,
    ) -> Arc<IntentLog> {
        // Waiting per-file records mostly share the dirty data's buffers: bounded alike.
        let deferred_bytes_max = engine.config().dirty_bytes_max;
        let intent_log = Arc::new(IntentLog::new(
            name.to_string(),
            self.guid,
            self.io.clone(),
            engine,
            objset,
            ZilConfig {
                lanes,
                deferred_bytes_max,
                ..ZilConfig::default()
            },
        ));
        intent_log.set_use_log_devices(logbias.uses_log_devices());
        intent_log
    }
}
