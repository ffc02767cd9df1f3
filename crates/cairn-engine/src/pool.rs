//! The pool handle and its shared core.
//!
//! Administrative changes (create or destroy a dataset, set a property, export) run as *sync
//! tasks*: closures queued for a txg and executed by the sync thread at the start of that txg's
//! sync, so the dataset directory written in txg t is exactly the directory after t's tasks —
//! never a mix with changes still being made in the open txg. The caller waits for the txg to
//! be durable before returning, as `zfs create` does.

use crate::sync::SpaceLogState;
use crate::{DeviceOpener, EngineError, default_opener};
use cairn_arc::{ArcConfig, ReadCache};
use cairn_dataset::directory::{Provisioning, volume_creation_properties};
use cairn_dataset::properties::format_size;
use cairn_dataset::space::SpaceView;
use cairn_dataset::{
    DatasetDirectory, DatasetError, DatasetKind, DatasetProperties, ScrubRecord, SpaceCheck,
    VOLUME_OBJECT, Volume,
};
use cairn_format::{ObjectType, ObjsetType, PoolState, Uberblock};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::space::SpaceAllocator;
use cairn_pool::txg::{SuspendHandle, TxgConfig, TxgEngine, TxgTiming};
use cairn_pool::vdev::{Health, VdevTree};
use cairn_zil::{IntentLog, ZilConfig};
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
            space_log_chain_blocks_max: crate::sync::SPACE_LOG_CHAIN_BLOCKS_MAX,
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
    txg: Option<Arc<TxgEngine>>,
    /// A pool opened read-only: its volumes' and filesystems' engine (`readers_engine`), which
    /// commits nothing.
    frozen_txg: std::sync::OnceLock<Arc<TxgEngine>>,
    /// Opened without its space log (`PoolOptions::without_space_log`).
    without_space_log: bool,
    volumes: Mutex<BTreeMap<String, Arc<Volume>>>,
    /// Filesystems opened so far (`filesystems.rs`).
    pub(crate) filesystems: Mutex<BTreeMap<String, Arc<cairn_fs::Filesystem>>>,
    closed: AtomicBool,
    /// The running (or last) resilver's thread (`resilver.rs`).
    pub(crate) resilver: Mutex<Option<crate::resilver::ResilverTask>>,
    /// What import had to say (missing devices, a rewind), for the front end to show once.
    pub(crate) notes: Vec<String>,
    read_trace_dir: Option<std::path::PathBuf>,
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

#[derive(Debug, Clone)]
pub struct LeafStatus {
    pub name: String,
    pub health: Health,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub repaired_bytes: u64,
    /// Attached and still being filled by a resilver.
    pub resilvering: bool,
}

#[derive(Debug, Clone)]
pub struct TopStatus {
    pub name: String,
    pub health: Health,
    pub leaves: Vec<LeafStatus>,
    pub is_mirror: bool,
    /// A separate intent-log device.
    pub is_log: bool,
}

#[derive(Debug, Clone)]
pub struct PoolStatus {
    pub name: String,
    pub guid: u64,
    pub health: Health,
    pub txg: u64,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub fragmentation_percent: u64,
    pub tops: Vec<TopStatus>,
    pub last_scrub: Option<ScrubRecord>,
    /// Why the pool refuses writes: I/O suspended until `pool clear` (`suspended_until_clear`),
    /// or no txg is committed any more (a failed sync, a refused free).
    pub suspended: Option<String>,
    /// The suspension ends with `pool clear` once the devices are back (else: re-import).
    pub suspended_until_clear: bool,
    pub resilver: Option<crate::resilver::ResilverStatus>,
    /// Imported read-only (`pool import -o readonly=on`): nothing is written, the space log
    /// was not read (so the space figures count nothing as allocated).
    pub imported_readonly: bool,
}

