//! Dataset properties with ZFS names and meanings: the one public table (`PROPERTIES`) that
//! the CLI, JSON output and the analytics page read, and the typed value of every property of
//! a dataset (`DatasetProperties`, in `resolved.rs`) that the layers act on.
//!
//! Each property has a type that validates values, a default, the dataset kinds it applies to,
//! whether it can change after creation, and whether children inherit it. Values are stored as
//! canonical strings in the dataset directory (so a later build can add properties without a
//! format change); `DatasetDirectory::property` resolves local → inherited → default and
//! reports the source, as `zfs get` does, and `DatasetDirectory::properties_of` parses every
//! property of a dataset once into typed fields.
//!
//! Invariant: a value that passes `PropertyDef::canonical` has a typed meaning (the word lists
//! of one-of-a-list properties are the enums' own `NAMES`, `values.rs`), so resolving never
//! falls back to a default on a value it cannot read. Nothing outside this folder looks a
//! property up by name to act on it.
//!
//! Where they take effect: `sync` and `logbias` in the intent log (`logbias=throughput` keeps a
//! dataset's log blocks off the log devices and writes large sync writes once, in place);
//! `primarycache` in the ARC (what a dataset's reads leave in RAM); `secondarycache` on the
//! pool's cache devices; `checksum` and `compression` in the object set's new blocks;
//! `reservation`, `refreservation`, `quota` and `refquota` in space accounting (`space.rs`);
//! `atime`, `recordsize` in the filesystem layer (`cairn-fs`); `devices`, `setuid`, `exec` and
//! `readonly` as the FUSE mount's flags, `snapdir` in the mount's `.cairn` directory
//! (cairn-frontend), `sharenfs` in the NFS server (cairn-frontend's `nfs`, whether a filesystem
//! is exported, to which clients, read-only or not, and whether root is squashed; its options
//! are parsed in `share.rs`, its client networks in `client_net.rs`). `sync=disabled` is unsafe
//! (acknowledged writes can be lost) and is shown as such (`PropertyDef::is_unsafe`).

mod client_net;
mod resolved;
mod share;
mod values;

pub use client_net::ClientNet;
pub use resolved::DatasetProperties;
pub use share::{SHARE_OPTIONS, ShareAccess, ShareNfs};
pub use values::{
    AtimeMode, CacheMode, ChecksumAlgorithm, ChoiceValue, Compression, LogBias, LogLanes,
    SnapdirMode, SyncMode,
};

use crate::{DatasetError, DatasetKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueType {
    /// A power of two within the inclusive byte bounds.
    PowerOfTwoBytes {
        min: u64,
        max: u64,
    },
    Bytes,
    /// A byte count where 0, written `none`, means no limit or nothing held back.
    BytesOrNone,
    Choice(&'static [&'static str]),
    /// An absolute path, or `none`.
    PathOrNone,
    /// `on`, `off` or a list of NFS export options (`share.rs`).
    ShareOptions,
}

#[derive(Debug, Clone, Copy)]
pub struct PropertyDef {
    pub name: &'static str,
    value_type: ValueType,
    pub default: &'static str,
    /// `None`: every kind.
    applies_to: Option<DatasetKind>,
    pub settable_after_create: bool,
    pub inheritable: bool,
    pub description: &'static str,
}

pub const VOLBLOCKSIZE_DEFAULT: u64 = 16 * 1024;

