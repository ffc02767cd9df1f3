//! # cairn-l2arc: the SSD tier of the hybrid storage pool
//!
//! Between the RAM cache (ARC) and the pool's disks sit a pool's cache devices: fast, cheap
//! per byte, and never trusted. The ARC offers the blocks it lets go (`offer_with`: a victim
//! cache, with how often each was read lately); the cache devices keep copies of those worth
//! it; an ARC miss asks here (`read_into_ram`, `read`) before going to the pool.
//!
//! ## Shape
//! - `layout`: the bytes on a cache device: two superblocks, then equal segments, each filled
//!   front to back and sealed with a summary of what it holds (24 B per block) and a header.
//! - `index`: which blocks are cached and where, in RAM: 10 bytes per block (a 39-bit
//!   fingerprint, the state and the place packed in a u64 and a u16) in Robin Hood tables kept
//!   80–95% full, about 11 B of RAM per cached block for the index (12.5 B at worst), and a
//!   cap (`L2Config::index_bytes_max`) independent of the devices' size: when the index is
//!   full, the least valued segment is dropped to make room, so a huge device costs bounded
//!   RAM. Each entry also keeps its block's frequency (4 bits) and whether it went up to RAM.
//! - `segments`: per device, what each segment holds and what it is worth (the frequencies of
//!   its blocks still wanted here, aged).
//! - `device`: one cache device as its writer and readers share it (queue, segment table,
//!   health, write allowance), and opening one again (superblock, header scan).
//! - `read`: the read path (`L2Arc::read`, `read_into_ram`, `read_ahead`): lookup, verified
//!   read, what a hit or a bad copy changes.
//! - `writer`: one device's writer thread (feeding, sealing, reuse, rebuild).
//! - this file: `L2Arc`, a pool's set of cache devices: admission, feeding, rebuilding; and
//!   `Shared`, what writers, readers and rebuilds share.
//!
//! Module dependencies point one way: `layout`, `index` and `segments` at the bottom, then
//! `device`, then `read` and `writer` (each on `device`, neither on the other); all of them
//! may use this file's `Shared` and `L2Config`.
//!
//! ## RAM per cached block, everything included
//! The index (about 11 B per block) and the tier's share of the RAM tier's admission sketch,
//! which counts for both tiers: one sketch slot of 4 B (four rows of 4-bit counters and 16
//! doorkeeper bits, `cairn_arc`'s sketch, exactly as wide as asked: no power-of-two rounding)
//! per block the tier holds (`indexed_blocks`). The RAM tier's maintenance grows the sketch,
//! keeping its counts and epoch, once the tier holds a tenth more blocks than it was sized for,
//! so the share is 3.6–4 B per cached block at any fill: about 15 B per cached block in all,
//! under the 16 B target, whether the tier is full (bench/cache's two-tier replays) or holds a
//! sliver of its devices (bench/l2arc). `stat l2arc` reports it (`sketch_ram_bytes`: the
//! sketch's bytes beyond what the RAM tier alone needs, shared by the pools' tiers by their
//! blocks). `capacity_bytes` (the blocks the devices can hold) no longer sizes the sketch.
//!
//! ## What is kept: value, admission, and no duplicates
//! The RAM tier's frequency sketch (TinyLFU's, sized for both tiers) tells how often a block
//! was read lately; every offer carries that frequency and the sketch's epoch (how often it has
//! halved its counts), so frequencies told at different times compare on one scale (`segments`
//! halves a segment's values once per epoch since it was filled). The tier is managed like
//! TinyLFU's main space, a segment at a time:
//! - **Admission.** An offered block is admitted only if read more often than the blocks the
//!   last segment reuse had to drop (the *bar*, as often as they were read then: it is not
//!   halved when the sketch ages, see `Shared::bar`), and at least `admit_frequency_min` times. A
//!   loop or a scan larger than the tier, whose blocks are no more frequent than what is
//!   cached, is refused instead of washing the tier out.
//! - **No duplicates.** A block read from here into RAM (`read_into_ram`) stays indexed but is
//!   marked *promoted*: worth nothing here while RAM holds it, so its segment is the first
//!   reused and the copy dropped then. If RAM lets it go first, its offer finds the copy and
//!   values it again, with no write. RAM and SSD together hold about as many distinct blocks
//!   as their sizes add up to.
//! - **Reuse by value.** The segment reused is the one worth least (the sum of its not
//!   promoted blocks' aged frequencies); its most valued blocks (at most half a segment) are
//!   copied forward into the new one, the rest dropped, and the highest frequency among the
//!   dropped becomes the bar.
//!
//! ## Feeding
//! Offers never wait: a block is queued for one device's writer (round robin over the devices,
//! so feeding scales with their number) and dropped when that queue is full, so the cache can
//! never slow the reads and evictions that feed it. Each writer batches blocks into writes of
//! `write_chunk_bytes` (or whatever arrived within `feed_linger_ms`), appends them to its
//! filling segment (splitting a chunk at the segment's end, so segments fill to the block), and
//! only then indexes them: an index entry always points at written bytes. A full segment is
//! sealed (summary, header, flush) and the next one taken is the least valued: its entries
//! leave the index (read back from its summary) before its space is written, and its valued
//! blocks are copied forward as above: segment-granular space management with block-granular
//! second chances. `offer` (no frequency known) admits without the bar, as a block read once.
//! `offer_evicted` tells the RAM tier whether the block is here or on its way (held, or queued
//! for a writer) rather than refused or dropped: what the ARC counts its evictions by
//! (`evict_l2_cached` against `evict_l2_eligible`, "uncached eligible").
//!
//! An optional write budget per day (`write_bytes_per_day`, set by `cairn serve
//! --l2-write-max-per-day`) protects flash endurance: each device has an allowance that starts
//! at its size (the first fill is free), refills continuously at the daily rate up to a day's
//! budget or the device's size, whichever is more; over it, blocks are dropped as the writer
//! comes to them (`feed_over_budget`).
//!
//! ## Compressed blocks
//! The tier keeps every block as the pool stores it (`psize` bytes), compressed or not, so a
//! compressed block takes its compressed size here too. RAM holds blocks decompressed: a
//! block offered from RAM whose pointer says lz4 is encoded again by the writer thread
//! (`cairn_format::compress::encode`, deterministic, so the bytes are the pool's), and a hit
//! is decompressed after its checksum verified. RAM's eviction knows a block by its key only,
//! so the key carries it: `KEY_LZ4`.
//!
//! ## Reading, and never trusting
//! A lookup gives a device and a sector; the block is read (`psize` bytes) and verified against
//! the caller's block pointer checksum. A mismatch or read error is a miss: the entry is
//! dropped, the device's error counted, and the caller reads from the pool. (A mismatch whose
//! segment's summary shows another block at that place is an index fingerprint collision,
//! not a bad copy: a plain miss, counted apart, the other block's entry kept.) A device with
//! `errors_max_faulted` consecutive failed I/Os is FAULTED: its entries leave the index and it
//! is used no more. Nothing is ever lost: the cache holds only copies of blocks the pool has.
//! A hit for a caller that does not keep the block in RAM (`read`) adds to its frequency; one
//! for read-ahead (`read_ahead`) leaves its value alone.
//!
//! ## Persistence
//! At open, each device's superblock is checked against the pool, then a background rebuild
//! scans the segment headers (4 KiB each) and reads the sealed segments' summaries, most hit
//! first, indexing as it goes: hits come back segment by segment while it runs, opening never
//! waits for it, and a damaged segment is only skipped. A block's key (first copy's address
//! and birth txg) cannot name other contents later, since a freed address is only reused by a
//! block with a newer birth txg; and the read-time checksum catches everything else. Rebuilt
//! blocks start at frequency 1 (frequencies are not persisted).
//!
//! ## I/O
//! Each cache device has its own `LeafQueue`, and every I/O of the tier goes through it: a
//! lookup's read at `IoClass::CacheRead` (FIFO, issued before anything else queued there), the
//! writer's chunks, summaries and headers at `IoClass::CacheWrite` (FIFO, at most two in
//! service, so feeding never holds every worker), the writer's own reads (rebuild, summaries,
//! copy-forward) at `IoClass::AsyncRead`, between the two. A reader waits behind at most the
//! writes already in service, never behind queued feeding. Order that matters is kept by
//! waiting: the writer waits for each write, and a header invalidation is flushed (the queue's
//! flush waits for earlier writes) before its segment's space is written again.
//!
//! ## Known gaps
//! Segment hit counts are persisted only when a segment is sealed (a restart forgets later
//! heat), and block frequencies not at all; blocks reach the tier only as RAM lets them go (no
//! feeding ahead of the eviction end); the admission sketch grows with the blocks the tier
//! holds but shrinks only when they fall under half of what it was sized for (cache devices
//! removed), forgetting its counts then; a block queued for a writer
//! counts as taken (`offer_evicted`) though the write budget or a device failure may still drop
//! it.

