//! `Metaslab`: one fixed slice `[start, start + size)` of a top-level vdev's data region, with
//! the tree of its free space and the policy for carving allocations out of it.
//!
//! Every byte of a metaslab is in exactly one state: **free** (in `free`, allocatable),
//! **deferred** (freed in a txg that is not yet old enough to reuse; only counted here, the
//! extents are kept by the vdev) or **allocated** (neither). So
//! `free_bytes + deferred_bytes + allocated_bytes == size_bytes` always.
//!
//! Allocation policy (design.md, "the 96% rule" of seed 002):
//! - below 96% full, **first-fit from a cursor** that sits just past the previous allocation, so
//!   consecutive allocations are adjacent and the device queue can merge them into large I/Os;
//!   the forward search visits at most `FIRST_FIT_SEGMENTS_VISIT_MAX` segments and then falls
//!   back to best-fit, so a fragmented stretch costs bounded time;
//! - at 96% full or more, **best-fit** (smallest free segment that holds the request): free space
//!   is scarce, so keep the few large holes for large blocks instead of chipping at them.
//!
//! `fragmentation_percent` and `weight` are computed from the free-segment histogram only:
//! small free segments mean a fragmented metaslab; a wholly free metaslab is 0% fragmented.
//!
//! `metaslab_shift_for` sizes metaslabs so a vdev has about 200 of them (see its comment).

use super::SpaceError;
use super::range_tree::{HISTOGRAM_BUCKETS, RangeTree, extent_end, histogram_bucket};

/// A metaslab this full (allocated + deferred, in percent of its size) or more switches from
/// first-fit to best-fit.
pub const BEST_FIT_FULL_PERCENT: u64 = 96;

/// First-fit gives up after this many free segments and uses best-fit instead. At tens of
/// nanoseconds per tree step this bounds a search at a few tens of microseconds, while any
/// metaslab with runs of free space finds one long before.
pub const FIRST_FIT_SEGMENTS_VISIT_MAX: usize = 1024;

/// Free segments of at most 2^12 = 4 KiB (one sector on most devices) count as 100% fragmented.
const FRAGMENTED_SHIFT_MAX: usize = 12;
/// Free segments of at least 2^24 = 16 MiB (or the whole metaslab, if smaller) count as 0%
/// fragmented: a run that long already streams at full device speed.
const UNFRAGMENTED_SHIFT_MIN: usize = 24;

/// Weight field layout: the largest-segment bucket (+1) sits above the (biased) free bytes.
const WEIGHT_BUCKET_SHIFT: u32 = 57;
const WEIGHT_FREE_MASK: u64 = (1 << WEIGHT_BUCKET_SHIFT) - 1;
/// Offset bias of the weight: a metaslab at offset 0 counts its free space 1/8 (12.5%) higher
/// than one at the end of the vdev, falling linearly; enough to prefer the outer, faster tracks
/// of a disk among otherwise equal metaslabs, not enough to override a real difference.
const WEIGHT_OFFSET_BIAS_DIVISOR: u128 = 8;

/// Metaslabs per vdev `metaslab_shift_for` aims at.
pub const METASLAB_COUNT_TARGET: u64 = 200;
/// Upper bound on metaslabs per vdev (bounds memory and import time).
pub const METASLAB_COUNT_MAX: u64 = 131_072;
/// Smallest metaslab `metaslab_shift_for` picks: 1 MiB, so a 64 MiB test pool still gets 64.
pub const METASLAB_SHIFT_MIN: u8 = 20;
/// Largest metaslab `metaslab_shift_for` picks below the count cap: 16 GiB.
pub const METASLAB_SHIFT_MAX: u8 = 34;

