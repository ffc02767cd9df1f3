//! `sharenfs` access lists and read-only shares against a real `cairn serve --nfs` (issue 35,
//! point 5), with the raw NFSv3 client of `nfs_common` on several loopback addresses: Linux
//! routes all of 127.0.0.0/8 to loopback, so a client socket bound to 127.0.0.2 before it
//! connects is another peer address to the server.
//!
//! - `lists_decide_what_each_client_may_do`: with `rw=127.0.0.2,ro=127.0.0.3`, the client
//!   from .2 writes; the one from .3 reads what .2 wrote but every change (WRITE, CREATE,
//!   REMOVE, SETATTR, MKDIR, SYMLINK, MKNOD, RENAME, LINK) gets ROFS, even as root with
//!   `no_root_squash`, and ACCESS grants it no MODIFY/EXTEND/DELETE; the one from .4 gets
//!   MNT3ERR_ACCES, and ACCES for every call on handles .2 obtained; a RENAME into an export
//!   the caller may not reach is ACCES, not XDEV; MOUNT's EXPORT shows the lists as groups;
//!   `cairn set sharenfs=...` while serving takes effect on the next call.
//! - `listening_beyond_loopback_needs_lists`: `serve --nfs 0.0.0.0:PORT` is refused while a
//!   shared filesystem has no list, naming it, and accepted once all have; a client from the
//!   host's own non-loopback address is served as its list says; a share that loses its
//!   lists while served is refused to it (loopback clients only), and the server reports it.
//!
//! The clients act as root with `no_root_squash`, so no mode bit ever refuses them: every
//! refusal seen is the share's.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;
mod nfs_common;

use cairn_nfs::Encoder;
use cairn_nfs::mount::{ExportEntry, MountError, MountProc, MountReply, decode_mount_reply};
use cairn_nfs::nfs3::*;
use cairn_nfs::rpc::{PROGRAM_MOUNT, PROGRAM_NFS};
use nbd_common::*;
use nfs_common::*;
use std::net::{IpAddr, Ipv4Addr};

const ROOT: u32 = 0;

fn name(text: &str) -> Filename {
    Filename::new(text.as_bytes().to_vec()).unwrap()
}

fn dir_op(dir: &FileHandle, entry: &str) -> DirOpArgs3 {
    DirOpArgs3 {
        dir: dir.clone(),
        name: name(entry),
    }
}

/// MOUNT MNT of `path`: the root handle or the refusal.
fn mnt(raw: &mut Raw, path: &str) -> Result<FileHandle, MountError> {
    raw.xid += 1;
    let mut enc = Encoder::new();
    enc.put(&cairn_nfs::mount::DirPath::new(path.as_bytes().to_vec()).unwrap());
    let procedure = MountProc::Mnt.as_u32();
    let reply = raw.call_with_xid(
        raw.xid,
        PROGRAM_MOUNT,
        procedure,
        sys(ROOT),
        &enc.into_bytes(),
    );
    let (_, results) = Raw::split(&reply);
    match decode_mount_reply(procedure, &results).unwrap() {
        MountReply::Mnt(result) => result.map(|ok| ok.handle),
        other => panic!("MNT {path}: {other:?}"),
    }
}

/// MOUNT EXPORT: every export and its groups.
fn export_list(raw: &mut Raw) -> Vec<(String, Vec<String>)> {
    raw.xid += 1;
    let procedure = MountProc::Export.as_u32();
    let reply = raw.call_with_xid(raw.xid, PROGRAM_MOUNT, procedure, sys(ROOT), &[]);
    let (_, results) = Raw::split(&reply);
    let MountReply::Export(entries) = decode_mount_reply(procedure, &results).unwrap() else {
        panic!("not an EXPORT reply");
    };
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).unwrap();
    entries
        .iter()
        .map(|ExportEntry { directory, groups }| {
            (
                text(directory.as_bytes()),
                groups.iter().map(|group| text(group.as_bytes())).collect(),
            )
        })
        .collect()
}

