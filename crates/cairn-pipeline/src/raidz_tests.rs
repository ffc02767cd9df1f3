//! Unit tests of raidz I/O on memory devices: a raidz vdev of `MemDevice`s under a real vdev
//! tree and allocator. Blocks read back through queued reads (read-ahead) and the full path;
//! a damaged data column makes the queued read fall back to the rebuild, which charges the
//! child and rewrites the column; raw (intent-log) blocks round-trip as stripes and are rebuilt
//! when a column is bad.

use crate::{BlockIo, RawWrites, WriteProps};
use bytes::Bytes;
use cairn_device::Device;
use cairn_device::mem::MemDevice;
use cairn_device::queue::IoClass;
use cairn_device::spec::DeviceSpec;
use cairn_format::label::{TopVdevConfig, TopVdevKind, VDEV_DATA_START, VdevRole};
use cairn_format::raidz::RaidzGeometry;
use cairn_format::{BlockPointer, ChecksumAlgorithm, Compression, ObjectType};
use cairn_pool::space::{SpaceAllocator, SpaceClass, VdevSpace};
use cairn_pool::vdev::{Leaf, TopVdev, VdevTree};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;

const METASLAB_SHIFT: u8 = 24;
const CHILD_BYTES: u64 = 16 << 20;

struct Raidz {
    io: Arc<BlockIo>,
    devices: Vec<Arc<MemDevice>>,
    leaves: Vec<Arc<Leaf>>,
    geometry: RaidzGeometry,
}

fn raidz(width: u32, parity: u8) -> Raidz {
    let geometry = RaidzGeometry::new(width, parity, 12).unwrap();
    let data_bytes = geometry.vdev_bytes(CHILD_BYTES) >> METASLAB_SHIFT << METASLAB_SHIFT;
    let devices: Vec<Arc<MemDevice>> = (0..width)
        .map(|_| Arc::new(MemDevice::new(VDEV_DATA_START + CHILD_BYTES + (1 << 20))))
        .collect();
    let leaves: Vec<Arc<Leaf>> = devices
        .iter()
        .enumerate()
        .map(|(index, device)| {
            let spec = DeviceSpec {
                path: format!("/dev/mem{index}").into(),
                model: None,
            };
            Leaf::open(100 + index as u64, spec, device.clone())
        })
        .collect();
    let top = TopVdev {
        config: TopVdevConfig {
            id: 0,
            guid: 9,
            kind: TopVdevKind::RaidZ { parity },
            role: VdevRole::Normal,
            ashift: 12,
            metaslab_shift: METASLAB_SHIFT,
            metaslab_count: data_bytes >> METASLAB_SHIFT,
            children: Vec::new(),
        },
        leaves: leaves.clone(),
        data_size_bytes: data_bytes,
    };
    let tree = Arc::new(VdevTree { tops: vec![top] });
    let space = SpaceAllocator::new(&[VdevSpace {
        vdev: 0,
        class: SpaceClass::Normal,
        data_size_bytes: data_bytes,
        ashift: 12,
        metaslab_shift: METASLAB_SHIFT,
        raidz: Some(geometry),
    }])
    .unwrap();
    Raidz {
        io: Arc::new(BlockIo::new(tree, Arc::new(Mutex::new(space)))),
        devices,
        leaves,
        geometry,
    }
}

