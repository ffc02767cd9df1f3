//! `Pool::receive` of full streams into a second pool: a volume's bytes and a filesystem's
//! tree (content, mode, owner, times, xattrs, link counts, symlinks, holes) come out equal,
//! object by object and through the filesystem API; a stream with a flipped byte or cut short
//! anywhere is refused and leaves no dataset behind, with `pool check` clean; streams it
//! cannot apply (a full one onto an existing dataset, an incremental one into a dataset that
//! does not exist, from another program) are refused by name. Incremental receives:
//! `receive_incremental.rs`.

mod common;

use cairn_fs::XattrMode;
use common::streams::*;
use common::*;

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
    // An incremental into a dataset that does not exist.
    let incremental = send(&a, "tank/vol@b", Some("@a"));
    let err = receive(&b, "tank/none", &incremental).unwrap_err();
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
            resume: None,
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
