//! Pool lifecycle and bad input: create, write, export, import, destroy; damaged labels, missing
//! devices, devices of another pool, a full pool, unknown properties, torn uberblocks.

mod common;

use cairn_engine::{CreateOptions, ImportSource, Pool, VdevGroup};
use cairn_format::label::{LABEL_SIZE, UBERBLOCK_RING_SLOTS, uberblock_offset};
use cairn_pool::vdev::Health;
use common::*;
use std::os::unix::fs::FileExt;

fn read_all(pool: &Pool, name: &str, len: usize) -> Vec<u8> {
    let volume = pool.volume(name).unwrap();
    let mut buf = vec![0u8; len];
    volume.read(0, &mut buf).unwrap();
    buf
}

#[test]
fn data_survives_export_and_import_by_directory() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let data = pattern(3 << 20, 1);
    {
        let pool = create_mirror(&paths, plain_opener());
        pool.create_volume("tank/vol", 8 << 20, &[]).unwrap();
        let volume = pool.volume("tank/vol").unwrap();
        volume.write(12345, &data).unwrap();
        volume.trim(1 << 20, 64 << 10).unwrap();
        volume.flush().unwrap();
        pool.export().unwrap();
    }
    let pool = Pool::import(
        &ImportSource::Directory(dir.path().into()),
        "tank",
        options(plain_opener()),
    )
    .unwrap();
    assert_eq!(pool.status().health, Health::Online);
    let contents = read_all(&pool, "tank/vol", 8 << 20);
    let mut expected = vec![0u8; 8 << 20];
    expected[12345..12345 + data.len()].copy_from_slice(&data);
    expected[1 << 20..(1 << 20) + (64 << 10)].fill(0);
    assert!(contents == expected, "contents after import");
    let datasets = pool.datasets().unwrap();
    let vol = datasets.iter().find(|d| d.name == "tank/vol").unwrap();
    assert!(
        vol.referenced_bytes >= data.len() as u64 - (64 << 10),
        "referenced counts written data"
    );
    assert!(
        vol.referenced_bytes < 8 << 20,
        "unwritten ranges reference no space"
    );
    assert!(
        vol.used_bytes > 8 << 20,
        "USED includes the volume's reservation of its full size"
    );
    assert!(pool.check().unwrap().is_clean());
    pool.destroy().unwrap();
    drop(pool);
    let err = Pool::import(
        &ImportSource::Directory(dir.path().into()),
        "tank",
        options(plain_opener()),
    )
    .err()
    .expect("destroyed pool is not importable")
    .to_string();
    assert!(err.contains("tank"), "{err}");
}

#[test]
fn a_device_of_another_pool_is_refused_without_force() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    pool.close().unwrap();
    drop(pool);
    let err = Pool::create(
        "other",
        &[VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: specs(&paths),
        }],
        &CreateOptions::default(),
        options(plain_opener()),
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("tank") && err.contains("force"), "{err}");
}

#[test]
fn damaged_front_labels_fall_back_to_the_back_ones() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let data = pattern(1 << 20, 2);
    {
        let pool = create_mirror(&paths, plain_opener());
        pool.create_volume("tank/vol", 4 << 20, &[]).unwrap();
        pool.volume("tank/vol").unwrap().write(0, &data).unwrap();
        pool.close().unwrap();
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[0])
        .unwrap();
    file.write_all_at(&vec![0xa5u8; 2 * LABEL_SIZE as usize], 0)
        .unwrap();
    drop(file);
    let pool = import(&paths, plain_opener()).expect("imports from labels 2 and 3");
    assert_eq!(
        &read_all(&pool, "tank/vol", 4 << 20)[..data.len()],
        &data[..]
    );
    pool.close().unwrap();
    drop(pool);
    // With every label destroyed the device is no longer recognised, and the error says so.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[0])
        .unwrap();
    let size = file.metadata().unwrap().len();
    for offset in [0, LABEL_SIZE, size - 2 * LABEL_SIZE, size - LABEL_SIZE] {
        file.write_all_at(&vec![0u8; LABEL_SIZE as usize], offset)
            .unwrap();
    }
    drop(file);
    let err = import(&paths, plain_opener())
        .err()
        .expect("no labels")
        .to_string();
    assert!(err.contains("tank") && err.contains("no devices"), "{err}");
}

