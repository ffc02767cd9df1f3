//! The NBD adapter: every volume of every served pool as an NBD export named `pool/volume`.
//!
//! Exports are looked up per connection in the server's registry (`ServedPools`), so a volume
//! created after the server started is served as soon as its pool knows it. Each connection
//! gets its own view (`VolumeExport`) holding the intent-log lane its FUA writes commit on:
//! connections are spread over the volume's lanes so independent clients commit in parallel.
//!
//! Errors keep their meaning on the wire: a write to a read-only volume or pool answers EPERM
//! (NBD has no EROFS; EPERM is its word for it), a full pool ENOSPC, an access past the end
//! EINVAL, anything else EIO; the one table from an error's class to NBD's numbers is
//! `nbd_error`.
//! Durability is the volume's: a write returns once it is in the open txg; FLUSH and FUA
//! commit the volume's intent log (the connection's lane for FUA, every lane for FLUSH).

use crate::pools::ServedPools;
use cairn_dataset::{DatasetError, DatasetKind, Volume, WriteOptions};
use cairn_device::ErrorClass;
use cairn_engine::Pool;
use cairn_nbd::{Export, ExportError, ExportProvider};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// NBD view of one volume, for one connection.
pub struct VolumeExport {
    volume: Arc<Volume>,
    lane: usize,
}

/// The NBD reply to a volume's error: its class (decided by the error's type down its chain
/// of causes: `DatasetError::class`) through `nbd_error`, so a device EIO, a full pool and a
/// read-only target each get their own answer whatever layer they came through. The one
/// exception is an access past the end, which NBD names apart (`ExportError::OutOfRange`,
/// EINVAL on the wire like any bad request).
pub fn export_error(err: DatasetError) -> ExportError {
    if let DatasetError::OutOfRange { .. } = err {
        return ExportError::OutOfRange;
    }
    nbd_error(err.class(), cairn_device::error_chain(&err))
}

/// The NBD answer to an error class: the one class → NBD table, as `ErrorClass::errno` is
/// the one class → POSIX table. It lives here, in the front end, because `cairn-nbd` speaks
/// the protocol without knowing the pool (it depends on no storage crate) and
/// `cairn-device` knows nothing of NBD. `detail` is the error's whole chain, for the
/// answers that carry text.
///
/// NBD has few numbers (EPERM, EIO, EINVAL, ENOSPC, ENOTSUP, …):
/// - a read-only target is EPERM on the wire (NBD has no EROFS; EPERM is its word for it);
/// - a full pool is ENOSPC, and so is a quota (NBD has no EDQUOT: a volume's quota or an
///   ancestor's is `QuotaExceeded`, answered as ENOSPC);
/// - a suspended pool is EIO (see `DatasetError::class`);
/// - a bad request is EINVAL;
/// - "not found", "exists" and every namespace answer are EIO: a block device names nothing,
///   so such an answer from below means the volume's dataset itself failed (a volume's
///   errors never carry the namespace classes; they are here to keep the match exhaustive).
pub fn nbd_error(class: ErrorClass, detail: String) -> ExportError {
    match class {
        ErrorClass::ReadOnly => ExportError::ReadOnly,
        ErrorClass::NoSpace | ErrorClass::QuotaExceeded => ExportError::NoSpace,
        ErrorClass::Invalid => ExportError::Invalid(detail),
        ErrorClass::Io
        | ErrorClass::NotFound
        | ErrorClass::Exists
        | ErrorClass::NotDirectory
        | ErrorClass::IsDirectory
        | ErrorClass::NotEmpty
        | ErrorClass::NameTooLong
        | ErrorClass::TooManyLinks
        | ErrorClass::FileTooLarge
        | ErrorClass::NoAttribute
        | ErrorClass::ValueTooLarge => ExportError::Io(detail),
    }
}

impl VolumeExport {
    pub fn new(volume: Arc<Volume>, lane: usize) -> VolumeExport {
        VolumeExport { volume, lane }
    }

    /// The protocol layer validates every request's range before it reaches an export
    /// (`cairn-nbd`'s `validate`), so a request outside the volume here is a bug above, not a
    /// client's mistake. (The volume refuses it all the same: `DatasetError::OutOfRange`.)
    fn debug_check_range(&self, offset: u64, len: u64) {
        debug_assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.volume.size_bytes()),
            "request [{offset}, +{len}) outside the volume passed the protocol's checks"
        );
    }

    fn options(&self, fua: bool) -> WriteOptions {
        WriteOptions {
            fua,
            lane: self.lane,
        }
    }
}

impl Export for VolumeExport {
    fn size(&self) -> u64 {
        self.volume.size_bytes()
    }

    fn preferred_block_size(&self) -> u32 {
        self.volume.block_size()
    }

