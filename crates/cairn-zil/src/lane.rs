//! One lane: an independent chain of log blocks with its own pending records, builder and
//! in-flight batches (see the crate comment for the protocol).
//!
//! Tickets of a lane are numbered from 1 in the order records are appended; at any moment they
//! split into three runs: durable (`<= durable_ticket`), in flight (taken by a builder, in
//! `in_flight` batches, oldest first), and pending (still in `pending`). Batches complete in any
//! order but `durable_ticket` only advances over the completed prefix.

use crate::{IntentLog, ItxData, LogOp, LogSource, Ticket, ZilError};
use bytes::Bytes;
use cairn_device::queue::IoClass;
use cairn_format::intent_log::{
    LOG_BLOCK_HEADER_SIZE, LOG_BLOCK_SIZE_MAX, LOG_BLOCK_SIZE_MIN, LOG_RECORD_HEADER_SIZE,
    LOG_RECORD_PAYLOAD_MAX,
};
use cairn_format::{ChainPosition, Dva, LaneHead, LogBlock, LogRecord, LogRecordKind};
use cairn_pipeline::{PipelineError, RawWrites};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::Thread;
use std::time::Instant;

/// Largest run of contiguous log blocks written as one device call.
const RUN_BYTES_MAX: u64 = 8 << 20;
/// Padding between contiguous blocks of a run (at most a block minus one sector).
static ZEROS: [u8; LOG_BLOCK_SIZE_MAX as usize] = [0; LOG_BLOCK_SIZE_MAX as usize];
/// The smallest piece a write is split into to fill the end of a block.
const SPLIT_BYTES_MIN: usize = 512;
/// A builder waits at most this fraction (1/n) of the last batch's latency for company.
const COMPANY_WAIT_DIVISOR: u32 = 10;
/// Batches of one lane in flight at once. Log blocks are FUA writes (queued commands, unlike
/// flushes), so overlapping batches pipeline on flash, and on a disk they form a train: a
/// batch whose blocks reach the drive while the one before is still going to the platter is
/// written right behind it (its blocks follow on the same track), where a batch issued after
/// the previous one completed would wait a whole rotation for its place to come round again.
const IN_FLIGHT_MAX: usize = 4;
/// Writes are only split at multiples of this (absolute offsets): a replay that stops between
/// two pieces must never leave a sector half old and half new, since disks (and the clients
/// that rely on them) treat a sector as written whole or not at all.
const SECTOR_BYTES: u64 = 512;

struct Itx {
    ticket: u64,
    sequence: u64,
    op: LogOp,
}

/// Records not yet taken by a builder, oldest first, with the payload bytes they would put
/// into the log (kept as a running sum: a commit looks at it on every call).
#[derive(Default)]
struct Pending {
    records: VecDeque<Itx>,
    payload_bytes: u64,
}

impl Pending {
    fn front(&self) -> Option<&Itx> {
        self.records.front()
    }

    fn len(&self) -> usize {
        self.records.len()
    }

    fn push_back(&mut self, itx: Itx) {
        self.payload_bytes += payload_len(&itx.op) as u64;
        self.records.push_back(itx);
    }

    fn pop_front(&mut self) -> Option<Itx> {
        let itx = self.records.pop_front()?;
        self.payload_bytes -= payload_len(&itx.op) as u64;
        Some(itx)
    }

    fn clear(&mut self) {
        self.records.clear();
        self.payload_bytes = 0;
    }

    /// Drops every record up to and including `ticket` (they are oldest first).
    fn drop_through(&mut self, ticket: u64) {
        while self.front().is_some_and(|itx| itx.ticket <= ticket) {
            self.pop_front();
        }
    }
}

/// The chain being appended to: where its next block goes.
#[derive(Debug, Clone, Copy)]
struct Chain {
    guid: u64,
    next: Dva,
    next_sequence: u64,
}

#[derive(Debug, Clone, Copy)]
struct WrittenBlock {
    dva: Dva,
    chain_guid: u64,
    sequence: u64,
    alloc_txg: u64,
    /// Newest txg of a record in the block: the block is redundant once it is synced.
    max_txg: u64,
    /// The write finished (successfully or not): nothing is in flight to it any more.
    done: bool,
}

struct Batch {
    id: u64,
    last_ticket: u64,
    done: bool,
}

