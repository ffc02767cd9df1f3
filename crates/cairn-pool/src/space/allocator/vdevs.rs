//! The vdev set: building the allocator from its vdevs (`new`, `validated`), and adding,
//! retiring and removing a vdev (`pool add`, `pool remove` of a log device).
//!
//! Invariants: a vdev leaves only once nothing on it is allocated, deferred or waiting for the
//! space log; `vdevs` stays sorted by id and the rotor valid. This file uses `state` below it.

use super::placement::ROTOR_CHUNK_BYTES;
use super::state::{SpaceAllocator, VdevSpace};
use crate::space::SpaceError;
use crate::space::class::SpaceClass;
use crate::space::metaslab::METASLAB_COUNT_MAX;
use crate::space::range_tree::RangeTree;
use crate::space::top_vdev::TopVdevSpace;
use cairn_format::{ASHIFT_MAX, ASHIFT_MIN};
use std::collections::{BTreeMap, BTreeSet};

impl SpaceAllocator {
    /// An allocator with every byte of every vdev free. Errors on duplicate vdev ids, or on any
    /// vdev `validated` refuses.
    pub fn new(vdevs: &[VdevSpace]) -> Result<Self, SpaceError> {
        let mut spaces: Vec<TopVdevSpace> = Vec::with_capacity(vdevs.len());
        let mut ids = BTreeSet::new();
        for config in vdevs {
            if !ids.insert(config.vdev) {
                return Err(SpaceError::InvalidConfig {
                    vdev: config.vdev,
                    reason: "listed twice".into(),
                });
            }
            spaces.push(Self::validated(config)?);
        }
        spaces.sort_by_key(|space| space.vdev);
        let mut allocator = Self {
            vdevs: spaces,
            rotor: 0,
            rotor_bytes: 0,
            rotor_chunk_bytes: ROTOR_CHUNK_BYTES,
            deferred_by_txg: BTreeMap::new(),
            changes: BTreeMap::new(),
            synced_txg: None,
            release_floor: None,
            read_floor: None,
            log_rotor_vdev: 0,
            fault: None,
        };
        allocator.settle_rotor(true, true);
        Ok(allocator)
    }

