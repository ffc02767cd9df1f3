//! A stripe's byte work on the kernels of `kernel.rs`, into the caller's buffers: encoding
//! (data columns copied, parity generated), parity straight from the block's bytes (the data
//! columns are slices of the block, nothing copied), and the rebuild of up to `parity`
//! missing columns.
//!
//! No allocation on these paths: column lists live on the stack (at most `RAIDZ_WIDTH_MAX`).
//! The rebuild computes each syndrome into the buffer of a missing data column (whose old
//! bytes are overwritten anyway), then mixes the syndromes into the missing data through the
//! inverse matrix a chunk at a time with a stack scratch; lost parity columns are generated
//! again into their own buffers. The bytes are those of the scalar reference (`gf.rs`).

use super::gf;
use super::kernel::{self, RaidzKernel};
use super::{RAIDZ_PARITY_MAX, RAIDZ_WIDTH_MAX, RaidzError, RaidzMap};

const COLUMNS_MAX: usize = RAIDZ_WIDTH_MAX as usize;
const PARITY_MAX: usize = RAIDZ_PARITY_MAX as usize;
/// Bytes of each syndrome the rebuild mixes at a time (copied to the stack).
const MIX_CHUNK_BYTES: usize = 4096;

/// Up to three column indexes, in increasing order.
#[derive(Debug, Clone, Copy, Default)]
struct Few {
    items: [usize; PARITY_MAX],
    len: usize,
}

impl Few {
    fn push(&mut self, item: usize) {
        self.items[self.len] = item;
        self.len += 1;
        self.items[..self.len].sort_unstable();
    }

    fn as_slice(&self) -> &[usize] {
        &self.items[..self.len]
    }

    fn contains(&self, item: usize) -> bool {
        self.as_slice().contains(&item)
    }
}

/// The rows `1 << row` of `rows`.
fn row_mask(rows: &[usize]) -> u8 {
    rows.iter().fold(0, |mask, row| mask | 1 << row)
}

/// Slices of `buffers`, on the stack.
fn views<B: AsMut<[u8]>>(buffers: &mut [B]) -> [&mut [u8]; COLUMNS_MAX] {
    let mut views: [&mut [u8]; COLUMNS_MAX] = std::array::from_fn(|_| Default::default());
    for (view, buffer) in views.iter_mut().zip(buffers.iter_mut()) {
        *view = buffer.as_mut();
    }
    views
}

/// Shared slices of `columns`, on the stack (an empty column reads as zero).
fn refs<'a>(columns: &'a [&mut [u8]]) -> [&'a [u8]; COLUMNS_MAX] {
    let mut refs: [&[u8]; COLUMNS_MAX] = [&[]; COLUMNS_MAX];
    for (slot, column) in refs.iter_mut().zip(columns) {
        *slot = column;
    }
    refs
}

impl RaidzMap {
    /// `encode` into the caller's buffers (one per column, each `column_buffer_bytes` long),
    /// with the fastest kernel: data columns copied and zero past their data, parity generated.
    pub fn encode_into<B: AsMut<[u8]>>(
        &self,
        data: &[u8],
        buffers: &mut [B],
    ) -> Result<(), RaidzError> {
        self.encode_into_with(RaidzKernel::fastest(), data, buffers)
    }

    /// `encode_into` with the given kernel.
    pub fn encode_into_with<B: AsMut<[u8]>>(
        &self,
        kernel: RaidzKernel,
        data: &[u8],
        buffers: &mut [B],
    ) -> Result<(), RaidzError> {
        let length = self.column_buffer_bytes();
        if data.len() as u64 != self.psize
            || buffers.len() != self.columns.len()
            || buffers
                .iter_mut()
                .any(|buffer| buffer.as_mut().len() != length)
        {
            return Err(RaidzError::BadBuffers);
        }
        let (parity, data_columns) = buffers.split_at_mut(self.parity);
        for (column, range) in data_columns.iter_mut().zip(self.data_ranges()) {
            let (filled, rest) = column.as_mut().split_at_mut(range.len());
            filled.copy_from_slice(&data[range]);
            rest.fill(0);
        }
        let data_views = views(data_columns);
        let data_refs = refs(&data_views[..self.data_column_count()]);
        generate(kernel, &data_refs[..self.data_column_count()], parity);
        Ok(())
    }

