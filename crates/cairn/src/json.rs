//! `-j`: JSON output of `pool list`, `pool status`, `list`, `diff` (`fs_diff_cmd.rs`), `diff --blocks`, `stat snapshots` and `stat nfs`, for programs (as OpenZFS 2.3's
//! `zpool status -j`).
//!
//! Every document has the same envelope: `output_version` (the command, and a major/minor
//! version: the major changes only when a field is removed or changes meaning; new fields bump
//! the minor), then one object keyed by name (`pools` or `datasets`), or the one `diff` or `nfs`. Field names are the stable
//! contract documented in docs/json.md; every field is always present (`null` when unknown,
//! as for the sizes of an UNAVAIL pool). Numbers are exact: sizes in bytes, percentages as
//! whole numbers; guids are decimal strings because they do not fit a double.

use serde::Serialize;
use std::collections::BTreeMap;

/// The version of the field set below.
const VERSION_MAJOR: u32 = 1;
const VERSION_MINOR: u32 = 0;

#[derive(Serialize)]
struct OutputVersion {
    command: &'static str,
    vers_major: u32,
    vers_minor: u32,
}

#[derive(Serialize)]
struct PoolsDocument<'a, T> {
    output_version: OutputVersion,
    pools: &'a BTreeMap<String, T>,
}

#[derive(Serialize)]
struct DatasetsDocument<'a, T> {
    output_version: OutputVersion,
    datasets: &'a BTreeMap<String, T>,
}

fn version(command: &'static str) -> OutputVersion {
    OutputVersion {
        command,
        vers_major: VERSION_MAJOR,
        vers_minor: VERSION_MINOR,
    }
}

fn to_text(value: &impl Serialize) -> anyhow::Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}

/// `{"output_version": …, "pools": {NAME: pool, …}}`.
pub fn pools<T: Serialize>(
    command: &'static str,
    pools: &BTreeMap<String, T>,
) -> anyhow::Result<String> {
    to_text(&PoolsDocument {
        output_version: version(command),
        pools,
    })
}

/// `{"output_version": …, "datasets": {NAME: dataset, …}}`.
pub fn datasets<T: Serialize>(
    command: &'static str,
    datasets: &BTreeMap<String, T>,
) -> anyhow::Result<String> {
    to_text(&DatasetsDocument {
        output_version: version(command),
        datasets,
    })
}

#[derive(Serialize)]
struct DiffDocument<'a, T> {
    output_version: OutputVersion,
    diff: &'a T,
}

/// `{"output_version": …, "diff": {…}}`.
pub fn diff<T: Serialize>(command: &'static str, diff: &T) -> anyhow::Result<String> {
    to_text(&DiffDocument {
        output_version: version(command),
        diff,
    })
}

#[derive(Serialize)]
struct NfsDocument<'a> {
    output_version: OutputVersion,
    nfs: NfsStatsEntry<'a>,
}

/// `stat nfs -j`: the NFS server's statistics.
#[derive(Serialize)]
struct NfsStatsEntry<'a> {
    /// The counters are a running server's.
    served: bool,
    /// That server serves NFS (else every counter is zero).
    serving: bool,
    #[serde(flatten)]
    stats: &'a cairn_frontend::nfs_stats::NfsReport,
}

/// `{"output_version": …, "nfs": {…}}`.
pub fn nfs(
    command: &'static str,
    sample: &cairn_frontend::admin::stats::NfsSample,
) -> anyhow::Result<String> {
    to_text(&NfsDocument {
        output_version: version(command),
        nfs: NfsStatsEntry {
            served: sample.served,
            serving: sample.serving,
            stats: &sample.nfs,
        },
    })
}

/// `diff --blocks -j`: what differs between two versions of a volume.
#[derive(Serialize)]
pub struct BlockDiffEntry {
    pub older: String,
    pub newer: String,
    pub volsize_bytes: u64,
    pub volblocksize_bytes: u64,
    /// The sum of the ranges' lengths.
    pub changed_bytes: u64,
    /// Blocks the walk read or reported (its cost, which follows the change).
    pub blocks_visited: u64,
    pub ranges: Vec<RangeEntry>,
}

#[derive(Serialize)]
pub struct RangeEntry {
    pub offset_bytes: u64,
    pub length_bytes: u64,
}