#[derive(Debug, Clone)]
pub struct DatasetInfo {
    pub name: String,
    pub kind: DatasetKind,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub referenced_bytes: u64,
    pub volsize_bytes: Option<u64>,
    pub properties: Vec<(&'static str, String, String)>,
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
                Arc::new(crate::sync::PoolSyncer(core.clone())),
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

    pub fn status(&self) -> PoolStatus {
        let stats = self.core.space.lock().stats();
        // (Taken alone: `resilver_status` locks the directory too.)
        let last_scrub = self.core.directory.lock().last_scrub.clone();
        let tops = self
            .core
            .tree()
            .tops
            .iter()
            .map(|top| TopStatus {
                name: top.kind_name(),
                health: top.health(),
                is_mirror: top.leaves.len() > 1,
                is_log: top.config.role == cairn_format::VdevRole::Log,
                leaves: top
                    .leaves
                    .iter()
                    .map(|leaf| {
                        let (read, write, checksum) = leaf.errors.snapshot();
                        LeafStatus {
                            name: leaf.spec.to_string(),
                            health: leaf.health(),
                            read_errors: read,
                            write_errors: write,
                            checksum_errors: checksum,
                            repaired_bytes: leaf.errors.repaired_bytes.load(Ordering::Relaxed),
                            resilvering: leaf.is_resilvering(),
                        }
                    })
                    .collect(),
            })
            .collect();
        PoolStatus {
            name: self.core.name.clone(),
            guid: self.core.guid,
            health: self.core.tree().health(),
            txg: self.last_synced_txg(),
            size_bytes: stats.size_bytes,
            allocated_bytes: stats.allocated_bytes,
            free_bytes: stats.free_bytes,
            fragmentation_percent: u64::from(stats.fragmentation_percent),
            tops,
            last_scrub,
            suspended: self.suspended(),
            suspended_until_clear: self.txg.as_ref().is_some_and(|txg| txg.io_suspended()),
            resilver: self.resilver_status(),
            imported_readonly: self.without_space_log,
        }
    }

    /// Datasets with space figures and resolved properties, sorted by name.
    pub fn datasets(&self) -> Result<Vec<DatasetInfo>, EngineError> {
        let available = self.core.space.lock().available_bytes();
        let directory = self.core.directory.lock();
        let view = SpaceView::of(&directory);
        let mut out = Vec::new();
        for record in directory.datasets.values() {
            let space = view.datasets.get(&record.name).copied().unwrap_or_default();
            let properties = directory
                .all_properties(&record.name)?
                .into_iter()
                .map(|(name, value, source)| (name, value, source.describe()))
                .collect::<Vec<_>>();
            let volsize = (record.kind == DatasetKind::Volume)
                .then(|| directory.properties_of(&record.name))
                .transpose()?
                .map(|properties| properties.volsize_bytes);
            out.push(DatasetInfo {
                name: record.name.clone(),
                kind: record.kind,
                used_bytes: space.used_bytes(),
                available_bytes: view.available_bytes(&record.name, available),
                referenced_bytes: space.referenced_bytes,
                volsize_bytes: volsize,
                properties,
            });
        }
        Ok(out)
    }

    /// Every property of `dataset`, resolved and typed: what front ends act on.
    pub fn dataset_properties(&self, dataset: &str) -> Result<DatasetProperties, EngineError> {
        Ok(self.core.directory.lock().properties_of(dataset)?)
    }

    /// Every property of `dataset` as text, with its source (`local`, `default`,
    /// `inherited from …`): what `get` shows.
    pub fn properties(
        &self,
        dataset: &str,
    ) -> Result<Vec<(&'static str, String, String)>, EngineError> {
        let directory = self.core.directory.lock();
        Ok(directory
            .all_properties(dataset)?
            .into_iter()
            .map(|(name, value, source)| (name, value, source.describe()))
            .collect())
    }

    /// Creates a thick volume of `size_bytes` with creation properties, durable on return.
    pub fn create_volume(
        &self,
        name: &str,
        size_bytes: u64,
        requested: &[(String, String)],
    ) -> Result<(), EngineError> {
        self.create_volume_as(name, size_bytes, Provisioning::Thick, requested)
    }

    /// Creates a volume of `size_bytes`, thick or sparse, with creation properties, durable
    /// on return.
    pub fn create_volume_as(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
        requested: &[(String, String)],
    ) -> Result<(), EngineError> {
        let properties = volume_creation_properties(size_bytes, provisioning, requested)?;
        // Validated in open context for a prompt error; the task checks again.
        self.check_new_dataset(name, DatasetKind::Volume)?;
        let mut trial = self.core.directory.lock().clone();
        trial.insert(name, DatasetKind::Volume, 0, properties.clone())?;
        self.core.check_reservations(&trial, Some(name))?;
        let block_bytes = trial.properties_of(name)?.volblocksize_bytes;
        let name = name.to_string();
        self.run_sync_task(move |core, txg| {
            let objset = core.insert_dataset(&name, DatasetKind::Volume, txg, properties)?;
            let capacity_blocks = size_bytes / u64::from(block_bytes);
            objset.create_object(
                txg,
                VOLUME_OBJECT,
                ObjectType::VolumeData,
                block_bytes,
                capacity_blocks,
            );
            core.objsets.lock().insert(name, objset);
            Ok(())
        })?;
        // Properties given at create (primarycache, checksum...) hold from the first write.
        self.apply_properties();
        Ok(())
    }

    /// Fails unless `name` is free, well formed and inside an existing dataset.
    pub(crate) fn check_new_dataset(
        &self,
        name: &str,
        kind: DatasetKind,
    ) -> Result<(), EngineError> {
        let directory = self.core.directory.lock();
        if directory.datasets.contains_key(name) {
            return Err(DatasetError::Exists(name.to_string()).into());
        }
        cairn_dataset::validate_name(name)?;
        let parent = name
            .rsplit_once('/')
            .map(|(parent, _)| parent)
            .ok_or_else(|| DatasetError::InvalidName {
                name: name.into(),
                reason: format!("a {} must be inside a pool (pool/name)", kind.as_str()),
            })?;
        directory.get(parent)?;
        Ok(())
    }

    /// Destroys a dataset (which must have no children), durable on return.
    pub fn destroy_dataset(&self, name: &str) -> Result<(), EngineError> {
        {
            let directory = self.core.directory.lock();
            directory.get(name)?;
            if !name.contains('/') {
                return Err(DatasetError::InvalidName {
                    name: name.into(),
                    reason: "the root dataset goes with the pool (cairn pool destroy)".into(),
                }
                .into());
            }
            if let Some(child) = directory.children(name).next() {
                return Err(DatasetError::InvalidName {
                    name: name.into(),
                    reason: format!("has children ({})", child.name),
                }
                .into());
            }
        }
        if let Some(volume) = self.volumes.lock().remove(name) {
            volume.set_readonly(true);
        }
        self.filesystems.lock().remove(name);
        let intent_log = self.core.intent_logs.lock().remove(name);
        // Everything already written to the dataset reaches disk first, so the task frees a
        // tree that no other sync is still changing.
        self.sync()?;
        let name = name.to_string();
        self.run_sync_task(move |core, txg| {
            let objset = core.objsets.lock().remove(&name);
            if let Some(intent_log) = &intent_log {
                intent_log.release_all(txg);
            }
            if let Some(objset) = objset {
                objset.free_all(txg)?;
            }
            core.directory.lock().datasets.remove(&name);
            Ok(())
        })?;
        // Make the freed space usable (and visible in `pool list`) now, not a few txgs later.
        reclaim_deferred(&self.core, self.txg_engine()?);
        Ok(())
    }

    pub fn set_property(
        &self,
        dataset: &str,
        property: &str,
        value: &str,
    ) -> Result<String, EngineError> {
        // Validate first so errors come back without a txg.
        let canonical = {
            let mut trial = self.core.directory.lock().clone();
            let canonical = trial.set_property(dataset, property, value)?;
            self.core
                .check_reservations(&trial, limits_changed(dataset, property))?;
            canonical
        };
        let (dataset_name, property_name, value_text) =
            (dataset.to_string(), property.to_string(), value.to_string());
        self.run_sync_task(move |core, _| {
            let mut trial = core.directory.lock().clone();
            trial.set_property(&dataset_name, &property_name, &value_text)?;
            core.check_reservations(&trial, limits_changed(&dataset_name, &property_name))?;
            core.directory
                .lock()
                .set_property(&dataset_name, &property_name, &value_text)?;
            Ok(())
        })?;
        self.apply_properties();
        // Inherited values may change below `dataset` too.
        let open: Vec<String> = self.filesystems.lock().keys().cloned().collect();
        for name in open {
            self.refresh_filesystem(&name)?;
        }
        Ok(canonical)
    }

    /// Pushes property values that have an in-memory effect to open objects.
    pub(crate) fn apply_properties(&self) {
        let directory = self.core.directory.lock();
        let resolved = |name: &str| directory.properties_of(name).ok();
        for (name, objset) in self.core.objsets.lock().iter() {
            if let Some(properties) = resolved(name) {
                objset.set_checksum(properties.checksum);
                objset.set_compression(properties.compression);
                objset.set_cache_mode(properties.primarycache);
                objset.set_secondary_cache_mode(properties.secondarycache);
            }
        }
        for (name, volume) in self.volumes.lock().iter() {
            if let Some(properties) = resolved(name) {
                volume.set_readonly(self.is_readonly() || properties.readonly);
                volume.set_sync_mode(properties.sync);
            }
        }
        for (name, log) in self.core.intent_logs.lock().iter() {
            if let Some(properties) = resolved(name) {
                log.set_use_log_devices(properties.logbias.uses_log_devices());
            }
        }
    }

    /// The volume API for a volume dataset. Its data object must match its directory record
    /// (`check_volume_object`): the volume layer relies on both agreeing on the block size.
    pub fn volume(&self, name: &str) -> Result<Arc<Volume>, EngineError> {
        if let Some(volume) = self.volumes.lock().get(name) {
            return Ok(volume.clone());
        }
        let engine = self.readers_engine();
        let directory = self.core.directory.lock();
        let record = directory.get(name)?;
        if record.kind != DatasetKind::Volume {
            return Err(DatasetError::InvalidName {
                name: name.into(),
                reason: "not a volume".into(),
            }
            .into());
        }
        let properties = directory.properties_of(name)?;
        drop(directory);
        let (size, block_size) = (properties.volsize_bytes, properties.volblocksize_bytes);
        let readonly = self.is_readonly() || properties.readonly;
        let sync_mode = properties.sync;
        let lanes = properties.loglanes.0;
        let use_log_devices = properties.logbias.uses_log_devices();
        let objset = self
            .core
            .objsets
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| DatasetError::NoSuchDataset(name.into()))?;
        check_volume_object(name, &objset, block_size)?;
        let space_check = self.space_check(name, &engine, true);
        // A read-only pool's volume has no intent log: it would allocate log blocks.
        let intent_log = (!self.is_readonly()).then(|| {
            let intent_log = Arc::new(IntentLog::new(
                name.to_string(),
                self.core.guid,
                self.core.io.clone(),
                engine.clone(),
                objset.clone(),
                ZilConfig {
                    lanes,
                    ..ZilConfig::default()
                },
            ));
            intent_log.set_use_log_devices(use_log_devices);
            intent_log
        });
        let volume = Volume::new(
            name.to_string(),
            objset,
            engine,
            size,
            block_size,
            readonly,
            space_check,
        );
        let volume = match &intent_log {
            Some(intent_log) => volume.with_intent_log(intent_log.clone()),
            None => volume,
        };
        let volume = match &self.read_trace_dir {
            Some(dir) => volume
                .with_read_trace(dir)
                .map_err(|source| DatasetError::ReadTrace {
                    name: name.to_string(),
                    dir: dir.display().to_string(),
                    source,
                })?,
            None => volume,
        };
        volume.set_sync_mode(sync_mode);
        let volume = Arc::new(volume);
        if let Some(intent_log) = intent_log {
            self.core
                .intent_logs
                .lock()
                .insert(name.to_string(), intent_log);
        }
        self.volumes.lock().insert(name.to_string(), volume.clone());
        Ok(volume)
    }

