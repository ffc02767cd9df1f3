//! Clones through the pool's API: a clone shares its origin's blocks (and their cache
//! entries), writes to it are its own, its space figures and its origin's equal brute-force
//! walks after every step of a random mix of writes, snapshots, clones, promotes, rollbacks and
//! destroys, and everything survives export and import with `pool check` clean. Bad requests
//! are refused and change nothing.

mod common;

use cairn_dataset::VOLUME_OBJECT;
use cairn_engine::{ArcConfig, ImportSource, Pool, PoolOptions, ReadCache};
use common::family::{assert_family, tear_down, wait_for_frees};
use common::*;

const BLOCK: usize = 8192;
const BLOCKS: u64 = 40;

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

fn new_pool(dir: &std::path::Path, arc: Option<std::sync::Arc<ReadCache>>) -> Pool {
    let paths = device_paths(dir, 2);
    let pool = create_mirror_with(
        &paths,
        PoolOptions {
            arc,
            ..options(plain_opener())
        },
    );
    pool.create_volume_as(
        "tank/vol",
        BLOCKS * BLOCK as u64,
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), BLOCK.to_string())],
    )
    .unwrap();
    pool
}

fn reimport(dir: &std::path::Path) -> Pool {
    Pool::import(
        &ImportSource::Directory(dir.into()),
        "tank",
        options(plain_opener()),
    )
    .unwrap()
}

/// A volume's contents: each block's fill seed (0: never written).
type Model = Vec<u8>;
type Family = common::family::Family<Model>;

fn assert_volume(pool: &Pool, name: &str, model: &Model) {
    let objset_read = |index: u64| -> Vec<u8> {
        if name.contains('@') {
            let objset = pool.snapshot_objset(name).unwrap();
            objset
                .read_block(VOLUME_OBJECT, index)
                .unwrap()
                .map_or_else(|| vec![0; BLOCK], |b| b.to_vec())
        } else {
            let mut got = vec![0u8; BLOCK];
            pool.volume(name)
                .unwrap()
                .read(index * BLOCK as u64, &mut got)
                .unwrap();
            got
        }
    };
    for (index, &seed) in model.iter().enumerate() {
        let expected = if seed == 0 {
            vec![0; BLOCK]
        } else {
            fill(seed)
        };
        assert!(
            objset_read(index as u64) == expected,
            "{name} block {index} differs from its model"
        );
    }
}

fn assert_contents(pool: &Pool, family: &Family) {
    for (dataset, (head, snaps)) in &family.datasets {
        assert_volume(pool, dataset, head);
        for (snapshot, model) in snaps {
            assert_volume(pool, &format!("{dataset}@{snapshot}"), model);
        }
    }
}

/// The property test of the issue: random writes, snapshots, clones, promotes, rollbacks and
/// destroys over a family of volumes; after every step every figure equals a brute-force walk
/// (`assert_family`), and every head and snapshot its model's contents. Then export, import,
/// and every snapshot and clone is destroyed (promoting where an origin must go), leaving
/// nothing behind.
#[test]
fn random_clones_and_promotes_keep_every_figure_exact() {
    for seed in 1..=3u64 {
        let dir = tempfile::tempdir().unwrap();
        let mut pool = new_pool(dir.path(), None);
        let mut rng = Rng(seed * 7919);
        let mut family = Family::default();
        family
            .datasets
            .insert("tank/vol".into(), (vec![0; BLOCKS as usize], Vec::new()));
        let mut next = 0u32;
        for step in 0..30 {
            random_step(&pool, &mut family, &mut rng, &mut next);
            assert_family(&pool, &family);
            if step % 3 == 2 {
                // What was just done must read back the same from disk.
                pool.export().unwrap();
                pool = reimport(dir.path());
                assert_family(&pool, &family);
            }
            if step % 5 == 4 {
                assert_contents(&pool, &family);
            }
        }
        pool.export().unwrap();
        let pool = reimport(dir.path());
        assert_family(&pool, &family);
        assert_contents(&pool, &family);
        tear_down(&pool, &mut family);
        let report = pool.check().unwrap();
        assert!(report.is_clean(), "{:?}", report.problems());
        assert_eq!(
            pool.datasets().unwrap().len(),
            2,
            "seed {seed}: tank and one volume left"
        );
    }
}

