//! Packages (issue 36): `send -R` of a tree (filesystems and a volume, several snapshots each,
//! local properties on some, a clone inside) received under another name rebuilds the same
//! tree, snapshots (same guids), local properties (inherited ones stay inherited), origin
//! relations and content; `-R -I` then brings every new snapshot and a new child; `-R -i`
//! with `-F` destroys what the source destroyed (a snapshot, a dataset); `-p` alone
//! sets the properties (and a plain stream does not); `-I` alone sends every snapshot between.
//! Bad input: `-R` where a child lacks the snapshot is refused naming it; a package cut at
//! any of many offsets leaves exactly the sub-streams before the cut received whole (never a
//! half-received dataset) and the pool clean; a damaged package END says every stream arrived.

mod common;

use cairn_engine::{PackageOptions, Pool, ReceiveOptions};
use cairn_format::send_package::PackageReader;
use cairn_format::send_stream::{SEND_HEADER_SIZE, StreamReader};
use common::streams::*;
use common::*;
use std::collections::BTreeMap;

fn package(pool: &Pool, snapshot: &str, options: PackageOptions) -> Vec<u8> {
    let mut out = Vec::new();
    pool.send_package(snapshot, &options, &mut out, &mut |_| {})
        .unwrap();
    out
}

fn recursive() -> PackageOptions {
    PackageOptions {
        recursive: true,
        ..Default::default()
    }
}

/// Datasets under (and of) `top`, names relative to it.
fn tree(pool: &Pool, top: &str) -> Vec<String> {
    let mut names: Vec<String> = pool
        .dataset_names()
        .into_iter()
        .filter_map(|name| relative(&name, top))
        .collect();
    names.sort();
    names
}

fn relative(name: &str, top: &str) -> Option<String> {
    if name == top {
        return Some(String::new());
    }
    name.strip_prefix(&format!("{top}/")).map(str::to_string)
}

/// Every snapshot under `top`: relative name → guid.
fn snapshots(pool: &Pool, top: &str) -> BTreeMap<String, u64> {
    pool.snapshots(None)
        .unwrap()
        .into_iter()
        .filter_map(|listing| {
            let rest = listing.name.strip_prefix(top)?;
            let name = rest.strip_prefix('/').unwrap_or(rest);
            (rest.starts_with('@') || rest.starts_with('/'))
                .then(|| (name.to_string(), listing.guid))
        })
        .collect()
}

/// The properties of `dataset` set locally, and those inherited (from where, relative).
fn local_and_inherited(
    pool: &Pool,
    dataset: &str,
    top: &str,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let (mut local, mut inherited) = (BTreeMap::new(), BTreeMap::new());
    for (name, value, source) in pool.properties(dataset).unwrap() {
        if source == "local" {
            local.insert(name.to_string(), value);
        } else if let Some(from) = source.strip_prefix("inherited from ") {
            let from = relative(from, top).unwrap_or_else(|| format!("outside: {from}"));
            inherited.insert(name.to_string(), format!("{value} from '{from}'"));
        }
    }
    (local, inherited)
}

fn write_files(pool: &Pool, dataset: &str, round: u64) {
    let fs = pool.filesystem(dataset).unwrap();
    for index in 0..3 {
        let name = format!("f{round}-{index}");
        let (object, _) = fs.create(fs.root(), name.as_bytes(), file(0o640)).unwrap();
        fs.write(object, index * 5000, &pattern(30_000, round * 10 + index))
            .unwrap();
    }
}

fn write_volume(pool: &Pool, dataset: &str, round: u64) {
    let volume = pool.volume(dataset).unwrap();
    volume
        .write(round * 65_536, &pattern(40_000, round))
        .unwrap();
}