struct LaneState {
    next_ticket: u64,
    durable_ticket: u64,
    pending: Pending,
    building: bool,
    in_flight: VecDeque<Batch>,
    next_batch_id: u64,
    chain: Option<Chain>,
    /// Bumped when the chain is retired after a failure: a builder that started on an older
    /// chain must not resurrect it.
    chain_epoch: u64,
    /// Allocation txg of `chain.next`.
    next_alloc_txg: u64,
    written: VecDeque<WrittenBlock>,
    /// Set when neither the log nor a txg sync can make records durable (the pool is
    /// suspended): every committer gets this error instead of waiting for a batch that no one
    /// will complete.
    failed: Option<String>,
    /// `failed` came from a pool whose I/O was suspended (not from a dead one): once the pool
    /// resumes, the next committer clears it with a txg sync that covers every record and
    /// retires the chain (whose failed block ended it).
    failed_by_suspension: bool,
    /// Records and write-and-flush time of the last completed batch (for the company wait).
    last_batch_records: usize,
    last_batch_latency: std::time::Duration,
    /// The newest txg any record of this lane joined: a txg sync through it covers them all.
    newest_txg: u64,
    /// Log bytes of the last batch built (sizes the next pre-allocated block).
    last_batch_bytes: usize,
    /// While a builder waits for company: the pending count that ends its wait (else 0).
    company_wanted: usize,
    /// Committers whose records are in flight, parked until their ticket is durable (or the
    /// lane fails): woken one by one by `Lane::publish`, so a batch releasing dozens of them
    /// costs no convoy through the lane's lock.
    durable_waiters: Vec<(u64, Thread)>,
}

pub(crate) struct Lane {
    index: u32,
    state: Mutex<LaneState>,
    cond: Condvar,
    /// Wakes a builder waiting for company once enough records are pending (only the builder
    /// waits on it, so an append never wakes the committers waiting for their batches).
    company: Condvar,
    /// `durable_ticket` and whether `failed` is set, as of the last `publish`: read by parked
    /// committers without the lock.
    durable_published: AtomicU64,
    failed_published: AtomicBool,
}

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

/// What a builder produced.
struct Built {
    last_ticket: u64,
    chain: Chain,
    next_alloc_txg: u64,
    blocks: Vec<WrittenBlock>,
    /// Each block's bytes, in chain order, not yet written.
    encoded: Vec<Vec<u8>>,
    log_bytes: u64,
    /// Log bytes the batch's records needed (headers included).
    total_bytes: usize,
    /// Holds on the txgs the batch's new blocks were allocated in, kept until the batch is
    /// written. A txg that records a block's allocation must not sync before the block that
    /// points to it is on media: else a power cut that catches that write in flight (torn, or
    /// never issued) leaves the block allocated and unreachable from the chain, a leak. (A
    /// chain's first block is the exception: its header is synced first, and a chain that
    /// ends at it frees it at import.)
    txg_holds: Vec<cairn_pool::txg::TxgHold>,
}

impl Lane {
    pub(crate) fn new(index: u32) -> Lane {
        Lane {
            index,
            state: Mutex::new(LaneState {
                next_ticket: 1,
                durable_ticket: 0,
                pending: Pending::default(),
                building: false,
                in_flight: VecDeque::new(),
                next_batch_id: 1,
                chain: None,
                chain_epoch: 0,
                next_alloc_txg: 0,
                written: VecDeque::new(),
                failed: None,
                failed_by_suspension: false,
                last_batch_records: 0,
                last_batch_latency: std::time::Duration::ZERO,
                last_batch_bytes: 0,
                newest_txg: 0,
                company_wanted: 0,
                durable_waiters: Vec::new(),
            }),
            durable_published: AtomicU64::new(0),
            failed_published: AtomicBool::new(false),
            cond: Condvar::new(),
            company: Condvar::new(),
        }
    }

    pub(crate) fn index(&self) -> u32 {
        self.index
    }

    pub(crate) fn append(&self, sequence: u64, op: LogOp, synced_txg: u64) -> Ticket {
        let mut st = self.state.lock();
        // Amortized O(1) per record, so an idle lane's memory stays bounded by one txg of
        // records.
        let mut to_wake = Vec::new();
        if !st.building {
            st.drop_synced_front(synced_txg);
            to_wake = self.publish(&mut st);
        }
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        let txg = op.txg;
        st.newest_txg = st.newest_txg.max(txg);
        st.pending.push_back(Itx {
            ticket,
            sequence,
            op,
        });
        if st.company_wanted > 0 && st.pending.len() >= st.company_wanted {
            self.company.notify_one();
        }
        drop(st);
        wake(to_wake);
        Ticket {
            lane: self.index,
            number: ticket,
            txg,
        }
    }

