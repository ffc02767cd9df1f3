//! `Pool::send`: a full stream, then incrementals, applied in order to a model of an object
//! set (objects with their shape, bonus and blocks), rebuild every sent snapshot's object set
//! exactly: every object, its dnode's type, block size, indirect shift and bonus, and every
//! block's bytes or hole. Run for a volume (random writes, trims, zeroing) and a filesystem
//! (files with data and holes, hard links, symlinks, xattrs large and small, a directory tree,
//! a deleted file, a truncated file). An incremental writes only the blocks that changed, and
//! what cannot be sent is refused by name. The same from bookmarks whose snapshots were
//! destroyed (the walk of the newer tree alone), files and whole dnode blocks freed among the
//! changes.

mod common;

use cairn_engine::{EngineError, Pool};
use cairn_format::send_stream::{StreamReader, StreamRecord};
use cairn_fs::{SetAttrs, XattrMode};
use common::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq)]
struct ModelObject {
    object_type: u8,
    block_size_bytes: u32,
    indirect_shift: u8,
    bonus: Vec<u8>,
    blocks: BTreeMap<u64, Vec<u8>>,
}

/// The object set a receiver would hold after applying the streams so far.
#[derive(Default)]
struct Model {
    objects: BTreeMap<u64, ModelObject>,
    /// Guid of the last snapshot applied.
    guid: u64,
}

impl Model {
    /// Applies a whole stream; an incremental must start from the snapshot applied last.
    fn apply(&mut self, stream: &[u8]) -> (usize, usize) {
        let mut input = stream;
        let mut reader = StreamReader::new(&mut input).unwrap();
        let header = reader.header().clone();
        assert_eq!(header.from_guid, self.guid, "applied out of order");
        let (mut writes, mut records) = (0, 0);
        while let Some(record) = reader.next_record().unwrap() {
            records += 1;
            match record {
                StreamRecord::Object {
                    object,
                    object_type,
                    block_size_bytes,
                    indirect_shift,
                    bonus,
                } => {
                    let entry = self.objects.entry(object).or_insert(ModelObject {
                        object_type: object_type as u8,
                        block_size_bytes,
                        indirect_shift,
                        bonus: Vec::new(),
                        blocks: BTreeMap::new(),
                    });
                    if entry.object_type != object_type as u8
                        || entry.block_size_bytes != block_size_bytes
                    {
                        entry.blocks.clear();
                    }
                    entry.object_type = object_type as u8;
                    entry.block_size_bytes = block_size_bytes;
                    entry.indirect_shift = indirect_shift;
                    entry.bonus = bonus;
                }
                StreamRecord::FreeObjects { first, count } => {
                    self.objects.retain(|&o, _| o < first || o >= first + count);
                }
                StreamRecord::Write {
                    object,
                    offset_bytes,
                    data,
                } => {
                    writes += 1;
                    let entry = self.objects.get_mut(&object).expect("WRITE before OBJECT");
                    let block = u64::from(entry.block_size_bytes);
                    assert_eq!(offset_bytes % block, 0);
                    entry.blocks.insert(offset_bytes / block, data);
                }
                StreamRecord::Free {
                    object,
                    offset_bytes,
                    length_bytes,
                } => {
                    let entry = self.objects.get_mut(&object).expect("FREE before OBJECT");
                    let block = u64::from(entry.block_size_bytes);
                    let first = offset_bytes / block;
                    let end = offset_bytes.saturating_add(length_bytes).div_ceil(block);
                    entry.blocks.retain(|&b, _| b < first || b >= end);
                }
                StreamRecord::End { to_guid, .. } => self.guid = to_guid,
            }
        }
        (writes, records)
    }

