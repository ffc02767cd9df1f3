//! A small frequency sketch (count-min, four rows of saturating 4-bit counts, halved every
//! `sample` increments so old popularity fades): how often a key was read lately, including
//! keys the cache no longer holds. The policy uses it to keep its frequency list for blocks
//! that are read more often than what they would displace.
//!
//! Memory: four counters of one byte per slot, `width` slots with `width` the power of two at
//! or above the cache's capacity in blocks: about 4 bytes per cached block.

const ROWS: usize = 4;
const COUNT_MAX: u8 = 15;
/// Distinct odd multipliers, one per row, to spread one 64-bit hash over the rows.
const SEEDS: [u64; ROWS] = [
    0x9e37_79b9_7f4a_7c15,
    0xc2b2_ae3d_27d4_eb4f,
    0x1656_67b1_9e37_79f9,
    0xd6e8_feb8_6659_fd93,
];

pub struct FrequencySketch {
    counts: Vec<u8>,
    mask: u64,
    additions: u64,
    sample: u64,
}

impl FrequencySketch {
    /// A sketch for a cache of about `capacity_blocks` blocks.
    pub fn new(capacity_blocks: u64) -> FrequencySketch {
        let width = capacity_blocks.clamp(64, 1 << 28).next_power_of_two();
        FrequencySketch {
            counts: vec![0; width as usize * ROWS],
            mask: width - 1,
            additions: 0,
            sample: width * 10,
        }
    }

    fn slot(&self, hash: u64, row: usize) -> usize {
        let mixed = hash.wrapping_mul(SEEDS[row]);
        row * (self.mask as usize + 1) + ((mixed >> 32) & self.mask) as usize
    }

    /// Counts one read of the key with hash `hash` (conservative update: only the smallest
    /// counters grow, which keeps the estimate of rare keys close to the truth).
    pub fn record(&mut self, hash: u64) {
        let slots: [usize; ROWS] = std::array::from_fn(|row| self.slot(hash, row));
        let least = slots.iter().map(|&s| self.counts[s]).min().unwrap_or(0);
        if least < COUNT_MAX {
            for &s in &slots {
                if self.counts[s] == least {
                    self.counts[s] += 1;
                }
            }
        }
        self.additions += 1;
        if self.additions >= self.sample {
            self.age();
        }
    }

    /// Estimated reads of the key with hash `hash` since the last ageing or two.
    pub fn estimate(&self, hash: u64) -> u8 {
        (0..ROWS)
            .map(|row| self.counts[self.slot(hash, row)])
            .min()
            .unwrap_or(0)
    }

    /// Bytes the counters take.
    pub fn bytes(&self) -> usize {
        self.counts.len()
    }

    fn age(&mut self) {
        for count in &mut self.counts {
            *count /= 2;
        }
        self.additions /= 2;
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
    }
}
