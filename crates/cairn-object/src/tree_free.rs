//! Freeing a dead object set's tree a bounded number of blocks at a time, across txgs and
//! imports: what a dataset destroy and a rollback leave to the background, so a destroy of a
//! large volume never makes one txg run long (OpenZFS's async destroy, its bptree).
//!
//! The tree is dead — no dataset references it any more, so nothing changes it — and is freed
//! in post order: a block goes only after everything beneath it, so every block a later step
//! reads on its way down is still allocated. Where a step stopped is a *path*: the child index
//! taken at each depth from the root (the meta-dnode's pointers under the root, an indirect
//! block's entries, a dnode block's dnodes times `DNODE_BLOCK_POINTERS`), pointing at the next
//! child not yet freed. The caller stores the path with the root; the next step descends along
//! it again (reading the blocks on the way, usually from the cache) and goes on.
//!
//! A block that cannot be read stops the step where it is, with everything freed so far
//! accounted in the path it returns (`TreeStep::error`): nothing is freed twice, and the
//! caller retries later (a device may come back) rather than failing the txg.
//!
//! Only blocks born after `born_after_txg` are freed: a clone's blocks by its origin's txg are
//! its origin's, and a rolled-back head's blocks by its snapshot's txg are the snapshot's.
//! Copy-on-write never makes a block younger than its children, so an older subtree is
//! skipped whole.

use crate::ObjectError;
use crate::tree::child_pointer;
use cairn_device::queue::IoClass;
use cairn_format::blkptr::BLOCK_POINTER_SIZE;
use cairn_format::dnode::{DNODE_BLOCK_POINTERS, DNODE_SIZE};
use cairn_format::{BlockPointer, Dnode, ObjectType, ObjsetPhys};
use cairn_pipeline::BlockIo;

/// Deepest path a tree can have: the root, the meta-dnode's levels, a dnode block, an
/// object's levels. A stored path longer than this is damaged.
pub const TREE_PATH_DEPTH_MAX: usize = 32;

/// A path from the root: the child index taken at each depth.
pub type TreePath = Vec<u32>;

/// What one step did.
#[derive(Debug)]
pub struct TreeStep {
    /// Where to resume; `None` once every block to free, the root last, is freed.
    pub next: Option<TreePath>,
    /// A block that could not be read (or was damaged) stopped the step; `next` resumes at it.
    pub error: Option<ObjectError>,
}

/// Frees, through `free`, at most about `blocks_max` blocks of the dead tree under `root`
/// born after `born_after_txg`, from `path` on (empty: the start).
pub fn free_tree_step(
    io: &BlockIo,
    root: &BlockPointer,
    born_after_txg: u64,
    path: &[u32],
    blocks_max: u64,
    free: &mut dyn FnMut(&BlockPointer),
) -> TreeStep {
    if path.len() > TREE_PATH_DEPTH_MAX {
        return TreeStep {
            next: Some(path.to_vec()),
            error: Some(ObjectError::Corrupt(format!(
                "a tree-free path of {} steps",
                path.len()
            ))),
        };
    }
    let mut freer = Freer {
        io,
        born_after_txg,
        blocks_max: blocks_max.max(1),
        freed: 0,
        free,
        error: None,
    };
    let next = freer.node(root, path, 0);
    TreeStep {
        next,
        error: freer.error,
    }
}

struct Freer<'a> {
    io: &'a BlockIo,
    born_after_txg: u64,
    blocks_max: u64,
    freed: u64,
    free: &'a mut dyn FnMut(&BlockPointer),
    error: Option<ObjectError>,
}

