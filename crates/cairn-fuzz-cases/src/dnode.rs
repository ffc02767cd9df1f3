//! Dnode decoder: arbitrary bytes must decode or fail cleanly, and whatever decodes must survive
//! encode → decode unchanged, with the encoding a fixed point.

use cairn_format::dnode::{DNODE_SIZE, Dnode};

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    let Ok(dnode) = Dnode::decode(data) else {
        return;
    };
    let mut bytes = [0u8; DNODE_SIZE];
    dnode.encode(&mut bytes);
    let again = Dnode::decode(&bytes).expect("a re-encoded dnode must decode");
    assert_eq!(again, dnode, "dnode changed across encode/decode");
    let mut bytes_again = [0u8; DNODE_SIZE];
    again.encode(&mut bytes_again);
    assert_eq!(bytes_again, bytes, "dnode encoding is not a fixed point");
}
