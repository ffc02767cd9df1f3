//! Filesystem datasets through the engine: namespace operations, file contents in small and
//! record-sized blocks, persistence across export and import, a large directory, and a
//! random sequence of operations checked against an in-memory model.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod common;

use cairn_engine::Pool;
use cairn_fs::attrs::FileKind;
use cairn_fs::{FsError, NewInode, RenameMode, SetAttrs};
use common::*;
use std::collections::BTreeMap;

fn dir_inode() -> NewInode {
    NewInode {
        kind: FileKind::Directory,
        mode: 0o755,
        uid: 0,
        gid: 0,
        rdev: 0,
    }
}

fn names(fs: &cairn_fs::Filesystem, dir: u64) -> Vec<String> {
    let mut out = Vec::new();
    fs.readdir(dir, 0, |entry| {
        out.push(String::from_utf8_lossy(&entry.name).into_owned());
        true
    })
    .unwrap();
    out.sort();
    out
}

#[test]
fn namespace_and_contents_survive_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let big = pattern(1_000_000, 7);
    let small = b"hello, cairn".to_vec();
    {
        let pool = create_mirror(&paths, plain_opener());
        let fs = new_filesystem(&pool, "tank/home", &[("recordsize", "64K")]);
        let root = fs.root();
        let (docs, attrs) = fs.mkdir(root, b"docs", dir_inode()).unwrap();
        assert_eq!(attrs.kind, FileKind::Directory);
        assert_eq!(fs.getattr(root).unwrap().links, 3);
        let (a, _) = fs.create(docs, b"a.txt", file(0o644)).unwrap();
        fs.write(a, 0, &small).unwrap();
        // A small file is one block of its own size.
        assert_eq!(fs.objset().dnode(a).unwrap().data_block_size, 512);
        let (b, _) = fs.create(docs, b"big.bin", file(0o600)).unwrap();
        // Written in pieces that grow the single block, then past a record.
        fs.write(b, 0, &big[..3000]).unwrap();
        assert_eq!(fs.objset().dnode(b).unwrap().data_block_size, 3072);
        fs.write(b, 3000, &big[3000..]).unwrap();
        assert_eq!(fs.objset().dnode(b).unwrap().data_block_size, 64 << 10);
        assert_eq!(fs.read(b, 0, big.len() + 10).unwrap(), big);
        fs.symlink(root, b"link", b"docs/a.txt", file(0)).unwrap();
        fs.link(a, root, b"hard").unwrap();
        assert_eq!(fs.getattr(a).unwrap().links, 2);
        fs.rename(docs, b"big.bin", root, b"moved.bin", RenameMode::Replace)
            .unwrap();
        let err = fs.rmdir(root, b"docs").unwrap_err();
        assert!(matches!(err, FsError::NotEmpty), "{err:?}");
        pool.export().unwrap();
    }
    let pool = import(&paths, plain_opener()).unwrap();
    let fs = pool.filesystem("tank/home").unwrap();
    let root = fs.root();
    assert_eq!(
        names(&fs, root),
        [".", "..", "docs", "hard", "link", "moved.bin"]
    );
    let (moved, attrs) = fs.lookup(root, b"moved.bin").unwrap();
    assert_eq!(attrs.size, big.len() as u64);
    assert_eq!(attrs.mode, 0o600);
    assert_eq!(fs.read(moved, 0, big.len()).unwrap(), big);
    let (link, _) = fs.lookup(root, b"link").unwrap();
    assert_eq!(fs.readlink(link).unwrap(), b"docs/a.txt");
    let (docs, _) = fs
        .lookup(root, b".")
        .and_then(|_| fs.lookup(root, b"docs"))
        .unwrap();
    let (a, _) = fs.lookup(docs, b"a.txt").unwrap();
    assert_eq!(fs.read(a, 0, 100).unwrap(), small);
    assert_eq!(fs.lookup(docs, b"..").unwrap().0, root);
    // Unlink both names: the inode goes away.
    fs.unlink(docs, b"a.txt").unwrap();
    assert_eq!(fs.getattr(a).unwrap().links, 1);
    fs.unlink(root, b"hard").unwrap();
    assert!(matches!(fs.getattr(a), Err(FsError::NotFound)));
    fs.rmdir(root, b"docs").unwrap();
    assert_eq!(fs.getattr(root).unwrap().links, 2);
    assert_eq!(names(&fs, root), [".", "..", "link", "moved.bin"]);
}

