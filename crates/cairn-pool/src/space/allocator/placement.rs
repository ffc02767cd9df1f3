//! Placement: `allocate` (primary copies rotating over the Normal vdevs, dittos kept apart),
//! `allocate_log` and `allocate_log_on_pool` (intent-log blocks), `claim` (an exact extent found
//! at import), and the rotor that spreads primary copies (`advance_rotor`, `settle_rotor`).
//!
//! Invariants: a request is rounded up to its vdev's sector (on a raidz vdev, to what the
//! block's stripe allocates: `TopVdevSpace::asize_for`); an allocation is recorded for its
//! txg, which must still be open (`check_txg_open`); `allocate` uses Normal vdevs only. This
//! file uses `state` below it.

use super::state::SpaceAllocator;
use crate::space::SpaceError;
use crate::space::class::SpaceClass;
use crate::space::top_vdev::{LOG_SLOT, TopVdevSpace};
use cairn_format::Dva;
use cairn_format::blkptr::DVA_COUNT_MAX;
use std::collections::BTreeSet;

/// Primary allocations stay on one top-level vdev for about this many bytes before moving to
/// the next: twice the largest merged I/O (1 MiB), so rotation never cuts a run short of a full
/// I/O, yet small enough that every vdev is busy during a txg of a few hundred MiB.
pub const ROTOR_CHUNK_BYTES: u64 = 2 << 20;
/// The rotor chunk of a vdev is scaled by its share of the free space, in steps of a quarter,
/// within these bounds.
pub(super) const ROTOR_CHUNK_BYTES_STEP: u64 = ROTOR_CHUNK_BYTES / 4;
pub(super) const ROTOR_CHUNK_BYTES_MIN: u64 = ROTOR_CHUNK_BYTES / 4;
pub(super) const ROTOR_CHUNK_BYTES_MAX: u64 = ROTOR_CHUNK_BYTES * 4;

/// One place `allocate` tries: a vdev (index into `vdevs`), whether to keep out of the
/// metaslabs of the other copies, and whether to look for a run spanning metaslabs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attempt {
    pub(super) index: usize,
    pub(super) avoid_metaslabs: bool,
    pub(super) spanning: bool,
}

impl SpaceAllocator {
    /// Allocates `size_bytes` (rounded up to the sector) for txg `txg`. `avoid` lists the other
    /// copies of the same block: the new copy goes to a vdev none of them is on if one has room,
    /// else to a metaslab none of them is in, else anywhere free. Records an Alloc for `txg`.
    pub fn allocate(
        &mut self,
        size_bytes: u32,
        txg: u64,
        avoid: &[Dva],
    ) -> Result<Dva, SpaceError> {
        let slot = avoid.len().min(DVA_COUNT_MAX - 1);
        self.allocate_in_slot(size_bytes, txg, avoid, slot)
    }

    /// Allocates an intent-log block on the pool's normal vdevs (no log device takes it), in a
    /// metaslab of its own (`LOG_SLOT`), so consecutive blocks of a chain stay contiguous.
    pub fn allocate_log_on_pool(&mut self, size_bytes: u32, txg: u64) -> Result<Dva, SpaceError> {
        self.allocate_in_slot(size_bytes, txg, &[], LOG_SLOT)
    }

    fn allocate_in_slot(
        &mut self,
        size_bytes: u32,
        txg: u64,
        avoid: &[Dva],
        slot: usize,
    ) -> Result<Dva, SpaceError> {
        if size_bytes == 0 {
            return Err(SpaceError::InvalidSize { size_bytes: 0 });
        }
        self.check_txg_open(txg)?;
        for attempt in self.attempt_order(avoid) {
            let vdev = &self.vdevs[attempt.index];
            let asize = vdev.asize_for(size_bytes);
            if asize > u64::from(u32::MAX) {
                continue;
            }
            let avoided = if attempt.avoid_metaslabs {
                Self::metaslabs_of(vdev, avoid)
            } else {
                BTreeSet::new()
            };
            let vdev = &mut self.vdevs[attempt.index];
            let found = if attempt.spanning {
                vdev.allocate_spanning(asize, &avoided)
            } else {
                vdev.allocate(asize, slot, &avoided)
            };
            let Some(offset) = found else {
                continue;
            };
            let index = attempt.index;
            let vdev_id = self.vdevs[index].vdev;
            if slot == 0 {
                self.advance_rotor(index, asize);
            }
            Self::record(
                &mut self.changes.entry(txg).or_default().allocs,
                vdev_id,
                offset,
                asize,
            );
            return Ok(Dva {
                vdev: vdev_id,
                offset,
                asize: asize as u32,
            });
        }
        Err(SpaceError::NoSpace {
            size_bytes: u64::from(size_bytes),
        })
    }

