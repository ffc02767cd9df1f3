//! Dnodes and object-set roots.
//!
//! An object set is an array of objects, each described by a 512-byte dnode. The dnodes live in
//! the data blocks of the object set's *meta-dnode*, which is embedded in the object set's root
//! block (`ObjsetPhys`). Each dnode roots a tree: 1 to `DNODE_BLOCK_POINTERS` top-level block
//! pointers at level `levels - 1`; indirect blocks hold `2^(indirect_shift - 7)` pointers each.
//! A dnode with fewer top-level pointers gives their room to its bonus (a file's attributes
//! need more than 64 bytes): the bonus always starts right after the last pointer.
//!
//! ```text
//! dnode (512 bytes)
//! offset size field
//!      0    1 object type          1 1 levels (0 = free dnode)
//!      2    1 block pointer count  3 1 indirect block shift (log2 bytes)
//!      4    1 checksum algorithm (0 = inherit)   5 1 compression   6 1 flags  7 1 bonus type
//!      8    4 data block size (bytes)            12 2 bonus length  14 2 reserved
//!     16    8 max block id        24 8 used bytes (allocated, all copies)
//!     32    8 birth txg of the object            40 24 reserved
//!     64  384 block pointers[count], then the bonus (448 - 128 * count bytes)
//!         (count 3: pointers at 64, 192, 320 and a 64-byte bonus at 448)
//!
//! object set root (1024 bytes, stored in a 4 KiB block)
//!      0  512 meta-dnode
//!    512    8 object set type      520 8 flags
//!    528  192 intent-log chain header (see `intent_log`)
//!    720  304 reserved
//! ```

use crate::blkptr::{BLOCK_POINTER_SIZE, BlockPointer, ObjectType};
use crate::checksum::ChecksumAlgorithm;
use crate::{BLOCK_SIZE_GRANULE, BLOCK_SIZE_MAX, FormatError};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

pub const DNODE_SIZE: usize = 512;
pub const DNODE_BLOCK_POINTERS: usize = 3;
pub const DNODE_BONUS_SIZE: usize = 64;
/// Bonus room of a dnode with a single top-level block pointer.
pub const DNODE_BONUS_SIZE_MAX: usize = DNODE_BONUS_SIZE + 2 * BLOCK_POINTER_SIZE;
/// Offset of the first block pointer in a dnode.
const DNODE_TAIL_OFFSET: usize = 64;
/// Data block size of the meta-dnode: 32 dnodes per block.
pub const DNODE_BLOCK_SIZE: u32 = 16 * 1024;
pub const DNODES_PER_BLOCK: u64 = (DNODE_BLOCK_SIZE as u64) / (DNODE_SIZE as u64);
/// Indirect blocks are 128 KiB: 1024 block pointers.
pub const INDIRECT_SHIFT_DEFAULT: u8 = 17;
pub const INDIRECT_SHIFT_MIN: u8 = 10;
pub const INDIRECT_SHIFT_MAX: u8 = 17;
pub const OBJSET_PHYS_SIZE: usize = 1024;
/// Size of the block holding an `ObjsetPhys`.
pub const OBJSET_BLOCK_SIZE: u32 = 4096;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct DnodePhys {
    object_type: u8,
    levels: u8,
    block_pointer_count: u8,
    indirect_shift: u8,
    checksum_algorithm: u8,
    compression: u8,
    flags: u8,
    bonus_type: u8,
    data_block_size: U32,
    bonus_len: U16,
    reserved0: [u8; 2],
    max_block_id: U64,
    used_bytes: U64,
    birth_txg: U64,
    reserved1: [u8; 24],
    /// `block_pointer_count` pointers, then the bonus.
    tail: [u8; DNODE_SIZE - DNODE_TAIL_OFFSET],
}

const _: () = assert!(std::mem::size_of::<DnodePhys>() == DNODE_SIZE);
const _: () = assert!(std::mem::offset_of!(DnodePhys, tail) == DNODE_TAIL_OFFSET);
const _: () = assert!(
    DNODE_TAIL_OFFSET + DNODE_BLOCK_POINTERS * BLOCK_POINTER_SIZE + DNODE_BONUS_SIZE == DNODE_SIZE
);
const _: () = assert!((DNODE_BLOCK_SIZE as usize).is_multiple_of(DNODE_SIZE));