/// Metaslab size (as a power of two) for a vdev data region of `data_size_bytes`.
///
/// Sketch: the ideal size is `data_size / 200`; rounding it to a power of two *geometrically*
/// (down from `data_size / 141`, 141 = 200/sqrt(2)) gives between 141 and 282 metaslabs. The
/// size is then clamped to [1 MiB, 16 GiB], and raised further only if the count would exceed
/// 131 072. Resulting counts:
///
/// | data region | metaslab | count |
/// |---|---|---|
/// | up to 141 MiB | 1 MiB (min) | up to 141 |
/// | 141 MiB – 2.2 TiB | size/141 rounded down to 2^k | 141 – 282 |
/// | 2.2 TiB – 2 PiB | 16 GiB (max) | 141 – 131 072 |
/// | over 2 PiB | grows | 65 536 – 131 072 |
pub fn metaslab_shift_for(data_size_bytes: u64) -> u8 {
    let ideal_bytes = data_size_bytes / (METASLAB_COUNT_TARGET * 1000 / 1414);
    let mut shift = if ideal_bytes == 0 {
        0
    } else {
        histogram_bucket(ideal_bytes) as u8
    };
    shift = shift.clamp(METASLAB_SHIFT_MIN, METASLAB_SHIFT_MAX);
    while shift < 63 && data_size_bytes.div_ceil(1u64 << shift) > METASLAB_COUNT_MAX {
        shift += 1;
    }
    shift
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metaslab {
    start: u64,
    size_bytes: u64,
    ashift: u8,
    free: RangeTree,
    deferred_bytes: u64,
    /// Where the next first-fit search starts: just past the previous first-fit allocation.
    cursor: u64,
}

impl Metaslab {
    /// A wholly free metaslab `[start, start + size_bytes)` allocating in `2^ashift` units.
    pub fn new(start: u64, size_bytes: u64, ashift: u8) -> Self {
        debug_assert!(size_bytes > 0);
        debug_assert_eq!(start % (1 << ashift), 0);
        debug_assert_eq!(size_bytes % (1 << ashift), 0);
        Self {
            start,
            size_bytes,
            ashift,
            free: RangeTree::with_extent(start, size_bytes),
            deferred_bytes: 0,
            cursor: start,
        }
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn end(&self) -> u64 {
        self.start + self.size_bytes
    }

    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Allocatable bytes.
    pub fn free_bytes(&self) -> u64 {
        self.free.space_bytes()
    }

    /// Bytes freed but not yet reusable.
    pub fn deferred_bytes(&self) -> u64 {
        self.deferred_bytes
    }

    pub fn allocated_bytes(&self) -> u64 {
        self.size_bytes - self.free_bytes() - self.deferred_bytes
    }

    /// The free (allocatable) extents, in vdev offsets.
    pub fn free_tree(&self) -> &RangeTree {
        &self.free
    }

    pub fn largest_free_segment_bytes(&self) -> u64 {
        self.free.largest_segment_bytes()
    }

    /// Whether the metaslab is at least `BEST_FIT_FULL_PERCENT` full (deferred space counts as
    /// used: it cannot be allocated).
    pub fn uses_best_fit(&self) -> bool {
        let used_bytes = u128::from(self.size_bytes - self.free_bytes());
        used_bytes * 100 >= u128::from(self.size_bytes) * u128::from(BEST_FIT_FULL_PERCENT)
    }

    /// Whether `length_bytes` are free directly after the previous allocation, so that the
    /// next one can continue the current run.
    pub fn fits_at_cursor(&self, length_bytes: u64) -> bool {
        self.free
            .segment_containing(self.cursor)
            .is_some_and(|(_, end)| end - self.cursor >= length_bytes)
    }

    /// Allocates `length_bytes` (a non-zero multiple of the sector size), returning the vdev
    /// offset: first-fit from the cursor below 96% full, best-fit from then on. `None` if no
    /// free segment is large enough (or the length is zero or not whole sectors).
    pub fn allocate(&mut self, length_bytes: u64) -> Option<u64> {
        let sector_mask = (1u64 << self.ashift) - 1;
        if length_bytes == 0
            || length_bytes & sector_mask != 0
            || self.free.largest_segment_bytes() < length_bytes
        {
            return None;
        }
        let align = 1u64 << self.ashift;
        let offset = if self.uses_best_fit() {
            self.free.best_fit(length_bytes, align)?
        } else {
            self.free
                .first_fit_bounded(
                    self.cursor,
                    length_bytes,
                    align,
                    FIRST_FIT_SEGMENTS_VISIT_MAX,
                )
                .or_else(|| self.free.best_fit(length_bytes, align))?
        };
        self.free
            .remove(offset, length_bytes)
            .expect("a fit search returns an extent that is wholly free");
        self.cursor = offset + length_bytes;
        Some(offset)
    }

    /// Marks `[offset, offset + length_bytes)` allocated; it must be wholly free.
    pub fn claim(&mut self, offset: u64, length_bytes: u64) -> Result<(), SpaceError> {
        self.check_inside(offset, length_bytes)?;
        self.free.remove(offset, length_bytes)
    }

    /// Returns allocated space to the free tree at once (replay of an old free). The metaslab
    /// only checks that the extent is inside it and not free; that it is not deferred either is
    /// for the owner of the deferred extents to check.
    pub fn free_now(&mut self, offset: u64, length_bytes: u64) -> Result<(), SpaceError> {
        self.check_inside(offset, length_bytes)?;
        self.free.add(offset, length_bytes)
    }

    /// Counts allocated space as deferred. The caller (the vdev) keeps the extent and has
    /// checked that it is allocated.
    pub(super) fn defer(&mut self, offset: u64, length_bytes: u64) {
        debug_assert!(self.check_inside(offset, length_bytes).is_ok());
        debug_assert!(!self.free.overlaps(offset, length_bytes));
        self.deferred_bytes += length_bytes;
        debug_assert!(self.deferred_bytes + self.free_bytes() <= self.size_bytes);
    }

    /// Moves deferred space back into the free tree.
    pub(super) fn release_deferred(
        &mut self,
        offset: u64,
        length_bytes: u64,
    ) -> Result<(), SpaceError> {
        self.check_inside(offset, length_bytes)?;
        debug_assert!(self.deferred_bytes >= length_bytes);
        self.free.add(offset, length_bytes)?;
        self.deferred_bytes -= length_bytes;
        Ok(())
    }

    /// How fragmented the free space is, 0–100: the free-space-weighted average of a score per
    /// histogram bucket, 100 for segments up to 4 KiB falling linearly (in log2 of the size) to
    /// 0 for segments of 16 MiB or of the whole metaslab. 0 when nothing is free.
    pub fn fragmentation_percent(&self) -> u8 {
        let unfragmented_shift =
            UNFRAGMENTED_SHIFT_MIN.min(histogram_bucket(self.size_bytes).max(1));
        let histogram = self.free.histogram();
        let mut weighted_score: u128 = 0;
        let mut total_bytes: u128 = 0;
        for (bucket, &count) in histogram.iter().enumerate().take(HISTOGRAM_BUCKETS) {
            if count == 0 {
                continue;
            }
            let bytes = u128::from(count) << bucket;
            let score = bucket_fragmentation_percent(bucket, unfragmented_shift);
            weighted_score += bytes * u128::from(score);
            total_bytes += bytes;
        }
        weighted_score
            .checked_div(total_bytes)
            .map_or(0, |percent| percent as u8)
    }

    /// Preference among metaslabs for allocation (0 = nothing free; higher is better):
    /// - high bits: bucket of the largest free segment, so "has a 1 MiB run" beats "has lots
    ///   of 4 KiB holes" whatever their total;
    /// - low bits: free bytes, raised by up to 12.5% for metaslabs near the start of the vdev
    ///   (outer disk tracks are faster), so among equals the emptier and lower one wins.
    pub fn weight(&self, vdev_size_bytes: u64) -> u64 {
        let free_bytes = self.free_bytes();
        if free_bytes == 0 {
            return 0;
        }
        let bucket = histogram_bucket(self.free.largest_segment_bytes()) as u64 + 1;
        let vdev_size_bytes = vdev_size_bytes.max(self.end());
        let remaining_bytes = u128::from(vdev_size_bytes - self.start);
        let bias_bytes = u128::from(free_bytes) * remaining_bytes
            / u128::from(vdev_size_bytes)
            / WEIGHT_OFFSET_BIAS_DIVISOR;
        let biased_free = (u128::from(free_bytes) + bias_bytes).min(u128::from(WEIGHT_FREE_MASK));
        (bucket << WEIGHT_BUCKET_SHIFT) | biased_free as u64
    }

    /// Errors unless `[offset, offset + length_bytes)` is a non-empty extent inside the
    /// metaslab, on sector boundaries.
    fn check_inside(&self, offset: u64, length_bytes: u64) -> Result<(), SpaceError> {
        let end = extent_end(offset, length_bytes)?;
        let sector_mask = (1u64 << self.ashift) - 1;
        let aligned = (offset | length_bytes) & sector_mask == 0;
        if offset < self.start || end > self.end() || !aligned {
            return Err(SpaceError::InvalidExtent {
                offset,
                length: length_bytes,
            });
        }
        Ok(())
    }
}

/// Bucket of a metaslab weight: floor(log2(largest free segment)) + 1, 0 when nothing is free.
pub fn weight_bucket(weight: u64) -> u64 {
    weight >> WEIGHT_BUCKET_SHIFT
}

fn bucket_fragmentation_percent(bucket: usize, unfragmented_shift: usize) -> u8 {
    if bucket >= unfragmented_shift {
        0
    } else if bucket <= FRAGMENTED_SHIFT_MAX || unfragmented_shift <= FRAGMENTED_SHIFT_MAX {
        100
    } else {
        let span = unfragmented_shift - FRAGMENTED_SHIFT_MAX;
        (100 * (unfragmented_shift - bucket) / span) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;

    #[test]
    fn metaslab_counts_stay_near_the_target() {
        assert_eq!(metaslab_shift_for(64 * MIB), 20);
        assert_eq!(metaslab_shift_for(0), 20);
        assert_eq!(metaslab_shift_for(100 * GIB), 29);
        for size in [
            200 * MIB,
            GIB,
            10 * GIB,
            100 * GIB,
            1024 * GIB,
            2 * 1024 * GIB,
        ] {
            let count = size.div_ceil(1 << metaslab_shift_for(size));
            assert!((141..=283).contains(&count), "{size}: {count}");
        }
        assert_eq!(metaslab_shift_for(1 << 50), 34);
        let huge = 1u64 << 60;
        let shift = metaslab_shift_for(huge);
        assert!(huge.div_ceil(1 << shift) <= METASLAB_COUNT_MAX);
        assert!(shift > METASLAB_SHIFT_MAX);
        assert!(metaslab_shift_for(u64::MAX) <= 63);
    }

    #[test]
    fn consecutive_allocations_are_adjacent() {
        let mut metaslab = Metaslab::new(MIB, MIB, 12);
        let first = metaslab.allocate(8 * KIB).unwrap();
        let second = metaslab.allocate(4 * KIB).unwrap();
        let third = metaslab.allocate(128 * KIB).unwrap();
        assert_eq!(first, MIB);
        assert_eq!(second, first + 8 * KIB);
        assert_eq!(third, second + 4 * KIB);
        assert_eq!(metaslab.allocated_bytes(), 140 * KIB);
    }

    #[test]
    fn switches_to_best_fit_at_96_percent() {
        // 256 sectors of 4 KiB; allocate all, then free a 32 KiB hole at the start and a
        // 4 KiB hole near the end.
        let mut metaslab = Metaslab::new(0, MIB, 12);
        while metaslab.allocate(4 * KIB).is_some() {}
        metaslab.free_now(0, 32 * KIB).unwrap();
        metaslab.free_now(800 * KIB, 4 * KIB).unwrap();
        assert!(metaslab.uses_best_fit());
        assert_eq!(metaslab.allocate(4 * KIB), Some(800 * KIB));
        assert_eq!(metaslab.allocate(4 * KIB), Some(0));

        // The same holes in a less full metaslab: first-fit (wrapping from the cursor at the
        // end) splits the big low hole.
        let mut metaslab = Metaslab::new(0, MIB, 12);
        while metaslab.allocate(4 * KIB).is_some() {}
        metaslab.free_now(0, 32 * KIB).unwrap();
        metaslab.free_now(800 * KIB, 4 * KIB).unwrap();
        metaslab.free_now(900 * KIB, 64 * KIB).unwrap();
        assert!(!metaslab.uses_best_fit());
        assert_eq!(metaslab.allocate(4 * KIB), Some(0));
    }

    #[test]
    fn fragmentation_from_the_histogram() {
        let mut metaslab = Metaslab::new(0, 16 * MIB, 12);
        assert_eq!(metaslab.fragmentation_percent(), 0);
        // Checkerboard: every other 4 KiB sector allocated.
        while metaslab.allocate(4 * KIB).is_some() {}
        assert_eq!(metaslab.fragmentation_percent(), 0, "nothing free");
        for sector in (0..4096u64).step_by(2) {
            metaslab.free_now(sector * 4 * KIB, 4 * KIB).unwrap();
        }
        assert_eq!(metaslab.fragmentation_percent(), 100);
        // A small metaslab, wholly free, is not fragmented either.
        assert_eq!(Metaslab::new(0, MIB, 12).fragmentation_percent(), 0);
        // 1 MiB free runs in a 16 MiB metaslab are in between.
        let mut metaslab = Metaslab::new(0, 16 * MIB, 12);
        while metaslab.allocate(MIB).is_some() {}
        metaslab.free_now(0, MIB).unwrap();
        let percent = metaslab.fragmentation_percent();
        assert!((1..100).contains(&percent), "{percent}");
    }

    #[test]
    fn weight_prefers_large_runs_then_free_space_then_low_offsets() {
        let vdev_size = 64 * MIB;
        let low = Metaslab::new(0, MIB, 12);
        let high = Metaslab::new(63 * MIB, MIB, 12);
        assert!(low.weight(vdev_size) > high.weight(vdev_size));

        // Many small holes lose to one larger run, even with more free space in total.
        let mut holes = Metaslab::new(0, MIB, 12);
        while holes.allocate(4 * KIB).is_some() {}
        for sector in (0..256u64).step_by(2) {
            holes.free_now(sector * 4 * KIB, 4 * KIB).unwrap();
        }
        let mut run = Metaslab::new(63 * MIB, MIB, 12);
        run.allocate(1000 * KIB).unwrap();
        assert!(run.free_bytes() < holes.free_bytes());
        assert!(run.weight(vdev_size) > holes.weight(vdev_size));

        let mut full = Metaslab::new(0, MIB, 12);
        full.allocate(MIB).unwrap();
        assert_eq!(full.weight(vdev_size), 0);
    }
}
