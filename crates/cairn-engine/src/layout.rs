//! Changing the vdev tree of a live pool: `pool add` and `pool remove` of log devices.
//!
//! A change takes effect in one txg: a sync task swaps the tree (`BlockIo::replace_tree`) and
//! the allocator's vdevs, marks the label config dirty, and makes the space log condense. That
//! txg's commit writes the new config to the first half of every label, the uberblock, then the
//! second half (`cairn_pool::labels`), and import pairs configs with uberblocks of the same
//! tree, so a crash anywhere leaves the pool as it was before the change or after it.
//!
//! Invariants:
//! - Nothing reachable from a durable txg may lie on a vdev that txg's config does not name.
//!   So a new log vdev takes no log blocks until the txg adding it is durable (until then a
//!   crash imports the old config, which cannot read them), and a log vdev leaves only once
//!   it holds nothing: it is closed to allocations, the intent logs restart their chains
//!   elsewhere (after a txg sync makes every record durable), and txgs are synced until its
//!   frees are no longer deferred.
//! - Data vdevs cannot be added or removed yet (their data would have to move); the commands
//!   say so instead of doing half of it.

use crate::core::PoolCore;
use crate::vdev_groups::{CreateOptions, VdevGroup, check_groups, open_top, space_layout};
use crate::{DeviceOpener, EngineError, Pool};
use cairn_format::VdevRole;
use cairn_pool::labels::clear_labels;
use cairn_pool::space::DEFER_TXGS;
use cairn_pool::vdev::{TopVdev, VdevTree};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

fn layout_error(message: impl Into<String>) -> EngineError {
    EngineError::Layout(message.into())
}

impl Pool {
    /// Adds separate log devices (`pool add tank log [mirror] DEV…`). Returns the names of the
    /// new top-level vdevs.
    pub fn add_log_vdevs(
        &self,
        groups: &[VdevGroup],
        create: &CreateOptions,
        opener: &DeviceOpener,
    ) -> Result<Vec<String>, EngineError> {
        self.txg_engine()?;
        self.check_new_groups(groups)?;
        let first_id = self.core.tree().next_top_id();
        let mut tops: Vec<TopVdev> = Vec::new();
        for (id, group) in (first_id..).zip(groups) {
            match open_top(id, group, create, opener) {
                Ok(top) => tops.push(top),
                Err(err) => {
                    tops.iter().for_each(shutdown_top);
                    return Err(err);
                }
            }
        }
        let names: Vec<String> = tops.iter().map(TopVdev::kind_name).collect();
        let ids: Vec<u32> = tops.iter().map(TopVdev::id).collect();
        let added = tops.clone();
        let outcome = self.run_sync_task(move |core, _| {
            let mut tree = core.tree();
            for top in &added {
                tree = Arc::new(tree.with_top(top.clone()));
            }
            // Into the allocator closed (nothing can be placed there before the tree has the
            // vdev, nor before this txg is durable), all or none of them.
            let mut space = core.space.lock();
            let mut done: Vec<u32> = Vec::new();
            for layout in space_layout(&tree)
                .into_iter()
                .filter(|layout| ids.contains(&layout.vdev))
            {
                let vdev = layout.vdev;
                if let Err(err) = space
                    .add_vdev(layout)
                    .and_then(|()| space.set_allocatable(vdev, false))
                {
                    // (`vdev` itself too, in case only closing it failed; its id is new.)
                    for added in done.into_iter().chain([vdev]) {
                        let _ = space.remove_vdev(added);
                    }
                    return Err(layout_error(crate::error_chain(&err)));
                }
                done.push(vdev);
            }
            drop(space);
            core.io.replace_tree(tree);
            core.config_dirty.store(true, Ordering::SeqCst);
            core.space_log.lock().condense_next = true;
            Ok(())
        });
        if let Err(err) = outcome {
            tops.iter().for_each(shutdown_top);
            return Err(err);
        }
        // Durable now: the new devices may take log blocks.
        let mut space = self.core.space.lock();
        for top in &tops {
            space
                .set_allocatable(top.id(), true)
                .map_err(|err| layout_error(crate::error_chain(&err)))?;
        }
        Ok(names)
    }

