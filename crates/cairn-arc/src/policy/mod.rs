//! `ArcPolicy`: adaptive replacement over blocks of any size, single-threaded. The concurrent
//! cache runs one per shard; `bench/cache` replays request traces through it directly.
//!
//! ARC's recency and frequency lists with ghosts and an adaptive target, and TinyLFU's
//! admission by frequency (a small sketch of how often every key was read lately):
//!
//! - **Recency list** (ARC's T1, the "window"): blocks new to the cache enter here.
//! - **Frequency list** (ARC's T2), in two segments as a segmented LRU: *probation* (admitted,
//!   not yet read again there) and *protected* (read again while cached, at most 90% of it).
//!   A read in probation moves a block to protected; protected's overflow goes back to
//!   probation.
//! - **Ghosts**: keys (no data) recently evicted from the recency list (B1) and from the
//!   frequency list (B2).
//! - **Adaptive target** (ARC's `p`): how much of the capacity the recency list may hold. A
//!   demand miss whose key is in B1 says recency needed more room: the target grows by the
//!   block's size, scaled by how much larger B2 is, as in ARC; one in B2 shrinks it likewise.
//!   Bounds: 1% of the capacity to all of it.
//! - **Eviction**: while the recency list is over its target, its least recent block competes
//!   with the frequency list's victim (probation's tail, else protected's): the newcomer wins
//!   only if the sketch counts it more than `ADMIT_MARGIN_READS` (1) reads above the victim,
//!   so two at least (the loser goes to its ghost list; a winner from the recency list joins
//!   probation).
//!   Otherwise the frequency list's victim goes. Ties and near-ties keep the incumbent: on a
//!   loop larger than the cache every block has the same true frequency, and a one-read edge
//!   only says the walk passed the newcomer more recently, so admitting on it turns the
//!   frequency list into an LRU that a loop defeats.
//! - **Back from B2**: a block read again after the frequency list let it go joins probation
//!   only if it beats that list's victim the same way, else it enters the recency list like a
//!   new block. (Straight back into probation, as ARC does, on a loop it pushed out another
//!   block that came back the same way a round later: a tenth of the frequency list went
//!   round in circles and served no hit.)
//!
//! So recency-heavy workloads grow the window through B1 hits, as ARC would, while under
//! skewed popularity a block only displaces one that is read less often — what makes TinyLFU
//! best on Zipf-like traffic — and a scan's blocks, read once each, lose every contest.
//!
//! For what a storage pool sees beyond that:
//! - **Prefetch.** A block read ahead by a sequential stream enters the recency list flagged.
//!   Prefetch accesses never adapt the target, never promote and are not counted as reads in
//!   the sketch. The first demand read of a prefetched block clears the flag and moves it to
//!   the recency list's *tail*, marked streamed: used once, the way streams use their blocks, it
//!   is the first to leave the window for the contest (which a block read once loses); a later
//!   demand read makes it an ordinary block again. Read-ahead never used waits in a list of its
//!   own (at most 1/8 of the capacity before its oldest go) and leaves without a ghost.
//! - **The tier below.** With `record_evictions`, every eviction is handed over with its value,
//!   its sketch frequency and epoch, and whether the block may go below: a block read ahead and
//!   never used may not, nor one inserted as not for it (`insert_for_tier`: written rather than
//!   read, or excluded by `secondarycache`; one flag bit kept for the block's life). The SSD
//!   tier is fed from there.
//! - **Pins.** A pinned block (a read still being copied out, a block the L2 feed holds) is
//!   never evicted; eviction passes over it. If only pinned blocks remain, the cache overflows
//!   its capacity until they are unpinned.
//!
//! Memory: one 48-byte entry per block (data or ghost; a `Slab` of fixed chunks, so no doubling
//! headroom) with intrusive `u32` links, 6–11 bytes of hash index per entry (one 5-byte bucket
//! per entry at the table's load), and 4 bytes of sketch per 4 KiB of capacity (plus 4 per
//! block held by an SSD tier below, once the sketch grew for it: `grow_sketch`, driven by
//! `sketch_outgrown`); `sizes()`
//! reports it. Every list's byte and block totals are kept exact and checked by
//! `assert_invariants` (the property tests call it after every step).

use crate::sketch::FrequencySketch;
use crate::slab::Slab;
use hashbrown::HashTable;

/// A block's physical identity: packed (vdev, offset) and birth txg (see `block_key`).
pub type BlockKey = [u64; 2];

