//! `TopVdevSpace`: the metaslabs of one top-level vdev, the union of its deferred frees, and the
//! choice of which metaslab to allocate from.
//!
//! Metaslab `i` covers `[i << metaslab_shift, (i + 1) << metaslab_shift)` of the data region;
//! the last one may be shorter when the region is not a whole number of metaslabs. An extent may
//! span metaslab boundaries (coalesced log entries do); every operation splits it, checks every
//! part first and only then changes anything, so an error leaves the vdev untouched.
//!
//! Choice of metaslab: a per-copy "active" metaslab (copy 0 for the first DVA of a block, 1 and
//! 2 for ditto copies, 3 for intent-log blocks, so each stream stays contiguous in its own
//! metaslab) is kept while it can
//! satisfy the request and
//! - the free run at its cursor still holds the request (the stream continues contiguously), or
//! - its largest free run is at least `ACTIVE_KEEP_SEGMENT_BYTES`, or
//! - no other metaslab's largest run is `ACTIVE_SWITCH_BUCKETS` histogram buckets larger.
//!
//! Otherwise the metaslab of highest weight (kept in a `BTreeSet` ordered by weight, ties to the
//! lowest index) becomes active. So a metaslab filled front to back is used up before the next
//! one is started, and one whose free space has crumbled into small holes is left for one with
//! long runs. When no metaslab can hold the request (a block larger than a metaslab, or free
//! space left only in pieces on both sides of metaslab boundaries), a free run spanning
//! metaslabs is used as a last resort rather than failing.

use super::SpaceError;
use super::class::SpaceClass;
use super::metaslab::{Metaslab, weight_bucket};
use super::range_tree::{RangeTree, extent_end, histogram_bucket};
use cairn_format::blkptr::DVA_COUNT_MAX;
use cairn_format::raidz::RaidzGeometry;
use std::cmp::Reverse;
use std::collections::BTreeSet;

/// An active metaslab whose largest free run is at least this long is kept regardless of the
/// others: 1 MiB is the largest I/O the device queue builds by merging, so a longer run gains
/// nothing more.
pub const ACTIVE_KEEP_SEGMENT_BYTES: u64 = 1 << 20;
/// ...or while no other metaslab's largest run is this many power-of-two histogram buckets
/// higher (8 to 32 times longer). ZFS uses 2; a wider margin switches less often, keeping runs
/// of allocations together at the cost of using holes slightly smaller than the best.
pub const ACTIVE_SWITCH_BUCKETS: u64 = 4;

/// Active-metaslab slots: one per DVA a block pointer can carry, and one for intent-log blocks
/// written to the pool's disks (`LOG_SLOT`).
pub const ACTIVE_SLOTS: usize = DVA_COUNT_MAX + 1;
/// The slot of intent-log blocks on normal vdevs: their own metaslab keeps a log chain
/// contiguous on disk while a txg sync allocates hundreds of megabytes beside it (a chain
/// broken into pieces costs a disk a rotation per piece).
pub const LOG_SLOT: usize = DVA_COUNT_MAX;

#[derive(Debug, Clone)]
pub(super) struct TopVdevSpace {
    pub vdev: u32,
    /// What the vdev is for: `allocate` uses only Normal vdevs, `allocate_log` prefers Log ones.
    pub class: SpaceClass,
    pub ashift: u8,
    pub metaslab_shift: u8,
    /// Set on a raidz vdev: what a block of a given size allocates (`asize_for`).
    pub raidz: Option<RaidzGeometry>,
    /// Sum of the metaslab sizes: the allocatable part of the data region.
    pub size_bytes: u64,
    pub metaslabs: Vec<Metaslab>,
    /// Sum of the metaslabs' free bytes, kept in step.
    free_bytes: u64,
    /// Current weight of each metaslab (the key it has in `by_weight`).
    weights: Vec<u64>,
    /// (weight, Reverse(index)): iterated from the back, highest weight then lowest index first.
    by_weight: BTreeSet<(u64, Reverse<u32>)>,
    active: [Option<u32>; ACTIVE_SLOTS],
    /// Every deferred extent of this vdev, whatever its txg.
    pub deferred: RangeTree,
    /// Takes no new allocations (frees still come): a log vdev being added, until the txg that
    /// adds it is durable, or being emptied for removal.
    pub noalloc: bool,
}

