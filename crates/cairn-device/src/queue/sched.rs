//! The scheduler's state (`Sched`): the pending requests by class and by offset, the active
//! ones per class, the elevator position, the unfinished writes, and the choice of the next
//! aggregate (highest-priority class under its cap, merged with touching requests).
//!
//! Invariants: a request is in exactly one place (pending in its class queue and the offset
//! index, or active in one aggregate); `unfinished_writes` holds exactly the writes submitted
//! and not yet completed. This file uses `priority`, `request` and `stats` below it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::priority::{
    AGGREGATE_MAX_BUFFERS, AGGREGATE_MAX_BYTES, CLASSES, Dir, IoClass, READ_GAP_MAX_BYTES,
};
use super::request::{Aggregate, Request};
use super::stats::QueueStats;

pub(super) struct Sched {
    pub(super) pending: BTreeMap<u64, Request>,
    /// Per class: (seq, seq) for FIFO classes, (offset, seq) for the others.
    pub(super) class_queue: [BTreeSet<(u64, u64)>; CLASSES],
    /// Per direction: (offset, seq) of every pending request.
    pub(super) by_offset: [BTreeSet<(u64, u64)>; 2],
    pub(super) active: [usize; CLASSES],
    pub(super) active_requests: usize,
    /// Requests in service by their own class (an aggregate may carry several classes).
    pub(super) active_requests_by_class: [usize; CLASSES],
    /// Elevator position for offset-ordered classes: the end of the last aggregate issued.
    pub(super) last_offset: u64,
    pub(super) unfinished_writes: BTreeSet<u64>,
    pub(super) next_seq: u64,
    pub(super) flush_waiters: usize,
    pub(super) shutdown: bool,
    pub(super) stats: QueueStats,
}

impl Sched {
    fn class_key(request: &Request) -> (u64, u64) {
        if request.class.is_fifo() {
            (request.seq, request.seq)
        } else {
            (request.offset, request.seq)
        }
    }

    pub(super) fn enqueue(&mut self, request: Request) {
        let dir = request.dir() as usize;
        self.class_queue[request.class.index()].insert(Self::class_key(&request));
        self.by_offset[dir].insert((request.offset, request.seq));
        if request.dir() == Dir::Write {
            self.unfinished_writes.insert(request.seq);
        }
        self.pending.insert(request.seq, request);
    }

    pub(super) fn dequeue(&mut self, seq: u64) -> Request {
        let request = self.pending.remove(&seq).expect("pending request");
        self.class_queue[request.class.index()].remove(&Self::class_key(&request));
        self.by_offset[request.dir() as usize].remove(&(request.offset, request.seq));
        request
    }

    /// Picks the next aggregate to issue, if any class may issue.
    pub(super) fn take(&mut self) -> Option<Aggregate> {
        for class in IoClass::ALL {
            let ci = class.index();
            if self.active[ci] >= class.max_active() {
                continue;
            }
            let queue = &self.class_queue[ci];
            let key = if class.is_fifo() {
                queue.first()
            } else {
                queue
                    .range((self.last_offset, 0)..)
                    .next()
                    .or_else(|| queue.first())
            };
            if let Some(&(_, seq)) = key {
                return Some(self.aggregate(class, seq));
            }
        }
        None
    }

    /// Takes request `seq` and the pending requests that can ride along with it.
    fn aggregate(&mut self, class: IoClass, seq: u64) -> Aggregate {
        let primary = &self.pending[&seq];
        let dir = primary.dir();
        let index = &self.by_offset[dir as usize];
        let max_gap = if dir == Dir::Read {
            READ_GAP_MAX_BYTES
        } else {
            0
        };
        let (mut start, mut end) = (primary.offset, primary.end());
        let mut buffers = 1usize;
        let mut before = Vec::new();
        let mut after = Vec::new();
        // Zero-length requests travel alone: they would "touch" any neighbour at their offset.
        let pending = &self.pending;
        let non_empty = |&&(_, s): &&(u64, u64)| pending[&s].len() > 0;
        if primary.len() > 0 && primary.len() < AGGREGATE_MAX_BYTES {
            // Forward: requests starting at or a little after the aggregate's end.
            while let Some(&(offset, next)) = index.range((end, 0)..).find(non_empty) {
                let gap = offset - end;
                let added = 1 + usize::from(gap > 0);
                let next_end = pending[&next].end();
                if gap > max_gap
                    || next_end - start > AGGREGATE_MAX_BYTES
                    || buffers + added > AGGREGATE_MAX_BUFFERS
                {
                    break;
                }
                after.push(next);
                end = next_end;
                buffers += added;
            }
            // Backward: requests ending at or a little before the aggregate's start.
            while let Some(&(offset, prev)) = index.range(..(start, 0)).rev().find(non_empty) {
                let prev_end = pending[&prev].end();
                if prev_end > start {
                    break; // overlapping: not mergeable
                }
                let gap = start - prev_end;
                let added = 1 + usize::from(gap > 0);
                if gap > max_gap
                    || end - offset > AGGREGATE_MAX_BYTES
                    || buffers + added > AGGREGATE_MAX_BUFFERS
                {
                    break;
                }
                before.push(prev);
                start = offset;
                buffers += added;
            }
        }
        let order = before.into_iter().rev().chain([seq]).chain(after);
        let members: Vec<Request> = order.map(|s| self.dequeue(s)).collect();
        self.active[class.index()] += 1;
        self.active_requests += members.len();
        for member in &members {
            self.active_requests_by_class[member.class.index()] += 1;
        }
        self.last_offset = end;
        Aggregate {
            class,
            dir,
            members,
            issued: Duration::ZERO,
        }
    }
}
