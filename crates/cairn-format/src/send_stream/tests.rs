//! Round trips of the send stream and every way a damaged one must be refused.

use super::*;

fn header() -> StreamHeader {
    StreamHeader {
        features: 0,
        kind: StreamKind::Filesystem,
        to_guid: 0x1234_5678_9abc_def0,
        to_txg: 40,
        from_guid: 0x0fed_cba9,
        from_txg: 20,
        volsize_bytes: 0,
        block_size_bytes: 128 << 10,
        resume: None,
        creation_ms: 1_700_000_000_000,
    }
}

fn records() -> Vec<StreamRecord> {
    vec![
        StreamRecord::Object {
            object: 3,
            object_type: ObjectType::FileData,
            block_size_bytes: 4096,
            indirect_shift: 14,
            bonus: (0..120u8).collect(),
        },
        StreamRecord::FreeObjects {
            first: 4,
            count: 28,
        },
        StreamRecord::Write {
            object: 3,
            offset_bytes: 8192,
            data: (0..4096u32).map(|i| (i * 7) as u8).collect(),
        },
        StreamRecord::Free {
            object: 3,
            offset_bytes: 12288,
            length_bytes: u64::MAX,
        },
    ]
}

fn encode(header: &StreamHeader, records: &[StreamRecord]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = StreamWriter::new(&mut out, header).unwrap();
    for record in records {
        writer.write(record).unwrap();
    }
    let written = writer.finish("monday").unwrap();
    assert_eq!(written, out.len() as u64);
    out
}

/// Every record of `bytes`, or the first error.
fn decode(bytes: &[u8]) -> Result<(StreamHeader, Vec<StreamRecord>), StreamError> {
    let mut input = bytes;
    let mut reader = StreamReader::new(&mut input)?;
    let header = reader.header().clone();
    let mut out = Vec::new();
    while let Some(record) = reader.next_record()? {
        out.push(record);
    }
    Ok((header, out))
}

#[test]
fn streams_round_trip() {
    let bytes = encode(&header(), &records());
    let (decoded_header, decoded) = decode(&bytes).unwrap();
    assert_eq!(decoded_header, header());
    let mut expected = records();
    expected.push(StreamRecord::End {
        to_guid: header().to_guid,
        snapshot: "monday".into(),
    });
    assert_eq!(decoded, expected);
    // A full stream of a volume too.
    let full = StreamHeader {
        kind: StreamKind::Volume,
        from_guid: 0,
        from_txg: 0,
        volsize_bytes: 1 << 30,
        ..header()
    };
    let (decoded_header, _) = decode(&encode(&full, &[])).unwrap();
    assert_eq!(decoded_header, full);
    assert!(!decoded_header.is_incremental());
}

#[test]
fn every_flipped_byte_is_refused() {
    let bytes = encode(&header(), &records());
    for at in 0..bytes.len() {
        let mut damaged = bytes.clone();
        damaged[at] ^= 0x20;
        assert!(
            decode(&damaged).is_err(),
            "a flip at byte {at} went unnoticed"
        );
    }
}

