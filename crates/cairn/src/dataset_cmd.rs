//! `cairn create|destroy|list|get|set`: the zfs side of the CLI.
//!
//! A dataset name's first component is its pool, which must be in the pool cache. Listing
//! commands open each pool they need once, read-only; changing commands open it read-write and
//! record their command line in the pool history. Property values come from the engine in
//! canonical form (sizes in bytes); they are made human-readable here unless `-p`, and
//! `sync=disabled` is flagged `(UNSAFE)` for people (never in `-H`/`-p` output, which scripts
//! compare).

use crate::context::{Context, pool_of};
use crate::context::{say, say_raw, shout};
use crate::table::{Align, Column, Table};
use crate::{CreateArgs, GetArgs, ListArgs, ListFormat, SetArgs, remote};
use crate::{human, json};
use anyhow::{Result, anyhow, bail};
use cairn_dataset::DatasetKind;
use cairn_dataset::properties::{PROPERTIES, lookup, parse_size};
use cairn_frontend::admin::{AdminReply, AdminRequest, DatasetChange, DatasetRow, PoolDatasets};
use std::collections::BTreeMap;

/// Read-only statistics shown by `get` beside the properties: (name, aliases).
const STATISTICS: &[(&str, &[&str])] = &[
    ("type", &[]),
    ("used", &[]),
    ("available", &["avail"]),
    ("referenced", &["refer"]),
    ("mounted", &[]),
    ("usedbydataset", &[]),
    ("usedbysnapshots", &["usedsnap"]),
    ("usedbychildren", &["usedchild"]),
    ("usedbyrefreservation", &["usedrefreserv"]),
    ("written", &[]),
    ("snapshot_count", &[]),
    ("creation", &[]),
    ("createtxg", &[]),
    ("origin", &[]),
    ("clones", &[]),
    ("guid", &[]),
    ("digest", &[]),
    ("receive_resume_token", &[]),
];

/// Statistics that are byte counts (shown as sizes to people).
const SIZE_STATISTICS: &[&str] = &[
    "usedbydataset",
    "usedbysnapshots",
    "usedbychildren",
    "usedbyrefreservation",
    "written",
];

pub fn create(ctx: &Context, args: &CreateArgs) -> Result<()> {
    let name = &args.dataset;
    let change = match &args.volsize {
        Some(size_text) => DatasetChange::CreateVolume {
            dataset: name.clone(),
            size_bytes: parse_size(size_text)
                .map_err(|err| anyhow!("cannot create '{name}': invalid -V: {err}"))?,
            sparse: args.sparse,
            properties: args.properties.clone(),
        },
        None => DatasetChange::CreateFilesystem {
            dataset: name.clone(),
            properties: args.properties.clone(),
        },
    };
    change_dataset(ctx, change)
}

pub fn destroy(
    ctx: &Context,
    name: &str,
    deferred: bool,
    dry_run: bool,
    verbose: bool,
) -> Result<()> {
    if (deferred || dry_run || verbose) && !name.contains('@') {
        bail!("destroy -d, -n and -v are for snapshots (DATASET@SNAPSHOT or DATASET@FIRST%LAST)");
    }
    if dry_run || verbose {
        let request = AdminRequest::DestroyPreview {
            name: name.to_string(),
        };
        let (names, bytes) = match remote::call(ctx, request)? {
            AdminReply::DestroyPreview { names, bytes } => (names, bytes),
            other => return Err(remote::unexpected(&other)),
        };
        if verbose {
            let verb = if dry_run {
                "would destroy"
            } else {
                "will destroy"
            };
            for snapshot in &names {
                say!(ctx, "{verb} {snapshot}");
            }
            let verb = if dry_run {
                "would reclaim"
            } else {
                "will reclaim"
            };
            say!(ctx, "{verb} {}", human::size(bytes, false));
        }
        if dry_run {
            return Ok(());
        }
    }
    let change = if deferred {
        DatasetChange::DestroyDeferred {
            snapshot: name.to_string(),
        }
    } else {
        DatasetChange::Destroy {
            dataset: name.to_string(),
        }
    };
    change_dataset(ctx, change)
}

