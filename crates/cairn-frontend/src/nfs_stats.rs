//! The NFS server's statistics (`cairn stat nfs`, `/metrics`' `cairn_nfs_*`, the analytics
//! page's NFS panel): calls by procedure (NFSv3 and MOUNT) with their latency histograms,
//! bytes read and written, WRITEs by the stability asked and answered, COMMITs and what each
//! carried, refusals, connections, and the same per client address.
//!
//! Kept beside `nfs/` rather than in it: the served-pools registry (`pools.rs`) holds them for
//! the control socket and the analytics, and `nfs/` uses the registry, so a module of their
//! own keeps the imports between the crate's modules one way. `nfs/connection.rs` tells them
//! what each record was (`Seen`) and how long answering it took; `nfs/` also reports stale
//! handles, verifier changes and connections.
//!
//! What a COMMIT carried: the writes answered UNSTABLE for that file (by file handle) since its
//! previous successful COMMIT, and their bytes. That is what the client asked to have made
//! durable, an upper bound of what the commit itself wrote (a txg sync in between may have
//! made some of it durable already; what the intent log wrote for one COMMIT is not reported
//! by the log). Files with UNSTABLE writes not yet committed are bounded (`PENDING_FILES_MAX`):
//! beyond it the one written longest ago is forgotten (`pending_dropped`), and its next COMMIT
//! carries only what came after.
//!
//! Clients: at most `CLIENTS_MAX` addresses are kept; a new one beyond that drops the least
//! recently active (one with no connection open, if there is one), counted in
//! `clients_dropped`: the server's totals still count every call.
//!
//! Cost: one short mutex per call: a few counters and two histogram records (the procedure's
//! and the client's latency), plus a map update for UNSTABLE writes and COMMITs.

use cairn_fs::ops::FsOpKind;
use cairn_metrics::OpStats;
use cairn_nfs::mount::MountProc;
use cairn_nfs::nfs3::{Nfs3Call, Nfs3Proc, Nfs3Reply, Outcome, StableHow};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// Most client addresses kept; beyond it the least recently active is dropped.
pub const CLIENTS_MAX: usize = 64;
/// Most files whose UNSTABLE writes since their last COMMIT are tracked.
pub const PENDING_FILES_MAX: usize = 16_384;
/// Largest bytes-per-COMMIT the histogram tracks exactly (larger ones are recorded as this).
const CARRIED_BYTES_MAX: u64 = 1 << 40;

/// The stability levels in protocol order (the index is the value on the wire).
pub const STABILITIES: [&str; 3] = ["unstable", "data_sync", "file_sync"];

/// Every NFSv3 procedure with its name in the statistics, in protocol order.
pub const NFS_PROCEDURES: [(Nfs3Proc, &str); 22] = [
    (Nfs3Proc::Null, "null"),
    (Nfs3Proc::Getattr, "getattr"),
    (Nfs3Proc::Setattr, "setattr"),
    (Nfs3Proc::Lookup, "lookup"),
    (Nfs3Proc::Access, "access"),
    (Nfs3Proc::Readlink, "readlink"),
    (Nfs3Proc::Read, "read"),
    (Nfs3Proc::Write, "write"),
    (Nfs3Proc::Create, "create"),
    (Nfs3Proc::Mkdir, "mkdir"),
    (Nfs3Proc::Symlink, "symlink"),
    (Nfs3Proc::Mknod, "mknod"),
    (Nfs3Proc::Remove, "remove"),
    (Nfs3Proc::Rmdir, "rmdir"),
    (Nfs3Proc::Rename, "rename"),
    (Nfs3Proc::Link, "link"),
    (Nfs3Proc::Readdir, "readdir"),
    (Nfs3Proc::Readdirplus, "readdirplus"),
    (Nfs3Proc::Fsstat, "fsstat"),
    (Nfs3Proc::Fsinfo, "fsinfo"),
    (Nfs3Proc::Pathconf, "pathconf"),
    (Nfs3Proc::Commit, "commit"),
];

