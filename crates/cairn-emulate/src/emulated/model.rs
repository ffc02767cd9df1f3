//! Device models: what kind of device to imitate, and when each request completes.
//!
//! A `DeviceModel` names a device class and states its durability rule (is the write cache
//! volatile?). A `ModelTimer` holds the model's timing state and turns a stream of requests
//! (arrival time, operation) into completion times. The figures, and where they come from:
//!
//! | model | read | write | flush | channels | cache |
//! |---|---|---|---|---|---|
//! | hdd-7200 | seek + rotation + media (see `hdd`) | ~0.1 ms into cache | destage everything | 1 | volatile 16 MiB |
//! | ssd-sata | 50 us + len / 500 MB/s | 25 us + len / 500 MB/s | 1.5 ms (20 us if clean) | 4 | volatile 32 MiB |
//! | ssd-plp | 65 us + len / 500 MB/s | 60 us + len / 400 MB/s | 20 us | 4 | none (power-loss protected) |
//! | nvme | 15 us + len / 2 GB/s | 15 us + len / 2 GB/s | 200 us (10 us if clean) | 8 | volatile 64 MiB |
//! | ram | 1.5 us + len / 8 GB/s | 1.5 us + len / 8 GB/s | 0 | 8 | none |
//!
//! Flash timing: each request takes a free channel (the one free earliest); the transfer is
//! serialised on one shared link (so N channels give N x the IOPS of small requests but not
//! N x the bandwidth). A flush waits for every channel to drain, as a SATA FLUSH CACHE (a
//! non-queued command) does. A FUA write is a queued command: on a model with a volatile
//! cache it costs its own programming time (`flush_dirty_ns`) on its channel, nothing more; on
//! the others it is an ordinary write. On the disk it completes when its data has been
//! destaged (see `hdd`).
//!
//! Invariant: completion >= arrival for every request; timer state only moves forward.

use std::fmt;
use std::time::Duration;

use cairn_device::clock::duration_to_ns;
use cairn_device::spec::DeviceSpec;

use super::hdd::{self, Hdd};

/// The device classes the emulator imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceModel {
    /// 7200 rpm SATA disk with its write cache enabled.
    Hdd7200,
    /// Consumer SATA SSD: fast, but its DRAM cache is lost at a power cut.
    SsdSata,
    /// Enterprise SSD with power-loss protection (the seeds' write-optimised log SSD).
    SsdPlp,
    /// Consumer NVMe drive: fast, with a DRAM write cache that is lost at a power cut (no
    /// power-loss protection, as on most client drives; a flush programs it, ~200 us).
    Nvme,
    /// RAM disk / NVRAM.
    Ram,
}

