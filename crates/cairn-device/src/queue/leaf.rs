//! `LeafQueue`, the entry points: creating a queue and its workers, submitting reads and
//! writes (queued or direct), flushing, discarding, promoting queued reads, statistics and
//! shutdown.
//!
//! Invariants: a flush waits for every write submitted before it; direct I/O runs in the
//! caller's thread and is counted like queued I/O. This file sits on top: it uses every
//! sibling, and none uses it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use super::priority::{CLASSES, Dir, IoClass};
use super::request::{
    IoHandle, Payload, ReadBuf, Reply, Request, fresh_read_buf_mut, zeroed_read_buf,
};
use super::sched::Sched;
use super::stats::{QueueStats, micros, nanos};
use super::worker::{Shared, worker};
use crate::clock::{Clock, RealClock};
use crate::device::{Device, DeviceError};

/// The I/O scheduler of one leaf device.
pub struct LeafQueue {
    pub(super) shared: Arc<Shared>,
    pub(super) workers: Mutex<Vec<JoinHandle<()>>>,
}

pub(super) static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(0);

impl LeafQueue {
    /// A queue over `device`, timing latencies with the real clock.
    pub fn new(device: Arc<dyn Device>) -> Arc<LeafQueue> {
        LeafQueue::with_clock(device, Arc::new(RealClock::new()))
    }

