//! Building and opening object sets, their settings, and the sizing helpers datasets use to
//! reserve space. The in-memory model itself (`ObjectSet`, `State`, the per-txg change sets) is
//! declared in the crate root so every module of the crate shares its fields.

use crate::check::check_dnode;
use crate::memo::Memo;
use crate::tree::{TreeReader, read_objset_phys};
use crate::{ObjectError, ObjectSet, State};
use cairn_arc::{CacheMode, CachePolicy, CachedIo, StreamConfig, StreamDetector};
use cairn_format::dnode::{DNODE_BLOCK_SIZE, INDIRECT_SHIFT_DEFAULT};
use cairn_format::intent_log::INTENT_LOG_HEADER_SIZE;
use cairn_format::{BlockPointer, ChecksumAlgorithm, Compression, Dnode, ObjectType, ObjsetType};
use cairn_pipeline::BlockIo;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

fn cache_mode_from_raw(raw: u8) -> CacheMode {
    match raw & 0b11 {
        1 => CacheMode::Metadata,
        2 => CacheMode::None,
        _ => CacheMode::All,
    }
}

fn cache_mode_raw(mode: CacheMode) -> u8 {
    match mode {
        CacheMode::All => 0,
        CacheMode::Metadata => 1,
        CacheMode::None => 2,
    }
}

/// Bits of the secondary (cache-device) mode in the packed policy; the primary's are below.
const SECONDARY_SHIFT: u32 = 2;

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
        block_pointer_count: 3,
        block_pointers: [BlockPointer::HOLE; 3],
        bonus: Vec::new(),
    }
}

/// An object set's space: `ObjectSet::space_estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjsetSpace {
    /// Bytes allocated (all copies) as of the last published txg.
    pub used_bytes: u64,
    /// Estimated growth from the txgs not yet published.
    pub unsynced_bytes: u64,
    /// Txgs with changes not yet published.
    pub unsynced_txgs: u64,
}

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

impl ObjectSet {
    /// A new, empty object set (nothing on disk until the first sync).
    pub fn create(io: Arc<CachedIo>, objset_type: ObjsetType, checksum: ChecksumAlgorithm) -> Self {
        ObjectSet {
            cache_mode: AtomicU8::new(0),
            streams: stream_detector(&io),
            patch_counters: Default::default(),
            io,
            objset_type,
            checksum: Mutex::new(checksum),
            compression: Mutex::new(Compression::Off),
            state: Mutex::new(State {
                root_bp: BlockPointer::HOLE,
                meta_dnode: empty_meta_dnode(),
                dnodes: Memo::new(),
                blocks: Memo::new(),
                retired: Vec::new(),
                changes: BTreeMap::new(),
                last_synced_txg: 0,
                prev_snap_txg: 0,
                used_bytes: 0,
                space_tracked: true,
                intent_log_header: [0; INTENT_LOG_HEADER_SIZE],
            }),
        }
    }

