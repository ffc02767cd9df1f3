//! Checks of what is read from disk beyond what the decoders check: a dnode against its own
//! tree and an indirect entry against its parent (see the crate's invariants). They bound every
//! walk, so a crafted tree is an error naming the object rather than a panic.

use crate::ObjectError;
use cairn_format::{BlockPointer, Dnode};

/// Checks a dnode read from disk against its own tree (see the crate's invariants): every
/// pointer one level below the dnode, of the dnode's object type, born no later than
/// `newest_txg`, and, for a one-level tree, holding a block of the dnode's block size. `object` is `None` for a meta-dnode.
pub(crate) fn check_dnode(
    dnode: &Dnode,
    object: Option<u64>,
    newest_txg: u64,
) -> Result<(), ObjectError> {
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
pub(crate) fn check_child(
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
