//! Shared helpers for engine integration tests: pools on emulated devices over temp files.

#![allow(dead_code)]

pub mod failing;
pub mod family;
pub mod streams;

use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::spec::DeviceSpec;
use cairn_device::{Device, DeviceError};
use cairn_emulate::RecordingDevice;
use cairn_emulate::{DeviceModel, EmuOptions, EmulatedDevice, PowerSwitch};
use cairn_engine::{
    CreateOptions, DatasetInfo, DeviceOpener, ImportSource, Pool, PoolOptions, VdevGroup,
};
use cairn_pool::txg::TxgConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const DEVICE_SIZE: u64 = 64 << 20;

/// Emulated devices with volatile caches (no latency), sharing one power switch: hdd-7200, or
/// ssd-sata for files named `slog*`.
pub fn emulated_opener(seed: u64, power: Option<Arc<PowerSwitch>>) -> DeviceOpener {
    recording_opener(seed, power, None)
}

/// Like `emulated_opener`; with `record`, each device's media writes also go to a write log in
/// that directory (see `cairn_emulate::record`), so a failing round can be rebuilt.
pub fn recording_opener(
    seed: u64,
    power: Option<Arc<PowerSwitch>>,
    record: Option<PathBuf>,
) -> DeviceOpener {
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    Arc::new(
        move |spec: &DeviceSpec, create: Option<u64>| -> Result<Arc<dyn Device>, DeviceError> {
            let mut backing: Arc<dyn Device> = Arc::new(backing_file(spec, create)?);
            if let Some(dir) = &record {
                let name = spec
                    .path
                    .file_name()
                    .map_or("device".into(), |n| n.to_string_lossy().into_owned());
                backing = Arc::new(RecordingDevice::new(backing, dir, &name)?);
            }
            let index = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Log devices (files named slog*) are SSDs; everything else is a disk.
            let model = if spec.path.to_string_lossy().contains("slog") {
                "ssd-sata"
            } else {
                "hdd-7200"
            };
            let device: Arc<dyn Device> = EmulatedDevice::new(
                backing,
                DeviceModel::named(model).expect("model"),
                EmuOptions {
                    seed: seed.wrapping_mul(31).wrapping_add(index),
                    clock: None,
                    destage_per_write_probability: 0.2,
                    power: power.clone(),
                },
            );
            Ok(device)
        },
    )
}

/// Txg config for tests: syncs only when asked.
pub fn manual_txg() -> TxgConfig {
    TxgConfig {
        txg_timeout_ms: 3_600_000,
        dirty_bytes_max: 1 << 30,
        ..TxgConfig::default()
    }
}

pub fn options(opener: DeviceOpener) -> PoolOptions {
    PoolOptions {
        txg: manual_txg(),
        opener,
        // Condense the space log every few txgs so that path runs in every test.
        space_log_delta_blocks_max: 3,
        // A destroy's background frees take several txgs even for small snapshots.
        free_entries_per_txg: 8,
        ..PoolOptions::default()
    }
}

pub fn device_paths(dir: &Path, count: usize) -> Vec<PathBuf> {
    (0..count).map(|i| dir.join(format!("d{i}.img"))).collect()
}

pub fn specs(paths: &[PathBuf]) -> Vec<DeviceSpec> {
    paths
        .iter()
        .map(|path| DeviceSpec {
            path: path.clone(),
            model: None,
        })
        .collect()
}

pub fn create_mirror(paths: &[PathBuf], opener: DeviceOpener) -> Pool {
    create_mirror_with(paths, options(opener))
}

/// Pool `tank` on `paths` (a mirror of them when there are several) of `DEVICE_SIZE` each.
pub fn create_mirror_with(paths: &[PathBuf], options: PoolOptions) -> Pool {
    Pool::create(
        "tank",
        &[VdevGroup {
            mirror: paths.len() > 1,
            raidz_parity: None,
            log: false,
            devices: specs(paths),
        }],
        &CreateOptions {
            create_size_bytes: Some(DEVICE_SIZE),
            ..Default::default()
        },
        options,
    )
    .expect("create pool")
}

/// Pool `tank` of one raidz vdev with `parity` parity columns over `paths` (`DEVICE_SIZE`
/// each, sectors of `1 << ashift` bytes).
pub fn create_raidz(paths: &[PathBuf], parity: u8, ashift: u8, opener: DeviceOpener) -> Pool {
    Pool::create(
        "tank",
        &[VdevGroup {
            mirror: false,
            raidz_parity: Some(parity),
            log: false,
            devices: specs(paths),
        }],
        &CreateOptions {
            create_size_bytes: Some(DEVICE_SIZE),
            ashift,
            ..Default::default()
        },
        options(opener),
    )
    .expect("create raidz pool")
}

pub fn import(paths: &[PathBuf], opener: DeviceOpener) -> Result<Pool, cairn_engine::EngineError> {
    Pool::import(
        &ImportSource::Devices(specs(paths)),
        "tank",
        options(opener),
    )
}

