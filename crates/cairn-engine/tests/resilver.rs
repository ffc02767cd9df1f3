//! `pool attach`, `detach` and `replace` on live pools: the resilver copies every block the new
//! side lacks (proved by losing the old side and reading everything back verified), detach
//! never leaves a vdev without a complete copy, and a resilver cut short resumes at import.

mod common;

use cairn_device::spec::DeviceSpec;
use cairn_emulate::PowerSwitch;
use cairn_engine::{CreateOptions, ImportSource, Pool, ResilverOptions, VdevGroup};
use common::{Rng, create_mirror, device_paths, emulated_opener, import, options, plain_opener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const VOLUME_BYTES: u64 = 8 << 20;

fn spec(path: &Path) -> DeviceSpec {
    DeviceSpec {
        path: path.to_path_buf(),
        model: None,
    }
}

fn sized() -> CreateOptions {
    CreateOptions {
        create_size_bytes: Some(common::DEVICE_SIZE),
        ..Default::default()
    }
}

/// A pool on `paths` (one device, or a mirror) with a volume full of seeded bytes; returns
/// the open pool and the bytes.
fn populated(paths: &[PathBuf], seed: u64) -> (Pool, Vec<u8>) {
    let pool = create_mirror(paths, plain_opener());
    pool.create_volume(
        "tank/vol",
        VOLUME_BYTES,
        &[("volblocksize".into(), "8K".into())],
    )
    .unwrap();
    let mut rng = Rng(seed);
    let contents: Vec<u8> = (0..VOLUME_BYTES).map(|_| rng.next() as u8).collect();
    pool.volume("tank/vol")
        .unwrap()
        .write(0, &contents)
        .unwrap();
    pool.sync().unwrap();
    (pool, contents)
}

fn assert_contents(pool: &Pool, contents: &[u8]) {
    let mut buf = vec![0u8; contents.len()];
    pool.volume("tank/vol").unwrap().read(0, &mut buf).unwrap();
    assert!(buf == contents, "volume contents differ");
}

fn assert_clean(pool: &Pool) {
    let report = pool.check().unwrap();
    assert!(report.bad_copies.is_empty(), "{:?}", report.bad_copies);
    assert!(report.leaks.is_empty(), "{:?}", report.leaks);
    assert!(
        report.double_references.is_empty() && report.references_to_free_space.is_empty(),
        "{report:?}"
    );
}

fn leaf_names(pool: &Pool) -> Vec<Vec<String>> {
    pool.status()
        .tops
        .iter()
        .map(|top| top.leaves.iter().map(|leaf| leaf.name.clone()).collect())
        .collect()
}

#[test]
fn attached_side_holds_everything_once_resilvered() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let (pool, contents) = populated(&paths[..1], 1);
    let name = pool
        .attach(
            &paths[0].display().to_string(),
            &spec(&paths[1]),
            &sized(),
            &plain_opener(),
            ResilverOptions::default(),
        )
        .unwrap();
    assert_eq!(name, "mirror-0");
    pool.wait_resilver().unwrap();
    let status = pool.resilver_status().expect("a resilver record");
    assert!(status.finished_ms.is_some(), "{status:?}");
    assert!(
        status.copied_bytes >= VOLUME_BYTES && status.copied_bytes == status.total_bytes,
        "{status:?}"
    );
    assert_eq!(status.unrecoverable_blocks, 0);
    assert_clean(&pool);
    pool.close().unwrap();

    // The original side gone: the new one alone imports the pool and holds every byte.
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[1..], plain_opener()).unwrap();
    assert_contents(&pool, &contents);
    pool.close().unwrap();
}

