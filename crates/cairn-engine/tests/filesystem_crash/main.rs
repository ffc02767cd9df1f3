//! Filesystem crash acceptance (issue 15): seeded power cuts, with writes in flight torn,
//! under a multi-threaded workload through the `cairn_fs::Filesystem` API; after import
//! (which replays the intent log) every fsynced change is there, nothing else is, and
//! `pool check` is clean.
//!
//! ## The workload
//! Four threads each own a directory `tN` under the root (made and synced before the power
//! switch is armed) and change only what lies beneath it: create, mkdir, symlink, writes of
//! many sizes and offsets (a few bytes, partial records, appends, past the end, several
//! records), truncation (shrinking and extending), chmod, rename (replacing, NOREPLACE,
//! EXCHANGE, across directories, directories included), link, unlink, rmdir, setxattr,
//! removexattr, punch hole, zero range and allocate, open and release (so files are unlinked
//! while open and then written, truncated and fsynced), and fsync of files and directories. A
//! thread only issues operations its model says succeed, so any error is the power going
//! (an error before the switch tripped fails the test). A syncer thread runs txg syncs at
//! random meanwhile, so some changes reach the pool through txgs and others only through the
//! log. The pool is a mirror of two emulated 7200 rpm disks with volatile caches (odd seeds
//! add an SSD log device); recordsize is 4K, 16K or 128K by seed; `sync=standard`, except
//! one seed in five with `sync=always`; `logbias=throughput` in half the seeds; `compression=on`
//! in three seeds in seven. One write in
//! four is synchronous (`write_sync`, a file opened O_DSYNC: an fsync with it), so under
//! `logbias=throughput` its whole blocks go in place and the log holds their pointers.
//!
//! ## Snapshots, clones, rollbacks (issue 34)
//! The threads' 50 operations run in three phases. While they run, the syncer also takes
//! snapshots of `tank/fs` and destroys the oldest; between phases, the threads stopped, an
//! exact snapshot is taken, then cloned into `tank/clone` (one subtree changed there, the
//! clone promoted, `tank/fs` promoted back, the clone destroyed) or `tank/fs` rolled back to
//! its oldest exact snapshot with `-r` (the workload's handle dropped first, reopened after).
//! After the cut, every snapshot reported created exists and each subtree in it is a state of
//! its thread between the operations done before it was asked for and those begun when it
//! returned; one cut short may exist and then is such a state; one whose destroy returned is
//! gone; a clone cut in its cycle holds its origin's subtrees and a prefix of its own
//! operations; a rollback cut short left every subtree before it or every one after it (see
//! `admin.rs`). The clone takes the default `recordsize` (as in ZFS, a clone takes its
//! parent's properties), larger than its files' records: that found a bug (see
//! `filesystem_family.rs`).
//!
//! ## What is promised, and what is checked
//! POSIX promises less than cairn: `fsync(fd)` makes that file's data and attributes
//! durable, and a new name only once its directory is fsynced too. cairn's filesystem log
//! commits per file (cairn-fs's `durability.rs`): namespace changes (create, link, unlink,
//! rename, xattrs) go to the log's one lane in the order they are made, an inode's own changes
//! (writes, truncation, chmod, fallocate) wait in its own list, and `fsync(X)` appends X's
//! list to the lane and commits it: X's own changes and every namespace change before it
//! (the entries and renames that reach X included), not other files' data. Under
//! `sync=always` every change is committed before it returns. Replay applies the records of
//! txgs that never synced, each whole, in the order the changes were made. So for a thread's
//! subtree, whose operations are sequential (each takes a txg no older than the one before
//! and logs after it), an import shows a prefix of its namespace changes and, per inode, a
//! prefix of its own changes. The test checks exactly that: the subtree read back after
//! import, split into its namespace (names, which inode each names, kinds, link counts,
//! directories' parents, symlink targets, extended attributes) and each inode's own part
//! (mode; a file's size and every byte), has the namespace of the model's state after some
//! number `m` of the thread's operations, where `m` is at least the count up to its last
//! fsync that returned Ok (any inode's: each commits the namespace) and at most the count it
//! started; and each inode's own part is its own in the state after some number `j` of
//! operations, at least the count up to that inode's own last fsync (every operation's under
//! `sync=always`) and at most the count started. So nothing fsynced is lost, the entries
//! that reach it included; nothing appears that was never written, no operation is half
//! applied, no byte is garbage. (The operation that failed when the power went may or may
//! not have happened; a create among them may have happened under an object number it never
//! returned.) One relaxation: a file's last write may come back torn at a 512-byte boundary
//! of the file, its head new and its tail old, since the log splits long writes into
//! records at absolute sector boundaries and the durable part of the log can end between two
//! of them (as a disk keeps some sectors of a write in flight; ZFS's log splits writes the
//! same way). Such a write was never acknowledged as durable. Files unlinked while open are
//! gone after the import. Timestamps are not compared: a replayed write sets mtime to the
//! replay's time (`Write` records carry no time). If filesystems ever log on several lanes
//! the namespace prefix holds per lane only, and this check must be relaxed again.
//!
//! In one seed in three the power goes again during the first import (a second switch trips
//! on one of its first 30 writes and flushes: the replay's txg sync, the delete queue's
//! drain, the txgs after them); the import that follows must replay the same log once.
//!
//! After the check the pool is closed and opened read-only, and its `check` (what
//! `cairn pool check` runs: every block pointer, space, and the namespace walk of
//! `cairn-fs`'s check) must be clean.
//!
//! ## Runs
//! `CAIRN_FS_CRASH_POINTS` seeds (default 150, from `CAIRN_FS_CRASH_FIRST_SEED`, default 1;
//! with `crash.rs`'s 200 volume cuts, 350 a run: the snapshot work made a round longer),
//! one power cut each, asserted mid-workload (the switch tripped on a device operation while
//! a thread still had operations to do, and that thread saw one fail, or an administrative
//! action failed); a seed whose drawn cut
//! point lies beyond its workload runs again with a point inside it. The run prints how many
//! cuts tore a write in flight and where the subtrees landed between their last fsync and
//! their last operation, how many snapshots, clones and rollbacks were checked and which
//! actions the power cut, and fails if either end went unexercised or no clone cycle or
//! rollback was cut. `CAIRN_FS_CRASH_SEED`
//! runs one seed (with `CAIRN_FS_CRASH_TRIP`, at the cut point a failure names). Thread
//! interleavings are not seeded, so a failure may need a few runs of its seed to come back;
//! a failing round keeps its devices' write logs and cut point (see `common::CrashRound`).
//! Device files go to /dev/shm when it has room: the devices are emulated, so the backing
//! files' own `fdatasync`s buy nothing, and on a disk they took two thirds of the time. The
//! devices are 256 MiB (sparse): on 64 MiB ones, with 4K records and txg syncs every few
//! milliseconds, a txg sync failed to allocate 128 KiB while `status` showed 29 MB free, and
//! the pool suspended instead of writes failing with ENOSPC (a small write into 4K records
//! dirties a 128 KiB indirect block, two copies, per txg; the write's space check counts the
//! data plus an eighth). That is the space work's to settle, not this test's.
//!
//! The other tests here are the regression tests of what this one found (`regressions.rs`)
//! and the per-file commit's cases, set up on purpose (`per_file.rs`).
//! The model of a subtree is `model.rs`, the operations `ops.rs`, the snapshots, clones and
//! rollbacks `admin.rs`.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod admin;
#[path = "../common/mod.rs"]
mod common;
mod model;
mod ops;
mod per_file;
mod regressions;