/// The file under an emulated device: `spec`'s path, created sparse at `create` bytes.
pub fn backing_file(spec: &DeviceSpec, create: Option<u64>) -> Result<FileDevice, DeviceError> {
    FileDevice::open(
        &spec.path,
        FileOptions {
            create_size_bytes: create,
            ..Default::default()
        },
    )
}

/// Emulated `model` devices with their latency in real time (a request queued behind another
/// waits, as on the real device) and no volatile-cache losses.
pub fn latency_opener(model: &'static str) -> DeviceOpener {
    Arc::new(
        move |spec: &DeviceSpec, create: Option<u64>| -> Result<Arc<dyn Device>, DeviceError> {
            let device: Arc<dyn Device> = EmulatedDevice::new(
                Arc::new(backing_file(spec, create)?),
                DeviceModel::named(model).expect("model"),
                EmuOptions {
                    seed: 1,
                    clock: Some(Arc::new(cairn_device::RealClock::new())),
                    destage_per_write_probability: 0.0,
                    power: None,
                },
            );
            Ok(device)
        },
    )
}

pub fn plain_opener() -> DeviceOpener {
    emulated_opener(0, None)
}

/// Deterministic pseudo-random generator for workloads (splitmix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }
}

/// The scratch directory of one crash round: its device images, and their write logs and cut
/// point in `record/`. When the round panics the directory is kept and named on stderr, with the
/// command that rebuilds the crashed images from the logs.
pub struct CrashRound {
    dir: Option<tempfile::TempDir>,
}

impl CrashRound {
    pub fn new() -> CrashRound {
        CrashRound {
            dir: Some(tempfile::tempdir().expect("tempdir")),
        }
    }

    /// A round whose scratch directory is made in `parent`.
    pub fn new_in(parent: &Path) -> CrashRound {
        CrashRound {
            dir: Some(tempfile::tempdir_in(parent).expect("tempdir")),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir
            .as_ref()
            .expect("the directory lives as long as the round")
            .path()
    }

    /// Where the write logs and `cut.txt` go.
    pub fn record_dir(&self) -> PathBuf {
        self.path().join("record")
    }

    /// Writes `cut.txt`: what the round was and where its power was cut.
    pub fn write_cut_point(&self, text: &str) {
        std::fs::create_dir_all(self.record_dir()).expect("record dir");
        std::fs::write(self.record_dir().join("cut.txt"), format!("{text}\n")).expect("cut.txt");
    }
}

impl Default for CrashRound {
    fn default() -> Self {
        CrashRound::new()
    }
}

impl Drop for CrashRound {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        if let Some(dir) = self.dir.take() {
            let kept = dir.keep();
            eprintln!(
                "this round's device write logs and cut point are kept in {record}; rebuild the \
                 crashed images with:\n  cargo run -p cairn-emulate --example replay-cut -- {record}\n\
                 then inspect them with `cairn pool import -d {record}/crashed tank` and \
                 `cairn pool check tank`",
                record = kept.join("record").display()
            );
        }
    }
}

/// `len` deterministic bytes for test data, one stream per seed.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed);
    (0..len).map(|_| rng.next() as u8).collect()
}

/// A new regular file of uid/gid 1000 with permission bits `mode` (filesystem tests).
pub fn file(mode: u32) -> cairn_fs::NewInode {
    cairn_fs::NewInode {
        kind: cairn_fs::attrs::FileKind::File,
        mode,
        uid: 1000,
        gid: 1000,
        rdev: 0,
    }
}

/// Creates filesystem `name` (root directory owned by root, mode 0755) with `properties`, and
/// opens it.
pub fn new_filesystem(
    pool: &Pool,
    name: &str,
    properties: &[(&str, &str)],
) -> Arc<cairn_fs::Filesystem> {
    let properties: Vec<(String, String)> = properties
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    pool.create_filesystem(name, &properties, (0, 0), 0o755)
        .expect("create filesystem");
    pool.filesystem(name).expect("open filesystem")
}

/// The dataset `name` as `Pool::datasets` lists it (USED, REFER...).
pub fn info(pool: &Pool, name: &str) -> DatasetInfo {
    pool.datasets()
        .unwrap()
        .into_iter()
        .find(|info| info.name == name)
        .unwrap()
}

/// `pool check` of the pool on `paths`, imported read-only (what `cairn pool check` runs).
pub fn check_read_only(paths: &[std::path::PathBuf]) -> cairn_engine::CheckReport {
    let pool = Pool::import(
        &cairn_engine::ImportSource::Devices(specs(paths)),
        "tank",
        cairn_engine::PoolOptions {
            readonly: true,
            ..options(plain_opener())
        },
    )
    .unwrap();
    let report = pool.check().unwrap();
    pool.close().unwrap();
    report
}
