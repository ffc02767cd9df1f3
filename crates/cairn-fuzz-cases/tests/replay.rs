//! The fuzz cases on the stable toolchain, for a bounded time in CI: every input of the
//! committed seed corpus (`fuzz/seeds/TARGET/`) and of a local libFuzzer corpus
//! (`fuzz/corpus/TARGET/`, if one was grown here), then a fixed number of seeded random inputs
//! and mutations of the seeds, through the same `cairn_fuzz_cases` functions the cargo-fuzz
//! targets call. A panic fails the test naming the target and the input, which is saved under
//! `fuzz/artifacts/TARGET/` so `cargo +nightly fuzz run TARGET FILE` reproduces it.
//!
//! The seed corpus is encodings of real values made by the format's own encoders (so mutations
//! start from inputs that get past the magic and checksums); `write_seed_corpus` (ignored)
//! rewrites it: `cargo test -p cairn-fuzz-cases --test replay -- --ignored`.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

use cairn_fuzz_cases::{FuzzCase, TARGETS};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

/// Random inputs per target (lengths mostly small, some up to `RANDOM_LEN_MAX`).
const RANDOM_INPUTS: usize = 20_000;
const RANDOM_LEN_MAX: usize = 9000;
/// Mutants derived from each seed.
const MUTANTS_PER_SEED: usize = 5000;
/// Fixed, so a failure replays; change it to explore other inputs.
const RNG_SEED: u64 = 0x00c0_ffee_cafe_f00d;

fn fuzz_dir() -> PathBuf {
    // crates/cairn-fuzz-cases -> the repository root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate lives two levels below the repository root")
        .join("fuzz")
}

/// The files of `dir`, sorted by name (none if it does not exist).
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = entries
        .map(|entry| entry.expect("read corpus directory").path())
        .filter(|path| path.is_file())
        .map(|path| {
            let bytes = std::fs::read(&path).expect("read corpus file");
            (path.display().to_string(), bytes)
        })
        .collect();
    out.sort();
    out
}

/// Runs `case` on `input`; on a panic saves the input and fails naming it.
fn run_one(target: &str, case: FuzzCase, what: &str, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| case(input))).is_ok() {
        return;
    }
    let artifacts = fuzz_dir().join("artifacts").join(target);
    std::fs::create_dir_all(&artifacts).expect("create artifacts directory");
    let saved = artifacts.join(format!("replay-{}", blake3_hex(input)));
    std::fs::write(&saved, input).expect("save the failing input");
    panic!(
        "fuzz case {target} panicked on {what} ({} bytes), saved as {}",
        input.len(),
        saved.display()
    );
}

