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
//!
//! Files: `request` (the validated operation and refusals), `exec` (export calls), `reply`
//! (replies and the single writer), `handler` (handler tasks and the in-flight write set),
//! `reader` (the reading side), and this file, which joins reader and writer; each depends
//! only on those listed before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use tokio::io::{AsyncBufRead, AsyncRead, AsyncWrite};
use tokio::sync::{Notify, mpsc};

use crate::handshake::Session;
use crate::shared::Inner;

mod exec;
mod handler;
mod reader;
mod reply;
mod request;
#[cfg(test)]
mod tests;

use reader::read_loop;
use reply::{Reply, write_loop};

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