use admin::Admin;
use cairn_device::spec::DeviceSpec;
use cairn_emulate::{CutReport, PowerSwitch};
use cairn_engine::{CreateOptions, DeviceOpener, ImportSource, Pool, VdevGroup};
use cairn_fs::Filesystem;
use cairn_fs::attrs::FileKind;
use common::Rng;
use model::{Own, Seen, Tree, difference, namespace_view, new_inode, read_tree, sector_maps};
use ops::{Progress, ThreadRun, run_thread};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

const THREADS: usize = 4;
/// Sparse; not 64 MiB (see the module comment).
const DEVICE_BYTES: u64 = 256 << 20;
const OPS_PER_THREAD: usize = 50;
/// Phases of a round's operations, with an administrative step between two.
const PHASES: usize = 3;

pub fn spec(path: &Path) -> DeviceSpec {
    DeviceSpec {
        path: path.to_path_buf(),
        model: None,
    }
}

pub fn device_specs(dir: &Path, log_device: bool) -> Vec<DeviceSpec> {
    let mut specs = vec![spec(&dir.join("d0.img")), spec(&dir.join("d1.img"))];
    if log_device {
        specs.push(spec(&dir.join("slog.img")));
    }
    specs
}

pub fn create_pool(dir: &Path, log_device: bool, opener: DeviceOpener) -> Pool {
    create_pool_with(dir, log_device, common::options(opener))
}

