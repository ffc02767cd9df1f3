//! Open-context changes: creating, freeing and writing objects and blocks under a txg hold.
//! Nothing here writes to disk except `write_blocks_in_place` (a synchronous write placed
//! durably ahead of its txg); everything else only lands in the txg's change set, which the
//! sync later writes copy-on-write, or in the allocator's frees of the txg (`free_all` reads
//! the whole tree to find what to free).

use crate::read::blob_len;
use crate::{BlockChange, ObjectError, ObjectSet, is_all_zero, tree};
use bytes::Bytes;
use cairn_device::queue::IoClass;
use cairn_format::dnode::{DNODE_BLOCK_POINTERS, DNODE_BLOCK_SIZE};
use cairn_format::{BlockPointer, Dnode, ObjectType};

/// Indirect blocks of 16 KiB (128 pointers) for filesystems' objects: files, and the hashed
/// maps of directories and extended attributes. Blocks are written uncompressed and twice,
/// so a 128 KiB indirect block cost every file past its first two records 256 KiB (a 300 KB
/// file took 640 KiB, measured), where 16 KiB costs 32 KiB; a large map's table sits at block
/// 2^24, and 16 KiB keeps the path there to four levels. Past that first block the share is
/// the same (two pointer bytes per 1,024 data bytes at 128K records, or 128 per 8 KiB at 8K),
/// and a txg that changes a few records of a large file rewrites 16 KiB indirect blocks, not
/// 128 KiB ones; what it costs is a level more over very large files (four levels reach
/// 512 GiB of 128K records). Volumes keep 128 KiB (fewer levels over devices of terabytes).
fn indirect_shift_for(object_type: ObjectType) -> u8 {
    match object_type {
        // The pool's snapshot records and deadlists are many small objects too: a 128 KiB
        // indirect block each (two copies, uncompressed) would dwarf what they hold. The
        // dataset directory's map: a txg that changes one record of 1,000 rewrites one leaf
        // and the 16 KiB indirect block above it, not 128 KiB.
        ObjectType::FileData
        | ObjectType::DatasetDirectory
        | ObjectType::Directory
        | ObjectType::Xattrs
        | ObjectType::DeadList
        | ObjectType::SnapshotTable
        | ObjectType::SnapshotRecord => FS_INDIRECT_SHIFT,
        _ => cairn_format::dnode::INDIRECT_SHIFT_DEFAULT,
    }
}

/// log2 of the indirect block size of filesystems' objects (`indirect_shift_for`).
const FS_INDIRECT_SHIFT: u8 = 14;

/// An estimate of the indirect blocks (two copies each) that giving block `blkid` of `object`
/// data in `txg` creates, for `ObjectSet::space_estimate`: see `indirect_growth`.
fn new_indirect_bytes(state: &crate::State, txg: u64, object: u64, blkid: u64) -> u64 {
    let current = state
        .changes
        .range(..=txg)
        .rev()
        .find_map(|(_, changes)| changes.dnodes.get(&object))
        .or_else(|| state.dnodes.peek(object));
    let Some(dnode) = current else {
        return 0;
    };
    let synced = state.dnodes.peek(object).filter(|synced| {
        !synced.is_free()
            && synced.used_bytes > 0
            && synced.birth_txg == dnode.birth_txg
            && synced.data_block_size == dnode.data_block_size
    });
    let dirty = state.changes.get(&txg).map(|changes| &changes.blocks);
    let dirty_max = dirty.and_then(|blocks| {
        blocks
            .range((object, 0)..=(object, u64::MAX))
            .next_back()
            .map(|(&(_, block), _)| block)
    });
    let held = [
        synced.map(|synced| (u32::from(synced.levels), synced.max_block_id)),
        dirty_max.map(|block| (1, block)),
    ];
    let shared = |start: u64, span: u64| {
        dirty.is_some_and(|blocks| {
            blocks
                .range((object, start)..(object, start.saturating_add(span)))
                .next()
                .is_some()
        })
    };
    indirect_growth(
        dnode,
        &held,
        synced.map(|synced| synced.max_block_id),
        blkid,
        shared,
    )
}

