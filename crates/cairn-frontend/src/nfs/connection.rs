//! One client connection: records in, calls decoded, answered in order, replies out.
//!
//! Serving a record: `parse_call` (an unreadable header drops the record; a bad credential is
//! denied with AUTH_ERROR), then by program: PORTMAP (GETPORT answers this server's one port
//! for MOUNT v3 and NFS v3 and v4 over TCP, 0 for anything else; any credential), MOUNT v3
//! (MNT of `/POOL/DATASET` for shared filesystems), NFS v3, and NFS v4 (NULL, and COMPOUND
//! handed to `v4/`, which answers its own operations' refusals). Every call but the NULL procedures
//! and PORTMAP needs AUTH_SYS: others are denied AUTH_ERROR TOOWEAK. Each NFS call is then
//! admitted by the exports its handles lead into, as their `sharenfs` reads now and as the
//! connection's peer address is listed there (`NfsContext::admit`, `access.rs`): refused
//! ACCES or ROFS before it runs, root squashed, ACCESS limited on a read-only share; MNT is
//! refused MNT3ERR_ACCES to a client with no access. An NFS version other than 3 or 4
//! gets PROG_MISMATCH (3 to 4), an unknown procedure PROC_UNAVAIL, arguments that do not decode
//! GARBAGE_ARGS; a record over `RECORD_BYTES_MAX` closes the connection. So a peer's input
//! can neither panic the server nor make it hold more than that per call. Every record is
//! charged to the server's memory limit before its body is read, and holds its charge until
//! its reply is written (`memory.rs`): a connection that finds no room stops reading, and one
//! whose client does not take a reply within `REPLY_WRITE_TIMEOUT` is closed (its charges
//! given back).
//!
//! Non-idempotent calls (CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK, SETATTR)
//! are answered from the duplicate-request cache when they are retransmissions (before the
//! access check: the change was made, whatever the share says now), and their replies
//! recorded there (`drc.rs`); refusals are not recorded. Calls of one connection are served by
//! `CALLS_IN_FLIGHT_MAX` workers at once, replies sent as each finishes (RPC over TCP
//! matches them by xid), or by the reader itself when the connection is idle (a client that
//! waits for each reply: `read_records`); so per connection at most that many records and
//! the one being read are held, and all connections together at most the memory limit. A
//! retransmission arriving while its first copy is still being served (on another worker) is
//! served again: the cache only holds finished replies. Every record is counted in the
//! statistics (`crate::nfs_stats`: what it was, `Seen`, and how long answering it took), and
//! every connection's start and end. Uses `context.rs`, `drc.rs`, `convert.rs`, `handle.rs`,
//! `memory.rs`, `procs.rs`, `changes.rs` and `write.rs`.

use super::access;
use super::changes;
use super::context::NfsContext;
use super::convert::Caller;
use super::drc::CallKey;
use super::memory::{
    Charge, PEEK_BYTES, RECORD_BYTES_MAX, call_charge_bytes, program_and_procedure,
    unknown_record_charge_bytes,
};
use super::procs::{self, IO_BYTES_MAX};
use super::v4;
use super::write;
use crate::nfs_stats::Seen;
use cairn_dataset::properties::ShareAccess;
use cairn_nfs::mount::{
    DirPath, ExportEntry, MOUNT_V3, MntOk, MountCall, MountError, MountName, MountReply,
    decode_mount_call,
};
use cairn_nfs::nfs3::{NFS_V3, Nfs3Call, Nfs3Proc, Nfs3Reply, decode_call};
use cairn_nfs::nfs4::NFS_V4;
use cairn_nfs::nfs4::args::{PROC4_COMPOUND, PROC4_NULL};
use cairn_nfs::portmap::{IPPROTO_TCP, PortmapCall, PortmapReply, decode_portmap_call};
use cairn_nfs::record::{FRAGMENT_LEN_MASK, LAST_FRAGMENT};
use cairn_nfs::rpc::{
    AUTH_SYS, AcceptStat, AuthStat, CallHeader, Credential, PROGRAM_MOUNT, PROGRAM_NFS,
    PROGRAM_PORTMAP, RejectStat, ReplyHeader, parse_call,
};
use cairn_nfs::{Encoder, XdrEncode, XdrError};
use parking_lot::Mutex;
use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};

