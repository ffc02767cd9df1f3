//! `LeafQueue`: the per-leaf I/O scheduler.
//!
//! Every leaf device gets one queue and `device.concurrency_hint()` worker threads
//! (`cairn-io-Q.N`). Callers submit reads and writes with a priority class and get an `IoHandle`
//! to wait on; they never call the device directly for data I/O.
//!
//! Scheduling. Pending requests are kept per class: FIFO for `SyncRead`, `CacheRead`,
//! `SyncWrite`, `Log` and `CacheWrite` (latency matters, or the caller chose the order),
//! offset-ordered for `AsyncRead`, `AsyncWrite` and `Scrub` (served in elevator order from the
//! last issued offset, which is what rotational media want). A free worker takes the
//! highest-priority class that has pending work and is below its cap of active requests
//! (`IoClass::max_active`): sync classes before async, scrub last. Strict priority means a
//! saturating sync load starves scrub; that is intended.
//!
//! The cache tier's classes only meet on a cache device's queue: `CacheRead` (a read that
//! stands in for a pool read a caller waits on) right after `SyncRead`, and `CacheWrite`
//! (feeding the tier: nobody waits on it but its writer) just above scrub, with two in service
//! at most, so a demand read queued behind a feed is the next request issued.
//!
//! Aggregation. The request taken is merged with pending requests of the same direction that
//! touch it (any class), in both directions of the offset order: writes must be exactly
//! contiguous, reads may leave gaps of up to 32 KiB (read into a scratch buffer and dropped).
//! An aggregate spans at most 1 MiB and 64 buffers and is ONE vectored device call: write
//! buffers are the callers' `Bytes` (no copy), and each read lands directly in its own request's
//! `ReadBuf`: a shared buffer of exactly the request's length, which the caches above keep as
//! it is (a block read for the ARC is never copied again on its way in). Every merged request completes with the aggregate's result.
//!
//! Flush. `flush()` waits until every write submitted before it has completed, then calls the
//! device's flush from the caller's thread. It reports the flush's result only: write errors
//! are reported on each write's own handle.
//!
//! Direct writes (`write_direct`) run in the caller's thread, optionally as FUA writes that are
//! durable on return; the intent log writes its blocks that way and never flushes.
//!
//! Statistics. Besides the totals and latency percentiles of `cairn stat io`, `QueueStats`
//! carries per class and direction the queue wait, disk wait and total wait of every request,
//! request and aggregate sizes, and the pending and active requests of each class at the
//! snapshot (`iostats`, for `cairn pool iostat -l/-w/-q/-r`). All of it is recorded under the
//! lock the bookkeeping takes anyway, into fixed arrays.
//!
//! Invariants: a request is in exactly one place (pending in its class queue and the offset
//! index, or active in one aggregate); `unfinished_writes` holds exactly the writes submitted
//! and not yet completed; the queue's lock is never held during a device call.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use parking_lot::{Condvar, Mutex};

use crate::clock::{Clock, RealClock};
use crate::device::{Device, DeviceError};
use crate::iostats::ClassStats;

/// Largest aggregate, gaps included.
pub const AGGREGATE_MAX_BYTES: u64 = 1 << 20;
/// Most buffers in one vectored call (gap buffers included).
pub const AGGREGATE_MAX_BUFFERS: usize = 64;
/// Largest hole between two reads that are still merged.
pub const READ_GAP_MAX_BYTES: u64 = 32 << 10;

/// Priority classes, highest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IoClass {
    SyncRead,
    /// A read from a cache device for a reader waiting on it.
    CacheRead,
    SyncWrite,
    Log,
    AsyncRead,
    AsyncWrite,
    /// Feeding a cache device (and its segment headers and summaries).
    CacheWrite,
    Scrub,
}

/// Number of classes.
pub const CLASSES: usize = IoClass::ALL.len();

impl IoClass {
    /// All classes in priority order.
    pub const ALL: [IoClass; 8] = [
        IoClass::SyncRead,
        IoClass::CacheRead,
        IoClass::SyncWrite,
        IoClass::Log,
        IoClass::AsyncRead,
        IoClass::AsyncWrite,
        IoClass::CacheWrite,
        IoClass::Scrub,
    ];

    pub fn name(self) -> &'static str {
        match self {
            IoClass::SyncRead => "sync-read",
            IoClass::CacheRead => "cache-read",
            IoClass::SyncWrite => "sync-write",
            IoClass::Log => "log",
            IoClass::AsyncRead => "async-read",
            IoClass::AsyncWrite => "async-write",
            IoClass::CacheWrite => "cache-write",
            IoClass::Scrub => "scrub",
        }
    }

    /// Most aggregates of this class in service at once.
    pub fn max_active(self) -> usize {
        match self {
            IoClass::SyncRead | IoClass::CacheRead | IoClass::SyncWrite | IoClass::Log => 10,
            IoClass::AsyncWrite => 10,
            IoClass::AsyncRead => 3,
            IoClass::CacheWrite | IoClass::Scrub => 2,
        }
    }

    /// FIFO classes keep submission order; the others are served by offset.
    pub fn is_fifo(self) -> bool {
        matches!(
            self,
            IoClass::SyncRead
                | IoClass::CacheRead
                | IoClass::SyncWrite
                | IoClass::Log
                | IoClass::CacheWrite
        )
    }

    /// The class's place in `ALL` (and in `QueueStats::classes`).
    pub fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dir {
    Read = 0,
    Write = 1,
}

