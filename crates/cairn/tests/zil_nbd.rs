//! Synchronous writes over NBD survive a power cut and a SIGKILL of the server (issue 4).
//!
//! A real `cairn serve` runs on a pool of emulated ssd-sata devices (volatile write caches, real
//! timing) with a separate emulated log device, and with the fault-injection switch armed
//! (`CAIRN_INJECT_POWER_CUT_AFTER_OPS`): at a seeded device operation every device of the
//! process loses power — writes in flight land in part, unflushed writes vanish or are torn,
//! later I/O fails. A raw NBD client keeps QD1 or QD32 requests in flight: 4 KiB writes of
//! unique patterns (a third with FUA) and FLUSHes, never two writes to the same block in flight
//! at once (one run in three on a volume with 4K blocks and logbias=throughput, so every FUA
//! write goes in place and only its block pointer is logged). The client keeps sending until
//! the server stops answering; then the server is SIGKILLed, started again without the fault,
//! and every block is read back:
//! - a block whose newest durable acknowledgement (its FUA write, or a write acknowledged
//!   before a FLUSH was sent whose reply came back) was version D holds version D or a later
//!   one — never an older one, never anything else;
//! - after a clean stop, `pool check` is clean.
//!
//! `CAIRN_ZIL_NBD_POINTS` sets the number of seeded runs (default 200), `CAIRN_ZIL_NBD_SEED`
//! replays one. Guaranteed per run (default): 160 power cuts, each asserted mid-workload (the
//! server printed its cut report while the client still had requests to send, and the client
//! saw the server fail), plus 40 runs (one in five) with no power cut, SIGKILLed mid-workload
//! with requests in flight (the emulated caches die with the process). Each run prints its seed
//! and how it ended; a failing run keeps the devices' write logs (from pool creation to the
//! cut) and cut point and names the directory and the `replay-cut` command that rebuilds the
//! crashed images. The engine-level test (cairn-engine/tests/zil_crash.rs) covers 200 points
//! per run through the same volume API; this one proves the whole program, wire to disk.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

const BLOCK: u64 = 4096;
const SECTOR: usize = 512;
const VOLUME_BLOCKS: u64 = 2048; // 8 MiB
/// Requests a run sends at most: far more than any cut point needs (QD32 batches many requests
/// into one device write), so an armed run always ends at its power cut.
const OPS_MAX: usize = 6000;

/// How a run's workload ends.
#[derive(Clone, Copy, Debug)]
enum Plan {
    /// Keep sending until the server fails (the armed power cut).
    UntilCut,
    /// Stop after sending this many requests, with the replies still outstanding (SIGKILL).
    StopAfter(usize),
}

const STOPPED_FOR_KILL: &str = "stopped with requests in flight";

fn pattern(tag: u64, block: u64) -> Vec<u8> {
    if tag == 0 {
        return vec![0; BLOCK as usize];
    }
    let mut rng = Rng(tag.wrapping_mul(0x2545_f491).wrapping_add(block));
    let mut out = Vec::with_capacity(BLOCK as usize);
    while out.len() < BLOCK as usize {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out
}

enum Pending {
    Write {
        block: u64,
        version: usize,
        fua: bool,
    },
    Flush {
        /// Per block, the newest version acknowledged when the flush was sent.
        acked: Vec<usize>,
    },
}

/// What the client was told, per block.
struct Model {
    versions: Vec<Vec<u64>>,
    acked: Vec<usize>,
    durable: Vec<usize>,
}

fn read_reply(stream: &mut UnixStream) -> std::io::Result<(u32, u64)> {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header)?;
    let magic = u32::from_be_bytes(header[0..4].try_into().unwrap());
    assert_eq!(magic, 0x6744_6698, "simple reply magic");
    let error = u32::from_be_bytes(header[4..8].try_into().unwrap());
    let cookie = u64::from_be_bytes(header[8..16].try_into().unwrap());
    Ok((error, cookie))
}

