//! One cache device's writer thread: batches offered blocks into large sequential writes,
//! fills and seals segments, reuses the least valued one, and rebuilds the index of a device
//! opened again (between feeds, most hit segments first).
//!
//! Reusing a segment: its blocks leave the index (read back from its summary); those that
//! went up to RAM are dropped (RAM holds them; if it lets them go, they are offered again);
//! of the others, the most valued (frequency, aged to the current epoch, at least the
//! admission minimum) are copied forward into the new segment, at most half a segment's
//! worth, and the highest frequency among those dropped becomes the admission bar: an offered
//! block is admitted only if read more often than what was just given up for room.
//!
//! Only this thread changes the device's segments and writes to it, so a segment's life
//! (taken, filled, sealed, reused) needs no lock beyond the short ones on the segment table
//! that readers also take. Index entries are inserted only after the bytes they point to are
//! written, and removed before those bytes are overwritten (a reuse moves the segment's
//! generation first, so a reader racing the reuse sees a miss, not a device error).

use crate::index::{EntryState, IndexFull, Place};
use crate::layout::{
    self, HEADER_BYTES, SECTOR_BYTES, SUMMARY_ENTRY_BYTES, SegmentHeader, SummaryEntry,
};
use crate::segments::{self, SegmentState};
use crate::{CacheDevice, Shared, sectors_for};
use bytes::Bytes;
use cairn_device::IoClass;
use cairn_format::Compression;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub(crate) struct FeedItem {
    pub key: [u64; 2],
    /// The block as RAM holds it (to be encoded with `encode` first) or as stored.
    pub data: Bytes,
    /// How the pool stores the block when `data` is its contents (`Off`: `data` is already
    /// the stored form). The writer encodes, so that the RAM tier's eviction does not.
    pub encode: Compression,
    /// Reads lately, as the RAM tier's sketch told (1 when not known).
    pub frequency: u8,
}

enum Message {
    Feed(FeedItem),
    Settle(Sender<()>),
    Stop,
}

pub(crate) struct WriterHandle {
    pub device: Arc<CacheDevice>,
    tx: Sender<Message>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WriterHandle {
    /// Queues `item`, or gives it back when the queue is full.
    pub fn try_send(&self, item: FeedItem) -> Result<(), FeedItem> {
        match self.tx.try_send(Message::Feed(item)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(Message::Feed(item)))
            | Err(TrySendError::Disconnected(Message::Feed(item))) => Err(item),
            Err(_) => unreachable!("a feed message came back as another kind"),
        }
    }

    /// A channel answered once everything queued before is written and any rebuild is done.
    pub fn settle_request(&self) -> Receiver<()> {
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        let _ = self.tx.send(Message::Settle(done_tx));
        done_rx
    }

    /// Writes what is queued, seals the filling segment, ends the thread, and stops the
    /// device's queue (its workers let go of the device; a reader still holding it misses).
    pub fn stop(mut self) {
        let _ = self.tx.send(Message::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.device.queue.shutdown();
    }
}

pub(crate) fn start(shared: Arc<Shared>, device: Arc<CacheDevice>, rebuild: bool) -> WriterHandle {
    let (tx, rx) = crossbeam_channel::bounded(shared.config.feed_queue_blocks.max(1));
    let thread = std::thread::Builder::new()
        .name(format!("cairn-l2-{}", device.slot))
        .spawn({
            let device = device.clone();
            move || Writer::new(shared, device, rebuild).run(rx)
        })
        .ok();
    WriterHandle { device, tx, thread }
}

/// The segment being filled.
struct Filling {
    segment: u32,
    /// Next free byte in the segment.
    cursor_bytes: u64,
    entries: Vec<SummaryEntry>,
}

struct Writer {
    shared: Arc<Shared>,
    device: Arc<CacheDevice>,
    filling: Option<Filling>,
    /// Blocks waiting to be written, padded to sectors, and their entries (offsets within
    /// the chunk).
    chunk: Vec<u8>,
    chunk_entries: Vec<SummaryEntry>,
    /// The state of each of `chunk_entries`.
    chunk_states: Vec<EntryState>,
    chunk_bytes_max: usize,
    rebuilding: bool,
    settles_waiting: Vec<Sender<()>>,
    /// Hot blocks of a reused segment, to be written again.
    survivors: std::collections::VecDeque<FeedItem>,
}

impl Writer {
    fn new(shared: Arc<Shared>, device: Arc<CacheDevice>, rebuilding: bool) -> Writer {
        let segment_bytes = device.superblock.segment_bytes;
        let chunk_bytes_max = (shared.config.write_chunk_bytes as u64)
            .clamp(SECTOR_BYTES, segment_bytes / 2) as usize;
        Writer {
            shared,
            device,
            filling: None,
            chunk: Vec::with_capacity(chunk_bytes_max),
            chunk_entries: Vec::new(),
            chunk_states: Vec::new(),
            chunk_bytes_max,
            rebuilding,
            settles_waiting: Vec::new(),
            survivors: std::collections::VecDeque::new(),
        }
    }

