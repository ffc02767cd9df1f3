//! Rollback of a mounted filesystem (issue 34) through the real kernel FUSE, as `zfs
//! rollback` of a mounted dataset: the mount stays, and at once (no wait for a cache to
//! expire) reads, `stat` and listings show the snapshot's state, even for files and names the
//! kernel had cached; descriptors open on files the snapshot lacks, or on files changed since
//! it (whose size and times the kernel's writeback cache would keep as its own), fail with
//! EIO, those on files the rollback leaves as they were keep working; writes after the rollback land in the rolled-back head and
//! survive a restart, and nothing written through a stale descriptor ever reaches the
//! rolled-back file; `-r` destroys newer snapshots, which refuse it otherwise. Mounting
//! needs root and /dev/fuse (CI runs as root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Reads every file under `dir` (and stats it), so the kernel caches names, attributes and
/// pages of all of them.
fn read_all(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            read_all(&path);
        } else if meta.is_file() {
            std::fs::read(&path).unwrap();
        }
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The errno of a failed call.
fn errno_of<T: std::fmt::Debug>(result: std::io::Result<T>) -> i32 {
    result
        .expect_err("should have failed")
        .raw_os_error()
        .unwrap_or(0)
}

/// What `stat` shows of a file that a test compares across a rollback: size, mode, mtime
/// (seconds, nanoseconds), links.
type Stat = (u64, u32, i64, i64, u64);

