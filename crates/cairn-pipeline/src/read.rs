//! Reads: `read_block` and its variants (try the copies until one verifies, heal the bad ones),
//! reads queued now and finished later (`queue_read`, `finish_read`, `QueuedRead`), and the
//! guard that counts a read in flight (`ReadGuard`).
//!
//! A copy on a raidz vdev is read as its stripe (`raidz`: data columns, then a rebuild from
//! parity when they do not verify).
//!
//! Invariants: a read returns bytes whose stored form verifies against the pointer, or an
//! error, never unverified bytes; every read is counted in flight until it ends, so the space
//! of the block it was given is not reused meanwhile. This file uses `copies`, `raidz`, `io`
//! and `error` below it.

use crate::error::{CopyError, PipelineError, decompress_error, outside_pool, unrecoverable};
use crate::io::BlockIo;
use crate::raidz::{QueuedStripe, stripe_of};
use bytes::Bytes;
use cairn_device::ReadBuf;
use cairn_device::queue::{IoClass, IoHandle};
use cairn_format::compress;
use cairn_format::label::VDEV_DATA_START;
use cairn_format::{BlockPointer, Compression, Dva};
use cairn_pool::vdev::Leaf;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::Ordering;

impl BlockIo {
    /// Counts a read in flight under the last synced txg until the guard drops. `io` is how
    /// the guard reaches this `BlockIo`: a borrow for a read that ends in the caller's frame,
    /// an `Arc` for one queued now and finished later (`QueuedRead`).
    fn read_guard<D: Deref<Target = BlockIo>>(io: D) -> ReadGuard<D> {
        let txg = io.synced_txg.load(Ordering::SeqCst);
        *io.reads_in_flight.lock().entry(txg).or_default() += 1;
        ReadGuard { io, txg }
    }

    /// Reads and verifies one block, healing bad copies from a good one.
    pub fn read_block(&self, bp: &BlockPointer, class: IoClass) -> Result<Bytes, PipelineError> {
        self.read_block_buf(bp, class).map(Bytes::from_owner)
    }

    /// `read_block`, returning the very buffer the device filled (unless the block is
    /// compressed): a cache keeps it as it is.
    pub fn read_block_buf(
        &self,
        bp: &BlockPointer,
        class: IoClass,
    ) -> Result<ReadBuf, PipelineError> {
        let stored = self.read_block_stored(bp, class)?;
        logical(bp, stored)
    }

