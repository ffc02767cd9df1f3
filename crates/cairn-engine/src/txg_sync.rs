//! The pool's side of a txg sync (`PoolSyncer`): what `cairn-pool`'s `TxgEngine` calls for
//! every txg, on its sync thread (the engine's side, which decides when, lives beside the txg
//! engine in `cairn-pool/src/txg/sync.rs`).
//!
//! Order matters and is the whole crash-safety argument:
//! 1. sync tasks (directory changes) run first, so the directory written is this txg's;
//! 2. dataset object sets, then the snapshot table (dead blocks onto deadlists, this txg's
//!    snapshots taken from the new roots: `snapshot_sync.rs`), then the directory's records
//!    that changed (each a map value: one dataset's change rewrites its record, not the
//!    directory), then the MOS are rewritten copy-on-write;
//! 3. the space log records every allocation and free of the txg — including the space-log
//!    block's own allocation, which is why its copies are allocated before it is encoded;
//! 4. every write is waited for and every leaf flushed *before* the uberblock is written, and
//!    flushed again after: the uberblock never points at blocks that might not be on media;
//! 5. only then do readers see the new trees (`publish`) and deferred frees move on; while
//!    some are still deferred, the syncer asks for follow-up txgs, so an idle pool syncs empty
//!    txgs on the txg timeout until its freed space is reusable.
//!
//! A txg is never committed while the space allocator is faulted (it refused a free: a block
//! pointer disagrees with the space map, see `SpaceAllocator::fault`): the sync fails before the
//! uberblock, which suspends the pool (`TxgEngine`): nothing more is written, the last committed
//! txg stays the pool's state, and `pool status` shows the reason.
//!
//! The space log is a chain of blocks, newest first. Every `SPACE_LOG_CHAIN_BLOCKS_MAX` blocks it
//! is condensed into a checkpoint (the whole allocated set) and the old chain is freed, which
//! bounds both its size and the work of replaying it at import.

use crate::EngineError;
use crate::core::{DIRECTORY, PoolCore};
use crate::snapshot_sync::SyncedDataset;
use bytes::Bytes;
use cairn_dataset::LeafErrorRecord;
use cairn_device::queue::IoClass;
use cairn_format::spacelog::{SPACE_LOG_ENTRIES_PER_BLOCK, SpaceLogBlock, SpaceLogKind};
use cairn_format::{
    BlockPointer, ChecksumAlgorithm, FORMAT_VERSION, ObjectType, SpaceLogEntry, Uberblock,
};
use cairn_pipeline::{WriteBatch, WriteProps};
use cairn_pool::labels::{LABEL_HALVES, commit_uberblock, write_pool_config_half};
use cairn_pool::txg::{SyncError, TxgSyncer};
use cairn_pool::vdev::VdevTree;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A txg that wrote at least this much has its freed dirty buffers handed back to the kernel
/// once writing pauses, unless the cache has room for them (`ReadCache::note_heap_freed`).
const HEAP_TRIM_AFTER_BYTES: u64 = 1 << 20;
/// Granule space-log blocks are rounded to.
const SPACE_LOG_GRANULE: u32 = 4096;

pub(crate) struct PoolSyncer(pub(crate) Arc<PoolCore>);

impl TxgSyncer for PoolSyncer {
    /// The engine's error goes up whole: the suspension it causes keeps it as its source, so
    /// clients of a suspended pool can still be told what failed.
    fn sync_txg(&self, txg: u64) -> Result<(), SyncError> {
        self.0.sync(txg).map_err(SyncError::from)
    }

    /// Freed space waits `DEFER_TXGS` txgs before it is reusable: on an idle pool those txgs
    /// would never come, and ALLOC + FREE would stay short of SIZE until export.
    fn wants_followup_txg(&self) -> bool {
        self.0.space.lock().has_releasable_deferred()
    }

    /// A destroy's background frees: a bounded share per txg, txgs following each other.
    fn has_background_work(&self) -> bool {
        self.0.snapshots.lock().has_background_frees()
    }

    /// The estimate `free_pacing.rs` makes of what the frees cost the last sync.
    fn background_sync_us(&self) -> u64 {
        self.0.free_pacing.lock().background_sync_us()
    }

    /// What `command_pacing.rs` measured the last sync's commands to take.
    fn command_sync_us(&self) -> u64 {
        self.0.command_pacing.lock().command_sync_us()
    }
}

