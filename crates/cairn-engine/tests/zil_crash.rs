//! Intent-log durability under power cuts.
//!
//! Writers issue random writes (some with FUA), flushes and trims against a volume whose pool
//! (emulated hdd-7200 with a volatile cache, random early destage) may have an emulated log
//! device, while a power switch shared by every device trips at a seeded operation count:
//! unflushed writes vanish or are torn. After the cut the pool is imported again (which replays
//! the log) and every 512-byte sector is checked against what the writers were told:
//! - a sector whose last durable acknowledgement (a FUA write, or a write completed before an
//!   acknowledged flush) was version D holds version D or a later one of that sector — never
//!   an older one, never a mix;
//! - `check` is clean.
//!
//! Each writer owns a disjoint region, so "later" is well defined per sector. Runs
//! `CAIRN_ZIL_CRASH_POINTS` (default 200) seeds mixing QD1 and 8 writers, with and without a log
//! device, 4K and 16K volblocksize, logbias latency and throughput (writes in place, only their
//! block pointers logged), compression off and on; `CAIRN_ZIL_CRASH_SEED` replays one seed (with
//! `CAIRN_ZIL_CRASH_TRIP`, at the cut point a failure names). Guaranteed per run: one power
//! cut per seed, each asserted mid-workload (the switch tripped on a device operation while the
//! writers ran, and a writer had an operation fail: some operations were acknowledged, not all);
//! a seed whose drawn cut point lies beyond its workload runs again with a point inside it. Each
//! round prints its seed and what the cut caught (writes in flight torn, unflushed data). A
//! failing round keeps its device write logs and cut point and names the directory and the
//! `replay-cut` command that rebuilds the crashed images (see `common::CrashRound`).
//!
//! (This test found that a space-log checkpoint taken while log blocks were being allocated for
//! the next txg recorded them twice, so an import rewound and lost acknowledged writes.)

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod common;

use cairn_dataset::{Volume, WriteOptions};
use cairn_device::spec::DeviceSpec;
use cairn_emulate::{CutReport, PowerSwitch};
use cairn_engine::{CreateOptions, DeviceOpener, ImportSource, Pool, PoolOptions, VdevGroup};
use common::Rng;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const SECTOR: u64 = 512;
const VOLUME_BYTES: u64 = 4 << 20;
const DEVICE_BYTES: u64 = 64 << 20;
const OPS_PER_WRITER: usize = 40;

fn opener(seed: u64, power: Option<Arc<PowerSwitch>>) -> DeviceOpener {
    common::emulated_opener(seed, power)
}

fn pool_options(opener: DeviceOpener, ignore_missing_log: bool) -> PoolOptions {
    PoolOptions {
        txg: common::manual_txg(),
        opener,
        space_log_delta_blocks_max: 3,
        ignore_missing_log,
        ..PoolOptions::default()
    }
}

fn spec(path: &Path) -> DeviceSpec {
    DeviceSpec {
        path: path.to_path_buf(),
        model: None,
    }
}

/// Tag of a sector's content: 0 is zeros (never written or trimmed).
fn pattern(tag: u64, sector: u64) -> Vec<u8> {
    if tag == 0 {
        return vec![0; SECTOR as usize];
    }
    let mut rng = Rng(tag.wrapping_mul(0x9e37_79b9).wrapping_add(sector));
    let mut out = Vec::with_capacity(SECTOR as usize);
    while out.len() < SECTOR as usize {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out
}

/// Per-sector history of one writer's region.
struct Region {
    first_sector: u64,
    /// Per sector: every version written, oldest first (tag 0 = zeros), starting with zeros.
    versions: Vec<Vec<u64>>,
    /// Per sector: index into `versions` of the newest durably acknowledged version.
    durable: Vec<usize>,
}

impl Region {
    fn new(first_sector: u64, sectors: u64) -> Region {
        Region {
            first_sector,
            versions: vec![vec![0]; sectors as usize],
            durable: vec![0; sectors as usize],
        }
    }

    fn record(&mut self, sector: u64, tag: u64) {
        self.versions[(sector - self.first_sector) as usize].push(tag);
    }

    /// Everything completed so far is durable (an acknowledged flush).
    fn all_durable(&mut self) {
        for (durable, versions) in self.durable.iter_mut().zip(&self.versions) {
            *durable = versions.len() - 1;
        }
    }

    fn make_durable(&mut self, sector: u64) {
        let index = (sector - self.first_sector) as usize;
        self.durable[index] = self.versions[index].len() - 1;
    }
}

struct Scenario {
    writers: usize,
    log_device: bool,
    volblocksize: &'static str,
    /// `logbias=throughput`: every whole block of a synchronous write goes in place.
    throughput: bool,
    /// `compression=on`: a 16K block with zeroed (never written, trimmed) sectors is stored
    /// compressed, through the txg and in place.
    compression: bool,
    trip_after_ops: u64,
}

fn scenario(seed: u64) -> Scenario {
    let mut rng = Rng(seed ^ 0x5eed);
    Scenario {
        writers: if seed.is_multiple_of(2) { 1 } else { 8 },
        log_device: seed % 4 < 2,
        volblocksize: if seed.is_multiple_of(3) { "16K" } else { "4K" },
        throughput: seed % 5 < 2,
        compression: seed % 7 < 3,
        trip_after_ops: 20 + rng.below(600),
    }
}

fn create_pool(dir: &Path, scenario: &Scenario, opener: DeviceOpener) -> Pool {
    let mut groups = vec![VdevGroup {
        mirror: false,
        raidz_parity: None,
        log: false,
        devices: vec![spec(&dir.join("d0.img"))],
    }];
    if scenario.log_device {
        groups.push(VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: true,
            devices: vec![spec(&dir.join("slog.img"))],
        });
    }
    Pool::create(
        "tank",
        &groups,
        &CreateOptions {
            create_size_bytes: Some(DEVICE_BYTES),
            ..Default::default()
        },
        pool_options(opener, false),
    )
    .expect("create pool")
}

