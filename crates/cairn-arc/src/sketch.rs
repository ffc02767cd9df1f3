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
//! one, and kept when it grows): an SSD tier below that keeps the estimates it was told halves
//! them once per epoch since, to compare them with estimates told now.
//!
//! Memory: `width` slots, exactly the capacity in blocks (at least 64): per slot four 4-bit
//! counters (two bytes) and 16 doorkeeper bits, so 4 bytes per block of capacity, and no more.
//! A row's column is found by linear hashing (`column`: the hash's low bits modulo the power
//! of two above the width, folded back when past it), so the width need not be a power of two,
//! and the sketch can *grow* (`grow`) without forgetting: each column of the wider sketch takes
//! a part of the keys of one column of the narrower one and starts with its counts, so every
//! estimate is the same after as before (count-min's invariant, never below the true count,
//! holds). It was a multiply-high of the hash and the width (an even spread), under which a
//! widened column straddles two old ones: taking the larger count kept the invariant but
//! raised a fifth of the estimates, and the two-tier replays of bench/cache lost 1–3% to it;
//! linear hashing's unsplit columns take twice the keys of split ones, which cost 0–0.7% with
//! the sketch sized up front. The sketch counts for the SSD tier below too, growing with the
//! blocks that tier holds (see `policy::sketch_outgrown`), so each byte here is paid per block
//! cached on the SSD as well: that tier's whole RAM bill (its index included) is held under
//! 16 B per block with this, at any fill.
//!
//! The ageing period (`sample`) is 16 reads per slot. It matters more than the width: with 10
//! reads per slot of an exact width (a power-of-two width gave 10 to 20 per block of capacity)
//! the two-tier replays of bench/cache lost 1–3% on every trace. The doorkeeper's 16 bits per
//! slot (4 hashes) give a false "seen before" about once in 400 first reads when a period
//! brings as many distinct keys as the capacity, once in 6 at four times as many; it was 32
//! bits, which on bench/cache's synthetic traces changed the miss ratios by under 0.3% (and the
//! recorded volume trace's by 0.05% when it was measured), for 2 more bytes per block of both
//! tiers. A loop, whose blocks all have the same true frequency, was the trace that seemed to
//! need 32 bits; what it needed was the policy's admission margin (see `policy`).

const ROWS: usize = 4;
const COUNT_MAX: u8 = 15;
const DOORKEEPER_BITS_PER_SLOT: usize = 16;
const DOORKEEPER_HASHES: usize = 4;
/// Reads counted between two ageings, per slot.
const SAMPLE_PER_SLOT: u64 = 16;
/// Smallest width.
const WIDTH_MIN: u64 = 64;
/// Largest width (counters addressed by u32 row offsets times rows stay in a usize anyway).
const WIDTH_MAX: u64 = 1 << 28;
/// RAM per slot: `ROWS` 4-bit counters and the doorkeeper's bits.
#[cfg(test)]
const BYTES_PER_SLOT: u64 = (ROWS as u64 * 4 + DOORKEEPER_BITS_PER_SLOT as u64) / 8;
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
    width: u64,
    additions: u64,
    sample: u64,
    /// Times the counts were halved (the sketch's epoch).
    ages: u64,
}

impl FrequencySketch {
    /// A sketch for a cache of about `capacity_blocks` blocks.
    pub fn new(capacity_blocks: u64) -> FrequencySketch {
        let width = capacity_blocks.clamp(WIDTH_MIN, WIDTH_MAX);
        FrequencySketch {
            counts: vec![0; width as usize * ROWS / 2],
            doorkeeper: vec![0; (width as usize * DOORKEEPER_BITS_PER_SLOT).div_ceil(64)],
            width,
            additions: 0,
            sample: width * SAMPLE_PER_SLOT,
            ages: 0,
        }
    }

