//! The dataset directory: every dataset's record, and small pool-wide records: the next id,
//! the last scrub's result, the command history (`cairn pool history`, bounded), per-leaf
//! error counters, the resilver and the missed-txgs table.
//!
//! This module is the directory in memory and its rules (names, parents, properties and their
//! inheritance). On disk (`directory_records.rs`) each dataset, each history entry and each
//! pool-wide record is a value of its own in a hashed map in the MOS, so a txg rewrites the
//! records that changed, never the whole directory: 1,000 datasets cost a txg that changes one
//! of them one record.
//!
//! A directory read from disk trusts nothing: the records passed their checksums, but a crafted
//! or buggy image can still hold values no code path would have written. Every record is
//! validated as `insert` and `set_property` would have (`validate_record`: name, parent,
//! canonical property values, a volume's size a non-zero multiple of its block size, a
//! decodable object-set pointer), so that later code may rely on them (`Volume::new` asserts
//! its block size). Property names this build does not know are kept: a later build may add
//! properties without a format change.

use crate::properties::{self, DatasetProperties, PROPERTIES};
use crate::{DatasetError, DatasetKind};
use cairn_format::BlockPointer;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// History entries kept; older ones are dropped.
pub const HISTORY_ENTRIES_MAX: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetRecord {
    pub id: u64,
    pub name: String,
    pub kind: DatasetKind,
    pub created_txg: u64,
    /// Locally set properties, canonical values.
    pub properties: BTreeMap<String, String>,
    /// Encoded root pointer of the dataset's object set (all zero: none yet).
    pub objset_bp: Vec<u8>,
    /// Bytes allocated by the object set (all copies).
    pub used_bytes: u64,
    /// `usedbysnapshots`: bytes only the dataset's snapshots hold. Not stored: derived from
    /// the snapshot table at import and kept current by the txg sync.
    #[serde(skip)]
    pub snapshots_bytes: u64,
    /// For a clone, bytes its head still shares with its origin (charged to the origin's
    /// dataset, not to it). Not stored: derived like `snapshots_bytes`.
    #[serde(skip)]
    pub origin_shared_bytes: u64,
}

impl DatasetRecord {
    pub fn objset_bp(&self) -> Result<BlockPointer, DatasetError> {
        BlockPointer::decode(&self.objset_bp)
            .map_err(|err| DatasetError::Corrupt(format!("{}: {err}", self.name)))
    }

    pub fn set_objset_bp(&mut self, bp: &BlockPointer) {
        self.objset_bp = bp.to_bytes().to_vec();
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScrubRecord {
    pub start_txg: u64,
    pub started_ms: u64,
    pub finished_ms: u64,
    pub bytes_scanned: u64,
    pub blocks_scanned: u64,
    pub bad_copies: u64,
    pub repaired_copies: u64,
    pub repaired_bytes: u64,
    pub unrecoverable_blocks: u64,
    /// Where unrecoverable damage was found: "dataset object N block B".
    pub damaged: Vec<String>,
    pub canceled: bool,
}

/// A resilver: copying the blocks a newly attached mirror side lacks. Kept in the directory,
/// updated as it goes, so a re-import resumes it where the last synced txg left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResilverRecord {
    /// The leaf being filled.
    pub leaf_guid: u64,
    /// The leaf to detach once it is done (`pool replace`).
    pub detach_guid: Option<u64>,
    /// Txg in which the leaf was attached.
    pub start_txg: u64,
    pub started_ms: u64,
    /// Every block below this offset of the vdev's data region is on the leaf (durable).
    pub next_offset: u64,
    pub copied_bytes: u64,
    /// Bytes to copy in all (known once the block tree has been walked).
    pub total_bytes: u64,
    /// Set when the resilver completed; the record then only reports.
    pub finished_ms: Option<u64>,
}

impl ResilverRecord {
    /// A resilver of `leaf_guid` starting now (`started_ms`), in txg `start_txg`: nothing
    /// copied yet.
    pub fn starting(
        leaf_guid: u64,
        detach_guid: Option<u64>,
        start_txg: u64,
        started_ms: u64,
    ) -> ResilverRecord {
        ResilverRecord {
            leaf_guid,
            detach_guid,
            start_txg,
            started_ms,
            next_offset: 0,
            copied_bytes: 0,
            total_bytes: 0,
            finished_ms: None,
        }
    }
}

/// Error counters of one leaf, kept across imports (as `cairn pool status` shows them) until
/// `cairn pool clear`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LeafErrorRecord {
    pub read: u64,
    pub write: u64,
    pub checksum: u64,
    pub repaired_bytes: u64,
}