/// Txgs sync back to back while resilvers start and run, in one pass or in windows of
/// offsets: each new side ends up holding everything, what was there before its attach
/// (copied from the tree of a synced txg) and what was written meanwhile (to both sides). The race that once made a resilver walk roots a
/// sync was still writing depends on scheduling and is rarely hit here; the power-cut test
/// below caught it.
#[test]
fn resilvers_racing_txg_syncs_fill_the_new_side() {
    // Even, so the last round (whose side is read alone at the end) is done in windows.
    const ROUNDS: usize = 12;
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let (pool, mut contents) = populated(&paths[..1], 5);
    let d0 = paths[0].display().to_string();
    let d1 = paths[1].display().to_string();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let volume = pool.volume("tank/vol").unwrap();
            let mut rng = Rng(55);
            let mut written = Vec::new();
            while !done.load(Ordering::SeqCst) {
                for _ in 0..16 {
                    let offset = rng.below(VOLUME_BYTES / 8192) * 8192;
                    let block: Vec<u8> = (0..8192).map(|_| rng.next() as u8).collect();
                    volume.write(offset, &block).unwrap();
                    written.push((offset, block));
                }
                pool.sync().unwrap();
            }
            written
        });
        for round in 0..ROUNDS {
            if round > 0 {
                pool.detach(&d1).unwrap();
            }
            pool.attach(
                &d0,
                &spec(&paths[1]),
                &sized(),
                &plain_opener(),
                ResilverOptions {
                    // Every other round (the last one too) in windows of a few dozen copies,
                    // each planned by its own walk of a newer txg's tree.
                    planned_copies_max: (round % 2 == 1).then_some(64),
                    ..Default::default()
                },
            )
            .unwrap();
            pool.wait_resilver()
                .unwrap_or_else(|err| panic!("round {round}: {err}"));
            let status = pool.resilver_status().unwrap();
            // Most of the volume was born before the attach (the writer rewrites a little).
            assert!(
                status.copied_bytes >= VOLUME_BYTES / 2,
                "round {round}: {status:?}"
            );
        }
        done.store(true, Ordering::SeqCst);
        for (offset, block) in writer.join().unwrap() {
            let offset = offset as usize;
            contents[offset..offset + block.len()].copy_from_slice(&block);
        }
    });
    assert_clean(&pool);
    pool.close().unwrap();
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[1..], plain_opener()).unwrap();
    assert_contents(&pool, &contents);
    pool.close().unwrap();
}

#[test]
fn replace_fills_the_new_side_and_detaches_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 3);
    let (pool, contents) = populated(&paths[..2], 2);
    pool.close().unwrap();
    std::fs::remove_file(&paths[1]).unwrap();
    let pool = import(&paths[..1], plain_opener()).unwrap();
    pool.replace(
        &paths[1].display().to_string(),
        &spec(&paths[2]),
        &sized(),
        &plain_opener(),
        ResilverOptions::default(),
    )
    .unwrap();
    pool.wait_resilver().unwrap();
    assert_eq!(
        leaf_names(&pool),
        vec![vec![
            paths[0].display().to_string(),
            paths[2].display().to_string()
        ]]
    );
    assert_eq!(pool.status().health.as_str(), "ONLINE");
    assert_clean(&pool);
    pool.close().unwrap();
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[2..], plain_opener()).unwrap();
    assert_contents(&pool, &contents);
    pool.close().unwrap();
}

