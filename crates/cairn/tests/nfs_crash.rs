//! What an NFS client was told is durable survives a power cut and a SIGKILL of the server
//! (issue 35, "Durability"), and what it was not told is durable comes back when it resends.
//!
//! A real `cairn serve --nfs` runs on a pool of one emulated ssd-sata device with an emulated
//! log device, with the fault-injection switch armed (`CAIRN_INJECT_POWER_CUT_AFTER_OPS`: at a
//! seeded device operation every device loses power, unflushed writes vanish or tear, later
//! I/O fails). A raw NFSv3 client (cairn-nfs's codec, one TCP connection, one call at a time)
//! writes 4 KiB blocks of unique patterns into a few files of a shared filesystem: UNSTABLE
//! writes, FILE_SYNC and DATA_SYNC writes, and COMMITs of one file, until the server stops
//! answering. A version of a block is *durable* when a FILE_SYNC/DATA_SYNC write of it was
//! answered FILE_SYNC, or when an UNSTABLE write of it was answered with verifier V and a
//! COMMIT of its file sent after that answer returned V. The server is then SIGKILLed and
//! started again without the fault, and the client, as a real one does:
//! - resolves its old file handles (no LOOKUP): they must still name the same files;
//! - reads every block: it holds its durable version or a later one it sent, never an older
//!   one, never anything else;
//! - gets a new verifier (the restart may have lost unstable data), resends, UNSTABLE, the
//!   newest version it sent of every block not known durable, COMMITs each file (the verifier
//!   unchanged since the resend), and reads every block back as its newest version.
//!
//! Then `pool check` must be clean. One seed in four is not cut but SIGKILLed with the client
//! mid-workload. Sixteen synced writes in three are DATA_SYNC, one run in three has
//! `logbias=throughput` on a 4K-record filesystem (whole-block synchronous writes go in place),
//! one in five `sync=always` (every write answered FILE_SYNC).
//!
//! `CAIRN_NFS_CRASH_POINTS` sets the number of seeds (default 24), `CAIRN_NFS_CRASH_SEED`
//! replays one. Needs root and /dev/fuse once per seed (a FUSE mount gives the filesystem's
//! root to the test's user; NFS squashes root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use cairn_nfs::mount::{MountReply, decode_mount_reply};
use cairn_nfs::nfs3::*;
use cairn_nfs::record::read_record;
use cairn_nfs::rpc::{
    AuthSys, CallHeader, Credential, MachineName, OpaqueAuth, PROGRAM_MOUNT, PROGRAM_NFS,
    ReplyHeader,
};
use cairn_nfs::{Decoder, Encoder, XdrDecode, XdrEncode};
use nbd_common::*;
use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

/// The user the client acts as (root would be squashed to nobody).
const USER: u32 = 1000;
const BLOCK: usize = 4096;
const FILES: usize = 4;
const FILE_BLOCKS: usize = 24;
/// Calls a run makes at most: far more than a cut point needs.
const CALLS_MAX: usize = 5000;

