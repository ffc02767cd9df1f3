//! Import: find a pool's devices by their labels, rebuild its vdev tree from the newest config,
//! and open the newest uberblock whose tree verifies.
//!
//! Devices are matched by leaf guid, not path, so a pool whose files moved or were renamed still
//! imports from `-d DIR`. A top-level vdev with no present device makes the pool unimportable (a
//! clear error naming what is missing); a mirror with a side missing imports DEGRADED.
//!
//! Import stays where it was told to look. A leaf not found there is never looked for at the
//! path its label remembers: that file may be a stale copy of the side, or a like-named pool's
//! device, and opening it would rejoin it stale and write to it. Such a leaf is shown by its
//! label's path but marked *unlocated* (`Pool::is_unlocated`), so the front end does not
//! remember that path in the pool cache and no later open tries it.
//!
//! Falling back past the newest uberblock is safe for as long as the frees of the newer txgs
//! were still deferred (`DEFER_TXGS`); older fallbacks are refused rather than risk reading
//! reused space.
//!
//! Never a silent rewind. Opening an older txg than the newest one the labels prove committed
//! gives up txgs whose writes were acknowledged, so import refuses it, naming the txg it would
//! open and what would be lost, unless asked (`PoolOptions::rewind`, the CLI's `-F`;
//! `Pool::preview_import` says what it would do). What counts as proof must survive the
//! normal crash, a power cut in the middle of a commit, without a refusal:
//! - an uberblock that verifies: it is written only after its txg's blocks were flushed, so if
//!   its tree does not verify, the damage came later (a torn uberblock fails its checksum and
//!   proves nothing: a header readable inside a torn slot is not trusted);
//! - a config in the second half of the labels (1 and 3): a commit writes it only after its
//!   txg's uberblock was flushed, so its txg was committed even when every copy of that
//!   uberblock has since been damaged. The first half is written before the uberblock and
//!   proves nothing.
//!
//! A rewind that writes first zeroes the rings' uberblocks newer than the txg it opens, since
//! the next txgs reuse their numbers and a later import must not pick one of them again.
//!
//! ## Where the code lives
//!
//! - `discover.rs`: `ImportSource`, `DiscoveredPool`, `discover_pools`, `find_pool` and the
//!   choice of config (`committed_config`).
//! - `tree.rs`: `open_tree`, the leaves found in the source opened, the others recorded missing.
//! - `load.rs`: `load`, one uberblock's space log, MOS, directory and object sets.
//! - `rewind.rs`: `open_newest` (which uberblock) and `Rewind` (what that gives up).
//! - `version.rs`: the format-version gate (`unreadable_pool`, `refuse_unreadable_uberblocks`):
//!   a pool of a format this build does not read is refused by name, before anything else.
//! - this file: `Pool::import` and `Pool::preview_import`, which put those together.
//!
//! Files depend one way only, bottom to top: `discover` and `load` (no siblings) < `tree`
//! (`discover`), `version` (`discover`) < `rewind` (`discover`, `load`) < this file.

mod discover;
mod load;
mod rewind;
mod tree;
mod version;

pub(crate) use discover::candidate_paths;
pub use discover::{DiscoveredPool, ImportSource, discover_pools};
pub use rewind::Rewind;
pub use version::{UnreadablePool, unreadable_pool, unreadable_pools};

use discover::{committed_config, import_error};
use load::Loaded;
use rewind::open_newest;
use tree::{OpenedTree, open_tree};

use crate::core::PoolCore;
use crate::pool::PoolOptions;
use crate::{EngineError, Pool};
use cairn_dataset::DatasetDirectory;
use cairn_format::{PoolState, Uberblock, VdevRole};
use cairn_pool::labels::discard_uberblocks_after;
use cairn_pool::vdev::{Health, VdevTree};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

impl Pool {
    /// What `import` with `PoolOptions::rewind` would open, committing nothing: `None` if the
    /// newest txg the labels prove committed opens, else the rewind it would take. An error
    /// if the pool cannot be imported even so.
    pub fn preview_import(
        source: &ImportSource,
        name: &str,
        options: &PoolOptions,
    ) -> Result<Option<Rewind>, EngineError> {
        let mut found = find_readable(source, name)?;
        found.config = committed_config(&found);
        let tree = Arc::new(open_tree(&found, source, options)?.tree);
        let outcome = open_newest(&found, &tree, options).map(|(_, _, rewind)| rewind);
        tree.shutdown();
        outcome
    }

