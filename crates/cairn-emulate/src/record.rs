//! `RecordingDevice` and `replay`: a write log of everything that reached a device's media, and
//! the images rebuilt from it.
//!
//! Crash tests put a `RecordingDevice` between an `EmulatedDevice` and its backing file, so the
//! log holds exactly what reached the (emulated) media, in order: writes and discards from the
//! moment the file was created, destages of the volatile cache, FUA writes and the sectors a
//! power cut landed or rolled back. After a failing round the test keeps the log directory (with
//! a `cut.txt` stating the seed and the cut point); `replay` (the `replay-cut` example:
//! `cargo run -p cairn-emulate --example replay-cut -- DIR`) applies the logs to fresh sparse
//! files and so rebuilds the crashed images, which `cairn pool import -d` and `pool check` can
//! then inspect. Flushes are logged as markers only (they change no bytes).
//!
//! Log format, one file `<image name>.wlog` per device, integers little-endian:
//! header `b"CAIRNWL1"`, size (u64), name length (u32), name (UTF-8, a file name);
//! then records: kind (u8: 1 write, 2 discard, 3 flush), offset (u64), length (u64), and for a
//! write `length` bytes of data. A log cut short (the process died mid-record) replays up to its
//! last whole record.
//!
//! Invariant: a record is appended while the device's lock is held across the backing call, so
//! the log's order is the order the bytes reached the backing device.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use cairn_device::device::{Device, DeviceError};
use cairn_device::file::{FileDevice, FileOptions};

const MAGIC: &[u8; 8] = b"CAIRNWL1";
const KIND_WRITE: u8 = 1;
const KIND_DISCARD: u8 = 2;
const KIND_FLUSH: u8 = 3;
/// The extension of a write log.
pub const LOG_EXTENSION: &str = "wlog";

/// A device that appends every change it forwards to a write log.
pub struct RecordingDevice {
    inner: Arc<dyn Device>,
    log: Mutex<BufWriter<File>>,
    log_path: PathBuf,
}

impl RecordingDevice {
    /// Wraps `inner`, appending to `<dir>/<name>.wlog` (created with its header if missing;
    /// appended to otherwise, so a pool's create and later imports share one log).
    pub fn new(
        inner: Arc<dyn Device>,
        dir: &Path,
        name: &str,
    ) -> Result<RecordingDevice, DeviceError> {
        let log_path = dir.join(format!("{name}.{LOG_EXTENSION}"));
        let io = |source: std::io::Error| DeviceError::Io {
            device: log_path.display().to_string(),
            op: "open write log",
            offset: 0,
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io)?;
        let fresh = file.metadata().map_err(io)?.len() == 0;
        let mut log = BufWriter::new(file);
        if fresh {
            log.write_all(MAGIC).map_err(io)?;
            log.write_all(&inner.size_bytes().to_le_bytes())
                .map_err(io)?;
            log.write_all(&(name.len() as u32).to_le_bytes())
                .map_err(io)?;
            log.write_all(name.as_bytes()).map_err(io)?;
            log.flush().map_err(io)?;
        }
        Ok(RecordingDevice {
            inner,
            log: Mutex::new(log),
            log_path,
        })
    }

    fn append(
        &self,
        log: &mut BufWriter<File>,
        kind: u8,
        offset: u64,
        len: u64,
        bufs: &[&[u8]],
    ) -> Result<(), DeviceError> {
        let io = |source: std::io::Error| DeviceError::Io {
            device: self.log_path.display().to_string(),
            op: "append to write log",
            offset,
            source,
        };
        log.write_all(&[kind]).map_err(io)?;
        log.write_all(&offset.to_le_bytes()).map_err(io)?;
        log.write_all(&len.to_le_bytes()).map_err(io)?;
        for buf in bufs {
            log.write_all(buf).map_err(io)?;
        }
        // The test process may panic or be killed next: every record is in the file at once.
        log.flush().map_err(io)
    }
}

