//! The Linux kernel's NFS client keeps every file it was told is durable when `cairn serve` is
//! SIGKILLed mid-run and started again (issue 35, "Durability"), and finishes its work through
//! the restart: the write verifier changes, so the client resends what it had written UNSTABLE
//! and not yet seen committed.
//!
//! A throw-away QEMU guest (`cairn-guest`) mounts a shared filesystem of a pool with a log
//! device (NFSv3 over TCP, `hard`, `nolock`, 64 KiB WRITEs: a file that fits in one WRITE is
//! flushed FILE_SYNC, with no COMMIT to test) and writes files one after another, each made
//! durable one of three ways: `dd conv=fsync` (WRITEs, then COMMIT at fsync), `dd oflag=sync`
//! (every WRITE FILE_SYNC) and `cp` (the client's close-to-open flush: WRITEs and a COMMIT at
//! close). After each returns it appends the file's name and checksum to a file on a share the
//! host reads live. When the host has seen a third of them acknowledged it SIGKILLs the server
//! (its caches and unsynced txgs die with it) and starts it again on the same port; the guest's
//! calls in the meantime wait and retry. Then:
//! - the guest, after dropping its caches, checksums every file through the mount: each one it
//!   acknowledged has its checksum (what was durable before the kill, and what it resent after);
//! - on the host, after a clean stop and a fresh start, every file read through a FUSE mount of
//!   the filesystem has the checksum the guest acknowledged, and `pool check` is clean.
//!
//! Run over NFSv3 and over NFSv4.1 (with no grace period yet, the v4.1 client's reclaims get
//! NO_GRACE and it opens its files again).
//!
//! The first run downloads the guest kernel package (cached under `$CARGO_TARGET_DIR/guest`).
//! Needs root and /dev/fuse (a FUSE mount gives the filesystem's root to the squashed root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use cairn_guest::{BootOptions, Guest, HOST_ADDRESS, Share};
use nbd_common::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Files the guest writes; the server is killed once a third of them are acknowledged.
const FILES: usize = 36;
/// What root is squashed to over NFS (the guest's script runs as root).
const NOBODY: u32 = 65534;

/// `name checksum` lines with `prefix`, as a map.
fn sums(text: &str, prefix: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| {
            let mut words = rest.split_whitespace();
            let (a, b) = (words.next()?, words.next()?);
            Some((a.to_string(), b.to_string()))
        })
        .collect()
}

#[test]
fn kernel_nfs_client_keeps_acknowledged_files_through_a_sigkill_of_the_server() {
    sigkill_mid_run(|port| format!("vers=3,proto=tcp,nolock,port={port},mountport={port}"));
}

/// The same over NFSv4.1 (docs/nfs-v4.md): after the restart the client finds its session
/// and client id gone, makes new ones, gets NO_GRACE for its reclaims (cairn keeps no grace
/// period yet) and opens its files again, then resends its unstable writes.
#[test]
fn kernel_nfs41_client_keeps_acknowledged_files_through_a_sigkill_of_the_server() {
    sigkill_mid_run(|port| format!("vers=4.1,proto=tcp,port={port}"));
}

