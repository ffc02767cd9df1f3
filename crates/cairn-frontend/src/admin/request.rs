//! The typed face of the administration library: one `AdminRequest` per operation a server
//! (or a front end without one) can do, and the typed `AdminReply` it answers with. The control
//! socket carries these as they are; the CLI builds requests from what it parsed and renders
//! replies; later front ends (the page, a REST API) do the same with their own inputs.
//!
//! Invariants: requests are self-contained (every path absolute, resolved by the front end
//! against its own working directory; names are names, not paths) and carry no front end's
//! types (no clap, no formatting options: how a reply is shown is the front end's business).
//! Replies carry data, never rendered text. What a person should be told while a request
//! ran (a pool skipped because it cannot be opened) travels beside the reply as notes.

use super::PoolRemoval;
use super::dataset_rows::PoolDatasets;
use super::import_request::{ImportOutcome, ImportRequest};
use super::mirrors::{Cleared, MirrorChange, MirrorOutcome};
use super::samples::{ArcSample, DatasetIoSample, DeviceIoSample, L2arcSample};
use super::stats::{FsSample, IoSample, MemorySample, NfsSample, SnapshotSample, ZilSample};
use super::views::PoolViews;
use crate::fuse::Unmounted;
use cairn_dataset::ScrubRecord;
use cairn_engine::CheckReport;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One administrative operation, with its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AdminRequest {
    /// Every served dataset's cumulative traffic (server only).
    DatasetIo,
    /// Every device's cumulative I/O counters of `pools` (every pool when empty; server only).
    DeviceIo { pools: Vec<String> },
    /// The RAM cache's counters and sizes.
    ArcCounters,
    /// The SSD tier's counters of `pools` (every pool when empty).
    L2arcCounters { pools: Vec<String> },
    /// A change of a pool's devices, or of the pool itself.
    Pool(PoolChange),
    /// A change of a dataset.
    Dataset(DatasetChange),
    /// Write out the dirty data of `pools` (every pool when empty) now.
    SyncPools { pools: Vec<String> },
    /// The commands that changed `pool`.
    History { pool: String },
    /// The recent txgs' timings of `pool` (kept by the process that has it open).
    Txgs { pool: String },
    /// The cache limits and where the cache stands, as settings of `pool`.
    CacheLimits { pool: String },
    /// `pool status`/`pool list`: a look at `pools` (every remembered pool when empty).
    PoolViews { pools: Vec<String> },
    /// `list`/`get`: the datasets of `pools` (every remembered pool when empty; then pools that
    /// cannot be opened are skipped with a note).
    Datasets { pools: Vec<String> },
    /// A change of mirror sides.
    Mirror(MirrorChange),
    /// Reset `pool`'s error counters; returning sides are resilvered.
    Clear {
        pool: String,
        rate_bytes_per_s: Option<u64>,
    },
    /// Verify every copy of every block of `pool`, repairing bad copies.
    Scrub { pool: String },
    /// Find pools on devices, import one, or preview its rewind.
    Import(ImportRequest),
    /// Check `pool` (imported, or with `dirs` an exported one found there).
    Check { pool: String, dirs: Vec<PathBuf> },
    /// Mount filesystem `dataset` (server only) at `mountpoint` (absolute; its property when
    /// `None`) with mount `options` (comma-separated).
    Mount {
        dataset: String,
        mountpoint: Option<PathBuf>,
        options: String,
    },
    /// Unmount a filesystem this server mounted: a dataset name or an absolute mountpoint.
    Unmount { target: String },
    /// `stat zil`: intent logs and log devices of `pools` (every pool when empty).
    ZilStats { pools: Vec<String> },
    /// `stat io`: pipeline and device counters of `pools` (every pool when empty).
    IoStats { pools: Vec<String> },
    /// `stat fs`: the mounted filesystems of `pools` (every pool when empty).
    FsStats { pools: Vec<String> },
    /// `stat memory`: the memory budget and resident memory.
    MemoryStats,
    /// `stat snapshots`: snapshot counters of `pools` (every pool when empty).
    SnapshotStats { pools: Vec<String> },
    /// `stat nfs`: the NFS server's calls, bytes, commits, refusals and clients.
    NfsStats,
    /// The user holds of snapshots `names`.
    Holds { names: Vec<String> },
    /// `destroy -n`: what destroying snapshots `name` (`dataset@snap` or a range
    /// `dataset@first%last`) would destroy and free.
    DestroyPreview { name: String },
    /// `written@snapshot` of `dataset`: what its head references that its `snapshot` does
    /// not.
    WrittenSince { dataset: String, snapshot: String },
    /// `digest` of snapshot `snapshot` (`dataset@snap`; see `Pool::snapshot_digest`).
    SnapshotDigest { snapshot: String },
    /// `diff --blocks`: the byte ranges of a volume that differ between its snapshot `older`
    /// and `newer`, a later snapshot of it or the volume itself (its live contents).
    DiffBlocks { older: String, newer: String },
    /// `diff` of a filesystem: the paths created, removed, renamed and changed between its
    /// snapshot `older` and `newer`, a later snapshot, the filesystem itself, or a clone
    /// descended from it.
    DiffFiles { older: String, newer: String },
    /// `send`: snapshot `snapshot` as a send stream, incremental `from` an older snapshot or
    /// bookmark. Needs the stream's destination (`admin::handle_stream`).
    Send {
        snapshot: String,
        from: Option<String>,
        /// `-c`: blocks stored compressed go as stored.
        #[serde(default)]
        compressed: bool,
    },
    /// `receive`: a send stream into `target`. Needs the stream's source
    /// (`admin::handle_stream`). `corrective` (`-c`): `target` is a snapshot the stream heals
    /// (`Pool::receive_corrective`). `resumable` (`-s`): a cut receive keeps what it applied,
    /// with a resume token.
    Receive {
        target: String,
        force: bool,
        #[serde(default)]
        corrective: bool,
        #[serde(default)]
        resumable: bool,
    },
    /// `send -t`: the rest of the stream a resume token names, from the pool `pool` or else
    /// whichever pool holds its snapshot. Needs the stream's destination.
    SendResumed { token: String, pool: Option<String> },
    /// `send -n`: the exact size `send` would write (`SendOptions::count_only`), nothing
    /// sent; answered with `Sent`.
    SendSize {
        snapshot: String,
        from: Option<String>,
        compressed: bool,
    },
    /// `receive -A`: abandons the partial receive into `target`.
    AbandonReceive { target: String },
    /// The resume token of a partial receive into `target` (which may not exist yet: a
    /// full stream's receive makes it at the end).
    ResumeToken { target: String },
    /// `send -R`, `-I`, `-p`: snapshot `snapshot` as a package (a tree, intermediate
    /// snapshots, properties; `cairn_engine::Pool::send_package`). Needs the stream's
    /// destination.
    SendPackage {
        snapshot: String,
        from: Option<String>,
        intermediates: bool,
        recursive: bool,
        properties: bool,
    },
}

