//! The intent log on disk: chains of self-checksummed log blocks, and the per-dataset chain
//! header kept in the object-set root.
//!
//! A dataset has up to `INTENT_LOG_LANES_MAX` independent chains ("lanes"). The chain header in
//! the object set names, for each lane, the chain's random guid and the address and sequence
//! number of its oldest block still needed. Every log block carries the address of the *next*
//! block, allocated before this one was written, so a commit is one write (plus one flush) and
//! never updates a header. There is no end marker: a chain ends at the first block that does not
//! decode, does not verify, or carries the wrong pool guid, chain guid, lane or sequence number.
//! Since a chain's sequence numbers only grow and every chain gets a fresh guid, a stale block
//! left at a pre-allocated address can never be taken for the next one.
//!
//! ```text
//! log block (sector multiple, at most 128 KiB; only the used part is written)
//!   0  8 magic "cairnzil"        8  8 pool guid
//!  16  8 chain guid             24  8 block sequence (1 = first block of the chain)
//!  32  4 lane                   36  4 record count
//!  40  4 used bytes (header + records)                   44  4 reserved
//!  48 16 next block DVA (vdev u32, asize u32, offset u64: as in a block pointer)
//!  64 32 BLAKE3 of the used bytes with this field zeroed
//!  96 32 reserved
//! record (48-byte header, then the payload padded to 8 bytes)
//!   0  1 kind (1 write, 2 zero, 3 trim, 4 write in place)   1 7 reserved
//!   8  8 sequence (dataset-wide, orders records of all lanes)
//!  16  8 txg the change joined           24  8 object
//!  32  8 offset (bytes)                  40  8 length (bytes; writes carry this many bytes)
//!  write-in-place records carry a 128-byte block pointer instead: the block was written to its
//!  final place (durably, before the record) and only its address and checksum are logged
//! chain header (192 bytes, in the object-set root)
//!   0  4 version (1)  4 4 lane count   8 8 reserved
//!  16 + 32 × lane: chain guid u64 (0 = no chain), head sequence u64, head DVA (16)
//! ```

use crate::FormatError;
use crate::blkptr::{BLOCK_POINTER_SIZE, BlockPointer, Dva};
use crate::checksum::embedded;
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

pub const INTENT_LOG_MAGIC: u64 = 0x6c69_7a6e_7269_6163; // "cairnzil"
pub const LOG_BLOCK_HEADER_SIZE: usize = 128;
pub const LOG_RECORD_HEADER_SIZE: usize = 48;
/// Largest log block.
pub const LOG_BLOCK_SIZE_MAX: u32 = 128 * 1024;
/// Smallest log block.
pub const LOG_BLOCK_SIZE_MIN: u32 = 4096;
/// Most payload bytes one record can carry (a full block minus the headers, 8-byte aligned).
pub const LOG_RECORD_PAYLOAD_MAX: usize =
    (LOG_BLOCK_SIZE_MAX as usize - LOG_BLOCK_HEADER_SIZE - LOG_RECORD_HEADER_SIZE) & !7;
/// Independent chains one dataset may have.
pub const INTENT_LOG_LANES_MAX: usize = 4;
pub const INTENT_LOG_HEADER_SIZE: usize = 192;
pub const INTENT_LOG_HEADER_VERSION: u32 = 1;
const LANE_HEADER_SIZE: usize = 32;
const CHECKSUM_RANGE: std::ops::Range<usize> = 64..96;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct BlockHeaderPhys {
    magic: U64,
    pool_guid: U64,
    chain_guid: U64,
    sequence: U64,
    lane: U32,
    record_count: U32,
    used_bytes: U32,
    reserved0: U32,
    next_vdev: U32,
    next_asize: U32,
    next_offset: U64,
    checksum: [u8; 32],
    reserved1: [u8; 32],
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct RecordHeaderPhys {
    kind: u8,
    reserved: [u8; 7],
    sequence: U64,
    txg: U64,
    object: U64,
    offset: U64,
    length: U64,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Default)]
