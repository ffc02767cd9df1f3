//! Values of the snapshot table's records that other modules of the table build on
//! (`frees.rs`, `bookmarks.rs`): plain data with their checks, so those modules and
//! `snapshots.rs` all depend on this one and not on each other. Their on-disk layout:
//! docs/format.md, "Snapshots".

use crate::DatasetError;
use crate::deadlist::FreeScan;
use cairn_format::BlockPointer;
use serde::{Deserialize, Serialize};

const SNAPSHOT_KEY_TAG: u8 = b's';
const HEAD_KEY_TAG: u8 = b'h';
const FREE_KEY_TAG: u8 = b'f';
const ORIGIN_KEY_TAG: u8 = b'o';
const TREE_FREE_KEY_TAG: u8 = b't';
const BOOKMARK_KEY_TAG: u8 = b'b';

/// What one destroy left to free in the background: the blocks of each scan's part born in
/// its range, scanned in order from `scan_index`/`next_entry`, a bounded number per txg.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeWork {
    pub scans: Vec<FreeScan>,
    pub scan_index: u64,
    pub next_entry: u64,
    /// Bytes still to free (the pool property `freeing`).
    pub remaining_bytes: u64,
}

/// What a dataset destroy or a rollback left to free: the dead tree under `root`, its blocks
/// born after `born_after_txg`, from `path` on (`cairn_object::tree_free`), a bounded number
/// per txg.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeFree {
    /// Encoded root pointer of the dead object set.
    pub root: Vec<u8>,
    pub born_after_txg: u64,
    pub path: Vec<u32>,
    /// Bytes still to free (the pool property `freeing`).
    pub remaining_bytes: u64,
}

impl TreeFree {
    pub fn root(&self) -> Result<BlockPointer, DatasetError> {
        BlockPointer::decode(&self.root)
            .map_err(|err| DatasetError::Corrupt(format!("tree free root: {err}")))
    }
}

/// One bookmark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bookmark {
    pub id: u64,
    pub dataset_id: u64,
    /// The part after '#'.
    pub name: String,
    /// The txg its snapshot was taken in: what was born after it is what changed since.
    pub created_txg: u64,
    /// When its snapshot was taken, ms since the epoch.
    pub creation_ms: u64,
    /// The snapshot it was made from (which may be gone since).
    pub snapshot_id: u64,
    /// What the snapshot referenced.
    pub referenced_bytes: u64,
    /// Its snapshot's guid (`SnapshotInfo::guid`; 0 from a version-1 record: derived).
    /// Stored after the fields above (`BookmarkPhys`).
    #[serde(skip)]
    pub guid: u64,
}

/// Which record a key names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RecordKey {
    Snapshot(u64),
    Head(u64),
    /// Background free work of one destroy, by sequence number.
    Free(u64),
    /// The origin of a clone, by the clone's dataset id.
    Origin(u64),
    /// Background free of a dead tree (a destroyed dataset, a rolled-back head), by sequence
    /// number.
    TreeFree(u64),
    /// A bookmark, by id.
    Bookmark(u64),
}

impl RecordKey {
    /// The map key: a tag byte, then the id big-endian.
    pub fn encode(self) -> [u8; 9] {
        let (tag, id) = match self {
            RecordKey::Snapshot(id) => (SNAPSHOT_KEY_TAG, id),
            RecordKey::Head(id) => (HEAD_KEY_TAG, id),
            RecordKey::Free(seq) => (FREE_KEY_TAG, seq),
            RecordKey::Origin(id) => (ORIGIN_KEY_TAG, id),
            RecordKey::TreeFree(seq) => (TREE_FREE_KEY_TAG, seq),
            RecordKey::Bookmark(id) => (BOOKMARK_KEY_TAG, id),
        };
        let mut key = [0u8; 9];
        key[0] = tag;
        key[1..].copy_from_slice(&id.to_be_bytes());
        key
    }

    pub fn decode(raw: &[u8]) -> Result<RecordKey, DatasetError> {
        let id = raw
            .get(1..)
            .and_then(|id| <[u8; 8]>::try_from(id).ok())
            .map(u64::from_be_bytes);
        match (raw.first(), id) {
            (Some(&SNAPSHOT_KEY_TAG), Some(id)) => Ok(RecordKey::Snapshot(id)),
            (Some(&HEAD_KEY_TAG), Some(id)) => Ok(RecordKey::Head(id)),
            (Some(&FREE_KEY_TAG), Some(seq)) => Ok(RecordKey::Free(seq)),
            (Some(&ORIGIN_KEY_TAG), Some(id)) => Ok(RecordKey::Origin(id)),
            (Some(&TREE_FREE_KEY_TAG), Some(seq)) => Ok(RecordKey::TreeFree(seq)),
            (Some(&BOOKMARK_KEY_TAG), Some(id)) => Ok(RecordKey::Bookmark(id)),
            _ => Err(DatasetError::Corrupt(format!(
                "snapshot table: a key of {} bytes starting {:?}",
                raw.len(),
                raw.first()
            ))),
        }
    }
}