impl TopVdevSpace {
    pub fn new(
        vdev: u32,
        class: SpaceClass,
        size_bytes: u64,
        ashift: u8,
        metaslab_shift: u8,
        raidz: Option<RaidzGeometry>,
    ) -> Self {
        let metaslab_size_bytes = 1u64 << metaslab_shift;
        let metaslab_count = size_bytes.div_ceil(metaslab_size_bytes);
        let metaslabs: Vec<Metaslab> = (0..metaslab_count)
            .map(|index| {
                let start = index << metaslab_shift;
                let length = metaslab_size_bytes.min(size_bytes - start);
                Metaslab::new(start, length, ashift)
            })
            .collect();
        let mut space = Self {
            vdev,
            class,
            ashift,
            metaslab_shift,
            raidz,
            size_bytes,
            free_bytes: size_bytes,
            weights: vec![0; metaslabs.len()],
            metaslabs,
            by_weight: BTreeSet::new(),
            active: [None; ACTIVE_SLOTS],
            deferred: RangeTree::new(),
            noalloc: false,
        };
        for index in 0..space.metaslabs.len() {
            let weight = space.metaslabs[index].weight(size_bytes);
            space.weights[index] = weight;
            space.by_weight.insert((weight, Reverse(index as u32)));
        }
        space
    }

    pub fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    /// Bytes a block of `size_bytes` allocates here: rounded up to the sector, or on a raidz
    /// vdev its data, parity and skip sectors (`RaidzGeometry::asize`).
    pub fn asize_for(&self, size_bytes: u32) -> u64 {
        match &self.raidz {
            Some(geometry) => geometry.asize(u64::from(size_bytes)),
            None => {
                let sector_bytes = 1u64 << self.ashift;
                u64::from(size_bytes).div_ceil(sector_bytes) * sector_bytes
            }
        }
    }

    pub fn deferred_bytes(&self) -> u64 {
        self.deferred.space_bytes()
    }

    /// Index of the metaslab holding byte `offset` (which must be inside the vdev).
    pub fn metaslab_index(&self, offset: u64) -> usize {
        (offset >> self.metaslab_shift) as usize
    }

    /// Checks that an extent is non-empty, sector-aligned and inside the vdev.
    pub fn check_extent(&self, offset: u64, length: u64) -> Result<(), SpaceError> {
        let end = extent_end(offset, length)?;
        let sector_mask = (1u64 << self.ashift) - 1;
        if offset & sector_mask != 0 || length & sector_mask != 0 {
            return Err(SpaceError::Misaligned {
                vdev: self.vdev,
                offset,
                length,
                ashift: self.ashift,
            });
        }
        if end > self.size_bytes {
            return Err(SpaceError::OutOfRange {
                vdev: self.vdev,
                offset,
                length,
                size_bytes: self.size_bytes,
            });
        }
        Ok(())
    }

    /// The parts `(metaslab index, offset, length)` of a checked extent, one per metaslab.
    fn parts(&self, offset: u64, length: u64) -> Vec<(usize, u64, u64)> {
        let end = offset + length;
        let mut parts = Vec::with_capacity(1);
        let mut part_start = offset;
        while part_start < end {
            let index = self.metaslab_index(part_start);
            let part_end = end.min(self.metaslabs[index].end());
            parts.push((index, part_start, part_end - part_start));
            part_start = part_end;
        }
        parts
    }

    /// Whether no byte of a checked extent is free or deferred.
    pub fn is_allocated(&self, offset: u64, length: u64) -> bool {
        !self.deferred.overlaps(offset, length)
            && self
                .parts(offset, length)
                .into_iter()
                .all(|(index, start, len)| !self.metaslabs[index].free_tree().overlaps(start, len))
    }

    /// Marks a checked, wholly free extent allocated (replay of an Alloc).
    pub fn claim(&mut self, offset: u64, length: u64) -> Result<(), SpaceError> {
        let parts = self.parts(offset, length);
        let all_free = parts
            .iter()
            .all(|&(index, start, len)| self.metaslabs[index].free_tree().contains(start, len));
        if !all_free {
            return Err(SpaceError::AlreadyAllocated {
                vdev: self.vdev,
                offset,
                length,
            });
        }
        for (index, start, len) in parts {
            self.metaslabs[index]
                .claim(start, len)
                .expect("checked wholly free above");
            self.refresh_weight(index);
        }
        self.free_bytes -= length;
        Ok(())
    }

