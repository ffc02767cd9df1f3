//! # cairn-pipeline: from bytes to verified blocks and back
//!
//! Every block the upper layers write goes through `WriteBatch::write`: compress (when asked,
//! and only when it saves space), checksum, allocate one or more copies (`Dva`s), issue the
//! writes to every child of each copy's top-level vdev, and hand back the `BlockPointer` at
//! once — before the I/O completes. The pointer already holds the checksum, so parents can be
//! built while children are still in flight; `WriteBatch::finish` waits for the whole batch,
//! which a txg sync does once before flushing.
//!
//! Every read goes through `BlockIo::read_block`: try the copies (and, within a mirror, the least
//! busy child first) until one verifies against the pointer's checksum; then rewrite the copies
//! that failed (self-heal) and count the error on the leaf that returned bad data. If no copy
//! verifies, the caller gets `PipelineError::Unrecoverable` — never unverified bytes. A
//! compressed block is verified as stored and then decompressed: checksums, scrub and repair
//! deal in physical bytes, every reader above in logical ones.
//!
//! Invariants:
//! - A block pointer handed out by `write` names space the allocator marked allocated in the
//!   batch's txg, and a checksum of exactly the bytes written.
//! - `read_block` returns bytes whose stored form's checksum equals the pointer's, `lsize` of
//!   them, or an error.
//!
//! Nothing here caches: the ARC (`cairn-arc`, the layer above) decides what stays in memory;
//! scrub and check read through this layer directly, so they always see the devices.

mod raw;
mod stats;

pub use cairn_format::compress::DecompressError;

pub use raw::RawWrites;

pub use stats::PipelineStats;

use bytes::Bytes;
use cairn_device::queue::{IoClass, IoHandle};
use cairn_device::{DeviceError, ErrorClass, ReadBuf};
use cairn_format::compress;
use cairn_format::label::VDEV_DATA_START;
use cairn_format::{BlockPointer, ChecksumAlgorithm, Compression, Dva, ObjectType};
use cairn_pool::space::{SpaceAllocator, SpaceError};
use cairn_pool::vdev::{Leaf, VdevTree};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use thiserror::Error;

/// Errors keep what caused them as their `source()` (a device's error, the allocator's
/// refusal), never as text: the layers above classify them (`class`) for clients, and people
/// read the whole chain.
#[derive(Debug, Error)]
pub enum PipelineError {
    /// The allocator refused the block: almost always a full pool (`SpaceError::NoSpace`).
    #[error("cannot allocate the block")]
    NoSpace(#[source] SpaceError),
    /// No copy of the block verified; the source is why the last copy tried failed.
    #[error(
        "unrecoverable block (type {object_type:?} level {level}, birth txg {birth_txg}, first copy vdev {vdev} offset {offset})"
    )]
    Unrecoverable {
        object_type: ObjectType,
        level: u8,
        birth_txg: u64,
        vdev: u32,
        offset: u64,
        #[source]
        cause: Box<CopyError>,
    },
    /// Some top-level vdev got no copy of a write; the source is a device error behind it (none
    /// when every child was faulted before the write was issued).
    #[error("write failed on every copy: {reason}")]
    WriteFailed {
        reason: String,
        #[source]
        source: Option<Box<DeviceError>>,
    },
    /// A copy verified against its checksum but would not decompress: the block was written
    /// wrongly (or by a newer build), so no other copy can be better.
    #[error(
        "block (type {object_type:?} level {level}, birth txg {birth_txg}) cannot be decompressed"
    )]
    Decompress {
        object_type: ObjectType,
        level: u8,
        birth_txg: u64,
        #[source]
        cause: DecompressError,
    },
    /// A decoded block pointer that cannot belong to this pool (`BlockIo::check_pointer`).
    #[error("{what}: invalid block pointer")]
    InvalidPointer {
        what: String,
        #[source]
        problem: PointerProblem,
    },
}

