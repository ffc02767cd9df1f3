//! # cairn-object: object sets, dnodes and copy-on-write block trees
//!
//! An object set is an array of objects; each object is a sparse array of fixed-size blocks
//! addressed through a tree of indirect blocks rooted in its dnode. The dnodes themselves are the
//! data of the object set's meta-dnode, embedded in the root block. A dataset (volume, later a
//! filesystem) is one object set; the pool's own metadata lives in the meta object set (MOS).
//!
//! ```text
//!  ObjsetPhys ── meta-dnode ──▶ [L1 indirect] ──▶ dnode blocks (32 dnodes each)
//!                                                   └─ dnode 1 ──▶ [L2] ─▶ [L1] ─▶ data blocks
//! ```
//!
//! Lifecycle of a change: open context (`write_block`, `free_block`, `create_object`, under a
//! txg hold) records it in the txg's in-memory change set — nothing touches disk. `sync` (the
//! txg sync thread only) rewrites, copy-on-write, every block on the path from each changed block
//! to the root, issuing writes through one `WriteBatch` and returning a `SyncedObjset`; the pool
//! commits the txg (flush, uberblock, flush) and then calls `publish`, which makes the new tree
//! the one readers use and drops the txg's change set, atomically under the state lock.
//!
//! Invariants:
//! - Readers see the newest change first: txg change sets newest to oldest, then the published
//!   tree. Between `sync` and `publish` the change set stays visible, so no read ever follows a
//!   pointer to a block whose write has not completed.
//! - A block replaced or freed in txg t is handed to the allocator as freed in t; the allocator
//!   keeps it out of use for a few txgs, so readers holding the previous tree still find
//!   their data.
//! - Sync runs for txgs in strictly increasing order (asserted).
//! - A level-0 block that is all zeros is stored as a hole: volumes stay sparse.
//! - What is read from disk is checked before it is used, not only decoded (`check_dnode`,
//!   `check_child`): a dnode's pointers sit one level below it, carry its object type, hold
//!   blocks of its block size and were born no later than the last synced txg; a child
//!   pointer sits one level below its parent, carries its type and was born no later than it
//!   (copy-on-write rewrites every parent of a changed block). A crafted tree is then an error
//!   naming the object, never a panic or a walk that goes astray.
//!
//! `diff` compares two versions of one object (a snapshot and a later snapshot or head),
//! walking only what changed between them by birth txg, and finds the objects whose dnodes
//! differ between two versions of an object set the same way (`changed_objects`).
//!
//! On top of objects, `map` keeps a hashed name → value map in one object (`HashedMap`, ZFS's
//! ZAP): a filesystem's directories, extended attributes and delete queue, and the pool's own
//! records in the meta object set.

mod change;
mod check;
mod cow;
mod diff;
mod error;
pub mod map;
mod memo;
mod objset;
mod patch;
mod read;
mod sync;
#[cfg(test)]
mod tests;
mod tree;
pub mod tree_free;

pub use cow::is_all_zero;
pub use diff::{
    ByteRange, ChangedBlocks, ChangedObject, ChangedObjects, ObjectsSince, changed_blocks,
    changed_blocks_since, changed_objects, changed_objects_since, merge_ranges,
};
pub use error::ObjectError;
pub use memo::{MEMO_GENERATION_ARC_DIVISOR, MEMO_GENERATION_BYTES_MIN, MemoCounts, MemoStats};
pub use objset::{ObjsetSpace, object_set_bytes_max};
pub use patch::PatchStats;
pub use tree::read_objset_phys;
pub use tree::{TreeVisitor, VisitedBlock, walk_objset, walk_objset_born_after};

use bytes::Bytes;
use cairn_arc::{CachedIo, StreamDetector};
use cairn_format::intent_log::INTENT_LOG_HEADER_SIZE;
use cairn_format::{BlockPointer, ChecksumAlgorithm, Compression, Dnode, ObjsetType};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;

// The in-memory model of an object set is declared here, at the root, because every module
// (reading, open-context changes, sync) works on its fields and privacy is per module: the
// modules below see them, the crate's users do not.

/// A block's newest version in one txg: its contents as readers see them (`None`: a hole), and,
/// for a block already written to its final place in open context (a synchronous write in
/// place, `write_blocks_in_place`), where: the txg sync then uses that pointer instead of
/// writing the data again. With `patch`, the version is only the bytes a partial write gave
/// (`patch.rs`): the rest is the block's older version, merged on read and at the txg sync.
/// `cache_written`: the txg sync leaves the written block in the ARC (a block partial writes
/// changed is likely to be changed again; with it cached, the next one merges at once).
#[derive(Clone, Default)]
struct BlockChange {
    data: Option<Bytes>,
    written: Option<BlockPointer>,
    patch: Option<Box<patch::Patch>>,
    cache_written: bool,
}

