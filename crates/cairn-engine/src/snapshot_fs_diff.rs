//! `cairn diff` of filesystems: the files and directories created, removed, renamed and
//! changed between a snapshot and a later snapshot or the live filesystem (what they are and
//! why finding them costs what changed is `cairn_fs::diff`'s module doc; this module picks
//! the two trees and holds them still).
//!
//! Which pairs compare: the older side is a snapshot, of a filesystem; the newer one is the
//! same dataset (its live contents) or a later snapshot of it, or a clone descended from it
//! (a clone whose origin, or its origin's origin, is a snapshot of the older side's dataset
//! taken at or after the older snapshot), or a snapshot of such a clone. Only then are the
//! newer tree's blocks born by the older snapshot's txg the older tree's own, which is what
//! lets the walk skip them. Anything else (the wrong order, unrelated datasets, a volume) is
//! refused with `EngineError::Diff` before any block is read.
//!
//! Consistency, as `diff --blocks` (`snapshot_diff.rs`): against the live head the pool syncs
//! first, so every change acknowledged before the call is compared; both roots are taken
//! from one synced txg (`SyncedTree`), whose guard keeps every block freed after it from
//! reuse while the diff reads.

use crate::EngineError;
use crate::core::SyncedTree;
use crate::pool::Pool;
use cairn_dataset::{DatasetError, DatasetKind, SnapshotName};
use cairn_format::ChecksumAlgorithm;
use cairn_fs::diff::FsDiff;
use cairn_object::ObjectSet;
use std::path::PathBuf;

/// Longest chain of origins followed from the newer side back to the older one.
const ORIGIN_HOPS_MAX: usize = 1 << 16;

/// What `cairn diff` of a filesystem reports.
#[derive(Debug, Clone)]
pub struct FileDiff {
    /// The changes, paths from the dataset's root.
    pub diff: FsDiff,
    /// The newer side's dataset (without `@snapshot`).
    pub dataset: String,
    /// Its `mountpoint` property (`None`: none set).
    pub mountpoint: Option<PathBuf>,
}

impl Pool {
    /// The changes between snapshot `older` (`fs@a`) of a filesystem and `newer`: a later
    /// snapshot (`fs@b`), the filesystem itself (`fs`, its live contents), or a clone
    /// descended from `older` or one of its snapshots (see the module doc).
    pub fn diff_files(&self, older: &str, newer: &str) -> Result<FileDiff, EngineError> {
        let older_name = SnapshotName::parse(older).map_err(|_| {
            EngineError::Diff(format!(
                "'{older}' is not a snapshot: the older side must be one (FILESYSTEM@SNAPSHOT)"
            ))
        })?;
        let newer_is_head = !newer.contains('@');
        let newer_dataset = if newer_is_head {
            newer.to_string()
        } else {
            SnapshotName::parse(newer)?.dataset
        };
        let mountpoint = {
            let directory = self.core.directory.lock();
            for dataset in [&older_name.dataset, &newer_dataset] {
                if directory.get(dataset)?.kind != DatasetKind::Filesystem {
                    return Err(EngineError::Diff(format!(
                        "'{dataset}' is a volume: compare its blocks with \
                         cairn diff --blocks"
                    )));
                }
            }
            directory.properties_of(&newer_dataset)?.mountpoint
        };
        let older_txg = self.snapshot_info(older)?.created_txg;
        let newer_txg = if newer_is_head {
            None
        } else {
            Some(self.snapshot_info(newer)?.created_txg)
        };
        self.check_descends(older, older_txg, newer, newer_txg)?;
        if newer_is_head && !self.is_readonly() {
            self.sync()?;
        }
        let synced = SyncedTree::take(&self.core, self.txg_engine().ok().map(|e| &**e))?;
        let open = |name: &str| {
            let root = synced
                .roots
                .iter()
                .find(|root| root.name == name)
                .map(|root| root.root_bp)
                .ok_or_else(|| EngineError::from(DatasetError::NoSuchDataset(name.into())))?;
            if root.is_hole() {
                return Err(EngineError::Diff(format!("'{name}' has no object set")));
            }
            Ok(ObjectSet::open(
                self.core.mos.cached_io().clone(),
                root,
                ChecksumAlgorithm::Fletcher4,
                synced.uberblock.txg,
                Some(0),
            )?)
        };
        let (old, new) = (open(older)?, open(newer)?);
        let diff = cairn_fs::diff::diff(&old, older_txg, &new)?;
        Ok(FileDiff {
            diff,
            dataset: newer_dataset,
            mountpoint,
        })
    }

    /// Refuses unless `newer` (a snapshot taken in `newer_txg`, or a dataset's head) descends
    /// from snapshot `older`, taken in `older_txg`: the same dataset later, or a clone whose
    /// chain of origins reaches the older side's dataset at or after `older_txg`.
    fn check_descends(
        &self,
        older: &str,
        older_txg: u64,
        newer: &str,
        newer_txg: Option<u64>,
    ) -> Result<(), EngineError> {
        let older_dataset = older.split('@').next().unwrap_or(older);
        let newer_dataset = newer.split('@').next().unwrap_or(newer);
        let directory = self.core.directory.lock();
        let table = self.core.snapshots.lock();
        let older_id = directory.get(older_dataset)?.id;
        // (dataset, the newest txg of it the newer side holds, whether that is a snapshot
        // of it that `older` may be: a head holds every txg)
        let mut at = (directory.get(newer_dataset)?.id, newer_txg);
        for hops in 0..ORIGIN_HOPS_MAX {
            let (dataset_id, limit_txg) = at;
            if dataset_id == older_id {
                return match limit_txg {
                    Some(_) if older == newer => Err(EngineError::Diff(format!(
                        "'{older}' is compared with itself: name a later snapshot or the \
                         dataset"
                    ))),
                    Some(limit) if limit < older_txg && hops == 0 => {
                        Err(EngineError::Diff(format!(
                            "'{older}' (txg {older_txg}) is not older than '{newer}' (txg \
                             {limit}): name the older snapshot first"
                        )))
                    }
                    Some(limit) if limit < older_txg => Err(EngineError::Diff(format!(
                        "'{newer}' was cloned from '{older_dataset}' as of txg {limit}, \
                         before '{older}' (txg {older_txg}): compare it with an older \
                         snapshot"
                    ))),
                    _ => Ok(()),
                };
            }
            let Some(origin) = table.origin_of(dataset_id) else {
                break;
            };
            at = (origin.info.dataset_id, Some(origin.info.created_txg));
        }
        Err(EngineError::Diff(format!(
            "'{newer}' does not descend from '{older}': '{newer_dataset}' is neither \
             '{older_dataset}' nor a clone descended from it (a diff compares two versions \
             of one filesystem, or a clone with what it was cloned from; the older first)"
        )))
    }
}