#[test]
fn truncate_and_sparse_files_read_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[("recordsize", "8K")]);
    let (f, _) = fs.create(fs.root(), b"f", file(0o644)).unwrap();
    let data = pattern(40_000, 3);
    fs.write(f, 100_000, &data).unwrap();
    let all = fs.read(f, 0, 200_000).unwrap();
    assert_eq!(all.len(), 140_000);
    assert!(all[..100_000].iter().all(|b| *b == 0));
    assert_eq!(&all[100_000..], &data[..]);
    fs.setattr(
        f,
        SetAttrs {
            size: Some(110_001),
            ..SetAttrs::default()
        },
    )
    .unwrap();
    fs.setattr(
        f,
        SetAttrs {
            size: Some(150_000),
            ..SetAttrs::default()
        },
    )
    .unwrap();
    let all = fs.read(f, 0, 200_000).unwrap();
    assert_eq!(all.len(), 150_000);
    assert_eq!(&all[100_000..110_001], &data[..10_001]);
    assert!(
        all[110_001..].iter().all(|b| *b == 0),
        "truncation left old bytes"
    );
    pool.sync().unwrap();
    let all = fs.read(f, 0, 200_000).unwrap();
    assert!(all[110_001..].iter().all(|b| *b == 0));
}

#[test]
fn open_unlinked_file_lives_until_release_and_crash_drains_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let object;
    {
        let pool = create_mirror(&paths, plain_opener());
        let fs = new_filesystem(&pool, "tank/fs", &[]);
        let (f, _) = fs.create(fs.root(), b"tmp", file(0o644)).unwrap();
        object = f;
        fs.write(f, 0, &pattern(300_000, 1)).unwrap();
        fs.open_inode(f).unwrap();
        fs.unlink(fs.root(), b"tmp").unwrap();
        // Still readable through the open handle.
        assert_eq!(fs.read(f, 0, 10).unwrap().len(), 10);
        assert_eq!(fs.getattr(f).unwrap().links, 0);
        // The pool goes away with the file still open (as a crash would leave it).
        pool.export().unwrap();
    }
    let pool = import(&paths, plain_opener()).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    assert!(matches!(fs.getattr(object), Err(FsError::NotFound)));
    // And the normal path: the last release frees it.
    let (g, _) = fs.create(fs.root(), b"g", file(0o644)).unwrap();
    fs.open_inode(g).unwrap();
    fs.unlink(fs.root(), b"g").unwrap();
    assert!(fs.getattr(g).is_ok());
    fs.release_inode(g).unwrap();
    assert!(matches!(fs.getattr(g), Err(FsError::NotFound)));
}

#[test]
fn rename_modes_and_loops() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = fs.root();
    let (a, _) = fs.mkdir(root, b"a", dir_inode()).unwrap();
    let (b, _) = fs.mkdir(a, b"b", dir_inode()).unwrap();
    let (x, _) = fs.create(root, b"x", file(0o644)).unwrap();
    let (y, _) = fs.create(b, b"y", file(0o644)).unwrap();
    // A directory cannot move beneath itself.
    let err = fs
        .rename(root, b"a", b, b"a2", RenameMode::Replace)
        .unwrap_err();
    assert!(matches!(err, FsError::Invalid(_)), "{err:?}");
    // NOREPLACE refuses an existing target.
    fs.create(root, b"z", file(0o644)).unwrap();
    let err = fs
        .rename(root, b"x", root, b"z", RenameMode::NoReplace)
        .unwrap_err();
    assert!(matches!(err, FsError::Exists), "{err:?}");
    // EXCHANGE swaps a file and a directory across directories; link counts follow.
    fs.rename(root, b"x", a, b"b", RenameMode::Exchange)
        .unwrap();
    assert_eq!(fs.lookup(root, b"x").unwrap().0, b);
    assert_eq!(fs.lookup(a, b"b").unwrap().0, x);
    assert_eq!(fs.lookup(b, b"..").unwrap().0, root);
    assert_eq!(fs.getattr(a).unwrap().links, 2);
    assert_eq!(fs.getattr(root).unwrap().links, 4);
    assert_eq!(fs.lookup(b, b"y").unwrap().0, y);
    // Replacing a file frees the old one.
    fs.rename(root, b"z", a, b"b", RenameMode::Replace).unwrap();
    assert!(matches!(fs.getattr(x), Err(FsError::NotFound)));
    // A directory over a non-empty one is refused.
    fs.mkdir(root, b"c", dir_inode()).unwrap();
    let err = fs
        .rename(root, b"c", root, b"x", RenameMode::Replace)
        .unwrap_err();
    assert!(matches!(err, FsError::NotEmpty), "{err:?}");
}

/// Names long enough that a leaf holds a few dozen: the table outgrows the header early.
fn long_name(i: u64) -> String {
    format!("{}-{i:06}", "n".repeat(90))
}

