//! Compression (`compression=on` is lz4): compressible data blocks are stored
//! smaller and read back the same after an import; incompressible ones and datasets with
//! `compression=off` are stored as they are; a damaged compressed copy is detected against its
//! checksum and healed from the other side like any block.

mod common;

use cairn_engine::Pool;
use cairn_format::label::VDEV_DATA_START;
use cairn_format::{BlockPointer, Compression, ObjectType};
use common::*;
use std::io::{Read, Seek, SeekFrom, Write};

const VOLUME_BYTES: usize = 4 << 20;
const BLOCK: usize = 16 << 10;

/// Text-like bytes that lz4 packs several times over, different in every block.
fn compressible(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let words: [&[u8]; 6] = [
        b"alpha ",
        b"bravo ",
        b"charlie ",
        b"delta ",
        b"echo ",
        b"\n",
    ];
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        let word = words[rng.below(words.len() as u64) as usize];
        for _ in 0..=rng.below(16) {
            out.extend_from_slice(word);
        }
    }
    out.truncate(len);
    out
}

fn data_blocks(pool: &Pool, name: &str) -> Vec<BlockPointer> {
    pool.dataset_blocks(name)
        .unwrap()
        .into_iter()
        .filter(|bp| bp.level == 0 && bp.object_type == ObjectType::VolumeData)
        .collect()
}

fn read_all(pool: &Pool, name: &str) -> Vec<u8> {
    let mut buf = vec![0u8; VOLUME_BYTES];
    pool.volume(name).unwrap().read(0, &mut buf).unwrap();
    buf
}

fn volume_with(pool: &Pool, name: &str, extra: &[(&str, &str)], contents: &[u8]) {
    let mut properties = vec![("volblocksize".to_string(), BLOCK.to_string())];
    properties.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    pool.create_volume(name, VOLUME_BYTES as u64, &properties)
        .unwrap();
    pool.volume(name).unwrap().write(0, contents).unwrap();
}

fn flip_bit(path: &std::path::Path, offset: u64) {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8; 1];
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.read_exact(&mut byte).unwrap();
    byte[0] ^= 0x08;
    file.seek(SeekFrom::Start(offset)).unwrap();
    file.write_all(&byte).unwrap();
    file.sync_all().unwrap();
}

#[test]
fn compressible_blocks_are_stored_smaller_and_read_back_after_import() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let text = compressible(VOLUME_BYTES, 1);
    let noise = pattern(VOLUME_BYTES, 2);
    {
        let pool = create_mirror(&paths, plain_opener());
        volume_with(&pool, "tank/text", &[("compression", "on")], &text);
        volume_with(&pool, "tank/plain", &[], &text);
        volume_with(&pool, "tank/noise", &[("compression", "lz4")], &noise);
        pool.sync().unwrap();

        let text_blocks = data_blocks(&pool, "tank/text");
        assert_eq!(text_blocks.len(), VOLUME_BYTES / BLOCK);
        for bp in &text_blocks {
            assert_eq!(bp.compression, Compression::Lz4, "{bp:?}");
            assert_eq!(bp.lsize as usize, BLOCK);
            assert!((bp.psize as usize) < BLOCK / 2, "{bp:?}");
        }
        for name in ["tank/plain", "tank/noise"] {
            let blocks = data_blocks(&pool, name);
            assert_eq!(blocks.len(), VOLUME_BYTES / BLOCK);
            assert!(
                blocks
                    .iter()
                    .all(|bp| bp.compression == Compression::Off && bp.psize == bp.lsize),
                "{name} is stored as written"
            );
        }
        let packed = info(&pool, "tank/text").referenced_bytes;
        let plain = info(&pool, "tank/plain").referenced_bytes;
        assert!(plain >= VOLUME_BYTES as u64, "{plain}");
        assert!(packed * 2 < plain, "compressed {packed} of {plain}");
        // Read back before the export too: from the RAM cache or decompressed from disk.
        assert!(read_all(&pool, "tank/text") == text);
        pool.export().unwrap();
    }
    let pool = import(&paths, plain_opener()).unwrap();
    assert!(read_all(&pool, "tank/text") == text, "compressed volume");
    assert!(read_all(&pool, "tank/plain") == text, "uncompressed twin");
    assert!(
        read_all(&pool, "tank/noise") == noise,
        "incompressible volume"
    );
    let scrub = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!((scrub.bad_copies, scrub.unrecoverable_blocks), (0, 0));
    let report = pool.check().unwrap();
    assert!(report.is_clean(), "{:#?}", report.problems());
    pool.close().unwrap();
}

#[test]
fn partial_writes_into_compressed_blocks_merge_with_the_decompressed_block() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let mut model = compressible(VOLUME_BYTES, 5);
    {
        let pool = create_mirror(&paths, plain_opener());
        volume_with(&pool, "tank/text", &[("compression", "lz4")], &model);
        pool.export().unwrap();
    }
    // Cold: every block is on disk only, compressed; 4 KiB writes land inside them.
    let pool = import(&paths, plain_opener()).unwrap();
    let volume = pool.volume("tank/text").unwrap();
    for (index, block) in (0..VOLUME_BYTES / BLOCK).step_by(3).enumerate() {
        let offset = block * BLOCK + 4096;
        let data = compressible(4096, 100 + index as u64);
        volume.write(offset as u64, &data).unwrap();
        model[offset..offset + data.len()].copy_from_slice(&data);
    }
    assert!(read_all(&pool, "tank/text") == model, "merged on read");
    pool.sync().unwrap();
    assert!(
        data_blocks(&pool, "tank/text")
            .iter()
            .all(|bp| bp.compression == Compression::Lz4),
        "merged blocks are written compressed again"
    );
    pool.export().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    assert!(read_all(&pool, "tank/text") == model, "merged at sync");
    pool.close().unwrap();
}

