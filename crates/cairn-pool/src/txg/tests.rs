//! Unit tests of the txg engine, moved whole from the single-file module: the pure functions
//! (defaults, delay curve, dirty limit, wakeup scheduling, sync-left estimate) and the engine's
//! behaviour against fake syncers (ordering, holds versus quiesce, triggers, throttle, failure,
//! panic, I/O suspension, shutdown, history, concurrent accounting).
//!
//! Invariant: no test asserts a duration (see "Known gaps" in the `txg` module comment); waits
//! poll with a generous timeout and fail rather than hang. Tests use the public API through
//! `super::*` and reach the private curve helpers by path.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::config::GIB;
use super::throttle::{delay_ns_within, next_wakeup};
use super::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread;

const PATIENCE: Duration = Duration::from_secs(5);

/// Polls `cond` until it holds; fails after a generous timeout (never a timing assertion).
pub(super) fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on another thread and returns its result, failing (not hanging) if it blocks.
pub(super) fn completes<T: Send + 'static>(
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("{what} did not complete"))
}

#[derive(Default)]
struct FakeState {
    entered: Vec<u64>,
    returned: Vec<u64>,
    gate_closed: bool,
    fail_txg: Option<u64>,
    panic_txg: Option<u64>,
    /// Asks for follow-up txgs until this txg has synced.
    followups_until_txg: u64,
    /// Has background work until this txg has synced.
    background_until_txg: u64,
    /// What each sync says it spent on commands (`command_sync_us`).
    command_us: u64,
}

/// Records calls; can be paused (gate) or told to fail or panic at a given txg.
#[derive(Default)]
pub(super) struct FakeSyncer {
    state: Mutex<FakeState>,
    cv: Condvar,
}

impl FakeSyncer {
    pub(super) fn new() -> Arc<FakeSyncer> {
        Arc::new(FakeSyncer::default())
    }
    pub(super) fn close_gate(&self) {
        self.state.lock().gate_closed = true;
    }
    pub(super) fn open_gate(&self) {
        self.state.lock().gate_closed = false;
        self.cv.notify_all();
    }
    pub(super) fn fail_at(&self, txg: u64) {
        self.state.lock().fail_txg = Some(txg);
    }
    pub(super) fn panic_at(&self, txg: u64) {
        self.state.lock().panic_txg = Some(txg);
    }
    pub(super) fn report_command_us(&self, us: u64) {
        self.state.lock().command_us = us;
    }
    pub(super) fn entered(&self) -> Vec<u64> {
        self.state.lock().entered.clone()
    }
    pub(super) fn returned(&self) -> Vec<u64> {
        self.state.lock().returned.clone()
    }
    pub(super) fn wait_entered(&self, txg: u64) {
        eventually(&format!("syncer entered txg {txg}"), || {
            self.state.lock().entered.contains(&txg)
        });
    }
}

impl TxgSyncer for FakeSyncer {
    fn wants_followup_txg(&self) -> bool {
        let s = self.state.lock();
        s.returned.last().copied().unwrap_or(0) < s.followups_until_txg
    }

    fn has_background_work(&self) -> bool {
        let s = self.state.lock();
        s.returned.last().copied().unwrap_or(0) < s.background_until_txg
    }

    fn command_sync_us(&self) -> u64 {
        self.state.lock().command_us
    }

    fn sync_txg(&self, txg: u64) -> Result<(), SyncError> {
        let mut s = self.state.lock();
        if let Some(&prev) = s.entered.last() {
            assert_eq!(txg, prev + 1, "syncer called out of order");
        }
        s.entered.push(txg);
        while s.gate_closed {
            self.cv.wait(&mut s);
        }
        if s.panic_txg == Some(txg) {
            drop(s);
            panic!("fake syncer told to panic at {txg}");
        }
        if s.fail_txg == Some(txg) {
            return Err(format!("injected failure at txg {txg}").into());
        }
        s.returned.push(txg);
        Ok(())
    }
}

