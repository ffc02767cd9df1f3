//! Block pointer decoder: arbitrary bytes must decode or fail cleanly, and whatever decodes must
//! survive encode → decode unchanged, with the encoding a fixed point.

use cairn_format::blkptr::{BLOCK_POINTER_SIZE, BlockPointer};

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    let Ok(bp) = BlockPointer::decode(data) else {
        return;
    };
    let bytes = bp.to_bytes();
    assert_eq!(bytes.len(), BLOCK_POINTER_SIZE);
    let again = BlockPointer::decode(&bytes).expect("a re-encoded block pointer must decode");
    assert_eq!(again, bp, "block pointer changed across encode/decode");
    assert_eq!(
        again.to_bytes(),
        bytes,
        "block pointer encoding is not a fixed point"
    );
}
