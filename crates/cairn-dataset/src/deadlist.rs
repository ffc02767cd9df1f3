//! A deadlist: the blocks a dataset's head (or, once a snapshot is taken, that snapshot)
//! stopped referencing while an older snapshot still references them. cairn-object's
//! birth-txg rule hands them over as `dead_blocks`; they stay allocated until the snapshots
//! that reference them are destroyed.
//!
//! Why totals by interval: snapshot accounting asks "how many bytes were born in (a, b]" for
//! snapshot txgs a < b — a snapshot's `used`, `written@snap`, what destroying a snapshot
//! frees — and the answer must be a sum over a few totals, never a scan of blocks (OpenZFS's
//! deadlists, `dsl_deadlist.c`). So each block is counted under a *key*: the txg of the newest
//! snapshot of the dataset born before it (0 when none was), which the caller, who knows the
//! dataset's snapshots, passes to `insert`. `space_range(a, b)` sums the keys in `[a, b)`: the
//! blocks born in `(a, b]` when `a` and `b` are snapshot txgs (or `b` is `u64::MAX`). Keys are
//! sparse: only intervals that hold a block have one, so a new deadlist is empty whatever the
//! number of snapshots, and taking a snapshot is O(1). A key left by a destroyed snapshot is
//! harmless to every sum whose bounds are live snapshots; `merge_key` folds it into the one
//! before.
//!
//! On disk the totals travel with their owner's record (`DeadlistPhys`, in a snapshot or head
//! record), and the block pointers go, in the order they died, into MOS objects of their own
//! (`ObjectType::DeadList`, `DEADLIST_BLOCK_BYTES` blocks of 128-byte pointers): the list's
//! *parts*. Appending rewrites only the last block of the last part. Only destroy and `pool
//! check` read the pointers back, so memory holds totals, not blocks, however much has died.
//!
//! Destroying a snapshot S (predecessor P, successor N) changes deadlists without rewriting
//! them: the blocks of N's list born in (P, S] were S's alone and are freed, so that birth
//! range is marked *freed* in every part of N's list that holds births in it (`exclude`: they
//! read as absent from then on, and a background scan of the part frees them, a bounded
//! number per txg), and S's parts join N's (`merge`). Appends never go to a part with a freed
//! range: a block born in such a range can no longer die onto the list (no snapshot
//! references it), and a new part keeps the rule simple.
//!
//! Why parts die. Each part knows the birth range of the pointers it holds (`min_birth_txg`,
//! `max_birth_txg`, kept as they are appended), and its freed ranges are clipped to it and
//! coalesced where they touch. Once they cover the whole birth range the part holds nothing
//! live: it leaves its list at once (so lists, records and reads do not grow with the number
//! of snapshots ever destroyed: a rolling window of snapshots would otherwise collect every
//! part ever merged, and a range destroy of 10,000 leave 10,000 empty parts on the head).
//! Its MOS object must outlive the scans that still read it, so the scan that made it dead —
//! the last one queued on it, and frees run in queue order — carries `free_part`: the
//! background free frees the object when that scan ends, in the txg that records the scan
//! done (`frees.rs`). A part that dies with no scan pending is freed at once by the caller.
//!
//! Invariants (`check_blocks` verifies them against the pointers read back): a block is never
//! a hole and is born after its key; each key's totals are the sums over the blocks the parts
//! hold outside their freed ranges; no part on a list is covered by its freed ranges; the
//! pointers added since the last write wait in `pending` (written in the txg whose sync added
//! them, so none is ever lost or leaked).

use crate::DatasetError;
use bytes::Bytes;
use cairn_format::blkptr::BLOCK_POINTER_SIZE;
use cairn_format::{BlockPointer, ObjectType};
use cairn_object::ObjectSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Block size of a deadlist object: 32 pointers. Small, because most deadlists are small (a
/// snapshot taken after every few writes keeps a handful of dead blocks).
pub const DEADLIST_BLOCK_BYTES: u32 = 4096;
pub(crate) const POINTERS_PER_BLOCK: u64 = DEADLIST_BLOCK_BYTES as u64 / BLOCK_POINTER_SIZE as u64;
/// Capacity a new deadlist object is created with, in blocks: the dnode's direct pointers
/// only (most deadlists are small); the tree grows a level when an append goes past it.
const OBJECT_CAPACITY_BLOCKS: u64 = 1;

/// The byte totals of a set of dead blocks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadSpace {
    /// Bytes the blocks take on disk, every copy (what freeing them returns).
    pub allocated_bytes: u64,
    /// Logical bytes the blocks hold (before compression).
    pub logical_bytes: u64,
    pub blocks: u64,
}

