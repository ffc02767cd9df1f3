//! Mechanics of a 7200 rpm SATA disk with a volatile write cache, in virtual nanoseconds.
//!
//! Geometry. The emulated device occupies the outermost part of a platter of
//! `max(device size, PLATTER_BYTES_MIN)` bytes (the seeds' disk was 500 GB), as a small
//! partition of a real disk would: random I/O inside a few GiB is short-stroked (track-to-track
//! seeks), a 128 GiB volume sees multi-millisecond seeks, a device the size of the platter sees
//! the full curve. The platter has `ZONES` zones whose media rate falls linearly from 150 MB/s
//! (outer) to 80 MB/s (inner); a track holds `rate x revolution` bytes. A byte's angular position
//! is the fractional part of "tracks before it", so contiguous data passes under the head
//! continuously, also across track and zone boundaries (track skew hides head switches).
//!
//! Timing of a mechanical access from head position `h` at time `t` to offset `o`:
//! `seek(h, o)` (0 on the same track, else 0.5 ms + 14.5 ms x sqrt(distance / full stroke):
//! 0.5 ms track-to-track, ~8 ms on average over the whole platter, 15 ms full stroke), then wait
//! until `o` rotates under the head, then transfer at the zone's media rate.
//!
//! Write cache. A write is acknowledged once it crossed the interface (command overhead +
//! length / 300 MB/s) into the cache. The mechanism destages cached writes whenever it is idle,
//! in elevator order, merging contiguous entries (up to `DESTAGE_MAX_BYTES`), so a sequential
//! stream reaches the platter at media rate with no seek or rotational wait. When the cache is
//! full a write waits for space. A flush waits until every cached write is on the platter (and,
//! being a non-queued command, holds up the interface until then); a FUA write only waits until
//! its own data has been destaged, and later commands queue behind nothing. This
//! reproduces the seeds' figures: write+flush at QD1 costs about one revolution (the head has
//! just passed the next sector when the next write arrives: ~118 IOPS), writes without flushes
//! are interface-bound (~10,000 IOPS of 8 KiB), large sequential writes run at media speed.
//!
//! Reads are served from the write cache if it covers them, from the read-ahead buffer (after a
//! read the drive keeps reading the following `READAHEAD_BYTES` while idle), or mechanically;
//! reads go before queued destages but wait for the one in progress.
//!
//! Everything here is lazily evaluated: background work that would have happened before an
//! arrival is replayed when the arrival is processed (`advance`). Requests must be submitted in
//! nondecreasing arrival order for the figures to mean anything; out-of-order arrivals are
//! treated as arriving at the latest time seen.

use std::collections::BTreeMap;

/// One revolution at 7200 rpm, in nanoseconds.
pub(crate) const REVOLUTION_NS: f64 = 60e9 / 7200.0;
/// The emulated device is placed on a platter at least this large.
pub(crate) const PLATTER_BYTES_MIN: u64 = 500_000_000_000;
const ZONES: usize = 16;
const MEDIA_BYTES_PER_S_OUTER: f64 = 150e6;
const MEDIA_BYTES_PER_S_INNER: f64 = 80e6;
const SEEK_TRACK_TO_TRACK_NS: f64 = 500_000.0;
const SEEK_FULL_STROKE_NS: f64 = 15_000_000.0;
const INTERFACE_BYTES_PER_S: u64 = 300_000_000;
/// Command processing per request (SATA round trip and firmware).
const COMMAND_OVERHEAD_NS: u64 = 75_000;
/// Extra cost of a FLUSH CACHE command once the cache is empty.
const FLUSH_OVERHEAD_NS: u64 = 50_000;
/// Write cache size (the seeds' 500 GB SATA disk had 16 MiB).
pub(crate) const CACHE_BYTES: u64 = 16 << 20;
/// Largest single destage of merged contiguous cache entries.
const DESTAGE_MAX_BYTES: u64 = 1 << 20;
/// How far the drive reads ahead after a read while it has nothing else to do.
const READAHEAD_BYTES: u64 = 1 << 20;
/// Angular tolerance: a target this close to the head counts as "under the head" (~8 ns).
const ANGLE_EPSILON: f64 = 1e-6;

