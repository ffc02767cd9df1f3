//! Opening the vdev tree of a discovered pool (`open_tree`): every leaf found in the import
//! source is opened, every other one is recorded missing (and *unlocated* if its label's path
//! lies outside the source, since import never looks elsewhere).
//!
//! Invariants: on error every leaf opened so far is shut down; a top-level vdev with no device
//! present is refused here, except a log device (judged after loading). This file uses only
//! `discover` below it.

use super::discover::{DiscoveredPool, ImportSource, import_error};
use crate::EngineError;
use crate::pool::PoolOptions;
use cairn_device::DeviceError;
use cairn_device::spec::DeviceSpec;
use cairn_format::VdevRole;
use cairn_format::label::{TopVdevConfig, TopVdevKind, data_region_size};
use cairn_pool::vdev::{Health, Leaf, TopVdev, VdevTree};
use std::path::PathBuf;

/// Whether `path` is one of the places `source` names: a device it lists, or a file directly
/// inside a directory it searches.
fn within(source: &ImportSource, path: &std::path::Path) -> bool {
    let absolute = |path: &std::path::Path| std::path::absolute(path).unwrap_or(path.to_path_buf());
    let in_dir = |dir: &PathBuf| path.parent().map(absolute) == Some(absolute(dir));
    match source {
        ImportSource::Devices(specs) => specs
            .iter()
            .any(|spec| absolute(&spec.path) == absolute(path)),
        ImportSource::Directory(dir) => in_dir(dir),
        ImportSource::Directories(dirs) => dirs.iter().any(in_dir),
    }
}

/// Bytes of data region each child of `top` must hold for a vdev data region of
/// `data_size_bytes`: all of it on a leaf or a mirror's side, the sectors that fall on one
/// child of a raidz vdev (whose region is its children's, interleaved sector by sector).
fn child_bytes_needed(top: &TopVdevConfig, data_size_bytes: u64) -> u64 {
    match top.kind {
        TopVdevKind::RaidZ { .. } => {
            let width = (top.children.len() as u64).max(1);
            let sectors = data_size_bytes >> top.ashift;
            sectors.div_ceil(width) << top.ashift
        }
        TopVdevKind::Leaf | TopVdevKind::Mirror => data_size_bytes,
    }
}

/// The tree `open_tree` opened, with what it could not find.
pub(super) struct OpenedTree {
    pub(super) tree: VdevTree,
    /// Missing leaves, as their labels name them (with a note for the unlocated ones).
    pub(super) missing: Vec<String>,
    /// Guids of missing leaves whose label's path lies outside `source` (`Pool::is_unlocated`).
    pub(super) unlocated: std::collections::BTreeSet<u64>,
}

/// Opens every present leaf found in `source`, and nothing else.
pub(super) fn open_tree(
    found: &DiscoveredPool,
    source: &ImportSource,
    options: &PoolOptions,
) -> Result<OpenedTree, EngineError> {
    let name = &found.config.pool_name;
    found.config.tree.validate().map_err(|err| {
        import_error(
            name,
            format!("the vdev tree in its labels is invalid: {err}"),
        )
    })?;
    let mut tops = Vec::new();
    let mut missing = Vec::new();
    let mut unlocated = std::collections::BTreeSet::new();
    // A device smaller than the tree says: refused once every opened leaf can be shut down.
    let mut too_small: Option<String> = None;
    for top in &found.config.tree.tops {
        // Validated above: the data region fits in a u64.
        let data_size_bytes = top.data_size_bytes().unwrap_or(0);
        let child_bytes = child_bytes_needed(top, data_size_bytes);
        let mut leaves = Vec::new();
        for child in &top.children {
            let located = found.devices.iter().find(|(_, guid)| *guid == child.guid);
            let spec = DeviceSpec {
                path: located
                    .map_or_else(|| PathBuf::from(&child.path), |(spec, _)| spec.path.clone()),
                model: child.model.clone(),
            };
            let opened: Option<Result<_, DeviceError>> =
                located.map(|_| (options.opener)(&spec, None));
            match opened {
                Some(Ok(device)) => {
                    let holds_bytes = data_region_size(device.size_bytes());
                    if holds_bytes < child_bytes && too_small.is_none() {
                        too_small = Some(format!(
                            "vdev {} claims a data region of {child_bytes} bytes on each \
                             device, more than {spec} holds ({holds_bytes} bytes)",
                            top.id
                        ));
                    }
                    leaves.push(Leaf::open(child.guid, spec, device));
                }
                Some(Err(err)) => {
                    return Err(import_error(
                        name,
                        format!("cannot open {spec}: {}", crate::error_chain(&err)),
                    ));
                }
                None => {
                    if within(source, &spec.path) {
                        missing.push(spec.to_string());
                    } else {
                        missing.push(format!(
                            "{spec} (not found in {source}; not looked for elsewhere)"
                        ));
                        unlocated.insert(child.guid);
                    }
                    leaves.push(Leaf::missing(child.guid, spec));
                }
            }
        }
        let mut config = top.clone();
        config.children.clear();
        tops.push(TopVdev {
            data_size_bytes,
            config,
            leaves,
        });
    }
    let tree = VdevTree { tops };
    if let Some(reason) = too_small {
        tree.shutdown();
        return Err(import_error(name, reason));
    }
    for top in &tree.tops {
        // A missing log device is judged after loading: it matters only if some dataset's
        // intent log still has records (see `Pool::import`).
        if top.health() == Health::Unavail && top.config.role != VdevRole::Log {
            tree.shutdown();
            return Err(import_error(
                name,
                format!(
                    "vdev {} has no device present (missing: {})",
                    top.config.id,
                    missing.join(", ")
                ),
            ));
        }
    }
    Ok(OpenedTree {
        tree,
        missing,
        unlocated,
    })
}
