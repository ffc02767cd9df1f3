//! The uberblock: the root of everything at one txg.
//!
//! Writing a new uberblock is the atomic commit point of a txg. It is written to slot
//! `txg % UBERBLOCK_RING_SLOTS` of every label of every leaf, between two rounds of device
//! flushes. A torn or stale slot fails its embedded checksum or loses on txg, and import falls
//! back to the newest uberblock whose tree verifies.
//!
//! ```text
//! offset size field
//!      0    8 magic             8 8 version
//!     16    8 txg              24 8 pool guid
//!     32    8 guid sum of all leaves (detects a mismatched device set)
//!     40    8 timestamp (ms since the Unix epoch)
//!     48  128 root block pointer (the MOS object set)
//!    176  128 space-log head block pointer
//!    304    8 space-log chain length (blocks)
//!    312    8 allocated bytes (all vdevs, as of this txg)
//!    320  672 reserved
//!    992   32 blake3 of bytes [0, 992)
//! ```

use crate::FormatError;
use crate::blkptr::{BLOCK_POINTER_SIZE, BlockPointer};
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

pub const UBERBLOCK_SIZE: usize = 1024;
pub const UBERBLOCK_MAGIC: u64 = 0x3142_556e_7269_6163; // "cairnUB1"
const CHECKSUMMED_BYTES: usize = UBERBLOCK_SIZE - 32;

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct UberblockPhys {
    magic: U64,
    version: U64,
    txg: U64,
    pool_guid: U64,
    guid_sum: U64,
    timestamp_ms: U64,
    root_bp: [u8; BLOCK_POINTER_SIZE],
    space_log_bp: [u8; BLOCK_POINTER_SIZE],
    space_log_blocks: U64,
    allocated_bytes: U64,
    reserved: [u8; 672],
    checksum: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<UberblockPhys>() == UBERBLOCK_SIZE);
const _: () = assert!(UBERBLOCK_SIZE as u64 <= crate::label::UBERBLOCK_SLOT_SIZE);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uberblock {
    pub version: u64,
    pub txg: u64,
    pub pool_guid: u64,
    pub guid_sum: u64,
    pub timestamp_ms: u64,
    pub root_bp: BlockPointer,
    pub space_log_bp: BlockPointer,
    pub space_log_blocks: u64,
    pub allocated_bytes: u64,
}

impl Uberblock {
    /// Encodes into a full ring slot (zero padded).
    pub fn encode_slot(&self) -> Vec<u8> {
        let mut phys = UberblockPhys {
            magic: UBERBLOCK_MAGIC.into(),
            version: self.version.into(),
            txg: self.txg.into(),
            pool_guid: self.pool_guid.into(),
            guid_sum: self.guid_sum.into(),
            timestamp_ms: self.timestamp_ms.into(),
            root_bp: self.root_bp.to_bytes(),
            space_log_bp: self.space_log_bp.to_bytes(),
            space_log_blocks: self.space_log_blocks.into(),
            allocated_bytes: self.allocated_bytes.into(),
            reserved: [0; 672],
            checksum: [0; 32],
        };
        phys.checksum = crate::checksum::embedded(&phys.as_bytes()[..CHECKSUMMED_BYTES]);
        let mut slot = vec![0u8; crate::label::UBERBLOCK_SLOT_SIZE as usize];
        slot[..UBERBLOCK_SIZE].copy_from_slice(phys.as_bytes());
        slot
    }

    /// Decodes a slot of a format version this build reads; an intact slot of another
    /// version is `FormatError::UnreadableVersion`.
    pub fn decode(bytes: &[u8]) -> Result<Uberblock, FormatError> {
        let ub = Self::decode_any_version(bytes)?;
        if !crate::format_version_readable(ub.version) {
            return Err(FormatError::UnreadableVersion {
                what: "uberblock",
                found: ub.version,
            });
        }
        Ok(ub)
    }

    /// Decodes a slot whatever format version it records (its magic, checksum and fields
    /// checked as `decode` does): for import to find out that a pool's newest uberblock is
    /// of a version it cannot read, and say so, instead of passing it over. Nothing it
    /// points to may be read unless `format_version_readable(version)`.
    pub fn decode_any_version(bytes: &[u8]) -> Result<Uberblock, FormatError> {
        const WHAT: &str = "uberblock";
        FormatError::need(WHAT, UBERBLOCK_SIZE, bytes.len())?;
        let phys = UberblockPhys::read_from_bytes(&bytes[..UBERBLOCK_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        if phys.magic.get() != UBERBLOCK_MAGIC {
            return Err(FormatError::BadMagic {
                what: WHAT,
                found: phys.magic.get(),
            });
        }
        if crate::checksum::embedded(&bytes[..CHECKSUMMED_BYTES]) != phys.checksum {
            return Err(FormatError::ChecksumMismatch { what: WHAT });
        }
        if phys.txg.get() == 0 {
            return Err(FormatError::invalid(WHAT, "txg", 0));
        }
        Ok(Uberblock {
            version: phys.version.get(),
            txg: phys.txg.get(),
            pool_guid: phys.pool_guid.get(),
            guid_sum: phys.guid_sum.get(),
            timestamp_ms: phys.timestamp_ms.get(),
            root_bp: BlockPointer::decode(&phys.root_bp)?,
            space_log_bp: BlockPointer::decode(&phys.space_log_bp)?,
            space_log_blocks: phys.space_log_blocks.get(),
            allocated_bytes: phys.allocated_bytes.get(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_torn_slot_detection() {
        let ub = Uberblock {
            version: crate::FORMAT_VERSION,
            txg: 99,
            pool_guid: 5,
            guid_sum: 6,
            timestamp_ms: 7,
            root_bp: BlockPointer::HOLE,
            space_log_bp: BlockPointer::HOLE,
            space_log_blocks: 3,
            allocated_bytes: 1 << 30,
        };
        let mut slot = ub.encode_slot();
        assert_eq!(Uberblock::decode(&slot).unwrap(), ub);
        // A torn write: the second half of the slot still holds old bytes.
        slot[600..].fill(0xee);
        assert!(Uberblock::decode(&slot).is_err());
    }

    #[test]
    fn versions_outside_the_readable_range_are_refused_but_identified() {
        for version in [0, crate::FORMAT_VERSION_MIN - 1, crate::FORMAT_VERSION + 1] {
            let ub = Uberblock {
                version,
                txg: 9,
                pool_guid: 5,
                guid_sum: 6,
                timestamp_ms: 7,
                root_bp: BlockPointer::HOLE,
                space_log_bp: BlockPointer::HOLE,
                space_log_blocks: 0,
                allocated_bytes: 0,
            };
            let slot = ub.encode_slot();
            let err = Uberblock::decode(&slot).unwrap_err();
            assert_eq!(
                err,
                FormatError::UnreadableVersion {
                    what: "uberblock",
                    found: version
                }
            );
            let text = err.to_string();
            assert!(text.contains(&format!("version {version} ")), "{text}");
            assert!(text.contains(&crate::FORMAT_VERSION.to_string()), "{text}");
            assert_eq!(Uberblock::decode_any_version(&slot).unwrap(), ub);
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let _ = Uberblock::decode(&bytes);
            let _ = Uberblock::decode_any_version(&bytes);
        }
    }
}