fn transfer_ns(len: u64, bytes_per_s: u64) -> u64 {
    (len as u128 * 1_000_000_000 / bytes_per_s as u128) as u64
}

/// Zoned platter geometry: maps byte offsets to (fractional) track numbers.
#[derive(Clone, Debug)]
struct Geometry {
    zone_bytes: u64,
    zone_track_bytes: [f64; ZONES],
    /// Tracks before the start of each zone; the last entry is the total.
    zone_first_track: [f64; ZONES + 1],
}

impl Geometry {
    fn new(device_size_bytes: u64) -> Geometry {
        let platter_bytes = device_size_bytes.max(PLATTER_BYTES_MIN);
        let zone_bytes = platter_bytes.div_ceil(ZONES as u64);
        let mut zone_track_bytes = [0.0; ZONES];
        let mut zone_first_track = [0.0; ZONES + 1];
        for z in 0..ZONES {
            let fraction = z as f64 / (ZONES - 1) as f64;
            let rate = MEDIA_BYTES_PER_S_OUTER
                - (MEDIA_BYTES_PER_S_OUTER - MEDIA_BYTES_PER_S_INNER) * fraction;
            zone_track_bytes[z] = rate * REVOLUTION_NS / 1e9;
            zone_first_track[z + 1] = zone_first_track[z] + zone_bytes as f64 / zone_track_bytes[z];
        }
        Geometry {
            zone_bytes,
            zone_track_bytes,
            zone_first_track,
        }
    }

    fn total_tracks(&self) -> f64 {
        self.zone_first_track[ZONES]
    }

    /// Fractional number of tracks before `offset`.
    fn tracks_before(&self, offset: u64) -> f64 {
        let zone = ((offset / self.zone_bytes) as usize).min(ZONES - 1);
        let in_zone = offset - zone as u64 * self.zone_bytes;
        self.zone_first_track[zone] + in_zone as f64 / self.zone_track_bytes[zone]
    }

    /// Inverse of `tracks_before`.
    fn offset_at_tracks(&self, tracks: f64) -> u64 {
        let zone = (0..ZONES)
            .rev()
            .find(|&z| self.zone_first_track[z] <= tracks)
            .unwrap_or(0);
        let in_zone = (tracks - self.zone_first_track[zone]) * self.zone_track_bytes[zone];
        zone as u64 * self.zone_bytes + in_zone.max(0.0) as u64
    }

    /// Angular position of `offset`, in revolutions [0, 1).
    fn angle(&self, offset: u64) -> f64 {
        self.tracks_before(offset).fract()
    }

    /// Media time to pass `[start, end)` under the head.
    fn media_ns(&self, start: u64, end: u64) -> u64 {
        ((self.tracks_before(end) - self.tracks_before(start)) * REVOLUTION_NS).round() as u64
    }

    fn seek_ns(&self, from: u64, to: u64) -> u64 {
        let (a, b) = (self.tracks_before(from), self.tracks_before(to));
        if a.floor() == b.floor() {
            return 0;
        }
        let distance = (a - b).abs() / self.total_tracks();
        (SEEK_TRACK_TO_TRACK_NS + (SEEK_FULL_STROKE_NS - SEEK_TRACK_TO_TRACK_NS) * distance.sqrt())
            .round() as u64
    }

    /// Time from `now_ns` (head over `head`) until `target` starts passing under the head.
    fn position_ns(&self, head: u64, now_ns: u64, target: u64) -> u64 {
        let seek = self.seek_ns(head, target);
        let arrive_ns = now_ns + seek;
        let head_angle = (arrive_ns as f64 / REVOLUTION_NS).fract();
        let mut wait = (self.angle(target) - head_angle).rem_euclid(1.0);
        if !(ANGLE_EPSILON..=1.0 - ANGLE_EPSILON).contains(&wait) {
            wait = 0.0;
        }
        seek + (wait * REVOLUTION_NS).round() as u64
    }
}

