//! `SpaceAllocator`: the pool-wide allocator over every top-level vdev, with deferred frees,
//! the per-txg change records the engine writes to the space log, and replay from that log.
//!
//! Life of an extent (every byte of every vdev is in exactly one state):
//!
//! ```text
//!   free ──allocate(txg)──▶ allocated ──free(txg)──▶ deferred[txg] ──sync_done(txg + 3)──▶ free
//! ```
//!
//! Why defer: the uberblocks of the last few txgs still point at trees that use the freed blocks;
//! an import that falls back to one of them (torn newest uberblock) must find its blocks intact.
//! So freed space is not reused until `DEFER_TXGS` further txgs have synced.
//!
//! Every allocation and free is also recorded for its txg; `take_changes(txg)` drains them as
//! coalesced space-log entries: all Allocs of the txg (by vdev, offset), then all Frees. That
//! order replays correctly because within one txg nothing is allocated twice or freed twice (a
//! free is not reusable before its txg has synced, and allocations and frees stamped with an
//! already synced txg are refused), so every Alloc of a txg is of space free when the txg opened,
//! and every Free of space allocated before or during it.
//!
//! Placement:
//! - requests are rounded up to the vdev's sector (`2^ashift`);
//! - primary copies rotate over the top-level vdevs in chunks of about `ROTOR_CHUNK_BYTES`
//!   (scaled by each vdev's share of the free space, so an emptier vdev takes more), which
//!   spreads load while keeping runs long enough to merge into large I/Os;
//! - a ditto copy (`avoid` non-empty) goes to a vdev holding none of the other copies if one has
//!   room, else to another metaslab of the same vdev, else anywhere free;
//! - intent-log blocks that go to normal vdevs (`allocate_log_on_pool`) take a metaslab of
//!   their own, so a log chain stays one contiguous stream beside a txg's data;
//! - within a vdev, see `top_vdev` (active metaslab per copy) and `metaslab` (first-fit from a
//!   cursor, best-fit from 96% full).
//!
//! Accounting: `allocated + deferred + free == size` per metaslab, vdev and pool. The slop
//! (1/32 of the pool, at least 4 MiB, at most 128 GiB and never more than half) is kept free
//! for metadata: `can_allocate_user` refuses user data that would dip into it, `allocate` (used
//! by the engine for everything, metadata included) does not.
//!
//! Classes: a vdev is `Normal` (data and metadata) or `Log` (a separate intent-log device).
//! `allocate` only ever uses Normal vdevs; `allocate_log` prefers Log vdevs, rotating over them
//! block by block, and falls back to Normal ones when none has room. Pool capacity (size, free,
//! slop, what user data may take) counts Normal vdevs only, as log devices hold nothing a user
//! can fill. `claim` marks an exact extent allocated (intent-log blocks found at import).
//! `add_vdev` and `remove_vdev` change the vdev set (`pool add`, `pool remove` of a log device);
//! a vdev leaves only once nothing on it is allocated, deferred or waiting for the space log.
//!
//! Faults: a free the allocator refuses (a double free, an extent outside its vdev, a txg
//! already synced) means the caller's block pointers disagree with the space map: a crafted or
//! damaged image, or a bug. Carrying on would either hand out space that is still referenced or
//! leak it, and panicking would take every other pool of the process down with it. So `free`
//! keeps the first refusal as the allocator's *fault* (`fault()`, never cleared) besides
//! returning it; callers that cannot act on an error (the pipeline, the intent log) go on, and
//! the txg sync refuses to commit a txg while the allocator is faulted, which suspends the pool:
//! nothing more reaches disk, reads go on, and the reason is reported (`cairn pool status`).
//!
//! Determinism: every container is a `Vec` or a `BTreeMap`/`BTreeSet`; the same calls produce
//! the same placement and the same log entries.

use super::metaslab::{METASLAB_COUNT_MAX, Metaslab};
use super::range_tree::RangeTree;
use super::top_vdev::{LOG_SLOT, TopVdevSpace};
use super::{DEFER_TXGS, SpaceError};
use cairn_format::blkptr::DVA_COUNT_MAX;
use cairn_format::{ASHIFT_MAX, ASHIFT_MIN, Dva, SpaceLogEntry, SpaceOp};
use std::collections::{BTreeMap, BTreeSet};

