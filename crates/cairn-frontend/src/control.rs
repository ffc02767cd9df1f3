//! The control socket: how front ends keep working while a server owns the pools.
//!
//! A running server holds its pools' devices (exclusive locks), so a second process cannot open
//! them. Instead, every command first looks for `STATE_DIR/control.sock`; if a server answers,
//! the client sends a typed `AdminRequest` (what it parsed, with absolute paths) and the server
//! runs it through the administration library (`admin::handle`) against its live pools and
//! sends back the typed reply (`Answer`: an `AdminReply` with notes) or the failure (message
//! and exit code). A client without a server calls `admin::handle` itself: the same function,
//! the same answers. A stale socket file (no server behind it) is ignored and the command runs
//! locally. Nothing is re-parsed and no printed text travels: how a reply is shown is the
//! client's.
//!
//! The request is self-contained: the client resolves every path against its own working
//! directory before sending (the server never changes its working directory, which is shared
//! by all its threads).
//!
//! Wire format (both directions one field: a little-endian u32 length, then that many bytes):
//!   request:  JSON of `ControlRequest` (protocol version, history line, `AdminRequest`)
//!   response: JSON of `ControlReply` (`Ok(Answer)` or `Err(Failure)`)
//! A request of another protocol version, or one that does not decode, is answered with a
//! failure of exit code 2 and a message, never dropped silently.
//!
//! A request may carry one file descriptor (SCM_RIGHTS on its first byte; `passed.rs`): the
//! stream of `cairn send` (the client's stdout) or `cairn receive` (its stdin), which the
//! server then writes or reads itself while the client waits for the reply. The server reads
//! every request with `recvmsg`, and hands what came with it to the executor (`Attached`).
//! This adds requests, not a new encoding: the version stays 2 (a server without them answers
//! that it does not understand the command).
//!
//! The socket is created with mode 0600 inside a private staging directory and renamed into
//! place (no moment where it is open to others), and every connection's peer is checked with
//! SO_PEERCRED: only the server's own user (and root) may run commands through it. Sizes are
//! bounded so a confused client cannot make the server allocate without limit.

use crate::admin::{AdminRequest, Answer};
use crate::passed;
use rustix::fd::{BorrowedFd, OwnedFd};
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

const SOCKET_NAME: &str = "control.sock";
/// Version of the request encoding; a server answers requests of another version with an error.
/// 2: typed requests and replies (1 carried the CLI's parsed command and its printed output).
pub const PROTOCOL_VERSION: u32 = 2;
const REQUEST_BYTES_MAX: u32 = 1 << 20;
const REPLY_BYTES_MAX: u32 = 256 << 20;
/// How long a client may take to send its request once connected.
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// Exit code of a request the server could not understand (as for a usage error).
const EXIT_BAD_REQUEST: u32 = 2;

pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join(SOCKET_NAME)
}

/// One request for the server: what the client parsed, with absolute paths.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ControlRequest {
    pub protocol: u32,
    /// The command as the user typed it, for the pool's history.
    pub command_line: String,
    pub request: AdminRequest,
}

impl ControlRequest {
    pub fn new(command_line: String, request: AdminRequest) -> ControlRequest {
        ControlRequest {
            protocol: PROTOCOL_VERSION,
            command_line,
            request,
        }
    }
}

/// A request that failed: what to tell the user (the error with its causes, one line) and the
/// exit code a command line front end ends with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    pub message: String,
    pub exit_code: u32,
}

impl Failure {
    /// An error of the administration library, as it is shown: the error and its causes.
    pub fn of(err: &crate::admin::AdminError) -> Failure {
        Failure {
            message: crate::pools::chain_text(err),
            exit_code: 1,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// What the server answers to one request.
pub type ControlReply = Result<Answer, Failure>;

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
    #[error("cannot read the answer of the server at {}", path.display())]
    Decode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
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
pub fn forward(
    state_dir: &Path,
    request: &ControlRequest,
) -> Result<Option<ControlReply>, ControlError> {
    forward_with_stream(state_dir, request, None)
}

/// `forward`, passing `stream` (a send's destination, a receive's source) with the request:
/// the server reads or writes it before it answers.
pub fn forward_with_stream(
    state_dir: &Path,
    request: &ControlRequest,
    stream: Option<BorrowedFd<'_>>,
) -> Result<Option<ControlReply>, ControlError> {
    let path = socket_path(state_dir);
    let Ok(mut connection) = UnixStream::connect(&path) else {
        return Ok(None);
    };
    let encoded = serde_json::to_vec(request).map_err(ControlError::Encode)?;
    let sent = match stream {
        Some(fd) => {
            field_bytes(&encoded).and_then(|field| passed::send_with_fd(&connection, &field, fd))
        }
        None => write_field(&mut connection, &encoded),
    };
    sent.and_then(|()| connection.flush())
        .map_err(|source| ControlError::Send {
            path: path.clone(),
            source,
        })?;
    let bytes =
        read_field(&mut connection, REPLY_BYTES_MAX).map_err(|source| ControlError::Receive {
            path: path.clone(),
            source,
        })?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| ControlError::Decode { path, source })
}

/// One field as it goes on the wire: its length, then its bytes.
fn field_bytes(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut field = Vec::with_capacity(bytes.len() + 4);
    write_field(&mut field, bytes)?;
    Ok(field)
}

/// Reads one request field, keeping the descriptors that came with it.
fn read_request(stream: &UnixStream, limit: u32) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut fds = Vec::new();
    let mut raw = [0u8; 4];
    passed::read_exact_with_fds(stream, &mut raw, &mut fds)?;
    let len = u32::from_le_bytes(raw);
    if len > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("field of {len} bytes exceeds {limit}"),
        ));
    }
    let mut bytes = vec![0u8; len as usize];
    passed::read_exact_with_fds(stream, &mut bytes, &mut fds)?;
    Ok((bytes, fds))
}

