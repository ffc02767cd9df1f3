//! Reading and writing the four labels on every leaf: the config (who this device is, which
//! pool, the vdev tree) and the uberblock ring.
//!
//! Crash behaviour, by step of a commit (`commit_uberblock` is called only after every block of
//! the txg is written and every leaf flushed):
//!
//! | crash during                  | on disk                                  | import picks        |
//! |-------------------------------|------------------------------------------|---------------------|
//! | block writes / first flush    | new blocks in free space, old tree intact | previous txg        |
//! | uberblock writes              | some slots new, some torn, some old       | newest slot that verifies, else previous |
//! | second flush                  | same as above                            | same                |
//!
//! Config updates write labels 0 and 2, flush, the txg's uberblock, flush, then labels 1 and 3,
//! flush: a crash leaves two good copies of the old config (with the old uberblocks) or of the
//! new one (with its uberblock) on every device, and import takes the config whose tree matches
//! the newest uberblock.

use crate::vdev::VdevTree;
use cairn_device::{Device, DeviceError};
use cairn_format::label::{
    LABEL_CONFIG_OFFSET, LABEL_CONFIG_SIZE, LABEL_COUNT, LABEL_RING_OFFSET, LABEL_SIZE,
    UBERBLOCK_RING_SLOTS, UBERBLOCK_SLOT_SIZE, label_offset, uberblock_offset,
};
use cairn_format::{FormatError, LabelConfig, LabelIdentity, Uberblock};
use std::sync::atomic::Ordering;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum LabelError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("{device}: no valid cairn label found ({detail})")]
    NoValidLabel { device: String, detail: String },
    /// The uberblock of `txg` reached no device of a data vdev; the source is the last
    /// device error on that vdev (none if every leaf was faulted already).
    #[error("txg {txg}: uberblock reached no device of vdev {vdev}")]
    UberblockLost {
        txg: u64,
        vdev: String,
        #[source]
        source: Option<DeviceError>,
    },
}

/// Writes `config` into the given labels of one device (no flush).
pub fn write_config(
    device: &dyn Device,
    config: &LabelConfig,
    labels: &[usize],
) -> Result<(), LabelError> {
    let bytes = config.encode().map_err(|err| LabelError::NoValidLabel {
        device: device.describe(),
        detail: err.to_string(),
    })?;
    for &index in labels {
        let offset = label_offset(index, device.size_bytes()) + LABEL_CONFIG_OFFSET;
        device.write_at(offset, &bytes)?;
    }
    Ok(())
}

/// The two halves a config update writes in turn (labels 0 and 2, then 1 and 3), so a crash
/// leaves two good copies of the old or the new config on every device.
pub const LABEL_HALVES: [[usize; 2]; 2] = [[0, 2], [1, 3]];

/// Rewrites the config of every usable leaf of the pool, half by half (`LABEL_HALVES`), with a
/// flush after each half. `base.leaf_guid` is replaced per leaf.
pub fn write_pool_config(tree: &VdevTree, base: &LabelConfig) -> Result<(), LabelError> {
    for half in &LABEL_HALVES {
        write_pool_config_half(tree, base, half)?;
    }
    Ok(())
}

/// Writes `base` (with each leaf's guid) into `labels` of every usable leaf, then flushes them.
/// A commit that changes the vdev tree writes the first half before its uberblock and the
/// second after it: until the uberblock is durable the old config survives in the second half,
/// and import pairs each config with the uberblocks of its tree (see `cairn-engine` import).
pub fn write_pool_config_half(
    tree: &VdevTree,
    base: &LabelConfig,
    labels: &[usize],
) -> Result<(), LabelError> {
    for leaf in tree.leaves().filter(|leaf| leaf.is_usable()) {
        let Some(device) = leaf.device() else {
            continue;
        };
        let mut config = base.clone();
        config.leaf_guid = leaf.guid;
        write_config(device.as_ref(), &config, labels)?;
    }
    for leaf in tree.leaves().filter(|leaf| leaf.is_usable()) {
        if let Some(device) = leaf.device() {
            device.flush()?;
        }
    }
    Ok(())
}

