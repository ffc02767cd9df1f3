//! Filesystem datasets of a pool: creating one (its object set laid out by a sync task, so a
//! crash leaves it whole or absent) and opening it for a front end (`cairn-fs::Filesystem`,
//! one per dataset, shared by every mount of it in this process).
//!
//! Properties reach the filesystem at open (`recordsize`, `readonly`, `sync`, `logbias`,
//! `atime`); `set_property` passes later changes on (`refresh_filesystem`). Each open
//! filesystem has an intent log of one lane (see `cairn-fs`'s durability module), replayed at
//! import with the volumes' (`replay.rs`).
//!
//! Space: every change that can grow a filesystem asks `filesystem_space_check` first. It
//! refuses with EDQUOT when the dataset's quotas (`quota`, `refquota`, an ancestor's `quota`)
//! would be exceeded, and then asks the pool's check (ENOSPC, reservations of others held
//! back, the dataset's own reservations its to use). The dataset's use is its object set's
//! bytes as of the last synced txg plus an estimate of its unsynced txgs (`ObjectSet::
//! space_estimate`: new blocks with their copies in whole sectors, the indirect blocks they
//! create, dnodes; measured 0.1–0.2 % above what the sync then allocates for sequential
//! files and new directories, 2 % above for small files).
//! Slack: the estimate errs high while txgs are unsynced, as overwrites count as growth and
//! frees as nothing (a quota refusal first syncs and looks again, so they count as soon as
//! they are written out; an overwrite of data at the quota is refused, as in ZFS), and low
//! for the indirect blocks of sparse files. Each write asks for room for its data, an eighth
//! more and 64 KiB, other changes for 64 KiB, so a filesystem stops that much short of its
//! quota. Changes that free space never ask. Replay never asks: acknowledged writes are
//! replayed even over a quota lowered since.

use crate::EngineError;
use crate::pool::Pool;
use cairn_dataset::properties::format_size;
use cairn_dataset::{DatasetError, DatasetKind};
use cairn_fs::{Filesystem, FsConfig, NewInode, SpaceRefusal, Tx};
use cairn_object::ObjectSet;
use cairn_pool::txg::TxgEngine;
use cairn_zil::{IntentLog, ZilConfig};
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
        let mut open = self.filesystems.lock();
        if let Some(fs) = open.get(name) {
            return Ok(fs.clone());
        }
        if self.is_readonly() {
            // No intent log (it would allocate log blocks) and nothing to drain: a read-only
            // filesystem refuses every change (EROFS).
            let fs = Arc::new(self.build_filesystem(name)?);
            open.insert(name.to_string(), fs.clone());
            return Ok(fs);
        }
        let engine = self.txg_engine_arc()?;
        let fs = self.build_filesystem(name)?;
        let use_log_devices = self
            .core
            .directory
            .lock()
            .properties_of(name)?
            .logbias
            .uses_log_devices();
        let intent_log = Arc::new(IntentLog::new(
            name.to_string(),
            self.core.guid,
            self.core.io.clone(),
            engine,
            fs.objset().clone(),
            ZilConfig {
                lanes: 1,
                ..ZilConfig::default()
            },
        ));
        intent_log.set_use_log_devices(use_log_devices);
        let fs = fs.with_intent_log(intent_log.clone());
        fs.drain_delete_queue()?;
        self.core
            .intent_logs
            .lock()
            .insert(name.to_string(), intent_log);
        let fs = Arc::new(fs);
        open.insert(name.to_string(), fs.clone());
        Ok(fs)
    }

    /// The filesystem `name` with no intent log (replay, tools).
    pub(crate) fn build_filesystem(&self, name: &str) -> Result<Filesystem, EngineError> {
        let engine = self.readers_engine();
        let config = self.filesystem_config(name)?;
        let objset = self
            .core
            .objsets
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| DatasetError::NoSuchDataset(name.into()))?;
        let check = self.filesystem_space_check(name, &engine, objset.clone());
        Ok(Filesystem::open(name.to_string(), objset, engine, config)?.with_space_check(check))
    }

    /// The space check of filesystem `name`'s changes: quotas first (EDQUOT), then the
    /// pool's room (ENOSPC). See the module comment for what it counts.
    fn filesystem_space_check(
        &self,
        name: &str,
        engine: &Arc<TxgEngine>,
        objset: Arc<ObjectSet>,
    ) -> cairn_fs::SpaceCheck {
        let pool_check = self.space_check(name, engine, false);
        let core = self.core.clone();
        let engine = engine.clone();
        let dataset = name.to_string();
        Arc::new(move |bytes, quota_margin_bytes| {
            let over_quota = || {
                let view = core.space_view.lock().clone();
                // No quota on the chain: no need to look at the object set.
                view.quota_room(&dataset, 0)?;
                let live = objset.space_estimate();
                // A margin past the quotas counts as that much less referenced.
                let referenced =
                    (live.used_bytes + live.unsynced_bytes).saturating_sub(quota_margin_bytes);
                view.quota_room(&dataset, referenced)
                    .filter(|room| bytes > room.bytes)
            };
            if over_quota().is_some() {
                // Unsynced overwrites and frees count as growth until written out.
                if objset.space_estimate().unsynced_txgs > 0 {
                    let _ = engine.sync_now();
                }
                if let Some(room) = over_quota() {
                    return Err(SpaceRefusal::Quota(format!(
                        "{} of {} is {}, {} left, {} more asked",
                        room.property,
                        room.dataset,
                        format_size(room.limit_bytes),
                        format_size(room.bytes),
                        format_size(bytes)
                    )));
                }
            }
            pool_check(bytes, true).map_err(|err| SpaceRefusal::Pool(err.to_string()))
        })
    }

    /// Size and available bytes of filesystem `name` for `statfs` (as ZFS shows them to
    /// `df`): available is its AVAIL with unsynced growth counted, size is that plus what
    /// it uses, so a quota shows as the filesystem's size.
    pub fn filesystem_space(&self, name: &str) -> Result<(u64, u64), EngineError> {
        let objset = self
            .core
            .objsets
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| DatasetError::NoSuchDataset(name.into()))?;
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
        let directory = self.core.directory.lock();
        let record = directory.get(name)?;
        if record.kind != DatasetKind::Filesystem {
            return Err(DatasetError::InvalidName {
                name: name.into(),
                reason: "not a filesystem".into(),
            }
            .into());
        }
        let properties = directory.properties_of(name)?;
        Ok(FsConfig {
            recordsize_bytes: properties.recordsize_bytes,
            readonly: self.is_readonly() || properties.readonly,
            sync: properties.sync,
            atime: properties.atime,
        })
    }
}
