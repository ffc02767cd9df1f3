//! The portable RAID-Z kernel: GF(2^8) arithmetic on eight bytes at once in a `u64` (SWAR).
//! Multiplying by 2 is a per-byte shift with the polynomial's low byte 0x1d folded into the
//! bytes whose top bit fell out; multiplying by any other constant looks every byte up in
//! that constant's row of `gf::MUL_TABLES` (eight lookups make a word; a multiply by the
//! constant's bits, Horner-style on whole words, measured slower). Used where AVX2 is
//! absent, and held to the scalar reference by the tests like the AVX2 kernel.
//!
//! Contract (from `kernel::horner`): the parity rows given are one length, and each data
//! column is either at most `from` bytes long (zero here) or covers `from` plus that length.

use super::gf;

/// Bytes one step handles: four words, which the compiler may keep in two SSE2 registers.
const BLOCK_BYTES: usize = 32;
const WORDS: usize = BLOCK_BYTES / 8;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// `2 * x` for each of the eight bytes of `x`.
fn mul2(x: u64) -> u64 {
    let high = x & HIGH_BITS;
    // 0xff in each byte whose top bit is set: 0x100 - 0x01 per such byte, no borrow between
    // bytes (shifts and a subtraction, which SSE2 has for 64-bit lanes; a multiply it has not).
    let overflow = (high << 1).wrapping_sub(high >> 7);
    ((x & !HIGH_BITS) << 1) ^ (overflow & 0x1d1d_1d1d_1d1d_1d1d)
}

fn load(bytes: &[u8]) -> [u64; WORDS] {
    let (words, _) = bytes.as_chunks::<8>();
    std::array::from_fn(|index| u64::from_ne_bytes(words[index]))
}

fn store(bytes: &mut [u8], value: [u64; WORDS]) {
    let (words, _) = bytes.as_chunks_mut::<8>();
    for (word, value) in words.iter_mut().zip(value) {
        *word = value.to_ne_bytes();
    }
}

fn xor(a: &mut [u64; WORDS], b: &[u64; WORDS]) {
    a.iter_mut().zip(b).for_each(|(a, b)| *a ^= b);
}

/// Parity rows `rows` (bit 0 P, bit 1 Q, bit 2 R) of `data` from byte `from` into `out`.
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

fn horner_rows<const ROWS: u8, const ACCUMULATE: bool>(
    data: &[&[u8]],
    from: usize,
    out: &mut [&mut [u8]; 3],
) {
    let length = out.iter().map(|row| row.len()).max().unwrap_or(0);
    let blocks = length / BLOCK_BYTES;
    for block in 0..blocks {
        let at = block * BLOCK_BYTES;
        // Horner goes on from what `out` holds (an earlier group of columns) or from zero.
        let start = |row: usize| {
            if ACCUMULATE && ROWS & (1 << row) != 0 {
                load(&out[row][at..at + BLOCK_BYTES])
            } else {
                [0u64; WORDS]
            }
        };
        let (mut p, mut q, mut r) = (start(0), start(1), start(2));
        for column in data {
            if ROWS & 2 != 0 {
                q = q.map(mul2);
            }
            if ROWS & 4 != 0 {
                r = r.map(|word| mul2(mul2(word)));
            }
            if column.len() > from {
                let d = load(&column[from + at..from + at + BLOCK_BYTES]);
                if ROWS & 1 != 0 {
                    xor(&mut p, &d);
                }
                if ROWS & 2 != 0 {
                    xor(&mut q, &d);
                }
                if ROWS & 4 != 0 {
                    xor(&mut r, &d);
                }
            }
        }
        for (row, value) in [p, q, r].into_iter().enumerate() {
            if ROWS & (1 << row) != 0 {
                store(&mut out[row][at..at + BLOCK_BYTES], value);
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
pub(super) fn mul_xor(dst: &mut [u8], src: &[u8], c: u8) {
    match c {
        0 => {}
        1 => {
            let (dst_words, dst_rest) = dst.as_chunks_mut::<8>();
            let (src_words, src_rest) = src.as_chunks::<8>();
            for (d, s) in dst_words.iter_mut().zip(src_words) {
                *d = (u64::from_ne_bytes(*d) ^ u64::from_ne_bytes(*s)).to_ne_bytes();
            }
            dst_rest.iter_mut().zip(src_rest).for_each(|(d, s)| *d ^= s);
        }
        _ => {
            // Eight lookups make one word: one load and one store of `dst` per eight bytes.
            let table = &gf::MUL_TABLES[usize::from(c)];
            let (dst_words, dst_rest) = dst.as_chunks_mut::<8>();
            let (src_words, src_rest) = src.as_chunks::<8>();
            for (d, s) in dst_words.iter_mut().zip(src_words) {
                let product = u64::from_ne_bytes(s.map(|byte| table[usize::from(byte)]));
                *d = (u64::from_ne_bytes(*d) ^ product).to_ne_bytes();
            }
            dst_rest
                .iter_mut()
                .zip(src_rest)
                .for_each(|(d, s)| *d ^= table[usize::from(*s)]);
        }
    }
}
