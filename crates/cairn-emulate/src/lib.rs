//! # cairn-emulate: emulated media for tests, benchmarks and what-if runs
//!
//! Devices that behave like a given kind of hardware, including how it fails, over any
//! `cairn_device::Device` as backing. Same layer as `cairn-device`, one step above it: it
//! depends on `cairn-device` (the `Device` trait, files, the clock) and nothing in
//! `cairn-device` depends on it, so the production device layer carries no emulator.
//!
//! - `emulated`: `EmulatedDevice`, which makes a backing device behave like a model disk, SSD,
//!   NVMe or RAM disk (`DeviceModel`, timed by `ModelTimer` on a real or virtual clock): latency,
//!   a volatile write cache that loses (or tears) whatever was not flushed at a power cut, writes
//!   in flight that land in part, and fault injection (`FaultConfig`); `PowerSwitch` cuts the
//!   power of several devices at once, at a seeded point (crash tests).
//! - `record`: `RecordingDevice`, a write log of what reached a device's media, and `replay`,
//!   which rebuilds the images from it (crash tests keep it for a failing seed; the
//!   `replay-cut` example runs it).
//! - `open`: `open_device` and `open_device_recorded`, which turn a `DeviceSpec` into a device.
//!
//! Where the spec went, and why: `DeviceSpec` (a leaf's name, `PATH` or `emu:MODEL:PATH`, with
//! its parsing and printing) stays in `cairn_device::spec`, because every layer holds leaves by
//! their spec (the vdev tree, labels, import, the admin library) and none of them should need
//! the emulator for that. Only opening a spec moved here, since opening `emu:` needs the models.
//! The list of model names a spec may carry is `cairn_device::spec::MODEL_NAMES`, which
//! `DeviceModel::NAMES` is, so a misspelt model is still refused when the spec is parsed.
//!
//! Determinism: every random choice of an emulated device or a power switch comes from a seeded
//! generator, drawn in request order, so a seed and a request sequence always give the same
//! outcome; timing on a real clock is the only thing that is not repeatable.
//!
//! Invariant: an emulated device keeps at a power cut no more than the hardware it models
//! promises to keep (the rules are stated in `emulated`), so a crash test that passes here
//! assumes nothing real hardware does not promise.

pub mod emulated;
pub mod open;
pub mod record;

pub use emulated::{
    CutReport, DeviceModel, EmuOptions, EmuStats, EmulatedDevice, FaultConfig, ModelTimer, OpKind,
    PowerSwitch, TimedOp,
};
pub use open::{open_device, open_device_recorded};
pub use record::{RecordingDevice, replay};