#[test]
fn a_mirror_missing_a_side_imports_degraded_and_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let data = pattern(1 << 20, 3);
    {
        let pool = create_mirror(&paths, plain_opener());
        pool.create_volume("tank/vol", 4 << 20, &[]).unwrap();
        pool.volume("tank/vol").unwrap().write(0, &data).unwrap();
        pool.close().unwrap();
    }
    std::fs::remove_file(&paths[1]).unwrap();
    let pool = import(&paths, plain_opener()).expect("degraded import");
    let status = pool.status();
    assert_eq!(status.health, Health::Degraded);
    assert_eq!(status.tops[0].leaves[1].health, Health::Unavail);
    assert_eq!(
        &read_all(&pool, "tank/vol", 4 << 20)[..data.len()],
        &data[..]
    );
    pool.volume("tank/vol")
        .unwrap()
        .write(2 << 20, &data)
        .unwrap();
    pool.sync().unwrap();
    assert!(pool.check().unwrap().is_clean());
    pool.close().unwrap();
}

#[test]
fn a_single_device_pool_missing_its_device_gives_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    {
        let pool = Pool::create(
            "tank",
            &[
                VdevGroup {
                    mirror: false,
                    raidz_parity: None,
                    log: false,
                    devices: specs(&paths[..1]),
                },
                VdevGroup {
                    mirror: false,
                    raidz_parity: None,
                    log: false,
                    devices: specs(&paths[1..]),
                },
            ],
            &CreateOptions {
                create_size_bytes: Some(DEVICE_SIZE),
                ..Default::default()
            },
            options(plain_opener()),
        )
        .unwrap();
        pool.close().unwrap();
    }
    std::fs::remove_file(&paths[1]).unwrap();
    let err = import(&paths, plain_opener())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("d1.img") && err.contains("no device"), "{err}");
}

#[test]
fn a_full_pool_returns_no_space_and_stays_usable() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    // Sparse: a thick 256 MiB volume could not be created on a 64 MiB pool at all.
    pool.create_volume(
        "tank/big",
        256 << 20,
        &[
            ("volblocksize".into(), "64K".into()),
            ("refreservation".into(), "none".into()),
        ],
    )
    .unwrap();
    let volume = pool.volume("tank/big").unwrap();
    let chunk = pattern(1 << 20, 4);
    let mut written = 0u64;
    let mut refused = None;
    for index in 0..256u64 {
        match volume.write(index << 20, &chunk) {
            Ok(()) => {
                written += 1;
                if index % 8 == 7 {
                    pool.sync().unwrap();
                }
            }
            Err(err) => {
                refused = Some(err.to_string());
                break;
            }
        }
    }
    let message = refused.expect("a 64 MiB pool cannot take 256 MiB");
    assert!(message.contains("space"), "{message}");
    assert!(
        written > 16,
        "the pool held a reasonable amount before refusing ({written} MiB)"
    );
    pool.sync().expect("sync still works when full");
    assert!(pool.check().unwrap().is_clean());
    let before = pool.status().allocated_bytes;
    pool.destroy_dataset("tank/big").unwrap();
    // Its blocks are freed in the background (`freeing`), a bounded number per txg.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while pool.freeing_bytes() > 0 {
        assert!(std::time::Instant::now() < deadline, "the frees finish");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for _ in 0..4 {
        pool.record_history("advance txgs past the defer window".into())
            .unwrap();
    }
    assert!(
        pool.status().allocated_bytes < before / 4,
        "destroy returns the space"
    );
    pool.create_volume("tank/again", 8 << 20, &[]).unwrap();
    pool.volume("tank/again").unwrap().write(0, &chunk).unwrap();
    pool.sync().unwrap();
    assert!(pool.check().unwrap().is_clean());
    pool.close().unwrap();
}

/// Writes 1 MiB chunks from offset 0 until the volume refuses one or `limit` are written;
/// returns how many were written and the refusal.
fn fill(pool: &Pool, name: &str, limit: u64) -> (u64, Option<String>) {
    let volume = pool.volume(name).unwrap();
    let chunk = pattern(1 << 20, 9);
    for index in 0..limit {
        if let Err(err) = volume.write(index << 20, &chunk) {
            return (index, Some(err.to_string()));
        }
        if index % 8 == 7 {
            pool.sync().unwrap();
        }
    }
    pool.sync().unwrap();
    (limit, None)
}

