//! Filesystem datasets of a pool: creating one (its object set laid out by a sync task, so a
//! crash leaves it whole or absent) and opening it for a front end (`cairn-fs::Filesystem`,
//! one per dataset, shared by every mount of it in this process).
//!
//! Properties reach the filesystem at open (`recordsize`, `readonly`); `set_property` passes
//! later changes on (`refresh_filesystem`). Known gaps: no intent log for files yet, so a
//! filesystem's `fsync` waits for a txg sync; quotas and reservations are not enforced on
//! filesystems.

use crate::EngineError;
use crate::pool::Pool;
use crate::pool::checksum_from_property;
use cairn_dataset::{DatasetError, DatasetKind};
use cairn_format::ObjsetType;
use cairn_fs::{Filesystem, FsConfig, NewInode, Tx};
use cairn_object::ObjectSet;
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
        {
            let directory = self.core.directory.lock();
            if directory.datasets.contains_key(name) {
                return Err(DatasetError::Exists(name.to_string()).into());
            }
            cairn_dataset::validate_name(name)?;
            let parent = name
                .rsplit_once('/')
                .map(|(parent, _)| parent)
                .ok_or_else(|| DatasetError::InvalidName {
                    name: name.into(),
                    reason: "a filesystem must be inside a pool (pool/name)".into(),
                })?;
            directory.get(parent)?;
        }
        let name = name.to_string();
        let root = NewInode {
            kind: cairn_fs::attrs::FileKind::Directory,
            mode: root_mode,
            uid: root_owner.0,
            gid: root_owner.1,
            rdev: 0,
        };
        self.run_sync_task(move |core, txg| {
            let mut trial = core.directory.lock().clone();
            trial.insert(&name, DatasetKind::Filesystem, txg, properties.clone())?;
            core.check_reservations(&trial)?;
            let mut directory = core.directory.lock();
            directory.insert(&name, DatasetKind::Filesystem, txg, properties)?;
            let (checksum, _) = directory.property(&name, "checksum")?;
            drop(directory);
            let objset = Arc::new(ObjectSet::create(
                core.mos.cached_io().clone(),
                ObjsetType::Filesystem,
                checksum_from_property(&checksum),
            ));
            Filesystem::format(&objset, Tx::syncing(txg), root)?;
            core.objsets.lock().insert(name, objset);
            Ok(())
        })?;
        Ok(())
    }

    /// The filesystem dataset `name`, opened on first use.
    pub fn filesystem(&self, name: &str) -> Result<Arc<Filesystem>, EngineError> {
        let mut open = self.filesystems.lock();
        if let Some(fs) = open.get(name) {
            return Ok(fs.clone());
        }
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
        let fs = Filesystem::open(name.to_string(), objset, engine, config)?.with_space_check(
            Arc::new(move |bytes| check(bytes, true).map_err(|err| err.to_string())),
        );
        let fs = Arc::new(fs);
        open.insert(name.to_string(), fs.clone());
        Ok(fs)
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
        Ok(FsConfig {
            recordsize_bytes: recordsize,
            readonly,
        })
    }
}
