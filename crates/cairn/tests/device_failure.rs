//! A device that starts failing every write while `cairn serve` runs (issue 13): a mirror goes
//! DEGRADED and keeps serving; a pool with no redundancy left suspends its I/O (clients get
//! EIO, nothing acknowledged is lost) and resumes after `cairn pool clear` once the device is
//! back, as ZFS's `failmode=wait`.
//!
//! The failing device is real to cairn: a file served by the kernel's FUSE (`nbdfuse`, Debian
//! package libnbd-bin) from an nbdkit `file` export behind nbdkit's `error` filter (package
//! nbdkit), which fails every write with EIO while a trigger file exists. Removing the trigger
//! brings the device back.

mod nbd_common;

use nbd_common::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const EXPORT: &str = "tank/vol";
const MIB: u64 = 1 << 20;

/// A FUSE-mounted file whose writes fail while `trigger` exists.
struct FailingDisk {
    mount_dir: PathBuf,
    trigger: PathBuf,
    nbdfuse: Child,
}

impl FailingDisk {
    fn new(env: &Env, name: &str, size_bytes: u64) -> FailingDisk {
        let backing = env.path(&format!("{name}.backing"));
        std::fs::File::create(&backing)
            .and_then(|file| file.set_len(size_bytes))
            .expect("backing file");
        let mount_dir = env.path(&format!("{name}.mnt"));
        std::fs::create_dir_all(&mount_dir).expect("mount dir");
        let trigger = env.path(&format!("{name}.fail"));
        tool("nbdkit", "nbdkit");
        let nbdfuse = Command::new(tool("nbdfuse", "libnbd-bin"))
            .arg(mount_dir.join("disk"))
            .args(["--command", "nbdkit", "-s", "--filter=error", "file"])
            .arg(&backing)
            .args(["error-pwrite=EIO", "error-pwrite-rate=100%"])
            .arg(format!("error-pwrite-file={}", trigger.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nbdfuse");
        let disk = FailingDisk {
            mount_dir,
            trigger,
            nbdfuse,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::metadata(disk.path()).map(|meta| meta.len()).ok() != Some(size_bytes) {
            assert!(
                Instant::now() < deadline,
                "nbdfuse did not mount {}",
                disk.path()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        disk
    }

    fn path(&self) -> String {
        self.mount_dir.join("disk").display().to_string()
    }

    fn fail_writes(&self) {
        std::fs::write(&self.trigger, b"").expect("trigger");
    }

    fn heal(&self) {
        std::fs::remove_file(&self.trigger).expect("remove trigger");
    }
}

impl Drop for FailingDisk {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mount_dir)
            .status();
        let _ = self.nbdfuse.kill();
        let _ = self.nbdfuse.wait();
    }
}

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
