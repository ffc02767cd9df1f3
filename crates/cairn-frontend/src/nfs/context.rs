//! What every connection of one NFS server shares: the served pools, the port it answers
//! on, the write verifier of this server instance, the duplicate-request cache and the
//! statistics (`crate::nfs_stats`, also held by the served-pools registry).
//!
//! The write verifier (RFC 1813 §3.3.7) is 64 random bits drawn at each server start: a
//! client compares the verifier of its UNSTABLE writes with COMMIT's and resends them when
//! they differ, so it must change whenever data acknowledged as UNSTABLE may have been lost.
//! A new process does that; within one, `rotate_verifier` is the hook for any failure that
//! may have dropped acknowledged data (today: a write or COMMIT whose commit to the intent
//! log failed with an I/O error — `write.rs` calls it; a pool suspension is also such a
//! failure, and reaches it the same way, as the I/O error of the next WRITE or COMMIT).
//! Uses `drc.rs`.

use super::drc::DuplicateCache;
use crate::nfs_stats::NfsStats;
use crate::pools::ServedPools;
use cairn_nfs::nfs3::WriteVerf;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct NfsContext {
    pub served: Arc<ServedPools>,
    /// The TCP port PORTMAP GETPORT answers for MOUNT and NFS (the one port served).
    pub port: u16,
    verifier: AtomicU64,
    pub drc: DuplicateCache,
    /// Calls, bytes, refusals and clients (`cairn stat nfs`).
    pub stats: Arc<NfsStats>,
}

/// 64 bits the operating system chose at random (std's `RandomState` is seeded from the OS
/// random source, once per process and then per thread).
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x6e66_7376_6572_6966);
    hasher.finish()
}

impl NfsContext {
    pub fn new(served: Arc<ServedPools>, port: u16, stats: Arc<NfsStats>) -> NfsContext {
        NfsContext {
            served,
            port,
            verifier: AtomicU64::new(random_u64()),
            drc: DuplicateCache::default(),
            stats,
        }
    }

    /// This server instance's write verifier.
    pub fn verifier(&self) -> WriteVerf {
        self.verifier.load(Ordering::SeqCst).to_be_bytes()
    }

    /// Draws a new verifier: clients resend every write they have not seen committed.
    pub fn rotate_verifier(&self) {
        let mut next = random_u64();
        let old = self.verifier.load(Ordering::SeqCst);
        if next == old {
            next = next.wrapping_add(1);
        }
        self.verifier.store(next, Ordering::SeqCst);
        self.stats.verifier_changed();
    }
}
