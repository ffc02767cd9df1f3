//! Shared helpers for engine integration tests: pools on emulated devices over temp files.

#![allow(dead_code)]

use cairn_device::emulated::{DeviceModel, EmuOptions, EmulatedDevice, PowerSwitch};
use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::spec::DeviceSpec;
use cairn_device::{Device, DeviceError};
use cairn_engine::{CreateOptions, DeviceOpener, ImportSource, Pool, PoolOptions, VdevGroup};
use cairn_pool::txg::TxgConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const DEVICE_SIZE: u64 = 64 << 20;

/// Emulated devices with volatile caches (no latency), sharing one power switch: hdd-7200, or
/// ssd-sata for files named `slog*`.
pub fn emulated_opener(seed: u64, power: Option<Arc<PowerSwitch>>) -> DeviceOpener {
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    Arc::new(
        move |spec: &DeviceSpec, create: Option<u64>| -> Result<Arc<dyn Device>, DeviceError> {
            let backing = FileDevice::open(
                &spec.path,
                FileOptions {
                    create_size_bytes: create,
                    ..Default::default()
                },
            )?;
            let index = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // Log devices (files named slog*) are SSDs; everything else is a disk.
            let model = if spec.path.to_string_lossy().contains("slog") {
                "ssd-sata"
            } else {
                "hdd-7200"
            };
            let device: Arc<dyn Device> = EmulatedDevice::new(
                Arc::new(backing),
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
        space_log_chain_blocks_max: 3,
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
    Pool::create(
        "tank",
        &[VdevGroup {
            mirror: paths.len() > 1,
            log: false,
            devices: specs(paths),
        }],
        &CreateOptions {
            create_size_bytes: Some(DEVICE_SIZE),
            ..Default::default()
        },
        options(opener),
    )
    .expect("create pool")
}

pub fn import(paths: &[PathBuf], opener: DeviceOpener) -> Result<Pool, cairn_engine::EngineError> {
    Pool::import(
        &ImportSource::Devices(specs(paths)),
        "tank",
        options(opener),
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
