//! Writes: `WriteBatch` (compress, checksum, allocate, stage per leaf, issue, and hand back the
//! pointer before the I/O completes), waiting for a batch (`wait_writes`, which faults the leaves
//! whose writes fail) and the writes kept when no device of a vdev took them (`FailedWrites`).
//!
//! A block on a raidz vdev is written as its stripe's columns, one to each child
//! (`raidz::raidz_column_writes`), staged with the other writes of that child.
//!
//! Invariants: a pointer handed out by `write` names space the allocator marked allocated in
//! the batch's txg and a checksum of exactly the bytes written; a write is lost (kept in
//! `FailedWrites`) only if its top-level vdev can no longer serve it (no child of a mirror
//! took it; more children of a raidz vdev than parity did not). This file uses `io`, `raidz`
//! and `error` below it.

use crate::error::PipelineError;
use crate::io::BlockIo;
use crate::raidz::raidz_column_writes;
use bytes::Bytes;
use cairn_device::DeviceError;
use cairn_device::queue::{IoClass, IoHandle};
use cairn_format::compress;
use cairn_format::label::VDEV_DATA_START;
use cairn_format::raidz::RaidzGeometry;
use cairn_format::{BlockPointer, ChecksumAlgorithm, Compression, Dva, ObjectType};
use cairn_pool::vdev::{Health, Leaf, TopVdev, VdevTree};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// What kind of block is being written, and how.
#[derive(Debug, Clone, Copy)]
pub struct WriteProps {
    pub object_type: ObjectType,
    pub level: u8,
    pub checksum: ChecksumAlgorithm,
    /// Copies wanted (1..=3); metadata asks for 2.
    pub copies: u8,
    /// Level-0 blocks under this pointer that are not holes (1 for a data block).
    pub fill: u64,
    pub class: IoClass,
    /// Compression to try (`Off` for none); the block is stored compressed only if it saves
    /// space (`compress`).
    pub compression: Compression,
}

impl BlockIo {
    pub fn batch(&self, txg: u64) -> WriteBatch<'_> {
        WriteBatch {
            io: self,
            txg,
            durable: false,
            pending: Vec::new(),
            unissued: Vec::new(),
            staged: BTreeMap::new(),
            blocks_written: 0,
            bytes_written: 0,
        }
    }

    /// A batch of FUA writes for the open txg `txg` (held by the caller): when `finish`
    /// returns Ok, every block it wrote is on stable media, with no flush. For data written in
    /// open context ahead of its txg (synchronous writes in place, whose pointers alone are
    /// logged).
    pub fn durable_batch(&self, txg: u64) -> WriteBatch<'_> {
        WriteBatch {
            durable: true,
            ..self.batch(txg)
        }
    }
}

/// Whether two allocations share a byte.
fn overlap(a: &Dva, b: &Dva) -> bool {
    a.vdev == b.vdev
        && a.offset < b.offset + u64::from(b.asize)
        && b.offset < a.offset + u64::from(a.asize)
}

fn block_psize(data: &Bytes) -> u32 {
    let len = data.len();
    assert!(
        len > 0 && len.is_multiple_of(cairn_format::BLOCK_SIZE_GRANULE as usize),
        "block of {len} bytes"
    );
    assert!(len <= cairn_format::BLOCK_SIZE_MAX as usize);
    len as u32
}

/// Bytes of writes staged per leaf before they are handed to its queue in one burst: one full
/// aggregate, so the queue can merge the whole burst into a single device write.
const STAGE_BYTES_MAX: u64 = 1 << 20;
/// Writes staged per leaf before a burst (the queue's buffer limit per aggregate).
const STAGE_WRITES_MAX: usize = 64;

struct Staged {
    leaf: Arc<Leaf>,
    writes: Vec<(u64, Bytes)>,
    bytes: u64,
}

/// One leaf write handed to its queue, with what is needed to issue it again.
struct PendingWrite {
    leaf: Arc<Leaf>,
    class: IoClass,
    offset: u64,
    data: Bytes,
    handle: IoHandle<()>,
}

/// Writes of a batch that reached no device of their top-level vdev (every child failed), kept
/// so they can be issued again once the devices are back (`pool clear` after a suspension).
/// Writes that failed on one side of a mirror whose other side took them are not kept: that
/// side is faulted and the vdev degraded.
pub struct FailedWrites {
    /// Which leaves failed, for people.
    pub reason: String,
    /// The first device error behind the failure (none if every child was faulted already).
    pub source: Option<Box<DeviceError>>,
    writes: Vec<(Arc<Leaf>, IoClass, u64, Bytes)>,
    durable: bool,
}