/// Every MOUNT v3 procedure with its name in the statistics, in protocol order.
pub const MOUNT_PROCEDURES: [(MountProc, &str); 6] = [
    (MountProc::Null, "null"),
    (MountProc::Mnt, "mnt"),
    (MountProc::Dump, "dump"),
    (MountProc::Umnt, "umnt"),
    (MountProc::Umntall, "umntall"),
    (MountProc::Export, "export"),
];

/// What answering one record was, as the statistics count it.
#[derive(Debug, Default)]
pub enum Seen {
    /// Nothing to count (not yet known).
    #[default]
    Nothing,
    /// A record whose RPC header or arguments did not decode.
    Garbage,
    /// A program, version or procedure this server does not serve.
    Unsupported,
    /// Refused for its credential (anything but AUTH_SYS where AUTH_SYS is needed).
    AuthRefused,
    Portmap,
    Mount {
        procedure: MountProc,
        ok: bool,
    },
    Nfs(NfsCallSeen),
    /// A retransmission answered from the duplicate-request cache.
    Replayed(Nfs3Proc),
    /// An NFSv4 NULL or COMPOUND answered (counted among its client's calls; figures per
    /// v4 operation are not kept yet).
    Nfs4 {
        ok: bool,
    },
}

/// An NFSv3 call that was carried out.
#[derive(Debug)]
pub struct NfsCallSeen {
    procedure: Nfs3Proc,
    ok: bool,
    read_bytes: u64,
    write: Option<WriteSeen>,
    /// The handle of a file a successful COMMIT made durable.
    committed: Option<Vec<u8>>,
}

/// A successful WRITE: stability asked and answered, bytes, and the file's handle when it
/// was answered UNSTABLE (a later COMMIT carries it).
#[derive(Debug)]
struct WriteSeen {
    asked: StableHow,
    answered: StableHow,
    bytes: u64,
    unstable_file: Option<Vec<u8>>,
}

fn is_ok<T, F>(outcome: &Outcome<T, F>) -> bool {
    matches!(outcome, Outcome::Ok(_))
}

/// Whether a reply says NFS3_OK.
fn reply_ok(reply: &Nfs3Reply) -> bool {
    match reply {
        Nfs3Reply::Null => true,
        Nfs3Reply::Getattr(o) => is_ok(o),
        Nfs3Reply::Setattr(o) | Nfs3Reply::Remove(o) | Nfs3Reply::Rmdir(o) => is_ok(o),
        Nfs3Reply::Lookup(o) => is_ok(o),
        Nfs3Reply::Access(o) => is_ok(o),
        Nfs3Reply::Readlink(o) => is_ok(o),
        Nfs3Reply::Read(o) => is_ok(o),
        Nfs3Reply::Write(o) => is_ok(o),
        Nfs3Reply::Create(o)
        | Nfs3Reply::Mkdir(o)
        | Nfs3Reply::Symlink(o)
        | Nfs3Reply::Mknod(o) => is_ok(o),
        Nfs3Reply::Rename(o) => is_ok(o),
        Nfs3Reply::Link(o) => is_ok(o),
        Nfs3Reply::Readdir(o) => is_ok(o),
        Nfs3Reply::Readdirplus(o) => is_ok(o),
        Nfs3Reply::Fsstat(o) => is_ok(o),
        Nfs3Reply::Fsinfo(o) => is_ok(o),
        Nfs3Reply::Pathconf(o) => is_ok(o),
        Nfs3Reply::Commit(o) => is_ok(o),
    }
}

