//! What every connection of one NFS server shares: the served pools, the port it answers
//! on, the write verifier of this server instance, the duplicate-request cache, the shares
//! whose refusals were reported (`access.rs`), the memory limit of calls in flight
//! (`memory.rs`), the stop flag, and the statistics (`crate::nfs_stats`, also held by the
//! served-pools registry).
//!
//! The write verifier (RFC 1813 §3.3.7): a client compares the verifier of its UNSTABLE
//! writes with COMMIT's and resends them when they differ, so it must change whenever data
//! acknowledged as UNSTABLE may have been lost, and never otherwise (a change makes every
//! client resend every write it has not seen committed). It is a mix of 64 random bits drawn
//! at each server start (a new process lost whatever the old one held in memory) and the
//! file's pool's `durability_epoch`, which the engine advances at every failure that may have
//! lost changes not yet durable — an intent-log write that failed, whoever's commit met it
//! (an NFS COMMIT, a FUSE fsync, a volume's FLUSH), a failed txg sync, a suspension of the
//! pool's I/O — and draws anew at each import. WRITE reads it before it writes (a failure
//! during the write shows at the COMMIT), COMMIT after it committed (a failure before or
//! during the commit shows in its reply). Uses `drc.rs` and `open_snapshots.rs` (the
//! snapshots `snapdir.rs` keeps open).

use super::drc::DuplicateCache;
use super::memory::MemoryLimit;
use super::open_snapshots::OpenSnapshots;
use super::sessions::V4State;
use crate::nfs_stats::NfsStats;
use crate::pools::ServedPools;
use cairn_engine::Pool;
use cairn_nfs::nfs3::WriteVerf;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

pub struct NfsContext {
    pub served: Arc<ServedPools>,
    /// The TCP port PORTMAP GETPORT answers for MOUNT and NFS (the one port served).
    pub port: u16,
    /// Drawn at start: this server instance's part of every verifier.
    instance: u64,
    pub drc: DuplicateCache,
    /// Calls, bytes, refusals and clients (`cairn stat nfs`).
    pub stats: Arc<NfsStats>,
    /// The durability epoch last seen of each pool (by guid): a change is a verifier change
    /// (counted in `stats`).
    epochs_seen: Mutex<HashMap<u64, u64>>,
    /// Snapshots browsed under `.cairn/snapshot`, kept open (`snapdir.rs`).
    pub(super) snapshots: Mutex<OpenSnapshots>,
    /// The shares (`POOL/DATASET`) without access lists whose refusal of a client beyond
    /// loopback has been recorded as an event (once each: `access.rs`).
    pub(super) unlisted_refused: Mutex<HashSet<String>>,
    /// What the calls of all connections may hold at once (`memory.rs`).
    pub(super) memory: MemoryLimit,
    /// Set when the server stops: readers waiting for memory give up.
    pub(super) stopping: AtomicBool,
    /// NFSv4.1 clients, sessions and opens (`sessions.rs`).
    pub(super) v4: V4State,
}

/// 64 bits the operating system chose at random (std's `RandomState` is seeded from the OS
/// random source, once per process and then per thread).
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x6e66_7376_6572_6966);
    hasher.finish()
}

/// A bijection of 64-bit values that spreads every input bit over the output (splitmix64's
/// finalizer): a different epoch always gives a different verifier.
fn mix(mut value: u64) -> u64 {
    value = (value ^ (value >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    value ^ (value >> 31)
}

impl NfsContext {
    /// `memory_max_bytes`: what the calls of all connections may hold at once.
    pub fn new(
        served: Arc<ServedPools>,
        port: u16,
        stats: Arc<NfsStats>,
        memory_max_bytes: u64,
    ) -> NfsContext {
        let instance = random_u64();
        NfsContext {
            v4: V4State::new((instance >> 32) as u32 ^ instance as u32),
            memory: MemoryLimit::new(memory_max_bytes, stats.clone()),
            stopping: AtomicBool::new(false),
            served,
            port,
            instance,
            drc: DuplicateCache::default(),
            stats,
            epochs_seen: Mutex::new(HashMap::new()),
            snapshots: Mutex::default(),
            unlisted_refused: Mutex::new(HashSet::new()),
        }
    }

    /// The write verifier for files of `pool`: this instance's random bits mixed with the
    /// pool's durability epoch (see the module comment).
    pub fn verifier(&self, pool: &Pool) -> WriteVerf {
        let epoch = pool.durability_epoch();
        let previous = self.epochs_seen.lock().insert(pool.guid(), epoch);
        if previous.is_some_and(|previous| previous != epoch) {
            self.stats.verifier_changed();
        }
        self.verifier_at(epoch)
    }

    /// The verifier for a pool whose durability epoch is `epoch`.
    fn verifier_at(&self, epoch: u64) -> WriteVerf {
        (self.instance ^ mix(epoch)).to_be_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_epoch_gives_its_own_verifier() {
        let served = Arc::new(ServedPools::default());
        let ctx = NfsContext::new(served, 0, Arc::new(NfsStats::default()), 1 << 20);
        let base = 0x1234_5678_9abc_def0_u64;
        let mut seen = std::collections::BTreeSet::new();
        for step in 0..1000 {
            let epoch = base.wrapping_add(step);
            assert_eq!(ctx.verifier_at(epoch), ctx.verifier_at(epoch));
            assert!(
                seen.insert(ctx.verifier_at(epoch)),
                "epoch {epoch} repeated a verifier"
            );
        }
    }
}
