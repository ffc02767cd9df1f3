//! `pool attach`, `pool replace` and `pool detach`: one sync task each swaps the vdev tree and
//! records (or ends) the resilver in the dataset directory, in the same txg as the new config.
//!
//! Invariants: a side is detached only while another side of its vdev is readable; the resilver
//! of an attached side starts only once the txg recording it is synced. This file uses `resilver_task`
//! and `vdevs` below it, and starts the resilver thread through `Pool::start_resilver`
//! (`thread`).

use super::vdevs::{
    check_attachable, find_leaf, install_tree, layout_error, release_leaf, top_with_leaf,
    top_without_leaf,
};
use crate::resilver_task::ResilverOptions;
use crate::vdev_groups::{CreateOptions, VdevGroup, check_groups, open_leaves};
use crate::{DeviceOpener, EngineError, Pool};
use cairn_dataset::ResilverRecord;
use cairn_device::spec::DeviceSpec;
use cairn_pool::vdev::TopVdev;
use std::collections::BTreeSet;
use std::path::PathBuf;

impl Pool {
    /// Attaches `new` beside `existing` (`pool attach`): a single device becomes a two-way
    /// mirror, a mirror gains a side. The resilver starts in the background. Returns the
    /// vdev's name.
    pub fn attach(
        &self,
        existing: &str,
        new: &DeviceSpec,
        create: &CreateOptions,
        opener: &DeviceOpener,
        options: ResilverOptions,
    ) -> Result<String, EngineError> {
        self.attach_leaf(existing, new, create, opener, options, false)
    }

    /// Replaces `old` by `new` (`pool replace`): attaches `new` beside it, resilvers, then
    /// detaches `old`, all in the background.
    pub fn replace(
        &self,
        old: &str,
        new: &DeviceSpec,
        create: &CreateOptions,
        opener: &DeviceOpener,
        options: ResilverOptions,
    ) -> Result<String, EngineError> {
        self.attach_leaf(old, new, create, opener, options, true)
    }

    fn attach_leaf(
        &self,
        existing: &str,
        new: &DeviceSpec,
        create: &CreateOptions,
        opener: &DeviceOpener,
        options: ResilverOptions,
        replacing: bool,
    ) -> Result<String, EngineError> {
        self.txg_engine()?;
        if self.resilver_running() {
            return Err(layout_error(
                "a resilver is running; wait for it to finish (see `cairn pool status`)",
            ));
        }
        let tree = self.core.tree();
        let (top, old_leaf) = find_leaf(&tree, existing)?;
        check_attachable(top, existing)?;
        if !top.leaves.iter().any(|leaf| leaf.is_readable()) {
            return Err(layout_error(format!(
                "vdev {} has no healthy device to resilver from",
                top.kind_name()
            )));
        }
        let group = VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: vec![new.clone()],
        };
        let in_pool: BTreeSet<PathBuf> = tree.leaves().map(|leaf| leaf.spec.path.clone()).collect();
        check_groups(std::slice::from_ref(&group), in_pool, |path| {
            layout_error(format!(
                "{} is already in pool '{}'",
                path.display(),
                self.core.name
            ))
        })?;
        let mut opened = Vec::new();
        let region = match open_leaves(&group, create, opener, &mut opened) {
            Ok(region) => region,
            Err(err) => {
                opened.iter().for_each(|leaf| leaf.shutdown());
                return Err(err);
            }
        };
        let leaf = opened.remove(0);
        if region < top.data_size_bytes {
            leaf.shutdown();
            return Err(layout_error(format!(
                "{new} is too small: vdev {} needs {} bytes of data region, the device has {region}",
                top.kind_name(),
                top.data_size_bytes
            )));
        }
        leaf.set_resilvering(true);
        let top_id = top.id();
        let added = leaf.clone();
        let detach_guid = replacing.then_some(old_leaf.guid);
        let outcome = self.run_sync_task(move |core, txg| {
            let tree = core.tree();
            let top = tree
                .top(top_id)
                .ok_or_else(|| layout_error("the vdev left the pool"))?;
            let grown = top_with_leaf(top, added.clone());
            install_tree(core, tree.with_top_replaced(grown));
            core.directory.lock().resilver = Some(ResilverRecord::starting(
                added.guid,
                detach_guid,
                txg,
                crate::now_ms(),
            ));
            Ok(())
        });
        if let Err(err) = outcome {
            leaf.shutdown();
            return Err(err);
        }
        self.start_resilver(leaf.guid, options)?;
        let tree = self.core.tree();
        Ok(tree
            .top(top_id)
            .map_or_else(String::new, TopVdev::kind_name))
    }

    /// Detaches `device` from its mirror (`pool detach`). Refused if no other side holds
    /// every block. Detaching a side being resilvered stops the resilver.
    pub fn detach(&self, device: &str) -> Result<(), EngineError> {
        self.txg_engine()?;
        let tree = self.core.tree();
        let (top, leaf) = find_leaf(&tree, device)?;
        if top.leaves.len() < 2 {
            return Err(layout_error(format!(
                "'{device}' is not a side of a mirror; only mirror sides can be detached"
            )));
        }
        if !top
            .leaves
            .iter()
            .any(|other| other.guid != leaf.guid && other.is_readable())
        {
            return Err(layout_error(format!(
                "detaching '{device}' would leave vdev {} with no healthy copy of its data",
                top.kind_name()
            )));
        }
        {
            let mut running = self.resilver.lock();
            match running.take() {
                Some(task) if task.leaf_guid() == leaf.guid => task.stop(),
                other => *running = other,
            }
        }
        let (top_id, guid) = (top.id(), leaf.guid);
        self.run_sync_task(move |core, _| {
            let tree = core.tree();
            let top = tree
                .top(top_id)
                .ok_or_else(|| layout_error("the vdev left the pool"))?;
            install_tree(core, tree.with_top_replaced(top_without_leaf(top, guid)));
            let mut directory = core.directory.lock();
            // A side that leaves owes nothing more.
            directory.missed_txgs.leaves.remove(&guid);
            if let Some(record) = &mut directory.resilver {
                if record.leaf_guid == guid && record.finished_ms.is_none() {
                    directory.resilver = None;
                } else if record.detach_guid == Some(guid) {
                    record.detach_guid = None;
                }
            }
            Ok(())
        })?;
        release_leaf(&leaf);
        Ok(())
    }
}