impl PipelineError {
    /// What the failure means to a client: a full pool is "no space"; everything else here is
    /// data that could not be read or written (a block no copy of which verifies is EIO, as in
    /// ZFS).
    pub fn class(&self) -> ErrorClass {
        match self {
            PipelineError::NoSpace(SpaceError::NoSpace { .. }) => ErrorClass::NoSpace,
            // Any other refusal is a bug or damage in the space maps, not a full pool.
            PipelineError::NoSpace(_) => ErrorClass::Io,
            PipelineError::Unrecoverable { .. }
            | PipelineError::WriteFailed { .. }
            | PipelineError::Decompress { .. }
            | PipelineError::InvalidPointer { .. } => ErrorClass::Io,
        }
    }
}

/// Why one copy of a block could not be used.
#[derive(Debug, Error)]
pub enum CopyError {
    #[error("{device}: device unavailable")]
    Unavailable { device: String },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("checksum mismatch on {device} at offset {offset}")]
    Checksum { device: String, offset: u64 },
    #[error("copy at vdev {vdev} offset {offset} is outside the pool")]
    OutsidePool { vdev: u32, offset: u64 },
    #[error("no readable copy")]
    NoCopy,
}

/// Why a block pointer that decoded cleanly still cannot belong to this pool: the decoder
/// checks what a pointer says about itself, this what it says about the pool.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PointerProblem {
    #[error("copy {copy} names vdev {vdev}, which the pool does not have")]
    UnknownVdev { copy: usize, vdev: u32 },
    #[error(
        "copy {copy} [{offset:#x}, +{asize:#x}) is outside the data region of vdev {vdev} ({size_bytes:#x} bytes)"
    )]
    OutOfRange {
        copy: usize,
        vdev: u32,
        offset: u64,
        asize: u32,
        size_bytes: u64,
    },
    #[error("born in txg {birth_txg}, after txg {newest_txg}, the newest the pool has")]
    FutureBirth { birth_txg: u64, newest_txg: u64 },
}

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

/// Result of verifying every copy of one block (scrub).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ScrubOutcome {
    pub copies_checked: u64,
    pub bad_copies: u64,
    pub repaired_copies: u64,
    pub bytes_read: u64,
    pub unrecoverable: bool,
}

pub struct BlockIo {
    /// The current vdev tree; replaced whole when a vdev is added or removed (I/O already
    /// started keeps the tree it began with).
    tree: RwLock<Arc<VdevTree>>,
    space: Arc<Mutex<SpaceAllocator>>,
    pub stats: PipelineStats,
    /// Reads in flight, counted by the last synced txg when they started. The block a read
    /// was given may be freed by a later txg; its space must not be reused (and a self-heal
    /// must not write over new data) while the read runs, so the txg sync releases no free of
    /// that txg or later meanwhile (`oldest_read_txg`). Reads can wait longer than a few txgs
    /// under a write flood.
    reads_in_flight: Mutex<BTreeMap<u64, usize>>,
    synced_txg: std::sync::atomic::AtomicU64,
    /// A pool opened read-only: a bad copy is reported, never rewritten (`set_read_only`).
    read_only: std::sync::atomic::AtomicBool,
}

