//! The object layer's error: what a read or a sync of an object set can fail with. A pipeline
//! failure stays the source (not text), so callers above can still tell a device error from a
//! full pool.

use cairn_device::ErrorClass;
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
    /// A bonus larger than the object's dnode has room for, or a block size change of an
    /// object that holds more than one block: the caller's mistake, refused before any change.
    #[error("object {object}: {what}")]
    Refused { object: u64, what: String },
}

impl ObjectError {
    /// What the failure means to a client (see `cairn_device::ErrorClass`): the pipeline's own
    /// class for its errors; damaged metadata and a vanished object are I/O errors (the data
    /// cannot be read, whatever was asked); a block past the object's capacity is a bad request.
    pub fn class(&self) -> ErrorClass {
        match self {
            ObjectError::Pipeline(err) => err.class(),
            ObjectError::OutOfRange { .. } | ObjectError::Refused { .. } => ErrorClass::Invalid,
            ObjectError::Corrupt(_) | ObjectError::NoSuchObject(_) | ObjectError::NotCached => {
                ErrorClass::Io
            }
        }
    }
}
