//! The cache tier against real (in-memory and emulated) devices: what is offered comes back
//! verified, survives a restart, is evicted by value, and faults never yield wrong data.

use super::*;
use crate::layout::SegmentHeader;
use cairn_device::mem::MemDevice;
use cairn_emulate::{DeviceModel, EmuOptions, EmulatedDevice, FaultConfig};
use cairn_format::{ChecksumAlgorithm, Dva, ObjectType};

const POOL: u64 = 0xfeed;

fn small_config() -> L2Config {
    L2Config {
        segment_bytes: 256 << 10,
        write_chunk_bytes: 64 << 10,
        feed_linger_ms: 5,
        ..L2Config::default()
    }
}

/// Block `n` of 4 KiB: its bytes and a pointer that verifies them.
fn block(n: u64) -> (BlockPointer, Bytes) {
    let data: Vec<u8> = (0..4096u64)
        .map(|i| (i.wrapping_mul(31) ^ n.wrapping_mul(0x9e37)) as u8)
        .collect();
    let mut bp = BlockPointer::HOLE;
    bp.dvas[0] = Dva {
        vdev: 0,
        offset: n * 4096,
        asize: 4096,
    };
    bp.lsize = 4096;
    bp.psize = 4096;
    bp.birth_txg = 7;
    bp.object_type = ObjectType::VolumeData;
    bp.checksum_algorithm = ChecksumAlgorithm::Fletcher4;
    bp.checksum = ChecksumAlgorithm::Fletcher4.compute(&data);
    (bp, Bytes::from(data))
}

fn new_cache(device: Arc<dyn Device>, config: L2Config) -> L2Arc {
    let l2 = L2Arc::new(config);
    l2.add_new("c0", device, 1, POOL).unwrap();
    l2
}

fn feed(l2: &L2Arc, blocks: impl Iterator<Item = u64>) {
    for n in blocks {
        let (bp, data) = block(n);
        l2.offer(&bp, &data);
    }
    l2.settle();
}

fn hits(l2: &L2Arc, blocks: impl Iterator<Item = u64>) -> usize {
    blocks
        .filter(|n| {
            let (bp, data) = block(*n);
            match l2.read(&bp) {
                Some(read) => {
                    assert_eq!(read[..], data[..], "block {n} read back wrong");
                    true
                }
                None => false,
            }
        })
        .count()
}

#[test]
fn offered_blocks_come_back_verified() {
    let l2 = new_cache(Arc::new(MemDevice::new(8 << 20)), small_config());
    feed(&l2, 0..200);
    assert_eq!(hits(&l2, 0..200), 200);
    assert_eq!(hits(&l2, 200..210), 0);
    let counters = l2.counters();
    assert_eq!(counters.hits.load(Ordering::Relaxed), 200);
    assert_eq!(counters.feed_blocks.load(Ordering::Relaxed), 200);
    // The same address with a newer birth txg is another block: never served from the old.
    let (mut bp, _) = block(3);
    bp.birth_txg = 8;
    assert!(l2.read(&bp).is_none());
    let (entries, ram) = l2.index_usage();
    assert_eq!(entries, 200);
    assert!(ram > 0);
}

#[test]
fn a_restart_finds_what_was_cached() {
    let backing: Arc<dyn Device> = Arc::new(MemDevice::new(8 << 20));
    {
        let l2 = new_cache(backing.clone(), small_config());
        feed(&l2, 0..300);
        l2.shutdown();
    }
    let l2 = L2Arc::new(small_config());
    l2.open_existing("c0", backing.clone(), POOL).unwrap();
    l2.settle();
    assert_eq!(hits(&l2, 0..300), 300);
    assert!(l2.counters().rebuild_segments.load(Ordering::Relaxed) >= 4);
    // A device of another pool is refused, not used.
    let other = L2Arc::new(small_config());
    assert!(matches!(
        other.open_existing("c0", backing, POOL + 1),
        Err(L2Error::OtherPool { .. })
    ));
}