#[test]
fn a_flip_is_caught_at_the_record_that_holds_it() {
    let bytes = encode(&header(), &records());
    // Byte 100 of the WRITE payload: record 3 starts after the header, OBJECT (96 + 120) and
    // FREEOBJECTS (96).
    let write_at = SEND_HEADER_SIZE + 96 + 120 + 96;
    let mut damaged = bytes.clone();
    damaged[write_at + 96 + 100] ^= 1;
    match decode(&damaged) {
        Err(StreamError::Checksum {
            record,
            offset_bytes,
        }) => {
            assert_eq!(record, 3);
            assert_eq!(offset_bytes, write_at as u64);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_truncation_is_refused() {
    let bytes = encode(&header(), &records());
    for len in 0..bytes.len() {
        match decode(&bytes[..len]) {
            Err(StreamError::Truncated { .. }) => {}
            other => panic!("a stream cut at {len} gave {other:?}"),
        }
    }
}

#[test]
fn foreign_and_newer_streams_are_named() {
    let mut foreign = vec![0u8; 4096];
    foreign[..8].copy_from_slice(b"\0\0\0\0\xb5\xa4\xd1\x2f");
    assert!(matches!(
        decode(&foreign),
        Err(StreamError::NotAStream { .. })
    ));
    let mut newer = encode(&header(), &[]);
    newer[8..12].copy_from_slice(&(SEND_STREAM_VERSION + 1).to_le_bytes());
    assert!(matches!(
        decode(&newer),
        Err(StreamError::Version { found }) if found == SEND_STREAM_VERSION + 1
    ));
    // Version 1 (one running hash over every byte) is refused, not misread.
    let mut older = encode(&header(), &[]);
    older[8..12].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(
        decode(&older),
        Err(StreamError::Version { found: 1 })
    ));
}

/// A record whose length field was damaged into a huge value is refused before anything is
/// allocated for it, even with a checksum an attacker recomputed.
#[test]
fn huge_lengths_never_allocate() {
    let mut bytes = encode(&header(), &[]);
    let at = SEND_HEADER_SIZE;
    bytes[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode(&bytes),
        Err(StreamError::Checksum { record: 1, .. })
    ));
}

/// Records whose checksum verifies but whose fields make no sense (a stream written by a
/// faulty sender) are refused by name.
#[test]
fn malformed_records_are_refused() {
    let malformed = |kind: u16, fields: [u64; 6], payload: &[u8]| {
        let mut out = Vec::new();
        let mut writer = StreamWriter::new(&mut out, &header()).unwrap();
        writer.emit(kind, 0, fields, payload).unwrap();
        writer.finish("s").unwrap();
        match decode(&out) {
            Err(StreamError::Malformed { record: 1, .. }) => {}
            other => panic!("kind {kind} {fields:?}: {other:?}"),
        }
    };
    malformed(KIND_OBJECT, [3, 99, 4096, 14, 0, 0], &[]);
    malformed(KIND_OBJECT, [3, 7, 1000, 14, 0, 0], &[]);
    malformed(KIND_OBJECT, [3, 7, 4096, 30, 0, 0], &[]);
    malformed(KIND_OBJECT, [0, 7, 4096, 14, 0, 0], &[]);
    malformed(
        KIND_OBJECT,
        [3, 7, 4096, 14, 0, 0],
        &[0; DNODE_BONUS_SIZE_MAX + 1],
    );
    malformed(KIND_FREEOBJECTS, [u64::MAX, 2, 0, 0, 0, 0], &[]);
    malformed(KIND_WRITE, [3, 0, 10, 0, 0, 0], &[1; 9]);
    malformed(KIND_FREE, [3, 0, 10, 0, 0, 0], &[1]);
    malformed(KIND_END, [1, 0, 0, 0, 0, 0], b"s");
    malformed(KIND_END, [header().to_guid, 0, 0, 0, 0, 0], &[]);
    malformed(KIND_END, [header().to_guid, 0, 0, 0, 0, 0], &[0xff, 0xfe]);
    malformed(77, [0; 6], &[]);
}

/// `send -c`: a compressed WRITE round-trips in a stream with the feature; without the
/// feature the writer refuses it and a reader refuses the flag; bad fields are named.
#[test]
fn compressed_writes_need_the_feature_and_sane_fields() {
    let with = StreamHeader {
        features: SEND_FEATURE_COMPRESSED,
        ..header()
    };
    let block: Vec<u8> = b"abcd".repeat(1024);
    let packed = crate::compress::encode(&block, Compression::Lz4).unwrap();
    let record = StreamRecord::WriteCompressed {
        object: 3,
        offset_bytes: 8192,
        logical_bytes: 4096,
        compression: Compression::Lz4,
        data: packed.clone(),
    };
    let bytes = encode(&with, std::slice::from_ref(&record));
    let (decoded_header, decoded) = decode(&bytes).unwrap();
    assert_eq!(decoded_header.features, SEND_FEATURE_COMPRESSED);
    assert_eq!(decoded[0], record);
    // Without the feature: the writer refuses, and a reader refuses the flag.
    let mut out = Vec::new();
    let mut writer = StreamWriter::new(&mut out, &header()).unwrap();
    assert!(writer.write(&record).is_err());
    let fields = [3, 8192, packed.len() as u64, 4096, 1, 0];
    writer
        .emit(KIND_WRITE, SEND_WRITE_FLAG_COMPRESSED, fields, &packed)
        .unwrap();
    writer.finish("s").unwrap();
    assert!(matches!(
        decode(&out),
        Err(StreamError::Malformed { record: 1, .. })
    ));
    // With it, fields that make no sense are refused by name.
    let malformed = |fields: [u64; 6], payload: &[u8]| {
        let mut out = Vec::new();
        let mut writer = StreamWriter::new(&mut out, &with).unwrap();
        writer
            .emit(KIND_WRITE, SEND_WRITE_FLAG_COMPRESSED, fields, payload)
            .unwrap();
        writer.finish("s").unwrap();
        match decode(&out) {
            Err(StreamError::Malformed { record: 1, .. }) => {}
            other => panic!("{fields:?}: {other:?}"),
        }
    };
    let len = packed.len() as u64;
    malformed([3, 0, len, 4096, 0, 0], &packed);
    malformed([3, 0, len, 4096, 99, 0], &packed);
    malformed([3, 0, len, 0, 1, 0], &packed);
    malformed([3, 0, len, 1000, 1, 0], &packed);
    malformed([3, 0, len + 1, 4096, 1, 0], &packed);
    malformed([3, 0, 4608, 4096, 1, 0], &[1; 4608]);
    malformed([3, 0, 100, 4096, 1, 0], &[1; 100]);
    // Another flag on a WRITE, or the flag on another kind, stays unknown.
    let mut out = Vec::new();
    let mut writer = StreamWriter::new(&mut out, &with).unwrap();
    writer
        .emit(
            KIND_FREE,
            SEND_WRITE_FLAG_COMPRESSED,
            [3, 0, 10, 0, 0, 0],
            &[],
        )
        .unwrap();
    writer.finish("s").unwrap();
    assert!(matches!(
        decode(&out),
        Err(StreamError::Malformed { record: 1, .. })
    ));
}

#[test]
fn a_resumed_stream_carries_its_point_and_other_feature_bits_are_refused() {
    let resumed = StreamHeader {
        resume: Some(ResumePoint {
            object: 34,
            offset_bytes: 1 << 20,
        }),
        ..header()
    };
    let bytes = resumed.encode();
    let decoded = StreamHeader::decode(&bytes).unwrap();
    assert_eq!(decoded.resume, resumed.resume);
    assert_eq!(decoded.features, SEND_FEATURE_RESUME);
    let (back, records_back) = decode(&encode(&resumed, &records())).unwrap();
    assert_eq!(back.resume, resumed.resume);
    assert!(records_back.starts_with(&records()), "the records differ");
    // A whole stream has no point, whatever bytes 80..96 hold.
    assert_eq!(
        StreamHeader::decode(&header().encode()).unwrap().resume,
        None
    );
    // (Bits 0 and 2 are taken by other features; these are nobody's.)
    for bit in [1u32 << 7, 1 << 31] {
        let mut bytes = header().encode();
        bytes[12..16].copy_from_slice(&bit.to_le_bytes());
        let checksum = blake3::hash(&bytes[..96]);
        bytes[96..].copy_from_slice(checksum.as_bytes());
        let err = StreamHeader::decode(&bytes).unwrap_err().to_string();
        assert!(err.contains("unknown feature bits"), "{bit:#x}: {err}");
    }
}
