//! A mirror side that fails every I/O while writes go on, then comes back (issue 32, point 19):
//! it must be resilvered for exactly the txgs it missed — after `pool clear` (live) and after
//! a restart (the missed range is persisted) — shown as resilvering meanwhile, never read for
//! what it lacks, and not counted as a copy until done. Each test ends by taking the other
//! side away and reading every byte back from the returned side alone.

mod common;

use cairn_engine::{Pool, ResilverOptions};
use common::failing::Devices;
use common::{Rng, create_mirror, device_paths, import};
use std::path::{Path, PathBuf};

const VOLUME_BYTES: u64 = 8 << 20;
const BLOCK_BYTES: u64 = 8 << 10;

fn seeded(len: u64, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// A mirror of d0 and d1 with a volume full of seeded bytes (synced).
fn populated(paths: &[PathBuf], devices: &Devices) -> (Pool, Vec<u8>) {
    let pool = create_mirror(paths, devices.opener());
    pool.create_volume(
        "tank/vol",
        VOLUME_BYTES,
        &[("volblocksize".into(), "8K".into())],
    )
    .unwrap();
    let contents = seeded(VOLUME_BYTES, 1);
    pool.volume("tank/vol")
        .unwrap()
        .write(0, &contents)
        .unwrap();
    pool.sync().unwrap();
    (pool, contents)
}

/// With d1 failing every I/O, rewrites 1 MiB in several txgs: the pool keeps every write
/// (DEGRADED), d1 misses them all.
fn write_while_d1_fails(pool: &Pool, contents: &mut [u8], paths: &[PathBuf], devices: &Devices) {
    devices.fail(&paths[1]);
    let volume = pool.volume("tank/vol").unwrap();
    for round in 0..4u64 {
        let offset = round * (2 << 20);
        let fresh = seeded(256 << 10, 100 + round);
        volume.write(offset, &fresh).unwrap();
        contents[offset as usize..offset as usize + fresh.len()].copy_from_slice(&fresh);
        pool.sync().unwrap();
    }
    let status = pool.status();
    assert_eq!(status.health.as_str(), "DEGRADED", "{status:?}");
    assert_eq!(leaf(pool, &paths[1]).health.as_str(), "FAULTED");
}

fn leaf(pool: &Pool, path: &Path) -> cairn_engine::LeafStatus {
    let name = path.display().to_string();
    pool.status()
        .tops
        .iter()
        .flat_map(|top| top.leaves.iter())
        .find(|leaf| leaf.name == name)
        .cloned()
        .expect("leaf in status")
}

fn assert_contents(pool: &Pool, contents: &[u8]) {
    let mut buf = vec![0u8; contents.len()];
    pool.volume("tank/vol").unwrap().read(0, &mut buf).unwrap();
    let first_bad = buf
        .chunks(BLOCK_BYTES as usize)
        .zip(contents.chunks(BLOCK_BYTES as usize))
        .position(|(got, want)| got != want);
    assert!(first_bad.is_none(), "block {first_bad:?} differs");
}

fn assert_clean(pool: &Pool) {
    let report = pool.check().unwrap();
    assert!(report.bad_copies.is_empty(), "{:?}", report.bad_copies);
    assert!(report.leaks.is_empty(), "{:?}", report.leaks);
}

/// Once resilvered, the returned side counts again; then it alone holds every byte.
fn assert_d1_alone_holds(pool: Pool, paths: &[PathBuf], contents: &[u8], devices: &Devices) {
    let status = pool.status();
    assert_eq!(status.health.as_str(), "ONLINE", "{status:?}");
    assert!(!leaf(&pool, &paths[1]).resilvering);
    assert_clean(&pool);
    pool.close().unwrap();
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[1..], devices.opener()).unwrap();
    assert_contents(&pool, contents);
    assert_clean(&pool);
    pool.close().unwrap();
}

/// The resilver that brought d1 back copied what d1 missed, not the whole vdev.
fn assert_resilvered_only_what_was_missed(pool: &Pool) {
    let status = pool
        .resilver_status()
        .expect("a resilver of the returned side");
    assert!(status.finished_ms.is_some(), "{status:?}");
    assert!(status.copied_bytes >= 1 << 20, "{status:?}");
    assert!(
        status.copied_bytes < VOLUME_BYTES / 2,
        "the whole vdev was copied again: {status:?}"
    );
}

#[test]
fn a_side_back_after_clear_is_resilvered_for_what_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let devices = Devices::default();
    let (pool, mut contents) = populated(&paths, &devices);
    write_while_d1_fails(&pool, &mut contents, &paths, &devices);

    devices.heal(&paths[1]);
    pool.clear_errors().unwrap();
    pool.wait_resilver().unwrap();
    assert_resilvered_only_what_was_missed(&pool);
    assert_contents(&pool, &contents);
    assert_d1_alone_holds(pool, &paths, &contents, &devices);
}

#[test]
fn a_side_back_after_a_restart_is_resilvered_for_what_it_missed() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let devices = Devices::default();
    let (pool, mut contents) = populated(&paths, &devices);
    write_while_d1_fails(&pool, &mut contents, &paths, &devices);
    pool.close().unwrap();

    // Reopened, d1 works again: it must not rejoin as a complete copy.
    let pool = import(&paths, devices.opener()).unwrap();
    pool.wait_resilver().unwrap();
    assert_resilvered_only_what_was_missed(&pool);
    assert_contents(&pool, &contents);
    assert_d1_alone_holds(pool, &paths, &contents, &devices);
}

