//! raidz top-level vdevs through the whole engine: pools of raidz1/2/3 at several widths on
//! emulated disks over files, volumes written and read back after an export and import;
//! every data block allocates exactly what the layout says; damage written straight into the
//! children's files (random columns of random blocks on up to `parity` children) is rebuilt
//! on read, charged as CKSUM errors to exactly the damaged children, repaired by scrub, and
//! `pool check` is clean afterwards; up to `parity` missing children leave the pool DEGRADED
//! and every read correct, one more is refused, and damage past parity is an error, never
//! wrong data.

mod common;

use cairn_engine::{CreateOptions, Pool, VdevGroup};
use cairn_format::label::VDEV_DATA_START;
use cairn_format::raidz::RaidzGeometry;
use cairn_format::{BlockPointer, ObjectType};
use cairn_pool::vdev::Health;
use common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

const ASHIFT: u8 = 12;

/// Writes a volume of `size` random bytes with blocks of `block_bytes`, syncs and returns
/// its contents.
fn write_volume(pool: &Pool, size: u64, block_bytes: u64, seed: u64) -> Vec<u8> {
    pool.create_volume(
        "tank/vol",
        size,
        &[("volblocksize".into(), block_bytes.to_string())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let contents = pattern(size as usize, seed);
    // In uneven pieces, so some blocks are written in parts.
    let mut offset = 0usize;
    let mut rng = Rng(seed);
    while offset < contents.len() {
        let len = (1 + rng.below(3 * block_bytes) as usize).min(contents.len() - offset);
        volume
            .write(offset as u64, &contents[offset..offset + len])
            .unwrap();
        offset += len;
    }
    pool.sync().unwrap();
    contents
}

fn read_volume(pool: &Pool, size: u64) -> Result<Vec<u8>, String> {
    let volume = pool.volume("tank/vol").map_err(|err| err.to_string())?;
    let mut buf = vec![0u8; size as usize];
    volume.read(0, &mut buf).map_err(|err| err.to_string())?;
    Ok(buf)
}

fn data_blocks(pool: &Pool) -> Vec<BlockPointer> {
    pool.dataset_blocks("tank/vol")
        .unwrap()
        .into_iter()
        .filter(|bp| bp.level == 0 && bp.object_type == ObjectType::VolumeData)
        .collect()
}

/// XORs `len` bytes at `offset` of `path` with a non-zero pattern.
fn damage(path: &Path, offset: u64, len: usize) {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut bytes = vec![0u8; len];
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.read_exact(&mut bytes).unwrap();
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte ^= 0x5a ^ (i as u8 | 1);
    }
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.write_all(&bytes).unwrap();
    file.sync_all().unwrap();
}

fn checksum_errors(pool: &Pool) -> Vec<u64> {
    pool.status().tops[0]
        .leaves
        .iter()
        .map(|leaf| leaf.checksum_errors)
        .collect()
}

#[test]
fn round_trips_at_several_widths_and_block_sizes_allocating_what_the_layout_says() {
    let shapes: [(u8, usize); 6] = [(1, 3), (1, 5), (2, 4), (2, 7), (3, 4), (3, 8)];
    for (round, (parity, width)) in shapes.into_iter().enumerate() {
        for block_bytes in [4096u64, 8192, 32768, 131072] {
            let dir = tempfile::tempdir().unwrap();
            let paths = device_paths(dir.path(), width);
            let pool = create_raidz(&paths, parity, ASHIFT, plain_opener());
            let size = 1 << 20;
            let seed = round as u64 * 10 + block_bytes;
            let contents = write_volume(&pool, size, block_bytes, seed);
            let geometry = RaidzGeometry::new(width as u32, parity, ASHIFT).unwrap();
            let blocks = data_blocks(&pool);
            assert_eq!(blocks.len() as u64, size / block_bytes);
            for bp in &blocks {
                let dva = bp.copies()[0];
                assert_eq!(
                    u64::from(dva.asize),
                    geometry.asize(u64::from(bp.psize)),
                    "raidz{parity} of {width}: a block of {} bytes",
                    bp.psize
                );
            }
            pool.close().unwrap();
            let pool = import(&paths, plain_opener()).unwrap();
            let shape = format!("raidz{parity} of {width}, {block_bytes}-byte blocks");
            assert!(read_volume(&pool, size).unwrap() == contents, "{shape}");
            let status = pool.status();
            assert_eq!(status.tops[0].name, format!("raidz{parity}-0"));
            assert_eq!(status.health, Health::Online, "{shape}");
            let report = pool.check().unwrap();
            assert!(report.is_clean(), "{shape}: {:#?}", report.problems());
            pool.close().unwrap();
        }
    }
}

#[test]
fn damaged_columns_on_up_to_parity_children_are_rebuilt_charged_and_repaired() {
    for (parity, width) in [(1u8, 4usize), (2, 6), (3, 7)] {
        let dir = tempfile::tempdir().unwrap();
        let paths = device_paths(dir.path(), width);
        let pool = create_raidz(&paths, parity, ASHIFT, plain_opener());
        let size = 2 << 20;
        let contents = write_volume(&pool, size, 16384, u64::from(parity));
        let blocks = data_blocks(&pool);
        pool.close().unwrap();

        let geometry = RaidzGeometry::new(width as u32, parity, ASHIFT).unwrap();
        let mut rng = Rng(u64::from(parity) * 1000 + 1);
        let mut expected = vec![0u64; width];
        for bp in &blocks {
            if rng.below(3) != 0 {
                continue;
            }
            let dva = bp.copies()[0];
            let map = geometry.map(dva.offset, u64::from(bp.psize));
            let columns = map.columns();
            // 1..=parity distinct columns of this block, data or parity.
            let bad = 1 + rng.below(u64::from(parity)) as usize;
            let mut indexes: Vec<usize> = (0..columns.len()).collect();
            for i in (1..indexes.len()).rev() {
                indexes.swap(i, rng.below(i as u64 + 1) as usize);
            }
            for &index in indexes.iter().take(bad) {
                let column = columns[index];
                let start = rng.below(column.size - 64);
                let path = &paths[column.child as usize];
                damage(path, VDEV_DATA_START + column.child_offset + start, 64);
                expected[column.child as usize] += 1;
            }
        }
        assert!(expected.iter().sum::<u64>() > 0);

        let pool = import(&paths, plain_opener()).unwrap();
        let shape = format!("raidz{parity} of {width}");
        assert!(
            read_volume(&pool, size).unwrap() == contents,
            "{shape}: reads rebuild the data"
        );
        let record = pool.scrub(&mut |_| {}).unwrap();
        assert_eq!(record.unrecoverable_blocks, 0, "{shape}");
        assert_eq!(
            checksum_errors(&pool),
            expected,
            "{shape}: every damaged column charged once, to its own child"
        );
        let again = pool.scrub(&mut |_| {}).unwrap();
        assert_eq!(again.bad_copies, 0, "{shape}: scrub left nothing to repair");
        let report = pool.check().unwrap();
        assert!(report.is_clean(), "{shape}: {:#?}", report.problems());
        pool.close().unwrap();
        // Repaired on the devices: read again from a fresh import, nothing to rebuild.
        let pool = import(&paths, plain_opener()).unwrap();
        assert!(read_volume(&pool, size).unwrap() == contents, "{shape}");
        assert_eq!(
            checksum_errors(&pool),
            expected,
            "{shape}: nothing new (the counters are kept across the import)"
        );
        pool.close().unwrap();
    }
}

#[test]
fn missing_children_up_to_parity_degrade_the_pool_and_one_more_is_refused() {
    let (parity, width) = (2u8, 5usize);
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), width);
    let pool = create_raidz(&paths, parity, ASHIFT, plain_opener());
    let size = 1 << 20;
    let contents = write_volume(&pool, size, 8192, 5);
    pool.close().unwrap();

    let aside = dir.path().join("aside");
    std::fs::create_dir(&aside).unwrap();
    let put_aside = |index: usize| {
        let name = paths[index].file_name().unwrap();
        std::fs::rename(&paths[index], aside.join(name)).unwrap();
    };
    put_aside(1);
    let pool = import(&paths, plain_opener()).unwrap();
    assert_eq!(pool.status().health, Health::Degraded);
    assert!(read_volume(&pool, size).unwrap() == contents);
    pool.close().unwrap();

    put_aside(3);
    let pool = import(&paths, plain_opener()).unwrap();
    assert_eq!(pool.status().health, Health::Degraded);
    assert_eq!(pool.status().tops[0].health, Health::Degraded);
    assert!(read_volume(&pool, size).unwrap() == contents);
    // Writes go on, degraded: what is written now reads back too.
    let volume = pool.volume("tank/vol").unwrap();
    let fresh = pattern(65536, 77);
    volume.write(4096, &fresh).unwrap();
    pool.sync().unwrap();
    let mut expected = contents.clone();
    expected[4096..4096 + fresh.len()].copy_from_slice(&fresh);
    assert!(read_volume(&pool, size).unwrap() == expected);
    pool.close().unwrap();

    put_aside(0);
    let err = import(&paths, plain_opener())
        .err()
        .expect("three of five missing");
    let text = format!("{err:#}");
    assert!(text.contains("tank"), "{text}");
}

