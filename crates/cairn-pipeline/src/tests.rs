//! Unit tests of the pipeline on memory devices: a mirror of two `MemDevice`s under a real
//! vdev tree and space allocator, so writes really allocate and land on both sides, and a test
//! can damage one side's bytes behind the pipeline's back.

use crate::{BlockIo, PipelineError, WriteProps};
use bytes::Bytes;
use cairn_device::Device;
use cairn_device::mem::MemDevice;
use cairn_device::queue::IoClass;
use cairn_device::spec::DeviceSpec;
use cairn_format::label::{TopVdevConfig, TopVdevKind, VDEV_DATA_START, VdevRole};
use cairn_format::{BlockPointer, ChecksumAlgorithm, Compression, ObjectType};
use cairn_pool::space::{SpaceAllocator, SpaceClass, VdevSpace};
use cairn_pool::vdev::{Leaf, TopVdev, VdevTree};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const METASLAB_SHIFT: u8 = 24;
const METASLABS: u64 = 3;

/// A pipeline over one two-way mirror, and the two devices under it.
struct Mirror {
    io: BlockIo,
    devices: [Arc<MemDevice>; 2],
    leaves: [Arc<Leaf>; 2],
}

fn mirror() -> Mirror {
    let data_bytes = METASLABS << METASLAB_SHIFT;
    let devices =
        [0, 1].map(|_| Arc::new(MemDevice::new(VDEV_DATA_START + data_bytes + (1 << 20))));
    let leaves = [0, 1].map(|index| {
        let spec = DeviceSpec {
            path: format!("/dev/mem{index}").into(),
            model: None,
        };
        Leaf::open(100 + index as u64, spec, devices[index].clone())
    });
    let top = TopVdev {
        config: TopVdevConfig {
            id: 0,
            guid: 9,
            kind: TopVdevKind::Mirror,
            role: VdevRole::Normal,
            ashift: 12,
            metaslab_shift: METASLAB_SHIFT,
            metaslab_count: METASLABS,
            children: Vec::new(),
        },
        leaves: leaves.to_vec(),
        data_size_bytes: data_bytes,
    };
    let tree = Arc::new(VdevTree { tops: vec![top] });
    let space = SpaceAllocator::new(&[VdevSpace {
        vdev: 0,
        class: SpaceClass::Normal,
        data_size_bytes: data_bytes,
        ashift: 12,
        metaslab_shift: METASLAB_SHIFT,
        raidz: None,
    }])
    .unwrap();
    Mirror {
        io: BlockIo::new(tree, Arc::new(Mutex::new(space))),
        devices,
        leaves,
    }
}

fn props(compression: Compression) -> WriteProps {
    WriteProps {
        object_type: ObjectType::VolumeData,
        level: 0,
        checksum: ChecksumAlgorithm::Fletcher4,
        copies: 1,
        fill: 1,
        class: IoClass::AsyncWrite,
        compression,
    }
}

/// Writes `data` as one block in txg 1 and waits for it.
fn write(mirror: &Mirror, data: &[u8], compression: Compression) -> BlockPointer {
    let mut batch = mirror.io.batch(1);
    let bp = batch
        .write(Bytes::copy_from_slice(data), props(compression))
        .unwrap();
    batch.finish().unwrap();
    bp
}

/// Overwrites the stored bytes of `bp`'s first copy on device `side` with garbage.
fn damage(mirror: &Mirror, bp: &BlockPointer, side: usize) {
    let dva = bp.copies()[0];
    let garbage = vec![0xA5; dva.asize as usize];
    mirror.devices[side]
        .write_at(VDEV_DATA_START + dva.offset, &garbage)
        .unwrap();
}

