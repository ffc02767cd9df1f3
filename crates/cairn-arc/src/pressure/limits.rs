//! Default cache limits from a memory reading: `arc_max` (half of usable memory) and `arc_min`
//! (1/32 of it), each with a floor.
//!
//! Invariants: `default_arc_max_bytes` is at least `ARC_MAX_FLOOR_BYTES`, also when memory is
//! unknown; `default_arc_min_bytes` is never above `arc_max`. How it fits: uses `reading`'s
//! `MemoryReading`; `read::ArcConfig` and the engine size the cache with these before the
//! controller ever runs.

use super::MIB;
use super::reading::MemoryReading;

/// The smallest default `arc_max`: below this the cache cannot hold a pool's hot metadata and
/// reads turn into random I/O.
pub const ARC_MAX_FLOOR_BYTES: u64 = 64 * MIB;
/// The smallest default `arc_min`.
pub const ARC_MIN_FLOOR_BYTES: u64 = 32 * MIB;

/// The memory the cache may plan for: the smaller of RAM and the cgroup limit.
pub fn usable_memory_bytes(reading: &MemoryReading) -> Option<u64> {
    match (reading.ram_total_bytes, reading.cgroup_limit_bytes) {
        (Some(ram_bytes), Some(limit_bytes)) => Some(ram_bytes.min(limit_bytes)),
        (ram_bytes, limit_bytes) => ram_bytes.or(limit_bytes),
    }
}

/// Default `arc_max`: half of usable memory, at least `ARC_MAX_FLOOR_BYTES` (also when usable
/// memory is unknown, e.g. off Linux).
///
/// ZFS takes the larger of 5/8 of RAM and RAM less 1 GiB because it lives in the kernel and
/// owns the page cache's role itself. A user-space server shares the machine with its clients,
/// the kernel's page cache (which still caches everything not opened `O_DIRECT`) and its own
/// heap, and cannot be asked by the kernel to give memory back synchronously; half leaves room
/// for all of them while pressure polling catches up.
pub fn default_arc_max_bytes(reading: &MemoryReading) -> u64 {
    usable_memory_bytes(reading)
        .map_or(0, |usable_bytes| usable_bytes / 2)
        .max(ARC_MAX_FLOOR_BYTES)
}

/// Default `arc_min`: max(32 MiB, `arc_max` / 32), never above `arc_max`. A 1/32 floor keeps the
/// pool's hot metadata cached under sustained pressure, small enough to matter little.
pub fn default_arc_min_bytes(arc_max_bytes: u64) -> u64 {
    (arc_max_bytes / 32)
        .max(ARC_MIN_FLOOR_BYTES)
        .min(arc_max_bytes)
}