pub const PROPERTIES: &[PropertyDef] = &[
    PropertyDef {
        name: "volsize",
        value_type: ValueType::Bytes,
        default: "0",
        applies_to: Some(DatasetKind::Volume),
        settable_after_create: false,
        inheritable: false,
        description: "logical size of the volume",
    },
    PropertyDef {
        name: "volblocksize",
        value_type: ValueType::PowerOfTwoBytes {
            min: 512,
            max: 128 * 1024,
        },
        default: "16384",
        applies_to: Some(DatasetKind::Volume),
        settable_after_create: false,
        inheritable: false,
        description: "block size of the volume (fixed at creation)",
    },
    PropertyDef {
        name: "mountpoint",
        value_type: ValueType::PathOrNone,
        default: "none",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: false,
        description: "where cairn serve mounts the filesystem (an absolute path), or none",
    },
    PropertyDef {
        name: "recordsize",
        value_type: ValueType::PowerOfTwoBytes {
            min: 512,
            max: 1024 * 1024,
        },
        default: "131072",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: true,
        description: "block size of files larger than one block (new files take it at their first block past it)",
    },
    PropertyDef {
        name: "refreservation",
        value_type: ValueType::BytesOrNone,
        default: "0",
        applies_to: None,
        settable_after_create: true,
        inheritable: false,
        description: "space guaranteed to the dataset's own data (a volume gets its full size unless sparse)",
    },
    PropertyDef {
        name: "reservation",
        value_type: ValueType::BytesOrNone,
        default: "0",
        applies_to: None,
        settable_after_create: true,
        inheritable: false,
        description: "space guaranteed to the dataset and its descendants",
    },
    PropertyDef {
        name: "quota",
        value_type: ValueType::BytesOrNone,
        default: "0",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: false,
        description: "most space the dataset and its descendants may use (USED); writes beyond fail with EDQUOT (none: no limit)",
    },
    PropertyDef {
        name: "refquota",
        value_type: ValueType::BytesOrNone,
        default: "0",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: false,
        description: "most space the dataset's own data may take (REFER); writes beyond fail with EDQUOT (none: no limit)",
    },
    PropertyDef {
        name: "atime",
        value_type: ValueType::Choice(AtimeMode::NAMES),
        default: "relatime",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: true,
        description: "access times on reads: on (every read), relatime (when older than the last change or a day old), off (never)",
    },
    PropertyDef {
        name: "snapdir",
        value_type: ValueType::Choice(SnapdirMode::NAMES),
        default: "hidden",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: true,
        description: "whether the root of the mount lists .cairn (its snapshot directory shows every snapshot read-only); hidden, it can still be entered by name",
    },
    PropertyDef {
        name: "sharenfs",
        value_type: ValueType::ShareOptions,
        default: "off",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: true,
        description: "share the filesystem over NFSv3 (`cairn serve --nfs`): on exports /POOL/DATASET read-write with root squashed; a list of options instead of on: rw=NET[:NET...] and ro=NET[:NET...] (clients by address or network, e.g. rw=10.0.0.0/8:[fd00::]/8, * for all: others get no access; the most specific entry wins), ro (everyone read-only), root_squash, no_root_squash (root stays root); without rw=/ro= lists only loopback clients are served when the server listens beyond loopback; off refuses its mounts and handles",
    },
    PropertyDef {
        name: "devices",
        value_type: ValueType::Choice(<bool as ChoiceValue>::NAMES),
        default: "on",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: true,
        description: "device files on the mount can be opened (off: mounted nodev)",
    },
    PropertyDef {
        name: "setuid",
        value_type: ValueType::Choice(<bool as ChoiceValue>::NAMES),
        default: "on",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: true,
        description: "set-user-ID and set-group-ID bits take effect on the mount (off: nosuid)",
    },
    PropertyDef {
        name: "exec",
        value_type: ValueType::Choice(<bool as ChoiceValue>::NAMES),
        default: "on",
        applies_to: Some(DatasetKind::Filesystem),
        settable_after_create: true,
        inheritable: true,
        description: "programs on the mount can be run (off: mounted noexec)",
    },
    PropertyDef {
        name: "checksum",
        value_type: ValueType::Choice(ChecksumAlgorithm::NAMES),
        default: "on",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "checksum of new blocks (on = fletcher4)",
    },
    PropertyDef {
        name: "readonly",
        value_type: ValueType::Choice(<bool as ChoiceValue>::NAMES),
        default: "off",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "refuse writes",
    },
    PropertyDef {
        name: "sync",
        value_type: ValueType::Choice(SyncMode::NAMES),
        default: "standard",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "synchronous semantics (disabled is UNSAFE: acknowledged writes may be lost)",
    },
    PropertyDef {
        name: "logbias",
        value_type: ValueType::Choice(LogBias::NAMES),
        default: "latency",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "latency: log blocks on log devices; throughput: on the pool's disks, leaving the log devices to others",
    },
    PropertyDef {
        name: "loglanes",
        value_type: ValueType::Choice(LogLanes::NAMES),
        default: "1",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "independent intent-log chains per volume (takes effect at the next import)",
    },
    PropertyDef {
        name: "primarycache",
        value_type: ValueType::Choice(CacheMode::NAMES),
        default: "all",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "what reads leave in the RAM cache (ARC): all blocks, metadata only, or nothing",
    },
    PropertyDef {
        name: "secondarycache",
        value_type: ValueType::Choice(CacheMode::NAMES),
        default: "all",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "what reads may leave on the pool's cache devices (L2ARC): all blocks, metadata only, or nothing",
    },
    PropertyDef {
        name: "compression",
        value_type: ValueType::Choice(Compression::NAMES),
        default: "off",
        applies_to: None,
        settable_after_create: true,
        inheritable: true,
        description: "compression of new file and volume data blocks: off, on (lz4) or lz4; a block is kept compressed only if it saves an eighth of its size",
    },
];

