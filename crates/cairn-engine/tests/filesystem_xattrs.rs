//! Extended attribute values up to the VFS's 64 KiB (issue 32, point 10): values too large
//! for a map entry live in objects of their own. Set, get, replace across the two kinds,
//! remove, refusals; kept across export and import and through the intent log after a power
//! cut; nothing leaked when an inode goes; and `pool check` finds a value object no inode
//! reaches.

mod common;

use cairn_fs::{FsError, XATTR_VALUE_BYTES_MAX, XattrMode};
use common::*;

fn listed(fs: &cairn_fs::Filesystem, object: u64) -> Vec<Vec<u8>> {
    let mut names = fs.listxattr(object).unwrap();
    names.sort();
    names
}

#[test]
fn values_of_every_size_up_to_64_kib_round_trip_and_are_freed() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let sizes = [0, 1, 1024, 1025, 4096, 20_000, XATTR_VALUE_BYTES_MAX];
    let file_object;
    {
        let pool = create_mirror(&paths, plain_opener());
        let fs = new_filesystem(&pool, "tank/fs", &[]);
        let root = fs.root();
        let (f, _) = fs.create(root, b"f", file(0o644)).unwrap();
        file_object = f;
        for (i, &size) in sizes.iter().enumerate() {
            let name = format!("user.v{i}");
            let value = pattern(size, i as u64);
            fs.setxattr(f, name.as_bytes(), &value, XattrMode::Create)
                .unwrap();
            assert_eq!(fs.getxattr(f, name.as_bytes()).unwrap(), value, "{size}");
        }
        let err = fs
            .setxattr(
                f,
                b"user.big",
                &pattern(XATTR_VALUE_BYTES_MAX + 1, 1),
                XattrMode::Any,
            )
            .unwrap_err();
        assert!(matches!(err, FsError::ValueTooLarge(_)), "{err:?}");
        assert_eq!(err.errno(), libc::E2BIG);
        // Create refuses an existing large value; replace refuses a missing one.
        let err = fs
            .setxattr(f, b"user.v6", b"x", XattrMode::Create)
            .unwrap_err();
        assert!(matches!(err, FsError::Exists), "{err:?}");
        let err = fs
            .setxattr(f, b"user.none", &pattern(5000, 3), XattrMode::Replace)
            .unwrap_err();
        assert!(matches!(err, FsError::NoAttribute), "{err:?}");
        // Replacements across the two kinds: large by small, small by large, large by large.
        fs.setxattr(f, b"user.v3", b"small now", XattrMode::Replace)
            .unwrap();
        fs.setxattr(f, b"user.v1", &pattern(30_000, 9), XattrMode::Replace)
            .unwrap();
        fs.setxattr(f, b"user.v5", &pattern(2000, 10), XattrMode::Any)
            .unwrap();
        fs.removexattr(f, b"user.v4").unwrap();
        pool.sync().unwrap();
        pool.export().unwrap();
    }
    {
        let pool = import(&paths, plain_opener()).unwrap();
        let fs = pool.filesystem("tank/fs").unwrap();
        let f = file_object;
        let expected: Vec<(&[u8], Vec<u8>)> = vec![
            (b"user.v0", Vec::new()),
            (b"user.v1", pattern(30_000, 9)),
            (b"user.v2", pattern(1024, 2)),
            (b"user.v3", b"small now".to_vec()),
            (b"user.v5", pattern(2000, 10)),
            (b"user.v6", pattern(XATTR_VALUE_BYTES_MAX, 6)),
        ];
        for (name, value) in &expected {
            assert_eq!(&fs.getxattr(f, name).unwrap(), value);
        }
        let names: Vec<Vec<u8>> = expected.iter().map(|(name, _)| name.to_vec()).collect();
        assert_eq!(listed(&fs, f), names);
        assert!(matches!(
            fs.getxattr(f, b"user.v4"),
            Err(FsError::NoAttribute)
        ));
        pool.export().unwrap();
    }
    let report = check_read_only(&paths);
    assert!(report.is_clean(), "{:?}", report.problems());
    // The file goes: its map and every value object with it.
    let used_with_file;
    {
        let pool = import(&paths, plain_opener()).unwrap();
        used_with_file = info(&pool, "tank/fs").used_bytes;
        let fs = pool.filesystem("tank/fs").unwrap();
        fs.unlink(fs.root(), b"f").unwrap();
        pool.sync().unwrap();
        assert!(
            info(&pool, "tank/fs").used_bytes + 100_000 < used_with_file,
            "unlinking the file freed less than its values"
        );
        pool.export().unwrap();
    }
    let report = check_read_only(&paths);
    assert!(report.is_clean(), "{:?}", report.problems());
}

