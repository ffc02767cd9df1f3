//! Block pointers: the 128-byte edges of the on-disk Merkle tree.
//!
//! ```text
//! offset size field
//!      0   48 dva[3]: { vdev u32, asize u32 (bytes), offset u64 (bytes from vdev start) }
//!     48    4 lsize (logical bytes)
//!     52    4 psize (physical bytes, after compression)
//!     56    1 compression        57 1 checksum algorithm
//!     58    1 object type        59 1 level (0 = data, >0 = indirect)
//!     60    1 flags (reserved: dedup, embedded)     61 3 reserved
//!     64    8 birth txg (logical)
//!     72    8 physical birth txg (reserved for relocation / dedup)
//!     80    8 fill (non-hole level-0 blocks beneath)
//!     88    8 reserved
//!     96   32 checksum of the psize bytes at each DVA
//! ```
//!
//! A hole is the all-zero pointer (birth txg 0). A non-hole pointer has at least one DVA, and its
//! DVAs are packed at the front. A DVA's offset is relative to the top-level vdev's data region
//! start; its vdev number names a top-level vdev (leaf, mirror, or later raidz).

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::{BLOCK_SIZE_GRANULE, BLOCK_SIZE_MAX, FormatError};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

pub const BLOCK_POINTER_SIZE: usize = 128;
/// Copies (DVAs) one block pointer can carry.
pub const DVA_COUNT_MAX: usize = 3;
/// Deepest indirect level a tree may have.
pub const LEVEL_MAX: u8 = 8;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Default)]
#[repr(C)]
struct DvaPhys {
    vdev: U32,
    asize: U32,
    offset: U64,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct BlockPointerPhys {
    dvas: [DvaPhys; DVA_COUNT_MAX],
    lsize: U32,
    psize: U32,
    compression: u8,
    checksum_algorithm: u8,
    object_type: u8,
    level: u8,
    flags: u8,
    reserved0: [u8; 3],
    birth_txg: U64,
    physical_birth_txg: U64,
    fill: U64,
    reserved1: U64,
    checksum: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<DvaPhys>() == 16);
const _: () = assert!(std::mem::size_of::<BlockPointerPhys>() == BLOCK_POINTER_SIZE);

/// One copy of a block: where it lives on which top-level vdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Dva {
    pub vdev: u32,
    /// Bytes from the start of the vdev's data region.
    pub offset: u64,
    /// Allocated bytes (psize rounded up to the vdev's sector size).
    pub asize: u32,
}

#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    #[default]
    Off = 0,
    /// lz4 block format behind a length header (`docs/format.md`, "Compression").
    Lz4 = 1,
    /// Reserved: not yet written by this build.
    Zstd = 2,
}

impl Compression {
    pub fn from_u8(value: u8) -> Result<Self, FormatError> {
        match value {
            0 => Ok(Self::Off),
            1 => Ok(Self::Lz4),
            2 => Ok(Self::Zstd),
            other => Err(FormatError::invalid(
                "block pointer",
                "compression",
                u64::from(other),
            )),
        }
    }
}

/// What a block holds. Indirect blocks carry the type of the object whose tree they belong to.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum ObjectType {
    #[default]
    None = 0,
    /// Root block of an object set (`ObjsetPhys`).
    ObjsetRoot = 1,
    /// A block of the meta-dnode: an array of dnodes.
    DnodeBlock = 2,
    /// The pool's dataset directory (a postcard blob in the MOS).
    DatasetDirectory = 3,
    /// Contents of a block volume.
    VolumeData = 4,
    /// A space-log block (allocation and free records).
    SpaceLog = 5,
    /// Reserved: intent-log blocks.
    IntentLog = 6,
    /// File contents (and symlink targets).
    FileData = 7,
    /// Directory entries (a hashed map, see `cairn-fs`).
    Directory = 8,
    /// Reserved: dedup table.
    DedupTable = 9,
    /// Reserved: snapshot dead lists.
    DeadList = 10,
    /// Pool-wide records: scrub results, history.
    PoolRecords = 11,
    /// A filesystem's master node: where its root directory and delete queue are.
    FsMaster = 12,
    /// An inode's extended attributes (a hashed map, as directories).
    Xattrs = 13,
    /// One extended attribute value too large for its map's entry (a blob: length in the
    /// bonus).
    XattrValue = 14,
    /// The pool's snapshot table: a hashed map in the MOS (`cairn-engine`'s snapshot_sync).
    SnapshotTable = 15,
    /// One snapshot-table record too large for its map entry (a blob: length in the bonus).
    SnapshotRecord = 16,
}

