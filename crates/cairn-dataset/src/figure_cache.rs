//! The snapshot table's figure cache (`snapshot_index.rs` keeps it): per deadlist, its share
//! of its dataset's `usedbysnapshots`, and the per-dataset sums. Plain data in a module of
//! its own so that `snapshots.rs` (which holds one and feeds it the keys each flush writes)
//! and `snapshot_index.rs` (which computes it) do not import each other.

use crate::records::RecordKey;
use std::collections::{BTreeSet, HashMap};

/// Per-deadlist shares of `usedbysnapshots` (see the module doc).
#[derive(Debug, Default, Clone)]
pub(crate) struct FigureCache {
    /// False until built (a new or loaded table) and after an origin changed.
    pub(crate) valid: bool,
    /// Snapshot or head record → (its dataset, the bytes it adds to `usedbysnapshots`).
    pub(crate) shares: HashMap<RecordKey, (u64, u64)>,
    /// Dataset id → the sum of its shares.
    pub(crate) totals: HashMap<u64, u64>,
    /// Keys flushed since the last refresh.
    pub(crate) flushed: BTreeSet<RecordKey>,
}

impl FigureCache {
    /// An empty cache about to be filled whole (`rebuild_figures`).
    pub(crate) fn built() -> FigureCache {
        FigureCache {
            valid: true,
            ..FigureCache::default()
        }
    }

    /// Keeps the keys a flush writes for the next refresh.
    pub(crate) fn note_flushed(&mut self, keys: &BTreeSet<RecordKey>) {
        if self.valid {
            self.flushed.extend(keys.iter().copied());
        }
    }
}