/// How a filesystem counts an NFSv3 call among its calls (`Filesystem::record_op`: what
/// `pool iostat` and `stat fs` show per dataset, whichever front end answered): the kind,
/// the bytes it moved and whether it succeeded.
pub fn fs_op_of(call: &Nfs3Call, reply: &Nfs3Reply) -> (FsOpKind, u64, bool) {
    let kind = match call.procedure() {
        Nfs3Proc::Getattr => FsOpKind::Getattr,
        Nfs3Proc::Setattr => FsOpKind::Setattr,
        Nfs3Proc::Lookup => FsOpKind::Lookup,
        Nfs3Proc::Read => FsOpKind::Read,
        Nfs3Proc::Write => FsOpKind::Write,
        Nfs3Proc::Create
        | Nfs3Proc::Mkdir
        | Nfs3Proc::Symlink
        | Nfs3Proc::Mknod
        | Nfs3Proc::Link => FsOpKind::Create,
        Nfs3Proc::Remove | Nfs3Proc::Rmdir => FsOpKind::Remove,
        Nfs3Proc::Rename => FsOpKind::Rename,
        Nfs3Proc::Readdir | Nfs3Proc::Readdirplus => FsOpKind::Readdir,
        Nfs3Proc::Commit => FsOpKind::Fsync,
        Nfs3Proc::Null
        | Nfs3Proc::Access
        | Nfs3Proc::Readlink
        | Nfs3Proc::Fsstat
        | Nfs3Proc::Fsinfo
        | Nfs3Proc::Pathconf => FsOpKind::Other,
    };
    let bytes = match reply {
        Nfs3Reply::Read(Outcome::Ok(ok)) => ok.data.len() as u64,
        Nfs3Reply::Write(Outcome::Ok(ok)) => u64::from(ok.count_bytes),
        _ => 0,
    };
    (kind, bytes, reply_ok(reply))
}

impl Seen {
    /// An NFSv3 call and the reply it got.
    pub fn nfs(call: &Nfs3Call, reply: &Nfs3Reply) -> Seen {
        let mut seen = NfsCallSeen {
            procedure: call.procedure(),
            ok: reply_ok(reply),
            read_bytes: 0,
            write: None,
            committed: None,
        };
        match (call, reply) {
            (_, Nfs3Reply::Read(Outcome::Ok(ok))) => seen.read_bytes = ok.data.len() as u64,
            (Nfs3Call::Write(args), Nfs3Reply::Write(Outcome::Ok(ok))) => {
                seen.write = Some(WriteSeen {
                    asked: args.stable,
                    answered: ok.committed,
                    bytes: u64::from(ok.count_bytes),
                    unstable_file: (ok.committed == StableHow::Unstable)
                        .then(|| args.file.as_bytes().to_vec()),
                });
            }
            (Nfs3Call::Commit(args), Nfs3Reply::Commit(Outcome::Ok(_))) => {
                seen.committed = Some(args.file.as_bytes().to_vec());
            }
            _ => {}
        }
        Seen::Nfs(seen)
    }
}

/// Writes of one (asked, answered) stability pair.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteTally {
    pub count: u64,
    pub bytes: u64,
}

/// UNSTABLE writes of one file since its last COMMIT.
#[derive(Debug, Clone, Copy)]
struct Pending {
    writes: u64,
    bytes: u64,
    last_tick: u64,
}

/// What COMMITs carried.
#[derive(Debug, Clone)]
pub struct CommitTally {
    /// UNSTABLE writes acknowledged since each file's previous COMMIT, summed over COMMITs.
    pub carried_writes: u64,
    pub carried_bytes: u64,
    /// Successful COMMITs that carried no UNSTABLE write this server knew of.
    pub empty: u64,
    /// Bytes carried per successful COMMIT.
    pub carried_bytes_histogram: Histogram<u64>,
}

impl Default for CommitTally {
    fn default() -> CommitTally {
        CommitTally {
            carried_writes: 0,
            carried_bytes: 0,
            empty: 0,
            carried_bytes_histogram: Histogram::new_with_bounds(1, CARRIED_BYTES_MAX, 2)
                .expect("static histogram bounds are valid"),
        }
    }
}

/// One client address's traffic.
#[derive(Debug, Clone, Default)]
pub struct ClientTally {
    /// Every call carried out (all procedures), with its latency.
    pub calls: OpStats,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub commits: u64,
    /// Records refused: garbage, unsupported, or a credential too weak.
    pub refused: u64,
    pub connections_open: u64,
    pub connections_total: u64,
    /// Milliseconds since the Unix epoch of its last call or connection.
    pub last_seen_ms: u64,
    last_tick: u64,
}

