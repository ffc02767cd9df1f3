//! `cairn serve --nfs` against real NFSv3 clients (issue 35): libnfs's `nfs-cp`, `nfs-cat`
//! and `nfs-ls` (Debian `libnfs-utils`) copy files in and out of a filesystem with
//! `sharenfs=on`, and what they wrote is what the filesystem shows through its FUSE mount;
//! a small raw client built on cairn-nfs's codec checks what libnfs cannot: handles that
//! resolve after the server is killed and restarted, the write verifier (UNSTABLE's equals
//! COMMIT's, and changes with a restart), STALE for a deleted file's handle (and for its
//! object number with another generation), a retransmitted REMOVE answered with its first
//! reply, root squashed, AUTH_NONE refused, and garbage answered without stopping the server.
//! Mounting (to give the filesystem's root to a user, and to look at it) needs root and
//! /dev/fuse (CI runs as root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;
mod nfs_common;

use cairn_nfs::Encoder;
use cairn_nfs::nfs3::*;
use cairn_nfs::record::read_record;
use cairn_nfs::rpc::{
    AcceptStat, AuthStat, CallHeader, Credential, OpaqueAuth, PROGRAM_NFS, RejectStat, ReplyBody,
    ReplyHeader,
};
use nbd_common::*;
use nfs_common::*;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;

fn serve_nfs(env: &Env, port: u16) -> Server {
    env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")])
}

/// A pool with filesystem `tank/home` (`sharenfs=on`) whose root belongs to `USER`, and
/// `tank/private` (not shared); the server runs with NFS on `port`.
fn shared_home(env: &Env, port: u16) -> Server {
    env.create_pool();
    env.ok(&["create", "-o", "sharenfs=on", "tank/home"]);
    env.ok(&["create", "tank/private"]);
    let server = serve_nfs(env, port);
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/home", at.to_str().unwrap()]);
    std::os::unix::fs::chown(&at, Some(USER), Some(USER)).unwrap();
    env.ok(&["unmount", "tank/home"]);
    server
}

