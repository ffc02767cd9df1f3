//! The object layer's error: what a read or a sync of an object set can fail with. A pipeline
//! failure stays the source (not text), so callers above can still tell a device error from a
//! full pool.

use cairn_pipeline::PipelineError;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ObjectError {
    #[error(transparent)]
    Pipeline(#[from] PipelineError),
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    #[error("object {0} does not exist")]
    NoSuchObject(u64),
    #[error("block {blkid} of object {object} is beyond its capacity")]
    OutOfRange { object: u64, blkid: u64 },
    /// A read that must not wait for I/O found something it needs not in memory.
    #[error("not in memory")]
    NotCached,
}