/// The status of a reply (`Ok` for success), whatever the procedure.
fn status(reply: &Nfs3Reply) -> Result<(), Nfs3Error> {
    macro_rules! of {
        ($($variant:ident),*) => {
            match reply {
                Nfs3Reply::Null => Ok(()),
                $(Nfs3Reply::$variant(Outcome::Ok(_)) => Ok(()),
                  Nfs3Reply::$variant(Outcome::Fail(err, _)) => Err(*err),)*
            }
        };
    }
    of!(
        Getattr,
        Setattr,
        Lookup,
        Access,
        Readlink,
        Read,
        Write,
        Create,
        Mkdir,
        Symlink,
        Mknod,
        Remove,
        Rmdir,
        Rename,
        Link,
        Readdir,
        Readdirplus,
        Fsstat,
        Fsinfo,
        Pathconf,
        Commit
    )
}

/// One call of every procedure on `root` (a shared filesystem's root holding file `a` and
/// directory `d`) and `file` (`a`), as root: each procedure and what it answered.
fn every_call(
    raw: &mut Raw,
    root: &FileHandle,
    file: &FileHandle,
    tag: &str,
) -> Vec<(Nfs3Proc, Result<(), Nfs3Error>)> {
    let sattr = || Sattr3 {
        mode: Some(0o644),
        ..Sattr3::default()
    };
    let handle = |object: &FileHandle| HandleArgs {
        object: object.clone(),
    };
    let calls: Vec<(Nfs3Proc, Box<dyn cairn_nfs::XdrEncode>)> = vec![
        (Nfs3Proc::Getattr, Box::new(handle(file))),
        (
            Nfs3Proc::Setattr,
            Box::new(SetattrArgs {
                object: file.clone(),
                new_attributes: sattr(),
                guard: None,
            }),
        ),
        (Nfs3Proc::Lookup, Box::new(dir_op(root, "a"))),
        (
            Nfs3Proc::Access,
            Box::new(AccessArgs {
                object: root.clone(),
                access: access::READ,
            }),
        ),
        (
            Nfs3Proc::Read,
            Box::new(RangeArgs {
                file: file.clone(),
                offset_bytes: 0,
                count_bytes: 4096,
            }),
        ),
        (
            Nfs3Proc::Write,
            Box::new(WriteArgs {
                file: file.clone(),
                offset_bytes: 0,
                stable: StableHow::FileSync,
                data: b"overwritten".to_vec(),
            }),
        ),
        (
            Nfs3Proc::Create,
            Box::new(CreateArgs {
                location: dir_op(root, &format!("created-{tag}")),
                how: CreateHow::Guarded(sattr()),
            }),
        ),
        (
            Nfs3Proc::Mkdir,
            Box::new(MkdirArgs {
                location: dir_op(root, &format!("dir-{tag}")),
                attributes: sattr(),
            }),
        ),
        (
            Nfs3Proc::Symlink,
            Box::new(SymlinkArgs {
                location: dir_op(root, &format!("link-{tag}")),
                attributes: sattr(),
                target: NfsPath::new(b"a".to_vec()).unwrap(),
            }),
        ),
        (
            Nfs3Proc::Mknod,
            Box::new(MknodArgs {
                location: dir_op(root, &format!("fifo-{tag}")),
                what: MknodData::Fifo(sattr()),
            }),
        ),
        (
            Nfs3Proc::Link,
            Box::new(LinkArgs {
                file: file.clone(),
                link: dir_op(root, &format!("hard-{tag}")),
            }),
        ),
        (
            Nfs3Proc::Rename,
            Box::new(RenameArgs {
                from: dir_op(root, &format!("hard-{tag}")),
                to: dir_op(root, &format!("moved-{tag}")),
            }),
        ),
        (
            Nfs3Proc::Remove,
            Box::new(dir_op(root, &format!("moved-{tag}"))),
        ),
        (
            Nfs3Proc::Rmdir,
            Box::new(dir_op(root, &format!("dir-{tag}"))),
        ),
        (
            Nfs3Proc::Readdir,
            Box::new(ReaddirArgs {
                dir: root.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                count_bytes: 4096,
            }),
        ),
        (
            Nfs3Proc::Readdirplus,
            Box::new(ReaddirplusArgs {
                dir: root.clone(),
                cookie: 0,
                cookieverf: [0; 8],
                dircount_bytes: 4096,
                maxcount_bytes: 16384,
            }),
        ),
        (Nfs3Proc::Fsstat, Box::new(handle(root))),
        (Nfs3Proc::Fsinfo, Box::new(handle(root))),
        (Nfs3Proc::Pathconf, Box::new(handle(root))),
        (
            Nfs3Proc::Commit,
            Box::new(RangeArgs {
                file: file.clone(),
                offset_bytes: 0,
                count_bytes: 0,
            }),
        ),
    ];
    calls
        .into_iter()
        .map(|(procedure, args)| (procedure, status(&raw.nfs_as(ROOT, procedure, &*args))))
        .collect()
}

