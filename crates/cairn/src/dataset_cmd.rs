//! `cairn create|destroy|list|get|set`: the zfs side of the CLI.
//!
//! A dataset name's first component is its pool, which must be in the pool cache. Listing
//! commands open each pool they need once, read-only; changing commands open it read-write and
//! record their command line in the pool history. Property values come from the engine in
//! canonical form (sizes in bytes); they are made human-readable here unless `-p`, and
//! `sync=disabled` is flagged `(UNSAFE)` for people (never in `-H`/`-p` output, which scripts
//! compare).

use crate::context::{Context, pool_of, unavailable_reason};
use crate::context::{say_raw, shout};
use crate::table::{Align, Column, Table};
use crate::{CreateArgs, GetArgs, ListArgs, ListFormat, SetArgs};
use crate::{human, json};
use anyhow::{Context as _, Result, anyhow, bail};
use cairn_dataset::DatasetError;
use cairn_dataset::DatasetKind;
use cairn_dataset::directory::Provisioning;
use cairn_dataset::properties::{PROPERTIES, lookup, parse_size};
use cairn_engine::DatasetInfo;
use cairn_engine::EngineError;
use cairn_frontend::admin::{self, AdminError};
use std::collections::BTreeMap;

/// Read-only statistics shown by `get` beside the properties: (name, aliases).
const STATISTICS: &[(&str, &[&str])] = &[
    ("type", &[]),
    ("used", &[]),
    ("available", &["avail"]),
    ("referenced", &["refer"]),
    ("mounted", &[]),
];

pub fn create(ctx: &Context, args: &CreateArgs) -> Result<()> {
    let name = &args.dataset;
    let Some(size_text) = &args.volsize else {
        return create_filesystem(ctx, args);
    };
    let size = parse_size(size_text)
        .map_err(|err| anyhow!("cannot create '{name}': invalid -V: {err}"))?;
    let provisioning = if args.sparse {
        Provisioning::Sparse
    } else {
        Provisioning::Thick
    };
    admin::create_volume(
        &ctx.access,
        name,
        size,
        provisioning,
        &args.properties,
        &ctx.command_line,
    )
    .map_err(|err| {
        let no_space = matches!(
            &err,
            AdminError::Engine(engine)
                if matches!(**engine, EngineError::Dataset(DatasetError::NoSpace(_)))
        );
        let err = anyhow::Error::new(err);
        if no_space && !args.sparse {
            err.context("a volume reserves its full size; create -s -V makes a sparse one")
        } else {
            err
        }
    })
    .with_context(|| format!("cannot create volume '{name}'"))
}

fn create_filesystem(ctx: &Context, args: &CreateArgs) -> Result<()> {
    let name = &args.dataset;
    // As in ZFS, a new filesystem's root directory is root's, mode 0755.
    admin::create_filesystem(
        &ctx.access,
        name,
        &args.properties,
        (0, 0),
        0o755,
        &ctx.command_line,
    )
    .with_context(|| format!("cannot create filesystem '{name}'"))
}

pub fn destroy(ctx: &Context, name: &str) -> Result<()> {
    admin::destroy_dataset(&ctx.access, name, &ctx.command_line)
        .with_context(|| format!("cannot destroy '{name}'"))
}

pub fn set(ctx: &Context, args: &SetArgs) -> Result<()> {
    let dataset = &args.dataset;
    let outcome =
        admin::set_properties(&ctx.access, dataset, &args.assignments, &ctx.command_line)?;
    for (property, value) in &outcome.unsafe_settings {
        shout!(
            ctx,
            "cairn: warning: {property}={value} on '{dataset}' is UNSAFE: acknowledged synchronous writes can be lost at a crash"
        );
    }
    for (mounted, err) in &outcome.mount_failures {
        shout!(
            ctx,
            "cairn: cannot change the mount flags of {mounted}: {err}; they apply from its next mount"
        );
    }
    Ok(())
}

/// Formats a canonical property value for output.
fn display_value(property: &str, value: &str, format: ListFormat) -> String {
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

/// Loads each pool's datasets once (read-only) as names ask for them.
struct Datasets<'a> {
    ctx: &'a Context,
    pools: BTreeMap<String, Vec<DatasetInfo>>,
}

