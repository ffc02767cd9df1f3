//! pjdfstest (the POSIX filesystem conformance suite, crates.io `pjdfstest`) on a cairn
//! filesystem mounted through the kernel's FUSE: every test it runs must pass. What it skips
//! is listed in the assertion message when the count changes: remounting read-only (EROFS
//! tests, not allowed by the configuration) and LINK_MAX (not reported by FUSE).
//!
//! `naptime` (the pause between changes whose timestamps are compared) must exceed the
//! filesystem's timestamp granularity, as the suite says: with the kernel's writeback cache
//! the kernel keeps a regular file's ctime and mtime itself, from its clock tick (4 ms at
//! HZ=250), so 10 ms.
//!
//! Needs root, /dev/fuse, the `pjdfstest` binary (`.ci/run` installs it with `cargo install
//! pjdfstest`) and its dummy users `nobody` and `tests` (created here when missing).

mod nbd_common;

use nbd_common::*;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

/// The features of cairn's filesystems the suite may test beyond its defaults.
const CONFIG: &str = r#"
[features]
posix_fallocate = {}
rename_ctime = {}
utimensat = {}
utime_now = {}
[settings]
naptime = 0.01
allow_remount = false
[dummy_auth]
entries = [["nobody", "nogroup"], ["tests", "tests"]]
"#;

/// Skips the suite reports with this configuration on cairn (remount tests and LINK_MAX).
const SKIPPED_EXPECTED: usize = 14;

fn pjdfstest() -> std::path::PathBuf {
    let installed = dirs_cargo_bin().join("pjdfstest");
    if installed.exists() {
        return installed;
    }
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("pjdfstest"))
        .find(|path| path.exists());
    found.unwrap_or_else(|| {
        panic!(
            "pjdfstest is not installed: apt-get install libacl1-dev && cargo install pjdfstest \
             --locked (.ci/run does it); this test does not skip"
        )
    })
}

fn dirs_cargo_bin() -> std::path::PathBuf {
    match std::env::var_os("CARGO_HOME") {
        Some(home) => std::path::PathBuf::from(home).join("bin"),
        None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cargo/bin"),
    }
}

/// Creates the suite's dummy user `tests` (group `tests`) when this machine lacks it.
fn ensure_dummy_users() {
    let has = |name: &str| {
        std::process::Command::new("id")
            .arg(name)
            .output()
            .is_ok_and(|out| out.status.success())
    };
    assert!(has("nobody"), "no user nobody on this machine");
    if !has("tests") {
        let mut child = std::process::Command::new("newusers")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("run newusers (needs root)");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"tests:x:::Dummy User for pjdfstest:/:/usr/sbin/nologin\n")
            .unwrap();
        assert!(child.wait().unwrap().success(), "newusers failed");
    }
}

#[test]
fn pjdfstest_passes_on_a_cairn_mount() {
    let _heavy = heavy();
    let binary = pjdfstest();
    ensure_dummy_users();
    let env = Env::new();
    // The suite switches to other users: they must be able to reach the mount.
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    env.create_pool_of("1G");
    env.ok(&["create", "tank/fs"]);
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    let mut server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    let config = env.path("pjdfstest.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let secondary = env.path("secondary");
    std::fs::create_dir(&secondary).unwrap();
    std::fs::set_permissions(&secondary, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = run_limited(
        std::process::Command::new(&binary)
            .arg("-c")
            .arg(&config)
            .arg("-p")
            .arg(&at)
            .arg("-s")
            .arg(&secondary)
            .current_dir(&at),
        Duration::from_secs(900),
    );
    let output = format!("{}{}", run.stdout, run.stderr);
    let summary = output
        .lines()
        .find(|line| line.contains("Summary:"))
        .unwrap_or_else(|| panic!("no summary from pjdfstest:\n{}", run.describe()))
        .to_string();
    let failed: Vec<&str> = output
        .lines()
        .filter(|line| line.trim_end().ends_with("FAILED"))
        .collect();
    assert!(
        summary.contains(" 0 failed"),
        "{summary}\nfailed:\n{}\n{}",
        failed.join("\n"),
        server.logs()
    );
    let skipped: Vec<&str> = output
        .lines()
        .filter(|line| line.trim_end().ends_with("skipped"))
        .collect();
    assert_eq!(
        skipped.len(),
        SKIPPED_EXPECTED,
        "{summary}\nskipped:\n{}",
        skipped.join("\n")
    );
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, Duration::from_secs(60));
    env.assert_pool_check_clean();
}