/// The ACCESS bits granted to root on `object` when it asks for all of them.
fn granted(raw: &mut Raw, object: &FileHandle) -> Result<u32, Nfs3Error> {
    let all = access::READ
        | access::LOOKUP
        | access::MODIFY
        | access::EXTEND
        | access::DELETE
        | access::EXECUTE;
    let args = AccessArgs {
        object: object.clone(),
        access: all,
    };
    match raw.nfs_as(ROOT, Nfs3Proc::Access, &args) {
        Nfs3Reply::Access(Outcome::Ok(ok)) => Ok(ok.access),
        Nfs3Reply::Access(Outcome::Fail(err, _)) => Err(err),
        other => panic!("{other:?}"),
    }
}

const CHANGES: u32 = access::MODIFY | access::EXTEND | access::DELETE;

fn lookup_as_root(raw: &mut Raw, dir: &FileHandle, entry: &str) -> Result<FileHandle, Nfs3Error> {
    match raw.nfs_as(ROOT, Nfs3Proc::Lookup, &dir_op(dir, entry)) {
        Nfs3Reply::Lookup(Outcome::Ok(ok)) => Ok(ok.object),
        Nfs3Reply::Lookup(Outcome::Fail(err, _)) => Err(err),
        other => panic!("{other:?}"),
    }
}

fn getattr_as_root(raw: &mut Raw, object: &FileHandle) -> Result<Fattr3, Nfs3Error> {
    let args = HandleArgs {
        object: object.clone(),
    };
    match raw.nfs_as(ROOT, Nfs3Proc::Getattr, &args) {
        Nfs3Reply::Getattr(Outcome::Ok(attrs)) => Ok(attrs),
        Nfs3Reply::Getattr(Outcome::Fail(err, ())) => Err(err),
        other => panic!("{other:?}"),
    }
}

fn write_as_root(raw: &mut Raw, file: &FileHandle, data: &[u8]) -> Result<(), Nfs3Error> {
    let args = WriteArgs {
        file: file.clone(),
        offset_bytes: 0,
        stable: StableHow::FileSync,
        data: data.to_vec(),
    };
    status(&raw.nfs_as(ROOT, Nfs3Proc::Write, &args))
}

fn create_as_root(raw: &mut Raw, dir: &FileHandle, entry: &str) -> Result<FileHandle, Nfs3Error> {
    let args = CreateArgs {
        location: dir_op(dir, entry),
        how: CreateHow::Guarded(Sattr3 {
            mode: Some(0o644),
            ..Sattr3::default()
        }),
    };
    match raw.nfs_as(ROOT, Nfs3Proc::Create, &args) {
        Nfs3Reply::Create(Outcome::Ok(ok)) => Ok(ok.object.expect("a handle")),
        Nfs3Reply::Create(Outcome::Fail(err, _)) => Err(err),
        other => panic!("{other:?}"),
    }
}

