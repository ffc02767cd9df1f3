//! `cairn stat arc [-H] [-p] [INTERVAL [COUNT]]`: the RAM cache (ARC) of a running server, like
//! arcstat.
//!
//! Without an interval the command asks the server (or, with none, this process) for the
//! cache's counters (`AdminRequest::ArcCounters`) and prints every counter and size once: a
//! NAME/VALUE table, or with `-H -p` one `name<TAB>value` line each for scripts. With an
//! interval it asks the server for them every INTERVAL seconds, printing one arcstat-style line
//! per interval: reads, hit ratios by demand/prefetch x data/metadata, I/O hits, ghost hits,
//! evictions — counters as the difference over the interval — and the cache's size and target
//! at the end of it. The first line covers the server's life so far.

use crate::context::{Context, say, say_raw};
use crate::table::{Column, Table};
use crate::{ListFormat, human, iostat_cmd, remote};
use anyhow::{Result, bail};
use cairn_frontend::admin::samples::ArcSample;
use cairn_frontend::admin::{AdminReply, AdminRequest};
use clap::Args;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct StatArcArgs {
    #[command(flatten)]
    pub format: ListFormat,
    /// [INTERVAL [COUNT]]
    pub args: Vec<String>,
}

/// Fields that are sizes (shown human-readable without `-p`).
fn is_size(name: &str) -> bool {
    name.ends_with("size")
        || name.ends_with("_bytes")
        || name.starts_with("evict_l2_")
        || matches!(name, "c" | "c_min" | "c_max" | "meta_target" | "mru_target")
}

type Sample = BTreeMap<String, u64>;

/// The cache's counters, from the server or this process.
fn counters(ctx: &Context) -> Result<ArcSample> {
    match remote::call(ctx, AdminRequest::ArcCounters)? {
        AdminReply::ArcCounters(sample) => Ok(sample),
        other => Err(remote::unexpected(&other)),
    }
}

pub fn arc(ctx: &Context, args: &StatArcArgs) -> Result<()> {
    if !args.args.is_empty() {
        return interval_mode(ctx, args);
    }
    let stats = counters(ctx)?;
    if !args.format.scripted && !stats.served {
        say!(
            ctx,
            "no server is running: this shows the cache of this command only (start `cairn serve`)"
        );
    }
    let mut table = Table::new(vec![Column::left("NAME"), Column::right("VALUE")]);
    for (name, value) in &stats.fields {
        let shown = if is_size(name) {
            human::size(*value, args.format.exact)
        } else {
            value.to_string()
        };
        table.push(vec![name.to_string(), shown]);
    }
    say_raw!(ctx, "{}", table.render(args.format.scripted));
    Ok(())
}

fn interval_mode(ctx: &Context, args: &StatArcArgs) -> Result<()> {
    let (extra, interval, count) = iostat_cmd::parse_positional(&args.args)?;
    if !extra.is_empty() {
        bail!("expected [INTERVAL [COUNT]], got {}", args.args.join(" "));
    }
    let seconds = interval.expect("interval mode has an interval");
    let sample = || -> Result<Sample> {
        match remote::call_server(ctx, AdminRequest::ArcCounters)? {
            Ok(AdminReply::ArcCounters(sample)) => Ok(sample.fields.into_iter().collect()),
            Ok(other) => Err(remote::unexpected(&other)),
            Err(_) => Err(remote::no_server(ctx, "stat arc with an interval watches").into()),
        }
    };
    let mut before = Sample::new();
    let mut now = sample()?;
    let mut printed = 0;
    loop {
        let table = interval_table(&before, &now, args.format.exact);
        let text = crate::table::interval_text(&table, printed == 0, args.format.scripted);
        say_raw!(ctx, "{text}");
        printed += 1;
        if count.is_some_and(|count| printed >= count) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs_f64(seconds));
        before = std::mem::replace(&mut now, sample()?);
    }
}

/// One arcstat-style line: counters over the interval, sizes at its end.
fn interval_table(before: &Sample, now: &Sample, exact: bool) -> Table {
    let delta = |name: &str| {
        now.get(name)
            .copied()
            .unwrap_or(0)
            .saturating_sub(before.get(name).copied().unwrap_or(0))
    };
    let at = |name: &str| now.get(name).copied().unwrap_or(0);
    let ratio = |hits: u64, misses: u64| human::percent(hits, hits + misses, exact);
    let (hits, iohits, misses) = (delta("hits"), delta("iohits"), delta("misses"));
    let mut table = Table::new(
        [
            "READ", "HIT%", "DDHIT%", "DMHIT%", "PDHIT%", "PMHIT%", "IOHIT", "MISS", "MRUG",
            "MFUG", "EVICT", "SIZE", "C", "AVAIL",
        ]
        .into_iter()
        .map(Column::right)
        .collect(),
    );
    table.push(vec![
        (hits + iohits + misses).to_string(),
        ratio(hits + iohits, misses),
        ratio(
            delta("demand_data_hits") + delta("demand_data_iohits"),
            delta("demand_data_misses"),
        ),
        ratio(
            delta("demand_metadata_hits") + delta("demand_metadata_iohits"),
            delta("demand_metadata_misses"),
        ),
        ratio(delta("prefetch_data_hits"), delta("prefetch_data_misses")),
        ratio(
            delta("prefetch_metadata_hits"),
            delta("prefetch_metadata_misses"),
        ),
        iohits.to_string(),
        misses.to_string(),
        delta("mru_ghost_hits").to_string(),
        delta("mfu_ghost_hits").to_string(),
        delta("evictions").to_string(),
        human::size(at("size"), exact),
        human::size(at("c"), exact),
        human::size(at("memory_available_bytes"), exact),
    ]);
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_lines_are_differences() {
        let sample = |fields: &[(&str, u64)]| -> Sample {
            fields
                .iter()
                .map(|(name, value)| (name.to_string(), *value))
                .collect()
        };
        let before = sample(&[("hits", 10), ("misses", 5), ("iohits", 0), ("size", 4096)]);
        let now = sample(&[("hits", 40), ("misses", 15), ("iohits", 2), ("size", 8192)]);
        let rendered = interval_table(&before, &now, true).render(true);
        let row: Vec<&str> = rendered.trim_end().split('\t').collect();
        assert_eq!(
            row[0], "42",
            "reads over the interval: 30 hits, 2 I/O hits, 10 misses"
        );
        assert_eq!(row[7], "10", "misses over the interval");
        assert_eq!(row[11], "8192", "size at the end of the interval");
    }
}
