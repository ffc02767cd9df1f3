//! `nfs-load`: a user-space NFSv3 load generator over TCP, built on cairn-nfs's codec, so the
//! same client drives cairn's NFS server and a reference server (NFS-Ganesha) in
//! bench/nfs.sh (issue 35). The kernel client is out of reach here (the host kernel has none;
//! the emulated guest is too slow to generate load).
//!
//! ```text
//! nfs-load --port PORT --export PATH --workload WORKLOAD
//!          [--host ADDR] [--mount-port PORT | --portmap-port PORT] [--uid N] [--gid N]
//!          [--dir NAME] [--jobs N] [--bs BYTES] [--file-size BYTES] [--files N]
//!          [--seconds S] [--ramp S] [--ops N] [--seed N] [--no-verify] [--json]
//! ```
//!
//! Every job is one thread with one TCP connection and one call in flight (QD1); each mounts
//! the export (MOUNT v3 MNT, AUTH_SYS as `--uid`/`--gid`) and works in directory `--dir`
//! (default `nfs-load`, made if missing) of it. Workloads:
//! - `sync-write`, `dsync-write`: WRITEs of `--bs` bytes (default 8 KiB) at random aligned
//!   offsets of the job's own file `file-J`, FILE_SYNC (or DATA_SYNC); the reply must say at
//!   least as stable. The files are laid out in full first (untimed), so no write allocates.
//! - `stream`: files `stream-J-K` of `--file-size` written from start to end with UNSTABLE
//!   WRITEs of the server's preferred write size (FSINFO `wtpref`, at most 1 MiB), then one
//!   COMMIT whose verifier must equal the writes'; the file is then removed (untimed). A
//!   file's bytes count when its COMMIT returns inside the measured window.
//! - `read`: READs of `--bs` bytes at random aligned offsets of a random file among
//!   `file-0..file-(N-1)` (`--files`, default `--jobs`), laid out first if missing.
//! - `create`: in a per-run directory per job, CREATE (GUARDED) of a new name, and with
//!   `--bs` > 0 one UNSTABLE WRITE of that many bytes and a COMMIT, as a kernel client's
//!   create, write, close; an op is one file.
//! - `fill`: only the lay-out of `file-0..file-(N-1)` (`--files`), timed as one op per file.
//!
//! The lay-out and every write of `file-*` carry the bytes of [`pattern`] (of the file and
//! offset), so reads check what they get, whatever wrote it before (a sample of words,
//! [`matches_pattern`]; `--no-verify` skips it).
//! Time-based by default (`--ramp` then `--seconds`), or `--ops N` per job with no ramp.
//! Prints one line of `key=value` pairs (or one JSON object with `--json`): ops, ops_per_s,
//! mb_per_s, p50_us, p99_us, max_us (per op: one WRITE, READ, or created file), and for
//! `stream` the COMMITs' latencies and the files committed. Any reply that is not NFS3_OK,
//! a short count, a weaker stability than asked, a verifier change or wrong data ends the run
//! with an error and a non-zero exit: a benchmark of a failing server is no benchmark.

use anyhow::{Context, Result, anyhow, bail, ensure};
use cairn_metrics::OpStats;
use cairn_nfs::mount::{DirPath, MountReply, decode_mount_reply};
use cairn_nfs::nfs3::{
    CreateArgs, CreateHow, DirOpArgs3, FileHandle, Filename, HandleArgs, MkdirArgs, Nfs3Error,
    Nfs3Proc, Nfs3Reply, Outcome, RangeArgs, Sattr3, StableHow, WriteArgs, WriteVerf, decode_reply,
};
use cairn_nfs::portmap::{IPPROTO_TCP, Mapping, PortmapReply, decode_portmap_reply};
use cairn_nfs::record::read_record;
use cairn_nfs::rpc::{
    AuthSys, CallHeader, Credential, MachineName, OpaqueAuth, PROGRAM_MOUNT, PROGRAM_NFS,
    PROGRAM_PORTMAP, ReplyHeader,
};
use cairn_nfs::{Decoder, Encoder, XdrDecode, XdrEncode};
use std::io::Write;
use std::net::TcpStream;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Largest WRITE or READ this client sends, whatever the server allows.
const TRANSFER_MAX_BYTES: u32 = 1 << 20;
/// Largest reply record accepted: a 1 MiB READ plus its headers.
const RECORD_MAX_BYTES: usize = (1 << 20) + 4096;
/// A server that does not answer a call within this long is reported as hung.
const CALL_TIMEOUT: Duration = Duration::from_secs(120);
const MOUNT_V3: u32 = 3;
const PORTMAP_V2: u32 = 2;
const MOUNT_PROC_MNT: u32 = 1;
const PORTMAP_PROC_GETPORT: u32 = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    SyncWrite,
    DsyncWrite,
    Stream,
    Read,
    Create,
    Fill,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::SyncWrite => "sync-write",
            Workload::DsyncWrite => "dsync-write",
            Workload::Stream => "stream",
            Workload::Read => "read",
            Workload::Create => "create",
            Workload::Fill => "fill",
        }
    }
}