    /// Imports the pool called `name` (or with that guid) from `source`.
    pub fn import(
        source: &ImportSource,
        name: &str,
        options: PoolOptions,
    ) -> Result<Pool, EngineError> {
        let mut found = find_readable(source, name)?;
        found.config = committed_config(&found);
        let pool_name = found.config.pool_name.clone();
        let OpenedTree {
            tree,
            missing,
            unlocated,
        } = open_tree(&found, source, &options)?;
        let tree = Arc::new(tree);
        let mut notes = Vec::new();
        if !missing.is_empty() {
            notes.push(format!(
                "pool '{pool_name}' is DEGRADED: missing {}",
                missing.join(", ")
            ));
        }
        // A side whose uberblocks stop before a complete sibling's missed the txgs after (it
        // failed while the pool went on); which siblings are complete, the directory says.
        // Until then reads may reach a stale copy: each is verified against its pointer, and
        // another copy is read instead.
        let leaf_newest = crate::missed::newest_uberblocks(&tree, found.config.pool_guid);
        let (ub, loaded) = match open_checked(&found, &tree, &options) {
            Ok((ub, loaded, rewind_note)) => {
                notes.extend(rewind_note);
                (ub, loaded)
            }
            Err(err) => {
                tree.shutdown();
                return Err(err);
            }
        };
        restore_leaf_errors(&tree, &loaded.directory);
        let core = pool_core(&found, loaded, &ub, &options);
        let readonly = options.readonly;
        let log_missing = tree
            .tops
            .iter()
            .any(|top| top.config.role == VdevRole::Log && top.health() == Health::Unavail);
        let mut pool = Pool::assemble(core, ub.txg, &options);
        pool.unlocated_leaves = unlocated;
        pool.mark_resilvering_leaf();
        let (changed_missed, missed_notes) = pool.settle_missed_at_import(&leaf_newest, ub.txg);
        notes.extend(missed_notes);
        if log_missing && !readonly && !options.ignore_missing_log && pool.has_pending_intent_logs()
        {
            let _ = pool.close();
            return Err(missing_log_refusal(&pool_name, &missing, ub.txg));
        }
        notes.extend(import_notes(
            &pool,
            &pool_name,
            &options,
            log_missing,
            &missing,
            ub.txg,
        ));
        if !readonly {
            match pool.replay_intent_logs(ub.txg, !log_missing) {
                Ok(replayed) => notes.extend(replayed),
                Err(err) => {
                    let _ = pool.close();
                    return Err(err);
                }
            }
        }
        if !readonly {
            pool.txg_engine()?
                .sync_now_forced()
                .map_err(|err| import_error(&pool_name, crate::error_chain(&err)))?;
            notes.extend(pool.resume_resilver(&changed_missed)?);
            notes.extend(pool.destroy_abandoned_receives());
        }
        pool.notes = notes;
        pool.find_cache_devices(source, &options);
        Ok(pool)
    }
}

/// The pool `name` names in `source` (`discover::find_pool`), once its format version is
/// known to be one this build reads (`version.rs`): nothing else is read before.
fn find_readable(source: &ImportSource, name: &str) -> Result<DiscoveredPool, EngineError> {
    let found = match discover::find_pool(source, name) {
        Ok(found) => found,
        Err(err) => return Err(version::unreadable_pool(source, name).unwrap_or(err)),
    };
    version::refuse_unreadable_uberblocks(&found)?;
    Ok(found)
}

/// The uberblock to open and what it loaded (`open_newest`), once the rewind that means, if any,
/// is allowed (`PoolOptions::rewind`) and done (the uberblocks of the txgs given up discarded),
/// with the note that says so. Leaves shutting the tree down on error to the caller.
fn open_checked(
    found: &DiscoveredPool,
    tree: &Arc<VdevTree>,
    options: &PoolOptions,
) -> Result<(Uberblock, Loaded, Option<String>), EngineError> {
    let pool_name = &found.config.pool_name;
    let (ub, loaded, rewind) = open_newest(found, tree, options)?;
    let Some(rewind) = rewind else {
        return Ok((ub, loaded, None));
    };
    if !options.rewind {
        drop(loaded);
        return Err(import_error(pool_name, rewind.refusal()));
    }
    if !options.readonly {
        // Before the first commit, which reuses the numbers of the txgs given up.
        if let Err(err) = discard_uberblocks_after(tree, found.config.pool_guid, ub.txg) {
            drop(loaded);
            return Err(import_error(
                pool_name,
                format!(
                    "cannot discard the uberblocks of the txgs a rewind gives up: {}",
                    crate::error_chain(&err)
                ),
            ));
        }
    }
    Ok((ub, loaded, Some(rewind.note())))
}

