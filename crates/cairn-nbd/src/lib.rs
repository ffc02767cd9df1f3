//! cairn-nbd: serves block exports over the Network Block Device protocol.
//!
//! **What.** A front end that makes anything implementing [`Export`] (a byte-addressed disk) and
//! [`ExportProvider`] (names → exports) reachable by stock NBD clients — qemu, libnbd's tools,
//! nbd-client, fio — over TCP or a Unix socket. It knows nothing of pools; the composition root
//! (the `cairn serve` command) provides volumes as exports named `pool/volume`.
//!
//! **Shape.** [`NbdServer`] owns the accept loops; each connection is one Tokio task:
//! `handshake` (fixed newstyle option haggling) then `transmission` (a reader that validates
//! and dispatches requests concurrently, handler tasks that run the blocking export calls on
//! Tokio's blocking pool, or in place for FUA and FLUSH, and a single writer that sends replies as they complete). `proto`
//! holds the wire constants, `stats` the per-export counters and latency histograms, `config`
//! the server's limits and `shared` the state every connection reads (below `server`,
//! `handshake` and `transmission`, so those depend on one another one way only).
//!
//! **Protocol.** Fixed newstyle with `NO_ZEROES`; options EXPORT_NAME, GO, INFO (EXPORT, NAME,
//! DESCRIPTION, BLOCK_SIZE), LIST, ABORT, STRUCTURED_REPLY, LIST/SET_META_CONTEXT
//! (`base:allocation`), STARTTLS when [`ServerConfig::tls`] is set (`tls`: optional or required,
//! with optional client certificates); everything else `NBD_REP_ERR_UNSUP`. Commands READ, WRITE, FLUSH, TRIM,
//! WRITE_ZEROES (NO_HOLE, FAST_ZERO), CACHE, BLOCK_STATUS (REQ_ONE), DISC; `CAN_MULTI_CONN`.
//! Block size constraints: minimum 512, preferred = the export's (volblocksize), maximum =
//! [`ServerConfig::max_request_bytes`] (32 MiB).
//!
//! **Invariants.** Nothing a client sends can panic the server, grow memory without bound or
//! outlive its connection: every buffer is bounded by configuration, every partial transfer by
//! a timeout, and every protocol violation closes only the offending connection. A FLUSH reply
//! means every write received on that connection before the flush, and every write answered on
//! any connection, has been made durable by the export's export-wide `flush`.
//!
//! **Lifecycle.** `serve_*` until [`NbdServer::shutdown`]; then each connection answers what it
//! has read and closes; [`NbdServer::wait_idle`] resolves when all are gone. Crash behaviour is
//! the export's: the server holds no state that must survive it.

mod config;
mod export;
mod handshake;
mod listen;
pub mod proto;
mod server;
mod shared;
mod stats;
mod tls;
mod transmission;
mod transport;

pub use config::ServerConfig;
pub use export::{Export, ExportError, ExportProvider, NBD_STATE_HOLE, NBD_STATE_ZERO};
pub use listen::{bind_unix, bind_unix_std};
pub use server::{NbdServer, ServerCounters};
pub use stats::{ExportStats, OpKind, OpStats};
pub use tls::{TlsError, TlsSettings};