    /// Allocates an intent-log block of `size_bytes` for txg `txg`: on a Log vdev if one has
    /// room (rotating over them block by block, so concurrent log chains spread over every log
    /// device), else wherever `allocate` would put it. Records an Alloc for `txg`.
    pub fn allocate_log(&mut self, size_bytes: u32, txg: u64) -> Result<Dva, SpaceError> {
        if size_bytes == 0 {
            return Err(SpaceError::InvalidSize { size_bytes: 0 });
        }
        self.check_txg_open(txg)?;
        let logs: Vec<usize> = (0..self.vdevs.len())
            .filter(|&index| {
                self.vdevs[index].class == SpaceClass::Log && !self.vdevs[index].noalloc
            })
            .collect();
        let first = logs
            .iter()
            .position(|&index| self.vdevs[index].vdev >= self.log_rotor_vdev)
            .unwrap_or(0);
        for spanning in [false, true] {
            for k in 0..logs.len() {
                let index = logs[(first + k) % logs.len()];
                let vdev = &mut self.vdevs[index];
                let asize = vdev.asize_for(size_bytes);
                if asize > u64::from(u32::MAX) {
                    continue;
                }
                let found = if spanning {
                    vdev.allocate_spanning(asize, &BTreeSet::new())
                } else {
                    vdev.allocate(asize, 0, &BTreeSet::new())
                };
                let Some(offset) = found else { continue };
                let vdev_id = vdev.vdev;
                // Past u32::MAX wraps to 0, which is "start from the lowest" anyway.
                self.log_rotor_vdev = vdev_id.wrapping_add(1);
                Self::record(
                    &mut self.changes.entry(txg).or_default().allocs,
                    vdev_id,
                    offset,
                    asize,
                );
                return Ok(Dva {
                    vdev: vdev_id,
                    offset,
                    asize: asize as u32,
                });
            }
        }
        self.allocate_log_on_pool(size_bytes, txg)
    }

    /// Marks exactly `dva`'s extent allocated in txg `txg` (an intent-log block found at
    /// import, which may have been allocated in a txg that never synced). `Ok(true)`: it was
    /// wholly free and is now allocated (an Alloc is recorded). `Ok(false)`: it was already
    /// wholly allocated; nothing changes. Anything else (partly free, deferred, outside the
    /// vdev, misaligned) is an error and changes nothing.
    pub fn claim(&mut self, dva: &Dva, txg: u64) -> Result<bool, SpaceError> {
        self.check_txg_open(txg)?;
        let index = self.vdev_index(dva.vdev)?;
        let length = u64::from(dva.asize);
        let vdev = &mut self.vdevs[index];
        vdev.check_extent(dva.offset, length)?;
        if vdev.is_allocated(dva.offset, length) {
            return Ok(false);
        }
        vdev.claim(dva.offset, length)?;
        Self::record(
            &mut self.changes.entry(txg).or_default().allocs,
            dva.vdev,
            dva.offset,
            length,
        );
        Ok(true)
    }

    /// Where to try an allocation whose other copies are `avoid`, in order. Tier 1: vdevs
    /// holding no other copy. Tier 2: the others, outside the metaslabs of the other copies.
    /// Tier 3: those again, anywhere. Each tier starts at the rotor, and tries every vdev the
    /// normal way before any for a free run spanning metaslabs (the costly last resort).
    fn attempt_order(&self, avoid: &[Dva]) -> Vec<Attempt> {
        let count = self.vdevs.len();
        let rotation = (0..count)
            .map(|k| (self.rotor + k) % count)
            .filter(|&index| self.vdevs[index].class == SpaceClass::Normal);
        let holds_copy =
            |index: &usize| avoid.iter().any(|dva| dva.vdev == self.vdevs[*index].vdev);
        let free_of_copies: Vec<usize> = rotation.clone().filter(|i| !holds_copy(i)).collect();
        let with_copies: Vec<usize> = rotation.filter(holds_copy).collect();
        let tiers = [
            (free_of_copies, false),
            (with_copies.clone(), true),
            (with_copies, false),
        ];
        let mut attempts = Vec::new();
        for (indexes, avoid_metaslabs) in tiers {
            for spanning in [false, true] {
                attempts.extend(indexes.iter().map(|&index| Attempt {
                    index,
                    avoid_metaslabs,
                    spanning,
                }));
            }
        }
        attempts
    }

