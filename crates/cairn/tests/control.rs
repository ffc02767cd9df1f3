//! End-to-end tests of the control socket (issue 13, "a library for front ends"): commands run
//! by a `cairn serve` on a client's behalf carry typed requests whose paths the client made
//! absolute, so a client in another working directory gets its own relative paths, and the
//! server never changes its working directory.
//!
//! Real `cairn` processes on sparse files; the served pool is read with qemu-io (Debian package
//! qemu-utils; a missing tool fails the test).

mod nbd_common;

use nbd_common::*;
use std::path::Path;

/// `cairn --state-dir S ARGS` run in `cwd`; must succeed; returns stdout.
fn ok_in(env: &Env, cwd: &Path, args: &[&str]) -> String {
    let mut cmd = env.cairn_command();
    cmd.current_dir(cwd).args(args);
    let run = run_limited(&mut cmd, std::time::Duration::from_secs(120));
    assert!(
        run.success(),
        "cairn {args:?} in {cwd:?} failed:\n{}",
        run.describe()
    );
    run.stdout
}

#[test]
fn forwarded_commands_use_the_clients_directory_for_relative_paths() {
    let env = Env::new();
    env.create_pool();
    let mut server = env.serve();
    let work = env.path("work");
    let other = env.path("other");
    std::fs::create_dir(&work).unwrap();
    std::fs::create_dir(&other).unwrap();

    // Two clients in two directories, both with relative paths, through the one server.
    ok_in(
        &env,
        &work,
        &["pool", "create", "--size", "256M", "alpha", "a0.img"],
    );
    ok_in(
        &env,
        &other,
        &["pool", "create", "--size", "256M", "beta", "b0.img"],
    );
    ok_in(
        &env,
        &work,
        &["pool", "add", "--size", "64M", "alpha", "log", "alog.img"],
    );
    assert!(work.join("a0.img").is_file() && work.join("alog.img").is_file());
    assert!(other.join("b0.img").is_file());
    for stray in ["a0.img", "b0.img", "alog.img"] {
        assert!(
            !env.path(stray).exists(),
            "{stray} was created in the server's directory"
        );
        assert!(!env.path("devs").join(stray).exists());
    }
    let status = ok_in(&env, &other, &["pool", "status", "alpha"]);
    let a0 = work.join("a0.img").display().to_string();
    assert!(status.contains(&a0), "status does not name {a0}:\n{status}");

    // A relative device name in `pool remove` and an import from a relative `-d`.
    ok_in(&env, &work, &["pool", "remove", "alpha", "alog.img"]);
    let status = ok_in(&env, &work, &["pool", "status", "alpha"]);
    assert!(!status.contains("alog.img"), "log still listed:\n{status}");
    ok_in(&env, &work, &["pool", "export", "alpha"]);
    let importable = ok_in(&env, &work, &["pool", "import", "-d", "."]);
    assert!(importable.contains("alpha"), "{importable}");
    ok_in(&env, &work, &["pool", "import", "-d", ".", "alpha"]);
    ok_in(&env, &other, &["create", "-V", "16M", "alpha/vol"]);

    // The server serves the volume just made, and its history shows each command as typed.
    let uri = server.uri("alpha/vol");
    qemu_io_ok(&uri, &["write -P 0x5a 0 64k", "read -P 0x5a 0 64k"]);
    let history = ok_in(&env, &other, &["pool", "history", "alpha"]);
    assert!(
        history.contains("cairn pool create --size 256M alpha a0.img")
            && history.contains("cairn create -V 16M alpha/vol"),
        "{history}"
    );
    server.terminate();
    // Without a server, the same relative commands run locally with the same meaning.
    ok_in(&env, &other, &["pool", "destroy", "beta"]);
    let list = ok_in(&env, &work, &["pool", "list", "-H"]);
    assert!(list.contains("alpha") && !list.contains("beta"), "{list}");
}