/// Erases all four labels of `device` (configs and uberblock rings), then flushes it: a device
/// that left its pool no longer claims to belong to it, and its label areas are zero again, so
/// it can be used elsewhere without `--force` (creation refuses non-zero label areas).
pub fn clear_labels(device: &dyn Device) -> Result<(), LabelError> {
    let zeros = vec![0u8; LABEL_SIZE as usize];
    for index in 0..LABEL_COUNT {
        device.write_at(label_offset(index, device.size_bytes()), &zeros)?;
    }
    device.flush()?;
    Ok(())
}

/// Reads the four config copies of a device; `Err` entries explain why a copy is unusable.
pub fn read_configs(device: &dyn Device) -> Vec<Result<LabelConfig, LabelError>> {
    let size = device.size_bytes();
    (0..LABEL_COUNT)
        .map(|index| {
            if size < 4 * cairn_format::label::LABEL_SIZE {
                return Err(LabelError::NoValidLabel {
                    device: device.describe(),
                    detail: format!("device of {size} bytes is too small for labels"),
                });
            }
            let mut buf = vec![0u8; LABEL_CONFIG_SIZE as usize];
            device.read_at(label_offset(index, size) + LABEL_CONFIG_OFFSET, &mut buf)?;
            LabelConfig::decode(&buf).map_err(|err: FormatError| LabelError::NoValidLabel {
                device: device.describe(),
                detail: format!("label {index}: {err}"),
            })
        })
        .collect()
}

/// The newest valid config on a device (highest txg among the copies that verify).
pub fn best_config(device: &dyn Device) -> Result<LabelConfig, LabelError> {
    let mut best: Option<LabelConfig> = None;
    let mut problems = Vec::new();
    for result in read_configs(device) {
        match result {
            Ok(config) => {
                if best.as_ref().is_none_or(|current| config.txg > current.txg) {
                    best = Some(config);
                }
            }
            Err(err) => problems.push(cairn_device::error_chain(&err)),
        }
    }
    best.ok_or_else(|| LabelError::NoValidLabel {
        device: device.describe(),
        detail: problems.join("; "),
    })
}

/// Every uberblock on the device that verifies, from all four rings, of a format version
/// this build reads.
pub fn read_uberblocks(device: &dyn Device) -> Vec<Uberblock> {
    ring_uberblocks(device, Uberblock::decode)
}

/// Every uberblock on the device that verifies, whatever its format version: import refuses
/// a pool whose newest one is of a version it cannot read (instead of passing it over and
/// opening an older txg).
pub fn read_uberblocks_any_version(device: &dyn Device) -> Vec<Uberblock> {
    ring_uberblocks(device, Uberblock::decode_any_version)
}

/// Who each intact config copy on the device names, whatever its format version (`None`
/// for a copy that does not verify): how import names a pool it cannot read.
pub fn read_identities(device: &dyn Device) -> Vec<Option<LabelIdentity>> {
    let size = device.size_bytes();
    if size < 4 * LABEL_SIZE {
        return vec![None; LABEL_COUNT];
    }
    (0..LABEL_COUNT)
        .map(|index| {
            let mut buf = vec![0u8; LABEL_CONFIG_SIZE as usize];
            device
                .read_at(label_offset(index, size) + LABEL_CONFIG_OFFSET, &mut buf)
                .ok()?;
            LabelConfig::identify(&buf).ok()
        })
        .collect()
}