    /// The space check of dataset `name`'s writes: others' unused reservations are held
    /// back, the dataset's own are its to use; before refusing, dirty data is synced and
    /// deferred frees released, then the check runs again. The pool's dirty bytes are
    /// compared with what the pool leaves the dataset; with `quotas`, the dataset's own
    /// growth (`ObjectSet::space_estimate`) also with what its ancestors' quotas leave (a
    /// volume below a filesystem with a quota; filesystems check their quotas first, with
    /// their own error).
    pub(crate) fn space_check(
        &self,
        name: &str,
        engine: &Arc<TxgEngine>,
        quotas: bool,
    ) -> SpaceCheck {
        let core = self.core.clone();
        let engine_for_check = engine.clone();
        let dataset = name.to_string();
        Arc::new(move |bytes, may_wait| {
            // Others' unused reservations are held back; this volume's own are its to use.
            // Err: the quota that binds, if that is what refuses.
            let fits = || -> Result<(), Option<String>> {
                let dirty = engine_for_check.dirty_bytes();
                let view = core.space_view.lock().clone();
                let available = core.space.lock().available_bytes();
                if dirty + bytes > view.pool_available_bytes(&dataset, available) {
                    return Err(None);
                }
                let referenced = view
                    .datasets
                    .get(&dataset)
                    .map_or(0, |space| space.referenced_bytes);
                if !quotas || view.quota_room(&dataset, referenced).is_none() {
                    return Ok(());
                }
                let objset = core.objsets.lock().get(&dataset).cloned();
                let live = objset
                    .map(|objset| objset.space_estimate())
                    .unwrap_or_default();
                match view.quota_room(&dataset, live.used_bytes + live.unsynced_bytes) {
                    Some(room) if bytes > room.bytes => Err(Some(format!(
                        "{} of {} ({}) leaves {}",
                        room.property,
                        room.dataset,
                        format_size(room.limit_bytes),
                        format_size(room.bytes)
                    ))),
                    _ => Ok(()),
                }
            };
            let refusal = |quota: Option<String>, later: &str| {
                DatasetError::NoSpace(match quota {
                    Some(quota) => format!("{dataset}: no room for {bytes} more bytes: {quota}"),
                    None => format!(
                        "pool '{}' has no room for {bytes} more bytes{later}",
                        core.name
                    ),
                })
            };
            let quota = match fits() {
                Ok(()) => return Ok(()),
                Err(quota) => quota,
            };
            if !may_wait {
                return Err(refusal(quota, " without a txg sync"));
            }
            // The estimate counts every dirty byte as new space, though overwrites free as
            // much as they take, and space freed in the last few txgs is not reusable yet (on
            // an idle pool nothing would sync those txgs). Before refusing, write the dirty
            // data out and drive the txgs that release deferred frees, then look again.
            let _ = engine_for_check.sync_now();
            reclaim_deferred(&core, &engine_for_check);
            fits().map_err(|quota| refusal(quota, ""))
        })
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
fn reclaim_deferred(core: &PoolCore, engine: &TxgEngine) -> bool {
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

/// Intent-log use of one log device (a top-level vdev of role `log`).
#[derive(Debug, Clone)]
pub struct LogDeviceUse {
    pub name: String,
    pub health: Health,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub writes: u64,
    pub write_bytes: u64,
    pub flushes: u64,
    pub write_latency_p50_us: u64,
    pub write_latency_p99_us: u64,
    pub flush_latency_p50_us: u64,
}

/// What a device is to its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRole {
    Data,
    Log,
    Cache,
}

impl DeviceRole {
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceRole::Data => "data",
            DeviceRole::Log => "log",
            DeviceRole::Cache => "cache",
        }
    }
}

