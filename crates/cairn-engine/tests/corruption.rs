//! Self-healing: bits flipped in random data blocks of one mirror side are all detected, reads
//! return correct data, scrub repairs every bad copy, and the CKSUM counters match what was
//! injected. Damage on both sides is reported with its location and never returned as data.

mod common;

use cairn_format::ObjectType;
use cairn_format::label::VDEV_DATA_START;
use common::*;
use std::io::{Read, Seek, SeekFrom, Write};

const VOLUME_SIZE: u64 = 4 << 20;

fn flip_bit(path: &std::path::Path, offset: u64) {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open device file");
    let mut byte = [0u8; 1];
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.read_exact(&mut byte).unwrap();
    byte[0] ^= 0x20;
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.write_all(&byte).unwrap();
    file.sync_all().unwrap();
}

fn populated_pool(
    dir: &std::path::Path,
) -> (
    Vec<std::path::PathBuf>,
    Vec<u8>,
    Vec<cairn_format::BlockPointer>,
) {
    let paths = device_paths(dir, 2);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume(
        "tank/vol",
        VOLUME_SIZE,
        &[("volblocksize".into(), "8K".into())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut rng = Rng(7);
    let contents: Vec<u8> = (0..VOLUME_SIZE).map(|_| rng.next() as u8).collect();
    volume.write(0, &contents).unwrap();
    pool.sync().unwrap();
    let blocks: Vec<_> = pool
        .dataset_blocks("tank/vol")
        .unwrap()
        .into_iter()
        .filter(|bp| bp.level == 0 && bp.object_type == ObjectType::VolumeData)
        .collect();
    assert_eq!(
        blocks.len() as u64,
        VOLUME_SIZE / 8192,
        "every block written"
    );
    pool.close().unwrap();
    (paths, contents, blocks)
}

#[test]
fn flipped_bits_on_one_side_are_detected_healed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, contents, blocks) = populated_pool(dir.path());
    let mut rng = Rng(99);
    let mut chosen: Vec<usize> = (0..blocks.len()).collect();
    for i in (1..chosen.len()).rev() {
        chosen.swap(i, rng.below(i as u64 + 1) as usize);
    }
    chosen.truncate(40);
    for &index in &chosen {
        let dva = blocks[index].copies()[0];
        flip_bit(
            &paths[0],
            VDEV_DATA_START + dva.offset + rng.below(u64::from(blocks[index].psize)),
        );
    }

    let pool = import(&paths, plain_opener()).unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut read_back = vec![0u8; VOLUME_SIZE as usize];
    volume.read(0, &mut read_back).unwrap();
    assert!(read_back == contents, "reads return the good copy");

    let record = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(record.unrecoverable_blocks, 0);
    let status = pool.status();
    let side0 = &status.tops[0].leaves[0];
    let side1 = &status.tops[0].leaves[1];
    assert_eq!(
        side0.checksum_errors,
        chosen.len() as u64,
        "every injected flip counted once (by a read that healed it or by the scrub)"
    );
    assert_eq!(side1.checksum_errors, 0);
    assert_eq!(
        side0.repaired_bytes,
        chosen.len() as u64 * 8192,
        "every bad copy rewritten"
    );

    let again = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(
        again.bad_copies, 0,
        "second scrub finds nothing left to repair"
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:#?}", report.problems());
    pool.close().unwrap();
}

#[test]
fn damage_on_every_copy_is_reported_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _contents, blocks) = populated_pool(dir.path());
    let victim = blocks[5];
    let dva = victim.copies()[0];
    for path in &paths {
        flip_bit(path, VDEV_DATA_START + dva.offset + 100);
    }
    let pool = import(&paths, plain_opener()).unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut buf = vec![0u8; VOLUME_SIZE as usize];
    let err = volume.read(0, &mut buf).unwrap_err().to_string();
    assert!(err.contains("tank/vol"), "error names the dataset: {err}");
    let record = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(record.unrecoverable_blocks, 1);
    assert_eq!(record.damaged.len(), 1);
    assert!(
        record.damaged[0].contains("tank/vol") && record.damaged[0].contains("offset"),
        "damage located: {}",
        record.damaged[0]
    );
    pool.close().unwrap();
}

#[test]
fn scrubs_during_writes_report_no_phantom_damage() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    // Space freed during a scan is held until the scan ends, so give the rewrites room.
    let pool = Arc::new(
        cairn_engine::Pool::create(
            "tank",
            &[cairn_engine::VdevGroup {
                mirror: true,
                raidz_parity: None,
                log: false,
                devices: specs(&paths),
            }],
            &cairn_engine::CreateOptions {
                create_size_bytes: Some(512 << 20),
                ..Default::default()
            },
            options(plain_opener()),
        )
        .unwrap(),
    );
    pool.create_volume(
        "tank/vol",
        VOLUME_SIZE,
        &[("volblocksize".into(), "4K".into())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    volume.write(0, &vec![1u8; VOLUME_SIZE as usize]).unwrap();
    pool.sync().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let txgs = Arc::new(AtomicU64::new(0));
    let writer = {
        let (pool, volume, stop, txgs) = (pool.clone(), volume.clone(), stop.clone(), txgs.clone());
        std::thread::spawn(move || {
            let mut rng = Rng(5);
            while !stop.load(Ordering::Relaxed) {
                let offset = rng.below(VOLUME_SIZE / 4096 - 64) * 4096;
                volume
                    .write(offset, &vec![rng.next() as u8; 256 << 10])
                    .unwrap();
                pool.sync().unwrap();
                txgs.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };
    for scan in 0..20 {
        // Let a few txgs pass between scans (frees held by the last scan drain), as a real
        // scrub schedule would.
        let seen = txgs.load(Ordering::Relaxed);
        while txgs.load(Ordering::Relaxed) < seen + 4 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let record = pool.scrub(&mut |_| {}).unwrap();
        assert_eq!(
            (record.bad_copies, record.unrecoverable_blocks),
            (0, 0),
            "scrub {scan} saw damage that is not there: {:?}",
            record.damaged
        );
        let report = pool.check().unwrap();
        assert!(report.is_clean(), "check {scan}: {:#?}", report.problems());
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let synced = txgs.load(Ordering::Relaxed);
    assert!(
        synced >= 80,
        "the writer synced only {synced} txgs during the scans"
    );
    pool.close().unwrap();
}

/// While a scrub runs, others (a server's analytics) see its progress; once it ends, nothing.
#[test]
fn a_running_scrub_shows_its_progress_to_others_and_none_after() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, _, blocks) = populated_pool(dir.path());
    let pool = import(&paths, plain_opener()).unwrap();
    assert!(pool.scrub_progress().is_none(), "no scrub yet");
    let mut seen = Vec::new();
    let record = pool
        .scrub(&mut |progress| {
            let shared = pool.scrub_progress().expect("progress shown while running");
            assert_eq!(shared.scanned_bytes, progress.scanned_bytes);
            seen.push(shared.blocks);
        })
        .unwrap();
    assert!(
        seen.len() >= 2 && seen.windows(2).all(|w| w[0] <= w[1]),
        "progress reported and growing: {seen:?}"
    );
    assert!(seen.last().copied().unwrap_or(0) >= blocks.len() as u64);
    assert_eq!(record.unrecoverable_blocks, 0);
    assert!(
        pool.scrub_progress().is_none(),
        "nothing once the scrub ended"
    );
}
