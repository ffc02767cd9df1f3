//! Dataset directory decoder (the postcard blob in the MOS): arbitrary bytes must decode or fail
//! cleanly, and whatever decodes must survive encode → decode unchanged. Property lookups on a
//! decoded directory must not panic either, whatever names and values it holds.

use cairn_dataset::DatasetDirectory;

/// One fuzz input (see the module comment).
pub fn run(data: &[u8]) {
    let Ok(directory) = DatasetDirectory::decode(data) else {
        return;
    };
    let again =
        DatasetDirectory::decode(&directory.encode()).expect("a re-encoded directory must decode");
    assert_eq!(again, directory, "directory changed across encode/decode");
    for name in directory.datasets.keys() {
        let _ = directory.all_properties(name);
        let _ = directory.get(name).and_then(|record| record.objset_bp());
    }
}
