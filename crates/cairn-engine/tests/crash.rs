//! Crash consistency: a randomized volume workload on emulated disks with volatile write caches
//! is power-cut at a seeded point (writes in flight land in part, unflushed writes are dropped
//! or torn, unflushed discards may be lost); the pool must then import, pass `check`, and hold
//! exactly the contents of the last durable txg — or of the txg whose commit was in flight when
//! the power went, if its uberblock made it to media.
//!
//! Guaranteed per run: `CAIRN_CRASH_POINTS` (default 200) power cuts, each asserted to have
//! happened mid-workload (the workload saw its sync or write fail before it finished, and the
//! switch tripped on a device operation of the workload). A seed whose drawn cut point lies
//! beyond the end of its workload is run again with a point drawn inside it. Each round prints
//! its seed and what the cut caught; `CAIRN_CRASH_SEED` runs one seed only. A failing round
//! keeps its device write logs and cut point and names the directory and the `replay-cut`
//! command that rebuilds the crashed images (see `common::CrashRound`).
//!
//! Snapshots of the volume are taken and destroyed between writes (a destroy's frees go on in
//! the background, a few blocks per txg, so cuts land in them too): after the cut, every
//! snapshot reported created and not destroyed exists and holds what was written before it
//! was asked for, none whose destroy returned is back, and `check` proves the deadlists,
//! pending frees and snapshot space against the trees.
//!
//! Clones too: a round may clone the newest snapshot into `tank/clone`, write to the clone,
//! promote it (the volume's older snapshots move to it), promote the volume back and destroy
//! the clone, each step its own txg. A cut anywhere in that leaves a pool that checks clean,
//! every snapshot intact under one of the two names, and the clone, if it exists, holding its
//! origin's contents with or without its write.
//!
//! A second test cuts every operation of one txg sync in turn (18 on this mirror), so each
//! write of a sync — data, metadata, space log, every uberblock copy — is torn in flight once.

mod common;

use cairn_emulate::{CutReport, PowerSwitch};
use common::*;
use std::sync::Arc;

const VOLUME_SIZE: u64 = 2 << 20;
const BLOCK_SIZE: u64 = 4096;
const SYNCS_PER_RUN: u64 = 8;
const OPS_PER_SYNC: u64 = 12;

struct Outcome {
    /// Contents after the last sync that returned successfully.
    acknowledged: Vec<u8>,
    /// Contents submitted to a sync that did not return (it may or may not have committed).
    in_flight: Option<Vec<u8>>,
    /// Snapshots of `tank/vol` asked for, with the contents each must hold: reported created
    /// (`true`: it must exist after the cut) or cut short (it may exist; if so, it holds them).
    snapshots: Vec<(String, Vec<u8>, bool)>,
    /// Snapshots whose destroy returned: they must be gone.
    destroyed: Vec<String>,
    /// While a clone cycle runs: the contents `tank/clone` may hold (its origin's, and those
    /// with its write).
    clone_states: Vec<Vec<u8>>,
}