/// Suspends I/O in its first sync of `suspend_txg` and finishes that txg once resumed.
#[derive(Default)]
struct SuspendingSyncer {
    handle: std::sync::OnceLock<SuspendHandle>,
    suspend_txg: u64,
    synced: Mutex<Vec<u64>>,
}

impl TxgSyncer for SuspendingSyncer {
    fn sync_txg(&self, txg: u64) -> Result<(), SyncError> {
        if txg == self.suspend_txg {
            let handle = self.handle.get().expect("handle set before the first sync");
            handle.suspend(format!("device gone in txg {txg}"));
            if !handle.wait_resumed() {
                return Err("shut down while suspended".into());
            }
        }
        self.synced.lock().push(txg);
        Ok(())
    }
}

#[test]
fn suspended_io_refuses_work_then_resumes_and_finishes_the_txg() {
    let syncer = Arc::new(SuspendingSyncer {
        suspend_txg: 1,
        ..SuspendingSyncer::default()
    });
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    let handle = engine.suspend_handle();
    syncer.handle.set(handle.clone()).expect("set once");
    let epoch = engine.durability_epoch();
    let first = dirty(&engine, 10);
    let waiter = {
        let engine = engine.clone();
        thread::spawn(move || engine.wait_synced(first))
    };
    eventually("I/O suspended", || handle.io_suspended().is_some());
    // Waiters and new work are refused, not hung.
    assert!(
        matches!(waiter.join().unwrap(), Err(TxgError::Suspended(msg)) if msg.reason().contains("device gone"))
    );
    assert!(matches!(engine.try_hold(), Err(TxgError::Suspended(_))));
    assert!(engine.suspended().is_some());
    assert_eq!(engine.last_synced_txg(), 0);
    // Resumed: the suspended txg finishes, and the engine takes work again.
    handle.resume();
    assert_eq!(engine.wait_synced(first), Ok(()));
    assert!(engine.suspended().is_none());
    let second = {
        let hold = engine.try_hold().expect("holds are accepted again");
        hold.add_dirty(5);
        hold.txg()
    };
    assert_eq!(engine.wait_synced(second), Ok(()));
    assert_eq!(*syncer.synced.lock(), vec![1, 2]);
    // The suspension moved the durability epoch once; the syncs around it did not.
    assert_eq!(engine.durability_epoch(), epoch.wrapping_add(1));
    engine.note_durability_failure();
    assert_eq!(engine.durability_epoch(), epoch.wrapping_add(2));
    assert_eq!(engine.stats().io_suspensions, 1);
    assert_eq!(engine.stats().sync_failures, 0);
    engine.shutdown().unwrap();
}

#[test]
fn a_shutdown_ends_a_suspension_with_a_failed_txg() {
    let syncer = Arc::new(SuspendingSyncer {
        suspend_txg: 1,
        ..SuspendingSyncer::default()
    });
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    syncer
        .handle
        .set(engine.suspend_handle())
        .expect("set once");
    dirty(&engine, 10);
    engine.sync_now().expect_err("suspended");
    let result = {
        let engine = engine.clone();
        completes("shutdown while suspended", move || engine.shutdown())
    };
    assert!(
        matches!(result, Err(TxgError::Suspended(msg)) if msg.reason().contains("shut down while suspended"))
    );
    assert_eq!(engine.last_synced_txg(), 0);
}

/// Long timeout and a large max: only explicit requests sync, the throttle stays quiet.
pub(super) fn quiet_config() -> TxgConfig {
    TxgConfig {
        txg_timeout_ms: 3_600_000,
        dirty_bytes_max: 1_000_000,
        dirty_sync_percent: 20,
        delay_min_dirty_percent: 60,
        delay_scale_ns: 10_000,
        delay_max_ns: 1_000_000,
        history_len: 100,
        sync_target_ms: 0,
    }
}

pub(super) fn dirty(engine: &TxgEngine, bytes: u64) -> u64 {
    let hold = engine.hold();
    hold.add_dirty(bytes);
    hold.txg()
}

