//! The device trait: the contract every leaf backend keeps.
//!
//! Durability contract: `write_vectored_at` returning `Ok` means the device accepted the bytes,
//! not that they survive a power cut; only a later successful `flush` makes them durable (unless
//! the device has no volatile cache). `write_vectored_at_fua` returning `Ok` means its own bytes
//! are durable. Reads see every completed write, flushed or not.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum DeviceError {
    #[error("{device}: {op} at offset {offset} failed")]
    Io {
        device: String,
        op: &'static str,
        offset: u64,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{device}: {op} of {len} bytes at offset {offset} is outside the device ({size} bytes)"
    )]
    OutOfRange {
        device: String,
        op: &'static str,
        offset: u64,
        len: u64,
        size: u64,
    },
    #[error("{device}: device is missing")]
    Missing { device: String },
    #[error("{device}: injected {fault} fault on {op} at offset {offset}")]
    Injected {
        device: String,
        fault: &'static str,
        op: &'static str,
        offset: u64,
    },
    #[error("{device}: device has lost power")]
    PoweredOff { device: String },
    #[error("{device}: {reason}")]
    Invalid { device: String, reason: String },
}

/// A flat, byte-addressed storage device.
pub trait Device: Send + Sync + 'static {
    /// Usable size in bytes.
    fn size_bytes(&self) -> u64;
    /// Reads `sum(bufs.len())` bytes starting at `offset` into `bufs`, in order.
    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError>;
    /// Writes the concatenation of `bufs` starting at `offset`.
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError>;
    /// Writes like `write_vectored_at` and returns only once these bytes are durable (Force
    /// Unit Access), leaving other unflushed writes as they are: a SATA or SCSI FUA write, or
    /// `RWF_DSYNC` on a file. Unlike a flush it is a queued command, so several can be in
    /// flight. The default writes and then flushes everything, which is correct but costs a
    /// whole-cache flush.
    fn write_vectored_at_fua(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        self.write_vectored_at(offset, bufs)?;
        self.flush()
    }
    /// Makes every completed write durable.
    fn flush(&self) -> Result<(), DeviceError>;
    /// Tells the device the range holds nothing of value (TRIM / hole punch). Reads of a
    /// discarded range may return anything.
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError>;
    /// Human-readable name (the spec it was opened from).
    fn describe(&self) -> String;
    /// Rotational media benefit from aggregation and offset ordering more than flash does.
    fn is_rotational(&self) -> bool {
        false
    }
    /// How many requests the device serves usefully in parallel.
    fn concurrency_hint(&self) -> usize {
        4
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        self.read_vectored_at(offset, &mut [buf])
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), DeviceError> {
        self.write_vectored_at(offset, &[buf])
    }
}

/// Checks that `[offset, offset + len)` lies inside a device of `size` bytes.
pub fn check_range(
    device: &dyn Device,
    op: &'static str,
    offset: u64,
    len: u64,
) -> Result<(), DeviceError> {
    let size = device.size_bytes();
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(DeviceError::OutOfRange {
            device: device.describe(),
            op,
            offset,
            len,
            size,
        }),
    }
}

impl DeviceError {
    /// A copy of this error, for fanning one failed device call out to every request it served.
    /// An `Io` error keeps its kind, OS error code (if any) and message.
    pub fn duplicate(&self) -> DeviceError {
        match self {
            DeviceError::Io {
                device,
                op,
                offset,
                source,
            } => DeviceError::Io {
                device: device.clone(),
                op,
                offset: *offset,
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            DeviceError::OutOfRange {
                device,
                op,
                offset,
                len,
                size,
            } => DeviceError::OutOfRange {
                device: device.clone(),
                op,
                offset: *offset,
                len: *len,
                size: *size,
            },
            DeviceError::Missing { device } => DeviceError::Missing {
                device: device.clone(),
            },
            DeviceError::Injected {
                device,
                fault,
                op,
                offset,
            } => DeviceError::Injected {
                device: device.clone(),
                fault,
                op,
                offset: *offset,
            },
            DeviceError::PoweredOff { device } => DeviceError::PoweredOff {
                device: device.clone(),
            },
            DeviceError::Invalid { device, reason } => DeviceError::Invalid {
                device: device.clone(),
                reason: reason.clone(),
            },
        }
    }
}