    /// Compares the model with snapshot `name`'s object set, object by object, block by block.
    fn assert_equals(&self, pool: &Pool, name: &str) {
        let objset = pool.snapshot_objset(name).unwrap();
        let mut seen = 0;
        for object in 1..objset.object_id_bound() {
            let dnode = objset.dnode(object).unwrap();
            if dnode.is_free() {
                assert!(
                    !self.objects.contains_key(&object),
                    "{name}: object {object} is gone"
                );
                continue;
            }
            seen += 1;
            let model = self
                .objects
                .get(&object)
                .unwrap_or_else(|| panic!("{name}: object {object} missing"));
            assert_eq!(
                model.object_type, dnode.object_type as u8,
                "{name} {object}"
            );
            assert_eq!(
                model.block_size_bytes, dnode.data_block_size,
                "{name} {object}"
            );
            assert_eq!(
                model.indirect_shift, dnode.indirect_shift,
                "{name} {object}"
            );
            assert_eq!(model.bonus, dnode.bonus, "{name} {object} bonus");
            for blkid in 0..=dnode.max_block_id {
                let data = objset.read_block(object, blkid).unwrap();
                assert_eq!(
                    model.blocks.get(&blkid).map(Vec::as_slice),
                    data.as_deref(),
                    "{name}: object {object} block {blkid}"
                );
            }
            assert!(
                model.blocks.keys().all(|&b| b <= dnode.max_block_id),
                "{name}: object {object} has blocks past its end"
            );
        }
        assert_eq!(seen, self.objects.len(), "{name}: object count");
    }
}

fn send(pool: &Pool, snapshot: &str, from: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut last = 0;
    let summary = pool
        .send(snapshot, from, &mut out, &mut |bytes| {
            assert!(bytes >= last);
            last = bytes;
        })
        .unwrap();
    assert_eq!(summary.bytes_written, out.len() as u64);
    out
}

#[test]
fn volume_streams_rebuild_every_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let block = 4096u64;
    let size = 1024 * block;
    pool.create_volume_as(
        "tank/vol",
        size,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), block.to_string())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut rng = Rng(7);
    for _ in 0..40 {
        let offset = rng.below(size);
        let len = (1 + rng.below(4 * block)).min(size - offset);
        volume
            .write(offset, &pattern(len as usize, rng.next()))
            .unwrap();
    }
    pool.snapshot(&["tank/vol@s0".into()], false).unwrap();
    let mut model = Model::default();
    let (full_writes, _) = model.apply(&send(&pool, "tank/vol@s0", None));
    assert!(full_writes > 40);
    model.assert_equals(&pool, "tank/vol@s0");
    for round in 1..=3u64 {
        // A few blocks changed: written, trimmed, zeroed.
        for i in 0..3 {
            let offset = rng.below(size - block) / block * block;
            match (round + i) % 3 {
                0 => volume.trim(offset, block).unwrap(),
                1 => volume.write_zeroes(offset, block).unwrap(),
                _ => volume
                    .write(offset, &pattern(block as usize, rng.next()))
                    .unwrap(),
            }
        }
        let (older, newer) = (
            format!("tank/vol@s{}", round - 1),
            format!("tank/vol@s{round}"),
        );
        pool.snapshot(std::slice::from_ref(&newer), false).unwrap();
        let (writes, records) = model.apply(&send(&pool, &newer, Some(&older)));
        // Three blocks changed: no more than three written, a handful of records in all.
        assert!(writes <= 3, "round {round}: {writes} blocks written");
        assert!(records <= 3 + 3 + 2, "round {round}: {records} records");
        model.assert_equals(&pool, &newer);
    }
    // `@short` names the source in the same dataset.
    let short = send(&pool, "tank/vol@s3", Some("@s2"));
    let mut reader_input = short.as_slice();
    let reader = StreamReader::new(&mut reader_input).unwrap();
    assert!(reader.header().is_incremental());
}

