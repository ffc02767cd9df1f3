//! Cache-device decoders (`cairn_l2arc::layout`): the superblock, a segment header and a
//! segment summary. Each is tried on the raw input and on a copy with the magic and the
//! embedded BLAKE3 patched in (libFuzzer cannot forge a hash); a summary is tried against a
//! header made to match it, so its entry checks are reached. What decodes must encode back to
//! the same value; the superblock and header encoders write whole slots with zero reserved
//! bytes, so it is the re-encoded bytes that are a fixed point.

use cairn_format::checksum::embedded;
use cairn_l2arc::layout::{
    HEADER_BYTES, SUMMARY_ENTRY_BYTES, SegmentHeader, Superblock, decode_summary, encode_summary,
};

/// A segment size the segment header's range checks are made against.
const SEGMENT_BYTES: u64 = 1 << 20;

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    superblock(data);
    segment_header(data);
    superblock(&patched(data, b"CAIRNL2\0"));
    segment_header(&patched(data, b"CAIRNSEG"));
    summary(data);
}

/// `data` padded to 96 bytes, with `magic` and the checksum of [0, 64) patched in.
fn patched(data: &[u8], magic: &[u8; 8]) -> Vec<u8> {
    let mut bytes = data.to_vec();
    if bytes.len() < 96 {
        bytes.resize(96, 0);
    }
    bytes[..8].copy_from_slice(magic);
    let checksum = embedded(&bytes[..64]);
    bytes[64..96].copy_from_slice(&checksum);
    bytes
}

fn superblock(bytes: &[u8]) {
    let Ok(decoded) = Superblock::decode(bytes) else {
        return;
    };
    let encoded = decoded.encode();
    assert_eq!(
        Superblock::decode(&encoded),
        Ok(decoded),
        "superblock changed across encode/decode"
    );
}

fn segment_header(bytes: &[u8]) {
    let Ok(Some(decoded)) = SegmentHeader::decode(bytes, SEGMENT_BYTES) else {
        return;
    };
    let encoded = decoded.encode();
    assert_eq!(
        SegmentHeader::decode(&encoded, SEGMENT_BYTES),
        Ok(Some(decoded)),
        "segment header changed across encode/decode"
    );
}

fn summary(bytes: &[u8]) {
    let entries = (bytes.len() / SUMMARY_ENTRY_BYTES) as u32;
    let summary = &bytes[..entries as usize * SUMMARY_ENTRY_BYTES];
    // A summary offset past every entry the input could name, within the segment.
    let header = SegmentHeader {
        sequence: 1,
        hits: 0,
        summary_offset_bytes: (SEGMENT_BYTES / 2) as u32,
        entries,
        summary_checksum: embedded(summary),
    };
    let Ok(decoded) = decode_summary(bytes, &header) else {
        return;
    };
    let encoded = encode_summary(&decoded);
    assert_eq!(
        encoded, summary,
        "summary bytes changed across decode/encode"
    );
    assert!(header.summary_offset_bytes as u64 >= HEADER_BYTES);
}
