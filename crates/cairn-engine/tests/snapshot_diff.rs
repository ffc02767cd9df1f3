//! `Pool::diff_blocks` (`cairn diff --blocks`): the ranges it reports between two snapshots,
//! and between a snapshot and the live volume, equal a brute-force comparison of both sides
//! read through the volume API, block by block, after random writes, trims, zeroing and
//! rewrites of unchanged bytes; its walk reads a number of blocks that follows the change, not
//! the volume; and what cannot be compared is refused.

mod common;

use cairn_engine::{ByteRange, EngineError, Pool};
use common::*;

/// The ranges of whole `block_bytes` blocks whose bytes differ between two names, read
/// through the volume API (snapshots open as read-only volumes), merged.
fn brute_force(pool: &Pool, older: &str, newer: &str, block_bytes: u64) -> Vec<ByteRange> {
    let (a, b) = (pool.volume(older).unwrap(), pool.volume(newer).unwrap());
    let size = a.size_bytes();
    let mut ranges: Vec<ByteRange> = Vec::new();
    let (mut left, mut right) = (
        vec![0u8; block_bytes as usize],
        vec![0u8; block_bytes as usize],
    );
    for offset in (0..size).step_by(block_bytes as usize) {
        a.read(offset, &mut left).unwrap();
        b.read(offset, &mut right).unwrap();
        if left == right {
            continue;
        }
        match ranges.last_mut() {
            Some(last) if last.offset_bytes + last.length_bytes == offset => {
                last.length_bytes += block_bytes;
            }
            _ => ranges.push(ByteRange {
                offset_bytes: offset,
                length_bytes: block_bytes,
            }),
        }
    }
    ranges
}

fn new_pool(dir: &std::path::Path, size_bytes: u64, block_bytes: u64) -> Pool {
    let pool = create_mirror(&device_paths(dir, 2), plain_opener());
    pool.create_volume_as(
        "tank/vol",
        size_bytes,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), block_bytes.to_string())],
    )
    .unwrap();
    pool
}

/// One random change: a write (whole blocks or not, across block boundaries), a trim, a
/// write of zeros, or a block written again with the bytes it holds.
fn random_change(pool: &Pool, rng: &mut Rng, size: u64, block: u64) {
    let volume = pool.volume("tank/vol").unwrap();
    let offset = rng.below(size);
    let len = (1 + rng.below(3 * block)).min(size - offset);
    match rng.below(8) {
        0 => volume.trim(offset, len).unwrap(),
        1 => volume.write_zeroes(offset, len).unwrap(),
        2 => {
            // The same bytes again: a block rewritten, its contents unchanged.
            let start = offset / block * block;
            let mut same = vec![0u8; block as usize];
            volume.read(start, &mut same).unwrap();
            volume.write(start, &same).unwrap();
        }
        _ => volume
            .write(offset, &pattern(len as usize, rng.next()))
            .unwrap(),
    }
}

fn assert_diff(pool: &Pool, older: &str, newer: &str, block: u64) {
    let reported = pool.diff_blocks(older, newer).unwrap();
    let expected = brute_force(pool, older, newer, block);
    assert_eq!(
        reported.ranges, expected,
        "{older} -> {newer}: reported (left) vs brute force (right)"
    );
}

#[test]
fn reported_ranges_equal_a_brute_force_comparison() {
    const SIZE: u64 = 2 << 20;
    const BLOCK: u64 = 8192;
    for seed in 1..=3u64 {
        let dir = tempfile::tempdir().unwrap();
        let pool = new_pool(dir.path(), SIZE, BLOCK);
        let mut rng = Rng(seed);
        // Most of the volume holds data, some of it is holes, before the first snapshot.
        let volume = pool.volume("tank/vol").unwrap();
        for chunk in 0..SIZE / (64 << 10) {
            if rng.below(4) != 0 {
                volume
                    .write(chunk * (64 << 10), &pattern(64 << 10, rng.next()))
                    .unwrap();
            }
        }
        volume.flush().unwrap();
        pool.snapshot(&["tank/vol@a".into()], false).unwrap();
        for _ in 0..40 {
            random_change(&pool, &mut rng, SIZE, BLOCK);
        }
        // A trimmed range of whole blocks that held data at @a: holes with no birth.
        volume.trim(BLOCK * 64, BLOCK * 16).unwrap();
        pool.snapshot(&["tank/vol@b".into()], false).unwrap();
        for _ in 0..40 {
            random_change(&pool, &mut rng, SIZE, BLOCK);
        }
        // Some changes still in memory: the live side syncs first.
        assert_diff(&pool, "tank/vol@a", "tank/vol@b", BLOCK);
        assert_diff(&pool, "tank/vol@b", "tank/vol", BLOCK);
        assert_diff(&pool, "tank/vol@a", "tank/vol", BLOCK);
        // With nothing written since, nothing differs.
        pool.snapshot(&["tank/vol@c".into()], false).unwrap();
        assert_eq!(
            pool.diff_blocks("tank/vol@c", "tank/vol").unwrap().ranges,
            vec![]
        );
    }
}

