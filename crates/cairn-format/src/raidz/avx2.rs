//! The AVX2 RAID-Z kernel (x86_64): 64 bytes of each parity row per step, kept in registers
//! while every data column is folded in (one pass over the data for P, Q and R together).
//! Multiplying by 2 is a byte add (the shift) and the polynomial's low byte 0x1d where the
//! top bit was set (a signed compare against zero makes that mask); multiplying by any other
//! constant looks the two nibbles of each byte up in 16-entry product tables with a byte
//! shuffle (`vpshufb`). Tails shorter than a step go to the scalar code of `gf.rs`.
//!
//! Every function here needs AVX2: `kernel.rs` calls them only through a kernel made after
//! the CPU was seen to have it. Contract of `horner` as in `swar.rs`.

use std::arch::x86_64::{
    __m128i, __m256i, _mm_loadu_si128, _mm256_add_epi8, _mm256_and_si256,
    _mm256_broadcastsi128_si256, _mm256_cmpgt_epi8, _mm256_loadu_si256, _mm256_set1_epi8,
    _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi16, _mm256_storeu_si256,
    _mm256_xor_si256,
};

use super::gf;

/// Bytes of one row one step computes: two registers.
const BLOCK_BYTES: usize = 64;
const REGISTER_BYTES: usize = 32;

/// `2 * x` for each of the 32 bytes of `x`.
#[inline]
#[target_feature(enable = "avx2")]
fn mul2(x: __m256i) -> __m256i {
    // 0xff in the bytes whose top bit is set (they are negative as i8).
    let overflow = _mm256_cmpgt_epi8(_mm256_setzero_si256(), x);
    let folded = _mm256_and_si256(overflow, _mm256_set1_epi8(0x1d));
    _mm256_xor_si256(_mm256_add_epi8(x, x), folded)
}

/// Two registers from the first 64 bytes of `bytes`.
#[inline]
#[target_feature(enable = "avx2")]
fn load2(bytes: &[u8]) -> [__m256i; 2] {
    let bytes = &bytes[..BLOCK_BYTES];
    // SAFETY: `bytes` has 64 readable bytes (sliced just above), two unaligned 32-byte loads.
    unsafe {
        [
            _mm256_loadu_si256(bytes.as_ptr().cast::<__m256i>()),
            _mm256_loadu_si256(bytes.as_ptr().add(REGISTER_BYTES).cast::<__m256i>()),
        ]
    }
}

/// Two registers into the first 64 bytes of `bytes`.
#[inline]
#[target_feature(enable = "avx2")]
fn store2(bytes: &mut [u8], value: [__m256i; 2]) {
    let bytes = &mut bytes[..BLOCK_BYTES];
    // SAFETY: `bytes` has 64 writable bytes (sliced just above), two unaligned 32-byte stores.
    unsafe {
        _mm256_storeu_si256(bytes.as_mut_ptr().cast::<__m256i>(), value[0]);
        _mm256_storeu_si256(
            bytes.as_mut_ptr().add(REGISTER_BYTES).cast::<__m256i>(),
            value[1],
        );
    }
}

#[inline]
#[target_feature(enable = "avx2")]
fn xor2(a: [__m256i; 2], b: [__m256i; 2]) -> [__m256i; 2] {
    [_mm256_xor_si256(a[0], b[0]), _mm256_xor_si256(a[1], b[1])]
}

/// Parity rows `rows` (bit 0 P, bit 1 Q, bit 2 R) of `data` from byte `from` into `out`.
#[target_feature(enable = "avx2")]
pub(super) fn horner(
    rows: u8,
    data: &[&[u8]],
    from: usize,
    out: &mut [&mut [u8]; 3],
    accumulate: bool,
) {
    if accumulate {
        horner_from::<true>(rows, data, from, out);
    } else {
        horner_from::<false>(rows, data, from, out);
    }
}