/// Runs the workload until the plan ends it or the server fails; returns the model and how it
/// ended.
fn workload(
    socket: &std::path::Path,
    seed: u64,
    queue_depth: usize,
    plan: Plan,
) -> (Model, String) {
    let client = RawClient::connect(socket, "tank/vol").expect("connect");
    assert_eq!(client.size, VOLUME_BLOCKS * BLOCK);
    let mut stream = client.stream();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut model = Model {
        versions: vec![vec![0]; VOLUME_BLOCKS as usize],
        acked: vec![0; VOLUME_BLOCKS as usize],
        durable: vec![0; VOLUME_BLOCKS as usize],
    };
    let mut rng = Rng(seed);
    let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
    let mut busy: BTreeSet<u64> = BTreeSet::new();
    let mut cookie = 0u64;
    let mut sent = 0usize;
    let ops = match plan {
        Plan::UntilCut => OPS_MAX,
        Plan::StopAfter(n) => n,
    };
    let ending = loop {
        let done_sending = sent >= ops;
        if done_sending && matches!(plan, Plan::StopAfter(_)) {
            break format!("{STOPPED_FOR_KILL} ({})", pending.len());
        }
        if done_sending && pending.is_empty() {
            break "workload completed".to_string();
        }
        if !done_sending && pending.len() < queue_depth {
            cookie += 1;
            sent += 1;
            let request = if rng.below(100) < 85 {
                let mut block = rng.below(VOLUME_BLOCKS);
                while busy.contains(&block) {
                    block = (block + 1) % VOLUME_BLOCKS;
                }
                let tag = (seed << 32) | cookie;
                let versions = &mut model.versions[block as usize];
                versions.push(tag);
                let fua = rng.below(3) == 0;
                busy.insert(block);
                pending.insert(
                    cookie,
                    Pending::Write {
                        block,
                        version: versions.len() - 1,
                        fua,
                    },
                );
                encode_request_with_flags(
                    NBD_CMD_WRITE,
                    if fua { NBD_CMD_FLAG_FUA } else { 0 },
                    cookie,
                    block * BLOCK,
                    BLOCK as u32,
                    &pattern(tag, block),
                )
            } else {
                pending.insert(
                    cookie,
                    Pending::Flush {
                        acked: model.acked.clone(),
                    },
                );
                encode_request(NBD_CMD_FLUSH, cookie, 0, 0, &[])
            };
            if let Err(err) = stream.write_all(&request) {
                break format!("send failed: {err}");
            }
            continue;
        }
        let (error, reply_cookie) = match read_reply(&mut stream) {
            Ok(reply) => reply,
            Err(err) => break format!("no reply: {err}"),
        };
        let request = pending
            .remove(&reply_cookie)
            .unwrap_or_else(|| panic!("reply to unknown cookie {reply_cookie}"));
        if error != 0 {
            break format!("server error {error}");
        }
        match request {
            Pending::Write {
                block,
                version,
                fua,
            } => {
                busy.remove(&block);
                let b = block as usize;
                model.acked[b] = model.acked[b].max(version);
                if fua {
                    model.durable[b] = model.durable[b].max(version);
                }
            }
            Pending::Flush { acked } => {
                for (durable, acked) in model.durable.iter_mut().zip(acked) {
                    *durable = (*durable).max(acked);
                }
            }
        }
    };
    (model, ending)
}

/// Reads every block back. With `durable_floor`, each sector must hold its newest durably
/// acknowledged version or a later one; without (a log device was lost, and the writes only it
/// held with it), any version ever written there, whole, will do.
fn verify(socket: &std::path::Path, model: &Model, label: &str, durable_floor: bool) {
    let mut client = RawClient::connect(socket, "tank/vol").expect("connect after restart");
    const CHUNK_BLOCKS: u64 = 64;
    for first in (0..VOLUME_BLOCKS).step_by(CHUNK_BLOCKS as usize) {
        let (error, data) = client.request(
            NBD_CMD_READ,
            first * BLOCK,
            (CHUNK_BLOCKS * BLOCK) as u32,
            &[],
        );
        assert_eq!(error, 0, "{label}: read at block {first}");
        for (i, found_block) in data.chunks(BLOCK as usize).enumerate() {
            let block = first + i as u64;
            let versions = &model.versions[block as usize];
            let durable = if durable_floor {
                model.durable[block as usize]
            } else {
                0
            };
            // A write that was never acknowledged may land in part, sector by sector (as on
            // a disk); each sector must still be whole and no older than the durable version.
            for (sector, found) in found_block.chunks(SECTOR).enumerate() {
                let range = sector * SECTOR..(sector + 1) * SECTOR;
                let is = |tag: &u64| pattern(*tag, block)[range.clone()] == *found;
                if versions[durable..].iter().any(is) {
                    continue;
                }
                let older = versions[..durable].iter().position(is);
                panic!(
                    "{label}: block {block} sector {sector}: {} (versions {versions:?}, durable index {durable})",
                    match older {
                        Some(i) =>
                            format!("holds older version {i}: an acknowledged write was lost"),
                        None => "holds bytes never written there".to_string(),
                    }
                );
            }
        }
    }
    client.disconnect();
}

