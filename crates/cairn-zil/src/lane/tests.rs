//! Unit tests of the lane: write splitting and block sizing (`build.rs`), and the durable
//! ticket advancing over the completed prefix of batches (`commit.rs`).

use super::build::{SECTOR_BYTES, split_into_records, split_point, split_write};
use super::*;
use cairn_format::LogRecord;
use cairn_format::LogRecordKind;
use cairn_format::intent_log::LOG_RECORD_PAYLOAD_MAX;

fn write(offset: u64, len: usize) -> LogRecord {
    LogRecord {
        kind: LogRecordKind::Write,
        sequence: 9,
        txg: 4,
        object: 1,
        offset,
        length: len as u64,
        data: (0..len).map(|i| i as u8).collect(),
    }
}

#[test]
fn split_keeps_every_byte_in_place() {
    let record = write(1000, 5000);
    let (head, tail) = split_write(record.clone(), 4096);
    assert_eq!(head.offset, 1000);
    assert_eq!(head.length, 4096);
    assert_eq!(tail.offset, 1000 + 4096);
    assert_eq!(tail.length, 904);
    let mut joined = head.data.clone();
    joined.extend_from_slice(&tail.data);
    assert_eq!(joined, record.data);
    assert_eq!((head.sequence, tail.sequence), (9, 9));
}

#[test]
fn a_large_write_becomes_records_that_own_only_their_bytes() {
    let record = write(4096 + 512, 32 << 20);
    let mut records = Vec::new();
    split_into_records(record.clone(), &mut records);
    let mut joined = Vec::with_capacity(record.data.len());
    let mut offset = record.offset;
    for piece in &records {
        assert!(piece.data.len() <= LOG_RECORD_PAYLOAD_MAX);
        assert_eq!(piece.offset, offset);
        assert_eq!(piece.length, piece.data.len() as u64);
        // Each record holds its own bytes, not a share of the whole write's buffer.
        assert_eq!(piece.data.capacity(), piece.data.len());
        assert_eq!(piece.sequence, record.sequence);
        offset += piece.length;
        joined.extend_from_slice(&piece.data);
    }
    for piece in &records[..records.len() - 1] {
        assert_eq!((piece.offset + piece.length) % SECTOR_BYTES, 0);
    }
    assert_eq!(joined, record.data);
    let (head, _) = split_write(record, 4096);
    assert_eq!(head.data.capacity(), 4096);
}

#[test]
fn splits_end_on_sector_boundaries() {
    assert_eq!(split_point(0, 1000), Some(512));
    assert_eq!(split_point(100, 1000), Some(924));
    assert_eq!(split_point(100, 300), None);
    assert_eq!(split_point(4096, LOG_RECORD_PAYLOAD_MAX), Some(130560));
}

#[test]
fn block_sizes_round_to_4k_within_limits() {
    assert_eq!(block_size_for(1), LOG_BLOCK_SIZE_MIN);
    assert_eq!(block_size_for(4097), 8192);
    assert_eq!(block_size_for(10 << 20), LOG_BLOCK_SIZE_MAX);
}

#[test]
fn durable_ticket_advances_only_over_the_completed_prefix() {
    let lane = Lane::new(0);
    let mut st = lane.state.lock();
    st.in_flight.push_back(Batch {
        id: 1,
        last_ticket: 5,
        done: false,
    });
    st.in_flight.push_back(Batch {
        id: 2,
        last_ticket: 9,
        done: false,
    });
    st.complete(2);
    assert_eq!(st.durable_ticket, 0, "batch 2 done but batch 1 is not");
    st.complete(1);
    assert_eq!(st.durable_ticket, 9);
    assert!(st.in_flight.is_empty());
}