#[derive(Clone, Debug)]
struct Args {
    host: String,
    port: u16,
    mount_port: Option<u16>,
    portmap_port: Option<u16>,
    export: String,
    uid: u32,
    gid: u32,
    dir: String,
    workload: Workload,
    jobs: usize,
    block_bytes: u32,
    file_bytes: u64,
    files: Option<usize>,
    seconds: f64,
    ramp_seconds: f64,
    ops_per_job: Option<u64>,
    seed: u64,
    verify: bool,
    json: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        host: "127.0.0.1".into(),
        port: 0,
        mount_port: None,
        portmap_port: None,
        export: String::new(),
        uid: 1000,
        gid: 1000,
        dir: "nfs-load".into(),
        workload: Workload::SyncWrite,
        jobs: 1,
        block_bytes: 8192,
        file_bytes: 64 << 20,
        files: None,
        seconds: 10.0,
        ramp_seconds: 2.0,
        ops_per_job: None,
        seed: 1,
        verify: true,
        json: false,
    };
    let mut block_given = false;
    let mut words = std::env::args().skip(1);
    while let Some(flag) = words.next() {
        let mut value = || {
            words
                .next()
                .with_context(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--host" => args.host = value()?,
            "--port" => args.port = value()?.parse()?,
            "--mount-port" => args.mount_port = Some(value()?.parse()?),
            "--portmap-port" => args.portmap_port = Some(value()?.parse()?),
            "--export" => args.export = value()?,
            "--uid" => args.uid = value()?.parse()?,
            "--gid" => args.gid = value()?.parse()?,
            "--dir" => args.dir = value()?,
            "--jobs" => args.jobs = value()?.parse()?,
            "--bs" => {
                args.block_bytes = value()?.parse()?;
                block_given = true;
            }
            "--file-size" => args.file_bytes = value()?.parse()?,
            "--files" => args.files = Some(value()?.parse()?),
            "--seconds" => args.seconds = value()?.parse()?,
            "--ramp" => args.ramp_seconds = value()?.parse()?,
            "--ops" => args.ops_per_job = Some(value()?.parse()?),
            "--seed" => args.seed = value()?.parse()?,
            "--no-verify" => args.verify = false,
            "--json" => args.json = true,
            "--workload" => {
                args.workload = match value()?.as_str() {
                    "sync-write" => Workload::SyncWrite,
                    "dsync-write" => Workload::DsyncWrite,
                    "stream" => Workload::Stream,
                    "read" => Workload::Read,
                    "create" => Workload::Create,
                    "fill" => Workload::Fill,
                    other => bail!(
                        "unknown workload {other} (sync-write, dsync-write, stream, read, \
                         create, fill)"
                    ),
                }
            }
            "-h" | "--help" => {
                println!("see the module documentation of bench/src/bin/nfs-load.rs");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    check_args(&mut args, block_given)?;
    Ok(args)
}

/// The rules `parse_args` enforces once every flag is read.
fn check_args(args: &mut Args, block_given: bool) -> Result<()> {
    ensure!(args.port != 0, "--port is required");
    ensure!(args.export.starts_with('/'), "--export /PATH is required");
    ensure!(args.jobs >= 1, "--jobs must be >= 1");
    if args.workload == Workload::Create && !block_given {
        args.block_bytes = 0;
    }
    ensure!(
        args.block_bytes <= TRANSFER_MAX_BYTES,
        "--bs must be at most {TRANSFER_MAX_BYTES}"
    );
    if matches!(
        args.workload,
        Workload::SyncWrite | Workload::DsyncWrite | Workload::Read
    ) {
        ensure!(
            args.block_bytes >= 512 && args.block_bytes.is_power_of_two(),
            "--bs must be a power of two >= 512"
        );
        ensure!(
            args.file_bytes >= u64::from(args.block_bytes)
                && args.file_bytes.is_multiple_of(u64::from(args.block_bytes)),
            "--file-size must be a multiple of --bs"
        );
    }
    ensure!(
        args.file_bytes.is_multiple_of(8) && args.file_bytes > 0,
        "--file-size must be a positive multiple of 8"
    );
    if args.ops_per_job.is_some() {
        args.ramp_seconds = 0.0;
    }
    Ok(())
}

/// splitmix64
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bytes of file `file` at `offset_bytes` (8-aligned): one incompressible word per 8 bytes,
/// a function of the file and the word's position only, so that any writer of the file
/// writes the same bytes and every reader can check them.
fn pattern(file: u64, offset_bytes: u64, len_bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len_bytes);
    let first_word = offset_bytes / 8;
    for word in 0..len_bytes.div_ceil(8) as u64 {
        let mut state = (file << 40) ^ (first_word + word);
        out.extend_from_slice(&next_random(&mut state).to_le_bytes());
    }
    out.truncate(len_bytes);
    out
}

/// Whether `data`, read from file `file` at `offset_bytes` (8-aligned), holds [`pattern`]'s
/// bytes, by sampling the first word of every 4 KiB and the last word: enough to catch a
/// wrong file, a wrong offset, a hole or a stale block, at a cost the client (which shares
/// the machine's CPUs with the server) hardly notices even at 128 KiB per READ.
fn matches_pattern(file: u64, offset_bytes: u64, data: &[u8]) -> bool {
    const STEP_BYTES: usize = 4096;
    let last_word = (data.len() / 8).saturating_sub(1) * 8;
    (0..data.len())
        .step_by(STEP_BYTES)
        .chain(std::iter::once(last_word))
        .filter(|&at| at + 8 <= data.len())
        .all(|at| data[at..at + 8] == pattern(file, offset_bytes + at as u64, 8)[..])
}

/// One TCP connection to one RPC program port, one call at a time.
struct RpcClient {
    stream: TcpStream,
    xid: u32,
    credential: Credential,
}

impl RpcClient {
    fn connect(args: &Args, port: u16, job: usize) -> Result<RpcClient> {
        let stream = TcpStream::connect((args.host.as_str(), port))
            .with_context(|| format!("connecting to {}:{port}", args.host))?;
        stream.set_read_timeout(Some(CALL_TIMEOUT))?;
        stream.set_nodelay(true)?;
        let machine_name = MachineName::new(format!("nfs-load-{job}").into_bytes())
            .map_err(|e| anyhow!("machine name: {e:?}"))?;
        Ok(RpcClient {
            stream,
            xid: (job as u32).wrapping_mul(0x0100_0000) | 1,
            credential: Credential::Sys(AuthSys {
                stamp: job as u32,
                machine_name,
                uid: args.uid,
                gid: args.gid,
                gids: vec![args.gid],
            }),
        })
    }

    /// One call; the result bytes after a SUCCESS reply header with our xid.
    fn call(
        &mut self,
        program: u32,
        version: u32,
        procedure: u32,
        args: &dyn XdrEncode,
    ) -> Result<Vec<u8>> {
        self.xid = self.xid.wrapping_add(1);
        let mut enc = Encoder::for_record();
        enc.put(&CallHeader {
            xid: self.xid,
            program,
            version,
            procedure,
            credential: self.credential.clone(),
            verifier: OpaqueAuth::none(),
        });
        args.encode(&mut enc);
        let record = enc
            .into_record()
            .map_err(|e| anyhow!("encoding a call: {e:?}"))?;
        self.stream.write_all(&record).context("sending a call")?;
        let reply = read_record(&mut self.stream, RECORD_MAX_BYTES)
            .map_err(|e| anyhow!("receiving a reply: {e:?}"))?
            .context("the server closed the connection")?;
        let mut dec = Decoder::new(&reply);
        let header = ReplyHeader::decode(&mut dec).map_err(|e| anyhow!("reply header: {e:?}"))?;
        ensure!(
            header == ReplyHeader::success(self.xid),
            "RPC program {program} procedure {procedure}: reply {header:?}"
        );
        Ok(dec.rest().to_vec())
    }

    fn nfs(&mut self, procedure: Nfs3Proc, args: &dyn XdrEncode) -> Result<Nfs3Reply> {
        let results = self.call(PROGRAM_NFS, 3, procedure.as_u32(), args)?;
        decode_reply(
            procedure.as_u32(),
            &results,
            TRANSFER_MAX_BYTES as usize + 1,
        )
        .map_err(|e| anyhow!("{procedure:?} results: {e:?}"))
    }
}

/// The port of `program` v`version` over TCP, from a PORTMAP at `portmap_port`.
fn getport(args: &Args, portmap_port: u16, program: u32, version: u32) -> Result<u16> {
    let mut client = RpcClient::connect(args, portmap_port, 0)?;
    let mapping = Mapping {
        program,
        version,
        protocol: IPPROTO_TCP,
        port: 0,
    };
    let results = client.call(PROGRAM_PORTMAP, PORTMAP_V2, PORTMAP_PROC_GETPORT, &mapping)?;
    match decode_portmap_reply(PORTMAP_PROC_GETPORT, &results) {
        Ok(PortmapReply::Port(port)) if port != 0 => Ok(u16::try_from(port)?),
        other => bail!("PORTMAP GETPORT of program {program} v{version}: {other:?}"),
    }
}

fn name(text: &str) -> Result<Filename> {
    Filename::new(text.as_bytes().to_vec()).map_err(|e| anyhow!("name {text}: {e:?}"))
}

/// One job's session: an NFS connection and the handle of its working directory.
struct Session {
    nfs: RpcClient,
    work_dir: FileHandle,
    /// Largest WRITE this session sends (FSINFO's preferred size, capped at 1 MiB).
    write_bytes: u32,
}

impl Session {
    /// Mounts the export and finds (or, with `make_dir`, makes) the working directory.
    fn open(args: &Args, mount_port: u16, job: usize, make_dir: bool) -> Result<Session> {
        let mut mount = RpcClient::connect(args, mount_port, job)?;
        let path = DirPath::new(args.export.as_bytes().to_vec())
            .map_err(|e| anyhow!("export path: {e:?}"))?;
        let results = mount.call(PROGRAM_MOUNT, MOUNT_V3, MOUNT_PROC_MNT, &path)?;
        let root = match decode_mount_reply(MOUNT_PROC_MNT, &results) {
            Ok(MountReply::Mnt(Ok(ok))) => ok.handle,
            other => bail!("MOUNT of {}: {other:?}", args.export),
        };
        drop(mount);
        let mut nfs = RpcClient::connect(args, args.port, job)?;
        let write_bytes = match nfs.nfs(
            Nfs3Proc::Fsinfo,
            &HandleArgs {
                object: root.clone(),
            },
        )? {
            Nfs3Reply::Fsinfo(Outcome::Ok(info)) => {
                info.wtpref_bytes.clamp(4096, TRANSFER_MAX_BYTES)
            }
            other => bail!("FSINFO: {other:?}"),
        };
        let mut session = Session {
            nfs,
            work_dir: root.clone(),
            write_bytes,
        };
        session.work_dir = match session.lookup(&root, &args.dir)? {
            Some(dir) => dir,
            None if make_dir => session.mkdir(&root, &args.dir)?,
            None => bail!("no directory {} in {}", args.dir, args.export),
        };
        Ok(session)
    }

    fn lookup(&mut self, dir: &FileHandle, text: &str) -> Result<Option<FileHandle>> {
        let args = DirOpArgs3 {
            dir: dir.clone(),
            name: name(text)?,
        };
        match self.nfs.nfs(Nfs3Proc::Lookup, &args)? {
            Nfs3Reply::Lookup(Outcome::Ok(ok)) => Ok(Some(ok.object)),
            Nfs3Reply::Lookup(Outcome::Fail(Nfs3Error::NoEnt, _)) => Ok(None),
            other => bail!("LOOKUP {text}: {other:?}"),
        }
    }

    fn mkdir(&mut self, dir: &FileHandle, text: &str) -> Result<FileHandle> {
        let args = MkdirArgs {
            location: DirOpArgs3 {
                dir: dir.clone(),
                name: name(text)?,
            },
            attributes: Sattr3 {
                mode: Some(0o755),
                ..Sattr3::default()
            },
        };
        match self.nfs.nfs(Nfs3Proc::Mkdir, &args)? {
            Nfs3Reply::Mkdir(Outcome::Ok(ok)) => match ok.object {
                Some(handle) => Ok(handle),
                None => self
                    .lookup(dir, text)?
                    .with_context(|| format!("{text} vanished after MKDIR")),
            },
            other => bail!("MKDIR {text}: {other:?}"),
        }
    }

    /// CREATE of `text` in the working directory: GUARDED (must be new) or UNCHECKED.
    fn create(&mut self, dir: &FileHandle, text: &str, guarded: bool) -> Result<FileHandle> {
        let attributes = Sattr3 {
            mode: Some(0o644),
            ..Sattr3::default()
        };
        let args = CreateArgs {
            location: DirOpArgs3 {
                dir: dir.clone(),
                name: name(text)?,
            },
            how: if guarded {
                CreateHow::Guarded(attributes)
            } else {
                CreateHow::Unchecked(attributes)
            },
        };
        match self.nfs.nfs(Nfs3Proc::Create, &args)? {
            Nfs3Reply::Create(Outcome::Ok(ok)) => match ok.object {
                Some(handle) => Ok(handle),
                None => self
                    .lookup(dir, text)?
                    .with_context(|| format!("{text} vanished after CREATE")),
            },
            other => bail!("CREATE {text}: {other:?}"),
        }
    }

    fn remove(&mut self, dir: &FileHandle, text: &str) -> Result<()> {
        let args = DirOpArgs3 {
            dir: dir.clone(),
            name: name(text)?,
        };
        match self.nfs.nfs(Nfs3Proc::Remove, &args)? {
            Nfs3Reply::Remove(Outcome::Ok(_)) => Ok(()),
            other => bail!("REMOVE {text}: {other:?}"),
        }
    }

    fn size_of(&mut self, file: &FileHandle) -> Result<u64> {
        match self.nfs.nfs(
            Nfs3Proc::Getattr,
            &HandleArgs {
                object: file.clone(),
            },
        )? {
            Nfs3Reply::Getattr(Outcome::Ok(attributes)) => Ok(attributes.size_bytes),
            other => bail!("GETATTR: {other:?}"),
        }
    }

    /// One WRITE, checked: all bytes taken, at least as stable as asked. Returns the verifier.
    fn write(
        &mut self,
        file: &FileHandle,
        offset_bytes: u64,
        data: Vec<u8>,
        stable: StableHow,
    ) -> Result<WriteVerf> {
        let len_bytes = data.len();
        let args = WriteArgs {
            file: file.clone(),
            offset_bytes,
            stable,
            data,
        };
        match self.nfs.nfs(Nfs3Proc::Write, &args)? {
            Nfs3Reply::Write(Outcome::Ok(ok)) => {
                ensure!(
                    ok.count_bytes as usize == len_bytes,
                    "WRITE at {offset_bytes}: {} of {len_bytes} bytes taken",
                    ok.count_bytes
                );
                ensure!(
                    ok.committed.as_u32() >= stable.as_u32(),
                    "WRITE at {offset_bytes}: asked {stable:?}, answered {:?}",
                    ok.committed
                );
                Ok(ok.verf)
            }
            other => bail!("WRITE at {offset_bytes}: {other:?}"),
        }
    }

    fn commit(&mut self, file: &FileHandle) -> Result<WriteVerf> {
        let args = RangeArgs {
            file: file.clone(),
            offset_bytes: 0,
            count_bytes: 0,
        };
        match self.nfs.nfs(Nfs3Proc::Commit, &args)? {
            Nfs3Reply::Commit(Outcome::Ok(ok)) => Ok(ok.verf),
            other => bail!("COMMIT: {other:?}"),
        }
    }

    /// One READ of exactly `count_bytes` (the range lies inside the file), checked against
    /// the pattern of file `index` when `verify`.
    fn read(
        &mut self,
        file: &FileHandle,
        index: u64,
        offset_bytes: u64,
        count_bytes: u32,
        verify: bool,
    ) -> Result<()> {
        let args = RangeArgs {
            file: file.clone(),
            offset_bytes,
            count_bytes,
        };
        match self.nfs.nfs(Nfs3Proc::Read, &args)? {
            Nfs3Reply::Read(Outcome::Ok(ok)) => {
                ensure!(
                    ok.data.len() == count_bytes as usize,
                    "READ of file-{index} at {offset_bytes}: {} of {count_bytes} bytes",
                    ok.data.len()
                );
                ensure!(
                    !verify || matches_pattern(index, offset_bytes, &ok.data),
                    "READ of file-{index} at {offset_bytes}: not the bytes written there"
                );
                Ok(())
            }
            other => bail!("READ of file-{index} at {offset_bytes}: {other:?}"),
        }
    }

    /// `file-INDEX` of at least `file_bytes`, written out in full (UNSTABLE, then COMMIT)
    /// when it is missing or shorter; its handle.
    fn laid_out(&mut self, index: u64, file_bytes: u64) -> Result<FileHandle> {
        let file_name = format!("file-{index}");
        let dir = self.work_dir.clone();
        if let Some(file) = self.lookup(&dir, &file_name)?
            && self.size_of(&file)? >= file_bytes
        {
            return Ok(file);
        }
        let file = self.create(&dir, &file_name, false)?;
        let mut offset_bytes = 0;
        let mut verifier = None;
        while offset_bytes < file_bytes {
            let len_bytes = (file_bytes - offset_bytes).min(u64::from(self.write_bytes));
            let data = pattern(index, offset_bytes, len_bytes as usize);
            let verf = self.write(&file, offset_bytes, data, StableHow::Unstable)?;
            ensure!(
                verifier.is_none_or(|v| v == verf),
                "the write verifier changed while laying out {file_name}: the server restarted"
            );
            verifier = Some(verf);
            offset_bytes += len_bytes;
        }
        let verf = self.commit(&file)?;
        ensure!(
            verifier.is_none_or(|v| v == verf),
            "COMMIT of {file_name} returned another verifier: its writes may be lost"
        );
        Ok(file)
    }
}

/// What one job measured inside the window.
#[derive(Default)]
struct JobResult {
    ops: OpStats,
    commits: OpStats,
    /// Bytes counted for the rate (for `stream`: of files committed inside the window).
    bytes: u64,
    files: u64,
    /// From the start of the load to this job's end (the measure with `--ops`).
    elapsed: Duration,
}

/// The measured window: ops that start at or after `measure_from` and end by `until` count.
#[derive(Clone, Copy)]
struct Window {
    measure_from: Instant,
    until: Instant,
}

impl Window {
    fn counts(&self, started: Instant, ended: Instant) -> bool {
        started >= self.measure_from && ended <= self.until
    }
}

/// One job: its untimed preparation, then (once every job has prepared) its load.
fn run_job(args: &Args, mount_port: u16, job: usize, ready: &Barrier) -> Result<JobResult> {
    let prepared = prepare(args, mount_port, job);
    // Every job waits here even when its preparation failed, so no other job waits forever.
    ready.wait();
    let (session, handles, create_dir) = prepared?;
    load(args, job, session, handles, create_dir)
}

/// What a job made before the clock starts.
type Prepared = (Session, Vec<FileHandle>, Option<FileHandle>);

fn prepare(args: &Args, mount_port: u16, job: usize) -> Result<Prepared> {
    let mut session = Session::open(args, mount_port, job, false)?;
    let files = args.files.unwrap_or(args.jobs) as u64;
    let mut handles = Vec::new();
    match args.workload {
        Workload::SyncWrite | Workload::DsyncWrite => {
            handles.push(session.laid_out(job as u64, args.file_bytes)?);
        }
        Workload::Read => {
            // Each job lays out its share of the files (the barrier waits for all of them).
            for index in (job as u64..files).step_by(args.jobs) {
                session.laid_out(index, args.file_bytes)?;
            }
        }
        Workload::Stream | Workload::Create | Workload::Fill => {}
    }
    let create_dir = if args.workload == Workload::Create {
        let dir = session.work_dir.clone();
        let dir_name = format!("create-{}-{job}", std::process::id());
        Some(session.mkdir(&dir, &dir_name)?)
    } else {
        None
    };
    Ok((session, handles, create_dir))
}

fn load(
    args: &Args,
    job: usize,
    session: Session,
    handles: Vec<FileHandle>,
    create_dir: Option<FileHandle>,
) -> Result<JobResult> {
    let begin = Instant::now();
    let window = match args.ops_per_job {
        Some(_) => Window {
            measure_from: begin,
            until: begin + Duration::from_secs(365 * 86_400),
        },
        None => {
            let measure_from = begin + Duration::from_secs_f64(args.ramp_seconds);
            Window {
                measure_from,
                until: measure_from + Duration::from_secs_f64(args.seconds),
            }
        }
    };
    let mut run = Job {
        args,
        job,
        session,
        rng: args
            .seed
            .wrapping_mul(1_000_003)
            .wrapping_add(job as u64 + 1),
        window,
        done_ops: 0,
        result: JobResult::default(),
    };
    match args.workload {
        Workload::SyncWrite => run.sync_writes(&handles[0], StableHow::FileSync)?,
        Workload::DsyncWrite => run.sync_writes(&handles[0], StableHow::DataSync)?,
        Workload::Read => run.reads()?,
        Workload::Stream => run.streams()?,
        Workload::Create => run.creates(&create_dir.context("create directory")?)?,
        Workload::Fill => run.fill()?,
    }
    run.result.elapsed = begin.elapsed();
    Ok(run.result)
}

/// One job's load loop and what it counted.
struct Job<'a> {
    args: &'a Args,
    job: usize,
    session: Session,
    rng: u64,
    window: Window,
    done_ops: u64,
    result: JobResult,
}

impl Job<'_> {
    /// Whether to start another op: before the window's end, or below `--ops`.
    fn more(&self) -> bool {
        match self.args.ops_per_job {
            Some(ops) => self.done_ops < ops,
            None => Instant::now() < self.window.until,
        }
    }

    /// One op of `bytes` done: counted when it lies inside the window.
    fn done(&mut self, bytes: u64, began: Instant, ended: Instant) {
        self.done_ops += 1;
        if self.window.counts(began, ended) {
            self.result.ops.record(bytes, true, ended - began);
            self.result.bytes += bytes;
        }
    }

    fn sync_writes(&mut self, file: &FileHandle, stable: StableHow) -> Result<()> {
        let block_bytes = u64::from(self.args.block_bytes);
        let blocks = self.args.file_bytes / block_bytes;
        while self.more() {
            let offset_bytes = next_random(&mut self.rng) % blocks * block_bytes;
            let data = pattern(self.job as u64, offset_bytes, block_bytes as usize);
            let began = Instant::now();
            self.session.write(file, offset_bytes, data, stable)?;
            self.done(block_bytes, began, Instant::now());
        }
        Ok(())
    }

    fn reads(&mut self) -> Result<()> {
        let files = self.args.files.unwrap_or(self.args.jobs) as u64;
        let mut handles = Vec::new();
        for index in 0..files {
            let file_name = format!("file-{index}");
            let dir = self.session.work_dir.clone();
            handles.push(
                self.session
                    .lookup(&dir, &file_name)?
                    .with_context(|| format!("{file_name} missing after its lay-out"))?,
            );
        }
        let block_bytes = u64::from(self.args.block_bytes);
        let blocks = self.args.file_bytes / block_bytes;
        while self.more() {
            let index = next_random(&mut self.rng) % files;
            let offset_bytes = next_random(&mut self.rng) % blocks * block_bytes;
            let began = Instant::now();
            self.session.read(
                &handles[index as usize],
                index,
                offset_bytes,
                self.args.block_bytes,
                self.args.verify,
            )?;
            self.done(block_bytes, began, Instant::now());
        }
        Ok(())
    }

    /// Files written UNSTABLE from start to end, each COMMITted then removed. Ops are the
    /// WRITEs; the rate counts a file's bytes when its COMMIT returns inside the window.
    fn streams(&mut self) -> Result<()> {
        let dir = self.session.work_dir.clone();
        let data = pattern(self.job as u64, 0, self.session.write_bytes as usize);
        let file_bytes = self.args.file_bytes;
        let mut serial = 0u64;
        while self.more() {
            let file_name = format!("stream-{}-{serial}", self.job);
            serial += 1;
            let file = self.session.create(&dir, &file_name, false)?;
            let mut verifier = None;
            let mut offset_bytes = 0;
            while offset_bytes < file_bytes {
                let len_bytes = (file_bytes - offset_bytes).min(data.len() as u64);
                let chunk = data[..len_bytes as usize].to_vec();
                let began = Instant::now();
                let verf = self
                    .session
                    .write(&file, offset_bytes, chunk, StableHow::Unstable)?;
                let ended = Instant::now();
                ensure!(
                    verifier.is_none_or(|v| v == verf),
                    "the write verifier changed mid-file: the server restarted"
                );
                verifier = Some(verf);
                if self.window.counts(began, ended) {
                    self.result.ops.record(len_bytes, true, ended - began);
                }
                offset_bytes += len_bytes;
            }
            let began = Instant::now();
            let verf = self.session.commit(&file)?;
            let ended = Instant::now();
            ensure!(
                verifier.is_none_or(|v| v == verf),
                "COMMIT of {file_name} returned another verifier: its writes may be lost"
            );
            self.done_ops += 1;
            // Files straddling the window's start count whole, those straddling its end not
            // at all: on average, the window's worth.
            if ended >= self.window.measure_from && ended <= self.window.until {
                self.result.commits.record(file_bytes, true, ended - began);
                self.result.bytes += file_bytes;
                self.result.files += 1;
            }
            self.session.remove(&dir, &file_name)?;
        }
        Ok(())
    }

    /// New files in `dir`: CREATE (GUARDED), and with `--bs` > 0 a WRITE and a COMMIT.
    fn creates(&mut self, dir: &FileHandle) -> Result<()> {
        let data = pattern(self.job as u64, 0, self.args.block_bytes as usize);
        while self.more() {
            let file_name = format!("f{}", self.done_ops);
            let began = Instant::now();
            let file = self.session.create(dir, &file_name, true)?;
            if !data.is_empty() {
                let verf = self
                    .session
                    .write(&file, 0, data.clone(), StableHow::Unstable)?;
                let committed = self.session.commit(&file)?;
                ensure!(
                    committed == verf,
                    "COMMIT of {file_name} returned another verifier"
                );
            }
            let ended = Instant::now();
            if self.window.counts(began, ended) {
                self.result.files += 1;
            }
            self.done(data.len() as u64, began, ended);
        }
        Ok(())
    }

    /// The lay-out is the load: one op per file, this job's share of them.
    fn fill(&mut self) -> Result<()> {
        let files = self.args.files.unwrap_or(self.args.jobs) as u64;
        for index in (self.job as u64..files).step_by(self.args.jobs) {
            let began = Instant::now();
            self.session.laid_out(index, self.args.file_bytes)?;
            self.result
                .ops
                .record(self.args.file_bytes, true, began.elapsed());
            self.result.bytes += self.args.file_bytes;
            self.result.files += 1;
        }
        Ok(())
    }
}