/// Version of `MissedTxgsTable` this build writes and reads.
pub const MISSED_TXGS_VERSION: u32 = 1;

/// The txgs whose blocks one leaf may lack: it could not be written (faulted, missing) while
/// they were written to the other sides of its mirror. A leaf with a range is resilvered for
/// the blocks born in it before it counts as a copy again (ZFS's dirty-time log, kept as one
/// interval: a superset of what it missed, never less).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissedTxgs {
    /// The first txg it may lack blocks of (0: every txg — a side attached and never filled).
    pub first_txg: u64,
    /// The last one; none while the leaf is still out (it misses every txg synced meanwhile).
    pub last_txg: Option<u64>,
}

impl MissedTxgs {
    /// The union of two ranges as one interval (still missing if either is).
    pub fn merged(self, other: MissedTxgs) -> MissedTxgs {
        MissedTxgs {
            first_txg: self.first_txg.min(other.first_txg),
            last_txg: self.last_txg.zip(other.last_txg).map(|(a, b)| a.max(b)),
        }
    }

    /// Whether a block born in `txg` may be missing.
    pub fn contains(&self, txg: u64) -> bool {
        txg >= self.first_txg && self.last_txg.is_none_or(|last| txg <= last)
    }
}

/// Missed ranges by leaf guid, with the version of their layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissedTxgsTable {
    pub version: u32,
    pub leaves: BTreeMap<u64, MissedTxgs>,
}

impl Default for MissedTxgsTable {
    fn default() -> Self {
        MissedTxgsTable {
            version: MISSED_TXGS_VERSION,
            leaves: BTreeMap::new(),
        }
    }
}

