//! Label config decoder (64-byte header + postcard `LabelConfig`).
//!
//! Two inputs per run: the raw bytes (any bytes must decode or fail cleanly), and a "repaired" copy
//! whose header gets the right magic, a version this build reads (`FORMAT_VERSION_MIN` to
//! `FORMAT_VERSION`), a payload length
//! that fits the buffer (the fuzzer's value modulo the room) and the blake3 of that payload.
//! libFuzzer cannot forge a blake3 hash, so only the repaired copy exercises the postcard
//! payload decoder. Whatever decodes must survive encode → decode unchanged, and validating its
//! vdev tree (as import does) must not panic.

use cairn_format::checksum::embedded;
use cairn_format::label::{
    LABEL_CONFIG_HEADER_SIZE, LABEL_CONFIG_MAGIC, LABEL_CONFIG_SIZE, LabelConfig,
};
use cairn_format::{FORMAT_VERSION, FORMAT_VERSION_MIN};

// Header layout: magic u64 @0, version u64 @8, payload length u64 @16, reserved @24, blake3 @32.
fn read_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(
        bytes[at..at + 8]
            .try_into()
            .expect("slice of the right length"),
    )
}

fn round_trip(bytes: &[u8]) {
    // What import names a pool of a version it cannot read by: any bytes, never a panic.
    let _ = LabelConfig::identify(bytes);
    let Ok(config) = LabelConfig::decode(bytes) else {
        return;
    };
    // Import validates the tree of whatever decodes: that must not panic either.
    let _ = config.tree.validate();
    let encoded = config
        .encode()
        .expect("a decoded label config must encode again");
    assert_eq!(encoded.len() as u64, LABEL_CONFIG_SIZE);
    let again = LabelConfig::decode(&encoded).expect("a re-encoded label config must decode");
    assert_eq!(again, config, "label config changed across encode/decode");
    assert_eq!(
        again
            .encode()
            .expect("a decoded label config must encode again"),
        encoded,
        "label config encoding is not a fixed point"
    );
}

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    round_trip(data);

    let mut repaired = data.to_vec();
    if repaired.len() < LABEL_CONFIG_HEADER_SIZE {
        repaired.resize(LABEL_CONFIG_HEADER_SIZE, 0);
    }
    let room = (repaired.len() - LABEL_CONFIG_HEADER_SIZE) as u64;
    let version = read_u64(&repaired, 8).clamp(FORMAT_VERSION_MIN, FORMAT_VERSION);
    let payload_len = read_u64(&repaired, 16) % (room + 1);
    let payload_end = LABEL_CONFIG_HEADER_SIZE + payload_len as usize;
    let sum = embedded(&repaired[LABEL_CONFIG_HEADER_SIZE..payload_end]);
    repaired[..8].copy_from_slice(&LABEL_CONFIG_MAGIC.to_le_bytes());
    repaired[8..16].copy_from_slice(&version.to_le_bytes());
    repaired[16..24].copy_from_slice(&payload_len.to_le_bytes());
    repaired[32..64].copy_from_slice(&sum);
    round_trip(&repaired);
}
