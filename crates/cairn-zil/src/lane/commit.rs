//! The commit path: how a committer makes its records durable. It waits while another builds
//! or while its record is in a batch in flight, or becomes the lane's builder: takes a batch of
//! pending records (after a short wait for company), has `build.rs` turn them into blocks off
//! the lock, puts the batch in flight, writes it out as FUA writes and completes it.
//!
//! Invariants: one builder per lane at a time (`LaneState::building`) and at most
//! `IN_FLIGHT_MAX` batches in flight; `durable_ticket` only advances over the completed prefix
//! of `in_flight`; a failure falls back to a txg sync (`chain.rs`), and a panic fails the lane
//! (`FailOnPanic`) rather than leave the builder role taken for good. The top of the lane's
//! files: uses `build.rs`, `chain.rs` and `mod.rs`.

use super::build::Built;
use super::{Batch, Chain, Itx, Lane, LaneState, WrittenBlock, payload_len, wake};
use crate::{IntentLog, LogSource, ZilError};
use bytes::Bytes;
use cairn_device::queue::IoClass;
use cairn_format::Dva;
use cairn_format::intent_log::{LOG_BLOCK_SIZE_MAX, LOG_RECORD_HEADER_SIZE};
use cairn_pipeline::{PipelineError, RawWrites};
use parking_lot::MutexGuard;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Largest run of contiguous log blocks written as one device call.
const RUN_BYTES_MAX: u64 = 8 << 20;
/// Padding between contiguous blocks of a run (at most a block minus one sector).
static ZEROS: [u8; LOG_BLOCK_SIZE_MAX as usize] = [0; LOG_BLOCK_SIZE_MAX as usize];
/// A builder waits at most this fraction (1/n) of the last batch's latency for company.
const COMPANY_WAIT_DIVISOR: u32 = 10;
/// Batches of one lane in flight at once. Log blocks are FUA writes (queued commands, unlike
/// flushes), so overlapping batches pipeline on flash, and on a disk they form a train: a
/// batch whose blocks reach the drive while the one before is still going to the platter is
/// written right behind it (its blocks follow on the same track), where a batch issued after
/// the previous one completed would wait a whole rotation for its place to come round again.
const IN_FLIGHT_MAX: usize = 4;

/// What a builder took for one batch, and the lane's chain as it was when it did.
struct BatchPlan {
    chain: Option<Chain>,
    /// `chain_epoch` then: a different one afterwards means the chain was retired meanwhile.
    epoch: u64,
    next_alloc_txg: u64,
    last_ticket: u64,
    previous_batch_bytes: usize,
    records: usize,
    started: Instant,
}

impl BatchPlan {
    /// Takes the pending records of one batch (at least one: the caller saw its own pending).
    fn take(st: &mut LaneState, bytes_max: usize) -> (BatchPlan, Vec<Itx>) {
        let started = Instant::now();
        let itxs = st.take_batch(bytes_max);
        // A batch is a contiguous run of tickets, all past the durable ones.
        debug_assert!(
            itxs.first()
                .is_some_and(|first| first.ticket > st.durable_ticket)
        );
        debug_assert!(
            itxs.first()
                .zip(itxs.last())
                .is_some_and(|(first, last)| last.ticket - first.ticket + 1 == itxs.len() as u64)
        );
        let plan = BatchPlan {
            chain: st.chain,
            epoch: st.chain_epoch,
            next_alloc_txg: st.next_alloc_txg,
            last_ticket: itxs.last().expect("at least one record").ticket,
            previous_batch_bytes: st.last_batch_bytes,
            records: itxs.len(),
            started,
        };
        (plan, itxs)
    }
}

/// Fails the lane if its committer panics (a bug): the builder role or a batch in flight would
/// otherwise stay taken forever, and every later commit, a clean shutdown included, would wait
/// for it. Committers get the error instead, as when the pool is suspended.
struct FailOnPanic<'a> {
    lane: &'a Lane,
}

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut st = self.lane.state.lock();
        st.failed = Some("internal error: a commit of this log panicked".to_string());
        st.building = false;
        let to_wake = self.lane.publish(&mut st);
        self.lane.cond.notify_all();
        self.lane.company.notify_all();
        drop(st);
        wake(to_wake);
    }
}

impl LaneState {
    /// Marks a batch's blocks as no longer being written. They were appended to `written`
    /// when the batch went in flight, so at most a few later batches' blocks follow them:
    /// search from the back (`written` holds a whole txg's blocks on a busy lane).
    fn mark_done(&mut self, blocks: &[WrittenBlock]) {
        let mut left = blocks.len();
        for block in self.written.iter_mut().rev() {
            if left == 0 {
                break;
            }
            if blocks.iter().any(|ours| ours.dva == block.dva) {
                block.done = true;
                left -= 1;
            }
        }
    }

