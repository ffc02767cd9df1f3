//! The space log: a pool-wide, append-only record of allocations and frees.
//!
//! Each synced txg appends one or more *delta* blocks listing every extent allocated or freed in
//! that txg (including the space-log block's own allocation). Blocks are chained newest to oldest
//! through `prev`; the uberblock points at the newest. When the chain grows long, a *checkpoint*
//! is written instead: the complete set of allocated extents (and frees still inside the defer
//! window), after which the older chain is freed. Replaying a chain from its checkpoint start
//! forward rebuilds every metaslab's allocated set.
//!
//! ```text
//! block header (192 bytes)
//!   0  8 magic            8 8 kind (1 delta, 2 checkpoint, 3 checkpoint start)
//!  16  8 txg             24 8 entry count
//!  32  8 sequence (blocks since the checkpoint start)      40 24 reserved
//!  64 128 previous block pointer (hole at a checkpoint start)
//! entry (32 bytes), repeated
//!   0  4 vdev   4 1 op (1 alloc, 2 free)   5 3 reserved
//!   8  8 offset 16 8 length  24 8 txg of the change
//! ```

use crate::FormatError;
use crate::blkptr::{BLOCK_POINTER_SIZE, BlockPointer};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

pub const SPACE_LOG_MAGIC: u64 = 0x676f_6c70_7372_6163; // "carsplog"
pub const SPACE_LOG_HEADER_SIZE: usize = 192;
pub const SPACE_LOG_ENTRY_SIZE: usize = 32;
/// Size of one space-log block.
pub const SPACE_LOG_BLOCK_SIZE: u32 = 128 * 1024;
pub const SPACE_LOG_ENTRIES_PER_BLOCK: usize =
    (SPACE_LOG_BLOCK_SIZE as usize - SPACE_LOG_HEADER_SIZE) / SPACE_LOG_ENTRY_SIZE;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct HeaderPhys {
    magic: U64,
    kind: U64,
    txg: U64,
    entry_count: U64,
    sequence: U64,
    reserved: [u8; 24],
    prev: [u8; BLOCK_POINTER_SIZE],
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct EntryPhys {
    vdev: U32,
    op: u8,
    reserved: [u8; 3],
    offset: U64,
    length: U64,
    txg: U64,
}

const _: () = assert!(std::mem::size_of::<HeaderPhys>() == SPACE_LOG_HEADER_SIZE);
const _: () = assert!(std::mem::size_of::<EntryPhys>() == SPACE_LOG_ENTRY_SIZE);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpaceLogKind {
    Delta = 1,
    Checkpoint = 2,
    CheckpointStart = 3,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SpaceOp {
    Alloc = 1,
    Free = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceLogEntry {
    pub vdev: u32,
    pub op: SpaceOp,
    pub offset: u64,
    pub length: u64,
    pub txg: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceLogBlock {
    pub kind: SpaceLogKind,
    pub txg: u64,
    pub sequence: u64,
    pub prev: BlockPointer,
    pub entries: Vec<SpaceLogEntry>,
}

impl SpaceLogBlock {
    /// Encoded size rounded up to `granule` bytes (the pool's sector size).
    pub fn encoded_size(entry_count: usize, granule: u32) -> u32 {
        let raw = SPACE_LOG_HEADER_SIZE + entry_count * SPACE_LOG_ENTRY_SIZE;
        let granule = granule as usize;
        raw.div_ceil(granule).saturating_mul(granule) as u32
    }

    pub fn encode(&self, granule: u32) -> Vec<u8> {
        assert!(self.entries.len() <= SPACE_LOG_ENTRIES_PER_BLOCK);
        let header = HeaderPhys {
            magic: SPACE_LOG_MAGIC.into(),
            kind: (self.kind as u64).into(),
            txg: self.txg.into(),
            entry_count: (self.entries.len() as u64).into(),
            sequence: self.sequence.into(),
            reserved: [0; 24],
            prev: self.prev.to_bytes(),
        };
        let mut out = vec![0u8; Self::encoded_size(self.entries.len(), granule) as usize];
        out[..SPACE_LOG_HEADER_SIZE].copy_from_slice(header.as_bytes());
        for (slot, entry) in out[SPACE_LOG_HEADER_SIZE..]
            .chunks_exact_mut(SPACE_LOG_ENTRY_SIZE)
            .zip(self.entries.iter())
        {
            let phys = EntryPhys {
                vdev: entry.vdev.into(),
                op: entry.op as u8,
                reserved: [0; 3],
                offset: entry.offset.into(),
                length: entry.length.into(),
                txg: entry.txg.into(),
            };
            slot.copy_from_slice(phys.as_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<SpaceLogBlock, FormatError> {
        const WHAT: &str = "space log block";
        FormatError::need(WHAT, SPACE_LOG_HEADER_SIZE, bytes.len())?;
        let header = HeaderPhys::read_from_bytes(&bytes[..SPACE_LOG_HEADER_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        if header.magic.get() != SPACE_LOG_MAGIC {
            return Err(FormatError::BadMagic {
                what: WHAT,
                found: header.magic.get(),
            });
        }
        let kind = match header.kind.get() {
            1 => SpaceLogKind::Delta,
            2 => SpaceLogKind::Checkpoint,
            3 => SpaceLogKind::CheckpointStart,
            other => return Err(FormatError::invalid(WHAT, "kind", other)),
        };
        let count = header.entry_count.get();
        let room = ((bytes.len() - SPACE_LOG_HEADER_SIZE) / SPACE_LOG_ENTRY_SIZE) as u64;
        if count > room || count > SPACE_LOG_ENTRIES_PER_BLOCK as u64 {
            return Err(FormatError::invalid(WHAT, "entry count", count));
        }
        let mut entries = Vec::with_capacity(count as usize);
        for raw in bytes[SPACE_LOG_HEADER_SIZE..]
            .chunks_exact(SPACE_LOG_ENTRY_SIZE)
            .take(count as usize)
        {
            let phys = EntryPhys::read_from_bytes(raw)
                .map_err(|_| FormatError::invalid(WHAT, "entry layout", 0))?;
            let op = match phys.op {
                1 => SpaceOp::Alloc,
                2 => SpaceOp::Free,
                other => return Err(FormatError::invalid(WHAT, "op", u64::from(other))),
            };
            let (offset, length) = (phys.offset.get(), phys.length.get());
            if length == 0 || offset.checked_add(length).is_none() {
                return Err(FormatError::invalid(WHAT, "extent", offset));
            }
            entries.push(SpaceLogEntry {
                vdev: phys.vdev.get(),
                op,
                offset,
                length,
                txg: phys.txg.get(),
            });
        }
        let prev = BlockPointer::decode(&header.prev)?;
        if kind == SpaceLogKind::CheckpointStart && !prev.is_hole() {
            return Err(FormatError::invalid(WHAT, "checkpoint start with prev", 0));
        }
        Ok(SpaceLogBlock {
            kind,
            txg: header.txg.get(),
            sequence: header.sequence.get(),
            prev,
            entries,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_with_entries() {
        let block = SpaceLogBlock {
            kind: SpaceLogKind::Delta,
            txg: 12,
            sequence: 4,
            prev: BlockPointer::HOLE,
            entries: (0..100)
                .map(|i| SpaceLogEntry {
                    vdev: i % 3,
                    op: if i % 2 == 0 {
                        SpaceOp::Alloc
                    } else {
                        SpaceOp::Free
                    },
                    offset: u64::from(i) << 12,
                    length: 4096,
                    txg: 12,
                })
                .collect(),
        };
        let bytes = block.encode(4096);
        assert_eq!(bytes.len() % 4096, 0);
        assert_eq!(SpaceLogBlock::decode(&bytes).unwrap(), block);
    }

    #[test]
    fn a_count_larger_than_the_block_is_rejected() {
        let block = SpaceLogBlock {
            kind: SpaceLogKind::Delta,
            txg: 1,
            sequence: 0,
            prev: BlockPointer::HOLE,
            entries: vec![],
        };
        let mut bytes = block.encode(512);
        bytes[24] = 0xff;
        assert!(SpaceLogBlock::decode(&bytes).is_err());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
            let _ = SpaceLogBlock::decode(&bytes);
        }
    }
}
