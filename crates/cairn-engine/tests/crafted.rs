//! Crafted images: a pool is written by the real code, then bytes are patched the way an
//! attacker or a bug could, with every checksum on the way up recomputed (block, parent pointer,
//! object-set root, uberblock), so the damage passes verification and reaches the validators.
//! Each must give a clear error naming what is wrong, or fault the pool, and never panic.
//!
//! The patching (`craft`) walks the on-disk tree with `cairn-format`'s own decoders and
//! encoders, so the images are exactly what a pool with those values would hold.

mod common;
mod craft;

use cairn_format::BlockPointer;
use cairn_format::dnode::{Dnode, ObjsetPhys};
use cairn_format::label::VDEV_DATA_START;
use cairn_format::spacelog::{SpaceLogBlock, SpaceOp};
use common::*;
use craft::{Image, VOLUME_OBJECT};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const BLOCK_BYTES: usize = 8192;

/// A single-device pool with `tank/vol` (8 KiB blocks) holding two written blocks, whose newest
/// uberblock is the only one left (so import cannot fall back to an older, undamaged tree).
fn pool_with_volume(dir: &Path) -> Vec<PathBuf> {
    let paths = device_paths(dir, 1);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume(
        "tank/vol",
        // Three blocks: the dnode's direct pointers cover it, no indirect block.
        3 * BLOCK_BYTES as u64,
        &[("volblocksize".into(), "8K".into())],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    volume.write(0, &[0xa5; 2 * BLOCK_BYTES]).unwrap();
    pool.sync().unwrap();
    drop(volume);
    pool.close().unwrap();
    Image::open(&paths[0]).erase_older_uberblocks();
    paths
}

/// The error and its sources, as the CLI prints them.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[test]
fn a_volume_with_volblocksize_1000_is_refused_at_import_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_with_volume(dir.path());
    let image = Image::open(&paths[0]);
    image.edit_record("tank/vol", |record| {
        record
            .properties
            .insert("volblocksize".into(), "1000".into());
    });
    drop(image);
    let err = match import(&paths, plain_opener()) {
        Ok(_) => panic!("a directory with volblocksize=1000 was accepted"),
        Err(err) => chain(&err),
    };
    assert!(
        err.contains("tank/vol") && err.contains("volblocksize") && err.contains("1000"),
        "{err}"
    );
}

#[test]
fn a_pointer_outside_the_device_is_an_error_and_its_free_suspends_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_with_volume(dir.path());
    let image = Image::open(&paths[0]);
    let beyond = image.size_bytes;
    image.edit_volume_dnode("tank/vol", |dnode| {
        dnode.block_pointers[0].dvas[0].offset = beyond;
    });
    drop(image);
    let pool = import(&paths, plain_opener()).expect("the damage is below the roots");
    let volume = pool.volume("tank/vol").unwrap();
    let mut buf = vec![0u8; BLOCK_BYTES];
    let err = volume
        .read(0, &mut buf)
        .expect_err("a block outside the device cannot be read");
    assert!(chain(&err).contains("tank/vol"), "{}", chain(&err));
    let report = pool.check().expect("check runs");
    assert!(!report.is_clean(), "check must report the bad pointer");
    // Replacing the block frees the bad pointer: the allocator refuses, the pool suspends.
    volume.write(0, &[0x5a; BLOCK_BYTES]).unwrap();
    let err = pool
        .sync()
        .expect_err("a txg with a refused free must not commit");
    let text = chain(&err);
    assert!(
        text.contains("suspended") || text.contains("refused"),
        "{text}"
    );
    let reason = pool
        .status()
        .suspended
        .expect("status reports the suspension");
    assert!(reason.contains("outside its data region"), "{reason}");
    drop(volume);
    let _ = pool.close();
    drop(pool);
    // Nothing was committed after the damage: the image imports as it was.
    let again = import(&paths, plain_opener()).expect("re-import");
    let mut second = vec![0u8; BLOCK_BYTES];
    again
        .volume("tank/vol")
        .unwrap()
        .read(BLOCK_BYTES as u64, &mut second)
        .unwrap();
    assert_eq!(
        second,
        vec![0xa5; BLOCK_BYTES],
        "the intact block reads back"
    );
}

