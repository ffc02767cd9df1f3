//! The SSD tier in a real pool (issue 14): blocks read from the pool are kept on cache devices
//! and served from there, verified; faults of a cache device (EIO, flipped bits, a vanished
//! device) and damage found at import (corrupted, truncated or deleted cache devices) never
//! yield wrong data and never take the pool out of ONLINE. The volume's `primarycache=metadata`
//! keeps its data out of RAM, so every read of it goes below the ARC.

mod common;

use cairn_device::Device;
use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::spec::DeviceSpec;
use cairn_emulate::{DeviceModel, EmuOptions, EmulatedDevice, FaultConfig};
use cairn_engine::{
    ArcConfig, DeviceOpener, ImportSource, L2Config, L2Health, Pool, PoolOptions, ReadCache,
};
use common::*;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

const BLOCK: usize = 4096;
const BLOCKS: usize = 600;
const CACHE_DEVICE_SIZE: u64 = 32 << 20;

/// Opens pool devices as plain emulated devices, and the cache device as an emulated one the
/// test can inject faults into (kept in `cache_device`).
struct Devices {
    opener: DeviceOpener,
    cache_device: Arc<Mutex<Option<Arc<EmulatedDevice>>>>,
}

fn devices() -> Devices {
    let cache_device: Arc<Mutex<Option<Arc<EmulatedDevice>>>> = Arc::new(Mutex::new(None));
    let slot = cache_device.clone();
    let opener: DeviceOpener = Arc::new(move |spec: &DeviceSpec, create: Option<u64>| {
        let file: Arc<dyn Device> = Arc::new(FileDevice::open(
            &spec.path,
            FileOptions {
                create_size_bytes: create,
                ..FileOptions::default()
            },
        )?);
        let device = EmulatedDevice::new(
            file,
            DeviceModel::Ram,
            EmuOptions {
                clock: None,
                ..EmuOptions::default()
            },
        );
        if spec.path.file_name().is_some_and(|name| name == "c0.img") {
            *slot.lock() = Some(device.clone());
        }
        Ok(device as Arc<dyn Device>)
    });
    Devices {
        opener,
        cache_device,
    }
}

fn pool_options(devices: &Devices, arc: &Arc<ReadCache>, cache: Vec<DeviceSpec>) -> PoolOptions {
    PoolOptions {
        arc: Some(arc.clone()),
        l2: L2Config {
            segment_bytes: 1 << 20,
            write_chunk_bytes: 256 << 10,
            feed_linger_ms: 5,
            ..L2Config::default()
        },
        cache_devices: cache,
        ..options(devices.opener.clone())
    }
}

fn arc() -> Arc<ReadCache> {
    ReadCache::new(ArcConfig {
        max_bytes: 64 << 20,
        min_bytes: 8 << 20,
        shards: 4,
        prefetch_threads: 2,
    })
}

fn cache_spec(dir: &Path) -> DeviceSpec {
    DeviceSpec {
        path: dir.join("c0.img"),
        model: None,
    }
}

/// A pool of one device with one cache device and a volume of `BLOCKS` random blocks whose
/// data the ARC does not keep.
fn pool_with_cache(dir: &Path, devices: &Devices, arc: &Arc<ReadCache>) -> (Pool, Vec<u8>) {
    let pool = create_mirror_with(
        &device_paths(dir, 1),
        pool_options(devices, arc, Vec::new()),
    );
    pool.add_cache_devices(
        &[cache_spec(dir)],
        Some(CACHE_DEVICE_SIZE),
        false,
        &devices.opener,
    )
    .expect("add cache device");
    pool.create_volume(
        "tank/vol",
        (BLOCKS * BLOCK) as u64,
        &[("volblocksize".into(), BLOCK.to_string())],
    )
    .unwrap();
    pool.set_property("tank/vol", "primarycache", "metadata")
        .unwrap();
    let mut rng = Rng(11);
    let data: Vec<u8> = (0..BLOCKS * BLOCK).map(|_| rng.next() as u8).collect();
    pool.volume("tank/vol").unwrap().write(0, &data).unwrap();
    pool.sync().unwrap();
    (pool, data)
}