/// Calls of one connection served at once (a Linux client sends many on one connection:
/// a COMMIT or a slow read must not hold up the rest). With the record being read, a
/// connection holds at most this many records and one more.
pub const CALLS_IN_FLIGHT_MAX: usize = 4;
/// Bytes buffered from the socket (fixed per connection, not charged to the memory limit:
/// small, so that `CONNECTIONS_MAX` idle connections hold little). A record's body beyond
/// what the buffer holds is read straight into the record.
const READ_BUFFER_BYTES: usize = 16 * 1024;

/// How long writing one reply may take before the connection is closed: a client that stops
/// reading its replies would otherwise keep its calls' charges, and with them other clients'
/// calls waiting, for good (as NBD's `io_timeout`).
const REPLY_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A call record and the memory charged to it until its reply is written.
type Call<'a> = (Vec<u8>, Charge<'a>);

/// Serves `stream` until the client closes it, it breaks, or it sends what cannot be framed;
/// then closes it (the server's list of connections holds a clone of the socket, so dropping
/// this one alone would leave the client waiting).
pub fn serve_connection(ctx: &NfsContext, stream: TcpStream) {
    serve_until_done(ctx, &stream);
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn serve_until_done(ctx: &NfsContext, stream: &TcpStream) {
    let client = match stream.peer_addr() {
        Ok(address) => address.ip(),
        Err(_) => return,
    };
    if stream.set_write_timeout(Some(REPLY_WRITE_TIMEOUT)).is_err() {
        return;
    }
    ctx.stats.connection_opened(client);
    // A rendezvous channel: the reader hands a record over only when a worker is free, so
    // a connection holds at most `CALLS_IN_FLIGHT_MAX` records being served and one being
    // read.
    let (sender, receiver) = std::sync::mpsc::sync_channel::<Call<'_>>(0);
    let conn = Connection {
        ctx,
        client,
        stream,
        writing: Mutex::new(()),
        workers_busy: AtomicUsize::new(0),
    };
    let receiver = Mutex::new(receiver);
    std::thread::scope(|scope| {
        for _ in 0..CALLS_IN_FLIGHT_MAX {
            let worker = || serve_calls(&conn, &receiver);
            let spawned = std::thread::Builder::new()
                .name("cairn-nfs-call".into())
                .spawn_scoped(scope, worker);
            if spawned.is_err() {
                // No worker: the connection cannot be served.
                return;
            }
        }
        read_records(&conn, &sender);
        drop(sender);
    });
    ctx.stats.connection_closed(client);
}

/// What the reader and the workers of one connection share.
struct Connection<'a> {
    ctx: &'a NfsContext,
    client: IpAddr,
    stream: &'a TcpStream,
    /// Taken to write one reply whole (replies never interleave on the wire).
    writing: Mutex<()>,
    /// Calls handed to workers and not yet answered.
    workers_busy: AtomicUsize,
}

impl Connection<'_> {
    /// Serves one call and writes its reply, then gives its memory back; false when the
    /// reply could not be written (the connection is then shut down: the reader sees it end).
    fn answer(&self, record: Vec<u8>, charge: Charge<'_>) -> bool {
        let reply = serve_record(self.ctx, self.client, &record);
        drop(record);
        let written = reply.is_none_or(|reply| {
            let _turn = self.writing.lock();
            let mut out = self.stream;
            out.write_all(&reply).is_ok()
        });
        // The call's buffers are gone: its memory goes back to the limit.
        drop(charge);
        if !written {
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
        }
        written
    }
}

/// A worker of one connection: serves the records the reader hands over until it stops.
fn serve_calls(conn: &Connection<'_>, receiver: &Mutex<Receiver<Call<'_>>>) {
    loop {
        let (record, charge) = match receiver.lock().recv() {
            Ok(call) => call,
            Err(_) => return,
        };
        let written = conn.answer(record, charge);
        conn.workers_busy.fetch_sub(1, Ordering::AcqRel);
        if !written {
            return;
        }
    }
}