/// The bytes of version `tag` of a block (tag 0: zeros, what the files start with).
fn pattern(tag: u64) -> Vec<u8> {
    if tag == 0 {
        return vec![0; BLOCK];
    }
    let mut rng = Rng(tag.wrapping_mul(0x9e37_79b9).wrapping_add(0x5151));
    let mut out = Vec::with_capacity(BLOCK);
    while out.len() < BLOCK {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out
}

/// The call could not be made or answered: the server is gone or failing.
#[derive(Debug)]
struct Gone(String);

/// A raw NFSv3 client on one TCP connection, one call at a time.
struct Client {
    stream: TcpStream,
    xid: u32,
}

impl Client {
    fn connect(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to NFS");
        // A server that stopped answering (its devices cut) ends the workload.
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Client {
            stream,
            xid: 0x2000,
        }
    }

    fn call(
        &mut self,
        program: u32,
        procedure: u32,
        args: &dyn XdrEncode,
    ) -> Result<Vec<u8>, Gone> {
        self.xid += 1;
        let mut enc = Encoder::for_record();
        enc.put(&CallHeader {
            xid: self.xid,
            program,
            version: 3,
            procedure,
            credential: Credential::Sys(AuthSys {
                stamp: 1,
                machine_name: MachineName::new(&b"crash-test"[..]).unwrap(),
                uid: USER,
                gid: USER,
                gids: Vec::new(),
            }),
            verifier: OpaqueAuth::none(),
        });
        args.encode(&mut enc);
        let record = enc
            .into_record()
            .map_err(|e| Gone(format!("encode: {e:?}")))?;
        self.stream
            .write_all(&record)
            .map_err(|e| Gone(format!("send: {e}")))?;
        let reply = read_record(&mut self.stream, 4 << 20)
            .map_err(|e| Gone(format!("receive: {e:?}")))?
            .ok_or_else(|| Gone("connection closed".into()))?;
        let mut dec = Decoder::new(&reply);
        let header = ReplyHeader::decode(&mut dec).map_err(|e| Gone(format!("header: {e:?}")))?;
        if header != ReplyHeader::success(self.xid) {
            return Err(Gone(format!("RPC reply {header:?}")));
        }
        Ok(dec.rest().to_vec())
    }

    fn nfs(&mut self, procedure: Nfs3Proc, args: &dyn XdrEncode) -> Result<Nfs3Reply, Gone> {
        let results = self.call(PROGRAM_NFS, procedure.as_u32(), args)?;
        decode_reply(procedure.as_u32(), &results, 2 << 20)
            .map_err(|e| Gone(format!("{procedure:?} results: {e:?}")))
    }

    fn mount(&mut self, path: &str) -> FileHandle {
        let args = cairn_nfs::mount::DirPath::new(path.as_bytes().to_vec()).unwrap();
        let results = self.call(PROGRAM_MOUNT, 1, &args).expect("MNT");
        match decode_mount_reply(1, &results).unwrap() {
            MountReply::Mnt(Ok(ok)) => ok.handle,
            other => panic!("MNT {path}: {other:?}"),
        }
    }

    fn lookup(&mut self, dir: &FileHandle, name: &str) -> FileHandle {
        let args = DirOpArgs3 {
            dir: dir.clone(),
            name: Filename::new(name.as_bytes().to_vec()).unwrap(),
        };
        match self.nfs(Nfs3Proc::Lookup, &args).expect("LOOKUP") {
            Nfs3Reply::Lookup(Outcome::Ok(ok)) => ok.object,
            other => panic!("LOOKUP {name}: {other:?}"),
        }
    }

    fn write(
        &mut self,
        file: &FileHandle,
        block: usize,
        data: Vec<u8>,
        stable: StableHow,
    ) -> Result<WriteOk, Gone> {
        let args = WriteArgs {
            file: file.clone(),
            offset_bytes: (block * BLOCK) as u64,
            stable,
            data,
        };
        match self.nfs(Nfs3Proc::Write, &args)? {
            Nfs3Reply::Write(Outcome::Ok(ok)) if ok.count_bytes as usize == BLOCK => Ok(ok),
            Nfs3Reply::Write(Outcome::Fail(err, _)) => Err(Gone(format!("WRITE: {err:?}"))),
            other => Err(Gone(format!("WRITE: {other:?}"))),
        }
    }

    fn commit(&mut self, file: &FileHandle) -> Result<WriteVerf, Gone> {
        let args = RangeArgs {
            file: file.clone(),
            offset_bytes: 0,
            count_bytes: 0,
        };
        match self.nfs(Nfs3Proc::Commit, &args)? {
            Nfs3Reply::Commit(Outcome::Ok(ok)) => Ok(ok.verf),
            Nfs3Reply::Commit(Outcome::Fail(err, _)) => Err(Gone(format!("COMMIT: {err:?}"))),
            other => Err(Gone(format!("COMMIT: {other:?}"))),
        }
    }

    fn read_block(&mut self, file: &FileHandle, block: usize) -> Vec<u8> {
        let args = RangeArgs {
            file: file.clone(),
            offset_bytes: (block * BLOCK) as u64,
            count_bytes: BLOCK as u32,
        };
        match self.nfs(Nfs3Proc::Read, &args).expect("READ") {
            Nfs3Reply::Read(Outcome::Ok(ok)) => ok.data,
            other => panic!("READ of block {block}: {other:?}"),
        }
    }
}

/// What the client sent and was told, per file and block.
struct Model {
    /// The tags of every version sent, oldest first (index 0: the zeros the file began with).
    sent: Vec<Vec<Vec<u64>>>,
    /// The index of the newest version known durable.
    durable: Vec<Vec<usize>>,
    /// Per file, the UNSTABLE writes answered since its last COMMIT: (block, version, verifier).
    unstable: Vec<Vec<(usize, usize, WriteVerf)>>,
    /// The verifier the server last gave.
    verifier: Option<WriteVerf>,
}

impl Model {
    fn new() -> Model {
        Model {
            sent: vec![vec![vec![0]; FILE_BLOCKS]; FILES],
            durable: vec![vec![0; FILE_BLOCKS]; FILES],
            unstable: vec![Vec::new(); FILES],
            verifier: None,
        }
    }
}

/// How a run's workload ends.
#[derive(Clone, Copy, Debug)]
enum Plan {
    UntilCut,
    StopAfter(usize),
}

/// Writes and commits until the plan ends it or the server fails; returns how it ended.
fn workload(
    client: &mut Client,
    handles: &[FileHandle],
    model: &mut Model,
    seed: u64,
    plan: Plan,
) -> String {
    let mut rng = Rng(seed ^ 0x6e66_7321);
    let mut next_tag = (seed << 20) | 1;
    for call in 0..CALLS_MAX {
        if let Plan::StopAfter(calls) = plan
            && call == calls
        {
            return format!("stopped after {call} calls for a SIGKILL");
        }
        let file = rng.below(FILES as u64) as usize;
        let roll = rng.below(16);
        if roll < 3 {
            // COMMIT: the UNSTABLE writes answered before it, with its verifier, are durable.
            let answered = std::mem::take(&mut model.unstable[file]);
            match client.commit(&handles[file]) {
                Ok(verf) => {
                    model.verifier = Some(verf);
                    for (block, version, write_verf) in answered {
                        if write_verf == verf {
                            let durable = &mut model.durable[file][block];
                            *durable = (*durable).max(version);
                        }
                    }
                }
                Err(Gone(why)) => return format!("server failed at call {call}: {why}"),
            }
            continue;
        }
        let block = rng.below(FILE_BLOCKS as u64) as usize;
        let stable = match roll {
            3..=5 => StableHow::FileSync,
            6 => StableHow::DataSync,
            _ => StableHow::Unstable,
        };
        let tag = next_tag;
        next_tag += 1;
        model.sent[file][block].push(tag);
        let version = model.sent[file][block].len() - 1;
        match client.write(&handles[file], block, pattern(tag), stable) {
            Ok(ok) => {
                model.verifier = Some(ok.verf);
                if ok.committed == StableHow::Unstable {
                    model.unstable[file].push((block, version, ok.verf));
                } else {
                    let durable = &mut model.durable[file][block];
                    *durable = (*durable).max(version);
                }
            }
            Err(Gone(why)) => return format!("server failed at call {call}: {why}"),
        }
    }
    "workload completed".into()
}

/// A pool with a log device and filesystem `tank/fs` (`sharenfs=on`, `properties`) whose root
/// belongs to `USER`, holding `FILES` files of `FILE_BLOCKS` zero blocks.
fn create_pool(env: &Env, properties: &[&str]) {
    let d0 = format!("emu:ssd-sata:{}", env.dev("d0.img"));
    let slog = format!("emu:ssd-sata:{}", env.dev("slog.img"));
    env.ok(&[
        "pool", "create", "--size", "256M", "tank", &d0, "log", &slog,
    ]);
    let mut create = vec!["create", "-o", "sharenfs=on"];
    for property in properties {
        create.extend(["-o", property]);
    }
    create.push("tank/fs");
    env.ok(&create);
    let mut server = env.serve();
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    for i in 0..FILES {
        let path = at.join(format!("f{i}"));
        std::fs::write(&path, vec![0u8; FILE_BLOCKS * BLOCK]).unwrap();
        std::os::unix::fs::chown(&path, Some(USER), Some(USER)).unwrap();
    }
    std::os::unix::fs::chown(&at, Some(USER), Some(USER)).unwrap();
    env.ok(&["unmount", "tank/fs"]);
    server.terminate();
}

/// The version index of `data` among the block's sent versions, if it is one of them.
fn version_of(sent: &[u64], data: &[u8]) -> Option<usize> {
    sent.iter().rposition(|&tag| pattern(tag) == data)
}

fn run_seed(seed: u64) -> bool {
    let _heavy = heavy();
    let env = Env::new();
    let mut properties = Vec::new();
    if seed % 3 == 1 {
        properties.extend(["recordsize=4K", "logbias=throughput"]);
    }
    if seed % 5 == 2 {
        properties.push("sync=always");
    }
    create_pool(&env, &properties);
    let port = free_port();
    let nfs_args = ["--nfs".to_string(), format!("127.0.0.1:{port}")];
    let nfs_args: Vec<&str> = nfs_args.iter().map(String::as_str).collect();
    let mut rng = Rng(seed ^ 0xc0ffee);
    // The server's import and first syncs take a few dozen device operations; cut after.
    let trip_after = if seed % 4 == 3 {
        None
    } else {
        Some(60 + rng.below(400))
    };
    let label = format!("seed {seed} ({properties:?}, power cut after {trip_after:?} device ops)");
    let mut vars = vec![("CAIRN_INJECT_SEED", seed.to_string())];
    if let Some(ops) = trip_after {
        vars.push(("CAIRN_INJECT_POWER_CUT_AFTER_OPS", ops.to_string()));
    }

    let mut server = env.serve_with(&vars, &nfs_args);
    let mut client = Client::connect(port);
    let root = client.mount("/tank/fs");
    let handles: Vec<FileHandle> = (0..FILES)
        .map(|i| client.lookup(&root, &format!("f{i}")))
        .collect();
    let mut model = Model::new();
    let plan = match trip_after {
        Some(_) => Plan::UntilCut,
        None => Plan::StopAfter(50 + rng.below(400) as usize),
    };
    let ending = workload(&mut client, &handles, &mut model, seed, plan);
    let cut = server
        .stderr()
        .lines()
        .find(|line| line.contains("fault injection: power cut at operation"))
        .map(str::to_string);
    eprintln!(
        "{label}: {ending}; {}",
        cut.as_deref().unwrap_or("no power cut")
    );
    match trip_after {
        Some(_) => assert!(
            cut.is_some() && ending.starts_with("server failed"),
            "{label}: the power cut did not happen mid-workload ({ending})\n{}",
            server.logs()
        ),
        None => assert!(ending.starts_with("stopped"), "{label}: {ending}"),
    }
    server.kill();
    drop(client);
    let old_verifier = model
        .verifier
        .expect("the server answered a WRITE or COMMIT");

    // Recovery: the old handles, every block durable or later, a new verifier.
    let mut server = env.serve_with_args(&nfs_args);
    let mut client = Client::connect(port);
    let _ = client.mount("/tank/fs");
    for (file, handle) in handles.iter().enumerate() {
        for block in 0..FILE_BLOCKS {
            let data = client.read_block(handle, block);
            let sent = &model.sent[file][block];
            let durable = model.durable[file][block];
            match version_of(sent, &data) {
                Some(version) => assert!(
                    version >= durable,
                    "{label}: f{file} block {block} went back to version {version} of {}, \
                     though version {durable} was acknowledged durable",
                    sent.len() - 1
                ),
                None => panic!(
                    "{label}: f{file} block {block} holds {} bytes that were never written there",
                    data.len()
                ),
            }
        }
    }
    let new_verifier = client
        .commit(&handles[0])
        .expect("COMMIT after the restart");
    assert_ne!(
        new_verifier, old_verifier,
        "{label}: the verifier did not change with the restart"
    );
    // The client resends what it was never told is durable; it all lands.
    for (file, handle) in handles.iter().enumerate() {
        for block in 0..FILE_BLOCKS {
            let sent = &model.sent[file][block];
            if model.durable[file][block] < sent.len() - 1 {
                let tag = *sent.last().unwrap();
                let ok = client
                    .write(handle, block, pattern(tag), StableHow::Unstable)
                    .expect("resend");
                assert_eq!(
                    ok.verf, new_verifier,
                    "{label}: verifier changed mid-resend"
                );
            }
        }
        let verf = client.commit(handle).expect("COMMIT of the resent writes");
        assert_eq!(verf, new_verifier, "{label}: verifier changed at COMMIT");
    }
    for (file, handle) in handles.iter().enumerate() {
        for block in 0..FILE_BLOCKS {
            let newest = *model.sent[file][block].last().unwrap();
            assert!(
                client.read_block(handle, block) == pattern(newest),
                "{label}: f{file} block {block} is not its newest version after the resend"
            );
        }
    }
    drop(client);
    server.terminate();
    drop(server);
    env.assert_pool_check_clean();
    trip_after.is_some()
}

#[test]
fn acknowledged_nfs_writes_survive_power_cuts_and_sigkill_and_resends_land() {
    let seeds: Vec<u64> = match std::env::var("CAIRN_NFS_CRASH_SEED") {
        Ok(seed) => vec![seed.parse().expect("CAIRN_NFS_CRASH_SEED")],
        Err(_) => {
            let points: u64 = std::env::var("CAIRN_NFS_CRASH_POINTS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(24);
            (1..=points).collect()
        }
    };
    let cuts = seeds.iter().filter(|&&seed| run_seed(seed)).count();
    eprintln!(
        "{} seeds: {cuts} power cuts, {} SIGKILLs",
        seeds.len(),
        seeds.len() - cuts
    );
    if seeds.len() >= 4 {
        assert!(cuts > 0 && cuts < seeds.len(), "both endings were run");
    }
}