fn device_specs(dir: &Path, log_device: bool) -> Vec<DeviceSpec> {
    let mut specs = vec![spec(&dir.join("d0.img"))];
    if log_device {
        specs.push(spec(&dir.join("slog.img")));
    }
    specs
}

/// One writer's workload; stops at the first error (the power is gone).
fn run_writer(
    volume: &cairn_dataset::Volume,
    region: &mut Region,
    sectors: u64,
    writer: usize,
    seed: u64,
    stop: &AtomicBool,
) {
    let mut rng = Rng(seed.wrapping_mul(1000).wrapping_add(writer as u64));
    for op in 0..OPS_PER_WRITER {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let choice = rng.below(100);
        let first = region.first_sector + rng.below(sectors);
        // Mostly small writes; one in eight is up to 64 KiB (several whole blocks).
        let most = if rng.below(8) == 0 { 128 } else { 24 };
        let count = (1 + rng.below(most)).min(region.first_sector + sectors - first);
        let tag = (seed << 24) | ((writer as u64) << 16) | (op as u64 + 1);
        let options = WriteOptions {
            fua: rng.below(3) == 0,
            lane: writer,
        };
        let outcome = if choice < 70 {
            let mut data = Vec::with_capacity((count * SECTOR) as usize);
            for sector in first..first + count {
                data.extend_from_slice(&pattern(tag, sector));
            }
            // The versions exist from the moment the write may reach media.
            for sector in first..first + count {
                region.record(sector, tag);
            }
            // Plain writes go the way the NBD server sends them: taken at once when the
            // volume can (whole blocks, nothing to wait for), else the ordinary call.
            let data = bytes::Bytes::from(data);
            let offset = first * SECTOR;
            let now = match options.fua {
                true => None,
                false => volume.try_write_now(offset, &data, options),
            };
            now.unwrap_or_else(|| volume.write_bytes_with(offset, data, options))
                .map(|()| options.fua)
        } else if choice < 80 {
            for sector in first..first + count {
                region.record(sector, 0);
            }
            volume
                .trim_with(first * SECTOR, count * SECTOR, options)
                .map(|()| options.fua)
        } else {
            match volume.flush() {
                Ok(()) => {
                    region.all_durable();
                    continue;
                }
                Err(err) => Err(err),
            }
        };
        match outcome {
            Ok(true) => {
                for sector in first..first + count {
                    region.make_durable(sector);
                }
            }
            Ok(false) => {}
            Err(_) => {
                stop.store(true, Ordering::Relaxed);
                return;
            }
        }
    }
}

fn verify(volume: &cairn_dataset::Volume, regions: &[Region], label: &str) {
    for region in regions {
        for (index, versions) in region.versions.iter().enumerate() {
            let sector = region.first_sector + index as u64;
            let mut found = vec![0u8; SECTOR as usize];
            volume
                .read(sector * SECTOR, &mut found)
                .unwrap_or_else(|err| panic!("{label}: read sector {sector}: {err}"));
            let durable = region.durable[index];
            let allowed = &versions[durable..];
            let matched = allowed.iter().any(|&tag| pattern(tag, sector) == found);
            if !matched {
                let older = versions[..durable]
                    .iter()
                    .position(|&tag| pattern(tag, sector) == found);
                let elsewhere = regions.iter().find_map(|r| {
                    r.versions.iter().enumerate().find_map(|(i, tags)| {
                        let other = r.first_sector + i as u64;
                        tags.iter()
                            .find(|&&tag| pattern(tag, other) == found)
                            .map(|tag| (other, *tag))
                    })
                });
                eprintln!(
                    "found bytes equal to (sector, tag) {elsewhere:?}; first bytes {:?}",
                    &found[..16]
                );
                // Shifted by a few bytes?
                for r in regions {
                    for (i, tags) in r.versions.iter().enumerate() {
                        let other = r.first_sector + i as u64;
                        for &tag in tags {
                            let p = pattern(tag, other);
                            for shift in 1..512usize {
                                if found[..512 - shift] == p[shift..]
                                    || found[shift..] == p[..512 - shift]
                                {
                                    eprintln!(
                                        "partial match: sector {other} tag {tag} shift {shift}"
                                    );
                                }
                            }
                        }
                    }
                }
                let zeros = found.iter().filter(|&&b| b == 0).count();
                eprintln!("zero bytes in sector: {zeros}");
                panic!(
                    "{label}: sector {sector} holds {} (allowed versions {allowed:?} of {versions:?}, durable index {durable})",
                    match older {
                        Some(i) =>
                            format!("an older version (index {i}): an acknowledged write was lost"),
                        None => "bytes that were never written there".to_string(),
                    }
                );
            }
        }
    }
}

