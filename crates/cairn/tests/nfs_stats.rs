//! NFS observability (issue 35) from the outside: raw NFSv3 clients (cairn-nfs's codec) from
//! two loopback addresses drive known traffic against `cairn serve --nfs --http`, and
//! `cairn stat nfs -j` must count it exactly — calls by procedure, bytes, WRITEs by stability
//! asked and answered, what each COMMIT carried, stale handles, duplicate-cache replies, auth
//! refusals, garbage and unsupported calls, connections, a row per client — as must `-H`,
//! the table, and `/metrics` (the counters moved by exactly the traffic between two scrapes).
//! Then 70 more clients come and go: at most `CLIENTS_MAX` (64) are kept, the least recently
//! active idle ones dropped first, and the totals still count every call.
//!
//! `cairn up` shares `cairn/fs0` over NFS and prints the mount command; the export it names
//! lists with libnfs's `nfs-ls` at the port it names.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;
mod nfs_common;

use cairn_nfs::nfs3::*;
use cairn_nfs::rpc::{Credential, PROGRAM_NFS};
use cairn_nfs::{Encoder, XdrEncode};
use nbd_common::*;
use nfs_common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

/// `cairn stat nfs -j`'s `nfs` object.
fn stat_nfs(env: &Env) -> Value {
    let out = env.ok(&["stat", "nfs", "-j"]);
    let value: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        value["output_version"]["command"], "cairn stat nfs",
        "{value}"
    );
    value["nfs"].clone()
}

/// The row of procedure `procedure` of `program`.
fn procedure(nfs: &Value, program: &str, procedure: &str) -> Value {
    nfs["procedures"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|row| row["program"] == program && row["procedure"] == procedure)
        })
        .cloned()
        .unwrap_or_else(|| panic!("no {program}.{procedure} in {nfs}"))
}

fn writes(nfs: &Value, asked: &str, answered: &str) -> (u64, u64) {
    let row = nfs["writes"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|row| row["asked"] == asked && row["answered"] == answered)
        })
        .cloned()
        .unwrap_or_else(|| panic!("no writes row {asked}/{answered} in {nfs}"));
    (
        row["count"].as_u64().unwrap(),
        row["bytes"].as_u64().unwrap(),
    )
}

fn client(nfs: &Value, address: &str) -> Option<Value> {
    nfs["clients"]
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["address"] == address))
        .cloned()
}

/// `GET /metrics` over HTTP/1.0: the body.
fn metrics(address: &str) -> String {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"),
        "{head}"
    );
    body.to_string()
}

/// The value of series `series` (name and labels exactly) in an exposition; 0 when absent.
fn series(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .map_or(0.0, |value| value.parse().unwrap())
}

/// The `--http` address the server announced (`metrics on http://ADDR/metrics`).
fn http_address(server: &Server) -> String {
    let out = server.stdout();
    let rest = out
        .split("metrics on http://")
        .nth(1)
        .unwrap_or_else(|| panic!("no metrics address\n{}", server.logs()));
    rest.split_once("/metrics").unwrap().0.to_string()
}

/// Encoded GETATTR arguments of `handle`.
fn getattr_args(handle: &FileHandle) -> Vec<u8> {
    let mut enc = Encoder::new();
    HandleArgs {
        object: handle.clone(),
    }
    .encode(&mut enc);
    enc.into_bytes()
}

