//! Import: find a pool's devices by their labels, rebuild its vdev tree from the newest config,
//! and open the newest uberblock whose tree verifies.
//!
//! Devices are matched by leaf guid, not path, so a pool whose files moved or were renamed still
//! imports from `-d DIR`. A top-level vdev with no present device makes the pool unimportable (a
//! clear error naming what is missing); a mirror with a side missing imports DEGRADED.
//!
//! Falling back past the newest uberblock is safe for as long as the frees of the newer txgs
//! were still deferred (`DEFER_TXGS`); older fallbacks are refused rather than risk reading
//! reused space.

use crate::create::space_layout;
use crate::pool::{DIRECTORY_OBJECT, PoolCore, PoolOptions, checksum_from_property};
use crate::sync::SpaceLogState;
use crate::{EngineError, Pool};
use cairn_arc::CachedIo;
use cairn_dataset::{DatasetDirectory, DatasetKind};
use cairn_device::DeviceError;
use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::queue::IoClass;
use cairn_device::spec::DeviceSpec;
use cairn_format::label::data_region_size;
use cairn_format::{
    BlockPointer, ChecksumAlgorithm, LabelConfig, PoolState, SpaceLogBlock, SpaceLogKind,
    Uberblock, VdevRole,
};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::labels::{best_config, read_configs, read_uberblocks};
use cairn_pool::space::{DEFER_TXGS, SpaceAllocator};
use cairn_pool::vdev::{Health, Leaf, TopVdev, VdevTree};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Where to look for a pool's devices.
#[derive(Debug, Clone)]
pub enum ImportSource {
    /// Every regular file (and block device) directly inside the directory.
    Directory(PathBuf),
    /// Every regular file and block device directly inside any of these directories: one
    /// search, so a pool whose devices are spread over several directories is found whole.
    Directories(Vec<PathBuf>),
    /// These devices (e.g. remembered from an earlier import).
    Devices(Vec<DeviceSpec>),
}

impl std::fmt::Display for ImportSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImportSource::Directory(dir) => write!(f, "{}", dir.display()),
            ImportSource::Directories(dirs) => {
                let names: Vec<String> = dirs.iter().map(|dir| dir.display().to_string()).collect();
                write!(f, "{}", names.join(", "))
            }
            ImportSource::Devices(specs) => {
                let names: Vec<String> = specs.iter().map(|spec| spec.to_string()).collect();
                write!(f, "{}", names.join(", "))
            }
        }
    }
}

/// A pool found on devices, before import.
#[derive(Debug, Clone)]
pub struct DiscoveredPool {
    /// The newest config found.
    pub config: LabelConfig,
    /// Every distinct valid config found on the pool's devices, newest first (older ones
    /// survive in the second half of the labels while a vdev-tree change is being committed).
    pub configs: Vec<LabelConfig>,
    /// Present devices with their leaf guid.
    pub devices: Vec<(DeviceSpec, u64)>,
}

pub(crate) fn candidate_paths(source: &ImportSource) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = match source {
        ImportSource::Devices(specs) => {
            return specs.iter().map(|spec| spec.path.clone()).collect();
        }
        ImportSource::Directory(dir) => devices_in(dir),
        ImportSource::Directories(dirs) => dirs.iter().flat_map(|dir| devices_in(dir)).collect(),
    };
    paths.sort();
    paths.dedup();
    paths
}

