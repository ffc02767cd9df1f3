//! `cairn pool status` and `cairn pool list`: one view per pool (open, or remembered but
//! unavailable: `admin::PoolViews`, from the server or taken here), rendered as zpool's text
//! or as JSON (`docs/json.md`). Uses no sibling.

use crate::context::Context;
use crate::context::{say, say_raw, shout};
use crate::table::{Column, Table};
use crate::{ListFormat, PoolStatusArgs, remote};
use crate::{human, json};
use anyhow::{Result, anyhow};
use cairn_engine::CacheDeviceStatus;
use cairn_engine::PoolStatus;
use cairn_frontend::admin::{AdminReply, AdminRequest, PoolView, PoolViews};

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
    let mut out = status_header(status);
    out.push_str(&format!("  scan: {}\n", scan_line(status)));
    out.push_str("config:\n\n");
    let mut table = vdev_table(status);
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
    out.push_str(&errors_line(status, verbose));
    out
}

/// `pool:`, `state:` and the `status:` lines (read-only import, suspension, lost redundancy).
fn status_header(status: &PoolStatus) -> String {
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
    out
}

/// READ/WRITE/CKSUM error sums of `leaves`.
fn error_sums(leaves: &[cairn_engine::LeafStatus]) -> (u64, u64, u64) {
    leaves.iter().fold((0, 0, 0), |(r, w, c), leaf| {
        (
            r + leaf.read_errors,
            w + leaf.write_errors,
            c + leaf.checksum_errors,
        )
    })
}

/// The pool's row, then each top-level vdev (log devices in their own section, below the
/// data vdevs, as zpool shows them) with its leaves.
fn vdev_table(status: &PoolStatus) -> Table {
    let mut table = Table::new(vec![
        Column::left("NAME"),
        Column::left("STATE"),
        Column::right("READ"),
        Column::right("WRITE"),
        Column::right("CKSUM"),
    ]);
    let all_leaves: Vec<cairn_engine::LeafStatus> = status
        .tops
        .iter()
        .flat_map(|top| top.leaves.clone())
        .collect();
    let (r, w, c) = error_sums(&all_leaves);
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
            table.push(vec![
                "logs".into(),
                String::new(),
                String::new(),
                String::new(),
                String::new(),
            ]);
            logs_header = true;
        }
        if top.is_mirror || top.leaves.len() != 1 {
            let (r, w, c) = error_sums(&top.leaves);
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
    table
}

/// One leaf's row: resilvering and repaired bytes noted after its name.
fn leaf_row(leaf: &cairn_engine::LeafStatus, indent: &str) -> Vec<String> {
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
}

/// As zpool: the count of places with permanent errors, and with -v their list.
fn errors_line(status: &PoolStatus, verbose: bool) -> String {
    match &status.last_scrub {
        Some(scrub) if !scrub.damaged.is_empty() && verbose => {
            let mut out = format!(
                "errors: {} data errors found by the last scrub, in:\n\n",
                scrub.damaged.len()
            );
            for place in &scrub.damaged {
                out.push_str(&format!("        {place}\n"));
            }
            out
        }
        Some(scrub) if !scrub.damaged.is_empty() => format!(
            "errors: {} data errors found by the last scrub, use '-v' for a list\n",
            scrub.damaged.len()
        ),
        _ => "errors: No known data errors\n".to_string(),
    }
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

/// The views of `pools` (every remembered pool when empty), from the server or here.
fn pool_views(ctx: &Context, pools: &[String]) -> Result<PoolViews> {
    let request = AdminRequest::PoolViews {
        pools: pools.to_vec(),
    };
    match remote::call(ctx, request)? {
        AdminReply::PoolViews(views) => Ok(views),
        other => Err(remote::unexpected(&other)),
    }
}

pub fn status(ctx: &Context, args: &PoolStatusArgs) -> Result<()> {
    let PoolViews {
        names,
        views,
        failures,
    } = pool_views(ctx, &args.pools)?;
    if args.json {
        let entries = views
            .iter()
            .map(|view| (view.name().to_string(), status_json(view)))
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
        vdev_type: if top.name.starts_with("raidz") {
            "raidz"
        } else {
            "mirror"
        },
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
    let PoolViews {
        names,
        views,
        failures,
    } = pool_views(ctx, pools)?;
    if as_json {
        let entries = views
            .iter()
            .map(|view| (view.name().to_string(), list_json(view)))
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