/// The MOUNT program's port: `--mount-port`, else asked of the PORTMAP at `--portmap-port`,
/// else of the NFS port itself (cairn answers PORTMAP GETPORT there), else of port 111.
fn mount_port(args: &Args) -> Result<u16> {
    if let Some(port) = args.mount_port {
        return Ok(port);
    }
    if let Some(portmap) = args.portmap_port {
        return getport(args, portmap, PROGRAM_MOUNT, MOUNT_V3);
    }
    getport(args, args.port, PROGRAM_MOUNT, MOUNT_V3).or_else(|on_nfs_port| {
        getport(
            args,
            cairn_nfs::portmap::PORTMAP_PORT,
            PROGRAM_MOUNT,
            MOUNT_V3,
        )
        .with_context(|| format!("no MOUNT port: the NFS port said {on_nfs_port:#}, and port 111"))
    })
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let mount_port = mount_port(&args)?;
    // The working directory is made once, before the jobs look it up.
    let first = Session::open(&args, mount_port, 0, true)?;
    let write_bytes = first.write_bytes;
    drop(first);
    let ready = Barrier::new(args.jobs);
    let results: Vec<Result<JobResult>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..args.jobs)
            .map(|job| {
                let (args, ready) = (&args, &ready);
                scope.spawn(move || run_job(args, mount_port, job, ready))
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("a job's thread panicked")))
            })
            .collect()
    });
    let mut total = JobResult::default();
    for (job, result) in results.into_iter().enumerate() {
        let result = result.with_context(|| format!("job {job}"))?;
        total.ops.merge(&result.ops);
        total.commits.merge(&result.commits);
        total.bytes += result.bytes;
        total.files += result.files;
        total.elapsed = total.elapsed.max(result.elapsed);
    }
    ensure!(
        total.ops.ops > 0,
        "no operation completed in the measured window"
    );
    if args.workload == Workload::Stream {
        ensure!(
            total.files > 0,
            "no file was committed in the measured window: make --file-size smaller or \
             --seconds longer"
        );
    }
    report(&args, &total, write_bytes);
    Ok(())
}

