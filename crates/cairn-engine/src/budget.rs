//! The process's memory budget: one figure covering every kind of memory a serving process
//! holds in proportion to its load, derived from `arc_max` plus explicit allowances.
//!
//! Why: a server's memory is not only its cache. Dirty data waiting for a txg sync, the copies
//! a sync has in flight, request buffers a front end has read off its sockets and intent-log
//! blocks being written all grow with the load; left to their own defaults (dirty data at 10 %
//! of RAM, front-end buffers at 1 GiB) a burst of large writes took a server with a 1 GiB cache
//! past 9 GB. Here each of them gets a limit derived from the cache's, and the sum is stated.
//!
//! Each allowance is enforced where the memory is held:
//! - `arc_max_bytes`: the ARC's own limit (`ReadCache::set_limits`);
//! - `dirty_bytes_max`: `TxgConfig::dirty_bytes_max`, the write throttle's hard limit (a write
//!   that starts below it is admitted whole, so dirty data can pass it by the writes in flight;
//!   those bytes left the request buffers, so dirty + requests stays within their two limits);
//!   a filesystem's log records waiting for their file's fsync or COMMIT mostly share the
//!   dirty buffers (a record a later write covers is dropped with its buffer) and are held to
//!   the same figure per log (`ZilConfig::deferred_bytes_max`: a sync asked for past it,
//!   writers waiting past twice it);
//! - `sync_io_bytes`: what a txg sync allocates besides the dirty buffers it writes
//!   (compressed copies, indirect blocks) is at most the txg's dirty data, so it is bounded by
//!   the same figure;
//! - `request_bytes`: a front end's request/reply buffers over all connections (the NBD
//!   server's `max_total_inflight_bytes`), with `connection_request_bytes` per connection; a
//!   connection out of allowance is not read until replies free some; the NFS server's calls
//!   in flight get the same figure as their own limit (`cairn-frontend`'s `nfs::memory`,
//!   unless `serve --nfs-memory-max` says otherwise);
//! - `intent_log_bytes`: log batches in flight (`ZilConfig::batch_bytes_max` times the batches a
//!   lane keeps in flight, for a few lanes committing at once);
//! - `l2_index_bytes`: the RAM index of a pool's cache devices (`L2Config::index_bytes_max`,
//!   ≤ 16 B per cached block; a full index gives up its least valued segment rather than grow);
//! - `fixed_bytes`: code, thread stacks, metadata and allocator slack that do not grow with
//!   the load.
//!
//! Known gaps: the dirty-data limit is enforced per pool (each pool has its own txg engine), so
//! a server whose several pools are all flooded at once can hold that many times `dirty` (and
//! `sync_io`); the intent-log allowance assumes at most four lanes commit at once, which many
//! busy volumes can exceed. Both wait for a process-wide accounting of dirty data. The NBD and
//! NFS servers each hold up to `request_bytes` (a server flooded over both at once can hold it
//! twice). Each object
//! set's memo of published dnodes and directory blocks (`cairn-object`'s `memo`) is bounded
//! by a fraction of the ARC's target per object set, not counted here.
//!
//! Invariant: every allowance is at least what one largest request needs, so a request larger
//! than what remains of an allowance waits for the others to drain and then proceeds alone;
//! nothing can deadlock on the budget.

/// How long a txg sync may take at the pool's measured speed (`TxgConfig::sync_target_ms` of a
/// served pool): dirty data is limited further when the pool is slower than its allowance
/// needs, since a FLUSH or FUA served by a txg sync waits for all of it. 500 ms keeps the
/// longest reply gap under a flood of 32 MiB writes around a second, whatever `arc_max` is.
pub const SYNC_TARGET_MS: u64 = 500;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Least dirty-data allowance: a txg must hold a few of the largest writes.
const DIRTY_BYTES_MIN: u64 = 128 * MIB;
/// Most dirty data: beyond this a txg takes too long to sync on any disk for a client that
/// waits at the throttle's hard limit (OpenZFS caps `zfs_dirty_data_max` at 4 GiB too).
const DIRTY_BYTES_CAP: u64 = 4 * GIB;
/// Request buffers one connection may hold: two of the largest requests, so a client keeps
/// one arriving while the other is served.
const CONNECTION_REQUESTS: u64 = 2;
/// Intent-log blocks in flight: up to four batches per lane (`cairn-zil`), 4 MiB each, for
/// four lanes committing at once.
const INTENT_LOG_BYTES: u64 = 4 * 4 * 4 * MIB;
/// Code, stacks, metadata (space maps, dnodes, directory), allocator slack.
const FIXED_BYTES: u64 = 256 * MIB;
/// The cache devices' index: an eighth of the RAM cache (at 16 B per block, 1 GiB of ARC
/// indexes 8M blocks: 64 GiB of 8 KiB blocks on SSD), within these bounds.
const L2_INDEX_DIVISOR: u64 = 8;
const L2_INDEX_BYTES_MIN: u64 = 16 * MIB;
const L2_INDEX_BYTES_CAP: u64 = 8 * GIB;

/// The limits of one process, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudget {
    pub arc_max_bytes: u64,
    pub dirty_bytes_max: u64,
    pub sync_io_bytes: u64,
    pub request_bytes: u64,
    pub connection_request_bytes: u64,
    pub intent_log_bytes: u64,
    pub l2_index_bytes: u64,
    pub fixed_bytes: u64,
}

