//! # Block compression: the physical layout of compressed blocks
//!
//! The codec behind the `compression` property (`lz4`, and `on`, which means lz4 as in
//! OpenZFS; the default is `off` for now, see README). It lives with the format because what
//! it writes is on disk: the
//! pipeline compresses blocks here before their checksum and allocation (the checksum covers
//! the physical bytes, so scrub and self-heal never decompress), and the SSD cache tier encodes
//! a block RAM holds decompressed back into exactly those bytes (`encode`), to keep it as the
//! pool does.
//!
//! Physical layout of an lz4 block (`docs/format.md`, "Compression"): the length of the lz4
//! block-format data as a little-endian u32, the data, then zeros up to the next
//! `BLOCK_SIZE_GRANULE`. The length is stored because the lz4 block format cannot tell data
//! from padding.
//!
//! Invariants:
//! - `encode` is deterministic: the same bytes give the same physical block, which is what lets
//!   a cache re-create a block's stored form from its contents and check it by the checksum.
//! - A block is kept compressed (`compress`) only when it saves at least an eighth of its
//!   logical size once both sizes are rounded up to the pool's largest sector (what the
//!   allocator would really take); otherwise it is stored as it came, with `Compression::Off`.
//! - `decompress` returns exactly `lsize` bytes or an error; it is only ever given bytes whose
//!   checksum verified, so an error means a block written wrongly, never a bad disk.

use crate::{BLOCK_SIZE_GRANULE, Compression};
use std::cell::RefCell;
use thiserror::Error;

/// Bytes of the length header in front of the lz4 data.
const LZ4_HEADER_BYTES: usize = 4;

