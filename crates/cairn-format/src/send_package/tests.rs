//! Round trips of a package, and every way a damaged one or a malformed manifest is refused.

use super::*;
use crate::send_stream::{StreamReader, StreamRecord, StreamWriter};

fn header(features: u32, to_guid: u64) -> StreamHeader {
    StreamHeader {
        features,
        kind: StreamKind::Filesystem,
        to_guid,
        to_txg: 40,
        from_guid: 0,
        from_txg: 0,
        volsize_bytes: 0,
        block_size_bytes: 128 << 10,
        creation_ms: 1_700_000_000_000,
        resume: None,
    }
}

fn dataset(name: &str) -> PackageDataset {
    PackageDataset {
        name: name.into(),
        kind: 2,
        origin_guid: 0,
        properties: vec![("compression".into(), "lz4".into())],
        snapshots: vec![("s1".into(), 7)],
    }
}

fn manifest() -> PackageManifest {
    PackageManifest {
        properties: true,
        recursive: true,
        datasets: vec![dataset(""), dataset("b"), dataset("b/c")],
        streams: vec![
            PackageStream {
                dataset: 0,
                from_guid: 0,
                to_guid: 11,
            },
            PackageStream {
                dataset: 2,
                from_guid: 0,
                to_guid: 12,
            },
        ],
    }
}

/// A package of `manifest()` whose sub-streams hold one WRITE each.
fn package() -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer =
        PackageWriter::new(&mut out, &header(SEND_FEATURE_PACKAGE, 99), &manifest()).unwrap();
    for guid in [11u64, 12] {
        let mut stream = StreamWriter::new(writer.stream_out(), &header(0, guid)).unwrap();
        stream.write_data(1, 0, &[guid as u8; 512]).unwrap();
        let (_, end) = stream.finish_with_checksum("s1").unwrap();
        writer.stream_done(&end);
    }
    let length = writer.finish(2).unwrap();
    assert_eq!(length, out.len() as u64);
    out
}

/// Reads a whole package: the manifest and each sub-stream's records, or the first error.
fn read(bytes: &[u8]) -> Result<(PackageManifest, Vec<Vec<StreamRecord>>), StreamError> {
    let mut input = bytes;
    let mut head = [0u8; SEND_HEADER_SIZE];
    input
        .read_exact(&mut head)
        .map_err(|_| StreamError::Truncated {
            record: 0,
            offset_bytes: 0,
        })?;
    if !is_package(&head) {
        return Err(StreamError::NotAStream { magic: 0 });
    }
    let mut reader = PackageReader::new(&head, &mut input)?;
    let manifest = reader.manifest().clone();
    let mut streams = Vec::new();
    for _ in 0..manifest.streams.len() {
        let mut stream = StreamReader::new(reader.stream_input())?;
        let mut records = Vec::new();
        while let Some(record) = stream.next_record()? {
            records.push(record);
        }
        let end = stream.checksum();
        reader.stream_done(&end);
        streams.push(records);
    }
    reader.finish()?;
    Ok((manifest, streams))
}

#[test]
fn a_package_round_trips() {
    let (read_back, streams) = read(&package()).unwrap();
    assert_eq!(read_back, manifest());
    assert_eq!(streams.len(), 2);
    assert!(matches!(
        streams[1][1],
        StreamRecord::End { to_guid: 12, .. }
    ));
}

#[test]
fn every_flipped_byte_and_every_cut_is_refused() {
    let bytes = package();
    for at in (0..bytes.len()).step_by(7) {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x10;
        assert!(read(&damaged).is_err(), "a flip at {at} of {}", bytes.len());
        assert!(read(&bytes[..at]).is_err(), "a cut at {at}");
    }
    // The two sub-streams (of equal length) swapped, or the second dropped: each sub-stream
    // still verifies, the package does not.
    let stream_bytes = SEND_HEADER_SIZE + SEND_RECORD_HEADER_SIZE * 2 + 512 + 2;
    let end = bytes.len() - SEND_RECORD_HEADER_SIZE;
    let (first, second) = (end - 2 * stream_bytes, end - stream_bytes);
    let mut swapped = bytes[..first].to_vec();
    swapped.extend_from_slice(&bytes[second..end]);
    swapped.extend_from_slice(&bytes[first..second]);
    swapped.extend_from_slice(&bytes[end..]);
    assert!(matches!(
        read(&swapped),
        Err(StreamError::Checksum { record: 2, .. })
    ));
    let mut dropped = bytes[..second].to_vec();
    dropped.extend_from_slice(&bytes[end..]);
    assert!(read(&dropped).is_err());
}

/// A change that spoils a manifest.
type Change = Box<dyn Fn(&mut PackageManifest)>;

#[test]
fn a_malformed_manifest_is_refused() {
    let cases: Vec<(&str, Change)> = vec![
        ("no dataset", Box::new(|m| m.datasets.clear())),
        (
            "not the top one",
            Box::new(|m| m.datasets[0].name = "x".into()),
        ),
        ("before its parent", Box::new(|m| m.datasets.swap(1, 2))),
        ("twice", Box::new(|m| m.datasets[2].name = "b".into())),
        (
            "a dataset named",
            Box::new(|m| m.datasets[1].name = "b@x".into()),
        ),
        ("has kind", Box::new(|m| m.datasets[1].kind = 9)),
        ("a stream", Box::new(|m| m.streams[0].dataset = 3)),
    ];
    for (what, change) in cases {
        let mut bad = manifest();
        change(&mut bad);
        let err = bad.validate().unwrap_err();
        assert!(err.contains(what), "{what}: {err}");
        let mut out = Vec::new();
        assert!(PackageWriter::new(&mut out, &header(SEND_FEATURE_PACKAGE, 1), &bad).is_err());
    }
}

#[test]
fn a_plain_stream_is_no_package_and_a_package_needs_its_bit() {
    let mut out = Vec::new();
    assert!(PackageWriter::new(&mut out, &header(0, 1), &manifest()).is_err());
    let plain = header(0, 1).encode();
    assert!(!is_package(&plain));
    let mut empty: &[u8] = &[];
    assert!(PackageReader::new(&plain, &mut empty).is_err());
}
