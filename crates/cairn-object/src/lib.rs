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

mod tree;

pub use tree::{TreeVisitor, VisitedBlock, walk_objset};

use bytes::Bytes;
use cairn_arc::{CacheMode, CachedIo, StreamConfig, StreamDetector};
use cairn_device::queue::IoClass;
use cairn_format::dnode::{DNODE_BLOCK_SIZE, DNODE_SIZE, DNODES_PER_BLOCK, INDIRECT_SHIFT_DEFAULT};
use cairn_format::intent_log::INTENT_LOG_HEADER_SIZE;
use cairn_format::{BlockPointer, ChecksumAlgorithm, Dnode, ObjectType, ObjsetPhys, ObjsetType};
use cairn_pipeline::{BlockIo, PipelineError, WriteBatch};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ObjectError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    #[error("object {0} does not exist")]
    NoSuchObject(u64),
    #[error("block {blkid} of object {object} is beyond its capacity")]
    OutOfRange { object: u64, blkid: u64 },
    /// A read that must not wait for I/O found something it needs not in memory.
    #[error("not in memory")]
    NotCached,
}

/// A block's newest version in one txg: its contents as readers see them (`None`: a hole), and,
/// for a block already written to its final place in open context (a synchronous write in
/// place, `write_blocks_in_place`), where: the txg sync then uses that pointer instead of
/// writing the data again.
#[derive(Clone, Default)]
struct BlockChange {
    data: Option<Bytes>,
    written: Option<BlockPointer>,
}

impl BlockChange {
    fn data(data: Bytes) -> BlockChange {
        BlockChange {
            data: Some(data),
            written: None,
        }
    }

    fn hole() -> BlockChange {
        BlockChange::default()
    }
}

#[derive(Default)]
struct TxgChanges {
    blocks: BTreeMap<(u64, u64), BlockChange>,
    dnodes: BTreeMap<u64, Dnode>,
    /// The intent log's chain header as of this txg, if it changed in it.
    intent_log_header: Option<[u8; INTENT_LOG_HEADER_SIZE]>,
}

struct State {
    root_bp: BlockPointer,
    meta_dnode: Dnode,
    /// Synced dnodes loaded so far.
    dnodes: BTreeMap<u64, Dnode>,
    changes: BTreeMap<u64, TxgChanges>,
    last_synced_txg: u64,
    /// Bytes allocated by the whole object set (all copies), as of the last publish.
    used_bytes: u64,
    /// The intent log's chain header in the published root.
    intent_log_header: [u8; INTENT_LOG_HEADER_SIZE],
}

/// Result of syncing one object set: applied by `publish` once the txg is durable.
pub struct SyncedObjset {
    txg: u64,
    used_bytes: u64,
    root_bp: BlockPointer,
    meta_dnode: Dnode,
    dnodes: BTreeMap<u64, Dnode>,
    intent_log_header: [u8; INTENT_LOG_HEADER_SIZE],
}

impl SyncedObjset {
    pub fn root_bp(&self) -> BlockPointer {
        self.root_bp
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
    state: Mutex<State>,
    /// `primarycache`, as `CacheMode as u8`.
    cache_mode: AtomicU8,
    /// Sequential streams per object, for read-ahead (`note_read`).
    streams: Mutex<StreamDetector>,
}

fn cache_mode_from_raw(raw: u8) -> CacheMode {
    match raw {
        1 => CacheMode::Metadata,
        2 => CacheMode::None,
        _ => CacheMode::All,
    }
}

fn stream_detector(io: &CachedIo) -> Mutex<StreamDetector> {
    // Read-ahead distance capped for the cache, counting in the smallest volume blocks.
    let cache_blocks = io.cache().target_bytes() / 4096;
    Mutex::new(StreamDetector::new(
        StreamConfig::default().within_cache(cache_blocks),
    ))
}

fn empty_meta_dnode() -> Dnode {
    Dnode {
        object_type: ObjectType::DnodeBlock,
        levels: 1,
        indirect_shift: INDIRECT_SHIFT_DEFAULT,
        checksum_algorithm: None,
        data_block_size: DNODE_BLOCK_SIZE,
        max_block_id: 0,
        used_bytes: 0,
        birth_txg: 0,
        block_pointers: [BlockPointer::HOLE; 3],
        bonus: Vec::new(),
    }
}

/// True when every byte of `data` is zero (such a level-0 block is stored as a hole).
/// The most bytes an object set holding one object of `blocks` data blocks of
/// `data_block_size` can allocate: every data block written (one copy), every indirect block
/// at full size (two copies, as all metadata), and the object set's own dnode and root blocks
/// (two copies). What a volume's full reservation must cover.
pub fn object_set_bytes_max(data_block_size: u64, blocks: u64) -> u64 {
    let indirect_bytes = 1u64 << INDIRECT_SHIFT_DEFAULT;
    let pointers_per_indirect = indirect_bytes / cairn_format::blkptr::BLOCK_POINTER_SIZE as u64;
    let mut total = data_block_size.saturating_mul(blocks);
    let mut level_blocks = blocks;
    while level_blocks > cairn_format::dnode::DNODE_BLOCK_POINTERS as u64 {
        level_blocks = level_blocks.div_ceil(pointers_per_indirect);
        total = total.saturating_add(level_blocks * indirect_bytes * 2);
    }
    let objset_meta_bytes = u64::from(DNODE_BLOCK_SIZE)
        + u64::from(cairn_format::dnode::OBJSET_BLOCK_SIZE)
        + indirect_bytes;
    total.saturating_add(objset_meta_bytes * 2)
}

pub fn is_all_zero(data: &[u8]) -> bool {
    let mut chunks = data.chunks_exact(16);
    chunks
        .by_ref()
        .all(|chunk| u128::from_ne_bytes(chunk.try_into().expect("chunk of 16")) == 0)
        && chunks.remainder().iter().all(|&byte| byte == 0)
}

impl ObjectSet {
    /// A new, empty object set (nothing on disk until the first sync).
    pub fn create(io: Arc<CachedIo>, objset_type: ObjsetType, checksum: ChecksumAlgorithm) -> Self {
        ObjectSet {
            cache_mode: AtomicU8::new(0),
            streams: stream_detector(&io),
            io,
            objset_type,
            checksum: Mutex::new(checksum),
            state: Mutex::new(State {
                root_bp: BlockPointer::HOLE,
                meta_dnode: empty_meta_dnode(),
                dnodes: BTreeMap::new(),
                changes: BTreeMap::new(),
                last_synced_txg: 0,
                used_bytes: 0,
                intent_log_header: [0; INTENT_LOG_HEADER_SIZE],
            }),
        }
    }