    /// The parity columns of the block `data` (psize bytes) into `parity` (`parity()`
    /// buffers of `column_buffer_bytes`), with the fastest kernel. The data columns are read
    /// in place from `data`: a caller writes them from the block itself.
    pub fn parity_into<B: AsMut<[u8]>>(
        &self,
        data: &[u8],
        parity: &mut [B],
    ) -> Result<(), RaidzError> {
        self.parity_into_with(RaidzKernel::fastest(), data, parity)
    }

    /// `parity_into` with the given kernel.
    pub fn parity_into_with<B: AsMut<[u8]>>(
        &self,
        kernel: RaidzKernel,
        data: &[u8],
        parity: &mut [B],
    ) -> Result<(), RaidzError> {
        let length = self.column_buffer_bytes();
        if data.len() as u64 != self.psize
            || parity.len() != self.parity
            || parity
                .iter_mut()
                .any(|buffer| buffer.as_mut().len() != length)
        {
            return Err(RaidzError::BadBuffers);
        }
        let count = self.data_column_count();
        let mut data_refs: [&[u8]; COLUMNS_MAX] = [&[]; COLUMNS_MAX];
        for (slot, range) in data_refs.iter_mut().zip(self.data_ranges()) {
            *slot = &data[range];
        }
        generate(kernel, &data_refs[..count], parity);
        Ok(())
    }

    /// `data_range` of every data column in order, in one pass (`data_range` sums the
    /// columns before: quadratic over a wide stripe).
    pub(super) fn data_ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let mut start = 0u64;
        self.columns[self.parity..].iter().map(move |column| {
            let range =
                start.min(self.psize) as usize..(start + column.size).min(self.psize) as usize;
            start += column.size;
            range
        })
    }

    /// `reconstruct` with the given kernel, on any buffers (`Vec<u8>`, `&mut [u8]`).
    pub fn reconstruct_with<B: AsMut<[u8]>>(
        &self,
        kernel: RaidzKernel,
        buffers: &mut [B],
        missing: &[usize],
    ) -> Result<(), RaidzError> {
        let length = self.column_buffer_bytes();
        if buffers.len() != self.columns.len()
            || buffers
                .iter_mut()
                .any(|buffer| buffer.as_mut().len() != length)
        {
            return Err(RaidzError::BadBuffers);
        }
        if let Some(&index) = missing.iter().find(|&&index| index >= self.columns.len()) {
            return Err(RaidzError::NoSuchColumn {
                index,
                columns: self.columns.len(),
            });
        }
        let missing = self.distinct_missing(missing)?;
        let mut views = views(buffers);
        let views = &mut views[..self.columns.len()];
        self.rebuild_data_columns(kernel, views, &missing);
        self.regenerate_parity(kernel, views, &missing);
        Ok(())
    }

    /// Generates the missing parity columns again from the (complete) data columns.
    fn regenerate_parity(&self, kernel: RaidzKernel, views: &mut [&mut [u8]], missing: &Few) {
        let mut lost = Few::default();
        for &index in missing.as_slice().iter().filter(|&&i| i < self.parity) {
            lost.push(index);
        }
        if lost.len == 0 {
            return;
        }
        let (parity, data_columns) = views.split_at_mut(self.parity);
        let mut out: [&mut [u8]; 3] = Default::default();
        for &row in lost.as_slice() {
            out[row] = std::mem::take(&mut parity[row]);
        }
        let data_refs = refs(data_columns);
        kernel::horner(
            kernel,
            &data_refs[..data_columns.len()],
            &mut out,
            row_mask(lost.as_slice()),
        );
    }

    /// The missing columns, each once, or the error when there are more than parity.
    fn distinct_missing(&self, missing: &[usize]) -> Result<Few, RaidzError> {
        let mut distinct = Few::default();
        for &index in missing {
            if distinct.contains(index) {
                continue;
            }
            if distinct.len == self.parity {
                let mut all = missing.to_vec();
                all.sort_unstable();
                all.dedup();
                return Err(RaidzError::TooManyMissing {
                    missing: all.len(),
                    parity: self.parity,
                });
            }
            distinct.push(index);
        }
        Ok(distinct)
    }

    /// Rebuilds the missing data columns from the first surviving parity rows, as many.
    fn rebuild_data_columns(&self, kernel: RaidzKernel, views: &mut [&mut [u8]], missing: &Few) {
        let mut missing_data = Few::default();
        for &index in missing.as_slice().iter().filter(|&&i| i >= self.parity) {
            missing_data.push(index - self.parity);
        }
        let count = missing_data.len;
        if count == 0 {
            return;
        }
        let mut usable = Few::default();
        for row in (0..self.parity).filter(|&row| !missing.contains(row)) {
            if usable.len < count {
                usable.push(row);
            }
        }
        let (parity, data_columns) = views.split_at_mut(self.parity);
        // Syndrome j (of row usable[j]) goes into missing data column j's buffer: the
        // Horner sum of the surviving columns (the missing ones read as zero) plus the
        // stored parity is the missing columns' share of that row.
        let mut out: [&mut [u8]; 3] = Default::default();
        for (&row, &index) in usable.as_slice().iter().zip(missing_data.as_slice()) {
            out[row] = std::mem::take(&mut data_columns[index]);
        }
        {
            let data_refs = refs(data_columns);
            kernel::horner(
                kernel,
                &data_refs[..data_columns.len()],
                &mut out,
                row_mask(usable.as_slice()),
            );
        }
        for &row in usable.as_slice() {
            kernel::mul_xor(kernel, out[row], parity[row], 1);
        }
        let mut matrix = [[0u8; 3]; 3];
        for (r, &row) in usable.as_slice().iter().enumerate() {
            for (m, &index) in missing_data.as_slice().iter().enumerate() {
                let exponent = (data_columns.len() - 1 - index) as u32;
                matrix[r][m] = gf::gf_pow2(row as u32 * exponent);
            }
        }
        let inverse = gf::invert(matrix, count);
        let mut syndromes: [&mut [u8]; 3] = Default::default();
        for (slot, &row) in syndromes.iter_mut().zip(usable.as_slice()) {
            *slot = std::mem::take(&mut out[row]);
        }
        // With P among the rows, syndrome 0 is the XOR of the missing columns.
        let with_p = usable.as_slice().first() == Some(&0);
        mix(kernel, &mut syndromes[..count], &inverse, with_p);
        for (column, &index) in syndromes.into_iter().zip(missing_data.as_slice()) {
            data_columns[index] = column;
        }
    }
}

