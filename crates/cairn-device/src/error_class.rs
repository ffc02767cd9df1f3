//! The client-visible error vocabulary: every error a client of the pool can be told, whatever
//! the front end (NBD for volumes, FUSE for filesystems, NFS later), is one `ErrorClass`.
//!
//! Why one vocabulary: each layer's error type classifies itself (`class()`) by delegating to
//! the error it wraps, so the answer is decided by types, never by matching message text, and a
//! new variant cannot be added without being classified (the matches are exhaustive). The
//! front ends then translate the class, never the error, so a full pool or a read-only target
//! gets the same answer however many layers it came through.
//!
//! The two tables, and the only places a class becomes a number:
//! - POSIX (FUSE, later NFS): `ErrorClass::errno`, here. Every class has its own errno.
//! - NBD, whose protocol knows only a few numbers (no EROFS, no ENOENT):
//!   `cairn_frontend::exports::nbd_error` (in the front end, since `cairn-nbd` knows nothing
//!   of the pool and this crate knows nothing of NBD).
//!
//! A class is what a client can act on ("the device failed", "the pool is full", "no such
//! name"); anything finer (which copy, which checksum) is for the pool's own log, and stays
//! reachable through `std::error::Error::source` (`error_chain`, `find_os_error`).

use crate::DeviceError;

/// The client-visible kind of a failure. The first six are what the pool's layers below a
/// filesystem answer; the rest name the filesystem's own POSIX answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Data could not be read or written: a device error, a block no copy of which verifies,
    /// damaged metadata, or a suspended pool (EIO).
    Io,
    /// The pool has no room for the write (ENOSPC).
    NoSpace,
    /// A dataset's `quota` or `refquota` (or an ancestor's `quota`) would be exceeded
    /// (EDQUOT): the pool may have room, so the client is told apart from a full pool (NBD,
    /// which has no EDQUOT, answers ENOSPC).
    QuotaExceeded,
    /// The target takes no writes: a read-only dataset or a pool opened read-only (EROFS).
    ReadOnly,
    /// The request itself is wrong: out of range, a bad name or value (EINVAL).
    Invalid,
    /// What the request names does not exist (ENOENT).
    NotFound,
    /// What the request would create exists already (EEXIST).
    Exists,
    /// A path component, or the target of a directory operation, is not a directory (ENOTDIR).
    NotDirectory,
    /// A file operation named a directory (EISDIR).
    IsDirectory,
    /// A directory to remove or replace has entries (ENOTEMPTY).
    NotEmpty,
    /// A name is longer than a directory entry takes (ENAMETOOLONG).
    NameTooLong,
    /// An inode has as many links as it may (EMLINK).
    TooManyLinks,
    /// A write or size past the largest file (EFBIG).
    FileTooLarge,
    /// No extended attribute of that name (ENODATA, Linux's ENOATTR).
    NoAttribute,
    /// An extended attribute value (or the list of names) larger than allowed (E2BIG).
    ValueTooLarge,
}

impl ErrorClass {
    /// The POSIX errno of the class: the one class → errno table, for every POSIX front end.
    /// No two classes share an errno (a test holds it), so a client's errno names its class.
    pub fn errno(self) -> i32 {
        match self {
            ErrorClass::Io => libc::EIO,
            ErrorClass::NoSpace => libc::ENOSPC,
            ErrorClass::QuotaExceeded => libc::EDQUOT,
            ErrorClass::ReadOnly => libc::EROFS,
            ErrorClass::Invalid => libc::EINVAL,
            ErrorClass::NotFound => libc::ENOENT,
            ErrorClass::Exists => libc::EEXIST,
            ErrorClass::NotDirectory => libc::ENOTDIR,
            ErrorClass::IsDirectory => libc::EISDIR,
            ErrorClass::NotEmpty => libc::ENOTEMPTY,
            ErrorClass::NameTooLong => libc::ENAMETOOLONG,
            ErrorClass::TooManyLinks => libc::EMLINK,
            ErrorClass::FileTooLarge => libc::EFBIG,
            ErrorClass::NoAttribute => libc::ENODATA,
            ErrorClass::ValueTooLarge => libc::E2BIG,
        }
    }
}

impl DeviceError {
    /// Every device failure is an I/O error to a client, whatever the host said: a pool
    /// device that reports ENOSPC (a thin backing file on a full file system) or EROFS has
    /// failed as a device, and the pool's free space or the export's mode are unchanged
    /// (ZFS reports vdev errors as EIO likewise). The host's own error stays the source
    /// (`os_error`), for the log.
    pub fn class(&self) -> ErrorClass {
        ErrorClass::Io
    }