    /// Opens the object set rooted at `root_bp` (read and verified now).
    pub fn open(
        io: Arc<CachedIo>,
        root_bp: BlockPointer,
        checksum: ChecksumAlgorithm,
        synced_txg: u64,
        used_bytes: u64,
    ) -> Result<Self, ObjectError> {
        let phys = read_objset_phys(io.io(), &root_bp)?;
        check_dnode(&phys.meta_dnode, None, synced_txg)?;
        Ok(ObjectSet {
            cache_mode: AtomicU8::new(0),
            streams: stream_detector(&io),
            io,
            objset_type: phys.objset_type,
            checksum: Mutex::new(checksum),
            state: Mutex::new(State {
                root_bp,
                meta_dnode: if phys.meta_dnode.is_free() {
                    empty_meta_dnode()
                } else {
                    phys.meta_dnode
                },
                dnodes: BTreeMap::new(),
                changes: BTreeMap::new(),
                last_synced_txg: synced_txg,
                used_bytes,
                intent_log_header: phys.intent_log_header,
            }),
        })
    }

    pub fn objset_type(&self) -> ObjsetType {
        self.objset_type
    }

    pub fn set_checksum(&self, checksum: ChecksumAlgorithm) {
        *self.checksum.lock() = checksum;
    }

    pub fn root_bp(&self) -> BlockPointer {
        self.state.lock().root_bp
    }

    /// The pipeline (writes, frees, uncached reads).
    pub fn io(&self) -> &Arc<BlockIo> {
        self.io.io()
    }

    /// The cached read path.
    pub fn cached_io(&self) -> &Arc<CachedIo> {
        &self.io
    }

    /// What reads of this object set leave in the cache (`primarycache`).
    pub fn set_cache_mode(&self, mode: CacheMode) {
        let raw = match mode {
            CacheMode::All => 0,
            CacheMode::Metadata => 1,
            CacheMode::None => 2,
        };
        self.cache_mode.store(raw, Ordering::Relaxed);
    }

    pub fn cache_mode(&self) -> CacheMode {
        cache_mode_from_raw(self.cache_mode.load(Ordering::Relaxed))
    }

    fn reader(&self) -> TreeReader<'_> {
        TreeReader {
            io: &self.io,
            mode: self.cache_mode(),
            cached_only: false,
        }
    }

    /// The intent log's chain header as of the last published txg (what an import would see).
    pub fn synced_intent_log_header(&self) -> [u8; INTENT_LOG_HEADER_SIZE] {
        self.state.lock().intent_log_header
    }

    /// Records a new intent-log chain header for `txg` (which makes the object set dirty in
    /// it). The caller must hold `txg` open, or be the sync thread about to sync it.
    pub fn set_intent_log_header(&self, txg: u64, header: [u8; INTENT_LOG_HEADER_SIZE]) {
        let mut state = self.state.lock();
        assert!(
            txg > state.last_synced_txg,
            "intent log header for synced txg {txg}"
        );
        state.changes.entry(txg).or_default().intent_log_header = Some(header);
    }

    /// True when `txg` has changes waiting to be synced.
    pub fn is_dirty(&self, txg: u64) -> bool {
        self.state.lock().changes.contains_key(&txg)
    }

    /// Creates object `object` (or resets it) with the given block size, in `txg`.
    pub fn create_object(
        &self,
        txg: u64,
        object: u64,
        object_type: ObjectType,
        data_block_size: u32,
        capacity_blocks: u64,
    ) {
        assert!(object > 0, "object 0 is the meta-dnode");
        let mut dnode = Dnode::free();
        dnode.object_type = object_type;
        dnode.data_block_size = data_block_size;
        dnode.birth_txg = txg;
        dnode.levels = 1;
        while dnode.capacity_blocks(dnode.levels) < capacity_blocks.max(1) {
            dnode.levels += 1;
        }
        let mut state = self.state.lock();
        state
            .changes
            .entry(txg)
            .or_default()
            .dnodes
            .insert(object, dnode);
    }

    /// Frees object `object` and every block beneath it, in `txg`.
    pub fn free_object(&self, txg: u64, object: u64) {
        let mut dropped = Vec::new();
        {
            let mut state = self.state.lock();
            let changes = state.changes.entry(txg).or_default();
            changes.blocks.retain(|(obj, _), change| {
                if *obj == object {
                    dropped.extend(change.written);
                }
                *obj != object
            });
            changes.dnodes.insert(object, Dnode::free());
        }
        for bp in dropped {
            self.io.io().free_block(&bp, txg);
        }
    }

    /// Replaces a whole block in `txg` (`data.len()` must equal the object's block size).
    /// Returns whether the block was not yet changed in `txg`.
    pub fn write_block(&self, txg: u64, object: u64, blkid: u64, data: Bytes) -> bool {
        self.record_block(txg, object, blkid, BlockChange::data(data))
    }