/// One random step of the property test, on the pool and the model alike.
fn random_step(pool: &Pool, family: &mut Family, rng: &mut Rng, next: &mut u32) {
    let names: Vec<String> = family.datasets.keys().cloned().collect();
    let dataset = names[rng.below(names.len() as u64) as usize].clone();
    let all_snaps: Vec<(String, String)> = family
        .datasets
        .iter()
        .flat_map(|(d, (_, snaps))| snaps.iter().map(move |(s, _)| (d.clone(), s.clone())))
        .collect();
    match rng.below(9) {
        0..=2 => {
            let fill_seed = (rng.below(250) + 1) as u8;
            let blocks: Vec<u64> = (0..1 + rng.below(6)).map(|_| rng.below(BLOCKS)).collect();
            write_blocks(pool, &dataset, &blocks, fill_seed);
            let head = &mut family.datasets.get_mut(&dataset).unwrap().0;
            for block in blocks {
                head[block as usize] = fill_seed;
            }
        }
        3 => {
            *next += 1;
            let short = format!("s{next}");
            pool.snapshot(&[format!("{dataset}@{short}")], false)
                .unwrap();
            let entry = family.datasets.get_mut(&dataset).unwrap();
            entry.1.push((short, entry.0.clone()));
        }
        4 | 5 if !all_snaps.is_empty() => {
            let (origin_ds, origin_snap) =
                all_snaps[rng.below(all_snaps.len() as u64) as usize].clone();
            *next += 1;
            let clone = format!("tank/c{next}");
            pool.clone_snapshot(&format!("{origin_ds}@{origin_snap}"), &clone, &[])
                .unwrap();
            let model = family.datasets[&origin_ds]
                .1
                .iter()
                .find(|(s, _)| *s == origin_snap)
                .unwrap()
                .1
                .clone();
            family.datasets.insert(clone.clone(), (model, Vec::new()));
            family.origins.insert(clone, (origin_ds, origin_snap));
        }
        6 if family.origins.contains_key(&dataset) => {
            pool.promote(&dataset).unwrap();
            family.promote(&dataset);
        }
        7 if !all_snaps.is_empty() => {
            let (d, s) = all_snaps[rng.below(all_snaps.len() as u64) as usize].clone();
            let result = pool.destroy_snapshot(&format!("{d}@{s}"));
            if family.clones_of(&d, &s).is_empty() {
                result.unwrap();
                family
                    .datasets
                    .get_mut(&d)
                    .unwrap()
                    .1
                    .retain(|(n, _)| *n != s);
            } else {
                let err = result.unwrap_err().to_string();
                assert!(err.contains("clones"), "{err}");
            }
        }
        8 => {
            let snaps = &family.datasets[&dataset].1;
            if family.origins.contains_key(&dataset) && snaps.is_empty() {
                // A clone with no snapshot goes; its origin keeps what they share.
                pool.destroy_dataset(&dataset).unwrap();
                family.datasets.remove(&dataset);
                family.origins.remove(&dataset);
            } else if let Some((newest, model)) = snaps.last() {
                let (newest, model) = (newest.clone(), model.clone());
                pool.rollback(&format!("{dataset}@{newest}"), false, false)
                    .unwrap();
                family.datasets.get_mut(&dataset).unwrap().0 = model;
            }
        }
        _ => {
            pool.sync().unwrap();
        }
    }
}
/// The seed's VM fleet in small: clones of one image read through share one cached copy
/// (the ARC is keyed by block address), cost nothing at creation, and each clone's writes
/// are its own.
#[test]
fn clones_of_an_image_share_its_blocks_and_its_cache() {
    let dir = tempfile::tempdir().unwrap();
    let arc = ReadCache::new(ArcConfig {
        max_bytes: 256 << 20,
        min_bytes: 32 << 20,
        shards: 4,
        prefetch_threads: 2,
    });
    let pool = new_pool(dir.path(), Some(arc.clone()));
    const IMAGE_BLOCKS: u64 = 1024;
    pool.create_volume_as(
        "tank/image",
        IMAGE_BLOCKS * BLOCK as u64,
        cairn_dataset::directory::Provisioning::Sparse,
        &[
            ("volblocksize".into(), BLOCK.to_string()),
            ("primarycache".into(), "metadata".into()),
        ],
    )
    .unwrap();
    let all: Vec<u64> = (0..IMAGE_BLOCKS).collect();
    write_blocks(&pool, "tank/image", &all, 5);
    pool.snapshot(&["tank/image@gold".to_string()], false)
        .unwrap();
    let image_bytes = IMAGE_BLOCKS * BLOCK as u64;
    const CLONES: usize = 20;
    let free_before = pool.status().free_bytes;
    for index in 0..CLONES {
        pool.clone_snapshot(
            "tank/image@gold",
            &format!("tank/vm{index}"),
            &[("primarycache".into(), "all".into())],
        )
        .unwrap();
    }
    pool.sync().unwrap();
    let spent = free_before - pool.status().free_bytes;
    // Each clone's first txg writes its object-set root and the pool's metadata of a txg.
    assert!(
        spent < image_bytes / 4,
        "{CLONES} clones of a {image_bytes}-byte image took {spent} bytes: a clone copies no data"
    );
    let data_size = |arc: &ReadCache| arc.stats().get("data_size").unwrap();
    let before = data_size(&arc);
    let image = vec![5; IMAGE_BLOCKS as usize];
    for index in 0..CLONES {
        assert_volume(&pool, &format!("tank/vm{index}"), &image);
    }
    let grown = data_size(&arc) - before;
    assert!(
        grown >= image_bytes && grown < 2 * image_bytes,
        "the cache grew by {grown} bytes reading {CLONES} clones of a {image_bytes}-byte image"
    );
    // Writes to one clone are its own; its `used` is what it wrote (two copies on a mirror,
    // with the indirect blocks above them).
    write_blocks(&pool, "tank/vm3", &[0, 1], 9);
    let mut model = image.clone();
    assert_volume(&pool, "tank/vm4", &model);
    assert_volume(&pool, "tank/image@gold", &model);
    model[0] = 9;
    model[1] = 9;
    assert_volume(&pool, "tank/vm3", &model);
    pool.sync().unwrap();
    let used = |name: &str| info(&pool, name).used_bytes;
    // Its own object-set root and dnode block, nothing of the image.
    assert!(
        used("tank/vm4") < 64 << 10,
        "an untouched clone uses {} bytes",
        used("tank/vm4")
    );
    assert!(
        used("tank/vm3") >= 2 * BLOCK as u64 && used("tank/vm3") < 16 * BLOCK as u64,
        "vm3 uses what it wrote: {}",
        used("tank/vm3")
    );
    assert_eq!(
        pool.clones("tank/image@gold").unwrap().len(),
        CLONES,
        "every clone listed"
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    pool.close().unwrap();
}

#[test]
fn bad_clone_and_promote_requests_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path(), None);
    write_blocks(&pool, "tank/vol", &[0, 1], 1);
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    pool.clone_snapshot("tank/vol@a", "tank/c", &[]).unwrap();
    let before = pool.datasets().unwrap().len();
    for (origin, target) in [
        ("tank/vol@a", "other/c"),   // another pool
        ("tank/vol@a", "tank/c"),    // exists
        ("tank/vol@none", "tank/d"), // no such snapshot
        ("tank/vol", "tank/d"),      // not a snapshot
        ("tank/vol@a", "tank/no/d"), // no parent
        ("tank/vol@a", "tank/bad name"),
    ] {
        assert!(
            pool.clone_snapshot(origin, target, &[]).is_err(),
            "clone {origin} {target} accepted"
        );
    }
    let err = pool
        .clone_snapshot(
            "tank/vol@a",
            "tank/d",
            &[("volblocksize".into(), "4096".into())],
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("volblocksize"), "{err}");
    assert_eq!(pool.datasets().unwrap().len(), before);
    let err = pool.destroy_snapshot("tank/vol@a").unwrap_err().to_string();
    assert!(err.contains("clones (tank/c)"), "{err}");
    let err = pool.rollback("tank/vol@a", true, false);
    assert!(err.is_ok(), "rollback to an origin keeps it");
    assert!(pool.promote("tank/vol").is_err(), "not a clone");
    // A promote whose clone has a snapshot of a name that would move is refused.
    pool.snapshot(&["tank/c@a".to_string()], false).unwrap();
    let err = pool.promote("tank/c").unwrap_err().to_string();
    assert!(err.contains("tank/c@a"), "{err}");
    pool.destroy_snapshot("tank/c@a").unwrap();
    pool.promote("tank/c").unwrap();
    assert_eq!(
        pool.origin("tank/vol").unwrap().as_deref(),
        Some("tank/c@a")
    );
    assert_eq!(pool.origin("tank/c").unwrap(), None);
    // Now the old parent is the clone and goes without touching what tank/c holds.
    pool.destroy_dataset("tank/vol").unwrap();
    assert_volume(
        &pool,
        "tank/c",
        &[vec![1, 1], vec![0; BLOCKS as usize - 2]].concat(),
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}

