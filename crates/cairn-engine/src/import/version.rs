//! The format-version gate of import: a pool whose labels or newest uberblock record a format
//! version this build does not read (`cairn_format::FORMAT_VERSION_MIN..=FORMAT_VERSION`) is
//! refused with an error naming that version and the ones this build reads, before anything
//! the labels point to is read and before any device is opened for writing, so the pool is
//! left as it was.
//!
//! Why a gate of its own: the decoders refuse such labels and uberblocks, and discovery skips
//! what does not decode, so without it a pool of an older format would be "not found", or,
//! were only its newest uberblocks unreadable, opened at an older txg. Every format version
//! before 2 says 1 whatever its layout, so version 1 is never guessed at.
//!
//! Reads only, read-only opens. Uses `discover` (candidate paths, `import_error`); `mod.rs`
//! calls it around `find_pool`, and the front end's import calls `unreadable_pool` when no
//! pool it can read has the name asked for.

use super::discover::{DiscoveredPool, ImportSource, candidate_paths, import_error};
use crate::EngineError;
use cairn_device::file::{FileDevice, FileOptions};
use cairn_format::{format_version_readable, readable_format_versions};
use cairn_pool::labels::{read_identities, read_uberblocks_any_version};
use std::path::Path;

fn open_read_only(path: &Path) -> Option<FileDevice> {
    let options = FileOptions {
        read_only: true,
        ..Default::default()
    };
    FileDevice::open(path, options).ok()
}

fn refusal(pool: &str, version: u64, what: String) -> EngineError {
    import_error(
        pool,
        format!(
            "its on-disk format is version {version} ({what}), and this build reads {}; \
             the pool was made by another build of cairn, which must be used to import it \
             (nothing was written to its devices)",
            readable_format_versions()
        ),
    )
}

/// The refusal for the pool called `name` (or with that guid) in `source` if one of its
/// devices has an intact label of a format version this build does not read; `None` if none
/// has. For when no pool it can read answers to that name.
pub fn unreadable_pool(source: &ImportSource, name: &str) -> Option<EngineError> {
    for path in candidate_paths(source) {
        let Some(device) = open_read_only(&path) else {
            continue;
        };
        for (index, identity) in read_identities(&device).into_iter().enumerate() {
            let Some(identity) = identity else {
                continue;
            };
            let named = identity.pool_name == name || identity.pool_guid.to_string() == name;
            if named && !format_version_readable(identity.version) {
                let what = format!("label {index} of {}", path.display());
                return Some(refusal(&identity.pool_name, identity.version, what));
            }
        }
    }
    None
}

/// A pool found in a search whose labels record a format version this build does not read:
/// what `pool import` lists as not importable, instead of leaving it out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnreadablePool {
    pub name: String,
    pub guid: u64,
    /// The format version its labels record.
    pub format_version: u64,
    /// A device it was found on.
    pub path: std::path::PathBuf,
}

/// Every pool in `source` with an intact label of a format version this build does not read,
/// one per pool guid, by name. Reads labels only, read-only.
pub fn unreadable_pools(source: &ImportSource) -> Vec<UnreadablePool> {
    let mut pools = std::collections::BTreeMap::new();
    for path in candidate_paths(source) {
        let Some(device) = open_read_only(&path) else {
            continue;
        };
        for identity in read_identities(&device).into_iter().flatten() {
            if !format_version_readable(identity.version) {
                pools
                    .entry(identity.pool_guid)
                    .or_insert_with(|| UnreadablePool {
                        name: identity.pool_name.clone(),
                        guid: identity.pool_guid,
                        format_version: identity.version,
                        path: path.clone(),
                    });
            }
        }
    }
    let mut pools: Vec<UnreadablePool> = pools.into_values().collect();
    pools.sort_by(|a, b| a.name.cmp(&b.name).then(a.guid.cmp(&b.guid)));
    pools
}

/// Refuses `found` if the newest intact uberblock of the pool on its devices records a format
/// version this build does not read (the newest it can read would be an older txg).
pub(super) fn refuse_unreadable_uberblocks(found: &DiscoveredPool) -> Result<(), EngineError> {
    let pool_guid = found.config.pool_guid;
    let newest = found
        .devices
        .iter()
        .filter_map(|(spec, _)| {
            let device = open_read_only(&spec.path)?;
            read_uberblocks_any_version(&device)
                .into_iter()
                .filter(|ub| ub.pool_guid == pool_guid)
                .max_by_key(|ub| ub.txg)
                .map(|ub| (ub, spec.path.clone()))
        })
        .max_by_key(|(ub, _)| ub.txg);
    match newest {
        Some((ub, path)) if !format_version_readable(ub.version) => Err(refusal(
            &found.config.pool_name,
            ub.version,
            format!("the uberblock of txg {} on {}", ub.txg, path.display()),
        )),
        _ => Ok(()),
    }
}