/// `tank/a` (compression=lz4, atime=off), `tank/a/b` (recordsize=16K), `tank/a/b/c` (a
/// volume), snapshots @s1..@s3 of all, and `tank/a/clone` of `tank/a/b@s1` (written, with
/// @s2 and @s3).
fn source_tree(pool: &Pool) {
    new_filesystem(pool, "tank/a", &[("compression", "lz4"), ("atime", "off")]);
    new_filesystem(pool, "tank/a/b", &[("recordsize", "16384")]);
    pool.create_volume_as(
        "tank/a/b/c",
        1 << 20,
        cairn_dataset::directory::Provisioning::Thick,
        &[("volblocksize".into(), "8192".into())],
    )
    .unwrap();
    for round in 1..=3 {
        write_files(pool, "tank/a", round);
        write_files(pool, "tank/a/b", round);
        write_volume(pool, "tank/a/b/c", round);
        if round > 1 {
            write_files(pool, "tank/a/clone", round);
        }
        pool.snapshot(&[format!("tank/a@s{round}")], true).unwrap();
        if round == 1 {
            pool.clone_snapshot("tank/a/b@s1", "tank/a/clone", &[])
                .unwrap();
            pool.set_property("tank/a/clone", "snapdir", "visible")
                .unwrap();
        }
    }
}

/// Everything `receive` must have rebuilt of `source` under `target`, compared.
fn assert_same_trees(a: &Pool, source: &str, b: &Pool, target: &str) {
    assert_eq!(tree(a, source), tree(b, target));
    assert_eq!(snapshots(a, source), snapshots(b, target));
    for name in tree(a, source) {
        let suffix = if name.is_empty() {
            String::new()
        } else {
            format!("/{name}")
        };
        let (from, to) = (format!("{source}{suffix}"), format!("{target}{suffix}"));
        assert_eq!(
            local_and_inherited(a, &from, source),
            local_and_inherited(b, &to, target),
            "properties of {to}"
        );
        let origin = |pool: &Pool, dataset: &str, top: &str| {
            pool.origin(dataset)
                .unwrap()
                .map(|origin| relative(&origin, top).unwrap_or(origin))
        };
        assert_eq!(origin(a, &from, source), origin(b, &to, target), "{to}");
        for snapshot in a.snapshots(Some(&from)).unwrap() {
            let short = snapshot.name.rsplit_once('@').unwrap().1.to_string();
            assert_same_objects(a, &snapshot.name, b, &format!("{to}@{short}"));
        }
        if let Ok(fs) = a.filesystem(&from) {
            let copy = b.filesystem(&to).unwrap();
            let roots = (fs.root(), copy.root());
            assert_same_tree((&fs, &copy), roots, &to, false, &mut Default::default());
        } else {
            let (left, right) = (a.volume(&from).unwrap(), b.volume(&to).unwrap());
            let mut bytes = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
            left.read(0, &mut bytes.0).unwrap();
            right.read(0, &mut bytes.1).unwrap();
            assert!(bytes.0 == bytes.1, "{to}: volume bytes");
        }
    }
}

