//! Snapshots through the pool's API: taking them (one, several, recursive; atomically), their
//! space figures against brute-force walks of the trees, their contents frozen while the head
//! changes, persistence across export and import, `pool check`, and bad input refused with
//! nothing changed.

mod common;

use cairn_dataset::VOLUME_OBJECT;
use cairn_engine::{ImportSource, Pool};
use cairn_format::BlockPointer;
use common::*;
use std::collections::{HashMap, HashSet};

const BLOCK: usize = 8192;

/// Every block of a tree by its first copy's place, with its allocated bytes.
fn blocks_of(pool: &Pool, name: &str) -> HashMap<(u32, u64), u64> {
    pool.dataset_blocks(name)
        .unwrap()
        .iter()
        .map(|bp: &BlockPointer| {
            let dva = bp.copies().first().expect("a block has a copy");
            ((dva.vdev, dva.offset), bp.allocated_bytes())
        })
        .collect()
}

/// Brute force over full walks: each snapshot's referenced and unique bytes, and the bytes
/// only the snapshots hold.
fn brute_force(pool: &Pool, dataset: &str) -> (Vec<(String, u64, u64)>, u64) {
    let snapshots: Vec<String> = pool
        .snapshots(Some(dataset))
        .unwrap()
        .into_iter()
        .map(|listing| listing.name)
        .collect();
    let head = blocks_of(pool, dataset);
    let trees: Vec<HashMap<(u32, u64), u64>> =
        snapshots.iter().map(|name| blocks_of(pool, name)).collect();
    let mut figures = Vec::new();
    for (index, name) in snapshots.iter().enumerate() {
        let referenced = trees[index].values().sum();
        let unique = trees[index]
            .iter()
            .filter(|(place, _)| {
                !head.contains_key(place)
                    && trees
                        .iter()
                        .enumerate()
                        .all(|(other, tree)| other == index || !tree.contains_key(place))
            })
            .map(|(_, bytes)| bytes)
            .sum();
        figures.push((name.clone(), referenced, unique));
    }
    let mut snapshot_only: HashSet<(u32, u64)> = HashSet::new();
    let mut snapshot_only_bytes = 0;
    for tree in &trees {
        for (place, bytes) in tree {
            if !head.contains_key(place) && snapshot_only.insert(*place) {
                snapshot_only_bytes += bytes;
            }
        }
    }
    (figures, snapshot_only_bytes)
}

/// The engine's figures agree with the brute force, and `pool check` is clean.
fn assert_accounting(pool: &Pool, dataset: &str) {
    pool.sync().unwrap();
    let (expected, snapshot_only_bytes) = brute_force(pool, dataset);
    for listing in pool.snapshots(Some(dataset)).unwrap() {
        let (_, referenced, unique) = expected
            .iter()
            .find(|(name, _, _)| *name == listing.name)
            .unwrap();
        assert_eq!(
            listing.referenced_bytes, *referenced,
            "{} referenced",
            listing.name
        );
        assert_eq!(listing.used_bytes, *unique, "{} used", listing.name);
    }
    let space = pool.snapshot_space(dataset).unwrap();
    assert_eq!(
        space.used_by_snapshots_bytes, snapshot_only_bytes,
        "usedbysnapshots"
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}

fn fill(seed: u8) -> Vec<u8> {
    (0..BLOCK)
        .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
        .collect()
}

fn write_blocks(pool: &Pool, name: &str, blocks: &[u64], seed: u8) {
    let volume = pool.volume(name).unwrap();
    for &block in blocks {
        volume.write(block * BLOCK as u64, &fill(seed)).unwrap();
    }
    volume.flush().unwrap();
}

/// Block `index` of a snapshot's volume (zeros for a hole).
fn snapshot_block(pool: &Pool, snapshot: &str, index: u64) -> Vec<u8> {
    let objset = pool.snapshot_objset(snapshot).unwrap();
    objset
        .read_block(VOLUME_OBJECT, index)
        .unwrap()
        .map_or_else(|| vec![0; BLOCK], |block| block.to_vec())
}

/// The pool `tank` of `dir` imported again (after an export).
fn reimport(dir: &std::path::Path) -> Pool {
    Pool::import(
        &ImportSource::Directory(dir.into()),
        "tank",
        options(plain_opener()),
    )
    .unwrap()
}

fn new_pool(dir: &std::path::Path) -> Pool {
    let paths = device_paths(dir, 2);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume_as(
        "tank/vol",
        4 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), BLOCK.to_string())],
    )
    .unwrap();
    pool
}