#[repr(C)]
struct LanePhys {
    chain_guid: U64,
    head_sequence: U64,
    head_vdev: U32,
    head_asize: U32,
    head_offset: U64,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct ChainHeaderPhys {
    version: U32,
    lane_count: U32,
    reserved: U64,
    lanes: [LanePhys; INTENT_LOG_LANES_MAX],
    spare: [u8; INTENT_LOG_HEADER_SIZE - 16 - LANE_HEADER_SIZE * INTENT_LOG_LANES_MAX],
}

const _: () = assert!(std::mem::size_of::<BlockHeaderPhys>() == LOG_BLOCK_HEADER_SIZE);
const _: () = assert!(std::mem::size_of::<RecordHeaderPhys>() == LOG_RECORD_HEADER_SIZE);
const _: () = assert!(std::mem::size_of::<LanePhys>() == LANE_HEADER_SIZE);
const _: () = assert!(std::mem::size_of::<ChainHeaderPhys>() == INTENT_LOG_HEADER_SIZE);
const _: () = assert!(LOG_RECORD_PAYLOAD_MAX.is_multiple_of(8));

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogRecordKind {
    Write = 1,
    Zero = 2,
    Trim = 3,
    /// A whole block written to its final place before the record: the payload is its block
    /// pointer (`BLOCK_POINTER_SIZE` bytes), `offset` and `length` the range it covers.
    WriteInPlace = 4,
    /// A filesystem change (create, link, remove, rename, attributes, extended attributes,
    /// fallocate): the payload (`length` bytes) is the change as `cairn-fs` encodes it;
    /// `offset` is 0 and `object` the inode it is about.
    Fs = 5,
}

impl LogRecordKind {
    /// Payload bytes a record of this kind covering `length` bytes carries.
    pub fn payload_bytes(self, length: u64) -> usize {
        match self {
            LogRecordKind::Write | LogRecordKind::Fs => length as usize,
            LogRecordKind::Zero | LogRecordKind::Trim => 0,
            LogRecordKind::WriteInPlace => BLOCK_POINTER_SIZE,
        }
    }
}

/// One logged operation. `data` is the payload: `length` bytes for writes, the encoded block
/// pointer for writes in place, nothing otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub kind: LogRecordKind,
    pub sequence: u64,
    pub txg: u64,
    pub object: u64,
    pub offset: u64,
    pub length: u64,
    pub data: Vec<u8>,
}

impl LogRecord {
    /// Bytes this record takes in a block.
    pub fn encoded_size(&self) -> usize {
        Self::encoded_size_for(self.data.len())
    }

    pub fn encoded_size_for(payload_bytes: usize) -> usize {
        LOG_RECORD_HEADER_SIZE + payload_bytes.div_ceil(8) * 8
    }

    /// A write-in-place record for the block at `bp`, covering `offset .. offset + bp.lsize`.
    pub fn write_in_place(
        sequence: u64,
        txg: u64,
        object: u64,
        offset: u64,
        bp: &BlockPointer,
    ) -> LogRecord {
        assert!(!bp.is_hole(), "a write in place needs a block");
        assert_eq!(
            bp.birth_txg, txg,
            "a block written in place is born in its record's txg"
        );
        LogRecord {
            kind: LogRecordKind::WriteInPlace,
            sequence,
            txg,
            object,
            offset,
            length: u64::from(bp.lsize),
            data: bp.to_bytes().to_vec(),
        }
    }

    /// The block pointer of a write-in-place record (decoding verified it).
    pub fn block_pointer(&self) -> Option<BlockPointer> {
        (self.kind == LogRecordKind::WriteInPlace)
            .then(|| BlockPointer::decode(&self.data).ok())
            .flatten()
    }
}

/// Identity a block must carry to be the next block of a chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainPosition {
    pub pool_guid: u64,
    pub chain_guid: u64,
    pub lane: u32,
    pub sequence: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlock {
    pub position: ChainPosition,
    /// Where the next block of the chain will be written (pre-allocated).
    pub next: Dva,
    pub records: Vec<LogRecord>,
}

impl LogBlock {
    /// Bytes the header and `records` take, before rounding to the sector.
    pub fn used_bytes(records: &[LogRecord]) -> usize {
        LOG_BLOCK_HEADER_SIZE + records.iter().map(LogRecord::encoded_size).sum::<usize>()
    }

