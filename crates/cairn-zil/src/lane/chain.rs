//! A lane's chain of log blocks over its life: starting one (its first block allocated and its
//! head recorded in a synced txg before any block of it is written), the blocks the lane holds
//! and which of them a synced txg releases, and the txg-sync paths that make records durable
//! without the log: a bulk commit (the chain carries on), a failed write or a restart (the chain
//! is retired).
//!
//! Invariants: blocks of the current chain are released oldest first only (replay walks it
//! from its head); a block still being written is never released (`WrittenBlock::done`);
//! retiring bumps `chain_epoch`, so a builder that started on the old chain cannot resurrect
//! it. Uses only the lane's state (`mod.rs`); `build.rs` starts chains here and `commit.rs`
//! falls back to the txg syncs here.

use super::{Chain, Lane, LaneState, WrittenBlock, block_size_for, wake};
use crate::{IntentLog, ZilError};
use cairn_format::{Dva, LaneHead};
use std::sync::atomic::Ordering;

impl Lane {
    /// Removes the blocks made redundant by txg `txg` and returns them with the lane's new head.
    /// Blocks of the current chain go oldest first only (the chain is walked from its head, so
    /// no block after the head may be freed before it); blocks of retired chains go as soon as
    /// they qualify (their records are all in synced txgs, see `retire_chain`).
    pub(crate) fn release_through(&self, txg: u64) -> (Vec<Dva>, LaneHead) {
        let mut st = self.state.lock();
        let current = st.chain.map(|chain| chain.guid);
        let redundant =
            |block: &WrittenBlock| block.done && block.max_txg <= txg && block.alloc_txg <= txg;
        let mut released = Vec::new();
        let mut prefix_open = true;
        st.written.retain(|block| {
            let ours = Some(block.chain_guid) == current;
            let free = redundant(block) && (!ours || prefix_open);
            if ours && !free {
                prefix_open = false;
            }
            if free {
                released.push(block.dva);
            }
            !free
        });
        let first_ours = st
            .written
            .iter()
            .find(|block| Some(block.chain_guid) == current);
        let head = match (first_ours, st.chain) {
            (Some(block), _) => LaneHead {
                chain_guid: block.chain_guid,
                sequence: block.sequence,
                block: block.dva,
            },
            (None, Some(chain)) => LaneHead {
                chain_guid: chain.guid,
                sequence: chain.next_sequence,
                block: chain.next,
            },
            (None, None) => LaneHead::default(),
        };
        (released, head)
    }

    /// True when the lane has a chain (its next block allocated in advance).
    pub(crate) fn has_chain(&self) -> bool {
        self.state.lock().chain.is_some()
    }

    pub(crate) fn has_blocks(&self) -> bool {
        let st = self.state.lock();
        st.chain.is_some() || !st.written.is_empty()
    }

    /// Every block this lane holds now: written or in flight, retired but not yet freed, and
    /// the chain's pre-allocated next block.
    pub(crate) fn held_blocks(&self) -> Vec<Dva> {
        let st = self.state.lock();
        let mut blocks: Vec<Dva> = st.written.iter().map(|block| block.dva).collect();
        blocks.extend(st.chain.map(|chain| chain.next));
        blocks
    }

    /// Every block the lane holds (written ones and the pre-allocated next); the lane forgets
    /// its chain.
    pub(crate) fn take_all_blocks(&self) -> Vec<Dva> {
        let mut st = self.state.lock();
        let mut blocks: Vec<Dva> = st.written.drain(..).map(|block| block.dva).collect();
        if let Some(chain) = st.chain.take() {
            blocks.push(chain.next);
        }
        st.pending.clear();
        st.chain_epoch += 1;
        blocks
    }
}

impl LaneState {
    /// Retires the chain after a failure, or when a new one replaces it: its blocks are freed
    /// once `covered_txg` (which made all their records redundant) is durable and no write to
    /// them is still in flight. A block being written stays unfreeable until its writer says it
    /// is done: the batches in flight mark theirs when their writes end, and a builder at work
    /// (which writes the chain's next block) marks it when it finds the chain retired.
    fn retire_chain(&mut self, covered_txg: u64) {
        if let Some(chain) = self.chain.take() {
            self.written.push_back(WrittenBlock {
                dva: chain.next,
                chain_guid: chain.guid,
                sequence: chain.next_sequence,
                alloc_txg: self.next_alloc_txg,
                max_txg: covered_txg,
                done: !self.building,
            });
        }
        for block in self.written.iter_mut() {
            block.max_txg = block.max_txg.max(covered_txg);
        }
        self.chain_epoch += 1;
    }

    /// A builder whose chain was retired while it built hands over what it allocated: blocks
    /// `retire_chain` already listed are marked done, the others are added.
    pub(super) fn adopt_orphans(&mut self, orphans: Vec<WrittenBlock>) {
        for orphan in orphans {
            match self
                .written
                .iter_mut()
                .find(|block| block.dva == orphan.dva)
            {
                Some(block) => block.done = true,
                None => self.written.push_back(orphan),
            }
        }
    }
}