/// Gives each leaf back the error counts the directory recorded for it.
fn restore_leaf_errors(tree: &VdevTree, directory: &DatasetDirectory) {
    for leaf in tree.leaves() {
        if let Some(record) = directory.leaf_errors.get(&leaf.guid) {
            leaf.errors.restore(
                record.read,
                record.write,
                record.checksum,
                record.repaired_bytes,
            );
        }
    }
}

/// The pool's core state from what `ub` loaded.
fn pool_core(
    found: &DiscoveredPool,
    loaded: Loaded,
    ub: &Uberblock,
    options: &PoolOptions,
) -> PoolCore {
    let mos_numbers = crate::record_map::MosObjectNumbers::of_mos(&loaded.mos);
    PoolCore {
        name: found.config.pool_name.clone(),
        guid: found.config.pool_guid,
        io: loaded.io,
        space: loaded.space,
        mos: loaded.mos,
        directory_written: Mutex::new(cairn_dataset::WrittenRecords::of(&loaded.directory)),
        directory: Mutex::new(loaded.directory),
        objsets: Mutex::new(loaded.objsets),
        intent_logs: Mutex::new(BTreeMap::new()),
        tasks: Mutex::new(BTreeMap::new()),
        space_log: Mutex::new(loaded.space_log),
        uberblock: Mutex::new(ub.clone()),
        label_state: Mutex::new(PoolState::Active),
        config_dirty: AtomicBool::new(!options.readonly),
        space_log_delta_blocks_max: options.space_log_delta_blocks_max.max(1),
        free_entries_per_txg: options.free_entries_per_txg.max(1),
        free_time_per_txg_ms: options.free_time_per_txg_ms,
        space_view: Default::default(),
        suspend_handle: Default::default(),
        snapshots: Mutex::new(loaded.snapshots),
        pending_snapshots: Mutex::new(Vec::new()),
        scan_floors: Mutex::new(BTreeMap::new()),
        clean_through: Mutex::new(BTreeMap::new()),
        snapshot_stats: Default::default(),
        mos_writes: Default::default(),
        free_pacing: Default::default(),
        command_pacing: Default::default(),
        mos_numbers: Mutex::new(mos_numbers),
        receives: Default::default(),
    }
}

/// Why import refuses a pool whose log device is missing while the intent log has records.
fn missing_log_refusal(pool_name: &str, missing: &[String], txg: u64) -> EngineError {
    import_error(
        pool_name,
        format!(
            "log device {} is missing and the intent log is not empty: \
             synchronous writes acknowledged since txg {txg} may exist only \
             there and would be lost; import with --ignore-missing-log to \
             accept that (the pool then comes back as of txg {txg})",
            missing.join(", "),
        ),
    )
}

/// The notes of an import without its log device or without its space log.
fn import_notes(
    pool: &Pool,
    pool_name: &str,
    options: &PoolOptions,
    log_missing: bool,
    missing: &[String],
    txg: u64,
) -> Vec<String> {
    let mut notes = Vec::new();
    if log_missing {
        notes.push(format!(
            "pool '{pool_name}': log device missing ({}); log blocks go to the \
             pool's disks",
            missing.join(", ")
        ));
    }
    if options.without_space_log {
        notes.push(format!(
            "pool '{pool_name}' imported read-only as of txg {txg}: nothing is written to its \
             devices, its space log was not read (space figures count nothing as allocated)"
        ));
        if pool.has_pending_intent_logs() {
            notes.push(format!(
                "pool '{pool_name}': the intent log was not replayed (read-only): \
                 synchronous writes acknowledged after txg {txg} are not visible"
            ));
        }
    }
    notes
}
