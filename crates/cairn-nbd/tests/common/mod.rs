//! Test helpers shared by the integration tests: an in-memory sparse export (`MemExport`), a
//! provider over a map of them, a server running on its own runtime on 127.0.0.1:0 and a Unix
//! socket (`TestServer`), and a small blocking raw-bytes NBD client (`Client`) that can speak
//! the protocol correctly or break it on purpose.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn_nbd::proto::*;
use cairn_nbd::{
    Export, ExportError, ExportProvider, NBD_STATE_HOLE, NBD_STATE_ZERO, NbdServer, ServerConfig,
};
use parking_lot::Mutex;

pub mod hostile;

// ------------------------------------------------------------------------------------------
// MemExport

/// A sparse in-memory disk: chunks of `chunk` bytes, `None` = hole (reads as zeroes).
pub struct MemExport {
    size: u64,
    chunk: usize,
    readonly: bool,
    fast_zero: bool,
    chunks: Mutex<Vec<Option<Box<[u8]>>>>,
    /// Calls to `flush`.
    pub flushes: AtomicU64,
    /// Write-like calls made with `fua = true`.
    pub fua_ops: AtomicU64,
    /// `write` calls that have begun.
    pub writes_started: AtomicU64,
    /// Write-like calls that have returned.
    pub writes_completed: AtomicU64,
    /// `writes_completed` as seen by each `flush` call, in order.
    pub flush_saw: Mutex<Vec<u64>>,
    /// Every write sleeps this long before taking effect.
    pub write_delay: Mutex<Duration>,
    /// Reads starting at this offset sleep this long.
    pub read_delay: Mutex<Option<(u64, Duration)>>,
    /// Reads starting at this offset panic.
    pub panic_at: Mutex<Option<u64>>,
    /// Reads the server served through `try_read_now` (as a cache hit would be).
    pub reads_now: AtomicU64,
    /// Whether `try_read_now` serves reads at all.
    pub serve_reads_now: std::sync::atomic::AtomicBool,
    /// Plain writes the server made through `try_write_now` (as a volume takes whole blocks).
    pub writes_now: AtomicU64,
    /// Whether `try_write_now` takes writes at all.
    pub serve_writes_now: std::sync::atomic::AtomicBool,
}

impl MemExport {
    pub fn new(size: u64) -> MemExport {
        MemExport::with(size, 4096, false, true)
    }

