//! The transmission phase of one connection: read requests, run them concurrently, send replies
//! as they complete.
//!
//! Shape: a *reader* (this connection's task) decodes and validates requests in arrival order
//! and spawns one handler task per valid request; handlers run the export call on the blocking
//! pool (or, when the client waits for stable media, in place with `block_in_place`) and push
//! their reply into a channel; a single *writer* (same task, joined with the
//! reader) drains the channel, so replies never interleave on the wire. The reader answers
//! some requests itself, with no handler task and no thread hop: a read the export serves from
//! memory (`Export::try_read_now`), a plain write it takes at once (`Export::try_write_now`),
//! and, for a client that waits for each reply (QD1: its last requests each found nothing else
//! in flight), a FLUSH or FUA request (in place, `block_in_place`): its reply then leaves from
//! the thread that computed it instead of after a wake-up of another one.
//! - Flush ahead: once a client that waits for each reply has sent a FLUSH after each of its
//!   last few writes (fio's `fsync=1`, a database's write + fdatasync), the connection commits
//!   as soon as the reply to its next write is on the wire, while the reply travels and the
//!   FLUSH comes back; that FLUSH then finds nothing left to commit, and the reader, polled
//!   again right after the commit, reads it at once (no thread has to be woken for it).
//!   Durability is unchanged: the FLUSH still calls `Export::flush`.
//! - Spin for the next request: after a FLUSH or FUA request of a client that waits for each
//!   reply, the reader looks for the next request for a moment (`ServerConfig::serial_spin`)
//!   before letting its thread sleep, yielding to the runtime between looks: the request then
//!   finds an awake thread instead of paying for a wake-up.
//!
//! Invariants:
//! - Bounded: every request holds a slot of the connection's `max_inflight_requests` semaphore
//!   and reads/writes also hold `length` bytes of both the connection's and the server's byte
//!   budgets, from before their buffer is allocated until their reply has been written. A client
//!   that stops reading replies therefore stalls its own reader, and the writer gives up after
//!   `io_timeout`.
//! - Flush ordering: every write-like request (WRITE, TRIM, WRITE_ZEROES) gets a sequence number
//!   in arrival order and sits in the connection's in-flight set until its export call returned.
//!   A FLUSH waits until no write with a smaller sequence number is in flight, then calls the
//!   export-wide `Export::flush`. So a flush covers every write received before it on this
//!   connection (stronger than the protocol's "replied before"), and — because `flush` is
//!   export-wide — every write any other connection has been answered for (`CAN_MULTI_CONN`).
//!   A write the reader carries out itself has returned before the next request is even read,
//!   so it needs no place in the set; a FLUSH runs on the reader only when nothing is in flight.
//! - Validation happens before any export call: alignment to 512, range, size limits, read-only,
//!   command flags. Bad requests get an error reply and the connection carries on; only a bad
//!   request magic, truncation or a stalled transfer (the stream cannot be resynchronised)
//!   closes it. A WRITE whose payload is refused is read and discarded (streamed, not buffered)
//!   so the stream stays in sync.
//! - Shutdown / DISC / EOF: the reader stops reading; requests already read finish and their
//!   replies are written before the connection closes.
//! - A panicking export call is answered `EIO`; it cannot take the connection down.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::export::{Export, ExportError};
use crate::handshake::{Session, discard};
use crate::proto::*;
use crate::server::Inner;
use crate::stats::{ExportStats, OpKind};

/// Most extents sent in one block status reply (the protocol's recommended limit).
const MAX_EXTENTS: usize = 1 << 20;

/// What a validated request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read {
        offset: u64,
        len: u32,
    },
    Write {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        len: u32,
        fua: bool,
        may_trim: bool,
    },
    Cache {
        offset: u64,
        len: u32,
    },
    BlockStatus {
        offset: u64,
        len: u32,
        req_one: bool,
    },
}

impl Op {
    fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Write { .. } => OpKind::Write,
            Op::Flush => OpKind::Flush,
            Op::Trim { .. } => OpKind::Trim,
            Op::WriteZeroes { .. } => OpKind::WriteZeroes,
            Op::Cache { .. } => OpKind::Cache,
            Op::BlockStatus { .. } => OpKind::BlockStatus,
        }
    }

    /// Bytes of memory the request needs while in flight (payload or reply data).
    fn buffer_bytes(&self) -> u32 {
        match self {
            Op::Read { len, .. } | Op::Write { len, .. } => *len,
            _ => 0,
        }
    }

    /// Whether the client waits for stable media (FUA, FLUSH): such a request is carried out
    /// on the thread that took it rather than handed to the blocking pool, sparing the two
    /// thread wake-ups of the hand-off on the path whose latency the client sees.
    fn waits_for_media(&self) -> bool {
        matches!(
            self,
            Op::Flush
                | Op::Write { fua: true, .. }
                | Op::Trim { fua: true, .. }
                | Op::WriteZeroes { fua: true, .. }
        )
    }

    fn is_write_like(&self) -> bool {
        matches!(
            self,
            Op::Write { .. } | Op::Trim { .. } | Op::WriteZeroes { .. }
        )
    }
}

/// A refused request: the operation it was (if known), the NBD error and a message.
#[derive(Debug, PartialEq, Eq)]
struct Refusal {
    kind: Option<OpKind>,
    errno: u32,
    message: String,
}

fn refuse(kind: OpKind, errno: u32, message: impl Into<String>) -> Refusal {
    Refusal {
        kind: Some(kind),
        errno,
        message: message.into(),
    }
}

