//! `EmulatedDevice`: any backing device made to behave like a model disk, SSD, NVMe or RAM disk.
//!
//! Three jobs, each independent of the others:
//!
//! 1. Latency. With a clock, every request is timed by the model (`model::ModelTimer`) and the
//!    caller waits until its completion time. Requests serialise on the device's resources (one
//!    mechanism for the disk, N channels and one link for flash), so concurrent callers queue as
//!    on real hardware. On a `VirtualClock` nothing sleeps and tests compute IOPS and MB/s from
//!    virtual time; with no clock there is no latency at all.
//! 2. Durability. Models with a volatile write cache (hdd-7200, ssd-sata, nvme) keep
//!    acknowledged writes in memory (`cache::WriteCache`) until a flush writes them to the
//!    backing device and flushes it. Reads overlay cached writes on the backing's bytes.
//!    Models with power-loss protection (ssd-plp) and the RAM disk keep no volatile state:
//!    acknowledged means durable. Optionally a seeded coin destages a random cached write early
//!    after each write, as real drives do in no particular order. A FUA write
//!    (`write_vectored_at_fua`) goes straight to the backing device (dropping any older cached
//!    copy of its range) and, on the disk, completes once the model has destaged it. Every flush
//!    ends with a flush of the backing device, so the host's copy is durable too; on a real
//!    clock a request takes the longer of the model's time and the backing's own time (put
//!    backing files on tmpfs for what-if runs of fast models).
//!
//!    What a power cut (`power_cut`, or a `PowerSwitch` tripping) leaves, as on real hardware:
//!    - a write that returned is on media if it was a FUA write, if a flush returned after it,
//!      or if the model has no volatile cache; a cached one may be lost, or torn (a random
//!      subset of its 512-byte sectors lands);
//!    - a write in flight (submitted, not yet returned; FUA and multi-buffer writes included)
//!      lands in part: each of its sectors independently, whether it was still on its way, in
//!      the cache or already on the backing device (rolled back from an undo image). It then
//!      fails with `PoweredOff`, never `Ok`. A write that trips the switch is in flight. Only
//!      devices fed by a `PowerSwitch` track writes in flight (each keeps a copy of its bytes and
//!      an undo image until it returns); a bare `power_cut` lands them whole;
//!    - a discard is durable on return on models without a volatile cache; on the others only
//!      after a flush, and a cut may lose it. The discard that trips the switch is lost;
//!    - a sector is never split, and never holds bytes older than an acknowledged durable write.
//!
//!    Afterwards every call fails with `PoweredOff`. Killing the process loses the cache the
//!    same way, because it only ever lived in memory.
//! 3. Faults. `FaultConfig` (changeable at run time) injects read/write EIO, bit flips in read
//!    data, misdirected writes, lost writes and a missing device; `corrupt_backing` damages the
//!    stored bytes directly.
//!
//! Determinism: every random choice comes from one `SmallRng` seeded from `EmuOptions::seed`, and
//! is drawn under the device lock in request order, so a given seed and request sequence always
//! produce the same outcome. (Timing on a real clock is, of course, not deterministic.)
//!
//! Locking: `power` (read for every operation, write for a power cut, so a cut waits for
//! operations in flight) is taken before `inner`; `timer` is taken alone. Nobody sleeps while
//! holding a lock. A power cut releases the backing device, so the test can reopen its file
//! (and take its lock) even while this object is still referenced.

mod cache;
mod hdd;
mod inflight;
mod model;
mod power;

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

pub use cairn_device::clock::{Clock, RealClock, VirtualClock};
use cairn_device::device::{Device, DeviceError, check_range};
use parking_lot::{Mutex, RwLock};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

pub use inflight::InFlightTear;
pub use model::{DeviceModel, ModelTimer, TimedOp};
pub use power::{CutReport, OpKind, PowerSwitch};

use cache::WriteCache;
use inflight::InFlight;
use power::Verdict;

