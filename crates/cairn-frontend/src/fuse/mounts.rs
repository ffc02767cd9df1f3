//! The server's list of its mounts (`Mounts`), by dataset name, kept true to the kernel's:
//! a mount let go from outside (a plain `umount`) is forgotten at the next look, a busy one
//! stays listed. With a record file, the mountpoints are also kept on disk, so that the
//! next server of the same state directory detaches only its own dead mounts
//! (`mountinfo.rs`).
//!
//! Invariants: a dataset is listed only while its mount is there (or could not be
//! unmounted); one dataset per mountpoint and one mount per dataset. Uses `mount.rs`,
//! `rollback.rs`, `mount_flags.rs`, `mountinfo.rs` and `adapter.rs`'s `SpaceFn`; `cairn serve` keeps one
//! (`pools.rs`).

use super::adapter::SpaceFn;
use super::mount::{FuseMount, MountError, mount};
use super::mount_flags::MountFlags;
use super::mountinfo::{dead_cairn_mounts, detach};
use super::snapdir::SnapshotDir;
use cairn_fs::Filesystem;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

/// What `Mounts::unmount` found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Unmounted {
    /// Unmounted now.
    Now { dataset: String },
    /// It had been unmounted from outside (`umount`); forgotten now.
    Already { dataset: String },
}

/// The mounts of a server, by dataset name. A mount the kernel let go from outside (a plain
/// `umount`) is forgotten at the next look, so the server never believes a dataset is
/// mounted when it is not; a mount that could not be unmounted (busy) stays known. With a
/// record (`keep_record`), the mountpoints are also kept in a file, so that a server started
/// after this one was killed detaches only the dead mounts that were its own.
#[derive(Default)]
pub struct Mounts {
    mounts: parking_lot::Mutex<std::collections::BTreeMap<String, FuseMount>>,
    record: parking_lot::Mutex<Option<std::path::PathBuf>>,
}

impl Mounts {
    /// Keeps the mountpoints in the file at `path` from now on (`clear_dead_cairn_mounts`
    /// reads it).
    pub fn keep_record(&self, path: &Path) {
        *self.record.lock() = Some(path.to_path_buf());
        self.write_record(&self.mounts.lock());
    }

    fn write_record(&self, mounts: &std::collections::BTreeMap<String, FuseMount>) {
        let Some(path) = self.record.lock().clone() else {
            return;
        };
        let mut text = Vec::new();
        for mount in mounts.values() {
            let bytes = mount.mountpoint.as_os_str().as_bytes();
            if !bytes.contains(&b'\n') {
                text.extend_from_slice(bytes);
                text.push(b'\n');
            }
        }
        // A record that cannot be written only means a later server detaches less.
        let _ = std::fs::write(path, text);
    }

    /// Forgets the mounts the kernel let go; returns their datasets.
    fn forget_ended(
        &self,
        mounts: &mut std::collections::BTreeMap<String, FuseMount>,
    ) -> Vec<String> {
        let ended: Vec<String> = mounts
            .iter()
            .filter(|(_, mount)| mount.ended())
            .map(|(dataset, _)| dataset.clone())
            .collect();
        for dataset in &ended {
            // Its session has ended: dropping it only joins the threads.
            mounts.remove(dataset);
        }
        if !ended.is_empty() {
            self.write_record(mounts);
        }
        ended
    }

