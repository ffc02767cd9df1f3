//! The segment table of one cache device: what each segment holds and what it is worth.
//!
//! A segment is `Free` (nothing indexed in it), `Filling` (the writer appends to it; at most
//! one per device), `Sealed` (its summary and header are on the device, its blocks indexed),
//! or `Unindexed` (sealed on the device, found by the rebuild's header scan, summary not read
//! yet). Space is reused a whole segment at a time, and the segment reused is the one worth
//! least: free ones first, then unindexed (fewest hits first), then sealed by least *value*,
//! the oldest among equals.
//!
//! A sealed segment's value is the sum of the frequencies of its blocks that are still indexed
//! and not promoted (see `index`): a block read into RAM since it was written, or dropped,
//! is worth nothing here, so a segment whose blocks went up to RAM is the first to be reused
//! (its space held duplicates), one full of blocks read often lately the last. Frequencies
//! come from the RAM tier's sketch, which halves its counts every so often (its *epoch*
//! moves on): each segment remembers the epoch it was filled in, and its value (and each of its
//! blocks' frequencies) counts halved once per epoch since, so blocks here and blocks offered
//! now are compared on one scale, and a segment hot long ago does not outlive one hot now.
//!
//! Hits (reads served from a segment) are counted too, and halved every time a quarter of the
//! device has been sealed: they are persisted in the segment's header and order the rebuild
//! after a restart (most hit first), and rank unindexed segments.
//!
//! Hit counts and values are atomics beside the table so a reader's hit costs no lock;
//! `generation` counts reuses so a reader whose read raced a reuse can tell a stale read from a
//! bad device.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentState {
    Free,
    Filling,
    Sealed,
    Unindexed,
}

#[derive(Debug, Clone, Copy)]
pub struct SegmentMeta {
    pub state: SegmentState,
    /// Sealing order on this device (0 for never sealed).
    pub sequence: u64,
    /// Blocks and bytes written into it.
    pub entries: u32,
    pub used_bytes: u64,
    /// The RAM tier's sketch epoch when the segment was taken for filling.
    pub epoch: u64,
}

/// `value` (on the scale of `from` epoch) as counted at epoch `now`: halved once per epoch.
pub fn aged(value: u64, from: u64, now: u64) -> u64 {
    let shift = now.saturating_sub(from);
    if shift >= 64 { 0 } else { value >> shift }
}

pub struct SegmentTable {
    meta: Vec<SegmentMeta>,
    hits: Box<[AtomicU64]>,
    /// Sum of the frequencies of the live, not promoted blocks (on the segment's epoch scale).
    value: Box<[AtomicU64]>,
    generation: Box<[AtomicU64]>,
    /// Segments sealed since hits were last halved.
    sealed_since_decay: usize,
    next_sequence: u64,
}

impl SegmentTable {
    pub fn new(segment_count: usize) -> SegmentTable {
        let empty = SegmentMeta {
            state: SegmentState::Free,
            sequence: 0,
            entries: 0,
            used_bytes: 0,
            epoch: 0,
        };
        SegmentTable {
            meta: vec![empty; segment_count],
            hits: (0..segment_count).map(|_| AtomicU64::new(0)).collect(),
            value: (0..segment_count).map(|_| AtomicU64::new(0)).collect(),
            generation: (0..segment_count).map(|_| AtomicU64::new(0)).collect(),
            sealed_since_decay: 0,
            next_sequence: 1,
        }
    }

    pub fn len(&self) -> usize {
        self.meta.len()
    }

    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    pub fn meta(&self, segment: u32) -> SegmentMeta {
        self.meta[segment as usize]
    }

    pub fn hits(&self, segment: u32) -> u64 {
        self.hits[segment as usize].load(Ordering::Relaxed)
    }

