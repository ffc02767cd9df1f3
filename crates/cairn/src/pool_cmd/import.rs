//! `cairn pool import` and `cairn pool check`: the requests (`admin::ImportRequest`,
//! `AdminRequest::Check`, directories made absolute here) and how their answers read: the
//! pools that could be imported, a rewind's preview, a check's report. Finding, importing
//! and checking are the administration library's. Uses no sibling.

use crate::context::Context;
use crate::context::{say, say_raw};
use crate::human;
use crate::table::{Column, Table};
use crate::{PoolCheckArgs, PoolImportArgs, remote};
use anyhow::{Result, bail};
use cairn_format::PoolState;
use cairn_frontend::admin::{
    AdminReply, AdminRequest, ImportOutcome, ImportRequest, ImportablePool,
};
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
    let request = ImportRequest {
        pool: args.pool.clone(),
        dirs: absolute_dirs(&args.dirs),
        include_destroyed: args.destroyed,
        ignore_missing_log: args.ignore_missing_log,
        rewind: args.rewind,
        dry_run: args.dry_run,
        readonly: import_readonly(args)?,
    };
    let outcome = match remote::call(ctx, AdminRequest::Import(request))? {
        AdminReply::Import(outcome) => outcome,
        other => return Err(remote::unexpected(&other)),
    };
    match outcome {
        ImportOutcome::Importable {
            pools,
            unreadable,
            searched,
        } => {
            for (shown, pool) in pools.iter().enumerate() {
                if shown > 0 {
                    say!(ctx);
                }
                say_raw!(ctx, "{}", render_importable(pool));
            }
            for (shown, pool) in unreadable.iter().enumerate() {
                if shown + pools.len() > 0 {
                    say!(ctx);
                }
                say_raw!(ctx, "{}", render_unreadable(pool));
            }
            if pools.is_empty() && unreadable.is_empty() {
                say!(
                    ctx,
                    "no pools available to import (searched {searched}; use -d DIR to search a directory of device files)"
                );
            }
        }
        ImportOutcome::Imported { notes } => {
            for note in notes {
                say!(ctx, "{note}");
            }
        }
        ImportOutcome::RewindPreview { preview, name } => match preview {
            Some(preview) => say!(ctx, "{preview}"),
            None => say!(
                ctx,
                "pool '{name}' needs no rewind: its newest committed txg opens (import it without -F)"
            ),
        },
    }
    Ok(())
}

/// `-d DIR`s made absolute against this process's directory.
fn absolute_dirs(dirs: &[PathBuf]) -> Vec<PathBuf> {
    dirs.iter()
        .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
        .collect()
}

/// A pool of a format version this build does not read: listed so that a user looking for it
/// learns why it cannot be imported here, rather than not seeing it at all.
fn render_unreadable(pool: &cairn_engine::UnreadablePool) -> String {
    format!(
        "   pool: {}\n     id: {}\n  state: UNAVAIL (unsupported format)\n status: its on-disk \
         format is version {} (found on {}), and this build reads {}\n action: import it with \
         the build of cairn that made it\n",
        pool.name,
        pool.guid,
        pool.format_version,
        pool.path.display(),
        cairn_format::readable_format_versions()
    )
}

fn render_importable(pool: &ImportablePool) -> String {
    let mut table = Table::new(vec![Column::left("NAME"), Column::left("STATE")]);
    // No uberblock on any device: a `pool create` cut before its first commit (labels in their
    // first half only), or rings damaged beyond use. Either way there is nothing to import.
    let no_uberblock = pool.no_uberblock;
    let pool_state = match (pool.pool_ok && !no_uberblock, pool.pool_degraded) {
        (false, _) => "UNAVAIL",
        (true, true) => "DEGRADED",
        (true, false) => "ONLINE",
    };
    table.push(vec![pool.name.clone(), pool_state.into()]);
    for (name, state) in &pool.rows {
        table.push(vec![name.clone(), state.clone()]);
    }
    let mut out = if no_uberblock {
        format!(
            "   pool: {}\n     id: {}\n  state: {pool_state}\n",
            pool.name, pool.guid
        )
    } else {
        format!(
            "   pool: {}\n     id: {}\n  state: {} ({})\n",
            pool.name,
            pool.guid,
            pool_state,
            label_state(pool.label_state)
        )
    };
    out.push_str(&importable_advice(pool));
    out.push_str(" config:\n\n");
    for line in table.render(false).lines().skip(1) {
        out.push('\t');
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The `status:` and `action:` lines of an importable pool.
fn importable_advice(pool: &ImportablePool) -> String {
    let (pool_ok, no_uberblock) = (pool.pool_ok, pool.no_uberblock);
    let mut out = String::new();
    if pool.creation_incomplete {
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
    out.push_str(match (pool_ok, pool.label_state) {
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
    let request = AdminRequest::Check {
        pool: name.to_string(),
        dirs: absolute_dirs(&args.dirs),
    };
    let report = match remote::call(ctx, request)? {
        AdminReply::Checked(report) => report,
        other => return Err(remote::unexpected(&other)),
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