    /// Publishes `durable_ticket` and `failed` for parked committers and takes those to wake:
    /// every one whose ticket is durable, all of them once the lane has failed. Call after any
    /// change of either, and wake the result once the lock is released.
    #[must_use]
    fn publish(&self, st: &mut LaneState) -> Vec<Thread> {
        self.durable_published
            .store(st.durable_ticket, Ordering::Release);
        let failed = st.failed.is_some();
        self.failed_published.store(failed, Ordering::Release);
        let durable = st.durable_ticket;
        let mut to_wake = Vec::new();
        st.durable_waiters.retain(|(ticket, thread)| {
            let done = failed || *ticket <= durable;
            if done {
                to_wake.push(thread.clone());
            }
            !done
        });
        to_wake
    }

    /// Parks the calling committer until `ticket` is durable or the lane has failed. The
    /// caller checked, under the lock it hands in, that neither is true yet and that its
    /// record is in a batch (no builder needs it); the lock is released while parked.
    fn wait_durable(&self, st: &mut MutexGuard<'_, LaneState>, ticket: u64) {
        st.durable_waiters.push((ticket, std::thread::current()));
        MutexGuard::unlocked(st, || {
            // Unparks that arrive before `park` are kept as a token; spurious returns loop.
            while self.durable_published.load(Ordering::Acquire) < ticket
                && !self.failed_published.load(Ordering::Acquire)
            {
                std::thread::park();
            }
        });
    }

    /// The newest ticket not yet durable, if any.
    pub(crate) fn newest_undurable(&self) -> Option<u64> {
        let st = self.state.lock();
        let newest = st.next_ticket - 1;
        (newest > st.durable_ticket).then_some(newest)
    }

    /// Removes the blocks made redundant by txg `txg` and returns them with the lane's new head.
    /// Blocks of the current chain go oldest first only (the chain is walked from its head, so
    /// no block after the head may be freed before it); blocks of retired chains go as soon as
    /// they qualify (their records are all in synced txgs, see `retire_chain`).
    pub(crate) fn release_through(&self, txg: u64) -> (Vec<Dva>, LaneHead) {
        let mut st = self.state.lock();
        let current = st.chain.map(|chain| chain.guid);
        let redundant =
            |block: &WrittenBlock| block.done && block.max_txg <= txg && block.alloc_txg <= txg;
        let mut released = Vec::new();
        let mut prefix_open = true;
        st.written.retain(|block| {
            let ours = Some(block.chain_guid) == current;
            let free = redundant(block) && (!ours || prefix_open);
            if ours && !free {
                prefix_open = false;
            }
            if free {
                released.push(block.dva);
            }
            !free
        });
        let first_ours = st
            .written
            .iter()
            .find(|block| Some(block.chain_guid) == current);
        let head = match (first_ours, st.chain) {
            (Some(block), _) => LaneHead {
                chain_guid: block.chain_guid,
                sequence: block.sequence,
                block: block.dva,
            },
            (None, Some(chain)) => LaneHead {
                chain_guid: chain.guid,
                sequence: chain.next_sequence,
                block: chain.next,
            },
            (None, None) => LaneHead::default(),
        };
        (released, head)
    }

    /// True when the lane has a chain (its next block allocated in advance).
    pub(crate) fn has_chain(&self) -> bool {
        self.state.lock().chain.is_some()
    }

    pub(crate) fn has_blocks(&self) -> bool {
        let st = self.state.lock();
        st.chain.is_some() || !st.written.is_empty()
    }

    /// Every block the lane holds (written ones and the pre-allocated next); the lane forgets
    /// its chain.
    /// Every block this lane holds now: written or in flight, retired but not yet freed, and
    /// the chain's pre-allocated next block.
    pub(crate) fn held_blocks(&self) -> Vec<Dva> {
        let st = self.state.lock();
        let mut blocks: Vec<Dva> = st.written.iter().map(|block| block.dva).collect();
        blocks.extend(st.chain.map(|chain| chain.next));
        blocks
    }

    pub(crate) fn take_all_blocks(&self) -> Vec<Dva> {
        let mut st = self.state.lock();
        let mut blocks: Vec<Dva> = st.written.drain(..).map(|block| block.dva).collect();
        if let Some(chain) = st.chain.take() {
            blocks.push(chain.next);
        }
        st.pending.clear();
        st.chain_epoch += 1;
        blocks
    }
}

