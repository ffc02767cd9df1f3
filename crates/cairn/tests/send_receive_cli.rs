//! `cairn send` and `cairn receive` as a user runs them (issue 36, first step): a volume
//! written over NBD by `qemu-io` is snapshotted, sent to a file and received into a second
//! pool with no server running; the received snapshot's stream carries the same records as
//! the original's; a damaged stream leaves nothing. (Through a running server:
//! `send_receive_server.rs`.)

mod nbd_common;

use cairn_format::send_stream::{StreamReader, StreamRecord};
use nbd_common::*;
use std::process::Stdio;

/// Every record of a stream but END (whose guid names the snapshot, different per pool).
fn records(stream: &[u8]) -> Vec<StreamRecord> {
    let mut input = stream;
    let mut reader = StreamReader::new(&mut input).expect("a stream");
    let mut out = Vec::new();
    while let Some(record) = reader.next_record().expect("an intact stream") {
        if !matches!(record, StreamRecord::End { .. }) {
            out.push(record);
        }
    }
    out
}

/// What a command said on stderr and whether it succeeded. (`run_limited` pipes stdin and
/// stdout, which these commands take from and give to files.)
struct Outcome {
    success: bool,
    stderr: String,
}

fn outcome(mut cmd: std::process::Command) -> Outcome {
    let output = cmd.stderr(Stdio::piped()).output().expect("run cairn");
    Outcome {
        success: output.status.success(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn send_to(env: &Env, snapshot: &str, file: &str) -> Outcome {
    let out = std::fs::File::create(env.path(file)).unwrap();
    let mut cmd = env.cairn_command();
    cmd.args(["send", snapshot])
        .stdout(out)
        .stdin(Stdio::null());
    outcome(cmd)
}

fn receive_from(env: &Env, target: &str, file: &str) -> Outcome {
    let input = std::fs::File::open(env.path(file)).unwrap();
    let mut cmd = env.cairn_command();
    cmd.args(["receive", target])
        .stdin(Stdio::from(input))
        .stdout(Stdio::null());
    outcome(cmd)
}

#[test]
fn a_volume_goes_to_a_file_and_into_another_pool() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    let backup = env.dev("b0.img");
    env.ok(&["pool", "create", "--size", "256M", "backup", &backup]);
    env.create_volume("tank/vol", "8M", &["volblocksize=16K"]);
    let mut server = env.serve();
    qemu_io_ok(
        &server.uri("tank/vol"),
        &["write -P 0x5a 0 3M", "write -P 0x21 5M 64k", "flush"],
    );
    env.ok(&["snapshot", "tank/vol@a"]);
    server.terminate();

    let sent = send_to(&env, "tank/vol@a", "vol.stream");
    assert!(sent.success, "{}", sent.stderr);
    let stream = std::fs::read(env.path("vol.stream")).unwrap();
    // 3 MiB + 64 KiB of data in 16 KiB blocks.
    assert_eq!(records(&stream).len(), 1 + 192 + 4);
    let run = receive_from(&env, "backup/copy", "vol.stream");
    assert!(run.success, "{}", run.stderr);
    let listed = env.ok(&["list", "-H", "-o", "name", "-t", "snapshot"]);
    assert!(listed.lines().any(|l| l == "backup/copy@a"), "{listed}");
    assert!(send_to(&env, "backup/copy@a", "copy.stream").success);
    let copy = std::fs::read(env.path("copy.stream")).unwrap();
    assert_eq!(records(&copy), records(&stream));

    // A damaged stream: refused, no dataset left.
    let mut damaged = stream.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    std::fs::write(env.path("damaged.stream"), &damaged).unwrap();
    let run = receive_from(&env, "backup/other", "damaged.stream");
    assert!(!run.success);
    assert!(run.stderr.contains("damaged"), "{}", run.stderr);
    let listed = env.ok(&["list", "-H", "-o", "name"]);
    assert!(!listed.contains("backup/other"), "{listed}");
    env.assert_pool_check_clean();
}
