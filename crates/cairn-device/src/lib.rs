//! # cairn-device: where bytes meet media
//!
//! The lowest layer. A `Device` is a flat array of bytes with vectored positional reads and
//! writes, a cache flush and a discard; it knows nothing of pools, blocks or checksums.
//!
//! - `file`: regular files and block devices (preadv/pwritev, fdatasync as flush, optional
//!   O_DIRECT, exclusive lock).
//! - `mem`: a sparse device in RAM, for tests and what-if runs.
//! - `emulated`: a wrapper that makes any backing device behave like a model disk, SSD, NVMe or
//!   RAM disk: latency from a model, a volatile write cache that loses (or tears) whatever was
//!   not flushed at a power cut, and fault injection.
//! - `clock`: real and virtual time, so models can be measured without waiting.
//! - `queue`: one `LeafQueue` per leaf, with priority classes and an offset-ordered view that
//!   merges adjacent requests into one vectored I/O.
//! - `iostats`: the queue's per-class waits, sizes and queue depths (power-of-two histograms).
//! - `spec`: the `emu:MODEL:PATH` device naming used on the command line and in labels.
//! - `record`: a write log of what reached a device's media, and `replay`, which rebuilds the
//!   images from it (crash tests keep it for a failing seed).
//! - `error_class`: `ErrorClass`, what any layer's error means to a client, and the one table
//!   from it to a POSIX errno (here because this is the crate every layer depends on).
//!
//! Invariant: a successful `flush` means every write that completed before it was issued is on
//! stable media. Nothing above this layer may assume more than that.

pub mod clock;
pub mod device;
pub mod emulated;
pub mod error_class;
pub mod file;
pub mod iostats;
pub mod mem;
pub mod queue;
pub mod record;
pub mod spec;

pub use clock::{Clock, RealClock, VirtualClock};
pub use device::{Device, DeviceError};
pub use emulated::{
    DeviceModel, EmuOptions, EmuStats, EmulatedDevice, FaultConfig, ModelTimer, PowerSwitch,
    TimedOp,
};
pub use error_class::{ErrorClass, error_chain, find_os_error};
pub use file::{FileDevice, FileOptions};
pub use iostats::{
    ClassStats, DirectionStats, LATENCY_BUCKETS, LatencyHistogram, Pow2Histogram, SIZE_BUCKETS,
    SizeHistogram,
};
pub use mem::MemDevice;
pub use queue::{IoClass, IoHandle, LeafQueue, QueueStats, ReadBuf};
pub use spec::{DeviceSpec, open_device};