fn workload(pool: &cairn_engine::Pool, rng: &mut Rng) -> Outcome {
    let mut volume = pool.volume("tank/vol").expect("volume");
    let mut model = vec![0u8; VOLUME_SIZE as usize];
    let mut acknowledged = model.clone();
    let mut snapshots = Vec::new();
    let mut destroyed = Vec::new();
    let mut next_snapshot = 0;
    for _ in 0..SYNCS_PER_RUN {
        if !write_round(&volume, rng, &mut model) {
            // Writes only touch memory; an error here means the pool already suspended.
            return Outcome {
                acknowledged,
                in_flight: Some(model),
                snapshots,
                destroyed,
                clone_states: Vec::new(),
            };
        }
        // Most rounds end with a plain sync; some with an administrative change, which is
        // durable on return too (it runs as a sync task).
        // A snapshot holds everything written before it was asked for.
        // A destroy is of the oldest snapshot: until it returns, that snapshot may or may not
        // exist, and once it has returned it must not.
        let mut destroying = None;
        let mut rolling_back = None;
        let mut clone_states = Vec::new();
        let commit = match rng.below(9) {
            0 => admin_change(pool, rng),
            8 if snapshots.iter().any(|snapshot| snapshot.2) => {
                let origin = snapshots.iter().rev().find(|s| s.2).expect("checked");
                clone_cycle(pool, rng, origin, &mut clone_states)
            }
            1 | 2 => {
                let name = format!("tank/vol@s{next_snapshot}");
                next_snapshot += 1;
                snapshots.push((name.clone(), model.clone(), false));
                pool.snapshot(&[name], false).map(|_| ())
            }
            3 if !snapshots.is_empty() => {
                snapshots[0].2 = false;
                destroying = Some(snapshots[0].0.clone());
                pool.destroy_snapshot(&snapshots[0].0)
            }
            4 if snapshots.iter().any(|snapshot| snapshot.2) => {
                // Back to the oldest snapshot reported created, under this workload's own open
                // handle (-f), newer ones destroyed (-r): until it returns, they may or may
                // not exist, and the volume holds either state.
                let index = snapshots.iter().position(|s| s.2).expect("checked");
                // This round's writes first, on their own: the rollback's own syncs would
                // commit them, a state neither before nor after it.
                match pool.sync() {
                    Ok(_) => acknowledged = model.clone(),
                    Err(_) => {
                        return Outcome {
                            acknowledged,
                            in_flight: Some(model),
                            snapshots,
                            destroyed,
                            clone_states: Vec::new(),
                        };
                    }
                }
                for newer in &mut snapshots[index + 1..] {
                    newer.2 = false;
                }
                model = snapshots[index].1.clone();
                rolling_back = Some(index);
                pool.rollback(&snapshots[index].0, true, true)
            }
            _ => pool.sync().map(|_| ()),
        };
        match commit {
            Ok(()) => {
                acknowledged = model.clone();
                if let Some(index) = rolling_back {
                    destroyed.extend(snapshots.drain(index + 1..).map(|(name, _, _)| name));
                    // The old handle went read-only with the rollback.
                    volume = pool.volume("tank/vol").expect("volume after rollback");
                } else if let Some(gone) = destroying {
                    snapshots.remove(0);
                    destroyed.push(gone);
                } else if let Some(last) = snapshots.last_mut() {
                    last.2 = true;
                }
            }
            Err(_) => {
                return Outcome {
                    acknowledged,
                    in_flight: Some(model),
                    snapshots,
                    destroyed,
                    clone_states,
                };
            }
        }
    }
    Outcome {
        acknowledged,
        in_flight: None,
        snapshots,
        destroyed,
        clone_states: Vec::new(),
    }
}

/// One round of writes and trims of the workload, applied to `model` too; false if one failed.
fn write_round(volume: &cairn_dataset::Volume, rng: &mut Rng, model: &mut [u8]) -> bool {
    for _ in 0..OPS_PER_SYNC {
        let offset = rng.below(VOLUME_SIZE - 1);
        let len = (1 + rng.below(3 * BLOCK_SIZE)).min(VOLUME_SIZE - offset);
        let range = offset as usize..(offset + len) as usize;
        let result = if rng.below(5) == 0 {
            model[range].fill(0);
            volume.trim(offset, len)
        } else {
            let byte = (rng.next() as u8) | 1;
            let data: Vec<u8> = (0..len).map(|i| byte.wrapping_add(i as u8)).collect();
            model[range].copy_from_slice(&data);
            volume.write(offset, &data)
        };
        if result.is_err() {
            return false;
        }
    }
    true
}

/// Clones snapshot `origin` (name, contents) into `tank/clone`, writes to the clone, promotes
/// it, promotes the volume back and destroys the clone: each step durable on return, and the
/// pool as it was once all return. `states` gets the contents the clone may hold meanwhile.
fn clone_cycle(
    pool: &cairn_engine::Pool,
    rng: &mut Rng,
    origin: &(String, Vec<u8>, bool),
    states: &mut Vec<Vec<u8>>,
) -> Result<(), cairn_engine::EngineError> {
    let (name, contents, _) = origin;
    let offset = rng.below(VOLUME_SIZE - BLOCK_SIZE);
    let data = vec![(rng.next() as u8) | 1; BLOCK_SIZE as usize];
    let mut written = contents.clone();
    written[offset as usize..(offset + BLOCK_SIZE) as usize].copy_from_slice(&data);
    states.extend([contents.clone(), written]);
    pool.clone_snapshot(name, "tank/clone", &[])?;
    let clone = pool.volume("tank/clone")?;
    clone.write(offset, &data)?;
    clone.flush()?;
    drop(clone);
    pool.promote("tank/clone")?;
    pool.promote("tank/vol")?;
    pool.destroy_dataset("tank/clone")?;
    states.clear();
    Ok(())
}

