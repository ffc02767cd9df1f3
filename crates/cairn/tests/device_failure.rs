//! A device that starts failing every write while `cairn serve` runs (issue 13): a mirror goes
//! DEGRADED and keeps serving; a pool with no redundancy left suspends its I/O (clients get
//! EIO, nothing acknowledged is lost) and resumes after `cairn pool clear` once the device is
//! back, as ZFS's `failmode=wait`.
//!
//! The failing device is real to cairn: a file served by the kernel's FUSE (`nbdfuse`, Debian
//! package libnbd-bin) from an nbdkit `file` export behind nbdkit's `error` filter (package
//! nbdkit), which fails every write (or every operation) with EIO while a trigger file exists.
//! Removing the trigger brings the device back.
//!
//! A mirror side that failed every I/O while writes went on and then came back (issue 32,
//! point 19) must be resilvered for what it missed — after `pool clear` and after a restart —
//! shown as resilvering meanwhile; proved by detaching the other side and reading every byte.

mod failing_disk;
mod nbd_common;

use failing_disk::FailingDisk;
use nbd_common::*;
use std::time::{Duration, Instant};

const EXPORT: &str = "tank/vol";
const MIB: u64 = 1 << 20;

/// `write -P PATTERN OFFSET 1M` then `flush`: durable when it succeeds.
fn write_durably(uri: &str, pattern: u8, mib: u64) -> Run {
    qemu_io_run(
        uri,
        &[
            &format!("write -P {pattern:#x} {} {MIB}", mib * MIB),
            "flush",
        ],
    )
}

fn assert_pattern(uri: &str, pattern: u8, mib: u64) {
    qemu_io_ok(uri, &[&format!("read -P {pattern:#x} {} {MIB}", mib * MIB)]);
}

fn pool_status(env: &Env) -> String {
    env.ok(&["pool", "status", "tank"])
}

#[test]
fn a_pool_without_redundancy_suspends_and_resumes_after_clear() {
    let env = Env::new();
    let disk = FailingDisk::new(&env, "d0", 256 * MIB);
    env.ok(&["pool", "create", "tank", &disk.path()]);
    env.create_volume(EXPORT, "32M", &[]);
    let mut server = env.serve();
    let uri = server.uri(EXPORT);

    let before = write_durably(&uri, 0x11, 0);
    assert!(before.success(), "{}", before.describe());

    // The device fails every write: the flush cannot be made durable, the pool suspends.
    disk.fail_writes();
    let failed = write_durably(&uri, 0x22, 1);
    assert!(
        !failed.success(),
        "a flush on a dead device succeeded:\n{}",
        failed.describe()
    );
    let status = pool_status(&env);
    assert!(
        status.contains("SUSPENDED") && status.contains("pool clear"),
        "{status}"
    );
    // New writes are refused at once, not hung.
    let refused = qemu_io_run(&uri, &[&format!("write -P 0x33 {} {MIB}", 2 * MIB)]);
    assert!(!refused.success(), "{}", refused.describe());

    // The device is back: clear resumes the pool, the suspended txg is written.
    disk.heal();
    env.ok(&["pool", "clear", "tank"]);
    let status = pool_status(&env);
    assert!(
        status.contains("ONLINE") && !status.contains("SUSPENDED"),
        "{status}"
    );
    let after = write_durably(&uri, 0x44, 3);
    assert!(after.success(), "writes after clear:\n{}", after.describe());

    // Everything acknowledged survives a restart, and the pool is consistent.
    server.terminate();
    env.assert_pool_check_clean();
    let server = env.serve();
    let uri = server.uri(EXPORT);
    assert_pattern(&uri, 0x11, 0);
    assert_pattern(&uri, 0x44, 3);
    // The write whose flush failed was in the suspended txg, which was written after all.
    assert_pattern(&uri, 0x22, 1);
}

#[test]
fn a_mirror_losing_a_side_degrades_and_keeps_serving() {
    let env = Env::new();
    let disk = FailingDisk::new(&env, "d0", 256 * MIB);
    let plain = env.dev("d1.img");
    std::fs::File::create(&plain)
        .and_then(|file| file.set_len(256 * MIB))
        .expect("plain side");
    env.ok(&["pool", "create", "tank", "mirror", &disk.path(), &plain]);
    env.create_volume(EXPORT, "32M", &[]);
    let server = env.serve();
    let uri = server.uri(EXPORT);
    assert!(write_durably(&uri, 0x11, 0).success());

    disk.fail_writes();
    for mib in 1..4 {
        let run = write_durably(&uri, 0x20 + mib as u8, mib);
        assert!(
            run.success(),
            "a degraded mirror refused a write:\n{}",
            run.describe()
        );
    }
    let status = pool_status(&env);
    assert!(
        status.contains("DEGRADED") && status.contains("FAULTED"),
        "{status}"
    );
    assert!(!status.contains("SUSPENDED"), "{status}");
    assert_pattern(&uri, 0x11, 0);
    for mib in 1..4 {
        assert_pattern(&uri, 0x20 + mib as u8, mib);
    }
    // The fault is an event the server passes on to its user (libraries print nothing).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !server
        .stderr()
        .contains("FAULTED after a failed write or flush")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        server
            .stderr()
            .contains("FAULTED after a failed write or flush"),
        "the fault was not told:\n{}",
        server.logs()
    );
}

