//! Emulated RAM disks a test can make fail and heal by file name (`Devices`).

use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::spec::DeviceSpec;
use cairn_device::{Device, DeviceError};
use cairn_emulate::{DeviceModel, EmuOptions, EmulatedDevice, FaultConfig};
use cairn_engine::DeviceOpener;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Weak};

/// Opens every device as an emulated RAM disk and keeps the latest handle of each by file
/// name, so a test can make one fail and heal it (weakly: a closed pool releases its devices'
/// locks).
#[derive(Clone, Default)]
pub struct Devices(Arc<Mutex<BTreeMap<String, Weak<EmulatedDevice>>>>);

impl Devices {
    pub fn opener(&self) -> DeviceOpener {
        let handles = self.0.clone();
        Arc::new(
            move |spec: &DeviceSpec, create: Option<u64>| -> Result<Arc<dyn Device>, DeviceError> {
                let file: Arc<dyn Device> = Arc::new(FileDevice::open(
                    &spec.path,
                    FileOptions {
                        create_size_bytes: create,
                        ..FileOptions::default()
                    },
                )?);
                let device = EmulatedDevice::new(
                    file,
                    DeviceModel::Ram,
                    EmuOptions {
                        clock: None,
                        ..EmuOptions::default()
                    },
                );
                let name = spec
                    .path
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                handles.lock().insert(name, Arc::downgrade(&device));
                Ok(device as Arc<dyn Device>)
            },
        )
    }

    pub fn get(&self, path: &Path) -> Arc<EmulatedDevice> {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        self.0
            .lock()
            .get(&name)
            .and_then(Weak::upgrade)
            .expect("device open")
    }

    /// Every read and write of the device fails with EIO.
    pub fn fail(&self, path: &Path) {
        self.get(path).set_faults(FaultConfig {
            read_eio_probability: 1.0,
            write_eio_probability: 1.0,
            ..FaultConfig::default()
        });
    }

    pub fn heal(&self, path: &Path) {
        self.get(path).set_faults(FaultConfig::default());
    }
}
