//! RAID-Z I/O: a block on a raidz top-level vdev is one stripe of columns, one per child
//! (`cairn_format::raidz`). This file turns a block into its column writes
//! (`raidz_column_writes`), and reads a block back (`read_raidz`): the data columns first,
//! verified by the caller's test (a block pointer's checksum, or an intent-log block's own);
//! on a mismatch or a missing child, every column, then the combinations of up to `parity`
//! columns assumed bad (the missing ones always among them) until the test passes.
//!
//! Once a block verifies after a rebuild (or in a scrub, always) its columns are recomputed
//! from the data and compared with what each child returned: a CKSUM error is charged to
//! exactly the children whose column differed, and those columns, like those a child failed
//! to read, are rewritten (self-heal, counted in the child's repaired bytes). Nothing is
//! rewritten on a read-only pool, nor on a child that is not usable.
//!
//! Invariants: the bytes returned passed the caller's test; a column is read from a child
//! only if that child may be read for the block (`Leaf::can_read`); no guess past `parity`
//! unknown columns. This file uses `io` and `error` below it; `read`, `copies`, `write` and `raw` use it.

use crate::error::CopyError;
use crate::io::BlockIo;
use bytes::Bytes;
use cairn_device::ReadBuf;
use cairn_device::queue::{IoClass, IoHandle};
use cairn_format::label::VDEV_DATA_START;
use cairn_format::raidz::{RaidzGeometry, RaidzMap};
use cairn_format::{BlockPointer, Dva};
use cairn_pool::vdev::{Leaf, TopVdev, VdevTree};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The stripe of a block of `psize` bytes at `dva` on a vdev of `geometry`, if it fits the
/// copy's allocation (a sector-aligned offset, `asize` at least the stripe's): a pointer read
/// from disk may say anything, and `RaidzGeometry::map` takes only what the allocator hands out.
pub(crate) fn stripe_of(geometry: &RaidzGeometry, dva: &Dva, psize: u64) -> Option<RaidzMap> {
    let sector_bytes = 1u64 << geometry.ashift();
    let fits = psize > 0
        && dva.offset.is_multiple_of(sector_bytes)
        && geometry.asize(psize) <= u64::from(dva.asize);
    fits.then(|| geometry.map(dva.offset, psize))
}

/// The writes of one block's stripe: `(child, leaf byte offset, column bytes)` per column;
/// none if the block does not fit the allocation (`stripe_of`).
pub(crate) fn raidz_column_writes(
    top: &TopVdev,
    geometry: &RaidzGeometry,
    dva: &Dva,
    data: &[u8],
) -> Vec<(Arc<Leaf>, u64, Bytes)> {
    let Some(map) = stripe_of(geometry, dva, data.len() as u64) else {
        return Vec::new();
    };
    let buffers = map.encode(data);
    map.columns()
        .iter()
        .zip(buffers)
        .map(|(column, mut buffer)| {
            buffer.truncate(column.size as usize);
            (
                top.leaves[column.child as usize].clone(),
                VDEV_DATA_START + column.child_offset,
                Bytes::from(buffer),
            )
        })
        .collect()
}

/// The data-column reads of one raidz block, queued and not yet waited for (read-ahead).
pub(crate) struct QueuedStripe {
    map: RaidzMap,
    reads: Vec<(Arc<Leaf>, IoHandle<ReadBuf>)>,
}

/// What reading one raidz block found.
#[derive(Default)]
pub(crate) struct RaidzRead {
    /// The block's bytes, verified by the caller's test; `None` if no combination passed.
    pub(crate) data: Option<ReadBuf>,
    /// Columns read from children (scrub counts them as its copies checked).
    pub(crate) columns_read: u64,
    pub(crate) bytes_read: u64,
    /// Columns found wrong (a CKSUM error on their child) or unreadable on a usable child.
    pub(crate) bad_columns: u64,
    /// Columns rewritten with their correct bytes, and their bytes.
    pub(crate) repaired_columns: u64,
    pub(crate) repaired_bytes: u64,
    /// Why the block could not be rebuilt, for people.
    pub(crate) failure: Option<String>,
}

/// How a raidz read goes.
#[derive(Clone, Copy)]
pub(crate) struct RaidzReadOptions {
    pub(crate) class: IoClass,
    /// The block's birth txg, to skip children that lack it (`None`: unknown, self-checked
    /// blocks; every readable child is used).
    pub(crate) birth_txg: Option<u64>,
    /// Read and check every column, parity included, even when the data verifies (scrub).
    pub(crate) every_column: bool,
    /// Rewrite the columns found wrong (false: count only, a check that changes nothing).
    pub(crate) repair: bool,
}

