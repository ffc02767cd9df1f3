//! # cairn-device: where bytes meet media
//!
//! The lowest layer. A `Device` is a flat array of bytes with vectored positional reads and
//! writes, a cache flush and a discard; it knows nothing of pools, blocks or checksums.
//!
//! - `file`: regular files and block devices (preadv/pwritev, fdatasync as flush, optional
//!   O_DIRECT, exclusive lock).
//! - `mem`: a sparse device in RAM, for tests and what-if runs.
//! - `clock`: real and virtual time as a parameter (the queue's statistics, the emulator's
//!   models), so models can be measured without waiting.
//! - `queue`: one `LeafQueue` per leaf, with priority classes and an offset-ordered view that
//!   merges adjacent requests into one vectored I/O.
//! - `iostats`: the queue's per-class waits, sizes and queue depths (power-of-two histograms).
//! - `spec`: `DeviceSpec`, how a leaf is named on the command line and in labels (a path, or
//!   `emu:MODEL:PATH`); parsing and printing only.
//! - `error_class`: `ErrorClass`, what any layer's error means to a client, and the one table
//!   from it to a POSIX errno (here because this is the crate every layer depends on).
//!
//! Everything here is what a production pool runs on. The emulated media (device models with
//! latency, volatile write caches, power cuts, fault injection, write logs for crash forensics)
//! and the opening of a spec, which may name one, are the crate above, `cairn-emulate`; nothing
//! here depends on it.
//!
//! Invariant: a successful `flush` means every write that completed before it was issued is on
//! stable media. Nothing above this layer may assume more than that.

pub mod clock;
pub mod device;
pub mod error_class;
pub mod file;
pub mod iostats;
pub mod mem;
pub mod queue;
pub mod spec;

pub use clock::{Clock, RealClock, VirtualClock};
pub use device::{Device, DeviceError};
pub use error_class::{ErrorClass, error_chain, find_os_error};
pub use file::{FileDevice, FileOptions};
pub use iostats::{
    ClassStats, DirectionStats, LATENCY_BUCKETS, LatencyHistogram, Pow2Histogram, SIZE_BUCKETS,
    SizeHistogram,
};
pub use mem::MemDevice;
pub use queue::{IoClass, IoHandle, LeafQueue, QueueStats, ReadBuf};
pub use spec::DeviceSpec;