mod device;
pub mod index;
pub mod layout;
mod read;
pub mod segments;
mod writer;

pub use device::{CacheDevice, DeviceReport, L2Health};

use crate::device::{Allowance, read_superblock};
use crate::index::{EntryState, Index, Place};
use crate::layout::{SECTOR_BYTES, Superblock};
use crate::segments::SegmentTable;
use bytes::Bytes;
use cairn_device::{Device, DeviceError, IoClass, LeafQueue};
use cairn_format::{BlockPointer, Compression};
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// The RAM tier's admission sketch counts capacity in blocks of this size (see
/// `L2Arc::capacity_bytes`).
const SKETCH_UNIT_BYTES: u64 = 4096;

/// Index shards (lookups from many readers do not share one lock).
const SHARDS: usize = 16;

/// How a pool's cache tier behaves.
#[derive(Debug, Clone)]
pub struct L2Config {
    /// Segment size on new cache devices (a power of two, 64 KiB to 1 GiB).
    pub segment_bytes: u64,
    /// RAM the index may use at most, whatever the devices' size.
    pub index_bytes_max: u64,
    /// Size of the writes that feed a device.
    pub write_chunk_bytes: usize,
    /// How long a writer waits for more blocks before writing a partial chunk.
    pub feed_linger_ms: u64,
    /// Blocks queued per device before offers are dropped.
    pub feed_queue_blocks: usize,
    /// Largest block cached (bigger ones are read from the pool).
    pub block_bytes_max: u32,
    /// Bytes a device may be written per day after its first fill (`None`: no limit).
    pub write_bytes_per_day: Option<u64>,
    /// Consecutive failed I/Os that fault a device.
    pub errors_max_faulted: u64,
    /// Least frequency (reads lately, by the RAM tier's sketch) for an offered block to be
    /// admitted (`offer_with`): a block read once is not worth a write.
    pub admit_frequency_min: u8,
}

