//! Raw block I/O for self-describing blocks: intent-log blocks carry their own checksum and
//! identity, so nothing above them holds a block pointer to verify against. The caller decides
//! whether bytes are valid (by decoding them); this layer only moves them to and from every
//! child of a top-level vdev, counts errors and faults leaves whose writes fail.
//!
//! On a raidz vdev a raw block of `len` bytes is the stripe `map(offset, len)`: written as its
//! columns, read back with the same length (`raw_capacity` gives the length a block padded
//! to its whole allocation has) and rebuilt from parity until the caller accepts it.
//!
//! This file uses `raidz`, `io` and `error` below it.

use crate::error::{PipelineError, outside_pool};
use crate::io::BlockIo;
use crate::raidz::{RaidzReadOptions, raidz_column_writes, stripe_of};
use bytes::Bytes;
use cairn_device::DeviceError;
use cairn_device::queue::{IoClass, IoHandle, LeafQueue};
use cairn_format::Dva;
use cairn_format::label::VDEV_DATA_START;
use cairn_pool::vdev::{Leaf, TopVdev};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Writes in flight to the children of one or more top-level vdevs.
#[must_use = "raw writes must be waited on"]
pub struct RawWrites {
    /// One per raw write: its vdev, and how many of its leaf writes must land (one copy of a
    /// mirror; all but `parity` columns of a raidz stripe).
    groups: Vec<(u32, usize)>,
    /// Leaf writes in flight, by group index.
    pending: Vec<(usize, Arc<Leaf>, IoHandle<()>)>,
    /// Writes already done in the caller's thread (`write_raw_durable`).
    done: Vec<(usize, Arc<Leaf>, Result<(), DeviceError>)>,
}

impl RawWrites {
    pub fn new() -> RawWrites {
        RawWrites {
            groups: Vec::new(),
            pending: Vec::new(),
            done: Vec::new(),
        }
    }

    /// Waits for every write. A leaf whose write fails is faulted; the whole fails only if some
    /// raw write did not land where a read can find it (no copy on a mirror, more missing
    /// columns than parity on a raidz vdev).
    pub fn wait(self) -> Result<(), PipelineError> {
        let mut written = vec![0usize; self.groups.len()];
        let mut last_error: Option<DeviceError> = None;
        let waited = self
            .pending
            .into_iter()
            .map(|(group, leaf, handle)| (group, leaf, handle.wait()));
        for (group, leaf, outcome) in self.done.into_iter().chain(waited) {
            match outcome {
                // A side being resilvered is not a copy reads may use: it does not count.
                Ok(()) if leaf.is_resilvering() => {}
                Ok(()) => written[group] += 1,
                Err(err) => {
                    leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                    leaf.fault();
                    last_error = Some(err);
                }
            }
        }
        let short = self
            .groups
            .iter()
            .zip(&written)
            .find(|((_, needed), written)| *written < needed);
        match short {
            Some(((vdev, _), _)) => Err(PipelineError::WriteFailed {
                reason: format!("vdev {vdev} got no copy"),
                source: last_error.map(Box::new),
            }),
            None => Ok(()),
        }
    }
}

impl Default for RawWrites {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockIo {
    /// Queues `data` for every usable child of `dva`'s top-level vdev as FUA writes (durable
    /// once complete, no flush needed), adding them to `writes`. `data` must fit in the copy's
    /// allocated size; on a raidz vdev it is written as the stripe of exactly `data.len()`
    /// bytes (what `read_raw` of that length reads back).
    pub fn write_raw_queued_durable(
        &self,
        dva: &Dva,
        data: Bytes,
        class: IoClass,
        writes: &mut RawWrites,
    ) -> Result<(), PipelineError> {
        self.write_raw_with(dva, data, writes, |leaf, queue, offset, data| {
            (leaf, queue.write_durable(class, offset, data))
        })
    }

    /// Writes the concatenation of `bufs` to every usable child of `dva`'s top-level vdev as
    /// one FUA write each (see `LeafQueue::write_direct`): the bytes are on stable media once
    /// `writes` has been waited for, with no flush. The first child is written in the caller's
    /// thread (no thread hop for the usual single log device); the other children of a mirror
    /// get a queued copy, written meanwhile by their queues' workers. For intent-log blocks,
    /// where a commit waits for exactly these bytes and nothing else. On a raidz vdev every
    /// column is queued (as `write_raw_queued_durable`).
    pub fn write_raw_durable(
        &self,
        dva: &Dva,
        bufs: &[&[u8]],
        writes: &mut RawWrites,
    ) -> Result<(), PipelineError> {
        let raidz = self
            .tree()
            .top_for_dva(dva)
            .is_some_and(|top| top.raidz().is_some());
        if raidz {
            let data = Bytes::from(bufs.concat());
            return self.write_raw_queued_durable(dva, data, IoClass::Log, writes);
        }
        let len: usize = bufs.iter().map(|buf| buf.len()).sum();
        let mut children = Vec::new();
        let group = self.raw_group(dva, len, writes, |top| {
            for leaf in top.leaves.iter().filter(|leaf| leaf.is_usable()) {
                if let Some(queue) = leaf.queue() {
                    children.push((leaf.clone(), queue));
                }
            }
            children.len()
        })?;
        let offset = VDEV_DATA_START + dva.offset;
        let mut children = children.into_iter();
        let (leaf, queue) = children.next().expect("raw_group found a child");
        if children.len() > 0 {
            let copy = Bytes::from(bufs.concat());
            for (leaf, queue) in children {
                let handle = queue.write_durable(IoClass::Log, offset, copy.clone());
                writes.pending.push((group, leaf, handle));
            }
        }
        let result = queue.write_direct(offset, bufs, true);
        writes.done.push((group, leaf, result));
        Ok(())
    }