/// Creates, fills and destroys a second volume, or flips a property.
fn admin_change(pool: &cairn_engine::Pool, rng: &mut Rng) -> Result<(), cairn_engine::EngineError> {
    let exists = pool.datasets()?.iter().any(|d| d.name == "tank/other");
    if !exists {
        pool.create_volume(
            "tank/other",
            1 << 20,
            &[("volblocksize".into(), "8K".into())],
        )?;
        let other = pool.volume("tank/other")?;
        let fill = vec![rng.next() as u8 | 1; 300_000];
        other.write(rng.below(500_000), &fill)?;
        Ok(())
    } else if rng.below(2) == 0 {
        pool.destroy_dataset("tank/other")
    } else {
        let checksum = ["fletcher4", "blake3", "sha256"][rng.below(3) as usize];
        pool.set_property("tank/vol", "checksum", checksum)
            .map(|_| ())
    }
}

/// A closed mirror pool with an empty `tank/vol` (its writes logged in `record` if given);
/// returns its device paths.
fn fresh_pool_with_volume(
    dir: &std::path::Path,
    record: Option<std::path::PathBuf>,
) -> Vec<std::path::PathBuf> {
    let paths = device_paths(dir, 2);
    let pool = create_mirror(&paths, recording_opener(0, None, record));
    pool.create_volume(
        "tank/vol",
        VOLUME_SIZE,
        &[("volblocksize".into(), "4K".into())],
    )
    .expect("create volume");
    pool.close().expect("close");
    paths
}

/// How a round ended.
enum Round {
    /// The power went mid-workload and the pool came back as it must, with this many
    /// snapshots checked against the model; whether the cut fell in a clone cycle.
    Cut(CutReport, usize, bool),
    /// The workload finished after this many device operations, before the cut point.
    Finished { ops: u64 },
}

fn run_seed(seed: u64, ops_before_cut: u64) -> Round {
    let round = CrashRound::new();
    let paths = fresh_pool_with_volume(round.path(), Some(round.record_dir()));
    let power = Arc::new(PowerSwitch::with_seed(seed));
    let opener = recording_opener(seed, Some(power.clone()), Some(round.record_dir()));
    let pool = import(&paths, opener).expect("import before run");
    let ops_before = power.ops_seen();
    power.arm_after_ops(ops_before_cut);
    let mut rng = Rng(seed);
    let outcome = workload(&pool, &mut rng);
    let ops = power.ops_seen() - ops_before;
    if outcome.in_flight.is_none() {
        // The workload finished first (the switch may have tripped on background work after
        // its last sync returned, which is not what this round is for).
        power.disarm();
        let _ = pool.close();
        return Round::Finished { ops };
    }
    let cut = power.last_cut().expect("a tripped switch reports its cut");
    round.write_cut_point(&format!(
        "crash.rs seed {seed}, armed to cut after {ops_before_cut} operations: {cut}"
    ));
    assert!(
        outcome.in_flight.is_some() && cut.tripped_by.is_some(),
        "seed {seed} cut {ops_before_cut}: the cut did not happen mid-workload ({cut})"
    );
    drop(pool);

    let pool = import(&paths, plain_opener())
        .unwrap_or_else(|err| panic!("seed {seed} cut {ops_before_cut}: import failed: {err}"));
    let report = pool.check().expect("check runs");
    assert!(
        report.is_clean(),
        "seed {seed} cut {ops_before_cut}: check found problems: {:#?}",
        report.problems()
    );
    let volume = pool.volume("tank/vol").expect("volume after import");
    let mut contents = vec![0u8; VOLUME_SIZE as usize];
    volume.read(0, &mut contents).expect("read back");
    let matches_acked = contents == outcome.acknowledged;
    let matches_in_flight = outcome.in_flight.as_ref().is_some_and(|m| *m == contents);
    if std::env::var_os("CAIRN_CRASH_VERBOSE").is_some() {
        eprintln!(
            "seed {seed} cut {ops_before_cut}: in flight {}, matches durable {matches_acked}, matches in-flight {matches_in_flight}",
            outcome.in_flight.is_some()
        );
    }
    assert!(
        matches_acked || matches_in_flight,
        "seed {seed} cut {ops_before_cut}: contents match neither the last durable txg nor the one in flight \
         (first difference from durable at byte {:?})",
        contents
            .iter()
            .zip(outcome.acknowledged.iter())
            .position(|(a, b)| a != b)
    );
    let snapshots_checked = check_snapshots(&pool, &outcome.snapshots, seed, ops_before_cut);
    check_clone(&pool, &outcome.clone_states, seed, ops_before_cut);
    let mid_clone_cycle = !outcome.clone_states.is_empty();
    for gone in &outcome.destroyed {
        assert!(
            pool.snapshot_objset(gone).is_err(),
            "seed {seed} cut {ops_before_cut}: {gone} was destroyed and is back"
        );
    }
    pool.close().expect("close after check");
    Round::Cut(cut, snapshots_checked, mid_clone_cycle)
}