#[derive(Clone, Copy, Debug)]
struct CachedWrite {
    offset: u64,
    len: u64,
    ready_ns: u64,
}

/// Data the drive read ahead after a read: `[start, limit)`, streaming from `start_ns`.
#[derive(Clone, Copy, Debug)]
struct ReadAhead {
    start: u64,
    start_ns: u64,
    limit: u64,
    streaming: bool,
}

/// The disk's mechanical and cache state.
#[derive(Debug)]
pub(crate) struct Hdd {
    geometry: Geometry,
    size_bytes: u64,
    /// Where the head rests when idle (end of the last transfer).
    head_offset: u64,
    /// When the mechanism finishes its current (or last) transfer.
    mech_free_ns: u64,
    /// When the interface can take the next command.
    iface_free_ns: u64,
    /// Cached writes by (offset, seq) and by seq (= arrival order = ready order).
    by_offset: BTreeMap<(u64, u64), u64>,
    by_seq: BTreeMap<u64, CachedWrite>,
    cached_bytes: u64,
    next_seq: u64,
    readahead: Option<ReadAhead>,
}

impl Hdd {
    pub(crate) fn new(size_bytes: u64) -> Hdd {
        Hdd {
            geometry: Geometry::new(size_bytes),
            size_bytes,
            head_offset: 0,
            mech_free_ns: 0,
            iface_free_ns: 0,
            by_offset: BTreeMap::new(),
            by_seq: BTreeMap::new(),
            cached_bytes: 0,
            next_seq: 0,
            readahead: None,
        }
    }

    /// Where the read-ahead stream has got to at `t`.
    fn readahead_pos(&self, ra: &ReadAhead, t: u64) -> u64 {
        if !ra.streaming || t <= ra.start_ns {
            return if ra.streaming { ra.start } else { ra.limit };
        }
        let tracks =
            self.geometry.tracks_before(ra.start) + (t - ra.start_ns) as f64 / REVOLUTION_NS;
        self.geometry.offset_at_tracks(tracks).min(ra.limit)
    }

    /// The mechanism starts other work at `t`: the read-ahead stream stops where it got to.
    fn stop_readahead(&mut self, t: u64) {
        if let Some(ra) = self.readahead
            && ra.streaming
        {
            let pos = self.readahead_pos(&ra, t);
            self.head_offset = pos;
            self.readahead = Some(ReadAhead {
                limit: pos,
                streaming: false,
                ..ra
            });
        }
    }

    /// Destages the next batch of cached writes if the mechanism can start it before
    /// `before_ns` (or unconditionally when `None`). Returns when the batch is on the platter.
    fn destage_next(&mut self, before_ns: Option<u64>) -> Option<u64> {
        let oldest = *self.by_seq.values().next()?;
        let start_ns = self.mech_free_ns.max(oldest.ready_ns);
        if before_ns.is_some_and(|limit| start_ns >= limit) {
            return None;
        }
        self.stop_readahead(start_ns);
        let head = self.head_offset;
        // Elevator: the first ready entry at or after the head, else the lowest ready one.
        let ready = |seq: &u64, by_seq: &BTreeMap<u64, CachedWrite>| {
            by_seq.get(seq).is_some_and(|w| w.ready_ns <= start_ns)
        };
        let first = self
            .by_offset
            .range((head, 0)..)
            .chain(self.by_offset.range(..(head, 0)))
            .map(|(&(_, seq), _)| seq)
            .find(|seq| ready(seq, &self.by_seq))
            .expect("the oldest entry is ready");
        let mut batch = vec![first];
        let first_write = self.by_seq[&first];
        let mut end = first_write.offset + first_write.len;
        while end - first_write.offset < DESTAGE_MAX_BYTES {
            let next = self
                .by_offset
                .range((end, 0)..(end, u64::MAX))
                .map(|(&(_, seq), _)| seq)
                .find(|seq| ready(seq, &self.by_seq) && !batch.contains(seq));
            let Some(seq) = next else {
                break;
            };
            end += self.by_seq[&seq].len;
            batch.push(seq);
        }
        for seq in batch {
            let w = self.by_seq.remove(&seq).expect("batch entries are cached");
            self.by_offset.remove(&(w.offset, seq));
            self.cached_bytes -= w.len;
        }
        let begin_ns = start_ns
            + self
                .geometry
                .position_ns(head, start_ns, first_write.offset);
        let done_ns = begin_ns + self.geometry.media_ns(first_write.offset, end);
        self.mech_free_ns = done_ns;
        self.head_offset = end;
        Some(done_ns)
    }

