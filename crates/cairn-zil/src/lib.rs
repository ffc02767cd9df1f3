//! # cairn-zil: the intent log
//!
//! Makes synchronous operations (NBD FLUSH and FUA, `sync=always`) durable in one log write plus
//! one flush instead of a whole txg sync. Sits above the object layer (it writes the chain header
//! into a dataset's object set) and below datasets (a volume logs every change it makes).
//!
//! Life of a record: a volume change is applied to the open txg and, at the same moment, appended
//! to one *lane* of the dataset's log as an in-memory record carrying the txg it joined (`log`).
//! Nothing is written until someone commits. `commit(ticket)` makes the lane's records up to the
//! ticket durable: one committer at a time per lane (the *builder*) takes everything pending —
//! so concurrent committers share blocks and device writes (group commit) — packs it into log
//! blocks and steps aside, then writes them; the next builder can write the following blocks
//! while the first are still in flight (the chain's next block was allocated in advance, so
//! nothing has to wait for an address). Log blocks are written with Force Unit Access: each run
//! of contiguous blocks is one device call that returns once its bytes are on stable media, so a
//! commit never flushes a whole device cache (nor waits behind a txg's writes in it), and
//! batches can overlap on the device, which a flush — one at a time, holding up the queue —
//! would not allow. A batch is acknowledged once its writes have completed *and* every earlier
//! batch of the lane is acknowledged, so callers are released in order. A builder takes at most
//! `batch_bytes_max`, so a slow commit cannot make the next one grow without bound, and a lone
//! committer never waits for company.
//!
//! Invariants:
//! - A ticket is reported durable only if its record is in a synced txg, or in a log block that
//!   was written durably (FUA) and is reachable from the chain header of a synced txg (a chain's
//!   first block is only used after the txg recording its header has synced).
//! - Records whose txg has synced are never written (they are already on disk) and are dropped.
//! - Log blocks are freed in the txg whose sync makes all their records redundant, and the
//!   header then moves past them in the same txg (see `sync_hook`). A free the allocator
//!   refuses (a block the space map does not show allocated) is no panic: it faults the
//!   allocator, and the txg sync then refuses to commit, suspending the pool
//!   (`SpaceAllocator::fault`).
//! - Any log write or flush failure, or a failure to allocate a log block, falls back to forcing
//!   a txg sync (which covers every record logged before it) and retires the chain; the next
//!   commit starts a fresh one. A commit therefore never reports success for data it could lose.
//! - Any such failure is reported to the txg engine (`TxgEngine::note_durability_failure`),
//!   whose `durability_epoch` tells front ends that changes not yet committed may have been
//!   lost (an NFS server's write verifier changes with it).
//!
//! Several lanes per dataset let one busy volume use several log devices at once; each lane is
//! an independent chain, and replay merges all lanes by (txg, sequence).
//!
//! Per-object records (`deferred.rs`): a record that only its own object's commit needs (a
//! file's data and attribute changes) may be logged with `log_deferred` instead of `log`; it
//! waits outside the lanes until that object is committed (`commit_object`, a file's fsync)
//! or everything is (`commit_all`), so committing one file does not write every other file's
//! data. Records logged with `log` (a filesystem's namespace changes, which other objects'
//! records may depend on) join a lane at once and go with every commit. A waiting write record
//! is dropped when a later one of its object covers its range, and the bytes waiting records
//! hold are counted and bounded (`ZilConfig::deferred_bytes_max`, `throttle_deferred`).

mod deferred;
mod lane;
mod replay;
mod stats;

pub use replay::{ReplayLog, read_log};
pub use stats::{ZilStats, ZilStatsSnapshot};

use bytes::Bytes;
use cairn_format::intent_log::{INTENT_LOG_HEADER_SIZE, INTENT_LOG_LANES_MAX};
use cairn_format::{BlockPointer, Dva, IntentLogHeader, LaneHead, LogRecordKind};
use cairn_object::ObjectSet;
use cairn_pipeline::BlockIo;
use cairn_pool::txg::TxgEngine;
use lane::Lane;
use parking_lot::Mutex;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use thiserror::Error;