#[test]
fn a_tree_with_a_clone_arrives_whole_then_grows_incrementally() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    source_tree(&a);
    let stream = package(&a, "tank/a@s3", recursive());
    let made = receive(&b, "tank/r", &stream).unwrap();
    assert_eq!(made, "tank/r@s3");
    assert_eq!(
        tree(&b, "tank/r"),
        ["", "b", "b/c", "clone"],
        "the same tree"
    );
    assert_eq!(
        b.origin("tank/r/clone").unwrap().as_deref(),
        Some("tank/r/b@s1")
    );
    let (local, inherited) = local_and_inherited(&b, "tank/r/b", "tank/r");
    assert_eq!(local.get("recordsize").map(String::as_str), Some("16384"));
    assert_eq!(
        inherited.get("compression").map(String::as_str),
        Some("lz4 from ''"),
        "inherited stays inherited"
    );
    assert_same_trees(&a, "tank/a", &b, "tank/r");
    // The clone shares its origin's blocks on the target too: it holds only what it wrote.
    let (clone, origin) = (info(&b, "tank/r/clone"), info(&b, "tank/r/b"));
    assert!(clone.used_bytes < origin.used_bytes, "{clone:?} {origin:?}");

    // -R -I: two more snapshots, a new child, a new file; reads of the replica (atime=off
    // arrived with the properties) wrote nothing, so no -F is needed.
    new_filesystem(&a, "tank/a/b/new", &[("atime", "on")]);
    for round in 4..=5 {
        write_files(&a, "tank/a/b", round);
        write_files(&a, "tank/a/b/new", round);
        write_files(&a, "tank/a/clone", round);
        a.snapshot(&[format!("tank/a@s{round}")], true).unwrap();
    }
    a.set_property("tank/a/b", "compression", "off").unwrap();
    let options = PackageOptions {
        from: Some("@s3".into()),
        intermediates: true,
        ..recursive()
    };
    let stream = package(&a, "tank/a@s5", options);
    receive(&b, "tank/r", &stream).unwrap();
    assert_same_trees(&a, "tank/a", &b, "tank/r");
    assert!(snapshots(&b, "tank/r").contains_key("clone@s4"));

    // The source destroys a snapshot and a dataset: -R -i without -F keeps them on the
    // target, with -F (the same package again: its newer snapshot rolled back) they go.
    a.destroy_snapshot("tank/a/b@s2").unwrap();
    a.destroy_snapshots(&["tank/a/b/new@s4".into(), "tank/a/b/new@s5".into()])
        .unwrap();
    a.destroy_dataset("tank/a/b/new").unwrap();
    a.snapshot(&["tank/a@s6".into()], true).unwrap();
    let options = PackageOptions {
        from: Some("@s5".into()),
        ..recursive()
    };
    let stream = package(&a, "tank/a@s6", options);
    receive(&b, "tank/r", &stream).unwrap();
    assert!(snapshots(&b, "tank/r").contains_key("b@s2"));
    assert!(tree(&b, "tank/r").contains(&"b/new".to_string()));
    let mut input = stream.as_slice();
    b.receive(
        "tank/r",
        &mut input,
        ReceiveOptions {
            force: true,
            ..ReceiveOptions::default()
        },
    )
    .unwrap();
    assert!(!snapshots(&b, "tank/r").contains_key("b@s2"));
    assert_same_trees(&a, "tank/a", &b, "tank/r");
    let report = b.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
    b.export().unwrap();
    let b = import(&device_paths(dir_b.path(), 1), plain_opener()).unwrap();
    assert_same_trees(&a, "tank/a", &b, "tank/r");
}

#[test]
fn properties_alone_and_every_snapshot_between() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    new_filesystem(
        &a,
        "tank/fs",
        &[
            ("atime", "off"),
            ("recordsize", "32768"),
            ("compression", "lz4"),
        ],
    );
    for round in 1..=4 {
        write_files(&a, "tank/fs", round);
        a.snapshot(&[format!("tank/fs@s{round}")], false).unwrap();
    }
    // A plain stream carries no properties.
    receive(&b, "tank/plain", &send(&a, "tank/fs@s1", None)).unwrap();
    let (plain, _) = local_and_inherited(&b, "tank/plain", "tank/plain");
    assert!(!plain.contains_key("compression"), "{plain:?}");
    // -p: the same local properties, nothing else local.
    let with = PackageOptions {
        properties: true,
        ..Default::default()
    };
    receive(&b, "tank/copy", &package(&a, "tank/fs@s1", with)).unwrap();
    assert_eq!(
        local_and_inherited(&a, "tank/fs", "tank/fs").0,
        local_and_inherited(&b, "tank/copy", "tank/copy").0
    );
    assert_eq!(snapshots(&b, "tank/copy").len(), 1);
    // -I @s1: @s2, @s3 and @s4 arrive, each with its guid.
    let every = PackageOptions {
        from: Some("tank/fs@s1".into()),
        intermediates: true,
        ..Default::default()
    };
    let made = receive(&b, "tank/copy", &package(&a, "tank/fs@s4", every)).unwrap();
    assert_eq!(made, "tank/copy@s4");
    assert_eq!(snapshots(&a, "tank/fs"), snapshots(&b, "tank/copy"));
    for round in 1..=4 {
        assert_same_objects(
            &a,
            &format!("tank/fs@s{round}"),
            &b,
            &format!("tank/copy@s{round}"),
        );
    }
    assert!(b.check().unwrap().is_clean());
}