#[test]
fn a_thick_volume_keeps_its_space_while_a_sparse_one_fills_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    let block = ("volblocksize".to_string(), "64K".to_string());

    // A volume larger than the pool cannot be promised; nothing is created.
    let err = pool
        .create_volume("tank/huge", 1 << 40, std::slice::from_ref(&block))
        .expect_err("a 1 TiB thick volume on a 64 MiB pool")
        .to_string();
    assert!(err.contains("reservation"), "{err}");
    assert!(
        pool.datasets()
            .unwrap()
            .iter()
            .all(|d| d.name != "tank/huge")
    );

    let root_avail_before = pool.datasets().unwrap()[0].available_bytes;
    pool.create_volume("tank/thick", 16 << 20, std::slice::from_ref(&block))
        .unwrap();
    let datasets = pool.datasets().unwrap();
    let thick = datasets.iter().find(|d| d.name == "tank/thick").unwrap();
    let root = datasets.iter().find(|d| d.name == "tank").unwrap();
    assert!(thick.used_bytes >= 16 << 20, "{thick:?}");
    assert!(thick.referenced_bytes < 1 << 20, "{thick:?}");
    assert!(
        root.available_bytes + (16 << 20) <= root_avail_before,
        "the promise is taken from everyone else's AVAIL: {} then {}",
        root_avail_before,
        root.available_bytes
    );
    assert!(
        thick.available_bytes >= 16 << 20,
        "the volume itself sees its promise as available: {thick:?}"
    );

    // A sparse volume fills what is left, and no more.
    pool.create_volume(
        "tank/sparse",
        256 << 20,
        &[block.clone(), ("refreservation".into(), "none".into())],
    )
    .unwrap();
    let (sparse_mib, refused) = fill(&pool, "tank/sparse", 256);
    let refused = refused.expect("the sparse volume runs out of room");
    assert!(refused.contains("space"), "{refused}");
    assert!(sparse_mib > 8, "the sparse volume took {sparse_mib} MiB");

    // The thick volume still takes every byte it was promised.
    let (thick_mib, refused) = fill(&pool, "tank/thick", 16);
    assert_eq!(thick_mib, 16, "refused after {thick_mib} MiB: {refused:?}");
    assert!(pool.check().unwrap().is_clean());

    // A reservation the pool cannot hold is refused and changes nothing.
    let err = pool
        .set_property("tank/sparse", "refreservation", "256M")
        .expect_err("no room left to promise")
        .to_string();
    assert!(err.contains("reservation"), "{err}");
    let got = pool.properties("tank/sparse").unwrap();
    let refres = got
        .iter()
        .find(|(name, _, _)| *name == "refreservation")
        .unwrap();
    assert_eq!(refres.1, "0");
    pool.close().unwrap();
}

#[test]
fn unknown_and_invalid_properties_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    let err = pool
        .create_volume("tank/vol", 4 << 20, &[("colour".into(), "blue".into())])
        .unwrap_err()
        .to_string();
    assert!(err.contains("colour"), "{err}");
    assert!(
        pool.datasets()
            .unwrap()
            .iter()
            .all(|d| d.name != "tank/vol")
    );
    pool.create_volume("tank/vol", 4 << 20, &[]).unwrap();
    assert!(pool.set_property("tank/vol", "checksum", "crc7").is_err());
    assert!(pool.set_property("tank/vol", "volblocksize", "8K").is_err());
    assert!(
        pool.set_property("tank/nope", "checksum", "sha256")
            .is_err()
    );
    pool.set_property("tank/vol", "checksum", "sha256").unwrap();
    pool.set_property("tank/vol", "readonly", "on").unwrap();
    let err = pool
        .volume("tank/vol")
        .unwrap()
        .write(0, &[1; 512])
        .unwrap_err()
        .to_string();
    assert!(err.contains("read-only"), "{err}");
    pool.close().unwrap();
    drop(pool);
    let pool = import(&paths, plain_opener()).unwrap();
    let props = pool.properties("tank/vol").unwrap();
    let checksum = props.iter().find(|p| p.0 == "checksum").unwrap();
    assert_eq!(
        (checksum.1.as_str(), checksum.2.as_str()),
        ("sha256", "local")
    );
    pool.close().unwrap();
}

