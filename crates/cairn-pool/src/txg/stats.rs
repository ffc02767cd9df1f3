//! What the txg engine reports about itself: why a txg synced (`SyncTrigger`), the timings of
//! each synced txg (`TxgTiming`, kept in the history ring), the engine-wide counters
//! (`TxgStats`) and which txg is in which state (`TxgPhases`). Plain data, copied out under the
//! engine lock so readers never hold it.
//!
//! Invariant: times are whole microseconds or nanoseconds, saturating at `u64::MAX` rather than
//! wrapping. This file is at the bottom of the `txg` module with `config` and `error`: it depends
//! on no sibling; the state, sync thread and engine fill these types in.

use std::time::Duration;

/// What made the sync thread quiesce a txg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncTrigger {
    /// Someone waited for the txg or asked for a sync.
    Requested,
    /// Shutdown with dirty data or live holds.
    Shutdown,
    /// The open txg's dirty bytes passed `dirty_sync_percent` of the max.
    DirtyThreshold,
    /// `txg_timeout_ms` elapsed since the txg opened.
    Timeout,
    /// The syncer has background work (a destroy's frees), a share per txg.
    Background,
}

/// Timings of one synced txg (like ZFS's `txgs` kstat). Instants are microseconds since the
/// engine started; durations are microseconds (milliseconds would round most txgs to 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxgTiming {
    pub txg: u64,
    pub trigger: SyncTrigger,
    /// Dirty bytes the txg carried to the syncer.
    pub dirty_bytes: u64,
    /// Holds taken on this txg.
    pub holds_count: u64,
    pub opened_at_us: u64,
    pub quiesce_started_at_us: u64,
    pub sync_started_at_us: u64,
    /// Time open (opened → quiesce started).
    pub open_us: u64,
    /// Time waiting for holds to drain.
    pub quiesce_us: u64,
    /// Time inside `sync_txg`.
    pub sync_us: u64,
    /// Writers delayed by the throttle while this txg was open, and their total delay.
    pub writer_delays_count: u64,
    pub writer_delay_ns_total: u64,
    /// Writers blocked at `dirty_bytes_max` while this txg was open.
    pub writers_blocked_count: u64,
    /// Sync time reserved on this txg for work besides its dirty data
    /// (`TxgEngine::reserve_sync_time`): its writers' allowance was that much smaller.
    pub reserved_sync_us: u64,
    /// Of `sync_us`, what the syncer counted as background work (`background_sync_us`) and as
    /// dataset commands' work (`command_sync_us`); the rest went to the dirty data and the
    /// txg's fixed costs.
    pub background_us: u64,
    pub command_us: u64,
}

/// Engine-wide counters since start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxgStats {
    pub txgs_synced: u64,
    pub bytes_synced_total: u64,
    pub writer_delays_count: u64,
    pub writer_delay_ns_total: u64,
    pub writers_blocked_at_max_count: u64,
    pub syncs_by_timeout: u64,
    pub syncs_by_dirty_threshold: u64,
    pub syncs_by_request: u64,
    pub syncs_at_shutdown: u64,
    /// Txgs synced for background work (`SyncTrigger::Background`).
    pub syncs_for_background: u64,
    /// 0 or 1: the first failure suspends the engine.
    pub sync_failures: u64,
    /// Times the syncer suspended I/O (each ended by a resume or a shutdown).
    pub io_suspensions: u64,
}

/// Which txgs are in which state right now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxgPhases {
    pub open_txg: u64,
    pub quiescing_txg: Option<u64>,
    pub syncing_txg: Option<u64>,
    pub last_synced_txg: u64,
}

pub(super) fn duration_us(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

pub(super) fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