/// Reads records and hands each to a worker, until the connection ends, breaks framing, or
/// the server stops while the reader waits for memory.
///
/// A call that finds the connection idle — no worker busy, nothing more from the client
/// already buffered — is served by the reader itself (`in_place`): a client that waits for
/// each reply (one call in flight, as a database's FILE_SYNC writes) then pays no hand-off
/// to another thread and no wake-up, as NBD's reader serves such a client's FUA writes. A
/// client with calls in flight still has them served side by side; COMMIT, which may take
/// long, always goes to a worker, so the reader is back at the socket at once.
fn read_records<'a>(conn: &Connection<'a>, sender: &SyncSender<Call<'a>>) {
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, conn.stream);
    while let Some(call) = read_call(conn.ctx, &mut reader) {
        let idle = conn.workers_busy.load(Ordering::Acquire) == 0 && reader.buffer().is_empty();
        if idle && in_place(&call.0) {
            if !conn.answer(call.0, call.1) {
                return;
            }
            continue;
        }
        conn.workers_busy.fetch_add(1, Ordering::AcqRel);
        if sender.send(call).is_err() {
            return;
        }
    }
}

/// Whether the reader may serve the call whose record is `record` itself when the
/// connection is idle: any call but an NFS COMMIT (which waits for a whole file's log
/// records to reach the device).
fn in_place(record: &[u8]) -> bool {
    program_and_procedure(record) != (Some(PROGRAM_NFS), Some(Nfs3Proc::Commit as u32))
}

/// Reads one call record (RFC 5531 §11 record marking), charged to the memory limit before
/// its body is allocated: its record mark gives its length, its first `PEEK_BYTES` (read onto
/// the stack) its procedure (`memory.rs`). None: the connection ended or broke framing (a
/// record over `RECORD_BYTES_MAX`), or the server stopped.
fn read_call<'a>(ctx: &'a NfsContext, reader: &mut impl Read) -> Option<Call<'a>> {
    let mut mark = [0; 4];
    reader.read_exact(&mut mark).ok()?;
    let mark = u32::from_be_bytes(mark);
    let fragment_bytes = (mark & FRAGMENT_LEN_MASK) as usize;
    let mut last = mark & LAST_FRAGMENT != 0;
    if fragment_bytes > RECORD_BYTES_MAX {
        return None;
    }
    let mut head = [0; PEEK_BYTES];
    let head_bytes = fragment_bytes.min(PEEK_BYTES);
    reader.read_exact(&mut head[..head_bytes]).ok()?;
    let charge_bytes = if last {
        call_charge_bytes(fragment_bytes, &head[..head_bytes])
    } else {
        unknown_record_charge_bytes()
    };
    let mut charge = ctx.memory.charge(charge_bytes, &ctx.stopping)?;
    let whole = last;
    let mut record = head[..head_bytes].to_vec();
    // What is left of the current fragment.
    let mut left_bytes = fragment_bytes - head_bytes;
    loop {
        let at = record.len();
        record.resize(at + left_bytes, 0);
        reader.read_exact(&mut record[at..]).ok()?;
        if last {
            break;
        }
        let mut mark = [0; 4];
        reader.read_exact(&mut mark).ok()?;
        let mark = u32::from_be_bytes(mark);
        left_bytes = (mark & FRAGMENT_LEN_MASK) as usize;
        last = mark & LAST_FRAGMENT != 0;
        if record.len() + left_bytes > RECORD_BYTES_MAX {
            return None;
        }
    }
    if !whole {
        // Charged as the largest record: now what it turned out to be.
        let head_bytes = record.len().min(PEEK_BYTES);
        charge.shrink_to(call_charge_bytes(record.len(), &record[..head_bytes]));
    }
    Some((record, charge))
}

fn header_only(header: ReplyHeader) -> Option<Vec<u8>> {
    let mut enc = Encoder::for_record();
    enc.put(&header);
    enc.into_record().ok()
}

fn success(xid: u32, body: &dyn XdrEncode) -> Option<Vec<u8>> {
    let mut enc = Encoder::for_record();
    enc.put(&ReplyHeader::success(xid));
    body.encode(&mut enc);
    enc.into_record().ok()
}

fn failed_args(seen: &mut Seen, xid: u32, err: &XdrError) -> Option<Vec<u8>> {
    let stat = match err {
        XdrError::UnknownProcedure(_) => {
            *seen = Seen::Unsupported;
            AcceptStat::ProcUnavail
        }
        _ => {
            *seen = Seen::Garbage;
            AcceptStat::GarbageArgs
        }
    };
    header_only(ReplyHeader::accepted(xid, stat))
}