/// `horner`, going on from `out` (`ACCUMULATE`) or from zero.
#[target_feature(enable = "avx2")]
fn horner_from<const ACCUMULATE: bool>(
    rows: u8,
    data: &[&[u8]],
    from: usize,
    out: &mut [&mut [u8]; 3],
) {
    match rows {
        1 => horner_rows::<1, ACCUMULATE>(data, from, out),
        2 => horner_rows::<2, ACCUMULATE>(data, from, out),
        3 => horner_rows::<3, ACCUMULATE>(data, from, out),
        4 => horner_rows::<4, ACCUMULATE>(data, from, out),
        5 => horner_rows::<5, ACCUMULATE>(data, from, out),
        6 => horner_rows::<6, ACCUMULATE>(data, from, out),
        _ => horner_rows::<7, ACCUMULATE>(data, from, out),
    }
}

#[target_feature(enable = "avx2")]
fn horner_rows<const ROWS: u8, const ACCUMULATE: bool>(
    data: &[&[u8]],
    from: usize,
    out: &mut [&mut [u8]; 3],
) {
    let length = out.iter().map(|row| row.len()).max().unwrap_or(0);
    let blocks = length / BLOCK_BYTES;
    let zero = [_mm256_setzero_si256(); 2];
    for block in 0..blocks {
        let at = block * BLOCK_BYTES;
        // Horner goes on from what `out` holds (an earlier group of columns) or from zero.
        let start = |row: usize| {
            if ACCUMULATE && ROWS & (1 << row) != 0 {
                load2(&out[row][at..at + BLOCK_BYTES])
            } else {
                zero
            }
        };
        let (mut p, mut q, mut r) = (start(0), start(1), start(2));
        for column in data {
            if ROWS & 2 != 0 {
                q = [mul2(q[0]), mul2(q[1])];
            }
            if ROWS & 4 != 0 {
                r = [mul2(mul2(r[0])), mul2(mul2(r[1]))];
            }
            if column.len() > from {
                let d = load2(&column[from + at..]);
                if ROWS & 1 != 0 {
                    p = xor2(p, d);
                }
                if ROWS & 2 != 0 {
                    q = xor2(q, d);
                }
                if ROWS & 4 != 0 {
                    r = xor2(r, d);
                }
            }
        }
        for (row, value) in [p, q, r].into_iter().enumerate() {
            if ROWS & (1 << row) != 0 {
                store2(&mut out[row][at..], value);
            }
        }
    }
    let done = blocks * BLOCK_BYTES;
    if done < length {
        let mut rest: [&mut [u8]; 3] = Default::default();
        for (slot, row) in rest.iter_mut().zip(out.iter_mut()) {
            if !row.is_empty() {
                *slot = &mut row[done..];
            }
        }
        gf::horner_bytes(ROWS, data, from + done, &mut rest, ACCUMULATE);
    }
}

/// `dst ^= c * src`.
#[target_feature(enable = "avx2")]
pub(super) fn mul_xor(dst: &mut [u8], src: &[u8], c: u8) {
    if c == 0 {
        return;
    }
    let (low, high) = gf::nibble_tables(c);
    // SAFETY: `low` and `high` are 16 readable bytes each; unaligned 16-byte loads.
    let (low, high) = unsafe {
        (
            _mm_loadu_si128(low.as_ptr().cast::<__m128i>()),
            _mm_loadu_si128(high.as_ptr().cast::<__m128i>()),
        )
    };
    // The shuffle looks up within each 128-bit half, so both halves hold the table.
    let (low, high) = (
        _mm256_broadcastsi128_si256(low),
        _mm256_broadcastsi128_si256(high),
    );
    let nibble = _mm256_set1_epi8(0x0f);
    let product = |x: __m256i| {
        let low_nibbles = _mm256_and_si256(x, nibble);
        let high_nibbles = _mm256_and_si256(_mm256_srli_epi16::<4>(x), nibble);
        _mm256_xor_si256(
            _mm256_shuffle_epi8(low, low_nibbles),
            _mm256_shuffle_epi8(high, high_nibbles),
        )
    };
    let steps = dst.len() / BLOCK_BYTES;
    for step in 0..steps {
        let at = step * BLOCK_BYTES;
        let s = load2(&src[at..]);
        let d = load2(&dst[at..]);
        let s = if c == 1 {
            s
        } else {
            [product(s[0]), product(s[1])]
        };
        store2(&mut dst[at..], xor2(d, s));
    }
    let done = steps * BLOCK_BYTES;
    gf::mul_xor(&mut dst[done..], &src[done..], c);
}
