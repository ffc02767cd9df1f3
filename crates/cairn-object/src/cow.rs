//! Copy-on-write rewriting of one block tree for a txg: every block on the path from a changed
//! level-0 block to the dnode is written anew and the old one killed in the txg; a tree grows a
//! level when a block beyond its capacity is written.
//!
//! Killing a block follows the birth-txg rule (`TreeWriter::kill`): a block born after the
//! dataset's newest snapshot (`prev_snap_txg`) is referenced by nothing else and is freed; one
//! born at or before it is still the snapshot's, so it is kept and handed back as dead
//! (`SyncedObjset::dead_blocks`) for the dataset's deadlist. With no snapshot (0) every block is
//! born after it and everything is freed, as before snapshots existed.

use crate::{BlockChange, ObjectError, tree};
use bytes::Bytes;
use cairn_arc::{CachePolicy, CachedIo};
use cairn_device::queue::IoClass;
use cairn_format::{BlockPointer, ChecksumAlgorithm, Compression, Dnode, ObjectType};
use cairn_pipeline::WriteBatch;
use std::collections::BTreeMap;

/// True when every byte of `data` is zero (such a level-0 block is stored as a hole).
pub fn is_all_zero(data: &[u8]) -> bool {
    let mut chunks = data.chunks_exact(16);
    chunks
        .by_ref()
        .all(|chunk| u128::from_ne_bytes(chunk.try_into().expect("chunk of 16")) == 0)
        && chunks.remainder().iter().all(|&byte| byte == 0)
}

/// Rewrites trees copy-on-write for one txg.
pub(crate) struct TreeWriter<'a, 'b> {
    pub(crate) io: &'a CachedIo,
    pub(crate) mode: CachePolicy,
    pub(crate) batch: &'a mut WriteBatch<'b>,
    pub(crate) txg: u64,
    pub(crate) checksum: ChecksumAlgorithm,
    /// Tried on level-0 file and volume data blocks (`data_compression`).
    pub(crate) compression: Compression,
    /// The txg of the dataset's newest snapshot (0: none): see the module doc.
    pub(crate) prev_snap_txg: u64,
    /// Blocks this sync stopped referencing that a snapshot still references.
    pub(crate) dead: Vec<BlockPointer>,
}

/// The compression a level-0 block of `data_type` is written with: file and volume contents
/// take the dataset's; metadata (dnodes, directories, xattrs) is written as it is for now.
pub(crate) fn data_compression(data_type: ObjectType, dataset: Compression) -> Compression {
    match data_type {
        ObjectType::FileData | ObjectType::VolumeData => dataset,
        _ => Compression::Off,
    }
}

/// A tree node during rewrite: on disk, or built in memory this txg (tree growth).
enum Node {
    Disk(BlockPointer),
    Memory(Vec<Node>),
}

impl TreeWriter<'_, '_> {
    pub(crate) fn write_meta(
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
                // Indirect blocks are mostly empty pointers: lz4 stores a sparse one in a
                // sector or two instead of 16 or 128 KiB (twice). What made it urgent: every
                // snapshot keeps the indirect blocks of the paths the head rewrote since, and
                // uncompressed they pinned ~0.5 MiB per snapshot of a volume written 4 KiB at
                // a time. Level-0 metadata (dnode blocks, the root) stays as it was: the
                // space estimates count it whole, and it is small.
                compression: if level > 0 {
                    Compression::Lz4
                } else {
                    Compression::Off
                },
            },
        )?;
        // The next txg reads it back to rewrite it: keep it cached.
        self.io.insert_written(&bp, &data, self.mode.primary);
        Ok(bp)
    }

    /// Stops referencing `bp` in this txg: freed if no snapshot references it (born after the
    /// newest one), else kept as dead (the birth-txg rule, module doc).
    pub(crate) fn kill(&mut self, bp: &BlockPointer) {
        if bp.is_hole() {
            return;
        }
        // Nothing this txg writes can be in a snapshot: they are taken of synced txgs.
        debug_assert!(self.prev_snap_txg < self.txg);
        if bp.birth_txg > self.prev_snap_txg {
            self.io.free_block(bp, self.txg);
        } else {
            self.dead.push(*bp);
        }
    }

    pub(crate) fn free_subtrees(&mut self, dnode: &Dnode) -> Result<(), ObjectError> {
        let mut all = Vec::new();
        for bp in &dnode.block_pointers {
            tree::collect_tree(self.io.io(), bp, &mut all)?;
        }
        for bp in all {
            self.kill(&bp);
        }
        Ok(())
    }

    /// Applies level-0 updates (sorted by blkid) to `dnode`'s tree, growing it if needed.
    pub(crate) fn apply(
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
        let top_span = dnode.top_span();
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
                self.kill(&old);
            }
            assert!(
                change.patch.is_none(),
                "a partial write reached the tree unmerged"
            );
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
                            compression: data_compression(data_type, self.compression),
                        },
                    )?;
                    if data_type.is_metadata(0) || change.cache_written {
                        // Dnode blocks: read back by the next txg that changes a dnode; blocks
                        // partial writes changed: merged with by the next one.
                        self.io.insert_written(&bp, &data, self.mode.primary);
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
                self.kill(&bp);
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