pub fn lookup(name: &str) -> Result<&'static PropertyDef, DatasetError> {
    PROPERTIES
        .iter()
        .find(|def| def.name == name)
        .ok_or_else(|| DatasetError::UnknownProperty {
            name: name.to_string(),
            known: PROPERTIES
                .iter()
                .map(|def| def.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The properties that are a FUSE mount's flags: a change applies to live mounts.
const MOUNT_FLAGS: &[&str] = &["readonly", "devices", "setuid", "exec"];

impl PropertyDef {
    pub fn applies_to(&self, kind: DatasetKind) -> bool {
        self.applies_to.is_none_or(|only| only == kind)
    }

    /// Whether canonical values are byte counts (shown as sizes, aligned right).
    pub fn is_size(&self) -> bool {
        matches!(
            self.value_type,
            ValueType::Bytes | ValueType::BytesOrNone | ValueType::PowerOfTwoBytes { .. }
        )
    }

    /// Whether the property limits or guarantees space (`quota`, `refquota`, `reservation`,
    /// `refreservation`): a change is checked against the others and the use, and a canonical
    /// 0 means none (shown as `none`, as zfs shows it).
    pub fn is_space_limit(&self) -> bool {
        self.value_type == ValueType::BytesOrNone
    }

    /// Whether the property is a flag of the filesystem's mount (`readonly`, `nodev`,
    /// `nosuid`, `noexec`), which a front end applies to live mounts when it changes.
    pub fn is_mount_flag(&self) -> bool {
        MOUNT_FLAGS.contains(&self.name)
    }

    /// Whether `canonical` gives up a guarantee (`sync=disabled`: acknowledged writes can be
    /// lost), which people are warned of and shown.
    pub fn is_unsafe(&self, canonical: &str) -> bool {
        self.name == "sync" && SyncMode::from_canonical(canonical) == Some(SyncMode::Disabled)
    }

    /// The words a one-of-a-list property accepts (empty for the others).
    pub fn choices(&self) -> &'static [&'static str] {
        match self.value_type {
            ValueType::Choice(names) => names,
            _ => &[],
        }
    }

    /// Validates `value` and returns its canonical form.
    pub fn canonical(&self, value: &str) -> Result<String, DatasetError> {
        let invalid = |reason: String| DatasetError::InvalidProperty {
            name: self.name.to_string(),
            value: value.to_string(),
            reason,
        };
        match self.value_type {
            ValueType::Choice(choices) => {
                if choices.contains(&value) {
                    Ok(value.to_string())
                } else {
                    Err(invalid(format!("expected one of {}", choices.join(" | "))))
                }
            }
            ValueType::PathOrNone if value == "none" => Ok(value.to_string()),
            ValueType::PathOrNone => {
                let path = std::path::Path::new(value);
                if !path.is_absolute() || value.contains('\0') {
                    return Err(invalid("must be an absolute path or none".into()));
                }
                Ok(value.trim_end_matches('/').to_string()).map(|text| {
                    if text.is_empty() {
                        "/".to_string()
                    } else {
                        text
                    }
                })
            }
            ValueType::BytesOrNone if value == "none" => Ok("0".into()),
            ValueType::Bytes | ValueType::BytesOrNone => parse_size(value)
                .map(|bytes| bytes.to_string())
                .map_err(|err| invalid(err.to_string())),
            ValueType::PowerOfTwoBytes { min, max } => {
                let bytes = parse_size(value).map_err(|err| invalid(err.to_string()))?;
                if !bytes.is_power_of_two() || bytes < min || bytes > max {
                    return Err(invalid(format!(
                        "must be a power of two between {} and {}",
                        format_size(min),
                        format_size(max)
                    )));
                }
                Ok(bytes.to_string())
            }
            ValueType::ShareOptions => ShareNfs::canonical(value).map_err(invalid),
        }
    }
}

/// A size `parse_size` refuses; the text is as given (trimmed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("'{0}' is not a size (examples: 4096, 16K, 1.5G)")]
    NotASize(String),
    #[error("'{0}' is too large")]
    TooLarge(String),
    #[error("'{0}' is out of range")]
    OutOfRange(String),
}

/// Parses zfs-style sizes: plain bytes, or a number with K, M, G, T, P (powers of 1024, an
/// optional trailing B or iB); fractions allowed (`1.5G`).
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let text = text.trim();
    let upper = text.to_ascii_uppercase();
    let trimmed = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (number, shift) = match trimmed.chars().last() {
        Some('K') => (&trimmed[..trimmed.len() - 1], 10),
        Some('M') => (&trimmed[..trimmed.len() - 1], 20),
        Some('G') => (&trimmed[..trimmed.len() - 1], 30),
        Some('T') => (&trimmed[..trimmed.len() - 1], 40),
        Some('P') => (&trimmed[..trimmed.len() - 1], 50),
        _ => (trimmed, 0),
    };
    if number.is_empty() {
        return Err(SizeError::NotASize(text.to_string()));
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(1u64 << shift)
            .ok_or_else(|| SizeError::TooLarge(text.to_string()));
    }
    let value: f64 = number
        .parse()
        .map_err(|_| SizeError::NotASize(text.to_string()))?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(SizeError::OutOfRange(text.to_string()));
    }
    Ok(bytes.round() as u64)
}