    /// Reads and verifies one block as it is stored (`psize` bytes, compressed if it is),
    /// healing bad copies from a good one: what a copy of the block elsewhere must hold
    /// (resilver).
    pub fn read_block_stored(
        &self,
        bp: &BlockPointer,
        class: IoClass,
    ) -> Result<ReadBuf, PipelineError> {
        assert!(!bp.is_hole(), "read of a hole");
        let _in_flight = Self::read_guard(self);
        // A bad copy on one leaf, or (no leaf) a raidz copy no combination rebuilt.
        let mut bad: Vec<(Option<Arc<Leaf>>, Dva)> = Vec::new();
        let mut last_reason = CopyError::NoCopy;
        let mut good: Option<ReadBuf> = None;
        let tree = self.tree();
        'copies: for dva in bp.copies() {
            let Some(top) = tree.top_for_dva(dva) else {
                last_reason = outside_pool(dva);
                continue;
            };
            if top.raidz().is_some() {
                match self.read_raidz_copy(top, dva, bp, class, false) {
                    Ok(data) => {
                        good = Some(data);
                        break 'copies;
                    }
                    Err(reason) => {
                        last_reason = reason;
                        bad.push((None, *dva));
                        continue;
                    }
                }
            }
            for leaf in top.read_order_for(bp.birth_txg) {
                match self.read_copy(&leaf, dva, bp, class) {
                    Ok(data) => {
                        good = Some(data);
                        break 'copies;
                    }
                    Err(reason) => {
                        last_reason = reason;
                        bad.push((Some(leaf), *dva));
                    }
                }
            }
        }
        let Some(data) = good else {
            self.stats.unrecoverable.fetch_add(1, Ordering::Relaxed);
            return Err(unrecoverable(bp, last_reason));
        };
        if !bad.is_empty() {
            let verified = Bytes::from_owner(data.clone());
            for (leaf, dva) in bad {
                match leaf {
                    Some(leaf) => {
                        self.repair(&leaf, &dva, &verified);
                    }
                    None => {
                        self.rewrite_raidz(&tree, &dva, &verified);
                    }
                }
            }
        }
        Ok(data)
    }

    /// Queues a read of `bp`'s first readable copy and returns without waiting, for a caller
    /// that has many blocks to read (read-ahead): queued together, neighbours are merged into
    /// one device call and the device has them all in flight. `None` when no copy can be
    /// queued; the caller then reads with `read_block_buf`. `finish_read` completes it.
    pub fn queue_read(self: &Arc<Self>, bp: &BlockPointer, class: IoClass) -> Option<QueuedRead> {
        assert!(!bp.is_hole(), "read of a hole");
        let dva = *bp.copies().first()?;
        let tree = self.tree();
        let top = tree.top_for_dva(&dva)?;
        if top.raidz().is_some() {
            let stripe = self.queue_raidz(top, &dva, bp, class)?;
            return Some(QueuedRead {
                _in_flight: Self::read_guard(self.clone()),
                bp: *bp,
                class,
                target: Queued::Stripe(stripe),
            });
        }
        let leaf = top.read_order_for(bp.birth_txg).into_iter().next()?;
        let queue = leaf.queue()?;
        let in_flight = Self::read_guard(self.clone());
        let handle = queue.read(class, VDEV_DATA_START + dva.offset, bp.psize as usize);
        Some(QueuedRead {
            _in_flight: in_flight,
            bp: *bp,
            class,
            target: Queued::Copy { leaf, dva, handle },
        })
    }

    /// Waits for a read `queue_read` queued and verifies it; a failed or damaged copy is read
    /// again the full way (`read_block_buf`: every copy, healing the bad ones).
    pub fn finish_read(&self, queued: QueuedRead) -> Result<ReadBuf, PipelineError> {
        let QueuedRead {
            _in_flight,
            bp,
            class,
            target,
        } = queued;
        let verified = match target {
            Queued::Copy { leaf, dva, handle } => {
                let offset = VDEV_DATA_START + dva.offset;
                self.verify_copy(&leaf, offset, &bp, handle.wait()).ok()
            }
            Queued::Stripe(stripe) => self.finish_raidz(stripe, &bp),
        };
        match verified {
            Some(data) => logical(&bp, data),
            // The queued read stays counted in flight until the full read is done.
            None => self.read_block_buf(&bp, class),
        }
    }

    /// Raises the priority of a read of `bp` queued as `from` (read-ahead) to a sync read: a
    /// demand reader is now waiting for it. Returns how many queued reads moved.
    pub fn promote_read(&self, bp: &BlockPointer, from: IoClass) -> usize {
        let tree = self.tree();
        let mut moved = 0;
        for dva in bp.copies() {
            let Some(top) = tree.top_for_dva(dva) else {
                continue;
            };
            if let Some(geometry) = top.raidz() {
                let Some(map) = stripe_of(&geometry, dva, u64::from(bp.psize)) else {
                    continue;
                };
                for column in map.columns() {
                    if let Some(queue) = top.leaves[column.child as usize].queue() {
                        let offset = VDEV_DATA_START + column.child_offset;
                        moved += queue.promote_reads(offset, from, IoClass::SyncRead);
                    }
                }
                continue;
            }
            for leaf in &top.leaves {
                if let Some(queue) = leaf.queue() {
                    moved +=
                        queue.promote_reads(VDEV_DATA_START + dva.offset, from, IoClass::SyncRead);
                }
            }
        }
        moved
    }
}

/// A verified physical block as its logical bytes (the same buffer when not compressed).
fn logical(bp: &BlockPointer, physical: ReadBuf) -> Result<ReadBuf, PipelineError> {
    if bp.compression == Compression::Off {
        return Ok(physical);
    }
    compress::decompress(&physical, bp.compression, bp.lsize as usize)
        .map(ReadBuf::from)
        .map_err(|cause| decompress_error(bp, cause))
}

/// Counts one read in flight (see `BlockIo::reads_in_flight`).
struct ReadGuard<D: Deref<Target = BlockIo>> {
    io: D,
    txg: u64,
}

impl<D: Deref<Target = BlockIo>> Drop for ReadGuard<D> {
    fn drop(&mut self) {
        let mut reads = self.io.reads_in_flight.lock();
        if let Some(count) = reads.get_mut(&self.txg) {
            *count -= 1;
            if *count == 0 {
                reads.remove(&self.txg);
            }
        }
    }
}

/// A read `BlockIo::queue_read` queued, counted in flight (its block's space is not reused)
/// until `BlockIo::finish_read` is done with it or it is dropped (a read dropped unwaited still
/// runs in the queue, harmlessly: nothing uses its bytes).
pub struct QueuedRead {
    _in_flight: ReadGuard<Arc<BlockIo>>,
    bp: BlockPointer,
    class: IoClass,
    target: Queued,
}

/// What a queued read waits for: one copy on one leaf, or the data columns of a raidz copy.
enum Queued {
    Copy {
        leaf: Arc<Leaf>,
        dva: Dva,
        handle: IoHandle<ReadBuf>,
    },
    Stripe(QueuedStripe),
}
