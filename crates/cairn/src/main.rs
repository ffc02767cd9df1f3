//! # cairn: the command-line front end
//!
//! `cairn pool …` mirrors zpool and `cairn create|destroy|list|get|set` mirror zfs. The binary
//! parses and renders: argument parsing (clap), output formatting (`table`, `human`, `json`),
//! and the environment read once (`environment`). What front ends share (the pool cache, pool
//! access, the administration library with its device-safety and rollback policy, the NBD
//! adapter, the control protocol, the server's life) is `cairn-frontend`; all storage work is
//! done by `cairn-engine`. Policy does not live here: a command parses its arguments into a
//! typed request (`cairn_frontend::admin::AdminRequest`), hands it to `remote::call`, and
//! renders the typed reply.
//!
//! Process contract: output on stdout, progress and diagnostics on stderr; exit 0 on success,
//! 1 on any error (printed once as `cairn: <message>` with its causes), 2 on a usage error
//! (clap, or a request a server of another version cannot read). While `cairn serve` runs for
//! the state directory, `remote::call` sends the request to it and it answers from its live
//! pools; without a server, the same `admin::handle` runs here, opening each pool it needs for
//! the request's length. `up`, `serve` and `install-mount-helper` run here only.

mod context;
mod dataset_cmd;
mod diff_cmd;
mod environment;
mod fs_diff_cmd;
mod human;
mod iostat_cmd;
mod json;
mod mirror_cmd;
mod mount_cmd;
mod pool_cmd;
mod remote;
mod send_cmd;
mod send_progress;
mod serve_cmd;
mod stat_arc_cmd;
mod stat_cmd;
mod stat_nfs_cmd;
mod table;
mod up_cmd;
mod vdevs;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "cairn",
    version,
    about = "cairn: a ZFS-like storage pool in user space"
)]
struct Cli {
    /// Directory holding the pool cache (default: $XDG_STATE_HOME/cairn or ~/.local/state/cairn).
    #[arg(long, global = true, env = "CAIRN_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The embedded default: create (first run) or import the pool kept in a data directory and
    /// show it.
    Up(up_cmd::UpArgs),
    /// Serve every volume of the imported pools over NBD (and accept other commands on a
    /// control socket while running).
    Serve(serve_cmd::ServeArgs),
    /// Pool administration (like zpool).
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Create a filesystem (cairn create [-o prop=value]... POOL/NAME) or a volume
    /// (cairn create -V SIZE [-s] [-o prop=value]... POOL/NAME).
    Create(CreateArgs),
    /// Mount a filesystem through FUSE (in the running server; one is started if none runs).
    Mount {
        /// Mount options for this mount, over the dataset's properties: ro, rw, dev, nodev,
        /// suid, nosuid, exec, noexec (comma-separated).
        #[arg(short = 'o', default_value = "")]
        options: String,
        /// POOL/NAME
        dataset: String,
        /// Where (default: the dataset's mountpoint property).
        mountpoint: Option<PathBuf>,
    },
    /// Install `mount.fuse.cairn` (a link to this program) in DIR, so that `mount -t
    /// fuse.cairn POOL/NAME DIR` and /etc/fstab lines mount through cairn.
    InstallMountHelper {
        /// Where mount(8) looks for helpers.
        #[arg(long, default_value = "/sbin")]
        dir: PathBuf,
    },
    /// Unmount a filesystem mounted by the server.
    Unmount {
        /// POOL/NAME or the mountpoint.
        target: String,
    },
    /// Destroy a dataset or a snapshot (POOL/NAME@SNAP).
    Destroy {
        /// For a snapshot with user holds: destroy it when the last hold is released.
        #[arg(short = 'd')]
        deferred: bool,
        /// Dry run: change nothing (with -v: say what would be destroyed and freed).
        #[arg(short = 'n')]
        dry_run: bool,
        /// Say what is (or would be) destroyed and freed.
        #[arg(short = 'v')]
        verbose: bool,
        /// For a snapshot: destroy its clones first (with their snapshots and clones).
        #[arg(short = 'R', conflicts_with_all = ["deferred", "dry_run", "verbose"])]
        dependents: bool,
        /// POOL/NAME, POOL/NAME@SNAP, or a range of snapshots POOL/NAME@FIRST%LAST
        dataset: String,
    },
    /// Place a user hold TAG on snapshots: a held snapshot cannot be destroyed.
    Hold {
        tag: String,
        #[arg(required = true, value_name = "DATASET@SNAPSHOT")]
        names: Vec<String>,
    },
    /// Release user hold TAG from snapshots.
    Release {
        tag: String,
        #[arg(required = true, value_name = "DATASET@SNAPSHOT")]
        names: Vec<String>,
    },
    /// List the user holds of snapshots.
    Holds {
        #[command(flatten)]
        format: ListFormat,
        #[arg(required = true, value_name = "DATASET@SNAPSHOT")]
        names: Vec<String>,
    },
    /// Take snapshots: read-only, point-in-time copies of datasets (cairn snapshot [-r]
    /// POOL/NAME@SNAP...). Several, of one pool, are taken atomically in one txg.
    Snapshot {
        /// Also every descendant of each dataset, under the same snapshot name.
        #[arg(short = 'r')]
        recursive: bool,
        /// DATASET@SNAPSHOT
        #[arg(required = true, value_name = "DATASET@SNAPSHOT")]
        names: Vec<String>,
    },
    /// Create a dataset from a snapshot: it shares the snapshot's blocks and costs nothing
    /// until written.
    Clone {
        /// Property to set at creation.
        #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = parse_assignment)]
        properties: Vec<(String, String)>,
        /// DATASET@SNAPSHOT
        origin: String,
        /// POOL/NAME
        target: String,
    },
    /// Keep a snapshot's place in its dataset's history without its data: enough as the
    /// source of an incremental send once the snapshot is destroyed.
    Bookmark {
        /// DATASET@SNAPSHOT (or DATASET#BOOKMARK to copy one)
        source: String,
        /// DATASET#BOOKMARK
        target: String,
    },
    /// Make a clone independent of its origin: the origin snapshot and the older ones move
    /// to it, and its origin's dataset becomes its clone.
    Promote {
        /// POOL/NAME of a clone
        dataset: String,
    },
    /// Roll a dataset back to a snapshot: everything written since is discarded. A mounted
    /// filesystem stays mounted and shows the snapshot's state at once (files made since are
    /// gone, files deleted since are back; a file open on one made since fails with EIO).
    Rollback {
        /// Destroy snapshots newer than this one (else they refuse the rollback).
        #[arg(short = 'r')]
        destroy_newer: bool,
        /// Roll a volume back even while NBD clients have it open.
        #[arg(short = 'f')]
        force: bool,
        /// DATASET@SNAPSHOT
        snapshot: String,
    },
    /// Write a snapshot as a send stream to stdout (never a terminal): full, or with -i the
    /// changes since an older snapshot (or a bookmark whose snapshot still exists).
    Send(send_cmd::SendArgs),
    /// Read a send stream from stdin into a new dataset, with the sent snapshot; a damaged or
    /// cut stream leaves nothing. Incremental streams are not received yet.
    #[command(alias = "recv")]
    Receive(send_cmd::ReceiveArgs),
    /// What differs between a snapshot and a later snapshot or the dataset itself. Filesystems
    /// (as zfs diff): one line per path, M changed, + created, - removed, R renamed (old ->
    /// new). With --blocks (volumes): the byte ranges, OFFSET LENGTH per line.
    Diff(DiffArgs),
    /// List datasets.
    List(ListArgs),
    /// Show dataset properties.
    Get(GetArgs),
    /// Set dataset properties.
    Set(SetArgs),
    /// Subsystem statistics (like zpool iostat / arcstat for one layer).
    #[command(subcommand)]
    Stat(StatCommand),
}

