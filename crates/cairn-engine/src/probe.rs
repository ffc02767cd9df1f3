//! What a device holds before a pool is created on it, so `pool create` and `pool add` never
//! destroy data by accident (zpool's "contains a filesystem" check, our own code).
//!
//! A device is free when every byte where this pool's labels would go (the two label areas at
//! the front and the two at the end) is zero. Otherwise it holds something: if it is a known
//! file system, partition table or volume signature, the finding names it (the same families
//! `blkid -p` reports: ext2/3/4, XFS, btrfs, FAT, swap, LUKS, LVM2, md RAID, ISO 9660, ZFS, GPT
//! and DOS partition tables); else it names the first non-zero offset.
//!
//! Cairn's own labels are judged before this (in `create::open_leaves`), because a device of a
//! destroyed or half-created cairn pool is free although its label areas are not zero.
//!
//! Reading is all this module does: nothing is written, so a refused device keeps every byte.

use cairn_device::{Device, DeviceError};
use cairn_format::label::{LABEL_COUNT, LABEL_SIZE, label_offset};

/// The front and end label areas of a device (each two labels long).
pub(crate) struct LabelAreas {
    /// Bytes `[0, 2 * LABEL_SIZE)`.
    pub front: Vec<u8>,
    /// The last two labels, starting at `end_offset`.
    pub end: Vec<u8>,
    pub end_offset: u64,
}

/// Reads both label areas. The device must hold at least four labels (checked by the caller
/// against `DEVICE_SIZE_MIN`).
pub(crate) fn read_label_areas(device: &dyn Device) -> Result<LabelAreas, DeviceError> {
    let size = device.size_bytes();
    let area_bytes = (2 * LABEL_SIZE) as usize;
    let mut front = vec![0u8; area_bytes];
    device.read_at(label_offset(0, size), &mut front)?;
    let end_offset = label_offset(LABEL_COUNT - 2, size);
    let mut end = vec![0u8; area_bytes];
    device.read_at(end_offset, &mut end)?;
    // The bytes after the last label (a size that is not a whole number of labels) are not
    // ours either; a GPT backup header lives in the very last sector.
    let tail_offset = end_offset + area_bytes as u64;
    if tail_offset < size {
        let mut tail = vec![0u8; (size - tail_offset) as usize];
        device.read_at(tail_offset, &mut tail)?;
        end.extend_from_slice(&tail);
    }
    Ok(LabelAreas {
        front,
        end,
        end_offset,
    })
}

/// What the label areas hold, in words for an error message ("an ext4 file system"), or
/// `None` when they are all zero.
pub(crate) fn existing_content(areas: &LabelAreas) -> Option<String> {
    if let Some(name) = signature(&areas.front, &areas.end) {
        return Some(name.to_string());
    }
    if let Some(at) = areas.front.iter().position(|&byte| byte != 0) {
        return Some(format!("data (a non-zero byte at offset {at})"));
    }
    areas.end.iter().position(|&byte| byte != 0).map(|at| {
        format!(
            "data (a non-zero byte at offset {})",
            areas.end_offset + at as u64
        )
    })
}

fn bytes_at(area: &[u8], offset: usize, expected: &[u8]) -> bool {
    area.get(offset..offset + expected.len()) == Some(expected)
}

