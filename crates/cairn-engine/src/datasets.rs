//! The pool's datasets: listing them with space figures and properties, creating volumes,
//! destroying datasets, setting properties and pushing their typed values onto open objects,
//! opening a volume with its intent log (its space check: `space_check.rs`).
//!
//! Invariants: every change of the dataset directory runs as a sync task (`run_sync_task`),
//! validated first on a trial copy so a refusal costs no txg; reservations and quotas are
//! checked against the trial before the task and again inside it. Properties are read only
//! as typed values (`DatasetDirectory::properties_of`). Filesystems are opened in
//! `filesystems.rs`. Uses `pool.rs` (the handle and its core); `pool.rs` uses nothing here.

use crate::EngineError;
use crate::core::{PoolCore, reclaim_deferred};
use crate::pool::Pool;
use cairn_dataset::directory::{Provisioning, volume_creation_properties};
use cairn_dataset::space::SpaceView;
use cairn_dataset::{
    DatasetDirectory, DatasetError, DatasetKind, DatasetProperties, VOLUME_OBJECT, Volume,
};
use cairn_format::{ObjectType, ObjsetType};
use cairn_object::ObjectSet;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub struct DatasetInfo {
    pub name: String,
    pub kind: DatasetKind,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub referenced_bytes: u64,
    pub volsize_bytes: Option<u64>,
    pub properties: Vec<(&'static str, String, String)>,
}

impl Pool {
    /// Datasets with space figures and resolved properties, sorted by name.
    pub fn datasets(&self) -> Result<Vec<DatasetInfo>, EngineError> {
        let available = self.core.space.lock().available_bytes();
        let directory = self.core.directory.lock();
        let snapshots = self.core.snapshots.lock();
        let view = SpaceView::of(&directory);
        let mut out = Vec::new();
        for record in directory.datasets.values() {
            if cairn_dataset::is_hidden(&record.name) {
                continue;
            }
            let space = view.datasets.get(&record.name).copied().unwrap_or_default();
            let mut properties = directory
                .all_properties(&record.name)?
                .into_iter()
                .map(|(name, value, source)| (name, value, source.describe()))
                .collect::<Vec<_>>();
            properties.extend(space_properties(&space, &snapshots, record));
            let origin = snapshots.origin_of(record.id).and_then(|origin| {
                crate::clones::dataset_name(&directory, origin.info.dataset_id)
                    .map(|dataset| format!("{dataset}@{}", origin.info.name))
            });
            properties.push(("origin", origin.unwrap_or_else(|| "-".into()), "-".into()));
            // A partial receive's (`receive -s`) token, kept in its hidden dataset.
            let token = directory
                .get(&cairn_dataset::receive_name(&record.name))
                .ok()
                .and_then(|hidden| {
                    hidden
                        .properties
                        .get(crate::core::RESUME_TOKEN_KEY)
                        .cloned()
                });
            properties.push((
                "receive_resume_token",
                token.unwrap_or_else(|| "-".into()),
                "-".into(),
            ));
            let volsize = (record.kind == DatasetKind::Volume)
                .then(|| directory.properties_of(&record.name))
                .transpose()?
                .map(|properties| properties.volsize_bytes);
            out.push(DatasetInfo {
                name: record.name.clone(),
                kind: record.kind,
                used_bytes: space.used_bytes(),
                available_bytes: view.available_bytes(&record.name, available),
                referenced_bytes: space.referenced_bytes,
                volsize_bytes: volsize,
                properties,
            });
        }
        Ok(out)
    }

    /// Every dataset's name, sorted: what a caller that needs no figures asks for (a
    /// snapshot command's served mounts), without `datasets`' space and properties.
    pub fn dataset_names(&self) -> Vec<String> {
        self.core
            .directory
            .lock()
            .datasets
            .keys()
            .filter(|name| !cairn_dataset::is_hidden(name))
            .cloned()
            .collect()
    }

    /// The stable id of dataset `name` (kept across renames; never reused in the pool): what
    /// an NFS file handle names a dataset by.
    pub fn dataset_id(&self, name: &str) -> Option<u64> {
        self.core
            .directory
            .lock()
            .datasets
            .get(name)
            .map(|record| record.id)
    }

    /// The name dataset `id` has now (`dataset_id`'s inverse), if it still exists.
    pub fn dataset_name_of_id(&self, id: u64) -> Option<String> {
        self.core
            .directory
            .lock()
            .datasets
            .values()
            .find(|record| record.id == id)
            .map(|record| record.name.clone())
    }

    /// Every property of `dataset`, resolved and typed: what front ends act on.
    pub fn dataset_properties(&self, dataset: &str) -> Result<DatasetProperties, EngineError> {
        refuse_hidden(dataset)?;
        Ok(self.core.directory.lock().properties_of(dataset)?)
    }

    /// Every property of `dataset` as text, with its source (`local`, `default`,
    /// `inherited from …`): what `get` shows.
    pub fn properties(
        &self,
        dataset: &str,
    ) -> Result<Vec<(&'static str, String, String)>, EngineError> {
        refuse_hidden(dataset)?;
        let directory = self.core.directory.lock();
        Ok(directory
            .all_properties(dataset)?
            .into_iter()
            .map(|(name, value, source)| (name, value, source.describe()))
            .collect())
    }

    /// Creates a thick volume of `size_bytes` with creation properties, durable on return.
    pub fn create_volume(
        &self,
        name: &str,
        size_bytes: u64,
        requested: &[(String, String)],
    ) -> Result<(), EngineError> {
        self.create_volume_as(name, size_bytes, Provisioning::Thick, requested)
    }

    /// Creates a volume of `size_bytes`, thick or sparse, with creation properties, durable
    /// on return.
    pub fn create_volume_as(
        &self,
        name: &str,
        size_bytes: u64,
        provisioning: Provisioning,
        requested: &[(String, String)],
    ) -> Result<(), EngineError> {
        let properties = volume_creation_properties(size_bytes, provisioning, requested)?;
        // Validated in open context for a prompt error; the task checks again.
        self.check_new_dataset(name, DatasetKind::Volume)?;
        let mut trial = self.core.directory.lock().clone();
        trial.insert(name, DatasetKind::Volume, 0, properties.clone())?;
        self.core.check_reservations(&trial, Some(name))?;
        let block_bytes = trial.properties_of(name)?.volblocksize_bytes;
        let name = name.to_string();
        self.run_sync_task(move |core, txg| {
            let objset = core.insert_dataset(&name, DatasetKind::Volume, txg, properties)?;
            let capacity_blocks = size_bytes / u64::from(block_bytes);
            objset.create_object(
                txg,
                VOLUME_OBJECT,
                ObjectType::VolumeData,
                block_bytes,
                capacity_blocks,
            );
            core.objsets.lock().insert(name, objset);
            Ok(())
        })?;
        // Properties given at create (primarycache, checksum...) hold from the first write.
        self.apply_properties();
        Ok(())
    }

    /// Fails unless `name` is free, well formed and inside an existing dataset.
    pub(crate) fn check_new_dataset(
        &self,
        name: &str,
        kind: DatasetKind,
    ) -> Result<(), EngineError> {
        cairn_dataset::validate_name(name)?;
        let directory = self.core.directory.lock();
        if directory.datasets.contains_key(name) {
            return Err(DatasetError::Exists(name.to_string()).into());
        }
        if directory
            .datasets
            .contains_key(&cairn_dataset::receive_name(name))
        {
            return Err(
                DatasetError::Exists(format!("{name} (a receive into it is under way)")).into(),
            );
        }
        let parent = name
            .rsplit_once('/')
            .map(|(parent, _)| parent)
            .ok_or_else(|| DatasetError::InvalidName {
                name: name.into(),
                reason: format!("a {} must be inside a pool (pool/name)", kind.as_str()),
            })?;
        directory.get(parent)?;
        Ok(())
    }

    /// Destroys a dataset (which must have no children), durable on return.
    pub fn destroy_dataset(&self, name: &str) -> Result<(), EngineError> {
        refuse_hidden(name)?;
        self.destroy_dataset_any(name)
    }

    /// `destroy_dataset`, of a receive's hidden dataset too.
    pub(crate) fn destroy_dataset_any(&self, name: &str) -> Result<(), EngineError> {
        {
            let directory = self.core.directory.lock();
            directory.get(name)?;
            if !name.contains('/') {
                return Err(DatasetError::InvalidName {
                    name: name.into(),
                    reason: "the root dataset goes with the pool (cairn pool destroy)".into(),
                }
                .into());
            }
            if let Some(child) = directory.children(name).next() {
                return Err(DatasetError::InvalidName {
                    name: name.into(),
                    reason: format!("has children ({})", child.name),
                }
                .into());
            }
            let id = directory.get(name)?.id;
            if let Some(snapshot) = self.core.snapshots.lock().snapshots_of(id).next() {
                return Err(DatasetError::HasDependents {
                    name: name.into(),
                    what: format!(
                        "snapshots ({name}@{}, ...): destroy them first (cairn destroy {name}@SNAP)",
                        snapshot.info.name
                    ),
                }
                .into());
            }
        }
        if let Some(volume) = self.volumes.lock().remove(name) {
            volume.set_readonly(true);
        }
        self.filesystems.lock().remove(name);
        let intent_log = self.core.intent_logs.lock().remove(name);
        // Everything already written to the dataset reaches disk first, so the task frees a
        // tree that no other sync is still changing.
        self.sync()?;
        let name = name.to_string();
        self.run_sync_task(move |core, txg| {
            let objset = core.objsets.lock().remove(&name);
            if let Some(intent_log) = &intent_log {
                intent_log.release_all(txg);
            }
            let mut directory = core.directory.lock();
            let mut table = core.snapshots.lock();
            // Its tree is freed in the background, a bounded number of blocks per txg; a clone's
            // only what was born after its origin (the origin holds the rest), walking only the
            // subtrees born since, so its cost follows what was written to it, not its size.
            let mut freeing_bytes = 0;
            if let (Some(objset), Ok(record)) = (objset, directory.get(&name)) {
                let floor_txg = table.floor_txg(record.id);
                let own_bytes = record
                    .used_bytes
                    .saturating_sub(table.origin_shared_bytes(record.id));
                table.queue_tree_free(&objset.root_bp(), floor_txg, own_bytes);
                freeing_bytes = own_bytes;
            }
            if let Some(record) = directory.datasets.remove(&name) {
                // Its deadlist's record (left by destroyed snapshots) and its origin record
                // go with it.
                for object in table.forget_dataset(record.id) {
                    core.free_mos_object(txg, object);
                }
                crate::snapshot_sync::refresh_snapshot_bytes(&mut directory, &table);
                core.snapshot_stats
                    .follow_frees(&table, txg, &format!("dataset {name}"));
                core.snapshot_stats
                    .note(crate::snapshot_stats::SnapshotChange::DatasetDestroyed {
                        dataset: name.clone(),
                        freeing_bytes,
                    });
            }
            Ok(())
        })?;
        // Make the freed space usable (and visible in `pool list`) now, not a few txgs later.
        reclaim_deferred(&self.core, self.txg_engine()?);
        Ok(())
    }

    pub fn set_property(
        &self,
        dataset: &str,
        property: &str,
        value: &str,
    ) -> Result<String, EngineError> {
        refuse_hidden(dataset)?;
        // Validate first so errors come back without a txg.
        let canonical = {
            let mut trial = self.core.directory.lock().clone();
            let canonical = trial.set_property(dataset, property, value)?;
            self.core
                .check_reservations(&trial, limits_changed(dataset, property))?;
            canonical
        };
        let (dataset_name, property_name, value_text) =
            (dataset.to_string(), property.to_string(), value.to_string());
        self.run_sync_task(move |core, _| {
            let mut trial = core.directory.lock().clone();
            trial.set_property(&dataset_name, &property_name, &value_text)?;
            core.check_reservations(&trial, limits_changed(&dataset_name, &property_name))?;
            core.directory
                .lock()
                .set_property(&dataset_name, &property_name, &value_text)?;
            Ok(())
        })?;
        self.apply_properties();
        // Inherited values may change below `dataset` too.
        let open: Vec<String> = self.filesystems.lock().keys().cloned().collect();
        for name in open {
            self.refresh_filesystem(&name)?;
        }
        Ok(canonical)
    }

    /// Pushes property values that have an in-memory effect to open objects.
    pub(crate) fn apply_properties(&self) {
        let directory = self.core.directory.lock();
        let resolved = |name: &str| directory.properties_of(name).ok();
        for (name, objset) in self.core.objsets.lock().iter() {
            if let Some(properties) = resolved(name) {
                objset.set_checksum(properties.checksum);
                objset.set_compression(properties.compression);
                objset.set_cache_mode(properties.primarycache);
                objset.set_secondary_cache_mode(properties.secondarycache);
            }
        }
        for (name, volume) in self.volumes.lock().iter() {
            if let Some(properties) = resolved(name) {
                volume.set_readonly(self.is_readonly() || properties.readonly);
                volume.set_sync_mode(properties.sync);
            }
        }
        for (name, log) in self.core.intent_logs.lock().iter() {
            if let Some(properties) = resolved(name) {
                log.set_use_log_devices(properties.logbias.uses_log_devices());
            }
        }
    }

    /// The volume API for a volume dataset. Its data object must match its directory record
    /// (`check_volume_object`): the volume layer relies on both agreeing on the block size.
    pub fn volume(&self, name: &str) -> Result<Arc<Volume>, EngineError> {
        refuse_hidden(name)?;
        if let Some(volume) = self.volumes.lock().get(name) {
            return Ok(volume.clone());
        }
        if name.contains('@') {
            return self.snapshot_volume(name);
        }
        let engine = self.readers_engine();
        let properties = self
            .core
            .directory
            .lock()
            .properties_of_kind(name, DatasetKind::Volume)?;
        let (size, block_size) = (properties.volsize_bytes, properties.volblocksize_bytes);
        let readonly = self.is_readonly() || properties.readonly;
        let sync_mode = properties.sync;
        let objset = self.core.objset(name)?;
        check_volume_object(name, &objset, block_size)?;
        let space_check = self.space_check(name, &engine, objset.clone());
        // A read-only pool's volume has no intent log: it would allocate log blocks.
        let intent_log = (!self.is_readonly()).then(|| {
            self.core.new_intent_log(
                name,
                engine.clone(),
                objset.clone(),
                properties.loglanes.0,
                properties.logbias,
            )
        });
        let volume = Volume::new(
            name.to_string(),
            objset,
            engine,
            size,
            block_size,
            readonly,
            space_check,
        );
        let volume = match &intent_log {
            Some(intent_log) => volume.with_intent_log(intent_log.clone()),
            None => volume,
        };
        let volume = match &self.read_trace_dir {
            Some(dir) => volume
                .with_read_trace(dir)
                .map_err(|source| DatasetError::ReadTrace {
                    name: name.to_string(),
                    dir: dir.display().to_string(),
                    source,
                })?,
            None => volume,
        };
        volume.set_sync_mode(sync_mode);
        let volume = Arc::new(volume);
        if let Some(intent_log) = intent_log {
            self.core
                .intent_logs
                .lock()
                .insert(name.to_string(), intent_log);
        }
        self.volumes.lock().insert(name.to_string(), volume.clone());
        Ok(volume)
    }
}

impl PoolCore {
    /// Recomputes the reservation view after the directory changed (sync, import).
    pub(crate) fn refresh_space_view(&self) {
        let view = SpaceView::of(&self.directory.lock());
        *self.space_view.lock() = Arc::new(view);
    }

    /// Refuses a directory whose reservations the pool could not honour. Takes the space lock
    /// alone, so callers build `trial` without holding the directory lock.
    /// In a sync task of `txg`: records dataset `name` in the directory (its reservations
    /// checked again) and creates its empty object set, which the caller fills and registers.
    pub(crate) fn insert_dataset(
        &self,
        name: &str,
        kind: DatasetKind,
        txg: u64,
        properties: BTreeMap<String, String>,
    ) -> Result<Arc<ObjectSet>, EngineError> {
        let mut trial = self.directory.lock().clone();
        trial.insert(name, kind, txg, properties.clone())?;
        self.check_reservations(&trial, Some(name))?;
        let mut directory = self.directory.lock();
        directory.insert(name, kind, txg, properties)?;
        let checksum = directory.properties_of(name)?.checksum;
        drop(directory);
        let objset_type = match kind {
            DatasetKind::Volume => ObjsetType::Volume,
            DatasetKind::Filesystem => ObjsetType::Filesystem,
        };
        Ok(Arc::new(ObjectSet::create(
            self.mos.cached_io().clone(),
            objset_type,
            checksum,
        )))
    }

    /// Also checks the limits of dataset `limits_of` (a new dataset, or one whose quota or
    /// reservation is being set) against each other and its use.
    pub(crate) fn check_reservations(
        &self,
        trial: &DatasetDirectory,
        limits_of: Option<&str>,
    ) -> Result<(), DatasetError> {
        let available = self.space.lock().available_bytes();
        let view = SpaceView::of(trial);
        if let Some(name) = limits_of {
            view.check_limits(name)?;
        }
        view.check_fits(available)
    }
}

/// The figures `get` shows beside the properties, read-only (source `-`), with ZFS's names:
/// USED broken down, `written` since the newest snapshot, the number of snapshots.
fn space_properties(
    space: &cairn_dataset::space::DatasetSpace,
    snapshots: &cairn_dataset::snapshots::SnapshotTable,
    record: &cairn_dataset::DatasetRecord,
) -> Vec<(&'static str, String, String)> {
    let figures = [
        ("usedbydataset", space.dataset_bytes()),
        ("usedbysnapshots", space.snapshots_bytes),
        ("usedbychildren", space.children_bytes),
        ("usedbyrefreservation", space.refreservation_unused_bytes),
        (
            "written",
            snapshots.head_written(record.id, record.used_bytes),
        ),
        (
            "snapshot_count",
            snapshots.snapshots_of(record.id).count() as u64,
        ),
    ];
    figures
        .into_iter()
        .map(|(name, value)| (name, value.to_string(), "-".to_string()))
        .collect()
}

/// A receive's hidden dataset is no dataset to any command (`cairn_dataset::is_hidden`).
pub(crate) fn refuse_hidden(name: &str) -> Result<(), EngineError> {
    if cairn_dataset::is_hidden(name) {
        return Err(DatasetError::NoSuchDataset(name.to_string()).into());
    }
    Ok(())
}

/// The dataset whose limits a change of `property` on `dataset` must be checked for.
fn limits_changed<'a>(dataset: &'a str, property: &str) -> Option<&'a str> {
    cairn_dataset::properties::lookup(property)
        .is_ok_and(|def| def.is_space_limit())
        .then_some(dataset)
}

/// Checks that a volume's data object, as read from disk, is what its directory record says:
/// a volume data object of `volblocksize` blocks. A crafted image could make them disagree,
/// and every later write would then be a block of the wrong size.
fn check_volume_object(name: &str, objset: &ObjectSet, block_size: u32) -> Result<(), EngineError> {
    let damaged = |problem: String| -> EngineError {
        DatasetError::DamagedVolume {
            name: name.to_string(),
            problem,
        }
        .into()
    };
    let dnode = objset
        .dnode(VOLUME_OBJECT)
        .map_err(|err| damaged(format!("cannot be read: {}", crate::error_chain(&err))))?;
    let problem = if dnode.is_free() {
        "does not exist".to_string()
    } else if dnode.object_type != ObjectType::VolumeData {
        format!("has type {:?}", dnode.object_type)
    } else if dnode.data_block_size != block_size {
        format!(
            "has {}-byte blocks, volblocksize is {block_size}",
            dnode.data_block_size
        )
    } else {
        return Ok(());
    };
    Err(damaged(problem))
}
