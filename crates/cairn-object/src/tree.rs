//! Walking block trees: decoding indirect blocks, reading an object set's root and the path
//! down a dnode's indirect blocks to one block pointer (`tree_block_pointer`, through a
//! `TreeReader`), visiting every block pointer of an object set (scrub, the offline checker,
//! destroy), and collecting subtrees to free. Every pointer taken from disk on the way down to
//! one block is checked (`check`) before it is followed.
//!
//! The walk is depth-first in block-id order and reads each metadata block once, through the
//! visitor, so the visitor decides how blocks are fetched (one verified copy for `check`, every
//! copy for scrub) and what an unreadable block means (skip the subtree and report it).

use crate::ObjectError;
use crate::check::check_child;
use bytes::Bytes;
use cairn_arc::{CachePolicy, CachedIo};
use cairn_device::queue::IoClass;
use cairn_format::blkptr::BLOCK_POINTER_SIZE;
use cairn_format::dnode::{DNODE_SIZE, DNODES_PER_BLOCK};
use cairn_format::{BlockPointer, Dnode, ObjectType, ObjsetPhys};
use cairn_pipeline::BlockIo;

/// Decodes pointer `index` of an indirect block.
pub(crate) fn child_pointer(block: &[u8], index: usize) -> Result<BlockPointer, ObjectError> {
    let start = index * BLOCK_POINTER_SIZE;
    let raw = block
        .get(start..start + BLOCK_POINTER_SIZE)
        .ok_or_else(|| {
            ObjectError::Corrupt(format!("indirect block too short for entry {index}"))
        })?;
    BlockPointer::decode(raw)
        .map_err(|err| ObjectError::Corrupt(format!("indirect entry {index}: {err}")))
}

/// Where a visited block sits.
#[derive(Debug, Clone, Copy)]
pub struct VisitedBlock {
    pub bp: BlockPointer,
    /// Object number (0 = the meta-dnode, or the root block itself).
    pub object: u64,
    pub level: u8,
    /// First level-0 block id this pointer covers.
    pub blkid: u64,
    /// Level-0 block size of the object (0 for the object-set root).
    pub data_block_size: u32,
}

pub trait TreeVisitor {
    /// Called once per non-hole pointer. When `need_data` is true the walk wants the block's
    /// verified contents to descend; return `None` to skip the subtree (for example because
    /// no copy could be read — the visitor records that).
    fn visit(&mut self, block: &VisitedBlock, need_data: bool) -> Option<Bytes>;
}

/// Visits every block of the object set rooted at `root_bp`, root included.
pub fn walk_objset(root_bp: &BlockPointer, visitor: &mut dyn TreeVisitor) {
    if root_bp.is_hole() {
        return;
    }
    let root = VisitedBlock {
        bp: *root_bp,
        object: 0,
        level: 0,
        blkid: 0,
        data_block_size: 0,
    };
    let Some(data) = visitor.visit(&root, true) else {
        return;
    };
    let Ok(phys) = ObjsetPhys::decode(&data) else {
        return;
    };
    walk_dnode(&phys.meta_dnode, 0, visitor);
}

/// Visits the blocks of the object set rooted at `root_bp` born after txg `min_birth_txg`,
/// skipping every subtree whose root is older: copy-on-write never makes a block younger than
/// its children, so those subtrees hold nothing newer. Walking a dataset's snapshots oldest
/// first, each from its predecessor's txg, then its head from the newest snapshot's, visits
/// every block of them all exactly once (a block a snapshot references and was born by its
/// predecessor's txg was alive then, so the predecessor references it too).
pub fn walk_objset_born_after(
    root_bp: &BlockPointer,
    min_birth_txg: u64,
    visitor: &mut dyn TreeVisitor,
) {
    struct BornAfter<'a> {
        min_birth_txg: u64,
        inner: &'a mut dyn TreeVisitor,
    }
    impl TreeVisitor for BornAfter<'_> {
        fn visit(&mut self, block: &VisitedBlock, need_data: bool) -> Option<Bytes> {
            if block.bp.birth_txg <= self.min_birth_txg {
                return None;
            }
            self.inner.visit(block, need_data)
        }
    }
    walk_objset(
        root_bp,
        &mut BornAfter {
            min_birth_txg,
            inner: visitor,
        },
    );
}

fn walk_dnode(dnode: &Dnode, object: u64, visitor: &mut dyn TreeVisitor) {
    if dnode.is_free() {
        return;
    }
    let top_span = dnode.top_span();
    for (index, bp) in dnode.block_pointers.iter().enumerate() {
        walk_bp(
            dnode,
            object,
            bp,
            index as u64 * top_span,
            top_span,
            visitor,
        );
    }
}