/// Why a block is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A consumer is waiting for it.
    Demand,
    /// Read ahead of a sequential stream.
    Prefetch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum List {
    /// Recency (ARC's T1).
    Window = 0,
    /// The recency list's overflow, waiting for a contest with the frequency list's victims
    /// (only while an eviction is under way; admitted when it ends).
    Candidates = 1,
    /// Frequency, not read again since admitted.
    Probation = 2,
    /// Frequency, read again while cached.
    Protected = 3,
    /// Read ahead, not yet used.
    Prefetched = 4,
    WindowGhost = 5,
    MainGhost = 6,
    Free = 7,
}

impl List {
    fn is_live(self) -> bool {
        matches!(
            self,
            List::Window | List::Candidates | List::Probation | List::Protected | List::Prefetched
        )
    }
}

const LISTS: usize = 7;
/// Read-ahead blocks not yet used may hold at most 1/`PREFETCH_SHARE_DIVISOR` of the capacity;
/// past that the oldest go (a stream that stopped early leaves its read-ahead behind).
const PREFETCH_SHARE_DIVISOR: u64 = 8;
const NIL: u32 = u32::MAX;
/// Entry flags: a state (one of these two, or none)...
const PREFETCHED: u8 = 1;
const STREAMED: u8 = 2;
const STATE_FLAGS: u8 = PREFETCHED | STREAMED;
/// ...and a mark kept for the block's life: the SSD tier below may not have it when it is
/// evicted (written rather than read, or its dataset's `secondarycache` excludes it).
const NOT_FOR_TIER: u8 = 4;
/// Entries an eviction looks at from a list's tail before giving up on it (pinned ones are
/// passed over): bounds the work of one insert.
const EVICT_SCAN_MAX: usize = 64;
/// The recency target never goes below 1/`WINDOW_MIN_DIVISOR` of the capacity.
const WINDOW_MIN_DIVISOR: u64 = 100;
/// A ghost hit moves the recency target by the block's size (scaled as in ARC) divided by
/// this. ARC moves it by the whole size; under skewed popularity that chases noise (blocks of
/// middling popularity come back through the recency ghost all the time) and the recency list
/// grows at the expense of the popular blocks: measured with bench/cache, moving by 1/16 of a
/// block took the Zipf traces' miss ratios from 1.0% above W-TinyLFU's to 0.2% below, and
/// helped the scan traces too.
const WINDOW_STEP_DIVISOR: u64 = 16;
/// Protected may hold this share (percent) of what the frequency list may hold. Caffeine and
/// libCacheSim use 80; measured with bench/cache, 90 was better on every trace (0.4-0.8% fewer
/// misses on Zipf and scans, 0.7% on the recorded volume trace, where 80 lost to plain ARC):
/// admitted blocks not yet read again are worth less than a larger probation assumes.
const PROTECTED_PERCENT: u64 = 90;
/// Cache capacity in blocks, as the frequency sketch is sized: blocks are at least this large.
const SKETCH_BLOCK_BYTES: u64 = 4096;
/// Reads by which a block must outnumber the frequency list's victim to take its place: one
/// read more is within the noise of *when* the two were read (a loop's blocks all have the same
/// frequency, but those the walk passed this round count one more than those it has not yet).
const ADMIT_MARGIN_READS: u8 = 1;
/// Least growth of a sketch for a tier below, in slots (a tier just starting to fill does not
/// widen it at every look).
pub const SKETCH_GROW_MIN_SLOTS: u64 = 64;

/// Whether a sketch sized for `sized_blocks` held below should grow for `held_blocks`: once
/// they are a tenth more, and at least `min_blocks` more (the sketch's share then stays
/// between 3.6 and 4 B per block held, for any fill; growing is a pass over the sketch, some
/// 80 times from empty to a million blocks). Measured with bench/cache's two-tier replays, a
/// tenth lost 0.1–0.2% fewer reads than a quarter (the sketch is nearer what the tier holds
/// while it fills).
pub fn sketch_outgrown(held_blocks: u64, sized_blocks: u64, min_blocks: u64) -> bool {
    held_blocks > sized_blocks + sized_blocks / 10 && held_blocks - sized_blocks >= min_blocks
}

struct Entry<V> {
    key: BlockKey,
    prev: u32,
    next: u32,
    size_bytes: u32,
    list: List,
    flags: u8,
    pins: u16,
    value: Option<V>,
}

#[derive(Default, Clone, Copy)]
struct ListHead {
    head: u32,
    tail: u32,
    bytes: u64,
    blocks: u64,
}

