//! Issue 36's round trip, as a user runs it, through a running server: a filesystem filled
//! with a tar of part of /usr, files fsx left, hard links, symlinks, a sparse file, xattrs and
//! POSIX ACLs, and a volume holding an ext4 image (`mkfs.ext4 -d`, written over NBD by
//! `qemu-img convert`), each sent in full into a second pool, then by 10 incrementals with
//! changes between (more files extracted, fsx again, renames, unlinks, truncations, modes,
//! owners, xattrs and ACLs changed; random writes to the volume), then by an incremental from
//! a bookmark whose snapshot was destroyed. After every receive the received filesystem,
//! FUSE-mounted, is walked beside the source's snapshot (`.cairn/snapshot/NAME` under the
//! source's mount): every entry's type, mode, owner, size, modification and change times (to
//! the nanosecond), link count, symlink target, xattrs (ACLs are among them) and contents
//! equal; the received volume snapshot equals the source's byte for byte (`qemu-img compare`
//! over NBD). Both pools check clean at the end.
//!
//! Needs root, /dev/fuse, tar, fsx, setfacl (acl), mkfs.ext4 (e2fsprogs) and qemu-img.

mod nbd_common;

use nbd_common::*;
use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const ROUNDS: u64 = 10;

/// Parts of /usr extracted into the filesystem at first (a few thousand files, symlinks and
/// hard links among them), and one of `USR_PARTS_LATER` every third round.
const USR_PARTS_FIRST: [&str; 3] = ["include/linux", "share/zoneinfo", "share/i18n"];
const USR_PARTS_LATER: [&str; 3] = ["share/perl5", "include/x86_64-linux-gnu", "share/man/man3"];

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in a test path")
}

/// `tar -C /usr -cf - PARTS | tar -xpf - -C DIR` (owners, modes, times and xattrs kept).
fn extract_usr(parts: &[&str], dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let tar = tool("tar", "tar");
    let script = format!(
        "{tar} -C /usr -cf - {} | {tar} --xattrs -xpf - -C \"$1\"",
        parts.join(" "),
        tar = tar.display()
    );
    let unpack = run_limited(
        Command::new(tool("bash", "bash"))
            .args(["-o", "pipefail", "-c", &script, "extract"])
            .arg(dir),
        Duration::from_secs(300),
    );
    assert!(unpack.success(), "tar into {dir:?}: {}", unpack.describe());
}

/// fsx on `file` (left behind, with whatever size fsx's operations gave it).
fn fsx(file: &Path, seed: u64, operations: u32) {
    let run = run_limited(
        Command::new(fsx_binary())
            .args(["-N", &operations.to_string(), "-S", &seed.to_string()])
            .arg(file),
        Duration::from_secs(300),
    );
    assert!(run.success(), "fsx on {file:?}: {}", run.describe());
}

fn setxattr(path: &Path, name: &str, value: &[u8]) {
    let (path, name) = (c_path(path), CString::new(name).unwrap());
    // SAFETY: valid NUL-terminated strings and a buffer of `value.len()` bytes.
    let rc = unsafe {
        libc::lsetxattr(
            path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(
        rc,
        0,
        "setxattr {name:?}: {}",
        std::io::Error::last_os_error()
    );
}

fn setfacl(args: &[&str], path: &Path) {
    let run = run_limited(
        Command::new(tool("setfacl", "acl")).args(args).arg(path),
        Duration::from_secs(30),
    );
    assert!(run.success(), "setfacl {args:?}: {}", run.describe());
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid)).unwrap();
}

