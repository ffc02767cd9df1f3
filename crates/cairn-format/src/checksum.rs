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
///
/// On a CPU with AVX2 the words are summed in `LANES` interleaved streams (word `i` goes to
/// stream `i % LANES`), each a Fletcher-4 of its own, one vector register per sum, and the
/// streams' sums are combined at the end into those of the one stream the definition reads
/// (`combine`): the streams do not wait for each other, so this runs about twice as fast as
/// one chain of dependent additions. The words after the last whole group of `LANES`, and
/// every word elsewhere, go through the plain recurrence.
pub fn fletcher4(data: &[u8]) -> Checksum {
    let (mut sums, rest) = grouped_sums(data);
    sums.add_words(rest);
    sums.checksum()
}

/// Interleaved streams of `fletcher4`.
const LANES: usize = 4;

/// Fletcher-4's running sums (all arithmetic wraps at 2^64).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Sums {
    a: u64,
    b: u64,
    c: u64,
    d: u64,
}

impl Sums {
    fn add(&mut self, word: u32) {
        self.a = self.a.wrapping_add(u64::from(word));
        self.b = self.b.wrapping_add(self.a);
        self.c = self.c.wrapping_add(self.b);
        self.d = self.d.wrapping_add(self.c);
    }

    /// Adds `bytes` as little-endian words, a final partial word zero-padded.
    fn add_words(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(4) {
            let mut word = [0u8; 4];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u32::from_le_bytes(word));
        }
    }

    /// The stored form: `a`, `b`, `c`, `d`, each little-endian.
    fn checksum(self) -> Checksum {
        let mut out = [0u8; 32];
        for (slot, sum) in out
            .chunks_exact_mut(8)
            .zip([self.a, self.b, self.c, self.d])
        {
            slot.copy_from_slice(&sum.to_le_bytes());
        }
        Checksum(out)
    }
}

/// The sums over the longest prefix of `data` the streams take, and the rest.
fn grouped_sums(data: &[u8]) -> (Sums, &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        let grouped_bytes = data.len() / (4 * LANES) * (4 * LANES);
        let (grouped, rest) = data.split_at(grouped_bytes);
        // SAFETY: the CPU has AVX2 (checked just above).
        let lanes = unsafe { lane_sums_avx2(grouped) };
        return (combine(&lanes), rest);
    }
    (Sums::default(), data)
}

/// Each stream's sums over `data` (a whole number of groups of `LANES` words), with AVX2.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn lane_sums_avx2(data: &[u8]) -> [Sums; LANES] {
    use std::arch::x86_64::{
        __m128i, __m256i, _mm_loadu_si128, _mm256_add_epi64, _mm256_cvtepu32_epi64,
        _mm256_setzero_si256, _mm256_storeu_si256,
    };
    const { assert!(LANES == 4, "one 256-bit register holds four u64 streams") };
    let (mut a, mut b, mut c, mut d) = (
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
        _mm256_setzero_si256(),
    );
    for group in data.chunks_exact(16) {
        // SAFETY: `group` is 16 readable bytes; the load has no alignment requirement.
        let words = unsafe { _mm_loadu_si128(group.as_ptr().cast::<__m128i>()) };
        a = _mm256_add_epi64(a, _mm256_cvtepu32_epi64(words));
        b = _mm256_add_epi64(b, a);
        c = _mm256_add_epi64(c, b);
        d = _mm256_add_epi64(d, c);
    }
    let mut out = [[0u64; LANES]; 4];
    for (slot, register) in out.iter_mut().zip([a, b, c, d]) {
        // SAFETY: `slot` is 32 writable bytes; the store has no alignment requirement.
        unsafe { _mm256_storeu_si256(slot.as_mut_ptr().cast::<__m256i>(), register) };
    }
    std::array::from_fn(|lane| Sums {
        a: out[0][lane],
        b: out[1][lane],
        c: out[2][lane],
        d: out[3][lane],
    })
}

/// The sums of the interleaved words from each stream's own.
///
/// Over `n` words the definition gives `a = Σ w_i`, `b = Σ (n-i) w_i`, `c = Σ T2(n-i) w_i`,
/// `d = Σ T3(n-i) w_i` with `T2(y) = y(y+1)/2` and `T3(y) = y(y+1)(y+2)/6`; stream `k`'s own
/// sums weigh its `j`-th of `m` words by `x = m - j` in the same way. Word `i = LANES*j + k`
/// has `n - i = LANES*x - k`, and `T2(LANES*x - k)` and `T3(LANES*x - k)` are polynomials in
/// `x`, which `weights` writes in the basis `1, x, T2(x), T3(x)` that the stream's sums
/// carry: each global sum is then a fixed combination of the streams' sums.
fn combine(lanes: &[Sums; LANES]) -> Sums {
    let mut total = Sums::default();
    for (sums, [b, c, d]) in lanes.iter().zip(WEIGHTS) {
        let dot = |w: [i64; 4]| {
            [sums.a, sums.b, sums.c, sums.d]
                .iter()
                .zip(w)
                .fold(0u64, |acc, (&sum, weight)| {
                    acc.wrapping_add(sum.wrapping_mul(weight as u64))
                })
        };
        total.a = total.a.wrapping_add(sums.a);
        total.b = total.b.wrapping_add(dot(b));
        total.c = total.c.wrapping_add(dot(c));
        total.d = total.d.wrapping_add(dot(d));
    }
    total
}

