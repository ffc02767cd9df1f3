//! The server's life: open the pools, serve them over NBD and the control socket, and on the
//! stop signal finish what clients sent, then sync and export every pool.
//!
//! Order matters and is kept here so every front end gets it right:
//! 1. the control socket is bound first (refusing a second server for the same state
//!    directory before any pool is opened, whose device locks would give a worse message);
//! 2. remembered pools are opened; one that cannot be is reported (`Note::NotServing`) and left
//!    out, it stops neither the server nor the other pools; then pools found in `dirs` by the
//!    engine's one import search (the same `pool import -d` uses) are imported and remembered;
//! 3. the NBD listeners start, and the front end is told where (`Ready`);
//! 4. on stop: listeners close, connections finish the requests they have read, the control
//!    thread ends, sends and receives in flight are ended (a receive rolls back; its client
//!    is told the server stopped), and each pool is synced and exported (it stays
//!    remembered, so the next server imports it again).
//!
//! Memory: the budget's request allowance becomes the NBD server's in-flight limits and, unless
//! `nfs_memory_max_bytes` says otherwise, the NFS server's limit of calls in flight (each
//! front end has its own: a server flooded over NBD and NFS at once can hold the allowance
//! twice); its dirty-data allowance becomes the pools' (`PoolAccess::pool_options_under`).
//! This module prints nothing: what the user should hear arrives at the caller's note sink.

use crate::control::{self, ControlError};
use crate::exports::PoolExports;
use crate::passed::{PassedStream, StreamJobs};
use crate::pools::{PoolAccess, PoolUnavailable, PoolsError, ServedPools, device_specs};
use cairn_engine::{EngineError, ImportSource, MemoryBudget, Pool, discover_pools};
use cairn_format::PoolState;
use cairn_nbd::{ExportProvider, NbdServer, ServerConfig, TlsSettings};
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a server is asked to do.
pub struct ServeSettings {
    pub state_dir: PathBuf,
    /// Also import the pools found in these directories (absolute paths).
    pub dirs: Vec<PathBuf>,
    pub socket_path: PathBuf,
    /// TCP address to serve on as well (checked with `check_listen`).
    pub listen: Option<String>,
    pub nbd: ServerConfig,
    pub budget: MemoryBudget,
    /// Recorded in the history of pools this server imports.
    pub command_line: String,
    /// Serve metrics and the analytics page on this TCP address (`--http`); loopback unless
    /// the NBD TLS settings are given, which then make it HTTPS.
    pub http: Option<String>,
    /// Serve NFSv3 (MOUNT and PORTMAP on the same port) on this TCP address (`--nfs`):
    /// beyond loopback only when every shared filesystem has an access list
    /// (`check_nfs_shares`).
    pub nfs: Option<String>,
    /// What the NFS server's calls may hold at once over all connections (`--nfs-memory-max`;
    /// `None`: the budget's request allowance, `MemoryBudget::request_bytes`).
    pub nfs_memory_max_bytes: Option<u64>,
}

/// What a server has to tell its user.
#[derive(Debug)]
pub enum Note {
    /// A remembered pool that cannot be opened is not served.
    NotServing(PoolUnavailable),
    /// Something import had to say about a pool (degraded, rewound, resilvering).
    Pool(String),
    /// The stop signal came: requests in flight are being finished.
    Stopping,
    /// A pool is being synced and exported.
    Exporting(String),
    /// Something a layer recorded (`cairn_metrics::events`): a fault, a fallback.
    Event(String),
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::NotServing(unavailable) => write!(f, "not serving: {unavailable}"),
            Note::Pool(text) => f.write_str(text),
            Note::Stopping => f.write_str("stopping: finishing requests in flight"),
            Note::Exporting(pool) => write!(f, "syncing and exporting pool '{pool}'"),
            Note::Event(text) => f.write_str(text),
        }
    }
}

/// Where the server is reachable, once it is.
pub struct Ready<'a> {
    pub exports: Vec<String>,
    pub socket_path: &'a Path,
    pub tcp: Option<SocketAddr>,
    pub tls: Option<&'a TlsSettings>,
    /// Where the analytics endpoint listens, if it is on.
    pub http: Option<SocketAddr>,
    /// Where NFS is served, if it is.
    pub nfs: Option<SocketAddr>,
}