fn space_log_props() -> WriteProps {
    WriteProps {
        compression: cairn_format::Compression::Off,
        object_type: ObjectType::SpaceLog,
        level: 0,
        checksum: ChecksumAlgorithm::Fletcher4,
        copies: 2,
        fill: 1,
        class: IoClass::AsyncWrite,
    }
}

impl PoolCore {
    pub(crate) fn tree(&self) -> Arc<VdevTree> {
        self.io.tree()
    }

    pub(crate) fn sync(&self, txg: u64) -> Result<(), EngineError> {
        // Txgs commit in order, each once: the uberblock on disk is always older than the txg
        // being written (a sync retried after a suspension has not committed yet).
        let committed_txg = self.uberblock.lock().txg;
        assert!(
            txg > committed_txg,
            "sync of txg {txg} after txg {committed_txg} committed"
        );
        let mut directory_changed = self.run_sync_tasks(txg) || self.mos.root_bp().is_hole();
        // Before the object sets: the logs free blocks made redundant by this txg and move
        // their chain headers, which dirties the object sets in this txg.
        self.for_each_intent_log(|intent_log| intent_log.sync_hook(txg));
        let written_before = self.io.stats.bytes_written.load(Ordering::Relaxed);
        let mut batch = self.io.batch(txg);
        let synced = self.sync_objsets(txg, &mut batch)?;
        if !synced.is_empty() {
            let mut directory = self.directory.lock();
            for (name, _, result) in &synced {
                if let Ok(record) = directory.get_mut(name) {
                    record.set_objset_bp(&result.root_bp());
                    record.used_bytes = result.used_bytes();
                }
            }
            directory_changed = true;
        }
        // Resumable receives' tokens, in the txg of the records they describe.
        directory_changed |= self.store_resume_tokens(txg);
        // With the heads' roots of this txg in the directory: dead blocks onto deadlists,
        // then this txg's snapshots (`snapshot_sync.rs`).
        let new_snapshot_heads = self.sync_snapshots(txg, &synced)?;
        let table_started = std::time::Instant::now();
        directory_changed |= self.write_snapshot_table(txg)?;
        let table_time = table_started.elapsed();
        directory_changed |= self.persist_leaf_errors();
        // Sides that are out now miss this txg: on record before the directory is encoded.
        directory_changed |= self.note_missed_txgs();
        if directory_changed {
            self.write_directory(txg)?;
        }
        let mos_started = std::time::Instant::now();
        let mos_synced = self.sync_mos(txg, &mut batch)?;
        let mos_time = mos_started.elapsed();
        // Commands' work (`command_pacing.rs`), in a txg that changed snapshots: the table's
        // records and the MOS they dirtied (a destroy of 10,000 snapshots rewrites most of
        // the table's map).
        self.command_pacing
            .lock()
            .note_if_units(table_time + mos_time);
        let root_bp = mos_synced
            .as_ref()
            .map_or_else(|| self.mos.root_bp(), |result| result.root_bp());
        // Copy-on-write: nothing this txg points at was born after it.
        debug_assert!(
            root_bp.is_hole() || root_bp.birth_txg <= txg,
            "MOS root born in txg {} > {txg}",
            root_bp.birth_txg
        );
        let blocks_written = batch.written().0;
        let space_log_started = std::time::Instant::now();
        let (space_log_head, space_log_blocks) = self.write_space_log(txg, &mut batch)?;
        let mut space_time = space_log_started.elapsed();
        self.finish_writes(batch)?;
        if let Some(fault) = self.space.lock().fault() {
            return Err(EngineError::SpaceFault(fault.clone()));
        }
        // A new config goes to the labels with this txg's uberblock (taken once: a commit
        // retried after a suspension writes it again).
        let config = self
            .config_dirty
            .swap(false, Ordering::SeqCst)
            .then(|| self.label_config(txg));
        while let Err(err) = self.commit(
            txg,
            root_bp,
            space_log_head,
            space_log_blocks,
            config.as_ref(),
        ) {
            if !self.data_vdev_unavailable()
                || !self.wait_for_clear(&cairn_device::error_chain(&err))
            {
                return Err(err);
            }
        }
        for (_, objset, result) in synced {
            objset.publish(result);
        }
        // From the next txg on, each head keeps what its new snapshot references.
        for (objset, prev_snap_txg) in new_snapshot_heads {
            objset.set_prev_snap_txg(prev_snap_txg);
        }
        // Snapshot changes of this txg are durable now: counted and announced.
        self.snapshot_stats.committed(txg);
        if let Some(result) = mos_synced {
            self.mos.publish(result);
        }
        // Readers now see this txg's trees; a read still running on an older tree keeps the
        // space it may read from being reused (`BlockIo::oldest_read_txg`).
        self.io.set_synced_txg(txg);
        let read_floor = self.io.oldest_read_txg();
        {
            let mut space = self.space.lock();
            space.set_read_floor(read_floor);
            let sync_done_started = std::time::Instant::now();
            space.sync_done(txg);
            space_time += sync_done_started.elapsed();
        }
        self.note_clean_through(txg);
        // Durable now: the logs' per-file records of it go at once, not at the next txg's
        // sync hook a txg timeout later (their buffers, superseded ones included, held
        // beside the next txg's dirty data meanwhile).
        self.for_each_intent_log(|intent_log| intent_log.txg_synced(txg));
        // The txg's dirty buffers were freed with its change sets: they go back to the kernel
        // once writing pauses (2 s) if the cache has no room for them, not left in the
        // allocator's free lists for good (trimming after every txg made a steady writer fault
        // in and zero fresh pages for each one: 40% of the server's CPU under 8K rewrites into
        // 128K records).
        let written = self.io.stats.bytes_written.load(Ordering::Relaxed) - written_before;
        if written >= HEAP_TRIM_AFTER_BYTES {
            self.mos.cached_io().cache().note_heap_freed();
        }
        // Everything the txg's frees caused is done (MOS, space log, deferred releases):
        // priced.
        self.free_pacing
            .lock()
            .txg_synced(space_time, mos_time, blocks_written);
        self.command_pacing.lock().txg_synced();
        Ok(())
    }