/// How one attempt at a seed ended.
enum Round {
    /// Cut mid-workload and verified: what the cut caught, records written in place, and
    /// the volume's blocks stored compressed after the replay.
    Cut {
        report: CutReport,
        in_place: u64,
        compressed: u64,
    },
    /// The writers finished (after this many device operations) before the cut point.
    Finished { ops: u64 },
}

/// Runs one seed, with its scenario's cut point unless `trip_after_ops` overrides it.
fn run_seed(seed: u64, trip_after_ops: Option<u64>) -> Round {
    let mut scenario = scenario(seed);
    if let Some(ops) = trip_after_ops {
        scenario.trip_after_ops = ops;
    }
    let label = format!(
        "seed {seed} ({} writers, log device {}, volblocksize {}, throughput {}, trip after {} ops)",
        scenario.writers,
        scenario.log_device,
        scenario.volblocksize,
        scenario.throughput,
        scenario.trip_after_ops
    );
    // Kept, with the write logs and cut point, if this round panics.
    let dir = common::CrashRound::new();
    let power = Arc::new(PowerSwitch::with_seed(seed));
    let recording = common::recording_opener(seed, Some(power.clone()), Some(dir.record_dir()));
    let pool = create_pool(dir.path(), &scenario, recording);
    let logbias = if scenario.throughput {
        "throughput"
    } else {
        "latency"
    };
    pool.create_volume(
        "tank/vol",
        VOLUME_BYTES,
        &[
            ("volblocksize".into(), scenario.volblocksize.into()),
            ("logbias".into(), logbias.into()),
            (
                "compression".into(),
                if scenario.compression { "on" } else { "off" }.into(),
            ),
        ],
    )
    .expect("create volume");
    let volume = pool.volume("tank/vol").expect("volume");
    let ops_before = power.ops_seen();
    power.arm_after_ops(scenario.trip_after_ops);

    let sectors_total = VOLUME_BYTES / SECTOR;
    let per_writer = sectors_total / scenario.writers as u64;
    let mut regions: Vec<Region> = (0..scenario.writers)
        .map(|w| Region::new(w as u64 * per_writer, per_writer))
        .collect();
    let stop = AtomicBool::new(false);
    let finished = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for (writer, region) in regions.iter_mut().enumerate() {
            let volume = &volume;
            let stop = &stop;
            let finished = &finished;
            scope.spawn(move || {
                run_writer(volume, region, per_writer, writer, seed, stop);
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }
        // Txg syncs interleave with the log: some writes reach the pool the normal way.
        let mut rng = Rng(seed);
        while finished.load(Ordering::Relaxed) < scenario.writers && !power.tripped() {
            std::thread::sleep(std::time::Duration::from_millis(1 + rng.below(4)));
            if rng.below(4) == 0 && pool.sync().is_err() {
                break;
            }
        }
    });
    let in_place = pool
        .intent_log_stats()
        .iter()
        .map(|(_, stats)| stats.records_in_place)
        .sum();
    if !stop.load(Ordering::Relaxed) {
        // Every writer finished before the cut point: not the round this seed is for.
        let ops = power.ops_seen() - ops_before;
        power.disarm();
        drop(volume);
        let _ = pool.close();
        return Round::Finished { ops };
    }
    let cut = power
        .last_cut()
        .expect("a writer failed: the switch tripped");
    dir.write_cut_point(&format!("zil_crash.rs {label}: {cut}"));
    eprintln!("zil crash {label}: {cut}");
    assert!(
        cut.tripped_by.is_some(),
        "{label}: the cut did not happen mid-workload ({cut})"
    );
    drop(volume);
    drop(pool);

    let pool = Pool::import(
        &ImportSource::Devices(device_specs(dir.path(), scenario.log_device)),
        "tank",
        pool_options(opener(seed, None), false),
    )
    .unwrap_or_else(|err| panic!("{label}: import after the cut: {err}"));
    let label = format!("{label}; import notes: {:?}", pool.notes());
    let volume = pool.volume("tank/vol").expect("volume after import");
    verify(&volume, &regions, &label);
    let compressed = pool
        .dataset_blocks("tank/vol")
        .expect("the volume's blocks")
        .iter()
        .filter(|bp| bp.level == 0 && bp.compression != cairn_format::Compression::Off)
        .count() as u64;
    let report = pool.check().expect("check");
    assert!(
        report.is_clean(),
        "{label}: check after replay: {:?}",
        report.problems()
    );
    drop(volume);
    pool.close().expect("close");
    Round::Cut {
        report: cut,
        in_place,
        compressed,
    }
}

