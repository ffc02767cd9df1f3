//! `cairn send -R | cairn receive` as a user runs it (issue 36): two processes and a pipe
//! between them, first through a running server (the data of a volume written over NBD by
//! `qemu-io`), then with the pools opened by the commands themselves. The tree `tank/a`
//! (filesystem, compression and atime set), `tank/a/b` (recordsize set), `tank/a/b/c` (a
//! volume) with @s1..@s3 each and the clone `tank/a/clone` of `tank/a/b@s1` arrives under
//! `backup/a` with the same `list -r -t all`, the same local properties (inherited ones
//! inherited from the received parent), the same snapshot guids, the clone's origin the
//! received `backup/a/b@s1`, and streams of every received snapshot carrying the same records
//! as the original's; `send -R -I` then brings every new snapshot of every dataset. `-R`
//! where a child lacks the snapshot fails naming it.

mod nbd_common;
mod stream_common;

use cairn_format::send_package::PackageReader;
use cairn_format::send_stream::SEND_HEADER_SIZE;
use nbd_common::*;
use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use stream_common::*;

const PIPE_TIME: Duration = Duration::from_secs(120);

fn wait_limited(child: &mut Child) -> (bool, String) {
    let deadline = Instant::now() + PIPE_TIME;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("a command did not end within {PIPE_TIME:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    (status.success(), stderr)
}

/// `cairn SEND... | cairn RECEIVE...`: both must succeed; returns the receiver's stderr.
fn pipe(env: &Env, send: &[&str], receive: &[&str]) -> String {
    let mut sender = env
        .cairn_command()
        .args(send)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut receiver = env
        .cairn_command()
        .args(receive)
        .stdin(Stdio::from(sender.stdout.take().unwrap()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (received, stderr) = wait_limited(&mut receiver);
    let (sent, send_err) = wait_limited(&mut sender);
    assert!(
        received && sent,
        "{send:?} | {receive:?}:\n{send_err}\n{stderr}"
    );
    stderr
}

/// Lines of `cairn ARGS` with `from` replaced by `to` in each (names made comparable).
fn lines(env: &Env, args: &[&str], from: &str, to: &str) -> Vec<String> {
    env.ok(args)
        .lines()
        .map(|line| line.replace(from, to))
        .collect()
}

fn send_file(env: &Env, snapshot: &str) -> Vec<u8> {
    let file = env.path("one.stream");
    let out = std::fs::File::create(&file).unwrap();
    let run = outcome({
        let mut cmd = env.cairn_command();
        cmd.args(["send", snapshot])
            .stdout(out)
            .stdin(Stdio::null());
        cmd
    });
    assert!(run.success, "send {snapshot}: {}", run.stderr);
    std::fs::read(file).unwrap()
}

/// What `receive` must rebuild of `source` under `target`, compared through the CLI.
fn assert_same_trees(env: &Env, source: &str, target: &str) {
    let all = |top: &str| {
        lines(
            env,
            &["list", "-H", "-r", "-t", "all", "-o", "name", top],
            top,
            "TOP",
        )
    };
    let names = all(source);
    assert_eq!(names, all(target));
    assert!(names.len() >= 10, "{names:?}");
    let guids = |top: &str| {
        lines(
            env,
            &["list", "-H", "-r", "-t", "snapshot", "-o", "name,guid", top],
            top,
            "TOP",
        )
    };
    assert_eq!(guids(source), guids(target));
    let datasets = lines(env, &["list", "-H", "-r", "-o", "name", source], source, "");
    for relative in datasets {
        let (from, to) = (format!("{source}{relative}"), format!("{target}{relative}"));
        let own = |name: &str, top: &str| {
            lines(
                env,
                &["get", "-H", "-o", "property,value,source", "all", name],
                top,
                "TOP",
            )
            .into_iter()
            .filter(|line| line.ends_with("\tlocal") || line.contains("\tinherited from "))
            .collect::<Vec<_>>()
        };
        assert_eq!(own(&from, source), own(&to, target), "properties of {to}");
        let origin = |name: &str, top: &str| {
            lines(
                env,
                &["get", "-H", "-o", "value", "origin", name],
                top,
                "TOP",
            )
        };
        assert_eq!(origin(&from, source), origin(&to, target), "origin of {to}");
    }
    for name in names.iter().filter(|name| name.contains('@')) {
        let (from, to) = (name.replace("TOP", source), name.replace("TOP", target));
        assert_eq!(
            records(&send_file(env, &from)),
            records(&send_file(env, &to)),
            "{to}"
        );
    }
}

#[test]
fn a_tree_with_a_clone_goes_through_a_pipe_with_and_without_a_server() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    let backup = env.dev("b0.img");
    env.ok(&["pool", "create", "--size", "256M", "backup", &backup]);
    env.ok(&[
        "create",
        "-o",
        "compression=lz4",
        "-o",
        "atime=off",
        "tank/a",
    ]);
    env.ok(&["create", "-o", "recordsize=16K", "tank/a/b"]);
    env.create_volume("tank/a/b/c", "4M", &["volblocksize=16K"]);
    let mut server = env.serve();
    let volume = server.uri("tank/a/b/c");
    qemu_io_ok(&volume, &["write -P 0x11 0 1M", "flush"]);
    env.ok(&["snapshot", "-r", "tank/a@s1"]);
    env.ok(&["clone", "tank/a/b@s1", "tank/a/clone"]);
    env.ok(&["set", "snapdir=visible", "tank/a/clone"]);
    qemu_io_ok(&volume, &["write -P 0x22 1M 512k", "flush"]);
    env.ok(&["snapshot", "-r", "tank/a@s2"]);
    qemu_io_ok(&volume, &["write -P 0x33 3M 64k", "flush"]);
    env.ok(&["snapshot", "-r", "tank/a@s3"]);

    // Through the server: both commands hand it their end of the pipe.
    let said = pipe(
        &env,
        &["send", "-R", "tank/a@s3"],
        &["receive", "-v", "backup/a"],
    );
    assert!(said.contains("received backup/a@s3"), "{said}");
    let origin = env.ok(&["get", "-H", "-o", "value", "origin", "backup/a/clone"]);
    assert_eq!(origin.trim(), "backup/a/b@s1");
    assert_same_trees(&env, "tank/a", "backup/a");

    // A child without the snapshot: a clear error naming it (through the server).
    env.ok(&["create", "tank/a/late"]);
    let run = outcome({
        let mut cmd = env.cairn_command();
        cmd.args(["send", "-R", "tank/a@s3"])
            .stdout(Stdio::null())
            .stdin(Stdio::null());
        cmd
    });
    assert!(
        !run.success && run.stderr.contains("tank/a/late@s3"),
        "{}",
        run.stderr
    );
    env.ok(&["destroy", "tank/a/late"]);
    server.terminate();

    // Without a server: each command opens its pool itself.
    pipe(
        &env,
        &["send", "-R", "tank/a@s3"],
        &["receive", "backup/a2"],
    );
    assert_same_trees(&env, "tank/a", "backup/a2");
    // -R -I: two more snapshots of the tree, each arriving.
    env.ok(&["snapshot", "-r", "tank/a@s4"]);
    env.ok(&["snapshot", "-r", "tank/a@s5"]);
    pipe(
        &env,
        &["send", "-R", "-I", "@s3", "tank/a@s5"],
        &["receive", "backup/a2"],
    );
    assert_same_trees(&env, "tank/a", "backup/a2");
    let listed = env.ok(&[
        "list",
        "-H",
        "-o",
        "name",
        "-t",
        "snapshot",
        "-r",
        "backup/a2",
    ]);
    assert!(listed.contains("backup/a2/clone@s4"), "{listed}");
    env.assert_pool_check_clean();
    let check = env.cairn(&["pool", "check", "backup"]).ok();
    assert!(
        check.stdout.contains("no problems found"),
        "{}",
        check.stdout
    );
}

/// A package's manifest, as `send -R` wrote it to `file` (the test's own reading of the
/// format, to check what the stream says beside the data).
#[test]
fn the_manifest_names_the_tree_and_the_clone_origin() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    env.ok(&["create", "-o", "atime=off", "tank/a"]);
    env.ok(&["create", "tank/a/b"]);
    env.ok(&["snapshot", "-r", "tank/a@s1"]);
    env.ok(&["clone", "tank/a/b@s1", "tank/a/c"]);
    env.ok(&["snapshot", "-r", "tank/a@s2"]);
    let file = env.path("tree.stream");
    let run = outcome({
        let mut cmd = env.cairn_command();
        cmd.args(["send", "-R", "tank/a@s2"])
            .stdout(std::fs::File::create(&file).unwrap())
            .stdin(Stdio::null());
        cmd
    });
    assert!(run.success, "{}", run.stderr);
    let bytes = std::fs::read(&file).unwrap();
    let mut input = bytes.as_slice();
    let mut head = [0u8; SEND_HEADER_SIZE];
    input.read_exact(&mut head).unwrap();
    let reader = PackageReader::new(&head, &mut input).unwrap();
    let manifest = reader.manifest();
    let names: Vec<&str> = manifest.datasets.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["", "b", "c"]);
    let guid_of_b_s1 = manifest.datasets[1].snapshots[0].1;
    assert_eq!(manifest.datasets[2].origin_guid, guid_of_b_s1);
    assert_eq!(
        manifest.datasets[0].properties,
        [("atime".to_string(), "off".to_string())]
    );
    // The clone's first stream is from its origin; 2 + 2 + 1 streams.
    assert_eq!(manifest.streams.len(), 5);
    assert_eq!(manifest.streams[4].from_guid, guid_of_b_s1);
    assert_eq!(manifest.streams[4].dataset, 2);
}