    /// Runs `f` on every open intent log (outside the registry's lock).
    fn for_each_intent_log(&self, f: impl Fn(&cairn_zil::IntentLog)) {
        let intent_logs: Vec<_> = self.intent_logs.lock().values().cloned().collect();
        for intent_log in intent_logs {
            f(&intent_log);
        }
    }

    /// Runs the sync tasks queued for `txg` (directory changes, commands), timed as
    /// commands' work (`command_pacing.rs`); true if there were any.
    fn run_sync_tasks(&self, txg: u64) -> bool {
        let tasks = self.tasks.lock().remove(&txg).unwrap_or_default();
        if tasks.is_empty() {
            return false;
        }
        let started = std::time::Instant::now();
        for (task, reply) in tasks {
            let _ = reply.send(task(self, txg));
        }
        self.command_pacing.lock().note_work(0, started.elapsed());
        true
    }

    /// Rewrites the MOS if `txg` changed it, counting what it wrote (`Pool::mos_writes`).
    fn sync_mos(
        &self,
        txg: u64,
        batch: &mut WriteBatch<'_>,
    ) -> Result<Option<cairn_object::SyncedObjset>, EngineError> {
        let (blocks_before, bytes_before) = batch.written();
        let synced = if self.mos.is_dirty(txg) {
            Some(self.mos.sync(txg, batch)?)
        } else {
            self.mos.skip_txg(txg);
            None
        };
        let (blocks_after, bytes_after) = batch.written();
        let mut mos_writes = self.mos_writes.lock();
        mos_writes.last_txg = txg;
        mos_writes.last_txg_blocks = blocks_after - blocks_before;
        mos_writes.last_txg_bytes = bytes_after - bytes_before;
        mos_writes.total_blocks += blocks_after - blocks_before;
        mos_writes.total_bytes += bytes_after - bytes_before;
        Ok(synced)
    }

    /// Waits for the txg's writes. When some block reached no device (every child of a data
    /// vdev failed), I/O is suspended until `pool clear` and those writes are issued again: the
    /// txg is delayed, never half-written (ZFS's `failmode=wait`).
    fn finish_writes(&self, batch: cairn_pipeline::WriteBatch<'_>) -> Result<(), EngineError> {
        let mut outcome = batch.finish_retryable();
        while let Err(failed) = outcome {
            let cause = failed
                .source
                .as_ref()
                .map(|err| format!(": {}", cairn_device::error_chain(err)))
                .unwrap_or_default();
            if !self.wait_for_clear(&format!("{}{cause}", failed.reason)) {
                return Err(EngineError::Pipeline(
                    cairn_pipeline::PipelineError::WriteFailed {
                        reason: failed.reason,
                        source: failed.source,
                    },
                ));
            }
            outcome = failed.retry(&self.io);
        }
        Ok(())
    }

