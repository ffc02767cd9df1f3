//! The administration library: what changes a pool's shape or its datasets, with the policy
//! that keeps a machine's pools safe, and the looks at pools a front end shows, in one place
//! that every front end calls (the CLI's commands, in their own process or through a server's
//! control socket; later the page, a REST API, NFS share management).
//!
//! Its typed face: `AdminRequest` (one variant per operation, plain arguments, absolute paths)
//! and `AdminReply` (data, never rendered text), answered by `handle` (`handle.rs`) the same
//! way in a server and in a front end's own process; notes for people travel beside the reply
//! (`Answer`). The requests are carried out by `operations.rs` (pool and dataset changes),
//! `mirrors.rs` (attach/replace/detach, clear, scrub, waiting for a resilver with progress),
//! `import_request.rs` (import, check), `views.rs` and `dataset_rows.rs` (pool status/list,
//! dataset list/get), `stats.rs` and `samples.rs` (statistics and the samples a poller
//! subtracts), `mounting.rs` (FUSE mounts, a server's only), `streams.rs` (send and receive
//! with a stream the front end hands over: `handle_stream`).
//!
//! Policy kept here, not in a front end:
//! - device safety (`devices.rs`): a device of a pool this machine has imported is refused
//!   even when forced, as `zpool` refuses a member of an active pool; a device that does not
//!   exist is refused unless a size to create it was given;
//! - all or nothing (`pools.rs`): a pool create that fails after the engine made the pool
//!   destroys it again and removes the files it created; a log device that failed while being
//!   added is removed again and named; files created for devices that were not taken are
//!   removed;
//! - datasets (`datasets.rs`): named `POOL/NAME`, recorded in the history once durable, mount
//!   flags following their properties onto live mounts, unsafe settings reported;
//! - export and destroy (`removal.rs`): filesystems unmounted first, a pool that cannot be
//!   opened only forgotten (never when another process has it open);
//! - imports (`import.rs`): what may be imported, which pool a name means, remembering it;
//! - the memory budget of a server (`memory.rs`), checked before the cache takes its limit.
//!
//! Invariants: functions take their options as parameters and print nothing; what a person
//! should be told comes back in the result (`AdminError`, notes, progress to an observer). The engine's own refusals
//! (an unknown device, a device already in the pool) stay the engine's: this layer adds only
//! what needs a view beyond one pool (the pool cache, the host's files). Uses `pools` (access,
//! pool cache) and the engine; nothing below uses it.

mod dataset_rows;
mod datasets;
mod devices;
mod failures;
mod file_diff;
mod handle;
mod import;
mod import_request;
mod memory;
mod mirrors;
mod mounting;
mod operations;
mod pools;
mod removal;
mod request;
pub mod samples;
pub mod stats;
mod streams;
mod views;

pub use dataset_rows::{DatasetRow, PoolDatasets, pool_datasets};
pub use datasets::{
    SetOutcome, create_filesystem, create_volume, destroy_dataset, destroy_preview, diff_blocks,
    holds, rollback, set_properties, snapshot, snapshot_change, snapshot_change_in_steps,
    snapshot_digest, written_since,
};
pub use devices::{CreatedFiles, check_devices_exist, refuse_imported_members};
pub use file_diff::{FileChangeRow, FileDiffReply, diff_files, kind_letter};
pub use handle::{handle, handle_observed};
pub use import::{choose_pool, importable_pools, refuse_imported_name, remember_imported};
pub use import_request::{ImportOutcome, ImportRequest, ImportablePool};
pub use memory::{BudgetCheck, memory_budget};
pub use mirrors::{Cleared, MirrorChange, MirrorOutcome, Progress, ResilverRequest};
pub use pools::{AddedDevices, add_devices, create_pool};
pub use removal::{PoolRemoval, destroy_pool, export_pool};
pub use request::{
    AdminReply, AdminRequest, Answer, DatasetChange, GroupLayout, HealReport, PoolChange,
    ReceiveReport, SendReport, TxgRow, VdevLayout,
};
pub use streams::{handle_stream, resumed_send_pool};
pub use views::{PoolView, PoolViews, pool_views};

use crate::PoolsError;
use crate::cache::CacheError;
use cairn_engine::EngineError;
use std::path::PathBuf;

