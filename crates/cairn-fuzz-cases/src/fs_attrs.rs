//! Inode attribute decoder (`InodeAttrs::decode`, an inode's dnode bonus): arbitrary bytes must
//! decode or fail cleanly. What decodes must survive encode → decode unchanged, and its encoding
//! is a fixed point (the decoder ignores reserved bytes, flags and mode bits above `0o7777`, so
//! only the re-encoded bytes are canonical, not the input).

use cairn_fs::attrs::{ATTRS_VERSION, InodeAttrs};

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    round_trip(data);
    // Most random inputs fail on the version byte; a patched copy reaches the other fields.
    if let Some(first) = data.first().copied() {
        let mut patched = data.to_vec();
        patched[0] = ATTRS_VERSION;
        if let Some(kind) = patched.get_mut(1) {
            *kind = first % 8;
        }
        round_trip(&patched);
    }
}

fn round_trip(bytes: &[u8]) {
    let Ok(attrs) = InodeAttrs::decode(16, bytes) else {
        return;
    };
    let encoded = attrs.encode();
    let again = InodeAttrs::decode(16, &encoded).expect("re-encoded attributes must decode");
    assert_eq!(again, attrs, "attributes changed across encode/decode");
    assert_eq!(
        again.encode(),
        encoded,
        "attribute encoding is not a fixed point"
    );
}