    /// Writes whole blocks of `object` to their final place now, durably (FUA), for the open
    /// txg `txg` (held by the caller, so its sync cannot have started), and records them as
    /// changed in `txg` at those addresses: the txg sync links them into the tree without
    /// writing them again. For large synchronous writes, whose pointers alone are then logged.
    /// Returns each block's pointer and whether it was newly dirty in `txg`. All-zero blocks
    /// must not be passed (they are holes). On error nothing is recorded and whatever was
    /// allocated is freed.
    pub fn write_blocks_in_place(
        &self,
        txg: u64,
        object: u64,
        blocks: Vec<(u64, Bytes)>,
    ) -> Result<Vec<(BlockPointer, bool)>, ObjectError> {
        let dnode = self.dnode(object)?;
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        let object_type = match dnode.object_type {
            ObjectType::None => ObjectType::VolumeData,
            other => other,
        };
        let props = cairn_pipeline::WriteProps {
            object_type,
            level: 0,
            checksum: dnode
                .checksum_algorithm
                .unwrap_or_else(|| *self.checksum.lock()),
            copies: if object_type.is_metadata(0) { 2 } else { 1 },
            fill: 1,
            class: IoClass::SyncWrite,
        };
        let mut batch = self.io.io().durable_batch(txg);
        let mut written = Vec::with_capacity(blocks.len());
        let mut result = Ok(());
        for (blkid, data) in &blocks {
            assert_eq!(data.len(), dnode.data_block_size as usize, "partial block");
            assert!(
                !is_all_zero(data),
                "an all-zero block is a hole, not a write"
            );
            match batch.write(data.clone(), props) {
                Ok(bp) => written.push((*blkid, bp)),
                Err(err) => {
                    result = Err(err);
                    break;
                }
            }
        }
        let result = result.and(batch.finish());
        if let Err(err) = result {
            for (_, bp) in &written {
                self.io.io().free_block(bp, txg);
            }
            return Err(err.into());
        }
        Ok(written
            .into_iter()
            .zip(blocks)
            .map(|((blkid, bp), (_, data))| {
                let change = BlockChange {
                    data: Some(data),
                    written: Some(bp),
                };
                (bp, self.record_block(txg, object, blkid, change))
            })
            .collect())
    }

    /// Turns a block into a hole in `txg`. Returns whether the block was not yet changed in
    /// `txg` (as `write_block`).
    pub fn free_block(&self, txg: u64, object: u64, blkid: u64) -> bool {
        self.record_block(txg, object, blkid, BlockChange::hole())
    }

    /// Records the block's newest version in `txg`, replacing an earlier one of the same txg
    /// (only the last version of a block in a txg is ever written). Returns whether the block
    /// is newly dirty in `txg`, so callers count each block's dirty bytes once per txg.
    /// A version written in place that is replaced before its txg syncs is never linked into
    /// the tree: its space is freed in `txg`, deferred like any free, so it is not reused
    /// before `txg` syncs (until then a logged pointer may still lead replay to it).
    fn record_block(&self, txg: u64, object: u64, blkid: u64, change: BlockChange) -> bool {
        let replaced = {
            let mut state = self.state.lock();
            state
                .changes
                .entry(txg)
                .or_default()
                .blocks
                .insert((object, blkid), change)
        };
        if let Some(bp) = replaced.as_ref().and_then(|old| old.written) {
            self.io.io().free_block(&bp, txg);
        }
        replaced.is_none()
    }

    /// The newest version of a dnode: pending changes first, then the synced tree.
    pub fn dnode(&self, object: u64) -> Result<Dnode, ObjectError> {
        let mut state = self.state.lock();
        for changes in state.changes.values().rev() {
            if let Some(dnode) = changes.dnodes.get(&object) {
                return Ok(dnode.clone());
            }
        }
        self.synced_dnode(&mut state, object)
    }