    pub fn note_hit(&self, segment: u32) {
        self.hits[segment as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The segment's value as counted at epoch `now`.
    pub fn value(&self, segment: u32, now: u64) -> u64 {
        aged(
            self.value[segment as usize].load(Ordering::Relaxed),
            self.meta[segment as usize].epoch,
            now,
        )
    }

    /// A block of the segment gained `frequency` of value (written, offered again, read).
    pub fn add_value(&self, segment: u32, frequency: u64) {
        self.value[segment as usize].fetch_add(frequency, Ordering::Relaxed);
    }

    /// A block of the segment lost `frequency` of value (promoted to RAM, dropped).
    pub fn sub_value(&self, segment: u32, frequency: u64) {
        // A reuse racing a reader may have reset the value already: never below 0.
        let _ = self.value[segment as usize].fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |value| Some(value.saturating_sub(frequency)),
        );
    }

    pub fn generation(&self, segment: u32) -> u64 {
        self.generation[segment as usize].load(Ordering::Acquire)
    }

    /// Bytes held in sealed, unindexed and filling segments.
    pub fn used_bytes(&self) -> u64 {
        self.meta
            .iter()
            .filter(|meta| meta.state != SegmentState::Free)
            .map(|meta| meta.used_bytes)
            .sum()
    }

    pub fn count(&self, state: SegmentState) -> usize {
        self.meta.iter().filter(|meta| meta.state == state).count()
    }

    /// Records a sealed segment found on the device at open (its summary not read yet).
    pub fn found_sealed(&mut self, segment: u32, sequence: u64, hits: u64, entries: u32) {
        let meta = &mut self.meta[segment as usize];
        *meta = SegmentMeta {
            state: SegmentState::Unindexed,
            sequence,
            entries,
            used_bytes: 0,
            epoch: 0,
        };
        self.hits[segment as usize].store(hits, Ordering::Relaxed);
        self.value[segment as usize].store(0, Ordering::Relaxed);
        self.next_sequence = self.next_sequence.max(sequence + 1);
    }

    /// A found segment's summary is now indexed (`used_bytes` of blocks, worth `value`, at
    /// epoch `now`).
    pub fn indexed(&mut self, segment: u32, used_bytes: u64, value: u64, now: u64) -> bool {
        let meta = &mut self.meta[segment as usize];
        if meta.state != SegmentState::Unindexed {
            return false;
        }
        meta.state = SegmentState::Sealed;
        meta.used_bytes = used_bytes;
        meta.epoch = now;
        self.value[segment as usize].store(value, Ordering::Relaxed);
        true
    }

    /// The segment to fill next at epoch `now`: the one worth least (see the module
    /// comment). `None` only when every segment is being filled (a device of one segment,
    /// already filling).
    pub fn victim(&self, now: u64) -> Option<u32> {
        (0..self.meta.len())
            .filter_map(|segment| {
                let meta = &self.meta[segment];
                let rank = match meta.state {
                    SegmentState::Free => (0u8, 0u64, 0u64),
                    SegmentState::Unindexed => {
                        (1, self.hits[segment].load(Ordering::Relaxed), meta.sequence)
                    }
                    SegmentState::Sealed => (2, self.value(segment as u32, now), meta.sequence),
                    SegmentState::Filling => return None,
                };
                Some((rank, segment))
            })
            .min()
            .map(|(_, segment)| segment as u32)
    }

    /// Takes `segment` for filling at epoch `now`: it is emptied (its generation moves on,
    /// its hits and value reset). Returns what it was, so the caller can drop its index
    /// entries.
    pub fn start_filling(&mut self, segment: u32, now: u64) -> SegmentMeta {
        let index = segment as usize;
        let before = self.meta[index];
        self.generation[index].fetch_add(1, Ordering::AcqRel);
        self.hits[index].store(0, Ordering::Relaxed);
        self.value[index].store(0, Ordering::Relaxed);
        self.meta[index] = SegmentMeta {
            state: SegmentState::Filling,
            sequence: 0,
            entries: 0,
            used_bytes: 0,
            epoch: now,
        };
        before
    }

    /// Blocks were appended to the filling `segment`.
    pub fn appended(&mut self, segment: u32, blocks: u32, bytes: u64) {
        let meta = &mut self.meta[segment as usize];
        assert_eq!(
            meta.state,
            SegmentState::Filling,
            "append to a segment not filling"
        );
        meta.entries += blocks;
        meta.used_bytes += bytes;
    }

    /// The filling `segment` is sealed on the device; returns its sequence number.
    pub fn seal(&mut self, segment: u32) -> u64 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let meta = &mut self.meta[segment as usize];
        meta.state = SegmentState::Sealed;
        meta.sequence = sequence;
        self.sealed_since_decay += 1;
        if self.sealed_since_decay * 4 >= self.meta.len().max(4) {
            self.sealed_since_decay = 0;
            for hits in self.hits.iter() {
                let now = hits.load(Ordering::Relaxed);
                hits.store(now / 2, Ordering::Relaxed);
            }
        }
        sequence
    }