#[test]
fn a_snapshot_keeps_what_the_head_overwrites_and_the_figures_follow() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write_blocks(&pool, "tank/vol", &(0..64).collect::<Vec<_>>(), 1);
    let taken = pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    assert_eq!(taken, vec!["tank/vol@a".to_string()]);
    let a = pool.snapshot_info("tank/vol@a").unwrap();
    assert_eq!(
        a.written_bytes, a.referenced_bytes,
        "the first snapshot wrote everything"
    );
    assert_eq!(a.used_bytes, 0, "nothing died yet");
    assert_accounting(&pool, "tank/vol");

    // Overwrite 16 blocks: the old ones stay, held by @a alone.
    write_blocks(&pool, "tank/vol", &(0..16).collect::<Vec<_>>(), 2);
    assert_accounting(&pool, "tank/vol");
    let a = pool.snapshot_info("tank/vol@a").unwrap();
    assert!(
        a.used_bytes >= 16 * BLOCK as u64,
        "@a holds the overwritten blocks"
    );
    assert_eq!(
        snapshot_block(&pool, "tank/vol@a", 3),
        fill(1),
        "@a is frozen"
    );
    let head = pool.volume("tank/vol").unwrap();
    let mut now = vec![0u8; BLOCK];
    head.read(3 * BLOCK as u64, &mut now).unwrap();
    assert_eq!(now, fill(2), "the head moved on");

    // A second snapshot, then overwrites of blocks both share and of blocks only @b has.
    pool.snapshot(&["tank/vol@b".to_string()], false).unwrap();
    write_blocks(&pool, "tank/vol", &[1, 2, 40, 41], 3);
    assert_accounting(&pool, "tank/vol");
    let written = pool.written_since("tank/vol", "a").unwrap();
    assert!(written >= 18 * BLOCK as u64, "written@a counts both rounds");
    let b = pool.snapshot_info("tank/vol@b").unwrap();
    assert!(
        b.written_bytes >= 16 * BLOCK as u64,
        "@b wrote the second round"
    );

    // All of it survives export and import, and the head keeps keeping blocks after import.
    let before: Vec<_> = pool.snapshots(None).unwrap();
    pool.export().unwrap();
    let pool = reimport(dir.path());
    assert_eq!(pool.snapshots(None).unwrap(), before);
    write_blocks(&pool, "tank/vol", &[5, 6, 50], 4);
    assert_accounting(&pool, "tank/vol");
    assert_eq!(snapshot_block(&pool, "tank/vol@a", 5), fill(1));
    assert_eq!(snapshot_block(&pool, "tank/vol@b", 5), fill(2));
    assert_eq!(snapshot_block(&pool, "tank/vol@b", 50), fill(1));
}

#[test]
fn several_and_recursive_snapshots_are_taken_in_one_txg() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    pool.create_filesystem("tank/home", &[], (0, 0), 0o755)
        .unwrap();
    pool.create_filesystem("tank/home/alice", &[], (0, 0), 0o755)
        .unwrap();
    write_blocks(&pool, "tank/vol", &[0, 1], 1);
    let taken = pool
        .snapshot(&["tank/home@n".to_string(), "tank/vol@n".to_string()], true)
        .unwrap();
    assert_eq!(
        taken,
        vec!["tank/home/alice@n", "tank/home@n", "tank/vol@n"]
    );
    let listings = pool.snapshots(None).unwrap();
    assert_eq!(listings.len(), 3);
    assert!(
        listings
            .iter()
            .all(|l| l.created_txg == listings[0].created_txg),
        "one txg: {listings:?}"
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}