/// Prints the run's one line (or JSON object).
fn report(args: &Args, total: &JobResult, write_bytes: u32) {
    // With --ops (and for fill) the measure is the slowest job's time, else the window.
    let seconds = if args.ops_per_job.is_some() || args.workload == Workload::Fill {
        total.elapsed.as_secs_f64()
    } else {
        args.seconds
    };
    let ops = total.ops.ops;
    let mut fields: Vec<(&str, String)> = vec![
        ("workload", args.workload.name().to_string()),
        ("jobs", args.jobs.to_string()),
        ("bs", args.block_bytes.to_string()),
        ("seconds", format!("{seconds:.3}")),
        ("ops", ops.to_string()),
        ("ops_per_s", format!("{:.1}", ops as f64 / seconds)),
        (
            "mb_per_s",
            format!("{:.3}", total.bytes as f64 / seconds / 1e6),
        ),
        ("p50_us", total.ops.latency_quantile_us(0.5).to_string()),
        ("p99_us", total.ops.latency_quantile_us(0.99).to_string()),
        ("max_us", total.ops.latency_us.max().to_string()),
    ];
    if matches!(
        args.workload,
        Workload::Stream | Workload::Create | Workload::Fill
    ) {
        fields.push(("files", total.files.to_string()));
        fields.push((
            "files_per_s",
            format!("{:.1}", total.files as f64 / seconds),
        ));
    }
    if args.workload == Workload::Stream {
        fields.push(("write_bytes", write_bytes.to_string()));
        fields.push(("file_bytes", args.file_bytes.to_string()));
        fields.push((
            "commit_p50_us",
            total.commits.latency_quantile_us(0.5).to_string(),
        ));
        fields.push((
            "commit_p99_us",
            total.commits.latency_quantile_us(0.99).to_string(),
        ));
    }
    if args.json {
        let body: Vec<String> = fields
            .iter()
            .map(|(key, value)| match value.parse::<f64>() {
                Ok(_) => format!("\"{key}\":{value}"),
                Err(_) => format!("\"{key}\":\"{value}\""),
            })
            .collect();
        println!("{{{}}}", body.join(","));
    } else {
        let line: Vec<String> = fields
            .iter()
            .map(|(key, value)| format!("{key}={value}"))
            .collect();
        println!("{}", line.join(" "));
    }
}
