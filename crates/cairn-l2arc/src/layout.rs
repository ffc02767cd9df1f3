//! The bytes on a cache device.
//!
//! ```text
//! 0        4 KiB     8 KiB              data_start                                 end
//! | super A | super B | (zeroed)         | segment 0 | segment 1 | ... | segment N-1 | (zeroed, 1 MiB) |
//!
//! segment: | header (4 KiB) | block | block | ... | summary (24 B per block) | free |
//! ```
//!
//! The superblock (two identical copies; either verifies by its checksum) names the device
//! (its guid and its pool's guid) and the geometry. A segment is filled front to back by large
//! sequential writes; when it is full its summary (one 24-byte entry per block: key, offset in
//! the segment, size) is written after the last block, and then the header, which carries the
//! summary's place and checksum, a sequence number (newer segments have larger ones) and the
//! segment's hit count. A header whose checksum or summary does not verify makes its segment
//! empty: after a crash mid-fill, a torn summary, or a device that was zeroed, the cache simply
//! holds less. Nothing here is ever trusted further than that: every block read back is
//! verified against its block pointer by the reader.
//!
//! All integers little-endian. Sizes and offsets in bytes unless named `_sectors` (512 bytes).

use cairn_format::checksum::embedded;

pub const SECTOR_BYTES: u64 = 512;
const SUPER_MAGIC: &[u8; 8] = b"CAIRNL2\0";
const SEGMENT_MAGIC: &[u8; 8] = b"CAIRNSEG";
/// Version of the cache-device layout (its superblock says which).
pub const CACHE_FORMAT_VERSION: u32 = 1;
/// Each superblock copy's slot.
pub const SUPER_BYTES: u64 = 4096;
/// The segment header's slot at the start of every segment.
pub const HEADER_BYTES: u64 = 4096;
/// Bytes of one summary entry.
pub const SUMMARY_ENTRY_BYTES: usize = 24;
/// Segments start here (room for both superblocks, aligned for large writes).
pub const DATA_START: u64 = 1 << 20;
/// Kept unused (and zeroed when the device is added) at the device's end, so no label of an
/// earlier use survives there to be mistaken for a pool member.
pub const TAIL_RESERVED_BYTES: u64 = 1 << 20;
/// Smallest segment: a header, a few blocks and their summary.
pub const SEGMENT_BYTES_MIN: u64 = 64 << 10;
/// Largest segment (offsets within a segment are u32 sectors... and summaries stay small).
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;