#[test]
fn filesystem_streams_rebuild_every_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let fs = new_filesystem(&pool, "tank/fs", &[("recordsize", "16K")]);
    let root = fs.root();
    let dir_inode = cairn_fs::NewInode {
        kind: cairn_fs::attrs::FileKind::Directory,
        ..file(0o755)
    };
    let (sub, _) = fs.mkdir(root, b"sub", dir_inode).unwrap();
    let (deep, _) = fs.mkdir(sub, b"deep", dir_inode).unwrap();
    let (data, _) = fs.create(deep, b"data", file(0o640)).unwrap();
    fs.write(data, 0, &pattern(100_000, 1)).unwrap();
    // A sparse file: data at 0 and far out, holes between.
    let (sparse, _) = fs.create(root, b"sparse", file(0o600)).unwrap();
    fs.write(sparse, 0, b"start").unwrap();
    fs.write(sparse, 10 << 20, &pattern(20_000, 2)).unwrap();
    fs.link(data, root, b"hardlink").unwrap();
    let symlink_inode = cairn_fs::NewInode {
        kind: cairn_fs::attrs::FileKind::Symlink,
        ..file(0o777)
    };
    fs.symlink(root, b"link", b"sub/deep/data", symlink_inode)
        .unwrap();
    fs.setxattr(data, b"user.small", b"value", XattrMode::Create)
        .unwrap();
    fs.setxattr(data, b"user.large", &pattern(30_000, 3), XattrMode::Create)
        .unwrap();
    let (doomed, _) = fs.create(root, b"doomed", file(0o644)).unwrap();
    fs.write(doomed, 0, &pattern(50_000, 4)).unwrap();
    let (trunc, _) = fs.create(root, b"trunc", file(0o644)).unwrap();
    fs.write(trunc, 0, &pattern(200_000, 5)).unwrap();
    pool.snapshot(&["tank/fs@s0".into()], false).unwrap();
    let mut model = Model::default();
    model.apply(&send(&pool, "tank/fs@s0", None));
    model.assert_equals(&pool, "tank/fs@s0");

    // s1: a file deleted, one truncated, a hole punched by rewriting a sparse region.
    fs.unlink(root, b"doomed").unwrap();
    fs.setattr(
        trunc,
        SetAttrs {
            size: Some(20_000),
            ..SetAttrs::default()
        },
    )
    .unwrap();
    fs.write(sparse, 5 << 20, b"middle").unwrap();
    pool.snapshot(&["tank/fs@s1".into()], false).unwrap();
    model.apply(&send(&pool, "tank/fs@s1", Some("tank/fs@s0")));
    model.assert_equals(&pool, "tank/fs@s1");

    // s2: xattrs changed, a link removed, a new file in the tree, a rename.
    fs.removexattr(data, b"user.large").unwrap();
    fs.setxattr(data, b"user.small", b"other", XattrMode::Replace)
        .unwrap();
    fs.unlink(root, b"hardlink").unwrap();
    let (fresh, _) = fs.create(sub, b"fresh", file(0o600)).unwrap();
    fs.write(fresh, 0, &pattern(70_000, 6)).unwrap();
    fs.rename(
        root,
        b"sparse",
        sub,
        b"moved",
        cairn_fs::RenameMode::Replace,
    )
    .unwrap();
    pool.snapshot(&["tank/fs@s2".into()], false).unwrap();
    model.apply(&send(&pool, "tank/fs@s2", Some("@s1")));
    model.assert_equals(&pool, "tank/fs@s2");

    // s3: one block of a large file changed: only that block is written.
    fs.write(data, 16384, &pattern(16384, 7)).unwrap();
    pool.snapshot(&["tank/fs@s3".into()], false).unwrap();
    let (writes, _) = model.apply(&send(&pool, "tank/fs@s3", Some("@s2")));
    assert!(writes <= 1, "{writes} blocks written for one changed");
    model.assert_equals(&pool, "tank/fs@s3");
}

#[test]
fn sends_that_cannot_be_made_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    pool.create_volume_as(
        "tank/vol",
        1 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[],
    )
    .unwrap();
    pool.create_volume_as(
        "tank/other",
        1 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[],
    )
    .unwrap();
    pool.snapshot(&["tank/vol@a".into(), "tank/other@a".into()], false)
        .unwrap();
    pool.volume("tank/vol")
        .unwrap()
        .write(0, &pattern(4096, 1))
        .unwrap();
    pool.snapshot(&["tank/vol@b".into()], false).unwrap();
    let mut out = Vec::new();
    let mut quiet = |_| {};
    let refuse = |result: Result<_, EngineError>| match result {
        Err(err) => err.to_string(),
        Ok(_) => panic!("sent"),
    };
    let missing = refuse(pool.send("tank/vol@b", Some("@gone"), &mut out, &mut quiet));
    assert!(missing.contains("tank/vol@gone"), "{missing}");
    let newer = refuse(pool.send("tank/vol@a", Some("@b"), &mut out, &mut quiet));
    assert!(newer.contains("not older"), "{newer}");
    let foreign = refuse(pool.send("tank/vol@b", Some("tank/other@a"), &mut out, &mut quiet));
    assert!(
        foreign.contains("not a snapshot of 'tank/vol'"),
        "{foreign}"
    );
    assert!(
        pool.send("tank/vol@nope", None, &mut out, &mut quiet)
            .is_err()
    );
    // A bookmark works as a source, with its snapshot and without (`bookmark_streams_...`);
    // a bookmark of another dataset does not.
    pool.bookmark("tank/other@a", "tank/other#a").unwrap();
    let foreign = refuse(pool.send("tank/vol@b", Some("tank/other#a"), &mut out, &mut quiet));
    assert!(
        foreign.contains("not a bookmark of 'tank/vol'"),
        "{foreign}"
    );
}