/// One device's health, error counts and whole I/O queue statistics (`Pool::device_queues`).
#[derive(Debug, Clone)]
pub struct DeviceQueue {
    pub name: String,
    pub role: DeviceRole,
    pub health: String,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    /// `None`: the device is missing (no queue).
    pub queue: Option<cairn_device::QueueStats>,
}

/// One leaf device's I/O queue counters (`cairn stat io`).
#[derive(Debug, Clone)]
pub struct LeafIo {
    pub name: String,
    pub is_log: bool,
    /// A cache device (the SSD tier), listed after the pool's leaves.
    pub is_cache: bool,
    /// `None`: the device is missing (no queue).
    pub fields: Option<Vec<(&'static str, u64)>>,
}

/// One device's queue statistics, for `pool iostat -l/-w/-q/-r`.
#[derive(Debug, Clone)]
pub struct DeviceIo {
    pub name: String,
    /// `None`: the device is missing (no queue).
    pub queue: Option<cairn_device::QueueStats>,
}

/// A top-level vdev (or a cache device) with its space and its leaves' I/O.
#[derive(Debug, Clone)]
pub struct TopIo {
    /// `mirror-0`, or the leaf's name when the vdev is one device.
    pub name: String,
    pub is_log: bool,
    pub is_cache: bool,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    pub leaves: Vec<DeviceIo>,
}

/// A pool's space and every device's queue statistics (since this process opened it).
#[derive(Debug, Clone)]
pub struct PoolDeviceIo {
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub free_bytes: u64,
    /// Data and log vdevs in tree order, then cache devices (`is_cache`, one leaf each).
    pub tops: Vec<TopIo>,
}

impl Pool {
    /// The space and the per-class queue statistics of every device: `pool iostat`'s device
    /// views (`-l`, `-w`, `-q`, `-r`).
    pub fn device_io(&self) -> PoolDeviceIo {
        let stats = self.core.space.lock().stats();
        let mut tops: Vec<TopIo> = self
            .core
            .tree()
            .tops
            .iter()
            .map(|top| {
                let space = stats.vdevs.iter().find(|v| v.vdev == top.id());
                TopIo {
                    name: top.kind_name(),
                    is_log: top.config.role == cairn_format::VdevRole::Log,
                    is_cache: false,
                    size_bytes: space.map_or(0, |v| v.size_bytes),
                    allocated_bytes: space.map_or(0, |v| v.allocated_bytes),
                    free_bytes: space.map_or(0, |v| v.free_bytes),
                    leaves: top
                        .leaves
                        .iter()
                        .map(|leaf| DeviceIo {
                            name: leaf.spec.to_string(),
                            queue: leaf.queue().map(|queue| queue.stats()),
                        })
                        .collect(),
                }
            })
            .collect();
        if let Some(tier) = &self.l2 {
            let reports = tier.reports();
            for device in tier.devices() {
                let report = reports.iter().find(|report| report.name == device.name);
                let size_bytes = report.map_or(0, |report| report.size_bytes);
                let allocated_bytes = report.map_or(0, |report| report.alloc_bytes);
                tops.push(TopIo {
                    name: device.name.clone(),
                    is_log: false,
                    is_cache: true,
                    size_bytes,
                    allocated_bytes,
                    free_bytes: size_bytes.saturating_sub(allocated_bytes),
                    leaves: vec![DeviceIo {
                        name: device.name.clone(),
                        queue: Some(device.queue_stats()),
                    }],
                });
            }
        }
        PoolDeviceIo {
            size_bytes: stats.size_bytes,
            allocated_bytes: stats.allocated_bytes,
            free_bytes: stats.free_bytes,
            tops,
        }
    }

