//! The client side of the administration library: a command hands its typed request to the
//! server of its state directory when one runs (over `cairn_frontend::control`), and otherwise
//! to `admin::handle` in this process: one path, the same answers. Notes that came with an
//! answer are printed on stderr here, where the command printed them before it had a server.
//!
//! The server runs requests for clients in other working directories, and its own working
//! directory is shared by all its threads, so it must never depend on it: a command makes every
//! path in its request absolute, against the client's directory, before calling (device files
//! of `pool create/add/attach/replace`, `pool remove`/`detach` names that are files, `pool
//! import -d`, `pool check -d`, mountpoints). Names that are not paths (`mirror-0`, pool and
//! dataset names) are left as they are.

use crate::context::{Context, shout};
use crate::vdevs::absolute_device_word;
use anyhow::Result;
use cairn_frontend::admin::{self, AdminReply, AdminRequest, Answer};
use cairn_frontend::control::{self, ControlRequest};
use std::os::fd::BorrowedFd;
use std::path::Path;

/// Runs `request` in the server of `ctx`'s state directory if one runs, else here.
pub fn call(ctx: &Context, request: AdminRequest) -> Result<AdminReply> {
    call_observed(ctx, request, &mut |_| {})
}

/// `call`, showing the progress of long work through `observe` when it runs here (a server's
/// answer comes when its part is done).
pub fn call_observed(
    ctx: &Context,
    request: AdminRequest,
    observe: &mut dyn FnMut(admin::Progress),
) -> Result<AdminReply> {
    match call_server(ctx, request)? {
        Ok(reply) => Ok(reply),
        Err(request) => {
            let answer = admin::handle_observed(&ctx.access, &ctx.command_line, request, observe)?;
            Ok(print_notes(ctx, answer))
        }
    }
}

/// Runs `request` in the server of `ctx`'s state directory; `Err(request)` back when no
/// server runs (for commands that work differently alone).
pub fn call_server(
    ctx: &Context,
    request: AdminRequest,
) -> Result<Result<AdminReply, AdminRequest>> {
    let state_dir = ctx.cache.dir();
    if !control::socket_path(state_dir).exists() {
        return Ok(Err(request));
    }
    let sent = ControlRequest::new(ctx.command_line.clone(), request);
    match control::forward(state_dir, &sent)? {
        Some(Ok(answer)) => Ok(Ok(print_notes(ctx, answer))),
        Some(Err(failure)) => Err(failure.into()),
        None => Ok(Err(sent.request)),
    }
}

/// Runs `request` in the server of `ctx`'s state directory with `stream` (this process's
/// stdout or stdin), which the server writes or reads itself; `Err(request)` back when no
/// server runs.
pub fn call_server_with_stream(
    ctx: &Context,
    request: AdminRequest,
    stream: BorrowedFd<'_>,
) -> Result<Result<AdminReply, AdminRequest>> {
    let state_dir = ctx.cache.dir();
    if !control::socket_path(state_dir).exists() {
        return Ok(Err(request));
    }
    let sent = ControlRequest::new(ctx.command_line.clone(), request);
    match control::forward_with_stream(state_dir, &sent, Some(stream))? {
        Some(Ok(answer)) => Ok(Ok(print_notes(ctx, answer))),
        Some(Err(failure)) => Err(failure.into()),
        None => Ok(Err(sent.request)),
    }
}

fn print_notes(ctx: &Context, answer: Answer) -> AdminReply {
    for note in &answer.notes {
        shout!(ctx, "cairn: {note}");
    }
    answer.reply
}

/// Whether a server answers on the control socket of `state_dir`.
pub fn server_runs(state_dir: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(control::socket_path(state_dir)).is_ok()
}

/// Why a command that watches a server (`what` it does) cannot run without one.
pub fn no_server(ctx: &Context, what: &'static str) -> admin::AdminError {
    admin::AdminError::NeedsServer {
        state_dir: ctx.cache.dir().to_path_buf(),
        what,
    }
}

/// A reply of another kind than the request asks for (a server of another build).
pub fn unexpected(reply: &AdminReply) -> anyhow::Error {
    anyhow::anyhow!("unexpected answer from the server: {reply:?}")
}

/// The error of a command that failed in a server, with its exit code, when `err` is one.
pub fn failure(err: &anyhow::Error) -> Option<&control::Failure> {
    err.downcast_ref::<control::Failure>()
}

/// A name that may be a log vdev (`mirror-1`) or a device file: absolute when it is a file here.
pub fn existing_file_word(word: &str) -> String {
    if Path::new(word).exists() {
        absolute_device_word(word)
    } else {
        word.to_string()
    }
}