#[test]
fn a_large_directory_splits_and_lists_every_name_once() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = fs.root();
    let count = 20_000;
    for i in 0..count {
        fs.create(root, long_name(i).as_bytes(), file(0o644))
            .unwrap();
    }
    assert_eq!(fs.getattr(root).unwrap().size, count);
    // The hash table outgrew the header block (depth > 8): its first slots are in the
    // first table block, after the leaves.
    let table_start = cairn_object::map::TABLE_START_BLKID;
    assert!(fs.objset().read_block(root, table_start).unwrap().is_some());
    // Listing in small batches resumes from cookies and sees every name once, while names
    // are removed behind the cursor.
    let mut seen = Vec::new();
    let mut cookie = 2;
    loop {
        let mut batch = Vec::new();
        fs.readdir(root, cookie, |entry| {
            batch.push(entry.clone());
            batch.len() < 100
        })
        .unwrap();
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        for entry in &batch {
            seen.push(String::from_utf8_lossy(&entry.name).into_owned());
        }
        if seen.len() % 1000 == 0 {
            fs.unlink(root, batch[0].name.as_slice()).unwrap();
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "a name listed twice");
    assert_eq!(seen.len() as u64, count);
    pool.sync().unwrap();
    for i in (0..count).step_by(997) {
        let name = long_name(i);
        match fs.lookup(root, name.as_bytes()) {
            Ok((_, attrs)) => assert_eq!(attrs.kind, FileKind::File),
            Err(FsError::NotFound) => {}
            Err(err) => panic!("{name}: {err}"),
        }
    }
}

/// A small directory is one block (its lone leaf inside the header block); its first split
/// moves that leaf to block 1, its sibling to block 2, and no name is lost or listed twice on
/// the way, through removals and syncs, or after export and import.
#[test]
fn a_small_directory_is_one_block_until_its_first_split() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let (small, _) = fs.mkdir(fs.root(), b"small", dir_inode()).unwrap();
    let block = |blkid: u64| fs.objset().read_block(small, blkid).unwrap();
    let mut made = Vec::new();
    let mut split_at = None;
    for i in 0..200u64 {
        let name = long_name(i);
        fs.create(small, name.as_bytes(), file(0o644)).unwrap();
        made.push(name);
        if i % 7 == 0 {
            pool.sync().unwrap();
        }
        match block(1) {
            None => assert!(split_at.is_none(), "leaf block 1 went away"),
            Some(leaf) => {
                assert_eq!(&leaf[..4], b"LEAF");
                split_at.get_or_insert(i);
            }
        }
    }
    let split_at = split_at.expect("200 long names never split the first leaf");
    assert!(
        split_at >= 20,
        "split after {split_at} names: the lone leaf holds too little"
    );
    assert_eq!(&block(2).unwrap()[..4], b"LEAF");
    for name in made.iter().step_by(3) {
        fs.unlink(small, name.as_bytes()).unwrap();
    }
    let kept: Vec<String> = made
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 3 != 0)
        .map(|(_, name)| name.clone())
        .collect();
    let listed = |fs: &cairn_fs::Filesystem, small: u64| {
        let mut listed = names(fs, small);
        listed.retain(|name| name != "." && name != "..");
        listed
    };
    assert_eq!(listed(&fs, small), kept);
    drop(fs);
    pool.export().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    let (small, _) = fs.lookup(fs.root(), b"small").unwrap();
    assert_eq!(listed(&fs, small), kept);
    for name in &kept {
        fs.lookup(small, name.as_bytes()).unwrap();
    }
}

/// Maps written in earlier layouts are still read and grown in their own: version 1 (table
/// from block 1, leaves from block 2^24) and version 2 (leaves from block 1, table from 2^24,
/// the first leaf in a block of its own), as docs/format.md keeps them. An object holding the
/// header and empty first leaf such a version wrote takes 20,000 names, enough for table
/// blocks, and gives every one back by lookup and in one listing.
#[test]
fn maps_of_earlier_versions_are_read_and_grown_in_their_own_layout() {
    let v1_leaf_start = 1u64 << 24;
    let table_start = cairn_object::map::TABLE_START_BLKID;
    grow_a_hand_written_map(1, v1_leaf_start, |block| {
        // New leaves after 2^24, the table in block 1.
        assert_eq!(&block(v1_leaf_start + 1)[..4], b"LEAF");
        assert_ne!(&block(1)[..4], b"LEAF");
    });
    grow_a_hand_written_map(2, 1, |block| {
        // Leaves from block 1 (the first one still there), the table at 2^24.
        assert_eq!(&block(1)[..4], b"LEAF");
        assert_eq!(&block(2)[..4], b"LEAF");
        assert_ne!(&block(table_start)[..4], b"LEAF");
    });
}