/// A pool of emulated ssd-sata devices with a log device (`devs/slog.img`, returned) and the
/// test volume, with `properties` (`name=value`). With `record`, the devices' media writes go to
/// write logs there from the start (`CAIRN_INJECT_RECORD_DIR`).
fn create_pool_with_log(
    env: &Env,
    properties: &[&str],
    record: Option<&std::path::Path>,
) -> String {
    let (d0, slog) = (env.dev("d0.img"), env.dev("slog.img"));
    let size = format!("{}", VOLUME_BLOCKS * BLOCK);
    let d0_spec = format!("emu:ssd-sata:{d0}");
    let slog_spec = format!("emu:ssd-sata:{slog}");
    let create_pool = [
        "pool", "create", "--size", "256M", "tank", &d0_spec, "log", &slog_spec,
    ];
    let mut create_volume = vec!["create", "-V", &size];
    for property in properties {
        create_volume.extend(["-o", property]);
    }
    create_volume.push("tank/vol");
    for args in [&create_pool[..], &create_volume[..]] {
        let mut cmd = env.cairn_command();
        if let Some(dir) = record {
            cmd.env("CAIRN_INJECT_RECORD_DIR", dir);
        }
        let run = run_limited(cmd.args(args), TOOL_TIME);
        assert!(run.success(), "cairn {args:?} failed:\n{}", run.describe());
    }
    slog
}

/// Where a round's device write logs and cut point go: kept, and named on stderr with the
/// command that rebuilds the crashed images, if the round panics.
struct KeptOnFailure(Option<tempfile::TempDir>);

impl KeptOnFailure {
    fn new() -> KeptOnFailure {
        KeptOnFailure(Some(
            tempfile::Builder::new()
                .prefix("cairn-zil-nbd-record-")
                .tempdir()
                .expect("tempdir"),
        ))
    }

    fn path(&self) -> &std::path::Path {
        self.0.as_ref().expect("lives as long as the round").path()
    }
}

impl Drop for KeptOnFailure {
    fn drop(&mut self) {
        if let (true, Some(dir)) = (std::thread::panicking(), self.0.take()) {
            let kept = dir.keep();
            eprintln!(
                "this round's device write logs and cut point are kept in {dir}; rebuild the \
                 crashed images with:\n  cargo run -p cairn-emulate --example replay-cut -- {dir}\n\
                 then inspect them with `cairn pool import -d {dir}/crashed tank`",
                dir = kept.display()
            );
        }
    }
}