/// Validates a request against the session. DISC is handled by the caller.
fn validate(req: &Request, s: &Session) -> Result<Op, Refusal> {
    let f = req.flags;
    let fua = f & CMD_FLAG_FUA != 0;
    let offset = req.offset;
    let len = req.length;
    let (kind, allowed) = match req.kind {
        CMD_READ => (
            OpKind::Read,
            CMD_FLAG_FUA | if s.structured { CMD_FLAG_DF } else { 0 },
        ),
        CMD_WRITE => (OpKind::Write, CMD_FLAG_FUA),
        CMD_FLUSH => (OpKind::Flush, CMD_FLAG_FUA),
        CMD_TRIM => (OpKind::Trim, CMD_FLAG_FUA),
        CMD_CACHE => (OpKind::Cache, CMD_FLAG_FUA),
        CMD_WRITE_ZEROES => (
            OpKind::WriteZeroes,
            CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        ),
        CMD_BLOCK_STATUS => (OpKind::BlockStatus, CMD_FLAG_FUA | CMD_FLAG_REQ_ONE),
        other => {
            return Err(Refusal {
                kind: None,
                errno: EINVAL,
                message: format!("unknown command {other}"),
            });
        }
    };
    if f & !allowed != 0 {
        return Err(refuse(
            kind,
            EINVAL,
            format!("command flags {f:#x} not valid here"),
        ));
    }
    if matches!(kind, OpKind::Write | OpKind::Trim | OpKind::WriteZeroes) && s.readonly {
        return Err(refuse(kind, EPERM, "export is read-only"));
    }
    let max = s.block.max;
    match kind {
        OpKind::Read if len > max => {
            return Err(refuse(
                kind,
                EOVERFLOW,
                format!("read of {len} bytes exceeds {max}"),
            ));
        }
        OpKind::Write if len > max => {
            return Err(refuse(
                kind,
                EINVAL,
                format!("write of {len} bytes exceeds {max}"),
            ));
        }
        OpKind::BlockStatus if s.meta_context.is_none() => {
            return Err(refuse(kind, EINVAL, "no metadata context was negotiated"));
        }
        OpKind::BlockStatus if len == 0 => {
            return Err(refuse(kind, EINVAL, "block status of zero length"));
        }
        _ => {}
    }
    if kind != OpKind::Flush {
        let end = offset.checked_add(u64::from(len));
        if end.is_none_or(|e| e > s.size) {
            let errno = if matches!(kind, OpKind::Write | OpKind::WriteZeroes) {
                ENOSPC
            } else {
                EINVAL
            };
            return Err(refuse(
                kind,
                errno,
                "request extends past the end of the export",
            ));
        }
        let min = u64::from(s.block.min);
        let end = offset + u64::from(len);
        // Trim and zeroing take any byte range (the export handles partial blocks): qemu
        // splits an unaligned discard and sends the leftover pieces below 512 bytes, and
        // only tolerates ENOTSUP for them. Data transfers keep the advertised alignment.
        let any_alignment = matches!(kind, OpKind::Trim | OpKind::WriteZeroes);
        if !any_alignment
            && (!offset.is_multiple_of(min)
                || (!u64::from(len).is_multiple_of(min) && end != s.size))
        {
            return Err(refuse(
                kind,
                EINVAL,
                format!("request not aligned to {min} bytes"),
            ));
        }
    }
    Ok(match kind {
        OpKind::Read => Op::Read { offset, len },
        OpKind::Write => Op::Write { offset, len, fua },
        OpKind::Flush => Op::Flush,
        OpKind::Trim => Op::Trim { offset, len, fua },
        OpKind::Cache => Op::Cache { offset, len },
        OpKind::WriteZeroes => {
            let no_hole = f & CMD_FLAG_NO_HOLE != 0;
            if f & CMD_FLAG_FAST_ZERO != 0 && (no_hole || !s.export.fast_zero()) {
                // Allocating zeroes is no faster than writing them: fail fast, change nothing.
                return Err(refuse(kind, ENOTSUP, "zeroing this range is not fast"));
            }
            Op::WriteZeroes {
                offset,
                len,
                fua,
                may_trim: !no_hole,
            }
        }
        OpKind::BlockStatus => Op::BlockStatus {
            offset,
            len,
            req_one: f & CMD_FLAG_REQ_ONE != 0,
        },
    })
}

/// Reply payloads.
enum Body {
    Ok,
    Error(u32, String),
    /// Read data and the offset it came from.
    Read(u64, Vec<u8>),
    BlockStatus(u32, Vec<(u32, u32)>),
}

/// Resources a request holds until its reply is on the wire.
struct Permits {
    _slot: OwnedSemaphorePermit,
    _bytes: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

struct Reply {
    cookie: u64,
    body: Body,
    _permits: Permits,
    /// Commit ahead once this reply is on the wire (see `Reader::commit_ahead`).
    then_flush: Option<Arc<dyn Export>>,
}

/// Write-like requests still running on this connection, by arrival sequence number.
struct WriteTracker {
    inflight: watch::Sender<BTreeSet<u64>>,
}

/// Removes a write from the in-flight set when its handler finishes (or panics, or is dropped).
struct WriteGuard {
    tracker: Arc<WriteTracker>,
    seq: u64,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        self.tracker.inflight.send_modify(|s| {
            s.remove(&self.seq);
        });
    }
}

/// Runs transmission until the client disconnects, misbehaves or the server shuts down.
pub(crate) async fn serve<R, W>(inner: Arc<Inner>, session: Session, mut reader: R, writer: W)
where
    R: AsyncBufRead + AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let stats = session.stats.clone();
    let session = Arc::new(session);
    let (tx, rx) = mpsc::unbounded_channel::<Reply>();
    let dead = Notify::new();
    let again = AtomicBool::new(false);
    let reading = read_loop(&inner, &session, &stats, &mut reader, tx, &dead);
    let writing = write_loop(
        rx,
        writer,
        session.structured,
        inner.config.io_timeout,
        &dead,
        &again,
    );
    drive(reading, writing, &again).await;
}