    /// The host error behind this one, if the device reached the host at all.
    pub fn os_error(&self) -> Option<&std::io::Error> {
        match self {
            DeviceError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The first `std::io::Error` in `err`'s chain of sources (`err` included): what the host said
/// under however many layers of context, for a log line that wants its errno.
pub fn find_os_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut current = Some(err);
    while let Some(cause) = current {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        current = cause.source();
    }
    None
}

/// `err` and every error below it (`source()`), joined with ": ": the whole story of an
/// error, for the places where it becomes text (a log line, a status reason, a client reply).
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_eio_is_an_io_error_and_stays_reachable() {
        let err = DeviceError::Io {
            device: "/dev/sdz".into(),
            op: "read",
            offset: 4096,
            source: std::io::Error::from_raw_os_error(libc::EIO),
        };
        assert_eq!(err.class(), ErrorClass::Io);
        assert_eq!(err.class().errno(), libc::EIO);
        let os = find_os_error(&err).expect("the host error is a source");
        assert_eq!(os.raw_os_error(), Some(libc::EIO));
        assert!(error_chain(&err).contains("/dev/sdz"));
    }

    /// Every class, in declaration order. `position` has an arm per class (it stops compiling
    /// when a class is added), and `the_list_is_every_class` holds this list to it.
    const ALL: [ErrorClass; 15] = [
        ErrorClass::Io,
        ErrorClass::NoSpace,
        ErrorClass::QuotaExceeded,
        ErrorClass::ReadOnly,
        ErrorClass::Invalid,
        ErrorClass::NotFound,
        ErrorClass::Exists,
        ErrorClass::NotDirectory,
        ErrorClass::IsDirectory,
        ErrorClass::NotEmpty,
        ErrorClass::NameTooLong,
        ErrorClass::TooManyLinks,
        ErrorClass::FileTooLarge,
        ErrorClass::NoAttribute,
        ErrorClass::ValueTooLarge,
    ];

    fn position(class: ErrorClass) -> usize {
        match class {
            ErrorClass::Io => 0,
            ErrorClass::NoSpace => 1,
            ErrorClass::QuotaExceeded => 2,
            ErrorClass::ReadOnly => 3,
            ErrorClass::Invalid => 4,
            ErrorClass::NotFound => 5,
            ErrorClass::Exists => 6,
            ErrorClass::NotDirectory => 7,
            ErrorClass::IsDirectory => 8,
            ErrorClass::NotEmpty => 9,
            ErrorClass::NameTooLong => 10,
            ErrorClass::TooManyLinks => 11,
            ErrorClass::FileTooLarge => 12,
            ErrorClass::NoAttribute => 13,
            ErrorClass::ValueTooLarge => 14,
        }
    }

    #[test]
    fn the_list_is_every_class() {
        for (index, class) in ALL.iter().enumerate() {
            assert_eq!(position(*class), index, "{class:?}");
        }
    }

    #[test]
    fn every_class_has_its_own_errno() {
        let mut seen = std::collections::HashMap::new();
        for class in ALL {
            if let Some(other) = seen.insert(class.errno(), class) {
                panic!(
                    "{class:?} and {other:?} both answer errno {}",
                    class.errno()
                );
            }
        }
    }

    #[test]
    fn classes_map_to_their_errnos() {
        let expected = [
            (ErrorClass::Io, libc::EIO),
            (ErrorClass::NoSpace, libc::ENOSPC),
            (ErrorClass::QuotaExceeded, libc::EDQUOT),
            (ErrorClass::ReadOnly, libc::EROFS),
            (ErrorClass::Invalid, libc::EINVAL),
            (ErrorClass::NotFound, libc::ENOENT),
            (ErrorClass::Exists, libc::EEXIST),
            (ErrorClass::NotDirectory, libc::ENOTDIR),
            (ErrorClass::IsDirectory, libc::EISDIR),
            (ErrorClass::NotEmpty, libc::ENOTEMPTY),
            (ErrorClass::NameTooLong, libc::ENAMETOOLONG),
            (ErrorClass::TooManyLinks, libc::EMLINK),
            (ErrorClass::FileTooLarge, libc::EFBIG),
            (ErrorClass::NoAttribute, libc::ENODATA),
            (ErrorClass::ValueTooLarge, libc::E2BIG),
        ];
        assert_eq!(expected.len(), ALL.len());
        for (class, errno) in expected {
            assert_eq!(class.errno(), errno, "{class:?}");
        }
    }
}