/// Clone because a lane's failure is handed to every committer waiting on it; a cause that is
/// not text is shared behind an `Arc` for the same reason.
#[derive(Debug, Error, Clone)]
pub enum ZilError {
    /// The lane failed earlier (a committer before this one met the cause): every later
    /// committer gets its account, as text, from the lane's shared state.
    #[error("intent log of {dataset}: {reason}")]
    Failed { dataset: String, reason: String },
    /// The txg engine refused (suspended, or shut down) what the log needed from it.
    #[error("intent log of {dataset}: {what}")]
    Txg {
        dataset: String,
        what: String,
        #[source]
        source: cairn_pool::txg::TxgError,
    },
    /// The allocator gave no log block (`SpaceError::NoSpace`: the pool is full).
    #[error("intent log of {dataset}: allocating a log block")]
    Allocate {
        dataset: String,
        #[source]
        source: cairn_pool::space::SpaceError,
    },
    /// Reading the dataset's data for a record logged without it failed; the source is the
    /// dataset's own error (a device error stays one).
    #[error(
        "intent log of {dataset}: reading {len} bytes at offset {offset} of object {object} to log"
    )]
    SourceRead {
        dataset: String,
        object: u64,
        offset: u64,
        len: usize,
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl ZilError {
    /// Every failure to make a record durable is an I/O error to a client: the write itself
    /// was accepted, only its durability failed (ZFS answers a failed ZIL commit with EIO too).
    pub fn class(&self) -> cairn_device::ErrorClass {
        cairn_device::ErrorClass::Io
    }
}

/// What `LogSource::read_for_log` fails with: the dataset's own error, boxed because this crate
/// sits below the datasets and cannot name their type; the box keeps it whole (`source()`).
pub type LogSourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Tunables of one dataset's log.
#[derive(Debug, Clone, Copy)]
pub struct ZilConfig {
    /// Independent chains (1..=`INTENT_LOG_LANES_MAX`).
    pub lanes: usize,
    /// Most log bytes one builder takes into one batch.
    pub batch_bytes_max: usize,
    /// Synchronous writes up to this size are copied into their record at once (the commit is
    /// imminent); larger or asynchronous ones are read back from the volume when committed.
    pub copy_bytes_max: usize,
    /// A commit that finds at least this many bytes of write data pending in its lane (a FLUSH
    /// after a burst of asynchronous writes) forces a txg sync instead: the log would write
    /// the data now and the txg again later, the txg sync writes it once.
    pub bulk_sync_bytes: u64,
    /// A commit that finds at least this many bytes of log blocks held by its lane (written
    /// for txgs not synced yet), or an eighth of the pool's free space if less, asks for a txg
    /// sync, which releases them; at twice that it waits for one. Without it a stream of small commits between txg syncs could fill a
    /// small pool with log blocks, leaving no room for the replay that needs them.
    pub held_bytes_max: u64,
    /// Most bytes of data the per-object records waiting for their object's commit may hold
    /// (`deferred.rs`): past it the log asks for a txg sync (which drops the records it makes
    /// durable); past twice it writers wait for one (`IntentLog::throttle_deferred`). Write
    /// records covered by a later write of the same range are dropped at once, so this bounds
    /// what covering cannot drop: a dataset's waiting writes to distinct or partly overlapping
    /// ranges, mostly the dirty data's own buffers.
    pub deferred_bytes_max: u64,
}

impl Default for ZilConfig {
    fn default() -> Self {
        ZilConfig {
            lanes: 1,
            batch_bytes_max: 4 << 20,
            copy_bytes_max: 32 << 10,
            bulk_sync_bytes: 64 << 20,
            held_bytes_max: 512 << 20,
            deferred_bytes_max: 128 << 20,
        }
    }
}

/// Where the data of a logged write comes from when the record is committed.
#[derive(Debug, Clone)]
pub enum ItxData {
    /// Copied when the change was made.
    Copied(Bytes),
    /// Read back from the dataset when committed (its newest contents: never older than the
    /// record).
    NeedCopy,
    /// Written in place (`LogRecordKind::WriteInPlace`): the block's pointer.
    Pointer(BlockPointer),
    /// Zeroing and trimming carry no data.
    None,
}

/// Reads a dataset's current contents for records logged without their data.
pub trait LogSource {
    fn read_for_log(&self, object: u64, offset: u64, buf: &mut [u8]) -> Result<(), LogSourceError>;
}

/// Identifies one logged record: commit it to make it durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    lane: u32,
    number: u64,
    txg: u64,
}

