//! The data of an emulated volatile write cache: acknowledged writes that live only in memory.
//!
//! Entries are kept disjoint: a new write trims (or splits) whatever older entries it overlaps,
//! keeping their age. So a read overlays entries in any order, and destaging any entry early, in
//! any order, can never put older bytes over newer ones on the backing device: every subset of
//! entries that reaches the backing is a state the real drive could have left behind.
//!
//! Invariants: entries never overlap; `bytes` is the sum of entry lengths; `by_age` holds exactly
//! one `(seq, offset)` per entry.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug)]
struct Entry {
    seq: u64,
    data: Vec<u8>,
}

/// An acknowledged write not yet on the backing device.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) seq: u64,
    pub(crate) offset: u64,
    pub(crate) data: Vec<u8>,
}

#[derive(Debug, Default)]
pub(crate) struct WriteCache {
    by_offset: BTreeMap<u64, Entry>,
    by_age: BTreeSet<(u64, u64)>,
    next_seq: u64,
    bytes: u64,
}

impl WriteCache {
    pub(crate) fn len(&self) -> usize {
        self.by_offset.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_offset.is_empty()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    fn add(&mut self, seq: u64, offset: u64, data: Vec<u8>) {
        self.bytes += data.len() as u64;
        self.by_age.insert((seq, offset));
        let previous = self.by_offset.insert(offset, Entry { seq, data });
        debug_assert!(previous.is_none(), "cache entries are disjoint");
    }

    fn remove_at(&mut self, offset: u64) -> Option<Pending> {
        let entry = self.by_offset.remove(&offset)?;
        self.by_age.remove(&(entry.seq, offset));
        self.bytes -= entry.data.len() as u64;
        Some(Pending {
            seq: entry.seq,
            offset,
            data: entry.data,
        })
    }

    /// Records a new write (newest), superseding any cached bytes it overlaps.
    pub(crate) fn insert(&mut self, offset: u64, data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        self.trim(offset, data.len() as u64);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.add(seq, offset, data);
    }

    /// Forgets cached bytes in `[offset, offset + len)`; entries straddling the edges keep the
    /// parts outside.
    pub(crate) fn trim(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        let mut hits = Vec::new();
        if let Some((&start, entry)) = self.by_offset.range(..offset).next_back()
            && start + entry.data.len() as u64 > offset
        {
            hits.push(start);
        }
        hits.extend(self.by_offset.range(offset..end).map(|(&start, _)| start));
        for start in hits {
            let Some(p) = self.remove_at(start) else {
                continue;
            };
            let p_end = start + p.data.len() as u64;
            if start < offset {
                self.add(p.seq, start, p.data[..(offset - start) as usize].to_vec());
            }
            if p_end > end {
                self.add(p.seq, end, p.data[(end - start) as usize..].to_vec());
            }
        }
    }

    /// Copies cached bytes over `bufs`, which hold the backing device's bytes from `offset`.
    pub(crate) fn overlay(&self, offset: u64, bufs: &mut [&mut [u8]]) {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let end = offset + len;
        let first = self
            .by_offset
            .range(..=offset)
            .next_back()
            .map_or(offset, |(&start, _)| start);
        for (&start, entry) in self.by_offset.range(first..end) {
            let a = start.max(offset);
            let b = (start + entry.data.len() as u64).min(end);
            if a >= b {
                continue;
            }
            let src = &entry.data[(a - start) as usize..(b - start) as usize];
            scatter(bufs, (a - offset) as usize, src);
        }
    }

    pub(crate) fn pop_oldest(&mut self) -> Option<Pending> {
        let &(_, offset) = self.by_age.first()?;
        self.remove_at(offset)
    }

    /// Removes the `n`-th oldest entry.
    pub(crate) fn remove_nth(&mut self, n: usize) -> Option<Pending> {
        let &(_, offset) = self.by_age.iter().nth(n)?;
        self.remove_at(offset)
    }

    /// Puts back an entry taken out by `pop_oldest` (after a failed destage).
    pub(crate) fn restore(&mut self, pending: Pending) {
        self.trim(pending.offset, pending.data.len() as u64);
        self.add(pending.seq, pending.offset, pending.data);
    }

    /// Removes everything, oldest first.
    pub(crate) fn drain(&mut self) -> Vec<Pending> {
        let mut all = Vec::with_capacity(self.len());
        while let Some(p) = self.pop_oldest() {
            all.push(p);
        }
        all
    }
}

/// Copies `src` into the concatenation of `bufs`, starting `pos` bytes in.
pub(crate) fn scatter(bufs: &mut [&mut [u8]], mut pos: usize, mut src: &[u8]) {
    for buf in bufs.iter_mut() {
        if src.is_empty() {
            return;
        }
        if pos >= buf.len() {
            pos -= buf.len();
            continue;
        }
        let n = (buf.len() - pos).min(src.len());
        buf[pos..pos + n].copy_from_slice(&src[..n]);
        src = &src[n..];
        pos = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(cache: &WriteCache, offset: u64, len: usize, split: usize) -> Vec<u8> {
        let mut a = vec![0u8; split];
        let mut b = vec![0u8; len - split];
        cache.overlay(offset, &mut [&mut a, &mut b]);
        a.extend(b);
        a
    }

    #[test]
    fn newer_writes_supersede_and_split_older_ones() {
        let mut cache = WriteCache::default();
        cache.insert(100, vec![1; 100]); // [100, 200)
        cache.insert(150, vec![2; 10]); // splits it
        cache.insert(90, vec![3; 20]); // trims its head
        assert_eq!(cache.len(), 4);
        assert_eq!(cache.bytes(), 20 + 40 + 10 + 40);
        let got = read(&cache, 80, 130, 33);
        let mut want = vec![0u8; 10];
        want.extend([3; 20]);
        want.extend([1; 40]);
        want.extend([2; 10]);
        want.extend([1; 40]);
        want.extend([0; 10]);
        assert_eq!(got, want);
        // Age order: the pieces of the first write are oldest.
        assert_eq!(cache.pop_oldest().unwrap().seq, 0);
        assert_eq!(cache.pop_oldest().unwrap().seq, 0);
        assert_eq!(cache.pop_oldest().unwrap().seq, 1);
        assert_eq!(cache.pop_oldest().unwrap().seq, 2);
        assert!(cache.is_empty());
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn trim_removes_a_range() {
        let mut cache = WriteCache::default();
        cache.insert(0, vec![7; 4096]);
        cache.trim(1000, 1000);
        assert_eq!(cache.bytes(), 4096 - 1000);
        let got = read(&cache, 0, 4096, 1500);
        assert!(got[..1000].iter().all(|&b| b == 7));
        assert!(got[1000..2000].iter().all(|&b| b == 0));
        assert!(got[2000..].iter().all(|&b| b == 7));
    }
}