    /// Opens the object set rooted at `root_bp` (read and verified now), which takes
    /// `used_bytes` on disk (`None`: unknown, see `State::space_tracked`).
    pub fn open(
        io: Arc<CachedIo>,
        root_bp: BlockPointer,
        checksum: ChecksumAlgorithm,
        synced_txg: u64,
        used_bytes: Option<u64>,
    ) -> Result<Self, ObjectError> {
        let phys = read_objset_phys(io.io(), &root_bp)?;
        check_dnode(&phys.meta_dnode, None, synced_txg)?;
        Ok(ObjectSet {
            cache_mode: AtomicU8::new(0),
            streams: stream_detector(&io),
            patch_counters: Default::default(),
            io,
            objset_type: phys.objset_type,
            checksum: Mutex::new(checksum),
            compression: Mutex::new(Compression::Off),
            state: Mutex::new(State {
                root_bp,
                meta_dnode: if phys.meta_dnode.is_free() {
                    empty_meta_dnode()
                } else {
                    phys.meta_dnode
                },
                dnodes: Memo::new(),
                blocks: Memo::new(),
                retired: Vec::new(),
                changes: BTreeMap::new(),
                last_synced_txg: synced_txg,
                prev_snap_txg: 0,
                used_bytes: used_bytes.unwrap_or(0),
                space_tracked: used_bytes.is_some(),
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

    /// Compression tried on data blocks written from the next txg sync on (metadata is not
    /// compressed yet). Blocks already written keep theirs.
    pub fn set_compression(&self, compression: Compression) {
        *self.compression.lock() = compression;
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

    /// What reads of this object set leave in the RAM cache (`primarycache`).
    pub fn set_cache_mode(&self, mode: CacheMode) {
        let _ = self
            .cache_mode
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |raw| {
                Some((raw & !0b11) | cache_mode_raw(mode))
            });
    }

    /// What reads of this object set may leave on the pool's cache devices (`secondarycache`).
    pub fn set_secondary_cache_mode(&self, mode: CacheMode) {
        let _ = self
            .cache_mode
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |raw| {
                Some((raw & 0b11) | cache_mode_raw(mode) << SECONDARY_SHIFT)
            });
    }

    /// Both tiers' settings.
    pub fn cache_mode(&self) -> CachePolicy {
        let raw = self.cache_mode.load(Ordering::Relaxed);
        CachePolicy {
            primary: cache_mode_from_raw(raw),
            secondary: cache_mode_from_raw(raw >> SECONDARY_SHIFT),
        }
    }

    pub(crate) fn reader(&self) -> TreeReader<'_> {
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
        self.state.lock().changes_of(txg).intent_log_header = Some(header);
    }

    /// Sets the txg of the dataset's newest snapshot: from the next sync on, blocks born at or
    /// before it are kept as dead (`SyncedObjset::dead_blocks`) instead of freed when the head
    /// stops referencing them. A snapshot is of a synced state, so `txg` is one.
    pub fn set_prev_snap_txg(&self, txg: u64) {
        let mut state = self.state.lock();
        assert!(
            txg <= state.last_synced_txg,
            "a snapshot at txg {txg}, which has not synced (last synced {})",
            state.last_synced_txg
        );
        state.prev_snap_txg = txg;
    }

    /// An object number above every object that exists or is pending: the meta-dnode's
    /// dnode blocks as synced, and every dnode changed since. A new object may take any
    /// number from here up.
    pub fn object_id_bound(&self) -> u64 {
        let state = self.state.lock();
        let synced = if state.meta_dnode.is_free() || state.root_bp.is_hole() {
            0
        } else {
            (state.meta_dnode.max_block_id + 1) * cairn_format::dnode::DNODES_PER_BLOCK
        };
        let pending = state
            .changes
            .values()
            .filter_map(|changes| changes.dnodes.keys().next_back())
            .max()
            .map_or(0, |object| object + 1);
        synced.max(pending)
    }

    /// What the object set takes on disk as of its last published txg, and an estimate of
    /// what its unsynced txgs will add (for quotas): blocks newly given data (all copies, in
    /// whole sectors), the indirect blocks they create, every changed dnode (two copies) and
    /// the dnode array's new indirect blocks. Overwrites
    /// count as growth and frees as nothing, so the estimate errs high until the txgs sync
    /// (low only for the indirect blocks of sparse files). Both figures are taken under one
    /// lock: a txg leaves the estimate in the same step its bytes join `used_bytes`
    /// (`publish`).
    pub fn space_estimate(&self) -> ObjsetSpace {
        let state = self.state.lock();
        let dnode_bytes = 2 * cairn_format::dnode::DNODE_SIZE as u64;
        let mut unsynced_bytes: u64 = state
            .changes
            .values()
            .map(|changes| changes.new_data_bytes + changes.dnodes.len() as u64 * dnode_bytes)
            .sum();
        // The dnode array's own indirect blocks, for its highest changed dnode block.
        let highest = state
            .changes
            .values()
            .filter_map(|changes| changes.dnodes.keys().next_back())
            .max();
        if let Some(object) = highest {
            let meta = &state.meta_dnode;
            let synced = (!meta.is_free() && !state.root_bp.is_hole())
                .then_some((u32::from(meta.levels), meta.max_block_id));
            unsynced_bytes += crate::change::indirect_growth(
                meta,
                &[synced],
                synced.map(|(_, max)| max),
                object / cairn_format::dnode::DNODES_PER_BLOCK,
                |_, _| false,
            );
        }
        ObjsetSpace {
            used_bytes: state.used_bytes,
            unsynced_bytes,
            unsynced_txgs: state.changes.len() as u64,
        }
    }

    /// The allocation unit of data blocks: the largest sector of the pool's data vdevs.
    pub(crate) fn sector_bytes(&self) -> u64 {
        self.io
            .io()
            .tree()
            .tops
            .iter()
            .filter(|top| top.config.role != cairn_format::VdevRole::Log)
            .map(|top| 1u64 << top.config.ashift)
            .max()
            .unwrap_or(u64::from(cairn_format::BLOCK_SIZE_GRANULE))
    }

    /// True when `txg` has changes waiting to be synced.
    pub fn is_dirty(&self, txg: u64) -> bool {
        self.state.lock().changes.contains_key(&txg)
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
}