impl MissedTxgsTable {
    /// Refuses what no build writes: another version, a zero guid, a range ending before it
    /// starts.
    pub(crate) fn validate(&self) -> Result<(), DatasetError> {
        if self.version != MISSED_TXGS_VERSION {
            return Err(DatasetError::Corrupt(format!(
                "missed-txgs table version {} (this build reads {MISSED_TXGS_VERSION})",
                self.version
            )));
        }
        for (guid, range) in &self.leaves {
            if *guid == 0 || range.last_txg.is_some_and(|last| last < range.first_txg) {
                return Err(DatasetError::Corrupt(format!(
                    "missed txgs of leaf {guid}: {range:?}"
                )));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DatasetDirectory {
    pub next_id: u64,
    pub datasets: BTreeMap<String, DatasetRecord>,
    pub last_scrub: Option<ScrubRecord>,
    /// Commands that changed the pool, oldest first, at most `HISTORY_ENTRIES_MAX`.
    pub history: Vec<String>,
    /// The sequence number of `history[0]` (each entry is a record of its own on disk, keyed
    /// by it: appending one writes one record, whatever the history holds).
    pub history_start_seq: u64,
    /// Per-leaf error counters by leaf guid.
    pub leaf_errors: BTreeMap<u64, LeafErrorRecord>,
    /// The running or last resilver.
    pub resilver: Option<ResilverRecord>,
    /// What each leaf that was out may lack (`MissedTxgs`); a leaf is absent once it holds
    /// everything.
    pub missed_txgs: MissedTxgsTable,
}

/// Where a property's effective value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PropertySource {
    Local,
    Inherited(String),
    Default,
}

impl PropertySource {
    pub fn describe(&self) -> String {
        match self {
            PropertySource::Local => "local".into(),
            PropertySource::Inherited(from) => format!("inherited from {from}"),
            PropertySource::Default => "default".into(),
        }
    }
}

impl DatasetDirectory {
    /// Checks one decoded record as if it were being inserted now (see the module comment).
    pub(crate) fn validate_record(&self, record: &DatasetRecord) -> Result<(), DatasetError> {
        crate::validate_stored_name(&record.name)?;
        let misplaced = match record.name.rsplit_once('/') {
            Some((parent, _)) => (self.get(parent)?.kind != DatasetKind::Filesystem)
                .then(|| format!("parent '{parent}' is a volume")),
            None => (record.kind != DatasetKind::Filesystem)
                .then(|| "the pool's root dataset must be a filesystem".to_string()),
        };
        if let Some(reason) = misplaced {
            return Err(DatasetError::InvalidName {
                name: record.name.clone(),
                reason,
            });
        }
        for (property, value) in &record.properties {
            let Ok(def) = properties::lookup(property) else {
                continue;
            };
            if !def.applies_to(record.kind) {
                return Err(DatasetError::PropertyNotAllowed {
                    name: property.clone(),
                    reason: format!("does not apply to {}s", record.kind.as_str()),
                });
            }
            if def.canonical(value)? != *value {
                return Err(DatasetError::InvalidProperty {
                    name: property.clone(),
                    value: value.clone(),
                    reason: "not in canonical form".into(),
                });
            }
        }
        if record.kind == DatasetKind::Volume {
            self.validate_volume_size(record)?;
        }
        record.objset_bp().map(|_| ())
    }

    /// A volume's size must be a non-zero multiple of its block size (as `create -V` demands).
    fn validate_volume_size(&self, record: &DatasetRecord) -> Result<(), DatasetError> {
        let number = |property: &str| -> Result<u64, DatasetError> {
            let (value, _) = self.property(&record.name, property)?;
            value.parse().map_err(|_| DatasetError::InvalidProperty {
                name: property.to_string(),
                value: value.clone(),
                reason: "not a number".into(),
            })
        };
        let size_bytes = number("volsize")?;
        let block_bytes = number("volblocksize")?;
        if size_bytes == 0 || block_bytes == 0 || !size_bytes.is_multiple_of(block_bytes) {
            return Err(DatasetError::InvalidProperty {
                name: "volsize".into(),
                value: size_bytes.to_string(),
                reason: format!("must be a non-zero multiple of volblocksize ({block_bytes})"),
            });
        }
        Ok(())
    }

    pub fn get(&self, name: &str) -> Result<&DatasetRecord, DatasetError> {
        self.datasets
            .get(name)
            .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()))
    }

    pub fn get_mut(&mut self, name: &str) -> Result<&mut DatasetRecord, DatasetError> {
        self.datasets
            .get_mut(name)
            .ok_or_else(|| DatasetError::NoSuchDataset(name.to_string()))
    }

    pub fn children<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a DatasetRecord> + 'a {
        let prefix = format!("{name}/");
        self.datasets
            .values()
            .filter(move |record| record.name.starts_with(&prefix))
    }

    /// Adds a record; the parent must exist and the name must be new.
    pub fn insert(
        &mut self,
        name: &str,
        kind: DatasetKind,
        txg: u64,
        properties: BTreeMap<String, String>,
    ) -> Result<&mut DatasetRecord, DatasetError> {
        crate::validate_stored_name(name)?;
        if self.datasets.contains_key(name) {
            return Err(DatasetError::Exists(name.to_string()));
        }
        if let Some((parent, _)) = name.rsplit_once('/') {
            let parent_record = self.get(parent)?;
            if parent_record.kind != DatasetKind::Filesystem {
                return Err(DatasetError::InvalidName {
                    name: name.to_string(),
                    reason: format!("parent '{parent}' is a volume"),
                });
            }
        }
        self.next_id += 1;
        let record = DatasetRecord {
            id: self.next_id,
            name: name.to_string(),
            kind,
            created_txg: txg,
            properties,
            objset_bp: BlockPointer::HOLE.to_bytes().to_vec(),
            used_bytes: 0,
            snapshots_bytes: 0,
            origin_shared_bytes: 0,
        };
        Ok(self.datasets.entry(name.to_string()).or_insert(record))
    }

