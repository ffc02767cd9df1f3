//! Writes in flight on an emulated device, so a power cut can land them in part.
//!
//! A write is in flight from the moment it is submitted until it returns to its caller; only
//! then is a FUA write (or any write on a model without a volatile cache) guaranteed. A power
//! cut in that window lands a random subset of its sectors, whatever path it takes (cache, FUA,
//! straight through), as a real drive may have programmed some sectors of a transfer and not
//! others. To make that possible an entry keeps the new bytes while the write has not reached
//! the backing device (`Pending`), and the bytes it replaced once it has (`Applied`, an undo
//! image): at the cut, each sector of a pending write lands with probability 1/2, and each
//! sector of an applied write is rolled back with probability 1/2. A write that went into the
//! volatile cache is `Settled`: the cache's own tear decides its fate.
//!
//! Invariant: a sector is never rolled back under bytes a later write put there (a later write
//! marks the sectors it covers in every applied entry as kept), so a cut never brings back
//! bytes older than an acknowledged write.

use std::collections::BTreeMap;

use cairn_device::device::Device;
use rand::Rng;
use rand::rngs::SmallRng;

use super::SECTOR_BYTES;

/// Where a write in flight has got to.
#[derive(Debug)]
enum Stage {
    /// Not yet on the backing device: `data` is what it would write.
    Pending { data: Vec<u8> },
    /// On the backing device; `undo` holds the bytes it replaced, `kept[i]` is true when piece
    /// `i` has been overwritten since and must not be rolled back.
    Applied { undo: Vec<u8>, kept: Vec<bool> },
    /// In the volatile cache or dropped by a fault: nothing for the cut to do.
    Settled,
}

#[derive(Debug)]
struct Entry {
    offset: u64,
    len: u64,
    stage: Stage,
}

/// What a cut did to the writes in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InFlightTear {
    /// Writes in flight (not yet returned) at the cut.
    pub writes: u64,
    /// Sectors (or sector pieces) of those writes that are on media after the cut.
    pub sectors_landed: u64,
    /// Sectors of those writes that are not.
    pub sectors_lost: u64,
}

/// The writes in flight on one device, by id.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    entries: BTreeMap<u64, Entry>,
    next_id: u64,
}

/// Calls `f(piece_index, start, end)` for each sector-bounded piece of `[offset, offset + len)`.
fn for_each_piece(offset: u64, len: u64, mut f: impl FnMut(usize, u64, u64)) {
    let end = offset + len;
    let mut pos = offset;
    let mut index = 0;
    while pos < end {
        let piece_end = ((pos / SECTOR_BYTES + 1) * SECTOR_BYTES).min(end);
        f(index, pos, piece_end);
        index += 1;
        pos = piece_end;
    }
}

impl InFlight {
    /// Registers a write about to be performed; returns its id.
    pub(crate) fn begin(&mut self, offset: u64, bufs: &[&[u8]]) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let data = bufs.concat();
        let len = data.len() as u64;
        self.entries.insert(
            id,
            Entry {
                offset,
                len,
                stage: Stage::Pending { data },
            },
        );
        id
    }

    /// The write is going to the backing device at `target`, replacing `undo`.
    pub(crate) fn applied(&mut self, id: u64, target: u64, undo: Vec<u8>) {
        self.protect(target, undo.len() as u64);
        if let Some(entry) = self.entries.get_mut(&id) {
            let mut pieces = 0;
            for_each_piece(target, entry.len, |_, _, _| pieces += 1);
            entry.offset = target;
            entry.stage = Stage::Applied {
                undo,
                kept: vec![false; pieces],
            };
        }
    }

    /// The write went into the volatile cache (covering `[target, target + len)`) or was lost.
    pub(crate) fn settled(&mut self, id: u64, target: u64, len: u64) {
        self.protect(target, len);
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.stage = Stage::Settled;
        }
    }

    /// Forgets a write that returned; false if a cut already took it (it did not complete).
    pub(crate) fn finish(&mut self, id: u64) -> bool {
        self.entries.remove(&id).is_some()
    }

    /// Marks `[offset, offset + len)` as newer than every applied write in flight.
    fn protect(&mut self, offset: u64, len: u64) {
        let end = offset + len;
        for entry in self.entries.values_mut() {
            let Stage::Applied { kept, .. } = &mut entry.stage else {
                continue;
            };
            if entry.offset >= end || entry.offset + entry.len <= offset {
                continue;
            }
            for_each_piece(entry.offset, entry.len, |i, a, b| {
                if a < end && b > offset {
                    kept[i] = true;
                }
            });
        }
    }

    /// The power is going: lands a random subset of each write's sectors on `backing` (rolling
    /// applied ones back sector by sector), newest first, and forgets them all.
    pub(crate) fn tear(&mut self, rng: &mut SmallRng, backing: &dyn Device) -> InFlightTear {
        let mut report = InFlightTear::default();
        let entries = std::mem::take(&mut self.entries);
        for entry in entries.into_values().rev() {
            if matches!(entry.stage, Stage::Settled) {
                continue;
            }
            report.writes += 1;
            for_each_piece(entry.offset, entry.len, |i, a, b| {
                let land = rng.random_bool(0.5);
                let range = (a - entry.offset) as usize..(b - entry.offset) as usize;
                let landed = match &entry.stage {
                    // The power is going: a failed write just means the sector did not land
                    // (or was not rolled back), which the count then reports.
                    Stage::Pending { data } => land && backing.write_at(a, &data[range]).is_ok(),
                    Stage::Applied { undo, kept } => {
                        kept[i] || land || backing.write_at(a, &undo[range]).is_err()
                    }
                    Stage::Settled => true,
                };
                if landed {
                    report.sectors_landed += 1;
                } else {
                    report.sectors_lost += 1;
                }
            });
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_device::mem::MemDevice;
    use rand::SeedableRng;

    #[test]
    fn a_later_write_is_never_rolled_back() {
        let backing = MemDevice::new(1 << 20);
        let mut in_flight = InFlight::default();
        let first = in_flight.begin(0, &[&[1u8; 4096]]);
        in_flight.applied(first, 0, vec![0u8; 4096]);
        backing.write_at(0, &[1u8; 4096]).unwrap();
        // A newer write over the second half completes while the first is still in flight.
        let second = in_flight.begin(2048, &[&[2u8; 2048]]);
        in_flight.applied(second, 2048, vec![1u8; 2048]);
        backing.write_at(2048, &[2u8; 2048]).unwrap();
        assert!(in_flight.finish(second));
        for seed in 0..16 {
            let mut copy = InFlight::default();
            let id = copy.begin(0, &[&[1u8; 4096]]);
            copy.applied(id, 0, vec![0u8; 4096]);
            copy.protect(2048, 2048);
            let device = MemDevice::new(1 << 20);
            device.write_at(0, &[1u8; 2048]).unwrap();
            device.write_at(2048, &[2u8; 2048]).unwrap();
            let report = copy.tear(&mut SmallRng::seed_from_u64(seed), &device);
            assert_eq!(report.writes, 1);
            let mut back = vec![0u8; 4096];
            device.read_at(0, &mut back).unwrap();
            assert!(back[2048..].iter().all(|&b| b == 2), "seed {seed}");
            for sector in back[..2048].chunks(512) {
                assert!(sector.iter().all(|&b| b == 0) || sector.iter().all(|&b| b == 1));
            }
        }
        assert!(in_flight.finish(first));
        assert!(!in_flight.finish(first), "finished once");
    }
}