impl AdminRequest {
    /// Whether the request reads or writes a stream the front end hands over with it.
    pub fn takes_stream(&self) -> bool {
        matches!(
            self,
            AdminRequest::Send { .. }
                | AdminRequest::Receive { .. }
                | AdminRequest::SendResumed { .. }
                | AdminRequest::SendPackage { .. }
        )
    }
}

/// A change of a pool (`AdminRequest::Pool`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum PoolChange {
    Create {
        pool: String,
        layout: VdevLayout,
        /// Create missing device files (sparse) of this size.
        create_size_bytes: Option<u64>,
        /// Use devices that hold data or another pool's label (never an imported pool's).
        force: bool,
        ashift: Option<u8>,
        /// Properties of the pool's root dataset.
        root_properties: Vec<(String, String)>,
    },
    /// Log vdevs and cache devices only.
    Add {
        pool: String,
        layout: VdevLayout,
        create_size_bytes: Option<u64>,
        force: bool,
    },
    /// A log vdev or a cache device, as `pool status` names it.
    Remove {
        pool: String,
        device: String,
    },
    Export {
        pool: String,
    },
    /// With `force`, a pool that cannot be opened is forgotten.
    Destroy {
        pool: String,
        force: bool,
    },
    /// `arc_max` or `arc_min` (the process's cache, shared by every pool), a size.
    SetCacheLimit {
        pool: String,
        property: String,
        value: String,
    },
}

