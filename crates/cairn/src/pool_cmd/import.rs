//! `cairn pool import` and `cairn pool check`: finding pools on devices, previewing a rewind,
//! importing (read-write or read-only, with the pool cache updated once the pool is durable)
//! and checking an exported pool without importing it. Uses no sibling.

use crate::context::Context;
use crate::context::{say, say_raw};
use crate::human;
use crate::table::{Column, Table};
use crate::{PoolCheckArgs, PoolImportArgs};
use anyhow::{Context as _, Result, bail};
use cairn_device::spec::DeviceSpec;
use cairn_engine::{DiscoveredPool, ImportSource, Pool, PoolOptions, discover_pools};
use cairn_format::PoolState;
use cairn_frontend::admin;
use std::path::PathBuf;

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
    let options = PoolOptions {
        ignore_missing_log: args.ignore_missing_log,
        rewind: args.rewind,
        readonly,
        without_space_log: readonly,
        ..ctx.pool_options()
    };
    // A remembered pool that no longer opens because a log device is gone, or because it would
    // have to rewind: its error sends the user here with --ignore-missing-log or -F; the
    // devices are the remembered ones.
    if let Some(wanted) = &args.pool
        && (args.ignore_missing_log || args.rewind)
        && args.dirs.is_empty()
        && ctx.cache.devices(wanted)?.is_some()
    {
        let source = ImportSource::Devices(ctx.cached_devices(wanted)?);
        return import_from(ctx, args, &source, wanted, wanted, options);
    }
    let dirs = search_dirs(args)?;
    let searched = dirs
        .iter()
        .map(|dir| dir.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    // The engine's one search over every directory: a pool whose devices are spread over
    // several directories is found whole (the search `cairn serve -d` uses too).
    let found: Vec<DiscoveredPool> = discover_pools(&ImportSource::Directories(dirs.clone()));
    let Some(wanted) = &args.pool else {
        return list_importable(ctx, &found, args.destroyed, &searched);
    };
    let chosen = admin::choose_pool(&found, wanted, &searched)?;
    let name = chosen.config.pool_name.clone();
    // (With --ignore-missing-log or -F a remembered pool may be imported again from these
    // devices: it could not be opened, or its devices' locks make this import fail.)
    admin::refuse_imported_name(
        &ctx.access,
        wanted,
        &name,
        args.ignore_missing_log || args.rewind,
    )?;
    // By guid from the directories searched: the one search, which also finds the pool's
    // cache devices there.
    let guid = chosen.config.pool_guid.to_string();
    import_from(
        ctx,
        args,
        &ImportSource::Directories(dirs),
        &guid,
        &name,
        options,
    )
}

/// The directories `-d` names, absolute (`/dev` without any); each must be a directory.
fn search_dirs(args: &PoolImportArgs) -> Result<Vec<PathBuf>> {
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
    Ok(dirs)
}

/// `import` without a pool: what could be imported.
fn list_importable(
    ctx: &Context,
    found: &[DiscoveredPool],
    include_destroyed: bool,
    searched: &str,
) -> Result<()> {
    let importable = admin::importable_pools(&ctx.access, found, include_destroyed)?;
    for (shown, pool) in importable.iter().enumerate() {
        if shown > 0 {
            say!(ctx);
        }
        say_raw!(ctx, "{}", render_importable(pool));
    }
    if importable.is_empty() {
        say!(
            ctx,
            "no pools available to import (searched {searched}; use -d DIR to search a directory of device files)"
        );
    }
    Ok(())
}

/// Imports (or, with `-n`, previews the rewind of) the pool `wanted` names in `source`.
fn import_from(
    ctx: &Context,
    args: &PoolImportArgs,
    source: &ImportSource,
    wanted: &str,
    name: &str,
    options: PoolOptions,
) -> Result<()> {
    if args.dry_run {
        return preview_rewind(ctx, source, wanted, name, &options);
    }
    let pool = Pool::import(source, wanted, options)
        .with_context(|| format!("cannot import pool '{name}'"))?;
    for note in pool.notes() {
        say!(ctx, "{note}");
    }
    Ok(admin::remember_imported(
        &ctx.access,
        pool,
        &ctx.command_line,
    )?)
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

fn render_importable(pool: &DiscoveredPool) -> String {
    let config = &pool.config;
    let mut table = Table::new(vec![Column::left("NAME"), Column::left("STATE")]);
    let (rows, pool_ok, pool_degraded) = importable_rows(pool);
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
    out.push_str(&importable_advice(pool, pool_ok, no_uberblock));
    out.push_str(" config:\n\n");
    for line in table.render(false).lines().skip(1) {
        out.push('\t');
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The rows of an importable pool's vdevs (a plain vdev's one leaf, or a mirror's or raidz's
/// row and its leaves, each ONLINE where a device was found), whether every vdev has a device
/// (`pool_ok`) and whether any lacks one (`pool_degraded`).
fn importable_rows(pool: &DiscoveredPool) -> (Vec<(String, &'static str)>, bool, bool) {
    let (config, devices) = (&pool.config, &pool.devices);
    let mut rows: Vec<(String, &'static str)> = Vec::new();
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
    (rows, pool_ok, pool_degraded)
}

/// The `status:` and `action:` lines of an importable pool.
fn importable_advice(pool: &DiscoveredPool, pool_ok: bool, no_uberblock: bool) -> String {
    let mut out = String::new();
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
    out.push_str(match (pool_ok, pool.config.state) {
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
