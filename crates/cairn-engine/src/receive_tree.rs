//! `cairn receive` of a package (`cairn_format::send_package`: what `send -R`, `-I` and `-p`
//! write): the manifest's datasets re-created under the target name (the top one as the
//! target, `top/b/c` as `TARGET/b/c`), each sub-stream received in order as a plain stream is
//! (`receive.rs`), with what a package adds:
//!
//! - **Clones**: an incremental sub-stream into a dataset that does not exist is a clone's: its
//!   source guid names the origin snapshot, found among the pool's snapshots (those under the
//!   target first: a package sends an origin before its clones), and the dataset is built as a
//!   hidden clone of it, so the received clone's `origin` is the received origin.
//! - **Properties** (`-p`, `-R`): the sent local properties replace the received dataset's own
//!   (`volsize` and `volblocksize` stay: they come with the stream's header). They are set on
//!   the hidden dataset before any record is applied (so the received data is written with
//!   the sent `compression` and `checksum`), and a full or clone receive makes them visible
//!   with the dataset at END; an incremental one carries them into the swap's txg (`reservation`
//!   and the other space limits only there, so the hidden clone never holds a second copy of
//!   the target's reservation). Inherited values stay inherited: only local ones are sent.
//!
//! `-F` with an incremental `-R` package: before any stream, what the sender no longer has is
//! destroyed below the target (snapshots the manifest does not list for their dataset, then
//! datasets it does not list), as `zfs receive -F` does; not undone if the package then fails.
//!
//! Atomicity, per sub-stream: each is built hidden and made visible at its END, so a package
//! cut or damaged in the middle leaves the snapshots (and datasets) of the sub-streams before
//! the bad one, received whole, and nothing of that one; the error names how many were
//! received. Only the package END proves that nothing was dropped between sub-streams; a
//! package whose END fails leaves every sub-stream received and says so.

use crate::EngineError;
use crate::clones::dataset_name;
use crate::pool::Pool;
use crate::receive::{ReceiveOptions, ReceiveSummary, TreeStep, refused};
use crate::receive_finish::dataset_kind;
use crate::send::stored_or_derived_guid;
use cairn_dataset::directory::creation_properties;
use cairn_dataset::{SnapshotName, is_hidden};
use cairn_format::send_package::{
    PackageManifest, PackageReader, PackageStream, SEND_FEATURE_PACKAGE,
};
use cairn_format::send_stream::{SEND_HEADER_SIZE, StreamHeader, StreamReader};
use std::collections::BTreeMap;
use std::io::Read;

impl Pool {
    /// Receives the package whose header is `head` (already read from `input`) into `target`:
    /// see the module doc. The summary names the top dataset's last received snapshot and
    /// counts the whole package.
    pub(crate) fn receive_package(
        &self,
        target: &str,
        head: &[u8; SEND_HEADER_SIZE],
        input: &mut dyn Read,
        options: ReceiveOptions,
    ) -> Result<ReceiveSummary, EngineError> {
        cairn_dataset::validate_name(target)?;
        let mut package = PackageReader::new(head, input).map_err(refused)?;
        let manifest = package.manifest().clone();
        let total = manifest.streams.len();
        let mut summary = ReceiveSummary {
            snapshot: String::new(),
            bytes_read: 0,
            objects: 0,
            blocks_written: 0,
        };
        if options.force {
            self.prune_to_manifest(target, &manifest)?;
        }
        let mut last = None;
        for (index, stream) in manifest.streams.iter().enumerate() {
            let received = self
                .receive_package_stream(target, &manifest, stream, &mut package, options)
                .map_err(|err| package_failed(&err, index, total, last.as_deref()))?;
            summary.objects += received.objects;
            summary.blocks_written += received.blocks_written;
            if stream.dataset == 0 {
                summary.snapshot = received.snapshot.clone();
            }
            last = Some(received.snapshot);
        }
        summary.bytes_read = package
            .finish()
            .map_err(|err| package_failed(&refused(err), total, total, last.as_deref()))?;
        if summary.snapshot.is_empty() {
            summary.snapshot = last.unwrap_or_else(|| target.to_string());
        }
        Ok(summary)
    }