/// The columns of one stripe as read so far.
struct Stripe {
    map: RaidzMap,
    /// Per column: what the child returned (`None`: not read yet, or unreadable).
    reads: Vec<Option<ReadBuf>>,
    /// Per column: the child cannot be read for this block, or failed to read it.
    missing: Vec<bool>,
    /// Per column: the child failed a read (counted; rewritten once the block is known).
    read_failed: Vec<bool>,
}

impl BlockIo {
    /// Reads copy `dva` of `bp` on raidz vdev `top` and verifies it against the pointer's
    /// checksum, healing bad columns (see the module doc).
    pub(crate) fn read_raidz_copy(
        &self,
        top: &TopVdev,
        dva: &Dva,
        bp: &BlockPointer,
        class: IoClass,
        every_column: bool,
    ) -> Result<ReadBuf, CopyError> {
        let options = RaidzReadOptions {
            class,
            birth_txg: Some(bp.birth_txg),
            every_column,
            repair: true,
        };
        let read = self.read_raidz(top, dva, u64::from(bp.psize), options, &mut |data| {
            bp.checksum_algorithm.compute(data) == bp.checksum
        });
        self.count_raidz_read(&read);
        read.data.ok_or_else(|| CopyError::Raidz {
            vdev: top.kind_name(),
            reason: read.failure.unwrap_or_default(),
        })
    }

    /// Counts a raidz read in the pipeline's statistics.
    pub(crate) fn count_raidz_read(&self, read: &RaidzRead) {
        if read.data.is_some() {
            self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        }
        self.stats
            .bytes_read
            .fetch_add(read.bytes_read, Ordering::Relaxed);
    }

    /// Writes the whole stripe of `data` (a verified block) at raidz copy `dva`, to every
    /// usable child: a copy no combination of columns rebuilt, healed from another copy.
    /// Returns whether every column reached its child.
    pub(crate) fn rewrite_raidz(&self, tree: &VdevTree, dva: &Dva, data: &[u8]) -> bool {
        if self.read_only.load(Ordering::SeqCst) {
            return false;
        }
        let Some(top) = tree.top_for_dva(dva) else {
            return false;
        };
        let Some(geometry) = top.raidz() else {
            return false;
        };
        let writes = raidz_column_writes(top, &geometry, dva, data);
        let columns = writes.len();
        let handles: Vec<_> = writes
            .into_iter()
            .filter_map(|(leaf, offset, bytes)| {
                let size = bytes.len() as u64;
                let queue = leaf.queue()?;
                Some((leaf, size, queue.write(IoClass::SyncWrite, offset, bytes)))
            })
            .collect();
        let mut complete = columns > 0 && handles.len() == columns;
        for (leaf, size, handle) in handles {
            match handle.wait() {
                Ok(()) => {
                    leaf.errors
                        .repaired_bytes
                        .fetch_add(size, Ordering::Relaxed);
                }
                Err(_) => {
                    leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                    complete = false;
                }
            }
        }
        self.stats.repairs.fetch_add(1, Ordering::Relaxed);
        complete
    }

    /// Queues the reads of the data columns of copy `dva` of `bp` on raidz vdev `top`; `None`
    /// if a child holding one cannot be read for the block (the caller reads the full way).
    pub(crate) fn queue_raidz(
        &self,
        top: &TopVdev,
        dva: &Dva,
        bp: &BlockPointer,
        class: IoClass,
    ) -> Option<QueuedStripe> {
        let map = stripe_of(&top.raidz()?, dva, u64::from(bp.psize))?;
        let mut targets = Vec::new();
        for column in &map.columns()[map.parity()..] {
            let leaf = &top.leaves[column.child as usize];
            if !leaf.can_read(bp.birth_txg) {
                return None;
            }
            let offset = VDEV_DATA_START + column.child_offset;
            targets.push((leaf.clone(), leaf.queue()?, offset, column.size as usize));
        }
        let reads = targets
            .into_iter()
            .map(|(leaf, queue, offset, size)| (leaf, queue.read(class, offset, size)))
            .collect();
        Some(QueuedStripe { map, reads })
    }