#[test]
fn txg_defaults_follow_zfs_and_ram() {
    let c = TxgConfig::default();
    assert_eq!(c.txg_timeout_ms, 5_000);
    assert_eq!(c.dirty_sync_percent, 20);
    assert_eq!(c.delay_min_dirty_percent, 60);
    assert_eq!(c.delay_scale_ns, 500_000);
    assert_eq!(c.delay_max_ns, 100_000_000);
    assert_eq!(c.history_len, 100);
    assert!(c.dirty_bytes_max > 0 && c.dirty_bytes_max <= 4 * GIB);
    c.validate().unwrap();

    let meminfo = "MemTotal:       24684092 kB\nMemFree:  1 kB\n";
    assert_eq!(parse_meminfo_total_bytes(meminfo), Some(24_684_092 * 1024));
    assert_eq!(parse_meminfo_total_bytes("MemFree: 3 kB\n"), None);
    assert_eq!(parse_meminfo_total_bytes("MemTotal: x kB\n"), None);
    assert_eq!(default_dirty_bytes_max(None), GIB);
    assert_eq!(default_dirty_bytes_max(Some(8 * GIB)), 8 * GIB / 100 * 10);
    assert_eq!(default_dirty_bytes_max(Some(1024 * GIB)), 4 * GIB);
}

#[test]
fn the_dirty_limit_follows_the_measured_sync_rate_within_bounds() {
    let config = TxgConfig {
        dirty_bytes_max: GIB,
        sync_target_ms: 1000,
        ..TxgConfig::default()
    };
    // Nothing measured yet, or no target: the max.
    assert_eq!(dirty_limit_bytes(&config, None), GIB);
    let fixed = TxgConfig {
        sync_target_ms: 0,
        ..config.clone()
    };
    assert_eq!(dirty_limit_bytes(&fixed, Some(1 << 20)), GIB);
    // 200 MiB/s for one second.
    assert_eq!(dirty_limit_bytes(&config, Some(200 << 20)), 200 << 20);
    // Never below the floor, never above the max.
    assert_eq!(dirty_limit_bytes(&config, Some(1)), DIRTY_LIMIT_FLOOR_BYTES);
    assert_eq!(dirty_limit_bytes(&config, Some(u64::MAX)), GIB);
    // The delay curve ends at the target's bytes, under their own lower floor, never past
    // the limit in force.
    assert_eq!(delay_target_bytes(&config, None), GIB);
    assert_eq!(delay_target_bytes(&fixed, Some(1 << 20)), GIB);
    assert_eq!(delay_target_bytes(&config, Some(200 << 20)), 200 << 20);
    assert_eq!(delay_target_bytes(&config, Some(48 << 20)), 48 << 20);
    assert_eq!(
        dirty_limit_bytes(&config, Some(48 << 20)),
        DIRTY_LIMIT_FLOOR_BYTES
    );
    assert_eq!(
        delay_target_bytes(&config, Some(1)),
        DELAY_TARGET_FLOOR_BYTES
    );
    assert_eq!(delay_target_bytes(&config, Some(u64::MAX)), GIB);
    let small = TxgConfig {
        dirty_bytes_max: 16 << 20,
        ..config.clone()
    };
    assert_eq!(delay_target_bytes(&small, Some(1)), 16 << 20);
    // The delay curve is the same shape within the smaller limit.
    let limit = 200 << 20;
    assert_eq!(delay_ns_within(&config, limit, limit / 2), 0);
    assert_eq!(delay_ns_within(&config, limit, limit), config.delay_max_ns);
    assert_eq!(
        delay_ns_within(&config, GIB, GIB / 2),
        delay_ns(&config, GIB / 2)
    );
}