fn write_reply(stream: &mut impl Write, reply: &ControlReply) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    write_field(stream, &bytes)?;
    stream.flush()
}

fn bad_request(message: String) -> Failure {
    Failure {
        message,
        exit_code: EXIT_BAD_REQUEST,
    }
}

/// Decodes one request; a request the server cannot use becomes the failure that says why.
fn decode_request(bytes: &[u8]) -> Result<ControlRequest, Failure> {
    #[derive(serde::Deserialize)]
    struct Version {
        protocol: u32,
    }
    let version: Version = serde_json::from_slice(bytes)
        .map_err(|err| bad_request(format!("the server cannot read this request: {err}")))?;
    if version.protocol != PROTOCOL_VERSION {
        return Err(bad_request(format!(
            "this client speaks control protocol {}, the server {PROTOCOL_VERSION}: use the cairn binary the server runs",
            version.protocol
        )));
    }
    serde_json::from_slice(bytes).map_err(|err| {
        bad_request(format!(
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

/// What came with a request besides its JSON.
pub struct Attached {
    /// The descriptor the client passed (at most one is taken), if any.
    pub stream: Option<OwnedFd>,
    /// The connection the reply goes back on, for watching whether the client is still
    /// there (a copy; `None` if it could not be made).
    pub connection: Option<UnixStream>,
}

/// What runs one request for a server: decoded, from an allowed peer.
pub type Execute = dyn Fn(ControlRequest, Attached) -> ControlReply + Send + Sync;

/// Runs one request from `stream` and writes its reply.
fn handle(mut stream: UnixStream, execute: &Execute) {
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let Ok((bytes, mut fds)) = read_request(&stream, REQUEST_BYTES_MAX) else {
        return;
    };
    let _ = stream.set_read_timeout(None);
    let reply = match peer_allowed(&stream) {
        Ok(()) if fds.len() > passed::PASSED_FDS_MAX => Err(bad_request(format!(
            "a request carries at most {} file descriptor, not {}",
            passed::PASSED_FDS_MAX,
            fds.len()
        ))),
        Ok(()) => decode_request(&bytes).and_then(|request| {
            let attached = Attached {
                stream: fds.pop(),
                connection: stream.try_clone().ok(),
            };
            execute(request, attached)
        }),
        Err(refusal) => Err(Failure {
            message: format!("refused: {}", crate::pools::chain_text(&refusal)),
            exit_code: 1,
        }),
    };
    let _ = write_reply(&mut stream, &reply);
}

/// Serves requests until `stop` is set; `execute` runs one request and returns its reply.
/// Each client is handled on its own thread; `execute` serializes what must be.
pub fn accept_loop(listener: UnixListener, stop: Arc<AtomicBool>, execute: Arc<Execute>) {
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
    use crate::admin::AdminReply;

    #[test]
    fn oversized_fields_are_refused_not_allocated() {
        let bytes = u32::MAX.to_le_bytes();
        let err = read_field(&mut bytes.as_slice(), REQUEST_BYTES_MAX).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn requests_and_replies_round_trip() {
        let request = ControlRequest::new(
            "cairn stat l2arc tank".to_string(),
            AdminRequest::L2arcCounters {
                pools: vec!["tank".to_string()],
            },
        );
        let encoded = serde_json::to_vec(&request).unwrap();
        let decoded = decode_request(&encoded).unwrap();
        assert_eq!(decoded.request, request.request);
        assert_eq!(decoded.command_line, "cairn stat l2arc tank");
        let reply: ControlReply = Ok(Answer {
            reply: AdminReply::Done,
            notes: vec!["pool 'x' is unavailable".to_string()],
        });
        let mut bytes = Vec::new();
        write_reply(&mut bytes, &reply).unwrap();
        let field = read_field(&mut bytes.as_slice(), REPLY_BYTES_MAX).unwrap();
        let back: ControlReply = serde_json::from_slice(&field).unwrap();
        let answer = back.unwrap();
        assert!(matches!(answer.reply, AdminReply::Done));
        assert_eq!(answer.notes, ["pool 'x' is unavailable"]);
        let failure: ControlReply = Err(Failure {
            message: "no".to_string(),
            exit_code: 3,
        });
        let text = serde_json::to_vec(&failure).unwrap();
        let back: ControlReply = serde_json::from_slice(&text).unwrap();
        assert_eq!(back.unwrap_err().exit_code, 3);
    }

    #[test]
    fn other_versions_and_unknown_requests_get_an_answer() {
        let old = br#"{"protocol":1,"command_line":"cairn","command":{"Sync":{"pools":[]}}}"#;
        let failure = decode_request(old).unwrap_err();
        assert_eq!(failure.exit_code, EXIT_BAD_REQUEST);
        assert!(
            failure.message.contains("protocol 1"),
            "{}",
            failure.message
        );
        let unknown = br#"{"protocol":2,"command_line":"cairn","request":{"Explode":{}}}"#;
        let failure = decode_request(unknown).unwrap_err();
        assert!(failure.message.contains("does not understand"));
    }

    #[test]
    fn a_served_request_reaches_the_executor_and_its_reply_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let listener = bind(dir.path()).unwrap();
        assert!(matches!(
            bind(dir.path()),
            Err(ControlError::AlreadyServed { .. })
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let execute: Arc<Execute> = Arc::new(|request: ControlRequest, _: Attached| match request
            .request
        {
            AdminRequest::DeviceIo { pools } => Ok(Answer {
                reply: AdminReply::Done,
                notes: pools,
            }),
            _ => Err(Failure {
                message: "unexpected".to_string(),
                exit_code: 1,
            }),
        });
        let server = std::thread::spawn({
            let stop = stop.clone();
            move || accept_loop(listener, stop, execute)
        });
        let request = ControlRequest::new(
            "cairn".to_string(),
            AdminRequest::DeviceIo {
                pools: vec!["tank".to_string()],
            },
        );
        let answer = forward(dir.path(), &request).unwrap().unwrap().unwrap();
        assert_eq!(answer.notes, ["tank"]);
        let refused = forward(
            dir.path(),
            &ControlRequest::new("cairn".to_string(), AdminRequest::ArcCounters),
        )
        .unwrap()
        .unwrap()
        .unwrap_err();
        assert_eq!(refused.message, "unexpected");
        // A client of another protocol version gets a failure, not silence.
        let mut stream = UnixStream::connect(socket_path(dir.path())).unwrap();
        write_field(
            &mut stream,
            br#"{"protocol":1,"command_line":"cairn","command":"Up"}"#,
        )
        .unwrap();
        let field = read_field(&mut stream, REPLY_BYTES_MAX).unwrap();
        let reply: ControlReply = serde_json::from_slice(&field).unwrap();
        assert_eq!(reply.unwrap_err().exit_code, EXIT_BAD_REQUEST);
        stop.store(true, Ordering::SeqCst);
        wake(dir.path());
        server.join().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        assert!(forward(elsewhere.path(), &request).unwrap().is_none());
    }

    #[test]
    fn a_stream_passed_with_a_request_reaches_the_executor() {
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let listener = bind(dir.path()).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let execute: Arc<Execute> = Arc::new(|request: ControlRequest, attached: Attached| {
            assert!(request.request.takes_stream());
            assert!(attached.connection.is_some());
            let mut out = std::fs::File::from(attached.stream.expect("a stream"));
            out.write_all(b"stream bytes").unwrap();
            Ok(Answer::new(AdminReply::Done))
        });
        let server = std::thread::spawn({
            let stop = stop.clone();
            move || accept_loop(listener, stop, execute)
        });
        let (mut reader, writer) = std::io::pipe().unwrap();
        let request = ControlRequest::new(
            "cairn send tank/vol@a".to_string(),
            AdminRequest::Send {
                snapshot: "tank/vol@a".to_string(),
                from: None,
                compressed: false,
            },
        );
        let answer = forward_with_stream(dir.path(), &request, Some(writer.as_fd()))
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(matches!(answer.reply, AdminReply::Done));
        drop(writer);
        let mut got = String::new();
        reader.read_to_string(&mut got).unwrap();
        assert_eq!(got, "stream bytes");
        stop.store(true, Ordering::SeqCst);
        wake(dir.path());
        server.join().unwrap();
    }
}