#[derive(Debug, Subcommand)]
enum StatCommand {
    /// Intent log: commits, group commit, log blocks and fill, commit latency, log devices.
    Zil {
        #[command(flatten)]
        format: ListFormat,
        /// Pools to show (default: every imported pool).
        pools: Vec<String>,
    },
    /// RAM cache (ARC): hits and misses by demand/prefetch x data/metadata, I/O hits, ghost
    /// hits, evictions, size and target; with INTERVAL [COUNT], one line per interval.
    Arc(stat_arc_cmd::StatArcArgs),
    /// Pipeline and device I/O: blocks read and written, checksum errors, repairs; per device
    /// requests against device calls (aggregation), bytes, FUA writes, flushes, latencies.
    Io {
        #[command(flatten)]
        format: ListFormat,
        /// Pools to show (default: every imported pool).
        pools: Vec<String>,
    },
    /// The SSD tier (cache devices): size, hits and misses, feeding, evictions, errors, the
    /// blocks indexed and RAM per block (index and admission sketch share), rebuild progress
    /// after an import.
    L2arc {
        #[command(flatten)]
        format: ListFormat,
        /// [POOL...] [INTERVAL [COUNT]]: with INTERVAL, one line per pool and interval (rates),
        /// from the running server.
        args: Vec<String>,
    },
    /// Mounted filesystems: calls by kind (lookups, creates, reads, writes, fsyncs...) with
    /// bytes, errors and latency percentiles, and the partial-write path (writes merged later
    /// instead of read first).
    Fs {
        #[command(flatten)]
        format: ListFormat,
        /// Pools to show (default: every pool with a mounted filesystem).
        pools: Vec<String>,
    },
    /// The server's memory budget: each allowance's limit against what it holds now, and the
    /// process's resident memory against the whole.
    Memory {
        #[command(flatten)]
        format: ListFormat,
    },
    /// Snapshots: snapshots taken and destroyed, clones, promotes, rollbacks, background frees
    /// (deadlist entries scanned, blocks freed, txgs), freeing, what deadlists hold, and the
    /// latency of snapshot commands (call to durable).
    Snapshots {
        #[command(flatten)]
        format: ListFormat,
        /// JSON output (fields documented in docs/json.md).
        #[arg(short = 'j', conflicts_with_all = ["scripted", "exact"])]
        json: bool,
        /// Pools to show (default: every imported pool).
        pools: Vec<String>,
    },
    /// The NFS server (`serve --nfs`): calls by procedure with latency percentiles, bytes,
    /// WRITEs by stability asked and answered, COMMITs and what they carried, stale handles,
    /// duplicate-cache replies, refusals, connections, and per client address.
    Nfs {
        #[command(flatten)]
        format: ListFormat,
        /// JSON output (fields documented in docs/json.md).
        #[arg(short = 'j', conflicts_with_all = ["scripted", "exact"])]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum PoolCommand {
    /// Create a pool: NAME then vdevs (PATH | mirror PATH PATH... | raidz[1-3] PATH PATH...;
    /// then optionally log ... and cache PATH...; PATH may be emu:MODEL:PATH).
    Create(PoolCreateArgs),
    /// Add separate log devices or cache devices to a pool: NAME log [mirror] PATH... |
    /// NAME cache PATH...
    Add(PoolAddArgs),
    /// Remove a log device (its name in `pool status`, e.g. a path or mirror-N; what it holds
    /// is made durable in the pool first, so nothing is lost) or a cache device.
    Remove {
        pool: String,
        /// The log vdev: a device path or mirror-N.
        vdev: String,
    },
    /// Attach NEW beside EXISTING: a single device becomes a two-way mirror, a mirror gains a
    /// side; the new side is resilvered (only live blocks are copied).
    Attach(PoolAttachArgs),
    /// Detach a side of a mirror (refused if no other side holds all the data).
    Detach {
        pool: String,
        /// The device, as `pool status` names it.
        device: String,
    },
    /// Replace OLD by NEW: attach NEW beside OLD, resilver, then detach OLD.
    Replace(PoolReplaceArgs),
    /// Show health, last scrub and the vdev tree.
    Status(PoolStatusArgs),
    /// List pools with their space and health.
    List {
        #[command(flatten)]
        format: ListFormat,
        /// JSON output (fields documented in docs/json.md).
        #[arg(short = 'j', conflicts_with_all = ["scripted", "exact"])]
        json: bool,
        /// Pools to list (default: every imported pool).
        pools: Vec<String>,
    },
    /// Verify every copy of every block and repair bad copies.
    Scrub { pool: String },
    /// Sync and mark a pool exported so it can be imported elsewhere.
    Export { pool: String },
    /// List pools found on devices, or import one by name or guid.
    Import(PoolImportArgs),
    /// Check (like zdb -b): checksums of every copy and space accounting; of an exported
    /// pool with -d (like zdb -e), never writing.
    Check(PoolCheckArgs),
    /// Destroy a pool; its devices become free for reuse.
    Destroy {
        /// Forget a pool that cannot be opened (its devices are left as they are).
        #[arg(short, long)]
        force: bool,
        pool: String,
    },
    /// Write out every pool's dirty data now (a txg sync), like zpool sync.
    Sync {
        /// Pools to sync (default: every imported pool).
        pools: Vec<String>,
    },
    /// Reset the READ/WRITE/CKSUM error counters of every device; a faulted mirror side
    /// whose device answers again rejoins and is resilvered for what it missed.
    Clear {
        pool: String,
        /// Resilver returning sides at most this fast, e.g. 50M (default: as fast as the
        /// devices go).
        #[arg(long, value_name = "RATE")]
        resilver_rate: Option<String>,
    },
    /// Show the commands that changed a pool.
    History { pool: String },
    /// Per-volume I/O statistics of a running server: operations, bandwidth, latency.
    Iostat(iostat_cmd::IostatArgs),
    /// Show recent txg timings, and the writers the write throttle delayed (how many, for how
    /// long in all) or blocked while each txg was open.
    Txgs {
        #[command(flatten)]
        format: ListFormat,
        pool: String,
    },
    /// Set a pool setting: arc_max=SIZE | arc_min=SIZE (the RAM cache is the server's, shared
    /// by every pool: the change applies to all, at once, until the server stops; start it
    /// with --arc-max to keep a value).
    Set {
        /// PROPERTY=VALUE
        assignment: String,
        pool: String,
    },
    /// Show pool settings (arc_max, arc_min, and the cache's current target and size).
    Get {
        #[command(flatten)]
        format: ListFormat,
        pool: String,
    },
}

/// `-H` and `-p`, shared by every list-style command.
#[derive(Debug, Args, Clone, Copy)]
struct ListFormat {
    /// Scripted mode: no header, fields separated by one tab.
    #[arg(short = 'H')]
    scripted: bool,
    /// Exact (parsable) numbers.
    #[arg(short = 'p')]
    exact: bool,
}

#[derive(Debug, Args)]
struct PoolCreateArgs {
    /// Create missing device files (sparse) of this size, e.g. 2G.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Use devices even if they hold data or belong to another pool (never one of an imported pool).
    #[arg(short, long)]
    force: bool,
    /// Pool property (ashift=N).
    #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = parse_assignment)]
    pool_properties: Vec<(String, String)>,
    /// Property of the pool's root dataset.
    #[arg(short = 'O', value_name = "PROP=VALUE", value_parser = parse_assignment)]
    root_properties: Vec<(String, String)>,
    /// Pool name.
    name: String,
    /// PATH... | mirror PATH PATH... | raidz[1-3] PATH PATH... (at least parity + 1) [log ...] [cache PATH...] ; PATH may be emu:MODEL:PATH (hdd-7200, ssd-sata, ssd-plp, nvme, ram).
    #[arg(required = true, value_name = "VDEV")]
    vdevs: Vec<String>,
}

#[derive(Debug, Args)]
struct PoolAddArgs {
    /// Create missing device files (sparse) of this size, e.g. 1G.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Use devices even if they hold data or belong to another pool (never one of an imported pool).
    #[arg(short, long)]
    force: bool,
    /// Pool name.
    pool: String,
    /// log PATH... | log mirror PATH PATH... | cache PATH... ; PATH may be emu:MODEL:PATH.
    #[arg(required = true, value_name = "VDEV")]
    vdevs: Vec<String>,
}

/// What `pool attach` and `pool replace` share.
#[derive(Debug, Args)]
struct ResilverArgs {
    /// Create a missing NEW file (sparse) of this size, e.g. 1G.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Use NEW even if it belongs to another pool.
    #[arg(short, long)]
    force: bool,
    /// Copy at most this much per second, e.g. 50M (default: as fast as the devices go).
    #[arg(long, value_name = "RATE")]
    resilver_rate: Option<String>,
    /// Return once the resilver has started instead of waiting for it (a one-shot command
    /// that does not wait leaves the rest to the next import or `cairn serve`).
    #[arg(long)]
    no_wait: bool,
}

#[derive(Debug, Args)]
struct PoolAttachArgs {
    #[command(flatten)]
    resilver: ResilverArgs,
    pool: String,
    /// A device of the pool (a single device or a mirror side).
    existing: String,
    /// The new side; PATH may be emu:MODEL:PATH.
    new: String,
}

#[derive(Debug, Args)]
struct PoolReplaceArgs {
    #[command(flatten)]
    resilver: ResilverArgs,
    pool: String,
    /// The device to replace, as `pool status` names it (it may be missing).
    old: String,
    /// The device taking its place; PATH may be emu:MODEL:PATH.
    new: String,
}

#[derive(Debug, Args)]
struct PoolStatusArgs {
    /// List the places with permanent (unrecoverable) data errors.
    #[arg(short = 'v')]
    verbose: bool,
    /// JSON output (fields documented in docs/json.md).
    #[arg(short = 'j')]
    json: bool,
    /// Pools to show (default: every imported pool).
    pools: Vec<String>,
}

#[derive(Debug, Args)]
struct PoolImportArgs {
    /// Directory to search for devices (repeatable; default /dev).
    #[arg(short = 'd', value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// List destroyed pools too.
    #[arg(short = 'D')]
    destroyed: bool,
    /// Import even if a log device is missing and the intent log is not empty: the
    /// synchronous writes only it holds are lost, the pool comes back as of its last txg.
    #[arg(long)]
    ignore_missing_log: bool,
    /// Rewind: when the newest txg the labels show committed cannot be opened, import at the
    /// newest one that can, losing the txgs in between (refused without -F).
    #[arg(short = 'F')]
    rewind: bool,
    /// With -F: say what a rewind would do and lose, changing nothing.
    #[arg(short = 'n', requires = "rewind")]
    dry_run: bool,
    /// Import option: readonly=on imports the pool read-only to copy data off (nothing is
    /// ever written; the space log is not read, so a damaged one does not stop it; the
    /// intent log is not replayed).
    #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = parse_assignment)]
    options: Vec<(String, String)>,
    /// Pool name or guid to import; without it, list what could be imported.
    pool: Option<String>,
}

#[derive(Debug, Args)]
struct PoolCheckArgs {
    /// Check an exported pool found in this directory (repeatable), read-only, without
    /// importing it (like zdb -e).
    #[arg(short = 'd', value_name = "DIR")]
    dirs: Vec<PathBuf>,
    /// Pool name (or, with -d, guid).
    pool: String,
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// Create a volume of this size (e.g. 64M).
    #[arg(short = 'V', value_name = "SIZE")]
    volsize: Option<String>,
    /// Sparse volume: no reservation of its full size (refreservation=none).
    #[arg(short = 's', requires = "volsize")]
    sparse: bool,
    /// Property to set at creation.
    #[arg(short = 'o', value_name = "PROP=VALUE", value_parser = parse_assignment)]
    properties: Vec<(String, String)>,
    /// POOL/NAME
    dataset: String,
}

#[derive(Debug, Args)]
struct ListArgs {
    #[command(flatten)]
    format: ListFormat,
    /// JSON output (fields documented in docs/json.md).
    #[arg(short = 'j', conflicts_with_all = ["scripted", "exact", "columns"])]
    json: bool,
    /// Columns, comma-separated (name, used, avail, refer, type, volsize, volblocksize or any property).
    #[arg(short = 'o', value_name = "COL,...", value_delimiter = ',')]
    columns: Vec<String>,
    /// Include the children of the named datasets.
    #[arg(short = 'r')]
    recursive: bool,
    /// Types to list, comma-separated: filesystem, volume, snapshot, all (default filesystem
    /// and volume).
    #[arg(short = 't', value_name = "TYPE,...", value_delimiter = ',')]
    types: Vec<String>,
    /// Datasets to list (default: every dataset of every imported pool).
    datasets: Vec<String>,
}

#[derive(Debug, Args)]
struct DiffArgs {
    /// Compare a volume's blocks: the byte ranges that differ, adjacent ones merged, at the
    /// volume's block size. Its cost follows what changed, not the volume's size.
    #[arg(long)]
    blocks: bool,
    /// Filesystems: a column with each path's type (F file, / directory, @ symlink, | fifo,
    /// = socket, B block device, C character device).
    #[arg(short = 'F', conflicts_with = "blocks")]
    classify: bool,
    /// Filesystems: a first column with each inode's change time (seconds.nanoseconds).
    #[arg(short = 't', conflicts_with = "blocks")]
    timestamps: bool,
    #[command(flatten)]
    format: ListFormat,
    /// JSON output (fields documented in docs/json.md).
    #[arg(short = 'j', conflicts_with_all = ["scripted", "exact"])]
    json: bool,
    /// The older side: a snapshot, DATASET@SNAPSHOT.
    #[arg(value_name = "DATASET@SNAPSHOT")]
    older: String,
    /// The newer side: a later snapshot of the same dataset, or the dataset itself (its live
    /// contents; the default); for a filesystem also a clone descended from the older side, or
    /// a snapshot of one.
    #[arg(value_name = "DATASET@SNAPSHOT|DATASET")]
    newer: Option<String>,
}

#[derive(Debug, Args)]
struct GetArgs {
    #[command(flatten)]
    format: ListFormat,
    /// Fields to show, comma-separated (name, property, value, source).
    #[arg(short = 'o', value_name = "FIELD,...", value_delimiter = ',')]
    fields: Vec<String>,
    /// all, or PROP[,PROP...]
    properties: String,
    /// Datasets (POOL or POOL/NAME).
    #[arg(required = true, value_name = "DATASET")]
    datasets: Vec<String>,
}

#[derive(Debug, Args)]
struct SetArgs {
    /// Properties to set.
    #[arg(required = true, value_name = "PROP=VALUE", value_parser = parse_assignment)]
    assignments: Vec<(String, String)>,
    /// POOL/NAME
    dataset: String,
}

fn parse_assignment(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("'{text}' is not PROP=VALUE")),
    }
}