    fn run(mut self, rx: Receiver<Message>) {
        if self.rebuilding {
            crate::device::scan_headers(&self.shared, &self.device);
        }
        let linger = Duration::from_millis(self.shared.config.feed_linger_ms.max(1));
        loop {
            let message = if self.rebuilding {
                match rx.try_recv() {
                    Ok(message) => Some(message),
                    Err(crossbeam_channel::TryRecvError::Empty) => None,
                    Err(crossbeam_channel::TryRecvError::Disconnected) => Some(Message::Stop),
                }
            } else {
                match rx.recv_timeout(linger) {
                    Ok(message) => Some(message),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => Some(Message::Stop),
                }
            };
            match message {
                Some(Message::Feed(item)) => self.append(item),
                Some(Message::Settle(done)) => {
                    while let Some(item) = self.survivors.pop_front() {
                        self.append(item);
                    }
                    self.write_chunk();
                    if self.rebuilding {
                        self.settles_waiting.push(done);
                    } else {
                        let _ = done.send(());
                    }
                }
                Some(Message::Stop) => {
                    self.write_chunk();
                    self.seal();
                    for done in self.settles_waiting.drain(..) {
                        let _ = done.send(());
                    }
                    return;
                }
                None => self.write_chunk(),
            }
            while let Some(item) = self.survivors.pop_front() {
                self.append(item);
            }
            if self.rebuilding {
                self.rebuild_one();
            }
        }
    }

    fn usable(&self) -> bool {
        self.device.usable()
    }

    /// Whether `bytes` more may be written under the day's budget (and takes them).
    fn within_budget(&mut self, bytes: usize) -> bool {
        let Some(per_day) = self.shared.config.write_bytes_per_day else {
            return true;
        };
        self.device.allowance.lock().take(
            bytes as u64,
            per_day,
            self.device.size_bytes(),
            Instant::now(),
        )
    }