/// `create_pool` with its own options (a smaller dirty-data limit).
pub fn create_pool_with(dir: &Path, log_device: bool, options: cairn_engine::PoolOptions) -> Pool {
    let mut groups = vec![VdevGroup {
        mirror: true,
        raidz_parity: None,
        log: false,
        devices: vec![spec(&dir.join("d0.img")), spec(&dir.join("d1.img"))],
    }];
    if log_device {
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
        options,
    )
    .expect("create pool")
}

pub fn import(
    dir: &Path,
    log_device: bool,
    readonly: bool,
) -> Result<Pool, cairn_engine::EngineError> {
    Pool::import(
        &ImportSource::Devices(device_specs(dir, log_device)),
        "tank",
        cairn_engine::PoolOptions {
            readonly,
            ..common::options(common::plain_opener())
        },
    )
}

pub struct Scenario {
    pub log_device: bool,
    pub recordsize: u64,
    /// `sync=always` (one seed in five): every change commits the log before it returns.
    pub sync_always: bool,
    /// `logbias=throughput` (half the seeds, independent of the log device): synchronous
    /// writes put their whole blocks in place and log only pointers.
    pub throughput: bool,
    /// `compression=on` (three seeds in seven): records with zeros left in them (short
    /// files, holes, zeroed ranges) are stored compressed, through txgs and in place.
    pub compression: bool,
    pub trip_after_ops: u64,
}

/// Closes `pool`, opens it read-only and asserts its `check` (what `cairn pool check` runs)
/// is clean; `what` names the case in the message.
pub fn assert_clean_after_close(pool: Pool, dir: &Path, what: &str) {
    pool.close().expect("close");
    let pool = import(dir, false, true).expect("read-only import");
    let report = pool.check().expect("check");
    assert!(report.is_clean(), "{what}: {:?}", report.problems());
    pool.close().expect("close");
}

pub fn scenario(seed: u64) -> Scenario {
    let mut rng = Rng(seed ^ 0xf5c4);
    let sync_always = seed % 5 == 4;
    Scenario {
        log_device: seed % 2 == 1,
        throughput: (seed / 2) % 2 == 1,
        recordsize: [4 << 10, 16 << 10, 128 << 10][(seed % 3) as usize],
        sync_always,
        compression: seed % 7 < 3,
        // Workloads take 400 to 650 device operations (to 750 under sync=always): the cuts
        // fall in every phase and boundary.
        trip_after_ops: 1 + rng.below(if sync_always { 700 } else { 500 }),
    }
}

/// Where a thread's subtree landed after a cut: it matched the state after `matched`
/// operations, of which `fsynced` were promised durable and `started` begun.
#[derive(Debug, Clone, Copy)]
struct Landed {
    fsynced: usize,
    matched: usize,
    started: usize,
    /// Some file ended in a write torn where the log split it.
    torn: bool,
    /// Some inode's own part is not the namespace's state's: it was committed by its own
    /// fsync, or not, apart from the rest (the log's per-file commit at work).
    mixed: bool,
}

enum Round {
    /// Cut mid-workload and verified; whether the power went again during the first import.
    Cut(CutReport, Vec<Landed>, bool, Checked),
    /// Every thread finished before the cut point, after this many device operations.
    Finished { ops: u64 },
}

