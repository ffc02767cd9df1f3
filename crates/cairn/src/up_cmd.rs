//! `cairn up`: the embedded default, so a fresh machine gets a working pool with one command.
//!
//! Everything lives under the data directory: two sparse device files forming a mirror
//! (`d0.img`, `d1.img`), a separate log device (`log.img`), and the pool cache (`state/`). The first run creates the pool `cairn` and
//! the volume `cairn/vol0`; later runs find the pool in the cache (or import it from the
//! directory if the cache was lost) and show it. Every run also makes the filesystem
//! `cairn/fs0` with `sharenfs=on` if the pool lacks it (a pool made before it existed gets it
//! too), and the server then shares it over NFSv3 on loopback (`--nfs`, by default
//! 127.0.0.1:12049: an unprivileged port, so no root is needed, and not 2049, which a host's
//! own NFS server may hold), printing the mount command. Nothing here bypasses the ordinary
//! commands: `up` runs the same code paths as `pool create`, `create -V`, `create -o
//! sharenfs=on`, `pool import` and `pool status`.

use crate::context::Context;
use crate::context::say;
use crate::{CreateArgs, ListArgs, ListFormat, PoolCreateArgs, PoolImportArgs, PoolStatusArgs};
use crate::{dataset_cmd, pool_cmd, remote};
use anyhow::{Context as _, Result};
use cairn_frontend::admin::{AdminReply, AdminRequest};
use clap::Args;
use std::path::PathBuf;

const POOL: &str = "cairn";
const VOLUME: &str = "cairn/vol0";
/// The filesystem `up` shares over NFS.
pub const SHARED_FILESYSTEM: &str = "cairn/fs0";

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Where the device files and the pool cache live.
    #[arg(long, value_name = "DIR", default_value = "./cairn-data")]
    pub data_dir: PathBuf,
    /// Size of each (sparse) device file on first run.
    #[arg(long, value_name = "SIZE", default_value = "1G")]
    pub size: String,
    /// Size of the volume created on first run.
    #[arg(long, value_name = "SIZE", default_value = "512M")]
    pub volsize: String,
    /// Set up and show the pool, then exit instead of serving it.
    #[arg(long)]
    pub no_serve: bool,
    /// TCP address to serve on besides the Unix socket (loopback, for convenience: anyone on
    /// this machine can connect to it; the Unix socket is the private way).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:10809")]
    pub listen: String,
    /// Most RAM the block cache (ARC) may use (default: half of the machine's memory).
    #[arg(long, value_name = "SIZE", env = "CAIRN_ARC_MAX")]
    pub arc_max: Option<String>,
    /// Also serve Prometheus metrics and the live analytics page here (e.g. 127.0.0.1:9440).
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<String>,
    /// Serve NFSv3 here (loopback: AUTH_SYS trusts what clients claim), sharing cairn/fs0;
    /// `none` turns it off. 12049: unprivileged, and clear of a host NFS server's 2049.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:12049")]
    pub nfs: String,
}

impl UpArgs {
    pub fn serve_args(&self) -> crate::serve_cmd::ServeArgs {
        crate::serve_cmd::ServeArgs {
            dirs: Vec::new(),
            listen: Some(self.listen.clone()),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            tls: None,
            socket: None,
            handshake_timeout_ms: None,
            io_timeout_ms: None,
            arc_max: self.arc_max.clone(),
            arc_min: None,
            l2_write_max_per_day: None,
            http: self.http.clone(),
            nfs: (self.nfs != "none").then(|| self.nfs.clone()),
            nfs_share: Some(SHARED_FILESYSTEM.to_string()),
            nfs_memory_max: None,
        }
    }
}

/// Whether the pool has dataset `name`.
fn has_dataset(ctx: &Context, name: &str) -> Result<bool> {
    let request = AdminRequest::Datasets {
        pools: vec![POOL.to_string()],
    };
    match remote::call(ctx, request)? {
        AdminReply::Datasets(pools) => Ok(pools.iter().any(|pool| {
            pool.datasets
                .as_ref()
                .is_ok_and(|rows| rows.iter().any(|row| row.name == name))
        })),
        other => Err(remote::unexpected(&other)),
    }
}

pub fn up(ctx: &Context, args: &UpArgs) -> Result<()> {
    // Durably: the pool's device files go in it.
    cairn_frontend::cache::create_dir_durably(&args.data_dir)
        .with_context(|| format!("cannot create data directory {}", args.data_dir.display()))?;
    let data_dir = std::path::absolute(&args.data_dir)?;
    let devices = [data_dir.join("d0.img"), data_dir.join("d1.img")];
    if ctx.cache.devices(POOL)?.is_none() {
        if devices.iter().any(|path| path.exists()) {
            say!(ctx, "importing pool '{POOL}' from {}", data_dir.display());
            pool_cmd::import(
                ctx,
                &PoolImportArgs {
                    dirs: vec![data_dir.clone()],
                    destroyed: false,
                    ignore_missing_log: false,
                    rewind: false,
                    dry_run: false,
                    options: Vec::new(),
                    pool: Some(POOL.into()),
                },
            )?;
        } else {
            say!(
                ctx,
                "creating pool '{POOL}' (mirror of two {} sparse files, and a log device) and volume '{VOLUME}' in {}",
                args.size,
                data_dir.display()
            );
            let mut vdevs = vec!["mirror".to_string()];
            vdevs.extend(devices.iter().map(|path| path.display().to_string()));
            vdevs.push("log".to_string());
            vdevs.push(data_dir.join("log.img").display().to_string());
            pool_cmd::create(
                ctx,
                &PoolCreateArgs {
                    size: Some(args.size.clone()),
                    force: false,
                    pool_properties: Vec::new(),
                    root_properties: Vec::new(),
                    name: POOL.into(),
                    vdevs,
                },
            )?;
            dataset_cmd::create(
                ctx,
                &CreateArgs {
                    volsize: Some(args.volsize.clone()),
                    sparse: false,
                    properties: Vec::new(),
                    dataset: VOLUME.into(),
                },
            )?;
        }
    }
    if !has_dataset(ctx, SHARED_FILESYSTEM)? {
        say!(
            ctx,
            "creating filesystem '{SHARED_FILESYSTEM}' (sharenfs=on: shared over NFS while the server runs)"
        );
        dataset_cmd::create(
            ctx,
            &CreateArgs {
                volsize: None,
                sparse: false,
                properties: vec![("sharenfs".into(), "on".into())],
                dataset: SHARED_FILESYSTEM.into(),
            },
        )?;
    }
    pool_cmd::status(
        ctx,
        &PoolStatusArgs {
            verbose: false,
            json: false,
            pools: vec![POOL.to_string()],
        },
    )?;
    say!(ctx);
    dataset_cmd::list(
        ctx,
        &ListArgs {
            format: ListFormat {
                scripted: false,
                exact: false,
            },
            json: false,
            columns: Vec::new(),
            types: Vec::new(),
            recursive: true,
            datasets: vec![POOL.into()],
        },
    )?;
    say!(ctx);
    // The state directory this run really uses: `--state-dir` or CAIRN_STATE_DIR when given,
    // else the data directory's `state/`.
    let state_dir = std::path::absolute(ctx.cache.dir())?;
    say!(
        ctx,
        "Pool '{POOL}' is ready. Other commands use it with: cairn --state-dir {} ...",
        state_dir.display()
    );
    Ok(())
}
