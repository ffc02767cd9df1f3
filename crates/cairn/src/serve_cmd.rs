//! `cairn serve`: the long-running server. Imports the pools it is given (remembered ones from
//! the pool cache, plus any found with `-d DIR`), and serves every volume as the NBD export
//! `pool/volume` on a Unix socket (mode 0600, so only its owner connects) and, when asked with
//! `--listen`, on a TCP address. TCP on an address other than loopback is refused without TLS
//! (`--tls-cert`/`--tls-key`: NBD STARTTLS, plain clients refused unless `--tls allow`;
//! `--tls-client-ca` makes clients show a certificate), since anyone who can reach the port could
//! otherwise read and write every volume.
//! A remembered pool that cannot be opened is reported at start and not served; it stops
//! neither the server nor the other pools, and is opened again when a command names it.
//!
//! Durability is the volume's: a write returns once it is in the open txg; FLUSH and FUA
//! commit the volume's intent log (the connection's lane for FUA, every lane for FLUSH). On SIGINT or
//! SIGTERM the server stops accepting, lets every connection finish the requests it has read,
//! then syncs and exports the pools (they stay remembered, so the next `serve` imports them).
//!
//! Memory: one budget derived from `--arc-max` (`MemoryBudget`) limits the pools' dirty data
//! and the NBD server's request buffers; it is printed at start and shown by `stat memory`.
//!
//! Exports are looked up per connection, so a volume created after the server started is
//! served as soon as the server's pool knows it.

use crate::cache::PoolCache;
use crate::context::{
    Context, Output, ServedPools, device_specs, pool_options_for, unavailable_reason,
};
use crate::control::{self, Reply, Request};
use anyhow::{Context as _, Result, bail};
use cairn_dataset::{DatasetError, DatasetKind, Volume, WriteOptions};
use cairn_engine::{ImportSource, MemoryBudget, Pool, discover_pools};
use cairn_nbd::{Export, ExportError, ExportProvider, NbdServer, ServerConfig, TlsSettings};
use clap::{Args, Parser};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Also import pools found in this directory (repeatable).
    #[arg(short = 'd', value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Also serve on TCP at this address (e.g. 127.0.0.1:10809). Off by default: the Unix
    /// socket, whose file mode limits who connects, is enough on one machine. An address other
    /// than loopback needs TLS.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<String>,
    /// TLS certificate chain (PEM): clients start TLS with NBD STARTTLS (nbds:// URIs).
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM): every client must present a certificate signed by one of them.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// With a certificate: require (the default) refuses clients that do not start TLS, on
    /// every listener; allow serves them too.
    #[arg(long, value_enum, value_name = "MODE", requires = "tls_cert")]
    pub tls: Option<TlsMode>,
    /// Unix socket path (default: STATE_DIR/nbd.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Milliseconds a client may take from connecting to the end of option haggling
    /// (default 10000); a client still haggling then is disconnected.
    #[arg(long, value_name = "MS")]
    pub handshake_timeout_ms: Option<u64>,
    /// Milliseconds a request may take to arrive once its first byte has, and a reply to be
    /// written (default 60000); idle connections between requests have no deadline.
    #[arg(long, value_name = "MS")]
    pub io_timeout_ms: Option<u64>,
    /// Most RAM the block cache (ARC) may use, buffers and headers together, e.g. 4G
    /// (default: half of the machine's memory, or of its cgroup's limit).
    #[arg(long, value_name = "SIZE", env = "CAIRN_ARC_MAX")]
    pub arc_max: Option<String>,
    /// Least the cache shrinks to under memory pressure (default: arc_max/32, at least 32M).
    #[arg(long, value_name = "SIZE", env = "CAIRN_ARC_MIN")]
    pub arc_min: Option<String>,
}

/// The size given to `--FLAG`.
fn parse_size_flag(flag: &str, text: &str) -> Result<u64> {
    cairn_dataset::properties::parse_size(text)
        .map_err(|err| anyhow::anyhow!("--{flag} {text}: {err}"))
}

