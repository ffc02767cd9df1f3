//! Translations between cairn-fs and NFSv3's types, and the caller's permission checks.
//!
//! Why here: the NFS server, unlike the FUSE mount (whose kernel checks permissions with
//! `default_permissions`), is the only thing between a client and the filesystem, so it
//! checks the caller's AUTH_SYS identity against each inode's mode bits itself
//! (`Caller::may`). Invariants: every `FsError` maps to exactly one `nfsstat3` through its
//! `ErrorClass` (the one table, as FUSE's errnos); a file not found by handle is STALE, never
//! ENOENT (the handle named it; it is gone). POSIX ACLs are not consulted here (the mode bits
//! are, which an ACL keeps in step with its mask): a known gap.
//! Uses nothing else of `nfs/`.

use cairn_device::ErrorClass;
use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_fs::{FsError, InodeStorage, SetAttrs};
use cairn_nfs::nfs3::{Fattr3, Ftype3, Nfs3Error, NfsTime3, Sattr3, SetTime, SpecData3, WccData};

/// The identity root is squashed to (nobody), as `root_squash` does by default.
pub const NOBODY_ID: u32 = 65534;

/// Who makes a call: an AUTH_SYS identity, as sent (`Caller::new`) or with root squashed
/// (`squashed`) when the export it reaches squashes root (`NfsContext::caller_in`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    pub gids: Vec<u32>,
}

/// Permission bits of `Caller::may`.
pub const MAY_READ: u32 = 4;
pub const MAY_WRITE: u32 = 2;
pub const MAY_EXEC: u32 = 1;

impl Caller {
    /// The AUTH_SYS identity a call carries.
    pub fn new(uid: u32, gid: u32, gids: &[u32]) -> Caller {
        Caller {
            uid,
            gid,
            gids: gids.to_vec(),
        }
    }

    /// This identity with root (uid 0) squashed to nobody, and its groups too (as Linux's
    /// `root_squash`); any other identity as it is.
    pub fn squashed(self) -> Caller {
        if self.uid != 0 {
            return self;
        }
        Caller {
            uid: NOBODY_ID,
            gid: NOBODY_ID,
            gids: Vec::new(),
        }
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.gids.contains(&gid)
    }

    /// Whether the mode bits of `attrs` grant every bit of `want` (`MAY_*`): the owner's
    /// class if the caller owns it, else the group's if a member, else others' (POSIX: the
    /// first class that matches decides). Root may do anything but execute a file no one may.
    pub fn may(&self, attrs: &InodeAttrs, want: u32) -> bool {
        if self.is_root() {
            let any_exec = attrs.mode & 0o111 != 0 || attrs.kind == FileKind::Directory;
            return want & MAY_EXEC == 0 || any_exec;
        }
        let granted = if self.uid == attrs.uid {
            (attrs.mode >> 6) & 7
        } else if self.in_group(attrs.gid) {
            (attrs.mode >> 3) & 7
        } else {
            attrs.mode & 7
        };
        granted & want == want
    }

    /// Whether the caller may remove or rename away an entry of `dir` naming `victim`: the
    /// sticky bit keeps others' entries (owner of the entry or of the directory only).
    pub fn may_unlink_from(&self, dir: &InodeAttrs, victim: &InodeAttrs) -> bool {
        dir.mode & 0o1000 == 0 || self.is_root() || self.uid == dir.uid || self.uid == victim.uid
    }
}

/// The `nfsstat3` of a filesystem error.
pub fn nfs_error(err: &FsError) -> Nfs3Error {
    if matches!(err, FsError::Stale) {
        return Nfs3Error::Stale;
    }
    match err.class() {
        ErrorClass::Io => Nfs3Error::Io,
        ErrorClass::NoSpace => Nfs3Error::NoSpc,
        ErrorClass::QuotaExceeded => Nfs3Error::DQuot,
        ErrorClass::ReadOnly => Nfs3Error::RoFs,
        ErrorClass::Invalid => Nfs3Error::Inval,
        ErrorClass::NotFound => Nfs3Error::NoEnt,
        ErrorClass::Exists => Nfs3Error::Exist,
        ErrorClass::NotDirectory => Nfs3Error::NotDir,
        ErrorClass::IsDirectory => Nfs3Error::IsDir,
        ErrorClass::NotEmpty => Nfs3Error::NotEmpty,
        ErrorClass::NameTooLong => Nfs3Error::NameTooLong,
        ErrorClass::TooManyLinks => Nfs3Error::MLink,
        ErrorClass::FileTooLarge => Nfs3Error::FBig,
        ErrorClass::NoAttribute | ErrorClass::ValueTooLarge => Nfs3Error::ServerFault,
    }
}

