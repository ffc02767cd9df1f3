//! The ARC in the read path of a real pool: second reads come from RAM, `primarycache` decides
//! what stays, sequential reads are read ahead, the cache follows memory pressure in bounded
//! steps and never holds more than its target, and a pool leaving the process takes its blocks
//! with it. Each test gives its pool a private cache, so counters are its own.

mod common;

use cairn_arc::pressure::MemoryReading;
use cairn_engine::{ArcConfig, Pool, PoolOptions, ReadCache};
use common::*;
use std::sync::Arc;

const BLOCK: usize = 4096;

fn cache(max_bytes: u64) -> Arc<ReadCache> {
    ReadCache::new(ArcConfig {
        max_bytes,
        min_bytes: max_bytes / 8,
        shards: 4,
        prefetch_threads: 2,
    })
}

fn pool_with(dir: &std::path::Path, arc: &Arc<ReadCache>) -> Pool {
    let options = PoolOptions {
        arc: Some(arc.clone()),
        ..options(plain_opener())
    };
    create_mirror_with(&device_paths(dir, 2), options)
}

/// A 4K-block volume holding `blocks` blocks of random data, synced to disk (so reads go
/// through the tree and the cache, not the in-memory change sets). Written with
/// `primarycache=metadata` (set at create: it must hold from the first write), then set to
/// `all`: these tests count what reads bring in.
fn volume_with_data(pool: &Pool, blocks: usize) -> Vec<u8> {
    let data = volume_written_with(pool, blocks, "metadata");
    pool.set_property("tank/vol", "primarycache", "all")
        .unwrap();
    data
}

fn volume_written_with(pool: &Pool, blocks: usize, primarycache: &str) -> Vec<u8> {
    pool.create_volume(
        "tank/vol",
        (blocks * BLOCK) as u64,
        &[
            ("volblocksize".into(), BLOCK.to_string()),
            ("primarycache".into(), primarycache.to_string()),
        ],
    )
    .unwrap();
    let data = pattern(blocks * BLOCK, 7);
    let volume = pool.volume("tank/vol").unwrap();
    volume.write(0, &data).unwrap();
    pool.sync().unwrap();
    data
}

