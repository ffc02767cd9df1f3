//! `sharenfs` access lists seen by the Linux kernel's own NFS client (issue 35, point 5), in a
//! throw-away QEMU guest (`cairn-guest`; the host's loopback is 10.0.2.2 there, and QEMU's
//! user network connects to the server from 127.0.0.1, so that is the guest's address to the
//! server). One boot, three filesystems:
//! - `tank/rw` (`rw=127.0.0.1`): mounted, written, read back;
//! - `tank/ro` (`ro=127.0.0.1`): mounted; the file the host put there reads back, but
//!   creating a file or a directory fails with EROFS (the script runs as root, and the
//!   share says `no_root_squash`: only the share can refuse);
//! - `tank/none` (`rw=127.0.0.2`, another client): `mount` is refused ("access denied").
//!
//! The first run downloads the guest kernel package (cached under `$CARGO_TARGET_DIR/guest`).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;
mod nfs_common;

use cairn_guest::{BootOptions, Guest, HOST_ADDRESS};
use nbd_common::*;
use nfs_common::Raw;
use std::time::Duration;

#[test]
fn kernel_client_gets_what_the_lists_say() {
    let _heavy = heavy();
    tool("mount.nfs", "nfs-common");
    let guest = Guest::prepare(&guest_cache_dir()).expect("prepare the guest kernel");
    let env = Env::new();
    env.create_pool();
    env.ok(&[
        "create",
        "-o",
        "sharenfs=rw=127.0.0.1,no_root_squash",
        "tank/rw",
    ]);
    env.ok(&[
        "create",
        "-o",
        "sharenfs=rw=127.0.0.1,no_root_squash",
        "tank/ro",
    ]);
    env.ok(&[
        "create",
        "-o",
        "sharenfs=rw=127.0.0.2,no_root_squash",
        "tank/none",
    ]);
    let port = free_port();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);

    // A file in tank/ro, written while it is still read-write, then the share made read-only.
    let mut raw = Raw::connect(port);
    let ro_root = raw.mount("/tank/ro");
    let args = cairn_nfs::nfs3::CreateArgs {
        location: cairn_nfs::nfs3::DirOpArgs3 {
            dir: ro_root,
            name: cairn_nfs::nfs3::Filename::new(b"seed".to_vec()).unwrap(),
        },
        how: cairn_nfs::nfs3::CreateHow::Guarded(cairn_nfs::nfs3::Sattr3 {
            mode: Some(0o666),
            ..Default::default()
        }),
    };
    let seed = match raw.nfs_as(0, cairn_nfs::nfs3::Nfs3Proc::Create, &args) {
        cairn_nfs::nfs3::Nfs3Reply::Create(cairn_nfs::nfs3::Outcome::Ok(ok)) => {
            ok.object.expect("a handle")
        }
        other => panic!("CREATE seed: {other:?}"),
    };
    raw.write(
        &seed,
        0,
        b"seeded by the host\n",
        cairn_nfs::nfs3::StableHow::FileSync,
    );
    raw.close();
    env.ok(&["set", "sharenfs=ro=127.0.0.1,no_root_squash", "tank/ro"]);

    let options = format!("vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock");
    let script = format!(
        r#"set -u
mkdir -p /mnt/rw /mnt/ro /mnt/none
nfs_mount() {{ mount -t nfs -o {options},retry=0 {HOST_ADDRESS}:/tank/$1 /mnt/$1; }}
nfs_mount rw && echo RW-MOUNTED
echo "written by the guest" > /mnt/rw/file && sync && echo RW-WRITTEN
umount /mnt/rw && nfs_mount rw && echo "RW-READ $(cat /mnt/rw/file)"
nfs_mount ro && echo RO-MOUNTED
echo "RO-READ $(cat /mnt/ro/seed)"
touch /mnt/ro/new; echo "RO-TOUCH $?"
mkdir /mnt/ro/dir; echo "RO-MKDIR $?"
test -e /mnt/ro/new || echo RO-NOTHING-MADE
nfs_mount none; echo "NONE-MOUNT $?"
umount /mnt/rw /mnt/ro
echo GUEST-DONE
"#
    );
    let run = guest
        .boot(
            &script,
            &BootOptions {
                memory_mib: 512,
                timeout: Duration::from_secs(300),
                ..BootOptions::default()
            },
        )
        .expect("boot the guest");
    let output = run.output();
    let context = || format!("guest output:\n{output}\n{}", server.logs());
    assert!(output.contains("GUEST-DONE"), "{}", context());
    for expected in [
        "RW-MOUNTED",
        "RW-WRITTEN",
        "RW-READ written by the guest",
        "RO-MOUNTED",
        "RO-READ seeded by the host",
        "RO-NOTHING-MADE",
    ] {
        assert!(output.contains(expected), "no {expected}: {}", context());
    }
    for refused in ["RO-TOUCH 0", "RO-MKDIR 0", "NONE-MOUNT 0"] {
        assert!(!output.contains(refused), "{refused}: {}", context());
    }
    assert!(
        output.matches("Read-only file system").count() >= 2,
        "touch and mkdir must fail with EROFS: {}",
        context()
    );
    assert!(
        output.contains("access denied"),
        "mount of tank/none must be refused: {}",
        context()
    );
    server.stop(libc::SIGINT, Duration::from_secs(60));
    env.assert_pool_check_clean();
}
