//! The transaction a map change joins: its txg, and what counts the dirty bytes it adds (the
//! txg engine's throttle; this crate does not hold txgs itself, so the caller brings the
//! counter: a filesystem its txg hold, a sync task none).

/// Counts the dirty bytes a change adds to its txg. Any `Fn(u64)` is one; a layer above may
/// implement it for its own handle on a txg hold.
pub trait CountDirty {
    fn add_dirty(&self, bytes: u64);
}

impl<F: Fn(u64)> CountDirty for F {
    fn add_dirty(&self, bytes: u64) {
        self(bytes)
    }
}

/// The txg a map change joins, and the counter of the dirty bytes it adds (none in syncing
/// context).
#[derive(Clone, Copy)]
pub struct MapTx<'a> {
    pub txg: u64,
    dirty: Option<&'a dyn CountDirty>,
}

impl<'a> MapTx<'a> {
    /// For a sync task running in `txg`'s sync: the txg is closing, nothing is counted.
    pub fn syncing(txg: u64) -> MapTx<'static> {
        MapTx { txg, dirty: None }
    }

    /// For a change in open context under a hold of `txg`: each block the change newly
    /// dirties is counted to `dirty`.
    pub fn counted(txg: u64, dirty: &'a dyn CountDirty) -> MapTx<'a> {
        MapTx {
            txg,
            dirty: Some(dirty),
        }
    }

    pub(super) fn add_dirty(&self, bytes: u64) {
        if let Some(dirty) = self.dirty {
            dirty.add_dirty(bytes);
        }
    }
}