    fn slot(&self, hash: u64, row: usize) -> usize {
        // The high 32 bits of the mixed hash, onto 0..width by linear hashing (`column`).
        let mixed = hash.wrapping_mul(SEEDS[row]) >> 32;
        // Below the width (≤ 2^28), so it fits a usize.
        row * self.width as usize + column(mixed, self.width) as usize
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

    /// The doorkeeper's bits for `hash`: the hash turned half over (so they do not follow the
    /// counters' columns) and mixed again, onto the filter's bits by linear hashing like the
    /// columns, so a wider filter's bits split from the bits they widen.
    fn doorkeeper_bits(&self, hash: u64) -> [usize; DOORKEEPER_HASHES] {
        let bits = self.doorkeeper.len() as u64 * 64;
        std::array::from_fn(|i| {
            let mixed = hash.rotate_left(32).wrapping_mul(SEEDS[i]) >> 32;
            // Below `bits` (≤ 2^32), so it fits a usize.
            column(mixed, bits) as usize
        })
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

    /// Widens the sketch for about `capacity_blocks` blocks (no-op unless that is wider),
    /// keeping what it counted exactly: columns are found by linear hashing (`column`), so
    /// each column of the wider sketch holds a part of the keys of one column of the narrower
    /// one (its `column` at the old width) and starts with its counts; doorkeeper bits
    /// likewise. Every key's estimate is the same after as before (count-min's invariant,
    /// never below the true count, holds as it did). The epoch and the reads counted towards
    /// the next ageing go on; the ageing period grows with the width.
    pub fn grow(&mut self, capacity_blocks: u64) {
        let width = capacity_blocks.clamp(WIDTH_MIN, WIDTH_MAX);
        if width <= self.width {
            return;
        }
        let old_width = self.width;
        let mut counts = vec![0u8; width as usize * ROWS / 2];
        for row in 0..ROWS {
            for new_column in 0..width {
                let old_column = column(new_column, old_width);
                let count = self.count(row * old_width as usize + old_column as usize);
                let slot = row * width as usize + new_column as usize;
                counts[slot / 2] |= count << ((slot % 2) * 4);
            }
        }
        let old_bits = self.doorkeeper.len() as u64 * 64;
        let mut doorkeeper = vec![0u64; (width as usize * DOORKEEPER_BITS_PER_SLOT).div_ceil(64)];
        let bits = doorkeeper.len() as u64 * 64;
        for bit in 0..bits {
            let old_bit = column(bit, old_bits);
            if self.doorkeeper[(old_bit / 64) as usize] & (1 << (old_bit % 64)) != 0 {
                doorkeeper[(bit / 64) as usize] |= 1 << (bit % 64);
            }
        }
        self.counts = counts;
        self.doorkeeper = doorkeeper;
        self.width = width;
        self.sample = width * SAMPLE_PER_SLOT;
    }

    /// Width the sketch has (slots per row).
    #[cfg(test)]
    pub fn width(&self) -> u64 {
        self.width
    }

    /// Bytes the counters take.
    pub fn bytes(&self) -> usize {
        self.counts.len() + self.doorkeeper.len() * 8
    }

    /// Bytes a sketch for about `capacity_blocks` blocks takes (`bytes` of `new`).
    pub fn bytes_for(capacity_blocks: u64) -> u64 {
        let width = capacity_blocks.clamp(WIDTH_MIN, WIDTH_MAX);
        width * ROWS as u64 / 2 + (width * DOORKEEPER_BITS_PER_SLOT as u64).div_ceil(64) * 8
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

/// Where `value` falls among `width` columns, by linear hashing: its low bits modulo the
/// power of two at or above the width, folded onto the lower half when past the width. Going
/// from width `w` to `w + 1` splits one column (`w - 2^k`, for `2^k` ≤ `w` < `2^(k+1)`) in two
/// and leaves the others as they were, so the values of column `c` at any width are among
/// those of column `column(c, narrower)` at a narrower one: a sketch widens without mixing
/// keys. Columns not yet split take twice the keys of the split ones (a count-min with up to
/// about an eighth more collisions than an even spread over the same width).
fn column(value: u64, width: u64) -> u64 {
    let above = width.next_power_of_two();
    let low = value & (above - 1);
    if low < width { low } else { low - above / 2 }
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
    fn any_width_costs_four_bytes_per_slot_and_reaches_every_column() {
        for capacity in [64u64, 1000, 25_000, 100_003] {
            let sketch = FrequencySketch::new(capacity);
            let bytes = sketch.bytes() as u64;
            // 4 bytes per slot, the doorkeeper rounded up to its last u64.
            assert!(
                (capacity * BYTES_PER_SLOT..capacity * BYTES_PER_SLOT + 8).contains(&bytes),
                "capacity {capacity}: {bytes} B"
            );
        }
        // The multiply-high spreads hashes over every column of a width that is no power of
        // two, and never past it.
        let sketch = FrequencySketch::new(1000);
        let mut seen = vec![false; 1000];
        for key in 0..50_000u64 {
            let slot = sketch.slot(key.wrapping_mul(0x2545_f491_4f6c_dd1d), 1);
            assert!((1000..2000).contains(&slot), "slot {slot} outside row 1");
            seen[slot - 1000] = true;
        }
        assert!(seen.iter().all(|&s| s), "a column never used");
    }

    /// A small deterministic generator (xorshift*), for random keys.
    fn random_keys(seed: u64, count: usize) -> Vec<u64> {
        let mut x = seed | 1;
        (0..count)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                x.wrapping_mul(0x2545_f491_4f6c_dd1d)
            })
            .collect()
    }

    #[test]
    fn a_column_holds_part_of_the_keys_of_its_column_at_any_narrower_width() {
        for (narrow, wide) in [
            (64u64, 65u64),
            (64, 128),
            (1000, 1250),
            (5000, 25_000),
            (3, 1 << 20),
        ] {
            let mut seen = vec![false; wide as usize];
            for value in random_keys(narrow * 7 + wide, 50_000)
                .into_iter()
                .map(|k| k >> 32)
                .chain([0, u64::from(u32::MAX)])
            {
                let at_wide = column(value, wide);
                assert!(at_wide < wide);
                assert_eq!(
                    column(at_wide, narrow),
                    column(value, narrow),
                    "{narrow} -> {wide}: value {value}"
                );
                seen[at_wide as usize] = true;
            }
            if wide <= 1250 {
                assert!(seen.iter().all(|&s| s), "{wide}: a column never used");
            }
        }
    }

    #[test]
    fn growing_keeps_every_estimate_as_it_was_and_never_below_the_true_count() {
        for (from, to) in [
            (1000u64, 1250u64),
            (1000, 1001),
            (5000, 16_000),
            (64, 100_000),
        ] {
            let mut sketch = FrequencySketch::new(from);
            // Skewed reads of random keys, few enough that no ageing happens (the true
            // counts are then exact reads, capped by the counters' limit).
            let keys = random_keys(from + to, (from * 2) as usize);
            let mut truth = std::collections::HashMap::new();
            let mut x = 0x1234_5678u64;
            for _ in 0..from * 8 {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                // Squared uniform: key i is read about as often as 1/sqrt(i).
                let u = (x >> 33) as f64 / (1u64 << 31) as f64;
                let key = keys[((u * u) * keys.len() as f64) as usize % keys.len()];
                sketch.record(key);
                *truth.entry(key).or_insert(0u32) += 1;
            }
            assert_eq!(sketch.epoch(), 0, "aged during the test's reads");
            let before: Vec<u8> = keys.iter().map(|&k| sketch.estimate(k)).collect();
            sketch.grow(to);
            assert_eq!(sketch.width(), to.max(WIDTH_MIN));
            assert_eq!(sketch.epoch(), 0, "growing is no ageing");
            for (key, &was) in keys.iter().zip(&before) {
                let now = sketch.estimate(*key);
                let true_count = truth
                    .get(key)
                    .copied()
                    .unwrap_or(0)
                    .min(u32::from(COUNT_MAX) + 1);
                assert!(
                    u32::from(now) >= true_count,
                    "{from} -> {to}: estimate {now} below the true count {true_count}"
                );
                // Not only close to before: the same.
                assert_eq!(now, was, "{from} -> {to}: the estimate moved");
            }
        }
    }

    #[test]
    fn a_grown_sketch_counts_on_and_ages_on_its_own_period() {
        let mut sketch = FrequencySketch::new(64);
        let key = 42u64.wrapping_mul(0x2545_f491_4f6c_dd1d);
        for _ in 0..5 {
            sketch.record(key);
        }
        sketch.grow(1000);
        assert_eq!(sketch.bytes() as u64, 1000 * BYTES_PER_SLOT);
        sketch.record(key);
        assert!(sketch.estimate(key) >= 6, "{}", sketch.estimate(key));
        // A thousand slots' period: 64 slots' worth of reads no longer ages it.
        for other in 0..64 * SAMPLE_PER_SLOT {
            sketch.record((other + 5000).wrapping_mul(0x2545_f491_4f6c_dd1d));
        }
        assert_eq!(sketch.epoch(), 0);
        // Narrower asks change nothing.
        sketch.grow(500);
        assert_eq!(sketch.width(), 1000);
    }

    #[test]
    fn counts_fade_with_age() {
        let mut sketch = FrequencySketch::new(64);
        let key = 99u64.wrapping_mul(0x2545_f491_4f6c_dd1d);
        for _ in 0..12 {
            sketch.record(key);
        }
        let before = sketch.estimate(key);
        for other in 0..64 * SAMPLE_PER_SLOT {
            sketch.record((other + 5000).wrapping_mul(0x2545_f491_4f6c_dd1d));
        }
        assert!(sketch.estimate(key) < before, "no ageing");
        assert!(sketch.epoch() >= 1, "an ageing not counted as an epoch");
    }
}
