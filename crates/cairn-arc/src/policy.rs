//! `ArcPolicy`: adaptive replacement over blocks of any size, single-threaded. The concurrent
//! cache runs one per shard; `bench/cache` replays request traces through it directly.
//!
//! Four lists, most recently used at the head:
//! - MRU (ARC's T1): blocks seen once; MFU (T2): blocks seen again — recency and frequency;
//! - MRU ghost (B1) and MFU ghost (B2): keys, without data, recently evicted from MRU and MFU.
//!
//! `mru_target_bytes` (ARC's `p`) is how much of the capacity MRU may hold. A demand miss whose
//! key is still in the MRU ghost says MRU was too small: the target grows by the block's size,
//! scaled up by how much larger the MFU ghost is (as ARC does); one in the MFU ghost says MFU was
//! too small, and the target shrinks. Eviction takes MRU's tail while MRU is over its target,
//! else MFU's, and leaves a ghost. Ghosts are trimmed so that MRU + its ghost never exceed the
//! capacity and all four lists never exceed twice the capacity.
//!
//! Beyond ARC, for what a storage pool sees:
//! - **Prefetch.** A block read ahead by a sequential stream is inserted flagged. Prefetch
//!   accesses never adapt the target and never promote. The first demand hit on a prefetched
//!   block clears the flag and moves it to MRU's *tail*, marked streamed: it has been used once,
//!   the way streams use their blocks, and is the first to go; a second demand hit promotes it
//!   as usual. A streamed block leaves no ghost. A scan larger than the cache therefore cycles
//!   through the tail of MRU and never touches MFU or the target.
//! - **Pins.** A pinned block (a read still being copied out, a block the L2 feed holds) is
//!   never evicted; eviction skips it. If only pinned blocks remain, the cache overflows its
//!   capacity until they are unpinned.
//!
//! Memory: one 48-byte entry per block (data or ghost) in a slab with intrusive `u32` links,
//! plus ~6 bytes of hash index; `entry_bytes()` reports it. Every list's byte and block totals
//! are kept exact and checked by `assert_invariants` (property tests call it after every step).

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
    Mru = 0,
    Mfu = 1,
    MruGhost = 2,
    MfuGhost = 3,
    Free = 4,
}

const LISTS: usize = 4;
const NIL: u32 = u32::MAX;
/// Entry flags.
const PREFETCHED: u8 = 1;
const STREAMED: u8 = 2;
/// Entries an eviction looks at from a list's tail before giving up on it (pinned ones are
/// skipped): bounds the work of one insert.
const EVICT_SCAN_MAX: usize = 64;

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
    pub mru_hits: u64,
    pub mfu_hits: u64,
    pub mru_ghost_hits: u64,
    pub mfu_ghost_hits: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    /// Pinned blocks passed over by eviction.
    pub evict_skips: u64,
    /// Inserts refused: the block did not fit beside the pinned ones (or at all).
    pub uncacheable: u64,
}

/// Sizes of one policy instance, in bytes and blocks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PolicySizes {
    pub capacity_bytes: u64,
    pub mru_target_bytes: u64,
    pub mru_bytes: u64,
    pub mfu_bytes: u64,
    pub mru_ghost_bytes: u64,
    pub mfu_ghost_bytes: u64,
    pub mru_blocks: u64,
    pub mfu_blocks: u64,
    pub ghost_blocks: u64,
    /// RAM the entries and the index take (headers, not data).
    pub header_bytes: u64,
}

