//! # cairn-dataset: datasets, properties and block volumes
//!
//! A dataset is a named object set with properties: the pool's root dataset (`tank`), volumes
//! (`tank/vol`), and later filesystems, snapshots and clones. The *dataset directory* — every
//! dataset's name, kind, properties, space used and object-set root pointer — is one small blob in
//! the pool's meta object set, rewritten copy-on-write in each txg that changes it.
//!
//! A volume is object 1 of its object set: a sparse array of `volblocksize` blocks. The volume
//! API (`Volume`) works at byte offsets — read, write, flush, trim, write-zeroes — and is what the
//! NBD server sits on. Unwritten and trimmed ranges are holes: they read as zeros and use no
//! space. Partial-block writes read, modify and re-dirty the block under a per-block stripe lock,
//! so concurrent writers to one block never lose each other's bytes.
//!
//! Durability: `write` returns once the change is in the open txg (like a disk's volatile
//! cache); `flush` returns once every write that completed before it is in a synced txg.

pub mod directory;
pub mod properties;
pub mod space;
mod volume;

pub use directory::{
    DatasetDirectory, DatasetRecord, LeafErrorRecord, ResilverRecord, ScrubRecord,
};
pub use volume::{SpaceCheck, SyncMode, VOLUME_OBJECT, Volume, VolumeStats, WriteOptions};

use serde::{Deserialize, Serialize};
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
pub enum DatasetKind {
    Filesystem,
    Volume,
}

impl DatasetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DatasetKind::Filesystem => "filesystem",
            DatasetKind::Volume => "volume",
        }
    }
}

#[derive(Debug, Error)]
pub enum DatasetError {
    #[error("unknown property '{name}' (known: {known})")]
    UnknownProperty { name: String, known: String },
    #[error("invalid value '{value}' for property '{name}': {reason}")]
    InvalidProperty {
        name: String,
        value: String,
        reason: String,
    },
    #[error("property '{name}' {reason}")]
    PropertyNotAllowed { name: String, reason: String },
    #[error("dataset '{0}' does not exist")]
    NoSuchDataset(String),
    #[error("dataset '{0}' already exists")]
    Exists(String),
    #[error("invalid dataset name '{name}': {reason}")]
    InvalidName { name: String, reason: String },
    #[error("dataset '{0}' is read-only")]
    ReadOnly(String),
    #[error("{name}: {op} of {len} bytes at offset {offset} is outside the volume ({size} bytes)")]
    OutOfRange {
        name: String,
        op: &'static str,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("out of space in pool: {0}")]
    NoSpace(String),
    #[error("{name}: I/O error: {reason}")]
    Io { name: String, reason: String },
    #[error("dataset directory is damaged: {0}")]
    Corrupt(String),
    /// A volume whose data object, as read from disk, disagrees with its directory record.
    #[error("volume '{name}' is damaged: its data object {problem}")]
    DamagedVolume { name: String, problem: String },
    /// A record read from disk that checksummed correctly but holds a value this build must not
    /// use (a crafted or buggy image): the directory is refused as a whole at import.
    #[error("dataset directory is damaged: the record of dataset '{dataset}' is invalid")]
    InvalidRecord {
        dataset: String,
        #[source]
        source: Box<DatasetError>,
    },
}

/// Checks a dataset name: `pool` or `pool/child[/child…]`, components of letters, digits and
/// `-_.:`; no empty components.
pub fn validate_name(name: &str) -> Result<(), DatasetError> {
    let invalid = |reason: &str| DatasetError::InvalidName {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty() || name.len() > 255 {
        return Err(invalid("must be 1 to 255 characters"));
    }
    for component in name.split('/') {
        if component.is_empty() {
            return Err(invalid("empty component"));
        }
        if !component
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
        {
            return Err(invalid("only letters, digits and - _ . : are allowed"));
        }
    }
    if !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return Err(invalid("must begin with a letter"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_names_follow_zfs_rules() {
        assert!(validate_name("tank").is_ok());
        assert!(validate_name("tank/vol-1.a").is_ok());
        assert!(validate_name("tank//vol").is_err());
        assert!(validate_name("tank/vol/").is_err());
        assert!(validate_name("1tank").is_err());
        assert!(validate_name("tank/v ol").is_err());
    }
}