/// The caller of a call that needs AUTH_SYS, as sent (root not yet squashed: that depends on
/// the export the call reaches); None: too weak.
fn caller_of(header: &CallHeader) -> Option<Caller> {
    match &header.credential {
        Credential::Sys(sys) => Some(Caller::new(sys.uid, sys.gid, &sys.gids)),
        _ => None,
    }
}

/// The whole reply record to one call record (None: nothing to send), counted in the
/// statistics with the time it took.
pub fn serve_record(ctx: &NfsContext, client: IpAddr, record: &[u8]) -> Option<Vec<u8>> {
    let started = std::time::Instant::now();
    let mut seen = Seen::Nothing;
    let reply = answer_record(ctx, client, record, &mut seen);
    ctx.stats.record(client, seen, started.elapsed());
    reply
}

/// `serve_record`'s answer; `seen` learns what the record was.
fn answer_record(
    ctx: &NfsContext,
    client: IpAddr,
    record: &[u8],
    seen: &mut Seen,
) -> Option<Vec<u8>> {
    let (header, args) = match parse_call(record) {
        Ok(parsed) => parsed,
        Err(err) => {
            *seen = Seen::Garbage;
            return header_only(err.reply()?);
        }
    };
    let xid = header.xid;
    let mismatch = |seen: &mut Seen, version| {
        *seen = Seen::Unsupported;
        header_only(ReplyHeader::accepted(
            xid,
            AcceptStat::ProgMismatch {
                low: version,
                high: version,
            },
        ))
    };
    let too_weak = |seen: &mut Seen| {
        *seen = Seen::AuthRefused;
        header_only(ReplyHeader::denied(
            xid,
            RejectStat::AuthError(AuthStat::TooWeak),
        ))
    };
    match header.program {
        PROGRAM_PORTMAP => match decode_portmap_call(header.procedure, args) {
            Ok(call) => {
                *seen = Seen::Portmap;
                success(xid, &portmap(ctx, &call))
            }
            Err(err) => failed_args(seen, xid, &err),
        },
        PROGRAM_MOUNT if header.version != MOUNT_V3 => mismatch(seen, MOUNT_V3),
        PROGRAM_MOUNT => match decode_mount_call(header.procedure, args) {
            Ok(MountCall::Null) => {
                *seen = mount_seen(&MountCall::Null, &MountReply::Null);
                success(xid, &MountReply::Null)
            }
            Ok(call) => match caller_of(&header) {
                Some(_) => {
                    let reply = mount(ctx, client, &call);
                    *seen = mount_seen(&call, &reply);
                    success(xid, &reply)
                }
                None => too_weak(seen),
            },
            Err(err) => failed_args(seen, xid, &err),
        },
        PROGRAM_NFS if header.version == NFS_V4 => nfs4(ctx, client, &header, args, seen),
        PROGRAM_NFS if header.version != NFS_V3 => nfs_mismatch(xid, seen),
        PROGRAM_NFS => {
            if header.procedure == Nfs3Proc::Null.as_u32() {
                *seen = Seen::nfs(&Nfs3Call::Null, &Nfs3Reply::Null);
                return success(xid, &Nfs3Reply::Null);
            }
            let Some(caller) = caller_of(&header) else {
                return too_weak(seen);
            };
            let call = match decode_call(header.procedure, args, IO_BYTES_MAX as usize) {
                Ok(call) => call,
                Err(err) => return failed_args(seen, xid, &err),
            };
            // A retransmission gets its first reply even if the share changed since: the
            // change it asked for was made (as Linux's nfsd, whose cache comes first too).
            let key = remembered(&call).then(|| CallKey::new(client, xid, header.procedure, args));
            if let Some(reply) = key.as_ref().and_then(|key| ctx.drc.get(key)) {
                *seen = Seen::Replayed(call.procedure());
                return Some(reply);
            }
            let reply = match ctx.admit(client, caller, &call) {
                Ok(admitted) => {
                    let started = std::time::Instant::now();
                    let reply = nfs3(ctx, &admitted.caller, &call);
                    let reply = access::limit_access(reply, admitted.read_only);
                    count_in_dataset(ctx, admitted.dataset, &call, &reply, started);
                    reply
                }
                // Not remembered: refused before anything was done.
                Err(err) => {
                    let reply = access::refusal(call.procedure(), err);
                    *seen = Seen::nfs(&call, &reply);
                    return success(xid, &reply);
                }
            };
            *seen = Seen::nfs(&call, &reply);
            let Some(key) = key else {
                return success(xid, &reply);
            };
            let reply = success(xid, &reply)?;
            ctx.drc.insert(key, reply.clone());
            Some(reply)
        }
        _ => {
            *seen = Seen::Unsupported;
            header_only(ReplyHeader::accepted(xid, AcceptStat::ProgUnavail))
        }
    }
}

