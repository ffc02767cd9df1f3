//! The NFS front end: NFSv3 (RFC 1813) with MOUNT v3 and a PORTMAP GETPORT responder, all
//! on one TCP port, serving filesystem datasets (`cairn_fs::Filesystem`, the layer the FUSE
//! mount sits on, never through FUSE) whose `sharenfs` property is on, as `/POOL/DATASET`.
//! `cairn serve --nfs ADDR:PORT` starts it (loopback unless the user names another address).
//!
//! What it guarantees:
//! - **Handles survive restarts** and never reach another file: pool guid, dataset id,
//!   object number and the inode's generation (its creation txg) (`handle.rs`).
//! - **Stability never lies** (but under `sync=disabled`, as ZFS): UNSTABLE writes join the
//!   open txg and are answered UNSTABLE with the verifier; DATA_SYNC and FILE_SYNC writes,
//!   and every write of a `sync=always` dataset, take the O_DSYNC path before the reply;
//!   COMMIT takes the fsync path, which commits that file's changes and the namespace
//!   changes before them, not other files' writes (`write.rs`). The verifier changes at every
//!   start and after any failure that may have lost unstable data in the file's pool (an
//!   intent-log write failure on any path, a failed txg sync, a suspension), never otherwise
//!   (`context.rs`).
//! - **Retransmissions** of non-idempotent calls get the first reply (`drc.rs`).
//! - **Access**: AUTH_SYS only (anything else but NULL is denied AUTH_ERROR TOOWEAK), root
//!   squashed to nobody (65534) unless the export's `sharenfs` says `no_root_squash`, the
//!   export's access lists (`rw=NET`, `ro=NET`, plain `ro`) applied to the connection's peer
//!   address at MOUNT and at every call (ACCES, ROFS; a share without lists is served to
//!   loopback clients only: `access.rs`), mode bits checked by the server (`convert.rs`).
//! - **Hostile input**: bounded records, typed decoding (cairn-nfs), errors answered or the
//!   connection closed; at most `CONNECTIONS_MAX` connections at once.
//!
//! - **Snapshots** are browsable read-only under `.cairn/snapshot/<name>/` of every shared
//!   filesystem, with handles that survive restarts and turn STALE when the snapshot is
//!   destroyed, never reading its freed blocks; each snapshot has its own `fsid`
//!   (`snapdir.rs`).
//! - **Statistics**: calls by procedure with latency, bytes, WRITE stability, what COMMITs
//!   carried, refusals and clients, kept in `crate::nfs_stats` (`cairn stat nfs`, `/metrics`).
//!
//! - **NFSv4.1**, first step (docs/nfs-v4.md): version 4 on the same port, sessions with
//!   exactly-once slots, leases, a pseudo root and open state (`sessions.rs`, `v4/`), every
//!   file operation run by the v3 procedures below.
//!
//! Not yet: NLM locking (clients mount v3 with `nolock`), v4.1's other namespace operations,
//! locks, deny modes, grace period and delegations, and coherence with a FUSE mount of the same
//! dataset: the kernel keeps names and attributes for up to `ATTR_TTL` (a minute) and is not
//! told of changes made over NFS.
//!
//! Threads: one accepts, one per connection reads its records and hands them to
//! `CALLS_IN_FLIGHT_MAX` workers of that connection (calls block on the pool as FUSE's
//! do). Files, bottom up: `convert.rs` (types, errors, permissions), `drc.rs`, `memory.rs`
//! (the memory limit of calls), `context.rs` (what connections share, the verifier),
//! `handle.rs` (handles and exports), `access.rs`
//! (which clients may do what in an export), `snapdir.rs` (`.cairn` and the snapshots),
//! `procs.rs`
//! (procedures that only read), `changes.rs` (namespace and attributes), `write.rs` (WRITE,
//! COMMIT), `sessions.rs` (v4.1's clients, sessions, opens; kept in the context), `v4/`
//! (COMPOUND on top of the v3 procedures), `connection.rs` (RPC dispatch, auth, MOUNT,
//! PORTMAP), then this file.

