//! The txg sync of one object set: gather the txg's changes, rewrite the affected trees
//! copy-on-write (`cow`), write the dnode blocks and a new root, and hand back a
//! `SyncedObjset` that `publish` makes current once the pool has committed the txg.

use crate::cow::TreeWriter;
use crate::memo::{block_memo_bytes, dnode_memo_bytes, memoised, unlock_dropping_retired};
use crate::tree::read_tree_block;
use crate::{
    BlockChange, MEMO_META_OBJECT, MemoBlock, ObjectError, ObjectSet, Retired, SyncedObjset,
    is_all_zero,
};
use bytes::Bytes;
use cairn_arc::CacheMode;
use cairn_format::dnode::{DNODE_BLOCK_SIZE, DNODE_SIZE, DNODES_PER_BLOCK};
use cairn_format::intent_log::INTENT_LOG_HEADER_SIZE;
use cairn_format::{BlockPointer, Dnode, ObjectType, ObjsetPhys};
use cairn_pipeline::WriteBatch;
use std::collections::BTreeMap;

/// What a txg's sync starts from, copied out of the object set's state under one lock.
struct SyncStart {
    /// Block changes of the txg, by (object, block id).
    blocks: BTreeMap<(u64, u64), BlockChange>,
    /// Dnode changes of the txg, by object.
    dnodes: BTreeMap<u64, Dnode>,
    meta_dnode: Dnode,
    old_root: BlockPointer,
    used_before: u64,
    space_tracked: bool,
    /// The txg of the dataset's newest snapshot (0: none).
    prev_snap_txg: u64,
    /// The newest intent-log header set up to this txg.
    intent_log_header: [u8; INTENT_LOG_HEADER_SIZE],
}

