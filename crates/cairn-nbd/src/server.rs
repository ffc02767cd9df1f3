//! The server object: accept loops, connection bookkeeping, shutdown, statistics.
//!
//! Shape: [`NbdServer`] is a cheap handle around shared state ([`Inner`]); `serve_tcp` and
//! `serve_unix` may run concurrently on the same server. Each accepted connection becomes one
//! Tokio task (handshake, then transmission) that owns a guard counting it in
//! [`NbdServer::connections`]; the guard is released however the task ends (return, error,
//! panic), so the count — and with it `wait_idle` — cannot leak.
//!
//! Lifecycle: `shutdown()` flips a watch flag. Accept loops return; connections in the handshake
//! close (an option already read is answered `NBD_REP_ERR_SHUTDOWN`); connections in transmission
//! stop reading, finish the requests they have read, send those replies and close.
//! `wait_idle()` resolves when the last connection is gone.
//!
//! Resource bounds: at most `max_connections` connections (further ones are accepted and closed
//! at once so the client sees EOF rather than a hang); a handshake must complete within
//! `handshake_timeout`; once a request has started arriving it must arrive whole within
//! `io_timeout`, and every reply must be written within it; buffered request/reply bytes are
//! bounded per connection and server-wide (see `transmission`).

use std::io;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, BufReader, BufWriter};
use tokio::net::{TcpListener, UnixListener};

use crate::config::ServerConfig;
use crate::export::ExportProvider;
use crate::handshake::{self, Ended, Negotiated, TlsPhase};
use crate::shared::{Inner, shutting_down};
use crate::stats::ExportStats;
use crate::transmission;
use crate::transport::{Duplex, Transport};

/// Server-wide counters (not per export): how connections ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerCounters {
    /// Connections accepted and served.
    pub accepted: u64,
    /// Connections closed at accept because `max_connections` were open.
    pub refused: u64,
    /// Handshakes that failed: protocol violation, timeout, I/O error, unknown
    /// `NBD_OPT_EXPORT_NAME` (client `NBD_OPT_ABORT` is not a failure).
    pub handshake_failures: u64,
    /// Transmission-phase connections closed for a protocol violation (bad magic, truncated or
    /// stalled request).
    pub protocol_errors: u64,
}

/// Counts one connection for as long as it lives.
struct ConnectionGuard(Arc<Inner>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.active.send_modify(|n| *n -= 1);
    }
}

/// An NBD server over an [`ExportProvider`]. Cloning gives another handle to the same server.
#[derive(Clone)]
pub struct NbdServer {
    inner: Arc<Inner>,
}

impl NbdServer {
    /// A server that is not yet listening; call `serve_tcp` / `serve_unix` (from a Tokio runtime).
    pub fn new(provider: Arc<dyn ExportProvider>, config: ServerConfig) -> NbdServer {
        NbdServer {
            inner: Arc::new(Inner::new(provider, config)),
        }
    }

    /// The configuration in force (after normalisation).
    pub fn config(&self) -> &ServerConfig {
        &self.inner.config
    }

