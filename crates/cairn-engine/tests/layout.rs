//! `pool add` / `pool remove` of log devices on a live pool: nothing acknowledged is lost, the
//! pool imports with the devices it should have, and a power cut at any write or flush of the
//! change leaves the pool either as it was or as it became, never in between.
//! `CAIRN_LAYOUT_TRIP=add:N` (or `remove:N`) replays one cut of the crash test.
//! (The crash test found that a log chain retired while a builder was still writing its next
//! block could have that block freed twice, and that a txg dropping a chain from the header
//! could leave blocks still being written allocated and unreachable after a crash.)

mod common;

use cairn_device::spec::DeviceSpec;
use cairn_emulate::PowerSwitch;
use cairn_engine::{CreateOptions, ImportSource, Pool, VdevGroup, discover_pools};
use common::{Rng, emulated_opener, options};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const SECTOR: u64 = 512;
const VOLUME_BYTES: u64 = 4 << 20;

fn spec(path: &Path) -> DeviceSpec {
    DeviceSpec {
        path: path.to_path_buf(),
        model: None,
    }
}

fn log_group(dir: &Path, names: &[&str]) -> VdevGroup {
    VdevGroup {
        mirror: names.len() > 1,
        raidz_parity: None,
        log: true,
        devices: names.iter().map(|name| spec(&dir.join(name))).collect(),
    }
}

fn create_sized() -> CreateOptions {
    CreateOptions {
        create_size_bytes: Some(common::DEVICE_SIZE),
        ..Default::default()
    }
}

fn sector(tag: u64) -> Vec<u8> {
    let mut rng = Rng(tag.wrapping_mul(0x9e37_79b9) | 1);
    (0..SECTOR / 8)
        .flat_map(|_| rng.next().to_le_bytes())
        .collect()
}

/// A pool on `d0.img` (plus `slog-a.img` as a log device if asked) with a 4 KiB-block volume.
fn new_pool(dir: &Path, seed: u64, power: &Arc<PowerSwitch>, with_log: bool) -> Pool {
    let mut groups = vec![VdevGroup {
        mirror: false,
        raidz_parity: None,
        log: false,
        devices: vec![spec(&dir.join("d0.img"))],
    }];
    if with_log {
        groups.push(log_group(dir, &["slog-a.img"]));
    }
    let pool = Pool::create(
        "tank",
        &groups,
        &create_sized(),
        options(emulated_opener(seed, Some(power.clone()))),
    )
    .expect("create pool");
    pool.create_volume(
        "tank/vol",
        VOLUME_BYTES,
        &[("volblocksize".into(), "4K".into())],
    )
    .expect("volume");
    pool
}

/// Writes sectors `range` (tagged by sector number), each followed by a FLUSH.
fn write_flushed(pool: &Pool, range: std::ops::Range<u64>) {
    let volume = pool.volume("tank/vol").unwrap();
    for n in range {
        volume.write(n * SECTOR, &sector(n + 1)).unwrap();
        volume.flush().unwrap();
    }
}

fn import(dir: &Path, seed: u64) -> Pool {
    Pool::import(
        &ImportSource::Directory(dir.into()),
        "tank",
        options(emulated_opener(seed, None)),
    )
    .unwrap_or_else(|err| panic!("import: {err}"))
}

fn assert_sectors(pool: &Pool, range: std::ops::Range<u64>, context: &str) {
    let volume = pool.volume("tank/vol").unwrap();
    for n in range {
        let mut found = vec![0u8; SECTOR as usize];
        volume.read(n * SECTOR, &mut found).unwrap();
        assert!(found == sector(n + 1), "{context}: sector {n}");
    }
}

#[test]
fn log_devices_are_added_and_removed_without_losing_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let power = Arc::new(PowerSwitch::with_seed(21));
    let pool = new_pool(dir.path(), 21, &power, false);
    let opener = emulated_opener(121, Some(power.clone()));
    write_flushed(&pool, 0..4);
    assert!(pool.log_devices().is_empty());

    let names = pool
        .add_log_vdevs(
            &[log_group(dir.path(), &["slog-a.img"])],
            &create_sized(),
            &opener,
        )
        .expect("add a log device");
    assert_eq!(names.len(), 1);
    write_flushed(&pool, 4..24);
    let logs = pool.log_devices();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(
        logs[0].writes > 0,
        "log blocks go to the new device: {logs:?}"
    );

    pool.add_log_vdevs(
        &[log_group(dir.path(), &["slog-b1.img", "slog-b2.img"])],
        &create_sized(),
        &opener,
    )
    .expect("add a mirrored log device");
    assert_eq!(pool.log_devices().len(), 2);
    // Bad input changes nothing: a device already in the pool, a data vdev, an unknown name.
    let again = pool.add_log_vdevs(
        &[log_group(dir.path(), &["slog-a.img"])],
        &create_sized(),
        &opener,
    );
    assert!(again.unwrap_err().to_string().contains("already in pool"));
    let data = VdevGroup {
        mirror: false,
        raidz_parity: None,
        log: false,
        devices: vec![spec(&dir.path().join("d1.img"))],
    };
    let refused = pool.add_log_vdevs(&[data], &create_sized(), &opener);
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("only log devices")
    );
    assert!(!dir.path().join("d1.img").exists() || pool.log_devices().len() == 2);
    assert!(pool.remove_log_vdev("no-such-device").is_err());
    let d0 = dir.path().join("d0.img").display().to_string();
    let err = pool.remove_log_vdev(&d0).unwrap_err().to_string();
    assert!(err.contains("only log and cache devices"), "{err}");
    write_flushed(&pool, 24..40);

    let slog_a = dir.path().join("slog-a.img").display().to_string();
    pool.remove_log_vdev(&slog_a).expect("remove a log device");
    let logs = pool.log_devices();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert!(logs[0].name.starts_with("mirror-"), "{logs:?}");
    write_flushed(&pool, 40..56);
    assert_sectors(&pool, 0..56, "before the power cut");
    power.cut_now();
    drop(pool);

    // The removed device no longer claims to belong to the pool.
    assert!(
        discover_pools(&ImportSource::Devices(vec![spec(
            &dir.path().join("slog-a.img")
        )]))
        .is_empty()
    );
    let pool = import(dir.path(), 21);
    let logs = pool.log_devices();
    assert_eq!(logs.len(), 1, "{logs:?}");
    assert_sectors(&pool, 0..56, "after the power cut");
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    pool.close().unwrap();
}