    fn readonly(&self) -> bool {
        self.volume.is_readonly()
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ExportError> {
        self.debug_check_range(offset, buf.len() as u64);
        self.volume.read(offset, buf).map_err(export_error)
    }

    fn try_read_now(&self, offset: u64, buf: &mut [u8]) -> bool {
        self.volume.try_read_cached(offset, buf).is_some()
    }

    fn write(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), ExportError> {
        self.debug_check_range(offset, data.len() as u64);
        self.volume
            .write_with(offset, data, self.options(fua))
            .map_err(export_error)
    }

    fn write_bytes(&self, offset: u64, data: bytes::Bytes, fua: bool) -> Result<(), ExportError> {
        self.debug_check_range(offset, data.len() as u64);
        self.volume
            .write_bytes_with(offset, data, self.options(fua))
            .map_err(export_error)
    }

    fn try_write_now(&self, offset: u64, data: &bytes::Bytes) -> Option<Result<(), ExportError>> {
        self.volume
            .try_write_now(offset, data, self.options(false))
            .map(|result| result.map_err(export_error))
    }

    fn flush(&self) -> Result<(), ExportError> {
        self.volume.flush().map_err(export_error)
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ExportError> {
        self.debug_check_range(offset, len);
        self.volume
            .trim_with(offset, len, self.options(fua))
            .map_err(export_error)
    }

    /// Zeros are stored as holes whatever the client asks: they read back as zeros either way
    /// and use no space (NO_HOLE is a hint about allocation, which a copy-on-write pool cannot
    /// honour anyway).
    fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        fua: bool,
        _may_trim: bool,
    ) -> Result<(), ExportError> {
        self.volume
            .write_zeroes_with(offset, len, self.options(fua))
            .map_err(export_error)
    }

    fn block_status(&self, offset: u64, len: u64) -> Result<Vec<(u64, u32)>, ExportError> {
        const HOLE: u32 = 1;
        const ZERO: u32 = 2;
        let runs = self
            .volume
            .block_status(offset, len)
            .map_err(export_error)?;
        Ok(runs
            .into_iter()
            .map(|(run_len, hole)| (run_len, if hole { HOLE | ZERO } else { 0 }))
            .collect())
    }
}

/// Every volume of every served pool.
pub struct PoolExports {
    served: Arc<ServedPools>,
    /// Connections opened so far (picks each one's log lane).
    connections: AtomicUsize,
}

impl PoolExports {
    pub fn new(served: Arc<ServedPools>) -> PoolExports {
        PoolExports {
            served,
            connections: AtomicUsize::new(0),
        }
    }

    fn pool_for(&self, export: &str) -> Option<Arc<Pool>> {
        self.served.get(export.split('/').next()?)
    }
}

impl ExportProvider for PoolExports {
    /// Every volume, and every volume snapshot (`pool/vol@snap`, read-only).
    fn list(&self) -> Vec<String> {
        let mut names = Vec::new();
        for pool in self.served.all() {
            let Ok(datasets) = pool.datasets() else {
                continue;
            };
            let volumes: Vec<String> = datasets
                .into_iter()
                .filter(|dataset| dataset.kind == DatasetKind::Volume)
                .map(|dataset| dataset.name)
                .collect();
            let snapshots = pool.snapshots(None).unwrap_or_default();
            names.extend(volumes.iter().cloned());
            names.extend(
                snapshots
                    .into_iter()
                    .filter(|snapshot| volumes.contains(&snapshot.dataset))
                    .map(|snapshot| snapshot.name),
            );
        }
        names
    }

    fn open(&self, name: &str) -> Option<Arc<dyn Export>> {
        let volume = self.pool_for(name)?.volume(name).ok()?;
        let lane = self.connections.fetch_add(1, Ordering::Relaxed);
        Some(Arc::new(VolumeExport::new(volume, lane)))
    }

    fn description(&self, name: &str) -> Option<String> {
        let volume = self.pool_for(name)?.volume(name).ok()?;
        Some(format!(
            "cairn volume {name} ({} bytes, volblocksize {})",
            volume.size_bytes(),
            volume.block_size()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an NBD client got for each kind of volume error before the tables were unified
    /// (the numbers on the wire, `ExportError::errno`): a change here is a change clients see.
    #[test]
    fn volume_errors_keep_their_nbd_numbers() {
        const EPERM: u32 = 1;
        const EIO: u32 = 5;
        const EINVAL: u32 = 22;
        const ENOSPC: u32 = 28;
        let cases = [
            (DatasetError::ReadOnly("tank/vol".into()), EPERM),
            (DatasetError::NoSpace("full".into()), ENOSPC),
            (DatasetError::QuotaExceeded("quota of tank".into()), ENOSPC),
            (DatasetError::NoSuchDataset("tank/vol".into()), EIO),
            (DatasetError::Exists("tank/vol".into()), EIO),
            (DatasetError::Corrupt("x".into()), EIO),
            (
                DatasetError::InvalidName {
                    name: "tank/".into(),
                    reason: "x".into(),
                },
                EINVAL,
            ),
        ];
        for (err, number) in cases {
            let text = format!("{err:?}");
            assert_eq!(export_error(err).errno(), number, "{text}");
        }
        let past_the_end = DatasetError::OutOfRange {
            name: "tank/vol".into(),
            op: "write",
            offset: 1 << 30,
            len: 4096,
            size: 4 << 20,
        };
        assert_eq!(export_error(past_the_end), ExportError::OutOfRange);
    }

    #[test]
    fn classes_map_to_nbd_numbers() {
        let cases = [
            (ErrorClass::Io, ExportError::Io("d".into())),
            (ErrorClass::NoSpace, ExportError::NoSpace),
            (ErrorClass::QuotaExceeded, ExportError::NoSpace),
            (ErrorClass::ReadOnly, ExportError::ReadOnly),
            (ErrorClass::Invalid, ExportError::Invalid("d".into())),
            (ErrorClass::NotFound, ExportError::Io("d".into())),
            (ErrorClass::Exists, ExportError::Io("d".into())),
        ];
        for (class, expected) in cases {
            assert_eq!(nbd_error(class, "d".into()), expected, "{class:?}");
        }
    }
}
