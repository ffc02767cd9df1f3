//! Handler tasks: a request the reader does not answer itself runs in a task of its own,
//! whose export call goes to the blocking pool (or runs in place when the client waits for
//! stable media), and whose reply goes into the reply channel.
//!
//! Invariant (flush ordering): every write-like request a handler runs sits in the
//! connection's in-flight set (`WriteTracker`) until its export call returned, held there by a
//! `WriteGuard`; a FLUSH handler waits until no write received before it is left. Depends on
//! `request`, `exec` and `reply` among the siblings.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};

use super::exec::{execute, run_blocking, run_in_place};
use super::reply::{Permits, Reply, reply_body};
use super::request::Op;
use crate::handshake::Session;
use crate::proto::META_BASE_ALLOCATION_ID;
use crate::stats::ExportStats;

pub(super) struct WriteTracker {
    pub(super) inflight: watch::Sender<BTreeSet<u64>>,
}

/// Removes a write from the in-flight set when its handler finishes (or panics, or is dropped).
pub(super) struct WriteGuard {
    pub(super) tracker: Arc<WriteTracker>,
    pub(super) seq: u64,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        self.tracker.inflight.send_modify(|s| {
            s.remove(&self.seq);
        });
    }
}

pub(super) struct Handler {
    pub(super) session: Arc<Session>,
    pub(super) stats: Arc<Mutex<ExportStats>>,
    pub(super) tracker: Arc<WriteTracker>,
    pub(super) tx: mpsc::UnboundedSender<Reply>,
}

impl Handler {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn run(
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