    pub fn with(size: u64, chunk: usize, readonly: bool, fast_zero: bool) -> MemExport {
        let n = size.div_ceil(chunk as u64) as usize;
        MemExport {
            size,
            chunk,
            readonly,
            fast_zero,
            chunks: Mutex::new(vec![None; n]),
            flushes: AtomicU64::new(0),
            fua_ops: AtomicU64::new(0),
            writes_started: AtomicU64::new(0),
            writes_completed: AtomicU64::new(0),
            flush_saw: Mutex::new(Vec::new()),
            write_delay: Mutex::new(Duration::ZERO),
            read_delay: Mutex::new(None),
            panic_at: Mutex::new(None),
            reads_now: AtomicU64::new(0),
            serve_reads_now: std::sync::atomic::AtomicBool::new(true),
            writes_now: AtomicU64::new(0),
            serve_writes_now: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// Copies bytes straight into the disk (bypassing the server).
    pub fn fill(&self, offset: u64, data: &[u8]) {
        self.put(offset, data);
    }

    /// The bytes at [offset, offset+len).
    pub fn contents(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0u8; len];
        self.get(offset, &mut buf);
        buf
    }

    /// Number of allocated chunks.
    pub fn allocated(&self) -> usize {
        self.chunks.lock().iter().filter(|c| c.is_some()).count()
    }

    /// Whether the chunk holding `offset` is allocated.
    pub fn is_allocated(&self, offset: u64) -> bool {
        self.chunks.lock()[(offset / self.chunk as u64) as usize].is_some()
    }

    fn get(&self, offset: u64, buf: &mut [u8]) {
        let chunks = self.chunks.lock();
        let mut done = 0usize;
        while done < buf.len() {
            let pos = offset + done as u64;
            let idx = (pos / self.chunk as u64) as usize;
            let within = (pos % self.chunk as u64) as usize;
            let n = (self.chunk - within).min(buf.len() - done);
            match &chunks[idx] {
                Some(c) => buf[done..done + n].copy_from_slice(&c[within..within + n]),
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
    }

    fn put(&self, offset: u64, data: &[u8]) {
        let mut chunks = self.chunks.lock();
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let idx = (pos / self.chunk as u64) as usize;
            let within = (pos % self.chunk as u64) as usize;
            let n = (self.chunk - within).min(data.len() - done);
            let c = chunks[idx].get_or_insert_with(|| vec![0u8; self.chunk].into_boxed_slice());
            c[within..within + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }

    /// Zeroes a range, dropping whole chunks when `punch` (they become holes).
    fn zero(&self, offset: u64, len: u64, punch: bool) {
        let mut chunks = self.chunks.lock();
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let idx = (pos / self.chunk as u64) as usize;
            let within = (pos % self.chunk as u64) as usize;
            let n = ((self.chunk - within) as u64).min(end - pos) as usize;
            if n == self.chunk && punch {
                chunks[idx] = None;
            } else if let Some(c) = &mut chunks[idx] {
                c[within..within + n].fill(0);
            } else if !punch {
                chunks[idx] = Some(vec![0u8; self.chunk].into_boxed_slice());
            }
            pos += n as u64;
        }
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        if offset.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(ExportError::OutOfRange);
        }
        Ok(())
    }

    fn wrote(&self, fua: bool) {
        if fua {
            self.fua_ops.fetch_add(1, Ordering::SeqCst);
        }
        self.writes_completed.fetch_add(1, Ordering::SeqCst);
    }
}

impl Export for MemExport {
    fn size(&self) -> u64 {
        self.size
    }
    fn preferred_block_size(&self) -> u32 {
        self.chunk as u32
    }
    fn readonly(&self) -> bool {
        self.readonly
    }
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.check(offset, buf.len() as u64)?;
        if *self.panic_at.lock() == Some(offset) {
            panic!("MemExport: injected panic at {offset}");
        }
        let delay = *self.read_delay.lock();
        if let Some((at, d)) = delay
            && at == offset
        {
            std::thread::sleep(d);
        }
        self.get(offset, buf);
        Ok(())
    }
    fn try_read_now(&self, offset: u64, buf: &mut [u8]) -> bool {
        // Reads with an injected delay or panic, and bad ranges, take the ordinary path.
        if !self.serve_reads_now.load(Ordering::SeqCst)
            || self.check(offset, buf.len() as u64).is_err()
            || *self.panic_at.lock() == Some(offset)
            || self.read_delay.lock().is_some_and(|(at, _)| at == offset)
        {
            return false;
        }
        self.get(offset, buf);
        self.reads_now.fetch_add(1, Ordering::SeqCst);
        true
    }
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        if self.readonly {
            return Err(ExportError::ReadOnly);
        }
        self.check(offset, data.len() as u64)?;
        self.writes_started.fetch_add(1, Ordering::SeqCst);
        let d = *self.write_delay.lock();
        if !d.is_zero() {
            std::thread::sleep(d);
        }
        self.put(offset, data);
        self.wrote(fua);
        Ok(())
    }
    fn try_write_now(&self, offset: u64, data: &bytes::Bytes) -> Option<Result<(), ExportError>> {
        // Writes with an injected delay (they "block"), refused ones and bad ranges take the
        // ordinary path, which reports the error.
        if !self.serve_writes_now.load(Ordering::SeqCst)
            || self.readonly
            || self.check(offset, data.len() as u64).is_err()
            || !self.write_delay.lock().is_zero()
        {
            return None;
        }
        self.writes_started.fetch_add(1, Ordering::SeqCst);
        self.put(offset, data);
        self.wrote(false);
        self.writes_now.fetch_add(1, Ordering::SeqCst);
        Some(Ok(()))
    }
    fn flush(&self) -> Result<(), ExportError> {
        let seen = self.writes_completed.load(Ordering::SeqCst);
        self.flush_saw.lock().push(seen);
        self.flushes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError> {
        self.check(offset, len)?;
        self.zero(offset, len, true);
        self.wrote(fua);
        Ok(())
    }
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        fua: bool,
        may_trim: bool,
    ) -> Result<(), ExportError> {
        self.check(offset, len)?;
        self.zero(offset, len, may_trim);
        self.wrote(fua);
        Ok(())
    }
    fn block_status(&self, offset: u64, len: u64) -> Result<Vec<(u64, u32)>, ExportError> {
        self.check(offset, len)?;
        let chunks = self.chunks.lock();
        let mut out: Vec<(u64, u32)> = Vec::new();
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let idx = (pos / self.chunk as u64) as usize;
            let within = pos % self.chunk as u64;
            let n = (self.chunk as u64 - within).min(end - pos);
            let flags = if chunks[idx].is_some() {
                0
            } else {
                NBD_STATE_HOLE | NBD_STATE_ZERO
            };
            match out.last_mut() {
                Some(last) if last.1 == flags => last.0 += n,
                _ => out.push((n, flags)),
            }
            pos += n;
        }
        Ok(out)
    }
    fn fast_zero(&self) -> bool {
        self.fast_zero
    }
}

