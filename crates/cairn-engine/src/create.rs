//! Pool creation: validate the vdev layout, open (and if asked, create) the devices, size the
//! metaslabs, and commit txg 1 with an empty MOS, the root dataset and a space-log checkpoint.
//!
//! A device that holds anything is refused unless forced, so a typo cannot destroy another pool
//! or a file system: the label of an active or exported pool, a known signature, or non-zero
//! bytes where the labels go (`vdev_groups::check_free`). Devices of destroyed pools, and of a create cut short
//! before its first uberblock, are free.

use crate::core::PoolCore;
use crate::core::SpaceLogState;
use crate::pool::PoolOptions;
use crate::vdev_groups::{
    CreateOptions, VdevGroup, check_groups, create_error, open_top, space_layout,
};
use crate::{EngineError, Pool, new_guid};
use cairn_arc::CachedIo;
use cairn_dataset::directory::creation_properties;
use cairn_dataset::{DatasetDirectory, DatasetKind};
use cairn_format::{
    BlockPointer, ChecksumAlgorithm, FORMAT_VERSION, ObjsetType, PoolState, Uberblock,
};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::space::SpaceAllocator;
use cairn_pool::vdev::{Health, VdevTree};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

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
            directory_written: Mutex::new(cairn_dataset::WrittenRecords::default()),
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
            space_log_delta_blocks_max: options.space_log_delta_blocks_max.max(1),
            free_entries_per_txg: options.free_entries_per_txg.max(1),
            free_time_per_txg_ms: options.free_time_per_txg_ms,
            space_view: Default::default(),
            suspend_handle: Default::default(),
            snapshots: Mutex::new(Default::default()),
            pending_snapshots: Mutex::new(Vec::new()),
            scan_floors: Mutex::new(BTreeMap::new()),
            clean_through: Mutex::new(BTreeMap::new()),
            snapshot_stats: Default::default(),
            mos_writes: Default::default(),
            free_pacing: Default::default(),
            command_pacing: Default::default(),
            mos_numbers: Default::default(),
            receives: Default::default(),
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