/// Size of the sectors a torn write is made of.
pub const SECTOR_BYTES: u64 = 512;
/// `corrupt_backing` flips one bit per this many bytes.
pub const CORRUPTION_STRIDE_BYTES: u64 = 4096;

/// How an `EmulatedDevice` behaves beyond its model.
#[derive(Clone)]
pub struct EmuOptions {
    /// Seeds every random choice (faults, early destage, tearing).
    pub seed: u64,
    /// Time source for latency; `None` means no latency at all.
    pub clock: Option<Arc<dyn Clock>>,
    /// After each write, the probability that one random cached write is destaged early.
    pub destage_per_write_probability: f64,
    /// A power supply shared with other devices (crash tests).
    pub power: Option<Arc<PowerSwitch>>,
}

impl Default for EmuOptions {
    fn default() -> Self {
        EmuOptions {
            seed: 0,
            clock: Some(Arc::new(RealClock::new())),
            destage_per_write_probability: 0.0,
            power: None,
        }
    }
}

impl fmt::Debug for EmuOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmuOptions")
            .field("seed", &self.seed)
            .field("clock", &self.clock.as_ref().map(|_| "..."))
            .field(
                "destage_per_write_probability",
                &self.destage_per_write_probability,
            )
            .field("power", &self.power)
            .finish()
    }
}

/// Faults to inject; probabilities are per request, in [0, 1].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// A read fails with an injected EIO.
    pub read_eio_probability: f64,
    /// A write fails with an injected EIO (nothing is written).
    pub write_eio_probability: f64,
    /// One random bit of the returned data is flipped (the stored data stays intact).
    pub read_bit_flip_probability: f64,
    /// The write lands at another sector-aligned offset, and is acknowledged.
    pub misdirected_write_probability: f64,
    /// The write is acknowledged and never stored.
    pub lost_write_probability: f64,
    /// The device is gone: every operation fails with `Missing`.
    pub missing: bool,
}

/// Counters of an emulated device (a snapshot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmuStats {
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub discards: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Time at least one request was in service (virtual or real, per the clock).
    pub busy_time: Duration,
    /// Writes acknowledged but not yet on the backing device.
    pub pending_writes: u64,
    pub pending_bytes: u64,
    /// Cached writes destaged early by the seeded coin.
    pub early_destages: u64,
    /// Cached writes destaged because the cache was full.
    pub overflow_destages: u64,
    pub injected_read_eio: u64,
    pub injected_write_eio: u64,
    pub injected_bit_flips: u64,
    pub injected_misdirected_writes: u64,
    pub injected_lost_writes: u64,
    pub powered_off: bool,
}

struct Inner {
    rng: SmallRng,
    cache: WriteCache,
    /// Discards acknowledged but not yet flushed (models with a volatile cache only): a cut
    /// may lose them. Never overlap a cached write; newer than the backing's bytes they cover.
    pending_discards: Vec<(u64, u64)>,
    /// Writes submitted and not yet returned (only on a device fed by a `PowerSwitch`).
    in_flight: InFlight,
    faults: FaultConfig,
    stats: EmuStats,
}

impl Inner {
    /// A write of `[offset, offset + len)` supersedes the pending discards it overlaps.
    fn trim_discards(&mut self, offset: u64, len: u64) {
        if self.pending_discards.is_empty() {
            return;
        }
        let end = offset + len;
        let mut kept = Vec::with_capacity(self.pending_discards.len() + 1);
        for &(start, length) in &self.pending_discards {
            let stop = start + length;
            if stop <= offset || start >= end {
                kept.push((start, length));
                continue;
            }
            if start < offset {
                kept.push((start, offset - start));
            }
            if stop > end {
                kept.push((end, stop - end));
            }
        }
        self.pending_discards = kept;
    }
}

/// What one device lost or tore at a power cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceCut {
    /// The writes in flight, torn sector by sector.
    pub in_flight: InFlightTear,
    /// Acknowledged writes still in the volatile cache (torn or dropped).
    pub cached_writes: u64,
    /// Acknowledged discards not yet flushed (each kept or lost).
    pub pending_discards: u64,
}

