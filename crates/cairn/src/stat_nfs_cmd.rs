//! `cairn stat nfs`: the NFS server's statistics (`cairn serve --nfs`), fetched from the
//! running server over the control socket: calls by procedure (NFSv3 and MOUNT) with errors,
//! bytes and p50/p99/max latency; WRITEs by the stability the client asked and the one the
//! server answered; COMMITs and what they carried (the UNSTABLE writes of their file since its
//! previous COMMIT); stale handles, replies from the duplicate-request cache, refusals;
//! connections; and a row per client address (at most `CLIENTS_MAX`, the least recently
//! active dropped first — the output says how many were).
//!
//! `-H` prints `name<TAB>value` lines (`nfs.PROCEDURE.calls`, `writes.ASKED.ANSWERED.count`,
//! `commits.carried_bytes`, `client.ADDRESS.calls`, …; latencies in µs, sizes in bytes); `-j`
//! one JSON document (docs/json.md). Without a server, or with one not serving NFS, it says so
//! (every counter is then zero).

use crate::ListFormat;
use crate::context::{Context, say, say_raw};
use crate::human;
use crate::remote;
use crate::table::{Column, Table};
use anyhow::Result;
use cairn_frontend::admin::{AdminReply, AdminRequest};
use cairn_frontend::nfs_stats::NfsReport;

pub fn nfs(ctx: &Context, format: ListFormat, json: bool) -> Result<()> {
    let sample = match remote::call(ctx, AdminRequest::NfsStats)? {
        AdminReply::NfsStats(sample) => sample,
        other => return Err(remote::unexpected(&other)),
    };
    if json {
        say_raw!(ctx, "{}", crate::json::nfs("cairn stat nfs", &sample)?);
        return Ok(());
    }
    let report = &sample.nfs;
    if format.scripted {
        say_scripted(ctx, report);
        return Ok(());
    }
    if !sample.served {
        say!(
            ctx,
            "no server is running: start `cairn serve --nfs ADDR:PORT` (counters are all zero)"
        );
        return Ok(());
    }
    if !sample.serving {
        say!(
            ctx,
            "the server does not serve NFS (start it with --nfs ADDR:PORT)"
        );
        return Ok(());
    }
    say_tables(ctx, report, format.exact);
    Ok(())
}

/// `-H`: one `name<TAB>value` line per counter.
fn say_scripted(ctx: &Context, report: &NfsReport) {
    for row in &report.procedures {
        let prefix = format!("{}.{}", row.program, row.procedure);
        for (field, value) in [
            ("calls", row.calls),
            ("errors", row.errors),
            ("bytes", row.bytes),
            ("latency_p50_us", row.latency_p50_us),
            ("latency_p99_us", row.latency_p99_us),
            ("latency_max_us", row.latency_max_us),
        ] {
            say_raw!(ctx, "{prefix}.{field}\t{value}\n");
        }
    }
    for row in &report.writes {
        let prefix = format!("writes.{}.{}", row.asked, row.answered);
        say_raw!(ctx, "{prefix}.count\t{}\n", row.count);
        say_raw!(ctx, "{prefix}.bytes\t{}\n", row.bytes);
    }
    let c = &report.commits;
    for (field, value) in [
        ("count", c.count),
        ("carried_writes", c.carried_writes),
        ("carried_bytes", c.carried_bytes),
        ("empty", c.empty),
        ("carried_bytes_p50", c.carried_bytes_p50),
        ("carried_bytes_p99", c.carried_bytes_p99),
        ("carried_bytes_max", c.carried_bytes_max),
    ] {
        say_raw!(ctx, "commits.{field}\t{value}\n");
    }
    for (field, value) in server_fields(report) {
        say_raw!(ctx, "{field}\t{value}\n");
    }
    for client in &report.clients {
        let prefix = format!("client.{}", client.address);
        for (field, value) in [
            ("calls", client.calls),
            ("errors", client.errors),
            ("refused", client.refused),
            ("read_bytes", client.read_bytes),
            ("written_bytes", client.written_bytes),
            ("commits", client.commits),
            ("connections_open", client.connections_open),
            ("connections_total", client.connections_total),
            ("latency_p50_us", client.latency_p50_us),
            ("latency_p99_us", client.latency_p99_us),
            ("latency_max_us", client.latency_max_us),
            ("last_seen_ms", client.last_seen_ms),
        ] {
            say_raw!(ctx, "{prefix}.{field}\t{value}\n");
        }
    }
}

