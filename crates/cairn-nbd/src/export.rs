//! What the server serves: the [`ExportProvider`] (names → exports) and [`Export`] (a byte-
//! addressed disk) traits, and the [`ExportError`] they fail with.
//!
//! The server is a front end: it knows nothing of pools or volumes. Every method of these
//! traits may block (disk I/O, waiting for a transaction group), so the server only ever calls
//! them from Tokio's blocking pool or inside `block_in_place`, never plainly from an async
//! worker thread. The server validates
//! ranges, alignment and read-only status *before* calling an export, so implementations may
//! assume `offset + len <= size()` and 512-byte alignment (except a request ending exactly at an
//! unaligned end of the export); they still return errors rather than panic on anything else.
//!
//! `flush` is export-wide: it makes durable every write that *completed* before it was called,
//! whichever connection issued it. That is what makes advertising `NBD_FLAG_CAN_MULTI_CONN`
//! safe.

use std::sync::Arc;

use bytes::Bytes;

use crate::proto;

/// Resolves export names to exports. Implemented by the composition root (the CLI serves every
/// volume of every imported pool as `pool/volume`).
pub trait ExportProvider: Send + Sync + 'static {
    /// Names of the exports a client may list (e.g. `"tank/vol"`).
    fn list(&self) -> Vec<String>;
    /// Opens an export for one connection; `None` means "no such export"
    /// (`NBD_REP_ERR_UNKNOWN`).
    fn open(&self, name: &str) -> Option<Arc<dyn Export>>;
    /// A human-readable description (`NBD_INFO_DESCRIPTION`, and the text after the name in
    /// `NBD_REP_SERVER`).
    fn description(&self, name: &str) -> Option<String> {
        let _ = name;
        None
    }
}

/// A block device as the server sees it. All calls may block.
pub trait Export: Send + Sync + 'static {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// The block size at which I/O is efficient (volblocksize). Advertised as the preferred block
    /// size after rounding to a power of two within [512, maximum payload].
    fn preferred_block_size(&self) -> u32;
    /// Read-only exports advertise `NBD_FLAG_READ_ONLY` and refuse writes with `EPERM`.
    fn readonly(&self) -> bool;
    /// Fills `buf` with the bytes at `offset`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError>;
    /// `read` if it can be done without blocking (the data is in memory): the server calls it
    /// on its async worker first and saves a trip through the blocking pool; `false` (the
    /// default) sends the request the ordinary way. Must not block, and must not fail: an
    /// error belongs to `read`.
    fn try_read_now(&self, offset: u64, buf: &mut [u8]) -> bool {
        let _ = (offset, buf);
        false
    }
    /// Writes `data` at `offset`; with `fua`, the data is durable when this returns.
    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError>;
    /// `write` of a payload the export may keep (the server hands over the buffer it read the
    /// request into, so an export that stores whole blocks can keep slices of it instead of
    /// copying). Defaults to `write`.
    fn write_bytes(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), ExportError> {
        self.write(offset, &data, fua)
    }
    /// A plain (not FUA) `write_bytes` done only if it can be done without blocking (no
    /// throttle, no disk read, no commit): the server calls it on its async worker first and
    /// saves a trip through the blocking pool. `None` (the default) means it would block and
    /// nothing was changed: the server then calls `write_bytes`. `Some` is the write's
    /// outcome, exactly as `write_bytes` would have reported it. Must not block.
    fn try_write_now(&self, offset: u64, data: &Bytes) -> Option<Result<(), ExportError>> {
        let _ = (offset, data);
        None
    }
    /// Makes every write completed before this call durable (export-wide).
    fn flush(&self) -> Result<(), ExportError>;
    /// Discards a range (a hint; the contents afterwards are unspecified until rewritten).
    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError>;
    /// Zeroes a range; `may_trim` allows leaving a hole instead of allocated zeroes.
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        fua: bool,
        may_trim: bool,
    ) -> Result<(), ExportError>;
    /// Extents covering [offset, offset+len): `(length, flags)` with [`NBD_STATE_HOLE`] /
    /// [`NBD_STATE_ZERO`]; may cover less than asked (at least one extent).
    fn block_status(&self, offset: u64, len: u64) -> Result<Vec<(u64, u32)>, ExportError>;
    /// A hint that the range will be read soon.
    fn cache(&self, offset: u64, len: u64) -> Result<(), ExportError> {
        let _ = (offset, len);
        Ok(())
    }
    /// True when zeroing is cheap (it leaves holes): `NBD_CMD_FLAG_FAST_ZERO` requests are then
    /// carried out; otherwise they fail at once with `ENOTSUP`, as the protocol asks.
    fn fast_zero(&self) -> bool {
        true
    }
}

/// `base:allocation` flag: the extent is not allocated.
pub const NBD_STATE_HOLE: u32 = proto::STATE_HOLE;
/// `base:allocation` flag: the extent reads as zeroes.
pub const NBD_STATE_ZERO: u32 = proto::STATE_ZERO;

/// Why an export operation failed. Each maps to one NBD error number ([`ExportError::errno`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportError {
    #[error("export is read-only")]
    ReadOnly,
    #[error("no space left")]
    NoSpace,
    #[error("request out of range")]
    OutOfRange,
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("I/O error: {0}")]
    Io(String),
    #[error("operation not supported")]
    NotSupported,
}

impl ExportError {
    /// The NBD error number sent to the client.
    pub fn errno(&self) -> u32 {
        match self {
            ExportError::ReadOnly => proto::EPERM,
            ExportError::NoSpace => proto::ENOSPC,
            ExportError::OutOfRange | ExportError::Invalid(_) => proto::EINVAL,
            ExportError::Io(_) => proto::EIO,
            ExportError::NotSupported => proto::ENOTSUP,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_nbd_numbers() {
        assert_eq!(ExportError::ReadOnly.errno(), 1);
        assert_eq!(ExportError::NoSpace.errno(), 28);
        assert_eq!(ExportError::OutOfRange.errno(), 22);
        assert_eq!(ExportError::Invalid("x".into()).errno(), 22);
        assert_eq!(ExportError::Io("x".into()).errno(), 5);
        assert_eq!(ExportError::NotSupported.errno(), 95);
    }
}
