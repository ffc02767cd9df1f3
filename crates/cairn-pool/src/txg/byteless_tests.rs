//! Tests of txgs whose changes count no dirty bytes (a chmod rewrites a dnode's bonus and
//! adds nothing to `add_dirty`): such a txg must sync at its timeout, on `sync_now` and at
//! shutdown, exactly as one with dirty bytes. Split from `tests.rs` (whose fake syncer and
//! helpers they use) to keep each file within the line limit.

use std::thread;
use std::time::Duration;

use super::tests::{FakeSyncer, eventually, quiet_config};
use super::*;

/// A hold taken and dropped with no bytes: the change it stands for.
fn byteless_change(engine: &TxgEngine) -> u64 {
    engine.hold().txg()
}

#[test]
fn sync_now_syncs_a_txg_with_only_byteless_changes() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    // Nothing joined: nothing to sync.
    assert_eq!(engine.sync_now(), Ok(0));
    let txg = byteless_change(&engine);
    assert_eq!(engine.sync_now(), Ok(txg));
    assert_eq!(syncer.returned(), vec![txg]);
    engine.shutdown().unwrap();
}

#[test]
fn a_txg_with_only_byteless_changes_syncs_at_its_timeout() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        txg_timeout_ms: 50,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    thread::sleep(Duration::from_millis(80));
    assert!(syncer.entered().is_empty(), "an untouched txg stays open");
    let txg = byteless_change(&engine);
    eventually("timeout sync of a byteless txg", || {
        engine.last_synced_txg() == txg
    });
    assert_eq!(engine.history()[0].trigger, SyncTrigger::Timeout);
    engine.shutdown().unwrap();
}

#[test]
fn shutdown_syncs_a_txg_with_only_byteless_changes() {
    let syncer = FakeSyncer::new();
    let engine = TxgEngine::start(quiet_config(), 0, syncer.clone());
    let txg = byteless_change(&engine);
    engine.shutdown().unwrap();
    assert_eq!(syncer.returned(), vec![txg]);
    assert_eq!(engine.stats().syncs_at_shutdown, 1);
}

/// A pin keeps its txg open but is no change: an idle engine with a pin taken syncs nothing
/// on its own, at shutdown, or on `sync_now`.
#[test]
fn a_pin_alone_makes_no_txg_sync() {
    let syncer = FakeSyncer::new();
    let config = TxgConfig {
        txg_timeout_ms: 20,
        ..quiet_config()
    };
    let engine = TxgEngine::start(config, 0, syncer.clone());
    let pin = engine.try_pin().unwrap();
    let pinned_txg = pin.txg();
    drop(pin);
    thread::sleep(Duration::from_millis(80));
    assert!(syncer.entered().is_empty(), "a pin made a txg sync");
    assert_eq!(engine.sync_now(), Ok(0));
    // A real change in the same txg still makes it sync.
    assert_eq!(byteless_change(&engine), pinned_txg);
    assert_eq!(engine.sync_now(), Ok(pinned_txg));
    engine.shutdown().unwrap();
    assert_eq!(syncer.returned(), vec![pinned_txg]);
}
