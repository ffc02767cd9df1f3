//! The Linux kernel's NFSv4.1 client against `cairn serve --nfs` (docs/nfs-v4.md, step 2):
//! in a throw-away QEMU guest (`cairn-guest`: Debian's kernel, the host's root shared
//! read-only; the host's loopback is 10.0.2.2 there), `mount -t nfs -o vers=4.1` of a shared
//! filesystem through the server's pseudo root (the same port as v3; no MOUNT, no PORTMAP),
//! then:
//! - files created, written and read back (`echo`, `dd`, `cp`), one written with `fsync`
//!   (UNSTABLE WRITEs, then COMMIT), one with `O_SYNC` (FILE_SYNC WRITEs); 60 more files
//!   made, listed (READDIR), 20 removed, listed again (no directories: v4's CREATE is a later
//!   step);
//! - SETATTR (chmod, truncate, touch -d), an exclusive create (`set -C`: a second one
//!   refused), an overwrite (O_TRUNC); fsx (crates.io `fsx`, as `guest_nfs.rs` runs it over
//!   v3) with and without mmap, `FSX_OPERATIONS` operations each;
//! - the client's own per-operation counts (`/proc/self/mountstats`) show OPEN, CLOSE, WRITE,
//!   COMMIT, READDIR and REMOVE sent, so each path was really taken;
//! - after an unmount and a fresh mount (nothing left in the client's cache), every file has
//!   the checksum it had when written, the listing and the attributes set are the same;
//! - on the host afterwards: the server stopped cleanly and `pool check` is clean.
//!
//! The first run downloads the guest kernel package (cached under `$CARGO_TARGET_DIR/guest`).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use cairn_guest::{BootOptions, Guest, HOST_ADDRESS};
use nbd_common::*;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// fsx operations per mode (as `guest_nfs.rs` runs over v3 in CI).
const FSX_OPERATIONS: u64 = 5_000;

/// The fsx binary (`cargo install fsx`, as `.ci/run` does).
fn fsx_binary() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
    let installed = home.join("bin").join("fsx");
    if installed.exists() {
        return installed;
    }
    tool("fsx", "(crates.io) fsx: cargo install fsx --locked")
}

/// fsx's configuration: its defaults, or with the mmap operations off (as `guest_nfs.rs`).
fn fsx_config(mmap: bool) -> String {
    let map_weight = if mmap { 10 } else { 0 };
    format!(
        "[weights]\nclose_open = 1\nread = 10\nwrite = 10\nmapread = {map_weight}\n\
         mapwrite = {map_weight}\ninvalidate = 1\ntruncate = 10\nfsync = 0\nfdatasync = 0\n"
    )
}

/// `KEY value` lines with `prefix`, as a map.
fn pairs(text: &str, prefix: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.strip_prefix(prefix))
        .filter_map(|rest| {
            let (a, b) = rest.split_once(' ')?;
            Some((a.to_string(), b.trim().to_string()))
        })
        .collect()
}

