//! The reading side of one connection: it decodes and validates requests in arrival order,
//! answers some itself (reads served from memory, writes the export takes at once, and, for a
//! client that waits for each reply, FLUSH and FUA requests in place) and hands the rest to
//! handler tasks. It also watches the client's FLUSH habit (flush ahead) and spins for the
//! next request of a serial client.
//!
//! Invariants: every request holds a slot of the connection's semaphore, and reads/writes
//! their bytes of the connection's and the server's budgets, before its buffer is allocated; a
//! refused WRITE's payload is discarded so the stream stays in sync. Depends on `request`,
//! `exec`, `reply` and `handler` among the siblings.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::task::Poll;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};

use super::exec::{ExportResult, Outcome, execute, read_now, run_in_place, write_now};
use super::handler::{Handler, WriteGuard, WriteTracker};
use super::reply::{Body, Permits, Reply, reply_body};
use super::request::{Op, Refusal, validate};
use crate::export::Export;
use crate::handshake::{Session, discard};
use crate::proto::*;
use crate::shared::Inner;
use crate::stats::{ExportStats, OpKind};

/// Client FLUSHes following its writes one for one (fio's `fsync=1`, a database's write then
/// fdatasync) this many times in a row make the reader commit ahead of the next FLUSH.
pub(super) const PAIRS_BEFORE_FLUSH_AHEAD: u32 = 4;

/// Requests in a row that found nothing else of their connection in flight, after which the
/// client is taken for one that waits for each reply (QD1) and the reader may block on its
/// requests: no other request of it is coming meanwhile. A client that pipelines keeps
/// breaking the streak, and its FLUSHes go to handlers, never holding up its other requests.
const SERIAL_STREAK: u32 = 8;

/// What the reader has seen of the client's FLUSH habit: whether it sends one after each write.
#[derive(Default)]
pub(super) struct FlushHabit {
    writes_since_flush: u32,
    /// FLUSHes in a row that each followed exactly one write (capped).
    paired_flushes: u32,
}

impl FlushHabit {
    pub(super) fn note(&mut self, op: &Op) {
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
    pub(super) fn expects_flush(&self) -> bool {
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

pub(super) async fn read_loop<R>(
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
        _ = crate::shared::shutting_down(shutdown) => false,
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