#[test]
fn damaged_segments_are_skipped_at_restart() {
    let backing = Arc::new(MemDevice::new(8 << 20));
    let superblock;
    {
        let l2 = new_cache(backing.clone(), small_config());
        feed(&l2, 0..300);
        superblock = l2.devices()[0].superblock;
        l2.shutdown();
    }
    // Tear segment 0's summary and wipe segment 1's header.
    let header = {
        let mut raw = vec![0u8; 4096];
        backing
            .read_at(superblock.segment_offset(0), &mut raw)
            .unwrap();
        SegmentHeader::decode(&raw, superblock.segment_bytes)
            .unwrap()
            .unwrap()
    };
    let summary_at = superblock.segment_offset(0) + u64::from(header.summary_offset_bytes);
    backing.write_at(summary_at + 5, &[0xff; 7]).unwrap();
    backing
        .write_at(superblock.segment_offset(1), &[0u8; 4096])
        .unwrap();
    let l2 = L2Arc::new(small_config());
    l2.open_existing("c0", backing.clone(), POOL).unwrap();
    l2.settle();
    let found = hits(&l2, 0..300);
    assert!(found > 100 && found < 300, "{found} of 300 after damage");
    assert_eq!(l2.counters().rebuild_failed.load(Ordering::Relaxed), 1);
    // Both superblocks gone: the device is refused with a reason.
    backing.write_at(0, &[0u8; 8192]).unwrap();
    let again = L2Arc::new(small_config());
    assert!(matches!(
        again.open_existing("c0", backing, POOL),
        Err(L2Error::Layout { .. })
    ));
}

fn emulated(faults: FaultConfig) -> Arc<EmulatedDevice> {
    let device = EmulatedDevice::new(
        Arc::new(MemDevice::new(8 << 20)),
        DeviceModel::Ram,
        EmuOptions {
            clock: None,
            seed: 11,
            ..EmuOptions::default()
        },
    );
    device.set_faults(faults);
    device
}

#[test]
fn bit_flips_and_read_errors_are_misses_never_wrong_data() {
    let device = emulated(FaultConfig::default());
    // Not faulted by a run of bad reads here: this test follows each bad read's entry.
    let config = L2Config {
        errors_max_faulted: u64::MAX,
        ..small_config()
    };
    let l2 = new_cache(device.clone(), config);
    feed(&l2, 0..200);
    device.set_faults(FaultConfig {
        read_bit_flip_probability: 0.3,
        read_eio_probability: 0.1,
        ..FaultConfig::default()
    });
    // `hits` asserts every block read back is the right one.
    let found = hits(&l2, 0..200);
    assert!(found < 200, "faults injected but every read hit");
    let report = &l2.reports()[0];
    let bad = report.checksum_errors + report.read_errors;
    assert_eq!(
        found as u64 + bad,
        200,
        "every miss is a counted device error"
    );
    // Bad entries were dropped: with the faults gone, they are misses, the rest hits.
    device.set_faults(FaultConfig::default());
    assert_eq!(hits(&l2, 0..200), found);
}

#[test]
fn a_vanished_device_faults_and_is_no_longer_read() {
    let device = emulated(FaultConfig::default());
    let l2 = new_cache(device.clone(), small_config());
    feed(&l2, 0..100);
    device.set_faults(FaultConfig {
        missing: true,
        ..FaultConfig::default()
    });
    assert_eq!(hits(&l2, 0..100), 0);
    assert_eq!(l2.reports()[0].health, L2Health::Faulted);
    assert_eq!(
        l2.index_usage().0,
        0,
        "a faulted device's entries stay indexed"
    );
    // Offers to a faulted device are dropped; nothing waits or fails.
    feed(&l2, 100..150);
    assert_eq!(hits(&l2, 100..150), 0);
}