/// Why a server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Pools(#[from] PoolsError),
    #[error("cannot import pool '{pool}'")]
    Import {
        pool: String,
        #[source]
        source: Box<EngineError>,
    },
    #[error("cannot remember pool '{pool}'")]
    Remember {
        pool: String,
        #[source]
        source: crate::cache::CacheError,
    },
    #[error("cannot record history of pool '{pool}'")]
    History {
        pool: String,
        #[source]
        source: Box<EngineError>,
    },
    #[error("no pools to serve (create one with cairn pool create, or pass -d DIR)")]
    NoPools,
    #[error("--listen {address}: not an ADDR:PORT")]
    BadAddress {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "refusing to serve NBD on {address} without TLS: anyone who can reach it could read and write every volume (give --tls-cert and --tls-key, or listen on 127.0.0.1)"
    )]
    ExposedWithoutTls { address: SocketAddr },
    #[error("cannot listen on {address}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the server's {what}")]
    Start {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "refusing to serve metrics and the analytics page on {address} without TLS: anyone who can reach it could watch every pool (give --tls-cert and --tls-key, or use 127.0.0.1)"
    )]
    HttpExposedWithoutTls { address: SocketAddr },
    #[error(transparent)]
    Analytics(#[from] crate::analytics::AnalyticsError),
    #[error(
        "refusing to serve NFS on {address}: {} shared without a list of the clients it is for (sharenfs rw=NET or ro=NET); AUTH_SYS trusts whatever identity a client claims, so a share without a list would be open to every machine that reaches the port (give each a list, e.g. cairn set sharenfs='rw=192.168.1.0/24' POOL/DATASET, or listen on a loopback address such as 127.0.0.1:2049)",
        unlisted.join(", ")
    )]
    NfsExposed {
        address: SocketAddr,
        unlisted: Vec<String>,
    },
    #[error(transparent)]
    Nfs(#[from] crate::nfs::NfsError),
    #[error("the NBD listeners failed")]
    Listeners(#[source] std::io::Error),
    #[error("cannot watch for the stop signal")]
    Signal(#[source] std::io::Error),
    #[error("cannot export pool '{pool}'")]
    Export {
        pool: String,
        #[source]
        source: Box<EngineError>,
    },
}

/// Refuses TCP on an address other than loopback without TLS.
pub fn check_listen(address: &str, tls: Option<&TlsSettings>) -> Result<(), ServeError> {
    use std::net::ToSocketAddrs;
    let resolved: Vec<SocketAddr> = address
        .to_socket_addrs()
        .map_err(|source| ServeError::BadAddress {
            address: address.to_string(),
            source,
        })?
        .collect();
    let exposed = resolved.iter().find(|addr| !addr.ip().is_loopback());
    if let (Some(exposed), None) = (exposed, tls) {
        return Err(ServeError::ExposedWithoutTls { address: *exposed });
    }
    Ok(())
}

/// Refuses the analytics endpoint on an address other than loopback without TLS.
pub fn check_http_listen(address: &str, tls: Option<&TlsSettings>) -> Result<(), ServeError> {
    match check_listen(address, tls) {
        Err(ServeError::ExposedWithoutTls { address }) => {
            Err(ServeError::HttpExposedWithoutTls { address })
        }
        other => other,
    }
}

/// Checks that NFS's `address` is an ADDR:PORT; the address it resolves to beyond loopback,
/// if any (then every shared filesystem needs an access list: `check_nfs_shares`).
pub fn check_nfs_listen(address: &str) -> Result<Option<SocketAddr>, ServeError> {
    match check_listen(address, None) {
        Err(ServeError::ExposedWithoutTls { address }) => Ok(Some(address)),
        Err(other) => Err(other),
        Ok(()) => Ok(None),
    }
}

/// Refuses NFS on `exposed` (an address beyond loopback) while a shared filesystem of
/// `served`'s pools names no clients in its `sharenfs` (AUTH_SYS is only as trustworthy as
/// the machines that can connect, so only explicit lists open shares to a network). One that
/// loses its lists later is served to loopback clients only (`nfs::access`).
pub fn check_nfs_shares(served: &ServedPools, exposed: SocketAddr) -> Result<(), ServeError> {
    let unlisted = crate::nfs::unlisted_shares(served);
    if unlisted.is_empty() {
        return Ok(());
    }
    Err(ServeError::NfsExposed {
        address: exposed,
        unlisted,
    })
}

/// The NBD server's request buffers, per connection and in all, as the budget allows.
pub fn apply_budget(budget: &MemoryBudget, config: &mut ServerConfig) {
    config.max_total_inflight_bytes = usize::try_from(budget.request_bytes).unwrap_or(usize::MAX);
    config.max_inflight_bytes =
        usize::try_from(budget.connection_request_bytes).unwrap_or(usize::MAX);
}

/// The NFS server on `address`, when asked for, its calls limited to `memory_max_bytes`.
fn start_nfs(
    served: &Arc<ServedPools>,
    address: Option<&str>,
    memory_max_bytes: u64,
) -> Result<Option<crate::nfs::NfsServer>, ServeError> {
    let Some(address) = address else {
        return Ok(None);
    };
    Ok(Some(crate::nfs::NfsServer::start(
        served.clone(),
        address,
        memory_max_bytes,
    )?))
}

/// Opens the remembered pools and imports any new ones found in `dirs`.
pub fn open_pools(
    access: &PoolAccess,
    dirs: &[PathBuf],
    budget: &MemoryBudget,
    command_line: &str,
    notes: &dyn Fn(Note),
) -> Result<BTreeMap<String, Arc<Pool>>, ServeError> {
    let mut pools = BTreeMap::new();
    let mut unavailable = Vec::new();
    for name in access.pool_names()? {
        let pool = match access.open_with(&name, access.pool_options_under(Some(budget))) {
            Ok(pool) => pool,
            Err(PoolsError::Unavailable(why)) => {
                notes(Note::NotServing(why));
                unavailable.push(name);
                continue;
            }
            Err(err) => return Err(err.into()),
        };
        for note in pool.notes() {
            notes(Note::Pool(note.clone()));
        }
        pools.insert(name, Arc::new(pool));
    }
    if !dirs.is_empty() {
        let source = ImportSource::Directories(dirs.to_vec());
        for found in discover_pools(&source) {
            let name = found.config.pool_name.clone();
            if pools.contains_key(&name)
                || unavailable.contains(&name)
                || found.config.state == PoolState::Destroyed
            {
                continue;
            }
            let pool = import_found(access, &source, &found, budget, command_line)?;
            pools.insert(name, Arc::new(pool));
        }
    }
    if pools.is_empty() && unavailable.is_empty() {
        return Err(ServeError::NoPools);
    }
    Ok(pools)
}

/// Imports a pool the search found, by guid (from the directories searched, which also holds
/// its cache devices), and remembers it.
fn import_found(
    access: &PoolAccess,
    source: &ImportSource,
    found: &cairn_engine::DiscoveredPool,
    budget: &MemoryBudget,
    command_line: &str,
) -> Result<Pool, ServeError> {
    let name = found.config.pool_name.clone();
    let pool = Pool::import(
        source,
        &found.config.pool_guid.to_string(),
        access.pool_options_under(Some(budget)),
    )
    .map_err(|source| ServeError::Import {
        pool: name.clone(),
        source: Box::new(source),
    })?;
    access
        .cache
        .insert(&name, &device_specs(&pool))
        .map_err(|source| ServeError::Remember {
            pool: name.clone(),
            source,
        })?;
    pool.record_history(command_line.to_string())
        .map_err(|source| ServeError::History {
            pool: name,
            source: Box::new(source),
        })?;
    Ok(pool)
}

/// Answers the control socket's requests against the served pools: `admin::handle`, one
/// request at a time (requests read-modify-write the pool cache and change pools' vdev trees,
/// and a user running two commands at once expects them to take turns as they would without a
/// server). A send or receive runs beside them, on the stream its client passed
/// (`run_stream`): it may last as long as a slow pipe takes, and touches neither.
fn executor(
    access: &PoolAccess,
    state_dir: &Path,
    served: Arc<ServedPools>,
    jobs: Arc<StreamJobs>,
) -> Arc<control::Execute> {
    let cache_dir = state_dir.to_path_buf();
    let opener = access.opener.clone();
    let read_trace_dir = access.read_trace_dir.clone();
    let l2_write_bytes_per_day = access.l2_write_bytes_per_day;
    let one_at_a_time = parking_lot::Mutex::new(());
    Arc::new(
        move |request: control::ControlRequest, attached: control::Attached| {
            let access = PoolAccess {
                cache: crate::PoolCache::new(cache_dir.clone()),
                served: Some(served.clone()),
                opener: opener.clone(),
                read_trace_dir: read_trace_dir.clone(),
                l2_write_bytes_per_day,
            };
            if request.request.takes_stream() {
                return run_stream(&access, &jobs, request, attached);
            }
            let _turn = one_at_a_time.lock();
            crate::admin::handle(&access, &request.command_line, request.request)
                .map_err(|err| control::Failure::of(&err))
        },
    )
}

/// A send or receive on the descriptor its client passed, stopped if the client goes away.
fn run_stream(
    access: &PoolAccess,
    jobs: &StreamJobs,
    request: control::ControlRequest,
    attached: control::Attached,
) -> control::ControlReply {
    let refuse = |message: &str| control::Failure {
        message: message.to_string(),
        exit_code: 1,
    };
    let (Some(fd), Some(connection)) = (attached.stream, attached.connection) else {
        return Err(refuse(
            "a send or receive through the server needs the stream's file descriptor \
             with the request, and none came",
        ));
    };
    let _job = jobs
        .start(&connection)
        .map_err(|stopping| refuse(&stopping.to_string()))?;
    let mut stream = PassedStream::new(fd, connection, Some(jobs.stopping()))
        .map_err(|err| refuse(&format!("cannot use the stream passed: {err}")))?;
    crate::admin::handle_stream(access, request.request, &mut stream)
        .map_err(|err| control::Failure::of(&err))
}

/// The thread answering the control socket.
struct ControlThread {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl ControlThread {
    fn start(
        listener: std::os::unix::net::UnixListener,
        execute: Arc<control::Execute>,
    ) -> Result<ControlThread, ServeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("cairn-control".into())
            .spawn({
                let stop = stop.clone();
                move || control::accept_loop(listener, stop, execute)
            })
            .map_err(|source| ServeError::Start {
                what: "control thread",
                source,
            })?;
        Ok(ControlThread { stop, thread })
    }

    /// Stops accepting requests (those running go on) and removes the socket.
    fn stop(self, state_dir: &Path) {
        self.stop.store(true, Ordering::SeqCst);
        control::wake(state_dir);
        let _ = self.thread.join();
        let _ = std::fs::remove_file(control::socket_path(state_dir));
    }
}

/// Ends the sends and receives in flight and waits for them (`STREAM_JOBS_STOP` at most).
fn stop_stream_jobs(jobs: &StreamJobs, notes: &dyn Fn(Note)) {
    let left = jobs.stop_all(STREAM_JOBS_STOP);
    if left > 0 {
        notes(Note::Pool(format!(
            "{left} send or receive did not end within {} s; exporting anyway",
            STREAM_JOBS_STOP.as_secs()
        )));
    }
}

/// Serves until `stop` resolves, then syncs and exports every pool. `access` gives the pool
/// cache and options (its `served` is ignored: the server makes its own registry, against
/// which it answers the control socket's requests).
pub fn serve<Stop, StopFuture>(
    access: &PoolAccess,
    settings: ServeSettings,
    notes: &dyn Fn(Note),
    ready: impl FnOnce(&Ready<'_>),
    stop: Stop,
) -> Result<(), ServeError>
where
    Stop: FnOnce() -> StopFuture,
    StopFuture: Future<Output = std::io::Result<()>>,
{
    if let Some(address) = &settings.listen {
        check_listen(address, settings.nbd.tls.as_ref())?;
    }
    if let Some(address) = &settings.http {
        check_http_listen(address, settings.nbd.tls.as_ref())?;
    }
    let nfs_exposed = match &settings.nfs {
        Some(address) => check_nfs_listen(address)?,
        None => None,
    };
    let mut config = settings.nbd;
    apply_budget(&settings.budget, &mut config);
    let control_listener = control::bind(&settings.state_dir)?;
    let served = Arc::new(ServedPools::default());
    let _ = served.budget.set(settings.budget);
    *served.pools.write() = open_pools(
        access,
        &settings.dirs,
        &settings.budget,
        &settings.command_line,
        notes,
    )?;
    if let Some(exposed) = nfs_exposed
        && let Err(refused) = check_nfs_shares(&served, exposed)
    {
        // Nothing is served yet: the control socket goes with the refusal.
        drop(control_listener);
        let _ = std::fs::remove_file(control::socket_path(&settings.state_dir));
        return Err(refused);
    }
    mount_all(&served, &settings.state_dir.join(MOUNT_RECORD_FILE), notes);
    let exports = Arc::new(PoolExports::new(served.clone()));
    let server = Arc::new(NbdServer::new(exports.clone(), config));
    let _ = served.nbd.set(server.clone());
    let _ = served.started.set(std::time::Instant::now());
    let analytics = match &settings.http {
        Some(address) => Some(crate::analytics::start(
            served.clone(),
            address,
            server
                .config()
                .tls
                .as_ref()
                .map(|tls| tls.acceptor().clone()),
        )?),
        None => None,
    };
    let mut nfs = start_nfs(
        &served,
        settings.nfs.as_deref(),
        settings
            .nfs_memory_max_bytes
            .unwrap_or(settings.budget.request_bytes),
    )?;
    let stream_jobs = Arc::new(StreamJobs::default());
    let control = ControlThread::start(
        control_listener,
        executor(
            access,
            &settings.state_dir,
            served.clone(),
            stream_jobs.clone(),
        ),
    )?;
    let listeners = Listeners {
        listen: &settings.listen,
        socket_path: &settings.socket_path,
        server: &server,
        exports: &exports,
        http: analytics.as_ref().map(|a| a.local_addr()),
        nfs: nfs.as_ref().map(|nfs| nfs.local_addr()),
    };
    let result = listeners.run(notes, ready, stop);
    // NFS calls in flight finish before the pools are exported.
    if let Some(nfs) = nfs.as_mut() {
        nfs.stop();
    }
    // The listeners passed on every event up to their end.
    let events_shown = cairn_metrics::events::latest_seq();
    if let Some(analytics) = analytics {
        analytics.stop();
    }
    let _ = std::fs::remove_file(&settings.socket_path);
    control.stop(&settings.state_dir);
    // Sends and receives in flight end (a receive rolls back) before their pools go.
    stop_stream_jobs(&stream_jobs, notes);
    for (dataset, _, result) in served.mounts.unmount_all(None) {
        notes(Note::Pool(match result {
            Ok(()) => format!("unmounted {dataset}"),
            Err(err) => format!(
                "cannot unmount {dataset}: {}",
                cairn_device::error_chain(&err)
            ),
        }));
    }
    let exported = export_all(&served, notes);
    // What unmounting and exporting had to say (a device that failed its last flush).
    pass_on_events(events_shown, notes);
    result.and(exported)
}

/// The NBD side of a server.
struct Listeners<'a> {
    listen: &'a Option<String>,
    socket_path: &'a Path,
    server: &'a Arc<NbdServer>,
    exports: &'a PoolExports,
    http: Option<SocketAddr>,
    nfs: Option<SocketAddr>,
}

impl Listeners<'_> {
    /// Runs the NBD listeners on their own runtime until `stop`, then lets connections finish.
    fn run<Stop, StopFuture>(
        &self,
        notes: &dyn Fn(Note),
        ready: impl FnOnce(&Ready<'_>),
        stop: Stop,
    ) -> Result<(), ServeError>
    where
        Stop: FnOnce() -> StopFuture,
        StopFuture: Future<Output = std::io::Result<()>>,
    {
        let Listeners {
            listen,
            socket_path,
            server,
            exports,
            http,
            nfs,
        } = *self;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cairn-nbd")
            .enable_all()
            .build()
            .map_err(|source| ServeError::Start {
                what: "async runtime",
                source,
            })?;
        runtime.block_on(async {
            let tcp = match listen {
                Some(address) => Some(tokio::net::TcpListener::bind(address).await.map_err(
                    |source| ServeError::Listen {
                        address: address.clone(),
                        source,
                    },
                )?),
                None => None,
            };
            let unix =
                cairn_nbd::bind_unix(socket_path, 0o600).map_err(|source| ServeError::Listen {
                    address: socket_path.display().to_string(),
                    source,
                })?;
            let tcp_address = tcp
                .as_ref()
                .map(|tcp| tcp.local_addr())
                .transpose()
                .map_err(ServeError::Listeners)?;
            ready(&Ready {
                exports: exports.list(),
                socket_path,
                tcp: tcp_address,
                tls: server.config().tls.as_ref(),
                http,
                nfs,
            });
            // Both listeners and the stop watch run in this one task, so nothing here needs to
            // be Send; the listeners return once the server is shut down.
            let serving = async {
                let serve_tcp = async {
                    match tcp {
                        Some(tcp) => server.serve_tcp(tcp).await,
                        None => Ok(()),
                    }
                };
                tokio::try_join!(serve_tcp, server.serve_unix(unix))
            };
            tokio::pin!(serving);
            let stop = stop();
            tokio::pin!(stop);
            // Events the layers record (faults, fallbacks) reach the user as they come.
            let mut events = tokio::time::interval(EVENT_POLL);
            let mut events_seen = 0;
            loop {
                tokio::select! {
                    result = &mut serving => {
                        result.map_err(ServeError::Listeners)?;
                        break;
                    }
                    signal = &mut stop => {
                        signal.map_err(ServeError::Signal)?;
                        notes(Note::Stopping);
                        server.shutdown();
                        serving.await.map_err(ServeError::Listeners)?;
                        break;
                    }
                    _ = events.tick() => events_seen = pass_on_events(events_seen, notes),
                }
            }
            server.wait_idle().await;
            pass_on_events(events_seen, notes);
            Ok(())
        })
    }
}

/// How often a server looks for new events to pass on.
const EVENT_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// Passes the events recorded after `seen` to `notes`; returns the newest one's number.
pub fn pass_on_events(seen: u64, notes: &dyn Fn(Note)) -> u64 {
    let mut newest = seen;
    for event in cairn_metrics::events::since(seen) {
        if event.seq > newest + 1 && newest > 0 {
            notes(Note::Event(format!(
                "{} events were dropped before they could be shown",
                event.seq - newest - 1
            )));
        }
        newest = event.seq;
        notes(Note::Event(event.message));
    }
    newest
}

/// The file in the state directory listing the server's mountpoints
/// (`Mounts::keep_record`).
const MOUNT_RECORD_FILE: &str = "mounts";
/// How long a stopping server waits for the sends and receives it ended (a receive destroys
/// what it made) before it exports their pools.
const STREAM_JOBS_STOP: std::time::Duration = std::time::Duration::from_secs(30);

/// Mounts every filesystem of the served pools that has a mountpoint; one that cannot be
/// mounted is reported and left (the others and the volumes are served).
fn mount_all(served: &ServedPools, record: &Path, notes: &dyn Fn(Note)) {
    // Mounts a killed server of this state directory left behind answer nothing (ENOTCONN):
    // they go first. The record then follows this server's mounts.
    for dead in crate::fuse::clear_dead_cairn_mounts(record) {
        notes(Note::Pool(format!(
            "detached the dead mount at {} (its server had stopped without unmounting)",
            dead.display()
        )));
    }
    served.mounts.keep_record(record);
    for pool in served.all() {
        let Ok(datasets) = pool.datasets() else {
            continue;
        };
        for info in datasets {
            if info.kind != cairn_dataset::DatasetKind::Filesystem || !info.name.contains('/') {
                continue;
            }
            match served.mounts.mount(&pool, &info.name, None, "") {
                Ok(at) => notes(Note::Pool(format!(
                    "mounted {} at {}",
                    info.name,
                    at.display()
                ))),
                Err(crate::fuse::MountError::NoMountpoint { .. }) => {}
                Err(err) => notes(Note::Pool(format!(
                    "not mounted: {}",
                    cairn_device::error_chain(&err)
                ))),
            }
        }
    }
}

/// Syncs and exports every served pool (each stays remembered); the first failure is
/// returned, after every pool had its turn.
fn export_all(served: &ServedPools, notes: &dyn Fn(Note)) -> Result<(), ServeError> {
    let pools = std::mem::take(&mut *served.pools.write());
    let mut first_failure = None;
    for (name, pool) in pools {
        notes(Note::Exporting(name.clone()));
        if let Err(source) = pool.export() {
            first_failure.get_or_insert(ServeError::Export {
                pool: name,
                source: Box::new(source),
            });
        }
    }
    first_failure.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_beyond_loopback_needs_tls() {
        assert!(check_listen("127.0.0.1:10809", None).is_ok());
        assert!(matches!(
            check_listen("0.0.0.0:10809", None),
            Err(ServeError::ExposedWithoutTls { .. })
        ));
        assert!(matches!(
            check_listen("no port here", None),
            Err(ServeError::BadAddress { .. })
        ));
    }
}