fn blake3_hex(input: &[u8]) -> String {
    cairn_format::checksum::embedded(input)[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// One random edit of `input`: bit flips, interesting bytes and words, truncation, growth,
/// or a splice from `other`.
fn mutate(rng: &mut SmallRng, input: &mut Vec<u8>, other: &[u8]) {
    const WORDS: [u64; 8] = [0, 1, 0x7f, 0x80, 0xff, 0xffff_ffff, u64::MAX, 1 << 63];
    let at = |rng: &mut SmallRng, len: usize| rng.random_range(0..len.max(1));
    match rng.random_range(0..7) {
        0 if !input.is_empty() => {
            let index = at(rng, input.len());
            input[index] ^= 1 << rng.random_range(0..8);
        }
        1 if !input.is_empty() => {
            let index = at(rng, input.len());
            input[index] = WORDS[rng.random_range(0..WORDS.len())] as u8;
        }
        2 if input.len() >= 8 => {
            let index = at(rng, input.len() - 7);
            let word = WORDS[rng.random_range(0..WORDS.len())];
            let width = [2, 4, 8][rng.random_range(0..3)];
            input[index..index + width].copy_from_slice(&word.to_le_bytes()[..width]);
        }
        3 => {
            let keep = at(rng, input.len() + 1);
            input.truncate(keep);
        }
        4 => {
            let grow = rng.random_range(1..=256);
            input.extend((0..grow).map(|_| rng.random::<u8>()));
        }
        5 if !other.is_empty() && !input.is_empty() => {
            let from = at(rng, other.len());
            let to = at(rng, input.len());
            let len = (other.len() - from).min(input.len() - to).min(64);
            input[to..to + len].copy_from_slice(&other[from..from + len]);
        }
        _ => {
            let index = at(rng, input.len() + 1);
            input.insert(index.min(input.len()), rng.random());
        }
    }
}

fn random_input(rng: &mut SmallRng) -> Vec<u8> {
    let len = if rng.random_range(0..8) == 0 {
        rng.random_range(0..=RANDOM_LEN_MAX)
    } else {
        rng.random_range(0..=1200)
    };
    (0..len).map(|_| rng.random()).collect()
}

#[test]
fn every_target_has_a_committed_seed_corpus() {
    for (target, _) in TARGETS {
        let dir = fuzz_dir().join("seeds").join(target);
        assert!(
            !files(&dir).is_empty(),
            "no seed corpus in {}: run the ignored write_seed_corpus test",
            dir.display()
        );
    }
}

#[test]
fn corpora_random_and_mutated_inputs_never_panic() {
    let mut rng = SmallRng::seed_from_u64(RNG_SEED);
    for &(target, case) in TARGETS {
        let mut seeds = files(&fuzz_dir().join("seeds").join(target));
        seeds.extend(files(&fuzz_dir().join("corpus").join(target)));
        for (path, bytes) in &seeds {
            run_one(target, case, path, bytes);
        }
        for index in 0..RANDOM_INPUTS {
            let input = random_input(&mut rng);
            run_one(target, case, &format!("random input #{index}"), &input);
        }
        for (seed_index, (path, bytes)) in seeds.iter().enumerate() {
            let other = &seeds[(seed_index + 1) % seeds.len()].1;
            for index in 0..MUTANTS_PER_SEED {
                let mut input = bytes.clone();
                for _ in 0..rng.random_range(1..=4) {
                    mutate(&mut rng, &mut input, other);
                }
                run_one(target, case, &format!("mutant #{index} of {path}"), &input);
            }
        }
    }
}

/// Encodings of real values, by target: what `write_seed_corpus` commits.
mod seeds {
    /// A small volume stream: OBJECT, a WRITE, a FREE, FREEOBJECTS, END.
    pub fn send_stream_seed() -> Vec<u8> {
        use cairn_format::send_stream::{StreamHeader, StreamKind, StreamRecord, StreamWriter};
        let header = StreamHeader {
            features: 0,
            kind: StreamKind::Volume,
            to_guid: 0x5eed,
            to_txg: 9,
            from_guid: 0,
            from_txg: 0,
            volsize_bytes: 1 << 20,
            block_size_bytes: 512,
            resume: None,
            creation_ms: 1,
        };
        let mut out = Vec::new();
        let mut writer = StreamWriter::new(&mut out, &header).expect("header");
        for record in [
            StreamRecord::Object {
                object: 1,
                object_type: ObjectType::VolumeData,
                block_size_bytes: 512,
                indirect_shift: 17,
                bonus: vec![7; 3],
            },
            StreamRecord::Write {
                object: 1,
                offset_bytes: 1024,
                data: (0..512u32).map(|i| i as u8).collect(),
            },
            StreamRecord::Free {
                object: 1,
                offset_bytes: 2048,
                length_bytes: u64::MAX,
            },
            StreamRecord::FreeObjects {
                first: 2,
                count: 30,
            },
        ] {
            writer.write(&record).expect("record");
        }
        writer.finish("seed").expect("end");
        out
    }

    use cairn_dataset::directory::creation_properties;
    use cairn_dataset::{DatasetDirectory, DatasetKind, ScrubRecord};
    use cairn_format::blkptr::{BlockPointer, Compression, Dva, ObjectType};
    use cairn_format::checksum::{Checksum, ChecksumAlgorithm};
    use cairn_format::dnode::{DNODE_BLOCK_SIZE, DNODE_SIZE, Dnode, ObjsetPhys, ObjsetType};
    use cairn_format::intent_log::{IntentLogHeader, LaneHead, LogBlock, LogRecord, LogRecordKind};
    use cairn_format::label::{
        LabelConfig, LeafConfig, PoolState, TopVdevConfig, TopVdevKind, VdevRole, VdevTreeConfig,
    };
    use cairn_format::spacelog::{SpaceLogBlock, SpaceLogKind};
    use cairn_format::{FORMAT_VERSION, SpaceLogEntry, SpaceOp, Uberblock};
    use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
    use cairn_fs::log::FsOp;
    use cairn_fs::{SetAttrs, XattrMode, raw};
    use cairn_l2arc::layout::{SegmentHeader, SummaryEntry, Superblock, encode_summary};
    use cairn_object::map::{self, Entry, ValueKind};
    use std::collections::BTreeMap;

    fn block_pointer(
        object_type: ObjectType,
        level: u8,
        offset: u64,
        copies: usize,
    ) -> BlockPointer {
        let data = vec![offset as u8; 4096];
        let mut dvas = [Dva::default(); 3];
        for (index, dva) in dvas.iter_mut().enumerate().take(copies) {
            *dva = Dva {
                vdev: index as u32 % 2,
                offset: offset + (index as u64) * (1 << 20),
                asize: 4096,
            };
        }
        BlockPointer {
            dvas,
            lsize: 4096,
            psize: 4096,
            compression: Compression::Off,
            checksum_algorithm: ChecksumAlgorithm::Fletcher4,
            object_type,
            level,
            birth_txg: 42,
            fill: 1,
            checksum: ChecksumAlgorithm::Fletcher4.compute(&data),
        }
    }

    fn volume_dnode() -> Dnode {
        Dnode {
            object_type: ObjectType::VolumeData,
            levels: 2,
            indirect_shift: 17,
            checksum_algorithm: Some(ChecksumAlgorithm::Blake3),
            data_block_size: 8192,
            max_block_id: 200,
            used_bytes: 3 * 131_072,
            birth_txg: 7,
            block_pointer_count: 3,
            block_pointers: [
                block_pointer(ObjectType::VolumeData, 1, 0x10000, 2),
                BlockPointer::HOLE,
                block_pointer(ObjectType::VolumeData, 1, 0x80000, 2),
            ],
            bonus: 12_345u64.to_le_bytes().to_vec(),
        }
    }

    fn meta_dnode() -> Dnode {
        Dnode {
            object_type: ObjectType::DnodeBlock,
            levels: 1,
            indirect_shift: 17,
            checksum_algorithm: None,
            data_block_size: DNODE_BLOCK_SIZE,
            max_block_id: 0,
            used_bytes: 8192,
            birth_txg: 3,
            block_pointer_count: 3,
            block_pointers: [
                block_pointer(ObjectType::DnodeBlock, 0, 0x4000, 2),
                BlockPointer::HOLE,
                BlockPointer::HOLE,
            ],
            bonus: Vec::new(),
        }
    }

    fn intent_log_header() -> IntentLogHeader {
        IntentLogHeader {
            lanes: vec![
                LaneHead {
                    chain_guid: 0xfeed_f00d_dead_beef,
                    sequence: 7,
                    block: Dva {
                        vdev: 1,
                        offset: 0x2000,
                        asize: 8192,
                    },
                },
                LaneHead::default(),
            ],
        }
    }

    fn label_config() -> LabelConfig {
        let leaf = |guid: u64, path: &str| LeafConfig {
            guid,
            path: path.into(),
            model: None,
        };
        LabelConfig {
            version: FORMAT_VERSION,
            pool_name: "tank".into(),
            pool_guid: 0x1234_5678,
            state: PoolState::Active,
            txg: 99,
            leaf_guid: 11,
            tree: VdevTreeConfig {
                tops: vec![
                    TopVdevConfig {
                        id: 0,
                        guid: 10,
                        kind: TopVdevKind::Mirror,
                        role: VdevRole::Normal,
                        ashift: 12,
                        metaslab_shift: 24,
                        metaslab_count: 62,
                        children: vec![leaf(11, "/dev/a"), leaf(12, "/dev/b")],
                    },
                    TopVdevConfig {
                        id: 1,
                        guid: 20,
                        kind: TopVdevKind::Leaf,
                        role: VdevRole::Log,
                        ashift: 9,
                        metaslab_shift: 20,
                        metaslab_count: 8,
                        children: vec![leaf(21, "emu:ssd-plp:/tmp/slog")],
                    },
                ],
            },
        }
    }

    fn space_log_block(kind: SpaceLogKind, prev: BlockPointer) -> SpaceLogBlock {
        let entry = |op, offset, length| SpaceLogEntry {
            vdev: 0,
            op,
            offset,
            length,
            txg: 9,
        };
        SpaceLogBlock {
            kind,
            txg: 9,
            sequence: 1,
            prev,
            entries: vec![
                entry(SpaceOp::Alloc, 0, 0x3000),
                entry(SpaceOp::Alloc, 0x8000, 0x1000),
                entry(SpaceOp::Free, 0x20000, 0x2000),
            ],
        }
    }

    fn log_block() -> LogBlock {
        let record = |kind, sequence, length: u64, data: Vec<u8>| LogRecord {
            kind,
            sequence,
            txg: 12,
            object: 1,
            offset: 8192 * sequence,
            length,
            data,
        };
        let in_place = BlockPointer {
            birth_txg: 12,
            ..block_pointer(ObjectType::VolumeData, 0, 0x40000, 1)
        };
        LogBlock {
            position: cairn_fuzz_cases::intent_log::EXPECTED,
            next: Dva {
                vdev: 1,
                offset: 0x6000,
                asize: 8192,
            },
            records: vec![
                record(LogRecordKind::Write, 1, 512, vec![0x5a; 512]),
                record(LogRecordKind::Zero, 2, 8192, Vec::new()),
                record(LogRecordKind::Trim, 3, 16384, Vec::new()),
                LogRecord::write_in_place(4, 12, 1, 32768, &in_place),
            ],
        }
    }

    fn directory() -> DatasetDirectory {
        let mut directory = DatasetDirectory::default();
        directory
            .insert("tank", DatasetKind::Filesystem, 1, BTreeMap::new())
            .expect("root");
        let properties = creation_properties(
            DatasetKind::Volume,
            &[
                ("volblocksize".into(), "8K".into()),
                ("volsize".into(), "1G".into()),
                ("sync".into(), "always".into()),
            ],
        )
        .expect("valid properties");
        let record = directory
            .insert("tank/vol", DatasetKind::Volume, 2, properties)
            .expect("volume");
        record.set_objset_bp(&block_pointer(ObjectType::ObjsetRoot, 0, 0x9000, 2));
        record.used_bytes = 1 << 20;
        directory
            .set_property("tank", "checksum", "sha256")
            .expect("valid property");
        directory.last_scrub = Some(ScrubRecord {
            start_txg: 5,
            started_ms: 1,
            finished_ms: 2,
            bytes_scanned: 4096,
            blocks_scanned: 1,
            bad_copies: 1,
            repaired_copies: 1,
            repaired_bytes: 4096,
            unrecoverable_blocks: 0,
            damaged: vec!["tank/vol object 1 block 3".into()],
            canceled: false,
        });
        directory.record_history("pool create tank /dev/a".into());
        directory
    }

    fn inode_attrs(kind: FileKind) -> InodeAttrs {
        let time = |secs| Timestamp {
            secs,
            nanos: 999_999_999,
        };
        InodeAttrs {
            kind,
            mode: 0o4755,
            uid: 1000,
            gid: 100,
            links: 2,
            size: 12,
            atime: time(-5),
            mtime: time(1_700_000_000),
            ctime: time(1_700_000_001),
            crtime: time(1_600_000_000),
            generation: 42,
            parent: 2,
            rdev: 0x0801,
            xattr_object: 77,
        }
    }

    fn fs_ops() -> Vec<(&'static str, FsOp)> {
        let time = Timestamp {
            secs: 1_700_000_000,
            nanos: 5,
        };
        vec![
            (
                "create-symlink",
                FsOp::Create {
                    dir: 2,
                    name: b"link".to_vec(),
                    object: 16,
                    kind: FileKind::Symlink,
                    mode: 0o777,
                    uid: 1,
                    gid: 1,
                    rdev: 0,
                    time,
                    target: b"/tmp/target".to_vec(),
                },
            ),
            (
                "setattrs",
                FsOp::SetAttrs {
                    object: 16,
                    changes: SetAttrs {
                        mode: Some(0o600),
                        size: Some(4096),
                        mtime: Some(time),
                        ..SetAttrs::default()
                    },
                    time,
                },
            ),
            (
                "setxattr-value-object",
                FsOp::SetXattr {
                    object: 16,
                    map_object: 17,
                    value_object: 18,
                    name: b"user.big".to_vec(),
                    value: vec![0x61; 2000],
                    mode: XattrMode::Create,
                    time,
                },
            ),
        ]
    }

    /// A version-3 map with its one leaf in the header block: two directory entries, and an
    /// attribute-map style indirect entry.
    fn map_header_block() -> Vec<u8> {
        let entry = |key: u64, name: &[u8], value: Vec<u8>, kind| Entry {
            key,
            name: name.to_vec(),
            value,
            kind,
        };
        let entries = vec![
            entry(
                1 << 8,
                b"a",
                raw::encode_entry_value(16, FileKind::File).to_vec(),
                ValueKind::Inline,
            ),
            entry(
                (5 << 8) | 1,
                b"dir",
                raw::encode_entry_value(17, FileKind::Directory).to_vec(),
                ValueKind::Inline,
            ),
            entry(
                9 << 8,
                b"user.big",
                18u64.to_le_bytes().to_vec(),
                ValueKind::Indirect,
            ),
        ];
        let mut block = raw::encode_header(&raw::MapHeader {
            version: map::MAP_VERSION,
            depth: 0,
            entries: entries.len() as u64,
            leaves: 1,
            salt: 0x5eed,
            inline_table: vec![0],
        })
        .expect("header encodes");
        let leaf = raw::encode_leaf(0, &entries);
        let at = map::EMBEDDED_LEAF_OFFSET;
        block[at..at + leaf.len()].copy_from_slice(&leaf);
        block
    }

    /// A leaf block of a map at depth 1.
    fn map_leaf_block() -> Vec<u8> {
        let mut leaf = raw::encode_leaf(
            1,
            &[Entry {
                key: 1 << 61,
                name: b"x".repeat(255),
                value: vec![7; 1024],
                kind: ValueKind::Inline,
            }],
        );
        leaf.resize(map::MAP_BLOCK_BYTES as usize, 0);
        leaf
    }

    fn l2arc_summary() -> Vec<u8> {
        encode_summary(&[
            SummaryEntry {
                key: [(1 << 48) | 0x4000 | cairn_l2arc::KEY_LZ4, 42],
                offset_sectors: 8,
                psize: 4096,
            },
            SummaryEntry {
                key: [0x9000, 43],
                offset_sectors: 16,
                psize: 512,
            },
        ])
    }

    /// (target, file name, bytes) of every seed.
    /// A snapshot-table record of kind `kind` (0 snapshot, 1 head, 2 free work, 3 origin, 4
    /// tree free, 5 bookmark) as the fuzz case takes it: the kind byte, then the value.
    fn snapshot_record_seed(kind: u8) -> Vec<u8> {
        use cairn_dataset::deadlist::{DeadSpace, Deadlist, DeadlistPart, DeadlistPhys, FreeScan};
        use cairn_dataset::snapshots::{
            Bookmark, FreeWork, Record, Snapshot, SnapshotInfo, SnapshotTable, TreeFree,
        };
        let deadlist = Deadlist::from_phys(&DeadlistPhys {
            parts: vec![DeadlistPart {
                object: 70,
                entries: 3,
                min_birth_txg: 2,
                max_birth_txg: 12,
                freed_ranges: vec![(4, 9)],
            }],
            totals: vec![(
                0,
                DeadSpace {
                    allocated_bytes: 8192,
                    logical_bytes: 8192,
                    blocks: 2,
                },
            )],
        })
        .expect("a valid deadlist");
        let record = match kind {
            0 => Record::Snapshot(Snapshot {
                info: SnapshotInfo {
                    id: u64::from(kind),
                    dataset_id: 2,
                    name: "monday".into(),
                    created_txg: 50,
                    creation_ms: 1_700_000_000_000,
                    objset_bp: block_pointer(ObjectType::ObjsetRoot, 0, 0x9000, 2)
                        .to_bytes()
                        .to_vec(),
                    referenced_bytes: 1 << 20,
                    unique_bytes: 8192,
                    written_bytes: 1 << 20,
                    holds: Default::default(),
                    clones: Vec::new(),
                    defer_destroy: false,
                    guid: 0x5eed_0000_0001,
                },
                deadlist,
            }),
            1 => Record::Head(u64::from(kind), deadlist),
            3 => Record::Origin(u64::from(kind), 12),
            4 => Record::TreeFree(
                u64::from(kind),
                TreeFree {
                    root: block_pointer(ObjectType::ObjsetRoot, 0, 0xa000, 40)
                        .to_bytes()
                        .to_vec(),
                    born_after_txg: 20,
                    path: vec![0, 3, 17],
                    remaining_bytes: 1 << 20,
                },
            ),
            5 => Record::Bookmark(Bookmark {
                id: u64::from(kind),
                dataset_id: 2,
                name: "monday".into(),
                created_txg: 50,
                creation_ms: 1_700_000_000_000,
                snapshot_id: 9,
                referenced_bytes: 1 << 20,
                guid: 0x5eed_0000_0001,
            }),
            _ => Record::Free(
                u64::from(kind),
                FreeWork {
                    scans: vec![
                        FreeScan {
                            object: 70,
                            entries: 3,
                            min_txg: 4,
                            max_txg: 9,
                            free_part: false,
                        },
                        FreeScan {
                            object: 71,
                            entries: 40,
                            min_txg: 2,
                            max_txg: 30,
                            free_part: true,
                        },
                    ],
                    scan_index: 0,
                    next_entry: 1,
                    remaining_bytes: 4096,
                },
            ),
        };
        let (_, value) = SnapshotTable::encode_record(&record);
        let mut seed = vec![kind];
        seed.extend(value);
        seed
    }

    pub fn all() -> Vec<(&'static str, &'static str, Vec<u8>)> {
        let mut dnode = [0u8; DNODE_SIZE];
        volume_dnode().encode(&mut dnode);
        let mut free_dnode = [0u8; DNODE_SIZE];
        Dnode::free().encode(&mut free_dnode);
        let objset = ObjsetPhys {
            meta_dnode: meta_dnode(),
            objset_type: ObjsetType::Volume,
            intent_log_header: intent_log_header().encode(),
        };
        let uberblock = Uberblock {
            version: FORMAT_VERSION,
            txg: 99,
            pool_guid: 0x1234_5678,
            guid_sum: 53,
            timestamp_ms: 1_700_000_000_000,
            root_bp: block_pointer(ObjectType::ObjsetRoot, 0, 0x9000, 2),
            space_log_bp: block_pointer(ObjectType::SpaceLog, 0, 0xa000, 2),
            space_log_blocks: 3,
            allocated_bytes: 1 << 30,
        };
        let prev = block_pointer(ObjectType::SpaceLog, 0, 0xb000, 2);
        let fs_log = fs_ops()
            .into_iter()
            .map(|(name, op)| ("fs_log", name, op.encode()));
        let mut seeds = vec![
            ("blkptr", "hole", BlockPointer::HOLE.to_bytes().to_vec()),
            (
                "blkptr",
                "metadata-two-copies",
                block_pointer(ObjectType::DnodeBlock, 1, 0x4000, 2)
                    .to_bytes()
                    .to_vec(),
            ),
            (
                "blkptr",
                "data-three-copies",
                BlockPointer {
                    checksum: Checksum([7; 32]),
                    checksum_algorithm: ChecksumAlgorithm::Sha256,
                    ..block_pointer(ObjectType::VolumeData, 0, 0x7000, 3)
                }
                .to_bytes()
                .to_vec(),
            ),
            ("dnode", "volume", dnode.to_vec()),
            ("dnode", "free", free_dnode.to_vec()),
            ("objset", "volume", objset.encode_block()),
            (
                "label_config",
                "mirror-and-log",
                label_config().encode().expect("label config encodes"),
            ),
            ("uberblock", "slot", uberblock.encode_slot()),
            (
                "space_log",
                "checkpoint-start",
                space_log_block(SpaceLogKind::CheckpointStart, BlockPointer::HOLE).encode(512),
            ),
            (
                "space_log",
                "delta",
                space_log_block(SpaceLogKind::Delta, prev).encode(4096),
            ),
            ("intent_log", "block", log_block().encode(512)),
            (
                "intent_log",
                "chain-header",
                intent_log_header().encode().to_vec(),
            ),
            ("fs_attrs", "file", inode_attrs(FileKind::File).encode()),
            (
                "fs_attrs",
                "char-device",
                inode_attrs(FileKind::CharDevice).encode(),
            ),
            ("fs_map", "header-with-leaf", map_header_block()),
            ("fs_map", "leaf", map_leaf_block()),
            (
                "l2arc_layout",
                "superblock",
                Superblock::for_device(64 << 20, 1 << 20, 7, 9)
                    .expect("geometry")
                    .encode(),
            ),
            (
                "l2arc_layout",
                "segment-header",
                SegmentHeader {
                    sequence: 5,
                    hits: 3,
                    summary_offset_bytes: 17 * 512,
                    entries: 2,
                    summary_checksum: cairn_format::checksum::embedded(&l2arc_summary()),
                }
                .encode(),
            ),
            ("l2arc_layout", "summary", l2arc_summary()),
            ("send_stream", "volume", send_stream_seed()),
            ("dataset_directory", "tank-vol", directory().encode()),
            ("snapshot_record", "snapshot", snapshot_record_seed(0)),
            ("snapshot_record", "head", snapshot_record_seed(1)),
            ("snapshot_record", "free-work", snapshot_record_seed(2)),
            ("snapshot_record", "origin", snapshot_record_seed(3)),
            ("snapshot_record", "tree-free", snapshot_record_seed(4)),
            ("snapshot_record", "bookmark", snapshot_record_seed(5)),
            (
                "dataset_directory",
                "empty",
                DatasetDirectory::default().encode(),
            ),
        ];
        seeds.extend(fs_log);
        seeds
    }
}

/// Rewrites `fuzz/seeds/` from `seeds::all()`. Every seed must decode with its target's
/// decoder, or it would not lead the mutations anywhere useful.
#[test]
#[ignore = "writes fuzz/seeds/; run by hand after a format change"]
fn write_seed_corpus() {
    let root = fuzz_dir().join("seeds");
    for (target, name, bytes) in seeds::all() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("create seed directory");
        std::fs::write(dir.join(name), &bytes).expect("write seed");
    }
}

#[test]
fn seeds_are_valid_encodings() {
    use cairn_format::{BlockPointer, ChainPosition, IntentLogHeader, LogBlock, Uberblock};
    for (target, name, bytes) in seeds::all() {
        let decoded = match target {
            "blkptr" => BlockPointer::decode(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "dnode" => cairn_format::dnode::Dnode::decode(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "objset" => cairn_format::dnode::ObjsetPhys::decode(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "label_config" => cairn_format::LabelConfig::decode(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "send_stream" => {
                let mut input = bytes.as_slice();
                let mut count = 0;
                cairn_format::send_stream::StreamReader::new(&mut input)
                    .and_then(|mut reader| {
                        while reader.next_record()?.is_some() {
                            count += 1;
                        }
                        Ok(())
                    })
                    .map_err(|err| err.to_string())
                    .and_then(|()| {
                        if count > 1 {
                            Ok(())
                        } else {
                            Err("no records".into())
                        }
                    })
            }
            "uberblock" => Uberblock::decode(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "space_log" => cairn_format::spacelog::SpaceLogBlock::decode(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "intent_log" if name == "chain-header" => {
                let header: &[u8; cairn_format::intent_log::INTENT_LOG_HEADER_SIZE] =
                    bytes.as_slice().try_into().expect("header size");
                IntentLogHeader::decode(header)
                    .map(|_| ())
                    .map_err(|err| err.to_string())
            }
            "intent_log" => {
                let expected: ChainPosition = cairn_fuzz_cases::intent_log::EXPECTED;
                LogBlock::decode(&bytes, &expected)
                    .map(|_| ())
                    .map_err(|err| err.to_string())
            }
            "fs_attrs" => cairn_fs::attrs::InodeAttrs::decode(16, &bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "fs_log" => cairn_fs::log::FsOp::decode(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "fs_map" if name == "leaf" => cairn_object::map::raw::decode_leaf(&bytes)
                .map(|_| ())
                .map_err(|err| err.to_string()),
            "fs_map" => cairn_object::map::raw::decode_header(&bytes).and_then(|_| {
                cairn_object::map::raw::decode_leaf(
                    &bytes[cairn_object::map::EMBEDDED_LEAF_OFFSET..],
                )
                .map(|_| ())
                .map_err(|err| err.to_string())
            }),
            "l2arc_layout" => {
                use cairn_l2arc::layout::{SegmentHeader, Superblock};
                let valid = match name {
                    "superblock" => Superblock::decode(&bytes).is_ok(),
                    "segment-header" => {
                        matches!(SegmentHeader::decode(&bytes, 1 << 20), Ok(Some(_)))
                    }
                    _ => bytes.len() % cairn_l2arc::layout::SUMMARY_ENTRY_BYTES == 0,
                };
                assert!(valid, "seed {target}/{name}");
                Ok(())
            }
            "dataset_directory" => {
                assert!(
                    cairn_dataset::DatasetDirectory::decode(&bytes).is_ok(),
                    "seed {target}/{name}"
                );
                Ok(())
            }
            "snapshot_record" => {
                use cairn_dataset::snapshots::{RecordKey, SnapshotTable};
                let (&kind, value) = bytes.split_first().expect("a kind byte");
                let key: RecordKey = cairn_fuzz_cases::snapshot_record::key_of_kind(kind);
                SnapshotTable::decode_record(&key.encode(), value)
                    .map(|_| ())
                    .map_err(|err| err.to_string())
            }
            other => panic!("seed for unknown target {other}"),
        };
        assert!(decoded.is_ok(), "seed {target}/{name}: {decoded:?}");
        let committed = fuzz_dir().join("seeds").join(target).join(name);
        assert_eq!(
            std::fs::read(&committed).ok().as_deref(),
            Some(bytes.as_slice()),
            "{} is stale: run the ignored write_seed_corpus test",
            committed.display()
        );
    }
}