    /// The pipeline's counters and every leaf's queue counters, then every cache device's
    /// (since this process opened the pool).
    pub fn io_stats(&self) -> (Vec<(&'static str, u64)>, Vec<LeafIo>) {
        let tree = self.core.io.tree();
        let leaves = tree
            .tops
            .iter()
            .flat_map(|top| {
                let is_log = top.config.role == cairn_format::VdevRole::Log;
                top.leaves.iter().map(move |leaf| LeafIo {
                    name: leaf.spec.to_string(),
                    is_log,
                    is_cache: false,
                    fields: leaf.queue().map(|queue| queue.stats().fields()),
                })
            })
            .chain(
                self.l2
                    .iter()
                    .flat_map(|tier| tier.devices())
                    .map(|device| LeafIo {
                        name: device.name.clone(),
                        is_log: false,
                        is_cache: true,
                        fields: Some(device.queue_stats().fields()),
                    }),
            )
            .collect();
        (self.core.io.stats.fields(), leaves)
    }

    /// Every device's I/O queue, whole (latency histograms included): the pool's leaves in
    /// tree order, then its cache devices. For the analytics; `io_stats` is the flat view.
    pub fn device_queues(&self) -> Vec<DeviceQueue> {
        let tree = self.core.io.tree();
        let mut out: Vec<DeviceQueue> = tree
            .tops
            .iter()
            .flat_map(|top| {
                let role = if top.config.role == cairn_format::VdevRole::Log {
                    DeviceRole::Log
                } else {
                    DeviceRole::Data
                };
                top.leaves.iter().map(move |leaf| {
                    let (read_errors, write_errors, checksum_errors) = leaf.errors.snapshot();
                    DeviceQueue {
                        name: leaf.spec.to_string(),
                        role,
                        health: leaf.health().as_str().to_string(),
                        read_errors,
                        write_errors,
                        checksum_errors,
                        queue: leaf.queue().map(|queue| queue.stats()),
                    }
                })
            })
            .collect();
        if let Some(tier) = &self.l2 {
            let reports = tier.reports();
            for device in tier.devices() {
                let report = reports.iter().find(|r| r.name == device.name);
                out.push(DeviceQueue {
                    name: device.name.clone(),
                    role: DeviceRole::Cache,
                    health: match report.map(|r| r.health) {
                        Some(cairn_l2arc::L2Health::Online) => "ONLINE",
                        Some(cairn_l2arc::L2Health::Faulted) => "FAULTED",
                        None => "UNKNOWN",
                    }
                    .to_string(),
                    read_errors: report.map_or(0, |r| r.read_errors),
                    write_errors: report.map_or(0, |r| r.write_errors),
                    checksum_errors: report.map_or(0, |r| r.checksum_errors),
                    queue: Some(device.queue_stats()),
                });
            }
        }
        out
    }

    /// Latency of every commit of each open volume's and filesystem's intent log, in
    /// microseconds (since this process opened it).
    pub fn intent_log_latency(&self) -> Vec<(String, hdrhistogram::Histogram<u64>)> {
        self.core
            .intent_logs
            .lock()
            .iter()
            .map(|(name, log)| (name.clone(), log.commit_latency_us()))
            .collect()
    }

    /// Counters of every open volume's intent log (since this process opened it).
    pub fn intent_log_stats(&self) -> Vec<(String, cairn_zil::ZilStatsSnapshot)> {
        self.core
            .intent_logs
            .lock()
            .iter()
            .map(|(name, log)| (name.clone(), log.stats_snapshot()))
            .collect()
    }

    /// Use of each separate log device.
    pub fn log_devices(&self) -> Vec<LogDeviceUse> {
        let stats = self.core.space.lock().stats();
        self.core
            .tree()
            .tops
            .iter()
            .filter(|top| top.config.role == cairn_format::VdevRole::Log)
            .map(|top| {
                let space = stats.vdevs.iter().find(|v| v.vdev == top.id());
                let mut device = LogDeviceUse {
                    name: top.kind_name(),
                    health: top.health(),
                    size_bytes: space.map_or(0, |v| v.size_bytes),
                    allocated_bytes: space.map_or(0, |v| v.allocated_bytes),
                    writes: 0,
                    write_bytes: 0,
                    flushes: 0,
                    write_latency_p50_us: 0,
                    write_latency_p99_us: 0,
                    flush_latency_p50_us: 0,
                };
                for queue in top.leaves.iter().filter_map(|leaf| leaf.queue()) {
                    let q = queue.stats();
                    device.writes += q.write_requests;
                    device.write_bytes += q.write_bytes;
                    device.flushes += q.flushes;
                    device.write_latency_p50_us = device
                        .write_latency_p50_us
                        .max(q.write_latency_us.value_at_quantile(0.5));
                    device.write_latency_p99_us = device
                        .write_latency_p99_us
                        .max(q.write_latency_us.value_at_quantile(0.99));
                    device.flush_latency_p50_us = device
                        .flush_latency_p50_us
                        .max(q.flush_latency_us.value_at_quantile(0.5));
                }
                device
            })
            .collect()
    }
}

impl PoolCore {
    /// Recomputes the reservation view after the directory changed (sync, import).
    pub(crate) fn refresh_space_view(&self) {
        let view = SpaceView::of(&self.directory.lock());
        *self.space_view.lock() = Arc::new(view);
    }