/// Where the pool cache (and a running server's sockets) live for this command.
fn state_dir(cli: &Cli) -> Result<PathBuf> {
    Ok(match (&cli.state_dir, &cli.command) {
        (Some(dir), _) => dir.clone(),
        // The embedded default keeps its state inside its data directory.
        (None, Command::Up(up)) => up.data_dir.join("state"),
        (None, _) => environment::default_state_dir()?,
    })
}

/// Runs one parsed command with `ctx`: it parses its arguments, sends its typed request to the
/// state directory's server or handles it here (`remote`), and renders the answer.
fn execute(ctx: &context::Context, command: Command, state_dir: &std::path::Path) -> Result<()> {
    match command {
        Command::Pool(command) => match command {
            PoolCommand::Create(args) => pool_cmd::create(ctx, &args),
            PoolCommand::Add(args) => pool_cmd::add(ctx, &args),
            PoolCommand::Remove { pool, vdev } => pool_cmd::remove(ctx, &pool, &vdev),
            PoolCommand::Status(args) => pool_cmd::status(ctx, &args),
            PoolCommand::List {
                format,
                json,
                pools,
            } => pool_cmd::list(ctx, format, json, &pools),
            PoolCommand::Attach(args) => mirror_cmd::attach(ctx, &args),
            PoolCommand::Detach { pool, device } => mirror_cmd::detach(ctx, &pool, &device),
            PoolCommand::Replace(args) => mirror_cmd::replace(ctx, &args),
            PoolCommand::Scrub { pool } => pool_cmd::scrub(ctx, &pool),
            PoolCommand::Export { pool } => pool_cmd::export(ctx, &pool),
            PoolCommand::Import(args) => pool_cmd::import(ctx, &args),
            PoolCommand::Check(args) => pool_cmd::check(ctx, &args),
            PoolCommand::Destroy { force, pool } => pool_cmd::destroy(ctx, &pool, force),
            PoolCommand::Clear {
                pool,
                resilver_rate,
            } => pool_cmd::clear(ctx, &pool, resilver_rate.as_deref()),
            PoolCommand::Sync { pools } => pool_cmd::sync(ctx, &pools),
            PoolCommand::History { pool } => pool_cmd::history(ctx, &pool),
            PoolCommand::Txgs { format, pool } => pool_cmd::txgs(ctx, format, &pool),
            PoolCommand::Set { assignment, pool } => pool_cmd::set(ctx, &assignment, &pool),
            PoolCommand::Get { format, pool } => pool_cmd::get(ctx, format, &pool),
            PoolCommand::Iostat(args) => iostat_cmd::iostat(ctx, &args),
        },
        Command::Up(args) => {
            up_cmd::up(ctx, &args)?;
            // With a server running for the state directory, `up` used it.
            if args.no_serve || remote::server_runs(state_dir) {
                return Ok(());
            }
            println!(
                "cairn up also listens on TCP {} for convenience: every user of this machine can reach it (cairn serve without --listen serves the Unix socket only)",
                args.listen
            );
            serve_cmd::serve(ctx, &args.serve_args(), state_dir)
        }
        Command::Serve(args) => serve_cmd::serve(ctx, &args, state_dir),
        Command::Create(args) => dataset_cmd::create(ctx, &args),
        Command::Mount {
            options,
            dataset,
            mountpoint,
        } => mount_cmd::mount(ctx, &dataset, mountpoint.as_deref(), &options),
        Command::Unmount { target } => mount_cmd::unmount(ctx, &target),
        Command::InstallMountHelper { dir } => mount_cmd::install_helper(ctx, &dir),
        Command::Destroy {
            dependents: true,
            dataset,
            ..
        } => dataset_cmd::destroy_dependents(ctx, &dataset),
        Command::Destroy {
            deferred,
            dry_run,
            verbose,
            dataset,
            ..
        } => dataset_cmd::destroy(ctx, &dataset, deferred, dry_run, verbose),
        Command::Clone {
            properties,
            origin,
            target,
        } => dataset_cmd::clone(ctx, &origin, &target, &properties),
        Command::Promote { dataset } => dataset_cmd::promote(ctx, &dataset),
        Command::Bookmark { source, target } => dataset_cmd::bookmark(ctx, &source, &target),
        Command::Hold { tag, names } => dataset_cmd::hold(ctx, &tag, &names, false),
        Command::Release { tag, names } => dataset_cmd::hold(ctx, &tag, &names, true),
        Command::Holds { format, names } => dataset_cmd::holds(ctx, format, &names),
        Command::Snapshot { recursive, names } => dataset_cmd::snapshot(ctx, &names, recursive),
        Command::Rollback {
            destroy_newer,
            force,
            snapshot,
        } => dataset_cmd::rollback(ctx, &snapshot, destroy_newer, force),
        Command::Diff(args) => diff_cmd::diff(ctx, &args),
        Command::Send(args) => send_cmd::send(ctx, &args),
        Command::Receive(args) => send_cmd::receive(ctx, &args),
        Command::List(args) => dataset_cmd::list(ctx, &args),
        Command::Get(args) => dataset_cmd::get(ctx, &args),
        Command::Set(args) => dataset_cmd::set(ctx, &args),
        Command::Stat(StatCommand::Zil { format, pools }) => stat_cmd::zil(ctx, format, &pools),
        Command::Stat(StatCommand::Arc(args)) => stat_arc_cmd::arc(ctx, &args),
        Command::Stat(StatCommand::Io { format, pools }) => stat_cmd::io(ctx, format, &pools),
        Command::Stat(StatCommand::L2arc { format, args }) => stat_cmd::l2arc(ctx, format, &args),
        Command::Stat(StatCommand::Memory { format }) => stat_cmd::memory(ctx, format),
        Command::Stat(StatCommand::Fs { format, pools }) => stat_cmd::fs(ctx, format, &pools),
        Command::Stat(StatCommand::Snapshots {
            format,
            json,
            pools,
        }) => stat_cmd::snapshots(ctx, format, json, &pools),
        Command::Stat(StatCommand::Nfs { format, json }) => stat_nfs_cmd::nfs(ctx, format, json),
    }
}

