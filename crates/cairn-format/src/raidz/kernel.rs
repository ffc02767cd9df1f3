//! Which code does RAID-Z's byte work, and the two operations every kernel provides: parity
//! rows by Horner's rule over the data columns, and `dst ^= c * src` (the rebuild's
//! multiply-accumulate). Kernels: `avx2` (x86_64, chosen when the CPU has it) and `portable`
//! (u64 SWAR, everywhere); both agree byte for byte with the scalar reference in `gf.rs`
//! (tests in `kernel_tests.rs`).
//!
//! Invariants: a `RaidzKernel` naming AVX2 exists only once the CPU was seen to have AVX2
//! (the constructors check), so running its code is sound. Data columns may be shorter than
//! the parity rows (a short column, the clipped end of a block, a missing column as an empty
//! slice): they read as zero past their end. `horner` cuts the rows into segments where each
//! column is either wholly present or wholly zero, which is what the kernels assume, and the
//! columns into groups of a few, each pass carrying Horner's rule on from the last (the
//! columns of a stripe lie whole sectors apart, in one set of the L1 cache).

#[cfg(target_arch = "x86_64")]
use super::avx2;
use super::swar;

/// Data and parity streams one Horner pass reads at once (see `horner`).
const STREAMS_PER_PASS: usize = 8;

/// The code that computes parity and rebuilds columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaidzKernel(Kind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2,
}

impl RaidzKernel {
    /// The u64 SWAR kernel: eight bytes per word, on every CPU.
    pub fn portable() -> RaidzKernel {
        RaidzKernel(Kind::Portable)
    }

    /// The AVX2 kernel, if this CPU has AVX2.
    pub fn avx2() -> Option<RaidzKernel> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Some(RaidzKernel(Kind::Avx2));
        }
        None
    }

    /// The fastest kernel this CPU runs: the one the pool uses.
    pub fn fastest() -> RaidzKernel {
        RaidzKernel::avx2().unwrap_or_else(RaidzKernel::portable)
    }

    /// Every kernel this CPU runs, the fastest first.
    pub fn available() -> Vec<RaidzKernel> {
        RaidzKernel::avx2()
            .into_iter()
            .chain([RaidzKernel::portable()])
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Portable => "portable",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2 => "avx2",
        }
    }
}

/// The name of the kernel `encode`, `parity_into` and `reconstruct` use on this CPU.
pub fn kernel_name() -> &'static str {
    RaidzKernel::fastest().name()
}

/// Parity rows `rows` (bit 0 P, bit 1 Q, bit 2 R; 1 to 7) of `data` into the selected `out`
/// rows, all of one length (the others are left alone). A data column shorter than the rows
/// reads as zero past its end; an empty one is a zero column (a missing one, for syndromes).
pub(super) fn horner(kernel: RaidzKernel, data: &[&[u8]], out: &mut [&mut [u8]; 3], rows: u8) {
    assert!((1..=7).contains(&rows), "parity rows {rows}");
    let selected = |row: usize| rows & (1 << row) != 0;
    let length = (0..3)
        .filter(|&row| selected(row))
        .map(|row| out[row].len())
        .max()
        .unwrap_or(0);
    assert!(
        (0..3).all(|row| !selected(row) || out[row].len() == length),
        "parity rows of different lengths"
    );
    if data.is_empty() {
        for (row, buffer) in out.iter_mut().enumerate() {
            if selected(row) {
                buffer.fill(0);
            }
        }
        return;
    }
    let mut from = 0;
    while from < length {
        // Up to the next end of a column: each column is wholly present or wholly zero here.
        let to = data
            .iter()
            .map(|column| column.len())
            .filter(|&end| end > from && end < length)
            .min()
            .unwrap_or(length);
        let mut segment: [&mut [u8]; 3] = Default::default();
        for (row, (slot, buffer)) in segment.iter_mut().zip(out.iter_mut()).enumerate() {
            if selected(row) {
                *slot = &mut buffer[from..to];
            }
        }
        note_use(kernel);
        // A few columns per pass: the columns of a stripe are whole sectors apart, so their
        // bytes at one position fall in one set of the L1 cache, whose ways are few (8).
        let group_columns_max = (STREAMS_PER_PASS - rows.count_ones() as usize).max(1);
        let groups = data.len().div_ceil(group_columns_max).max(1);
        let group_columns = data.len().div_ceil(groups).max(1);
        for (group, columns) in data.chunks(group_columns).enumerate() {
            let accumulate = group > 0;
            match kernel.0 {
                Kind::Portable => swar::horner(rows, columns, from, &mut segment, accumulate),
                #[cfg(target_arch = "x86_64")]
                // SAFETY: a `Kind::Avx2` kernel is made only after AVX2 was detected.
                Kind::Avx2 => unsafe {
                    avx2::horner(rows, columns, from, &mut segment, accumulate)
                },
            }
        }
        from = to;
    }
}

/// `dst ^= c * src` over GF(2^8); the slices have one length.
pub(super) fn mul_xor(kernel: RaidzKernel, dst: &mut [u8], src: &[u8], c: u8) {
    assert_eq!(dst.len(), src.len(), "mul_xor of different lengths");
    note_use(kernel);
    match kernel.0 {
        Kind::Portable => swar::mul_xor(dst, src, c),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Kind::Avx2` kernel is made only after AVX2 was detected.
        Kind::Avx2 => unsafe { avx2::mul_xor(dst, src, c) },
    }
}

#[cfg(test)]
thread_local! {
    /// The kernel this thread's last `horner` or `mul_xor` ran: tests check it is the one
    /// `kernel_name` reports.
    pub(super) static LAST_USED: std::cell::Cell<Option<&'static str>> =
        const { std::cell::Cell::new(None) };
}

#[cfg(test)]
fn note_use(kernel: RaidzKernel) {
    LAST_USED.with(|last| last.set(Some(kernel.name())));
}

#[cfg(not(test))]
fn note_use(_: RaidzKernel) {}