impl ObjectType {
    pub fn from_u8(value: u8) -> Result<Self, FormatError> {
        Ok(match value {
            0 => Self::None,
            1 => Self::ObjsetRoot,
            2 => Self::DnodeBlock,
            3 => Self::DatasetDirectory,
            4 => Self::VolumeData,
            5 => Self::SpaceLog,
            6 => Self::IntentLog,
            7 => Self::FileData,
            8 => Self::Directory,
            9 => Self::DedupTable,
            10 => Self::DeadList,
            11 => Self::PoolRecords,
            12 => Self::FsMaster,
            13 => Self::Xattrs,
            14 => Self::XattrValue,
            15 => Self::SnapshotTable,
            16 => Self::SnapshotRecord,
            other => {
                return Err(FormatError::invalid(
                    "object type",
                    "value",
                    u64::from(other),
                ));
            }
        })
    }

    /// User data is stored with one copy by default; everything else is metadata and gets ditto
    /// copies, because losing it loses everything beneath it.
    pub fn is_metadata(self, level: u8) -> bool {
        level > 0 || !matches!(self, Self::VolumeData | Self::FileData)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BlockPointer {
    pub dvas: [Dva; DVA_COUNT_MAX],
    pub lsize: u32,
    pub psize: u32,
    pub compression: Compression,
    pub checksum_algorithm: ChecksumAlgorithm,
    pub object_type: ObjectType,
    pub level: u8,
    pub birth_txg: u64,
    pub fill: u64,
    pub checksum: Checksum,
}

impl BlockPointer {
    pub const HOLE: BlockPointer = BlockPointer {
        dvas: [Dva {
            vdev: 0,
            offset: 0,
            asize: 0,
        }; DVA_COUNT_MAX],
        lsize: 0,
        psize: 0,
        compression: Compression::Off,
        checksum_algorithm: ChecksumAlgorithm::Fletcher4,
        object_type: ObjectType::None,
        level: 0,
        birth_txg: 0,
        fill: 0,
        checksum: Checksum([0; 32]),
    };

    pub fn is_hole(&self) -> bool {
        self.birth_txg == 0
    }

    /// The valid copies, in order.
    pub fn copies(&self) -> &[Dva] {
        let count = self.dvas.iter().take_while(|dva| dva.asize != 0).count();
        &self.dvas[..count]
    }

    /// Bytes this pointer's copies occupy on disk.
    pub fn allocated_bytes(&self) -> u64 {
        self.copies().iter().map(|dva| u64::from(dva.asize)).sum()
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert_eq!(out.len(), BLOCK_POINTER_SIZE);
        if self.is_hole() {
            out.fill(0);
            return;
        }
        let mut dvas = [DvaPhys::default(); DVA_COUNT_MAX];
        for (phys, dva) in dvas.iter_mut().zip(self.dvas.iter()) {
            *phys = DvaPhys {
                vdev: dva.vdev.into(),
                asize: dva.asize.into(),
                offset: dva.offset.into(),
            };
        }
        let phys = BlockPointerPhys {
            dvas,
            lsize: self.lsize.into(),
            psize: self.psize.into(),
            compression: self.compression as u8,
            checksum_algorithm: self.checksum_algorithm as u8,
            object_type: self.object_type as u8,
            level: self.level,
            flags: 0,
            reserved0: [0; 3],
            birth_txg: self.birth_txg.into(),
            physical_birth_txg: self.birth_txg.into(),
            fill: self.fill.into(),
            reserved1: 0.into(),
            checksum: self.checksum.0,
        };
        out.copy_from_slice(phys.as_bytes());
    }

    pub fn to_bytes(&self) -> [u8; BLOCK_POINTER_SIZE] {
        let mut out = [0u8; BLOCK_POINTER_SIZE];
        self.encode(&mut out);
        out
    }

    /// Decodes and validates one pointer. The all-zero pointer decodes as a hole; anything else
    /// must be internally consistent (known enums, sizes within limits, packed DVAs whose
    /// allocation covers the physical size).
    pub fn decode(bytes: &[u8]) -> Result<BlockPointer, FormatError> {
        const WHAT: &str = "block pointer";
        FormatError::need(WHAT, BLOCK_POINTER_SIZE, bytes.len())?;
        let phys = BlockPointerPhys::read_from_bytes(&bytes[..BLOCK_POINTER_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        let birth_txg = phys.birth_txg.get();
        if birth_txg == 0 {
            if bytes[..BLOCK_POINTER_SIZE].iter().any(|&b| b != 0) {
                return Err(FormatError::invalid(WHAT, "hole with non-zero fields", 0));
            }
            return Ok(BlockPointer::HOLE);
        }
        let lsize = phys.lsize.get();
        let psize = phys.psize.get();
        for (field, size) in [("lsize", lsize), ("psize", psize)] {
            if size == 0 || size > BLOCK_SIZE_MAX || size % BLOCK_SIZE_GRANULE != 0 {
                return Err(FormatError::invalid(WHAT, field, u64::from(size)));
            }
        }
        if phys.level > LEVEL_MAX {
            return Err(FormatError::invalid(WHAT, "level", u64::from(phys.level)));
        }
        if phys.flags != 0 {
            return Err(FormatError::invalid(WHAT, "flags", u64::from(phys.flags)));
        }
        let mut dvas = [Dva::default(); DVA_COUNT_MAX];
        let mut seen_empty = false;
        for (dva, raw) in dvas.iter_mut().zip(phys.dvas.iter()) {
            let asize = raw.asize.get();
            if asize == 0 {
                seen_empty = true;
                if raw.vdev.get() != 0 || raw.offset.get() != 0 {
                    return Err(FormatError::invalid(WHAT, "empty dva with fields", 0));
                }
                continue;
            }
            if seen_empty {
                return Err(FormatError::invalid(WHAT, "dva after empty dva", 0));
            }
            if asize < psize || asize > BLOCK_SIZE_MAX {
                return Err(FormatError::invalid(WHAT, "dva asize", u64::from(asize)));
            }
            let offset = raw.offset.get();
            if offset.checked_add(u64::from(asize)).is_none() {
                return Err(FormatError::invalid(WHAT, "dva offset", offset));
            }
            *dva = Dva {
                vdev: raw.vdev.get(),
                offset,
                asize,
            };
        }
        if dvas[0].asize == 0 {
            return Err(FormatError::invalid(WHAT, "dva count", 0));
        }
        Ok(BlockPointer {
            dvas,
            lsize,
            psize,
            compression: Compression::from_u8(phys.compression)?,
            checksum_algorithm: ChecksumAlgorithm::from_u8(phys.checksum_algorithm)?,
            object_type: ObjectType::from_u8(phys.object_type)?,
            level: phys.level,
            birth_txg,
            fill: phys.fill.get(),
            checksum: Checksum(phys.checksum),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> BlockPointer {
        BlockPointer {
            dvas: [
                Dva {
                    vdev: 1,
                    offset: 1 << 20,
                    asize: 8192,
                },
                Dva {
                    vdev: 0,
                    offset: 77 << 12,
                    asize: 8192,
                },
                Dva::default(),
            ],
            lsize: 8192,
            psize: 8192,
            compression: Compression::Off,
            checksum_algorithm: ChecksumAlgorithm::Blake3,
            object_type: ObjectType::VolumeData,
            level: 0,
            birth_txg: 42,
            fill: 1,
            checksum: ChecksumAlgorithm::Blake3.compute(b"x"),
        }
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let bp = sample();
        let decoded = BlockPointer::decode(&bp.to_bytes()).unwrap();
        assert_eq!(decoded, bp);
        assert_eq!(decoded.copies().len(), 2);
        assert_eq!(decoded.allocated_bytes(), 16384);
    }

    #[test]
    fn hole_is_all_zero_and_round_trips() {
        assert!(BlockPointer::HOLE.to_bytes().iter().all(|&b| b == 0));
        assert!(BlockPointer::decode(&[0u8; 128]).unwrap().is_hole());
    }

    #[test]
    fn gap_between_dvas_is_rejected() {
        let mut bp = sample();
        bp.dvas[2] = bp.dvas[1];
        bp.dvas[1] = Dva::default();
        assert!(BlockPointer::decode(&bp.to_bytes()).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = BlockPointer::decode(&bytes);
        }

        #[test]
        fn decoded_pointers_reencode_identically(bytes in proptest::collection::vec(any::<u8>(), 128)) {
            if let Ok(bp) = BlockPointer::decode(&bytes) {
                let again = BlockPointer::decode(&bp.to_bytes()).unwrap();
                prop_assert_eq!(again, bp);
            }
        }
    }
}