impl BlockIo {
    pub fn new(tree: Arc<VdevTree>, space: Arc<Mutex<SpaceAllocator>>) -> BlockIo {
        BlockIo {
            tree: RwLock::new(tree),
            space,
            stats: PipelineStats::default(),
            reads_in_flight: Mutex::new(BTreeMap::new()),
            synced_txg: std::sync::atomic::AtomicU64::new(0),
            read_only: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Makes reads write nothing: a bad copy found while another verifies is counted but not
    /// healed. A pool opened read-only promises that no device byte changes (its devices may
    /// be evidence, or about to be copied off).
    pub fn set_read_only(&self) {
        self.read_only.store(true, Ordering::SeqCst);
    }

    /// The last synced txg (the tree readers now see): set by the txg sync once it published.
    pub fn set_synced_txg(&self, txg: u64) {
        self.synced_txg.fetch_max(txg, Ordering::SeqCst);
    }

    /// The synced txg of the oldest read in flight: frees of that txg or later must wait.
    pub fn oldest_read_txg(&self) -> Option<u64> {
        self.reads_in_flight.lock().keys().next().copied()
    }

    /// Counts a read in flight under the last synced txg until the guard drops. `io` is how
    /// the guard reaches this `BlockIo`: a borrow for a read that ends in the caller's frame,
    /// an `Arc` for one queued now and finished later (`QueuedRead`).
    fn read_guard<D: Deref<Target = BlockIo>>(io: D) -> ReadGuard<D> {
        let txg = io.synced_txg.load(Ordering::SeqCst);
        *io.reads_in_flight.lock().entry(txg).or_default() += 1;
        ReadGuard { io, txg }
    }

    pub fn tree(&self) -> Arc<VdevTree> {
        self.tree.read().clone()
    }

    /// The largest sector of the pool's top-level vdevs: compression must save whole sectors
    /// of it to be worth keeping (a block may be placed on any of them).
    pub fn sector_bytes_max(&self) -> usize {
        let ashift = self
            .tree
            .read()
            .tops
            .iter()
            .map(|top| top.config.ashift)
            .max()
            .unwrap_or(cairn_format::ASHIFT_MIN);
        1usize << ashift
    }

    /// Makes `tree` the pool's vdev tree. A tree with a new vdev must be in place before the
    /// allocator may place anything on it; a vdev leaves the allocator before the tree.
    pub fn replace_tree(&self, tree: Arc<VdevTree>) {
        *self.tree.write() = tree;
    }

    pub fn space(&self) -> &Arc<Mutex<SpaceAllocator>> {
        &self.space
    }

    pub fn batch(&self, txg: u64) -> WriteBatch<'_> {
        WriteBatch {
            io: self,
            txg,
            durable: false,
            pending: Vec::new(),
            unissued: Vec::new(),
            staged: BTreeMap::new(),
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

    /// Returns every copy of `bp` to the allocator (deferred, see `SpaceAllocator::free`).
    /// A copy the allocator refuses (a block pointer that disagrees with the space map: a
    /// crafted image, or a block referenced twice) becomes the allocator's fault, which keeps
    /// the txg sync from committing and so suspends the pool; the other copies are still freed.
    pub fn free_block(&self, bp: &BlockPointer, txg: u64) {
        if bp.is_hole() {
            return;
        }
        let mut space = self.space.lock();
        for dva in bp.copies() {
            // Refusal is recorded in `space.fault()`; nothing here can do better.
            let _ = space.free(dva, txg);
        }
        self.stats.blocks_freed.fetch_add(1, Ordering::Relaxed);
    }

    /// Checks a decoded pointer against the pool (every copy inside a vdev's data region, born
    /// no later than `newest_txg`), before anything is read through it or trusted about it:
    /// import checks the roots it starts from this way. A hole is always valid.
    pub fn check_pointer(&self, bp: &BlockPointer, newest_txg: u64) -> Result<(), PointerProblem> {
        if bp.is_hole() {
            return Ok(());
        }
        if bp.birth_txg > newest_txg {
            return Err(PointerProblem::FutureBirth {
                birth_txg: bp.birth_txg,
                newest_txg,
            });
        }
        let tree = self.tree();
        for (copy, dva) in bp.copies().iter().enumerate() {
            let Some(top) = tree.top(dva.vdev) else {
                return Err(PointerProblem::UnknownVdev {
                    copy,
                    vdev: dva.vdev,
                });
            };
            if !tree.dva_in_range(dva) {
                return Err(PointerProblem::OutOfRange {
                    copy,
                    vdev: dva.vdev,
                    offset: dva.offset,
                    asize: dva.asize,
                    size_bytes: top.data_size_bytes,
                });
            }
        }
        Ok(())
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
        let mut bad: Vec<(Arc<Leaf>, Dva)> = Vec::new();
        let mut last_reason = CopyError::NoCopy;
        let mut good: Option<ReadBuf> = None;
        let tree = self.tree();
        'copies: for dva in bp.copies() {
            let Some(top) = tree.top_for_dva(dva) else {
                last_reason = outside_pool(dva);
                continue;
            };
            for leaf in top.read_order_for(bp.birth_txg) {
                match self.read_copy(&leaf, dva, bp, class) {
                    Ok(data) => {
                        good = Some(data);
                        break 'copies;
                    }
                    Err(reason) => {
                        last_reason = reason;
                        bad.push((leaf, *dva));
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
                self.repair(&leaf, &dva, &verified);
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
        let leaf = self
            .tree()
            .top_for_dva(&dva)?
            .read_order_for(bp.birth_txg)
            .into_iter()
            .next()?;
        let queue = leaf.queue()?;
        let in_flight = Self::read_guard(self.clone());
        let handle = queue.read(class, VDEV_DATA_START + dva.offset, bp.psize as usize);
        Some(QueuedRead {
            _in_flight: in_flight,
            leaf,
            dva,
            bp: *bp,
            class,
            handle,
        })
    }

    /// Waits for a read `queue_read` queued and verifies it; a failed or damaged copy is read
    /// again the full way (`read_block_buf`: every copy, healing the bad ones).
    pub fn finish_read(&self, queued: QueuedRead) -> Result<ReadBuf, PipelineError> {
        let QueuedRead {
            _in_flight,
            leaf,
            dva,
            bp,
            class,
            handle,
        } = queued;
        let offset = VDEV_DATA_START + dva.offset;
        match self.verify_copy(&leaf, offset, &bp, handle.wait()) {
            Ok(data) => logical(&bp, data),
            // The queued read stays counted in flight until the full read is done.
            Err(_) => self.read_block_buf(&bp, class),
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
            for leaf in &top.leaves {
                if let Some(queue) = leaf.queue() {
                    moved +=
                        queue.promote_reads(VDEV_DATA_START + dva.offset, from, IoClass::SyncRead);
                }
            }
        }
        moved
    }

    /// Verifies every copy on every child (scrub), repairing what it can. The bytes returned
    /// are the block's logical contents (decompressed).
    pub fn scrub_block(&self, bp: &BlockPointer) -> (ScrubOutcome, Option<Bytes>) {
        let mut survey = self.survey_copies(bp);
        let mut outcome = ScrubOutcome {
            copies_checked: survey.checked,
            bytes_read: survey.bytes_read,
            bad_copies: survey.bad.len() as u64,
            ..ScrubOutcome::default()
        };
        match &survey.good {
            Some(data) => {
                for (leaf, dva, _) in &survey.bad {
                    if let Some(leaf) = leaf
                        && self.repair(leaf, dva, data)
                    {
                        outcome.repaired_copies += 1;
                    }
                }
            }
            None => {
                outcome.unrecoverable = true;
                self.stats.unrecoverable.fetch_add(1, Ordering::Relaxed);
            }
        }
        match survey.logical(bp) {
            Ok(good) => (outcome, good),
            Err(_) => {
                outcome.unrecoverable = true;
                self.stats.unrecoverable.fetch_add(1, Ordering::Relaxed);
                (outcome, None)
            }
        }
    }

    /// Verifies every copy of `bp` on every child without repairing anything (offline check).
    /// Returns the number of copies checked, the descriptions of bad ones, and good data.
    pub fn verify_all_copies(&self, bp: &BlockPointer) -> (u64, Vec<String>, Option<Bytes>) {
        let mut survey = self.survey_copies(bp);
        let good = survey.logical(bp);
        let mut problems: Vec<String> = survey
            .bad
            .into_iter()
            .map(|(_, _, reason)| reason.to_string())
            .collect();
        let good = match good {
            Ok(good) => good,
            Err(err) => {
                problems.push(cairn_device::error_chain(&err));
                None
            }
        };
        (survey.checked, problems, good)
    }

    /// Reads and verifies every copy of `bp` on every child of its vdevs.
    fn survey_copies(&self, bp: &BlockPointer) -> CopySurvey {
        let mut survey = CopySurvey::default();
        let tree = self.tree();
        for dva in bp.copies() {
            let Some(top) = tree.top_for_dva(dva) else {
                survey.bad.push((None, *dva, outside_pool(dva)));
                continue;
            };
            for leaf in top.read_order_for(bp.birth_txg) {
                survey.checked += 1;
                survey.bytes_read += u64::from(bp.psize);
                match self.read_copy(&leaf, dva, bp, IoClass::Scrub) {
                    Ok(data) => survey.good = Some(Bytes::from_owner(data)),
                    Err(reason) => survey.bad.push((Some(leaf), *dva, reason)),
                }
            }
        }
        survey
    }

    fn read_copy(
        &self,
        leaf: &Arc<Leaf>,
        dva: &Dva,
        bp: &BlockPointer,
        class: IoClass,
    ) -> Result<ReadBuf, CopyError> {
        let queue = leaf.queue().ok_or_else(|| CopyError::Unavailable {
            device: leaf.spec.to_string(),
        })?;
        let offset = VDEV_DATA_START + dva.offset;
        let device = queue.device();
        // A synchronous read from flash gains nothing from the queue (no seek to order, nothing
        // to merge with while someone waits) and pays two thread hops: read it here instead.
        let direct = class == IoClass::SyncRead && !device.is_rotational();
        let result = if direct {
            self.stats.direct_reads.fetch_add(1, Ordering::Relaxed);
            queue.read_direct(class, offset, bp.psize as usize)
        } else {
            queue.read(class, offset, bp.psize as usize).wait()
        };
        self.verify_copy(leaf, offset, bp, result)
    }

    /// Counts a copy's read and checks it against the block pointer.
    fn verify_copy(
        &self,
        leaf: &Arc<Leaf>,
        offset: u64,
        bp: &BlockPointer,
        result: Result<ReadBuf, DeviceError>,
    ) -> Result<ReadBuf, CopyError> {
        let data = match result {
            Ok(data) => data,
            Err(err) => {
                leaf.errors.read.fetch_add(1, Ordering::Relaxed);
                return Err(CopyError::Device(err));
            }
        };
        self.stats.blocks_read.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes_read
            .fetch_add(u64::from(bp.psize), Ordering::Relaxed);
        if bp.checksum_algorithm.compute(&data) != bp.checksum {
            leaf.errors.checksum.fetch_add(1, Ordering::Relaxed);
            self.stats.checksum_errors.fetch_add(1, Ordering::Relaxed);
            return Err(CopyError::Checksum {
                device: leaf.spec.to_string(),
                offset,
            });
        }
        Ok(data)
    }

    /// Writes `data`, the verified contents of the copy at `dva`, to one child of its vdev at
    /// the copy's offset (resilver: the child lacks it). `None` if the child is unusable; the
    /// caller waits on the handle and flushes the leaf before relying on the write.
    pub fn write_copy(&self, leaf: &Arc<Leaf>, dva: &Dva, data: Bytes) -> Option<IoHandle<()>> {
        let queue = leaf.queue()?;
        Some(queue.write(IoClass::Scrub, VDEV_DATA_START + dva.offset, data))
    }

    /// Rewrites a bad copy in place with verified data. Safe because the block is live: nothing
    /// else may occupy its space.
    fn repair(&self, leaf: &Arc<Leaf>, dva: &Dva, data: &Bytes) -> bool {
        if self.read_only.load(Ordering::SeqCst) {
            return false;
        }
        let Some(queue) = leaf.queue() else {
            return false;
        };
        let offset = VDEV_DATA_START + dva.offset;
        match queue.write(IoClass::SyncWrite, offset, data.clone()).wait() {
            Ok(()) => {
                leaf.errors
                    .repaired_bytes
                    .fetch_add(data.len() as u64, Ordering::Relaxed);
                self.stats.repairs.fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => {
                leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }
}

/// Every copy of one block, read and verified (scrub and check).
#[derive(Default)]
struct CopySurvey {
    checked: u64,
    bytes_read: u64,
    good: Option<Bytes>,
    /// Copies that failed, with the leaf that returned them (none if the copy's address is
    /// outside the pool) and why.
    bad: Vec<(Option<Arc<Leaf>>, Dva, CopyError)>,
}

impl CopySurvey {
    /// The good copy's logical bytes (taken out of the survey).
    fn logical(&mut self, bp: &BlockPointer) -> Result<Option<Bytes>, PipelineError> {
        match self.good.take() {
            Some(physical) if bp.compression != Compression::Off => {
                let data = compress::decompress(&physical, bp.compression, bp.lsize as usize)
                    .map_err(|cause| decompress_error(bp, cause))?;
                Ok(Some(Bytes::from(data)))
            }
            other => Ok(other),
        }
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

fn decompress_error(bp: &BlockPointer, cause: DecompressError) -> PipelineError {
    PipelineError::Decompress {
        object_type: bp.object_type,
        level: bp.level,
        birth_txg: bp.birth_txg,
        cause,
    }
}

fn outside_pool(dva: &Dva) -> CopyError {
    CopyError::OutsidePool {
        vdev: dva.vdev,
        offset: dva.offset,
    }
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

fn unrecoverable(bp: &BlockPointer, cause: CopyError) -> PipelineError {
    let first = bp.copies().first().copied().unwrap_or_default();
    PipelineError::Unrecoverable {
        object_type: bp.object_type,
        level: bp.level,
        birth_txg: bp.birth_txg,
        vdev: first.vdev,
        offset: first.offset,
        cause: Box::new(cause),
    }
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
    leaf: Arc<Leaf>,
    dva: Dva,
    bp: BlockPointer,
    class: IoClass,
    handle: IoHandle<ReadBuf>,
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
    // A write is lost only if no child of its vdev took it (the vdev has no usable child left);
    // on a degraded mirror the failed side is faulted and the write stands on the others.
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
}

impl WriteBatch<'_> {
    pub fn txg(&self) -> u64 {
        self.txg
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
                Ok(dva) => dvas[index] = dva,
                // Extra copies are best effort: a nearly full pool still gets one.
                Err(_) if index > 0 => break,
                Err(err) => return Err(PipelineError::NoSpace(err)),
            }
        }
        Ok(dvas)
    }

    fn issue(&mut self, dva: &Dva, data: &Bytes, class: IoClass) -> Result<(), PipelineError> {
        let tree = self.io.tree();
        let top = tree
            .top(dva.vdev)
            .expect("allocator returned a vdev the tree does not have");
        let mut issued = 0;
        for leaf in top.leaves.iter().filter(|leaf| leaf.queue().is_some()) {
            let staged = self
                .staged
                .entry((leaf.guid, class))
                .or_insert_with(|| Staged {
                    leaf: leaf.clone(),
                    writes: Vec::new(),
                    bytes: 0,
                });
            staged
                .writes
                .push((VDEV_DATA_START + dva.offset, data.clone()));
            staged.bytes += data.len() as u64;
            if staged.bytes >= STAGE_BYTES_MAX || staged.writes.len() >= STAGE_WRITES_MAX {
                self.submit_staged(leaf.guid, class);
            }
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
