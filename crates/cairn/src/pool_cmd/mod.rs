//! `cairn pool …`: the zpool side of the CLI.
//!
//! Commands that only look (`status`, `list`, `history`, `check`) open the pool read-only, so
//! looking never writes a txg; commands that change the pool open it read-write, record their
//! command line in the pool history, and close (sync) it before returning. `create` and `import`
//! add the pool to the pool cache with the device specs the pool actually ended up using;
//! `export` and `destroy` remove it once the engine has succeeded.
//!
//! Files: this one holds the commands that change a pool (create, add, remove, scrub,
//! export, destroy, clear, set, sync) and the small looks (get, history, txgs); `status.rs`
//! renders `status` and `list` (text and JSON); `import.rs` finds, previews and imports
//! pools and checks exported ones. The three are independent: each uses only the crate's
//! shared modules (`context`, `table`, `json`, `vdevs`), never a sibling.

mod import;
mod status;

pub use import::{check, import};
pub use status::{list, status};

use crate::context::Context;
use crate::context::{say, say_raw, shout};
use crate::human;
use crate::table::{Column, Table};
use crate::vdevs::{parse_size_option, parse_vdevs};
use crate::{ListFormat, PoolAddArgs, PoolCreateArgs, remote};
use anyhow::{Context as _, Result, anyhow, bail};
use cairn_frontend::admin::{self, AdminReply, AdminRequest, PoolChange, Progress};
use std::time::{Duration, Instant};
pub fn create(ctx: &Context, args: &PoolCreateArgs) -> Result<()> {
    let name = &args.name;
    let fail = || format!("cannot create pool '{name}'");
    let vdevs = parse_vdevs(&args.vdevs).with_context(fail)?;
    let mut ashift = None;
    for (key, value) in &args.pool_properties {
        match key.as_str() {
            "ashift" => {
                ashift = Some(value.parse().map_err(|_| {
                    anyhow!(
                        "{}: invalid ashift '{value}' (a number such as 9 or 12)",
                        fail()
                    )
                })?);
            }
            other => bail!(
                "{}: unknown pool property '{other}' (known: ashift)",
                fail()
            ),
        }
    }
    let change = PoolChange::Create {
        pool: name.clone(),
        layout: vdevs.layout(),
        create_size_bytes: parse_size_option(args.size.as_deref()).with_context(fail)?,
        force: args.force,
        ashift,
        root_properties: args.root_properties.clone(),
    };
    match remote::call(ctx, AdminRequest::Pool(change))? {
        AdminReply::Done => Ok(()),
        other => Err(remote::unexpected(&other)),
    }
}

/// `cairn pool add POOL log [mirror] DEV…`
pub fn add(ctx: &Context, args: &PoolAddArgs) -> Result<()> {
    let name = &args.pool;
    let fail = || format!("cannot add devices to pool '{name}'");
    let vdevs = parse_vdevs(&args.vdevs).with_context(fail)?;
    let change = PoolChange::Add {
        pool: name.clone(),
        layout: vdevs.layout(),
        create_size_bytes: parse_size_option(args.size.as_deref()).with_context(fail)?,
        force: args.force,
    };
    match remote::call(ctx, AdminRequest::Pool(change))? {
        AdminReply::Added(added) => {
            say!(ctx, "pool '{name}': added {}", added.join(", "));
            Ok(())
        }
        other => Err(remote::unexpected(&other)),
    }
}

/// `cairn pool remove POOL VDEV` (log and cache devices).
pub fn remove(ctx: &Context, name: &str, vdev: &str) -> Result<()> {
    // A device may be named by a relative path; the pool knows absolute ones.
    let change = PoolChange::Remove {
        pool: name.to_string(),
        device: remote::existing_file_word(vdev),
    };
    match remote::call(ctx, AdminRequest::Pool(change))? {
        AdminReply::DeviceRemoved { what, device } => {
            say!(ctx, "pool '{name}': removed {what} {device}");
            Ok(())
        }
        other => Err(remote::unexpected(&other)),
    }
}