/// Applies `--arc-max`/`--arc-min` to the process's cache.
pub fn apply_arc_limits(arc_max: Option<&str>, arc_min: Option<&str>) -> Result<()> {
    if arc_max.is_none() && arc_min.is_none() {
        return Ok(());
    }
    let cache = cairn_engine::process_cache();
    let stats = cache.stats();
    let max = match arc_max {
        Some(text) => parse_size_flag("arc-max", text)?,
        None => stats.get("c_max").unwrap_or(0),
    };
    let min = match arc_min {
        Some(text) => parse_size_flag("arc-min", text)?,
        None => cairn_engine::default_arc_min_bytes(max),
    };
    cache
        .set_limits(min, max)
        .map_err(|err| anyhow::anyhow!("{err}"))
}

/// Whether clients must start TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsMode {
    Require,
    Allow,
}

/// The server's memory budget for a cache of `arc_max_bytes`, checked against the memory the
/// process may use when the cache's size was asked for explicitly (the default cache is half
/// of memory and shrinks under pressure, so its budget is only stated).
fn memory_budget(
    arc_max_bytes: u64,
    explicit: bool,
    config: &ServerConfig,
) -> Result<MemoryBudget> {
    let budget = MemoryBudget::for_arc_max(arc_max_bytes, u64::from(config.max_request_bytes));
    let usable = cairn_engine::usable_memory_bytes(&cairn_engine::read_memory());
    if let Err(why) = budget.check_fits(usable) {
        if explicit {
            bail!("{why}");
        }
        eprintln!("cairn: note: {why}");
    }
    Ok(budget)
}

/// `memory budget: N bytes (SIZE): arc A + dirty D + ...`, every figure exact.
fn describe_budget(budget: &MemoryBudget) -> String {
    let parts: Vec<String> = budget
        .parts()
        .iter()
        .map(|(name, bytes)| format!("{name} {bytes}"))
        .collect();
    format!(
        "memory budget: {} bytes ({}): {}",
        budget.total_bytes(),
        crate::human::size(budget.total_bytes(), false),
        parts.join(" + ")
    )
}

impl ServeArgs {
    fn tls_settings(&self) -> Result<Option<TlsSettings>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let require = self.tls != Some(TlsMode::Allow);
        let settings =
            TlsSettings::from_pem_files(cert, key, self.tls_client_ca.as_deref(), require)
                .context("cannot set up TLS")?;
        Ok(Some(settings))
    }

    /// Refuses TCP on an address other than loopback without TLS.
    fn check_listen(&self, address: &str, tls: Option<&TlsSettings>) -> Result<()> {
        use std::net::ToSocketAddrs;
        let resolved: Vec<_> = address
            .to_socket_addrs()
            .with_context(|| format!("--listen {address}: not an ADDR:PORT"))?
            .collect();
        let exposed = resolved.iter().find(|addr| !addr.ip().is_loopback());
        if let (Some(exposed), None) = (exposed, tls) {
            bail!(
                "refusing to serve NBD on {exposed} without TLS: anyone who can reach it could read and write every volume (give --tls-cert and --tls-key, or listen on 127.0.0.1)"
            );
        }
        Ok(())
    }

    fn server_config(&self, tls: Option<TlsSettings>) -> ServerConfig {
        let mut config = ServerConfig {
            tls,
            ..ServerConfig::default()
        };
        if let Some(ms) = self.handshake_timeout_ms {
            config.handshake_timeout = std::time::Duration::from_millis(ms);
        }
        if let Some(ms) = self.io_timeout_ms {
            config.io_timeout = std::time::Duration::from_millis(ms);
        }
        config
    }
}

/// The NBD server's request buffers, per connection and in all, as the budget allows.
fn apply_budget(budget: &MemoryBudget, config: &mut ServerConfig) {
    config.max_total_inflight_bytes = budget.request_bytes as usize;
    config.max_inflight_bytes = budget.connection_request_bytes as usize;
}

/// NBD view of one volume, for one connection.
struct VolumeExport {
    volume: Arc<Volume>,
    /// Connections are spread over the volume's intent-log lanes, so independent clients
    /// commit in parallel.
    lane: usize,
}

fn export_error(err: DatasetError) -> ExportError {
    match err {
        DatasetError::ReadOnly(_) => ExportError::ReadOnly,
        DatasetError::NoSpace(_) => ExportError::NoSpace,
        DatasetError::OutOfRange { .. } => ExportError::OutOfRange,
        other => ExportError::Io(other.to_string()),
    }
}

impl VolumeExport {
    fn options(&self, fua: bool) -> WriteOptions {
        WriteOptions {
            fua,
            lane: self.lane,
        }
    }
}

impl Export for VolumeExport {
    fn size(&self) -> u64 {
        self.volume.size_bytes()
    }

