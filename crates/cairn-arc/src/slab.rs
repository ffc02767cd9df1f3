//! `Slab`: the policy's entries in fixed-size chunks. A `Vec` grows by doubling, so at its worst
//! it holds twice the memory its entries need — for a cache of millions of blocks that headroom
//! would cost more than the entries' own bytes over the 64-byte-per-block target. Chunks of
//! `CHUNK_ENTRIES` never move and never double: the slack is at most one chunk.

use std::ops::{Index, IndexMut};

/// Entries per chunk (a chunk of 48-byte entries is 192 KiB: mapped on its own by the
/// allocator, and returned to the kernel when freed).
const CHUNK_ENTRIES: usize = 4096;

pub struct Slab<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Slab<T> {
    pub fn new() -> Slab<T> {
        Slab {
            chunks: Vec::new(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Entries the allocated chunks can hold.
    pub fn capacity(&self) -> usize {
        self.chunks.len() * CHUNK_ENTRIES
    }

    pub fn push(&mut self, value: T) {
        if self.len == self.capacity() {
            self.chunks.push(Vec::with_capacity(CHUNK_ENTRIES));
        }
        let chunk = self.chunks.last_mut().expect("a chunk with room");
        debug_assert!(chunk.len() < CHUNK_ENTRIES);
        chunk.push(value);
        self.len += 1;
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }
}

impl<T> Index<usize> for Slab<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        &self.chunks[index / CHUNK_ENTRIES][index % CHUNK_ENTRIES]
    }
}

impl<T> IndexMut<usize> for Slab<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        &mut self.chunks[index / CHUNK_ENTRIES][index % CHUNK_ENTRIES]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stay_where_they_were_put_and_slack_is_one_chunk_at_most() {
        let mut slab = Slab::new();
        for i in 0..(3 * CHUNK_ENTRIES + 5) {
            slab.push(i as u64 * 7);
            assert!(slab.capacity() - slab.len() < CHUNK_ENTRIES);
        }
        assert_eq!(slab.len(), 3 * CHUNK_ENTRIES + 5);
        assert_eq!(slab[CHUNK_ENTRIES + 3], (CHUNK_ENTRIES as u64 + 3) * 7);
        slab[2 * CHUNK_ENTRIES] = 1;
        assert_eq!(slab[2 * CHUNK_ENTRIES], 1);
        assert_eq!(slab.iter().count(), slab.len());
        assert_eq!(slab.iter().nth(5), Some(&35));
    }
}