/// A backing device behaving like `model`.
pub struct EmulatedDevice {
    model: DeviceModel,
    description: String,
    size_bytes: u64,
    clock: Option<Arc<dyn Clock>>,
    destage_probability: f64,
    /// The backing device while powered; `None` after a power cut.
    power: RwLock<Option<Arc<dyn Device>>>,
    inner: Mutex<Inner>,
    timer: Mutex<ModelTimer>,
    switch: OnceLock<Arc<PowerSwitch>>,
}

impl fmt::Debug for EmulatedDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmulatedDevice")
            .field("description", &self.description)
            .field("size_bytes", &self.size_bytes)
            .finish_non_exhaustive()
    }
}

fn roll(rng: &mut SmallRng, probability: f64) -> bool {
    probability > 0.0 && rng.random_bool(probability.min(1.0))
}

impl EmulatedDevice {
    pub fn new(
        backing: Arc<dyn Device>,
        model: DeviceModel,
        options: EmuOptions,
    ) -> Arc<EmulatedDevice> {
        let size_bytes = backing.size_bytes();
        let device = Arc::new(EmulatedDevice {
            model,
            description: format!("emu:{}:{}", model.name(), backing.describe()),
            size_bytes,
            clock: options.clock,
            destage_probability: options.destage_per_write_probability.clamp(0.0, 1.0),
            power: RwLock::new(Some(backing)),
            inner: Mutex::new(Inner {
                rng: SmallRng::seed_from_u64(options.seed),
                cache: WriteCache::default(),
                pending_discards: Vec::new(),
                in_flight: InFlight::default(),
                faults: FaultConfig::default(),
                stats: EmuStats::default(),
            }),
            timer: Mutex::new(ModelTimer::new(model, size_bytes)),
            switch: OnceLock::new(),
        });
        if let Some(switch) = &options.power {
            switch.attach(&device);
        }
        device
    }

    pub fn model(&self) -> DeviceModel {
        self.model
    }

    /// The backing device, or `None` after a power cut.
    pub fn backing(&self) -> Option<Arc<dyn Device>> {
        self.power.read().clone()
    }

    pub fn set_faults(&self, faults: FaultConfig) {
        self.inner.lock().faults = faults;
    }

    pub fn faults(&self) -> FaultConfig {
        self.inner.lock().faults
    }

    pub fn stats(&self) -> EmuStats {
        let busy_time = self.busy_time();
        let powered_off = self.is_powered_off();
        let inner = self.inner.lock();
        EmuStats {
            busy_time,
            pending_writes: inner.cache.len() as u64,
            pending_bytes: inner.cache.bytes(),
            powered_off,
            ..inner.stats
        }
    }

    /// Time the device had at least one request in service, per the model.
    pub fn busy_time(&self) -> Duration {
        self.timer.lock().busy_time()
    }

    pub fn is_powered_off(&self) -> bool {
        self.power.read().is_none()
    }

    /// Cuts the power. Writes in flight (submitted, not returned) land in part: a random
    /// subset of their sectors. Cached writes are lost; with `tear`, a seeded subset of them
    /// first gets a random subset of their 512-byte sectors onto the backing device, and each
    /// unflushed discard happens or not by a coin flip (without `tear`, none does). Afterwards
    /// every call fails with `PoweredOff` and the backing device is released. Idempotent: a
    /// second cut reports nothing.
    pub fn power_cut(&self, tear: bool) -> DeviceCut {
        let mut power = self.power.write();
        let Some(backing) = power.take() else {
            return DeviceCut::default();
        };
        let mut inner = self.inner.lock();
        let inner = &mut *inner;
        let mut cut = DeviceCut {
            in_flight: inner.in_flight.tear(&mut inner.rng, &*backing),
            ..DeviceCut::default()
        };
        let pending = inner.cache.drain();
        cut.cached_writes = pending.len() as u64;
        let discards = std::mem::take(&mut inner.pending_discards);
        cut.pending_discards = discards.len() as u64;
        if tear {
            for p in &pending {
                if !inner.rng.random_bool(0.5) {
                    continue;
                }
                let end = p.offset + p.data.len() as u64;
                let mut pos = p.offset;
                while pos < end {
                    let piece_end = ((pos / SECTOR_BYTES + 1) * SECTOR_BYTES).min(end);
                    if inner.rng.random_bool(0.5) {
                        let piece =
                            &p.data[(pos - p.offset) as usize..(piece_end - p.offset) as usize];
                        // The power is going: a failure here just means the sector did not land.
                        let _ = backing.write_at(pos, piece);
                    }
                    pos = piece_end;
                }
            }
            for (offset, len) in discards {
                if inner.rng.random_bool(0.5) {
                    // As above: a failed discard is a discard that did not happen.
                    let _ = backing.discard(offset, len);
                }
            }
        }
        inner.stats.powered_off = true;
        cut
    }

