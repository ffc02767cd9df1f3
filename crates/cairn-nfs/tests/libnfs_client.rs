//! A real, independent NFS client (libnfs's `nfs-ls`, `nfs-cat`, `nfs-cp`; Debian
//! `libnfs-utils`) talks to a toy NFSv3 server built from nothing but this crate: record
//! decoding, `parse_call`, the program decoders and typed replies. Listing, reading (in
//! several READs, FSINFO advertising 64 KiB) and copying a file in (CREATE, WRITE) must give
//! the client's exact bytes; a MNT of an unknown path must fail. If the codec got one field of
//! a call or a result wrong, the C client would refuse the reply or see wrong data.
//!
//! The toy server has one flat directory in memory; handles are 8-byte file ids.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use cairn_nfs::mount::{
    DirPath, ExportEntry, MntOk, MountCall, MountError, MountReply, decode_mount_call,
};
use cairn_nfs::nfs3::*;
use cairn_nfs::portmap::{PortmapCall, PortmapReply, decode_portmap_call};
use cairn_nfs::record::RecordDecoder;
use cairn_nfs::rpc::{
    AUTH_NONE, AUTH_SYS, AcceptStat, PROGRAM_MOUNT, PROGRAM_NFS, PROGRAM_PORTMAP, ReplyHeader,
    parse_call,
};
use cairn_nfs::{Encoder, XdrEncode, XdrError};

const ROOT_ID: u64 = 1;
const READ_MAX_BYTES: u32 = 64 * 1024;
const VERIFIER: WriteVerf = *b"toyverf1";

#[derive(Default)]
struct Toy {
    /// (name, contents); file id = index + 2.
    files: Vec<(Vec<u8>, Vec<u8>)>,
    /// (program, procedure) of every call served.
    seen: BTreeSet<(u32, u32)>,
}

type Shared = Arc<Mutex<Toy>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Toy> {
    shared.lock().expect("toy server state")
}

fn handle(id: u64) -> FileHandle {
    FileHandle::new(id.to_be_bytes().to_vec()).expect("8 bytes")
}

fn id_of(fh: &FileHandle) -> Option<u64> {
    Some(u64::from_be_bytes(fh.as_bytes().try_into().ok()?))
}

fn attrs(toy: &Toy, id: u64) -> Option<Fattr3> {
    let time = NfsTime3 {
        seconds: 1_700_000_000,
        nseconds: 0,
    };
    let (ftype, mode, size_bytes) = if id == ROOT_ID {
        (Ftype3::Dir, 0o755, 4096)
    } else {
        let (_, data) = toy.files.get(usize::try_from(id.checked_sub(2)?).ok()?)?;
        (Ftype3::Reg, 0o644, data.len() as u64)
    };
    Some(Fattr3 {
        ftype,
        mode,
        nlink: if id == ROOT_ID { 2 } else { 1 },
        uid: 0,
        gid: 0,
        size_bytes,
        used_bytes: size_bytes,
        rdev: SpecData3 { major: 0, minor: 0 },
        fsid: 7,
        fileid: id,
        atime: time.clone(),
        mtime: time.clone(),
        ctime: time,
    })
}

fn file_mut<'a>(toy: &'a mut Toy, fh: &FileHandle) -> Option<&'a mut Vec<u8>> {
    let index = usize::try_from(id_of(fh)?.checked_sub(2)?).ok()?;
    toy.files.get_mut(index).map(|(_, data)| data)
}

fn wcc(toy: &Toy, id: u64) -> WccData {
    WccData {
        before: None,
        after: attrs(toy, id),
    }
}

fn lookup(toy: &Toy, name: &Filename) -> Option<u64> {
    let index = toy.files.iter().position(|(n, _)| n == name.as_bytes())?;
    Some(index as u64 + 2)
}

fn create(toy: &mut Toy, args: &CreateArgs) -> Nfs3Reply {
    let id = match lookup(toy, &args.location.name) {
        Some(_) if matches!(args.how, CreateHow::Guarded(_)) => {
            return Nfs3Reply::Create(Outcome::Fail(Nfs3Error::Exist, wcc(toy, ROOT_ID)));
        }
        Some(id) => id,
        None => {
            toy.files
                .push((args.location.name.as_bytes().to_vec(), Vec::new()));
            toy.files.len() as u64 + 1
        }
    };
    Nfs3Reply::Create(Outcome::Ok(CreateOk {
        object: Some(handle(id)),
        obj_attributes: attrs(toy, id),
        dir_wcc: wcc(toy, ROOT_ID),
    }))
}