/// Block buffers are allocated and freed by the million. glibc's defaults serve those of
/// 128 KiB and more with mmap/munmap at first and give the top of a heap back to the kernel as
/// soon as 128 KiB of it is free: every txg's buffers were then faulted in and zeroed by the
/// kernel again (60% of the server's CPU in a profile of 1 MiB sequential writes through
/// FUSE). Here buffers below 4 MiB (blocks of the usual record sizes, 1 MiB FUSE requests)
/// come from the heaps, and a heap keeps up to 64 MiB free at its top for reuse; larger ones
/// (NBD requests of up to 32 MiB) stay mmapped, so a flood of them leaves no holes behind
/// (with them in the heaps, the write-flood test's peak went past its budget). The ARC's
/// maintenance thread hands the rest back (`malloc_trim`) when writing pauses and the cache has
/// no room for it, or when the cache shrinks, so resident memory follows the budget.
///
/// Arenas: glibc gives threads up to eight heaps per core, and a buffer freed goes back to the
/// heap it came from. Block buffers are freed by other threads than the ones that allocated
/// them (dirty buffers by the txg sync, cached blocks by eviction), so with a heap per thread
/// a reader's fresh buffer rarely found the pages a writer's freed: a cold 1 GiB read after a
/// 1 GiB write faulted in 200,000 fresh pages with glibc's default and 40,000–120,000 with two
/// heaps on two cores (and ran at 1,400–1,600 against 1,600–1,800 MiB/s; resident 1.75 against
/// 1.2 GB). One heap per core keeps the allocator's lock as contended as the cores can make
/// it, no more.
fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(1, |cores| cores.get());
        let arenas = libc::c_int::try_from(cores)
            .unwrap_or(ARENAS_MAX)
            .clamp(ARENAS_MIN, ARENAS_MAX);
        // SAFETY: mallopt only changes glibc's malloc parameters; called before any other
        // thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