/// After a promote, the origin's `used` is what it alone holds in the clone's lineage: the
/// blocks born after the snapshot before it that the clone overwrote. Those sit on the
/// clone's deadlist, keyed as the origin's dataset keyed them (by lineage), so no pointer is
/// read or rewritten by the promote. Also a clone of a clone, promoted in turn.
#[test]
fn promote_hands_the_origin_and_its_accounting_to_the_clone() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path(), None);
    let mut family = Family::default();
    let blocks = BLOCKS as usize;
    let mut head = vec![0; blocks];
    write_blocks(&pool, "tank/vol", &(0..8).collect::<Vec<_>>(), 1);
    head[..8].fill(1);
    pool.snapshot(&["tank/vol@p1".to_string()], false).unwrap();
    let p1 = head.clone();
    write_blocks(&pool, "tank/vol", &(4..12).collect::<Vec<_>>(), 2);
    head[4..12].fill(2);
    pool.snapshot(&["tank/vol@o".to_string()], false).unwrap();
    let o = head.clone();
    pool.clone_snapshot("tank/vol@o", "tank/c", &[]).unwrap();
    // The clone overwrites blocks born after @p1 (8..12) and before it (0..2).
    write_blocks(&pool, "tank/c", &[0, 1, 8, 9, 10, 11], 3);
    let mut c = o.clone();
    for block in [0, 1, 8, 9, 10, 11] {
        c[block] = 3;
    }
    // The parent moves on too.
    write_blocks(&pool, "tank/vol", &[20], 4);
    head[20] = 4;
    pool.clone_snapshot("tank/vol@o", "tank/c2", &[]).unwrap();
    pool.snapshot(&["tank/c@mine".to_string()], false).unwrap();
    pool.clone_snapshot("tank/c@mine", "tank/cc", &[]).unwrap();
    write_blocks(&pool, "tank/cc", &[8, 30], 5);
    let mut cc = c.clone();
    cc[8] = 5;
    cc[30] = 5;
    family.datasets.insert(
        "tank/vol".into(),
        (head, vec![("p1".into(), p1), ("o".into(), o.clone())]),
    );
    family
        .datasets
        .insert("tank/c".into(), (c.clone(), vec![("mine".into(), c)]));
    family.datasets.insert("tank/c2".into(), (o, Vec::new()));
    family.datasets.insert("tank/cc".into(), (cc, Vec::new()));
    family
        .origins
        .insert("tank/c".into(), ("tank/vol".into(), "o".into()));
    family
        .origins
        .insert("tank/c2".into(), ("tank/vol".into(), "o".into()));
    family
        .origins
        .insert("tank/cc".into(), ("tank/c".into(), "mine".into()));
    assert_family(&pool, &family);
    pool.promote("tank/c").unwrap();
    family.promote("tank/c");
    assert_family(&pool, &family);
    assert!(
        pool.snapshot_info("tank/c@o").unwrap().used_bytes >= 4 * BLOCK as u64,
        "@o alone holds the blocks born after @p1 that the clone overwrote"
    );
    // The clone of the clone takes over in turn, with the whole chain.
    pool.promote("tank/cc").unwrap();
    family.promote("tank/cc");
    assert_family(&pool, &family);
    assert_contents(&pool, &family);
    pool.export().unwrap();
    let pool = reimport(dir.path());
    assert_family(&pool, &family);
    assert_contents(&pool, &family);
}