#[test]
fn write_errors_lose_only_the_copies() {
    let device = emulated(FaultConfig {
        write_eio_probability: 1.0,
        ..FaultConfig::default()
    });
    let l2 = L2Arc::new(small_config());
    // Superblocks cannot be written: adding fails with the device's error.
    assert!(matches!(
        l2.add_new("c0", device.clone(), 1, POOL),
        Err(L2Error::Device { .. })
    ));
    device.set_faults(FaultConfig::default());
    l2.add_new("c0", device.clone(), 1, POOL).unwrap();
    device.set_faults(FaultConfig {
        write_eio_probability: 1.0,
        ..FaultConfig::default()
    });
    feed(&l2, 0..100);
    assert_eq!(hits(&l2, 0..100), 0);
    assert!(l2.reports()[0].write_errors > 0);
}

#[test]
fn a_full_device_reuses_its_least_valued_segments_and_keeps_the_hot_ones() {
    // 2 MiB of segments of 256 KiB: about 450 blocks of 4 KiB fit.
    let config = small_config();
    let l2 = new_cache(Arc::new(MemDevice::new((1 << 20) + (2 << 20))), config);
    let hot = 0..120u64;
    feed(&l2, hot.clone());
    for _ in 0..20 {
        assert_eq!(hits(&l2, hot.clone()), 120);
    }
    // A scan of 1,000 blocks read once each: the device fills and reuses segments.
    for start in (1_000..2_000).step_by(100) {
        feed(&l2, start..start + 100);
        hits(&l2, hot.clone());
    }
    let counters = l2.counters();
    assert!(counters.evicted_segments.load(Ordering::Relaxed) > 0);
    assert_eq!(hits(&l2, hot), 120, "the hot set was evicted by a scan");
    let report = &l2.reports()[0];
    assert!(report.alloc_bytes <= report.size_bytes);
}

#[test]
fn the_index_cap_bounds_ram_whatever_the_device() {
    let config = L2Config {
        index_bytes_max: 64 << 10,
        ..small_config()
    };
    let l2 = new_cache(Arc::new(MemDevice::new(64 << 20)), config);
    feed(&l2, 0..8_000);
    let (entries, ram) = l2.index_usage();
    assert!(
        ram <= 64 << 10,
        "index uses {ram} B over its cap: {:?}",
        l2.shard_fill()
    );
    assert!(entries > 1_000, "only {entries} entries under the cap");
    assert!(ram as f64 / entries as f64 <= 16.0, "{ram} B for {entries}");
    // What is indexed reads back; the rest is a miss.
    let found = hits(&l2, 0..8_000);
    assert_eq!(found as u64, entries);
}

#[test]
fn the_write_budget_drops_feeds_once_spent() {
    let config = L2Config {
        write_bytes_per_day: Some(1),
        ..small_config()
    };
    // A 3 MiB device: its first fill (768 blocks of 4 KiB) is free, then almost nothing.
    let l2 = new_cache(Arc::new(MemDevice::new(3 << 20)), config);
    feed(&l2, 0..2_000);
    let counters = l2.counters();
    assert!(counters.feed_over_budget.load(Ordering::Relaxed) >= 1_200);
    assert!(counters.feed_blocks.load(Ordering::Relaxed) <= 768);
    // What is left is less than one more block.
    let left = l2.reports()[0].write_budget_left_bytes.unwrap();
    assert!(left < 4096, "{left} B left");
}

#[test]
fn the_write_allowance_refills_at_the_daily_rate_up_to_a_day_or_a_fill() {
    use std::time::{Duration, Instant};
    let (per_day, size) = (86_400, 10_000);
    let start = Instant::now();
    let mut allowance = Allowance::new(size);
    assert!(
        allowance.take(size, per_day, size, start),
        "the first fill is free"
    );
    assert!(!allowance.take(1, per_day, size, start));
    // A byte a second.
    let later = start + Duration::from_secs(100);
    assert!(!allowance.take(101, per_day, size, later));
    assert!(allowance.take(100, per_day, size, later));
    // Idle for days: never more than the larger of a day's budget and the device.
    let idle = later + Duration::from_secs(10 * 86_400);
    assert_eq!(allowance.left_bytes(per_day, size, idle), 86_400.0);
    let big = 1_000_000;
    let mut allowance = Allowance::new(big);
    assert!(allowance.take(big, per_day, big, start));
    let idle = start + Duration::from_secs(20 * 86_400);
    assert_eq!(allowance.left_bytes(per_day, big, idle), big as f64);
}

