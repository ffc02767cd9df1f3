//! The read path: a lookup in the index, the read from the cache device at the reader's
//! priority (`IoClass::CacheRead`), verification against the caller's block pointer, and what
//! a hit or a bad copy changes (the block's value, its promotion to RAM, the device's error
//! counts).
//!
//! Invariant: nothing read here is trusted. A checksum mismatch or read error is a miss that
//! drops the entry and counts against the device, unless the read raced a reuse of its
//! segment or the segment's summary shows a fingerprint collision (plain misses). Depends on
//! `device` (and the crate root's `Shared`) among the crate's modules.

use crate::device::CacheDevice;
use crate::index::{EntryState, Place};
use crate::segments::SegmentState;
use crate::{L2Arc, block_key, scaled, worth};
use cairn_device::{IoClass, ReadBuf};
use cairn_format::{BlockPointer, Compression, compress};
use std::sync::atomic::{AtomicU64, Ordering};

/// Who a read from the cache devices is for (see `L2Arc::read`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadUse {
    /// A caller that does not keep the block: a hit adds to its value here.
    Caller,
    /// RAM keeps the block from now on: the copy here is a duplicate meanwhile.
    Ram,
    /// Read-ahead: nothing known yet of whether the block is wanted.
    ReadAhead,
}

impl L2Arc {
    /// The block of `bp`, verified, if a cache device holds it; `None` sends the caller to
    /// the pool (not cached, or the copy was unreadable or wrong, which is counted). For a
    /// caller that does not keep the block in RAM: the hit adds to the block's value here.
    pub fn read(&self, bp: &BlockPointer) -> Option<ReadBuf> {
        self.read_for(bp, ReadUse::Caller)
    }

    /// Like `read`, for a caller that keeps the block in RAM from now on: the copy here is
    /// marked promoted (a duplicate while RAM holds it, the first space a reuse takes back);
    /// when RAM lets the block go and offers it again, it is valued again without a write.
    pub fn read_into_ram(&self, bp: &BlockPointer) -> Option<ReadBuf> {
        self.read_for(bp, ReadUse::Ram)
    }

    /// Like `read`, for read-ahead (which may never be used): the block's value is left as
    /// it was.
    pub fn read_ahead(&self, bp: &BlockPointer) -> Option<ReadBuf> {
        self.read_for(bp, ReadUse::ReadAhead)
    }

    fn read_for(&self, bp: &BlockPointer, promote: ReadUse) -> Option<ReadBuf> {
        let counters = &self.shared.counters;
        let Some(place) = block_key(bp).and_then(|key| Some((key, self.shared.index_get(key)?)))
        else {
            counters.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let (key, place) = place;
        match self.read_place(bp, key, place, promote) {
            Some(data) => {
                counters.hits.fetch_add(1, Ordering::Relaxed);
                counters
                    .hit_bytes
                    .fetch_add(u64::from(bp.psize), Ordering::Relaxed);
                Some(data)
            }
            None => {
                counters.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn read_place(
        &self,
        bp: &BlockPointer,
        key: [u64; 2],
        place: Place,
        promote: ReadUse,
    ) -> Option<ReadBuf> {
        let device = self.shared.device(place.device)?;
        if !device.usable() {
            return None;
        }
        let superblock = device.superblock;
        let segment = superblock.segment_of(place.sector);
        let generation = device.segments.lock().generation(segment);
        // A reader waits on this read: it goes ahead of whatever feeding is queued.
        let result = device.read_at(
            IoClass::CacheRead,
            superblock.sector_offset(place.sector),
            bp.psize as usize,
        );
        let raced = || device.segments.lock().generation(segment) != generation;
        match result {
            Ok(buf) if bp.checksum_algorithm.compute(&buf) == bp.checksum => {
                self.shared.succeeded(&device);
                device.segments.lock().note_hit(segment);
                match promote {
                    ReadUse::Ram => {
                        self.shared
                            .counters
                            .promoted
                            .fetch_add(1, Ordering::Relaxed);
                        self.shared.revalue(key, place, |state, _| EntryState {
                            promoted: true,
                            ..state
                        });
                    }
                    ReadUse::Caller => self.shared.revalue(key, place, |state, scale| EntryState {
                        frequency: state.frequency.saturating_add(scaled(1, scale)),
                        ..state
                    }),
                    ReadUse::ReadAhead => {}
                }
                match bp.compression {
                    Compression::Off => Some(buf),
                    // Verified, so the pool's own bytes: one that will not decompress is sent
                    // to the pool, whose read reports it.
                    stored => compress::decompress(&buf, stored, bp.lsize as usize)
                        .ok()
                        .map(ReadBuf::from),
                }
            }
            // A read that raced a reuse of its segment is a plain miss; so is a fingerprint
            // collision (the place holds another block, as its segment's summary says); any
            // other bad read drops the entry and counts against the device.
            Ok(_) if !raced() => {
                if self.holds_another_block(&device, segment, key, place) {
                    self.shared
                        .counters
                        .fingerprint_collisions
                        .fetch_add(1, Ordering::Relaxed);
                } else {
                    self.bad_read(&device, &device.checksum_errors, key, place);
                }
                None
            }
            Err(_) if !raced() => {
                self.bad_read(&device, &device.read_errors, key, place);
                None
            }
            Ok(_) | Err(_) => None,
        }
    }

    /// Whether a sealed segment's summary says `place` holds another block than `key`'s: the
    /// index matched `key` to another block's entry by fingerprint (see `index`), not a bad
    /// copy. Read only after a checksum mismatch (rare), at the reader's priority. A block in
    /// the filling segment has no summary on the device yet: such a mismatch counts as bad.
    fn holds_another_block(
        &self,
        device: &CacheDevice,
        segment: u32,
        key: [u64; 2],
        place: Place,
    ) -> bool {
        if device.segments.lock().meta(segment).state != SegmentState::Sealed {
            return false;
        }
        let Some(entries) = device.read_summary(segment, IoClass::CacheRead) else {
            return false;
        };
        let offset_sectors = place.sector - segment * device.superblock.sectors_per_segment();
        entries
            .iter()
            .any(|entry| entry.offset_sectors == offset_sectors && entry.key != key)
    }

    fn bad_read(&self, device: &CacheDevice, errors: &AtomicU64, key: [u64; 2], place: Place) {
        errors.fetch_add(1, Ordering::Relaxed);
        self.shared
            .counters
            .bad_reads
            .fetch_add(1, Ordering::Relaxed);
        if let Some(state) = self.shared.index_take_at(key, place) {
            let segment = device.superblock.segment_of(place.sector);
            device.segments.lock().sub_value(segment, worth(state));
        }
        self.shared.failed(device);
    }
}