impl ObjectSet {
    /// returns the new root, to be `publish`ed once the txg is durable.
    pub fn sync(&self, txg: u64, batch: &mut WriteBatch<'_>) -> Result<SyncedObjset, ObjectError> {
        // Partial writes meet their older versions first: the tree below sees whole blocks.
        self.resolve_patches(txg)?;
        let checksum = *self.checksum.lock();
        let compression = *self.compression.lock();
        let start = self.sync_start(txg);
        let mut used = i128::from(start.used_before);
        let mut writer = TreeWriter {
            io: &self.io,
            mode: self.cache_mode(),
            batch,
            txg,
            checksum,
            compression,
            prev_snap_txg: start.prev_snap_txg,
            dead: Vec::new(),
        };
        let objects = self.starting_dnodes(&mut writer, &start, txg)?;
        let new_dnodes = self.rewrite_objects(&mut writer, &start.blocks, objects, &mut used)?;
        let mut meta = start.meta_dnode;
        self.write_dnodes(&mut writer, &mut meta, &new_dnodes, &mut used)?;
        let intent_log_header = start.intent_log_header;
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
        let old_root = start.old_root;
        if !old_root.is_hole() {
            used -= i128::from(old_root.allocated_bytes());
            writer.kill(&old_root);
        }
        used += i128::from(root_bp.allocated_bytes());
        if used < 0 && !start.space_tracked {
            used = 0;
        }
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
            dead_blocks: writer.dead,
        })
    }

    /// The txg's changes and the state they apply to.
    fn sync_start(&self, txg: u64) -> SyncStart {
        let state = self.state.lock();
        assert!(
            txg > state.last_synced_txg,
            "sync of txg {txg} after {}",
            state.last_synced_txg
        );
        let changes = state.changes.get(&txg);
        SyncStart {
            blocks: changes.map(|c| c.blocks.clone()).unwrap_or_default(),
            dnodes: changes.map(|c| c.dnodes.clone()).unwrap_or_default(),
            meta_dnode: state.meta_dnode.clone(),
            old_root: state.root_bp,
            used_before: state.used_bytes,
            space_tracked: state.space_tracked,
            prev_snap_txg: state.prev_snap_txg,
            intent_log_header: state
                .changes
                .range(..=txg)
                .rev()
                .find_map(|(_, c)| c.intent_log_header)
                .unwrap_or(state.intent_log_header),
        }
    }

    /// Objects touched this txg, with the dnode their tree is rewritten from: the new one for
    /// a created, replaced or freed object (whose old tree is freed here), else the last
    /// synced one with the txg's attributes.
    fn starting_dnodes(
        &self,
        writer: &mut TreeWriter<'_, '_>,
        start: &SyncStart,
        txg: u64,
    ) -> Result<BTreeMap<u64, Dnode>, ObjectError> {
        let mut objects: BTreeMap<u64, Dnode> = BTreeMap::new();
        for (&object, change) in &start.dnodes {
            let synced = self.dnode_before(object, txg)?;
            // A block size change (`set_block_size`) replaces the tree like a new object.
            let created_or_freed = change.is_free()
                || change.birth_txg == txg
                || (!synced.is_free() && change.data_block_size != synced.data_block_size);
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
        for &(object, _) in start.blocks.keys() {
            if let std::collections::btree_map::Entry::Vacant(slot) = objects.entry(object) {
                slot.insert(self.dnode_before(object, txg)?);
            }
        }
        Ok(objects)
    }

    /// Applies each object's block changes to its tree, accounting the space it gains or
    /// loses in `used`; returns the objects' new dnodes.
    fn rewrite_objects(
        &self,
        writer: &mut TreeWriter<'_, '_>,
        blocks: &BTreeMap<(u64, u64), BlockChange>,
        objects: BTreeMap<u64, Dnode>,
        used: &mut i128,
    ) -> Result<BTreeMap<u64, Dnode>, ObjectError> {
        let txg = writer.txg;
        let mut new_dnodes = BTreeMap::new();
        for (object, mut dnode) in objects {
            *used -= i128::from(self.dnode_before(object, txg)?.used_bytes);
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
                        writer.kill(bp);
                    }
                }
            }
            *used += i128::from(dnode.used_bytes);
            new_dnodes.insert(object, dnode);
        }
        Ok(new_dnodes)
    }

    /// Writes the changed dnodes into the meta-dnode's blocks, accounting its change of size
    /// in `used`.
    fn write_dnodes(
        &self,
        writer: &mut TreeWriter<'_, '_>,
        meta: &mut Dnode,
        new_dnodes: &BTreeMap<u64, Dnode>,
        used: &mut i128,
    ) -> Result<(), ObjectError> {
        let mut dnode_blocks: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
        for (&object, dnode) in new_dnodes {
            let block_id = object / DNODES_PER_BLOCK;
            let block = match dnode_blocks.entry(block_id) {
                std::collections::btree_map::Entry::Occupied(slot) => slot.into_mut(),
                std::collections::btree_map::Entry::Vacant(slot) => slot.insert(
                    read_tree_block(&self.reader(), meta, block_id)?
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
        *used -= i128::from(meta.used_bytes);
        writer.apply(meta, ObjectType::DnodeBlock, meta_updates)?;
        *used += i128::from(meta.used_bytes);
        Ok(())
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
        let budget = self.memo_generation_bytes_max();
        let mut guard = self.state.lock();
        let state = &mut *guard;
        assert!(synced.txg > state.last_synced_txg);
        state.root_bp = synced.root_bp;
        state.used_bytes = synced.used_bytes;
        state.meta_dnode = synced.meta_dnode;
        // The memo holds the published tree: the blocks this txg changed in hashed maps are
        // replaced by their new versions (the blocks a lookup reads next are the ones just
        // written), or forgotten. Other objects' blocks are never memoised (an object number
        // reused by another type is caught by the birth-txg check), so the walk costs one step
        // per changed object, not per changed block: a volume's txg may hold 100,000 blocks.
        let memo_on = self.cache_mode().primary != CacheMode::None;
        if let Some(changes) = state.changes.get(&synced.txg) {
            for (&object, dnode) in synced.dnodes.iter().filter(|(_, d)| memoised(d)) {
                for (&(_, blkid), change) in changes.blocks.range((object, 0)..=(object, u64::MAX))
                {
                    match &change.data {
                        Some(data) if memo_on && change.patch.is_none() && !is_all_zero(data) => {
                            let memo = MemoBlock {
                                birth_txg: dnode.birth_txg,
                                data_block_size: dnode.data_block_size,
                                data: data.clone(),
                            };
                            let bytes = block_memo_bytes(data);
                            let retired = state.blocks.insert((object, blkid), memo, bytes, budget);
                            state.retired.extend(retired.map(Retired::Blocks));
                        }
                        _ => state.blocks.remove((object, blkid)),
                    }
                }
            }
        }
        // The dnodes themselves go into their own memo below, so rewritten dnode blocks are
        // only forgotten (memoising them too pushed directory blocks out for nothing).
        if state.blocks.len() > 0 {
            for &object in synced.dnodes.keys() {
                state
                    .blocks
                    .remove((MEMO_META_OBJECT, object / DNODES_PER_BLOCK));
            }
        }
        for (object, dnode) in synced.dnodes {
            let bytes = dnode_memo_bytes(&dnode);
            let retired = state.dnodes.insert(object, dnode, bytes, budget);
            state.retired.extend(retired.map(Retired::Dnodes));
        }
        let published_changes = state.changes.remove(&synced.txg);
        state.last_synced_txg = synced.txg;
        state.intent_log_header = synced.intent_log_header;
        unlock_dropping_retired(guard);
        drop(published_changes);
    }

    /// Marks a txg in which this object set had nothing to sync as done.
    pub fn skip_txg(&self, txg: u64) {
        let mut state = self.state.lock();
        assert!(!state.changes.contains_key(&txg), "skipping a dirty txg");
        state.last_synced_txg = state.last_synced_txg.max(txg);
    }
}