/// Polls a connection's reader and writer until both are done. The reader goes first, so a
/// reply it queued while answering a request itself goes out in the same poll, from the thread
/// that computed it, rather than after a wake-up of the task (which, after a `block_in_place`,
/// is a wake-up of another thread). When the writer has just run a commit ahead (`again`),
/// the client's FLUSH has most likely arrived meanwhile: the reader is polled again at once,
/// for the same reason.
async fn drive(
    reading: impl Future<Output = ()>,
    writing: impl Future<Output = ()>,
    again: &AtomicBool,
) {
    let mut reading = std::pin::pin!(reading);
    let mut writing = std::pin::pin!(writing);
    let (mut read_done, mut write_done) = (false, false);
    std::future::poll_fn(|cx| {
        loop {
            again.store(false, Ordering::Relaxed);
            if !read_done {
                read_done = reading.as_mut().poll(cx).is_ready();
            }
            if !write_done {
                write_done = writing.as_mut().poll(cx).is_ready();
            }
            if read_done && write_done {
                return Poll::Ready(());
            }
            if read_done || !again.load(Ordering::Relaxed) {
                return Poll::Pending;
            }
        }
    })
    .await
}

/// Client FLUSHes following its writes one for one (fio's `fsync=1`, a database's write then
/// fdatasync) this many times in a row make the reader commit ahead of the next FLUSH.
const PAIRS_BEFORE_FLUSH_AHEAD: u32 = 4;

/// Requests in a row that found nothing else of their connection in flight, after which the
/// client is taken for one that waits for each reply (QD1) and the reader may block on its
/// requests: no other request of it is coming meanwhile. A client that pipelines keeps
/// breaking the streak, and its FLUSHes go to handlers, never holding up its other requests.
const SERIAL_STREAK: u32 = 8;

/// What the reader has seen of the client's FLUSH habit: whether it sends one after each write.
#[derive(Default)]
struct FlushHabit {
    writes_since_flush: u32,
    /// FLUSHes in a row that each followed exactly one write (capped).
    paired_flushes: u32,
}

impl FlushHabit {
    fn note(&mut self, op: &Op) {
        if op.is_write_like() {
            self.writes_since_flush = self.writes_since_flush.saturating_add(1);
            if self.writes_since_flush > 1 {
                self.paired_flushes = 0;
            }
        } else if matches!(op, Op::Flush) {
            self.paired_flushes = match self.writes_since_flush {
                1 => (self.paired_flushes + 1).min(PAIRS_BEFORE_FLUSH_AHEAD),
                _ => 0,
            };
            self.writes_since_flush = 0;
        }
    }

    /// The last request was a write and, by the habit, a FLUSH comes next.
    fn expects_flush(&self) -> bool {
        self.paired_flushes >= PAIRS_BEFORE_FLUSH_AHEAD && self.writes_since_flush == 1
    }
}

/// The reading side of one connection: its limits, its writes in flight and the client's
/// FLUSH habit.
struct Reader<'a> {
    inner: &'a Arc<Inner>,
    session: &'a Arc<Session>,
    stats: &'a Arc<Mutex<ExportStats>>,
    tx: mpsc::UnboundedSender<Reply>,
    slots: Arc<Semaphore>,
    slot_count: usize,
    conn_bytes: Arc<Semaphore>,
    tracker: Arc<WriteTracker>,
    next_write_seq: u64,
    habit: FlushHabit,
    /// Requests in a row that arrived with nothing else in flight (capped at `SERIAL_STREAK`).
    serial_streak: u32,
    /// The last request came from a serial client and waited for stable media: its next
    /// request follows the reply closely, and the reader spins for it.
    spin_next: bool,
}

/// Whether the reader goes on after taking one request.
enum Next {
    /// Read the next request.
    Read,
    /// Stop reading: the stream is out of sync or the connection is going away.
    Stop,
}

async fn read_loop<R>(
    inner: &Arc<Inner>,
    session: &Arc<Session>,
    stats: &Arc<Mutex<ExportStats>>,
    r: &mut R,
    tx: mpsc::UnboundedSender<Reply>,
    dead: &Notify,
) where
    R: AsyncBufRead + AsyncRead + Unpin + Send,
{
    let mut reader = Reader::new(inner, session, stats, tx);
    let mut shutdown = inner.shutdown_rx();
    loop {
        if let Some(found) = reader.spin_for_request(r).await {
            if !found {
                break;
            }
        } else if !request_arrives(r, &mut shutdown, dead).await {
            break;
        }
        let Some(req) = reader.read_header(r).await else {
            break;
        };
        if req.kind == CMD_DISC {
            break;
        }
        if matches!(reader.take(r, req).await, Next::Stop) {
            break;
        }
    }
}

/// Waits, with no deadline (the connection is idle between requests), for the first byte of
/// the next request; false when the connection is closing instead.
async fn request_arrives<R: AsyncBufRead + Unpin>(
    r: &mut R,
    shutdown: &mut watch::Receiver<bool>,
    dead: &Notify,
) -> bool {
    tokio::select! {
        biased;
        _ = crate::server::shutting_down(shutdown) => false,
        _ = dead.notified() => false,
        buf = r.fill_buf() => matches!(buf, Ok(b) if !b.is_empty()),
    }
}

