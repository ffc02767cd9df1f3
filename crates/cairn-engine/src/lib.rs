//! # cairn-engine: one pool, every layer composed
//!
//! `Pool` is the handle front ends hold. It owns the vdev tree, the allocator, the block
//! pipeline, the meta object set (MOS) with the dataset directory, the open datasets and the
//! txg engine, and it is the only crate that sees all of them. It implements the txg sync:
//!
//! ```text
//! sync(txg):
//!   for each dataset object set dirty in txg:  ObjectSet::sync  -> new root pointer
//!   snapshot table: dead blocks onto deadlists, this txg's snapshots and destroys,
//!     a share of background frees                              -> MOS object 2 (a map)
//!   directory blob (roots, used bytes, properties) -> MOS object 1;  MOS sync -> root pointer
//!   space log: this txg's allocations and frees (or a checkpoint)  -> chained block(s)
//!   wait for every write; flush all leaves
//!   [config changed: labels 0,2 + flush, labels 1,3 + flush]
//!   uberblock { txg, MOS root, space-log head } -> every label's ring slot; flush all leaves
//!   publish the new trees to readers; release frees older than the defer window
//! ```
//!
//! Import scans devices for labels, rebuilds the vdev tree from the newest config, then tries
//! uberblocks newest first until one whose MOS, dataset directory and space log all verify; the
//! allocator is rebuilt by replaying the space log from its last checkpoint.
//!
//! Invariants:
//! - Nothing reachable from the newest durable uberblock is ever overwritten (copy-on-write,
//!   frees deferred by `DEFER_TXGS`).
//! - Allocated space (space log) equals referenced space (block pointers): `check` proves it.
//! - A pool opened read-only (`check`) writes nothing at all.
//!
//! See also: `sync::PoolSyncer`, `Pool::import` (import.rs), `Pool::scrub` (scrub.rs),
//! `Pool::check` (check.rs).

mod bookmarks;
mod budget;
mod cache_devices;
mod check;
mod check_snapshots;
mod clones;
mod command_history;
mod command_pacing;
mod core;
mod create;
mod datasets;
mod filesystems;
mod free_pacing;
mod import;
mod layout;
mod missed;
mod pool;
mod pool_status;
mod probe;
mod receive;
mod receive_apply;
mod receive_corrective;
mod receive_finish;
mod receive_resume;
mod receive_tree;
mod record_map;
mod replay;
mod resilver;
mod resilver_task;
mod scrub;
mod scrub_progress;
mod send;
mod send_resume;
mod send_tree;
mod snapshot_diff;
mod snapshot_digest;
mod snapshot_fs;
mod snapshot_fs_diff;
mod snapshot_stats;
mod snapshot_sync;
mod snapshot_views;
mod snapshots;
mod space_check;
mod txg_sync;
mod vdev_groups;

pub use bookmarks::BookmarkListing;
pub use budget::{MemoryBudget, SYNC_TARGET_MS};
pub use cache_devices::CacheDeviceStatus;
pub use cairn_arc::pressure::{default_arc_min_bytes, read_memory, usable_memory_bytes};
pub use cairn_arc::{ArcConfig, ArcStats, CacheMode, ReadCache};
pub use cairn_l2arc::{DeviceReport, L2Config, L2Health};
pub use cairn_object::ByteRange;
pub use cairn_zil::ZilStatsSnapshot;
pub use check::CheckReport;
pub use core::MosWrites;
pub use datasets::DatasetInfo;
pub use import::{
    DiscoveredPool, ImportSource, Rewind, UnreadablePool, discover_pools, unreadable_pool,
    unreadable_pools,
};
pub use pool::{Pool, PoolOptions, process_cache};
pub use pool_status::DatasetSpaceFigures;
pub use pool_status::{
    DeviceIo, DeviceQueue, DeviceRole, LeafIo, LeafStatus, LogDeviceUse, PoolDeviceIo, PoolStatus,
    TopIo, TopStatus,
};
pub use receive::{ReceiveOptions, ReceiveSummary};
pub use receive_corrective::CorrectiveSummary;
pub use resilver::{ResilverOptions, ResilverStatus};
pub use scrub::ScrubProgress;
pub use send::{SendOptions, SendSummary, snapshot_guid};
pub use send_tree::PackageOptions;
pub use snapshot_diff::BlockDiff;
pub use snapshot_digest::ContentDigest;
pub use snapshot_fs_diff::FileDiff;
pub use snapshot_stats::SnapshotStatsSnapshot;
pub use snapshot_views::SnapshotFilesystem;
pub use snapshots::{SnapshotIdentity, SnapshotListing, SnapshotSpace};
pub use vdev_groups::{CreateOptions, VdevGroup};

