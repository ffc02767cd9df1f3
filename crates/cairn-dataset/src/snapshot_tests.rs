//! Unit tests of `snapshots.rs` (the snapshot table's accounting).

use super::*;
use cairn_format::Dva;

fn bp(birth_txg: u64, asize: u32) -> BlockPointer {
    let mut bp = BlockPointer::HOLE;
    bp.birth_txg = birth_txg;
    bp.lsize = 4096;
    bp.psize = asize;
    bp.dvas[0] = Dva {
        vdev: 0,
        offset: birth_txg << 20,
        asize,
    };
    bp
}

fn snapshot(id: u64, name: &str, txg: u64, referenced_bytes: u64) -> NewSnapshot {
    NewSnapshot {
        id,
        dataset_id: 1,
        name: name.into(),
        txg,
        creation_ms: txg * 1000,
        objset_bp: bp(txg, 4096),
        referenced_bytes,
        guid: id * 1000 + 1,
    }
}

#[test]
fn figures_follow_the_blocks_that_die() {
    let mut table = SnapshotTable::new();
    // Head references 10 blocks of 1 KiB (born in txgs 1..=10); snapshot a in txg 10.
    table.create(snapshot(100, "a", 10, 10 << 10)).unwrap();
    assert_eq!(table.get(100).unwrap().info.written_bytes, 10 << 10);
    // Txgs 11 and 12 overwrite blocks born in 3 and 4: they die onto the head's list.
    table.kill(1, &[bp(3, 1024), bp(4, 1024)]);
    assert_eq!(table.get(100).unwrap().info.unique_bytes, 2 << 10);
    assert_eq!(table.used_by_snapshots(1), 2 << 10);
    // Head: 10 blocks (8 old, 2 new): written since a is the 2 new ones.
    assert_eq!(table.head_written(1, 10 << 10), 2 << 10);
    // Snapshot b in txg 12; then block 11 (b's alone) and block 5 (a's and b's) die.
    table.create(snapshot(101, "b", 12, 10 << 10)).unwrap();
    assert_eq!(table.get(101).unwrap().info.written_bytes, 2 << 10);
    table.kill(1, &[bp(11, 1024), bp(5, 1024)]);
    assert_eq!(table.get(101).unwrap().info.unique_bytes, 1 << 10);
    // Unchanged: a's unique blocks are the ones that died before b.
    assert_eq!(table.get(100).unwrap().info.unique_bytes, 2 << 10);
    assert_eq!(table.used_by_snapshots(1), 4 << 10);
    // Since a, the head lost blocks 3, 4 and 5 and gained 3 (same count).
    let a = table.get(100).unwrap().clone();
    assert_eq!(table.head_written_since(1, &a, 10 << 10), 3 << 10);
    assert_eq!(table.key_of(1, 11), 10);
    assert_eq!(table.key_of(1, 10), 0);
    assert_eq!(table.prev_snap_txg(1), 12);
    assert!(table.create(snapshot(102, "b", 13, 0)).is_err());
}

#[test]
fn keys_and_values_round_trip_and_bad_ones_are_refused() {
    for key in [RecordKey::Snapshot(7), RecordKey::Head(u64::MAX)] {
        assert_eq!(RecordKey::decode(&key.encode()).unwrap(), key);
    }
    assert!(RecordKey::decode(b"x12345678").is_err());
    assert!(RecordKey::decode(b"s1").is_err());
    let mut table = SnapshotTable::new();
    table.create(snapshot(5, "monday", 3, 4096)).unwrap();
    let info = table.get(5).unwrap().info.clone();
    let good = encode_value(&SnapshotPhys {
        info: info.clone(),
        deadlist: DeadlistPhys::default(),
        guid: info.guid,
    });
    let key = RecordKey::Snapshot(5).encode();
    assert!(matches!(
        SnapshotTable::decode_record(&key, &good),
        Ok(Record::Snapshot(_))
    ));
    let mut wrong_version = good.clone();
    wrong_version[0] = 9;
    let bad_name = encode_value(&SnapshotPhys {
        info: SnapshotInfo {
            name: "a/b".into(),
            ..info.clone()
        },
        deadlist: DeadlistPhys::default(),
        guid: info.guid,
    });
    let late_root = encode_value(&SnapshotPhys {
        info: SnapshotInfo {
            created_txg: 2,
            ..info.clone()
        },
        deadlist: DeadlistPhys::default(),
        guid: info.guid,
    });
    for bad in [
        &wrong_version,
        &bad_name,
        &late_root,
        &good[..good.len() - 3].to_vec(),
    ] {
        assert!(SnapshotTable::decode_record(&key, bad).is_err());
    }
    assert!(SnapshotTable::decode_record(&RecordKey::Snapshot(6).encode(), &good).is_err());
}

#[test]
fn guids_are_kept_and_version_1_records_read_without_one() {
    let mut table = SnapshotTable::new();
    table.create(snapshot(5, "monday", 3, 4096)).unwrap();
    table.add_bookmark(6, 1, "mark", 5).unwrap();
    let snapshot_record = Record::Snapshot(table.get(5).unwrap().clone());
    let (key, value) = SnapshotTable::encode_record(&snapshot_record);
    assert_eq!(value[0], SNAPSHOT_RECORD_VERSION);
    let Ok(Record::Snapshot(read)) = SnapshotTable::decode_record(&key.encode(), &value) else {
        panic!("a snapshot record");
    };
    assert_eq!(read.info.guid, 5001);
    let bookmark = table.find_bookmark(1, "mark").unwrap().clone();
    assert_eq!(bookmark.guid, 5001, "a bookmark keeps its snapshot's guid");
    let (key, value) = SnapshotTable::encode_record(&Record::Bookmark(bookmark.clone()));
    assert_eq!(
        SnapshotTable::decode_record(&key.encode(), &value).unwrap(),
        Record::Bookmark(bookmark.clone())
    );
    // Version 1: the same fields without the guid; read with guid 0 (derived by the engine).
    let info = table.get(5).unwrap().info.clone();
    let mut old = vec![1u8];
    old.extend(postcard::to_stdvec(&(info, DeadlistPhys::default())).unwrap());
    let Ok(Record::Snapshot(read)) =
        SnapshotTable::decode_record(&RecordKey::Snapshot(5).encode(), &old)
    else {
        panic!("a version-1 snapshot record");
    };
    assert_eq!(read.info.guid, 0);
    let mut old = vec![1u8];
    old.extend(postcard::to_stdvec(&bookmark).unwrap());
    let Ok(Record::Bookmark(read)) =
        SnapshotTable::decode_record(&RecordKey::Bookmark(6).encode(), &old)
    else {
        panic!("a version-1 bookmark record");
    };
    assert_eq!((read.guid, read.snapshot_id), (0, 5));
    let mut future = value.clone();
    future[0] = SNAPSHOT_RECORD_VERSION + 1;
    assert!(SnapshotTable::decode_record(&key.encode(), &future).is_err());
}
