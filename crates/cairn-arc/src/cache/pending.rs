//! Reads in flight: `Pending`, which the reader that claimed a block's read completes and
//! others wait on, and `Lookup`, what a lookup found.
//!
//! Invariant: a `Pending` is completed once; every waiter then gets the block, or `None` if
//! the read failed (and reads it for itself). How it fits: `shard` keeps a shard's pendings in
//! its in-flight table, under the same lock as the cached blocks, so two readers of one block
//! never both read it.

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A read in flight: the reader that claimed it completes it; others wait for it.
pub struct Pending {
    pub(super) result: Mutex<Option<Option<Bytes>>>,
    pub(super) done: Condvar,
    /// Claimed by read-ahead (its I/O is queued at read-ahead priority).
    prefetch: bool,
    /// A demand reader has waited on it (and raised its priority, once).
    demanded: AtomicBool,
}

impl Pending {
    pub(super) fn new(prefetch: bool) -> Arc<Pending> {
        Arc::new(Pending {
            result: Mutex::new(None),
            done: Condvar::new(),
            prefetch,
            demanded: AtomicBool::new(false),
        })
    }

    /// Whether the read was claimed by read-ahead.
    pub fn is_prefetch(&self) -> bool {
        self.prefetch
    }

    /// Whether a demand reader waits for this read.
    pub fn is_demanded(&self) -> bool {
        self.demanded.load(Ordering::Acquire)
    }

    /// Marks a demand reader waiting; true for the first one (who raises the I/O's priority).
    pub fn note_demand(&self) -> bool {
        !self.demanded.swap(true, Ordering::AcqRel)
    }

    /// Waits for the claiming reader: the block, or `None` if its read failed (the waiter
    /// then reads for itself and gets the error first hand).
    pub fn wait(&self) -> Option<Bytes> {
        let mut result = self.result.lock();
        while result.is_none() {
            self.done.wait(&mut result);
        }
        result.clone().flatten()
    }
}

/// What a lookup found.
pub enum Lookup {
    Hit(Bytes),
    /// Another reader is reading the block: wait on it.
    InFlight(Arc<Pending>),
    /// Not cached, not being read: the caller reads it and calls `complete`.
    Claimed(Arc<Pending>),
}