/// Writes an empty map of `version` by hand (its header, and its empty first leaf at block
/// `first_leaf_blkid`), fills it through `HashedMap`, and checks every name and the layout
/// (`check_layout` gets a reader of the map's blocks).
fn grow_a_hand_written_map(
    version: u32,
    first_leaf_blkid: u64,
    check_layout: impl Fn(&dyn Fn(u64) -> bytes::Bytes),
) {
    use cairn_object::map::{HashedMap, MAP_BLOCK_BYTES, MapTx};
    let (_dir, pool, objset, engine) = raw_objset();
    let object = 1_000_000;
    {
        let hold = engine.hold();
        let txg = hold.txg();
        objset.create_object(
            txg,
            object,
            cairn_format::ObjectType::Directory,
            MAP_BLOCK_BYTES,
            1,
        );
        // Header: magic, version, depth 0, no entries, one leaf, salt 7, slot 0 → leaf 0.
        let mut header = vec![0u8; MAP_BLOCK_BYTES as usize];
        header[0..8].copy_from_slice(b"CAIRNMAP");
        header[8..12].copy_from_slice(&version.to_le_bytes());
        header[24..32].copy_from_slice(&1u64.to_le_bytes());
        header[32..40].copy_from_slice(&7u64.to_le_bytes());
        objset.write_block(txg, object, 0, bytes::Bytes::from(header));
        let mut leaf = vec![0u8; MAP_BLOCK_BYTES as usize];
        leaf[0..4].copy_from_slice(b"LEAF");
        objset.write_block(txg, object, first_leaf_blkid, bytes::Bytes::from(leaf));
    }
    pool.sync().unwrap();
    let map = HashedMap::new(&objset, object);
    assert!(map.is_empty().unwrap());
    let count = 20_000u64;
    for batch in (0..count).collect::<Vec<_>>().chunks(1000) {
        let hold = engine.hold();
        let count_dirty = |bytes| hold.add_dirty(bytes);
        for &i in batch {
            map.insert(
                MapTx::counted(hold.txg(), &count_dirty),
                long_name(i).as_bytes(),
                &i.to_le_bytes(),
            )
            .unwrap();
        }
    }
    pool.sync().unwrap();
    assert_eq!(map.len().unwrap(), count, "version {version}");
    check_layout(&|blkid| objset.read_block(object, blkid).unwrap().unwrap());
    for i in (0..count).step_by(101) {
        let entry = map.get(long_name(i).as_bytes()).unwrap().unwrap();
        assert_eq!(entry.value, i.to_le_bytes());
    }
    let mut listed = Vec::new();
    map.for_each_from(0, |entry| {
        listed.push(u64::from_le_bytes(entry.value[..8].try_into().unwrap()));
        true
    })
    .unwrap();
    listed.sort_unstable();
    assert_eq!(listed, (0..count).collect::<Vec<_>>(), "version {version}");
}

/// One step of the random workload.
#[derive(Debug, Clone)]
enum Step {
    Create(u8),
    Write(u8, u32, u16),
    Truncate(u8, u32),
    Unlink(u8),
    Rename(u8, u8),
    Sync,
}

fn steps(seed: u64, count: usize) -> Vec<Step> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|_| {
            let name = rng.below(12) as u8;
            match rng.below(12) {
                0..=2 => Step::Create(name),
                3..=6 => Step::Write(name, rng.below(400_000) as u32, rng.below(20_000) as u16),
                7 => Step::Truncate(name, rng.below(400_000) as u32),
                8 => Step::Unlink(name),
                9 | 10 => Step::Rename(name, rng.below(12) as u8),
                _ => Step::Sync,
            }
        })
        .collect()
}