#[test]
fn a_block_referenced_twice_is_reported_and_its_second_free_suspends_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_with_volume(dir.path());
    let image = Image::open(&paths[0]);
    image.edit_volume_dnode("tank/vol", |dnode| {
        dnode.block_pointers[1] = dnode.block_pointers[0];
    });
    drop(image);
    let pool = import(&paths, plain_opener()).expect("import");
    let report = pool.check().expect("check runs");
    assert!(
        !report.double_references.is_empty(),
        "check must see the block referenced twice: {:?}",
        report.problems()
    );
    let volume = pool.volume("tank/vol").unwrap();
    volume.write(0, &[0x11; 2 * BLOCK_BYTES]).unwrap();
    assert!(pool.sync().is_err(), "the second free is refused");
    let reason = pool.status().suspended.expect("suspended");
    assert!(reason.contains("double free"), "{reason}");
    // Writes now fail with an error instead of being acknowledged and lost.
    assert!(volume.write(0, &[0x22; BLOCK_BYTES]).is_err() || pool.sync().is_err());
    drop(volume);
    let _ = pool.close();
}

#[test]
fn a_double_free_in_the_space_log_is_refused_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_with_volume(dir.path());
    let image = Image::open(&paths[0]);
    let newest = image.newest();
    let head = newest.space_log_bp;
    let mut block = SpaceLogBlock::decode(&image.read(&head)).expect("space-log block");
    let freed = block
        .entries
        .iter()
        .find(|entry| entry.op == SpaceOp::Free)
        .copied()
        .or_else(|| {
            // A checkpoint lists allocations only: free one of them twice.
            block
                .entries
                .first()
                .map(|entry| cairn_format::SpaceLogEntry {
                    op: SpaceOp::Free,
                    ..*entry
                })
        })
        .expect("an entry to repeat");
    block.entries.push(freed);
    block.entries.push(freed);
    let mut data = block.encode(4096);
    assert!(
        data.len() <= head.psize as usize,
        "the patch fits the block"
    );
    data.resize(head.psize as usize, 0);
    let new_head = image.rewrite(&head, &data);
    let patched = image.patch_uberblocks(|ub| {
        let same = ub.space_log_bp == head;
        if same {
            ub.space_log_bp = new_head;
        }
        same
    });
    assert!(patched > 0);
    drop(image);
    let text = match import(&paths, plain_opener()) {
        Err(err) => chain(&err),
        Ok(_) => panic!("a space log with a double free was accepted"),
    };
    assert!(
        text.contains("space log entry") && text.contains("double free"),
        "{text}"
    );
}

#[test]
fn roots_outside_the_pool_or_from_the_future_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_with_volume(dir.path());
    let image = Image::open(&paths[0]);
    let root = image.dataset_root("tank/vol");
    image.edit_record("tank/vol", |record| {
        let mut elsewhere = root;
        elsewhere.dvas[0].vdev = 7;
        record.set_objset_bp(&elsewhere);
    });
    drop(image);
    let err = match import(&paths, plain_opener()) {
        Ok(_) => panic!("an object-set root on a vdev the pool lacks was accepted"),
        Err(err) => chain(&err),
    };
    assert!(
        err.contains("dataset 'tank/vol'") && err.contains("vdev 7"),
        "{err}"
    );

    let future = dir.path().join("future");
    std::fs::create_dir(&future).unwrap();
    let paths = pool_with_volume(&future);
    let image = Image::open(&paths[0]);
    let patched = image.patch_uberblocks(|ub| {
        ub.root_bp.birth_txg = ub.txg + 100;
        true
    });
    assert!(patched > 0);
    drop(image);
    let err = match import(&paths, plain_opener()) {
        Ok(_) => panic!("a MOS root born after its uberblock was accepted"),
        Err(err) => chain(&err),
    };
    assert!(
        err.contains("MOS root") && err.contains("after txg"),
        "{err}"
    );
}

/// What a workload on an imported, damaged pool saw: the first error of each step.
fn workload_errors(paths: &[PathBuf]) -> Vec<String> {
    let pool = match import(paths, plain_opener()) {
        Ok(pool) => pool,
        Err(err) => return vec![format!("import: {}", chain(&err))],
    };
    let mut errors = Vec::new();
    // Scrub walks every tree whatever the volume layer thinks of it.
    match pool.scrub(&mut |_| {}) {
        Ok(record) => errors.extend(record.damaged),
        Err(err) => errors.push(format!("scrub: {}", chain(&err))),
    }
    match pool.volume("tank/vol") {
        Err(err) => errors.push(format!("volume: {}", chain(&err))),
        Ok(volume) => {
            let mut buf = vec![0u8; 3 * BLOCK_BYTES];
            if let Err(err) = volume.read(0, &mut buf) {
                errors.push(format!("read: {}", chain(&err)));
            }
            if let Err(err) = volume.write(0, &[1; 3 * BLOCK_BYTES]) {
                errors.push(format!("write: {}", chain(&err)));
            }
            if let Err(err) = pool.sync() {
                errors.push(format!("sync: {}", chain(&err)));
            }
            match pool.check() {
                Ok(report) => errors.extend(report.problems()),
                Err(err) => errors.push(format!("check: {}", chain(&err))),
            }
        }
    }
    let _ = pool.close();
    errors
}

