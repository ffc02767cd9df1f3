//! Uberblock decoder.
//!
//! Two inputs per run: the raw bytes (any bytes must decode or fail cleanly), and a "repaired" copy
//! with the magic and the embedded blake3 checksum patched in. libFuzzer cannot forge a blake3
//! hash, so without the repaired copy it would never get past the checksum to the field checks and
//! the two embedded block pointers. Whatever decodes must survive encode → decode unchanged.

use cairn_format::checksum::embedded;
use cairn_format::label::UBERBLOCK_SLOT_SIZE;
use cairn_format::uberblock::{UBERBLOCK_MAGIC, UBERBLOCK_SIZE, Uberblock};

/// The embedded checksum occupies the last 32 bytes and covers everything before it.
const CHECKSUMMED: usize = UBERBLOCK_SIZE - 32;

fn round_trip(bytes: &[u8]) {
    let Ok(ub) = Uberblock::decode(bytes) else {
        return;
    };
    let slot = ub.encode_slot();
    assert_eq!(slot.len() as u64, UBERBLOCK_SLOT_SIZE);
    let again = Uberblock::decode(&slot).expect("a re-encoded uberblock must decode");
    assert_eq!(again, ub, "uberblock changed across encode/decode");
    assert_eq!(
        again.encode_slot(),
        slot,
        "uberblock encoding is not a fixed point"
    );
}

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    round_trip(data);

    let mut repaired = data.to_vec();
    if repaired.len() < UBERBLOCK_SIZE {
        repaired.resize(UBERBLOCK_SIZE, 0);
    }
    repaired[..8].copy_from_slice(&UBERBLOCK_MAGIC.to_le_bytes());
    let sum = embedded(&repaired[..CHECKSUMMED]);
    repaired[CHECKSUMMED..UBERBLOCK_SIZE].copy_from_slice(&sum);
    round_trip(&repaired);
}