impl DeadSpace {
    pub fn of(bp: &BlockPointer) -> DeadSpace {
        DeadSpace {
            allocated_bytes: bp.allocated_bytes(),
            logical_bytes: u64::from(bp.lsize),
            blocks: 1,
        }
    }

    pub fn add(&mut self, other: DeadSpace) {
        self.allocated_bytes += other.allocated_bytes;
        self.logical_bytes += other.logical_bytes;
        self.blocks += other.blocks;
    }
}

/// One MOS object of a deadlist's pointers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadlistPart {
    pub object: u64,
    /// Pointers the object holds.
    pub entries: u64,
    /// The lowest and highest birth txg of those pointers.
    pub min_birth_txg: u64,
    pub max_birth_txg: u64,
    /// Birth ranges (min, max] whose blocks were freed (they read as absent), ascending,
    /// within (`min_birth_txg` - 1, `max_birth_txg`], none touching another.
    pub freed_ranges: Vec<(u64, u64)>,
}

impl DeadlistPart {
    fn is_freed(&self, birth_txg: u64) -> bool {
        self.freed_ranges
            .iter()
            .any(|&(min, max)| birth_txg > min && birth_txg <= max)
    }

    /// The part of birth range (`min_txg`, `max_txg`] its pointers may fall in, if any.
    fn clip(&self, min_txg: u64, max_txg: u64) -> Option<(u64, u64)> {
        let low = min_txg.max(self.min_birth_txg - 1);
        let high = max_txg.min(self.max_birth_txg);
        (low < high).then_some((low, high))
    }

    /// Marks (`min_txg`, `max_txg`] (clipped) freed, joining the ranges it touches.
    fn add_freed(&mut self, min_txg: u64, max_txg: u64) {
        self.freed_ranges.push((min_txg, max_txg));
        self.freed_ranges.sort_unstable();
        let mut joined: Vec<(u64, u64)> = Vec::with_capacity(self.freed_ranges.len());
        for &(min, max) in &self.freed_ranges {
            match joined.last_mut() {
                Some(last) if min <= last.1 => last.1 = last.1.max(max),
                _ => joined.push((min, max)),
            }
        }
        self.freed_ranges = joined;
    }

    /// Whether its freed ranges cover every birth it holds: nothing on it is live.
    pub fn is_dead(&self) -> bool {
        self.freed_ranges
            .iter()
            .any(|&(min, max)| min < self.min_birth_txg && max >= self.max_birth_txg)
    }

    /// Why the part cannot be one a list holds, if it cannot.
    fn problem(&self) -> Option<&'static str> {
        let in_bounds = self.freed_ranges.iter().all(|&(min, max)| {
            min < max && min + 1 >= self.min_birth_txg && max <= self.max_birth_txg
        });
        let apart = self
            .freed_ranges
            .windows(2)
            .all(|pair| pair[0].1 < pair[1].0);
        if self.object == 0 || self.entries == 0 {
            Some("no object or no pointer")
        } else if self.min_birth_txg == 0 || self.min_birth_txg > self.max_birth_txg {
            Some("a bad birth range")
        } else if !in_bounds || !apart {
            Some("freed ranges out of order, touching or outside its births")
        } else if self.is_dead() {
            Some("freed ranges covering every birth it holds")
        } else {
            None
        }
    }
}

/// A deadlist as its owner's record stores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadlistPhys {
    pub parts: Vec<DeadlistPart>,
    /// Totals by key, keys ascending.
    pub totals: Vec<(u64, DeadSpace)>,
}

/// Pointers `take_pending` moved onto a part: entries `first_entry..` of `object` (a new
/// object when 0).
struct PartAppend {
    object: u64,
    first_entry: u64,
    pointers: Vec<BlockPointer>,
}

/// See the module doc.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deadlist {
    parts: Vec<DeadlistPart>,
    totals: BTreeMap<u64, DeadSpace>,
    pending: Vec<BlockPointer>,
}

