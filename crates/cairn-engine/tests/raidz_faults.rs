//! raidz vdevs under failing devices and power cuts: children that fail every I/O mid-run
//! (up to parity) leave the pool DEGRADED with every write kept and every read correct; one
//! more and the txg fails instead of committing what cannot be read back. Synchronous writes
//! logged on a raidz vdev (no log device) survive a power cut: replay reads the log blocks
//! back as stripes.

mod common;

use cairn_emulate::PowerSwitch;
use cairn_engine::Pool;
use cairn_format::ASHIFT_DEFAULT;
use cairn_pool::vdev::Health;
use common::failing::Devices;
use common::*;
use std::sync::Arc;

fn read_all(pool: &Pool, size: usize) -> Result<Vec<u8>, String> {
    let volume = pool.volume("tank/vol").map_err(|err| err.to_string())?;
    let mut buf = vec![0u8; size];
    volume.read(0, &mut buf).map_err(|err| err.to_string())?;
    Ok(buf)
}

/// Rewrites `len` bytes at `offset` (seeded) in the volume and in `contents`.
fn rewrite(pool: &Pool, contents: &mut [u8], offset: usize, len: usize, seed: u64) {
    let fresh = pattern(len, seed);
    pool.volume("tank/vol")
        .unwrap()
        .write(offset as u64, &fresh)
        .unwrap();
    contents[offset..offset + len].copy_from_slice(&fresh);
}

#[test]
fn children_failing_up_to_parity_keep_every_write_and_one_more_fails_the_txg() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 5);
    let devices = Devices::default();
    let pool = create_raidz(&paths, 2, ASHIFT_DEFAULT, devices.opener());
    let size = 2 << 20;
    pool.create_volume(
        "tank/vol",
        size as u64,
        &[("volblocksize".into(), "8K".into())],
    )
    .unwrap();
    let mut contents = pattern(size, 1);
    pool.volume("tank/vol")
        .unwrap()
        .write(0, &contents)
        .unwrap();
    pool.sync().unwrap();

    devices.fail(&paths[1]);
    rewrite(&pool, &mut contents, 100_000, 300_000, 2);
    pool.sync().unwrap();
    assert_eq!(pool.status().health, Health::Degraded);
    devices.fail(&paths[3]);
    rewrite(&pool, &mut contents, 900_000, 300_000, 3);
    pool.sync().unwrap();
    let status = pool.status();
    assert_eq!(status.tops[0].health, Health::Degraded);
    assert!(status.tops[0].leaves[1].write_errors > 0);
    assert!(
        read_all(&pool, size).unwrap() == contents,
        "two of five gone"
    );
    pool.close().unwrap();
    // Nothing lost on the three that are left, through an import too.
    let pool = import(&paths, devices.opener()).unwrap();
    assert!(read_all(&pool, size).unwrap() == contents);
    devices.fail(&paths[1]);
    devices.fail(&paths[3]);
    rewrite(&pool, &mut contents, 0, 65536, 4);
    pool.sync().unwrap();
    devices.fail(&paths[0]);
    rewrite(&pool, &mut contents, 1_500_000, 65536, 5);
    assert!(
        pool.sync().is_err(),
        "a third child of a raidz2 failing: the txg must not commit"
    );
    // Never wrong data: whatever a read returns is what was written.
    if let Ok(read) = read_all(&pool, size) {
        assert!(read == contents);
    }
    drop(pool);
}

#[test]
fn synchronous_writes_logged_on_raidz_survive_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 4);
    let power = Arc::new(PowerSwitch::with_seed(3));
    let pool = create_raidz(
        &paths,
        1,
        ASHIFT_DEFAULT,
        emulated_opener(3, Some(power.clone())),
    );
    let size = 1 << 20;
    pool.create_volume(
        "tank/vol",
        size as u64,
        &[
            ("volblocksize".into(), "8K".into()),
            ("sync".into(), "always".into()),
        ],
    )
    .unwrap();
    pool.sync().unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut contents = vec![0u8; size];
    let mut rng = Rng(11);
    for round in 0..40u64 {
        let len = 512 * (1 + rng.below(64) as usize);
        let offset = 512 * rng.below((size - len) as u64 / 512) as usize;
        let fresh = pattern(len, 100 + round);
        volume.write(offset as u64, &fresh).unwrap();
        contents[offset..offset + len].copy_from_slice(&fresh);
    }
    let logged: u64 = pool
        .intent_log_stats()
        .iter()
        .map(|(_, stats)| stats.blocks_written)
        .sum();
    assert!(logged > 0, "the writes went to the intent log");
    power.cut_now();
    drop(volume);
    drop(pool);

    let pool = import(&paths, plain_opener()).unwrap();
    let replayed = pool.notes().join("; ");
    assert!(!replayed.contains("from 0 log blocks"), "{replayed}");
    assert!(
        read_all(&pool, size).unwrap() == contents,
        "every acknowledged write replayed from the raidz log blocks"
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:#?}", report.problems());
    pool.close().unwrap();
}
