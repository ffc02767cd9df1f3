//! `cairn pool …`: the zpool side of the CLI.
//!
//! Commands that only look (`status`, `list`, `history`, `check`) open the pool read-only, so
//! looking never writes a txg; commands that change the pool open it read-write, record their
//! command line in the pool history, and close (sync) it before returning. `create` and `import`
//! add the pool to the pool cache with the device specs the pool actually ended up using;
//! `export` and `destroy` remove it once the engine has succeeded.

use crate::context::{Context, device_specs};
use crate::context::{say, say_raw, shout};
use crate::human;
use crate::table::{Column, Table};
use crate::vdevs::{parse_device, parse_vdevs};
use crate::{ListFormat, PoolAddArgs, PoolCreateArgs, PoolImportArgs};
use anyhow::{Context as _, Result, anyhow, bail};
use cairn_dataset::properties::parse_size;
use cairn_device::spec::DeviceSpec;
use cairn_engine::{
    CreateOptions, EngineError, ImportSource, Pool, PoolOptions, PoolStatus, ScrubProgress,
    VdevGroup, default_opener, discover_pools,
};
use cairn_format::PoolState;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub fn create(ctx: &Context, args: &PoolCreateArgs) -> Result<()> {
    let name = &args.name;
    let fail = || format!("cannot create pool '{name}'");
    if ctx.cache.devices(name)?.is_some() {
        bail!("cannot create pool '{name}': a pool of that name is already imported");
    }
    let groups = parse_vdevs(&args.vdevs).with_context(fail)?;
    let size = creation_size(args.size.as_deref(), &groups).with_context(fail)?;
    let mut options = CreateOptions {
        create_size_bytes: size,
        force: args.force,
        root_properties: args.root_properties.clone(),
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
    let missing = missing_files(&groups);
    let pool = Pool::create(name, &groups, &options, PoolOptions::default()).map_err(|err| {
        remove_files(&missing);
        match err {
            // The engine's message already says "cannot create pool".
            EngineError::Create(reason) => anyhow!("{}: {reason}", fail()),
            other => anyhow::Error::new(other).context(fail()),
        }
    })?;
    let recorded = ctx
        .cache
        .insert(name, &device_specs(&pool))
        .with_context(|| format!("pool '{name}' was created but not added to the pool cache; import it with cairn pool import"))
        .and_then(|()| ctx.record(&pool));
    let closed = ctx
        .adopt(pool)
        .with_context(|| format!("cannot close new pool '{name}'"));
    recorded.and(closed)
}

/// `--size` parsed; without it every device must exist.
pub(crate) fn creation_size(size: Option<&str>, groups: &[VdevGroup]) -> Result<Option<u64>> {
    let size = size
        .map(parse_size)
        .transpose()
        .map_err(|err| anyhow!("invalid --size: {err}"))?;
    if size.is_none()
        && let Some(spec) = groups
            .iter()
            .flat_map(|group| &group.devices)
            .find(|spec| !spec.path.exists())
    {
        bail!(
            "{} does not exist (use --size SIZE to create missing files)",
            spec.path.display()
        );
    }
    Ok(size)
}

/// Files that `--size` will create; removed again if the command fails.
pub(crate) fn missing_files(groups: &[VdevGroup]) -> Vec<PathBuf> {
    groups
        .iter()
        .flat_map(|group| &group.devices)
        .filter(|spec| !spec.path.exists())
        .map(|spec| spec.path.clone())
        .collect()
}

pub(crate) fn remove_files(paths: &[PathBuf]) {
    for path in paths {
        if path.is_file() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// `cairn pool add POOL log [mirror] DEV…`
pub fn add(ctx: &Context, args: &PoolAddArgs) -> Result<()> {
    let name = &args.pool;
    let fail = || format!("cannot add devices to pool '{name}'");
    let groups = parse_vdevs(&args.vdevs).with_context(fail)?;
    let size = creation_size(args.size.as_deref(), &groups).with_context(fail)?;
    let options = CreateOptions {
        create_size_bytes: size,
        force: args.force,
        ..CreateOptions::default()
    };
    let missing = missing_files(&groups);
    let added = ctx.with_pool(name, false, |pool| {
        let names = pool
            .add_log_vdevs(&groups, &options, &default_opener())
            .with_context(fail)?;
        ctx.cache
            .insert(name, &device_specs(pool))
            .with_context(|| format!("the pool cache does not list the new devices of '{name}'"))?;
        ctx.record(pool)?;
        Ok(names)
    });
    match added {
        Ok(names) => {
            say!(ctx, "pool '{name}': added log {}", names.join(", "));
            Ok(())
        }
        Err(err) => {
            remove_files(&missing);
            Err(err)
        }
    }
}

/// `cairn pool remove POOL VDEV` (log devices).
pub fn remove(ctx: &Context, name: &str, vdev: &str) -> Result<()> {
    // A device may be named by a relative path; the pool knows absolute ones.
    let absolute = std::path::Path::new(vdev)
        .exists()
        .then(|| std::path::absolute(vdev).ok())
        .flatten()
        .map(|path| path.display().to_string());
    let vdev = absolute.as_deref().unwrap_or(vdev);
    ctx.with_pool(name, false, |pool| {
        pool.remove_log_vdev(vdev)
            .with_context(|| format!("cannot remove '{vdev}' from pool '{name}'"))?;
        ctx.cache
            .insert(name, &device_specs(pool))
            .with_context(|| format!("the pool cache still lists '{vdev}' for '{name}'"))?;
        ctx.record(pool)?;
        say!(ctx, "pool '{name}': removed log device {vdev}");
        Ok(())
    })
}

fn render_status(status: &PoolStatus) -> String {
    let mut out = String::new();
    out.push_str(&format!("  pool: {}\n", status.name));
    out.push_str(&format!(" state: {}\n", status.health.as_str()));
    if status.health != cairn_pool::vdev::Health::Online {
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
        status.health.as_str().into(),
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
    for line in table.render(false).lines() {
        out.push('\t');
        out.push_str(line);
        out.push('\n');
    }
    out.push('\n');
    match &status.last_scrub {
        Some(scrub) if !scrub.damaged.is_empty() => {
            out.push_str(&format!(
                "errors: {} data errors found by the last scrub, in:\n\n",
                scrub.damaged.len()
            ));
            for place in &scrub.damaged {
                out.push_str(&format!("        {place}\n"));
            }
        }
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
        ctx.pool_names()
    } else {
        Ok(pools.to_vec())
    }
}

pub fn status(ctx: &Context, pools: &[String]) -> Result<()> {
    let names = pools_or_all(ctx, pools)?;
    if names.is_empty() {
        say!(ctx, "no pools available");
        return Ok(());
    }
    let mut failures = Vec::new();
    for (index, name) in names.iter().enumerate() {
        match ctx.with_pool(name, true, |pool| {
            Ok((pool.status(), pool.notes().to_vec()))
        }) {
            Ok((status, notes)) => {
                if index > 0 {
                    say!(ctx);
                }
                say_raw!(ctx, "{}", render_status(&status));
                for note in notes {
                    say!(ctx, "note: {note}");
                }
            }
            Err(err) => failures.push(format!("{err:#}")),
        }
    }
    combine(failures)
}

/// Turns per-pool failures (already reported in full) into the command's error.
fn combine(failures: Vec<String>) -> Result<()> {
    match failures.len() {
        0 => Ok(()),
        _ => Err(anyhow!(failures.join("\ncairn: "))),
    }
}

pub fn list(ctx: &Context, format: ListFormat, pools: &[String]) -> Result<()> {
    let names = pools_or_all(ctx, pools)?;
    let mut table = Table::new(vec![
        Column::left("NAME"),
        Column::right("SIZE"),
        Column::right("ALLOC"),
        Column::right("FREE"),
        Column::right("FRAG"),
        Column::right("CAP"),
        Column::left("HEALTH"),
    ]);
    let mut failures = Vec::new();
    for name in &names {
        match ctx.with_pool(name, true, |pool| Ok(pool.status())) {
            Ok(status) => table.push(vec![
                status.name.clone(),
                human::size(status.size_bytes, format.exact),
                human::size(status.allocated_bytes, format.exact),
                human::size(status.free_bytes, format.exact),
                human::percent_value(status.fragmentation_percent, format.exact),
                human::percent(status.allocated_bytes, status.size_bytes, format.exact),
                status.health.as_str().into(),
            ]),
            Err(err) => failures.push(format!("{err:#}")),
        }
    }
    if names.is_empty() && !format.scripted {
        say!(ctx, "no pools available");
    } else if !table.is_empty() || (!format.scripted && failures.is_empty()) {
        say_raw!(ctx, "{}", table.render(format.scripted));
    }
    combine(failures)
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
    let pool = ctx.take(name)?;
    if let Err(err) = ctx.record(&pool) {
        let _ = pool.close();
        return Err(err);
    }
    pool.export()
        .with_context(|| format!("cannot export pool '{name}'"))?;
    ctx.cache.remove(name)?;
    Ok(())
}

pub fn destroy(ctx: &Context, name: &str) -> Result<()> {
    let pool = ctx.take(name)?;
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

pub fn import(ctx: &Context, args: &PoolImportArgs) -> Result<()> {
    // A remembered pool that no longer opens because a log device is gone: its error sends
    // the user here with --ignore-missing-log; the devices are the remembered ones.
    if let Some(wanted) = &args.pool
        && args.ignore_missing_log
        && args.dirs.is_empty()
        && ctx.cache.devices(wanted)?.is_some()
    {
        let pool = Pool::import(
            &ImportSource::Devices(ctx.cached_devices(wanted)?),
            wanted,
            PoolOptions {
                ignore_missing_log: true,
                ..PoolOptions::default()
            },
        )
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
    // One entry per pool guid, merging devices found in several directories.
    let mut found = BTreeMap::new();
    for dir in &dirs {
        for pool in discover_pools(&ImportSource::Directory(dir.clone())) {
            match found.entry(pool.config.pool_guid) {
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert(pool);
                }
                std::collections::btree_map::Entry::Occupied(mut slot) => {
                    let known = slot.get_mut();
                    if pool.config.txg > known.config.txg {
                        known.config = pool.config.clone();
                    }
                    for device in pool.devices {
                        if !known
                            .devices
                            .iter()
                            .any(|(spec, _)| spec.path == device.0.path)
                        {
                            known.devices.push(device);
                        }
                    }
                }
            }
        }
    }
    let Some(wanted) = &args.pool else {
        let imported: BTreeSet<PathBuf> = ctx
            .cache
            .load()?
            .into_values()
            .flatten()
            .filter_map(|text| parse_device(&text).ok().map(|spec| spec.path))
            .collect();
        let mut shown = 0;
        for pool in found.values() {
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
            say_raw!(ctx, "{}", render_importable(&pool.config, &pool.devices));
        }
        if shown == 0 {
            say!(ctx, "no pools available to import (searched {searched})");
        }
        return Ok(());
    };
    let matches: Vec<_> = found
        .values()
        .filter(|pool| pool.config.state != PoolState::Destroyed)
        .filter(|pool| {
            pool.config.pool_name == *wanted || pool.config.pool_guid.to_string() == *wanted
        })
        .collect();
    let pool_found = match matches.as_slice() {
        [] => {
            let destroyed = found.values().any(|pool| {
                pool.config.pool_name == *wanted && pool.config.state == PoolState::Destroyed
            });
            let hint = if destroyed {
                " (only a destroyed pool of that name was found; destroyed pools cannot be imported)"
            } else {
                ""
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
    // (With --ignore-missing-log a remembered pool may be imported again from these devices:
    // it could not be opened, or its devices' locks make this import fail.)
    if ctx.cache.devices(&name)?.is_some() && !args.ignore_missing_log {
        bail!("cannot import '{wanted}': a pool named '{name}' is already imported");
    }
    let specs: Vec<DeviceSpec> = pool_found
        .devices
        .iter()
        .map(|(spec, _)| spec.clone())
        .collect();
    let pool = Pool::import(
        &ImportSource::Devices(specs),
        &pool_found.config.pool_guid.to_string(),
        PoolOptions {
            ignore_missing_log: args.ignore_missing_log,
            ..PoolOptions::default()
        },
    )
    .with_context(|| format!("cannot import pool '{name}'"))?;
    finish_import(ctx, pool)
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
        .and_then(|()| ctx.record(&pool));
    let closed = ctx
        .adopt(pool)
        .with_context(|| format!("cannot close pool '{name}' after import"));
    recorded.and(closed)
}

fn render_importable(config: &cairn_format::LabelConfig, devices: &[(DeviceSpec, u64)]) -> String {
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
    let pool_state = match (pool_ok, pool_degraded) {
        (false, _) => "UNAVAIL",
        (true, true) => "DEGRADED",
        (true, false) => "ONLINE",
    };
    table.push(vec![config.pool_name.clone(), pool_state.into()]);
    for (name, state) in rows {
        table.push(vec![name, state.into()]);
    }
    let mut out = format!(
        "   pool: {}\n     id: {}\n  state: {} ({})\n",
        config.pool_name,
        config.pool_guid,
        pool_state,
        label_state(config.state)
    );
    out.push_str(match (pool_ok, config.state) {
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

pub fn check(ctx: &Context, name: &str) -> Result<()> {
    let report = ctx.with_pool(name, true, |pool| {
        pool.check()
            .with_context(|| format!("cannot check pool '{name}'"))
    })?;
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

/// Resets the READ/WRITE/CKSUM counters of every device (like zpool clear).
pub fn clear(ctx: &Context, name: &str) -> Result<()> {
    ctx.with_pool(name, false, |pool| {
        pool.clear_errors()
            .with_context(|| format!("cannot clear errors of pool '{name}'"))?;
        ctx.record(pool)
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
        ctx.with_pool(name, false, |pool| {
            pool.sync()
                .with_context(|| format!("cannot sync pool '{name}'"))?;
            Ok(())
        })?;
    }
    Ok(())
}

pub fn history(ctx: &Context, name: &str) -> Result<()> {
    let entries = ctx.with_pool(name, true, |pool| Ok(pool.history()))?;
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
    let timings = ctx.with_pool(name, false, |pool| Ok(pool.txg_history()))?;
    let mut table = Table::new(vec![
        Column::right("TXG"),
        Column::left("TRIGGER"),
        Column::right("DIRTY"),
        Column::right("HOLDS"),
        Column::right("OPEN"),
        Column::right("QUIESCE"),
        Column::right("SYNC"),
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