/// Runs `seed` until one attempt cuts mid-workload (a later attempt draws its cut point inside
/// the fewest operations an earlier one issued: how many a run issues depends on timing, so
/// drawing inside only the last one's let all four attempts of seed 153 finish uncut once);
/// returns what that cut caught, the records written in place and the blocks compressed.
fn cut_seed(seed: u64) -> (CutReport, u64, u64) {
    const ATTEMPTS: u64 = 8;
    let mut trip = None;
    let mut fewest_ops = u64::MAX;
    for attempt in 1..=ATTEMPTS {
        match run_seed(seed, trip) {
            Round::Cut {
                report,
                in_place,
                compressed,
            } => {
                return (report, in_place, compressed);
            }
            Round::Finished { ops } => {
                fewest_ops = fewest_ops.min(ops);
                trip = Some(1 + Rng(seed ^ (attempt << 40)).below(fewest_ops.max(1)));
            }
        }
    }
    panic!("seed {seed}: {ATTEMPTS} attempts finished before their cut point");
}

/// `CAIRN_ZIL_CRASH_POINTS` seeds (default 200), or the one in `CAIRN_ZIL_CRASH_SEED`.
#[test]
fn acknowledged_sync_writes_survive_power_cuts() {
    if let Ok(seed) = std::env::var("CAIRN_ZIL_CRASH_SEED") {
        let seed = seed.parse().expect("CAIRN_ZIL_CRASH_SEED is a number");
        // The failure message names the cut point; CAIRN_ZIL_CRASH_TRIP replays that one.
        let trip: Option<u64> = std::env::var("CAIRN_ZIL_CRASH_TRIP")
            .ok()
            .map(|v| v.parse().expect("CAIRN_ZIL_CRASH_TRIP is a number"));
        let in_place = match trip {
            Some(trip) => match run_seed(seed, Some(trip)) {
                Round::Cut { in_place, .. } => in_place,
                Round::Finished { ops } => panic!("finished after {ops} operations, uncut"),
            },
            None => cut_seed(seed).1,
        };
        eprintln!("records written in place: {in_place}");
        return;
    }
    let points: u64 = std::env::var("CAIRN_ZIL_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let (mut in_place, mut cuts, mut torn_in_flight, mut compressed) = (0, 0u64, 0u64, 0u64);
    for seed in 1..=points {
        let (report, records, packed) = cut_seed(seed);
        in_place += records;
        compressed += packed;
        cuts += 1;
        torn_in_flight += u64::from(report.in_flight_writes > 0);
    }
    eprintln!(
        "zil crash test: {cuts} power cuts, each mid-workload; {torn_in_flight} tore a write in flight; {compressed} blocks stored compressed after replay"
    );
    if points >= 20 {
        assert!(
            in_place > 0,
            "no seed wrote in place: that path went untested"
        );
        assert!(
            compressed > 0,
            "no seed left a compressed block: that path went untested"
        );
        assert!(
            torn_in_flight * 2 >= cuts,
            "only {torn_in_flight} of {cuts} cuts caught a write in flight"
        );
    }
}

/// A pool of one disk (and a log device if asked) fed by `power` if given, with the test
/// volume created with `properties`, and that volume.
fn single_writer_volume(
    dir: &Path,
    seed: u64,
    log_device: bool,
    power: Option<&Arc<PowerSwitch>>,
    properties: &[(String, String)],
) -> (Pool, Arc<Volume>) {
    let scenario = Scenario {
        writers: 1,
        log_device,
        volblocksize: "4K",
        throughput: false,
        compression: false,
        trip_after_ops: 0,
    };
    let pool = create_pool(dir, &scenario, opener(seed, power.cloned()));
    pool.create_volume("tank/vol", VOLUME_BYTES, properties)
        .expect("volume");
    let volume = pool.volume("tank/vol").expect("volume");
    (pool, volume)
}

/// Imports the pool of `single_writer_volume` (with its log device) after a power cut.
fn import_after_cut(
    dir: &Path,
    seed: u64,
    ignore_missing_log: bool,
) -> Result<Pool, cairn_engine::EngineError> {
    let (d0, slog) = paths(dir);
    Pool::import(
        &ImportSource::Devices(vec![spec(&d0), spec(&slog)]),
        "tank",
        pool_options(opener(seed, None), ignore_missing_log),
    )
}

fn paths(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("d0.img"), dir.join("slog.img"))
}

