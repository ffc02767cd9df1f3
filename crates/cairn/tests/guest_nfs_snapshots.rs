//! Snapshots over NFS through the Linux kernel's own NFS client (issue 35, point 6), in a
//! throw-away QEMU guest (`cairn-guest`, as `guest_nfs.rs`): the guest mounts a shared
//! filesystem (v3), writes a tree, the host takes a snapshot, the guest changes the tree, and
//! then under `.cairn/snapshot/monday/`: `ls` lists it, `cat` shows a file's old version,
//! `diff -r` finds the snapshot equal to a copy made before the changes (and the live tree
//! not), the snapshot is a device of its own (the client crossed into it as a mount point:
//! it is in /proc/mounts), and `touch` in it fails with EROFS. Then the host destroys the
//! snapshot while the guest holds a file of it open: the guest's next read gets ESTALE (not
//! data, not a hang: every check runs under `timeout 60`), the path ENOENT, the snapshot is
//! gone from the listing, and the mount keeps working and unmounts (the dead snapshot's
//! automount does not hold it busy).
//!
//! The guest and the host take turns through files in a shared directory (`snap-now` →
//! `snapped`, `destroy-now` → `destroyed`). Each check's result is a line `CHECK name ok|FAILED`.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use cairn_guest::{BootOptions, Guest, HOST_ADDRESS, Share};
use nbd_common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Waits until the guest leaves `name` in `share` (or the guest is done).
fn wait_for(share: &Path, name: &str, guest_done: impl Fn() -> bool) -> bool {
    let started = Instant::now();
    while !share.join(name).exists() {
        if guest_done() {
            return false;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the guest never asked for {name}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// The checks the guest script makes, in order.
const CHECKS: &[&str] = &[
    "mount",
    "listed",
    "old-version",
    "diff-snapshot-equals-copy",
    "diff-live-differs",
    "own-device",
    "touch-erofs",
    "open-before-destroy",
    "read-after-destroy-fails",
    "gone-from-listing",
    "path-gone",
    "mount-still-works",
    "umount",
];

#[test]
fn kernel_client_browses_snapshots_and_survives_their_destroy() {
    let _heavy = heavy();
    tool("mount.nfs", "nfs-common");
    tool("diff", "diffutils");
    let guest = Guest::prepare(&guest_cache_dir()).expect("prepare the guest kernel");
    let env = Env::new();
    env.create_pool_of("1G");
    env.ok(&["create", "-o", "sharenfs=no_root_squash", "tank/fs"]);
    let port = free_port();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);
    let share = env.path("share");
    std::fs::create_dir(&share).unwrap();

    let options = format!("vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock");
    let script = format!(
        r#"set -u
MNT=/mnt/cairn
SNAP=$MNT/.cairn/snapshot
check() {{
    name=$1; shift
    if timeout 60 sh -c "$*" > /share/$name.log 2>&1; then echo "CHECK $name ok"; else echo "CHECK $name FAILED"; cat /share/$name.log; fi
}}
wait_for() {{
    n=0
    while [ ! -e /share/$1 ]; do sleep 0.1; n=$((n + 1)); [ $n -lt 3000 ] || return 1; done
}}
mkdir -p $MNT
check mount "mount -t nfs -o {options},retry=0 {HOST_ADDRESS}:/tank/fs $MNT"
mkdir -p $MNT/tree/sub
for i in 1 2 3 4 5 6 7 8; do head -c $((i * 50000)) /dev/urandom > $MNT/tree/f$i; done
cp -a /etc/ssl/. $MNT/tree/sub/
echo "monday's a" > $MNT/a.txt
head -c 3000000 /dev/urandom > $MNT/never-read.bin
cp -a $MNT/tree /tmp/copy
sync
touch /share/snap-now
wait_for snapped
echo "tuesday's a" > $MNT/a.txt
rm $MNT/tree/f3
echo more >> $MNT/tree/f5
check listed "ls $SNAP | grep -qx monday"
check old-version "test \"\$(cat $SNAP/monday/a.txt)\" = \"monday's a\" && test \"\$(cat $MNT/a.txt)\" = \"tuesday's a\""
check diff-snapshot-equals-copy "diff -r /tmp/copy $SNAP/monday/tree"
check diff-live-differs "! diff -rq $MNT/tree $SNAP/monday/tree"
check own-device "test \$(stat -c %d $SNAP/monday/a.txt) != \$(stat -c %d $MNT/a.txt)"
grep " $SNAP/monday " /proc/mounts | sed 's/^/MOUNTED /'
check touch-erofs "! touch $SNAP/monday/new 2> /share/touch.err && grep -q 'Read-only file system' /share/touch.err"
exec 3< $SNAP/monday/never-read.bin
check open-before-destroy "test -e $SNAP/monday/never-read.bin"
touch /share/destroy-now
wait_for destroyed
check read-after-destroy-fails "! cat <&3 > /dev/null 2> /share/read.err && grep -Eq 'Stale file handle|No such file' /share/read.err"
sed 's/^/READ-ERROR /' /share/read.err
exec 3<&-
check gone-from-listing "! ls $SNAP | grep -qx monday"
check path-gone "! ls $SNAP/monday/ 2> /share/ls.err && grep -Eq 'Stale file handle|No such file' /share/ls.err"
sed 's/^/LS-ERROR /' /share/ls.err
check mount-still-works "echo after > $MNT/after.txt && test \"\$(cat $MNT/after.txt)\" = after && ls $MNT/tree > /dev/null"
check umount "umount $MNT"
echo GUEST-DONE
"#
    );
    let boot_options = BootOptions {
        memory_mib: 1024,
        timeout: Duration::from_secs(600),
        shares: vec![Share {
            host_path: share.clone(),
            guest_path: PathBuf::from("/share"),
            writable: true,
        }],
        ..BootOptions::default()
    };
    let run = std::thread::scope(|scope| {
        let booted = scope.spawn(|| guest.boot(&script, &boot_options));
        if wait_for(&share, "snap-now", || booted.is_finished()) {
            env.ok(&["snapshot", "tank/fs@monday"]);
            std::fs::write(share.join("snapped"), b"").unwrap();
        }
        if wait_for(&share, "destroy-now", || booted.is_finished()) {
            env.ok(&["destroy", "tank/fs@monday"]);
            std::fs::write(share.join("destroyed"), b"").unwrap();
        }
        booted.join().expect("guest thread")
    })
    .expect("boot the guest");
    let output = run.output();
    eprintln!(
        "guest: boot {:?}, whole run {:?}\n{output}",
        run.boot_time, run.total_time
    );
    assert!(
        run.success() && output.contains("GUEST-DONE"),
        "the guest's script failed (exit {}):\n{}\n{}",
        run.exit_code,
        run.console,
        server.logs()
    );
    // The client crossed into the snapshot as a mount of its own (its own fsid).
    assert!(
        output
            .lines()
            .any(|line| line.starts_with("MOUNTED ") && line.contains(" nfs ")),
        "the snapshot was not a mount of its own in the guest:\n{output}"
    );
    for name in CHECKS {
        assert!(
            output.contains(&format!("CHECK {name} ok")),
            "check {name} did not pass:\n{output}\n{}",
            server.logs()
        );
    }
    server.terminate();
    env.assert_pool_check_clean();
}