impl Default for L2Config {
    fn default() -> Self {
        L2Config {
            segment_bytes: 16 << 20,
            index_bytes_max: 1 << 30,
            write_chunk_bytes: 1 << 20,
            feed_linger_ms: 50,
            feed_queue_blocks: 4096,
            block_bytes_max: 1 << 20,
            write_bytes_per_day: None,
            errors_max_faulted: 8,
            admit_frequency_min: 1,
        }
    }
}

/// What the RAM tier knows of a block it offers (`L2Arc::offer_with`): how often it was read
/// lately by its frequency sketch, and that sketch's epoch (how many times it has halved its
/// counts), so frequencies told at different times compare on one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    pub frequency: u8,
    pub epoch: u64,
}

/// Why a cache device could not be added or opened.
#[derive(Debug, thiserror::Error)]
pub enum L2Error {
    #[error("cache device {device}")]
    Device {
        device: String,
        #[source]
        source: DeviceError,
    },
    #[error("cache device {device}")]
    Layout {
        device: String,
        #[source]
        source: layout::LayoutError,
    },
    #[error("cache device {device} belongs to another pool (guid {found}, not {expected})")]
    OtherPool {
        device: String,
        found: u64,
        expected: u64,
    },
    #[error("a pool has at most {max} cache devices", max = index::DEVICES_MAX)]
    TooMany,
    #[error("no cache device {0}")]
    NoSuchDevice(String),
}

/// Counters of a pool's cache tier (monotonic unless named as a level).
#[derive(Debug, Default)]
pub struct L2Counters {
    pub hits: AtomicU64,
    pub misses: AtomicU64,
    pub hit_bytes: AtomicU64,
    pub feed_blocks: AtomicU64,
    pub feed_bytes: AtomicU64,
    pub feed_dropped: AtomicU64,
    pub feed_ineligible: AtomicU64,
    pub feed_over_budget: AtomicU64,
    /// Offers refused: read too rarely, or less often than what they would displace.
    pub feed_refused: AtomicU64,
    /// Hits whose block went up to RAM (its copy here is then the first space reused).
    pub promoted: AtomicU64,
    pub evicted_segments: AtomicU64,
    pub evicted_blocks: AtomicU64,
    /// Blocks worth keeping, moved to a new segment when theirs was reused.
    pub copied_forward: AtomicU64,
    pub bad_reads: AtomicU64,
    /// Lookups that matched another block's entry by fingerprint (its segment's summary told):
    /// plain misses, not errors.
    pub fingerprint_collisions: AtomicU64,
    pub rebuild_segments: AtomicU64,
    pub rebuild_blocks: AtomicU64,
    pub rebuild_failed: AtomicU64,
}