#[test]
fn damage_past_parity_is_an_error_never_wrong_data() {
    let (parity, width) = (1u8, 4usize);
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), width);
    let pool = create_raidz(&paths, parity, ASHIFT, plain_opener());
    let size = 1 << 20;
    write_volume(&pool, size, 16384, 9);
    let blocks = data_blocks(&pool);
    pool.close().unwrap();
    let geometry = RaidzGeometry::new(width as u32, parity, ASHIFT).unwrap();
    let victim = blocks[3];
    let dva = victim.copies()[0];
    let map = geometry.map(dva.offset, u64::from(victim.psize));
    // Two data columns of the block: one more than raidz1 rebuilds.
    for column in &map.columns()[1..3] {
        damage(
            &paths[column.child as usize],
            VDEV_DATA_START + column.child_offset,
            128,
        );
    }
    let pool = import(&paths, plain_opener()).unwrap();
    let err = read_volume(&pool, size).unwrap_err();
    assert!(err.contains("tank/vol"), "{err}");
    let record = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(record.unrecoverable_blocks, 1);
    pool.close().unwrap();
}

#[test]
fn too_few_children_for_the_parity_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let err = Pool::create(
        "tank",
        &[VdevGroup {
            mirror: false,
            raidz_parity: Some(2),
            log: false,
            devices: specs(&paths),
        }],
        &CreateOptions {
            create_size_bytes: Some(DEVICE_SIZE),
            ..Default::default()
        },
        options(plain_opener()),
    )
    .err()
    .expect("raidz2 of two devices");
    let text = err.to_string();
    assert!(text.contains("raidz2 needs at least 3 devices"), "{text}");
}