fn run_seed(seed: u64, trip_after_ops: Option<u64>) -> Round {
    let mut scenario = scenario(seed);
    if let Some(trip) = trip_after_ops {
        scenario.trip_after_ops = trip;
    }
    let label = format!(
        "seed {seed} (recordsize {}K, sync {}, log device {}, throughput {}, compression {}, trip after {} ops; \
         replay with CAIRN_FS_CRASH_SEED={seed} CAIRN_FS_CRASH_TRIP={})",
        scenario.recordsize >> 10,
        if scenario.sync_always {
            "always"
        } else {
            "standard"
        },
        scenario.log_device,
        scenario.throughput,
        scenario.compression,
        scenario.trip_after_ops,
        scenario.trip_after_ops
    );
    let dir = match scratch_parent() {
        Some(parent) => common::CrashRound::new_in(&parent),
        None => common::CrashRound::new(),
    };
    let power = Arc::new(PowerSwitch::with_seed(seed));
    let opener = common::recording_opener(seed, Some(power.clone()), Some(dir.record_dir()));
    let pool = create_pool(dir.path(), scenario.log_device, opener);
    let sync = if scenario.sync_always {
        "always"
    } else {
        "standard"
    };
    pool.create_filesystem(
        "tank/fs",
        &[
            ("recordsize".into(), format!("{}", scenario.recordsize)),
            ("sync".into(), sync.into()),
            (
                "logbias".into(),
                if scenario.throughput {
                    "throughput"
                } else {
                    "latency"
                }
                .into(),
            ),
            (
                "compression".into(),
                if scenario.compression { "on" } else { "off" }.into(),
            ),
        ],
        (0, 0),
        0o755,
    )
    .expect("create filesystem");
    let fs = pool.filesystem("tank/fs").expect("filesystem");
    let tops: Vec<u64> = (0..THREADS)
        .map(|thread| {
            let name = format!("t{thread}");
            let (top, _) = fs
                .mkdir(
                    fs.root(),
                    name.as_bytes(),
                    new_inode(FileKind::Directory, 0o755),
                )
                .expect("mkdir");
            top
        })
        .collect();
    pool.sync().expect("sync");
    let ops_before = power.ops_seen();
    power.arm_after_ops(scenario.trip_after_ops);
    let mut runs: Vec<ThreadRun> = tops
        .iter()
        .enumerate()
        .map(|(thread, &top)| ThreadRun::new(seed, thread, Tree::new(top)))
        .collect();
    let mut admin = Admin {
        label: label.clone(),
        ..Admin::default()
    };
    let mut fs = Some(fs);
    let failed = run_phases(
        &pool, &mut fs, &mut runs, &mut admin, seed, &scenario, &power,
    );
    for (thread, run) in runs.iter().enumerate() {
        if let Some((op, err, false)) = &run.failure {
            panic!(
                "{label}: thread {thread}'s {op} failed before the power was cut: {err} \
                 (pool suspended: {:?})\n{}",
                pool.status().suspended,
                operations(&runs)
            );
        }
    }
    if !failed {
        let ops = power.ops_seen() - ops_before;
        if !power.tripped() {
            // No cut: the live filesystem must equal every model's last state, and every
            // snapshot its range.
            power.disarm();
            let fs = fs.expect("open unless a rollback failed");
            for (thread, run) in runs.iter().enumerate() {
                let found = read_tree(&fs, tops[thread]).unwrap_or_else(|err| panic!("{err}"));
                let want = run.states[run.started].seen();
                assert!(
                    found == want,
                    "{label}: thread {thread} without a cut: {}",
                    difference(&found, &want)
                );
            }
            admin.check_snapshots(&pool, &runs, &label);
            drop(fs);
            if let Err(err) = pool.close() {
                panic!(
                    "{label}: closing after the workload: {err}\n{}",
                    operations(&runs)
                );
            }
        }
        return Round::Finished { ops };
    }
    let cut = power
        .last_cut()
        .expect("a thread or an action failed: the switch tripped");
    dir.write_cut_point(&format!("filesystem_crash.rs {label}: {cut}"));
    assert!(
        cut.tripped_by.is_some(),
        "{label}: the cut did not happen mid-workload ({cut})"
    );
    drop(fs);
    drop(pool);
    let import_cut = seed.is_multiple_of(3) && cut_first_import(dir.path(), seed, &scenario);
    let pool = import(dir.path(), scenario.log_device, false).unwrap_or_else(|err| {
        panic!(
            "{label}: {cut}: import after the cut: {err}\n{}",
            operations(&runs)
        )
    });
    let notes = pool.notes().join("; ");
    let label = format!("{label}: {cut}; import: {notes}");
    let fs = pool.filesystem("tank/fs").expect("filesystem after import");
    let mut landed = Vec::new();
    let mut founds = Vec::new();
    for (thread, run) in runs.iter().enumerate() {
        let found = read_tree(&fs, tops[thread])
            .unwrap_or_else(|err| panic!("{label}: thread {thread}: {err}"));
        match land(run, &found) {
            Some(at) => landed.push(at),
            None => panic!("{}", lost(&label, thread, run, &found)),
        }
        founds.push(found);
    }
    let checked = Checked {
        snapshots: admin.check_snapshots(&pool, &runs, &label),
        clone: admin.check_clone(&pool, &runs, &label),
        rollback: admin.check_rollback(&runs, &founds, &label),
        failed: admin.failed.clone(),
    };
    drop(fs);
    pool.close().expect("close after verifying");
    let pool = import(dir.path(), scenario.log_device, true)
        .unwrap_or_else(|err| panic!("{label}: read-only import for the check: {err}"));
    let report = pool.check().expect("check");
    assert!(report.filesystems_checked >= 1, "{label}");
    assert!(
        report.is_clean(),
        "{label}: pool check after replay: {:?}",
        report.problems()
    );
    pool.close().expect("close");
    Round::Cut(cut, landed, import_cut, checked)
}

