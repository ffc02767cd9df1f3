//! An inode's attributes, as stored in its dnode's bonus.
//!
//! Every object of a filesystem that a name can lead to (file, directory, symlink, device,
//! fifo, socket) keeps its POSIX attributes in its dnode's bonus, so a `stat` reads one dnode
//! and nothing else. The encoding is fixed-size little-endian with a version byte first;
//! `ATTRS_BYTES` must fit `DNODE_BONUS_SIZE_MAX` (the dnode then has one top-level pointer).
//!
//! ```text
//! offset size field
//!      0    1 version (1)          1 1 kind           2 2 reserved
//!      4    4 mode (permission and set-id bits)
//!      8    4 uid                 12 4 gid
//!     16    8 links               24 8 size (bytes; a directory: its entry count)
//!     32   12 atime (i64 seconds, u32 nanoseconds), 44 12 mtime, 56 12 ctime, 68 12 crtime
//!     80    8 generation (txg of creation)
//!     88    8 parent object (a directory's `..`; for other kinds the directory it was made in)
//!     96    8 rdev (devices)     104 8 xattr object (0: none)
//!    112    8 flags (reserved, 0)
//! ```

use crate::FsError;

/// Bytes of an encoded `InodeAttrs`.
pub const ATTRS_BYTES: usize = 120;
/// Version of the attribute layout (its first byte).
pub const ATTRS_VERSION: u8 = 1;
const _: () = assert!(ATTRS_BYTES <= cairn_format::dnode::DNODE_BONUS_SIZE_MAX);

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    File = 1,
    Directory = 2,
    Symlink = 3,
    CharDevice = 4,
    BlockDevice = 5,
    Fifo = 6,
    Socket = 7,
}

impl FileKind {
    pub fn from_u8(value: u8) -> Option<FileKind> {
        Some(match value {
            1 => FileKind::File,
            2 => FileKind::Directory,
            3 => FileKind::Symlink,
            4 => FileKind::CharDevice,
            5 => FileKind::BlockDevice,
            6 => FileKind::Fifo,
            7 => FileKind::Socket,
            _ => return None,
        })
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::File => 0o100000,
            FileKind::Directory => 0o040000,
            FileKind::Symlink => 0o120000,
            FileKind::CharDevice => 0o020000,
            FileKind::BlockDevice => 0o060000,
            FileKind::Fifo => 0o010000,
            FileKind::Socket => 0o140000,
        }
    }

    /// The kind named by a mode's `S_IFMT` bits.
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        Some(match mode & 0o170000 {
            0o100000 => FileKind::File,
            0o040000 => FileKind::Directory,
            0o120000 => FileKind::Symlink,
            0o020000 => FileKind::CharDevice,
            0o060000 => FileKind::BlockDevice,
            0o010000 => FileKind::Fifo,
            0o140000 => FileKind::Socket,
            _ => return None,
        })
    }
}

/// A point in time: seconds since the epoch (may be negative) and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    pub secs: i64,
    pub nanos: u32,
}

impl Timestamp {
    /// The time now, from the kernel's coarse real-time clock (its last tick): the clock the
    /// kernel itself stamps a FUSE file's times with when it keeps them (the writeback cache:
    /// writes, links). With one clock for every stamp, a change made after another never
    /// carries an earlier time; the fine clock runs up to a tick ahead of the coarse one, so
    /// mixing them put a link's ctime ~3 ms before that of the write made just before it.
    pub fn now() -> Timestamp {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid timespec for the kernel to fill; the clock exists on every Linux
        // since 2.6.32.
        let status = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) };
        assert_eq!(status, 0, "clock_gettime(CLOCK_REALTIME_COARSE) failed");
        Timestamp {
            secs: now.tv_sec,
            nanos: u32::try_from(now.tv_nsec).unwrap_or(0),
        }
    }
}

/// POSIX attributes of one inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeAttrs {
    pub kind: FileKind,
    /// Permission bits and set-id/sticky bits (`0o7777`), without the kind.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub links: u64,
    /// A file's or symlink's length; a directory's entry count.
    pub size: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Timestamp,
    pub generation: u64,
    pub parent: u64,
    pub rdev: u64,
    pub xattr_object: u64,
}

