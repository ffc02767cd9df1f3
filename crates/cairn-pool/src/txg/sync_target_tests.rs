//! Tests of the write throttle under a sync target (`sync_target_ms`): the dirty limit and
//! the delay curve that follow the measured sync rate, and a syncing txg counted by what it has
//! left to write. Split from `tests.rs` (whose fake syncer and helpers they use) to keep each
//! file within the line limit.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::config::GIB;
use super::tests::{FakeSyncer, dirty, eventually, quiet_config};
use super::*;
const MIB: u64 = 1 << 20;

/// An engine with a 1 GiB max and a 100 ms sync target whose first txg, 32 MiB, took at least
/// 200 ms to sync: its measured rate is at most 160 MiB/s.
fn slow_synced_engine() -> Arc<TxgEngine> {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        dirty_bytes_max: GIB,
        dirty_sync_percent: 100,
        sync_target_ms: 100,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    syncer.close_gate();
    dirty(&engine, 32 * MIB);
    let sync = {
        let engine = engine.clone();
        thread::spawn(move || engine.sync_now())
    };
    syncer.wait_entered(1);
    thread::sleep(Duration::from_millis(200));
    syncer.open_gate();
    assert_eq!(sync.join().unwrap(), Ok(1));
    engine
}

#[test]
fn txg_a_slow_sync_lowers_the_dirty_limit_under_a_sync_target() {
    // A 32 MiB txg whose sync takes at least 200 ms: at most 160 MiB/s, so 100 ms of it is
    // at most 16 MiB and the limit falls to its floor, far below the 1 GiB max.
    let engine = slow_synced_engine();
    assert_eq!(engine.stats().writers_blocked_at_max_count, 0);

    dirty(&engine, DIRTY_LIMIT_FLOOR_BYTES);
    let writer = {
        let engine = engine.clone();
        thread::spawn(move || engine.throttle(1))
    };
    eventually("writer blocked at the measured limit", || {
        engine.stats().writers_blocked_at_max_count == 1
    });
    assert_eq!(engine.sync_now(), Ok(2));
    writer.join().unwrap();
    engine.shutdown().unwrap();
}

#[test]
fn txg_a_slow_sync_delays_writers_below_the_limits_knee_under_a_sync_target() {
    // 32 MiB synced in at least 200 ms: 100 ms of that rate is at most 16 MiB, so the limit
    // in force is its 64 MiB floor (delays from 38.4 MiB on) but the delay curve ends at
    // its own 32 MiB floor (delays from 19.2 MiB on).
    let engine = slow_synced_engine();

    let hold = engine.hold();
    hold.add_dirty(18 * MIB);
    engine.throttle(MIB);
    assert_eq!(engine.stats().writer_delays_count, 0, "below either knee");
    hold.add_dirty(8 * MIB); // 26 MiB: past the curve's knee, under the limit's
    engine.throttle(MIB);
    let stats = engine.stats();
    assert_eq!(stats.writer_delays_count, 1);
    assert_eq!(stats.writers_blocked_at_max_count, 0);
    drop(hold);
    assert_eq!(engine.sync_now(), Ok(2));
    engine.shutdown().unwrap();
}

#[test]
fn txg_sync_left_bytes_falls_with_the_rate_and_stops_at_zero() {
    assert_eq!(sync_left_bytes(1000, 100, Duration::ZERO), 1000);
    assert_eq!(sync_left_bytes(1000, 100, Duration::from_secs(4)), 600);
    assert_eq!(sync_left_bytes(1000, 100, Duration::from_secs(10)), 0);
    assert_eq!(sync_left_bytes(1000, 100, Duration::from_secs(60)), 0);
    assert_eq!(sync_left_bytes(1000, u64::MAX, Duration::from_secs(1)), 0);
}

#[test]
fn txg_a_syncing_txg_counts_what_it_has_left_to_write_under_a_sync_target() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        dirty_bytes_max: 96 * MIB,
        dirty_sync_percent: 100,
        sync_target_ms: 100,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    let sync_in_background = |engine: &Arc<TxgEngine>| {
        let engine = engine.clone();
        thread::spawn(move || engine.sync_now())
    };
    // A rate: 32 MiB synced in at least 500 ms, at most 64 MiB/s, so the limit in force
    // is its 64 MiB floor.
    syncer.close_gate();
    dirty(&engine, 32 * MIB);
    let sync = sync_in_background(&engine);
    syncer.wait_entered(1);
    thread::sleep(Duration::from_millis(500));
    syncer.open_gate();
    assert_eq!(sync.join().unwrap(), Ok(1));

    // Txg 2 is over the limit and stays syncing: a writer blocks on it at first, and goes
    // once the rate would have written the 24 MiB over (under 2 s), the sync still running.
    syncer.close_gate();
    dirty(&engine, 88 * MIB);
    let sync = sync_in_background(&engine);
    syncer.wait_entered(2);
    let writer = {
        let engine = engine.clone();
        thread::spawn(move || engine.throttle(1))
    };
    eventually("writer blocked at the limit in force", || {
        engine.stats().writers_blocked_at_max_count == 1
    });
    eventually("writer let through by the sync's progress", || {
        writer.is_finished()
    });
    writer.join().unwrap();
    assert_eq!(engine.last_synced_txg(), 1, "txg 2 is still syncing");

    // Memory still counts the syncing txg whole: 88 + 40 MiB pass the 96 MiB max, though
    // a waiter would wait for less than the limit in force.
    dirty(&engine, 40 * MIB);
    let writer = {
        let engine = engine.clone();
        thread::spawn(move || engine.throttle(1))
    };
    eventually("writer blocked at the memory max", || {
        engine.stats().writers_blocked_at_max_count == 2
    });
    thread::sleep(Duration::from_millis(30));
    assert!(!writer.is_finished(), "writer passed the memory max");
    syncer.open_gate();
    assert_eq!(sync.join().unwrap(), Ok(2));
    writer.join().unwrap();
    assert_eq!(engine.dirty_bytes(), 40 * MIB);
    engine.shutdown().unwrap();
}