    fn synced_dnode(&self, state: &mut State, object: u64) -> Result<Dnode, ObjectError> {
        if let Some(dnode) = state.dnodes.get(&object) {
            return Ok(dnode.clone());
        }
        let block_id = object / DNODES_PER_BLOCK;
        let meta = state.meta_dnode.clone();
        let dnode = match read_tree_block(&self.reader(), &meta, block_id)? {
            None => Dnode::free(),
            Some(block) => {
                let slot = (object % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
                let raw = block.get(slot..slot + DNODE_SIZE).ok_or_else(|| {
                    ObjectError::Corrupt(format!("dnode {object}: dnode block too short"))
                })?;
                let dnode = Dnode::decode(raw)
                    .map_err(|err| ObjectError::Corrupt(format!("dnode {object}: {err}")))?;
                check_dnode(&dnode, Some(object), state.last_synced_txg)?;
                dnode
            }
        };
        state.dnodes.insert(object, dnode.clone());
        Ok(dnode)
    }

    /// Reads block `blkid` of `object`; `None` is a hole (reads as zeros).
    pub fn read_block(&self, object: u64, blkid: u64) -> Result<Option<Bytes>, ObjectError> {
        self.read_block_with(object, blkid, false)
    }

    /// `read_block` for a caller that must not wait for I/O (a reader on an async runtime):
    /// `None` when the block, a pointer on the way to it, or its dnode is not in memory (the
    /// caller then reads it the ordinary way, which also reports any error).
    pub fn read_block_cached(&self, object: u64, blkid: u64) -> Option<Option<Bytes>> {
        self.read_block_with(object, blkid, true).ok()
    }

    fn read_block_with(
        &self,
        object: u64,
        blkid: u64,
        cached_only: bool,
    ) -> Result<Option<Bytes>, ObjectError> {
        let dnode = {
            let mut state = self.state.lock();
            for changes in state.changes.values().rev() {
                if let Some(change) = changes.blocks.get(&(object, blkid)) {
                    return Ok(change.data.clone());
                }
                if let Some(dnode) = changes.dnodes.get(&object) {
                    // Object (re)created or freed after its last synced version: nothing older
                    // is visible.
                    if dnode.is_free() {
                        return Err(ObjectError::NoSuchObject(object));
                    }
                    if dnode.birth_txg > state.last_synced_txg {
                        return Ok(None);
                    }
                }
            }
            if cached_only {
                state
                    .dnodes
                    .get(&object)
                    .cloned()
                    .ok_or(ObjectError::NotCached)?
            } else {
                self.synced_dnode(&mut state, object)?
            }
        };
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        let reader = TreeReader {
            io: &self.io,
            mode: self.cache_mode(),
            cached_only,
        };
        read_tree_block(&reader, &dnode, blkid)
    }

    /// Tells the object set a client read blocks `first .. first + count` of `object`: a read
    /// that continues a sequential stream starts read-ahead of the blocks that follow (read
    /// in the background into the cache). Read-ahead is a hint: failures are left to the
    /// demand reads that follow.
    ///
    /// Never waits for I/O (a reader on an async runtime calls it): finding the pointers of
    /// the blocks ahead, which may read indirect blocks, happens on a prefetch thread.
    pub fn note_read(self: &Arc<Self>, object: u64, first: u64, count: u64) {
        if count == 0 {
            return;
        }
        let ahead = self.streams.lock().observe_request(object, first, count);
        let mode = self.cache_mode();
        if ahead.is_empty() || mode != CacheMode::All {
            // Read-ahead of blocks the cache would not keep is wasted work.
            return;
        }
        // Usually the pointers are in cached indirect blocks: queue the reads now, ahead of
        // the demand reads that follow. Otherwise a prefetch thread reads the indirects.
        if let Some(bps) = self.blocks_ahead(object, ahead.clone(), true) {
            self.io.prefetch(&bps, mode);
            return;
        }
        let this = self.clone();
        self.io.spawn_prefetch_task(move || {
            if let Some(bps) = this.blocks_ahead(object, ahead, false) {
                this.io.prefetch(&bps, mode);
            }
        });
    }

    /// The pointers of the blocks `ahead` of `object` that are on disk (blocks changed in an
    /// unsynced txg are in memory already). With `cached_only`, `None` if finding them would
    /// need a read (an indirect block or the dnode not in memory); `None` also on errors
    /// (read-ahead is a hint: the demand reads that follow report them).
    fn blocks_ahead(
        &self,
        object: u64,
        ahead: std::ops::Range<u64>,
        cached_only: bool,
    ) -> Option<Vec<BlockPointer>> {
        let (dnode, blkids) = {
            let mut state = self.state.lock();
            if state
                .changes
                .values()
                .any(|changes| changes.dnodes.contains_key(&object))
            {
                return Some(Vec::new());
            }
            let blkids: Vec<u64> = ahead
                .filter(|&blkid| {
                    !state
                        .changes
                        .values()
                        .any(|changes| changes.blocks.contains_key(&(object, blkid)))
                })
                .collect();
            let dnode = if cached_only {
                state.dnodes.get(&object).cloned()?
            } else {
                self.synced_dnode(&mut state, object).ok()?
            };
            (dnode, blkids)
        };
        let reader = TreeReader {
            io: &self.io,
            mode: self.cache_mode(),
            cached_only,
        };
        let mut bps = Vec::with_capacity(blkids.len());
        for blkid in blkids {
            if let Some(bp) = tree_block_pointer(&reader, &dnode, blkid).ok()? {
                bps.push(bp);
            }
        }
        Some(bps)
    }

    /// Which of blocks `first .. first + count` of `object` hold data (true) or are holes,
    /// as a reader would see them now: pending changes first, then the synced tree. Reads no
    /// data blocks, only the indirect blocks covering the range.
    pub fn block_map(&self, object: u64, first: u64, count: u64) -> Result<Vec<bool>, ObjectError> {
        let (dnode, overlay) = {
            let mut state = self.state.lock();
            let mut overlay: BTreeMap<u64, bool> = BTreeMap::new();
            let mut fresh = false;
            for changes in state.changes.values().rev() {
                for (&(_, blkid), change) in changes
                    .blocks
                    .range((object, first)..(object, first.saturating_add(count)))
                {
                    overlay.entry(blkid).or_insert(change.data.is_some());
                }
                if let Some(dnode) = changes.dnodes.get(&object) {
                    if dnode.is_free() {
                        return Err(ObjectError::NoSuchObject(object));
                    }
                    if dnode.birth_txg > state.last_synced_txg {
                        fresh = true;
                        break;
                    }
                }
            }
            let dnode = if fresh {
                None
            } else {
                Some(self.synced_dnode(&mut state, object)?)
            };
            (dnode, overlay)
        };
        let mut map = vec![false; count as usize];
        if let Some(dnode) = dnode.filter(|dnode| !dnode.is_free()) {
            let top_span = dnode.capacity_blocks(dnode.levels) / 3;
            let per = dnode.pointers_per_indirect();
            for (index, bp) in dnode.block_pointers.iter().enumerate() {
                map_subtree(
                    &self.reader(),
                    per,
                    bp,
                    index as u64 * top_span,
                    top_span,
                    first,
                    &mut map,
                )?;
            }
        }
        for (blkid, has_data) in overlay {
            map[(blkid - first) as usize] = has_data;
        }
        Ok(map)
    }

    /// Copy-on-write of every change made in `txg`: writes new blocks through `batch` and
    /// returns the new root, to be `publish`ed once the txg is durable.
    pub fn sync(&self, txg: u64, batch: &mut WriteBatch<'_>) -> Result<SyncedObjset, ObjectError> {
        let checksum = *self.checksum.lock();
        let (blocks, dnode_changes, meta_dnode, old_root, used_before, intent_log_header) = {
            let state = self.state.lock();
            assert!(
                txg > state.last_synced_txg,
                "sync of txg {txg} after {}",
                state.last_synced_txg
            );
            let changes = state.changes.get(&txg);
            (
                changes.map(|c| c.blocks.clone()).unwrap_or_default(),
                changes.map(|c| c.dnodes.clone()).unwrap_or_default(),
                state.meta_dnode.clone(),
                state.root_bp,
                state.used_bytes,
                state
                    .changes
                    .range(..=txg)
                    .rev()
                    .find_map(|(_, c)| c.intent_log_header)
                    .unwrap_or(state.intent_log_header),
            )
        };
        let mut used = i128::from(used_before);
        let mut writer = TreeWriter {
            io: &self.io,
            mode: self.cache_mode(),
            batch,
            txg,
            checksum,
        };
        // Objects touched this txg, with their starting dnode.
        let mut objects: BTreeMap<u64, Dnode> = BTreeMap::new();
        for (&object, change) in &dnode_changes {
            let synced = self.dnode_before(object, txg)?;
            let created_or_freed = change.is_free() || change.birth_txg == txg;
            if !synced.is_free() && created_or_freed {
                // Replaced or freed: everything under the old dnode goes.
                writer.free_subtrees(&synced)?;
            }
            let dnode = if created_or_freed || synced.is_free() {
                change.clone()
            } else {
                // Attribute change only: the tree is whatever the last sync left.
                let mut dnode = synced;
                dnode.bonus = change.bonus.clone();
                dnode
            };
            objects.insert(object, dnode);
        }
        for &(object, _) in blocks.keys() {
            if let std::collections::btree_map::Entry::Vacant(slot) = objects.entry(object) {
                slot.insert(self.dnode_before(object, txg)?);
            }
        }
        let mut new_dnodes = BTreeMap::new();
        for (object, mut dnode) in objects {
            used -= i128::from(self.dnode_before(object, txg)?.used_bytes);
            if !dnode.is_free() {
                let updates: Vec<(u64, BlockChange)> = blocks
                    .range((object, 0)..=(object, u64::MAX))
                    .map(|(&(_, blkid), change)| (blkid, change.clone()))
                    .collect();
                writer.apply(&mut dnode, ObjectType::VolumeData, updates)?;
            } else {
                // Blocks written in place for an object freed since are linked nowhere.
                for (_, change) in blocks.range((object, 0)..=(object, u64::MAX)) {
                    if let Some(bp) = &change.written {
                        writer.free(bp);
                    }
                }
            }
            used += i128::from(dnode.used_bytes);
            new_dnodes.insert(object, dnode);
        }
        // Write the changed dnodes into the meta-dnode's blocks.
        let mut meta = meta_dnode;
        let mut dnode_blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for (&object, dnode) in &new_dnodes {
            let block_id = object / DNODES_PER_BLOCK;
            let block = match dnode_blocks.entry(block_id) {
                std::collections::btree_map::Entry::Occupied(slot) => slot.into_mut(),
                std::collections::btree_map::Entry::Vacant(slot) => slot.insert(
                    read_tree_block(&self.reader(), &meta, block_id)?
                        .map(|b| b.to_vec())
                        .unwrap_or_else(|| vec![0u8; DNODE_BLOCK_SIZE as usize]),
                ),
            };
            let slot = (object % DNODES_PER_BLOCK) as usize * DNODE_SIZE;
            dnode.encode(&mut block[slot..slot + DNODE_SIZE]);
        }
        let meta_updates: Vec<(u64, BlockChange)> = dnode_blocks
            .into_iter()
            .map(|(block_id, block)| (block_id, BlockChange::data(Bytes::from(block))))
            .collect();
        used -= i128::from(meta.used_bytes);
        writer.apply(&mut meta, ObjectType::DnodeBlock, meta_updates)?;
        used += i128::from(meta.used_bytes);
        let phys = ObjsetPhys {
            meta_dnode: meta.clone(),
            objset_type: self.objset_type,
            intent_log_header,
        };
        let root_bp = writer.write_meta(
            Bytes::from(phys.encode_block()),
            ObjectType::ObjsetRoot,
            0,
            1,
        )?;
        if !old_root.is_hole() {
            used -= i128::from(old_root.allocated_bytes());
            self.io.io().free_block(&old_root, txg);
        }
        used += i128::from(root_bp.allocated_bytes());
        if used < 0 {
            // Only a damaged image (a dnode or record claiming more than it holds) gets here.
            return Err(ObjectError::Corrupt(format!(
                "object set space accounting went negative ({used} bytes) in txg {txg}"
            )));
        }
        Ok(SyncedObjset {
            txg,
            used_bytes: used as u64,
            root_bp,
            meta_dnode: meta,
            dnodes: new_dnodes,
            intent_log_header,
        })
    }

    /// The dnode as of the end of the previous txg (pending older txgs included).
    fn dnode_before(&self, object: u64, txg: u64) -> Result<Dnode, ObjectError> {
        let mut state = self.state.lock();
        for (_, changes) in state.changes.range(..txg).rev() {
            if let Some(dnode) = changes.dnodes.get(&object) {
                return Ok(dnode.clone());
            }
        }
        self.synced_dnode(&mut state, object)
    }

    /// Makes a synced txg's tree current and forgets its change set.
    pub fn publish(&self, synced: SyncedObjset) {
        let mut state = self.state.lock();
        assert!(synced.txg > state.last_synced_txg);
        state.root_bp = synced.root_bp;
        state.used_bytes = synced.used_bytes;
        state.meta_dnode = synced.meta_dnode;
        for (object, dnode) in synced.dnodes {
            state.dnodes.insert(object, dnode);
        }
        state.changes.remove(&synced.txg);
        state.last_synced_txg = synced.txg;
        state.intent_log_header = synced.intent_log_header;
    }

    /// Marks a txg in which this object set had nothing to sync as done.
    pub fn skip_txg(&self, txg: u64) {
        let mut state = self.state.lock();
        assert!(!state.changes.contains_key(&txg), "skipping a dirty txg");
        state.last_synced_txg = state.last_synced_txg.max(txg);
    }

    /// Frees every block of the object set (used by dataset destroy), in `txg`.
    pub fn free_all(&self, txg: u64) -> Result<(), ObjectError> {
        let root = self.root_bp();
        if root.is_hole() {
            return Ok(());
        }
        let mut freed = Vec::new();
        tree::collect_blocks(self.io.io(), &root, &mut freed)?;
        for bp in freed {
            self.io.io().free_block(&bp, txg);
        }
        Ok(())
    }

    /// Writes `blob` into `object` as whole blocks, freeing blocks past its end; the length goes
    /// in the dnode's bonus. Used for small pool metadata (the dataset directory).
    pub fn write_blob(
        &self,
        txg: u64,
        object: u64,
        object_type: ObjectType,
        blob: &[u8],
    ) -> Result<(), ObjectError> {
        let block_size = DNODE_BLOCK_SIZE as usize;
        let blocks_needed = blob.len().div_ceil(block_size) as u64;
        let old = self.dnode(object)?;
        let old_blocks = if old.is_free() {
            0
        } else {
            blob_len(&old).div_ceil(block_size as u64)
        };
        let mut dnode = if old.is_free() {
            let mut dnode = Dnode::free();
            dnode.object_type = object_type;
            dnode.data_block_size = DNODE_BLOCK_SIZE;
            dnode.levels = 1;
            dnode.birth_txg = txg;
            dnode
        } else {
            old
        };
        dnode.bonus = (blob.len() as u64).to_le_bytes().to_vec();
        while dnode.capacity_blocks(dnode.levels) < blocks_needed.max(1) {
            dnode.levels += 1;
        }
        let mut state = self.state.lock();
        let changes = state.changes.entry(txg).or_default();
        for (blkid, chunk) in blob.chunks(block_size).enumerate() {
            let mut block = vec![0u8; block_size];
            block[..chunk.len()].copy_from_slice(chunk);
            changes.blocks.insert(
                (object, blkid as u64),
                BlockChange::data(Bytes::from(block)),
            );
        }
        for blkid in blocks_needed..old_blocks {
            changes.blocks.insert((object, blkid), BlockChange::hole());
        }
        changes.dnodes.insert(object, dnode);
        Ok(())
    }

    /// Reads a blob written by `write_blob`; `None` if the object does not exist.
    pub fn read_blob(&self, object: u64) -> Result<Option<Vec<u8>>, ObjectError> {
        let dnode = self.dnode(object)?;
        if dnode.is_free() {
            return Ok(None);
        }
        let len = blob_len(&dnode);
        let block_size = u64::from(dnode.data_block_size);
        if len > block_size * dnode.capacity_blocks(dnode.levels) {
            return Err(ObjectError::Corrupt(format!(
                "blob {object} claims {len} bytes"
            )));
        }
        let mut out = Vec::with_capacity(len as usize);
        for blkid in 0..len.div_ceil(block_size) {
            let want = (len - blkid * block_size).min(block_size) as usize;
            match self.read_block(object, blkid)? {
                Some(block) => out.extend_from_slice(&block[..want.min(block.len())]),
                None => out.resize(out.len() + want, 0),
            }
        }
        Ok(Some(out))
    }
}

fn blob_len(dnode: &Dnode) -> u64 {
    dnode.bonus.get(..8).map_or(0, |raw| {
        u64::from_le_bytes(raw.try_into().expect("8 bytes"))
    })
}

pub fn read_objset_phys(io: &BlockIo, root_bp: &BlockPointer) -> Result<ObjsetPhys, ObjectError> {
    if root_bp.object_type != ObjectType::ObjsetRoot || root_bp.level != 0 {
        return Err(ObjectError::Corrupt(format!(
            "object set root pointer has type {:?} level {}",
            root_bp.object_type, root_bp.level
        )));
    }
    let data = io.read_block(root_bp, IoClass::SyncRead)?;
    ObjsetPhys::decode(&data).map_err(|err| ObjectError::Corrupt(format!("object set root: {err}")))
}

/// Marks in `map` (indexed from `first`) which level-0 blocks under `bp` hold data, reading only
/// indirect blocks, and only those that overlap the range.
fn map_subtree(
    io: &TreeReader<'_>,
    per: u64,
    bp: &BlockPointer,
    start: u64,
    span: u64,
    first: u64,
    map: &mut [bool],
) -> Result<(), ObjectError> {
    let end = first + map.len() as u64;
    if bp.is_hole() || start >= end || start + span <= first {
        return Ok(());
    }
    if bp.level == 0 {
        map[(start - first) as usize] = true;
        return Ok(());
    }
    let block = io.read(bp)?;
    let child_span = span / per;
    for index in 0..per {
        let child_start = start + index * child_span;
        if child_start >= end {
            break;
        }
        if child_start + child_span <= first {
            continue;
        }
        let child = tree::child_pointer(&block, index as usize)?;
        map_subtree(io, per, &child, child_start, child_span, first, map)?;
    }
    Ok(())
}

/// Looks up a level-0 block through the dnode's tree.
fn read_tree_block(
    io: &TreeReader<'_>,
    dnode: &Dnode,
    blkid: u64,
) -> Result<Option<Bytes>, ObjectError> {
    match tree_block_pointer(io, dnode, blkid)? {
        Some(bp) => Ok(Some(io.read(&bp)?)),
        None => Ok(None),
    }
}

/// The pointer to level-0 block `blkid` (`None`: a hole), reading only indirect blocks.
fn tree_block_pointer(
    io: &TreeReader<'_>,
    dnode: &Dnode,
    blkid: u64,
) -> Result<Option<BlockPointer>, ObjectError> {
    if dnode.is_free() || blkid >= dnode.capacity_blocks(dnode.levels) {
        return Ok(None);
    }
    let per = dnode.pointers_per_indirect();
    let top_span = dnode.capacity_blocks(dnode.levels) / 3;
    let mut bp = dnode.block_pointers[(blkid / top_span) as usize];
    let mut span = top_span;
    let mut within = blkid % top_span;
    while !bp.is_hole() && bp.level > 0 {
        let block = io.read(&bp)?;
        span /= per;
        let index = (within / span) as usize;
        within %= span;
        let child = tree::child_pointer(&block, index)?;
        check_child(&bp, &child, index)?;
        bp = child;
    }
    if bp.is_hole() {
        return Ok(None);
    }
    if bp.level != 0 {
        return Err(ObjectError::Corrupt(
            "tree deeper than its dnode says".into(),
        ));
    }
    if bp.lsize != dnode.data_block_size {
        return Err(ObjectError::Corrupt(format!(
            "block {blkid} holds {} bytes, its object's blocks are {}",
            bp.lsize, dnode.data_block_size
        )));
    }
    Ok(Some(bp))
}

/// Checks a dnode read from disk against its own tree (see the crate's invariants): every
/// pointer one level below the dnode, of the dnode's object type, born no later than
/// `newest_txg`, and, for a one-level tree, holding a block of the dnode's block size. `object` is `None` for a meta-dnode.
fn check_dnode(dnode: &Dnode, object: Option<u64>, newest_txg: u64) -> Result<(), ObjectError> {
    if dnode.is_free() {
        return Ok(());
    }
    let name = || object.map_or_else(|| "meta-dnode".to_string(), |n| format!("dnode {n}"));
    for (index, bp) in dnode.block_pointers.iter().enumerate() {
        if bp.is_hole() {
            continue;
        }
        let problem = if u16::from(bp.level) + 1 != u16::from(dnode.levels) {
            format!(
                "is level {}, the dnode has {} levels",
                bp.level, dnode.levels
            )
        } else if bp.object_type != dnode.object_type {
            format!(
                "has type {:?}, the dnode's object {:?}",
                bp.object_type, dnode.object_type
            )
        } else if bp.birth_txg > newest_txg {
            format!("was born in txg {}, after txg {newest_txg}", bp.birth_txg)
        } else if bp.level == 0 && bp.lsize != dnode.data_block_size {
            format!(
                "holds {} bytes, the dnode's blocks are {}",
                bp.lsize, dnode.data_block_size
            )
        } else {
            continue;
        };
        return Err(ObjectError::Corrupt(format!(
            "{}: block pointer {index} {problem}",
            name()
        )));
    }
    Ok(())
}

/// Checks pointer `index` of an indirect block against the pointer to that block: one level
/// below it, of the same object type, and born no later than it. Bounds every walk by the
/// root's level.
fn check_child(
    parent: &BlockPointer,
    child: &BlockPointer,
    index: usize,
) -> Result<(), ObjectError> {
    if child.is_hole() {
        return Ok(());
    }
    if u16::from(child.level) + 1 != u16::from(parent.level) {
        return Err(ObjectError::Corrupt(format!(
            "indirect entry {index} is level {} under a level-{} block",
            child.level, parent.level
        )));
    }
    if child.object_type != parent.object_type {
        return Err(ObjectError::Corrupt(format!(
            "indirect entry {index} has type {:?} under a block of type {:?}",
            child.object_type, parent.object_type
        )));
    }
    if child.birth_txg > parent.birth_txg {
        return Err(ObjectError::Corrupt(format!(
            "indirect entry {index} was born in txg {}, after its parent (txg {})",
            child.birth_txg, parent.birth_txg
        )));
    }
    Ok(())
}

/// Reads tree blocks through the cache under one `primarycache` setting.
struct TreeReader<'a> {
    io: &'a CachedIo,
    mode: CacheMode,
    /// Only what is cached: `NotCached` rather than a device read.
    cached_only: bool,
}

