//! The client side of the control socket: hand a parsed command to a running server.
//!
//! The server runs commands for clients in other working directories, and its own working
//! directory is shared by all its threads, so it must never depend on it: before a command is
//! sent, every path in it is made absolute here, against the client's directory (device files
//! of `pool create/add/attach/replace`, `pool remove`/`detach` names that are files, `pool
//! import -d`, `up --data-dir`). Names that are not paths (`mirror-0`, pool and dataset names)
//! are left as they are. The protocol itself is `cairn_frontend::control`.

use crate::vdevs::{absolute_device_word, absolute_vdev_word};
use crate::{Cli, Command, PoolCommand};
use anyhow::{Context as _, Result, anyhow};
use cairn_frontend::control::{self, ControlRequest, Reply};
use clap::Parser;
use std::path::Path;

/// What became of a command offered to a server.
// Made once per process and matched by value (the command moves on): boxing buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum Forwarded {
    /// A server ran it.
    Done(Reply),
    /// No server runs for this state directory: the command comes back to run here.
    NoServer(Command),
}

/// Sends `command` to the server of `state_dir` if one runs.
pub fn forward(state_dir: &Path, command_line: String, command: Command) -> Result<Forwarded> {
    if !control::socket_path(state_dir).exists() {
        return Ok(Forwarded::NoServer(command));
    }
    let request = ControlRequest::new(command_line, with_absolute_paths(command)?);
    match control::forward(state_dir, &request)? {
        Some(reply) => Ok(Forwarded::Done(reply)),
        None => Ok(Forwarded::NoServer(request.command)),
    }
}

/// Runs `args` in the server of `ctx`'s state directory and returns what it printed: for the
/// client side of commands that poll a server (`pool iostat`, `stat arc` with an interval).
/// `what` names the command in the error when no server runs.
pub fn ask_server(ctx: &crate::context::Context, args: &[&str], what: &str) -> Result<String> {
    try_ask_server(ctx, args)?.ok_or_else(|| {
        anyhow!(
            "no cairn server is running for {}; {what} `cairn serve`",
            ctx.cache.dir().display()
        )
    })
}

/// `ask_server`, with `None` when no server runs (for commands that can also work alone).
pub fn try_ask_server(ctx: &crate::context::Context, args: &[&str]) -> Result<Option<String>> {
    let state_dir = ctx.cache.dir();
    if !control::socket_path(state_dir).exists() {
        return Ok(None);
    }
    let argv = std::iter::once("cairn").chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).with_context(|| format!("cannot build `{args:?}`"))?;
    let command_line =
        crate::context::command_line(&args.iter().map(|arg| arg.to_string()).collect::<Vec<_>>());
    let request = ControlRequest::new(command_line, cli.command);
    let Some(reply) = control::forward(state_dir, &request)? else {
        return Ok(None);
    };
    if reply.exit_code != 0 {
        return Err(anyhow!("{}", String::from_utf8_lossy(&reply.stderr).trim()));
    }
    Ok(Some(String::from_utf8_lossy(&reply.stdout).into_owned()))
}

/// `command` with every path in it absolute (against this process's working directory).
fn with_absolute_paths(mut command: Command) -> Result<Command> {
    match &mut command {
        Command::Up(args) => args.data_dir = std::path::absolute(&args.data_dir)?,
        Command::Pool(pool) => match pool {
            PoolCommand::Create(args) => absolute_vdev_words(&mut args.vdevs),
            PoolCommand::Add(args) => absolute_vdev_words(&mut args.vdevs),
            PoolCommand::Attach(args) => {
                args.existing = absolute_device_word(&args.existing);
                args.new = absolute_device_word(&args.new);
            }
            PoolCommand::Replace(args) => {
                args.old = absolute_device_word(&args.old);
                args.new = absolute_device_word(&args.new);
            }
            PoolCommand::Detach { device, .. } => *device = absolute_device_word(device),
            PoolCommand::Remove { vdev, .. } => *vdev = existing_file_word(vdev),
            PoolCommand::Import(args) => {
                for dir in &mut args.dirs {
                    *dir = std::path::absolute(&*dir)?;
                }
            }
            PoolCommand::Check(args) => {
                for dir in &mut args.dirs {
                    *dir = std::path::absolute(&*dir)?;
                }
            }
            _ => {}
        },
        Command::Mount {
            mountpoint: Some(path),
            ..
        } => *path = std::path::absolute(&*path)?,
        // A mountpoint given as a path here (a dataset name is not one).
        Command::Unmount { target } if Path::new(target).exists() => {
            *target = std::path::absolute(&*target)?.display().to_string();
        }
        _ => {}
    }
    Ok(command)
}

fn absolute_vdev_words(words: &mut [String]) {
    for word in words {
        *word = absolute_vdev_word(word);
    }
}

/// A name that may be a log vdev (`mirror-1`) or a device file: absolute when it is a file here.
fn existing_file_word(word: &str) -> String {
    if Path::new(word).exists() {
        absolute_device_word(word)
    } else {
        word.to_string()
    }
}
