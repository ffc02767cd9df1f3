//! One cache device as its writer and readers share it (`CacheDevice`): its queue, superblock,
//! segment table, health and error counts, and its daily write allowance (`Allowance`); what
//! `stat l2arc` shows of it (`DeviceReport`); and opening one again: its superblock
//! (`read_superblock`) and the scan of its segment headers that starts the rebuild
//! (`scan_headers`).
//!
//! Invariant: every I/O of the device goes through its `LeafQueue` (see the crate doc, I/O).
//! Among the crate's modules this one depends on `layout` and `segments` only (and on the crate
//! root's `L2Config`, `L2Error` and `Shared`); `read` and `writer` build on it.

use crate::layout::{self, SegmentHeader, Superblock};
use crate::segments::{SegmentState, SegmentTable};
use crate::{L2Config, L2Error, Shared};
use bytes::Bytes;
use cairn_device::{DeviceError, IoClass, LeafQueue, ReadBuf};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// Health of a cache device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum L2Health {
    Online,
    Faulted,
}

/// One cache device, as its writer and readers share it.
pub struct CacheDevice {
    pub name: String,
    pub(crate) slot: u8,
    /// Every I/O of the device goes through its queue: readers' at `IoClass::CacheRead`, the
    /// writer's feed at `IoClass::CacheWrite`, the writer's own reads (rebuild, summaries,
    /// copy-forward) at `IoClass::AsyncRead`.
    pub(crate) queue: Arc<LeafQueue>,
    pub(crate) superblock: Superblock,
    pub(crate) segments: Mutex<SegmentTable>,
    pub(crate) health: AtomicU8,
    /// Consecutive failed I/Os (reset by a success).
    pub(crate) failures_in_row: AtomicU64,
    pub read_errors: AtomicU64,
    pub write_errors: AtomicU64,
    pub checksum_errors: AtomicU64,
    /// Segments whose summaries the rebuild has still to read.
    pub(crate) rebuild_pending: AtomicUsize,
    /// What the daily write budget lets the writer write now (unused without a budget).
    pub(crate) allowance: Mutex<Allowance>,
}

/// A device's write allowance: a bucket filled at `write_bytes_per_day` (continuously, not at
/// midnight), holding at most a day's budget or the device's size, whichever is more, and
/// starting full with the device's size (its first fill is free).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Allowance {
    bytes: f64,
    at: std::time::Instant,
}

impl Allowance {
    pub(crate) fn new(size_bytes: u64) -> Allowance {
        Allowance {
            bytes: size_bytes as f64,
            at: std::time::Instant::now(),
        }
    }

    /// Bytes that may be written at `now`.
    pub(crate) fn left_bytes(&self, per_day: u64, size_bytes: u64, now: std::time::Instant) -> f64 {
        let refill =
            now.saturating_duration_since(self.at).as_secs_f64() * per_day as f64 / SECONDS_PER_DAY;
        (self.bytes + refill).min((per_day as f64).max(size_bytes as f64))
    }

    /// Takes `bytes` of the allowance if that much is left at `now`.
    pub(crate) fn take(
        &mut self,
        bytes: u64,
        per_day: u64,
        size_bytes: u64,
        now: std::time::Instant,
    ) -> bool {
        self.bytes = self.left_bytes(per_day, size_bytes, now);
        self.at = now;
        if self.bytes < bytes as f64 {
            return false;
        }
        self.bytes -= bytes as f64;
        true
    }
}

const SECONDS_PER_DAY: f64 = 86_400.0;

/// What `stat l2arc` and `pool status` show of one device.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DeviceReport {
    pub name: String,
    pub size_bytes: u64,
    pub alloc_bytes: u64,
    pub health: L2Health,
    pub read_errors: u64,
    pub write_errors: u64,
    pub checksum_errors: u64,
    pub segments: usize,
    pub segments_sealed: usize,
    pub rebuild_pending: usize,
    /// Bytes the daily write budget lets the device be written now (`None`: no budget).
    pub write_budget_left_bytes: Option<u64>,
}

impl CacheDevice {
    pub fn health(&self) -> L2Health {
        match self.health.load(Ordering::Acquire) {
            0 => L2Health::Online,
            _ => L2Health::Faulted,
        }
    }

    pub(crate) fn usable(&self) -> bool {
        self.health() == L2Health::Online
    }

    pub(crate) fn size_bytes(&self) -> u64 {
        self.queue.device().size_bytes()
    }