    /// Mounts the filesystem dataset `dataset` of `pool` at `mountpoint` (or its `mountpoint`
    /// property), creating the directory if missing.
    /// `options`: mount options over the dataset's properties for this mount
    /// (`MountFlags::with_options`).
    pub fn mount(
        &self,
        pool: &Arc<cairn_engine::Pool>,
        dataset: &str,
        mountpoint: Option<&Path>,
        options: &str,
    ) -> Result<std::path::PathBuf, MountError> {
        let open_error = |source| MountError::Open {
            dataset: dataset.to_string(),
            source: Box::new(source),
        };
        let flags = MountFlags::of_dataset(pool, dataset)
            .map_err(open_error)?
            .with_options(options)
            .map_err(|source| MountError::Options {
                dataset: dataset.to_string(),
                source,
            })?;
        let mountpoint = match mountpoint {
            Some(path) => path.to_path_buf(),
            None => pool
                .dataset_properties(dataset)
                .map_err(open_error)?
                .mountpoint
                .ok_or_else(|| MountError::NoMountpoint {
                    dataset: dataset.to_string(),
                })?,
        };
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        if let Some(existing) = mounts.get(dataset) {
            return Err(MountError::AlreadyMounted {
                dataset: dataset.to_string(),
                mountpoint: existing.mountpoint.display().to_string(),
            });
        }
        if let Some((other, _)) = mounts
            .iter()
            .find(|(_, mount)| mount.mountpoint == mountpoint)
        {
            return Err(MountError::MountpointTaken {
                dataset: dataset.to_string(),
                mountpoint: mountpoint.display().to_string(),
                other: other.clone(),
            });
        }
        let fs = pool.filesystem(dataset).map_err(open_error)?;
        // A mount a killed server left there answers nothing: take it away first.
        if dead_cairn_mounts().contains(&mountpoint) {
            detach(&mountpoint);
        }
        std::fs::create_dir_all(&mountpoint).map_err(|source| MountError::Mount {
            dataset: dataset.to_string(),
            mountpoint: mountpoint.display().to_string(),
            source,
        })?;
        let space_pool = pool.clone();
        let space_dataset = dataset.to_string();
        let space: SpaceFn = Arc::new(move || {
            // The dataset's size and AVAIL (a quota shows as its size, as `df` on ZFS); the
            // pool's figures if the dataset went away under the mount.
            space_pool
                .filesystem_space(&space_dataset)
                .unwrap_or_else(|_| {
                    let status = space_pool.status();
                    (status.size_bytes, status.free_bytes)
                })
        });
        let snapshots = SnapshotDir::new(pool.clone(), dataset);
        let mounted = mount(fs, &mountpoint, space, flags, Some(snapshots))?;
        mounts.insert(dataset.to_string(), mounted);
        self.write_record(&mounts);
        Ok(mountpoint)
    }

    /// Unmounts the dataset named `target`, or the one mounted at `target`; `None` if
    /// nothing matches. A busy mount stays mounted and known (the error says so).
    pub fn unmount(&self, target: &str) -> std::io::Result<Option<Unmounted>> {
        let mut mounts = self.mounts.lock();
        let matches =
            |dataset: &str, mountpoint: &Path| dataset == target || mountpoint == Path::new(target);
        let ended: Vec<(String, std::path::PathBuf)> = mounts
            .iter()
            .filter(|(_, mount)| mount.ended())
            .map(|(dataset, mount)| (dataset.clone(), mount.mountpoint.clone()))
            .collect();
        self.forget_ended(&mut mounts);
        if let Some((dataset, _)) = ended
            .into_iter()
            .find(|(dataset, mountpoint)| matches(dataset, mountpoint))
        {
            return Ok(Some(Unmounted::Already { dataset }));
        }
        let Some(dataset) = mounts
            .iter()
            .find(|(dataset, mount)| matches(dataset, &mount.mountpoint))
            .map(|(dataset, _)| dataset.clone())
        else {
            return Ok(None);
        };
        let Some(mount) = mounts.get_mut(&dataset) else {
            return Ok(None);
        };
        mount.unmount()?;
        mounts.remove(&dataset);
        self.write_record(&mounts);
        Ok(Some(Unmounted::Now { dataset }))
    }

    /// Unmounts everything of `pool` (before it is exported), or everything: each dataset
    /// with its mountpoint and what unmounting it gave. Those that could not be unmounted
    /// (busy) stay mounted and known.
    pub fn unmount_all(
        &self,
        pool: Option<&str>,
    ) -> Vec<(String, std::path::PathBuf, std::io::Result<()>)> {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        let keys: Vec<String> = mounts
            .keys()
            .filter(|dataset| pool.is_none_or(|pool| dataset.split('/').next() == Some(pool)))
            .cloned()
            .collect();
        let mut outcomes = Vec::with_capacity(keys.len());
        for key in keys {
            let Some(mount) = mounts.get_mut(&key) else {
                continue;
            };
            let mountpoint = mount.mountpoint.clone();
            let result = mount.unmount();
            if result.is_ok() {
                mounts.remove(&key);
            }
            outcomes.push((key, mountpoint, result));
        }
        self.write_record(&mounts);
        outcomes
    }