/// Blocks a destroy leaves to free: those of `part` born in (`min_txg`, `max_txg`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FreeScan {
    pub object: u64,
    pub entries: u64,
    pub min_txg: u64,
    pub max_txg: u64,
    /// The part is on no list any more and this is the last scan that reads it: its object
    /// is freed when the scan ends (see the module doc).
    pub free_part: bool,
}

impl Deadlist {
    /// An empty deadlist (no object yet).
    pub fn new() -> Deadlist {
        Deadlist::default()
    }

    /// The deadlist a record holds; `Corrupt` if its totals repeat a key or count nothing,
    /// or a part is empty, has a bad birth range, freed ranges out of order, touching or
    /// outside its births, or covering them all (such a part leaves its list).
    pub fn from_phys(phys: &DeadlistPhys) -> Result<Deadlist, DatasetError> {
        let corrupt = |what: String| DatasetError::Corrupt(format!("deadlist: {what}"));
        let mut totals = BTreeMap::new();
        for &(key, space) in &phys.totals {
            if totals.insert(key, space).is_some() || space.blocks == 0 {
                return Err(corrupt(format!("key {key} repeated or empty")));
            }
        }
        for part in &phys.parts {
            if let Some(problem) = part.problem() {
                return Err(corrupt(format!("part {part:?}: {problem}")));
            }
        }
        Ok(Deadlist {
            parts: phys.parts.clone(),
            totals,
            pending: Vec::new(),
        })
    }

    /// The record's form. Every pointer must have been written (`write`).
    pub fn to_phys(&self) -> DeadlistPhys {
        assert!(
            self.pending.is_empty(),
            "a deadlist encoded with {} pointers not yet written",
            self.pending.len()
        );
        DeadlistPhys {
            parts: self.parts.clone(),
            totals: self
                .totals
                .iter()
                .map(|(&key, &space)| (key, space))
                .collect(),
        }
    }

    /// Adds a block the owner stopped referencing, counted under `key` (the txg of the newest
    /// snapshot born before it, 0 if none).
    pub fn insert(&mut self, key: u64, bp: BlockPointer) {
        assert!(
            !bp.is_hole() && bp.birth_txg > key,
            "a hole, or a block born in txg {} under key {key}, on a deadlist",
            bp.birth_txg
        );
        self.totals.entry(key).or_default().add(DeadSpace::of(&bp));
        self.pending.push(bp);
    }

    /// Counts the blocks of key `from` under `into` (`into < from`: the snapshot `from` named
    /// is gone, its interval joins the one before).
    pub fn merge_key(&mut self, from: u64, into: u64) {
        assert!(into < from, "key {from} merged into later key {into}");
        if let Some(space) = self.totals.remove(&from) {
            self.totals.entry(into).or_default().add(space);
        }
    }

    /// The totals of every block on the list.
    pub fn space(&self) -> DeadSpace {
        self.space_range(0, u64::MAX)
    }

    /// The totals of the keys in `[min_txg, max_txg)`: the blocks born in `(min_txg, max_txg]`
    /// when both bound snapshot intervals. A sum over keys, never over blocks.
    pub fn space_range(&self, min_txg: u64, max_txg: u64) -> DeadSpace {
        let mut total = DeadSpace::default();
        if min_txg < max_txg {
            for space in self.totals.range(min_txg..max_txg).map(|(_, space)| space) {
                total.add(*space);
            }
        }
        total
    }