#[test]
fn without_a_budget_nothing_is_over_it() {
    let l2 = new_cache(Arc::new(MemDevice::new(3 << 20)), small_config());
    feed(&l2, 0..2_000);
    assert_eq!(l2.counters().feed_over_budget.load(Ordering::Relaxed), 0);
    assert_eq!(l2.reports()[0].write_budget_left_bytes, None);
}

#[test]
fn removing_a_device_forgets_its_blocks() {
    let l2 = L2Arc::new(small_config());
    l2.add_new("c0", Arc::new(MemDevice::new(8 << 20)), 1, POOL)
        .unwrap();
    l2.add_new("c1", Arc::new(MemDevice::new(8 << 20)), 2, POOL)
        .unwrap();
    feed(&l2, 0..400);
    assert_eq!(hits(&l2, 0..400), 400);
    let per_device: Vec<u64> = l2.reports().iter().map(|r| r.alloc_bytes).collect();
    assert!(per_device.iter().all(|bytes| *bytes > 0), "{per_device:?}");
    l2.remove("c0").unwrap();
    let left = hits(&l2, 0..400);
    assert!(left > 0 && left < 400, "{left}");
    assert!(matches!(l2.remove("c0"), Err(L2Error::NoSuchDevice(_))));
}

fn admission(frequency: u8) -> Admission {
    Admission {
        frequency,
        epoch: 0,
    }
}

fn feed_with(l2: &L2Arc, blocks: impl Iterator<Item = u64>, frequency: u8) {
    for n in blocks {
        let (bp, data) = block(n);
        l2.offer_with(&bp, &data, admission(frequency));
    }
    l2.settle();
}

fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// 2 MiB of segments of 256 KiB (beside the 1 MiB reserved at each end): 8 segments of 62
/// blocks of 4 KiB.
fn small_device() -> Arc<dyn Device> {
    Arc::new(MemDevice::new((2 << 20) + (2 << 20)))
}

#[test]
fn segments_fill_to_their_end_whatever_the_chunk_size() {
    // Chunks of 25 blocks do not divide a segment of 62: the third of each is split (not
    // written whole into the next segment, leaving 12 blocks' room unused).
    let config = L2Config {
        write_chunk_bytes: 25 * 4096,
        ..small_config()
    };
    let l2 = new_cache(small_device(), config);
    feed(&l2, 0..2_000);
    let superblock = l2.devices()[0].superblock;
    let per_segment =
        (superblock.segment_bytes - layout::HEADER_BYTES) / (4096 + SUMMARY_BYTES_PER_BLOCK);
    let capacity = superblock.segment_count * per_segment;
    let (entries, _) = l2.index_usage();
    // All segments but the one filling are full to the block.
    assert!(
        entries + per_segment >= capacity,
        "{entries} blocks cached of {capacity} that fit"
    );
}

const SUMMARY_BYTES_PER_BLOCK: u64 = layout::SUMMARY_ENTRY_BYTES as u64;

#[test]
fn offers_less_frequent_than_what_a_reuse_dropped_are_refused() {
    let l2 = new_cache(small_device(), small_config());
    // Fill the device with blocks read 6 times lately, then offer as many again.
    feed_with(&l2, 0..1_000, 6);
    let counters = l2.counters();
    assert!(
        load(&counters.evicted_segments) > 0,
        "the device never filled"
    );
    let cached: Vec<u64> = (0..1_000)
        .filter(|n| l2.contains(block_key(&block(*n).0).unwrap()))
        .collect();
    // A loop over more blocks than fit, as often read as what is cached: refused, so what is
    // cached stays.
    let refused = load(&counters.feed_refused);
    feed_with(&l2, 1_000..2_000, 6);
    assert!(load(&counters.feed_refused) - refused >= 990);
    assert_eq!(hits(&l2, cached.iter().copied()), cached.len());
    // Blocks read more often are admitted.
    feed_with(&l2, 2_000..2_050, 9);
    assert!(hits(&l2, 2_000..2_050) >= 45);
}