/// Primary allocations stay on one top-level vdev for about this many bytes before moving to
/// the next: twice the largest merged I/O (1 MiB), so rotation never cuts a run short of a full
/// I/O, yet small enough that every vdev is busy during a txg of a few hundred MiB.
pub const ROTOR_CHUNK_BYTES: u64 = 2 << 20;
/// The rotor chunk of a vdev is scaled by its share of the free space, in steps of a quarter,
/// within these bounds.
const ROTOR_CHUNK_BYTES_STEP: u64 = ROTOR_CHUNK_BYTES / 4;
const ROTOR_CHUNK_BYTES_MIN: u64 = ROTOR_CHUNK_BYTES / 4;
const ROTOR_CHUNK_BYTES_MAX: u64 = ROTOR_CHUNK_BYTES * 4;

/// The slop is 2^-5 = 1/32 of the pool...
pub const SLOP_SHIFT: u32 = 5;
/// ...but at least 4 MiB (enough for a few txgs of metadata on a small test pool)...
pub const SLOP_BYTES_MIN: u64 = 4 << 20;
/// ...and at most 128 GiB (on a huge pool 1/32 is far more than metadata ever needs).
pub const SLOP_BYTES_MAX: u64 = 128 << 30;

/// What a top-level vdev is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpaceClass {
    /// Data and metadata.
    #[default]
    Normal,
    /// A separate intent-log device: only log blocks go there.
    Log,
}

/// Space of one top-level vdev, as the allocator is given it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VdevSpace {
    pub vdev: u32,
    pub class: SpaceClass,
    /// Bytes of the data region (DVA offsets run from 0 to this); rounded down to the sector.
    pub data_size_bytes: u64,
    /// log2 of the sector size: the allocation unit and alignment.
    pub ashift: u8,
    /// log2 of the metaslab size (see `metaslab_shift_for`).
    pub metaslab_shift: u8,
}

/// Space numbers of one top-level vdev.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VdevSpaceStats {
    pub vdev: u32,
    pub class: SpaceClass,
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub deferred_bytes: u64,
    pub free_bytes: u64,
    pub fragmentation_percent: u8,
    pub metaslab_count: u64,
}

/// Space numbers of the pool (sums over the vdevs, which are listed in `vdevs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpaceStats {
    pub size_bytes: u64,
    pub allocated_bytes: u64,
    pub deferred_bytes: u64,
    pub free_bytes: u64,
    /// Free-space-weighted average of the metaslabs' fragmentation.
    pub fragmentation_percent: u8,
    pub metaslab_count: u64,
    pub vdevs: Vec<VdevSpaceStats>,
}

/// A freed extent waiting for its txg to be `DEFER_TXGS` behind the last synced one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DeferredFree {
    pub txg: u64,
    pub vdev: u32,
    pub offset: u64,
    pub length: u64,
}

/// One place `allocate` tries: a vdev (index into `vdevs`), whether to keep out of the
/// metaslabs of the other copies, and whether to look for a run spanning metaslabs.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    index: usize,
    avoid_metaslabs: bool,
    spanning: bool,
}

/// Allocations and frees of one txg, per vdev.
#[derive(Debug, Clone, Default)]
struct TxgChanges {
    allocs: BTreeMap<u32, RangeTree>,
    frees: BTreeMap<u32, RangeTree>,
}

