//! Edits of the vdev tree that attach, detach, replace and a finished resilver make: finding a
//! leaf, a top-level vdev with a side added or removed, swapping the tree in from a sync task,
//! releasing a leaf that left, and the detach a finished replace recorded (`detach_replaced`);
//! and the data vdevs a resilver walks (`data_tops`).
//!
//! Invariants: the tree is swapped only from inside a sync task (`install_tree`), which marks
//! the label config dirty so the commit writes the new config to every label; a replaced side
//! is detached only once another side of its vdev is readable. This file uses no sibling.

use crate::EngineError;
use crate::core::{PoolCore, run_sync_task_with};
use cairn_format::label::{TopVdevKind, VdevRole};
use cairn_pool::labels::clear_labels;
use cairn_pool::txg::TxgEngine;
use cairn_pool::vdev::{Leaf, TopVdev, VdevTree};
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Data vdevs whose children hold whole copies (single devices and mirrors): log devices hold
/// no blocks a resilver walks, and a raidz child holds columns, which a resilver that copies
/// whole blocks must never write. A raidz child that was out and comes back is not tracked
/// (its missed txgs, its resilver) yet: what it lacks is found by the checksums and rebuilt
/// by reads and scrub.
pub(crate) fn data_tops(tree: &VdevTree) -> impl Iterator<Item = &TopVdev> {
    tree.tops.iter().filter(|top| {
        top.config.role == VdevRole::Normal && !matches!(top.config.kind, TopVdevKind::RaidZ { .. })
    })
}

pub(super) fn layout_error(message: impl Into<String>) -> EngineError {
    EngineError::Layout(message.into())
}

/// A leaf of `tree` named by its spec or path, with its top-level vdev.
pub(super) fn find_leaf<'a>(
    tree: &'a VdevTree,
    name: &str,
) -> Result<(&'a TopVdev, Arc<Leaf>), EngineError> {
    tree.tops
        .iter()
        .find_map(|top| {
            top.leaves
                .iter()
                .find(|leaf| leaf.spec.to_string() == name || leaf.spec.path.as_os_str() == name)
                .map(|leaf| (top, leaf.clone()))
        })
        .ok_or_else(|| layout_error(format!("no device '{name}' in this pool")))
}

pub(super) fn find_leaf_by_guid(tree: &VdevTree, guid: u64) -> Option<(&TopVdev, Arc<Leaf>)> {
    tree.tops.iter().find_map(|top| {
        top.leaves
            .iter()
            .find(|leaf| leaf.guid == guid)
            .map(|leaf| (top, leaf.clone()))
    })
}

/// `top` with `leaf` added (a single device becomes a mirror).
pub(super) fn top_with_leaf(top: &TopVdev, leaf: Arc<Leaf>) -> TopVdev {
    let mut grown = top.clone();
    grown.leaves.push(leaf);
    grown.config.kind = TopVdevKind::Mirror;
    grown
}

/// `top` without leaf `guid` (a mirror left with one side becomes a single device).
pub(super) fn top_without_leaf(top: &TopVdev, guid: u64) -> TopVdev {
    let mut shrunk = top.clone();
    shrunk.leaves.retain(|leaf| leaf.guid != guid);
    if shrunk.leaves.len() == 1 {
        shrunk.config.kind = TopVdevKind::Leaf;
    }
    shrunk
}

/// Swaps in `tree` from inside a sync task and marks the label config dirty.
pub(super) fn install_tree(core: &PoolCore, tree: VdevTree) {
    core.io.replace_tree(Arc::new(tree));
    core.config_dirty.store(true, Ordering::SeqCst);
}

/// Erases the labels of a leaf that left the pool and closes it.
pub(super) fn release_leaf(leaf: &Leaf) {
    if let Some(device) = leaf.device() {
        // Best effort: a device that cannot be written is gone anyway, and the pool's labels
        // no longer name it.
        let _ = clear_labels(device.as_ref());
    }
    leaf.shutdown();
}

/// Only data mirrors and single data devices take another side.
pub(super) fn check_attachable(top: &TopVdev, name: &str) -> Result<(), EngineError> {
    if top.config.role != VdevRole::Normal {
        return Err(layout_error(format!(
            "'{name}' is a log device; attach works on data devices"
        )));
    }
    if let TopVdevKind::RaidZ { .. } = top.config.kind {
        return Err(layout_error(format!(
            "'{name}' is part of a raidz vdev; attach works on mirrors and single devices"
        )));
    }
    Ok(())
}

/// Detaches the side a finished replace recorded (after the resilver, or at import when a
/// crash came between the two txgs).
pub(crate) fn detach_replaced(
    core: &Arc<PoolCore>,
    engine: &Arc<TxgEngine>,
) -> Result<(), EngineError> {
    let detached: Arc<Mutex<Option<Arc<Leaf>>>> = Arc::default();
    let detached_out = detached.clone();
    run_sync_task_with(core, engine, move |core, _| {
        let mut directory = core.directory.lock();
        let Some(record) = directory
            .resilver
            .as_mut()
            .filter(|record| record.finished_ms.is_some())
        else {
            return Ok(());
        };
        let Some(old) = record.detach_guid.take() else {
            return Ok(());
        };
        let tree = core.tree();
        if let Some((top, old_leaf)) = find_leaf_by_guid(&tree, old)
            && top
                .leaves
                .iter()
                .any(|leaf| leaf.guid != old && leaf.is_readable())
        {
            install_tree(core, tree.with_top_replaced(top_without_leaf(top, old)));
            *detached_out.lock() = Some(old_leaf);
        }
        Ok(())
    })?;
    if let Some(old) = detached.lock().take() {
        release_leaf(&old);
    }
    Ok(())
}
