//! Every property of one dataset, resolved (local → inherited → default) and parsed once into
//! typed fields: what the engine hands to volumes, filesystems, intent logs, object sets and
//! mounts, so that no layer above looks a property up by name or parses its text.
//!
//! Invariant: every entry of `PROPERTIES` is a field here (a test in `directory.rs` sets each one and sees the
//! struct change). A stored value that does not parse is damage (the directory's decoder
//! checks canonical form when it reads the blob), reported as an invalid property, never
//! replaced by a default.

use super::share::ShareNfs;
use super::values::{
    AtimeMode, CacheMode, ChecksumAlgorithm, ChoiceValue, Compression, LogBias, LogLanes,
    SnapdirMode, SyncMode,
};
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
    pub snapdir: SnapdirMode,
    /// Exported over NFS, and how (`sharenfs`).
    pub sharenfs: ShareNfs,
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

impl DatasetProperties {
    /// Every property of a dataset of `kind`, from `value_of` (a property's resolved canonical
    /// value by name: `DatasetDirectory::properties_of` passes its `property`).
    pub fn resolve(
        dataset: &str,
        kind: DatasetKind,
        value_of: impl Fn(&str) -> Result<String, DatasetError>,
    ) -> Result<DatasetProperties, DatasetError> {
        let read = Reader { dataset, value_of };
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
            snapdir: read.choice("snapdir")?,
            sharenfs: read.share("sharenfs")?,
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
struct Reader<'a, F> {
    dataset: &'a str,
    value_of: F,
}

impl<F: Fn(&str) -> Result<String, DatasetError>> Reader<'_, F> {
    fn text(&self, property: &str) -> Result<String, DatasetError> {
        (self.value_of)(property)
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

    fn share(&self, property: &str) -> Result<ShareNfs, DatasetError> {
        let text = self.text(property)?;
        ShareNfs::parse(&text).map_err(|reason| {
            self.unreadable(property, text, &format!("a sharenfs value ({reason})"))
        })
    }

    fn choice<T: ChoiceValue>(&self, property: &str) -> Result<T, DatasetError> {
        let text = self.text(property)?;
        T::from_canonical(&text).ok_or_else(|| {
            let expected = format!("one of {}", T::NAMES.join(" | "));
            self.unreadable(property, text, &expected)
        })
    }
}
