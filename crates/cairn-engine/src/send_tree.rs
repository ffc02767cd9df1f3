//! `cairn send -R`, `-I` and `-p`: a package (`cairn_format::send_package`) of plain send
//! streams (`send.rs`) with a manifest of the tree they rebuild.
//!
//! What is sent, per dataset (the top one, and with `-R` every descendant, each of which must
//! have the sent snapshot's name, else the send is refused naming the first that lacks it, as
//! ZFS does):
//! - with a source (`-i @a` / `-I @a`) the dataset has: one incremental from `@a` to the sent
//!   snapshot (`-i`), or one per snapshot between them (`-I`, each from the one before);
//! - otherwise (a full package, or with `-R` a dataset new since `@a`): with `-R` every
//!   snapshot up to the sent one (the first full, each next from the one before), without it
//!   the sent snapshot alone, full. A clone whose origin snapshot is in the tree (taken no
//!   later than its dataset's sent snapshot) starts with an incremental from that origin
//!   instead of a full stream, so the receiver makes it a clone of the received origin; a
//!   clone of a snapshot outside the tree is sent full (it arrives as no clone).
//!
//! Order: every stream of a dataset after its parent's and after its origin's dataset's (a
//! receiver needs both); a cycle between the two (possible after renames and promotes) is
//! broken by sending a clone full. With `-p` (implied by `-R`) the manifest carries each
//! dataset's locally set properties, never the inherited or default ones and never the
//! read-only figures (`used`, `guid`, ...): `volsize` and `volblocksize` travel in the stream
//! headers. `mountpoint` is sent as ZFS sends it.
//!
//! Consistency: each stream is taken as `Pool::send` takes it (its own synced tree); the plan
//! is made under one look at the directory and snapshot table, so a snapshot destroyed during
//! the send fails the stream that needed it, naming it.

use crate::EngineError;
use crate::clones::dataset_name;
use crate::pool::Pool;
use crate::send::{SendSummary, stored_or_derived_guid};
use cairn_dataset::directory::DatasetDirectory;
use cairn_dataset::snapshots::SnapshotTable;
use cairn_dataset::{DatasetError, DatasetKind, SnapshotName, is_hidden};
use cairn_format::send_package::{
    PackageDataset, PackageManifest, PackageStream, PackageWriter, SEND_FEATURE_PACKAGE,
};
use cairn_format::send_stream::{StreamHeader, StreamKind};
use std::collections::BTreeSet;
use std::io::Write;

/// What `send -R`, `-I`, `-p` ask for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PackageOptions {
    /// The source snapshot of the top dataset (`@a` or `dataset@a`): `-i`, or with
    /// `intermediates` `-I`.
    pub from: Option<String>,
    /// `-I`: every snapshot between `from` and the sent one.
    pub intermediates: bool,
    /// `-R`: the descendants too, with all their snapshots, clones as clones.
    pub recursive: bool,
    /// `-p`: the local properties (implied by `recursive`).
    pub properties: bool,
}

/// A snapshot of the plan: name after '@', guid, txg, creation time.
#[derive(Debug, Clone)]
struct Snap {
    name: String,
    guid: u64,
    txg: u64,
    creation_ms: u64,
}

/// One dataset of the plan.
struct Planned {
    name: String,
    kind: DatasetKind,
    properties: Vec<(String, String)>,
    /// Its snapshots up to the sent one, oldest first.
    snapshots: Vec<Snap>,
    /// Where in `snapshots` its streams start from (`-i`/`-I`), if it has the source.
    from: Option<usize>,
    /// The origin snapshot (`dataset@snap`, guid) it is sent as a clone of.
    origin: Option<(String, u64)>,
    /// `-I`: with a source, every snapshot after it.
    intermediates: bool,
    /// `-R`: without a source, every snapshot (else the sent one alone).
    every: bool,
}

/// A stream of the plan: `from` (`dataset@snap`, guid) to `to`.
struct Step {
    dataset: u32,
    from: Option<(String, u64)>,
    to: (String, u64),
}