/// A clone of a filesystem is a filesystem: it opens with the snapshot's files, takes changes
/// of its own (the origin's head and snapshot do not see them), checks clean, survives export
/// and import, and goes with `destroy -R` of its origin.
#[test]
fn a_filesystem_clone_has_the_snapshots_files_and_changes_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path(), None);
    let fs = new_filesystem(&pool, "tank/home", &[]);
    let (notes, _) = fs.create(fs.root(), b"notes.txt", file(0o644)).unwrap();
    fs.write(notes, 0, b"written before the snapshot").unwrap();
    let (big, _) = fs.create(fs.root(), b"big.bin", file(0o644)).unwrap();
    fs.write(big, 0, &pattern(300_000, 3)).unwrap();
    pool.sync().unwrap();
    pool.snapshot(&["tank/home@monday".to_string()], false)
        .unwrap();
    fs.write(notes, 0, b"WRITTEN AFTER").unwrap();
    pool.clone_snapshot(
        "tank/home@monday",
        "tank/test",
        &[("compression".into(), "lz4".into())],
    )
    .unwrap();
    let clone = pool.filesystem("tank/test").unwrap();
    let (object, _) = clone.lookup(clone.root(), b"notes.txt").unwrap();
    assert_eq!(
        clone.read(object, 0, 64).unwrap(),
        b"written before the snapshot"
    );
    let (big_clone, _) = clone.lookup(clone.root(), b"big.bin").unwrap();
    assert_eq!(
        clone.read(big_clone, 0, 300_000).unwrap(),
        pattern(300_000, 3)
    );
    // The clone's own changes.
    clone.unlink(clone.root(), b"big.bin").unwrap();
    let (fresh, _) = clone.create(clone.root(), b"fresh", file(0o600)).unwrap();
    clone.write(fresh, 0, b"the clone's own").unwrap();
    pool.sync().unwrap();
    assert!(fs.lookup(fs.root(), b"fresh").is_err(), "the origin's head");
    assert!(fs.lookup(fs.root(), b"big.bin").is_ok());
    assert_eq!(fs.read(notes, 0, 13).unwrap(), b"WRITTEN AFTER");
    assert_eq!(
        pool.origin("tank/test").unwrap().as_deref(),
        Some("tank/home@monday")
    );
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
    drop((fs, clone));
    pool.export().unwrap();
    let pool = reimport(dir.path());
    let clone = pool.filesystem("tank/test").unwrap();
    let (fresh, _) = clone.lookup(clone.root(), b"fresh").unwrap();
    assert_eq!(clone.read(fresh, 0, 64).unwrap(), b"the clone's own");
    drop(clone);
    let gone = pool.destroy_with_dependents("tank/home@monday").unwrap();
    assert_eq!(gone, ["tank/test", "tank/home@monday"]);
    assert!(pool.filesystem("tank/test").is_err());
    wait_for_frees(&pool);
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}

