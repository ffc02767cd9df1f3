//! Unit tests of an object set over a real pipeline: one memory device under a real vdev tree,
//! space allocator and read cache, so syncs really allocate, write and free.

use crate::ObjectSet;
use bytes::Bytes;
use cairn_arc::{ArcConfig, CachedIo, ReadCache};
use cairn_device::mem::MemDevice;
use cairn_device::spec::DeviceSpec;
use cairn_format::label::{TopVdevConfig, TopVdevKind, VDEV_DATA_START, VdevRole};
use cairn_format::{BlockPointer, ChecksumAlgorithm, ObjectType, ObjsetType};
use cairn_pipeline::BlockIo;
use cairn_pool::space::{SpaceAllocator, SpaceClass, VdevSpace};
use cairn_pool::vdev::{Leaf, TopVdev, VdevTree};
use parking_lot::Mutex;
use std::sync::Arc;

const METASLAB_SHIFT: u8 = 24;
const METASLABS: u64 = 4;
const BLOCK_BYTES: u32 = 4096;
const OBJECT: u64 = 1;

pub(crate) fn volume_objset() -> (ObjectSet, Arc<BlockIo>) {
    let data_bytes = METASLABS << METASLAB_SHIFT;
    let device = Arc::new(MemDevice::new(VDEV_DATA_START + data_bytes + (1 << 20)));
    let spec = DeviceSpec {
        path: "/dev/mem0".into(),
        model: None,
    };
    let top = TopVdev {
        config: TopVdevConfig {
            id: 0,
            guid: 9,
            kind: TopVdevKind::Leaf,
            role: VdevRole::Normal,
            ashift: 12,
            metaslab_shift: METASLAB_SHIFT,
            metaslab_count: METASLABS,
            children: Vec::new(),
        },
        leaves: vec![Leaf::open(100, spec, device)],
        data_size_bytes: data_bytes,
    };
    let space = SpaceAllocator::new(&[VdevSpace {
        vdev: 0,
        class: SpaceClass::Normal,
        data_size_bytes: data_bytes,
        ashift: 12,
        metaslab_shift: METASLAB_SHIFT,
        raidz: None,
    }])
    .unwrap();
    let io = Arc::new(BlockIo::new(
        Arc::new(VdevTree { tops: vec![top] }),
        Arc::new(Mutex::new(space)),
    ));
    let cache = ReadCache::new(ArcConfig::with_max(64 << 20));
    let cached = Arc::new(CachedIo::new(cache, io.clone()));
    let objset = ObjectSet::create(cached, ObjsetType::Volume, ChecksumAlgorithm::Fletcher4);
    (objset, io)
}

/// Syncs and publishes `txg`; returns the blocks it kept as dead.
pub(crate) fn sync(objset: &ObjectSet, io: &BlockIo, txg: u64) -> Vec<BlockPointer> {
    let mut batch = io.batch(txg);
    let synced = objset.sync(txg, &mut batch).unwrap();
    batch.finish().unwrap();
    let dead = synced.dead_blocks().to_vec();
    objset.publish(synced);
    dead
}

/// The pointer to block 0 of the test object (a one-level tree: the dnode points at it).
fn first_block(objset: &ObjectSet) -> BlockPointer {
    let dnode = objset.dnode(OBJECT).unwrap();
    assert_eq!(dnode.levels, 1);
    dnode.block_pointers[0]
}

fn block(byte: u8) -> Bytes {
    Bytes::from(vec![byte; BLOCK_BYTES as usize])
}

fn allocated(io: &BlockIo, bp: &BlockPointer) -> bool {
    let space = io.space().lock();
    bp.copies().iter().all(|dva| space.is_allocated(dva))
}

#[test]
fn blocks_a_snapshot_references_are_kept_and_later_ones_freed() {
    let (objset, io) = volume_objset();
    objset.create_object(1, OBJECT, ObjectType::VolumeData, BLOCK_BYTES, 1);
    objset.write_block(1, OBJECT, 0, block(1));
    assert!(
        sync(&objset, &io, 1).is_empty(),
        "no snapshot: nothing is kept"
    );
    let born_1 = first_block(&objset);
    assert_eq!(born_1.birth_txg, 1);

    // A snapshot of txg 1: overwriting its block keeps it, allocated, as dead.
    objset.set_prev_snap_txg(1);
    objset.write_block(2, OBJECT, 0, block(3));
    let dead = sync(&objset, &io, 2);
    assert!(dead.contains(&born_1), "the snapshot's block was not kept");
    assert!(dead.iter().all(|bp| bp.birth_txg <= 1), "{dead:?}");
    assert!(
        allocated(&io, &born_1),
        "a block the snapshot references was freed"
    );
    let born_2 = first_block(&objset);
    assert_eq!(born_2.birth_txg, 2);

    // A block born after the snapshot is the head's alone: overwriting it frees it.
    objset.write_block(3, OBJECT, 0, block(4));
    let dead = sync(&objset, &io, 3);
    assert!(
        !dead.contains(&born_2),
        "a block no snapshot references was kept"
    );
    assert!(dead.iter().all(|bp| bp.birth_txg <= 1), "{dead:?}");
    assert!(
        !allocated(&io, &born_2),
        "the head's own block was not freed"
    );
    assert!(allocated(&io, &born_1));
}

/// `allocated_bytes_estimate`: unsynced blocks of a new object count at once, overwrites of
/// synced blocks add nothing until they sync, blocks appended past the synced tree's last
/// one count before they sync, in whole sectors, newest version once.
#[test]
fn allocated_bytes_estimate_counts_unsynced_blocks_past_the_synced_end() {
    let (objset, io) = volume_objset();
    let sector_bytes = objset.sector_bytes();
    objset.create_object(1, OBJECT, ObjectType::VolumeData, BLOCK_BYTES, 1);
    for blkid in 0..3 {
        objset.write_block(1, OBJECT, blkid, block(1));
    }
    let fresh = objset.allocated_bytes_estimate(OBJECT).unwrap();
    assert_eq!(
        fresh,
        3 * u64::from(BLOCK_BYTES).next_multiple_of(sector_bytes)
    );
    sync(&objset, &io, 1);
    let synced = objset.allocated_bytes_estimate(OBJECT).unwrap();
    assert_eq!(synced, objset.dnode(OBJECT).unwrap().used_bytes);
    assert!(synced > 0);
    // Overwrites inside the synced range, twice over two txgs: nothing more until they sync.
    objset.write_block(2, OBJECT, 1, block(2));
    objset.write_block(3, OBJECT, 1, block(3));
    assert_eq!(objset.allocated_bytes_estimate(OBJECT).unwrap(), synced);
    // Appends past the end, one of them rewritten in a later txg: each counts once.
    objset.write_block(2, OBJECT, 3, block(4));
    objset.write_block(3, OBJECT, 3, block(5));
    objset.write_block(3, OBJECT, 5, block(6));
    let appended = objset.allocated_bytes_estimate(OBJECT).unwrap();
    assert_eq!(
        appended,
        synced + 2 * u64::from(BLOCK_BYTES).next_multiple_of(sector_bytes)
    );
}