/// Human-readable size with 3 significant digits, zfs style (`1.50G`, `16K`, `0`).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    if bytes < 1024 {
        return bytes.to_string();
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    let text = if value >= 100.0 || value.fract() == 0.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    format!("{text}{}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_use_powers_of_1024() {
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("8K"), Ok(8192));
        assert_eq!(parse_size("8k"), Ok(8192));
        assert_eq!(parse_size("1.5M"), Ok(3 << 19));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert!(parse_size("G").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999P").is_err());
    }

    #[test]
    fn sizes_print_like_zfs() {
        assert_eq!(format_size(0), "0");
        assert_eq!(format_size(16384), "16K");
        assert_eq!(format_size(3 << 29), "1.50G");
        assert_eq!(format_size(parse_size("123M").unwrap()), "123M");
    }

    #[test]
    fn volblocksize_must_be_a_power_of_two_in_range() {
        let def = lookup("volblocksize").unwrap();
        assert_eq!(def.canonical("8K").unwrap(), "8192");
        assert!(def.canonical("12K").is_err());
        assert!(def.canonical("1M").is_err());
        assert!(def.canonical("256").is_err());
    }

    #[test]
    fn unknown_property_names_the_known_ones() {
        let err = lookup("dedupe").unwrap_err().to_string();
        assert!(
            err.contains("dedupe") && err.contains("volblocksize"),
            "{err}"
        );
    }
}