#[test]
fn txg_delay_curve_shape() {
    let c = TxgConfig {
        dirty_bytes_max: 1_000_000,
        ..TxgConfig::default()
    };
    // Flat zero up to 60 %.
    assert_eq!(delay_ns(&c, 0), 0);
    assert_eq!(delay_ns(&c, 600_000), 0);
    // Starts small just above (no cliff): 61 % gives ~12.8 µs.
    assert!(delay_ns(&c, 600_001) < 10);
    assert_eq!(delay_ns(&c, 610_000), 12_820);
    // delay_scale at the midpoint (80 %).
    assert_eq!(delay_ns(&c, 800_000), 500_000);
    // The ZFS man page figures: ~10 ms at 98 %, ~20 ms at 99 %.
    assert_eq!(delay_ns(&c, 980_000), 9_500_000);
    assert_eq!(delay_ns(&c, 990_000), 19_500_000);
    // Capped near 100 % and beyond.
    assert_eq!(delay_ns(&c, 999_000), 100_000_000);
    assert_eq!(delay_ns(&c, 1_000_000), 100_000_000);
    assert_eq!(delay_ns(&c, u64::MAX), 100_000_000);
    // Monotonic over the whole range.
    let mut prev = 0;
    for dirty_bytes in (0..=1_100_000).step_by(997) {
        let d = delay_ns(&c, dirty_bytes);
        assert!(d >= prev, "delay fell at {dirty_bytes}: {d} < {prev}");
        assert!(d <= c.delay_max_ns);
        prev = d;
    }
    // Huge values do not overflow.
    let big = TxgConfig {
        dirty_bytes_max: u64::MAX,
        delay_scale_ns: u64::MAX,
        delay_max_ns: u64::MAX,
        ..c.clone()
    };
    assert_eq!(delay_ns(&big, u64::MAX - 1), u64::MAX);
}

#[test]
fn txg_throttle_schedules_after_previous_wakeup() {
    let now = Instant::now();
    let d = Duration::from_millis(2);
    assert_eq!(next_wakeup(now, None, d), now + d);
    // A previous wakeup in the past gives no credit beyond now.
    let past = now.checked_sub(Duration::from_secs(1)).unwrap_or(now);
    assert_eq!(next_wakeup(now, Some(past), d), now + d);
    // Writers queue behind each other: the third of three goes 3 delays after now.
    let w1 = next_wakeup(now, None, d);
    let w2 = next_wakeup(now, Some(w1), d);
    let w3 = next_wakeup(now, Some(w2), d);
    assert_eq!(w3, now + 3 * d);
}

