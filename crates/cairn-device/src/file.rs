//! `FileDevice`: a regular file or a block device as a leaf.
//!
//! I/O uses positional vectored system calls (`preadv`/`pwritev`), looping on short transfers, so
//! several requests merged by the queue cost one system call and no copy. `flush` is
//! `fdatasync`; `discard` punches a hole (`fallocate(PUNCH_HOLE | KEEP_SIZE)`) in files and issues
//! `BLKDISCARD` on block devices, and is silently skipped where unsupported (a discard is only a
//! hint).
//!
//! Unless opened read-only, the device holds an exclusive `flock` for as long as it is open, so
//! two processes (or two opens in one process) cannot both write one pool device. The lock goes
//! away with the file descriptor, also when the process is killed.
//!
//! With `direct_io` the file is opened `O_DIRECT`: the page cache is bypassed and the kernel then
//! requires every offset, length and buffer address to be a multiple of the logical block size
//! (`direct_io_alignment_bytes()`); misaligned requests fail with `EINVAL`. Callers that enable it
//! must align their buffers.
//!
//! Invariant: the size is fixed at open; every request is range-checked against it before any
//! system call.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{FallocateFlags, FileType, FlockOperation, Mode, OFlags, SeekFrom};
use rustix::io::{Errno, ReadWriteFlags};

use crate::device::{Device, DeviceError, check_range};

/// How to open a `FileDevice`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileOptions {
    /// Create a missing regular file (sparse) of this size. An existing file is never resized:
    /// it may hold someone's data, and its size is what the user gave us.
    pub create_size_bytes: Option<u64>,
    /// Open with `O_DIRECT`; callers must then align offsets, lengths and buffers.
    pub direct_io: bool,
    /// Open read-only, take no lock, change nothing.
    pub read_only: bool,
}

/// Linux allows at most this many buffers per `preadv`/`pwritev` call.
const IOV_MAX: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Regular,
    Block,
}

/// A regular file or a block device.
#[derive(Debug)]
pub struct FileDevice {
    fd: OwnedFd,
    path: PathBuf,
    description: String,
    size_bytes: u64,
    kind: Kind,
    options: FileOptions,
    rotational: bool,
    alignment_bytes: u64,
}

// BLKGETSIZE64 = _IOR(0x12, 114, size_t); BLKDISCARD = _IO(0x12, 119) taking a `u64[2]`.
const BLKGETSIZE64: rustix::ioctl::Opcode = rustix::ioctl::opcode::read::<usize>(0x12, 114);
const BLKDISCARD: rustix::ioctl::Opcode = rustix::ioctl::opcode::none(0x12, 119);

impl FileDevice {
    /// Opens (and maybe creates) `path`. See `FileOptions`.
    pub fn open(path: impl AsRef<Path>, options: FileOptions) -> Result<FileDevice, DeviceError> {
        let path = path.as_ref().to_path_buf();
        let description = path.display().to_string();
        let io_err = |op: &'static str, e: Errno| DeviceError::Io {
            device: description.clone(),
            op,
            offset: 0,
            source: e.into(),
        };

        let mut flags = OFlags::CLOEXEC;
        flags |= if options.read_only {
            OFlags::RDONLY
        } else {
            OFlags::RDWR
        };
        if options.direct_io {
            flags |= OFlags::DIRECT;
        }
        let (fd, created) =
            open_or_create(&path, flags, &options).map_err(|e| io_err("open", e))?;