    /// Indexes of the metaslabs of `vdev` that hold any byte of a copy in `avoid`.
    fn metaslabs_of(vdev: &TopVdevSpace, avoid: &[Dva]) -> BTreeSet<usize> {
        let mut indexes = BTreeSet::new();
        for dva in avoid.iter().filter(|dva| dva.vdev == vdev.vdev) {
            if dva.offset >= vdev.size_bytes {
                continue;
            }
            let last = dva
                .offset
                .saturating_add(u64::from(dva.asize.max(1)) - 1)
                .min(vdev.size_bytes - 1);
            indexes.extend(vdev.metaslab_index(dva.offset)..=vdev.metaslab_index(last));
        }
        indexes
    }

    /// Counts a primary allocation of `asize` bytes on vdev `index` against the rotor.
    fn advance_rotor(&mut self, index: usize, asize: u64) {
        if index == self.rotor {
            self.rotor_bytes += asize;
        } else {
            // The rotor vdev was full: continue from where the space was found.
            self.rotor = index;
            self.rotor_bytes = asize;
            self.rotor_chunk_bytes = self.rotor_chunk_bytes_for(index);
        }
        if self.rotor_bytes >= self.rotor_chunk_bytes {
            self.rotor = self
                .next_normal((self.rotor + 1) % self.vdevs.len())
                .unwrap_or(self.rotor);
            self.rotor_bytes = 0;
            self.rotor_chunk_bytes = self.rotor_chunk_bytes_for(self.rotor);
        }
    }

    /// After a vdev was added or removed (`rotor` already shifted to keep indexing the same vdev
    /// if it is still there): puts the rotor back on a Normal vdev, restarting its chunk, if it
    /// lost its vdev (`rotor_lost`) or is not on a Normal one, and recomputes the chunk when the
    /// Normal set changed, since every vdev's share of the free space did.
    pub(super) fn settle_rotor(&mut self, rotor_lost: bool, normal_set_changed: bool) {
        let on_normal = !rotor_lost
            && self
                .vdevs
                .get(self.rotor)
                .is_some_and(|vdev| vdev.class == SpaceClass::Normal);
        if !on_normal {
            self.rotor = self
                .rotor
                .checked_rem(self.vdevs.len())
                .and_then(|from| self.next_normal(from))
                .unwrap_or(0);
            self.rotor_bytes = 0;
        }
        if !on_normal || normal_set_changed {
            self.rotor_chunk_bytes = self.rotor_chunk_bytes_for(self.rotor);
        }
    }

    /// `ROTOR_CHUNK_BYTES` scaled by vdev `index`'s free space relative to the mean, rounded to
    /// the nearest `ROTOR_CHUNK_BYTES_STEP` (so vdevs that differ by a few percent still get
    /// equal chunks) and clamped.
    fn rotor_chunk_bytes_for(&self, index: usize) -> u64 {
        let total_free = u128::from(self.free_bytes());
        let normal_count = self.normal_vdevs().count();
        if normal_count <= 1 || total_free == 0 {
            return ROTOR_CHUNK_BYTES;
        }
        let share = u128::from(ROTOR_CHUNK_BYTES)
            * u128::from(self.vdevs[index].free_bytes())
            * normal_count as u128
            / total_free;
        let step = u128::from(ROTOR_CHUNK_BYTES_STEP);
        let rounded = (share + step / 2) / step * step;
        (rounded.min(u128::from(ROTOR_CHUNK_BYTES_MAX)) as u64).max(ROTOR_CHUNK_BYTES_MIN)
    }
}