    fn data_vdev_unavailable(&self) -> bool {
        self.tree().tops.iter().any(|top| {
            top.config.role != cairn_format::VdevRole::Log
                && top.health() == cairn_pool::vdev::Health::Unavail
        })
    }

    /// Suspends I/O (writes reached no device, for `reason`) and waits for `pool clear`: true
    /// once resumed, false if there is no txg engine to suspend or it shuts down meanwhile
    /// (the caller then fails the txg with the error it has).
    fn wait_for_clear(&self, reason: &str) -> bool {
        let Some(handle) = self.suspend_handle.get() else {
            return false;
        };
        handle.suspend(format!(
            "writes reached no device ({reason}); bring the devices back, then run 'cairn pool clear {}'",
            self.name
        ));
        handle.wait_resumed()
    }

    /// Rewrites every dataset object set dirty in `txg` into `batch` (the others skip it).
    fn sync_objsets(
        &self,
        txg: u64,
        batch: &mut WriteBatch<'_>,
    ) -> Result<Vec<SyncedDataset>, EngineError> {
        let objsets: Vec<_> = self
            .objsets
            .lock()
            .iter()
            .map(|(name, objset)| (name.clone(), objset.clone()))
            .collect();
        let mut synced = Vec::new();
        for (name, objset) in objsets {
            if objset.is_dirty(txg) {
                let result = objset.sync(txg, batch)?;
                synced.push((name, objset, result));
            } else {
                objset.skip_txg(txg);
            }
        }
        Ok(synced)
    }

    /// Writes the records of the dataset directory that changed into the MOS in `txg` (the
    /// space view follows the directory).
    fn write_directory(&self, txg: u64) -> Result<(), EngineError> {
        self.refresh_space_view();
        let changes = {
            let directory = self.directory.lock();
            // What this txg writes, the next import reads: the records pass the checks an
            // import makes (names, kinds, canonical property values). A full check, once per
            // txg that changes the directory; debug builds only.
            debug_assert!(
                cairn_dataset::DatasetDirectory::decode(&directory.encode()).is_ok(),
                "txg {txg} would write a dataset directory that import refuses"
            );
            self.directory_written.lock().changes(&directory)
        };
        if changes.is_empty() {
            return Ok(());
        }
        DIRECTORY.write(
            &self.mos,
            self.guid,
            txg,
            changes
                .into_iter()
                .map(|(key, value)| (key.encode(), value)),
            &mut || self.new_mos_object(txg),
        )
    }

    /// Flush, (labels,) uberblock, flush.
    fn commit(
        &self,
        txg: u64,
        root_bp: BlockPointer,
        space_log_bp: BlockPointer,
        space_log_blocks: u64,
        config: Option<&cairn_format::LabelConfig>,
    ) -> Result<(), EngineError> {
        let tree = self.tree();
        tree.flush_all()?;
        // A new config goes to the first half of the labels before the uberblock and to the
        // second half after it (see `cairn_pool::labels`).
        if let Some(config) = config {
            write_pool_config_half(&tree, config, &LABEL_HALVES[0])?;
        }
        let uberblock = Uberblock {
            version: FORMAT_VERSION,
            txg,
            pool_guid: self.guid,
            guid_sum: tree.config().guid_sum(),
            timestamp_ms: crate::now_ms(),
            root_bp,
            space_log_bp,
            space_log_blocks,
            allocated_bytes: self.space.lock().stats().allocated_bytes,
        };
        debug_assert!(
            space_log_bp.is_hole() || space_log_bp.birth_txg <= txg,
            "space log head born after its txg"
        );
        commit_uberblock(&tree, &uberblock)?;
        tree.flush_all()?;
        if let Some(config) = config {
            write_pool_config_half(&tree, config, &LABEL_HALVES[1])?;
        }
        *self.uberblock.lock() = uberblock;
        Ok(())
    }

