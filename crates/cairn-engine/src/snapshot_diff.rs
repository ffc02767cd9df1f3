//! `cairn diff --blocks`: the byte ranges of a volume that differ between one of its snapshots
//! and a later snapshot or its live head (the walk itself is `cairn_object::changed_blocks`,
//! whose doc says why its cost follows the change, not the volume's size).
//!
//! The older side must be a snapshot and strictly older than the newer side, both of one
//! volume: the birth-txg rule that lets the walk skip unchanged subtrees holds only from an
//! older version to a newer one of the same tree. Anything else is refused (`EngineError::Diff`)
//! before any block is read.
//!
//! Consistency: against the live head, the pool syncs first, so every write acknowledged
//! before the call is in the tree compared. Both roots are then taken from one synced txg
//! (`SyncedTree`), whose guard keeps every block freed after that txg from reuse while the walk
//! reads: a snapshot destroyed, or head blocks overwritten, meanwhile still read as they were.

use crate::EngineError;
use crate::core::SyncedTree;
use crate::pool::Pool;
use cairn_dataset::{DatasetKind, SnapshotName, VOLUME_OBJECT};
use cairn_object::ByteRange;

/// What `diff --blocks` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDiff {
    /// Ascending, disjoint, adjacent ones merged, within the volume.
    pub ranges: Vec<ByteRange>,
    /// Blocks the walk read or reported (`cairn_object::ChangedBlocks::blocks_visited`): the
    /// cost, to compare with `volsize_bytes / volblocksize_bytes`.
    pub blocks_visited: u64,
    pub volsize_bytes: u64,
    pub volblocksize_bytes: u32,
}

impl Pool {
    /// The ranges of the volume that differ between snapshot `older` (`vol@a`) and `newer`, a
    /// later snapshot of the same volume (`vol@b`) or the volume itself (`vol`, its live
    /// contents).
    pub fn diff_blocks(&self, older: &str, newer: &str) -> Result<BlockDiff, EngineError> {
        let older_name = SnapshotName::parse(older).map_err(|_| {
            EngineError::Diff(format!(
                "'{older}' is not a snapshot: the older side must be one (VOLUME@SNAPSHOT)"
            ))
        })?;
        let dataset = older_name.dataset.clone();
        let newer_is_head = !newer.contains('@');
        let newer_dataset = if newer_is_head {
            newer.to_string()
        } else {
            SnapshotName::parse(newer)?.dataset
        };
        if newer_dataset != dataset {
            return Err(EngineError::Diff(format!(
                "'{older}' and '{newer}' are not of one dataset"
            )));
        }
        let properties = self
            .core
            .directory
            .lock()
            .properties_of_kind(&dataset, DatasetKind::Volume)
            .map_err(|err| match err {
                cairn_dataset::DatasetError::InvalidName { .. } => EngineError::Diff(format!(
                    "'{dataset}' is not a volume: --blocks compares volumes"
                )),
                other => other.into(),
            })?;
        let older_txg = self.snapshot_info(older)?.created_txg;
        if !newer_is_head {
            let newer_txg = self.snapshot_info(newer)?.created_txg;
            if newer_txg <= older_txg {
                return Err(EngineError::Diff(format!(
                    "'{older}' (txg {older_txg}) is not older than '{newer}' (txg {newer_txg}): \
                     name the older snapshot first"
                )));
            }
        } else if !self.is_readonly() {
            self.sync()?;
        }
        let synced = SyncedTree::take(&self.core, self.txg_engine().ok().map(|e| &**e))?;
        let root_of = |name: &str| {
            synced
                .roots
                .iter()
                .find(|root| root.name == name)
                .map(|root| root.root_bp)
                .ok_or_else(|| {
                    EngineError::from(cairn_dataset::DatasetError::NoSuchDataset(name.into()))
                })
        };
        let (older_root, newer_root) = (root_of(older)?, root_of(newer)?);
        let changed = cairn_object::changed_blocks(
            self.core.mos.cached_io(),
            &older_root,
            older_txg,
            &newer_root,
            VOLUME_OBJECT,
        )?;
        let volsize_bytes = properties.volsize_bytes;
        let ranges = changed
            .ranges
            .into_iter()
            .filter(|range| range.offset_bytes < volsize_bytes)
            .map(|range| ByteRange {
                offset_bytes: range.offset_bytes,
                length_bytes: range.length_bytes.min(volsize_bytes - range.offset_bytes),
            })
            .collect();
        Ok(BlockDiff {
            ranges,
            blocks_visited: changed.blocks_visited,
            volsize_bytes,
            volblocksize_bytes: properties.volblocksize_bytes,
        })
    }
}