pub struct ArcPolicy<V> {
    entries: Vec<Entry<V>>,
    free_head: u32,
    index: HashTable<u32>,
    lists: [ListHead; LISTS],
    capacity_bytes: u64,
    mru_target_bytes: u64,
    stats: PolicyStats,
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
        ArcPolicy {
            entries: Vec::new(),
            free_head: NIL,
            index: HashTable::new(),
            lists: [ListHead {
                head: NIL,
                tail: NIL,
                bytes: 0,
                blocks: 0,
            }; LISTS],
            capacity_bytes,
            // As in ARC: MRU earns room only through ghost hits.
            mru_target_bytes: 0,
            stats: PolicyStats::default(),
        }
    }

    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Bytes of cached data (MRU + MFU).
    pub fn live_bytes(&self) -> u64 {
        self.lists[List::Mru as usize].bytes + self.lists[List::Mfu as usize].bytes
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
            mru_target_bytes: self.mru_target_bytes,
            mru_bytes: list(List::Mru).bytes,
            mfu_bytes: list(List::Mfu).bytes,
            mru_ghost_bytes: list(List::MruGhost).bytes,
            mfu_ghost_bytes: list(List::MfuGhost).bytes,
            mru_blocks: list(List::Mru).blocks,
            mfu_blocks: list(List::Mfu).blocks,
            ghost_blocks: list(List::MruGhost).blocks + list(List::MfuGhost).blocks,
            header_bytes: (self.entries.capacity() * Self::entry_bytes()
                + self.index.capacity() * (std::mem::size_of::<u32>() + 1))
                as u64,
        }
    }

    /// Changes the capacity (memory pressure, `arc_max`); evicts down to it at once.
    pub fn set_capacity(&mut self, capacity_bytes: u64) {
        self.capacity_bytes = capacity_bytes;
        self.mru_target_bytes = self.mru_target_bytes.min(capacity_bytes);
        self.evict_to_fit(0, false);
    }

    fn find(&self, key: &BlockKey) -> Option<u32> {
        self.index
            .find(hash(key), |&slot| self.entries[slot as usize].key == *key)
            .copied()
    }

    /// Looks a block up. A hit returns its value and updates recency and frequency; a miss
    /// (absent, or only a ghost) returns `None`, and the caller reads the block and `insert`s it.
    pub fn get(&mut self, key: &BlockKey, access: Access) -> Option<&V> {
        let found = self.find(key);
        let live =
            found.filter(|&slot| matches!(self.entries[slot as usize].list, List::Mru | List::Mfu));
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

    /// Whether a block is cached (no statistics, no reordering).
    pub fn contains(&self, key: &BlockKey) -> bool {
        self.find(key)
            .is_some_and(|slot| matches!(self.entries[slot as usize].list, List::Mru | List::Mfu))
    }

    fn hit(&mut self, slot: u32, access: Access) {
        let entry = &self.entries[slot as usize];
        let (list, flags) = (entry.list, entry.flags);
        match list {
            List::Mru => self.stats.mru_hits += 1,
            _ => self.stats.mfu_hits += 1,
        }
        if access == Access::Prefetch {
            self.stats.prefetch_hits += 1;
            return;
        }
        self.stats.demand_hits += 1;
        if flags & PREFETCHED != 0 && list == List::Mru {
            // First use of a block read ahead: used once, as streams use their blocks.
            let entry = &mut self.entries[slot as usize];
            entry.flags = (flags & !PREFETCHED) | STREAMED;
            self.unlink(slot);
            self.push_tail(List::Mru, slot);
            return;
        }
        self.entries[slot as usize].flags = 0;
        self.unlink(slot);
        self.push_head(List::Mfu, slot);
    }

    /// Caches `value` (a block of `size_bytes`) after a miss, evicting as needed. A key already
    /// cached is replaced in place (same list).
    pub fn insert(&mut self, key: BlockKey, size_bytes: u32, value: V, access: Access) {
        assert!(size_bytes > 0, "a cached block has a size");
        let mut from_mfu_ghost = false;
        let list = match self.find(&key) {
            Some(slot) => {
                let old = self.entries[slot as usize].list;
                self.unlink(slot);
                self.release(slot);
                match (old, access) {
                    (List::Mru | List::Mfu, _) => old,
                    (List::MruGhost, Access::Demand) => {
                        self.stats.mru_ghost_hits += 1;
                        self.adapt_towards_mru(size_bytes);
                        List::Mfu
                    }
                    (List::MfuGhost, Access::Demand) => {
                        self.stats.mfu_ghost_hits += 1;
                        self.adapt_towards_mfu(size_bytes);
                        from_mfu_ghost = true;
                        List::Mfu
                    }
                    _ => List::Mru,
                }
            }
            None => List::Mru,
        };
        // Room first, then the block: the newest block is never its own victim. A block that
        // cannot fit (larger than the capacity, or than what pinned blocks leave) is not cached.
        self.evict_to_fit(u64::from(size_bytes), from_mfu_ghost);
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
            // Only a block new to the cache counts as read ahead: a frequent one stays frequent.
            flags: if access == Access::Prefetch && list == List::Mru {
                PREFETCHED
            } else {
                0
            },
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
            Some(slot) if matches!(self.entries[slot as usize].list, List::Mru | List::Mfu) => {
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
            self.evict_to_fit(0, false);
        }
    }

    fn adapt_towards_mru(&mut self, size_bytes: u32) {
        let (b1, b2) = (
            self.lists[List::MruGhost as usize].bytes.max(1),
            self.lists[List::MfuGhost as usize].bytes,
        );
        let delta = u64::from(size_bytes) * (b2 / b1).max(1);
        self.mru_target_bytes = (self.mru_target_bytes + delta).min(self.capacity_bytes);
    }

    fn adapt_towards_mfu(&mut self, size_bytes: u32) {
        let (b1, b2) = (
            self.lists[List::MruGhost as usize].bytes,
            self.lists[List::MfuGhost as usize].bytes.max(1),
        );
        let delta = u64::from(size_bytes) * (b1 / b2).max(1);
        self.mru_target_bytes = self.mru_target_bytes.saturating_sub(delta);
    }

    /// Evicts until the data plus `incoming_bytes` fits the capacity, then trims the ghosts.
    fn evict_to_fit(&mut self, incoming_bytes: u64, from_mfu_ghost: bool) {
        while self.live_bytes() + incoming_bytes > self.capacity_bytes {
            // Blocks a stream has used go first, whatever the target says.
            if self.tail_is_streamed() && self.evict_one(List::Mru) {
                continue;
            }
            let mru = self.lists[List::Mru as usize].bytes;
            let mfu = self.lists[List::Mfu as usize].bytes;
            let over_target = mru > self.mru_target_bytes
                || (from_mfu_ghost && mru > 0 && mru >= self.mru_target_bytes);
            let first = if mru > 0 && (over_target || mfu == 0) {
                List::Mru
            } else {
                List::Mfu
            };
            let second = match first {
                List::Mru => List::Mfu,
                _ => List::Mru,
            };
            if !self.evict_one(first) && !self.evict_one(second) {
                break; // only pinned blocks left near the tails
            }
        }
        self.trim_ghosts();
    }

    fn tail_is_streamed(&self) -> bool {
        let tail = self.lists[List::Mru as usize].tail;
        tail != NIL && {
            let entry = &self.entries[tail as usize];
            entry.flags & STREAMED != 0 && entry.pins == 0
        }
    }

    /// Evicts the least recently used unpinned block of `list` (looking at most
    /// `EVICT_SCAN_MAX` entries from its tail); returns whether one went.
    fn evict_one(&mut self, list: List) -> bool {
        let mut slot = self.lists[list as usize].tail;
        for _ in 0..EVICT_SCAN_MAX {
            if slot == NIL {
                return false;
            }
            let entry = &self.entries[slot as usize];
            if entry.pins > 0 {
                self.stats.evict_skips += 1;
                slot = entry.prev;
                continue;
            }
            let (size, streamed) = (entry.size_bytes, entry.flags & STREAMED != 0);
            self.stats.evictions += 1;
            self.stats.evicted_bytes += u64::from(size);
            self.unlink(slot);
            if streamed {
                self.release(slot);
            } else {
                let entry = &mut self.entries[slot as usize];
                entry.value = None;
                entry.flags = 0;
                let ghost = match list {
                    List::Mru => List::MruGhost,
                    _ => List::MfuGhost,
                };
                self.push_head(ghost, slot);
            }
            return true;
        }
        false
    }

    fn trim_ghosts(&mut self) {
        let bytes = |policy: &Self, list: List| policy.lists[list as usize].bytes;
        while bytes(self, List::Mru) + bytes(self, List::MruGhost) > self.capacity_bytes
            && self.drop_tail(List::MruGhost)
        {}
        while bytes(self, List::Mru)
            + bytes(self, List::Mfu)
            + bytes(self, List::MruGhost)
            + bytes(self, List::MfuGhost)
            > 2 * self.capacity_bytes
            && (self.drop_tail(List::MfuGhost) || self.drop_tail(List::MruGhost))
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
                let live = list_index < 2;
                assert_eq!(
                    entry.value.is_some(),
                    live,
                    "ghosts hold no data, live blocks do"
                );
                assert!(live || entry.pins == 0, "a ghost is pinned");
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
        assert!(self.mru_target_bytes <= self.capacity_bytes);
        let l = |list: List| self.lists[list as usize].bytes;
        assert!(l(List::Mru) + l(List::MruGhost) <= self.capacity_bytes.max(l(List::Mru)));
        assert!(
            l(List::Mru) + l(List::Mfu) + l(List::MruGhost) + l(List::MfuGhost)
                <= 2 * self.capacity_bytes.max(self.live_bytes())
        );
    }

    /// Bytes of pinned blocks (they may hold the cache over its capacity).
    pub fn pinned_bytes(&self) -> u64 {
        self.entries
            .iter()
            .filter(|entry| entry.pins > 0 && matches!(entry.list, List::Mru | List::Mfu))
            .map(|entry| u64::from(entry.size_bytes))
            .sum()
    }
}
