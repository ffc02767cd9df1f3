//! The control directory: `.cairn/snapshot/<name>/` in the root of every mount shows each
//! snapshot of the mounted filesystem, read-only, as ZFS's `.zfs/snapshot` does. The list is
//! live (asked of the pool at each listing and lookup): a snapshot taken after the mount
//! appears, a destroyed one disappears. Inside a snapshot, reads, listings, `stat`,
//! `readlink` and extended attributes work; every change fails with EROFS, and so does any
//! change of `.cairn` and `.cairn/snapshot` themselves. The `snapdir` property says whether the
//! root lists `.cairn` (`visible`) or not (`hidden`, the default); either way it can be
//! entered by name (`cd .cairn`).
//!
//! The name `.cairn` in the root is reserved while mounted: creating, linking or renaming
//! anything to it fails with EEXIST (it exists: it is the control directory). A file of that
//! name already in the root (made before this, or through another front end) stays on disk but
//! is shadowed by the control directory while mounted, as `.zfs` shadows one on ZFS.
//!
//! Inode numbers: the kernel must never see one number for two inodes. The mounted
//! filesystem's inodes keep their object numbers (`convert.rs`), which stay below 2^63; every
//! inode here has bit 63 set (`CONTROL_INO_BIT`) and reads, from the top:
//!
//! ```text
//!  63  62 ........ 40  39 ............ 0
//!  1   slot (23 bits)  object (40 bits)
//! ```
//!
//! Slot 0 holds the two directories of the control directory (`.cairn` is object 1,
//! `.cairn/snapshot` object 2). Each snapshot gets a slot from 1 up the first time this mount
//! sees it, and keeps it while it exists; its inodes are its slot with their object numbers
//! (its root directory is object 2). Slots are never reused within a mount: a snapshot
//! destroyed and taken again under the same name (told apart by its creation txg) gets a new
//! one, so an inode the kernel still holds of the old one can only answer ENOENT, never show
//! the new one's file of the same number. A mount runs out after 2^23 - 1 snapshots seen
//! (ENOSPC on the next), and a snapshot's objects past 2^40 cannot be shown (EINVAL); both are
//! far beyond what a pool holds.
//!
//! Destroy: a snapshot browsed here is closed under its readers when it is destroyed
//! (`cairn_engine::SnapshotFilesystem`): every later call on its inodes answers ENOENT, never
//! data from its freed blocks. The snapshots' entries in `.cairn/snapshot` are given to the
//! kernel with no caching time, so a path through a destroyed snapshot fails at its next use.
//!
//! Invariants: `node_of` and `Node::ino` are each other's inverse on valid numbers (tested);
//! nothing here changes a filesystem. This file holds the numbering and the snapshots a mount
//! has seen (`SnapshotDir`), using `convert.rs` only; `control_ops.rs` answers the requests on
//! the control directory's inodes, and `ops.rs` routes every request on an inode with
//! `CONTROL_INO_BIT` there and refuses changes.

use super::convert::{CONTROL_INO_BIT, ino_of, object_of};
use cairn_dataset::properties::SnapdirMode;
use cairn_engine::{EngineError, Pool, SnapshotFilesystem};
use cairn_fs::{Filesystem, FsError, ROOT_OBJECT};
use fuser::{FileAttr, FileType, INodeNo};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// The control directory's name in the root of a mount.
pub(super) const CONTROL_DIR_NAME: &[u8] = b".cairn";
/// The directory of snapshots in the control directory.
pub(super) const SNAPSHOT_DIR_NAME: &[u8] = b"snapshot";
/// Bits of a snapshot's object number in its inode numbers.
const OBJECT_BITS: u32 = 40;
/// Bits of the slot.
const SLOT_BITS: u32 = 23;
const OBJECT_MASK: u64 = (1 << OBJECT_BITS) - 1;
const SLOT_MAX: u64 = (1 << SLOT_BITS) - 1;
// The marker bit, the slot and the object fill the 64 bits exactly.
const _: () = assert!(CONTROL_INO_BIT == 1 << (OBJECT_BITS + SLOT_BITS));
/// `.cairn`: slot 0, object 1.
pub(super) const CONTROL_DIR_INO: u64 = CONTROL_INO_BIT | 1;
/// `.cairn/snapshot`: slot 0, object 2.
pub(super) const SNAPSHOT_DIR_INO: u64 = CONTROL_INO_BIT | 2;
/// The root's listing gives `.cairn` (when visible) last, with a cookie above every entry's
/// (theirs are map keys, below 2^62, plus 3) that is still a positive file offset to the
/// kernel (which keeps a listing's position as a signed `loff_t`: u64::MAX, -1 to it, lost
/// the entry).
pub(super) const CONTROL_DIR_COOKIE: u64 = i64::MAX as u64;
/// How long the kernel may keep the entries of `.cairn/snapshot` and their attributes: not at
/// all, so that a destroyed snapshot is gone at once and one taken again under its name is
/// found anew.
pub(super) const SNAPSHOT_ENTRY_TTL: Duration = Duration::ZERO;

