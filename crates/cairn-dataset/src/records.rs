//! Values of the snapshot table's records that other modules of the table build on
//! (`frees.rs`, `bookmarks.rs`): plain data with their checks, so those modules and
//! `snapshots.rs` all depend on this one and not on each other. Their on-disk layout:
//! docs/format.md, "Snapshots".

use crate::DatasetError;
use crate::deadlist::FreeScan;
use cairn_format::BlockPointer;
use serde::{Deserialize, Serialize};

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