/// What a cut round checked beyond the subtrees.
#[derive(Debug, Default)]
struct Checked {
    /// Snapshots read and compared with their models.
    snapshots: usize,
    /// A clone cycle was cut and its clone checked.
    clone: bool,
    /// A rollback was cut and found all or nothing.
    rollback: bool,
    /// The administrative action the power cut, if it cut one.
    failed: Option<String>,
}

/// The phases of a round: the threads run their operations while the syncer syncs, snapshots
/// and destroys (`Admin::tick`); between phases, with the threads stopped, `Admin::boundary`.
/// Returns whether anything failed (the power went).
fn run_phases(
    pool: &Pool,
    fs: &mut Option<Arc<Filesystem>>,
    runs: &mut [ThreadRun],
    admin: &mut Admin,
    seed: u64,
    scenario: &Scenario,
    power: &PowerSwitch,
) -> bool {
    let progress: Vec<Progress> = (0..THREADS).map(|_| Progress::default()).collect();
    let mut rng = Rng(seed);
    for phase in 0..PHASES {
        let until = OPS_PER_THREAD * (phase + 1) / PHASES;
        for (run, progress) in runs.iter().zip(&progress) {
            progress.reset(run);
        }
        let live = fs.as_ref().expect("open between phases").clone();
        let finished = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        std::thread::scope(|scope| {
            for (run, progress) in runs.iter_mut().zip(&progress) {
                let (live, finished, failed) = (&live, &finished, &failed);
                scope.spawn(move || {
                    run_thread(live, run, seed, until, scenario, power, progress);
                    if run.failure.is_some() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    finished.fetch_add(1, Ordering::Relaxed);
                });
            }
            // Txg syncs interleave with the log: some changes reach the pool the normal way.
            while finished.load(Ordering::Relaxed) < THREADS && !power.tripped() {
                std::thread::sleep(std::time::Duration::from_millis(1 + rng.below(4)));
                if !admin.tick(pool, &mut rng, &progress, power) {
                    break;
                }
            }
        });
        drop(live);
        if failed.load(Ordering::Relaxed) || admin.failed.is_some() {
            return true;
        }
        if phase + 1 < PHASES && !admin.boundary(pool, fs, runs, &mut rng, seed, scenario, power) {
            return true;
        }
    }
    false
}

/// Where a thread's subtree `found` landed in its run. Its namespace (`namespace_view`) is
/// the latest state's from its last fsync on that shows it (an operation that changed nothing
/// matches twice); each inode's own part (mode, bytes) is its own in the latest state from its
/// own last fsync on (`ThreadRun::own_durable`) that has it, else that state with the next
/// operation, a write to it, torn where the log split it (`Tree::own_torn`); an inode no state
/// has is a failed create's (`Tree::unsure_create`, which the namespace check placed).
fn land(run: &ThreadRun, found: &BTreeMap<u64, Seen>) -> Option<Landed> {
    let found_namespace = namespace_view(found);
    let matched = (run.fsynced..=run.started)
        .rev()
        .find(|&m| run.states[m].shows_namespace(&found_namespace))?;
    let mut torn = false;
    for (&object, seen) in found {
        let own = Own::of_seen(seen);
        let low = run.own_durable(object).min(run.started);
        let exact = (low..=run.started)
            .rev()
            .any(|j| run.states[j].own(object).as_ref() == Some(&own));
        if exact {
            continue;
        }
        let torn_here = (low..run.started).rev().any(|j| {
            run.states[j + 1]
                .last_write
                .is_some_and(|write| run.states[j].own_torn(object, write, &own))
        });
        if torn_here {
            torn = true;
            continue;
        }
        let unsure = run.states.iter().all(|state| state.own(object).is_none())
            && run.states[run.started]
                .unsure_create
                .as_ref()
                .is_some_and(|(_, _, node)| Own::of_node(node) == own);
        if !unsure {
            return None;
        }
    }
    Some(Landed {
        fsynced: run.fsynced,
        matched,
        started: run.started,
        torn,
        mixed: !torn && !run.states[matched].shows(found),
    })
}

