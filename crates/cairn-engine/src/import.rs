//! Import: find a pool's devices by their labels, rebuild its vdev tree from the newest config,
//! and open the newest uberblock whose tree verifies.
//!
//! Devices are matched by leaf guid, not path, so a pool whose files moved or were renamed still
//! imports from `-d DIR`. A top-level vdev with no present device makes the pool unimportable (a
//! clear error naming what is missing); a mirror with a side missing imports DEGRADED.
//!
//! Import stays where it was told to look. A leaf not found there is never looked for at the
//! path its label remembers: that file may be a stale copy of the side, or a like-named pool's
//! device, and opening it would rejoin it stale and write to it. Such a leaf is shown by its
//! label's path but marked *unlocated* (`Pool::is_unlocated`), so the front end does not
//! remember that path in the pool cache and no later open tries it.
//!
//! Falling back past the newest uberblock is safe for as long as the frees of the newer txgs
//! were still deferred (`DEFER_TXGS`); older fallbacks are refused rather than risk reading
//! reused space.
//!
//! Never a silent rewind. Opening an older txg than the newest one the labels prove committed
//! gives up txgs whose writes were acknowledged, so import refuses it, naming the txg it would
//! open and what would be lost, unless asked (`PoolOptions::rewind`, the CLI's `-F`;
//! `Pool::preview_import` says what it would do). What counts as proof must survive the
//! normal crash, a power cut in the middle of a commit, without a refusal:
//! - an uberblock that verifies: it is written only after its txg's blocks were flushed, so if
//!   its tree does not verify, the damage came later (a torn uberblock fails its checksum and
//!   proves nothing: a header readable inside a torn slot is not trusted);
//! - a config in the second half of the labels (1 and 3): a commit writes it only after its
//!   txg's uberblock was flushed, so its txg was committed even when every copy of that
//!   uberblock has since been damaged. The first half is written before the uberblock and
//!   proves nothing.
//!
//! A rewind that writes first zeroes the rings' uberblocks newer than the txg it opens, since
//! the next txgs reuse their numbers and a later import must not pick one of them again.

use crate::create::space_layout;
use crate::pool::{DIRECTORY_OBJECT, PoolCore, PoolOptions};
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
use cairn_pool::labels::{
    LABEL_HALVES, best_config, discard_uberblocks_after, read_configs, read_uberblocks,
};
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
    /// The newest uberblock of the pool that verifies on any of its devices (whatever its vdev
    /// tree), and a device holding it; `None`: not one, as a `pool create` cut before its
    /// first uberblock leaves them.
    pub newest_uberblock: Option<(Uberblock, PathBuf)>,
    /// The newest txg a config in the second half of some label records, and where: that half
    /// is written only after the txg's uberblock was flushed (`cairn_pool::labels`), so that
    /// txg was committed. `None`: no such config (a create cut short writes only the first
    /// half).
    pub committed_config: Option<(u64, String)>,
}

impl DiscoveredPool {
    /// True if the labels show a pool whose creation never committed its first txg: configs
    /// in the first half of the labels only, and no uberblock anywhere.
    pub fn creation_incomplete(&self) -> bool {
        self.newest_uberblock.is_none() && self.committed_config.is_none()
    }