#[test]
fn random_operations_match_a_model() {
    for seed in 1..=4u64 {
        let dir = tempfile::tempdir().unwrap();
        let paths = device_paths(dir.path(), 2);
        let pool = create_mirror(&paths, plain_opener());
        let fs = new_filesystem(&pool, "tank/fs", &[("recordsize", "16K")]);
        let root = fs.root();
        let mut model: BTreeMap<u8, Vec<u8>> = BTreeMap::new();
        let name = |n: u8| format!("f{n}").into_bytes();
        for (index, step) in steps(seed, 400).into_iter().enumerate() {
            match step {
                Step::Create(n) => {
                    let result = fs.create(root, &name(n), file(0o644));
                    match model.entry(n) {
                        std::collections::btree_map::Entry::Occupied(_) => {
                            assert!(matches!(result, Err(FsError::Exists)));
                        }
                        std::collections::btree_map::Entry::Vacant(slot) => {
                            result.unwrap();
                            slot.insert(Vec::new());
                        }
                    }
                }
                Step::Write(n, offset, len) => {
                    let Some(contents) = model.get_mut(&n) else {
                        continue;
                    };
                    let (object, _) = fs.lookup(root, &name(n)).unwrap();
                    let data = pattern(len as usize, seed * 1000 + index as u64);
                    fs.write(object, u64::from(offset), &data).unwrap();
                    let end = offset as usize + data.len();
                    if !data.is_empty() && contents.len() < end {
                        contents.resize(end, 0);
                    }
                    contents[offset as usize..offset as usize + data.len()].copy_from_slice(&data);
                }
                Step::Truncate(n, size) => {
                    let Some(contents) = model.get_mut(&n) else {
                        continue;
                    };
                    let (object, _) = fs.lookup(root, &name(n)).unwrap();
                    fs.setattr(
                        object,
                        SetAttrs {
                            size: Some(u64::from(size)),
                            ..SetAttrs::default()
                        },
                    )
                    .unwrap();
                    contents.resize(size as usize, 0);
                }
                Step::Unlink(n) => {
                    let result = fs.unlink(root, &name(n));
                    if model.remove(&n).is_some() {
                        result.unwrap();
                    } else {
                        assert!(matches!(result, Err(FsError::NotFound)));
                    }
                }
                Step::Rename(from, to) => {
                    let result = fs.rename(root, &name(from), root, &name(to), RenameMode::Replace);
                    match model.remove(&from) {
                        Some(contents) => {
                            result.unwrap();
                            model.insert(to, contents);
                        }
                        None => assert!(matches!(result, Err(FsError::NotFound))),
                    }
                }
                Step::Sync => {
                    pool.sync().unwrap();
                }
            }
        }
        let check = |fs: &cairn_fs::Filesystem| {
            let listed: Vec<String> = names(fs, root).into_iter().skip(2).collect();
            let expected: Vec<String> = {
                let mut v: Vec<String> = model
                    .keys()
                    .map(|n| String::from_utf8(name(*n)).unwrap())
                    .collect();
                v.sort();
                v
            };
            assert_eq!(listed, expected, "seed {seed}");
            for (n, contents) in &model {
                let (object, attrs) = fs.lookup(root, &name(*n)).unwrap();
                assert_eq!(attrs.size, contents.len() as u64, "seed {seed} f{n}");
                assert_eq!(
                    &fs.read(object, 0, contents.len() + 1).unwrap(),
                    contents,
                    "seed {seed} f{n}"
                );
            }
        };
        check(&fs);
        drop(fs);
        pool.export().unwrap();
        drop(pool);
        let pool: Pool = import(&paths, plain_opener()).unwrap();
        let fs = pool.filesystem("tank/fs").unwrap();
        check(&fs);
    }
}

#[test]
fn a_full_pool_refuses_writes_cleanly_and_deletes_make_room() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = fs.root();
    let chunk = pattern(1 << 20, 9);
    let mut written = 0u64;
    let mut files = 0;
    let refusal = loop {
        let name = format!("f{files}");
        let (object, _) = match fs.create(root, name.as_bytes(), file(0o644)) {
            Ok(made) => made,
            Err(err) => break err,
        };
        files += 1;
        let mut offset = 0;
        let result = loop {
            match fs.write(object, offset, &chunk) {
                Ok(_) => offset += chunk.len() as u64,
                Err(err) => break Err(err),
            }
            if offset >= 8 << 20 {
                break Ok(());
            }
        };
        written += offset;
        if let Err(err) = result {
            break err;
        }
        assert!(written < 1 << 30, "the 64 MiB pool never filled");
    };
    assert!(matches!(refusal, FsError::NoSpace(_)), "{refusal:?}");
    assert_eq!(refusal.errno(), libc::ENOSPC);
    assert!(written > 16 << 20, "refused too early: {written} bytes");
    // The pool stays writable: syncs go through, and a delete makes room for more.
    assert!(
        pool.status().suspended.is_none(),
        "{:?}",
        pool.status().suspended
    );
    pool.sync().unwrap();
    for index in 0..files {
        fs.unlink(root, format!("f{index}").as_bytes()).unwrap();
    }
    pool.sync().unwrap();
    let (object, _) = fs.create(root, b"after", file(0o644)).unwrap();
    fs.write(object, 0, &chunk).unwrap();
    pool.sync().unwrap();
    assert_eq!(fs.read(object, 0, chunk.len()).unwrap(), chunk);
}

#[test]
fn pool_check_walks_the_namespace_and_finds_damage() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let victim;
    {
        let pool = create_mirror(&paths, plain_opener());
        let fs = new_filesystem(&pool, "tank/fs", &[]);
        let root = fs.root();
        let (sub, _) = fs.mkdir(root, b"sub", dir_inode()).unwrap();
        let (f, _) = fs.create(sub, b"f", file(0o644)).unwrap();
        fs.write(f, 0, b"data").unwrap();
        fs.link(f, root, b"second").unwrap();
        fs.symlink(sub, b"l", b"f", file(0)).unwrap();
        // An open file unlinked: in the delete queue, not an orphan.
        let (open, _) = fs.create(root, b"open", file(0o644)).unwrap();
        fs.open_inode(open).unwrap();
        fs.unlink(root, b"open").unwrap();
        victim = f;
        pool.export().unwrap();
    }
    let report = check_read_only(&paths);
    assert_eq!(report.filesystems_checked, 1);
    assert!(report.is_clean(), "{:?}", report.problems());
    // Damage: a file whose link count no longer matches its names.
    {
        let pool = import(&paths, plain_opener()).unwrap();
        let fs = pool.filesystem("tank/fs").unwrap();
        let mut attrs = fs.getattr(victim).unwrap();
        attrs.links = 5;
        let engine = pool.txg_engine().unwrap();
        let hold = engine.hold();
        fs.objset()
            .set_bonus(hold.txg(), victim, attrs.encode())
            .unwrap();
        drop(hold);
        pool.export().unwrap();
    }
    let report = check_read_only(&paths);
    let problems = report.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&format!("inode {victim} has 5 links and 2 names"))),
        "{problems:?}"
    );
}