/// Why a structure on a cache device was not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("no cairn cache-device superblock (bad magic)")]
    NotACacheDevice,
    #[error(
        "cache-device format version {0} is not supported (this build reads {CACHE_FORMAT_VERSION})"
    )]
    Version(u32),
    #[error("checksum mismatch in {0}")]
    Checksum(&'static str),
    #[error("{what} out of range: {value}")]
    Range { what: &'static str, value: u64 },
    #[error("{0} truncated")]
    Truncated(&'static str),
}

/// The geometry and identity of a cache device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superblock {
    pub device_guid: u64,
    pub pool_guid: u64,
    pub segment_bytes: u64,
    pub segment_count: u64,
}

impl Superblock {
    /// The geometry that fits a device of `device_bytes` with segments of `segment_bytes`.
    pub fn for_device(
        device_bytes: u64,
        segment_bytes: u64,
        device_guid: u64,
        pool_guid: u64,
    ) -> Result<Superblock, LayoutError> {
        check_segment_bytes(segment_bytes)?;
        let segment_count =
            device_bytes.saturating_sub(DATA_START + TAIL_RESERVED_BYTES) / segment_bytes;
        if segment_count == 0 {
            return Err(LayoutError::Range {
                what: "device size (no room for one segment)",
                value: device_bytes,
            });
        }
        let superblock = Superblock {
            device_guid,
            pool_guid,
            segment_bytes,
            segment_count,
        };
        superblock.check_sectors()?;
        Ok(superblock)
    }

    fn check_sectors(&self) -> Result<(), LayoutError> {
        // Saturating: a damaged superblock's count can be anything, and a product that wrapped
        // could pass the check below (found by the `l2arc_layout` fuzz case).
        let sectors = (self.segment_bytes / SECTOR_BYTES).saturating_mul(self.segment_count);
        if sectors > u64::from(u32::MAX) {
            return Err(LayoutError::Range {
                what: "cache size in sectors (2 TiB per device at most)",
                value: sectors,
            });
        }
        Ok(())
    }

    pub fn sectors_per_segment(&self) -> u32 {
        // At most SEGMENT_BYTES_MAX / 512 = 2^21.
        (self.segment_bytes / SECTOR_BYTES) as u32
    }

    /// Byte offset of segment `segment` on the device.
    pub fn segment_offset(&self, segment: u32) -> u64 {
        DATA_START + u64::from(segment) * self.segment_bytes
    }

    /// Byte offset of a block placed at device sector `sector` (counted from `DATA_START`).
    pub fn sector_offset(&self, sector: u32) -> u64 {
        DATA_START + u64::from(sector) * SECTOR_BYTES
    }

    pub fn segment_of(&self, sector: u32) -> u32 {
        sector / self.sectors_per_segment()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; SUPER_BYTES as usize];
        out[0..8].copy_from_slice(SUPER_MAGIC);
        out[8..12].copy_from_slice(&CACHE_FORMAT_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.device_guid.to_le_bytes());
        out[24..32].copy_from_slice(&self.pool_guid.to_le_bytes());
        out[32..40].copy_from_slice(&self.segment_bytes.to_le_bytes());
        out[40..48].copy_from_slice(&self.segment_count.to_le_bytes());
        let checksum = embedded(&out[..64]);
        out[64..96].copy_from_slice(&checksum);
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Superblock, LayoutError> {
        if bytes.len() < 96 {
            return Err(LayoutError::Truncated("superblock"));
        }
        if &bytes[0..8] != SUPER_MAGIC {
            return Err(LayoutError::NotACacheDevice);
        }
        if embedded(&bytes[..64]) != bytes[64..96] {
            return Err(LayoutError::Checksum("superblock"));
        }
        let version = u32_at(bytes, 8);
        if version != CACHE_FORMAT_VERSION {
            return Err(LayoutError::Version(version));
        }
        let superblock = Superblock {
            device_guid: u64_at(bytes, 16),
            pool_guid: u64_at(bytes, 24),
            segment_bytes: u64_at(bytes, 32),
            segment_count: u64_at(bytes, 40),
        };
        check_segment_bytes(superblock.segment_bytes)?;
        if superblock.segment_count == 0 {
            return Err(LayoutError::Range {
                what: "segment count",
                value: 0,
            });
        }
        superblock.check_sectors()?;
        Ok(superblock)
    }
}

fn check_segment_bytes(segment_bytes: u64) -> Result<(), LayoutError> {
    if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&segment_bytes)
        || !segment_bytes.is_power_of_two()
    {
        return Err(LayoutError::Range {
            what: "segment size (a power of two, 64 KiB to 1 GiB)",
            value: segment_bytes,
        });
    }
    Ok(())
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(raw)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(raw)
}

/// One block of a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SummaryEntry {
    pub key: [u64; 2],
    /// First sector within the segment (the header's sectors included).
    pub offset_sectors: u32,
    pub psize: u32,
}

/// A sealed segment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Device-wide order of sealing: a larger number is newer.
    pub sequence: u64,
    /// Hits the segment's blocks had got (when the header was last written).
    pub hits: u64,
    pub summary_offset_bytes: u32,
    pub entries: u32,
    pub summary_checksum: [u8; 32],
}

impl SegmentHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; HEADER_BYTES as usize];
        out[0..8].copy_from_slice(SEGMENT_MAGIC);
        out[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        out[16..24].copy_from_slice(&self.hits.to_le_bytes());
        out[24..28].copy_from_slice(&self.summary_offset_bytes.to_le_bytes());
        out[28..32].copy_from_slice(&self.entries.to_le_bytes());
        out[32..64].copy_from_slice(&self.summary_checksum);
        let checksum = embedded(&out[..64]);
        out[64..96].copy_from_slice(&checksum);
        out
    }

    /// `None` for a header slot that holds no sealed segment (never written, or invalidated
    /// before reuse); an error for one that is damaged.
    pub fn decode(bytes: &[u8], segment_bytes: u64) -> Result<Option<SegmentHeader>, LayoutError> {
        if bytes.len() < 96 {
            return Err(LayoutError::Truncated("segment header"));
        }
        if &bytes[0..8] != SEGMENT_MAGIC {
            return Ok(None);
        }
        if embedded(&bytes[..64]) != bytes[64..96] {
            return Err(LayoutError::Checksum("segment header"));
        }
        let mut summary_checksum = [0u8; 32];
        summary_checksum.copy_from_slice(&bytes[32..64]);
        let header = SegmentHeader {
            sequence: u64_at(bytes, 8),
            hits: u64_at(bytes, 16),
            summary_offset_bytes: u32_at(bytes, 24),
            entries: u32_at(bytes, 28),
            summary_checksum,
        };
        let summary_end = u64::from(header.summary_offset_bytes)
            + u64::from(header.entries) * SUMMARY_ENTRY_BYTES as u64;
        if u64::from(header.summary_offset_bytes) < HEADER_BYTES || summary_end > segment_bytes {
            return Err(LayoutError::Range {
                what: "segment summary end",
                value: summary_end,
            });
        }
        Ok(Some(header))
    }

    pub fn summary_bytes(&self) -> usize {
        self.entries as usize * SUMMARY_ENTRY_BYTES
    }
}