impl<'a> Reader<'a> {
    /// For a serial client whose request that waited for stable media was just answered: looks
    /// for its next request for up to `ServerConfig::serial_spin` without letting the thread
    /// sleep. Each look yields to the runtime, which polls its I/O driver without blocking
    /// before coming back, so other tasks run meanwhile. `Some(false)`: the connection is
    /// closing; `None`: nothing came (or no spin is due), and the caller waits as usual.
    async fn spin_for_request<R: AsyncBufRead + Unpin>(&self, r: &mut R) -> Option<bool> {
        let budget = self.inner.config.serial_spin;
        if budget.is_zero() || !self.spin_next {
            return None;
        }
        let start = Instant::now();
        loop {
            let polled = std::future::poll_fn(|cx| {
                Poll::Ready(match std::pin::Pin::new(&mut *r).poll_fill_buf(cx) {
                    Poll::Ready(Ok(b)) => Some(!b.is_empty()),
                    Poll::Ready(Err(_)) => Some(false),
                    Poll::Pending => None,
                })
            })
            .await;
            if polled.is_some() || start.elapsed() >= budget {
                return polled;
            }
            tokio::task::yield_now().await;
        }
    }

    fn new(
        inner: &'a Arc<Inner>,
        session: &'a Arc<Session>,
        stats: &'a Arc<Mutex<ExportStats>>,
        tx: mpsc::UnboundedSender<Reply>,
    ) -> Reader<'a> {
        let cfg = &inner.config;
        let slot_count = cfg.max_inflight_requests.max(1);
        Reader {
            inner,
            session,
            stats,
            tx,
            slots: Arc::new(Semaphore::new(slot_count)),
            slot_count,
            conn_bytes: Arc::new(Semaphore::new(
                cfg.max_inflight_bytes.max(cfg.max_request_bytes as usize),
            )),
            tracker: Arc::new(WriteTracker {
                inflight: watch::Sender::new(BTreeSet::new()),
            }),
            next_write_seq: 0,
            habit: FlushHabit::default(),
            spin_next: false,
            serial_streak: 0,
        }
    }

    /// Reads and decodes a request header (its first byte has arrived); `None` on a protocol
    /// error (counted), after which the stream cannot be trusted.
    async fn read_header<R: AsyncRead + Unpin>(&self, r: &mut R) -> Option<Request> {
        let mut hdr = [0u8; REQUEST_LEN];
        let decoded = match tokio::time::timeout(
            self.inner.config.io_timeout,
            r.read_exact(&mut hdr),
        )
        .await
        {
            Ok(Ok(_)) => Request::decode(&hdr),
            _ => None,
        };
        if decoded.is_none() {
            self.inner.protocol_error();
        }
        decoded
    }

    /// Takes one request whose header has been read: validates it, reads its payload, and
    /// answers it here or hands it to a handler task.
    async fn take<R: AsyncRead + Unpin>(&mut self, r: &mut R, req: Request) -> Next {
        let received = Instant::now();
        self.spin_next = false;
        // A request slot bounds the reply queue even for requests refused without an export call.
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return Next::Stop;
        };
        self.serial_streak = match self.idle() {
            true => (self.serial_streak + 1).min(SERIAL_STREAK),
            false => 0,
        };
        let op = match validate(&req, self.session) {
            Ok(op) => op,
            Err(refusal) => return self.refuse(r, &req, refusal, slot).await,
        };
        let Some(permits) = self.permits_for(&op, slot).await else {
            return Next::Stop;
        };
        let payload = match op {
            Op::Write { len, .. } => {
                let timeout = self.inner.config.io_timeout;
                match tokio::time::timeout(timeout, read_payload(r, len as usize)).await {
                    Ok(Ok(data)) => data,
                    _ => {
                        self.inner.protocol_error();
                        return Next::Stop;
                    }
                }
            }
            _ => Bytes::new(),
        };
        self.habit.note(&op);
        self.spin_next = op.waits_for_media() && self.serial_streak >= SERIAL_STREAK;
        if let Some((result, by_write_now)) = self.answer_now(op, &payload) {
            // Only for a client that waits for each reply: the commit ahead blocks this reader.
            let ahead =
                by_write_now && result.is_ok() && self.habit.expects_flush() && self.serial();
            let then_flush = ahead.then(|| self.session.export.clone());
            self.reply(req.cookie, op.kind(), result, permits, received, then_flush);
            return Next::Read;
        }
        self.spawn_handler(req.cookie, op, payload, permits, received);
        Next::Read
    }

    /// Answers a request the reader cannot carry out: an error reply, and for a WRITE its
    /// payload streamed into nothing so the stream stays in sync.
    async fn refuse<R: AsyncRead + Unpin>(
        &self,
        r: &mut R,
        req: &Request,
        refusal: Refusal,
        slot: OwnedSemaphorePermit,
    ) -> Next {
        if req.kind == CMD_WRITE {
            let n = u64::from(req.length);
            let timeout = self.inner.config.io_timeout;
            if !matches!(
                tokio::time::timeout(timeout, discard(r, n)).await,
                Ok(Ok(()))
            ) {
                self.inner.protocol_error();
                return Next::Stop;
            }
        }
        {
            let mut st = self.stats.lock();
            match refusal.kind {
                Some(k) => st.record_refused(k),
                None => st.invalid_requests += 1,
            }
        }
        let _ = self.tx.send(Reply {
            cookie: req.cookie,
            body: Body::Error(refusal.errno, refusal.message),
            _permits: Permits {
                _slot: slot,
                _bytes: None,
            },
            then_flush: None,
        });
        Next::Read
    }

    /// The request's slot plus, for data transfers, its bytes of the connection's and the
    /// server's budgets (taken before its buffer is allocated); `None` once the server is
    /// closing the budgets.
    async fn permits_for(&self, op: &Op, slot: OwnedSemaphorePermit) -> Option<Permits> {
        let bytes = op.buffer_bytes();
        let byte_permits = if bytes > 0 {
            let c = self.conn_bytes.clone().acquire_many_owned(bytes).await;
            let g = self
                .inner
                .global_bytes
                .clone()
                .acquire_many_owned(bytes)
                .await;
            Some((c.ok()?, g.ok()?))
        } else {
            None
        };
        Some(Permits {
            _slot: slot,
            _bytes: byte_permits,
        })
    }

    /// No other request of this connection is in flight (its reply included): the one being
    /// taken holds the only slot in use.
    fn idle(&self) -> bool {
        self.slots.available_permits() + 1 == self.slot_count
    }

    /// The client waits for each reply before its next request (see `SERIAL_STREAK`), and
    /// nothing else of it is in flight now: the reader may block on the request it holds.
    fn serial(&self) -> bool {
        self.serial_streak >= SERIAL_STREAK && self.idle()
    }

    /// Carries out a request on the reader itself, with no handler task and no thread hop,
    /// when that cannot hold up the connection for long: a read served from memory, a plain
    /// write the export takes at once, or — for a client that waits for each reply, with
    /// nothing else of it in flight (so no earlier write either) — a request that waits for
    /// stable media, in place.
    /// Returns the result and whether it came from `Export::try_write_now`; `None` sends the
    /// request to a handler.
    fn answer_now(&self, op: Op, payload: &Bytes) -> Option<(ExportResult, bool)> {
        let export = self.session.export.as_ref();
        match op {
            Op::Read { .. } => read_now(export, &op).map(|outcome| (Ok(outcome), false)),
            Op::Write {
                offset,
                len,
                fua: false,
            } => {
                let result = write_now(export, offset, payload)?;
                Some((result.map(|()| (Outcome::Done, u64::from(len))), true))
            }
            _ if op.waits_for_media() && self.serial() => {
                let payload = payload.clone();
                Some((run_in_place(|| execute(export, op, payload)), false))
            }
            _ => None,
        }
    }

    /// Records a request answered by the reader and queues its reply (with, if given, the
    /// export to commit ahead once the reply is on the wire).
    fn reply(
        &self,
        cookie: u64,
        kind: OpKind,
        result: ExportResult,
        permits: Permits,
        received: Instant,
        then_flush: Option<Arc<dyn Export>>,
    ) {
        let meta_id = self.session.meta_context.unwrap_or(META_BASE_ALLOCATION_ID);
        let (body, bytes, ok) = reply_body(result, meta_id);
        self.stats
            .lock()
            .record(kind, bytes, ok, received.elapsed());
        let _ = self.tx.send(Reply {
            cookie,
            body,
            _permits: permits,
            then_flush,
        });
    }

    /// Hands a request to a task of its own. A write-like request enters the in-flight set
    /// (in arrival order) until its export call returns; a FLUSH waits for every write
    /// received before it to leave that set.
    fn spawn_handler(
        &mut self,
        cookie: u64,
        op: Op,
        payload: Bytes,
        permits: Permits,
        received: Instant,
    ) {
        let write_guard = op.is_write_like().then(|| {
            let seq = self.next_write_seq;
            self.next_write_seq += 1;
            self.tracker.inflight.send_modify(|s| {
                s.insert(seq);
            });
            WriteGuard {
                tracker: self.tracker.clone(),
                seq,
            }
        });
        let flush_barrier = matches!(op, Op::Flush).then_some(self.next_write_seq);
        let handler = Handler {
            session: self.session.clone(),
            stats: self.stats.clone(),
            tracker: self.tracker.clone(),
            tx: self.tx.clone(),
        };
        tokio::spawn(handler.run(
            cookie,
            op,
            payload,
            permits,
            write_guard,
            flush_barrier,
            received,
        ));
    }
}

