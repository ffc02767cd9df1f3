//! Queries and accounting: the pool's and each vdev's space numbers (`stats`), the slop kept
//! for metadata (`slop_bytes`, `can_allocate_user`), lookups (`is_allocated`, `metaslabs`,
//! `vdev_index`) and `assert_invariants`.
//!
//! Invariants: capacity counts Normal vdevs only; `allocated + deferred + free == size` per
//! metaslab, vdev and pool (checked by `assert_invariants`). This file uses `state` below it.

use super::state::{SpaceAllocator, SpaceStats, VdevSpaceStats};
use crate::space::SpaceError;
use crate::space::class::SpaceClass;
use crate::space::metaslab::Metaslab;
use crate::space::range_tree::RangeTree;
use crate::space::top_vdev::TopVdevSpace;
use cairn_format::Dva;
use std::collections::BTreeMap;

/// The slop is 2^-5 = 1/32 of the pool...
pub const SLOP_SHIFT: u32 = 5;
/// ...but at least 4 MiB (enough for a few txgs of metadata on a small test pool)...
pub const SLOP_BYTES_MIN: u64 = 4 << 20;
/// ...and at most 128 GiB (on a huge pool 1/32 is far more than metadata ever needs).
pub const SLOP_BYTES_MAX: u64 = 128 << 30;

impl SpaceAllocator {
    /// Whether every byte of the copy is allocated (false for unknown vdevs and bad extents).
    pub fn is_allocated(&self, dva: &Dva) -> bool {
        let length = u64::from(dva.asize);
        self.vdev_index(dva.vdev).is_ok_and(|index| {
            let vdev = &self.vdevs[index];
            vdev.check_extent(dva.offset, length).is_ok() && vdev.is_allocated(dva.offset, length)
        })
    }

    pub fn stats(&self) -> SpaceStats {
        let vdevs: Vec<VdevSpaceStats> = self
            .vdevs
            .iter()
            .map(|vdev| {
                let free_bytes = vdev.free_bytes();
                let deferred_bytes = vdev.deferred_bytes();
                VdevSpaceStats {
                    vdev: vdev.vdev,
                    class: vdev.class,
                    size_bytes: vdev.size_bytes,
                    allocated_bytes: vdev.size_bytes - free_bytes - deferred_bytes,
                    deferred_bytes,
                    free_bytes,
                    fragmentation_percent: fragmentation_percent(vdev.metaslabs.iter()),
                    metaslab_count: vdev.metaslabs.len() as u64,
                }
            })
            .collect();
        let normal = || vdevs.iter().filter(|v| v.class == SpaceClass::Normal);
        SpaceStats {
            size_bytes: normal().map(|v| v.size_bytes).sum(),
            allocated_bytes: normal().map(|v| v.allocated_bytes).sum(),
            deferred_bytes: normal().map(|v| v.deferred_bytes).sum(),
            free_bytes: normal().map(|v| v.free_bytes).sum(),
            fragmentation_percent: fragmentation_percent(
                self.normal_vdevs().flat_map(|vdev| vdev.metaslabs.iter()),
            ),
            metaslab_count: normal().map(|v| v.metaslab_count).sum(),
            vdevs,
        }
    }

    /// Allocatable bytes of the pool (sum of the Normal vdevs' metaslabs).
    pub fn size_bytes(&self) -> u64 {
        self.normal_vdevs().map(|vdev| vdev.size_bytes).sum()
    }

    /// Bytes that can be allocated now on Normal vdevs (deferred frees not included).
    pub fn free_bytes(&self) -> u64 {
        self.normal_vdevs().map(TopVdevSpace::free_bytes).sum()
    }

    pub(super) fn normal_vdevs(&self) -> impl Iterator<Item = &TopVdevSpace> {
        self.vdevs
            .iter()
            .filter(|vdev| vdev.class == SpaceClass::Normal)
    }

    /// The first Normal vdev at or after index `from` (wrapping).
    pub(super) fn next_normal(&self, from: usize) -> Option<usize> {
        let count = self.vdevs.len();
        (0..count)
            .map(|k| (from + k) % count)
            .find(|&index| self.vdevs[index].class == SpaceClass::Normal)
    }