#[test]
fn stat_nfs_and_metrics_count_known_traffic_exactly() {
    let _heavy = heavy();
    let env = Env::new();
    let port = free_port();
    let mut server = shared_home(&env, port, &["--http", "127.0.0.1:0"]);
    let http = http_address(&server);
    let before = metrics(&http);
    let idle = stat_nfs(&env);
    assert_eq!(
        (idle["served"].as_bool(), idle["serving"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(procedure(&idle, "nfs", "write")["calls"], 0, "{idle}");

    // Client A (127.0.0.1): a file written with every stability, committed twice, read.
    let mut a = Raw::connect(port);
    let root = a.mount("/tank/home");
    let file = a.create(&root, "counted.bin");
    let mut offset = 0u64;
    for (len, stable) in [
        (1000, StableHow::Unstable),
        (2000, StableHow::Unstable),
        (3000, StableHow::Unstable),
        (500, StableHow::FileSync),
        (500, StableHow::FileSync),
        (100, StableHow::DataSync),
    ] {
        let ok = a.write(&file, offset, &vec![7u8; len], stable);
        assert_eq!(ok.count_bytes as usize, len);
        offset += len as u64;
    }
    a.commit(&file);
    a.commit(&file);
    assert_eq!(a.read(&file, 4096).len(), 4096);
    // A REMOVE retransmitted (answered from the cache), then the removed file's handle: STALE.
    let args = remove_args(&root, "counted.bin");
    let remove = Nfs3Proc::Remove.as_u32();
    let first = a.call_with_xid(0x7777, PROGRAM_NFS, remove, sys(USER), &args);
    let again = a.call_with_xid(0x7777, PROGRAM_NFS, remove, sys(USER), &args);
    assert_eq!(first, again);
    assert_eq!(a.getattr(&file), Err(Nfs3Error::Stale));
    // Refused: AUTH_NONE; garbage arguments; a procedure NFSv3 does not have.
    let getattr = Nfs3Proc::Getattr.as_u32();
    a.call_with_xid(
        0x9000,
        PROGRAM_NFS,
        getattr,
        Credential::None,
        &getattr_args(&root),
    );
    a.call_with_xid(0x9001, PROGRAM_NFS, getattr, sys(USER), &[0xff; 7]);
    a.call_with_xid(0x9002, PROGRAM_NFS, 99, sys(USER), &[]);

    // Client B (127.0.0.2): NULL and MNT.
    let mut b = Raw::connect_from(port, Ipv4Addr::new(127, 0, 0, 2));
    let null = b.call_with_xid(1, PROGRAM_NFS, 0, sys(USER), &[]);
    assert!(!null.is_empty());
    b.mount("/tank/home");

    let nfs = stat_nfs(&env);
    let calls = |program: &str, name: &str| procedure(&nfs, program, name)["calls"].as_u64();
    let written_bytes = 1000 + 2000 + 3000 + 500 + 500 + 100;
    let write = procedure(&nfs, "nfs", "write");
    assert_eq!(write["calls"], 6, "{nfs}");
    assert_eq!(write["bytes"], written_bytes, "{nfs}");
    assert_eq!(write["errors"], 0, "{nfs}");
    assert!(
        write["latency_p50_us"].as_u64() > Some(0)
            && write["latency_p50_us"].as_u64() <= write["latency_p99_us"].as_u64()
            && write["latency_p99_us"].as_u64() <= write["latency_max_us"].as_u64(),
        "{write}"
    );
    assert_eq!(procedure(&nfs, "nfs", "read")["bytes"], 4096);
    assert_eq!(nfs["read_bytes"], 4096);
    assert_eq!(nfs["written_bytes"], written_bytes);
    assert_eq!(calls("nfs", "create"), Some(1));
    assert_eq!(calls("nfs", "commit"), Some(2));
    assert_eq!(
        calls("nfs", "remove"),
        Some(2),
        "the retransmission is a call too"
    );
    assert_eq!(
        calls("nfs", "getattr"),
        Some(1),
        "only the one that decoded"
    );
    assert_eq!(procedure(&nfs, "nfs", "getattr")["errors"], 1, "STALE");
    assert_eq!(calls("nfs", "null"), Some(1));
    assert_eq!(calls("mount", "mnt"), Some(2));
    assert_eq!(calls("nfs", "lookup"), Some(0));
    // The same calls count in their filesystem's own figures, as a FUSE mount's do (`stat
    // fs`, `pool iostat`), though nothing mounts it: the retransmitted REMOVE, answered from
    // the cache, was not done again.
    let stat = env.ok(&["stat", "fs", "-H", "-p"]);
    let field = |name: &str| -> u64 {
        stat.lines()
            .find_map(|line| line.strip_prefix(&format!("tank/home.{name}\t")))
            .unwrap_or_else(|| panic!("{name} in stat fs:\n{stat}"))
            .parse()
            .unwrap()
    };
    assert_eq!(field("write.count"), 6, "{stat}");
    assert_eq!(field("write.bytes"), written_bytes, "{stat}");
    assert_eq!(field("read.bytes"), 4096, "{stat}");
    assert_eq!(field("create.count"), 1, "{stat}");
    assert_eq!(field("remove.count"), 1, "{stat}");
    assert_eq!(field("fsync.count"), 2, "{stat}");
    let iostat = env.ok(&["pool", "iostat", "-H", "-p"]);
    assert!(
        iostat.lines().any(|line| line.starts_with("tank/home\t")),
        "tank/home in iostat:\n{iostat}"
    );
    assert_eq!(writes(&nfs, "unstable", "unstable"), (3, 6000));
    assert_eq!(writes(&nfs, "file_sync", "file_sync"), (2, 1000));
    assert_eq!(writes(&nfs, "data_sync", "file_sync"), (1, 100));
    assert_eq!(writes(&nfs, "unstable", "file_sync"), (0, 0));
    let commits = &nfs["commits"];
    assert_eq!(commits["count"], 2, "{commits}");
    assert_eq!(commits["carried_writes"], 3, "{commits}");
    assert_eq!(commits["carried_bytes"], 6000, "{commits}");
    assert_eq!(commits["empty"], 1, "the second COMMIT had nothing new");
    assert_eq!(nfs["pending_files"], 0);
    for (field, value) in [
        ("stale_handles", 1),
        ("duplicate_replies", 1),
        ("auth_refusals", 1),
        ("garbage_calls", 1),
        ("unsupported_calls", 1),
        ("connections_open", 2),
        ("connections_total", 2),
        ("connections_refused", 0),
        ("verifier_changes", 0),
        ("clients_max", 64),
        ("clients_dropped", 0),
    ] {
        assert_eq!(nfs[field], value, "{field}: {nfs}");
    }
    let a_row = client(&nfs, "127.0.0.1").unwrap_or_else(|| panic!("{nfs}"));
    // MNT, CREATE, 6 WRITEs, 2 COMMITs, READ, 2 REMOVEs, GETATTR: 14 calls; 3 refused.
    assert_eq!(a_row["calls"], 14, "{a_row}");
    assert_eq!(a_row["refused"], 3, "{a_row}");
    assert_eq!(a_row["errors"], 1, "{a_row}");
    assert_eq!(a_row["written_bytes"], written_bytes, "{a_row}");
    assert_eq!(a_row["read_bytes"], 4096, "{a_row}");
    assert_eq!(a_row["commits"], 2, "{a_row}");
    assert_eq!(a_row["connections_open"], 1, "{a_row}");
    let b_row = client(&nfs, "127.0.0.2").unwrap_or_else(|| panic!("{nfs}"));
    assert_eq!(
        (b_row["calls"].as_u64(), b_row["written_bytes"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(nfs["clients"].as_array().map(Vec::len), Some(2));

    // -H and the table say the same.
    let scripted = env.ok(&["stat", "nfs", "-H"]);
    for line in [
        "nfs.write.calls\t6",
        "nfs.write.bytes\t7100",
        "writes.unstable.unstable.count\t3",
        "commits.carried_bytes\t6000",
        "stale_handles\t1",
        "client.127.0.0.2.calls\t2",
    ] {
        assert!(scripted.lines().any(|l| l == line), "{line} in\n{scripted}");
    }
    let table = env.ok(&["stat", "nfs", "-p"]);
    assert!(
        table.contains("127.0.0.2") && table.contains("WRITE ASKED") && table.contains("commit"),
        "{table}"
    );

    // /metrics moved by exactly the traffic.
    let after = metrics(&http);
    let moved = |name: &str| series(&after, name) - series(&before, name);
    assert_eq!(
        moved("cairn_nfs_calls_total{program=\"nfs\",procedure=\"write\"}"),
        6.0,
        "{after}"
    );
    assert_eq!(moved("cairn_nfs_written_bytes_total"), 7100.0);
    assert_eq!(moved("cairn_nfs_read_bytes_total"), 4096.0);
    assert_eq!(
        moved("cairn_nfs_writes_total{asked=\"unstable\",answered=\"unstable\"}"),
        3.0
    );
    assert_eq!(moved("cairn_nfs_commit_carried_bytes_total"), 6000.0);
    assert_eq!(moved("cairn_nfs_stale_handles_total"), 1.0);
    assert_eq!(moved("cairn_nfs_duplicate_replies_total"), 1.0);
    assert_eq!(moved("cairn_nfs_auth_refusals_total"), 1.0);
    assert_eq!(
        moved("cairn_nfs_call_latency_seconds_count{program=\"nfs\",procedure=\"commit\"}"),
        2.0
    );
    assert_eq!(
        moved("cairn_nfs_client_calls_total{client=\"127.0.0.2\"}"),
        2.0
    );
    assert_eq!(series(&after, "cairn_nfs_connections_open"), 2.0);

    // A closes; 70 clients come and go one after another: 72 addresses in all, 64 kept. The
    // idle ones go first, least recent first: A and the first seven; B, still open, stays.
    a.close();
    for i in 3..=72u8 {
        let mut c = Raw::connect_from(port, Ipv4Addr::new(127, 0, 0, i));
        c.call_with_xid(1, PROGRAM_NFS, 0, sys(USER), &[]);
        c.close();
    }
    let nfs = stat_nfs(&env);
    assert_eq!(nfs["clients"].as_array().map(Vec::len), Some(64), "{nfs}");
    assert_eq!(nfs["clients_dropped"], 8, "{nfs}");
    assert!(
        client(&nfs, "127.0.0.2").is_some(),
        "B has a connection open: {nfs}"
    );
    for gone in ["127.0.0.1", "127.0.0.3", "127.0.0.9"] {
        assert!(
            client(&nfs, gone).is_none(),
            "{gone} should be dropped: {nfs}"
        );
    }
    assert!(client(&nfs, "127.0.0.10").is_some(), "{nfs}");
    assert!(client(&nfs, "127.0.0.72").is_some(), "{nfs}");
    assert_eq!(
        procedure(&nfs, "nfs", "null")["calls"],
        71,
        "the totals keep every call"
    );
    assert_eq!(nfs["connections_open"], 1, "{nfs}");
    assert_eq!(nfs["connections_total"], 72, "{nfs}");
    let table = env.ok(&["stat", "nfs"]);
    assert!(table.contains("8 dropped"), "{table}");
    drop(b);
    server.terminate();
}

#[test]
fn stat_nfs_without_a_server_or_without_nfs_says_so() {
    let env = Env::new();
    env.create_pool();
    let alone = env.ok(&["stat", "nfs"]);
    assert!(alone.contains("no server is running"), "{alone}");
    let nfs = stat_nfs(&env);
    assert_eq!(
        (nfs["served"].as_bool(), nfs["serving"].as_bool()),
        (Some(false), Some(false))
    );
    assert_eq!(procedure(&nfs, "nfs", "commit")["calls"], 0);
    let mut server = env.serve();
    let served = env.ok(&["stat", "nfs"]);
    assert!(served.contains("does not serve NFS"), "{served}");
    assert_eq!(stat_nfs(&env)["served"], true);
    server.terminate();
}

/// `cairn up`'s stdout so far, its NFS mount command's (port, export), once printed.
fn up_mount_command(out: &str) -> Option<(u16, String)> {
    let line = out
        .lines()
        .find(|line| line.contains("is shared over NFS") && line.contains("mount -t nfs"))?;
    let options = line.split("-o ").nth(1)?.split_whitespace().next()?;
    let port = options
        .split(',')
        .find_map(|option| option.strip_prefix("port="))?
        .parse()
        .ok()?;
    let source = line.split("-o ").nth(1)?.split_whitespace().nth(1)?;
    let export = source.split_once(':')?.1.to_string();
    assert!(
        options.contains("vers=3")
            && options.contains("nolock")
            && options.contains(&format!("mountport={port}")),
        "{line}"
    );
    Some((port, export))
}

/// A child process killed if the test ends before it was waited for.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn up_shares_a_filesystem_over_nfs_and_prints_its_mount_command() {
    let env = Env::new();
    let data = env.path("data");
    let out_path = env.path("up.out");
    let err_path = env.path("up.err");
    let mut child = KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["up", "--size", "128M", "--volsize", "16M"])
            .args([
                "--listen",
                "127.0.0.1:0",
                "--nfs",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(&data)
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", env.dir.path())
            .current_dir(env.dir.path())
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap(),
    );
    let logs = || {
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            std::fs::read_to_string(&out_path).unwrap_or_default(),
            std::fs::read_to_string(&err_path).unwrap_or_default()
        )
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let (port, export) = loop {
        let out = std::fs::read_to_string(&out_path).unwrap_or_default();
        if let Some(found) = up_mount_command(&out) {
            break found;
        }
        assert!(
            child.0.try_wait().unwrap().is_none(),
            "cairn up exited before printing a mount command\n{}",
            logs()
        );
        assert!(
            Instant::now() < deadline,
            "no mount command within 60 s\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(export, "/cairn/fs0", "{}", logs());
    assert!(
        logs().contains("creating filesystem 'cairn/fs0'"),
        "{}",
        logs()
    );
    let listing = libnfs("nfs-ls", &[&url_as(port, &export, USER)]);
    assert!(
        listing.success(),
        "nfs-ls {export}: {}\n{}",
        listing.describe(),
        logs()
    );
    // The server `up` runs counted it: nfs-ls's MNT.
    let stat = run_limited(
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("--state-dir")
            .arg(data.join("state"))
            .args(["stat", "nfs", "-j"])
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", env.dir.path()),
        Duration::from_secs(60),
    );
    assert!(stat.success(), "{}", stat.describe());
    let value: Value = serde_json::from_str(&stat.stdout).unwrap();
    let mounts = procedure(&value["nfs"], "mount", "mnt")["calls"].as_u64();
    assert!(mounts >= Some(1), "{value}");
    // SAFETY: kill(2) on the pid of our own child, which has not been waited for yet.
    let sent = unsafe { libc::kill(child.0.id() as i32, libc::SIGTERM) };
    assert_eq!(sent, 0);
    let status = child.0.wait().unwrap();
    assert!(
        status.success(),
        "cairn up stopped badly: {status}\n{}",
        logs()
    );
    // A second `up` finds the filesystem and does not make it again.
    let again = run_limited(
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["up", "--no-serve", "--data-dir"])
            .arg(&data)
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", env.dir.path()),
        Duration::from_secs(60),
    );
    assert!(again.success(), "{}", again.describe());
    assert!(
        !again.stdout.contains("creating") && again.stdout.contains("cairn/fs0"),
        "{}",
        again.describe()
    );
}
