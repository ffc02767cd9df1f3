//! Bookmarks through the pool's API: made from a snapshot (or copied from a bookmark) of the
//! same dataset, they keep its txg and time after the snapshot is destroyed and hold no block
//! (the destroy frees everything, `pool check` clean); names are checked; they survive export
//! and import, go with their dataset, and move with a promote as their snapshots do.

mod common;

use cairn_engine::{ImportSource, Pool};
use common::*;

fn new_pool(dir: &std::path::Path) -> Pool {
    let pool = create_mirror(&device_paths(dir, 2), plain_opener());
    pool.create_volume_as(
        "tank/vol",
        4 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), "8192".into())],
    )
    .unwrap();
    pool
}

fn write(pool: &Pool, name: &str, seed: u8) {
    let volume = pool.volume(name).unwrap();
    volume.write(0, &vec![seed; 256 << 10]).unwrap();
    volume.flush().unwrap();
}

fn names(pool: &Pool) -> Vec<String> {
    pool.bookmarks(None)
        .unwrap()
        .into_iter()
        .map(|listing| listing.name)
        .collect()
}

fn wait_for_frees(pool: &Pool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pool.freeing_bytes() > 0 {
        assert!(std::time::Instant::now() < deadline, "frees finish");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_bookmark_outlives_its_snapshot_and_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write(&pool, "tank/vol", 1);
    pool.snapshot(&["tank/vol@monday".to_string()], false)
        .unwrap();
    let monday = pool.snapshot_info("tank/vol@monday").unwrap();
    pool.bookmark("tank/vol@monday", "tank/vol#monday").unwrap();
    pool.bookmark("tank/vol#monday", "tank/vol#copy").unwrap();
    let listed = pool.bookmarks(Some("tank/vol")).unwrap();
    assert_eq!(listed.len(), 2);
    assert!(
        listed
            .iter()
            .all(|bookmark| bookmark.created_txg == monday.created_txg
                && bookmark.creation_ms == monday.creation_ms
                && bookmark.referenced_bytes == monday.referenced_bytes)
    );
    // Overwrite everything: only the snapshot holds the old blocks; destroying it frees them
    // all, the bookmarks notwithstanding.
    write(&pool, "tank/vol", 2);
    pool.sync().unwrap();
    assert!(pool.snapshot_info("tank/vol@monday").unwrap().used_bytes >= 256 << 10);
    pool.destroy_snapshot("tank/vol@monday").unwrap();
    wait_for_frees(&pool);
    assert_eq!(
        pool.snapshot_space("tank/vol")
            .unwrap()
            .used_by_snapshots_bytes,
        0
    );
    assert_eq!(names(&pool), ["tank/vol#copy", "tank/vol#monday"]);
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    // Across export and import.
    pool.export().unwrap();
    let pool = Pool::import(
        &ImportSource::Directory(dir.path().into()),
        "tank",
        options(plain_opener()),
    )
    .unwrap();
    let after = pool.bookmarks(Some("tank/vol")).unwrap();
    assert_eq!(after, listed);
    pool.destroy_bookmark("tank/vol#copy").unwrap();
    assert_eq!(names(&pool), ["tank/vol#monday"]);
    // A dataset's bookmarks go with it.
    pool.destroy_dataset("tank/vol").unwrap();
    assert!(names(&pool).is_empty());
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}

#[test]
fn bad_bookmark_requests_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    pool.create_volume("tank/other", 1 << 20, &[]).unwrap();
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    pool.snapshot(&["tank/other@a".to_string()], false).unwrap();
    pool.bookmark("tank/vol@a", "tank/vol#a").unwrap();
    for (source, target) in [
        ("tank/vol@a", "tank/vol#a"),    // exists
        ("tank/vol@none", "tank/vol#b"), // no such snapshot
        ("tank/vol#none", "tank/vol#b"), // no such bookmark
        ("tank/other@a", "tank/vol#b"),  // another dataset's snapshot
        ("tank/vol@a", "tank/vol#bad name"),
        ("tank/vol@a", "tank/vol@b"),   // not a bookmark name
        ("tank/vol", "tank/vol#b"),     // not a snapshot
        ("tank/none@a", "tank/none#b"), // no such dataset
    ] {
        assert!(
            pool.bookmark(source, target).is_err(),
            "bookmark {source} {target} accepted"
        );
    }
    assert_eq!(names(&pool), ["tank/vol#a"]);
    assert!(pool.destroy_bookmark("tank/vol#none").is_err());
    assert!(pool.destroy_bookmark("tank/vol@a").is_err());
}

#[test]
fn promote_moves_the_bookmarks_of_the_snapshots_it_moves() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write(&pool, "tank/vol", 1);
    pool.snapshot(&["tank/vol@old".to_string()], false).unwrap();
    pool.bookmark("tank/vol@old", "tank/vol#old").unwrap();
    pool.snapshot(&["tank/vol@origin".to_string()], false)
        .unwrap();
    write(&pool, "tank/vol", 2);
    pool.snapshot(&["tank/vol@later".to_string()], false)
        .unwrap();
    pool.bookmark("tank/vol@later", "tank/vol#later").unwrap();
    pool.clone_snapshot("tank/vol@origin", "tank/clone", &[])
        .unwrap();
    pool.promote("tank/clone").unwrap();
    assert_eq!(names(&pool), ["tank/clone#old", "tank/vol#later"]);
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}
