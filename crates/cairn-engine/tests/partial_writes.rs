//! Partial writes without a read first (cairn-object's `patch.rs`): a write covering part of a
//! block records only its bytes when the old block is not in memory; reads merge on the fly;
//! the txg sync merges for good. Checked against a model of the bytes, across syncs, an
//! export and import, and a crash replayed from the intent log.

mod common;

use cairn_engine::Pool;
use common::*;

const BLOCK: usize = 16 << 10;
const VOLUME_BYTES: usize = 4 << 20;

fn volume_properties() -> Vec<(String, String)> {
    vec![("volblocksize".into(), BLOCK.to_string())]
}

fn read_all(pool: &Pool) -> Vec<u8> {
    let volume = pool.volume("tank/vol").unwrap();
    let mut buf = vec![0u8; VOLUME_BYTES];
    volume.read(0, &mut buf).unwrap();
    buf
}

/// A pool whose volume holds `model` on disk, imported again so that no block is in memory.
fn cold_pool(dir: &std::path::Path, model: &[u8]) -> (Vec<std::path::PathBuf>, Pool) {
    let paths = device_paths(dir, 2);
    {
        let pool = create_mirror(&paths, plain_opener());
        pool.create_volume("tank/vol", VOLUME_BYTES as u64, &volume_properties())
            .unwrap();
        let volume = pool.volume("tank/vol").unwrap();
        volume.write(0, model).unwrap();
        volume.flush().unwrap();
        pool.export().unwrap();
    }
    let pool = import(&paths, plain_opener()).unwrap();
    (paths, pool)
}

#[test]
fn partial_writes_into_cold_blocks_wait_for_no_read_and_merge_at_sync() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = pattern(VOLUME_BYTES, 1);
    let (paths, pool) = cold_pool(dir.path(), &model);
    let volume = pool.volume("tank/vol").unwrap();
    let before = volume.objset().patch_stats();
    // 8 KiB writes into the second half of every other 16 KiB block: none is in memory.
    let mut written = 0u64;
    for (index, block) in (0..VOLUME_BYTES / BLOCK).step_by(2).enumerate() {
        let offset = block * BLOCK + BLOCK / 2;
        let data = pattern(BLOCK / 2, 100 + index as u64);
        volume.write(offset as u64, &data).unwrap();
        model[offset..offset + data.len()].copy_from_slice(&data);
        written += 1;
    }
    let after = volume.objset().patch_stats();
    assert_eq!(
        after.deferred - before.deferred,
        written,
        "every partial write into a cold block was recorded without a read"
    );
    // The bytes a write gave read back without the old block; whole blocks merge on the fly.
    let mut piece = vec![0u8; BLOCK / 2];
    volume.read((BLOCK / 2) as u64, &mut piece).unwrap();
    assert_eq!(piece, model[BLOCK / 2..BLOCK]);
    assert!(read_all(&pool) == model, "merged on read before the sync");
    // A second partial write into a patched block extends its patch.
    volume.write(100, &[7u8; 50]).unwrap();
    model[100..150].fill(7);
    assert!(read_all(&pool) == model, "merged on read with two ranges");
    pool.sync().unwrap();
    let synced = volume.objset().patch_stats();
    assert_eq!(
        synced.resolved - after.resolved,
        written,
        "the txg sync merged every patched block"
    );
    assert_eq!(synced.bases_lost, 0);
    assert!(read_all(&pool) == model, "after the sync");
    drop(volume);
    pool.export().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    assert!(read_all(&pool) == model, "after export and import");
}

#[test]
fn random_partial_full_and_zeroing_writes_match_a_model_across_syncs() {
    for seed in 1..=4u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut model = pattern(VOLUME_BYTES, seed);
        let (paths, pool) = cold_pool(dir.path(), &model);
        let volume = pool.volume("tank/vol").unwrap();
        let mut rng = Rng(seed * 7919);
        for step in 0..600 {
            let offset = rng.below(VOLUME_BYTES as u64 - 1) as usize;
            let len = (1 + rng.below(3 * BLOCK as u64) as usize).min(VOLUME_BYTES - offset);
            match rng.below(10) {
                0..=5 => {
                    let data = pattern(len, rng.next());
                    volume.write(offset as u64, &data).unwrap();
                    model[offset..offset + len].copy_from_slice(&data);
                }
                6 => {
                    volume.write_zeroes(offset as u64, len as u64).unwrap();
                    model[offset..offset + len].fill(0);
                }
                7 => {
                    let mut buf = vec![0u8; len];
                    volume.read(offset as u64, &mut buf).unwrap();
                    assert!(
                        buf == model[offset..offset + len],
                        "seed {seed} step {step}: read of {len} at {offset}"
                    );
                }
                8 => {
                    pool.sync().unwrap();
                }
                _ => {
                    // Into a whole block that is surely cold after a sync: many small writes.
                    let block = rng.below((VOLUME_BYTES / BLOCK) as u64) as usize * BLOCK;
                    for _ in 0..4 {
                        let at = block + rng.below(BLOCK as u64 - 512) as usize;
                        let data = pattern(512, rng.next());
                        volume.write(at as u64, &data).unwrap();
                        model[at..at + 512].copy_from_slice(&data);
                    }
                }
            }
        }
        assert!(
            read_all(&pool) == model,
            "seed {seed}: before the last sync"
        );
        pool.sync().unwrap();
        assert!(read_all(&pool) == model, "seed {seed}: after the last sync");
        let stats = volume.objset().patch_stats();
        assert!(stats.deferred > 0, "seed {seed}: the deferred path ran");
        assert!(
            stats.merged_at_write > 0,
            "seed {seed}: the in-memory path ran"
        );
        assert_eq!(stats.bases_lost, 0);
        drop(volume);
        pool.export().unwrap();
        let pool = import(&paths, plain_opener()).unwrap();
        assert!(read_all(&pool) == model, "seed {seed}: after import");
    }
}

#[test]
fn flushed_partial_writes_survive_a_power_cut_through_the_intent_log() {
    use cairn_emulate::PowerSwitch;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let mut model = pattern(VOLUME_BYTES, 9);
    let (paths, pool) = cold_pool(dir.path(), &model);
    pool.export().unwrap();
    drop(pool);
    let power = Arc::new(PowerSwitch::with_seed(3));
    {
        let pool = import(&paths, emulated_opener(3, Some(power.clone()))).unwrap();
        let volume = pool.volume("tank/vol").unwrap();
        let mut rng = Rng(99);
        for _ in 0..200 {
            let offset = rng.below((VOLUME_BYTES - BLOCK) as u64) as usize;
            let len = 1 + rng.below(BLOCK as u64 / 2) as usize;
            let data = pattern(len, rng.next());
            volume.write(offset as u64, &data).unwrap();
            model[offset..offset + len].copy_from_slice(&data);
        }
        assert!(
            volume.objset().patch_stats().deferred > 0,
            "writes deferred"
        );
        // The flush commits the log (reading back what it must copy: the patches cover it);
        // the txg never syncs before the cut.
        volume.flush().unwrap();
        power.cut_now();
        drop(volume);
        drop(pool);
    }
    let pool = import(&paths, plain_opener()).unwrap();
    assert!(read_all(&pool) == model, "replayed partial writes");
}
