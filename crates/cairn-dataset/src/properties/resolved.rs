//! Every property of one dataset, resolved (local → inherited → default) and parsed once into
//! typed fields: what the engine hands to volumes, filesystems, intent logs, object sets and
//! mounts, so that no layer above looks a property up by name or parses its text.
//!
//! Invariant: every entry of `PROPERTIES` is a field here (a test sets each one and sees the
//! struct change). A stored value that does not parse is damage (the directory's decoder
//! checks canonical form when it reads the blob), reported as an invalid property, never
//! replaced by a default.

use super::values::{
    AtimeMode, CacheMode, ChecksumAlgorithm, ChoiceValue, Compression, LogBias, LogLanes, SyncMode,
};
use crate::directory::DatasetDirectory;
use crate::{DatasetError, DatasetKind};
use std::path::PathBuf;

/// The typed properties of one dataset. Size fields hold bytes; 0 in `quota_bytes`,
/// `refquota_bytes`, `reservation_bytes` and `refreservation_bytes` means none. Properties
/// that do not apply to the dataset's kind hold their defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatasetProperties {
    pub kind: DatasetKind,
    pub volsize_bytes: u64,
    pub volblocksize_bytes: u32,
    pub recordsize_bytes: u32,
    /// `None`: `mountpoint=none`.
    pub mountpoint: Option<PathBuf>,
    pub refreservation_bytes: u64,
    pub reservation_bytes: u64,
    pub quota_bytes: u64,
    pub refquota_bytes: u64,
    pub atime: AtimeMode,
    pub devices: bool,
    pub setuid: bool,
    pub exec: bool,
    pub checksum: ChecksumAlgorithm,
    pub readonly: bool,
    pub sync: SyncMode,
    pub logbias: LogBias,
    pub loglanes: LogLanes,
    pub primarycache: CacheMode,
    pub secondarycache: CacheMode,
    pub compression: Compression,
}

impl DatasetDirectory {
    /// Every property of dataset `name`, resolved and typed.
    pub fn properties_of(&self, name: &str) -> Result<DatasetProperties, DatasetError> {
        let kind = self.get(name)?.kind;
        let read = Reader {
            directory: self,
            dataset: name,
        };
        Ok(DatasetProperties {
            kind,
            volsize_bytes: read.bytes("volsize")?,
            volblocksize_bytes: read.block_bytes("volblocksize")?,
            recordsize_bytes: read.block_bytes("recordsize")?,
            mountpoint: read.path_or_none("mountpoint")?,
            refreservation_bytes: read.bytes("refreservation")?,
            reservation_bytes: read.bytes("reservation")?,
            quota_bytes: read.bytes("quota")?,
            refquota_bytes: read.bytes("refquota")?,
            atime: read.choice("atime")?,
            devices: read.choice("devices")?,
            setuid: read.choice("setuid")?,
            exec: read.choice("exec")?,
            checksum: read.choice("checksum")?,
            readonly: read.choice("readonly")?,
            sync: read.choice("sync")?,
            logbias: read.choice("logbias")?,
            loglanes: read.choice("loglanes")?,
            primarycache: read.choice("primarycache")?,
            secondarycache: read.choice("secondarycache")?,
            compression: read.choice("compression")?,
        })
    }
}

/// Reads one dataset's canonical values by the table's names (the one place that does).
struct Reader<'a> {
    directory: &'a DatasetDirectory,
    dataset: &'a str,
}

impl Reader<'_> {
    fn text(&self, property: &str) -> Result<String, DatasetError> {
        Ok(self.directory.property(self.dataset, property)?.0)
    }

    fn unreadable(&self, property: &str, value: String, expected: &str) -> DatasetError {
        DatasetError::InvalidProperty {
            name: property.to_string(),
            value,
            reason: format!("stored for '{}' but not {expected}", self.dataset),
        }
    }

    fn bytes(&self, property: &str) -> Result<u64, DatasetError> {
        let text = self.text(property)?;
        text.parse()
            .map_err(|_| self.unreadable(property, text, "a byte count"))
    }

    fn block_bytes(&self, property: &str) -> Result<u32, DatasetError> {
        let text = self.text(property)?;
        text.parse()
            .map_err(|_| self.unreadable(property, text, "a block size"))
    }

    fn path_or_none(&self, property: &str) -> Result<Option<PathBuf>, DatasetError> {
        let text = self.text(property)?;
        Ok((text != "none").then(|| PathBuf::from(text)))
    }

    fn choice<T: ChoiceValue>(&self, property: &str) -> Result<T, DatasetError> {
        let text = self.text(property)?;
        T::from_canonical(&text).ok_or_else(|| {
            let expected = format!("one of {}", T::NAMES.join(" | "));
            self.unreadable(property, text, &expected)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::properties::PROPERTIES;
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