    /// Registers a built batch as in flight and moves the chain's end past its blocks;
    /// returns the batch's id.
    fn launch(&mut self, built: &Built) -> u64 {
        // Batches go in flight in ticket order (one builder at a time), at most IN_FLIGHT_MAX.
        assert!(
            self.in_flight.len() < IN_FLIGHT_MAX,
            "a batch launched past the in-flight limit"
        );
        debug_assert!(
            self.in_flight
                .back()
                .is_none_or(|last| last.last_ticket < built.last_ticket)
        );
        debug_assert_eq!(built.blocks.len(), built.encoded.len());
        let batch_id = self.next_batch_id;
        self.next_batch_id += 1;
        self.in_flight.push_back(Batch {
            id: batch_id,
            last_ticket: built.last_ticket,
            done: false,
        });
        self.chain = Some(built.chain);
        self.next_alloc_txg = built.next_alloc_txg;
        self.last_batch_bytes = built.total_bytes;
        self.written.extend(built.blocks.iter().copied());
        batch_id
    }

    pub(super) fn complete(&mut self, batch_id: u64) {
        // A txg sync that covered the batch meanwhile has already dropped it (`settle_after_sync`).
        if let Some(batch) = self.in_flight.iter_mut().find(|batch| batch.id == batch_id) {
            batch.done = true;
        }
        while self.in_flight.front().is_some_and(|batch| batch.done) {
            let batch = self.in_flight.pop_front().expect("front checked");
            self.durable_ticket = self.durable_ticket.max(batch.last_ticket);
        }
    }

    /// Takes pending records for one batch: at least one, then while under `bytes_max`.
    fn take_batch(&mut self, bytes_max: usize) -> Vec<Itx> {
        let mut taken = Vec::new();
        let mut bytes = 0usize;
        while let Some(itx) = self.pending.front() {
            let size = LOG_RECORD_HEADER_SIZE + payload_len(&itx.op);
            if !taken.is_empty() && bytes + size > bytes_max {
                break;
            }
            bytes += size;
            taken.push(self.pending.pop_front().expect("front checked"));
        }
        taken
    }
}

impl IntentLog {
    /// Makes the lane's tickets up to `target` durable: waits while others build or while its
    /// record is in a batch in flight, and otherwise becomes the lane's builder and commits a
    /// batch itself; after a failure, recovers (a resumed pool) or reports it.
    pub(crate) fn commit_lane(
        &self,
        lane: &Lane,
        target: u64,
        source: &dyn LogSource,
    ) -> Result<(), ZilError> {
        let started = Instant::now();
        let _fail_on_panic = FailOnPanic { lane };
        let mut st = lane.state.lock();
        while st.durable_ticket < target {
            if st.failed.is_some() {
                self.recover_from_failure(lane, &mut st, target)?;
            } else if self.take_builder_role(lane, &mut st, target) {
                self.commit_as_builder(lane, &mut st, target, source)?;
            }
        }
        drop(st);
        self.stats.count_commit(started.elapsed());
        Ok(())
    }

    /// The lane has failed: if only because the pool's I/O was suspended and the pool has
    /// resumed since, clears the failure and makes `target` durable with a txg sync; otherwise
    /// the failure is the commit's.
    fn recover_from_failure(
        &self,
        lane: &Lane,
        st: &mut MutexGuard<'_, LaneState>,
        target: u64,
    ) -> Result<(), ZilError> {
        let reason = st.failed.clone().unwrap_or_default();
        if !st.failed_by_suspension || self.txg.suspended().is_some() {
            return Err(self.failed(reason));
        }
        st.failed = None;
        st.failed_by_suspension = false;
        MutexGuard::unlocked(st, || self.fall_back(lane, target))
    }

    /// Becomes the lane's builder if `target`'s record is still pending and no one else is
    /// building (nor too many batches in flight); otherwise waits for what concerns it — its
    /// batch's completion, or a change of builder — and returns false to look again.
    fn take_builder_role(
        &self,
        lane: &Lane,
        st: &mut MutexGuard<'_, LaneState>,
        target: u64,
    ) -> bool {
        let front_is_ours = st.pending.front().is_some_and(|itx| itx.ticket <= target);
        if !front_is_ours {
            // Our record is in a batch: only its completion (or a failure) concerns us.
            self.stats.commit_waits.fetch_add(1, Ordering::Relaxed);
            lane.wait_durable(st, target);
            return false;
        }
        if st.building || st.in_flight.len() >= IN_FLIGHT_MAX {
            // Someone is building, or our record is in a batch in flight: wait for either.
            self.stats.commit_waits.fetch_add(1, Ordering::Relaxed);
            lane.cond.wait(st);
            return false;
        }
        st.building = true;
        true
    }

