//! Intent-log replay at import.
//!
//! For every volume whose object set still names log chains, read the chains (`read_log`),
//! and in one txg for all volumes: claim the blocks found — log blocks and the blocks of
//! writes in place, every volume's before any record is applied (they may have been allocated
//! in a txg that never synced, and nothing the replay allocates may land on them) — apply the
//! records newer than the imported txg in (txg, sequence) order, free the claimed blocks and
//! empty the chain headers. One txg for all of it is what makes replay exactly-once:
//! if the machine stops before that txg is durable, the next import finds the same header, the
//! same blocks and the same imported txg, and replays the same records again.
//!
//! A record that cannot be applied fails the import with an error naming the dataset and the
//! record (sequence, kind, txg, object).
//!
//! With `ignore_missing_log` and a log device missing, nothing is applied (the pool comes back
//! as of its last synced txg, as the user accepted); chains on present devices are still walked
//! so their blocks are freed rather than leaked.

use crate::{EngineError, Pool};
use cairn_dataset::DatasetKind;
use cairn_format::{Dva, IntentLogHeader, LogRecordKind};
use cairn_pool::txg::TxgHold;
use cairn_pool::vdev::Health;
use cairn_zil::read_log;

impl Pool {
    /// True when some dataset's synced object set still names intent-log chains.
    pub(crate) fn has_pending_intent_logs(&self) -> bool {
        self.core
            .objsets
            .lock()
            .values()
            .any(|objset| objset.synced_intent_log_header().iter().any(|&b| b != 0))
    }

    /// Replays (or, with `apply` false, discards) every volume's intent log; returns notes for
    /// the user. All volumes are replayed in one txg, and every block any of their logs leads
    /// to (log blocks, blocks written in place) is claimed before anything is applied, so no
    /// allocation made by the replay can land on a block another record still needs.
    pub(crate) fn replay_intent_logs(
        &self,
        imported_txg: u64,
        apply: bool,
    ) -> Result<Vec<String>, EngineError> {
        let mut notes = Vec::new();
        let volumes: Vec<String> = {
            let directory = self.core.directory.lock();
            directory
                .datasets
                .values()
                .filter(|record| {
                    matches!(record.kind, DatasetKind::Volume | DatasetKind::Filesystem)
                })
                .map(|record| record.name.clone())
                .collect()
        };
        let mut logs: Vec<(String, IntentLogHeader)> = Vec::new();
        for name in volumes {
            let Some(objset) = self.core.objsets.lock().get(&name).cloned() else {
                continue;
            };
            let raw = objset.synced_intent_log_header();
            if raw.iter().all(|&byte| byte == 0) {
                continue;
            }
            let header = match IntentLogHeader::decode(&raw) {
                Ok(header) => header,
                Err(err) => {
                    notes.push(format!(
                        "{name}: intent log header is damaged ({err}); its log is discarded"
                    ));
                    IntentLogHeader::default()
                }
            };
            logs.push((name, header));
        }
        if !logs.is_empty() {
            let engine = self.txg_engine()?.clone();
            let hold = engine.try_hold().map_err(EngineError::Txg)?;
            let txg = hold.txg();
            let mut claimed = Vec::with_capacity(logs.len());
            for (name, header) in &logs {
                claimed.push(self.claim_volume_log(name, header, imported_txg, txg)?);
            }
            for ((name, _), replay) in logs.iter().zip(claimed) {
                notes.push(self.replay_volume(name, replay, &hold, imported_txg, apply)?);
            }
            drop(hold);
            engine.wait_synced(txg).map_err(EngineError::Txg)?;
        }
        self.sweep_log_devices()?;
        Ok(notes)
    }

    /// Once every log is replayed and reset, nothing on a log device is referenced: frees
    /// whatever is still allocated there (blocks of chains that could not be walked, such as
    /// those on a missing log device, or blocks orphaned by a crash mid-commit).
    fn sweep_log_devices(&self) -> Result<(), EngineError> {
        let log_vdevs: Vec<u32> = self
            .core
            .tree()
            .tops
            .iter()
            .filter(|top| top.config.role == cairn_format::VdevRole::Log)
            .map(|top| top.id())
            .collect();
        if log_vdevs.is_empty() {
            return Ok(());
        }
        let engine = self.txg_engine()?.clone();
        let hold = engine.try_hold().map_err(EngineError::Txg)?;
        let txg = hold.txg();
        let mut swept = 0usize;
        {
            let mut space = self.core.space.lock();
            let leftovers: Vec<(u32, u64, u64)> = space
                .allocated_extents()
                .into_iter()
                .filter(|(vdev, _, _)| log_vdevs.contains(vdev))
                .collect();
            const PIECE_BYTES: u64 = 1 << 30;
            for (vdev, offset, length) in leftovers {
                let mut start = offset;
                while start < offset + length {
                    let piece = (offset + length - start).min(PIECE_BYTES);
                    let dva = Dva {
                        vdev,
                        offset: start,
                        asize: piece as u32,
                    };
                    space.free(&dva, txg).map_err(|err| EngineError::Import {
                        pool: self.core.name.clone(),
                        reason: format!("freeing leftover log space: {}", crate::error_chain(&err)),
                    })?;
                    start += piece;
                }
                swept += 1;
            }
        }
        drop(hold);
        if swept > 0 {
            engine.wait_synced(txg).map_err(EngineError::Txg)?;
        }
        Ok(())
    }