/// The first filling: /usr's first part, fsx files, links, a sparse file, xattrs, ACLs.
fn fill(root: &Path) {
    extract_usr(&USR_PARTS_FIRST, &root.join("usr"));
    let own = root.join("own");
    std::fs::create_dir_all(&own).unwrap();
    for index in 0..3 {
        fsx(&own.join(format!("fsx-{index}")), 100 + index, 3000);
    }
    std::fs::write(own.join("linked"), b"one inode, three names").unwrap();
    std::fs::hard_link(own.join("linked"), own.join("linked-2")).unwrap();
    std::fs::hard_link(own.join("linked"), root.join("linked-3")).unwrap();
    std::os::unix::fs::symlink("../usr/include/linux/types.h", own.join("to-stdio")).unwrap();
    std::os::unix::fs::symlink("dangling/nowhere", own.join("dangling")).unwrap();
    let sparse = std::fs::File::create(own.join("sparse")).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"start", 0).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"far", 20 << 20).unwrap();
    drop(sparse);
    setxattr(&own.join("linked"), "user.note", b"kept");
    setxattr(&own.join("sparse"), "user.big", &[0x5a; 3000]);
    setxattr(&own, "user.dir", b"a directory's own");
    setfacl(&["-m", "u:1234:rw,g:5678:r"], &own.join("linked"));
    setfacl(&["-d", "-m", "u:1234:rwx"], &own);
    chown(&own.join("fsx-1"), 1001, 2002);
}

/// One round of changes to the filesystem.
fn change(root: &Path, round: u64) {
    if round % 3 == 1 {
        let part = USR_PARTS_LATER[(round / 3) as usize % USR_PARTS_LATER.len()];
        extract_usr(&[part], &root.join(format!("usr-{round}")));
    }
    let own = root.join("own");
    fsx(&own.join(format!("fsx-{}", round % 3)), round * 7, 1500);
    std::fs::write(own.join(format!("new-{round}")), vec![round as u8; 70_000]).unwrap();
    if round > 1 {
        let previous = own.join(format!("new-{}", round - 1));
        std::fs::rename(&previous, own.join(format!("moved-{round}"))).unwrap();
        std::fs::hard_link(own.join("linked"), own.join(format!("linked-r{round}"))).unwrap();
        setxattr(
            &own.join("linked"),
            "user.round",
            format!("{round}").as_bytes(),
        );
        setfacl(
            &["-m", &format!("u:{}:r", 3000 + round)],
            &own.join("linked"),
        );
        let sparse = std::fs::OpenOptions::new()
            .write(true)
            .open(own.join("sparse"))
            .unwrap();
        sparse.set_len((10 + round) << 20).unwrap();
        std::os::unix::fs::FileExt::write_at(&sparse, b"mid", (round << 20) + 17).unwrap();
        chown(&own.join(format!("moved-{round}")), 4000 + round as u32, 10);
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o600 + round as u32 % 8);
        std::fs::set_permissions(own.join("fsx-2"), mode).unwrap();
    }
    if round > 2 {
        std::fs::remove_file(own.join(format!("linked-r{}", round - 1))).unwrap();
        std::fs::remove_file(own.join(format!("moved-{}", round - 1))).unwrap();
    }
    if round.is_multiple_of(3) {
        // A /usr part extracted two rounds ago goes again.
        std::fs::remove_dir_all(root.join(format!("usr-{}", round - 2))).unwrap();
    }
}

