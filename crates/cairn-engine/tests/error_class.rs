//! What a client is told: errors keep their type from the device up to the dataset, so a front
//! end (the NBD export) can answer EIO, ENOSPC or EROFS by `DatasetError::class`, not by
//! reading messages. Device failures here are real host errors (`std::io::Error` with an
//! errno), injected by a device wrapper, so the test also shows the host's errno survives the
//! trip up as a source.

mod common;

use cairn_dataset::DatasetError;
use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::spec::DeviceSpec;
use cairn_device::{Device, DeviceError, ErrorClass, find_os_error};
use cairn_engine::{DeviceOpener, EngineError, Pool, PoolOptions};
use common::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A file device whose reads or writes fail with a host EIO while the switch is on.
struct FailingDevice {
    inner: FileDevice,
    fail_reads: Arc<AtomicBool>,
    fail_writes: Arc<AtomicBool>,
}

impl FailingDevice {
    fn eio(&self, op: &'static str, offset: u64) -> DeviceError {
        DeviceError::Io {
            device: self.inner.describe(),
            op,
            offset,
            source: std::io::Error::from_raw_os_error(libc::EIO),
        }
    }
}

impl Device for FailingDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        if self.fail_reads.load(Ordering::SeqCst) {
            return Err(self.eio("read", offset));
        }
        self.inner.read_vectored_at(offset, bufs)
    }

    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(self.eio("write", offset));
        }
        self.inner.write_vectored_at(offset, bufs)
    }

    fn flush(&self) -> Result<(), DeviceError> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(self.eio("flush", 0));
        }
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// Switches shared by every device the opener opens.
#[derive(Clone, Default)]
struct Switches {
    fail_reads: Arc<AtomicBool>,
    fail_writes: Arc<AtomicBool>,
}

impl Switches {
    fn opener(&self) -> DeviceOpener {
        let switches = self.clone();
        Arc::new(
            move |spec: &DeviceSpec, create: Option<u64>| -> Result<Arc<dyn Device>, DeviceError> {
                let inner = FileDevice::open(
                    &spec.path,
                    FileOptions {
                        create_size_bytes: create,
                        ..Default::default()
                    },
                )?;
                Ok(Arc::new(FailingDevice {
                    inner,
                    fail_reads: switches.fail_reads.clone(),
                    fail_writes: switches.fail_writes.clone(),
                }))
            },
        )
    }
}

fn volume_props() -> Vec<(String, String)> {
    vec![
        ("volblocksize".into(), "64K".into()),
        ("refreservation".into(), "none".into()),
    ]
}

#[test]
fn a_device_eio_on_read_is_an_io_error_that_keeps_the_host_errno() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let switches = Switches::default();
    {
        let pool = create_mirror(&paths, switches.opener());
        pool.create_volume("tank/vol", 4 << 20, &volume_props())
            .unwrap();
        let volume = pool.volume("tank/vol").unwrap();
        volume.write(0, &vec![0x5a; 1 << 20]).unwrap();
        pool.sync().unwrap();
        pool.close().unwrap();
    }
    // A fresh import: nothing of the volume's data is cached.
    let pool = import(&paths, switches.opener()).unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    switches.fail_reads.store(true, Ordering::SeqCst);
    let mut buf = vec![0u8; 64 << 10];
    let err = volume
        .read(0, &mut buf)
        .expect_err("every copy fails to read");
    assert!(matches!(err, DatasetError::Io { .. }), "{err:?}");
    assert_eq!(err.class(), ErrorClass::Io);
    assert_eq!(err.errno(), libc::EIO);
    let os = find_os_error(&err).expect("the host's error is still a source");
    assert_eq!(os.raw_os_error(), Some(libc::EIO));
    switches.fail_reads.store(false, Ordering::SeqCst);
    volume.read(0, &mut buf).expect("readable again");
    assert!(buf.iter().all(|&byte| byte == 0x5a));
}

#[test]
fn a_full_pool_is_no_space() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let pool = create_mirror(&paths, plain_opener());
    pool.create_volume("tank/big", 256 << 20, &volume_props())
        .unwrap();
    let volume = pool.volume("tank/big").unwrap();
    // Random bytes: a pattern would compress to nothing and never fill the pool.
    let chunk = pattern(1 << 20, 0x33);
    let mut refused = None;
    for index in 0..256u64 {
        if let Err(err) = volume.write(index << 20, &chunk) {
            refused = Some(err);
            break;
        }
        if index % 8 == 7 {
            pool.sync().unwrap();
        }
    }
    let err = refused.expect("a 64 MiB pool cannot take 256 MiB");
    assert_eq!(err.class(), ErrorClass::NoSpace, "{err}");
    assert_eq!(err.errno(), libc::ENOSPC);
}

/// A volume refused by a quota (here its parent's) is told apart from a full pool, as a
/// filesystem is: the same space policy names what refused. (NBD answers both ENOSPC.)
#[test]
fn a_volume_at_a_quota_is_quota_exceeded() {
    let dir = tempfile::tempdir().unwrap();
    let pool = create_mirror(&device_paths(dir.path(), 1), plain_opener());
    pool.create_filesystem("tank/q", &[("quota".into(), "8M".into())], (0, 0), 0o755)
        .unwrap();
    pool.create_volume("tank/q/vol", 32 << 20, &volume_props())
        .unwrap();
    let volume = pool.volume("tank/q/vol").unwrap();
    let chunk = pattern(1 << 20, 0x44);
    let mut refused = None;
    for index in 0..32u64 {
        if let Err(err) = volume.write(index << 20, &chunk) {
            refused = Some(err);
            break;
        }
    }
    let err = refused.expect("32 MiB fit in an 8 MiB quota");
    assert!(matches!(err, DatasetError::QuotaExceeded(_)), "{err:?}");
    assert_eq!(err.class(), ErrorClass::QuotaExceeded, "{err}");
    assert_eq!(err.errno(), libc::EDQUOT);
    assert!(err.to_string().contains("quota of tank/q"), "{err}");
}