    /// Renames dataset `from`, which has no children, to `to` (new, its parent an existing
    /// filesystem): a receive's hidden dataset taking its target's name. Its id, and so its
    /// on-disk key, stays.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), DatasetError> {
        crate::validate_stored_name(to)?;
        if self.datasets.contains_key(to) {
            return Err(DatasetError::Exists(to.to_string()));
        }
        if let Some(child) = self.children(from).next() {
            return Err(DatasetError::InvalidName {
                name: from.to_string(),
                reason: format!("has children ({})", child.name),
            });
        }
        let (parent, _) = to
            .rsplit_once('/')
            .ok_or_else(|| DatasetError::InvalidName {
                name: to.to_string(),
                reason: "not inside a pool".into(),
            })?;
        if self.get(parent)?.kind != DatasetKind::Filesystem {
            return Err(DatasetError::InvalidName {
                name: to.to_string(),
                reason: format!("parent '{parent}' is a volume"),
            });
        }
        let mut record = self
            .datasets
            .remove(from)
            .ok_or_else(|| DatasetError::NoSuchDataset(from.to_string()))?;
        record.name = to.to_string();
        self.datasets.insert(to.to_string(), record);
        Ok(())
    }

    /// Effective value of a property for a dataset, with its source.
    pub fn property(
        &self,
        name: &str,
        property: &str,
    ) -> Result<(String, PropertySource), DatasetError> {
        let def = properties::lookup(property)?;
        let record = self.get(name)?;
        if let Some(value) = record.properties.get(property) {
            return Ok((value.clone(), PropertySource::Local));
        }
        if def.inheritable {
            let mut ancestor = name;
            while let Some((parent, _)) = ancestor.rsplit_once('/') {
                if let Some(value) = self.get(parent)?.properties.get(property) {
                    return Ok((value.clone(), PropertySource::Inherited(parent.to_string())));
                }
                ancestor = parent;
            }
        }
        Ok((def.default.to_string(), PropertySource::Default))
    }

    /// Every property of dataset `name`, resolved and typed (`properties::DatasetProperties`).
    pub fn properties_of(&self, name: &str) -> Result<DatasetProperties, DatasetError> {
        let kind = self.get(name)?.kind;
        DatasetProperties::resolve(name, kind, |property| Ok(self.property(name, property)?.0))
    }

    /// `properties_of` a dataset that must be of `kind` (an `InvalidName` error otherwise):
    /// what opening a volume or a filesystem starts with.
    pub fn properties_of_kind(
        &self,
        name: &str,
        kind: DatasetKind,
    ) -> Result<DatasetProperties, DatasetError> {
        if self.get(name)?.kind != kind {
            return Err(DatasetError::InvalidName {
                name: name.into(),
                reason: format!("not a {}", kind.as_str()),
            });
        }
        self.properties_of(name)
    }

    /// Every property that applies to the dataset, resolved.
    pub fn all_properties(
        &self,
        name: &str,
    ) -> Result<Vec<(&'static str, String, PropertySource)>, DatasetError> {
        let kind = self.get(name)?.kind;
        PROPERTIES
            .iter()
            .filter(|def| def.applies_to(kind))
            .map(|def| {
                self.property(name, def.name)
                    .map(|(value, source)| (def.name, value, source))
            })
            .collect()
    }

    /// Validates and sets a property after creation.
    pub fn set_property(
        &mut self,
        name: &str,
        property: &str,
        value: &str,
    ) -> Result<String, DatasetError> {
        let def = properties::lookup(property)?;
        let record = self.get_mut(name)?;
        if !def.applies_to(record.kind) {
            return Err(DatasetError::PropertyNotAllowed {
                name: property.to_string(),
                reason: format!("does not apply to {}s", record.kind.as_str()),
            });
        }
        if !def.settable_after_create {
            return Err(DatasetError::PropertyNotAllowed {
                name: property.to_string(),
                reason: "can only be set at creation".into(),
            });
        }
        let canonical = def.canonical(value)?;
        record
            .properties
            .insert(property.to_string(), canonical.clone());
        Ok(canonical)
    }

    pub fn record_history(&mut self, entry: String) {
        self.history.push(entry);
        if self.history.len() > HISTORY_ENTRIES_MAX {
            let excess = self.history.len() - HISTORY_ENTRIES_MAX;
            self.history.drain(..excess);
            self.history_start_seq += excess as u64;
        }
    }
}

/// Validates creation-time properties for a new dataset of `kind`, returning canonical values.
pub fn creation_properties(
    kind: DatasetKind,
    requested: &[(String, String)],
) -> Result<BTreeMap<String, String>, DatasetError> {
    let mut out = BTreeMap::new();
    for (property, value) in requested {
        let def = properties::lookup(property)?;
        if !def.applies_to(kind) {
            return Err(DatasetError::PropertyNotAllowed {
                name: property.clone(),
                reason: format!("does not apply to {}s", kind.as_str()),
            });
        }
        out.insert(property.clone(), def.canonical(value)?);
    }
    Ok(out)
}

