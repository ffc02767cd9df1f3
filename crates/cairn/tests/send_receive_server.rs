//! `cairn send` and `cairn receive` while `cairn serve` holds the pools (issue 36): the
//! commands pass their stdout or stdin to the server over the control socket and the server
//! writes or reads the stream itself. Real processes throughout: the server, the CLI, shell-like
//! pipes between two CLIs, `qemu-io` and `qemu-img compare` over the server's NBD exports.
//!
//! - the stream a served send writes is byte for byte the one an in-process send writes of the
//!   same snapshot once the server stopped;
//! - a served receive makes a volume the server exports at once, equal to the snapshot sent,
//!   with its snapshot listed; `send | receive` as a pipe between two pools of one server;
//! - bad input (a damaged stream, a missing snapshot, a target that exists): a clear error,
//!   a non-zero exit, nothing left, the server serving on;
//! - a big stream (48 MiB) read slowly through a pipe: other commands answer while it is in
//!   flight, and every byte arrives;
//! - a receive whose command is killed, or whose server stops, mid-stream: nothing is left;
//! - an incremental receive into a filesystem the server has mounted: refused until unmounted.

mod nbd_common;
mod stream_common;

use nbd_common::*;
use std::io::{Read, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use stream_common::*;

fn names(env: &Env, kind: &str) -> Vec<String> {
    env.ok(&["list", "-H", "-o", "name", "-t", kind])
        .lines()
        .map(str::to_string)
        .collect()
}

/// `qemu-img compare` of two exports of the running server: equal contents.
fn assert_exports_equal(server: &Server, a: &str, b: &str) {
    run(
        &qemu_img(),
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            &server.uri(a),
            &server.uri(b),
        ],
    )
    .ok();
}

/// Two pools, `tank` (a mirror) and `backup`, with volume `tank/vol` written over NBD and
/// snapshotted as `tank/vol@a`; the server runs.
fn served_volume(env: &Env) -> Server {
    env.create_pool_of("256M");
    let backup = env.dev("b0.img");
    env.ok(&["pool", "create", "--size", "256M", "backup", &backup]);
    env.create_volume("tank/vol", "8M", &["volblocksize=16K"]);
    let server = env.serve();
    qemu_io_ok(
        &server.uri("tank/vol"),
        &["write -P 0x5a 0 3M", "write -P 0x21 5M 64k", "flush"],
    );
    env.ok(&["snapshot", "tank/vol@a"]);
    server
}