type Reply<T> = Sender<Result<T, DeviceError>>;

/// What a read returns: its bytes in a shared buffer of exactly their length, so a cache can
/// keep the very buffer the device filled (no copy) and hand out references to it.
pub type ReadBuf = Arc<[u8]>;

/// A zero-filled buffer of `len` bytes for a read to fill (zeroed memory from the allocator:
/// large buffers come straight from the kernel, already zero, with no pass over them here).
fn zeroed_read_buf(len: usize) -> ReadBuf {
    // SAFETY: every bit pattern, zero included, is a valid u8.
    unsafe { Arc::<[u8]>::new_zeroed_slice(len).assume_init() }
}

/// The bytes of a buffer from `zeroed_read_buf`, not shared with anyone yet.
fn fresh_read_buf_mut(buf: &mut ReadBuf) -> &mut [u8] {
    Arc::get_mut(buf).expect("a read buffer is not shared before its read completes")
}

enum Payload {
    Read {
        len: u64,
        reply: Reply<ReadBuf>,
    },
    /// `durable`: a FUA write (see `write_durable`).
    Write {
        data: Bytes,
        durable: bool,
        reply: Reply<()>,
    },
}

struct Request {
    seq: u64,
    class: IoClass,
    offset: u64,
    submitted: Duration,
    payload: Payload,
}

impl Request {
    fn len(&self) -> u64 {
        match &self.payload {
            Payload::Read { len, .. } => *len,
            Payload::Write { data, .. } => data.len() as u64,
        }
    }

    fn end(&self) -> u64 {
        self.offset + self.len()
    }

    fn dir(&self) -> Dir {
        match self.payload {
            Payload::Read { .. } => Dir::Read,
            Payload::Write { .. } => Dir::Write,
        }
    }
}

/// A submitted request's result, to wait for.
#[must_use = "an I/O handle must be waited on to learn whether the I/O succeeded"]
pub struct IoHandle<T> {
    rx: Receiver<Result<T, DeviceError>>,
    device: Arc<str>,
}

impl<T> IoHandle<T> {
    /// Blocks until the request completes.
    pub fn wait(self) -> Result<T, DeviceError> {
        self.rx.recv().unwrap_or_else(|_| {
            Err(DeviceError::Invalid {
                device: self.device.to_string(),
                reason: "the I/O queue dropped the request".into(),
            })
        })
    }

    /// True once the result is available (`wait` will not block).
    pub fn is_done(&self) -> bool {
        !self.rx.is_empty()
    }
}

/// A snapshot of a queue's counters, for `pool iostat` and tests.
#[derive(Clone, Debug)]
pub struct QueueStats {
    pub read_requests: u64,
    pub write_requests: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Device calls made for the requests above (fewer than requests when aggregating).
    pub read_calls: u64,
    pub write_calls: u64,
    /// Writes made durable on their own (FUA), which need no flush.
    pub fua_writes: u64,
    pub flushes: u64,
    pub discards: u64,
    /// Pending reads whose class was raised (`promote_reads`).
    pub promoted_reads: u64,
    /// Failed requests (each request of a failed aggregate counts).
    pub read_errors: u64,
    pub write_errors: u64,
    pub flush_errors: u64,
    pub queued: usize,
    pub active: usize,
    /// Submission to completion, in microseconds.
    pub read_latency_us: Histogram<u64>,
    pub write_latency_us: Histogram<u64>,
    pub flush_latency_us: Histogram<u64>,
    /// Per priority class, indexed by `IoClass::index` (see `class`): queue depths now, and
    /// waits and sizes so far. Direct writes (`write_direct`) count as `IoClass::Log`, with
    /// no queue wait.
    pub classes: [ClassStats; CLASSES],
}

fn latency_histogram() -> Histogram<u64> {
    // 1 us to 1 hour, 2 significant digits.
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("valid histogram bounds")
}

impl Default for QueueStats {
    fn default() -> Self {
        QueueStats {
            read_requests: 0,
            write_requests: 0,
            read_bytes: 0,
            write_bytes: 0,
            read_calls: 0,
            write_calls: 0,
            fua_writes: 0,
            flushes: 0,
            discards: 0,
            promoted_reads: 0,
            read_errors: 0,
            write_errors: 0,
            flush_errors: 0,
            queued: 0,
            active: 0,
            read_latency_us: latency_histogram(),
            write_latency_us: latency_histogram(),
            flush_latency_us: latency_histogram(),
            classes: [ClassStats::default(); CLASSES],
        }
    }
}

fn quantile(histogram: &Histogram<u64>, q: f64) -> u64 {
    if histogram.is_empty() {
        0
    } else {
        histogram.value_at_quantile(q)
    }
}

impl QueueStats {
    /// The statistics of one priority class.
    pub fn class(&self, class: IoClass) -> &ClassStats {
        &self.classes[class.index()]
    }