/// In-memory form of a dnode. `levels == 0` means the slot is free.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dnode {
    pub object_type: ObjectType,
    pub levels: u8,
    pub indirect_shift: u8,
    /// `None` inherits the dataset's `checksum` property.
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
    pub data_block_size: u32,
    pub max_block_id: u64,
    pub used_bytes: u64,
    pub birth_txg: u64,
    /// Top-level pointers in use (1 to `DNODE_BLOCK_POINTERS`); the rest of `block_pointers`
    /// are holes, and their room on disk belongs to the bonus.
    pub block_pointer_count: u8,
    pub block_pointers: [BlockPointer; DNODE_BLOCK_POINTERS],
    pub bonus: Vec<u8>,
}

impl Dnode {
    pub fn free() -> Dnode {
        Dnode {
            object_type: ObjectType::None,
            levels: 0,
            indirect_shift: INDIRECT_SHIFT_DEFAULT,
            checksum_algorithm: None,
            data_block_size: 0,
            max_block_id: 0,
            used_bytes: 0,
            birth_txg: 0,
            block_pointer_count: DNODE_BLOCK_POINTERS as u8,
            block_pointers: [BlockPointer::HOLE; DNODE_BLOCK_POINTERS],
            bonus: Vec::new(),
        }
    }

    /// Bonus bytes a dnode with `block_pointer_count` top-level pointers can hold.
    pub fn bonus_capacity_for(block_pointer_count: u8) -> usize {
        DNODE_SIZE - DNODE_TAIL_OFFSET - usize::from(block_pointer_count) * BLOCK_POINTER_SIZE
    }

    /// Bonus bytes this dnode can hold.
    pub fn bonus_capacity(&self) -> usize {
        Dnode::bonus_capacity_for(self.block_pointer_count)
    }

    /// Level-0 blocks under each top-level pointer.
    pub fn top_span(&self) -> u64 {
        self.capacity_blocks(self.levels) / u64::from(self.block_pointer_count)
    }

    pub fn is_free(&self) -> bool {
        self.levels == 0
    }

    /// Block pointers per indirect block.
    pub fn pointers_per_indirect(&self) -> u64 {
        1u64 << (self.indirect_shift as u32 - BLOCK_POINTER_SIZE.trailing_zeros())
    }

    /// How many level-0 blocks a tree of `levels` levels can address.
    pub fn capacity_blocks(&self, levels: u8) -> u64 {
        let per = self.pointers_per_indirect();
        let mut span = u64::from(self.block_pointer_count);
        for _ in 1..levels {
            span = span.saturating_mul(per);
        }
        span
    }

    pub fn encode(&self, out: &mut [u8]) {
        assert_eq!(out.len(), DNODE_SIZE);
        let count = usize::from(self.block_pointer_count);
        assert!((1..=DNODE_BLOCK_POINTERS).contains(&count));
        assert!(self.bonus.len() <= self.bonus_capacity());
        assert!(
            self.block_pointers[count..].iter().all(|bp| bp.is_hole()),
            "a pointer past the dnode's count"
        );
        let mut tail = [0u8; DNODE_SIZE - DNODE_TAIL_OFFSET];
        let (pointers, bonus) = tail.split_at_mut(count * BLOCK_POINTER_SIZE);
        for (raw, bp) in pointers
            .chunks_exact_mut(BLOCK_POINTER_SIZE)
            .zip(self.block_pointers.iter())
        {
            bp.encode(raw);
        }
        bonus[..self.bonus.len()].copy_from_slice(&self.bonus);
        let phys = DnodePhys {
            object_type: self.object_type as u8,
            levels: self.levels,
            block_pointer_count: self.block_pointer_count,
            indirect_shift: self.indirect_shift,
            checksum_algorithm: self.checksum_algorithm.map_or(0, |alg| alg as u8),
            compression: 0,
            flags: 0,
            bonus_type: 0,
            data_block_size: self.data_block_size.into(),
            bonus_len: (self.bonus.len() as u16).into(),
            reserved0: [0; 2],
            max_block_id: self.max_block_id.into(),
            used_bytes: self.used_bytes.into(),
            birth_txg: self.birth_txg.into(),
            reserved1: [0; 24],
            tail,
        };
        out.copy_from_slice(phys.as_bytes());
    }

