//! Background frees in the snapshot table: what destroys leave to free a bounded amount per
//! txg, so no txg runs long whatever was destroyed (OpenZFS #13064), resumed after import;
//! and, for observers, the pieces of work by number (`background_frees`) and what every
//! deadlist holds until a destroy frees it (`deadlist_totals`).
//!
//! Two kinds of work, each a record of the table written in the txg that advances it:
//! - a snapshot destroy's (`FreeWork`, tag 'f'): the blocks of deadlist parts born in a range,
//!   scanned in order from where the last txg stopped; a scan marked `free_part` (its part
//!   left every list, and no later scan reads it) also frees the part's MOS object when it
//!   ends, in the txg that records it done, so a crash redoes both or neither;
//! - a dataset destroy's or a rollback's (`TreeFree`, tag 't'): a dead object-set tree freed
//!   in post order from a stored path (`cairn_object::tree_free`), only its blocks born after
//!   a txg (a clone's origin's, a rolled-back head's snapshot's).

use crate::DatasetError;
use crate::deadlist::{DeadSpace, Deadlist, FreeScan, POINTERS_PER_BLOCK, read_part};
use crate::records::{FreeWork, TreeFree};
use crate::snapshots::{RecordKey, SnapshotTable};
use cairn_format::BlockPointer;
use cairn_pipeline::BlockIo;
use std::collections::BTreeSet;

/// Deadlist entries scanned between two asks of a free's `keep_going` (a time budget's
/// granularity: small enough that a step costs well under a millisecond).
pub const FREE_CHUNK_ENTRIES: u64 = 512;
/// Dead-tree blocks freed between two asks of `keep_going`.
pub const FREE_CHUNK_BLOCKS: u64 = 512;
/// What `process_frees` did: deadlist entries scanned, and the parts whose MOS objects it
/// gave back to `free_part`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FreesDone {
    pub entries_scanned: u64,
    pub parts_freed: u64,
}

/// Scans of a free whose deadlist blocks are read ahead of the one being freed: a range
/// destroy leaves thousands of small parts, each its own MOS object, and reading them one
/// after another in the sync made each wait for the device in turn.
const PREFETCH_SCANS: usize = 64;

/// One piece of background free work, as the table numbers it: a snapshot destroy's
/// deadlist scans or a dead tree (a destroyed dataset's, a rolled-back head's). A number is
/// given again once its work is done, so a follower must notice when one goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum BackgroundFree {
    Deadlist(u64),
    Tree(u64),
}

impl SnapshotTable {
    /// The background frees left, each with the bytes it still has to free.
    pub fn background_frees(&self) -> Vec<(BackgroundFree, u64)> {
        self.free_queue
            .iter()
            .map(|(&seq, work)| (BackgroundFree::Deadlist(seq), work.remaining_bytes))
            .chain(
                self.tree_frees
                    .iter()
                    .map(|(&seq, work)| (BackgroundFree::Tree(seq), work.remaining_bytes)),
            )
            .collect()
    }

    /// Every deadlist of the table together (snapshots' and heads'): the blocks they hold
    /// and their bytes, a sum of totals (no block is read). What the pool keeps allocated for
    /// snapshots alone.
    pub fn deadlist_totals(&self) -> DeadSpace {
        let mut total = DeadSpace::default();
        for list in self
            .snapshots
            .values()
            .map(|snapshot| &snapshot.deadlist)
            .chain(self.heads.values())
        {
            total.add(list.space());
        }
        total
    }

    /// Bytes destroys left to free (the pool property `freeing`).
    pub fn freeing_bytes(&self) -> u64 {
        self.free_queue
            .values()
            .map(|work| work.remaining_bytes)
            .chain(self.tree_frees.values().map(|work| work.remaining_bytes))
            .sum()
    }

    /// Whether any background free is left (the txg engine syncs txgs for it).
    pub fn has_background_frees(&self) -> bool {
        !self.free_queue.is_empty() || !self.tree_frees.is_empty()
    }

    /// Queues the background free of the dead tree under `root`: its blocks born after
    /// `born_after_txg`, `bytes` of them (an estimate for `freeing`).
    pub fn queue_tree_free(&mut self, root: &BlockPointer, born_after_txg: u64, bytes: u64) {
        if root.is_hole() || root.birth_txg <= born_after_txg {
            return;
        }
        let seq = self.tree_frees.keys().next_back().map_or(1, |seq| seq + 1);
        self.tree_frees.insert(
            seq,
            TreeFree {
                root: root.to_bytes().to_vec(),
                born_after_txg,
                path: Vec::new(),
                remaining_bytes: bytes,
            },
        );
        self.dirty.insert(RecordKey::TreeFree(seq));
    }