/// Counters of the server as a whole.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerTally {
    pub portmap_calls: u64,
    pub stale_handles: u64,
    pub duplicate_replies: u64,
    pub auth_refusals: u64,
    pub garbage_calls: u64,
    pub unsupported_calls: u64,
    pub verifier_changes: u64,
    pub connections_open: u64,
    pub connections_total: u64,
    pub connections_refused: u64,
    pub clients_dropped: u64,
    pub pending_dropped: u64,
    /// The NFS memory limit (`nfs::memory`): its size, what calls hold now, the most they
    /// held at once, and how many calls waited for room.
    pub memory_max_bytes: u64,
    pub memory_charged_bytes: u64,
    pub memory_peak_bytes: u64,
    pub memory_waits: u64,
}

/// A copy of every counter at one moment (histograms included).
#[derive(Debug, Clone)]
pub struct NfsSnapshot {
    /// By `NFS_PROCEDURES`' order.
    pub nfs: Vec<OpStats>,
    /// By `MOUNT_PROCEDURES`' order.
    pub mount: Vec<OpStats>,
    /// `[asked][answered]`, indexes as in `STABILITIES`.
    pub writes: [[WriteTally; 3]; 3],
    pub commits: CommitTally,
    pub server: ServerTally,
    /// Files with UNSTABLE writes not yet committed.
    pub pending_files: u64,
    /// By address.
    pub clients: Vec<(IpAddr, ClientTally)>,
}

struct Inner {
    snapshot: NfsSnapshot,
    clients: HashMap<IpAddr, ClientTally>,
    pending: HashMap<Vec<u8>, Pending>,
    /// A logical clock: one tick per event, for "least recent".
    tick: u64,
}

/// The live statistics of one server (shared by its connections).
pub struct NfsStats {
    inner: Mutex<Inner>,
}