/// `(name, value)` of every xattr of `path` (not following a symlink), sorted.
fn xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let at = c_path(path);
    let mut names = vec![0u8; 64 << 10];
    // SAFETY: a valid path and a buffer of `names.len()` bytes.
    let len = unsafe { libc::llistxattr(at.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(
        len >= 0,
        "listxattr {path:?}: {}",
        std::io::Error::last_os_error()
    );
    names.truncate(len as usize);
    let mut out = Vec::new();
    for name in names
        .split(|&byte| byte == 0)
        .filter(|name| !name.is_empty())
    {
        let c_name = CString::new(name).unwrap();
        let mut value = vec![0u8; 64 << 10];
        // SAFETY: valid strings and a buffer of `value.len()` bytes.
        let len = unsafe {
            libc::lgetxattr(
                at.as_ptr(),
                c_name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        assert!(
            len >= 0,
            "getxattr {path:?} {c_name:?}: {}",
            std::io::Error::last_os_error()
        );
        value.truncate(len as usize);
        out.push((name.to_vec(), value));
    }
    out.sort();
    out
}

fn sorted_names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("readdir {dir:?}: {err}"))
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    names
}

/// Walks `a` and `b` side by side; returns the number of entries compared.
fn assert_same_tree(a: &Path, b: &Path, what: &str) -> u64 {
    let (meta_a, meta_b) = (
        std::fs::symlink_metadata(a).unwrap(),
        std::fs::symlink_metadata(b).unwrap(),
    );
    let facts = |m: &std::fs::Metadata| {
        (
            m.mode(),
            m.uid(),
            m.gid(),
            m.nlink(),
            m.size(),
            (m.mtime(), m.mtime_nsec()),
            (m.ctime(), m.ctime_nsec()),
        )
    };
    assert_eq!(
        facts(&meta_a),
        facts(&meta_b),
        "{what}: {a:?} and {b:?} differ"
    );
    assert_eq!(
        xattrs(a),
        xattrs(b),
        "{what}: xattrs of {a:?} and {b:?} differ"
    );
    let kind = meta_a.file_type();
    if kind.is_symlink() {
        assert_eq!(
            std::fs::read_link(a).unwrap(),
            std::fs::read_link(b).unwrap(),
            "{what}"
        );
        return 1;
    }
    if kind.is_file() {
        assert!(
            std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
            "{what}: the contents of {a:?} and {b:?} differ"
        );
        return 1;
    }
    let names = sorted_names(a);
    assert_eq!(
        names,
        sorted_names(b),
        "{what}: the entries of {a:?} and {b:?} differ"
    );
    1 + names
        .iter()
        .map(|name| assert_same_tree(&a.join(name), &b.join(name), what))
        .sum::<u64>()
}

/// `cairn send ARGS | cairn receive TARGET` through files (the server writes and reads them).
fn send_receive(env: &Env, send_args: &[&str], target: &str) {
    let file = env.path("stream");
    let out = std::fs::File::create(&file).unwrap();
    let mut send = env.cairn_command();
    send.arg("send")
        .args(send_args)
        .stdout(out)
        .stdin(Stdio::null());
    let sent = outcome(send);
    assert!(sent.success, "send {send_args:?}: {}", sent.stderr);
    let mut receive = env.cairn_command();
    receive
        .args(["receive", target])
        .stdin(std::fs::File::open(&file).unwrap())
        .stdout(Stdio::null());
    let received = outcome(receive);
    assert!(
        received.success,
        "receive {target} of {send_args:?}: {}",
        received.stderr
    );
}

/// The ext4 image the volume starts with: `mkfs.ext4 -d` of a small tree.
fn ext4_image(env: &Env) -> PathBuf {
    let tree = env.path("ext4-tree");
    std::fs::create_dir_all(tree.join("etc")).unwrap();
    for index in 0..50u8 {
        std::fs::write(
            tree.join(format!("etc/f{index}")),
            vec![index; 1000 * usize::from(index)],
        )
        .unwrap();
    }
    let image = env.path("ext4.img");
    let run = run_limited(
        Command::new(tool("mkfs.ext4", "e2fsprogs"))
            .args(["-q", "-F", "-d"])
            .arg(&tree)
            .arg(&image)
            .arg("48M"),
        Duration::from_secs(60),
    );
    assert!(run.success(), "mkfs.ext4: {}", run.describe());
    image
}

/// Compares the received side after a receive of `snapshot` (the name after `@`).
fn assert_round_equal(env: &Env, server: &Server, source_mnt: &Path, snapshot: &str) {
    let copy_mnt = env.path("copy-mnt");
    let _cleanup = Unmount(copy_mnt.clone());
    env.ok(&["mount", "backup/fs", copy_mnt.to_str().unwrap()]);
    let source = source_mnt.join(".cairn/snapshot").join(snapshot);
    let entries = assert_same_tree(&source, &copy_mnt, snapshot);
    assert!(
        entries > 1000,
        "{snapshot}: only {entries} entries compared"
    );
    env.ok(&["unmount", "backup/fs"]);
    run(
        &qemu_img(),
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            &server.uri(&format!("tank/vol@{snapshot}")),
            &server.uri(&format!("backup/vol@{snapshot}")),
        ],
    )
    .ok();
}

