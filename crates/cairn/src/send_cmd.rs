//! `cairn send [-i SOURCE] DATASET@SNAPSHOT > FILE` and `cairn receive [-F] DATASET < FILE`: a
//! snapshot to a stream on stdout, a stream from stdin into a new dataset (full) or the next
//! snapshot of an existing one (incremental). What a stream holds
//! and why an incremental costs what changed: `cairn_engine::Pool::send`; how a receive stays
//! all or nothing: `Pool::receive`.
//!
//! Both open the pool in this process, as other commands do without a server. When a server
//! runs it holds the pool, and handing it this process's stdin or stdout (over the control
//! socket, with SCM_RIGHTS) is not done yet: both commands then stop with a message saying so,
//! before reading or writing a byte.

use crate::context::{Context, shout};
use crate::remote;
use anyhow::{Result, bail};
use cairn_engine::ReceiveOptions;
use std::io::{IsTerminal, Write};

#[derive(Debug, clap::Args)]
pub struct SendArgs {
    /// Incremental from this older snapshot of the same dataset (DATASET@SNAP, @SNAP,
    /// DATASET#BOOKMARK or #BOOKMARK).
    #[arg(short = 'i', value_name = "SNAPSHOT|BOOKMARK")]
    from: Option<String>,
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

fn refuse_with_server(ctx: &Context, what: &str) -> Result<()> {
    let dir = ctx.cache.dir();
    if remote::server_runs(dir) {
        bail!(
            "a server runs on {} and holds the pools: {what} through it is not done yet; \
             stop it (or run {what} where no server holds the pool)",
            dir.display()
        );
    }
    Ok(())
}

/// `cairn send`.
pub fn send(ctx: &Context, args: &SendArgs) -> Result<()> {
    let (snapshot, from) = (args.snapshot.as_str(), args.from.as_deref());
    let stdout = std::io::stdout();
    if stdout.is_terminal() {
        bail!("refusing to write a send stream to a terminal: redirect stdout to a file or pipe");
    }
    refuse_with_server(ctx, "send")?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
    let summary = ctx.with_pool(pool_of(snapshot), true, |pool| -> Result<_> {
        Ok(pool.send(snapshot, from, &mut out, &mut |_| {})?)
    })?;
    out.flush()?;
    if args.verbose {
        shout!(
            ctx,
            "sent {snapshot}: {} bytes, {} objects, {} blocks",
            summary.bytes_written,
            summary.objects,
            summary.blocks_written
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
    refuse_with_server(ctx, "receive")?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, stdin.lock());
    let summary = ctx.with_pool(pool_of(target), false, |pool| -> Result<_> {
        Ok(pool.receive(target, &mut input, ReceiveOptions { force: args.force })?)
    })?;
    if args.verbose {
        shout!(
            ctx,
            "received {}: {} bytes, {} objects, {} blocks",
            summary.snapshot,
            summary.bytes_read,
            summary.objects,
            summary.blocks_written
        );
    }
    Ok(())
}
