//! Block checksums. Every block pointer stores a 256-bit checksum of the bytes it points to, and
//! the algorithm that made it, so the tree of block pointers is a Merkle tree up to the uberblock.
//!
//! - `Fletcher4` (default): four 64-bit running sums over little-endian 32-bit words. Cheap
//!   (gigabytes per second per core) and strong enough to catch media errors, not adversaries.
//! - `Blake3`, `Sha256`: cryptographic, selectable per dataset with the `checksum` property; the
//!   basis for dedup later, where a checksum must identify content.
//!
//! The numeric values are on-disk; 0 is reserved for "inherit" in dnodes and never valid in a
//! block pointer.

use crate::FormatError;
use sha2::Digest;

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ChecksumAlgorithm {
    #[default]
    Fletcher4 = 1,
    Blake3 = 2,
    Sha256 = 3,
}

impl ChecksumAlgorithm {
    pub const ALL: [ChecksumAlgorithm; 3] = [Self::Fletcher4, Self::Blake3, Self::Sha256];

    pub fn from_u8(value: u8) -> Result<Self, FormatError> {
        match value {
            1 => Ok(Self::Fletcher4),
            2 => Ok(Self::Blake3),
            3 => Ok(Self::Sha256),
            other => Err(FormatError::invalid(
                "checksum",
                "algorithm",
                u64::from(other),
            )),
        }
    }

    /// The property value users type (`cairn set checksum=blake3`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Fletcher4 => "fletcher4",
            Self::Blake3 => "blake3",
            Self::Sha256 => "sha256",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|alg| alg.name() == name)
    }

    pub fn compute(self, data: &[u8]) -> Checksum {
        match self {
            Self::Fletcher4 => fletcher4(data),
            Self::Blake3 => Checksum(*blake3::hash(data).as_bytes()),
            Self::Sha256 => Checksum(sha2::Sha256::digest(data).into()),
        }
    }
}

/// A 256-bit checksum as stored in a block pointer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Checksum(pub [u8; 32]);

impl std::fmt::Debug for Checksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        f.write_str("…")
    }
}

/// Fletcher-4 over little-endian u32 words; a trailing partial word is zero-padded.
/// The four u64 sums are stored little-endian, a then b, c, d.
pub fn fletcher4(data: &[u8]) -> Checksum {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut chunks = data.chunks_exact(4);
    for word in &mut chunks {
        let value = u64::from(u32::from_le_bytes([word[0], word[1], word[2], word[3]]));
        a = a.wrapping_add(value);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0u8; 4];
        word[..tail.len()].copy_from_slice(tail);
        a = a.wrapping_add(u64::from(u32::from_le_bytes(word)));
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let mut out = [0u8; 32];
    out[0..8].copy_from_slice(&a.to_le_bytes());
    out[8..16].copy_from_slice(&b.to_le_bytes());
    out[16..24].copy_from_slice(&c.to_le_bytes());
    out[24..32].copy_from_slice(&d.to_le_bytes());
    Checksum(out)
}

/// Checksum used for self-describing structures (uberblock, label config header).
pub fn embedded(data: &[u8]) -> [u8; 32] {
    *blake3::hash(data).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fletcher4_of_known_words_matches_hand_computation() {
        // words 1, 2: a = 1, 3; b = 1, 4; c = 1, 5; d = 1, 6
        let data = [1u8, 0, 0, 0, 2, 0, 0, 0];
        let sum = fletcher4(&data);
        let word = |i: usize| u64::from_le_bytes(sum.0[i * 8..i * 8 + 8].try_into().unwrap());
        assert_eq!((word(0), word(1), word(2), word(3)), (3, 4, 5, 6));
    }

    #[test]
    fn every_algorithm_detects_a_flipped_bit() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        for alg in ChecksumAlgorithm::ALL {
            let good = alg.compute(&data);
            let mut bad = data.clone();
            bad[1234] ^= 0x10;
            assert_ne!(good, alg.compute(&bad), "{alg:?}");
            assert_eq!(ChecksumAlgorithm::from_u8(alg as u8).unwrap(), alg);
            assert_eq!(ChecksumAlgorithm::from_name(alg.name()), Some(alg));
        }
    }

    #[test]
    fn zero_is_not_a_valid_algorithm() {
        assert!(ChecksumAlgorithm::from_u8(0).is_err());
    }
}