    /// A wholly free vdev for `config`, shared by `new` and `add_vdev` so both refuse the same
    /// things: an ashift outside `ASHIFT_MIN..=ASHIFT_MAX`, a metaslab smaller than a sector, a
    /// data region smaller than a sector, or more than `METASLAB_COUNT_MAX` metaslabs. Whether
    /// the id is unique is for the caller to check.
    fn validated(config: &VdevSpace) -> Result<TopVdevSpace, SpaceError> {
        let invalid = |reason: String| SpaceError::InvalidConfig {
            vdev: config.vdev,
            reason,
        };
        if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&config.ashift) {
            return Err(invalid(format!("ashift {} out of range", config.ashift)));
        }
        if config.metaslab_shift < config.ashift || config.metaslab_shift > 63 {
            return Err(invalid(format!(
                "metaslab shift {} out of range for ashift {}",
                config.metaslab_shift, config.ashift
            )));
        }
        let size_bytes = config.data_size_bytes & !((1u64 << config.ashift) - 1);
        if size_bytes == 0 {
            return Err(invalid(format!(
                "data region of {} bytes is smaller than a sector",
                config.data_size_bytes
            )));
        }
        if let Some(geometry) = &config.raidz
            && geometry.ashift() != config.ashift
        {
            return Err(invalid(format!(
                "raidz layout of ashift {} on a vdev of ashift {}",
                geometry.ashift(),
                config.ashift
            )));
        }
        let metaslab_count = size_bytes.div_ceil(1u64 << config.metaslab_shift);
        if metaslab_count > METASLAB_COUNT_MAX {
            return Err(invalid(format!(
                "{metaslab_count} metaslabs, more than {METASLAB_COUNT_MAX}"
            )));
        }
        Ok(TopVdevSpace::new(
            config.vdev,
            config.class,
            size_bytes,
            config.ashift,
            config.metaslab_shift,
            config.raidz,
        ))
    }

    /// Adds a wholly free top-level vdev (`pool add` of a data or log device). Errors, changing
    /// nothing, if the id is already used or `new` would refuse the configuration.
    pub fn add_vdev(&mut self, space: VdevSpace) -> Result<(), SpaceError> {
        if self.vdev_index(space.vdev).is_ok() {
            return Err(SpaceError::InvalidConfig {
                vdev: space.vdev,
                reason: "already a top-level vdev of this pool".into(),
            });
        }
        let top = Self::validated(&space)?;
        let index = self.vdevs.partition_point(|other| other.vdev < space.vdev);
        let had_vdevs = !self.vdevs.is_empty();
        self.vdevs.insert(index, top);
        if had_vdevs && index <= self.rotor {
            // Keep the rotor on the vdev it was on.
            self.rotor += 1;
        }
        self.settle_rotor(false, space.class == SpaceClass::Normal);
        Ok(())
    }

    /// Bytes of vdev `vdev` that are `(allocated, deferred)`: what must drain before
    /// `remove_vdev` may drop it.
    pub fn vdev_in_use(&self, vdev: u32) -> Result<(u64, u64), SpaceError> {
        let space = &self.vdevs[self.vdev_index(vdev)?];
        let deferred_bytes = space.deferred_bytes();
        Ok((
            space.size_bytes - space.free_bytes() - deferred_bytes,
            deferred_bytes,
        ))
    }

    /// Lets Log vdev `vdev` take new log blocks, or stops it (they then go to the other log
    /// vdevs, else the pool). A log vdev being added stays closed until the txg adding it is
    /// durable (a log block there must never be reachable from a chain an import could find
    /// without it); one being removed is closed so that it empties and `remove_vdev` can drop
    /// it. Normal vdevs always take allocations.
    pub fn set_allocatable(&mut self, vdev: u32, allocatable: bool) -> Result<(), SpaceError> {
        let index = self.vdev_index(vdev)?;
        let space = &mut self.vdevs[index];
        if space.class != SpaceClass::Log {
            return Err(SpaceError::InvalidConfig {
                vdev,
                reason: "only log vdevs can be closed to allocations".into(),
            });
        }
        space.noalloc = !allocatable;
        Ok(())
    }

    /// Drops vdev `vdev` from the allocator (`pool remove` of a log device). Refused with
    /// `VdevInUse`, changing nothing, while any byte of it is allocated or deferred or a change
    /// of it waits in `take_changes`: its blocks, the older trees still reaching them, and the
    /// space log must all be done with it first.
    pub fn remove_vdev(&mut self, vdev: u32) -> Result<(), SpaceError> {
        let index = self.vdev_index(vdev)?;
        let (allocated_bytes, deferred_bytes) = self.vdev_in_use(vdev)?;
        let pending_changes = self.pending_changes_of(vdev);
        if allocated_bytes != 0 || deferred_bytes != 0 || pending_changes != 0 {
            return Err(SpaceError::VdevInUse {
                vdev,
                allocated_bytes,
                deferred_bytes,
                pending_changes,
            });
        }
        let removed = self.vdevs.remove(index);
        // Only empty trees can be left (an `unallocate` drains its record but keeps the tree).
        for changes in self.changes.values_mut() {
            changes.allocs.remove(&vdev);
            changes.frees.remove(&vdev);
        }
        let rotor_lost = index == self.rotor;
        if index < self.rotor {
            self.rotor -= 1;
        }
        self.settle_rotor(rotor_lost, removed.class == SpaceClass::Normal);
        Ok(())
    }

    /// Coalesced Alloc and Free segments of vdev `vdev` recorded and not yet taken, all txgs.
    fn pending_changes_of(&self, vdev: u32) -> usize {
        self.changes
            .values()
            .flat_map(|changes| [changes.allocs.get(&vdev), changes.frees.get(&vdev)])
            .flatten()
            .map(RangeTree::segment_count)
            .sum()
    }
}