/// Everything a request handler task needs.
struct Handler {
    session: Arc<Session>,
    stats: Arc<Mutex<ExportStats>>,
    tracker: Arc<WriteTracker>,
    tx: mpsc::UnboundedSender<Reply>,
}

impl Handler {
    #[allow(clippy::too_many_arguments)]
    async fn run(
        self,
        cookie: u64,
        op: Op,
        payload: Bytes,
        permits: Permits,
        write_guard: Option<WriteGuard>,
        flush_barrier: Option<u64>,
        received: Instant,
    ) {
        if let Some(barrier) = flush_barrier {
            // Wait for every write received before this flush to finish.
            let mut rx = self.tracker.inflight.subscribe();
            let _ = rx
                .wait_for(|s| s.first().is_none_or(|&first| first >= barrier))
                .await;
        }
        let kind = op.kind();
        let export = self.session.export.clone();
        let meta_id = self.session.meta_context.unwrap_or(META_BASE_ALLOCATION_ID);
        let result = if op.waits_for_media() {
            run_in_place(move || execute(export.as_ref(), op, payload))
        } else {
            run_blocking(move || execute(export.as_ref(), op, payload)).await
        };
        // The write is complete (or failed): a flush waiting on it may go ahead.
        drop(write_guard);
        let latency = received.elapsed();
        let (body, bytes, ok) = reply_body(result, meta_id);
        self.stats.lock().record(kind, bytes, ok, latency);
        let _ = self.tx.send(Reply {
            cookie,
            body,
            _permits: permits,
            then_flush: None,
        });
    }
}

/// A read the export can serve from memory, done here on the async worker (no hop to the
/// blocking pool and back); `None` for everything else.
fn read_now(export: &dyn Export, op: &Op) -> Option<(Outcome, u64)> {
    let Op::Read { offset, len } = *op else {
        return None;
    };
    if len == 0 {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        export.try_read_now(offset, &mut buf)
    }))
    .unwrap_or(false);
    done.then(|| (Outcome::Data(offset, buf), u64::from(len)))
}