    /// The keys, ascending.
    pub fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.totals.keys().copied()
    }

    /// The MOS objects holding the pointers.
    pub fn objects(&self) -> impl Iterator<Item = u64> + '_ {
        self.parts.iter().map(|part| part.object)
    }

    /// How many parts (MOS objects) the list has.
    pub fn parts_len(&self) -> usize {
        self.parts.len()
    }

    /// Takes the blocks born in (`min_txg`, `max_txg`] off the list (a destroyed snapshot's,
    /// see the module doc): their totals go, and their range is marked freed in every part
    /// that holds births in it. Returns the pending ones (not yet written: free them now) and
    /// a scan per such part for the written ones (free them in the background). A part left
    /// holding nothing live leaves the list; its scan has `free_part` set.
    pub fn exclude(&mut self, min_txg: u64, max_txg: u64) -> (Vec<BlockPointer>, Vec<FreeScan>) {
        assert!(
            min_txg < max_txg,
            "an empty birth range ({min_txg}, {max_txg}]"
        );
        let keys: Vec<u64> = self
            .totals
            .range(min_txg..max_txg)
            .map(|(&k, _)| k)
            .collect();
        for key in keys {
            self.totals.remove(&key);
        }
        let (free_now, kept): (Vec<BlockPointer>, Vec<BlockPointer>) = self
            .pending
            .drain(..)
            .partition(|bp| bp.birth_txg > min_txg && bp.birth_txg <= max_txg);
        self.pending = kept;
        let mut scans = Vec::new();
        self.parts.retain_mut(|part| {
            // A part with no birth in the range has nothing to free: no scan reads it.
            let Some((low, high)) = part.clip(min_txg, max_txg) else {
                return true;
            };
            part.add_freed(low, high);
            let dead = part.is_dead();
            scans.push(FreeScan {
                object: part.object,
                entries: part.entries,
                min_txg: low,
                max_txg: high,
                free_part: dead,
            });
            !dead
        });
        (free_now, scans)
    }

    /// Takes on every block of `other` (a destroyed snapshot's list joins its successor's).
    pub fn merge(&mut self, other: Deadlist) {
        // The other list's parts go first: this list's last part stays the one appended to.
        let mut parts = other.parts;
        parts.append(&mut self.parts);
        self.parts = parts;
        for (key, space) in other.totals {
            self.totals.entry(key).or_default().add(space);
        }
        self.pending.extend(other.pending);
    }

    /// Whether pointers wait to be written.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Appends the pending pointers to the list's last part in `txg` (sync context), starting
    /// a part, numbered by `new_object`, when there is none or the last has a freed range.
    /// Rewrites only the blocks the appended pointers land in.
    pub fn write(
        &mut self,
        mos: &ObjectSet,
        txg: u64,
        new_object: impl FnOnce() -> u64,
    ) -> Result<(), DatasetError> {
        let Some(append) = self.take_pending(new_object) else {
            return Ok(());
        };
        if append.first_entry == 0 {
            mos.create_object(
                txg,
                append.object,
                ObjectType::DeadList,
                DEADLIST_BLOCK_BYTES,
                OBJECT_CAPACITY_BLOCKS,
            );
        }
        let mut entry = append.first_entry;
        let mut blkid = entry / POINTERS_PER_BLOCK;
        let mut block = read_part_block(mos, append.object, blkid)?;
        for bp in append.pointers {
            let slot = (entry % POINTERS_PER_BLOCK) as usize * BLOCK_POINTER_SIZE;
            block[slot..slot + BLOCK_POINTER_SIZE].copy_from_slice(&bp.to_bytes());
            entry += 1;
            if entry.is_multiple_of(POINTERS_PER_BLOCK) {
                mos.write_block(txg, append.object, blkid, Bytes::from(block));
                blkid += 1;
                block = vec![0; DEADLIST_BLOCK_BYTES as usize];
            }
        }
        if !entry.is_multiple_of(POINTERS_PER_BLOCK) {
            mos.write_block(txg, append.object, blkid, Bytes::from(block));
        }
        Ok(())
    }

    /// The bookkeeping half of `write`: the pending pointers join the last part (a new one,
    /// numbered by `new_object`, when there is none or the last has a freed range), whose
    /// entry count and birth range take them in; returns where they go, for the caller to
    /// store them there (`None`: nothing pending).
    fn take_pending(&mut self, new_object: impl FnOnce() -> u64) -> Option<PartAppend> {
        if self.pending.is_empty() {
            return None;
        }
        if self
            .parts
            .last()
            .is_none_or(|part| !part.freed_ranges.is_empty())
        {
            let object = new_object();
            assert!(object != 0, "a deadlist object numbered 0");
            self.parts.push(DeadlistPart {
                object,
                entries: 0,
                min_birth_txg: u64::MAX,
                max_birth_txg: 0,
                freed_ranges: Vec::new(),
            });
        }
        let part = self.parts.last_mut().expect("a part was just ensured");
        let pointers = std::mem::take(&mut self.pending);
        let first_entry = part.entries;
        for bp in &pointers {
            part.min_birth_txg = part.min_birth_txg.min(bp.birth_txg);
            part.max_birth_txg = part.max_birth_txg.max(bp.birth_txg);
        }
        part.entries += pointers.len() as u64;
        Some(PartAppend {
            object: part.object,
            first_entry,
            pointers,
        })
    }

    /// Every pointer on the list (outside the freed ranges), written and pending.
    pub fn read_blocks(&self, mos: &ObjectSet) -> Result<Vec<BlockPointer>, DatasetError> {
        let mut blocks = Vec::new();
        for part in &self.parts {
            read_part(mos, part.object, 0, part.entries, |bp| {
                if !part.is_freed(bp.birth_txg) {
                    blocks.push(bp);
                }
            })?;
        }
        blocks.extend_from_slice(&self.pending);
        Ok(blocks)
    }

    /// Checks `blocks` (as `read_blocks` returned them) against the totals: each block born
    /// after its key as `key_of` computes it, and each key's totals the sum of its blocks.
    pub fn check_blocks(
        &self,
        blocks: &[BlockPointer],
        key_of: impl Fn(u64) -> u64,
    ) -> Result<(), String> {
        let mut sums: BTreeMap<u64, DeadSpace> = BTreeMap::new();
        for bp in blocks {
            if bp.is_hole() || bp.birth_txg == 0 {
                return Err("a hole on a deadlist".to_string());
            }
            sums.entry(key_of(bp.birth_txg))
                .or_default()
                .add(DeadSpace::of(bp));
        }
        // Keys the caller no longer knows (a destroyed snapshot's, not yet merged) are summed
        // with the one their blocks now fall under.
        let mut totals: BTreeMap<u64, DeadSpace> = BTreeMap::new();
        for (&key, &space) in &self.totals {
            totals
                .entry(if key == 0 { 0 } else { key_of(key + 1) })
                .or_default()
                .add(space);
        }
        if sums != totals {
            return Err(format!("totals {totals:?}, its blocks sum to {sums:?}"));
        }
        Ok(())
    }
}