/// `destroy -R SNAPSHOT`: the snapshot and every clone that depends on it.
pub fn destroy_dependents(ctx: &Context, name: &str) -> Result<()> {
    if !name.contains('@') || name.contains('%') {
        bail!("destroy -R is for one snapshot (DATASET@SNAPSHOT): it destroys its clones too");
    }
    change_dataset(
        ctx,
        DatasetChange::DestroyDependents {
            snapshot: name.to_string(),
        },
    )
}

/// `bookmark SNAPSHOT|BOOKMARK BOOKMARK`.
pub fn bookmark(ctx: &Context, source: &str, target: &str) -> Result<()> {
    change_dataset(
        ctx,
        DatasetChange::Bookmark {
            source: source.to_string(),
            target: target.to_string(),
        },
    )
}

/// `clone [-o PROP=VALUE]... SNAPSHOT TARGET`.
pub fn clone(
    ctx: &Context,
    origin: &str,
    target: &str,
    properties: &[(String, String)],
) -> Result<()> {
    change_dataset(
        ctx,
        DatasetChange::Clone {
            origin: origin.to_string(),
            target: target.to_string(),
            properties: properties.to_vec(),
        },
    )
}

pub fn promote(ctx: &Context, dataset: &str) -> Result<()> {
    change_dataset(
        ctx,
        DatasetChange::Promote {
            dataset: dataset.to_string(),
        },
    )
}

/// `hold` (or `release`) TAG on snapshots `names`.
pub fn hold(ctx: &Context, tag: &str, names: &[String], release: bool) -> Result<()> {
    change_dataset(
        ctx,
        DatasetChange::Hold {
            tag: tag.to_string(),
            names: names.to_vec(),
            release,
        },
    )
}

/// `holds`: NAME TAG TIMESTAMP of each user hold.
pub fn holds(ctx: &Context, format: ListFormat, names: &[String]) -> Result<()> {
    let request = AdminRequest::Holds {
        names: names.to_vec(),
    };
    let holds = match remote::call(ctx, request)? {
        AdminReply::Holds(holds) => holds,
        other => return Err(remote::unexpected(&other)),
    };
    let mut table = Table::new(vec![
        Column::left("NAME"),
        Column::left("TAG"),
        Column::left("TIMESTAMP"),
    ]);
    for (name, tag, ms) in holds {
        let when = if format.exact {
            (ms / 1000).to_string()
        } else {
            human::date(ms)
        };
        table.push(vec![name, tag, when]);
    }
    if !table.is_empty() {
        say_raw!(ctx, "{}", table.render(format.scripted));
    }
    Ok(())
}

pub fn snapshot(ctx: &Context, names: &[String], recursive: bool) -> Result<()> {
    let change = DatasetChange::Snapshot {
        names: names.to_vec(),
        recursive,
    };
    match remote::call(ctx, AdminRequest::Dataset(change))? {
        AdminReply::Snapshots(_) => Ok(()),
        other => Err(remote::unexpected(&other)),
    }
}

pub fn rollback(ctx: &Context, snapshot: &str, destroy_newer: bool, force: bool) -> Result<()> {
    change_dataset(
        ctx,
        DatasetChange::Rollback {
            snapshot: snapshot.to_string(),
            destroy_newer,
            force,
        },
    )
}

pub fn set(ctx: &Context, args: &SetArgs) -> Result<()> {
    let change = DatasetChange::Set {
        dataset: args.dataset.clone(),
        assignments: args.assignments.clone(),
    };
    change_dataset(ctx, change)
}

fn change_dataset(ctx: &Context, change: DatasetChange) -> Result<()> {
    match remote::call(ctx, AdminRequest::Dataset(change))? {
        AdminReply::Done => Ok(()),
        other => Err(remote::unexpected(&other)),
    }
}

