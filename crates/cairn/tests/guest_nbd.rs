//! The Linux kernel's own NBD client against `cairn serve` (the other NBD tests use user-space
//! clients only): a throw-away QEMU guest (`cairn-guest`: Debian's kernel, the host's root
//! shared read-only) connects `/dev/nbd0` to the server's TCP listener through QEMU's user
//! network (the host's loopback is 10.0.2.2 there), makes ext4 on it, writes files with fsync,
//! checksums them, unmounts, checks the file system and disconnects. Back on the host, after a
//! restart of the server (so the data comes from the pool's disks, not from a cache), the
//! volume is copied out with nbdcopy and the files are read from the image with debugfs: every
//! checksum must match the host's source files and what the guest printed, `e2fsck -fn` must
//! be clean on the image, and `pool check` on the pool. A snapshot's export, attached first,
//! must be read-only to the kernel (a direct write refused) and stay all zeros.
//!
//! The guest's tools are the host's (nbd-client, e2fsprogs, coreutils); a missing one fails the
//! test naming its Debian package. The first run downloads the kernel package with apt-get and
//! caches it under `$CARGO_TARGET_DIR/guest`.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use cairn_guest::{BootOptions, Guest, HOST_ADDRESS};
use nbd_common::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// The files the guest writes: (name in the file system, size). Sizes not a multiple of the
/// block size, so a lost tail shows.
const FILES: &[(&str, u64)] = &[
    ("big.bin", 6 * MIB + 4096),
    ("dir/middle.bin", 3 * MIB + 123),
    ("small.bin", 10_000),
];

#[test]
fn kernel_nbd_client_writes_ext4_that_reads_back_on_the_host() {
    let _heavy = heavy();
    // The tools the guest runs are the host's.
    for (name, package) in [
        ("nbd-client", "nbd-client"),
        ("mkfs.ext4", "e2fsprogs"),
        ("debugfs", "e2fsprogs"),
        ("e2fsck", "e2fsprogs"),
        ("modprobe", "kmod"),
    ] {
        tool(name, package);
    }
    let guest = Guest::prepare(&guest_cache_dir()).expect("prepare the guest kernel");

    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &[]);
    // A snapshot of the empty volume: a read-only export the guest must not be able to change.
    env.ok(&["snapshot", "tank/vol@empty"]);
    let mut server = env.serve();

    // Source files on the host; the guest reads them through its view of the host's root.
    let sources = env.path("sources");
    std::fs::create_dir(&sources).expect("sources dir");
    let mut expected = BTreeMap::new();
    for (seed, (name, len)) in FILES.iter().enumerate() {
        let source = sources.join(name.replace('/', "_"));
        random_file(&source, *len, seed as u64 + 1);
        expected.insert(name.to_string(), sha256(&source));
    }
    let copies: String = FILES
        .iter()
        .map(|(name, _)| {
            format!(
                "dd if={}/{} of=/mnt/vol/{name} bs=64k conv=fsync status=none\n",
                sources.display(),
                name.replace('/', "_")
            )
        })
        .collect();
    let names: Vec<&str> = FILES.iter().map(|(name, _)| *name).collect();
    let script = format!(
        r#"set -eu
modprobe nbd
nbd-client -N tank/vol@empty -b 4096 {HOST_ADDRESS} {port} /dev/nbd1
echo "SNAPSHOT-RO $(blockdev --getro /dev/nbd1)"
if dd if=/dev/urandom of=/dev/nbd1 bs=4096 count=1 oflag=direct status=none; then echo SNAPSHOT-WRITTEN; fi
nbd-client -d /dev/nbd1
nbd-client -N tank/vol -b 4096 {HOST_ADDRESS} {port} /dev/nbd0
mkfs.ext4 -q -F /dev/nbd0
mkdir -p /mnt/vol
mount -t ext4 /dev/nbd0 /mnt/vol
mkdir /mnt/vol/dir
{copies}sync
cd /mnt/vol
sha256sum {names} | sed 's/^/SUM /'
cd /
umount /mnt/vol
e2fsck -fn /dev/nbd0
nbd-client -d /dev/nbd0
echo GUEST-DONE
"#,
        port = server.port,
        names = names.join(" "),
    );
    let options = BootOptions {
        timeout: Duration::from_secs(300),
        ..BootOptions::default()
    };
    let guest_run = guest.boot(&script, &options).expect("boot the guest");
    let output = guest_run.output();
    eprintln!(
        "guest: boot {:?}, whole run {:?}",
        guest_run.boot_time, guest_run.total_time
    );
    assert!(
        guest_run.success() && output.contains("GUEST-DONE"),
        "the guest's script failed (exit {}):\n{}\n{}",
        guest_run.exit_code,
        guest_run.console,
        server.logs()
    );
    let printed: BTreeMap<String, String> = output
        .lines()
        .filter_map(|line| line.strip_prefix("SUM "))
        .filter_map(|line| {
            let (sum, name) = line.split_once("  ")?;
            Some((name.to_string(), sum.to_string()))
        })
        .collect();
    assert_eq!(printed, expected, "the guest's checksums:\n{output}");
    assert!(
        output.contains("SNAPSHOT-RO 1") && !output.contains("SNAPSHOT-WRITTEN"),
        "the snapshot's export is read-only to the kernel:\n{output}"
    );

    // From the pool's disks: stop (sync and export), check, serve again, copy out.
    server.terminate();
    env.assert_pool_check_clean();
    let server = env.serve();
    let image = env.path("vol.img");
    run_limited(
        std::process::Command::new(nbdcopy())
            .arg(server.uri("tank/vol"))
            .arg(&image),
        TOOL_TIME,
    )
    .ok();
    let fsck = run(&tool("e2fsck", "e2fsprogs"), &["-fn", path_str(&image)]);
    assert!(fsck.success(), "e2fsck on the host:\n{}", fsck.describe());
    let snapshot = env.path("snapshot.img");
    run_limited(
        std::process::Command::new(nbdcopy())
            .arg(server.uri("tank/vol@empty"))
            .arg(&snapshot),
        TOOL_TIME,
    )
    .ok();
    let snapshot_bytes = std::fs::read(&snapshot).expect("the snapshot's copy");
    assert_eq!(snapshot_bytes.len() as u64, 64 * MIB);
    assert!(
        snapshot_bytes.iter().all(|byte| *byte == 0),
        "the snapshot is still empty"
    );
    for (name, sum) in &expected {
        let out = env.path(&format!("out-{}", name.replace('/', "_")));
        let request = format!("dump /{name} {}", out.display());
        run(
            &tool("debugfs", "e2fsprogs"),
            &["-R", &request, path_str(&image)],
        )
        .ok();
        assert_eq!(&sha256(&out), sum, "{name} read back through cairn");
    }
    drop(server);
}
