//! `cairn serve`: the CLI's face of the server. It turns flags into the settings of
//! `cairn_frontend::serve` (which opens the pools, serves every volume as the NBD export
//! `pool/volume` on a Unix socket of mode 0600 and, with `--listen`, on TCP; refuses TCP beyond
//! loopback without TLS; drains and exports on SIGINT/SIGTERM) and renders what it reports:
//! the announcement of where the exports are, and its notes on stderr.
//!
//! TLS: `--tls-cert`/`--tls-key` offer NBD STARTTLS; plain clients are refused unless
//! `--tls allow`; `--tls-client-ca` makes clients show a certificate.
//! Memory: one budget derived from `--arc-max` (`MemoryBudget`) limits the pools' dirty data
//! and the NBD and NFS servers' request buffers (NFS's own figure with `--nfs-memory-max`); it
//! is printed at start and shown by `stat memory`.
//! The control socket's typed requests are answered by `cairn_frontend::serve` itself
//! (`admin::handle`, one at a time; sends and receives beside them): nothing of the CLI runs
//! for them. SIGPIPE is ignored while serving (`ignore_sigpipe`).

use crate::context::Context;
use anyhow::{Context as _, Result};
use cairn_engine::MemoryBudget;
use cairn_frontend::PoolAccess;
use cairn_frontend::serve::{Note, Ready, ServeSettings};
use cairn_nbd::{ServerConfig, TlsSettings};
use clap::Args;
use std::path::PathBuf;

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
    /// Serve Prometheus metrics (/metrics) and the live analytics page (/) on this address,
    /// e.g. 127.0.0.1:9440 (off by default). An address other than loopback needs TLS
    /// (--tls-cert/--tls-key), which makes it HTTPS.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<String>,
    /// Serve NFSv3 on this address, e.g. 127.0.0.1:2049 (off by default): every filesystem
    /// with `sharenfs` not off as /POOL/DATASET, MOUNT and PORTMAP on the same port, AUTH_SYS
    /// with root squashed (unless `sharenfs=no_root_squash`), to the clients its lists name
    /// (`sharenfs='rw=10.0.0.0/8,ro=192.168.1.0/24'`). An address beyond loopback needs such
    /// lists on every shared filesystem; clients mount with `nolock` (no NLM).
    #[arg(long, value_name = "ADDR:PORT")]
    pub nfs: Option<String>,
    /// Most memory the NFS server's calls may hold at once over all its connections (their
    /// records, decoded arguments and replies), e.g. 256M (default: the memory budget's
    /// request allowance). A connection that finds no room stops reading until calls finish.
    #[arg(long, value_name = "SIZE", requires = "nfs")]
    pub nfs_memory_max: Option<String>,
    /// The filesystem whose NFS mount command the announcement spells out (`cairn up`'s).
    #[arg(skip)]
    pub nfs_share: Option<String>,
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
    /// Most bytes each cache device may be written per day once it has been filled once, to
    /// spare flash endurance, e.g. 50G (default: no limit). Feeding beyond it is dropped;
    /// `stat l2arc` shows what is left.
    #[arg(long, value_name = "SIZE")]
    pub l2_write_max_per_day: Option<String>,
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
        cairn_frontend::serve::check_listen(address, tls.as_ref())?;
    }
    if let Some(address) = &args.http {
        cairn_frontend::serve::check_http_listen(address, tls.as_ref())?;
    }
    if let Some(address) = &args.nfs {
        cairn_frontend::serve::check_nfs_listen(address)?;
    }
    let config = args.server_config(tls);
    let checked = cairn_frontend::admin::memory_budget(
        arc_max_bytes,
        args.arc_max.is_some(),
        u64::from(config.max_request_bytes),
    )?;
    if let Some(note) = &checked.note {
        eprintln!("cairn: note: {note}");
    }
    let budget = checked.budget;
    let nfs_memory_max_bytes = args
        .nfs_memory_max
        .as_deref()
        .map(|text| parse_size_flag("nfs-memory-max", text))
        .transpose()?;
    let l2_write_bytes_per_day = args
        .l2_write_max_per_day
        .as_deref()
        .map(|text| parse_size_flag("l2-write-max-per-day", text))
        .transpose()?;
    apply_arc_limits(args.arc_max.as_deref(), args.arc_min.as_deref())?;
    // The pools this server opens, imports or creates get the cache devices' write budget.
    let access = PoolAccess {
        cache: ctx.access.cache.clone(),
        served: None,
        opener: ctx.access.opener.clone(),
        read_trace_dir: ctx.access.read_trace_dir.clone(),
        l2_write_bytes_per_day,
    };
    let dirs = args
        .dirs
        .iter()
        .map(std::path::absolute)
        .collect::<std::io::Result<Vec<_>>>()
        .context("cannot resolve -d DIR")?;
    let settings = ServeSettings {
        state_dir: state_dir.to_path_buf(),
        dirs,
        socket_path: args
            .socket
            .clone()
            .unwrap_or_else(|| state_dir.join("nbd.sock")),
        listen: args.listen.clone(),
        nbd: config,
        budget,
        command_line: ctx.command_line.clone(),
        http: args.http.clone(),
        nfs: args.nfs.clone(),
        nfs_memory_max_bytes,
    };
    let notes = |note: Note| eprintln!("cairn: {note}");
    let budget_line = describe_budget(&budget);
    ignore_sigpipe();
    cairn_frontend::serve::serve(
        &access,
        settings,
        &notes,
        |ready: &Ready<'_>| announce(ready, &budget_line, args.nfs_share.as_deref()),
        wait_for_stop_signal,
    )?;
    Ok(())
}