fn read(toy: &Toy, args: &RangeArgs) -> Nfs3Reply {
    let Some(attributes) = attrs(toy, id_of(&args.file).unwrap_or(0)) else {
        return Nfs3Reply::Read(Outcome::Fail(Nfs3Error::Stale, None));
    };
    let index = usize::try_from(attributes.fileid - 2).unwrap_or(usize::MAX);
    let data = toy
        .files
        .get(index)
        .map(|(_, d)| d.as_slice())
        .unwrap_or(&[]);
    let start = usize::try_from(args.offset_bytes)
        .unwrap_or(usize::MAX)
        .min(data.len());
    let end = (start + args.count_bytes.min(READ_MAX_BYTES) as usize).min(data.len());
    Nfs3Reply::Read(Outcome::Ok(ReadOk {
        file_attributes: Some(attributes),
        eof: end == data.len(),
        data: data[start..end].to_vec(),
    }))
}

fn write(toy: &mut Toy, args: &WriteArgs) -> Nfs3Reply {
    let Some(data) = file_mut(toy, &args.file) else {
        return Nfs3Reply::Write(Outcome::Fail(Nfs3Error::Stale, WccData::empty()));
    };
    let start = usize::try_from(args.offset_bytes).expect("small offsets");
    let end = start + args.data.len();
    if data.len() < end {
        data.resize(end, 0);
    }
    data[start..end].copy_from_slice(&args.data);
    let id = id_of(&args.file).unwrap_or(0);
    Nfs3Reply::Write(Outcome::Ok(WriteOk {
        file_wcc: wcc(toy, id),
        count_bytes: args.data.len() as u32,
        committed: StableHow::FileSync,
        verf: VERIFIER,
    }))
}

fn readdirplus(toy: &Toy, args: &ReaddirplusArgs) -> Nfs3Reply {
    let entries = toy
        .files
        .iter()
        .enumerate()
        .skip(usize::try_from(args.cookie).unwrap_or(usize::MAX))
        .map(|(index, (name, _))| EntryPlus3 {
            fileid: index as u64 + 2,
            name: Filename::new(name.clone()).expect("short names"),
            cookie: index as u64 + 1,
            name_attributes: attrs(toy, index as u64 + 2),
            name_handle: Some(handle(index as u64 + 2)),
        })
        .collect();
    Nfs3Reply::Readdirplus(Outcome::Ok(DirListOk {
        dir_attributes: attrs(toy, ROOT_ID),
        cookieverf: [0; 8],
        entries,
        eof: true,
    }))
}

fn fsinfo(toy: &Toy) -> Nfs3Reply {
    Nfs3Reply::Fsinfo(Outcome::Ok(FsinfoOk {
        obj_attributes: attrs(toy, ROOT_ID),
        rtmax_bytes: READ_MAX_BYTES,
        rtpref_bytes: READ_MAX_BYTES,
        rtmult_bytes: 4096,
        wtmax_bytes: READ_MAX_BYTES,
        wtpref_bytes: READ_MAX_BYTES,
        wtmult_bytes: 4096,
        dtpref_bytes: 4096,
        maxfilesize_bytes: 1 << 40,
        time_delta: NfsTime3 {
            seconds: 0,
            nseconds: 1,
        },
        properties: fsf::LINK | fsf::SYMLINK | fsf::HOMOGENEOUS | fsf::CANSETTIME,
    }))
}