/// A clone left by a cut mid-cycle holds one of the states it may hold; none exists outside
/// a cycle.
fn check_clone(pool: &cairn_engine::Pool, states: &[Vec<u8>], seed: u64, cut: u64) {
    let Ok(clone) = pool.volume("tank/clone") else {
        return;
    };
    assert!(
        !states.is_empty(),
        "seed {seed} cut {cut}: a clone exists outside a clone cycle"
    );
    let mut contents = vec![0u8; VOLUME_SIZE as usize];
    clone.read(0, &mut contents).expect("read the clone");
    assert!(
        states.contains(&contents),
        "seed {seed} cut {cut}: the clone holds neither its origin's contents nor those with \
         its write"
    );
}

/// Every snapshot reported created exists and holds what was written before it; one cut
/// short holds the same if it exists at all.
fn check_snapshots(
    pool: &cairn_engine::Pool,
    snapshots: &[(String, Vec<u8>, bool)],
    seed: u64,
    cut: u64,
) -> usize {
    let mut checked = 0;
    for (name, expected, reported) in snapshots {
        // A cut between the two promotes of a clone cycle leaves the volume's older snapshots
        // with the clone.
        let moved = name.replace("tank/vol@", "tank/clone@");
        let objset = match pool
            .snapshot_objset(name)
            .or_else(|_| pool.snapshot_objset(&moved))
        {
            Ok(objset) => objset,
            Err(err) => {
                assert!(
                    !reported,
                    "seed {seed} cut {cut}: {name} was reported created: {err}"
                );
                continue;
            }
        };
        for (index, want) in expected.chunks(BLOCK_SIZE as usize).enumerate() {
            let block = objset
                .read_block(cairn_dataset::VOLUME_OBJECT, index as u64)
                .unwrap_or_else(|err| panic!("seed {seed} cut {cut}: {name} block {index}: {err}"));
            let same = block.map_or_else(|| want.iter().all(|b| *b == 0), |b| b[..] == want[..]);
            assert!(
                same,
                "seed {seed} cut {cut}: {name} block {index} differs from the model"
            );
        }
        checked += 1;
    }
    checked
}

#[test]
fn power_cut_at_seeded_points_leaves_the_last_durable_txg() {
    let points: u64 = std::env::var("CAIRN_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let only_seed: Option<u64> = std::env::var("CAIRN_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok());
    // Calibrate: how many device writes and flushes does one full run take?
    let total_ops = {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = fresh_pool_with_volume(dir.path(), None);
        let power = Arc::new(PowerSwitch::new());
        let pool = import(&paths, emulated_opener(1, Some(power.clone()))).expect("import");
        let seen_before = power.ops_seen();
        let _ = workload(&pool, &mut Rng(1));
        let total = power.ops_seen() - seen_before;
        pool.close().expect("close");
        total
    };
    assert!(
        total_ops > 50,
        "workload issued only {total_ops} device operations"
    );
    eprintln!("crash test: one run issues {total_ops} device writes and flushes");
    let seeds: Vec<u64> = match only_seed {
        Some(seed) => vec![seed],
        None => (1..=points).collect(),
    };
    let (mut cuts, mut torn_in_flight, mut snapshots_checked) = (0u64, 0u64, 0usize);
    let mut clone_cycle_cuts = 0u64;
    for &seed in &seeds {
        let mut cut = 1 + Rng(seed ^ 0x5eed).below(total_ops);
        let mut attempts = 0;
        let report = loop {
            attempts += 1;
            match run_seed(seed, cut) {
                Round::Cut(report, checked, mid_clone_cycle) => {
                    snapshots_checked += checked;
                    clone_cycle_cuts += u64::from(mid_clone_cycle);
                    break report;
                }
                // This seed's workload is shorter than the calibration run's: cut inside it.
                Round::Finished { ops } if attempts < 4 => {
                    cut = 1 + Rng(seed ^ 0x5eed ^ attempts).below(ops.max(1))
                }
                Round::Finished { ops } => panic!(
                    "seed {seed}: {attempts} attempts finished before their cut point \
                     (last cut {cut}, {ops} operations)"
                ),
            }
        };
        eprintln!("crash seed {seed}: {report}");
        cuts += 1;
        torn_in_flight += u64::from(report.in_flight_writes > 0);
    }
    assert_eq!(cuts, seeds.len() as u64, "every round cut mid-workload");
    if seeds.len() >= 20 {
        assert!(
            torn_in_flight * 2 >= cuts,
            "only {torn_in_flight} of {cuts} cuts caught a write in flight"
        );
        assert!(
            snapshots_checked as u64 >= cuts / 2,
            "only {snapshots_checked} snapshots checked after {cuts} cuts"
        );
        assert!(
            clone_cycle_cuts > 0,
            "no cut of {cuts} fell in a clone cycle"
        );
    }
    eprintln!(
        "crash test: {cuts} power cuts, each mid-workload; {torn_in_flight} tore a write in \
         flight; {snapshots_checked} snapshots checked against the model; {clone_cycle_cuts} \
         cut a clone cycle"
    );
}

