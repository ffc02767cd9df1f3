//! Raw block I/O for self-describing blocks: intent-log blocks carry their own checksum and
//! identity, so nothing above them holds a block pointer to verify against. The caller decides
//! whether bytes are valid (by decoding them); this layer only moves them to and from every
//! child of a top-level vdev, counts errors and faults leaves whose writes fail.

use crate::error::{PipelineError, outside_pool};
use crate::io::BlockIo;
use bytes::Bytes;
use cairn_device::DeviceError;
use cairn_device::queue::{IoClass, IoHandle, LeafQueue};
use cairn_format::Dva;
use cairn_format::label::VDEV_DATA_START;
use cairn_pool::vdev::Leaf;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Writes in flight to the children of one or more top-level vdevs.
#[must_use = "raw writes must be waited on"]
pub struct RawWrites {
    pending: Vec<(u32, Arc<Leaf>, IoHandle<()>)>,
    /// Writes already done in the caller's thread (`write_raw_durable`).
    done: Vec<(u32, Arc<Leaf>, Result<(), DeviceError>)>,
}

impl RawWrites {
    pub fn new() -> RawWrites {
        RawWrites {
            pending: Vec::new(),
            done: Vec::new(),
        }
    }

    /// Waits for every write. A leaf whose write fails is faulted; the whole fails only if some
    /// top-level vdev got no copy at all.
    pub fn wait(self) -> Result<(), PipelineError> {
        let mut written: BTreeSet<u32> = BTreeSet::new();
        let mut attempted: BTreeSet<u32> = BTreeSet::new();
        let mut last_error: Option<DeviceError> = None;
        let waited = self
            .pending
            .into_iter()
            .map(|(vdev, leaf, handle)| (vdev, leaf, handle.wait()));
        for (vdev, leaf, outcome) in self.done.into_iter().chain(waited) {
            attempted.insert(vdev);
            match outcome {
                // A side being resilvered is not a copy reads may use: it does not count.
                Ok(()) if leaf.is_resilvering() => {}
                Ok(()) => {
                    written.insert(vdev);
                }
                Err(err) => {
                    leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                    leaf.fault();
                    last_error = Some(err);
                }
            }
        }
        match attempted.difference(&written).next() {
            Some(vdev) => Err(PipelineError::WriteFailed {
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
    /// allocated size.
    pub fn write_raw_queued_durable(
        &self,
        dva: &Dva,
        data: Bytes,
        class: IoClass,
        writes: &mut RawWrites,
    ) -> Result<(), PipelineError> {
        self.write_raw_with(dva, data.len(), |vdev, leaf, queue| {
            let handle = queue.write_durable(class, VDEV_DATA_START + dva.offset, data.clone());
            writes.pending.push((vdev, leaf, handle));
        })
    }

    /// Writes the concatenation of `bufs` to every usable child of `dva`'s top-level vdev as
    /// one FUA write each (see `LeafQueue::write_direct`): the bytes are on stable media once
    /// `writes` has been waited for, with no flush. The first child is written in the caller's
    /// thread (no thread hop for the usual single log device); the other children of a mirror
    /// get a queued copy, written meanwhile by their queues' workers. For intent-log blocks,
    /// where a commit waits for exactly these bytes and nothing else.
    pub fn write_raw_durable(
        &self,
        dva: &Dva,
        bufs: &[&[u8]],
        writes: &mut RawWrites,
    ) -> Result<(), PipelineError> {
        let len: usize = bufs.iter().map(|buf| buf.len()).sum();
        let mut children = Vec::new();
        self.write_raw_with(dva, len, |vdev, leaf, queue| {
            children.push((vdev, leaf, queue.clone()));
        })?;
        let offset = VDEV_DATA_START + dva.offset;
        let mut children = children.into_iter();
        let (vdev, leaf, queue) = children.next().expect("write_raw_with found a child");
        if children.len() > 0 {
            let copy = Bytes::from(bufs.concat());
            for (vdev, leaf, queue) in children {
                let handle = queue.write_durable(IoClass::Log, offset, copy.clone());
                writes.pending.push((vdev, leaf, handle));
            }
        }
        let result = queue.write_direct(offset, bufs, true);
        writes.done.push((vdev, leaf, result));
        Ok(())
    }

    /// Calls `write(vdev, leaf, queue)` for every usable child of `dva`'s top-level vdev and
    /// counts the raw write; fails if there is none.
    fn write_raw_with(
        &self,
        dva: &Dva,
        len: usize,
        mut write: impl FnMut(u32, Arc<Leaf>, &Arc<LeafQueue>),
    ) -> Result<(), PipelineError> {
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
        let mut issued = 0;
        for leaf in top.leaves.iter().filter(|leaf| leaf.is_usable()) {
            let Some(queue) = leaf.queue() else { continue };
            write(dva.vdev, leaf.clone(), &queue);
            issued += 1;
        }
        if issued == 0 {
            return Err(PipelineError::WriteFailed {
                reason: format!("vdev {} has no usable device", top.kind_name()),
                source: None,
            });
        }
        self.stats.raw_writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .raw_bytes_written
            .fetch_add(len as u64, Ordering::Relaxed);
        Ok(())
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
}