fn read_as_root(raw: &mut Raw, file: &FileHandle) -> Result<Vec<u8>, Nfs3Error> {
    let args = RangeArgs {
        file: file.clone(),
        offset_bytes: 0,
        count_bytes: 4096,
    };
    match raw.nfs_as(ROOT, Nfs3Proc::Read, &args) {
        Nfs3Reply::Read(Outcome::Ok(ok)) => Ok(ok.data),
        Nfs3Reply::Read(Outcome::Fail(err, _)) => Err(err),
        other => panic!("{other:?}"),
    }
}

fn client(port: u16, last: u8) -> Raw {
    Raw::connect_from(port, Ipv4Addr::new(127, 0, 0, last))
}

#[test]
fn lists_decide_what_each_client_may_do() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.ok(&[
        "create",
        "-o",
        "sharenfs=rw=127.0.0.2/32,ro=@127.0.0.3,no_root_squash",
        "tank/home",
    ]);
    // Read-write to .3 only: a RENAME from home into it by .2 reaches an export .2 may not.
    env.ok(&[
        "create",
        "-o",
        "sharenfs=rw=127.0.0.3,no_root_squash",
        "tank/other",
    ]);
    assert_eq!(
        env.ok(&["get", "-H", "-o", "value", "sharenfs", "tank/home"])
            .trim(),
        "rw=127.0.0.2,ro=127.0.0.3,no_root_squash",
        "the canonical form"
    );
    for (value, says) in [
        ("rw=10.1.0.0/8", "10.0.0.0/8"),
        ("rw=files.example", "host names are not resolved"),
        ("rw=10.0.0.0/8,ro=10.0.0.0/8", "in both"),
        ("ro,rw=10.0.0.0/8", "ro=*"),
    ] {
        let run = env.cairn(&["set", &format!("sharenfs={value}"), "tank/home"]);
        assert!(
            !run.success() && run.stderr.contains(says),
            "sharenfs={value}: {}",
            run.describe()
        );
    }
    let port = free_port();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);

    // .2: read-write.
    let mut writer = client(port, 2);
    let root = mnt(&mut writer, "/tank/home").expect("MNT from .2");
    let file = create_as_root(&mut writer, &root, "a").unwrap();
    write_as_root(&mut writer, &file, b"written by .2").unwrap();
    let made_dir = MkdirArgs {
        location: dir_op(&root, "d"),
        attributes: Sattr3::default(),
    };
    assert_eq!(
        status(&writer.nfs_as(ROOT, Nfs3Proc::Mkdir, &made_dir)),
        Ok(())
    );
    assert_eq!(granted(&mut writer, &root).unwrap() & CHANGES, CHANGES);
    let writer_calls = every_call(&mut writer, &root, &file, "w");
    assert!(
        writer_calls.iter().all(|(_, result)| result.is_ok()),
        "a read-write client was refused: {writer_calls:?}"
    );
    write_as_root(&mut writer, &file, b"written by .2").unwrap();

    // .3: read-only.
    let mut reader = client(port, 3);
    let reader_root = mnt(&mut reader, "/tank/home").expect("MNT from .3");
    assert_eq!(reader_root, root, "the same export, the same handle");
    let seen = lookup_as_root(&mut reader, &root, "a").unwrap();
    assert_eq!(read_as_root(&mut reader, &seen).unwrap(), b"written by .2");
    let reader_calls = every_call(&mut reader, &root, &file, "r");
    for (procedure, result) in &reader_calls {
        let changes = matches!(
            procedure,
            Nfs3Proc::Setattr
                | Nfs3Proc::Write
                | Nfs3Proc::Create
                | Nfs3Proc::Mkdir
                | Nfs3Proc::Symlink
                | Nfs3Proc::Mknod
                | Nfs3Proc::Remove
                | Nfs3Proc::Rmdir
                | Nfs3Proc::Rename
                | Nfs3Proc::Link
        );
        let expected = if changes {
            Err(Nfs3Error::RoFs)
        } else {
            Ok(())
        };
        assert_eq!(*result, expected, "{procedure:?} from .3");
    }
    let on_file = granted(&mut reader, &seen).unwrap();
    let on_root = granted(&mut reader, &root).unwrap();
    assert_eq!(
        on_file & CHANGES,
        0,
        "ACCESS grants a change on a read-only share"
    );
    assert_eq!(
        on_root & CHANGES,
        0,
        "ACCESS grants a change on a read-only share"
    );
    assert_ne!(on_file & access::READ, 0);
    assert_ne!(on_root & access::LOOKUP, 0);
    assert_eq!(
        read_as_root(&mut writer, &file).unwrap(),
        b"written by .2",
        "nothing .3 sent changed the file"
    );

    // .4: no access, at MOUNT and with the handles .2 obtained.
    let mut stranger = client(port, 4);
    assert_eq!(mnt(&mut stranger, "/tank/home"), Err(MountError::Acces));
    assert_eq!(mnt(&mut stranger, "/tank/home/d"), Err(MountError::Acces));
    let stranger_calls = every_call(&mut stranger, &root, &file, "s");
    for (procedure, result) in &stranger_calls {
        assert_eq!(*result, Err(Nfs3Error::Acces), "{procedure:?} from .4");
    }
    // A RENAME from home (read-write to .2) into other (not reachable from .2).
    let mut other_client = client(port, 3);
    let other_root = mnt(&mut other_client, "/tank/other").expect("MNT other from .3");
    assert_eq!(mnt(&mut writer, "/tank/other"), Err(MountError::Acces));
    let across = RenameArgs {
        from: dir_op(&root, "a"),
        to: dir_op(&other_root, "a"),
    };
    assert_eq!(
        status(&writer.nfs_as(ROOT, Nfs3Proc::Rename, &across)),
        Err(Nfs3Error::Acces)
    );
    let link_across = LinkArgs {
        file: file.clone(),
        link: dir_op(&other_root, "a"),
    };
    assert_eq!(
        status(&writer.nfs_as(ROOT, Nfs3Proc::Link, &link_across)),
        Err(Nfs3Error::Acces)
    );

    // EXPORT shows the lists as groups.
    let exports = export_list(&mut stranger);
    assert!(
        exports.contains(&(
            "/tank/home".to_string(),
            vec!["127.0.0.2".to_string(), "127.0.0.3".to_string()]
        )),
        "{exports:?}"
    );
    assert!(
        exports.contains(&("/tank/other".to_string(), vec!["127.0.0.3".to_string()])),
        "{exports:?}"
    );

    // Changed while served: the next call obeys it, on connections already open; only a
    // retransmission of a call made before gets its first reply (the change was made).
    create_as_root(&mut writer, &root, "gone").unwrap();
    let remove_gone = |raw: &mut Raw, xid: u32| {
        let reply = raw.call_with_xid(
            xid,
            PROGRAM_NFS,
            Nfs3Proc::Remove.as_u32(),
            sys(ROOT),
            &remove_args(&root, "gone"),
        );
        let (_, results) = Raw::split(&reply);
        status(&decode_reply(Nfs3Proc::Remove.as_u32(), &results, 1 << 20).unwrap())
    };
    assert_eq!(remove_gone(&mut writer, 4242), Ok(()));
    env.ok(&[
        "set",
        "sharenfs=ro=127.0.0.2,rw=127.0.0.3,no_root_squash",
        "tank/home",
    ]);
    assert_eq!(
        remove_gone(&mut writer, 4242),
        Ok(()),
        "the first reply, replayed"
    );
    assert_eq!(remove_gone(&mut writer, 4243), Err(Nfs3Error::RoFs));
    assert_eq!(
        write_as_root(&mut writer, &file, b"again"),
        Err(Nfs3Error::RoFs)
    );
    assert_eq!(read_as_root(&mut writer, &file).unwrap(), b"written by .2");
    write_as_root(&mut reader, &file, b"written by .3").unwrap();
    assert_eq!(getattr_as_root(&mut stranger, &file), Err(Nfs3Error::Acces));
    // A snapshot's handles lead into their dataset's share: refused to whom it refuses.
    env.ok(&["snapshot", "tank/home@s"]);
    let mut snap_file = root.clone();
    for entry in [".cairn", "snapshot", "s", "a"] {
        snap_file = lookup_as_root(&mut reader, &snap_file, entry).unwrap();
    }
    assert_eq!(
        read_as_root(&mut reader, &snap_file).unwrap(),
        b"written by .3"
    );
    assert_eq!(
        getattr_as_root(&mut stranger, &snap_file),
        Err(Nfs3Error::Acces),
        "a snapshot's handle let a client without access in"
    );
    env.ok(&[
        "set",
        "sharenfs=rw=127.0.0.0/8,ro=127.0.0.2,no_root_squash",
        "tank/home",
    ]);
    assert_eq!(
        getattr_as_root(&mut stranger, &file).unwrap().size_bytes,
        13
    );
    write_as_root(&mut stranger, &file, b"written by .4").unwrap();
    assert_eq!(
        read_as_root(&mut stranger, &snap_file).unwrap(),
        b"written by .3"
    );
    assert_eq!(
        write_as_root(&mut writer, &file, b"again"),
        Err(Nfs3Error::RoFs)
    );
    assert!(mnt(&mut stranger, "/tank/home").is_ok());
    // Plain ro: every client read-only.
    env.ok(&["set", "sharenfs=ro,no_root_squash", "tank/home"]);
    for raw in [&mut writer, &mut reader, &mut stranger] {
        assert_eq!(read_as_root(raw, &file).unwrap(), b"written by .4");
        assert_eq!(write_as_root(raw, &file, b"no"), Err(Nfs3Error::RoFs));
        assert_eq!(create_as_root(raw, &root, "no"), Err(Nfs3Error::RoFs));
        assert_eq!(granted(raw, &root).unwrap() & CHANGES, 0);
    }
    // Off: STALE (not shared at all), as before.
    env.ok(&["set", "sharenfs=off", "tank/home"]);
    assert_eq!(getattr_as_root(&mut writer, &file), Err(Nfs3Error::Stale));
    assert_eq!(mnt(&mut writer, "/tank/home"), Err(MountError::NoEnt));

    for raw in [writer, reader, stranger, other_client] {
        raw.close();
    }
    server.terminate();
    env.assert_pool_check_clean();
}

