//! A dataset's deadlist: the blocks its head stopped referencing while a snapshot still
//! references them (cairn-object's birth-txg rule hands them over as `dead_blocks`), grouped by
//! the snapshot interval each was born in, with running totals per group.
//!
//! Why grouped: snapshot accounting asks "how many bytes were born in (a, b]" for snapshot txgs
//! a < b — what destroying a snapshot frees (the blocks of the next one's deadlist born after
//! the destroyed one's predecessor), a snapshot's `used`, `written@snap` — and the answer must
//! be a sum over a few groups, never a scan of blocks (OpenZFS's deadlists, `dsl_deadlist.c`).
//!
//! Keys: the list holds one sub-list per key, and a key is the txg of a snapshot the interval
//! starts after (0 for "since the dataset began"). Sub-list `k` holds the blocks born in
//! `(k, next key]`, the last one those born after its key. Keys are added as snapshots are taken
//! (`add_key`) and removed as they are destroyed (`remove_key`: the interval merges into the
//! one before). `space_range(a, b)` sums the sub-lists whose key is in `[a, b)`, which is the
//! blocks born in `(a, b]` when `a` and `b` are keys (or `b` is `u64::MAX`).
//!
//! Invariants (checked by `check`, asserted cheaply where they are made): key 0 is always
//! present; every block sits in the sub-list its birth txg selects; each sub-list's totals are
//! the sums over its blocks; a block is never a hole and never born at txg 0.
//!
//! This is the in-memory form and its operations. How it is kept on disk (one object per
//! sub-list, so a snapshot's create or destroy rewrites only the sub-lists it touches) is the
//! next step of snapshots (issue 34), with the sync task that hands a head's deadlist to a new
//! snapshot.

use cairn_format::BlockPointer;
use std::collections::BTreeMap;

/// The byte totals of a set of dead blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeadSpace {
    /// Bytes the blocks take on disk, every copy (what freeing them returns).
    pub allocated_bytes: u64,
    /// Logical bytes the blocks hold (before compression).
    pub logical_bytes: u64,
    pub blocks: u64,
}

impl DeadSpace {
    fn of(bp: &BlockPointer) -> DeadSpace {
        DeadSpace {
            allocated_bytes: bp.allocated_bytes(),
            logical_bytes: u64::from(bp.lsize),
            blocks: 1,
        }
    }

    fn add(&mut self, other: DeadSpace) {
        self.allocated_bytes += other.allocated_bytes;
        self.logical_bytes += other.logical_bytes;
        self.blocks += other.blocks;
    }
}

/// The blocks of one snapshot interval, with their totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Sublist {
    blocks: Vec<BlockPointer>,
    space: DeadSpace,
}

impl Sublist {
    fn push(&mut self, bp: BlockPointer) {
        self.space.add(DeadSpace::of(&bp));
        self.blocks.push(bp);
    }

    fn append(&mut self, other: Sublist) {
        self.space.add(other.space);
        self.blocks.extend(other.blocks);
    }
}

/// See the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlist {
    sublists: BTreeMap<u64, Sublist>,
}

impl Default for Deadlist {
    fn default() -> Deadlist {
        Deadlist::new()
    }
}

impl Deadlist {
    /// An empty deadlist with the one key every list has, 0.
    pub fn new() -> Deadlist {
        Deadlist {
            sublists: BTreeMap::from([(0, Sublist::default())]),
        }
    }

    /// Starts an interval after snapshot txg `txg`: blocks born after it go to a sub-list of
    /// their own. A key that exists already changes nothing.
    pub fn add_key(&mut self, txg: u64) {
        // Blocks already here born after `txg` belong to the new interval: move them.
        let Some((&before, _)) = self.sublists.range(..txg).next_back() else {
            // `txg` is 0, which is always a key.
            return;
        };
        if self.sublists.contains_key(&txg) {
            return;
        }
        let old = std::mem::take(
            self.sublists
                .get_mut(&before)
                .expect("the key just found is present"),
        );
        let mut kept = Sublist::default();
        let mut moved = Sublist::default();
        for bp in old.blocks {
            if bp.birth_txg > txg {
                moved.push(bp);
            } else {
                kept.push(bp);
            }
        }
        self.sublists.insert(before, kept);
        self.sublists.insert(txg, moved);
    }