#[test]
fn fsynced_changes_survive_a_power_cut_through_the_intent_log() {
    use cairn_emulate::PowerSwitch;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let power = Arc::new(PowerSwitch::with_seed(5));
    let data = pattern(200_000, 11);
    let (kept, renamed_dir);
    {
        let pool = create_mirror(&paths, emulated_opener(5, Some(power.clone())));
        let fs = new_filesystem(&pool, "tank/fs", &[("recordsize", "16K")]);
        let root = fs.root();
        // Nothing below is in a synced txg (the test pool syncs only when asked): what
        // survives comes from the log.
        let (d, _) = fs.mkdir(root, b"d", dir_inode()).unwrap();
        let (a, _) = fs.create(d, b"a", file(0o600)).unwrap();
        fs.write(a, 0, &data).unwrap();
        fs.write(a, 5, b"patched").unwrap();
        fs.link(a, root, b"hard").unwrap();
        fs.symlink(root, b"sym", b"d/a", file(0)).unwrap();
        let (gone, _) = fs.create(root, b"gone", file(0o644)).unwrap();
        fs.write(gone, 0, b"soon gone").unwrap();
        fs.unlink(root, b"gone").unwrap();
        fs.setattr(
            a,
            SetAttrs {
                mode: Some(0o640),
                size: Some(150_000),
                ..SetAttrs::default()
            },
        )
        .unwrap();
        fs.setxattr(a, b"user.k", b"v", cairn_fs::XattrMode::Any)
            .unwrap();
        fs.mkdir(root, b"e", dir_inode()).unwrap();
        fs.rename(root, b"d", root, b"e", RenameMode::Replace)
            .unwrap();
        fs.fsync(a).unwrap();
        kept = a;
        renamed_dir = d;
        // After the fsync: may or may not survive.
        fs.create(root, b"late", file(0o644)).unwrap();
        power.cut_now();
        drop(fs);
        drop(pool);
    }
    let pool = import(&paths, plain_opener()).unwrap();
    let notes = pool.notes().join("\n");
    assert!(notes.contains("tank/fs: replayed"), "{notes}");
    let fs = pool.filesystem("tank/fs").unwrap();
    let root = fs.root();
    let (e, _) = fs.lookup(root, b"e").unwrap();
    assert_eq!(e, renamed_dir);
    assert!(matches!(fs.lookup(root, b"d"), Err(FsError::NotFound)));
    let (a, attrs) = fs.lookup(e, b"a").unwrap();
    assert_eq!(a, kept);
    assert_eq!(attrs.links, 2);
    assert_eq!(attrs.mode, 0o640);
    assert_eq!(attrs.size, 150_000);
    let mut expected = data[..150_000].to_vec();
    expected[5..12].copy_from_slice(b"patched");
    assert_eq!(fs.read(a, 0, 200_000).unwrap(), expected);
    assert_eq!(fs.lookup(root, b"hard").unwrap().0, a);
    assert_eq!(fs.getxattr(a, b"user.k").unwrap(), b"v");
    let (sym, _) = fs.lookup(root, b"sym").unwrap();
    assert_eq!(fs.readlink(sym).unwrap(), b"d/a");
    assert!(matches!(fs.lookup(root, b"gone"), Err(FsError::NotFound)));
    drop(fs);
    pool.export().unwrap();
    let report = check_read_only(&paths);
    assert!(report.is_clean(), "{:?}", report.problems());
}

