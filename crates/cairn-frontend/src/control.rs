//! The control socket: how `cairn` commands keep working while a server owns the pools.
//!
//! A running server holds its pools' devices (exclusive locks), so a second process cannot open
//! them. Instead, every command first looks for `STATE_DIR/control.sock`; if a server answers,
//! the client sends the command it parsed, as a typed request, and the server runs the same
//! command code against its live pools and sends back what it printed and its exit code.
//! A stale socket file (no server behind it) is ignored and the command runs locally.
//!
//! The request is typed and self-contained: the client resolves every path against its own
//! working directory before sending (the server never changes its working directory, which
//! is shared by all its threads), and the server never re-parses a command line.
//! This module is generic over the command type `C`: the front end that parses commands
//! defines it (the CLI's parsed command); this library only carries it.
//!
//! Wire format (both directions length-prefixed, little-endian u32 lengths):
//!   request:  length + JSON of `ControlRequest<C>` (protocol version, history line, command)
//!   response: exit code (u32), stdout (length + bytes), stderr (length + bytes)
//! A request of another protocol version, or one that does not decode, is answered with exit
//! code 2 and a message, never dropped silently.
//!
//! The socket is created with mode 0600 inside a private staging directory and renamed into
//! place (no moment where it is open to others), and every connection's peer is checked with
//! SO_PEERCRED: only the server's own user (and root) may run commands through it. Sizes are
//! bounded so a confused client cannot make the server allocate without limit.

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const SOCKET_NAME: &str = "control.sock";
/// Version of the request encoding; a server answers requests of another version with an error.
pub const PROTOCOL_VERSION: u32 = 1;
const REQUEST_BYTES_MAX: u32 = 1 << 20;
const OUTPUT_BYTES_MAX: u32 = 256 << 20;
/// How long a client may take to send its request once connected.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Exit code of a request the server could not understand (as for a usage error).
const EXIT_BAD_REQUEST: u32 = 2;

pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_NAME)
}

/// One command for the server: what the client parsed, with absolute paths.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ControlRequest<C> {
    pub protocol: u32,
    /// The command as the user typed it, for the pool's history.
    pub command_line: String,
    pub command: C,
}

impl<C> ControlRequest<C> {
    pub fn new(command_line: String, command: C) -> ControlRequest<C> {
        ControlRequest {
            protocol: PROTOCOL_VERSION,
            command_line,
            command,
        }
    }
}

/// What a forwarded command produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub exit_code: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Reply {
    /// A reply that only reports an error on stderr.
    pub fn error(exit_code: u32, message: String) -> Reply {
        Reply {
            exit_code,
            stdout: Vec::new(),
            stderr: message.into_bytes(),
        }
    }
}