/// Serves the pool with the power switch armed to trip after `trip_after` device operations
/// (`None`: no power cut, the workload stops after a seeded number of requests), runs the
/// workload, asserts it was cut mid-workload, and SIGKILLs the server. Returns the model and
/// how the workload ended.
fn cut_run(
    env: &Env,
    seed: u64,
    queue_depth: usize,
    trip_after: Option<u64>,
    label: &str,
    record: Option<&std::path::Path>,
) -> (Model, String) {
    let mut vars = vec![("CAIRN_INJECT_SEED", seed.to_string())];
    if let Some(dir) = record {
        vars.push(("CAIRN_INJECT_RECORD_DIR", dir.display().to_string()));
    }
    if let Some(ops) = trip_after {
        vars.push(("CAIRN_INJECT_POWER_CUT_AFTER_OPS", ops.to_string()));
    }
    let mut server = env.serve_with_env(&vars);
    let plan = match trip_after {
        Some(_) => Plan::UntilCut,
        None => Plan::StopAfter(100 + Rng(seed ^ 0x4b1).below(900) as usize),
    };
    let (model, ending) = workload(&server.socket, seed, queue_depth, plan);
    // Requests fail as soon as the switch has tripped; the report follows once every device
    // is cut: give the server a moment to print it.
    let find_report = |stderr: &str| {
        stderr
            .lines()
            .find(|line| line.contains("fault injection: power cut at operation"))
            .map(str::to_string)
    };
    let mut cut_report = find_report(&server.stderr());
    let waited = std::time::Instant::now();
    while trip_after.is_some() && cut_report.is_none() && waited.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
        cut_report = find_report(&server.stderr());
    }
    let summary = format!(
        "{label}: {ending}; {}",
        cut_report.as_deref().unwrap_or("no power cut")
    );
    eprintln!("{summary}");
    if let Some(dir) = record {
        std::fs::write(dir.join("cut.txt"), format!("zil_nbd.rs {summary}\n")).expect("cut.txt");
    }
    match trip_after {
        Some(_) => assert!(
            cut_report.is_some() && ending != "workload completed",
            "{label}: the power cut did not happen mid-workload (workload: {ending})\n{}",
            server.logs()
        ),
        None => assert!(
            ending.starts_with(STOPPED_FOR_KILL) && cut_report.is_none(),
            "{label}: the workload was to stop for a SIGKILL, yet: {ending}\n{}",
            server.logs()
        ),
    }
    server.kill();
    (model, ending)
}

/// Runs one seed; returns whether it was a power cut (else a SIGKILL alone).
fn run_seed(seed: u64) -> bool {
    let _heavy = heavy();
    let env = Env::new();
    // One run in three writes every FUA block in place, only its pointer logged.
    let in_place = seed % 3 == 1;
    let properties: &[&str] = if in_place {
        &["volblocksize=4K", "logbias=throughput"]
    } else {
        &[]
    };
    // Declared after `env`, so it is dropped (and kept, on a panic) first.
    let record = KeptOnFailure::new();
    create_pool_with_log(&env, properties, Some(record.path()));
    let queue_depth = if seed.is_multiple_of(2) { 1 } else { 32 };
    let mut rng = Rng(seed ^ 0xc0ffee);
    // Some runs are never cut: SIGKILL alone (the emulated caches die with the process).
    // The others are cut after the server has started: its import and first syncs take about
    // 25 device operations, and a cut before it serves is not what this test is about.
    let trip_after = if seed % 5 == 4 {
        None
    } else {
        Some(60 + rng.below(300))
    };
    let label = format!(
        "seed {seed} (QD{queue_depth}, writes in place {in_place}, power cut after {trip_after:?} device ops)"
    );
    let (model, ending) = cut_run(
        &env,
        seed,
        queue_depth,
        trip_after,
        &format!("{label} (write logs in {})", record.path().display()),
        Some(record.path()),
    );

    let mut server = env.serve();
    verify(
        &server.socket,
        &model,
        &format!("{label}, ended by: {ending}"),
        true,
    );
    server.terminate();
    drop(server);
    env.assert_pool_check_clean();
    trip_after.is_some()
}