/// Reads every block in a scattered order, asserting each is right.
fn read_all(pool: &Pool, data: &[u8]) {
    let volume = pool.volume("tank/vol").unwrap();
    let mut buf = vec![0u8; BLOCK];
    for i in 0..BLOCKS {
        let blkid = (i * 37) % BLOCKS;
        volume.read((blkid * BLOCK) as u64, &mut buf).unwrap();
        assert!(
            buf[..] == data[blkid * BLOCK..(blkid + 1) * BLOCK],
            "block {blkid} read back other bytes"
        );
    }
}

fn l2_hits(pool: &Pool) -> u64 {
    pool.l2().unwrap().counters().hits.load(Ordering::Relaxed)
}

fn fill_cache(pool: &Pool, data: &[u8]) {
    read_all(pool, data);
    pool.l2().unwrap().settle();
}

#[test]
fn cache_devices_serve_reads_and_their_faults_never_return_wrong_data() {
    let dir = tempfile::tempdir().unwrap();
    let devices = devices();
    let arc = arc();
    let (pool, data) = pool_with_cache(dir.path(), &devices, &arc);
    fill_cache(&pool, &data);
    let before = l2_hits(&pool);
    read_all(&pool, &data);
    assert!(
        l2_hits(&pool) - before >= BLOCKS as u64,
        "the second pass did not come from the cache device"
    );
    // With secondarycache=none the tier is neither read nor fed.
    pool.set_property("tank/vol", "secondarycache", "none")
        .unwrap();
    let before = l2_hits(&pool);
    read_all(&pool, &data);
    assert_eq!(l2_hits(&pool), before, "secondarycache=none read the cache");
    pool.set_property("tank/vol", "secondarycache", "all")
        .unwrap();

    let cache_device = devices
        .cache_device
        .lock()
        .clone()
        .expect("cache device opened");
    cache_device.set_faults(FaultConfig {
        read_bit_flip_probability: 0.3,
        read_eio_probability: 0.05,
        ..FaultConfig::default()
    });
    read_all(&pool, &data);
    let status = &pool.cache_status()[0];
    let report = status.report.as_ref().unwrap();
    assert!(
        report.checksum_errors + report.read_errors > 0,
        "faults were injected but none was seen"
    );
    cache_device.set_faults(FaultConfig {
        missing: true,
        ..FaultConfig::default()
    });
    read_all(&pool, &data);
    read_all(&pool, &data);
    let report = pool.cache_status()[0].report.clone().unwrap();
    assert_eq!(report.health, L2Health::Faulted);
    assert_eq!(pool.status().health, cairn_pool::vdev::Health::Online);
    pool.close().unwrap();
}

fn reimport(dir: &Path, devices: &Devices, arc: &Arc<ReadCache>) -> Pool {
    // The test's handle on the last cache device would keep its file locked.
    devices.cache_device.lock().take();
    Pool::import(
        &ImportSource::Devices(specs(&device_paths(dir, 1))),
        "tank",
        pool_options(devices, arc, vec![cache_spec(dir)]),
    )
    .expect("import with a damaged cache device")
}

fn corrupt(path: &PathBuf, offset: u64, len: usize) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let mut rng = Rng(5);
    let garbage: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
    file.write_all_at(&garbage, offset).unwrap();
}