#[test]
fn bad_snapshot_requests_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    let txg = pool.last_synced_txg();
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for bad in [
        names(&["tank/vol@a"]),               // exists
        names(&["tank/vol@b", "tank/vol@a"]), // one bad name refuses the whole call
        names(&["tank/vol@c", "tank/vol@c"]), // asked twice
        names(&["tank/none@x"]),              // no such dataset
        names(&["tank/vol@bad name"]),
        names(&["tank/vol@a@b"]),
        names(&["tank/vol"]),
        names(&[&format!("tank/vol@{}", "x".repeat(250))]),
        names(&[]),
    ] {
        let err = pool.snapshot(&bad, false);
        assert!(err.is_err(), "{bad:?} accepted");
    }
    let listed: Vec<String> = pool
        .snapshots(None)
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(listed, vec!["tank/vol@a"]);
    assert!(
        pool.last_synced_txg() <= txg + 1,
        "refusals cost no txgs of changes"
    );
    let err = pool.destroy_dataset("tank/vol").unwrap_err().to_string();
    assert!(err.contains("snapshots"), "{err}");
}

/// Waits for a destroy's background frees: the txg engine syncs txgs for them on its own
/// (`SyncTrigger::Background`), without a write or a sync asked for.
fn wait_for_frees(pool: &Pool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pool.freeing_bytes() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} bytes still freeing after 60 s",
            pool.freeing_bytes()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The model of a volume: each block's fill seed (0: never written, reads as zeros).
type Model = Vec<u8>;

fn assert_contents(pool: &Pool, snapshot: &str, model: &Model) {
    let objset = pool.snapshot_objset(snapshot).unwrap();
    for (index, &seed) in model.iter().enumerate() {
        let block = objset.read_block(VOLUME_OBJECT, index as u64).unwrap();
        let expected = if seed == 0 {
            vec![0; BLOCK]
        } else {
            fill(seed)
        };
        let got = block.map_or_else(|| vec![0; BLOCK], |b| b.to_vec());
        assert!(
            got == expected,
            "{snapshot} block {index} differs from its model"
        );
    }
}

