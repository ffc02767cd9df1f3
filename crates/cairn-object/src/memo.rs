//! The object set's memo of the published tree: synced dnodes, and level-0 blocks of hashed
//! maps (directories, xattrs) and of the meta-dnode, so a lookup in a directory of a million
//! entries does not walk four levels of indirect blocks through the ARC for every block it
//! reads (ZFS's dnode and dbuf caches play this part). Bounded: a filesystem of millions of
//! files does not keep every dnode it ever touched.
//!
//! Each memo is a two-generation cache: entries go into the young generation; when it holds
//! its byte budget it becomes the old one, and the previous old generation is retired; a hit
//! in the old generation moves the entry back. Every operation is O(1), memory is bounded by
//! two budgets, and what is used at least once per generation stays (an approximate LRU).
//! The budget is a fraction of the ARC's current target, read at each insert, so the memos
//! shrink with the ARC under memory pressure. A retired generation is handed to the caller,
//! who drops it after releasing the object set's lock (freeing a million dnodes takes
//! milliseconds).
//!
//! Invariants (kept by `ObjectSet`, under its state lock): an entry is the published tree's
//! version. `publish` replaces or removes every map block the txg changed (no other
//! object's blocks are memoised) and removes the dnode blocks holding the dnodes it changed,
//! before it makes the new tree current; a reader that walked the tree
//! outside the lock inserts only if no publish happened meanwhile; a block entry carries the
//! birth txg and block size of its object's dnode and is ignored if they differ (the object
//! was freed and created again, or its block size changed). A miss is never an error: the
//! caller reads the tree. `publish` puts the new version of each map block a txg wrote in
//! the memo (the blocks a lookup reads next are the ones just changed), and every dnode it
//! changed; rewritten dnode blocks are only forgotten (with the dnodes in their own memo,
//! memoising those blocks too pushed directory blocks out).
//!
//! Known gaps: the budget is per object set, so a process with many filesystems busy with
//! large directories can hold that much for each (volumes memoise one dnode); an idle object
//! set keeps its generations until it is used again. Misses count the txg sync's own reads
//! of dnodes it is creating.

use crate::State;
use bytes::Bytes;
use cairn_format::{Dnode, ObjectType};
use parking_lot::MutexGuard;
use std::collections::HashMap;
use std::hash::Hash;

/// A memo's generation holds at most the ARC's target divided by this (two generations of
/// dnodes and two of blocks: at most 1/8 of the ARC's target per object set in all).
pub const MEMO_GENERATION_ARC_DIVISOR: u64 = 32;
/// Budget floor, so a tiny ARC still spares the walk for a directory's hot blocks.
pub const MEMO_GENERATION_BYTES_MIN: u64 = 1 << 20;

/// A generation that was replaced: dropped by whoever holds it once the lock is released.
pub(crate) type Retired<K, V> = HashMap<K, (V, u64)>;

pub(crate) struct Memo<K, V> {
    young: HashMap<K, (V, u64)>,
    old: HashMap<K, (V, u64)>,
    young_bytes: u64,
    old_bytes: u64,
    hits: u64,
    misses: u64,
}

/// One memo's size and use, for `stat` (cumulative counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoCounts {
    pub entries: u64,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

/// The object set's memos (`ObjectSet::memo_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoStats {
    pub dnodes: MemoCounts,
    /// Level-0 blocks of hashed maps and of the meta-dnode.
    pub blocks: MemoCounts,
    /// A generation's budget now (two generations per memo).
    pub generation_bytes_max: u64,
}