pub fn encode_summary(entries: &[SummaryEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * SUMMARY_ENTRY_BYTES);
    for entry in entries {
        out.extend_from_slice(&entry.key[0].to_le_bytes());
        out.extend_from_slice(&entry.key[1].to_le_bytes());
        out.extend_from_slice(&entry.offset_sectors.to_le_bytes());
        out.extend_from_slice(&entry.psize.to_le_bytes());
    }
    out
}

/// The entries of a summary that verified against `header`; each entry's block must lie
/// inside the segment's data area.
pub fn decode_summary(
    bytes: &[u8],
    header: &SegmentHeader,
) -> Result<Vec<SummaryEntry>, LayoutError> {
    if bytes.len() < header.summary_bytes() {
        return Err(LayoutError::Truncated("segment summary"));
    }
    let bytes = &bytes[..header.summary_bytes()];
    if embedded(bytes) != header.summary_checksum {
        return Err(LayoutError::Checksum("segment summary"));
    }
    let data_end_sectors = u64::from(header.summary_offset_bytes) / SECTOR_BYTES;
    let mut entries = Vec::with_capacity(header.entries as usize);
    for raw in bytes.chunks_exact(SUMMARY_ENTRY_BYTES) {
        let entry = SummaryEntry {
            key: [u64_at(raw, 0), u64_at(raw, 8)],
            offset_sectors: u32_at(raw, 16),
            psize: u32_at(raw, 20),
        };
        let end_sectors =
            u64::from(entry.offset_sectors) + u64::from(entry.psize).div_ceil(SECTOR_BYTES);
        if u64::from(entry.offset_sectors) < HEADER_BYTES / SECTOR_BYTES
            || entry.psize == 0
            || end_sectors > data_end_sectors
        {
            return Err(LayoutError::Range {
                what: "summary entry's block",
                value: u64::from(entry.offset_sectors),
            });
        }
        entries.push(entry);
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn superblocks_round_trip_and_damage_is_named() {
        let superblock = Superblock::for_device(64 << 20, 1 << 20, 7, 9).unwrap();
        assert_eq!(superblock.segment_count, 62);
        let mut bytes = superblock.encode();
        assert_eq!(Superblock::decode(&bytes), Ok(superblock));
        bytes[33] ^= 1;
        assert_eq!(
            Superblock::decode(&bytes),
            Err(LayoutError::Checksum("superblock"))
        );
        assert_eq!(
            Superblock::decode(&[0u8; 4096]),
            Err(LayoutError::NotACacheDevice)
        );
        assert!(Superblock::for_device(1 << 20, 1 << 20, 1, 1).is_err());
        assert!(Superblock::for_device(64 << 20, 1000, 1, 1).is_err());
    }

    /// A segment count whose sector total overflows u64 is refused, not a panic or a wrapped
    /// product that passes (fuzz regression).
    #[test]
    fn an_overflowing_segment_count_is_refused() {
        let mut superblock = Superblock::for_device(64 << 20, 1 << 20, 7, 9).unwrap();
        superblock.segment_count = u64::MAX / 3;
        assert!(matches!(
            Superblock::decode(&superblock.encode()),
            Err(LayoutError::Range { .. })
        ));
    }

    #[test]
    fn summaries_verify_against_their_header() {
        let entries = vec![
            SummaryEntry {
                key: [1, 2],
                offset_sectors: 8,
                psize: 4096,
            },
            SummaryEntry {
                key: [3, 4],
                offset_sectors: 16,
                psize: 512,
            },
        ];
        let summary = encode_summary(&entries);
        let header = SegmentHeader {
            sequence: 5,
            hits: 0,
            summary_offset_bytes: 17 * 512,
            entries: 2,
            summary_checksum: embedded(&summary),
        };
        let decoded = SegmentHeader::decode(&header.encode(), 1 << 20).unwrap();
        assert_eq!(decoded, Some(header));
        assert_eq!(decode_summary(&summary, &header), Ok(entries));
        let mut torn = summary.clone();
        torn[30] ^= 0xff;
        assert!(decode_summary(&torn, &header).is_err());
        assert_eq!(SegmentHeader::decode(&[0u8; 4096], 1 << 20), Ok(None));
        // A block reaching into the summary is refused, whatever the checksum says.
        let bad = vec![SummaryEntry {
            key: [1, 1],
            offset_sectors: 16,
            psize: 1024,
        }];
        let bad_summary = encode_summary(&bad);
        let bad_header = SegmentHeader {
            entries: 1,
            summary_checksum: embedded(&bad_summary),
            ..header
        };
        assert!(decode_summary(&bad_summary, &bad_header).is_err());
    }
}