    /// A queue whose latency statistics use `clock`.
    pub fn with_clock(device: Arc<dyn Device>, clock: Arc<dyn Clock>) -> Arc<LeafQueue> {
        let workers = device.concurrency_hint().max(1);
        let shared = Arc::new(Shared {
            name: device.describe().into(),
            device,
            clock,
            sched: Mutex::new(Sched {
                pending: BTreeMap::new(),
                class_queue: Default::default(),
                by_offset: Default::default(),
                active: [0; CLASSES],
                active_requests: 0,
                active_requests_by_class: [0; CLASSES],
                last_offset: 0,
                unfinished_writes: BTreeSet::new(),
                next_seq: 0,
                flush_waiters: 0,
                shutdown: false,
                stats: QueueStats::default(),
            }),
            work: Condvar::new(),
            done: Condvar::new(),
        });
        let queue_id = NEXT_QUEUE_ID.fetch_add(1, Ordering::Relaxed);
        let handles = (0..workers)
            .map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("cairn-io-{queue_id}.{i}"))
                    .spawn(move || worker(&shared))
                    .expect("spawn an I/O worker thread")
            })
            .collect();
        Arc::new(LeafQueue {
            shared,
            workers: Mutex::new(handles),
        })
    }

    pub fn device(&self) -> &Arc<dyn Device> {
        &self.shared.device
    }

    fn submit<T>(
        &self,
        class: IoClass,
        offset: u64,
        make: impl FnOnce(Reply<T>) -> Payload,
    ) -> IoHandle<T> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let handle = IoHandle {
            rx,
            device: Arc::clone(&self.shared.name),
        };
        let submitted = self.shared.clock.now();
        let mut sched = self.shared.sched.lock();
        if sched.shutdown {
            drop(sched);
            let payload = make(tx);
            let error = DeviceError::Invalid {
                device: self.shared.name.to_string(),
                reason: "the I/O queue is shut down".into(),
            };
            match payload {
                Payload::Read { reply, .. } => {
                    let _ = reply.send(Err(error));
                }
                Payload::Write { reply, .. } => {
                    let _ = reply.send(Err(error));
                }
            }
            return handle;
        }
        let seq = sched.next_seq;
        sched.next_seq += 1;
        sched.enqueue(Request {
            seq,
            class,
            offset,
            submitted,
            payload: make(tx),
        });
        drop(sched);
        self.shared.work.notify_one();
        handle
    }

    /// Queues a read of `len` bytes at `offset`.
    pub fn read(&self, class: IoClass, offset: u64, len: usize) -> IoHandle<ReadBuf> {
        self.submit(class, offset, |reply| Payload::Read {
            len: len as u64,
            reply,
        })
    }

    /// Queues a write of `data` at `offset`. The bytes are handed to the device as they are.
    pub fn write(&self, class: IoClass, offset: u64, data: Bytes) -> IoHandle<()> {
        self.submit(class, offset, |reply| Payload::Write {
            data,
            durable: false,
            reply,
        })
    }

    /// Queues a FUA write: it completes once its bytes are on stable media, and needs no
    /// flush. Merged with neighbouring writes like any other, it makes their aggregate a FUA
    /// write too (more durable than they asked, never less).
    pub fn write_durable(&self, class: IoClass, offset: u64, data: Bytes) -> IoHandle<()> {
        self.submit(class, offset, |reply| Payload::Write {
            data,
            durable: true,
            reply,
        })
    }

    /// Queues several writes at once, under one lock, so the workers see them together and can
    /// merge neighbours — a burst submitted one by one is often taken apart by idle workers
    /// before its neighbours arrive. With `durable` they are FUA writes (see `write_durable`).
    pub fn write_many(
        &self,
        class: IoClass,
        writes: Vec<(u64, Bytes)>,
        durable: bool,
    ) -> Vec<IoHandle<()>> {
        let submitted = self.shared.clock.now();
        let mut handles = Vec::with_capacity(writes.len());
        let mut sched = self.shared.sched.lock();
        if sched.shutdown {
            drop(sched);
            return writes
                .into_iter()
                .map(|(offset, data)| match durable {
                    true => self.write_durable(class, offset, data),
                    false => self.write(class, offset, data),
                })
                .collect();
        }
        for (offset, data) in writes {
            let (reply, rx) = crossbeam_channel::bounded(1);
            handles.push(IoHandle {
                rx,
                device: Arc::clone(&self.shared.name),
            });
            let seq = sched.next_seq;
            sched.next_seq += 1;
            sched.enqueue(Request {
                seq,
                class,
                offset,
                submitted,
                payload: Payload::Write {
                    data,
                    durable,
                    reply,
                },
            });
        }
        drop(sched);
        self.shared.work.notify_all();
        handles
    }

    /// Writes `bufs` at `offset` in the caller's thread, bypassing the queue but not its
    /// accounting (as class `Log`, its one user, with no queue wait): for a lone latency-critical write (an intent-log block at QD1) two thread
    /// hops cost more than anything the queue could merge or reorder. With `durable` it is a
    /// FUA write (`Device::write_vectored_at_fua`): its bytes are on stable media when it
    /// returns, and several such writes may be in flight at once (a flush is one at a time);
    /// otherwise a later `flush` covers it, as it covers queued writes.
    pub fn write_direct(
        &self,
        offset: u64,
        bufs: &[&[u8]],
        durable: bool,
    ) -> Result<(), DeviceError> {
        let started = self.shared.clock.now();
        let result = if durable {
            self.shared.device.write_vectored_at_fua(offset, bufs)
        } else {
            self.shared.device.write_vectored_at(offset, bufs)
        };
        let latency = self.shared.clock.now().saturating_sub(started);
        let latency_us = micros(latency);
        let bytes = bufs.iter().map(|buf| buf.len() as u64).sum::<u64>();
        let mut sched = self.shared.sched.lock();
        let stats = &mut sched.stats;
        stats.classes[IoClass::Log.index()]
            .write
            .record_request(bytes, 0, nanos(latency));
        stats.write_requests += 1;
        stats.write_calls += 1;
        stats.write_bytes += bytes;
        stats.fua_writes += u64::from(durable);
        stats.write_errors += u64::from(result.is_err());
        stats.write_latency_us.saturating_record(latency_us);
        result
    }

    /// Reads `len` bytes at `offset` in the caller's thread, bypassing the queue but not its
    /// accounting (counted under `class`, with no queue wait): for a synchronous read from
    /// flash, where the queue has no seek to order and nothing to merge while the caller
    /// waits, and two thread hops cost more than the read.
    pub fn read_direct(
        &self,
        class: IoClass,
        offset: u64,
        len: usize,
    ) -> Result<ReadBuf, DeviceError> {
        let started = self.shared.clock.now();
        let mut buf = zeroed_read_buf(len);
        let result = self
            .shared
            .device
            .read_at(offset, fresh_read_buf_mut(&mut buf));
        let latency = self.shared.clock.now().saturating_sub(started);
        let mut sched = self.shared.sched.lock();
        let stats = &mut sched.stats;
        stats.classes[class.index()]
            .read
            .record_request(len as u64, 0, nanos(latency));
        stats.read_requests += 1;
        stats.read_calls += 1;
        stats.read_bytes += len as u64;
        stats.read_errors += u64::from(result.is_err());
        stats.read_latency_us.saturating_record(micros(latency));
        drop(sched);
        result.map(|()| buf)
    }

    pub fn read_sync(
        &self,
        class: IoClass,
        offset: u64,
        len: usize,
    ) -> Result<ReadBuf, DeviceError> {
        self.read(class, offset, len).wait()
    }

    pub fn write_sync(&self, class: IoClass, offset: u64, data: Bytes) -> Result<(), DeviceError> {
        self.write(class, offset, data).wait()
    }

    /// Waits for every write submitted before this call to complete, then flushes the device.
    pub fn flush(&self) -> Result<(), DeviceError> {
        let started = self.shared.clock.now();
        {
            let mut sched = self.shared.sched.lock();
            let target = sched.next_seq;
            sched.flush_waiters += 1;
            while sched
                .unfinished_writes
                .first()
                .is_some_and(|&seq| seq < target)
            {
                self.shared.done.wait(&mut sched);
            }
            sched.flush_waiters -= 1;
        }
        self.flush_device(started)
    }

    fn flush_device(&self, started: Duration) -> Result<(), DeviceError> {
        let result = self.shared.device.flush();
        let latency = self.shared.clock.now().saturating_sub(started);
        let mut sched = self.shared.sched.lock();
        sched.stats.flushes += 1;
        sched.stats.flush_errors += u64::from(result.is_err());
        sched
            .stats
            .flush_latency_us
            .saturating_record(micros(latency));
        result
    }

    /// Tells the device `[offset, offset + len)` is free (done at once, not queued).
    pub fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        let result = self.shared.device.discard(offset, len);
        self.shared.sched.lock().stats.discards += 1;
        result
    }

    /// Raises pending reads at `offset` queued as `from` to class `to` (a demand read that
    /// finds its block still being read ahead must not wait behind other read-ahead: priority
    /// inversion). Reads already in service are left alone. Returns how many moved.
    pub fn promote_reads(&self, offset: u64, from: IoClass, to: IoClass) -> usize {
        if from == to {
            return 0;
        }
        let mut sched = self.shared.sched.lock();
        let seqs: Vec<u64> = sched.by_offset[Dir::Read as usize]
            .range((offset, 0)..(offset, u64::MAX))
            .map(|&(_, seq)| seq)
            .filter(|seq| sched.pending[seq].class == from)
            .collect();
        for &seq in &seqs {
            let mut request = sched.dequeue(seq);
            request.class = to;
            sched.enqueue(request);
        }
        sched.stats.promoted_reads += seqs.len() as u64;
        drop(sched);
        if !seqs.is_empty() {
            self.shared.work.notify_one();
        }
        seqs.len()
    }

    /// Requests queued or in service (mirrors read from the least busy side).
    pub fn in_flight(&self) -> usize {
        let sched = self.shared.sched.lock();
        sched.pending.len() + sched.active_requests
    }

    pub fn stats(&self) -> QueueStats {
        let sched = self.shared.sched.lock();
        let mut stats = QueueStats {
            queued: sched.pending.len(),
            active: sched.active_requests,
            ..sched.stats.clone()
        };
        for class in IoClass::ALL {
            let ci = class.index();
            stats.classes[ci].pending_requests = sched.class_queue[ci].len() as u64;
            stats.classes[ci].active_requests = sched.active_requests_by_class[ci] as u64;
        }
        stats
    }

    /// Flushes waiting for earlier writes (for tests that must observe a waiting flush).
    #[cfg(test)]
    pub(super) fn waiting_flushes(&self) -> usize {
        self.shared.sched.lock().flush_waiters
    }

    /// Stops accepting requests, lets the workers finish what is queued, and joins them.
    pub fn shutdown(&self) {
        self.shared.sched.lock().shutdown = true;
        self.shared.work.notify_all();
        let handles = std::mem::take(&mut *self.workers.lock());
        let me = std::thread::current().id();
        for handle in handles {
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
    }
}

impl Drop for LeafQueue {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for LeafQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeafQueue")
            .field("device", &self.shared.name)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}
