//! Pool creation: validate the vdev layout, open (and if asked, create) the devices, size the
//! metaslabs, and commit txg 1 with an empty MOS, the root dataset and a space-log checkpoint.
//!
//! A device that holds anything is refused unless forced, so a typo cannot destroy another pool
//! or a file system: the label of an active or exported pool, a known signature, or non-zero
//! bytes where the labels go (`probe`). Devices of destroyed pools, and of a create cut short
//! before its first uberblock, are free.

use crate::pool::{PoolCore, PoolOptions};
use crate::probe;
use crate::txg_sync::SpaceLogState;
use crate::{DeviceOpener, EngineError, Pool, new_guid};
use cairn_arc::CachedIo;
use cairn_dataset::directory::creation_properties;
use cairn_dataset::{DatasetDirectory, DatasetKind};
use cairn_device::Device;
use cairn_device::spec::DeviceSpec;
use cairn_format::label::{
    DEVICE_SIZE_MIN, TopVdevConfig, TopVdevKind, VdevRole, data_region_size,
};
use cairn_format::{
    ASHIFT_DEFAULT, BlockPointer, ChecksumAlgorithm, FORMAT_VERSION, ObjsetType, PoolState,
    Uberblock,
};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::labels::{best_config, read_uberblocks};
use cairn_pool::space::{SpaceAllocator, SpaceClass, VdevSpace, metaslab_shift_for};
use cairn_pool::vdev::{Health, Leaf, TopVdev, VdevTree};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// One top-level vdev as given on the command line.
#[derive(Debug, Clone)]
pub struct VdevGroup {
    pub mirror: bool,
    /// A separate intent-log device (`log` in the zpool grammar).
    pub log: bool,
    pub devices: Vec<DeviceSpec>,
}

#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Create missing backing files (sparse) of this size.
    pub create_size_bytes: Option<u64>,
    pub ashift: u8,
    /// Reuse devices that hold data or carry another pool's label.
    pub force: bool,
    pub root_properties: Vec<(String, String)>,
    /// Recorded in the pool history by the creating txg itself, so a pool that exists has its
    /// `create` entry and no later sync (which could fail) is needed for it.
    pub history_entry: Option<String>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            create_size_bytes: None,
            ashift: ASHIFT_DEFAULT,
            force: false,
            root_properties: Vec::new(),
            history_entry: None,
        }
    }
}

pub(crate) fn create_error(message: impl Into<String>) -> EngineError {
    EngineError::Create(message.into())
}

fn validate_layout(name: &str, groups: &[VdevGroup]) -> Result<(), EngineError> {
    cairn_dataset::validate_name(name)?;
    if name.contains('/') {
        return Err(create_error(format!(
            "pool name '{name}' may not contain '/'"
        )));
    }
    if groups.iter().all(|group| group.log) {
        return Err(create_error(
            "no data devices given (log devices hold only the intent log)",
        ));
    }
    check_groups(groups, BTreeSet::new(), |path| {
        create_error(format!("{} is given twice", path.display()))
    })
}

/// Checks each group's shape (a mirror of two or more devices, a plain vdev of one) and that no
/// device appears twice or is in `seen` already (`taken` words the error).
pub(crate) fn check_groups(
    groups: &[VdevGroup],
    mut seen: BTreeSet<PathBuf>,
    taken: impl Fn(&Path) -> EngineError,
) -> Result<(), EngineError> {
    for group in groups {
        if group.mirror && group.devices.len() < 2 {
            return Err(create_error("a mirror needs at least two devices"));
        }
        if !group.mirror && group.devices.len() != 1 {
            return Err(create_error("a plain vdev is exactly one device"));
        }
        for spec in &group.devices {
            if !seen.insert(spec.path.clone()) {
                return Err(taken(&spec.path));
            }
        }
    }
    Ok(())
}

impl Pool {
    pub fn create(
        name: &str,
        groups: &[VdevGroup],
        create: &CreateOptions,
        options: PoolOptions,
    ) -> Result<Pool, EngineError> {
        validate_layout(name, groups)?;
        if !(cairn_format::ASHIFT_MIN..=cairn_format::ASHIFT_MAX).contains(&create.ashift) {
            return Err(create_error(format!(
                "ashift {} is out of range",
                create.ashift
            )));
        }
        let root_properties =
            creation_properties(DatasetKind::Filesystem, &create.root_properties)?;
        let mut tops = Vec::new();
        for (index, group) in groups.iter().enumerate() {
            tops.push(open_top(index as u32, group, create, &options.opener)?);
        }
        let tree = Arc::new(VdevTree { tops });
        let space = SpaceAllocator::new(&space_layout(&tree))
            .map_err(|err| create_error(format!("space layout: {err}")))?;
        let space = Arc::new(Mutex::new(space));
        let io = Arc::new(BlockIo::new(tree.clone(), space.clone()));
        let cached = Arc::new(CachedIo::new(options.cache(), io.clone()));
        let mut directory = DatasetDirectory::default();
        directory.insert(name, DatasetKind::Filesystem, 1, root_properties)?;
        if let Some(entry) = &create.history_entry {
            directory.record_history(format!("{} {entry}", crate::now_ms()));
        }
        let guid = new_guid();
        let core = PoolCore {
            name: name.to_string(),
            guid,
            io: io.clone(),
            space,
            mos: ObjectSet::create(cached, ObjsetType::Meta, ChecksumAlgorithm::Fletcher4),
            directory: Mutex::new(directory),
            objsets: Mutex::new(BTreeMap::new()),
            intent_logs: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(BTreeMap::new()),
            space_log: Mutex::new(SpaceLogState::default()),
            uberblock: Mutex::new(Uberblock {
                version: FORMAT_VERSION,
                txg: 0,
                pool_guid: guid,
                guid_sum: 0,
                timestamp_ms: 0,
                root_bp: BlockPointer::HOLE,
                space_log_bp: BlockPointer::HOLE,
                space_log_blocks: 0,
                allocated_bytes: 0,
            }),
            label_state: Mutex::new(PoolState::Active),
            config_dirty: AtomicBool::new(true),
            space_log_chain_blocks_max: options.space_log_chain_blocks_max.max(1),
            space_view: Default::default(),
            suspend_handle: Default::default(),
            scan_floors: Mutex::new(BTreeMap::new()),
            clean_through: Mutex::new(BTreeMap::new()),
        };
        let pool = Pool::assemble(core, 0, &options);
        pool.txg_engine()?
            .sync_now_forced()
            .map_err(|err| create_error(crate::error_chain(&err)))?;
        // A mirror side that failed a write or flush of txg 1 was faulted and the txg went on
        // without it; a new pool that is degraded from birth is not what was asked for.
        let failed: Vec<String> = tree_leaves_not_online(&pool);
        if !failed.is_empty() {
            return Err(create_error(format!(
                "{} failed while the pool was being written",
                failed.join(", ")
            )));
        }
        Ok(pool)
    }
}

