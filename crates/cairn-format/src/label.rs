//! Device labels: who this device is, which pool it belongs to, the pool's vdev tree, and the
//! uberblock ring.
//!
//! Every device carries four copies, two at the front and two at the end, so that neither a
//! damaged first megabyte nor a truncated tail loses the pool's identity. Label `i` sits at
//! `label_offset(i, device_size)`; the device size used is rounded down to `LABEL_SIZE`.
//!
//! ```text
//! label (256 KiB)
//!   [0, 16K)      blank: room for partition tables and boot code
//!   [16K, 128K)   config: 64-byte header { magic u64, version u64, payload length u64,
//!                 reserved [u8; 8], blake3 of payload [u8; 32] } then a postcard `LabelConfig`
//!   [128K, 256K)  uberblock ring: 32 slots of 4 KiB; txg t lives in slot t % 32
//! ```
//!
//! Config updates rewrite labels 0 and 2 first, flush, then 1 and 3, so a crash mid-update
//! leaves two intact copies of either the old or the new config. Uberblocks are never rewritten
//! in place: each txg takes the next slot.

use crate::FormatError;
use serde::{Deserialize, Serialize};
use zerocopy::little_endian::U64;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

pub const LABEL_SIZE: u64 = 256 * 1024;
pub const LABEL_COUNT: usize = 4;
pub const LABEL_BLANK_SIZE: u64 = 16 * 1024;
pub const LABEL_CONFIG_OFFSET: u64 = LABEL_BLANK_SIZE;
pub const LABEL_CONFIG_SIZE: u64 = 112 * 1024;
pub const LABEL_CONFIG_HEADER_SIZE: usize = 64;
pub const LABEL_RING_OFFSET: u64 = 128 * 1024;
pub const UBERBLOCK_SLOT_SIZE: u64 = 4096;
pub const UBERBLOCK_RING_SLOTS: u64 = 32;
/// Start of the allocatable data region on every leaf: two labels plus a reserved area.
pub const VDEV_DATA_START: u64 = 1024 * 1024;
/// Bytes at the end of every leaf that are not allocatable: two labels.
pub const VDEV_DATA_END_RESERVED: u64 = 2 * LABEL_SIZE;
/// Smallest device cairn accepts.
pub const DEVICE_SIZE_MIN: u64 = 64 * 1024 * 1024;
pub const LABEL_CONFIG_MAGIC: u64 = 0x6c62_6c6e_7269_6163; // "cairnlbl"

const _: () = assert!(LABEL_CONFIG_OFFSET + LABEL_CONFIG_SIZE == LABEL_RING_OFFSET);
const _: () = assert!(LABEL_RING_OFFSET + UBERBLOCK_SLOT_SIZE * UBERBLOCK_RING_SLOTS == LABEL_SIZE);
const _: () = assert!(2 * LABEL_SIZE <= VDEV_DATA_START);

/// Byte offset of label `index` (0..4) on a device of `device_size` bytes.
pub fn label_offset(index: usize, device_size: u64) -> u64 {
    assert!(index < LABEL_COUNT);
    let aligned = device_size - device_size % LABEL_SIZE;
    match index {
        0 => 0,
        1 => LABEL_SIZE,
        2 => aligned - 2 * LABEL_SIZE,
        _ => aligned - LABEL_SIZE,
    }
}

/// Byte offset of uberblock slot for `txg` within label `index`.
pub fn uberblock_offset(index: usize, device_size: u64, txg: u64) -> u64 {
    label_offset(index, device_size)
        + LABEL_RING_OFFSET
        + (txg % UBERBLOCK_RING_SLOTS) * UBERBLOCK_SLOT_SIZE
}