impl Pool {
    /// Writes `snapshot` (`dataset@snap`) and what `options` ask for as a package to `out`:
    /// see the module doc. `progress` is told the package's bytes written so far.
    pub fn send_package(
        &self,
        snapshot: &str,
        options: &PackageOptions,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<SendSummary, EngineError> {
        let top = SnapshotName::parse(snapshot)?;
        let (plan, header) = {
            let directory = self.core.directory.lock();
            let table = self.core.snapshots.lock();
            let plan = self.package_plan(&directory, &table, &top, options)?;
            let header = package_header(&directory, &top, &plan)?;
            (plan, header)
        };
        let properties = options.properties || options.recursive;
        let (manifest, steps) = manifest_of(&top.dataset, &plan, properties, options.recursive);
        let mut writer = PackageWriter::new(out, &header, &manifest).map_err(package_io)?;
        let mut summary = SendSummary::default();
        for step in &steps {
            let base = writer.bytes_written();
            let from = step.from.as_ref().map(|(name, _)| name.as_str());
            let sent = self.send(&step.to.0, from, writer.stream_out(), &mut |bytes| {
                progress(base + bytes)
            })?;
            writer.stream_done(&sent.end_checksum);
            summary.objects += sent.objects;
            summary.blocks_written += sent.blocks_written;
            summary.blocks_visited += sent.blocks_visited;
        }
        summary.bytes_written = writer.finish(steps.len() as u64).map_err(package_io)?;
        progress(summary.bytes_written);
        Ok(summary)
    }

    /// The datasets to send, in the order their streams go (see the module doc).
    fn package_plan(
        &self,
        directory: &DatasetDirectory,
        table: &SnapshotTable,
        top: &SnapshotName,
        options: &PackageOptions,
    ) -> Result<Vec<Planned>, EngineError> {
        let from = match &options.from {
            None => None,
            Some(from) => Some(source_name(&top.dataset, from)?),
        };
        let mut names = vec![top.dataset.clone()];
        if options.recursive {
            names.extend(
                directory
                    .children(&top.dataset)
                    .filter(|record| !is_hidden(&record.name))
                    .map(|record| record.name.clone()),
            );
            names.sort();
        }
        let mut plan = Vec::with_capacity(names.len());
        for name in &names {
            let record = directory.get(name)?;
            let snapshots: Vec<Snap> = table
                .snapshots_of(record.id)
                .map(|snapshot| Snap {
                    name: snapshot.info.name.clone(),
                    guid: stored_or_derived_guid(
                        snapshot.info.guid,
                        self.core.guid,
                        snapshot.info.id,
                        snapshot.info.created_txg,
                    ),
                    txg: snapshot.info.created_txg,
                    creation_ms: snapshot.info.creation_ms,
                })
                .collect();
            let Some(to) = snapshots.iter().position(|snap| snap.name == top.snapshot) else {
                return Err(EngineError::Send(format!(
                    "'{name}@{}' does not exist: with -R every dataset below '{}' needs the \
                     sent snapshot (take it with snapshot -r)",
                    top.snapshot, top.dataset
                )));
            };
            let from_at = from
                .as_ref()
                .and_then(|from| snapshots[..to].iter().position(|snap| snap.name == *from));
            if *name == top.dataset
                && let Some(from) = &from
                && from_at.is_none()
            {
                return Err(EngineError::Send(format!(
                    "cannot send from '{}@{from}': no snapshot of that name older than '{}'",
                    top.dataset, top
                )));
            }
            let origin = table.origin_of(record.id).and_then(|origin| {
                let dataset = dataset_name(directory, origin.info.dataset_id)?;
                Some((dataset, origin.info.name.clone()))
            });
            let mut properties: Vec<(String, String)> = record
                .properties
                .iter()
                .filter(|(key, _)| !matches!(key.as_str(), "volsize" | "volblocksize"))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            properties.sort();
            plan.push((
                Planned {
                    name: name.clone(),
                    kind: record.kind,
                    properties,
                    snapshots: snapshots[..=to].to_vec(),
                    from: from_at,
                    origin: None,
                    intermediates: options.intermediates,
                    every: options.recursive,
                },
                origin,
            ));
        }
        Ok(order_plan(link_origins(plan, options.recursive)))
    }
}

/// The package's header: the top dataset's sent snapshot, as its own stream's header
/// says it, with `SEND_FEATURE_PACKAGE` and no source.
fn package_header(
    directory: &DatasetDirectory,
    top: &SnapshotName,
    plan: &[Planned],
) -> Result<StreamHeader, EngineError> {
    let planned = plan
        .iter()
        .find(|planned| planned.name == top.dataset)
        .ok_or_else(|| DatasetError::NoSuchDataset(top.dataset.clone()))?;
    let sent = planned
        .snapshots
        .last()
        .ok_or_else(|| DatasetError::NoSuchDataset(top.to_string()))?;
    let resolved = directory.properties_of(&top.dataset)?;
    let (kind, volsize_bytes, block_size_bytes) = match planned.kind {
        DatasetKind::Volume => (
            StreamKind::Volume,
            resolved.volsize_bytes,
            resolved.volblocksize_bytes,
        ),
        DatasetKind::Filesystem => (StreamKind::Filesystem, 0, resolved.recordsize_bytes),
    };
    Ok(StreamHeader {
        features: SEND_FEATURE_PACKAGE,
        kind,
        to_guid: sent.guid,
        to_txg: sent.txg,
        from_guid: 0,
        from_txg: 0,
        volsize_bytes,
        block_size_bytes,
        creation_ms: sent.creation_ms,
        resume: None,
    })
}

/// The short name (after '@') of a package's source, given as `@a` or `top@a`.
fn source_name(top: &str, from: &str) -> Result<String, EngineError> {
    let refuse = |why: &str| EngineError::Send(format!("cannot send from '{from}': {why}"));
    if from.contains('#') {
        return Err(refuse(
            "a package (-R, -I, -p) starts from a snapshot, not a bookmark",
        ));
    }
    let name = match from.strip_prefix('@') {
        Some(short) => short.to_string(),
        None => {
            let parsed = SnapshotName::parse(from)?;
            if parsed.dataset != top {
                return Err(refuse(&format!("not a snapshot of '{top}'")));
            }
            parsed.snapshot
        }
    };
    Ok(name)
}

/// Keeps a dataset's origin when it is sent as a clone: with `recursive`, its origin's
/// dataset in the plan, the origin no later than that dataset's sent snapshot, and the
/// dataset sent from its first snapshot (no source of its own).
fn link_origins(plan: Vec<(Planned, Option<(String, String)>)>, recursive: bool) -> Vec<Planned> {
    let sent: Vec<(String, Vec<Snap>)> = plan
        .iter()
        .map(|(planned, _)| (planned.name.clone(), planned.snapshots.clone()))
        .collect();
    plan.into_iter()
        .map(|(mut planned, origin)| {
            if let Some((dataset, snapshot)) = origin
                && recursive
                && planned.from.is_none()
                && let Some((_, snapshots)) = sent.iter().find(|(name, _)| *name == dataset)
                && let Some(snap) = snapshots.iter().find(|snap| snap.name == snapshot)
            {
                planned.origin = Some((format!("{dataset}@{snapshot}"), snap.guid));
            }
            planned
        })
        .collect()
}

/// `plan` ordered so that each dataset comes after its parent and its origin's dataset (a
/// cycle is broken by dropping an origin: that clone goes full).
fn order_plan(mut plan: Vec<Planned>) -> Vec<Planned> {
    let names: BTreeSet<String> = plan.iter().map(|planned| planned.name.clone()).collect();
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut ordered = Vec::with_capacity(plan.len());
    while !plan.is_empty() {
        let ready = plan.iter().position(|planned| {
            let parent = planned.name.rsplit_once('/').map(|(parent, _)| parent);
            let origin = planned
                .origin
                .as_ref()
                .and_then(|(origin, _)| origin.split_once('@').map(|(dataset, _)| dataset));
            [parent, origin]
                .into_iter()
                .flatten()
                .all(|dep| !names.contains(dep) || placed.contains(dep))
        });
        match ready {
            Some(index) => {
                let planned = plan.remove(index);
                placed.insert(planned.name.clone());
                ordered.push(planned);
            }
            None => {
                if let Some(clone) = plan.iter_mut().find(|planned| planned.origin.is_some()) {
                    clone.origin = None;
                }
            }
        }
    }
    ordered
}

/// The manifest of `plan` (dataset names relative to `top`) and its streams in order.
fn manifest_of(
    top: &str,
    plan: &[Planned],
    properties: bool,
    recursive: bool,
) -> (PackageManifest, Vec<Step>) {
    let mut datasets = Vec::with_capacity(plan.len());
    let mut steps = Vec::new();
    for (index, planned) in plan.iter().enumerate() {
        let relative = planned
            .name
            .strip_prefix(top)
            .map(|rest| rest.trim_start_matches('/'))
            .unwrap_or(&planned.name);
        datasets.push(PackageDataset {
            name: relative.to_string(),
            kind: match planned.kind {
                DatasetKind::Volume => StreamKind::Volume as u8,
                DatasetKind::Filesystem => StreamKind::Filesystem as u8,
            },
            origin_guid: planned.origin.as_ref().map_or(0, |(_, guid)| *guid),
            properties: if properties {
                planned.properties.clone()
            } else {
                Vec::new()
            },
            snapshots: planned
                .snapshots
                .iter()
                .map(|snap| (snap.name.clone(), snap.guid))
                .collect(),
        });
        steps.extend(steps_of(index as u32, planned));
    }
    let streams = steps
        .iter()
        .map(|step| PackageStream {
            dataset: step.dataset,
            from_guid: step.from.as_ref().map_or(0, |(_, guid)| *guid),
            to_guid: step.to.1,
        })
        .collect();
    let manifest = PackageManifest {
        properties,
        recursive,
        datasets,
        streams,
    };
    (manifest, steps)
}

/// The streams of one dataset of the plan (index `dataset` in the manifest), in order.
fn steps_of(dataset: u32, planned: &Planned) -> Vec<Step> {
    let full_name = |snap: &Snap| (format!("{}@{}", planned.name, snap.name), snap.guid);
    // Never empty: the sent snapshot is in it.
    let last = planned.snapshots.len().saturating_sub(1);
    let (mut from, chain) = match planned.from {
        Some(at) if planned.intermediates => (
            Some(full_name(&planned.snapshots[at])),
            &planned.snapshots[at + 1..],
        ),
        Some(at) => (
            Some(full_name(&planned.snapshots[at])),
            &planned.snapshots[last..],
        ),
        None if planned.every => (planned.origin.clone(), &planned.snapshots[..]),
        None => (planned.origin.clone(), &planned.snapshots[last..]),
    };
    let mut steps = Vec::with_capacity(chain.len());
    for snap in chain {
        let to = full_name(snap);
        steps.push(Step {
            dataset,
            from: from.replace(to.clone()),
            to,
        });
    }
    steps
}

fn package_io(err: std::io::Error) -> EngineError {
    EngineError::Send(format!("writing the package: {err}"))
}
