//! Device specs: how a leaf is named on the command line and in labels.
//!
//! A spec is either a plain path (`/dev/sdb`, `disks/d0`) or `emu:MODEL:PATH`, which wraps the
//! file or block device at PATH in an emulated device model. Parsing and printing round-trip:
//! `DeviceSpec::parse(&spec.to_string()) == Ok(spec)`, so the label can store the string.
//!
//! Invariant: a parsed spec's model, when present, is one of `DeviceModel::NAMES`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use crate::device::{Device, DeviceError};
use crate::emulated::{DeviceModel, EmuOptions, EmulatedDevice};
use crate::file::{FileDevice, FileOptions};

const EMU_PREFIX: &str = "emu:";

/// A leaf device as named by the user.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceSpec {
    pub path: PathBuf,
    /// The emulated model's name, if any.
    pub model: Option<String>,
}

impl DeviceSpec {
    /// Parses `emu:MODEL:PATH` or a plain path.
    pub fn parse(text: &str) -> Result<DeviceSpec, DeviceError> {
        let invalid = |reason: String| DeviceError::Invalid {
            device: text.to_string(),
            reason,
        };
        if text.is_empty() {
            return Err(invalid("empty device name".into()));
        }
        let Some(rest) = text.strip_prefix(EMU_PREFIX) else {
            return Ok(DeviceSpec {
                path: PathBuf::from(text),
                model: None,
            });
        };
        let Some((model, path)) = rest.split_once(':') else {
            return Err(invalid(format!(
                "expected emu:MODEL:PATH (models: {})",
                DeviceModel::NAMES.join(", ")
            )));
        };
        if DeviceModel::named(model).is_none() {
            return Err(invalid(format!(
                "unknown device model {model:?} (known models: {})",
                DeviceModel::NAMES.join(", ")
            )));
        }
        if path.is_empty() {
            return Err(invalid("missing path after the model".into()));
        }
        Ok(DeviceSpec {
            path: PathBuf::from(path),
            model: Some(model.to_string()),
        })
    }

    /// The emulated model, if the spec names a known one.
    pub fn device_model(&self) -> Option<DeviceModel> {
        self.model.as_deref().and_then(DeviceModel::named)
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.model {
            Some(model) => write!(f, "{EMU_PREFIX}{model}:{}", self.path.display()),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = DeviceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DeviceSpec::parse(s)
    }
}

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
    record_dir: Option<&std::path::Path>,
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
        backing = Arc::new(crate::record::RecordingDevice::new(backing, dir, &name)?);
    }
    Ok(EmulatedDevice::new(backing, model, emu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for text in [
            "/dev/sdb",
            "disks/d0",
            "emu:hdd-7200:/tmp/d0",
            "emu:ram:rel/with:colon",
        ] {
            let spec = DeviceSpec::parse(text).unwrap();
            assert_eq!(spec.to_string(), text);
            assert_eq!(DeviceSpec::parse(&spec.to_string()).unwrap(), spec);
        }
        let spec = DeviceSpec::parse("emu:ssd-plp:/tmp/log0").unwrap();
        assert_eq!(spec.path, PathBuf::from("/tmp/log0"));
        assert_eq!(spec.device_model(), Some(DeviceModel::SsdPlp));
    }

    #[test]
    fn bad_specs_are_explained() {
        let err = DeviceSpec::parse("emu:floppy:/tmp/d0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("floppy") && err.contains("hdd-7200") && err.contains("ram"),
            "{err}"
        );
        assert!(DeviceSpec::parse("emu:nvme").is_err());
        assert!(DeviceSpec::parse("emu:nvme:").is_err());
        assert!(DeviceSpec::parse("").is_err());
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