#[test]
fn the_walk_reads_what_changed_not_the_volume() {
    const SIZE: u64 = 16 << 20;
    const BLOCK: u64 = 4096;
    let blocks = SIZE / BLOCK;
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path(), SIZE, BLOCK);
    let volume = pool.volume("tank/vol").unwrap();
    for chunk in 0..SIZE / (1 << 20) {
        volume
            .write(chunk << 20, &pattern(1 << 20, chunk + 1))
            .unwrap();
    }
    volume.flush().unwrap();
    pool.snapshot(&["tank/vol@a".into()], false).unwrap();
    // 1% of the blocks: half rewritten, half trimmed (freed), at random places.
    let mut rng = Rng(7);
    let changed = blocks / 100;
    for index in 0..changed {
        let offset = rng.below(blocks) * BLOCK;
        if index % 2 == 0 {
            volume
                .write(offset, &pattern(BLOCK as usize, index))
                .unwrap();
        } else {
            volume.trim(offset, BLOCK).unwrap();
        }
    }
    let diff = pool.diff_blocks("tank/vol@a", "tank/vol").unwrap();
    assert_eq!(
        diff.ranges,
        brute_force(&pool, "tank/vol@a", "tank/vol", BLOCK)
    );
    let reported_blocks: u64 = diff.ranges.iter().map(|r| r.length_bytes / BLOCK).sum();
    assert!(
        reported_blocks > changed / 2,
        "{reported_blocks} blocks reported"
    );
    assert!(
        diff.blocks_visited * 20 < blocks,
        "the walk visited {} of {blocks} blocks for {changed} changed",
        diff.blocks_visited
    );
    assert_visits(&diff, BLOCK, (0..blocks / PER_INDIRECT).collect());
    // A later snapshot against the live volume with nothing changed: only the roots.
    pool.snapshot(&["tank/vol@b".into()], false).unwrap();
    let diff = pool.diff_blocks("tank/vol@b", "tank/vol").unwrap();
    assert!(diff.ranges.is_empty());
    assert!(
        diff.blocks_visited <= FIXED_VISITS,
        "{} visited",
        diff.blocks_visited
    );
    // Changes under one level-1 indirect block (of four): the other three are not read.
    for index in 0..20 {
        let offset = (PER_INDIRECT + rng.below(PER_INDIRECT)) * BLOCK;
        if index % 2 == 0 {
            volume
                .write(offset, &pattern(BLOCK as usize, index))
                .unwrap();
        } else {
            volume.trim(offset, BLOCK).unwrap();
        }
    }
    let diff = pool.diff_blocks("tank/vol@b", "tank/vol").unwrap();
    assert_eq!(
        diff.ranges,
        brute_force(&pool, "tank/vol@b", "tank/vol", BLOCK)
    );
    assert_visits(&diff, BLOCK, [1].into());
}

/// Block pointers per indirect block (128 KiB of 128-byte pointers).
const PER_INDIRECT: u64 = 1024;
/// Blocks any diff of a changed volume reads: each side's object-set root, the meta-dnode's
/// indirect and dnode blocks, and the volume tree's top (level-2) block.
const FIXED_VISITS: u64 = 10;

/// The walk read nothing but the changed blocks, the level-1 indirect blocks above them
/// (`changed_l1`, by index) on both sides, and the fixed few.
fn assert_visits(
    diff: &cairn_engine::BlockDiff,
    block: u64,
    changed_l1: std::collections::BTreeSet<u64>,
) {
    let reported_blocks: u64 = diff.ranges.iter().map(|r| r.length_bytes / block).sum();
    let most = reported_blocks + 2 * changed_l1.len() as u64 + FIXED_VISITS;
    assert!(
        diff.blocks_visited >= reported_blocks && diff.blocks_visited <= most,
        "{} blocks visited for {reported_blocks} changed under {} level-1 blocks (at most {most})",
        diff.blocks_visited,
        changed_l1.len()
    );
}

#[test]
fn what_cannot_be_compared_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path(), 1 << 20, 8192);
    pool.create_volume_as(
        "tank/other",
        1 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[],
    )
    .unwrap();
    pool.create_filesystem("tank/fs", &[], (0, 0), 0o755)
        .unwrap();
    pool.snapshot(
        &[
            "tank/vol@a".into(),
            "tank/other@a".into(),
            "tank/fs@a".into(),
        ],
        false,
    )
    .unwrap();
    pool.snapshot(&["tank/vol@b".into()], false).unwrap();
    let refused = |older: &str, newer: &str| match pool.diff_blocks(older, newer) {
        Err(EngineError::Diff(reason)) => reason,
        other => panic!("{older} {newer}: {other:?}"),
    };
    assert!(refused("tank/vol@b", "tank/vol@a").contains("not older"));
    assert!(refused("tank/vol@a", "tank/vol@a").contains("not older"));
    assert!(refused("tank/vol", "tank/vol@a").contains("not a snapshot"));
    assert!(refused("tank/vol@a", "tank/other").contains("not of one dataset"));
    assert!(refused("tank/vol@a", "tank/other@a").contains("not of one dataset"));
    assert!(refused("tank/fs@a", "tank/fs").contains("not a volume"));
    assert!(matches!(
        pool.diff_blocks("tank/vol@nope", "tank/vol"),
        Err(EngineError::Dataset(
            cairn_dataset::DatasetError::NoSuchDataset(_)
        ))
    ));
}