#[test]
fn kernel_client_mounts_v41_and_writes_reads_lists_and_removes() {
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
    env.ok(&["create", "-o", "sharenfs=no_root_squash", "tank/fs"]);
    let port = free_port();
    let nfs_args = ["--nfs".to_string(), format!("127.0.0.1:{port}")];
    let nfs_args: Vec<&str> = nfs_args.iter().map(String::as_str).collect();
    let mut server = env.serve_with_args(&nfs_args);

    let fsx = fsx_binary();
    for mmap in [true, false] {
        std::fs::write(env.path(&format!("fsx-{mmap}.toml")), fsx_config(mmap)).unwrap();
    }
    let env_dir = env.dir.path().display().to_string();
    let fsx = fsx.display().to_string();
    let options = format!("vers=4.1,proto=tcp,port={port},hard,timeo=50,retrans=3");
    let script = format!(
        r#"set -eu
mkdir -p /mnt/fs
mount -t nfs -o {options} {HOST_ADDRESS}:/tank/fs /mnt/fs
grep ' /mnt/fs ' /proc/mounts | sed 's/^/MOUNTED /'
cd /mnt/fs
echo hello > hello
head -c 3000000 /dev/urandom > /tmp/a
head -c 2500000 /dev/urandom > /tmp/b
head -c 700000 /dev/urandom > /tmp/c
dd if=/tmp/a of=fsynced bs=256k conv=fsync status=none
dd if=/tmp/b of=osync bs=64k oflag=sync status=none
cp /tmp/c copied
for f in hello fsynced osync copied; do echo "SUM1 $f $(sha256sum < $f | cut -d' ' -f1)"; done
for f in a b c; do echo "SRC $f $(sha256sum < /tmp/$f | cut -d' ' -f1)"; done
i=0
while [ $i -lt 60 ]; do i=$((i + 1)); echo "file $i" > m$i; done
echo "MANY1 $(ls | grep -c '^m')"
i=0
while [ $i -lt 20 ]; do i=$((i + 1)); rm m$i; done
echo "MANY2 $(ls | grep -c '^m')"
echo "F42 $(cat m42)"
echo hello > attrs
chmod 600 attrs
truncate -s 3 attrs
touch -d '2001-02-03 04:05:06 UTC' attrs
echo "ATTR1 $(stat -c '%a %s %Y' attrs)"
( set -C; echo one > excl ) && echo "EXCL1 made"
( set -C; echo two > excl ) 2>/dev/null && echo "EXCL2 made" || echo "EXCL2 refused"
echo again > m42
mkdir -p /tmp/fsx-mmap /tmp/fsx-plain
if {fsx} -N {FSX_OPERATIONS} -S 7 -f {env_dir}/fsx-true.toml -P /tmp/fsx-mmap /mnt/fs/fsx-mmap > /tmp/fsx-mmap.log 2>&1; then echo "FSX mmap ok"; else echo "FSX mmap FAILED"; tail -40 /tmp/fsx-mmap.log; fi
if {fsx} -N {FSX_OPERATIONS} -S 11 -f {env_dir}/fsx-false.toml -P /tmp/fsx-plain /mnt/fs/fsx-plain > /tmp/fsx-plain.log 2>&1; then echo "FSX plain ok"; else echo "FSX plain FAILED"; tail -40 /tmp/fsx-plain.log; fi
echo "LS1 $(ls | tr '\n' ' ')"
cd /
grep -E '^[[:space:]]*(OPEN|CLOSE|WRITE|COMMIT|READDIR|REMOVE|READ|GETATTR|LOOKUP|SEQUENCE):' /proc/self/mountstats | sed 's/^[[:space:]]*/OPS /' || true
umount /mnt/fs
mount -t nfs -o {options} {HOST_ADDRESS}:/tank/fs /mnt/fs
cd /mnt/fs
for f in hello fsynced osync copied; do echo "SUM2 $f $(sha256sum < $f | cut -d' ' -f1)"; done
echo "LS2 $(ls | tr '\n' ' ')"
echo "MANY3 $(ls | grep -c '^m')"
echo "ATTR2 $(stat -c '%a %s %Y' attrs) $(cat attrs)"
echo "EXCLC $(cat excl)"
echo "F42B $(cat m42)"
echo "CAT $(cat hello)"
cd /
umount /mnt/fs
echo GUEST-DONE
"#
    );
    let boot = BootOptions {
        timeout: Duration::from_secs(300),
        ..BootOptions::default()
    };
    let run = guest.boot(&script, &boot).expect("boot the guest");
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
    assert!(output.contains("vers=4.1"), "mounted as v4.1:\n{output}");
    let sources = pairs(output, "SRC ");
    let first = pairs(output, "SUM1 ");
    let second = pairs(output, "SUM2 ");
    assert_eq!(first.get("fsynced"), sources.get("a"), "fsync'd file");
    assert_eq!(first.get("osync"), sources.get("b"), "O_SYNC file");
    assert_eq!(first.get("copied"), sources.get("c"), "copied file");
    assert_eq!(first, second, "the same contents after a remount");
    assert!(output.contains("CAT hello"), "{output}");
    assert_eq!(
        pairs(output, "LS1 "),
        pairs(output, "LS2 "),
        "the same listing"
    );
    for (line, count) in [("MANY1 60", 60), ("MANY2 40", 40), ("MANY3 40", 40)] {
        assert!(output.contains(line), "{count} files listed:\n{output}");
    }
    assert!(output.contains("F42 file 42"), "{output}");
    for line in [
        "ATTR1 600 3 981173106",
        "ATTR2 600 3 981173106 hel",
        "EXCL1 made",
        "EXCL2 refused",
        "EXCLC one",
        "F42B again",
        "FSX mmap ok",
        "FSX plain ok",
    ] {
        assert!(output.contains(line), "{line}:\n{output}");
    }
    let ops = pairs(output, "OPS ");
    let count = |op: &str| -> u64 {
        ops.get(&format!("{op}:"))
            .and_then(|line| line.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    for op in ["OPEN", "CLOSE", "WRITE", "COMMIT", "READDIR", "REMOVE"] {
        assert!(count(op) > 0, "the client sent no {op}:\n{output}");
    }

    server.terminate();
    env.assert_pool_check_clean();
}