#[test]
fn a_damaged_compressed_copy_is_detected_and_healed_from_the_other_side() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let text = compressible(VOLUME_BYTES, 9);
    let blocks = {
        let pool = create_mirror(&paths, plain_opener());
        volume_with(&pool, "tank/text", &[("compression", "on")], &text);
        pool.sync().unwrap();
        let blocks = data_blocks(&pool, "tank/text");
        pool.close().unwrap();
        blocks
    };
    let mut rng = Rng(3);
    let damaged: Vec<&BlockPointer> = blocks.iter().step_by(4).collect();
    for bp in &damaged {
        assert_eq!(bp.compression, Compression::Lz4);
        let dva = bp.copies()[0];
        // Anywhere in the stored bytes: the length header, the lz4 data or the padding.
        let at = rng.below(u64::from(bp.psize));
        flip_bit(&paths[0], VDEV_DATA_START + dva.offset + at);
    }
    let pool = import(&paths, plain_opener()).unwrap();
    assert!(
        read_all(&pool, "tank/text") == text,
        "reads return the good copy"
    );
    let scrub = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(scrub.unrecoverable_blocks, 0);
    let side0 = &pool.status().tops[0].leaves[0];
    assert_eq!(side0.checksum_errors, damaged.len() as u64);
    let physical: u64 = damaged.iter().map(|bp| u64::from(bp.psize)).sum();
    assert_eq!(
        side0.repaired_bytes, physical,
        "bad copies rewritten as stored"
    );
    let again = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(again.bad_copies, 0);
    assert!(pool.check().unwrap().is_clean());
    pool.close().unwrap();
}

#[test]
fn the_property_applies_to_blocks_written_after_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let pool = create_mirror(&paths, plain_opener());
    let mut model = compressible(VOLUME_BYTES, 11);
    volume_with(&pool, "tank/text", &[], &model);
    pool.sync().unwrap();
    assert!(
        data_blocks(&pool, "tank/text")
            .iter()
            .all(|bp| bp.compression == Compression::Off),
        "off by default"
    );
    assert!(
        pool.set_property("tank/text", "compression", "zstd")
            .is_err()
    );
    assert_eq!(
        pool.set_property("tank/text", "compression", "on").unwrap(),
        "on"
    );
    // Rewrite the first half: those blocks are compressed, the rest stay as they were.
    let half = compressible(VOLUME_BYTES / 2, 12);
    pool.volume("tank/text").unwrap().write(0, &half).unwrap();
    model[..half.len()].copy_from_slice(&half);
    pool.sync().unwrap();
    let blocks = data_blocks(&pool, "tank/text");
    let packed = blocks
        .iter()
        .filter(|bp| bp.compression == Compression::Lz4)
        .count();
    assert_eq!(packed, VOLUME_BYTES / 2 / BLOCK, "{blocks:?}");
    pool.export().unwrap();
    let pool = import(&paths, plain_opener()).unwrap();
    assert!(read_all(&pool, "tank/text") == model);
    pool.close().unwrap();
}

/// A resilver copies blocks as they are stored: the new side alone then holds every byte (a
/// copy written decompressed would fail its checksum, and overrun its space).
#[test]
fn a_resilver_copies_compressed_blocks_as_stored() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let text = compressible(VOLUME_BYTES, 21);
    let pool = create_mirror(&paths[..1], plain_opener());
    volume_with(&pool, "tank/text", &[("compression", "on")], &text);
    pool.sync().unwrap();
    assert!(
        data_blocks(&pool, "tank/text")
            .iter()
            .all(|bp| bp.compression == Compression::Lz4)
    );
    let new_side = cairn_device::spec::DeviceSpec {
        path: paths[1].clone(),
        model: None,
    };
    let sized = cairn_engine::CreateOptions {
        create_size_bytes: Some(DEVICE_SIZE),
        ..Default::default()
    };
    pool.attach(
        &paths[0].display().to_string(),
        &new_side,
        &sized,
        &plain_opener(),
        cairn_engine::ResilverOptions::default(),
    )
    .unwrap();
    pool.wait_resilver().unwrap();
    assert_eq!(pool.resilver_status().unwrap().unrecoverable_blocks, 0);
    pool.close().unwrap();

    std::fs::remove_file(&paths[0]).unwrap();
    let pool = import(&paths[1..], plain_opener()).unwrap();
    assert!(read_all(&pool, "tank/text") == text, "the new side alone");
    let scrub = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!((scrub.bad_copies, scrub.unrecoverable_blocks), (0, 0));
    assert!(pool.check().unwrap().is_clean());
    pool.close().unwrap();
}