impl Device for RecordingDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        self.inner.read_vectored_at(offset, bufs)
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        let mut log = self.log.lock();
        self.inner.write_vectored_at(offset, bufs)?;
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.append(&mut log, KIND_WRITE, offset, len, bufs)
    }

    fn write_vectored_at_fua(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        let mut log = self.log.lock();
        self.inner.write_vectored_at_fua(offset, bufs)?;
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.append(&mut log, KIND_WRITE, offset, len, bufs)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let mut log = self.log.lock();
        self.inner.flush()?;
        self.append(&mut log, KIND_FLUSH, 0, 0, &[])
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        let mut log = self.log.lock();
        self.inner.discard(offset, len)?;
        self.append(&mut log, KIND_DISCARD, offset, len, &[])
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn is_rotational(&self) -> bool {
        self.inner.is_rotational()
    }

    fn concurrency_hint(&self) -> usize {
        self.inner.concurrency_hint()
    }
}

/// Errors of `replay`.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a cairn write log ({reason})")]
    Format { path: PathBuf, reason: String },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("{0}: holds no write log (*.{LOG_EXTENSION})")]
    Empty(PathBuf),
}

/// One image `replay` rebuilt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rebuilt {
    pub image: PathBuf,
    pub records: u64,
    /// The log ended in the middle of a record (the rest was not applied).
    pub truncated: bool,
}

/// Rebuilds every image logged in `log_dir` into `out_dir` (as sparse files of the logged size,
/// named as logged), applying the logs' writes and discards in order.
pub fn replay(log_dir: &Path, out_dir: &Path) -> Result<Vec<Rebuilt>, ReplayError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ReplayError::Io {
            path: path.clone(),
            source,
        }
    };
    let mut logs: Vec<PathBuf> = std::fs::read_dir(log_dir)
        .map_err(io(log_dir))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == LOG_EXTENSION))
        .collect();
    logs.sort();
    if logs.is_empty() {
        return Err(ReplayError::Empty(log_dir.to_path_buf()));
    }
    std::fs::create_dir_all(out_dir).map_err(io(out_dir))?;
    logs.iter().map(|log| replay_one(log, out_dir)).collect()
}

fn replay_one(log_path: &Path, out_dir: &Path) -> Result<Rebuilt, ReplayError> {
    let io = |source| ReplayError::Io {
        path: log_path.to_path_buf(),
        source,
    };
    let format = |reason: &str| ReplayError::Format {
        path: log_path.to_path_buf(),
        reason: reason.to_string(),
    };
    let mut log = BufReader::new(File::open(log_path).map_err(io)?);
    let mut magic = [0u8; 8];
    log.read_exact(&mut magic).map_err(io)?;
    if &magic != MAGIC {
        return Err(format("bad magic"));
    }
    let size_bytes = read_u64(&mut log).map_err(io)?;
    let mut name_len = [0u8; 4];
    log.read_exact(&mut name_len).map_err(io)?;
    let name_len = u32::from_le_bytes(name_len) as usize;
    if name_len == 0 || name_len > 255 {
        return Err(format("bad image name length"));
    }
    let mut name = vec![0u8; name_len];
    log.read_exact(&mut name).map_err(io)?;
    let name = String::from_utf8(name).map_err(|_| format("image name is not UTF-8"))?;
    if name.contains('/') || name == "." || name == ".." {
        return Err(format("image name is not a file name"));
    }
    let image = out_dir.join(&name);
    // A stale image from an earlier replay must not leave bytes the log never wrote.
    match std::fs::remove_file(&image) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let device = FileDevice::open(
        &image,
        FileOptions {
            create_size_bytes: Some(size_bytes),
            ..FileOptions::default()
        },
    )?;
    let (records, truncated) = apply_records(&mut log, &device, log_path)?;
    device.flush()?;
    Ok(Rebuilt {
        image,
        records,
        truncated,
    })
}

