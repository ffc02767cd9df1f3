//! Issue 34, scale: 1,000 datasets and 10,000 snapshots of one dataset are routine. The
//! dataset directory is one record per dataset in a map of the MOS, so a txg that changes one
//! dataset writes as much of the MOS whatever the number of datasets; every snapshot is
//! listed, with its figures, after an export and import.
//!
//! Real pools on files (emulated devices, no latency); the MOS's cost of a txg is the
//! engine's own count of the blocks the MOS wrote (`Pool::mos_writes`).

mod common;

use cairn_dataset::directory::Provisioning;
use cairn_dataset::{DatasetDirectory, DatasetKind};
use cairn_engine::{MosWrites, Pool};
use common::*;
use std::collections::BTreeMap;

/// Datasets made beside the measured volume.
const DATASETS: usize = 1000;
/// Snapshots of one dataset.
const SNAPSHOTS: usize = 10_000;
const POOL_BYTES: u64 = 1 << 30;

fn create_pool(dir: &std::path::Path) -> (Vec<std::path::PathBuf>, Pool) {
    let paths = device_paths(dir, 1);
    let pool = Pool::create(
        "tank",
        &[cairn_engine::VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: specs(&paths),
        }],
        &cairn_engine::CreateOptions {
            create_size_bytes: Some(POOL_BYTES),
            ..Default::default()
        },
        options(plain_opener()),
    )
    .expect("create pool");
    (paths, pool)
}

/// What the MOS writes in a txg whose only change is a 4 KiB write to `tank/vol`: the
/// smallest of three such txgs (a txg may also carry deferred frees becoming reusable).
fn one_change(pool: &Pool) -> MosWrites {
    let volume = pool.volume("tank/vol").expect("volume");
    pool.sync().expect("sync");
    (0..3u64)
        .map(|round| {
            volume
                .write(round * 4096, &pattern(4096, round))
                .expect("write");
            let txg = pool.sync().expect("sync");
            let writes = pool.mos_writes();
            assert_eq!(writes.last_txg, txg, "the count is of the txg just synced");
            writes
        })
        .min_by_key(|writes| writes.last_txg_blocks)
        .expect("three rounds")
}

#[test]
fn a_txg_changing_one_dataset_of_a_thousand_writes_what_it_writes_with_two() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, pool) = create_pool(dir.path());
    pool.create_volume_as("tank/vol", 16 << 20, Provisioning::Sparse, &[])
        .unwrap();
    let few = one_change(&pool);
    assert!(few.last_txg_blocks > 0, "the MOS changed: {few:?}");

    // The same datasets in a directory of our own: what rewriting the whole directory in
    // every txg (its records' bytes, one copy) would cost at least.
    let mut model = DatasetDirectory::default();
    model
        .insert("tank", DatasetKind::Filesystem, 1, BTreeMap::new())
        .unwrap();
    for index in 0..DATASETS {
        let name = format!("tank/v{index:04}");
        pool.create_volume_as(&name, 1 << 20, Provisioning::Sparse, &[])
            .unwrap();
        let properties = cairn_dataset::directory::volume_creation_properties(
            1 << 20,
            Provisioning::Sparse,
            &[],
        )
        .unwrap();
        model
            .insert(&name, DatasetKind::Volume, 2, properties)
            .unwrap();
    }
    let directory_bytes: u64 = model
        .records()
        .iter()
        .map(|(_, value)| value.len() as u64)
        .sum();
    let many = one_change(&pool);

    // One dataset's record changed, so one leaf of the directory's map and the blocks above
    // it: as many as with two datasets, give or take a level of indirection the map or the
    // MOS may have grown (one block each).
    assert!(
        many.last_txg_blocks <= few.last_txg_blocks + 2,
        "with {} datasets the MOS wrote {many:?}; with 2 {few:?}",
        DATASETS + 2
    );
    let grown_bytes = many.last_txg_bytes.saturating_sub(few.last_txg_bytes);
    assert!(
        grown_bytes < directory_bytes,
        "a txg changing one dataset wrote {grown_bytes} bytes more of the MOS with {} \
         datasets than with 2: a whole directory is {directory_bytes} bytes",
        DATASETS + 2
    );

    // Every dataset is still there after export and import, and a change after the import
    // costs what it did before.
    pool.export().unwrap();
    let pool = common::import(&paths, plain_opener()).expect("import");
    assert_eq!(pool.dataset_names().len(), DATASETS + 2);
    let after_import = one_change(&pool);
    assert!(
        after_import.last_txg_blocks <= few.last_txg_blocks + 2,
        "after import the MOS wrote {after_import:?}"
    );
    pool.export().unwrap();
}

#[test]
fn ten_thousand_snapshots_of_one_dataset_survive_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, pool) = create_pool(dir.path());
    pool.create_volume_as("tank/vol", 16 << 20, Provisioning::Sparse, &[])
        .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut expected = Vec::new();
    for index in 0..SNAPSHOTS {
        // Every hundredth snapshot follows a write, so their figures differ.
        if index % 100 == 0 {
            volume
                .write((index as u64 / 100) * 4096, &pattern(4096, index as u64))
                .unwrap();
        }
        let name = format!("tank/vol@s{index:05}");
        pool.snapshot(std::slice::from_ref(&name), false).unwrap();
        expected.push(name);
    }
    let listed = pool.snapshots(Some("tank/vol")).unwrap();
    assert_eq!(
        listed.iter().map(|s| s.name.clone()).collect::<Vec<_>>(),
        expected
    );
    // A name taken is refused, whatever the count.
    assert!(
        pool.snapshot(&["tank/vol@s05000".to_string()], false)
            .is_err()
    );
    pool.export().unwrap();

    let pool = common::import(&paths, plain_opener()).expect("import");
    let again = pool.snapshots(Some("tank/vol")).unwrap();
    assert_eq!(again.len(), SNAPSHOTS);
    for (before, after) in listed.iter().zip(&again) {
        assert_eq!(
            (
                &before.name,
                before.created_txg,
                before.referenced_bytes,
                before.written_bytes,
                before.used_bytes
            ),
            (
                &after.name,
                after.created_txg,
                after.referenced_bytes,
                after.written_bytes,
                after.used_bytes
            )
        );
    }
    // Snapshots after the import go on from there; an old name is still taken.
    assert!(
        pool.snapshot(&["tank/vol@s00000".to_string()], false)
            .is_err()
    );
    pool.snapshot(&["tank/vol@after".to_string()], false)
        .unwrap();
    let newest_before = listed.last().expect("snapshots").created_txg;
    assert!(pool.snapshot_info("tank/vol@after").unwrap().created_txg > newest_before);
    pool.export().unwrap();
}