/// The NFSv3 procedures the toy serves; others are PROC_UNAVAIL.
fn nfs(toy: &mut Toy, call: &Nfs3Call) -> Option<Nfs3Reply> {
    Some(match call {
        Nfs3Call::Null => Nfs3Reply::Null,
        Nfs3Call::Getattr(args) => {
            Nfs3Reply::Getattr(match attrs(toy, id_of(&args.object).unwrap_or(0)) {
                Some(attributes) => Outcome::Ok(attributes),
                None => Outcome::Fail(Nfs3Error::Stale, ()),
            })
        }
        Nfs3Call::Lookup(args) => Nfs3Reply::Lookup(match lookup(toy, &args.name) {
            Some(id) => Outcome::Ok(LookupOk {
                object: handle(id),
                obj_attributes: attrs(toy, id),
                dir_attributes: attrs(toy, ROOT_ID),
            }),
            None => Outcome::Fail(Nfs3Error::NoEnt, attrs(toy, ROOT_ID)),
        }),
        Nfs3Call::Access(args) => Nfs3Reply::Access(Outcome::Ok(AccessOk {
            obj_attributes: attrs(toy, id_of(&args.object).unwrap_or(0)),
            access: args.access,
        })),
        Nfs3Call::Setattr(args) => {
            let id = id_of(&args.object).unwrap_or(0);
            if let (Some(size), Some(data)) =
                (args.new_attributes.size_bytes, file_mut(toy, &args.object))
            {
                data.resize(usize::try_from(size).expect("small"), 0);
            }
            Nfs3Reply::Setattr(Outcome::Ok(wcc(toy, id)))
        }
        Nfs3Call::Read(args) => read(toy, args),
        Nfs3Call::Write(args) => write(toy, args),
        Nfs3Call::Create(args) => create(toy, args),
        Nfs3Call::Readdirplus(args) => readdirplus(toy, args),
        Nfs3Call::Fsinfo(_) => fsinfo(toy),
        Nfs3Call::Commit(args) => Nfs3Reply::Commit(Outcome::Ok(CommitOk {
            file_wcc: wcc(toy, id_of(&args.file).unwrap_or(0)),
            verf: VERIFIER,
        })),
        _ => return None,
    })
}

fn mount(call: &MountCall) -> MountReply {
    match call {
        MountCall::Mnt(path) if path.as_bytes() == b"/export" => MountReply::Mnt(Ok(MntOk {
            handle: handle(ROOT_ID),
            auth_flavors: vec![AUTH_SYS, AUTH_NONE],
        })),
        MountCall::Mnt(_) => MountReply::Mnt(Err(MountError::NoEnt)),
        MountCall::Export => MountReply::Export(vec![ExportEntry {
            directory: DirPath::new(&b"/export"[..]).expect("short"),
            groups: Vec::new(),
        }]),
        MountCall::Dump => MountReply::Dump(Vec::new()),
        MountCall::Null => MountReply::Null,
        MountCall::Umnt(_) => MountReply::Umnt,
        MountCall::Umntall => MountReply::Umntall,
    }
}

fn answer(xid: u32, result: Result<Option<Box<dyn XdrEncode>>, XdrError>) -> Vec<u8> {
    let mut enc = Encoder::for_record();
    match result {
        Ok(Some(body)) => {
            enc.put(&ReplyHeader::success(xid));
            body.encode(&mut enc);
        }
        Ok(None) | Err(XdrError::UnknownProcedure(_)) => {
            enc.put(&ReplyHeader::accepted(xid, AcceptStat::ProcUnavail));
        }
        Err(_) => enc.put(&ReplyHeader::accepted(xid, AcceptStat::GarbageArgs)),
    }
    enc.into_record().expect("small reply")
}

/// One whole call record in, one whole reply record out (None: drop it).
fn serve_record(shared: &Shared, port: u16, record: &[u8]) -> Option<Vec<u8>> {
    let (header, args) = match parse_call(record) {
        Ok(parsed) => parsed,
        Err(error) => {
            let denial = error.reply()?;
            let mut enc = Encoder::for_record();
            enc.put(&denial);
            return enc.into_record().ok();
        }
    };
    let mut toy = lock(shared);
    toy.seen.insert((header.program, header.procedure));
    let result: Result<Option<Box<dyn XdrEncode>>, XdrError> = match header.program {
        PROGRAM_NFS => decode_call(header.procedure, args, READ_MAX_BYTES as usize)
            .map(|call| nfs(&mut toy, &call).map(|r| Box::new(r) as Box<dyn XdrEncode>)),
        PROGRAM_MOUNT => decode_mount_call(header.procedure, args)
            .map(|call| Some(Box::new(mount(&call)) as Box<dyn XdrEncode>)),
        PROGRAM_PORTMAP => decode_portmap_call(header.procedure, args).map(|call| {
            let reply = match call {
                PortmapCall::Getport(m)
                    if m.program == PROGRAM_NFS || m.program == PROGRAM_MOUNT =>
                {
                    PortmapReply::Port(u32::from(port))
                }
                PortmapCall::Getport(_) => PortmapReply::Port(0),
                _ => PortmapReply::Null,
            };
            Some(Box::new(reply) as Box<dyn XdrEncode>)
        }),
        _ => {
            let mut enc = Encoder::for_record();
            enc.put(&ReplyHeader::accepted(header.xid, AcceptStat::ProgUnavail));
            return enc.into_record().ok();
        }
    };
    Some(answer(header.xid, result))
}

