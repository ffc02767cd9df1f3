//! Tests of `cache`: metadata's share against data, ghost-hit adaptation, reads in flight and
//! their waiters, zero-copy hits, the background evictor and capacity drops, removal by pool,
//! and evictions offered to an SSD tier.

use super::shard::slack_for;

use super::*;
use crate::policy::Access;
use bytes::Bytes;
use cairn_device::ReadBuf;
use cairn_l2arc::L2Arc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

fn block(fill: u8, len: usize) -> Bytes {
    Bytes::from(vec![fill; len])
}

/// Inserts 4 KiB blocks filled with `fill`, keyed `[base | i, 1]` for each `i` of `range`.
fn insert_blocks(
    cache: &BlockCache,
    base: u64,
    range: std::ops::Range<u64>,
    class: BlockClass,
    fill: u8,
) {
    for i in range {
        cache.insert([base | i, 1], class, &block(fill, 4096), Access::Demand);
    }
}

#[test]
fn metadata_keeps_its_share_against_a_flood_of_data() {
    let block_len = 4096usize;
    let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
    let cache = BlockCache::new(400 * per_block, 1);
    insert_blocks(&cache, 0, 0..50u64, BlockClass::Metadata, 1);
    insert_blocks(&cache, 1 << 40, 0..10_000u64, BlockClass::Data, 2);
    cache.assert_invariants();
    let kept = (0..50u64)
        .filter(|&i| cache.contains(&[i, 1], BlockClass::Metadata))
        .count();
    assert_eq!(kept, 50, "metadata under its target was evicted by data");
    let snapshot = cache.snapshot();
    assert!(snapshot.size_bytes <= snapshot.capacity_bytes);
    assert!(snapshot.data.sizes.mru_bytes + snapshot.data.sizes.mfu_bytes > 300 * per_block);
}

#[test]
fn data_may_use_what_metadata_leaves_empty_and_metadata_takes_it_back() {
    let block_len = 4096usize;
    let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
    let cache = BlockCache::new(100 * per_block, 1);
    insert_blocks(&cache, 1 << 40, 0..100u64, BlockClass::Data, 2);
    let data_blocks = |c: &BlockCache| {
        let s = c.snapshot().data.sizes;
        s.mru_blocks + s.mfu_blocks
    };
    assert_eq!(data_blocks(&cache), 100, "data filled the whole cache");
    insert_blocks(&cache, 0, 0..20u64, BlockClass::Metadata, 1);
    cache.assert_invariants();
    assert_eq!(
        data_blocks(&cache),
        80,
        "data over its share gave way to metadata"
    );
    assert!((0..20u64).all(|i| cache.contains(&[i, 1], BlockClass::Metadata)));
}

#[test]
fn ghost_hits_move_the_metadata_target() {
    let block_len = 4096usize;
    let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
    let cache = BlockCache::new(64 * per_block, 1);
    let initial = cache.snapshot().meta_target_bytes;
    // Metadata cycling over more than its share: evicted blocks come back as ghost hits.
    for round in 0..4 {
        for i in 0..40u64 {
            if cache
                .get(&[i, 1], BlockClass::Metadata, Access::Demand)
                .is_none()
            {
                cache.insert(
                    [i, 1],
                    BlockClass::Metadata,
                    &block(round, block_len),
                    Access::Demand,
                );
            }
            let data_key = [1 << 40 | (round as u64 * 40 + i), 1];
            cache.insert(
                data_key,
                BlockClass::Data,
                &block(2, block_len),
                Access::Demand,
            );
        }
    }
    cache.assert_invariants();
    let snapshot = cache.snapshot();
    assert!(snapshot.metadata.stats.mru_ghost_hits + snapshot.metadata.stats.mfu_ghost_hits > 0);
    assert!(
        snapshot.meta_target_bytes > initial,
        "metadata ghost hits did not raise its target ({} <= {initial})",
        snapshot.meta_target_bytes
    );
}