/// The regular files and block devices directly inside `dir` (none if it cannot be read).
fn devices_in(dir: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| {
                    std::fs::metadata(path).is_ok_and(|meta| {
                        use std::os::unix::fs::FileTypeExt;
                        meta.is_file() || meta.file_type().is_block_device()
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the labels of every candidate device (read-only, no lock) and groups them by pool.
pub fn discover_pools(source: &ImportSource) -> Vec<DiscoveredPool> {
    let mut pools: BTreeMap<u64, DiscoveredPool> = BTreeMap::new();
    for path in candidate_paths(source) {
        let options = FileOptions {
            read_only: true,
            ..Default::default()
        };
        let Ok(device) = FileDevice::open(&path, options) else {
            continue;
        };
        let Ok(config) = best_config(&device) else {
            continue;
        };
        let spec = DeviceSpec { path, model: None };
        let entry = pools
            .entry(config.pool_guid)
            .or_insert_with(|| DiscoveredPool {
                config: config.clone(),
                configs: Vec::new(),
                devices: Vec::new(),
            });
        if config.txg > entry.config.txg {
            entry.config = config.clone();
        }
        for other in read_configs(&device).into_iter().flatten() {
            let known = entry
                .configs
                .iter()
                .any(|seen| seen.txg == other.txg && seen.tree.guid_sum() == other.tree.guid_sum());
            if other.pool_guid == config.pool_guid && !known {
                entry.configs.push(other);
            }
        }
        entry.devices.push((spec, config.leaf_guid));
    }
    let mut pools: Vec<DiscoveredPool> = pools.into_values().collect();
    for pool in &mut pools {
        pool.configs
            .sort_by_key(|config| std::cmp::Reverse(config.txg));
    }
    pools
}

/// The config to import with: the one whose vdev tree matches the newest uberblock on the
/// pool's devices (same guid sum, committed with or after the config). A crash while a vdev
/// was being added or removed can leave a new config in some labels with no uberblock of the
/// new tree yet: the old config, still in the other labels, is then the right one. Without any
/// match, the newest config (and import then explains what is wrong).
fn committed_config(found: &DiscoveredPool) -> LabelConfig {
    if found.configs.len() <= 1 {
        return found.config.clone();
    }
    let uberblocks: Vec<Uberblock> = found
        .devices
        .iter()
        .filter_map(|(spec, _)| {
            let options = FileOptions {
                read_only: true,
                ..Default::default()
            };
            FileDevice::open(&spec.path, options).ok()
        })
        .flat_map(|device| read_uberblocks(&device))
        .filter(|ub| ub.pool_guid == found.config.pool_guid)
        .collect();
    found
        .configs
        .iter()
        .filter_map(|config| {
            let guid_sum = config.tree.guid_sum();
            uberblocks
                .iter()
                .filter(|ub| ub.guid_sum == guid_sum && ub.txg >= config.txg)
                .map(|ub| ub.txg)
                .max()
                .map(|newest| ((newest, config.txg), config))
        })
        .max_by_key(|(key, _)| *key)
        .map_or_else(|| found.config.clone(), |(_, config)| config.clone())
}

fn import_error(pool: &str, reason: impl Into<String>) -> EngineError {
    EngineError::Import {
        pool: pool.to_string(),
        reason: reason.into(),
    }
}

/// Finds the pool named `name` (or with that decimal guid) among the discovered ones.
pub(crate) fn find_pool(source: &ImportSource, name: &str) -> Result<DiscoveredPool, EngineError> {
    let mut matches: Vec<DiscoveredPool> = discover_pools(source)
        .into_iter()
        .filter(|pool| pool.config.pool_name == name || pool.config.pool_guid.to_string() == name)
        .filter(|pool| pool.config.state != PoolState::Destroyed)
        .collect();
    match matches.len() {
        0 => Err(import_error(
            name,
            format!("no devices with its label found in {source}"),
        )),
        1 => Ok(matches.remove(0)),
        _ => Err(import_error(
            name,
            format!(
                "several pools have this name (guids {}); import by guid",
                matches
                    .iter()
                    .map(|pool| pool.config.pool_guid.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// Opens every present leaf; returns the tree and the devices that are missing.
fn open_tree(
    found: &DiscoveredPool,
    options: &PoolOptions,
) -> Result<(VdevTree, Vec<String>), EngineError> {
    let name = &found.config.pool_name;
    found.config.tree.validate().map_err(|err| {
        import_error(
            name,
            format!("the vdev tree in its labels is invalid: {err}"),
        )
    })?;
    let mut tops = Vec::new();
    let mut missing = Vec::new();
    // A device smaller than the tree says: refused once every opened leaf can be shut down.
    let mut too_small: Option<String> = None;
    for top in &found.config.tree.tops {
        // Validated above: the data region fits in a u64.
        let data_size_bytes = top.data_size_bytes().unwrap_or(0);
        let mut leaves = Vec::new();
        for child in &top.children {
            let located = found.devices.iter().find(|(_, guid)| *guid == child.guid);
            let spec = DeviceSpec {
                path: located
                    .map_or_else(|| PathBuf::from(&child.path), |(spec, _)| spec.path.clone()),
                model: child.model.clone(),
            };
            let opened: Option<Result<_, DeviceError>> =
                located.map(|_| (options.opener)(&spec, None));
            match opened {
                Some(Ok(device)) => {
                    let holds_bytes = data_region_size(device.size_bytes());
                    if holds_bytes < data_size_bytes && too_small.is_none() {
                        too_small = Some(format!(
                            "vdev {} claims a data region of {data_size_bytes} bytes, more than \
                             {spec} holds ({holds_bytes} bytes)",
                            top.id
                        ));
                    }
                    leaves.push(Leaf::open(child.guid, spec, device));
                }
                Some(Err(err)) => {
                    return Err(import_error(name, format!("cannot open {spec}: {err}")));
                }
                None => {
                    missing.push(spec.to_string());
                    leaves.push(Leaf::missing(child.guid, spec));
                }
            }
        }
        let mut config = top.clone();
        config.children.clear();
        tops.push(TopVdev {
            data_size_bytes,
            config,
            leaves,
        });
    }
    let tree = VdevTree { tops };
    if let Some(reason) = too_small {
        tree.shutdown();
        return Err(import_error(name, reason));
    }
    for top in &tree.tops {
        // A missing log device is judged after loading: it matters only if some dataset's
        // intent log still has records (see `Pool::import`).
        if top.health() == Health::Unavail && top.config.role != VdevRole::Log {
            tree.shutdown();
            return Err(import_error(
                name,
                format!(
                    "vdev {} has no device present (missing: {})",
                    top.config.id,
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok((tree, missing))
}

/// Everything loaded from one uberblock.
struct Loaded {
    space: Arc<Mutex<SpaceAllocator>>,
    io: Arc<BlockIo>,
    mos: ObjectSet,
    directory: DatasetDirectory,
    objsets: BTreeMap<String, Arc<ObjectSet>>,
    space_log: SpaceLogState,
}

/// Checks a pointer read from disk against the pool before following it (`check_pointer`).
fn check_pointer(
    io: &BlockIo,
    bp: &BlockPointer,
    newest_txg: u64,
    what: impl FnOnce() -> String,
) -> Result<(), EngineError> {
    io.check_pointer(bp, newest_txg).map_err(|problem| {
        EngineError::Pipeline(cairn_pipeline::PipelineError::InvalidPointer {
            what: what(),
            problem,
        })
    })
}

fn load_space_log(
    io: &BlockIo,
    head: &BlockPointer,
    newest_txg: u64,
) -> Result<(Vec<BlockPointer>, Vec<SpaceLogBlock>), EngineError> {
    let mut bps = Vec::new();
    let mut blocks = Vec::new();
    let mut next = *head;
    while !next.is_hole() {
        if next.object_type != cairn_format::ObjectType::SpaceLog || bps.len() > 1_000_000 {
            return Err(EngineError::Space("space log chain is malformed".into()));
        }
        check_pointer(io, &next, newest_txg, || {
            format!("space-log block {} from the head", bps.len())
        })?;
        let data = io.read_block(&next, IoClass::SyncRead)?;
        let block =
            SpaceLogBlock::decode(&data).map_err(|err| EngineError::Space(err.to_string()))?;
        if block.txg > newest_txg {
            return Err(EngineError::Space(format!(
                "space-log block {} is of txg {}, after the uberblock's txg {newest_txg}",
                bps.len(),
                block.txg
            )));
        }
        bps.push(next);
        next = block.prev;
        let start = block.kind == SpaceLogKind::CheckpointStart;
        blocks.push(block);
        if start {
            break;
        }
    }
    if blocks
        .last()
        .is_none_or(|block| block.kind != SpaceLogKind::CheckpointStart)
    {
        return Err(EngineError::Space(
            "space log does not begin with a checkpoint".into(),
        ));
    }
    bps.reverse();
    blocks.reverse();
    Ok((bps, blocks))
}

fn load(
    tree: &Arc<VdevTree>,
    ub: &Uberblock,
    options: &PoolOptions,
) -> Result<Loaded, EngineError> {
    let space = SpaceAllocator::new(&space_layout(tree))
        .map_err(|err| EngineError::Space(format!("space layout from the label: {err}")))?;
    let space = Arc::new(Mutex::new(space));
    let io = Arc::new(BlockIo::new(tree.clone(), space.clone()));
    let cached = Arc::new(CachedIo::new(options.cache(), io.clone()));
    check_pointer(&io, &ub.root_bp, ub.txg, || "the MOS root".into())?;
    let (chain, blocks) = load_space_log(&io, &ub.space_log_bp, ub.txg)?;
    space
        .lock()
        .replay(blocks.into_iter().flat_map(|block| block.entries), ub.txg)
        .map_err(|err| EngineError::Space(err.to_string()))?;
    let mos = ObjectSet::open(
        cached.clone(),
        ub.root_bp,
        ChecksumAlgorithm::Fletcher4,
        ub.txg,
        0,
    )?;
    let blob = mos
        .read_blob(DIRECTORY_OBJECT)?
        .ok_or_else(|| EngineError::Space("MOS has no dataset directory".into()))?;
    let directory = DatasetDirectory::decode(&blob)?;
    let mut objsets = BTreeMap::new();
    for record in directory.datasets.values() {
        // The pool's own root dataset has no object set (yet); every other dataset has one.
        if record.kind != DatasetKind::Volume && record.objset_bp.iter().all(|byte| *byte == 0) {
            continue;
        }
        let (checksum, _) = directory.property(&record.name, "checksum")?;
        let root = record.objset_bp()?;
        check_pointer(&io, &root, ub.txg, || {
            format!("the object-set root of dataset '{}'", record.name)
        })?;
        let objset = ObjectSet::open(
            cached.clone(),
            root,
            checksum_from_property(&checksum),
            ub.txg,
            record.used_bytes,
        )?;
        objsets.insert(record.name.clone(), Arc::new(objset));
    }
    Ok(Loaded {
        space,
        io,
        mos,
        directory,
        objsets,
        space_log: SpaceLogState {
            chain,
            condense_next: false,
        },
    })
}

impl Pool {
    /// Imports the pool called `name` (or with that guid) from `source`.
    pub fn import(
        source: &ImportSource,
        name: &str,
        options: PoolOptions,
    ) -> Result<Pool, EngineError> {
        let mut found = find_pool(source, name)?;
        found.config = committed_config(&found);
        let pool_name = found.config.pool_name.clone();
        let (tree, missing) = open_tree(&found, &options)?;
        let tree = Arc::new(tree);
        let mut notes = Vec::new();
        if !missing.is_empty() {
            notes.push(format!(
                "pool '{pool_name}' is DEGRADED: missing {}",
                missing.join(", ")
            ));
        }
        let guid_sum = found.config.tree.guid_sum();
        let mut candidates: Vec<Uberblock> = tree
            .leaves()
            .filter_map(|leaf| leaf.device())
            .flat_map(|device| read_uberblocks(device.as_ref()))
            .filter(|ub| ub.pool_guid == found.config.pool_guid && ub.guid_sum == guid_sum)
            .collect();
        candidates.sort_by_key(|ub| std::cmp::Reverse(ub.txg));
        candidates.dedup_by(|a, b| a.txg == b.txg);
        let newest = candidates.first().map_or(0, |ub| ub.txg);
        // A side whose uberblocks stop before a complete sibling's missed the txgs after (it
        // failed while the pool went on); which siblings are complete, the directory says.
        // Until then reads may reach a stale copy: each is verified against its pointer, and
        // another copy is read instead.
        let leaf_newest = crate::missed::newest_uberblocks(&tree, found.config.pool_guid);
        let mut failures = Vec::new();
        for ub in candidates
            .iter()
            .take_while(|ub| ub.txg + DEFER_TXGS >= newest)
        {
            match load(&tree, ub, &options) {
                Ok(loaded) => {
                    if ub.txg != newest {
                        notes.push(format!(
                            "pool '{pool_name}': txg {newest} is damaged ({}); rewound to txg {}",
                            failures.join("; "),
                            ub.txg
                        ));
                    }
                    for leaf in tree.leaves() {
                        if let Some(record) = loaded.directory.leaf_errors.get(&leaf.guid) {
                            leaf.errors.restore(
                                record.read,
                                record.write,
                                record.checksum,
                                record.repaired_bytes,
                            );
                        }
                    }
                    let core = PoolCore {
                        name: pool_name.clone(),
                        guid: found.config.pool_guid,
                        io: loaded.io,
                        space: loaded.space,
                        mos: loaded.mos,
                        directory: Mutex::new(loaded.directory),
                        objsets: Mutex::new(loaded.objsets),
                        intent_logs: Mutex::new(BTreeMap::new()),
                        tasks: Mutex::new(BTreeMap::new()),
                        space_log: Mutex::new(loaded.space_log),
                        uberblock: Mutex::new(ub.clone()),
                        label_state: Mutex::new(PoolState::Active),
                        config_dirty: AtomicBool::new(!options.readonly),
                        space_log_chain_blocks_max: options.space_log_chain_blocks_max.max(1),
                        space_view: Default::default(),
                        suspend_handle: Default::default(),
                        scan_floors: Mutex::new(BTreeMap::new()),
                        clean_through: Mutex::new(BTreeMap::new()),
                    };
                    let readonly = options.readonly;
                    let log_missing = tree.tops.iter().any(|top| {
                        top.config.role == VdevRole::Log && top.health() == Health::Unavail
                    });
                    let mut pool = Pool::assemble(core, ub.txg, &options);
                    pool.mark_resilvering_leaf();
                    let (changed_missed, missed_notes) =
                        pool.settle_missed_at_import(&leaf_newest, ub.txg);
                    notes.extend(missed_notes);
                    if log_missing
                        && !readonly
                        && !options.ignore_missing_log
                        && pool.has_pending_intent_logs()
                    {
                        let _ = pool.close();
                        return Err(import_error(
                            &pool_name,
                            format!(
                                "log device {} is missing and the intent log is not empty: \
                                 synchronous writes acknowledged since txg {} may exist only \
                                 there and would be lost; import with --ignore-missing-log to \
                                 accept that (the pool then comes back as of txg {})",
                                missing.join(", "),
                                ub.txg,
                                ub.txg
                            ),
                        ));
                    }
                    if log_missing {
                        notes.push(format!(
                            "pool '{pool_name}': log device missing ({}); log blocks go to the \
                             pool's disks",
                            missing.join(", ")
                        ));
                    }
                    if !readonly {
                        match pool.replay_intent_logs(ub.txg, !log_missing) {
                            Ok(replayed) => notes.extend(replayed),
                            Err(err) => {
                                let _ = pool.close();
                                return Err(err);
                            }
                        }
                    }
                    if !readonly {
                        pool.txg_engine()?
                            .sync_now_forced()
                            .map_err(|err| import_error(&pool_name, err.to_string()))?;
                        notes.extend(pool.resume_resilver(&changed_missed)?);
                    }
                    pool.notes = notes;
                    pool.find_cache_devices(source, &options);
                    return Ok(pool);
                }
                Err(err) => failures.push(format!("txg {}: {}", ub.txg, crate::error_chain(&err))),
            }
        }
        tree.shutdown();
        Err(import_error(
            &pool_name,
            if failures.is_empty() {
                "no valid uberblock found".to_string()
            } else {
                format!("no uberblock whose tree verifies ({})", failures.join("; "))
            },
        ))
    }
}