    /// As the lane's builder: commits one batch of pending records (or serves a bulk commit by
    /// a txg sync), then steps down. `target` may still not be durable afterwards (the batch
    /// was cut at `batch_bytes_max`); the caller looks again.
    fn commit_as_builder(
        &self,
        lane: &Lane,
        st: &mut MutexGuard<'_, LaneState>,
        target: u64,
        source: &dyn LogSource,
    ) -> Result<(), ZilError> {
        st.drop_synced_front(self.txg.last_synced_txg());
        wake(lane.publish(st));
        // Log blocks held for unsynced txgs: past the limit a txg sync is asked for (it
        // releases them shortly); past twice the limit the commit waits for one.
        let held_bytes: u64 = st
            .written
            .iter()
            .map(|block| u64::from(block.dva.asize))
            .sum();
        // The limit shrinks with the pool's free space: replay needs room beside the log.
        let held_max = self
            .config
            .held_bytes_max
            .min(self.io.space().lock().available_bytes() / 8);
        if held_bytes >= held_max {
            self.txg.request_sync();
        }
        if st.pending.payload_bytes >= self.config.bulk_sync_bytes || held_bytes >= 2 * held_max {
            return MutexGuard::unlocked(st, || self.sync_instead(lane));
        }
        self.wait_for_company(lane, st);
        // A fallback meanwhile may have made everything durable (and emptied `pending`).
        if st.pending.front().is_none_or(|itx| itx.ticket > target) {
            st.building = false;
            lane.cond.notify_all();
            return Ok(());
        }
        let (plan, itxs) = BatchPlan::take(st, self.config.batch_bytes_max);
        let built = MutexGuard::unlocked(st, || {
            self.build(
                lane,
                itxs,
                plan.chain,
                plan.next_alloc_txg,
                plan.previous_batch_bytes,
                source,
            )
        });
        st.building = false;
        match self.accept_built(lane, st, built, &plan)? {
            Some(built) => self.write_batch(lane, st, built, &plan),
            None => Ok(()),
        }
    }

    /// Group commit with company: when the last batch carried several records (several
    /// committers are active), waits up to a tenth of its write time for the others to arrive,
    /// so one write serves them all instead of every other batch carrying only the early ones.
    /// A lone committer (last batch of one) never waits.
    fn wait_for_company(&self, lane: &Lane, st: &mut MutexGuard<'_, LaneState>) {
        if st.last_batch_records <= 1 {
            return;
        }
        let deadline = Instant::now() + st.last_batch_latency / COMPANY_WAIT_DIVISOR;
        st.company_wanted = st.last_batch_records;
        while st.pending.len() < st.company_wanted && Instant::now() < deadline {
            lane.company.wait_until(st, deadline);
        }
        st.company_wanted = 0;
    }

    /// A builder's result, back under the lock: the blocks to write, or `None` when the batch
    /// was instead made durable by a txg sync — the chain was retired while it was built (its
    /// blocks hang off a dead chain), or building failed.
    fn accept_built(
        &self,
        lane: &Lane,
        st: &mut MutexGuard<'_, LaneState>,
        built: Result<Built, ZilError>,
        plan: &BatchPlan,
    ) -> Result<Option<Built>, ZilError> {
        let retired = st.chain_epoch != plan.epoch;
        match built {
            Ok(built) if !retired => Ok(Some(built)),
            Ok(built) => {
                // Our blocks are freed like the rest of the dead chain: nothing was written to
                // them yet, so they can be freed as they are.
                let orphans = built.orphans();
                // The fallback syncs a txg: our holds must not keep it open.
                MutexGuard::unlocked(st, || drop(built));
                st.adopt_orphans(orphans);
                lane.cond.notify_all();
                MutexGuard::unlocked(st, || self.fall_back(lane, plan.last_ticket))?;
                Ok(None)
            }
            Err(err) => {
                if retired && let Some(chain) = plan.chain {
                    // Retired while we built: the next block we held is ours to release.
                    if let Some(block) = st.written.iter_mut().find(|block| block.dva == chain.next)
                    {
                        block.done = true;
                    }
                }
                lane.cond.notify_all();
                MutexGuard::unlocked(st, || {
                    self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
                    self.txg.note_durability_failure();
                    cairn_metrics::events::record(
                        "zil",
                        format!(
                            "intent log of {}: {}; falling back to a txg sync",
                            self.dataset,
                            cairn_device::error_chain(&err)
                        ),
                    );
                    self.fall_back(lane, plan.last_ticket)
                })?;
                Ok(None)
            }
        }
    }