#[test]
fn a_torn_newest_uberblock_falls_back_to_the_previous_txg() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let first = pattern(64 << 10, 5);
    let second = pattern(64 << 10, 6);
    let newest_txg;
    {
        let pool = create_mirror(&paths, plain_opener());
        pool.create_volume("tank/vol", 4 << 20, &[]).unwrap();
        let volume = pool.volume("tank/vol").unwrap();
        volume.write(0, &first).unwrap();
        pool.sync().unwrap();
        volume.write(0, &second).unwrap();
        newest_txg = pool.sync().unwrap();
        // Close without another txg: the newest uberblock is the one with `second`.
        drop(volume);
        drop(pool);
    }
    assert!(newest_txg < UBERBLOCK_RING_SLOTS);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[0])
        .unwrap();
    let size = file.metadata().unwrap().len();
    for label in 0..4 {
        file.write_all_at(
            &[0x5au8; 300],
            uberblock_offset(label, size, newest_txg) + 200,
        )
        .unwrap();
    }
    drop(file);
    let pool = import(&paths, plain_opener()).unwrap();
    assert_eq!(
        &read_all(&pool, "tank/vol", 4 << 20)[..first.len()],
        &first[..]
    );
    assert!(pool.check().unwrap().is_clean());
    pool.close().unwrap();
}

#[test]
fn a_volume_handle_outliving_its_pool_gets_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume("tank/vol", 4 << 20, &[]).unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    volume.write(0, &[7u8; 4096]).unwrap();
    pool.close().unwrap();
    let err = volume.write(4096, &[8u8; 4096]).unwrap_err().to_string();
    assert!(err.contains("tank/vol"), "{err}");
    drop(pool);
    let pool = import(&paths, plain_opener()).unwrap();
    let contents = read_all(&pool, "tank/vol", 8192);
    assert!(
        contents[..4096].iter().all(|&b| b == 7),
        "written before close: kept"
    );
    assert!(
        contents[4096..].iter().all(|&b| b == 0),
        "refused after close: absent"
    );
    pool.close().unwrap();
}

#[test]
fn block_status_reports_holes_and_data_before_and_after_sync() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume(
        "tank/vol",
        4 << 20,
        &[("volblocksize".into(), "64K".into())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    assert_eq!(
        volume.block_status(0, 4 << 20).unwrap(),
        vec![(4 << 20, true)]
    );
    volume.write(64 << 10, &[1u8; 128 << 10]).unwrap();
    volume.write((1 << 20) + 100, &[2u8; 10]).unwrap();
    let expected = vec![
        (64 << 10, true),
        (128 << 10, false),
        ((1 << 20) - (192 << 10), true),
        (64 << 10, false),
        ((3 << 20) - (64 << 10), true),
    ];
    assert_eq!(
        volume.block_status(0, 4 << 20).unwrap(),
        expected,
        "pending"
    );
    pool.sync().unwrap();
    assert_eq!(volume.block_status(0, 4 << 20).unwrap(), expected, "synced");
    volume.trim(64 << 10, 64 << 10).unwrap();
    assert_eq!(
        volume.block_status(64 << 10, 128 << 10).unwrap(),
        vec![(64 << 10, true), (64 << 10, false)],
        "trimmed block is a hole again"
    );
    assert_eq!(
        volume.block_status(100, 1000).unwrap(),
        vec![(1000, true)],
        "unaligned queries are clipped to the asked range"
    );
    assert!(volume.block_status(4 << 20, 1).is_err(), "past the end");
    pool.close().unwrap();
}

#[test]
fn a_block_rewritten_in_one_txg_counts_its_dirty_bytes_once() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume(
        "tank/vol",
        8 << 20,
        &[("volblocksize".into(), "16K".into())],
    )
    .unwrap();
    pool.sync().unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    // Block 0 changed ten times (whole and partial writes, a trim), block 1 once: two blocks
    // dirty, so the txg carries 32 KiB however often block 0 changed.
    for round in 0..5u64 {
        volume.write(0, &pattern(16 << 10, round)).unwrap();
        volume.write(4096, &pattern(4096, round + 100)).unwrap();
    }
    volume.trim(8192, 4096).unwrap();
    volume.write(16 << 10, &pattern(16 << 10, 7)).unwrap();
    let txg = pool.sync().unwrap();
    let timing = pool
        .txg_history()
        .into_iter()
        .find(|timing| timing.txg == txg)
        .expect("the synced txg is in the history");
    assert_eq!(timing.dirty_bytes, 32 << 10, "{timing:?}");
    // The last version of each block is what reached the disk.
    let mut expected = pattern(16 << 10, 4);
    expected[4096..8192].copy_from_slice(&pattern(4096, 104));
    expected[8192..12288].fill(0);
    expected.extend_from_slice(&pattern(16 << 10, 7));
    assert_eq!(read_all(&pool, "tank/vol", 32 << 10), expected);
    assert!(pool.check().unwrap().is_clean());
}