#[derive(Debug, Clone)]
pub struct SpaceAllocator {
    /// Sorted by vdev id.
    vdevs: Vec<TopVdevSpace>,
    /// Index (into `vdevs`) of the vdev primary copies go to now.
    rotor: usize,
    /// Bytes placed on the rotor vdev since it became the rotor.
    rotor_bytes: u64,
    /// Bytes the rotor vdev takes before the rotor moves on.
    rotor_chunk_bytes: u64,
    /// txg -> vdev -> extents freed in that txg and not yet reusable.
    deferred_by_txg: BTreeMap<u64, BTreeMap<u32, RangeTree>>,
    /// txg -> changes not yet taken by `take_changes`.
    changes: BTreeMap<u64, TxgChanges>,
    /// Highest txg passed to `sync_done` (or `replay`).
    synced_txg: Option<u64>,
    /// Frees made in this txg or later stay deferred regardless of age while set: a scan
    /// (scrub, check) walking an older tree must never see that space reused.
    release_floor: Option<u64>,
    /// The same for reads in flight (`set_read_floor`).
    read_floor: Option<u64>,
    /// Log vdevs with an id at or above this are tried first for the next log block (the one
    /// after the last used, wrapping): an id rather than an index, so it stays valid whatever
    /// vdevs are added or removed.
    log_rotor_vdev: u32,
    /// The first free this allocator refused (see "Faults" above); never cleared.
    fault: Option<SpaceError>,
}

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
            let sector_bytes = 1u64 << vdev.ashift;
            let asize = u64::from(size_bytes).div_ceil(sector_bytes) * sector_bytes;
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

    /// Frees a copy in txg `txg`: its space becomes reusable once txg `txg + DEFER_TXGS` has
    /// synced. Errors (changing nothing) unless every byte of it is allocated; the first such
    /// refusal also becomes the allocator's fault (see "Faults" above). Records a Free.
    pub fn free(&mut self, dva: &Dva, txg: u64) -> Result<(), SpaceError> {
        self.free_checked(dva, txg).inspect_err(|err| {
            if self.fault.is_none() {
                self.fault = Some(SpaceError::FreeRefused {
                    txg,
                    source: Box::new(err.clone()),
                });
            }
        })
    }

    /// The first free this allocator refused, if any: its space accounting no longer matches
    /// the block pointers, and no txg may be committed (see "Faults" above).
    pub fn fault(&self) -> Option<&SpaceError> {
        self.fault.as_ref()
    }

    fn free_checked(&mut self, dva: &Dva, txg: u64) -> Result<(), SpaceError> {
        self.check_txg_open(txg)?;
        let index = self.vdev_index(dva.vdev)?;
        let length = u64::from(dva.asize);
        let vdev = &mut self.vdevs[index];
        vdev.check_extent(dva.offset, length)?;
        vdev.defer_free(dva.offset, length)?;
        Self::record(
            self.deferred_by_txg.entry(txg).or_default(),
            dva.vdev,
            dva.offset,
            length,
        );
        Self::record(
            &mut self.changes.entry(txg).or_default().frees,
            dva.vdev,
            dva.offset,
            length,
        );
        Ok(())
    }

    /// Undoes an allocation made in txg `txg` whose changes have not been taken yet (a write
    /// that failed and will be retried elsewhere): the space is free again at once, without the
    /// defer window, since no synced state can reference it, and its Alloc record is dropped.
    pub fn unallocate(&mut self, dva: &Dva, txg: u64) -> Result<(), SpaceError> {
        self.check_txg_open(txg)?;
        let index = self.vdev_index(dva.vdev)?;
        let length = u64::from(dva.asize);
        self.vdevs[index].check_extent(dva.offset, length)?;
        let recorded = self
            .changes
            .get(&txg)
            .and_then(|changes| changes.allocs.get(&dva.vdev))
            .is_some_and(|extents| extents.contains(dva.offset, length));
        if !recorded {
            return Err(SpaceError::NotAllocatedInTxg {
                vdev: dva.vdev,
                offset: dva.offset,
                length,
                txg,
            });
        }
        self.vdevs[index].free_now(dva.offset, length)?;
        self.changes
            .get_mut(&txg)
            .and_then(|changes| changes.allocs.get_mut(&dva.vdev))
            .expect("checked recorded above")
            .remove(dva.offset, length)
            .expect("checked recorded above");
        Ok(())
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
                let sector_bytes = 1u64 << vdev.ashift;
                let asize = u64::from(size_bytes).div_ceil(sector_bytes) * sector_bytes;
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

    /// Txg `synced_txg` is durable: frees of txgs `<= synced_txg - DEFER_TXGS` become reusable.
    /// Allocations and frees for txgs `<= synced_txg` are refused from now on. A txg lower than
    /// one already reported changes nothing.
    pub fn sync_done(&mut self, synced_txg: u64) {
        let synced_txg = self.synced_txg.map_or(synced_txg, |s| s.max(synced_txg));
        self.synced_txg = Some(synced_txg);
        let Some(mut release_txg_max) = synced_txg.checked_sub(DEFER_TXGS) else {
            return;
        };
        let floor = match (self.release_floor, self.read_floor) {
            (Some(scan), Some(read)) => Some(scan.min(read)),
            (scan, read) => scan.or(read),
        };
        if let Some(floor) = floor {
            let Some(below_floor) = floor.checked_sub(1) else {
                return;
            };
            release_txg_max = release_txg_max.min(below_floor);
        }
        let kept = self.deferred_by_txg.split_off(&(release_txg_max + 1));
        let released = std::mem::replace(&mut self.deferred_by_txg, kept);
        for per_vdev in released.into_values() {
            for (vdev, extents) in per_vdev {
                let index = self
                    .vdev_index(vdev)
                    .expect("deferred frees are only recorded for known vdevs");
                for (start, end) in extents.iter() {
                    self.vdevs[index]
                        .release_deferred(start, end - start)
                        .expect("per-txg deferred extents are part of the vdev's deferred set");
                }
            }
        }
    }

    /// Drains the changes recorded for `txg`: coalesced Alloc entries (by vdev, offset), then
    /// coalesced Free entries (by vdev, offset). Changes of other txgs stay.
    pub fn take_changes(&mut self, txg: u64) -> Vec<SpaceLogEntry> {
        let Some(changes) = self.changes.remove(&txg) else {
            return Vec::new();
        };
        let entries = |op: SpaceOp, per_vdev: BTreeMap<u32, RangeTree>| {
            per_vdev.into_iter().flat_map(move |(vdev, extents)| {
                extents
                    .iter()
                    .map(|(start, end)| SpaceLogEntry {
                        vdev,
                        op,
                        offset: start,
                        length: end - start,
                        txg,
                    })
                    .collect::<Vec<_>>()
            })
        };
        entries(SpaceOp::Alloc, changes.allocs)
            .chain(entries(SpaceOp::Free, changes.frees))
            .collect()
    }

    /// Txgs with recorded changes not yet taken, ascending.
    pub fn pending_change_txgs(&self) -> Vec<u64> {
        self.changes.keys().copied().collect()
    }

    /// Whether some deferred free would be released by syncing more txgs (none is held back
    /// by the release floor): the engine then syncs txgs even while idle, so freed space comes
    /// back without waiting for new writes.
    pub fn has_releasable_deferred(&self) -> bool {
        match (self.deferred_by_txg.keys().next(), self.release_floor) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(&oldest_txg), Some(floor_txg)) => oldest_txg < floor_txg,
        }
    }

    /// Holds back the reuse of space freed in `txg` or later (`Some`) until released (`None`);
    /// frees already older stay on their normal schedule. Used while a scan walks a tree.
    pub fn set_release_floor(&mut self, txg: Option<u64>) {
        self.release_floor = txg;
    }

    /// Like `set_release_floor`, for reads in flight (the oldest one's synced txg); the lower
    /// of the two floors holds.
    pub fn set_read_floor(&mut self, txg: Option<u64>) {
        self.read_floor = txg;
    }

    /// How many entries `take_changes(txg)` would return now (coalesced segments).
    pub fn pending_change_count(&self, txg: u64) -> usize {
        self.changes.get(&txg).map_or(0, |changes| {
            changes
                .allocs
                .values()
                .chain(changes.frees.values())
                .map(|tree| tree.segment_count())
                .sum()
        })
    }

    /// Applies space-log entries, oldest first, to this allocator (meant to be fresh: all
    /// free). `current_txg` is the last synced txg (the imported uberblock's): a Free whose
    /// `txg + DEFER_TXGS > current_txg` stays deferred, others free the space at once.
    /// Nothing is recorded for `take_changes`. The first inconsistent entry (alloc of space not
    /// free, free of space not allocated, unknown vdev, extent outside the vdev or misaligned)
    /// stops the replay with `SpaceError::Replay` naming it; entries before it stay applied.
    pub fn replay(
        &mut self,
        entries: impl IntoIterator<Item = SpaceLogEntry>,
        current_txg: u64,
    ) -> Result<(), SpaceError> {
        for (index, entry) in entries.into_iter().enumerate() {
            self.replay_entry(&entry, current_txg)
                .map_err(|source| SpaceError::Replay {
                    index,
                    entry,
                    source: Box::new(source),
                })?;
        }
        self.synced_txg = Some(self.synced_txg.map_or(current_txg, |s| s.max(current_txg)));
        Ok(())
    }

    fn replay_entry(&mut self, entry: &SpaceLogEntry, current_txg: u64) -> Result<(), SpaceError> {
        // A free stamped after the imported txg would stay deferred until that txg, leaking
        // its space (an allocation's stamp decides nothing at replay).
        if entry.op == SpaceOp::Free && entry.txg > current_txg {
            return Err(SpaceError::FutureTxg {
                txg: entry.txg,
                current_txg,
            });
        }
        let index = self.vdev_index(entry.vdev)?;
        let vdev = &mut self.vdevs[index];
        vdev.check_extent(entry.offset, entry.length)?;
        match entry.op {
            SpaceOp::Alloc => vdev.claim(entry.offset, entry.length),
            SpaceOp::Free if entry.txg.saturating_add(DEFER_TXGS) > current_txg => {
                vdev.defer_free(entry.offset, entry.length)?;
                Self::record(
                    self.deferred_by_txg.entry(entry.txg).or_default(),
                    entry.vdev,
                    entry.offset,
                    entry.length,
                );
                Ok(())
            }
            SpaceOp::Free => vdev.free_now(entry.offset, entry.length),
        }
    }

    /// The whole state as log entries: one Alloc (stamped `txg`) per run of not-free space
    /// (allocated or deferred) by vdev and offset, then one Free per deferred extent with its
    /// own txg, by txg, vdev and offset. `replay` of exactly these entries on a fresh allocator
    /// with the same last synced txg rebuilds the same allocated and deferred sets.
    pub fn checkpoint_entries(&self, txg: u64) -> Vec<SpaceLogEntry> {
        let mut entries = Vec::new();
        for vdev in &self.vdevs {
            // The checkpoint describes the state as of `txg`. Allocations already made for
            // later, still open txgs (intent-log blocks are allocated while a txg syncs) are
            // not part of it: their own txg's delta records them. Frees made in later txgs
            // need no care: their extents are deferred now, so still counted as not free.
            let mut not_free = RangeTree::new();
            for (offset, length) in vdev.complement(&vdev.free_runs()) {
                not_free
                    .add(offset, length)
                    .expect("complement runs are disjoint");
            }
            let later = self.changes.range(txg + 1..);
            for changes in later.filter_map(|(_, changes)| changes.allocs.get(&vdev.vdev)) {
                for (start, end) in changes.iter() {
                    not_free
                        .remove(start, end - start)
                        .expect("an extent allocated in an open txg is not free");
                }
            }
            for (offset, end) in not_free.iter() {
                let length = end - offset;
                entries.push(SpaceLogEntry {
                    vdev: vdev.vdev,
                    op: SpaceOp::Alloc,
                    offset,
                    length,
                    txg,
                });
            }
        }
        entries.extend(
            self.deferred_extents()
                .into_iter()
                .filter(|free| free.txg <= txg)
                .map(|free| SpaceLogEntry {
                    vdev: free.vdev,
                    op: SpaceOp::Free,
                    offset: free.offset,
                    length: free.length,
                    txg: free.txg,
                }),
        );
        entries
    }

    /// Allocated extents `(vdev, offset, length)`, coalesced, by vdev and offset. Deferred
    /// frees are not included.
    pub fn allocated_extents(&self) -> Vec<(u32, u64, u64)> {
        self.vdevs
            .iter()
            .flat_map(|vdev| {
                vdev.complement(&vdev.unallocated_runs())
                    .into_iter()
                    .map(|(offset, length)| (vdev.vdev, offset, length))
            })
            .collect()
    }

    /// Allocated extents as the space log of synced txg `txg` has them (for `check` on a live
    /// pool): without the blocks already allocated for later, still open txgs (intent-log
    /// blocks), and with the extents freed in later txgs (still in use as of `txg`). Coalesced,
    /// by vdev and offset.
    pub fn allocated_extents_as_of(&self, txg: u64) -> Vec<(u32, u64, u64)> {
        let mut extents = Vec::new();
        for vdev in &self.vdevs {
            let mut allocated = RangeTree::new();
            for (offset, length) in vdev.complement(&vdev.unallocated_runs()) {
                allocated
                    .add(offset, length)
                    .expect("complement runs are disjoint");
            }
            // Frees first: a block allocated and freed again in an open txg is then removed by
            // its allocation below, as it should be.
            for per_vdev in self
                .deferred_by_txg
                .range(txg + 1..)
                .map(|(_, frees)| frees)
            {
                for (start, end) in per_vdev
                    .get(&vdev.vdev)
                    .into_iter()
                    .flat_map(RangeTree::iter)
                {
                    if !allocated.overlaps(start, end - start) {
                        allocated.add(start, end - start).expect("checked free");
                    }
                }
            }
            for changes in self.changes.range(txg + 1..).map(|(_, changes)| changes) {
                for (start, end) in changes
                    .allocs
                    .get(&vdev.vdev)
                    .into_iter()
                    .flat_map(RangeTree::iter)
                {
                    if allocated.contains(start, end - start) {
                        allocated
                            .remove(start, end - start)
                            .expect("checked allocated");
                    }
                }
            }
            extents.extend(
                allocated
                    .iter()
                    .map(|(start, end)| (vdev.vdev, start, end - start)),
            );
        }
        extents
    }

    /// Deferred frees, coalesced per txg and vdev, by txg, vdev and offset.
    pub fn deferred_extents(&self) -> Vec<DeferredFree> {
        let mut frees = Vec::new();
        for (&txg, per_vdev) in &self.deferred_by_txg {
            for (&vdev, extents) in per_vdev {
                frees.extend(extents.iter().map(|(start, end)| DeferredFree {
                    txg,
                    vdev,
                    offset: start,
                    length: end - start,
                }));
            }
        }
        frees
    }

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

    fn normal_vdevs(&self) -> impl Iterator<Item = &TopVdevSpace> {
        self.vdevs
            .iter()
            .filter(|vdev| vdev.class == SpaceClass::Normal)
    }

    /// The first Normal vdev at or after index `from` (wrapping).
    fn next_normal(&self, from: usize) -> Option<usize> {
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

    fn vdev_index(&self, vdev: u32) -> Result<usize, SpaceError> {
        self.vdevs
            .binary_search_by_key(&vdev, |space| space.vdev)
            .map_err(|_| SpaceError::UnknownVdev { vdev })
    }

    fn check_txg_open(&self, txg: u64) -> Result<(), SpaceError> {
        match self.synced_txg {
            Some(synced_txg) if txg <= synced_txg => {
                Err(SpaceError::TxgAlreadySynced { txg, synced_txg })
            }
            _ => Ok(()),
        }
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
    fn settle_rotor(&mut self, rotor_lost: bool, normal_set_changed: bool) {
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

    /// Adds an extent to a per-vdev change or deferred set. Within one txg an extent is
    /// allocated at most once and freed at most once (see the module comment), so the sets
    /// never see an overlap.
    fn record(per_vdev: &mut BTreeMap<u32, RangeTree>, vdev: u32, offset: u64, length: u64) {
        per_vdev
            .entry(vdev)
            .or_default()
            .add(offset, length)
            .expect("an extent is recorded at most once per txg and operation");
    }
}

/// Free-space-weighted average fragmentation of some metaslabs (0 when nothing is free).
fn fragmentation_percent<'a>(metaslabs: impl Iterator<Item = &'a Metaslab>) -> u8 {
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