    /// Waits for a stripe `queue_raidz` queued: the block if every column was read and it
    /// verifies against `bp`, else `None` (the caller reads the full way, which rebuilds,
    /// charges and heals).
    pub(crate) fn finish_raidz(&self, queued: QueuedStripe, bp: &BlockPointer) -> Option<ReadBuf> {
        let count = queued.map.columns().len();
        let parity = queued.map.parity();
        let mut stripe = Stripe {
            reads: vec![None; count],
            missing: vec![false; count],
            read_failed: vec![false; count],
            map: queued.map,
        };
        let mut bytes_read = 0;
        for (index, (leaf, handle)) in (parity..).zip(queued.reads) {
            match handle.wait() {
                Ok(bytes) => {
                    bytes_read += bytes.len() as u64;
                    stripe.reads[index] = Some(bytes);
                }
                Err(_) => {
                    leaf.errors.read.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.stats
            .bytes_read
            .fetch_add(bytes_read, Ordering::Relaxed);
        let data = stripe.gather_direct()?;
        if bp.checksum_algorithm.compute(&data) != bp.checksum {
            return None;
        }
        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        Some(data)
    }

    /// Reads the block of `psize` bytes at `dva` on raidz vdev `top`, accepting the first
    /// bytes `verify` passes (see the module doc).
    pub(crate) fn read_raidz(
        &self,
        top: &TopVdev,
        dva: &Dva,
        psize: u64,
        options: RaidzReadOptions,
        verify: &mut dyn FnMut(&[u8]) -> bool,
    ) -> RaidzRead {
        let mut outcome = RaidzRead::default();
        let Some(geometry) = top.raidz() else {
            outcome.failure = Some(format!("{} has no raidz layout", top.kind_name()));
            return outcome;
        };
        let Some(map) = stripe_of(&geometry, dva, psize) else {
            outcome.failure = Some(format!(
                "a block of {psize} bytes does not fit its allocation at {:#x} (+{:#x})",
                dva.offset, dva.asize
            ));
            return outcome;
        };
        let count = map.columns().len();
        let mut stripe = Stripe {
            missing: map
                .columns()
                .iter()
                .map(|column| {
                    let leaf = &top.leaves[column.child as usize];
                    match options.birth_txg {
                        Some(txg) => !leaf.can_read(txg),
                        None => !leaf.is_readable(),
                    }
                })
                .collect(),
            map,
            reads: vec![None; count],
            read_failed: vec![false; count],
        };
        let parity = stripe.map.parity();
        if !options.every_column && !stripe.missing[parity..].iter().any(|&gone| gone) {
            self.read_columns(top, &mut stripe, parity..count, options.class, &mut outcome);
            if let Some(data) = stripe.gather_direct()
                && verify(&data)
            {
                outcome.data = Some(data);
                return outcome;
            }
        }
        self.read_columns(top, &mut stripe, 0..count, options.class, &mut outcome);
        let Some(data) = stripe.solve(verify) else {
            let unknown = stripe.missing.iter().filter(|&&gone| gone).count();
            outcome.failure = Some(format!(
                "no combination of up to {parity} bad columns of {count} verifies \
                 ({unknown} unreadable)"
            ));
            return outcome;
        };
        self.settle_columns(top, &stripe, &data, options.repair, &mut outcome);
        outcome.data = Some(data);
        outcome
    }

    /// Reads the columns of `range` not read yet from the children that may be read, all at
    /// once; a child that fails is counted and its column marked missing.
    fn read_columns(
        &self,
        top: &TopVdev,
        stripe: &mut Stripe,
        range: std::ops::Range<usize>,
        class: IoClass,
        outcome: &mut RaidzRead,
    ) {
        let mut handles: Vec<(usize, Arc<Leaf>, IoHandle<ReadBuf>)> = Vec::new();
        for index in range {
            if stripe.missing[index] || stripe.reads[index].is_some() {
                continue;
            }
            let column = stripe.map.columns()[index];
            let leaf = top.leaves[column.child as usize].clone();
            let Some(queue) = leaf.queue() else {
                stripe.missing[index] = true;
                continue;
            };
            let offset = VDEV_DATA_START + column.child_offset;
            handles.push((index, leaf, queue.read(class, offset, column.size as usize)));
        }
        for (index, leaf, handle) in handles {
            match handle.wait() {
                Ok(bytes) => {
                    outcome.columns_read += 1;
                    outcome.bytes_read += bytes.len() as u64;
                    stripe.reads[index] = Some(bytes);
                }
                Err(_) => {
                    leaf.errors.read.fetch_add(1, Ordering::Relaxed);
                    stripe.missing[index] = true;
                    stripe.read_failed[index] = true;
                }
            }
        }
    }

    /// Compares every column read with the one recomputed from `data`: a CKSUM error for each
    /// that differs; rewrites those and the ones a usable child failed to read (if `repair`).
    fn settle_columns(
        &self,
        top: &TopVdev,
        stripe: &Stripe,
        data: &[u8],
        repair: bool,
        outcome: &mut RaidzRead,
    ) {
        let expected = stripe.map.encode(data);
        let repair = repair && !self.read_only.load(Ordering::SeqCst);
        for (index, column) in stripe.map.columns().iter().enumerate() {
            let size = column.size as usize;
            let right = &expected[index][..size];
            let wrong = match &stripe.reads[index] {
                Some(read) => read[..] != *right,
                None => stripe.read_failed[index],
            };
            if !wrong {
                continue;
            }
            let leaf = &top.leaves[column.child as usize];
            if stripe.reads[index].is_some() {
                leaf.errors.checksum.fetch_add(1, Ordering::Relaxed);
                self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
            }
            outcome.bad_columns += 1;
            if !repair {
                continue;
            }
            let Some(queue) = leaf.queue() else { continue };
            let offset = VDEV_DATA_START + column.child_offset;
            let bytes = Bytes::copy_from_slice(right);
            match queue.write(IoClass::SyncWrite, offset, bytes).wait() {
                Ok(()) => {
                    leaf.errors
                        .repaired_bytes
                        .fetch_add(size as u64, Ordering::Relaxed);
                    self.stats.repairs.fetch_add(1, Ordering::Relaxed);
                    outcome.repaired_columns += 1;
                    outcome.repaired_bytes += size as u64;
                }
                Err(_) => {
                    leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }
}

impl Stripe {
    /// The block from its data columns as read, if every one was: the column's own buffer
    /// when there is only one (no copy), else the columns copied into one buffer.
    fn gather_direct(&self) -> Option<ReadBuf> {
        let parity = self.map.parity();
        let data_columns = &self.reads[parity..];
        let psize = self.map.data_range(data_columns.len() - 1).end;
        if let [Some(only)] = data_columns
            && only.len() == psize
        {
            return Some(only.clone());
        }
        let mut out = vec![0u8; psize];
        for (index, read) in data_columns.iter().enumerate() {
            let read = read.as_ref()?;
            let range = self.map.data_range(index);
            let size = range.len();
            out[range].copy_from_slice(read.get(..size)?);
        }
        Some(ReadBuf::from(out))
    }

    /// Tries the combinations of columns assumed bad, fewest first, the missing ones always
    /// among them, until the rebuilt block passes `verify`.
    fn solve(&self, verify: &mut dyn FnMut(&[u8]) -> bool) -> Option<ReadBuf> {
        let parity = self.map.parity();
        let known: Vec<usize> = (0..self.reads.len())
            .filter(|&index| self.missing[index])
            .collect();
        if known.len() > parity {
            return None;
        }
        let length = self.map.column_buffer_bytes();
        let buffers: Vec<Vec<u8>> = self
            .reads
            .iter()
            .map(|read| {
                let mut buffer = vec![0u8; length];
                if let Some(read) = read {
                    buffer[..read.len()].copy_from_slice(read);
                }
                buffer
            })
            .collect();
        let candidates: Vec<usize> = (0..self.reads.len())
            .filter(|&index| !self.missing[index])
            .collect();
        let psize = self.map.data_range(self.reads.len() - parity - 1).end;
        let mut out = vec![0u8; psize];
        // One working copy: a trial rebuilds only the columns it assumes bad, which are put
        // back afterwards (no copy of every column per trial, which wide vdevs would pay for
        // in every one of their many combinations).
        let mut trial = buffers.clone();
        for extra in 0..=(parity - known.len()) {
            let mut found = None;
            for_each_combination(candidates.len(), extra, &mut |chosen| {
                let mut assumed = known.clone();
                assumed.extend(chosen.iter().map(|&i| candidates[i]));
                let rebuilt =
                    assumed.is_empty() || self.map.reconstruct(&mut trial, &assumed).is_ok();
                let passed = rebuilt && self.map.gather(&trial, &mut out).is_ok() && verify(&out);
                for &index in &assumed {
                    trial[index].copy_from_slice(&buffers[index]);
                }
                if passed {
                    found = Some(ReadBuf::from(out.clone()));
                }
                passed
            });
            if found.is_some() {
                return found;
            }
        }
        None
    }
}

/// Calls `visit` with every `k`-element subset of `0..n` (ascending indexes) until it returns
/// true; returns whether it did.
fn for_each_combination(n: usize, k: usize, visit: &mut dyn FnMut(&[usize]) -> bool) -> bool {
    if k > n {
        return false;
    }
    let mut chosen: Vec<usize> = (0..k).collect();
    loop {
        if visit(&chosen) {
            return true;
        }
        // The rightmost index that can still move right, moved; those after it follow it.
        let Some(position) = (0..k).rev().find(|&i| chosen[i] < n - k + i) else {
            return false;
        };
        chosen[position] += 1;
        for i in position + 1..k {
            chosen[i] = chosen[i - 1] + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::for_each_combination;

    #[test]
    fn combinations_are_every_subset_once() {
        let mut seen = Vec::new();
        for_each_combination(4, 2, &mut |chosen| {
            seen.push(chosen.to_vec());
            false
        });
        assert_eq!(
            seen,
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![0, 3],
                vec![1, 2],
                vec![1, 3],
                vec![2, 3]
            ]
        );
        let mut empty = 0;
        for_each_combination(3, 0, &mut |chosen| {
            assert!(chosen.is_empty());
            empty += 1;
            false
        });
        assert_eq!(empty, 1);
        assert!(!for_each_combination(2, 3, &mut |_| true));
    }
}