fn stat(cache: &ReadCache, name: &str) -> u64 {
    cache
        .stats()
        .get(name)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

/// Reads every block once, in a scattered order (no sequential stream, so no read-ahead).
fn read_scattered(pool: &Pool, data: &[u8], blocks: usize) {
    let volume = pool.volume("tank/vol").unwrap();
    let mut buf = vec![0u8; BLOCK];
    for i in 0..blocks {
        let blkid = (i * 37) % blocks;
        volume.read((blkid * BLOCK) as u64, &mut buf).unwrap();
        assert!(
            buf[..] == data[blkid * BLOCK..(blkid + 1) * BLOCK],
            "block {blkid} read back other bytes"
        );
    }
}

#[test]
fn a_second_pass_over_a_working_set_comes_from_ram() {
    let dir = tempfile::tempdir().unwrap();
    let arc = cache(64 << 20);
    let pool = pool_with(dir.path(), &arc);
    let blocks = 512; // 37 is prime to 512: the scattered order visits every block
    let data = volume_with_data(&pool, blocks);
    read_scattered(&pool, &data, blocks);
    let misses_first = stat(&arc, "demand_data_misses");
    assert_eq!(
        misses_first, blocks as u64,
        "the first pass reads every block"
    );
    let hits_before = stat(&arc, "demand_data_hits");
    read_scattered(&pool, &data, blocks);
    assert_eq!(
        stat(&arc, "demand_data_misses"),
        misses_first,
        "the second pass missed"
    );
    assert_eq!(stat(&arc, "demand_data_hits") - hits_before, blocks as u64);
    assert_eq!(
        stat(&arc, "prefetch_data_misses"),
        0,
        "scattered reads read nothing ahead"
    );
    assert!(
        stat(&arc, "metadata_size") > 0,
        "indirect blocks are cached too"
    );
    let header = stat(&arc, "hdr_bytes_per_block");
    assert!(
        (48..=64).contains(&header),
        "{header} bytes of header per cached block"
    );
    arc.assert_invariants();
    pool.close().unwrap();
}

#[test]
fn a_block_partial_writes_change_stays_in_ram_and_its_old_versions_leave() {
    let dir = tempfile::tempdir().unwrap();
    let arc = cache(64 << 20);
    let pool = pool_with(dir.path(), &arc);
    let blocks = 64;
    let data = volume_with_data(&pool, blocks);
    assert_eq!(
        stat(&arc, "data_size"),
        0,
        "written with primarycache=metadata"
    );
    let volume = pool.volume("tank/vol").unwrap();
    for round in 0..8u8 {
        volume.write(100, &[round; 512]).unwrap();
        pool.sync().unwrap();
    }
    assert!(
        stat(&arc, "written_inserts") >= 8,
        "the txg syncs kept the merged block"
    );
    // Each sync freed the block's previous version: one version is cached, not eight.
    assert!(
        stat(&arc, "data_size") < 2 * BLOCK as u64,
        "{} bytes of data cached for one live block",
        stat(&arc, "data_size")
    );
    let misses = stat(&arc, "demand_data_misses");
    let mut buf = vec![0u8; BLOCK];
    volume.read(0, &mut buf).unwrap();
    assert_eq!(buf[..100], data[..100]);
    assert!(buf[100..612].iter().all(|&b| b == 7));
    assert_eq!(buf[612..], data[612..BLOCK]);
    assert_eq!(
        stat(&arc, "demand_data_misses"),
        misses,
        "the merged block was read from disk"
    );
    arc.assert_invariants();
    pool.close().unwrap();
}

#[test]
fn primarycache_metadata_reads_data_without_keeping_it() {
    let dir = tempfile::tempdir().unwrap();
    let arc = cache(64 << 20);
    let pool = pool_with(dir.path(), &arc);
    let blocks = 256;
    let data = volume_with_data(&pool, blocks);
    pool.set_property("tank/vol", "primarycache", "metadata")
        .unwrap();
    read_scattered(&pool, &data, blocks);
    read_scattered(&pool, &data, blocks);
    assert_eq!(
        stat(&arc, "demand_data_misses"),
        2 * blocks as u64,
        "data blocks were kept"
    );
    assert_eq!(stat(&arc, "data_size"), 0);
    assert_eq!(stat(&arc, "uncached_reads"), 2 * blocks as u64);
    assert!(
        stat(&arc, "demand_metadata_hits") > 0,
        "metadata stays cached"
    );
    pool.set_property("tank/vol", "primarycache", "all")
        .unwrap();
    read_scattered(&pool, &data, blocks);
    read_scattered(&pool, &data, blocks);
    assert_eq!(stat(&arc, "demand_data_misses"), 3 * blocks as u64);
    assert!(
        pool.set_property("tank/vol", "primarycache", "some")
            .is_err()
    );
    pool.close().unwrap();
}

#[test]
fn a_sequential_reader_finds_its_blocks_read_ahead() {
    let dir = tempfile::tempdir().unwrap();
    let arc = cache(64 << 20);
    let pool = pool_with(dir.path(), &arc);
    let blocks = 1024;
    let data = volume_with_data(&pool, blocks);
    let volume = pool.volume("tank/vol").unwrap();
    let mut buf = vec![0u8; BLOCK];
    for blkid in 0..blocks {
        volume.read((blkid * BLOCK) as u64, &mut buf).unwrap();
        assert!(
            buf[..] == data[blkid * BLOCK..(blkid + 1) * BLOCK],
            "block {blkid}"
        );
    }
    let (hits, iohits, misses) = (
        stat(&arc, "demand_data_hits"),
        stat(&arc, "demand_data_iohits"),
        stat(&arc, "demand_data_misses"),
    );
    assert_eq!(hits + iohits + misses, blocks as u64);
    assert!(
        stat(&arc, "prefetch_data_misses") > 0,
        "nothing was read ahead"
    );
    assert!(
        hits + iohits > misses,
        "read-ahead served too few reads: {hits} hits, {iohits} I/O hits, {misses} misses"
    );
    arc.assert_invariants();
    pool.close().unwrap();
}

#[test]
fn memory_pressure_shrinks_the_cache_in_steps_and_plenty_grows_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let max = 16u64 << 20;
    let arc = cache(max);
    let pool = pool_with(dir.path(), &arc);
    let blocks = 8192; // 32 MiB: twice the cache
    let data = volume_with_data(&pool, blocks);
    read_scattered(&pool, &data, blocks);
    // Readers may run a little past the target; the evictor thread brings the cache back.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while stat(&arc, "size") > max {
        assert!(
            std::time::Instant::now() < deadline,
            "the evictor left {} bytes in a cache of {max}",
            stat(&arc, "size")
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let full = stat(&arc, "size");
    assert!(full > max / 2, "cache of {max} holds {full}");
    assert!(
        stat(&arc, "evict_batches") > 0,
        "no eviction off the read path"
    );
    let short = MemoryReading {
        ram_total_bytes: Some(16 << 30),
        ram_available_bytes: Some(16 << 20), // far below 1/64 of RAM
        ..MemoryReading::default()
    };
    let mut now_ms = 0;
    let mut targets = vec![arc.target_bytes()];
    for _ in 0..200 {
        now_ms += 1000;
        arc.maintain(now_ms, &short);
        targets.push(arc.target_bytes());
        assert!(
            stat(&arc, "size") <= arc.target_bytes(),
            "size above the target"
        );
    }
    let min = stat(&arc, "c_min");
    assert_eq!(
        *targets.last().unwrap(),
        min,
        "persistent pressure ends at arc_min"
    );
    assert!(
        targets
            .windows(2)
            .all(|pair| pair[1] <= pair[0] && pair[0] - pair[1] <= (pair[0] / 32).max(1 << 20)),
        "a shrink step was not bounded: {targets:?}"
    );
    assert!(stat(&arc, "shrinks") >= 3);
    let plenty = MemoryReading {
        ram_total_bytes: Some(16 << 30),
        ram_available_bytes: Some(12 << 30),
        ..MemoryReading::default()
    };
    // Without use, the target holds (no growth for room nobody fills).
    for _ in 0..20 {
        now_ms += 1000;
        arc.maintain(now_ms, &plenty);
    }
    let idle_target = arc.target_bytes();
    // With readers filling it, it grows back to arc_max.
    for _ in 0..100 {
        read_scattered(&pool, &data, blocks);
        now_ms += 1000;
        arc.maintain(now_ms, &plenty);
        if arc.target_bytes() == max {
            break;
        }
    }
    assert!(idle_target < max);
    assert_eq!(arc.target_bytes(), max, "the cache did not grow back");
    assert!(stat(&arc, "grows") > 0);
    arc.assert_invariants();
    pool.close().unwrap();
}

#[test]
fn a_pool_leaving_the_process_takes_its_blocks_along() {
    let dir = tempfile::tempdir().unwrap();
    let arc = cache(64 << 20);
    let pool = pool_with(dir.path(), &arc);
    let data = volume_with_data(&pool, 128);
    read_scattered(&pool, &data, 128);
    assert!(stat(&arc, "blocks") >= 128);
    pool.export().unwrap();
    drop(pool);
    assert_eq!(
        stat(&arc, "blocks"),
        0,
        "an exported pool's blocks stayed cached"
    );
    assert_eq!(stat(&arc, "size"), 0);
}

/// Client reads of a file feed read-ahead, and read-ahead keeps its reads in flight together:
/// the device queue merges neighbours, so a file read in order costs far fewer device calls
/// than blocks. (With one read at a time per prefetch thread, the two counts were close.)
#[test]
fn a_file_read_in_order_is_read_ahead_in_merged_device_calls() {
    let dir = tempfile::tempdir().unwrap();
    let arc = cache(64 << 20);
    let pool = Pool::create(
        "tank",
        &[cairn_engine::VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: specs(&device_paths(dir.path(), 1)),
        }],
        &cairn_engine::CreateOptions {
            create_size_bytes: Some(DEVICE_SIZE),
            ..Default::default()
        },
        PoolOptions {
            arc: Some(arc.clone()),
            // An SSD with its latency: a read queued behind another waits, so what the queue
            // merges shows.
            ..options(latency_opener("ssd-sata"))
        },
    )
    .expect("create pool");
    // Written with nothing cached, then cached: what the reads below bring in is counted.
    let fs = new_filesystem(
        &pool,
        "tank/fs",
        &[("recordsize", "4K"), ("primarycache", "metadata")],
    );
    let blocks = 1024;
    let data = pattern(blocks * BLOCK, 11);
    let (object, _) = fs.create(fs.root(), b"seq", file(0o644)).unwrap();
    for chunk in 0..blocks / 64 {
        let at = chunk * 64 * BLOCK;
        fs.write(object, at as u64, &data[at..at + 64 * BLOCK])
            .unwrap();
    }
    pool.sync().unwrap();
    pool.set_property("tank/fs", "primarycache", "all").unwrap();
    let device_reads = |pool: &Pool| {
        let (_, leaves) = pool.io_stats();
        let fields = leaves[0].fields.clone().expect("device present");
        let field = |name: &str| fields.iter().find(|(n, _)| *n == name).unwrap().1;
        (field("read_requests"), field("read_calls"))
    };
    let (requests_before, calls_before) = device_reads(&pool);
    for blkid in 0..blocks {
        let got = fs.read(object, (blkid * BLOCK) as u64, BLOCK).unwrap();
        assert!(
            got[..] == data[blkid * BLOCK..(blkid + 1) * BLOCK],
            "block {blkid}"
        );
    }
    let (requests_after, calls_after) = device_reads(&pool);
    let (requests, calls) = (requests_after - requests_before, calls_after - calls_before);
    assert!(
        stat(&arc, "prefetch_data_misses") > blocks as u64 / 2,
        "the file was not read ahead: {} blocks ({} demand misses, {} hits)",
        stat(&arc, "prefetch_data_misses"),
        stat(&arc, "demand_data_misses"),
        stat(&arc, "demand_data_hits")
    );
    assert!(
        requests >= blocks as u64,
        "{requests} reads for {blocks} blocks"
    );
    assert!(
        calls * 4 <= requests,
        "{calls} device calls for {requests} reads: read-ahead's reads were not merged"
    );
    arc.assert_invariants();
    pool.close().unwrap();
}

