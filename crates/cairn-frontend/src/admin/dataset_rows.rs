//! Looks at datasets as `cairn list` and `cairn get` show them: each pool's datasets with their
//! space figures and resolved properties, read once per pool (read-only in a one-shot process),
//! and `mounted` from the server's live mounts.
//!
//! Invariants: a look never stops at one pool: over every pool (none named) a pool that cannot
//! be opened is a note and skipped; a named pool that cannot be read is a failure for that pool,
//! worded in full, beside the others' rows.

use super::AdminError;
use super::failures::{failed, skip_unavailable};
use crate::PoolAccess;
use crate::pools::chain_text;
use cairn_dataset::DatasetKind;
use serde::{Deserialize, Serialize};

/// One dataset or snapshot as the engine reports it, with owned property names. A snapshot's
/// row (`snapshot`) follows its dataset's, oldest first; its `kind` is its dataset's, its
/// `used` what only it holds, and it has no `available`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DatasetRow {
    pub name: String,
    pub kind: DatasetKind,
    pub snapshot: bool,
    /// A bookmark's row (`dataset#name`, after its dataset's snapshots): it holds nothing.
    #[serde(default)]
    pub bookmark: bool,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub referenced_bytes: u64,
    pub volsize_bytes: Option<u64>,
    /// (property, canonical value, source), in the engine's order.
    pub properties: Vec<(String, String, String)>,
}

/// One pool's datasets sorted by name, or why they could not be read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolDatasets {
    pub pool: String,
    pub datasets: Result<Vec<DatasetRow>, String>,
}

/// The datasets of `pools` (every remembered pool when empty).
pub fn pool_datasets(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<Vec<PoolDatasets>, AdminError> {
    let names = if pools.is_empty() {
        access.pool_names()?
    } else {
        pools.to_vec()
    };
    let mut out = Vec::new();
    for pool in names {
        let read = read_pool(access, &pool);
        let datasets = match skip_unavailable(read, !pools.is_empty(), notes) {
            Ok(Some(rows)) => Ok(rows),
            Ok(None) => continue,
            Err(err) => Err(chain_text(&err)),
        };
        out.push(PoolDatasets { pool, datasets });
    }
    Ok(out)
}

fn read_pool(access: &PoolAccess, pool: &str) -> Result<Vec<DatasetRow>, AdminError> {
    let (infos, snapshots, bookmarks) = access.with_pool(pool, true, |handle| {
        let read = |err: cairn_engine::EngineError| {
            failed(format!("cannot read the datasets of pool '{pool}'"), err)
        };
        Ok::<_, AdminError>((
            handle.datasets().map_err(read)?,
            handle.snapshots(None).map_err(read)?,
            handle.bookmarks(None).map_err(read)?,
        ))
    })?;
    let datasets: Vec<DatasetRow> = infos
        .into_iter()
        .map(|info| {
            let mut properties: Vec<(String, String, String)> = info
                .properties
                .into_iter()
                .map(|(name, value, source)| (name.to_string(), value, source))
                .collect();
            // `mounted`: whether this state directory's server has it mounted now.
            if info.kind == DatasetKind::Filesystem {
                let mounted = access
                    .served
                    .as_ref()
                    .is_some_and(|served| served.mounts.is_mounted(&info.name));
                let value = if mounted { "yes" } else { "no" };
                properties.push(("mounted".to_string(), value.to_string(), "-".to_string()));
            }
            DatasetRow {
                name: info.name,
                kind: info.kind,
                snapshot: false,
                bookmark: false,
                used_bytes: info.used_bytes,
                available_bytes: info.available_bytes,
                referenced_bytes: info.referenced_bytes,
                volsize_bytes: info.volsize_bytes,
                properties,
            }
        })
        .collect();
    // Each dataset's snapshot rows right after its own (the engine lists them oldest first).
    let mut by_dataset: std::collections::BTreeMap<String, Vec<_>> = Default::default();
    for snapshot in snapshots {
        by_dataset
            .entry(snapshot.dataset.clone())
            .or_default()
            .push(snapshot);
    }
    let mut marks: std::collections::BTreeMap<String, Vec<_>> = Default::default();
    for bookmark in bookmarks {
        marks
            .entry(bookmark.dataset.clone())
            .or_default()
            .push(bookmark);
    }
    let mut rows = Vec::with_capacity(datasets.len());
    for row in datasets {
        let snapshots = by_dataset.remove(&row.name).unwrap_or_default();
        let bookmarks = marks.remove(&row.name).unwrap_or_default();
        let kind = row.kind;
        rows.push(row);
        rows.extend(snapshots.into_iter().map(|s| snapshot_row(s, kind)));
        rows.extend(bookmarks.into_iter().map(|b| bookmark_row(b, kind)));
    }
    Ok(rows)
}

fn bookmark_row(bookmark: cairn_engine::BookmarkListing, kind: DatasetKind) -> DatasetRow {
    let stat = |name: &str, value: u64| (name.to_string(), value.to_string(), "-".to_string());
    DatasetRow {
        name: bookmark.name,
        kind,
        snapshot: false,
        bookmark: true,
        used_bytes: 0,
        available_bytes: 0,
        referenced_bytes: bookmark.referenced_bytes,
        volsize_bytes: None,
        properties: vec![
            stat("creation", bookmark.creation_ms / 1000),
            stat("createtxg", bookmark.created_txg),
            stat("guid", bookmark.guid),
        ],
    }
}

fn snapshot_row(snapshot: cairn_engine::SnapshotListing, kind: DatasetKind) -> DatasetRow {
    let stat = |name: &str, value: u64| (name.to_string(), value.to_string(), "-".to_string());
    DatasetRow {
        name: snapshot.name,
        kind,
        snapshot: true,
        bookmark: false,
        used_bytes: snapshot.used_bytes,
        available_bytes: 0,
        referenced_bytes: snapshot.referenced_bytes,
        volsize_bytes: None,
        properties: vec![
            stat("written", snapshot.written_bytes),
            stat("creation", snapshot.creation_ms / 1000),
            stat("createtxg", snapshot.created_txg),
            stat("guid", snapshot.guid),
            (
                "clones".to_string(),
                if snapshot.clones.is_empty() {
                    "-".to_string()
                } else {
                    snapshot.clones.join(",")
                },
                "-".to_string(),
            ),
        ],
    }
}