#[test]
fn txg_sync_in_order_without_gaps() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 41, syncer.clone());
    assert_eq!(engine.open_txg(), 42);
    assert_eq!(engine.last_synced_txg(), 41);
    for expected in 42..52 {
        let txg = dirty(&engine, 10);
        assert_eq!(txg, expected);
        assert_eq!(engine.sync_now(), Ok(expected));
        assert_eq!(engine.last_synced_txg(), expected);
    }
    // Concurrent writers and syncers: still consecutive (the fake asserts order too).
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let engine = engine.clone();
            thread::spawn(move || {
                for _ in 0..25 {
                    dirty(&engine, 1);
                    engine.sync_now().unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    engine.shutdown().unwrap();
    let entered = syncer.entered();
    let last = engine.last_synced_txg();
    assert_eq!(entered, (42..=last).collect::<Vec<_>>());
    assert_eq!(syncer.returned(), entered);
    let history = engine.history();
    assert!(history.windows(2).all(|w| w[1].txg == w[0].txg + 1));
    assert_eq!(history.last().map(|t| t.txg), Some(last));
    assert_eq!(engine.dirty_bytes(), 0);
    assert_eq!(engine.stats().bytes_synced_total, 10 * 10 + 4 * 25);
}

#[test]
fn txg_hold_blocks_its_quiesce_but_not_next_holds() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    let h1 = engine.hold();
    assert_eq!(h1.txg(), 1);
    h1.add_dirty(100);
    let waiter = {
        let engine = engine.clone();
        thread::spawn(move || engine.wait_synced(1))
    };
    eventually("txg 1 quiescing", || {
        engine.phases().quiescing_txg == Some(1)
    });
    assert_eq!(engine.open_txg(), 2);
    // New holds join txg 2 at once, while txg 1 waits for h1.
    let h2 = {
        let engine = engine.clone();
        completes("hold during quiesce", move || engine.hold())
    };
    assert_eq!(h2.txg(), 2);
    h2.add_dirty(7);
    // A hold on a quiescing txg may still dirty it.
    h1.add_dirty(5);
    thread::sleep(Duration::from_millis(30));
    assert!(syncer.entered().is_empty(), "txg 1 synced while held");
    assert!(!waiter.is_finished());
    drop(h1);
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert_eq!(syncer.returned(), vec![1]);
    assert_eq!(engine.history()[0].dirty_bytes, 105);
    assert_eq!(engine.dirty_bytes(), 7);
    drop(h2);
    engine.shutdown().unwrap();
    assert_eq!(syncer.returned(), vec![1, 2]);
}

#[test]
fn txg_sync_in_progress_does_not_block_holds() {
    let syncer = FakeSyncer::new();
    syncer.close_gate();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    dirty(&engine, 100);
    let waiter = {
        let engine = engine.clone();
        thread::spawn(move || engine.sync_now())
    };
    syncer.wait_entered(1);
    assert_eq!(engine.phases().syncing_txg, Some(1));
    let holds_txgs = {
        let engine = engine.clone();
        completes("holds while syncing", move || {
            (0..10)
                .map(|_| {
                    let h = engine.hold();
                    h.add_dirty(3);
                    h.txg()
                })
                .collect::<Vec<_>>()
        })
    };
    assert_eq!(holds_txgs, vec![2; 10]);
    assert_eq!(engine.dirty_bytes(), 130);
    syncer.open_gate();
    assert_eq!(waiter.join().unwrap(), Ok(1));
    assert_eq!(engine.dirty_bytes(), 30);
    engine.shutdown().unwrap();
    assert_eq!(engine.dirty_bytes(), 0);
}

#[test]
fn txg_dirty_threshold_triggers_early_sync() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    // 20 % of 1 000 000 = 200 000: at the threshold nothing happens ...
    dirty(&engine, 200_000);
    thread::sleep(Duration::from_millis(30));
    assert!(syncer.entered().is_empty());
    // ... one byte over starts a sync, with no request and a one-hour timeout.
    dirty(&engine, 1);
    eventually("threshold sync", || engine.last_synced_txg() == 1);
    let stats = engine.stats();
    assert_eq!(stats.syncs_by_dirty_threshold, 1);
    assert_eq!(stats.syncs_by_timeout + stats.syncs_by_request, 0);
    assert_eq!(engine.history()[0].trigger, SyncTrigger::DirtyThreshold);
    assert_eq!(engine.history()[0].dirty_bytes, 200_001);
    engine.shutdown().unwrap();
}

#[test]
fn txg_timeout_triggers_sync() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        txg_timeout_ms: 50,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    // Clean txgs are never synced on their own.
    thread::sleep(Duration::from_millis(80));
    assert!(syncer.entered().is_empty());
    dirty(&engine, 1);
    eventually("timeout sync", || engine.last_synced_txg() == 1);
    assert_eq!(engine.stats().syncs_by_timeout, 1);
    dirty(&engine, 1);
    eventually("second timeout sync", || engine.last_synced_txg() == 2);
    assert_eq!(engine.stats().syncs_by_timeout, 2);
    assert_eq!(engine.history()[1].trigger, SyncTrigger::Timeout);
    engine.shutdown().unwrap();
}

/// A syncer with deferred work gets clean txgs synced on the timeout until it has none.
#[test]
fn txg_followups_sync_clean_txgs_until_the_syncer_is_done() {
    let syncer = FakeSyncer::new();
    syncer.state.lock().followups_until_txg = 4;
    let config = TxgConfig {
        txg_timeout_ms: 20,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    // Nothing synced yet, so nothing asked for follow-ups: a clean engine stays idle.
    thread::sleep(Duration::from_millis(60));
    assert!(syncer.entered().is_empty());
    dirty(&engine, 1);
    eventually("follow-up txgs", || engine.last_synced_txg() == 4);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        engine.last_synced_txg(),
        4,
        "no follow-up once the syncer is done"
    );
    let history = engine.history();
    assert!(history.iter().all(|t| t.trigger == SyncTrigger::Timeout));
    assert!(history[1..].iter().all(|t| t.dirty_bytes == 0));
    engine.shutdown().unwrap();
}