    /// Ends the interval that starts at snapshot txg `txg` (the snapshot was destroyed): its
    /// blocks join the interval before. Key 0 is never removed.
    pub fn remove_key(&mut self, txg: u64) {
        if txg == 0 {
            return;
        }
        let Some(removed) = self.sublists.remove(&txg) else {
            return;
        };
        let (_, before) = self
            .sublists
            .range_mut(..txg)
            .next_back()
            .expect("key 0 is always present");
        before.append(removed);
    }

    /// Adds a block the head stopped referencing, to the interval its birth selects.
    pub fn insert(&mut self, bp: BlockPointer) {
        assert!(
            !bp.is_hole() && bp.birth_txg > 0,
            "a hole or a block of no txg on a deadlist"
        );
        let (_, sublist) = self
            .sublists
            .range_mut(..bp.birth_txg)
            .next_back()
            .expect("key 0 is below every birth txg");
        sublist.push(bp);
    }

    /// Adds every block of `other` (a destroyed snapshot's deadlist merged into its successor's).
    pub fn merge(&mut self, other: Deadlist) {
        for (_, sublist) in other.sublists {
            for bp in sublist.blocks {
                self.insert(bp);
            }
        }
    }

    /// The totals of every block on the list.
    pub fn space(&self) -> DeadSpace {
        self.space_range(0, u64::MAX)
    }

    /// The totals of the sub-lists whose key is in `[min_txg, max_txg)`: the blocks born in
    /// `(min_txg, max_txg]` when both are keys (or `max_txg` is `u64::MAX`). A sum over
    /// sub-lists, never over blocks.
    pub fn space_range(&self, min_txg: u64, max_txg: u64) -> DeadSpace {
        let mut total = DeadSpace::default();
        if min_txg >= max_txg {
            return total;
        }
        for (_, sublist) in self.sublists.range(min_txg..max_txg) {
            total.add(sublist.space);
        }
        total
    }

    /// Takes the blocks of the sub-lists whose key is in `[min_txg, max_txg)` out of the list
    /// (their keys stay, empty): the blocks a snapshot's destroy frees.
    pub fn take_range(&mut self, min_txg: u64, max_txg: u64) -> Vec<BlockPointer> {
        let mut taken = Vec::new();
        if min_txg >= max_txg {
            return taken;
        }
        for (_, sublist) in self.sublists.range_mut(min_txg..max_txg) {
            taken.extend(std::mem::take(sublist).blocks);
        }
        taken
    }