    /// Issues `data` at `dva` with `issue(leaf, queue, leaf offset, bytes)`: the whole of it to
    /// every usable child of a mirror or single device, its columns to the usable children of
    /// a raidz vdev.
    fn write_raw_with(
        &self,
        dva: &Dva,
        data: Bytes,
        writes: &mut RawWrites,
        mut issue: impl FnMut(Arc<Leaf>, &Arc<LeafQueue>, u64, Bytes) -> (Arc<Leaf>, IoHandle<()>),
    ) -> Result<(), PipelineError> {
        let mut handles = Vec::new();
        let group = self.raw_group(dva, data.len(), writes, |top| {
            let pieces = match top.raidz() {
                Some(geometry) => raidz_column_writes(top, &geometry, dva, &data),
                None => top
                    .leaves
                    .iter()
                    .map(|leaf| (leaf.clone(), VDEV_DATA_START + dva.offset, data.clone()))
                    .collect(),
            };
            for (leaf, offset, bytes) in pieces {
                if !leaf.is_usable() {
                    continue;
                }
                let Some(queue) = leaf.queue() else { continue };
                handles.push(issue(leaf, &queue, offset, bytes));
            }
            handles.len()
        })?;
        writes.pending.extend(
            handles
                .into_iter()
                .map(|(leaf, handle)| (group, leaf, handle)),
        );
        Ok(())
    }

    /// Finds `dva`'s top-level vdev, lets `issue` issue the writes (it returns how many), and
    /// records the raw write as a group of `writes`: fails if nothing could be issued, or (on
    /// raidz) too few columns to read the block back.
    fn raw_group(
        &self,
        dva: &Dva,
        len: usize,
        writes: &mut RawWrites,
        issue: impl FnOnce(&TopVdev) -> usize,
    ) -> Result<usize, PipelineError> {
        assert!(
            len as u64 <= u64::from(dva.asize),
            "raw write larger than its allocation"
        );
        let tree = self.tree();
        let top = tree
            .top_for_dva(dva)
            .ok_or_else(|| PipelineError::WriteFailed {
                reason: outside_pool(dva).to_string(),
                source: None,
            })?;
        let needed = match top.raidz() {
            Some(geometry) => {
                let map = stripe_of(&geometry, dva, len as u64).ok_or_else(|| {
                    PipelineError::WriteFailed {
                        reason: format!("{len} bytes do not fit the raidz allocation {dva:?}"),
                        source: None,
                    }
                })?;
                map.columns().len() - map.parity()
            }
            None => 1,
        };
        let issued = issue(top);
        let group = writes.groups.len();
        writes.groups.push((dva.vdev, needed));
        if issued < needed {
            return Err(PipelineError::WriteFailed {
                reason: format!("vdev {} has too few usable devices", top.kind_name()),
                source: None,
            });
        }
        self.stats.raw_writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .raw_bytes_written
            .fetch_add(len as u64, Ordering::Relaxed);
        Ok(group)
    }

    /// Bytes a raw block allocated as `dva` holds: its allocated size, or on a raidz vdev the
    /// largest block whose stripe fits it (a raw block there is written and read as a stripe
    /// of exactly this many bytes, its end padded).
    pub fn raw_capacity(&self, dva: &Dva) -> usize {
        match self.tree().top(dva.vdev).and_then(|top| top.raidz()) {
            Some(geometry) => geometry.max_psize(u64::from(dva.asize)) as usize,
            None => dva.asize as usize,
        }
    }

    /// Whether `dva` lies on a raidz vdev (its raw blocks are stripes of their own, never
    /// merged with a neighbour into one write).
    pub fn is_raidz(&self, dva: &Dva) -> bool {
        self.tree()
            .top(dva.vdev)
            .is_some_and(|top| top.raidz().is_some())
    }

    /// Reads `len` bytes at `dva` from each usable child of its top-level vdev, least busy first,
    /// handing each copy to `accept` until it returns `Some`. Read errors are counted on the
    /// leaf. Returns `None` if no copy was accepted.
    pub fn read_raw<T>(
        &self,
        dva: &Dva,
        len: usize,
        class: IoClass,
        mut accept: impl FnMut(&[u8]) -> Option<T>,
    ) -> Option<T> {
        let tree = self.tree();
        let top = tree.top_for_dva(dva)?;
        if top.raidz().is_some() {
            return self.read_raw_raidz(top, dva, len, class, accept);
        }
        for leaf in top.read_order() {
            let Some(queue) = leaf.queue() else { continue };
            match queue.read(class, VDEV_DATA_START + dva.offset, len).wait() {
                Ok(bytes) => {
                    self.stats.raw_reads.fetch_add(1, Ordering::Relaxed);
                    if let Some(value) = accept(&bytes) {
                        return Some(value);
                    }
                }
                Err(_) => {
                    leaf.errors.read.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        None
    }

    /// `read_raw` on a raidz vdev: the stripe of `len` bytes, rebuilt until `accept` takes it.
    fn read_raw_raidz<T>(
        &self,
        top: &TopVdev,
        dva: &Dva,
        len: usize,
        class: IoClass,
        mut accept: impl FnMut(&[u8]) -> Option<T>,
    ) -> Option<T> {
        if len == 0 || len as u64 > u64::from(dva.asize) {
            return None;
        }
        let options = RaidzReadOptions {
            class,
            birth_txg: None,
            every_column: false,
            repair: true,
        };
        let mut accepted = None;
        let read = self.read_raidz(top, dva, len as u64, options, &mut |bytes| {
            accepted = accept(bytes);
            accepted.is_some()
        });
        self.stats.raw_reads.fetch_add(1, Ordering::Relaxed);
        self.count_raidz_read(&read);
        accepted
    }
}