    /// The newest txg the labels prove committed, and what proves it: a verified uberblock
    /// (written only after its txg's blocks were flushed) or a config of the labels' second
    /// half (written after its txg's uberblock was flushed). A torn uberblock fails its
    /// checksum and proves nothing, so a power cut never raises this past what is durable.
    pub fn committed_txg(&self) -> Option<(u64, String)> {
        let from_uberblock = self.newest_uberblock.as_ref().map(|(ub, path)| {
            (
                ub.txg,
                format!(
                    "the uberblock of txg {} on {} verifies",
                    ub.txg,
                    path.display()
                ),
            )
        });
        [from_uberblock, self.committed_config.clone()]
            .into_iter()
            .flatten()
            .max_by_key(|(txg, _)| *txg)
    }
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
        let entry = pools
            .entry(config.pool_guid)
            .or_insert_with(|| DiscoveredPool {
                config: config.clone(),
                configs: Vec::new(),
                devices: Vec::new(),
                newest_uberblock: None,
                committed_config: None,
            });
        if config.txg > entry.config.txg {
            entry.config = config.clone();
        }
        for (index, other) in read_configs(&device).into_iter().enumerate() {
            let Ok(other) = other else {
                continue;
            };
            if other.pool_guid != config.pool_guid {
                continue;
            }
            let second_half = LABEL_HALVES[1].contains(&index);
            if second_half
                && entry
                    .committed_config
                    .as_ref()
                    .is_none_or(|(txg, _)| other.txg > *txg)
            {
                entry.committed_config = Some((
                    other.txg,
                    format!(
                        "label {index} of {} records txg {}, written once that txg's uberblock \
                         was durable",
                        path.display(),
                        other.txg
                    ),
                ));
            }
            let known = entry
                .configs
                .iter()
                .any(|seen| seen.txg == other.txg && seen.tree.guid_sum() == other.tree.guid_sum());
            if !known {
                entry.configs.push(other);
            }
        }
        if let Some(newest) = read_uberblocks(&device)
            .into_iter()
            .filter(|ub| ub.pool_guid == config.pool_guid)
            .max_by_key(|ub| ub.txg)
            && entry
                .newest_uberblock
                .as_ref()
                .is_none_or(|(seen, _)| newest.txg > seen.txg)
        {
            entry.newest_uberblock = Some((newest, path.clone()));
        }
        let spec = DeviceSpec { path, model: None };
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

/// Whether `path` is one of the places `source` names: a device it lists, or a file directly
/// inside a directory it searches.
fn within(source: &ImportSource, path: &std::path::Path) -> bool {
    let absolute = |path: &std::path::Path| std::path::absolute(path).unwrap_or(path.to_path_buf());
    let in_dir = |dir: &PathBuf| path.parent().map(absolute) == Some(absolute(dir));
    match source {
        ImportSource::Devices(specs) => specs
            .iter()
            .any(|spec| absolute(&spec.path) == absolute(path)),
        ImportSource::Directory(dir) => in_dir(dir),
        ImportSource::Directories(dirs) => dirs.iter().any(in_dir),
    }
}

/// The tree `open_tree` opened, with what it could not find.
struct OpenedTree {
    tree: VdevTree,
    /// Missing leaves, as their labels name them (with a note for the unlocated ones).
    missing: Vec<String>,
    /// Guids of missing leaves whose label's path lies outside `source` (`Pool::is_unlocated`).
    unlocated: std::collections::BTreeSet<u64>,
}

/// Opens every present leaf found in `source`, and nothing else.
fn open_tree(
    found: &DiscoveredPool,
    source: &ImportSource,
    options: &PoolOptions,
) -> Result<OpenedTree, EngineError> {
    let name = &found.config.pool_name;
    found.config.tree.validate().map_err(|err| {
        import_error(
            name,
            format!("the vdev tree in its labels is invalid: {err}"),
        )
    })?;
    let mut tops = Vec::new();
    let mut missing = Vec::new();
    let mut unlocated = std::collections::BTreeSet::new();
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
                    return Err(import_error(
                        name,
                        format!("cannot open {spec}: {}", crate::error_chain(&err)),
                    ));
                }
                None => {
                    if within(source, &spec.path) {
                        missing.push(spec.to_string());
                    } else {
                        missing.push(format!(
                            "{spec} (not found in {source}; not looked for elsewhere)"
                        ));
                        unlocated.insert(child.guid);
                    }
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
    Ok(OpenedTree {
        tree,
        missing,
        unlocated,
    })
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
        let block = SpaceLogBlock::decode(&data)
            .map_err(|err| EngineError::Space(crate::error_chain(&err)))?;
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

/// Why `load` failed, and whether the failure was in the space log (which a read-only import
/// does not need: the error then says so).
struct LoadError {
    error: EngineError,
    in_space_log: bool,
}

impl From<EngineError> for LoadError {
    fn from(error: EngineError) -> LoadError {
        LoadError {
            error,
            in_space_log: false,
        }
    }
}

fn load(tree: &Arc<VdevTree>, ub: &Uberblock, options: &PoolOptions) -> Result<Loaded, LoadError> {
    let space = SpaceAllocator::new(&space_layout(tree))
        .map_err(|err| EngineError::Space(format!("space layout from the label: {err}")))?;
    let space = Arc::new(Mutex::new(space));
    let io = Arc::new(BlockIo::new(tree.clone(), space.clone()));
    if options.readonly {
        io.set_read_only();
    }
    let cached = Arc::new(CachedIo::new(options.cache(), io.clone()));
    check_pointer(&io, &ub.root_bp, ub.txg, || "the MOS root".into())?;
    // A read-only rescue allocates nothing, so it reads no allocator state: a damaged space
    // log does not stand between a user and their data.
    let chain = if options.without_space_log {
        assert!(
            options.readonly,
            "a pool opened without its space log must be read-only"
        );
        Vec::new()
    } else {
        let in_space_log = |error| LoadError {
            error,
            in_space_log: true,
        };
        let (chain, blocks) =
            load_space_log(&io, &ub.space_log_bp, ub.txg).map_err(in_space_log)?;
        space
            .lock()
            .replay(blocks.into_iter().flat_map(|block| block.entries), ub.txg)
            .map_err(|err| in_space_log(EngineError::Space(crate::error_chain(&err))))?;
        chain
    };
    load_objects(&io, &cached, ub)
        .map(|(mos, directory, objsets)| Loaded {
            space,
            io: io.clone(),
            mos,
            directory,
            objsets,
            space_log: SpaceLogState {
                chain,
                condense_next: false,
            },
        })
        .map_err(LoadError::from)
}

/// The MOS, the dataset directory and every dataset's object set, by name.
type Objects = (
    ObjectSet,
    DatasetDirectory,
    BTreeMap<String, Arc<ObjectSet>>,
);

/// The MOS, the dataset directory and every dataset's object set of `ub`.
fn load_objects(
    io: &BlockIo,
    cached: &Arc<CachedIo>,
    ub: &Uberblock,
) -> Result<Objects, EngineError> {
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
        let checksum = directory.properties_of(&record.name)?.checksum;
        let root = record.objset_bp()?;
        check_pointer(io, &root, ub.txg, || {
            format!("the object-set root of dataset '{}'", record.name)
        })?;
        let objset = ObjectSet::open(cached.clone(), root, checksum, ub.txg, record.used_bytes)?;
        objsets.insert(record.name.clone(), Arc::new(objset));
    }
    Ok((mos, directory, objsets))
}

/// What an import gives up when the newest txg the labels prove committed cannot be opened
/// and an older one can: a rewind (ZFS's `zpool import -F`). Import refuses it unless asked
/// (`PoolOptions::rewind`), since the txgs in between were acknowledged to writers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewind {
    pub pool: String,
    /// The newest txg the labels prove committed.
    pub committed_txg: u64,
    /// What proves it (a label's config, a verified uberblock).
    pub evidence: String,
    /// The txg the import opens instead.
    pub to_txg: u64,
    /// When `to_txg` was committed (milliseconds since the Unix epoch; 0 if unknown).
    pub to_timestamp_ms: u64,
    /// When the newest uberblock that verifies was written, if it is newer than `to_txg` (its
    /// tree did not verify); `None` when no newer uberblock can be read.
    pub newest_timestamp_ms: Option<u64>,
    /// Why each newer uberblock that verifies could not be opened.
    pub failures: Vec<String>,
    /// Some newer txg failed in its space log only: a read-only import (which needs no
    /// allocator state) could open it.
    pub space_log_damaged: bool,
}