/// Counters of one policy instance.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PolicyStats {
    pub demand_hits: u64,
    pub demand_misses: u64,
    pub prefetch_hits: u64,
    pub prefetch_misses: u64,
    /// Demand hits on blocks read ahead and not used before (read-ahead that paid off; ZFS's
    /// `demand_hit_predictive_prefetch`).
    pub demand_hit_prefetched: u64,
    /// Hits in the recency list (arcstat's `mru_hits`).
    pub mru_hits: u64,
    /// Hits in the frequency list (`mfu_hits`).
    pub mfu_hits: u64,
    pub mru_ghost_hits: u64,
    pub mfu_ghost_hits: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    /// Contests a recency block won against the frequency list's victim.
    pub admissions: u64,
    /// Pinned blocks passed over by eviction.
    pub evict_skips: u64,
    /// Inserts refused: the block did not fit beside the pinned ones (or at all).
    pub uncacheable: u64,
}

/// Sizes of one policy instance, in bytes and blocks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PolicySizes {
    pub capacity_bytes: u64,
    /// The recency list's target (ARC's `p`).
    pub mru_target_bytes: u64,
    /// The recency list.
    pub mru_bytes: u64,
    /// The frequency list (probation and protected).
    pub mfu_bytes: u64,
    pub mru_ghost_bytes: u64,
    pub mfu_ghost_bytes: u64,
    pub mru_blocks: u64,
    pub mfu_blocks: u64,
    pub ghost_blocks: u64,
    /// RAM the entries, the index and the sketch take (headers, not data).
    pub header_bytes: u64,
    /// Of that, the index's buckets, and the entries (cached and ghost) it indexes.
    pub index_bytes: u64,
    pub indexed_entries: u64,
    /// Of that, the frequency sketch (sized for the capacity, not for what is cached).
    pub sketch_bytes: u64,
}

/// A block the policy evicted (not a ghost dropped): its key and size, whether a demand read
/// used it (read-ahead never used is not eligible for the SSD tier), whether the tier below
/// may have it at all (`insert_for_tier`), how often it was read lately by the admission sketch
/// (and the sketch's epoch), and its value (the SSD tier's feed writes it from there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction<V> {
    pub key: BlockKey,
    pub size_bytes: u32,
    pub demand_used: bool,
    pub tier_eligible: bool,
    pub frequency: u8,
    pub epoch: u64,
    pub value: Option<V>,
}

pub struct ArcPolicy<V> {
    entries: Slab<Entry<V>>,
    free_head: u32,
    index: HashTable<u32>,
    lists: [ListHead; LISTS],
    capacity_bytes: u64,
    window_target_bytes: u64,
    sketch: FrequencySketch,
    stats: PolicyStats,
    /// Values of evicted or replaced blocks, kept for the caller to drop (`defer_drops`).
    dropped: Option<Vec<V>>,
    /// Evictions since `take_evictions`, when `record_evictions` asked for them.
    evictions: Option<Vec<Eviction<V>>>,
}

