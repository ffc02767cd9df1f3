//! RAID-Z layout: where a block's columns lie on the children of a raidz top-level vdev, how
//! much it allocates, and the parity that lets up to `parity` of its columns be rebuilt.
//! `docs/format.md` ("RAID-Z layout") describes the same thing for a reader of the bytes.
//!
//! Address space. A raidz vdev of `width` children, each with a data region of the same
//! size, is one address space of `width` times that size in which consecutive sectors
//! (`1 << ashift` bytes) go round the children: vdev sector `s` is sector `s / width` of
//! child `s % width`. A `Dva`'s offset and asize are in this space, so the allocator needs
//! nothing raidz-specific beyond `RaidzGeometry::asize`.
//!
//! Variable stripe width: every block is a stripe of its own, never a part of another's. Its
//! `psize` is cut into `D = ceil(psize / sector)` data sectors spread over at most
//! `width - parity` data columns, `rows = ceil(D / (width - parity))` sectors deep; `parity`
//! parity columns of `rows` sectors come first. Columns run from the child the block's first
//! sector is on, one child each; a column's sectors are consecutive on its child (one I/O per
//! column), and the data is column-major: data column 0 holds the block's first bytes. When
//! `D` is not a multiple of the data columns, the first `D - (rows - 1) * (width - parity)`
//! data columns are `rows` deep and the rest one sector shorter (read as zero for the parity
//! of the last row): with the parity columns first, the long columns before the short ones,
//! the block covers one contiguous range of the address space. The allocation rounds that
//! range up to a multiple of `parity + 1` sectors ("skip" sectors, never written), so any
//! freed gap can hold the smallest block (one data sector and its parity).
//!
//! Why no write hole: a stripe is written whole into free space and becomes reachable only
//! when the txg's uberblock lands; no stripe is ever updated in place, so parity never
//! disagrees with its data after a crash.
//!
//! Parity, per row, byte by byte over GF(2^8) with the polynomial 0x11d: P is the XOR of the
//! data columns' sectors, Q = sum of 2^e * d and R = sum of 4^e * d, where data column `i` of
//! `n` has exponent `e = n - 1 - i` (so both are Horner evaluations: multiply by 2 or 4 and add
//! the next column). Any `parity` missing columns, data or parity, can be rebuilt: the
//! matrices of the remaining parity rows over the missing data columns are invertible for up
//! to 255 data columns (Vandermonde in distinct powers of 2). The byte work runs on the
//! kernels of `kernel.rs` (AVX2 where the CPU has it, u64 SWAR elsewhere; `kernel_name`
//! says which), into the caller's buffers (`stripe.rs`), byte for byte as the scalar
//! reference of `gf.rs`.
//!
//! Invariants: `RaidzGeometry::new` refuses what the layout cannot hold (parity 1–3, width
//! `parity + 1` ..= `RAIDZ_WIDTH_MAX`, an ashift in range); `map` panics on an offset that is
//! not sector aligned or a psize of 0 (callers hold allocated `Dva`s, never raw input);
//! `reconstruct` refuses more missing columns than parity, never guesses.

use crate::{ASHIFT_MAX, ASHIFT_MIN, FormatError};

#[cfg(target_arch = "x86_64")]
mod avx2;
mod gf;
mod kernel;
mod stripe;
mod swar;

pub use gf::{gf_mul, gf_pow2};
pub use kernel::{RaidzKernel, kernel_name};

/// Most parity columns a raidz vdev may have (raidz3).
pub const RAIDZ_PARITY_MAX: u8 = 3;
/// Most children of one raidz vdev (the exponents of Q and R stay distinct below 255 data
/// columns).
pub const RAIDZ_WIDTH_MAX: u32 = 255;

/// The shape of a raidz vdev: children, parity columns, sector size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaidzGeometry {
    width: u32,
    parity: u32,
    ashift: u8,
}

