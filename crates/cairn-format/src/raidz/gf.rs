//! GF(2^8) arithmetic for RAID-Z parity (polynomial x^8 + x^4 + x^3 + x^2 + 1, 0x11d, whose
//! generator is 2): the field's tables, the product tables the kernels multiply by a constant
//! with, the inverse of a rebuild's matrix, and the scalar parity generation (P, Q, R by
//! Horner's rule) and rebuild of missing data columns by syndromes. The scalar `generate` and
//! `rebuild_data` are the reference the tests hold every kernel (`kernel.rs`) to, byte for
//! byte; the pool's paths use the kernels.

/// Logarithms and powers of 2, built at compile time.
struct Tables {
    exp: [u8; 510],
    log: [u8; 256],
}

const TABLES: Tables = build_tables();

const fn build_tables() -> Tables {
    let mut exp = [0u8; 510];
    let mut log = [0u8; 256];
    let mut value: u16 = 1;
    let mut power = 0;
    while power < 255 {
        exp[power] = value as u8;
        exp[power + 255] = value as u8;
        log[value as usize] = power as u8;
        value <<= 1;
        if value & 0x100 != 0 {
            value ^= 0x11d;
        }
        power += 1;
    }
    Tables { exp, log }
}

/// `a * b` in GF(2^8).
pub fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    TABLES.exp[TABLES.log[a as usize] as usize + TABLES.log[b as usize] as usize]
}

/// `2^power` in GF(2^8).
pub fn gf_pow2(power: u32) -> u8 {
    TABLES.exp[(power % 255) as usize]
}

/// `MUL_TABLES[c][x]` = `c * x`: the portable kernel multiplies by a constant with one row.
pub(super) static MUL_TABLES: [[u8; 256]; 256] = build_mul_tables();

const fn build_mul_tables() -> [[u8; 256]; 256] {
    let mut tables = [[0u8; 256]; 256];
    let mut c = 1;
    while c < 256 {
        let mut x = 1;
        while x < 256 {
            let log = TABLES.log[c] as usize + TABLES.log[x] as usize;
            tables[c][x] = TABLES.exp[log];
            x += 1;
        }
        c += 1;
    }
    tables
}

/// `2 * x`: a shift with the polynomial folded in when the top bit falls out.
pub(super) fn mul2(x: u8) -> u8 {
    (x << 1) ^ if x & 0x80 != 0 { 0x1d } else { 0 }
}

/// Parity rows `rows` (bit 0 P, bit 1 Q, bit 2 R) of `data` from byte `from` on, byte by byte,
/// into the selected `out` rows (one length; the others unused). A column is either at most
/// `from` bytes long (zero here) or long enough for all of `out`: the kernels' tails. With
/// `accumulate`, Horner goes on from what `out` holds (an earlier group of columns).
pub(super) fn horner_bytes(
    rows: u8,
    data: &[&[u8]],
    from: usize,
    out: &mut [&mut [u8]; 3],
    accumulate: bool,
) {
    let length = out.iter().map(|row| row.len()).max().unwrap_or(0);
    for at in 0..length {
        let start = |row: usize| {
            if accumulate && rows & (1 << row) != 0 {
                out[row][at]
            } else {
                0
            }
        };
        let (mut p, mut q, mut r) = (start(0), start(1), start(2));
        for column in data {
            q = mul2(q);
            r = mul2(mul2(r));
            if column.len() > from {
                let byte = column[from + at];
                p ^= byte;
                q ^= byte;
                r ^= byte;
            }
        }
        for (row, value) in [p, q, r].into_iter().enumerate() {
            if rows & (1 << row) != 0 {
                out[row][at] = value;
            }
        }
    }
}

/// `c * x` for the 16 values of a low nibble `x` and for the 16 of a high nibble (`x << 4`):
/// a product is `low[x & 15] ^ high[x >> 4]`, which a byte shuffle looks up 32 bytes at once.
pub(super) fn nibble_tables(c: u8) -> ([u8; 16], [u8; 16]) {
    (
        std::array::from_fn(|x| MUL_TABLES[usize::from(c)][x]),
        std::array::from_fn(|x| MUL_TABLES[usize::from(c)][x << 4]),
    )
}

/// The inverse of a non-zero `a`.
fn gf_inverse(a: u8) -> u8 {
    debug_assert!(a != 0, "zero has no inverse");
    TABLES.exp[255 - TABLES.log[a as usize] as usize]
}