        // Lock before changing anything: a second opener must not extend a file in use.
        if !options.read_only {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => {
                    return Err(DeviceError::Invalid {
                        device: description,
                        reason: "in use by another process (exclusive lock is held)".into(),
                    });
                }
                Err(e) => return Err(io_err("lock", e)),
            }
        }

        let stat = rustix::fs::fstat(&fd).map_err(|e| io_err("stat", e))?;
        let (kind, size_bytes, rotational, alignment_bytes) =
            match FileType::from_raw_mode(stat.st_mode) {
                FileType::RegularFile => {
                    let mut size = stat.st_size as u64;
                    if created && let Some(want) = options.create_size_bytes {
                        if let Err(e) = size_new_file(&fd, &path, want) {
                            // Leave no empty file behind for a creation that failed.
                            let _ = std::fs::remove_file(&path);
                            return Err(io_err("create", e));
                        }
                        size = want;
                    }
                    (Kind::Regular, size, false, 4096)
                }
                FileType::BlockDevice => {
                    let size = block_device_size(&fd).map_err(|e| io_err("size", e))?;
                    let sector = rustix::fs::ioctl_blksszget(&fd).unwrap_or(512) as u64;
                    let rotational = block_device_rotational(stat.st_rdev);
                    (Kind::Block, size, rotational, sector)
                }
                other => {
                    return Err(DeviceError::Invalid {
                        device: description,
                        reason: format!("not a regular file or block device ({other:?})"),
                    });
                }
            };

        Ok(FileDevice {
            fd,
            path,
            description,
            size_bytes,
            kind,
            options,
            rotational,
            alignment_bytes,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn options(&self) -> FileOptions {
        self.options
    }

    pub fn is_block_device(&self) -> bool {
        self.kind == Kind::Block
    }

    /// The alignment `O_DIRECT` requires: the logical sector size of a block device, 4096 for
    /// files (safe on every common file system).
    pub fn direct_io_alignment_bytes(&self) -> u64 {
        self.alignment_bytes
    }

    fn error(&self, op: &'static str, offset: u64, e: impl Into<std::io::Error>) -> DeviceError {
        DeviceError::Io {
            device: self.description.clone(),
            op,
            offset,
            source: e.into(),
        }
    }

    /// Positional vectored write with `pwritev2` flags, looping on short writes (each piece
    /// carries the flags, so a `DSYNC` write is durable as a whole when this returns).
    fn write_with_flags(
        &self,
        offset: u64,
        bufs: &[&[u8]],
        flags: ReadWriteFlags,
    ) -> Result<(), DeviceError> {
        self.check_writable("write")?;
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        check_range(self, "write", offset, total)?;
        let mut slices: Vec<IoSlice<'_>> = bufs
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| IoSlice::new(b))
            .collect();
        let mut rest: &mut [IoSlice<'_>] = &mut slices;
        let mut pos = offset;
        while !rest.is_empty() {
            let n = rest.len().min(IOV_MAX);
            match rustix::io::pwritev2(&self.fd, &rest[..n], pos, flags) {
                Ok(0) => {
                    return Err(self.error(
                        "write",
                        pos,
                        std::io::Error::from(std::io::ErrorKind::WriteZero),
                    ));
                }
                Ok(done) => {
                    pos += done as u64;
                    IoSlice::advance_slices(&mut rest, done);
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(self.error("write", pos, e)),
            }
        }
        Ok(())
    }

    fn check_writable(&self, op: &'static str) -> Result<(), DeviceError> {
        if self.options.read_only {
            return Err(DeviceError::Invalid {
                device: self.description.clone(),
                reason: format!("{op} refused: opened read-only"),
            });
        }
        Ok(())
    }
}

/// Opens `path`; with `create_size_bytes` (and not read-only) creates it if missing, with
/// `O_EXCL` so that a file that exists is never taken for a new one. Returns whether it was
/// created.
fn open_or_create(
    path: &Path,
    flags: OFlags,
    options: &FileOptions,
) -> rustix::io::Result<(OwnedFd, bool)> {
    // A pool's device holds every volume's data: readable by its owner only.
    let mode = Mode::from_raw_mode(0o600);
    if options.create_size_bytes.is_none() || options.read_only {
        return Ok((rustix::fs::open(path, flags, mode)?, false));
    }
    loop {
        match rustix::fs::open(path, flags | OFlags::CREATE | OFlags::EXCL, mode) {
            Ok(fd) => return Ok((fd, true)),
            Err(Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        match rustix::fs::open(path, flags, mode) {
            Ok(fd) => return Ok((fd, false)),
            // Removed between the two calls: try creating it again.
            Err(Errno::NOENT) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Gives a file this open just created its size (sparse) and makes the file durable by name:
/// the size is in its inode (the first `fdatasync` of the device writes it), its directory
/// entry only once the directory is synced. Without that a power cut after `pool create`
/// could leave no device file on a file system that keeps only synced directory entries.
fn size_new_file(fd: &OwnedFd, path: &Path, size_bytes: u64) -> rustix::io::Result<()> {
    rustix::fs::ftruncate(fd, size_bytes)?;
    rustix::fs::fsync(fd)?;
    sync_parent_dir(path)
}

/// `fsync` of the directory holding `path` (the current directory for a bare name).
pub fn sync_parent_dir(path: &Path) -> rustix::io::Result<()> {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let dir = rustix::fs::open(
        parent,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    loop {
        match rustix::fs::fsync(&dir) {
            Err(Errno::INTR) => {}
            other => return other,
        }
    }
}

fn block_device_size(fd: &OwnedFd) -> rustix::io::Result<u64> {
    // SAFETY: BLKGETSIZE64 writes one `u64` (a `size_t` on 64-bit Linux) into the output.
    let by_ioctl =
        unsafe { rustix::ioctl::ioctl(fd, rustix::ioctl::Getter::<BLKGETSIZE64, u64>::new()) };
    match by_ioctl {
        Ok(size) => Ok(size),
        Err(_) => rustix::fs::seek(fd, SeekFrom::End(0)),
    }
}

/// Reads `queue/rotational` from sysfs for the disk (or the disk holding the partition).
fn block_device_rotational(rdev: u64) -> bool {
    let (major, minor) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    let base = format!("/sys/dev/block/{major}:{minor}");
    [
        format!("{base}/queue/rotational"),
        format!("{base}/../queue/rotational"),
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok())
    .is_some_and(|s| s.trim() == "1")
}

impl Device for FileDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        let total: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        check_range(self, "read", offset, total)?;
        let mut slices: Vec<IoSliceMut<'_>> = bufs
            .iter_mut()
            .filter(|b| !b.is_empty())
            .map(|b| IoSliceMut::new(b))
            .collect();
        let mut rest: &mut [IoSliceMut<'_>] = &mut slices;
        let mut pos = offset;
        while !rest.is_empty() {
            let n = rest.len().min(IOV_MAX);
            match rustix::io::preadv(&self.fd, &mut rest[..n], pos) {
                Ok(0) => {
                    return Err(self.error(
                        "read",
                        pos,
                        std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "file shrank"),
                    ));
                }
                Ok(done) => {
                    pos += done as u64;
                    IoSliceMut::advance_slices(&mut rest, done);
                }
                Err(Errno::INTR) => {}
                Err(e) => return Err(self.error("read", pos, e)),
            }
        }
        Ok(())
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        self.write_with_flags(offset, bufs, ReadWriteFlags::empty())
    }

    /// `pwritev2(RWF_DSYNC)`: durable on return like a write + `fdatasync`, in one call, and
    /// without writing back the file's other dirty pages (on a block device opened `O_DIRECT`
    /// the kernel sends a FUA write, or a write and a cache flush where FUA is not supported).
    fn write_vectored_at_fua(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        self.write_with_flags(offset, bufs, ReadWriteFlags::DSYNC)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        loop {
            match rustix::fs::fdatasync(&self.fd) {
                Ok(()) => return Ok(()),
                Err(Errno::INTR) => {}
                Err(e) => return Err(self.error("flush", 0, e)),
            }
        }
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.check_writable("discard")?;
        check_range(self, "discard", offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let result = match self.kind {
            Kind::Regular => rustix::fs::fallocate(
                &self.fd,
                FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                offset,
                len,
            ),
            // SAFETY: BLKDISCARD reads a `u64[2]` (start, length) through the pointer.
            Kind::Block => unsafe {
                rustix::ioctl::ioctl(
                    &self.fd,
                    rustix::ioctl::Setter::<BLKDISCARD, [u64; 2]>::new([offset, len]),
                )
            },
        };
        match result {
            Ok(()) | Err(Errno::OPNOTSUPP) | Err(Errno::NOTTY) | Err(Errno::NOSYS) => Ok(()),
            Err(e) => Err(self.error("discard", offset, e)),
        }
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    fn is_rotational(&self) -> bool {
        self.rotational
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(size_bytes: u64) -> FileOptions {
        FileOptions {
            create_size_bytes: Some(size_bytes),
            ..FileOptions::default()
        }
    }

    #[test]
    fn round_trip_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d0");
        let dev = FileDevice::open(&path, create(1 << 20)).unwrap();
        assert_eq!(dev.size_bytes(), 1 << 20);
        assert_eq!(dev.describe(), path.display().to_string());
        dev.write_at(12_345, b"cairn stones").unwrap();
        dev.flush().unwrap();
        drop(dev);

        let dev = FileDevice::open(&path, FileOptions::default()).unwrap();
        let mut back = [0u8; 12];
        dev.read_at(12_345, &mut back).unwrap();
        assert_eq!(&back, b"cairn stones");
        assert!(matches!(
            dev.read_at((1 << 20) - 4, &mut back),
            Err(DeviceError::OutOfRange { .. })
        ));
    }

    #[test]
    fn vectored_io_scatters_and_gathers() {
        let dir = tempfile::tempdir().unwrap();
        let dev = FileDevice::open(dir.path().join("d0"), create(1 << 20)).unwrap();
        let a = vec![1u8; 5000];
        let b = vec![2u8; 3];
        let c = vec![3u8; 70_000];
        dev.write_vectored_at(4096, &[&a, &[], &b, &c]).unwrap();
        let mut whole = vec![0u8; 75_003];
        dev.read_at(4096, &mut whole).unwrap();
        assert!(whole[..5000].iter().all(|&x| x == 1));
        assert_eq!(&whole[5000..5003], &[2, 2, 2]);
        assert!(whole[5003..].iter().all(|&x| x == 3));

        // Scatter back into uneven buffers, including many of them (more than one call's worth).
        let mut pieces: Vec<Vec<u8>> = (0..1500).map(|i| vec![0u8; 1 + i % 7]).collect();
        let total: usize = pieces.iter().map(Vec::len).sum();
        let mut refs: Vec<&mut [u8]> = pieces.iter_mut().map(|p| p.as_mut_slice()).collect();
        dev.read_vectored_at(4096, &mut refs).unwrap();
        let joined: Vec<u8> = pieces.concat();
        assert_eq!(joined, whole[..total]);
    }

    #[test]
    fn fua_writes_land_like_plain_ones_and_respect_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d0");
        let dev = FileDevice::open(&path, create(1 << 20)).unwrap();
        // More buffers than one call takes, so the short-write loop runs with the flag too.
        let pieces: Vec<Vec<u8>> = (0..1500)
            .map(|i| vec![(i % 251) as u8; 1 + i % 5])
            .collect();
        let refs: Vec<&[u8]> = pieces.iter().map(Vec::as_slice).collect();
        dev.write_vectored_at_fua(512, &refs).unwrap();
        let expected = pieces.concat();
        let mut back = vec![0u8; expected.len()];
        dev.read_at(512, &mut back).unwrap();
        assert_eq!(back, expected);
        assert!(matches!(
            dev.write_vectored_at_fua(1 << 20, &[&[1u8]]),
            Err(DeviceError::OutOfRange { .. })
        ));
        drop(dev);
        let read_only = FileDevice::open(
            &path,
            FileOptions {
                read_only: true,
                ..FileOptions::default()
            },
        )
        .unwrap();
        let refused = read_only.write_vectored_at_fua(0, &[&[1u8]]).unwrap_err();
        assert!(refused.to_string().contains("read-only"), "{refused}");
    }

    #[test]
    fn created_sparse_never_resized() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let size = 64u64 << 30; // 64 GiB: only possible on disk if sparse
        let dev = FileDevice::open(&path, create(size)).unwrap();
        assert_eq!(dev.size_bytes(), size);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), size);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 1 << 20, "file must be sparse");
        drop(dev);

        // An existing file keeps its size and its bytes, whether smaller or bigger.
        let small = dir.path().join("small");
        std::fs::write(&small, vec![9u8; 1000]).unwrap();
        let dev = FileDevice::open(&small, create(8192)).unwrap();
        assert_eq!(dev.size_bytes(), 1000);
        drop(dev);
        assert_eq!(std::fs::read(&small).unwrap(), vec![9u8; 1000]);
        let dev = FileDevice::open(&small, create(100)).unwrap();
        assert_eq!(dev.size_bytes(), 1000);
    }

    #[test]
    fn exclusive_lock_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d0");
        let first = FileDevice::open(&path, create(1 << 16)).unwrap();
        let err = FileDevice::open(&path, FileOptions::default()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, DeviceError::Invalid { .. }), "{msg}");
        assert!(msg.contains("in use by another process"), "{msg}");
        assert!(msg.contains(&path.display().to_string()), "{msg}");

        // Read-only opens take no lock, and refuse writes.
        let ro = FileDevice::open(
            &path,
            FileOptions {
                read_only: true,
                ..FileOptions::default()
            },
        )
        .unwrap();
        assert!(matches!(
            ro.write_at(0, &[1]),
            Err(DeviceError::Invalid { .. })
        ));
        drop(first);
        FileDevice::open(&path, FileOptions::default()).expect("lock released on close");
    }

    #[test]
    fn discard_punches_a_hole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d0");
        let dev = FileDevice::open(&path, create(1 << 20)).unwrap();
        dev.write_at(0, &vec![0xEEu8; 1 << 20]).unwrap();
        dev.discard(64 << 10, 256 << 10).unwrap();
        let mut back = vec![0u8; 1 << 20];
        dev.read_at(0, &mut back).unwrap();
        assert!(back[..64 << 10].iter().all(|&b| b == 0xEE));
        assert!(back[64 << 10..320 << 10].iter().all(|&b| b == 0));
        assert!(back[320 << 10..].iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn direct_io_with_aligned_buffers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d0");
        let options = FileOptions {
            direct_io: true,
            ..create(1 << 20)
        };
        let dev = match FileDevice::open(&path, options) {
            Ok(dev) => dev,
            // tmpfs and some others refuse O_DIRECT; then the error must say so clearly.
            Err(DeviceError::Io { op, source, .. }) => {
                assert_eq!(op, "open");
                assert_eq!(source.raw_os_error(), Some(libc::EINVAL));
                return;
            }
            Err(e) => panic!("unexpected error {e}"),
        };
        let align = dev.direct_io_alignment_bytes() as usize;
        let mut raw = vec![0u8; 3 * align];
        let start = raw.as_ptr().align_offset(align);
        let buf = &mut raw[start..start + align];
        buf.fill(0x5A);
        dev.write_at(align as u64, buf).unwrap();
        buf.fill(0);
        dev.read_at(align as u64, buf).unwrap();
        assert!(buf.iter().all(|&b| b == 0x5A));
    }
}
