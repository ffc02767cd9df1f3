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
//!
//! ## Where the code lives
//!
//! - `state.rs`: `SpaceAllocator`'s data and the types it takes and reports.
//! - `vdevs.rs`: building it, adding and removing vdevs.
//! - `placement.rs`: `allocate`, `allocate_log`, `claim`, the rotor.
//! - `frees.rs`: `free`, `unallocate`, `sync_done` (deferral, floors), `take_changes`.
//! - `space_log.rs`: `replay`, `checkpoint_entries`, the extent lists.
//! - `accounting.rs`: `stats`, the slop, lookups, `assert_invariants`.
//!
//! Every file but `state` is an `impl SpaceAllocator` block over `state`'s data. Files depend
//! one way only, bottom to top: `state` (no siblings) < `accounting` < `placement` < `vdevs`;
//! `state` < `frees` and `space_log`. This file only declares them and re-exports the API.

mod accounting;
mod frees;
mod placement;
mod space_log;
mod state;
mod vdevs;

pub use accounting::{SLOP_BYTES_MAX, SLOP_BYTES_MIN, SLOP_SHIFT};
pub use placement::ROTOR_CHUNK_BYTES;
pub use state::{DeferredFree, SpaceAllocator, SpaceStats, VdevSpace, VdevSpaceStats};