/// One operation to log.
#[derive(Debug, Clone)]
pub struct LogOp {
    pub kind: LogRecordKind,
    pub txg: u64,
    pub object: u64,
    pub offset: u64,
    pub length: u64,
    pub data: ItxData,
}

/// The intent log of one dataset.
pub struct IntentLog {
    dataset: String,
    pool_guid: u64,
    io: Arc<BlockIo>,
    txg: Arc<TxgEngine>,
    objset: Arc<ObjectSet>,
    config: ZilConfig,
    next_sequence: AtomicU64,
    lanes: Vec<Lane>,
    /// Per-object records waiting for their object's commit (see `deferred.rs`).
    deferred: deferred::Deferred,
    heads: Mutex<Heads>,
    /// `logbias=latency` (true): log blocks go to log devices when there are any;
    /// `throughput` (false): they stay on the pool's disks, leaving the log devices to datasets
    /// that wait on them.
    use_log_devices: AtomicBool,
    pub stats: ZilStats,
}

struct Heads {
    lanes: Vec<LaneHead>,
    /// The header last handed to the object set.
    written: [u8; INTENT_LOG_HEADER_SIZE],
}

impl IntentLog {
    /// A log with no chains. The dataset's on-disk log must have been replayed and reset
    /// (`read_log` + an empty header) before: this log starts new chains with fresh guids.
    pub fn new(
        dataset: String,
        pool_guid: u64,
        io: Arc<BlockIo>,
        txg: Arc<TxgEngine>,
        objset: Arc<ObjectSet>,
        config: ZilConfig,
    ) -> IntentLog {
        let lanes = config.lanes.clamp(1, INTENT_LOG_LANES_MAX);
        let written = objset.synced_intent_log_header();
        IntentLog {
            dataset,
            pool_guid,
            io,
            txg,
            objset,
            config: ZilConfig { lanes, ..config },
            next_sequence: AtomicU64::new(1),
            lanes: (0..lanes as u32).map(Lane::new).collect(),
            deferred: deferred::Deferred::default(),
            heads: Mutex::new(Heads {
                lanes: vec![LaneHead::default(); lanes],
                written,
            }),
            use_log_devices: AtomicBool::new(true),
            stats: ZilStats::default(),
        }
    }

    /// Applies `logbias`: `latency` uses log devices, `throughput` keeps this dataset's log
    /// blocks on the pool's disks. Takes effect from the next block allocated.
    pub fn set_use_log_devices(&self, use_log_devices: bool) {
        self.use_log_devices
            .store(use_log_devices, Ordering::Relaxed);
    }

    /// Whether the whole blocks of synchronous writes go to their final place, with only their
    /// pointers logged: under `logbias=throughput`, which writes every byte once. Under
    /// `latency` they are copied into the log, on the pool's disks too: measured on the
    /// emulated 7200 rpm disk, 1 MiB FUA writes at QD1 ran at 41 IOPS copied into the log (one
    /// sequential write; the txg writes the data later, in the background) and at 33 written
    /// in place (the data write, then a seek to the log for the record), so writing in place
    /// trades latency for bandwidth, which is what `throughput` asks for (BENCHMARKS.md).
    pub fn writes_in_place(&self) -> bool {
        !self.use_log_devices.load(Ordering::Relaxed)
    }

    pub fn dataset(&self) -> &str {
        &self.dataset
    }

    pub fn config(&self) -> &ZilConfig {
        &self.config
    }

    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    /// Appends a record to lane `lane_hint % lanes`. Call while holding the txg `op.txg`, right
    /// after making the change, so the record is never older than the change it describes.
    pub fn log(&self, lane_hint: usize, op: LogOp) -> Ticket {
        let lane = &self.lanes[lane_hint % self.lanes.len()];
        let sequence = self.next_sequence.fetch_add(1, Ordering::Relaxed);
        self.stats.count_record(&op);
        let synced = self.txg.last_synced_txg();
        lane.append(sequence, op, synced)
    }

