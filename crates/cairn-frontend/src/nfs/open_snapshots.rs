//! The snapshots an NFS server keeps open between calls (`.cairn/snapshot`, `snapdir.rs`):
//! opening one costs a filesystem's setup, and clients browse a snapshot with many calls.
//!
//! Invariants: at most `SNAPSHOTS_OPEN_MAX` are kept, the least recently used dropped first;
//! a kept snapshot serves a call only while it is open (not destroyed: its gate closes on
//! destroy) and only on the very pool it was opened from (a pool exported and imported again
//! has the same guid but is another `Pool`, whose blocks the old one must not read). Uses
//! nothing else of the server: `context.rs` holds one, `snapdir.rs` fills it.

use cairn_engine::{Pool, SnapshotFilesystem};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// Snapshots kept open by the server at most (each holds its filesystem's caches).
pub const SNAPSHOTS_OPEN_MAX: usize = 64;

/// The snapshots a server keeps open, by (pool guid, snapshot id), each with when it was
/// last used (`tick`).
#[derive(Default)]
pub struct OpenSnapshots {
    tick: u64,
    by_id: HashMap<(u64, u64), KeptSnapshot>,
}

/// A snapshot kept open, with the pool it was opened from.
struct KeptSnapshot {
    fs: Arc<SnapshotFilesystem>,
    pool: Weak<Pool>,
    used: u64,
}

impl KeptSnapshot {
    /// Whether it can serve a call on `pool`: not destroyed, and opened from that pool.
    fn usable(&self, pool: &Arc<Pool>) -> bool {
        self.fs.is_open()
            && self
                .pool
                .upgrade()
                .is_some_and(|kept| Arc::ptr_eq(&kept, pool))
    }
}

impl OpenSnapshots {
    /// The snapshot `key` names, kept and usable on `pool` (marked as used now); one kept
    /// but no longer usable is dropped.
    pub fn get(&mut self, key: (u64, u64), pool: &Arc<Pool>) -> Option<Arc<SnapshotFilesystem>> {
        self.tick += 1;
        let tick = self.tick;
        if let Some(kept) = self.by_id.get_mut(&key)
            && kept.usable(pool)
        {
            kept.used = tick;
            return Some(kept.fs.clone());
        }
        self.by_id.remove(&key);
        None
    }

    /// Keeps `fs`, opened from `pool`, under `key`: the closed and orphaned ones go first,
    /// then the least recently used while the limit is reached.
    pub fn keep(&mut self, key: (u64, u64), fs: &Arc<SnapshotFilesystem>, pool: &Arc<Pool>) {
        self.by_id
            .retain(|_, kept| kept.fs.is_open() && kept.pool.strong_count() > 0);
        while self.by_id.len() >= SNAPSHOTS_OPEN_MAX {
            let oldest = self
                .by_id
                .iter()
                .min_by_key(|(_, kept)| kept.used)
                .map(|(key, _)| *key);
            match oldest {
                Some(oldest) => self.by_id.remove(&oldest),
                None => break,
            };
        }
        self.tick += 1;
        self.by_id.insert(
            key,
            KeptSnapshot {
                fs: fs.clone(),
                pool: Arc::downgrade(pool),
                used: self.tick,
            },
        );
    }
}