fn stat_of(path: &Path) -> Stat {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (
        meta.len(),
        meta.mode(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.nlink(),
    )
}

#[test]
fn rollback_of_a_mounted_filesystem_shows_the_snapshot_at_once() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);

    // The state the snapshot keeps.
    let big = pattern(1, 600 << 10);
    std::fs::write(at.join("a.txt"), b"monday's a").unwrap();
    std::fs::set_permissions(at.join("a.txt"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::write(at.join("big.bin"), &big).unwrap();
    std::fs::create_dir(at.join("docs")).unwrap();
    std::fs::write(at.join("docs/b.txt"), b"monday's b").unwrap();
    std::fs::write(at.join("docs/untouched.txt"), b"never changed").unwrap();
    std::fs::write(at.join("docs/gone.txt"), b"deleted after the snapshot").unwrap();
    std::fs::write(at.join("old_name.txt"), b"renamed after the snapshot").unwrap();
    std::fs::create_dir(at.join("olddir")).unwrap();
    std::fs::write(at.join("olddir/inner.txt"), b"in a directory removed later").unwrap();
    read_all(&at);
    let root_names = names(&at);
    let docs_names = names(&at.join("docs"));
    env.ok(&["snapshot", "tank/fs@monday"]);
    // The snapshot's own attributes, as `.cairn/snapshot` shows them (the kernel's copy of
    // the head's may run ahead of what the server had: its writeback cache keeps times).
    let monday = at.join(".cairn/snapshot/monday");
    let stats: Vec<(String, Stat)> = [
        "a.txt",
        "big.bin",
        "docs",
        "docs/b.txt",
        "docs/untouched.txt",
        "docs/gone.txt",
        "old_name.txt",
        "olddir",
    ]
    .iter()
    .map(|name| (name.to_string(), stat_of(&monday.join(name))))
    .collect();

    // After it: overwrite, extend, chmod, create, delete, rename, mkdir, rmdir; each read
    // back so the kernel caches the new state.
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(at.join("a.txt"), b"tuesday's a, longer than monday's").unwrap();
    std::fs::set_permissions(at.join("a.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(at.join("big.bin"))
            .unwrap();
        file.write_all_at(&pattern(9, 64 << 10), 100 << 10).unwrap();
        file.write_all_at(b"appended", big.len() as u64).unwrap();
    }
    std::fs::write(at.join("docs/b.txt"), b"tuesday's b").unwrap();
    std::fs::write(at.join("new.txt"), b"made after the snapshot").unwrap();
    std::fs::create_dir(at.join("newdir")).unwrap();
    std::fs::write(at.join("newdir/x.txt"), b"x").unwrap();
    std::fs::remove_file(at.join("docs/gone.txt")).unwrap();
    std::fs::rename(at.join("old_name.txt"), at.join("new_name.txt")).unwrap();
    std::fs::remove_file(at.join("olddir/inner.txt")).unwrap();
    std::fs::remove_dir(at.join("olddir")).unwrap();
    read_all(&at);
    assert_eq!(
        names(&at),
        [
            "a.txt",
            "big.bin",
            "docs",
            "new.txt",
            "new_name.txt",
            "newdir"
        ]
    );
    // Descriptors open across the rollback: on a file made since, on a file changed since,
    // and (read and write) on a file the rollback leaves as it was.
    let mut made_since = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(at.join("new.txt"))
        .unwrap();
    let changed = std::fs::File::open(at.join("docs/b.txt")).unwrap();
    let mut kept = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(at.join("docs/untouched.txt"))
        .unwrap();
    let mut buf = Vec::new();
    made_since.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"made after the snapshot");
    // A directory made since, held open (as a process's working directory would be).
    let made_since_dir = std::fs::File::open(at.join("newdir")).unwrap();

    env.ok(&["rollback", "tank/fs@monday"]);

    // Still mounted, the same mount.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        mountinfo.contains(&format!(" {} ", at.display())),
        "the mount went away:\n{mountinfo}"
    );
    // Names: files made since gone, deleted ones back, renames undone.
    assert_eq!(names(&at), root_names);
    assert_eq!(names(&at.join("docs")), docs_names);
    assert_eq!(names(&at.join("olddir")), ["inner.txt"]);
    for gone in ["new.txt", "new_name.txt", "newdir", "newdir/x.txt"] {
        assert_eq!(
            errno_of(std::fs::symlink_metadata(at.join(gone))),
            libc::ENOENT,
            "{gone} is still there"
        );
    }
    // Contents, even of files whose pages the kernel had cached.
    assert_eq!(std::fs::read(at.join("a.txt")).unwrap(), b"monday's a");
    assert_eq!(std::fs::read(at.join("big.bin")).unwrap(), big);
    assert_eq!(std::fs::read(at.join("docs/b.txt")).unwrap(), b"monday's b");
    assert_eq!(
        std::fs::read(at.join("docs/gone.txt")).unwrap(),
        b"deleted after the snapshot"
    );
    assert_eq!(
        std::fs::read(at.join("old_name.txt")).unwrap(),
        b"renamed after the snapshot"
    );
    assert_eq!(
        std::fs::read(at.join("olddir/inner.txt")).unwrap(),
        b"in a directory removed later"
    );
    // Attributes: sizes, modes, times, link counts as they were.
    for (name, stat) in &stats {
        assert_eq!(stat_of(&at.join(name)), *stat, "stat of {name}");
    }

    // Open descriptors: the file made since fails cleanly, never reaching another file.
    let mut byte = [0u8; 16];
    let code = errno_of(made_since.read_at(&mut byte, 0));
    assert!(
        code == libc::EIO || code == libc::ESTALE,
        "read of a file the snapshot lacks: errno {code}"
    );
    let code = errno_of(
        made_since
            .write_all_at(b"lost", 0)
            .and_then(|()| made_since.sync_all()),
    );
    assert!(
        code == libc::EIO || code == libc::ESTALE,
        "write to a file the snapshot lacks: errno {code}"
    );
    drop(made_since);
    // One on a file changed since fails too (the kernel would keep its own size and times
    // for it): the file is read afresh by name.
    let code = errno_of(changed.read_at(&mut byte, 0));
    assert!(
        code == libc::EIO || code == libc::ESTALE,
        "read of a file the rollback changed: errno {code}"
    );
    drop(changed);
    assert_eq!(std::fs::read(at.join("docs/b.txt")).unwrap(), b"monday's b");
    // One on a file the rollback left as it was keeps working: reads, and takes writes.
    let mut back = String::new();
    kept.seek(SeekFrom::Start(0)).unwrap();
    kept.read_to_string(&mut back).unwrap();
    assert_eq!(back, "never changed");
    kept.seek(SeekFrom::Start(0)).unwrap();
    kept.write_all(b"EVER").unwrap();
    kept.sync_all().unwrap();
    drop(kept);
    assert_eq!(
        std::fs::read(at.join("docs/untouched.txt")).unwrap(),
        b"EVERr changed"
    );
    // The directory made since: nothing can be made in it, nor found.
    for name in [c"y.txt", c"x.txt"] {
        // SAFETY: a valid directory descriptor and NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                std::os::fd::AsRawFd::as_raw_fd(&made_since_dir),
                name.as_ptr(),
                libc::O_CREAT | libc::O_RDWR,
                0o644,
            )
        };
        let code = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        assert!(
            fd < 0 && (code == libc::EIO || code == libc::ESTALE || code == libc::ENOENT),
            "openat {name:?} in a directory the snapshot lacks: fd {fd}, errno {code}"
        );
    }
    drop(made_since_dir);
    assert_eq!(
        names(&at),
        root_names,
        "nothing made by the stale directory"
    );

    // Writes after the rollback land in the rolled-back head and survive a restart.
    std::fs::write(at.join("a.txt"), b"written after the rollback").unwrap();
    std::fs::write(at.join("post.txt"), b"made after the rollback").unwrap();
    std::fs::rename(at.join("old_name.txt"), at.join("renamed_again.txt")).unwrap();
    let listing = env.ok(&["list", "-t", "snapshot", "-H", "-o", "name"]);
    assert_eq!(listing.trim(), "tank/fs@monday");
    env.ok(&["set", &format!("mountpoint={}", at.display()), "tank/fs"]);
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
    let mut server = env.serve();
    assert_eq!(
        std::fs::read(at.join("a.txt")).unwrap(),
        b"written after the rollback",
        "{}",
        server.logs()
    );
    assert_eq!(
        std::fs::read(at.join("post.txt")).unwrap(),
        b"made after the rollback"
    );
    assert_eq!(
        std::fs::read(at.join("docs/untouched.txt")).unwrap(),
        b"EVERr changed"
    );
    assert_eq!(std::fs::read(at.join("big.bin")).unwrap(), big);
    assert_eq!(
        names(&at),
        [
            "a.txt",
            "big.bin",
            "docs",
            "olddir",
            "post.txt",
            "renamed_again.txt"
        ]
    );
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