/// A plain write the export takes at once (`Export::try_write_now`), done here on the async
/// worker; `None` when it would block (nothing was changed). A panic becomes `EIO`.
fn write_now(export: &dyn Export, offset: u64, payload: &Bytes) -> Option<Result<(), ExportError>> {
    if payload.is_empty() {
        return None;
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        export.try_write_now(offset, payload)
    }))
    .unwrap_or_else(|_| Some(Err(ExportError::Io("export operation panicked".into()))))
}

/// A reply's body, the bytes it covered and whether it succeeded.
fn reply_body(result: ExportResult, meta_id: u32) -> (Body, u64, bool) {
    match result {
        Ok((Outcome::Done, bytes)) => (Body::Ok, bytes, true),
        Ok((Outcome::Data(off, d), bytes)) => (Body::Read(off, d), bytes, true),
        Ok((Outcome::Extents(e), bytes)) => (Body::BlockStatus(meta_id, e), bytes, true),
        Err(e) => (Body::Error(e.errno(), e.to_string()), 0, false),
    }
}

/// What an export call produced and the bytes it covered.
type ExportResult = Result<(Outcome, u64), ExportError>;

enum Outcome {
    Done,
    Data(u64, Vec<u8>),
    Extents(Vec<(u32, u32)>),
}

/// Reads a WRITE payload of `len` bytes into a buffer of its own (not zero-filled first: the
/// read fills it), which the export may keep.
async fn read_payload<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> std::io::Result<Bytes> {
    let mut data = BytesMut::with_capacity(len);
    let mut limited = r.take(len as u64);
    while data.len() < len {
        if limited.read_buf(&mut data).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    Ok(data.freeze())
}

/// Runs an export call on this worker thread, which the runtime replaces meanwhile so other
/// connections carry on (`block_in_place`); a panic becomes `EIO`.
fn run_in_place<T>(f: impl FnOnce() -> Result<T, ExportError>) -> Result<T, ExportError> {
    tokio::task::block_in_place(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err(ExportError::Io("export operation panicked".into())))
    })
}

/// Runs an export call on the blocking pool; a panic becomes `EIO`.
async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ExportError> + Send + 'static,
) -> Result<T, ExportError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(_) => Err(ExportError::Io("export operation panicked".into())),
    }
}