#[test]
fn a_pool_of_a_raidz1_a_raidz2_and_a_mirror_at_ashift_9_spreads_and_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 10);
    let group = |range: std::ops::Range<usize>, raidz_parity: Option<u8>| VdevGroup {
        mirror: raidz_parity.is_none(),
        raidz_parity,
        log: false,
        devices: specs(&paths[range]),
    };
    let pool = Pool::create(
        "tank",
        &[
            group(0..3, Some(1)),
            group(3..8, Some(2)),
            group(8..10, None),
        ],
        &CreateOptions {
            create_size_bytes: Some(DEVICE_SIZE),
            ashift: 9,
            ..Default::default()
        },
        options(plain_opener()),
    )
    .unwrap();
    let size = 8 << 20;
    let contents = write_volume(&pool, size, 8192, 21);
    let mut per_vdev = [0u64; 3];
    for bp in data_blocks(&pool) {
        let dva = bp.copies()[0];
        per_vdev[dva.vdev as usize] += 1;
        let expected = match dva.vdev {
            0 => RaidzGeometry::new(3, 1, 9)
                .unwrap()
                .asize(u64::from(bp.psize)),
            1 => RaidzGeometry::new(5, 2, 9)
                .unwrap()
                .asize(u64::from(bp.psize)),
            _ => u64::from(bp.psize),
        };
        assert_eq!(u64::from(dva.asize), expected, "vdev {}", dva.vdev);
    }
    assert!(per_vdev.iter().all(|&blocks| blocks > 0), "{per_vdev:?}");
    pool.close().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    let names: Vec<String> = pool
        .status()
        .tops
        .iter()
        .map(|top| top.name.clone())
        .collect();
    assert_eq!(names, vec!["raidz1-0", "raidz2-1", "mirror-2"]);
    assert!(read_volume(&pool, size).unwrap() == contents);
    let record = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(record.bad_copies, 0);
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:#?}", report.problems());
    pool.close().unwrap();
}