/// Why an administrative change was refused or failed. Each says what to do about it; the
/// engine's and the pool cache's errors are kept whole as sources.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error(
        "a pool of that name is already imported (see cairn pool status {0}; cairn pool export {0} forgets one that is UNAVAIL)"
    )]
    AlreadyImported(String),
    #[error("no data devices given (cache devices alone hold no pool)")]
    NoDataDevices,
    #[error("only log and cache devices can be added (data vdevs: not supported yet)")]
    DataDevicesNotAddable,
    #[error(
        "{} is part of imported pool '{pool}' and cannot be used, even with -f (export or destroy '{pool}' first)",
        path.display()
    )]
    DeviceInUse { path: PathBuf, pool: String },
    #[error("{} does not exist (use --size SIZE to create missing files)", path.display())]
    DeviceMissing { path: PathBuf },
    /// Log devices that failed while being added, and what became of them.
    #[error("{0}")]
    FailedAdditions(String),
    #[error("{0}")]
    MemoryBudget(String),
    #[error("cannot {verb} pool '{pool}'")]
    Remove {
        verb: &'static str,
        pool: String,
        #[source]
        source: Box<EngineError>,
    },
    #[error(
        "cannot {verb} pool '{pool}': another process has it open ({reason}); stop that process first"
    )]
    Busy {
        verb: &'static str,
        pool: String,
        reason: String,
    },
    #[error(
        "cannot destroy pool '{pool}': it cannot be opened ({reason}); cairn pool destroy -f {pool} forgets it without touching its devices"
    )]
    DestroyUnavailable { pool: String, reason: String },
    #[error("cannot forget pool '{pool}'")]
    NotForgotten {
        pool: String,
        #[source]
        source: CacheError,
    },
    #[error(
        "cannot import '{wanted}': no such pool found in {searched}{}",
        if *only_destroyed {
            " (only a destroyed pool of that name was found; destroyed pools cannot be imported)"
        } else {
            " (use -d DIR to search a directory of device files)"
        }
    )]
    NoPoolFound {
        wanted: String,
        searched: String,
        only_destroyed: bool,
    },
    #[error(
        "cannot import '{wanted}': several pools have this name (guids {guids}); import one by guid"
    )]
    AmbiguousPool { wanted: String, guids: String },
    #[error("cannot import '{wanted}': a pool named '{name}' is already imported")]
    NameImported { wanted: String, name: String },
    #[error("cannot keep pool '{pool}' after import")]
    NotKept {
        pool: String,
        #[source]
        source: PoolsError,
    },
    #[error("a {kind} is named POOL/NAME ('{name}' would be a pool's root dataset)")]
    RootDataset { name: String, kind: &'static str },
    #[error("it is a pool's root dataset (use cairn pool destroy {0})")]
    DestroyRoot(String),
    /// A request that makes no sense as asked (the text says why).
    #[error("{0}")]
    Invalid(String),
    #[error("cannot set {property}={value} on '{dataset}'")]
    SetProperty {
        property: String,
        value: String,
        dataset: String,
        #[source]
        source: Box<EngineError>,
    },
    /// The change's txg is durable; what came after it failed.
    #[error("'{name}' was created, but then the pool failed")]
    DoneThenFailed {
        name: String,
        #[source]
        source: Box<AdminError>,
    },
    #[error(
        "pool '{pool}' was created but not added to the pool cache; import it with cairn pool import -d DIR"
    )]
    NotRemembered {
        pool: String,
        #[source]
        source: CacheError,
    },
    #[error("the pool cache does not list the new devices of '{pool}'")]
    CacheNotUpdated {
        pool: String,
        #[source]
        source: CacheError,
    },
    #[error("its final sync failed")]
    FinalSync(#[source] Box<EngineError>),
    #[error("cannot record history of pool '{pool}'")]
    History {
        pool: String,
        #[source]
        source: Box<EngineError>,
    },
    /// The engine's message already says what could not be done.
    #[error("{0}")]
    Create(String),
    /// Boxed: an engine error is large, and every admin result carries this type.
    #[error(transparent)]
    Engine(Box<EngineError>),
    #[error("no cairn server is running for {}; {what} `cairn serve`", state_dir.display())]
    NeedsServer {
        state_dir: PathBuf,
        what: &'static str,
    },
    /// `what` could not be done, because of `source`.
    #[error("{what}")]
    Failed {
        what: String,
        #[source]
        source: Box<AdminError>,
    },
    /// Refused; the message says why and what to do.
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Mount(#[from] crate::fuse::MountError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Pools(#[from] PoolsError),
    #[error(transparent)]
    Cache(#[from] CacheError),
}

impl From<EngineError> for AdminError {
    fn from(err: EngineError) -> AdminError {
        AdminError::Engine(Box::new(err))
    }
}
