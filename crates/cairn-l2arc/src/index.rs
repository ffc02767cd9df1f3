//! The in-RAM index: which blocks the cache devices hold, and where, in 10 bytes per block.
//!
//! A block is known by its key (first copy's address and birth txg: `cairn_arc::block_key`'s
//! two words). The index does not keep the key itself but a 39-bit fingerprint of it, packed
//! in one u64 word with the block's state and the low half of its place: a 4-bit device
//! number, a *promoted* bit (the block was read from here into RAM, so while RAM holds it its
//! copy here is a duplicate, the first space a segment reuse takes back), a 4-bit *frequency*
//! (how often the block was read lately, as the RAM tier's sketch told when it offered the
//! block, on its segment's scale: see `segments`) and the low 16 bits of the block's place on
//! that device in 512-byte sectors. The place's high 16 bits sit in a parallel u16 array: 32
//! bits of sectors, 2 TiB per device.
//!
//! Two different keys can share a fingerprint. The entries a lookup compares with sit near its
//! home slot, so they share the fingerprint's high bits that chose that home, and all of a
//! shard's entries share the 4 bits that chose the shard (see `shard_of`): of the 39 bits,
//! about 35 − log2(the shard's slots) tell them apart. A lookup of a block not indexed then
//! finds a false match about once in 2^25 with bench/cache's 1,300 slots per shard, once in
//! 2^15 at a million (100 GiB of 8 KiB blocks), once in 2^12 at 6 million (the default 1 GiB
//! cap, full). A false match costs a read, never a wrong answer: every block read from a
//! cache device is verified against the caller's block pointer, and on a mismatch the
//! segment's summary tells a block other than the caller's at that place (a collision, a
//! plain miss: `fingerprint_collisions`) from a bad copy (an error of the device). The 12-byte
//! slots this replaced had 55 bits (once in 2^28 at 6 million slots per shard) but cost 3.3 B
//! more per block, which with the RAM tier's sketch put the tier over 16 B per block.
//!
//! Layout: open addressing with linear probing kept in Robin Hood order (an entry never sits
//! further from its home slot than the entry it displaced), deletion by backward shift (no
//! tombstones), words and high places in two parallel arrays (no padding). A slot whose word
//! is 0 is empty (fingerprints are never 0). The table grows by 1.1× when 95% full and shrinks
//! to 90% full when removals leave it under 80%, so once past its smallest size it stays
//! 80–95% full: 10.5–12.5 B of RAM per indexed block (`ram_bytes` / `len`), about 11 B in
//! steady use. Robin Hood order keeps probes short at that load (a lookup stops as soon as it
//! meets an entry closer to its home than the key would be; at 95% a lookup reads about ten
//! words, 80 bytes, one or two cache lines, and the u16 half of the one it finds).
//!
//! Capacity is explicit: `entries_max` is the most entries the caller's RAM cap allows; an
//! insert beyond it is refused (the caller then frees a segment's worth of entries first).

/// Bits of the device number inside an entry's word.
const DEVICE_BITS: u32 = 4;
/// The promoted bit, just above the device number.
const PROMOTED_BIT: u64 = 1 << DEVICE_BITS;
/// The frequency's 4 bits, above the promoted bit.
const FREQUENCY_SHIFT: u32 = DEVICE_BITS + 1;
const FREQUENCY_MASK: u64 = 0xf << FREQUENCY_SHIFT;
/// The largest frequency an entry keeps.
pub const FREQUENCY_MAX: u8 = 15;
/// Low bits of a word that are the entry's state (device number, promoted bit, frequency).
const STATE_BITS: u32 = FREQUENCY_SHIFT + 4;
/// The low 16 bits of the place, above the state.
const PLACE_LOW_SHIFT: u32 = STATE_BITS;
const PLACE_LOW_BITS: u32 = 16;
const PLACE_LOW_MASK: u64 = ((1 << PLACE_LOW_BITS) - 1) << PLACE_LOW_SHIFT;
/// Low bits of a word that are not the fingerprint (state and low place): 25, leaving 39.
pub(crate) const TAG_BITS: u32 = STATE_BITS + PLACE_LOW_BITS;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// Most cache devices one index can address.
pub const DEVICES_MAX: usize = 1 << DEVICE_BITS;
/// Fill at which the table grows, in thousandths.
const LOAD_MAX_PERMILLE: usize = 950;
/// Growth factor when full, in thousandths (×1.1).
const GROWTH_PERMILLE: usize = 1100;
/// Fill under which the table shrinks, and the fill it shrinks to, in thousandths.
const LOAD_MIN_PERMILLE: usize = 800;
const LOAD_AFTER_SHRINK_PERMILLE: usize = 900;
/// Worst RAM per entry the fill limits allow (12.5 B at 80%, rounded up): what a cap must be
/// divided by.
pub const ENTRY_BYTES_WORST: u64 = 13;
/// Smallest table.
const SLOTS_MIN: usize = 64;
/// RAM per slot: the u64 word and the u16 high place.
pub const SLOT_BYTES: usize = 10;