    /// Moves a checked, wholly allocated extent to the deferred set.
    pub fn defer_free(&mut self, offset: u64, length: u64) -> Result<(), SpaceError> {
        self.check_allocated_for_free(offset, length)?;
        self.deferred
            .add(offset, length)
            .expect("checked not deferred above");
        for (index, start, len) in self.parts(offset, length) {
            self.metaslabs[index].defer(start, len);
        }
        Ok(())
    }

    /// Returns a checked, wholly allocated extent to the free trees at once.
    pub fn free_now(&mut self, offset: u64, length: u64) -> Result<(), SpaceError> {
        self.check_allocated_for_free(offset, length)?;
        for (index, start, len) in self.parts(offset, length) {
            self.metaslabs[index]
                .free_now(start, len)
                .expect("checked not free above");
            self.refresh_weight(index);
        }
        self.free_bytes += length;
        Ok(())
    }

    /// Moves a deferred extent (as recorded by `defer_free`, or a part of one) to the free trees.
    pub fn release_deferred(&mut self, offset: u64, length: u64) -> Result<(), SpaceError> {
        self.deferred.remove(offset, length)?;
        for (index, start, len) in self.parts(offset, length) {
            self.metaslabs[index].release_deferred(start, len)?;
            self.refresh_weight(index);
        }
        self.free_bytes += length;
        Ok(())
    }

    fn check_allocated_for_free(&self, offset: u64, length: u64) -> Result<(), SpaceError> {
        if self.is_allocated(offset, length) {
            Ok(())
        } else {
            Err(SpaceError::DoubleFree {
                vdev: self.vdev,
                offset,
                length,
            })
        }
    }

    /// Allocates `length` bytes for copy `slot` of a block, in no metaslab of `avoid`. Returns
    /// the offset, or `None` when no allowed metaslab has a free run that long.
    pub fn allocate(&mut self, length: u64, slot: usize, avoid: &BTreeSet<usize>) -> Option<u64> {
        if let Some(active) = self.active[slot].map(|index| index as usize)
            && !avoid.contains(&active)
            && self.keeps_active(active, length)
            && let Some(offset) = self.metaslabs[active].allocate(length)
        {
            self.refresh_weight(active);
            self.free_bytes -= length;
            return Some(offset);
        }
        let chosen = self.choose_metaslab(length, slot, avoid)?;
        let offset = self.metaslabs[chosen]
            .allocate(length)
            .expect("the chosen metaslab has a free run long enough");
        self.refresh_weight(chosen);
        self.free_bytes -= length;
        self.active[slot] = Some(chosen as u32);
        Some(offset)
    }

    /// Last resort when no metaslab holds `length` bytes (a block larger than a metaslab, or a
    /// nearly full vdev): the lowest free run that crosses metaslab boundaries and is long
    /// enough, touching no metaslab of `avoid`. Costs a walk of every free segment, which only
    /// happens when the normal path has failed.
    pub fn allocate_spanning(&mut self, length: u64, avoid: &BTreeSet<usize>) -> Option<u64> {
        let offset = self.free_runs().into_iter().find_map(|(start, end)| {
            let fits = end - start >= length
                && self
                    .parts(start, length)
                    .iter()
                    .all(|(index, _, _)| !avoid.contains(index));
            fits.then_some(start)
        })?;
        self.claim(offset, length)
            .expect("a free run is wholly free");
        Some(offset)
    }

    /// Whether the active metaslab `active` should serve a request of `length` bytes.
    fn keeps_active(&self, active: usize, length: u64) -> bool {
        let largest = self.metaslabs[active].largest_free_segment_bytes();
        if largest < length {
            return false;
        }
        if largest >= ACTIVE_KEEP_SEGMENT_BYTES || self.metaslabs[active].fits_at_cursor(length) {
            return true;
        }
        let best_other_bucket = self
            .by_weight
            .iter()
            .rev()
            .find(|(_, Reverse(index))| *index as usize != active)
            .map_or(0, |&(weight, _)| weight_bucket(weight));
        let active_bucket = weight_bucket(self.weights[active]);
        best_other_bucket < active_bucket + ACTIVE_SWITCH_BUCKETS
    }