/// One row of `pool list -j`.
#[derive(Serialize)]
pub struct PoolListEntry {
    pub name: String,
    /// ONLINE, DEGRADED, FAULTED, SUSPENDED or UNAVAIL.
    pub state: &'static str,
    /// Why an UNAVAIL pool cannot be opened, or why a SUSPENDED one refuses writes; `null`
    /// otherwise.
    pub reason: Option<String>,
    pub guid: Option<String>,
    pub size_bytes: Option<u64>,
    pub allocated_bytes: Option<u64>,
    pub free_bytes: Option<u64>,
    pub fragmentation_percent: Option<u64>,
    pub capacity_percent: Option<u64>,
}

/// One pool of `pool status -j`.
#[derive(Serialize)]
pub struct PoolStatusEntry {
    pub name: String,
    pub state: &'static str,
    pub reason: Option<String>,
    pub guid: Option<String>,
    /// The last synced txg.
    pub txg: Option<u64>,
    /// The last scrub; `null` if none ran (or the pool is UNAVAIL).
    pub scan: Option<ScanEntry>,
    /// Top-level vdevs in pool order, log vdevs last (`class` tells them apart). For an
    /// UNAVAIL pool: the devices the pool cache lists, each a `disk` whose `state` is UNAVAIL
    /// if its file is missing and `null` if present (the pool did not open, so nothing more is
    /// known).
    pub vdevs: Vec<VdevEntry>,
    /// Places the last scrub found unrecoverable ("dataset … object … block …").
    pub data_errors: Vec<String>,
    /// Notes the import had (missing devices, a rewind).
    pub notes: Vec<String>,
    /// Imported read-only (`pool import -o readonly=on`): nothing is written to it.
    pub readonly: bool,
}

#[derive(Serialize)]
pub struct ScanEntry {
    pub function: &'static str,
    /// finished or canceled.
    pub state: &'static str,
    pub start_time_ms: u64,
    pub end_time_ms: u64,
    pub scanned_bytes: u64,
    pub scanned_blocks: u64,
    pub bad_copies: u64,
    pub repaired_copies: u64,
    pub repaired_bytes: u64,
    pub unrecoverable_blocks: u64,
}

#[derive(Serialize)]
pub struct VdevEntry {
    /// A device path (`emu:MODEL:PATH` for an emulated one) or `mirror-N`.
    pub name: String,
    /// disk or mirror.
    pub vdev_type: &'static str,
    /// normal or log.
    pub class: &'static str,
    pub state: Option<&'static str>,
    pub read_errors: Option<u64>,
    pub write_errors: Option<u64>,
    pub checksum_errors: Option<u64>,
    /// Bytes rewritten on this device by self-healing and scrub.
    pub repaired_bytes: Option<u64>,
    /// The leaves of a mirror; empty for a disk.
    pub children: Vec<VdevEntry>,
}

/// One dataset of `list -j`.
#[derive(Serialize)]
pub struct DatasetEntry {
    pub name: String,
    pub pool: String,
    /// filesystem or volume.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub used_bytes: u64,
    pub available_bytes: u64,
    pub referenced_bytes: u64,
    pub volsize_bytes: Option<u64>,
    /// Every property, canonical value (sizes in bytes) and source.
    pub properties: BTreeMap<String, PropertyEntry>,
}

#[derive(Serialize)]
pub struct PropertyEntry {
    pub value: String,
    /// local, default, inherited from NAME, ...
    pub source: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_carry_the_version_and_names_as_keys() {
        let mut map = BTreeMap::new();
        map.insert(
            "tank".to_string(),
            PropertyEntry {
                value: "8192".into(),
                source: "local".into(),
            },
        );
        let text = datasets("cairn list", &map).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["output_version"]["command"], "cairn list");
        assert_eq!(value["output_version"]["vers_major"], VERSION_MAJOR);
        assert_eq!(value["datasets"]["tank"]["value"], "8192");
    }
}

/// `stat snapshots -j`: one pool's snapshot counters and levels.
#[derive(Serialize)]
pub struct SnapshotStatsEntry {
    pub name: String,
    /// Whether the counters are a server's (else they cover only this command).
    pub served: bool,
    #[serde(flatten)]
    pub stats: cairn_engine::SnapshotStatsSnapshot,
}