#[test]
fn a_damaged_volume_dnode_is_an_error_at_first_use_never_a_panic() {
    type Edit = fn(&mut Dnode);
    let edits: [(&str, Edit, &str); 12] = [
        (
            "block size 512",
            |d| d.data_block_size = 512,
            "blocks are 512",
        ),
        (
            "block size 4K",
            |d| d.data_block_size = 4096,
            "blocks are 4096",
        ),
        (
            "block size 128K",
            |d| d.data_block_size = 131_072,
            "blocks are 131072",
        ),
        ("3 levels", |d| d.levels = 3, "3 levels"),
        ("8 levels", |d| d.levels = 8, "8 levels"),
        (
            "max block id",
            |d| d.max_block_id = u64::MAX,
            "max block id",
        ),
        (
            "type",
            |d| d.object_type = cairn_format::ObjectType::SpaceLog,
            "object SpaceLog",
        ),
        ("free", |d| *d = Dnode::free(), "does not exist"),
        (
            "pointer level",
            |d| d.block_pointers[0].level = 1,
            "is level 1",
        ),
        (
            "pointer size",
            |d| d.block_pointers[0].lsize = 16384,
            "holds 16384 bytes",
        ),
        (
            "pointer from the future",
            |d| d.block_pointers[0].birth_txg = 1000,
            "txg 1000",
        ),
        ("used bytes", |d| d.used_bytes = u64::MAX, "went negative"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (index, (what, edit, expected)) in edits.into_iter().enumerate() {
        let case_dir = dir.path().join(index.to_string());
        std::fs::create_dir(&case_dir).unwrap();
        let paths = pool_with_volume(&case_dir);
        Image::open(&paths[0]).edit_volume_dnode("tank/vol", edit);
        let errors = workload_errors(&paths).join("\n");
        assert!(
            !errors.contains("panicked"),
            "{what}: a panic was caught: {errors}"
        );
        assert!(errors.contains(expected), "{what}: {errors}");
        if !errors.contains("went negative") {
            assert!(errors.contains("tank/vol"), "{what}: {errors}");
        }
    }
}

#[test]
fn a_vdev_tree_that_does_not_fit_its_devices_is_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    type Edit = fn(&mut cairn_format::LabelConfig);
    let edits: [(Edit, &str); 4] = [
        (
            |config| config.tree.tops[0].metaslab_count *= 4,
            "more than",
        ),
        (
            |config| config.tree.tops[0].metaslab_shift = 70,
            "metaslab shift",
        ),
        (|config| config.tree.tops[0].ashift = 40, "ashift"),
        (
            |config| config.tree.tops[0].metaslab_count = u64::MAX,
            "metaslab shift",
        ),
    ];
    for (index, (edit, expected)) in edits.into_iter().enumerate() {
        let case_dir = dir.path().join(index.to_string());
        std::fs::create_dir(&case_dir).unwrap();
        let paths = pool_with_volume(&case_dir);
        Image::open(&paths[0]).edit_label_config(edit);
        let err = match import(&paths, plain_opener()) {
            Ok(_) => panic!("case {index}: an impossible vdev tree was accepted"),
            Err(err) => chain(&err),
        };
        assert!(err.contains(expected), "case {index}: {err}");
        if expected == "more than" {
            assert!(err.contains("d0.img"), "the device is named: {err}");
        }
    }
}

#[test]
fn a_logged_write_in_place_of_a_foreign_block_is_refused_at_replay() {
    use cairn_format::{
        ChainPosition, Dva, IntentLogHeader, LaneHead, LogBlock, LogRecord, LogRecordKind,
    };
    let dir = tempfile::tempdir().unwrap();
    let paths = pool_with_volume(dir.path());
    let image = Image::open(&paths[0]);
    let newest = image.newest();
    let root = image.dataset_root("tank/vol");
    let block0 = image.dnode(&root, VOLUME_OBJECT).block_pointers[0];
    // The block is real and verifies, but the pointer says it holds other metadata (the log
    // decoder already refuses a pointer of another level or size).
    let foreign = BlockPointer {
        object_type: cairn_format::ObjectType::DatasetDirectory,
        birth_txg: newest.txg + 1,
        ..block0
    };
    // A log block in free space near the end of the (nearly empty) data region.
    let mut label = vec![0u8; cairn_format::label::LABEL_CONFIG_SIZE as usize];
    image
        .file
        .read_exact_at(&mut label, cairn_format::label::LABEL_CONFIG_OFFSET)
        .unwrap();
    let config = cairn_format::LabelConfig::decode(&label).unwrap();
    let region = config.tree.tops[0].data_size_bytes().unwrap();
    let log_offset = region - (1 << 20);
    let chain_guid = 0xabc;
    let block = LogBlock {
        position: ChainPosition {
            pool_guid: newest.pool_guid,
            chain_guid,
            lane: 0,
            sequence: 1,
        },
        next: Dva {
            vdev: 0,
            offset: log_offset + (64 << 10),
            asize: 4096,
        },
        records: vec![LogRecord {
            kind: LogRecordKind::WriteInPlace,
            sequence: 1,
            txg: newest.txg + 1,
            object: VOLUME_OBJECT,
            offset: 0,
            length: u64::from(foreign.lsize),
            data: foreign.to_bytes().to_vec(),
        }],
    };
    let encoded = block.encode(4096);
    image
        .file
        .write_all_at(&encoded, VDEV_DATA_START + log_offset)
        .unwrap();
    let header = IntentLogHeader {
        lanes: vec![LaneHead {
            chain_guid,
            sequence: 1,
            block: Dva {
                vdev: 0,
                offset: log_offset,
                asize: encoded.len() as u32,
            },
        }],
    };
    let mut objset = ObjsetPhys::decode(&image.read(&root)).unwrap();
    objset.intent_log_header = header.encode();
    let new_root = image.rewrite(&root, &objset.encode_block());
    image.edit_record("tank/vol", |record| record.set_objset_bp(&new_root));
    drop(image);
    let err = match import(&paths, plain_opener()) {
        Ok(pool) => panic!(
            "a log naming metadata as volume data was replayed: {:?}",
            pool.notes()
        ),
        Err(err) => chain(&err),
    };
    assert!(
        err.contains("tank/vol") && err.contains("logged pointer is a level-0 DatasetDirectory"),
        "{err}"
    );
}

/// Not an image: the intent log's own free path. A log block freed behind the log's back
/// (standing in for any bug or damage that makes the space map disagree) is freed again when
/// its txg syncs; the allocator refuses, and the pool suspends instead of panicking.
#[test]
fn a_log_block_free_the_allocator_refuses_suspends_the_pool() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume("tank/vol", 1 << 20, &[("volblocksize".into(), "8K".into())])
        .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let fua = cairn_dataset::WriteOptions { fua: true, lane: 0 };
    // The first synchronous write starts the chain (its header must be in a synced txg
    // before a block is written on it); the second is written to the chain's first block.
    volume.write_with(0, &[0x41; BLOCK_BYTES], fua).unwrap();
    pool.sync().unwrap();
    let header = cairn_format::IntentLogHeader::decode(&volume.objset().synced_intent_log_header())
        .expect("chain header");
    let first_block = header.lanes[0].block;
    assert!(!header.lanes[0].is_empty(), "the chain has started");
    volume.write_with(0, &[0x42; BLOCK_BYTES], fua).unwrap();
    let space = pool.io().space().clone();
    assert!(space.lock().is_allocated(&first_block));
    {
        let engine = pool.txg_engine().unwrap();
        let hold = engine.try_hold().unwrap();
        space.lock().free(&first_block, hold.txg()).unwrap();
    }
    // The log lets go of its blocks in the sync of a txg after the one holding its records.
    let err = (0..4)
        .find_map(|_| pool.sync().err())
        .expect("the log's own free is refused");
    assert!(chain(&err).contains("double free"), "{}", chain(&err));
    let reason = pool.status().suspended.expect("suspended");
    assert!(
        reason.contains("refused") && !reason.contains("panicked"),
        "{reason}"
    );
    assert!(
        volume.write(0, &[1; BLOCK_BYTES]).is_err() || volume.flush().is_err(),
        "nothing more is acknowledged as durable"
    );
    drop(volume);
    let _ = pool.close();
}
