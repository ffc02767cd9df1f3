//! The snapshot `digest` (issue 36): equal on the sender and on a replica received from it,
//! full and through a chain of incrementals, even where the replica stores the blocks
//! differently (compressed there, not here); different as soon as one byte of one object's
//! data or attributes differs. A volume and a filesystem.

mod common;

use cairn_engine::Pool;
use cairn_fs::SetAttrs;
use common::streams::*;
use common::*;

fn digest(pool: &Pool, snapshot: &str) -> String {
    pool.snapshot_digest(snapshot)
        .unwrap_or_else(|err| panic!("digest of {snapshot}: {err}"))
}

/// Text-like bytes lz4 packs well, so the replica (compression on) stores them differently.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        let word: &[u8] =
            [b"alpha " as &[u8], b"bravo ", b"charlie ", b"\n"][rng.below(4) as usize];
        out.extend_from_slice(word);
    }
    out.truncate(len);
    out
}

#[test]
fn a_volume_full_and_three_incrementals_have_equal_digests_and_one_byte_differs() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 2), plain_opener());
    // The replica compresses what the source stores plain: the digest must not see it.
    b.set_property("tank", "compression", "on").unwrap();
    a.create_volume(
        "tank/vol",
        1 << 20,
        &[("volblocksize".into(), "8192".into())],
    )
    .unwrap();
    let volume = a.volume("tank/vol").unwrap();
    volume.write(0, &text(300_000, 1)).unwrap();
    a.snapshot(&["tank/vol@s0".into()], false).unwrap();
    receive(&b, "tank/copy", &send(&a, "tank/vol@s0", None)).unwrap();
    let first = digest(&a, "tank/vol@s0");
    assert_eq!(first.len(), 64);
    assert_eq!(first, digest(&b, "tank/copy@s0"));
    let mut previous = first;
    for round in 1..=3u64 {
        volume
            .write(round * 100_000, &text(20_000, round + 10))
            .unwrap();
        let to = format!("tank/vol@s{round}");
        a.snapshot(std::slice::from_ref(&to), false).unwrap();
        let stream = send(&a, &to, Some(&format!("@s{}", round - 1)));
        let made = receive(&b, "tank/copy", &stream).unwrap();
        let now = digest(&a, &to);
        assert_eq!(now, digest(&b, &made), "round {round}");
        assert_ne!(now, previous, "round {round}: changed content, same digest");
        previous = now;
    }
    // One byte changed: the next snapshot's digest differs; written back, it is equal again.
    let mut byte = [0u8; 1];
    volume.read(777_777, &mut byte).unwrap();
    volume.write(777_777, &[byte[0] ^ 1]).unwrap();
    a.snapshot(&["tank/vol@flipped".into()], false).unwrap();
    assert_ne!(digest(&a, "tank/vol@flipped"), previous);
    volume.write(777_777, &byte).unwrap();
    a.snapshot(&["tank/vol@back".into()], false).unwrap();
    assert_eq!(digest(&a, "tank/vol@back"), previous);
    // Zeros written over a hole change nothing: a hole and zeros read the same.
    volume.write(1_000_000, &[0u8; 8192]).unwrap();
    a.snapshot(&["tank/vol@zeros".into()], false).unwrap();
    assert_eq!(digest(&a, "tank/vol@zeros"), previous);
    // Remembered across an import (computed again from the snapshot: the same value).
    b.export().unwrap();
    let b = import(&device_paths(dir_b.path(), 2), plain_opener()).unwrap();
    assert_eq!(digest(&b, "tank/copy@s3"), digest(&a, "tank/vol@s3"));
    // A dataset has no digest; a snapshot that does not exist is an error.
    assert!(b.snapshot_digest("tank/copy").is_err());
    assert!(b.snapshot_digest("tank/copy@nope").is_err());
}

#[test]
fn a_filesystem_full_and_three_incrementals_have_equal_digests_and_attributes_count() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    b.set_property("tank", "compression", "on").unwrap();
    let fs = new_filesystem(&a, "tank/fs", &[("atime", "off")]);
    let root = fs.root();
    let (doc, _) = fs.create(root, b"doc", file(0o644)).unwrap();
    fs.write(doc, 0, &text(200_000, 3)).unwrap();
    a.snapshot(&["tank/fs@s0".into()], false).unwrap();
    receive(&b, "tank/copy", &send(&a, "tank/fs@s0", None)).unwrap();
    b.set_property("tank/copy", "atime", "off").unwrap();
    assert_eq!(digest(&a, "tank/fs@s0"), digest(&b, "tank/copy@s0"));
    let mut previous = digest(&a, "tank/fs@s0");
    for round in 1..=3u64 {
        let name = format!("f{round}");
        let (object, _) = fs.create(root, name.as_bytes(), file(0o600)).unwrap();
        fs.write(object, 0, &text(50_000, round)).unwrap();
        fs.write(doc, round * 10_000, b"changed").unwrap();
        let to = format!("tank/fs@s{round}");
        a.snapshot(std::slice::from_ref(&to), false).unwrap();
        let stream = send(&a, &to, Some(&format!("@s{}", round - 1)));
        let made = receive(&b, "tank/copy", &stream).unwrap();
        let now = digest(&a, &to);
        assert_eq!(now, digest(&b, &made), "round {round}");
        assert_ne!(now, previous, "round {round}");
        previous = now;
    }
    // An attribute alone (the mode) changes the digest.
    fs.setattr(
        doc,
        SetAttrs {
            mode: Some(0o600),
            ..SetAttrs::default()
        },
    )
    .unwrap();
    a.snapshot(&["tank/fs@mode".into()], false).unwrap();
    assert_ne!(digest(&a, "tank/fs@mode"), previous);
    // One byte of a file's data changes it too.
    let previous = digest(&a, "tank/fs@mode");
    let byte = fs.read(doc, 123_456, 1).unwrap();
    fs.write(doc, 123_456, &[byte[0] ^ 0x20]).unwrap();
    a.snapshot(&["tank/fs@byte".into()], false).unwrap();
    assert_ne!(digest(&a, "tank/fs@byte"), previous);
    assert!(a.check().unwrap().is_clean());
    assert!(b.check().unwrap().is_clean());
}
