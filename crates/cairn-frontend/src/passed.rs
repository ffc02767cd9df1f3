//! A client's file descriptor handed to the server over the control socket: how `cairn send`
//! and `cairn receive` work while a server holds the pool. The client passes its stdout (a
//! send's destination) or stdin (a receive's source) with SCM_RIGHTS beside its request; the
//! server then reads or writes the stream itself, and the bytes never cross the control
//! socket.
//!
//! - `send_with_fd` / `read_exact_with_fds`: the descriptor rides on the first bytes of the
//!   request (one `sendmsg` with an SCM_RIGHTS message); the server reads its request with
//!   `recvmsg`, so descriptors are never dropped silently by a plain `read`, and every one it
//!   receives is owned (closed when dropped, close-on-exec from the start).
//! - `PassedStream`: the descriptor as a `Read` + `Write` for the engine, which stops once the
//!   client is gone. A client waits on the control connection for its reply and sends nothing
//!   more; the connection turning readable (end of file) means the command was interrupted or
//!   killed, and then the work for it stops with an error at the next read or write instead
//!   of running on (a receive the user interrupted must not complete later). Each read or
//!   write first polls the descriptor and the connection together, so a pipe whose reader
//!   stopped reading does not hold a server thread past its client's end: writes to anything
//!   but a regular file go in pieces no larger than a pipe always takes once it polls
//!   writable (`PIPE_PIECE_BYTES`).
//! - `StreamJobs`: the sends and receives a server runs. When it stops, it ends them the
//!   same way (the read side of each connection is shut, which the polling sees) and waits for
//!   them before it exports its pools, so a receive is rolled back rather than cut by the
//!   export; the client is told the server stopped.
//!
//! Invariant: a write to a reader that went away must fail with EPIPE, not kill the server,
//! so a process serving streams ignores SIGPIPE (`cairn serve` does; this library does not
//! change a process's signal handling).

use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The most descriptors one request may carry that are taken (more are refused).
pub const PASSED_FDS_MAX: usize = 1;
/// A write to a pipe that polled writable takes this much without blocking (one page).
const PIPE_PIECE_BYTES: usize = 4096;

/// Writes all of `bytes` on `stream`, with `fd` attached to the first of them.
pub fn send_with_fd(stream: &UnixStream, bytes: &[u8], fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(std::io::Error::other("no room for the descriptor"));
    }
    let sent = loop {
        match rustix::net::sendmsg(
            stream,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Ok(sent) => break sent,
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        }
    };
    // The descriptor went with the first byte; the rest is plain bytes.
    let mut rest = stream;
    rest.write_all(&bytes[sent..])
}

/// Fills `buf` from `stream`, keeping every descriptor that came with the bytes in `fds`. A
/// descriptor beyond the buffer's room is closed by the kernel and reported as an error.
pub fn read_exact_with_fds(
    stream: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> std::io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let mut space =
            [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(PASSED_FDS_MAX + 1))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = match rustix::net::recvmsg(
            stream,
            &mut [IoSliceMut::new(&mut buf[filled..])],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(received) => received,
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(passed) = message {
                fds.extend(passed);
            }
        }
        if received.flags.contains(ReturnFlags::CTRUNC) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the request carried more file descriptors than it may",
            ));
        }
        if received.bytes == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        filled += received.bytes;
    }
    Ok(())
}

/// A descriptor a client passed, read or written for it while it waits (see the module doc).
pub struct PassedStream {
    file: File,
    /// The control connection, only polled: readable means the client is gone (or the server
    /// is stopping: `stopping`).
    client: UnixStream,
    stopping: Option<Arc<AtomicBool>>,
    /// The most one write may carry (no limit for a regular file).
    piece_bytes: usize,
}

impl PassedStream {
    /// `fd`, passed by the client at the other end of `client`; `stopping`, when set, says the
    /// connection was shut because the server stops.
    pub fn new(
        fd: OwnedFd,
        client: UnixStream,
        stopping: Option<Arc<AtomicBool>>,
    ) -> std::io::Result<PassedStream> {
        let stat = rustix::fs::fstat(&fd)?;
        let regular = rustix::fs::FileType::from_raw_mode(stat.st_mode).is_file();
        Ok(PassedStream {
            file: File::from(fd),
            client,
            stopping,
            piece_bytes: if regular {
                usize::MAX
            } else {
                PIPE_PIECE_BYTES
            },
        })
    }

    fn client_gone(&self) -> std::io::Error {
        let stopping = self
            .stopping
            .as_ref()
            .is_some_and(|stopping| stopping.load(Ordering::SeqCst));
        std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            if stopping {
                "the server is stopping"
            } else {
                "the client went away (its command was interrupted)"
            },
        )
    }

    /// Waits until the descriptor is ready for `events`, or fails once the client is gone.
    fn wait(&self, events: PollFlags) -> std::io::Result<()> {
        let gone = PollFlags::IN | PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR;
        loop {
            let mut fds = [
                PollFd::new(&self.client, PollFlags::IN | PollFlags::RDHUP),
                PollFd::new(&self.file, events),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
            if fds[0].revents().intersects(gone) {
                return Err(self.client_gone());
            }
            // Ready, or an error or hang-up the read or write itself reports.
            if !fds[1].revents().is_empty() {
                return Ok(());
            }
        }
    }
}