/// A local address of this machine beyond loopback (from the kernel's local routing table):
/// a client bound to it reaches a server on 0.0.0.0 from an address that is not loopback.
/// A machine with none (a container with loopback only) gets one for the test: a /32 from
/// the benchmarking range 198.18.0.0/15 on `lo`, removed again when the guard drops.
fn local_address_beyond_loopback() -> (Ipv4Addr, Option<AddedAddress>) {
    if let Some(address) = routed_address_beyond_loopback() {
        return (address, None);
    }
    let added = AddedAddress::new(Ipv4Addr::new(198, 18, 0, 1));
    let address = routed_address_beyond_loopback()
        .unwrap_or_else(|| panic!("198.18.0.1 was added to lo but is not in /proc/net/fib_trie"));
    (address, Some(added))
}

fn routed_address_beyond_loopback() -> Option<Ipv4Addr> {
    let table = std::fs::read_to_string("/proc/net/fib_trie").expect("/proc/net/fib_trie");
    let mut last_address = None;
    for line in table.lines() {
        let line = line.trim();
        if let Some(address) = line.strip_prefix("|-- ") {
            last_address = address.parse::<Ipv4Addr>().ok();
        } else if line.contains("/32 host LOCAL")
            && let Some(address) = last_address
            && !address.is_loopback()
        {
            return Some(address);
        }
    }
    None
}