impl TreeReader<'_> {
    fn read(&self, bp: &BlockPointer) -> Result<Bytes, ObjectError> {
        if self.cached_only {
            return self.io.read_cached(bp).ok_or(ObjectError::NotCached);
        }
        Ok(self.io.read_block(bp, self.mode)?)
    }
}

/// Rewrites trees copy-on-write for one txg.
struct TreeWriter<'a, 'b> {
    io: &'a CachedIo,
    mode: CacheMode,
    batch: &'a mut WriteBatch<'b>,
    txg: u64,
    checksum: ChecksumAlgorithm,
}

/// A tree node during rewrite: on disk, or built in memory this txg (tree growth).
enum Node {
    Disk(BlockPointer),
    Memory(Vec<Node>),
}

impl TreeWriter<'_, '_> {
    fn write_meta(
        &mut self,
        data: Bytes,
        object_type: ObjectType,
        level: u8,
        fill: u64,
    ) -> Result<BlockPointer, ObjectError> {
        let bp = self.batch.write(
            data.clone(),
            cairn_pipeline::WriteProps {
                object_type,
                level,
                checksum: self.checksum,
                copies: 2,
                fill,
                class: IoClass::AsyncWrite,
            },
        )?;
        // The next txg reads it back to rewrite it: keep it cached.
        self.io.insert_written(&bp, &data, self.mode);
        Ok(bp)
    }

