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