/// Writes to a clone on a full pool fail with ENOSPC (the clone holds no reservation), and
/// destroying things still works and gives the space back.
#[test]
fn a_full_pool_refuses_clone_writes_and_still_destroys() {
    let dir = tempfile::tempdir().unwrap();
    let pool = new_pool(dir.path(), None);
    write_blocks(&pool, "tank/vol", &(0..BLOCKS).collect::<Vec<_>>(), 1);
    pool.snapshot(&["tank/vol@a".to_string()], false).unwrap();
    let free = pool.status().free_bytes;
    // A sparse filler volume takes (nearly) all the rest.
    pool.create_volume_as(
        "tank/filler",
        free / (1 << 20) * (1 << 20),
        cairn_dataset::directory::Provisioning::Sparse,
        &[("volblocksize".into(), "128K".into())],
    )
    .unwrap();
    let filler = pool.volume("tank/filler").unwrap();
    let chunk = vec![7u8; 1 << 20];
    let mut offset = 0;
    while filler.write(offset, &chunk).is_ok() && offset + (1 << 20) < filler.size_bytes() {
        offset += 1 << 20;
        if offset % (16 << 20) == 0 {
            let _ = filler.flush();
        }
    }
    let _ = filler.flush();
    pool.clone_snapshot("tank/vol@a", "tank/c", &[]).unwrap();
    let clone = pool.volume("tank/c").unwrap();
    let mut refused = None;
    for round in 0..64u64 {
        let result = clone
            .write(0, &vec![round as u8 | 1; BLOCKS as usize * BLOCK])
            .and_then(|()| clone.flush());
        if let Err(err) = result {
            refused = Some(err);
            break;
        }
    }
    let err = refused.expect("a full pool refuses the clone's writes");
    assert_eq!(err.class(), cairn_device::ErrorClass::NoSpace, "{err}");
    drop((clone, filler));
    pool.destroy_dataset("tank/filler").unwrap();
    pool.destroy_dataset("tank/c").unwrap();
    wait_for_frees(&pool);
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:?}", report.problems());
}