/// One column of a block's stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaidzColumn {
    /// Index of the child (0-based, in the vdev's order) holding the column.
    pub child: u32,
    /// Bytes from the start of that child's data region.
    pub child_offset: u64,
    /// Bytes of the column on the child (a whole number of sectors).
    pub size: u64,
}

/// Where one block lies: `parity` parity columns, then data columns (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaidzMap {
    parity: usize,
    sector_bytes: u64,
    rows: u64,
    psize: u64,
    columns: Vec<RaidzColumn>,
}

/// Why columns cannot be rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RaidzError {
    #[error("{missing} columns missing, parity {parity} rebuilds at most that many")]
    TooManyMissing { missing: usize, parity: usize },
    #[error("column {index} given, the stripe has {columns}")]
    NoSuchColumn { index: usize, columns: usize },
    #[error("column buffers of the wrong count or size")]
    BadBuffers,
}

impl RaidzGeometry {
    pub fn new(width: u32, parity: u8, ashift: u8) -> Result<RaidzGeometry, FormatError> {
        let invalid = |field, value| FormatError::InvalidField {
            what: "raidz geometry",
            field,
            value,
        };
        if parity == 0 || parity > RAIDZ_PARITY_MAX {
            return Err(invalid("parity", u64::from(parity)));
        }
        if width <= u32::from(parity) || width > RAIDZ_WIDTH_MAX {
            return Err(invalid("width", u64::from(width)));
        }
        if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&ashift) {
            return Err(invalid("ashift", u64::from(ashift)));
        }
        Ok(RaidzGeometry {
            width,
            parity: u32::from(parity),
            ashift,
        })
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn parity(&self) -> u32 {
        self.parity
    }

    pub fn ashift(&self) -> u8 {
        self.ashift
    }

    fn sector_bytes(&self) -> u64 {
        1 << self.ashift
    }

    /// Bytes of the vdev's address space over children whose data regions hold
    /// `child_data_bytes` each (the smallest child's): whole sectors of every child.
    pub fn vdev_bytes(&self, child_data_bytes: u64) -> u64 {
        (child_data_bytes >> self.ashift) * u64::from(self.width) * self.sector_bytes()
    }

    /// Data sectors and rows of a block of `psize` bytes.
    fn shape(&self, psize: u64) -> (u64, u64) {
        let data_sectors = psize.div_ceil(self.sector_bytes()).max(1);
        let rows = data_sectors.div_ceil(u64::from(self.width - self.parity));
        (data_sectors, rows)
    }

    /// Bytes a block of `psize` bytes allocates: its data and parity sectors, rounded up to a
    /// multiple of `parity + 1` sectors.
    pub fn asize(&self, psize: u64) -> u64 {
        let (data_sectors, rows) = self.shape(psize);
        let sectors = data_sectors + u64::from(self.parity) * rows;
        sectors.next_multiple_of(u64::from(self.parity) + 1) * self.sector_bytes()
    }

    /// The largest psize whose asize is at most `asize` (what `asize` bytes of free space can
    /// hold as one block): for space reporting and tests of `asize`.
    pub fn max_psize(&self, asize: u64) -> u64 {
        // asize grows with psize, so a binary search over sectors finds the boundary.
        let (mut low, mut high) = (0u64, asize >> self.ashift);
        while low < high {
            let mid = (low + high).div_ceil(2);
            if self.asize(mid << self.ashift) <= asize {
                low = mid;
            } else {
                high = mid - 1;
            }
        }
        low << self.ashift
    }

