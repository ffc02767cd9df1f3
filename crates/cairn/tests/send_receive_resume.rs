//! Resumable receive as a user runs it (issue 36): `cairn receive -s` SIGKILLed mid-stream
//! (in-process: the pool is imported again by the next command), or cut by its command being
//! killed or by the server stopping (through `cairn serve`), keeps what arrived; `cairn get
//! receive_resume_token TARGET` prints the token (`-` once there is none), which survives
//! import; `cairn send -t TOKEN` writes the rest and `cairn receive -s` completes it, the
//! result carrying every record of the original (`pool check` clean); `cairn receive -A`
//! abandons a partial receive and leaves no trace; a bad token is refused by name. Real
//! processes throughout: the CLI, the server, `qemu-io` writing the source volume over NBD.
//! (Power cuts of the receiver: `cairn-engine/tests/receive_resume.rs`.)

mod nbd_common;
mod stream_common;

use nbd_common::*;
use std::io::Write;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use stream_common::*;

fn token(env: &Env, target: &str) -> String {
    let out = env.ok(&["get", "-H", "-o", "value", "receive_resume_token", target]);
    out.trim().to_string()
}

/// Pools `tank` and `backup`; volume `tank/vol` (24 MiB, 16 KiB blocks) written over NBD by
/// `qemu-io` and snapshotted `tank/vol@a`, its stream in `vol.stream`. The server is stopped.
fn source(env: &Env) -> Vec<u8> {
    env.create_pool_of("256M");
    let backup = env.dev("b0.img");
    env.ok(&["pool", "create", "--size", "256M", "backup", &backup]);
    env.create_volume("tank/vol", "24M", &["volblocksize=16K"]);
    let mut server = env.serve();
    qemu_io_ok(
        &server.uri("tank/vol"),
        &["write -P 0x5a 0 20M", "write -P 0x21 22M 1M", "flush"],
    );
    server.terminate();
    env.ok(&["snapshot", "tank/vol@a"]);
    assert!(send_to(env, &["tank/vol@a"], "vol.stream").success);
    std::fs::read(env.path("vol.stream")).unwrap()
}

/// `cairn receive -s TARGET` fed the first `fed_bytes` of `stream` through a pipe, waiting
/// `pause` (so txgs commit what it applied), then SIGKILLed.
fn kill_mid_stream(env: &Env, target: &str, stream: &[u8], fed_bytes: usize, pause: Duration) {
    let mut child: Child = env
        .cairn_command()
        .args(["receive", "-s", target])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start cairn receive");
    let mut input = child.stdin.take().expect("a pipe");
    input
        .write_all(&stream[..fed_bytes])
        .expect("the receiver reads");
    std::thread::sleep(pause);
    child.kill().expect("SIGKILL");
    assert!(!child.wait().expect("wait").success());
    drop(input);
}

/// The partial receive into `target` resumed (`send -t` then `receive -s`), to completion:
/// the snapshot has every record of `stream`.
fn resume_to_the_end(env: &Env, target: &str, stream: &[u8]) {
    let kept = token(env, target);
    assert!(kept.len() > 100, "no token: '{kept}'");
    let sent = send_to(env, &["-t", &kept], "rest.stream");
    assert!(sent.success, "{}", sent.stderr);
    let rest = std::fs::read(env.path("rest.stream")).unwrap();
    assert!(
        rest.len() < stream.len(),
        "the rest is not shorter: {}",
        rest.len()
    );
    let received = receive_from(env, &["-s", target], "rest.stream");
    assert!(received.success, "{}", received.stderr);
    assert_eq!(token(env, target), "-");
    let snapshot = format!("{target}@a");
    assert!(send_to(env, &[&snapshot], "copy.stream").success);
    let copy = std::fs::read(env.path("copy.stream")).unwrap();
    assert!(
        records(&copy) == records(stream),
        "the resumed copy differs"
    );
    let guid = |name: &str| env.ok(&["get", "-H", "-p", "-o", "value", "guid", name]);
    assert_eq!(guid(&snapshot), guid("tank/vol@a"));
}

fn assert_backup_clean(env: &Env) {
    let check = env.cairn(&["pool", "check", "backup"]).ok();
    assert!(
        check.stdout.contains("no problems found"),
        "{}",
        check.describe()
    );
}