    /// Makes the flags of the mounts of `pool`'s datasets what their properties now say
    /// (after `readonly`, `devices`, `setuid` or `exec` changed; what `cairn mount -o` asked
    /// for is replaced, as ZFS does), and their roots' listings show `.cairn` as `snapdir`
    /// says. Returns the datasets whose mount could not be changed,
    /// with why.
    pub fn apply_properties(&self, pool: &cairn_engine::Pool) -> Vec<(String, std::io::Error)> {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        let mut failures = Vec::new();
        for (dataset, mount) in mounts.iter_mut() {
            if dataset.split('/').next() != Some(pool.name()) {
                continue;
            }
            // `snapdir` may have changed what the root lists.
            mount.drop_root_listing();
            let readonly = mount.filesystem().is_readonly();
            let result = MountFlags::of_dataset(pool, dataset)
                .map_err(|err| std::io::Error::other(err.to_string()))
                .and_then(|flags| {
                    mount.set_flags(MountFlags {
                        read_only: flags.read_only || readonly,
                        ..flags
                    })
                });
            if let Err(err) = result {
                failures.push((dataset.clone(), err));
            }
        }
        failures
    }

    /// Has the kernel write back the pages it holds dirty for each of `datasets` that this
    /// server mounted (`syncfs` on the mountpoint), so that a write an application saw
    /// complete before now has reached the filesystem: what a snapshot must contain. With the
    /// writeback cache the kernel acknowledges writes before cairn has them.
    pub fn write_back(&self, datasets: &[String]) -> Vec<(String, std::io::Error)> {
        let mountpoints: Vec<(String, std::path::PathBuf)> = self
            .list()
            .into_iter()
            .filter(|(dataset, _)| datasets.contains(dataset))
            .collect();
        let mut failures = Vec::new();
        for (dataset, mountpoint) in mountpoints {
            let synced = std::fs::File::open(&mountpoint)
                .and_then(|dir| rustix::fs::syncfs(&dir).map_err(std::io::Error::from));
            if let Err(err) = synced {
                failures.push((dataset, err));
            }
        }
        failures
    }

    /// Rolls `snapshot`'s dataset back (`Pool::rollback`), under its mount if this server
    /// mounted it (`rollback.rs`: the mount stays and shows the snapshot's state at once).
    pub fn roll_back(
        &self,
        pool: &cairn_engine::Pool,
        snapshot: &str,
        destroy_newer: bool,
        force: bool,
    ) -> Result<(), cairn_engine::EngineError> {
        let dataset = snapshot.split('@').next().unwrap_or(snapshot);
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        match mounts.get(dataset) {
            Some(mount) => mount.roll_back(pool, snapshot, destroy_newer, force),
            None => pool.rollback(snapshot, destroy_newer, force),
        }
    }

    /// Whether `dataset` is mounted by this server now.
    pub fn is_mounted(&self, dataset: &str) -> bool {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        mounts.contains_key(dataset)
    }

    /// Every mounted filesystem, by dataset name (for statistics).
    pub fn filesystems(&self) -> Vec<(String, Arc<Filesystem>)> {
        self.mounts
            .lock()
            .iter()
            .map(|(dataset, mount)| (dataset.clone(), mount.filesystem()))
            .collect()
    }

    /// Dataset and mountpoint of every mount (mounts let go from outside forgotten first).
    pub fn list(&self) -> Vec<(String, std::path::PathBuf)> {
        let mut mounts = self.mounts.lock();
        self.forget_ended(&mut mounts);
        mounts
            .iter()
            .map(|(dataset, mount)| (dataset.clone(), mount.mountpoint.clone()))
            .collect()
    }
}