/// A call of an NFS version not served: versions 3 to 4 are.
fn nfs_mismatch(xid: u32, seen: &mut Seen) -> Option<Vec<u8>> {
    *seen = Seen::Unsupported;
    header_only(ReplyHeader::accepted(
        xid,
        AcceptStat::ProgMismatch {
            low: NFS_V3,
            high: NFS_V4,
        },
    ))
}

/// An NFSv4 call: NULL, or a COMPOUND (`v4/`), which needs AUTH_SYS as v3's calls do.
fn nfs4(
    ctx: &NfsContext,
    client: IpAddr,
    header: &CallHeader,
    args: &[u8],
    seen: &mut Seen,
) -> Option<Vec<u8>> {
    let xid = header.xid;
    match header.procedure {
        PROC4_NULL => {
            *seen = Seen::Nfs4 { ok: true };
            success(xid, &())
        }
        PROC4_COMPOUND => {
            let Some(caller) = caller_of(header) else {
                *seen = Seen::AuthRefused;
                return header_only(ReplyHeader::denied(
                    xid,
                    RejectStat::AuthError(AuthStat::TooWeak),
                ));
            };
            match v4::compound(ctx, client, caller, args) {
                Ok(body) => {
                    *seen = Seen::Nfs4 { ok: true };
                    let mut enc = Encoder::for_record();
                    enc.put(&ReplyHeader::success(xid));
                    enc.put_fixed(&body);
                    enc.into_record().ok()
                }
                Err(err) => failed_args(seen, xid, &err),
            }
        }
        other => failed_args(seen, xid, &XdrError::UnknownProcedure(other)),
    }
}

/// Counts an answered call among the calls of the filesystem its first handle leads into,
/// as FUSE counts its calls there (`pool iostat`, `stat fs`); a snapshot's calls count in
/// its dataset.
fn count_in_dataset(
    ctx: &NfsContext,
    dataset: Option<(std::sync::Arc<cairn_engine::Pool>, String)>,
    call: &Nfs3Call,
    reply: &Nfs3Reply,
    started: std::time::Instant,
) {
    let Some((pool, dataset)) = dataset else {
        return;
    };
    let Ok(fs) = pool.filesystem(&dataset) else {
        return;
    };
    let (kind, bytes, ok) = crate::nfs_stats::fs_op_of(call, reply);
    fs.record_op(kind, bytes, ok, started.elapsed());
    ctx.served.note_nfs_filesystem(&dataset, &fs);
}

/// A MOUNT call as the statistics count it (MNT fails when it names no shared directory).
fn mount_seen(call: &MountCall, reply: &MountReply) -> Seen {
    Seen::Mount {
        procedure: call.procedure(),
        ok: !matches!(reply, MountReply::Mnt(Err(_))),
    }
}

/// Calls whose replies the duplicate-request cache keeps (doing them twice differs).
fn remembered(call: &Nfs3Call) -> bool {
    matches!(
        call.procedure(),
        Nfs3Proc::Setattr
            | Nfs3Proc::Create
            | Nfs3Proc::Mkdir
            | Nfs3Proc::Symlink
            | Nfs3Proc::Mknod
            | Nfs3Proc::Remove
            | Nfs3Proc::Rmdir
            | Nfs3Proc::Rename
            | Nfs3Proc::Link
    )
}