/// `dst ^= c * src`, byte by byte (the kernels' tails).
pub(super) fn mul_xor(dst: &mut [u8], src: &[u8], c: u8) {
    match c {
        0 => {}
        1 => dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= s),
        _ => dst
            .iter_mut()
            .zip(src)
            .for_each(|(d, s)| *d ^= gf_mul(*s, c)),
    }
}

/// Parity rows `parity.len()` (1 to 3: P, Q, R) of `data` columns, all of one length.
#[cfg(test)]
pub(super) fn generate(data: &[&[u8]], parity: &mut [&mut [u8]]) {
    for (row, out) in parity.iter_mut().enumerate() {
        // Horner: out = out * g + d for each column in order, g = 1, 2, 4.
        let generator = gf_pow2(row as u32);
        out.fill(0);
        for column in data {
            if generator != 1 {
                out.iter_mut()
                    .for_each(|byte| *byte = gf_mul(*byte, generator));
            }
            out.iter_mut().zip(column.iter()).for_each(|(o, d)| *o ^= d);
        }
    }
}

/// Rebuilds data columns `missing` (indexes into `data`) from the surviving parity rows
/// `rows` (0 P, 1 Q, 2 R; as many as `missing`), whose buffers are `parity`.
#[cfg(test)]
pub(super) fn rebuild_data(
    data: &mut [Vec<u8>],
    missing: &[usize],
    rows: &[usize],
    parity: &[&[u8]],
) {
    assert!(missing.len() == rows.len() && rows.len() == parity.len() && !missing.is_empty());
    let length = parity[0].len();
    let columns = data.len();
    for &index in missing {
        data[index].fill(0);
    }
    // Syndromes: stored parity minus what the surviving columns contribute.
    let rows_needed = rows.iter().max().map_or(0, |row| row + 1);
    let mut partial = vec![vec![0u8; length]; rows_needed];
    {
        let data_refs: Vec<&[u8]> = data.iter().map(|column| &column[..]).collect();
        let mut partial_refs: Vec<&mut [u8]> = partial.iter_mut().map(|p| &mut p[..]).collect();
        generate(&data_refs, &mut partial_refs);
    }
    let syndromes: Vec<Vec<u8>> = rows
        .iter()
        .zip(parity)
        .map(|(&row, stored)| {
            let mut syndrome = partial[row].clone();
            mul_xor(&mut syndrome, stored, 1);
            syndrome
        })
        .collect();
    // The missing columns' coefficients in each surviving row, inverted.
    let size = missing.len();
    let mut matrix = [[0u8; 3]; 3];
    for (r, &row) in rows.iter().enumerate() {
        for (m, &index) in missing.iter().enumerate() {
            let exponent = (columns - 1 - index) as u32;
            matrix[r][m] = gf_pow2(row as u32 * exponent);
        }
    }
    let inverse = invert(matrix, size);
    for (m, &index) in missing.iter().enumerate() {
        for (r, syndrome) in syndromes.iter().enumerate() {
            mul_xor(&mut data[index], syndrome, inverse[m][r]);
        }
    }
}

/// The inverse of the top-left `size` × `size` part of `matrix` (Gauss-Jordan). The matrices
/// given are invertible by construction (see the module doc of `raidz`).
pub(super) fn invert(mut matrix: [[u8; 3]; 3], size: usize) -> [[u8; 3]; 3] {
    let mut inverse = [[0u8; 3]; 3];
    for (i, row) in inverse.iter_mut().enumerate().take(size) {
        row[i] = 1;
    }
    for pivot in 0..size {
        let found = (pivot..size)
            .find(|&row| matrix[row][pivot] != 0)
            .expect("raidz rebuild matrix is invertible");
        matrix.swap(pivot, found);
        inverse.swap(pivot, found);
        let scale = gf_inverse(matrix[pivot][pivot]);
        for column in 0..size {
            matrix[pivot][column] = gf_mul(matrix[pivot][column], scale);
            inverse[pivot][column] = gf_mul(inverse[pivot][column], scale);
        }
        for row in 0..size {
            let factor = matrix[row][pivot];
            if row == pivot || factor == 0 {
                continue;
            }
            for column in 0..size {
                matrix[row][column] ^= gf_mul(factor, matrix[pivot][column]);
                inverse[row][column] ^= gf_mul(factor, inverse[pivot][column]);
            }
        }
    }
    inverse
}
