//! The segment table of one cache device: what each segment holds and what it is worth.
//!
//! A segment is `Free` (nothing indexed in it), `Filling` (the writer appends to it; at most
//! one per device), `Sealed` (its summary and header are on the device, its blocks indexed),
//! or `Unindexed` (sealed on the device, found by the rebuild's header scan, summary not read
//! yet). Space is reused a whole segment at a time, and the segment reused is the one worth
//! least: free ones first, then unindexed, then sealed by fewest hits, the oldest among equals.
//! Hits age: every time a quarter of the device has been sealed, every count is halved, so a
//! segment hot long ago does not outlive one hot now, and a scan (blocks read once, never hit)
//! fills segments that are the first to go while the hot set's segments stay.
//!
//! Hit counts are atomics beside the table so a reader's hit costs no lock; `generation`
//! counts reuses so a reader whose read raced a reuse can tell a stale read from a bad device.

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
}

pub struct SegmentTable {
    meta: Vec<SegmentMeta>,
    hits: Box<[AtomicU64]>,
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
        };
        SegmentTable {
            meta: vec![empty; segment_count],
            hits: (0..segment_count).map(|_| AtomicU64::new(0)).collect(),
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
        };
        self.hits[segment as usize].store(hits, Ordering::Relaxed);
        self.next_sequence = self.next_sequence.max(sequence + 1);
    }

    /// A found segment's summary is now indexed (`used_bytes` of blocks).
    pub fn indexed(&mut self, segment: u32, used_bytes: u64) -> bool {
        let meta = &mut self.meta[segment as usize];
        if meta.state != SegmentState::Unindexed {
            return false;
        }
        meta.state = SegmentState::Sealed;
        meta.used_bytes = used_bytes;
        true
    }

    /// The segment to fill next: the one worth least (see the module comment). `None` only
    /// when every segment is being filled (a device of one segment, already filling).
    pub fn victim(&self) -> Option<u32> {
        let rank = |meta: &SegmentMeta, hits: u64| match meta.state {
            SegmentState::Free => Some((0u8, 0u64, 0u64)),
            SegmentState::Unindexed => Some((1, hits, meta.sequence)),
            SegmentState::Sealed => Some((2, hits, meta.sequence)),
            SegmentState::Filling => None,
        };
        (0..self.meta.len())
            .filter_map(|segment| {
                rank(
                    &self.meta[segment],
                    self.hits[segment].load(Ordering::Relaxed),
                )
                .map(|rank| (rank, segment))
            })
            .min()
            .map(|(_, segment)| segment as u32)
    }

    /// Takes `segment` for filling: it is emptied (its generation moves on, its hits reset).
    /// Returns what it was, so the caller can drop its index entries.
    pub fn start_filling(&mut self, segment: u32) -> SegmentMeta {
        let index = segment as usize;
        let before = self.meta[index];
        self.generation[index].fetch_add(1, Ordering::AcqRel);
        self.hits[index].store(0, Ordering::Relaxed);
        self.meta[index] = SegmentMeta {
            state: SegmentState::Filling,
            sequence: 0,
            entries: 0,
            used_bytes: 0,
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
        self.meta[segment as usize] = SegmentMeta {
            state: SegmentState::Free,
            sequence: 0,
            entries: 0,
            used_bytes: 0,
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
    fn free_segments_go_first_then_the_least_hit_oldest() {
        let mut table = SegmentTable::new(4);
        let mut order = Vec::new();
        for _ in 0..4 {
            let segment = table.victim().unwrap();
            table.start_filling(segment);
            table.appended(segment, 1, 4096);
            table.seal(segment);
            order.push(segment);
        }
        assert_eq!(order, vec![0, 1, 2, 3]);
        // Segment 0 is the oldest, but hit: 1 (no hits, oldest among the unhit) goes first.
        for _ in 0..10 {
            table.note_hit(0);
        }
        table.note_hit(2);
        assert_eq!(table.victim(), Some(1));
        let before = table.start_filling(1);
        assert_eq!(before.state, SegmentState::Sealed);
        assert_eq!(table.victim(), Some(3));
        assert_eq!(table.generation(1), 2);
    }

    #[test]
    fn hits_age_so_old_heat_fades() {
        let mut table = SegmentTable::new(8);
        for _ in 0..8 {
            table.note_hit(5);
        }
        for _ in 0..2 {
            let segment = table.victim().unwrap();
            table.start_filling(segment);
            table.seal(segment);
        }
        // Two of eight sealed: a quarter of the device, so every count halved once.
        assert_eq!(table.hits(5), 4);
    }
}
