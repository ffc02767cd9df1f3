//! How an error looks to a client of the pool: the one errno a block front end (NBD) answers
//! with. Every layer's error type classifies itself by delegating to the error it wraps, so the
//! answer is decided by types, not by matching message text, and a new variant cannot be
//! added without being classified (the matches are exhaustive).
//!
//! The classes are deliberately few: a client can act on "the device failed" (EIO), "the pool
//! is full" (ENOSPC), "this export takes no writes" (EROFS) and "the request was wrong"
//! (EINVAL); anything finer (which copy, which checksum) is for the pool's own log, and stays
//! reachable through `std::error::Error::source`.

use crate::DeviceError;

/// The client-visible kind of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Data could not be read or written: a device error, a block no copy of which verifies,
    /// damaged metadata, or a suspended pool (EIO).
    Io,
    /// The pool (or the dataset's quota) has no room for the write (ENOSPC).
    NoSpace,
    /// The target takes no writes: a read-only dataset or a pool opened read-only (EROFS).
    ReadOnly,
    /// The request itself is wrong: out of range, a bad name or value (EINVAL).
    Invalid,
    /// What the request names does not exist (ENOENT).
    NotFound,
    /// What the request would create exists already (EEXIST).
    Exists,
}

impl ErrorClass {
    /// The POSIX errno of the class.
    pub fn errno(self) -> i32 {
        match self {
            ErrorClass::Io => libc::EIO,
            ErrorClass::NoSpace => libc::ENOSPC,
            ErrorClass::ReadOnly => libc::EROFS,
            ErrorClass::Invalid => libc::EINVAL,
            ErrorClass::NotFound => libc::ENOENT,
            ErrorClass::Exists => libc::EEXIST,
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

    #[test]
    fn classes_map_to_their_errnos() {
        assert_eq!(ErrorClass::NoSpace.errno(), libc::ENOSPC);
        assert_eq!(ErrorClass::ReadOnly.errno(), libc::EROFS);
        assert_eq!(ErrorClass::Invalid.errno(), libc::EINVAL);
    }
}
