//! Choosing the uberblock to open (`open_newest`) and the rewind that choice means (`Rewind`):
//! what an import gives up when the newest txg the labels prove committed does not open and an
//! older one does, and how the refusal, the preview (`-F -n`) and the note after a rewind say so.
//!
//! Invariants: never falls back further than `DEFER_TXGS` past the newest uberblock; reads only.
//! This file uses `discover` and `load` below it; the import itself (`mod.rs`) sits above.

use super::discover::{DiscoveredPool, import_error};
use super::load::{Loaded, load};
use crate::EngineError;
use crate::pool::PoolOptions;
use cairn_format::Uberblock;
use cairn_pool::labels::read_uberblocks;
use cairn_pool::space::DEFER_TXGS;
use cairn_pool::vdev::VdevTree;
use std::sync::Arc;

/// What an import gives up when the newest txg the labels prove committed cannot be opened
/// and an older one can: a rewind (ZFS's `zpool import -F`). Import refuses it unless asked
/// (`PoolOptions::rewind`), since the txgs in between were acknowledged to writers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewind {
    pub pool: String,
    /// The newest txg the labels prove committed.
    pub committed_txg: u64,
    /// What proves it (a label's config, a verified uberblock).
    pub evidence: String,
    /// The txg the import opens instead.
    pub to_txg: u64,
    /// When `to_txg` was committed (milliseconds since the Unix epoch; 0 if unknown).
    pub to_timestamp_ms: u64,
    /// When the newest uberblock that verifies was written, if it is newer than `to_txg` (its
    /// tree did not verify); `None` when no newer uberblock can be read.
    pub newest_timestamp_ms: Option<u64>,
    /// Why each newer uberblock that verifies could not be opened.
    pub failures: Vec<String>,
    /// Some newer txg failed in its space log only: a read-only import (which needs no
    /// allocator state) could open it.
    pub space_log_damaged: bool,
}

impl Rewind {
    /// How many committed txgs the rewind gives up.
    pub fn lost_txgs(&self) -> u64 {
        self.committed_txg.saturating_sub(self.to_txg)
    }

    /// "txg 10 (committed 2026-12-02 05:40:17 UTC)".
    fn target(&self) -> String {
        if self.to_timestamp_ms == 0 {
            format!("txg {}", self.to_txg)
        } else {
            format!(
                "txg {} (committed {})",
                self.to_txg,
                cairn_metrics::time::utc_date(self.to_timestamp_ms)
            )
        }
    }

    /// "txgs 11–27 (17 txgs, at least 42 s of changes)".
    fn loss(&self) -> String {
        let lost = self.lost_txgs();
        let txgs = if lost == 1 {
            format!("txg {} (1 txg", self.committed_txg)
        } else {
            format!(
                "txgs {}–{} ({lost} txgs",
                self.to_txg + 1,
                self.committed_txg
            )
        };
        let span = match self.newest_timestamp_ms {
            Some(newest_ms) if self.to_timestamp_ms > 0 && newest_ms > self.to_timestamp_ms => {
                format!(
                    ", at least {} of changes",
                    cairn_metrics::time::rough_duration(newest_ms - self.to_timestamp_ms)
                )
            }
            _ => ", every change made since then".to_string(),
        };
        format!("{txgs}{span})")
    }

    fn why(&self) -> String {
        if self.failures.is_empty() {
            format!(
                "no uberblock newer than txg {} can be read on any device",
                self.to_txg
            )
        } else {
            format!("no newer txg opens ({})", self.failures.join("; "))
        }
    }

    /// Why import refuses, what a rewind would lose, and how to ask for it.
    pub fn refusal(&self) -> String {
        format!(
            "its labels show txg {} was committed ({}), but {}: importing would rewind to {} and \
             lose {}; import with -F to rewind (-F -n shows what it would do, changing nothing){}",
            self.committed_txg,
            self.evidence,
            self.why(),
            self.target(),
            self.loss(),
            if self.space_log_damaged {
                READONLY_HINT
            } else {
                ""
            }
        )
    }

    /// What a rewind would do, for `import -F -n`.
    pub fn preview(&self) -> String {
        format!(
            "pool '{}' would be rewound to {}, losing {}: its labels show txg {} was committed \
             ({}), but {}",
            self.pool,
            self.target(),
            self.loss(),
            self.committed_txg,
            self.evidence,
            self.why()
        )
    }