/// What the writers, readers and rebuilds of one pool share.
pub(crate) struct Shared {
    config: L2Config,
    shards: Box<[Mutex<Index>]>,
    /// Entries in all shards, and the most the RAM cap allows.
    entries: AtomicUsize,
    entries_max: usize,
    counters: L2Counters,
    /// Cache devices by slot (the device number in index entries).
    devices: RwLock<Vec<Option<Arc<CacheDevice>>>>,
    /// The RAM tier's sketch epoch, as last told by an offer.
    epoch: AtomicU64,
    /// The admission bar: an offered block must be read more often than the blocks the last
    /// segment reuse dropped, as often as they were read when they were dropped. Not aged
    /// when the sketch halves its counts (see `bar`).
    bar: AtomicU8,
}

/// What a block adds to its segment's value: its frequency, unless it went up to RAM.
fn worth(state: EntryState) -> u64 {
    if state.promoted {
        0
    } else {
        u64::from(state.frequency)
    }
}

/// `frequency` × `scale`, within what an index entry keeps.
fn scaled(frequency: u8, scale: u32) -> u8 {
    (u32::from(frequency) * scale).min(u32::from(index::FREQUENCY_MAX)) as u8
}

fn shard_of(key: [u64; 2]) -> usize {
    // The fingerprint's lowest bits (just above the tag): independent of the high bits that
    // pick home slots.
    ((index::fingerprint(key) >> index::TAG_BITS) as usize) % SHARDS
}

/// Bit of a key's first word set for a block the pool stores lz4-compressed. Offsets are
/// multiples of 512, so the bit is free; keys of uncompressed blocks are as before.
pub const KEY_LZ4: u64 = 1;

/// The L2 key of a block: its first copy's address and its birth txg, and whether it is
/// stored lz4-compressed (`KEY_LZ4`); `None` for a pointer with no copy, which nothing caches.
pub fn block_key(bp: &BlockPointer) -> Option<[u64; 2]> {
    let first = bp.copies().first()?;
    debug_assert_eq!(first.offset & KEY_LZ4, 0, "an odd block offset");
    let lz4 = match bp.compression {
        Compression::Lz4 => KEY_LZ4,
        _ => 0,
    };
    Some([
        (u64::from(first.vdev) << 48) | first.offset | lz4,
        bp.birth_txg,
    ])
}

/// How the pool stores the block of `key` (what the writer encodes RAM's copy with).
fn stored_compression(key: [u64; 2]) -> Compression {
    if key[0] & KEY_LZ4 != 0 {
        Compression::Lz4
    } else {
        Compression::Off
    }
}

impl Shared {
    fn index_get(&self, key: [u64; 2]) -> Option<Place> {
        self.shards[shard_of(key)].lock().get(key)
    }

    fn index_get_state(&self, key: [u64; 2]) -> Option<(Place, EntryState)> {
        self.shards[shard_of(key)].lock().get_state(key)
    }

    /// Changes the state of the entry of `key` at `place` (`change` is given the state and the
    /// multiplier that takes a frequency told now to the segment's scale) and its segment's
    /// value to match.
    fn revalue(
        &self,
        key: [u64; 2],
        place: Place,
        change: impl FnOnce(EntryState, u32) -> EntryState,
    ) {
        let Some(device) = self.device(place.device) else {
            return;
        };
        let segment = device.superblock.segment_of(place.sector);
        let segments = device.segments.lock();
        // A frequency told at a later epoch than the segment's counts double per epoch.
        let shift = self
            .epoch()
            .saturating_sub(segments.meta(segment).epoch)
            .min(4) as u32;
        let mut after = None;
        let before = self.shards[shard_of(key)]
            .lock()
            .update_at(key, place, |state| {
                let new = change(state, 1 << shift);
                after = Some(new);
                new
            });
        let (Some(before), Some(after)) = (before, after) else {
            return;
        };
        let (was, is) = (worth(before), worth(after));
        if is > was {
            segments.add_value(segment, is - was);
        } else {
            segments.sub_value(segment, was - is);
        }
    }