    /// Reads a volume's log and claims, in `txg`, every block it leads to that the imported
    /// state does not already own: the log blocks, and the blocks of the writes in place that
    /// replay will apply.
    fn claim_volume_log(
        &self,
        name: &str,
        header: &IntentLogHeader,
        imported_txg: u64,
        txg: u64,
    ) -> Result<ClaimedLog, EngineError> {
        let tree = self.core.tree();
        let usable = |dva: &Dva| {
            tree.top_for_dva(dva)
                .is_some_and(|top| top.health() != Health::Unavail)
        };
        // Lanes whose chain starts on a missing device cannot be read at all.
        let readable = IntentLogHeader {
            lanes: header
                .lanes
                .iter()
                .map(|lane| {
                    if lane.is_empty() || usable(&lane.block) {
                        *lane
                    } else {
                        Default::default()
                    }
                })
                .collect(),
        };
        let log = read_log(&self.core.io, self.core.guid, &readable, imported_txg);
        let claim_error = |what: &str, dva: &Dva, err: String| EngineError::Import {
            pool: self.core.name.clone(),
            reason: format!(
                "{name}: {what} at vdev {} offset {} cannot be claimed: {err}",
                dva.vdev, dva.offset
            ),
        };
        let mut to_free: Vec<Dva> = Vec::new();
        let mut space = self.core.space.lock();
        for dva in &log.blocks {
            space
                .claim(dva, txg)
                .map_err(|err| claim_error("intent log block", dva, crate::error_chain(&err)))?;
            to_free.push(*dva);
        }
        for dva in &log.chain_ends {
            if usable(dva) && space.is_allocated(dva) {
                to_free.push(*dva);
            }
        }
        // A block written in place for a txg that never synced is free in the space maps. One
        // already allocated belongs to the imported state: it is left alone (and its contents
        // will not verify against the logged pointer unless they are the logged block).
        for bp in log
            .records
            .iter()
            .filter_map(|record| record.block_pointer())
        {
            for dva in bp.copies() {
                if usable(dva)
                    && space.claim(dva, txg).map_err(|err| {
                        claim_error("block written in place", dva, crate::error_chain(&err))
                    })?
                {
                    to_free.push(*dva);
                }
            }
        }
        Ok(ClaimedLog { log, to_free })
    }

    /// Applies (or with `apply` false, drops) a claimed log in the txg of `hold`, frees its
    /// blocks and empties the volume's chain header in that txg. Returns a note for the user.
    fn replay_volume(
        &self,
        name: &str,
        claimed: ClaimedLog,
        hold: &TxgHold,
        imported_txg: u64,
        apply: bool,
    ) -> Result<String, EngineError> {
        let is_filesystem = self.core.directory.lock().get(name)?.kind == DatasetKind::Filesystem;
        let txg = hold.txg();
        let ClaimedLog { log, to_free } = claimed;
        // What makes replay exactly-once (see the module doc): only records past the imported
        // txg, in (txg, sequence) order, applied in one txg past the imported one. (Records
        // may name txgs past the replay's too: txgs that were open, never synced.)
        assert!(
            txg > imported_txg,
            "{name}: replay in txg {txg}, not after {imported_txg}"
        );
        debug_assert!(log.records.iter().all(|record| record.txg > imported_txg));
        debug_assert!(
            log.records
                .windows(2)
                .all(|pair| { (pair[0].txg, pair[0].sequence) <= (pair[1].txg, pair[1].sequence) })
        );
        let objset = if is_filesystem {
            let fs = self.build_filesystem(name)?.for_replay();
            if apply {
                for record in &log.records {
                    fs.replay_record(hold, record)
                        .map_err(|err| EngineError::Import {
                            pool: self.core.name.clone(),
                            reason: format!(
                                "{name}: replaying intent-log record {} ({:?}, txg {}, object {}): {}",
                                record.sequence,
                                record.kind,
                                record.txg,
                                record.object,
                                crate::error_chain(&err)
                            ),
                        })?;
                }
            }
            fs.objset().clone()
        } else {
            let volume = self.volume(name)?;
            if apply {
                for record in &log.records {
                    volume.replay_record(hold, record)?;
                }
            }
            volume.objset().clone()
        };
        let applied = if apply { log.records.len() } else { 0 };
        {
            let mut space = self.core.space.lock();
            for dva in &to_free {
                space.free(dva, txg).map_err(|err| EngineError::Import {
                    pool: self.core.name.clone(),
                    reason: format!(
                        "{name}: freeing a replayed log block: {}",
                        crate::error_chain(&err)
                    ),
                })?;
            }
        }
        objset.set_intent_log_header(txg, [0; cairn_format::intent_log::INTENT_LOG_HEADER_SIZE]);
        let in_place = log
            .records
            .iter()
            .filter(|record| record.kind == LogRecordKind::WriteInPlace)
            .count();
        Ok(if apply {
            format!(
                "{name}: replayed {applied} intent-log records ({in_place} of them writes in place) from {} log blocks ({} already in txg {imported_txg})",
                log.blocks.len(),
                log.records_skipped
            )
        } else {
            format!(
                "{name}: discarded the intent log ({} records not replayed: the pool is as of txg {imported_txg})",
                log.records.len()
            )
        })
    }
}

/// A volume's log, read, with the blocks claimed for replay (freed in the replay txg).
struct ClaimedLog {
    log: cairn_zil::ReplayLog,
    to_free: Vec<Dva>,
}
