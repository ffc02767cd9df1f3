//! Object-set root decoder: arbitrary bytes must decode or fail cleanly, and whatever decodes must
//! survive encode → decode unchanged, with the encoding a fixed point.
//!
//! Two inputs per run: the raw bytes, and a copy rotated so that the fuzzer's first bytes land on
//! the object-set type at offset 512 (and the rest wrap round into the meta-dnode), zero padded
//! to `OBJSET_PHYS_SIZE`. Without it libFuzzer spends its time growing short inputs towards the
//! 1024 bytes the decoder needs, and barely reaches the type check.

use cairn_format::dnode::{DNODE_SIZE, OBJSET_BLOCK_SIZE, OBJSET_PHYS_SIZE, ObjsetPhys};

fn round_trip(bytes: &[u8]) {
    let Ok(objset) = ObjsetPhys::decode(bytes) else {
        return;
    };
    let block = objset.encode_block();
    assert_eq!(block.len(), OBJSET_BLOCK_SIZE as usize);
    let again = ObjsetPhys::decode(&block).expect("a re-encoded object set must decode");
    assert_eq!(again, objset, "object set changed across encode/decode");
    assert_eq!(
        again.encode_block(),
        block,
        "object set encoding is not a fixed point"
    );
}

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    round_trip(data);

    let mut rotated = vec![0u8; OBJSET_PHYS_SIZE];
    for (index, &byte) in data.iter().take(OBJSET_PHYS_SIZE).enumerate() {
        rotated[(DNODE_SIZE + index) % OBJSET_PHYS_SIZE] = byte;
    }
    round_trip(&rotated);
}