#[test]
fn flush_commits_the_log_without_a_txg_sync_and_replay_restores_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let power = Arc::new(PowerSwitch::with_seed(7));
    let (pool, volume) = single_writer_volume(dir.path(), 7, true, Some(&power), &[]);
    // The first commit starts the chain (one txg sync records its header); after that a
    // flush is a log write plus a device flush, and no txg syncs.
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    let synced_before = pool.status().txg;
    for i in 1..50u64 {
        volume.write(i * SECTOR, &pattern(i + 1, i)).unwrap();
        volume.flush().unwrap();
    }
    volume
        .write_with(
            100 * SECTOR,
            &pattern(99, 100),
            WriteOptions { fua: true, lane: 0 },
        )
        .unwrap();
    assert_eq!(
        pool.status().txg,
        synced_before,
        "flushes must not sync txgs"
    );
    let stats = &pool.intent_log_stats()[0].1;
    assert!(stats.blocks_written >= 50, "{stats:?}");
    assert_eq!(stats.fallbacks, 0, "{stats:?}");
    assert_eq!(stats.chains_started, 1, "{stats:?}");
    let log_devices = pool.log_devices();
    assert_eq!(log_devices.len(), 1);
    assert!(
        log_devices[0].writes >= 50,
        "log blocks go to the log device: {log_devices:?}"
    );
    power.cut_now();
    drop(volume);
    drop(pool);

    let pool = import_after_cut(dir.path(), 7, false).expect("import");
    let notes = pool.notes().join("\n");
    assert!(notes.contains("replayed 50 intent-log records"), "{notes}");
    let volume = pool.volume("tank/vol").unwrap();
    for i in 0..50u64 {
        let mut found = vec![0u8; SECTOR as usize];
        volume.read(i * SECTOR, &mut found).unwrap();
        assert_eq!(found, pattern(i + 1, i), "sector {i}");
    }
    let mut found = vec![0u8; SECTOR as usize];
    volume.read(100 * SECTOR, &mut found).unwrap();
    assert_eq!(found, pattern(99, 100));
    assert!(pool.check().unwrap().is_clean());
    drop(volume);
    pool.close().unwrap();
}

/// Plain writes taken at once (`try_write_now`, the NBD server's fast path) are logged with
/// their data: a FLUSH after them reads nothing back, and replay after a power cut restores
/// them.
#[test]
fn plain_writes_taken_at_once_are_flushed_from_their_records_and_replayed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let power = Arc::new(PowerSwitch::with_seed(11));
    let properties = [("volblocksize".to_string(), "4K".to_string())];
    let (pool, volume) = single_writer_volume(dir.path(), 11, true, Some(&power), &properties);
    const BLOCK: u64 = 4096;
    let block = |i: u64| -> Vec<u8> { (0..BLOCK / SECTOR).flat_map(|s| pattern(i, s)).collect() };
    let options = WriteOptions {
        fua: false,
        lane: 0,
    };
    for i in 0..40u64 {
        let data = bytes::Bytes::from(block(i + 1));
        let result = volume.try_write_now(i * BLOCK, &data, options);
        assert!(matches!(result, Some(Ok(()))), "write {i}: {result:?}");
        volume.flush().unwrap();
    }
    // Partial blocks and FUA writes are not taken at once (the former may read the disk, the
    // latter commits): nothing changed, the caller makes the ordinary call.
    let partial = bytes::Bytes::from(vec![7u8; SECTOR as usize]);
    assert!(volume.try_write_now(0, &partial, options).is_none());
    let fua = WriteOptions { fua: true, lane: 0 };
    let whole = bytes::Bytes::from(block(99));
    assert!(volume.try_write_now(0, &whole, fua).is_none());
    let stats = &pool.intent_log_stats()[0].1;
    assert_eq!(stats.needcopy_reads, 0, "{stats:?}");
    assert_eq!(stats.fallbacks, 0, "{stats:?}");
    power.cut_now();
    drop(volume);
    drop(pool);

    let pool = import_after_cut(dir.path(), 11, false).expect("import");
    let volume = pool.volume("tank/vol").unwrap();
    for i in 0..40u64 {
        let mut found = vec![0u8; BLOCK as usize];
        volume.read(i * BLOCK, &mut found).unwrap();
        assert_eq!(found, block(i + 1), "block {i}");
    }
    assert!(pool.check().unwrap().is_clean());
    drop(volume);
    pool.close().unwrap();
}