    /// Replays background destaging that would have started before `t`.
    fn advance(&mut self, t: u64) {
        while self.destage_next(Some(t)).is_some() {}
    }

    /// A mechanical transfer of `[offset, offset+len)` starting no earlier than `not_before`.
    fn mechanical(&mut self, not_before: u64, offset: u64, len: u64) -> u64 {
        let start_ns = not_before.max(self.mech_free_ns);
        self.stop_readahead(start_ns);
        let begin_ns = start_ns
            + self
                .geometry
                .position_ns(self.head_offset, start_ns, offset);
        let end = offset + len;
        let done_ns = begin_ns + self.geometry.media_ns(offset, end);
        self.mech_free_ns = done_ns;
        self.head_offset = end;
        done_ns
    }

    fn cache_covers(&self, offset: u64, len: u64) -> bool {
        let end = offset + len;
        let mut covered_to = offset;
        // Entries are sorted by offset: sweep those starting before `end`.
        for (&(start, seq), _) in self.by_offset.range(..(end, 0)) {
            let w_end = start + self.by_seq[&seq].len;
            if start > covered_to {
                if w_end > offset {
                    return false;
                }
                continue;
            }
            covered_to = covered_to.max(w_end);
            if covered_to >= end {
                return true;
            }
        }
        covered_to >= end
    }

    pub(crate) fn read(&mut self, t: u64, offset: u64, len: u64) -> u64 {
        self.advance(t);
        let iface_ns = COMMAND_OVERHEAD_NS + transfer_ns(len, INTERFACE_BYTES_PER_S);
        if len > 0 && self.cache_covers(offset, len) {
            let done_ns = t.max(self.iface_free_ns) + iface_ns;
            self.iface_free_ns = done_ns;
            return done_ns;
        }
        if let Some(ra) = self.readahead
            && offset >= ra.start
            && offset + len <= ra.limit
        {
            let ready_ns = if ra.streaming {
                ra.start_ns + self.geometry.media_ns(ra.start, offset + len)
            } else {
                0
            };
            let still_streaming = ra.streaming && self.readahead_pos(&ra, t) < ra.limit;
            if still_streaming {
                self.readahead = Some(ReadAhead {
                    limit: (offset + len + READAHEAD_BYTES).min(self.size_bytes),
                    ..ra
                });
            }
            return (t + iface_ns).max(ready_ns);
        }
        let done_ns = self.mechanical(t + COMMAND_OVERHEAD_NS, offset, len);
        let end = offset + len;
        self.readahead = Some(ReadAhead {
            start: end,
            start_ns: done_ns,
            limit: (end + READAHEAD_BYTES).min(self.size_bytes),
            streaming: true,
        });
        done_ns
    }