    /// The columns of the block of `psize` bytes at `offset` of the vdev's address space.
    pub fn map(&self, offset: u64, psize: u64) -> RaidzMap {
        let sector = self.sector_bytes();
        assert!(
            offset.is_multiple_of(sector) && psize > 0,
            "raidz map of offset {offset} psize {psize}"
        );
        let width = u64::from(self.width);
        let parity = u64::from(self.parity);
        let (data_sectors, rows) = self.shape(psize);
        let data_columns_max = width - parity;
        let (data_columns, long_columns) = if data_sectors < data_columns_max {
            (data_sectors, data_sectors)
        } else {
            (
                data_columns_max,
                data_sectors - (rows - 1) * data_columns_max,
            )
        };
        let first_sector = offset >> self.ashift;
        let columns = (0..parity + data_columns)
            .map(|index| {
                let long = index < parity + long_columns;
                let sector_index = first_sector + index;
                RaidzColumn {
                    child: (sector_index % width) as u32,
                    child_offset: (sector_index / width) * sector,
                    size: if long { rows } else { rows - 1 } * sector,
                }
            })
            .collect();
        RaidzMap {
            parity: parity as usize,
            sector_bytes: sector,
            rows,
            psize,
            columns,
        }
    }
}

impl RaidzMap {
    /// Every column: `parity()` parity columns (P, Q, R), then the data columns in the
    /// block's byte order.
    pub fn columns(&self) -> &[RaidzColumn] {
        &self.columns
    }

    pub fn parity(&self) -> usize {
        self.parity
    }

    /// Bytes of the longest column (`rows` sectors): the size of every buffer `encode` and
    /// `reconstruct` work on (a short column's buffer ends in a zero sector).
    pub fn column_buffer_bytes(&self) -> usize {
        (self.rows * self.sector_bytes) as usize
    }

    /// The range of the block's bytes data column `data_index` holds (its end clipped to
    /// psize: the rest of its last sector is zero).
    pub fn data_range(&self, data_index: usize) -> std::ops::Range<usize> {
        let start: u64 = self.columns[self.parity..self.parity + data_index]
            .iter()
            .map(|column| column.size)
            .sum();
        let size = self.columns[self.parity + data_index].size;
        let start = start.min(self.psize) as usize;
        let end = (start as u64 + size).min(self.psize) as usize;
        start..end
    }

    fn data_column_count(&self) -> usize {
        self.columns.len() - self.parity
    }

    /// The column buffers of `data` (psize bytes): parity columns computed, data columns
    /// copied, each `column_buffer_bytes` long and zero past its data.
    pub fn encode(&self, data: &[u8]) -> Vec<Vec<u8>> {
        assert_eq!(
            data.len() as u64,
            self.psize,
            "raidz encode of a wrong-sized block"
        );
        let mut buffers = vec![vec![0u8; self.column_buffer_bytes()]; self.columns.len()];
        // The sizes are right by construction, so this cannot fail.
        let encoded = self.encode_into(data, &mut buffers);
        debug_assert!(encoded.is_ok());
        buffers
    }

    /// The block's bytes from its data column buffers (`columns[parity..]`).
    pub fn gather(&self, buffers: &[Vec<u8>], out: &mut [u8]) -> Result<(), RaidzError> {
        if buffers.len() != self.columns.len() || out.len() as u64 != self.psize {
            return Err(RaidzError::BadBuffers);
        }
        for index in 0..self.data_column_count() {
            let range = self.data_range(index);
            let size = range.len();
            let buffer = &buffers[self.parity + index];
            if buffer.len() < size {
                return Err(RaidzError::BadBuffers);
            }
            out[range].copy_from_slice(&buffer[..size]);
        }
        Ok(())
    }

    /// Rebuilds the columns listed in `missing` (indexes into `columns()`) from the others.
    /// Every buffer is `column_buffer_bytes` long and a short column's ends in zeros; what a
    /// missing column's buffer held is ignored and overwritten.
    pub fn reconstruct(
        &self,
        buffers: &mut [Vec<u8>],
        missing: &[usize],
    ) -> Result<(), RaidzError> {
        self.reconstruct_with(RaidzKernel::fastest(), buffers, missing)
    }
}

#[cfg(test)]
mod kernel_tests;
#[cfg(test)]
mod tests;