/// The scenario of the module comment, mounting with the options `options(port)` gives
/// (`hard`, timeouts and 64 KiB transfers added).
fn sigkill_mid_run(options: impl Fn(u16) -> String) {
    let _heavy = heavy();
    for (name, package) in [("mount.nfs", "nfs-common"), ("sha256sum", "coreutils")] {
        tool(name, package);
    }
    let guest = Guest::prepare(&guest_cache_dir()).expect("prepare the guest kernel");

    let env = Env::new();
    let d0 = format!("emu:ssd-sata:{}", env.dev("d0.img"));
    let slog = format!("emu:ssd-sata:{}", env.dev("slog.img"));
    env.ok(&[
        "pool", "create", "--size", "512M", "tank", &d0, "log", &slog,
    ]);
    env.ok(&["create", "-o", "sharenfs=on", "tank/fs"]);
    let port = free_port();
    let nfs_args = ["--nfs".to_string(), format!("127.0.0.1:{port}")];
    let nfs_args: Vec<&str> = nfs_args.iter().map(String::as_str).collect();
    let mut server = env.serve_with_args(&nfs_args);
    let at = env.path("mnt");
    {
        let _cleanup = Unmount(at.clone());
        env.ok(&["mount", "tank/fs", path_str(&at)]);
        std::os::unix::fs::chown(&at, Some(NOBODY), Some(NOBODY)).unwrap();
        env.ok(&["unmount", "tank/fs"]);
    }

    let options = options(port);
    let share = env.path("share");
    std::fs::create_dir(&share).unwrap();
    let acks = share.join("acks");
    let script = format!(
        r#"set -eu
mkdir -p /mnt/fs
mount -t nfs -o {options},hard,timeo=20,retrans=1000,retry=0,wsize=65536,rsize=65536 {HOST_ADDRESS}:/tank/fs /mnt/fs
i=0
while [ $i -lt {FILES} ]; do
    i=$((i + 1))
    head -c $((150000 + i * 7001)) /dev/urandom > /tmp/src
    sum=$(sha256sum < /tmp/src | cut -d' ' -f1)
    case $((i % 3)) in
        0) dd if=/tmp/src of=/mnt/fs/f$i bs=64k conv=fsync status=none ;;
        1) dd if=/tmp/src of=/mnt/fs/f$i bs=64k oflag=sync status=none ;;
        2) cp /tmp/src /mnt/fs/f$i ;;
    esac
    echo "ACK f$i $sum" >> /share/acks
done
echo 3 > /proc/sys/vm/drop_caches
cd /mnt/fs
for f in f*; do echo "SUM $f $(sha256sum < $f | cut -d' ' -f1)"; done
cd /
umount /mnt/fs
echo GUEST-DONE
"#
    );
    let options = BootOptions {
        timeout: Duration::from_secs(400),
        shares: vec![Share {
            host_path: share.clone(),
            guest_path: PathBuf::from("/share"),
            writable: true,
        }],
        ..BootOptions::default()
    };

    let (guest_run, acked_at_kill) = std::thread::scope(|scope| {
        let booted = scope.spawn(|| guest.boot(&script, &options));
        // Kill the server once a third of the files are acknowledged, then serve again.
        let started = Instant::now();
        let acked = || {
            std::fs::read_to_string(&acks)
                .map(|text| sums(&text, "ACK ").len())
                .unwrap_or(0)
        };
        while acked() < FILES / 3 && !booted.is_finished() {
            assert!(
                started.elapsed() < Duration::from_secs(400),
                "the guest acknowledged too little"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let acked_at_kill = acked();
        server.kill();
        server = env.serve_with_args(&nfs_args);
        (booted.join().expect("guest thread"), acked_at_kill)
    });
    let guest_run = guest_run.expect("boot the guest");
    let output = guest_run.output();
    eprintln!(
        "guest: boot {:?}, whole run {:?}; server killed after {acked_at_kill} of {FILES} files",
        guest_run.boot_time, guest_run.total_time
    );
    assert!(
        guest_run.success() && output.contains("GUEST-DONE"),
        "the guest's script failed (exit {}):\n{}\n{}",
        guest_run.exit_code,
        guest_run.console,
        server.logs()
    );
    assert!(
        (1..FILES).contains(&acked_at_kill),
        "the kill came mid-run: {acked_at_kill} of {FILES} acknowledged"
    );
    let acked = sums(&std::fs::read_to_string(&acks).unwrap(), "ACK ");
    assert_eq!(acked.len(), FILES, "every file acknowledged");
    let read_back = sums(output, "SUM ");
    let differ: Vec<&String> = acked
        .keys()
        .filter(|name| read_back.get(*name) != acked.get(*name))
        .collect();
    assert!(
        differ.is_empty() && read_back.len() == acked.len(),
        "the guest read back other contents of {differ:?} than it acknowledged (empty: \
         e3b0c442...)\n{output}"
    );

    // From the pool's disks, through the filesystem itself.
    server.terminate();
    env.assert_pool_check_clean();
    let mut server = env.serve();
    let _cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/fs", path_str(&at)]);
    for (name, sum) in &acked {
        assert_eq!(&sha256(&at.join(name)), sum, "{name} on the host");
    }
    env.ok(&["unmount", "tank/fs"]);
    server.terminate();
}