#[test]
fn copies_gone_up_to_ram_are_reused_first_and_valued_again_when_offered() {
    let l2 = new_cache(small_device(), small_config());
    feed_with(&l2, 0..420, 3);
    let counters = l2.counters();
    let written = load(&counters.feed_blocks);
    // The third segment's blocks go up to RAM: their copies are duplicates now.
    let promoted = 124..186u64;
    for n in promoted.clone() {
        assert!(l2.read_into_ram(&block(n).0).is_some());
    }
    assert_eq!(l2.promoted_blocks(), 62);
    // RAM lets ten of them go: valued again, nothing written.
    feed_with(&l2, 124..134, 3);
    assert_eq!(load(&counters.feed_blocks), written);
    assert_eq!(l2.promoted_blocks(), 52);
    // New blocks, more often read, need a segment: the one of promoted copies is reused (not
    // the oldest), its valued blocks copied forward.
    feed_with(&l2, 1_000..1_100, 5);
    assert!(hits(&l2, 1_000..1_100) >= 95);
    assert_eq!(
        l2.promoted_blocks(),
        0,
        "the promoted copies were not reused"
    );
    let valued = (0..134).chain(186..420);
    assert_eq!(hits(&l2, valued.clone()), valued.count());
}

/// Two block numbers whose keys share a fingerprint (the index cannot tell them apart).
fn colliding_blocks() -> (u64, u64) {
    let mut seen = std::collections::HashMap::new();
    for n in 0..8_000_000u64 {
        let (bp, _) = block(n);
        let key = block_key(&bp).unwrap();
        if let Some(first) = seen.insert(index::fingerprint(key), n) {
            return (first, n);
        }
    }
    panic!("no two of 8 million keys share a 39-bit fingerprint");
}

#[test]
fn a_fingerprint_collision_is_a_plain_miss_not_a_device_error() {
    let (cached, other) = colliding_blocks();
    let l2 = new_cache(Arc::new(MemDevice::new(8 << 20)), small_config());
    // The cached block, then enough others to seal its segment (its summary is then on the
    // device: what tells a collision from a bad copy).
    feed(
        &l2,
        std::iter::once(cached).chain(20_000_000..20_000_000 + 200),
    );
    let (other_bp, _) = block(other);
    assert!(l2.read(&other_bp).is_none(), "another block's copy served");
    let counters = l2.counters();
    assert_eq!(load(&counters.fingerprint_collisions), 1);
    assert_eq!(
        load(&counters.bad_reads),
        0,
        "a collision counted as a bad read"
    );
    let devices = l2.reports();
    assert_eq!(devices[0].checksum_errors, 0);
    assert_eq!(devices[0].health, L2Health::Online);
    // The entry that matched belongs to the cached block, which is still served.
    assert_eq!(hits(&l2, std::iter::once(cached)), 1);
}

#[test]
fn the_sketch_counts_one_slot_per_block_the_devices_can_hold() {
    let l2 = new_cache(Arc::new(MemDevice::new(8 << 20)), small_config());
    let empty = l2.capacity_bytes();
    // Nothing fed yet: 4 KiB per block.
    assert!(empty > 4 << 20 && empty <= 8 << 20, "{empty}");
    // 8 KiB blocks: half as many blocks fit, so half the sketch.
    for n in 0..50u64 {
        let data = Bytes::from(vec![(n % 251) as u8; 8192]);
        let mut bp = BlockPointer::HOLE;
        bp.dvas[0] = Dva {
            vdev: 0,
            offset: (1 << 30) + n * 8192,
            asize: 8192,
        };
        bp.lsize = 8192;
        bp.psize = 8192;
        bp.birth_txg = 7;
        bp.object_type = ObjectType::VolumeData;
        bp.checksum_algorithm = ChecksumAlgorithm::Fletcher4;
        bp.checksum = ChecksumAlgorithm::Fletcher4.compute(&data);
        l2.offer(&bp, &data);
    }
    l2.settle();
    assert_eq!(l2.capacity_bytes(), empty / 2 / 4096 * 4096);
}
