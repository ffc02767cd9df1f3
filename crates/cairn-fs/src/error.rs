//! The filesystem's error, and what it means to a client.
//!
//! Why here and typed: a front end (FUSE today, NFS later) answers with `FsError::class`, and
//! the class's errno comes from the one table, `cairn_device::ErrorClass::errno`; nothing
//! in this crate names an errno. Invariant: every variant has exactly one class, decided by
//! its type (for wrapped errors, by the wrapped error's own `class`), never by its text; the
//! test below pins each variant's errno, so a change in what a client sees fails it.

use cairn_device::ErrorClass;
use cairn_object::ObjectError;
use cairn_object::map::MapError;
use cairn_pool::txg::TxgError;

/// What went wrong. `class` says what it means to a client (and so its errno).
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDirectory,
    #[error("is a directory")]
    IsDirectory,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name too long")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    TooLarge,
    #[error("read-only filesystem")]
    ReadOnly,
    #[error("no such extended attribute")]
    NoAttribute,
    #[error("value too large: {0}")]
    ValueTooLarge(String),
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("disk quota exceeded: {0}")]
    QuotaExceeded(String),
    #[error("corrupt filesystem metadata: {0}")]
    Corrupt(String),
    /// The handle was to a head that a rollback replaced (`Filesystem::retire`), or to a file
    /// the rolled-back head does not have: EIO, as ZFS answers a file gone with a rollback.
    #[error("stale: the filesystem was rolled back under this handle")]
    Stale,
    #[error(transparent)]
    Object(#[from] ObjectError),
    #[error(transparent)]
    Txg(#[from] TxgError),
    #[error(transparent)]
    Log(#[from] cairn_zil::ZilError),
}

impl FsError {
    /// What the failure means to a client (`cairn_device::ErrorClass`, whose `errno` is the
    /// POSIX answer): the filesystem's own refusals each have their class; damaged metadata
    /// is `Io`; an error from below keeps its class, but for the cases `beneath_a_file`
    /// turns into `Io`.
    pub fn class(&self) -> ErrorClass {
        match self {
            FsError::NotFound => ErrorClass::NotFound,
            FsError::Exists => ErrorClass::Exists,
            FsError::NotDirectory => ErrorClass::NotDirectory,
            FsError::IsDirectory => ErrorClass::IsDirectory,
            FsError::NotEmpty => ErrorClass::NotEmpty,
            FsError::NameTooLong => ErrorClass::NameTooLong,
            FsError::Invalid(_) => ErrorClass::Invalid,
            FsError::TooManyLinks => ErrorClass::TooManyLinks,
            FsError::TooLarge => ErrorClass::FileTooLarge,
            FsError::ReadOnly => ErrorClass::ReadOnly,
            FsError::NoAttribute => ErrorClass::NoAttribute,
            FsError::ValueTooLarge(_) => ErrorClass::ValueTooLarge,
            FsError::NoSpace(_) => ErrorClass::NoSpace,
            FsError::QuotaExceeded(_) => ErrorClass::QuotaExceeded,
            FsError::Corrupt(_) | FsError::Stale => ErrorClass::Io,
            FsError::Object(err) => beneath_a_file(err.class()),
            FsError::Txg(err) => beneath_a_file(err.class()),
            FsError::Log(err) => beneath_a_file(err.class()),
        }
    }

    /// `class` as a POSIX errno (`ErrorClass::errno`, the one table).
    pub fn errno(&self) -> i32 {
        self.class().errno()
    }
}

/// A hashed map's error as the filesystem's: each refusal the variant (and so the errno) it
/// was before the map moved to `cairn-object`; a failed read stays `Object`.
impl From<MapError> for FsError {
    fn from(err: MapError) -> FsError {
        match err {
            MapError::Exists => FsError::Exists,
            MapError::NotFound => FsError::NotFound,
            MapError::NameTooLong => FsError::NameTooLong,
            MapError::Invalid(what) => FsError::Invalid(what),
            MapError::NoSpace(what) => FsError::NoSpace(what),
            MapError::Corrupt(what) => FsError::Corrupt(what),
            MapError::Object(err) => FsError::Object(err),
        }
    }
}

/// The class a lower layer's error (object set, txg engine, intent log) has when a file
/// operation meets it. "Not found" or "exists" from below is damage, not the caller's ENOENT
/// or EEXIST: the caller's names were already resolved by this layer, so an object missing
/// (or in the way) underneath means the filesystem's own structures disagree, and telling
/// the client ENOENT would make a damaged file look merely absent. (Where the caller named
/// the object itself, by inode number, the filesystem says `FsError::NotFound` before it
/// gets here: `not_found_if_missing`.) Today's lower layers answer neither (a vanished
/// object is already `Io` in `ObjectError::class`); this keeps the answer if one ever does.
/// Everything else (a full pool, a read-only pool, a bad request, a device error) means the
/// same at every layer.
fn beneath_a_file(class: ErrorClass) -> ErrorClass {
    match class {
        ErrorClass::NotFound | ErrorClass::Exists => ErrorClass::Io,
        ErrorClass::Io
        | ErrorClass::NoSpace
        | ErrorClass::QuotaExceeded
        | ErrorClass::ReadOnly
        | ErrorClass::Invalid
        | ErrorClass::NotDirectory
        | ErrorClass::IsDirectory
        | ErrorClass::NotEmpty
        | ErrorClass::NameTooLong
        | ErrorClass::TooManyLinks
        | ErrorClass::FileTooLarge
        | ErrorClass::NoAttribute
        | ErrorClass::ValueTooLarge => class,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each variant and the errno clients got for it before the classes were unified (when
    /// `FsError::errno` mapped variants to libc constants itself): a change here is a change
    /// in what every FUSE client sees.
    #[test]
    fn every_variant_keeps_its_errno() {
        let damaged = || ObjectError::Corrupt("x".into());
        let cases: Vec<(FsError, i32)> = vec![
            (FsError::NotFound, libc::ENOENT),
            (FsError::Exists, libc::EEXIST),
            (FsError::NotDirectory, libc::ENOTDIR),
            (FsError::IsDirectory, libc::EISDIR),
            (FsError::NotEmpty, libc::ENOTEMPTY),
            (FsError::NameTooLong, libc::ENAMETOOLONG),
            (FsError::Invalid("x".into()), libc::EINVAL),
            (FsError::TooManyLinks, libc::EMLINK),
            (FsError::TooLarge, libc::EFBIG),
            (FsError::ReadOnly, libc::EROFS),
            (FsError::NoAttribute, libc::ENODATA),
            (FsError::ValueTooLarge("x".into()), libc::E2BIG),
            (FsError::NoSpace("x".into()), libc::ENOSPC),
            (FsError::QuotaExceeded("x".into()), libc::EDQUOT),
            (FsError::Corrupt("x".into()), libc::EIO),
            (FsError::Stale, libc::EIO),
            (FsError::Object(damaged()), libc::EIO),
            (FsError::Object(ObjectError::NoSuchObject(7)), libc::EIO),
            (
                FsError::Object(ObjectError::OutOfRange {
                    object: 7,
                    blkid: 1 << 40,
                }),
                libc::EINVAL,
            ),
            (FsError::Txg(TxgError::ShutDown), libc::EIO),
            (
                FsError::Log(cairn_zil::ZilError::Failed {
                    dataset: "tank/fs".into(),
                    reason: "x".into(),
                }),
                libc::EIO,
            ),
        ];
        for (err, errno) in cases {
            assert_eq!(err.errno(), errno, "{err:?}");
            assert_eq!(err.class().errno(), errno, "{err:?}");
        }
    }

    /// Each map error becomes the variant, and so the errno, the map returned itself when it
    /// was part of this crate.
    #[test]
    fn map_errors_keep_their_errno() {
        let cases: Vec<(MapError, i32)> = vec![
            (MapError::Exists, libc::EEXIST),
            (MapError::NotFound, libc::ENOENT),
            (MapError::NameTooLong, libc::ENAMETOOLONG),
            (MapError::Invalid("x".into()), libc::EINVAL),
            (MapError::NoSpace("x".into()), libc::ENOSPC),
            (MapError::Corrupt("x".into()), libc::EIO),
            (
                MapError::Object(ObjectError::Corrupt("x".into())),
                libc::EIO,
            ),
        ];
        for (err, errno) in cases {
            let text = format!("{err:?}");
            assert_eq!(FsError::from(err).errno(), errno, "{text}");
        }
    }

    /// The mapping of lower layers' classes `class_errno` made before: NoSpace, ReadOnly and
    /// Invalid kept, everything else (NotFound and Exists included) EIO. (A full pool met by
    /// the object layer is ENOSPC through `FsError::Object` by this.)
    #[test]
    fn errors_from_below_keep_their_class_but_not_found_and_exists() {
        for (below, errno) in [
            (ErrorClass::Io, libc::EIO),
            (ErrorClass::NoSpace, libc::ENOSPC),
            (ErrorClass::ReadOnly, libc::EROFS),
            (ErrorClass::Invalid, libc::EINVAL),
            (ErrorClass::NotFound, libc::EIO),
            (ErrorClass::Exists, libc::EIO),
        ] {
            assert_eq!(beneath_a_file(below).errno(), errno, "{below:?}");
        }
    }
}