/// A change of a dataset (`AdminRequest::Dataset`), named `POOL/NAME`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DatasetChange {
    CreateVolume {
        dataset: String,
        size_bytes: u64,
        /// No reservation of the full size.
        sparse: bool,
        properties: Vec<(String, String)>,
    },
    CreateFilesystem {
        dataset: String,
        properties: Vec<(String, String)>,
    },
    Destroy {
        dataset: String,
    },
    Set {
        dataset: String,
        assignments: Vec<(String, String)>,
    },
    /// Snapshots `dataset@name`, all of one pool, taken in one txg; with `recursive` also of
    /// every descendant of each dataset.
    Snapshot {
        names: Vec<String>,
        recursive: bool,
    },
    /// `destroy -d`: destroy `snapshot` now, or when its last user hold is released.
    DestroyDeferred {
        snapshot: String,
    },
    /// Place (`release`: false) or release user hold `tag` on every snapshot of `names`.
    Hold {
        tag: String,
        names: Vec<String>,
        release: bool,
    },
    /// Create dataset `target` as a clone of snapshot `origin`, with creation properties.
    Clone {
        origin: String,
        target: String,
        properties: Vec<(String, String)>,
    },
    /// Bookmark `target` (`dataset#name`) of snapshot or bookmark `source`.
    Bookmark {
        source: String,
        target: String,
    },
    /// Promote clone `dataset`: its origin and older snapshots become its own.
    Promote {
        dataset: String,
    },
    /// `destroy -R`: destroy `snapshot` and every clone depending on it (with their
    /// snapshots and clones).
    DestroyDependents {
        snapshot: String,
    },
    /// Roll `snapshot`'s dataset back to it; `destroy_newer` destroys newer snapshots first,
    /// `force` rolls a volume back under its NBD clients.
    Rollback {
        snapshot: String,
        destroy_newer: bool,
        force: bool,
    },
}

/// Vdevs as a pool is made of them: groups (data or log, single or mirror) and cache devices,
/// each device as `DeviceSpec` writes it (`PATH` or `emu:MODEL:PATH`, the path absolute).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VdevLayout {
    pub groups: Vec<GroupLayout>,
    pub cache: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupLayout {
    pub mirror: bool,
    /// A raidz group's parity (absent in requests of builds without raidz).
    #[serde(default)]
    pub raidz_parity: Option<u8>,
    pub log: bool,
    pub devices: Vec<String>,
}

/// One synced txg's timings (`pool txgs`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TxgRow {
    pub txg: u64,
    /// What closed it, as the engine names it (`Timeout`, `DirtyLimit`, ...).
    pub trigger: String,
    pub dirty_bytes: u64,
    pub holds_count: u64,
    pub open_us: u64,
    pub quiesce_us: u64,
    pub sync_us: u64,
    pub writer_delays_count: u64,
    pub writer_delay_ns_total: u64,
    pub writers_blocked_count: u64,
    /// Sync time reserved on the txg for commands' work (its writers got that much less).
    pub reserved_us: u64,
    /// Of `sync_us`, what went to background frees and to dataset commands (estimates).
    pub background_us: u64,
    pub command_us: u64,
}