impl Default for NfsStats {
    fn default() -> NfsStats {
        NfsStats {
            inner: Mutex::new(Inner {
                snapshot: NfsSnapshot {
                    nfs: vec![OpStats::default(); NFS_PROCEDURES.len()],
                    mount: vec![OpStats::default(); MOUNT_PROCEDURES.len()],
                    writes: [[WriteTally::default(); 3]; 3],
                    commits: CommitTally::default(),
                    server: ServerTally::default(),
                    pending_files: 0,
                    clients: Vec::new(),
                },
                clients: HashMap::new(),
                pending: HashMap::new(),
                tick: 0,
            }),
        }
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

fn stability_index(level: StableHow) -> usize {
    (level.as_u32() as usize).min(STABILITIES.len() - 1)
}

impl Inner {
    /// The tally of `client`, made (dropping the least recently active beyond the bound).
    fn client(&mut self, client: IpAddr) -> &mut ClientTally {
        self.tick += 1;
        if !self.clients.contains_key(&client) && self.clients.len() >= CLIENTS_MAX {
            // Idle clients (no connection open) go first, then the least recent.
            let oldest = self
                .clients
                .iter()
                .min_by_key(|(_, c)| (c.connections_open > 0, c.last_tick))
                .map(|(address, _)| *address);
            if let Some(address) = oldest {
                self.clients.remove(&address);
                self.snapshot.server.clients_dropped += 1;
            }
        }
        let tick = self.tick;
        let tally = self.clients.entry(client).or_default();
        tally.last_tick = tick;
        tally.last_seen_ms = unix_ms();
        tally
    }

    fn unstable_write(&mut self, file: Vec<u8>, bytes: u64) {
        self.tick += 1;
        if !self.pending.contains_key(&file) && self.pending.len() >= PENDING_FILES_MAX {
            let oldest = self
                .pending
                .iter()
                .min_by_key(|(_, p)| p.last_tick)
                .map(|(file, _)| file.clone());
            if let Some(file) = oldest {
                self.pending.remove(&file);
                self.snapshot.server.pending_dropped += 1;
            }
        }
        let tick = self.tick;
        let pending = self.pending.entry(file).or_insert(Pending {
            writes: 0,
            bytes: 0,
            last_tick: tick,
        });
        pending.writes += 1;
        pending.bytes += bytes;
        pending.last_tick = tick;
    }

    fn committed(&mut self, file: &[u8]) {
        let carried = self.pending.remove(file);
        let commits = &mut self.snapshot.commits;
        match carried {
            Some(p) => {
                commits.carried_writes += p.writes;
                commits.carried_bytes += p.bytes;
                commits
                    .carried_bytes_histogram
                    .saturating_record(p.bytes.clamp(1, CARRIED_BYTES_MAX));
            }
            None => {
                commits.empty += 1;
                commits.carried_bytes_histogram.saturating_record(1);
            }
        }
    }

    fn nfs_call(&mut self, client: IpAddr, call: NfsCallSeen, latency: Duration) {
        let index = call.procedure.as_u32() as usize;
        let mut bytes = call.read_bytes;
        if let Some(write) = call.write {
            bytes = write.bytes;
            let tally = &mut self.snapshot.writes[stability_index(write.asked)]
                [stability_index(write.answered)];
            tally.count += 1;
            tally.bytes += write.bytes;
            if let Some(file) = write.unstable_file {
                self.unstable_write(file, write.bytes);
            }
        }
        if let Some(file) = &call.committed {
            self.committed(file);
        }
        if let Some(op) = self.snapshot.nfs.get_mut(index) {
            op.record(bytes, call.ok, latency);
        }
        let written = if call.procedure == Nfs3Proc::Write {
            bytes
        } else {
            0
        };
        let tally = self.client(client);
        tally.calls.record(bytes, call.ok, latency);
        tally.read_bytes += call.read_bytes;
        tally.written_bytes += written;
        tally.commits += u64::from(call.committed.is_some());
    }
}

impl NfsStats {
    /// Counts one answered record of `client` that took `latency` to answer.
    pub fn record(&self, client: IpAddr, seen: Seen, latency: Duration) {
        let mut inner = self.inner.lock();
        let server = &mut inner.snapshot.server;
        let refused = match seen {
            Seen::Nothing => return,
            Seen::Garbage => {
                server.garbage_calls += 1;
                true
            }
            Seen::Unsupported => {
                server.unsupported_calls += 1;
                true
            }
            Seen::AuthRefused => {
                server.auth_refusals += 1;
                true
            }
            Seen::Portmap => {
                server.portmap_calls += 1;
                false
            }
            Seen::Replayed(procedure) => {
                server.duplicate_replies += 1;
                // Answered: counted as a call of its procedure (its error, if any, was
                // counted the first time).
                if let Some(op) = inner.snapshot.nfs.get_mut(procedure.as_u32() as usize) {
                    op.record(0, true, latency);
                }
                inner.client(client).calls.record(0, true, latency);
                return;
            }
            Seen::Mount { procedure, ok } => {
                let index = procedure.as_u32() as usize;
                if let Some(op) = inner.snapshot.mount.get_mut(index) {
                    op.record(0, ok, latency);
                }
                inner.client(client).calls.record(0, ok, latency);
                return;
            }
            Seen::Nfs(call) => {
                inner.nfs_call(client, call, latency);
                return;
            }
            Seen::Nfs4 { ok } => {
                inner.client(client).calls.record(0, ok, latency);
                return;
            }
        };
        let tally = inner.client(client);
        tally.refused += u64::from(refused);
    }

    /// A connection from `client` is being served.
    pub fn connection_opened(&self, client: IpAddr) {
        let mut inner = self.inner.lock();
        inner.snapshot.server.connections_open += 1;
        inner.snapshot.server.connections_total += 1;
        let tally = inner.client(client);
        tally.connections_open += 1;
        tally.connections_total += 1;
    }

    /// A connection of `client` ended.
    pub fn connection_closed(&self, client: IpAddr) {
        let mut inner = self.inner.lock();
        let server = &mut inner.snapshot.server;
        server.connections_open = server.connections_open.saturating_sub(1);
        // A client dropped meanwhile (the bound) is not made again for its last goodbye.
        if let Some(tally) = inner.clients.get_mut(&client) {
            tally.connections_open = tally.connections_open.saturating_sub(1);
        }
    }

    /// A connection closed at once: the server already serves `CONNECTIONS_MAX`.
    pub fn connection_refused(&self) {
        self.inner.lock().snapshot.server.connections_refused += 1;
    }

    /// A handle named a deleted or unknown object (answered STALE).
    pub fn stale_handle(&self) {
        self.inner.lock().snapshot.server.stale_handles += 1;
    }

    /// The server's memory limit for calls (`nfs::memory`).
    pub fn memory_limit_set(&self, max_bytes: u64) {
        self.inner.lock().snapshot.server.memory_max_bytes = max_bytes;
    }

    /// Calls now hold `charged_bytes` of the memory limit.
    pub fn memory_charged(&self, charged_bytes: u64) {
        let mut inner = self.inner.lock();
        let server = &mut inner.snapshot.server;
        server.memory_charged_bytes = charged_bytes;
        server.memory_peak_bytes = server.memory_peak_bytes.max(charged_bytes);
    }

    /// A call waited for room in the memory limit (its connection stopped reading meanwhile).
    pub fn memory_wait(&self) {
        self.inner.lock().snapshot.server.memory_waits += 1;
    }

    /// The write verifier changed (clients resend what they have not seen committed).
    pub fn verifier_changed(&self) {
        self.inner.lock().snapshot.server.verifier_changes += 1;
    }

    /// Every counter now.
    pub fn snapshot(&self) -> NfsSnapshot {
        let inner = self.inner.lock();
        let mut snapshot = inner.snapshot.clone();
        snapshot.pending_files = inner.pending.len() as u64;
        snapshot.clients = inner
            .clients
            .iter()
            .map(|(address, tally)| (*address, tally.clone()))
            .collect();
        snapshot.clients.sort_by_key(|(address, _)| *address);
        snapshot
    }
}

/// Latency p50, p99 and max of `op`, in microseconds (0 without calls).
fn percentiles(op: &OpStats) -> (u64, u64, u64) {
    if op.latency_us.is_empty() {
        return (0, 0, 0);
    }
    (
        op.latency_quantile_us(0.5),
        op.latency_quantile_us(0.99),
        op.latency_us.max(),
    )
}

/// One procedure's calls, as `stat nfs` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcedureRow {
    /// `nfs` or `mount`.
    pub program: String,
    pub procedure: String,
    pub calls: u64,
    pub errors: u64,
    pub bytes: u64,
    pub latency_p50_us: u64,
    pub latency_p99_us: u64,
    pub latency_max_us: u64,
}

/// WRITEs of one stability asked and answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRow {
    pub asked: String,
    pub answered: String,
    pub count: u64,
    pub bytes: u64,
}