    /// Flips one random bit in each 4 KiB of `[offset, offset + len)` on the backing device
    /// (bypassing the write cache). Deterministic for a given `rng_seed`.
    pub fn corrupt_backing(&self, offset: u64, len: u64, rng_seed: u64) -> Result<(), DeviceError> {
        let power = self.power.read();
        let Some(backing) = power.as_ref() else {
            return Err(self.powered_off());
        };
        check_range(self, "corrupt", offset, len)?;
        let mut rng = SmallRng::seed_from_u64(rng_seed);
        let end = offset + len;
        let mut chunk = offset;
        while chunk < end {
            let chunk_end = (chunk + CORRUPTION_STRIDE_BYTES).min(end);
            let at = rng.random_range(chunk..chunk_end);
            let bit = rng.random_range(0..8u32);
            let mut byte = [0u8];
            backing.read_at(at, &mut byte)?;
            byte[0] ^= 1 << bit;
            backing.write_at(at, &byte)?;
            chunk = chunk_end;
        }
        Ok(())
    }

    fn powered_off(&self) -> DeviceError {
        DeviceError::PoweredOff {
            device: self.description.clone(),
        }
    }

    /// Checks shared by every operation: power first, then presence, then the range.
    fn precheck(&self, op: &'static str, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.power.read().is_none() {
            return Err(self.powered_off());
        }
        if self.inner.lock().faults.missing {
            return Err(DeviceError::Missing {
                device: self.description.clone(),
            });
        }
        check_range(self, op, offset, len)
    }

    /// Counts a write, flush or discard on the power switch, which may trip now.
    fn count_on_switch(&self, kind: OpKind) -> Result<(), DeviceError> {
        match self.switch.get().map(|s| s.count_op(kind)) {
            Some(Verdict::PoweredOff) => Err(self.powered_off()),
            _ => Ok(()),
        }
    }

    fn now(&self) -> Option<Duration> {
        self.clock.as_ref().map(|c| c.now())
    }

    /// Times `op` (which arrived at `arrival`) and waits until it completes.
    fn complete(&self, arrival: Option<Duration>, op: TimedOp) {
        if let (Some(clock), Some(arrival)) = (&self.clock, arrival) {
            let done = self.timer.lock().submit(arrival, op);
            clock.sleep_until(done);
        }
    }

    /// A write, with Force Unit Access or not. On a device fed by a power switch the write is
    /// registered as in flight before it is counted (so the write that trips the switch is
    /// torn by the cut) until it returns: one a cut caught fails with `PoweredOff`.
    fn write_impl(&self, offset: u64, bufs: &[&[u8]], fua: bool) -> Result<(), DeviceError> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.precheck("write", offset, len)?;
        let tracked = self
            .switch
            .get()
            .map(|_| self.inner.lock().in_flight.begin(offset, bufs));
        let result = self.write_tracked(offset, bufs, len, fua, tracked);
        let Some(id) = tracked else {
            return result;
        };
        if !self.inner.lock().in_flight.finish(id) {
            // A cut caught this write in flight: some of its sectors may be missing.
            return Err(self.powered_off());
        }
        result
    }

    /// The body of a write: the switch, faults, then the cache (or, for FUA and for models
    /// without a volatile cache, the backing device), then the model's timing.
    fn write_tracked(
        &self,
        offset: u64,
        bufs: &[&[u8]],
        len: u64,
        fua: bool,
        tracked: Option<u64>,
    ) -> Result<(), DeviceError> {
        let kind = if fua { OpKind::WriteFua } else { OpKind::Write };
        self.count_on_switch(kind)?;
        let power = self.power.read();
        let Some(backing) = power.as_ref() else {
            return Err(self.powered_off());
        };
        let arrival = self.now();
        let mut inner = self.inner.lock();
        let faults = inner.faults;
        if roll(&mut inner.rng, faults.write_eio_probability) {
            inner.stats.injected_write_eio += 1;
            return Err(self.injected("EIO", "write", offset));
        }
        let lost = roll(&mut inner.rng, faults.lost_write_probability);
        let mut target = offset;
        if roll(&mut inner.rng, faults.misdirected_write_probability) {
            let slots = self.size_bytes.saturating_sub(len) / SECTOR_BYTES;
            if slots > 0 {
                let mut slot = inner.rng.random_range(0..=slots);
                if slot * SECTOR_BYTES == offset {
                    slot = (slot + 1) % (slots + 1);
                }
                target = slot * SECTOR_BYTES;
                inner.stats.injected_misdirected_writes += 1;
            }
        }
        inner.stats.writes += 1;
        inner.stats.write_bytes += len;
        let volatile = self.model.has_volatile_cache();
        let straight_to_media = !lost && (fua || !volatile);
        if !lost {
            inner.trim_discards(target, len);
        }
        if let Some(id) = tracked {
            if straight_to_media {
                let mut undo = vec![0u8; len as usize];
                backing.read_at(target, &mut undo)?;
                inner.in_flight.applied(id, target, undo);
            } else {
                inner.in_flight.settled(id, target, len);
            }
        }
        if lost {
            inner.stats.injected_lost_writes += 1;
        } else if fua && volatile {
            // Straight to the platter: an older cached copy of the range must not be destaged
            // over it later, and the host's copy must be durable too.
            inner.cache.trim(target, len);
            backing.write_vectored_at_fua(target, bufs)?;
        } else if volatile {
            inner.cache.insert(target, bufs.concat());
            self.destage_for_space(&mut inner, &**backing)?;
        }
        // Never held while waiting for the model: other requests must be able to arrive (and
        // queue on the device) meanwhile.
        drop(inner);
        if straight_to_media && !volatile {
            // No volatile cache: acknowledged means durable, for the host's copy as well when
            // the write asked for it.
            if fua {
                backing.write_vectored_at_fua(target, bufs)?;
            } else {
                backing.write_vectored_at(target, bufs)?;
            }
        }
        drop(power);
        let op = if fua {
            TimedOp::WriteFua { offset, len }
        } else {
            TimedOp::Write { offset, len }
        };
        self.complete(arrival, op);
        Ok(())
    }

    /// After a write into the cache: destages the oldest entries while the cache is over its
    /// size, then maybe one random entry early (the seeded coin).
    fn destage_for_space(
        &self,
        inner: &mut Inner,
        backing: &dyn Device,
    ) -> Result<(), DeviceError> {
        while inner.cache.bytes() > self.model.volatile_cache_bytes() {
            let oldest = inner.cache.pop_oldest().expect("a non-empty cache");
            if let Err(e) = backing.write_at(oldest.offset, &oldest.data) {
                inner.cache.restore(oldest);
                return Err(e);
            }
            inner.stats.overflow_destages += 1;
        }
        if !inner.cache.is_empty() && roll(&mut inner.rng, self.destage_probability) {
            let entries = inner.cache.len();
            let n = inner.rng.random_range(0..entries);
            let early = inner.cache.remove_nth(n).expect("n < len");
            if let Err(e) = backing.write_at(early.offset, &early.data) {
                inner.cache.restore(early);
                return Err(e);
            }
            inner.stats.early_destages += 1;
        }
        Ok(())
    }

    fn injected(&self, fault: &'static str, op: &'static str, offset: u64) -> DeviceError {
        DeviceError::Injected {
            device: self.description.clone(),
            fault,
            op,
            offset,
        }
    }
}