    fn free(&self, bp: &BlockPointer) {
        self.io.io().free_block(bp, self.txg);
    }

    fn free_subtrees(&mut self, dnode: &Dnode) -> Result<(), ObjectError> {
        let mut all = Vec::new();
        for bp in &dnode.block_pointers {
            tree::collect_tree(self.io.io(), bp, &mut all)?;
        }
        for bp in all {
            self.free(&bp);
        }
        Ok(())
    }

    /// Applies level-0 updates (sorted by blkid) to `dnode`'s tree, growing it if needed.
    fn apply(
        &mut self,
        dnode: &mut Dnode,
        data_type: ObjectType,
        updates: Vec<(u64, BlockChange)>,
    ) -> Result<(), ObjectError> {
        if updates.is_empty() {
            return Ok(());
        }
        let data_type = if dnode.object_type == ObjectType::None {
            data_type
        } else {
            dnode.object_type
        };
        let max_blkid = updates.last().expect("non-empty").0;
        let mut tops: Vec<Node> = dnode
            .block_pointers
            .iter()
            .map(|bp| Node::Disk(*bp))
            .collect();
        while dnode.capacity_blocks(dnode.levels) <= max_blkid {
            // Grow one level: the old top pointers become the first children of a new top.
            let mut children = std::mem::take(&mut tops);
            children.resize_with(dnode.pointers_per_indirect() as usize, || {
                Node::Disk(BlockPointer::HOLE)
            });
            tops = vec![
                Node::Memory(children),
                Node::Disk(BlockPointer::HOLE),
                Node::Disk(BlockPointer::HOLE),
            ];
            dnode.levels += 1;
            assert!(
                dnode.levels <= cairn_format::blkptr::LEVEL_MAX + 1,
                "tree too deep"
            );
        }
        let top_span = dnode.capacity_blocks(dnode.levels) / 3;
        let top_level = dnode.levels - 1;
        let mut used_delta: i128 = 0;
        let mut updates = updates.into_iter().peekable();
        let mut new_bps = [BlockPointer::HOLE; 3];
        for (index, node) in tops.into_iter().enumerate() {
            let first = index as u64 * top_span;
            let mut group = Vec::new();
            while let Some((blkid, _)) = updates.peek() {
                if *blkid >= first + top_span {
                    break;
                }
                group.push(updates.next().expect("peeked"));
            }
            new_bps[index] = if group.is_empty() {
                self.materialize(node, top_level, dnode, data_type, &mut used_delta)?
            } else {
                self.rewrite(
                    node,
                    top_level,
                    first,
                    top_span,
                    group,
                    dnode,
                    data_type,
                    &mut used_delta,
                )?
            };
        }
        assert!(updates.next().is_none(), "update beyond tree capacity");
        dnode.block_pointers = new_bps;
        dnode.used_bytes = (i128::from(dnode.used_bytes) + used_delta).max(0) as u64;
        dnode.max_block_id = dnode.max_block_id.max(max_blkid);
        Ok(())
    }