/// COMMITs and what they carried.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRow {
    /// Successful COMMITs.
    pub count: u64,
    pub carried_writes: u64,
    pub carried_bytes: u64,
    pub empty: u64,
    pub carried_bytes_p50: u64,
    pub carried_bytes_p99: u64,
    pub carried_bytes_max: u64,
}

/// One client address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientRow {
    pub address: String,
    pub calls: u64,
    pub errors: u64,
    pub refused: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
    pub commits: u64,
    pub connections_open: u64,
    pub connections_total: u64,
    pub latency_p50_us: u64,
    pub latency_p99_us: u64,
    pub latency_max_us: u64,
    pub last_seen_ms: u64,
}

/// Everything `stat nfs` shows, as plain data for the control protocol and `-j`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NfsReport {
    /// Every procedure, NFSv3's then MOUNT's, in protocol order.
    pub procedures: Vec<ProcedureRow>,
    pub read_bytes: u64,
    pub written_bytes: u64,
    /// Every (asked, answered) pair.
    pub writes: Vec<WriteRow>,
    pub commits: CommitRow,
    pub pending_files: u64,
    pub pending_dropped: u64,
    pub portmap_calls: u64,
    pub stale_handles: u64,
    pub duplicate_replies: u64,
    pub auth_refusals: u64,
    pub garbage_calls: u64,
    pub unsupported_calls: u64,
    pub verifier_changes: u64,
    pub connections_open: u64,
    pub connections_total: u64,
    pub connections_refused: u64,
    /// The memory limit of calls in flight, what they hold now, their peak, and how many
    /// waited for room (`nfs::memory`).
    pub memory_max_bytes: u64,
    pub memory_charged_bytes: u64,
    pub memory_peak_bytes: u64,
    pub memory_waits: u64,
    pub clients: Vec<ClientRow>,
    pub clients_max: u64,
    pub clients_dropped: u64,
}