/// Random writes, snapshots, destroys and background frees: after every step each snapshot's
/// figures equal a brute-force walk, `pool check` is clean (deadlists, pending frees), and
/// every snapshot holds its model's contents. Then everything is destroyed and the space
/// comes back.
#[test]
fn random_snapshots_and_destroys_keep_every_figure_exact() {
    const BLOCKS: u64 = 48;
    for seed in 1..=4u64 {
        let dir = tempfile::tempdir().unwrap();
        let pool = new_pool(dir.path());
        let mut rng = Rng(seed);
        let mut head: Model = vec![0; BLOCKS as usize];
        let mut snapshots: Vec<(String, Model)> = Vec::new();
        let mut next_name = 0;
        for step in 0..24 {
            match rng.below(7) {
                0..=2 => {
                    let fill_seed = (rng.below(250) + 1) as u8;
                    let count = 1 + rng.below(8);
                    let blocks: Vec<u64> = (0..count).map(|_| rng.below(BLOCKS)).collect();
                    write_blocks(&pool, "tank/vol", &blocks, fill_seed);
                    for block in blocks {
                        head[block as usize] = fill_seed;
                    }
                }
                3 => {
                    let name = format!("tank/vol@s{next_name}");
                    next_name += 1;
                    pool.snapshot(std::slice::from_ref(&name), false).unwrap();
                    snapshots.push((name, head.clone()));
                }
                4 if !snapshots.is_empty() => {
                    let (name, _) = snapshots.remove(rng.below(snapshots.len() as u64) as usize);
                    pool.destroy_snapshot(&name).unwrap();
                    assert!(pool.snapshot_info(&name).is_err(), "{name} is gone");
                }
                5 if !snapshots.is_empty() => {
                    // Back to any snapshot; the newer ones go with -r.
                    let index = rng.below(snapshots.len() as u64) as usize;
                    pool.rollback(&snapshots[index].0, true, false).unwrap();
                    head = snapshots[index].1.clone();
                    snapshots.truncate(index + 1);
                }
                _ => {
                    pool.sync().unwrap();
                }
            }
            assert_accounting(&pool, "tank/vol");
            if step % 4 == 0 {
                for (name, model) in &snapshots {
                    assert_contents(&pool, name, model);
                }
                assert_head(&pool, &head, seed);
            }
        }
        // Half-way through freeing, export and import: the work resumes where it was.
        for (name, _) in snapshots.drain(..) {
            pool.destroy_snapshot(&name).unwrap();
        }
        pool.export().unwrap();
        let pool = reimport(dir.path());
        assert_accounting(&pool, "tank/vol");
        for _ in 0..200 {
            if pool.freeing_bytes() == 0 {
                break;
            }
            pool.sync().unwrap();
        }
        assert_eq!(
            pool.freeing_bytes(),
            0,
            "seed {seed}: the background frees finished"
        );
        assert_eq!(
            pool.snapshot_space("tank/vol")
                .unwrap()
                .used_by_snapshots_bytes,
            0
        );
        assert_accounting(&pool, "tank/vol");
        assert_head(&pool, &head, seed);
    }
}

fn assert_head(pool: &Pool, head: &Model, seed: u64) {
    let volume = pool.volume("tank/vol").unwrap();
    for (index, &fill_seed) in head.iter().enumerate() {
        let mut got = vec![0u8; BLOCK];
        volume.read(index as u64 * BLOCK as u64, &mut got).unwrap();
        let expected = if fill_seed == 0 {
            vec![0; BLOCK]
        } else {
            fill(fill_seed)
        };
        assert!(got == expected, "seed {seed}: head block {index}");
    }
}

#[test]
fn a_large_destroy_frees_in_the_background_over_several_txgs() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    let all: Vec<u64> = (0..200).collect();
    write_blocks(&pool, "tank/vol", &all, 1);
    pool.snapshot(&["tank/vol@old".to_string()], false).unwrap();
    write_blocks(&pool, "tank/vol", &all, 2);
    pool.sync().unwrap();
    let held = pool.snapshot_info("tank/vol@old").unwrap().used_bytes;
    assert!(held >= 200 * BLOCK as u64);
    let txg_before = pool.last_synced_txg();
    pool.destroy_snapshot("tank/vol@old").unwrap();
    // The tests' pools scan 8 deadlist entries per txg: 200 blocks take many txgs.
    let freeing = pool.freeing_bytes();
    assert!(
        freeing > 0 && freeing <= held,
        "freeing {freeing} of {held}"
    );
    assert_accounting(&pool, "tank/vol");
    wait_for_frees(&pool);
    assert!(
        pool.last_synced_txg() >= txg_before + 200 / 8,
        "the frees were spread over txgs ({} → {})",
        txg_before,
        pool.last_synced_txg()
    );
    assert_accounting(&pool, "tank/vol");
}