/// Serves a fixed map of exports.
#[derive(Default)]
pub struct MemProvider {
    pub exports: BTreeMap<String, Arc<MemExport>>,
    pub descriptions: BTreeMap<String, String>,
}

impl MemProvider {
    pub fn add(mut self, name: &str, e: MemExport) -> MemProvider {
        self.exports.insert(name.to_owned(), Arc::new(e));
        self
    }
    pub fn describe(mut self, name: &str, d: &str) -> MemProvider {
        self.descriptions.insert(name.to_owned(), d.to_owned());
        self
    }
    pub fn get(&self, name: &str) -> Arc<MemExport> {
        self.exports[name].clone()
    }
}

impl ExportProvider for MemProvider {
    fn list(&self) -> Vec<String> {
        self.exports.keys().cloned().collect()
    }
    fn open(&self, name: &str) -> Option<Arc<dyn Export>> {
        self.exports.get(name).map(|e| e.clone() as Arc<dyn Export>)
    }
    fn description(&self, name: &str) -> Option<String> {
        self.descriptions.get(name).cloned()
    }
}

/// The standard provider: "tank/vol" (64 MiB, rw), "tank/ro" (8 MiB, read-only),
/// "tank/slow" (16 MiB, no fast zero).
pub fn standard_provider() -> MemProvider {
    MemProvider::default()
        .add("tank/vol", MemExport::new(64 << 20))
        .add("tank/ro", MemExport::with(8 << 20, 4096, true, true))
        .add("tank/slow", MemExport::with(16 << 20, 65536, false, false))
        .describe("tank/vol", "test volume")
}

// ------------------------------------------------------------------------------------------
// TestServer

/// A server on its own runtime, listening on 127.0.0.1:0 and a Unix socket in a temp dir.
pub struct TestServer {
    pub rt: tokio::runtime::Runtime,
    pub server: NbdServer,
    pub provider: Arc<MemProvider>,
    pub addr: SocketAddr,
    pub socket: PathBuf,
    pub dir: tempfile::TempDir,
    tasks: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start(provider: MemProvider, config: ServerConfig) -> TestServer {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let provider = Arc::new(provider);
        let server = NbdServer::new(provider.clone(), config);
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("nbd.sock");
        let (tcp, unix) = rt.block_on(async {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind tcp");
            let unix = cairn_nbd::bind_unix(&socket, 0o600).expect("bind unix");
            (tcp, unix)
        });
        let addr = tcp.local_addr().expect("addr");
        let s1 = server.clone();
        let s2 = server.clone();
        let tasks = vec![
            rt.spawn(async move { s1.serve_tcp(tcp).await }),
            rt.spawn(async move { s2.serve_unix(unix).await }),
        ];
        TestServer {
            rt,
            server,
            provider,
            addr,
            socket,
            dir,
            tasks,
        }
    }

    pub fn standard() -> TestServer {
        TestServer::start(standard_provider(), ServerConfig::default())
    }

    pub fn export(&self, name: &str) -> Arc<MemExport> {
        self.provider.get(name)
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd://{}/{}", self.addr, export)
    }

    pub fn unix_uri(&self, export: &str) -> String {
        format!("nbd+unix:///{}?socket={}", export, self.socket.display())
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.addr)
    }

    /// Waits (up to `limit`) until the server has no connection open.
    pub fn wait_no_connections(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.server.connections() == 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.server.connections() == 0
    }

    /// Shuts down and waits for the accept loops and every connection to finish.
    pub fn stop(mut self) {
        self.server.shutdown();
        let server = self.server.clone();
        let tasks = std::mem::take(&mut self.tasks);
        self.rt.block_on(async move {
            tokio::time::timeout(Duration::from_secs(10), server.wait_idle())
                .await
                .expect("server did not become idle");
            for t in tasks {
                t.await
                    .expect("accept task panicked")
                    .expect("accept loop failed");
            }
        });
    }
}

// ------------------------------------------------------------------------------------------
// Raw client