fn serve_connection(shared: Shared, port: u16, mut stream: TcpStream) {
    let mut decoder = RecordDecoder::new(2 << 20);
    let mut buf = vec![0; 256 * 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut input = &buf[..n];
        loop {
            match decoder.feed(&mut input) {
                Ok(Some(record)) => {
                    let reply = serve_record(&shared, port, &record).unwrap_or_default();
                    if stream.write_all(&reply).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

fn start(files: Vec<(Vec<u8>, Vec<u8>)>) -> (Shared, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let port = listener.local_addr().expect("address").port();
    let shared: Shared = Arc::new(Mutex::new(Toy {
        files,
        seen: BTreeSet::new(),
    }));
    let state = Arc::clone(&shared);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let state = Arc::clone(&state);
            std::thread::spawn(move || serve_connection(state, port, stream));
        }
    });
    (shared, port)
}

fn url(port: u16, path: &str) -> String {
    format!("nfs://127.0.0.1{path}?version=3&nfsport={port}&mountport={port}")
}

fn run(tool: &str, args: &[&str]) -> std::process::Output {
    Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("{tool} (Debian libnfs-utils) must be installed: {err}"))
}

fn pattern(len_bytes: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..len_bytes)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

#[test]
fn libnfs_lists_reads_and_writes_through_the_codec() {
    let big = pattern(300 * 1024 + 17, 1);
    let (shared, port) = start(vec![
        (b"hello.txt".to_vec(), b"hello, nfs\n".to_vec()),
        (b"big.bin".to_vec(), big.clone()),
    ]);

    let listing = run("nfs-ls", &[&url(port, "/export")]);
    assert!(listing.status.success(), "nfs-ls: {listing:?}");
    let text = String::from_utf8_lossy(&listing.stdout);
    assert!(
        text.contains("hello.txt") && text.contains("big.bin"),
        "{text}"
    );
    assert!(
        text.contains(&big.len().to_string()),
        "size of big.bin in {text}"
    );

    let cat = run("nfs-cat", &[&url(port, "/export/big.bin")]);
    assert!(cat.status.success(), "nfs-cat: {:?}", cat.status);
    assert!(
        cat.stdout == big,
        "nfs-cat returned {} bytes, not big.bin's",
        cat.stdout.len()
    );

    let dir = std::env::temp_dir().join(format!("cairn-nfs-libnfs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let local = dir.join("upload.bin");
    let upload = pattern(200 * 1024 + 3, 2);
    std::fs::write(&local, &upload).expect("write local file");
    let cp = run(
        "nfs-cp",
        &[
            local.to_str().expect("utf-8 path"),
            &url(port, "/export/copied.bin"),
        ],
    );
    std::fs::remove_dir_all(&dir).expect("clean temp dir");
    assert!(cp.status.success(), "nfs-cp: {cp:?}");
    let toy = lock(&shared);
    let copied = toy.files.iter().find(|(name, _)| name == b"copied.bin");
    assert!(
        copied.is_some_and(|(_, data)| *data == upload),
        "copied.bin differs"
    );

    let seen: Vec<u32> = toy
        .seen
        .iter()
        .filter(|(p, _)| *p == PROGRAM_NFS)
        .map(|(_, c)| *c)
        .collect();
    for proc in [
        Nfs3Proc::Read,
        Nfs3Proc::Write,
        Nfs3Proc::Create,
        Nfs3Proc::Readdirplus,
    ] {
        assert!(
            seen.contains(&proc.as_u32()),
            "{proc:?} never called: {seen:?}"
        );
    }
    assert!(toy.seen.contains(&(PROGRAM_MOUNT, 1)), "no MNT");
}

#[test]
fn libnfs_fails_to_mount_an_unknown_export() {
    let (_shared, port) = start(Vec::new());
    let listing = run("nfs-ls", &[&url(port, "/nowhere")]);
    assert!(
        !listing.status.success(),
        "nfs-ls of an unknown export succeeded"
    );
}
