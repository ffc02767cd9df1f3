//! `Pool::receive` of full streams into a second pool: a volume's bytes and a filesystem's
//! tree (content, mode, owner, times, xattrs, link counts, symlinks, holes) come out equal,
//! object by object and through the filesystem API; a stream with a flipped byte or cut short
//! anywhere is refused and leaves no dataset behind, with `pool check` clean; streams it
//! cannot apply (incremental, onto an existing dataset, from another program) are refused
//! by name.

mod common;

use cairn_engine::{Pool, ReceiveOptions};
use cairn_fs::{Filesystem, XattrMode};
use common::*;

fn send(pool: &Pool, snapshot: &str, from: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    pool.send(snapshot, from, &mut out, &mut |_| {}).unwrap();
    out
}

fn receive(pool: &Pool, target: &str, stream: &[u8]) -> Result<String, String> {
    let mut input = stream;
    pool.receive(target, &mut input, ReceiveOptions::default())
        .map(|summary| summary.snapshot)
        .map_err(|err| err.to_string())
}

/// Two snapshots' object sets hold the same objects: type, block size, bonus, every block.
fn assert_same_objects(a: &Pool, a_name: &str, b: &Pool, b_name: &str) {
    let (left, right) = (
        a.snapshot_objset(a_name).unwrap(),
        b.snapshot_objset(b_name).unwrap(),
    );
    let bound = left.object_id_bound().max(right.object_id_bound());
    for object in 1..bound {
        let (l, r) = (left.dnode(object).unwrap(), right.dnode(object).unwrap());
        assert_eq!(l.is_free(), r.is_free(), "object {object}");
        if l.is_free() {
            continue;
        }
        assert_eq!(l.object_type, r.object_type, "object {object}");
        assert_eq!(l.data_block_size, r.data_block_size, "object {object}");
        assert_eq!(l.bonus, r.bonus, "object {object} bonus");
        assert_eq!(l.max_block_id, r.max_block_id, "object {object}");
        for blkid in 0..=l.max_block_id {
            assert_eq!(
                left.read_block(object, blkid).unwrap(),
                right.read_block(object, blkid).unwrap(),
                "object {object} block {blkid}"
            );
        }
    }
}

/// Walks both trees from their roots, comparing every entry's attributes (times included;
/// access times only if `atime`, and only at an inode's first name: reads move them, relatime,
/// each side at its own moment), xattrs, symlink targets and contents. `seen` holds the inodes
/// met so far.
fn assert_same_tree(
    (a, b): (&Filesystem, &Filesystem),
    (dir_a, dir_b): (u64, u64),
    path: &str,
    atime: bool,
    seen: &mut std::collections::BTreeSet<u64>,
) {
    let entries = |fs: &Filesystem, dir: u64| {
        let mut out = Vec::new();
        fs.readdir(dir, 0, |entry| {
            out.push((entry.name.clone(), entry.object, entry.kind));
            true
        })
        .unwrap();
        out.sort();
        out
    };
    let (left, right) = (entries(a, dir_a), entries(b, dir_b));
    assert_eq!(left.len(), right.len(), "{path}: entries");
    for ((name, ia, kind), (name_b, ib, kind_b)) in left.into_iter().zip(right) {
        assert_eq!((&name, kind), (&name_b, kind_b), "{path}");
        if name == b"." || name == b".." {
            continue;
        }
        let here = format!("{path}/{}", String::from_utf8_lossy(&name));
        let (attrs_a, attrs_b) = (a.getattr(ia).unwrap(), b.getattr(ib).unwrap());
        let first_name = seen.insert(ia);
        let fields = |x: &cairn_fs::attrs::InodeAttrs| {
            let access = if atime && first_name {
                x.atime
            } else {
                x.mtime
            };
            (
                x.kind, x.mode, x.uid, x.gid, x.links, x.size, access, x.mtime, x.ctime, x.crtime,
            )
        };
        assert_eq!(fields(&attrs_a), fields(&attrs_b), "{here}");
        let (mut xa, mut xb) = (a.listxattr(ia).unwrap(), b.listxattr(ib).unwrap());
        xa.sort();
        xb.sort();
        assert_eq!(xa, xb, "{here}: xattr names");
        for xattr in &xa {
            assert_eq!(
                a.getxattr(ia, xattr).unwrap(),
                b.getxattr(ib, xattr).unwrap(),
                "{here}"
            );
        }
        match kind {
            cairn_fs::attrs::FileKind::Directory => {
                assert_same_tree((a, b), (ia, ib), &here, atime, seen)
            }
            cairn_fs::attrs::FileKind::Symlink => {
                assert_eq!(a.readlink(ia).unwrap(), b.readlink(ib).unwrap(), "{here}")
            }
            _ => assert_eq!(
                a.read(ia, 0, attrs_a.size as usize).unwrap(),
                b.read(ib, 0, attrs_b.size as usize).unwrap(),
                "{here}: content"
            ),
        }
    }
}

