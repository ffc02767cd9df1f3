//! Dataset directory records (`cairn_dataset::directory_records`: each dataset, the pool-wide
//! record, the last scrub and each history entry, a map value in the MOS), framed into one
//! input as `DatasetDirectory::encode` frames them (per record: 9-byte key, u32 length,
//! value). Arbitrary bytes must decode or fail cleanly — every record decoded and the whole
//! checked (`DatasetDirectory::load`) — and whatever decodes must survive encode → decode
//! unchanged, with nothing left to write once its records are taken as written. Property
//! lookups on a decoded directory must not panic either, whatever names and values it holds.

use cairn_dataset::{DatasetDirectory, WrittenRecords};

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    let Ok(directory) = DatasetDirectory::decode(data) else {
        return;
    };
    let again =
        DatasetDirectory::decode(&directory.encode()).expect("a re-encoded directory must decode");
    assert_eq!(again, directory, "directory changed across encode/decode");
    assert!(
        WrittenRecords::of(&again).changes(&directory).is_empty(),
        "a decoded directory differs from its own records"
    );
    for name in directory.datasets.keys() {
        let _ = directory.all_properties(name);
        let _ = directory.get(name).and_then(|record| record.objset_bp());
    }
}