/// Applies records until the log ends; returns how many, and whether the last was cut short.
fn apply_records(
    log: &mut impl Read,
    device: &dyn Device,
    log_path: &Path,
) -> Result<(u64, bool), ReplayError> {
    let mut records = 0;
    let mut data = Vec::new();
    loop {
        let mut head = [0u8; 17];
        match read_full(log, &mut head) {
            Ok(0) => return Ok((records, false)),
            Ok(n) if n < head.len() => return Ok((records, true)),
            Ok(_) => {}
            Err(source) => {
                return Err(ReplayError::Io {
                    path: log_path.to_path_buf(),
                    source,
                });
            }
        }
        let offset = u64::from_le_bytes(head[1..9].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(head[9..17].try_into().expect("8 bytes"));
        if offset
            .checked_add(len)
            .is_none_or(|end| end > device.size_bytes())
        {
            return Err(ReplayError::Format {
                path: log_path.to_path_buf(),
                reason: format!("record {records} lies outside the image"),
            });
        }
        match head[0] {
            KIND_WRITE => {
                data.resize(len as usize, 0);
                let n = read_full(log, &mut data).map_err(|source| ReplayError::Io {
                    path: log_path.to_path_buf(),
                    source,
                })?;
                if n < data.len() {
                    return Ok((records, true));
                }
                device.write_at(offset, &data)?;
            }
            KIND_DISCARD => device.discard(offset, len)?,
            KIND_FLUSH => {}
            kind => {
                return Err(ReplayError::Format {
                    path: log_path.to_path_buf(),
                    reason: format!("record {records} has unknown kind {kind}"),
                });
            }
        }
        records += 1;
    }
}

fn read_u64(reader: &mut impl Read) -> std::io::Result<u64> {
    let mut bytes = [0u8; 8];
    reader.read_exact(&mut bytes)?;
    Ok(u64::from_le_bytes(bytes))
}

/// Reads until `buf` is full or the input ends; returns the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulated::{DeviceModel, EmuOptions, EmulatedDevice, PowerSwitch};

    #[test]
    fn replay_rebuilds_the_image_a_power_cut_left() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("record");
        let image = dir.path().join("d0.img");
        let file = FileDevice::open(
            &image,
            FileOptions {
                create_size_bytes: Some(1 << 20),
                ..FileOptions::default()
            },
        )
        .unwrap();
        let recorded = RecordingDevice::new(Arc::new(file), &logs, "d0.img").unwrap();
        let switch = Arc::new(PowerSwitch::with_seed(4));
        let device = EmulatedDevice::new(
            Arc::new(recorded),
            DeviceModel::SsdSata,
            EmuOptions {
                seed: 4,
                clock: None,
                destage_per_write_probability: 0.3,
                power: Some(switch.clone()),
            },
        );
        for i in 0..40u64 {
            let data = vec![i as u8 + 1; 4096 + (i as usize % 3) * 512];
            if i % 7 == 0 {
                device.flush().unwrap();
            }
            if i % 5 == 0 {
                device.discard(i * 2048, 4096).unwrap();
            }
            device.write_at(i * 8192 % (1 << 19), &data).unwrap();
        }
        switch.arm_after_ops(1);
        assert!(device.write_vectored_at_fua(0, &[&[0xEE; 8192]]).is_err());
        let crashed = std::fs::read(&image).unwrap();

        let out = dir.path().join("rebuilt");
        let rebuilt = replay(&logs, &out).unwrap();
        assert_eq!(rebuilt.len(), 1);
        assert!(!rebuilt[0].truncated);
        assert!(rebuilt[0].records > 10, "{rebuilt:?}");
        assert_eq!(rebuilt[0].image, out.join("d0.img"));
        assert!(
            std::fs::read(&rebuilt[0].image).unwrap() == crashed,
            "the rebuilt image equals the crashed one"
        );

        // A log cut short mid-record replays its whole records.
        let log = logs.join("d0.img.wlog");
        let len = std::fs::metadata(&log).unwrap().len();
        let file = OpenOptions::new().write(true).open(&log).unwrap();
        file.set_len(len - 1).unwrap();
        let again = replay(&logs, &out).unwrap();
        assert!(again[0].truncated);
        assert_eq!(again[0].records, rebuilt[0].records - 1);
        assert!(matches!(
            replay(dir.path(), &out),
            Err(ReplayError::Empty(_))
        ));
    }
}
