//! The vdev grammar of `cairn pool create`, as zpool spells it:
//!
//! ```text
//! VDEVS  := GROUP... [log GROUP...] [cache DEVICE...]
//! GROUP  := DEVICE | mirror DEVICE DEVICE... | raidz[1|2|3] DEVICE DEVICE...
//! DEVICE := PATH | emu:MODEL:PATH
//! ```
//!
//! Groups after `log` are separate intent-log devices; devices after `cache` are cache devices
//! (the SSD read tier: copies only, so never mirrored). `raidz` is `raidz1`; a raidzN group
//! needs at least N + 1 devices. `draid`, `spare`, `special` and `dedup` are recognised and
//! refused with a clear "not supported yet" rather than being taken for file names. Paths are made absolute here, so
//! the pool cache names the same files whatever directory later commands run in.

use anyhow::{Result, anyhow, bail};
use cairn_device::spec::DeviceSpec;
use cairn_engine::VdevGroup;
use cairn_frontend::admin::{GroupLayout, VdevLayout};

/// Keywords zpool knows that cairn does not implement yet.
const UNSUPPORTED: &[&str] = &["draid", "spare", "special", "dedup"];

/// The parity of a raidz keyword (`raidz` is `raidz1`), `None` for any other word.
fn raidz_parity(keyword: &str) -> Option<u8> {
    match keyword {
        "raidz" | "raidz1" => Some(1),
        "raidz2" => Some(2),
        "raidz3" => Some(3),
        _ => None,
    }
}

/// What a vdev list names: groups of the vdev tree (data and log), and cache devices.
#[derive(Debug, Default)]
pub struct Vdevs {
    pub groups: Vec<VdevGroup>,
    pub cache: Vec<DeviceSpec>,
}

impl Vdevs {
    /// The vdevs as an administrative request carries them (paths absolute already).
    pub fn layout(&self) -> VdevLayout {
        VdevLayout {
            groups: self
                .groups
                .iter()
                .map(|group| GroupLayout {
                    mirror: group.mirror,
                    raidz_parity: group.raidz_parity,
                    log: group.log,
                    devices: group.devices.iter().map(ToString::to_string).collect(),
                })
                .collect(),
            cache: self.cache.iter().map(ToString::to_string).collect(),
        }
    }
}

/// `--size` parsed: the size of device files to create (`None`: every device must exist).
pub fn parse_size_option(size: Option<&str>) -> Result<Option<u64>> {
    size.map(cairn_dataset::properties::parse_size)
        .transpose()
        .map_err(|err| anyhow!("invalid --size: {err}"))
}

/// Parses one device name and makes its path absolute.
pub fn parse_device(word: &str) -> Result<DeviceSpec> {
    let mut spec = DeviceSpec::parse(word).map_err(|err| anyhow!("invalid device {err}"))?;
    spec.path =
        std::path::absolute(&spec.path).map_err(|err| anyhow!("invalid device '{word}': {err}"))?;
    Ok(spec)
}

/// A device word with its path made absolute; left as it is when it does not parse (the
/// command reports that).
pub fn absolute_device_word(word: &str) -> String {
    parse_device(word).map_or_else(|_| word.to_string(), |spec| spec.to_string())
}

pub fn parse_vdevs(words: &[String]) -> Result<Vdevs> {
    let mut groups: Vec<VdevGroup> = Vec::new();
    let mut open_group: Option<VdevGroup> = None;
    let mut log = false;
    let mut cache: Option<Vec<DeviceSpec>> = None;
    for word in words {
        let keyword = word.to_ascii_lowercase();
        if let Some(cache) = cache.as_mut() {
            match keyword.as_str() {
                "mirror" => bail!("cache devices cannot be mirrored (they hold copies only)"),
                word if raidz_parity(word).is_some() => {
                    bail!("cache devices cannot be raidz (they hold copies only)")
                }
                "log" => bail!("log devices go before 'cache'"),
                "cache" => bail!("'cache' is given twice"),
                _ => cache.push(parse_device(word)?),
            }
            continue;
        }
        if keyword == "cache" {
            if let Some(group) = open_group.take() {
                groups.push(finish_group(group, groups.len())?);
            }
            cache = Some(Vec::new());
            continue;
        }
        if UNSUPPORTED.contains(&keyword.as_str()) || keyword.starts_with("draid") {
            bail!(
                "'{word}' vdevs are not supported yet (supported: plain devices, mirror, raidz1-3 and log)"
            );
        }
        if keyword == "log" {
            if log {
                bail!("'log' is given twice");
            }
            if let Some(group) = open_group.take() {
                groups.push(finish_group(group, groups.len())?);
            }
            log = true;
            continue;
        }
        let parity = raidz_parity(&keyword);
        if keyword == "mirror" || parity.is_some() {
            if let Some(group) = open_group.take() {
                groups.push(finish_group(group, groups.len())?);
            }
            open_group = Some(VdevGroup {
                mirror: parity.is_none(),
                raidz_parity: parity,
                log,
                devices: Vec::new(),
            });
            continue;
        }
        let spec = parse_device(word)?;
        match open_group.as_mut() {
            Some(group) => group.devices.push(spec),
            None => groups.push(VdevGroup {
                mirror: false,
                raidz_parity: None,
                log,
                devices: vec![spec],
            }),
        }
    }
    if let Some(mirror) = open_group.take() {
        groups.push(finish_group(mirror, groups.len())?);
    }
    let cache = cache.unwrap_or_default();
    if groups.is_empty() && cache.is_empty() {
        bail!(
            "no devices given (grammar: PATH... | mirror PATH PATH... | raidz[1-3] PATH PATH... [log ...] [cache PATH...])"
        );
    }
    Ok(Vdevs { groups, cache })
}