/// What `GO` / `INFO` told us.
#[derive(Debug, Default, Clone)]
pub struct Negotiated {
    pub size: u64,
    pub flags: u16,
    pub block: Option<(u32, u32, u32)>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub meta_id: Option<u32>,
}

/// One option reply.
#[derive(Debug)]
pub struct OptReply {
    pub option: u32,
    pub kind: u32,
    pub data: Vec<u8>,
}

/// One transmission-phase message.
#[derive(Debug)]
pub enum Msg {
    Simple {
        cookie: u64,
        error: u32,
        data: Vec<u8>,
    },
    Chunk {
        flags: u16,
        kind: u16,
        cookie: u64,
        payload: Vec<u8>,
    },
}

impl Msg {
    pub fn cookie(&self) -> u64 {
        match self {
            Msg::Simple { cookie, .. } | Msg::Chunk { cookie, .. } => *cookie,
        }
    }
    pub fn done(&self) -> bool {
        match self {
            Msg::Simple { .. } => true,
            Msg::Chunk { flags, .. } => flags & REPLY_FLAG_DONE != 0,
        }
    }
}

/// Result of a read through the structured path.
#[derive(Debug, Default)]
pub struct ReadResult {
    pub data: Vec<u8>,
    pub holes: usize,
    pub data_chunks: usize,
}

