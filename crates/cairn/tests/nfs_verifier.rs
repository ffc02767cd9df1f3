//! The NFS write verifier against a real server (issue 35, point 3): it changes whenever data a
//! client wrote UNSTABLE may have been lost, whichever path met the failure, and never
//! otherwise. A raw NFSv3 client (on cairn-nfs's codec) writes UNSTABLE and COMMITs; the
//! failure comes through another path: a volume's FLUSH over NBD (qemu-io) whose intent-log
//! write fails on a log device made of a real failing file (nbdkit's `error` filter behind
//! `nbdfuse`, Debian packages nbdkit and libnbd-bin, as in `device_failure.rs`). Mounting (to
//! give the filesystem's root to a user) needs root and /dev/fuse (CI runs as root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod failing_disk;
mod nbd_common;
mod nfs_common;

use cairn_nfs::nfs3::*;
use failing_disk::FailingDisk;
use nbd_common::*;
use nfs_common::*;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// Gives `tank/home`'s root to `USER` (through a FUSE mount of the running server).
fn give_home_to_user(env: &Env) {
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    env.ok(&["mount", "tank/home", at.to_str().expect("utf-8 path")]);
    std::os::unix::fs::chown(&at, Some(USER), Some(USER)).expect("chown");
    env.ok(&["unmount", "tank/home"]);
}

fn pattern(len_bytes: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..len_bytes)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

/// A failure met by another client through another front end — a volume's FLUSH whose log
/// write fails on the pool's log device — changes the verifier an NFS client's UNSTABLE data
/// was acknowledged with: its COMMIT answers V′ ≠ V (so it resends), and from then on the
/// verifier holds still again. Neither the volume's client nor the NFS client saw an error:
/// the log fell back to a txg sync on the pool's healthy disk.
#[test]
fn a_log_write_failure_on_another_path_changes_the_verifier() {
    let _heavy = heavy();
    let env = Env::new();
    let log_disk = FailingDisk::new(&env, "slog", 128 * MIB);
    let data = env.dev("d0.img");
    std::fs::File::create(&data)
        .and_then(|file| file.set_len(512 * MIB))
        .expect("data device");
    env.ok(&["pool", "create", "tank", &data, "log", &log_disk.path()]);
    // The filesystem's log stays off the log device (`logbias=throughput`): only the
    // volume's log meets the failure, so the NFS client's own COMMIT never does.
    env.ok(&[
        "create",
        "-o",
        "sharenfs=on",
        "-o",
        "logbias=throughput",
        "tank/home",
    ]);
    env.create_volume("tank/vol", "32M", &[]);
    let port = free_port();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);
    give_home_to_user(&env);
    let volume = server.uri("tank/vol");
    // The volume's log has a chain on the log device (its first FLUSH starts it).
    qemu_io_ok(&volume, &["write -P 0x11 0 64k", "flush"]);

    let mut raw = Raw::connect(port);
    let root = raw.mount("/tank/home");
    let file = raw.create(&root, "data.bin");
    let first = raw.write(&file, 0, &pattern(200_000, 1), StableHow::Unstable);
    assert_eq!(first.committed, StableHow::Unstable);
    let verifier = first.verf;
    assert_eq!(
        raw.commit(&file),
        verifier,
        "COMMIT's verifier is the WRITE's"
    );
    let second = raw.write(&file, 200_000, &pattern(50_000, 2), StableHow::Unstable);
    assert_eq!(second.verf, verifier);

    // Another path meets a log write failure: the volume's FLUSH, answered Ok all the same.
    log_disk.fail_writes();
    let flushed = qemu_io_run(&volume, &["write -P 0x22 1M 64k", "flush"]);
    assert!(
        flushed.success(),
        "the volume's flush failed:\n{}",
        flushed.describe()
    );
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("FAULTED"),
        "the log device did not fail:\n{status}"
    );
    let after = raw.commit(&file);
    assert_ne!(
        after, verifier,
        "the verifier did not change after another path's log write failure"
    );
    log_disk.heal();

    // Nothing fails any more: the verifier holds still at its new value.
    let resent = raw.write(&file, 200_000, &pattern(50_000, 2), StableHow::Unstable);
    let settled = raw.commit(&file);
    assert_eq!(resent.verf, settled, "the verifier moved without a failure");
    assert_eq!(raw.commit(&file), settled);
    qemu_io_ok(&volume, &["read -P 0x11 0 64k", "read -P 0x22 1M 64k"]);
    drop(raw);
    server.terminate();
}

/// Ordinary work never changes the verifier: UNSTABLE and FILE_SYNC writes to several files,
/// COMMITs of some, snapshots (each a txg sync) and time for timed txg syncs between them all
/// answer the first verifier.
#[test]
fn ordinary_work_never_changes_the_verifier() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.ok(&["create", "-o", "sharenfs=on", "tank/home"]);
    let port = free_port();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);
    give_home_to_user(&env);
    let mut raw = Raw::connect(port);
    let root = raw.mount("/tank/home");
    let files: Vec<FileHandle> = (0..4)
        .map(|i| raw.create(&root, &format!("f{i}")))
        .collect();
    let verifier = raw
        .write(&files[0], 0, &pattern(1000, 9), StableHow::Unstable)
        .verf;
    let mut answers = 0usize;
    for round in 0..12u32 {
        for (i, file) in files.iter().enumerate() {
            let offset = u64::from(round) * 70_000;
            let stable = if (round as usize + i).is_multiple_of(3) {
                StableHow::FileSync
            } else {
                StableHow::Unstable
            };
            let reply = raw.write(
                file,
                offset,
                &pattern(70_000, round * 10 + i as u32),
                stable,
            );
            assert_eq!(reply.verf, verifier, "round {round}, file {i}: WRITE");
            answers += 1;
            if (round as usize + i).is_multiple_of(2) {
                assert_eq!(
                    raw.commit(file),
                    verifier,
                    "round {round}, file {i}: COMMIT"
                );
                answers += 1;
            }
        }
        if round % 4 == 3 {
            env.ok(&["snapshot", &format!("tank/home@r{round}")]);
        }
        if round == 6 {
            // Past the txg timeout (5 s): the server syncs the dirty txg on its own.
            std::thread::sleep(Duration::from_millis(5500));
        }
    }
    for file in &files {
        assert_eq!(raw.commit(file), verifier);
        answers += 1;
    }
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(!status.contains("SUSPENDED"), "{status}");
    eprintln!("{answers} WRITE and COMMIT replies all carried the first verifier");
    drop(raw);
    server.terminate();
    env.assert_pool_check_clean();
}