/// The indirect blocks (two copies each, in bytes) that block `blkid` of a tree shaped by
/// `dnode` adds, when the tree already holds `held` (levels and highest block, of the synced
/// tree and of blocks changed before in the same txg), its synced blocks reach
/// `existing_max` (taken as dense) and `shared(start, span)` says whether a block changed
/// before in the same txg lies in a span (and so paid for its indirect block). On `blkid`'s
/// path each level whose span is new is charged; a level the tree did not have is charged
/// twice when it also becomes the parent of what the tree held (block 0's path). Sparse
/// trees are under-counted.
pub(crate) fn indirect_growth(
    dnode: &Dnode,
    held: &[Option<(u32, u64)>],
    existing_max: Option<u64>,
    blkid: u64,
    shared: impl Fn(u64, u64) -> bool,
) -> u64 {
    let per = dnode.pointers_per_indirect().max(2);
    let direct = u64::from(dnode.block_pointer_count.max(1));
    let indirect_bytes = 2 * (1u64 << dnode.indirect_shift);
    // Tree levels a block needs: 1 while the dnode's pointers reach it.
    let levels_for = |block: u64| -> u32 {
        let (mut capacity, mut levels) = (direct, 1);
        while block >= capacity && capacity != u64::MAX {
            capacity = capacity.saturating_mul(per);
            levels += 1;
        }
        levels
    };
    let old_levels = held
        .iter()
        .flatten()
        .map(|&(levels, max)| levels.max(levels_for(max)))
        .max();
    let new_levels = levels_for(blkid).max(old_levels.unwrap_or(1));
    let mut total = 0;
    let mut span = 1u64;
    for level in 1..new_levels {
        span = span.saturating_mul(per);
        let start = blkid / span * span;
        if old_levels.is_none_or(|old| level >= old) {
            // A level the tree did not have: `blkid`'s indirect block is new, and so is the
            // one above what the tree held (block 0's path) unless it is the same.
            total += indirect_bytes;
            if old_levels.is_some() && start != 0 {
                total += indirect_bytes;
            }
            continue;
        }
        if existing_max.is_none_or(|max| start > max) && !shared(start, span) {
            total += indirect_bytes;
        }
    }
    total
}

