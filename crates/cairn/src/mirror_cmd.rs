//! `cairn pool attach | detach | replace`: mirror sides, as zpool has them. The command builds
//! the typed request (`admin::MirrorChange`, device paths absolute) and renders what it did.
//!
//! The engine changes the vdev tree in one txg and resilvers in the background
//! (`cairn-engine/src/resilver.rs`). A running server keeps the resilver going while it serves,
//! so its answer comes at once; without a server the administration library, in this process,
//! waits for the resilver (progress on a terminal) unless told not to, and then whatever is
//! left resumes at the next import or `cairn serve`.

use crate::context::{Context, say, shout};
use crate::vdevs::parse_device;
use crate::{PoolAttachArgs, PoolReplaceArgs, ResilverArgs, human, remote};
use anyhow::{Context as _, Result, anyhow};
use cairn_dataset::properties::parse_size;
use cairn_engine::ResilverStatus;
use cairn_frontend::admin::{
    AdminReply, AdminRequest, MirrorChange, MirrorOutcome, Progress, ResilverRequest,
};

/// `cairn pool attach POOL EXISTING NEW`
pub fn attach(ctx: &Context, args: &PoolAttachArgs) -> Result<()> {
    let name = &args.pool;
    let existing = device_name(&args.existing);
    let fail = || format!("cannot attach {} to {existing} in pool '{name}'", args.new);
    let change = MirrorChange::Attach {
        pool: name.clone(),
        existing: existing.clone(),
        new: parse_device(&args.new).with_context(fail)?.to_string(),
        resilver: resilver_request(&args.resilver, fail)?,
    };
    run(ctx, name, change)
}

/// `cairn pool replace POOL OLD NEW`
pub fn replace(ctx: &Context, args: &PoolReplaceArgs) -> Result<()> {
    let name = &args.pool;
    let old = device_name(&args.old);
    let fail = || format!("cannot replace {old} by {} in pool '{name}'", args.new);
    let change = MirrorChange::Replace {
        pool: name.clone(),
        new: parse_device(&args.new).with_context(fail)?.to_string(),
        old: old.clone(),
        resilver: resilver_request(&args.resilver, fail)?,
    };
    run(ctx, name, change)
}

/// `cairn pool detach POOL DEVICE`
pub fn detach(ctx: &Context, name: &str, device: &str) -> Result<()> {
    let change = MirrorChange::Detach {
        pool: name.to_string(),
        device: device_name(device),
    };
    run(ctx, name, change)
}

/// `fail` says what could not be done when `--size` is wrong.
fn resilver_request(args: &ResilverArgs, fail: impl Fn() -> String) -> Result<ResilverRequest> {
    Ok(ResilverRequest {
        create_size_bytes: crate::vdevs::parse_size_option(args.size.as_deref())
            .with_context(fail)?,
        force: args.force,
        rate_bytes_per_s: resilver_rate(args.resilver_rate.as_deref())?,
        no_wait: args.no_wait,
    })
}

/// `--resilver-rate RATE` parsed.
pub fn resilver_rate(text: Option<&str>) -> Result<Option<u64>> {
    text.map(parse_size)
        .transpose()
        .map_err(|err| anyhow!("invalid --resilver-rate: {err}"))
}

fn run(ctx: &Context, name: &str, change: MirrorChange) -> Result<()> {
    match remote::call_observed(ctx, AdminRequest::Mirror(change), &mut |progress| {
        show_progress(ctx, &progress);
    })? {
        AdminReply::Mirror(MirrorOutcome::Attached {
            device,
            vdev,
            finished,
        }) => {
            say!(
                ctx,
                "pool '{name}': {device} attached to {vdev}; resilvering"
            );
            say_finished(ctx, name, finished.as_ref());
            Ok(())
        }
        AdminReply::Mirror(MirrorOutcome::Detached { device }) => {
            say!(ctx, "pool '{name}': detached {device}");
            Ok(())
        }
        other => Err(remote::unexpected(&other)),
    }
}

/// Resilver progress on a terminal, while this process waits for it.
pub fn show_progress(ctx: &Context, progress: &Progress) {
    if let Progress::Resilver(status) = progress
        && ctx.interactive()
    {
        shout!(ctx, "{}", progress_line(status));
    }
}

/// Where a resilver this command waited for ended.
pub fn say_finished(ctx: &Context, name: &str, finished: Option<&ResilverStatus>) {
    if let Some(status) = finished {
        say!(ctx, "pool '{name}': {}", progress_line(status));
    }
}

/// One line of resilver progress, as `pool status` shows it after `scan:`.
pub fn progress_line(status: &ResilverStatus) -> String {
    let target = match &status.replacing {
        Some(old) => format!("{} (replacing {old})", status.leaf),
        None => status.leaf.clone(),
    };
    if let Some(finished_ms) = status.finished_ms {
        return format!(
            "resilvered {} of {target} in {} on {}{}",
            human::size(status.copied_bytes, false),
            human::seconds(finished_ms.saturating_sub(status.started_ms)),
            human::date(finished_ms),
            unrecoverable(status)
        );
    }
    if let Some(error) = &status.error {
        return format!("resilver of {target} stopped: {error}");
    }
    let total = if status.total_bytes == 0 {
        "(counting)".to_string()
    } else {
        format!(
            "{} ({})",
            human::size(status.total_bytes, false),
            human::percent(status.copied_bytes, status.total_bytes, false)
        )
    };
    format!(
        "resilver in progress of {target} since {}: {} of {total} copied at {}/s{}",
        human::date(status.started_ms),
        human::size(status.copied_bytes, false),
        human::size(status.rate_bytes_per_s, false),
        unrecoverable(status)
    )
}

fn unrecoverable(status: &ResilverStatus) -> String {
    match status.unrecoverable_blocks {
        0 => String::new(),
        n => format!(", {n} blocks unreadable on every side"),
    }
}

/// A device as the pool names it: paths made absolute (the file may be gone).
fn device_name(word: &str) -> String {
    parse_device(word).map_or_else(|_| word.to_string(), |spec| spec.to_string())
}