/// Every cut point of one txg sync, one after the other: whichever write the cut catches in
/// flight and tears (data, metadata, the space log, a label's uberblock copy), the pool imports
/// at the synced txg or at the one being synced (a torn uberblock copy fails its checksum and
/// the previous one is used), holds exactly that txg's contents (the new one if the sync
/// returned Ok), and `check` is clean.
#[test]
fn every_cut_point_of_one_sync_leaves_one_of_the_two_txgs() {
    let write_round = |pool: &cairn_engine::Pool, fill: u8| {
        let volume = pool.volume("tank/vol").expect("volume");
        for block in (0..VOLUME_SIZE / BLOCK_SIZE).step_by(7) {
            let data = vec![fill.wrapping_add(block as u8) | 1; BLOCK_SIZE as usize];
            volume.write(block * BLOCK_SIZE, &data).expect("write");
        }
        let mut contents = vec![0u8; VOLUME_SIZE as usize];
        volume.read(0, &mut contents).expect("read");
        contents
    };
    let mut sync_ops = None;
    let (mut cut_point, mut torn, mut new_txg) = (1u64, 0u64, 0u64);
    while sync_ops.is_none_or(|ops| cut_point <= ops) {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = fresh_pool_with_volume(dir.path(), None);
        let power = Arc::new(PowerSwitch::with_seed(cut_point));
        let pool = import(&paths, emulated_opener(cut_point, Some(power.clone()))).expect("import");
        let synced = write_round(&pool, 0x10);
        pool.sync().expect("first sync");
        let in_flight = write_round(&pool, 0x80);
        let before = power.ops_seen();
        if sync_ops.is_some() {
            power.arm_after_ops(cut_point);
        }
        let outcome = pool.sync();
        if sync_ops.is_none() {
            // The first round, not cut, measures how many operations a sync takes.
            assert!(outcome.is_ok() && !power.tripped(), "the calibration sync");
            sync_ops = Some(power.ops_seen() - before);
            power.cut_now();
            continue;
        }
        let label = format!("cut at operation {cut_point} of the sync");
        let cut = power
            .last_cut()
            .unwrap_or_else(|| panic!("{label}: the switch did not trip"));
        torn += u64::from(cut.in_flight_sectors_landed > 0 && cut.in_flight_sectors_lost > 0);
        drop(pool);
        let pool = import(&paths, plain_opener())
            .unwrap_or_else(|err| panic!("{label} ({cut}): import failed: {err}"));
        let report = pool.check().expect("check runs");
        assert!(
            report.is_clean(),
            "{label} ({cut}): {:?}",
            report.problems()
        );
        let volume = pool.volume("tank/vol").expect("volume");
        let mut contents = vec![0u8; VOLUME_SIZE as usize];
        volume.read(0, &mut contents).expect("read back");
        // A sync may return Ok although the power went during it: on a mirror, once one side
        // has its uberblock flushed. Then that txg must be the one imported.
        assert!(
            contents == in_flight || (outcome.is_err() && contents == synced),
            "{label} ({cut}): the volume holds neither the synced txg nor the one in flight \
             (the sync returned {outcome:?})"
        );
        new_txg += u64::from(contents == in_flight);
        drop(volume);
        pool.close().expect("close");
        cut_point += 1;
    }
    let ops = sync_ops.expect("calibrated");
    eprintln!(
        "one sync: {ops} operations, each cut; {torn} cuts tore a write in part, \
         {new_txg} left the new txg"
    );
    // Cuts before the first uberblock copy lands leave the old txg, later ones the new one.
    assert!(
        new_txg > 0 && new_txg < ops,
        "{new_txg} of {ops} cuts left the new txg"
    );
    assert!(
        ops >= 6,
        "a sync of data, metadata and uberblocks takes {ops} operations"
    );
    assert!(
        torn * 2 >= ops,
        "only {torn} of {ops} cuts tore a write in part"
    );
}