#[test]
fn large_values_are_replayed_from_the_intent_log() {
    use cairn_emulate::PowerSwitch;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let power = Arc::new(PowerSwitch::with_seed(7));
    let f;
    {
        let pool = create_mirror(&paths, emulated_opener(7, Some(power.clone())));
        let fs = new_filesystem(&pool, "tank/fs", &[]);
        let root = fs.root();
        // Nothing below reaches a synced txg: what survives comes from the log.
        let (created, _) = fs.create(root, b"f", file(0o644)).unwrap();
        f = created;
        fs.setxattr(
            f,
            b"user.big",
            &pattern(XATTR_VALUE_BYTES_MAX, 1),
            XattrMode::Any,
        )
        .unwrap();
        fs.setxattr(f, b"user.mid", &pattern(5000, 2), XattrMode::Any)
            .unwrap();
        fs.setxattr(f, b"user.mid", &pattern(7000, 3), XattrMode::Replace)
            .unwrap();
        fs.setxattr(f, b"user.gone", &pattern(3000, 4), XattrMode::Any)
            .unwrap();
        fs.removexattr(f, b"user.gone").unwrap();
        fs.fsync(f).unwrap();
        power.cut_now();
        drop(fs);
        drop(pool);
    }
    let pool = import(&paths, plain_opener()).unwrap();
    let notes = pool.notes().join("\n");
    assert!(notes.contains("tank/fs: replayed"), "{notes}");
    let fs = pool.filesystem("tank/fs").unwrap();
    assert_eq!(
        fs.getxattr(f, b"user.big").unwrap(),
        pattern(XATTR_VALUE_BYTES_MAX, 1)
    );
    assert_eq!(fs.getxattr(f, b"user.mid").unwrap(), pattern(7000, 3));
    assert!(matches!(
        fs.getxattr(f, b"user.gone"),
        Err(FsError::NoAttribute)
    ));
    drop(fs);
    pool.export().unwrap();
    let report = check_read_only(&paths);
    assert!(report.is_clean(), "{:?}", report.problems());
}

#[test]
fn pool_check_names_attribute_objects_no_inode_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    {
        let pool = create_mirror(&paths, plain_opener());
        let fs = new_filesystem(&pool, "tank/fs", &[]);
        let (f, _) = fs.create(fs.root(), b"f", file(0o644)).unwrap();
        fs.setxattr(f, b"user.big", &pattern(10_000, 1), XattrMode::Any)
            .unwrap();
        // Damage: the inode forgets its map, so the map and its value object are leaked.
        let mut attrs = fs.getattr(f).unwrap();
        attrs.xattr_object = 0;
        let engine = pool.txg_engine().unwrap();
        let hold = engine.hold();
        fs.objset()
            .set_bonus(hold.txg(), f, attrs.encode())
            .unwrap();
        drop(hold);
        pool.sync().unwrap();
        pool.export().unwrap();
    }
    let report = check_read_only(&paths);
    let leaked = report
        .problems()
        .iter()
        .filter(|problem| problem.contains("belongs to no inode (leaked)"))
        .count();
    assert_eq!(leaked, 2, "{:?}", report.problems());
}