impl IntentLog {
    /// Makes every ticket up to at least `ticket` durable by forcing a txg sync (which covers
    /// every record logged before it), and retires the chain.
    pub(super) fn fall_back(&self, lane: &Lane, ticket: u64) -> Result<(), ZilError> {
        let covered_ticket = lane.state.lock().next_ticket - 1;
        debug_assert!(covered_ticket >= ticket);
        let synced = self.txg.sync_now_forced();
        let mut st = lane.state.lock();
        self.settle_after_sync(
            lane,
            &mut st,
            synced,
            covered_ticket,
            true,
            "txg sync after a log failure",
        )
    }

    /// Serves a bulk commit (the caller is the lane's builder) by a txg sync, which covers every
    /// record logged before it; the chain carries on (its later blocks simply lack the records
    /// the sync made redundant, and replay skips records of synced txgs anyway).
    pub(super) fn sync_instead(&self, lane: &Lane) -> Result<(), ZilError> {
        self.sync_as_builder(lane, false, "txg sync for a bulk commit")?;
        self.stats.bulk_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Ends the lane's chain at a quiet moment: waits until no builder works and no batch is in
    /// flight, becomes the builder, makes every record durable with a txg sync and retires the
    /// chain, whose blocks are then all finished (so they are freed in the same txg that drops
    /// the chain from the header: a crash cannot leave them allocated and unreachable).
    pub(crate) fn restart_chain(&self, lane: &Lane) -> Result<(), ZilError> {
        let mut st = lane.state.lock();
        while st.building || !st.in_flight.is_empty() {
            // A failed lane keeps the batch whose write failed in flight for good (nothing
            // can make it durable any more): waiting for a quiet moment would never end.
            if let Some(reason) = &st.failed {
                return Err(self.failed(reason.clone()));
            }
            lane.cond.wait(&mut st);
        }
        if st.chain.is_none() {
            return Ok(());
        }
        st.building = true;
        drop(st);
        self.sync_as_builder(lane, true, "txg sync to restart the log chain")
    }

    /// For the lane's builder (the caller set `building`): forces a txg sync, which makes every
    /// record logged so far durable, and settles the lane accordingly (retiring its chain if
    /// asked); steps down as builder either way.
    fn sync_as_builder(&self, lane: &Lane, retire: bool, what: &str) -> Result<(), ZilError> {
        let (covered_ticket, newest_txg) = {
            let st = lane.state.lock();
            (st.next_ticket - 1, st.newest_txg)
        };
        // Retiring the chain needs a txg of its own (the header changes in it); covering the
        // records only needs the txgs they joined synced: when those are already synced or in
        // flight, no empty txg is forced through behind them.
        let synced = if retire {
            self.txg.sync_now_forced()
        } else {
            self.txg.wait_synced(newest_txg).map(|()| newest_txg)
        };
        let mut st = lane.state.lock();
        st.building = false;
        self.settle_after_sync(lane, &mut st, synced, covered_ticket, retire, what)
    }

    /// After a forced txg sync that covers every ticket up to `covered_ticket`: those are
    /// durable (pending and in-flight ones included) and the chain is retired if asked; if the
    /// sync failed, nothing can be made durable any more and every committer gets the error.
    fn settle_after_sync(
        &self,
        lane: &Lane,
        st: &mut LaneState,
        synced: Result<u64, cairn_pool::txg::TxgError>,
        covered_ticket: u64,
        retire: bool,
        what: &str,
    ) -> Result<(), ZilError> {
        let outcome = match synced {
            Ok(txg) => {
                if retire {
                    st.retire_chain(txg);
                }
                st.durable_ticket = st.durable_ticket.max(covered_ticket);
                st.in_flight
                    .retain(|batch| batch.last_ticket > covered_ticket);
                st.pending.drop_through(covered_ticket);
                Ok(())
            }
            Err(err) => {
                // Later committers read the lane's failure as text; this one gets it whole.
                st.failed = Some(format!("{what}: {}", cairn_device::error_chain(&err)));
                st.failed_by_suspension = self.txg.io_suspended();
                Err(self.txg_failed(what, err))
            }
        };
        wake(lane.publish(st));
        lane.cond.notify_all();
        outcome
    }

    /// Starts a chain for `lane`: allocates its first block, records the header in the open
    /// txg and waits for that txg to sync, after which blocks of the chain are reachable.
    pub(super) fn start_chain(
        &self,
        lane: &Lane,
        first_block_bytes: usize,
    ) -> Result<(Chain, u64), ZilError> {
        let size = block_size_for(first_block_bytes);
        let hold = self
            .txg
            .try_hold()
            .map_err(|err| self.txg_failed("holding the open txg", err))?;
        let txg = hold.txg();
        let dva = self.allocate_in(size, txg)?;
        let chain = Chain {
            guid: cairn_pool::new_guid(),
            next: dva,
            next_sequence: 1,
        };
        {
            // The lane owns the chain from now on (this builder has it exclusively), so a txg
            // sync running meanwhile computes a header that includes it.
            let mut st = lane.state.lock();
            debug_assert!(st.written.iter().all(|block| block.done));
            st.chain = Some(chain);
            st.next_alloc_txg = txg;
        }
        self.set_head(
            lane.index(),
            LaneHead {
                chain_guid: chain.guid,
                sequence: 1,
                block: dva,
            },
            txg,
        );
        drop(hold);
        self.txg
            .wait_synced(txg)
            .map_err(|err| self.txg_failed("recording a new log chain", err))?;
        self.stats.chains_started.fetch_add(1, Ordering::Relaxed);
        Ok((chain, txg))
    }
}