/// The failure message of a subtree that shows no state it may.
fn lost(label: &str, thread: usize, run: &ThreadRun, found: &BTreeMap<u64, Seen>) -> String {
    let earlier = (0..run.fsynced).rev().find(|&m| run.states[m].shows(found));
    let ops: Vec<String> = run
        .described
        .iter()
        .enumerate()
        .map(|(index, text)| format!("{}: {text}", index + 1))
        .collect();
    format!(
        "{label}\nthread {thread}'s subtree is not its state \
         after any of operations {}..={} ({}).\nAgainst the last fsynced state: {}\n\
         Against the last started: {}\nSectors (a: last fsynced, b: last started):{}\n\
         Operations:\n{}",
        run.fsynced,
        run.started,
        match earlier {
            Some(m) => format!(
                "it is the state after operation {m}: acknowledged fsynced changes were lost"
            ),
            None => "it matches no state at all".into(),
        },
        difference(found, &run.states[run.fsynced].seen()),
        difference(found, &run.states[run.started].seen()),
        sector_maps(
            found,
            &run.states[run.fsynced].seen(),
            &run.states[run.started].seen()
        ),
        ops.join("\n")
    )
}

/// The power goes again during the first import (its replay, or the txgs after it); the
/// next import must find the same log and apply it once. Returns whether it cut the import.
fn cut_first_import(dir: &Path, seed: u64, scenario: &Scenario) -> bool {
    let power = Arc::new(PowerSwitch::with_seed(seed ^ 0x1a));
    power.arm_after_ops(1 + Rng(seed ^ 0x1a).below(30));
    let first = Pool::import(
        &ImportSource::Devices(device_specs(dir, scenario.log_device)),
        "tank",
        common::options(common::emulated_opener(seed, Some(power.clone()))),
    );
    if let Ok(pool) = &first {
        // Opening the filesystem drains its delete queue: more writes to cut.
        let _ = pool.filesystem("tank/fs");
        let _ = pool.sync();
    }
    let cut = first.is_err() && power.last_cut().is_some_and(|cut| cut.tripped_by.is_some());
    power.cut_now();
    drop(first);
    cut
}

/// Every thread's operations, numbered, for a failure's message.
fn operations(runs: &[ThreadRun]) -> String {
    let mut out = String::new();
    for (thread, run) in runs.iter().enumerate() {
        out.push_str(&format!("thread {thread}:\n"));
        for (index, text) in run.described.iter().enumerate() {
            out.push_str(&format!("  {}: {text}\n", index + 1));
        }
    }
    out
}

/// A RAM file system for the rounds' device files when there is room (the devices are
/// emulated, power cuts included, so the backing files' own `fdatasync`s buy nothing, and on
/// a disk they take most of a round's time); `None`: the temporary directory.
fn scratch_parent() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    const ROOM_BYTES: u64 = 2 << 30;
    let parent = PathBuf::from("/dev/shm");
    let path = std::ffi::CString::new(parent.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated and `stat` is a valid, writable statvfs.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    let free_bytes = stat.f_bavail.saturating_mul(stat.f_frsize);
    (rc == 0 && free_bytes >= ROOM_BYTES && tempfile::tempdir_in(&parent).is_ok()).then_some(parent)
}

/// Runs `seed` until an attempt cuts mid-workload (a later attempt draws its cut point inside
/// the device operations the previous one issued); returns the cut, where each thread
/// landed, and the attempts it took.
fn cut_seed(seed: u64) -> (CutReport, Vec<Landed>, u64, bool, Checked) {
    const ATTEMPTS: u64 = 8;
    let mut trip = None;
    for attempt in 1..=ATTEMPTS {
        match run_seed(seed, trip) {
            Round::Cut(report, landed, import_cut, checked) => {
                return (report, landed, attempt, import_cut, checked);
            }
            // The last operations may be the syncer's alone, or the threads' that touch no
            // device: later attempts draw from the first half.
            Round::Finished { ops } => {
                let within = if attempt == 1 { ops } else { ops / 2 };
                trip = Some(1 + Rng(seed ^ (attempt << 40)).below(within.max(1)));
            }
        }
    }
    panic!("seed {seed}: {ATTEMPTS} attempts finished before their cut point");
}

