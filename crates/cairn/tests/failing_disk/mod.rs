//! A device that fails on demand, for tests of cairn under device failure: a file served by
//! the kernel's FUSE (`nbdfuse`, Debian package libnbd-bin) from an nbdkit `file` export behind
//! nbdkit's `error` filter (package nbdkit), which fails every write (or every operation) with
//! EIO while a trigger file exists. Used beside `nbd_common` (`mod failing_disk; mod
//! nbd_common;`) by `device_failure.rs` and `nfs_verifier.rs`.

#![allow(dead_code)]

use super::nbd_common::*;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A FUSE-mounted file whose writes (or, `every_op`, all operations) fail while `trigger`
/// exists.
pub struct FailingDisk {
    mount_dir: PathBuf,
    trigger: PathBuf,
    nbdfuse: Child,
}

impl FailingDisk {
    pub fn new(env: &Env, name: &str, size_bytes: u64) -> FailingDisk {
        FailingDisk::failing(env, name, size_bytes, false)
    }

    pub fn failing(env: &Env, name: &str, size_bytes: u64, every_op: bool) -> FailingDisk {
        let backing = env.path(&format!("{name}.backing"));
        std::fs::File::create(&backing)
            .and_then(|file| file.set_len(size_bytes))
            .expect("backing file");
        let mount_dir = env.path(&format!("{name}.mnt"));
        std::fs::create_dir_all(&mount_dir).expect("mount dir");
        let trigger = env.path(&format!("{name}.fail"));
        tool("nbdkit", "nbdkit");
        let prefix = if every_op { "error" } else { "error-pwrite" };
        let nbdfuse = Command::new(tool("nbdfuse", "libnbd-bin"))
            .arg(mount_dir.join("disk"))
            .args(["--command", "nbdkit", "-s", "--filter=error", "file"])
            .arg(&backing)
            .arg(format!("{prefix}=EIO"))
            .arg(format!("{prefix}-rate=100%"))
            .arg(format!("{prefix}-file={}", trigger.display()))
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

    pub fn path(&self) -> String {
        self.mount_dir.join("disk").display().to_string()
    }

    pub fn fail_writes(&self) {
        std::fs::write(&self.trigger, b"").expect("trigger");
    }

    pub fn heal(&self) {
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
