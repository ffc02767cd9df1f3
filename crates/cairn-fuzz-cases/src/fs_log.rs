//! Filesystem log record decoder (`FsOp::decode`, the payload of an intent-log record of kind
//! `Fs`): arbitrary bytes must decode or fail cleanly. What decodes must survive encode →
//! decode unchanged and its encoding must be a fixed point. The input itself need not come back:
//! tag 9 with no value object re-encodes as tag 6, and the decoder ignores the value bytes of
//! an absent option and punch-hole's keep-size flag.

use cairn_fs::log::FsOp;

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    let Ok(op) = FsOp::decode(data) else {
        return;
    };
    let encoded = op.encode();
    let again = FsOp::decode(&encoded).expect("a re-encoded change must decode");
    assert_eq!(again, op, "change changed across encode/decode");
    assert_eq!(
        again.encode(),
        encoded,
        "change encoding is not a fixed point"
    );
    let _ = op.object();
}
