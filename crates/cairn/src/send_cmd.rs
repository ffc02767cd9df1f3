//! `cairn send [-c] [-i SOURCE | -I SOURCE] [-R] [-p] DATASET@SNAPSHOT > FILE` and `cairn
//! receive [-F] DATASET < FILE`: a snapshot to a stream on stdout (`-c`: blocks stored
//! compressed go as stored), a stream from stdin into a new dataset (full) or the next
//! snapshot of an existing one (incremental); with `-R`, `-I` or `-p` a package of streams (a
//! tree, intermediate snapshots, properties: `Pool::send_package`), which `receive`
//! recognises by its header. `cairn receive -c DATASET@SNAPSHOT < FILE` heals that snapshot's
//! damaged blocks from a stream of it (`Pool::receive_corrective`). Resumable: `receive -s`
//! keeps what a cut stream brought, with a token; `send -t TOKEN [POOL]` sends the rest;
//! `receive -A` abandons it. What a stream holds
//! and why an incremental costs what changed: `cairn_engine::Pool::send`; how a receive stays
//! all or nothing: `Pool::receive`.
//!
//! When a server runs it holds the pool: the command passes its stdout (send) or stdin
//! (receive) to it with the request (SCM_RIGHTS over the control socket,
//! `cairn_frontend::passed`), the server writes or reads the stream itself, and answers with
//! what was sent or received; interrupting the command stops the server's work for it (a
//! receive then leaves nothing). Without a server both open the pool in this process, as
//! other commands do.

use crate::context::{Context, shout};
use crate::remote;
use crate::send_progress::{self, Meter};
use anyhow::{Result, bail};
use cairn_engine::{PackageOptions, ReceiveOptions};
use cairn_frontend::admin::{AdminReply, AdminRequest, HealReport, ReceiveReport, SendReport};
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// Incremental from this older snapshot of the same dataset (DATASET@SNAP, @SNAP,
    /// DATASET#BOOKMARK or #BOOKMARK).
    #[arg(
        short = 'i',
        value_name = "SNAPSHOT|BOOKMARK",
        conflicts_with = "from_all"
    )]
    from: Option<String>,
    /// Blocks stored compressed go as stored (smaller stream; the receiver keeps them so).
    #[arg(short = 'c')]
    compressed: bool,
    /// Resume: the rest of the stream a partial receive stopped in (its
    /// receive_resume_token); the snapshot is found by its guid, in POOL if named.
    #[arg(short = 't', value_name = "TOKEN", conflicts_with = "from")]
    token: Option<String>,
    /// Every snapshot from this older one (exclusive) to the sent one, as incrementals in
    /// one stream (@SNAP or DATASET@SNAP).
    #[arg(short = 'I', value_name = "SNAPSHOT")]
    from_all: Option<String>,
    /// The dataset and all its descendants, each with its snapshots up to the sent one,
    /// their properties, clones as clones (implies -p).
    #[arg(short = 'R')]
    recursive: bool,
    /// The dataset's locally set properties too: the receiver sets them.
    #[arg(short = 'p')]
    properties: bool,
    /// Say on stderr what was sent.
    #[arg(short = 'v')]
    verbose: bool,
    /// Dry run: send nothing; with -v (or -P) say how many bytes the stream would be (exact,
    /// from the block pointers: no data is read).
    #[arg(short = 'n', conflicts_with = "token")]
    dry_run: bool,
    /// With -n: print `size<TAB>BYTES` on stdout, for scripts.
    #[arg(short = 'P', requires = "dry_run")]
    parsable: bool,
    /// DATASET@SNAPSHOT (with -t: the POOL to look in, optional)
    #[arg(required_unless_present = "token")]
    snapshot: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ReceiveArgs {
    /// An incremental stream into a target changed since its source snapshot: destroy the
    /// newer snapshots and discard the changes (as a rollback), once the whole stream has
    /// verified (a stream that fails leaves them).
    #[arg(short = 'F')]
    force: bool,
    /// Corrective: heal the data blocks of TARGET (POOL/DATASET@SNAPSHOT) that no copy can
    /// give back, from a stream of that snapshot.
    #[arg(short = 'c', conflicts_with = "force")]
    corrective: bool,
    /// Resumable: if the stream is cut, keep what arrived, with a resume token (cairn get
    /// receive_resume_token TARGET) for send -t.
    #[arg(short = 's', conflicts_with = "abandon")]
    resumable: bool,
    /// Abandon the partial receive into TARGET (what a cut receive -s kept, and its token).
    #[arg(short = 'A')]
    abandon: bool,
    /// Say on stderr what was received.
    #[arg(short = 'v')]
    verbose: bool,
    /// POOL/DATASET (POOL/DATASET@SNAPSHOT with -c)
    target: String,
}

