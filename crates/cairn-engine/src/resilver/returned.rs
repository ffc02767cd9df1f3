//! A side back from missed txgs (`missed.rs`), as the resilver takes it up: the next such side
//! waiting for its resilver (`next_returned_leaf`) and the fresh resilver record it starts
//! from (`fresh_record`). Both the thread (going on with the next side) and `missed.rs`
//! (bringing sides back) use them, so they live here, below `thread`, and the resilver needs
//! nothing of `missed.rs`.
//!
//! This file uses `vdevs` below it.

use super::vdevs::data_tops;
use crate::EngineError;
use crate::core::{PoolCore, run_sync_task_with};
use cairn_dataset::ResilverRecord;
use std::sync::Arc;

/// A side back from missing txgs (usable, resilvering, its range closed) waiting for its
/// resilver, if any.
pub(crate) fn next_returned_leaf(core: &PoolCore) -> Option<u64> {
    let tree = core.tree();
    let directory = core.directory.lock();
    data_tops(&tree)
        .flat_map(|top| top.leaves.iter())
        .find(|leaf| {
            leaf.is_usable()
                && leaf.is_resilvering()
                && directory
                    .missed_txgs
                    .leaves
                    .get(&leaf.guid)
                    .is_some_and(|range| range.last_txg.is_some())
        })
        .map(|leaf| leaf.guid)
}

/// Writes a fresh resilver record for leaf `guid` (from offset 0; a replace's old side is
/// kept) and makes it durable.
pub(crate) fn fresh_record(
    core: &Arc<PoolCore>,
    engine: &Arc<cairn_pool::txg::TxgEngine>,
    guid: u64,
) -> Result<(), EngineError> {
    run_sync_task_with(core, engine, move |core, txg| {
        let mut directory = core.directory.lock();
        let detach_guid = directory
            .resilver
            .as_ref()
            .filter(|record| record.leaf_guid == guid && record.finished_ms.is_none())
            .and_then(|record| record.detach_guid);
        directory.resilver = Some(ResilverRecord::starting(
            guid,
            detach_guid,
            txg,
            crate::now_ms(),
        ));
        Ok(())
    })
    .map(|_| ())
}