impl Rewind {
    /// How many committed txgs the rewind gives up.
    pub fn lost_txgs(&self) -> u64 {
        self.committed_txg.saturating_sub(self.to_txg)
    }

    /// "txg 10 (committed 2026-12-02 05:40:17 UTC)".
    fn target(&self) -> String {
        if self.to_timestamp_ms == 0 {
            format!("txg {}", self.to_txg)
        } else {
            format!(
                "txg {} (committed {})",
                self.to_txg,
                cairn_metrics::time::utc_date(self.to_timestamp_ms)
            )
        }
    }

    /// "txgs 11–27 (17 txgs, at least 42 s of changes)".
    fn loss(&self) -> String {
        let lost = self.lost_txgs();
        let txgs = if lost == 1 {
            format!("txg {} (1 txg", self.committed_txg)
        } else {
            format!(
                "txgs {}–{} ({lost} txgs",
                self.to_txg + 1,
                self.committed_txg
            )
        };
        let span = match self.newest_timestamp_ms {
            Some(newest_ms) if self.to_timestamp_ms > 0 && newest_ms > self.to_timestamp_ms => {
                format!(
                    ", at least {} of changes",
                    cairn_metrics::time::rough_duration(newest_ms - self.to_timestamp_ms)
                )
            }
            _ => ", every change made since then".to_string(),
        };
        format!("{txgs}{span})")
    }