#[test]
fn a_missing_log_device_is_a_clear_error_unless_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let power = Arc::new(PowerSwitch::with_seed(9));
    let (pool, volume) = single_writer_volume(dir.path(), 9, true, Some(&power), &[]);
    // The first commit starts the chain with a txg sync: sector 0 is in the pool proper.
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    volume.write(SECTOR, &pattern(2, 1)).unwrap();
    volume.flush().unwrap();
    power.cut_now();
    drop(volume);
    drop(pool);

    let (d0, slog) = paths(dir.path());
    std::fs::remove_file(&slog).unwrap();
    let err = Pool::import(
        &ImportSource::Devices(vec![spec(&d0), spec(&slog)]),
        "tank",
        pool_options(opener(9, None), false),
    )
    .err()
    .expect("import without the log device must fail")
    .to_string();
    assert!(
        err.contains("log device") && err.contains("--ignore-missing-log"),
        "{err}"
    );
    let pool = import_after_cut(dir.path(), 9, true).expect("import accepting the missing log");
    let notes = pool.notes().join("\n");
    assert!(notes.contains("discarded the intent log"), "{notes}");
    let volume = pool.volume("tank/vol").unwrap();
    let mut found = vec![0u8; SECTOR as usize];
    volume.read(0, &mut found).unwrap();
    assert_eq!(found, pattern(1, 0), "synced data is there");
    volume.read(SECTOR, &mut found).unwrap();
    assert_eq!(
        found,
        pattern(0, 1),
        "the logged write is gone with its device"
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    drop(volume);
    pool.close().unwrap();
}

/// `len` bytes at `offset` as the sectors `pattern(tag, sector)` would write them.
fn sectors(tag: u64, offset: u64, len: u64) -> Vec<u8> {
    (offset / SECTOR..(offset + len) / SECTOR)
        .flat_map(|sector| pattern(tag, sector))
        .collect()
}

#[test]
fn a_flush_after_a_burst_of_writes_syncs_the_txg_instead_of_logging_it_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let power = Arc::new(PowerSwitch::with_seed(11));
    let (pool, volume) = single_writer_volume(dir.path(), 11, true, Some(&power), &[]);
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    let synced_before = pool.status().txg;
    let logged_before = pool.intent_log_stats()[0].1.bytes_written;
    let epoch = pool.durability_epoch();

    // 80 MiB of asynchronous writes (the volume, 20 times over), then one FLUSH: logging them
    // would write 80 MiB to the log; a txg sync writes the volume's 4 MiB once.
    const PASSES: u64 = 20;
    for pass in 0..PASSES {
        volume
            .write(0, &sectors(100 + pass, 0, VOLUME_BYTES))
            .unwrap();
    }
    volume.flush().unwrap();
    let stats = pool.intent_log_stats()[0].1.clone();
    assert_eq!(stats.bulk_syncs, 1, "{stats:?}");
    assert!(
        stats.bytes_written - logged_before < 1 << 20,
        "the burst went to the log: {stats:?}"
    );
    assert!(pool.status().txg > synced_before, "a txg synced");

    // Small commits after it use the log again, without txg syncs.
    let synced_after_bulk = pool.status().txg;
    volume.write(SECTOR, &pattern(7, 1)).unwrap();
    volume.flush().unwrap();
    let stats = pool.intent_log_stats()[0].1.clone();
    assert_eq!(stats.bulk_syncs, 1, "{stats:?}");
    assert!(stats.bytes_written > logged_before, "{stats:?}");
    assert_eq!(
        pool.status().txg,
        synced_after_bulk,
        "a small flush syncs no txg"
    );
    // A bulk commit served by a txg sync is no failure: nothing may have been lost.
    assert_eq!(pool.durability_epoch(), epoch, "the durability epoch moved");
    power.cut_now();
    drop(volume);
    drop(pool);

    let pool = import_after_cut(dir.path(), 11, false).expect("import");
    let volume = pool.volume("tank/vol").unwrap();
    let mut found = vec![0u8; VOLUME_BYTES as usize];
    volume.read(0, &mut found).unwrap();
    let mut expected = sectors(100 + PASSES - 1, 0, VOLUME_BYTES);
    expected[SECTOR as usize..2 * SECTOR as usize].copy_from_slice(&pattern(7, 1));
    assert!(found == expected, "contents after the power cut");
    assert!(pool.check().unwrap().is_clean());
    drop(volume);
    pool.close().unwrap();
}

/// `check` on a live pool while a writer commits the intent log: the log blocks allocated for
/// the open txg meanwhile are not leaks of the checked txg.
#[test]
fn check_while_the_log_commits_finds_no_leaks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (pool, volume) = single_writer_volume(dir.path(), 13, false, None, &[]);
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    let stop = AtomicBool::new(false);
    let commits = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut n = 1u64;
            while !stop.load(Ordering::SeqCst) {
                let options = WriteOptions { fua: true, lane: 0 };
                volume
                    .write_with((n % 4096) * SECTOR, &pattern(n + 1, n % 4096), options)
                    .unwrap();
                commits.fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
        });
        // Stops the writer however this thread leaves the scope (a failed assertion included:
        // the scope waits for the writer before the panic goes on).
        struct StopOnDrop<'a>(&'a AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let _stop = StopOnDrop(&stop);
        for _ in 0..5 {
            let before = commits.load(Ordering::SeqCst);
            let report = pool.check().unwrap();
            assert!(report.is_clean(), "{:?}", report.problems());
            while commits.load(Ordering::SeqCst) < before + 20 {
                std::thread::yield_now();
            }
        }
    });
    let stats = pool.intent_log_stats()[0].1.clone();
    assert!(stats.blocks_written >= 100, "{stats:?}");
    drop(volume);
    pool.close().unwrap();
}