    /// Encodes, zero-padded to a multiple of `granule`. Panics if the records do not fit in
    /// `LOG_BLOCK_SIZE_MAX` or a write's data length differs from its length field (caller bugs).
    pub fn encode(&self, granule: u32) -> Vec<u8> {
        let used = Self::used_bytes(&self.records);
        assert!(used <= LOG_BLOCK_SIZE_MAX as usize, "log block overfull");
        let granule = granule.max(1) as usize;
        let mut out = vec![0u8; used.div_ceil(granule) * granule];
        let mut cursor = LOG_BLOCK_HEADER_SIZE;
        for record in &self.records {
            let expected = record.kind.payload_bytes(record.length);
            assert_eq!(record.data.len(), expected, "record payload length");
            let phys = RecordHeaderPhys {
                kind: record.kind as u8,
                reserved: [0; 7],
                sequence: record.sequence.into(),
                txg: record.txg.into(),
                object: record.object.into(),
                offset: record.offset.into(),
                length: record.length.into(),
            };
            out[cursor..cursor + LOG_RECORD_HEADER_SIZE].copy_from_slice(phys.as_bytes());
            let payload = cursor + LOG_RECORD_HEADER_SIZE;
            out[payload..payload + record.data.len()].copy_from_slice(&record.data);
            cursor += record.encoded_size();
        }
        let header = BlockHeaderPhys {
            magic: INTENT_LOG_MAGIC.into(),
            pool_guid: self.position.pool_guid.into(),
            chain_guid: self.position.chain_guid.into(),
            sequence: self.position.sequence.into(),
            lane: self.position.lane.into(),
            record_count: (self.records.len() as u32).into(),
            used_bytes: (used as u32).into(),
            reserved0: 0.into(),
            next_vdev: self.next.vdev.into(),
            next_asize: self.next.asize.into(),
            next_offset: self.next.offset.into(),
            checksum: [0; 32],
            reserved1: [0; 32],
        };
        out[..LOG_BLOCK_HEADER_SIZE].copy_from_slice(header.as_bytes());
        let checksum = embedded(&out[..used]);
        out[CHECKSUM_RANGE].copy_from_slice(&checksum);
        out
    }