#[test]
fn send_and_receive_run_in_the_server_that_holds_the_pools() {
    let _heavy = heavy();
    let env = Env::new();
    let mut server = served_volume(&env);

    let sent = send_to(&env, &["-v", "tank/vol@a"], "served.stream");
    assert!(sent.success, "{}", sent.stderr);
    let stream = std::fs::read(env.path("served.stream")).unwrap();
    assert!(
        sent.stderr
            .contains(&format!("sent tank/vol@a: {} bytes", stream.len())),
        "{}",
        sent.stderr
    );
    // With -v the stream came back through the command's progress relay; without, the
    // server wrote the command's stdout itself: the same bytes.
    let plain = send_to(&env, &["tank/vol@a"], "plain.stream");
    assert!(plain.success, "{}", plain.stderr);
    assert!(std::fs::read(env.path("plain.stream")).unwrap() == stream);

    let received = receive_from(&env, &["backup/copy"], "served.stream");
    assert!(received.success, "{}", received.stderr);
    assert!(names(&env, "snapshot").contains(&"backup/copy@a".to_string()));
    // Served at once, equal to what was sent.
    assert_exports_equal(&server, "tank/vol@a", "backup/copy");
    assert_exports_equal(&server, "tank/vol@a", "backup/copy@a");

    // A pipe between two commands, both through the server.
    let mut sender = env.cairn_command();
    let mut sender = sender
        .args(["send", "tank/vol@a"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut receiver = env.cairn_command();
    let mut receiver = receiver
        .args(["receive", "-v", "backup/piped"])
        .stdin(Stdio::from(sender.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (received, stderr) = wait_limited(&mut receiver, PIPE_TIME);
    assert!(received.success(), "{stderr}");
    assert!(wait_limited(&mut sender, PIPE_TIME).0.success());
    assert!(
        stderr.contains(&format!("received backup/piped@a: {} bytes", stream.len())),
        "{stderr}"
    );
    assert_exports_equal(&server, "tank/vol@a", "backup/piped");

    refusals_leave_nothing(&env, &server, &stream);

    server.terminate();
    // The in-process send of the same snapshot writes the same bytes.
    let local = send_to(&env, &["tank/vol@a"], "local.stream");
    assert!(local.success, "{}", local.stderr);
    assert!(std::fs::read(env.path("local.stream")).unwrap() == stream);
    env.assert_pool_check_clean();
    let check = env.cairn(&["pool", "check", "backup"]).ok();
    assert!(
        check.stdout.contains("no problems found"),
        "{}",
        check.describe()
    );
}

/// Bad input through the server: an error naming the problem, nothing left, the server serving.
fn refusals_leave_nothing(env: &Env, server: &Server, stream: &[u8]) {
    let mut damaged = stream.to_vec();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    std::fs::write(env.path("damaged.stream"), &damaged).unwrap();
    let run = receive_from(env, &["backup/other"], "damaged.stream");
    assert!(!run.success);
    assert!(run.stderr.contains("damaged"), "{}", run.stderr);
    assert!(
        !names(env, "all")
            .iter()
            .any(|n| n.starts_with("backup/other"))
    );

    let run = send_to(env, &["tank/vol@nope"], "nope.stream");
    assert!(!run.success);
    assert!(run.stderr.contains("tank/vol@nope"), "{}", run.stderr);
    assert_eq!(std::fs::metadata(env.path("nope.stream")).unwrap().len(), 0);

    let run = receive_from(env, &["backup/copy"], "served.stream");
    assert!(!run.success);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);

    let run = receive_from(env, &["nosuchpool/copy"], "served.stream");
    assert!(!run.success);
    assert!(run.stderr.contains("nosuchpool"), "{}", run.stderr);

    // Still serving: the copy reads back as before.
    assert_exports_equal(server, "tank/vol@a", "backup/copy");
}

/// How long a command of a pipe may take (a server that ran both ends one after the other
/// would never finish: the test fails instead of hanging).
const PIPE_TIME: Duration = Duration::from_secs(60);

/// Waits for `child` up to `limit`, killing it and failing past that; its status and what it
/// said on stderr (when piped; read once it ended).
fn wait_limited(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a command did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    (status, stderr)
}

#[test]
fn a_big_send_read_slowly_holds_no_other_command_and_arrives_whole() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    let backup = env.dev("b0.img");
    env.ok(&["pool", "create", "--size", "256M", "backup", &backup]);
    env.create_volume("tank/big", "64M", &["volblocksize=64K"]);
    let server = env.serve();
    random_file(&env.path("data.bin"), 48 * MIB, 36);
    run(
        &nbdcopy(),
        &[path_str(&env.path("data.bin")), &server.uri("tank/big")],
    )
    .ok();
    env.ok(&["snapshot", "tank/big@s"]);

    let mut sender = env.cairn_command();
    let mut sender = sender
        .args(["send", "-v", "tank/big@s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = sender.stdout.take().unwrap();
    let mut stream = vec![0u8; MIB as usize];
    pipe.read_exact(&mut stream).unwrap();
    // The server's writer waits on the full pipe; other commands are answered meanwhile,
    // changes included.
    let limit = Duration::from_secs(20);
    run_limited(env.cairn_command().args(["list"]), limit).ok();
    run_limited(env.cairn_command().args(["snapshot", "tank/big@t"]), limit).ok();
    run_limited(env.cairn_command().args(["pool", "status"]), limit).ok();
    assert!(sender.try_wait().unwrap().is_none(), "the send ended early");
    // Read the rest slowly at first, then all of it.
    let mut piece = vec![0u8; 64 << 10];
    for _ in 0..32 {
        pipe.read_exact(&mut piece).unwrap();
        stream.extend_from_slice(&piece);
        std::thread::sleep(Duration::from_millis(5));
    }
    pipe.read_to_end(&mut stream).unwrap();
    let (status, stderr) = wait_limited(&mut sender, TOOL_TIME);
    assert!(status.success(), "{stderr}");
    assert!(stream.len() as u64 > 48 * MIB);
    assert!(
        stderr.contains(&format!("sent tank/big@s: {} bytes", stream.len())),
        "{stderr}"
    );
    std::fs::write(env.path("big.stream"), &stream).unwrap();
    let received = receive_from(&env, &["backup/big"], "big.stream");
    assert!(received.success, "{}", received.stderr);
    assert_exports_equal(&server, "tank/big@s", "backup/big");
}

/// Starts `cairn receive TARGET` with its stdin a pipe this test writes.
fn start_receive(env: &Env, target: &str) -> Child {
    let mut cmd = env.cairn_command();
    cmd.args(["receive", target])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits until `target` is not listed (its receive ended and left nothing).
fn wait_gone(env: &Env, target: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while names(env, "all").iter().any(|n| n.starts_with(target)) {
        assert!(Instant::now() < deadline, "{target} is still there");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `receive_from` of `file` into `target`, retried while a receive into it is still under
/// way (the server rolls a cut receive back after it sees its command gone).
fn receive_once_free(env: &Env, target: &str, file: &str) -> CommandOutcome {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let run = receive_from(env, &[target], file);
        if run.success || !run.stderr.contains("under way") || Instant::now() > deadline {
            return run;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_receive_cut_by_its_command_or_the_server_stopping_leaves_nothing() {
    let _heavy = heavy();
    let env = Env::new();
    let mut server = served_volume(&env);
    assert!(send_to(&env, &["tank/vol@a"], "vol.stream").success);
    let stream = std::fs::read(env.path("vol.stream")).unwrap();
    let half = stream.len() / 2;

    // The command is killed mid-stream while its stdin stays open: only its end stops the
    // server's work for it, which rolls the receive back.
    let mut receiver = start_receive(&env, "backup/cut");
    let mut input = receiver.stdin.take().unwrap();
    input.write_all(&stream[..half]).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    receiver.kill().unwrap();
    receiver.wait().unwrap();
    wait_gone(&env, "backup/cut");
    drop(input);
    // The name is free again once the server has rolled the cut receive back (until then a
    // receive into it is refused as under way): the same stream, whole, is received.
    let whole = receive_once_free(&env, "backup/cut", "vol.stream");
    assert!(whole.success, "{}", whole.stderr);
    assert_exports_equal(&server, "tank/vol@a", "backup/cut");

    // The server stops mid-stream: the command is told, nothing is left.
    let mut receiver = start_receive(&env, "backup/stopped");
    let mut input = receiver.stdin.take().unwrap();
    input.write_all(&stream[..half]).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    server.terminate();
    let (status, stderr) = wait_limited(&mut receiver, TOOL_TIME);
    assert!(!status.success());
    assert!(stderr.contains("the server is stopping"), "{stderr}");
    drop(input);
    assert!(
        !names(&env, "all")
            .iter()
            .any(|n| n.starts_with("backup/stopped"))
    );
    env.assert_pool_check_clean();
    let check = env.cairn(&["pool", "check", "backup"]).ok();
    assert!(
        check.stdout.contains("no problems found"),
        "{}",
        check.describe()
    );
}

/// An incremental receive into a filesystem the server has mounted is refused with a message
/// saying to unmount it (the swap at the end of the stream could not drop what the kernel
/// caches of the mount), and nothing changes; once unmounted, the same stream goes in and a
/// new mount shows what it brought.
#[test]
fn a_receive_into_a_mounted_filesystem_is_refused_until_it_is_unmounted() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _unmount, mut server) = served_mount(&env, "tank/fs", &["atime=off"]);
    std::fs::write(at.join("first"), b"one").unwrap();
    env.ok(&["snapshot", "tank/fs@a"]);
    // A copy of it, mounted, to receive the incremental into.
    // With its properties (-p): atime=off arrives, so reading the copy through its mount
    // writes no access times and the incremental below needs no -F.
    assert!(send_to(&env, &["-p", "tank/fs@a"], "full.stream").success);
    assert!(receive_from(&env, &["tank/copy"], "full.stream").success);
    let atime = env.ok(&["get", "-H", "-o", "value,source", "atime", "tank/copy"]);
    assert_eq!(atime.trim(), "off\tlocal");
    std::fs::write(at.join("second"), b"two").unwrap();
    env.ok(&["snapshot", "tank/fs@b"]);
    assert!(send_to(&env, &["-i", "@a", "tank/fs@b"], "incr.stream").success);
    let copy_at = env.path("copy");
    let _unmount_copy = Unmount(copy_at.clone());
    env.ok(&["mount", "tank/copy", copy_at.to_str().unwrap()]);
    assert_eq!(std::fs::read(copy_at.join("first")).unwrap(), b"one");

    let refused = receive_from(&env, &["tank/copy"], "incr.stream");
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("tank/copy is mounted") && refused.stderr.contains("unmount"),
        "{}",
        refused.stderr
    );
    assert!(!names(&env, "snapshot").contains(&"tank/copy@b".to_string()));
    assert!(!copy_at.join("second").exists());
    // A receive into a dataset above a mount is refused as well (a package may swap the
    // heads of the datasets below its target).
    let above = receive_from(&env, &["tank"], "incr.stream");
    assert!(
        !above.success && above.stderr.contains("is mounted by this server"),
        "{}",
        above.stderr
    );

    env.ok(&["unmount", "tank/copy"]);
    let received = receive_from(&env, &["tank/copy"], "incr.stream");
    assert!(received.success, "{}", received.stderr);
    assert!(names(&env, "snapshot").contains(&"tank/copy@b".to_string()));
    env.ok(&["mount", "tank/copy", copy_at.to_str().unwrap()]);
    assert_eq!(std::fs::read(copy_at.join("second")).unwrap(), b"two");
    env.ok(&["unmount", "tank/copy"]);
    env.ok(&["unmount", "tank/fs"]);
    server.terminate();
    env.assert_pool_check_clean();
}