pub struct Client {
    pub s: TcpStream,
    pub structured: bool,
    /// Lengths of reads in flight (simple replies carry no length).
    pending_reads: HashMap<u64, u32>,
    next_cookie: u64,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_nodelay(true).unwrap();
        Client {
            s,
            structured: false,
            pending_reads: HashMap::new(),
            next_cookie: 1,
        }
    }

    pub fn set_timeout(&self, d: Duration) {
        self.s.set_read_timeout(Some(d)).unwrap();
        self.s.set_write_timeout(Some(d)).unwrap();
    }

    pub fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.s.write_all(b)
    }

    pub fn recv(&mut self, n: usize) -> std::io::Result<Vec<u8>> {
        let mut b = vec![0u8; n];
        self.s.read_exact(&mut b)?;
        Ok(b)
    }

    fn u16(&mut self) -> std::io::Result<u16> {
        let b = self.recv(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> std::io::Result<u32> {
        let b = self.recv(4)?;
        Ok(u32::from_be_bytes(b.try_into().unwrap()))
    }
    fn u64(&mut self) -> std::io::Result<u64> {
        let b = self.recv(8)?;
        Ok(u64::from_be_bytes(b.try_into().unwrap()))
    }

    /// Reads the greeting: (magic, magic, handshake flags).
    pub fn greeting(&mut self) -> (u64, u64, u16) {
        let a = self.u64().expect("greeting");
        let b = self.u64().expect("greeting");
        let f = self.u16().expect("greeting");
        (a, b, f)
    }

    /// Greeting + client flags (fixed newstyle, no zeroes).
    pub fn start(&mut self) -> u16 {
        let (a, b, f) = self.greeting();
        assert_eq!(a, NBDMAGIC);
        assert_eq!(b, IHAVEOPT);
        self.send(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
            .unwrap();
        f
    }

    pub fn send_option(&mut self, option: u32, data: &[u8]) -> std::io::Result<()> {
        let mut b = Vec::with_capacity(16 + data.len());
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        self.send(&b)
    }

    pub fn opt_reply(&mut self) -> std::io::Result<OptReply> {
        let magic = self.u64()?;
        assert_eq!(magic, OPT_REPLY_MAGIC, "bad option reply magic");
        let option = self.u32()?;
        let kind = self.u32()?;
        let len = self.u32()?;
        let data = self.recv(len as usize)?;
        Ok(OptReply { option, kind, data })
    }

    /// Sends an option and returns all its replies up to and including the final one.
    pub fn option(&mut self, option: u32, data: &[u8]) -> Vec<OptReply> {
        self.send_option(option, data).expect("send option");
        let mut out = Vec::new();
        loop {
            let r = self.opt_reply().expect("option reply");
            assert_eq!(r.option, option);
            let last = r.kind == REP_ACK || r.kind & (1 << 31) != 0;
            out.push(r);
            if last {
                return out;
            }
        }
    }

    pub fn info_data(name: &str, requests: &[u16]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(requests.len() as u16).to_be_bytes());
        for r in requests {
            d.extend_from_slice(&r.to_be_bytes());
        }
        d
    }

    pub fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut d = Vec::new();
        d.extend_from_slice(&(name.len() as u32).to_be_bytes());
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    /// Parses INFO replies into `Negotiated`; returns the final reply type.
    pub fn parse_info(replies: &[OptReply]) -> (Negotiated, u32) {
        let mut n = Negotiated::default();
        for r in replies {
            if r.kind != REP_INFO {
                continue;
            }
            let t = u16::from_be_bytes([r.data[0], r.data[1]]);
            let d = &r.data[2..];
            match t {
                INFO_EXPORT => {
                    assert_eq!(r.data.len(), 12);
                    n.size = u64::from_be_bytes(d[0..8].try_into().unwrap());
                    n.flags = u16::from_be_bytes([d[8], d[9]]);
                }
                INFO_NAME => n.name = Some(String::from_utf8(d.to_vec()).unwrap()),
                INFO_DESCRIPTION => n.description = Some(String::from_utf8(d.to_vec()).unwrap()),
                INFO_BLOCK_SIZE => {
                    assert_eq!(r.data.len(), 14);
                    let g = |i: usize| u32::from_be_bytes(d[i..i + 4].try_into().unwrap());
                    n.block = Some((g(0), g(4), g(8)));
                }
                _ => {}
            }
        }
        (n, replies.last().map(|r| r.kind).unwrap_or(0))
    }

    /// Full handshake with GO: optionally structured replies and `base:allocation`.
    pub fn go(&mut self, name: &str, structured: bool, meta: bool) -> Negotiated {
        self.start();
        let mut meta_id = None;
        if structured {
            let r = self.option(OPT_STRUCTURED_REPLY, &[]);
            assert_eq!(r[0].kind, REP_ACK);
            self.structured = true;
        }
        if meta {
            let r = self.option(
                OPT_SET_META_CONTEXT,
                &Self::meta_data(name, &["base:allocation"]),
            );
            assert_eq!(r.len(), 2, "{r:?}");
            assert_eq!(r[0].kind, REP_META_CONTEXT);
            meta_id = Some(u32::from_be_bytes(r[0].data[0..4].try_into().unwrap()));
            assert_eq!(&r[0].data[4..], b"base:allocation");
            assert_eq!(r[1].kind, REP_ACK);
        }
        let replies = self.option(
            OPT_GO,
            &Self::info_data(name, &[INFO_BLOCK_SIZE, INFO_NAME, INFO_DESCRIPTION]),
        );
        let (mut n, last) = Self::parse_info(&replies);
        assert_eq!(last, REP_ACK, "GO {name} failed: {replies:?}");
        n.meta_id = meta_id;
        n
    }

    pub fn cookie(&mut self) -> u64 {
        self.next_cookie += 1;
        self.next_cookie
    }

    /// Sends a request header (and payload, if any).
    pub fn request(
        &mut self,
        flags: u16,
        kind: u16,
        cookie: u64,
        offset: u64,
        len: u32,
        payload: &[u8],
    ) {
        let req = Request {
            flags,
            kind,
            cookie,
            offset,
            length: len,
        };
        let mut b = req.encode().to_vec();
        b.extend_from_slice(payload);
        self.send(&b).expect("send request");
        if kind == CMD_READ {
            self.pending_reads.insert(cookie, len);
        }
    }

    /// Reads one reply message.
    pub fn msg(&mut self) -> std::io::Result<Msg> {
        let magic = self.u32()?;
        match magic {
            SIMPLE_REPLY_MAGIC => {
                let error = self.u32()?;
                let cookie = self.u64()?;
                let len = self.pending_reads.remove(&cookie).unwrap_or(0);
                let data = if error == 0 && len > 0 {
                    self.recv(len as usize)?
                } else {
                    Vec::new()
                };
                Ok(Msg::Simple {
                    cookie,
                    error,
                    data,
                })
            }
            STRUCTURED_REPLY_MAGIC => {
                let flags = self.u16()?;
                let kind = self.u16()?;
                let cookie = self.u64()?;
                let len = self.u32()?;
                let payload = self.recv(len as usize)?;
                if flags & REPLY_FLAG_DONE != 0 {
                    self.pending_reads.remove(&cookie);
                }
                Ok(Msg::Chunk {
                    flags,
                    kind,
                    cookie,
                    payload,
                })
            }
            other => panic!("bad reply magic {other:#x}"),
        }
    }

    /// Reads messages until the reply to `cookie` is done; returns its messages.
    pub fn reply(&mut self, cookie: u64) -> Vec<Msg> {
        let mut out = Vec::new();
        loop {
            let m = self.msg().expect("reply");
            assert_eq!(m.cookie(), cookie, "unexpected reply {m:?}");
            let done = m.done();
            out.push(m);
            if done {
                return out;
            }
        }
    }

    /// Error number of a (complete) reply, 0 on success.
    pub fn errno(msgs: &[Msg]) -> u32 {
        for m in msgs {
            match m {
                Msg::Simple { error, .. } if *error != 0 => return *error,
                Msg::Chunk { kind, payload, .. } if kind & 0x8000 != 0 => {
                    return u32::from_be_bytes(payload[0..4].try_into().unwrap());
                }
                _ => {}
            }
        }
        0
    }

    pub fn read_full(&mut self, offset: u64, len: u32, flags: u16) -> Result<ReadResult, u32> {
        let c = self.cookie();
        self.request(flags, CMD_READ, c, offset, len, &[]);
        let msgs = self.reply(c);
        let e = Self::errno(&msgs);
        if e != 0 {
            return Err(e);
        }
        let mut r = ReadResult {
            data: vec![0xEE; len as usize],
            ..ReadResult::default()
        };
        for m in msgs {
            match m {
                Msg::Simple { data, .. } => r.data = data,
                Msg::Chunk {
                    kind: REPLY_TYPE_OFFSET_DATA,
                    payload,
                    ..
                } => {
                    let off = u64::from_be_bytes(payload[0..8].try_into().unwrap());
                    let at = (off - offset) as usize;
                    r.data[at..at + payload.len() - 8].copy_from_slice(&payload[8..]);
                    r.data_chunks += 1;
                }
                Msg::Chunk {
                    kind: REPLY_TYPE_OFFSET_HOLE,
                    payload,
                    ..
                } => {
                    let off = u64::from_be_bytes(payload[0..8].try_into().unwrap());
                    let n = u32::from_be_bytes(payload[8..12].try_into().unwrap()) as usize;
                    let at = (off - offset) as usize;
                    r.data[at..at + n].fill(0);
                    r.holes += 1;
                }
                Msg::Chunk {
                    kind: REPLY_TYPE_NONE,
                    ..
                } => {}
                other => panic!("unexpected read reply {other:?}"),
            }
        }
        Ok(r)
    }

    pub fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, u32> {
        self.read_full(offset, len, 0).map(|r| r.data)
    }

    /// Any command without payload (or a write with `payload`); returns the error number.
    pub fn cmd(&mut self, kind: u16, flags: u16, offset: u64, len: u32, payload: &[u8]) -> u32 {
        let c = self.cookie();
        self.request(flags, kind, c, offset, len, payload);
        let msgs = self.reply(c);
        Self::errno(&msgs)
    }

    pub fn write(&mut self, offset: u64, data: &[u8], flags: u16) -> u32 {
        self.cmd(CMD_WRITE, flags, offset, data.len() as u32, data)
    }

    pub fn block_status(
        &mut self,
        offset: u64,
        len: u32,
        flags: u16,
    ) -> Result<(u32, Vec<(u32, u32)>), u32> {
        let c = self.cookie();
        self.request(flags, CMD_BLOCK_STATUS, c, offset, len, &[]);
        let msgs = self.reply(c);
        let e = Self::errno(&msgs);
        if e != 0 {
            return Err(e);
        }
        for m in msgs {
            if let Msg::Chunk {
                kind: REPLY_TYPE_BLOCK_STATUS,
                payload,
                ..
            } = m
            {
                let id = u32::from_be_bytes(payload[0..4].try_into().unwrap());
                let ext = payload[4..]
                    .chunks_exact(8)
                    .map(|c| {
                        (
                            u32::from_be_bytes(c[0..4].try_into().unwrap()),
                            u32::from_be_bytes(c[4..8].try_into().unwrap()),
                        )
                    })
                    .collect();
                return Ok((id, ext));
            }
        }
        panic!("no block status chunk");
    }

    pub fn disconnect(mut self) {
        let c = self.cookie();
        self.request(0, CMD_DISC, c, 0, 0, &[]);
        assert!(self.closed_by_server(), "server did not close after DISC");
    }

    /// True if the server closes the connection (EOF or reset) within the read timeout.
    pub fn closed_by_server(&mut self) -> bool {
        let mut b = [0u8; 1024];
        loop {
            match self.s.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Misc

/// Deterministic pseudo-random bytes (xorshift).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The path of an executable on PATH, or a panic naming the Debian package that provides it.
pub fn tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(name);
        if is_executable(&p) {
            return p;
        }
    }
    panic!(
        "`{name}` is not installed: install the Debian package `{package}` (apt-get install {package})"
    );
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