/// Formats a canonical property value for output.
fn display_value(property: &str, value: &str, format: ListFormat) -> String {
    if SIZE_STATISTICS.contains(&property) {
        return value.parse().map_or_else(
            |_| value.to_string(),
            |bytes| human::size(bytes, format.exact),
        );
    }
    if property == "creation" && !format.exact {
        return value
            .parse::<u64>()
            .map_or_else(|_| value.to_string(), |secs| human::date(secs * 1000));
    }
    let Ok(def) = lookup(property) else {
        // A statistic (`mounted`), shown as it is.
        return value.to_string();
    };
    if def.is_space_limit() && value == "0" {
        return "none".into();
    }
    if def.is_size()
        && let Ok(bytes) = value.parse::<u64>()
    {
        return human::size(bytes, format.exact);
    }
    if def.is_unsafe(value) && !format.exact && !format.scripted {
        return format!("{value} (UNSAFE)");
    }
    value.to_string()
}

/// Each pool's datasets, read once (from the server, or here) as names ask for them.
struct Datasets<'a> {
    ctx: &'a Context,
    pools: BTreeMap<String, Result<Vec<DatasetRow>, String>>,
}

impl<'a> Datasets<'a> {
    fn new(ctx: &'a Context) -> Datasets<'a> {
        Datasets {
            ctx,
            pools: BTreeMap::new(),
        }
    }

    /// Reads `pools` (every pool when empty; then pools that cannot be opened are skipped
    /// with a note), in the order asked.
    fn read(&mut self, pools: &[String]) -> Result<Vec<PoolDatasets>> {
        let request = AdminRequest::Datasets {
            pools: pools.to_vec(),
        };
        let read = match remote::call(self.ctx, request)? {
            AdminReply::Datasets(read) => read,
            other => return Err(remote::unexpected(&other)),
        };
        for pool in &read {
            self.pools.insert(pool.pool.clone(), pool.datasets.clone());
        }
        Ok(read)
    }

    /// The dataset `name`, and with `recursive` its descendants, sorted by name.
    fn named(&mut self, name: &str, recursive: bool) -> Result<Vec<DatasetRow>> {
        let pool = pool_of(name);
        if !self.pools.contains_key(pool) {
            self.read(&[pool.to_string()])?;
        }
        let all = match self.pools.get(pool) {
            Some(Ok(all)) => all,
            Some(Err(failure)) => bail!("{failure}"),
            None => bail!("dataset '{name}' does not exist"),
        };
        // A dataset's own snapshots come with it (`list -t snapshot DATASET` lists them).
        let prefix = format!("{name}/");
        let snapshots = format!("{name}@");
        let bookmarks = format!("{name}#");
        let found: Vec<DatasetRow> = all
            .iter()
            .filter(|info| {
                info.name == name
                    || info.name.starts_with(&snapshots)
                    || info.name.starts_with(&bookmarks)
                    || (recursive && info.name.starts_with(&prefix))
            })
            .cloned()
            .collect();
        if !found.iter().any(|info| info.name == name) {
            bail!("dataset '{name}' does not exist");
        }
        Ok(found)
    }
}

#[derive(Debug, Clone, Copy)]
enum ListColumn {
    Name,
    Used,
    Avail,
    Refer,
    Type,
    Volsize,
    Volblock,
    Property(&'static str),
}

impl ListColumn {
    const DEFAULT: [ListColumn; 7] = [
        ListColumn::Name,
        ListColumn::Used,
        ListColumn::Avail,
        ListColumn::Refer,
        ListColumn::Type,
        ListColumn::Volsize,
        ListColumn::Volblock,
    ];

