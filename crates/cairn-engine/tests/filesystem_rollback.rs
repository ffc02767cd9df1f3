//! Rollback of a filesystem that is open through the engine's API (issue 34): allowed, no
//! unmount or close needed. The old handle is retired (every call on it fails with `Stale`,
//! never reaching the old head's blocks or its intent log); the dataset opens again over
//! the snapshot's state, with inode numbers never handed out twice and files open in both
//! heads still open (an unlinked-while-open file of the snapshot is kept until its last
//! close); writes after the rollback are durable across export and import, nothing written
//! to the old head since is, and `pool check` is clean.

mod common;

use cairn_engine::Pool;
use cairn_fs::{FsError, ROOT_OBJECT};
use common::*;

fn read_all(fs: &cairn_fs::Filesystem, object: u64) -> Vec<u8> {
    fs.read(object, 0, 1 << 20).unwrap()
}

fn names(fs: &cairn_fs::Filesystem) -> Vec<String> {
    let mut names: Vec<String> = fs
        .names_of(ROOT_OBJECT)
        .unwrap()
        .into_iter()
        .map(|(name, _)| String::from_utf8(name).unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn an_open_filesystem_rolls_back_and_its_old_handle_is_retired() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let (a, _) = fs.create(ROOT_OBJECT, b"a", file(0o644)).unwrap();
    fs.write(a, 0, b"at the snapshot").unwrap();
    let (orphan, _) = fs.create(ROOT_OBJECT, b"orphan", file(0o644)).unwrap();
    fs.write(orphan, 0, b"unlinked while open").unwrap();
    // Open and unlinked: in the delete queue when the snapshot is taken.
    fs.open_inode(orphan).unwrap();
    fs.unlink(ROOT_OBJECT, b"orphan").unwrap();
    let (gone, _) = fs.create(ROOT_OBJECT, b"gone", file(0o600)).unwrap();
    fs.write(gone, 0, b"deleted later").unwrap();
    pool.snapshot(&["tank/fs@a".to_string()], false).unwrap();

    fs.write(a, 0, b"AFTER the snapshot, longer").unwrap();
    let (new, _) = fs.create(ROOT_OBJECT, b"new", file(0o644)).unwrap();
    fs.write(new, 0, b"made after").unwrap();
    fs.open_inode(new).unwrap();
    fs.open_inode(a).unwrap();
    fs.unlink(ROOT_OBJECT, b"gone").unwrap();
    pool.sync().unwrap();
    // Written to the old head and never synced: discarded with it.
    fs.write(a, 0, b"UNSYNCED").unwrap();
    let highest_before = new;

    pool.rollback("tank/fs@a", false, false).unwrap();

    // The old handle: every call fails, reads included.
    assert!(fs.is_retired());
    assert!(matches!(fs.getattr(a), Err(FsError::Stale)));
    assert!(matches!(fs.read(a, 0, 16), Err(FsError::Stale)));
    assert!(matches!(fs.lookup(ROOT_OBJECT, b"a"), Err(FsError::Stale)));
    assert!(matches!(fs.write(a, 0, b"late"), Err(FsError::Stale)));
    assert!(matches!(
        fs.create(ROOT_OBJECT, b"late", file(0o644)),
        Err(FsError::Stale)
    ));
    assert!(matches!(fs.fsync(a), Err(FsError::Stale)));
    assert_eq!(FsError::Stale.errno(), libc::EIO);

    // The dataset opens again over the snapshot's state.
    let rolled = pool.filesystem("tank/fs").unwrap();
    assert!(!std::sync::Arc::ptr_eq(&rolled, &fs));
    assert_eq!(names(&rolled), ["a", "gone"]);
    assert_eq!(read_all(&rolled, a), b"at the snapshot");
    assert_eq!(rolled.getattr(a).unwrap().size, 15);
    assert_eq!(read_all(&rolled, gone), b"deleted later");
    assert!(matches!(rolled.getattr(new), Err(FsError::NotFound)));
    // The snapshot's unlinked-while-open file is still open here: kept until its last close.
    assert_eq!(read_all(&rolled, orphan), b"unlinked while open");
    rolled.release_inode(orphan).unwrap();
    assert!(matches!(rolled.getattr(orphan), Err(FsError::NotFound)));
    // An open carried over is released like any other.
    rolled.release_inode(a).unwrap();
    // No inode number the old head handed out is handed out again.
    let (post, _) = rolled.create(ROOT_OBJECT, b"post", file(0o644)).unwrap();
    assert!(
        post > highest_before,
        "{post} reused (old head went to {highest_before})"
    );
    rolled.write(post, 0, b"after the rollback").unwrap();
    rolled.write(a, 0, b"AT").unwrap();
    rolled.fsync(a).unwrap();

    pool.export().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    assert_eq!(names(&fs), ["a", "gone", "post"]);
    assert_eq!(read_all(&fs, a), b"AT the snapshot");
    assert_eq!(read_all(&fs, post), b"after the rollback");
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    pool.export().unwrap();
}

#[test]
fn a_refused_rollback_leaves_the_open_filesystem_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool: Pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let (a, _) = fs.create(ROOT_OBJECT, b"a", file(0o644)).unwrap();
    fs.write(a, 0, b"one").unwrap();
    pool.snapshot(&["tank/fs@one".to_string()], false).unwrap();
    fs.write(a, 0, b"two").unwrap();
    pool.snapshot(&["tank/fs@two".to_string()], false).unwrap();
    fs.write(a, 0, b"now").unwrap();
    assert!(pool.rollback("tank/fs@one", false, false).is_err());
    assert!(!fs.is_retired());
    assert_eq!(read_all(&fs, a), b"now");
    assert!(std::sync::Arc::ptr_eq(
        &fs,
        &pool.filesystem("tank/fs").unwrap()
    ));
    pool.rollback("tank/fs@one", true, false).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    assert_eq!(read_all(&fs, a), b"one");
    assert_eq!(pool.snapshots(Some("tank/fs")).unwrap().len(), 1);
    pool.export().unwrap();
}
