//! Pacing of background frees (a destroy's deadlist scans and dead trees, `snapshot_sync.rs`):
//! how much of that work one txg's sync may do, so a pool that frees keeps its foreground
//! writes at speed (issue 34, "destroy without stalls").
//!
//! Why a measured cost and not the loop's own clock: the free loop's time is only part of
//! what freeing costs the sync. Every freed block is also a space-log entry, a change of the
//! allocator's deferred set (released `DEFER_TXGS` later, under the allocator's lock that
//! writers' space checks take), and the free records rewritten in the MOS; all of that runs
//! after the loop has stopped its clock. So each txg's whole sync time is measured, the sync
//! time of txgs without free work is the baseline, and what a txg that freed took beyond it,
//! divided by the work it did, is the cost of one unit of work (a deadlist entry scanned or a
//! tree block freed), never taken below the loop's own per-unit time. The next txg gets as
//! many units as its budget buys at that cost, and the loop's clock still stops it early.
//!
//! The budget: `free_time_per_txg_ms` for a txg with no foreground writes, a quarter of it
//! when writers dirtied data in the txg (their txgs follow each other while frees run: the
//! frees then take a small share of the sync thread, and of the CPU the writers need). Every
//! txg still makes one step of progress however small the budget (`process_frees`).
//!
//! The same estimate tells the txg engine how much of a sync was free work
//! (`background_sync_us`), so its measured sync rate — which sets the dirty limit under the
//! sync target — counts only the time that followed the dirty bytes: freeing is a bounded
//! cost per txg, not a slower device, and must not throttle the writers.
//!
//! Invariants: at most one txg is being synced (the sync thread alone calls this); a txg's
//! figures are taken at its end (`txg_synced`) and cleared there.

use cairn_dataset::frees::FREE_CHUNK_ENTRIES;
use std::time::{Duration, Instant};

/// Share of `free_time_per_txg_ms` a txg with foreground dirty data gives to frees (1/4).
const FOREGROUND_SHARE_DIVISOR: u64 = 4;
/// Weight of a new sample in the moving averages (1/4).
const SAMPLE_WEIGHT_DIVISOR: u64 = 4;

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct FreePacing {
    /// Sync time of txgs without free work (moving average), microseconds.
    base_sync_us: Option<u64>,
    /// Whole-sync cost of one unit of free work (moving average), nanoseconds.
    cost_ns_per_unit: Option<u64>,
    /// The txg being synced: units of free work done and the loop's own time.
    units: u64,
    loop_time: Duration,
    /// Free work's estimated share of the last synced txg's sync, microseconds.
    last_background_us: u64,
}

/// What one txg's frees may do: a deadline for the loop (`None`: no time bound) and a bound
/// on units of work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FreeBudget {
    pub(crate) deadline: Option<Instant>,
    pub(crate) units_max: u64,
}

impl FreePacing {
    /// The budget of this txg's frees, starting now: `free_time_ms` of work (a quarter with
    /// `foreground` dirty data), at most `units_max` units.
    pub(crate) fn budget(&self, free_time_ms: u64, foreground: bool, units_max: u64) -> FreeBudget {
        let time_ms = if foreground {
            free_time_ms / FOREGROUND_SHARE_DIVISOR
        } else {
            free_time_ms
        };
        let time = Duration::from_millis(time_ms);
        let deadline = Instant::now().checked_add(time);
        // No deadline: the caller asked for no time bound; the unit bound alone applies.
        // Never below one step of the loop: every txg makes progress.
        let units_max = match (deadline, self.cost_ns_per_unit) {
            (Some(_), Some(cost_ns)) => {
                let affordable = time.as_nanos() / u128::from(cost_ns.max(1));
                u64::try_from(affordable)
                    .unwrap_or(u64::MAX)
                    .max(FREE_CHUNK_ENTRIES)
                    .min(units_max)
            }
            _ => units_max,
        };
        FreeBudget {
            deadline,
            units_max,
        }
    }

    /// Notes the free work the txg being synced did: `units` units in `loop_time`.
    pub(crate) fn note_work(&mut self, units: u64, loop_time: Duration) {
        self.units += units;
        self.loop_time += loop_time;
    }

    /// The txg being synced ended, its whole sync having taken `sync_time`: updates the
    /// baseline (no free work) or the cost per unit (some).
    pub(crate) fn txg_synced(&mut self, sync_time: Duration) {
        let sync_us = u64::try_from(sync_time.as_micros()).unwrap_or(u64::MAX);
        let (units, loop_time) = (
            std::mem::take(&mut self.units),
            std::mem::take(&mut self.loop_time),
        );
        if units == 0 {
            self.base_sync_us = Some(average(self.base_sync_us, sync_us));
            self.last_background_us = 0;
            return;
        }
        let loop_us = u64::try_from(loop_time.as_micros()).unwrap_or(u64::MAX);
        // Beyond the baseline, but never less than the loop itself took (the loop alone
        // while no baseline is known: frees left from before an import).
        let extra_us = self
            .base_sync_us
            .map_or(loop_us, |base_us| {
                sync_us.saturating_sub(base_us).max(loop_us)
            })
            .min(sync_us);
        let sample_ns = extra_us.saturating_mul(1000) / units;
        self.cost_ns_per_unit = Some(average(self.cost_ns_per_unit, sample_ns));
        self.last_background_us = extra_us;
    }

    /// Free work's estimated share of the last synced txg's sync, in microseconds.
    pub(crate) fn background_sync_us(&self) -> u64 {
        self.last_background_us
    }
}

fn average(old: Option<u64>, sample: u64) -> u64 {
    match old {
        Some(old) => old - old / SAMPLE_WEIGHT_DIVISOR + sample / SAMPLE_WEIGHT_DIVISOR,
        None => sample,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_counts_the_whole_sync_beyond_the_baseline() {
        let mut pacing = FreePacing::default();
        pacing.txg_synced(Duration::from_millis(40));
        // 1,000 units whose loop took 10 ms in a sync of 240 ms: 200 ms beyond the baseline.
        pacing.note_work(1000, Duration::from_millis(10));
        pacing.txg_synced(Duration::from_millis(240));
        assert_eq!(pacing.background_sync_us(), 200_000);
        assert_eq!(pacing.cost_ns_per_unit, Some(200_000));
        // 200 ms buys 1,000 units; with foreground writes, a quarter of that; never less
        // than one step of the loop.
        assert_eq!(pacing.budget(200, false, 1 << 30).units_max, 1000);
        assert_eq!(pacing.budget(800, true, 1 << 30).units_max, 1000);
        assert_eq!(
            pacing.budget(0, false, 1 << 30).units_max,
            FREE_CHUNK_ENTRIES
        );
        // The bound asked for still holds; no time bound, no unit bound from the cost.
        assert_eq!(pacing.budget(100, false, 7).units_max, 7);
        assert_eq!(pacing.budget(u64::MAX, false, 1 << 30).units_max, 1 << 30);
        // A txg without frees is baseline again and counts nothing as free work.
        pacing.txg_synced(Duration::from_millis(40));
        assert_eq!(pacing.background_sync_us(), 0);
    }

    #[test]
    fn the_loop_time_is_the_least_cost() {
        let mut pacing = FreePacing::default();
        pacing.txg_synced(Duration::from_millis(100));
        pacing.note_work(10, Duration::from_millis(30));
        pacing.txg_synced(Duration::from_millis(110));
        assert_eq!(pacing.background_sync_us(), 30_000);
    }
}