    /// One sub-stream of a package, checked against the manifest, into its dataset.
    fn receive_package_stream(
        &self,
        target: &str,
        manifest: &PackageManifest,
        stream: &PackageStream,
        package: &mut PackageReader<'_>,
        options: ReceiveOptions,
    ) -> Result<ReceiveSummary, EngineError> {
        // In range: the manifest was validated.
        let dataset = &manifest.datasets[stream.dataset as usize];
        let name = if dataset.name.is_empty() {
            target.to_string()
        } else {
            format!("{target}/{}", dataset.name)
        };
        let mut reader = StreamReader::new(package.stream_input()).map_err(refused)?;
        let header = reader.header().clone();
        if header.features & SEND_FEATURE_PACKAGE != 0
            || header.to_guid != stream.to_guid
            || header.from_guid != stream.from_guid
            || Some(header.kind) != dataset.stream_kind()
        {
            return Err(EngineError::Receive(format!(
                "the stream for '{name}' is not the one the package's manifest lists \
                 (guid {:#x} from {:#x}, the manifest {:#x} from {:#x})",
                header.to_guid, header.from_guid, stream.to_guid, stream.from_guid
            )));
        }
        let exists = self.core.directory.lock().datasets.contains_key(&name);
        let origin = if header.is_incremental() && !exists {
            let origin = self.snapshot_by_guid(header.from_guid, target);
            Some(origin.ok_or_else(|| {
                EngineError::Receive(format!(
                    "'{name}' does not exist, and its stream is incremental from snapshot guid \
                     {}, which no snapshot of the pool has",
                    header.from_guid
                ))
            })?)
        } else {
            None
        };
        let step = TreeStep {
            origin,
            properties: manifest.properties.then(|| dataset.properties.clone()),
        };
        let received = self.receive_stream(&name, &mut reader, options, &step)?;
        // Verified to its END: its checksum joins the package's chain.
        let end = reader.checksum();
        package.stream_done(&end);
        Ok(received)
    }

    /// `receive -F` of an incremental `-R` package into an existing target: destroys the
    /// snapshots below (and of) the target that the manifest does not list for their
    /// dataset, then the datasets it does not list (deepest first, with their snapshots), as
    /// `zfs receive -F` does, before any stream is read (not undone if the package then
    /// fails). A snapshot or dataset that others depend on (a clone's origin) stops it with
    /// the destroy's error.
    fn prune_to_manifest(
        &self,
        target: &str,
        manifest: &PackageManifest,
    ) -> Result<(), EngineError> {
        let incremental = manifest
            .streams
            .iter()
            .find(|stream| stream.dataset == 0)
            .is_some_and(|stream| stream.from_guid != 0);
        if !manifest.recursive || !incremental {
            return Ok(());
        }
        let existing = self.tree_snapshots(target);
        let mut gone_datasets = Vec::new();
        for (relative, dataset, snapshots) in existing {
            let listed = manifest.datasets.iter().find(|sent| sent.name == relative);
            let gone: Vec<String> = snapshots
                .into_iter()
                .filter(|(_, guid)| {
                    listed.is_none_or(|sent| !sent.snapshots.iter().any(|(_, g)| g == guid))
                })
                .map(|(name, _)| name)
                .collect();
            if !gone.is_empty() {
                self.destroy_snapshots(&gone)?;
            }
            if listed.is_none() {
                gone_datasets.push(dataset);
            }
        }
        // Children before their parents.
        gone_datasets.sort_by(|a, b| b.cmp(a));
        for dataset in gone_datasets {
            self.destroy_dataset(&dataset)?;
        }
        Ok(())
    }

    /// The datasets of and below `target` (name relative to it, full name) with their
    /// snapshots (full name, guid).
    fn tree_snapshots(&self, target: &str) -> Vec<TreeEntry> {
        let directory = self.core.directory.lock();
        let table = self.core.snapshots.lock();
        let below = format!("{target}/");
        directory
            .datasets
            .values()
            .filter(|record| !is_hidden(&record.name))
            .filter_map(|record| {
                let relative = if record.name == target {
                    String::new()
                } else {
                    record.name.strip_prefix(&below)?.to_string()
                };
                let snapshots = table
                    .snapshots_of(record.id)
                    .map(|snapshot| {
                        let info = &snapshot.info;
                        let guid = stored_or_derived_guid(
                            info.guid,
                            self.core.guid,
                            info.id,
                            info.created_txg,
                        );
                        (format!("{}@{}", record.name, info.name), guid)
                    })
                    .collect();
                Some((relative, record.name.clone(), snapshots))
            })
            .collect()
    }

