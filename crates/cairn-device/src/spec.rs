//! Device specs: how a leaf is named on the command line and in labels.
//!
//! A spec is either a plain path (`/dev/sdb`, `disks/d0`) or `emu:MODEL:PATH`, which names the
//! file or block device at PATH wrapped in an emulated device model. Parsing and printing
//! round-trip: `DeviceSpec::parse(&spec.to_string()) == Ok(spec)`, so the label can store the
//! string.
//!
//! The name is here, with the devices every layer sees (a pool's leaves carry their spec); the
//! models themselves, and opening a spec, are in `cairn-emulate` (`open_device`), so this crate
//! holds no emulator. It does state which model names a spec may carry (`MODEL_NAMES`), so a
//! misspelt model is refused where the spec is read; `cairn-emulate`'s `DeviceModel::NAMES` is
//! this list, and its tests check that each model answers to its name.
//!
//! Invariant: a parsed spec's model, when present, is one of `MODEL_NAMES`.

use std::fmt;
use std::path::PathBuf;

use crate::device::DeviceError;

const EMU_PREFIX: &str = "emu:";

/// Every emulated model a spec may name (`emu:MODEL:PATH`), as `cairn-emulate`'s
/// `DeviceModel::NAMES` spells them.
pub const MODEL_NAMES: [&str; 5] = ["hdd-7200", "ssd-sata", "ssd-plp", "nvme", "ram"];

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
                MODEL_NAMES.join(", ")
            )));
        };
        if !MODEL_NAMES.contains(&model) {
            return Err(invalid(format!(
                "unknown device model {model:?} (known models: {})",
                MODEL_NAMES.join(", ")
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
        // The model it names: `cairn-emulate`'s `spec_names_its_model`.
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
}
