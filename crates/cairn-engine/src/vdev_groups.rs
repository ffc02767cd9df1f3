//! Vdevs as a command gives them (`VdevGroup`, with the `CreateOptions` for opening their
//! devices): checking their shape, opening their devices, refusing a device that holds
//! something (`check_free`, with `probe`), laying out a top-level vdev, and the allocator's
//! view of a vdev tree (`space_layout`).
//!
//! Shared by `pool create` (`create`), `pool add` (`layout`), `pool attach`/`replace`
//! (`resilver`), cache devices and import. It uses no sibling but `probe`, so each of those
//! depends on it one way.

use crate::probe;
use crate::{DeviceOpener, EngineError, new_guid};
use cairn_device::Device;
use cairn_device::spec::DeviceSpec;
use cairn_format::label::{
    DEVICE_SIZE_MIN, TopVdevConfig, TopVdevKind, VdevRole, data_region_size,
};
use cairn_format::raidz::{RAIDZ_PARITY_MAX, RAIDZ_WIDTH_MAX, RaidzGeometry};
use cairn_format::{ASHIFT_DEFAULT, PoolState};
use cairn_pool::labels::{best_config, read_uberblocks};
use cairn_pool::space::{SpaceClass, VdevSpace, metaslab_shift_for};
use cairn_pool::vdev::{Leaf, TopVdev, VdevTree};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One top-level vdev as given on the command line.
#[derive(Debug, Clone)]
pub struct VdevGroup {
    pub mirror: bool,
    /// A raidz vdev with this many parity columns (1-3; `raidz1`..`raidz3`), `mirror` false.
    pub raidz_parity: Option<u8>,
    /// A separate intent-log device (`log` in the zpool grammar).
    pub log: bool,
    pub devices: Vec<DeviceSpec>,
}

#[derive(Debug, Clone)]
pub struct CreateOptions {
    /// Create missing backing files (sparse) of this size.
    pub create_size_bytes: Option<u64>,
    pub ashift: u8,
    /// Reuse devices that hold data or carry another pool's label.
    pub force: bool,
    pub root_properties: Vec<(String, String)>,
    /// Recorded in the pool history by the creating txg itself, so a pool that exists has its
    /// `create` entry and no later sync (which could fail) is needed for it.
    pub history_entry: Option<String>,
}

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            create_size_bytes: None,
            ashift: ASHIFT_DEFAULT,
            force: false,
            root_properties: Vec::new(),
            history_entry: None,
        }
    }
}

pub(crate) fn create_error(message: impl Into<String>) -> EngineError {
    EngineError::Create(message.into())
}

/// Checks each group's shape (a mirror of two or more devices, a raidz vdev of more devices
/// than parity, a plain vdev of one) and that no device appears twice or is in `seen` already
/// (`taken` words the error).
pub(crate) fn check_groups(
    groups: &[VdevGroup],
    mut seen: BTreeSet<PathBuf>,
    taken: impl Fn(&Path) -> EngineError,
) -> Result<(), EngineError> {
    for group in groups {
        if let Some(parity) = group.raidz_parity {
            check_raidz_group(group, parity)?;
        } else if group.mirror && group.devices.len() < 2 {
            return Err(create_error("a mirror needs at least two devices"));
        } else if !group.mirror && group.devices.len() != 1 {
            return Err(create_error("a plain vdev is exactly one device"));
        }
        for spec in &group.devices {
            if !seen.insert(spec.path.clone()) {
                return Err(taken(&spec.path));
            }
        }
    }
    Ok(())
}

/// A raidz group: parity 1-3, not a mirror, not a log device, and more devices than parity.
fn check_raidz_group(group: &VdevGroup, parity: u8) -> Result<(), EngineError> {
    if parity == 0 || parity > RAIDZ_PARITY_MAX || group.mirror {
        return Err(create_error(format!("raidz{parity} is not a vdev kind")));
    }
    if group.log {
        return Err(create_error(
            "log devices cannot be raidz (a log block is small: use a mirror)",
        ));
    }
    let minimum = usize::from(parity) + 1;
    if group.devices.len() < minimum {
        return Err(create_error(format!(
            "raidz{parity} needs at least {minimum} devices, got {}",
            group.devices.len()
        )));
    }
    if group.devices.len() > RAIDZ_WIDTH_MAX as usize {
        return Err(create_error(format!(
            "raidz{parity} takes at most {RAIDZ_WIDTH_MAX} devices, got {}",
            group.devices.len()
        )));
    }
    Ok(())
}

