//! Filesystem datasets of a pool: creating one (its object set laid out by a sync task, so a
//! crash leaves it whole or absent) and opening it for a front end (`cairn-fs::Filesystem`,
//! one per dataset, shared by every mount of it in this process).
//!
//! Properties reach the filesystem at open (`recordsize`, `readonly`, `sync`, `logbias`);
//! `set_property` passes later changes on (`refresh_filesystem`). Each open filesystem has an
//! intent log of one lane (see `cairn-fs`'s durability module), replayed at import with the
//! volumes' (`replay.rs`). Known gap: quotas and reservations are not enforced on
//! filesystems.

use crate::EngineError;
use crate::pool::Pool;
use cairn_dataset::{DatasetError, DatasetKind};
use cairn_fs::{Filesystem, FsConfig, FsSync, NewInode, Tx};
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
        Ok(())
    }

    /// The filesystem dataset `name`, opened on first use with its intent log (after any
    /// replay: import replays first), its delete queue drained.
    pub fn filesystem(&self, name: &str) -> Result<Arc<Filesystem>, EngineError> {
        let mut open = self.filesystems.lock();
        if let Some(fs) = open.get(name) {
            return Ok(fs.clone());
        }
        let engine = self.txg_engine_arc()?;
        let fs = self.build_filesystem(name)?;
        let use_log_devices = self.core.directory.lock().property(name, "logbias")?.0 == "latency";
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
        let engine = self.txg_engine_arc()?;
        let config = self.filesystem_config(name)?;
        let objset = self
            .core
            .objsets
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| DatasetError::NoSuchDataset(name.into()))?;
        let check = self.space_check(name, &engine);
        Ok(
            Filesystem::open(name.to_string(), objset, engine, config)?.with_space_check(Arc::new(
                move |bytes| check(bytes, true).map_err(|err| err.to_string()),
            )),
        )
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
        let recordsize = directory
            .property(name, "recordsize")?
            .0
            .parse()
            .unwrap_or(128 << 10);
        let readonly = directory.property(name, "readonly")?.0 == "on";
        let sync = match directory.property(name, "sync")?.0.as_str() {
            "always" => FsSync::Always,
            "disabled" => FsSync::Disabled,
            _ => FsSync::Standard,
        };
        Ok(FsConfig {
            recordsize_bytes: recordsize,
            readonly,
            sync,
        })
    }
}