impl std::fmt::Debug for FailedWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailedWrites")
            .field("reason", &self.reason)
            .field("writes", &self.writes.len())
            .finish()
    }
}

impl FailedWrites {
    /// Issues every kept write again on its leaf and waits. A leaf that is still faulted, or
    /// fails again, is faulted; what still reaches no device of its vdev is returned.
    pub fn retry(self, io: &BlockIo) -> Result<(), FailedWrites> {
        // A leaf still faulted (not cleared) cannot take its writes: nothing is issued.
        if self.writes.iter().any(|(leaf, ..)| leaf.queue().is_none()) {
            return Err(self);
        }
        let mut pending = Vec::with_capacity(self.writes.len());
        let mut not_issued = Vec::new();
        for (leaf, class, offset, data) in self.writes {
            // Faulted again meanwhile (another write failed on it).
            let Some(queue) = leaf.queue() else {
                not_issued.push((leaf, class, offset, data));
                continue;
            };
            let handle = match self.durable {
                true => queue.write_durable(class, offset, data.clone()),
                false => queue.write(class, offset, data.clone()),
            };
            pending.push(PendingWrite {
                leaf,
                class,
                offset,
                data,
                handle,
            });
        }
        match (
            wait_writes(&io.tree(), pending, self.durable),
            not_issued.is_empty(),
        ) {
            (Ok(()), true) => Ok(()),
            (Ok(()), false) => Err(FailedWrites {
                reason: self.reason,
                source: self.source,
                writes: not_issued,
                durable: self.durable,
            }),
            (Err(mut failed), _) => {
                failed.writes.extend(not_issued);
                Err(failed)
            }
        }
    }
}

/// Waits for `pending`; faults every leaf whose write fails. Fails, keeping the writes of every
/// top-level vdev left without a usable child, if there are any.
fn wait_writes(
    tree: &VdevTree,
    pending: Vec<PendingWrite>,
    durable: bool,
) -> Result<(), FailedWrites> {
    let mut failures: Vec<String> = Vec::new();
    let mut errors: Vec<(Arc<Leaf>, DeviceError)> = Vec::new();
    let mut failed = Vec::new();
    for write in pending {
        if let Err(err) = write.handle.wait() {
            write.leaf.errors.write.fetch_add(1, Ordering::Relaxed);
            write.leaf.fault();
            failures.push(format!("writes to {} failed", write.leaf.spec));
            errors.push((write.leaf.clone(), err));
            failed.push((write.leaf, write.class, write.offset, write.data));
        }
    }
    if failures.is_empty() {
        return Ok(());
    }
    // A write is lost only if its vdev cannot serve it (a mirror with no usable child left, a
    // raidz vdev with more unusable children than parity); on a degraded mirror the failed
    // side is faulted and the write stands on the others, on a degraded raidz vdev the failed
    // column is rebuilt from parity.
    let unavailable: Vec<Arc<Leaf>> = tree
        .tops
        .iter()
        .filter(|top| top.health() == cairn_pool::vdev::Health::Unavail)
        .flat_map(|top| top.leaves.iter().cloned())
        .collect();
    failed.retain(|(leaf, ..)| unavailable.iter().any(|gone| Arc::ptr_eq(gone, leaf)));
    failures.sort();
    failures.dedup();
    let reason = failures.join("; ");
    if failed.is_empty() {
        return Ok(());
    }
    // The cause kept is an error of a leaf whose vdev is lost (the one that matters).
    let source = errors
        .into_iter()
        .find(|(leaf, _)| unavailable.iter().any(|gone| Arc::ptr_eq(gone, leaf)))
        .map(|(_, err)| Box::new(err));
    Err(FailedWrites {
        reason,
        source,
        writes: failed,
        durable,
    })
}

/// Writes issued for one txg (or one repair pass), waited for together.
pub struct WriteBatch<'a> {
    io: &'a BlockIo,
    txg: u64,
    /// Every write is FUA (see `BlockIo::durable_batch`).
    durable: bool,
    pending: Vec<PendingWrite>,
    /// Writes for vdevs with no usable child when they were issued (kept for a retry).
    unissued: Vec<(Arc<Leaf>, IoClass, u64, Bytes)>,
    /// Writes not yet handed to their leaf's queue, by (leaf guid, class).
    staged: BTreeMap<(u64, IoClass), Staged>,
    /// Blocks this batch has written, and their allocated bytes (every copy): what one part
    /// of a txg costs (`written`), whatever other threads write meanwhile.
    blocks_written: u64,
    bytes_written: u64,
}