/// What an operation produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum AdminReply {
    /// Done; nothing to show.
    Done,
    DatasetIo(DatasetIoSample),
    DeviceIo(DeviceIoSample),
    ArcCounters(ArcSample),
    L2arcCounters(L2arcSample),
    /// Devices added to a pool, as the pool names them.
    Added(Vec<String>),
    /// A log vdev (`what`: "log device") or cache device removed.
    DeviceRemoved {
        what: String,
        device: String,
    },
    /// A pool exported or destroyed, or only forgotten.
    Removed(PoolRemoval),
    /// A cache limit set; `served`: by a server (else it lasts for this process only).
    CacheLimitSet {
        served: bool,
    },
    /// History entries, oldest first (`MILLISECONDS COMMAND` each).
    History(Vec<String>),
    Txgs(Vec<TxgRow>),
    PoolViews(PoolViews),
    Datasets(Vec<PoolDatasets>),
    /// Snapshots taken, by full name.
    Snapshots(Vec<String>),
    /// User holds: (snapshot, tag, placed at ms since the epoch).
    Holds(Vec<(String, String, u64)>),
    /// A byte count.
    Bytes(u64),
    /// A snapshot's digest (64 hex digits).
    Digest(String),
    /// A partial receive's resume token, or none.
    ResumeToken(Option<String>),
    /// What a destroy would do: the snapshots, and the bytes it would free.
    DestroyPreview {
        names: Vec<String>,
        bytes: u64,
    },
    /// What `diff --blocks` found.
    BlockDiff(BlockDiffReply),
    /// What `diff` of a filesystem found.
    FileDiff(super::FileDiffReply),
    Mirror(MirrorOutcome),
    Cleared(Cleared),
    Scrubbed(ScrubRecord),
    Import(ImportOutcome),
    Checked(CheckReport),
    /// Mounted at this path.
    Mounted(PathBuf),
    Unmounted(Unmounted),
    ZilStats(ZilSample),
    IoStats(IoSample),
    FsStats(Vec<FsSample>),
    MemoryStats(MemorySample),
    SnapshotStats(SnapshotSample),
    NfsStats(NfsSample),
    Sent(SendReport),
    Received(ReceiveReport),
    /// What a corrective receive healed.
    Healed(HealReport),
}

/// What a corrective receive did (`cairn_engine::CorrectiveSummary`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealReport {
    /// `dataset@snapshot`.
    pub snapshot: String,
    pub bytes_read: u64,
    /// Stream blocks that are the snapshot's blocks at their place.
    pub blocks_checked: u64,
    /// Blocks no copy could give back, rewritten from the stream.
    pub blocks_healed: u64,
    /// Stream blocks that are not what the snapshot holds there (not used).
    pub blocks_mismatched: u64,
}

impl From<cairn_engine::CorrectiveSummary> for HealReport {
    fn from(summary: cairn_engine::CorrectiveSummary) -> HealReport {
        HealReport {
            snapshot: summary.snapshot,
            bytes_read: summary.bytes_read,
            blocks_checked: summary.blocks_checked,
            blocks_healed: summary.blocks_healed,
            blocks_mismatched: summary.blocks_mismatched,
        }
    }
}

/// What a send wrote (`cairn_engine::SendSummary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendReport {
    pub bytes_written: u64,
    pub objects: u64,
    pub blocks_written: u64,
    /// Metadata blocks an incremental walk read to find the change.
    pub blocks_visited: u64,
}

impl From<cairn_engine::SendSummary> for SendReport {
    fn from(summary: cairn_engine::SendSummary) -> SendReport {
        SendReport {
            bytes_written: summary.bytes_written,
            objects: summary.objects,
            blocks_written: summary.blocks_written,
            blocks_visited: summary.blocks_visited,
        }
    }
}

/// What a receive made (`cairn_engine::ReceiveSummary`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiveReport {
    /// `dataset@snapshot`.
    pub snapshot: String,
    pub bytes_read: u64,
    pub objects: u64,
    pub blocks_written: u64,
}

impl From<cairn_engine::ReceiveSummary> for ReceiveReport {
    fn from(summary: cairn_engine::ReceiveSummary) -> ReceiveReport {
        ReceiveReport {
            snapshot: summary.snapshot,
            bytes_read: summary.bytes_read,
            objects: summary.objects,
            blocks_written: summary.blocks_written,
        }
    }
}

/// The byte ranges of a volume that differ between two of its versions
/// (`AdminRequest::DiffBlocks`; see `cairn_engine::BlockDiff`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDiffReply {
    /// (offset, length) in bytes: ascending, disjoint, adjacent ones merged.
    pub ranges: Vec<(u64, u64)>,
    /// Blocks the walk read or reported: its cost, which follows the change.
    pub blocks_visited: u64,
    pub volsize_bytes: u64,
    pub volblocksize_bytes: u32,
}

/// A reply with the notes collected while it was made (one line each, without a program
/// name: a front end adds its own prefix).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answer {
    pub reply: AdminReply,
    pub notes: Vec<String>,
}

impl Answer {
    pub fn new(reply: AdminReply) -> Answer {
        Answer {
            reply,
            notes: Vec::new(),
        }
    }
}
