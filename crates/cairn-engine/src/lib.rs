//! # cairn-engine: one pool, every layer composed
//!
//! `Pool` is the handle front ends hold. It owns the vdev tree, the allocator, the block
//! pipeline, the meta object set (MOS) with the dataset directory, the open datasets and the
//! txg engine, and it is the only crate that sees all of them. It implements the txg sync:
//!
//! ```text
//! sync(txg):
//!   for each dataset object set dirty in txg:  ObjectSet::sync  -> new root pointer
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
//! See also: `sync::PoolSyncer`, `import::import_pool`, `scrub::scrub`, `check::check`.

mod check;
mod create;
mod import;
mod layout;
mod pool;
mod replay;
mod resilver;
mod scrub;
mod sync;

pub use cairn_arc::pressure::default_arc_min_bytes;
pub use cairn_arc::{ArcConfig, ArcStats, CacheMode, ReadCache};
pub use cairn_zil::ZilStatsSnapshot;
pub use check::CheckReport;
pub use create::{CreateOptions, VdevGroup};
pub use import::{DiscoveredPool, ImportSource, discover_pools};
pub use pool::{
    DatasetInfo, LeafIo, LeafStatus, LogDeviceUse, Pool, PoolOptions, PoolStatus, TopStatus,
    process_cache,
};
pub use resilver::{ResilverOptions, ResilverStatus};
pub use scrub::ScrubProgress;

use cairn_device::spec::DeviceSpec;
use cairn_device::{Device, DeviceError};
use std::sync::Arc;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Dataset(#[from] cairn_dataset::DatasetError),
    #[error("{0}")]
    Label(#[from] cairn_pool::labels::LabelError),
    #[error(transparent)]
    Object(#[from] cairn_object::ObjectError),
    #[error(transparent)]
    Pipeline(#[from] cairn_pipeline::PipelineError),
    #[error("{0}")]
    Txg(String),
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
}

/// Opens the device for a spec; tests substitute emulated devices with power switches.
pub type DeviceOpener =
    Arc<dyn Fn(&DeviceSpec, Option<u64>) -> Result<Arc<dyn Device>, DeviceError> + Send + Sync>;

/// Opens plain files and block devices, and `emu:MODEL:PATH` specs with real timing.
///
/// Fault injection for crash tests of the whole program (our `zinject`): when the environment
/// sets `CAIRN_INJECT_POWER_CUT_AFTER_OPS=N`, every emulated device this process opens is fed
/// by one power switch that trips at the N-th write or flush across them — unflushed writes
/// are dropped or torn (seeded by `CAIRN_INJECT_SEED`) and every later operation fails, as if
/// the machine lost power. Plain files are never affected.
pub fn default_opener() -> DeviceOpener {
    let power = injected_power_cut();
    Arc::new(move |spec, create_size_bytes| {
        cairn_device::spec::open_device(
            spec,
            cairn_device::file::FileOptions {
                create_size_bytes,
                ..Default::default()
            },
            cairn_device::emulated::EmuOptions {
                power: power.clone(),
                ..cairn_device::emulated::EmuOptions::default()
            },
        )
    })
}

/// The process-wide power switch of `CAIRN_INJECT_POWER_CUT_AFTER_OPS`, if set.
fn injected_power_cut() -> Option<Arc<cairn_device::emulated::PowerSwitch>> {
    static SWITCH: std::sync::OnceLock<Option<Arc<cairn_device::emulated::PowerSwitch>>> =
        std::sync::OnceLock::new();
    SWITCH
        .get_or_init(|| {
            let ops: u64 = std::env::var("CAIRN_INJECT_POWER_CUT_AFTER_OPS")
                .ok()?
                .parse()
                .ok()?;
            let seed: u64 = std::env::var("CAIRN_INJECT_SEED")
                .ok()
                .and_then(|text| text.parse().ok())
                .unwrap_or(0);
            let switch = Arc::new(cairn_device::emulated::PowerSwitch::with_seed(seed));
            switch.arm_after_ops(ops);
            eprintln!("cairn: fault injection: power cut after {ops} device operations");
            Some(switch)
        })
        .clone()
}

pub(crate) use cairn_pool::new_guid;

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
