//! The byte streams a connection runs on, and how each splits into the reader half (the
//! request loop) and the writer half (the reply loop).
//!
//! TCP and Unix sockets split into owned halves with no lock between them, which matters at
//! hundreds of thousands of requests a second. STARTTLS needs the halves joined again for the
//! TLS handshake (`from_halves`); a TLS stream then splits through Tokio's generic `split`, whose
//! lock is the price of encryption's shared state. [`Duplex`] carries a stream that arrives
//! already split (`NbdServer::serve_stream`).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::{TcpStream, UnixStream, tcp, unix};
use tokio_rustls::server::TlsStream;

/// A stream a connection can be served on.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin + Send + Sized + 'static {
    type Read: AsyncRead + Unpin + Send + 'static;
    type Write: AsyncWrite + Unpin + Send + 'static;

    fn into_halves(self) -> (Self::Read, Self::Write);

    /// Joins the halves `into_halves` made. Fails only if they came from different streams.
    fn from_halves(read: Self::Read, write: Self::Write) -> io::Result<Self>;
}

fn not_a_pair(err: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::other(err)
}

impl Transport for TcpStream {
    type Read = tcp::OwnedReadHalf;
    type Write = tcp::OwnedWriteHalf;

    fn into_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }

    fn from_halves(read: Self::Read, write: Self::Write) -> io::Result<Self> {
        read.reunite(write).map_err(not_a_pair)
    }
}

impl Transport for UnixStream {
    type Read = unix::OwnedReadHalf;
    type Write = unix::OwnedWriteHalf;

    fn into_halves(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }

    fn from_halves(read: Self::Read, write: Self::Write) -> io::Result<Self> {
        read.reunite(write).map_err(not_a_pair)
    }
}

impl<S: Transport> Transport for TlsStream<S> {
    type Read = ReadHalf<TlsStream<S>>;
    type Write = WriteHalf<TlsStream<S>>;

    fn into_halves(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }

    fn from_halves(read: Self::Read, write: Self::Write) -> io::Result<Self> {
        if !read.is_pair_of(&write) {
            return Err(io::Error::other("halves of different TLS streams"));
        }
        Ok(read.unsplit(write))
    }
}

/// A stream made of a separate reader and writer.
pub(crate) struct Duplex<R, W> {
    read: R,
    write: W,
}

impl<R, W> Duplex<R, W> {
    pub(crate) fn new(read: R, write: W) -> Duplex<R, W> {
        Duplex { read, write }
    }
}

impl<R: AsyncRead + Unpin, W: Unpin> AsyncRead for Duplex<R, W> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().read).poll_read(cx, buf)
    }
}

impl<R: Unpin, W: AsyncWrite + Unpin> AsyncWrite for Duplex<R, W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().write).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().write).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().write).poll_shutdown(cx)
    }
}

impl<R, W> Transport for Duplex<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Read = R;
    type Write = W;

    fn into_halves(self) -> (R, W) {
        (self.read, self.write)
    }

    fn from_halves(read: R, write: W) -> io::Result<Self> {
        Ok(Duplex { read, write })
    }
}