pub fn ftype(kind: FileKind) -> Ftype3 {
    match kind {
        FileKind::File => Ftype3::Reg,
        FileKind::Directory => Ftype3::Dir,
        FileKind::Symlink => Ftype3::Lnk,
        FileKind::CharDevice => Ftype3::Chr,
        FileKind::BlockDevice => Ftype3::Blk,
        FileKind::Fifo => Ftype3::Fifo,
        FileKind::Socket => Ftype3::Sock,
    }
}

/// NFSv3 times are unsigned 32-bit seconds: earlier times show as the epoch, later as its
/// end (2106).
pub fn nfs_time(time: Timestamp) -> NfsTime3 {
    NfsTime3 {
        seconds: u32::try_from(time.secs.max(0)).unwrap_or(u32::MAX),
        nseconds: time.nanos,
    }
}

pub fn timestamp(time: &NfsTime3) -> Timestamp {
    Timestamp {
        secs: i64::from(time.seconds),
        nanos: time.nseconds.min(999_999_999),
    }
}

/// `fattr3` of an inode; `fsid` tells datasets apart, the file id is the object number.
pub fn fattr(object: u64, attrs: &InodeAttrs, storage: InodeStorage, fsid: u64) -> Fattr3 {
    let rdev = attrs.rdev;
    Fattr3 {
        ftype: ftype(attrs.kind),
        mode: attrs.mode & 0o7777,
        nlink: u32::try_from(attrs.links).unwrap_or(u32::MAX),
        uid: attrs.uid,
        gid: attrs.gid,
        size_bytes: attrs.size,
        used_bytes: storage.allocated_bytes,
        rdev: SpecData3 {
            major: libc::major(rdev as libc::dev_t),
            minor: libc::minor(rdev as libc::dev_t),
        },
        fsid,
        fileid: object,
        atime: nfs_time(attrs.atime),
        mtime: nfs_time(attrs.mtime),
        ctime: nfs_time(attrs.ctime),
    }
}

/// A device number from `specdata3`.
pub fn rdev(spec: &SpecData3) -> u64 {
    libc::makedev(spec.major, spec.minor)
}

/// What `sattr3` asks to change, as `setattr` takes it (`now`: the server's clock for
/// SET_TO_SERVER_TIME).
pub fn set_attrs(sattr: &Sattr3, now: Timestamp) -> SetAttrs {
    let time = |how: &SetTime| match how {
        SetTime::DontChange => None,
        SetTime::ServerTime => Some(now),
        SetTime::ClientTime(time) => Some(timestamp(time)),
    };
    SetAttrs {
        mode: sattr.mode.map(|mode| mode & 0o7777),
        uid: sattr.uid,
        gid: sattr.gid,
        size: sattr.size_bytes,
        atime: time(&sattr.atime),
        mtime: time(&sattr.mtime),
        ctime: None,
    }
}

/// Weak cache consistency data with only the attributes after (no "before": the client then
/// drops what it cached, which is always correct).
pub fn wcc_after(after: Option<Fattr3>) -> WccData {
    WccData {
        before: None,
        after,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(mode: u32, uid: u32, gid: u32) -> InodeAttrs {
        InodeAttrs {
            kind: FileKind::File,
            mode,
            uid,
            gid,
            links: 1,
            size: 0,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: Timestamp::default(),
            generation: 1,
            parent: 2,
            rdev: 0,
            xattr_object: 0,
        }
    }

    #[test]
    fn mode_classes_decide_in_order() {
        let owner = Caller::new(1000, 100, &[]);
        let member = Caller::new(1001, 5, &[100]);
        let other = Caller::new(1002, 5, &[]);
        let file = attrs(0o640, 1000, 100);
        assert!(owner.may(&file, MAY_READ | MAY_WRITE));
        assert!(member.may(&file, MAY_READ));
        assert!(!member.may(&file, MAY_WRITE));
        assert!(!other.may(&file, MAY_READ));
        // The owner's class decides for the owner even when others have more.
        assert!(!owner.may(&attrs(0o077, 1000, 100), MAY_READ));
    }

    #[test]
    fn root_is_squashed_to_nobody() {
        let root = Caller::new(0, 0, &[0, 1]).squashed();
        assert_eq!((root.uid, root.gid), (NOBODY_ID, NOBODY_ID));
        assert!(root.gids.is_empty());
        assert!(!root.may(&attrs(0o600, 0, 0), MAY_READ));
        // Unsquashed, root reads what only its owner may.
        let root = Caller::new(0, 0, &[0, 1]);
        assert!(root.is_root() && root.may(&attrs(0o600, 1000, 1000), MAY_READ));
        // Others keep their identity.
        let user = Caller::new(1000, 100, &[4]).squashed();
        assert_eq!(user, Caller::new(1000, 100, &[4]));
    }
}