    /// Every counter as (name, value), for `cairn stat io`; latencies in microseconds.
    pub fn fields(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("read_requests", self.read_requests),
            ("read_calls", self.read_calls),
            ("read_bytes", self.read_bytes),
            ("write_requests", self.write_requests),
            ("write_calls", self.write_calls),
            ("write_bytes", self.write_bytes),
            ("fua_writes", self.fua_writes),
            ("flushes", self.flushes),
            ("discards", self.discards),
            ("promoted_reads", self.promoted_reads),
            ("read_errors", self.read_errors),
            ("write_errors", self.write_errors),
            ("flush_errors", self.flush_errors),
            ("queued", self.queued as u64),
            ("active", self.active as u64),
            ("read_latency_p50_us", quantile(&self.read_latency_us, 0.5)),
            ("read_latency_p99_us", quantile(&self.read_latency_us, 0.99)),
            (
                "write_latency_p50_us",
                quantile(&self.write_latency_us, 0.5),
            ),
            (
                "write_latency_p99_us",
                quantile(&self.write_latency_us, 0.99),
            ),
            (
                "flush_latency_p50_us",
                quantile(&self.flush_latency_us, 0.5),
            ),
            (
                "flush_latency_p99_us",
                quantile(&self.flush_latency_us, 0.99),
            ),
        ]
    }
}

impl fmt::Display for QueueStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = |h: &Histogram<u64>, q: f64| {
            if h.is_empty() {
                0
            } else {
                h.value_at_quantile(q)
            }
        };
        write!(
            f,
            "read {} req / {} calls / {} B (p50 {} us, p99 {} us, {} err); \
             write {} req / {} calls / {} B (p50 {} us, p99 {} us, {} err, {} fua); \
             flush {} (p50 {} us, {} err); queued {}, active {}",
            self.read_requests,
            self.read_calls,
            self.read_bytes,
            p(&self.read_latency_us, 0.5),
            p(&self.read_latency_us, 0.99),
            self.read_errors,
            self.write_requests,
            self.write_calls,
            self.write_bytes,
            p(&self.write_latency_us, 0.5),
            p(&self.write_latency_us, 0.99),
            self.write_errors,
            self.fua_writes,
            self.flushes,
            p(&self.flush_latency_us, 0.5),
            self.flush_errors,
            self.queued,
            self.active,
        )
    }
}

/// Requests taken together for one device call, in offset order.
struct Aggregate {
    class: IoClass,
    dir: Dir,
    members: Vec<Request>,
    /// When the device call was made (set by `execute`).
    issued: Duration,
}

struct Sched {
    pending: BTreeMap<u64, Request>,
    /// Per class: (seq, seq) for FIFO classes, (offset, seq) for the others.
    class_queue: [BTreeSet<(u64, u64)>; CLASSES],
    /// Per direction: (offset, seq) of every pending request.
    by_offset: [BTreeSet<(u64, u64)>; 2],
    active: [usize; CLASSES],
    active_requests: usize,
    /// Requests in service by their own class (an aggregate may carry several classes).
    active_requests_by_class: [usize; CLASSES],
    /// Elevator position for offset-ordered classes: the end of the last aggregate issued.
    last_offset: u64,
    unfinished_writes: BTreeSet<u64>,
    next_seq: u64,
    flush_waiters: usize,
    shutdown: bool,
    stats: QueueStats,
}

impl Sched {
    fn class_key(request: &Request) -> (u64, u64) {
        if request.class.is_fifo() {
            (request.seq, request.seq)
        } else {
            (request.offset, request.seq)
        }
    }

    fn enqueue(&mut self, request: Request) {
        let dir = request.dir() as usize;
        self.class_queue[request.class.index()].insert(Self::class_key(&request));
        self.by_offset[dir].insert((request.offset, request.seq));
        if request.dir() == Dir::Write {
            self.unfinished_writes.insert(request.seq);
        }
        self.pending.insert(request.seq, request);
    }

    fn dequeue(&mut self, seq: u64) -> Request {
        let request = self.pending.remove(&seq).expect("pending request");
        self.class_queue[request.class.index()].remove(&Self::class_key(&request));
        self.by_offset[request.dir() as usize].remove(&(request.offset, request.seq));
        request
    }

    /// Picks the next aggregate to issue, if any class may issue.
    fn take(&mut self) -> Option<Aggregate> {
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

struct Shared {
    device: Arc<dyn Device>,
    name: Arc<str>,
    clock: Arc<dyn Clock>,
    sched: Mutex<Sched>,
    /// Signalled when work is submitted, a class slot frees up, or on shutdown.
    work: Condvar,
    /// Signalled when requests complete (flush waiters).
    done: Condvar,
}

/// The I/O scheduler of one leaf device.
pub struct LeafQueue {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

static NEXT_QUEUE_ID: AtomicU64 = AtomicU64::new(0);

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
    fn waiting_flushes(&self) -> usize {
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

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn worker(shared: &Shared) {
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
fn execute(shared: &Shared, mut aggregate: Aggregate) {
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

fn complete(
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

#[cfg(test)]
mod tests;