    fn why(&self) -> String {
        if self.failures.is_empty() {
            format!(
                "no uberblock newer than txg {} can be read on any device",
                self.to_txg
            )
        } else {
            format!("no newer txg opens ({})", self.failures.join("; "))
        }
    }

    /// Why import refuses, what a rewind would lose, and how to ask for it.
    pub fn refusal(&self) -> String {
        format!(
            "its labels show txg {} was committed ({}), but {}: importing would rewind to {} and \
             lose {}; import with -F to rewind (-F -n shows what it would do, changing nothing){}",
            self.committed_txg,
            self.evidence,
            self.why(),
            self.target(),
            self.loss(),
            if self.space_log_damaged {
                READONLY_HINT
            } else {
                ""
            }
        )
    }

    /// What a rewind would do, for `import -F -n`.
    pub fn preview(&self) -> String {
        format!(
            "pool '{}' would be rewound to {}, losing {}: its labels show txg {} was committed \
             ({}), but {}",
            self.pool,
            self.target(),
            self.loss(),
            self.committed_txg,
            self.evidence,
            self.why()
        )
    }

    /// The note an import that rewound leaves.
    fn note(&self) -> String {
        let mut note = format!(
            "pool '{}' rewound to {} as asked (-F): lost {}",
            self.pool,
            self.target(),
            self.loss()
        );
        if self.lost_txgs() > DEFER_TXGS {
            note.push_str(&format!(
                "; space those txgs freed may have been reused since: run 'cairn pool scrub {}'",
                self.pool
            ));
        }
        note
    }
}

/// Said when a txg fails to open because of its space log: the allocator state is needed only
/// to write.
const READONLY_HINT: &str = "; the space log (allocator state) is damaged: import with -o \
     readonly=on to read the data without it and copy it off";

/// The newest uberblock of the pool's tree whose tree verifies, loaded, and the rewind that
/// opening it means if the labels prove a newer txg committed. Falls back past an uberblock
/// whose tree does not verify for as long as the frees of the newer txgs were still deferred
/// (`DEFER_TXGS`). Reads only.
fn open_newest(
    found: &DiscoveredPool,
    tree: &Arc<VdevTree>,
    options: &PoolOptions,
) -> Result<(Uberblock, Loaded, Option<Rewind>), EngineError> {
    let pool_name = &found.config.pool_name;
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
    let mut failures = Vec::new();
    let mut space_log_failed = false;
    for ub in candidates
        .iter()
        .take_while(|ub| ub.txg + DEFER_TXGS >= newest)
    {
        match load(tree, ub, options) {
            Ok(loaded) => {
                let newest_timestamp_ms = candidates
                    .iter()
                    .chain(found.newest_uberblock.as_ref().map(|(ub, _)| ub))
                    .filter(|newer| newer.txg > ub.txg)
                    .map(|newer| newer.timestamp_ms)
                    .max();
                let rewind = found
                    .committed_txg()
                    .filter(|(committed_txg, _)| *committed_txg > ub.txg)
                    .map(|(committed_txg, evidence)| Rewind {
                        pool: pool_name.clone(),
                        committed_txg,
                        evidence,
                        to_txg: ub.txg,
                        to_timestamp_ms: ub.timestamp_ms,
                        newest_timestamp_ms,
                        failures: failures.clone(),
                        space_log_damaged: space_log_failed,
                    });
                return Ok((ub.clone(), loaded, rewind));
            }
            Err(err) => {
                space_log_failed |= err.in_space_log;
                failures.push(format!(
                    "txg {}: {}",
                    ub.txg,
                    crate::error_chain(&err.error)
                ));
            }
        }
    }
    let rescue_hint = if space_log_failed { READONLY_HINT } else { "" };
    Err(import_error(
        pool_name,
        if !failures.is_empty() {
            format!(
                "no uberblock whose tree verifies ({}){rescue_hint}",
                failures.join("; ")
            )
        } else if found.creation_incomplete() {
            "its creation did not complete (no uberblock was written): create it again (pool \
             create reuses these devices without -f)"
                .to_string()
        } else {
            "no valid uberblock found".to_string()
        },
    ))
}