    /// Why freeing a dead tree is stuck, if the last try could not read a block of it (it is
    /// tried again every txg that has background work).
    pub fn tree_free_problem(&self) -> Option<&str> {
        self.tree_free_problem.as_deref()
    }

    /// The dead trees still being freed, oldest first.
    pub fn tree_frees(&self) -> impl Iterator<Item = &TreeFree> {
        self.tree_frees.values()
    }

    /// Frees, through `free`, at most about `blocks_max` blocks of the oldest dead trees (in
    /// sync context), in steps of at most `FREE_CHUNK_BLOCKS`, stopping early once
    /// `keep_going` says so (asked after each step, so every call makes progress); returns
    /// the blocks freed.
    pub fn process_tree_frees(
        &mut self,
        io: &BlockIo,
        blocks_max: u64,
        keep_going: &mut dyn FnMut() -> bool,
        free: &mut dyn FnMut(&BlockPointer),
    ) -> Result<u64, DatasetError> {
        let mut freed = 0;
        while freed < blocks_max {
            if freed > 0 && !keep_going() {
                break;
            }
            let Some(&seq) = self.tree_frees.keys().next() else {
                break;
            };
            self.dirty.insert(RecordKey::TreeFree(seq));
            let work = self
                .tree_frees
                .get_mut(&seq)
                .expect("its key was just read");
            let root = work.root()?;
            let mut remaining = work.remaining_bytes;
            let step = cairn_object::tree_free::free_tree_step(
                io,
                &root,
                work.born_after_txg,
                &work.path,
                (blocks_max - freed).min(FREE_CHUNK_BLOCKS),
                &mut |bp| {
                    free(bp);
                    freed += 1;
                    remaining = remaining.saturating_sub(bp.allocated_bytes());
                },
            );
            work.remaining_bytes = remaining;
            match step.next {
                Some(path) => work.path = path,
                None => {
                    self.tree_frees.remove(&seq);
                }
            }
            if let Some(err) = step.error {
                // Kept where it stopped: a later txg tries again.
                self.tree_free_problem = Some(err.to_string());
                break;
            }
            self.tree_free_problem = None;
        }
        Ok(freed)
    }

    /// Queues the background free of `scans` (`bytes` of blocks, for `freeing`), returning
    /// its number. The destroys of one txg share one piece of work: a range destroy of 10,000
    /// snapshots writes one free record, not 10,000 (each a map change in the destroy's txg,
    /// and a removal in a later one), and scans in the order destroyed all the same.
    pub(crate) fn queue_free(&mut self, scans: Vec<FreeScan>, bytes: u64) -> u64 {
        if let Some(seq) = self.open_free
            && let Some(work) = self.free_queue.get_mut(&seq)
            && work.scan_index == 0
            && work.next_entry == 0
        {
            work.scans.extend(scans);
            work.remaining_bytes += bytes;
            self.dirty.insert(RecordKey::Free(seq));
            return seq;
        }
        let seq = self.free_queue.keys().next_back().map_or(1, |seq| seq + 1);
        self.free_queue.insert(
            seq,
            FreeWork {
                scans,
                scan_index: 0,
                next_entry: 0,
                remaining_bytes: bytes,
            },
        );
        self.dirty.insert(RecordKey::Free(seq));
        self.open_free = Some(seq);
        seq
    }

    /// The background frees still to do, oldest first.
    pub fn free_queue(&self) -> impl Iterator<Item = &FreeWork> {
        self.free_queue.values()
    }