#[test]
fn a_restart_finds_the_cache_and_damaged_cache_devices_cost_only_hits() {
    let dir = tempfile::tempdir().unwrap();
    let devices = devices();
    let arc = arc();
    let (pool, data) = pool_with_cache(dir.path(), &devices, &arc);
    fill_cache(&pool, &data);
    pool.close().unwrap();
    drop(pool);

    // A clean restart: the index is rebuilt and reads hit.
    let pool = reimport(dir.path(), &devices, &arc);
    pool.l2().unwrap().settle();
    read_all(&pool, &data);
    let counters = pool.l2().unwrap().counters();
    assert!(
        l2_hits(&pool) >= BLOCKS as u64,
        "no hits after a restart: {counters:?}, {:?}",
        pool.cache_status()
    );
    pool.close().unwrap();
    drop(pool);

    // Garbage over the middle of the cache device: right data, some hits lost.
    let path = cache_spec(dir.path()).path;
    corrupt(&path, 2 << 20, 1 << 20);
    let pool = reimport(dir.path(), &devices, &arc);
    pool.l2().unwrap().settle();
    read_all(&pool, &data);
    assert_eq!(pool.status().health, cairn_pool::vdev::Health::Online);
    pool.close().unwrap();
    drop(pool);

    // Truncated to a few MiB: segments past the end cannot be read; still right data.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(3 << 20)
        .unwrap();
    let pool = reimport(dir.path(), &devices, &arc);
    pool.l2().unwrap().settle();
    read_all(&pool, &data);
    read_all(&pool, &data);
    assert_eq!(pool.status().health, cairn_pool::vdev::Health::Online);
    pool.close().unwrap();
    drop(pool);

    // Deleted: the pool imports ONLINE, says so, and lists the device as missing.
    std::fs::remove_file(&path).unwrap();
    let pool = reimport(dir.path(), &devices, &arc);
    assert!(
        pool.notes()
            .iter()
            .any(|note| note.contains("cache device")),
        "no note about the missing cache device: {:?}",
        pool.notes()
    );
    let status = pool.cache_status();
    assert_eq!(status.len(), 1);
    assert!(status[0].missing.is_some());
    read_all(&pool, &data);
    assert_eq!(pool.status().health, cairn_pool::vdev::Health::Online);
    pool.close().unwrap();
}

#[test]
fn ram_evictions_are_counted_by_whether_the_cache_device_had_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let devices = devices();
    // RAM for a fraction of the volume, so the passes below evict.
    let small = ReadCache::new(ArcConfig {
        max_bytes: 1 << 20,
        min_bytes: 1 << 19,
        shards: 1,
        prefetch_threads: 1,
    });
    let (pool, data) = pool_with_cache(dir.path(), &devices, &small);
    pool.set_property("tank/vol", "primarycache", "all")
        .unwrap();
    let stat = |name: &str| small.stats().get(name).unwrap_or(0);
    read_all(&pool, &data);
    pool.l2().unwrap().settle();
    read_all(&pool, &data);
    pool.l2().unwrap().settle();
    // The tier is fed as RAM evicts: during the first passes the evicted blocks were offered
    // (and taken, counted as cached, unless refused or dropped); by now the cache device holds
    // them, and an eviction of a block it holds counts as cached.
    let (cached_before, eligible_before) = (stat("evict_l2_cached"), stat("evict_l2_eligible"));
    read_all(&pool, &data);
    let cached = stat("evict_l2_cached") - cached_before;
    let eligible = stat("evict_l2_eligible") - eligible_before;
    assert!(
        cached > 0,
        "no eviction found its block on the cache device"
    );
    assert!(
        eligible * 4 < cached,
        "evicted while on the cache device {cached} B, eligible but not there {eligible} B"
    );
    pool.close().unwrap();
}

#[test]
fn evictions_of_blocks_secondarycache_excludes_are_ineligible() {
    let dir = tempfile::tempdir().unwrap();
    let devices = devices();
    let small = ReadCache::new(ArcConfig {
        max_bytes: 1 << 20,
        min_bytes: 1 << 19,
        shards: 1,
        prefetch_threads: 1,
    });
    let (pool, data) = pool_with_cache(dir.path(), &devices, &small);
    pool.set_property("tank/vol", "primarycache", "all")
        .unwrap();
    pool.set_property("tank/vol", "secondarycache", "none")
        .unwrap();
    pool.l2().unwrap().settle();
    let stat = |name: &str| small.stats().get(name).unwrap_or(0);
    let before = [stat("evict_l2_eligible"), stat("evict_l2_ineligible")];
    read_all(&pool, &data);
    read_all(&pool, &data);
    let eligible = stat("evict_l2_eligible") - before[0];
    let ineligible = stat("evict_l2_ineligible") - before[1];
    assert!(ineligible > 0, "nothing evicted");
    assert_eq!(
        eligible, 0,
        "blocks the dataset keeps off the cache devices counted as the feed's misses"
    );
    pool.close().unwrap();
}