/// Where a block is: which cache device, and its first 512-byte sector there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Place {
    pub device: u8,
    pub sector: u32,
}

/// Mixes a block key into a fingerprint: never 0, the low `TAG_BITS` free for the state and
/// the low place.
pub(crate) fn fingerprint(key: [u64; 2]) -> u64 {
    // Two rounds of a 64-bit finalizer (splitmix64's) over both words: every key bit moves
    // every fingerprint bit, so home slots spread evenly whatever the addresses look like.
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let hash = mix(mix(key[0]) ^ key[1].rotate_left(32));
    let fingerprint = hash & !TAG_MASK;
    if fingerprint == 0 {
        TAG_MASK + 1
    } else {
        fingerprint
    }
}

fn word(fingerprint: u64, place: Place) -> u64 {
    fingerprint
        | (u64::from(place.sector) << PLACE_LOW_SHIFT) & PLACE_LOW_MASK
        | u64::from(place.device)
}

/// The high half of a place, kept beside the word.
fn place_high(place: Place) -> u16 {
    (place.sector >> PLACE_LOW_BITS) as u16
}

/// The place an entry's word and high half tell.
fn place_of(word: u64, high: u16) -> Place {
    Place {
        device: device_of(word),
        // Masked to 16 bits.
        sector: (u32::from(high) << PLACE_LOW_BITS)
            | ((word & PLACE_LOW_MASK) >> PLACE_LOW_SHIFT) as u32,
    }
}

/// What an entry knows of its block besides its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EntryState {
    /// Read from here into RAM since it was placed (or last offered again).
    pub promoted: bool,
    /// Reads lately, on its segment's scale (0 to `FREQUENCY_MAX`).
    pub frequency: u8,
}

fn state_of(word: u64) -> EntryState {
    EntryState {
        promoted: word & PROMOTED_BIT != 0,
        // Masked to 4 bits.
        frequency: ((word & FREQUENCY_MASK) >> FREQUENCY_SHIFT) as u8,
    }
}

fn with_state(word: u64, state: EntryState) -> u64 {
    let frequency = u64::from(state.frequency.min(FREQUENCY_MAX)) << FREQUENCY_SHIFT;
    let promoted = if state.promoted { PROMOTED_BIT } else { 0 };
    (word & !(PROMOTED_BIT | FREQUENCY_MASK)) | frequency | promoted
}

fn device_of(word: u64) -> u8 {
    // Masked to DEVICE_BITS (4), so the value fits a u8.
    (word & ((1 << DEVICE_BITS) - 1)) as u8
}

/// Why an insert was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IndexFull {
    #[error("the index holds its most entries ({0})")]
    AtCap(usize),
}

pub struct Index {
    words: Vec<u64>,
    /// The high 16 bits of each slot's place.
    highs: Vec<u16>,
    len: usize,
    entries_max: usize,
}