/// Why the control socket could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("a cairn server is already running for {} (control socket {})", state_dir.display(), socket.display())]
    AlreadyServed { state_dir: PathBuf, socket: PathBuf },
    #[error("cannot create state directory {}", dir.display())]
    StateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot bind {}", path.display())]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot encode the request for the server")]
    Encode(#[source] serde_json::Error),
    #[error("cannot talk to the server at {}", path.display())]
    Send {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the server at {} did not answer", path.display())]
    Receive {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn write_field(stream: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "field over 4 GiB"))?;
    stream.write_all(&len.to_le_bytes())?;
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

/// Sends `request` to the server of `state_dir`, if one runs. `Ok(None)`: no server; run
/// locally.
pub fn forward<C: Serialize>(
    state_dir: &Path,
    request: &ControlRequest<C>,
) -> Result<Option<Reply>, ControlError> {
    let path = socket_path(state_dir);
    let Ok(mut stream) = UnixStream::connect(&path) else {
        return Ok(None);
    };
    let encoded = serde_json::to_vec(request).map_err(ControlError::Encode)?;
    write_field(&mut stream, &encoded)
        .and_then(|()| stream.flush())
        .map_err(|source| ControlError::Send {
            path: path.clone(),
            source,
        })?;
    read_reply(&mut stream)
        .map(Some)
        .map_err(|source| ControlError::Receive { path, source })
}

fn read_reply(stream: &mut impl Read) -> std::io::Result<Reply> {
    let exit_code = read_u32(stream)?;
    let stdout = read_field(stream, OUTPUT_BYTES_MAX)?;
    let stderr = read_field(stream, OUTPUT_BYTES_MAX)?;
    Ok(Reply {
        exit_code,
        stdout,
        stderr,
    })
}

fn write_reply(stream: &mut impl Write, reply: &Reply) -> std::io::Result<()> {
    stream.write_all(&reply.exit_code.to_le_bytes())?;
    write_field(stream, &reply.stdout)?;
    write_field(stream, &reply.stderr)?;
    stream.flush()
}

/// Decodes one request; a request the server cannot use becomes the reply that says why.
fn decode_request<C: DeserializeOwned>(bytes: &[u8]) -> Result<ControlRequest<C>, Reply> {
    #[derive(serde::Deserialize)]
    struct Version {
        protocol: u32,
    }
    let bad = |why: String| Reply::error(EXIT_BAD_REQUEST, format!("cairn: {why}\n"));
    let version: Version = serde_json::from_slice(bytes)
        .map_err(|err| bad(format!("the server cannot read this request: {err}")))?;
    if version.protocol != PROTOCOL_VERSION {
        return Err(bad(format!(
            "this client speaks control protocol {}, the server {PROTOCOL_VERSION}: use the cairn binary the server runs",
            version.protocol
        )));
    }
    serde_json::from_slice(bytes).map_err(|err| {
        bad(format!(
            "the server does not understand this command ({err}): use the cairn binary the server runs"
        ))
    })
}

/// Binds the control socket (mode 0600 from the start), refusing if another server answers on
/// it.
pub fn bind(state_dir: &Path) -> Result<UnixListener, ControlError> {
    crate::cache::create_dir_durably(state_dir).map_err(|source| ControlError::StateDir {
        dir: state_dir.to_path_buf(),
        source,
    })?;
    let path = socket_path(state_dir);
    cairn_nbd::bind_unix_std(&path, 0o600).map_err(|source| {
        if source.kind() == std::io::ErrorKind::AddrInUse {
            ControlError::AlreadyServed {
                state_dir: state_dir.to_path_buf(),
                socket: path.clone(),
            }
        } else {
            ControlError::Bind {
                path: path.clone(),
                source,
            }
        }
    })
}

/// A control connection refused for who is at the other end.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("this server runs as uid {own}, and uid {peer} may not control it")]
    OtherUser { own: u32, peer: u32 },
    #[error("cannot identify the client")]
    Unidentified(#[source] rustix::io::Errno),
}

/// Whether the peer of a control connection may run commands: the server's own user, or
/// root. (The socket's mode already keeps others out; this holds even if the mode or the
/// directory were loosened.)
fn peer_allowed(stream: &UnixStream) -> Result<(), Refusal> {
    let own = rustix::process::getuid();
    match rustix::net::sockopt::socket_peercred(stream) {
        Ok(peer) if peer.uid == own || peer.uid.is_root() => Ok(()),
        Ok(peer) => Err(Refusal::OtherUser {
            own: own.as_raw(),
            peer: peer.uid.as_raw(),
        }),
        Err(errno) => Err(Refusal::Unidentified(errno)),
    }
}

/// Runs one request from `stream` and writes its reply.
fn handle<C: DeserializeOwned>(
    mut stream: UnixStream,
    execute: &(dyn Fn(ControlRequest<C>) -> Reply + Send + Sync),
) {
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let Ok(bytes) = read_field(&mut stream, REQUEST_BYTES_MAX) else {
        return;
    };
    let _ = stream.set_read_timeout(None);
    let reply = match peer_allowed(&stream) {
        Ok(()) => match decode_request(&bytes) {
            Ok(request) => execute(request),
            Err(reply) => reply,
        },
        Err(refusal) => {
            let cause = std::error::Error::source(&refusal)
                .map(|cause| format!(": {cause}"))
                .unwrap_or_default();
            Reply::error(1, format!("cairn: refused: {refusal}{cause}\n"))
        }
    };
    let _ = write_reply(&mut stream, &reply);
}

/// Serves forwarded commands until `stop` is set; `execute` runs one request and returns its
/// reply. Each client is handled on its own thread; `execute` serializes what must be.
pub fn accept_loop<C: DeserializeOwned + 'static>(
    listener: UnixListener,
    stop: Arc<AtomicBool>,
    execute: Arc<dyn Fn(ControlRequest<C>) -> Reply + Send + Sync>,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            continue;
        };
        let execute = execute.clone();
        std::thread::spawn(move || handle(stream, execute.as_ref()));
    }
}