impl<'a> Datasets<'a> {
    fn new(ctx: &'a Context) -> Datasets<'a> {
        Datasets {
            ctx,
            pools: BTreeMap::new(),
        }
    }

    fn pool(&mut self, pool: &str) -> Result<&[DatasetInfo]> {
        if !self.pools.contains_key(pool) {
            let mut datasets = self.ctx.with_pool(pool, true, |handle| {
                handle
                    .datasets()
                    .with_context(|| format!("cannot read the datasets of pool '{pool}'"))
            })?;
            // `mounted`: whether this state directory's server has it mounted now.
            for info in &mut datasets {
                if info.kind == DatasetKind::Filesystem {
                    let mounted = self
                        .ctx
                        .served
                        .as_ref()
                        .is_some_and(|served| served.mounts.is_mounted(&info.name));
                    let value = if mounted { "yes" } else { "no" };
                    info.properties
                        .push(("mounted", value.to_string(), "-".to_string()));
                }
            }
            self.pools.insert(pool.to_string(), datasets);
        }
        Ok(&self.pools[pool])
    }

    /// The dataset `name`, and with `recursive` its descendants, sorted by name.
    fn named(&mut self, name: &str, recursive: bool) -> Result<Vec<DatasetInfo>> {
        let all = self.pool(pool_of(name))?;
        let prefix = format!("{name}/");
        let found: Vec<DatasetInfo> = all
            .iter()
            .filter(|info| info.name == name || (recursive && info.name.starts_with(&prefix)))
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
        Ok(match text.trim().to_ascii_lowercase().as_str() {
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
                if lookup(name).is_ok_and(|def| def.is_size()) {
                    Align::Right
                } else {
                    Align::Left
                },
            ),
        };
        Column { header, align }
    }

    fn cell(self, info: &DatasetInfo, format: ListFormat) -> String {
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
            ListColumn::Used => human::size(info.used_bytes, format.exact),
            ListColumn::Avail => human::size(info.available_bytes, format.exact),
            ListColumn::Refer => human::size(info.referenced_bytes, format.exact),
            ListColumn::Type => info.kind.as_str().to_string(),
            ListColumn::Volsize => info
                .volsize_bytes
                .map_or_else(|| "-".to_string(), |bytes| human::size(bytes, format.exact)),
            ListColumn::Volblock => property("volblocksize"),
            ListColumn::Property(name) => property(name),
        }
    }
}

/// The kinds `list -t` names (none: all).
fn listed_kinds(types: &[String]) -> Result<Vec<DatasetKind>> {
    let mut kinds = Vec::new();
    for text in types {
        match text.trim() {
            "filesystem" | "fs" => kinds.push(DatasetKind::Filesystem),
            "volume" | "vol" => kinds.push(DatasetKind::Volume),
            "all" => kinds.extend([DatasetKind::Filesystem, DatasetKind::Volume]),
            other => bail!("unknown dataset type '{other}' (filesystem, volume or all)"),
        }
    }
    Ok(kinds)
}

pub fn list(ctx: &Context, args: &ListArgs) -> Result<()> {
    let kinds = listed_kinds(&args.types)?;
    let columns: Vec<ListColumn> = if !args.columns.is_empty() {
        args.columns
            .iter()
            .map(|text| ListColumn::parse(text))
            .collect::<Result<_>>()?
    } else if kinds == [DatasetKind::Filesystem] {
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
    let mut rows: Vec<DatasetInfo> = Vec::new();
    let mut failures = Vec::new();
    if args.datasets.is_empty() {
        for pool in ctx.pool_names()? {
            match datasets.pool(&pool) {
                Ok(infos) => rows.extend(infos.iter().cloned()),
                // Listing everything: a pool that cannot be opened has nothing to list; say so
                // and go on with the others.
                Err(err) if unavailable_reason(&err).is_some() => {
                    shout!(ctx, "cairn: {err:#}");
                }
                Err(err) => failures.push(format!("{err:#}")),
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
    if !kinds.is_empty() {
        rows.retain(|info| kinds.contains(&info.kind));
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

fn dataset_json(info: &DatasetInfo) -> json::DatasetEntry {
    json::DatasetEntry {
        name: info.name.clone(),
        pool: pool_of(&info.name).to_string(),
        kind: info.kind.as_str(),
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

/// Resolves `all` or `a,b,c` into canonical names, refusing unknown ones.
fn requested_properties(text: &str) -> Result<Option<Vec<&'static str>>> {
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
            out.push(*canonical);
            continue;
        }
        out.push(lookup(name).map_err(|err| anyhow!("{err}"))?.name);
    }
    if out.is_empty() {
        bail!("no property named (give all or PROP[,PROP...])");
    }
    Ok(Some(out))
}

/// (value, source) of one statistic or property of a dataset, ready to print.
fn get_one(info: &DatasetInfo, name: &str, format: ListFormat) -> (String, String) {
    let stat = |value: String| (value, "-".to_string());
    match name {
        "type" => stat(info.kind.as_str().to_string()),
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
            Err(err) => {
                failures.push(format!("{err:#}"));
                continue;
            }
        };
        let names: Vec<&str> = match &requested {
            Some(names) => names.clone(),
            None => STATISTICS
                .iter()
                .map(|(stat, _)| *stat)
                .chain(info.properties.iter().map(|(key, _, _)| *key))
                .collect(),
        };
        for property in names {
            let (value, source) = get_one(&info, property, args.format);
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
            requested_properties("avail,volblocksize").unwrap(),
            Some(vec!["available", "volblocksize"])
        );
        let err = requested_properties("volblocksize,frobnicate")
            .unwrap_err()
            .to_string();
        assert!(err.contains("frobnicate"), "{err}");
    }
}
