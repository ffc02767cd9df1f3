//! `cairn send [-i SOURCE | -I SOURCE] [-R] [-p] DATASET@SNAPSHOT > FILE` and `cairn receive
//! [-F] DATASET < FILE`: a snapshot to a stream on stdout, a stream from stdin into a new
//! dataset (full) or the next snapshot of an existing one (incremental); with `-R`, `-I` or
//! `-p` a package of streams (a tree, intermediate snapshots, properties:
//! `Pool::send_package`), which `receive` recognises by its header. What a stream holds
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
use anyhow::{Result, bail};
use cairn_engine::{PackageOptions, ReceiveOptions};
use cairn_frontend::admin::{AdminReply, AdminRequest, ReceiveReport, SendReport};
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
    /// DATASET@SNAPSHOT
    snapshot: String,
}

#[derive(Debug, clap::Args)]
pub struct ReceiveArgs {
    /// An incremental stream into a target changed since its source snapshot: destroy the
    /// newer snapshots and discard the changes (as a rollback).
    #[arg(short = 'F')]
    force: bool,
    /// Say on stderr what was received.
    #[arg(short = 'v')]
    verbose: bool,
    /// POOL/DATASET
    target: String,
}

/// The pool a dataset, snapshot or bookmark name belongs to.
fn pool_of(name: &str) -> &str {
    name.split(['/', '@', '#']).next().unwrap_or(name)
}

/// `cairn send`.
pub fn send(ctx: &Context, args: &SendArgs) -> Result<()> {
    let (snapshot, from) = (args.snapshot.as_str(), args.from.as_deref());
    let stdout = std::io::stdout();
    if stdout.is_terminal() {
        bail!("refusing to write a send stream to a terminal: redirect stdout to a file or pipe");
    }
    let package =
        (args.recursive || args.properties || args.from_all.is_some()).then(|| PackageOptions {
            from: args.from_all.clone().or_else(|| args.from.clone()),
            intermediates: args.from_all.is_some(),
            recursive: args.recursive,
            properties: args.properties || args.recursive,
        });
    let request = match &package {
        None => AdminRequest::Send {
            snapshot: snapshot.to_string(),
            from: from.map(str::to_string),
        },
        Some(options) => AdminRequest::SendPackage {
            snapshot: snapshot.to_string(),
            from: options.from.clone(),
            intermediates: options.intermediates,
            recursive: options.recursive,
            properties: options.properties,
        },
    };
    let report = match remote::call_server_with_stream(ctx, request, stdout.as_fd())? {
        Ok(AdminReply::Sent(report)) => report,
        Ok(other) => return Err(remote::unexpected(&other)),
        Err(_) => {
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let summary = ctx.with_pool(pool_of(snapshot), true, |pool| -> Result<_> {
                Ok(match &package {
                    None => pool.send(snapshot, from, &mut out, &mut |_| {})?,
                    Some(options) => pool.send_package(snapshot, options, &mut out, &mut |_| {})?,
                })
            })?;
            out.flush()?;
            SendReport::from(summary)
        }
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

/// `cairn receive`.
pub fn receive(ctx: &Context, args: &ReceiveArgs) -> Result<()> {
    let target = args.target.as_str();
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!("refusing to read a send stream from a terminal: redirect stdin from a file or pipe");
    }
    let request = AdminRequest::Receive {
        target: target.to_string(),
        force: args.force,
    };
    let report = match remote::call_server_with_stream(ctx, request, stdin.as_fd())? {
        Ok(AdminReply::Received(report)) => report,
        Ok(other) => return Err(remote::unexpected(&other)),
        Err(_) => {
            let mut input = std::io::BufReader::with_capacity(1 << 20, stdin.lock());
            let summary = ctx.with_pool(pool_of(target), false, |pool| -> Result<_> {
                Ok(pool.receive(target, &mut input, ReceiveOptions { force: args.force })?)
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