pub fn scrub(ctx: &Context, name: &str) -> Result<()> {
    let bar = ctx.interactive().then(|| {
        let bar = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "scrub {prefix} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta} {msg}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(name.to_string());
        bar
    });
    let started = Instant::now();
    let mut last_line = Instant::now();
    let mut report = |progress: Progress| {
        let Progress::Scrub(progress) = progress else {
            return;
        };
        let total = progress.total_bytes.max(progress.scanned_bytes);
        if let Some(bar) = &bar {
            bar.set_length(total);
            bar.set_position(progress.scanned_bytes);
            if progress.bad_copies > 0 {
                bar.set_message(format!("{} bad copies", progress.bad_copies));
            }
        } else if last_line.elapsed() >= Duration::from_secs(1) {
            last_line = Instant::now();
            shout!(
                ctx,
                "scrub {name}: {} of {} scanned ({}), {} blocks, {} bad copies, {} repaired",
                human::size(progress.scanned_bytes, false),
                human::size(total, false),
                human::percent(progress.scanned_bytes, total, false),
                progress.blocks,
                progress.bad_copies,
                progress.repaired_copies
            );
        }
    };
    let request = AdminRequest::Scrub {
        pool: name.to_string(),
    };
    let result = remote::call_observed(ctx, request, &mut report);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let record = match result? {
        AdminReply::Scrubbed(record) => record,
        other => return Err(remote::unexpected(&other)),
    };
    say!(
        ctx,
        "scrub of pool '{name}' done in {}: {} scanned in {} blocks, {} bad copies, {} repaired, {} unrecoverable",
        human::seconds(started.elapsed().as_millis() as u64),
        human::size(record.bytes_scanned, false),
        record.blocks_scanned,
        record.bad_copies,
        record.repaired_copies,
        record.unrecoverable_blocks
    );
    for place in &record.damaged {
        say!(ctx, "  damaged: {place}");
    }
    if record.unrecoverable_blocks > 0 {
        bail!(
            "pool '{name}': scrub found {} unrecoverable blocks (see cairn pool status {name})",
            record.unrecoverable_blocks
        );
    }
    Ok(())
}

pub fn export(ctx: &Context, name: &str) -> Result<()> {
    let change = PoolChange::Export {
        pool: name.to_string(),
    };
    removal(ctx, name, change, "export")
}

pub fn destroy(ctx: &Context, name: &str, force: bool) -> Result<()> {
    let change = PoolChange::Destroy {
        pool: name.to_string(),
        force,
    };
    removal(ctx, name, change, "destroy")
}

fn removal(ctx: &Context, name: &str, change: PoolChange, verb: &str) -> Result<()> {
    match remote::call(ctx, AdminRequest::Pool(change))? {
        AdminReply::Removed(removal) => {
            say_removal(ctx, name, &removal, verb);
            Ok(())
        }
        other => Err(remote::unexpected(&other)),
    }
}

/// Says which filesystems an export or destroy unmounted first, or that the pool was only
/// forgotten.
fn say_removal(ctx: &Context, name: &str, removal: &admin::PoolRemoval, verb: &str) {
    match removal {
        admin::PoolRemoval::Done { unmounted } => {
            for (dataset, mountpoint) in unmounted {
                say!(ctx, "unmounted {dataset} from {}", mountpoint.display());
            }
        }
        admin::PoolRemoval::Forgotten { reason } => shout!(
            ctx,
            "cairn: pool '{name}' cannot be opened ({reason}); it is forgotten without {verb}ing it: its devices are left as they are"
        ),
    }
}

/// Resets the READ/WRITE/CKSUM counters of every device (like zpool clear); faulted mirror
/// sides whose devices answer again rejoin, resilvered for the txgs they missed. Without a
/// server the resilver is waited for (it would stop with the process); a server goes on with
/// it in the background.
pub fn clear(ctx: &Context, name: &str, resilver_rate: Option<&str>) -> Result<()> {
    let request = AdminRequest::Clear {
        pool: name.to_string(),
        rate_bytes_per_s: crate::mirror_cmd::resilver_rate(resilver_rate)?,
    };
    let cleared = match remote::call_observed(ctx, request, &mut |progress| {
        crate::mirror_cmd::show_progress(ctx, &progress);
    })? {
        AdminReply::Cleared(cleared) => cleared,
        other => return Err(remote::unexpected(&other)),
    };
    if cleared.resilvering {
        say!(ctx, "pool '{name}': resilvering the devices that came back");
        crate::mirror_cmd::say_finished(ctx, name, cleared.finished.as_ref());
    }
    Ok(())
}

/// `pool set arc_max=SIZE|arc_min=SIZE POOL`: the process's cache limits (see main.rs).
pub fn set(ctx: &Context, assignment: &str, pool: &str) -> Result<()> {
    let (name, value) = assignment
        .split_once('=')
        .ok_or_else(|| anyhow!("expected PROPERTY=VALUE, got '{assignment}'"))?;
    let change = PoolChange::SetCacheLimit {
        pool: pool.to_string(),
        property: name.to_string(),
        value: value.to_string(),
    };
    match remote::call(ctx, AdminRequest::Pool(change))? {
        AdminReply::CacheLimitSet { served: false } => {
            say!(
                ctx,
                "no server is running: the setting lasts for this command only (start `cairn serve --{}`)",
                name.replace('_', "-")
            );
            Ok(())
        }
        AdminReply::CacheLimitSet { served: true } => Ok(()),
        other => Err(remote::unexpected(&other)),
    }
}

