//! Sequential-stream detection for prefetch: per object, a few streams, each remembering the
//! block it expects next. A demand read of that block extends the stream; from the second such
//! read on (three blocks in a row: two by chance are common among random reads) the stream
//! reads ahead, doubling how far (from `distance_min_blocks` up to `distance_max_blocks`)
//! while it holds; any other read starts a new stream, replacing the least recently used one. What to
//! read ahead is returned to the caller, which reads those blocks with `Access::Prefetch`.
//!
//! Deterministic: streams are a small array per object, replaced by age, and objects a
//! `BTreeMap` trimmed oldest first.

use std::collections::BTreeMap;
use std::ops::Range;

/// Streams one object may have at once (ZFS keeps 8 per file).
pub const STREAMS_PER_OBJECT: usize = 8;
/// Objects tracked at once; the least recently used goes first.
const OBJECTS_MAX: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Stream {
    /// The block a continuing read would ask for next.
    next_blkid: u64,
    /// First block not yet prefetched.
    prefetched_end: u64,
    distance_blocks: u64,
    /// Reads that continued the stream.
    continued: u64,
    last_used: u64,
}

/// Continuing reads a stream needs before it reads ahead.
const CONFIRMING_READS: u64 = 2;

/// Tunables of the detector.
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    pub distance_min_blocks: u64,
    pub distance_max_blocks: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            distance_min_blocks: 4,
            distance_max_blocks: 256,
        }
    }
}

/// A stream reads ahead at most 1/`CACHE_SHARE_DIVISOR` of the cache: read-ahead waits in the
/// cache until used, and what a stream reads past its end is wasted.
pub const CACHE_SHARE_DIVISOR: u64 = 64;

impl StreamConfig {
    /// This configuration with the read-ahead distance capped for a cache of `cache_blocks`.
    pub fn within_cache(self, cache_blocks: u64) -> StreamConfig {
        let distance_max_blocks = self
            .distance_max_blocks
            .min(cache_blocks / CACHE_SHARE_DIVISOR)
            .max(self.distance_min_blocks);
        StreamConfig {
            distance_max_blocks,
            ..self
        }
    }
}

#[derive(Default)]
struct ObjectStreams {
    streams: Vec<Stream>,
    last_used: u64,
}

pub struct StreamDetector {
    config: StreamConfig,
    objects: BTreeMap<u64, ObjectStreams>,
    clock: u64,
}

impl StreamDetector {
    pub fn new(config: StreamConfig) -> StreamDetector {
        assert!(config.distance_min_blocks >= 1);
        assert!(config.distance_max_blocks >= config.distance_min_blocks);
        StreamDetector {
            config,
            objects: BTreeMap::new(),
            clock: 0,
        }
    }

    /// Notes a demand read of `blkid` of `object`; returns the blocks to read ahead (empty
    /// unless the read continues a stream).
    pub fn observe(&mut self, object: u64, blkid: u64) -> Range<u64> {
        self.observe_request(object, blkid, 1)
    }

    /// Notes a demand read of `count` blocks from `first` (one client request: the blocks of
    /// one request are read anyway, and only requests that follow each other make a stream);
    /// returns the blocks to read ahead.
    pub fn observe_request(&mut self, object: u64, first: u64, count: u64) -> Range<u64> {
        assert!(count > 0, "a request reads at least one block");
        let end_of_request = first + count;
        self.clock += 1;
        let clock = self.clock;
        if !self.objects.contains_key(&object) && self.objects.len() >= OBJECTS_MAX {
            let oldest = self
                .objects
                .iter()
                .min_by_key(|(_, streams)| streams.last_used)
                .map(|(&object, _)| object)
                .expect("a full map has an oldest entry");
            self.objects.remove(&oldest);
        }
        let config = self.config;
        let streams = self.objects.entry(object).or_default();
        streams.last_used = clock;
        if let Some(stream) = streams
            .streams
            .iter_mut()
            .find(|stream| stream.next_blkid == first)
        {
            stream.next_blkid = end_of_request;
            stream.last_used = clock;
            stream.continued += 1;
            if stream.continued < CONFIRMING_READS {
                return end_of_request..end_of_request;
            }
            let start = stream.prefetched_end.max(end_of_request);
            let end = end_of_request + stream.distance_blocks;
            stream.distance_blocks = (stream.distance_blocks * 2).min(config.distance_max_blocks);
            stream.prefetched_end = stream.prefetched_end.max(end);
            return start..end.max(start);
        }
        let fresh = Stream {
            next_blkid: end_of_request,
            prefetched_end: end_of_request,
            distance_blocks: config.distance_min_blocks,
            continued: 0,
            last_used: clock,
        };
        if streams.streams.len() < STREAMS_PER_OBJECT {
            streams.streams.push(fresh);
        } else if let Some(oldest) = streams.streams.iter_mut().min_by_key(|s| s.last_used) {
            *oldest = fresh;
        }
        end_of_request..end_of_request
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequential_run_reads_ahead_further_and_further() {
        let mut detector = StreamDetector::new(StreamConfig {
            distance_min_blocks: 2,
            distance_max_blocks: 8,
        });
        assert!(detector.observe(1, 99).is_empty(), "one read is no stream");
        assert!(detector.observe(1, 100).is_empty(), "nor are two");
        assert_eq!(detector.observe(1, 101), 102..104);
        assert_eq!(detector.observe(1, 102), 104..107);
        assert_eq!(detector.observe(1, 103), 107..112);
        assert_eq!(detector.observe(1, 104), 112..113, "capped at 8 ahead");
        assert!(
            detector.observe(1, 500).is_empty(),
            "a jump starts a new stream"
        );
        assert_eq!(detector.observe(1, 105), 113..114, "the old stream goes on");
    }

    #[test]
    fn blocks_of_one_request_are_no_stream_but_requests_in_a_row_are() {
        let mut detector = StreamDetector::new(StreamConfig {
            distance_min_blocks: 4,
            distance_max_blocks: 64,
        });
        assert!(detector.observe_request(0, 1000, 32).is_empty());
        assert!(
            detector.observe_request(0, 5000, 32).is_empty(),
            "not where 1000.. ended"
        );
        assert!(
            detector.observe_request(0, 1032, 32).is_empty(),
            "second request: not yet"
        );
        assert_eq!(detector.observe_request(0, 1064, 32), 1096..1100);
    }

    #[test]
    fn random_reads_prefetch_nothing() {
        let mut detector = StreamDetector::new(StreamConfig::default());
        let mut x = 12345u64;
        let mut prefetched = 0;
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let blkid = (x >> 33) % 1_000_000;
            prefetched += detector.observe(7, blkid).count();
        }
        assert_eq!(prefetched, 0, "blocks read ahead of random reads");
    }
}
