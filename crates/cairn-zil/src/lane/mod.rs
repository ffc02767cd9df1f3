//! One lane: an independent chain of log blocks with its own pending records, builder and
//! in-flight batches (see the crate comment for the protocol).
//!
//! Tickets of a lane are numbered from 1 in the order records are appended; at any moment they
//! split into three runs: durable (`<= durable_ticket`), in flight (taken by a builder, in
//! `in_flight` batches, oldest first), and pending (still in `pending`). Batches complete in any
//! order but `durable_ticket` only advances over the completed prefix.
//!
//! The lane's files: this one holds its state (the record queue, the chain's end, the blocks
//! written, the batches in flight), the append and wake-up paths and the sizes they all use
//! (`payload_len`, `block_size_for`); `chain.rs` the chain's life (starting one, the blocks held
//! and released, the txg-sync paths that retire it); `build.rs` how a builder turns records
//! into log blocks (data, writes split at sector boundaries, the size of each next block);
//! `commit.rs` the commit path (the builder role, the company wait, writing a batch out and
//! completing it); `tests.rs` their unit tests. Dependencies point one way, `mod.rs` ←
//! `chain.rs` ← `build.rs` ← `commit.rs`: each file uses only those before it (`commit.rs` also
//! `chain.rs`), and this one uses none of them.

mod build;
mod chain;
mod commit;
#[cfg(test)]
mod tests;

use crate::{LogOp, Ticket};
use cairn_format::Dva;
use cairn_format::intent_log::{LOG_BLOCK_SIZE_MAX, LOG_BLOCK_SIZE_MIN};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::Thread;

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
        // Pending tickets are one contiguous run: records leave only from the front.
        debug_assert!(
            self.records
                .back()
                .is_none_or(|last| last.ticket + 1 == itx.ticket),
            "ticket {} appended out of order",
            itx.ticket
        );
        self.payload_bytes += payload_len(&itx.op) as u64;
        self.records.push_back(itx);
    }

    fn pop_front(&mut self) -> Option<Itx> {
        let itx = self.records.pop_front()?;
        let bytes = payload_len(&itx.op) as u64;
        debug_assert!(
            self.payload_bytes >= bytes,
            "pending payload sum out of step"
        );
        self.payload_bytes -= bytes;
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
        debug_assert!(
            ticket > st.durable_ticket,
            "a new ticket is never already durable"
        );
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
        // Durability never goes back: a committer released for a ticket must stay released.
        assert!(
            st.durable_ticket >= self.durable_published.load(Ordering::Acquire),
            "lane {}: durable ticket went back to {}",
            self.index,
            st.durable_ticket
        );
        assert!(
            st.durable_ticket < st.next_ticket,
            "a ticket durable before it was issued"
        );
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
        debug_assert!(ticket > st.durable_ticket && st.failed.is_none());
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
}

fn wake(threads: Vec<Thread>) {
    for thread in threads {
        thread.unpark();
    }
}

impl LaneState {
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
            debug_assert!(
                itx.ticket > self.durable_ticket,
                "a pending record already durable"
            );
            self.durable_ticket = itx.ticket;
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
