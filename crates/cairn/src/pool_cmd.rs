//! `cairn pool …`: the zpool side of the CLI.
//!
//! Commands that only look (`status`, `list`, `history`, `check`) open the pool read-only, so
//! looking never writes a txg; commands that change the pool open it read-write, record their
//! command line in the pool history, and close (sync) it before returning. `create` and `import`
//! add the pool to the pool cache with the device specs the pool actually ended up using;
//! `export` and `destroy` remove it once the engine has succeeded.

use crate::context::{Context, device_specs, unavailable_busy, unavailable_reason};
use crate::context::{say, say_raw, shout};
use crate::table::{Column, Table};
use crate::vdevs::{parse_size_option, parse_vdevs};
use crate::{
    ListFormat, PoolAddArgs, PoolCheckArgs, PoolCreateArgs, PoolImportArgs, PoolStatusArgs,
};
use crate::{human, json};
use anyhow::{Context as _, Result, anyhow, bail};
use cairn_dataset::properties::parse_size;
use cairn_device::spec::DeviceSpec;
use cairn_engine::CacheDeviceStatus;
use cairn_engine::{
    CreateOptions, DiscoveredPool, ImportSource, Pool, PoolOptions, PoolStatus, ScrubProgress,
    discover_pools,
};
use cairn_format::PoolState;
use cairn_frontend::admin;
use cairn_frontend::pools::{READONLY_ENTRY, parse_cached_device};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn create(ctx: &Context, args: &PoolCreateArgs) -> Result<()> {
    let name = &args.name;
    let fail = || format!("cannot create pool '{name}'");
    let vdevs = parse_vdevs(&args.vdevs).with_context(fail)?;
    let mut options = CreateOptions {
        create_size_bytes: parse_size_option(args.size.as_deref()).with_context(fail)?,
        force: args.force,
        root_properties: args.root_properties.clone(),
        history_entry: Some(ctx.command_line.clone()),
        ..CreateOptions::default()
    };
    for (key, value) in &args.pool_properties {
        match key.as_str() {
            "ashift" => {
                options.ashift = value.parse().map_err(|_| {
                    anyhow!(
                        "{}: invalid ashift '{value}' (a number such as 9 or 12)",
                        fail()
                    )
                })?;
            }
            other => bail!(
                "{}: unknown pool property '{other}' (known: ashift)",
                fail()
            ),
        }
    }
    admin::create_pool(&ctx.access, name, &vdevs.groups, &vdevs.cache, &options).with_context(fail)
}

/// `cairn pool add POOL log [mirror] DEV…`
pub fn add(ctx: &Context, args: &PoolAddArgs) -> Result<()> {
    let name = &args.pool;
    let fail = || format!("cannot add devices to pool '{name}'");
    let vdevs = parse_vdevs(&args.vdevs).with_context(fail)?;
    let options = CreateOptions {
        create_size_bytes: parse_size_option(args.size.as_deref()).with_context(fail)?,
        force: args.force,
        ..CreateOptions::default()
    };
    let added = admin::add_devices(
        &ctx.access,
        name,
        &vdevs.groups,
        &vdevs.cache,
        &options,
        &ctx.command_line,
    )
    .with_context(fail)?;
    say!(ctx, "pool '{name}': added {}", added.join(", "));
    Ok(())
}

/// `cairn pool remove POOL VDEV` (log and cache devices).
pub fn remove(ctx: &Context, name: &str, vdev: &str) -> Result<()> {
    // A device may be named by a relative path; the pool knows absolute ones.
    let absolute = std::path::Path::new(vdev)
        .exists()
        .then(|| std::path::absolute(vdev).ok())
        .flatten()
        .map(|path| path.display().to_string());
    let vdev = absolute.as_deref().unwrap_or(vdev);
    ctx.with_pool(name, false, |pool| {
        let is_cache = pool
            .cache_specs()
            .iter()
            .any(|spec| spec.to_string() == vdev || spec.path.display().to_string() == vdev);
        let what = if is_cache {
            pool.remove_cache_device(vdev)
                .with_context(|| format!("cannot remove '{vdev}' from pool '{name}'"))?;
            "cache device"
        } else {
            pool.remove_log_vdev(vdev)
                .with_context(|| format!("cannot remove '{vdev}' from pool '{name}'"))?;
            "log device"
        };
        ctx.cache
            .insert(name, &device_specs(pool))
            .with_context(|| format!("the pool cache still lists '{vdev}' for '{name}'"))?;
        ctx.record(pool)?;
        say!(ctx, "pool '{name}': removed {what} {vdev}");
        Ok(())
    })
}

/// The `cache` section of `pool status`: each cache device with its size, what it holds,
/// and its health (a missing one is UNAVAIL and costs the pool nothing). Returns the notes
/// for below the tree: why each UNAVAIL one is (as zpool, the NAME column holds names only; a
/// device error is long).
fn push_cache_rows(table: &mut Table, cache: &[CacheDeviceStatus]) -> Vec<String> {
    let mut notes = Vec::new();
    if cache.is_empty() {
        return notes;
    }
    let blank = || vec![String::new(); 4];
    let mut header = vec!["cache".to_string()];
    header.extend(blank());
    table.push(header);
    for device in cache {
        let row = match (&device.report, &device.missing) {
            (Some(report), _) => vec![
                format!(
                    "  {} ({}, {} used)",
                    device.name,
                    human::size(report.size_bytes, false),
                    human::size(report.alloc_bytes, false)
                ),
                match report.health {
                    cairn_engine::L2Health::Online => "ONLINE".into(),
                    cairn_engine::L2Health::Faulted => "FAULTED".into(),
                },
                report.read_errors.to_string(),
                report.write_errors.to_string(),
                report.checksum_errors.to_string(),
            ],
            (None, Some(reason)) => {
                // The engine's reason may name the device already.
                let prefix = format!("cache device {}: ", device.name);
                let reason = reason.strip_prefix(&prefix).unwrap_or(reason);
                notes.push(format!("cache device {} is UNAVAIL: {reason}", device.name));
                vec![
                    format!("  {}", device.name),
                    "UNAVAIL".into(),
                    "0".into(),
                    "0".into(),
                    "0".into(),
                ]
            }
            (None, None) => vec![
                format!("  {}", device.name),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        };
        table.push(row);
    }
    notes
}

/// The pool's health as zpool shows it: SUSPENDED while it refuses writes.
fn health_label(status: &PoolStatus) -> &'static str {
    match status.suspended {
        Some(_) => "SUSPENDED",
        None => status.health.as_str(),
    }
}

