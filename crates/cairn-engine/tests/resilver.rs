//! `pool attach`, `detach` and `replace` on live pools: the resilver copies every block the new
//! side lacks (proved by losing the old side and reading everything back verified), detach
//! never leaves a vdev without a complete copy, and a resilver cut short resumes at import.

mod common;

use cairn_device::spec::DeviceSpec;
use cairn_engine::{CreateOptions, Pool, ResilverOptions};
use common::{Rng, create_mirror, device_paths, import, plain_opener};
use std::path::{Path, PathBuf};

const VOLUME_BYTES: u64 = 8 << 20;

fn spec(path: &Path) -> DeviceSpec {
    DeviceSpec {
        path: path.to_path_buf(),
        model: None,
    }
}

fn sized() -> CreateOptions {
    CreateOptions {
        create_size_bytes: Some(common::DEVICE_SIZE),
        ..Default::default()
    }
}

/// A pool on `paths` (one device, or a mirror) with a volume full of seeded bytes; returns
/// the open pool and the bytes.
fn populated(paths: &[PathBuf], seed: u64) -> (Pool, Vec<u8>) {
    let pool = create_mirror(paths, plain_opener());
    pool.create_volume(
        "tank/vol",
        VOLUME_BYTES,
        &[("volblocksize".into(), "8K".into())],
    )
    .unwrap();
    let mut rng = Rng(seed);
    let contents: Vec<u8> = (0..VOLUME_BYTES).map(|_| rng.next() as u8).collect();
    pool.volume("tank/vol")
        .unwrap()
        .write(0, &contents)
        .unwrap();
    pool.sync().unwrap();
    (pool, contents)
}

fn assert_contents(pool: &Pool, contents: &[u8]) {
    let mut buf = vec![0u8; contents.len()];
    pool.volume("tank/vol").unwrap().read(0, &mut buf).unwrap();
    assert!(buf == contents, "volume contents differ");
}

fn assert_clean(pool: &Pool) {
    let report = pool.check().unwrap();
    assert!(report.bad_copies.is_empty(), "{:?}", report.bad_copies);
    assert!(report.leaks.is_empty(), "{:?}", report.leaks);
    assert!(
        report.double_references.is_empty() && report.references_to_free_space.is_empty(),
        "{report:?}"
    );
}

fn leaf_names(pool: &Pool) -> Vec<Vec<String>> {
    pool.status()
        .tops
        .iter()
        .map(|top| top.leaves.iter().map(|leaf| leaf.name.clone()).collect())
        .collect()
}

#[test]
fn attached_side_holds_everything_once_resilvered() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let (pool, contents) = populated(&paths[..1], 1);
    let name = pool
        .attach(
            &paths[0].display().to_string(),
            &spec(&paths[1]),
            &sized(),
            &plain_opener(),
            ResilverOptions::default(),
        )
        .unwrap();
    assert_eq!(name, "mirror-0");
    pool.wait_resilver().unwrap();
    let status = pool.resilver_status().expect("a resilver record");
    assert!(status.finished_ms.is_some(), "{status:?}");
    assert!(
        status.copied_bytes >= VOLUME_BYTES && status.copied_bytes == status.total_bytes,
        "{status:?}"
    );
    assert_eq!(status.unrecoverable_blocks, 0);
    assert_clean(&pool);
    pool.close().unwrap();

    // The original side gone: the new one alone imports the pool and holds every byte.
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[1..], plain_opener()).unwrap();
    assert_contents(&pool, &contents);
    pool.close().unwrap();
}

#[test]
fn replace_fills_the_new_side_and_detaches_the_old_one() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 3);
    let (pool, contents) = populated(&paths[..2], 2);
    pool.close().unwrap();
    std::fs::remove_file(&paths[1]).unwrap();
    let pool = import(&paths[..1], plain_opener()).unwrap();
    pool.replace(
        &paths[1].display().to_string(),
        &spec(&paths[2]),
        &sized(),
        &plain_opener(),
        ResilverOptions::default(),
    )
    .unwrap();
    pool.wait_resilver().unwrap();
    assert_eq!(
        leaf_names(&pool),
        vec![vec![
            paths[0].display().to_string(),
            paths[2].display().to_string()
        ]]
    );
    assert_eq!(pool.status().health.as_str(), "ONLINE");
    assert_clean(&pool);
    pool.close().unwrap();
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[2..], plain_opener()).unwrap();
    assert_contents(&pool, &contents);
    pool.close().unwrap();
}

#[test]
fn detach_refuses_to_leave_no_complete_copy() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 3);
    let (pool, contents) = populated(&paths[..2], 3);
    let d0 = paths[0].display().to_string();
    let d1 = paths[1].display().to_string();
    pool.detach(&d1).unwrap();
    assert_eq!(leaf_names(&pool), vec![vec![d0.clone()]]);
    let err = pool.detach(&d0).unwrap_err().to_string();
    assert!(err.contains("not a side of a mirror"), "{err}");
    assert_clean(&pool);

    // While the new side is still being filled, the old one is the only complete copy.
    pool.attach(
        &d0,
        &spec(&paths[2]),
        &sized(),
        &plain_opener(),
        ResilverOptions {
            rate_bytes_per_s: Some(1 << 20),
        },
    )
    .unwrap();
    let err = pool.detach(&d0).unwrap_err().to_string();
    assert!(err.contains("no healthy copy"), "{err}");
    // Detaching the side being filled stops its resilver.
    pool.detach(&paths[2].display().to_string()).unwrap();
    assert!(pool.resilver_status().is_none());
    assert_eq!(leaf_names(&pool), vec![vec![d0.clone()]]);
    assert_contents(&pool, &contents);
    assert_clean(&pool);
    pool.close().unwrap();
    // The detached devices carry no label of the pool any more.
    assert!(
        cairn_engine::discover_pools(&cairn_engine::ImportSource::Devices(common::specs(
            &paths[1..]
        )))
        .is_empty()
    );
}

#[test]
fn an_interrupted_resilver_resumes_at_import() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let (pool, contents) = populated(&paths[..1], 4);
    pool.attach(
        &paths[0].display().to_string(),
        &spec(&paths[1]),
        &sized(),
        &plain_opener(),
        ResilverOptions {
            rate_bytes_per_s: Some(2 << 20),
        },
    )
    .unwrap();
    // Wait for some progress to be recorded, then stop without a clean close.
    let copied = loop {
        let status = pool.resilver_status().unwrap();
        if status.copied_bytes > 0 && status.total_bytes > status.copied_bytes {
            break status.copied_bytes;
        }
        assert!(
            status.finished_ms.is_none(),
            "finished too soon: {status:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(copied < VOLUME_BYTES);
    drop(pool);

    let pool = import(&paths, plain_opener()).unwrap();
    let note = pool
        .notes()
        .iter()
        .find(|note| note.contains("resumed"))
        .unwrap_or_else(|| panic!("no resume note in {:?}", pool.notes()))
        .clone();
    assert!(!note.contains("resumed at 0 of"), "{note}");
    pool.wait_resilver().unwrap();
    assert!(pool.resilver_status().unwrap().finished_ms.is_some());
    assert_clean(&pool);
    pool.close().unwrap();
    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[1..], plain_opener()).unwrap();
    assert_contents(&pool, &contents);
    pool.close().unwrap();
}