/// `logbias=throughput` keeps a volume's log blocks on the pool's disks (the log device stays
/// free for others); `latency` puts them on the log device again. Replay finds both.
#[test]
fn logbias_chooses_where_log_blocks_go() {
    let dir = tempfile::tempdir().expect("tempdir");
    let power = Arc::new(PowerSwitch::with_seed(17));
    let (pool, volume) = single_writer_volume(
        dir.path(),
        17,
        true,
        Some(&power),
        &[("logbias".into(), "throughput".into())],
    );
    for n in 0..20u64 {
        volume.write(n * SECTOR, &pattern(n + 1, n)).unwrap();
        volume.flush().unwrap();
    }
    let slog_writes = |pool: &Pool| pool.log_devices()[0].writes;
    // At most the chain's first block, allocated before any commit (while the property was
    // being applied) may be there.
    let before = slog_writes(&pool);
    assert!(
        before <= 1,
        "throughput: {before} writes reached the log device"
    );
    let blocks = pool.intent_log_stats()[0].1.blocks_written;
    assert!(blocks >= 19, "the log was committed: {blocks} blocks");

    pool.set_property("tank/vol", "logbias", "latency").unwrap();
    for n in 20..40u64 {
        volume.write(n * SECTOR, &pattern(n + 1, n)).unwrap();
        volume.flush().unwrap();
    }
    assert!(
        slog_writes(&pool) >= before + 18,
        "latency: log blocks go to the log device again ({} writes)",
        slog_writes(&pool)
    );
    power.cut_now();
    drop(volume);
    drop(pool);

    let pool = import_after_cut(dir.path(), 17, false).expect("import");
    let volume = pool.volume("tank/vol").unwrap();
    for n in 0..40u64 {
        let mut found = vec![0u8; SECTOR as usize];
        volume.read(n * SECTOR, &mut found).unwrap();
        assert_eq!(found, pattern(n + 1, n), "sector {n}");
    }
    assert!(pool.check().unwrap().is_clean());
    drop(volume);
    pool.close().unwrap();
}

/// A commit that panics (a bug: here the source of a record's data) fails the log instead of
/// leaving its builder role taken: later commits get an error at once instead of waiting forever
/// (which would also hang a clean shutdown of the server).
#[test]
fn a_panicking_commit_fails_the_log_instead_of_wedging_it() {
    struct PanickingSource;
    impl cairn_zil::LogSource for PanickingSource {
        fn read_for_log(
            &self,
            _object: u64,
            _offset: u64,
            _buf: &mut [u8],
        ) -> Result<(), cairn_zil::LogSourceError> {
            panic!("injected panic while reading data to log");
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_pool, volume) = single_writer_volume(dir.path(), 11, true, None, &[]);
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    // An asynchronous write is logged without its data, which a commit reads back.
    volume.write(SECTOR, &pattern(2, 1)).unwrap();
    let log = volume.intent_log().expect("a volume has a log").clone();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        log.commit_all(&PanickingSource)
    }));
    assert!(panicked.is_err(), "the source's panic reaches the caller");

    let (tx, rx) = std::sync::mpsc::channel();
    let later = volume.clone();
    std::thread::spawn(move || {
        let _ = tx.send(later.flush());
    });
    let result = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("a commit after the panic must not hang");
    let err = result.expect_err("the log has failed");
    // The log's failure is the cause below the volume's I/O error.
    let text = cairn_device::error_chain(&err);
    assert!(text.contains("panicked"), "{text}");
}

const IN_PLACE_BLOCK: u64 = 16 << 10;