/// What a FUSE inode number names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Node {
    /// An object of the mounted filesystem.
    Head(u64),
    /// `.cairn`.
    ControlDir,
    /// `.cairn/snapshot`.
    SnapshotDir,
    /// Object `object` of the snapshot in `slot` (0 or unknown: no such inode).
    Snapshot { slot: u64, object: u64 },
}

pub(super) fn node_of(ino: INodeNo) -> Node {
    if ino.0 & CONTROL_INO_BIT == 0 {
        return Node::Head(object_of(ino));
    }
    match ino.0 {
        CONTROL_DIR_INO => Node::ControlDir,
        SNAPSHOT_DIR_INO => Node::SnapshotDir,
        n => Node::Snapshot {
            slot: (n >> OBJECT_BITS) & SLOT_MAX,
            object: n & OBJECT_MASK,
        },
    }
}

impl Node {
    /// Its FUSE inode number; EINVAL for a snapshot object past what the layout holds.
    pub(super) fn ino(self) -> Result<INodeNo, FsError> {
        match self {
            Node::Head(object) => Ok(ino_of(object)),
            Node::ControlDir => Ok(INodeNo(CONTROL_DIR_INO)),
            Node::SnapshotDir => Ok(INodeNo(SNAPSHOT_DIR_INO)),
            Node::Snapshot { slot, object } => {
                debug_assert!((1..=SLOT_MAX).contains(&slot), "snapshot slot {slot}");
                if object > OBJECT_MASK {
                    return Err(FsError::Invalid(format!(
                        "object {object} of a snapshot is past the {OBJECT_BITS} bits its inode \
                         numbers hold"
                    )));
                }
                Ok(INodeNo(CONTROL_INO_BIT | slot << OBJECT_BITS | object))
            }
        }
    }

    pub(super) fn is_head(self) -> bool {
        matches!(self, Node::Head(_))
    }
}

/// Whether `name` in `parent` is the reserved name of the control directory.
pub(super) fn is_control_name(parent: Node, name: &[u8]) -> bool {
    parent == Node::Head(ROOT_OBJECT) && name == CONTROL_DIR_NAME
}

/// A snapshot this mount has given a slot.
struct SlotEntry {
    /// The part after '@'.
    name: String,
    created_txg: u64,
    /// Opened at its first use.
    fs: Option<Arc<SnapshotFilesystem>>,
}

#[derive(Default)]
struct Slots {
    by_snapshot: HashMap<(String, u64), u64>,
    entries: BTreeMap<u64, SlotEntry>,
    /// Slots handed out so far (never reused).
    handed_out: u64,
}

impl Slots {
    fn slot_of(&mut self, name: &str, created_txg: u64) -> Result<u64, FsError> {
        let key = (name.to_string(), created_txg);
        if let Some(slot) = self.by_snapshot.get(&key) {
            return Ok(*slot);
        }
        if self.handed_out == SLOT_MAX {
            return Err(FsError::NoSpace(format!(
                "this mount has shown {SLOT_MAX} snapshots; remount to see more"
            )));
        }
        self.handed_out += 1;
        let slot = self.handed_out;
        self.by_snapshot.insert(key, slot);
        self.entries.insert(
            slot,
            SlotEntry {
                name: name.to_string(),
                created_txg,
                fs: None,
            },
        );
        Ok(slot)
    }
}

/// The snapshots of one mounted dataset, as the control directory shows them.
pub struct SnapshotDir {
    pool: Arc<Pool>,
    dataset: String,
    slots: parking_lot::Mutex<Slots>,
}

/// An engine error met while looking at snapshots, as the filesystem's: a snapshot (or the
/// dataset) gone is ENOENT, a refusal keeps its meaning, anything else is an I/O error.
fn fs_error(err: EngineError) -> FsError {
    match err {
        EngineError::Fs(err) => err,
        err => match err.class() {
            cairn_device::ErrorClass::NotFound => FsError::NotFound,
            cairn_device::ErrorClass::ReadOnly => FsError::ReadOnly,
            _ => FsError::Corrupt(format!("snapshots: {err}")),
        },
    }
}

/// One entry of a listing here.
pub(super) struct ListedEntry {
    pub(super) ino: INodeNo,
    pub(super) cookie: u64,
    pub(super) kind: FileType,
    pub(super) name: Vec<u8>,
    /// Attributes (for readdirplus), with their caching time and generation.
    pub(super) attr: Option<(FileAttr, Duration, u64)>,
}

impl SnapshotDir {
    /// The snapshots of filesystem `dataset` of `pool`.
    pub fn new(pool: Arc<Pool>, dataset: &str) -> SnapshotDir {
        SnapshotDir {
            pool,
            dataset: dataset.to_string(),
            slots: parking_lot::Mutex::default(),
        }
    }

    /// Whether the root lists `.cairn` (the `snapdir` property, read live).
    pub(super) fn visible(&self) -> bool {
        self.pool
            .dataset_properties(&self.dataset)
            .is_ok_and(|properties| properties.snapdir == SnapdirMode::Visible)
    }