fn u32_at(area: &[u8], offset: usize) -> u32 {
    area.get(offset..offset + 4)
        .and_then(|bytes| bytes.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// A known signature in the front area (or a GPT backup header at the end).
fn signature(front: &[u8], end: &[u8]) -> Option<&'static str> {
    if let Some(ext) = ext_family(front) {
        return Some(ext);
    }
    let simple: [(usize, &[u8], &'static str); 7] = [
        (0, b"XFSB", "an XFS file system"),
        (0x10040, b"_BHRfS_M", "a btrfs file system"),
        (0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        (0x4000, b"SKUL\xba\xbe", "a LUKS encrypted volume"),
        (0x8001, b"CD001", "an ISO 9660 file system"),
        (512, b"EFI PART", "a GPT partition table"),
        (4096, b"EFI PART", "a GPT partition table"),
    ];
    for (offset, magic, name) in simple {
        if bytes_at(front, offset, magic) {
            return Some(name);
        }
    }
    // LVM2 puts its label in one of the first four sectors.
    if (0..4).any(|sector| bytes_at(front, sector * 512, b"LABELONE")) {
        return Some("an LVM2 physical volume");
    }
    // md RAID superblocks 1.1 (at 0) and 1.2 (at 4 KiB).
    if [0, 4096].iter().any(|&at| u32_at(front, at) == 0xa92b_4efc) {
        return Some("a Linux RAID (md) member");
    }
    if swap_signature(front) {
        return Some("Linux swap space");
    }
    // ZFS: the uberblock magic at the start of the first label's uberblock array.
    let zfs_magic = 0x00ba_b10c_u64;
    if [zfs_magic.to_le_bytes(), zfs_magic.to_be_bytes()]
        .iter()
        .any(|magic| bytes_at(front, 128 << 10, magic))
    {
        return Some("a ZFS pool member");
    }
    if bytes_at(front, 510, &[0x55, 0xaa]) {
        let fat = bytes_at(front, 0x36, b"FAT") || bytes_at(front, 0x52, b"FAT32");
        return Some(if fat {
            "a FAT file system"
        } else {
            "a DOS (MBR) partition table"
        });
    }
    let gpt_backup = [512, 4096]
        .iter()
        .any(|&sector| end.len() >= sector && bytes_at(end, end.len() - sector, b"EFI PART"));
    gpt_backup.then_some("a GPT partition table (backup header)")
}

/// ext2, ext3 or ext4, told apart by feature flags as `blkid` does: ext4 once any feature ext3
/// lacks is on, ext3 with a journal, else ext2.
fn ext_family(front: &[u8]) -> Option<&'static str> {
    const SUPERBLOCK: usize = 1024;
    if !bytes_at(front, SUPERBLOCK + 0x38, &0xef53_u16.to_le_bytes()) {
        return None;
    }
    let compat = u32_at(front, SUPERBLOCK + 0x5c);
    let incompat = u32_at(front, SUPERBLOCK + 0x60);
    let ro_compat = u32_at(front, SUPERBLOCK + 0x64);
    // ext3 knows: incompat FILETYPE, RECOVER, META_BG; ro_compat SPARSE_SUPER, LARGE_FILE,
    // BTREE_DIR.
    let beyond_ext3 = incompat & !(0x2 | 0x4 | 0x10) != 0 || ro_compat & !(0x1 | 0x2 | 0x4) != 0;
    Some(if beyond_ext3 {
        "an ext4 file system"
    } else if compat & 0x4 != 0 {
        "an ext3 file system"
    } else {
        "an ext2 file system"
    })
}

/// `mkswap` writes its magic at the end of the first page, whatever the page size.
fn swap_signature(front: &[u8]) -> bool {
    [4096usize, 8192, 16384, 65536].iter().any(|&page| {
        bytes_at(front, page - 10, b"SWAPSPACE2") || bytes_at(front, page - 10, b"SWAP-SPACE")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn areas() -> LabelAreas {
        LabelAreas {
            front: vec![0; (2 * LABEL_SIZE) as usize],
            end: vec![0; (2 * LABEL_SIZE) as usize],
            end_offset: 10 << 20,
        }
    }

    #[test]
    fn zeros_are_free_and_any_other_byte_is_named_by_offset() {
        let mut blank = areas();
        assert_eq!(existing_content(&blank), None);
        blank.end[5] = 1;
        assert_eq!(
            existing_content(&blank).as_deref(),
            Some("data (a non-zero byte at offset 10485765)")
        );
        blank.front[300] = 7;
        assert_eq!(
            existing_content(&blank).as_deref(),
            Some("data (a non-zero byte at offset 300)")
        );
    }

    #[test]
    fn signatures_are_named() {
        let found = |place: &dyn Fn(&mut LabelAreas)| {
            let mut a = areas();
            place(&mut a);
            existing_content(&a).unwrap()
        };
        assert_eq!(
            found(&|a| a.front[..4].copy_from_slice(b"XFSB")),
            "an XFS file system"
        );
        assert_eq!(
            found(&|a| a.front[0x10040..0x10048].copy_from_slice(b"_BHRfS_M")),
            "a btrfs file system"
        );
        assert_eq!(
            found(&|a| a.front[4086..4096].copy_from_slice(b"SWAPSPACE2")),
            "Linux swap space"
        );
        assert_eq!(
            found(&|a| a.front[..6].copy_from_slice(b"LUKS\xba\xbe")),
            "a LUKS encrypted volume"
        );
        assert_eq!(
            found(&|a| a.front[510..512].copy_from_slice(&[0x55, 0xaa])),
            "a DOS (MBR) partition table"
        );
        assert_eq!(
            found(&|a| {
                a.front[510..512].copy_from_slice(&[0x55, 0xaa]);
                a.front[512..520].copy_from_slice(b"EFI PART");
            }),
            "a GPT partition table"
        );
        assert_eq!(
            found(&|a| {
                a.front[510..512].copy_from_slice(&[0x55, 0xaa]);
                a.front[0x52..0x57].copy_from_slice(b"FAT32");
            }),
            "a FAT file system"
        );
        assert_eq!(
            found(&|a| {
                let len = a.end.len();
                a.end[len - 512..len - 504].copy_from_slice(b"EFI PART");
            }),
            "a GPT partition table (backup header)"
        );
    }

    #[test]
    fn ext_generations_follow_feature_flags() {
        let ext = |compat: u32, incompat: u32, ro_compat: u32| {
            let mut a = areas();
            a.front[0x438..0x43a].copy_from_slice(&0xef53_u16.to_le_bytes());
            a.front[0x45c..0x460].copy_from_slice(&compat.to_le_bytes());
            a.front[0x460..0x464].copy_from_slice(&incompat.to_le_bytes());
            a.front[0x464..0x468].copy_from_slice(&ro_compat.to_le_bytes());
            existing_content(&a).unwrap()
        };
        assert_eq!(ext(0, 0x2, 0x1), "an ext2 file system");
        assert_eq!(ext(0x4, 0x2, 0x3), "an ext3 file system");
        // extents + 64bit + flex_bg, metadata_csum: what mkfs.ext4 writes today.
        assert_eq!(ext(0x4, 0x2c2, 0x400), "an ext4 file system");
    }
}
