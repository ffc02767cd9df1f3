//! Loading one uberblock (`load`): the allocator state from its space log, the MOS, the dataset
//! directory and every dataset's object set, each pointer checked against the pool before it is
//! followed.
//!
//! Invariants: reads only; a failure in the space log is marked as such (`LoadError`) so the
//! caller can offer a read-only import, which does not read it. This file uses no sibling;
//! `rewind` (which tries uberblocks in turn) sits above it.

use crate::EngineError;
use crate::core::DIRECTORY;
use crate::core::SpaceLogState;
use crate::pool::PoolOptions;
use crate::snapshot_sync::{load_snapshot_table, refresh_snapshot_bytes};
use crate::vdev_groups::space_layout;
use cairn_arc::CachedIo;
use cairn_dataset::snapshots::SnapshotTable;
use cairn_dataset::{DatasetDirectory, DatasetKind};
use cairn_device::queue::IoClass;
use cairn_format::{BlockPointer, ChecksumAlgorithm, SpaceLogBlock, SpaceLogKind, Uberblock};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::space::SpaceAllocator;
use cairn_pool::vdev::VdevTree;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Everything loaded from one uberblock.
pub(super) struct Loaded {
    pub(super) space: Arc<Mutex<SpaceAllocator>>,
    pub(super) io: Arc<BlockIo>,
    pub(super) mos: ObjectSet,
    pub(super) directory: DatasetDirectory,
    pub(super) snapshots: SnapshotTable,
    pub(super) objsets: BTreeMap<String, Arc<ObjectSet>>,
    pub(super) space_log: SpaceLogState,
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
pub(super) struct LoadError {
    pub(super) error: EngineError,
    pub(super) in_space_log: bool,
}

impl From<EngineError> for LoadError {
    fn from(error: EngineError) -> LoadError {
        LoadError {
            error,
            in_space_log: false,
        }
    }
}

pub(super) fn load(
    tree: &Arc<VdevTree>,
    ub: &Uberblock,
    options: &PoolOptions,
) -> Result<Loaded, LoadError> {
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
    let (chain, checkpoint_blocks) = if options.without_space_log {
        assert!(
            options.readonly,
            "a pool opened without its space log must be read-only"
        );
        (Vec::new(), 0)
    } else {
        let in_space_log = |error| LoadError {
            error,
            in_space_log: true,
        };
        let (chain, blocks) =
            load_space_log(&io, &ub.space_log_bp, ub.txg).map_err(in_space_log)?;
        let checkpoint_blocks = blocks
            .iter()
            .filter(|block| block.kind != SpaceLogKind::Delta)
            .count();
        space
            .lock()
            .replay(blocks.into_iter().flat_map(|block| block.entries), ub.txg)
            .map_err(|err| in_space_log(EngineError::Space(crate::error_chain(&err))))?;
        (chain, checkpoint_blocks)
    };
    load_objects(&io, &cached, ub)
        .map(|(mos, directory, snapshots, objsets)| Loaded {
            space,
            io: io.clone(),
            mos,
            directory,
            snapshots,
            objsets,
            space_log: SpaceLogState {
                chain,
                checkpoint_blocks,
                condense_next: false,
            },
        })
        .map_err(LoadError::from)
}

/// The MOS, the dataset directory, the snapshot table and every dataset's object set, by name.
type Objects = (
    ObjectSet,
    DatasetDirectory,
    SnapshotTable,
    BTreeMap<String, Arc<ObjectSet>>,
);

/// The MOS, the dataset directory, the snapshot table and every dataset's object set of `ub`.
/// Each object set is told its newest snapshot txg before anything can write to it, so the
/// first txg after import already keeps what the snapshots reference.
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
        None,
    )?;
    let entries = DIRECTORY
        .read_all(&mos)?
        .ok_or_else(|| EngineError::Space("MOS has no dataset directory".into()))?;
    let records = entries
        .iter()
        .map(|(key, value)| DatasetDirectory::decode_record(key, value))
        .collect::<Result<Vec<_>, _>>()?;
    let mut directory = DatasetDirectory::load(records)?;
    let snapshots = load_snapshot_table(&mos, &directory)?;
    refresh_snapshot_bytes(&mut directory, &snapshots);
    let mut objsets = BTreeMap::new();
    for record in directory.datasets.values() {
        // The pool's own root dataset has no object set (yet); every other dataset has one,
        // but a receive's hidden dataset killed before its first object synced (destroyed
        // now, `Pool::destroy_abandoned_receives`).
        let may_lack_objset =
            record.kind != DatasetKind::Volume || cairn_dataset::is_hidden(&record.name);
        if may_lack_objset && record.objset_bp.iter().all(|byte| *byte == 0) {
            continue;
        }
        let checksum = directory.properties_of(&record.name)?.checksum;
        let root = record.objset_bp()?;
        check_pointer(io, &root, ub.txg, || {
            format!("the object-set root of dataset '{}'", record.name)
        })?;
        let objset = ObjectSet::open(
            cached.clone(),
            root,
            checksum,
            ub.txg,
            Some(record.used_bytes),
        )?;
        objset.set_prev_snap_txg(snapshots.prev_snap_txg(record.id));
        objsets.insert(record.name.clone(), Arc::new(objset));
    }
    Ok((mos, directory, snapshots, objsets))
}