fn ring_uberblocks(
    device: &dyn Device,
    decode: fn(&[u8]) -> Result<Uberblock, FormatError>,
) -> Vec<Uberblock> {
    let size = device.size_bytes();
    let ring_bytes = (UBERBLOCK_SLOT_SIZE * UBERBLOCK_RING_SLOTS) as usize;
    let mut found = Vec::new();
    for index in 0..LABEL_COUNT {
        let mut ring = vec![0u8; ring_bytes];
        let offset = label_offset(index, size) + LABEL_RING_OFFSET;
        if device.read_at(offset, &mut ring).is_err() {
            continue;
        }
        for slot in ring.chunks_exact(UBERBLOCK_SLOT_SIZE as usize) {
            if let Ok(ub) = decode(slot) {
                found.push(ub);
            }
        }
    }
    found.sort_by_key(|ub| std::cmp::Reverse(ub.txg));
    found.dedup_by(|a, b| a == b);
    found
}

/// Zeroes every ring slot of every usable leaf that holds a verifying uberblock of `pool_guid`
/// newer than `txg`, then flushes those leaves; returns how many slots were cleared. A rewind
/// to `txg` does this before its first commit: the txgs it gives up would otherwise stay the
/// newest in the rings (the new txgs reuse their numbers), and a later import would pick one
/// of them again.
pub fn discard_uberblocks_after(
    tree: &VdevTree,
    pool_guid: u64,
    txg: u64,
) -> Result<usize, LabelError> {
    let ring_bytes = (UBERBLOCK_SLOT_SIZE * UBERBLOCK_RING_SLOTS) as usize;
    let zeros = vec![0u8; UBERBLOCK_SLOT_SIZE as usize];
    let mut cleared = 0;
    for leaf in tree.leaves().filter(|leaf| leaf.is_usable()) {
        let Some(device) = leaf.device() else {
            continue;
        };
        let size = device.size_bytes();
        let mut wrote = false;
        for index in 0..LABEL_COUNT {
            let ring_offset = label_offset(index, size) + LABEL_RING_OFFSET;
            let mut ring = vec![0u8; ring_bytes];
            device.read_at(ring_offset, &mut ring)?;
            for (slot_index, slot) in ring.chunks_exact(UBERBLOCK_SLOT_SIZE as usize).enumerate() {
                let newer = Uberblock::decode(slot)
                    .is_ok_and(|ub| ub.pool_guid == pool_guid && ub.txg > txg);
                if newer {
                    let slot_offset = ring_offset + slot_index as u64 * UBERBLOCK_SLOT_SIZE;
                    device.write_at(slot_offset, &zeros)?;
                    cleared += 1;
                    wrote = true;
                }
            }
        }
        if wrote {
            device.flush()?;
        }
    }
    Ok(cleared)
}

/// Writes `ub` into its ring slot in all four labels of every usable leaf. Must be preceded and
/// followed by `VdevTree::flush_all`. A leaf whose write fails is faulted; the commit fails only
/// if some top-level vdev got the uberblock on none of its leaves.
pub fn commit_uberblock(tree: &VdevTree, ub: &Uberblock) -> Result<(), LabelError> {
    let slot = ub.encode_slot();
    for top in &tree.tops {
        let mut written = 0;
        let mut last_error = None;
        for leaf in top.leaves.iter().filter(|leaf| leaf.is_usable()) {
            let Some(device) = leaf.device() else {
                continue;
            };
            let size = device.size_bytes();
            let result = (0..LABEL_COUNT).try_for_each(|index| {
                device.write_at(uberblock_offset(index, size, ub.txg), &slot)
            });
            match result {
                // A side being resilvered is no copy of the pool yet.
                Ok(()) if leaf.is_resilvering() => {}
                Ok(()) => written += 1,
                Err(err) => {
                    leaf.errors.write.fetch_add(1, Ordering::Relaxed);
                    leaf.fault();
                    cairn_metrics::events::record(
                        "pool",
                        format!("uberblock write failed, leaf faulted: {err}"),
                    );
                    last_error = Some(err);
                }
            }
        }
        // A lost log device is not needed to import the pool (see `VdevTree::flush_all`).
        if written == 0 && top.config.role != cairn_format::VdevRole::Log {
            return Err(LabelError::UberblockLost {
                txg: ub.txg,
                vdev: top.kind_name(),
                source: last_error,
            });
        }
    }
    Ok(())
}