    /// A filling segment that could not be written is given up: free again.
    pub fn abandon(&mut self, segment: u32) {
        self.generation[segment as usize].fetch_add(1, Ordering::AcqRel);
        self.value[segment as usize].store(0, Ordering::Relaxed);
        self.meta[segment as usize] = SegmentMeta {
            state: SegmentState::Free,
            sequence: 0,
            entries: 0,
            used_bytes: 0,
            epoch: 0,
        };
    }

    /// The next sequence number a seal will use (tests, rebuild).
    pub fn next_sequence(&self) -> u64 {
        self.next_sequence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_segments_go_first_then_the_least_valued_oldest() {
        let mut table = SegmentTable::new(4);
        let mut order = Vec::new();
        for _ in 0..4 {
            let segment = table.victim(0).unwrap();
            table.start_filling(segment, 0);
            table.appended(segment, 3, 4096);
            table.add_value(segment, 3);
            table.seal(segment);
            order.push(segment);
        }
        assert_eq!(order, vec![0, 1, 2, 3]);
        // Segment 0 is the oldest, but valued: 1 (oldest among the least valued) goes first.
        table.add_value(0, 10);
        table.add_value(2, 1);
        assert_eq!(table.victim(0), Some(1));
        // Its blocks went up to RAM: segment 3 is worth least now.
        table.sub_value(3, 3);
        assert_eq!(table.victim(0), Some(3));
        table.sub_value(3, 100);
        assert_eq!(table.value(3, 0), 0, "a value never goes below 0");
        let before = table.start_filling(3, 0);
        assert_eq!(before.state, SegmentState::Sealed);
        assert_eq!(table.victim(0), Some(1));
        assert_eq!(table.generation(3), 2);
    }

    #[test]
    fn values_halve_per_epoch_so_old_heat_fades() {
        let mut table = SegmentTable::new(3);
        table.start_filling(0, 0);
        table.add_value(0, 40);
        table.seal(0);
        table.start_filling(1, 2);
        table.add_value(1, 12);
        table.seal(1);
        // At epoch 2, segment 0 counts 40 / 4 = 10 < 12.
        assert_eq!(table.value(0, 2), 10);
        assert_eq!(table.value(1, 2), 12);
        assert_eq!(table.victim(2), Some(2), "free first");
        table.start_filling(2, 2);
        assert_eq!(table.victim(2), Some(0));
        assert_eq!(table.victim(1), Some(1), "at epoch 1, 0 counts 20");
        assert_eq!(aged(5, 3, 200), 0);
    }

    #[test]
    fn hits_age_so_old_heat_fades() {
        let mut table = SegmentTable::new(8);
        for _ in 0..8 {
            table.note_hit(5);
        }
        for _ in 0..2 {
            let segment = table.victim(0).unwrap();
            table.start_filling(segment, 0);
            table.seal(segment);
        }
        // Two of eight sealed: a quarter of the device, so every count halved once.
        assert_eq!(table.hits(5), 4);
    }
}
