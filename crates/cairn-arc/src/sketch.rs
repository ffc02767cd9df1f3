//! A small frequency sketch (count-min, four rows of saturating 4-bit counts, halved every
//! `sample` reads so old popularity fades): how often a key was read lately, including keys
//! the cache no longer holds. The policy uses it to keep its frequency list for blocks that are
//! read more often than what they would displace.
//!
//! A key's first read only sets its bits in a *doorkeeper* (a Bloom filter cleared at each
//! ageing); the counters count from the second read on. Blocks read once — a scan's, most of a
//! random workload's tail — then never touch the counters, which stay accurate for the blocks
//! that matter (as TinyLFU does).
//!
//! Each ageing starts a new *epoch* (`epoch`, carried on when a sketch is replaced by a resized
//! one): an SSD tier below that keeps the estimates it was told halves them once per epoch
//! since, to compare them with estimates told now.
//!
//! Memory: per slot, four 4-bit counters (two bytes) and 32 doorkeeper bits, `width` slots with
//! `width` the power of two at or above the cache's capacity in blocks: 6 bytes per slot, 3.5-6
//! per block of capacity. The doorkeeper's size matters: at 16 bits per slot it filled up between
//! two ageings of the recorded volume trace (tens of thousands of blocks read once by a backup)
//! and let a quarter of first reads through as second ones; at 32, bench/cache's volume trace
//! misses 0.05% less, the synthetic ones the same.

const ROWS: usize = 4;
const COUNT_MAX: u8 = 15;
const DOORKEEPER_BITS_PER_SLOT: usize = 32;
const DOORKEEPER_HASHES: usize = 4;
/// Distinct odd multipliers, one per row, to spread one 64-bit hash over the rows.
const SEEDS: [u64; ROWS] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0xd6e8_feb8_6659_fd93,
];

pub struct FrequencySketch {
    /// Two 4-bit counters per byte: counter `i` is the low nibble of byte `i / 2` when `i` is
    /// even, the high one when odd.
    counts: Vec<u8>,
    doorkeeper: Vec<u64>,
    mask: u64,
    additions: u64,
    sample: u64,
    /// Times the counts were halved (the sketch's epoch).
    ages: u64,
}

impl FrequencySketch {
    /// A sketch for a cache of about `capacity_blocks` blocks.
    pub fn new(capacity_blocks: u64) -> FrequencySketch {
        let width = capacity_blocks.clamp(64, 1 << 28).next_power_of_two();
        FrequencySketch {
            counts: vec![0; width as usize * ROWS / 2],
            doorkeeper: vec![0; (width as usize * DOORKEEPER_BITS_PER_SLOT).div_ceil(64)],
            mask: width - 1,
            additions: 0,
            sample: width * 10,
            ages: 0,
        }
    }

    fn slot(&self, hash: u64, row: usize) -> usize {
        let mixed = hash.wrapping_mul(SEEDS[row]);
        row * (self.mask as usize + 1) + ((mixed >> 32) & self.mask) as usize
    }

    /// Counts one read of the key with hash `hash` (conservative update: only the smallest
    /// counters grow, which keeps the estimate of rare keys close to the truth).
    pub fn record(&mut self, hash: u64) {
        self.additions += 1;
        if self.additions >= self.sample {
            self.age();
        }
        if !self.doorkeeper_insert(hash) {
            return;
        }
        let slots: [usize; ROWS] = std::array::from_fn(|row| self.slot(hash, row));
        let least = slots.iter().map(|&s| self.count(s)).min().unwrap_or(0);
        if least < COUNT_MAX {
            for &s in &slots {
                if self.count(s) == least {
                    self.set_count(s, least + 1);
                }
            }
        }
    }

    fn count(&self, slot: usize) -> u8 {
        (self.counts[slot / 2] >> ((slot % 2) * 4)) & 0x0f
    }

    fn set_count(&mut self, slot: usize, count: u8) {
        debug_assert!(count <= COUNT_MAX);
        let shift = (slot % 2) * 4;
        let byte = &mut self.counts[slot / 2];
        *byte = (*byte & !(0x0f << shift)) | (count << shift);
    }

