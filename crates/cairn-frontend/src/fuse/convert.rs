//! Translation between cairn's terms and FUSE's: inode numbers (FUSE's root is inode 1,
//! cairn's root directory is object 2; the two swap and every other object keeps its
//! number), times (before the epoch too), file kinds, errors (`FsError::class`) and the
//! attributes the kernel is given.
//!
//! Invariants: `object_of` and `ino_of` are each other's inverse, and `timestamp` undoes
//! `system_time`. Pure functions without state, at the bottom of the adapter: the other
//! files use them, and this one uses none of its siblings.

use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_fs::{FsError, InodeStorage, ROOT_OBJECT};
use fuser::{Errno, FileAttr, FileType, INodeNo, TimeOrNow};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The high bit of a FUSE inode number: set for the inodes under `.cairn` (the control
/// directory and the snapshots it shows, numbered by `snapdir.rs`), clear for the mounted
/// filesystem's own, so the two never collide. An object set never numbers an object this
/// high (its numbers are dnode slots).
pub(super) const CONTROL_INO_BIT: u64 = 1 << 63;

/// FUSE inode number → object number (of the mounted filesystem: the caller has checked
/// that `CONTROL_INO_BIT` is clear).
pub(super) fn object_of(ino: INodeNo) -> u64 {
    // FUSE never names inode 0 (it means "no inode" in its replies); object 0 is the
    // meta-dnode, which no file operation may touch.
    debug_assert_ne!(ino.0, 0, "FUSE request for inode 0");
    match ino.0 {
        1 => ROOT_OBJECT,
        n if n == ROOT_OBJECT => 1,
        n => n,
    }
}

/// Object number (of the mounted filesystem) → FUSE inode number.
pub(super) fn ino_of(object: u64) -> INodeNo {
    debug_assert_eq!(
        object & CONTROL_INO_BIT,
        0,
        "object {object} in the control directory's inode range"
    );
    INodeNo(match object {
        n if n == ROOT_OBJECT => 1,
        1 => ROOT_OBJECT,
        n => n,
    })
}

/// The errno the kernel is told: the error's class through the one class → POSIX table
/// (`ErrorClass::errno`), the same a later NFS front end answers with.
pub(super) fn errno(err: &FsError) -> Errno {
    Errno::from_i32(err.class().errno())
}

fn system_time(t: Timestamp) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nanos)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs())
            + Duration::from_nanos(u64::from(t.nanos))
    }
}

pub(super) fn timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        },
        Err(before) => {
            let d = before.duration();
            match d.subsec_nanos() {
                0 => Timestamp {
                    secs: -(d.as_secs() as i64),
                    nanos: 0,
                },
                n => Timestamp {
                    secs: -(d.as_secs() as i64) - 1,
                    nanos: 1_000_000_000 - n,
                },
            }
        }
    }
}

pub(super) fn time_or_now(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::SpecificTime(t) => timestamp(t),
        TimeOrNow::Now => Timestamp::now(),
    }
}

pub(super) fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
    }
}

pub(super) fn file_attr(object: u64, attrs: &InodeAttrs, storage: InodeStorage) -> FileAttr {
    FileAttr {
        ino: ino_of(object),
        size: attrs.size,
        blocks: storage.allocated_bytes.div_ceil(512),
        atime: system_time(attrs.atime),
        mtime: system_time(attrs.mtime),
        ctime: system_time(attrs.ctime),
        crtime: system_time(attrs.crtime),
        kind: file_type(attrs.kind),
        perm: (attrs.mode & 0o7777) as u16,
        nlink: attrs.links.min(u64::from(u32::MAX)) as u32,
        uid: attrs.uid,
        gid: attrs.gid,
        rdev: attrs.rdev as u32,
        blksize: u32::try_from(storage.block_bytes).unwrap_or(u32::MAX),
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_swap_root_and_master_only() {
        assert_eq!(object_of(INodeNo(1)), ROOT_OBJECT);
        assert_eq!(ino_of(ROOT_OBJECT), INodeNo(1));
        for object in [1, 3, 16, 12345] {
            assert_eq!(object_of(ino_of(object)), object);
        }
    }

    #[test]
    fn times_before_the_epoch_round_trip() {
        for t in [
            Timestamp { secs: -1, nanos: 5 },
            Timestamp { secs: 0, nanos: 0 },
            Timestamp {
                secs: 1_700_000_000,
                nanos: 999_999_999,
            },
            Timestamp {
                secs: -86_400,
                nanos: 0,
            },
        ] {
            assert_eq!(timestamp(system_time(t)), t);
        }
    }
}