impl Freer<'_> {
    /// Frees what is left of the subtree of `bp` from `resume` on; `Some(path)` (relative to
    /// `bp`) when the budget ran out or a read failed first.
    fn node(&mut self, bp: &BlockPointer, resume: &[u32], depth: usize) -> Option<TreePath> {
        if bp.is_hole() || bp.birth_txg <= self.born_after_txg {
            return None;
        }
        let children = if depth > TREE_PATH_DEPTH_MAX {
            Err(ObjectError::Corrupt(
                "a tree deeper than any cairn writes".into(),
            ))
        } else {
            self.children(bp)
        };
        let children = match children {
            Ok(children) => children,
            Err(err) => {
                self.error = Some(err);
                return Some(resume.to_vec());
            }
        };
        let start = resume.first().map_or(0, |&index| index as usize);
        for (index, child) in children.iter().enumerate().skip(start) {
            let deeper = if index == start && !resume.is_empty() {
                &resume[1..]
            } else {
                &[]
            };
            if let Some(mut path) = self.node(child, deeper, depth + 1) {
                path.insert(0, index as u32);
                return Some(path);
            }
            if self.freed >= self.blocks_max && index + 1 < children.len() {
                return Some(vec![index as u32 + 1]);
            }
        }
        (self.free)(bp);
        self.freed += 1;
        None
    }

    /// The pointers beneath `bp`, in order (holes kept, so indexes stay stable).
    fn children(&self, bp: &BlockPointer) -> Result<Vec<BlockPointer>, ObjectError> {
        if bp.object_type == ObjectType::ObjsetRoot && bp.level == 0 {
            let data = self.io.read_block(bp, IoClass::SyncRead)?;
            let phys = ObjsetPhys::decode(&data)
                .map_err(|err| ObjectError::Corrupt(format!("object set root: {err}")))?;
            return Ok(phys.meta_dnode.block_pointers.to_vec());
        }
        if bp.level > 0 {
            let data = self.io.read_block(bp, IoClass::SyncRead)?;
            return (0..data.len() / BLOCK_POINTER_SIZE)
                .map(|index| child_pointer(&data, index))
                .collect();
        }
        if bp.object_type == ObjectType::DnodeBlock {
            let data = self.io.read_block(bp, IoClass::SyncRead)?;
            let mut out = Vec::with_capacity(data.len() / DNODE_SIZE * DNODE_BLOCK_POINTERS);
            for raw in data.chunks_exact(DNODE_SIZE) {
                let dnode =
                    Dnode::decode(raw).map_err(|err| ObjectError::Corrupt(err.to_string()))?;
                out.extend(dnode.block_pointers);
            }
            return Ok(out);
        }
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{sync, volume_objset};
    use bytes::Bytes;
    use std::collections::HashMap;

    /// Key of a block: its first copy's place.
    fn place(bp: &BlockPointer) -> (u32, u64) {
        let dva = bp.copies()[0];
        (dva.vdev, dva.offset)
    }

    /// Every block step by step with a tiny budget equals the whole tree, each block once,
    /// each after its children; `born_after_txg` leaves the older blocks alone.
    #[test]
    fn steps_free_every_block_once_children_first() {
        let (objset, io) = volume_objset();
        for object in 1..40u64 {
            objset.create_object(1, object, ObjectType::VolumeData, 4096, 600);
            for blkid in (0..600).step_by(37) {
                objset.write_block(1, object, blkid, Bytes::from(vec![object as u8; 4096]));
            }
        }
        sync(&objset, &io, 1);
        for object in (1..40u64).step_by(3) {
            objset.write_block(2, object, 74, Bytes::from(vec![9; 4096]));
        }
        sync(&objset, &io, 2);
        let root = objset.root_bp();
        let mut all = Vec::new();
        crate::tree::collect_blocks(&io, &root, &mut all).unwrap();
        for (born_after, expected) in [
            (0, all.clone()),
            (
                1,
                all.iter().copied().filter(|bp| bp.birth_txg > 1).collect(),
            ),
        ] {
            let mut freed: Vec<BlockPointer> = Vec::new();
            let mut path = Vec::new();
            let mut steps = 0;
            loop {
                steps += 1;
                let step =
                    free_tree_step(&io, &root, born_after, &path, 5, &mut |bp| freed.push(*bp));
                assert!(step.error.is_none(), "{:?}", step.error);
                match step.next {
                    Some(at) => path = at,
                    None => break,
                }
            }
            let order: HashMap<(u32, u64), usize> = freed
                .iter()
                .enumerate()
                .map(|(index, bp)| (place(bp), index))
                .collect();
            assert_eq!(order.len(), freed.len(), "a block freed twice");
            let mut want: Vec<(u32, u64)> = expected.iter().map(place).collect();
            let mut got: Vec<(u32, u64)> = freed.iter().map(place).collect();
            want.sort_unstable();
            got.sort_unstable();
            assert_eq!(got, want, "born after {born_after}");
            assert!(steps > freed.len() / 8, "bounded steps: {steps}");
            assert_eq!(
                place(freed.last().unwrap()),
                place(&root),
                "the root goes last"
            );
            let mut reader = |_: &BlockPointer| {};
            let freer = Freer {
                io: &io,
                born_after_txg: born_after,
                blocks_max: 1,
                freed: 0,
                free: &mut reader,
                error: None,
            };
            for (index, bp) in freed.iter().enumerate() {
                for child in freer.children(bp).unwrap() {
                    if !child.is_hole() && child.birth_txg > born_after {
                        assert!(
                            order[&place(&child)] < index,
                            "a child freed after its parent"
                        );
                    }
                }
            }
        }
    }
}