#[test]
fn a_receive_killed_mid_stream_resumes_from_its_token() {
    let _heavy = heavy();
    let env = Env::new();
    let stream = source(&env);
    // Half the stream, and time for the txg timer (5 s) to commit what was applied.
    kill_mid_stream(
        &env,
        "backup/copy",
        &stream,
        stream.len() / 2,
        Duration::from_secs(6),
    );
    let listed = env.ok(&["list", "-H", "-o", "name"]);
    assert!(!listed.contains("backup/copy"), "{listed}");
    assert_backup_clean(&env);
    // A writable import keeps a partial receive -s (it would destroy one without -s).
    env.ok(&["snapshot", "backup@later"]);
    let kept = token(&env, "backup/copy");
    assert!(kept.len() > 100, "'{kept}'");
    // A whole stream into it is refused, naming the way out.
    let whole = receive_from(&env, &["-s", "backup/copy"], "vol.stream");
    assert!(
        !whole.success && whole.stderr.contains("receive -A"),
        "{}",
        whole.stderr
    );
    resume_to_the_end(&env, "backup/copy", &stream);
    assert_backup_clean(&env);

    // Bad tokens: a clear error each, nothing written.
    let bad = send_to(&env, &["-t", "garbage"], "bad.stream");
    assert!(
        !bad.success && bad.stderr.contains("not a cairn resume token"),
        "{}",
        bad.stderr
    );
    let mut damaged = kept.clone().into_bytes();
    damaged[10] = if damaged[10] == b'0' { b'1' } else { b'0' };
    let damaged = String::from_utf8(damaged).unwrap();
    let bad = send_to(&env, &["-t", &damaged], "bad.stream");
    assert!(
        !bad.success && bad.stderr.contains("checksum"),
        "{}",
        bad.stderr
    );
    assert_eq!(std::fs::metadata(env.path("bad.stream")).unwrap().len(), 0);

    // -A: a cut receive -s abandoned leaves no trace.
    std::fs::write(env.path("half.stream"), &stream[..stream.len() / 3]).unwrap();
    assert!(!receive_from(&env, &["-s", "backup/other"], "half.stream").success);
    assert!(token(&env, "backup/other").len() > 100);
    env.ok(&["receive", "-A", "backup/other"]);
    assert!(
        !env.cairn(&["get", "receive_resume_token", "backup/other"])
            .success()
    );
    let again = env.cairn(&["receive", "-A", "backup/other"]);
    assert!(
        !again.success() && again.stderr.contains("no partial receive"),
        "{}",
        again.describe()
    );
    assert_backup_clean(&env);
}

/// Waits until `target` has a resume token (the server kept its partial receive).
fn wait_token(env: &Env, target: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while token(env, target).len() < 100 {
        assert!(Instant::now() < deadline, "no token for {target}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn resume_through_a_running_server_and_after_it_stops() {
    let _heavy = heavy();
    let env = Env::new();
    let stream = source(&env);
    let mut server = env.serve();
    // The command is killed: the server's receive ends with its client and keeps what it
    // applied, with its token.
    kill_mid_stream(
        &env,
        "backup/copy",
        &stream,
        stream.len() / 2,
        Duration::from_millis(800),
    );
    wait_token(&env, "backup/copy");
    resume_to_the_end(&env, "backup/copy", &stream);
    // The server stops mid-stream: the partial receive and its token survive its export and
    // the in-process import after it.
    let mut receiver = env
        .cairn_command()
        .args(["receive", "-s", "backup/stopped"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = receiver.stdin.take().unwrap();
    input.write_all(&stream[..stream.len() / 2]).unwrap();
    std::thread::sleep(Duration::from_millis(800));
    server.terminate();
    assert!(!receiver.wait().unwrap().success());
    drop(input);
    resume_to_the_end(&env, "backup/stopped", &stream);
    // -A through a new server.
    let mut server = env.serve();
    std::fs::write(env.path("half.stream"), &stream[..stream.len() / 3]).unwrap();
    assert!(!receive_from(&env, &["-s", "backup/third"], "half.stream").success);
    wait_token(&env, "backup/third");
    env.ok(&["receive", "-A", "backup/third"]);
    assert!(
        !env.cairn(&["get", "receive_resume_token", "backup/third"])
            .success()
    );
    server.terminate();
    assert_backup_clean(&env);
}