    /// Indexes `key` at `place` with `state`; a new key beyond the index's cap (over all
    /// shards) is refused.
    fn index_insert(
        &self,
        key: [u64; 2],
        place: Place,
        state: EntryState,
    ) -> Result<(), index::IndexFull> {
        let mut shard = self.shards[shard_of(key)].lock();
        let before = shard.len();
        if shard.get(key).is_none() && self.entries.load(Ordering::Relaxed) >= self.entries_max {
            return Err(index::IndexFull::AtCap(self.entries_max));
        }
        shard.insert_with(key, place, state)?;
        if shard.len() > before {
            self.entries.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// The admission bar now: the highest frequency the last segment reuse dropped, on the
    /// scale of its epoch. It is deliberately not halved when the sketch ages. Right after an
    /// ageing every count is halved, and then climbs again with each read; a halved bar let
    /// those climbing counts pass it well before they reached what the dropped blocks had, so
    /// each ageing set off a round of admissions of blocks no more frequent than the ones they
    /// displaced (on a loop: a fifth of the tier rewritten, copies forward included, for
    /// nothing). Kept as it was, it asks newcomers to be read as often as the blocks it
    /// dropped were, whatever the sketch's epoch. It cannot shut the tier: it is at most
    /// `FREQUENCY_MAX` (index frequencies are 4 bits), while a block read more often than the
    /// sketch's counters hold is told one more (the doorkeeper's read), so it always passes;
    /// and the next reuse sets the bar afresh.
    fn bar(&self) -> u8 {
        self.bar.load(Ordering::Relaxed)
    }

    fn set_bar(&self, frequency: u8) {
        self.bar.store(frequency, Ordering::Relaxed);
    }

    /// Removes the entry of `key` at `place`; its state if it was there.
    fn index_take_at(&self, key: [u64; 2], place: Place) -> Option<EntryState> {
        let taken = self.shards[shard_of(key)].lock().take_at(key, place);
        if taken.is_some() {
            self.entries.fetch_sub(1, Ordering::Relaxed);
        }
        taken
    }

    fn index_retain(&self, keep: impl Fn(Place) -> bool) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            let before = shard.len();
            shard.retain(&keep);
            self.entries
                .fetch_sub(before - shard.len(), Ordering::Relaxed);
        }
    }

    fn device(&self, slot: u8) -> Option<Arc<CacheDevice>> {
        self.devices.read().get(usize::from(slot))?.clone()
    }

    /// Counts a failed I/O of `device`; faults it after too many in a row.
    fn failed(&self, device: &CacheDevice) {
        let in_row = device.failures_in_row.fetch_add(1, Ordering::AcqRel) + 1;
        if in_row >= self.config.errors_max_faulted && device.health.swap(1, Ordering::AcqRel) == 0
        {
            let slot = device.slot;
            self.index_retain(|place| place.device != slot);
        }
    }

    fn succeeded(&self, device: &CacheDevice) {
        device.failures_in_row.store(0, Ordering::Relaxed);
    }
}

/// A pool's cache tier.
pub struct L2Arc {
    shared: Arc<Shared>,
    writers: Mutex<Vec<writer::WriterHandle>>,
    /// `writers.len()`, read without the lock on every RAM miss and eviction.
    device_count: AtomicUsize,
    next_writer: AtomicUsize,
}

impl L2Arc {
    pub fn new(config: L2Config) -> L2Arc {
        // Each shard's table is 75–92% full (see `index`): the worst case bounds the cap.
        let entries_max = usize::try_from(config.index_bytes_max / index::ENTRY_BYTES_WORST)
            .unwrap_or(usize::MAX);
        let shards = (0..SHARDS)
            .map(|_| Mutex::new(Index::new(usize::MAX)))
            .collect();
        L2Arc {
            shared: Arc::new(Shared {
                config,
                shards,
                entries: AtomicUsize::new(0),
                entries_max: entries_max.max(1),
                counters: L2Counters::default(),
                devices: RwLock::new(Vec::new()),
                epoch: AtomicU64::new(0),
                bar: AtomicU8::new(0),
            }),
            writers: Mutex::new(Vec::new()),
            device_count: AtomicUsize::new(0),
            next_writer: AtomicUsize::new(0),
        }
    }

    pub fn config(&self) -> &L2Config {
        &self.shared.config
    }

    pub fn counters(&self) -> &L2Counters {
        &self.shared.counters
    }