impl DeviceModel {
    /// Every model name, as accepted by `named` and written in `emu:MODEL:PATH`: the list a
    /// `DeviceSpec` is checked against when it is parsed (`cairn_device::spec::MODEL_NAMES`).
    pub const NAMES: [&'static str; 5] = cairn_device::spec::MODEL_NAMES;
    pub const ALL: [DeviceModel; 5] = [
        DeviceModel::Hdd7200,
        DeviceModel::SsdSata,
        DeviceModel::SsdPlp,
        DeviceModel::Nvme,
        DeviceModel::Ram,
    ];

    pub fn named(name: &str) -> Option<DeviceModel> {
        DeviceModel::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The model a spec names (`emu:MODEL:PATH`), if it names a known one.
    pub fn of_spec(spec: &DeviceSpec) -> Option<DeviceModel> {
        spec.model.as_deref().and_then(DeviceModel::named)
    }

    pub fn name(self) -> &'static str {
        match self {
            DeviceModel::Hdd7200 => "hdd-7200",
            DeviceModel::SsdSata => "ssd-sata",
            DeviceModel::SsdPlp => "ssd-plp",
            DeviceModel::Nvme => "nvme",
            DeviceModel::Ram => "ram",
        }
    }

    /// True if acknowledged writes are lost at a power cut until a flush completes.
    pub fn has_volatile_cache(self) -> bool {
        matches!(
            self,
            DeviceModel::Hdd7200 | DeviceModel::SsdSata | DeviceModel::Nvme
        )
    }

    /// Size of the volatile write cache (0 when writes are durable on completion). The emulator
    /// never holds more unflushed data than this; older entries are destaged first.
    pub fn volatile_cache_bytes(self) -> u64 {
        match self {
            DeviceModel::Hdd7200 => hdd::CACHE_BYTES,
            DeviceModel::SsdSata => 32 << 20,
            DeviceModel::Nvme => 64 << 20,
            _ => 0,
        }
    }

    pub fn is_rotational(self) -> bool {
        self == DeviceModel::Hdd7200
    }

    /// Requests the device serves in parallel (one mechanism, or N flash channels).
    pub fn concurrency_hint(self) -> usize {
        match self {
            DeviceModel::Hdd7200 => 1,
            DeviceModel::SsdSata | DeviceModel::SsdPlp => 4,
            DeviceModel::Nvme | DeviceModel::Ram => 8,
        }
    }

    fn flash_params(self) -> Option<FlashParams> {
        const MB: u64 = 1_000_000;
        let p = match self {
            DeviceModel::Hdd7200 => return None,
            DeviceModel::SsdSata => FlashParams {
                read_latency_ns: 50_000,
                write_latency_ns: 25_000,
                read_bytes_per_s: 500 * MB,
                write_bytes_per_s: 500 * MB,
                flush_dirty_ns: 1_500_000,
                flush_clean_ns: 20_000,
            },
            DeviceModel::SsdPlp => FlashParams {
                read_latency_ns: 65_000,
                write_latency_ns: 60_000,
                read_bytes_per_s: 500 * MB,
                write_bytes_per_s: 400 * MB,
                flush_dirty_ns: 20_000,
                flush_clean_ns: 20_000,
            },
            DeviceModel::Nvme => FlashParams {
                read_latency_ns: 15_000,
                write_latency_ns: 15_000,
                read_bytes_per_s: 2_000 * MB,
                write_bytes_per_s: 2_000 * MB,
                flush_dirty_ns: 200_000,
                flush_clean_ns: 10_000,
            },
            DeviceModel::Ram => FlashParams {
                read_latency_ns: 1_500,
                write_latency_ns: 1_500,
                read_bytes_per_s: 8_000 * MB,
                write_bytes_per_s: 8_000 * MB,
                flush_dirty_ns: 0,
                flush_clean_ns: 0,
            },
        };
        Some(p)
    }
}

impl fmt::Display for DeviceModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A request as the timing model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimedOp {
    Read {
        offset: u64,
        len: u64,
    },
    Write {
        offset: u64,
        len: u64,
    },
    /// A write with Force Unit Access: complete once its bytes are on stable media.
    WriteFua {
        offset: u64,
        len: u64,
    },
    Flush,
    Discard {
        offset: u64,
        len: u64,
    },
}

#[derive(Clone, Copy, Debug)]
struct FlashParams {
    read_latency_ns: u64,
    write_latency_ns: u64,
    read_bytes_per_s: u64,
    write_bytes_per_s: u64,
    flush_dirty_ns: u64,
    flush_clean_ns: u64,
}

#[derive(Debug)]
struct Flash {
    params: FlashParams,
    channel_free_ns: Vec<u64>,
    link_free_ns: u64,
    dirty: bool,
    /// The model has a volatile write cache (a FUA write pays for programming its data).
    volatile: bool,
}

impl Flash {
    fn take_channel(&mut self, t: u64) -> (usize, u64) {
        let (index, free_ns) = self
            .channel_free_ns
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, free)| free)
            .expect("at least one channel");
        (index, t.max(free_ns))
    }

    fn submit(&mut self, t: u64, op: TimedOp) -> u64 {
        let p = self.params;
        match op {
            TimedOp::Read { len, .. } => {
                let (ch, start_ns) = self.take_channel(t);
                let media_done_ns = start_ns + p.read_latency_ns;
                let link_start_ns = media_done_ns.max(self.link_free_ns);
                let done_ns = link_start_ns + transfer_ns(len, p.read_bytes_per_s);
                self.link_free_ns = done_ns;
                self.channel_free_ns[ch] = done_ns;
                done_ns
            }
            TimedOp::Write { len, .. } | TimedOp::WriteFua { len, .. } => {
                let (ch, start_ns) = self.take_channel(t);
                let link_start_ns = start_ns.max(self.link_free_ns);
                let link_done_ns = link_start_ns + transfer_ns(len, p.write_bytes_per_s);
                self.link_free_ns = link_done_ns;
                let mut done_ns = link_done_ns + p.write_latency_ns;
                if matches!(op, TimedOp::WriteFua { .. }) && self.volatile {
                    // Programmed to flash before completing, on this channel only.
                    done_ns += p.flush_dirty_ns;
                } else {
                    self.dirty = true;
                }
                self.channel_free_ns[ch] = done_ns;
                done_ns
            }
            TimedOp::Flush => {
                let drained_ns = self.channel_free_ns.iter().copied().fold(t, u64::max);
                let cost = if self.dirty {
                    p.flush_dirty_ns
                } else {
                    p.flush_clean_ns
                };
                let done_ns = drained_ns + cost;
                self.channel_free_ns.fill(done_ns);
                self.link_free_ns = self.link_free_ns.max(done_ns);
                self.dirty = false;
                done_ns
            }
            TimedOp::Discard { .. } => {
                let (ch, start_ns) = self.take_channel(t);
                let done_ns = start_ns + p.write_latency_ns;
                self.channel_free_ns[ch] = done_ns;
                done_ns
            }
        }
    }
}

