//! What testing cairn's FUSE mounts from outside found (issue 32), each held here through the
//! real kernel FUSE mount of a served filesystem, as the tools that found it use it:
//! - data just written counts in `st_blocks` before its txg syncs, so GNU tar's `--sparse`
//!   (which takes a file with no blocks for one hole) archives it whole;
//! - a pwrite beside a shared mapping of a freshly created file is never undone by the
//!   mapping's page written back later (xfstests' holetest);
//! - SEEK_DATA never calls data a hole while the kernel still holds it unwritten, and
//!   answers at the `st_blksize` granularity.
//! - extended attribute values up to the VFS's 64 KiB, and ACLs of hundreds of entries
//!   (`setfacl`), are kept, across a remount.
//!
//! Mounting needs root and /dev/fuse (CI runs as root; .ci/run installs fuse3).

mod nbd_common;

use nbd_common::*;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// `tar --sparse -cf ARCHIVE -C DIR NAME`, then extracts it into `into`.
fn tar_round_trip(dir: &Path, name: &str, archive: &Path, into: &Path) {
    let tar = tool("tar", "tar");
    let create = run_limited(
        std::process::Command::new(&tar)
            .arg("--sparse")
            .arg("-cf")
            .arg(archive)
            .arg("-C")
            .arg(dir)
            .arg(name),
        std::time::Duration::from_secs(60),
    );
    assert!(create.success(), "tar -c: {}", create.describe());
    std::fs::create_dir_all(into).unwrap();
    let extract = run_limited(
        std::process::Command::new(&tar)
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(into),
        std::time::Duration::from_secs(60),
    );
    assert!(extract.success(), "tar -x: {}", extract.describe());
}