#[test]
fn detach_refuses_to_leave_no_complete_copy() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 3);
    let (pool, contents) = populated(&paths[..2], 3);
    let d0 = paths[0].display().to_string();
    let d1 = paths[1].display().to_string();
    pool.detach(&d1).unwrap();
    assert_eq!(leaf_names(&pool), vec![vec![d0.clone()]]);
    let err = pool.detach(&d0).unwrap_err().to_string();
    assert!(err.contains("not a side of a mirror"), "{err}");
    assert_clean(&pool);

    // While the new side is still being filled, the old one is the only complete copy.
    pool.attach(
        &d0,
        &spec(&paths[2]),
        &sized(),
        &plain_opener(),
        ResilverOptions {
            rate_bytes_per_s: Some(1 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    let err = pool.detach(&d0).unwrap_err().to_string();
    assert!(err.contains("no healthy copy"), "{err}");
    // Detaching the side being filled stops its resilver.
    pool.detach(&paths[2].display().to_string()).unwrap();
    assert!(pool.resilver_status().is_none());
    assert_eq!(leaf_names(&pool), vec![vec![d0.clone()]]);
    assert_contents(&pool, &contents);
    assert_clean(&pool);
    pool.close().unwrap();
    // The detached devices carry no label of the pool any more.
    assert!(
        cairn_engine::discover_pools(&cairn_engine::ImportSource::Devices(common::specs(
            &paths[1..]
        )))
        .is_empty()
    );
}

#[test]
fn an_interrupted_resilver_resumes_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let (pool, contents) = populated(&paths[..1], 4);
    pool.attach(
        &paths[0].display().to_string(),
        &spec(&paths[1]),
        &sized(),
        &plain_opener(),
        ResilverOptions {
            rate_bytes_per_s: Some(2 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    // Wait for some progress to be recorded, then stop without a clean close.
    let copied = loop {
        let status = pool.resilver_status().unwrap();
        if status.copied_bytes > 0 && status.total_bytes > status.copied_bytes {
            break status.copied_bytes;
        }
        assert!(
            status.finished_ms.is_none(),
            "finished too soon: {status:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(copied < VOLUME_BYTES);
    drop(pool);

    let pool = import(&paths, plain_opener()).unwrap();
    let note = pool
        .notes()
        .iter()
        .find(|note| note.contains("resumed"))
        .unwrap_or_else(|| panic!("no resume note in {:?}", pool.notes()))
        .clone();
    assert!(!note.contains("resumed at 0 of"), "{note}");
    pool.wait_resilver().unwrap();
    assert!(pool.resilver_status().unwrap().finished_ms.is_some());
    assert_clean(&pool);
    pool.close().unwrap();
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[1..], plain_opener()).unwrap();
    assert_contents(&pool, &contents);
    pool.close().unwrap();
}

const SECTOR: u64 = 512;
/// Sectors written (each flushed) before the attach.
const SECTORS_BEFORE: u64 = 256;

fn sector(n: u64) -> Vec<u8> {
    let mut rng = Rng(n.wrapping_mul(0x9e37_79b9) | 1);
    (0..SECTOR / 8)
        .flat_map(|_| rng.next().to_le_bytes())
        .collect()
}

/// With `CAIRN_RESILVER_RECORD` set, where the devices of a round in `dir` log their media
/// writes: a failing round keeps them with its images (`common::CrashRound`), to rebuild the
/// crashed images with `replay-cut`.
fn record_dir(dir: &Path) -> Option<PathBuf> {
    std::env::var_os("CAIRN_RESILVER_RECORD").map(|_| dir.join("record"))
}

/// A single-device pool on `d0.img` with devices fed by `power`, a 4 KiB-block volume and
/// sectors `0..SECTORS_BEFORE` written and flushed.
fn pool_on_switch(dir: &Path, seed: u64, power: &Arc<PowerSwitch>) -> Pool {
    let pool = Pool::create(
        "tank",
        &[VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: vec![spec(&dir.join("d0.img"))],
        }],
        &sized(),
        options(common::recording_opener(
            seed,
            Some(power.clone()),
            record_dir(dir),
        )),
    )
    .unwrap();
    pool.create_volume("tank/vol", 4 << 20, &[("volblocksize".into(), "4K".into())])
        .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    for n in 0..SECTORS_BEFORE {
        volume.write(n * SECTOR, &sector(n)).unwrap();
        volume.flush().unwrap();
    }
    pool.sync().unwrap();
    pool
}

/// Attaches `d1.img` and waits for the resilver while a writer writes and flushes sectors from
/// `SECTORS_BEFORE` on. Returns the outcome and how many sectors were acknowledged durable.
fn attach_while_writing(
    pool: &Pool,
    dir: &Path,
    power: &Arc<PowerSwitch>,
    seed: u64,
    options: ResilverOptions,
) -> (Result<(), cairn_engine::EngineError>, u64) {
    let acked = AtomicU64::new(SECTORS_BEFORE);
    let done = AtomicBool::new(false);
    let outcome = std::thread::scope(|scope| {
        scope.spawn(|| {
            let volume = pool.volume("tank/vol").unwrap();
            for n in SECTORS_BEFORE..(4 << 20) / SECTOR {
                if done.load(Ordering::SeqCst)
                    || volume.write(n * SECTOR, &sector(n)).is_err()
                    || volume.flush().is_err()
                {
                    break;
                }
                acked.store(n + 1, Ordering::SeqCst);
            }
        });
        let opener = common::recording_opener(seed + 1000, Some(power.clone()), record_dir(dir));
        let outcome = pool
            .attach(
                &dir.join("d0.img").display().to_string(),
                &spec(&dir.join("d1.img")),
                &sized(),
                &opener,
                options,
            )
            .and_then(|_| pool.wait_resilver());
        done.store(true, Ordering::SeqCst);
        outcome
    });
    (outcome, acked.load(Ordering::SeqCst))
}

fn assert_sectors(pool: &Pool, acked: u64, context: &str) {
    let volume = pool.volume("tank/vol").unwrap();
    for n in 0..acked {
        let mut found = vec![0u8; SECTOR as usize];
        volume.read(n * SECTOR, &mut found).unwrap();
        assert!(found == sector(n), "{context}: sector {n}");
    }
}

fn import_dir(dir: &Path, seed: u64, context: &str) -> Pool {
    Pool::import(
        &ImportSource::Directory(dir.into()),
        "tank",
        options(emulated_opener(seed, None)),
    )
    .unwrap_or_else(|err| panic!("{context}: import: {err}"))
}

/// Power cut at writes and flushes spread over an attach and its resilver, while a writer
/// commits the intent log: the pool imports with every acknowledged write and a clean check,
/// with one device or two; with two, the resilver finishes (resumed) and the new side alone
/// then holds every acknowledged write. `CAIRN_RESILVER_TRIP=N` replays one cut point (op
/// counts vary with timing); `CAIRN_RESILVER_RECORD=1` keeps the device write logs of a failing
/// round.
///
/// It once failed about one run in three: the resilver took the dataset roots from the live
/// directory, which a txg sync running meanwhile had already pointed at blocks still being
/// written; the walk could not read them, skipped their subtrees, and the resilver recorded a
/// new side holding almost none of the volume as complete (`SyncedTree`). It also hung now and
/// then in `wait_resilver`: the resilver waited for an intent-log lane failed by the cut to go
/// quiet before restarting its chain, which a failed lane never does.
#[test]
fn a_power_cut_during_attach_or_resilver_loses_nothing() {
    power_cut_rounds(ResilverOptions::default());
}

/// The same with the resilver done in windows of a few copies, each ended by a checkpoint: cuts
/// land between checkpoints, and the resilver resumed at import starts from the last durable
/// one.
#[test]
fn a_power_cut_during_a_windowed_resilver_loses_nothing() {
    power_cut_rounds(ResilverOptions {
        planned_copies_max: Some(8),
        ..Default::default()
    });
}

/// Whether an import note says a resilver resumed with part of it done and part left
/// ("resumed at N of M bytes").
fn resumed_midway_note(note: &str) -> bool {
    let Some((_, rest)) = note.split_once("resumed at ") else {
        return false;
    };
    let words: Vec<&str> = rest.split_whitespace().collect();
    let number = |index: usize| words.get(index).and_then(|word| word.parse::<u64>().ok());
    matches!((number(0), number(2)), (Some(copied), Some(total)) if copied > 0 && copied < total)
}

/// One round per cut point spread over an attach and its resilver run with `options`.
fn power_cut_rounds(options: ResilverOptions) {
    let ops_total = {
        let dir = tempfile::tempdir().unwrap();
        let power = Arc::new(PowerSwitch::with_seed(1));
        let pool = pool_on_switch(dir.path(), 1, &power);
        let before = power.ops_seen();
        let (outcome, _) = attach_while_writing(&pool, dir.path(), &power, 1, options);
        outcome.expect("attach and resilver");
        power.ops_seen() - before
    };
    let step = (ops_total / 30).max(1);
    let mut outcomes = std::collections::BTreeMap::<usize, usize>::new();
    let mut resumed_midway = 0;
    for trip in (1..=ops_total + 2).step_by(step as usize) {
        if let Ok(only) = std::env::var("CAIRN_RESILVER_TRIP")
            && only != trip.to_string()
        {
            continue;
        }
        let round = common::CrashRound::new();
        let dir = &round;
        let seed = trip * 7 + 3;
        let power = Arc::new(PowerSwitch::with_seed(seed));
        let pool = pool_on_switch(dir.path(), seed, &power);
        power.arm_after_ops(trip);
        let (outcome, acked) = attach_while_writing(&pool, dir.path(), &power, seed, options);
        let completed = outcome.is_ok() && !power.tripped();
        power.cut_now();
        drop(pool);

        let context = format!("power cut at op {trip} of {ops_total} (seed {seed})");
        let pool = import_dir(dir.path(), seed, &context);
        let context = format!(
            "{context}, outcome {outcome:?}, acked {acked}, notes {:?}, resilver {:?}, devices {:?}",
            pool.notes(),
            pool.resilver_status(),
            pool.status().tops[0]
                .leaves
                .iter()
                .map(|l| (l.name.clone(), l.resilvering))
                .collect::<Vec<_>>()
        );
        assert_sectors(&pool, acked, &context);
        if pool.notes().iter().any(|note| resumed_midway_note(note)) {
            resumed_midway += 1;
        }
        pool.wait_resilver()
            .unwrap_or_else(|err| panic!("{context}: resumed resilver: {err}"));
        let report = pool.check().unwrap();
        assert!(report.is_clean(), "{context}: {:?}", report.problems());
        let devices = pool.status().tops[0].leaves.len();
        if completed {
            assert_eq!(devices, 2, "{context}: the attach completed");
        }
        *outcomes.entry(devices).or_default() += 1;
        pool.close().unwrap();
        if devices == 2 {
            std::fs::remove_file(dir.path().join("d0.img")).unwrap();
            let pool = import_dir(dir.path(), seed, &context);
            assert_sectors(&pool, acked, &format!("{context}, new side alone"));
            pool.close().unwrap();
        }
    }
    eprintln!(
        "outcomes (devices after import): {outcomes:?}; resilvers resumed midway: {resumed_midway}"
    );
    assert!(
        outcomes.contains_key(&1) && outcomes.contains_key(&2),
        "cuts should land both before and after the attach: {outcomes:?}"
    );
    if options.planned_copies_max.is_some() {
        assert!(
            resumed_midway > 0,
            "cuts should land between the checkpoints of a windowed resilver"
        );
    }
}