impl MemoryBudget {
    /// The budget of a process whose cache may use `arc_max_bytes` and whose front end takes
    /// requests of up to `max_request_bytes`: dirty data gets a quarter of the cache's size (at
    /// least 128 MiB, at most 4 GiB), request buffers as much as dirty data (at least two of
    /// the largest requests). Dirty data is kept small on purpose: a FLUSH or FUA that needs a
    /// txg sync waits for all of it to be written, so its size is the latency such a request
    /// sees (256 MiB gave 2-4 s reply gaps under a flood of 32 MiB writes, 128 MiB ~1 s).
    pub fn for_arc_max(arc_max_bytes: u64, max_request_bytes: u64) -> MemoryBudget {
        let dirty_bytes_max = (arc_max_bytes / 4).clamp(DIRTY_BYTES_MIN, DIRTY_BYTES_CAP);
        let connection_request_bytes = CONNECTION_REQUESTS * max_request_bytes;
        MemoryBudget {
            arc_max_bytes,
            dirty_bytes_max,
            sync_io_bytes: dirty_bytes_max,
            request_bytes: dirty_bytes_max.max(connection_request_bytes),
            connection_request_bytes,
            intent_log_bytes: INTENT_LOG_BYTES,
            l2_index_bytes: (arc_max_bytes / L2_INDEX_DIVISOR)
                .clamp(L2_INDEX_BYTES_MIN, L2_INDEX_BYTES_CAP),
            fixed_bytes: FIXED_BYTES,
        }
    }

    /// The whole budget.
    pub fn total_bytes(&self) -> u64 {
        self.parts().iter().map(|(_, bytes)| bytes).sum()
    }

    /// What the process keeps when idle at most: a full cache, a full cache-device index and
    /// the fixed part.
    pub fn idle_bytes(&self) -> u64 {
        self.arc_max_bytes + self.l2_index_bytes + self.fixed_bytes
    }

    /// The allowances by name, in the order they are shown.
    pub fn parts(&self) -> [(&'static str, u64); 7] {
        [
            ("arc", self.arc_max_bytes),
            ("dirty", self.dirty_bytes_max),
            ("sync_io", self.sync_io_bytes),
            ("requests", self.request_bytes),
            ("intent_log", self.intent_log_bytes),
            ("l2_index", self.l2_index_bytes),
            ("fixed", self.fixed_bytes),
        ]
    }

    /// Checks the budget against the memory the process may use (`None`: unknown, no check).
    pub fn check_fits(&self, usable_bytes: Option<u64>) -> Result<(), BudgetError> {
        match usable_bytes {
            Some(usable) if self.total_bytes() > usable => Err(BudgetError::TooLarge {
                budget_bytes: self.total_bytes(),
                usable_bytes: usable,
            }),
            _ => Ok(()),
        }
    }
}

/// A memory budget the process cannot afford.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error(
        "the memory budget of {budget_bytes} bytes exceeds the {usable_bytes} bytes this process may use; lower --arc-max"
    )]
    TooLarge {
        budget_bytes: u64,
        usable_bytes: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowances_follow_the_cache_within_bounds() {
        let budget = MemoryBudget::for_arc_max(512 * MIB, 32 * MIB);
        assert_eq!(budget.dirty_bytes_max, 128 * MIB);
        assert_eq!(budget.sync_io_bytes, 128 * MIB);
        assert_eq!(budget.request_bytes, 128 * MIB);
        assert_eq!(budget.connection_request_bytes, 64 * MIB);
        assert_eq!(budget.l2_index_bytes, 512 * MIB / L2_INDEX_DIVISOR);
        assert_eq!(
            budget.total_bytes(),
            512 * MIB + 3 * 128 * MIB + INTENT_LOG_BYTES + budget.l2_index_bytes + FIXED_BYTES
        );
        let large = MemoryBudget::for_arc_max(4 * GIB, 32 * MIB);
        assert_eq!(large.dirty_bytes_max, GIB);
        assert!(budget.total_bytes() < 4 * GIB);

        let small = MemoryBudget::for_arc_max(64 * MIB, 32 * MIB);
        assert_eq!(small.dirty_bytes_max, DIRTY_BYTES_MIN);
        let huge = MemoryBudget::for_arc_max(64 * GIB, 32 * MIB);
        assert_eq!(huge.dirty_bytes_max, DIRTY_BYTES_CAP);
    }

    #[test]
    fn every_allowance_takes_the_largest_request() {
        let request = 32 * MIB;
        for arc in [0, MIB, 64 * MIB, GIB, 100 * GIB] {
            let budget = MemoryBudget::for_arc_max(arc, request);
            assert!(budget.request_bytes >= budget.connection_request_bytes);
            assert!(budget.connection_request_bytes >= request);
            assert!(budget.dirty_bytes_max >= request);
        }
    }

    #[test]
    fn a_budget_larger_than_memory_is_refused() {
        let budget = MemoryBudget::for_arc_max(GIB, 32 * MIB);
        assert!(budget.check_fits(None).is_ok());
        assert!(budget.check_fits(Some(64 * GIB)).is_ok());
        let err = budget.check_fits(Some(GIB)).unwrap_err();
        assert!(err.to_string().contains("--arc-max"), "{err}");
    }
}
