//! The resume token of a partial receive (`cairn receive -s`): what `cairn get
//! receive_resume_token` prints and `cairn send -t` takes to send the rest of a stream.
//!
//! What it says: which stream (the sent snapshot's guid, the source's for an incremental), where
//! to start again (`ResumePoint`: an object and a byte offset in it; every record of the stream
//! at or after it is sent again) and how many stream bytes the receiver had applied (for
//! people). It is a wire format like the send stream: the receiver keeps it in the partial
//! dataset's record, the user copies it from one host to the other, so it is printable (hex),
//! versioned and checksummed: a token cut or mistyped in a copy is refused by name instead of
//! starting a wrong stream.
//!
//! Invariants: decoding never panics on any text and refuses a wrong length, prefix, version,
//! flag or checksum; a token always names a non-zero snapshot guid.

use thiserror::Error;

/// Version of the token layout this build writes and reads.
pub const RESUME_TOKEN_VERSION: u32 = 1;
/// Size of the token's bytes (before they are written as hex).
pub const RESUME_TOKEN_SIZE: usize = 64;
/// Bytes of the token its checksum covers (the checksum follows them).
const TOKEN_HASHED_BYTES: usize = 48;

/// Where a resumed stream starts: every record of object `object` at or after `offset_bytes`
/// (its OBJECT record always), then every record of the objects after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ResumePoint {
    pub object: u64,
    pub offset_bytes: u64,
}

/// A partial receive's resume token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResumeToken {
    /// The guid of the snapshot the stream carries.
    pub to_guid: u64,
    /// An incremental's source guid; 0 for a full stream.
    pub from_guid: u64,
    /// Where the rest of the stream starts.
    pub point: ResumePoint,
    /// Stream bytes the receiver applied before the cut (all its attempts together).
    pub bytes_received: u64,
}

/// Why a token was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TokenError {
    #[error("not a cairn resume token ({0})")]
    Malformed(String),
    #[error("resume token version {0}: this build reads version {RESUME_TOKEN_VERSION}")]
    Version(u32),
    #[error("resume token damaged: its checksum does not match (copied in part?)")]
    Checksum,
}

impl ResumeToken {
    /// The token's bytes: see `docs/format.md` ("Resume token").
    pub fn to_bytes(&self) -> [u8; RESUME_TOKEN_SIZE] {
        let mut out = [0u8; RESUME_TOKEN_SIZE];
        out[0..4].copy_from_slice(&RESUME_TOKEN_VERSION.to_le_bytes());
        out[8..16].copy_from_slice(&self.to_guid.to_le_bytes());
        out[16..24].copy_from_slice(&self.from_guid.to_le_bytes());
        out[24..32].copy_from_slice(&self.point.object.to_le_bytes());
        out[32..40].copy_from_slice(&self.point.offset_bytes.to_le_bytes());
        out[40..48].copy_from_slice(&self.bytes_received.to_le_bytes());
        let checksum = blake3::hash(&out[..TOKEN_HASHED_BYTES]);
        out[TOKEN_HASHED_BYTES..].copy_from_slice(&checksum.as_bytes()[..16]);
        out
    }

    /// The token as text: its bytes in lowercase hex.
    pub fn encode(&self) -> String {
        self.to_bytes()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect()
    }

    /// The token of `text` (surrounding white space ignored), checked.
    pub fn decode(text: &str) -> Result<ResumeToken, TokenError> {
        let text = text.trim();
        if text.len() != RESUME_TOKEN_SIZE * 2 {
            return Err(TokenError::Malformed(format!(
                "{} characters, a token has {}",
                text.len(),
                RESUME_TOKEN_SIZE * 2
            )));
        }
        let mut bytes = [0u8; RESUME_TOKEN_SIZE];
        for (index, byte) in bytes.iter_mut().enumerate() {
            let pair = text.get(index * 2..index * 2 + 2).unwrap_or("");
            *byte = u8::from_str_radix(pair, 16)
                .map_err(|_| TokenError::Malformed(format!("'{pair}' is not hex")))?;
        }
        Self::from_bytes(&bytes)
    }

    /// The token of `bytes`, checked.
    pub fn from_bytes(bytes: &[u8; RESUME_TOKEN_SIZE]) -> Result<ResumeToken, TokenError> {
        let word = |at: usize| {
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        let version = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let checksum = blake3::hash(&bytes[..TOKEN_HASHED_BYTES]);
        if checksum.as_bytes()[..16] != bytes[TOKEN_HASHED_BYTES..] {
            return Err(TokenError::Checksum);
        }
        if version != RESUME_TOKEN_VERSION {
            return Err(TokenError::Version(version));
        }
        if bytes[4..8] != [0; 4] {
            return Err(TokenError::Malformed("unknown flags".into()));
        }
        let token = ResumeToken {
            to_guid: word(8),
            from_guid: word(16),
            point: ResumePoint {
                object: word(24),
                offset_bytes: word(32),
            },
            bytes_received: word(40),
        };
        if token.to_guid == 0 {
            return Err(TokenError::Malformed("no snapshot guid".into()));
        }
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> ResumeToken {
        ResumeToken {
            to_guid: 0x1234_5678_9abc_def0,
            from_guid: 7,
            point: ResumePoint {
                object: 42,
                offset_bytes: 131072,
            },
            bytes_received: 1 << 30,
        }
    }

    #[test]
    fn a_token_round_trips_as_hex() {
        let text = token().encode();
        assert_eq!(text.len(), RESUME_TOKEN_SIZE * 2);
        assert!(text.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(ResumeToken::decode(&format!(" {text}\n")), Ok(token()));
    }

    #[test]
    fn every_changed_character_or_cut_is_refused() {
        let text = token().encode();
        for index in 0..text.len() {
            let mut changed = text.clone().into_bytes();
            changed[index] = if changed[index] == b'0' { b'1' } else { b'0' };
            let changed = String::from_utf8(changed).unwrap();
            assert!(ResumeToken::decode(&changed).is_err(), "{index}");
        }
        assert!(matches!(
            ResumeToken::decode(&text[..100]),
            Err(TokenError::Malformed(_))
        ));
        assert!(matches!(
            ResumeToken::decode("garbage"),
            Err(TokenError::Malformed(_))
        ));
        let non_hex = format!("zz{}", &text[2..]);
        assert!(matches!(
            ResumeToken::decode(&non_hex),
            Err(TokenError::Malformed(_))
        ));
    }

    #[test]
    fn points_order_by_object_then_offset() {
        let at = |object, offset_bytes| ResumePoint {
            object,
            offset_bytes,
        };
        assert!(at(1, 1 << 40) < at(2, 0));
        assert!(at(2, 0) < at(2, 512));
    }
}
