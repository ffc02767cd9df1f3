//! `handle`: the one entry of the administration library for typed requests (but those that
//! take a stream: `streams.rs`). A server runs it for every request on its control socket (one
//! at a time); a front end with no server runs it in its own process with the same
//! `PoolAccess` shape, so both give the same answers.
//!
//! Invariants: prints nothing; a pool that cannot be opened, met while working over every pool
//! (the request named none), becomes a note and is skipped; named, it is the error.

use super::failures::skip_unavailable;
use super::mirrors::{self, Progress};
use super::operations::change_pool;
use super::request::{AdminReply, AdminRequest, Answer};
use super::samples::{self, ArcSample, DeviceIoSample, L2arcSample, PoolSample};
use super::{
    AdminError, dataset_rows, import_request, mounting, operations, stats, streams, views,
};
use crate::PoolAccess;

/// Runs one request against `access`'s pools; `command_line` is what the pools' histories
/// record for a change.
pub fn handle(
    access: &PoolAccess,
    command_line: &str,
    request: AdminRequest,
) -> Result<Answer, AdminError> {
    handle_observed(access, command_line, request, &mut |_| {})
}

/// `handle`, with the progress of long work (a scrub, a resilver waited for) reported to
/// `observe` as it goes: for a front end that runs requests in its own process.
pub fn handle_observed(
    access: &PoolAccess,
    command_line: &str,
    request: AdminRequest,
    observe: &mut dyn FnMut(Progress),
) -> Result<Answer, AdminError> {
    let mut notes = Vec::new();
    let reply = match request {
        AdminRequest::DatasetIo => AdminReply::DatasetIo(samples::dataset_io(served(
            access,
            "pool iostat reports the I/O of",
        )?)),
        AdminRequest::DeviceIo { pools } => {
            AdminReply::DeviceIo(device_io(access, &pools, &mut notes)?)
        }
        AdminRequest::ArcCounters => AdminReply::ArcCounters(ArcSample {
            served: access.served.is_some(),
            fields: samples::counters(&cairn_engine::process_cache().stats().fields),
        }),
        AdminRequest::L2arcCounters { pools } => {
            AdminReply::L2arcCounters(l2arc(access, &pools, &mut notes)?)
        }
        AdminRequest::Pool(change) => change_pool(access, command_line, change, &mut notes)?,
        AdminRequest::Dataset(change) => {
            operations::change_dataset(access, command_line, change, &mut notes)?
        }
        AdminRequest::SyncPools { pools } => operations::sync(access, &pools, &mut notes)?,
        AdminRequest::History { pool } => operations::history(access, &pool)?,
        AdminRequest::Txgs { pool } => operations::txgs(access, &pool)?,
        AdminRequest::CacheLimits { pool } => operations::cache_limits(access, &pool)?,
        AdminRequest::Holds { names } => AdminReply::Holds(super::holds(access, &names)?),
        AdminRequest::DestroyPreview { name } => {
            let (names, bytes) = super::destroy_preview(access, &name)?;
            AdminReply::DestroyPreview { names, bytes }
        }
        AdminRequest::WrittenSince { dataset, snapshot } => {
            AdminReply::Bytes(super::written_since(access, &dataset, &snapshot)?)
        }
        AdminRequest::SnapshotDigest { snapshot } => {
            AdminReply::Digest(super::snapshot_digest(access, &snapshot)?)
        }
        AdminRequest::DiffBlocks { older, newer } => {
            AdminReply::BlockDiff(super::diff_blocks(access, &older, &newer)?)
        }
        AdminRequest::DiffFiles { older, newer } => {
            AdminReply::FileDiff(super::diff_files(access, &older, &newer)?)
        }
        AdminRequest::PoolViews { pools } => {
            AdminReply::PoolViews(views::pool_views(access, &pools)?)
        }
        AdminRequest::Mirror(change) => AdminReply::Mirror(mirrors::change_mirror(
            access,
            command_line,
            change,
            observe,
        )?),
        AdminRequest::Clear {
            pool,
            rate_bytes_per_s,
        } => AdminReply::Cleared(mirrors::clear(
            access,
            command_line,
            &pool,
            rate_bytes_per_s,
            observe,
        )?),
        AdminRequest::Scrub { pool } => {
            AdminReply::Scrubbed(mirrors::scrub(access, command_line, &pool, observe)?)
        }
        AdminRequest::Import(request) => {
            AdminReply::Import(import_request::import(access, command_line, &request)?)
        }
        AdminRequest::Check { pool, dirs } => {
            AdminReply::Checked(import_request::check(access, &pool, &dirs)?)
        }
        AdminRequest::Mount {
            dataset,
            mountpoint,
            options,
        } => AdminReply::Mounted(mounting::mount(
            access,
            &dataset,
            mountpoint.as_deref(),
            &options,
        )?),
        AdminRequest::Unmount { target } => {
            AdminReply::Unmounted(mounting::unmount(access, &target)?)
        }
        AdminRequest::ZilStats { pools } => {
            AdminReply::ZilStats(stats::zil(access, &pools, &mut notes)?)
        }
        AdminRequest::IoStats { pools } => {
            AdminReply::IoStats(stats::io(access, &pools, &mut notes)?)
        }
        AdminRequest::FsStats { pools } => AdminReply::FsStats(stats::fs(access, &pools)),
        AdminRequest::MemoryStats => AdminReply::MemoryStats(stats::memory(access)),
        AdminRequest::SnapshotStats { pools } => {
            AdminReply::SnapshotStats(stats::snapshots(access, &pools, &mut notes)?)
        }
        AdminRequest::NfsStats => AdminReply::NfsStats(stats::nfs(access)),
        AdminRequest::Datasets { pools } => {
            AdminReply::Datasets(dataset_rows::pool_datasets(access, &pools, &mut notes)?)
        }
        // Send and receive (`streams.rs`): those without a stream, and the refusal of those
        // that need one.
        other => streams::handle_without_stream(access, other)?,
    };
    Ok(Answer { reply, notes })
}