    fn append(&mut self, mut item: FeedItem) {
        let shared = self.shared.clone();
        let counters = &shared.counters;
        if !self.usable() {
            counters.feed_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if item.encode != Compression::Off {
            // The same bytes the pool wrote (the encoding is deterministic); a read checks
            // them against the block pointer's checksum all the same.
            match cairn_format::compress::encode(&item.data, item.encode) {
                Some(physical) => item.data = Bytes::from(physical),
                None => {
                    counters.feed_ineligible.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
        let padded = sectors_for(item.data.len()) as usize * SECTOR_BYTES as usize;
        if padded > self.chunk_bytes_max / 2 {
            counters.feed_ineligible.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !self.within_budget(padded) {
            counters.feed_over_budget.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if self.chunk.len() + padded > self.chunk_bytes_max {
            self.write_chunk();
        }
        let offset_sectors = (self.chunk.len() as u64 / SECTOR_BYTES) as u32;
        self.chunk.extend_from_slice(&item.data);
        self.chunk
            .resize(self.chunk.len() + padded - item.data.len(), 0);
        self.chunk_entries.push(SummaryEntry {
            key: item.key,
            offset_sectors,
            psize: item.data.len() as u32,
        });
        self.chunk_states.push(EntryState {
            promoted: false,
            frequency: item.frequency.max(1),
        });
        // Blocks start on sector boundaries (an index place is a sector number).
        debug_assert!((self.chunk.len() as u64).is_multiple_of(SECTOR_BYTES));
        debug_assert_eq!(self.chunk_entries.len(), self.chunk_states.len());
        if self.chunk.len() >= self.chunk_bytes_max {
            self.write_chunk();
        }
    }

    /// How many of `entries` (the first ones of `chunk`, in order) fit in what is left of the
    /// filling segment, with the summary entries they add.
    fn entries_that_fit(&self, chunk: &[u8], entries: &[SummaryEntry]) -> usize {
        let Some(filling) = &self.filling else {
            return 0;
        };
        let summary = (filling.entries.len() * SUMMARY_ENTRY_BYTES) as u64;
        let room = self
            .device
            .superblock
            .segment_bytes
            .saturating_sub(filling.cursor_bytes + summary);
        (0..entries.len())
            .take_while(|&i| {
                let end = entries.get(i + 1).map_or(chunk.len() as u64, |next| {
                    u64::from(next.offset_sectors) * SECTOR_BYTES
                });
                end + ((i + 1) * SUMMARY_ENTRY_BYTES) as u64 <= room
            })
            .count()
    }

    /// Writes the chunk: as much as fits into the filling segment, then the rest into the
    /// next one (a segment is filled to its end, not sealed with a chunk's worth unused).
    fn write_chunk(&mut self) {
        if self.chunk.is_empty() {
            return;
        }
        let mut chunk = Bytes::from(std::mem::take(&mut self.chunk));
        let mut entries = std::mem::take(&mut self.chunk_entries);
        let mut frequencies = std::mem::take(&mut self.chunk_states);
        self.chunk = Vec::with_capacity(self.chunk_bytes_max);
        let mut fresh = false;
        while !entries.is_empty() {
            let fit = if self.usable() {
                self.entries_that_fit(&chunk, &entries)
            } else {
                0
            };
            if fit == 0 {
                if fresh || !self.usable() {
                    // Not even an empty segment takes the first block, or the device failed.
                    break;
                }
                self.seal();
                self.take_segment();
                fresh = true;
                continue;
            }
            let end = entries.get(fit).map_or(chunk.len(), |next| {
                next.offset_sectors as usize * SECTOR_BYTES as usize
            });
            let rest = chunk.split_off(end);
            let rest_entries = entries.split_off(fit);
            let rest_frequencies = frequencies.split_off(fit);
            self.write_part(chunk, entries, frequencies);
            let base = (end as u64 / SECTOR_BYTES) as u32;
            chunk = rest;
            entries = rest_entries
                .into_iter()
                .map(|entry| SummaryEntry {
                    offset_sectors: entry.offset_sectors - base,
                    ..entry
                })
                .collect();
            frequencies = rest_frequencies;
            fresh = false;
        }
        self.shared
            .counters
            .feed_dropped
            .fetch_add(entries.len() as u64, Ordering::Relaxed);
    }

    /// Writes `chunk` (which fits) at the filling segment's cursor and indexes its entries.
    fn write_part(
        &mut self,
        chunk: Bytes,
        entries: Vec<SummaryEntry>,
        frequencies: Vec<EntryState>,
    ) {
        let Some(filling) = self.filling.as_mut() else {
            return;
        };
        let superblock = self.device.superblock;
        let offset = superblock.segment_offset(filling.segment) + filling.cursor_bytes;
        let chunk_bytes = chunk.len() as u64;
        // The chunk and the summary entries it adds stay inside the segment: past it lies the
        // next segment's header, which a write here would destroy.
        let summary_bytes = ((filling.entries.len() + entries.len()) * SUMMARY_ENTRY_BYTES) as u64;
        assert!(
            filling.cursor_bytes + chunk_bytes + summary_bytes <= superblock.segment_bytes,
            "segment {}: a chunk of {chunk_bytes} bytes at {} does not fit",
            filling.segment,
            filling.cursor_bytes
        );
        debug_assert!(
            filling.cursor_bytes >= HEADER_BYTES
                && filling.cursor_bytes.is_multiple_of(SECTOR_BYTES)
        );
        debug_assert_eq!(entries.len(), frequencies.len());
        if self.device.write_at(offset, chunk).is_err() {
            self.device.write_errors.fetch_add(1, Ordering::Relaxed);
            self.shared.failed(&self.device);
            self.shared
                .counters
                .feed_dropped
                .fetch_add(entries.len() as u64, Ordering::Relaxed);
            return;
        }
        self.shared.succeeded(&self.device);
        let base_sectors = (filling.cursor_bytes / SECTOR_BYTES) as u32;
        let segment_sectors = filling.segment * superblock.sectors_per_segment();
        filling.cursor_bytes += chunk_bytes;
        let segment = filling.segment;
        let mut written = Vec::with_capacity(entries.len());
        let mut value = 0;
        for (entry, state) in entries.into_iter().zip(frequencies) {
            let entry = SummaryEntry {
                offset_sectors: base_sectors + entry.offset_sectors,
                ..entry
            };
            let place = Place {
                device: self.device.slot,
                sector: segment_sectors + entry.offset_sectors,
            };
            if self.index_insert(entry.key, place, state) {
                written.push(entry);
                value += crate::worth(state);
            }
        }
        let bytes: u64 = written.iter().map(|entry| u64::from(entry.psize)).sum();
        let counters = &self.shared.counters;
        counters
            .feed_blocks
            .fetch_add(written.len() as u64, Ordering::Relaxed);
        counters.feed_bytes.fetch_add(bytes, Ordering::Relaxed);
        {
            let mut segments = self.device.segments.lock();
            segments.add_value(segment, value);
            segments.appended(segment, written.len() as u32, chunk_bytes);
        }
        if let Some(filling) = self.filling.as_mut() {
            filling.entries.extend(written);
        }
    }

    /// Indexes a written block; a full index gives up its least valued segment first.
    fn index_insert(&mut self, key: [u64; 2], place: Place, state: EntryState) -> bool {
        match self.shared.index_insert(key, place, state) {
            Ok(()) => true,
            Err(IndexFull::AtCap(_)) => {
                let victim = {
                    let segments = self.device.segments.lock();
                    segments
                        .victim(self.shared.epoch())
                        .filter(|segment| segments.meta(*segment).state == SegmentState::Sealed)
                };
                match victim {
                    Some(segment) => {
                        self.drop_segment(segment);
                        self.device.segments.lock().abandon(segment);
                        self.shared.index_insert(key, place, state).is_ok()
                    }
                    None => false,
                }
            }
        }
    }

    /// Writes the filling segment's summary and header, making it survive a restart.
    fn seal(&mut self) {
        let Some(filling) = self.filling.take() else {
            return;
        };
        if filling.entries.is_empty() {
            self.device.segments.lock().abandon(filling.segment);
            return;
        }
        let superblock = self.device.superblock;
        let summary = layout::encode_summary(&filling.entries);
        assert!(
            filling.cursor_bytes + summary.len() as u64 <= superblock.segment_bytes,
            "segment {}: the summary would pass its end",
            filling.segment
        );
        let (sequence, hits) = {
            let segments = self.device.segments.lock();
            (segments.next_sequence(), segments.hits(filling.segment))
        };
        let header = SegmentHeader {
            sequence,
            hits,
            summary_offset_bytes: filling.cursor_bytes as u32,
            entries: filling.entries.len() as u32,
            summary_checksum: cairn_format::checksum::embedded(&summary),
        };
        let start = superblock.segment_offset(filling.segment);
        // Summary before header: a header names a summary already written (the flush makes
        // both durable; a torn pair fails the summary's checksum at rebuild, never misleads).
        let written = self
            .device
            .write_at(start + filling.cursor_bytes, Bytes::from(summary))
            .and_then(|()| self.device.write_at(start, Bytes::from(header.encode())))
            .and_then(|()| self.device.flush());
        match written {
            Ok(()) => self.shared.succeeded(&self.device),
            Err(_) => {
                self.device.write_errors.fetch_add(1, Ordering::Relaxed);
                self.shared.failed(&self.device);
            }
        }
        // Sealed in RAM either way: its blocks are written and indexed; only a restart
        // would not find them.
        self.device.segments.lock().seal(filling.segment);
    }

    /// Takes the least valued segment for filling, dropping what it held.
    fn take_segment(&mut self) {
        let (segment, before) = {
            let mut segments = self.device.segments.lock();
            let now = self.shared.epoch();
            let Some(segment) = segments.victim(now) else {
                return;
            };
            let before = segments.start_filling(segment, now);
            (segment, before)
        };
        match before.state {
            SegmentState::Sealed => {
                let live = self.drop_entries(segment);
                self.copy_forward(segment, before.epoch, live);
            }
            SegmentState::Unindexed => {
                self.device.rebuild_pending.fetch_sub(1, Ordering::Relaxed);
            }
            SegmentState::Free | SegmentState::Filling => {}
        }
        if before.state != SegmentState::Free {
            let counters = &self.shared.counters;
            counters.evicted_segments.fetch_add(1, Ordering::Relaxed);
            counters
                .evicted_blocks
                .fetch_add(u64::from(before.entries), Ordering::Relaxed);
        }
        // The old header must not outlive the old contents: a restart would index blocks
        // the new contents overwrote (they would fail verification, as errors).
        let superblock = self.device.superblock;
        let blank = Bytes::from(vec![0u8; HEADER_BYTES as usize]);
        let invalidated = self
            .device
            .write_at(superblock.segment_offset(segment), blank)
            .and_then(|()| self.device.flush());
        if invalidated.is_err() {
            self.device.write_errors.fetch_add(1, Ordering::Relaxed);
            self.shared.failed(&self.device);
            self.device.segments.lock().abandon(segment);
            return;
        }
        self.filling = Some(Filling {
            segment,
            cursor_bytes: HEADER_BYTES,
            entries: Vec::new(),
        });
    }

    /// Copies forward the most valued of `live` (the blocks of `segment`, filled at epoch
    /// `epoch`, just taken for reuse and not yet overwritten, that had not gone up to RAM): at
    /// most half a segment's worth, each read at least `admit_frequency_min` times lately.
    /// The highest frequency among the others becomes the admission bar.
    fn copy_forward(&mut self, segment: u32, epoch: u64, live: Vec<(SummaryEntry, EntryState)>) {
        let now = self.shared.epoch();
        let minimum = self.shared.config.admit_frequency_min.max(1);
        let mut ranked: Vec<(u8, SummaryEntry)> = live
            .into_iter()
            .filter(|(_, state)| !state.promoted)
            .map(|(entry, state)| {
                let frequency = segments::aged(u64::from(state.frequency), epoch, now) as u8;
                (frequency, entry)
            })
            .collect();
        ranked.sort_by_key(|(frequency, _)| std::cmp::Reverse(*frequency));
        let superblock = self.device.superblock;
        let start = superblock.segment_offset(segment);
        let mut budget = superblock.segment_bytes / 2;
        let mut bar = 0u8;
        for (frequency, entry) in ranked {
            let padded = u64::from(sectors_for(entry.psize as usize)) * SECTOR_BYTES;
            if frequency < minimum || padded > budget {
                bar = bar.max(frequency);
                budget = 0;
                continue;
            }
            budget -= padded;
            let offset = start + u64::from(entry.offset_sectors) * SECTOR_BYTES;
            let Ok(data) = self
                .device
                .read_at(IoClass::AsyncRead, offset, entry.psize as usize)
            else {
                self.device.read_errors.fetch_add(1, Ordering::Relaxed);
                self.shared.failed(&self.device);
                return;
            };
            self.shared
                .counters
                .copied_forward
                .fetch_add(1, Ordering::Relaxed);
            self.survivors.push_back(FeedItem {
                key: entry.key,
                data: Bytes::from_owner(data),
                encode: Compression::Off,
                frequency,
            });
        }
        self.shared.set_bar(bar);
    }

    /// Removes a sealed segment's blocks from the index and counts them evicted.
    fn drop_segment(&mut self, segment: u32) {
        let entries = u64::from(self.device.segments.lock().meta(segment).entries);
        self.drop_entries(segment);
        let counters = &self.shared.counters;
        counters.evicted_segments.fetch_add(1, Ordering::Relaxed);
        counters
            .evicted_blocks
            .fetch_add(entries, Ordering::Relaxed);
    }

    /// Removes `segment`'s blocks from the index: by its summary, read back, or by a sweep of
    /// the index when the summary cannot be read. Returns the blocks that were indexed there,
    /// with their state.
    fn drop_entries(&self, segment: u32) -> Vec<(SummaryEntry, EntryState)> {
        let superblock = self.device.superblock;
        let segment_sectors = segment * superblock.sectors_per_segment();
        match self.device.read_summary(segment, IoClass::AsyncRead) {
            Some(entries) => entries
                .into_iter()
                .filter_map(|entry| {
                    let place = Place {
                        device: self.device.slot,
                        sector: segment_sectors + entry.offset_sectors,
                    };
                    let state = self.shared.index_take_at(entry.key, place)?;
                    Some((entry, state))
                })
                .collect(),
            None => {
                let slot = self.device.slot;
                let end = segment_sectors + superblock.sectors_per_segment();
                self.shared.index_retain(|place| {
                    place.device != slot || !(segment_sectors..end).contains(&place.sector)
                });
                Vec::new()
            }
        }
    }

    /// Indexes the most valued segment still unindexed; ends the rebuild when none is left.
    fn rebuild_one(&mut self) {
        let next = {
            let segments = self.device.segments.lock();
            (0..segments.len() as u32)
                .filter(|segment| segments.meta(*segment).state == SegmentState::Unindexed)
                .max_by_key(|segment| (segments.hits(*segment), segments.meta(*segment).sequence))
        };
        let Some(segment) = next.filter(|_| self.usable()) else {
            self.rebuilding = false;
            self.device.rebuild_pending.store(0, Ordering::Relaxed);
            for done in self.settles_waiting.drain(..) {
                let _ = done.send(());
            }
            return;
        };
        let counters = &self.shared.counters;
        let Some(entries) = self.device.read_summary(segment, IoClass::AsyncRead) else {
            counters.rebuild_failed.fetch_add(1, Ordering::Relaxed);
            self.device.segments.lock().abandon(segment);
            self.device.rebuild_pending.fetch_sub(1, Ordering::Relaxed);
            return;
        };
        let superblock = self.device.superblock;
        let segment_sectors = segment * superblock.sectors_per_segment();
        let mut used_bytes = 0;
        let mut indexed = 0;
        for entry in &entries {
            let place = Place {
                device: self.device.slot,
                sector: segment_sectors + entry.offset_sectors,
            };
            let state = EntryState {
                promoted: false,
                frequency: 1,
            };
            if self.shared.index_insert(entry.key, place, state).is_err() {
                break;
            }
            indexed += 1;
            used_bytes += u64::from(sectors_for(entry.psize as usize)) * SECTOR_BYTES;
        }
        counters.rebuild_segments.fetch_add(1, Ordering::Relaxed);
        counters
            .rebuild_blocks
            .fetch_add(indexed, Ordering::Relaxed);
        self.device
            .segments
            .lock()
            .indexed(segment, used_bytes, indexed, self.shared.epoch());
        self.device.rebuild_pending.fetch_sub(1, Ordering::Relaxed);
    }
}