#[test]
fn writes_and_truncations_match_a_model_while_txgs_sync_underneath() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = Arc::new(create_mirror(&paths, plain_opener()));
    let fs = new_filesystem(&pool, "tank/fs", &[("recordsize", "16K")]);
    let (object, _) = fs.create(fs.root(), b"f", file(0o644)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let syncer = {
        let (pool, stop) = (pool.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                pool.sync().unwrap();
            }
        })
    };
    let mut model: Vec<u8> = Vec::new();
    let mut rng = Rng(77);
    for step in 0..20_000u64 {
        match rng.below(4) {
            0 | 1 => {
                let offset = rng.below(256 << 10) as usize;
                let len = 1 + rng.below(64 << 10) as usize;
                let data = pattern(len, step);
                fs.write(object, offset as u64, &data).unwrap();
                if model.len() < offset + len {
                    model.resize(offset + len, 0);
                }
                model[offset..offset + len].copy_from_slice(&data);
            }
            2 => {
                let size = rng.below(256 << 10) as usize;
                fs.setattr(
                    object,
                    SetAttrs {
                        size: Some(size as u64),
                        ..SetAttrs::default()
                    },
                )
                .unwrap();
                model.resize(size, 0);
            }
            _ => {
                let got = fs.read(object, 0, 512 << 10).unwrap();
                assert!(got == model, "step {step}: contents differ from the model");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    syncer.join().unwrap();
}

/// A pool with one filesystem whose object set a test drives directly, and its txg engine
/// (the temporary directory must outlive the pool).
fn raw_objset() -> (
    tempfile::TempDir,
    Pool,
    std::sync::Arc<cairn_object::ObjectSet>,
    std::sync::Arc<cairn_pool::txg::TxgEngine>,
) {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let objset = new_filesystem(&pool, "tank/fs", &[]).objset().clone();
    let engine = pool.txg_engine().unwrap().clone();
    (dir, pool, objset, engine)
}

/// A dnode changed in a later txg than the one that created it (a bonus change while the
/// creating txg has not synced yet) hides none of the blocks written in the creating txg.
/// (Both `cairn create` of 20,000 files through FUSE and fsx found such blocks read as holes.)
#[test]
fn a_later_bonus_change_does_not_hide_blocks_of_an_unsynced_creating_txg() {
    let (_dir, pool, objset, engine) = raw_objset();
    let object = 1_000_000;
    {
        let hold = engine.hold();
        let txg = hold.txg();
        objset
            .create_object_with_bonus(
                txg,
                object,
                cairn_format::ObjectType::FileData,
                4096,
                vec![1; 100],
            )
            .unwrap();
        objset.write_block(txg, object, 0, bytes::Bytes::from(vec![7u8; 4096]));
        // The next txg changes only the bonus, before `txg` syncs.
        objset.set_bonus(txg + 1, object, vec![2; 100]).unwrap();
        let block = objset.read_block(object, 0).unwrap();
        assert_eq!(
            block.as_deref(),
            Some(&[7u8; 4096][..]),
            "block 0 read as a hole"
        );
        assert_eq!(objset.block_map(object, 0, 2).unwrap(), [true, false]);
    }
    pool.sync().unwrap();
    pool.sync().unwrap();
    assert_eq!(
        objset.read_block(object, 0).unwrap().as_deref(),
        Some(&[7u8; 4096][..])
    );
    assert_eq!(objset.dnode(object).unwrap().bonus, vec![2; 100]);
}

/// The object set's memo (published dnodes and directory blocks, `cairn-object/src/memo.rs`)
/// must follow every change a txg publishes: entries added, removed and renamed between two
/// large directories, syncs at random points, a directory removed and another made (which may
/// reuse its object number), then lookups of every name checked against a model, before and
/// after export and import.
#[test]
fn directory_memo_follows_every_change_across_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = fs.root();
    let (a, _) = fs.mkdir(root, b"a", dir_inode()).unwrap();
    let (b, _) = fs.mkdir(root, b"b", dir_inode()).unwrap();
    let dirs = [a, b];
    // (directory index, name) → object
    let mut model: BTreeMap<(usize, String), u64> = BTreeMap::new();
    let mut gone: Vec<(usize, String)> = Vec::new();
    let mut rng = Rng(77);
    let check = |model: &BTreeMap<(usize, String), u64>, gone: &[(usize, String)]| {
        for ((d, name), object) in model {
            let (found, attrs) = fs.lookup(dirs[*d], name.as_bytes()).unwrap();
            assert_eq!((found, attrs.kind), (*object, FileKind::File), "{d}/{name}");
        }
        for (d, name) in gone.iter().rev().take(300) {
            if !model.contains_key(&(*d, name.clone())) {
                let err = fs.lookup(dirs[*d], name.as_bytes()).unwrap_err();
                assert!(matches!(err, FsError::NotFound), "{d}/{name}: {err:?}");
            }
        }
    };
    for i in 0..4000u64 {
        let d = (i % 2) as usize;
        let name = long_name(i);
        let (object, _) = fs.create(dirs[d], name.as_bytes(), file(0o644)).unwrap();
        model.insert((d, name), object);
    }
    pool.sync().unwrap();
    check(&model, &gone);
    for round in 0..12u64 {
        for _ in 0..400 {
            let keys: Vec<(usize, String)> = model.keys().cloned().collect();
            let pick = keys[rng.below(keys.len() as u64) as usize].clone();
            match rng.below(3) {
                0 => {
                    fs.unlink(dirs[pick.0], pick.1.as_bytes()).unwrap();
                    model.remove(&pick);
                    gone.push(pick);
                }
                1 => {
                    let to = (rng.below(2) as usize, format!("r{round}-{}", rng.next()));
                    fs.rename(
                        dirs[pick.0],
                        pick.1.as_bytes(),
                        dirs[to.0],
                        to.1.as_bytes(),
                        RenameMode::NoReplace,
                    )
                    .unwrap();
                    let object = model.remove(&pick).unwrap();
                    model.insert(to, object);
                    gone.push(pick);
                }
                _ => {
                    let to = (rng.below(2) as usize, format!("c{round}-{}", rng.next()));
                    let (object, _) = fs.create(dirs[to.0], to.1.as_bytes(), file(0o600)).unwrap();
                    model.insert(to, object);
                }
            }
            if rng.below(150) == 0 {
                pool.sync().unwrap();
            }
        }
        // Half the rounds are checked with their last changes still dirty over the memo.
        if round % 2 == 0 {
            pool.sync().unwrap();
        }
        check(&model, &gone);
    }
    let memo = fs.objset().memo_stats();
    assert!(
        memo.blocks.hits > 0 && memo.dnodes.hits > 0,
        "the memo was never used: {memo:?}"
    );
    // A directory removed and another made in its place: nothing of the old one shows.
    let (c, _) = fs.mkdir(root, b"c", dir_inode()).unwrap();
    for i in 0..500u64 {
        fs.create(c, long_name(i).as_bytes(), file(0o644)).unwrap();
    }
    pool.sync().unwrap();
    assert!(fs.lookup(c, long_name(7).as_bytes()).is_ok());
    for i in 0..500u64 {
        fs.unlink(c, long_name(i).as_bytes()).unwrap();
    }
    fs.rmdir(root, b"c").unwrap();
    pool.sync().unwrap();
    let (d, _) = fs.mkdir(root, b"d", dir_inode()).unwrap();
    fs.create(d, b"only", file(0o644)).unwrap();
    pool.sync().unwrap();
    assert_eq!(names(&fs, d), [".", "..", "only"]);
    for i in 0..500u64 {
        let err = fs.lookup(d, long_name(i).as_bytes()).unwrap_err();
        assert!(matches!(err, FsError::NotFound), "{i}: {err:?}");
    }
    check(&model, &gone);
    drop(fs);
    pool.export().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    for ((d, name), object) in &model {
        let (found, _) = fs.lookup(dirs[*d], name.as_bytes()).unwrap();
        assert_eq!(found, *object, "{d}/{name} after import");
    }
    assert_eq!(
        names(&fs, a).len() + names(&fs, b).len() - 4,
        model.len(),
        "entries after import"
    );
    pool.export().unwrap();
}

/// A memoised block belongs to one life of its object: once the object is freed and created
/// again under the same number, a block the new object never wrote reads as a hole, not as
/// the old object's memoised block; and a block rewritten by a later txg reads new.
#[test]
fn a_memoised_block_dies_with_its_object() {
    let (_dir, _pool, objset, engine) = raw_objset();
    let object = 2_000_000;
    // These writes bypass the filesystem, so the txg engine does not count them dirty: each
    // sync is forced.
    let sync = || {
        engine.sync_now_forced().unwrap();
    };
    let create = |fill: u8| {
        let hold = engine.hold();
        let txg = hold.txg();
        objset.create_object(txg, object, cairn_format::ObjectType::Directory, 4096, 64);
        objset.write_block(txg, object, 0, bytes::Bytes::from(vec![fill; 4096]));
        if fill == 1 {
            objset.write_block(txg, object, 5, bytes::Bytes::from(vec![fill; 4096]));
        }
    };
    create(1);
    sync();
    let before = objset.memo_stats().blocks;
    assert_eq!(
        objset.read_block(object, 5).unwrap().as_deref(),
        Some(&[1u8; 4096][..])
    );
    assert_eq!(
        objset.read_block(object, 5).unwrap().as_deref(),
        Some(&[1u8; 4096][..])
    );
    assert!(
        objset.memo_stats().blocks.hits > before.hits,
        "block 5 was not served from the memo: {:?}",
        objset.memo_stats()
    );
    {
        let hold = engine.hold();
        objset.write_block(hold.txg(), object, 5, bytes::Bytes::from(vec![3u8; 4096]));
    }
    sync();
    assert_eq!(
        objset.read_block(object, 5).unwrap().as_deref(),
        Some(&[3u8; 4096][..])
    );
    {
        let hold = engine.hold();
        objset.free_object(hold.txg(), object);
    }
    sync();
    create(2);
    sync();
    assert_eq!(
        objset.read_block(object, 0).unwrap().as_deref(),
        Some(&[2u8; 4096][..])
    );
    let stale = objset.read_block(object, 5).unwrap();
    assert!(
        stale.is_none(),
        "the freed object's block showed through the memo: {:?}",
        stale.map(|block| block[0])
    );
}
