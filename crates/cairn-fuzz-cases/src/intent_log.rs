//! Intent-log block decoder and chain-header decoder.
//!
//! A log block is only accepted at one position of one chain, so every input is decoded as the
//! block expected at a fixed `ChainPosition`. libFuzzer cannot forge the embedded BLAKE3, so three
//! copies are decoded per run:
//! - the raw bytes;
//! - the magic patched in (padded to a full header), which still stops at the checksum but covers
//!   the used-bytes checks;
//! - a "sealed" copy: magic patched in, used bytes clamped to the buffer, and the checksum
//!   recomputed over the used bytes with its field zeroed. If the low bit of the first input byte
//!   (which the magic overwrites anyway) is set, the expected pool guid, chain guid, lane and
//!   sequence are patched in too, so that the run reaches the record decoder; otherwise the
//!   fuzzer's own identity is kept, which exercises the wrong-position checks.
//!
//! A fourth copy is a sealed block holding one write-in-place record (kind 4) whose 128-byte
//! payload is the fuzzer's bytes, with the record's length and txg taken from the payload's
//! own size and birth fields, so the block-pointer checks of that record kind are reached.
//!
//! Whatever decodes must survive encode → decode unchanged, for the smallest and the default
//! sector size. The same bytes are also read as a 192-byte chain header, raw and with a valid
//! version and lane count patched in, and what decodes must round-trip too.

use cairn_format::blkptr::BLOCK_POINTER_SIZE;
use cairn_format::checksum::embedded;
use cairn_format::intent_log::{
    INTENT_LOG_HEADER_SIZE, INTENT_LOG_HEADER_VERSION, INTENT_LOG_LANES_MAX, INTENT_LOG_MAGIC,
    LOG_BLOCK_HEADER_SIZE, LOG_BLOCK_SIZE_MAX, LOG_RECORD_HEADER_SIZE,
};
use cairn_format::{ChainPosition, IntentLogHeader, LogBlock};

/// The chain position every log block is decoded at (the seed corpus is encoded at it too).
pub const EXPECTED: ChainPosition = ChainPosition {
    pool_guid: 0x0123_4567_89ab_cdef,
    chain_guid: 0xfeed_f00d_dead_beef,
    lane: 1,
    sequence: 7,
};

/// Where the block header keeps its used-bytes count and its embedded checksum.
const USED_BYTES: std::ops::Range<usize> = 40..44;
const CHECKSUM: std::ops::Range<usize> = 64..96;

fn block_round_trip(bytes: &[u8]) {
    let Ok(block) = LogBlock::decode(bytes, &EXPECTED) else {
        return;
    };
    assert_eq!(block.position, EXPECTED);
    for granule in [512u32, 4096] {
        let encoded = block.encode(granule);
        assert_eq!(encoded.len() % granule as usize, 0);
        assert!(encoded.len() <= LOG_BLOCK_SIZE_MAX as usize);
        let again =
            LogBlock::decode(&encoded, &EXPECTED).expect("a re-encoded log block must decode");
        assert_eq!(again, block, "log block changed across encode/decode");
        assert_eq!(
            again.encode(granule),
            encoded,
            "log block encoding is not a fixed point"
        );
    }
}

fn header_round_trip(bytes: &[u8; INTENT_LOG_HEADER_SIZE]) {
    let Ok(header) = IntentLogHeader::decode(bytes) else {
        return;
    };
    assert!(header.lanes.len() <= INTENT_LOG_LANES_MAX);
    let encoded = header.encode();
    let again = IntentLogHeader::decode(&encoded).expect("a re-encoded chain header must decode");
    assert_eq!(again, header, "chain header changed across encode/decode");
    assert_eq!(
        again.encode(),
        encoded,
        "chain header encoding is not a fixed point"
    );
}