    /// The keys, in order (0 first).
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.sublists.keys().copied()
    }

    /// Checks every invariant of the module doc; for tests and `pool check`.
    pub fn check(&self) -> Result<(), String> {
        if !self.sublists.contains_key(&0) {
            return Err("deadlist without key 0".into());
        }
        let keys: Vec<u64> = self.keys().collect();
        for (index, (&key, sublist)) in self.sublists.iter().enumerate() {
            let next = keys.get(index + 1).copied().unwrap_or(u64::MAX);
            let mut sum = DeadSpace::default();
            for bp in &sublist.blocks {
                if bp.is_hole() || bp.birth_txg <= key || bp.birth_txg > next {
                    return Err(format!(
                        "a block born in txg {} in the sub-list of ({key}, {next}]",
                        bp.birth_txg
                    ));
                }
                sum.add(DeadSpace::of(bp));
            }
            if sum != sublist.space {
                return Err(format!(
                    "sub-list {key} totals {:?}, its blocks sum to {sum:?}",
                    sublist.space
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_format::Dva;
    use proptest::prelude::*;

    fn bp(birth_txg: u64, asize: u32) -> BlockPointer {
        let mut bp = BlockPointer::HOLE;
        bp.birth_txg = birth_txg;
        bp.lsize = 4096;
        bp.psize = asize;
        bp.dvas[0] = Dva {
            vdev: 0,
            offset: birth_txg << 20,
            asize,
        };
        bp
    }

    #[test]
    fn a_block_goes_to_the_interval_it_was_born_in() {
        let mut list = Deadlist::new();
        list.add_key(10);
        list.add_key(20);
        for birth in [5, 10, 11, 20, 21] {
            list.insert(bp(birth, 512));
        }
        list.check().unwrap();
        // Born in (0, 10]: 5 and 10; in (10, 20]: 11 and 20; after 20: 21.
        assert_eq!(list.space_range(0, 10).blocks, 2);
        assert_eq!(list.space_range(10, 20).blocks, 2);
        assert_eq!(list.space_range(20, u64::MAX).blocks, 1);
        assert_eq!(list.space().allocated_bytes, 5 * 512);
        // Destroying snapshot 10 merges its interval into the one before.
        list.remove_key(10);
        list.check().unwrap();
        assert_eq!(list.space_range(0, 20).blocks, 4);
        assert_eq!(list.take_range(0, 20).len(), 4);
        assert_eq!(list.space().blocks, 1);
        list.check().unwrap();
    }

    #[derive(Debug, Clone)]
    enum Step {
        Key(u64),
        RemoveKey(usize),
        Insert(u64, u32),
        Take(usize, usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1u64..200).prop_map(Step::Key),
            (0usize..8).prop_map(Step::RemoveKey),
            (1u64..220, 1u32..64).prop_map(|(birth, sectors)| Step::Insert(birth, sectors * 512)),
            (0usize..8, 0usize..8).prop_map(|(a, b)| Step::Take(a, b)),
        ]
    }

    /// The key at `index` of the list's keys (wrapping), or `u64::MAX` past them.
    fn key_at(list: &Deadlist, index: usize) -> u64 {
        let keys: Vec<u64> = list.keys().collect();
        keys.get(index % (keys.len() + 1))
            .copied()
            .unwrap_or(u64::MAX)
    }

    proptest! {
        /// Against a model that keeps every block in one vector: after every step the range
        /// sums equal a brute-force count of the blocks born in the range, and the list's
        /// invariants hold.
        #[test]
        fn range_sums_equal_a_brute_force_count(steps in prop::collection::vec(step(), 1..80)) {
            let mut list = Deadlist::new();
            let mut model: Vec<BlockPointer> = Vec::new();
            for step in steps {
                match step {
                    Step::Key(txg) => list.add_key(txg),
                    Step::RemoveKey(index) => list.remove_key(key_at(&list, index)),
                    Step::Insert(birth, asize) => {
                        list.insert(bp(birth, asize));
                        model.push(bp(birth, asize));
                    }
                    Step::Take(a, b) => {
                        let (min, max) = (key_at(&list, a), key_at(&list, b));
                        let mut taken = list.take_range(min, max);
                        let mut expected: Vec<BlockPointer> = model
                            .iter()
                            .filter(|bp| min < max && bp.birth_txg > min && bp.birth_txg <= max)
                            .copied()
                            .collect();
                        model.retain(|bp| !(min < max && bp.birth_txg > min && bp.birth_txg <= max));
                        let order = |bp: &BlockPointer| (bp.birth_txg, bp.dvas[0].asize);
                        taken.sort_by_key(order);
                        expected.sort_by_key(order);
                        prop_assert_eq!(taken, expected);
                    }
                }
                prop_assert_eq!(list.check(), Ok(()));
                let keys: Vec<u64> = list.keys().chain([u64::MAX]).collect();
                for (i, &min) in keys.iter().enumerate() {
                    for &max in &keys[i..] {
                        let born: Vec<&BlockPointer> = model
                            .iter()
                            .filter(|bp| bp.birth_txg > min && bp.birth_txg <= max)
                            .collect();
                        let sum = list.space_range(min, max);
                        prop_assert_eq!(sum.blocks, born.len() as u64);
                        prop_assert_eq!(
                            sum.allocated_bytes,
                            born.iter().map(|bp| bp.allocated_bytes()).sum::<u64>()
                        );
                    }
                }
            }
        }
    }
}