impl Index {
    /// An empty index that will hold at most `entries_max` entries.
    pub fn new(entries_max: usize) -> Index {
        Index {
            words: vec![0; SLOTS_MIN],
            highs: vec![0; SLOTS_MIN],
            len: 0,
            entries_max,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn entries_max(&self) -> usize {
        self.entries_max
    }

    /// RAM the table uses now.
    pub fn ram_bytes(&self) -> usize {
        self.words.len() * SLOT_BYTES
    }

    fn home(&self, fingerprint: u64) -> usize {
        // The table size is arbitrary (growth by 1.2×): map the high bits onto it.
        ((u128::from(fingerprint) * self.words.len() as u128) >> 64) as usize
    }

    fn distance(&self, slot: usize, word: u64) -> usize {
        let home = self.home(word & !TAG_MASK);
        (slot + self.words.len() - home) % self.words.len()
    }

    fn find(&self, key: [u64; 2]) -> Option<usize> {
        let fingerprint = fingerprint(key);
        let mask = !TAG_MASK;
        let slots = self.words.len();
        let mut slot = self.home(fingerprint);
        for distance in 0..slots {
            let word = self.words[slot];
            if word == 0 || self.distance(slot, word) < distance {
                return None;
            }
            if word & mask == fingerprint {
                return Some(slot);
            }
            slot = (slot + 1) % slots;
        }
        None
    }

    /// Where the block of `key` is, if indexed.
    pub fn get(&self, key: [u64; 2]) -> Option<Place> {
        self.find(key)
            .map(|slot| place_of(self.words[slot], self.highs[slot]))
    }

    /// Records (or moves) the block of `key` to `place`, not promoted, of frequency 0.
    pub fn insert(&mut self, key: [u64; 2], place: Place) -> Result<(), IndexFull> {
        self.insert_with(key, place, EntryState::default())
    }

    /// Records (or moves) the block of `key` to `place` with `state`.
    pub fn insert_with(
        &mut self,
        key: [u64; 2],
        place: Place,
        state: EntryState,
    ) -> Result<(), IndexFull> {
        assert!(
            usize::from(place.device) < DEVICES_MAX,
            "device {} beyond the index's {DEVICES_MAX}",
            place.device
        );
        let new_word = with_state(word(fingerprint(key), place), state);
        if let Some(slot) = self.find(key) {
            self.words[slot] = new_word;
            self.highs[slot] = place_high(place);
            return Ok(());
        }
        if self.len >= self.entries_max {
            return Err(IndexFull::AtCap(self.entries_max));
        }
        if (self.len + 1) * 1000 > self.words.len() * LOAD_MAX_PERMILLE {
            self.grow();
        }
        self.place(new_word, place_high(place));
        self.len += 1;
        Ok(())
    }

    /// Puts an entry known to be absent, in Robin Hood order.
    fn place(&mut self, mut word: u64, mut high: u16) {
        let slots = self.words.len();
        let mut slot = self.home(word & !TAG_MASK);
        let mut distance = 0;
        loop {
            let here = self.words[slot];
            if here == 0 {
                self.words[slot] = word;
                self.highs[slot] = high;
                return;
            }
            let here_distance = self.distance(slot, here);
            if here_distance < distance {
                std::mem::swap(&mut self.words[slot], &mut word);
                std::mem::swap(&mut self.highs[slot], &mut high);
                distance = here_distance;
            }
            slot = (slot + 1) % slots;
            distance += 1;
        }
    }

    fn grow(&mut self) {
        let slots = (self.words.len() * GROWTH_PERMILLE / 1000).max(self.words.len() + 1);
        self.resize(slots);
    }

    /// Shrinks a table that removals left under `LOAD_MIN_PERMILLE` full.
    fn shrink_if_sparse(&mut self) {
        let slots = self.words.len();
        if slots > SLOTS_MIN && self.len * 1000 < slots * LOAD_MIN_PERMILLE {
            let target = (self.len * 1000 / LOAD_AFTER_SHRINK_PERMILLE).max(SLOTS_MIN);
            if target < slots {
                self.resize(target);
            }
        }
    }

    fn resize(&mut self, slots: usize) {
        assert!(
            slots > self.len,
            "a table of {slots} slots cannot hold {}",
            self.len
        );
        let words = std::mem::replace(&mut self.words, vec![0; slots]);
        let highs = std::mem::replace(&mut self.highs, vec![0; slots]);
        for (word, high) in words.into_iter().zip(highs).filter(|(word, _)| *word != 0) {
            self.place(word, high);
        }
    }

    /// Forgets the block of `key`; returns where it was.
    pub fn remove(&mut self, key: [u64; 2]) -> Option<Place> {
        let slot = self.find(key)?;
        let removed = place_of(self.words[slot], self.highs[slot]);
        self.remove_slot(slot);
        self.shrink_if_sparse();
        Some(removed)
    }

    /// Empties `slot` and shifts the run after it back by one (no tombstones).
    fn remove_slot(&mut self, mut slot: usize) {
        let slots = self.words.len();
        loop {
            let next = (slot + 1) % slots;
            let word = self.words[next];
            if word == 0 || self.distance(next, word) == 0 {
                self.words[slot] = 0;
                self.highs[slot] = 0;
                break;
            }
            self.words[slot] = word;
            self.highs[slot] = self.highs[next];
            slot = next;
        }
        self.len -= 1;
    }

    /// Forgets the block of `key` only if it is at `place` (a newer copy elsewhere stays).
    pub fn remove_at(&mut self, key: [u64; 2], place: Place) -> bool {
        self.take_at(key, place).is_some()
    }

    /// Like `remove_at`, and tells the entry's state.
    pub fn take_at(&mut self, key: [u64; 2], place: Place) -> Option<EntryState> {
        let slot = self.find(key)?;
        let word = self.words[slot];
        if place_of(word, self.highs[slot]) != place {
            return None;
        }
        self.remove_slot(slot);
        self.shrink_if_sparse();
        Some(state_of(word))
    }

    /// The place and state of the block of `key`, if indexed.
    pub fn get_state(&self, key: [u64; 2]) -> Option<(Place, EntryState)> {
        self.find(key).map(|slot| {
            let word = self.words[slot];
            (place_of(word, self.highs[slot]), state_of(word))
        })
    }

    /// Changes the state of the block of `key` if it is at `place`; returns the state it had.
    pub fn update_at(
        &mut self,
        key: [u64; 2],
        place: Place,
        change: impl FnOnce(EntryState) -> EntryState,
    ) -> Option<EntryState> {
        let slot = self.find(key)?;
        let word = self.words[slot];
        if place_of(word, self.highs[slot]) != place {
            return None;
        }
        let before = state_of(word);
        self.words[slot] = with_state(word, change(before));
        Some(before)
    }

    /// Keeps only the entries `keep` accepts (a device gone, a segment whose summary could not
    /// be read back): a sweep of the whole table, for rare events only.
    pub fn retain(&mut self, mut keep: impl FnMut(Place) -> bool) {
        let mut slot = 0;
        while slot < self.words.len() {
            let word = self.words[slot];
            if word != 0 && !keep(place_of(word, self.highs[slot])) {
                // The backward shift may move another entry into `slot`: look at it again.
                self.remove_slot(slot);
                continue;
            }
            slot += 1;
        }
        self.shrink_if_sparse();
    }

    /// Entries marked promoted (their blocks went up to RAM): a sweep of the table.
    pub fn promoted(&self) -> usize {
        self.words
            .iter()
            .filter(|word| **word != 0 && state_of(**word).promoted)
            .count()
    }

    /// Checks the Robin Hood invariants (tests).
    pub fn assert_invariants(&self) {
        let mut counted = 0;
        for slot in 0..self.words.len() {
            let word = self.words[slot];
            if word == 0 {
                continue;
            }
            counted += 1;
            let previous = (slot + self.words.len() - 1) % self.words.len();
            let distance = self.distance(slot, word);
            if distance > 0 {
                let before = self.words[previous];
                assert!(before != 0, "slot {slot} is displaced after an empty slot");
                assert!(
                    self.distance(previous, before) + 1 >= distance,
                    "slot {slot} breaks Robin Hood order"
                );
            }
        }
        assert_eq!(counted, self.len, "entry count");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(n: u64) -> [u64; 2] {
        [n << 9, 1 + n % 7]
    }

    #[test]
    fn entries_come_back_and_go() {
        let mut index = Index::new(10_000);
        for n in 0..5_000 {
            index
                .insert(
                    key(n),
                    Place {
                        device: (n % 3) as u8,
                        sector: n as u32,
                    },
                )
                .unwrap();
        }
        index.assert_invariants();
        for n in 0..5_000 {
            assert_eq!(
                index.get(key(n)),
                Some(Place {
                    device: (n % 3) as u8,
                    sector: n as u32
                })
            );
        }
        assert_eq!(index.get(key(9_999)), None);
        for n in (0..5_000).step_by(2) {
            assert!(index.remove(key(n)).is_some());
        }
        index.assert_invariants();
        assert_eq!(index.len(), 2_500);
        assert!(index.get(key(2)).is_none() && index.get(key(3)).is_some());
    }

    #[test]
    fn places_split_across_the_word_and_the_high_half_come_back_whole() {
        let mut index = Index::new(100);
        // Same low 16 bits, different high ones; and the extremes.
        let sectors = [
            0x0001_2345,
            0x0002_2345,
            0,
            u32::MAX,
            0xffff_0000,
            0x0000_ffff,
        ];
        for (n, &sector) in sectors.iter().enumerate() {
            let place = Place {
                device: (DEVICES_MAX - 1 - n) as u8,
                sector,
            };
            index
                .insert_with(
                    key(n as u64),
                    place,
                    EntryState {
                        promoted: n % 2 == 0,
                        frequency: FREQUENCY_MAX,
                    },
                )
                .unwrap();
        }
        for (n, &sector) in sectors.iter().enumerate() {
            let place = Place {
                device: (DEVICES_MAX - 1 - n) as u8,
                sector,
            };
            assert_eq!(
                index.get_state(key(n as u64)),
                Some((
                    place,
                    EntryState {
                        promoted: n % 2 == 0,
                        frequency: FREQUENCY_MAX
                    }
                ))
            );
            let other_high = Place {
                sector: sector ^ 0x0100_0000,
                ..place
            };
            assert!(!index.remove_at(key(n as u64), other_high));
            let other_low = Place {
                sector: sector ^ 1,
                ..place
            };
            assert!(!index.remove_at(key(n as u64), other_low));
        }
        assert_eq!(index.len(), sectors.len());
    }

    #[test]
    fn removals_shrink_the_table() {
        let mut index = Index::new(1 << 20);
        for n in 0..100_000u64 {
            index
                .insert(
                    key(n),
                    Place {
                        device: 0,
                        sector: n as u32,
                    },
                )
                .unwrap();
        }
        for n in 0..90_000u64 {
            index.remove(key(n)).unwrap();
            if index.len() > 1_000 {
                let per_entry = index.ram_bytes() as f64 / index.len() as f64;
                assert!(
                    per_entry <= ENTRY_BYTES_WORST as f64,
                    "{per_entry:.1} B per entry"
                );
            }
        }
        index.assert_invariants();
        assert!(index.get(key(95_000)).is_some());
    }

    #[test]
    fn ram_per_entry_stays_under_the_worst_once_filled() {
        let mut index = Index::new(1 << 20);
        let mut worst = 0.0f64;
        for n in 0..200_000u64 {
            index
                .insert(
                    key(n),
                    Place {
                        device: 0,
                        sector: n as u32,
                    },
                )
                .unwrap();
            if n >= 1_000 {
                worst = worst.max(index.ram_bytes() as f64 / index.len() as f64);
            }
        }
        // Growth leaves the table 95% / 1.1 = 86% full: 11.6 B per entry at worst.
        assert!(worst <= 11.7, "worst RAM per entry {worst:.2} B");
    }

    #[test]
    fn entry_states_are_kept_told_and_reset_by_a_move() {
        let mut index = Index::new(10);
        let place = Place {
            device: 2,
            sector: 7,
        };
        let hot = EntryState {
            promoted: false,
            frequency: 9,
        };
        index.insert_with(key(1), place, hot).unwrap();
        index.insert(key(2), place).unwrap();
        let before = index.update_at(key(1), place, |state| EntryState {
            promoted: true,
            ..state
        });
        assert_eq!(before, Some(hot));
        assert_eq!(
            index.get(key(1)),
            Some(place),
            "the state changed the place"
        );
        // Frequencies saturate at 4 bits without touching the other bits.
        index.update_at(key(2), place, |state| EntryState {
            frequency: 200,
            ..state
        });
        // Another place is another copy: not changed.
        let elsewhere = Place {
            device: 1,
            sector: 7,
        };
        assert_eq!(index.update_at(key(2), elsewhere, |state| state), None);
        assert_eq!(
            index.take_at(key(1), place),
            Some(EntryState {
                promoted: true,
                frequency: 9
            })
        );
        assert_eq!(
            index.get_state(key(2)),
            Some((
                place,
                EntryState {
                    promoted: false,
                    frequency: FREQUENCY_MAX
                }
            ))
        );
        assert_eq!(index.take_at(key(2), place).map(|s| s.frequency), Some(15));
        assert_eq!(index.take_at(key(2), place), None);
        // A moved entry starts afresh.
        index.insert_with(key(3), place, hot).unwrap();
        index.insert(key(3), elsewhere).unwrap();
        assert_eq!(
            index.take_at(key(3), elsewhere),
            Some(EntryState::default())
        );
        index.assert_invariants();
    }

    #[test]
    fn the_cap_refuses_new_keys_but_not_moves() {
        let mut index = Index::new(2);
        index
            .insert(
                key(1),
                Place {
                    device: 0,
                    sector: 1,
                },
            )
            .unwrap();
        index
            .insert(
                key(2),
                Place {
                    device: 0,
                    sector: 2,
                },
            )
            .unwrap();
        assert_eq!(
            index.insert(
                key(3),
                Place {
                    device: 0,
                    sector: 3
                }
            ),
            Err(IndexFull::AtCap(2))
        );
        index
            .insert(
                key(2),
                Place {
                    device: 1,
                    sector: 9,
                },
            )
            .unwrap();
        assert_eq!(
            index.get(key(2)),
            Some(Place {
                device: 1,
                sector: 9
            })
        );
        assert!(!index.remove_at(
            key(2),
            Place {
                device: 0,
                sector: 2
            }
        ));
        assert!(index.remove_at(
            key(2),
            Place {
                device: 1,
                sector: 9
            }
        ));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u8, u32),
        Remove(u16),
        RemoveAt(u16, u8, u32),
        DropDevice(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u16>(), 0u8..4, any::<u32>()).prop_map(|(k, d, s)| Op::Insert(k, d, s)),
            2 => any::<u16>().prop_map(Op::Remove),
            1 => (any::<u16>(), 0u8..4, any::<u32>()).prop_map(|(k, d, s)| Op::RemoveAt(k, d, s)),
            1 => (0u8..4).prop_map(Op::DropDevice),
        ]
    }

    proptest! {
        /// The index answers exactly as a map from key to place does, under any sequence of
        /// inserts, moves, removals and device sweeps, with its invariants intact.
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..600), cap in 1usize..400) {
            let mut index = Index::new(cap);
            let mut model: HashMap<u16, Place> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, device, sector) => {
                        let place = Place { device, sector };
                        let result = index.insert(key(u64::from(k)), place);
                        if model.contains_key(&k) || model.len() < cap {
                            prop_assert!(result.is_ok());
                            model.insert(k, place);
                        } else {
                            prop_assert_eq!(result, Err(IndexFull::AtCap(cap)));
                        }
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(index.remove(key(u64::from(k))), model.remove(&k));
                    }
                    Op::RemoveAt(k, device, sector) => {
                        let place = Place { device, sector };
                        let expected = model.get(&k) == Some(&place);
                        prop_assert_eq!(index.remove_at(key(u64::from(k)), place), expected);
                        if expected {
                            model.remove(&k);
                        }
                    }
                    Op::DropDevice(device) => {
                        index.retain(|place| place.device != device);
                        model.retain(|_, place| place.device != device);
                    }
                }
                prop_assert_eq!(index.len(), model.len());
            }
            index.assert_invariants();
            for k in 0..=u16::MAX {
                prop_assert_eq!(index.get(key(u64::from(k))), model.get(&k).copied());
            }
        }
    }
}
