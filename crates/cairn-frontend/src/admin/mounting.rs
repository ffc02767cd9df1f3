//! `AdminRequest::Mount` and `AdminRequest::Unmount`: filesystems mounted through FUSE live in
//! the server that owns their pool (the one process that may write it), so these are answered
//! by a server only; a front end without one starts one first (the CLI's `mount` does).
//!
//! Invariants: a mount takes the server's live pool (never one opened for the request); an
//! unmount names a dataset or a mountpoint this server mounted, and one the kernel already let
//! go from outside is forgotten, not reported as an error.

use super::AdminError;
use super::failures::failed;
use crate::PoolAccess;
use crate::fuse::Unmounted;
use std::path::{Path, PathBuf};

/// Mounts filesystem `dataset` at `mountpoint` (its property when `None`) with `options`; where
/// it was mounted.
pub(super) fn mount(
    access: &PoolAccess,
    dataset: &str,
    mountpoint: Option<&Path>,
    options: &str,
) -> Result<PathBuf, AdminError> {
    let served = access.served.as_ref().ok_or_else(|| {
        AdminError::Refused(format!("cannot mount '{dataset}': no server runs the pool"))
    })?;
    let fail = || format!("cannot mount '{dataset}'");
    let pool_name = dataset.split_once('/').map_or(dataset, |(pool, _)| pool);
    let pool = access
        .served_pool(served, pool_name)
        .map_err(|err| failed(fail(), err))?;
    served
        .mounts
        .mount(&pool, dataset, mountpoint, options)
        .map_err(|err| failed(fail(), err))
}

/// Unmounts `target` (a dataset or a mountpoint).
pub(super) fn unmount(access: &PoolAccess, target: &str) -> Result<Unmounted, AdminError> {
    let Some(served) = access.served.as_ref() else {
        return Err(AdminError::Refused(format!(
            "cannot unmount '{target}': no server runs (nothing cairn mounted is mounted)"
        )));
    };
    match served.mounts.unmount(target) {
        Ok(Some(unmounted)) => Ok(unmounted),
        Ok(None) => Err(AdminError::Refused(format!(
            "cannot unmount '{target}': not mounted by this server"
        ))),
        Err(err) => Err(failed(format!("cannot unmount '{target}' (busy?)"), err)),
    }
}