#[test]
fn writes_to_a_read_only_volume_or_pool_are_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    {
        let pool = create_mirror(&paths, plain_opener());
        pool.create_volume("tank/vol", 4 << 20, &volume_props())
            .unwrap();
        pool.set_property("tank/vol", "readonly", "on").unwrap();
        let volume = pool.volume("tank/vol").unwrap();
        let err = volume.write(0, &[1u8; 4096]).expect_err("readonly=on");
        assert_eq!(err.class(), ErrorClass::ReadOnly, "{err}");
        assert_eq!(err.errno(), libc::EROFS);
        pool.close().unwrap();
    }
    // A pool imported read-only opens its volumes read-only, whatever their property says;
    // changes to the pool itself are refused too.
    pool_readonly_off(&paths);
    let pool = Pool::import(
        &cairn_engine::ImportSource::Devices(specs(&paths)),
        "tank",
        PoolOptions {
            readonly: true,
            ..options(plain_opener())
        },
    )
    .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    assert!(volume.is_readonly());
    let mut buf = vec![0u8; 4096];
    volume.read(0, &mut buf).unwrap();
    let err = volume.write(0, &[1u8; 4096]).expect_err("a read-only pool");
    assert_eq!(err.class(), ErrorClass::ReadOnly, "{err}");
    assert_eq!(err.errno(), libc::EROFS);
    let Err(err) = pool.create_volume("tank/other", 4 << 20, &volume_props()) else {
        panic!("a read-only pool created a volume");
    };
    assert!(matches!(err, EngineError::ReadOnlyPool(_)), "{err:?}");
    assert_eq!(err.class(), ErrorClass::ReadOnly);
    pool.close().unwrap();
}

/// Sets `readonly=off` on tank/vol again, so only the pool's read-only import makes it so.
fn pool_readonly_off(paths: &[std::path::PathBuf]) {
    let pool = Pool::import(
        &cairn_engine::ImportSource::Devices(specs(paths)),
        "tank",
        options(plain_opener()),
    )
    .unwrap();
    pool.set_property("tank/vol", "readonly", "off").unwrap();
    pool.close().unwrap();
}

/// A pool whose only device fails its writes suspends I/O until `pool clear` (failmode=wait
/// inside the sync); clients are answered at once with EIO rather than blocked, and the pool is
/// not read-only: once the device is back, it takes writes again.
#[test]
fn writes_to_a_suspended_pool_are_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    let paths = device_paths(dir.path(), 1);
    let switches = Switches::default();
    let pool = create_mirror(&paths, switches.opener());
    pool.create_volume("tank/vol", 4 << 20, &volume_props())
        .unwrap();
    let volume = pool.volume("tank/vol").unwrap();
    volume.write(0, &[7u8; 65536]).unwrap();
    pool.sync().unwrap();

    switches.fail_writes.store(true, Ordering::SeqCst);
    volume.write(65536, &[8u8; 65536]).unwrap();
    let err = pool.sync().expect_err("the txg's writes reach no device");
    assert_eq!(err.class(), ErrorClass::Io, "{err}");
    assert!(pool.suspended().is_some());

    let err = volume
        .write(0, &[9u8; 65536])
        .expect_err("a suspended pool refuses writes");
    assert_eq!(err.class(), ErrorClass::Io, "{err}");
    assert_eq!(err.errno(), libc::EIO);
    let text = cairn_device::error_chain(&err);
    assert!(text.contains("suspended"), "{text}");
}

#[test]
fn classification_follows_the_type_not_the_text() {
    let no_space = DatasetError::NoSpace("the word I/O error appears here".into());
    assert_eq!(no_space.class(), ErrorClass::NoSpace);
    let read_only = DatasetError::ReadOnly("no space".into());
    assert_eq!(read_only.class(), ErrorClass::ReadOnly);
    let out_of_range = DatasetError::OutOfRange {
        name: "tank/vol".into(),
        op: "write",
        offset: 1 << 30,
        len: 4096,
        size: 4 << 20,
    };
    assert_eq!(out_of_range.class(), ErrorClass::Invalid);
    // A full pool met while the object layer allocates stays "no space" through every layer.
    let wrap = |refusal| {
        EngineError::Object(cairn_object::ObjectError::Pipeline(
            cairn_pipeline::PipelineError::NoSpace(refusal),
        ))
    };
    let full = cairn_pool::space::SpaceError::NoSpace { size_bytes: 65536 };
    assert_eq!(wrap(full).class(), ErrorClass::NoSpace);
    // The allocator refusing a malformed request is not a full pool.
    let bug = cairn_pool::space::SpaceError::InvalidSize { size_bytes: 0 };
    assert_eq!(wrap(bug).class(), ErrorClass::Io);
    // A filesystem's error keeps its own class through the engine (`FsError::class`): a
    // quota is not a full pool, and neither is a bad request.
    let quota = EngineError::Fs(cairn_fs::FsError::QuotaExceeded("refquota".into()));
    assert_eq!(quota.class(), ErrorClass::QuotaExceeded);
    assert_eq!(quota.errno(), libc::EDQUOT);
    let full = EngineError::Fs(cairn_fs::FsError::NoSpace("the word quota".into()));
    assert_eq!(full.class(), ErrorClass::NoSpace);
}