/// A server writes send streams into its clients' pipes (`cairn send | ...`): a reader that
/// goes away must fail that write with EPIPE, not kill the server and every client with it.
/// (`main` restores SIGPIPE's default for one-shot commands, which should end quietly.)
fn ignore_sigpipe() {
    // SAFETY: SIG_IGN is a valid disposition for SIGPIPE, and setting it affects only how a
    // write to a closed pipe or socket ends (an error instead of the signal).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

/// Prints where the exports are and how to reach them; `nfs_share`: a shared filesystem
/// whose mount command is spelled out.
fn announce(ready: &Ready<'_>, budget: &str, nfs_share: Option<&str>) {
    let exported = &ready.exports;
    let socket_path = ready.socket_path;
    let tcp = ready.tcp;
    let tls: Option<&TlsSettings> = ready.tls;
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
    if let Some(http) = ready.http {
        let scheme = if tls.is_some() { "https" } else { "http" };
        println!(
            "cairn: metrics on {scheme}://{http}/metrics, analytics page on {scheme}://{http}/"
        );
    }
    if let Some(nfs) = ready.nfs {
        let port = nfs.port();
        // Listening on every address (0.0.0.0, [::]): clients name this machine.
        let host = match nfs.ip() {
            ip if ip.is_unspecified() => "SERVER".to_string(),
            std::net::IpAddr::V6(ip) => format!("[{ip}]"),
            ip => ip.to_string(),
        };
        println!(
            "cairn: NFSv3 on {nfs} (filesystems whose sharenfs is not off, to the clients its lists name); mount with: mount -t nfs -o vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock {host}:/POOL/DATASET DIR (NFSv4.1, first step: -o vers=4.1,port={port})"
        );
        if let Some(share) = nfs_share {
            println!(
                "cairn: {share} is shared over NFS; mount it with: mount -t nfs -o vers=3,proto=tcp,nolock,port={port},mountport={port},mountproto=tcp {host}:/{share} /mnt"
            );
        }
    }
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

/// SIGINT or SIGTERM.
async fn wait_for_stop_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = terminate.recv() => {}
    }
    Ok(())
}
