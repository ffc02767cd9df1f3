//! The server's account of its FUSE mounts against the kernel's (issue 32): a plain `umount`
//! is noticed (no "already mounted", no EINVAL at `cairn unmount`, export at the first try);
//! an export refused because a mount is busy names it and leaves it mounted and known (no
//! second mount stacked on it), and a successful export says what it unmounted; a server
//! detaches at start only the dead mounts of its own state directory.
//! Mounting needs root and /dev/fuse (CI runs as root; .ci/run installs fuse3).

mod nbd_common;

use nbd_common::*;
use std::path::Path;

/// The fuse.cairn mounts at `mountpoint`, from /proc/self/mountinfo.
fn cairn_mounts_at(mountpoint: &Path) -> usize {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table
        .lines()
        .filter(|line| {
            let Some((before, after)) = line.split_once(" - ") else {
                return false;
            };
            before.split(' ').nth(4) == mountpoint.to_str() && after.starts_with("fuse.cairn ")
        })
        .count()
}

fn umount(mountpoint: &Path) -> Run {
    run_limited(
        std::process::Command::new(tool("umount", "mount")).arg(mountpoint),
        std::time::Duration::from_secs(30),
    )
}

/// After an export: the server stopped, the pool imported by this process and checked.
fn imported_again_clean(env: &Env, server: &mut Server) {
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    let devs = env.path("devs");
    env.ok(&["pool", "import", "-d", devs.to_str().unwrap(), "tank"]);
    env.assert_pool_check_clean();
}

#[test]
fn a_plain_umount_is_noticed() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    std::fs::write(at.join("kept"), b"kept").unwrap();
    let run = umount(&at);
    assert!(run.success(), "umount: {}", run.describe());
    assert_eq!(cairn_mounts_at(&at), 0);
    // cairn unmount after it: not an error, and it says what happened.
    let out = env.ok(&["unmount", "tank/fs"]);
    assert!(out.contains("unmounted from outside"), "{out}");
    // Mounted again at once, after another plain umount, without `cairn unmount`.
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    assert_eq!(std::fs::read(at.join("kept")).unwrap(), b"kept");
    let run = umount(&at);
    assert!(run.success(), "umount: {}", run.describe());
    let out = env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    assert!(out.contains("mounted tank/fs"), "{out}");
    assert_eq!(cairn_mounts_at(&at), 1);
    // And the export works at the first try after a plain umount.
    let run = umount(&at);
    assert!(run.success(), "umount: {}", run.describe());
    env.ok(&["pool", "export", "tank"]);
    imported_again_clean(&env, &mut server);
}

#[test]
fn a_busy_export_names_the_mount_and_leaves_it_known() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    let busy = std::fs::File::create(at.join("open")).unwrap();
    let refused = env.cairn(&["pool", "export", "tank"]);
    assert!(!refused.success(), "export with a busy mount succeeded");
    let said = refused.describe();
    assert!(
        said.contains("tank/fs") && said.contains(at.to_str().unwrap()),
        "the refusal does not name the busy mount: {said}"
    );
    assert_eq!(cairn_mounts_at(&at), 1);
    // The server still knows it is mounted: no second mount stacked on it.
    let again = env.cairn(&["mount", "tank/fs", at.to_str().unwrap()]);
    assert!(
        !again.success(),
        "mounted a second time: {}",
        again.describe()
    );
    assert!(
        again.describe().contains("already mounted"),
        "{}",
        again.describe()
    );
    assert_eq!(cairn_mounts_at(&at), 1);
    // Still served: the open file takes writes.
    std::io::Write::write_all(&mut &busy, b"still served").unwrap();
    busy.sync_all().unwrap();
    drop(busy);
    // Now the export goes, and says what it unmounted.
    let out = env.ok(&["pool", "export", "tank"]);
    assert!(
        out.contains("unmounted tank/fs") && out.contains(at.to_str().unwrap()),
        "the export does not say what it unmounted: {out}"
    );
    assert_eq!(cairn_mounts_at(&at), 0);
    imported_again_clean(&env, &mut server);
}

#[test]
fn a_server_detaches_only_its_own_dead_mounts() {
    let _heavy = heavy();
    let ours = Env::new();
    let theirs = Env::new();
    let (ours_at, _ours_cleanup, mut ours_server) = served_mount(&ours, "tank/fs", &[]);
    let (theirs_at, _theirs_cleanup, mut theirs_server) = served_mount(&theirs, "tank/fs", &[]);
    // Both servers killed: both mounts dead (ENOTCONN).
    ours_server.kill();
    theirs_server.kill();
    assert_eq!(cairn_mounts_at(&ours_at), 1);
    assert_eq!(cairn_mounts_at(&theirs_at), 1);
    let mut restarted = ours.serve();
    assert_eq!(
        cairn_mounts_at(&ours_at),
        0,
        "the server left its own dead mount"
    );
    assert_eq!(
        cairn_mounts_at(&theirs_at),
        1,
        "the server detached another state directory's dead mount"
    );
    restarted.stop(libc::SIGINT, std::time::Duration::from_secs(60));
}