    /// Writes a new cache device's superblocks (it must belong to no pool: the caller checks)
    /// and starts using it.
    pub fn add_new(
        &self,
        name: &str,
        device: Arc<dyn Device>,
        device_guid: u64,
        pool_guid: u64,
    ) -> Result<(), L2Error> {
        let superblock = Superblock::for_device(
            device.size_bytes(),
            self.shared.config.segment_bytes,
            device_guid,
            pool_guid,
        )
        .map_err(|source| L2Error::Layout {
            device: name.to_string(),
            source,
        })?;
        let device_error = |source| L2Error::Device {
            device: name.to_string(),
            source,
        };
        let size_bytes = device.size_bytes();
        let queue = LeafQueue::new(device);
        let wait_all = |handles: Vec<cairn_device::IoHandle<()>>| {
            handles
                .into_iter()
                .try_for_each(|handle| handle.wait())
                .map_err(device_error)
        };
        // Nothing of an earlier use may survive where it could be read as ours (an old
        // segment header) or as a pool member's label (the first and last MiB). One zeroed
        // buffer serves every write (the queue hands `Bytes` to the device as they are).
        let blank = Bytes::from(vec![0u8; layout::DATA_START as usize]);
        let header_blank = blank.slice(..layout::HEADER_BYTES as usize);
        let tail = layout::TAIL_RESERVED_BYTES.min(size_bytes);
        let blanks = (0..superblock.segment_count.min(u64::from(u32::MAX)) as u32)
            .map(|segment| (superblock.segment_offset(segment), header_blank.clone()))
            .chain([
                (0, blank.clone()),
                (size_bytes - tail, blank.slice(..tail as usize)),
            ])
            .collect();
        wait_all(queue.write_many(IoClass::CacheWrite, blanks, false))?;
        // The superblocks overwrite zeros written above: only once those are done.
        let encoded = Bytes::from(superblock.encode());
        wait_all(queue.write_many(
            IoClass::CacheWrite,
            vec![(0, encoded.clone()), (layout::SUPER_BYTES, encoded)],
            false,
        ))?;
        queue.flush().map_err(device_error)?;
        self.attach(name, queue, superblock, false)
    }

    /// Opens a cache device written before (by `add_new`), checks it belongs to `pool_guid`,
    /// and rebuilds its index entries in the background.
    pub fn open_existing(
        &self,
        name: &str,
        device: Arc<dyn Device>,
        pool_guid: u64,
    ) -> Result<(), L2Error> {
        let queue = LeafQueue::new(device);
        let superblock = read_superblock(name, &queue)?;
        if superblock.pool_guid != pool_guid {
            return Err(L2Error::OtherPool {
                device: name.to_string(),
                found: superblock.pool_guid,
                expected: pool_guid,
            });
        }
        self.attach(name, queue, superblock, true)
    }

    fn attach(
        &self,
        name: &str,
        queue: Arc<LeafQueue>,
        superblock: Superblock,
        rebuild: bool,
    ) -> Result<(), L2Error> {
        let segment_count = usize::try_from(superblock.segment_count).unwrap_or(usize::MAX);
        let size_bytes = queue.device().size_bytes();
        let mut devices = self.shared.devices.write();
        let slot = match devices.iter().position(Option::is_none) {
            Some(slot) => slot,
            None if devices.len() < index::DEVICES_MAX => {
                devices.push(None);
                devices.len() - 1
            }
            None => return Err(L2Error::TooMany),
        };
        let cache_device = Arc::new(CacheDevice {
            name: name.to_string(),
            // Below DEVICES_MAX (16).
            slot: slot as u8,
            queue,
            superblock,
            segments: Mutex::new(SegmentTable::new(segment_count)),
            health: AtomicU8::new(0),
            failures_in_row: AtomicU64::new(0),
            read_errors: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            checksum_errors: AtomicU64::new(0),
            rebuild_pending: AtomicUsize::new(0),
            allowance: Mutex::new(Allowance::new(size_bytes)),
        });
        devices[slot] = Some(cache_device.clone());
        drop(devices);
        let handle = writer::start(self.shared.clone(), cache_device, rebuild);
        let mut writers = self.writers.lock();
        writers.push(handle);
        self.device_count.store(writers.len(), Ordering::Release);
        Ok(())
    }

    /// Stops using the device `name`: its writer ends, its entries leave the index.
    pub fn remove(&self, name: &str) -> Result<(), L2Error> {
        let handle = {
            let mut writers = self.writers.lock();
            let position = writers
                .iter()
                .position(|writer| writer.device.name == name)
                .ok_or_else(|| L2Error::NoSuchDevice(name.to_string()))?;
            let handle = writers.remove(position);
            self.device_count.store(writers.len(), Ordering::Release);
            handle
        };
        let slot = handle.device.slot;
        handle.stop();
        self.shared.index_retain(|place| place.device != slot);
        self.shared.devices.write()[usize::from(slot)] = None;
        Ok(())
    }

