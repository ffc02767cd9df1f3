//! Send stream decoder (`cairn_format::send_stream`: what `cairn receive` reads from a pipe).
//!
//! Two inputs per run: the raw bytes, and a "repaired" copy with the header's magic, version
//! and checksum patched in and every record's chained BLAKE3 recomputed (each record's
//! payload length clipped to what is left), so the fuzzer reaches the record checks behind
//! the checksums it cannot forge. Whatever decodes to END must survive encode → decode
//! unchanged.

use cairn_format::send_stream::{
    SEND_HEADER_SIZE, SEND_RECORD_HEADER_SIZE, SEND_STREAM_MAGIC, SEND_STREAM_VERSION,
    StreamReader, StreamRecord, StreamWriter, record_checksum,
};

/// Records read from one input at most (a stream of empty records is 96 bytes each).
const RECORDS_MAX: usize = 4096;

fn round_trip(bytes: &[u8]) {
    let mut input = bytes;
    let Ok(mut reader) = StreamReader::new(&mut input) else {
        return;
    };
    let header = reader.header().clone();
    let mut records = Vec::new();
    while records.len() < RECORDS_MAX {
        match reader.next_record() {
            Ok(Some(record)) => records.push(record),
            Ok(None) | Err(_) => break,
        }
    }
    let Some(StreamRecord::End { snapshot, .. }) = records.last().cloned() else {
        return;
    };
    let mut encoded = Vec::new();
    let mut writer = StreamWriter::new(&mut encoded, &header).expect("a decoded header encodes");
    for record in &records[..records.len() - 1] {
        writer.write(record).expect("a decoded record encodes");
    }
    writer.finish(&snapshot).expect("a decoded END encodes");
    let mut again = encoded.as_slice();
    let mut reader = StreamReader::new(&mut again).expect("a re-encoded stream decodes");
    assert_eq!(
        reader.header(),
        &header,
        "header changed across encode/decode"
    );
    for record in &records {
        let decoded = reader.next_record().expect("a re-encoded record decodes");
        assert_eq!(
            decoded.as_ref(),
            Some(record),
            "record changed across encode/decode"
        );
    }
}

/// `data` with the header made valid and every record's checksum chained.
fn repair(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    if out.len() < SEND_HEADER_SIZE {
        out.resize(SEND_HEADER_SIZE, 0);
    }
    out[..8].copy_from_slice(&SEND_STREAM_MAGIC.to_le_bytes());
    out[8..12].copy_from_slice(&SEND_STREAM_VERSION.to_le_bytes());
    let sum = blake3::hash(&out[..96]);
    out[96..SEND_HEADER_SIZE].copy_from_slice(sum.as_bytes());
    let mut chain = [0u8; 32];
    chain.copy_from_slice(&out[96..SEND_HEADER_SIZE]);
    let mut at = SEND_HEADER_SIZE;
    while out.len() - at >= SEND_RECORD_HEADER_SIZE {
        let left = out.len() - at - SEND_RECORD_HEADER_SIZE;
        let claimed = u32::from_le_bytes([out[at + 4], out[at + 5], out[at + 6], out[at + 7]]);
        let payload = (claimed as usize).min(left);
        out[at + 4..at + 8].copy_from_slice(&(payload as u32).to_le_bytes());
        let end = at + SEND_RECORD_HEADER_SIZE + payload;
        let mut header = [0u8; SEND_RECORD_HEADER_SIZE];
        header.copy_from_slice(&out[at..at + SEND_RECORD_HEADER_SIZE]);
        chain = record_checksum(&chain, &header, &out[at + SEND_RECORD_HEADER_SIZE..end]);
        out[at + 64..at + SEND_RECORD_HEADER_SIZE].copy_from_slice(&chain);
        at = end;
    }
    out
}

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    round_trip(data);
    round_trip(&repair(data));
}
