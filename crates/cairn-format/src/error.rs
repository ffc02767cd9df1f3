//! Errors raised while decoding on-disk bytes. A decode error means "these bytes are not a valid
//! structure of this kind" — damaged media, a torn write, or a device from something else — and is
//! always an operating error for the caller to handle, never a reason to panic.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FormatError {
    #[error("{what}: buffer is {actual} bytes, need {needed}")]
    TooShort {
        what: &'static str,
        needed: usize,
        actual: usize,
    },
    #[error("{what}: bad magic {found:#x}")]
    BadMagic { what: &'static str, found: u64 },
    #[error("{what}: format version {found} is newer than supported {supported}")]
    UnsupportedVersion {
        what: &'static str,
        found: u64,
        supported: u64,
    },
    /// A pool structure (label config, uberblock) of a format version outside
    /// `FORMAT_VERSION_MIN..=FORMAT_VERSION`: intact, but not one this build can read.
    #[error(
        "{what}: pool format version {found} is not supported: this build reads {}",
        crate::readable_format_versions()
    )]
    UnreadableVersion { what: &'static str, found: u64 },
    #[error("{what}: embedded checksum mismatch")]
    ChecksumMismatch { what: &'static str },
    #[error("{what}: invalid field {field} = {value}")]
    InvalidField {
        what: &'static str,
        field: &'static str,
        value: u64,
    },
    #[error("{what}: cannot decode payload: {reason}")]
    Payload { what: &'static str, reason: String },
}

impl FormatError {
    pub(crate) fn invalid(what: &'static str, field: &'static str, value: u64) -> Self {
        FormatError::InvalidField { what, field, value }
    }

    pub(crate) fn need(what: &'static str, needed: usize, actual: usize) -> Result<(), Self> {
        if actual < needed {
            Err(FormatError::TooShort {
                what,
                needed,
                actual,
            })
        } else {
            Ok(())
        }
    }
}