#[test]
fn a_volume_snapshot_reads_as_a_read_only_volume_and_is_kept_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write_blocks(&pool, "tank/vol", &[0, 7], 1);
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    write_blocks(&pool, "tank/vol", &[0, 7, 9], 2);
    let snap = pool.volume("tank/vol@a").unwrap();
    assert!(snap.is_readonly());
    let mut got = vec![0u8; BLOCK];
    snap.read(7 * BLOCK as u64, &mut got).unwrap();
    assert_eq!(got, fill(1));
    snap.read(9 * BLOCK as u64, &mut got).unwrap();
    assert_eq!(got, vec![0; BLOCK], "written after the snapshot");
    let err = snap.write(0, &fill(3)).unwrap_err();
    assert_eq!(err.class(), cairn_device::ErrorClass::ReadOnly, "{err}");
    assert!(
        pool.destroy_snapshot("tank/vol@a").is_err(),
        "refused while open"
    );
    drop(snap);
    pool.destroy_snapshot("tank/vol@a").unwrap();
    assert!(pool.volume("tank/vol@a").is_err());
}

#[test]
fn rollback_brings_back_the_snapshot_and_frees_what_came_after() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write_blocks(&pool, "tank/vol", &(0..16).collect::<Vec<_>>(), 1);
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    write_blocks(&pool, "tank/vol", &[1, 2, 30, 31], 2);
    pool.snapshot(&["tank/vol@b".to_string()], false).unwrap();
    write_blocks(&pool, "tank/vol", &[3, 40], 3);
    let err = pool
        .rollback("tank/vol@a", false, false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tank/vol@b"),
        "names the newer snapshot: {err}"
    );
    assert_accounting(&pool, "tank/vol");

    // To @b: only what came after it goes.
    pool.rollback("tank/vol@b", false, false).unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut got = vec![0u8; BLOCK];
    volume.read(3 * BLOCK as u64, &mut got).unwrap();
    assert_eq!(got, fill(1));
    volume.read(40 * BLOCK as u64, &mut got).unwrap();
    assert_eq!(got, vec![0; BLOCK]);
    volume.read(31 * BLOCK as u64, &mut got).unwrap();
    assert_eq!(got, fill(2));
    // Only metadata differs (the head's root, rewritten without the old intent log): the
    // exact figures are the brute force's.
    assert!(pool.snapshot_info("tank/vol@b").unwrap().used_bytes < 64 << 10);
    assert!(pool.snapshot_space("tank/vol").unwrap().written_bytes < 64 << 10);
    assert_accounting(&pool, "tank/vol");

    // Writes go on after a rollback; an open handle refuses another unless forced; then -r
    // to @a destroys @b.
    write_blocks(&pool, "tank/vol", &[5], 4);
    assert!(
        pool.rollback("tank/vol@b", false, false).is_err(),
        "a user holds it"
    );
    drop(volume);
    pool.rollback("tank/vol@a", true, false).unwrap();
    assert!(pool.snapshot_info("tank/vol@b").is_err());
    let volume = pool.volume("tank/vol").unwrap();
    for block in [1u64, 5, 31] {
        volume.read(block * BLOCK as u64, &mut got).unwrap();
        let expected = if block < 16 { fill(1) } else { vec![0; BLOCK] };
        assert_eq!(got, expected, "block {block}");
    }
    wait_for_frees(&pool);
    assert_accounting(&pool, "tank/vol");

    // And it all holds across export and import.
    pool.export().unwrap();
    let pool = reimport(dir.path());
    assert_accounting(&pool, "tank/vol");
    let volume = pool.volume("tank/vol").unwrap();
    volume.read(BLOCK as u64, &mut got).unwrap();
    assert_eq!(got, fill(1));
}

#[test]
fn a_dataset_whose_snapshots_were_destroyed_can_be_destroyed_and_the_pool_imports() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write_blocks(&pool, "tank/vol", &(0..32).collect::<Vec<_>>(), 1);
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    write_blocks(&pool, "tank/vol", &(0..32).collect::<Vec<_>>(), 2);
    pool.destroy_snapshot("tank/vol@a").unwrap();
    pool.destroy_dataset("tank/vol").unwrap();
    wait_for_frees(&pool);
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    pool.export().unwrap();
    let pool = reimport(dir.path());
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    assert!(pool.snapshots(None).unwrap().is_empty());
}

