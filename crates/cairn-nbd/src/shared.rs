//! State shared by the server handle and every connection task ([`Inner`]), and the shutdown
//! signal they all watch.
//!
//! It sits below `server`, `handshake` and `transmission`, which all read it, so that none of
//! them has to reach up into another for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::{Semaphore, watch};

use crate::config::ServerConfig;
use crate::export::ExportProvider;
use crate::stats::ExportStats;

/// Server-wide connection counters, as they are updated (see `ServerCounters`).
#[derive(Default)]
pub(crate) struct AtomicCounters {
    pub accepted: AtomicU64,
    pub refused: AtomicU64,
    pub handshake_failures: AtomicU64,
    pub protocol_errors: AtomicU64,
}

/// State shared by the server handle and every connection task.
pub(crate) struct Inner {
    pub provider: Arc<dyn ExportProvider>,
    pub config: ServerConfig,
    /// Set once by `NbdServer::shutdown`.
    pub shutdown: watch::Sender<bool>,
    /// Connections open (handshake or transmission).
    pub active: watch::Sender<usize>,
    /// Every export's statistics cell that has ever had a connection, by name.
    pub stats: Mutex<BTreeMap<String, Arc<Mutex<ExportStats>>>>,
    pub global_bytes: Arc<Semaphore>,
    pub counters: AtomicCounters,
}

impl Inner {
    /// The state of a server that has served nothing yet, under `config` normalised.
    pub(crate) fn new(provider: Arc<dyn ExportProvider>, config: ServerConfig) -> Inner {
        let config = config.normalized();
        let global_bytes = Arc::new(Semaphore::new(config.max_total_inflight_bytes));
        Inner {
            provider,
            config,
            shutdown: watch::Sender::new(false),
            active: watch::Sender::new(0),
            stats: Mutex::new(BTreeMap::new()),
            global_bytes,
            counters: AtomicCounters::default(),
        }
    }

    pub(crate) fn shutdown_rx(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Counts a connection closed during its handshake (violation, timeout, I/O error, TLS).
    pub(crate) fn handshake_failed(&self) {
        self.counters
            .handshake_failures
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a transmission-phase connection closed for a protocol violation.
    pub(crate) fn protocol_error(&self) {
        self.counters
            .protocol_errors
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The statistics cell of an export, created on first use.
    pub(crate) fn stats_for(&self, name: &str) -> Arc<Mutex<ExportStats>> {
        self.stats
            .lock()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }
}

/// Resolves once the shutdown flag is set. (A helper so that no `watch::Ref` — which holds a
/// lock guard — ends up inside a `select!` output that must be `Send`.)
pub(crate) async fn shutting_down(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}