    pub fn decode(bytes: &[u8]) -> Result<Dnode, FormatError> {
        const WHAT: &str = "dnode";
        FormatError::need(WHAT, DNODE_SIZE, bytes.len())?;
        let phys = DnodePhys::read_from_bytes(&bytes[..DNODE_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        if phys.levels == 0 {
            return Ok(Dnode::free());
        }
        let count = usize::from(phys.block_pointer_count);
        if !(1..=DNODE_BLOCK_POINTERS).contains(&count) {
            return Err(FormatError::invalid(
                WHAT,
                "block pointer count",
                u64::from(phys.block_pointer_count),
            ));
        }
        if !(INDIRECT_SHIFT_MIN..=INDIRECT_SHIFT_MAX).contains(&phys.indirect_shift) {
            return Err(FormatError::invalid(
                WHAT,
                "indirect shift",
                u64::from(phys.indirect_shift),
            ));
        }
        let data_block_size = phys.data_block_size.get();
        if data_block_size == 0
            || data_block_size > BLOCK_SIZE_MAX
            || data_block_size % BLOCK_SIZE_GRANULE != 0
        {
            return Err(FormatError::invalid(
                WHAT,
                "data block size",
                u64::from(data_block_size),
            ));
        }
        let bonus_len = phys.bonus_len.get() as usize;
        if bonus_len > Dnode::bonus_capacity_for(phys.block_pointer_count) {
            return Err(FormatError::invalid(WHAT, "bonus length", bonus_len as u64));
        }
        let checksum_algorithm = match phys.checksum_algorithm {
            0 => None,
            value => Some(ChecksumAlgorithm::from_u8(value)?),
        };
        let (pointers, bonus) = phys.tail.split_at(count * BLOCK_POINTER_SIZE);
        let mut block_pointers = [BlockPointer::HOLE; DNODE_BLOCK_POINTERS];
        for (bp, raw) in block_pointers
            .iter_mut()
            .zip(pointers.chunks_exact(BLOCK_POINTER_SIZE))
        {
            *bp = BlockPointer::decode(raw)?;
        }
        let dnode = Dnode {
            object_type: ObjectType::from_u8(phys.object_type)?,
            levels: phys.levels,
            indirect_shift: phys.indirect_shift,
            checksum_algorithm,
            data_block_size,
            max_block_id: phys.max_block_id.get(),
            used_bytes: phys.used_bytes.get(),
            birth_txg: phys.birth_txg.get(),
            block_pointer_count: phys.block_pointer_count,
            block_pointers,
            bonus: bonus[..bonus_len].to_vec(),
        };
        if dnode.levels > crate::blkptr::LEVEL_MAX + 1 {
            return Err(FormatError::invalid(
                WHAT,
                "levels",
                u64::from(dnode.levels),
            ));
        }
        if dnode.max_block_id >= dnode.capacity_blocks(dnode.levels) {
            return Err(FormatError::invalid(
                WHAT,
                "max block id",
                dnode.max_block_id,
            ));
        }
        Ok(dnode)
    }
}

#[repr(u64)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjsetType {
    /// The pool's meta object set.
    Meta = 1,
    Volume = 2,
    /// Reserved: POSIX filesystem.
    Filesystem = 3,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct ObjsetPhysRaw {
    meta_dnode: [u8; DNODE_SIZE],
    objset_type: U64,
    flags: U64,
    intent_log_header: [u8; 192],
    reserved: [u8; 304],
}

const _: () = assert!(std::mem::size_of::<ObjsetPhysRaw>() == OBJSET_PHYS_SIZE);
const _: () = assert!(OBJSET_PHYS_SIZE <= OBJSET_BLOCK_SIZE as usize);

/// Root block of an object set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjsetPhys {
    pub meta_dnode: Dnode,
    pub objset_type: ObjsetType,
    /// The intent log's chain header (`intent_log::IntentLogHeader`); opaque here.
    pub intent_log_header: [u8; 192],
}

impl ObjsetPhys {
    /// Encodes into a full `OBJSET_BLOCK_SIZE` block (zero padded).
    pub fn encode_block(&self) -> Vec<u8> {
        let mut meta_dnode = [0u8; DNODE_SIZE];
        self.meta_dnode.encode(&mut meta_dnode);
        let raw = ObjsetPhysRaw {
            meta_dnode,
            objset_type: (self.objset_type as u64).into(),
            flags: 0.into(),
            intent_log_header: self.intent_log_header,
            reserved: [0; 304],
        };
        let mut block = vec![0u8; OBJSET_BLOCK_SIZE as usize];
        block[..OBJSET_PHYS_SIZE].copy_from_slice(raw.as_bytes());
        block
    }