    /// Accepts TCP connections until [`shutdown`](Self::shutdown). Accept errors (e.g. out of
    /// file descriptors) are retried after a short pause, never fatal.
    pub async fn serve_tcp(&self, listener: TcpListener) -> io::Result<()> {
        let mut shutdown = self.inner.shutdown_rx();
        loop {
            tokio::select! {
                biased;
                _ = shutting_down(&mut shutdown) => return Ok(()),
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        let _ = stream.set_nodelay(true);
                        self.spawn_connection(stream);
                    }
                    Err(e) => accept_pause(&e).await,
                },
            }
        }
    }

    /// Accepts Unix-socket connections until [`shutdown`](Self::shutdown). See
    /// [`bind_unix`](crate::bind_unix) for creating the listener.
    pub async fn serve_unix(&self, listener: UnixListener) -> io::Result<()> {
        let mut shutdown = self.inner.shutdown_rx();
        loop {
            tokio::select! {
                biased;
                _ = shutting_down(&mut shutdown) => return Ok(()),
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => self.spawn_connection(stream),
                    Err(e) => accept_pause(&e).await,
                },
            }
        }
    }

    /// Serves one already-connected byte stream (split into halves), e.g. a socketpair in tests
    /// or a connection accepted elsewhere. Subject to `max_connections` and shutdown like the
    /// accept loops.
    pub fn serve_stream<R, W>(&self, reader: R, writer: W)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        self.spawn_connection(Duplex::new(reader, writer));
    }

    fn spawn_connection<S: Transport>(&self, stream: S) {
        let inner = &self.inner;
        if *inner.shutdown.borrow() {
            return;
        }
        let mut admitted = false;
        inner.active.send_if_modified(|n| {
            if *n < inner.config.max_connections {
                *n += 1;
                admitted = true;
            }
            admitted
        });
        if !admitted {
            inner.counters.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        inner.counters.accepted.fetch_add(1, Ordering::Relaxed);
        let guard = ConnectionGuard(inner.clone());
        tokio::spawn(async move {
            let inner = guard.0.clone();
            run_connection(inner, stream).await;
            drop(guard);
        });
    }

    /// Stops accepting and winds every connection down (see the module documentation).
    pub fn shutdown(&self) {
        self.inner.shutdown.send_replace(true);
    }

    /// True once [`shutdown`](Self::shutdown) was called.
    pub fn is_shutting_down(&self) -> bool {
        *self.inner.shutdown.borrow()
    }

    /// Resolves when no connection is open (at once if none is).
    pub async fn wait_idle(&self) {
        let mut rx = self.inner.active.subscribe();
        // The sender lives in `inner`, which `self` keeps alive: `wait_for` cannot fail.
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Request/reply buffer bytes held right now over all connections (at most
    /// `max_total_inflight_bytes`).
    pub fn inflight_bytes(&self) -> usize {
        self.inner
            .config
            .max_total_inflight_bytes
            .saturating_sub(self.inner.global_bytes.available_permits())
    }

    /// Connections currently open (handshake or transmission).
    pub fn connections(&self) -> usize {
        *self.inner.active.borrow()
    }

    /// A snapshot of every export's statistics that has ever had a connection, by name.
    pub fn stats(&self) -> Vec<(String, ExportStats)> {
        let cells: Vec<_> = self
            .inner
            .stats
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        cells
            .into_iter()
            .map(|(k, v)| (k, v.lock().clone()))
            .collect()
    }

    /// Server-wide connection counters.
    pub fn counters(&self) -> ServerCounters {
        let c = &self.inner.counters;
        ServerCounters {
            accepted: c.accepted.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            handshake_failures: c.handshake_failures.load(Ordering::Relaxed),
            protocol_errors: c.protocol_errors.load(Ordering::Relaxed),
        }
    }
}

/// Buffer size of each direction of a connection.
const CONNECTION_BUFFER_BYTES: usize = 16 * 1024;

/// One connection: handshake (with STARTTLS, if the client asks and TLS is configured) under
/// one deadline, then transmission.
async fn run_connection<S: Transport>(inner: Arc<Inner>, stream: S) {
    let deadline = tokio::time::Instant::now() + inner.config.handshake_timeout;
    let (mut reader, mut writer) = buffered(stream);
    let Some(no_zeroes) =
        handshake_step(&inner, deadline, handshake::greet(&mut reader, &mut writer)).await
    else {
        return;
    };
    let tls = TlsPhase::before_starttls(inner.config.tls.as_ref());
    let haggled = handshake::haggle(&inner, &mut reader, &mut writer, no_zeroes, tls);
    match handshake_step(&inner, deadline, haggled).await {
        None => {}
        Some(Negotiated::Session(session)) => {
            transmission::serve(inner, session, reader, writer).await
        }
        Some(Negotiated::StartTls) => {
            let Some(stream) = start_tls::<S>(&inner, deadline, reader, writer).await else {
                return;
            };
            let (mut reader, mut writer) = buffered(stream);
            let haggled = handshake::haggle(
                &inner,
                &mut reader,
                &mut writer,
                no_zeroes,
                TlsPhase::Established,
            );
            // Inside TLS, STARTTLS is refused, so only a session can come back.
            if let Some(Negotiated::Session(session)) =
                handshake_step(&inner, deadline, haggled).await
            {
                transmission::serve(inner, session, reader, writer).await
            }
        }
    }
}

fn buffered<S: Transport>(stream: S) -> (BufReader<S::Read>, BufWriter<S::Write>) {
    let (read, write) = stream.into_halves();
    (
        BufReader::with_capacity(CONNECTION_BUFFER_BYTES, read),
        BufWriter::with_capacity(CONNECTION_BUFFER_BYTES, write),
    )
}

/// Runs one step of the handshake before `deadline`, giving up at once when the server shuts
/// down (a client that says nothing must not hold shutdown up). `None`: close the connection
/// (failures counted).
async fn handshake_step<T>(
    inner: &Inner,
    deadline: tokio::time::Instant,
    step: impl std::future::Future<Output = io::Result<Result<T, Ended>>>,
) -> Option<T> {
    let mut shutdown = inner.shutdown_rx();
    let outcome = tokio::select! {
        result = tokio::time::timeout_at(deadline, step) => result,
        _ = shutting_down(&mut shutdown) => return None,
    };
    match outcome {
        Ok(Ok(Ok(value))) => Some(value),
        Ok(Ok(Err(Ended::Aborted | Ended::Shutdown))) => None,
        Ok(Ok(Err(Ended::Violation))) | Ok(Err(_)) | Err(_) => {
            inner.handshake_failed();
            None
        }
    }
}

/// The TLS handshake after `NBD_REP_ACK` to STARTTLS, on the joined halves. A client that
/// sent bytes before it (they would be read as plain text) is closed.
async fn start_tls<S: Transport>(
    inner: &Inner,
    deadline: tokio::time::Instant,
    reader: BufReader<S::Read>,
    writer: BufWriter<S::Write>,
) -> Option<tokio_rustls::server::TlsStream<S>> {
    let settings = inner.config.tls.as_ref()?;
    if !reader.buffer().is_empty() || !writer.buffer().is_empty() {
        inner.handshake_failed();
        return None;
    }
    let Ok(stream) = S::from_halves(reader.into_inner(), writer.into_inner()) else {
        inner.handshake_failed();
        return None;
    };
    let accept = async { Ok(Ok(settings.acceptor.accept(stream).await?)) };
    handshake_step(inner, deadline, accept).await
}

/// After a failed accept: transient per-connection errors retry at once; resource exhaustion
/// (EMFILE, ENFILE, ENOBUFS, ENOMEM) waits a little so the loop does not spin.
async fn accept_pause(e: &io::Error) {
    match e.kind() {
        io::ErrorKind::ConnectionAborted
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::Interrupted
        | io::ErrorKind::WouldBlock => {}
        _ => tokio::time::sleep(Duration::from_millis(50)).await,
    }
}