    /// The doorkeeper's two bits for `hash`.
    fn doorkeeper_bits(&self, hash: u64) -> [usize; DOORKEEPER_HASHES] {
        let bits = self.doorkeeper.len() * 64;
        std::array::from_fn(|i| (hash.wrapping_mul(SEEDS[i]) >> 20) as usize % bits)
    }

    fn doorkeeper_contains(&self, hash: u64) -> bool {
        self.doorkeeper_bits(hash)
            .iter()
            .all(|&bit| self.doorkeeper[bit / 64] & (1 << (bit % 64)) != 0)
    }

    /// Sets the key's bits; returns whether they were all set already (a second read).
    fn doorkeeper_insert(&mut self, hash: u64) -> bool {
        let present = self.doorkeeper_contains(hash);
        for bit in self.doorkeeper_bits(hash) {
            self.doorkeeper[bit / 64] |= 1 << (bit % 64);
        }
        present
    }

    /// Estimated reads of the key with hash `hash` since the last ageing or two.
    pub fn estimate(&self, hash: u64) -> u8 {
        let counted = (0..ROWS)
            .map(|row| self.count(self.slot(hash, row)))
            .min()
            .unwrap_or(0);
        counted + u8::from(self.doorkeeper_contains(hash))
    }

    /// Times the counts were halved so far: an estimate told at epoch `e` counts half as much
    /// at `e + 1` (what a tier below that keeps estimates needs to compare them with new ones).
    pub fn epoch(&self) -> u64 {
        self.ages
    }

    /// Starts this (new, empty) sketch's epochs after `epoch`, those of the sketch it replaces.
    pub fn continue_after(&mut self, epoch: u64) {
        self.ages = epoch + 1;
    }

    /// Bytes the counters take.
    pub fn bytes(&self) -> usize {
        self.counts.len() + self.doorkeeper.len() * 8
    }

    fn age(&mut self) {
        for pair in &mut self.counts {
            // Both nibbles halved at once; the bit shifted from the high one into the low one's
            // top is masked off.
            *pair = (*pair >> 1) & 0x77;
        }
        self.doorkeeper.fill(0);
        self.additions /= 2;
        self.ages += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frequent_keys_estimate_higher_than_rare_ones() {
        let mut sketch = FrequencySketch::new(1024);
        for round in 0..10u64 {
            for key in 0..50u64 {
                sketch.record(key.wrapping_mul(0x2545_f491_4f6c_dd1d));
            }
            sketch.record((1000 + round).wrapping_mul(0x2545_f491_4f6c_dd1d));
        }
        let hot = sketch.estimate(7u64.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let rare = sketch.estimate(1003u64.wrapping_mul(0x2545_f491_4f6c_dd1d));
        assert!(hot >= 9 && rare <= 2, "hot {hot}, rare {rare}");
    }

    #[test]
    fn neighbouring_counters_share_a_byte_without_touching_each_other() {
        let mut sketch = FrequencySketch::new(64);
        sketch.set_count(0, 15);
        sketch.set_count(1, 6);
        sketch.set_count(2, 1);
        assert_eq!(
            (sketch.count(0), sketch.count(1), sketch.count(2)),
            (15, 6, 1)
        );
        sketch.set_count(0, 3);
        assert_eq!((sketch.count(0), sketch.count(1)), (3, 6));
        sketch.age();
        assert_eq!(
            (sketch.count(0), sketch.count(1), sketch.count(2)),
            (1, 3, 0),
            "each counter halved on its own"
        );
    }

    #[test]
    fn counts_fade_with_age() {
        let mut sketch = FrequencySketch::new(64);
        let key = 99u64.wrapping_mul(0x2545_f491_4f6c_dd1d);
        for _ in 0..12 {
            sketch.record(key);
        }
        let before = sketch.estimate(key);
        for other in 0..(64 * 10) as u64 {
            sketch.record((other + 5000).wrapping_mul(0x2545_f491_4f6c_dd1d));
        }
        assert!(sketch.estimate(key) < before, "no ageing");
        assert!(sketch.epoch() >= 1, "an ageing not counted as an epoch");
    }
}
