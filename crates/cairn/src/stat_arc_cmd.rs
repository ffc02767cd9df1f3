//! `cairn stat arc [-H] [-p] [INTERVAL [COUNT]]`: the RAM cache (ARC) of a running server, like
//! arcstat.
//!
//! Without an interval the command runs inside the server (forwarded like any other) and prints
//! every counter and size once: a NAME/VALUE table, or with `-H -p` one `name<TAB>value` line
//! each for scripts. With an interval it runs here and asks the server for snapshots
//! (`--snapshot`, the `-H -p` form) every INTERVAL seconds, printing one arcstat-style line per
//! interval: reads, hit ratios by demand/prefetch x data/metadata, I/O hits, ghost hits,
//! evictions — counters as the difference over the interval — and the cache's size and target
//! at the end of it. The first line covers the server's life so far.

use crate::context::{Context, say, say_raw};
use crate::table::{Column, Table};
use crate::{ListFormat, human, iostat_cmd, remote};
use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Args, serde::Serialize, serde::Deserialize)]
pub struct StatArcArgs {
    #[command(flatten)]
    pub format: ListFormat,
    /// Print the server's raw counters (used by the interval mode).
    #[arg(long, hide = true)]
    pub snapshot: bool,
    /// [INTERVAL [COUNT]]
    pub args: Vec<String>,
}

impl StatArcArgs {
    /// Interval mode polls the server from this process.
    pub fn runs_here(&self) -> bool {
        !self.snapshot && !self.args.is_empty()
    }
}

/// Fields that are sizes (shown human-readable without `-p`).
fn is_size(name: &str) -> bool {
    name.ends_with("size")
        || name.ends_with("_bytes")
        || name.starts_with("evict_l2_")
        || matches!(name, "c" | "c_min" | "c_max" | "meta_target" | "mru_target")
}

type Sample = BTreeMap<String, u64>;

pub fn arc(ctx: &Context, args: &StatArcArgs) -> Result<()> {
    let stats = cairn_engine::process_cache().stats();
    if args.snapshot {
        for (name, value) in &stats.fields {
            say_raw!(ctx, "{name}\t{value}\n");
        }
        return Ok(());
    }
    if !args.args.is_empty() {
        return interval_mode(ctx, args);
    }
    if !args.format.scripted && ctx.served.is_none() {
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

fn parse_sample(text: &str) -> Result<Sample> {
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line
                .split_once('\t')
                .ok_or_else(|| anyhow!("malformed cache counter line {line:?}"))?;
            let value = value
                .parse::<u64>()
                .with_context(|| format!("malformed value in {line:?}"))?;
            Ok((name.to_string(), value))
        })
        .collect()
}

fn interval_mode(ctx: &Context, args: &StatArcArgs) -> Result<()> {
    let (extra, interval, count) = iostat_cmd::parse_positional(&args.args)?;
    if !extra.is_empty() {
        bail!("expected [INTERVAL [COUNT]], got {}", args.args.join(" "));
    }
    let seconds = interval.expect("interval mode has an interval");
    let sample = || -> Result<Sample> {
        parse_sample(&remote::ask_server(
            ctx,
            &["stat", "arc", "--snapshot"],
            "stat arc with an interval watches",
        )?)
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
    fn snapshots_parse_and_interval_lines_are_differences() {
        let before = parse_sample("hits\t10\nmisses\t5\niohits\t0\nsize\t4096\n").unwrap();
        let now = parse_sample("hits\t40\nmisses\t15\niohits\t2\nsize\t8192\n").unwrap();
        let rendered = interval_table(&before, &now, true).render(true);
        let row: Vec<&str> = rendered.trim_end().split('\t').collect();
        assert_eq!(
            row[0], "42",
            "reads over the interval: 30 hits, 2 I/O hits, 10 misses"
        );
        assert_eq!(row[7], "10", "misses over the interval");
        assert_eq!(row[11], "8192", "size at the end of the interval");
        assert!(parse_sample("hits 10").is_err());
        assert!(parse_sample("hits\tmany").is_err());
    }
}