    /// Decodes a block that must be the one at `expected` in its chain. Any mismatch (magic,
    /// checksum, pool, chain, lane, sequence, record layout, records not filling exactly the
    /// used bytes) is an error: the chain ends here.
    pub fn decode(bytes: &[u8], expected: &ChainPosition) -> Result<LogBlock, FormatError> {
        const WHAT: &str = "log block";
        FormatError::need(WHAT, LOG_BLOCK_HEADER_SIZE, bytes.len())?;
        let header = BlockHeaderPhys::read_from_bytes(&bytes[..LOG_BLOCK_HEADER_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        if header.magic.get() != INTENT_LOG_MAGIC {
            return Err(FormatError::BadMagic {
                what: WHAT,
                found: header.magic.get(),
            });
        }
        let used = header.used_bytes.get() as usize;
        if used < LOG_BLOCK_HEADER_SIZE || used > bytes.len() || used > LOG_BLOCK_SIZE_MAX as usize
        {
            return Err(FormatError::invalid(WHAT, "used bytes", used as u64));
        }
        let mut zeroed = bytes[..used].to_vec();
        zeroed[CHECKSUM_RANGE].fill(0);
        if embedded(&zeroed) != header.checksum {
            return Err(FormatError::ChecksumMismatch { what: WHAT });
        }
        let position = ChainPosition {
            pool_guid: header.pool_guid.get(),
            chain_guid: header.chain_guid.get(),
            lane: header.lane.get(),
            sequence: header.sequence.get(),
        };
        if position != *expected {
            return Err(FormatError::invalid(
                WHAT,
                "chain position",
                position.sequence,
            ));
        }
        let records = decode_records(
            &bytes[LOG_BLOCK_HEADER_SIZE..used],
            header.record_count.get(),
        )?;
        Ok(LogBlock {
            position,
            next: Dva {
                vdev: header.next_vdev.get(),
                offset: header.next_offset.get(),
                asize: header.next_asize.get(),
            },
            records,
        })
    }
}

fn decode_records(mut bytes: &[u8], count: u32) -> Result<Vec<LogRecord>, FormatError> {
    const WHAT: &str = "log record";
    let mut records = Vec::new();
    for _ in 0..count {
        FormatError::need(WHAT, LOG_RECORD_HEADER_SIZE, bytes.len())?;
        let phys = RecordHeaderPhys::read_from_bytes(&bytes[..LOG_RECORD_HEADER_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        let kind = match phys.kind {
            1 => LogRecordKind::Write,
            2 => LogRecordKind::Zero,
            3 => LogRecordKind::Trim,
            4 => LogRecordKind::WriteInPlace,
            5 => LogRecordKind::Fs,
            other => return Err(FormatError::invalid(WHAT, "kind", u64::from(other))),
        };
        let (offset, length) = (phys.offset.get(), phys.length.get());
        if length == 0 || offset.checked_add(length).is_none() {
            return Err(FormatError::invalid(WHAT, "extent", offset));
        }
        if matches!(kind, LogRecordKind::Write | LogRecordKind::Fs)
            && length > LOG_RECORD_PAYLOAD_MAX as u64
        {
            return Err(FormatError::invalid(WHAT, "length", length));
        }
        let payload_bytes = kind.payload_bytes(length);
        let size = LogRecord::encoded_size_for(payload_bytes);
        FormatError::need(WHAT, size, bytes.len())?;
        let payload = &bytes[LOG_RECORD_HEADER_SIZE..LOG_RECORD_HEADER_SIZE + payload_bytes];
        if kind == LogRecordKind::WriteInPlace {
            check_in_place_pointer(payload, length, phys.txg.get())?;
        }
        records.push(LogRecord {
            kind,
            sequence: phys.sequence.get(),
            txg: phys.txg.get(),
            object: phys.object.get(),
            offset,
            length,
            data: payload.to_vec(),
        });
        bytes = &bytes[size..];
    }
    // The writer sets `used bytes` to the header plus exactly these records; anything left over
    // means the count and the length disagree, which only a foreign or buggy writer produces.
    if !bytes.is_empty() {
        return Err(FormatError::invalid(
            WHAT,
            "trailing bytes",
            bytes.len() as u64,
        ));
    }
    Ok(records)
}

/// A write-in-place payload must be a level-0 block pointer (not a hole) born in the record's
/// txg, whose logical size is the record's length.
fn check_in_place_pointer(payload: &[u8], length: u64, txg: u64) -> Result<(), FormatError> {
    const WHAT: &str = "write-in-place record";
    let bp = BlockPointer::decode(payload)?;
    if bp.is_hole() || bp.level != 0 {
        return Err(FormatError::invalid(
            WHAT,
            "block pointer",
            u64::from(bp.level),
        ));
    }
    if u64::from(bp.lsize) != length {
        return Err(FormatError::invalid(WHAT, "length", length));
    }
    if bp.birth_txg != txg {
        return Err(FormatError::invalid(WHAT, "birth txg", bp.birth_txg));
    }
    Ok(())
}

/// Where one lane's chain starts: the oldest block still needed (or, when every written block
/// has been released, the pre-allocated block the next commit will write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaneHead {
    /// 0: this lane has no chain.
    pub chain_guid: u64,
    pub sequence: u64,
    pub block: Dva,
}

impl LaneHead {
    pub fn is_empty(&self) -> bool {
        self.chain_guid == 0
    }
}

/// The per-dataset chain header stored in the object-set root.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IntentLogHeader {
    pub lanes: Vec<LaneHead>,
}

impl IntentLogHeader {
    /// True when no lane has a chain (also the state of a never-logged dataset: all zeros).
    pub fn is_empty(&self) -> bool {
        self.lanes.iter().all(LaneHead::is_empty)
    }

    pub fn encode(&self) -> [u8; INTENT_LOG_HEADER_SIZE] {
        assert!(self.lanes.len() <= INTENT_LOG_LANES_MAX, "too many lanes");
        let mut lanes = [LanePhys::default(); INTENT_LOG_LANES_MAX];
        for (phys, lane) in lanes.iter_mut().zip(&self.lanes) {
            *phys = LanePhys {
                chain_guid: lane.chain_guid.into(),
                head_sequence: lane.sequence.into(),
                head_vdev: lane.block.vdev.into(),
                head_asize: lane.block.asize.into(),
                head_offset: lane.block.offset.into(),
            };
        }
        let phys = ChainHeaderPhys {
            version: if self.lanes.is_empty() {
                0.into()
            } else {
                INTENT_LOG_HEADER_VERSION.into()
            },
            lane_count: (self.lanes.len() as u32).into(),
            reserved: 0.into(),
            lanes,
            spare: [0; INTENT_LOG_HEADER_SIZE - 16 - LANE_HEADER_SIZE * INTENT_LOG_LANES_MAX],
        };
        let mut out = [0u8; INTENT_LOG_HEADER_SIZE];
        out.copy_from_slice(phys.as_bytes());
        out
    }

    /// Decodes a header; all zeros (a dataset that never logged) is the empty header.
    pub fn decode(bytes: &[u8; INTENT_LOG_HEADER_SIZE]) -> Result<IntentLogHeader, FormatError> {
        const WHAT: &str = "intent log header";
        let phys = ChainHeaderPhys::read_from_bytes(bytes)
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        let version = phys.version.get();
        let count = phys.lane_count.get() as usize;
        if version == 0 {
            // Version 0 only exists as the all-zero header of a dataset that never logged.
            return match count {
                0 => Ok(IntentLogHeader::default()),
                _ => Err(FormatError::invalid(WHAT, "lane count", count as u64)),
            };
        }
        if version != INTENT_LOG_HEADER_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                found: u64::from(version),
                supported: u64::from(INTENT_LOG_HEADER_VERSION),
            });
        }
        if count > INTENT_LOG_LANES_MAX {
            return Err(FormatError::invalid(WHAT, "lane count", count as u64));
        }
        let lanes = phys.lanes[..count]
            .iter()
            .map(|lane| LaneHead {
                chain_guid: lane.chain_guid.get(),
                sequence: lane.head_sequence.get(),
                block: Dva {
                    vdev: lane.head_vdev.get(),
                    offset: lane.head_offset.get(),
                    asize: lane.head_asize.get(),
                },
            })
            .collect();
        Ok(IntentLogHeader { lanes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn position() -> ChainPosition {
        ChainPosition {
            pool_guid: 7,
            chain_guid: 0xfeed,
            lane: 2,
            sequence: 41,
        }
    }

    fn sample() -> LogBlock {
        LogBlock {
            position: position(),
            next: Dva {
                vdev: 1,
                offset: 1 << 20,
                asize: 8192,
            },
            records: vec![
                LogRecord {
                    kind: LogRecordKind::Write,
                    sequence: 100,
                    txg: 9,
                    object: 1,
                    offset: 4096,
                    length: 13,
                    data: b"hello, world!".to_vec(),
                },
                LogRecord {
                    kind: LogRecordKind::Trim,
                    sequence: 101,
                    txg: 10,
                    object: 1,
                    offset: 0,
                    length: 1 << 20,
                    data: vec![],
                },
            ],
        }
    }

    #[test]
    fn round_trip_keeps_records_and_next() {
        let block = sample();
        let bytes = block.encode(4096);
        assert_eq!(bytes.len(), 4096);
        assert_eq!(LogBlock::decode(&bytes, &position()).unwrap(), block);
    }

    #[test]
    fn any_flipped_bit_in_the_used_part_ends_the_chain() {
        let block = sample();
        let bytes = block.encode(512);
        let used = LogBlock::used_bytes(&block.records);
        for byte in (0..used).step_by(7) {
            let mut damaged = bytes.clone();
            damaged[byte] ^= 0x10;
            assert!(
                LogBlock::decode(&damaged, &position()).is_err(),
                "byte {byte}"
            );
        }
    }

    #[test]
    fn a_block_of_another_chain_or_sequence_is_not_the_next() {
        let bytes = sample().encode(512);
        for other in [
            ChainPosition {
                sequence: 42,
                ..position()
            },
            ChainPosition {
                chain_guid: 1,
                ..position()
            },
            ChainPosition {
                pool_guid: 8,
                ..position()
            },
            ChainPosition {
                lane: 0,
                ..position()
            },
        ] {
            assert!(LogBlock::decode(&bytes, &other).is_err());
        }
    }

    #[test]
    fn a_full_block_holds_one_maximal_record() {
        let record = LogRecord {
            kind: LogRecordKind::Write,
            sequence: 1,
            txg: 1,
            object: 1,
            offset: 0,
            length: LOG_RECORD_PAYLOAD_MAX as u64,
            data: vec![0xab; LOG_RECORD_PAYLOAD_MAX],
        };
        let records = vec![record];
        assert!(LogBlock::used_bytes(&records) <= LOG_BLOCK_SIZE_MAX as usize);
        let block = LogBlock {
            position: position(),
            next: Dva::default(),
            records,
        };
        let bytes = block.encode(4096);
        assert_eq!(bytes.len(), LOG_BLOCK_SIZE_MAX as usize);
        assert_eq!(LogBlock::decode(&bytes, &position()).unwrap(), block);
    }

    fn in_place_pointer(txg: u64) -> BlockPointer {
        BlockPointer {
            dvas: [
                Dva {
                    vdev: 0,
                    offset: 3 << 20,
                    asize: 16384,
                },
                Dva::default(),
                Dva::default(),
            ],
            lsize: 16384,
            psize: 16384,
            object_type: crate::ObjectType::VolumeData,
            birth_txg: txg,
            fill: 1,
            checksum: crate::checksum::Checksum([7; 32]),
            ..BlockPointer::HOLE
        }
    }

    fn block_of(records: Vec<LogRecord>) -> LogBlock {
        LogBlock {
            position: position(),
            next: Dva::default(),
            records,
        }
    }

    #[test]
    fn a_write_in_place_record_carries_its_block_pointer() {
        let bp = in_place_pointer(12);
        let record = LogRecord::write_in_place(5, 12, 1, 1 << 20, &bp);
        assert_eq!(record.length, 16384);
        let block = block_of(vec![record]);
        let decoded = LogBlock::decode(&block.encode(512), &position()).unwrap();
        assert_eq!(decoded, block);
        assert_eq!(decoded.records[0].block_pointer(), Some(bp));
        assert_eq!(
            decoded.records[0].encoded_size(),
            LOG_RECORD_HEADER_SIZE + BLOCK_POINTER_SIZE
        );
    }

    #[test]
    fn a_write_in_place_record_must_match_its_pointer() {
        let good = LogRecord::write_in_place(5, 12, 1, 0, &in_place_pointer(12));
        let mut wrong_length = good.clone();
        wrong_length.length = 8192;
        let mut wrong_txg = good.clone();
        wrong_txg.txg = 13;
        let mut hole = good.clone();
        hole.data = vec![0; BLOCK_POINTER_SIZE];
        let mut indirect = good.clone();
        indirect.data = BlockPointer {
            level: 1,
            ..in_place_pointer(12)
        }
        .to_bytes()
        .to_vec();
        for (what, record) in [
            ("length", wrong_length),
            ("txg", wrong_txg),
            ("hole", hole),
            ("level", indirect),
        ] {
            let bytes = block_of(vec![record]).encode(512);
            assert!(
                LogBlock::decode(&bytes, &position()).is_err(),
                "a record with a wrong {what} decoded"
            );
        }
    }

    /// Patches a valid header identity and checksum over arbitrary bytes, so that decoding gets
    /// as far as the records.
    fn seal(mut bytes: Vec<u8>, used: usize) -> Vec<u8> {
        if bytes.len() < LOG_BLOCK_HEADER_SIZE {
            bytes.resize(LOG_BLOCK_HEADER_SIZE, 0);
        }
        let used = used.clamp(LOG_BLOCK_HEADER_SIZE, bytes.len());
        let p = position();
        bytes[0..8].copy_from_slice(&INTENT_LOG_MAGIC.to_le_bytes());
        bytes[8..16].copy_from_slice(&p.pool_guid.to_le_bytes());
        bytes[16..24].copy_from_slice(&p.chain_guid.to_le_bytes());
        bytes[24..32].copy_from_slice(&p.sequence.to_le_bytes());
        bytes[32..36].copy_from_slice(&p.lane.to_le_bytes());
        bytes[40..44].copy_from_slice(&(used as u32).to_le_bytes());
        bytes[CHECKSUM_RANGE].fill(0);
        let sum = embedded(&bytes[..used]);
        bytes[CHECKSUM_RANGE].copy_from_slice(&sum);
        bytes
    }

    #[test]
    fn records_must_fill_the_used_bytes_exactly() {
        let block = sample();
        let used = LogBlock::used_bytes(&block.records);
        let bytes = block.encode(4096);
        assert_eq!(
            LogBlock::decode(&seal(bytes.clone(), used), &position()).unwrap(),
            block
        );
        // One record fewer than the bytes hold, or 8 stray bytes after the last record.
        let mut fewer = bytes.clone();
        fewer[36..40].copy_from_slice(&1u32.to_le_bytes());
        assert!(LogBlock::decode(&seal(fewer, used), &position()).is_err());
        assert!(LogBlock::decode(&seal(bytes, used + 8), &position()).is_err());
    }

    #[test]
    fn header_version_zero_must_be_all_empty() {
        let mut bytes = [0u8; INTENT_LOG_HEADER_SIZE];
        bytes[4] = 1;
        assert!(IntentLogHeader::decode(&bytes).is_err());
        bytes[0] = 2;
        assert!(matches!(
            IntentLogHeader::decode(&bytes),
            Err(FormatError::UnsupportedVersion { found: 2, .. })
        ));
    }

    #[test]
    fn header_round_trips_and_zeros_are_empty() {
        assert!(
            IntentLogHeader::decode(&[0; INTENT_LOG_HEADER_SIZE])
                .unwrap()
                .is_empty()
        );
        let header = IntentLogHeader {
            lanes: vec![
                LaneHead {
                    chain_guid: 3,
                    sequence: 17,
                    block: Dva {
                        vdev: 2,
                        offset: 81920,
                        asize: 4096,
                    },
                },
                LaneHead::default(),
            ],
        };
        let decoded = IntentLogHeader::decode(&header.encode()).unwrap();
        assert_eq!(decoded, header);
        assert!(!decoded.is_empty());
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = LogBlock::decode(&bytes, &position());
        }

        #[test]
        fn sealed_decode_never_panics_and_round_trips(
            mut bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            used in 0usize..2048,
            count in 0u32..4,
        ) {
            // A small record count, so that whole records are decoded rather than running out.
            if bytes.len() >= LOG_BLOCK_HEADER_SIZE {
                bytes[36..40].copy_from_slice(&count.to_le_bytes());
            }
            if let Ok(block) = LogBlock::decode(&seal(bytes, used), &position()) {
                prop_assert_eq!(LogBlock::decode(&block.encode(512), &position()).unwrap(), block);
            }
        }

        #[test]
        fn header_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 192)) {
            let array: [u8; INTENT_LOG_HEADER_SIZE] = bytes.try_into().unwrap();
            if let Ok(header) = IntentLogHeader::decode(&array) {
                prop_assert_eq!(IntentLogHeader::decode(&header.encode()).unwrap(), header);
            }
        }

        #[test]
        fn records_round_trip(
            lens in proptest::collection::vec(0usize..600, 0..20),
            granule in prop_oneof![Just(512u32), Just(4096u32)],
        ) {
            let records: Vec<LogRecord> = lens
                .iter()
                .enumerate()
                .map(|(i, &len)| match len % 7 {
                    // Every kind, writes in place included.
                    3 => LogRecord::write_in_place(i as u64, 5, 1, (i as u64) << 14, &in_place_pointer(5)),
                    _ => LogRecord {
                        kind: if len == 0 { LogRecordKind::Zero } else { LogRecordKind::Write },
                        sequence: i as u64,
                        txg: 5,
                        object: 1,
                        offset: (i as u64) << 12,
                        length: len.max(1) as u64,
                        data: if len == 0 { vec![] } else { vec![i as u8; len] },
                    },
                })
                .collect();
            let block = LogBlock { position: position(), next: Dva::default(), records };
            let bytes = block.encode(granule);
            prop_assert_eq!(bytes.len() % granule as usize, 0);
            prop_assert_eq!(LogBlock::decode(&bytes, &position()).unwrap(), block);
        }
    }
}