/// `CAIRN_FS_CRASH_POINTS` seeds (default 150), or the one in `CAIRN_FS_CRASH_SEED`.
#[test]
fn fsynced_files_and_entries_survive_power_cuts_under_concurrent_changes() {
    if let Ok(seed) = std::env::var("CAIRN_FS_CRASH_SEED") {
        let seed = seed.parse().expect("CAIRN_FS_CRASH_SEED is a number");
        let trip: Option<u64> = std::env::var("CAIRN_FS_CRASH_TRIP")
            .ok()
            .map(|v| v.parse().expect("CAIRN_FS_CRASH_TRIP is a number"));
        match trip {
            Some(trip) => match run_seed(seed, Some(trip)) {
                Round::Finished { ops } => panic!("finished after {ops} device operations, uncut"),
                Round::Cut(report, landed, import_cut, checked) => {
                    eprintln!("{report}; {landed:?}; import cut: {import_cut}; {checked:?}");
                }
            },
            None => {
                let (report, landed, attempts, import_cut, checked) = cut_seed(seed);
                eprintln!(
                    "{report}; {attempts} attempts; {landed:?}; import cut: {import_cut}; \
                     {checked:?}"
                );
            }
        }
        return;
    }
    let points: u64 = std::env::var("CAIRN_FS_CRASH_POINTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(150);
    let first: u64 = std::env::var("CAIRN_FS_CRASH_FIRST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let (mut cuts, mut torn, mut attempts, mut imports_cut) = (0u64, 0u64, 0u64, 0u64);
    let (mut subtrees, mut promised, mut beyond, mut all_started) = (0u64, 0u64, 0u64, 0u64);
    let (mut torn_writes, mut mixed) = (0u64, 0u64);
    let (mut snapshots, mut clones, mut rollbacks) = (0usize, 0u64, 0u64);
    let mut actions_cut: BTreeMap<String, u64> = BTreeMap::new();
    for seed in first..first + points {
        let (report, landed, tries, import_cut, checked) = cut_seed(seed);
        snapshots += checked.snapshots;
        clones += u64::from(checked.clone);
        rollbacks += u64::from(checked.rollback);
        if let Some(action) = &checked.failed {
            let kind = action.split(':').next().unwrap_or("").to_string();
            *actions_cut.entry(kind).or_default() += 1;
        }
        cuts += 1;
        imports_cut += u64::from(import_cut);
        attempts += tries;
        torn += u64::from(report.in_flight_writes > 0);
        for thread in landed {
            subtrees += 1;
            promised += u64::from(thread.fsynced > 0);
            beyond += u64::from(thread.matched > thread.fsynced);
            all_started += u64::from(thread.matched == thread.started);
            torn_writes += u64::from(thread.torn);
            mixed += u64::from(thread.mixed);
        }
    }
    eprintln!(
        "filesystem crash test: {cuts} power cuts ({attempts} rounds), each mid-workload; \
         {torn} tore a write in flight; {imports_cut} more cut the first import; of {subtrees} subtrees checked, {promised} had fsynced \
         changes to keep, {beyond} kept changes past their last fsync, {all_started} kept \
         every operation started, {torn_writes} ended in a write torn at a sector boundary, \
         {mixed} held files whose own changes were committed apart from the namespace's; \
         {snapshots} snapshots checked against their models, {clones} clones and {rollbacks} \
         rollbacks cut short and checked; actions cut: {actions_cut:?}"
    );
    if points >= 20 {
        // The check must have had something to check, at both ends.
        assert!(
            torn * 4 >= cuts,
            "only {torn} of {cuts} cuts caught a write in flight"
        );
        assert!(
            promised * 2 >= subtrees,
            "few fsyncs returned before the cuts"
        );
        assert!(beyond > 0 && beyond < subtrees, "{beyond} of {subtrees}");
        assert!(imports_cut > 0, "no power cut fell in an import");
        assert!(
            snapshots as u64 >= cuts,
            "only {snapshots} snapshots checked after {cuts} cuts"
        );
    }
    if points >= 100 {
        assert!(
            clones > 0 && rollbacks > 0,
            "{clones} clone cycles and {rollbacks} rollbacks cut"
        );
    }
}
