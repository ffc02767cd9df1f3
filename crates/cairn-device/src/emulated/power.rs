//! `PowerSwitch`: one power supply feeding several emulated devices.
//!
//! Crash tests attach every device of a pool to one switch and arm it to trip at the n-th write
//! or flush (counted across all attached devices). When it trips, every attached device loses
//! power at once, before that operation is performed: unflushed cache contents vanish (or are
//! torn, by a seeded coin flip per device) and the operation fails with `PoweredOff`, as do all
//! later ones. Running the same workload with n = 1, 2, 3, ... cuts power at every point.
//!
//! Invariant: once tripped, the switch stays tripped; every device attached (before or after)
//! is powered off. Locking: the switch's lock is never held while a device is cut (cutting takes
//! the device's own locks), and devices never hold their locks while counting an operation.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::EmulatedDevice;

/// Outcome of counting one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Proceed,
    PoweredOff,
}

struct SwitchState {
    ops_seen: u64,
    trip_at: Option<u64>,
    tripped: bool,
    devices: Vec<Weak<EmulatedDevice>>,
    rng: SmallRng,
}

/// A shared power supply that can be cut after a chosen number of operations.
pub struct PowerSwitch {
    state: Mutex<SwitchState>,
}

impl std::fmt::Debug for PowerSwitch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("PowerSwitch")
            .field("ops_seen", &state.ops_seen)
            .field("trip_at", &state.trip_at)
            .field("tripped", &state.tripped)
            .field("devices", &state.devices.len())
            .finish()
    }
}

impl Default for PowerSwitch {
    fn default() -> Self {
        PowerSwitch::new()
    }
}

impl PowerSwitch {
    /// A switch whose tear coin flips are seeded with 0.
    pub fn new() -> PowerSwitch {
        PowerSwitch::with_seed(0)
    }

    pub fn with_seed(seed: u64) -> PowerSwitch {
        PowerSwitch {
            state: Mutex::new(SwitchState {
                ops_seen: 0,
                trip_at: None,
                tripped: false,
                devices: Vec::new(),
                rng: SmallRng::seed_from_u64(seed),
            }),
        }
    }

    /// Trips on the `n`-th write or flush from now (across all attached devices): operations
    /// 1..n-1 succeed, operation n finds the power gone. `n == 0` cuts the power at once.
    pub fn arm_after_ops(&self, n: u64) {
        let mut state = self.state.lock();
        if n == 0 {
            self.trip(state);
            return;
        }
        state.trip_at = Some(state.ops_seen + n);
    }

    pub fn disarm(&self) {
        self.state.lock().trip_at = None;
    }

    /// Cuts the power now.
    pub fn cut_now(&self) {
        let state = self.state.lock();
        self.trip(state);
    }

    /// Feeds `device` from this switch. A device counts its operations on the first switch it
    /// is attached to. Attaching to a tripped switch powers the device off at once.
    pub fn attach(self: &Arc<Self>, device: &Arc<EmulatedDevice>) {
        let _ = device.switch.set(Arc::clone(self));
        let mut state = self.state.lock();
        state.devices.push(Arc::downgrade(device));
        if state.tripped {
            drop(state);
            device.power_cut(false);
        }
    }

    pub fn tripped(&self) -> bool {
        self.state.lock().tripped
    }

    /// Writes and flushes counted so far (including the one that tripped the switch).
    pub fn ops_seen(&self) -> u64 {
        self.state.lock().ops_seen
    }

    /// Counts one write or flush; trips the switch if this is the armed operation.
    pub(crate) fn count_op(&self) -> Verdict {
        let mut state = self.state.lock();
        if state.tripped {
            return Verdict::PoweredOff;
        }
        state.ops_seen += 1;
        if state.trip_at == Some(state.ops_seen) {
            self.trip(state);
            return Verdict::PoweredOff;
        }
        Verdict::Proceed
    }

    fn trip(&self, mut state: parking_lot::MutexGuard<'_, SwitchState>) {
        state.tripped = true;
        let mut victims = Vec::new();
        let devices = std::mem::take(&mut state.devices);
        for weak in &devices {
            if let Some(device) = weak.upgrade() {
                let tear = state.rng.random_bool(0.5);
                victims.push((device, tear));
            }
        }
        state.devices = devices;
        drop(state);
        for (device, tear) in victims {
            device.power_cut(tear);
        }
    }
}