fn props() -> WriteProps {
    WriteProps {
        object_type: ObjectType::VolumeData,
        level: 0,
        checksum: ChecksumAlgorithm::Fletcher4,
        copies: 1,
        fill: 1,
        class: IoClass::AsyncWrite,
        compression: Compression::Off,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Writes garbage over column `index` of `bp`'s stripe; returns its child.
fn damage_column(raidz: &Raidz, bp: &BlockPointer, index: usize) -> usize {
    let dva = bp.copies()[0];
    let column = raidz
        .geometry
        .map(dva.offset, u64::from(bp.psize))
        .columns()[index];
    let garbage = vec![0x5A; column.size as usize];
    raidz.devices[column.child as usize]
        .write_at(VDEV_DATA_START + column.child_offset, &garbage)
        .unwrap();
    column.child as usize
}

fn checksum_errors(raidz: &Raidz) -> Vec<u64> {
    raidz
        .leaves
        .iter()
        .map(|leaf| leaf.errors.checksum.load(Ordering::Relaxed))
        .collect()
}

#[test]
fn queued_reads_return_the_block_and_fall_back_to_the_rebuild_on_a_bad_column() {
    let raidz = raidz(5, 2);
    let sizes = [4096usize, 8192, 12288, 65536, 131072];
    let mut batch = raidz.io.batch(1);
    let bps: Vec<BlockPointer> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            batch
                .write(Bytes::from(pattern(len, i as u8)), props())
                .unwrap()
        })
        .collect();
    batch.finish().unwrap();
    for (i, bp) in bps.iter().enumerate() {
        let queued = raidz.io.queue_read(bp, IoClass::AsyncRead).unwrap();
        let data = raidz.io.finish_read(queued).unwrap();
        assert_eq!(&data[..], &pattern(sizes[i], i as u8)[..]);
    }
    assert_eq!(checksum_errors(&raidz), vec![0; 5]);
    // The first data column of the largest block damaged: the queued read rebuilds it.
    let bp = bps[4];
    let child = damage_column(&raidz, &bp, 2);
    let queued = raidz.io.queue_read(&bp, IoClass::AsyncRead).unwrap();
    let data = raidz.io.finish_read(queued).unwrap();
    assert_eq!(&data[..], &pattern(sizes[4], 4)[..]);
    let mut expected = vec![0; 5];
    expected[child] = 1;
    assert_eq!(checksum_errors(&raidz), expected);
    // Healed: read again, nothing more to charge.
    let data = raidz.io.read_block(&bp, IoClass::SyncRead).unwrap();
    assert_eq!(&data[..], &pattern(sizes[4], 4)[..]);
    assert_eq!(checksum_errors(&raidz), expected);
    raidz.leaves.iter().for_each(|leaf| leaf.shutdown());
}

#[test]
fn raw_blocks_round_trip_as_stripes_and_are_rebuilt() {
    let raidz = raidz(4, 1);
    let dva = raidz
        .io
        .space()
        .lock()
        .allocate_log_on_pool(20480, 1)
        .unwrap();
    let len = raidz.io.raw_capacity(&dva);
    assert!(len >= 20480 && len as u64 <= u64::from(dva.asize), "{len}");
    assert!(raidz.io.is_raidz(&dva));
    let data = pattern(len, 7);
    let mut writes = RawWrites::new();
    raidz
        .io
        .write_raw_durable(&dva, &[&data[..4096], &data[4096..]], &mut writes)
        .unwrap();
    writes.wait().unwrap();
    let read = |raidz: &Raidz| {
        raidz.io.read_raw(&dva, len, IoClass::SyncRead, |bytes| {
            (bytes == &data[..]).then(|| bytes.to_vec())
        })
    };
    assert!(read(&raidz).is_some());
    // A damaged column: the reader's test fails on the data columns, the rebuild passes it.
    let map = raidz.geometry.map(dva.offset, len as u64);
    let column = map.columns()[1];
    raidz.devices[column.child as usize]
        .write_at(
            VDEV_DATA_START + column.child_offset,
            &vec![0xEE; column.size as usize],
        )
        .unwrap();
    assert!(read(&raidz).is_some());
    assert_eq!(
        raidz.leaves[column.child as usize]
            .errors
            .checksum
            .load(Ordering::Relaxed),
        1
    );
    raidz.leaves.iter().for_each(|leaf| leaf.shutdown());
}

#[test]
fn a_pointer_whose_stripe_does_not_fit_its_allocation_is_an_error_not_a_panic() {
    let raidz = raidz(4, 1);
    let mut batch = raidz.io.batch(1);
    let bp = batch
        .write(Bytes::from(pattern(65536, 3)), props())
        .unwrap();
    batch.finish().unwrap();
    let mut misaligned = bp;
    misaligned.dvas[0].offset += 512;
    let mut too_small = bp;
    too_small.dvas[0].asize = 8192;
    for crafted in [misaligned, too_small] {
        assert!(raidz.io.read_block(&crafted, IoClass::SyncRead).is_err());
        assert!(raidz.io.queue_read(&crafted, IoClass::AsyncRead).is_none());
        let (outcome, data) = raidz.io.scrub_block(&crafted);
        assert!(outcome.unrecoverable && data.is_none());
    }
    raidz.leaves.iter().for_each(|leaf| leaf.shutdown());
}
