//! Tests of reserved sync time (`TxgEngine::reserve_sync_time`, `hold_reserving`): a txg whose
//! sync has work besides its dirty data lets its writers dirty what the measured rate writes
//! in that time less, only that txg, and a hold that reserves on a txg already too full goes
//! to the next one; what the syncer says its commands took stays out of the measured rate.
//! Split from `tests.rs`, whose fake syncer and helpers they use.

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::tests::{FakeSyncer, dirty, eventually, quiet_config};
use super::*;

const GIB: u64 = 1 << 30;
/// A sync target of 500 ms, as `cairn serve` runs with.
const TARGET_MS: u64 = 500;

/// An engine with a 500 ms sync target whose first txg, 2 GiB, took at least 50 ms to sync
/// (the syncer reporting `command_us` of it as commands' work), with a max so large (64 GiB)
/// that the limit in force is the measured rate's 500 ms, not a bound.
fn measured_engine(command_us: u64) -> (Arc<FakeSyncer>, Arc<TxgEngine>) {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        dirty_bytes_max: 64 * GIB,
        dirty_sync_percent: 100,
        sync_target_ms: TARGET_MS,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    syncer.report_command_us(command_us);
    syncer.close_gate();
    dirty(&engine, 2 * GIB);
    let sync = {
        let engine = engine.clone();
        thread::spawn(move || engine.sync_now())
    };
    syncer.wait_entered(1);
    thread::sleep(Duration::from_millis(50));
    syncer.open_gate();
    assert_eq!(sync.join().unwrap(), Ok(1));
    syncer.report_command_us(0);
    (syncer, engine)
}

fn rate_of(engine: &TxgEngine) -> u64 {
    engine
        .sync_bytes_per_sec()
        .expect("a 2 GiB txg gives a rate")
}

#[test]
fn txg_reserved_sync_time_lowers_the_open_txgs_allowance_by_rate_times_time() {
    let (_syncer, engine) = measured_engine(0);
    let rate = rate_of(&engine);
    let before = engine.dirty_allowance_bytes();
    assert_eq!(before, dirty_limit_bytes(engine.config(), Some(rate)));
    assert!(
        before > DIRTY_LIMIT_FLOOR_BYTES && before < 64 * GIB,
        "{before}: not a bound"
    );

    // 100 ms reserved: the open txg may dirty what the rate writes in 100 ms less.
    let open = engine.open_txg();
    assert!(engine.reserve_sync_time(open, Duration::from_millis(100)));
    let after = engine.dirty_allowance_bytes();
    assert!(
        (before - after).abs_diff(rate / 10) <= 1,
        "allowance {before} -> {after} at {rate} B/s"
    );
    // Reservations on one txg add up; one on the txg after it leaves this one alone.
    assert!(engine.reserve_sync_time(open + 1, Duration::from_millis(300)));
    assert_eq!(engine.dirty_allowance_bytes(), after);
    engine.reserve_sync_time(open, Duration::from_millis(100));
    let twice = engine.dirty_allowance_bytes();
    assert!(
        (before - twice).abs_diff(rate / 5) <= 1,
        "{before} -> {twice}"
    );

    // The next txg opens with the 300 ms reserved for it; the one after with nothing.
    assert_eq!(engine.sync_now_forced(), Ok(open));
    let next = engine.dirty_allowance_bytes();
    assert!(
        (before - next).abs_diff(rate * 3 / 10) <= 1,
        "{before} -> {next}"
    );
    assert_eq!(engine.sync_now_forced(), Ok(open + 1));
    assert_eq!(engine.dirty_allowance_bytes(), before);
    // A reservation the target cannot hold leaves the floor.
    engine.reserve_sync_time(open + 2, Duration::from_secs(2));
    assert_eq!(
        engine.dirty_allowance_bytes(),
        RESERVED_ALLOWANCE_FLOOR_BYTES
    );
    let history = engine.history();
    let reserved: Vec<u64> = history.iter().map(|t| t.reserved_sync_us).collect();
    assert_eq!(reserved, [0, 200_000, 300_000]);
    engine.shutdown().unwrap();
}

