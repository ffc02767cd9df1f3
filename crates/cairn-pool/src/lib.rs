//! # cairn-pool: the storage pool layer
//!
//! What makes a set of devices one pool: the vdev tree (leaves grouped into top-level vdevs:
//! single leaves or mirrors, raidz reserved), the four labels on every leaf with the pool's
//! identity and uberblock ring, the transaction-group engine that turns a stream of changes into
//! atomic commits, and the space allocator (metaslabs, range trees, deferred frees, the space log).
//!
//! This layer knows blocks only as extents (`Dva`s) and bytes; it does not know what an object or
//! a dataset is. Upper layers plug into the txg engine through the `TxgSyncer` callback.
//!
//! See also: `vdev::VdevTree`, `labels::commit_uberblock`, `txg::TxgEngine`,
//! `space::SpaceAllocator`.

pub mod labels;
pub mod space;
pub mod txg;
pub mod vdev;

/// A fresh random 64-bit identifier (never 0): pool, vdev and intent-log chain guids.
pub fn new_guid() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut bytes))
        .is_err()
    {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        bytes = (nanos ^ u64::from(std::process::id()).rotate_left(32)).to_le_bytes();
    }
    u64::from_le_bytes(bytes).max(1)
}
