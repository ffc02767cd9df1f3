//! Time as a parameter.
//!
//! Device models compute when a request completes; a `Clock` says what "now" is and how to wait
//! for a deadline. `RealClock` is monotonic wall time and really sleeps. `VirtualClock` never
//! sleeps: waiting for a deadline simply moves its `now` forward, so a test can push thousands of
//! 8 ms disk operations through a model in milliseconds and still compute IOPS exactly.
//!
//! Invariant: `now()` never goes backwards, on either clock. Times are `Duration`s since the
//! clock's own origin (its creation), not since the Unix epoch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A source of time that can also wait.
pub trait Clock: Send + Sync {
    /// Time elapsed since the clock's origin.
    fn now(&self) -> Duration;
    /// Returns once `now() >= deadline` (immediately if it already is).
    fn sleep_until(&self, deadline: Duration);
}

/// Monotonic wall-clock time since creation; `sleep_until` really sleeps.
#[derive(Debug)]
pub struct RealClock {
    origin: Instant,
}

impl RealClock {
    pub fn new() -> RealClock {
        RealClock {
            origin: Instant::now(),
        }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        RealClock::new()
    }
}

impl Clock for RealClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Sleeps, except for the last `SPIN_BELOW`, which is spent yielding: a sleep overshoots by
    /// tens of microseconds, which would swamp the latency of the fast models (NVMe, RAM).
    fn sleep_until(&self, deadline: Duration) {
        loop {
            let now = self.now();
            if now >= deadline {
                return;
            }
            let left = deadline - now;
            if left > SPIN_BELOW {
                std::thread::sleep(left - SPIN_BELOW);
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// `RealClock` yields instead of sleeping for waits shorter than this.
const SPIN_BELOW: Duration = Duration::from_micros(100);

/// Simulated time: starts at zero, advances only when someone waits for a later deadline (or
/// calls `advance`). Shared by several threads it behaves like a global "latest deadline seen".
#[derive(Debug, Default)]
pub struct VirtualClock {
    now_ns: AtomicU64,
}

impl VirtualClock {
    pub fn new() -> VirtualClock {
        VirtualClock::default()
    }

    /// Moves time forward by `step` (think time between requests in a test).
    pub fn advance(&self, step: Duration) {
        self.now_ns
            .fetch_add(duration_to_ns(step), Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.now_ns.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, deadline: Duration) {
        self.now_ns
            .fetch_max(duration_to_ns(deadline), Ordering::SeqCst);
    }
}

/// Nanoseconds in `d`, saturating at `u64::MAX` (about 584 years).
pub fn duration_to_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_moves_only_forward() {
        let clock = VirtualClock::new();
        assert_eq!(clock.now(), Duration::ZERO);
        clock.sleep_until(Duration::from_millis(8));
        assert_eq!(clock.now(), Duration::from_millis(8));
        clock.sleep_until(Duration::from_millis(3));
        assert_eq!(
            clock.now(),
            Duration::from_millis(8),
            "an earlier deadline is a no-op"
        );
        clock.advance(Duration::from_micros(5));
        assert_eq!(clock.now(), Duration::from_micros(8_005));
    }

    #[test]
    fn real_clock_is_monotonic() {
        let clock = RealClock::new();
        let a = clock.now();
        clock.sleep_until(a); // a deadline already reached returns at once
        let b = clock.now();
        assert!(b >= a);
    }
}