    fn preferred_block_size(&self) -> u32 {
        self.volume.block_size()
    }

    fn readonly(&self) -> bool {
        self.volume.is_readonly()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.volume.read(offset, buf).map_err(export_error)
    }

    fn try_read_now(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.volume.try_read_cached(offset, buf).is_some()
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.volume
            .write_with(offset, data, self.options(fua))
            .map_err(export_error)
    }

    fn write_bytes(&self, offset: u64, data: bytes::Bytes, fua: bool) -> Result<(), ExportError> {
        self.volume
            .write_bytes_with(offset, data, self.options(fua))
            .map_err(export_error)
    }

    fn try_write_now(&self, offset: u64, data: &bytes::Bytes) -> Option<Result<(), ExportError>> {
        self.volume
            .try_write_now(offset, data, self.options(false))
            .map(|result| result.map_err(export_error))
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.volume.flush().map_err(export_error)
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError> {
        self.volume
            .trim_with(offset, len, self.options(fua))
            .map_err(export_error)
    }

    /// Zeros are stored as holes whatever the client asks: they read back as zeros either way
    /// and use no space (NO_HOLE is a hint about allocation, which a copy-on-write pool cannot
    /// honour anyway).
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        fua: bool,
        _may_trim: bool,
    ) -> Result<(), ExportError> {
        self.volume
            .write_zeroes_with(offset, len, self.options(fua))
            .map_err(export_error)
    }

    fn block_status(&self, offset: u64, len: u64) -> Result<Vec<(u64, u32)>, ExportError> {
        const HOLE: u32 = 1;
        const ZERO: u32 = 2;
        let runs = self
            .volume
            .block_status(offset, len)
            .map_err(export_error)?;
        Ok(runs
            .into_iter()
            .map(|(run_len, hole)| (run_len, if hole { HOLE | ZERO } else { 0 }))
            .collect())
    }
}

/// Every volume of every served pool (the same set forwarded commands work on, so a volume
/// created with `cairn create` is an export at once).
struct PoolExports {
    served: Arc<ServedPools>,
    /// Connections opened so far (picks each one's log lane).
    connections: AtomicUsize,
}

impl PoolExports {
    fn pool_for(&self, export: &str) -> Option<Arc<Pool>> {
        self.served.get(export.split('/').next()?)
    }
}

impl ExportProvider for PoolExports {
    fn list(&self) -> Vec<String> {
        let pools: Vec<Arc<Pool>> = self.served.pools.read().values().cloned().collect();
        pools
            .iter()
            .filter_map(|pool| pool.datasets().ok())
            .flatten()
            .filter(|dataset| dataset.kind == DatasetKind::Volume)
            .map(|dataset| dataset.name)
            .collect()
    }

    fn open(&self, name: &str) -> Option<Arc<dyn Export>> {
        let volume = self.pool_for(name)?.volume(name).ok()?;
        let lane = self.connections.fetch_add(1, Ordering::Relaxed);
        Some(Arc::new(VolumeExport { volume, lane }))
    }

    fn description(&self, name: &str) -> Option<String> {
        let volume = self.pool_for(name)?.volume(name).ok()?;
        Some(format!(
            "cairn volume {name} ({} bytes, volblocksize {})",
            volume.size_bytes(),
            volume.block_size()
        ))
    }
}

/// Opens the remembered pools and imports any new ones found in `dirs`. A remembered pool that
/// cannot be opened is reported and left out (the others are served; a later command naming it
/// tries again, `pool export` forgets it); `dirs` never bring in a pool of that name.
fn open_pools(
    ctx: &Context,
    dirs: &[PathBuf],
    budget: &MemoryBudget,
) -> Result<BTreeMap<String, Arc<Pool>>> {
    let mut pools = BTreeMap::new();
    let mut unavailable = Vec::new();
    for name in ctx.pool_names()? {
        let pool = match ctx.open_with(&name, pool_options_for(Some(budget))) {
            Ok(pool) => pool,
            Err(err) if unavailable_reason(&err).is_some() => {
                eprintln!("cairn: not serving: {err:#}");
                unavailable.push(name);
                continue;
            }
            Err(err) => return Err(err),
        };
        for note in pool.notes() {
            eprintln!("cairn: {note}");
        }
        pools.insert(name, Arc::new(pool));
    }
    for dir in dirs {
        let dir = std::path::absolute(dir)?;
        for found in discover_pools(&ImportSource::Directory(dir.clone())) {
            let name = found.config.pool_name.clone();
            if pools.contains_key(&name)
                || unavailable.contains(&name)
                || found.config.state == cairn_format::PoolState::Destroyed
            {
                continue;
            }
            let pool = Pool::import(
                &ImportSource::Directory(dir.clone()),
                &name,
                pool_options_for(Some(budget)),
            )
            .with_context(|| format!("cannot import pool '{name}' from {}", dir.display()))?;
            ctx.cache
                .insert(&name, &device_specs(&pool))
                .with_context(|| format!("cannot remember pool '{name}'"))?;
            ctx.record(&pool)?;
            pools.insert(name, Arc::new(pool));
        }
    }
    if pools.is_empty() && unavailable.is_empty() {
        bail!("no pools to serve (create one with cairn pool create, or pass -d DIR)");
    }
    Ok(pools)
}