    /// Puts a built batch in flight (the next builder may start at once, its blocks following
    /// ours), writes it out, and completes it: its committers are released once every earlier
    /// batch is done too; a failed write falls back to a txg sync.
    fn write_batch(
        &self,
        lane: &Lane,
        st: &mut MutexGuard<'_, LaneState>,
        mut built: Built,
        plan: &BatchPlan,
    ) -> Result<(), ZilError> {
        let batch_id = st.launch(&built);
        // The next builder may start now, while our blocks are in flight.
        lane.cond.notify_all();
        let outcome = MutexGuard::unlocked(st, || {
            let outcome = self.write_out(&built);
            // Written (or failed for good): the txgs of its allocations may sync now, and must
            // be free to before a fallback forces one.
            drop(std::mem::take(&mut built.txg_holds));
            outcome
        });
        st.mark_done(&built.blocks);
        match outcome {
            Ok(()) => {
                self.stats.count_batch(&built.blocks, built.log_bytes);
                st.last_batch_records = plan.records;
                st.last_batch_latency = plan.started.elapsed();
                st.complete(batch_id);
                let to_wake = lane.publish(st);
                lane.cond.notify_all();
                MutexGuard::unlocked(st, || wake(to_wake));
                Ok(())
            }
            Err(err) => MutexGuard::unlocked(st, || {
                self.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
                self.txg.note_durability_failure();
                cairn_metrics::events::record(
                    "zil",
                    format!(
                        "intent log of {}: {}; falling back to a txg sync",
                        self.dataset,
                        cairn_device::error_chain(&err)
                    ),
                );
                self.fall_back(lane, built.last_ticket)
            }),
        }
    }

    /// Writes a batch's blocks and returns once they are on stable media: every run of blocks
    /// contiguous on one vdev (the usual case: a chain allocates its blocks one after the
    /// other) as one FUA write, all runs at once. No flush is needed, so nothing else in a
    /// device's cache (a txg's writes) delays the commit, and the next batch's writes can be
    /// queued on the device while these are still going to media, which a flush (a non-queued
    /// command on SATA) would not allow.
    fn write_out(&self, built: &Built) -> Result<(), PipelineError> {
        let mut runs: Vec<(Dva, Vec<&[u8]>)> = Vec::new();
        for (block, bytes) in built.blocks.iter().zip(&built.encoded) {
            let dva = block.dva;
            // Each block fits its allocation, so padding to it puts the next at its address.
            debug_assert!(
                bytes.len() <= dva.asize as usize,
                "a log block past its allocation"
            );
            // On a raidz vdev a block is a stripe of its own, written padded to the length
            // replay reads back (`BlockIo::raw_capacity`), never merged with a neighbour.
            if self.io.is_raidz(&dva) {
                let padding = crate::log_block_len(&self.io, &dva).saturating_sub(bytes.len());
                runs.push((dva, vec![bytes, &ZEROS[..padding]]));
                continue;
            }
            if let Some((run, bufs)) = runs.last_mut()
                && run.vdev == dva.vdev
                && run.offset + u64::from(run.asize) == dva.offset
                && u64::from(run.asize) + u64::from(dva.asize) <= RUN_BYTES_MAX
            {
                // The previous block is padded to its allocated size, so this one lands at
                // its own address.
                let written: usize = bufs.iter().map(|buf| buf.len()).sum();
                let padding = run.asize as usize - written;
                bufs.push(&ZEROS[..padding]);
                bufs.push(bytes);
                run.asize += dva.asize;
                continue;
            }
            runs.push((dva, vec![bytes]));
        }
        self.stats
            .fua_writes
            .fetch_add(runs.len() as u64, Ordering::Relaxed);
        let Some((first, others)) = runs.split_first() else {
            // Every record was already in a synced txg: nothing to write.
            return Ok(());
        };
        // The first run in this thread; the others (blocks alternating over several log
        // devices) queued to their devices' workers, which write them meanwhile.
        // Every write issued is waited for, even after a failure: the blocks count as
        // finished (and may be freed) once this returns. Each run has its own `RawWrites`,
        // which accepts any one copy per vdev (a mirror): two runs on one vdev are different
        // blocks, and each must land.
        let mut issued = Ok(());
        let mut queued = Vec::with_capacity(others.len());
        for (dva, bufs) in others {
            let mut writes = RawWrites::new();
            let copy = Bytes::from(bufs.concat());
            issued =
                issued.and(
                    self.io
                        .write_raw_queued_durable(dva, copy, IoClass::Log, &mut writes),
                );
            queued.push(writes);
        }
        let mut direct = RawWrites::new();
        issued = issued.and(self.io.write_raw_durable(&first.0, &first.1, &mut direct));
        let mut outcome = issued.and(direct.wait());
        for writes in queued {
            outcome = outcome.and(writes.wait());
        }
        outcome
    }
}