/// The stored bytes of `bp`'s first copy on device `side`.
fn stored(mirror: &Mirror, bp: &BlockPointer, side: usize) -> Vec<u8> {
    let dva = bp.copies()[0];
    let mut buf = vec![0; bp.psize as usize];
    mirror.devices[side]
        .read_at(VDEV_DATA_START + dva.offset, &mut buf)
        .unwrap();
    buf
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn a_written_block_reads_back_from_either_side_with_its_checksum() {
    let mirror = mirror();
    let data = pattern(16 << 10, 7);
    let bp = write(&mirror, &data, Compression::Off);
    assert_eq!(bp.lsize as usize, data.len());
    assert_eq!(bp.checksum, ChecksumAlgorithm::Fletcher4.compute(&data));
    for side in 0..2 {
        assert_eq!(stored(&mirror, &bp, side), data, "side {side}");
    }
    let read = mirror.io.read_block(&bp, IoClass::SyncRead).unwrap();
    assert_eq!(&read[..], &data[..]);
    assert!(mirror.io.space().lock().stats().allocated_bytes >= u64::from(bp.copies()[0].asize));
}

#[test]
fn compression_is_kept_only_when_it_saves_space() {
    let mirror = mirror();
    let zeros_and_text: Vec<u8> = b"cairn ".iter().copied().cycle().take(64 << 10).collect();
    let packed = write(&mirror, &zeros_and_text, Compression::Lz4);
    assert!(packed.psize < packed.lsize, "{packed:?}");
    assert_eq!(
        &mirror.io.read_block(&packed, IoClass::SyncRead).unwrap()[..],
        &zeros_and_text[..]
    );
    let noise = pattern(64 << 10, 3);
    let plain = write(&mirror, &noise, Compression::Lz4);
    assert_eq!(
        plain.psize, plain.lsize,
        "incompressible data is stored as it is"
    );
    assert_eq!(plain.compression, Compression::Off);
}

#[test]
fn a_damaged_side_is_never_returned_and_scrub_repairs_it() {
    let mirror = mirror();
    let data = pattern(8 << 10, 11);
    let bp = write(&mirror, &data, Compression::Off);
    damage(&mirror, &bp, 1);
    // Whichever side a read tries first, only verified bytes come back.
    for _ in 0..4 {
        let read = mirror.io.read_block(&bp, IoClass::SyncRead).unwrap();
        assert_eq!(&read[..], &data[..]);
    }
    let (outcome, logical) = mirror.io.scrub_block(&bp);
    assert_eq!(logical.as_deref(), Some(&data[..]));
    assert!(!outcome.unrecoverable);
    assert_eq!(stored(&mirror, &bp, 1), data, "scrub rewrote the bad copy");
    assert!(mirror.leaves[1].errors.checksum.load(Ordering::Relaxed) >= 1);
    assert_eq!(mirror.leaves[0].errors.checksum.load(Ordering::Relaxed), 0);
    assert!(mirror.io.stats.checksum_errors.load(Ordering::Relaxed) >= 1);
}

#[test]
fn a_block_no_copy_of_which_verifies_is_an_error_not_bytes() {
    let mirror = mirror();
    let bp = write(&mirror, &pattern(4 << 10, 5), Compression::Off);
    damage(&mirror, &bp, 0);
    damage(&mirror, &bp, 1);
    let err = mirror.io.read_block(&bp, IoClass::SyncRead).unwrap_err();
    assert!(
        matches!(err, PipelineError::Unrecoverable { .. }),
        "{err:?}"
    );
    let (outcome, logical) = mirror.io.scrub_block(&bp);
    assert!(outcome.unrecoverable && logical.is_none());
    assert!(mirror.io.stats.unrecoverable.load(Ordering::Relaxed) >= 2);
}

#[test]
fn a_freed_block_gives_its_space_back_after_its_txg() {
    let mirror = mirror();
    let before = mirror.io.space().lock().stats().allocated_bytes;
    let bp = write(&mirror, &pattern(16 << 10, 9), Compression::Off);
    let allocated = mirror.io.space().lock().stats().allocated_bytes;
    assert!(allocated > before);
    mirror.io.free_block(&bp, 2);
    assert_eq!(mirror.io.stats.blocks_freed.load(Ordering::Relaxed), 1);
}