    /// Copies the leaves' error counters into the directory; true if they changed.
    fn persist_leaf_errors(&self) -> bool {
        let current: std::collections::BTreeMap<u64, LeafErrorRecord> = self
            .tree()
            .leaves()
            .map(|leaf| {
                let (read, write, checksum) = leaf.errors.snapshot();
                let repaired_bytes = leaf.errors.repaired_bytes.load(Ordering::Relaxed);
                (
                    leaf.guid,
                    LeafErrorRecord {
                        read,
                        write,
                        checksum,
                        repaired_bytes,
                    },
                )
            })
            .filter(|(_, record)| *record != LeafErrorRecord::default())
            .collect();
        let mut directory = self.directory.lock();
        if directory.leaf_errors == current {
            return false;
        }
        directory.leaf_errors = current;
        true
    }

    pub(crate) fn label_config(&self, txg: u64) -> cairn_format::LabelConfig {
        cairn_format::LabelConfig {
            version: FORMAT_VERSION,
            pool_name: self.name.clone(),
            pool_guid: self.guid,
            state: *self.label_state.lock(),
            txg,
            leaf_guid: 0,
            tree: self.tree().config(),
        }
    }

    /// Appends this txg's allocation changes to the space log (or condenses it into a
    /// checkpoint) and returns the new head and chain length.
    fn write_space_log(
        &self,
        txg: u64,
        batch: &mut WriteBatch<'_>,
    ) -> Result<(BlockPointer, u64), EngineError> {
        let mut log = self.space_log.lock();
        let condense = log.wants_condense(self.space_log_delta_blocks_max);
        log.condense_next = false;
        if condense {
            for bp in log.chain.drain(..) {
                self.io.free_block(&bp, txg);
            }
        }
        // Size the blocks from what is known now, plus room for their own allocations. A
        // checkpoint is built once, after its blocks are allocated: a bound sizes them.
        let known = if condense {
            self.space.lock().checkpoint_entry_bound(txg)
        } else {
            self.space.lock().pending_change_count(txg)
        };
        let slack_per_block = 8;
        let blocks_needed =
            (known + slack_per_block).div_ceil(SPACE_LOG_ENTRIES_PER_BLOCK - slack_per_block);
        let mut capacities = Vec::with_capacity(blocks_needed);
        let mut remaining = known + slack_per_block * blocks_needed;
        for _ in 0..blocks_needed {
            let count = remaining.min(SPACE_LOG_ENTRIES_PER_BLOCK);
            capacities.push(count);
            remaining -= count;
        }
        let mut placements = Vec::with_capacity(blocks_needed);
        for &count in &capacities {
            let psize = SpaceLogBlock::encoded_size(count, SPACE_LOG_GRANULE);
            placements.push((psize, batch.preallocate(psize, 2)?));
        }
        let entries: Vec<SpaceLogEntry> = if condense {
            let _superseded = self.space.lock().take_changes(txg);
            self.space.lock().checkpoint_entries(txg)
        } else {
            self.space.lock().take_changes(txg)
        };
        let total_capacity: usize = capacities.iter().sum();
        if entries.len() > total_capacity {
            return Err(EngineError::Space(format!(
                "txg {txg}: {} space-log entries exceed the {total_capacity} reserved",
                entries.len()
            )));
        }
        let mut rest = entries.as_slice();
        let mut prev = log.head();
        for (index, ((psize, dvas), capacity)) in placements.into_iter().zip(capacities).enumerate()
        {
            let take = rest.len().min(capacity);
            let kind = match (condense, index) {
                (true, 0) => SpaceLogKind::CheckpointStart,
                (true, _) => SpaceLogKind::Checkpoint,
                (false, _) => SpaceLogKind::Delta,
            };
            let block = SpaceLogBlock {
                kind,
                txg,
                sequence: log.chain.len() as u64,
                prev: if kind == SpaceLogKind::CheckpointStart {
                    BlockPointer::HOLE
                } else {
                    prev
                },
                entries: rest[..take].to_vec(),
            };
            rest = &rest[take..];
            let mut data = block.encode(SPACE_LOG_GRANULE);
            data.resize(psize as usize, 0);
            let bp = batch.write_preallocated(dvas, Bytes::from(data), space_log_props())?;
            log.chain.push(bp);
            prev = bp;
        }
        debug_assert!(rest.is_empty());
        if condense {
            log.checkpoint_blocks = log.chain.len();
        }
        Ok((log.head(), log.chain.len() as u64))
    }
}