/// Random writes to the volume over NBD.
fn change_volume(server: &Server, round: u64) {
    let commands: Vec<String> = (0..8)
        .map(|index| {
            let offset = (round * 7_919 + index * 104_729) % (60 << 20);
            format!(
                "write -P {} {offset} {}",
                (round * 8 + index) % 250 + 1,
                4096 * (1 + index)
            )
        })
        .chain(["flush".to_string()])
        .collect();
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    qemu_io_ok(&server.uri("tank/vol"), &commands);
}

#[test]
fn a_tree_and_a_volume_survive_a_full_send_ten_incrementals_and_one_from_a_bookmark() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("2G");
    env.ok(&[
        "pool",
        "create",
        "--size",
        "2G",
        "backup",
        &env.dev("b0.img"),
    ]);
    env.ok(&["create", "-o", "atime=off", "tank/fs"]);
    env.create_volume("tank/vol", "64M", &["volblocksize=16K"]);
    let mut server = env.serve();
    let image = ext4_image(&env);
    qemu_copy_in(&image, &server.uri("tank/vol"));
    let mnt = env.path("mnt");
    let _cleanup = Unmount(mnt.clone());
    env.ok(&["mount", "tank/fs", mnt.to_str().unwrap()]);
    fill(&mnt);
    env.ok(&["snapshot", "tank/fs@s0", "tank/vol@s0"]);
    send_receive(&env, &["tank/fs@s0"], "backup/fs");
    send_receive(&env, &["tank/vol@s0"], "backup/vol");
    // Reads of the replica must not write to it, or the next incremental would need -F.
    env.ok(&["set", "atime=off", "backup/fs"]);
    assert_round_equal(&env, &server, &mnt, "s0");
    for round in 1..=ROUNDS {
        change(&mnt, round);
        change_volume(&server, round);
        let (fs_snap, vol_snap) = (format!("tank/fs@s{round}"), format!("tank/vol@s{round}"));
        env.ok(&["snapshot", &fs_snap, &vol_snap]);
        let from = format!("@s{}", round - 1);
        send_receive(&env, &["-i", &from, &fs_snap], "backup/fs");
        send_receive(&env, &["-i", &from, &vol_snap], "backup/vol");
        assert_round_equal(&env, &server, &mnt, &format!("s{round}"));
    }
    // The last source snapshot goes; its bookmark is enough for the next incremental.
    let last = format!("s{ROUNDS}");
    env.ok(&["bookmark", &format!("tank/fs@{last}"), "tank/fs#last"]);
    env.ok(&["bookmark", &format!("tank/vol@{last}"), "tank/vol#last"]);
    change(&mnt, ROUNDS + 1);
    change_volume(&server, ROUNDS + 1);
    env.ok(&["snapshot", "tank/fs@final", "tank/vol@final"]);
    env.ok(&["destroy", &format!("tank/fs@{last}")]);
    env.ok(&["destroy", &format!("tank/vol@{last}")]);
    send_receive(&env, &["-i", "#last", "tank/fs@final"], "backup/fs");
    send_receive(&env, &["-i", "#last", "tank/vol@final"], "backup/vol");
    assert_round_equal(&env, &server, &mnt, "final");
    let guid = |name: &str| env.ok(&["get", "-H", "-p", "-o", "value", "guid", name]);
    assert_eq!(guid("tank/fs@final"), guid("backup/fs@final"));
    env.ok(&["unmount", "tank/fs"]);
    server.terminate();
    env.assert_pool_check_clean();
    let backup = env.cairn(&["pool", "check", "backup"]);
    assert!(
        backup.success() && backup.stdout.contains("no problems found"),
        "{}",
        backup.describe()
    );
}
