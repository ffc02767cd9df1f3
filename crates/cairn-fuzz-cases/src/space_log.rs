//! Space-log block decoder.
//!
//! Two inputs per run: the raw bytes, and a copy with the magic patched in (and padded to a full
//! header) so the fuzzer spends its time on kinds, counts, entries and the `prev` pointer rather
//! than on guessing a 64-bit magic. Whatever decodes must survive encode → decode unchanged, for
//! the smallest and the default sector size.

use cairn_format::spacelog::{SPACE_LOG_HEADER_SIZE, SPACE_LOG_MAGIC, SpaceLogBlock};

fn round_trip(bytes: &[u8]) {
    let Ok(block) = SpaceLogBlock::decode(bytes) else {
        return;
    };
    for granule in [512u32, 4096] {
        let encoded = block.encode(granule);
        assert_eq!(encoded.len() % granule as usize, 0);
        let again =
            SpaceLogBlock::decode(&encoded).expect("a re-encoded space-log block must decode");
        assert_eq!(again, block, "space-log block changed across encode/decode");
        assert_eq!(
            again.encode(granule),
            encoded,
            "space-log encoding is not a fixed point"
        );
    }
}

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    round_trip(data);

    let mut repaired = data.to_vec();
    if repaired.len() < SPACE_LOG_HEADER_SIZE {
        repaired.resize(SPACE_LOG_HEADER_SIZE, 0);
    }
    repaired[..8].copy_from_slice(&SPACE_LOG_MAGIC.to_le_bytes());
    round_trip(&repaired);
}