/// Wakes a blocked `accept_loop` so it can notice `stop`.
pub fn wake(state_dir: &Path) {
    let _ = UnixStream::connect(socket_path(state_dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    enum Command {
        Sync { pools: Vec<String> },
        Create { path: PathBuf },
    }

    #[test]
    fn oversized_fields_are_refused_not_allocated() {
        let bytes = u32::MAX.to_le_bytes();
        let err = read_field(&mut bytes.as_slice(), REQUEST_BYTES_MAX).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn requests_and_replies_round_trip() {
        let request = ControlRequest::new(
            "cairn pool sync tank".to_string(),
            Command::Sync {
                pools: vec!["tank".to_string()],
            },
        );
        let encoded = serde_json::to_vec(&request).unwrap();
        let decoded: ControlRequest<Command> = decode_request(&encoded).unwrap();
        assert_eq!(decoded.command, request.command);
        assert_eq!(decoded.command_line, "cairn pool sync tank");
        let reply = Reply {
            exit_code: 3,
            stdout: b"out".to_vec(),
            stderr: b"err".to_vec(),
        };
        let mut bytes = Vec::new();
        write_reply(&mut bytes, &reply).unwrap();
        assert_eq!(read_reply(&mut bytes.as_slice()).unwrap(), reply);
    }

    #[test]
    fn other_versions_and_unknown_commands_get_an_answer() {
        let old = br#"{"protocol":0,"command_line":"cairn","command":{"Sync":{"pools":[]}}}"#;
        let reply = decode_request::<Command>(old).unwrap_err();
        assert_eq!(reply.exit_code, EXIT_BAD_REQUEST);
        assert!(String::from_utf8_lossy(&reply.stderr).contains("protocol 0"));
        let unknown = br#"{"protocol":1,"command_line":"cairn","command":{"Explode":{}}}"#;
        let reply = decode_request::<Command>(unknown).unwrap_err();
        assert!(String::from_utf8_lossy(&reply.stderr).contains("does not understand"));
    }

    #[test]
    fn a_served_request_reaches_the_executor_with_its_paths() {
        let dir = tempfile::tempdir().unwrap();
        let listener = bind(dir.path()).unwrap();
        assert!(matches!(
            bind(dir.path()),
            Err(ControlError::AlreadyServed { .. })
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let execute: Arc<dyn Fn(ControlRequest<Command>) -> Reply + Send + Sync> =
            Arc::new(|request: ControlRequest<Command>| Reply {
                exit_code: 0,
                stdout: format!("{:?}", request.command).into_bytes(),
                stderr: Vec::new(),
            });
        let server = std::thread::spawn({
            let stop = stop.clone();
            move || accept_loop(listener, stop, execute)
        });
        let request = ControlRequest::new(
            "cairn".to_string(),
            Command::Create {
                path: PathBuf::from("/abs/d0.img"),
            },
        );
        let reply = forward(dir.path(), &request).unwrap().unwrap();
        assert_eq!(reply.exit_code, 0);
        assert_eq!(
            String::from_utf8(reply.stdout).unwrap(),
            "Create { path: \"/abs/d0.img\" }"
        );
        stop.store(true, Ordering::SeqCst);
        wake(dir.path());
        server.join().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(forward(elsewhere.path(), &request).unwrap().is_none());
    }
}