impl WriteBatch<'_> {
    pub fn txg(&self) -> u64 {
        self.txg
    }

    /// Blocks written through this batch so far, and their allocated bytes (every copy).
    pub fn written(&self) -> (u64, u64) {
        (self.blocks_written, self.bytes_written)
    }

    /// Compresses (if asked and worth it), checksums, allocates and issues `data`; returns its
    /// pointer immediately.
    pub fn write(&mut self, data: Bytes, props: WriteProps) -> Result<BlockPointer, PipelineError> {
        let lsize = block_psize(&data);
        let packed = match props.compression {
            // No look at the vdev tree for the common case.
            Compression::Off => None,
            codec => compress::compress(&data, codec, self.io.sector_bytes_max()),
        };
        let (physical, compression) = match packed {
            Some(packed) => (Bytes::from(packed), props.compression),
            None => (data, Compression::Off),
        };
        let dvas = self.allocate(block_psize(&physical), props.copies)?;
        self.write_physical(dvas, physical, lsize, compression, props)
    }

    /// Checksums, allocates and issues a block already in its stored form: `physical` is
    /// `lsize` logical bytes compressed with `compression` (a received `send -c` block, which
    /// is kept as the sender stored it instead of being compressed again). The caller has
    /// checked that it decompresses to `lsize` bytes.
    pub fn write_stored(
        &mut self,
        physical: Bytes,
        lsize: u32,
        compression: Compression,
        props: WriteProps,
    ) -> Result<BlockPointer, PipelineError> {
        assert!(
            compression != Compression::Off && physical.len() <= lsize as usize,
            "a stored block that is not compressed"
        );
        let dvas = self.allocate(block_psize(&physical), props.copies)?;
        self.write_physical(dvas, physical, lsize, compression, props)
    }

    /// Allocates copies for a block of `psize` bytes without writing it, for blocks that must
    /// describe their own allocation (space-log blocks).
    pub fn preallocate(&self, psize: u32, copies: u8) -> Result<[Dva; 3], PipelineError> {
        self.allocate(psize, copies)
    }

    /// Writes `data` to copies obtained from `preallocate` (with the same psize), as it is:
    /// the caller sized the block itself, so it is never compressed.
    pub fn write_preallocated(
        &mut self,
        dvas: [Dva; 3],
        data: Bytes,
        props: WriteProps,
    ) -> Result<BlockPointer, PipelineError> {
        let psize = block_psize(&data);
        self.write_physical(dvas, data, psize, Compression::Off, props)
    }

    /// Checksums and issues the stored form of a block of `lsize` logical bytes.
    fn write_physical(
        &mut self,
        dvas: [Dva; 3],
        data: Bytes,
        lsize: u32,
        compression: Compression,
        props: WriteProps,
    ) -> Result<BlockPointer, PipelineError> {
        let psize = block_psize(&data);
        assert!(dvas[0].asize >= psize, "preallocated copy too small");
        debug_assert!(
            dvas.iter().all(|dva| dva.asize == 0 || dva.asize >= psize),
            "an extra copy too small for its block"
        );
        assert!(
            compression != Compression::Off || psize == lsize,
            "an uncompressed block of {psize} bytes said to hold {lsize}"
        );
        let checksum = props.checksum.compute(&data);
        for dva in dvas.iter().filter(|dva| dva.asize != 0) {
            self.issue(dva, &data, props.class)?;
        }
        let bp = BlockPointer {
            dvas,
            lsize,
            psize,
            compression,
            checksum_algorithm: props.checksum,
            object_type: props.object_type,
            level: props.level,
            birth_txg: self.txg,
            fill: props.fill,
            checksum,
        };
        self.blocks_written += 1;
        self.bytes_written += bp.allocated_bytes();
        let stats = &self.io.stats;
        stats.blocks_written.fetch_add(1, Ordering::Relaxed);
        stats
            .bytes_written
            .fetch_add(bp.allocated_bytes(), Ordering::Relaxed);
        Ok(bp)
    }

    fn allocate(&self, psize: u32, copies: u8) -> Result<[Dva; 3], PipelineError> {
        let copies = usize::from(copies.clamp(1, 3));
        let mut dvas = [Dva::default(); 3];
        let mut space = self.io.space.lock();
        for index in 0..copies {
            match space.allocate(psize, self.txg, &dvas[..index]) {
                Ok(dva) => {
                    // Copies of one block never share a byte (else one write is two copies).
                    debug_assert!(dvas[..index].iter().all(|other| !overlap(other, &dva)));
                    debug_assert!(dva.asize >= psize);
                    dvas[index] = dva;
                }
                // Extra copies are best effort: a nearly full pool still gets one.
                Err(_) if index > 0 => break,
                Err(err) => return Err(PipelineError::NoSpace(err)),
            }
        }
        Ok(dvas)
    }

    fn issue(&mut self, dva: &Dva, data: &Bytes, class: IoClass) -> Result<(), PipelineError> {
        debug_assert!(
            data.len() <= dva.asize as usize,
            "a write past its allocation"
        );
        let tree = self.io.tree();
        let top = tree
            .top(dva.vdev)
            .expect("allocator returned a vdev the tree does not have");
        if let Some(geometry) = top.raidz() {
            self.issue_raidz(top, &geometry, dva, data, class);
            return Ok(());
        }
        let mut issued = 0;
        for leaf in top.leaves.iter().filter(|leaf| leaf.queue().is_some()) {
            self.stage(leaf, class, VDEV_DATA_START + dva.offset, data.clone());
            issued += 1;
        }
        if issued == 0 {
            // Every child is faulted: the write waits for them to come back (`finish`).
            let offset = VDEV_DATA_START + dva.offset;
            self.unissued.extend(
                top.leaves
                    .iter()
                    .map(|leaf| (leaf.clone(), class, offset, data.clone())),
            );
        }
        Ok(())
    }

    /// Issues the columns of a block on a raidz vdev, each to its child. A child that cannot
    /// take writes misses its column (rebuilt from parity when read); with more such children
    /// than parity, the whole stripe waits for them to come back (`finish`).
    fn issue_raidz(
        &mut self,
        top: &TopVdev,
        geometry: &RaidzGeometry,
        dva: &Dva,
        data: &Bytes,
        class: IoClass,
    ) {
        let writes = raidz_column_writes(top, geometry, dva, data);
        debug_assert!(
            !writes.is_empty(),
            "an allocation that does not fit its block"
        );
        if top.health() == Health::Unavail {
            self.unissued.extend(
                writes
                    .into_iter()
                    .map(|(leaf, offset, bytes)| (leaf, class, offset, bytes)),
            );
            return;
        }
        for (leaf, offset, bytes) in writes {
            if leaf.queue().is_some() {
                self.stage(&leaf, class, offset, bytes);
            }
        }
    }

    /// Stages one write of `data` at leaf byte `offset`, handing the leaf's staged writes to
    /// its queue once they make a full burst.
    fn stage(&mut self, leaf: &Arc<Leaf>, class: IoClass, offset: u64, data: Bytes) {
        let staged = self
            .staged
            .entry((leaf.guid, class))
            .or_insert_with(|| Staged {
                leaf: leaf.clone(),
                writes: Vec::new(),
                bytes: 0,
            });
        staged.bytes += data.len() as u64;
        staged.writes.push((offset, data));
        if staged.bytes >= STAGE_BYTES_MAX || staged.writes.len() >= STAGE_WRITES_MAX {
            self.submit_staged(leaf.guid, class);
        }
    }

    fn submit_staged(&mut self, guid: u64, class: IoClass) {
        let Some(staged) = self.staged.remove(&(guid, class)) else {
            return;
        };
        // Kept (buffers are shared, not copied) so a write can be issued again after a
        // suspension.
        let retained = staged.writes.clone();
        let handles = match staged.leaf.queue() {
            Some(queue) => queue.write_many(class, staged.writes, self.durable),
            None => return,
        };
        self.pending.extend(
            handles
                .into_iter()
                .zip(retained)
                .map(|(handle, (offset, data))| PendingWrite {
                    leaf: staged.leaf.clone(),
                    class,
                    offset,
                    data,
                    handle,
                }),
        );
    }

    /// Waits for every write of the batch. A leaf whose write fails is faulted (its copy is
    /// stale now); the batch fails only if some top-level vdev lost every child.
    pub fn finish(self) -> Result<(), PipelineError> {
        self.finish_retryable()
            .map_err(|failed| PipelineError::WriteFailed {
                reason: failed.reason,
                source: failed.source,
            })
    }

    /// `finish`, keeping the writes that reached no device so the caller can issue them again
    /// (`FailedWrites::retry`) once the devices are back.
    pub fn finish_retryable(mut self) -> Result<(), FailedWrites> {
        let keys: Vec<_> = self.staged.keys().copied().collect();
        for (guid, class) in keys {
            self.submit_staged(guid, class);
        }
        let tree = self.io.tree();
        let unissued = std::mem::take(&mut self.unissued);
        let outcome = wait_writes(&tree, std::mem::take(&mut self.pending), self.durable);
        if unissued.is_empty() {
            return outcome;
        }
        let reason = unissued
            .iter()
            .map(|(leaf, ..)| format!("{} is faulted", leaf.spec))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join("; ");
        match outcome {
            Ok(()) => Err(FailedWrites {
                reason,
                source: None,
                writes: unissued,
                durable: self.durable,
            }),
            Err(mut failed) => {
                failed.writes.extend(unissued);
                Err(failed)
            }
        }
    }
}
