//! The txg engine's errors: `SyncError` (what the syncer reports), `Suspension` (why the engine
//! refuses work, failed for good or I/O suspended) with `SuspendReason` (a cause that is only
//! text), and `TxgError` (what a waiter or a refused hold gets).
//!
//! Invariant: a suspension keeps its cause whole (boxed, shared by `Arc`), so every waiter's copy
//! still leads through `source()` to the device error that stopped the pool. This file is at the
//! bottom of the `txg` module with `config` and `stats`: it depends on no sibling; the state
//! records suspensions and the engine, sync thread and `SuspendHandle` make them.

use std::fmt;

/// Why a txg sync failed, as the syncer (the layer above) reports it. Boxed because the pool
/// cannot name the syncer's error type; the box keeps it whole, so the suspension that follows
/// still holds the device error (or full pool) that caused it, for `source()` and downcasts.
pub type SyncError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why the engine refuses work: a sync failed (for good), or the syncer suspended I/O until
/// devices come back. Every waiter gets a copy, hence the `Arc` (errors are not `Clone`); the
/// cause keeps its own type, so `source()` leads to the device error (or whatever it was) and
/// a front end can still tell what happened.
#[derive(Clone, Debug)]
pub struct Suspension {
    what: String,
    cause: std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>,
}

/// A suspension reason that is only text: a panic's message, or the syncer's own account of
/// an I/O suspension (`SuspendHandle::suspend`).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SuspendReason(pub String);

impl Suspension {
    pub fn new(
        what: impl Into<String>,
        cause: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Suspension {
        Suspension {
            what: what.into(),
            cause: std::sync::Arc::from(cause.into()),
        }
    }

    /// What made the engine stop (the first error of the chain below this one).
    pub fn cause(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.cause
    }

    /// The whole story as text: what stopped and every cause below it.
    pub fn reason(&self) -> String {
        cairn_device::error_chain(self)
    }
}

impl fmt::Display for Suspension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Suspension {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.cause)
    }
}

/// Two suspensions are the same when they tell the same story (waiters compare results).
impl PartialEq for Suspension {
    fn eq(&self, other: &Suspension) -> bool {
        std::sync::Arc::ptr_eq(&self.cause, &other.cause) || self.reason() == other.reason()
    }
}

impl Eq for Suspension {}

/// Why waiting for a txg failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TxgError {
    /// A sync failed: the pool stops syncing and every waiter gets the error.
    #[error("pool suspended")]
    Suspended(#[source] Suspension),
    /// The engine was shut down before the txg synced (or a hold was asked after shutdown).
    #[error("txg engine shut down")]
    ShutDown,
}

impl TxgError {
    /// Both are I/O errors to a client: the pool cannot write now. A suspension is not "read
    /// only" (the target still takes writes once the devices are back and `pool clear` ran).
    pub fn class(&self) -> cairn_device::ErrorClass {
        match self {
            TxgError::Suspended(_) | TxgError::ShutDown => cairn_device::ErrorClass::Io,
        }
    }
}