fn finish_group(group: VdevGroup, index: usize) -> Result<VdevGroup> {
    if let Some(parity) = group.raidz_parity {
        let minimum = usize::from(parity) + 1;
        if group.devices.len() < minimum {
            bail!(
                "raidz{parity}-{index} needs at least {minimum} devices (parity {parity} + 1), got {}",
                group.devices.len()
            );
        }
    } else if group.devices.len() < 2 {
        bail!(
            "mirror-{index} needs at least two devices, got {}",
            group.devices.len()
        );
    }
    Ok(group)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn mirrors_and_plain_devices_group_like_zpool() {
        let groups = parse_vdevs(&words("mirror /a /b mirror /c /d /e /f"))
            .unwrap()
            .groups;
        let shape: Vec<(bool, usize)> =
            groups.iter().map(|g| (g.mirror, g.devices.len())).collect();
        // A plain device after a mirror belongs to that mirror, as in zpool.
        assert_eq!(shape, vec![(true, 2), (true, 4)]);
        let groups = parse_vdevs(&words("/a /b")).unwrap().groups;
        assert!(groups.iter().all(|g| !g.mirror && g.devices.len() == 1));
    }

    #[test]
    fn groups_after_log_are_log_devices() {
        let groups = parse_vdevs(&words("mirror /a /b log /c mirror /d /e"))
            .unwrap()
            .groups;
        let shape: Vec<(bool, bool, usize)> = groups
            .iter()
            .map(|g| (g.mirror, g.log, g.devices.len()))
            .collect();
        assert_eq!(
            shape,
            vec![(true, false, 2), (false, true, 1), (true, true, 2)]
        );
    }

    #[test]
    fn devices_after_cache_are_cache_devices() {
        let vdevs = parse_vdevs(&words("mirror /a /b log /s cache /c0 emu:nvme:/c1")).unwrap();
        assert_eq!(vdevs.groups.len(), 2);
        let cache: Vec<String> = vdevs.cache.iter().map(|spec| spec.to_string()).collect();
        assert_eq!(cache, vec!["/c0", "emu:nvme:/c1"]);
        let only_cache = parse_vdevs(&words("cache /c0")).unwrap();
        assert!(only_cache.groups.is_empty() && only_cache.cache.len() == 1);
        assert!(parse_vdevs(&words("/a cache mirror /c0 /c1")).is_err());
        assert!(parse_vdevs(&words("/a cache /c0 log /s")).is_err());
        assert!(parse_vdevs(&words("/a cache /c0 cache /c1")).is_err());
    }

    #[test]
    fn relative_paths_become_absolute() {
        let groups = parse_vdevs(&words("disk.img")).unwrap().groups;
        assert!(groups[0].devices[0].path.is_absolute());
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            absolute_device_word("emu:nvme:c.img"),
            format!("emu:nvme:{}", here.join("c.img").display())
        );
        // Made absolute twice, a word does not change.
        let once = absolute_device_word("d0.img");
        assert_eq!(absolute_device_word(&once), once);
    }

    #[test]
    fn unsupported_keywords_and_short_mirrors_are_refused() {
        let err = parse_vdevs(&words("/a spare /b")).unwrap_err().to_string();
        assert!(
            err.contains("'spare'") && err.contains("not supported yet"),
            "{err}"
        );
        assert!(parse_vdevs(&words("/a log /b log /c")).is_err());
        assert!(parse_vdevs(&words("draid /a /b /c")).is_err());
        let err = parse_vdevs(&words("mirror /a")).unwrap_err().to_string();
        assert!(err.contains("at least two"), "{err}");
        assert!(parse_vdevs(&[]).is_err());
    }

    #[test]
    fn raidz_groups_take_their_parity_and_refuse_too_few_devices() {
        let groups = parse_vdevs(&words("raidz /a /b raidz2 /c /d /e raidz3 /f /g /h /i"))
            .unwrap()
            .groups;
        let shape: Vec<(bool, Option<u8>, usize)> = groups
            .iter()
            .map(|g| (g.mirror, g.raidz_parity, g.devices.len()))
            .collect();
        assert_eq!(
            shape,
            vec![
                (false, Some(1), 2),
                (false, Some(2), 3),
                (false, Some(3), 4)
            ]
        );
        let err = parse_vdevs(&words("raidz2 /a /b")).unwrap_err().to_string();
        assert!(err.contains("at least 3 devices"), "{err}");
        assert!(parse_vdevs(&words("/a cache raidz /c0 /c1")).is_err());
    }
}