fn hash(key: &BlockKey) -> u64 {
    // A fixed mix (splitmix64 finaliser over both words): deterministic, so a trace replays
    // the same way every time; keys are allocator addresses, not chosen by clients.
    let mut x = key[0] ^ key[1].rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl<V> ArcPolicy<V> {
    pub fn new(capacity_bytes: u64) -> ArcPolicy<V> {
        Self::with_sketch_for(capacity_bytes, capacity_bytes)
    }

    /// A policy whose frequency sketch is sized for `sketch_capacity_bytes` of blocks (a
    /// policy that rarely fills its whole capacity needs fewer counters).
    pub fn with_sketch_for(capacity_bytes: u64, sketch_capacity_bytes: u64) -> ArcPolicy<V> {
        ArcPolicy {
            entries: Slab::new(),
            free_head: NIL,
            index: HashTable::new(),
            lists: [ListHead {
                head: NIL,
                tail: NIL,
                bytes: 0,
                blocks: 0,
            }; LISTS],
            capacity_bytes,
            window_target_bytes: capacity_bytes / WINDOW_MIN_DIVISOR,
            sketch: FrequencySketch::new(sketch_capacity_bytes / SKETCH_BLOCK_BYTES),
            stats: PolicyStats::default(),
            dropped: None,
            evictions: None,
        }
    }

    /// From now on, the values of blocks this policy evicts or replaces are kept for
    /// `take_dropped` instead of dropped in place: a concurrent cache frees buffers after
    /// releasing its lock. The caller must take them after every call that can evict.
    pub fn defer_drops(&mut self) {
        self.dropped.get_or_insert_with(Vec::new);
    }

    /// From now on, every eviction is recorded for `take_evictions`, with the evicted value
    /// (the SSD tier below is fed from there, and counts: was the block already there?).
    pub fn record_evictions(&mut self) {
        self.evictions.get_or_insert_with(Vec::new);
    }

    /// The evictions since the last call (empty unless `record_evictions`).
    pub fn take_evictions(&mut self) -> Vec<Eviction<V>> {
        match &mut self.evictions {
            Some(evictions) => std::mem::take(evictions),
            None => Vec::new(),
        }
    }

    /// The values evicted since the last call (empty unless `defer_drops`).
    pub fn take_dropped(&mut self) -> Vec<V> {
        match &mut self.dropped {
            Some(dropped) => std::mem::take(dropped),
            None => Vec::new(),
        }
    }

    fn discard(&mut self, value: Option<V>) {
        if let (Some(value), Some(dropped)) = (value, &mut self.dropped) {
            dropped.push(value);
        }
    }

    /// A new frequency sketch sized for `sketch_capacity_bytes` of blocks (what was counted
    /// is forgotten).
    pub fn resize_sketch(&mut self, sketch_capacity_bytes: u64) {
        let epoch = self.sketch.epoch();
        self.sketch = FrequencySketch::new(sketch_capacity_bytes / SKETCH_BLOCK_BYTES);
        // Its epoch goes on (counts told before are worth less than any told from now), so a
        // tier below that keeps frequencies by epoch keeps ageing them.
        self.sketch.continue_after(epoch);
    }

    /// Widens the frequency sketch for `sketch_capacity_bytes` of blocks, keeping what it
    /// counted and its epoch (no-op unless wider; see `FrequencySketch::grow`).
    pub fn grow_sketch(&mut self, sketch_capacity_bytes: u64) {
        self.sketch.grow(sketch_capacity_bytes / SKETCH_BLOCK_BYTES);
    }

    /// RAM a sketch sized for `sketch_capacity_bytes` of blocks takes (as `sizes()` counts
    /// it): what this policy's sketch would take sized for its own capacity alone, say.
    pub fn sketch_bytes_sized_for(sketch_capacity_bytes: u64) -> u64 {
        FrequencySketch::bytes_for(sketch_capacity_bytes / SKETCH_BLOCK_BYTES)
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn bytes(&self, list: List) -> u64 {
        self.lists[list as usize].bytes
    }

    /// Bytes of cached data (all live lists).
    pub fn live_bytes(&self) -> u64 {
        self.bytes(List::Window)
            + self.bytes(List::Candidates)
            + self.bytes(List::Probation)
            + self.bytes(List::Protected)
            + self.bytes(List::Prefetched)
    }

    pub fn stats(&self) -> PolicyStats {
        self.stats
    }

    /// Bytes one entry takes (the slab slot; the index adds about 6 more per entry).
    pub const fn entry_bytes() -> usize {
        std::mem::size_of::<Entry<V>>()
    }

    pub fn sizes(&self) -> PolicySizes {
        let list = |l: List| self.lists[l as usize];
        PolicySizes {
            capacity_bytes: self.capacity_bytes,
            mru_target_bytes: self.window_target_bytes,
            mru_bytes: list(List::Window).bytes
                + list(List::Candidates).bytes
                + list(List::Prefetched).bytes,
            mfu_bytes: list(List::Probation).bytes + list(List::Protected).bytes,
            mru_ghost_bytes: list(List::WindowGhost).bytes,
            mfu_ghost_bytes: list(List::MainGhost).bytes,
            mru_blocks: list(List::Window).blocks
                + list(List::Candidates).blocks
                + list(List::Prefetched).blocks,
            mfu_blocks: list(List::Probation).blocks + list(List::Protected).blocks,
            ghost_blocks: list(List::WindowGhost).blocks + list(List::MainGhost).blocks,
            header_bytes: (self.entries.capacity() * Self::entry_bytes()
                + self.index.capacity() * (std::mem::size_of::<u32>() + 1)
                + self.sketch.bytes()) as u64,
            index_bytes: (self.index.capacity() * (std::mem::size_of::<u32>() + 1)) as u64,
            indexed_entries: self.index.len() as u64,
            sketch_bytes: self.sketch.bytes() as u64,
        }
    }

    /// Changes the capacity (memory pressure, `arc_max`); evicts down to it at once.
    pub fn set_capacity(&mut self, capacity_bytes: u64) {
        self.capacity_bytes = capacity_bytes;
        self.window_target_bytes = self
            .window_target_bytes
            .clamp(capacity_bytes / WINDOW_MIN_DIVISOR, capacity_bytes);
        self.evict_to_fit(0);
    }

    fn find(&self, key: &BlockKey) -> Option<u32> {
        self.index
            .find(hash(key), |&slot| self.entries[slot as usize].key == *key)
            .copied()
    }

    /// Looks a block up. A hit returns its value and updates recency and frequency; a miss
    /// (absent, or only a ghost) returns `None`, and the caller reads the block and `insert`s it.
    pub fn get(&mut self, key: &BlockKey, access: Access) -> Option<&V> {
        if access == Access::Demand {
            self.sketch.record(hash(key));
        }
        let live = self
            .find(key)
            .filter(|&slot| self.entries[slot as usize].list.is_live());
        let Some(slot) = live else {
            match access {
                Access::Demand => self.stats.demand_misses += 1,
                Access::Prefetch => self.stats.prefetch_misses += 1,
            }
            return None;
        };
        self.hit(slot, access);
        self.entries[slot as usize].value.as_ref()
    }

    /// Every key the policy knows, cached or ghost (for removing a pool's blocks).
    pub fn keys(&self) -> Vec<BlockKey> {
        self.entries
            .iter()
            .filter(|entry| entry.list != List::Free)
            .map(|entry| entry.key)
            .collect()
    }

    /// How often demand reads asked for `key` lately, as the admission sketch estimates it
    /// (saturating at the sketch's counter limit): what an SSD tier below admits by.
    pub fn frequency(&self, key: &BlockKey) -> u8 {
        self.sketch.estimate(hash(key))
    }

    /// The admission sketch's epoch (how many times it halved its counts): `frequency` told at
    /// different epochs compares after halving the older once per epoch between.
    pub fn frequency_epoch(&self) -> u64 {
        self.sketch.epoch()
    }

    /// Whether a block is cached (no statistics, no reordering).
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.find(key)
            .is_some_and(|slot| self.entries[slot as usize].list.is_live())
    }

    fn hit(&mut self, slot: u32, access: Access) {
        let entry = &self.entries[slot as usize];
        let (list, flags) = (entry.list, entry.flags);
        match list {
            List::Probation | List::Protected => self.stats.mfu_hits += 1,
            _ => self.stats.mru_hits += 1,
        }
        if access == Access::Prefetch {
            self.stats.prefetch_hits += 1;
            return;
        }
        self.stats.demand_hits += 1;
        self.unlink(slot);
        match list {
            List::Prefetched => {
                // First use of a block read ahead: used once, as streams use their blocks.
                debug_assert_eq!(flags & STATE_FLAGS, PREFETCHED);
                self.stats.demand_hit_prefetched += 1;
                self.entries[slot as usize].flags = (flags & NOT_FOR_TIER) | STREAMED;
                self.push_tail(List::Window, slot);
                self.trim_ghosts();
            }
            List::Window | List::Candidates => {
                self.entries[slot as usize].flags &= NOT_FOR_TIER;
                self.push_head(List::Window, slot);
                self.trim_ghosts();
            }
            _ => {
                self.push_head(List::Protected, slot);
                self.rebalance_protected();
            }
        }
    }

    /// Protected's overflow goes back to probation (most recent first in line there).
    fn rebalance_protected(&mut self) {
        let main_target = self.capacity_bytes - self.window_target_bytes;
        let protected_max = main_target / 100 * PROTECTED_PERCENT;
        while self.bytes(List::Protected) > protected_max {
            let tail = self.lists[List::Protected as usize].tail;
            if tail == NIL {
                break;
            }
            self.unlink(tail);
            self.push_head(List::Probation, tail);
        }
    }

    /// Caches `value` (a block of `size_bytes`) after a miss, evicting as needed. A key already
    /// cached is replaced in place (same list).
    pub fn insert(&mut self, key: BlockKey, size_bytes: u32, value: V, access: Access) {
        self.insert_for_tier(key, size_bytes, value, access, true);
    }

    /// `insert`, saying whether the SSD tier below may have this block when it is evicted
    /// (reported with its eviction, `Eviction::tier_eligible`, a mark kept whatever hits it takes;
    /// read-ahead is fed only once a demand read used it, `Eviction::demand_used`).
    pub fn insert_for_tier(
        &mut self,
        key: BlockKey,
        size_bytes: u32,
        value: V,
        access: Access,
        tier_eligible: bool,
    ) {
        assert!(size_bytes > 0, "a cached block has a size");
        let list = match self.find(&key) {
            Some(slot) => {
                let old = self.entries[slot as usize].list;
                self.unlink(slot);
                let replaced = self.release(slot);
                self.discard(replaced);
                match (old, access) {
                    (List::Candidates, _) => List::Window,
                    (List::Window | List::Probation | List::Protected | List::Prefetched, _) => old,
                    (List::WindowGhost, Access::Demand) => {
                        self.stats.mru_ghost_hits += 1;
                        self.grow_window(size_bytes);
                        List::Window
                    }
                    (List::MainGhost, Access::Demand) => {
                        self.stats.mfu_ghost_hits += 1;
                        self.shrink_window(size_bytes);
                        if self.outreads_victim(&key) {
                            List::Probation
                        } else {
                            List::Window
                        }
                    }
                    (_, Access::Prefetch) => List::Prefetched,
                    (_, Access::Demand) => List::Window,
                }
            }
            None if access == Access::Prefetch => List::Prefetched,
            None => List::Window,
        };
        // Room first, then the block: the newest block is never its own victim. A block that
        // cannot fit (larger than the capacity, or than what pinned blocks leave) is not cached.
        self.evict_to_fit(u64::from(size_bytes));
        if self.live_bytes() + u64::from(size_bytes) > self.capacity_bytes {
            self.stats.uncacheable += 1;
            return;
        }
        let slot = self.allocate(Entry {
            key,
            prev: NIL,
            next: NIL,
            size_bytes,
            list: List::Free,
            flags: if list == List::Prefetched {
                PREFETCHED
            } else {
                0
            } | if tier_eligible { 0 } else { NOT_FOR_TIER },
            pins: 0,
            value: Some(value),
        });
        self.index
            .insert_unique(hash(&key), slot, |&s| hash(&self.entries[s as usize].key));
        self.push_head(list, slot);
        self.trim_ghosts();
    }

    /// Drops a block (its contents changed meaning: freed, or found bad). Ghosts go too.
    pub fn remove(&mut self, key: &BlockKey) -> Option<V> {
        let slot = self.find(key)?;
        self.unlink(slot);
        self.release(slot)
    }

    /// Pins a cached block against eviction; returns false if it is not cached.
    pub fn pin(&mut self, key: &BlockKey) -> bool {
        match self.find(key) {
            Some(slot) if self.entries[slot as usize].list.is_live() => {
                let entry = &mut self.entries[slot as usize];
                entry.pins = entry.pins.checked_add(1).expect("pin count overflow");
                true
            }
            _ => false,
        }
    }

    pub fn unpin(&mut self, key: &BlockKey) {
        let slot = self.find(key).expect("unpin of a block that is not cached");
        let entry = &mut self.entries[slot as usize];
        entry.pins = entry
            .pins
            .checked_sub(1)
            .expect("unpin of an unpinned block");
        if entry.pins == 0 {
            self.evict_to_fit(0);
        }
    }

    fn grow_window(&mut self, size_bytes: u32) {
        let (b1, b2) = (
            self.bytes(List::WindowGhost).max(1),
            self.bytes(List::MainGhost),
        );
        let delta = u64::from(size_bytes) * (b2 / b1).max(1) / WINDOW_STEP_DIVISOR;
        self.window_target_bytes = (self.window_target_bytes + delta).min(self.capacity_bytes);
    }

    fn shrink_window(&mut self, size_bytes: u32) {
        let (b1, b2) = (
            self.bytes(List::WindowGhost),
            self.bytes(List::MainGhost).max(1),
        );
        let delta = u64::from(size_bytes) * (b1 / b2).max(1) / WINDOW_STEP_DIVISOR;
        self.window_target_bytes = self
            .window_target_bytes
            .saturating_sub(delta)
            .max(self.capacity_bytes / WINDOW_MIN_DIVISOR);
    }

    /// Evicts until the data plus `incoming_bytes` fits the capacity, then trims the ghosts.
    /// The recency list's overflow becomes candidates; each eviction is a contest between the
    /// oldest candidate and the frequency list's victim (the loser goes); candidates left when
    /// everything fits are admitted to probation.
    fn evict_to_fit(&mut self, incoming_bytes: u64) {
        while self.bytes(List::Window) > self.window_target_bytes {
            let Some(slot) = self.unpinned_tail(List::Window) else {
                break;
            };
            self.entries[slot as usize].flags &= NOT_FOR_TIER;
            self.unlink(slot);
            self.push_head(List::Candidates, slot);
        }
        while self.live_bytes() + incoming_bytes > self.capacity_bytes {
            if !self.evict_step() {
                break; // only pinned blocks near the tails
            }
        }
        loop {
            let slot = self.lists[List::Candidates as usize].tail;
            if slot == NIL {
                break;
            }
            self.unlink(slot);
            self.push_head(List::Probation, slot);
        }
        self.trim_ghosts();
    }

    /// Evicts one block (or admits a candidate to an empty frequency list); returns false if
    /// nothing could move.
    fn evict_step(&mut self) -> bool {
        if self.bytes(List::Prefetched) > self.capacity_bytes / PREFETCH_SHARE_DIVISOR
            && let Some(slot) = self.unpinned_tail(List::Prefetched)
        {
            self.evict(slot, None);
            return true;
        }
        let candidate = self.unpinned_tail(List::Candidates);
        let victim = self
            .unpinned_tail(List::Probation)
            .or_else(|| self.unpinned_tail(List::Protected));
        match (candidate, victim) {
            (Some(candidate), Some(victim)) => {
                let (c, v) = (
                    hash(&self.entries[candidate as usize].key),
                    hash(&self.entries[victim as usize].key),
                );
                if self.sketch.estimate(c)
                    > self.sketch.estimate(v).saturating_add(ADMIT_MARGIN_READS)
                {
                    self.stats.admissions += 1;
                    self.evict(victim, Some(List::MainGhost));
                    self.unlink(candidate);
                    self.push_head(List::Probation, candidate);
                } else {
                    self.evict(candidate, Some(List::WindowGhost));
                }
            }
            (Some(candidate), None) => {
                // Nothing to contest with: the frequency list is empty (warming up).
                self.unlink(candidate);
                self.push_head(List::Probation, candidate);
            }
            (None, Some(victim)) => self.evict(victim, Some(List::MainGhost)),
            (None, None) => {
                if let Some(slot) = self.unpinned_tail(List::Window) {
                    self.evict(slot, Some(List::WindowGhost));
                } else if let Some(slot) = self.unpinned_tail(List::Prefetched) {
                    self.evict(slot, None);
                } else {
                    return false;
                }
            }
        }
        true
    }

    /// Whether `key` was read more often lately than the frequency list's victim, by the
    /// admission margin (or the frequency list is empty): a block back from the frequency
    /// list's ghosts may take its place straight away; otherwise it enters the window and
    /// contests at its exit like a new block.
    fn outreads_victim(&self, key: &BlockKey) -> bool {
        let tail = |list: List| Some(self.lists[list as usize].tail).filter(|&slot| slot != NIL);
        match tail(List::Probation).or_else(|| tail(List::Protected)) {
            None => true,
            Some(victim) => {
                self.sketch.estimate(hash(key))
                    > self
                        .sketch
                        .estimate(hash(&self.entries[victim as usize].key))
                        .saturating_add(ADMIT_MARGIN_READS)
            }
        }
    }

    /// The least recent unpinned block of `list`, looking at most `EVICT_SCAN_MAX` entries.
    fn unpinned_tail(&mut self, list: List) -> Option<u32> {
        let mut slot = self.lists[list as usize].tail;
        for _ in 0..EVICT_SCAN_MAX {
            if slot == NIL {
                return None;
            }
            let entry = &self.entries[slot as usize];
            if entry.pins == 0 {
                return Some(slot);
            }
            self.stats.evict_skips += 1;
            slot = entry.prev;
        }
        None
    }

    /// Evicts a live block, leaving its key on `ghost` (or nothing).
    fn evict(&mut self, slot: u32, ghost: Option<List>) {
        let (key, size, list, flags) = {
            let entry = &self.entries[slot as usize];
            (entry.key, entry.size_bytes, entry.list, entry.flags)
        };
        self.stats.evictions += 1;
        self.stats.evicted_bytes += u64::from(size);
        self.unlink(slot);
        let value = match ghost {
            Some(ghost) => {
                let entry = &mut self.entries[slot as usize];
                let value = entry.value.take();
                entry.flags = 0;
                self.push_head(ghost, slot);
                value
            }
            None => self.release(slot),
        };
        match &mut self.evictions {
            Some(evictions) => {
                evictions.push(Eviction {
                    key,
                    size_bytes: size,
                    demand_used: list != List::Prefetched,
                    tier_eligible: flags & NOT_FOR_TIER == 0,
                    frequency: self.sketch.estimate(hash(&key)),
                    epoch: self.sketch.epoch(),
                    value,
                });
            }
            None => self.discard(value),
        }
    }

    fn trim_ghosts(&mut self) {
        while self.bytes(List::Window) + self.bytes(List::WindowGhost) > self.capacity_bytes
            && self.drop_tail(List::WindowGhost)
        {}
        while self.live_bytes() + self.bytes(List::WindowGhost) + self.bytes(List::MainGhost)
            > 2 * self.capacity_bytes
            && (self.drop_tail(List::MainGhost) || self.drop_tail(List::WindowGhost))
        {}
    }

    fn drop_tail(&mut self, list: List) -> bool {
        let slot = self.lists[list as usize].tail;
        if slot == NIL {
            return false;
        }
        self.unlink(slot);
        self.release(slot);
        true
    }

    fn allocate(&mut self, entry: Entry<V>) -> u32 {
        if self.free_head != NIL {
            let slot = self.free_head;
            self.free_head = self.entries[slot as usize].next;
            self.entries[slot as usize] = entry;
            return slot;
        }
        let slot = u32::try_from(self.entries.len()).expect("fewer than 2^32 cached blocks");
        assert!(slot != NIL, "cache slab full");
        self.entries.push(entry);
        slot
    }

    /// Removes an unlinked entry from the index and returns its slot to the free list.
    fn release(&mut self, slot: u32) -> Option<V> {
        let key = self.entries[slot as usize].key;
        let found = self
            .index
            .find_entry(hash(&key), |&s| s == slot)
            .expect("every entry is indexed");
        found.remove();
        let entry = &mut self.entries[slot as usize];
        debug_assert_eq!(entry.list, List::Free, "release of a linked entry");
        entry.next = self.free_head;
        entry.pins = 0;
        self.free_head = slot;
        entry.value.take()
    }

    fn push_head(&mut self, list: List, slot: u32) {
        let head = self.lists[list as usize].head;
        {
            let entry = &mut self.entries[slot as usize];
            debug_assert_eq!(entry.list, List::Free, "entry linked twice");
            entry.list = list;
            entry.prev = NIL;
            entry.next = head;
        }
        match head {
            NIL => self.lists[list as usize].tail = slot,
            head => self.entries[head as usize].prev = slot,
        }
        self.account(list, slot, true);
        self.lists[list as usize].head = slot;
    }

    fn push_tail(&mut self, list: List, slot: u32) {
        let tail = self.lists[list as usize].tail;
        {
            let entry = &mut self.entries[slot as usize];
            debug_assert_eq!(entry.list, List::Free, "entry linked twice");
            entry.list = list;
            entry.next = NIL;
            entry.prev = tail;
        }
        match tail {
            NIL => self.lists[list as usize].head = slot,
            tail => self.entries[tail as usize].next = slot,
        }
        self.account(list, slot, true);
        self.lists[list as usize].tail = slot;
    }

    fn unlink(&mut self, slot: u32) {
        let (list, prev, next) = {
            let entry = &self.entries[slot as usize];
            (entry.list, entry.prev, entry.next)
        };
        assert!(list != List::Free, "unlink of an unlinked entry");
        match prev {
            NIL => self.lists[list as usize].head = next,
            prev => self.entries[prev as usize].next = next,
        }
        match next {
            NIL => self.lists[list as usize].tail = prev,
            next => self.entries[next as usize].prev = prev,
        }
        self.account(list, slot, false);
        let entry = &mut self.entries[slot as usize];
        entry.list = List::Free;
        entry.prev = NIL;
        entry.next = NIL;
    }

    fn account(&mut self, list: List, slot: u32, add: bool) {
        let size = u64::from(self.entries[slot as usize].size_bytes);
        let head = &mut self.lists[list as usize];
        if add {
            head.bytes += size;
            head.blocks += 1;
        } else {
            head.bytes -= size;
            head.blocks -= 1;
        }
    }

    /// Checks every structural invariant (tests; O(entries)).
    pub fn assert_invariants(&self) {
        let mut indexed = 0u64;
        for (list_index, head) in self.lists.iter().enumerate() {
            let (mut bytes, mut blocks, mut prev, mut slot) = (0u64, 0u64, NIL, head.head);
            while slot != NIL {
                let entry = &self.entries[slot as usize];
                assert_eq!(entry.list as usize, list_index, "entry on the wrong list");
                assert_eq!(entry.prev, prev, "broken back link");
                assert_eq!(self.find(&entry.key), Some(slot), "entry not indexed");
                let live = entry.list.is_live();
                assert_eq!(
                    entry.value.is_some(),
                    live,
                    "ghosts hold no data, live blocks do"
                );
                assert!(live || entry.pins == 0, "a ghost is pinned");
                assert_eq!(
                    entry.flags & STATE_FLAGS == PREFETCHED,
                    entry.list == List::Prefetched,
                    "read-ahead blocks, and only they, are flagged as such"
                );
                assert!(
                    entry.flags & STATE_FLAGS != STREAMED || entry.list == List::Window,
                    "a streamed block outside the recency list"
                );
                assert!(
                    entry.list != List::Candidates,
                    "candidates left after an eviction"
                );
                bytes += u64::from(entry.size_bytes);
                blocks += 1;
                prev = slot;
                slot = entry.next;
            }
            assert_eq!(head.tail, prev, "tail is not the last entry");
            assert_eq!((head.bytes, head.blocks), (bytes, blocks), "list totals");
            indexed += blocks;
        }
        assert_eq!(self.index.len() as u64, indexed, "index and lists disagree");
        assert!(self.window_target_bytes <= self.capacity_bytes);
        let window = self.bytes(List::Window);
        assert!(window + self.bytes(List::WindowGhost) <= self.capacity_bytes.max(window));
        assert!(
            self.live_bytes() + self.bytes(List::WindowGhost) + self.bytes(List::MainGhost)
                <= 2 * self.capacity_bytes.max(self.live_bytes())
        );
    }

    /// Bytes of pinned blocks (they may hold the cache over its capacity).
    pub fn pinned_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|entry| entry.pins > 0 && entry.list.is_live())
            .map(|entry| u64::from(entry.size_bytes))
            .sum()
    }
}

#[cfg(test)]
mod tests;
