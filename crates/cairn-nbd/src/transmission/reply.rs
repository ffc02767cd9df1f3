//! Replies and the single writer that sends them: what a reply holds (`Reply`, its `Body` and
//! the `Permits` it keeps until it is on the wire), how an export call's result becomes one
//! (`reply_body`), and the write loop that drains the reply channel onto the socket, running a
//! commit ahead once its reply has left.
//!
//! Invariants: only this writer writes to the socket, so replies never interleave; a reply
//! releases its permits only once written (or dropped after the client died). Depends on
//! `exec` among the siblings.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, OwnedSemaphorePermit, mpsc};

use super::exec::{ExportResult, Outcome, run_in_place};
use crate::export::Export;
use crate::proto::*;

/// Reply payloads.
pub(super) enum Body {
    Ok,
    Error(u32, String),
    /// Read data and the offset it came from.
    Read(u64, Vec<u8>),
    BlockStatus(u32, Vec<(u32, u32)>),
}

/// Resources a request holds until its reply is on the wire.
pub(super) struct Permits {
    pub(super) _slot: OwnedSemaphorePermit,
    pub(super) _bytes: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

pub(super) struct Reply {
    pub(super) cookie: u64,
    pub(super) body: Body,
    pub(super) _permits: Permits,
    /// Commit ahead once this reply is on the wire (see `commit_ahead` below).
    pub(super) then_flush: Option<Arc<dyn Export>>,
}

/// A reply's body, the bytes it covered and whether it succeeded.
pub(super) fn reply_body(result: ExportResult, meta_id: u32) -> (Body, u64, bool) {
    match result {
        Ok((Outcome::Done, bytes)) => (Body::Ok, bytes, true),
        Ok((Outcome::Data(off, d), bytes)) => (Body::Read(off, d), bytes, true),
        Ok((Outcome::Extents(e), bytes)) => (Body::BlockStatus(meta_id, e), bytes, true),
        Err(e) => (Body::Error(e.errno(), e.to_string()), 0, false),
    }
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
pub(super) async fn write_loop<W: AsyncWrite + Unpin>(
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
            // The chunk's length field is 32 bits: requests are capped far below that
            // (`max_request_bytes`), and a truncated length would desynchronise the stream.
            assert!(
                data.len() <= (u32::MAX - 8) as usize,
                "read reply of {} bytes",
                data.len()
            );
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
            // The protocol requires at least one extent per reply.
            debug_assert!(!extents.is_empty(), "block status reply without extents");
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
pub(super) fn is_zero(data: &[u8]) -> bool {
    let mut chunks = data.chunks_exact(16);
    chunks.all(|c| u128::from_ne_bytes(c.try_into().unwrap_or([1; 16])) == 0)
        && chunks.remainder().iter().all(|&b| b == 0)
}
