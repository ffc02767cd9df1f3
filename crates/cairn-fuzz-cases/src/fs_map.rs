//! Hashed map decoders (`cairn_object::map::raw`, the codecs `HashedMap` uses on every access,
//! for directories, extended attributes and the pool's own records): the header block, a leaf (in a block of its own, or embedded in the header block
//! after `EMBEDDED_LEAF_OFFSET`), and the entry values the filesystem reads from a leaf (a
//! directory entry's object and kind, an extended attribute's indirect value object).
//!
//! The input is tried as a header block (zero padded or cut to `MAP_BLOCK_BYTES`, and with the
//! magic patched in) and as a leaf (as is, and with the leaf magic patched in). Whatever decodes
//! must survive encode → decode unchanged, with the encoding a fixed point; value decoders must
//! only not panic (they refuse what the map may legally hold but the filesystem never writes).

use cairn_object::map::raw;
use cairn_object::map::{EMBEDDED_LEAF_OFFSET, MAP_BLOCK_BYTES, ValueKind};

const MAP_MAGIC: &[u8; 8] = b"CAIRNMAP";
const LEAF_MAGIC: &[u8; 4] = b"LEAF";

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    let mut block = data.to_vec();
    block.resize(MAP_BLOCK_BYTES as usize, 0);
    header(&block);
    leaf(&block[EMBEDDED_LEAF_OFFSET..]);
    block[..8].copy_from_slice(MAP_MAGIC);
    header(&block);

    leaf(data);
    let mut patched = data.to_vec();
    if patched.len() >= LEAF_MAGIC.len() {
        patched[..4].copy_from_slice(LEAF_MAGIC);
        leaf(&patched);
    }
}

fn header(block: &[u8]) {
    let Ok(decoded) = raw::decode_header(block) else {
        return;
    };
    let encoded = raw::encode_header(&decoded).expect("a decoded header must encode");
    let again = raw::decode_header(&encoded).expect("a re-encoded header must decode");
    assert_eq!(again, decoded, "map header changed across encode/decode");
    assert_eq!(
        raw::encode_header(&again).expect("a decoded header must encode"),
        encoded,
        "map header encoding is not a fixed point"
    );
}

fn leaf(bytes: &[u8]) {
    let Ok((depth, entries)) = raw::decode_leaf(bytes) else {
        return;
    };
    let encoded = raw::encode_leaf(depth, &entries);
    assert!(encoded.len() <= bytes.len(), "a leaf grew when re-encoded");
    let again = raw::decode_leaf(&encoded).expect("a re-encoded leaf must decode");
    assert_eq!(
        again,
        (depth, entries.clone()),
        "leaf changed across encode/decode"
    );
    assert_eq!(
        raw::encode_leaf(again.0, &again.1),
        encoded,
        "leaf encoding is not a fixed point"
    );
    for entry in &entries {
        match entry.kind {
            ValueKind::Inline => {
                let _ = cairn_fs::raw::decode_entry_value(&entry.value);
            }
            ValueKind::Indirect => {
                let _ = cairn_fs::raw::indirect_object(16, entry);
            }
        }
    }
}