#[test]
fn a_held_snapshot_is_kept_until_released_and_destroy_d_waits_for_the_last_hold() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write_blocks(&pool, "tank/vol", &[0, 1], 1);
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    pool.snapshot(&names(&["tank/vol@a", "tank/vol@b"]), false)
        .unwrap_err();
    pool.snapshot(&names(&["tank/vol@a"]), false).unwrap();
    pool.snapshot(&names(&["tank/vol@b"]), false).unwrap();
    pool.hold("keep", &names(&["tank/vol@a", "tank/vol@b"]))
        .unwrap();
    pool.hold("backup", &names(&["tank/vol@a"])).unwrap();
    // All or none: @b has no 'backup' hold, so nothing is released.
    assert!(
        pool.release("backup", &names(&["tank/vol@a", "tank/vol@b"]))
            .is_err()
    );
    assert!(
        pool.hold("keep", &names(&["tank/vol@a"])).is_err(),
        "placed once"
    );
    let err = pool
        .hold("x", &names(&["tank/vol@none"]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");
    let holds = pool.holds(&names(&["tank/vol@a"])).unwrap();
    let tags: Vec<&str> = holds.iter().map(|(_, tag, _)| tag.as_str()).collect();
    assert_eq!(tags, ["backup", "keep"]);

    let err = pool.destroy_snapshot("tank/vol@a").unwrap_err().to_string();
    assert!(err.contains("hold"), "{err}");
    pool.destroy_snapshot_deferred("tank/vol@a").unwrap();
    assert!(pool.snapshot_info("tank/vol@a").is_ok(), "held: kept");
    pool.release("keep", &names(&["tank/vol@a", "tank/vol@b"]))
        .unwrap();
    assert!(pool.snapshot_info("tank/vol@a").is_ok(), "one hold left");
    // Holds and the deferred destroy survive export and import.
    pool.export().unwrap();
    let pool = reimport(dir.path());
    assert_eq!(pool.holds(&names(&["tank/vol@a"])).unwrap().len(), 1);
    pool.release("backup", &names(&["tank/vol@a"])).unwrap();
    assert!(
        pool.snapshot_info("tank/vol@a").is_err(),
        "gone with its last hold"
    );
    // Without holds, destroy -d destroys at once.
    pool.destroy_snapshot_deferred("tank/vol@b").unwrap();
    assert!(pool.snapshot_info("tank/vol@b").is_err());
    wait_for_frees(&pool);
    assert_accounting(&pool, "tank/vol");
}

/// A dataset has one snapshot per txg: commands racing for the same dataset each get theirs,
/// in successive txgs, and one command may not ask for two of one dataset.
#[test]
fn concurrent_snapshots_of_one_dataset_each_get_a_txg() {
    let dir = tempfile::tempdir().unwrap();
    let pool = std::sync::Arc::new(new_pool(dir.path()));
    let err = pool
        .snapshot(&["tank/vol@a".to_string(), "tank/vol@b".to_string()], false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("one snapshot"), "{err}");
    let threads: Vec<_> = (0..4)
        .map(|index| {
            let pool = pool.clone();
            std::thread::spawn(move || pool.snapshot(&[format!("tank/vol@t{index}")], false))
        })
        .collect();
    for thread in threads {
        thread.join().unwrap().unwrap();
    }
    let listings = pool.snapshots(Some("tank/vol")).unwrap();
    assert_eq!(listings.len(), 4);
    let txgs: std::collections::BTreeSet<u64> = listings.iter().map(|l| l.created_txg).collect();
    assert_eq!(txgs.len(), 4, "one txg each: {listings:?}");
    assert_accounting(&pool, "tank/vol");
}

/// `destroy -n`'s figure for a range equals a brute force (the blocks only those snapshots
/// reference), and the range then goes (in one sync task).
#[test]
fn a_range_destroy_frees_what_only_the_range_held() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    for (index, name) in ["a", "b", "c", "d"].iter().enumerate() {
        let blocks: Vec<u64> = (index as u64 * 4..index as u64 * 4 + 12).collect();
        write_blocks(&pool, "tank/vol", &blocks, index as u8 + 1);
        pool.snapshot(&[format!("tank/vol@{name}")], false).unwrap();
    }
    write_blocks(&pool, "tank/vol", &(0..24).collect::<Vec<_>>(), 9);
    pool.sync().unwrap();
    let range = pool.snapshot_range("tank/vol", "b", "c").unwrap();
    assert_eq!(range, ["tank/vol@b", "tank/vol@c"]);
    assert_eq!(pool.snapshot_range("tank/vol", "", "").unwrap().len(), 4);
    assert!(pool.snapshot_range("tank/vol", "c", "b").is_err());
    let mut kept: HashSet<(u32, u64)> = blocks_of(&pool, "tank/vol").into_keys().collect();
    for other in ["tank/vol@a", "tank/vol@d"] {
        kept.extend(blocks_of(&pool, other).into_keys());
    }
    let mut only_range: HashMap<(u32, u64), u64> = HashMap::new();
    for name in &range {
        for (place, bytes) in blocks_of(&pool, name) {
            if !kept.contains(&place) {
                only_range.insert(place, bytes);
            }
        }
    }
    let expected: u64 = only_range.values().sum();
    assert!(expected > 0);
    assert_eq!(pool.destroy_space(&range).unwrap(), expected);
    pool.destroy_snapshots(&range).unwrap();
    assert_eq!(pool.snapshots(Some("tank/vol")).unwrap().len(), 2);
    wait_for_frees(&pool);
    assert_accounting(&pool, "tank/vol");
}

