//! Bookmarks as the pool's handle offers them (`cairn bookmark`, `list -t bookmark`,
//! `destroy DATASET#NAME`); the model is `cairn_dataset::bookmarks`. A bookmark is a record
//! only: made and destroyed in a sync task, durable on return, never refused for a full pool
//! (as a snapshot is not).

use crate::EngineError;
use crate::pool::Pool;
use cairn_dataset::{BookmarkName, DatasetError, SnapshotName};

/// One bookmark, as `list -t bookmark` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookmarkListing {
    /// `dataset#bookmark`.
    pub name: String,
    pub dataset: String,
    /// The txg of the snapshot it was made from.
    pub created_txg: u64,
    pub creation_ms: u64,
    /// What that snapshot referenced.
    pub referenced_bytes: u64,
    /// Its snapshot's guid (`guid`): what an incremental from it names as its source.
    pub guid: u64,
}

impl Pool {
    /// Makes bookmark `target` (`dataset#name`) of snapshot `source` (`dataset@snap`), or a
    /// copy of bookmark `source` (`dataset#other`), of the same dataset. Durable on return.
    pub fn bookmark(&self, source: &str, target: &str) -> Result<(), EngineError> {
        let target_name = BookmarkName::parse(target)?;
        let (source_dataset, from) = match source.split_once('@') {
            Some(_) => {
                let parsed = SnapshotName::parse(source)?;
                (parsed.dataset, Source::Snapshot(parsed.snapshot))
            }
            None => {
                let parsed = BookmarkName::parse(source)?;
                (parsed.dataset, Source::Bookmark(parsed.bookmark))
            }
        };
        if source_dataset != target_name.dataset {
            return Err(DatasetError::InvalidName {
                name: target.to_string(),
                reason: format!(
                    "a bookmark is of its own dataset's snapshots ('{source_dataset}')"
                ),
            }
            .into());
        }
        // Checked on a copy first for a prompt error; the task does it for real.
        let mut trial = self.core.snapshots.lock().clone();
        add_bookmark_to(&self.core, &mut trial, &target_name, &from, 0)?;
        self.run_sync_task(move |core, _txg| {
            let id = {
                let mut directory = core.directory.lock();
                directory.next_id += 1;
                directory.next_id
            };
            let mut table = core.snapshots.lock();
            add_bookmark_to(core, &mut table, &target_name, &from, id)
        })?;
        Ok(())
    }

    /// Destroys bookmark `name` (`dataset#bookmark`), durable on return. Frees nothing.
    pub fn destroy_bookmark(&self, name: &str) -> Result<(), EngineError> {
        let parsed = BookmarkName::parse(name)?;
        let id = self.core.directory.lock().get(&parsed.dataset)?.id;
        if self
            .core
            .snapshots
            .lock()
            .find_bookmark(id, &parsed.bookmark)
            .is_none()
        {
            return Err(DatasetError::NoSuchDataset(name.to_string()).into());
        }
        self.run_sync_task(move |core, _txg| {
            let id = core.directory.lock().get(&parsed.dataset)?.id;
            core.snapshots
                .lock()
                .destroy_bookmark(id, &parsed.bookmark)
                .map_err(|_| DatasetError::NoSuchDataset(parsed.to_string()).into())
        })?;
        Ok(())
    }

    /// Every bookmark of `dataset` (all of the pool's when `None`), datasets by name, each's
    /// by txg.
    pub fn bookmarks(&self, dataset: Option<&str>) -> Result<Vec<BookmarkListing>, EngineError> {
        let directory = self.core.directory.lock();
        if let Some(dataset) = dataset {
            directory.get(dataset)?;
        }
        let table = self.core.snapshots.lock();
        let mut out = Vec::new();
        for record in directory.datasets.values() {
            if dataset.is_some_and(|dataset| dataset != record.name) {
                continue;
            }
            for bookmark in table.bookmarks_of(record.id) {
                out.push(BookmarkListing {
                    name: format!("{}#{}", record.name, bookmark.name),
                    dataset: record.name.clone(),
                    created_txg: bookmark.created_txg,
                    creation_ms: bookmark.creation_ms,
                    referenced_bytes: bookmark.referenced_bytes,
                    guid: crate::send::stored_or_derived_guid(
                        bookmark.guid,
                        self.core.guid,
                        bookmark.snapshot_id,
                        bookmark.created_txg,
                    ),
                });
            }
        }
        Ok(out)
    }
}

/// What a bookmark is made from.
#[derive(Debug, Clone)]
enum Source {
    Snapshot(String),
    Bookmark(String),
}

fn add_bookmark_to(
    core: &crate::core::PoolCore,
    table: &mut cairn_dataset::snapshots::SnapshotTable,
    target: &BookmarkName,
    from: &Source,
    id: u64,
) -> Result<(), EngineError> {
    let dataset_id = core.directory.lock().get(&target.dataset)?.id;
    let exists = |e: DatasetError| -> EngineError {
        match e {
            DatasetError::Exists(_) => DatasetError::Exists(target.to_string()).into(),
            other => other.into(),
        }
    };
    match from {
        Source::Snapshot(snapshot) => {
            let snapshot_id = table
                .find(dataset_id, snapshot)
                .filter(|_| {
                    !core
                        .pending_names()
                        .contains(&format!("{}@{snapshot}", target.dataset))
                })
                .map(|found| found.info.id)
                .ok_or_else(|| {
                    DatasetError::NoSuchDataset(format!("{}@{snapshot}", target.dataset))
                })?;
            table
                .add_bookmark(id, dataset_id, &target.bookmark, snapshot_id)
                .map_err(exists)?;
        }
        Source::Bookmark(bookmark) => {
            table
                .copy_bookmark(id, dataset_id, bookmark, &target.bookmark)
                .map_err(|e| match e {
                    DatasetError::NoSuchDataset(_) => {
                        DatasetError::NoSuchDataset(format!("{}#{bookmark}", target.dataset)).into()
                    }
                    other => exists(other),
                })?;
        }
    }
    Ok(())
}