/// Fewest and most heaps the allocator keeps (`tune_allocator`).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS_MIN: libc::c_int = 2;
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS_MAX: libc::c_int = 16;

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`cairn list | head`) instead of panicking on EPIPE.
    // SAFETY: called first thing, before any other thread exists; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tune_allocator();
    let argv: Vec<std::ffi::OsString> = match mount_cmd::helper_argv(std::env::args_os()) {
        Ok(argv) => argv,
        Err(err) => {
            eprintln!("mount.fuse.cairn: {err:#}");
            // mount(8)'s code for a usage error.
            return ExitCode::from(1);
        }
    };
    let args: Vec<String> = argv
        .iter()
        .skip(1)
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    let cli = Cli::parse_from(argv);
    let outcome = (|| -> Result<ExitCode> {
        let state_dir = state_dir(&cli)?;
        let command_line = context::command_line(&args);
        let command = cli.command;
        let ctx = context::Context::new(environment::pool_access(state_dir.clone()), command_line);
        // A server passes events on as they come (its notes); any other command tells what
        // its own work caused (a device that faulted, a log that fell back), once, at its end.
        let serves = matches!(command, Command::Serve(_) | Command::Up(_));
        let result = execute(&ctx, command, &state_dir);
        if !serves {
            for event in cairn_metrics::events::since(0) {
                eprintln!("cairn: {}", event.message);
            }
        }
        result?;
        Ok(ExitCode::SUCCESS)
    })();
    match outcome {
        Ok(code) => code,
        Err(err) => {
            eprintln!("cairn: {err:#}");
            match remote::failure(&err) {
                Some(failure) => exit_code(failure.exit_code),
                None => ExitCode::FAILURE,
            }
        }
    }
}

fn exit_code(code: u32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn set_takes_several_assignments_then_the_dataset() {
        let cli = Cli::try_parse_from(["cairn", "set", "sync=always", "checksum=sha256", "tank/v"])
            .unwrap();
        let Command::Set(args) = cli.command else {
            panic!("not set")
        };
        assert_eq!(args.assignments.len(), 2);
        assert_eq!(args.dataset, "tank/v");
        assert!(Cli::try_parse_from(["cairn", "set", "tank/v"]).is_err());
        assert!(Cli::try_parse_from(["cairn", "set", "nonsense", "tank/v"]).is_err());
    }
}
