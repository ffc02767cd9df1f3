//! Snapshots browsed through a mount (issue 34): `.cairn/snapshot/<name>/` through the real
//! kernel FUSE. Snapshots taken by the CLI while mounted are listed live, show what was
//! written before them (not what came after), refuse every change with EROFS (as do `.cairn`
//! and `.cairn/snapshot` themselves), and disappear when destroyed; `snapdir` decides whether
//! the root lists `.cairn`, which can be entered by name either way, and the name `.cairn`
//! cannot be taken in the root. Mounting needs root and /dev/fuse (CI runs as root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|err| panic!("{}: {err}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The errno of a failed `std::fs` call.
fn errno_of<T: std::fmt::Debug>(result: std::io::Result<T>) -> i32 {
    result
        .expect_err("should have failed")
        .raw_os_error()
        .unwrap_or(0)
}

#[test]
fn snapshots_are_browsable_read_only_under_dot_cairn() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, _server) = served_mount(&env, "tank/fs", &[]);

    // Before any snapshot: the directory is there, empty, and hidden from the root.
    std::fs::write(at.join("a.txt"), b"monday's a").unwrap();
    std::fs::create_dir(at.join("docs")).unwrap();
    std::fs::write(at.join("docs/b.txt"), b"monday's b").unwrap();
    std::os::unix::fs::symlink("docs/b.txt", at.join("link")).unwrap();
    xattr_set(&at.join("a.txt"), "user.day", b"monday");
    assert_eq!(names(&at), ["a.txt", "docs", "link"]);
    let snapdir = at.join(".cairn/snapshot");
    assert_eq!(names(&at.join(".cairn")), ["snapshot"]);
    assert!(names(&snapdir).is_empty());

    env.ok(&["snapshot", "tank/fs@monday"]);
    // Changes after the snapshot: the head moves on, the snapshot does not.
    std::fs::write(at.join("a.txt"), b"tuesday's a, longer").unwrap();
    std::fs::remove_file(at.join("docs/b.txt")).unwrap();
    std::fs::write(at.join("c.txt"), b"tuesday's c").unwrap();
    env.ok(&["snapshot", "tank/fs@tuesday"]);

    // Listed live: both snapshots taken after the mount.
    assert_eq!(names(&snapdir), ["monday", "tuesday"]);
    let monday = snapdir.join("monday");
    let tuesday = snapdir.join("tuesday");
    assert_eq!(names(&monday), ["a.txt", "docs", "link"]);
    assert_eq!(std::fs::read(monday.join("a.txt")).unwrap(), b"monday's a");
    assert_eq!(
        std::fs::read(monday.join("docs/b.txt")).unwrap(),
        b"monday's b"
    );
    assert_eq!(
        std::fs::read_link(monday.join("link")).unwrap(),
        Path::new("docs/b.txt")
    );
    assert_eq!(std::fs::read(monday.join("link")).unwrap(), b"monday's b");
    assert_eq!(
        xattr_get(&monday.join("a.txt"), "user.day").as_deref(),
        Some(&b"monday"[..])
    );
    assert_eq!(names(&tuesday), ["a.txt", "c.txt", "docs", "link"]);
    assert_eq!(
        std::fs::read(tuesday.join("a.txt")).unwrap(),
        b"tuesday's a, longer"
    );
    assert!(names(&tuesday.join("docs")).is_empty());
    assert_eq!(
        std::fs::read(at.join("a.txt")).unwrap(),
        b"tuesday's a, longer"
    );
    // getattr: the snapshot's own attributes, and inode numbers apart from the head's and
    // from each other's.
    let head_a = std::fs::metadata(at.join("a.txt")).unwrap();
    let monday_a = std::fs::metadata(monday.join("a.txt")).unwrap();
    let tuesday_a = std::fs::metadata(tuesday.join("a.txt")).unwrap();
    assert_eq!(monday_a.len(), 10);
    assert_eq!(tuesday_a.len(), head_a.len());
    assert_ne!(monday_a.ino(), head_a.ino());
    assert_ne!(monday_a.ino(), tuesday_a.ino());
    assert_ne!(tuesday_a.ino(), head_a.ino());
    assert_eq!(monday_a.dev(), head_a.dev(), "one mount");
    // `..` of a snapshot's root leads back to the snapshot directory.
    assert_eq!(
        std::fs::canonicalize(monday.join("docs/../..")).unwrap(),
        std::fs::canonicalize(&snapdir).unwrap()
    );

    // Every change inside a snapshot, and of the control directory itself, is EROFS.
    let erofs = libc::EROFS;
    assert_eq!(errno_of(std::fs::write(monday.join("a.txt"), b"x")), erofs);
    assert_eq!(
        errno_of(
            std::fs::OpenOptions::new()
                .append(true)
                .open(monday.join("a.txt"))
        ),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::write(monday.join("new.txt"), b"x")),
        erofs
    );
    assert_eq!(errno_of(std::fs::remove_file(monday.join("a.txt"))), erofs);
    assert_eq!(errno_of(std::fs::create_dir(monday.join("dir"))), erofs);
    assert_eq!(errno_of(std::fs::remove_dir(monday.join("docs"))), erofs);
    assert_eq!(
        errno_of(std::fs::rename(monday.join("a.txt"), monday.join("z.txt"))),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::rename(monday.join("a.txt"), at.join("z.txt"))),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::set_permissions(
            monday.join("a.txt"),
            std::fs::Permissions::from_mode(0o600)
        )),
        erofs
    );
    assert_eq!(
        errno_of(std::os::unix::fs::symlink("x", monday.join("s"))),
        erofs
    );
    assert_eq!(
        errno_of(std::fs::hard_link(monday.join("a.txt"), monday.join("h"))),
        erofs
    );
    assert_eq!(
        xattr_set_errno(&monday.join("a.txt"), "user.x", b"1"),
        erofs
    );
    assert_eq!(errno_of(std::fs::create_dir(snapdir.join("friday"))), erofs);
    assert_eq!(errno_of(std::fs::remove_dir(&monday)), erofs);
    assert_eq!(
        errno_of(std::fs::rename(&monday, snapdir.join("monday2"))),
        erofs
    );
    assert_eq!(errno_of(std::fs::write(at.join(".cairn/x"), b"x")), erofs);
    assert_eq!(errno_of(std::fs::remove_dir(at.join(".cairn"))), erofs);
    assert_eq!(
        errno_of(std::fs::rename(at.join(".cairn"), at.join("elsewhere"))),
        erofs
    );
    // The name `.cairn` in the root is the control directory's: a file renamed over it is
    // refused by the kernel (a directory is there), a directory by cairn.
    assert_eq!(
        errno_of(std::fs::rename(at.join("c.txt"), at.join(".cairn"))),
        libc::EISDIR
    );
    std::fs::create_dir(at.join("empty")).unwrap();
    assert_eq!(
        errno_of(std::fs::rename(at.join("empty"), at.join(".cairn"))),
        libc::EEXIST
    );
    std::fs::remove_dir(at.join("empty")).unwrap();
    assert_eq!(
        errno_of(std::fs::create_dir(at.join(".cairn"))),
        libc::EEXIST
    );
    // Nothing of that changed the snapshot (or left anything in the head).
    assert_eq!(names(&monday), ["a.txt", "docs", "link"]);
    assert_eq!(std::fs::read(monday.join("a.txt")).unwrap(), b"monday's a");
    assert_eq!(names(&at), ["a.txt", "c.txt", "docs", "link"]);

    // snapdir=visible: the root lists `.cairn` too (live); hidden again: not.
    env.ok(&["set", "snapdir=visible", "tank/fs"]);
    assert_eq!(names(&at), [".cairn", "a.txt", "c.txt", "docs", "link"]);
    let listed = run(Path::new("/bin/ls"), &["-la", at.to_str().unwrap()]).ok();
    assert!(
        listed.describe().contains(".cairn"),
        "{}",
        listed.describe()
    );
    env.ok(&["set", "snapdir=hidden", "tank/fs"]);
    assert_eq!(names(&at), ["a.txt", "c.txt", "docs", "link"]);
    // A child dataset inherits the property.
    env.ok(&["set", "snapdir=visible", "tank"]);
    env.ok(&["create", "tank/other"]);
    let got = env.ok(&["get", "snapdir", "tank/other"]);
    assert!(
        got.contains("visible") && got.contains("inherited"),
        "{got}"
    );

    // A file held open in a snapshot that is destroyed: later reads fail, never show data.
    let held = std::fs::File::open(tuesday.join("c.txt")).unwrap();
    env.ok(&["destroy", "tank/fs@tuesday"]);
    let mut buf = [0u8; 64];
    // Nothing of it was read before: the read reaches cairn, which must refuse it (before
    // anything lists the snapshots again: the destroy itself closed it).
    let read = std::os::unix::fs::FileExt::read_at(&held, &mut buf, 0);
    assert_eq!(
        read.map_err(|err| err.raw_os_error()).err(),
        Some(Some(libc::ENOENT)),
        "a read of a destroyed snapshot's file"
    );
    assert_eq!(names(&snapdir), ["monday"]);
    assert_eq!(errno_of(std::fs::metadata(&tuesday)), libc::ENOENT);
    assert_eq!(errno_of(std::fs::read(tuesday.join("a.txt"))), libc::ENOENT);
    drop(held);
    // Taken again under the same name: the new contents, not the old ones.
    std::fs::write(at.join("c.txt"), b"wednesday's c").unwrap();
    env.ok(&["snapshot", "tank/fs@tuesday"]);
    assert_eq!(names(&snapdir), ["monday", "tuesday"]);
    assert_eq!(
        std::fs::read(tuesday.join("c.txt")).unwrap(),
        b"wednesday's c"
    );
    // Monday was untouched throughout.
    assert_eq!(
        std::fs::read(monday.join("docs/b.txt")).unwrap(),
        b"monday's b"
    );
    env.ok(&["destroy", "tank/fs@monday"]);
    assert_eq!(names(&snapdir), ["tuesday"]);
}

fn c_path(path: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn xattr_set_errno(path: &Path, name: &str, value: &[u8]) -> i32 {
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated path and name, a buffer of `value.len()` bytes.
    let status = unsafe {
        libc::setxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if status == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }
}

fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    assert_eq!(xattr_set_errno(path, name, value), 0, "setxattr {name}");
}

fn xattr_get(path: &Path, name: &str) -> Option<Vec<u8>> {
    let name = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid NUL-terminated path and name, a buffer of `buf.len()` bytes.
    let len = unsafe {
        libc::getxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let len = usize::try_from(len).ok()?;
    buf.truncate(len);
    Some(buf)
}