/// How much of a new volume's space is promised at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provisioning {
    /// As in ZFS, every block is promised: `refreservation` defaults to the most the
    /// volume's object set can take, so writes to a thick volume never meet a full pool.
    #[default]
    Thick,
    /// Nothing is promised (`create -s`): `refreservation=none`.
    Sparse,
}

/// The stored properties of a new volume of `size_bytes`: `requested` validated (a `volsize`
/// among them is replaced), the size checked against the block size, and `refreservation`
/// set by `provisioning` unless given. A sparse volume with a `refreservation` is refused:
/// the two contradict each other.
pub fn volume_creation_properties(
    size_bytes: u64,
    provisioning: Provisioning,
    requested: &[(String, String)],
) -> Result<BTreeMap<String, String>, DatasetError> {
    let mut requested = requested.to_vec();
    requested.retain(|(key, _)| key != "volsize");
    requested.push(("volsize".into(), size_bytes.to_string()));
    let mut properties = creation_properties(DatasetKind::Volume, &requested)?;
    let block_bytes: u64 = match properties.get("volblocksize") {
        Some(value) => value.parse().map_err(|_| DatasetError::InvalidProperty {
            name: "volblocksize".into(),
            value: value.clone(),
            reason: "not a number".into(),
        })?,
        None => properties::VOLBLOCKSIZE_DEFAULT,
    };
    if size_bytes == 0 || !size_bytes.is_multiple_of(block_bytes) {
        return Err(DatasetError::InvalidProperty {
            name: "volsize".into(),
            value: size_bytes.to_string(),
            reason: format!(
                "must be a non-zero multiple of volblocksize ({})",
                properties::format_size(block_bytes)
            ),
        });
    }
    let given = properties.contains_key("refreservation");
    let promised = match provisioning {
        Provisioning::Sparse if given => {
            return Err(DatasetError::PropertyNotAllowed {
                name: "refreservation".into(),
                reason: "contradicts a sparse volume (-s)".into(),
            });
        }
        Provisioning::Sparse => 0,
        Provisioning::Thick => {
            cairn_object::object_set_bytes_max(block_bytes, size_bytes / block_bytes)
        }
    };
    properties
        .entry("refreservation".into())
        .or_insert_with(|| promised.to_string());
    Ok(properties)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn directory() -> DatasetDirectory {
        let mut dir = DatasetDirectory::default();
        dir.insert("tank", DatasetKind::Filesystem, 1, BTreeMap::new())
            .unwrap();
        let props = creation_properties(
            DatasetKind::Volume,
            &[
                ("volblocksize".into(), "8K".into()),
                ("volsize".into(), "1G".into()),
            ],
        )
        .unwrap();
        dir.insert("tank/vol", DatasetKind::Volume, 2, props)
            .unwrap();
        dir
    }

    #[test]
    fn properties_inherit_from_parents_and_report_their_source() {
        let mut dir = directory();
        assert_eq!(
            dir.property("tank/vol", "checksum").unwrap(),
            ("on".to_string(), PropertySource::Default)
        );
        dir.set_property("tank", "checksum", "sha256").unwrap();
        assert_eq!(
            dir.property("tank/vol", "checksum").unwrap(),
            (
                "sha256".to_string(),
                PropertySource::Inherited("tank".into())
            )
        );
        assert_eq!(dir.property("tank/vol", "volblocksize").unwrap().0, "8192");
    }

    #[test]
    fn creation_only_and_unknown_properties_are_refused() {
        let mut dir = directory();
        assert!(dir.set_property("tank/vol", "volblocksize", "4K").is_err());
        assert!(dir.set_property("tank/vol", "nosuch", "1").is_err());
        assert!(dir.set_property("tank", "volsize", "1G").is_err());
        assert!(
            dir.insert("tank/vol/x", DatasetKind::Volume, 3, BTreeMap::new())
                .is_err()
        );
        assert!(
            dir.insert("nopool/x", DatasetKind::Volume, 3, BTreeMap::new())
                .is_err()
        );
    }

    #[test]
    fn directory_round_trips() {
        let mut dir = directory();
        assert_eq!(DatasetDirectory::decode(&dir.encode()).unwrap(), dir);
        dir.resilver = Some(ResilverRecord {
            leaf_guid: 7,
            detach_guid: Some(9),
            start_txg: 12,
            started_ms: 1_000,
            next_offset: 1 << 20,
            copied_bytes: 4096,
            total_bytes: 8192,
            finished_ms: None,
        });
        assert_eq!(DatasetDirectory::decode(&dir.encode()).unwrap(), dir);
        dir.missed_txgs.leaves.insert(
            7,
            MissedTxgs {
                first_txg: 10,
                last_txg: Some(14),
            },
        );
        dir.missed_txgs.leaves.insert(
            8,
            MissedTxgs {
                first_txg: 0,
                last_txg: None,
            },
        );
        assert_eq!(DatasetDirectory::decode(&dir.encode()).unwrap(), dir);
    }

    #[test]
    fn impossible_missed_txgs_are_refused() {
        let mut dir = directory();
        dir.missed_txgs.leaves.insert(
            7,
            MissedTxgs {
                first_txg: 10,
                last_txg: Some(9),
            },
        );
        assert!(DatasetDirectory::decode(&dir.encode()).is_err());
        let mut dir = directory();
        dir.missed_txgs.version = 2;
        assert!(DatasetDirectory::decode(&dir.encode()).is_err());
        let mut dir = directory();
        dir.missed_txgs.leaves.insert(
            0,
            MissedTxgs {
                first_txg: 1,
                last_txg: None,
            },
        );
        assert!(DatasetDirectory::decode(&dir.encode()).is_err());
    }

    #[test]
    fn missed_ranges_merge_into_one_interval() {
        let a = MissedTxgs {
            first_txg: 10,
            last_txg: Some(14),
        };
        let b = MissedTxgs {
            first_txg: 20,
            last_txg: Some(25),
        };
        let merged = a.merged(b);
        assert_eq!((merged.first_txg, merged.last_txg), (10, Some(25)));
        assert!(merged.contains(17) && !merged.contains(9) && !merged.contains(26));
        let out = MissedTxgs {
            first_txg: 30,
            last_txg: None,
        };
        assert_eq!(a.merged(out).last_txg, None);
        assert!(a.merged(out).contains(u64::MAX));
    }

    /// The directory with one stored value of `tank/vol` replaced as a crafted image could.
    fn with_volume_property(property: &str, value: &str) -> Vec<u8> {
        let mut dir = directory();
        dir.get_mut("tank/vol")
            .unwrap()
            .properties
            .insert(property.into(), value.into());
        dir.encode()
    }

    fn refusal(bytes: &[u8]) -> String {
        let err = DatasetDirectory::decode(bytes).expect_err("a damaged directory must be refused");
        let mut text = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }

    #[test]
    fn stored_values_are_validated_at_decode() {
        let err = refusal(&with_volume_property("volblocksize", "1000"));
        assert!(
            err.contains("tank/vol") && err.contains("volblocksize") && err.contains("1000"),
            "{err}"
        );
        let err = refusal(&with_volume_property("volsize", "12288"));
        assert!(err.contains("volsize") && err.contains("multiple"), "{err}");
        let err = refusal(&with_volume_property("volsize", "0"));
        assert!(err.contains("volsize"), "{err}");
        let err = refusal(&with_volume_property("sync", "sometimes"));
        assert!(err.contains("sync") && err.contains("sometimes"), "{err}");
        let err = refusal(&with_volume_property("volblocksize", "8K"));
        assert!(err.contains("canonical"), "{err}");
        // A property of a newer build is kept, not refused.
        let newer = with_volume_property("futureprop", "x");
        assert!(DatasetDirectory::decode(&newer).is_ok());
    }

    #[test]
    fn records_in_impossible_places_are_refused() {
        let mut dir = directory();
        let mut child = dir.get("tank/vol").unwrap().clone();
        child.name = "tank/vol/sub".into();
        dir.next_id += 1;
        child.id = dir.next_id;
        dir.datasets.insert(child.name.clone(), child);
        let err = refusal(&dir.encode());
        assert!(
            err.contains("tank/vol/sub") && err.contains("volume"),
            "{err}"
        );

        let mut dir = directory();
        dir.get_mut("tank").unwrap().kind = DatasetKind::Volume;
        assert!(refusal(&dir.encode()).contains("root dataset"));

        let mut dir = directory();
        let mut orphan = dir.get("tank/vol").unwrap().clone();
        orphan.name = "other/vol".into();
        dir.next_id += 1;
        orphan.id = dir.next_id;
        dir.datasets.insert(orphan.name.clone(), orphan);
        assert!(refusal(&dir.encode()).contains("other"));
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = DatasetDirectory::decode(&bytes);
        }
    }
}