impl Read for PassedStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.wait(PollFlags::IN)?;
        self.file.read(buf)
    }
}

impl Write for PassedStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.wait(PollFlags::OUT)?;
        let piece = buf.len().min(self.piece_bytes);
        self.file.write(&buf[..piece])
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl AsFd for PassedStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// The sends and receives a server runs (see the module doc).
#[derive(Default)]
pub struct StreamJobs {
    running: parking_lot::Mutex<JobsRunning>,
    ended: parking_lot::Condvar,
    stopping: Arc<AtomicBool>,
}

#[derive(Default)]
struct JobsRunning {
    next_id: u64,
    /// Each job's control connection (a copy), by job id.
    connections: BTreeMap<u64, UnixStream>,
}

/// Why a job was not started.
#[derive(Debug, thiserror::Error)]
#[error("the server is stopping")]
pub struct Stopping;

/// A running job; it ends when dropped.
pub struct StreamJob<'a> {
    jobs: &'a StreamJobs,
    id: u64,
}

impl StreamJobs {
    /// Records a job for the client at the other end of `connection`.
    pub fn start(&self, connection: &UnixStream) -> Result<StreamJob<'_>, Stopping> {
        let copy = connection.try_clone().map_err(|_| Stopping)?;
        let mut running = self.running.lock();
        // Checked under the lock: `stop_all` sets it under the lock too, so no job starts
        // after it looked.
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Stopping);
        }
        let id = running.next_id;
        running.next_id += 1;
        running.connections.insert(id, copy);
        Ok(StreamJob { jobs: self, id })
    }

    /// Set once the server stops: for `PassedStream::new`.
    pub fn stopping(&self) -> Arc<AtomicBool> {
        self.stopping.clone()
    }

    /// Ends every job and waits up to `limit` for them; returns how many still run.
    pub fn stop_all(&self, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        let mut running = self.running.lock();
        self.stopping.store(true, Ordering::SeqCst);
        for connection in running.connections.values() {
            let _ = connection.shutdown(std::net::Shutdown::Read);
        }
        while !running.connections.is_empty() {
            if self.ended.wait_until(&mut running, deadline).timed_out() {
                break;
            }
        }
        running.connections.len()
    }
}

impl Drop for StreamJob<'_> {
    fn drop(&mut self) {
        self.jobs.running.lock().connections.remove(&self.id);
        self.jobs.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_passed_with_bytes_arrives_owned_and_usable() {
        let (client, server) = UnixStream::pair().unwrap();
        let (mut reader, writer) = std::io::pipe().unwrap();
        send_with_fd(&client, b"hello", writer.as_fd()).unwrap();
        drop(writer);
        let mut buf = [0u8; 5];
        let mut fds = Vec::new();
        read_exact_with_fds(&server, &mut buf, &mut fds).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(fds.len(), 1);
        let mut stream = PassedStream::new(fds.pop().unwrap(), server, None).unwrap();
        stream.write_all(&[7u8; 10_000]).unwrap();
        drop(stream);
        let mut got = Vec::new();
        reader.read_to_end(&mut got).unwrap();
        assert_eq!(got, vec![7u8; 10_000]);
    }

    #[test]
    fn work_for_a_client_that_went_away_stops() {
        let (client, server) = UnixStream::pair().unwrap();
        let (reader, writer) = std::io::pipe().unwrap();
        let mut stream = PassedStream::new(OwnedFd::from(writer), server, None).unwrap();
        // The pipe's reader never reads: once it is full, only the client's end frees the
        // writer.
        let writing = std::thread::spawn(move || {
            let chunk = vec![1u8; 1 << 16];
            loop {
                if let Err(err) = stream.write_all(&chunk) {
                    return err;
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        drop(client);
        let err = writing.join().unwrap();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionAborted);
        drop(reader);
    }

    #[test]
    fn a_reader_that_went_away_fails_the_write() {
        let (_client, server) = UnixStream::pair().unwrap();
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        // SIGPIPE is ignored by the test harness (Rust's runtime), as a server must.
        let mut stream = PassedStream::new(OwnedFd::from(writer), server, None).unwrap();
        let err = stream.write_all(b"x").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_stopping_server_ends_its_jobs_and_tells_their_clients_why() {
        let jobs = Arc::new(StreamJobs::default());
        let (_client, server) = UnixStream::pair().unwrap();
        let (_reader, writer) = std::io::pipe().unwrap();
        let worker = std::thread::spawn({
            let jobs = jobs.clone();
            move || {
                let job = jobs.start(&server).unwrap();
                let mut stream =
                    PassedStream::new(OwnedFd::from(writer), server, Some(jobs.stopping()))
                        .unwrap();
                let chunk = vec![1u8; 1 << 16];
                let err = loop {
                    if let Err(err) = stream.write_all(&chunk) {
                        break err;
                    }
                };
                drop(job);
                err
            }
        });
        while jobs.running.lock().connections.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(jobs.stop_all(Duration::from_secs(10)), 0);
        let err = worker.join().unwrap();
        assert_eq!(err.to_string(), "the server is stopping");
        let (_other, late) = UnixStream::pair().unwrap();
        assert!(jobs.start(&late).is_err());
    }
}