    /// A sealed segment's summary, read back (header, then summary) at `class`.
    pub(crate) fn read_summary(
        &self,
        segment: u32,
        class: IoClass,
    ) -> Option<Vec<layout::SummaryEntry>> {
        let superblock = self.superblock;
        let start = superblock.segment_offset(segment);
        let raw = self
            .read_at(class, start, layout::HEADER_BYTES as usize)
            .ok()?;
        let header = SegmentHeader::decode(&raw, superblock.segment_bytes).ok()??;
        let summary = self
            .read_at(
                class,
                start + u64::from(header.summary_offset_bytes),
                header.summary_bytes(),
            )
            .ok()?;
        layout::decode_summary(&summary, &header).ok()
    }

    /// The device queue's counters (`cairn stat io`).
    pub fn queue_stats(&self) -> cairn_device::QueueStats {
        self.queue.stats()
    }

    /// Reads `len` bytes at `offset` through the device's queue, at `class`.
    pub(crate) fn read_at(
        &self,
        class: IoClass,
        offset: u64,
        len: usize,
    ) -> Result<ReadBuf, DeviceError> {
        self.queue.read_sync(class, offset, len)
    }

    /// Writes `data` at `offset` as feeding (`IoClass::CacheWrite`) and waits for it.
    pub(crate) fn write_at(&self, offset: u64, data: Bytes) -> Result<(), DeviceError> {
        self.queue.write_sync(IoClass::CacheWrite, offset, data)
    }

    /// Makes every write completed before it durable (the queue waits for earlier writes).
    pub(crate) fn flush(&self) -> Result<(), DeviceError> {
        self.queue.flush()
    }

    pub(crate) fn report(&self, config: &L2Config) -> DeviceReport {
        let write_budget_left_bytes = config.write_bytes_per_day.map(|per_day| {
            self.allowance
                .lock()
                .left_bytes(per_day, self.size_bytes(), std::time::Instant::now())
                as u64
        });
        let segments = self.segments.lock();
        DeviceReport {
            name: self.name.clone(),
            size_bytes: self.size_bytes(),
            alloc_bytes: segments.used_bytes(),
            health: self.health(),
            read_errors: self.read_errors.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
            checksum_errors: self.checksum_errors.load(Ordering::Relaxed),
            segments: segments.len(),
            segments_sealed: segments.count(SegmentState::Sealed),
            rebuild_pending: self.rebuild_pending.load(Ordering::Relaxed),
            write_budget_left_bytes,
        }
    }
}

pub(crate) fn read_superblock(name: &str, queue: &LeafQueue) -> Result<Superblock, L2Error> {
    let mut first_error = None;
    for offset in [0, layout::SUPER_BYTES] {
        let buf = match queue.read_sync(IoClass::SyncRead, offset, layout::SUPER_BYTES as usize) {
            Ok(buf) => buf,
            Err(source) => {
                first_error.get_or_insert(L2Error::Device {
                    device: name.to_string(),
                    source,
                });
                continue;
            }
        };
        match Superblock::decode(&buf) {
            Ok(superblock) => return Ok(superblock),
            Err(source) => {
                first_error.get_or_insert(L2Error::Layout {
                    device: name.to_string(),
                    source,
                });
            }
        }
    }
    Err(first_error.unwrap_or_else(|| L2Error::NoSuchDevice(name.to_string())))
}

/// Reads every segment header of a device opened again (on its writer thread, so opening
/// never waits): sealed segments become `Unindexed`, their summaries read next, most hit first.
pub(crate) fn scan_headers(shared: &Shared, device: &CacheDevice) {
    let superblock = device.superblock;
    let mut found = 0;
    let segments: Vec<u32> = (0..superblock.segment_count as u32).collect();
    // A window of header reads in flight at once: the device serves them in parallel.
    for window in segments.chunks(SCAN_READS_IN_FLIGHT) {
        let reads: Vec<_> = window
            .iter()
            .map(|&segment| {
                let offset = superblock.segment_offset(segment);
                let read =
                    device
                        .queue
                        .read(IoClass::AsyncRead, offset, layout::HEADER_BYTES as usize);
                (segment, read)
            })
            .collect();
        for (segment, read) in reads {
            match read.wait() {
                Ok(buf) => found += scan_header(device, segment, &buf),
                Err(_) => {
                    device.read_errors.fetch_add(1, Ordering::Relaxed);
                    shared.failed(device);
                }
            }
        }
        if !device.usable() {
            return;
        }
    }
    device.rebuild_pending.store(found, Ordering::Relaxed);
}

/// Header reads in flight while scanning a device opened again.
const SCAN_READS_IN_FLIGHT: usize = 32;

/// Notes `segment` as sealed if `buf` is a valid header; 1 if it was, else 0.
fn scan_header(device: &CacheDevice, segment: u32, buf: &[u8]) -> usize {
    match SegmentHeader::decode(buf, device.superblock.segment_bytes) {
        Ok(Some(header)) => {
            device.segments.lock().found_sealed(
                segment,
                header.sequence,
                header.hits,
                header.entries,
            );
            1
        }
        _ => 0,
    }
}