/// The parity rows of `data` into `parity` (1 to 3 buffers: P, Q, R).
fn generate<B: AsMut<[u8]>>(kernel: RaidzKernel, data: &[&[u8]], parity: &mut [B]) {
    let rows = (1u8 << parity.len()) - 1;
    let mut out: [&mut [u8]; 3] = Default::default();
    for (slot, column) in out.iter_mut().zip(parity.iter_mut()) {
        *slot = column.as_mut();
    }
    kernel::horner(kernel, data, &mut out, rows);
}

/// `columns[m] = sum over j of inverse[m][j] * columns[j]` (the syndromes in, the missing
/// data out), a chunk at a time through a stack copy of the syndromes. `with_p`: syndrome 0
/// is P's, the XOR of the missing columns, so the last one is that XOR the others (fewer
/// multiplies: 2 instead of 4 for two columns, 6 instead of 9 for three).
fn mix(kernel: RaidzKernel, columns: &mut [&mut [u8]], inverse: &[[u8; 3]; 3], with_p: bool) {
    let count = columns.len();
    if count == 1 && inverse[0][0] == 1 {
        return;
    }
    let by_p = if with_p { count - 1 } else { count };
    let length = columns.first().map_or(0, |column| column.len());
    let mut scratch = [[0u8; MIX_CHUNK_BYTES]; PARITY_MAX];
    let mut from = 0;
    while from < length {
        let to = (from + MIX_CHUNK_BYTES).min(length);
        for (copy, column) in scratch.iter_mut().zip(columns.iter()) {
            copy[..to - from].copy_from_slice(&column[from..to]);
        }
        for (m, column) in columns.iter_mut().enumerate().take(by_p) {
            let target = &mut column[from..to];
            target.fill(0);
            for (j, copy) in scratch.iter().take(count).enumerate() {
                kernel::mul_xor(kernel, target, &copy[..to - from], inverse[m][j]);
            }
        }
        if by_p < count {
            let (rebuilt, last) = columns.split_at_mut(by_p);
            let target = &mut last[0][from..to];
            target.copy_from_slice(&scratch[0][..to - from]);
            for column in rebuilt.iter() {
                kernel::mul_xor(kernel, target, &column[from..to], 1);
            }
        }
        from = to;
    }
}
