//! # cairn-device: where bytes meet media
//!
//! The lowest layer. A `Device` is a flat array of bytes with vectored positional reads and
//! writes, a cache flush and a discard; it knows nothing of pools, blocks or checksums.
//!
//! - `file`: regular files and block devices (pread/pwritev, fdatasync as flush, optional
//!   O_DIRECT).
//! - `emulated`: a wrapper that makes any backing device behave like a model disk, SSD, NVMe or
//!   RAM disk: latency from a model, a volatile write cache that loses (or tears) whatever was
//!   not flushed at a power cut, and fault injection.
//! - `queue`: one `LeafQueue` per leaf, with priority classes and an offset-ordered view that
//!   merges adjacent requests into one vectored I/O.
//! - `spec`: the `emu:MODEL:PATH` device naming used on the command line and in labels.
//!
//! Invariant: a successful `flush` means every write that completed before it was issued is on
//! stable media. Nothing above this layer may assume more than that.

pub mod device;

pub use device::{Device, DeviceError};
