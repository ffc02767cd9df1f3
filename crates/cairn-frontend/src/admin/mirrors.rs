//! Mirror sides and the work that checks or repairs copies: `pool attach | replace | detach`,
//! `pool clear` (faulted sides that answer again rejoin) and `pool scrub`.
//!
//! Policy kept here: the new side of an attach or replace passes the same device checks as a
//! pool's devices (it exists, or a size to create it was given), and a file created for it is
//! removed again when the change fails; the pool cache follows the pool's devices after every
//! change (and again after a replace's resilver detached the old side). A server keeps a
//! resilver going while it serves, so its requests return at once; a one-shot process holds
//! the pool only for the request's length, so it waits for the resilver (unless told not to:
//! the rest resumes at the next import or `cairn serve`). Progress while waiting goes to the
//! caller's observer; nothing is printed.

use super::AdminError;
use super::failures::failed;
use super::pools::record_history;
use super::{CreatedFiles, check_devices_exist};
use crate::PoolAccess;
use cairn_dataset::ScrubRecord;
use cairn_device::spec::DeviceSpec;
use cairn_engine::{
    CreateOptions, EngineError, Pool, ResilverOptions, ResilverStatus, ScrubProgress, VdevGroup,
};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// How often a waiting request reports resilver progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(2);
/// How often it looks whether the resilver is done.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Progress of long work, for a front end that shows it while it waits (in its own process).
#[derive(Debug, Clone)]
pub enum Progress {
    Scrub(ScrubProgress),
    Resilver(ResilverStatus),
}

/// A change of mirror sides (`AdminRequest::Mirror`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum MirrorChange {
    /// `new` beside `existing` (a single device becomes a mirror; a mirror gains a side).
    Attach {
        pool: String,
        existing: String,
        new: String,
        resilver: ResilverRequest,
    },
    /// `new` in place of `old`: attached, resilvered, then `old` detached.
    Replace {
        pool: String,
        old: String,
        new: String,
        resilver: ResilverRequest,
    },
    Detach {
        pool: String,
        device: String,
    },
}

/// What attach and replace share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResilverRequest {
    /// Create a missing file for the new side, of this size.
    pub create_size_bytes: Option<u64>,
    /// Use the new side even if it belongs to another pool.
    pub force: bool,
    pub rate_bytes_per_s: Option<u64>,
    /// Return once the resilver has started, even in a one-shot process.
    pub no_wait: bool,
}

/// What a mirror change did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MirrorOutcome {
    /// `device` attached to vdev `vdev`; the resilver's end when this request waited for it.
    Attached {
        device: String,
        vdev: String,
        finished: Option<ResilverStatus>,
    },
    Detached {
        device: String,
    },
}

/// Runs one mirror change.
pub(super) fn change_mirror(
    access: &PoolAccess,
    command_line: &str,
    change: MirrorChange,
    observe: &mut dyn FnMut(Progress),
) -> Result<MirrorOutcome, AdminError> {
    match change {
        MirrorChange::Attach {
            pool,
            existing,
            new,
            resilver,
        } => {
            let what = format!("cannot attach {new} to {existing} in pool '{pool}'");
            let opener = access.pool_options().opener;
            let change = |handle: &Pool, spec: &DeviceSpec, create: &CreateOptions, options| {
                handle.attach(&existing, spec, create, &opener, options)
            };
            let start = Start {
                access,
                command_line,
                name: &pool,
                what,
            };
            start.run(&new, &resilver, change, observe)
        }
        MirrorChange::Replace {
            pool,
            old,
            new,
            resilver,
        } => {
            let what = format!("cannot replace {old} by {new} in pool '{pool}'");
            let opener = access.pool_options().opener;
            let change = |handle: &Pool, spec: &DeviceSpec, create: &CreateOptions, options| {
                handle.replace(&old, spec, create, &opener, options)
            };
            let start = Start {
                access,
                command_line,
                name: &pool,
                what,
            };
            start.run(&new, &resilver, change, observe)
        }
        MirrorChange::Detach { pool, device } => access.with_pool(&pool, false, |handle| {
            handle
                .detach(&device)
                .map_err(|err| failed(format!("cannot detach {device} from pool '{pool}'"), err))?;
            remember_devices(access, handle)?;
            record_history(handle, command_line)?;
            Ok(MirrorOutcome::Detached { device })
        }),
    }
}

/// An attach or replace about to start.
struct Start<'a> {
    access: &'a PoolAccess,
    command_line: &'a str,
    name: &'a str,
    /// What cannot be done, when it fails.
    what: String,
}