fn render_status(status: &PoolStatus, cache: &[CacheDeviceStatus], verbose: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!("  pool: {}\n", status.name));
    if status.imported_readonly {
        out.push_str(&format!(" state: {} (read-only)\n", health_label(status)));
        out.push_str(
            "status: Imported read-only (-o readonly=on): nothing is written to its devices; its \
             space log was not read and its intent log not replayed. Copy the data off, then \
             export it.\n",
        );
    } else {
        out.push_str(&format!(" state: {}\n", health_label(status)));
    }
    match &status.suspended {
        Some(reason) if status.suspended_until_clear => {
            out.push_str(&format!("status: {reason}\n"));
        }
        Some(reason) => out.push_str(&format!(
            "status: SUSPENDED: nothing more is written to the pool; re-import it after \
             checking it ({reason})\n"
        )),
        None => {}
    }
    if status.suspended.is_none() && status.health != cairn_pool::vdev::Health::Online {
        out.push_str(
            "status: One or more devices are missing or faulted; the pool is not fully redundant.\n",
        );
    }
    out.push_str(&format!("  scan: {}\n", scan_line(status)));
    out.push_str("config:\n\n");
    let mut table = Table::new(vec![
        Column::left("NAME"),
        Column::left("STATE"),
        Column::right("READ"),
        Column::right("WRITE"),
        Column::right("CKSUM"),
    ]);
    let sums = |leaves: &[cairn_engine::LeafStatus]| {
        leaves.iter().fold((0, 0, 0), |(r, w, c), leaf| {
            (
                r + leaf.read_errors,
                w + leaf.write_errors,
                c + leaf.checksum_errors,
            )
        })
    };
    let all_leaves: Vec<cairn_engine::LeafStatus> = status
        .tops
        .iter()
        .flat_map(|top| top.leaves.clone())
        .collect();
    let (r, w, c) = sums(&all_leaves);
    table.push(vec![
        status.name.clone(),
        health_label(status).into(),
        r.to_string(),
        w.to_string(),
        c.to_string(),
    ]);
    let mut logs_header = false;
    for top in &status.tops {
        if top.is_log && !logs_header {
            // As zpool does: log devices in their own section, below the data vdevs.
            table.push(vec![
                "logs".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            logs_header = true;
        }
        let leaf_row = |leaf: &cairn_engine::LeafStatus, indent: &str| {
            let mut name = format!("{indent}{}", leaf.name);
            if leaf.resilvering {
                name.push_str(" (resilvering)");
            }
            if leaf.repaired_bytes > 0 {
                name.push_str(&format!(
                    " (repaired {})",
                    human::size(leaf.repaired_bytes, false)
                ));
            }
            vec![
                name,
                leaf.health.as_str().into(),
                leaf.read_errors.to_string(),
                leaf.write_errors.to_string(),
                leaf.checksum_errors.to_string(),
            ]
        };
        if top.is_mirror || top.leaves.len() != 1 {
            let (r, w, c) = sums(&top.leaves);
            table.push(vec![
                format!("  {}", top.name),
                top.health.as_str().into(),
                r.to_string(),
                w.to_string(),
                c.to_string(),
            ]);
            for leaf in &top.leaves {
                table.push(leaf_row(leaf, "    "));
            }
        } else {
            table.push(leaf_row(&top.leaves[0], "  "));
        }
    }
    let notes = push_cache_rows(&mut table, cache);
    for line in table.render(false).lines() {
        out.push('\t');
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    for note in &notes {
        out.push_str(&format!("  note: {note}\n"));
    }
    // As zpool: the count, and with -v the list of places with permanent errors.
    match &status.last_scrub {
        Some(scrub) if !scrub.damaged.is_empty() && verbose => {
            out.push_str(&format!(
                "errors: {} data errors found by the last scrub, in:\n\n",
                scrub.damaged.len()
            ));
            for place in &scrub.damaged {
                out.push_str(&format!("        {place}\n"));
            }
        }
        Some(scrub) if !scrub.damaged.is_empty() => out.push_str(&format!(
            "errors: {} data errors found by the last scrub, use '-v' for a list\n",
            scrub.damaged.len()
        )),
        _ => out.push_str("errors: No known data errors\n"),
    }
    out
}

fn scan_line(status: &PoolStatus) -> String {
    // A running resilver, or one newer than the last scrub, is what zpool shows too.
    if let Some(resilver) = &status.resilver
        && status.last_scrub.as_ref().is_none_or(|scrub| {
            resilver
                .finished_ms
                .is_none_or(|finished| finished >= scrub.finished_ms)
        })
    {
        return crate::mirror_cmd::progress_line(resilver);
    }
    let Some(scrub) = &status.last_scrub else {
        return "none requested".into();
    };
    if scrub.canceled {
        return format!("scrub canceled on {}", human::date(scrub.finished_ms));
    }
    format!(
        "scrub repaired {} ({} {}) in {} with {} errors on {}",
        cairn_dataset::properties::format_size(scrub.repaired_bytes),
        scrub.repaired_copies,
        if scrub.repaired_copies == 1 {
            "copy"
        } else {
            "copies"
        },
        human::seconds(scrub.finished_ms.saturating_sub(scrub.started_ms)),
        scrub.unrecoverable_blocks,
        human::date(scrub.finished_ms)
    )
}

/// The named pools, or every cached pool when none is named.
fn pools_or_all(ctx: &Context, pools: &[String]) -> Result<Vec<String>> {
    if pools.is_empty() {
        Ok(ctx.pool_names()?)
    } else {
        Ok(pools.to_vec())
    }
}

/// A remembered pool as `pool list` and `pool status` show it: opened, or UNAVAIL.
enum PoolView {
    Open {
        status: Box<PoolStatus>,
        notes: Vec<String>,
        /// Its cache devices (details only from a pool with its tier running: a server's).
        cache: Vec<CacheDeviceStatus>,
    },
    Unavailable {
        name: String,
        reason: String,
        /// Another process has it open (so it is not lost).
        busy: bool,
        /// The devices the pool cache lists, with whether each file exists.
        devices: Vec<(String, bool)>,
    },
}

/// Opens `name` read-only for a look; a pool that cannot be opened is a view too, any other
/// failure (not in the cache) is an error.
fn pool_view(ctx: &Context, name: &str) -> Result<PoolView> {
    match ctx.with_pool(name, true, |pool| {
        let cache = if pool.l2().is_some() {
            pool.cache_status()
        } else {
            remembered_cache_devices(ctx, name)
        };
        Ok((pool.status(), pool.notes().to_vec(), cache))
    }) {
        Ok((status, notes, cache)) => Ok(PoolView::Open {
            status: Box::new(status),
            notes,
            cache,
        }),
        Err(err) => {
            let Some(reason) = unavailable_reason(&err) else {
                return Err(err);
            };
            let devices = ctx
                .cache
                .devices(name)?
                .unwrap_or_default()
                .into_iter()
                .filter(|text| text != READONLY_ENTRY)
                .map(|text| {
                    let present = parse_cached_device(&text).is_ok_and(|spec| spec.path.exists());
                    (text, present)
                })
                .collect();
            Ok(PoolView::Unavailable {
                name: name.to_string(),
                reason: reason.to_string(),
                busy: unavailable_busy(&err),
                devices,
            })
        }
    }
}

/// The cache devices the pool cache lists for `name`, as far as a look without opening them
/// can tell (a pool opened read-only has no cache tier running).
fn remembered_cache_devices(ctx: &Context, name: &str) -> Vec<CacheDeviceStatus> {
    let cache = ctx
        .cached_device_sets(name)
        .map(|(_, cache)| cache)
        .unwrap_or_default();
    cache
        .into_iter()
        .map(|spec| CacheDeviceStatus {
            name: spec.to_string(),
            report: None,
            missing: (!spec.path.exists()).then(|| "no such file".to_string()),
        })
        .collect()
}

/// The views of `names`, and the failures (already worded) of those that are not pools.
fn pool_views(ctx: &Context, names: &[String]) -> (Vec<PoolView>, Vec<String>) {
    let mut views = Vec::new();
    let mut failures = Vec::new();
    for name in names {
        match pool_view(ctx, name) {
            Ok(view) => views.push(view),
            Err(err) => failures.push(format!("{err:#}")),
        }
    }
    (views, failures)
}

pub fn status(ctx: &Context, args: &PoolStatusArgs) -> Result<()> {
    let names = pools_or_all(ctx, &args.pools)?;
    let (views, failures) = pool_views(ctx, &names);
    if args.json {
        let entries = views
            .iter()
            .map(|view| (view_name(view).to_string(), status_json(view)))
            .collect();
        say_raw!(ctx, "{}", json::pools("cairn pool status", &entries)?);
        return combine(failures);
    }
    if names.is_empty() {
        say!(ctx, "no pools available");
        return Ok(());
    }
    for (index, view) in views.iter().enumerate() {
        if index > 0 {
            say!(ctx);
        }
        match view {
            PoolView::Open {
                status,
                notes,
                cache,
            } => {
                say_raw!(ctx, "{}", render_status(status, cache, args.verbose));
                for note in notes {
                    say!(ctx, "note: {note}");
                }
            }
            PoolView::Unavailable {
                name,
                reason,
                busy,
                devices,
            } => say_raw!(ctx, "{}", render_unavailable(name, reason, *busy, devices)),
        }
    }
    combine(failures)
}

fn view_name(view: &PoolView) -> &str {
    match view {
        PoolView::Open { status, .. } => &status.name,
        PoolView::Unavailable { name, .. } => name,
    }
}

/// `pool status` of a pool that cannot be opened: why, what to do, and its remembered devices.
fn render_unavailable(name: &str, reason: &str, busy: bool, devices: &[(String, bool)]) -> String {
    let mut out = format!("  pool: {name}\n state: UNAVAIL\n");
    out.push_str(&format!("status: The pool cannot be opened: {reason}\n"));
    if busy {
        out.push_str(
            "action: Another process has it open; it opens here once that one closes it.\n",
        );
    } else {
        out.push_str(&format!(
            "action: Make its devices available again and it opens as before, or forget it with\n\t'cairn pool export {name}' (its devices are left as they are).\n"
        ));
    }
    out.push_str("config:\n\n");
    let mut table = Table::new(vec![Column::left("NAME"), Column::left("STATE")]);
    table.push(vec![name.to_string(), "UNAVAIL".into()]);
    for (device, present) in devices {
        let state = if *present { "-" } else { "UNAVAIL (missing)" };
        table.push(vec![format!("  {device}"), state.into()]);
    }
    for line in table.render(false).lines() {
        out.push('\t');
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn status_json(view: &PoolView) -> json::PoolStatusEntry {
    match view {
        PoolView::Open { status, notes, .. } => json::PoolStatusEntry {
            name: status.name.clone(),
            state: health_label(status),
            reason: status.suspended.clone(),
            guid: Some(status.guid.to_string()),
            txg: Some(status.txg),
            scan: status.last_scrub.as_ref().map(|scrub| json::ScanEntry {
                function: "scrub",
                state: if scrub.canceled {
                    "canceled"
                } else {
                    "finished"
                },
                start_time_ms: scrub.started_ms,
                end_time_ms: scrub.finished_ms,
                scanned_bytes: scrub.bytes_scanned,
                scanned_blocks: scrub.blocks_scanned,
                bad_copies: scrub.bad_copies,
                repaired_copies: scrub.repaired_copies,
                repaired_bytes: scrub.repaired_bytes,
                unrecoverable_blocks: scrub.unrecoverable_blocks,
            }),
            vdevs: status.tops.iter().map(top_json).collect(),
            data_errors: status
                .last_scrub
                .as_ref()
                .map(|scrub| scrub.damaged.clone())
                .unwrap_or_default(),
            notes: notes.clone(),
            readonly: status.imported_readonly,
        },
        PoolView::Unavailable {
            name,
            reason,
            devices,
            ..
        } => json::PoolStatusEntry {
            name: name.clone(),
            state: "UNAVAIL",
            reason: Some(reason.clone()),
            guid: None,
            txg: None,
            scan: None,
            vdevs: devices
                .iter()
                .map(|(device, present)| json::VdevEntry {
                    name: device.clone(),
                    vdev_type: "disk",
                    class: "normal",
                    state: (!present).then_some("UNAVAIL"),
                    read_errors: None,
                    write_errors: None,
                    checksum_errors: None,
                    repaired_bytes: None,
                    children: Vec::new(),
                })
                .collect(),
            data_errors: Vec::new(),
            notes: Vec::new(),
            readonly: false,
        },
    }
}

fn leaf_json(leaf: &cairn_engine::LeafStatus) -> json::VdevEntry {
    json::VdevEntry {
        name: leaf.name.clone(),
        vdev_type: "disk",
        class: "normal",
        state: Some(leaf.health.as_str()),
        read_errors: Some(leaf.read_errors),
        write_errors: Some(leaf.write_errors),
        checksum_errors: Some(leaf.checksum_errors),
        repaired_bytes: Some(leaf.repaired_bytes),
        children: Vec::new(),
    }
}

fn top_json(top: &cairn_engine::TopStatus) -> json::VdevEntry {
    let class = if top.is_log { "log" } else { "normal" };
    if !top.is_mirror && top.leaves.len() == 1 {
        return json::VdevEntry {
            class,
            ..leaf_json(&top.leaves[0])
        };
    }
    let sum = |count: fn(&cairn_engine::LeafStatus) -> u64| top.leaves.iter().map(count).sum();
    json::VdevEntry {
        name: top.name.clone(),
        vdev_type: "mirror",
        class,
        state: Some(top.health.as_str()),
        read_errors: Some(sum(|leaf| leaf.read_errors)),
        write_errors: Some(sum(|leaf| leaf.write_errors)),
        checksum_errors: Some(sum(|leaf| leaf.checksum_errors)),
        repaired_bytes: Some(sum(|leaf| leaf.repaired_bytes)),
        children: top
            .leaves
            .iter()
            .map(|leaf| json::VdevEntry {
                class,
                ..leaf_json(leaf)
            })
            .collect(),
    }
}

/// Turns per-pool failures (already reported in full) into the command's error.
fn combine(failures: Vec<String>) -> Result<()> {
    match failures.len() {
        0 => Ok(()),
        _ => Err(anyhow!(failures.join("\ncairn: "))),
    }
}

pub fn list(ctx: &Context, format: ListFormat, as_json: bool, pools: &[String]) -> Result<()> {
    let names = pools_or_all(ctx, pools)?;
    let (views, failures) = pool_views(ctx, &names);
    if as_json {
        let entries = views
            .iter()
            .map(|view| (view_name(view).to_string(), list_json(view)))
            .collect();
        say_raw!(ctx, "{}", json::pools("cairn pool list", &entries)?);
        return combine(failures);
    }
    let mut table = Table::new(vec![
        Column::left("NAME"),
        Column::right("SIZE"),
        Column::right("ALLOC"),
        Column::right("FREE"),
        Column::right("FRAG"),
        Column::right("CAP"),
        Column::left("HEALTH"),
    ]);
    for view in &views {
        match view {
            PoolView::Open { status, .. } => table.push(vec![
                status.name.clone(),
                human::size(status.size_bytes, format.exact),
                human::size(status.allocated_bytes, format.exact),
                human::size(status.free_bytes, format.exact),
                human::percent_value(status.fragmentation_percent, format.exact),
                human::percent(status.allocated_bytes, status.size_bytes, format.exact),
                health_label(status).into(),
            ]),
            PoolView::Unavailable { name, reason, .. } => {
                // As zpool: a row of dashes; the reason goes to stderr, beside the table.
                let mut row = vec![name.clone()];
                row.resize(6, "-".to_string());
                row.push("UNAVAIL".into());
                table.push(row);
                shout!(ctx, "cairn: pool '{name}' is UNAVAIL: {reason}");
            }
        }
    }
    if names.is_empty() && !format.scripted {
        say!(ctx, "no pools available");
    } else if !table.is_empty() || (!format.scripted && failures.is_empty()) {
        say_raw!(ctx, "{}", table.render(format.scripted));
    }
    combine(failures)
}

fn list_json(view: &PoolView) -> json::PoolListEntry {
    match view {
        PoolView::Open { status, .. } => json::PoolListEntry {
            name: status.name.clone(),
            state: health_label(status),
            reason: status.suspended.clone(),
            guid: Some(status.guid.to_string()),
            size_bytes: Some(status.size_bytes),
            allocated_bytes: Some(status.allocated_bytes),
            free_bytes: Some(status.free_bytes),
            fragmentation_percent: Some(status.fragmentation_percent),
            capacity_percent: Some(if status.size_bytes == 0 {
                0
            } else {
                (u128::from(status.allocated_bytes) * 100 / u128::from(status.size_bytes)) as u64
            }),
        },
        PoolView::Unavailable { name, reason, .. } => json::PoolListEntry {
            name: name.clone(),
            state: "UNAVAIL",
            reason: Some(reason.clone()),
            guid: None,
            size_bytes: None,
            allocated_bytes: None,
            free_bytes: None,
            fragmentation_percent: None,
            capacity_percent: None,
        },
    }
}

pub fn scrub(ctx: &Context, name: &str) -> Result<()> {
    ctx.with_pool(name, false, |pool| {
        ctx.record(pool)?;
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
        let mut report = |progress: &ScrubProgress| {
            let total = progress.total_bytes.max(progress.scanned_bytes);
            if let Some(bar) = &bar {
                bar.set_length(total);
                bar.set_position(progress.scanned_bytes);
                if progress.bad_copies > 0 {
                    bar.set_message(format!("{} bad copies", progress.bad_copies));
                }
            } else if last_line.elapsed() >= Duration::from_secs(1) {
                last_line = Instant::now();
                shout!(ctx,
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
        let result = pool.scrub(&mut report);
        if let Some(bar) = &bar {
            bar.finish_and_clear();
        }
        let record = result.with_context(|| format!("scrub of pool '{name}' failed"))?;
        say!(ctx,
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
    })
}

pub fn export(ctx: &Context, name: &str) -> Result<()> {
    let pool = match ctx.take(name) {
        Ok((pool, unmounted)) => {
            say_unmounted(ctx, &unmounted);
            pool
        }
        Err(err) => return forget_unavailable(ctx, name, err.into(), "export"),
    };
    if let Err(err) = ctx.record(&pool) {
        let _ = pool.close();
        return Err(err);
    }
    pool.export()
        .with_context(|| format!("cannot export pool '{name}'"))?;
    ctx.cache.remove(name)?;
    Ok(())
}

/// Says which filesystems an export or destroy unmounted first.
fn say_unmounted(ctx: &Context, unmounted: &[(String, std::path::PathBuf)]) {
    for (dataset, mountpoint) in unmounted {
        say!(ctx, "unmounted {dataset} from {}", mountpoint.display());
    }
}

/// `export` or `destroy -f` of a pool that cannot be opened: nothing can be written to its
/// devices, so the pool is only forgotten (removed from the pool cache). Any other failure to
/// open it stays an error.
fn forget_unavailable(ctx: &Context, name: &str, err: anyhow::Error, verb: &str) -> Result<()> {
    let Some(reason) = unavailable_reason(&err) else {
        return Err(err);
    };
    if unavailable_busy(&err) {
        bail!(
            "cannot {verb} pool '{name}': another process has it open ({reason}); stop that process first"
        );
    }
    ctx.cache
        .remove(name)
        .with_context(|| format!("cannot forget pool '{name}'"))?;
    shout!(
        ctx,
        "cairn: pool '{name}' cannot be opened ({reason}); it is forgotten without {verb}ing it: its devices are left as they are"
    );
    Ok(())
}

pub fn destroy(ctx: &Context, name: &str, force: bool) -> Result<()> {
    let pool = match ctx.take(name).map_err(anyhow::Error::from) {
        Ok((pool, unmounted)) => {
            say_unmounted(ctx, &unmounted);
            pool
        }
        Err(err) if force || unavailable_busy(&err) => {
            return forget_unavailable(ctx, name, err, "destroy");
        }
        Err(err) => match unavailable_reason(&err) {
            Some(reason) => bail!(
                "cannot destroy pool '{name}': it cannot be opened ({reason}); cairn pool destroy -f {name} forgets it without touching its devices"
            ),
            None => return Err(err),
        },
    };
    pool.destroy()
        .with_context(|| format!("cannot destroy pool '{name}'"))?;
    ctx.cache.remove(name)?;
    Ok(())
}

fn label_state(state: PoolState) -> &'static str {
    match state {
        PoolState::Active => "ACTIVE",
        PoolState::Exported => "EXPORTED",
        PoolState::Destroyed => "DESTROYED",
    }
}

/// `-o readonly=on|off`: whether the import is read-only.
fn import_readonly(args: &PoolImportArgs) -> Result<bool> {
    let mut readonly = false;
    for (key, value) in &args.options {
        match (key.as_str(), value.as_str()) {
            ("readonly", "on") => readonly = true,
            ("readonly", "off") => readonly = false,
            ("readonly", other) => {
                bail!("cannot import: invalid value '{other}' for readonly (on or off)")
            }
            (other, _) => bail!("cannot import: unknown import option '{other}' (known: readonly)"),
        }
    }
    Ok(readonly)
}

pub fn import(ctx: &Context, args: &PoolImportArgs) -> Result<()> {
    if args.dry_run && args.pool.is_none() {
        bail!("-F -n needs the pool to look at (cairn pool import -d DIR -F -n POOL)");
    }
    let readonly = import_readonly(args)?;
    // A remembered pool that no longer opens because a log device is gone, or because it would
    // have to rewind: its error sends the user here with --ignore-missing-log or -F; the
    // devices are the remembered ones.
    if let Some(wanted) = &args.pool
        && (args.ignore_missing_log || args.rewind)
        && args.dirs.is_empty()
        && ctx.cache.devices(wanted)?.is_some()
    {
        let source = ImportSource::Devices(ctx.cached_devices(wanted)?);
        let options = PoolOptions {
            ignore_missing_log: args.ignore_missing_log,
            rewind: args.rewind,
            readonly,
            without_space_log: readonly,
            ..ctx.pool_options()
        };
        if args.dry_run {
            return preview_rewind(ctx, &source, wanted, wanted, &options);
        }
        let pool = Pool::import(&source, wanted, options)
            .with_context(|| format!("cannot import pool '{wanted}'"))?;
        return finish_import(ctx, pool);
    }
    let dirs: Vec<PathBuf> = if args.dirs.is_empty() {
        vec![PathBuf::from("/dev")]
    } else {
        args.dirs
            .iter()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
            .collect()
    };
    for dir in &dirs {
        if !dir.is_dir() {
            bail!("cannot search {} for pools: not a directory", dir.display());
        }
    }
    let searched = dirs
        .iter()
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    // The engine's one search over every directory: a pool whose devices are spread over
    // several directories is found whole (the search `cairn serve -d` uses too).
    let found: Vec<DiscoveredPool> = discover_pools(&ImportSource::Directories(dirs.clone()));
    let Some(wanted) = &args.pool else {
        let imported: BTreeSet<PathBuf> = ctx
            .cache
            .load()?
            .into_values()
            .flatten()
            .filter_map(|text| parse_cached_device(&text).ok().map(|spec| spec.path))
            .collect();
        let mut shown = 0;
        for pool in &found {
            let destroyed = pool.config.state == PoolState::Destroyed;
            let already = pool
                .devices
                .iter()
                .any(|(spec, _)| imported.contains(&spec.path));
            if already || (destroyed && !args.destroyed) {
                continue;
            }
            if shown > 0 {
                say!(ctx);
            }
            shown += 1;
            say_raw!(ctx, "{}", render_importable(pool));
        }
        if shown == 0 {
            say!(
                ctx,
                "no pools available to import (searched {searched}; use -d DIR to search a directory of device files)"
            );
        }
        return Ok(());
    };
    let matches: Vec<_> = found
        .iter()
        .filter(|pool| pool.config.state != PoolState::Destroyed)
        .filter(|pool| {
            pool.config.pool_name == *wanted || pool.config.pool_guid.to_string() == *wanted
        })
        .collect();
    let pool_found = match matches.as_slice() {
        [] => {
            let destroyed = found.iter().any(|pool| {
                pool.config.pool_name == *wanted && pool.config.state == PoolState::Destroyed
            });
            let hint = if destroyed {
                " (only a destroyed pool of that name was found; destroyed pools cannot be imported)"
            } else {
                " (use -d DIR to search a directory of device files)"
            };
            bail!("cannot import '{wanted}': no such pool found in {searched}{hint}");
        }
        [one] => *one,
        several => bail!(
            "cannot import '{wanted}': several pools have this name (guids {}); import one by guid",
            several
                .iter()
                .map(|pool| pool.config.pool_guid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let name = pool_found.config.pool_name.clone();
    // (With --ignore-missing-log or -F a remembered pool may be imported again from these
    // devices: it could not be opened, or its devices' locks make this import fail.)
    if ctx.cache.devices(&name)?.is_some() && !args.ignore_missing_log && !args.rewind {
        bail!("cannot import '{wanted}': a pool named '{name}' is already imported");
    }
    // By guid from the directories searched: the one search, which also finds the pool's
    // cache devices there.
    let source = ImportSource::Directories(dirs.clone());
    let guid = pool_found.config.pool_guid.to_string();
    let options = PoolOptions {
        ignore_missing_log: args.ignore_missing_log,
        rewind: args.rewind,
        readonly,
        without_space_log: readonly,
        ..ctx.pool_options()
    };
    if args.dry_run {
        return preview_rewind(ctx, &source, &guid, &name, &options);
    }
    let pool = Pool::import(&source, &guid, options)
        .with_context(|| format!("cannot import pool '{name}'"))?;
    finish_import(ctx, pool)
}

/// `import -F -n`: what a rewind would open and lose; nothing is committed or remembered.
fn preview_rewind(
    ctx: &Context,
    source: &ImportSource,
    wanted: &str,
    name: &str,
    options: &PoolOptions,
) -> Result<()> {
    match Pool::preview_import(source, wanted, options)
        .with_context(|| format!("cannot import pool '{name}', even with -F"))?
    {
        Some(rewind) => say!(ctx, "{}", rewind.preview()),
        None => say!(
            ctx,
            "pool '{name}' needs no rewind: its newest committed txg opens (import it without -F)"
        ),
    }
    Ok(())
}

/// Shows what import had to say, remembers the pool and its devices, records the command.
fn finish_import(ctx: &Context, pool: Pool) -> Result<()> {
    let name = pool.name().to_string();
    for note in pool.notes() {
        say!(ctx, "{note}");
    }
    let recorded = ctx
        .cache
        .insert(&name, &device_specs(&pool))
        .map_err(anyhow::Error::from)
        .and_then(|()| ctx.record(&pool));
    let closed = ctx
        .adopt(pool)
        .with_context(|| format!("cannot keep pool '{name}' after import"));
    recorded.and(closed)
}

fn render_importable(pool: &DiscoveredPool) -> String {
    let (config, devices) = (&pool.config, &pool.devices);
    let mut table = Table::new(vec![Column::left("NAME"), Column::left("STATE")]);
    let mut rows = Vec::new();
    let mut pool_ok = true;
    let mut pool_degraded = false;
    for top in &config.tree.tops {
        let mut leaf_rows = Vec::new();
        let mut present = 0;
        for child in &top.children {
            let located = devices.iter().find(|(_, guid)| *guid == child.guid);
            let spec = DeviceSpec {
                path: located
                    .map_or_else(|| PathBuf::from(&child.path), |(spec, _)| spec.path.clone()),
                model: child.model.clone(),
            };
            if located.is_some() {
                present += 1;
            }
            leaf_rows.push((
                spec.to_string(),
                if located.is_some() {
                    "ONLINE"
                } else {
                    "UNAVAIL"
                },
            ));
        }
        let top_state = match present {
            0 => "UNAVAIL",
            n if n == top.children.len() => "ONLINE",
            _ => "DEGRADED",
        };
        pool_ok &= present > 0;
        pool_degraded |= present < top.children.len();
        if top.children.len() == 1 && !matches!(top.kind, cairn_format::label::TopVdevKind::Mirror)
        {
            rows.push((format!("  {}", leaf_rows[0].0), leaf_rows[0].1));
        } else {
            let kind = match top.kind {
                cairn_format::label::TopVdevKind::RaidZ { parity } => format!("raidz{parity}"),
                _ => "mirror".to_string(),
            };
            rows.push((format!("  {kind}-{}", top.id), top_state));
            rows.extend(
                leaf_rows
                    .into_iter()
                    .map(|(name, state)| (format!("    {name}"), state)),
            );
        }
    }
    // No uberblock on any device: a `pool create` cut before its first commit (labels in their
    // first half only), or rings damaged beyond use. Either way there is nothing to import.
    let no_uberblock = pool.newest_uberblock.is_none();
    let pool_state = match (pool_ok && !no_uberblock, pool_degraded) {
        (false, _) => "UNAVAIL",
        (true, true) => "DEGRADED",
        (true, false) => "ONLINE",
    };
    table.push(vec![config.pool_name.clone(), pool_state.into()]);
    for (name, state) in rows {
        table.push(vec![name, state.into()]);
    }
    let mut out = if no_uberblock {
        format!(
            "   pool: {}\n     id: {}\n  state: {pool_state}\n",
            config.pool_name, config.pool_guid
        )
    } else {
        format!(
            "   pool: {}\n     id: {}\n  state: {} ({})\n",
            config.pool_name,
            config.pool_guid,
            pool_state,
            label_state(config.state)
        )
    };
    if pool.creation_incomplete() {
        out.push_str(
            " status: The pool's creation did not complete (no uberblock was written).\n \
             action: The pool cannot be imported: create it again (pool create reuses these \
             devices without -f).\n",
        );
    } else if no_uberblock {
        out.push_str(
            " status: No uberblock of the pool verifies on any of its devices (the labels are \
             damaged).\n action: The pool cannot be imported.\n",
        );
    }
    out.push_str(match (pool_ok, config.state) {
        _ if no_uberblock => "",
        (false, _) => " action: The pool cannot be imported: a vdev has no device present.\n",
        (true, PoolState::Destroyed) => " action: The pool was destroyed and cannot be imported.\n",
        (true, PoolState::Active) => {
            " action: The pool was not exported; import it only if no other process is using it.\n"
        }
        (true, PoolState::Exported) => {
            " action: The pool can be imported using its name or numeric identifier.\n"
        }
    });
    out.push_str(" config:\n\n");
    for line in table.render(false).lines().skip(1) {
        out.push('\t');
        out.push_str(line);
        out.push('\n');
    }
    out
}

pub fn check(ctx: &Context, args: &PoolCheckArgs) -> Result<()> {
    let name = args.pool.as_str();
    let report = if args.dirs.is_empty() {
        ctx.with_pool(name, true, |pool| {
            pool.check()
                .with_context(|| format!("cannot check pool '{name}'"))
        })?
    } else {
        check_exported(ctx, name, &args.dirs)?
    };
    say!(ctx, "pool '{name}' at txg {}:", report.txg);
    say!(ctx, "  blocks:           {}", report.blocks);
    say!(ctx, "  copies verified:  {}", report.copies_verified);
    say!(
        ctx,
        "  allocated:        {} ({} bytes)",
        human::size(report.allocated_bytes, false),
        report.allocated_bytes
    );
    say!(
        ctx,
        "  referenced:       {} ({} bytes)",
        human::size(report.referenced_bytes, false),
        report.referenced_bytes
    );
    if report.intent_log_bytes > 0 {
        say!(
            ctx,
            "  intent log:       {} ({} bytes, of the referenced; in no dataset's used)",
            human::size(report.intent_log_bytes, false),
            report.intent_log_bytes
        );
    }
    if report.filesystems_checked > 0 {
        say!(
            ctx,
            "  filesystems:      {} namespaces walked",
            report.filesystems_checked
        );
    }
    if report.is_clean() {
        say!(ctx, "no problems found");
        return Ok(());
    }
    let problems = report.problems();
    say!(ctx, "{} problems:", problems.len());
    for problem in &problems {
        say!(ctx, "  {problem}");
    }
    bail!("pool '{name}' has {} problems", problems.len())
}

/// `pool check -d DIR POOL` (zdb -e): checks a pool that is not imported from the devices
/// found in `dirs`, opened read-only (no txg, no self-heal, labels untouched) and closed
/// again; it stays exported. An imported pool is checked through its owner instead: its
/// devices may be changing under a server.
fn check_exported(
    ctx: &Context,
    name: &str,
    dirs: &[PathBuf],
) -> Result<cairn_engine::CheckReport> {
    let fail = || format!("cannot check pool '{name}'");
    if ctx.cache.devices(name)?.is_some() {
        bail!(
            "{}: it is imported; check it with cairn pool check {name} (-d is for pools that are not imported)",
            fail()
        );
    }
    let dirs: Vec<PathBuf> = dirs
        .iter()
        .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
        .collect();
    for dir in &dirs {
        if !dir.is_dir() {
            bail!("{}: {} is not a directory", fail(), dir.display());
        }
    }
    let options = PoolOptions {
        readonly: true,
        ..ctx.pool_options()
    };
    let pool = Pool::import(&ImportSource::Directories(dirs), name, options).with_context(fail)?;
    let report = pool.check().with_context(fail);
    let closed = pool.close().with_context(fail);
    let report = report?;
    closed?;
    Ok(report)
}

/// Resets the READ/WRITE/CKSUM counters of every device (like zpool clear); faulted mirror
/// sides whose devices answer again rejoin, resilvered for the txgs they missed. A one-shot
/// command waits for that resilver (it would stop with the process); a server goes on with it
/// in the background.
pub fn clear(ctx: &Context, name: &str, resilver_rate: Option<&str>) -> Result<()> {
    let options = cairn_engine::ResilverOptions {
        rate_bytes_per_s: resilver_rate
            .map(parse_size)
            .transpose()
            .map_err(|err| anyhow!("invalid --resilver-rate: {err}"))?,
        ..cairn_engine::ResilverOptions::default()
    };
    ctx.with_pool(name, false, |pool| {
        pool.clear_errors_with(options)
            .with_context(|| format!("cannot clear errors of pool '{name}'"))?;
        ctx.record(pool)?;
        let resilvering = pool
            .resilver_status()
            .is_some_and(|status| status.finished_ms.is_none() && status.error.is_none());
        if resilvering {
            say!(ctx, "pool '{name}': resilvering the devices that came back");
            if ctx.served.is_none() {
                crate::mirror_cmd::wait(ctx, pool)?;
            }
        }
        Ok(())
    })
}

/// `pool set arc_max=SIZE|arc_min=SIZE POOL`: the process's cache limits (see main.rs).
pub fn set(ctx: &Context, assignment: &str, pool: &str) -> Result<()> {
    if !ctx.pool_names()?.iter().any(|name| name == pool) {
        bail!("cannot set property for '{pool}': no such pool");
    }
    let (name, value) = assignment
        .split_once('=')
        .ok_or_else(|| anyhow!("expected PROPERTY=VALUE, got '{assignment}'"))?;
    let bytes = parse_size(value).map_err(|err| anyhow!("cannot set {name}={value}: {err}"))?;
    let cache = cairn_engine::process_cache();
    let stats = cache.stats();
    let (mut min, mut max) = (
        stats.get("c_min").unwrap_or(0),
        stats.get("c_max").unwrap_or(0),
    );
    match name {
        "arc_max" => {
            max = bytes;
            min = min.min(max);
        }
        "arc_min" => min = bytes,
        other => bail!("unknown pool property '{other}' (settable: arc_max, arc_min)"),
    }
    cache
        .set_limits(min, max)
        .map_err(|err| anyhow!("cannot set {name}={value}: {err}"))?;
    if ctx.served.is_none() {
        say!(
            ctx,
            "no server is running: the setting lasts for this command only (start `cairn serve --{}`)",
            name.replace('_', "-")
        );
    }
    Ok(())
}

/// `pool get POOL`: the cache limits and where the cache stands.
pub fn get(ctx: &Context, format: ListFormat, pool: &str) -> Result<()> {
    if !ctx.pool_names()?.iter().any(|name| name == pool) {
        bail!("cannot get properties of '{pool}': no such pool");
    }
    let stats = cairn_engine::process_cache().stats();
    let mut table = Table::new(vec![
        Column::left("NAME"),
        Column::left("PROPERTY"),
        Column::right("VALUE"),
        Column::left("SOURCE"),
    ]);
    for (property, field, source) in [
        ("arc_max", "c_max", "server"),
        ("arc_min", "c_min", "server"),
        ("arc_target", "c", "adaptive"),
        ("arc_size", "size", "-"),
    ] {
        table.push(vec![
            pool.to_string(),
            property.to_string(),
            human::size(stats.get(field).unwrap_or(0), format.exact),
            source.to_string(),
        ]);
    }
    say_raw!(ctx, "{}", table.render(format.scripted));
    Ok(())
}

pub fn sync(ctx: &Context, pools: &[String]) -> Result<()> {
    let names = ctx.pools_or_all(pools)?;
    for name in &names {
        let synced = ctx.with_pool(name, false, |pool| {
            pool.sync()
                .with_context(|| format!("cannot sync pool '{name}'"))?;
            Ok(())
        });
        ctx.skip_unavailable(synced, !pools.is_empty())?;
    }
    Ok(())
}

pub fn history(ctx: &Context, name: &str) -> Result<()> {
    let entries = ctx.with_pool(name, true, |pool| anyhow::Ok(pool.history()))?;
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
    let timings = ctx.with_pool(name, false, |pool| anyhow::Ok(pool.txg_history()))?;
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
    ]);
    for timing in &timings {
        table.push(vec![
            timing.txg.to_string(),
            format!("{:?}", timing.trigger).to_lowercase(),
            human::size(timing.dirty_bytes, format.exact),
            timing.holds_count.to_string(),
            human::micros(timing.open_us, format.exact),
            human::micros(timing.quiesce_us, format.exact),
            human::micros(timing.sync_us, format.exact),
            timing.writer_delays_count.to_string(),
            human::micros(timing.writer_delay_ns_total / 1000, format.exact),
            timing.writers_blocked_count.to_string(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shows_why_a_pool_is_suspended() {
        let reason = "sync of txg 5 failed: a free in txg 5 was refused";
        let mut status = PoolStatus {
            name: "tank".into(),
            guid: 1,
            health: cairn_pool::vdev::Health::Online,
            txg: 4,
            size_bytes: 1 << 30,
            allocated_bytes: 1 << 20,
            free_bytes: (1 << 30) - (1 << 20),
            fragmentation_percent: 0,
            tops: Vec::new(),
            last_scrub: None,
            suspended: Some(reason.into()),
            suspended_until_clear: false,
            resilver: None,
            imported_readonly: false,
        };
        let text = render_status(&status, &[], false);
        assert!(
            text.contains("SUSPENDED") && text.contains(reason) && text.contains("re-import"),
            "{text}"
        );
        // A suspension that `pool clear` ends says so (the reason carries the advice).
        status.suspended_until_clear = true;
        status.suspended = Some("I/O suspended: run 'cairn pool clear tank'".into());
        let text = render_status(&status, &[], false);
        assert!(
            text.contains("SUSPENDED")
                && text.contains("pool clear")
                && !text.contains("re-import"),
            "{text}"
        );
        status.suspended = None;
        assert!(!render_status(&status, &[], false).contains("SUSPENDED"));
    }
}
