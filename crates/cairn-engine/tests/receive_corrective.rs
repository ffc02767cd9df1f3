//! Corrective receive (issue 36, acceptance): a block damaged on both sides of a 2-way mirror
//! fails its reads (EIO, counted as checksum errors); a stream of the same snapshot heals it
//! in place, after which the read returns the original bytes and scrub and check are clean.
//! With a plain stream and with a `send -c` one, of a volume stored compressed; blocks that
//! read fine are not written; a stream of another snapshot is refused naming the guids.

mod common;

use cairn_engine::{Pool, SendOptions};
use cairn_format::label::VDEV_DATA_START;
use cairn_format::{BlockPointer, Compression, ObjectType};
use common::streams::*;
use common::*;
use std::io::{Seek, SeekFrom, Write};

const VOLUME_BYTES: usize = 1 << 20;
const BLOCK: u64 = 8192;

/// Text-like bytes lz4 packs well, different in every block.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    let words: [&[u8]; 4] = [b"alpha ", b"bravo ", b"charlie ", b"\n"];
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        out.extend_from_slice(words[rng.below(4) as usize]);
    }
    out.truncate(len);
    out
}

/// The pointer of block `blkid` of the volume data object of snapshot `snapshot`.
fn block_of(pool: &Pool, snapshot: &str, blkid: u64) -> BlockPointer {
    let objset = pool.snapshot_objset(snapshot).unwrap();
    let object = (1..objset.object_id_bound())
        .find(|&object| {
            let dnode = objset.dnode(object).unwrap();
            !dnode.is_free() && dnode.object_type == ObjectType::VolumeData
        })
        .unwrap();
    objset.synced_block_pointer(object, blkid).unwrap().unwrap()
}

/// Overwrites 64 bytes of the block's copy on every device of the mirror.
fn damage_everywhere(paths: &[std::path::PathBuf], bp: &BlockPointer) {
    let offset = VDEV_DATA_START + bp.copies()[0].offset + 100;
    for path in paths {
        let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.seek(SeekFrom::Start(offset)).unwrap();
        file.write_all(&[0x5a; 64]).unwrap();
        file.sync_all().unwrap();
    }
}

fn checksum_errors(pool: &Pool) -> u64 {
    pool.status().tops[0]
        .leaves
        .iter()
        .map(|leaf| leaf.checksum_errors)
        .sum()
}

fn heal_round(compressed_stream: bool) {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 2);
    let contents = text(VOLUME_BYTES, 7);
    let (stream, other_stream, damaged) = {
        let pool = create_mirror(&paths, plain_opener());
        pool.create_volume(
            "tank/vol",
            VOLUME_BYTES as u64,
            &[
                ("volblocksize".into(), BLOCK.to_string()),
                ("compression".into(), "lz4".into()),
            ],
        )
        .unwrap();
        pool.volume("tank/vol")
            .unwrap()
            .write(0, &contents)
            .unwrap();
        pool.snapshot(&["tank/vol@s".into()], false).unwrap();
        pool.snapshot(&["tank/vol@t".into()], false).unwrap();
        let options = SendOptions {
            compressed: compressed_stream,
            ..SendOptions::default()
        };
        let mut stream = Vec::new();
        pool.send_with("tank/vol@s", None, options, &mut stream, &mut |_| {})
            .unwrap();
        let other = send(&pool, "tank/vol@t", None);
        let damaged = [
            block_of(&pool, "tank/vol@s", 5),
            block_of(&pool, "tank/vol@s", 90),
        ];
        assert!(damaged.iter().all(|bp| bp.compression == Compression::Lz4));
        pool.close().unwrap();
        (stream, other, damaged)
    };
    for bp in &damaged {
        damage_everywhere(&paths, bp);
    }
    let pool = import(&paths, plain_opener()).unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let mut block = vec![0u8; BLOCK as usize];
    let err = volume.read(5 * BLOCK, &mut block).unwrap_err();
    assert_eq!(err.class().errno(), libc::EIO, "{err}");
    assert!(checksum_errors(&pool) >= 2, "both sides counted");
    // A stream of another snapshot heals nothing: refused, naming the guids.
    let err = pool
        .receive_corrective("tank/vol@s", &mut &other_stream[..])
        .unwrap_err()
        .to_string();
    assert!(err.contains("guid"), "{err}");
    let summary = pool
        .receive_corrective("tank/vol@s", &mut &stream[..])
        .unwrap();
    assert_eq!(summary.blocks_healed, 2, "{summary:?}");
    assert_eq!(summary.blocks_checked, (VOLUME_BYTES as u64) / BLOCK);
    assert_eq!(summary.blocks_mismatched, 0);
    volume.read(5 * BLOCK, &mut block).unwrap();
    assert!(block[..] == contents[5 * BLOCK as usize..6 * BLOCK as usize]);
    let mut all = vec![0u8; VOLUME_BYTES];
    volume.read(0, &mut all).unwrap();
    assert!(all == contents);
    let scrub = pool.scrub(&mut |_| {}).unwrap();
    assert_eq!(scrub.unrecoverable_blocks, 0);
    assert_eq!(scrub.bad_copies, 0, "{scrub:?}");
    assert!(pool.check().unwrap().is_clean());
    // Again: every block reads fine now, nothing is written.
    let again = pool
        .receive_corrective("tank/vol@s", &mut &stream[..])
        .unwrap();
    assert_eq!(again.blocks_healed, 0);
    drop(volume);
    pool.close().unwrap();
    assert!(check_read_only(&paths).is_clean());
}

#[test]
fn a_block_damaged_on_both_sides_is_healed_from_a_plain_stream() {
    heal_round(false);
}

#[test]
fn a_block_damaged_on_both_sides_is_healed_from_a_compressed_stream() {
    heal_round(true);
}