impl Start<'_> {
    fn run(
        &self,
        new: &str,
        resilver: &ResilverRequest,
        change: impl FnOnce(
            &Pool,
            &DeviceSpec,
            &CreateOptions,
            ResilverOptions,
        ) -> Result<String, EngineError>,
        observe: &mut dyn FnMut(Progress),
    ) -> Result<MirrorOutcome, AdminError> {
        let fail = |err: AdminError| failed(self.what.clone(), err);
        let spec = DeviceSpec::parse(new)
            .map_err(|err| fail(AdminError::Create(format!("invalid device {err}"))))?;
        let groups = [VdevGroup {
            mirror: false,
            raidz_parity: None,
            log: false,
            devices: vec![spec.clone()],
        }];
        let create = CreateOptions {
            create_size_bytes: resilver.create_size_bytes,
            force: resilver.force,
            ..CreateOptions::default()
        };
        check_devices_exist(&groups, create.create_size_bytes).map_err(fail)?;
        let options = ResilverOptions {
            rate_bytes_per_s: resilver.rate_bytes_per_s,
            ..ResilverOptions::default()
        };
        let created = CreatedFiles::missing(&groups);
        let outcome = self.access.with_pool(self.name, false, |pool| {
            let vdev = change(pool, &spec, &create, options).map_err(|err| fail(err.into()))?;
            remember_devices(self.access, pool)?;
            record_history(pool, self.command_line)?;
            let finished = if self.access.served.is_none() && !resilver.no_wait {
                wait(self.access, pool, observe)?
            } else {
                None
            };
            Ok(MirrorOutcome::Attached {
                device: spec.to_string(),
                vdev,
                finished,
            })
        });
        if outcome.is_err() {
            created.remove();
        }
        outcome
    }
}

/// Waits for the pool's resilver, reporting progress now and then; its status at the end.
pub(super) fn wait(
    access: &PoolAccess,
    pool: &Pool,
    observe: &mut dyn FnMut(Progress),
) -> Result<Option<ResilverStatus>, AdminError> {
    let name = pool.name().to_string();
    let outcome = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| pool.wait_resilver());
        let mut last_report = Instant::now();
        while !waiting.is_finished() {
            std::thread::sleep(POLL_INTERVAL);
            if last_report.elapsed() >= PROGRESS_INTERVAL
                && let Some(status) = pool.resilver_status()
            {
                observe(Progress::Resilver(status));
                last_report = Instant::now();
            }
        }
        waiting.join()
    });
    let outcome =
        outcome.map_err(|_| AdminError::Refused("the resilver waiter panicked".to_string()))?;
    outcome.map_err(|err| failed(format!("resilver of pool '{name}' did not finish"), err))?;
    // A replace detached the old device at the end: the cache follows.
    remember_devices(access, pool)?;
    Ok(pool.resilver_status())
}

/// Updates the pool cache to the pool's devices now.
fn remember_devices(access: &PoolAccess, pool: &Pool) -> Result<(), AdminError> {
    let name = pool.name();
    access
        .cache
        .insert(name, &crate::device_specs(pool))
        .map_err(|err| {
            failed(
                format!("the pool cache does not list the devices of '{name}'"),
                err,
            )
        })
}

/// What `pool clear` did: whether sides came back to be resilvered, and (when this request
/// waited for it) the resilver's end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cleared {
    pub resilvering: bool,
    pub finished: Option<ResilverStatus>,
}

/// Resets every device's error counters; faulted sides that answer again rejoin and are
/// resilvered (waited for in a one-shot process).
pub(super) fn clear(
    access: &PoolAccess,
    command_line: &str,
    name: &str,
    rate_bytes_per_s: Option<u64>,
    observe: &mut dyn FnMut(Progress),
) -> Result<Cleared, AdminError> {
    let options = ResilverOptions {
        rate_bytes_per_s,
        ..ResilverOptions::default()
    };
    access.with_pool(name, false, |pool| {
        pool.clear_errors_with(options)
            .map_err(|err| failed(format!("cannot clear errors of pool '{name}'"), err))?;
        record_history(pool, command_line)?;
        let resilvering = pool
            .resilver_status()
            .is_some_and(|status| status.finished_ms.is_none() && status.error.is_none());
        let finished = if resilvering && access.served.is_none() {
            wait(access, pool, observe)?
        } else {
            None
        };
        Ok(Cleared {
            resilvering,
            finished,
        })
    })
}

/// Scrubs pool `name`, recording the command first; progress goes to `observe`.
pub(super) fn scrub(
    access: &PoolAccess,
    command_line: &str,
    name: &str,
    observe: &mut dyn FnMut(Progress),
) -> Result<ScrubRecord, AdminError> {
    access.with_pool(name, false, |pool| {
        record_history(pool, command_line)?;
        let mut report = |progress: &ScrubProgress| observe(Progress::Scrub(progress.clone()));
        pool.scrub(&mut report)
            .map_err(|err| failed(format!("scrub of pool '{name}' failed"), err))
    })
}