    pub(crate) fn write(&mut self, t: u64, offset: u64, len: u64) -> u64 {
        if len == 0 {
            return self.command(t);
        }
        self.advance(t);
        if let Some(ra) = self.readahead
            && offset < ra.limit
            && offset + len > ra.start
        {
            self.stop_readahead(t);
            self.readahead = None;
        }
        let iface_done_ns = t.max(self.iface_free_ns)
            + COMMAND_OVERHEAD_NS
            + transfer_ns(len, INTERFACE_BYTES_PER_S);
        if len > CACHE_BYTES {
            // Too big to cache: write through once everything before it is on the platter.
            while self.destage_next(None).is_some() {}
            let done_ns = self.mechanical(iface_done_ns, offset, len);
            self.iface_free_ns = done_ns;
            return done_ns;
        }
        let mut ready_ns = iface_done_ns;
        while self.cached_bytes + len > CACHE_BYTES {
            match self.destage_next(None) {
                Some(space_ns) => ready_ns = ready_ns.max(space_ns),
                None => break,
            }
        }
        self.iface_free_ns = ready_ns;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.by_offset.insert((offset, seq), len);
        self.by_seq.insert(
            seq,
            CachedWrite {
                offset,
                len,
                ready_ns,
            },
        );
        self.cached_bytes += len;
        ready_ns
    }

    /// A write with Force Unit Access (an NCQ-queued command): enters the cache like any write
    /// and completes once the mechanism has destaged it, in its usual elevator order; unlike a
    /// flush it neither waits for the rest of the cache nor holds up the interface.
    pub(crate) fn write_fua(&mut self, t: u64, offset: u64, len: u64) -> u64 {
        if len == 0 || len > CACHE_BYTES {
            return self.write(t, offset, len);
        }
        self.write(t, offset, len);
        let seq = self.next_seq - 1;
        let mut done_ns = self.mech_free_ns;
        while self.by_seq.contains_key(&seq) {
            done_ns = self
                .destage_next(None)
                .expect("the FUA write is still cached");
        }
        done_ns
    }

    pub(crate) fn flush(&mut self, t: u64) -> u64 {
        self.advance(t);
        let start_ns = t.max(self.iface_free_ns);
        while self.destage_next(None).is_some() {}
        let done_ns = start_ns.max(self.mech_free_ns) + FLUSH_OVERHEAD_NS;
        self.iface_free_ns = done_ns;
        done_ns
    }

    pub(crate) fn command(&mut self, t: u64) -> u64 {
        self.advance(t);
        let done_ns = t.max(self.iface_free_ns) + COMMAND_OVERHEAD_NS;
        self.iface_free_ns = done_ns;
        done_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_is_consistent() {
        let g = Geometry::new(1 << 30);
        // Outer zone: 150 MB/s, so 1.25 MB per track.
        assert!((g.zone_track_bytes[0] - 1_250_000.0).abs() < 1.0);
        assert!((g.zone_track_bytes[ZONES - 1] - 666_666.7).abs() < 1.0);
        // 1.25 MB in the outer zone takes one revolution.
        let one_track = g.media_ns(0, 1_250_000);
        assert!(
            (one_track as f64 - REVOLUTION_NS).abs() < 2.0,
            "{one_track}"
        );
        for x in [0u64, 123_456_789, 40_000_000_000, 499_999_999_999] {
            let back = g.offset_at_tracks(g.tracks_before(x));
            assert!(back.abs_diff(x) <= 1, "{x} -> {back}");
        }
        // Seek curve: 0 on the same track, 0.5 ms next door, 15 ms full stroke.
        assert_eq!(g.seek_ns(0, 8192), 0);
        let next_track = g.seek_ns(0, 1_300_000);
        assert!((500_000..=530_000).contains(&next_track), "{next_track}");
        let full = g.seek_ns(0, PLATTER_BYTES_MIN - 1);
        assert!((14_900_000..=15_000_000).contains(&full), "{full}");
    }

    #[test]
    fn a_target_just_passed_costs_a_revolution() {
        let g = Geometry::new(1 << 30);
        // At t = 0 the head is over offset 0; offset 0 again after 100 us is almost a turn away.
        let wait = g.position_ns(0, 100_000, 0);
        assert!((8_200_000..8_240_000).contains(&wait), "{wait}");
        // A target right under the head costs nothing.
        assert_eq!(g.position_ns(0, 0, 0), 0);
    }
}