/// The mount options of the mount at `mountpoint` (mountinfo's per-mount field).
fn mount_options_at(mountpoint: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    // The last line for the path: the mount on top.
    table
        .lines()
        .rev()
        .find_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (fields.get(4) == mountpoint.to_str().as_ref())
                .then(|| fields[5].split(',').map(str::to_string).collect())
        })
        .unwrap_or_default()
}

fn mounted_column(env: &Env) -> String {
    env.ok(&["list", "-H", "-t", "filesystem", "-o", "name,mounted"])
}

/// `readonly`, `devices`, `setuid` and `exec` are the mount's flags (at mount, and changed
/// live by `cairn set`); `cairn mount -o` overrides them for one mount; `mounted` says what
/// is mounted; `mount -t fuse.cairn` works through the helper `cairn install-mount-helper`
/// makes.
#[test]
fn mount_options_follow_properties_and_mount_by_type_works() {
    use std::os::unix::fs::PermissionsExt;
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) =
        served_mount(&env, "tank/fs", &["exec=off", "setuid=off", "devices=off"]);
    let options = mount_options_at(&at);
    for flag in ["noexec", "nosuid", "nodev", "rw"] {
        assert!(
            options.contains(&flag.to_string()),
            "{flag} not in {options:?}"
        );
    }
    let script = at.join("run.sh");
    std::fs::write(&script, b"#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = std::process::Command::new(&script).output();
    assert_eq!(
        run.as_ref().err().and_then(std::io::Error::raw_os_error),
        Some(libc::EACCES),
        "ran a program on an exec=off mount: {run:?}"
    );
    // Changed live.
    env.ok(&["set", "exec=on", "tank/fs"]);
    assert!(!mount_options_at(&at).contains(&"noexec".to_string()));
    let ran = std::process::Command::new(&script).output().unwrap();
    assert_eq!(ran.stdout, b"ran\n");
    env.ok(&["set", "readonly=on", "tank/fs"]);
    assert!(mount_options_at(&at).contains(&"ro".to_string()));
    let refused = std::fs::write(at.join("new"), b"x").unwrap_err();
    assert_eq!(refused.raw_os_error(), Some(libc::EROFS), "{refused}");
    env.ok(&["set", "readonly=off", "tank/fs"]);
    std::fs::write(at.join("new"), b"x").unwrap();

    // `-o` for one mount, over the properties.
    env.ok(&["create", "tank/other"]);
    let other = env.path("other");
    let _other_cleanup = Unmount(other.clone());
    assert!(mounted_column(&env).contains("tank/other\tno"));
    env.ok(&[
        "mount",
        "-o",
        "ro,noexec",
        "tank/other",
        other.to_str().unwrap(),
    ]);
    let options = mount_options_at(&other);
    assert!(options.contains(&"ro".to_string()) && options.contains(&"noexec".to_string()));
    assert_eq!(
        env.ok(&["get", "-H", "-o", "value", "readonly,mounted", "tank/other"])
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["off", "yes"]
    );
    let listed = mounted_column(&env);
    assert!(
        listed.contains("tank/fs\tyes") && listed.contains("tank/other\tyes"),
        "{listed}"
    );
    let bad = env.cairn(&["mount", "-o", "frobnicate", "tank/fs", "/nonexistent"]);
    assert!(
        !bad.success() && bad.describe().contains("frobnicate"),
        "{}",
        bad.describe()
    );
    env.ok(&["unmount", "tank/other"]);

    // mount -t fuse.cairn through the helper, options and all.
    env.ok(&["install-mount-helper", "--dir", "/sbin"]);
    let mount = run_limited(
        std::process::Command::new(tool("mount", "mount"))
            .args(["-t", "fuse.cairn", "-o", "nosuid", "tank/other"])
            .arg(&other)
            .env("CAIRN_STATE_DIR", env.state()),
        std::time::Duration::from_secs(60),
    );
    assert!(mount.success(), "mount -t fuse.cairn: {}", mount.describe());
    assert!(mount_options_at(&other).contains(&"nosuid".to_string()));
    assert!(mounted_column(&env).contains("tank/other\tyes"));
    env.ok(&["unmount", "tank/other"]);
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}