    /// Removes log vdev `name` (its name in `pool status`: the device, or `mirror-N`) without
    /// losing anything: every record it holds is first made durable in the pool.
    pub fn remove_log_vdev(&self, name: &str) -> Result<(), EngineError> {
        self.txg_engine()?;
        let tree = self.core.tree();
        let id = find_top(&tree, name)?;
        self.core
            .space
            .lock()
            .set_allocatable(id, false)
            .map_err(|err| layout_error(crate::error_chain(&err)))?;
        let result = self.empty_log_vdev(id).and_then(|()| {
            self.run_sync_task(move |core, _| {
                core.space.lock().remove_vdev(id).map_err(|err| {
                    layout_error(format!(
                        "the log device is not empty: {}",
                        crate::error_chain(&err)
                    ))
                })?;
                core.io.replace_tree(Arc::new(core.tree().without_top(id)));
                core.config_dirty.store(true, Ordering::SeqCst);
                core.space_log.lock().condense_next = true;
                Ok(())
            })
        });
        if let Err(err) = result {
            let _ = self.core.space.lock().set_allocatable(id, true);
            return Err(err);
        }
        // The new config is durable: the device no longer belongs to the pool.
        let removed = tree.top(id).expect("found above");
        for leaf in &removed.leaves {
            if let Some(device) = leaf.device()
                && let Err(err) = clear_labels(device.as_ref())
            {
                cairn_metrics::events::record(
                    "engine",
                    format!(
                        "could not erase the labels of {}: {}",
                        leaf.spec,
                        crate::error_chain(&err)
                    ),
                );
            }
        }
        shutdown_top(removed);
        Ok(())
    }

    /// Moves every intent-log chain off log vdev `id` (closed to allocations already) and
    /// syncs txgs until its blocks are freed and the frees are no longer deferred.
    fn empty_log_vdev(&self, id: u32) -> Result<(), EngineError> {
        let engine = self.txg_engine()?.clone();
        let logs: Vec<_> = self.core.intent_logs.lock().values().cloned().collect();
        for log in logs {
            log.restart_chains()
                .map_err(|err| layout_error(crate::error_chain(&err)))?;
        }
        // Blocks freed in txg N are reusable (and out of the deferred set) once N + DEFER_TXGS
        // has synced; a few more for frees that land in the txg being synced meanwhile.
        for _ in 0..DEFER_TXGS + 4 {
            if vdev_empty(&self.core, id)? {
                return Ok(());
            }
            engine.sync_now_forced().map_err(EngineError::Txg)?;
        }
        if vdev_empty(&self.core, id)? {
            return Ok(());
        }
        let (allocated, deferred) = self
            .core
            .space
            .lock()
            .vdev_in_use(id)
            .map_err(|err| layout_error(crate::error_chain(&err)))?;
        Err(layout_error(format!(
            "the log device still holds {allocated} allocated and {deferred} deferred bytes \
             after {} txg syncs",
            DEFER_TXGS + 4
        )))
    }

    /// Refuses data vdevs, devices already in the pool, and malformed groups.
    fn check_new_groups(&self, groups: &[VdevGroup]) -> Result<(), EngineError> {
        if groups.is_empty() {
            return Err(layout_error("no devices given"));
        }
        if groups.iter().any(|group| !group.log) {
            return Err(layout_error(
                "only log devices can be added to a pool so far (`pool add POOL log DEV…`)",
            ));
        }
        let in_pool: BTreeSet<PathBuf> = self
            .core
            .tree()
            .leaves()
            .map(|leaf| leaf.spec.path.clone())
            .collect();
        check_groups(groups, in_pool, |path| {
            layout_error(format!(
                "{} is already in pool '{}' or given twice",
                path.display(),
                self.core.name
            ))
        })
    }
}

/// The id of log vdev `name`: a `pool status` name (`mirror-N`, a device) or a leaf's path.
fn find_top(tree: &VdevTree, name: &str) -> Result<u32, EngineError> {
    let top =
        tree.tops
            .iter()
            .find(|top| {
                top.kind_name() == name
                    || top.leaves.iter().any(|leaf| {
                        leaf.spec.to_string() == name || leaf.spec.path.as_os_str() == name
                    })
            })
            .ok_or_else(|| layout_error(format!("no vdev '{name}' in this pool")))?;
    if top.config.role != VdevRole::Log {
        return Err(layout_error(format!(
            "'{name}' holds pool data; only log and cache devices can be removed so far"
        )));
    }
    Ok(top.id())
}

fn vdev_empty(core: &PoolCore, id: u32) -> Result<bool, EngineError> {
    let (allocated, deferred) = core
        .space
        .lock()
        .vdev_in_use(id)
        .map_err(|err| layout_error(crate::error_chain(&err)))?;
    Ok(allocated == 0 && deferred == 0)
}

fn shutdown_top(top: &TopVdev) {
    for leaf in &top.leaves {
        leaf.shutdown();
    }
}