/// Why a verified physical block could not be turned back into its logical bytes.
#[derive(Debug, Error)]
pub enum DecompressError {
    #[error("compressed length {stored} does not fit the block's {psize} physical bytes")]
    BadLength { stored: usize, psize: usize },
    #[error("lz4 data is damaged")]
    Lz4(#[source] lz4_flex::block::DecompressError),
    #[error("decompressed to {got} bytes, the block pointer says {lsize}")]
    WrongSize { got: usize, lsize: usize },
    #[error("compression {0:?} is not implemented by this build")]
    Unsupported(Compression),
}

fn round_up(bytes: usize, unit: usize) -> usize {
    bytes.div_ceil(unit) * unit
}

/// Encoder output kept per thread up to this size (room for a 1 MiB block): most blocks that
/// fail to compress then cost no allocation at all. Larger blocks use a buffer of their own.
const SCRATCH_BYTES_MAX: usize = 1 << 21;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// `data` encoded with `algorithm` into the physical layout if `keep` accepts the resulting
/// physical size (before any copy of the output is made).
fn encode_if(
    data: &[u8],
    algorithm: Compression,
    keep: impl FnOnce(usize) -> bool,
) -> Option<Vec<u8>> {
    if algorithm != Compression::Lz4 {
        return None;
    }
    let need = lz4_flex::block::get_maximum_output_size(data.len());
    let pack = |scratch: &mut Vec<u8>| {
        if scratch.len() < need {
            scratch.resize(need, 0);
        }
        let packed = lz4_flex::block::compress_into(data, &mut scratch[..need]).ok()?;
        let header = u32::try_from(packed).ok()?.to_le_bytes();
        let physical = round_up(LZ4_HEADER_BYTES + packed, BLOCK_SIZE_GRANULE as usize);
        if !keep(physical) {
            return None;
        }
        let mut out = Vec::with_capacity(physical);
        out.extend_from_slice(&header);
        out.extend_from_slice(&scratch[..packed]);
        out.resize(physical, 0);
        Some(out)
    };
    if need <= SCRATCH_BYTES_MAX {
        SCRATCH.with_borrow_mut(pack)
    } else {
        pack(&mut Vec::new())
    }
}

/// The physical form of `data` compressed with `algorithm`, whatever its size (`None` for
/// `Off` and for codecs this build does not write).
pub fn encode(data: &[u8], algorithm: Compression) -> Option<Vec<u8>> {
    encode_if(data, algorithm, |_| true)
}

/// `data` compressed with `algorithm` in the physical layout, if that saves at least an eighth
/// of its size counted in `sector_bytes` units; `None` to store it as it is.
pub fn compress(data: &[u8], algorithm: Compression, sector_bytes: usize) -> Option<Vec<u8>> {
    assert!(sector_bytes.is_power_of_two() && sector_bytes >= BLOCK_SIZE_GRANULE as usize);
    if algorithm == Compression::Off {
        return None;
    }
    let allowed = round_up(data.len(), sector_bytes);
    let allowed = allowed - allowed / 8;
    // No block that fits in one sector can save one.
    if round_up(LZ4_HEADER_BYTES + 1, sector_bytes) > allowed {
        return None;
    }
    encode_if(data, algorithm, |physical| {
        round_up(physical, sector_bytes) <= allowed
    })
}

/// The `lsize` logical bytes of a verified physical block stored with `algorithm`.
pub fn decompress(
    physical: &[u8],
    algorithm: Compression,
    lsize: usize,
) -> Result<Vec<u8>, DecompressError> {
    match algorithm {
        Compression::Off => {
            if physical.len() != lsize {
                return Err(DecompressError::WrongSize {
                    got: physical.len(),
                    lsize,
                });
            }
            Ok(physical.to_vec())
        }
        Compression::Lz4 => {
            let psize = physical.len();
            let header: [u8; LZ4_HEADER_BYTES] = physical
                .get(..LZ4_HEADER_BYTES)
                .and_then(|h| h.try_into().ok())
                .ok_or(DecompressError::BadLength { stored: 0, psize })?;
            let stored = u32::from_le_bytes(header) as usize;
            let packed = physical
                .get(LZ4_HEADER_BYTES..LZ4_HEADER_BYTES.saturating_add(stored))
                .ok_or(DecompressError::BadLength { stored, psize })?;
            let mut out = vec![0u8; lsize];
            let got =
                lz4_flex::block::decompress_into(packed, &mut out).map_err(DecompressError::Lz4)?;
            if got != lsize {
                return Err(DecompressError::WrongSize { got, lsize });
            }
            Ok(out)
        }
        Compression::Zstd => Err(DecompressError::Unsupported(algorithm)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_block(bytes: usize) -> Vec<u8> {
        let line = b"the quick brown fox jumps over the lazy dog 0123456789\n";
        line.iter().copied().cycle().take(bytes).collect()
    }

    fn noise_block(bytes: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    #[test]
    fn compressible_blocks_round_trip_smaller_and_padded() {
        for (lsize, sector) in [(128 << 10, 4096), (16 << 10, 512), (8 << 10, 4096)] {
            let data = text_block(lsize);
            let physical = compress(&data, Compression::Lz4, sector).expect("text compresses");
            assert!(physical.len() < lsize / 4, "{} of {lsize}", physical.len());
            assert_eq!(physical.len() % BLOCK_SIZE_GRANULE as usize, 0);
            let stored = u32::from_le_bytes(physical[..4].try_into().unwrap()) as usize;
            assert!(physical[4 + stored..].iter().all(|&b| b == 0), "padding");
            let back = decompress(&physical, Compression::Lz4, lsize).unwrap();
            assert_eq!(back, data);
        }
    }

    #[test]
    fn incompressible_or_sector_sized_blocks_are_stored_as_they_are() {
        assert!(compress(&noise_block(128 << 10, 7), Compression::Lz4, 4096).is_none());
        // A 4 KiB block cannot save a 4 KiB sector, however well it compresses.
        assert!(compress(&text_block(4096), Compression::Lz4, 4096).is_none());
        // With 512-byte sectors it can.
        assert!(compress(&text_block(4096), Compression::Lz4, 512).is_some());
        assert!(compress(&text_block(128 << 10), Compression::Off, 4096).is_none());
    }

    #[test]
    fn a_block_that_saves_less_than_an_eighth_is_not_kept_compressed() {
        // Half noise, half text: lz4 saves a little under half; with 64 KiB "sectors" that
        // rounds back up to the whole 128 KiB block, which is no saving at all.
        let mut data = noise_block(64 << 10, 3);
        data.extend(text_block(64 << 10));
        assert!(compress(&data, Compression::Lz4, 4096).is_some());
        assert!(compress(&data, Compression::Lz4, 64 << 10).is_none());
    }

    #[test]
    fn encoding_is_deterministic_and_what_compress_keeps() {
        let data = text_block(32 << 10);
        let kept = compress(&data, Compression::Lz4, 4096).unwrap();
        assert_eq!(encode(&data, Compression::Lz4).unwrap(), kept);
        assert_eq!(encode(&data, Compression::Lz4).unwrap(), kept);
        assert!(encode(&data, Compression::Off).is_none());
    }

    #[test]
    fn damaged_or_mislabelled_physical_bytes_are_errors_not_garbage() {
        let data = text_block(64 << 10);
        let physical = compress(&data, Compression::Lz4, 4096).unwrap();
        let mut long = physical.to_vec();
        long[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decompress(&long, Compression::Lz4, data.len()),
            Err(DecompressError::BadLength { .. })
        ));
        assert!(matches!(
            decompress(&physical, Compression::Lz4, data.len() - 512),
            Err(DecompressError::Lz4(_) | DecompressError::WrongSize { .. })
        ));
        assert!(decompress(&physical, Compression::Lz4, data.len() + 512).is_err());
        assert!(decompress(&physical, Compression::Zstd, data.len()).is_err());
    }
}