fn seal(data: &[u8]) -> Vec<u8> {
    let mut sealed = data.to_vec();
    if sealed.len() < LOG_BLOCK_HEADER_SIZE {
        sealed.resize(LOG_BLOCK_HEADER_SIZE, 0);
    }
    let patch_identity = data.first().is_some_and(|byte| byte & 1 == 1);
    sealed[..8].copy_from_slice(&INTENT_LOG_MAGIC.to_le_bytes());
    if patch_identity {
        sealed[8..16].copy_from_slice(&EXPECTED.pool_guid.to_le_bytes());
        sealed[16..24].copy_from_slice(&EXPECTED.chain_guid.to_le_bytes());
        sealed[24..32].copy_from_slice(&EXPECTED.sequence.to_le_bytes());
        sealed[32..36].copy_from_slice(&EXPECTED.lane.to_le_bytes());
    }
    let claimed = u32::from_le_bytes(
        sealed[USED_BYTES]
            .try_into()
            .expect("slice of the right length"),
    ) as usize;
    let used = claimed.clamp(
        LOG_BLOCK_HEADER_SIZE,
        sealed.len().min(LOG_BLOCK_SIZE_MAX as usize),
    );
    sealed[USED_BYTES].copy_from_slice(&(used as u32).to_le_bytes());
    sealed[CHECKSUM].fill(0);
    let sum = embedded(&sealed[..used]);
    sealed[CHECKSUM].copy_from_slice(&sum);
    sealed
}

/// A block of one write-in-place record carrying `data` (zero-padded) as its block pointer.
fn in_place_block(data: &[u8]) -> Vec<u8> {
    let mut payload = [0u8; BLOCK_POINTER_SIZE];
    let take = data.len().min(BLOCK_POINTER_SIZE);
    payload[..take].copy_from_slice(&data[..take]);
    // Logical size and birth txg of a block pointer (see docs/format.md, "Block pointer").
    let length = u64::from(u32::from_le_bytes(
        payload[48..52]
            .try_into()
            .expect("slice of the right length"),
    ))
    .max(1);
    let txg = u64::from_le_bytes(
        payload[64..72]
            .try_into()
            .expect("slice of the right length"),
    );
    let mut record = vec![0u8; LOG_RECORD_HEADER_SIZE];
    record[0] = 4;
    record[8..16].copy_from_slice(&1u64.to_le_bytes());
    record[16..24].copy_from_slice(&txg.to_le_bytes());
    record[24..32].copy_from_slice(&1u64.to_le_bytes());
    record[40..48].copy_from_slice(&length.to_le_bytes());
    record.extend_from_slice(&payload);
    let mut block = vec![0u8; LOG_BLOCK_HEADER_SIZE];
    block[0] = 1; // patch the identity in `seal`
    block[36..40].copy_from_slice(&1u32.to_le_bytes());
    block.extend_from_slice(&record);
    let used = block.len() as u32;
    block[40..44].copy_from_slice(&used.to_le_bytes());
    block
}

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    block_round_trip(data);

    let mut repaired = data.to_vec();
    if repaired.len() < LOG_BLOCK_HEADER_SIZE {
        repaired.resize(LOG_BLOCK_HEADER_SIZE, 0);
    }
    repaired[..8].copy_from_slice(&INTENT_LOG_MAGIC.to_le_bytes());
    block_round_trip(&repaired);

    block_round_trip(&seal(data));

    block_round_trip(&seal(&in_place_block(data)));

    let mut header = [0u8; INTENT_LOG_HEADER_SIZE];
    let take = data.len().min(INTENT_LOG_HEADER_SIZE);
    header[..take].copy_from_slice(&data[..take]);
    header_round_trip(&header);
    header[..4].copy_from_slice(&INTENT_LOG_HEADER_VERSION.to_le_bytes());
    let lanes = u32::from(header[4]) % (INTENT_LOG_LANES_MAX as u32 + 1);
    header[4..8].copy_from_slice(&lanes.to_le_bytes());
    header_round_trip(&header);
}