#[test]
fn a_second_reader_of_a_block_in_flight_waits_for_the_first() {
    let cache = BlockCache::new(1 << 20, 2);
    let key = [7, 1];
    let Lookup::Claimed(pending) = cache.lookup(&key, BlockClass::Data, Access::Prefetch) else {
        panic!("an empty cache claims the read");
    };
    assert!(pending.is_prefetch());
    let Lookup::InFlight(waiting) = cache.lookup(&key, BlockClass::Data, Access::Demand) else {
        panic!("the second reader must wait for the read in flight");
    };
    assert!(
        waiting.note_demand(),
        "the first demand waiter raises the priority"
    );
    assert!(!waiting.note_demand(), "only once");
    let waiter = std::thread::spawn(move || waiting.wait());
    let data = block(9, 4096);
    cache.complete(
        &key,
        BlockClass::Data,
        &pending,
        Some(&ReadBuf::from(&data[..])),
        Some(Access::Demand),
    );
    assert_eq!(waiter.join().unwrap(), Some(data.clone()));
    match cache.lookup(&key, BlockClass::Data, Access::Demand) {
        Lookup::Hit(hit) => assert_eq!(hit, data),
        _ => panic!("a completed read is cached"),
    }
    assert_eq!(cache.snapshot().inflight, 0);
}

#[test]
fn a_failed_read_caches_nothing_and_waiters_read_for_themselves() {
    let cache = BlockCache::new(1 << 20, 1);
    let key = [8, 1];
    let Lookup::Claimed(pending) = cache.lookup(&key, BlockClass::Data, Access::Demand) else {
        panic!("claimed");
    };
    let Lookup::InFlight(waiting) = cache.lookup(&key, BlockClass::Data, Access::Demand) else {
        panic!("in flight");
    };
    cache.complete(&key, BlockClass::Data, &pending, None, Some(Access::Demand));
    assert_eq!(waiting.wait(), None);
    assert!(!cache.contains(&key, BlockClass::Data));
    assert!(matches!(
        cache.lookup(&key, BlockClass::Data, Access::Demand),
        Lookup::Claimed(_)
    ));
}

