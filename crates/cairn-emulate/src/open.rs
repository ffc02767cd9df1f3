//! Opening a `DeviceSpec`: the one place a leaf's name becomes a device.
//!
//! A plain path opens a `FileDevice`; `emu:MODEL:PATH` opens the file at PATH and wraps it in an
//! `EmulatedDevice` of that model. The spec itself (its text, parsing and printing, the model
//! names it may carry) is `cairn_device::spec`, because every layer holds leaves by their spec;
//! opening is here, because it needs the emulator, and `cairn-device` must not.
//!
//! Invariant: a spec with a model always opens an `EmulatedDevice` (never the bare file), and
//! with a record directory every byte that reaches its media is also in the write log.

use std::path::Path;
use std::sync::Arc;

use cairn_device::device::{Device, DeviceError};
use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::spec::DeviceSpec;

use crate::emulated::{DeviceModel, EmuOptions, EmulatedDevice};
use crate::record::RecordingDevice;

/// Opens the device a spec names: a `FileDevice`, wrapped in an `EmulatedDevice` when a model is
/// named. `emu` is used as given (its default has a real clock, so the model's latency is felt).
pub fn open_device(
    spec: &DeviceSpec,
    file: FileOptions,
    emu: EmuOptions,
) -> Result<Arc<dyn Device>, DeviceError> {
    open_device_recorded(spec, file, emu, None)
}

/// Like `open_device`; with `record_dir`, an emulated device's media writes also go to a write
/// log in that directory (`crate::record`), so a crash test can rebuild what a cut left.
pub fn open_device_recorded(
    spec: &DeviceSpec,
    file: FileOptions,
    emu: EmuOptions,
    record_dir: Option<&Path>,
) -> Result<Arc<dyn Device>, DeviceError> {
    let model = match &spec.model {
        None => None,
        Some(name) => Some(
            DeviceModel::named(name).ok_or_else(|| DeviceError::Invalid {
                device: spec.to_string(),
                reason: format!(
                    "unknown device model {name:?} (known models: {})",
                    DeviceModel::NAMES.join(", ")
                ),
            })?,
        ),
    };
    let backing = FileDevice::open(&spec.path, file)?;
    let Some(model) = model else {
        return Ok(Arc::new(backing));
    };
    let mut backing: Arc<dyn Device> = Arc::new(backing);
    if let Some(dir) = record_dir {
        let name = spec
            .path
            .file_name()
            .map_or("device".into(), |name| name.to_string_lossy().into_owned());
        backing = Arc::new(RecordingDevice::new(backing, dir, &name)?);
    }
    Ok(EmulatedDevice::new(backing, model, emu))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// Moved from `cairn-device`'s `parse_and_display_round_trip`, whose spec it parses.
    #[test]
    fn spec_names_its_model() {
        let spec = DeviceSpec::parse("emu:ssd-plp:/tmp/log0").unwrap();
        assert_eq!(spec.path, PathBuf::from("/tmp/log0"));
        assert_eq!(DeviceModel::of_spec(&spec), Some(DeviceModel::SsdPlp));
    }

    /// Every name a spec may carry is a model, and every model's name is one a spec may carry.
    #[test]
    fn spec_model_names_are_the_models() {
        for (model, name) in DeviceModel::ALL.into_iter().zip(DeviceModel::NAMES) {
            assert_eq!(model.name(), name);
            assert_eq!(DeviceModel::named(name), Some(model));
        }
        assert_eq!(DeviceModel::ALL.len(), DeviceModel::NAMES.len());
    }

    #[test]
    fn open_device_wraps_in_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d0");
        let file = FileOptions {
            create_size_bytes: Some(1 << 20),
            ..FileOptions::default()
        };
        let spec = DeviceSpec::parse(&format!("emu:nvme:{}", path.display())).unwrap();
        let device = open_device(&spec, file, EmuOptions::default()).unwrap();
        assert_eq!(device.describe(), spec.to_string());
        assert_eq!(device.concurrency_hint(), 8);
        device.write_at(0, b"hello").unwrap();
        // The nvme model has a volatile cache: only a flush puts the bytes in the file.
        device.flush().unwrap();
        drop(device);

        let plain = DeviceSpec::parse(&path.display().to_string()).unwrap();
        let device = open_device(&plain, FileOptions::default(), EmuOptions::default()).unwrap();
        let mut back = [0u8; 5];
        device.read_at(0, &mut back).unwrap();
        assert_eq!(&back, b"hello");
        assert_eq!(device.describe(), path.display().to_string());
    }
}