/// The RAM cache a send or receive run in this process may fill. A stream passes each block
/// once (read 2 MiB ahead): the default cache, sized for a server (half the machine's
/// memory), would only fill RAM with blocks nobody reads again. Measured: an 8 GiB full send
/// in the command grew to 7.9 GB RSS, and the OOM killer took it when the stream's file on
/// tmpfs needed the rest (the pressure monitor shrinks a step a second, slower than a stream
/// fills memory). Through a server, the server's own limits apply (`serve --arc-max`).
const STREAM_ARC_MAX_BYTES: u64 = 256 << 20;

/// Holds this process's cache (used only if no server runs) to `STREAM_ARC_MAX_BYTES`.
fn limit_stream_cache() -> Result<()> {
    let limits = cairn_engine::ArcConfig::with_max(STREAM_ARC_MAX_BYTES);
    cairn_engine::process_cache().set_limits(limits.min_bytes, limits.max_bytes)?;
    Ok(())
}

/// The pool a dataset, snapshot or bookmark name belongs to.
fn pool_of(name: &str) -> &str {
    name.split(['/', '@', '#']).next().unwrap_or(name)
}

/// `cairn send`.
pub fn send(ctx: &Context, args: &SendArgs) -> Result<()> {
    limit_stream_cache()?;
    if args.dry_run {
        let Some(snapshot) = args.snapshot.as_deref() else {
            bail!("send -n needs DATASET@SNAPSHOT");
        };
        return send_size(ctx, args, snapshot);
    }
    let stdout = std::io::stdout();
    if stdout.is_terminal() {
        bail!("refusing to write a send stream to a terminal: redirect stdout to a file or pipe");
    }
    if let Some(token) = &args.token {
        return send_resumed(ctx, token, args.snapshot.as_deref(), args.verbose);
    }
    let Some(snapshot) = args.snapshot.as_deref() else {
        bail!("send needs DATASET@SNAPSHOT (or -t TOKEN)");
    };
    let package = package_options(args)?;
    let request = send_request(args, snapshot, package.as_ref());
    let report = if args.verbose && package.is_none() {
        let total_bytes = stream_size(ctx, args, snapshot)?;
        send_metered(ctx, args, snapshot, request, total_bytes)?
    } else {
        send_plain(ctx, args, snapshot, request, package.as_ref())?
    };
    if args.verbose {
        shout!(
            ctx,
            "sent {snapshot}: {} bytes, {} objects, {} blocks",
            report.bytes_written,
            report.objects,
            report.blocks_written
        );
    }
    Ok(())
}

/// `cairn send -n`: the exact size of the stream, from the block pointers (no data read,
/// nothing written); said with `-v` (or `-P`: `size BYTES`, as `zfs send -n -P`).
fn send_size(ctx: &Context, args: &SendArgs, snapshot: &str) -> Result<()> {
    if package_options(args)?.is_some() {
        bail!("send -n of a package (-R, -I, -p) is not supported yet");
    }
    let request = AdminRequest::SendSize {
        snapshot: snapshot.to_string(),
        from: args.from.clone(),
        compressed: args.compressed,
    };
    // Answered without a stream, by a server or here (`admin::streams`).
    let report = match remote::call(ctx, request)? {
        AdminReply::Sent(report) => report,
        other => return Err(remote::unexpected(&other)),
    };
    if args.parsable {
        println!("size\t{}", report.bytes_written);
    } else if args.verbose {
        shout!(
            ctx,
            "would send {snapshot}: {} bytes ({}), {} objects, {} blocks (exact: counted from \
             the block pointers, no data read)",
            report.bytes_written,
            crate::human::size(report.bytes_written, false),
            report.objects,
            report.blocks_written
        );
    }
    Ok(())
}