    /// Whether the block of `key` (`block_key`) is indexed on a cache device.
    pub fn contains(&self, key: [u64; 2]) -> bool {
        self.shared.index_get(key).is_some()
    }

    /// Whether any cache device is attached (an empty tier is skipped by readers).
    pub fn has_devices(&self) -> bool {
        self.device_count.load(Ordering::Acquire) > 0
    }

    /// Every device, in the order they were added.
    pub fn devices(&self) -> Vec<Arc<CacheDevice>> {
        self.writers
            .lock()
            .iter()
            .map(|writer| writer.device.clone())
            .collect()
    }

    pub fn reports(&self) -> Vec<DeviceReport> {
        self.devices()
            .iter()
            .map(|device| device.report(&self.shared.config))
            .collect()
    }

    /// Blocks indexed now, and the RAM the index uses.
    pub fn index_usage(&self) -> (u64, u64) {
        self.shared
            .shards
            .iter()
            .fold((0, 0), |(entries, bytes), shard| {
                let shard = shard.lock();
                (
                    entries + shard.len() as u64,
                    bytes + shard.ram_bytes() as u64,
                )
            })
    }

    /// Blocks indexed now (a sweep of the index's shards, each locked in turn): what the RAM
    /// tier's admission sketch grows to count for this tier (one slot per block held).
    pub fn indexed_blocks(&self) -> u64 {
        self.shared
            .shards
            .iter()
            .map(|shard| shard.lock().len() as u64)
            .sum()
    }

    /// What the RAM tier's admission sketch should count for this tier, in its unit of 4 KiB
    /// per block: the blocks the devices' segments can hold at the mean size of the blocks fed
    /// so far (`mean_block_bytes`), at most what the index cap allows, times 4 KiB. One sketch
    /// slot per block the tier can hold, so blocks larger than 4 KiB cost no more sketch per
    /// block than 4 KiB ones (counting the devices' bytes in 4 KiB units gave 8 KiB blocks two
    /// slots each).
    pub fn capacity_bytes(&self) -> u64 {
        let devices: u64 = self
            .devices()
            .iter()
            .filter(|device| device.usable())
            .map(|device| device.superblock.segment_count * device.superblock.segment_bytes)
            .sum();
        let blocks = (devices / self.mean_block_bytes()).min(self.shared.entries_max as u64);
        blocks * SKETCH_UNIT_BYTES
    }

    /// The mean size of the blocks fed so far, rounded down to a power of two and at least the
    /// sketch's 4 KiB (before any is fed: 4 KiB). Rounded so that it settles at once and moves
    /// the sketch's size (which forgets what it counted) only when blocks change size for good.
    fn mean_block_bytes(&self) -> u64 {
        let counters = &self.shared.counters;
        let blocks = counters.feed_blocks.load(Ordering::Relaxed);
        let bytes = counters.feed_bytes.load(Ordering::Relaxed);
        let mean = bytes
            .checked_div(blocks)
            .unwrap_or(0)
            .max(SKETCH_UNIT_BYTES);
        // `mean` ≥ 4096, so its highest bit is set.
        1 << (63 - mean.leading_zeros())
    }

    /// Blocks indexed whose copies are marked promoted (read up into RAM since written): what
    /// RAM and the cache devices both hold, as far as this tier knows. A sweep of the index.
    pub fn promoted_blocks(&self) -> u64 {
        self.shared
            .shards
            .iter()
            .map(|shard| shard.lock().promoted() as u64)
            .sum()
    }

    /// Whether a block of this size and kind may be cached here.
    pub fn eligible(&self, bp: &BlockPointer) -> bool {
        matches!(bp.compression, Compression::Off | Compression::Lz4)
            && bp.psize > 0
            && bp.psize <= self.shared.config.block_bytes_max
            && !bp.is_hole()
            && !bp.copies().is_empty()
    }

    /// Offers a block (`data`: its `lsize` bytes, as reads return it) with nothing known of
    /// how often it is read: admitted if the writers keep up, as a block read once. Never
    /// waits: dropped when the writers are behind or over their budget.
    pub fn offer(&self, bp: &BlockPointer, data: &Bytes) {
        self.offer_item(bp, data, None);
    }

