//! `RangeTree`: a set of disjoint, coalesced half-open extents `[start, end)` over u64 bytes.
//!
//! Purpose: the in-memory form of "which bytes of a metaslab are free" (and of the deferred and
//! per-txg change sets). Two indexes are kept in step:
//! - `segments`: start -> end, ordered by offset, for first-fit searches from a cursor and for
//!   neighbour lookups when coalescing;
//! - `by_length`: (length, start), ordered by size, for best-fit in O(log n).
//!
//! A power-of-two histogram of segment lengths (bucket `b` counts segments with
//! `2^b <= length < 2^(b+1)`) is maintained incrementally; it is what fragmentation and metaslab
//! weights are computed from, without walking the tree.
//!
//! Invariants (checked by `assert_invariants`, and by `debug_assert`s on every change):
//! - every segment is non-empty, and no two segments overlap or touch (touching ones are merged);
//! - `by_length` holds exactly one `(end - start, start)` per segment;
//! - `space_bytes` is the sum of segment lengths and `histogram` matches the segments.
//!
//! Mutations check before they change anything: an `add` that overlaps or a `remove` of bytes
//! that are not all present returns an error and leaves the tree untouched.

use super::SpaceError;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

/// Buckets of the segment-length histogram: one per bit of a u64 length.
pub const HISTOGRAM_BUCKETS: usize = 64;

/// Trees at most this many segments long are fully re-verified after every change in debug
/// builds; larger ones get only the local checks (a full walk per operation would make the
/// property tests quadratic).
const FULL_CHECK_SEGMENTS_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTree {
    /// start -> end (exclusive).
    segments: BTreeMap<u64, u64>,
    /// (length, start) of every segment.
    by_length: BTreeSet<(u64, u64)>,
    space_bytes: u64,
    histogram: [u64; HISTOGRAM_BUCKETS],
}

impl Default for RangeTree {
    fn default() -> Self {
        Self::new()
    }
}

/// Bucket of the histogram a segment of `length_bytes` (> 0) falls in: floor(log2(length)).
pub fn histogram_bucket(length_bytes: u64) -> usize {
    debug_assert!(length_bytes > 0);
    (u64::BITS - 1 - length_bytes.leading_zeros()) as usize
}

/// End of `[offset, offset + length)`, or an error for an empty extent or one past 2^64.
pub(crate) fn extent_end(offset: u64, length: u64) -> Result<u64, SpaceError> {
    match offset.checked_add(length) {
        Some(end) if length > 0 => Ok(end),
        _ => Err(SpaceError::InvalidExtent { offset, length }),
    }
}

/// Lowest multiple of `align` (a power of two) that is >= `value`, if it fits in a u64.
fn align_up(value: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    value.checked_add(align - 1).map(|v| v & !(align - 1))
}

/// Lowest aligned start >= `from` inside `[segment_start, segment_end)` with room for `length`.
fn fit_in(segment_start: u64, segment_end: u64, from: u64, length: u64, align: u64) -> Option<u64> {
    let start = align_up(segment_start.max(from), align)?;
    let end = start.checked_add(length)?;
    (end <= segment_end).then_some(start)
}

impl RangeTree {
    pub fn new() -> Self {
        Self {
            segments: BTreeMap::new(),
            by_length: BTreeSet::new(),
            space_bytes: 0,
            histogram: [0; HISTOGRAM_BUCKETS],
        }
    }

    /// A tree holding the single extent `[start, start + length)` (empty if `length` is 0).
    pub fn with_extent(start: u64, length: u64) -> Self {
        let mut tree = Self::new();
        if length > 0 {
            tree.add(start, length)
                .expect("an empty tree accepts any valid extent");
        }
        tree
    }

    /// Total bytes in the set.
    pub fn space_bytes(&self) -> u64 {
        self.space_bytes
    }

