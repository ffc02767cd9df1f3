//! What every command shares: pool access (`cairn_frontend::PoolAccess`: the pool cache and the
//! options pools are opened with, for `admin::handle` when no server runs), where its output
//! goes, and the command line that state-changing requests record in the pool's history.
//!
//! Without a server the administration library holds a pool open only for the length of one
//! request and closes it (which syncs) even when the request failed. A remembered pool that
//! cannot be opened is unavailable: `pool list`/`status` show it as UNAVAIL, requests over
//! every pool skip it with a note, and `pool export`/`destroy -f` answer by forgetting it; it
//! never stops a command on another pool. The one command that opens pools itself is `pool
//! iostat -l/-q/-w/-r` without a server (it keeps them open across its intervals).

use anyhow::Result;
use cairn_frontend::{PoolAccess, PoolsError};
use parking_lot::Mutex;
use std::io::Write;

/// Where a command's output goes: the process's stdout or stderr.
pub struct Output {
    sink: Mutex<Box<dyn Write + Send>>,
}

impl Output {
    pub fn stdout() -> Output {
        Output {
            sink: Mutex::new(Box::new(std::io::stdout())),
        }
    }

    pub fn stderr() -> Output {
        Output {
            sink: Mutex::new(Box::new(std::io::stderr())),
        }
    }

    /// Writes formatted text; a reader that went away is not an error worth reporting.
    pub fn text(&self, args: std::fmt::Arguments<'_>) {
        let mut sink = self.sink.lock();
        let _ = sink.write_fmt(args);
        let _ = sink.flush();
    }
}

/// `println!` for command output: `say!(ctx, "...", args)`.
macro_rules! say {
    ($ctx:expr) => {
        $ctx.out.text(format_args!("\n"))
    };
    ($ctx:expr, $($arg:tt)*) => {
        $ctx.out.text(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for command output.
macro_rules! say_raw {
    ($ctx:expr, $($arg:tt)*) => {
        $ctx.out.text(format_args!($($arg)*))
    };
}

/// `eprintln!` for progress and diagnostics.
macro_rules! shout {
    ($ctx:expr, $($arg:tt)*) => {
        $ctx.err.text(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {say, say_raw, shout};

pub struct Context {
    /// The pool cache, the server's live pools when a server runs this command, and the
    /// options pools are opened with. Commands reach it through `Deref` (`ctx.with_pool`,
    /// `ctx.cache`): a command's context is pool access plus where its output goes.
    pub access: PoolAccess,
    /// The command as typed (without `--state-dir`), for `pool history`.
    pub command_line: String,
    pub out: Output,
    pub err: Output,
}

impl std::ops::Deref for Context {
    type Target = PoolAccess;

    fn deref(&self) -> &PoolAccess {
        &self.access
    }
}

/// The unavailability of a remembered pool, when `err` is (or was caused by) one.
pub fn unavailable(err: &anyhow::Error) -> Option<&cairn_frontend::PoolUnavailable> {
    err.chain()
        .find_map(|cause| cause.downcast_ref::<PoolsError>())
        .and_then(PoolsError::unavailable)
}

/// The reason, when `err` says a remembered pool cannot be opened.
pub fn unavailable_reason(err: &anyhow::Error) -> Option<&str> {
    unavailable(err).map(|unavailable| unavailable.reason.as_str())
}

impl Context {
    /// A one-shot command's context: output to this process's stdout and stderr.
    pub fn new(access: PoolAccess, command_line: String) -> Context {
        Context {
            access,
            command_line,
            out: Output::stdout(),
            err: Output::stderr(),
        }
    }

    /// Whether progress may be drawn on this process's terminal.
    pub fn interactive(&self) -> bool {
        use std::io::IsTerminal;
        std::io::stderr().is_terminal()
    }

    /// For commands over every pool (the user named none): a pool that cannot be opened is
    /// noted on stderr and skipped (`Ok(None)`) so the others are still served; when the user
    /// named it, or for any other failure, the error stands.
    pub fn skip_unavailable<T>(&self, result: Result<T>, named: bool) -> Result<Option<T>> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(err) if !named && unavailable_reason(&err).is_some() => {
                self.err.text(format_args!("cairn: {err:#}\n"));
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }
}

/// The pool part of a dataset name (`tank` of `tank/vol`).
pub fn pool_of(dataset: &str) -> &str {
    dataset.split(['/', '@', '#']).next().unwrap_or(dataset)
}

/// `cairn ARGS...` for the history, dropping `--state-dir DIR`, quoting words with spaces.
pub fn command_line(args: &[String]) -> String {
    let mut words = vec!["cairn".to_string()];
    let mut skip_next = false;
    for arg in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        if arg == "--state-dir" {
            skip_next = true;
            continue;
        }
        if arg.starts_with("--state-dir=") {
            continue;
        }
        if arg.is_empty() || arg.contains(char::is_whitespace) {
            words.push(format!("'{arg}'"));
        } else {
            words.push(arg.clone());
        }
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_lines_leave_out_the_state_dir() {
        let args: Vec<String> = ["--state-dir", "/tmp/s", "create", "-V", "1G", "tank/my vol"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(command_line(&args), "cairn create -V 1G 'tank/my vol'");
        assert_eq!(pool_of("tank/a/b"), "tank");
        assert_eq!(pool_of("tank"), "tank");
    }
}