#[test]
fn a_volume_round_trips_into_a_second_pool() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 2), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    let (size, block) = (4u64 << 20, 8192u64);
    a.create_volume_as(
        "tank/vol",
        size,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), block.to_string())],
    )
    .unwrap();
    let volume = a.volume("tank/vol").unwrap();
    let mut rng = Rng(3);
    for _ in 0..60 {
        let offset = rng.below(size);
        let len = (1 + rng.below(5 * block)).min(size - offset);
        volume
            .write(offset, &pattern(len as usize, rng.next()))
            .unwrap();
    }
    volume.trim(block * 3, block * 20).unwrap();
    a.snapshot(&["tank/vol@s0".into()], false).unwrap();
    let snapshot = receive(&b, "tank/copy", &send(&a, "tank/vol@s0", None)).unwrap();
    assert_eq!(snapshot, "tank/copy@s0");
    assert_same_objects(&a, "tank/vol@s0", &b, "tank/copy@s0");
    let (src, dst) = (
        a.volume("tank/vol@s0").unwrap(),
        b.volume("tank/copy").unwrap(),
    );
    assert_eq!(src.size_bytes(), dst.size_bytes());
    let (mut left, mut right) = (vec![0u8; size as usize], vec![0u8; size as usize]);
    src.read(0, &mut left).unwrap();
    dst.read(0, &mut right).unwrap();
    assert!(left == right, "the received volume's bytes differ");
    assert!(b.check().unwrap().is_clean());
}

#[test]
fn a_filesystem_round_trips_into_a_second_pool() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 2), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    let fs = new_filesystem(&a, "tank/fs", &[]);
    let root = fs.root();
    let dir_inode = cairn_fs::NewInode {
        kind: cairn_fs::attrs::FileKind::Directory,
        ..file(0o750)
    };
    let (sub, _) = fs.mkdir(root, b"sub", dir_inode).unwrap();
    let (data, _) = fs.create(sub, b"data", file(0o640)).unwrap();
    fs.write(data, 0, &pattern(300_000, 1)).unwrap();
    let (sparse, _) = fs.create(root, b"sparse", file(0o600)).unwrap();
    fs.write(sparse, 3 << 20, &pattern(5000, 2)).unwrap();
    fs.link(data, root, b"hardlink").unwrap();
    let symlink_inode = cairn_fs::NewInode {
        kind: cairn_fs::attrs::FileKind::Symlink,
        ..file(0o777)
    };
    fs.symlink(root, b"link", b"sub/data", symlink_inode)
        .unwrap();
    fs.setxattr(data, b"user.small", b"value", XattrMode::Create)
        .unwrap();
    fs.setxattr(sub, b"user.large", &pattern(20_000, 3), XattrMode::Create)
        .unwrap();
    let (gone, _) = fs.create(root, b"gone", file(0o644)).unwrap();
    fs.write(gone, 0, b"x").unwrap();
    fs.unlink(root, b"gone").unwrap();
    a.snapshot(&["tank/fs@s0".into()], false).unwrap();
    receive(&b, "tank/copy", &send(&a, "tank/fs@s0", None)).unwrap();
    assert_same_objects(&a, "tank/fs@s0", &b, "tank/copy@s0");
    let copy = b.filesystem("tank/copy").unwrap();
    assert_same_tree(
        (&fs, &copy),
        (root, copy.root()),
        "",
        true,
        &mut Default::default(),
    );
    assert_eq!(copy.getattr(data).unwrap().links, 2);
    assert!(b.check().unwrap().is_clean());
    // Across export and import: the received filesystem opens and reads the same.
    drop(copy);
    b.export().unwrap();
    let b = import(&device_paths(dir_b.path(), 1), plain_opener()).unwrap();
    let copy = b.filesystem("tank/copy").unwrap();
    assert_same_tree(
        (&fs, &copy),
        (root, copy.root()),
        "",
        false,
        &mut Default::default(),
    );
    let (file_object, _) = copy.lookup(copy.root(), b"hardlink").unwrap();
    copy.write(file_object, 0, b"written after import").unwrap();
    assert!(b.check().unwrap().is_clean());
}