mod access;
mod changes;
mod connection;
mod context;
mod convert;
mod drc;
mod handle;
mod memory;
mod open_snapshots;
mod procs;
mod sessions;
mod snapdir;
mod v4;
mod write;

pub use access::unlisted_shares;
pub use connection::CALLS_IN_FLIGHT_MAX;
pub use context::NfsContext;
pub use convert::NOBODY_ID;
pub use handle::{HANDLE_BYTES, HandleNode, HandleParts};
pub use memory::RECORD_BYTES_MAX;

use crate::pools::ServedPools;
use parking_lot::Mutex;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// Most client connections served at once; more are closed at once.
pub const CONNECTIONS_MAX: usize = 256;

/// Why the NFS server could not start.
#[derive(Debug, thiserror::Error)]
pub enum NfsError {
    #[error("cannot listen for NFS on {address}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the NFS server's thread")]
    Thread(#[source] std::io::Error),
}

type Connections = Arc<Mutex<Vec<(TcpStream, JoinHandle<()>)>>>;

/// A running NFS server; `stop` (or dropping it) closes the listener and every connection.
pub struct NfsServer {
    address: SocketAddr,
    context: Arc<NfsContext>,
    stopping: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    connections: Connections,
}

impl NfsServer {
    /// Listens on `address` and serves the shared filesystems of `served`'s pools; the calls
    /// of all its connections hold at most `memory_max_bytes` at once (`memory.rs`).
    pub fn start(
        served: Arc<ServedPools>,
        address: &str,
        memory_max_bytes: u64,
    ) -> Result<NfsServer, NfsError> {
        let listen_error = |source| NfsError::Listen {
            address: address.to_string(),
            source,
        };
        let listener = TcpListener::bind(address).map_err(listen_error)?;
        let local = listener.local_addr().map_err(listen_error)?;
        // The registry keeps the statistics for `stat nfs` and the analytics.
        let stats = served.nfs_stats.get_or_init(Default::default).clone();
        let context = Arc::new(NfsContext::new(
            served,
            local.port(),
            stats,
            memory_max_bytes,
        ));
        let stopping = Arc::new(AtomicBool::new(false));
        let connections: Connections = Arc::default();
        let acceptor = std::thread::Builder::new()
            .name("cairn-nfs".into())
            .spawn({
                let (context, stopping, connections) =
                    (context.clone(), stopping.clone(), connections.clone());
                move || accept_loop(listener, context, stopping, connections)
            })
            .map_err(NfsError::Thread)?;
        Ok(NfsServer {
            address: local,
            context,
            stopping,
            acceptor: Some(acceptor),
            connections,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    pub fn context(&self) -> &Arc<NfsContext> {
        &self.context
    }

    /// Stops accepting, closes every connection and waits for their calls to finish.
    pub fn stop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Readers waiting for memory give up.
        self.context.stopping.store(true, Ordering::SeqCst);
        self.context.memory.wake_all();
        // Wakes the acceptor blocked in accept().
        let _ = TcpStream::connect(self.address);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let connections = std::mem::take(&mut *self.connections.lock());
        for (stream, _) in &connections {
            let _ = stream.shutdown(std::net::Shutdown::Both);
        }
        for (_, thread) in connections {
            let _ = thread.join();
        }
    }
}

impl Drop for NfsServer {
    fn drop(&mut self) {
        if self.acceptor.is_some() {
            self.stop();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    context: Arc<NfsContext>,
    stopping: Arc<AtomicBool>,
    connections: Connections,
) {
    for stream in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else {
            continue;
        };
        let mut live = connections.lock();
        live.retain(|(_, thread)| !thread.is_finished());
        if live.len() >= CONNECTIONS_MAX {
            context.stats.connection_refused();
            continue;
        }
        let Ok(kept) = stream.try_clone() else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let context = context.clone();
        let spawned = std::thread::Builder::new()
            .name("cairn-nfs-conn".into())
            .spawn(move || connection::serve_connection(&context, stream));
        if let Ok(thread) = spawned {
            live.push((kept, thread));
        }
    }
}