    /// Refuses a directory whose reservations the pool could not honour. Takes the space lock
    /// alone, so callers build `trial` without holding the directory lock.
    /// In a sync task of `txg`: records dataset `name` in the directory (its reservations
    /// checked again) and creates its empty object set, which the caller fills and registers.
    pub(crate) fn insert_dataset(
        &self,
        name: &str,
        kind: DatasetKind,
        txg: u64,
        properties: BTreeMap<String, String>,
    ) -> Result<Arc<ObjectSet>, EngineError> {
        let mut trial = self.directory.lock().clone();
        trial.insert(name, kind, txg, properties.clone())?;
        self.check_reservations(&trial, Some(name))?;
        let mut directory = self.directory.lock();
        directory.insert(name, kind, txg, properties)?;
        let checksum = directory.properties_of(name)?.checksum;
        drop(directory);
        let objset_type = match kind {
            DatasetKind::Volume => ObjsetType::Volume,
            DatasetKind::Filesystem => ObjsetType::Filesystem,
        };
        Ok(Arc::new(ObjectSet::create(
            self.mos.cached_io().clone(),
            objset_type,
            checksum,
        )))
    }

    /// Also checks the limits of dataset `limits_of` (a new dataset, or one whose quota or
    /// reservation is being set) against each other and its use.
    pub(crate) fn check_reservations(
        &self,
        trial: &DatasetDirectory,
        limits_of: Option<&str>,
    ) -> Result<(), DatasetError> {
        let available = self.space.lock().available_bytes();
        let view = SpaceView::of(trial);
        if let Some(name) = limits_of {
            view.check_limits(name)?;
        }
        view.check_fits(available)
    }
}

/// The dataset whose limits a change of `property` on `dataset` must be checked for.
fn limits_changed<'a>(dataset: &'a str, property: &str) -> Option<&'a str> {
    cairn_dataset::properties::lookup(property)
        .is_ok_and(|def| def.is_space_limit())
        .then_some(dataset)
}

/// Checks that a volume's data object, as read from disk, is what its directory record says:
/// a volume data object of `volblocksize` blocks. A crafted image could make them disagree,
/// and every later write would then be a block of the wrong size.
fn check_volume_object(name: &str, objset: &ObjectSet, block_size: u32) -> Result<(), EngineError> {
    let damaged = |problem: String| -> EngineError {
        DatasetError::DamagedVolume {
            name: name.to_string(),
            problem,
        }
        .into()
    };
    let dnode = objset
        .dnode(VOLUME_OBJECT)
        .map_err(|err| damaged(format!("cannot be read: {}", crate::error_chain(&err))))?;
    let problem = if dnode.is_free() {
        "does not exist".to_string()
    } else if dnode.object_type != ObjectType::VolumeData {
        format!("has type {:?}", dnode.object_type)
    } else if dnode.data_block_size != block_size {
        format!(
            "has {}-byte blocks, volblocksize is {block_size}",
            dnode.data_block_size
        )
    } else {
        return Ok(());
    };
    Err(damaged(problem))
}
