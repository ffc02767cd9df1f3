//! The observability of snapshots through the pool's API: the counters of `cairn stat
//! snapshots` move as snapshots are taken, cloned, promoted, rolled back and destroyed and as
//! the background frees run (deadlist scans and dead trees), the levels (deadlists held,
//! `freeing`) follow the table, the command latency counts each command that completed, and
//! each change is announced as one event naming it and its txg — none for a refused command.
//!
//! One test: events are the process's, and the names are the same in every test here.

mod common;

use cairn_engine::{Pool, SnapshotStatsSnapshot};
use cairn_metrics::events;
use common::*;

const BLOCK: usize = 8192;

fn fill(seed: u8) -> Vec<u8> {
    (0..BLOCK)
        .map(|i| seed.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

fn write_blocks(pool: &Pool, name: &str, blocks: std::ops::Range<u64>, seed: u8) {
    let volume = pool.volume(name).unwrap();
    for block in blocks {
        volume.write(block * BLOCK as u64, &fill(seed)).unwrap();
    }
    volume.flush().unwrap();
}

fn new_pool(dir: &std::path::Path) -> Pool {
    let paths = device_paths(dir, 2);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume_as(
        "tank/vol",
        4 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), BLOCK.to_string())],
    )
    .unwrap();
    pool
}

/// Waits until `finished` background frees are done (counted once their last txg committed;
/// `freeing` alone is no sign: a dead tree's bytes are an estimate, and may reach 0 first).
fn wait_for_frees(pool: &Pool, finished: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pool.snapshot_stats().frees_finished < finished {
        assert!(
            std::time::Instant::now() < deadline,
            "background frees not done after 60 s: {:?}",
            pool.snapshot_stats()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(pool.snapshot_stats().frees_finished, finished);
}

/// The snapshot events recorded since sequence number `since`.
fn events_since(since: u64) -> Vec<String> {
    events::since(since)
        .into_iter()
        .filter(|event| event.source == "snapshots")
        .map(|event| event.message)
        .collect()
}

/// The one event of `events` containing every part of `parts`.
fn find<'a>(events: &'a [String], parts: &[&str]) -> &'a str {
    let found: Vec<&String> = events
        .iter()
        .filter(|message| parts.iter().all(|part| message.contains(part)))
        .collect();
    assert_eq!(found.len(), 1, "one event with {parts:?} in {events:#?}");
    found[0]
}

/// The counters that only grow, as (name, value).
fn counters(stats: &SnapshotStatsSnapshot) -> Vec<(&'static str, u64)> {
    stats
        .fields()
        .into_iter()
        .filter(|(name, _)| !SnapshotStatsSnapshot::is_level(name))
        .collect()
}

#[test]
fn counters_levels_latency_and_events_follow_every_snapshot_change() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    let start = pool.snapshot_stats();
    // A new pool: nothing counted, no level but the MOS's first objects.
    assert!(start.mos_objects_bound > 0, "{start:?}");
    assert_eq!(
        start,
        SnapshotStatsSnapshot {
            mos_objects_bound: start.mos_objects_bound,
            ..SnapshotStatsSnapshot::default()
        },
        "a new pool"
    );
    let seq = events::latest_seq();
    take_and_overwrite(&pool, seq);
    refused_commands_count_nothing(&pool);
    clone_promote_and_destroy_it(&pool, seq);
    destroy_the_snapshot(&pool, seq);
    roll_back(&pool, seq, &start);
    destroy_a_range(&pool, seq);
}

/// A snapshot, then 200 blocks overwritten: they go onto the head's deadlist.
fn take_and_overwrite(pool: &Pool, seq: u64) {
    write_blocks(pool, "tank/vol", 0..200, 1);
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    let a_txg = pool.snapshot_info("tank/vol@a").unwrap().created_txg;
    let stats = pool.snapshot_stats();
    assert_eq!(
        (stats.snapshots_created, stats.snapshots, stats.commands),
        (1, 1, 1)
    );
    assert!(stats.command_latency_p50_us > 0 && stats.command_latency_max_us > 0);
    let seen = events_since(seq);
    find(
        &seen,
        &["snapshot tank/vol@a created", &format!("txg {a_txg}")],
    );
    write_blocks(pool, "tank/vol", 0..200, 2);
    pool.sync().unwrap();
    let stats = pool.snapshot_stats();
    let held = pool
        .snapshot_space("tank/vol")
        .unwrap()
        .used_by_snapshots_bytes;
    assert!(
        stats.deadlist_entries >= 200 && stats.deadlist_bytes == held,
        "deadlists: {} entries, {} bytes; usedbysnapshots {held}",
        stats.deadlist_entries,
        stats.deadlist_bytes
    );
    // The analytics' per-dataset figures are the dataset's properties.
    let figures = pool.dataset_space();
    let vol = figures.iter().find(|f| f.name == "tank/vol").unwrap();
    let info = info(pool, "tank/vol");
    assert_eq!(
        (vol.used_bytes, vol.referenced_bytes, vol.snapshots_bytes),
        (info.used_bytes, info.referenced_bytes, held)
    );
    assert!(figures.iter().any(|f| f.name == "tank"), "{figures:?}");
}

/// A refused command counts nothing and says nothing.
fn refused_commands_count_nothing(pool: &Pool) {
    let before = pool.snapshot_stats();
    let seq_refused = events::latest_seq();
    assert!(pool.snapshot(&["tank/vol@a".to_string()], false).is_err());
    assert!(pool.promote("tank/vol").is_err(), "not a clone");
    assert_eq!(pool.snapshot_stats(), before);
    assert_eq!(events_since(seq_refused), Vec::<String>::new());
}