impl BlockChange {
    fn data(data: Bytes) -> BlockChange {
        BlockChange {
            data: Some(data),
            ..BlockChange::default()
        }
    }

    fn hole() -> BlockChange {
        BlockChange::default()
    }
}

/// A memoised level-0 block, valid while its object's synced dnode has this birth txg and
/// block size (the meta-dnode's blocks: 0 and 0).
#[derive(Clone)]
struct MemoBlock {
    birth_txg: u64,
    data_block_size: u32,
    data: Bytes,
}

/// A generation a memo replaced (see `memo`), held only to be dropped outside the lock.
#[allow(dead_code)]
enum Retired {
    Dnodes(memo::Retired<u64, Dnode>),
    Blocks(memo::Retired<(u64, u64), MemoBlock>),
}

/// The memo's object number for the meta-dnode's own blocks (no object has it).
const MEMO_META_OBJECT: u64 = u64::MAX;

#[derive(Default)]
struct TxgChanges {
    blocks: BTreeMap<(u64, u64), BlockChange>,
    dnodes: BTreeMap<u64, Dnode>,
    /// The intent log's chain header as of this txg, if it changed in it.
    intent_log_header: Option<[u8; INTENT_LOG_HEADER_SIZE]>,
    /// Bytes of the blocks newly given data in this txg, times their copies (each block
    /// counted once per txg, as the txg engine's dirty bytes), with the indirect blocks they
    /// create: what `space_estimate` adds.
    new_data_bytes: u64,
}

struct State {
    root_bp: BlockPointer,
    meta_dnode: Dnode,
    /// Synced dnodes recently used (bounded; a miss reads the tree: `memo`).
    dnodes: memo::Memo<u64, Dnode>,
    /// Level-0 blocks of the published tree, of hashed maps and of the meta-dnode
    /// (`MEMO_META_OBJECT`), recently used (`memo`).
    blocks: memo::Memo<(u64, u64), MemoBlock>,
    /// Memo generations replaced under the lock, dropped outside it.
    retired: Vec<Retired>,
    changes: BTreeMap<u64, TxgChanges>,
    last_synced_txg: u64,
    /// The txg of the dataset's newest snapshot (0: none): blocks born at or before it are
    /// kept when the head stops referencing them (`cow.rs`, the birth-txg rule).
    prev_snap_txg: u64,
    /// Bytes allocated by the whole object set (all copies), as of the last publish.
    used_bytes: u64,
    /// Whether `used_bytes` is known: false for an object set opened without its size (the
    /// MOS at import: no dataset is charged for it and nothing stores its size), whose
    /// figure then counts from 0 and may not be trusted, so a free past 0 is no damage.
    space_tracked: bool,
    /// The intent log's chain header in the published root.
    intent_log_header: [u8; INTENT_LOG_HEADER_SIZE],
}

impl State {
    /// The changes of `txg`, to add to. A txg that has synced is closed for good: a change
    /// recorded for it would never be written, and so be lost without an error.
    #[inline]
    fn changes_of(&mut self, txg: u64) -> &mut TxgChanges {
        assert!(
            txg > self.last_synced_txg,
            "a change recorded for txg {txg}, synced already (last synced {})",
            self.last_synced_txg
        );
        self.changes.entry(txg).or_default()
    }
}

/// Result of syncing one object set: applied by `publish` once the txg is durable.
pub struct SyncedObjset {
    txg: u64,
    used_bytes: u64,
    root_bp: BlockPointer,
    meta_dnode: Dnode,
    dnodes: BTreeMap<u64, Dnode>,
    intent_log_header: [u8; INTENT_LOG_HEADER_SIZE],
    /// Blocks the txg stopped referencing that a snapshot still references (not freed).
    dead_blocks: Vec<BlockPointer>,
}

impl SyncedObjset {
    pub fn root_bp(&self) -> BlockPointer {
        self.root_bp
    }

    /// The blocks this txg stopped referencing but did not free, because the dataset's newest
    /// snapshot (`ObjectSet::set_prev_snap_txg`) still references them: the dataset layer owns
    /// them from here (its deadlist). Empty while the dataset has no snapshot.
    pub fn dead_blocks(&self) -> &[BlockPointer] {
        &self.dead_blocks
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }
}

pub struct ObjectSet {
    /// Reads go through the ARC; writes and frees through `io.io()`, the pipeline.
    io: Arc<CachedIo>,
    objset_type: ObjsetType,
    checksum: Mutex<ChecksumAlgorithm>,
    /// Compression of new file and volume data blocks (the `compression` property).
    compression: Mutex<Compression>,
    state: Mutex<State>,
    /// `primarycache` in the low two bits, `secondarycache` in the next two (`objset.rs`).
    cache_mode: AtomicU8,
    /// Sequential streams per object, for read-ahead (`note_read`).
    streams: Mutex<StreamDetector>,
    patch_counters: patch::PatchCounters,
}