    /// The snapshots now, oldest slot first: (slot, name). Slots of snapshots gone are let go.
    pub(super) fn listing(&self) -> Result<Vec<(u64, String)>, FsError> {
        let listings = self.pool.snapshots(Some(&self.dataset)).map_err(fs_error)?;
        let prefix = format!("{}@", self.dataset);
        let mut slots = self.slots.lock();
        let mut listed = Vec::with_capacity(listings.len());
        for listing in listings {
            let Some(name) = listing.name.strip_prefix(&prefix) else {
                continue;
            };
            listed.push((slots.slot_of(name, listing.created_txg)?, name.to_string()));
        }
        let live: std::collections::HashSet<u64> = listed.iter().map(|(slot, _)| *slot).collect();
        let gone: Vec<u64> = slots
            .entries
            .keys()
            .filter(|slot| !live.contains(slot))
            .copied()
            .collect();
        for slot in gone {
            if let Some(entry) = slots.entries.remove(&slot) {
                slots.by_snapshot.remove(&(entry.name, entry.created_txg));
            }
        }
        listed.sort();
        Ok(listed)
    }

    /// The slot of snapshot `name` (the part after '@').
    pub(super) fn slot_named(&self, name: &[u8]) -> Result<u64, FsError> {
        let name = std::str::from_utf8(name).map_err(|_| FsError::NotFound)?;
        if name.contains('@') || name.contains('/') {
            return Err(FsError::NotFound);
        }
        let info = self
            .pool
            .snapshot_info(&format!("{}@{name}", self.dataset))
            .map_err(fs_error)?;
        self.slots.lock().slot_of(name, info.created_txg)
    }

    /// The snapshot in `slot`, opened on first use; ENOENT once destroyed.
    pub(super) fn filesystem(&self, slot: u64) -> Result<Arc<SnapshotFilesystem>, FsError> {
        let mut slots = self.slots.lock();
        let entry = slots.entries.get_mut(&slot).ok_or(FsError::NotFound)?;
        if let Some(fs) = &entry.fs {
            return if fs.is_open() {
                Ok(fs.clone())
            } else {
                Err(FsError::NotFound)
            };
        }
        let full = format!("{}@{}", self.dataset, entry.name);
        let fs = self.pool.snapshot_filesystem(&full).map_err(fs_error)?;
        // The same name taken again since this slot was handed out: another snapshot.
        if fs.created_txg() != entry.created_txg {
            return Err(FsError::NotFound);
        }
        entry.fs = Some(fs.clone());
        Ok(fs)
    }

    /// Runs `call` on object `object` of the snapshot in `slot`.
    pub(super) fn with<T>(
        &self,
        slot: u64,
        call: impl FnOnce(&Filesystem) -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        self.filesystem(slot)?.with(call)
    }
}

/// The cookie after which the root's listing has only `.cairn` left (or nothing).
pub(super) fn is_control_dir_cookie(cookie: u64) -> bool {
    cookie == CONTROL_DIR_COOKIE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_of_the_head_and_the_snapshots_never_meet() {
        for object in [1, 2, 3, 16, 1 << 40, (1 << 62) + 5] {
            let ino = Node::Head(object).ino().unwrap();
            assert_eq!(ino.0 & CONTROL_INO_BIT, 0);
            assert_eq!(node_of(ino), Node::Head(object));
        }
        for node in [Node::ControlDir, Node::SnapshotDir] {
            assert_eq!(node_of(node.ino().unwrap()), node);
        }
        for slot in [1, 2, 77, SLOT_MAX] {
            for object in [ROOT_OBJECT, 16, 12345, OBJECT_MASK] {
                let node = Node::Snapshot { slot, object };
                let ino = node.ino().unwrap();
                assert_ne!(ino.0 & CONTROL_INO_BIT, 0, "{node:?}");
                assert_ne!(ino.0, CONTROL_DIR_INO);
                assert_ne!(ino.0, SNAPSHOT_DIR_INO);
                assert_eq!(node_of(ino), node);
            }
        }
        // The same object of two snapshots, and of a snapshot and the head: three numbers.
        let a = Node::Snapshot {
            slot: 1,
            object: 16,
        }
        .ino()
        .unwrap();
        let b = Node::Snapshot {
            slot: 2,
            object: 16,
        }
        .ino()
        .unwrap();
        assert_ne!(a, b);
        assert_ne!(a, Node::Head(16).ino().unwrap());
        assert!(
            Node::Snapshot {
                slot: 1,
                object: OBJECT_MASK + 1
            }
            .ino()
            .is_err()
        );
    }

    #[test]
    fn slots_are_never_reused() {
        let mut slots = Slots::default();
        let monday = slots.slot_of("monday", 10).unwrap();
        assert_eq!(slots.slot_of("monday", 10).unwrap(), monday);
        let tuesday = slots.slot_of("tuesday", 11).unwrap();
        assert_ne!(monday, tuesday);
        // Monday destroyed and taken again: a new snapshot, a new slot.
        let again = slots.slot_of("monday", 20).unwrap();
        assert!(again > tuesday, "{again} after {tuesday}");
        assert!(monday >= 1, "slot 0 is the control directory's");
    }
}