    /// Frees, through `free`, the blocks of at most `entries_max` scanned deadlist entries of
    /// the oldest destroys' background work (in sync context), in steps of at most
    /// `FREE_CHUNK_ENTRIES`, stopping early once `keep_going` says so (asked after each step,
    /// so every call makes progress), and through `free_part` the MOS object of each dead
    /// part whose last scan ends (the caller frees it in this txg, which records the scan
    /// done). Scans run in queue order: by free number, then by index.
    pub fn process_frees(
        &mut self,
        mos: &cairn_object::ObjectSet,
        entries_max: u64,
        keep_going: &mut dyn FnMut() -> bool,
        free: &mut dyn FnMut(&BlockPointer),
        free_part: &mut dyn FnMut(u64),
    ) -> Result<FreesDone, DatasetError> {
        let mut parts_freed = 0;
        // Work begun takes no more scans (its record says where it stands).
        self.open_free = None;
        let mut scanned = 0;
        // (free number, scans before this index read ahead)
        let mut prefetched = (0, 0);
        while scanned < entries_max {
            if scanned > 0 && !keep_going() {
                break;
            }
            let Some(&seq) = self.free_queue.keys().next() else {
                break;
            };
            self.dirty.insert(RecordKey::Free(seq));
            let work = self
                .free_queue
                .get_mut(&seq)
                .expect("its key was just read");
            let Some(scan) = work.scans.get(work.scan_index as usize).cloned() else {
                debug_assert_eq!(work.remaining_bytes, 0, "free work done with bytes left");
                self.free_queue.remove(&seq);
                continue;
            };
            let step = (entries_max - scanned).min(FREE_CHUNK_ENTRIES);
            prefetch_scans(mos, work, seq, &mut prefetched, step);
            let end = scan.entries.min(work.next_entry + step);
            read_part(mos, scan.object, work.next_entry, end, |bp| {
                if bp.birth_txg > scan.min_txg && bp.birth_txg <= scan.max_txg {
                    free(&bp);
                    work.remaining_bytes =
                        work.remaining_bytes.saturating_sub(bp.allocated_bytes());
                }
            })?;
            scanned += end - work.next_entry;
            work.next_entry = end;
            if end == scan.entries {
                if scan.free_part {
                    free_part(scan.object);
                    parts_freed += 1;
                }
                work.scan_index += 1;
                work.next_entry = 0;
                if work.scan_index as usize == work.scans.len() {
                    debug_assert_eq!(work.remaining_bytes, 0, "free work done with bytes left");
                    self.free_queue.remove(&seq);
                }
            }
        }
        // Scans done leave the record, so a long one (a range destroy's) shrinks as it goes
        // instead of being rewritten whole every txg.
        if let Some((&seq, work)) = self.free_queue.iter_mut().next()
            && work.scan_index > 0
        {
            work.scans.drain(..work.scan_index as usize);
            work.scan_index = 0;
            self.dirty.insert(RecordKey::Free(seq));
        }
        Ok(FreesDone {
            entries_scanned: scanned,
            parts_freed,
        })
    }

    /// Deadlist parts that left their lists (`objects`) and must go once no background free
    /// reads them: the last pending scan of each is marked to free it when it ends (frees
    /// run in queue order, so no scan reads it after); the objects no pending scan reads are
    /// returned, for the caller to free now.
    pub(crate) fn retire_parts(&mut self, objects: impl IntoIterator<Item = u64>) -> Vec<u64> {
        let mut wanted: BTreeSet<u64> = objects.into_iter().collect();
        for (&seq, work) in self.free_queue.iter_mut().rev() {
            if wanted.is_empty() {
                break;
            }
            let first = work.scan_index as usize;
            for scan in work.scans.iter_mut().skip(first).rev() {
                if wanted.remove(&scan.object) {
                    scan.free_part = true;
                    self.dirty.insert(RecordKey::Free(seq));
                }
            }
        }
        wanted.into_iter().collect()
    }

    /// Every head's deadlist (`pool check` accounts for their parts).
    pub fn head_deadlists(&self) -> impl Iterator<Item = &Deadlist> {
        self.heads.values()
    }

    /// Deadlist parts (MOS objects) on every list of the table.
    pub fn deadlist_parts(&self) -> u64 {
        self.snapshots
            .values()
            .map(|snapshot| &snapshot.deadlist)
            .chain(self.heads.values())
            .map(|list| list.parts_len() as u64)
            .sum()
    }

    /// Deadlist parts that left their lists and wait for their last scan to free them.
    pub fn retiring_parts(&self) -> u64 {
        self.free_queue
            .values()
            .flat_map(|work| work.scans.iter().skip(work.scan_index as usize))
            .filter(|scan| scan.free_part)
            .count() as u64
    }
}

/// Reads ahead the deadlist blocks the next `PREFETCH_SCANS` scans of free `seq` (`work`)
/// will read first (`step` entries of each), once the scan being freed passes half of what
/// was read ahead; `prefetched` remembers how far that is.
fn prefetch_scans(
    mos: &cairn_object::ObjectSet,
    work: &FreeWork,
    seq: u64,
    prefetched: &mut (u64, usize),
    step: u64,
) {
    let index = work.scan_index as usize;
    if prefetched.0 != seq {
        *prefetched = (seq, index);
    }
    if index + PREFETCH_SCANS / 2 < prefetched.1 {
        return;
    }
    let from = prefetched.1.max(index);
    let to = (index + PREFETCH_SCANS).min(work.scans.len());
    for (offset, scan) in work.scans[from..to].iter().enumerate() {
        let first = if from + offset == index {
            work.next_entry
        } else {
            0
        };
        let end = scan.entries.min(first + step);
        mos.prefetch_blocks(
            scan.object,
            first / POINTERS_PER_BLOCK..end.div_ceil(POINTERS_PER_BLOCK),
        );
    }
    prefetched.1 = to;
}
