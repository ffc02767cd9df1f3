//! The worker threads (`cairn-io-Q.N`) and what they share with the queue (`Shared`): take the
//! next aggregate, make its one vectored device call with the lock released, and complete
//! every merged request with the aggregate's result (recording its statistics).
//!
//! Invariants: the queue's lock is never held during a device call; every request taken is
//! answered exactly once. This file uses `priority`, `request`, `stats` and `sched` below it;
//! `leaf`, which spawns the workers, sits above.

use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::priority::Dir;
use super::request::{Aggregate, Payload, ReadBuf, Request, fresh_read_buf_mut, zeroed_read_buf};
use super::sched::Sched;
use super::stats::{micros, nanos};
use crate::clock::Clock;
use crate::device::{Device, DeviceError};

pub(super) struct Shared {
    pub(super) device: Arc<dyn Device>,
    pub(super) name: Arc<str>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) sched: Mutex<Sched>,
    /// Signalled when work is submitted, a class slot frees up, or on shutdown.
    pub(super) work: Condvar,
    /// Signalled when requests complete (flush waiters).
    pub(super) done: Condvar,
}

pub(super) fn worker(shared: &Shared) {
    loop {
        let aggregate = {
            let mut sched = shared.sched.lock();
            loop {
                if let Some(aggregate) = sched.take() {
                    break aggregate;
                }
                if sched.shutdown && sched.pending.is_empty() {
                    return;
                }
                shared.work.wait(&mut sched);
            }
        };
        execute(shared, aggregate);
    }
}

/// Issues one aggregate as one vectored device call and completes its requests.
pub(super) fn execute(shared: &Shared, mut aggregate: Aggregate) {
    aggregate.issued = shared.clock.now();
    let start = aggregate.members[0].offset;
    let mut outputs: Vec<ReadBuf> = Vec::new();
    let result = match aggregate.dir {
        Dir::Write => {
            let mut durable = false;
            let bufs: Vec<&[u8]> = aggregate
                .members
                .iter()
                .map(|r| match &r.payload {
                    Payload::Write {
                        data, durable: d, ..
                    } => {
                        durable |= *d;
                        data.as_ref()
                    }
                    Payload::Read { .. } => unreachable!("a write aggregate holds writes only"),
                })
                .collect();
            if durable {
                shared.device.write_vectored_at_fua(start, &bufs)
            } else {
                shared.device.write_vectored_at(start, &bufs)
            }
        }
        Dir::Read => {
            outputs = aggregate
                .members
                .iter()
                .map(|r| zeroed_read_buf(r.len() as usize))
                .collect();
            let gaps: Vec<usize> = aggregate
                .members
                .windows(2)
                .map(|w| (w[1].offset - w[0].end()) as usize)
                .collect();
            let mut scratch = vec![0u8; gaps.iter().sum()];
            let mut scratch_rest: &mut [u8] = &mut scratch;
            let mut bufs: Vec<&mut [u8]> = Vec::with_capacity(2 * outputs.len());
            for (i, out) in outputs.iter_mut().enumerate() {
                if i > 0 && gaps[i - 1] > 0 {
                    let (gap, rest) = std::mem::take(&mut scratch_rest).split_at_mut(gaps[i - 1]);
                    bufs.push(gap);
                    scratch_rest = rest;
                }
                bufs.push(fresh_read_buf_mut(out));
            }
            shared.device.read_vectored_at(start, &mut bufs)
        }
    };
    complete(shared, aggregate, result, outputs);
}

pub(super) fn complete(
    shared: &Shared,
    aggregate: Aggregate,
    result: Result<(), DeviceError>,
    outputs: Vec<ReadBuf>,
) {
    let now = shared.clock.now();
    let failed = result.is_err();
    {
        let mut sched = shared.sched.lock();
        sched.active[aggregate.class.index()] -= 1;
        sched.active_requests -= aggregate.members.len();
        for r in &aggregate.members {
            sched.active_requests_by_class[r.class.index()] -= 1;
        }
        let stats = &mut sched.stats;
        let disk_wait_ns = nanos(now.saturating_sub(aggregate.issued));
        for r in &aggregate.members {
            let latency_us = micros(now.saturating_sub(r.submitted));
            let queue_wait_ns = nanos(aggregate.issued.saturating_sub(r.submitted));
            let class = &mut stats.classes[r.class.index()];
            let direction = match aggregate.dir {
                Dir::Read => &mut class.read,
                Dir::Write => &mut class.write,
            };
            direction.record_request(r.len(), queue_wait_ns, disk_wait_ns);
            match aggregate.dir {
                Dir::Read => {
                    stats.read_requests += 1;
                    stats.read_bytes += r.len();
                    stats.read_errors += u64::from(failed);
                    stats.read_latency_us.saturating_record(latency_us);
                }
                Dir::Write => {
                    stats.write_requests += 1;
                    stats.write_bytes += r.len();
                    stats.write_errors += u64::from(failed);
                    stats.write_latency_us.saturating_record(latency_us);
                }
            }
        }
        if aggregate.members.len() > 1 {
            let span = aggregate
                .members
                .iter()
                .map(Request::end)
                .max()
                .unwrap_or(0)
                - aggregate.members[0].offset;
            let class = &mut stats.classes[aggregate.class.index()];
            match aggregate.dir {
                Dir::Read => class.read.record_aggregate(span),
                Dir::Write => class.write.record_aggregate(span),
            }
        }
        match aggregate.dir {
            Dir::Read => stats.read_calls += 1,
            Dir::Write => {
                stats.write_calls += 1;
                let durable = aggregate
                    .members
                    .iter()
                    .any(|r| matches!(r.payload, Payload::Write { durable: true, .. }));
                stats.fua_writes += u64::from(durable);
                for r in &aggregate.members {
                    sched.unfinished_writes.remove(&r.seq);
                }
            }
        }
    }
    // One freed slot is one more request another worker may start; this worker loops back for
    // work itself. Waking every worker per completion made them all spin on the lock.
    shared.work.notify_one();
    shared.done.notify_all();

    let mut outputs = outputs.into_iter();
    for r in aggregate.members {
        let outcome = result.as_ref().map_err(DeviceError::duplicate);
        match r.payload {
            Payload::Read { reply, .. } => {
                let data = outputs.next().expect("one output per read");
                let _ = reply.send(outcome.map(|_| data));
            }
            Payload::Write { reply, .. } => {
                let _ = reply.send(outcome.map(|_| ()));
            }
        }
    }
}