    /// Space kept back from user data: 1/32 of the pool, at least `SLOP_BYTES_MIN`, at most
    /// `SLOP_BYTES_MAX`, and never more than half the pool.
    pub fn slop_bytes(&self) -> u64 {
        let size_bytes = self.size_bytes();
        (size_bytes >> SLOP_SHIFT)
            .clamp(SLOP_BYTES_MIN, SLOP_BYTES_MAX)
            .min(size_bytes / 2)
    }

    /// Free bytes user data may still take: free minus slop. Deferred frees are not counted
    /// (conservative: they come back a few txgs later).
    pub fn available_bytes(&self) -> u64 {
        self.free_bytes().saturating_sub(self.slop_bytes())
    }

    /// Whether a user write of `bytes` may be accepted without eating into the slop; callers
    /// return ENOSPC when not. Metadata allocations go straight to `allocate`.
    pub fn can_allocate_user(&self, bytes: u64) -> bool {
        bytes <= self.available_bytes()
    }

    /// Highest txg reported synced (by `sync_done` or `replay`).
    pub fn synced_txg(&self) -> Option<u64> {
        self.synced_txg
    }

    /// The metaslabs of a vdev, by offset.
    pub fn metaslabs(&self, vdev: u32) -> Option<&[Metaslab]> {
        let index = self.vdev_index(vdev).ok()?;
        Some(&self.vdevs[index].metaslabs)
    }

    /// Panics if any internal invariant is broken: trees, weight indexes, accounting, and the
    /// per-txg deferred lists against each vdev's deferred set. For tests and checkers.
    pub fn assert_invariants(&self) {
        let mut deferred: BTreeMap<u32, RangeTree> = BTreeMap::new();
        for per_vdev in self.deferred_by_txg.values() {
            for (&vdev, extents) in per_vdev {
                extents.assert_invariants();
                let union = deferred.entry(vdev).or_default();
                for (start, end) in extents.iter() {
                    union
                        .add(start, end - start)
                        .expect("deferred extents of different txgs overlap");
                }
            }
        }
        for vdev in &self.vdevs {
            vdev.assert_invariants();
            let union = deferred.remove(&vdev.vdev).unwrap_or_default();
            assert_eq!(union, vdev.deferred, "deferred lists of vdev {}", vdev.vdev);
        }
        assert!(deferred.is_empty(), "deferred frees on unknown vdevs");
        let stats = self.stats();
        assert_eq!(
            stats.allocated_bytes + stats.deferred_bytes + stats.free_bytes,
            stats.size_bytes
        );
        for vdev in &stats.vdevs {
            assert_eq!(
                vdev.allocated_bytes + vdev.deferred_bytes + vdev.free_bytes,
                vdev.size_bytes,
                "accounting of vdev {}",
                vdev.vdev
            );
        }
        assert!(
            self.vdevs
                .windows(2)
                .all(|pair| pair[0].vdev < pair[1].vdev),
            "vdevs not sorted by unique id"
        );
        if let Some(rotor) = self.vdevs.get(self.rotor) {
            assert!(
                rotor.class == SpaceClass::Normal || self.next_normal(0).is_none(),
                "the rotor is on log vdev {}",
                rotor.vdev
            );
        } else {
            assert!(self.vdevs.is_empty(), "rotor index out of range");
        }
    }

    pub(super) fn vdev_index(&self, vdev: u32) -> Result<usize, SpaceError> {
        self.vdevs
            .binary_search_by_key(&vdev, |space| space.vdev)
            .map_err(|_| SpaceError::UnknownVdev { vdev })
    }
}

/// Free-space-weighted average fragmentation of some metaslabs (0 when nothing is free).
pub(super) fn fragmentation_percent<'a>(metaslabs: impl Iterator<Item = &'a Metaslab>) -> u8 {
    let mut weighted: u128 = 0;
    let mut free_bytes: u128 = 0;
    for metaslab in metaslabs {
        let free = u128::from(metaslab.free_bytes());
        weighted += free * u128::from(metaslab.fragmentation_percent());
        free_bytes += free;
    }
    weighted
        .checked_div(free_bytes)
        .map_or(0, |percent| percent as u8)
}