fn walk_bp(
    dnode: &Dnode,
    object: u64,
    bp: &BlockPointer,
    blkid: u64,
    span: u64,
    visitor: &mut dyn TreeVisitor,
) {
    if bp.is_hole() {
        return;
    }
    let is_dnode_block = bp.level == 0 && bp.object_type == ObjectType::DnodeBlock;
    let block = VisitedBlock {
        bp: *bp,
        object,
        level: bp.level,
        blkid,
        data_block_size: dnode.data_block_size,
    };
    let Some(data) = visitor.visit(&block, bp.level > 0 || is_dnode_block) else {
        return;
    };
    if bp.level > 0 {
        let per = dnode.pointers_per_indirect();
        let child_span = (span / per).max(1);
        for index in 0..per as usize {
            let Ok(child) = child_pointer(&data, index) else {
                return;
            };
            // A child that is not one level down is not followed: it bounds the walk's depth
            // by the root's level whatever a crafted block says (reads report it).
            if !child.is_hole() && u16::from(child.level) + 1 != u16::from(bp.level) {
                continue;
            }
            walk_bp(
                dnode,
                object,
                &child,
                blkid + index as u64 * child_span,
                child_span,
                visitor,
            );
        }
    } else if is_dnode_block {
        for (slot, raw) in data.chunks_exact(DNODE_SIZE).enumerate() {
            if let Ok(child) = Dnode::decode(raw)
                && !child.is_free()
            {
                walk_dnode(&child, blkid * DNODES_PER_BLOCK + slot as u64, visitor);
            }
        }
    }
}

/// Collects `bp` and every pointer beneath it (indirect children; for dnode blocks, the trees
/// of their dnodes), reading with verification.
pub(crate) fn collect_tree(
    io: &BlockIo,
    bp: &BlockPointer,
    out: &mut Vec<BlockPointer>,
) -> Result<(), ObjectError> {
    if bp.is_hole() {
        return Ok(());
    }
    out.push(*bp);
    if bp.level > 0 {
        let data = io.read_block(bp, IoClass::SyncRead)?;
        for index in 0..data.len() / BLOCK_POINTER_SIZE {
            collect_tree(io, &child_pointer(&data, index)?, out)?;
        }
    } else if bp.object_type == ObjectType::DnodeBlock {
        let data = io.read_block(bp, IoClass::SyncRead)?;
        for raw in data.chunks_exact(DNODE_SIZE) {
            let dnode = Dnode::decode(raw).map_err(|err| ObjectError::Corrupt(err.to_string()))?;
            for child in &dnode.block_pointers {
                collect_tree(io, child, out)?;
            }
        }
    }
    Ok(())
}

/// Every block of an object set, root included.
pub(crate) fn collect_blocks(
    io: &BlockIo,
    root_bp: &BlockPointer,
    out: &mut Vec<BlockPointer>,
) -> Result<(), ObjectError> {
    let phys = read_objset_phys(io, root_bp)?;
    out.push(*root_bp);
    for bp in &phys.meta_dnode.block_pointers {
        collect_tree(io, bp, out)?;
    }
    Ok(())
}

/// The object set's root block, checked to be one.
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

/// Looks up a level-0 block through the dnode's tree.
pub(crate) fn read_tree_block(
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
pub(crate) fn tree_block_pointer(
    io: &TreeReader<'_>,
    dnode: &Dnode,
    blkid: u64,
) -> Result<Option<BlockPointer>, ObjectError> {
    if dnode.is_free() || blkid >= dnode.capacity_blocks(dnode.levels) {
        return Ok(None);
    }
    let per = dnode.pointers_per_indirect();
    let top_span = dnode.top_span();
    let mut bp = dnode.block_pointers[(blkid / top_span) as usize];
    let mut span = top_span;
    let mut within = blkid % top_span;
    while !bp.is_hole() && bp.level > 0 {
        let block = io.read(&bp)?;
        span /= per;
        let index = (within / span) as usize;
        within %= span;
        let child = child_pointer(&block, index)?;
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

/// Reads tree blocks through the caches under one `primarycache`/`secondarycache` setting.
pub(crate) struct TreeReader<'a> {
    pub(crate) io: &'a CachedIo,
    pub(crate) mode: CachePolicy,
    /// Only what is cached: `NotCached` rather than a device read.
    pub(crate) cached_only: bool,
}

impl TreeReader<'_> {
    pub(crate) fn read(&self, bp: &BlockPointer) -> Result<Bytes, ObjectError> {
        if self.cached_only {
            return self.io.read_cached(bp).ok_or(ObjectError::NotCached);
        }
        Ok(self.io.read_block(bp, self.mode)?)
    }
}