impl Built {
    /// Every block this build allocated, as finished blocks of a retired chain.
    fn orphans(&self) -> Vec<WrittenBlock> {
        let mut blocks: Vec<WrittenBlock> = self
            .blocks
            .iter()
            .map(|block| WrittenBlock {
                done: true,
                max_txg: 0,
                ..*block
            })
            .collect();
        blocks.push(WrittenBlock {
            dva: self.chain.next,
            chain_guid: self.chain.guid,
            sequence: self.chain.next_sequence,
            alloc_txg: self.next_alloc_txg,
            max_txg: 0,
            done: true,
        });
        blocks
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

fn wake(threads: Vec<Thread>) {
    for thread in threads {
        thread.unpark();
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

    fn complete(&mut self, batch_id: u64) {
        if let Some(batch) = self.in_flight.iter_mut().find(|batch| batch.id == batch_id) {
            batch.done = true;
        }
        while self.in_flight.front().is_some_and(|batch| batch.done) {
            let batch = self.in_flight.pop_front().expect("front checked");
            self.durable_ticket = self.durable_ticket.max(batch.last_ticket);
        }
    }

    /// Drops pending records already in a synced txg from the front: they need no logging.
    /// Only with no batch in flight, since `durable_ticket` may not pass an unfinished batch.
    fn drop_synced_front(&mut self, synced_txg: u64) {
        if !self.in_flight.is_empty() {
            return;
        }
        while self
            .pending
            .front()
            .is_some_and(|itx| itx.op.txg <= synced_txg)
        {
            let itx = self.pending.pop_front().expect("front checked");
            self.durable_ticket = itx.ticket;
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

    /// Retires the chain after a failure, or when a new one replaces it: its blocks are freed
    /// once `covered_txg` (which made all their records redundant) is durable and no write to
    /// them is still in flight. A block being written stays unfreeable until its writer says it
    /// is done: the batches in flight mark theirs when their writes end, and a builder at work
    /// (which writes the chain's next block) marks it when it finds the chain retired.
    fn retire_chain(&mut self, covered_txg: u64) {
        if let Some(chain) = self.chain.take() {
            self.written.push_back(WrittenBlock {
                dva: chain.next,
                chain_guid: chain.guid,
                sequence: chain.next_sequence,
                alloc_txg: self.next_alloc_txg,
                max_txg: covered_txg,
                done: !self.building,
            });
        }
        for block in self.written.iter_mut() {
            block.max_txg = block.max_txg.max(covered_txg);
        }
        self.chain_epoch += 1;
    }

    /// A builder whose chain was retired while it built hands over what it allocated: blocks
    /// `retire_chain` already listed are marked done, the others are added.
    fn adopt_orphans(&mut self, orphans: Vec<WrittenBlock>) {
        for orphan in orphans {
            match self
                .written
                .iter_mut()
                .find(|block| block.dva == orphan.dva)
            {
                Some(block) => block.done = true,
                None => self.written.push_back(orphan),
            }
        }
    }
}

fn payload_len(op: &LogOp) -> usize {
    op.kind.payload_bytes(op.length)
}

/// Block size for `bytes` of log: rounded up to 4 KiB, within the block size limits.
fn block_size_for(bytes: usize) -> u32 {
    let rounded = bytes.div_ceil(LOG_BLOCK_SIZE_MIN as usize) * LOG_BLOCK_SIZE_MIN as usize;
    (rounded as u64).clamp(u64::from(LOG_BLOCK_SIZE_MIN), u64::from(LOG_BLOCK_SIZE_MAX)) as u32
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

    /// Makes every ticket up to at least `ticket` durable by forcing a txg sync (which covers
    /// every record logged before it), and retires the chain.
    fn fall_back(&self, lane: &Lane, ticket: u64) -> Result<(), ZilError> {
        let covered_ticket = lane.state.lock().next_ticket - 1;
        debug_assert!(covered_ticket >= ticket);
        let synced = self.txg.sync_now_forced();
        let mut st = lane.state.lock();
        self.settle_after_sync(
            lane,
            &mut st,
            synced,
            covered_ticket,
            true,
            "txg sync after a log failure",
        )
    }

    /// Serves a bulk commit (the caller is the lane's builder) by a txg sync, which covers every
    /// record logged before it; the chain carries on (its later blocks simply lack the records
    /// the sync made redundant, and replay skips records of synced txgs anyway).
    fn sync_instead(&self, lane: &Lane) -> Result<(), ZilError> {
        self.sync_as_builder(lane, false, "txg sync for a bulk commit")?;
        self.stats.bulk_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Ends the lane's chain at a quiet moment: waits until no builder works and no batch is in
    /// flight, becomes the builder, makes every record durable with a txg sync and retires the
    /// chain, whose blocks are then all finished (so they are freed in the same txg that drops
    /// the chain from the header: a crash cannot leave them allocated and unreachable).
    pub(crate) fn restart_chain(&self, lane: &Lane) -> Result<(), ZilError> {
        let mut st = lane.state.lock();
        while st.building || !st.in_flight.is_empty() {
            // A failed lane keeps the batch whose write failed in flight for good (nothing
            // can make it durable any more): waiting for a quiet moment would never end.
            if let Some(reason) = &st.failed {
                return Err(self.failed(reason.clone()));
            }
            lane.cond.wait(&mut st);
        }
        if st.chain.is_none() {
            return Ok(());
        }
        st.building = true;
        drop(st);
        self.sync_as_builder(lane, true, "txg sync to restart the log chain")
    }

    /// For the lane's builder (the caller set `building`): forces a txg sync, which makes every
    /// record logged so far durable, and settles the lane accordingly (retiring its chain if
    /// asked); steps down as builder either way.
    fn sync_as_builder(&self, lane: &Lane, retire: bool, what: &str) -> Result<(), ZilError> {
        let (covered_ticket, newest_txg) = {
            let st = lane.state.lock();
            (st.next_ticket - 1, st.newest_txg)
        };
        // Retiring the chain needs a txg of its own (the header changes in it); covering the
        // records only needs the txgs they joined synced: when those are already synced or in
        // flight, no empty txg is forced through behind them.
        let synced = if retire {
            self.txg.sync_now_forced()
        } else {
            self.txg.wait_synced(newest_txg).map(|()| newest_txg)
        };
        let mut st = lane.state.lock();
        st.building = false;
        self.settle_after_sync(lane, &mut st, synced, covered_ticket, retire, what)
    }

    /// After a forced txg sync that covers every ticket up to `covered_ticket`: those are
    /// durable (pending and in-flight ones included) and the chain is retired if asked; if the
    /// sync failed, nothing can be made durable any more and every committer gets the error.
    fn settle_after_sync(
        &self,
        lane: &Lane,
        st: &mut LaneState,
        synced: Result<u64, cairn_pool::txg::TxgError>,
        covered_ticket: u64,
        retire: bool,
        what: &str,
    ) -> Result<(), ZilError> {
        let outcome = match synced {
            Ok(txg) => {
                if retire {
                    st.retire_chain(txg);
                }
                st.durable_ticket = st.durable_ticket.max(covered_ticket);
                st.in_flight
                    .retain(|batch| batch.last_ticket > covered_ticket);
                st.pending.drop_through(covered_ticket);
                Ok(())
            }
            Err(err) => {
                // Later committers read the lane's failure as text; this one gets it whole.
                st.failed = Some(format!("{what}: {}", cairn_device::error_chain(&err)));
                st.failed_by_suspension = self.txg.io_suspended();
                Err(self.txg_failed(what, err))
            }
        };
        wake(lane.publish(st));
        lane.cond.notify_all();
        outcome
    }

    /// Starts a chain for `lane`: allocates its first block, records the header in the open
    /// txg and waits for that txg to sync, after which blocks of the chain are reachable.
    fn start_chain(&self, lane: &Lane, first_block_bytes: usize) -> Result<(Chain, u64), ZilError> {
        let size = block_size_for(first_block_bytes);
        let hold = self
            .txg
            .try_hold()
            .map_err(|err| self.txg_failed("holding the open txg", err))?;
        let txg = hold.txg();
        let dva = self.allocate_in(size, txg)?;
        let chain = Chain {
            guid: cairn_pool::new_guid(),
            next: dva,
            next_sequence: 1,
        };
        {
            // The lane owns the chain from now on (this builder has it exclusively), so a txg
            // sync running meanwhile computes a header that includes it.
            let mut st = lane.state.lock();
            debug_assert!(st.written.iter().all(|block| block.done));
            st.chain = Some(chain);
            st.next_alloc_txg = txg;
        }
        self.set_head(
            lane.index(),
            LaneHead {
                chain_guid: chain.guid,
                sequence: 1,
                block: dva,
            },
            txg,
        );
        drop(hold);
        self.txg
            .wait_synced(txg)
            .map_err(|err| self.txg_failed("recording a new log chain", err))?;
        self.stats.chains_started.fetch_add(1, Ordering::Relaxed);
        Ok((chain, txg))
    }

    /// Turns records into written-out blocks (the writes are issued, not waited for).
    fn build(
        &self,
        lane: &Lane,
        itxs: Vec<Itx>,
        chain: Option<Chain>,
        next_alloc_txg: u64,
        previous_batch_bytes: usize,
        source: &dyn LogSource,
    ) -> Result<Built, ZilError> {
        let last_ticket = itxs.last().expect("at least one record").ticket;
        let (mut chain, mut next_alloc_txg) = match chain {
            Some(chain) => (chain, next_alloc_txg),
            None => {
                let bytes = LOG_BLOCK_HEADER_SIZE
                    + itxs
                        .iter()
                        .map(|itx| LOG_RECORD_HEADER_SIZE + payload_len(&itx.op))
                        .sum::<usize>();
                self.start_chain(lane, bytes)?
            }
        };
        let synced = self.txg.last_synced_txg();
        let records = self.materialize(itxs, synced, source)?;
        let mut built = Built {
            last_ticket,
            chain,
            next_alloc_txg,
            blocks: Vec::new(),
            encoded: Vec::new(),
            total_bytes: 0,
            log_bytes: 0,
            txg_holds: Vec::new(),
        };
        if records.is_empty() {
            return Ok(built);
        }
        let total_bytes: usize =
            records.iter().map(LogRecord::encoded_size).sum::<usize>() + LOG_BLOCK_HEADER_SIZE;
        built.total_bytes = total_bytes;
        let mut queue: VecDeque<LogRecord> = records.into();
        let mut remaining_bytes = total_bytes;
        while !queue.is_empty() {
            let capacity = chain.next.asize.min(LOG_BLOCK_SIZE_MAX) as usize;
            let mut used = LOG_BLOCK_HEADER_SIZE;
            let mut block_records: Vec<LogRecord> = Vec::new();
            while let Some(record) = queue.pop_front() {
                let size = record.encoded_size();
                if used + size <= capacity {
                    used += size;
                    remaining_bytes = remaining_bytes.saturating_sub(size);
                    block_records.push(record);
                    continue;
                }
                // A record that does not fit moves whole to the next block (so a write's
                // sectors reach the log together), unless even an empty block is too small
                // for it (a small pre-allocated block): then it fills this one and goes on.
                let room = capacity - used;
                let take = (record.kind == LogRecordKind::Write
                    && block_records.is_empty()
                    && room >= LOG_RECORD_HEADER_SIZE + SPLIT_BYTES_MIN)
                    .then(|| split_point(record.offset, room - LOG_RECORD_HEADER_SIZE))
                    .flatten()
                    .filter(|&take| take < record.data.len());
                if let Some(take) = take {
                    let (head, tail) = split_write(record, take);
                    used += head.encoded_size();
                    remaining_bytes = remaining_bytes.saturating_sub(head.encoded_size());
                    block_records.push(head);
                    queue.push_front(tail);
                } else {
                    queue.push_front(record);
                }
                break;
            }
            // A block takes nothing only when the next record is larger than all of it: a
            // filesystem change (an extended attribute of up to 64 KiB) cannot be split, and
            // the chain's pre-allocated block may be smaller. A zero-record block is still a
            // valid link, and the next one is sized for what is left, so the chain goes on.
            debug_assert!(
                !block_records.is_empty()
                    || queue.front().is_some_and(|record| {
                        LOG_BLOCK_HEADER_SIZE + record.encoded_size() > capacity
                    }),
                "a log block of {capacity} bytes took no record"
            );
            // The next block is sized for what is left of this batch, or, at its end, for the
            // smaller of this batch and the one before: the unused end of a pre-allocated
            // block is a hole the disk head must pass over, while a batch that outgrows its
            // first block just continues in blocks allocated right after it (written in the
            // same device call).
            let next_size = if queue.is_empty() {
                block_size_for(total_bytes.min(previous_batch_bytes.max(1)))
            } else {
                block_size_for(remaining_bytes + LOG_BLOCK_HEADER_SIZE)
            };
            let (next, hold) = self.allocate_block(next_size)?;
            let alloc_txg = hold.txg();
            if built.txg_holds.iter().all(|held| held.txg() != alloc_txg) {
                built.txg_holds.push(hold);
            }
            let max_txg = block_records.iter().map(|r| r.txg).max().unwrap_or(0);
            let block = LogBlock {
                position: ChainPosition {
                    pool_guid: self.pool_guid,
                    chain_guid: chain.guid,
                    lane: lane.index(),
                    sequence: chain.next_sequence,
                },
                next,
                records: block_records,
            };
            let granule = self.sector_bytes(&chain.next);
            let encoded = block.encode(granule);
            built.log_bytes += encoded.len() as u64;
            self.stats.count_block(used, capacity);
            built.encoded.push(encoded);
            built.blocks.push(WrittenBlock {
                dva: chain.next,
                chain_guid: chain.guid,
                sequence: chain.next_sequence,
                alloc_txg: next_alloc_txg,
                max_txg,
                done: false,
            });
            chain = Chain {
                guid: chain.guid,
                next,
                next_sequence: chain.next_sequence + 1,
            };
            next_alloc_txg = alloc_txg;
        }
        built.chain = chain;
        built.next_alloc_txg = next_alloc_txg;
        Ok(built)
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

    /// Log records for `itxs`, with data, skipping those already in a synced txg; writes longer
    /// than one record can carry are split.
    fn materialize(
        &self,
        itxs: Vec<Itx>,
        synced_txg: u64,
        source: &dyn LogSource,
    ) -> Result<Vec<LogRecord>, ZilError> {
        let mut records = Vec::with_capacity(itxs.len());
        for itx in itxs {
            let op = itx.op;
            if op.txg <= synced_txg {
                continue;
            }
            let data = match (&op.kind, op.data) {
                (LogRecordKind::Write | LogRecordKind::Fs, ItxData::Copied(bytes)) => {
                    bytes.to_vec()
                }
                (LogRecordKind::WriteInPlace, ItxData::Pointer(bp)) => {
                    assert_eq!(
                        bp.birth_txg, op.txg,
                        "block written in place for another txg"
                    );
                    bp.to_bytes().to_vec()
                }
                (LogRecordKind::WriteInPlace, _) => {
                    panic!("a write in place logged without its block pointer")
                }
                (LogRecordKind::Write, _) => {
                    let mut buf = vec![0u8; op.length as usize];
                    source
                        .read_for_log(op.object, op.offset, &mut buf)
                        .map_err(|err| ZilError::SourceRead {
                            dataset: self.dataset.clone(),
                            object: op.object,
                            offset: op.offset,
                            len: buf.len(),
                            source: std::sync::Arc::from(err),
                        })?;
                    self.stats.needcopy_reads.fetch_add(1, Ordering::Relaxed);
                    buf
                }
                _ => Vec::new(),
            };
            let record = LogRecord {
                kind: op.kind,
                sequence: itx.sequence,
                txg: op.txg,
                object: op.object,
                offset: op.offset,
                length: op.length,
                data,
            };
            if record.kind == LogRecordKind::Write && record.data.len() > LOG_RECORD_PAYLOAD_MAX {
                split_into_records(record, &mut records);
            } else {
                records.push(record);
            }
        }
        Ok(records)
    }

    fn sector_bytes(&self, dva: &Dva) -> u32 {
        self.io
            .tree()
            .top(dva.vdev)
            .map_or(LOG_BLOCK_SIZE_MIN, |top| 1u32 << top.config.ashift)
    }
}

/// The largest piece of at most `max_bytes` starting at `offset` that ends on a sector
/// boundary, if there is one.
fn split_point(offset: u64, max_bytes: usize) -> Option<usize> {
    let end = (offset + max_bytes as u64) / SECTOR_BYTES * SECTOR_BYTES;
    (end > offset).then(|| (end - offset) as usize)
}

/// Splits a write longer than one record can carry into records of at most
/// `LOG_RECORD_PAYLOAD_MAX` bytes ending on sector boundaries, copying each byte once. (Splitting
/// the head off again and again would copy the rest each time and leave every head holding the
/// whole buffer's capacity: a 32 MiB FUA write took seconds and gigabytes that way.)
fn split_into_records(record: LogRecord, records: &mut Vec<LogRecord>) {
    let len = record.data.len();
    let mut start = 0;
    while start < len {
        let offset = record.offset + start as u64;
        let take = if len - start <= LOG_RECORD_PAYLOAD_MAX {
            len - start
        } else {
            split_point(offset, LOG_RECORD_PAYLOAD_MAX)
                .expect("a full record has room for a sector")
        };
        records.push(LogRecord {
            kind: record.kind,
            sequence: record.sequence,
            txg: record.txg,
            object: record.object,
            offset,
            length: take as u64,
            data: record.data[start..start + take].to_vec(),
        });
        start += take;
    }
}

/// Splits a write record after `head_bytes` of data; both parts own exactly their bytes.
fn split_write(record: LogRecord, head_bytes: usize) -> (LogRecord, LogRecord) {
    assert!(head_bytes > 0 && head_bytes < record.data.len());
    let mut data = record.data;
    let tail_data = data.split_off(head_bytes);
    data.shrink_to_fit();
    let head = LogRecord {
        length: head_bytes as u64,
        data,
        ..record
    };
    let tail = LogRecord {
        offset: head.offset + head_bytes as u64,
        length: tail_data.len() as u64,
        data: tail_data,
        ..head.clone()
    };
    (head, tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(offset: u64, len: usize) -> LogRecord {
        LogRecord {
            kind: LogRecordKind::Write,
            sequence: 9,
            txg: 4,
            object: 1,
            offset,
            length: len as u64,
            data: (0..len).map(|i| i as u8).collect(),
        }
    }

    #[test]
    fn split_keeps_every_byte_in_place() {
        let record = write(1000, 5000);
        let (head, tail) = split_write(record.clone(), 4096);
        assert_eq!(head.offset, 1000);
        assert_eq!(head.length, 4096);
        assert_eq!(tail.offset, 1000 + 4096);
        assert_eq!(tail.length, 904);
        let mut joined = head.data.clone();
        joined.extend_from_slice(&tail.data);
        assert_eq!(joined, record.data);
        assert_eq!((head.sequence, tail.sequence), (9, 9));
    }

    #[test]
    fn a_large_write_becomes_records_that_own_only_their_bytes() {
        let record = write(4096 + 512, 32 << 20);
        let mut records = Vec::new();
        split_into_records(record.clone(), &mut records);
        let mut joined = Vec::with_capacity(record.data.len());
        let mut offset = record.offset;
        for piece in &records {
            assert!(piece.data.len() <= LOG_RECORD_PAYLOAD_MAX);
            assert_eq!(piece.offset, offset);
            assert_eq!(piece.length, piece.data.len() as u64);
            // Each record holds its own bytes, not a share of the whole write's buffer.
            assert_eq!(piece.data.capacity(), piece.data.len());
            assert_eq!(piece.sequence, record.sequence);
            offset += piece.length;
            joined.extend_from_slice(&piece.data);
        }
        for piece in &records[..records.len() - 1] {
            assert_eq!((piece.offset + piece.length) % SECTOR_BYTES, 0);
        }
        assert_eq!(joined, record.data);
        let (head, _) = split_write(record, 4096);
        assert_eq!(head.data.capacity(), 4096);
    }

    #[test]
    fn splits_end_on_sector_boundaries() {
        assert_eq!(split_point(0, 1000), Some(512));
        assert_eq!(split_point(100, 1000), Some(924));
        assert_eq!(split_point(100, 300), None);
        assert_eq!(split_point(4096, LOG_RECORD_PAYLOAD_MAX), Some(130560));
    }

    #[test]
    fn block_sizes_round_to_4k_within_limits() {
        assert_eq!(block_size_for(1), LOG_BLOCK_SIZE_MIN);
        assert_eq!(block_size_for(4097), 8192);
        assert_eq!(block_size_for(10 << 20), LOG_BLOCK_SIZE_MAX);
    }

    #[test]
    fn durable_ticket_advances_only_over_the_completed_prefix() {
        let lane = Lane::new(0);
        let mut st = lane.state.lock();
        st.in_flight.push_back(Batch {
            id: 1,
            last_ticket: 5,
            done: false,
        });
        st.in_flight.push_back(Batch {
            id: 2,
            last_ticket: 9,
            done: false,
        });
        st.complete(2);
        assert_eq!(st.durable_ticket, 0, "batch 2 done but batch 1 is not");
        st.complete(1);
        assert_eq!(st.durable_ticket, 9);
        assert!(st.in_flight.is_empty());
    }
}