/// A clone, written to, promoted and promoted back, then destroyed: its tree is freed in the
/// background.
fn clone_promote_and_destroy_it(pool: &Pool, seq: u64) {
    pool.clone_snapshot("tank/vol@a", "tank/c", &[]).unwrap();
    write_blocks(pool, "tank/c", 0..40, 3);
    pool.promote("tank/c").unwrap();
    pool.promote("tank/vol").unwrap();
    let stats = pool.snapshot_stats();
    assert_eq!((stats.clones_created, stats.promotes), (1, 2));
    let seen = events_since(seq);
    find(&seen, &["clone tank/c of tank/vol@a created in txg"]);
    find(
        &seen,
        &["clone tank/c promoted in txg", "1 snapshots moved"],
    );
    find(
        &seen,
        &["clone tank/vol promoted in txg", "1 snapshots moved"],
    );
    pool.destroy_dataset("tank/c").unwrap();
    wait_for_frees(pool, 1);
    let stats = pool.snapshot_stats();
    assert_eq!(stats.datasets_destroyed, 1);
    assert!(
        stats.tree_blocks_freed >= 40,
        "the clone's own blocks freed: {stats:?}"
    );
    let seen = events_since(seq);
    find(&seen, &["dataset tank/c destroyed in txg"]);
    find(&seen, &["freed", "bytes of dataset tank/c in"]);
}

/// Destroying the snapshot: its 200 blocks are scanned and freed 8 entries per txg.
fn destroy_the_snapshot(pool: &Pool, seq: u64) {
    let before = pool.snapshot_stats();
    pool.destroy_snapshot("tank/vol@a").unwrap();
    let stats = pool.snapshot_stats();
    assert_eq!(stats.snapshots_destroyed, 1);
    assert!(
        stats.freeing_bytes > 0,
        "freed in the background: {stats:?}"
    );
    wait_for_frees(pool, 2);
    let stats = pool.snapshot_stats();
    let scanned = stats.deadlist_entries_scanned - before.deadlist_entries_scanned;
    let freed = stats.deadlist_blocks_freed - before.deadlist_blocks_freed;
    let txgs = stats.background_free_txgs - before.background_free_txgs;
    assert!(
        scanned >= 200 && freed >= 200 && freed <= scanned,
        "scanned {scanned}, freed {freed}"
    );
    assert!(txgs >= 200 / 8, "{txgs} txgs of background frees");
    assert_eq!(
        (
            stats.freeing_bytes,
            stats.snapshots,
            stats.deadlist_entries,
            stats.deadlist_bytes
        ),
        (0, 0, 0, 0)
    );
    let seen = events_since(seq);
    find(&seen, &["snapshot tank/vol@a destroyed in txg"]);
    let done = find(&seen, &["bytes of tank/vol@a in"]);
    let done_txgs: u64 = done
        .split(" in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("txgs in {done:?}"));
    assert!(done_txgs >= 200 / 8, "{done}");
}

/// A rollback frees what the head wrote since, in the background; then the totals of the run.
fn roll_back(pool: &Pool, seq: u64, start: &SnapshotStatsSnapshot) {
    pool.snapshot(&["tank/vol@r".to_string()], false).unwrap();
    write_blocks(pool, "tank/vol", 0..32, 4);
    pool.rollback("tank/vol@r", false, false).unwrap();
    wait_for_frees(pool, 3);
    let stats = pool.snapshot_stats();
    assert_eq!((stats.rollbacks, stats.snapshots_created), (1, 2));
    let seen = events_since(seq);
    find(&seen, &["rolled back to tank/vol@r in txg"]);
    find(
        &seen,
        &["bytes of the head of tank/vol rolled back to @r in"],
    );
    // snapshot a, clone, 2 promotes, destroy, snapshot r, rollback: 7 commands waited for.
    assert_eq!(stats.commands, 7);
    assert!(stats.command_latency_p99_us >= stats.command_latency_p50_us);
    assert!(
        counters(&stats)
            .iter()
            .zip(counters(start))
            .all(|((_, now), (_, then))| *now >= then)
    );
    assert_eq!(
        pool.snapshot_command_latency().len(),
        7,
        "the histogram behind the percentiles"
    );
}

/// A range destroy of 12 snapshots queues one background free for all of them: one free
/// record written in its txg, not one per snapshot (a destroy of 10,000 wrote 10,000, each a
/// change of the snapshot table's map in that txg and a removal later). One free finishes,
/// named for the first snapshot with the count of the others.
fn destroy_a_range(pool: &Pool, seq: u64) {
    for round in 0..12u8 {
        write_blocks(pool, "tank/vol", 0..16, round + 10);
        pool.snapshot(&[format!("tank/vol@s{round}")], false)
            .unwrap();
    }
    write_blocks(pool, "tank/vol", 0..16, 99);
    pool.sync().unwrap();
    let range = pool.snapshot_range("tank/vol", "s0", "s11").unwrap();
    assert_eq!(range.len(), 12);
    pool.destroy_snapshots(&range).unwrap();
    wait_for_frees(pool, 4);
    for _ in 0..3 {
        pool.sync().unwrap();
    }
    let stats = pool.snapshot_stats();
    assert_eq!((stats.frees_finished, stats.freeing_bytes), (4, 0));
    let seen = events_since(seq);
    find(
        &seen,
        &["bytes of tank/vol@s0 and 11 more destroyed with it in"],
    );
}