/// Data not yet synced counts in `st_blocks` (and `du`) from the moment it is written, so a
/// tar --sparse archive made right after the write holds it.
#[test]
fn unsynced_data_counts_in_blocks_and_tar_sparse_keeps_it() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    let data = pattern(2 << 20, 7);
    // A file written from start to end, and one with a hole before its data (appended past
    // an extending truncate).
    std::fs::write(at.join("b"), &data).unwrap();
    let blocks = std::fs::metadata(at.join("b")).unwrap().blocks();
    assert!(
        blocks * 512 >= data.len() as u64,
        "{blocks} blocks for {} bytes just written",
        data.len()
    );
    let holed = std::fs::File::create(at.join("holed")).unwrap();
    holed.set_len(4 << 20).unwrap();
    holed.write_all_at(&data[..1 << 20], 4 << 20).unwrap();
    drop(holed);
    let holed_blocks = std::fs::metadata(at.join("holed")).unwrap().blocks();
    assert!(
        holed_blocks * 512 >= 1 << 20 && holed_blocks * 512 < 4 << 20,
        "{holed_blocks} blocks for 1 MiB of data after a 4 MiB hole"
    );
    let out = env.path("out");
    tar_round_trip(&at, "b", &env.path("b.tar"), &out);
    assert!(
        std::fs::read(out.join("b")).unwrap() == data,
        "tar --sparse of a file just written did not keep its data"
    );
    tar_round_trip(&at, "holed", &env.path("holed.tar"), &out);
    let extracted = std::fs::read(out.join("holed")).unwrap();
    assert_eq!(extracted.len(), 5 << 20);
    assert!(extracted[..4 << 20].iter().all(|byte| *byte == 0));
    assert!(extracted[4 << 20..] == data[..1 << 20]);
    // Once synced the figure is what the pool took.
    env.ok(&["pool", "sync", "tank"]);
    let synced = std::fs::metadata(at.join("b")).unwrap().blocks();
    assert!(synced * 512 >= data.len() as u64, "{synced} blocks synced");
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// xfstests' holetest, in short: one thread pwrite()s into each page of a freshly created
/// file while another writes through a shared mapping of it, each to its own slot of the
/// page; every slot must hold what was written to it, through the mapping, through read and
/// after a remount.
#[test]
fn pwrites_beside_a_shared_mapping_are_all_kept() {
    const PAGE: usize = 4096;
    const PAGES: usize = 256;
    const ROUNDS: u64 = 24;
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    let slot_value = |round: u64, writer: u64, page: usize| -> u64 {
        (round << 40) | (writer << 32) | page as u64 | 1 << 63
    };
    for round in 0..ROUNDS {
        let path = at.join(format!("holetest-{round}"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.set_len((PAGE * PAGES) as u64).unwrap();
        // SAFETY: a fresh shared mapping of the whole file, unmapped below; nothing else
        // maps it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE * PAGES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "mmap");
        let map_addr = map as usize;
        let pwrites_done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|scope| {
            let file = &file;
            let pwrites_done = &pwrites_done;
            scope.spawn(move || {
                for page in 0..PAGES {
                    let value = slot_value(round, 0, page);
                    file.write_all_at(&value.to_le_bytes(), (page * PAGE) as u64)
                        .unwrap();
                }
                pwrites_done.store(true, std::sync::atomic::Ordering::Release);
            });
            // The mapping's writer keeps every page dirty while the pwrites go on, so that
            // pages are written back from the mapping all through them.
            scope.spawn(move || {
                loop {
                    let last_pass = pwrites_done.load(std::sync::atomic::Ordering::Acquire);
                    for page in 0..PAGES {
                        let value = slot_value(round, 1, page);
                        let at = map_addr + page * PAGE + 8;
                        // SAFETY: inside the mapping, 8-byte aligned, written by this
                        // thread only.
                        unsafe { std::ptr::write_volatile(at as *mut u64, value) };
                    }
                    if last_pass {
                        break;
                    }
                }
            });
        });
        // SAFETY: the mapping made above, whole.
        unsafe {
            assert_eq!(libc::msync(map, PAGE * PAGES, libc::MS_SYNC), 0);
            libc::munmap(map, PAGE * PAGES);
        }
        file.sync_all().unwrap();
        drop(file);
        let contents = std::fs::read(&path).unwrap();
        for page in 0..PAGES {
            for writer in 0..2u64 {
                let at = page * PAGE + writer as usize * 8;
                let found = u64::from_le_bytes(contents[at..at + 8].try_into().unwrap());
                assert_eq!(
                    found,
                    slot_value(round, writer, page),
                    "round {round}: writer {writer}'s slot of page {page} lost ({})",
                    if writer == 0 { "pwrite" } else { "mapping" }
                );
            }
        }
    }
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

fn lseek(file: &std::fs::File, offset: i64, whence: i32) -> Result<i64, i32> {
    // SAFETY: a valid descriptor; lseek touches no memory.
    let found = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
    if found < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(found)
    }
}

/// SEEK_DATA and SEEK_HOLE never call data a hole, while the kernel still holds written
/// pages the server has not seen (a file opened again goes through the writeback cache),
/// and answer at the granularity `st_blksize` reports.
#[test]
fn seek_data_finds_data_the_kernel_still_holds() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    let path = at.join("sparse");
    std::fs::write(&path, b"").unwrap();
    const DATA_AT: i64 = 6 << 20;
    const SIZE: u64 = 8 << 20;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.set_len(SIZE).unwrap();
    file.write_all_at(b"x", DATA_AT as u64).unwrap();
    let data = lseek(&file, 0, libc::SEEK_DATA);
    let blksize = std::fs::metadata(&path).unwrap().blksize() as i64;
    assert!(
        matches!(data, Ok(found) if found <= DATA_AT && found > DATA_AT - blksize),
        "SEEK_DATA from 0 gave {data:?}, data at {DATA_AT} (st_blksize {blksize})"
    );
    let hole = lseek(&file, DATA_AT, libc::SEEK_HOLE);
    assert!(
        matches!(hole, Ok(found) if found > DATA_AT && found % blksize == 0),
        "SEEK_HOLE from {DATA_AT} gave {hole:?} (st_blksize {blksize})"
    );
    assert_eq!(lseek(&file, 0, libc::SEEK_HOLE), Ok(0));
    // Past the data: a hole up to the end, and no data.
    let after = hole.unwrap();
    if (after as u64) < SIZE {
        assert_eq!(lseek(&file, after, libc::SEEK_DATA), Err(libc::ENXIO));
    }
    // The same answers from another descriptor, and with the pages written back.
    let reader = std::fs::File::open(&path).unwrap();
    assert_eq!(lseek(&reader, 0, libc::SEEK_DATA), data);
    file.sync_all().unwrap();
    assert_eq!(lseek(&file, 0, libc::SEEK_DATA), data);
    let mut byte = [0u8; 1];
    reader.read_exact_at(&mut byte, DATA_AT as u64).unwrap();
    assert_eq!(&byte, b"x");
    drop((file, reader));
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

fn ctime_of(path: &Path) -> (i64, i64) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.ctime(), meta.ctime_nsec())
}

fn mtime_of(path: &Path) -> (i64, i64) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.mtime(), meta.mtime_nsec())
}