    fn parse(text: &str) -> Result<ListColumn> {
        let text = text.trim().to_ascii_lowercase();
        if let Some((stat, _)) = STATISTICS.iter().find(|(stat, aliases)| {
            !matches!(*stat, "type" | "used" | "available" | "referenced")
                && (*stat == text || aliases.contains(&text.as_str()))
        }) {
            return Ok(ListColumn::Property(stat));
        }
        Ok(match text.as_str() {
            "name" => ListColumn::Name,
            "used" => ListColumn::Used,
            "avail" | "available" => ListColumn::Avail,
            "refer" | "referenced" => ListColumn::Refer,
            "type" => ListColumn::Type,
            "volsize" => ListColumn::Volsize,
            "volblock" | "volblocksize" => ListColumn::Volblock,
            "mounted" => ListColumn::Property("mounted"),
            other => ListColumn::Property(
                lookup(other)
                    .map_err(|_| {
                        anyhow!(
                            "unknown column '{other}' (known: name, used, avail, refer, type, volsize, volblocksize, {})",
                            PROPERTIES
                                .iter()
                                .map(|def| def.name)
                                .filter(|name| !name.starts_with("vol"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    })?
                    .name,
            ),
        })
    }

    fn column(self) -> Column {
        let (header, align) = match self {
            ListColumn::Name => ("NAME".to_string(), Align::Left),
            ListColumn::Used => ("USED".into(), Align::Right),
            ListColumn::Avail => ("AVAIL".into(), Align::Right),
            ListColumn::Refer => ("REFER".into(), Align::Right),
            ListColumn::Type => ("TYPE".into(), Align::Left),
            ListColumn::Volsize => ("VOLSIZE".into(), Align::Right),
            ListColumn::Volblock => ("VOLBLOCK".into(), Align::Right),
            ListColumn::Property(name) => (
                name.to_ascii_uppercase(),
                if lookup(name).is_ok_and(|def| def.is_size()) || SIZE_STATISTICS.contains(&name) {
                    Align::Right
                } else {
                    Align::Left
                },
            ),
        };
        Column { header, align }
    }

    fn cell(self, info: &DatasetRow, format: ListFormat) -> String {
        let property = |name: &str| {
            info.properties
                .iter()
                .find(|(key, _, _)| *key == name)
                .map_or_else(
                    || "-".to_string(),
                    |(key, value, _)| display_value(key, value, format),
                )
        };
        match self {
            ListColumn::Name => info.name.clone(),
            ListColumn::Used if info.bookmark => "-".to_string(),
            ListColumn::Used => human::size(info.used_bytes, format.exact),
            ListColumn::Avail if info.snapshot || info.bookmark => "-".to_string(),
            ListColumn::Avail => human::size(info.available_bytes, format.exact),
            ListColumn::Refer => human::size(info.referenced_bytes, format.exact),
            ListColumn::Type => type_name(info).to_string(),
            ListColumn::Volsize => info
                .volsize_bytes
                .map_or_else(|| "-".to_string(), |bytes| human::size(bytes, format.exact)),
            ListColumn::Volblock => property("volblocksize"),
            ListColumn::Property(name) => property(name),
        }
    }
}

/// What `list -t` names: dataset kinds, and whether snapshots and bookmarks are listed.
#[derive(Debug, Default, PartialEq, Eq)]
struct Listed {
    kinds: Vec<DatasetKind>,
    snapshots: bool,
    bookmarks: bool,
}

impl Listed {
    /// `-t` as given; none lists filesystems and volumes, as ZFS does by default.
    fn parse(types: &[String]) -> Result<Listed> {
        let mut listed = Listed::default();
        for text in types {
            match text.trim() {
                "filesystem" | "fs" => listed.kinds.push(DatasetKind::Filesystem),
                "volume" | "vol" => listed.kinds.push(DatasetKind::Volume),
                "snapshot" | "snap" => listed.snapshots = true,
                "bookmark" => listed.bookmarks = true,
                "all" => {
                    listed
                        .kinds
                        .extend([DatasetKind::Filesystem, DatasetKind::Volume]);
                    listed.snapshots = true;
                    listed.bookmarks = true;
                }
                other => {
                    bail!(
                        "unknown dataset type '{other}' (filesystem, volume, snapshot, bookmark \
                         or all)"
                    )
                }
            }
        }
        if types.is_empty() {
            listed.kinds = vec![DatasetKind::Filesystem, DatasetKind::Volume];
        }
        Ok(listed)
    }

    fn includes(&self, row: &DatasetRow) -> bool {
        if row.bookmark {
            self.bookmarks
        } else if row.snapshot {
            self.snapshots
        } else {
            self.kinds.contains(&row.kind)
        }
    }
}

/// A row's type as `list` and `get` show it.
fn type_name(row: &DatasetRow) -> &'static str {
    if row.bookmark {
        "bookmark"
    } else if row.snapshot {
        "snapshot"
    } else {
        row.kind.as_str()
    }
}

pub fn list(ctx: &Context, args: &ListArgs) -> Result<()> {
    let listed = Listed::parse(&args.types)?;
    let columns: Vec<ListColumn> = if !args.columns.is_empty() {
        args.columns
            .iter()
            .map(|text| ListColumn::parse(text))
            .collect::<Result<_>>()?
    } else if listed.kinds == [DatasetKind::Filesystem] && !listed.snapshots {
        vec![
            ListColumn::Name,
            ListColumn::Used,
            ListColumn::Avail,
            ListColumn::Refer,
            ListColumn::Property("mountpoint"),
        ]
    } else {
        ListColumn::DEFAULT.to_vec()
    };
    let mut datasets = Datasets::new(ctx);
    let mut rows: Vec<DatasetRow> = Vec::new();
    let mut failures = Vec::new();
    if args.datasets.is_empty() {
        // Listing everything: a pool that cannot be opened has nothing to list; the answer's
        // notes say so, and the others are listed.
        for pool in datasets.read(&[])? {
            match pool.datasets {
                Ok(infos) => rows.extend(infos),
                Err(failure) => failures.push(failure),
            }
        }
    } else {
        for name in &args.datasets {
            match datasets.named(name, args.recursive) {
                Ok(infos) => rows.extend(infos),
                Err(err) => failures.push(format!("{err:#}")),
            }
        }
    }
    rows.retain(|info| listed.includes(info));
    if columns
        .iter()
        .any(|column| matches!(column, ListColumn::Property("digest")))
    {
        for info in &mut rows {
            match snapshot_digest(ctx, info) {
                Ok(digest) => info
                    .properties
                    .push(("digest".to_string(), digest, "-".to_string())),
                Err(err) => failures.push(format!("{err:#}")),
            }
        }
    }
    if args.json {
        let entries = rows
            .iter()
            .map(|info| (info.name.clone(), dataset_json(info)))
            .collect();
        say_raw!(ctx, "{}", json::datasets("cairn list", &entries)?);
        return combine(failures);
    }
    let mut table = Table::new(columns.iter().map(|column| column.column()).collect());
    for info in &rows {
        table.push(
            columns
                .iter()
                .map(|column| column.cell(info, args.format))
                .collect(),
        );
    }
    if rows.is_empty() && failures.is_empty() {
        if !args.format.scripted {
            shout!(ctx, "no datasets available");
        }
    } else if !rows.is_empty() {
        say_raw!(ctx, "{}", table.render(args.format.scripted));
    }
    combine(failures)
}

/// Per-dataset failures (already worded) as the command's error.
fn combine(failures: Vec<String>) -> Result<()> {
    if failures.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(failures.join("\ncairn: ")))
    }
}

fn dataset_json(info: &DatasetRow) -> json::DatasetEntry {
    json::DatasetEntry {
        name: info.name.clone(),
        pool: pool_of(&info.name).to_string(),
        kind: type_name(info),
        used_bytes: info.used_bytes,
        available_bytes: info.available_bytes,
        referenced_bytes: info.referenced_bytes,
        volsize_bytes: info.volsize_bytes,
        properties: info
            .properties
            .iter()
            .map(|(name, value, source)| {
                (
                    name.to_string(),
                    json::PropertyEntry {
                        value: value.clone(),
                        source: source.clone(),
                    },
                )
            })
            .collect(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GetField {
    Name,
    Property,
    Value,
    Source,
}

/// Resolves `all` or `a,b,c` into canonical names, refusing unknown ones (`written@SNAP`
/// names a snapshot of each dataset asked about).
fn requested_properties(text: &str) -> Result<Option<Vec<String>>> {
    if text == "all" {
        return Ok(None);
    }
    let mut out = Vec::new();
    for name in text
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
    {
        if let Some((canonical, _)) = STATISTICS
            .iter()
            .find(|(stat, aliases)| *stat == name || aliases.contains(&name))
        {
            out.push(canonical.to_string());
            continue;
        }
        if let Some(snapshot) = name.strip_prefix("written@") {
            cairn_dataset::SnapshotName::parse(&format!("a@{snapshot}"))
                .map_err(|err| anyhow!("{err}"))?;
            out.push(name.to_string());
            continue;
        }
        out.push(
            lookup(name)
                .map_err(|err| anyhow!("{err}"))?
                .name
                .to_string(),
        );
    }
    if out.is_empty() {
        bail!("no property named (give all or PROP[,PROP...])");
    }
    Ok(Some(out))
}

/// `written@snapshot` of a dataset (asked of the pool; `-` for a snapshot row or an error).
fn written_since(
    ctx: &Context,
    info: &DatasetRow,
    snapshot: &str,
    format: ListFormat,
) -> (String, String) {
    if info.snapshot || info.bookmark {
        return ("-".to_string(), "-".to_string());
    }
    let request = AdminRequest::WrittenSince {
        dataset: info.name.clone(),
        snapshot: snapshot.to_string(),
    };
    match remote::call(ctx, request) {
        Ok(AdminReply::Bytes(bytes)) => (human::size(bytes, format.exact), "-".to_string()),
        _ => ("-".to_string(), "-".to_string()),
    }
}

/// The `digest` of a snapshot row (asked of the pool: `Pool::snapshot_digest`); `-` for a
/// dataset or bookmark.
fn snapshot_digest(ctx: &Context, info: &DatasetRow) -> Result<String> {
    if !info.snapshot {
        return Ok("-".to_string());
    }
    let request = AdminRequest::SnapshotDigest {
        snapshot: info.name.clone(),
    };
    match remote::call(ctx, request)? {
        AdminReply::Digest(digest) => Ok(digest),
        other => Err(remote::unexpected(&other)),
    }
}

/// A dataset that does not exist yet but has a partial full receive (`receive -s` cut): a row
/// with its `receive_resume_token` only (every other property `-`).
fn partial_receive_row(ctx: &Context, name: &str) -> Option<DatasetRow> {
    let request = AdminRequest::ResumeToken {
        target: name.to_string(),
    };
    let Ok(AdminReply::ResumeToken(Some(token))) = remote::call(ctx, request) else {
        return None;
    };
    Some(DatasetRow {
        name: name.to_string(),
        kind: DatasetKind::Filesystem,
        snapshot: false,
        bookmark: false,
        used_bytes: 0,
        available_bytes: 0,
        referenced_bytes: 0,
        volsize_bytes: None,
        properties: vec![("receive_resume_token".to_string(), token, "-".to_string())],
    })
}

/// (value, source) of one statistic or property of a dataset, ready to print.
fn get_one(info: &DatasetRow, name: &str, format: ListFormat) -> (String, String) {
    let stat = |value: String| (value, "-".to_string());
    match name {
        "type" => stat(type_name(info).to_string()),
        "available" if info.snapshot || info.bookmark => stat("-".to_string()),
        "used" => stat(human::size(info.used_bytes, format.exact)),
        "available" => stat(human::size(info.available_bytes, format.exact)),
        "referenced" => stat(human::size(info.referenced_bytes, format.exact)),
        _ => info
            .properties
            .iter()
            .find(|(key, _, _)| *key == name)
            .map_or_else(
                || ("-".to_string(), "-".to_string()),
                |(key, value, source)| (display_value(key, value, format), source.clone()),
            ),
    }
}

pub fn get(ctx: &Context, args: &GetArgs) -> Result<()> {
    let requested = requested_properties(&args.properties)?;
    let fields: Vec<GetField> = if args.fields.is_empty() {
        vec![
            GetField::Name,
            GetField::Property,
            GetField::Value,
            GetField::Source,
        ]
    } else {
        args.fields
            .iter()
            .map(|field| match field.trim() {
                "name" => Ok(GetField::Name),
                "property" => Ok(GetField::Property),
                "value" => Ok(GetField::Value),
                "source" => Ok(GetField::Source),
                other => Err(anyhow!(
                    "unknown field '{other}' (known: name, property, value, source)"
                )),
            })
            .collect::<Result<_>>()?
    };
    let mut table = Table::new(
        fields
            .iter()
            .map(|field| {
                Column::left(match field {
                    GetField::Name => "NAME",
                    GetField::Property => "PROPERTY",
                    GetField::Value => "VALUE",
                    GetField::Source => "SOURCE",
                })
            })
            .collect(),
    );
    let mut datasets = Datasets::new(ctx);
    let mut failures = Vec::new();
    for name in &args.datasets {
        let info = match datasets.named(name, false) {
            Ok(mut infos) => infos.remove(0),
            Err(err) => match partial_receive_row(ctx, name) {
                Some(row) => row,
                None => {
                    failures.push(format!("{err:#}"));
                    continue;
                }
            },
        };
        let names: Vec<&str> = match &requested {
            Some(names) => names.iter().map(String::as_str).collect(),
            // Each once: the statistics first, then the properties the row adds.
            None => STATISTICS
                .iter()
                .map(|(stat, _)| *stat)
                .chain(
                    info.properties
                        .iter()
                        .map(|(key, _, _)| key.as_str())
                        .filter(|key| STATISTICS.iter().all(|(stat, _)| stat != key)),
                )
                // Asked by name only: it reads the snapshot the first time.
                .filter(|name| *name != "digest")
                .collect(),
        };
        for property in names {
            let (value, source) = match property.strip_prefix("written@") {
                Some(snapshot) => written_since(ctx, &info, snapshot, args.format),
                None if property == "digest" => match snapshot_digest(ctx, &info) {
                    Ok(digest) => (digest, "-".to_string()),
                    Err(err) => {
                        failures.push(format!("{err:#}"));
                        continue;
                    }
                },
                None => get_one(&info, property, args.format),
            };
            table.push(
                fields
                    .iter()
                    .map(|field| match field {
                        GetField::Name => info.name.clone(),
                        GetField::Property => property.to_string(),
                        GetField::Value => value.clone(),
                        GetField::Source => source.clone(),
                    })
                    .collect(),
            );
        }
    }
    if !table.is_empty() {
        say_raw!(ctx, "{}", table.render(args.format.scripted));
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(failures.join("\ncairn: ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HUMAN: ListFormat = ListFormat {
        scripted: false,
        exact: false,
    };
    const SCRIPTED: ListFormat = ListFormat {
        scripted: true,
        exact: false,
    };

    #[test]
    fn sizes_and_unsafe_sync_display_for_people_only() {
        assert_eq!(display_value("volblocksize", "8192", HUMAN), "8K");
        assert_eq!(
            display_value(
                "volblocksize",
                "8192",
                ListFormat {
                    scripted: true,
                    exact: true
                }
            ),
            "8192"
        );
        assert_eq!(
            display_value("sync", "disabled", HUMAN),
            "disabled (UNSAFE)"
        );
        assert_eq!(display_value("sync", "disabled", SCRIPTED), "disabled");
        assert_eq!(display_value("checksum", "sha256", HUMAN), "sha256");
    }

    #[test]
    fn property_lists_accept_statistics_and_refuse_unknown_names() {
        assert_eq!(requested_properties("all").unwrap(), None);
        assert_eq!(
            requested_properties("avail,volblocksize,written@monday").unwrap(),
            Some(vec![
                "available".to_string(),
                "volblocksize".to_string(),
                "written@monday".to_string()
            ])
        );
        let err = requested_properties("volblocksize,frobnicate")
            .unwrap_err()
            .to_string();
        assert!(err.contains("frobnicate"), "{err}");
    }
}
