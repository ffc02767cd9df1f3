//! `send -n` (issue 36): the size a counting send reports equals, byte for byte, the stream a
//! real send of the same snapshot writes, with the same object and block counts: full and
//! incremental (from a snapshot and from a bookmark whose snapshot is gone), volume and
//! filesystem, plain and `-c`; and it reads no data block (the cache's data misses stay put
//! while the real send's grow).

mod common;

use cairn_engine::{
    ArcConfig, ImportSource, Pool, PoolOptions, ReadCache, SendOptions, SendSummary,
};
use common::*;

fn send_with(
    pool: &Pool,
    snapshot: &str,
    from: Option<&str>,
    options: SendOptions,
) -> (SendSummary, u64) {
    let mut out = Vec::new();
    let summary = pool
        .send_with(snapshot, from, options, &mut out, &mut |_| {})
        .unwrap();
    (summary, out.len() as u64)
}

/// The counted size against a real send, for plain and `-c`.
fn assert_exact(pool: &Pool, snapshot: &str, from: Option<&str>) {
    for compressed in [false, true] {
        let real = SendOptions {
            compressed,
            count_only: false,
        };
        let (sent, written) = send_with(pool, snapshot, from, real);
        let counted = SendOptions {
            compressed,
            count_only: true,
        };
        let (size, nothing) = send_with(pool, snapshot, from, counted);
        let what = format!("{snapshot} from {from:?}, -c {compressed}");
        assert_eq!(nothing, 0, "{what}: a counting send wrote bytes");
        assert_eq!(size.bytes_written, written, "{what}: size");
        assert_eq!(sent.bytes_written, written, "{what}");
        assert_eq!(size.objects, sent.objects, "{what}: objects");
        assert_eq!(size.blocks_written, sent.blocks_written, "{what}: blocks");
    }
}

#[test]
fn counted_sizes_equal_the_streams_sent() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 1), plain_opener());
    pool.create_volume_as(
        "tank/vol",
        4 << 20,
        cairn_dataset::directory::Provisioning::Sparse,
        &[
            ("volblocksize".into(), "8192".into()),
            ("compression".into(), "lz4".into()),
        ],
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    let fs = new_filesystem(&pool, "tank/fs", &[("compression", "lz4")]);
    let mut rng = Rng(5);
    let write_round = |rng: &mut Rng, round: u64| {
        for _ in 0..20 {
            let offset = rng.below(4 << 20);
            let len = (1 + rng.below(30_000)).min((4 << 20) - offset);
            // Half compressible (a repeated byte), half not.
            let data = if rng.below(2) == 0 {
                vec![round as u8 + 1; len as usize]
            } else {
                pattern(len as usize, rng.next())
            };
            volume.write(offset, &data).unwrap();
        }
        volume.trim(rng.below(400) * 8192, 3 * 8192).unwrap();
        let name = format!("f{round}");
        let (object, _) = fs.create(fs.root(), name.as_bytes(), file(0o644)).unwrap();
        fs.write(object, rng.below(9000), &vec![b'x'; 70_000])
            .unwrap();
        fs.write(object, 200_000, &pattern(5000, round)).unwrap();
    };
    write_round(&mut rng, 0);
    pool.snapshot(&["tank/vol@a".into(), "tank/fs@a".into()], false)
        .unwrap();
    pool.bookmark("tank/vol@a", "tank/vol#a").unwrap();
    write_round(&mut rng, 1);
    pool.snapshot(&["tank/vol@b".into(), "tank/fs@b".into()], false)
        .unwrap();
    for dataset in ["tank/vol", "tank/fs"] {
        assert_exact(&pool, &format!("{dataset}@a"), None);
        assert_exact(&pool, &format!("{dataset}@b"), None);
        assert_exact(&pool, &format!("{dataset}@b"), Some("@a"));
    }
    pool.destroy_snapshot("tank/vol@a").unwrap();
    assert_exact(&pool, "tank/vol@b", Some("#a"));
    // A counting send of a pool just opened reads no data block: its cache's data misses
    // stay put while a real send's grow.
    pool.export().unwrap();
    let arc = ReadCache::new(ArcConfig {
        max_bytes: 64 << 20,
        min_bytes: 8 << 20,
        shards: 4,
        prefetch_threads: 2,
    });
    let options = PoolOptions {
        arc: Some(arc.clone()),
        ..options(plain_opener())
    };
    let specs = specs(&device_paths(dir.path(), 1));
    let pool = Pool::import(&ImportSource::Devices(specs), "tank", options).unwrap();
    let data_misses = |name: &str| arc.stats().get(name).unwrap_or(0);
    let before = (
        data_misses("demand_data_misses"),
        data_misses("prefetch_data_misses"),
    );
    let counted = SendOptions {
        compressed: false,
        count_only: true,
    };
    let (size, _) = send_with(&pool, "tank/vol@b", None, counted);
    assert!(size.blocks_written > 20, "{size:?}");
    let after = (
        data_misses("demand_data_misses"),
        data_misses("prefetch_data_misses"),
    );
    assert_eq!(after, before, "a counting send read data");
    send_with(&pool, "tank/vol@b", None, SendOptions::default());
    let real = data_misses("demand_data_misses") + data_misses("prefetch_data_misses");
    assert!(
        real > before.0 + before.1,
        "the real send's reads are not counted"
    );
}