/// Usable data bytes on a leaf of `device_size` bytes, before metaslab rounding.
pub fn data_region_size(device_size: u64) -> u64 {
    let aligned = device_size - device_size % LABEL_SIZE;
    aligned.saturating_sub(VDEV_DATA_START + VDEV_DATA_END_RESERVED)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PoolState {
    Active,
    Exported,
    Destroyed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TopVdevKind {
    Leaf,
    Mirror,
    /// raidz with this many parity columns (1-3) over more children than that
    /// (`crate::raidz`).
    RaidZ {
        parity: u8,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum VdevRole {
    Normal,
    /// Reserved: separate intent-log device.
    Log,
    /// Reserved: L2ARC device.
    Cache,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeafConfig {
    pub guid: u64,
    /// Path as given at create or import time.
    pub path: String,
    /// Emulated device model (`emu:MODEL:PATH`), applied again at import.
    pub model: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopVdevConfig {
    pub id: u32,
    pub guid: u64,
    pub kind: TopVdevKind,
    pub role: VdevRole,
    pub ashift: u8,
    pub metaslab_shift: u8,
    pub metaslab_count: u64,
    pub children: Vec<LeafConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct VdevTreeConfig {
    pub tops: Vec<TopVdevConfig>,
}

impl VdevTreeConfig {
    /// Sum of all leaf guids: an uberblock records it so that import notices a mismatched set.
    pub fn guid_sum(&self) -> u64 {
        self.tops
            .iter()
            .flat_map(|top| top.children.iter())
            .fold(0u64, |sum, leaf| sum.wrapping_add(leaf.guid))
    }

    /// Checks what the pool assumes of a decoded tree, which the payload checksum alone does
    /// not guarantee (a crafted label checksums fine): distinct top-level ids, an ashift in
    /// `ASHIFT_MIN..=ASHIFT_MAX`, a metaslab no smaller than a sector and a data region
    /// (`metaslab_count << metaslab_shift`) that fits in a u64, and one child for a `Leaf`, at
    /// least one for a `Mirror`, parity 1-3 and more children than parity for a `RaidZ`. Import calls it before using the tree; whether the region fits on
    /// the devices is for import to check.
    pub fn validate(&self) -> Result<(), FormatError> {
        const WHAT: &str = "vdev tree";
        let mut ids = std::collections::BTreeSet::new();
        for top in &self.tops {
            if !ids.insert(top.id) {
                return Err(FormatError::invalid(
                    WHAT,
                    "duplicate vdev id",
                    top.id.into(),
                ));
            }
            if !(crate::ASHIFT_MIN..=crate::ASHIFT_MAX).contains(&top.ashift) {
                return Err(FormatError::invalid(WHAT, "ashift", top.ashift.into()));
            }
            if top.metaslab_shift < top.ashift || top.data_size_bytes().is_none() {
                return Err(FormatError::invalid(
                    WHAT,
                    "metaslab shift",
                    top.metaslab_shift.into(),
                ));
            }
            let children_ok = match top.kind {
                TopVdevKind::Leaf => top.children.len() == 1,
                // What the raidz layout can hold: parity 1-3 and more children than parity.
                TopVdevKind::RaidZ { parity } => crate::raidz::RaidzGeometry::new(
                    u32::try_from(top.children.len()).unwrap_or(u32::MAX),
                    parity,
                    top.ashift,
                )
                .is_ok(),
                TopVdevKind::Mirror => !top.children.is_empty(),
            };
            if !children_ok {
                return Err(FormatError::invalid(
                    WHAT,
                    "child count",
                    top.children.len() as u64,
                ));
            }
        }
        Ok(())
    }
}

impl TopVdevConfig {
    /// Bytes of the data region (`metaslab_count << metaslab_shift`); `None` if that does not
    /// fit in a u64.
    pub fn data_size_bytes(&self) -> Option<u64> {
        1u64.checked_shl(self.metaslab_shift.into())
            .and_then(|metaslab_bytes| self.metaslab_count.checked_mul(metaslab_bytes))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelConfig {
    pub version: u64,
    pub pool_name: String,
    pub pool_guid: u64,
    pub state: PoolState,
    /// Txg at which this config was written.
    pub txg: u64,
    /// Guid of the leaf carrying this label.
    pub leaf_guid: u64,
    pub tree: VdevTreeConfig,
}

/// The leading fields of a label config, which keep their place in every format version:
/// enough for a build to name a pool whose version it cannot read (`LabelConfig::identify`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabelIdentity {
    pub version: u64,
    pub pool_name: String,
    pub pool_guid: u64,
}

#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy)]
#[repr(C)]
struct ConfigHeader {
    magic: U64,
    version: U64,
    payload_len: U64,
    reserved: [u8; 8],
    payload_checksum: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<ConfigHeader>() == LABEL_CONFIG_HEADER_SIZE);

impl LabelConfig {
    /// Encodes into exactly `LABEL_CONFIG_SIZE` bytes.
    pub fn encode(&self) -> Result<Vec<u8>, FormatError> {
        let payload = postcard::to_stdvec(self).map_err(|err| FormatError::Payload {
            what: "label config",
            reason: err.to_string(),
        })?;
        let capacity = LABEL_CONFIG_SIZE as usize - LABEL_CONFIG_HEADER_SIZE;
        if payload.len() > capacity {
            return Err(FormatError::invalid(
                "label config",
                "payload length",
                payload.len() as u64,
            ));
        }
        let header = ConfigHeader {
            magic: LABEL_CONFIG_MAGIC.into(),
            version: self.version.into(),
            payload_len: (payload.len() as u64).into(),
            reserved: [0; 8],
            payload_checksum: crate::checksum::embedded(&payload),
        };
        let mut out = vec![0u8; LABEL_CONFIG_SIZE as usize];
        out[..LABEL_CONFIG_HEADER_SIZE].copy_from_slice(header.as_bytes());
        out[LABEL_CONFIG_HEADER_SIZE..LABEL_CONFIG_HEADER_SIZE + payload.len()]
            .copy_from_slice(&payload);
        Ok(out)
    }

    /// The version, pool name and guid of an intact config of any format version (magic and
    /// payload checksum verified; the payload's leading fields decoded, the rest not): what
    /// import names when it refuses a pool of a version it cannot read.
    pub fn identify(bytes: &[u8]) -> Result<LabelIdentity, FormatError> {
        const WHAT: &str = "label config";
        let header = Self::header(bytes)?;
        let payload = Self::payload(bytes, &header)?;
        let (identity, _): (LabelIdentity, _) =
            postcard::take_from_bytes(payload).map_err(|err| FormatError::Payload {
                what: WHAT,
                reason: err.to_string(),
            })?;
        if identity.version != header.version.get() {
            return Err(FormatError::invalid(WHAT, "version", identity.version));
        }
        Ok(identity)
    }

    /// The header at the start of `bytes`, its magic verified (any version).
    fn header(bytes: &[u8]) -> Result<ConfigHeader, FormatError> {
        const WHAT: &str = "label config";
        FormatError::need(WHAT, LABEL_CONFIG_HEADER_SIZE, bytes.len())?;
        let header = ConfigHeader::read_from_bytes(&bytes[..LABEL_CONFIG_HEADER_SIZE])
            .map_err(|_| FormatError::invalid(WHAT, "layout", 0))?;
        if header.magic.get() != LABEL_CONFIG_MAGIC {
            return Err(FormatError::BadMagic {
                what: WHAT,
                found: header.magic.get(),
            });
        }
        Ok(header)
    }

    /// The payload `header` describes, its length and checksum verified.
    fn payload<'a>(bytes: &'a [u8], header: &ConfigHeader) -> Result<&'a [u8], FormatError> {
        const WHAT: &str = "label config";
        let payload_len = header.payload_len.get();
        let available =
            (bytes.len().min(LABEL_CONFIG_SIZE as usize) - LABEL_CONFIG_HEADER_SIZE) as u64;
        if payload_len > available {
            return Err(FormatError::invalid(WHAT, "payload length", payload_len));
        }
        let payload =
            &bytes[LABEL_CONFIG_HEADER_SIZE..LABEL_CONFIG_HEADER_SIZE + payload_len as usize];
        if crate::checksum::embedded(payload) != header.payload_checksum {
            return Err(FormatError::ChecksumMismatch { what: WHAT });
        }
        Ok(payload)
    }

    pub fn decode(bytes: &[u8]) -> Result<LabelConfig, FormatError> {
        const WHAT: &str = "label config";
        let header = Self::header(bytes)?;
        if !crate::format_version_readable(header.version.get()) {
            return Err(FormatError::UnreadableVersion {
                what: WHAT,
                found: header.version.get(),
            });
        }
        let payload = Self::payload(bytes, &header)?;
        let config: LabelConfig =
            postcard::from_bytes(payload).map_err(|err| FormatError::Payload {
                what: WHAT,
                reason: err.to_string(),
            })?;
        if config.version != header.version.get() {
            return Err(FormatError::invalid(WHAT, "version", config.version));
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn config() -> LabelConfig {
        LabelConfig {
            version: crate::FORMAT_VERSION,
            pool_name: "tank".into(),
            pool_guid: 0xdead_beef,
            state: PoolState::Active,
            txg: 4,
            leaf_guid: 11,
            tree: VdevTreeConfig {
                tops: vec![TopVdevConfig {
                    id: 0,
                    guid: 10,
                    kind: TopVdevKind::Mirror,
                    role: VdevRole::Normal,
                    ashift: 12,
                    metaslab_shift: 24,
                    metaslab_count: 120,
                    children: vec![
                        LeafConfig {
                            guid: 11,
                            path: "./d0.img".into(),
                            model: Some("hdd-7200".into()),
                        },
                        LeafConfig {
                            guid: 12,
                            path: "./d1.img".into(),
                            model: None,
                        },
                    ],
                }],
            },
        }
    }

    #[test]
    fn config_round_trip() {
        let config = config();
        let bytes = config.encode().unwrap();
        assert_eq!(bytes.len() as u64, LABEL_CONFIG_SIZE);
        assert_eq!(LabelConfig::decode(&bytes).unwrap(), config);
        assert_eq!(config.tree.guid_sum(), 23);
    }

    #[test]
    fn a_config_of_an_unreadable_version_is_refused_but_identified() {
        for version in [crate::FORMAT_VERSION_MIN - 1, crate::FORMAT_VERSION + 1] {
            let old = LabelConfig {
                version,
                ..config()
            };
            let bytes = old.encode().unwrap();
            assert_eq!(
                LabelConfig::decode(&bytes),
                Err(FormatError::UnreadableVersion {
                    what: "label config",
                    found: version
                })
            );
            assert_eq!(
                LabelConfig::identify(&bytes).unwrap(),
                LabelIdentity {
                    version,
                    pool_name: "tank".into(),
                    pool_guid: 0xdead_beef
                }
            );
        }
    }

    #[test]
    fn damaged_config_is_detected() {
        let mut bytes = config().encode().unwrap();
        bytes[LABEL_CONFIG_HEADER_SIZE + 3] ^= 1;
        assert_eq!(
            LabelConfig::decode(&bytes),
            Err(FormatError::ChecksumMismatch {
                what: "label config"
            })
        );
    }

    #[test]
    fn labels_sit_two_at_each_end() {
        let size = 100 * 1024 * 1024 + 5000;
        let aligned = size - size % LABEL_SIZE;
        assert_eq!(label_offset(0, size), 0);
        assert_eq!(label_offset(1, size), LABEL_SIZE);
        assert_eq!(label_offset(3, size) + LABEL_SIZE, aligned);
        assert_eq!(label_offset(2, size) + LABEL_SIZE, label_offset(3, size));
        assert_eq!(
            uberblock_offset(0, size, 33),
            LABEL_RING_OFFSET + UBERBLOCK_SLOT_SIZE
        );
    }

    proptest! {
        #[test]
        fn config_decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = LabelConfig::decode(&bytes);
        }

        #[test]
        fn config_decode_never_panics_with_valid_header(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            claimed_len in 0u64..400,
        ) {
            let header = ConfigHeader {
                magic: LABEL_CONFIG_MAGIC.into(),
                version: crate::FORMAT_VERSION.into(),
                payload_len: claimed_len.into(),
                reserved: [0; 8],
                payload_checksum: crate::checksum::embedded(&payload[..payload.len().min(claimed_len as usize)]),
            };
            let mut bytes = header.as_bytes().to_vec();
            bytes.extend_from_slice(&payload);
            let _ = LabelConfig::decode(&bytes);
            let _ = LabelConfig::identify(&bytes);
        }
    }
}
