//! `cairn diff --blocks SNAPSHOT [SNAPSHOT|VOLUME]` (without `--blocks`, the paths that changed
//! in a filesystem: `fs_diff_cmd.rs`): the byte ranges of a volume that differ
//! between one of its snapshots and a later one, or the volume as it is now (the default when
//! only one name is given, as `zfs diff`). What is compared and why it costs what changed is
//! `cairn_engine::Pool::diff_blocks`'s business; this module renders.
//!
//! Output follows the other list commands: an `OFFSET LENGTH` table with human-readable sizes
//! for people, exact byte counts with `-p`, no header and tab-separated fields with `-H`, and
//! with `-j` one JSON document (fields in docs/json.md) that also carries the volume's size
//! and block size and the walk's cost (`blocks_visited`).

use crate::context::{Context, say_raw};
use crate::table::{Column, Table};
use crate::{DiffArgs, human, json, remote};
use anyhow::{Result, bail};
use cairn_frontend::admin::{AdminReply, AdminRequest};

pub fn diff(ctx: &Context, args: &DiffArgs) -> Result<()> {
    let newer = match &args.newer {
        Some(newer) => newer.clone(),
        None => match args.older.split_once('@') {
            Some((dataset, _)) => dataset.to_string(),
            None => bail!(
                "'{}' is not a snapshot: the older side must be one (DATASET@SNAPSHOT)",
                args.older
            ),
        },
    };
    if !args.blocks {
        return crate::fs_diff_cmd::diff_files(ctx, args, newer);
    }
    let request = AdminRequest::DiffBlocks {
        older: args.older.clone(),
        newer: newer.clone(),
    };
    let diff = match remote::call(ctx, request)? {
        AdminReply::BlockDiff(diff) => diff,
        other => return Err(remote::unexpected(&other)),
    };
    if args.json {
        let document = json::BlockDiffEntry {
            older: args.older.clone(),
            newer,
            volsize_bytes: diff.volsize_bytes,
            volblocksize_bytes: u64::from(diff.volblocksize_bytes),
            changed_bytes: diff.ranges.iter().map(|(_, length)| length).sum(),
            blocks_visited: diff.blocks_visited,
            ranges: diff
                .ranges
                .iter()
                .map(|&(offset_bytes, length_bytes)| json::RangeEntry {
                    offset_bytes,
                    length_bytes,
                })
                .collect(),
        };
        say_raw!(ctx, "{}", json::diff("cairn diff --blocks", &document)?);
        return Ok(());
    }
    let mut table = Table::new(vec![Column::right("OFFSET"), Column::right("LENGTH")]);
    for (offset, length) in diff.ranges {
        table.push(vec![
            human::size(offset, args.format.exact),
            human::size(length, args.format.exact),
        ]);
    }
    if !table.is_empty() {
        say_raw!(ctx, "{}", table.render(args.format.scripted));
    }
    Ok(())
}