    /// Logs a record that only a commit of its own object (`op.object`) needs, or a commit of
    /// everything: it waits outside the lanes until then (see `deferred.rs`), and is dropped
    /// unwritten if its txg syncs first or the object is freed (`forget_object`). Call as
    /// `log`: inside the hold of `op.txg`, right after the change. Its sequence number is drawn
    /// now, so replay applies it where the change was made, whenever it was committed.
    ///
    /// A write record drops the earlier waiting write records of its object whose range it
    /// covers (`deferred.rs`). When the waiting records hold `deferred_bytes_max` or more,
    /// a txg sync is asked for (without waiting: the caller holds a txg).
    pub fn log_deferred(&self, lane_hint: usize, op: LogOp) {
        self.stats.count_record(&op);
        self.stats.records_deferred.fetch_add(1, Ordering::Relaxed);
        let pushed = self.deferred.push(lane_hint, op, || {
            self.next_sequence.fetch_add(1, Ordering::Relaxed)
        });
        if pushed.superseded > 0 {
            self.stats
                .deferred_superseded
                .fetch_add(pushed.superseded, Ordering::Relaxed);
        }
        if pushed.held_bytes >= self.config.deferred_bytes_max {
            self.txg.request_sync();
        }
    }

    /// Holds a writer back while the per-object records waiting hold twice
    /// `deferred_bytes_max` or more: waits for the open txg to sync, which drops every record
    /// logged before (they are durable then). Call after a change that logged with
    /// `log_deferred`, holding no txg. A refused sync (a suspended pool) ends the wait: the
    /// writer's next change meets the refusal itself.
    pub fn throttle_deferred(&self) {
        let (held_bytes, _) = self.deferred.held_bytes();
        if held_bytes < self.config.deferred_bytes_max.saturating_mul(2) {
            return;
        }
        self.stats
            .deferred_throttles
            .fetch_add(1, Ordering::Relaxed);
        let txg = self.txg.open_txg();
        if self.txg.wait_synced(txg).is_ok() {
            self.txg_synced(txg);
        }
    }

    /// Drops the per-object records of txgs up to `txg`, which is durable now (the engine
    /// calls it once a txg's uberblock is on disk; the next txg's `sync_hook` would drop them
    /// too, but that may be a txg timeout later, with their buffers held meanwhile).
    pub fn txg_synced(&self, txg: u64) {
        let dropped = self.deferred.drop_synced(txg);
        self.stats
            .deferred_dropped
            .fetch_add(dropped, Ordering::Relaxed);
    }

    /// Returns once the record of `ticket` (and every earlier record of its lane) is on stable
    /// media.
    pub fn commit(&self, ticket: Ticket, source: &dyn LogSource) -> Result<(), ZilError> {
        if ticket.txg <= self.txg.last_synced_txg() {
            return Ok(());
        }
        let lane = &self.lanes[ticket.lane as usize];
        self.commit_lane(lane, ticket.number, source)
    }

    /// Makes durable every record of object `object` and every record logged with `log` so
    /// far, on every lane (a file's fsync: its changes and the names that reach it), but not
    /// other objects' deferred records.
    pub fn commit_object(
        &self,
        object: u64,
        source: &(dyn LogSource + Sync),
    ) -> Result<(), ZilError> {
        self.move_deferred(Some(object));
        self.commit_lanes(source)
    }

    /// Makes every record logged so far durable, deferred ones included (an NBD FLUSH, a
    /// filesystem's syncfs).
    pub fn commit_all(&self, source: &(dyn LogSource + Sync)) -> Result<(), ZilError> {
        self.move_deferred(None);
        self.commit_lanes(source)
    }

    /// Drops every deferred record of `object`: it was freed, so nothing can commit them (nor
    /// would replay need them: the object is gone once its removal replays).
    pub fn forget_object(&self, object: u64) {
        let dropped = self.deferred.forget(object);
        self.stats
            .deferred_dropped
            .fetch_add(dropped, Ordering::Relaxed);
    }

    /// Deferred records waiting for their object's commit, all objects.
    pub fn deferred_records(&self) -> u64 {
        self.deferred.len()
    }

    /// Bytes of data the deferred records hold now, and the most they have held.
    pub fn deferred_held_bytes(&self) -> (u64, u64) {
        self.deferred.held_bytes()
    }