/// Runs one forwarded command against the served pools, capturing its output.
fn executor(
    state_dir: PathBuf,
    served: Arc<ServedPools>,
) -> Arc<dyn Fn(Request) -> Reply + Send + Sync> {
    let one_at_a_time = Arc::new(Mutex::new(()));
    Arc::new(move |request: Request| {
        let _turn = one_at_a_time.lock();
        let argv = std::iter::once("cairn".to_string()).chain(request.args.iter().cloned());
        let cli = match crate::Cli::try_parse_from(argv) {
            Ok(cli) => cli,
            Err(err) => {
                let code = err.exit_code() as u32;
                let text = err.render().to_string().into_bytes();
                let (stdout, stderr) = if code == 0 {
                    (text, Vec::new())
                } else {
                    (Vec::new(), text)
                };
                return Reply {
                    exit_code: code,
                    stdout,
                    stderr,
                };
            }
        };
        if let Err(err) = std::env::set_current_dir(&request.cwd) {
            let message = format!("cairn: cannot use {}: {err}\n", request.cwd.display());
            return Reply {
                exit_code: 1,
                stdout: Vec::new(),
                stderr: message.into_bytes(),
            };
        }
        let (out, stdout) = Output::buffer();
        let (err, stderr) = Output::buffer();
        let ctx = Context {
            cache: PoolCache::new(state_dir.clone()),
            command_line: crate::context::command_line(&request.args),
            out,
            err,
            served: Some(served.clone()),
        };
        let exit_code = match crate::execute(&ctx, cli.command, &state_dir) {
            Ok(()) => 0,
            Err(error) => {
                ctx.err.text(format_args!("cairn: {error:#}\n"));
                1
            }
        };
        let stdout = stdout.lock().clone();
        let stderr = stderr.lock().clone();
        Reply {
            exit_code,
            stdout,
            stderr,
        }
    })
}