/// Opens the devices of `group` (creating missing files when asked), checks them, and lays out
/// the top-level vdev `id` they form: for a new pool and for `pool add`.
pub(crate) fn open_top(
    id: u32,
    group: &VdevGroup,
    create: &CreateOptions,
    opener: &DeviceOpener,
) -> Result<TopVdev, EngineError> {
    let mut leaves = Vec::new();
    let region = match open_leaves(group, create, opener, &mut leaves) {
        Ok(region) => region,
        Err(err) => {
            for leaf in &leaves {
                leaf.shutdown();
            }
            return Err(err);
        }
    };
    // A raidz vdev's address space is its children's (the smallest one's) interleaved.
    let region = match group.raidz_parity {
        Some(parity) => RaidzGeometry::new(leaves.len() as u32, parity, create.ashift)
            .map_err(|err| create_error(format!("raidz layout: {err}")))
            .map(|geometry| geometry.vdev_bytes(region)),
        None => Ok(region),
    };
    let region = match region {
        Ok(region) => region,
        Err(err) => {
            leaves.iter().for_each(|leaf| leaf.shutdown());
            return Err(err);
        }
    };
    let metaslab_shift = metaslab_shift_for(region);
    let metaslab_count = region >> metaslab_shift;
    if metaslab_count == 0 {
        for leaf in &leaves {
            leaf.shutdown();
        }
        return Err(create_error("devices are too small for one metaslab"));
    }
    let config = TopVdevConfig {
        id,
        guid: new_guid(),
        kind: match (group.raidz_parity, group.mirror) {
            (Some(parity), _) => TopVdevKind::RaidZ { parity },
            (None, true) => TopVdevKind::Mirror,
            (None, false) => TopVdevKind::Leaf,
        },
        role: if group.log {
            VdevRole::Log
        } else {
            VdevRole::Normal
        },
        ashift: create.ashift,
        metaslab_shift,
        metaslab_count,
        children: Vec::new(),
    };
    Ok(TopVdev {
        config,
        leaves,
        data_size_bytes: metaslab_count << metaslab_shift,
    })
}

/// Opens and checks the devices of `group` into `leaves`; returns the smallest data region.
pub(crate) fn open_leaves(
    group: &VdevGroup,
    create: &CreateOptions,
    opener: &DeviceOpener,
    leaves: &mut Vec<Arc<Leaf>>,
) -> Result<u64, EngineError> {
    let mut region = u64::MAX;
    for spec in &group.devices {
        let device = opener(spec, create.create_size_bytes)?;
        let size = device.size_bytes();
        if size < DEVICE_SIZE_MIN {
            return Err(create_error(format!(
                "{spec} is {size} bytes; the minimum device size is {DEVICE_SIZE_MIN} bytes"
            )));
        }
        if !create.force {
            check_free(spec, device.as_ref())?;
        }
        region = region.min(data_region_size(size));
        leaves.push(Leaf::open(new_guid(), spec.clone(), device));
    }
    Ok(region)
}

/// Refuses a device that holds something a user may want: another cairn pool's devices (unless
/// destroyed, or half-created: labels but not one uberblock of that pool, as a create cut short
/// leaves them), a known file system or partition table, or any non-zero byte where the labels
/// go. Reads only.
pub(crate) fn check_free(spec: &DeviceSpec, device: &dyn Device) -> Result<(), EngineError> {
    if let Ok(existing) = best_config(device) {
        let committed = read_uberblocks(device)
            .iter()
            .any(|ub| ub.pool_guid == existing.pool_guid);
        if existing.state == PoolState::Destroyed || !committed {
            return Ok(());
        }
        let state = match existing.state {
            PoolState::Exported => "exported",
            _ => "active",
        };
        return Err(create_error(format!(
            "{spec} belongs to {state} pool '{}'; use -f (--force) to overwrite it",
            existing.pool_name
        )));
    }
    let areas = probe::read_label_areas(device)?;
    match probe::existing_content(&areas) {
        None => Ok(()),
        Some(found) => Err(create_error(format!(
            "{spec} holds {found}; use -f (--force) to overwrite it"
        ))),
    }
}

pub(crate) fn space_layout(tree: &VdevTree) -> Vec<VdevSpace> {
    tree.tops
        .iter()
        .map(|top| VdevSpace {
            class: if top.config.role == VdevRole::Log {
                SpaceClass::Log
            } else {
                SpaceClass::Normal
            },
            vdev: top.id(),
            data_size_bytes: top.data_size_bytes,
            ashift: top.config.ashift,
            metaslab_shift: top.config.metaslab_shift,
            raidz: top.raidz(),
        })
        .collect()
}