#[test]
fn txg_writers_block_at_the_reserved_allowance_until_that_txg_syncs() {
    let (_syncer, engine) = measured_engine(0);
    let before = engine.dirty_allowance_bytes();
    // Half the limit in force: no writer waits.
    let hold = engine.hold();
    hold.add_dirty(before / 2);
    drop(hold);
    engine.throttle(1);
    assert_eq!(engine.stats().writers_blocked_at_max_count, 0);

    // 300 ms of the 500 reserved: the open txg may carry 40 % of the limit, and is past it.
    let open = engine.open_txg();
    assert!(!engine.reserve_sync_time(open, Duration::from_millis(300)));
    let writer = {
        let engine = engine.clone();
        thread::spawn(move || engine.throttle(1))
    };
    eventually("writer blocked at the reserved allowance", || {
        engine.stats().writers_blocked_at_max_count == 1
    });
    thread::sleep(Duration::from_millis(20));
    assert!(
        !writer.is_finished(),
        "writer passed the reserved allowance"
    );
    // That txg syncs: the next one has the whole limit again (at the rate its sync gave).
    assert_eq!(engine.sync_now(), Ok(open));
    writer.join().unwrap();
    let rate = engine.sync_bytes_per_sec();
    assert_eq!(
        engine.dirty_allowance_bytes(),
        dirty_limit_bytes(engine.config(), rate)
    );
    engine.shutdown().unwrap();
}

#[test]
fn txg_a_hold_reserving_goes_to_the_next_txg_when_the_open_one_is_too_full() {
    let (syncer, engine) = measured_engine(0);
    let limit = engine.dirty_allowance_bytes();
    // Fits: the hold is on the open txg, which carries the reservation.
    let open = engine.open_txg();
    let hold = engine.hold_reserving(Duration::from_millis(100)).unwrap();
    assert_eq!(hold.txg(), open);
    assert!(engine.dirty_allowance_bytes() < limit);
    drop(hold);
    assert_eq!(engine.sync_now_forced(), Ok(open));

    // The open txg carries 60 % of the limit: 300 ms reserved would leave it 40 %. The hold
    // goes to the next txg, which opens with the reservation (the full one synced first).
    let open = open + 1;
    let hold = engine.hold();
    hold.add_dirty(limit / 10 * 6);
    drop(hold);
    syncer.close_gate();
    let reserving = {
        let engine = engine.clone();
        thread::spawn(move || {
            let hold = engine.hold_reserving(Duration::from_millis(300)).unwrap();
            let txg = hold.txg();
            drop(hold);
            txg
        })
    };
    syncer.wait_entered(open);
    assert_eq!(reserving.join().unwrap(), open + 1);
    assert_eq!(engine.open_txg(), open + 1);
    assert!(engine.dirty_allowance_bytes() < limit / 2);
    syncer.open_gate();
    assert_eq!(engine.sync_now_forced(), Ok(open + 1));
    let history = engine.history();
    let last: Vec<(u64, u64)> = history
        .iter()
        .rev()
        .take(2)
        .map(|t| (t.txg, t.reserved_sync_us))
        .collect();
    assert_eq!(last, [(open + 1, 300_000), (open, 0)]);
    engine.shutdown().unwrap();
}

#[test]
fn txg_commands_time_stays_out_of_the_measured_rate() {
    // The syncer says 40 ms of the first sync (at least 50 ms) went to commands: the rate is
    // 2 GiB over the rest (at least a quarter of the sync).
    let (_syncer, engine) = measured_engine(40_000);
    let timing = engine.history().pop().expect("one txg synced");
    assert_eq!(timing.command_us, 40_000);
    let data_us = (timing.sync_us - 40_000).max(timing.sync_us / 4);
    assert_eq!(
        engine.sync_bytes_per_sec(),
        Some(2 * GIB * 1_000_000 / data_us)
    );
    engine.shutdown().unwrap();
}