    /// A node with no updates beneath it: on-disk nodes stay; in-memory ones get written.
    fn materialize(
        &mut self,
        node: Node,
        level: u8,
        dnode: &Dnode,
        data_type: ObjectType,
        used: &mut i128,
    ) -> Result<BlockPointer, ObjectError> {
        match node {
            Node::Disk(bp) => Ok(bp),
            Node::Memory(children) => {
                let mut bps = Vec::with_capacity(children.len());
                for child in children {
                    bps.push(self.materialize(child, level - 1, dnode, data_type, used)?);
                }
                self.write_indirect(&bps, level, dnode, data_type, used)
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rewrite(
        &mut self,
        node: Node,
        level: u8,
        first: u64,
        span: u64,
        updates: Vec<(u64, BlockChange)>,
        dnode: &Dnode,
        data_type: ObjectType,
        used: &mut i128,
    ) -> Result<BlockPointer, ObjectError> {
        if level == 0 {
            assert_eq!(updates.len(), 1, "one update per level-0 block");
            let (blkid, change) = updates.into_iter().next().expect("one update");
            assert_eq!(blkid, first);
            if let Node::Disk(old) = node
                && !old.is_hole()
            {
                *used -= i128::from(old.allocated_bytes());
                self.free(&old);
            }
            if let Some(bp) = change.written {
                assert_eq!(
                    bp.birth_txg, self.txg,
                    "block written in place for another txg"
                );
                assert_eq!(bp.lsize, dnode.data_block_size, "block written in place");
                *used += i128::from(bp.allocated_bytes());
                return Ok(bp);
            }
            return match change.data {
                Some(data) if !is_all_zero(&data) => {
                    assert_eq!(data.len(), dnode.data_block_size as usize, "partial block");
                    let bp = self.batch.write(
                        data.clone(),
                        cairn_pipeline::WriteProps {
                            object_type: data_type,
                            level: 0,
                            checksum: dnode.checksum_algorithm.unwrap_or(self.checksum),
                            copies: if data_type.is_metadata(0) { 2 } else { 1 },
                            fill: 1,
                            class: IoClass::AsyncWrite,
                        },
                    )?;
                    if data_type.is_metadata(0) {
                        // Dnode blocks: read back by the next txg that changes a dnode.
                        self.io.insert_written(&bp, &data, self.mode);
                    }
                    *used += i128::from(bp.allocated_bytes());
                    Ok(bp)
                }
                _ => Ok(BlockPointer::HOLE),
            };
        }
        let per = dnode.pointers_per_indirect();
        let child_span = span / per;
        let mut children: Vec<Node> = match node {
            Node::Memory(children) => children,
            Node::Disk(bp) if bp.is_hole() => {
                (0..per).map(|_| Node::Disk(BlockPointer::HOLE)).collect()
            }
            Node::Disk(bp) => {
                let block = self.io.read_block(&bp, self.mode)?;
                let mut children = Vec::with_capacity(per as usize);
                for index in 0..per as usize {
                    children.push(Node::Disk(tree::child_pointer(&block, index)?));
                }
                if bp.level != level {
                    return Err(ObjectError::Corrupt(format!(
                        "indirect at level {} where {level} expected",
                        bp.level
                    )));
                }
                *used -= i128::from(bp.allocated_bytes());
                self.free(&bp);
                children
            }
        };
        let mut grouped: BTreeMap<usize, Vec<(u64, BlockChange)>> = BTreeMap::new();
        for (blkid, change) in updates {
            let index = ((blkid - first) / child_span) as usize;
            grouped.entry(index).or_default().push((blkid, change));
        }
        let mut bps = Vec::with_capacity(children.len());
        for (index, child) in children.drain(..).enumerate() {
            let bp = match grouped.remove(&index) {
                Some(group) => self.rewrite(
                    child,
                    level - 1,
                    first + index as u64 * child_span,
                    child_span,
                    group,
                    dnode,
                    data_type,
                    used,
                )?,
                None => self.materialize(child, level - 1, dnode, data_type, used)?,
            };
            bps.push(bp);
        }
        self.write_indirect(&bps, level, dnode, data_type, used)
    }

    fn write_indirect(
        &mut self,
        children: &[BlockPointer],
        level: u8,
        dnode: &Dnode,
        data_type: ObjectType,
        used: &mut i128,
    ) -> Result<BlockPointer, ObjectError> {
        if children.iter().all(|bp| bp.is_hole()) {
            return Ok(BlockPointer::HOLE);
        }
        let size = 1usize << dnode.indirect_shift;
        let mut block = vec![0u8; size];
        let mut fill = 0;
        for (raw, bp) in block
            .chunks_exact_mut(cairn_format::blkptr::BLOCK_POINTER_SIZE)
            .zip(children)
        {
            bp.encode(raw);
            fill += bp.fill;
        }
        let bp = self.write_meta(Bytes::from(block), data_type, level, fill)?;
        *used += i128::from(bp.allocated_bytes());
        Ok(bp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_object_set_counts_every_indirect_level() {
        let block = 16 * 1024;
        // 1 GiB of 16 KiB blocks: 65,536 pointers, 64 level-1 blocks, one level-2 block.
        let bytes = object_set_bytes_max(block, 65_536);
        let indirect = 128 * 1024 * 2;
        let meta = (16 * 1024 + 4096 + 128 * 1024) * 2;
        assert_eq!(bytes, (1 << 30) + 65 * indirect + meta);
        // Three pointers fit in the dnode: no indirect block.
        assert_eq!(object_set_bytes_max(block, 3), 3 * block + meta);
    }

    #[test]
    fn zero_detection_sees_a_single_set_byte() {
        let mut block = vec![0u8; 8192];
        assert!(is_all_zero(&block));
        block[8191] = 1;
        assert!(!is_all_zero(&block));
        block[8191] = 0;
        block[3] = 1;
        assert!(!is_all_zero(&block));
    }
}