/// A mounted filesystem for one of the POSIX tests below; `check` runs on its mountpoint.
fn on_a_mount(check: impl FnOnce(&Path)) {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    check(&at);
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// A file created and written in one open has the write's mtime after close, as on ext4
/// (xfstests 003).
#[test]
fn a_write_after_create_in_one_open_sets_mtime() {
    on_a_mount(|at| {
        let path = at.join("written-later");
        let mut file = std::fs::File::create(&path).unwrap();
        let created = mtime_of(&path);
        std::thread::sleep(std::time::Duration::from_millis(500));
        std::io::Write::write_all(&mut file, b"aaa\n").unwrap();
        drop(file);
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let written = mtime_of(&path);
        let nanos = |(secs, nanos): (i64, i64)| secs * 1_000_000_000 + nanos;
        assert!(
            nanos(written) >= nanos(created) + 400_000_000,
            "mtime {written:?} still the creation time {created:?} after a later write"
        );
    });
}

/// A change never carries an earlier ctime than the change before it (xfstests 423): one
/// clock for the kernel's stamps (a link) and the server's (a chmod, a write).
#[test]
fn a_link_never_goes_back_in_ctime() {
    on_a_mount(|at| {
        for round in 0..200 {
            let name = at.join(format!("c{round}"));
            let file = std::fs::File::create(&name).unwrap();
            file.write_all_at(b"x", 0).unwrap();
            if round % 2 == 1 {
                drop(file);
                let mode = std::os::unix::fs::PermissionsExt::from_mode(0o600);
                std::fs::set_permissions(&name, mode).unwrap();
            } else {
                file.sync_all().unwrap();
                drop(file);
            }
            let before = ctime_of(&name);
            std::fs::hard_link(&name, at.join(format!("l{round}"))).unwrap();
            let after = ctime_of(&name);
            assert!(
                after >= before,
                "round {round}: ctime went back from {before:?} to {after:?} at link"
            );
            // A chmod (the server's stamp) and a write through the cache right after it
            // (the kernel's).
            let file = std::fs::OpenOptions::new().write(true).open(&name).unwrap();
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o640);
            std::fs::set_permissions(&name, mode).unwrap();
            let before = ctime_of(&name);
            file.write_all_at(b"y", 1).unwrap();
            let after = ctime_of(&name);
            assert!(
                after >= before,
                "round {round}: ctime went back from {before:?} to {after:?} at a write"
            );
        }
    });
}

/// `syncfs` after an unlink succeeds (the kernel writing back the times it kept of the
/// file gone meanwhile must not fail it).
#[test]
fn syncfs_after_an_unlink_succeeds() {
    on_a_mount(|at| {
        for round in 0..3 {
            std::fs::write(at.join("gone"), b"x").unwrap();
            std::fs::remove_file(at.join("gone")).unwrap();
            let dir = std::fs::File::open(at).unwrap();
            // SAFETY: a valid descriptor.
            let synced = unsafe { libc::syncfs(dir.as_raw_fd()) };
            let error = std::io::Error::last_os_error();
            assert_eq!(synced, 0, "round {round}: syncfs: {error}");
        }
    });
}

/// `fstat` of a descriptor open on a directory removed, or replaced by a rename, shows no
/// links, as on ext4 (xfstests 035), not ENOENT.
#[test]
fn an_open_directory_removed_or_renamed_over_shows_no_links() {
    on_a_mount(|at| {
        std::fs::create_dir(at.join("removed")).unwrap();
        let removed = std::fs::File::open(at.join("removed")).unwrap();
        std::fs::remove_dir(at.join("removed")).unwrap();
        let meta = removed.metadata().expect("fstat of a removed directory");
        assert_eq!(meta.nlink(), 0);
        assert!(meta.is_dir());
        std::fs::create_dir(at.join("replaced")).unwrap();
        let replaced = std::fs::File::open(at.join("replaced")).unwrap();
        std::fs::create_dir(at.join("new")).unwrap();
        std::fs::rename(at.join("new"), at.join("replaced")).unwrap();
        let meta = replaced
            .metadata()
            .expect("fstat of a directory renamed over");
        assert_eq!(meta.nlink(), 0);
        // The directory that took its name is a live one.
        assert!(std::fs::metadata(at.join("replaced")).unwrap().nlink() >= 2);
    });
}