    /// The snapshot (`dataset@snap`) whose guid is `guid`, one under `prefer` (or of it)
    /// first.
    fn snapshot_by_guid(&self, guid: u64, prefer: &str) -> Option<String> {
        let directory = self.core.directory.lock();
        let table = self.core.snapshots.lock();
        let (under, at) = (format!("{prefer}/"), format!("{prefer}@"));
        let mut found: Vec<(bool, String)> = table
            .all()
            .filter(|snapshot| {
                let info = &snapshot.info;
                stored_or_derived_guid(info.guid, self.core.guid, info.id, info.created_txg) == guid
            })
            .filter_map(|snapshot| {
                let dataset = dataset_name(&directory, snapshot.info.dataset_id)?;
                let name = format!("{dataset}@{}", snapshot.info.name);
                let elsewhere = !(name.starts_with(&under) || name.starts_with(&at));
                (!is_hidden(&dataset)).then_some((elsewhere, name))
            })
            .collect();
        found.sort();
        found.into_iter().next().map(|(_, name)| name)
    }

    /// A clone's stream: the hidden dataset is a clone of `origin` (`dataset@snap`).
    pub(crate) fn begin_clone(
        &self,
        target: &str,
        hidden: &str,
        origin: &str,
        header: &StreamHeader,
    ) -> Result<(), EngineError> {
        let kind = dataset_kind(header.kind);
        self.check_new_dataset(target, kind)?;
        let parsed = SnapshotName::parse(origin)?;
        let (origin_kind, properties) = self.clone_properties(&parsed, &[])?;
        if origin_kind != kind {
            return Err(EngineError::Receive(format!(
                "the stream for '{target}' is a {}'s, its origin {origin} a {}",
                kind.as_str(),
                origin_kind.as_str()
            )));
        }
        self.make_clone(parsed, hidden.to_string(), kind, properties)
    }

    /// Sets the properties `sent` with a stream on its hidden dataset (see the module doc)
    /// and returns the target's local properties once received.
    pub(crate) fn receive_properties(
        &self,
        hidden: &str,
        sent: &[(String, String)],
        incremental: bool,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let (kind, current) = {
            let directory = self.core.directory.lock();
            let record = directory.get(hidden)?;
            (record.kind, record.properties.clone())
        };
        let mut wanted = creation_properties(kind, sent)?;
        for fixed in ["volsize", "volblocksize"] {
            wanted.remove(fixed);
            if let Some(value) = current.get(fixed) {
                wanted.insert(fixed.to_string(), value.clone());
            }
        }
        let mut on_hidden = wanted.clone();
        if incremental {
            on_hidden.retain(|property, _| !is_space_limit(property));
        }
        let name = hidden.to_string();
        self.run_sync_task(move |core, _txg| {
            let mut trial = core.directory.lock().clone();
            trial.get_mut(&name)?.properties = on_hidden.clone();
            core.check_reservations(&trial, Some(&name))?;
            core.directory.lock().get_mut(&name)?.properties = on_hidden;
            Ok(())
        })?;
        self.apply_properties();
        Ok(wanted)
    }
}

/// A dataset of a received tree: its name relative to the target, its full name, its
/// snapshots (full name, guid).
type TreeEntry = (String, String, Vec<(String, u64)>);

fn is_space_limit(property: &str) -> bool {
    cairn_dataset::properties::lookup(property).is_ok_and(|def| def.is_space_limit())
}

/// The error of a package stopped at sub-stream `index` (of `total`; `total` itself: at its
/// END), saying what was received before.
fn package_failed(
    err: &EngineError,
    index: usize,
    total: usize,
    last: Option<&str>,
) -> EngineError {
    let why = match err {
        EngineError::Receive(why) => why.clone(),
        other => crate::error_chain(other),
    };
    let kept = match last {
        Some(last) => format!("the {index} before it were received, the last {last}"),
        None => "nothing was received".to_string(),
    };
    if index == total {
        return EngineError::Receive(format!(
            "the package's end is bad ({why}): all {total} of its streams were received, the \
             last {}",
            last.unwrap_or("-")
        ));
    }
    EngineError::Receive(format!(
        "stream {} of {total} of the package: {why}; {kept}",
        index + 1
    ))
}
