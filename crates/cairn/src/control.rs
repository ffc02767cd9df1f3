//! The control socket: how `cairn` commands keep working while `cairn serve` owns the pools.
//!
//! A running server holds its pools' devices (exclusive locks), so a second process cannot open
//! them. Instead, every command first looks for `STATE_DIR/control.sock`; if a server answers,
//! the command line and working directory are sent there, the server runs the very same command
//! code against its live pools, and the client prints what came back and exits with its code.
//! A stale socket file (no server behind it) is ignored and the command runs locally.
//!
//! Wire format (both directions length-prefixed, little-endian u32 lengths):
//!   request:  field count, then each field as length + UTF-8 bytes: cwd, then argv[1..]
//!   response: exit code (u32), stdout (length + bytes), stderr (length + bytes)
//!
//! The socket is created with mode 0600 inside a private staging directory and renamed into
//! place (no moment where it is open to others), and every connection's peer is checked with
//! SO_PEERCRED: only the server's own user (and root) may run commands through it.
//!
//! Forwarded commands run one at a time (a server-wide lock), because they change the process's
//! working directory to the client's for relative paths. Field sizes are bounded so a confused
//! client cannot make the server allocate without limit.

use anyhow::{Context as _, Result};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

const SOCKET_NAME: &str = "control.sock";
const FIELDS_MAX: u32 = 4096;
const FIELD_BYTES_MAX: u32 = 1 << 20;
const OUTPUT_BYTES_MAX: u32 = 256 << 20;

pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_NAME)
}

/// What a forwarded command produced.
pub struct Reply {
    pub exit_code: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

fn write_field(stream: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    stream.write_all(&(bytes.len() as u32).to_le_bytes())?;
    stream.write_all(bytes)
}

fn read_u32(stream: &mut impl Read) -> std::io::Result<u32> {
    let mut raw = [0u8; 4];
    stream.read_exact(&mut raw)?;
    Ok(u32::from_le_bytes(raw))
}

fn read_field(stream: &mut impl Read, limit: u32) -> std::io::Result<Vec<u8>> {
    let len = read_u32(stream)?;
    if len > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("field of {len} bytes exceeds {limit}"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    stream.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// Sends the command to a running server, if there is one. `Ok(None)`: no server; run locally.
/// Runs `args` in the server of `ctx`'s state directory and returns what it printed: for the
/// client side of commands that poll a server (`pool iostat`, `stat arc` with an interval).
/// `what` names the command in the error when no server runs.
pub fn ask_server(ctx: &crate::context::Context, args: &[&str], what: &str) -> Result<String> {
    let state_dir = ctx
        .cache
        .path()
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| anyhow::anyhow!("no state directory"))?;
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    let reply = forward(&state_dir, &args)?.ok_or_else(|| {
        anyhow::anyhow!(
            "no cairn server is running for {}; {what} `cairn serve`",
            state_dir.display()
        )
    })?;
    if reply.exit_code != 0 {
        anyhow::bail!("{}", String::from_utf8_lossy(&reply.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&reply.stdout).into_owned())
}

pub fn forward(state_dir: &Path, args: &[String]) -> Result<Option<Reply>> {
    let path = socket_path(state_dir);
    let Ok(mut stream) = UnixStream::connect(&path) else {
        return Ok(None);
    };
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let mut fields: Vec<Vec<u8>> = vec![cwd.display().to_string().into_bytes()];
    fields.extend(args.iter().map(|arg| arg.clone().into_bytes()));
    let send = |stream: &mut UnixStream| -> std::io::Result<()> {
        stream.write_all(&(fields.len() as u32).to_le_bytes())?;
        for field in &fields {
            write_field(stream, field)?;
        }
        stream.flush()
    };
    send(&mut stream)
        .with_context(|| format!("cannot talk to the server at {}", path.display()))?;
    let receive = |stream: &mut UnixStream| -> std::io::Result<Reply> {
        let exit_code = read_u32(stream)?;
        let stdout = read_field(stream, OUTPUT_BYTES_MAX)?;
        let stderr = read_field(stream, OUTPUT_BYTES_MAX)?;
        Ok(Reply {
            exit_code,
            stdout,
            stderr,
        })
    };
    let reply = receive(&mut stream)
        .with_context(|| format!("the server at {} did not answer", path.display()))?;
    Ok(Some(reply))
}

/// A forwarded command: the client's working directory and its arguments.
pub struct Request {
    pub cwd: PathBuf,
    pub args: Vec<String>,
}

fn read_request(stream: &mut UnixStream) -> std::io::Result<Request> {
    let count = read_u32(stream)?;
    if count == 0 || count > FIELDS_MAX {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("request with {count} fields"),
        ));
    }
    let mut fields = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let bytes = read_field(stream, FIELD_BYTES_MAX)?;
        fields.push(String::from_utf8(bytes).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "field is not UTF-8")
        })?);
    }
    let cwd = PathBuf::from(fields.remove(0));
    Ok(Request { cwd, args: fields })
}