/// Carries out a validated operation; returns the outcome and the bytes it covered.
fn execute(export: &dyn Export, op: Op, payload: Bytes) -> ExportResult {
    match op {
        Op::Read { offset, len } => {
            let mut buf = vec![0u8; len as usize];
            if len > 0 {
                export.read(offset, &mut buf)?;
            }
            Ok((Outcome::Data(offset, buf), u64::from(len)))
        }
        Op::Write { offset, len, fua } => {
            if len > 0 {
                export.write_bytes(offset, payload, fua)?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::Flush => {
            export.flush()?;
            Ok((Outcome::Done, 0))
        }
        Op::Trim { offset, len, fua } => {
            if len > 0 {
                export.trim(offset, u64::from(len), fua)?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::WriteZeroes {
            offset,
            len,
            fua,
            may_trim,
        } => {
            if len > 0 {
                export.write_zeroes(offset, u64::from(len), fua, may_trim)?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::Cache { offset, len } => {
            if len > 0 {
                export.cache(offset, u64::from(len))?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::BlockStatus {
            offset,
            len,
            req_one,
        } => {
            let raw = export.block_status(offset, u64::from(len))?;
            let extents = normalize_extents(&raw, len, req_one);
            if extents.is_empty() {
                return Err(ExportError::Io("export reported no extents".into()));
            }
            let covered = extents.iter().map(|&(l, _)| u64::from(l)).sum();
            Ok((Outcome::Extents(extents), covered))
        }
    }
}

/// Turns an export's extent list into wire descriptors: zero-length extents dropped, clipped to
/// the request, unknown flag bits cleared, neighbours with equal flags merged, at most one
/// extent with `req_one` and at most [`MAX_EXTENTS`] otherwise.
fn normalize_extents(raw: &[(u64, u32)], len: u32, req_one: bool) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut left = u64::from(len);
    for &(l, flags) in raw {
        if left == 0 {
            break;
        }
        if l == 0 {
            continue;
        }
        let l = l.min(left);
        left -= l;
        let flags = flags & (STATE_HOLE | STATE_ZERO);
        // `l <= len <= u32::MAX`, and merged lengths sum to at most `len`.
        let l = l as u32;
        match out.last_mut() {
            Some(last) if last.1 == flags => last.0 += l,
            _ => {
                if out.len() == MAX_EXTENTS {
                    break;
                }
                out.push((l, flags));
            }
        }
    }
    if req_one {
        out.truncate(1);
    }
    out
}

/// Commits what the connection wrote before the client's FLUSH arrives: the client has sent a
/// FLUSH after each of its last writes, and the reply to its latest write has just left. The
/// commit then runs while the reply travels and the FLUSH comes back, and the FLUSH finds
/// nothing left to commit. Safe whatever the client does next (making data durable early is
/// never wrong); a wrong guess costs one log commit, and the habit has to be seen again before
/// the next. Runs in place, holding up this connection only (whose client waits anyway).
fn commit_ahead(export: &dyn Export) {
    // A failure here is the FLUSH's to report: it commits (and fails) again.
    let _ = run_in_place(|| export.flush());
}

/// Drains the reply channel onto the socket. After a write error or timeout it keeps draining
/// (dropping replies, releasing their permits) so handlers and the reader never wait on a dead
/// client, and tells the reader to stop.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut rx: mpsc::UnboundedReceiver<Reply>,
    mut w: W,
    structured: bool,
    io_timeout: Duration,
    dead: &Notify,
    again: &AtomicBool,
) {
    let mut alive = true;
    while let Some(reply) = rx.recv().await {
        if !alive {
            continue;
        }
        // A commit ahead waits for its reply to be on the wire: the client turns round
        // meanwhile.
        let more_queued = !rx.is_empty() && reply.then_flush.is_none();
        let sent = tokio::time::timeout(io_timeout, async {
            send_reply(&mut w, &reply, structured).await?;
            if !more_queued {
                w.flush().await?;
            }
            std::io::Result::Ok(())
        })
        .await;
        if !matches!(sent, Ok(Ok(()))) {
            alive = false;
            dead.notify_one();
        } else if let Some(export) = &reply.then_flush {
            commit_ahead(export.as_ref());
            again.store(true, Ordering::Relaxed);
        }
    }
    if alive {
        let _ = tokio::time::timeout(io_timeout, async {
            let _ = w.flush().await;
            let _ = w.shutdown().await;
        })
        .await;
    }
}

async fn send_reply<W: AsyncWrite + Unpin>(
    w: &mut W,
    reply: &Reply,
    structured: bool,
) -> std::io::Result<()> {
    let cookie = reply.cookie;
    match &reply.body {
        Body::Ok => w.write_all(&simple_reply(cookie, 0)).await,
        Body::Error(errno, msg) if structured => {
            let msg = truncate_str(msg, MAX_STRING);
            let mut b = Vec::with_capacity(20 + 6 + msg.len());
            b.extend_from_slice(&chunk_header(
                cookie,
                REPLY_FLAG_DONE,
                REPLY_TYPE_ERROR,
                6 + msg.len() as u32,
            ));
            b.extend_from_slice(&errno.to_be_bytes());
            b.extend_from_slice(&(msg.len() as u16).to_be_bytes());
            b.extend_from_slice(msg.as_bytes());
            w.write_all(&b).await
        }
        Body::Error(errno, _) => w.write_all(&simple_reply(cookie, *errno)).await,
        Body::Read(_, data) if !structured => {
            w.write_all(&simple_reply(cookie, 0)).await?;
            w.write_all(data).await
        }
        // Structured reads: one chunk, so `NBD_CMD_FLAG_DF` is always honoured.
        Body::Read(_, data) if data.is_empty() => {
            w.write_all(&chunk_header(cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0))
                .await
        }
        Body::Read(offset, data) if is_zero(data) => {
            // All zeroes: a 12-byte hole chunk instead of the data.
            let mut b = Vec::with_capacity(32);
            b.extend_from_slice(&chunk_header(
                cookie,
                REPLY_FLAG_DONE,
                REPLY_TYPE_OFFSET_HOLE,
                12,
            ));
            b.extend_from_slice(&offset.to_be_bytes());
            b.extend_from_slice(&(data.len() as u32).to_be_bytes());
            w.write_all(&b).await
        }
        Body::Read(offset, data) => {
            let mut b = Vec::with_capacity(28);
            b.extend_from_slice(&chunk_header(
                cookie,
                REPLY_FLAG_DONE,
                REPLY_TYPE_OFFSET_DATA,
                8 + data.len() as u32,
            ));
            b.extend_from_slice(&offset.to_be_bytes());
            w.write_all(&b).await?;
            w.write_all(data).await
        }
        Body::BlockStatus(id, extents) => {
            let len = 4 + 8 * extents.len();
            let mut b = Vec::with_capacity(20 + len);
            b.extend_from_slice(&chunk_header(
                cookie,
                REPLY_FLAG_DONE,
                REPLY_TYPE_BLOCK_STATUS,
                len as u32,
            ));
            b.extend_from_slice(&id.to_be_bytes());
            for (l, f) in extents {
                b.extend_from_slice(&l.to_be_bytes());
                b.extend_from_slice(&f.to_be_bytes());
            }
            w.write_all(&b).await
        }
    }
}

/// True when every byte is zero (compared 16 bytes at a time).
fn is_zero(data: &[u8]) -> bool {
    let mut chunks = data.chunks_exact(16);
    chunks.all(|c| u128::from_ne_bytes(c.try_into().unwrap_or([1; 16])) == 0)
        && chunks.remainder().iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::BlockSizes;

    struct Null(bool);

    impl Export for Null {
        fn size(&self) -> u64 {
            1 << 20
        }
        fn preferred_block_size(&self) -> u32 {
            4096
        }
        fn readonly(&self) -> bool {
            self.0
        }
        fn read(&self, _: u64, _: &mut [u8]) -> Result<(), ExportError> {
            Ok(())
        }
        fn write(&self, _: u64, _: &[u8], _: bool) -> Result<(), ExportError> {
            Ok(())
        }
        fn flush(&self) -> Result<(), ExportError> {
            Ok(())
        }
        fn trim(&self, _: u64, _: u64, _: bool) -> Result<(), ExportError> {
            Ok(())
        }
        fn write_zeroes(&self, _: u64, _: u64, _: bool, _: bool) -> Result<(), ExportError> {
            Ok(())
        }
        fn block_status(&self, _: u64, len: u64) -> Result<Vec<(u64, u32)>, ExportError> {
            Ok(vec![(len, 0)])
        }
        fn fast_zero(&self) -> bool {
            false
        }
    }

    fn session(readonly: bool, structured: bool, meta: bool) -> Session {
        Session {
            name: "t".into(),
            export: Arc::new(Null(readonly)),
            size: (1 << 20) + 512,
            readonly,
            transmission_flags: FLAG_HAS_FLAGS,
            structured,
            meta_context: meta.then_some(1),
            block: BlockSizes {
                min: 512,
                preferred: 4096,
                max: 65536,
            },
            stats: Arc::default(),
        }
    }

    fn req(kind: u16, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            flags,
            kind,
            cookie: 1,
            offset,
            length,
        }
    }

    fn errno(r: Result<Op, Refusal>) -> u32 {
        r.map(|_| 0).unwrap_or_else(|e| e.errno)
    }

    #[test]
    fn validation_rules() {
        let s = session(false, false, false);
        let size = s.size;
        assert_eq!(
            validate(&req(CMD_READ, 0, 0, 4096), &s),
            Ok(Op::Read {
                offset: 0,
                len: 4096
            })
        );
        assert_eq!(
            errno(validate(&req(CMD_READ, 0, 0, 65536 + 512), &s)),
            EOVERFLOW
        );
        assert_eq!(
            errno(validate(&req(CMD_WRITE, 0, 0, 65536 + 512), &s)),
            EINVAL
        );
        assert_eq!(errno(validate(&req(CMD_READ, 0, size, 512), &s)), EINVAL);
        assert_eq!(errno(validate(&req(CMD_WRITE, 0, size, 512), &s)), ENOSPC);
        assert_eq!(
            errno(validate(&req(CMD_WRITE_ZEROES, 0, u64::MAX, 512), &s)),
            ENOSPC
        );
        assert_eq!(
            errno(validate(&req(CMD_TRIM, 0, u64::MAX - 10, 512), &s)),
            EINVAL
        );
        assert_eq!(errno(validate(&req(CMD_READ, 0, 1, 512), &s)), EINVAL);
        assert_eq!(errno(validate(&req(CMD_READ, 0, 0, 511), &s)), EINVAL);
        // An unaligned length is fine when it ends exactly at the (unaligned) end.
        let tail = validate(&req(CMD_READ, 0, size - 512, 512), &s);
        assert!(tail.is_ok());
        assert_eq!(
            errno(validate(&req(CMD_READ, CMD_FLAG_DF, 0, 512), &s)),
            EINVAL
        );
        assert_eq!(errno(validate(&req(CMD_READ, 1 << 9, 0, 512), &s)), EINVAL);
        assert_eq!(errno(validate(&req(42, 0, 0, 0), &s)), EINVAL);
        assert_eq!(validate(&req(42, 0, 0, 0), &s).unwrap_err().kind, None);
        assert_eq!(
            errno(validate(&req(CMD_BLOCK_STATUS, 0, 0, 512), &s)),
            EINVAL
        );
        // Trim/zero lengths may exceed the payload limit (no payload).
        assert!(validate(&req(CMD_TRIM, 0, 0, 1 << 20), &s).is_ok());
        // Fast zero on an export without cheap zeroing.
        assert_eq!(
            errno(validate(
                &req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 512),
                &s
            )),
            ENOTSUP
        );
        assert_eq!(
            validate(
                &req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE | CMD_FLAG_FUA, 0, 512),
                &s
            ),
            Ok(Op::WriteZeroes {
                offset: 0,
                len: 512,
                fua: true,
                may_trim: false
            })
        );
        // Flush ignores offset/length; FUA is accepted on every command.
        assert_eq!(
            validate(&req(CMD_FLUSH, CMD_FLAG_FUA, 7, 9), &s),
            Ok(Op::Flush)
        );

        let ro = session(true, true, true);
        for kind in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
            assert_eq!(errno(validate(&req(kind, 0, 0, 512), &ro)), EPERM);
        }
        assert!(validate(&req(CMD_READ, CMD_FLAG_DF, 0, 512), &ro).is_ok());
        assert_eq!(
            validate(&req(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 512), &ro),
            Ok(Op::BlockStatus {
                offset: 0,
                len: 512,
                req_one: true
            })
        );
        assert_eq!(
            errno(validate(&req(CMD_BLOCK_STATUS, 0, 0, 0), &ro)),
            EINVAL
        );
    }

    #[test]
    fn extents_are_clipped_merged_and_limited() {
        let raw = [(0, 0), (512, 0), (512, 0), (1024, 3), (1 << 40, 0xff)];
        assert_eq!(
            normalize_extents(&raw, 4096, false),
            vec![(1024, 0), (3072, 3)]
        );
        assert_eq!(normalize_extents(&raw, 4096, true), vec![(1024, 0)]);
        assert_eq!(normalize_extents(&raw, 256, false), vec![(256, 0)]);
        assert!(normalize_extents(&[(0, 0)], 512, false).is_empty());
        let many: Vec<(u64, u32)> = (0..(MAX_EXTENTS as u64 + 10))
            .map(|i| (1, (i % 2) as u32))
            .collect();
        assert_eq!(normalize_extents(&many, u32::MAX, false).len(), MAX_EXTENTS);
    }

    #[test]
    fn flush_habit_needs_pairs_in_a_row() {
        let write = Op::Write {
            offset: 0,
            len: 512,
            fua: false,
        };
        let mut habit = FlushHabit::default();
        for _ in 0..PAIRS_BEFORE_FLUSH_AHEAD {
            habit.note(&write);
            assert!(!habit.expects_flush());
            habit.note(&Op::Flush);
        }
        habit.note(&write);
        assert!(habit.expects_flush());
        // Reads in between change nothing; a second write breaks the habit.
        habit.note(&Op::Read {
            offset: 0,
            len: 512,
        });
        assert!(habit.expects_flush());
        habit.note(&write);
        assert!(!habit.expects_flush());
        habit.note(&Op::Flush);
        habit.note(&write);
        assert!(!habit.expects_flush());
        // A FLUSH with no write before it does not count as a pair either.
        let mut habit = FlushHabit::default();
        for _ in 0..PAIRS_BEFORE_FLUSH_AHEAD {
            habit.note(&Op::Flush);
        }
        habit.note(&write);
        assert!(!habit.expects_flush());
    }

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[]));
        assert!(is_zero(&[0u8; 100]));
        let mut v = vec![0u8; 100];
        v[99] = 1;
        assert!(!is_zero(&v));
        v[99] = 0;
        v[3] = 1;
        assert!(!is_zero(&v));
    }
}