#[test]
fn damaged_and_cut_streams_leave_nothing() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    let fs = new_filesystem(&a, "tank/fs", &[]);
    let (f, _) = fs.create(fs.root(), b"f", file(0o644)).unwrap();
    fs.write(f, 0, &pattern(200_000, 5)).unwrap();
    a.snapshot(&["tank/fs@s0".into()], false).unwrap();
    let stream = send(&a, "tank/fs@s0", None);
    let mut rng = Rng(11);
    let mut offsets: Vec<usize> = (0..12)
        .map(|_| rng.below(stream.len() as u64) as usize)
        .collect();
    // The header, the first record header, the END record.
    offsets.extend([3, 130, stream.len() - 1]);
    for &at in &offsets {
        let mut damaged = stream.clone();
        damaged[at] ^= 0x01;
        let err = receive(&b, "tank/copy", &damaged).unwrap_err();
        assert!(
            err.contains("damaged") || err.contains("not a cairn") || err.contains("version"),
            "flip at {at}: {err}"
        );
        assert!(
            !b.dataset_names().iter().any(|n| n == "tank/copy"),
            "flip at {at}"
        );
        let cut = &stream[..at];
        let err = receive(&b, "tank/copy", cut).unwrap_err();
        assert!(err.contains("truncated"), "cut at {at}: {err}");
        assert!(
            !b.dataset_names().iter().any(|n| n == "tank/copy"),
            "cut at {at}"
        );
    }
    let report = b.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
    // The whole stream still goes in afterwards.
    receive(&b, "tank/copy", &stream).unwrap();
}

#[test]
fn streams_that_cannot_apply_are_refused() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    a.create_volume_as(
        "tank/vol",
        1 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[],
    )
    .unwrap();
    a.snapshot(&["tank/vol@a".into()], false).unwrap();
    a.volume("tank/vol")
        .unwrap()
        .write(0, &pattern(4096, 1))
        .unwrap();
    a.snapshot(&["tank/vol@b".into()], false).unwrap();
    let full = send(&a, "tank/vol@a", None);
    receive(&b, "tank/copy", &full).unwrap();
    // Onto an existing dataset.
    let err = receive(&b, "tank/copy", &full).unwrap_err();
    assert!(err.contains("tank/copy"), "{err}");
    // Incremental: not done yet, said so.
    let err = receive(&b, "tank/copy", &send(&a, "tank/vol@b", Some("@a"))).unwrap_err();
    assert!(err.contains("incremental"), "{err}");
    // Bytes from another program.
    let err = receive(&b, "tank/other", &[7u8; 4096]).unwrap_err();
    assert!(err.contains("not a cairn send stream"), "{err}");
    assert!(!b.dataset_names().iter().any(|n| n == "tank/other"));
    // Into a parent that does not exist.
    assert!(receive(&b, "tank/no/such", &full).is_err());
    // Intact but inconsistent records (a faulty sender): a WRITE past a volume's end, a WRITE
    // to an object never sent. Refused, nothing left.
    use cairn_format::send_stream::{StreamHeader, StreamKind, StreamRecord, StreamWriter};
    let crafted = |records: &[StreamRecord]| {
        let header = StreamHeader {
            features: 0,
            kind: StreamKind::Volume,
            to_guid: 99,
            to_txg: 10,
            from_guid: 0,
            from_txg: 0,
            volsize_bytes: 1 << 20,
            block_size_bytes: 4096,
            creation_ms: 0,
        };
        let mut out = Vec::new();
        let mut writer = StreamWriter::new(&mut out, &header).unwrap();
        for record in records {
            writer.write(record).unwrap();
        }
        writer.finish("x").unwrap();
        out
    };
    let object = StreamRecord::Object {
        object: 1,
        object_type: cairn_format::ObjectType::VolumeData,
        block_size_bytes: 4096,
        indirect_shift: 17,
        bonus: Vec::new(),
    };
    for bad in [
        StreamRecord::Write {
            object: 1,
            offset_bytes: 1 << 40,
            data: vec![1; 4096],
        },
        StreamRecord::Write {
            object: 2,
            offset_bytes: 0,
            data: vec![1; 4096],
        },
    ] {
        let err = receive(&b, "tank/crafted", &crafted(&[object.clone(), bad])).unwrap_err();
        assert!(err.contains("inconsistent"), "{err}");
        assert!(!b.dataset_names().iter().any(|n| n == "tank/crafted"));
    }
    receive(&b, "tank/crafted", &crafted(&[object])).unwrap();
    assert!(b.check().unwrap().is_clean());
}