/// Back after `pool clear`, resilvered slowly: while it runs d1 is shown resilvering, the
/// pool is not counted as redundant, reads never come from d1 (no checksum error on it);
/// stopped midway without a clean close, the range it still misses is found again at import
/// (d1 has newer uberblocks by then, so only the persisted range says what it lacks).
#[test]
fn an_interrupted_resilver_of_a_returned_side_resumes_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let devices = Devices::default();
    let (pool, mut contents) = populated(&paths, &devices);
    write_while_d1_fails(&pool, &mut contents, &paths, &devices);

    devices.heal(&paths[1]);
    pool.clear_errors_with(ResilverOptions {
        rate_bytes_per_s: Some(256 << 10),
        ..ResilverOptions::default()
    })
    .unwrap();
    let returned = leaf(&pool, &paths[1]);
    assert!(returned.resilvering, "{returned:?}");
    assert_eq!(returned.health.as_str(), "ONLINE");
    assert_eq!(pool.status().health.as_str(), "DEGRADED");
    let status = pool.resilver_status().expect("resilver shown");
    assert!(status.finished_ms.is_none(), "{status:?}");
    assert_contents(&pool, &contents);
    assert_eq!(leaf(&pool, &paths[1]).checksum_errors, 0);
    // New writes meanwhile go to both sides.
    let fresh = seeded(64 << 10, 999);
    pool.volume("tank/vol")
        .unwrap()
        .write(5 << 20, &fresh)
        .unwrap();
    contents[5 << 20..(5 << 20) + fresh.len()].copy_from_slice(&fresh);
    pool.sync().unwrap();
    assert!(
        pool.resilver_status().unwrap().finished_ms.is_none(),
        "finished too soon"
    );
    drop(pool);

    let pool = import(&paths, devices.opener()).unwrap();
    assert!(
        pool.notes().iter().any(|note| note.contains("resilver")),
        "{:?}",
        pool.notes()
    );
    pool.wait_resilver().unwrap();
    assert_resilvered_only_what_was_missed(&pool);
    assert_contents(&pool, &contents);
    assert_d1_alone_holds(pool, &paths, &contents, &devices);
}

/// The side fails while the last txg before a crash syncs: that txg is durable without a
/// record of the fault (the directory was written before the write failed). Import finds the
/// gap from the side's uberblocks, older than its sibling's.
#[test]
fn a_side_that_failed_in_the_last_txg_before_a_crash_is_found_by_its_labels() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let devices = Devices::default();
    let (pool, mut contents) = populated(&paths, &devices);
    devices.fail(&paths[1]);
    let fresh = seeded(512 << 10, 77);
    pool.volume("tank/vol")
        .unwrap()
        .write(3 << 20, &fresh)
        .unwrap();
    contents[3 << 20..(3 << 20) + fresh.len()].copy_from_slice(&fresh);
    let txg = pool.sync().unwrap();
    assert_eq!(leaf(&pool, &paths[1]).health.as_str(), "FAULTED");
    // Gone without another txg (nothing dirty, no clean close).
    drop(pool);

    let pool = import(&paths, devices.opener()).unwrap();
    let expected = format!("missing txgs {txg}..={txg}");
    assert!(
        pool.notes().iter().any(|note| note.contains(&expected)),
        "{expected} not in {:?}",
        pool.notes()
    );
    pool.wait_resilver().unwrap();
    let status = pool.resilver_status().unwrap();
    assert!(
        status.finished_ms.is_some() && status.copied_bytes >= 512 << 10,
        "{status:?}"
    );
    assert_contents(&pool, &contents);
    assert_d1_alone_holds(pool, &paths, &contents, &devices);
}

/// d1 goes out (its range recorded), then d0 too: no side left, the pool suspends. Both back,
/// `pool clear` resumes the suspended txg on both, but d1 still lacks what d0 took alone: it
/// comes back resilvering, and d0 stays the copy reads use.
#[test]
fn a_side_out_before_the_pool_suspended_is_resilvered_after_clear() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let devices = Devices::default();
    let (pool, mut contents) = populated(&paths, &devices);
    write_while_d1_fails(&pool, &mut contents, &paths, &devices);

    devices.fail(&paths[0]);
    let fresh = seeded(128 << 10, 55);
    pool.volume("tank/vol")
        .unwrap()
        .write(7 << 20, &fresh)
        .unwrap();
    contents[7 << 20..(7 << 20) + fresh.len()].copy_from_slice(&fresh);
    std::thread::scope(|scope| {
        let syncing = scope.spawn(|| pool.sync());
        while pool.suspended().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        devices.heal(&paths[0]);
        devices.heal(&paths[1]);
        pool.clear_errors().unwrap();
        // Its waiter was told of the suspension; the txg itself was kept and written after.
        let _ = syncing.join().unwrap();
    });
    pool.sync().unwrap();
    pool.wait_resilver().unwrap();
    assert_resilvered_only_what_was_missed(&pool);
    assert_contents(&pool, &contents);
    assert_d1_alone_holds(pool, &paths, &contents, &devices);
}