#[test]
fn txg_wait_synced_returns_after_syncer_returned() {
    let syncer = FakeSyncer::new();
    syncer.close_gate();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    dirty(&engine, 10);
    let done = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (engine, syncer, done) = (engine.clone(), syncer.clone(), done.clone());
        thread::spawn(move || {
            let r = engine.wait_synced(1);
            // The syncer had returned for txg 1 before the wait ended.
            assert_eq!(syncer.returned(), vec![1]);
            done.store(true, Ordering::SeqCst);
            r
        })
    };
    syncer.wait_entered(1);
    thread::sleep(Duration::from_millis(30));
    assert!(
        !done.load(Ordering::SeqCst),
        "wait ended while syncer still running"
    );
    syncer.open_gate();
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert!(done.load(Ordering::SeqCst));
    // Waiting for an already synced txg returns at once.
    assert_eq!(engine.wait_synced(1), Ok(()));
    engine.shutdown().unwrap();
}

#[test]
fn txg_wait_on_clean_open_txg_and_forced_sync_make_empty_txgs() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    // Nothing dirty: sync_now returns the last synced txg without a new one.
    assert_eq!(engine.sync_now(), Ok(0));
    assert!(syncer.entered().is_empty());
    // Forced: a new (empty) txg every time.
    assert_eq!(engine.sync_now_forced(), Ok(1));
    assert_eq!(engine.sync_now_forced(), Ok(2));
    // Waiting on the clean open txg syncs it instead of hanging.
    let open = engine.open_txg();
    assert_eq!(open, 3);
    assert_eq!(engine.wait_synced(open), Ok(()));
    assert_eq!(syncer.returned(), vec![1, 2, 3]);
    assert_eq!(engine.stats().syncs_by_request, 3);
    engine.shutdown().unwrap();
}

#[test]
fn txg_throttle_delays_only_above_min() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        dirty_sync_percent: 100,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    let hold = engine.hold();
    hold.add_dirty(500_000); // 50 %: below the 60 % knee
    engine.throttle(1_000);
    assert_eq!(engine.stats().writer_delays_count, 0);
    hold.add_dirty(200_000); // 70 %
    engine.throttle(1_000);
    engine.throttle(1_000);
    let stats = engine.stats();
    assert_eq!(stats.writer_delays_count, 2);
    assert!(stats.writer_delay_ns_total > 0);
    assert_eq!(stats.writers_blocked_at_max_count, 0);
    drop(hold);
    assert_eq!(engine.sync_now(), Ok(1));
    assert_eq!(engine.history()[0].writer_delays_count, 2);
    engine.shutdown().unwrap();
}

#[test]
fn txg_try_hold_now_only_where_the_throttle_would_not_wait() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        dirty_sync_percent: 100,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    let hold = engine.hold();
    hold.add_dirty(500_000); // 50 %: below the 60 % knee
    let now = engine.try_hold_now(1_000).expect("no delay below the knee");
    assert_eq!(now.txg(), hold.txg());
    drop(now);
    // A write that would take dirty data past the knee would be delayed: no hold.
    assert!(engine.try_hold_now(200_000).is_none());
    hold.add_dirty(200_000); // 70 %
    assert!(engine.try_hold_now(1).is_none());
    // Nothing was counted as a delay: the caller takes the ordinary path for that.
    assert_eq!(engine.stats().writer_delays_count, 0);
    drop(hold);
    assert_eq!(engine.sync_now(), Ok(1));
    assert!(engine.try_hold_now(1).is_some());
    engine.shutdown().unwrap();
    assert!(engine.try_hold_now(1).is_none());
}