/// `weights` of every stream, worked out when compiling.
const WEIGHTS: [[[i64; 4]; 3]; LANES] = {
    let mut table = [[[0; 4]; 3]; LANES];
    let mut lane = 0;
    while lane < LANES {
        table[lane] = weights(lane as i64);
        lane += 1;
    }
    table
};

/// For stream `k`, the weights of its `(a, b, c, d)` in the global `b`, `c` and `d`.
///
/// A polynomial `p` of degree ≤ 3 is `α + β x + γ T2(x) + δ T3(x)` with, since `T2` is 0 at
/// 0 and -1 and 1 at -2 and 1, and `T3` is 0 at 0, -1, -2 and 1 at 1: `α = p(0)`,
/// `β = p(0) - p(-1)`, `γ = p(-2) - α + 2β`, `δ = p(1) - α - β - γ`.
const fn weights(k: i64) -> [[i64; 4]; 3] {
    let l = LANES as i64;
    [
        [-k, l, 0, 0],
        basis(t2(-k), t2(-l - k), t2(-2 * l - k), t2(l - k)),
        basis(t3(-k), t3(-l - k), t3(-2 * l - k), t3(l - k)),
    ]
}

const fn basis(at_0: i64, at_minus_1: i64, at_minus_2: i64, at_1: i64) -> [i64; 4] {
    let alpha = at_0;
    let beta = at_0 - at_minus_1;
    let gamma = at_minus_2 - alpha + 2 * beta;
    let delta = at_1 - alpha - beta - gamma;
    [alpha, beta, gamma, delta]
}

const fn t2(y: i64) -> i64 {
    y * (y + 1) / 2
}

const fn t3(y: i64) -> i64 {
    y * (y + 1) * (y + 2) / 6
}

/// Checksum used for self-describing structures (uberblock, label config header).
pub fn embedded(data: &[u8]) -> [u8; 32] {
    *blake3::hash(data).as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one word at a time.
    fn one_stream(data: &[u8]) -> Sums {
        let mut sums = Sums::default();
        sums.add_words(data);
        sums
    }

    fn fletcher4_reference(data: &[u8]) -> Checksum {
        one_stream(data).checksum()
    }

    #[test]
    fn fletcher4_in_streams_equals_the_definition_at_every_length_near_a_group() {
        let data: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in (0..200).chain([4095, 4096, 131_071]) {
            let data: Vec<u8> = data.iter().copied().cycle().take(len).collect();
            assert_eq!(fletcher4(&data), fletcher4_reference(&data), "length {len}");
        }
        // Sums that wrap: all-ones words over a block of 128 KiB.
        let ones = vec![0xffu8; 128 << 10];
        assert_eq!(fletcher4(&ones), fletcher4_reference(&ones));
    }

    /// The streams one word at a time: what the vector registers must hold.
    fn lane_sums_reference(data: &[u8]) -> [Sums; LANES] {
        let mut lanes = [Sums::default(); LANES];
        for (i, word) in data.chunks_exact(4).enumerate() {
            lanes[i % LANES].add(u32::from_le_bytes([word[0], word[1], word[2], word[3]]));
        }
        lanes
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fletcher4_streams_in_vector_registers_are_the_streams() {
        let data: Vec<u8> = (0..(64u32 << 10)).map(|i| (i * 31 + 7) as u8).collect();
        if !std::arch::is_x86_feature_detected!("avx2") {
            // Without AVX2 every word takes the plain recurrence.
            assert_eq!(grouped_sums(&data), (Sums::default(), &data[..]));
            return;
        }
        // SAFETY: the CPU has AVX2 (checked above).
        let lanes = unsafe { lane_sums_avx2(&data) };
        assert_eq!(lanes, lane_sums_reference(&data));
        assert_eq!(combine(&lanes), one_stream(&data));
    }

    #[test]
    fn combined_streams_are_the_one_stream_whatever_the_cpu() {
        for len in [16usize, 32, 4096, 131_072] {
            let data: Vec<u8> = (0..len as u32).map(|i| (i * 13 + 5) as u8).collect();
            assert_eq!(
                combine(&lane_sums_reference(&data)),
                one_stream(&data),
                "length {len}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn fletcher4_in_streams_equals_the_definition(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2048)) {
            proptest::prop_assert_eq!(fletcher4(&data), fletcher4_reference(&data));
        }
    }

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