/// A quota holds through the kernel's writeback cache (a file opened again with room is
/// written through it): writing 400 MiB into a file under a 200 MiB quota stops with EDQUOT
/// at a write(2), the quota holds within a stated margin, and every byte a write(2)
/// acknowledged is in the file, whose size is what was acknowledged: no zeros that look
/// like data, also after a restart.
#[test]
fn a_quota_holds_through_the_writeback_cache_and_loses_nothing_acknowledged() {
    const QUOTA: u64 = 200 << 20;
    const CHUNK: usize = 1 << 20;
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &["quota=200M"]);
    let path = at.join("big");
    std::fs::write(&path, b"").unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let mut acknowledged = 0u64;
    let mut refusal = None;
    for step in 0..400u64 {
        match file.write_all_at(&pattern(CHUNK, step), step * CHUNK as u64) {
            Ok(()) => acknowledged += CHUNK as u64,
            Err(err) => {
                refusal = Some(err);
                break;
            }
        }
    }
    let refusal = refusal.expect("400 MiB fit in a 200 MiB quota");
    assert_eq!(refusal.raw_os_error(), Some(libc::EDQUOT), "{refusal}");
    file.sync_all().expect("fsync after the refusal");
    drop(file);
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        size, acknowledged,
        "size against what write(2) acknowledged"
    );
    assert!(
        acknowledged >= QUOTA / 2,
        "only {acknowledged} bytes taken before EDQUOT"
    );
    let check = |path: &Path| {
        let contents = std::fs::read(path).unwrap();
        assert_eq!(contents.len() as u64, acknowledged);
        for (step, chunk) in contents.chunks(CHUNK).enumerate() {
            assert!(
                chunk == pattern(CHUNK, step as u64).as_slice(),
                "MiB {step} of what write(2) acknowledged is not in the file"
            );
        }
    };
    check(&path);
    env.ok(&["pool", "sync", "tank"]);
    let used: u64 = env
        .ok(&["get", "-H", "-p", "-o", "value", "used", "tank/fs"])
        .trim()
        .parse()
        .unwrap();
    // The stated margin: what the kernel may hold acknowledged (its per-mount dirty limit,
    // ~46 MiB here) and 8 MiB.
    assert!(
        used <= QUOTA + (64 << 20),
        "USED {used} against a quota of {QUOTA}"
    );
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    let _server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    check(&path);
    env.ok(&["unmount", "tank/fs"]);
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Set-ID bits go where ext4 takes them away too: a change of owner of a fifo, socket or
/// device by its (unprivileged) owner (pjdfstest chown/00.t), an O_DIRECT write, fallocate,
/// punching a hole and zeroing a range by an unprivileged user (xfstests 355, 683-685),
/// and set-group-ID at an access ACL set by an owner outside the file's group (375).
#[test]
fn set_id_bits_go_at_chown_of_special_files_direct_writes_fallocate_and_acls() {
    use std::os::unix::fs::PermissionsExt;
    let _heavy = heavy();
    let env = Env::new();
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o777)).unwrap();
    let owned_by_nobody = |path: &Path, mode: u32| {
        std::os::unix::fs::lchown(path, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(mode_of(path), mode, "{}: mode as set", path.display());
    };
    let c_path = |path: &Path| std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // Every case is tried; the wrong ones are listed together at the end.
    let mut wrong: Vec<String> = Vec::new();
    let mut expect_mode = |path: &Path, mask: u32, want: u32, after: &str| {
        let found = mode_of(path) & mask;
        if found != want {
            wrong.push(format!(
                "{}: mode {found:o} after {after}, not {want:o}",
                path.display()
            ));
        }
    };

    // Special files, their group changed by their owner.
    let kinds = [
        ("fifo", libc::S_IFIFO, 0),
        ("socket", libc::S_IFSOCK, 0),
        ("chardev", libc::S_IFCHR, libc::makedev(1, 3)),
        ("blockdev", libc::S_IFBLK, libc::makedev(7, 200)),
    ];
    for (name, kind, dev) in kinds {
        let path = at.join(name);
        // SAFETY: a valid NUL-terminated path.
        let made = unsafe { libc::mknod(c_path(&path).as_ptr(), kind | 0o644, dev) };
        assert_eq!(made, 0, "mknod {name}: {}", std::io::Error::last_os_error());
        owned_by_nobody(&path, 0o6755);
        let (ok, out) = as_nobody(&["chgrp", "-h", "65534", path.to_str().unwrap()]);
        assert!(ok, "chgrp {name}: {out}");
        expect_mode(&path, 0o7777, 0o0755, "its owner's chown");
    }

    // Changes of contents by nobody.
    let file = |name: &str| {
        let path = at.join(name);
        std::fs::write(&path, vec![7u8; 16384]).unwrap();
        owned_by_nobody(&path, 0o6777);
        path
    };
    let direct = file("direct");
    let of = format!("of={}", direct.display());
    let (ok, out) = as_nobody(&[
        "dd",
        "if=/dev/zero",
        &of,
        "bs=4096",
        "count=1",
        "oflag=direct",
        "conv=notrunc",
    ]);
    assert!(ok, "dd oflag=direct: {out}");
    expect_mode(&direct, 0o7777, 0o0777, "an O_DIRECT write");
    for (name, args) in [
        ("allocated", vec!["-l", "65536"]),
        ("punched", vec!["-p", "-o", "0", "-l", "4096"]),
        ("zeroed", vec!["-z", "-o", "0", "-l", "4096"]),
    ] {
        let path = file(name);
        let mut argv = vec!["fallocate"];
        argv.extend(args);
        argv.push(path.to_str().unwrap());
        let (ok, out) = as_nobody(&argv);
        assert!(ok, "{argv:?}: {out}");
        expect_mode(&path, 0o7777, 0o0777, &format!("{argv:?}"));
    }

    // An access ACL set by the owner, who is not in the file's group.
    let acl = at.join("acl");
    std::fs::write(&acl, b"x").unwrap();
    std::os::unix::fs::chown(&acl, Some(65534), Some(0)).unwrap();
    std::fs::set_permissions(&acl, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let (ok, out) = as_nobody(&[
        tool("setfacl", "acl").to_str().unwrap(),
        "-m",
        "u:65534:rwx",
        acl.to_str().unwrap(),
    ]);
    assert!(ok, "setfacl: {out}");
    expect_mode(&acl, 0o2000, 0, "an ACL set from outside the group");
    // Root keeps it (CAP_FSETID).
    std::fs::set_permissions(&acl, std::fs::Permissions::from_mode(0o2775)).unwrap();
    let setfacl = run_limited(
        std::process::Command::new(tool("setfacl", "acl"))
            .args(["-m", "u:65534:rx"])
            .arg(&acl),
        std::time::Duration::from_secs(30),
    );
    assert!(setfacl.success(), "{}", setfacl.describe());
    expect_mode(&acl, 0o2000, 0o2000, "root's ACL");
    assert!(wrong.is_empty(), "set-ID bits wrong:\n{}", wrong.join("\n"));
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// A file handle from `name_to_handle_at`, as raw bytes (`struct file_handle`).
fn name_to_handle(path: &Path) -> Vec<u8> {
    const HANDLE_BYTES_MAX: usize = 128;
    let mut handle = vec![0u8; 8 + HANDLE_BYTES_MAX];
    handle[..4].copy_from_slice(&(HANDLE_BYTES_MAX as u32).to_ne_bytes());
    let mut mount_id: libc::c_int = 0;
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path, a buffer of the size its header states, an int.
    let status = unsafe {
        libc::syscall(
            libc::SYS_name_to_handle_at,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            handle.as_mut_ptr(),
            &mut mount_id as *mut libc::c_int,
            0,
        )
    };
    assert_eq!(
        status,
        0,
        "name_to_handle_at {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    handle
}

/// `open_by_handle_at` of `handle` on the mount at `mountpoint`, read whole.
fn read_by_handle(mountpoint: &Path, handle: &mut [u8]) -> Result<Vec<u8>, i32> {
    use std::io::Read;
    use std::os::unix::io::FromRawFd;
    let mount = std::fs::File::open(mountpoint).unwrap();
    // SAFETY: a valid descriptor and a handle buffer as name_to_handle_at filled it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            handle.as_mut_ptr(),
            libc::O_RDONLY,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: a descriptor open_by_handle_at just returned, owned from here.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd as i32) };
    let mut contents = Vec::new();
    if !file.metadata().unwrap().is_dir() {
        file.read_to_end(&mut contents).unwrap();
    }
    Ok(contents)
}

/// Drops the kernel's cached dentries and inodes (root only).
fn drop_kernel_caches() {
    std::fs::write("/proc/sys/vm/drop_caches", b"2").unwrap();
}

/// File handles (`open_by_handle_at`, what NFS servers of a mount use) work for inodes the
/// kernel no longer caches and after a remount; a handle of a deleted file is stale
/// (xfstests 426, 467, 477).
#[test]
fn file_handles_outlive_the_kernels_cache_and_a_remount() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    std::fs::create_dir(at.join("dir")).unwrap();
    std::fs::write(at.join("dir/file"), b"by handle").unwrap();
    std::fs::write(at.join("gone"), b"x").unwrap();
    let mut file_handle = name_to_handle(&at.join("dir/file"));
    let mut dir_handle = name_to_handle(&at.join("dir"));
    let mut gone_handle = name_to_handle(&at.join("gone"));
    std::fs::remove_file(at.join("gone")).unwrap();
    drop_kernel_caches();
    assert_eq!(
        read_by_handle(&at, &mut file_handle),
        Ok(b"by handle".to_vec())
    );
    assert!(read_by_handle(&at, &mut dir_handle).is_ok());
    assert_eq!(read_by_handle(&at, &mut gone_handle), Err(libc::ESTALE));
    // A new file may take the deleted one's object number: the old handle stays stale.
    for round in 0..8 {
        std::fs::write(at.join(format!("new{round}")), b"y").unwrap();
    }
    assert_eq!(read_by_handle(&at, &mut gone_handle), Err(libc::ESTALE));
    env.ok(&["unmount", "tank/fs"]);
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    assert_eq!(
        read_by_handle(&at, &mut file_handle),
        Ok(b"by handle".to_vec())
    );
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

fn set_xattr(path: &Path, name: &std::ffi::CStr, value: &[u8]) -> Result<(), i32> {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: NUL-terminated path and name, a value buffer of the length given.
    let status = unsafe {
        libc::setxattr(
            c_path.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if status == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

fn get_xattr(path: &Path, name: &std::ffi::CStr) -> Result<Vec<u8>, i32> {
    let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    let mut value = vec![0u8; 64 << 10];
    // SAFETY: NUL-terminated path and name; a size query, then a buffer of the length given.
    let (size, got) = unsafe {
        let size = libc::getxattr(c_path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0);
        let got = libc::getxattr(
            c_path.as_ptr(),
            name.as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        );
        (size, got)
    };
    if got < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    assert_eq!(size, got, "the size query and the read disagree");
    value.truncate(got as usize);
    Ok(value)
}

/// `getfacl -n PATH`'s output.
fn getfacl(path: &Path) -> String {
    let run = run_limited(
        std::process::Command::new(tool("getfacl", "acl"))
            .args(["-n", "-p"])
            .arg(path),
        std::time::Duration::from_secs(30),
    );
    assert!(run.success(), "{}", run.describe());
    run.stdout
}

/// Extended attribute values up to 64 KiB (E2BIG only beyond, as the VFS), and an access ACL
/// of 300 named users (over 2 KiB: stored outside the attribute map), kept across a remount;
/// a chmod rewrites the large ACL's mask as it does a small one's.
#[test]
fn xattr_values_up_to_64_kib_and_long_acls_are_kept() {
    use std::os::unix::fs::PermissionsExt;
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    let file = at.join("f");
    std::fs::write(&file, b"x").unwrap();
    let values = [
        (c"user.small", pattern(100, 1)),
        (c"user.edge", pattern(1025, 2)),
        (c"user.large", pattern(64 << 10, 3)),
    ];
    for (name, value) in &values {
        assert_eq!(set_xattr(&file, name, value), Ok(()), "{name:?}");
    }
    assert_eq!(
        set_xattr(&file, c"user.huge", &pattern((64 << 10) + 1, 4)),
        Err(libc::E2BIG)
    );
    let acl_file = at.join("acl");
    std::fs::write(&acl_file, b"y").unwrap();
    let entries: Vec<String> = (0..300).map(|i| format!("u:{}:r", 20_000 + i)).collect();
    let setfacl = run_limited(
        std::process::Command::new(tool("setfacl", "acl"))
            .arg("-m")
            .arg(entries.join(","))
            .arg(&acl_file),
        std::time::Duration::from_secs(30),
    );
    assert!(setfacl.success(), "{}", setfacl.describe());
    std::fs::set_permissions(&acl_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let acl = getfacl(&acl_file);
    assert_eq!(acl.matches("user:2").count(), 300, "{acl}");
    assert!(acl.contains("mask::r--"), "chmod 640 sets the mask: {acl}");
    env.ok(&["unmount", "tank/fs"]);
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    for (name, value) in &values {
        assert_eq!(get_xattr(&file, name).as_ref(), Ok(value), "{name:?}");
    }
    assert_eq!(getfacl(&acl_file), acl);
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}