/// Synchronous writes under logbias=throughput go to their final place once, with only their
/// block pointers logged (the partial blocks at their edges are logged as data);
/// after a power cut, replay reads those blocks back, verified, and applies them. Two writes in
/// place of the same block in one txg: the newer wins, the older block is freed, not leaked.
#[test]
fn large_sync_writes_go_in_place_and_replay_restores_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let power = Arc::new(PowerSwitch::with_seed(19));
    let (pool, volume) = single_writer_volume(
        dir.path(),
        19,
        false,
        Some(&power),
        &[
            ("volblocksize".into(), "16K".into()),
            ("logbias".into(), "throughput".into()),
        ],
    );
    // The first commit starts the chain with a txg sync.
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    let synced_before = pool.status().txg;
    let fua = WriteOptions { fua: true, lane: 0 };
    // 256 KiB writes starting 1000 sectors in (not block aligned): 15 whole blocks in place,
    // a partial block at each edge logged as data.
    const WRITE_BYTES: u64 = 256 << 10;
    let offsets: Vec<u64> = (0..6u64).map(|i| (1001 + i * 640) * SECTOR).collect();
    for (i, &offset) in offsets.iter().enumerate() {
        volume
            .write_with(offset, &sectors(10 + i as u64, offset, WRITE_BYTES), fua)
            .unwrap();
    }
    // The same whole blocks again, in the same txg.
    let again = offsets[0].next_multiple_of(IN_PLACE_BLOCK);
    volume
        .write_with(again, &sectors(99, again, 4 * IN_PLACE_BLOCK), fua)
        .unwrap();
    assert_eq!(pool.status().txg, synced_before, "no txg synced");
    let stats = pool.intent_log_stats()[0].1.clone();
    assert_eq!(stats.records_in_place, 6 * 15 + 4, "{stats:?}");
    assert_eq!(
        stats.in_place_bytes,
        (6 * 15 + 4) * IN_PLACE_BLOCK,
        "{stats:?}"
    );
    assert!(
        stats.bytes_written < 6 * WRITE_BYTES / 4,
        "the data went through the log: {stats:?}"
    );
    power.cut_now();
    drop(volume);
    drop(pool);

    let pool = import_after_cut(dir.path(), 19, false).expect("import");
    let notes = pool.notes().join("\n");
    assert!(notes.contains("94 of them writes in place"), "{notes}");
    let volume = pool.volume("tank/vol").unwrap();
    let mut expected = vec![0u8; VOLUME_BYTES as usize];
    expected[..SECTOR as usize].copy_from_slice(&pattern(1, 0));
    for (i, &offset) in offsets.iter().enumerate() {
        let range = offset as usize..(offset + WRITE_BYTES) as usize;
        expected[range].copy_from_slice(&sectors(10 + i as u64, offset, WRITE_BYTES));
    }
    let range = again as usize..(again + 4 * IN_PLACE_BLOCK) as usize;
    expected[range].copy_from_slice(&sectors(99, again, 4 * IN_PLACE_BLOCK));
    let mut found = vec![0u8; VOLUME_BYTES as usize];
    volume.read(0, &mut found).unwrap();
    assert!(found == expected, "contents after the power cut");
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    drop(volume);
    pool.close().unwrap();
}

/// Without a crash, the txg sync links the blocks written in place into the tree instead of
/// writing them again, and a block replaced in the same txg is freed.
#[test]
fn a_txg_sync_does_not_write_blocks_written_in_place_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (pool, volume) = single_writer_volume(
        dir.path(),
        23,
        false,
        None,
        &[
            ("volblocksize".into(), "16K".into()),
            ("logbias".into(), "throughput".into()),
        ],
    );
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    let fua = WriteOptions { fua: true, lane: 0 };
    const WRITE_BYTES: u64 = 1 << 20;
    let offset = 1 << 20;
    volume
        .write_with(offset, &sectors(5, offset, WRITE_BYTES), fua)
        .unwrap();
    volume
        .write_with(offset, &sectors(6, offset, WRITE_BYTES), fua)
        .unwrap();
    let written = || pool.io().stats.bytes_written.load(Ordering::Relaxed);
    let before_sync = written();
    pool.sync().unwrap();
    let synced_bytes = written() - before_sync;
    // Indirect blocks, dnodes and the root (two copies each) are written; the data is not.
    assert!(
        synced_bytes < WRITE_BYTES,
        "the txg sync wrote {synced_bytes} bytes for 1 MiB written in place"
    );
    let mut found = vec![0u8; WRITE_BYTES as usize];
    volume.read(offset, &mut found).unwrap();
    assert!(found == sectors(6, offset, WRITE_BYTES), "newest version");
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    drop(volume);
    pool.close().unwrap();
}

/// Under logbias=latency writes are copied into the log, with a log device or without one;
/// logbias=throughput writes every whole block in place, however small.
#[test]
fn logbias_throughput_writes_whole_blocks_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (pool, volume) = single_writer_volume(dir.path(), 29, true, None, &[]);
    volume.write(0, &pattern(1, 0)).unwrap();
    volume.flush().unwrap();
    let fua = WriteOptions { fua: true, lane: 0 };
    let in_place = |pool: &Pool| pool.intent_log_stats()[0].1.records_in_place;
    volume
        .write_with(1 << 20, &sectors(3, 1 << 20, 256 << 10), fua)
        .unwrap();
    assert_eq!(in_place(&pool), 0, "latency with a log device copies");
    pool.set_property("tank/vol", "logbias", "throughput")
        .unwrap();
    volume
        .write_with(2 << 20, &sectors(4, 2 << 20, 32 << 10), fua)
        .unwrap();
    assert_eq!(
        in_place(&pool),
        2,
        "two 16K blocks in place: {:?}",
        pool.intent_log_stats()
    );
    drop(volume);
    pool.close().unwrap();
}