impl Device for EmulatedDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        self.precheck("read", offset, len)?;
        let power = self.power.read();
        let Some(backing) = power.as_ref() else {
            return Err(self.powered_off());
        };
        let arrival = self.now();
        let mut inner = self.inner.lock();
        let faults = inner.faults;
        if roll(&mut inner.rng, faults.read_eio_probability) {
            inner.stats.injected_read_eio += 1;
            return Err(self.injected("EIO", "read", offset));
        }
        let flip_bit = if len > 0 && roll(&mut inner.rng, faults.read_bit_flip_probability) {
            inner.stats.injected_bit_flips += 1;
            Some(inner.rng.random_range(0..len * 8))
        } else {
            None
        };
        inner.stats.reads += 1;
        inner.stats.read_bytes += len;
        if self.model.has_volatile_cache() {
            // Hold the cache lock across the backing read so no destage slips in between.
            backing.read_vectored_at(offset, bufs)?;
            inner.cache.overlay(offset, bufs);
            drop(inner);
        } else {
            drop(inner);
            backing.read_vectored_at(offset, bufs)?;
        }
        if let Some(bit) = flip_bit {
            let mut byte_index = (bit / 8) as usize;
            for buf in bufs.iter_mut() {
                if byte_index < buf.len() {
                    buf[byte_index] ^= 1 << (bit % 8);
                    break;
                }
                byte_index -= buf.len();
            }
        }
        drop(power);
        self.complete(arrival, TimedOp::Read { offset, len });
        Ok(())
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        self.write_impl(offset, bufs, false)
    }

    fn write_vectored_at_fua(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        self.write_impl(offset, bufs, true)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.precheck("flush", 0, 0)?;
        self.count_on_switch(OpKind::Flush)?;
        let power = self.power.read();
        let Some(backing) = power.as_ref() else {
            return Err(self.powered_off());
        };
        let arrival = self.now();
        let mut inner = self.inner.lock();
        // Discards first: they never overlap a cached write, and are newer than the backing's
        // bytes they cover.
        while let Some((offset, len)) = inner.pending_discards.pop() {
            if let Err(e) = backing.discard(offset, len) {
                inner.pending_discards.push((offset, len));
                return Err(e);
            }
        }
        while let Some(p) = inner.cache.pop_oldest() {
            if let Err(e) = backing.write_at(p.offset, &p.data) {
                inner.cache.restore(p);
                return Err(e);
            }
        }
        backing.flush()?;
        inner.stats.flushes += 1;
        drop(inner);
        drop(power);
        self.complete(arrival, TimedOp::Flush);
        Ok(())
    }

    /// A discard goes through the power switch like a write. On a model with a volatile cache it
    /// is only durable after a flush (a cut may lose it); on the others once it returns. The
    /// discard that trips the switch is lost.
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.precheck("discard", offset, len)?;
        self.count_on_switch(OpKind::Discard)?;
        let power = self.power.read();
        let Some(backing) = power.as_ref() else {
            return Err(self.powered_off());
        };
        let arrival = self.now();
        let mut inner = self.inner.lock();
        inner.cache.trim(offset, len);
        if self.model.has_volatile_cache() {
            inner.trim_discards(offset, len);
            inner.pending_discards.push((offset, len));
        } else {
            backing.discard(offset, len)?;
        }
        inner.stats.discards += 1;
        drop(inner);
        drop(power);
        self.complete(arrival, TimedOp::Discard { offset, len });
        Ok(())
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn is_rotational(&self) -> bool {
        self.model.is_rotational()
    }

    fn concurrency_hint(&self) -> usize {
        self.model.concurrency_hint()
    }
}

#[cfg(test)]
mod tests;
