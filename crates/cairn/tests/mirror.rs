//! `cairn pool attach | detach | replace` end to end: the real `cairn` binary, a real `cairn
//! serve` (killed with SIGKILL mid-resilver in one test), data written and read back through
//! NBD with qemu-img. Each resilver is proved by taking the old side away (zeroing or deleting
//! its file) and comparing every byte read from the new side alone; `pool check` must be clean
//! after every change.

mod nbd_common;

use nbd_common::*;
use std::time::{Duration, Instant};

/// How long a resilver of these small pools may take at full speed.
const RESILVER_LIMIT: Duration = Duration::from_secs(60);

fn assert_export_is(source: &std::path::Path, uri: &str) {
    let same = run(
        &qemu_img(),
        &["compare", "-f", "raw", "-F", "raw", path_str(source), uri],
    )
    .ok();
    assert!(
        same.stdout.contains("Images are identical"),
        "{}",
        same.describe()
    );
}

/// Serves the pool and checks the volume holds `source`, byte for byte.
fn assert_volume_is(env: &Env, source: &std::path::Path) {
    let mut server = env.serve();
    assert_export_is(source, &server.uri("tank/vol"));
    server.terminate();
}

fn status(env: &Env) -> String {
    env.ok(&["pool", "status", "tank"])
}

/// Polls `pool status` until it says the resilver finished.
fn wait_resilvered(env: &Env) -> String {
    let started = Instant::now();
    loop {
        let status = status(env);
        if status.contains("scan: resilvered") {
            return status;
        }
        assert!(
            !status.contains("stopped") && started.elapsed() < RESILVER_LIMIT,
            "resilver did not finish:\n{status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The percentage a `resilver in progress` status line shows.
fn resilver_percent(status: &str) -> Option<u64> {
    let line = status
        .lines()
        .find(|line| line.contains("resilver in progress"))?;
    let open = line.find('(')?;
    let close = line[open..].find('%')? + open;
    line[open + 1..close].trim().parse().ok()
}

/// Overwrites a whole device file with zeros (labels included): the device is "replaced by a
/// blank disk".
fn zero_file(path: &str) {
    let len = std::fs::metadata(path).unwrap().len();
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_len(0).unwrap();
    file.set_len(len).unwrap();
    file.sync_all().unwrap();
}

#[test]
fn attach_while_serving_then_the_new_side_alone_holds_the_data() {
    let _heavy = heavy();
    let env = Env::new();
    let (d0, d1) = (env.dev("d0.img"), env.dev("d1.img"));
    env.ok(&["pool", "create", "--size", "256M", "tank", &d0]);
    env.create_volume("tank/vol", "32M", &[]);
    let source = env.path("source.img");
    random_file(&source, 32 * MIB, 11);
    let mut server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_copy_in(&source, &uri);

    // Forwarded to the server: it returns at once and the server resilvers in the background.
    let out = env.ok(&["pool", "attach", "--size", "256M", "tank", &d0, &d1]);
    assert!(out.contains("attached to mirror-0"), "{out}");
    let done = wait_resilvered(&env);
    assert!(done.contains("mirror-0"), "{done}");
    // Still serving, and the data reads back.
    assert_export_is(&source, &uri);
    server.terminate();
    env.assert_pool_check_clean();

    zero_file(&d0);
    let degraded = status(&env);
    assert!(degraded.contains("DEGRADED"), "{degraded}");
    assert_volume_is(&env, &source);
}

#[test]
fn replace_a_deleted_side_then_detach_the_other() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    env.create_volume("tank/vol", "32M", &[]);
    let source = env.path("source.img");
    random_file(&source, 32 * MIB, 12);
    let mut server = env.serve();
    qemu_copy_in(&source, &server.uri("tank/vol"));
    server.terminate();

    let (d0, d1, d2) = (env.dev("d0.img"), env.dev("d1.img"), env.dev("d2.img"));
    std::fs::remove_file(&d1).unwrap();
    // One-shot (no server): the command waits for the resilver and the detach of the old side.
    let out = env.ok(&["pool", "replace", "--size", "256M", "tank", &d1, &d2]);
    assert!(out.contains("resilvered"), "{out}");
    let replaced = status(&env);
    assert!(
        replaced.contains("state: ONLINE")
            && replaced.contains(&d2)
            && !replaced.contains("d1.img"),
        "{replaced}"
    );
    env.assert_pool_check_clean();

    // d2 is complete now, so d0 may leave; then d2 is a single device and may not.
    env.ok(&["pool", "detach", "tank", &d0]);
    let single = status(&env);
    assert!(
        !single.contains("mirror") && !single.contains("d0.img"),
        "{single}"
    );
    let refused = env.cairn(&["pool", "detach", "tank", &d2]).failed();
    assert!(
        refused.stderr.contains("not a side of a mirror"),
        "{}",
        refused.describe()
    );
    env.assert_pool_check_clean();
    std::fs::remove_file(&d0).unwrap();
    assert_volume_is(&env, &source);
}

#[test]
fn a_resilver_killed_midway_resumes_when_served_again() {
    let _heavy = heavy();
    let env = Env::new();
    let (d0, d1) = (env.dev("d0.img"), env.dev("d1.img"));
    env.ok(&["pool", "create", "--size", "256M", "tank", &d0]);
    env.create_volume("tank/vol", "48M", &[]);
    let source = env.path("source.img");
    random_file(&source, 48 * MIB, 13);
    let mut server = env.serve();
    qemu_copy_in(&source, &server.uri("tank/vol"));

    // Slowed down so the kill lands in the middle.
    env.ok(&[
        "pool",
        "attach",
        "--size",
        "256M",
        "--resilver-rate",
        "4M",
        "tank",
        &d0,
        &d1,
    ]);
    let started = Instant::now();
    loop {
        let status = status(&env);
        assert!(
            !status.contains("scan: resilvered"),
            "finished before the kill:\n{status}"
        );
        if resilver_percent(&status).is_some_and(|percent| percent >= 20) {
            assert!(status.contains("(resilvering)"), "{status}");
            break;
        }
        assert!(started.elapsed() < RESILVER_LIMIT, "no progress:\n{status}");
        std::thread::sleep(Duration::from_millis(100));
    }
    server.kill();

    // What the killed server had recorded: a resilver part way through.
    let recorded = status(&env);
    let percent = resilver_percent(&recorded)
        .unwrap_or_else(|| panic!("no resilver in progress after the kill:\n{recorded}"));
    assert!(percent > 0 && percent < 100, "{recorded}");

    let mut server = env.serve();
    assert!(
        server.stderr().contains("resumed") || server.stdout().contains("resumed"),
        "{}",
        server.logs()
    );
    wait_resilvered(&env);
    server.terminate();
    env.assert_pool_check_clean();
    zero_file(&d0);
    assert_volume_is(&env, &source);
}