impl ObjectSet {
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
        dnode.indirect_shift = indirect_shift_for(object_type);
        dnode.data_block_size = data_block_size;
        dnode.birth_txg = txg;
        dnode.levels = 1;
        while dnode.capacity_blocks(dnode.levels) < capacity_blocks.max(1) {
            dnode.levels += 1;
        }
        let mut state = self.state.lock();
        state.changes_of(txg).dnodes.insert(object, dnode);
    }

    /// Creates `object` with a bonus (a file's attributes), in `txg`. A bonus larger than
    /// `DNODE_BONUS_SIZE` takes the room of one or two top-level block pointers (the tree then
    /// grows from fewer pointers, a level sooner).
    pub fn create_object_with_bonus(
        &self,
        txg: u64,
        object: u64,
        object_type: ObjectType,
        data_block_size: u32,
        bonus: Vec<u8>,
    ) -> Result<(), ObjectError> {
        assert!(object > 0, "object 0 is the meta-dnode");
        let mut dnode = Dnode::free();
        dnode.object_type = object_type;
        dnode.indirect_shift = indirect_shift_for(object_type);
        dnode.data_block_size = data_block_size;
        dnode.birth_txg = txg;
        dnode.levels = 1;
        // As many top-level pointers as leave room for the bonus: a file's or directory's
        // attributes (120 bytes) leave two, so its first two blocks need no indirect block
        // (an empty directory is its map's header and first leaf, blocks 0 and 1).
        dnode.block_pointer_count = (1..=DNODE_BLOCK_POINTERS as u8)
            .rev()
            .find(|&count| Dnode::bonus_capacity_for(count) >= bonus.len())
            .unwrap_or(1);
        if bonus.len() > dnode.bonus_capacity() {
            return Err(ObjectError::Refused {
                object,
                what: format!("a bonus of {} bytes does not fit a dnode", bonus.len()),
            });
        }
        dnode.bonus = bonus;
        let mut state = self.state.lock();
        let changes = state.changes_of(txg);
        changes.dnodes.insert(object, dnode);
        Ok(())
    }

    /// Replaces `object`'s bonus in `txg` (its tree is left as it is).
    pub fn set_bonus(&self, txg: u64, object: u64, bonus: Vec<u8>) -> Result<(), ObjectError> {
        self.change_dnode(txg, object, |dnode| {
            if bonus.len() > dnode.bonus_capacity() {
                return Err(format!(
                    "a bonus of {} bytes does not fit its dnode ({} bytes)",
                    bonus.len(),
                    dnode.bonus_capacity()
                ));
            }
            dnode.bonus = bonus;
            Ok(())
        })
    }

    /// Changes the block size of an object that holds at most its block 0, in `txg` (a small
    /// file growing, as a file's single block is sized to its contents). Block 0 of the old
    /// size is dropped from the tree: the caller writes block 0 at the new size in `txg`, or
    /// it reads as a hole. The txg sync replaces the object's tree as a whole.
    pub fn set_block_size(
        &self,
        txg: u64,
        object: u64,
        data_block_size: u32,
    ) -> Result<(), ObjectError> {
        self.change_dnode(txg, object, |dnode| {
            if dnode.max_block_id > 0 {
                return Err(format!(
                    "holds blocks past block 0 (up to {}): its block size stays {}",
                    dnode.max_block_id, dnode.data_block_size
                ));
            }
            if dnode.data_block_size != data_block_size {
                dnode.data_block_size = data_block_size;
                dnode.levels = 1;
                dnode.block_pointers =
                    [BlockPointer::HOLE; cairn_format::dnode::DNODE_BLOCK_POINTERS];
                dnode.used_bytes = 0;
            }
            Ok(())
        })?;
        // Pending versions of block 0 in `txg` at the old size cannot be written any more.
        let stale = {
            let mut state = self.state.lock();
            let changes = state.changes_of(txg);
            match changes.blocks.get(&(object, 0)) {
                Some(change)
                    if change
                        .data
                        .as_ref()
                        .map(|data| data.len())
                        .or(change.patch.as_ref().map(|patch| patch.block_bytes()))
                        .is_some_and(|len| len != data_block_size as usize) =>
                {
                    changes.blocks.remove(&(object, 0))
                }
                _ => None,
            }
        };
        if let Some(bp) = stale.and_then(|change| change.written) {
            self.io.free_block(&bp, txg);
        }
        Ok(())
    }

    /// The newest version of `object`'s dnode, changed by `change` and recorded in `txg`.
    fn change_dnode(
        &self,
        txg: u64,
        object: u64,
        change: impl FnOnce(&mut Dnode) -> Result<(), String>,
    ) -> Result<(), ObjectError> {
        let mut dnode = self.dnode(object)?;
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        change(&mut dnode).map_err(|what| ObjectError::Refused { object, what })?;
        let mut state = self.state.lock();
        state.changes_of(txg).dnodes.insert(object, dnode);
        Ok(())
    }

    /// Turns every block of `object` from `first` on into a hole, in `txg` (a file truncated).
    /// Looks only at blocks that hold data, so a huge sparse object costs what it holds.
    pub fn free_blocks_from(&self, txg: u64, object: u64, first: u64) -> Result<(), ObjectError> {
        const CHUNK_BLOCKS: u64 = 1 << 16;
        let dnode = self.dnode(object)?;
        if dnode.is_free() {
            return Err(ObjectError::NoSuchObject(object));
        }
        let pending: Vec<u64> = {
            let state = self.state.lock();
            let mut blkids: Vec<u64> = state
                .changes
                .values()
                .flat_map(|changes| {
                    changes
                        .blocks
                        .range((object, first)..=(object, u64::MAX))
                        .map(|(&(_, blkid), _)| blkid)
                })
                .collect();
            blkids.sort_unstable();
            blkids.dedup();
            blkids
        };
        let synced_end = {
            let mut state = self.state.lock();
            let synced = self.synced_dnode(&mut state, object)?;
            if synced.is_free() {
                0
            } else {
                synced.max_block_id + 1
            }
        };
        let mut start = first;
        while start < synced_end {
            let count = (synced_end - start).min(CHUNK_BLOCKS);
            for (index, has_data) in self
                .block_map(object, start, count)?
                .into_iter()
                .enumerate()
            {
                if has_data {
                    self.free_block(txg, object, start + index as u64);
                }
            }
            start += count;
        }
        for blkid in pending {
            self.free_block(txg, object, blkid);
        }
        Ok(())
    }

    /// Frees object `object` and every block beneath it, in `txg`.
    pub fn free_object(&self, txg: u64, object: u64) {
        let mut dropped = Vec::new();
        {
            let mut state = self.state.lock();
            let changes = state.changes_of(txg);
            changes.blocks.retain(|(obj, _), change| {
                if *obj == object {
                    dropped.extend(change.written);
                }
                *obj != object
            });
            changes.dnodes.insert(object, Dnode::free());
        }
        for bp in dropped {
            self.io.free_block(&bp, txg);
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
            compression: crate::cow::data_compression(object_type, *self.compression.lock()),
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
                self.io.free_block(bp, txg);
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
                    ..BlockChange::default()
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
    pub(crate) fn record_block(
        &self,
        txg: u64,
        object: u64,
        blkid: u64,
        change: BlockChange,
    ) -> bool {
        let replaced = {
            let mut state = self.state.lock();
            let data_bytes = change.data.as_ref().map_or(0, |data| data.len() as u64);
            let new_bytes = self.new_block_bytes(&state, txg, object, blkid, data_bytes);
            let changes = state.changes_of(txg);
            let replaced = changes.blocks.insert((object, blkid), change);
            if replaced.is_none() {
                changes.new_data_bytes += new_bytes;
            }
            replaced
        };
        if let Some(bp) = replaced.as_ref().and_then(|old| old.written) {
            self.io.free_block(&bp, txg);
        }
        replaced.is_none()
    }

    /// What a block of `data_bytes` newly given data in `txg` will take on disk, for
    /// `space_estimate`: whole sectors per copy, and the indirect blocks it creates.
    pub(crate) fn new_block_bytes(
        &self,
        state: &crate::State,
        txg: u64,
        object: u64,
        blkid: u64,
        data_bytes: u64,
    ) -> u64 {
        if data_bytes == 0 {
            return 0;
        }
        // Metadata (directories, xattr maps) is written twice; the type is known when the
        // dnode is loaded or changed (else: counted once).
        let copies = state
            .changes
            .get(&txg)
            .and_then(|changes| changes.dnodes.get(&object))
            .or_else(|| state.dnodes.peek(object))
            .map_or(1, |dnode| {
                if dnode.object_type.is_metadata(0) {
                    2
                } else {
                    1
                }
            });
        data_bytes.next_multiple_of(self.sector_bytes()) * copies
            + new_indirect_bytes(state, txg, object, blkid)
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
            self.io.free_block(&bp, txg);
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
        let changes = state.changes_of(txg);
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
}