    pub fn decode(bytes: &[u8]) -> Result<ObjsetPhys, FormatError> {
        const WHAT: &str = "object set";
        FormatError::need(WHAT, OBJSET_PHYS_SIZE, bytes.len())?;
        let raw = ObjsetPhysRaw::read_from_bytes(&bytes[..OBJSET_PHYS_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        let objset_type = match raw.objset_type.get() {
            1 => ObjsetType::Meta,
            2 => ObjsetType::Volume,
            3 => ObjsetType::Filesystem,
            other => return Err(FormatError::invalid(WHAT, "type", other)),
        };
        let meta_dnode = Dnode::decode(&raw.meta_dnode)?;
        if !meta_dnode.is_free()
            && (meta_dnode.object_type != ObjectType::DnodeBlock
                || meta_dnode.data_block_size != DNODE_BLOCK_SIZE)
        {
            return Err(FormatError::invalid(
                WHAT,
                "meta-dnode type",
                meta_dnode.object_type as u64,
            ));
        }
        Ok(ObjsetPhys {
            meta_dnode,
            objset_type,
            intent_log_header: raw.intent_log_header,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn volume_dnode() -> Dnode {
        Dnode {
            object_type: ObjectType::VolumeData,
            levels: 2,
            indirect_shift: INDIRECT_SHIFT_DEFAULT,
            checksum_algorithm: Some(ChecksumAlgorithm::Sha256),
            data_block_size: 8192,
            max_block_id: 2000,
            used_bytes: 12345 * 512,
            birth_txg: 7,
            block_pointer_count: 3,
            block_pointers: [BlockPointer::HOLE; 3],
            bonus: vec![1, 2, 3],
        }
    }

    #[test]
    fn dnode_round_trip_keeps_every_field() {
        let dnode = volume_dnode();
        let mut raw = [0u8; DNODE_SIZE];
        dnode.encode(&mut raw);
        assert_eq!(Dnode::decode(&raw).unwrap(), dnode);
    }

    #[test]
    fn one_pointer_dnode_gives_its_room_to_the_bonus() {
        let mut dnode = volume_dnode();
        dnode.block_pointer_count = 1;
        dnode.max_block_id = 1000;
        dnode.bonus = (0..DNODE_BONUS_SIZE_MAX).map(|i| i as u8).collect();
        assert_eq!(dnode.bonus_capacity(), DNODE_BONUS_SIZE_MAX);
        let mut raw = [0u8; DNODE_SIZE];
        dnode.encode(&mut raw);
        // The bonus starts right after the one pointer.
        assert_eq!(raw[DNODE_TAIL_OFFSET + BLOCK_POINTER_SIZE], 0);
        assert_eq!(raw[DNODE_SIZE - 1], (DNODE_BONUS_SIZE_MAX - 1) as u8);
        assert_eq!(Dnode::decode(&raw).unwrap(), dnode);
        assert_eq!(dnode.capacity_blocks(2), 1024);
        assert_eq!(dnode.top_span(), 1024);
        // A bonus longer than the count leaves room for is refused.
        raw[2] = 2;
        assert!(Dnode::decode(&raw).is_err());
        raw[2] = 0;
        assert!(Dnode::decode(&raw).is_err());
    }

    #[test]
    fn capacity_grows_by_pointers_per_indirect_each_level() {
        let dnode = volume_dnode();
        assert_eq!(dnode.pointers_per_indirect(), 1024);
        assert_eq!(dnode.capacity_blocks(1), 3);
        assert_eq!(dnode.capacity_blocks(2), 3 * 1024);
        assert_eq!(dnode.capacity_blocks(3), 3 * 1024 * 1024);
    }

    #[test]
    fn objset_round_trip() {
        let mut meta = Dnode::free();
        meta.object_type = ObjectType::DnodeBlock;
        meta.levels = 1;
        meta.data_block_size = DNODE_BLOCK_SIZE;
        let objset = ObjsetPhys {
            meta_dnode: meta,
            objset_type: ObjsetType::Volume,
            intent_log_header: [9; 192],
        };
        let block = objset.encode_block();
        assert_eq!(block.len(), OBJSET_BLOCK_SIZE as usize);
        assert_eq!(ObjsetPhys::decode(&block).unwrap(), objset);
    }

    proptest! {
        #[test]
        fn dnode_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = Dnode::decode(&bytes);
        }

        #[test]
        fn objset_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let _ = ObjsetPhys::decode(&bytes);
        }
    }
}