fn tree_leaves_not_online(pool: &Pool) -> Vec<String> {
    pool.tree()
        .leaves()
        .filter(|leaf| leaf.health() != Health::Online)
        .map(|leaf| leaf.spec.to_string())
        .collect()
}

/// Opens the devices of `group` (creating missing files when asked), checks them, and lays out
/// the top-level vdev `id` they form: for a new pool and for `pool add`.
pub(crate) fn open_top(
    id: u32,
    group: &VdevGroup,
    create: &CreateOptions,
    opener: &DeviceOpener,
) -> Result<TopVdev, EngineError> {
    let mut leaves = Vec::new();
    let region = match open_leaves(group, create, opener, &mut leaves) {
        Ok(region) => region,
        Err(err) => {
            for leaf in &leaves {
                leaf.shutdown();
            }
            return Err(err);
        }
    };
    let metaslab_shift = metaslab_shift_for(region);
    let metaslab_count = region >> metaslab_shift;
    if metaslab_count == 0 {
        for leaf in &leaves {
            leaf.shutdown();
        }
        return Err(create_error("devices are too small for one metaslab"));
    }
    let config = TopVdevConfig {
        id,
        guid: new_guid(),
        kind: if group.mirror {
            TopVdevKind::Mirror
        } else {
            TopVdevKind::Leaf
        },
        role: if group.log {
            VdevRole::Log
        } else {
            VdevRole::Normal
        },
        ashift: create.ashift,
        metaslab_shift,
        metaslab_count,
        children: Vec::new(),
    };
    Ok(TopVdev {
        config,
        leaves,
        data_size_bytes: metaslab_count << metaslab_shift,
    })
}

/// Opens and checks the devices of `group` into `leaves`; returns the smallest data region.
pub(crate) fn open_leaves(
    group: &VdevGroup,
    create: &CreateOptions,
    opener: &DeviceOpener,
    leaves: &mut Vec<Arc<Leaf>>,
) -> Result<u64, EngineError> {
    let mut region = u64::MAX;
    for spec in &group.devices {
        let device = opener(spec, create.create_size_bytes)?;
        let size = device.size_bytes();
        if size < DEVICE_SIZE_MIN {
            return Err(create_error(format!(
                "{spec} is {size} bytes; the minimum device size is {DEVICE_SIZE_MIN} bytes"
            )));
        }
        if !create.force {
            check_free(spec, device.as_ref())?;
        }
        region = region.min(data_region_size(size));
        leaves.push(Leaf::open(new_guid(), spec.clone(), device));
    }
    Ok(region)
}

/// Refuses a device that holds something a user may want: another cairn pool's devices (unless
/// destroyed, or half-created: labels but not one uberblock of that pool, as a create cut short
/// leaves them), a known file system or partition table, or any non-zero byte where the labels
/// go. Reads only.
pub(crate) fn check_free(spec: &DeviceSpec, device: &dyn Device) -> Result<(), EngineError> {
    if let Ok(existing) = best_config(device) {
        let committed = read_uberblocks(device)
            .iter()
            .any(|ub| ub.pool_guid == existing.pool_guid);
        if existing.state == PoolState::Destroyed || !committed {
            return Ok(());
        }
        let state = match existing.state {
            PoolState::Exported => "exported",
            _ => "active",
        };
        return Err(create_error(format!(
            "{spec} belongs to {state} pool '{}'; use -f (--force) to overwrite it",
            existing.pool_name
        )));
    }
    let areas = probe::read_label_areas(device)?;
    match probe::existing_content(&areas) {
        None => Ok(()),
        Some(found) => Err(create_error(format!(
            "{spec} holds {found}; use -f (--force) to overwrite it"
        ))),
    }
}

pub(crate) fn space_layout(tree: &VdevTree) -> Vec<VdevSpace> {
    tree.tops
        .iter()
        .map(|top| VdevSpace {
            class: if top.config.role == VdevRole::Log {
                SpaceClass::Log
            } else {
                SpaceClass::Normal
            },
            vdev: top.id(),
            data_size_bytes: top.data_size_bytes,
            ashift: top.config.ashift,
            metaslab_shift: top.config.metaslab_shift,
        })
        .collect()
}