impl NfsReport {
    /// All zeros, every procedure and stability pair listed (a server not serving NFS).
    pub fn empty() -> NfsReport {
        NfsStats::default().snapshot().report()
    }
}

fn procedure_row(program: &str, procedure: &str, op: &OpStats) -> ProcedureRow {
    let (latency_p50_us, latency_p99_us, latency_max_us) = percentiles(op);
    ProcedureRow {
        program: program.to_string(),
        procedure: procedure.to_string(),
        calls: op.ops,
        errors: op.errors,
        bytes: op.bytes,
        latency_p50_us,
        latency_p99_us,
        latency_max_us,
    }
}

impl NfsSnapshot {
    /// The calls of NFSv3 procedure `procedure`.
    pub fn nfs_op(&self, procedure: Nfs3Proc) -> Option<&OpStats> {
        self.nfs.get(procedure.as_u32() as usize)
    }

    /// As `stat nfs` shows it.
    pub fn report(&self) -> NfsReport {
        let mut procedures: Vec<ProcedureRow> = NFS_PROCEDURES
            .iter()
            .zip(&self.nfs)
            .map(|((_, name), op)| procedure_row("nfs", name, op))
            .collect();
        procedures.extend(
            MOUNT_PROCEDURES
                .iter()
                .zip(&self.mount)
                .map(|((_, name), op)| procedure_row("mount", name, op)),
        );
        let mut writes = Vec::new();
        for (asked, row) in STABILITIES.iter().zip(&self.writes) {
            for (answered, tally) in STABILITIES.iter().zip(row) {
                writes.push(WriteRow {
                    asked: (*asked).to_string(),
                    answered: (*answered).to_string(),
                    count: tally.count,
                    bytes: tally.bytes,
                });
            }
        }
        let carried = &self.commits.carried_bytes_histogram;
        let quantile = |q: f64| {
            if carried.is_empty() {
                0
            } else {
                carried.value_at_quantile(q)
            }
        };
        let commit_op = self.nfs_op(Nfs3Proc::Commit);
        let server = &self.server;
        NfsReport {
            procedures,
            read_bytes: self.nfs_op(Nfs3Proc::Read).map_or(0, |op| op.bytes),
            written_bytes: self.nfs_op(Nfs3Proc::Write).map_or(0, |op| op.bytes),
            writes,
            commits: CommitRow {
                count: commit_op.map_or(0, |op| op.ops - op.errors),
                carried_writes: self.commits.carried_writes,
                carried_bytes: self.commits.carried_bytes,
                empty: self.commits.empty,
                carried_bytes_p50: quantile(0.5),
                carried_bytes_p99: quantile(0.99),
                carried_bytes_max: if carried.is_empty() { 0 } else { carried.max() },
            },
            pending_files: self.pending_files,
            pending_dropped: server.pending_dropped,
            portmap_calls: server.portmap_calls,
            stale_handles: server.stale_handles,
            duplicate_replies: server.duplicate_replies,
            auth_refusals: server.auth_refusals,
            garbage_calls: server.garbage_calls,
            unsupported_calls: server.unsupported_calls,
            verifier_changes: server.verifier_changes,
            connections_open: server.connections_open,
            connections_total: server.connections_total,
            connections_refused: server.connections_refused,
            memory_max_bytes: server.memory_max_bytes,
            memory_charged_bytes: server.memory_charged_bytes,
            memory_peak_bytes: server.memory_peak_bytes,
            memory_waits: server.memory_waits,
            clients: self
                .clients
                .iter()
                .map(|(address, tally)| {
                    let (latency_p50_us, latency_p99_us, latency_max_us) =
                        percentiles(&tally.calls);
                    ClientRow {
                        address: address.to_string(),
                        calls: tally.calls.ops,
                        errors: tally.calls.errors,
                        refused: tally.refused,
                        read_bytes: tally.read_bytes,
                        written_bytes: tally.written_bytes,
                        commits: tally.commits,
                        connections_open: tally.connections_open,
                        connections_total: tally.connections_total,
                        latency_p50_us,
                        latency_p99_us,
                        latency_max_us,
                        last_seen_ms: tally.last_seen_ms,
                    }
                })
                .collect(),
            clients_max: CLIENTS_MAX as u64,
            clients_dropped: server.clients_dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_nfs::nfs3::{FileHandle, RangeArgs, WccData, WriteArgs, WriteOk};

    fn write(file: &[u8], stable: StableHow, answered: StableHow, len: usize) -> Seen {
        let file = FileHandle::new(file.to_vec()).unwrap();
        let call = Nfs3Call::Write(WriteArgs {
            file,
            offset_bytes: 0,
            stable,
            data: vec![0; len],
        });
        let reply = Nfs3Reply::Write(Outcome::Ok(WriteOk {
            file_wcc: WccData::empty(),
            count_bytes: len as u32,
            committed: answered,
            verf: [0; 8],
        }));
        Seen::nfs(&call, &reply)
    }

    fn commit(file: &[u8]) -> Seen {
        let file = FileHandle::new(file.to_vec()).unwrap();
        let call = Nfs3Call::Commit(RangeArgs {
            file,
            offset_bytes: 0,
            count_bytes: 0,
        });
        let reply = Nfs3Reply::Commit(Outcome::Ok(cairn_nfs::nfs3::CommitOk {
            file_wcc: WccData::empty(),
            verf: [0; 8],
        }));
        Seen::nfs(&call, &reply)
    }

    #[test]
    fn commits_carry_the_unstable_writes_of_their_file_since_the_last() {
        let stats = NfsStats::default();
        let client = IpAddr::from([10, 0, 0, 1]);
        let us = Duration::from_micros(50);
        for _ in 0..3 {
            stats.record(
                client,
                write(b"a", StableHow::Unstable, StableHow::Unstable, 4096),
                us,
            );
        }
        stats.record(
            client,
            write(b"b", StableHow::Unstable, StableHow::Unstable, 100),
            us,
        );
        stats.record(
            client,
            write(b"a", StableHow::FileSync, StableHow::FileSync, 10),
            us,
        );
        stats.record(client, commit(b"a"), us);
        stats.record(client, commit(b"a"), us);
        let report = stats.snapshot().report();
        assert_eq!(report.commits.count, 2);
        assert_eq!(report.commits.carried_writes, 3);
        assert_eq!(report.commits.carried_bytes, 3 * 4096);
        assert_eq!(report.commits.empty, 1);
        assert_eq!(report.pending_files, 1, "b is not committed yet");
        assert_eq!(report.written_bytes, 3 * 4096 + 100 + 10);
        let row = |asked: &str, answered: &str| {
            report
                .writes
                .iter()
                .find(|w| w.asked == asked && w.answered == answered)
                .map(|w| (w.count, w.bytes))
        };
        assert_eq!(row("unstable", "unstable"), Some((4, 3 * 4096 + 100)));
        assert_eq!(row("file_sync", "file_sync"), Some((1, 10)));
        assert_eq!(report.clients.len(), 1);
        assert_eq!(report.clients[0].calls, 7);
        assert_eq!(report.clients[0].commits, 2);
    }

    #[test]
    fn clients_are_bounded_and_the_least_recent_idle_one_goes_first() {
        let stats = NfsStats::default();
        let busy = IpAddr::from([10, 0, 0, 0]);
        stats.connection_opened(busy);
        for i in 1..=CLIENTS_MAX as u8 + 5 {
            stats.record(IpAddr::from([10, 0, 1, i]), Seen::Portmap, Duration::ZERO);
        }
        let report = stats.snapshot().report();
        assert_eq!(report.clients.len(), CLIENTS_MAX);
        assert_eq!(report.clients_dropped, 6);
        assert!(
            report.clients.iter().any(|c| c.address == "10.0.0.0"),
            "a client with a connection open stays"
        );
        assert!(!report.clients.iter().any(|c| c.address == "10.0.1.1"));
        assert_eq!(report.portmap_calls, CLIENTS_MAX as u64 + 5);
        stats.connection_closed(busy);
        assert_eq!(stats.snapshot().server.connections_open, 0);
    }
}