#[test]
fn txg_throttle_blocks_at_max_until_sync() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        dirty_sync_percent: 100,
        ..quiet_config()
    };
    let max = config.dirty_bytes_max;
    let engine = TxgEngine::start(config, 0, syncer.clone());
    dirty(&engine, max);
    let released = Arc::new(AtomicU64::new(0));
    let writer = {
        let (engine, released) = (engine.clone(), released.clone());
        thread::spawn(move || {
            engine.throttle(1);
            released.store(engine.last_synced_txg(), Ordering::SeqCst);
            let h = engine.hold();
            h.add_dirty(1);
            h.txg()
        })
    };
    eventually("writer blocked at max", || {
        engine.stats().writers_blocked_at_max_count == 1
    });
    thread::sleep(Duration::from_millis(30));
    assert!(!writer.is_finished(), "writer passed the throttle at max");
    assert_eq!(engine.sync_now(), Ok(1));
    assert_eq!(writer.join().unwrap(), 2);
    // The writer was released only by the sync of txg 1.
    assert_eq!(released.load(Ordering::SeqCst), 1);
    assert_eq!(engine.dirty_bytes(), 1);
    assert_eq!(engine.history()[0].writers_blocked_count, 1);
    engine.shutdown().unwrap();
}

#[test]
fn txg_failing_sync_suspends_engine() {
    let syncer = FakeSyncer::new();
    syncer.fail_at(2);
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    let epoch = engine.durability_epoch();
    dirty(&engine, 10);
    assert_eq!(engine.sync_now(), Ok(1));
    assert_eq!(
        engine.durability_epoch(),
        epoch,
        "a good sync moved the epoch"
    );
    syncer.close_gate();
    dirty(&engine, 20);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let engine = engine.clone();
            thread::spawn(move || engine.wait_synced(2))
        })
        .collect();
    syncer.wait_entered(2);
    syncer.open_gate();
    for w in waiters {
        match w.join().unwrap() {
            Err(TxgError::Suspended(msg)) => assert!(msg.reason().contains("injected failure")),
            other => panic!("expected Suspended, got {other:?}"),
        }
    }
    assert!(engine.suspended().is_some());
    assert_eq!(engine.last_synced_txg(), 1);
    assert_eq!(engine.durability_epoch(), epoch.wrapping_add(1));
    // Future waits, syncs and checked holds fail too; nothing more reaches the syncer.
    let h = engine.hold();
    h.add_dirty(5);
    let open = h.txg();
    drop(h);
    assert!(matches!(
        engine.wait_synced(open),
        Err(TxgError::Suspended(_))
    ));
    assert!(matches!(engine.sync_now(), Err(TxgError::Suspended(_))));
    assert!(matches!(
        engine.sync_now_forced(),
        Err(TxgError::Suspended(_))
    ));
    assert!(matches!(engine.try_hold(), Err(TxgError::Suspended(_))));
    // The throttle does not hang writers on a suspended pool, even past the max.
    dirty(&engine, engine.config().dirty_bytes_max);
    {
        let engine = engine.clone();
        completes("throttle while suspended", move || engine.throttle(1));
    }
    assert_eq!(engine.wait_synced(1), Ok(()));
    assert_eq!(syncer.entered(), vec![1, 2]);
    assert_eq!(engine.stats().sync_failures, 1);
    assert!(matches!(engine.shutdown(), Err(TxgError::Suspended(_))));
    assert!(matches!(engine.shutdown(), Err(TxgError::Suspended(_))));
}

#[test]
fn txg_panicking_syncer_suspends_engine() {
    let syncer = FakeSyncer::new();
    syncer.panic_at(1);
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    dirty(&engine, 1);
    match engine.sync_now() {
        Err(TxgError::Suspended(msg)) => assert!(msg.reason().contains("panicked")),
        other => panic!("expected Suspended, got {other:?}"),
    }
    assert!(engine.shutdown().is_err());
}

