//! `cairn pool attach | detach | replace`: mirror sides, as zpool has them.
//!
//! The engine changes the vdev tree in one txg and resilvers in the background
//! (`cairn-engine/src/resilver.rs`). A running server keeps the resilver going while it serves,
//! so the forwarded command returns at once; a one-shot command holds the pool open only for
//! its own length, so it waits for the resilver (with progress on a terminal) unless told not
//! to, and then whatever is left resumes at the next import or `cairn serve`.

use crate::context::{Context, device_specs, say, shout};
use crate::human;
use crate::vdevs::parse_device;
use crate::{PoolAttachArgs, PoolReplaceArgs, ResilverArgs};
use anyhow::{Context as _, Result, anyhow};
use cairn_dataset::properties::parse_size;
use cairn_device::spec::DeviceSpec;
use cairn_engine::{CreateOptions, Pool, ResilverOptions, ResilverStatus, VdevGroup};
use cairn_frontend::admin::{CreatedFiles, check_devices_exist};
use std::time::{Duration, Instant};

/// How often a waiting command reports progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(2);
/// How often it looks whether the resilver is done.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// `cairn pool attach POOL EXISTING NEW`
pub fn attach(ctx: &Context, args: &PoolAttachArgs) -> Result<()> {
    let name = &args.pool;
    let existing = device_name(&args.existing);
    let fail = || format!("cannot attach {} to {existing} in pool '{name}'", args.new);
    start(
        ctx,
        name,
        &args.new,
        &args.resilver,
        fail,
        |pool, new, create, options| {
            pool.attach(&existing, new, create, &ctx.pool_options().opener, options)
        },
    )
}

/// `cairn pool replace POOL OLD NEW`
pub fn replace(ctx: &Context, args: &PoolReplaceArgs) -> Result<()> {
    let name = &args.pool;
    let old = device_name(&args.old);
    let fail = || format!("cannot replace {old} by {} in pool '{name}'", args.new);
    start(
        ctx,
        name,
        &args.new,
        &args.resilver,
        fail,
        |pool, new, create, options| {
            pool.replace(&old, new, create, &ctx.pool_options().opener, options)
        },
    )
}

/// `cairn pool detach POOL DEVICE`
pub fn detach(ctx: &Context, name: &str, device: &str) -> Result<()> {
    let device = device_name(device);
    ctx.with_pool(name, false, |pool| {
        pool.detach(&device)
            .with_context(|| format!("cannot detach {device} from pool '{name}'"))?;
        remember_devices(ctx, pool)?;
        say!(ctx, "pool '{name}': detached {device}");
        Ok(())
    })
}

/// Attaches (or replaces) through `change`, remembers the new device set, and waits for the
/// resilver when this process holds the pool.
fn start(
    ctx: &Context,
    name: &str,
    new: &str,
    args: &ResilverArgs,
    fail: impl Fn() -> String,
    change: impl FnOnce(
        &Pool,
        &DeviceSpec,
        &CreateOptions,
        ResilverOptions,
    ) -> Result<String, cairn_engine::EngineError>,
) -> Result<()> {
    let spec = parse_device(new).with_context(&fail)?;
    let group = VdevGroup {
        mirror: false,
        log: false,
        devices: vec![spec.clone()],
    };
    let groups = [group];
    let create = CreateOptions {
        create_size_bytes: crate::vdevs::parse_size_option(args.size.as_deref())
            .with_context(&fail)?,
        force: args.force,
        ..CreateOptions::default()
    };
    check_devices_exist(&groups, create.create_size_bytes).with_context(&fail)?;
    let options = ResilverOptions {
        rate_bytes_per_s: args
            .resilver_rate
            .as_deref()
            .map(parse_size)
            .transpose()
            .map_err(|err| anyhow!("invalid --resilver-rate: {err}"))?,
        ..ResilverOptions::default()
    };
    let created = CreatedFiles::missing(&groups);
    let outcome = ctx.with_pool(name, false, |pool| {
        let vdev = change(pool, &spec, &create, options).with_context(&fail)?;
        remember_devices(ctx, pool)?;
        say!(ctx, "pool '{name}': {spec} attached to {vdev}; resilvering");
        if ctx.served.is_none() && !args.no_wait {
            wait(ctx, pool)?;
        }
        Ok(())
    });
    if outcome.is_err() {
        created.remove();
    }
    outcome
}

/// Waits for the pool's resilver, reporting progress on a terminal now and then.
pub(crate) fn wait(ctx: &Context, pool: &Pool) -> Result<()> {
    let name = pool.name().to_string();
    let outcome = std::thread::scope(|scope| {
        let waiting = scope.spawn(|| pool.wait_resilver());
        let mut last_report = Instant::now();
        while !waiting.is_finished() {
            std::thread::sleep(POLL_INTERVAL);
            if ctx.interactive()
                && last_report.elapsed() >= PROGRESS_INTERVAL
                && let Some(status) = pool.resilver_status()
            {
                shout!(ctx, "{}", progress_line(&status));
                last_report = Instant::now();
            }
        }
        waiting.join()
    });
    let outcome = outcome.map_err(|_| anyhow!("the resilver waiter panicked"))?;
    outcome.with_context(|| format!("resilver of pool '{name}' did not finish"))?;
    // A replace detached the old device at the end: the cache follows.
    remember_cache(ctx, pool)?;
    if let Some(status) = pool.resilver_status() {
        say!(ctx, "pool '{name}': {}", progress_line(&status));
    }
    Ok(())
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

/// Updates the pool cache to the pool's devices now and records the command.
fn remember_devices(ctx: &Context, pool: &Pool) -> Result<()> {
    remember_cache(ctx, pool)?;
    ctx.record(pool)
}

fn remember_cache(ctx: &Context, pool: &Pool) -> Result<()> {
    let name = pool.name();
    ctx.cache
        .insert(name, &device_specs(pool))
        .with_context(|| format!("the pool cache does not list the devices of '{name}'"))
}