/// The server-wide counters, by their `-H` names.
fn server_fields(report: &NfsReport) -> [(&'static str, u64); 21] {
    [
        ("read_bytes", report.read_bytes),
        ("written_bytes", report.written_bytes),
        ("pending_files", report.pending_files),
        ("pending_dropped", report.pending_dropped),
        ("portmap_calls", report.portmap_calls),
        ("stale_handles", report.stale_handles),
        ("duplicate_replies", report.duplicate_replies),
        ("auth_refusals", report.auth_refusals),
        ("garbage_calls", report.garbage_calls),
        ("unsupported_calls", report.unsupported_calls),
        ("verifier_changes", report.verifier_changes),
        ("connections_open", report.connections_open),
        ("connections_total", report.connections_total),
        ("connections_refused", report.connections_refused),
        ("memory_max_bytes", report.memory_max_bytes),
        ("memory_charged_bytes", report.memory_charged_bytes),
        ("memory_peak_bytes", report.memory_peak_bytes),
        ("memory_waits", report.memory_waits),
        ("clients", report.clients.len() as u64),
        ("clients_max", report.clients_max),
        ("clients_dropped", report.clients_dropped),
    ]
}

/// The memory limit of calls in flight (`nfs::memory`): what they hold, their peak, waits.
fn say_memory(ctx: &Context, report: &NfsReport, exact: bool) {
    let size = |bytes: u64| human::size(bytes, exact);
    say!(
        ctx,
        "memory of calls in flight: {} of {} now, peak {}; {} calls waited for room",
        size(report.memory_charged_bytes),
        size(report.memory_max_bytes),
        size(report.memory_peak_bytes),
        report.memory_waits
    );
}

fn say_tables(ctx: &Context, report: &NfsReport, exact: bool) {
    let size = |bytes: u64| human::size(bytes, exact);
    let micros = |us: u64| human::micros(us, exact);
    say!(
        ctx,
        "connections: {} open, {} in all, {} refused (server full); read {}, written {}",
        report.connections_open,
        report.connections_total,
        report.connections_refused,
        size(report.read_bytes),
        size(report.written_bytes)
    );
    say_memory(ctx, report, exact);
    say!(
        ctx,
        "stale handles {}, duplicate-cache replies {}, auth refusals {}, garbage {}, unsupported {}, portmap {}, verifier changes {}",
        report.stale_handles,
        report.duplicate_replies,
        report.auth_refusals,
        report.garbage_calls,
        report.unsupported_calls,
        report.portmap_calls,
        report.verifier_changes
    );
    let mut calls = Table::new(vec![
        Column::left("PROGRAM"),
        Column::left("PROCEDURE"),
        Column::right("CALLS"),
        Column::right("ERRORS"),
        Column::right("BYTES"),
        Column::right("P50"),
        Column::right("P99"),
        Column::right("MAX"),
    ]);
    for row in report.procedures.iter().filter(|row| row.calls > 0) {
        calls.push(vec![
            row.program.clone(),
            row.procedure.clone(),
            row.calls.to_string(),
            row.errors.to_string(),
            size(row.bytes),
            micros(row.latency_p50_us),
            micros(row.latency_p99_us),
            micros(row.latency_max_us),
        ]);
    }
    say!(ctx);
    if calls.is_empty() {
        say!(ctx, "no calls yet");
    } else {
        say_raw!(ctx, "{}", calls.render(false));
    }
    let mut writes = Table::new(vec![
        Column::left("WRITE ASKED"),
        Column::left("ANSWERED"),
        Column::right("COUNT"),
        Column::right("BYTES"),
    ]);
    for row in report.writes.iter().filter(|row| row.count > 0) {
        writes.push(vec![
            row.asked.clone(),
            row.answered.clone(),
            row.count.to_string(),
            size(row.bytes),
        ]);
    }
    if !writes.is_empty() {
        say!(ctx);
        say_raw!(ctx, "{}", writes.render(false));
    }
    let c = &report.commits;
    let mut commits = Table::new(vec![
        Column::right("COMMITS"),
        Column::right("CARRIED-WRITES"),
        Column::right("CARRIED"),
        Column::right("EMPTY"),
        Column::right("PER-COMMIT P50"),
        Column::right("P99"),
        Column::right("MAX"),
        Column::right("FILES-PENDING"),
    ]);
    commits.push(vec![
        c.count.to_string(),
        c.carried_writes.to_string(),
        size(c.carried_bytes),
        c.empty.to_string(),
        size(c.carried_bytes_p50),
        size(c.carried_bytes_p99),
        size(c.carried_bytes_max),
        report.pending_files.to_string(),
    ]);
    say!(ctx);
    say!(
        ctx,
        "COMMITs: what each carried (UNSTABLE writes of its file since the previous COMMIT):"
    );
    say_raw!(ctx, "{}", commits.render(false));
    say_clients(ctx, report, exact);
}

fn say_clients(ctx: &Context, report: &NfsReport, exact: bool) {
    let mut clients = Table::new(vec![
        Column::left("CLIENT"),
        Column::right("CONNS"),
        Column::right("TOTAL"),
        Column::right("CALLS"),
        Column::right("ERRORS"),
        Column::right("REFUSED"),
        Column::right("READ"),
        Column::right("WRITTEN"),
        Column::right("COMMITS"),
        Column::right("P50"),
        Column::right("P99"),
        Column::right("MAX"),
    ]);
    for client in &report.clients {
        clients.push(vec![
            client.address.clone(),
            client.connections_open.to_string(),
            client.connections_total.to_string(),
            client.calls.to_string(),
            client.errors.to_string(),
            client.refused.to_string(),
            human::size(client.read_bytes, exact),
            human::size(client.written_bytes, exact),
            client.commits.to_string(),
            human::micros(client.latency_p50_us, exact),
            human::micros(client.latency_p99_us, exact),
            human::micros(client.latency_max_us, exact),
        ]);
    }
    say!(ctx);
    if !clients.is_empty() {
        say_raw!(ctx, "{}", clients.render(false));
    }
    say!(
        ctx,
        "clients: {} kept (at most {}, the least recently active dropped first: {} dropped)",
        report.clients.len(),
        report.clients_max,
        report.clients_dropped
    );
}