#[cfg(test)]
mod typed_property_tests {
    use super::*;
    use crate::properties::{
        AtimeMode, ChecksumAlgorithm, Compression, LogBias, LogLanes, PROPERTIES, SnapdirMode,
        SyncMode,
    };
    use std::collections::BTreeMap;

    fn directory() -> DatasetDirectory {
        let mut dir = DatasetDirectory::default();
        dir.insert("tank", DatasetKind::Filesystem, 1, BTreeMap::new())
            .unwrap();
        dir.insert("tank/fs", DatasetKind::Filesystem, 1, BTreeMap::new())
            .unwrap();
        let volume = BTreeMap::from([
            ("volsize".to_string(), "1048576".to_string()),
            ("volblocksize".to_string(), "16384".to_string()),
        ]);
        dir.insert("tank/vol", DatasetKind::Volume, 1, volume)
            .unwrap();
        dir
    }

    /// A valid canonical value other than the property's default.
    fn other_value(name: &str, default: &str, choices: &[&str], is_size: bool) -> String {
        // The last word: the first other one may be an alias of the default (`on` = fletcher4).
        if let Some(word) = choices.iter().rev().find(|word| **word != default) {
            return word.to_string();
        }
        if name == "mountpoint" {
            return "/mnt/elsewhere".into();
        }
        if name == "sharenfs" {
            return "no_root_squash".into();
        }
        assert!(is_size, "{name}: no other value to try");
        let default: u64 = default.parse().unwrap();
        (if default == 0 { 3 << 20 } else { default * 2 }).to_string()
    }