/// An address this test added to `lo` (`ip addr add`), deleted on drop.
struct AddedAddress(Ipv4Addr);

impl AddedAddress {
    fn new(address: Ipv4Addr) -> AddedAddress {
        let ip = tool("ip", "iproute2");
        let cidr = format!("{address}/32");
        run(&ip, &["addr", "add", &cidr, "dev", "lo"]).ok();
        AddedAddress(address)
    }
}

impl Drop for AddedAddress {
    fn drop(&mut self) {
        let cidr = format!("{}/32", self.0);
        let _ = std::process::Command::new(tool("ip", "iproute2"))
            .args(["addr", "del", &cidr, "dev", "lo"])
            .status();
    }
}

/// A raw client from `local` to the server at `remote`:`port`.
fn connect_between(local: Ipv4Addr, remote: Ipv4Addr, port: u16) -> Raw {
    use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
    use std::net::SocketAddrV4;
    let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    bind(&fd, &SocketAddrV4::new(local, 0)).unwrap();
    connect(&fd, &SocketAddrV4::new(remote, port)).unwrap();
    let stream = std::net::TcpStream::from(fd);
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(120)))
        .unwrap();
    Raw {
        stream,
        xid: 0x1000,
    }
}

#[test]
fn listening_beyond_loopback_needs_lists() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.ok(&["create", "-o", "sharenfs=no_root_squash", "tank/home"]);
    env.ok(&[
        "create",
        "-o",
        "sharenfs=rw=127.0.0.2,no_root_squash",
        "tank/listed",
    ]);
    env.ok(&["create", "tank/private"]);
    let port = free_port();
    let wide = format!("0.0.0.0:{port}");

    let refused = env.cairn(&["serve", "--nfs", &wide]);
    assert!(
        !refused.success()
            && refused.stderr.contains("refusing to serve NFS on 0.0.0.0")
            && refused.stderr.contains("tank/home")
            && !refused.stderr.contains("tank/listed")
            && !refused.stderr.contains("tank/private"),
        "a share without a list must keep NFS off the network:\n{}",
        refused.describe()
    );
    let refused = env.cairn(&["serve", "--nfs", &format!("[::]:{port}")]);
    assert!(
        !refused.success() && refused.stderr.contains("tank/home"),
        "{}",
        refused.describe()
    );

    let (beyond, _added) = local_address_beyond_loopback();
    env.ok(&[
        "set",
        &format!("sharenfs=rw=127.0.0.2:{beyond},no_root_squash"),
        "tank/home",
    ]);
    let mut server = env.serve_with_args(&["--nfs", &wide]);
    let mut far = connect_between(beyond, beyond, port);
    let root = mnt(&mut far, "/tank/home").expect("MNT from the listed address");
    let file = create_as_root(&mut far, &root, "from-afar").unwrap();
    write_as_root(&mut far, &file, b"hello").unwrap();
    assert_eq!(mnt(&mut far, "/tank/listed"), Err(MountError::Acces));
    let mut near = client(port, 3);
    assert_eq!(mnt(&mut near, "/tank/home"), Err(MountError::Acces));
    assert_eq!(getattr_as_root(&mut near, &file), Err(Nfs3Error::Acces));

    // Its lists gone while served: loopback clients only, reported once.
    env.ok(&["set", "sharenfs=no_root_squash", "tank/home"]);
    assert_eq!(getattr_as_root(&mut far, &file), Err(Nfs3Error::Acces));
    assert_eq!(write_as_root(&mut far, &file, b"no"), Err(Nfs3Error::Acces));
    assert_eq!(mnt(&mut far, "/tank/home"), Err(MountError::Acces));
    assert_eq!(getattr_as_root(&mut near, &file).unwrap().size_bytes, 5);
    write_as_root(&mut near, &file, b"near!").unwrap();
    let exports = export_list(&mut near);
    assert!(
        exports.contains(&(
            "/tank/home".to_string(),
            vec!["127.0.0.0/8".to_string(), "[::1]".to_string()]
        )),
        "{exports:?}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let report = format!("refused {beyond} on tank/home");
    while !server.stderr().contains(&report) {
        assert!(
            std::time::Instant::now() < deadline,
            "the refusal was not reported:\n{}",
            server.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        server.stderr().matches(&report).count(),
        1,
        "reported once:\n{}",
        server.logs()
    );
    assert!(
        !IpAddr::V4(beyond).is_loopback(),
        "the far client really is beyond loopback"
    );

    far.close();
    near.close();
    server.terminate();
    env.assert_pool_check_clean();
}