/// Binds the control socket (mode 0600 from the start), refusing if another server answers on
/// it.
pub fn bind(state_dir: &Path) -> Result<UnixListener> {
    crate::cache::create_dir_durably(state_dir)
        .with_context(|| format!("cannot create state directory {}", state_dir.display()))?;
    let path = socket_path(state_dir);
    cairn_nbd::bind_unix_std(&path, 0o600).map_err(|err| {
        if err.kind() == std::io::ErrorKind::AddrInUse {
            anyhow::anyhow!(
                "a cairn server is already running for {} (control socket {})",
                state_dir.display(),
                path.display()
            )
        } else {
            anyhow::Error::new(err).context(format!("cannot bind {}", path.display()))
        }
    })
}

/// Whether the peer of a control connection may run commands: the server's own user, or
/// root. (The socket's mode already keeps others out; this holds even if the mode or the
/// directory were loosened.)
fn peer_allowed(stream: &UnixStream) -> Result<(), String> {
    let own = rustix::process::getuid();
    match rustix::net::sockopt::socket_peercred(stream) {
        Ok(peer) if peer.uid == own || peer.uid.is_root() => Ok(()),
        Ok(peer) => Err(format!(
            "cairn: refused: this server runs as uid {}, and uid {} may not control it\n",
            own.as_raw(),
            peer.uid.as_raw()
        )),
        Err(err) => Err(format!(
            "cairn: refused: cannot identify the client: {err}\n"
        )),
    }
}

/// Serves forwarded commands until `stop` is set; `execute` runs one request and returns its
/// reply. Each client is handled on its own thread; execution itself is serialized by the
/// caller's `execute`.
pub fn accept_loop(
    listener: UnixListener,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    execute: std::sync::Arc<dyn Fn(Request) -> Reply + Send + Sync>,
) {
    use std::sync::atomic::Ordering;
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(mut stream) = stream else {
            continue;
        };
        let execute = execute.clone();
        std::thread::spawn(move || {
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(30)));
            let Ok(request) = read_request(&mut stream) else {
                return;
            };
            let _ = stream.set_read_timeout(None);
            let reply = match peer_allowed(&stream) {
                Ok(()) => execute(request),
                Err(message) => Reply {
                    exit_code: 1,
                    stdout: Vec::new(),
                    stderr: message.into_bytes(),
                },
            };
            let _ = stream.write_all(&reply.exit_code.to_le_bytes());
            let _ = write_field(&mut stream, &reply.stdout);
            let _ = write_field(&mut stream, &reply.stderr);
        });
    }
}

/// Wakes a blocked `accept_loop` so it can notice `stop`.
pub fn wake(state_dir: &Path) {
    let _ = UnixStream::connect(socket_path(state_dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_fields_are_refused_not_allocated() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        let err = read_field(&mut &bytes[4..], FIELD_BYTES_MAX).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn fields_round_trip() {
        let mut bytes = Vec::new();
        write_field(&mut bytes, b"tank/vol").unwrap();
        assert_eq!(read_field(&mut bytes.as_slice(), 100).unwrap(), b"tank/vol");
    }
}