#[test]
fn a_browsed_filesystem_snapshot_reads_as_it_was_and_is_closed_by_its_destroy() {
    use cairn_fs::attrs::FileKind;
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    pool.create_filesystem("tank/fs", &[], (0, 0), 0o755)
        .unwrap();
    let fs = pool.filesystem("tank/fs").unwrap();
    let new_file = cairn_fs::NewInode {
        kind: FileKind::File,
        mode: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
    };
    let (file, _) = fs.create(cairn_fs::ROOT_OBJECT, b"f", new_file).unwrap();
    fs.write(file, 0, b"before").unwrap();
    let names = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    pool.snapshot(&names(&["tank/fs@a"]), false).unwrap();
    pool.snapshot(&names(&["tank/fs@b"]), false).unwrap();
    fs.write(file, 0, b"after!").unwrap();

    let a = pool.snapshot_filesystem("tank/fs@a").unwrap();
    assert!(std::sync::Arc::ptr_eq(
        &a,
        &pool.snapshot_filesystem("tank/fs@a").unwrap()
    ));
    let read = |snapshot: &cairn_engine::SnapshotFilesystem| {
        snapshot.with(|fs| {
            let (object, _) = fs.lookup(cairn_fs::ROOT_OBJECT, b"f")?;
            fs.read(object, 0, 64)
        })
    };
    assert_eq!(read(&a).unwrap(), b"before");
    // Read-only: every change refused.
    let refused = a.with(|fs| fs.write(file, 0, b"x")).unwrap_err();
    assert!(matches!(refused, cairn_fs::FsError::ReadOnly), "{refused}");
    // Destroyed while open: closed under its user, and cannot be opened again.
    pool.destroy_snapshot("tank/fs@a").unwrap();
    assert!(!a.is_open());
    assert!(matches!(read(&a), Err(cairn_fs::FsError::NotFound)));
    assert!(pool.snapshot_filesystem("tank/fs@a").is_err());
    // A deferred destroy that happens at the last release closes it too.
    let b = pool.snapshot_filesystem("tank/fs@b").unwrap();
    pool.hold("keep", &names(&["tank/fs@b"])).unwrap();
    pool.destroy_snapshot_deferred("tank/fs@b").unwrap();
    assert_eq!(read(&b).unwrap(), b"before", "held: still there");
    pool.release("keep", &names(&["tank/fs@b"])).unwrap();
    assert!(matches!(read(&b), Err(cairn_fs::FsError::NotFound)));
    assert!(pool.snapshots(Some("tank/fs")).unwrap().is_empty());
}

