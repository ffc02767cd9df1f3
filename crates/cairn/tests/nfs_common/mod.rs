//! What NFS tests share: a pool with a shared filesystem whose root a test user owns, libnfs's
//! tools, and a small raw NFSv3 client built on cairn-nfs's codec (one TCP connection, from
//! any loopback address, so tests can be several clients). Used beside `nbd_common` (`mod
//! nbd_common; mod nfs_common;`). `nfs_libnfs.rs` uses it too.

#![allow(dead_code)]

use super::nbd_common::*;
use cairn_nfs::mount::{MountReply, decode_mount_reply};
use cairn_nfs::nfs3::*;
use cairn_nfs::record::read_record;
use cairn_nfs::rpc::{
    AuthSys, CallHeader, Credential, MachineName, OpaqueAuth, PROGRAM_MOUNT, PROGRAM_NFS,
    ReplyHeader,
};
use cairn_nfs::{Decoder, Encoder, XdrDecode, XdrEncode};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};

/// The user the tests act as over NFS (root would be squashed to nobody).
pub const USER: u32 = 1000;

/// A pool with filesystem `tank/home` (`sharenfs=on`) whose root belongs to `USER`; the
/// server runs with NFS on `port` and `extra` arguments.
pub fn shared_home(env: &Env, port: u16, extra: &[&str]) -> Server {
    env.create_pool();
    env.ok(&["create", "-o", "sharenfs=on", "tank/home"]);
    let mut args = vec!["--nfs".to_string(), format!("127.0.0.1:{port}")];
    args.extend(extra.iter().map(|arg| (*arg).to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = env.serve_with_args(&refs);
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/home", at.to_str().unwrap()]);
    std::os::unix::fs::chown(&at, Some(USER), Some(USER)).unwrap();
    env.ok(&["unmount", "tank/home"]);
    server
}

/// A libnfs URL of `path` on the server at `port`, as `uid`.
pub fn url_as(port: u16, path: &str, uid: u32) -> String {
    format!("nfs://127.0.0.1{path}?version=3&nfsport={port}&mountport={port}&uid={uid}&gid={uid}")
}

pub fn libnfs(tool_name: &str, args: &[&str]) -> Run {
    run(&tool(tool_name, "libnfs-utils"), args)
}

pub fn sys(uid: u32) -> Credential {
    Credential::Sys(AuthSys {
        stamp: 1,
        machine_name: MachineName::new(&b"raw-test"[..]).unwrap(),
        uid,
        gid: uid,
        gids: Vec::new(),
    })
}

/// A raw NFSv3 client on one TCP connection.
pub struct Raw {
    pub stream: TcpStream,
    pub xid: u32,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        Raw::connect_from(port, Ipv4Addr::LOCALHOST)
    }

    /// Connects from loopback address `local` (any 127.x.y.z): another client to the server.
    pub fn connect_from(port: u16, local: Ipv4Addr) -> Raw {
        use rustix::net::{AddressFamily, SocketType, bind, connect, socket};
        let fd = socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
        bind(&fd, &SocketAddrV4::new(local, 0)).unwrap();
        connect(&fd, &SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)).unwrap();
        let stream = TcpStream::from(fd);
        // A reply that never comes fails the test instead of hanging it.
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .unwrap();
        Raw {
            stream,
            xid: 0x1000,
        }
    }

    /// Sends one call record with `xid`; returns the whole reply record.
    pub fn call_with_xid(
        &mut self,
        xid: u32,
        program: u32,
        procedure: u32,
        credential: Credential,
        args: &[u8],
    ) -> Vec<u8> {
        let mut enc = Encoder::for_record();
        enc.put(&CallHeader {
            xid,
            program,
            version: 3,
            procedure,
            credential,
            verifier: OpaqueAuth::none(),
        });
        let mut record = enc.into_record().unwrap();
        // The arguments go after the header; fix the record mark's length.
        record.extend_from_slice(args);
        let len = (record.len() - 4) as u32 | 0x8000_0000;
        record[..4].copy_from_slice(&len.to_be_bytes());
        self.stream.write_all(&record).unwrap();
        read_record(&mut self.stream, 4 << 20)
            .unwrap()
            .expect("a reply, not a closed connection")
    }

    /// The reply header and the results after it.
    pub fn split(reply: &[u8]) -> (ReplyHeader, Vec<u8>) {
        let mut dec = Decoder::new(reply);
        let header = ReplyHeader::decode(&mut dec).unwrap();
        (header, dec.rest().to_vec())
    }

    pub fn nfs_as(&mut self, uid: u32, procedure: Nfs3Proc, args: &dyn XdrEncode) -> Nfs3Reply {
        self.xid += 1;
        let mut enc = Encoder::new();
        args.encode(&mut enc);
        let reply = self.call_with_xid(
            self.xid,
            PROGRAM_NFS,
            procedure.as_u32(),
            sys(uid),
            &enc.into_bytes(),
        );
        let (header, results) = Raw::split(&reply);
        assert_eq!(header, ReplyHeader::success(self.xid), "{procedure:?}");
        decode_reply(procedure.as_u32(), &results, 2 << 20).unwrap()
    }

    pub fn nfs(&mut self, procedure: Nfs3Proc, args: &dyn XdrEncode) -> Nfs3Reply {
        self.nfs_as(USER, procedure, args)
    }

    pub fn mount(&mut self, path: &str) -> FileHandle {
        self.xid += 1;
        let mut enc = Encoder::new();
        enc.put(&cairn_nfs::mount::DirPath::new(path.as_bytes().to_vec()).unwrap());
        let reply = self.call_with_xid(self.xid, PROGRAM_MOUNT, 1, sys(USER), &enc.into_bytes());
        let (_, results) = Raw::split(&reply);
        match decode_mount_reply(1, &results).unwrap() {
            MountReply::Mnt(Ok(ok)) => ok.handle,
            other => panic!("MNT {path}: {other:?}"),
        }
    }

    pub fn lookup(&mut self, dir: &FileHandle, name: &str) -> Result<FileHandle, Nfs3Error> {
        let args = DirOpArgs3 {
            dir: dir.clone(),
            name: Filename::new(name.as_bytes().to_vec()).unwrap(),
        };
        match self.nfs(Nfs3Proc::Lookup, &args) {
            Nfs3Reply::Lookup(Outcome::Ok(ok)) => Ok(ok.object),
            Nfs3Reply::Lookup(Outcome::Fail(err, _)) => Err(err),
            other => panic!("{other:?}"),
        }
    }

    pub fn getattr(&mut self, handle: &FileHandle) -> Result<Fattr3, Nfs3Error> {
        match self.nfs(
            Nfs3Proc::Getattr,
            &HandleArgs {
                object: handle.clone(),
            },
        ) {
            Nfs3Reply::Getattr(Outcome::Ok(attrs)) => Ok(attrs),
            Nfs3Reply::Getattr(Outcome::Fail(err, ())) => Err(err),
            other => panic!("{other:?}"),
        }
    }

    pub fn create(&mut self, dir: &FileHandle, name: &str) -> FileHandle {
        let args = CreateArgs {
            location: DirOpArgs3 {
                dir: dir.clone(),
                name: Filename::new(name.as_bytes().to_vec()).unwrap(),
            },
            how: CreateHow::Guarded(Sattr3 {
                mode: Some(0o644),
                ..Sattr3::default()
            }),
        };
        match self.nfs(Nfs3Proc::Create, &args) {
            Nfs3Reply::Create(Outcome::Ok(ok)) => ok.object.expect("a handle"),
            other => panic!("CREATE {name}: {other:?}"),
        }
    }

    pub fn write(
        &mut self,
        file: &FileHandle,
        offset_bytes: u64,
        data: &[u8],
        stable: StableHow,
    ) -> WriteOk {
        let args = WriteArgs {
            file: file.clone(),
            offset_bytes,
            stable,
            data: data.to_vec(),
        };
        match self.nfs(Nfs3Proc::Write, &args) {
            Nfs3Reply::Write(Outcome::Ok(ok)) => ok,
            other => panic!("WRITE: {other:?}"),
        }
    }

    pub fn commit(&mut self, file: &FileHandle) -> WriteVerf {
        let args = RangeArgs {
            file: file.clone(),
            offset_bytes: 0,
            count_bytes: 0,
        };
        match self.nfs(Nfs3Proc::Commit, &args) {
            Nfs3Reply::Commit(Outcome::Ok(ok)) => ok.verf,
            other => panic!("COMMIT: {other:?}"),
        }
    }

    pub fn read(&mut self, file: &FileHandle, count_bytes: u32) -> Vec<u8> {
        let args = RangeArgs {
            file: file.clone(),
            offset_bytes: 0,
            count_bytes,
        };
        match self.nfs(Nfs3Proc::Read, &args) {
            Nfs3Reply::Read(Outcome::Ok(ok)) => ok.data,
            other => panic!("READ: {other:?}"),
        }
    }

    /// Closes its side and waits until the server has closed the connection too (so the
    /// server has finished with it).
    pub fn close(self) {
        use std::io::Read;
        let mut stream = self.stream;
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
    }
}

/// The encoded arguments of a REMOVE of `name` in `dir`.
pub fn remove_args(dir: &FileHandle, name: &str) -> Vec<u8> {
    let mut enc = Encoder::new();
    enc.put(&DirOpArgs3 {
        dir: dir.clone(),
        name: Filename::new(name.as_bytes().to_vec()).unwrap(),
    });
    enc.into_bytes()
}
