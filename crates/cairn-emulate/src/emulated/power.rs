//! `PowerSwitch`: one power supply feeding several emulated devices.
//!
//! Crash tests attach every device of a pool to one switch and arm it to trip at the n-th
//! write, flush or discard (counted across all attached devices). When it trips, every attached
//! device loses power at once, in the middle of that operation: a write that trips it is in
//! flight and lands in part (a random subset of its sectors), like every other write submitted
//! and not yet returned; unflushed cache contents vanish (or are torn, by a seeded coin flip per
//! device), unflushed discards may be lost; the operation fails with `PoweredOff`, as do all
//! later ones. Running the same workload with n = 1, 2, 3, ... cuts power at every point.
//! `last_cut` reports what the cut caught, so a test can prove it cut mid-workload.
//!
//! Invariant: once tripped, the switch stays tripped; every device attached (before or after)
//! is powered off. Locking: the switch's lock is never held while a device is cut (cutting takes
//! the device's own locks), and devices never hold their locks while counting an operation.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{DeviceCut, EmulatedDevice};

/// The kinds of operation a switch counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Write,
    WriteFua,
    Flush,
    Discard,
}

/// What a power cut caught, summed over the devices of the switch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Operations counted when the switch tripped (including the one that tripped it).
    pub at_op: u64,
    /// The operation that tripped it (`None` for `cut_now` / `arm_after_ops(0)`).
    pub tripped_by: Option<OpKind>,
    /// Writes submitted and not yet returned, torn sector by sector.
    pub in_flight_writes: u64,
    pub in_flight_sectors_landed: u64,
    pub in_flight_sectors_lost: u64,
    /// Acknowledged writes still in volatile caches (torn or dropped).
    pub cached_writes: u64,
    /// Acknowledged discards not yet flushed (kept or lost).
    pub pending_discards: u64,
}

impl CutReport {
    /// True if the cut caught anything not yet durable: a write in flight, an unflushed write
    /// or discard.
    pub fn caught_unfinished_work(&self) -> bool {
        self.in_flight_writes + self.cached_writes + self.pending_discards > 0
    }

    fn add(&mut self, cut: DeviceCut) {
        self.in_flight_writes += cut.in_flight.writes;
        self.in_flight_sectors_landed += cut.in_flight.sectors_landed;
        self.in_flight_sectors_lost += cut.in_flight.sectors_lost;
        self.cached_writes += cut.cached_writes;
        self.pending_discards += cut.pending_discards;
    }
}

impl std::fmt::Display for CutReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cut at operation {} ({}): {} writes in flight ({} sectors landed, {} lost), \
             {} unflushed cached writes, {} unflushed discards",
            self.at_op,
            match self.tripped_by {
                Some(kind) => format!("{kind:?}"),
                None => "cut by hand".to_string(),
            },
            self.in_flight_writes,
            self.in_flight_sectors_landed,
            self.in_flight_sectors_lost,
            self.cached_writes,
            self.pending_discards
        )
    }
}

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
    last_cut: Option<CutReport>,
    on_trip: Option<TripHook>,
}

/// Called once with the cut's report when the switch trips.
type TripHook = Arc<dyn Fn(&CutReport) + Send + Sync>;

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
                last_cut: None,
                on_trip: None,
            }),
        }
    }

    /// Trips on the `n`-th write or flush from now (across all attached devices): operations
    /// 1..n-1 succeed, operation n finds the power gone. `n == 0` cuts the power at once.
    pub fn arm_after_ops(&self, n: u64) {
        let mut state = self.state.lock();
        if n == 0 {
            self.trip(state, None);
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
        self.trip(state, None);
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

    /// Writes, flushes and discards counted so far (including the one that tripped the switch).
    pub fn ops_seen(&self) -> u64 {
        self.state.lock().ops_seen
    }

    /// Calls `hook` with the cut's report when the switch trips (after every device is cut), so
    /// a process can say that its power went and what was caught.
    pub fn on_trip(&self, hook: impl Fn(&CutReport) + Send + Sync + 'static) {
        self.state.lock().on_trip = Some(Arc::new(hook));
    }

    /// What the cut caught, once the switch has tripped.
    pub fn last_cut(&self) -> Option<CutReport> {
        self.state.lock().last_cut
    }

    /// Counts one operation; trips the switch if this is the armed operation.
    pub(crate) fn count_op(&self, kind: OpKind) -> Verdict {
        let mut state = self.state.lock();
        if state.tripped {
            return Verdict::PoweredOff;
        }
        state.ops_seen += 1;
        if state.trip_at == Some(state.ops_seen) {
            self.trip(state, Some(kind));
            return Verdict::PoweredOff;
        }
        Verdict::Proceed
    }

    fn trip(&self, mut state: parking_lot::MutexGuard<'_, SwitchState>, by: Option<OpKind>) {
        if state.tripped {
            return;
        }
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
        let mut report = CutReport {
            at_op: state.ops_seen,
            tripped_by: by,
            ..CutReport::default()
        };
        drop(state);
        for (device, tear) in victims {
            report.add(device.power_cut(tear));
        }
        let hook = {
            let mut state = self.state.lock();
            state.last_cut = Some(report);
            state.on_trip.clone()
        };
        if let Some(hook) = hook {
            hook(&report);
        }
    }
}