/// Txgs the background frees of a snapshot whose 1,536 blocks were all overwritten take,
/// with free work per txg bounded by `free_time_per_txg_ms` alone (the entry bound huge).
fn txgs_to_free_all(free_time_per_txg_ms: u64) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror_with(
        &paths,
        cairn_engine::PoolOptions {
            free_entries_per_txg: 1 << 30,
            free_time_per_txg_ms,
            ..options(plain_opener())
        },
    );
    pool.create_volume_as(
        "tank/vol",
        32 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), BLOCK.to_string())],
    )
    .unwrap();
    let all: Vec<u64> = (0..1536).collect();
    write_blocks(&pool, "tank/vol", &all, 1);
    pool.snapshot(&["tank/vol@old".to_string()], false).unwrap();
    write_blocks(&pool, "tank/vol", &all, 2);
    pool.sync().unwrap();
    let txg_before = pool.last_synced_txg();
    pool.destroy_snapshot("tank/vol@old").unwrap();
    wait_for_frees(&pool);
    assert_accounting(&pool, "tank/vol");
    pool.last_synced_txg() - txg_before
}

#[test]
fn background_frees_stop_at_the_time_budget_of_a_txg() {
    // A budget of 0 ms: each txg makes one step (at most FREE_CHUNK_ENTRIES entries) and
    // stops, so 1,536 entries take at least 3 txgs; with no time bound, one txg frees all.
    let chunk = cairn_dataset::frees::FREE_CHUNK_ENTRIES;
    let paced = txgs_to_free_all(0);
    assert!(
        paced >= 1536 / chunk,
        "a 0 ms budget freed 1,536 entries in {paced} txgs"
    );
    let unpaced = txgs_to_free_all(u64::MAX);
    assert!(
        unpaced < 1536 / chunk,
        "without a time budget the frees took {unpaced} txgs"
    );
}

#[test]
fn a_snapshot_command_with_its_history_takes_exactly_one_txg() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path());
    write_blocks(&pool, "tank/vol", &[0, 1], 1);
    pool.sync().unwrap();
    for round in 0..3 {
        let before = pool.last_synced_txg();
        let entry = format!("snapshot tank/vol@h{round}");
        pool.snapshot_with_history(&[format!("tank/vol@h{round}")], false, Some(entry.clone()))
            .unwrap();
        assert_eq!(pool.last_synced_txg(), before + 1, "round {round}");
        assert!(
            pool.history()
                .last()
                .is_some_and(|last| last.ends_with(&entry)),
            "{:?}",
            pool.history().last()
        );
        write_blocks(&pool, "tank/vol", &[round], 2);
    }
    let before = pool.last_synced_txg();
    let names: Vec<String> = (0..3).map(|round| format!("tank/vol@h{round}")).collect();
    pool.destroy_snapshots_with_history(&names, Some("destroy tank/vol@h0%h2".into()))
        .unwrap();
    assert_eq!(pool.last_synced_txg(), before + 1);
    assert!(
        pool.history()
            .last()
            .is_some_and(|last| last.ends_with("destroy tank/vol@h0%h2"))
    );
    // Both durable: the history and the snapshots' absence survive an export and import.
    pool.export().unwrap();
    let pool = reimport(dir.path());
    assert!(pool.snapshots(Some("tank/vol")).unwrap().is_empty());
    assert!(
        pool.history()
            .iter()
            .any(|entry| entry.ends_with("snapshot tank/vol@h1"))
    );
}