use cairn_device::spec::DeviceSpec;
use cairn_device::{Device, DeviceError, ErrorClass};
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Dataset(#[from] cairn_dataset::DatasetError),
    #[error(transparent)]
    Label(#[from] cairn_pool::labels::LabelError),
    #[error(transparent)]
    Object(#[from] cairn_object::ObjectError),
    #[error(transparent)]
    Pipeline(#[from] cairn_pipeline::PipelineError),
    #[error(transparent)]
    Txg(#[from] cairn_pool::txg::TxgError),
    /// `pool clear` resumed I/O, but the txg it forced could not sync.
    #[error("the pool is still suspended")]
    StillSuspended(#[source] cairn_pool::txg::TxgError),
    #[error(transparent)]
    Flush(#[from] cairn_pool::vdev::FlushError),
    #[error("txg {txg} synced without running its task")]
    TaskNotRun { txg: u64 },
    #[error("pool '{pool}' cannot be imported: {reason}")]
    Import { pool: String, reason: String },
    #[error("cannot create pool: {0}")]
    Create(String),
    #[error("pool '{0}' is read-only (opened for checking)")]
    ReadOnlyPool(String),
    #[error("space accounting: {0}")]
    Space(String),
    #[error("cannot change the pool's devices: {0}")]
    Layout(String),
    #[error(transparent)]
    Cache(#[from] cairn_l2arc::L2Error),
    /// The space allocator refused a free (see `SpaceAllocator::fault`); no txg is committed
    /// after it, so the pool is suspended.
    #[error("space map and block pointers disagree; the pool is suspended")]
    SpaceFault(#[source] cairn_pool::space::SpaceError),
    #[error(transparent)]
    Fs(#[from] cairn_fs::FsError),
    /// A `diff` asked of what cannot be compared (not two versions of one dataset, older
    /// first).
    #[error("cannot diff: {0}")]
    Diff(String),
    /// A send that cannot be made (a source that is no older snapshot of the dataset), or
    /// whose stream could not be written.
    #[error("cannot send: {0}")]
    Send(String),
    /// A stream refused (damaged, cut, inconsistent, for a target it cannot apply to).
    #[error("cannot receive: {0}")]
    Receive(String),
}

/// `err` and every error below it (`source()`), joined with ": ", for the places where an error
/// becomes text (a suspended txg engine's reason, import failures per uberblock).
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    cairn_device::error_chain(err)
}

impl EngineError {
    /// What the failure means to a client (see `cairn_device::ErrorClass` and
    /// `DatasetError::class`, which documents the choices): wrapped errors answer for
    /// themselves (a filesystem's too: `FsError::class`, so its errno here is the one a FUSE
    /// client gets); a pool opened read-only is `ReadOnly`; a suspended pool is `Io`; a bad
    /// request to create or reshape a pool is `Invalid`; everything else is damage or a
    /// device failure, `Io`.
    pub fn class(&self) -> ErrorClass {
        match self {
            EngineError::Device(err) => err.class(),
            EngineError::Dataset(err) => err.class(),
            EngineError::Object(err) => err.class(),
            EngineError::Pipeline(err) => err.class(),
            EngineError::Txg(err) | EngineError::StillSuspended(err) => err.class(),
            EngineError::ReadOnlyPool(_) => ErrorClass::ReadOnly,
            EngineError::Create(_)
            | EngineError::Layout(_)
            | EngineError::Diff(_)
            | EngineError::Send(_)
            | EngineError::Receive(_) => ErrorClass::Invalid,
            EngineError::Cache(cairn_l2arc::L2Error::Device { source, .. }) => source.class(),
            EngineError::Cache(_) => ErrorClass::Invalid,
            EngineError::Fs(err) => err.class(),
            EngineError::Label(_)
            | EngineError::Flush(_)
            | EngineError::TaskNotRun { .. }
            | EngineError::Import { .. }
            | EngineError::Space(_)
            | EngineError::SpaceFault(_) => ErrorClass::Io,
        }
    }

    /// `class` as a POSIX errno.
    pub fn errno(&self) -> i32 {
        self.class().errno()
    }
}

/// Opens the device for a spec; tests substitute emulated devices with power switches.
pub type DeviceOpener =
    Arc<dyn Fn(&DeviceSpec, Option<u64>) -> Result<Arc<dyn Device>, DeviceError> + Send + Sync>;

/// Fault injection for crash tests of the whole program (our `zinject`), chosen by the front
/// end: with `power_cut_after_ops = Some(N)`, every emulated device an opener made by
/// [`device_opener`] opens is fed by one power switch that trips at the N-th write, flush or
/// discard across them — writes in flight land in part, unflushed writes are dropped or torn
/// (seeded by `seed`) and every later operation fails, as if the machine lost power; `on_trip`
/// is told what the cut caught. With `record_dir`, emulated devices log what reaches their
/// media there (`cairn_emulate::record`), so a crash test can rebuild the images a cut left.
/// Plain files are never affected.
#[derive(Clone, Default)]
pub struct FaultInjection {
    pub power_cut_after_ops: Option<u64>,
    pub seed: u64,
    pub record_dir: Option<std::path::PathBuf>,
    pub on_trip: Option<TripHook>,
}

/// Told what a power cut caught, when it happens.
pub type TripHook = Arc<dyn Fn(&cairn_emulate::CutReport) + Send + Sync>;

impl std::fmt::Debug for FaultInjection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjection")
            .field("power_cut_after_ops", &self.power_cut_after_ops)
            .field("seed", &self.seed)
            .field("record_dir", &self.record_dir)
            .finish_non_exhaustive()
    }
}

/// Opens plain files and block devices, and `emu:MODEL:PATH` specs with real timing; no faults.
pub fn default_opener() -> DeviceOpener {
    device_opener(&FaultInjection::default())
}

/// [`default_opener`] with `injection`'s faults. One opener holds one power switch: a process
/// that wants every device on the same switch makes one opener and shares it.
pub fn device_opener(injection: &FaultInjection) -> DeviceOpener {
    let power = injection.power_cut_after_ops.map(|ops| {
        let switch = Arc::new(cairn_emulate::PowerSwitch::with_seed(injection.seed));
        switch.arm_after_ops(ops);
        if let Some(on_trip) = injection.on_trip.clone() {
            switch.on_trip(move |report| on_trip(report));
        }
        switch
    });
    let record_dir = injection.record_dir.clone();
    Arc::new(move |spec, create_size_bytes| {
        cairn_emulate::open_device_recorded(
            spec,
            cairn_device::file::FileOptions {
                create_size_bytes,
                ..Default::default()
            },
            cairn_emulate::EmuOptions {
                power: power.clone(),
                ..cairn_emulate::EmuOptions::default()
            },
            record_dir.as_deref(),
        )
    })
}

pub(crate) use cairn_pool::new_guid;

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