/// `pool get POOL`: the cache limits, where the cache stands, and the space destroyed
/// snapshots still hold while the background frees it (`freeing`).
pub fn get(ctx: &Context, format: ListFormat, pool: &str) -> Result<()> {
    let request = AdminRequest::CacheLimits {
        pool: pool.to_string(),
    };
    let stats = match remote::call(ctx, request)? {
        AdminReply::ArcCounters(sample) => sample,
        other => return Err(remote::unexpected(&other)),
    };
    let field = |wanted: &str| {
        stats
            .fields
            .iter()
            .find(|(name, _)| name == wanted)
            .map_or(0, |(_, value)| *value)
    };
    let mut table = Table::new(vec![
        Column::left("NAME"),
        Column::left("PROPERTY"),
        Column::right("VALUE"),
        Column::left("SOURCE"),
    ]);
    for (property, name, source) in [
        ("arc_max", "c_max", "server"),
        ("arc_min", "c_min", "server"),
        ("arc_target", "c", "adaptive"),
        ("arc_size", "size", "-"),
        ("freeing", "freeing", "-"),
    ] {
        table.push(vec![
            pool.to_string(),
            property.to_string(),
            human::size(field(name), format.exact),
            source.to_string(),
        ]);
    }
    say_raw!(ctx, "{}", table.render(format.scripted));
    Ok(())
}

pub fn sync(ctx: &Context, pools: &[String]) -> Result<()> {
    let request = AdminRequest::SyncPools {
        pools: pools.to_vec(),
    };
    match remote::call(ctx, request)? {
        AdminReply::Done => Ok(()),
        other => Err(remote::unexpected(&other)),
    }
}

pub fn history(ctx: &Context, name: &str) -> Result<()> {
    let request = AdminRequest::History {
        pool: name.to_string(),
    };
    let entries = match remote::call(ctx, request)? {
        AdminReply::History(entries) => entries,
        other => return Err(remote::unexpected(&other)),
    };
    say!(ctx, "History for '{name}':");
    for entry in entries {
        match entry
            .split_once(' ')
            .and_then(|(stamp, rest)| stamp.parse::<u64>().ok().map(|ms| (ms, rest)))
        {
            Some((ms, rest)) => say!(ctx, "{} {rest}", human::date(ms)),
            None => say!(ctx, "{entry}"),
        }
    }
    Ok(())
}

pub fn txgs(ctx: &Context, format: ListFormat, name: &str) -> Result<()> {
    let request = AdminRequest::Txgs {
        pool: name.to_string(),
    };
    let timings = match remote::call(ctx, request)? {
        AdminReply::Txgs(timings) => timings,
        other => return Err(remote::unexpected(&other)),
    };
    let mut table = Table::new(vec![
        Column::right("TXG"),
        Column::left("TRIGGER"),
        Column::right("DIRTY"),
        Column::right("HOLDS"),
        Column::right("OPEN"),
        Column::right("QUIESCE"),
        Column::right("SYNC"),
        Column::right("DELAYS"),
        Column::right("DELAYED"),
        Column::right("BLOCKED"),
        Column::right("RESERVED"),
        Column::right("BACKGROUND"),
        Column::right("COMMANDS"),
    ]);
    for timing in &timings {
        table.push(vec![
            timing.txg.to_string(),
            timing.trigger.to_lowercase(),
            human::size(timing.dirty_bytes, format.exact),
            timing.holds_count.to_string(),
            human::micros(timing.open_us, format.exact),
            human::micros(timing.quiesce_us, format.exact),
            human::micros(timing.sync_us, format.exact),
            timing.writer_delays_count.to_string(),
            human::micros(timing.writer_delay_ns_total / 1000, format.exact),
            timing.writers_blocked_count.to_string(),
            human::micros(timing.reserved_us, format.exact),
            human::micros(timing.background_us, format.exact),
            human::micros(timing.command_us, format.exact),
        ]);
    }
    if timings.is_empty() && !format.scripted {
        say!(
            ctx,
            "no txg timings recorded (timings are kept in memory by the process that has the pool open)"
        );
        return Ok(());
    }
    if !format.scripted {
        say!(
            ctx,
            "txgs synced while this command had pool '{name}' open:"
        );
    }
    say_raw!(ctx, "{}", table.render(format.scripted));
    Ok(())
}
