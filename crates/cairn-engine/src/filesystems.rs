//! Filesystem datasets of a pool: creating one (its object set laid out by a sync task, so a
//! crash leaves it whole or absent) and opening it for a front end (`cairn-fs::Filesystem`,
//! one per dataset, shared by every mount of it in this process).
//!
//! Properties reach the filesystem at open (`recordsize`, `readonly`, `sync`, `logbias`,
//! `atime`); `set_property` passes later changes on (`refresh_filesystem`). Each open
//! filesystem has an intent log of one lane (see `cairn-fs`'s durability module), replayed at
//! import with the volumes' (`replay.rs`).
//!
//! Rollback of an open filesystem (`Pool::rollback`): the `Filesystem` of the old head is
//! taken out of the open ones and retired (`retire_filesystem`: every later call on it fails
//! with `Stale`, EIO), so nothing more reaches the old head or its intent log, which the
//! rollback's txg releases; what was written to the old head since its last sync is
//! discarded with its object set (which no txg syncs again). Once the txg that swapped the
//! head has committed, the dataset is opened again (`reopen_filesystem`): a new
//! `Filesystem` over the rolled-back head with a new intent log, taking over the old one's
//! inode numbers and the opens of files that are the same file in both heads
//! (`Filesystem::adopt`), before its delete queue is drained. Whoever held the old handle
//! opens the dataset again (`filesystem`); the FUSE mount does it under its own calls.
//!
//! Space: every change that can grow a filesystem asks the pool's one space check first
//! (`space_check.rs`, the policy volumes share): EDQUOT when the dataset's quotas (`quota`,
//! `refquota`, an ancestor's `quota`) would be exceeded, else ENOSPC when the pool has no
//! room (reservations of others held back, the dataset's own reservations its to use). Each
//! write asks for room for its data, an eighth more and 64 KiB, other changes for 64 KiB, so
//! a filesystem stops that much short of its quota. Changes that free space never ask.
//! Replay never asks: acknowledged writes are replayed even over a quota lowered since.

use crate::EngineError;
use crate::pool::Pool;
use cairn_dataset::DatasetKind;
use cairn_fs::{Filesystem, FsConfig, NewInode, Tx};
use std::sync::Arc;

impl Pool {
    /// Creates the filesystem dataset `name` (its parent must exist), durable on return. The
    /// root directory belongs to `root_owner` with mode `root_mode`.
    pub fn create_filesystem(
        &self,
        name: &str,
        requested: &[(String, String)],
        root_owner: (u32, u32),
        root_mode: u32,
    ) -> Result<(), EngineError> {
        let properties =
            cairn_dataset::directory::creation_properties(DatasetKind::Filesystem, requested)?;
        self.check_new_dataset(name, DatasetKind::Filesystem)?;
        let name = name.to_string();
        let root = NewInode {
            kind: cairn_fs::attrs::FileKind::Directory,
            mode: root_mode,
            uid: root_owner.0,
            gid: root_owner.1,
            rdev: 0,
        };
        self.run_sync_task(move |core, txg| {
            let objset = core.insert_dataset(&name, DatasetKind::Filesystem, txg, properties)?;
            Filesystem::format(&objset, Tx::syncing(txg), root)?;
            core.objsets.lock().insert(name, objset);
            Ok(())
        })?;
        // Properties given at create (primarycache, checksum...) hold from the first write.
        self.apply_properties();
        Ok(())
    }

    /// The filesystem dataset `name`, opened on first use with its intent log (after any
    /// replay: import replays first), its delete queue drained.
    pub fn filesystem(&self, name: &str) -> Result<Arc<Filesystem>, EngineError> {
        crate::datasets::refuse_hidden(name)?;
        self.open_filesystem(name, None)
    }

