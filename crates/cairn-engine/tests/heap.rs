//! The heap a txg sync frees: kept for the ARC to fill into while it has room for all of it,
//! handed back to the kernel once writing pauses when it has not. A test binary of its own:
//! the decision reads the process's free heap, which other tests' allocations would move.

mod common;

use cairn_engine::{ArcConfig, Pool, PoolOptions, ReadCache};
use common::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const VOLUME_BYTES: usize = 16 << 20;
/// The maintenance thread looks once a second and trims 2 s after the last large free.
const DECISION_WAIT: Duration = Duration::from_secs(10);

fn stat(cache: &ReadCache, name: &str) -> u64 {
    cache
        .stats()
        .get(name)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

fn pool_with(dir: &std::path::Path, arc: &Arc<ReadCache>) -> Pool {
    let options = PoolOptions {
        arc: Some(arc.clone()),
        ..options(plain_opener())
    };
    create_mirror_with(&device_paths(dir, 1), options)
}

/// Writes `VOLUME_BYTES` to volume `name` and syncs: a txg whose dirty buffers are then freed.
fn write_and_sync(pool: &Pool, name: &str, seed: u64) {
    pool.create_volume(
        name,
        VOLUME_BYTES as u64,
        &[("volblocksize".into(), (128 << 10).to_string())],
    )
    .unwrap();
    let volume = pool.volume(name).unwrap();
    volume.write(0, &pattern(VOLUME_BYTES, seed)).unwrap();
    pool.sync().unwrap();
}

/// Waits until the quiet-point decision after the latest large free has been made.
fn wait_for_decision(cache: &ReadCache, kept_before: u64, trims_before: u64) {
    let deadline = Instant::now() + DECISION_WAIT;
    while stat(cache, "heap_kept") == kept_before && stat(cache, "heap_trims") == trims_before {
        assert!(
            Instant::now() < deadline,
            "no trim decision within {DECISION_WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn freed_write_heap_is_kept_while_the_cache_has_room_and_trimmed_when_not() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ReadCache::new(ArcConfig {
        max_bytes: 1 << 30,
        min_bytes: 128 * MIB,
        shards: 4,
        prefetch_threads: 1,
    });
    cache.start_maintenance();
    let pool = pool_with(dir.path(), &cache);

    // A cache of 1 GiB holding next to nothing has room for the 16 MiB just freed.
    write_and_sync(&pool, "tank/a", 1);
    wait_for_decision(&cache, 0, 0);
    assert_eq!(
        (stat(&cache, "heap_kept"), stat(&cache, "heap_trims")),
        (1, 0),
        "the freed heap fits the cache's room: kept, not trimmed"
    );

    // A full cache has no room: the next burst's heap goes back to the kernel.
    cache.set_limits(8 * MIB, 8 * MIB).unwrap();
    let trims_before = stat(&cache, "heap_trims");
    write_and_sync(&pool, "tank/b", 2);
    wait_for_decision(&cache, 1, trims_before);
    assert_eq!(stat(&cache, "heap_kept"), 1, "no room: nothing more kept");
    assert!(stat(&cache, "heap_trims") > trims_before);
    pool.export().unwrap();
}
