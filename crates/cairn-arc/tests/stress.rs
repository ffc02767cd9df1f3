//! Readers and evictors together on one `BlockCache`: reader threads look blocks up and insert
//! what they miss (some as read-ahead), over a key space several times the cache, while an
//! evictor thread keeps shrinking and growing the capacity (memory pressure coming and going).
//! Every hit must return exactly the bytes inserted for its key — never another block's, never
//! a torn one — and afterwards every shard's invariants hold and the cache is within its size.
//! Run twice: with inserts evicting for themselves, and with the background evictor thread.

use bytes::Bytes;
use cairn_arc::cache::{BlockCache, BlockClass};
use cairn_arc::{Access, BlockKey};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const BLOCK: usize = 4096;
const KEYS: u64 = 4096;

/// The one content a key ever has: its number in every 8 bytes.
fn content(key: u64) -> Bytes {
    Bytes::from(
        std::iter::repeat_n(key.to_le_bytes(), BLOCK / 8)
            .flatten()
            .collect::<Vec<u8>>(),
    )
}

fn block_key(key: u64) -> BlockKey {
    [key << 12, 3]
}

/// Every fifth key is metadata: both of a shard's policies see traffic.
fn class(key: u64) -> BlockClass {
    if key.is_multiple_of(5) {
        BlockClass::Metadata
    } else {
        BlockClass::Data
    }
}

#[test]
fn readers_and_evictors_together_never_see_wrong_data() {
    stress(false);
}

#[test]
fn readers_and_the_background_evictor_together_never_see_wrong_data() {
    stress(true);
}

fn stress(background: bool) {
    let capacity = 512 * BLOCK as u64;
    let cache = BlockCache::new(capacity, 8);
    let finished = AtomicUsize::new(0);
    let hits = AtomicU64::new(0);
    let lookups = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let evictor = background.then(|| scope.spawn(|| cache.run_evictor()));
        for reader in 0..4u64 {
            let (cache, finished, hits, lookups) = (&cache, &finished, &hits, &lookups);
            scope.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ reader;
                for _ in 0..60_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Skewed: half the lookups go to the first eighth of the keys.
                    let key = if x & 1 == 0 {
                        (x >> 8) % (KEYS / 8)
                    } else {
                        (x >> 8) % KEYS
                    };
                    let access = if x & 6 == 0 {
                        Access::Prefetch
                    } else {
                        Access::Demand
                    };
                    lookups.fetch_add(1, Ordering::Relaxed);
                    match cache.get(&block_key(key), class(key), access) {
                        Some(data) => {
                            assert!(data == content(key), "key {key} returned other bytes");
                            hits.fetch_add(1, Ordering::Relaxed);
                        }
                        None => cache.insert(block_key(key), class(key), &content(key), access),
                    }
                }
                finished.fetch_add(1, Ordering::Relaxed);
            });
        }
        let (cache, finished) = (&cache, &finished);
        scope.spawn(move || {
            let mut round = 0u64;
            while finished.load(Ordering::Relaxed) < 4 {
                let share = if round.is_multiple_of(2) { 4 } else { 1 };
                cache.set_capacity(capacity / share);
                std::thread::sleep(std::time::Duration::from_micros(200));
                round += 1;
            }
            cache.set_capacity(capacity);
            assert!(round > 10, "the evictor hardly ran ({round} rounds)");
        });
        if let Some(evictor) = evictor {
            while !finished_all(finished) {
                std::thread::yield_now();
            }
            cache.stop_evictor();
            evictor.join().unwrap();
        }
    });
    cache.assert_invariants();
    let snapshot = cache.snapshot();
    let cached = snapshot.size_bytes;
    assert!(cached <= capacity, "{cached} bytes cached in {capacity}");
    if background {
        assert!(
            snapshot.evict_batches > 0,
            "the background evictor never ran"
        );
    }
    assert!(
        snapshot.metadata.sizes.mru_blocks + snapshot.metadata.sizes.mfu_blocks > 0,
        "no metadata cached"
    );
    let (hits, lookups) = (hits.into_inner(), lookups.into_inner());
    assert!(
        hits > lookups / 10,
        "{hits} hits in {lookups} lookups: the cache kept nothing"
    );
    assert_eq!(
        snapshot.data.stats.demand_hits
            + snapshot.data.stats.prefetch_hits
            + snapshot.metadata.stats.demand_hits
            + snapshot.metadata.stats.prefetch_hits,
        hits,
        "the shards' hit counters disagree with the readers"
    );
}

fn finished_all(finished: &AtomicUsize) -> bool {
    finished.load(Ordering::Relaxed) >= 4
}