fn portmap(ctx: &NfsContext, call: &PortmapCall) -> PortmapReply {
    match call {
        PortmapCall::Getport(mapping) => {
            let ours = matches!(
                (mapping.program, mapping.version),
                (PROGRAM_NFS, NFS_V3 | NFS_V4) | (PROGRAM_MOUNT, MOUNT_V3)
            ) && mapping.protocol == IPPROTO_TCP;
            PortmapReply::Port(if ours { u32::from(ctx.port) } else { 0 })
        }
        PortmapCall::Set(_) | PortmapCall::Unset(_) => PortmapReply::Done(false),
        PortmapCall::Dump => PortmapReply::Dump(Vec::new()),
        PortmapCall::Null => PortmapReply::Null,
    }
}

fn mount(ctx: &NfsContext, client: IpAddr, call: &MountCall) -> MountReply {
    match call {
        MountCall::Mnt(path) => MountReply::Mnt(ctx.mount_point(path.as_bytes()).and_then(
            |(export, object, attrs)| {
                if ctx.client_access(client, &export.dataset, &export.share) == ShareAccess::None {
                    return Err(MountError::Acces);
                }
                Ok(MntOk {
                    handle: export.handle(object, &attrs),
                    auth_flavors: vec![AUTH_SYS],
                })
            },
        )),
        MountCall::Export => MountReply::Export(exports(ctx)),
        MountCall::Dump => MountReply::Dump(Vec::new()),
        MountCall::Null => MountReply::Null,
        MountCall::Umnt(_) => MountReply::Umnt,
        MountCall::Umntall => MountReply::Umntall,
    }
}

/// Every shared filesystem's mount path, and the clients it is served to as groups (its
/// access lists' networks; loopback's for a share without lists: `access::export_groups`).
fn exports(ctx: &NfsContext) -> Vec<ExportEntry> {
    let mut entries = Vec::new();
    for pool in ctx.served.all() {
        for name in pool.dataset_names() {
            let Ok(properties) = pool.dataset_properties(&name) else {
                continue;
            };
            if !super::handle::shared(&properties) {
                continue;
            }
            let Ok(directory) = DirPath::new(format!("/{name}").into_bytes()) else {
                continue;
            };
            let groups = access::export_groups(&properties.sharenfs)
                .into_iter()
                .filter_map(|group| MountName::new(group.into_bytes()).ok())
                .collect();
            entries.push(ExportEntry { directory, groups });
        }
    }
    entries
}

fn nfs3(ctx: &NfsContext, caller: &Caller, call: &Nfs3Call) -> Nfs3Reply {
    match call {
        Nfs3Call::Null => Nfs3Reply::Null,
        Nfs3Call::Getattr(args) => procs::getattr(ctx, args),
        Nfs3Call::Setattr(args) => changes::setattr(ctx, caller, args),
        Nfs3Call::Lookup(args) => procs::lookup(ctx, caller, args),
        Nfs3Call::Access(args) => procs::access(ctx, caller, args),
        Nfs3Call::Readlink(args) => procs::readlink(ctx, args),
        Nfs3Call::Read(args) => procs::read(ctx, caller, args),
        Nfs3Call::Write(args) => write::write(ctx, caller, args),
        Nfs3Call::Create(args) => changes::create(ctx, caller, args),
        Nfs3Call::Mkdir(args) => changes::mkdir(ctx, caller, args),
        Nfs3Call::Symlink(args) => changes::symlink(ctx, caller, args),
        Nfs3Call::Mknod(args) => changes::mknod(ctx, caller, args),
        Nfs3Call::Remove(args) => changes::remove(ctx, caller, args),
        Nfs3Call::Rmdir(args) => changes::rmdir(ctx, caller, args),
        Nfs3Call::Rename(args) => changes::rename(ctx, caller, args),
        Nfs3Call::Link(args) => changes::link(ctx, caller, args),
        Nfs3Call::Readdir(args) => procs::readdir(ctx, caller, args),
        Nfs3Call::Readdirplus(args) => procs::readdirplus(ctx, caller, args),
        Nfs3Call::Fsstat(args) => procs::fsstat(ctx, args),
        Nfs3Call::Fsinfo(args) => procs::fsinfo(ctx, args),
        Nfs3Call::Pathconf(args) => procs::pathconf(ctx, args),
        Nfs3Call::Commit(args) => write::commit(ctx, args),
    }
}