    /// The note an import that rewound leaves.
    pub(super) fn note(&self) -> String {
        let mut note = format!(
            "pool '{}' rewound to {} as asked (-F): lost {}",
            self.pool,
            self.target(),
            self.loss()
        );
        if self.lost_txgs() > DEFER_TXGS {
            note.push_str(&format!(
                "; space those txgs freed may have been reused since: run 'cairn pool scrub {}'",
                self.pool
            ));
        }
        note
    }
}

/// Said when a txg fails to open because of its space log: the allocator state is needed only
/// to write.
const READONLY_HINT: &str = "; the space log (allocator state) is damaged: import with -o \
     readonly=on to read the data without it and copy it off";

/// The newest uberblock of the pool's tree whose tree verifies, loaded, and the rewind that
/// opening it means if the labels prove a newer txg committed. Falls back past an uberblock
/// whose tree does not verify for as long as the frees of the newer txgs were still deferred
/// (`DEFER_TXGS`). Reads only.
pub(super) fn open_newest(
    found: &DiscoveredPool,
    tree: &Arc<VdevTree>,
    options: &PoolOptions,
) -> Result<(Uberblock, Loaded, Option<Rewind>), EngineError> {
    let pool_name = &found.config.pool_name;
    let guid_sum = found.config.tree.guid_sum();
    let mut candidates: Vec<Uberblock> = tree
        .leaves()
        .filter_map(|leaf| leaf.device())
        .flat_map(|device| read_uberblocks(device.as_ref()))
        .filter(|ub| ub.pool_guid == found.config.pool_guid && ub.guid_sum == guid_sum)
        .collect();
    candidates.sort_by_key(|ub| std::cmp::Reverse(ub.txg));
    candidates.dedup_by(|a, b| a.txg == b.txg);
    let newest = candidates.first().map_or(0, |ub| ub.txg);
    let mut failures = Vec::new();
    let mut space_log_failed = false;
    for ub in candidates
        .iter()
        .take_while(|ub| ub.txg + DEFER_TXGS >= newest)
    {
        match load(tree, ub, options) {
            Ok(loaded) => {
                // Past DEFER_TXGS the blocks a newer txg freed may have been reused: that tree
                // cannot be trusted, whatever verifies.
                assert!(
                    ub.txg + DEFER_TXGS >= newest,
                    "fell back past the deferred frees"
                );
                let newest_timestamp_ms = candidates
                    .iter()
                    .chain(found.newest_uberblock.as_ref().map(|(ub, _)| ub))
                    .filter(|newer| newer.txg > ub.txg)
                    .map(|newer| newer.timestamp_ms)
                    .max();
                let rewind = found
                    .committed_txg()
                    .filter(|(committed_txg, _)| *committed_txg > ub.txg)
                    .map(|(committed_txg, evidence)| Rewind {
                        pool: pool_name.clone(),
                        committed_txg,
                        evidence,
                        to_txg: ub.txg,
                        to_timestamp_ms: ub.timestamp_ms,
                        newest_timestamp_ms,
                        failures: failures.clone(),
                        space_log_damaged: space_log_failed,
                    });
                // Never a silent rewind: opening anything older than a txg the labels prove
                // committed carries the `Rewind` that import refuses unless asked.
                debug_assert!(
                    rewind.is_some()
                        || found
                            .committed_txg()
                            .is_none_or(|(committed, _)| committed <= ub.txg)
                );
                return Ok((ub.clone(), loaded, rewind));
            }
            Err(err) => {
                space_log_failed |= err.in_space_log;
                failures.push(format!(
                    "txg {}: {}",
                    ub.txg,
                    crate::error_chain(&err.error)
                ));
            }
        }
    }
    let rescue_hint = if space_log_failed { READONLY_HINT } else { "" };
    Err(import_error(
        pool_name,
        if !failures.is_empty() {
            format!(
                "no uberblock whose tree verifies ({}){rescue_hint}",
                failures.join("; ")
            )
        } else if found.creation_incomplete() {
            "its creation did not complete (no uberblock was written): create it again (pool \
             create reuses these devices without -f)"
                .to_string()
        } else {
            "no valid uberblock found".to_string()
        },
    ))
}