impl InodeAttrs {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ATTRS_BYTES);
        out.push(ATTRS_VERSION);
        out.push(self.kind as u8);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(self.mode & 0o7777).to_le_bytes());
        out.extend_from_slice(&self.uid.to_le_bytes());
        out.extend_from_slice(&self.gid.to_le_bytes());
        out.extend_from_slice(&self.links.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        for time in [self.atime, self.mtime, self.ctime, self.crtime] {
            out.extend_from_slice(&time.secs.to_le_bytes());
            out.extend_from_slice(&time.nanos.to_le_bytes());
        }
        for value in [
            self.generation,
            self.parent,
            self.rdev,
            self.xattr_object,
            0,
        ] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        debug_assert_eq!(out.len(), ATTRS_BYTES);
        out
    }

    /// Decodes and checks a bonus; `object` names the inode in errors.
    pub fn decode(object: u64, bytes: &[u8]) -> Result<InodeAttrs, FsError> {
        let corrupt = |what: &str| FsError::Corrupt(format!("inode {object}: {what}"));
        if bytes.len() < ATTRS_BYTES {
            return Err(corrupt(&format!("attributes of {} bytes", bytes.len())));
        }
        if bytes[0] != ATTRS_VERSION {
            return Err(corrupt(&format!("attribute version {}", bytes[0])));
        }
        let kind = FileKind::from_u8(bytes[1]).ok_or_else(|| corrupt("unknown kind"))?;
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap_or([0; 8]));
        let time_at = |at: usize| Timestamp {
            secs: u64_at(at) as i64,
            nanos: u32_at(at + 8),
        };
        let attrs = InodeAttrs {
            kind,
            mode: u32_at(4) & 0o7777,
            uid: u32_at(8),
            gid: u32_at(12),
            links: u64_at(16),
            size: u64_at(24),
            atime: time_at(32),
            mtime: time_at(44),
            ctime: time_at(56),
            crtime: time_at(68),
            generation: u64_at(80),
            parent: u64_at(88),
            rdev: u64_at(96),
            xattr_object: u64_at(104),
        };
        for time in [attrs.atime, attrs.mtime, attrs.ctime, attrs.crtime] {
            if time.nanos >= 1_000_000_000 {
                return Err(corrupt("a timestamp's nanoseconds past a second"));
            }
        }
        Ok(attrs)
    }

    /// The full `st_mode`: kind and permission bits.
    pub fn st_mode(&self) -> u32 {
        self.kind.mode_bits() | self.mode
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> InodeAttrs {
        InodeAttrs {
            kind: FileKind::Symlink,
            mode: 0o4755,
            uid: 1000,
            gid: 100,
            links: 3,
            size: u64::MAX - 1,
            atime: Timestamp {
                secs: -5,
                nanos: 999_999_999,
            },
            mtime: Timestamp {
                secs: i64::MAX,
                nanos: 1,
            },
            ctime: Timestamp { secs: 7, nanos: 0 },
            crtime: Timestamp { secs: 8, nanos: 9 },
            generation: 42,
            parent: 2,
            rdev: 0x0801,
            xattr_object: 77,
        }
    }

    #[test]
    fn round_trip_keeps_every_field() {
        let attrs = sample();
        let raw = attrs.encode();
        assert_eq!(raw.len(), ATTRS_BYTES);
        assert_eq!(InodeAttrs::decode(9, &raw).unwrap(), attrs);
        assert_eq!(attrs.st_mode(), 0o124755);
    }

    #[test]
    fn damaged_attributes_are_errors() {
        let raw = sample().encode();
        assert!(InodeAttrs::decode(9, &raw[..ATTRS_BYTES - 1]).is_err());
        let mut bad = raw.clone();
        bad[0] = 9;
        assert!(InodeAttrs::decode(9, &bad).is_err());
        let mut bad = raw.clone();
        bad[1] = 0;
        assert!(InodeAttrs::decode(9, &bad).is_err());
        let mut bad = raw;
        bad[40..44].copy_from_slice(&2_000_000_000u32.to_le_bytes());
        assert!(InodeAttrs::decode(9, &bad).is_err());
    }

    #[test]
    fn kinds_map_to_mode_bits_and_back() {
        for kind in [
            FileKind::File,
            FileKind::Directory,
            FileKind::Symlink,
            FileKind::CharDevice,
            FileKind::BlockDevice,
            FileKind::Fifo,
            FileKind::Socket,
        ] {
            assert_eq!(FileKind::from_mode(kind.mode_bits() | 0o644), Some(kind));
            assert_eq!(FileKind::from_u8(kind as u8), Some(kind));
        }
        assert_eq!(FileKind::from_mode(0o644), None);
    }
}