    /// Appends the deferred records of `object` (`None`: of every object) to their lanes,
    /// under the deferred lock (see `deferred.rs` for why it is held until they are in).
    fn move_deferred(&self, object: Option<u64>) {
        let synced = self.txg.last_synced_txg();
        let (mut taken, dropped) = self.deferred.take(object, synced);
        self.stats
            .deferred_dropped
            .fetch_add(dropped, Ordering::Relaxed);
        self.stats
            .deferred_committed
            .fetch_add(taken.records.len() as u64, Ordering::Relaxed);
        for record in std::mem::take(&mut taken.records) {
            let lane = &self.lanes[record.lane_hint % self.lanes.len()];
            lane.append(record.sequence, record.op, synced);
        }
        drop(taken);
    }

    /// Makes every record now in a lane durable: each lane up to its newest record.
    fn commit_lanes(&self, source: &(dyn LogSource + Sync)) -> Result<(), ZilError> {
        let targets: Vec<(usize, u64)> = self
            .lanes
            .iter()
            .enumerate()
            .filter_map(|(index, lane)| lane.newest_undurable().map(|ticket| (index, ticket)))
            .collect();
        match targets.len() {
            0 => Ok(()),
            1 => self.commit_lane(&self.lanes[targets[0].0], targets[0].1, source),
            _ => std::thread::scope(|scope| {
                let handles: Vec<_> = targets
                    .iter()
                    .map(|&(index, ticket)| {
                        scope.spawn(move || self.commit_lane(&self.lanes[index], ticket, source))
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|handle| handle.join().expect("lane commit panicked"))
                    .collect::<Result<Vec<()>, ZilError>>()
                    .map(|_| ())
            }),
        }
    }

    /// Called by the txg sync thread for txg `txg`, before the dataset's object set is synced:
    /// frees the log blocks whose records are all in `txg` or older (they become redundant
    /// exactly when `txg` is durable) and moves the chain header past them, in `txg`.
    pub fn sync_hook(&self, txg: u64) {
        // Deferred records of txgs already durable (not `txg`'s: it is only being synced).
        let dropped = self.deferred.drop_synced(self.txg.last_synced_txg());
        self.stats
            .deferred_dropped
            .fetch_add(dropped, Ordering::Relaxed);
        for lane in &self.lanes {
            let (released, head) = lane.release_through(txg);
            if !released.is_empty() {
                let mut space = self.io.space().lock();
                for dva in &released {
                    // A refused free becomes the allocator's fault, and the txg being synced
                    // will not commit (the pool suspends): see `SpaceAllocator::fault`.
                    let _ = space.free(dva, txg);
                }
                self.stats
                    .blocks_freed
                    .fetch_add(released.len() as u64, Ordering::Relaxed);
            }
            self.set_head(lane.index(), head, txg);
        }
    }

    /// Frees every log block and empties the chain header, in `txg` (held by the caller or
    /// being synced). For a clean close, after every record has reached a synced txg, and for
    /// dataset destroy. Pending records are dropped; the next commit starts a new chain.
    pub fn release_all(&self, txg: u64) {
        drop(self.deferred.take(None, u64::MAX));
        {
            let mut space = self.io.space().lock();
            for lane in &self.lanes {
                for dva in lane.take_all_blocks() {
                    if space.is_allocated(&dva) {
                        let _ = space.free(&dva, txg);
                    }
                }
            }
        }
        for lane in &self.lanes {
            self.set_head(lane.index(), LaneHead::default(), txg);
        }
    }

    /// Ends every lane's chain after making all its records durable with a txg sync: the
    /// chains' blocks, and the next blocks they had allocated in advance, are freed once that
    /// txg is durable, and the next commit starts a new chain wherever log blocks go then
    /// (`pool remove` of a log device empties it this way).
    pub fn restart_chains(&self) -> Result<(), ZilError> {
        for lane in &self.lanes {
            if lane.has_chain() {
                self.restart_chain(lane)?;
            }
        }
        Ok(())
    }

    /// Every log block this log holds now, all lanes (see `Lane::held_blocks`). On a live pool
    /// some of them are not reachable from the synced chain header yet (in flight, or the
    /// next block of a batch being written), yet allocated in a synced txg: `check` counts
    /// them as the log's, not as leaks.
    pub fn held_blocks(&self) -> Vec<Dva> {
        self.lanes.iter().flat_map(Lane::held_blocks).collect()
    }

    /// True when some lane has a chain (blocks allocated for this log).
    pub fn has_chains(&self) -> bool {
        self.heads.lock().lanes.iter().any(|head| !head.is_empty())
            || self.lanes.iter().any(Lane::has_blocks)
    }

    pub fn stats_snapshot(&self) -> ZilStatsSnapshot {
        let (held_bytes, held_peak_bytes) = self.deferred.held_bytes();
        ZilStatsSnapshot {
            deferred_held_bytes: held_bytes,
            deferred_held_peak_bytes: held_peak_bytes,
            ..self.stats.snapshot(self.lanes.len())
        }
    }

    /// Latency of every commit so far, in microseconds.
    pub fn commit_latency_us(&self) -> hdrhistogram::Histogram<u64> {
        self.stats.commit_latency_us()
    }

    /// Records lane `lane`'s head for the header of txg `txg` (the object set becomes dirty in
    /// `txg` only if the header changed).
    fn set_head(&self, lane: u32, head: LaneHead, txg: u64) {
        let mut heads = self.heads.lock();
        heads.lanes[lane as usize] = head;
        let header = IntentLogHeader {
            lanes: heads.lanes.clone(),
        };
        let encoded = if header.is_empty() {
            [0u8; INTENT_LOG_HEADER_SIZE]
        } else {
            header.encode()
        };
        if encoded != heads.written {
            self.objset.set_intent_log_header(txg, encoded);
            heads.written = encoded;
        }
    }

    fn txg_failed(&self, what: &str, source: cairn_pool::txg::TxgError) -> ZilError {
        ZilError::Txg {
            dataset: self.dataset.clone(),
            what: what.to_string(),
            source,
        }
    }

    fn failed(&self, reason: impl Into<String>) -> ZilError {
        ZilError::Failed {
            dataset: self.dataset.clone(),
            reason: reason.into(),
        }
    }

    /// Allocates a log block of `size_bytes` in the open txg; returns it and a hold on that
    /// txg, which the caller keeps until the block that points to the new one is on media (see
    /// `lane::build::Built::txg_holds`).
    fn allocate_block(&self, size_bytes: u32) -> Result<(Dva, cairn_pool::txg::TxgHold), ZilError> {
        let hold = self
            .txg
            .try_hold()
            .map_err(|err| self.txg_failed("holding the open txg", err))?;
        let txg = hold.txg();
        Ok((self.allocate_in(size_bytes, txg)?, hold))
    }

    /// A log block of `size_bytes` for txg `txg` (held by the caller): on a log device when one
    /// can take it (and `logbias` allows), else on the pool's disks. A log device that has
    /// failed is skipped.
    pub(crate) fn allocate_in(&self, size_bytes: u32, txg: u64) -> Result<Dva, ZilError> {
        let mut space = self.io.space().lock();
        let failed = |source: cairn_pool::space::SpaceError| ZilError::Allocate {
            dataset: self.dataset.clone(),
            source,
        };
        if !self.use_log_devices.load(Ordering::Relaxed) {
            return space.allocate_log_on_pool(size_bytes, txg).map_err(failed);
        }
        let dva = space.allocate_log(size_bytes, txg).map_err(failed)?;
        let usable = self
            .io
            .tree()
            .top_for_dva(&dva)
            .is_some_and(|top| top.health() != cairn_pool::vdev::Health::Unavail);
        if usable {
            return Ok(dva);
        }
        space.unallocate(&dva, txg).map_err(failed)?;
        space.allocate_log_on_pool(size_bytes, txg).map_err(failed)
    }
}

/// Bytes read back for the log block allocated as `dva`: all of its allocation, at most
/// `LOG_BLOCK_SIZE_MAX`. On a raidz vdev a raw block is a stripe whose length both sides must
/// agree on, so the writer pads each block to exactly this length (`BlockIo::raw_capacity`
/// is at least the size asked for, which is at most `LOG_BLOCK_SIZE_MAX`).
pub(crate) fn log_block_len(io: &cairn_pipeline::BlockIo, dva: &cairn_format::Dva) -> usize {
    io.raw_capacity(dva)
        .min(cairn_format::intent_log::LOG_BLOCK_SIZE_MAX as usize)
}