fn transfer_ns(len: u64, bytes_per_s: u64) -> u64 {
    (len as u128 * 1_000_000_000 / bytes_per_s as u128) as u64
}

#[derive(Debug)]
enum Engine {
    Hdd(Box<Hdd>),
    Flash(Flash),
}

/// The timing state of one emulated device.
#[derive(Debug)]
pub struct ModelTimer {
    model: DeviceModel,
    engine: Engine,
    latest_arrival_ns: u64,
    busy_ns: u64,
    busy_mark_ns: u64,
}

impl ModelTimer {
    pub fn new(model: DeviceModel, device_size_bytes: u64) -> ModelTimer {
        let engine = match model.flash_params() {
            None => Engine::Hdd(Box::new(Hdd::new(device_size_bytes))),
            Some(params) => Engine::Flash(Flash {
                params,
                channel_free_ns: vec![0; model.concurrency_hint()],
                link_free_ns: 0,
                dirty: false,
                volatile: model.has_volatile_cache(),
            }),
        };
        ModelTimer {
            model,
            engine,
            latest_arrival_ns: 0,
            busy_ns: 0,
            busy_mark_ns: 0,
        }
    }

    pub fn model(&self) -> DeviceModel {
        self.model
    }

    /// Accepts `op` arriving at `arrival`; returns when it completes.
    pub fn submit(&mut self, arrival: Duration, op: TimedOp) -> Duration {
        // Arrivals are processed in order; a late-processed early arrival counts as "now".
        let t = duration_to_ns(arrival).max(self.latest_arrival_ns);
        self.latest_arrival_ns = t;
        let done_ns = match &mut self.engine {
            Engine::Flash(flash) => flash.submit(t, op),
            Engine::Hdd(hdd) => match op {
                TimedOp::Read { offset, len } => hdd.read(t, offset, len),
                TimedOp::Write { offset, len } => hdd.write(t, offset, len),
                TimedOp::WriteFua { offset, len } => hdd.write_fua(t, offset, len),
                TimedOp::Flush => hdd.flush(t),
                TimedOp::Discard { .. } => hdd.command(t),
            },
        };
        // Utilisation: the union of [arrival, completion] intervals.
        let counted_from = t.max(self.busy_mark_ns);
        self.busy_ns += done_ns.saturating_sub(counted_from);
        self.busy_mark_ns = self.busy_mark_ns.max(done_ns);
        Duration::from_nanos(done_ns)
    }

    /// Total time at least one request was outstanding.
    pub fn busy_time(&self) -> Duration {
        Duration::from_nanos(self.busy_ns)
    }
}