    /// Number of (coalesced) segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Segments as `(start, end)` half-open pairs, lowest offset first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.segments.iter().map(|(&start, &end)| (start, end))
    }

    /// Length of the largest segment, 0 when empty.
    pub fn largest_segment_bytes(&self) -> u64 {
        self.by_length.last().map_or(0, |&(length, _)| length)
    }

    /// Segment-length histogram: bucket `b` counts segments with `2^b <= length < 2^(b+1)`.
    pub fn histogram(&self) -> &[u64; HISTOGRAM_BUCKETS] {
        &self.histogram
    }

    /// Whether every byte of `[start, start + length)` is in the set (vacuously true for an
    /// empty extent; false for one past 2^64).
    pub fn contains(&self, start: u64, length: u64) -> bool {
        if length == 0 {
            return true;
        }
        let Some(end) = start.checked_add(length) else {
            return false;
        };
        self.segment_containing(start)
            .is_some_and(|(_, segment_end)| segment_end >= end)
    }

    /// Whether any byte of `[start, start + length)` is in the set.
    pub fn overlaps(&self, start: u64, length: u64) -> bool {
        if length == 0 {
            return false;
        }
        let end = start.saturating_add(length);
        self.segments
            .range(..end)
            .next_back()
            .is_some_and(|(_, &segment_end)| segment_end > start)
    }

    /// The segment `(start, end)` holding byte `offset`, if any.
    pub fn segment_containing(&self, offset: u64) -> Option<(u64, u64)> {
        self.segments
            .range(..=offset)
            .next_back()
            .filter(|&(_, &end)| end > offset)
            .map(|(&start, &end)| (start, end))
    }

    /// Adds `[start, start + length)`, merging with touching neighbours. Errors, leaving the tree
    /// unchanged, if the extent is empty, overflows, or overlaps bytes already present.
    pub fn add(&mut self, start: u64, length: u64) -> Result<(), SpaceError> {
        let end = extent_end(start, length)?;
        // Segments are disjoint and sorted, so the last one starting before `end` has the
        // greatest end of all that could overlap.
        if let Some((&segment_start, &segment_end)) = self.segments.range(..end).next_back()
            && segment_end > start
        {
            return Err(SpaceError::RangeOverlap {
                offset: start,
                length,
                segment_start,
                segment_end,
            });
        }
        let mut merged_start = start;
        let mut merged_end = end;
        if let Some((&left_start, &left_end)) = self.segments.range(..start).next_back()
            && left_end == start
        {
            self.unlink(left_start, left_end);
            merged_start = left_start;
        }
        if let Some(&right_end) = self.segments.get(&end) {
            self.unlink(end, right_end);
            merged_end = right_end;
        }
        self.link(merged_start, merged_end);
        self.space_bytes += length;
        self.debug_check_around(merged_start, merged_end);
        Ok(())
    }

    /// Removes `[start, start + length)`, splitting the segment holding it. Errors, leaving the
    /// tree unchanged, unless every byte of the extent is present.
    pub fn remove(&mut self, start: u64, length: u64) -> Result<(), SpaceError> {
        let end = extent_end(start, length)?;
        let Some((segment_start, segment_end)) = self
            .segment_containing(start)
            .filter(|&(_, segment_end)| segment_end >= end)
        else {
            return Err(SpaceError::RangeNotPresent {
                offset: start,
                length,
            });
        };
        self.unlink(segment_start, segment_end);
        if segment_start < start {
            self.link(segment_start, start);
        }
        if end < segment_end {
            self.link(end, segment_end);
        }
        self.space_bytes -= length;
        self.debug_check_around(segment_start, segment_end);
        Ok(())
    }

    /// Lowest `align`-aligned start >= `cursor` where `length` bytes are free; if there is none
    /// up to the end, searches once more from the beginning (so the result may lie below the
    /// cursor). `align` should be a power of two; others are rounded up to one.
    pub fn first_fit(&self, cursor: u64, length: u64, align: u64) -> Option<u64> {
        self.first_fit_bounded(cursor, length, align, usize::MAX)
    }

    /// `first_fit` that gives up (returns `None`) after examining `segments_visit_max`
    /// segments, so a search through a badly fragmented region has a bounded cost.
    pub fn first_fit_bounded(
        &self,
        cursor: u64,
        length: u64,
        align: u64,
        segments_visit_max: usize,
    ) -> Option<u64> {
        let align = align.max(1).checked_next_power_of_two().unwrap_or(1 << 63);
        if length == 0 || self.largest_segment_bytes() < length {
            return None;
        }
        // The segment holding the cursor (searched from the cursor), then every later one.
        let holding = self.segment_containing(cursor);
        let after = self
            .segments
            .range((Bound::Excluded(cursor), Bound::Unbounded))
            .map(|(&start, &end)| (start, end));
        let forward = holding.into_iter().chain(after);
        // Wrapped: segments starting below the cursor, searched from their own start.
        let wrapped = self
            .segments
            .range(..cursor)
            .map(|(&start, &end)| (start, end));
        let forward = forward.map(|(start, end)| (start, end, cursor));
        let wrapped = wrapped.map(|(start, end)| (start, end, 0));
        forward
            .chain(wrapped)
            .take(segments_visit_max)
            .find_map(|(start, end, from)| fit_in(start, end, from, length, align))
    }

    /// Start of an `align`-aligned extent of `length` bytes in the smallest segment that can
    /// hold one (lowest offset among equals). `align` should be a power of two; others are
    /// rounded up to one.
    pub fn best_fit(&self, length: u64, align: u64) -> Option<u64> {
        let align = align.max(1).checked_next_power_of_two().unwrap_or(1 << 63);
        if length == 0 {
            return None;
        }
        self.by_length
            .range((length, 0)..)
            .find_map(|&(segment_length, start)| {
                fit_in(start, start + segment_length, start, length, align)
            })
    }

    /// Panics with a description if any invariant (see the module comment) is broken.
    pub fn assert_invariants(&self) {
        let mut space_bytes = 0u64;
        let mut histogram = [0u64; HISTOGRAM_BUCKETS];
        let mut previous_end: Option<u64> = None;
        for (&start, &end) in &self.segments {
            assert!(start < end, "empty segment [{start:#x}, {end:#x})");
            if let Some(previous_end) = previous_end {
                assert!(
                    previous_end < start,
                    "segments overlap or touch at {start:#x} (previous end {previous_end:#x})"
                );
            }
            assert!(
                self.by_length.contains(&(end - start, start)),
                "segment [{start:#x}, {end:#x}) missing from the length index"
            );
            space_bytes += end - start;
            histogram[histogram_bucket(end - start)] += 1;
            previous_end = Some(end);
        }
        assert_eq!(
            self.by_length.len(),
            self.segments.len(),
            "length index size"
        );
        assert_eq!(self.space_bytes, space_bytes, "space accounting");
        assert_eq!(self.histogram, histogram, "histogram");
    }

    fn link(&mut self, start: u64, end: u64) {
        debug_assert!(start < end);
        let previous = self.segments.insert(start, end);
        debug_assert!(previous.is_none(), "segment {start:#x} linked twice");
        let inserted = self.by_length.insert((end - start, start));
        debug_assert!(inserted);
        self.histogram[histogram_bucket(end - start)] += 1;
    }

    fn unlink(&mut self, start: u64, end: u64) {
        let removed = self.segments.remove(&start);
        debug_assert_eq!(removed, Some(end));
        let removed = self.by_length.remove(&(end - start, start));
        debug_assert!(removed);
        self.histogram[histogram_bucket(end - start)] -= 1;
    }

    /// Local checks after a change that touched `[low, high)`: the segments there and their
    /// neighbours neither overlap nor touch. Small trees get a full check.
    fn debug_check_around(&self, low: u64, high: u64) {
        if !cfg!(debug_assertions) {
            return;
        }
        if self.segments.len() <= FULL_CHECK_SEGMENTS_MAX {
            self.assert_invariants();
            return;
        }
        let before = self.segments.range(..low).next_back();
        let touched = self.segments.range(low..high);
        let after = self.segments.range(high..).next();
        let mut previous_end: Option<u64> = None;
        for (&start, &end) in before.into_iter().chain(touched).chain(after) {
            debug_assert!(start < end);
            debug_assert!(previous_end.is_none_or(|previous_end| previous_end < start));
            previous_end = Some(end);
        }
        debug_assert_eq!(self.by_length.len(), self.segments.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_coalesces_with_both_neighbours() {
        let mut tree = RangeTree::new();
        tree.add(0, 10).unwrap();
        tree.add(20, 10).unwrap();
        tree.add(10, 10).unwrap();
        assert_eq!(tree.iter().collect::<Vec<_>>(), vec![(0, 30)]);
        assert_eq!(tree.space_bytes(), 30);
        assert_eq!(tree.segment_count(), 1);
        assert_eq!(tree.largest_segment_bytes(), 30);
    }

    #[test]
    fn overlapping_add_is_an_error_and_changes_nothing() {
        let mut tree = RangeTree::with_extent(100, 50);
        let before = tree.clone();
        assert!(matches!(
            tree.add(140, 20),
            Err(SpaceError::RangeOverlap {
                segment_start: 100,
                segment_end: 150,
                ..
            })
        ));
        assert!(tree.add(0, 101).is_err());
        assert!(tree.add(0, 0).is_err());
        assert!(tree.add(u64::MAX, 2).is_err());
        assert_eq!(tree, before);
    }

    #[test]
    fn remove_splits_and_rejects_partial_presence() {
        let mut tree = RangeTree::with_extent(0, 100);
        tree.remove(40, 20).unwrap();
        assert_eq!(tree.iter().collect::<Vec<_>>(), vec![(0, 40), (60, 100)]);
        let before = tree.clone();
        assert!(matches!(
            tree.remove(30, 20),
            Err(SpaceError::RangeNotPresent { .. })
        ));
        assert_eq!(tree, before);
        tree.remove(0, 40).unwrap();
        tree.remove(60, 40).unwrap();
        assert!(tree.is_empty());
        assert_eq!(tree.histogram(), &[0; HISTOGRAM_BUCKETS]);
    }

    #[test]
    fn first_fit_searches_from_the_cursor_then_wraps() {
        let mut tree = RangeTree::new();
        tree.add(0, 4096).unwrap();
        tree.add(16384, 8192).unwrap();
        tree.add(65536, 4096).unwrap();
        assert_eq!(tree.first_fit(0, 4096, 4096), Some(0));
        assert_eq!(tree.first_fit(1, 4096, 4096), Some(16384));
        assert_eq!(tree.first_fit(20480, 4096, 4096), Some(20480));
        assert_eq!(tree.first_fit(20481, 4096, 4096), Some(65536));
        assert_eq!(tree.first_fit(70000, 4096, 4096), Some(0));
        assert_eq!(tree.first_fit(70000, 8192, 4096), Some(16384));
        assert_eq!(tree.first_fit(0, 16384, 4096), None);
        // Alignment larger than the segment's own.
        assert_eq!(tree.first_fit(1, 4096, 8192), Some(16384));
        assert_eq!(tree.first_fit(65537, 4096, 8192), Some(0));
    }

    #[test]
    fn best_fit_takes_the_smallest_segment_that_fits() {
        let mut tree = RangeTree::new();
        tree.add(0, 65536).unwrap();
        tree.add(100_000, 8192).unwrap();
        tree.add(200_000, 4096).unwrap();
        tree.add(300_000, 4096).unwrap();
        assert_eq!(tree.best_fit(4096, 1), Some(200_000));
        assert_eq!(tree.best_fit(4097, 1), Some(100_000));
        assert_eq!(tree.best_fit(10_000, 1), Some(0));
        assert_eq!(tree.best_fit(70_000, 1), None);
        // 100_000 is not 64 KiB aligned and its 8 KiB cannot hold an aligned 8 KiB extent.
        assert_eq!(tree.best_fit(8192, 65536), Some(0));
    }

    #[test]
    fn histogram_counts_power_of_two_buckets() {
        let mut tree = RangeTree::new();
        tree.add(0, 4096).unwrap();
        tree.add(10_000, 8191).unwrap();
        tree.add(100_000, 1).unwrap();
        let histogram = tree.histogram();
        assert_eq!(histogram[12], 2);
        assert_eq!(histogram[0], 1);
        assert_eq!(histogram.iter().sum::<u64>(), 3);
    }

    #[test]
    fn contains_and_overlaps() {
        let tree = RangeTree::with_extent(100, 100);
        assert!(tree.contains(100, 100));
        assert!(tree.contains(150, 10));
        assert!(!tree.contains(150, 51));
        assert!(tree.contains(0, 0));
        assert!(tree.overlaps(199, 10));
        assert!(!tree.overlaps(200, 10));
        assert!(!tree.overlaps(0, 100));
        assert!(tree.overlaps(0, 101));
    }
}