#[test]
fn a_hit_shares_the_cached_buffer() {
    let cache = BlockCache::new(1 << 20, 1);
    cache.insert([1, 1], BlockClass::Data, &block(5, 4096), Access::Demand);
    let a = cache
        .get(&[1, 1], BlockClass::Data, Access::Demand)
        .unwrap();
    let b = cache
        .get(&[1, 1], BlockClass::Data, Access::Demand)
        .unwrap();
    assert_eq!(a.as_ptr(), b.as_ptr(), "two hits, one buffer");
    assert!(a.iter().all(|&byte| byte == 5));
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

#[test]
fn the_background_evictor_brings_inserts_back_within_the_capacity() {
    let block_len = 4096usize;
    let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
    let capacity = 4096 * per_block; // 16 MiB and a bit, 4 shards
    let cache = Arc::new(BlockCache::new(capacity, 4));
    let evictor = {
        let cache = cache.clone();
        std::thread::spawn(move || cache.run_evictor())
    };
    wait_until("slack set", || {
        cache
            .shards
            .iter()
            .all(|shard| shard.0.lock().slack_bytes > 0)
    });
    for i in 0..3 * 4096u64 {
        cache.insert(
            [i, 1],
            BlockClass::Data,
            &block(1, block_len),
            Access::Demand,
        );
        // Never more than the slack over, whatever the evictor's pace.
        let snapshot = cache.snapshot();
        assert!(
            snapshot.size_bytes <= capacity + slack_for(capacity / 4) * 4 + per_block,
            "{} bytes held in {capacity} (+ slack)",
            snapshot.size_bytes
        );
    }
    wait_until("evicted down to the capacity", || {
        cache.snapshot().size_bytes <= capacity
    });
    let snapshot = cache.snapshot();
    assert!(snapshot.evict_batches > 0, "the evictor never ran");
    assert_eq!(
        snapshot.evict_batch_bytes + snapshot.evict_inline_bytes,
        snapshot.data.stats.evicted_bytes,
        "every eviction is counted once"
    );
    assert!(
        snapshot.evict_batch_bytes > 0,
        "readers evicted everything themselves: {snapshot:?}"
    );
    cache.stop_evictor();
    evictor.join().unwrap();
    // Without the evictor, inserts evict for themselves again and the slack is gone.
    insert_blocks(&cache, 1 << 40, 0..1024u64, BlockClass::Data, 2);
    assert!(cache.snapshot().size_bytes <= capacity);
    cache.assert_invariants();
}

#[test]
fn a_capacity_drop_is_evicted_by_the_caller_and_inserts_evict_only_their_own_size() {
    let block_len = 4096usize;
    let per_block = (block_len + BLOCK_OVERHEAD_BYTES as usize) as u64;
    let capacity = 2048 * per_block;
    let cache = BlockCache::new(capacity, 1);
    cache.shards[0].0.lock().slack_bytes = slack_for(capacity); // as under an evictor
    insert_blocks(&cache, 0, 0..2048u64, BlockClass::Data, 1);
    let full = cache.snapshot().size_bytes;
    assert_eq!(full, capacity);
    // A shrink stored without its eviction pass: what a reader sees while a capacity
    // change is being evicted.
    cache.shards[0].0.lock().set_capacity(capacity / 4);
    let inline_before = cache.snapshot().evict_inline_bytes;
    cache.insert(
        [1 << 40, 1],
        BlockClass::Data,
        &block(2, block_len),
        Access::Demand,
    );
    let snapshot = cache.snapshot();
    assert_eq!(
        snapshot.evict_inline_bytes - inline_before,
        per_block,
        "the reader evicted more than its own block"
    );
    assert_eq!(snapshot.size_bytes, full);
    cache.set_capacity(capacity / 4);
    let snapshot = cache.snapshot();
    assert!(snapshot.size_bytes <= capacity / 4);
    assert!(
        snapshot.evict_batches >= (full - capacity / 4) / EVICT_BATCH_BYTES,
        "evicted in batches of at most {EVICT_BATCH_BYTES} bytes: {snapshot:?}"
    );
    cache.assert_invariants();
}

#[test]
fn removing_a_pools_blocks_leaves_the_others() {
    let cache = BlockCache::new(1 << 22, 4);
    for i in 0..64u64 {
        cache.insert(
            [i, 1 << 48 | 5],
            BlockClass::Data,
            &block(1, 4096),
            Access::Demand,
        );
        cache.insert(
            [i, 2 << 48 | 5],
            BlockClass::Metadata,
            &block(2, 4096),
            Access::Demand,
        );
    }
    assert_eq!(cache.remove_matching(|key| key[1] >> 48 == 1), 64);
    assert!((0..64u64).all(|i| !cache.contains(&[i, 1 << 48 | 5], BlockClass::Data)));
    assert!((0..64u64).all(|i| cache.contains(&[i, 2 << 48 | 5], BlockClass::Metadata)));
    cache.assert_invariants();
}

#[test]
fn evictions_feed_the_ssd_tier_and_what_it_holds_sizes_the_sketches() {
    let cache = BlockCache::new(64 * 4096, 1);
    let tier = Arc::new(L2Arc::new(cairn_l2arc::L2Config {
        segment_bytes: 256 << 10,
        write_chunk_bytes: 64 << 10,
        feed_linger_ms: 5,
        ..cairn_l2arc::L2Config::default()
    }));
    let tag = 3u16;
    cache.register_l2(tag, &tier);
    let sketch_before = cache.snapshot().data.sizes.sketch_bytes;
    assert!(!cache.follow_second_tiers(64 * 4096), "no devices yet");
    let device = Arc::new(cairn_device::mem::MemDevice::new(16 << 20));
    tier.add_new("c0", device, 1, 1).unwrap();
    // An empty device holds nothing the sketch must count for.
    assert!(
        !cache.follow_second_tiers(64 * 4096),
        "sized for an empty device"
    );
    assert_eq!(cache.snapshot().data.sizes.sketch_bytes, sketch_before);
    assert_eq!(cache.second_tier_sketch_bytes(64 * 4096), 0);
    let key = |n: u64| [n << 12, 5 | u64::from(tag) << 48];
    for n in 0..200u64 {
        let data = block(n as u8, 4096);
        match cache.lookup(&key(n), BlockClass::Data, Access::Demand) {
            Lookup::Claimed(pending) => {
                // Every third block's dataset keeps it off the cache devices.
                cache.complete_for_tier(
                    &key(n),
                    BlockClass::Data,
                    &pending,
                    Some(&ReadBuf::from(&data[..])),
                    Some(Access::Demand),
                    n % 3 != 0,
                );
            }
            _ => panic!("block {n} was cached already"),
        }
    }
    tier.settle();
    let below = |n: u64| tier.contains([n << 12, 5]);
    let fed: Vec<u64> = (0..200).filter(|n| below(*n)).collect();
    // About 140 evicted, two in three of them eligible.
    assert!(fed.len() >= 80, "only {} evicted blocks fed", fed.len());
    assert!(
        fed.iter().all(|n| n % 3 != 0),
        "a block secondarycache excluded was fed"
    );
    // Offered and taken counts as cached; kept off by secondarycache, as ineligible.
    let counted = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    assert!(counted(&cache.evict_l2.cached) >= fed.len() as u64 * 4096);
    assert!(counted(&cache.evict_l2.ineligible) > 0);
    // The sketch grows by one slot per block the tier now holds, and no more.
    let hot = key(fed[fed.len() - 1]);
    let policy_hash_estimate = |cache: &BlockCache| cache.shards[0].0.lock().data.frequency(&hot);
    let estimate_before = policy_hash_estimate(&cache);
    let held = tier.indexed_blocks();
    assert!(
        cache.follow_second_tiers(64 * 4096),
        "not grown for {held} blocks"
    );
    let share = cache.second_tier_sketch_bytes(64 * 4096);
    assert!(
        (held * 4..held * 4 + 8).contains(&share),
        "{share} B of sketch for {held} blocks held below"
    );
    assert!(
        policy_hash_estimate(&cache) >= estimate_before,
        "growing forgot what the sketch counted"
    );
    assert!(!cache.follow_second_tiers(64 * 4096), "grown for nothing");
}

/// An eligible block the tier refuses (admission) is "uncached eligible".
#[test]
fn evictions_the_tier_refuses_count_as_uncached_eligible() {
    let cache = BlockCache::new(16 * 4096, 1);
    let tier = Arc::new(L2Arc::new(cairn_l2arc::L2Config {
        segment_bytes: 256 << 10,
        write_chunk_bytes: 64 << 10,
        feed_linger_ms: 5,
        // Blocks read once are not worth the device.
        admit_frequency_min: 3,
        ..cairn_l2arc::L2Config::default()
    }));
    let tag = 4u16;
    cache.register_l2(tag, &tier);
    let device = Arc::new(cairn_device::mem::MemDevice::new(16 << 20));
    tier.add_new("c0", device, 1, 1).unwrap();
    let key = |n: u64| [n << 12, 5 | u64::from(tag) << 48];
    for n in 0..64u64 {
        let data = block(n as u8, 4096);
        if let Lookup::Claimed(pending) = cache.lookup(&key(n), BlockClass::Data, Access::Demand) {
            cache.complete(
                &key(n),
                BlockClass::Data,
                &pending,
                Some(&ReadBuf::from(&data[..])),
                Some(Access::Demand),
            );
        }
    }
    tier.settle();
    let counted = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    assert!(counted(&cache.evict_l2.eligible) >= 40 * 4096);
    assert_eq!(counted(&cache.evict_l2.cached), 0);
    assert_eq!(counted(&cache.evict_l2.ineligible), 0);
    assert!((0..64).all(|n| !tier.contains([n << 12, 5])));
}