/// A full send reads its data blocks ahead (issue 36: one read in flight at a time left the
/// device idle): nearly every block is read by the cache's read-ahead threads before the send
/// asks for it, and the stream still carries every block's bytes, in order.
#[test]
fn a_full_send_reads_its_blocks_ahead() {
    use cairn_format::send_stream::{StreamReader, StreamRecord};
    let dir = tempfile::tempdir().unwrap();
    let arc = cache(64 << 20);
    let pool = pool_with(dir.path(), &arc);
    let blocks = 512;
    let data = volume_with_data(&pool, blocks);
    pool.snapshot(&["tank/vol@a".into()], false).unwrap();
    let mut stream = Vec::new();
    let summary = pool
        .send("tank/vol@a", None, &mut stream, &mut |_| {})
        .unwrap();
    assert_eq!(summary.blocks_written, blocks as u64);
    let ahead = stat(&arc, "prefetch_data_misses");
    assert!(
        ahead >= blocks as u64 - 16,
        "{ahead} of {blocks} blocks read ahead ({} demand misses)",
        stat(&arc, "demand_data_misses")
    );
    let mut input = &stream[..];
    let mut reader = StreamReader::new(&mut input).unwrap();
    let mut next_offset = 0;
    while let Some(record) = reader.next_record().unwrap() {
        if let StreamRecord::Write {
            offset_bytes,
            data: block,
            ..
        } = record
        {
            assert_eq!(offset_bytes, next_offset, "blocks out of order");
            let at = offset_bytes as usize;
            assert!(block[..] == data[at..at + BLOCK], "block at {at}");
            next_offset += BLOCK as u64;
        }
    }
    assert_eq!(next_offset, (blocks * BLOCK) as u64);
    pool.close().unwrap();
}
