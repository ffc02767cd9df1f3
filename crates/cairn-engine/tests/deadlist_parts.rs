//! Deadlist parts that hold nothing live leave their lists, and their MOS objects are freed
//! by the background free that reads them last: the snapshot table and the MOS stay the size
//! of what snapshots hold, not of how many were ever destroyed.
//!
//! - A rolling window (write, snapshot, destroy the oldest once five exist) for 300 rounds:
//!   the parts on every list stay under a small bound, and the pool allocates no more at
//!   round 300 than at round 100.
//! - A range destroy of 200 snapshots leaves the head's list with no part once the frees are
//!   done, every dead part's object freed.
//! - Snapshots created and destroyed across reopenings: the MOS object numbers freed before
//!   an import are given again after it (the MOS's object bound stays put).
//!
//! All end with `pool check`, which accounts for every deadlist object of the MOS (one no
//! list holds and no scan frees is a leak).

mod common;

use cairn_engine::Pool;
use common::*;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

const BLOCK: usize = 8192;
/// Blocks of the volume (512 KiB).
const VOLUME_BLOCKS: u64 = 64;
/// Snapshots the rolling window keeps.
const WINDOW: usize = 5;

fn fill(seed: u64) -> Vec<u8> {
    (0..BLOCK)
        .map(|i| (seed as u8).wrapping_mul(29).wrapping_add(i as u8) ^ (seed >> 8) as u8)
        .collect()
}

fn new_pool(dir: &std::path::Path) -> Pool {
    let paths = device_paths(dir, 2);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume_as(
        "tank/vol",
        VOLUME_BLOCKS * BLOCK as u64,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), BLOCK.to_string())],
    )
    .unwrap();
    pool
}

/// Round `round`'s writes: four blocks spread over the volume, overwriting what earlier
/// rounds wrote (so blocks die onto the head's deadlist every round).
fn write_round(pool: &Pool, round: u64) {
    let volume = pool.volume("tank/vol").unwrap();
    for k in 0..4 {
        let block = (round * 7 + k * 17) % VOLUME_BLOCKS;
        volume
            .write(block * BLOCK as u64, &fill(round * 4 + k))
            .unwrap();
    }
    volume.flush().unwrap();
}

/// Waits until the background frees are done: nothing left to free and no dead part waiting
/// for its last scan; then syncs past the defer window so freed space is counted free.
fn settle(pool: &Pool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stats = pool.snapshot_stats();
        if stats.freeing_bytes == 0 && stats.deadlist_parts_retiring == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "background frees not done after 120 s: {stats:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for _ in 0..4 {
        pool.record_history("advance txgs past the defer window".into())
            .unwrap();
    }
}

fn assert_clean(pool: &Pool) {
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}

#[test]
fn a_rolling_window_of_snapshots_keeps_a_bounded_number_of_parts_and_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    // Every block written once: the head references the whole volume from here on.
    let volume = pool.volume("tank/vol").unwrap();
    for block in 0..VOLUME_BLOCKS {
        volume.write(block * BLOCK as u64, &fill(block)).unwrap();
    }
    volume.flush().unwrap();
    let mut window: VecDeque<String> = VecDeque::new();
    let mut most_parts = 0;
    let mut allocated_at = Vec::new();
    for round in 1..=300u64 {
        write_round(&pool, round);
        let name = format!("tank/vol@r{round}");
        pool.snapshot(std::slice::from_ref(&name), false).unwrap();
        window.push_back(name);
        if window.len() > WINDOW {
            let oldest = window.pop_front().unwrap();
            pool.destroy_snapshot(&oldest).unwrap();
        }
        let stats = pool.snapshot_stats();
        most_parts = most_parts.max(stats.deadlist_parts + stats.deadlist_parts_retiring);
        if round == 100 || round == 300 {
            settle(&pool);
            assert_clean(&pool);
            allocated_at.push(pool.status().allocated_bytes);
        }
    }
    // Each of the five snapshots and the head keeps a part or two of its own; without dead
    // parts leaving, the oldest snapshot collects one more every round.
    assert!(
        most_parts <= 2 * (WINDOW as u64 + 1),
        "{most_parts} deadlist parts at most in a window of {WINDOW}"
    );
    let stats = pool.snapshot_stats();
    assert!(stats.deadlist_parts_freed >= 250, "{stats:?}");
    // Round 300 holds what round 100 held (the same window over the same volume), give or
    // take a few metadata blocks; a part left behind per round would be 200 more objects.
    let (at_100, at_300) = (allocated_at[0], allocated_at[1]);
    assert!(
        at_300 <= at_100 + 64 * 1024,
        "allocated {at_100} bytes at round 100, {at_300} at round 300"
    );
    pool.close().unwrap();
}

#[test]
fn a_range_destroy_leaves_the_head_without_dead_parts() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    for round in 0..200u64 {
        write_round(&pool, round);
        pool.snapshot(&[format!("tank/vol@s{round}")], false)
            .unwrap();
    }
    write_round(&pool, 200);
    pool.sync().unwrap();
    let before = pool.snapshot_stats();
    assert!(before.deadlist_parts >= 150, "{before:?}");
    let range = pool.snapshot_range("tank/vol", "s0", "s199").unwrap();
    assert_eq!(range.len(), 200);
    pool.destroy_snapshots(&range).unwrap();
    settle(&pool);
    let stats = pool.snapshot_stats();
    // Every block the head's list held was born by a destroyed snapshot: nothing on it is
    // live, so no part is left (one new part at most, for what died since).
    assert_eq!(stats.snapshots, 0);
    assert!(stats.deadlist_parts <= 1, "{stats:?}");
    assert_eq!(stats.deadlist_parts_retiring, 0);
    assert!(
        stats.deadlist_parts_freed - before.deadlist_parts_freed >= before.deadlist_parts - 1,
        "{before:?} then {stats:?}"
    );
    // And every dead part's object is gone from the MOS (the check accounts for each).
    assert_clean(&pool);
    pool.close().unwrap();
}

#[test]
fn a_pool_reopened_gives_its_freed_mos_object_numbers_again() {
    // Each cycle creates five snapshots (each its deadlist parts, MOS objects) and destroys
    // them, then reopens the pool: the same objects come and go every cycle, so from the
    // second on the bound stays put — unless an import forgets the numbers freed before it.
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let mut pool = new_pool(dir.path());
    let mut bounds = Vec::new();
    for cycle in 0..8u64 {
        let mut names = Vec::new();
        for i in 0..WINDOW as u64 {
            write_round(&pool, cycle * 10 + i + 1);
            let name = format!("tank/vol@c{cycle}s{i}");
            pool.snapshot(std::slice::from_ref(&name), false).unwrap();
            names.push(name);
        }
        for name in &names {
            pool.destroy_snapshot(name).unwrap();
        }
        settle(&pool);
        bounds.push(pool.snapshot_stats().mos_objects_bound);
        pool.close().unwrap();
        pool = import(&paths, plain_opener()).unwrap();
    }
    assert_clean(&pool);
    assert!(
        bounds.iter().skip(1).all(|&bound| bound <= bounds[1]),
        "MOS object bound per cycle: {bounds:?}"
    );
    pool.close().unwrap();
}