    #[test]
    fn defaults_are_the_tables() {
        let dir = directory();
        let fs = dir.properties_of("tank/fs").unwrap();
        assert_eq!(fs.kind, DatasetKind::Filesystem);
        assert_eq!(fs.sync, SyncMode::default());
        assert_eq!(fs.logbias, LogBias::default());
        assert_eq!(fs.atime, AtimeMode::default());
        assert_eq!(fs.snapdir, SnapdirMode::Hidden);
        assert_eq!(fs.loglanes, LogLanes::default());
        assert_eq!(fs.checksum, ChecksumAlgorithm::Fletcher4);
        assert_eq!(fs.compression, Compression::Off);
        assert_eq!(fs.recordsize_bytes, 128 * 1024);
        assert_eq!(fs.mountpoint, None);
        assert!(fs.devices && fs.setuid && fs.exec && !fs.readonly);
        let vol = dir.properties_of("tank/vol").unwrap();
        assert_eq!(
            (vol.volsize_bytes, vol.volblocksize_bytes),
            (1 << 20, 16384)
        );
    }

    #[test]
    fn every_property_is_a_field() {
        for def in PROPERTIES {
            let mut dir = directory();
            let dataset = if def.applies_to(DatasetKind::Filesystem) {
                "tank/fs"
            } else {
                "tank/vol"
            };
            let before = dir.properties_of(dataset).unwrap();
            let value = other_value(def.name, def.default, def.choices(), def.is_size());
            let canonical = def.canonical(&value).unwrap();
            dir.get_mut(dataset)
                .unwrap()
                .properties
                .insert(def.name.to_string(), canonical.clone());
            let after = dir.properties_of(dataset).unwrap();
            assert_ne!(before, after, "{}={canonical} left no mark", def.name);
        }
    }

    #[test]
    fn children_inherit_typed_values() {
        let mut dir = directory();
        dir.set_property("tank", "sync", "always").unwrap();
        dir.set_property("tank", "compression", "on").unwrap();
        let fs = dir.properties_of("tank/fs").unwrap();
        assert_eq!(fs.sync, SyncMode::Always);
        assert_eq!(fs.compression, Compression::Lz4);
    }

    #[test]
    fn an_unreadable_stored_value_is_an_error_not_a_default() {
        let mut dir = directory();
        dir.get_mut("tank/fs")
            .unwrap()
            .properties
            .insert("sync".into(), "sometimes".into());
        let err = dir.properties_of("tank/fs").unwrap_err().to_string();
        assert!(err.contains("sync") && err.contains("sometimes"), "{err}");
    }
}