/// The server's registry, for requests only a running server can answer.
fn served<'a>(
    access: &'a PoolAccess,
    what: &'static str,
) -> Result<&'a crate::ServedPools, AdminError> {
    access.served.as_deref().ok_or(AdminError::NeedsServer {
        state_dir: access.cache.dir().to_path_buf(),
        what,
    })
}

fn device_io(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<DeviceIoSample, AdminError> {
    let served = served(access, "pool iostat reports the I/O of")?;
    let mut sample = DeviceIoSample {
        uptime_s: served.uptime_s(),
        pools: Vec::new(),
    };
    for name in access.pools_or_all(pools)? {
        let io = access.with_pool(&name, false, |pool| Ok(pool.device_io()));
        if let Some(io) = skip_unavailable(io, !pools.is_empty(), notes)? {
            sample.pools.push(PoolSample::new(&name, io));
        }
    }
    Ok(sample)
}

fn l2arc(
    access: &PoolAccess,
    pools: &[String],
    notes: &mut Vec<String>,
) -> Result<L2arcSample, AdminError> {
    let mut sample = L2arcSample {
        served: access.served.is_some(),
        pools: Vec::new(),
    };
    for name in access.pools_or_all(pools)? {
        let opened = access.with_pool(&name, false, |pool| Ok(pool.l2arc_fields()));
        if let Some(Some(fields)) = skip_unavailable(opened, !pools.is_empty(), notes)? {
            sample.pools.push((name, samples::counters(&fields)));
        }
    }
    Ok(sample)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PoolCache, PoolsError};

    #[test]
    fn requests_without_a_server_are_answered_here_or_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let access = PoolAccess::new(PoolCache::new(dir.path().to_path_buf()));
        let answer = handle(
            &access,
            "cairn",
            AdminRequest::PoolViews { pools: Vec::new() },
        )
        .unwrap();
        let AdminReply::PoolViews(views) = answer.reply else {
            panic!("not pool views");
        };
        assert!(views.names.is_empty() && views.views.is_empty());
        let err = handle(&access, "cairn", AdminRequest::DatasetIo).unwrap_err();
        assert!(
            err.to_string().contains("no cairn server is running"),
            "{err}"
        );
        let err = handle(
            &access,
            "cairn",
            AdminRequest::History {
                pool: "tank".to_string(),
            },
        )
        .unwrap_err();
        assert!(
            matches!(err, AdminError::Pools(PoolsError::NotImported(_))),
            "{err}"
        );
        // A named pool that is no pool is a failure beside the (empty) views.
        let answer = handle(
            &access,
            "cairn",
            AdminRequest::PoolViews {
                pools: vec!["tank".to_string()],
            },
        )
        .unwrap();
        let AdminReply::PoolViews(views) = answer.reply else {
            panic!("not pool views");
        };
        assert_eq!(views.failures.len(), 1);
        assert!(views.failures[0].contains("no such pool 'tank'"));
    }
}
