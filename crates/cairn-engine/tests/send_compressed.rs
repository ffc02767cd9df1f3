//! `send -c` (issue 36): a compressible filesystem's `-c` stream is much smaller than the
//! plain one; received into a pool that does not compress, the blocks stay compressed as the
//! sender stored them (space used like the source's) and read back the same, full and
//! incremental; a compressed block that does not decompress to its size fails the receive
//! by name and leaves nothing.

mod common;

use cairn_engine::{Pool, SendOptions};
use cairn_format::send_stream::{
    SEND_FEATURE_COMPRESSED, StreamHeader, StreamKind, StreamRecord, StreamWriter,
};
use cairn_format::{BlockPointer, Compression, ObjectType};
use common::streams::*;
use common::*;

fn send_compressed(pool: &Pool, snapshot: &str, from: Option<&str>) -> Vec<u8> {
    let mut out = Vec::new();
    let options = SendOptions {
        compressed: true,
        ..SendOptions::default()
    };
    pool.send_with(snapshot, from, options, &mut out, &mut |_| {})
        .unwrap();
    out
}

/// Text-like bytes lz4 packs several times over.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let words: [&[u8]; 5] = [b"alpha ", b"bravo ", b"charlie ", b"delta ", b"\n"];
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(words[rng.below(5) as usize]);
    }
    out.truncate(len);
    out
}

fn file_blocks(pool: &Pool, name: &str) -> Vec<BlockPointer> {
    pool.dataset_blocks(name)
        .unwrap()
        .into_iter()
        .filter(|bp| bp.level == 0 && bp.object_type == ObjectType::FileData)
        .collect()
}

fn packed(blocks: &[BlockPointer]) -> (usize, u64) {
    let lz4: Vec<_> = blocks
        .iter()
        .filter(|bp| bp.compression == Compression::Lz4)
        .collect();
    (lz4.len(), lz4.iter().map(|bp| u64::from(bp.psize)).sum())
}

#[test]
fn a_compressed_stream_is_smaller_and_its_blocks_stay_compressed() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    let fs = new_filesystem(&a, "tank/fs", &[("compression", "lz4"), ("atime", "off")]);
    let root = fs.root();
    for index in 0..4u64 {
        let (file_object, _) = fs
            .create(root, format!("f{index}").as_bytes(), file(0o644))
            .unwrap();
        fs.write(file_object, 0, &text(1 << 20, index)).unwrap();
    }
    a.snapshot(&["tank/fs@s0".into()], false).unwrap();
    let plain = send(&a, "tank/fs@s0", None);
    let small = send_compressed(&a, "tank/fs@s0", None);
    eprintln!("-c stream {} bytes, plain {}", small.len(), plain.len());
    assert!(
        small.len() * 2 < plain.len(),
        "-c {} bytes, plain {}",
        small.len(),
        plain.len()
    );
    // The receiving pool does not compress: the blocks stay as the sender stored them.
    receive(&b, "tank/copy", &small).unwrap();
    b.set_property("tank/copy", "atime", "off").unwrap();
    assert_same_objects(&a, "tank/fs@s0", &b, "tank/copy@s0");
    let (sent, received) = (
        file_blocks(&a, "tank/fs@s0"),
        file_blocks(&b, "tank/copy@s0"),
    );
    assert!(packed(&sent).0 > 0);
    assert_eq!(packed(&sent), packed(&received), "same blocks, same sizes");
    let (used_a, used_b) = (
        info(&a, "tank/fs").referenced_bytes,
        info(&b, "tank/copy").referenced_bytes,
    );
    eprintln!("referenced: source {used_a} bytes, replica {used_b}");
    assert!(
        used_b < used_a + used_a / 10,
        "referenced {used_b} on the replica, {used_a} on the source"
    );
    assert_eq!(
        a.snapshot_digest("tank/fs@s0").unwrap(),
        b.snapshot_digest("tank/copy@s0").unwrap()
    );
    // An incremental -c stream too.
    let (f0, _) = fs.lookup(root, b"f0").unwrap();
    fs.write(f0, 300_000, &text(200_000, 9)).unwrap();
    let (extra, _) = fs.create(root, b"extra", file(0o600)).unwrap();
    fs.write(extra, 0, &text(100_000, 10)).unwrap();
    a.snapshot(&["tank/fs@s1".into()], false).unwrap();
    let incremental = send_compressed(&a, "tank/fs@s1", Some("@s0"));
    assert!(incremental.len() < send(&a, "tank/fs@s1", Some("@s0")).len());
    receive(&b, "tank/copy", &incremental).unwrap();
    assert_same_objects(&a, "tank/fs@s1", &b, "tank/copy@s1");
    assert_eq!(
        packed(&file_blocks(&a, "tank/fs@s1")),
        packed(&file_blocks(&b, "tank/copy@s1"))
    );
    assert_eq!(
        a.snapshot_digest("tank/fs@s1").unwrap(),
        b.snapshot_digest("tank/copy@s1").unwrap()
    );
    // A plain stream into a pool that compresses, and a -c one: the same content.
    assert!(b.check().unwrap().is_clean());
    b.export().unwrap();
    let b = import(&device_paths(dir_b.path(), 1), plain_opener()).unwrap();
    assert_same_objects(&a, "tank/fs@s1", &b, "tank/copy@s1");
}

#[test]
fn a_compressed_block_that_does_not_decompress_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 1), plain_opener());
    let header = StreamHeader {
        features: SEND_FEATURE_COMPRESSED,
        kind: StreamKind::Volume,
        to_guid: 77,
        to_txg: 5,
        from_guid: 0,
        from_txg: 0,
        volsize_bytes: 1 << 20,
        block_size_bytes: 8192,
        creation_ms: 1,
        resume: None,
    };
    let good = cairn_format::compress::encode(&text(8192, 1), Compression::Lz4).unwrap();
    let stream = |payload: &[u8]| {
        let mut out = Vec::new();
        let mut writer = StreamWriter::new(&mut out, &header).unwrap();
        writer
            .write(&StreamRecord::Object {
                object: 1,
                object_type: ObjectType::VolumeData,
                block_size_bytes: 8192,
                indirect_shift: cairn_format::dnode::INDIRECT_SHIFT_DEFAULT,
                bonus: Vec::new(),
            })
            .unwrap();
        writer
            .write_compressed(1, 8192, 8192, Compression::Lz4, payload)
            .unwrap();
        writer.finish("s").unwrap();
        out
    };
    let mut broken = good.clone();
    // The lz4 length header says more than there is.
    broken[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
    let err = receive(&pool, "tank/vol", &stream(&broken)).unwrap_err();
    assert!(err.contains("does not decompress"), "{err}");
    assert!(pool.snapshots(None).unwrap().is_empty());
    assert!(
        pool.datasets()
            .unwrap()
            .iter()
            .all(|info| info.name != "tank/vol")
    );
    // The same stream with a good block is received.
    receive(&pool, "tank/vol", &stream(&good)).unwrap();
    let mut block = vec![0u8; 8192];
    pool.volume("tank/vol")
        .unwrap()
        .read(8192, &mut block)
        .unwrap();
    assert!(block == text(8192, 1));
    assert!(pool.check().unwrap().is_clean());
}