    /// The heaviest metaslab outside `avoid` with a free run of `length` bytes, preferring one
    /// that is not active for another copy slot.
    fn choose_metaslab(&self, length: u64, slot: usize, avoid: &BTreeSet<usize>) -> Option<usize> {
        // Weights below this bucket cannot hold `length` (their largest run is shorter).
        let bucket_min = histogram_bucket(length) as u64 + 1;
        let other_slots: BTreeSet<usize> = self
            .active
            .iter()
            .enumerate()
            .filter(|&(other, _)| other != slot)
            .filter_map(|(_, active)| active.map(|index| index as usize))
            .collect();
        let candidates = || {
            self.by_weight
                .iter()
                .rev()
                .take_while(|&&(weight, _)| weight_bucket(weight) >= bucket_min)
                .map(|&(_, Reverse(index))| index as usize)
                .filter(|index| !avoid.contains(index))
                .filter(|&index| self.metaslabs[index].largest_free_segment_bytes() >= length)
        };
        candidates()
            .find(|index| !other_slots.contains(index))
            .or_else(|| candidates().next())
    }

    fn refresh_weight(&mut self, index: usize) {
        let weight = self.metaslabs[index].weight(self.size_bytes);
        let old = self.weights[index];
        if weight == old {
            return;
        }
        let removed = self.by_weight.remove(&(old, Reverse(index as u32)));
        debug_assert!(removed, "metaslab {index} missing from the weight index");
        self.by_weight.insert((weight, Reverse(index as u32)));
        self.weights[index] = weight;
    }

    /// Free and deferred extents merged into `(start, end)` runs, ascending: everything that is
    /// not allocated.
    pub fn unallocated_runs(&self) -> Vec<(u64, u64)> {
        let mut runs: Vec<(u64, u64)> = self
            .metaslabs
            .iter()
            .flat_map(|metaslab| metaslab.free_tree().iter())
            .chain(self.deferred.iter())
            .collect();
        runs.sort_unstable();
        coalesce(runs)
    }

    /// Free extents merged into `(start, end)` runs (adjacent metaslabs' segments joined).
    pub fn free_runs(&self) -> Vec<(u64, u64)> {
        let runs = self
            .metaslabs
            .iter()
            .flat_map(|metaslab| metaslab.free_tree().iter())
            .collect();
        coalesce(runs)
    }

    /// `(offset, length)` of every maximal extent not covered by `runs` (sorted, disjoint).
    pub fn complement(&self, runs: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut position = 0;
        for &(start, end) in runs {
            if start > position {
                gaps.push((position, start - position));
            }
            position = end;
        }
        if position < self.size_bytes {
            gaps.push((position, self.size_bytes - position));
        }
        gaps
    }

    /// Panics if the weight index or the accounting disagrees with the metaslabs.
    pub fn assert_invariants(&self) {
        assert_eq!(self.by_weight.len(), self.metaslabs.len());
        let free_bytes: u64 = self.metaslabs.iter().map(Metaslab::free_bytes).sum();
        assert_eq!(self.free_bytes, free_bytes, "free bytes");
        let mut deferred_bytes = 0;
        for (index, metaslab) in self.metaslabs.iter().enumerate() {
            metaslab.free_tree().assert_invariants();
            let weight = metaslab.weight(self.size_bytes);
            assert_eq!(
                self.weights[index], weight,
                "stale weight of metaslab {index}"
            );
            assert!(self.by_weight.contains(&(weight, Reverse(index as u32))));
            deferred_bytes += metaslab.deferred_bytes();
            assert_eq!(
                metaslab.free_bytes() + metaslab.deferred_bytes() + metaslab.allocated_bytes(),
                metaslab.size_bytes()
            );
        }
        self.deferred.assert_invariants();
        assert_eq!(
            deferred_bytes,
            self.deferred.space_bytes(),
            "deferred bytes"
        );
        for (start, end) in self.deferred.iter() {
            for (index, part_start, len) in self.parts(start, end - start) {
                assert!(
                    !self.metaslabs[index].free_tree().overlaps(part_start, len),
                    "deferred extent {part_start:#x} is also free"
                );
            }
        }
    }
}

/// Merges sorted, disjoint `(start, end)` runs that touch.
fn coalesce(runs: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for (start, end) in runs {
        match merged.last_mut() {
            Some((_, last_end)) if *last_end == start => *last_end = end,
            _ => merged.push((start, end)),
        }
    }
    merged
}
