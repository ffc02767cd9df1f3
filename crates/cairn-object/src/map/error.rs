//! What a map operation can fail with. Each refusal is a variant of its own, so a caller
//! (the filesystem, the meta object set) can answer by type, never by reading messages.

use crate::ObjectError;
use cairn_device::ErrorClass;

#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// `insert` of a name the map holds.
    #[error("the name is in the map already")]
    Exists,
    /// `set_value` of a name the map does not hold.
    #[error("no entry of that name in the map")]
    NotFound,
    /// An empty name, or one longer than `NAME_BYTES_MAX`.
    #[error("a map name must be 1 to {} bytes", super::NAME_BYTES_MAX)]
    NameTooLong,
    /// A bad request, such as a value longer than `VALUE_BYTES_MAX`.
    #[error("invalid map request: {0}")]
    Invalid(String),
    /// The map cannot grow to take the entry (too many names with one hash, a full bucket at
    /// the deepest table, or every leaf of the layout in use).
    #[error("no room in the map: {0}")]
    NoSpace(String),
    /// A block of the map is damaged; the text names the map's object and what is wrong.
    #[error("corrupt map: {0}")]
    Corrupt(String),
    /// Reading one of the map's blocks failed.
    #[error(transparent)]
    Object(#[from] ObjectError),
}

impl MapError {
    /// What the failure means to a client (`cairn_device::ErrorClass`): each refusal its
    /// class, a damaged map `Io`, a failed read its own class.
    pub fn class(&self) -> ErrorClass {
        match self {
            MapError::Exists => ErrorClass::Exists,
            MapError::NotFound => ErrorClass::NotFound,
            MapError::NameTooLong => ErrorClass::NameTooLong,
            MapError::Invalid(_) => ErrorClass::Invalid,
            MapError::NoSpace(_) => ErrorClass::NoSpace,
            MapError::Corrupt(_) => ErrorClass::Io,
            MapError::Object(err) => err.class(),
        }
    }
}