impl Pool {
    /// What `import` with `PoolOptions::rewind` would open, committing nothing: `None` if the
    /// newest txg the labels prove committed opens, else the rewind it would take. An error
    /// if the pool cannot be imported even so.
    pub fn preview_import(
        source: &ImportSource,
        name: &str,
        options: &PoolOptions,
    ) -> Result<Option<Rewind>, EngineError> {
        let mut found = find_pool(source, name)?;
        found.config = committed_config(&found);
        let tree = Arc::new(open_tree(&found, source, options)?.tree);
        let outcome = open_newest(&found, &tree, options).map(|(_, _, rewind)| rewind);
        tree.shutdown();
        outcome
    }

    /// Imports the pool called `name` (or with that guid) from `source`.
    pub fn import(
        source: &ImportSource,
        name: &str,
        options: PoolOptions,
    ) -> Result<Pool, EngineError> {
        let mut found = find_pool(source, name)?;
        found.config = committed_config(&found);
        let pool_name = found.config.pool_name.clone();
        let OpenedTree {
            tree,
            missing,
            unlocated,
        } = open_tree(&found, source, &options)?;
        let tree = Arc::new(tree);
        let mut notes = Vec::new();
        if !missing.is_empty() {
            notes.push(format!(
                "pool '{pool_name}' is DEGRADED: missing {}",
                missing.join(", ")
            ));
        }
        // A side whose uberblocks stop before a complete sibling's missed the txgs after (it
        // failed while the pool went on); which siblings are complete, the directory says.
        // Until then reads may reach a stale copy: each is verified against its pointer, and
        // another copy is read instead.
        let leaf_newest = crate::missed::newest_uberblocks(&tree, found.config.pool_guid);
        let (ub, loaded, rewind) = match open_newest(&found, &tree, &options) {
            Ok(opened) => opened,
            Err(err) => {
                tree.shutdown();
                return Err(err);
            }
        };
        if let Some(rewind) = &rewind {
            if !options.rewind {
                drop(loaded);
                tree.shutdown();
                return Err(import_error(&pool_name, rewind.refusal()));
            }
            if !options.readonly {
                // Before the first commit, which reuses the numbers of the txgs given up.
                if let Err(err) = discard_uberblocks_after(&tree, found.config.pool_guid, ub.txg) {
                    drop(loaded);
                    tree.shutdown();
                    return Err(import_error(
                        &pool_name,
                        format!(
                            "cannot discard the uberblocks of the txgs a rewind gives up: {}",
                            crate::error_chain(&err)
                        ),
                    ));
                }
            }
            notes.push(rewind.note());
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
        let log_missing = tree
            .tops
            .iter()
            .any(|top| top.config.role == VdevRole::Log && top.health() == Health::Unavail);
        let mut pool = Pool::assemble(core, ub.txg, &options);
        pool.unlocated_leaves = unlocated;
        pool.mark_resilvering_leaf();
        let (changed_missed, missed_notes) = pool.settle_missed_at_import(&leaf_newest, ub.txg);
        notes.extend(missed_notes);
        if log_missing && !readonly && !options.ignore_missing_log && pool.has_pending_intent_logs()
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
        if options.without_space_log {
            notes.push(format!(
                "pool '{pool_name}' imported read-only as of txg {}: nothing is written to its \
                 devices, its space log was not read (space figures count nothing as allocated)",
                ub.txg
            ));
            if pool.has_pending_intent_logs() {
                notes.push(format!(
                    "pool '{pool_name}': the intent log was not replayed (read-only): \
                     synchronous writes acknowledged after txg {} are not visible",
                    ub.txg
                ));
            }
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
                .map_err(|err| import_error(&pool_name, crate::error_chain(&err)))?;
            notes.extend(pool.resume_resilver(&changed_missed)?);
        }
        pool.notes = notes;
        pool.find_cache_devices(source, &options);
        Ok(pool)
    }
}