pub fn serve(ctx: &Context, args: &ServeArgs, state_dir: &std::path::Path) -> Result<()> {
    // The budget is checked before the cache takes the new limit (a cache sized for 100T
    // would size its bookkeeping for it).
    let arc_max_bytes = match args.arc_max.as_deref() {
        Some(text) => parse_size_flag("arc-max", text)?,
        None => cairn_engine::process_cache()
            .stats()
            .get("c_max")
            .unwrap_or(0),
    };
    let tls = args.tls_settings()?;
    if let Some(address) = &args.listen {
        args.check_listen(address, tls.as_ref())?;
    }
    let mut config = args.server_config(tls);
    let budget = memory_budget(arc_max_bytes, args.arc_max.is_some(), &config)?;
    apply_budget(&budget, &mut config);
    apply_arc_limits(args.arc_max.as_deref(), args.arc_min.as_deref())?;
    let control_listener = control::bind(state_dir)?;
    let served = Arc::new(ServedPools::default());
    let _ = served.budget.set(budget);
    *served.pools.write() = open_pools(ctx, &args.dirs, &budget)?;
    let exports = Arc::new(PoolExports {
        served: served.clone(),
        connections: AtomicUsize::new(0),
    });
    let socket_path = args
        .socket
        .clone()
        .unwrap_or_else(|| state_dir.join("nbd.sock"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("cairn-nbd")
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let server = Arc::new(NbdServer::new(exports.clone(), config));
    let _ = served.nbd.set(server.clone());
    let _ = served.started.set(std::time::Instant::now());
    let stop_control = Arc::new(AtomicBool::new(false));
    let control_thread = std::thread::Builder::new()
        .name("cairn-control".into())
        .spawn({
            let stop = stop_control.clone();
            let execute = executor(state_dir.to_path_buf(), served.clone());
            move || control::accept_loop(control_listener, stop, execute)
        })
        .context("cannot start the control thread")?;
    let result = runtime.block_on(async {
        let tcp = match &args.listen {
            Some(address) => Some(
                tokio::net::TcpListener::bind(address)
                    .await
                    .with_context(|| format!("cannot listen on {address}"))?,
            ),
            None => None,
        };
        let unix = cairn_nbd::bind_unix(&socket_path, 0o600)
            .with_context(|| format!("cannot listen on {}", socket_path.display()))?;
        let tcp_address = tcp.as_ref().map(|tcp| tcp.local_addr()).transpose()?;
        announce(
            &exports.list(),
            &socket_path,
            tcp_address,
            server.config().tls.as_ref(),
            &describe_budget(&budget),
        );
        // Both listeners and the signal watch run in this one task, so nothing here needs to
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
        tokio::select! {
            result = &mut serving => {
                result.context("the NBD listeners failed")?;
            }
            signal = wait_for_stop_signal() => {
                signal?;
                eprintln!("cairn: stopping: finishing requests in flight");
                server.shutdown();
                serving.await.context("the NBD listeners failed")?;
            }
        }
        server.wait_idle().await;
        anyhow::Ok(())
    });
    let _ = std::fs::remove_file(&socket_path);
    stop_control.store(true, Ordering::SeqCst);
    control::wake(state_dir);
    let _ = control_thread.join();
    let _ = std::fs::remove_file(control::socket_path(state_dir));
    let pools = std::mem::take(&mut *served.pools.write());
    let mut failures = Vec::new();
    for (name, pool) in pools {
        eprintln!("cairn: syncing and exporting pool '{name}'");
        if let Err(err) = pool.export() {
            failures.push(format!("pool '{name}': {err:#}"));
        }
    }
    result?;
    if !failures.is_empty() {
        bail!("{}", failures.join("; "));
    }
    Ok(())
}

/// Prints where the exports are and how to reach them.
fn announce(
    exported: &[String],
    socket_path: &std::path::Path,
    tcp: Option<std::net::SocketAddr>,
    tls: Option<&TlsSettings>,
    budget: &str,
) {
    let scheme = if tls.is_some_and(|tls| tls.require) {
        "nbds"
    } else {
        "nbd"
    };
    let unix_uri = format!("{scheme}+unix:///?socket={}", socket_path.display());
    match tcp {
        Some(address) => println!(
            "cairn: serving {} export(s) on {scheme}://{address} and {unix_uri}",
            exported.len()
        ),
        None => println!(
            "cairn: serving {} export(s) on {unix_uri} (TCP only with --listen ADDR:PORT)",
            exported.len()
        ),
    }
    println!("cairn: {budget}");
    if let Some(tls) = tls {
        println!(
            "TLS: {}{}",
            if tls.require {
                "required (plain clients are refused)"
            } else {
                "offered (plain clients are served too)"
            },
            if tls.verifies_clients {
                "; clients must present a certificate"
            } else {
                ""
            }
        );
    }
    let export_uri = |name: &str| match tcp {
        Some(address) => format!("{scheme}://{address}/{name}"),
        None => format!("{scheme}+unix:///{name}?socket={}", socket_path.display()),
    };
    for name in exported {
        println!("  {}", export_uri(name));
    }
    if let Some(first) = exported.first() {
        println!("connect with, for example:");
        let certificates = if scheme == "nbds" {
            // libnbd reads ca-cert.pem (and client-cert.pem, client-key.pem) from DIR.
            "?tls-certificates=DIR"
        } else {
            ""
        };
        match tcp {
            Some(address) => println!("  nbdinfo --list '{scheme}://{address}{certificates}'"),
            None => println!("  nbdinfo --list '{unix_uri}'"),
        }
        if scheme == "nbd" {
            println!(
                "  qemu-io -f raw -c 'read -v 0 512' '{}'",
                export_uri(first)
            );
        }
    }
    println!("other cairn commands keep working; stop with Ctrl-C (pools are synced and exported)");
}

async fn wait_for_stop_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("cannot watch SIGINT")?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