/// Snapshot `DATASET@s{round}` and its bookmark `#m{round}`; the previous snapshot destroyed,
/// then the incremental from its bookmark alone applied to `model` and compared.
fn step_from_bookmark_alone(pool: &Pool, model: &mut Model, dataset: &str, round: u64) -> usize {
    let to = format!("{dataset}@s{round}");
    pool.snapshot(std::slice::from_ref(&to), false).unwrap();
    pool.bookmark(&to, &format!("{dataset}#m{round}")).unwrap();
    pool.destroy_snapshot(&format!("{dataset}@s{}", round - 1))
        .unwrap();
    let (writes, _) = model.apply(&send(pool, &to, Some(&format!("#m{}", round - 1))));
    model.assert_equals(pool, &to);
    writes
}

#[test]
fn streams_from_bookmarks_whose_snapshots_are_destroyed_rebuild_every_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 2), plain_opener());
    let block = 4096u64;
    let size = 2048 * block;
    pool.create_volume_as(
        "tank/vol",
        size,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), block.to_string())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let fs = new_filesystem(&pool, "tank/fs", &[]);
    let root = fs.root();
    let mut rng = Rng(71);
    // Enough files to fill several dnode blocks, so that removing them frees whole ones.
    let mut files = Vec::new();
    for index in 0..150u64 {
        let name = format!("f{index}");
        let (object, _) = fs.create(root, name.as_bytes(), file(0o644)).unwrap();
        fs.write(object, rng.below(3) * 70_000, &pattern(5000, index))
            .unwrap();
        files.push(name);
    }
    for _ in 0..60 {
        let offset = rng.below(size);
        let len = (1 + rng.below(8 * block)).min(size - offset);
        volume
            .write(offset, &pattern(len as usize, rng.next()))
            .unwrap();
    }
    let mut models = (Model::default(), Model::default());
    for (dataset, model) in [("tank/vol", &mut models.0), ("tank/fs", &mut models.1)] {
        let first = format!("{dataset}@s0");
        pool.snapshot(std::slice::from_ref(&first), false).unwrap();
        pool.bookmark(&first, &format!("{dataset}#m0")).unwrap();
        model.apply(&send(&pool, &first, None));
    }
    for round in 1..=4u64 {
        // Volume: blocks written, trimmed (a whole indirect block's span once), zeroed.
        for _ in 0..4 {
            let offset = rng.below(size - block) / block * block;
            volume
                .write(offset, &pattern(block as usize, rng.next()))
                .unwrap();
            volume
                .trim(rng.below(size - block) / block * block, block)
                .unwrap();
        }
        volume
            .write_zeroes(rng.below(size / 2) / block * block, 3 * block)
            .unwrap();
        if round == 2 {
            volume.trim(0, size / 2).unwrap();
        }
        // Filesystem: files rewritten, truncated, removed (all but a few in round 3), made.
        let (object, _) = fs.lookup(root, files[round as usize].as_bytes()).unwrap();
        fs.write(object, 100_000, &pattern(9000, round)).unwrap();
        let shrink = SetAttrs {
            size: Some(1000),
            ..SetAttrs::default()
        };
        fs.setattr(fs.lookup(root, files[0].as_bytes()).unwrap().0, shrink)
            .unwrap();
        let gone: Vec<String> = if round == 3 {
            files.drain(10..).collect()
        } else {
            vec![files.remove(5 + round as usize)]
        };
        for name in gone {
            fs.unlink(root, name.as_bytes()).unwrap();
        }
        let name = format!("new{round}");
        let (object, _) = fs.create(root, name.as_bytes(), file(0o600)).unwrap();
        fs.write(object, 0, &pattern(20_000, round + 100)).unwrap();
        files.push(name);
        let writes = step_from_bookmark_alone(&pool, &mut models.0, "tank/vol", round);
        assert!(
            writes <= 4 + 3,
            "round {round}: {writes} volume blocks written"
        );
        step_from_bookmark_alone(&pool, &mut models.1, "tank/fs", round);
    }
}