#[test]
fn rollback_r_under_a_mount_destroys_newer_snapshots_which_refuse_it_otherwise() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    std::fs::write(at.join("f"), b"at a").unwrap();
    env.ok(&["snapshot", "tank/fs@a"]);
    std::fs::write(at.join("f"), b"at b, longer").unwrap();
    std::fs::write(at.join("g"), b"made before b").unwrap();
    env.ok(&["snapshot", "tank/fs@b"]);
    std::fs::write(at.join("f"), b"after b").unwrap();
    std::fs::write(at.join("h"), b"made after b").unwrap();
    read_all(&at);

    // Without -r: refused, and the mount shows what it did.
    let run = env.cairn(&["rollback", "tank/fs@a"]);
    assert!(!run.success(), "rolled back past a newer snapshot");
    assert!(run.stderr.contains("tank/fs@b"), "{}", run.describe());
    assert_eq!(std::fs::read(at.join("f")).unwrap(), b"after b");
    assert_eq!(names(&at), ["f", "g", "h"]);
    // Browsing the newer snapshot while it is destroyed under the rollback.
    assert_eq!(names(&at.join(".cairn/snapshot")), ["a", "b"]);
    assert_eq!(
        std::fs::read(at.join(".cairn/snapshot/b/f")).unwrap(),
        b"at b, longer"
    );

    // The newest snapshot first, without -r.
    env.ok(&["rollback", "tank/fs@b"]);
    assert_eq!(std::fs::read(at.join("f")).unwrap(), b"at b, longer");
    assert_eq!(names(&at), ["f", "g"]);
    std::fs::write(at.join("f"), b"after the first rollback").unwrap();
    read_all(&at);

    env.ok(&["rollback", "-r", "tank/fs@a"]);
    assert_eq!(std::fs::read(at.join("f")).unwrap(), b"at a");
    assert_eq!(std::fs::metadata(at.join("f")).unwrap().len(), 4);
    assert_eq!(names(&at), ["f"]);
    let listing = env.ok(&["list", "-t", "snapshot", "-H", "-o", "name"]);
    assert_eq!(listing.trim(), "tank/fs@a");
    assert_eq!(names(&at.join(".cairn/snapshot")), ["a"]);
    std::fs::write(at.join("f"), b"after -r").unwrap();
    assert_eq!(std::fs::read(at.join("f")).unwrap(), b"after -r");
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// Descriptors open across a rollback on files the rollback changed (written, extended) or
/// that the snapshot lacks. The kernel's writeback cache keeps a cached file's size and times
/// as its own, so such a descriptor cannot be given the snapshot's file (see the module doc of
/// `cairn-frontend`'s `fuse/rollback.rs`): today it fails with EIO (or ESTALE) on reads, and
/// what it writes, even whole pages the kernel takes into its cache without asking, never
/// reaches the rolled-back file: not at fsync, not at close, not after `sync` and a remount.
/// Never stale data through it, never resurrected data by name.
#[test]
fn descriptors_on_changed_files_fail_after_a_rollback_and_never_write_into_it() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, server) = served_mount(&env, "tank/fs", &[]);
    let monday = pattern(3, 3 * 4096 + 100);
    std::fs::write(at.join("f.bin"), &monday).unwrap();
    env.ok(&["snapshot", "tank/fs@monday"]);

    // Written after the snapshot through descriptors that stay open: pages overwritten and
    // the file extended, and a file the snapshot lacks. Some of it may still be dirty in the
    // kernel when the rollback starts (it writes them back into the old head first).
    let changed = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(at.join("f.bin"))
        .unwrap();
    changed.write_all_at(&pattern(7, 8192), 4096).unwrap();
    changed
        .write_all_at(b"tuesday's tail", monday.len() as u64)
        .unwrap();
    let made_since = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(at.join("made_since.bin"))
        .unwrap();
    made_since.write_all_at(&[0x77; 4096], 0).unwrap();

    env.ok(&["rollback", "tank/fs@monday"]);

    let failed = |code: i32| code == libc::EIO || code == libc::ESTALE;
    let mut buf = vec![0u8; monday.len() + 64];
    for (name, file) in [("f.bin", &changed), ("made_since.bin", &made_since)] {
        let code = errno_of(file.read_at(&mut buf, 0));
        assert!(
            failed(code),
            "read through a descriptor on {name}: errno {code}"
        );
        // A whole page, which the writeback cache may take without reading anything: if
        // write(2) takes it, fsync must fail, and it must never reach the file.
        let wrote = file.write_all_at(&[0xee; 4096], 0);
        let synced = file.sync_all();
        assert!(
            wrote.is_err() || synced.is_err(),
            "a write through a stale descriptor on {name} was acknowledged by fsync"
        );
        for code in [wrote.err(), synced.err()]
            .into_iter()
            .flatten()
            .map(|err| err.raw_os_error().unwrap_or(0))
        {
            assert!(
                failed(code),
                "write through a descriptor on {name}: errno {code}"
            );
        }
    }
    drop(changed);
    drop(made_since);

    // By name: the snapshot's file and no other.
    let by_name = || std::fs::read(at.join("f.bin")).unwrap();
    assert!(
        by_name() == monday,
        "f.bin is not the snapshot's after the rollback"
    );
    assert_eq!(names(&at), ["f.bin"]);
    let status = std::process::Command::new("sync").status().unwrap();
    assert!(status.success());
    assert!(
        by_name() == monday,
        "f.bin changed by a sync after the rollback"
    );

    // And after a remount, from the pool.
    env.ok(&["set", &format!("mountpoint={}", at.display()), "tank/fs"]);
    env.ok(&["unmount", "tank/fs"]);
    let mut server = server;
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
    let mut server = env.serve();
    assert!(
        by_name() == monday,
        "f.bin after a remount is not the snapshot's: {}",
        server.logs()
    );
    assert_eq!(names(&at), ["f.bin"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}
