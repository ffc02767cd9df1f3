//! The server's limits ([`ServerConfig`]), read by every part of a connection.

use std::time::Duration;

use tokio::sync::Semaphore;

use crate::tls::TlsSettings;

/// Server limits. `Default` gives the values the protocol recommends for interoperability.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Largest READ/WRITE payload, advertised as the maximum block size (default 32 MiB).
    /// Rounded down to a multiple of 512, at least 512.
    pub max_request_bytes: u32,
    /// Connections served at once; more are closed at accept (default 1024).
    pub max_connections: usize,
    /// Time allowed from accept to the end of option haggling (default 10 s).
    pub handshake_timeout: Duration,
    /// Time allowed for a request to arrive once its first byte has, and for one reply to be
    /// written (default 60 s). Idle connections between requests have no deadline.
    pub io_timeout: Duration,
    /// Requests in flight per connection (default 64).
    pub max_inflight_requests: usize,
    /// Request/reply buffer bytes in flight per connection (default 64 MiB; raised to
    /// `max_request_bytes` if smaller).
    pub max_inflight_bytes: usize,
    /// Request/reply buffer bytes in flight over all connections (default 1 GiB; raised to
    /// `max_request_bytes` if smaller).
    pub max_total_inflight_bytes: usize,
    /// TLS offered (or required) through `NBD_OPT_STARTTLS`; `None`: plain only.
    pub tls: Option<TlsSettings>,
    /// How long the reader of a client that waits for each reply, and sends a FLUSH after each
    /// write, keeps its thread awake looking for the next request after answering a FLUSH
    /// (default 100 µs; zero: never). Trades that much CPU per request for the wake-up of a
    /// sleeping thread, which on a virtual machine costs tens of microseconds per request.
    pub serial_spin: Duration,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            max_request_bytes: 32 << 20,
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(60),
            max_inflight_requests: 64,
            max_inflight_bytes: 64 << 20,
            max_total_inflight_bytes: 1 << 30,
            tls: None,
            serial_spin: Duration::from_micros(100),
        }
    }
}

impl ServerConfig {
    /// Limits raised or lowered to what the server can honour.
    pub(crate) fn normalized(mut self) -> ServerConfig {
        self.max_request_bytes = (self.max_request_bytes / 512 * 512).max(512);
        let req = self.max_request_bytes as usize;
        self.max_inflight_requests = self.max_inflight_requests.max(1);
        self.max_inflight_bytes = self.max_inflight_bytes.max(req);
        self.max_total_inflight_bytes = self.max_total_inflight_bytes.max(req);
        // Tokio semaphores hold at most `usize::MAX >> 3` permits.
        self.max_inflight_bytes = self.max_inflight_bytes.min(Semaphore::MAX_PERMITS);
        self.max_total_inflight_bytes = self.max_total_inflight_bytes.min(Semaphore::MAX_PERMITS);
        self
    }
}
