//! Snapshot-table records (`cairn_dataset::snapshots`: a snapshot, a head's deadlist, a
//! destroy's background free work, a clone's origin, a dead tree's background free, a
//! bookmark, each a map value in the MOS): the first input byte picks
//! the record's kind, the rest is its value. Arbitrary bytes must decode or fail cleanly, and
//! whatever decodes must survive encode → decode unchanged; a decoded snapshot's root pointer
//! must decode too.

use cairn_dataset::snapshots::{Record, RecordKey, SnapshotTable};

/// The record key the fuzz input's first byte picks (the seeds use the same).
pub fn key_of_kind(kind: u8) -> RecordKey {
    let id = u64::from(kind);
    match kind % 6 {
        0 => RecordKey::Snapshot(id),
        1 => RecordKey::Head(id),
        2 => RecordKey::Free(id),
        3 => RecordKey::Origin(id),
        4 => RecordKey::TreeFree(id),
        _ => RecordKey::Bookmark(id),
    }
}

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    let Some((&kind, value)) = data.split_first() else {
        return;
    };
    let key = key_of_kind(kind);
    let _ = RecordKey::decode(data);
    let Ok(record) = SnapshotTable::decode_record(&key.encode(), value) else {
        return;
    };
    if let Record::Snapshot(snapshot) = &record {
        snapshot
            .info
            .objset_bp()
            .expect("a decoded snapshot's root pointer decodes");
    }
    let (again_key, again_value) = SnapshotTable::encode_record(&record);
    assert_eq!(
        again_key, key,
        "a record's key changed across encode/decode"
    );
    let again = SnapshotTable::decode_record(&again_key.encode(), &again_value)
        .expect("a re-encoded record must decode");
    assert_eq!(again, record, "record changed across encode/decode");
}