/// Where each sub-stream of `package` ends (bytes from the package's start).
fn stream_ends(package: &[u8]) -> Vec<u64> {
    let mut input = package;
    let mut head = [0u8; SEND_HEADER_SIZE];
    std::io::Read::read_exact(&mut input, &mut head).unwrap();
    let mut reader = PackageReader::new(&head, &mut input).unwrap();
    let mut ends = Vec::new();
    for _ in 0..reader.manifest().streams.len() {
        let mut stream = StreamReader::new(reader.stream_input()).unwrap();
        while stream.next_record().unwrap().is_some() {}
        let end = stream.checksum();
        reader.stream_done(&end);
        ends.push(reader.offset_bytes());
    }
    reader.finish().unwrap();
    ends
}

#[test]
fn bad_packages_leave_what_is_documented() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = create_mirror(&device_paths(dir_a.path(), 1), plain_opener());
    let b = create_mirror(&device_paths(dir_b.path(), 1), plain_opener());
    source_tree(&a);
    // A child without the snapshot: refused, naming it.
    new_filesystem(&a, "tank/a/late", &[]);
    let mut out = Vec::new();
    let err = a
        .send_package("tank/a@s3", &recursive(), &mut out, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("tank/a/late@s3"), "{err}");
    a.destroy_dataset("tank/a/late").unwrap();

    let stream = package(&a, "tank/a@s3", recursive());
    let ends = stream_ends(&stream);
    assert_eq!(ends.len(), 11, "3 datasets × 3 snapshots, the clone's 2");
    let mut rng = Rng(41);
    let mut cuts: Vec<usize> = (0..10)
        .map(|_| rng.below(stream.len() as u64) as usize)
        .collect();
    cuts.extend([
        100,
        ends[0] as usize,
        ends[5] as usize + 1,
        stream.len() - 1,
    ]);
    for (trial, cut) in cuts.into_iter().enumerate() {
        let target = format!("tank/cut{trial}");
        let err = receive(&b, &target, &stream[..cut]).unwrap_err();
        let whole = ends.iter().filter(|&&end| end as usize <= cut).count();
        let arrived = snapshots(&b, &target);
        if whole == ends.len() {
            assert!(err.contains("all 11 of its streams were received"), "{err}");
        } else if whole > 0 {
            assert!(
                err.contains(&format!("stream {} of 11", whole + 1)),
                "{err}"
            );
        }
        assert_eq!(arrived.len(), whole, "cut at {cut}: {err}");
        assert!(
            b.dataset_names().iter().all(|name| !name.contains('%')),
            "nothing hidden left"
        );
        // Whatever dataset is there holds every object of its snapshots (none half-received).
        for snapshot in arrived.keys() {
            let (dataset, short) = snapshot.rsplit_once('@').unwrap();
            let from = if dataset.is_empty() {
                "tank/a".to_string()
            } else {
                format!("tank/a/{dataset}")
            };
            let suffix = if dataset.is_empty() {
                String::new()
            } else {
                format!("/{dataset}")
            };
            assert_same_objects(
                &a,
                &format!("{from}@{short}"),
                &b,
                &format!("{target}{suffix}@{short}"),
            );
        }
    }
    let report = b.check().unwrap();
    assert!(report.is_clean(), "{report:?}");
    // A flipped byte in the last stream: the streams before it stay, that one does not.
    let mut damaged = stream.clone();
    let at = (ends[9] as usize + ends[10] as usize) / 2;
    damaged[at] ^= 1;
    let mut input = damaged.as_slice();
    let err = b
        .receive("tank/flip", &mut input, ReceiveOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("stream 11 of 11") && err.contains("damaged"),
        "{err}"
    );
    assert_eq!(snapshots(&b, "tank/flip").len(), 10);
}