/// A package's options when `-R`, `-I` or `-p` ask for one.
fn package_options(args: &SendArgs) -> Result<Option<PackageOptions>> {
    if !(args.recursive || args.properties || args.from_all.is_some()) {
        return Ok(None);
    }
    if args.compressed {
        bail!("send -c of a package (-R, -I, -p) is not supported yet: send without -c");
    }
    Ok(Some(PackageOptions {
        from: args.from_all.clone().or_else(|| args.from.clone()),
        intermediates: args.from_all.is_some(),
        recursive: args.recursive,
        properties: args.properties || args.recursive,
    }))
}

/// The server request for `cairn send` of `snapshot`.
fn send_request(args: &SendArgs, snapshot: &str, package: Option<&PackageOptions>) -> AdminRequest {
    match package {
        None => AdminRequest::Send {
            snapshot: snapshot.to_string(),
            from: args.from.clone(),
            compressed: args.compressed,
        },
        Some(options) => AdminRequest::SendPackage {
            snapshot: snapshot.to_string(),
            from: options.from.clone(),
            intermediates: options.intermediates,
            recursive: options.recursive,
            properties: options.properties,
        },
    }
}

fn send_options(args: &SendArgs) -> cairn_engine::SendOptions {
    cairn_engine::SendOptions {
        compressed: args.compressed,
        count_only: false,
    }
}

/// `cairn send` without progress: the command's stdout goes to the server, or the pool is
/// opened here.
fn send_plain(
    ctx: &Context,
    args: &SendArgs,
    snapshot: &str,
    request: AdminRequest,
    package: Option<&PackageOptions>,
) -> Result<SendReport> {
    let stdout = std::io::stdout();
    Ok(
        match remote::call_server_with_stream(ctx, request, stdout.as_fd())? {
            Ok(AdminReply::Sent(report)) => report,
            Ok(other) => return Err(remote::unexpected(&other)),
            Err(_) => {
                let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
                let (from, options) = (args.from.as_deref(), send_options(args));
                let summary = ctx.with_pool(pool_of(snapshot), true, |pool| -> Result<_> {
                    Ok(match package {
                        None => pool.send_with(snapshot, from, options, &mut out, &mut |_| {})?,
                        Some(options) => {
                            pool.send_package(snapshot, options, &mut out, &mut |_| {})?
                        }
                    })
                })?;
                out.flush()?;
                SendReport::from(summary)
            }
        },
    )
}

/// The exact size of the stream `cairn send` is about to write (`send -n`'s count).
fn stream_size(ctx: &Context, args: &SendArgs, snapshot: &str) -> Result<u64> {
    let request = AdminRequest::SendSize {
        snapshot: snapshot.to_string(),
        from: args.from.clone(),
        compressed: args.compressed,
    };
    match remote::call(ctx, request)? {
        AdminReply::Sent(report) => Ok(report.bytes_written),
        other => Err(remote::unexpected(&other)),
    }
}

/// `cairn send -v`: progress on stderr while it runs (`send_progress.rs`). Through a server
/// the stream comes back through a pipe this process copies to stdout, counting.
fn send_metered(
    ctx: &Context,
    args: &SendArgs,
    snapshot: &str,
    request: AdminRequest,
    total_bytes: u64,
) -> Result<SendReport> {
    let (reader, writer) = std::io::pipe()?;
    let relay = std::thread::spawn(move || {
        send_progress::relay(reader, std::io::stdout().lock(), Meter::new(total_bytes))
    });
    let answer = remote::call_server_with_stream(ctx, request, writer.as_fd());
    // The server's copy of the write end closes when its send ends: then the relay sees EOF.
    drop(writer);
    let relayed = relay
        .join()
        .map_err(|_| anyhow::anyhow!("the progress relay panicked"))?;
    match answer? {
        Ok(AdminReply::Sent(report)) => {
            relayed?;
            return Ok(report);
        }
        Ok(other) => return Err(remote::unexpected(&other)),
        Err(_) => {}
    }
    // No server: the pool is opened here and the engine reports its bytes.
    let mut meter = Meter::new(total_bytes);
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    let (from, options) = (args.from.as_deref(), send_options(args));
    let summary = ctx.with_pool(pool_of(snapshot), true, |pool| -> Result<_> {
        let mut progress = |bytes| {
            if let Some(line) = meter.update(bytes) {
                eprintln!("{line}");
            }
        };
        Ok(pool.send_with(snapshot, from, options, &mut out, &mut progress)?)
    })?;
    out.flush()?;
    Ok(SendReport::from(summary))
}