fn url(port: u16, path: &str) -> String {
    format!("nfs://127.0.0.1{path}?version=3&nfsport={port}&mountport={port}&uid={USER}&gid={USER}")
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
fn libnfs_copies_files_in_and_out_of_a_shared_filesystem() {
    let _heavy = heavy();
    let env = Env::new();
    let port = free_port();
    let mut server = shared_home(&env, port);
    assert!(
        server
            .stdout()
            .contains(&format!("NFSv3 on 127.0.0.1:{port}")),
        "{}",
        server.logs()
    );

    // Several MiB in (1 MiB WRITEs), back out with nfs-cat and nfs-cp.
    let big = pattern(6 * 1024 * 1024 + 4321, 1);
    let small = b"hello over nfs\n".to_vec();
    std::fs::write(env.path("big.bin"), &big).unwrap();
    std::fs::write(env.path("small.txt"), &small).unwrap();
    for name in ["big.bin", "small.txt"] {
        let local = env.path(name);
        libnfs(
            "nfs-cp",
            &[
                local.to_str().unwrap(),
                &url(port, &format!("/tank/home/{name}")),
            ],
        )
        .ok();
    }
    // Binary output: read as bytes, not through `run`'s text.
    let cat = std::process::Command::new(tool("nfs-cat", "libnfs-utils"))
        .arg(url(port, "/tank/home/big.bin"))
        .output()
        .unwrap();
    assert!(cat.status.success(), "nfs-cat: {cat:?}");
    assert!(
        cat.stdout == big,
        "nfs-cat gave {} bytes, not big.bin's",
        cat.stdout.len()
    );
    let out = env.path("out.bin");
    libnfs(
        "nfs-cp",
        &[&url(port, "/tank/home/big.bin"), out.to_str().unwrap()],
    )
    .ok();
    assert!(
        std::fs::read(&out).unwrap() == big,
        "big.bin came back different"
    );

    let listing = libnfs("nfs-ls", &[&url(port, "/tank/home")]).ok().stdout;
    assert!(
        listing.contains("big.bin") && listing.contains("small.txt"),
        "{listing}"
    );
    assert!(
        listing.contains(&big.len().to_string()),
        "big.bin's size in {listing}"
    );

    // The filesystem's own view: the same bytes, owned by the NFS user.
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/home", at.to_str().unwrap()]);
    assert!(
        std::fs::read(at.join("big.bin")).unwrap() == big,
        "FUSE sees other bytes"
    );
    assert_eq!(std::fs::read(at.join("small.txt")).unwrap(), small);
    let meta = std::fs::metadata(at.join("small.txt")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (USER, USER));
    // And what is written locally is read over NFS.
    std::fs::write(at.join("local.txt"), b"written through FUSE").unwrap();
    let cat = libnfs("nfs-cat", &[&url(port, "/tank/home/local.txt")]).ok();
    assert_eq!(cat.stdout, "written through FUSE");
    env.ok(&["unmount", "tank/home"]);

    // A filesystem that is not shared cannot be mounted, nor can one that does not exist.
    libnfs("nfs-ls", &[&url(port, "/tank/private")]).failed();
    libnfs("nfs-ls", &[&url(port, "/tank/nothing")]).failed();
    env.ok(&["set", "sharenfs=on", "tank/private"]);
    libnfs("nfs-ls", &[&url(port, "/tank/private")]).ok();

    server.terminate();
    env.assert_pool_check_clean();
}

#[test]
fn handles_verifiers_stale_handles_and_retransmissions() {
    let _heavy = heavy();
    let env = Env::new();
    let port = free_port();
    let mut server = shared_home(&env, port);
    let mut raw = Raw::connect(port);
    let root = raw.mount("/tank/home");

    // UNSTABLE: answered UNSTABLE with the verifier COMMIT then returns; FILE_SYNC: FILE_SYNC.
    let kept = raw.create(&root, "kept.bin");
    let data = pattern(100_000, 7);
    let unstable = raw.write(&kept, 0, &data, StableHow::Unstable);
    assert_eq!(unstable.committed, StableHow::Unstable);
    assert_eq!(unstable.count_bytes, data.len() as u32);
    let verifier = unstable.verf;
    assert_eq!(
        raw.commit(&kept),
        verifier,
        "COMMIT's verifier is the WRITE's"
    );
    let synced = raw.write(&kept, 100_000, b"tail", StableHow::FileSync);
    assert_eq!(synced.committed, StableHow::FileSync);

    // CREATE UNCHECKED of an existing file with a size truncates it only for a user who may
    // write it: another user gets ACCES, and the file is intact.
    let open_dir = SetattrArgs {
        object: root.clone(),
        new_attributes: Sattr3 {
            mode: Some(0o777),
            ..Sattr3::default()
        },
        guard: None,
    };
    assert!(matches!(
        raw.nfs(Nfs3Proc::Setattr, &open_dir),
        Nfs3Reply::Setattr(Outcome::Ok(_))
    ));
    let guarded = raw.create(&root, "ro.bin");
    raw.write(&guarded, 0, b"keep", StableHow::FileSync);
    let read_only = SetattrArgs {
        object: guarded.clone(),
        new_attributes: Sattr3 {
            mode: Some(0o444),
            ..Sattr3::default()
        },
        guard: None,
    };
    assert!(matches!(
        raw.nfs(Nfs3Proc::Setattr, &read_only),
        Nfs3Reply::Setattr(Outcome::Ok(_))
    ));
    let truncate = CreateArgs {
        location: DirOpArgs3 {
            dir: root.clone(),
            name: Filename::new(b"ro.bin".to_vec()).unwrap(),
        },
        how: CreateHow::Unchecked(Sattr3 {
            size_bytes: Some(0),
            ..Sattr3::default()
        }),
    };
    assert!(matches!(
        raw.nfs_as(USER + 1, Nfs3Proc::Create, &truncate),
        Nfs3Reply::Create(Outcome::Fail(Nfs3Error::Acces, _))
    ));
    assert_eq!(raw.read(&guarded, 64), b"keep");
    let closed_dir = SetattrArgs {
        new_attributes: Sattr3 {
            mode: Some(0o755),
            ..Sattr3::default()
        },
        ..open_dir
    };
    assert!(matches!(
        raw.nfs(Nfs3Proc::Setattr, &closed_dir),
        Nfs3Reply::Setattr(Outcome::Ok(_))
    ));
    assert_eq!(synced.verf, verifier);
    assert_eq!(
        raw.lookup(&root, "kept.bin").unwrap(),
        kept,
        "LOOKUP gives the same handle"
    );

    // Root is squashed: it may not create in a directory only its owner may write.
    let as_root = CreateArgs {
        location: DirOpArgs3 {
            dir: root.clone(),
            name: Filename::new(&b"by-root"[..]).unwrap(),
        },
        how: CreateHow::Unchecked(Sattr3::default()),
    };
    match raw.nfs_as(0, Nfs3Proc::Create, &as_root) {
        Nfs3Reply::Create(Outcome::Fail(Nfs3Error::Acces, _)) => {}
        other => panic!("root was not squashed: {other:?}"),
    }

    // A retransmitted REMOVE (same xid, same arguments) gets the first reply, not NOENT.
    let doomed = raw.create(&root, "doomed.txt");
    let args = remove_args(&root, "doomed.txt");
    let xid = 0x7777;
    let first = raw.call_with_xid(
        xid,
        PROGRAM_NFS,
        Nfs3Proc::Remove.as_u32(),
        sys(USER),
        &args,
    );
    let again = raw.call_with_xid(
        xid,
        PROGRAM_NFS,
        Nfs3Proc::Remove.as_u32(),
        sys(USER),
        &args,
    );
    assert_eq!(first, again, "the retransmission was answered differently");
    let (_, results) = Raw::split(&first);
    assert!(
        matches!(
            decode_reply(Nfs3Proc::Remove.as_u32(), &results, 0).unwrap(),
            Nfs3Reply::Remove(Outcome::Ok(_))
        ),
        "the first REMOVE failed"
    );
    // A new call (new xid) is done again: the name is gone now.
    let fresh = raw.call_with_xid(
        xid + 1,
        PROGRAM_NFS,
        Nfs3Proc::Remove.as_u32(),
        sys(USER),
        &args,
    );
    let (_, results) = Raw::split(&fresh);
    assert!(matches!(
        decode_reply(Nfs3Proc::Remove.as_u32(), &results, 0).unwrap(),
        Nfs3Reply::Remove(Outcome::Fail(Nfs3Error::NoEnt, _))
    ));
    // The deleted file's handle is STALE; so is its object number with another generation.
    assert_eq!(raw.getattr(&doomed), Err(Nfs3Error::Stale));
    let mut other_generation = kept.as_bytes().to_vec();
    other_generation[35] ^= 1;
    let other_generation = FileHandle::new(other_generation).unwrap();
    assert_eq!(raw.getattr(&other_generation), Err(Nfs3Error::Stale));
    assert_eq!(
        raw.getattr(&FileHandle::new(&b"not ours"[..]).unwrap()),
        Err(Nfs3Error::BadHandle)
    );

    // AUTH_NONE is too weak for anything but NULL.
    let mut enc = Encoder::new();
    enc.put(&HandleArgs {
        object: root.clone(),
    });
    let args = enc.into_bytes();
    let reply = raw.call_with_xid(
        0x9000,
        PROGRAM_NFS,
        Nfs3Proc::Getattr.as_u32(),
        Credential::None,
        &args,
    );
    assert_eq!(
        Raw::split(&reply).0,
        ReplyHeader::denied(0x9000, RejectStat::AuthError(AuthStat::TooWeak))
    );
    let reply = raw.call_with_xid(
        0x9001,
        PROGRAM_NFS,
        Nfs3Proc::Null.as_u32(),
        Credential::None,
        &[],
    );
    assert_eq!(Raw::split(&reply).0, ReplyHeader::success(0x9001));
    // Garbage arguments: GARBAGE_ARGS, and the connection keeps serving.
    let reply = raw.call_with_xid(
        0x9002,
        PROGRAM_NFS,
        Nfs3Proc::Getattr.as_u32(),
        sys(USER),
        &[0xff; 7],
    );
    match Raw::split(&reply).0.body {
        ReplyBody::Accepted { stat, .. } => assert_eq!(stat, AcceptStat::GarbageArgs),
        other => panic!("{other:?}"),
    }
    assert!(raw.getattr(&root).is_ok());

    // An UNSTABLE write never committed, then the server is killed and started again.
    let pending = raw.create(&root, "pending.bin");
    let before_kill = raw.write(&pending, 0, b"maybe lost", StableHow::Unstable);
    assert_eq!(before_kill.verf, verifier);
    drop(raw);
    server.kill();
    let mut server = serve_nfs(&env, port);
    let mut raw = Raw::connect(port);

    // Handles from before the restart resolve, to the same contents.
    let attrs = raw
        .getattr(&kept)
        .expect("kept.bin's handle after a restart");
    assert_eq!(attrs.size_bytes, 100_004);
    let mut expected = data.clone();
    expected.extend_from_slice(b"tail");
    assert!(
        raw.read(&kept, 200_000) == expected,
        "kept.bin's contents after a restart"
    );
    assert!(raw.getattr(&root).is_ok());
    assert_eq!(raw.getattr(&doomed), Err(Nfs3Error::Stale));
    // The verifier changed: a client resends what it had not seen committed.
    let after = raw.commit(&kept);
    assert_ne!(after, verifier, "the verifier survived a restart");
    let resent = raw.write(&pending, 0, b"maybe lost", StableHow::Unstable);
    assert_eq!(resent.verf, after);
    assert_eq!(raw.commit(&pending), after);

    drop(raw);
    server.terminate();
    env.assert_pool_check_clean();
}

impl Raw {
    /// One READDIR from `cookie` of at most `count_bytes`: (name, cookie) pairs and eof.
    fn readdir(
        &mut self,
        dir: &FileHandle,
        cookie: u64,
        count_bytes: u32,
    ) -> (Vec<(String, u64)>, bool) {
        let args = ReaddirArgs {
            dir: dir.clone(),
            cookie,
            cookieverf: [0; 8],
            count_bytes,
        };
        match self.nfs(Nfs3Proc::Readdir, &args) {
            Nfs3Reply::Readdir(Outcome::Ok(ok)) => (
                ok.entries
                    .into_iter()
                    .map(|e| {
                        (
                            String::from_utf8(e.name.as_bytes().to_vec()).unwrap(),
                            e.cookie,
                        )
                    })
                    .collect(),
                ok.eof,
            ),
            other => panic!("READDIR: {other:?}"),
        }
    }

    /// Every name from `cookie` on, in READDIRs of `count_bytes`.
    fn list_from(&mut self, dir: &FileHandle, mut cookie: u64, count_bytes: u32) -> Vec<String> {
        let mut names = Vec::new();
        loop {
            let (entries, eof) = self.readdir(dir, cookie, count_bytes);
            if let Some((_, last)) = entries.last() {
                cookie = *last;
            }
            names.extend(entries.into_iter().map(|(name, _)| name));
            if eof {
                return names;
            }
        }
    }
}

#[test]
fn stability_follows_sync_and_listings_survive_restarts() {
    let _heavy = heavy();
    let env = Env::new();
    let port = free_port();
    let server = shared_home(&env, port);

    // A directory of many entries, made through the filesystem's own view.
    let at = env.path("mnt");
    let cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/home", at.to_str().unwrap()]);
    std::fs::create_dir(at.join("many")).unwrap();
    let mut expected: Vec<String> = (0..2500).map(|i| format!("entry-{i:05}")).collect();
    for name in &expected {
        std::fs::write(at.join("many").join(name), b"").unwrap();
    }
    std::os::unix::fs::chown(at.join("many"), Some(USER), Some(USER)).unwrap();
    env.ok(&["unmount", "tank/home"]);
    drop(cleanup);
    expected.sort();

    // libnfs lists them all (several READDIRPLUS calls).
    let listing = libnfs("nfs-ls", &[&url(port, "/tank/home/many")])
        .ok()
        .stdout;
    let mut listed: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .filter(|name| name.starts_with("entry-"))
        .collect();
    listed.sort_unstable();
    assert_eq!(listed, expected, "nfs-ls's listing");

    // A raw READDIR in small pieces gives each name once; from a cookie taken before a
    // restart, the listing goes on after it.
    let mut raw = Raw::connect(port);
    let root = raw.mount("/tank/home");
    let many = raw.lookup(&root, "many").unwrap();
    let mut all = raw.list_from(&many, 0, 4096);
    all.retain(|name| name != "." && name != "..");
    all.sort();
    assert_eq!(all, expected, "READDIR in 4 KiB pieces");
    let (first, eof) = raw.readdir(&many, 0, 4096);
    assert!(!eof);
    let (_, cookie) = *first.last().unwrap();
    let seen: Vec<String> = first.into_iter().map(|(name, _)| name).collect();

    // sync=always: every write is FILE_SYNC; sync=disabled: FILE_SYNC too, without waiting.
    let file = raw.create(&root, "sync.bin");
    env.ok(&["set", "sync=always", "tank/home"]);
    assert_eq!(
        raw.write(&file, 0, b"always", StableHow::Unstable)
            .committed,
        StableHow::FileSync
    );
    env.ok(&["set", "sync=disabled", "tank/home"]);
    assert_eq!(
        raw.write(&file, 0, b"disabled", StableHow::Unstable)
            .committed,
        StableHow::FileSync
    );
    env.ok(&["set", "sync=standard", "tank/home"]);
    assert_eq!(
        raw.write(&file, 0, b"standard", StableHow::Unstable)
            .committed,
        StableHow::Unstable
    );

    // Calls sent without waiting (as a kernel client pipelines them) are all answered, each
    // reply matched to its call by xid.
    let mut enc = Encoder::new();
    enc.put(&RangeArgs {
        file: file.clone(),
        offset_bytes: 0,
        count_bytes: 4096,
    });
    let read_args = enc.into_bytes();
    let mut batch = Vec::new();
    for xid in 0x5000..0x5020u32 {
        let mut enc = Encoder::for_record();
        enc.put(&CallHeader {
            xid,
            program: PROGRAM_NFS,
            version: 3,
            procedure: Nfs3Proc::Read.as_u32(),
            credential: sys(USER),
            verifier: OpaqueAuth::none(),
        });
        let mut record = enc.into_record().unwrap();
        record.extend_from_slice(&read_args);
        let len = (record.len() - 4) as u32 | 0x8000_0000;
        record[..4].copy_from_slice(&len.to_be_bytes());
        batch.extend_from_slice(&record);
    }
    raw.stream.write_all(&batch).unwrap();
    let mut answered: Vec<u32> = (0..0x20)
        .map(|_| {
            let reply = read_record(&mut raw.stream, 4 << 20).unwrap().unwrap();
            let (header, results) = Raw::split(&reply);
            match decode_reply(Nfs3Proc::Read.as_u32(), &results, 1 << 20).unwrap() {
                Nfs3Reply::Read(Outcome::Ok(ok)) => assert_eq!(ok.data, b"standard"),
                other => panic!("{other:?}"),
            }
            header.xid
        })
        .collect();
    answered.sort_unstable();
    assert_eq!(answered, (0x5000..0x5020).collect::<Vec<u32>>());

    // A record larger than any call closes that connection; the server serves the next one.
    let mut hostile = TcpStream::connect(("127.0.0.1", port)).unwrap();
    hostile
        .write_all(&(0x8000_0000u32 | 100 << 20).to_be_bytes())
        .unwrap();
    hostile.write_all(&[0; 4096]).unwrap();
    let mut byte = [0u8; 1];
    use std::io::Read;
    assert_eq!(
        hostile.read(&mut byte).unwrap_or(0),
        0,
        "an oversized record must close the connection"
    );

    drop(raw);
    let mut server = server;
    server.terminate();
    let mut server = serve_nfs(&env, port);
    let mut raw = Raw::connect(port);
    let mut rest = raw.list_from(&many, cookie, 8192);
    rest.extend(seen);
    rest.retain(|name| name != "." && name != "..");
    rest.sort();
    assert_eq!(rest, expected, "a cookie from before the restart");

    drop(raw);
    server.terminate();
    env.assert_pool_check_clean();
}

/// Root is squashed per export: to nobody where `sharenfs` is `on`, kept as root where it
/// says `no_root_squash` (what a client that administers its files, such as pjdfstest in
/// `guest_nfs.rs`, needs); options the server does not carry out are refused by name.
#[test]
fn root_is_squashed_unless_the_share_says_no_root_squash() {
    let _heavy = heavy();
    let env = Env::new();
    let port = free_port();
    let server = shared_home(&env, port);
    // tank/open: shared without root squash, its root given to USER like tank/home's.
    env.ok(&["create", "-o", "sharenfs=rw,no_root_squash", "tank/open"]);
    let at = env.path("mnt-open");
    let cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/open", at.to_str().unwrap()]);
    std::os::unix::fs::chown(&at, Some(USER), Some(USER)).unwrap();
    env.ok(&["unmount", "tank/open"]);
    drop(cleanup);
    assert_eq!(
        env.ok(&["get", "-H", "-o", "value", "sharenfs", "tank/open"])
            .trim(),
        "rw,no_root_squash"
    );
    for refused in ["sec=krb5", "rw=files.example", "root_squash,no_root_squash"] {
        let run = env.cairn(&["set", &format!("sharenfs={refused}"), "tank/open"]);
        assert!(
            !run.success() && run.stderr.contains("sharenfs"),
            "sharenfs={refused}: {}",
            run.describe()
        );
    }

    let mut raw = Raw::connect(port);
    let squashed_root = raw.mount("/tank/home");
    let open_root = raw.mount("/tank/open");
    let create_as_root = |dir: &FileHandle, name: &str| CreateArgs {
        location: DirOpArgs3 {
            dir: dir.clone(),
            name: Filename::new(name.as_bytes().to_vec()).unwrap(),
        },
        how: CreateHow::Guarded(Sattr3 {
            mode: Some(0o600),
            ..Sattr3::default()
        }),
    };
    match raw.nfs_as(
        0,
        Nfs3Proc::Create,
        &create_as_root(&squashed_root, "by-root"),
    ) {
        Nfs3Reply::Create(Outcome::Fail(Nfs3Error::Acces, _)) => {}
        other => panic!("root was not squashed in tank/home: {other:?}"),
    }
    let made = match raw.nfs_as(0, Nfs3Proc::Create, &create_as_root(&open_root, "by-root")) {
        Nfs3Reply::Create(Outcome::Ok(ok)) => ok.object.expect("a handle"),
        other => panic!("root was squashed in tank/open: {other:?}"),
    };
    let attrs = raw.getattr(&made).unwrap();
    assert_eq!((attrs.uid, attrs.gid), (0, 0), "the file is root's");
    // Root gives it away (chown needs privilege), as a local root could.
    let give = SetattrArgs {
        object: made.clone(),
        new_attributes: Sattr3 {
            uid: Some(USER),
            ..Sattr3::default()
        },
        guard: None,
    };
    assert!(matches!(
        raw.nfs_as(0, Nfs3Proc::Setattr, &give),
        Nfs3Reply::Setattr(Outcome::Ok(_))
    ));
    assert_eq!(raw.getattr(&made).unwrap().uid, USER);

    // Back to the default: root is nobody again there, at once.
    env.ok(&["set", "sharenfs=on", "tank/open"]);
    match raw.nfs_as(0, Nfs3Proc::Create, &create_as_root(&open_root, "again")) {
        Nfs3Reply::Create(Outcome::Fail(Nfs3Error::Acces, _)) => {}
        other => panic!("root was not squashed after sharenfs=on: {other:?}"),
    }

    drop(raw);
    let mut server = server;
    server.terminate();
    env.assert_pool_check_clean();
}