#[test]
fn acknowledged_fua_and_flushed_writes_survive_power_cut_and_sigkill() {
    if let Ok(seed) = std::env::var("CAIRN_ZIL_NBD_SEED") {
        run_seed(seed.parse().expect("CAIRN_ZIL_NBD_SEED is a number"));
        return;
    }
    let points: u64 = std::env::var("CAIRN_ZIL_NBD_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // Each run asserts that its power cut (or SIGKILL) came mid-workload.
    let cuts = (1..=points).filter(|&seed| run_seed(seed)).count() as u64;
    eprintln!(
        "zil nbd test: {cuts} power cuts and {} SIGKILLs, each mid-workload",
        points - cuts
    );
}

/// The log device is gone after the power cut: `cairn serve` refuses the pool with a clear
/// error when its log still holds records, `pool import --ignore-missing-log` brings it back as
/// of its last txg, and then every sector holds a whole version that was written there (the
/// acknowledged writes only the lost device held may be gone) and `pool check` is clean.
#[test]
fn a_lost_log_device_is_a_clear_error_then_the_pool_comes_back_consistent() {
    let mut refused = 0;
    for seed in 101..=106u64 {
        let _heavy = heavy();
        let env = Env::new();
        let slog = create_pool_with_log(&env, &[], None);
        let queue_depth = if seed.is_multiple_of(2) { 1 } else { 32 };
        let trip_after = 100 + Rng(seed).below(300);
        let label = format!("seed {seed} (QD{queue_depth}, power cut after {trip_after} ops)");
        let (model, ending) = cut_run(&env, seed, queue_depth, Some(trip_after), &label, None);
        std::fs::remove_file(&slog).unwrap();

        // A socket path that cannot be bound: a server that opened the pool stops there
        // instead of serving.
        let serve = env.cairn(&[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--socket",
            "/nonexistent/nbd.sock",
        ]);
        let text = format!("{}{}", serve.stdout, serve.stderr);
        assert!(!serve.success(), "{label}: {}", serve.describe());
        if text.contains("--ignore-missing-log") {
            assert!(
                text.contains("log device") && text.contains("would be lost"),
                "{label}: unclear refusal:\n{}",
                serve.describe()
            );
            refused += 1;
        } else {
            // The log held nothing: the pool opened (degraded) and only the socket failed.
            assert!(
                text.contains("/nonexistent"),
                "{label}: {}",
                serve.describe()
            );
        }
        let import = env.ok(&["pool", "import", "--ignore-missing-log", "tank"]);
        assert!(import.contains("DEGRADED"), "{label}: {import}");
        let mut server = env.serve();
        verify(
            &server.socket,
            &model,
            &format!("{label}, ended by: {ending}, log device lost"),
            false,
        );
        server.terminate();
        drop(server);
        let status = env.ok(&["pool", "status", "tank"]);
        assert!(status.contains("DEGRADED"), "{label}: {status}");
        env.assert_pool_check_clean();
    }
    assert!(refused > 0, "no run left records on the lost log device");
}

#[test]
fn stat_zil_shows_commits_and_the_log_device() {
    let env = Env::new();
    let (d0, slog) = (env.dev("d0.img"), env.dev("slog.img"));
    env.ok(&[
        "pool", "create", "--size", "128M", "tank", &d0, "log", &slog,
    ]);
    env.create_volume("tank/vol", "16M", &[]);
    let server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(
        &uri,
        &[
            "write -P 0x11 0 64k",
            "flush",
            "write -f -P 0x22 64k 8k",
            "write -P 0x33 1M 4k",
            "flush",
        ],
    );
    let out = env.ok(&["stat", "zil", "-H", "-p"]);
    let value = |name: &str| -> u64 {
        out.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no {name} line:\n{out}"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number:\n{out}"))
    };
    assert_eq!(value("tank/vol.lanes"), 1, "one lane: {out}");
    assert!(value("tank/vol.records") >= 3, "records: {out}");
    assert!(value("tank/vol.commits") >= 3, "commits: {out}");
    assert!(value("tank/vol.blocks_written") >= 2, "log blocks: {out}");
    assert!(
        out.lines()
            .any(|line| line.starts_with("tank.logdev0.name\t") && line.contains("slog.img")),
        "no log device name line:\n{out}"
    );
    let writes = value("tank.logdev0.writes");
    // Reads and writes through the pipeline and the devices: `stat io`.
    let io = env.ok(&["stat", "io", "-H", "-p"]);
    let io_value = |name: &str| -> u64 {
        io.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}\t")))
            .unwrap_or_else(|| panic!("no {name} line:\n{io}"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number:\n{io}"))
    };
    assert!(
        io_value("tank.pipeline.raw_writes") >= 2,
        "log blocks: {io}"
    );
    let leaf_writes: u64 = (0..2)
        .map(|leaf| io_value(&format!("tank.leaf{leaf}.write_requests")))
        .sum();
    assert!(leaf_writes >= 2, "device writes: {io}");
    let human = env.ok(&["stat", "io"]);
    assert!(
        human.contains("R-CALLS") && human.contains("slog.img (log)"),
        "{human}"
    );
    assert!(writes >= 2, "log blocks went to the log device: {out}");
}