/// Adds `slog-b.img` or removes `slog-a.img`, with devices fed by `power`.
fn change_layout(
    pool: &Pool,
    dir: &Path,
    change: &str,
    power: &Arc<PowerSwitch>,
    seed: u64,
) -> Result<(), cairn_engine::EngineError> {
    match change {
        "add" => {
            let opener = emulated_opener(seed + 1000, Some(power.clone()));
            pool.add_log_vdevs(&[log_group(dir, &["slog-b.img"])], &create_sized(), &opener)
                .map(|_| ())
        }
        _ => pool.remove_log_vdev(&dir.join("slog-a.img").display().to_string()),
    }
}

/// `change_layout` while a writer writes sectors from 8 on, each followed by a FLUSH (so the
/// intent log allocates blocks while the vdev tree changes). Returns the change's outcome and
/// how many sectors from 0 on were acknowledged durable.
fn change_while_writing(
    pool: &Pool,
    dir: &Path,
    change: &str,
    power: &Arc<PowerSwitch>,
    seed: u64,
) -> (Result<(), cairn_engine::EngineError>, u64) {
    let acked = AtomicU64::new(8);
    let done = AtomicBool::new(false);
    let outcome = std::thread::scope(|scope| {
        scope.spawn(|| {
            let volume = pool.volume("tank/vol").unwrap();
            for n in 8..VOLUME_BYTES / SECTOR {
                if done.load(Ordering::SeqCst)
                    || volume.write(n * SECTOR, &sector(n + 1)).is_err()
                    || volume.flush().is_err()
                {
                    break;
                }
                acked.store(n + 1, Ordering::SeqCst);
            }
        });
        let outcome = change_layout(pool, dir, change, power, seed);
        done.store(true, Ordering::SeqCst);
        outcome
    });
    (outcome, acked.load(Ordering::SeqCst))
}

/// Power cut at every write or flush of an add, then of a remove, while a writer commits the
/// intent log: the pool always imports, with every acknowledged write, and with the log
/// devices of before or after the change.
#[test]
fn a_power_cut_during_add_or_remove_leaves_the_old_or_the_new_layout() {
    let mut outcomes = std::collections::BTreeMap::<(&str, usize), usize>::new();
    for change in ["add", "remove"] {
        // How many device operations the change takes when nothing fails; the cuts then cover
        // all of them (at most ~40 points, evenly spread) and a few past the end.
        let ops_total = {
            let dir = tempfile::tempdir().unwrap();
            let power = Arc::new(PowerSwitch::with_seed(1));
            let pool = new_pool(dir.path(), 1, &power, true);
            write_flushed(&pool, 0..8);
            let before = power.ops_seen();
            let (outcome, _) = change_while_writing(&pool, dir.path(), change, &power, 1);
            outcome.expect("the change");
            power.ops_seen() - before
        };
        let step = (ops_total / 40).max(1);
        for trip in (1..=ops_total + 2).step_by(step as usize) {
            if let Ok(only) = std::env::var("CAIRN_LAYOUT_TRIP")
                && only != format!("{change}:{trip}")
            {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let seed = trip * 7 + 3;
            let power = Arc::new(PowerSwitch::with_seed(seed));
            let pool = new_pool(dir.path(), seed, &power, true);
            write_flushed(&pool, 0..8);
            power.arm_after_ops(trip);
            let (outcome, acked) = change_while_writing(&pool, dir.path(), change, &power, seed);
            let completed = outcome.is_ok() && !power.tripped();
            power.cut_now();
            drop(pool);

            let context = format!("{change}, power cut at op {trip}");
            let pool = Pool::import(
                &ImportSource::Directory(dir.path().into()),
                "tank",
                options(emulated_opener(seed, None)),
            )
            .unwrap_or_else(|err| panic!("{context}: import: {err}"));
            let logs = pool.log_devices().len();
            let expected = if change == "add" { [1, 2] } else { [1, 0] };
            assert!(expected.contains(&logs), "{context}: {logs} log devices");
            if completed {
                assert_eq!(logs, expected[1], "{context}: the change completed");
            }
            *outcomes.entry((change, logs)).or_default() += 1;
            assert_sectors(&pool, 0..acked, &context);
            let report = pool.check().unwrap();
            assert!(report.is_clean(), "{context}: {:?}", report.problems());
            pool.close().unwrap();
        }
    }
    eprintln!("outcomes (change, log devices after import): {outcomes:?}");
    for key in [("add", 1), ("add", 2), ("remove", 1), ("remove", 0)] {
        assert!(
            outcomes.contains_key(&key),
            "no run ended as {key:?}: {outcomes:?}"
        );
    }
}