    /// `filesystem`, taking over `carried` from a filesystem a rollback retired (if it
    /// opens one now).
    fn open_filesystem(
        &self,
        name: &str,
        carried: Option<&cairn_fs::CarriedOver>,
    ) -> Result<Arc<Filesystem>, EngineError> {
        let mut open = self.filesystems.lock();
        if let Some(fs) = open.get(name) {
            return Ok(fs.clone());
        }
        if self.is_readonly() {
            // No intent log (it would allocate log blocks) and nothing to drain: a read-only
            // filesystem refuses every change (EROFS).
            let fs = self.build_filesystem(name)?;
            if let Some(carried) = carried {
                fs.adopt(carried);
            }
            let fs = Arc::new(fs);
            open.insert(name.to_string(), fs.clone());
            return Ok(fs);
        }
        let engine = self.txg_engine_arc()?;
        let fs = self.build_filesystem(name)?;
        let logbias = self.core.directory.lock().properties_of(name)?.logbias;
        // Filesystems log on one chain (`loglanes` takes effect for volumes).
        let intent_log = self
            .core
            .new_intent_log(name, engine, fs.objset().clone(), 1, logbias);
        let fs = fs.with_intent_log(intent_log.clone());
        if let Some(carried) = carried {
            fs.adopt(carried);
        }
        fs.drain_delete_queue()?;
        self.core
            .intent_logs
            .lock()
            .insert(name.to_string(), intent_log);
        let fs = Arc::new(fs);
        open.insert(name.to_string(), fs.clone());
        Ok(fs)
    }

    /// Takes filesystem `name` out of the open ones and retires it (see the module doc);
    /// returns what the filesystem opened after the rollback takes over, if it was open.
    pub(crate) fn retire_filesystem(&self, name: &str) -> Option<cairn_fs::CarriedOver> {
        let fs = self.filesystems.lock().remove(name)?;
        let carried = fs.carry_over();
        fs.retire();
        Some(carried)
    }

    /// Opens filesystem `name` again after a rollback (see the module doc), taking over
    /// `carried` from the retired one.
    pub(crate) fn reopen_filesystem(
        &self,
        name: &str,
        carried: &cairn_fs::CarriedOver,
    ) -> Result<Arc<Filesystem>, EngineError> {
        self.open_filesystem(name, Some(carried))
    }

    /// The filesystem `name` with no intent log (replay, tools).
    pub(crate) fn build_filesystem(&self, name: &str) -> Result<Filesystem, EngineError> {
        let engine = self.readers_engine();
        let config = self.filesystem_config(name)?;
        let objset = self.core.objset(name)?;
        let check = self.space_check(name, &engine, objset.clone());
        Ok(Filesystem::open(name.to_string(), objset, engine, config)?.with_space_check(check))
    }

    /// Size and available bytes of filesystem `name` for `statfs` (as ZFS shows them to
    /// `df`): available is its AVAIL with unsynced growth counted, size is that plus what
    /// it uses, so a quota shows as the filesystem's size.
    pub fn filesystem_space(&self, name: &str) -> Result<(u64, u64), EngineError> {
        let objset = self.core.objset(name)?;
        let live = objset.space_estimate();
        let pool_available = self.core.space.lock().available_bytes();
        let view = self.core.space_view.lock().clone();
        let space = view.datasets.get(name).copied().unwrap_or_default();
        let live_referenced = live.used_bytes + live.unsynced_bytes;
        let growth = live_referenced.saturating_sub(space.referenced_bytes);
        let used = space.used_bytes() + growth;
        let mut available = view
            .available_bytes(name, pool_available)
            .saturating_sub(growth);
        if let Some(room) = view.quota_room(name, live_referenced) {
            available = available.min(room.bytes);
        }
        Ok((used + available, available))
    }

    /// Passes a property change on to the open filesystem `name`, if any.
    pub(crate) fn refresh_filesystem(&self, name: &str) -> Result<(), EngineError> {
        let fs = self.filesystems.lock().get(name).cloned();
        if let Some(fs) = fs {
            fs.set_config(self.filesystem_config(name)?)?;
        }
        Ok(())
    }

    fn filesystem_config(&self, name: &str) -> Result<FsConfig, EngineError> {
        let properties = self
            .core
            .directory
            .lock()
            .properties_of_kind(name, DatasetKind::Filesystem)?;
        Ok(FsConfig {
            recordsize_bytes: properties.recordsize_bytes,
            readonly: self.is_readonly() || properties.readonly,
            sync: properties.sync,
            atime: properties.atime,
        })
    }
}
