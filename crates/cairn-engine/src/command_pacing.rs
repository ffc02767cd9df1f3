//! Pricing of snapshot commands' sync work, so the txg that carries a large one leaves it room
//! under the sync target (issue 34, "destroy without stalls": no txg past 500 ms).
//!
//! Why: a command is one txg, all or nothing (a range destroy of 10,000 snapshots must not be
//! split across a crash), and its work runs in that txg's sync on top of whatever data
//! writers dirtied in it: a destroy of 10,000 snapshots takes a few hundred milliseconds of
//! its txg. The txg engine cannot know that (it knows nothing of snapshots), but it can hold a
//! txg's writers to less data when told how much sync time is spoken for
//! (`TxgEngine::hold_reserving`, "Reserved sync time" in cairn-pool's `txg` module). This
//! module is the estimate: each txg's sync measures the time its snapshot commands took (the
//! sync tasks, the snapshot changes themselves, the snapshot table's records and deadlists
//! written into the MOS, and the MOS's sync when the commands changed it) and the number of
//! snapshots they changed (the units); the cost of a unit is a moving average over txgs that
//! changed at least `SAMPLE_MIN_UNITS` (in a txg of one snapshot the fixed costs — the MOS's
//! sync, the directory — are most of it, and would price a unit at milliseconds). A command
//! about to queue `n` changes reserves `n` units at that cost; below `RESERVE_MIN` it
//! reserves nothing (a snapshot of one dataset costs tens of microseconds).
//!
//! The same measure tells the txg engine how much of the last sync was commands' work
//! (`command_sync_us`), shown per txg (`pool txgs`) and left out of its measured sync rate.
//!
//! Invariants: the sync thread alone notes work and closes txgs (`txg_synced`); a txg's
//! figures are cleared there; before any sample the cost of a unit is `PRIOR_COST_NS_PER_UNIT`.

use std::time::Duration;

/// Least number of snapshot changes in a txg for it to price a unit.
const SAMPLE_MIN_UNITS: u64 = 64;
/// Cost of a unit before any txg priced one: ~26 µs a snapshot destroyed, measured in the
/// destroy txg of 10,000 snapshots under fio (BENCHMARKS.md, "With peers, after the throttle
/// change"), rounded up.
const PRIOR_COST_NS_PER_UNIT: u64 = 30_000;
/// Least estimate worth a reservation.
const RESERVE_MIN: Duration = Duration::from_millis(5);
/// Weight of a new sample in the moving average (1/4).
const SAMPLE_WEIGHT_DIVISOR: u64 = 4;

/// See the module doc.
#[derive(Debug, Default)]
pub(crate) struct CommandPacing {
    /// Sync cost of one snapshot change (moving average), nanoseconds.
    cost_ns_per_unit: Option<u64>,
    /// The txg being synced: snapshot changes made and the commands' time so far.
    units: u64,
    time: Duration,
    /// Commands' share of the last synced txg's sync, microseconds.
    last_command_us: u64,
}

impl CommandPacing {
    /// The sync time a command changing `units` snapshots is expected to take, if worth a
    /// reservation.
    pub(crate) fn estimate(&self, units: u64) -> Option<Duration> {
        let cost_ns = self.cost_ns_per_unit.unwrap_or(PRIOR_COST_NS_PER_UNIT);
        let ns = u128::from(units) * u128::from(cost_ns);
        let time = Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX));
        (time >= RESERVE_MIN).then_some(time)
    }

    /// Notes, in the txg being synced, `units` snapshot changes made (0 for work that only
    /// adds time) and `time` spent on commands.
    pub(crate) fn note_work(&mut self, units: u64, time: Duration) {
        self.units += units;
        self.time += time;
    }

    /// Notes `time` as commands' work if the txg being synced made snapshot changes (work
    /// that is theirs only then: the table's records and the MOS's sync).
    pub(crate) fn note_if_units(&mut self, time: Duration) {
        if self.units > 0 {
            self.time += time;
        }
    }

    /// The txg being synced ended: its commands' time is known; a unit is priced if it made
    /// enough changes.
    pub(crate) fn txg_synced(&mut self) {
        let (units, time) = (
            std::mem::take(&mut self.units),
            std::mem::take(&mut self.time),
        );
        let ns = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
        self.last_command_us = ns / 1000;
        if units >= SAMPLE_MIN_UNITS {
            let sample = ns / units;
            self.cost_ns_per_unit = Some(match self.cost_ns_per_unit {
                Some(old) => old - old / SAMPLE_WEIGHT_DIVISOR + sample / SAMPLE_WEIGHT_DIVISOR,
                None => sample,
            });
        }
    }

    /// Commands' share of the last synced txg's sync, in microseconds.
    pub(crate) fn command_sync_us(&self) -> u64 {
        self.last_command_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_priced_by_txgs_of_many_changes_only() {
        let mut pacing = CommandPacing::default();
        let ms = Duration::from_millis;
        // The prior: 10,000 snapshots at 30 us; one snapshot is not worth reserving for.
        assert_eq!(pacing.estimate(10_000), Some(ms(300)));
        assert_eq!(pacing.estimate(1), None);
        // A txg of one snapshot whose MOS sync took 20 ms: counted, not priced.
        pacing.note_work(1, ms(20));
        pacing.txg_synced();
        assert_eq!(pacing.command_sync_us(), 20_000);
        assert_eq!(pacing.estimate(10_000), Some(ms(300)));
        // 1,000 changes in 50 ms (three parts, the last counted as theirs): 50 us a unit.
        pacing.note_work(1000, ms(30));
        pacing.note_work(0, ms(10));
        pacing.note_if_units(ms(10));
        pacing.txg_synced();
        assert_eq!(pacing.command_sync_us(), 50_000);
        // Without changes, the MOS's time is not commands'.
        pacing.note_if_units(ms(10));
        pacing.txg_synced();
        assert_eq!(pacing.command_sync_us(), 0);
        assert_eq!(pacing.estimate(10_000), Some(ms(500)));
        // Then 10 us a unit: a quarter of the way there.
        pacing.note_work(1000, ms(10));
        pacing.txg_synced();
        assert_eq!(pacing.estimate(1000), Some(Duration::from_micros(40_000)));
        // A txg without commands: nothing spent, the price kept.
        pacing.txg_synced();
        assert_eq!(pacing.command_sync_us(), 0);
        assert_eq!(pacing.estimate(1000), Some(Duration::from_micros(40_000)));
    }
}