/// A mirror of a disk that is about to fail every I/O (d0) and a plain file (d1), with 2 MiB
/// written before and 6 MiB while d0 fails; returns what each MiB holds.
fn mirror_with_a_side_out(env: &Env, disk: &FailingDisk, server: &Server) -> Vec<(u64, u8)> {
    let uri = server.uri(EXPORT);
    let mut written = Vec::new();
    for mib in 0..2 {
        let pattern = 0x10 + mib as u8;
        assert!(write_durably(&uri, pattern, mib).success());
        written.push((mib, pattern));
    }
    disk.fail_writes();
    for mib in 2..8 {
        let pattern = 0x30 + mib as u8;
        let run = write_durably(&uri, pattern, mib);
        assert!(
            run.success(),
            "a degraded mirror refused a write:\n{}",
            run.describe()
        );
        written.push((mib, pattern));
    }
    let status = pool_status(env);
    assert!(status.contains("DEGRADED"), "{status}");
    written
}

fn mirror_env() -> (Env, FailingDisk, String) {
    let env = Env::new();
    let disk = FailingDisk::failing(&env, "d0", 256 * MIB, true);
    let plain = env.dev("d1.img");
    std::fs::File::create(&plain)
        .and_then(|file| file.set_len(256 * MIB))
        .expect("plain side");
    env.ok(&["pool", "create", "tank", "mirror", &disk.path(), &plain]);
    env.create_volume(EXPORT, "32M", &[]);
    (env, disk, plain)
}

/// Polls `pool status` until the resilver of `device` is reported done and the side counts
/// again (the record of the end is made in a txg; the side is read only once that txg is
/// durable, so for a moment status can show both).
fn wait_resilvered(env: &Env, device: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = pool_status(env);
        if status.contains("scan: resilvered") && !status.contains("(resilvering)") {
            assert!(status.contains(device), "{status}");
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the returned side was not resilvered:\n{status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The returned side alone: the other one detached, the server restarted (nothing cached),
/// every MiB reads back, and the pool checks clean.
fn assert_returned_side_alone_holds(
    env: &Env,
    mut server: Server,
    plain: &str,
    written: &[(u64, u8)],
) {
    env.ok(&["pool", "detach", "tank", plain]);
    server.terminate();
    env.assert_pool_check_clean();
    let server = env.serve();
    let uri = server.uri(EXPORT);
    for &(mib, pattern) in written {
        assert_pattern(&uri, pattern, mib);
    }
}

#[test]
fn a_side_back_after_clear_is_resilvered_before_it_counts() {
    let (env, disk, plain) = mirror_env();
    let server = env.serve();
    let written = mirror_with_a_side_out(&env, &disk, &server);

    disk.heal();
    env.ok(&["pool", "clear", "tank", "--resilver-rate", "1M"]);
    // Back, but resilvering: not read, not counted as a copy.
    let status = pool_status(&env);
    assert!(
        status.contains("(resilvering)") && status.contains("resilver in progress"),
        "{status}"
    );
    assert!(status.contains("DEGRADED"), "{status}");
    // Detaching the only complete side is refused meanwhile.
    let refused = env.cairn(&["pool", "detach", "tank", &plain]);
    assert!(!refused.success(), "{}", refused.describe());
    let done = wait_resilvered(&env, &disk.path());
    assert!(done.contains("state: ONLINE"), "{done}");
    assert!(!done.contains("(resilvering)"), "{done}");
    assert_returned_side_alone_holds(&env, server, &plain, &written);
}

#[test]
fn a_side_back_after_a_restart_is_resilvered_before_it_counts() {
    let (env, disk, plain) = mirror_env();
    let mut server = env.serve();
    let written = mirror_with_a_side_out(&env, &disk, &server);
    server.terminate();

    disk.heal();
    let server = env.serve();
    let done = wait_resilvered(&env, &disk.path());
    assert!(done.contains("state: ONLINE"), "{done}");
    assert_returned_side_alone_holds(&env, server, &plain, &written);
}