/// Calls `visit` with entries `first..end` of deadlist part `object`, in order.
pub fn read_part(
    mos: &ObjectSet,
    object: u64,
    first: u64,
    end: u64,
    mut visit: impl FnMut(BlockPointer),
) -> Result<(), DatasetError> {
    let mut index = first;
    while index < end {
        let blkid = index / POINTERS_PER_BLOCK;
        let block = read_part_block(mos, object, blkid)?;
        let block_end = ((blkid + 1) * POINTERS_PER_BLOCK).min(end);
        for entry in index..block_end {
            let at = (entry % POINTERS_PER_BLOCK) as usize * BLOCK_POINTER_SIZE;
            let bp = BlockPointer::decode(&block[at..at + BLOCK_POINTER_SIZE]).map_err(|err| {
                DatasetError::Corrupt(format!("deadlist object {object} entry {entry}: {err}"))
            })?;
            visit(bp);
        }
        index = block_end;
    }
    Ok(())
}

/// Block `blkid` of a part, zeros if it is a hole (not yet written).
fn read_part_block(mos: &ObjectSet, object: u64, blkid: u64) -> Result<Vec<u8>, DatasetError> {
    let block = mos
        .read_block(object, blkid)
        .map_err(|source| DatasetError::Io {
            name: format!("deadlist object {object}"),
            source: source.into(),
        })?;
    match block {
        None => Ok(vec![0; DEADLIST_BLOCK_BYTES as usize]),
        Some(block) if block.len() == DEADLIST_BLOCK_BYTES as usize => Ok(block.to_vec()),
        Some(block) => Err(DatasetError::Corrupt(format!(
            "deadlist object {object}: block {blkid} of {} bytes",
            block.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_format::Dva;
    use proptest::prelude::*;
    use proptest::test_runner::TestCaseError;

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

    /// The key of a birth among snapshot txgs `snaps`.
    fn key_of(snaps: &[u64], birth: u64) -> u64 {
        snaps
            .iter()
            .copied()
            .filter(|&snap| snap < birth)
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn a_block_is_counted_in_the_interval_it_was_born_in() {
        let snaps = [10, 20];
        let mut list = Deadlist::new();
        for birth in [5, 10, 11, 20, 21] {
            list.insert(key_of(&snaps, birth), bp(birth, 512));
        }
        // Born in (0, 10]: 5 and 10; in (10, 20]: 11 and 20; after 20: 21.
        assert_eq!(list.space_range(0, 10).blocks, 2);
        assert_eq!(list.space_range(10, 20).blocks, 2);
        assert_eq!(list.space_range(20, u64::MAX).blocks, 1);
        assert_eq!(list.space().allocated_bytes, 5 * 512);
        // Snapshot 10 destroyed: its interval joins the one before.
        list.merge_key(10, 0);
        assert_eq!(list.space_range(0, 20).blocks, 4);
        assert_eq!(list.keys().collect::<Vec<_>>(), vec![0, 20]);
    }

    #[test]
    fn records_with_inconsistent_parts_or_totals_are_refused() {
        let space = DeadSpace {
            allocated_bytes: 512,
            logical_bytes: 4096,
            blocks: 1,
        };
        let part = DeadlistPart {
            object: 7,
            entries: 1,
            min_birth_txg: 2,
            max_birth_txg: 12,
            freed_ranges: vec![(1, 5), (6, 9)],
        };
        let good = DeadlistPhys {
            parts: vec![part.clone()],
            totals: vec![(0, space)],
        };
        assert!(Deadlist::from_phys(&good).is_ok());
        let with_part = |part: DeadlistPart| DeadlistPhys {
            parts: vec![part],
            ..good.clone()
        };
        for bad in [
            with_part(DeadlistPart {
                object: 0,
                ..part.clone()
            }),
            with_part(DeadlistPart {
                entries: 0,
                ..part.clone()
            }),
            with_part(DeadlistPart {
                freed_ranges: vec![(5, 9), (2, 5)],
                ..part.clone()
            }),
            with_part(DeadlistPart {
                freed_ranges: vec![(5, 5)],
                ..part.clone()
            }),
            // Touching ranges are joined when made.
            with_part(DeadlistPart {
                freed_ranges: vec![(2, 5), (5, 9)],
                ..part.clone()
            }),
            // Outside its births.
            with_part(DeadlistPart {
                freed_ranges: vec![(0, 5)],
                ..part.clone()
            }),
            with_part(DeadlistPart {
                freed_ranges: vec![(9, 13)],
                ..part.clone()
            }),
            with_part(DeadlistPart {
                min_birth_txg: 0,
                freed_ranges: Vec::new(),
                ..part.clone()
            }),
            with_part(DeadlistPart {
                min_birth_txg: 13,
                freed_ranges: Vec::new(),
                ..part.clone()
            }),
            // Holding nothing live: it leaves its list.
            with_part(DeadlistPart {
                freed_ranges: vec![(1, 12)],
                ..part.clone()
            }),
            DeadlistPhys {
                totals: vec![(0, space), (0, space)],
                ..good.clone()
            },
        ] {
            assert!(Deadlist::from_phys(&bad).is_err(), "{bad:?} accepted");
        }
    }

    /// A list with parts of the given (min, max) births, objects numbered from 1.
    fn list_of_parts(births: &[(u64, u64)]) -> Deadlist {
        let parts = births
            .iter()
            .enumerate()
            .map(|(index, &(min, max))| DeadlistPart {
                object: index as u64 + 1,
                entries: 4,
                min_birth_txg: min,
                max_birth_txg: max,
                freed_ranges: Vec::new(),
            })
            .collect();
        Deadlist::from_phys(&DeadlistPhys {
            parts,
            totals: Vec::new(),
        })
        .unwrap()
    }

    #[test]
    fn ranges_are_clipped_and_joined_and_a_covered_part_leaves_with_its_last_scan() {
        // Births: part 1 in [5, 20], part 2 in [21, 40], part 3 in [41, 60].
        let mut list = list_of_parts(&[(5, 20), (21, 40), (41, 60)]);
        // (10, 30]: parts 1 and 2 hold births in it, clipped to theirs; part 3 none.
        let (_, scans) = list.exclude(10, 30);
        let ranges: Vec<(u64, u64, u64, bool)> = scans
            .iter()
            .map(|scan| (scan.object, scan.min_txg, scan.max_txg, scan.free_part))
            .collect();
        assert_eq!(ranges, vec![(1, 10, 20, false), (2, 20, 30, false)]);
        assert_eq!(list.parts[0].freed_ranges, vec![(10, 20)]);
        assert!(list.parts[2].freed_ranges.is_empty());
        // (0, 10]: part 1's ranges touch and join, (4, 20]: all its births, so it goes; its
        // scan is the one that frees it.
        let (_, scans) = list.exclude(0, 10);
        assert_eq!(
            scans,
            vec![FreeScan {
                object: 1,
                entries: 4,
                min_txg: 4,
                max_txg: 10,
                free_part: true,
            }]
        );
        assert_eq!(list.objects().collect::<Vec<_>>(), vec![2, 3]);
        // (30, 50]: part 2's (20, 30] and (30, 40] join into all of it; part 3 keeps
        // (40, 50] and stays.
        let (_, scans) = list.exclude(30, 50);
        let freeing: Vec<(u64, bool)> = scans
            .iter()
            .map(|scan| (scan.object, scan.free_part))
            .collect();
        assert_eq!(freeing, vec![(2, true), (3, false)]);
        assert_eq!(list.objects().collect::<Vec<_>>(), vec![3]);
        assert_eq!(list.parts_len(), 1);
        assert_eq!(list.parts[0].freed_ranges, vec![(40, 50)]);
        // The record it writes holds no dead part and reads back the same.
        assert_eq!(Deadlist::from_phys(&list.to_phys()).unwrap(), list);
    }

    #[test]
    fn appended_pointers_set_a_parts_birth_range_and_a_freed_range_seals_it() {
        let mut list = Deadlist::new();
        let mut next = 10;
        let mut number = || {
            next += 1;
            next
        };
        list.insert(0, bp(7, 512));
        list.insert(0, bp(3, 512));
        let append = list.take_pending(&mut number).unwrap();
        assert_eq!((append.object, append.first_entry), (11, 0));
        list.insert(0, bp(9, 512));
        let append = list.take_pending(&mut number).unwrap();
        assert_eq!((append.object, append.first_entry), (11, 2));
        let part = &list.parts[0];
        assert_eq!(
            (part.entries, part.min_birth_txg, part.max_birth_txg),
            (3, 3, 9)
        );
        // A freed range that leaves it live seals it: the next pointers start a part.
        let (_, scans) = list.exclude(5, 7);
        assert_eq!(scans.len(), 1);
        list.insert(0, bp(2, 512));
        let append = list.take_pending(&mut number).unwrap();
        assert_eq!((append.object, append.first_entry), (12, 0));
        assert_eq!(list.objects().collect::<Vec<_>>(), vec![11, 12]);
    }

    #[derive(Debug, Clone)]
    enum Step {
        /// Txgs pass, then a snapshot is taken.
        Snapshot(u64),
        Destroy(usize),
        /// A block dies, born `n` txgs before now (at least txg 1).
        Insert(u64, u32),
        /// The blocks born between two snapshot bounds are freed (a destroy).
        Free(usize, usize),
        /// The pending pointers are written to a part (a sync).
        Write,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1u64..20).prop_map(Step::Snapshot),
            (0usize..8).prop_map(Step::Destroy),
            (0u64..100, 1u32..64).prop_map(|(age, sectors)| Step::Insert(age, sectors * 512)),
            (0usize..8, 0usize..8).prop_map(|(a, b)| Step::Free(a, b)),
            Just(Step::Write),
        ]
    }

    /// The pointers of every part ever written, by object (the MOS of the model).
    type Store = BTreeMap<u64, Vec<BlockPointer>>;

    /// What the list holds live: its parts' pointers outside their freed ranges, and the
    /// pending ones, sorted.
    fn live_blocks(list: &Deadlist, store: &Store) -> Vec<(u64, u64)> {
        let mut live: Vec<(u64, u64)> = list
            .parts
            .iter()
            .flat_map(|part| {
                store[&part.object][..part.entries as usize]
                    .iter()
                    .filter(|bp| !part.is_freed(bp.birth_txg))
            })
            .chain(&list.pending)
            .map(|bp| (bp.birth_txg, bp.dvas[0].offset))
            .collect();
        live.sort_unstable();
        live
    }

    /// A destroy's exclusion of (`min`, `max`] against the model: the pending pointers it
    /// returns and the blocks its scans find are exactly the model's blocks born in the range,
    /// each once; a scan frees its part exactly when the part left the list, and no scan
    /// reads a part a scan freed before.
    fn exclude_and_check(
        list: &mut Deadlist,
        store: &Store,
        model: &mut Vec<BlockPointer>,
        freed_parts: &mut Vec<u64>,
        (min, max): (u64, u64),
    ) -> Result<(), TestCaseError> {
        let place = |bp: &BlockPointer| (bp.birth_txg, bp.dvas[0].offset);
        let (free_now, scans) = list.exclude(min, max);
        let mut freed: Vec<(u64, u64)> = free_now.iter().map(place).collect();
        for scan in &scans {
            prop_assert!(
                !freed_parts.contains(&scan.object),
                "a scan of a freed part"
            );
            freed.extend(
                store[&scan.object][..scan.entries as usize]
                    .iter()
                    .filter(|bp| bp.birth_txg > scan.min_txg && bp.birth_txg <= scan.max_txg)
                    .map(place),
            );
            let listed = list.objects().any(|object| object == scan.object);
            prop_assert_eq!(scan.free_part, !listed);
            if scan.free_part {
                freed_parts.push(scan.object);
            }
        }
        let in_range = |bp: &BlockPointer| bp.birth_txg > min && bp.birth_txg <= max;
        let mut expected: Vec<(u64, u64)> =
            model.iter().filter(|bp| in_range(bp)).map(place).collect();
        model.retain(|bp| !in_range(bp));
        freed.sort_unstable();
        expected.sort_unstable();
        prop_assert_eq!(freed, expected);
        Ok(())
    }

    proptest! {
        /// Against a model that keeps every block: after every step the sums over any two
        /// snapshot bounds equal a brute-force count of the blocks born between them, the
        /// blocks check against the totals, and the parts hold exactly the model's blocks
        /// live. A destroy's scans and pending pointers free exactly the blocks born in its
        /// range, each once; a part leaves the list exactly when it holds nothing live, and
        /// no scan reads it after the one that frees it. Time only moves forward: a snapshot
        /// is newer than every block that died before it.
        #[test]
        fn range_sums_equal_a_brute_force_count(steps in prop::collection::vec(step(), 1..80)) {
            let mut now = 1u64;
            let mut snaps: Vec<u64> = Vec::new();
            let mut list = Deadlist::new();
            let mut model: Vec<BlockPointer> = Vec::new();
            let mut store = Store::new();
            let mut freed_parts: Vec<u64> = Vec::new();
            let mut gone: Vec<(u64, u64)> = Vec::new();
            let mut unique = 0u64;
            for step in steps {
                match step {
                    Step::Snapshot(passed) => {
                        now += passed;
                        snaps.push(now);
                        now += 1;
                    }
                    Step::Destroy(index) if !snaps.is_empty() => {
                        let gone = snaps.remove(index % snaps.len());
                        list.merge_key(gone, key_of(&snaps, gone));
                    }
                    Step::Destroy(_) => {}
                    Step::Insert(age, asize) => {
                        let birth = now.saturating_sub(age).max(1);
                        // As in a pool: no block of a freed range dies onto the list after.
                        if gone.iter().any(|&(low, high)| birth > low && birth <= high) {
                            continue;
                        }
                        // Distinct places: a block freed twice would show as two.
                        unique += 1;
                        let mut block = bp(birth, asize);
                        block.dvas[0].offset = unique;
                        list.insert(key_of(&snaps, birth), block);
                        model.push(block);
                    }
                    Step::Write => {
                        let next = store.keys().next_back().map_or(1, |last| last + 1);
                        if let Some(append) = list.take_pending(|| next) {
                            let stored = store.entry(append.object).or_default();
                            prop_assert_eq!(stored.len() as u64, append.first_entry);
                            stored.extend(append.pointers);
                        }
                    }
                    Step::Free(a, b) => {
                        let bounds: Vec<u64> = [0].into_iter().chain(snaps.iter().copied()).collect();
                        let (min, max) = (bounds[a % bounds.len()], bounds[b % bounds.len()]);
                        // As in a pool: the ranges freed in one list never overlap (a
                        // destroyed snapshot's range is freed once).
                        if min < max && gone.iter().all(|&(low, high)| high <= min || max <= low) {
                            gone.push((min, max));
                            exclude_and_check(&mut list, &store, &mut model, &mut freed_parts, (min, max))?;
                        }
                    }
                }
                let mut expected: Vec<(u64, u64)> =
                    model.iter().map(|bp| (bp.birth_txg, bp.dvas[0].offset)).collect();
                expected.sort_unstable();
                prop_assert_eq!(live_blocks(&list, &store), expected);
                for part in &list.parts {
                    prop_assert!(part.problem().is_none(), "{:?} on the list", part);
                }
                prop_assert_eq!(list.check_blocks(&model, |birth| key_of(&snaps, birth)), Ok(()));
                let bounds: Vec<u64> = [0].into_iter().chain(snaps.iter().copied()).chain([u64::MAX]).collect();
                for (i, &min) in bounds.iter().enumerate() {
                    for &max in &bounds[i..] {
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
