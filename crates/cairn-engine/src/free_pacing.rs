//! Pacing of background frees (a destroy's deadlist scans and dead trees, `snapshot_sync.rs`):
//! how much of that work one txg's sync may do, so a pool that frees keeps its foreground
//! writes at speed (issue 34, "destroy without stalls").
//!
//! Why a measured cost and not the loop's own clock: the free loop's time is only part of
//! what freeing costs the sync. Every freed block is also a space-log entry and a change of
//! the allocator's deferred set, released `DEFER_TXGS` later under the allocator's lock that
//! writers' space checks take, and the scans rewrite the MOS (deadlist parts and the free
//! queue's records); that work runs after the loop has stopped its clock. So each txg
//! measures the loop, the MOS's sync, and the space-log write and the deferred release; it
//! counts the frees' share of the latter two in proportion to the blocks freed among all
//! blocks the txg allocated or freed, and the MOS's sync whole (in a txg that frees, the
//! frees' MOS changes outweigh the rest; under fio, a destroy of 10,000 snapshots tripled it:
//! left out, the price was half the real cost and the writers lost twice the share meant
//! for the frees); that total, divided by the units of work done (a deadlist entry scanned
//! or a tree block freed), is the cost of one unit, never below the loop's own per-unit
//! time. (Subtracting the sync time of txgs without frees instead was too noisy:
//! foreground txgs vary by hundreds of milliseconds with their dirty data, and every bit of
//! it was charged to the frees.) The next txg gets as many units as its budget buys at that
//! cost, and the loop's clock still stops it early.
//!
//! The budget: `free_time_per_txg_ms` for a txg with no foreground writes, an eighth of it
//! when writers dirtied data in the txg (their txgs follow each other while frees run: the
//! frees then take a small share of the sync thread, and of the CPU the writers need), less
//! what the same sync already spent on snapshot commands (the txg of a large range destroy
//! has its own few hundred milliseconds of work). Every txg still makes one step of progress
//! however small the budget (`process_frees`).
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

/// Share of `free_time_per_txg_ms` a txg with foreground dirty data gives to frees (1/8:
/// 12.5 ms of a default 100). Measured on 2 cores under fio (`bench/snapshots.sh`), the
/// writers lose two to three times the frees' share of the sync thread (the frees' reads and
/// the CPU they take from the writers' own threads), so a quarter cost them about a third of
/// their IOPS; an eighth keeps them near 80 % while 10,000 snapshots still free at tens of
/// MiB/s.
const FOREGROUND_SHARE_DIVISOR: u64 = 8;
/// Weight of a new sample in the moving averages (1/4).
const SAMPLE_WEIGHT_DIVISOR: u64 = 4;

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct FreePacing {
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
    /// The budget of this txg's frees, starting now: `free_time_ms` of work (an eighth with
    /// `foreground` dirty data), less `commands_time` the same sync already spent on snapshot
    /// commands (a destroy of 10,000 snapshots takes a few hundred milliseconds of its txg),
    /// at most `units_max` units.
    pub(crate) fn budget(
        &self,
        free_time_ms: u64,
        foreground: bool,
        commands_time: Duration,
        units_max: u64,
    ) -> FreeBudget {
        let time_ms = if foreground {
            free_time_ms / FOREGROUND_SHARE_DIVISOR
        } else {
            free_time_ms
        };
        let time = Duration::from_millis(time_ms).saturating_sub(commands_time);
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

    /// The txg being synced ended: it spent `space_time` writing the space log and releasing
    /// deferred frees and `mos_time` syncing the MOS, and wrote `blocks_written` blocks.
    /// Prices a unit of its free work.
    pub(crate) fn txg_synced(
        &mut self,
        space_time: Duration,
        mos_time: Duration,
        blocks_written: u64,
    ) {
        let (units, loop_time) = (
            std::mem::take(&mut self.units),
            std::mem::take(&mut self.loop_time),
        );
        if units == 0 {
            self.last_background_us = 0;
            return;
        }
        // The frees' share of the space work: their blocks among all the txg changed.
        let space_ns = u128::from(u64::try_from(space_time.as_nanos()).unwrap_or(u64::MAX));
        let share_ns = space_ns * u128::from(units) / u128::from(units + blocks_written);
        let total_ns = loop_time
            .as_nanos()
            .saturating_add(share_ns)
            .saturating_add(mos_time.as_nanos());
        let total_ns = u64::try_from(total_ns).unwrap_or(u64::MAX);
        self.cost_ns_per_unit = Some(average(self.cost_ns_per_unit, total_ns / units));
        self.last_background_us = total_ns / 1000;
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
    fn the_cost_counts_the_space_work_in_proportion_to_the_blocks_freed() {
        let mut pacing = FreePacing::default();
        // 1,000 units whose loop took 10 ms; 240 ms of space work in a txg that also wrote
        // 2,000 blocks: a third of it is the frees'; the MOS's 20 ms are theirs whole. 110 ms
        // in all, 110 us a unit.
        pacing.note_work(1000, Duration::from_millis(10));
        pacing.txg_synced(Duration::from_millis(240), Duration::from_millis(20), 2000);
        assert_eq!(pacing.background_sync_us(), 110_000);
        assert_eq!(pacing.cost_ns_per_unit, Some(110_000));
        // 220 ms buys 2,000 units; with foreground writes, an eighth of that; never less
        // than one step of the loop; the bound asked for still holds; no time bound, no
        // unit bound from the cost.
        assert_eq!(
            pacing.budget(220, false, Duration::ZERO, 1 << 30).units_max,
            2000
        );
        assert_eq!(
            pacing.budget(1760, true, Duration::ZERO, 1 << 30).units_max,
            2000
        );
        assert_eq!(
            pacing.budget(0, false, Duration::ZERO, 1 << 30).units_max,
            FREE_CHUNK_ENTRIES
        );
        // Commands' time in the same sync comes off the budget, down to one step.
        let ms = Duration::from_millis;
        assert_eq!(pacing.budget(330, false, ms(110), 1 << 30).units_max, 2000);
        assert_eq!(pacing.budget(1760, true, ms(110), 1 << 30).units_max, 1000);
        assert_eq!(
            pacing.budget(100, false, ms(400), 1 << 30).units_max,
            FREE_CHUNK_ENTRIES
        );
        assert_eq!(pacing.budget(220, false, Duration::ZERO, 7).units_max, 7);
        assert_eq!(
            pacing
                .budget(u64::MAX, false, Duration::ZERO, 1 << 30)
                .units_max,
            1 << 30
        );
        // A txg without frees counts nothing as free work and keeps the price.
        pacing.txg_synced(Duration::from_millis(40), Duration::from_millis(9), 10);
        assert_eq!(pacing.background_sync_us(), 0);
        assert_eq!(pacing.cost_ns_per_unit, Some(110_000));
    }

    #[test]
    fn a_txg_of_frees_alone_is_charged_all_its_space_work() {
        let mut pacing = FreePacing::default();
        pacing.note_work(10, Duration::from_millis(3));
        pacing.txg_synced(Duration::from_millis(7), Duration::ZERO, 0);
        assert_eq!(pacing.background_sync_us(), 10_000);
    }
}
