//! Removing many names from a map at once (`HashedMap::remove_many`): one read, one rewrite
//! of each leaf that holds some of them and one of the header, instead of both per name.
//!
//! Why: a range destroy of 10,000 snapshots removes 10,000 records of the pool's snapshot
//! table in one txg; removed one by one, each read its leaf and the header, copied the leaf's
//! block and recorded both blocks again (~8 µs a name, ~80 ms of that txg's sync). Grouped by
//! leaf, the same removals rewrite each leaf once. The result is the map `remove` would leave
//! name by name: the same entries, in the same key order, in the same leaves.
//!
//! Invariants: nothing is written until every leaf involved was read and decoded (a damaged
//! leaf fails the call with the map unchanged); the header's entry count falls by exactly the
//! entries removed. A child of `map`: it uses the map's private helpers.

use super::{COLLISION_BITS, Entry};
use super::{HashedMap, MapError, MapTx, bucket, encode_leaf};
use std::collections::BTreeMap;

impl HashedMap<'_> {
    /// Removes every name of `names` (each at most once); returns the entries removed, in the
    /// order of `names`, `None` for a name that was not there.
    pub fn remove_many(
        &self,
        tx: MapTx<'_>,
        names: &[&[u8]],
    ) -> Result<Vec<Option<Entry>>, MapError> {
        let mut header = self.header()?;
        // Leaf number → (hash, index into `names`) of the names it would hold.
        let mut by_leaf: BTreeMap<u64, Vec<(u64, usize)>> = BTreeMap::new();
        for (index, name) in names.iter().enumerate() {
            let hash = self.hash(&header, name);
            let leaf = self.table_get(&header, bucket(&header, hash << COLLISION_BITS))?;
            by_leaf.entry(leaf).or_default().push((hash, index));
        }
        let mut removed: Vec<Option<Entry>> = vec![None; names.len()];
        let mut changed = Vec::new();
        for (number, wanted) in by_leaf {
            let mut leaf = self.leaf(&header, number)?;
            let before = leaf.entries.len();
            leaf.entries.retain(|entry| {
                let hit = wanted.iter().find(|&&(hash, index)| {
                    entry.key >> COLLISION_BITS == hash && entry.name == names[index]
                });
                match hit {
                    Some(&(_, index)) => {
                        removed[index] = Some(entry.clone());
                        false
                    }
                    None => true,
                }
            });
            if leaf.entries.len() != before {
                changed.push((number, leaf));
            }
        }
        let count = removed.iter().filter(|entry| entry.is_some()).count();
        if count == 0 {
            return Ok(removed);
        }
        header.entries = header.entries.saturating_sub(count as u64);
        let last = changed.len() - 1;
        for (position, (number, leaf)) in changed.into_iter().enumerate() {
            // The header goes out once, with the last leaf (a lone leaf is in its block).
            self.write_leaf_bytes(tx, &header, number, encode_leaf(&leaf), position == last);
        }
        Ok(removed)
    }
}