#[test]
fn txg_shutdown_syncs_dirty_data() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 7, syncer.clone());
    dirty(&engine, 123);
    // A hold still alive at shutdown is waited for and its late dirt is synced too.
    let late = engine.hold();
    let dropper = thread::spawn(move || {
        thread::sleep(Duration::from_millis(20));
        late.add_dirty(1);
        drop(late);
    });
    engine.shutdown().unwrap();
    dropper.join().unwrap();
    assert_eq!(syncer.returned(), vec![8]);
    assert_eq!(engine.last_synced_txg(), 8);
    assert_eq!(engine.dirty_bytes(), 0);
    assert_eq!(engine.stats().syncs_at_shutdown, 1);
    assert_eq!(engine.history()[0].dirty_bytes, 124);
    // Idempotent; afterwards holds are refused and unsynced txgs report ShutDown.
    engine.shutdown().unwrap();
    assert_eq!(engine.try_hold().err(), Some(TxgError::ShutDown));
    assert_eq!(
        engine.wait_synced(engine.open_txg()),
        Err(TxgError::ShutDown)
    );
    assert_eq!(engine.sync_now_forced(), Err(TxgError::ShutDown));
    assert_eq!(engine.sync_now(), Ok(8));
    assert_eq!(engine.wait_synced(8), Ok(()));
    engine.throttle(1);
}

#[test]
fn txg_shutdown_of_clean_engine_syncs_nothing() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    engine.shutdown().unwrap();
    assert!(syncer.entered().is_empty());
    assert_eq!(engine.last_synced_txg(), 0);
}

#[test]
#[should_panic(expected = "hold after shutdown")]
fn txg_hold_after_shutdown_panics() {
    let engine = TxgEngine::start(quiet_config(), 0, FakeSyncer::new());
    engine.shutdown().unwrap();
    let _ = engine.hold();
}

#[test]
fn txg_history_is_a_bounded_ring() {
    let config = TxgConfig {
        history_len: 3,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, FakeSyncer::new());
    for _ in 0..5 {
        dirty(&engine, 2);
        engine.sync_now().unwrap();
    }
    let history = engine.history();
    assert_eq!(
        history.iter().map(|t| t.txg).collect::<Vec<_>>(),
        vec![3, 4, 5]
    );
    for t in &history {
        assert_eq!(t.dirty_bytes, 2);
        assert_eq!(t.holds_count, 1);
        assert_eq!(t.trigger, SyncTrigger::Requested);
        assert!(t.opened_at_us <= t.quiesce_started_at_us);
        assert!(t.quiesce_started_at_us <= t.sync_started_at_us);
    }
    assert_eq!(engine.stats().txgs_synced, 5);
    engine.shutdown().unwrap();
}

#[test]
fn txg_concurrent_writers_account_every_byte() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        txg_timeout_ms: 2,
        dirty_bytes_max: 20_000,
        delay_scale_ns: 20_000,
        delay_max_ns: 200_000,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let engine = engine.clone();
            thread::spawn(move || {
                for n in 0..200 {
                    engine.throttle(100);
                    let h = engine.hold();
                    h.add_dirty(100);
                    let txg = h.txg();
                    drop(h);
                    if i == 0 && n % 50 == 0 {
                        engine.wait_synced(txg).unwrap();
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    engine.shutdown().unwrap();
    let stats = engine.stats();
    assert_eq!(stats.bytes_synced_total, 4 * 200 * 100);
    assert_eq!(engine.dirty_bytes(), 0);
    let entered = syncer.entered();
    assert_eq!(entered, (1..=engine.last_synced_txg()).collect::<Vec<_>>());
    assert_eq!(stats.txgs_synced, entered.len() as u64);
}

/// Background work gets txgs back to back (one per `BACKGROUND_TXG_INTERVAL`), not one per
/// timeout, clean or dirty, until the syncer has none.
#[test]
fn background_work_syncs_txgs_well_before_the_timeout() {
    let syncer = FakeSyncer::new();
    syncer.state.lock().background_until_txg = 5;
    let config = TxgConfig {
        txg_timeout_ms: 3_600_000,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    dirty(&engine, 1);
    engine.sync_now().unwrap();
    eventually("background txgs", || engine.last_synced_txg() == 5);
    thread::sleep(super::BACKGROUND_TXG_INTERVAL * 3);
    assert_eq!(engine.last_synced_txg(), 5, "none once the work is done");
    let history = engine.history();
    assert!(
        history[1..]
            .iter()
            .all(|t| t.trigger == SyncTrigger::Background)
    );
    assert_eq!(engine.stats().syncs_for_background, 4);
    engine.shutdown().unwrap();
}