impl<K: Hash + Eq + Copy, V> Memo<K, V> {
    pub(crate) fn new() -> Memo<K, V> {
        Memo {
            young: HashMap::new(),
            old: HashMap::new(),
            young_bytes: 0,
            old_bytes: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// The entry of `key`, without refreshing it (readers holding `&State`).
    pub(crate) fn peek(&self, key: K) -> Option<&V> {
        self.young
            .get(&key)
            .or_else(|| self.old.get(&key))
            .map(|(value, _)| value)
    }

    /// The entry of `key`, moved to the young generation if it was old (which may retire a
    /// generation: see `insert`).
    pub(crate) fn get(
        &mut self,
        key: K,
        generation_bytes_max: u64,
    ) -> (Option<&V>, Option<Retired<K, V>>) {
        let mut retired = None;
        if !self.young.contains_key(&key) {
            let Some((value, bytes)) = self.old.remove(&key) else {
                self.misses += 1;
                return (None, None);
            };
            self.old_bytes -= bytes;
            retired = self.insert(key, value, bytes, generation_bytes_max);
        }
        self.hits += 1;
        (self.young.get(&key).map(|(value, _)| value), retired)
    }

    /// Adds or replaces `key`, counted as `bytes`. Returns the generation this retired, if
    /// any.
    #[must_use]
    pub(crate) fn insert(
        &mut self,
        key: K,
        value: V,
        bytes: u64,
        generation_bytes_max: u64,
    ) -> Option<Retired<K, V>> {
        self.remove(key);
        let mut retired = None;
        if !self.young.is_empty() && self.young_bytes + bytes > generation_bytes_max {
            // The next generation will hold about as many entries: sized once, not regrown.
            let young = HashMap::with_capacity(self.young.len());
            retired = Some(std::mem::replace(
                &mut self.old,
                std::mem::replace(&mut self.young, young),
            ));
            self.old_bytes = self.young_bytes;
            self.young_bytes = 0;
        }
        self.young.insert(key, (value, bytes));
        self.young_bytes += bytes;
        retired.filter(|generation| !generation.is_empty())
    }

    pub(crate) fn remove(&mut self, key: K) {
        if let Some((_, bytes)) = self.young.remove(&key) {
            self.young_bytes -= bytes;
        }
        if let Some((_, bytes)) = self.old.remove(&key) {
            self.old_bytes -= bytes;
        }
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.young.len() + self.old.len()
    }

    /// Bytes held, as counted at insert.
    pub(crate) fn bytes(&self) -> u64 {
        self.young_bytes + self.old_bytes
    }

    pub(crate) fn counts(&self) -> MemoCounts {
        MemoCounts {
            entries: self.len() as u64,
            bytes: self.bytes(),
            hits: self.hits,
            misses: self.misses,
        }
    }
}

/// Whether an object's level-0 blocks are memoised: hashed maps only, whose small blocks a
/// lookup reads three at a time (file and volume data stay the ARC's alone).
pub(crate) fn memoised(dnode: &Dnode) -> bool {
    matches!(
        dnode.object_type,
        ObjectType::Directory | ObjectType::Xattrs
    )
}

/// What a memoised dnode is counted as: the struct, its bonus and the map's own overhead.
pub(crate) fn dnode_memo_bytes(dnode: &Dnode) -> u64 {
    (std::mem::size_of::<Dnode>() + dnode.bonus.capacity() + ENTRY_OVERHEAD_BYTES) as u64
}

/// What a memoised block is counted as (its buffer is usually shared with the ARC's copy).
pub(crate) fn block_memo_bytes(data: &Bytes) -> u64 {
    (data.len() + ENTRY_OVERHEAD_BYTES) as u64
}

const ENTRY_OVERHEAD_BYTES: usize = 64;

/// Releases the object set's lock, then drops the generations the memos retired under it.
pub(crate) fn unlock_dropping_retired(mut guard: MutexGuard<'_, State>) {
    let retired = std::mem::take(&mut guard.retired);
    drop(guard);
    drop(retired);
}

/// A generation's budget for an ARC whose target is `arc_target_bytes`.
pub(crate) fn generation_bytes_max(arc_target_bytes: u64) -> u64 {
    (arc_target_bytes / MEMO_GENERATION_ARC_DIVISOR).max(MEMO_GENERATION_BYTES_MIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_bounded_and_keeps_what_is_used() {
        let mut memo: Memo<u64, u64> = Memo::new();
        let mut retired_generations = 0;
        for key in 0..100 {
            retired_generations += usize::from(memo.insert(key, key * 10, 10, 40).is_some());
            // Key 0 is used between every two inserts: it must survive them all.
            let (value, retired) = memo.get(0, 40);
            assert_eq!(value.copied(), Some(0));
            retired_generations += usize::from(retired.is_some());
            assert!(memo.bytes() <= 80, "{} bytes held", memo.bytes());
            assert_eq!(memo.bytes(), memo.len() as u64 * 10);
        }
        assert!(
            retired_generations > 10,
            "{retired_generations} generations retired"
        );
        assert!(memo.peek(1).is_none(), "an unused early entry was kept");
        assert_eq!(memo.peek(99).copied(), Some(990));
    }

    #[test]
    fn insert_replaces_in_either_generation_and_remove_forgets() {
        let mut memo: Memo<u64, u64> = Memo::new();
        assert!(memo.insert(1, 1, 1, 2).is_none());
        assert!(memo.insert(2, 2, 1, 2).is_none());
        assert!(memo.insert(3, 3, 1, 2).is_none()); // 1 and 2 are old now, nothing retired
        assert!(memo.insert(1, 10, 1, 2).is_none());
        assert_eq!(memo.peek(1).copied(), Some(10));
        assert_eq!((memo.len(), memo.bytes()), (3, 3));
        memo.remove(2);
        memo.remove(3);
        assert_eq!((memo.len(), memo.bytes()), (1, 1));
        assert!(memo.peek(2).is_none());
    }

    #[test]
    fn budget_follows_the_arc_with_a_floor() {
        assert_eq!(generation_bytes_max(0), MEMO_GENERATION_BYTES_MIN);
        assert_eq!(
            generation_bytes_max(1 << 40),
            (1 << 40) / MEMO_GENERATION_ARC_DIVISOR
        );
    }
}