/// `cairn send -t TOKEN [POOL]`: the rest of a cut stream.
fn send_resumed(ctx: &Context, token: &str, pool: Option<&str>, verbose: bool) -> Result<()> {
    let stdout = std::io::stdout();
    let request = AdminRequest::SendResumed {
        token: token.to_string(),
        pool: pool.map(str::to_string),
    };
    let report = match remote::call_server_with_stream(ctx, request, stdout.as_fd())? {
        Ok(AdminReply::Sent(report)) => report,
        Ok(other) => return Err(remote::unexpected(&other)),
        Err(_) => {
            let pool = cairn_frontend::admin::resumed_send_pool(&ctx.access, token, pool)?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let summary = ctx.with_pool(&pool, true, |pool| -> Result<_> {
                Ok(pool.send_resumed(token, &mut out, &mut |_| {})?)
            })?;
            out.flush()?;
            SendReport::from(summary)
        }
    };
    if verbose {
        shout!(
            ctx,
            "sent the rest of a stream: {} bytes, {} objects, {} blocks",
            report.bytes_written,
            report.objects,
            report.blocks_written
        );
    }
    Ok(())
}

/// `cairn receive`.
pub fn receive(ctx: &Context, args: &ReceiveArgs) -> Result<()> {
    limit_stream_cache()?;
    let target = args.target.as_str();
    if args.abandon {
        let request = AdminRequest::AbandonReceive {
            target: target.to_string(),
        };
        return match remote::call(ctx, request)? {
            AdminReply::Done => Ok(()),
            other => Err(remote::unexpected(&other)),
        };
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!("refusing to read a send stream from a terminal: redirect stdin from a file or pipe");
    }
    if args.corrective {
        return heal(ctx, target);
    }
    let request = AdminRequest::Receive {
        target: target.to_string(),
        force: args.force,
        corrective: false,
        resumable: args.resumable,
    };
    let options = ReceiveOptions {
        force: args.force,
        resumable: args.resumable,
    };
    let report = match remote::call_server_with_stream(ctx, request, stdin.as_fd())? {
        Ok(AdminReply::Received(report)) => report,
        Ok(other) => return Err(remote::unexpected(&other)),
        Err(_) => {
            let mut input = std::io::BufReader::with_capacity(1 << 20, stdin.lock());
            let summary = ctx.with_pool(pool_of(target), false, |pool| -> Result<_> {
                Ok(pool.receive(target, &mut input, options)?)
            })?;
            ReceiveReport::from(summary)
        }
    };
    if args.verbose {
        shout!(
            ctx,
            "received {}: {} bytes, {} objects, {} blocks",
            report.snapshot,
            report.bytes_read,
            report.objects,
            report.blocks_written
        );
    }
    Ok(())
}

/// `cairn receive -c`: says what it healed whether or not `-v`.
fn heal(ctx: &Context, snapshot: &str) -> Result<()> {
    let stdin = std::io::stdin();
    let request = AdminRequest::Receive {
        target: snapshot.to_string(),
        force: false,
        corrective: true,
        resumable: false,
    };
    let report = match remote::call_server_with_stream(ctx, request, stdin.as_fd())? {
        Ok(AdminReply::Healed(report)) => report,
        Ok(other) => return Err(remote::unexpected(&other)),
        Err(_) => {
            let mut input = std::io::BufReader::with_capacity(1 << 20, stdin.lock());
            let summary = ctx.with_pool(pool_of(snapshot), false, |pool| -> Result<_> {
                Ok(pool.receive_corrective(snapshot, &mut input)?)
            })?;
            HealReport::from(summary)
        }
    };
    shout!(
        ctx,
        "healed {} blocks of {} ({} blocks of the stream checked, {} not matching it)",
        report.blocks_healed,
        report.snapshot,
        report.blocks_checked,
        report.blocks_mismatched
    );
    Ok(())
}