    /// Offers a block the RAM tier is letting go of (the feed of a victim cache), with what
    /// its sketch knows of it. A block already here that had gone up to RAM is simply valued
    /// again (nothing is written). Otherwise it is admitted only if read at least
    /// `admit_frequency_min` times lately and more often than the blocks the last segment
    /// reuse had to drop (TinyLFU's admission, at segment granularity): a loop or a scan
    /// larger than the tier cannot wash out what it holds.
    pub fn offer_with(&self, bp: &BlockPointer, data: &Bytes, admission: Admission) {
        self.offer_item(bp, data, Some(admission));
    }

    /// `offer_with` for a block known by its key (`block_key`) only, as RAM's eviction knows
    /// it: `data` must be its contents, as reads return them (the read checks the stored form
    /// against the block pointer anyway; a wrong copy would only cost a miss and a counted
    /// error). Returns whether the tier has the block now or took it (queued for a writer),
    /// rather than refused it (admission, size) or dropped it (writers behind, no usable
    /// device): what the RAM tier counts as cached against "uncached eligible".
    pub fn offer_evicted(&self, key: [u64; 2], data: Bytes, admission: Admission) -> bool {
        if data.is_empty() || data.len() > self.shared.config.block_bytes_max as usize {
            self.shared
                .counters
                .feed_ineligible
                .fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.offer_key(key, data, Some(admission))
    }

    fn offer_item(&self, bp: &BlockPointer, data: &Bytes, admission: Option<Admission>) {
        let counters = &self.shared.counters;
        if !self.eligible(bp) || data.len() != bp.lsize as usize {
            counters.feed_ineligible.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Some(key) = block_key(bp) else {
            return;
        };
        self.offer_key(key, data.clone(), admission);
    }

    /// Offers a block by key; whether the tier holds it or queued it for a writer.
    fn offer_key(&self, key: [u64; 2], data: Bytes, admission: Option<Admission>) -> bool {
        let counters = &self.shared.counters;
        if let Some(admission) = admission {
            self.shared
                .epoch
                .fetch_max(admission.epoch, Ordering::Relaxed);
        }
        let frequency = admission.map_or(1, |admission| admission.frequency.max(1));
        if let Some((place, _)) = self.shared.index_get_state(key) {
            self.shared.revalue(key, place, |state, scale| EntryState {
                promoted: false,
                frequency: state.frequency.max(scaled(frequency, scale)),
            });
            return true;
        }
        if admission.is_some()
            && (frequency < self.shared.config.admit_frequency_min
                || frequency <= self.shared.bar())
        {
            counters.feed_refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let writers = self.writers.lock();
        if writers.is_empty() {
            return false;
        }
        let start = self.next_writer.fetch_add(1, Ordering::Relaxed);
        let item = writer::FeedItem {
            key,
            data,
            encode: stored_compression(key),
            frequency,
        };
        let mut item = Some(item);
        for turn in 0..writers.len() {
            let writer = &writers[(start + turn) % writers.len()];
            if !writer.device.usable() {
                continue;
            }
            match writer.try_send(item.take().expect("item present until sent")) {
                Ok(()) => return true,
                Err(back) => item = Some(back),
            }
        }
        counters.feed_dropped.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Waits until every queued block is written and indexed and every rebuild is done
    /// (tests and benchmarks; a server never needs to).
    pub fn settle(&self) {
        let writers: Vec<_> = self
            .writers
            .lock()
            .iter()
            .map(|writer| writer.settle_request())
            .collect();
        for done in writers {
            let _ = done.recv();
        }
    }

    /// Seals every filling segment (so what is cached survives a restart), stops the writers
    /// and lets go of the devices (closing them, so the next import can open them) and of the
    /// index. The tier is empty afterwards; reads miss.
    pub fn shutdown(&self) {
        let writers = {
            let mut writers = self.writers.lock();
            self.device_count.store(0, Ordering::Release);
            std::mem::take(&mut *writers)
        };
        for writer in writers {
            writer.stop();
        }
        self.shared.devices.write().clear();
        self.shared.index_retain(|_| false);
    }
}

impl Drop for L2Arc {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Sectors a block of `bytes` takes.
fn sectors_for(bytes: usize) -> u32 {
    // Blocks are at most `block_bytes_max` (≤ a segment), far below 2^41 bytes.
    (bytes as u64).div_ceil(SECTOR_BYTES) as u32
}

#[cfg(test)]
mod tests;
#[cfg(test)]
impl L2Arc {
    pub(crate) fn shard_fill(&self) -> Vec<(usize, usize)> {
        self.shared
            .shards
            .iter()
            .map(|shard| {
                let shard = shard.lock();
                (shard.len(), shard.ram_bytes() / index::SLOT_BYTES)
            })
            .collect()
    }
}
