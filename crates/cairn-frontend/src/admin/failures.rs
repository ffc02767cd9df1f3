//! How the administration library words what went wrong: an error said to be why something
//! could not be done (`failed`), and a pool that cannot be opened, met while working over every
//! pool, turned into a note (`skip_unavailable`). A leaf: every request module uses it.

use super::AdminError;
use crate::PoolsError;
use crate::pools::chain_text;

/// `source`, said to be why `what` could not be done.
pub(super) fn failed(what: String, source: impl Into<AdminError>) -> AdminError {
    AdminError::Failed {
        what,
        source: Box::new(source.into()),
    }
}

/// For requests over every pool (`named` false): a pool that cannot be opened is noted and
/// skipped (`Ok(None)`); named, or for any other failure, the error stands.
pub(super) fn skip_unavailable<T>(
    result: Result<T, AdminError>,
    named: bool,
    notes: &mut Vec<String>,
) -> Result<Option<T>, AdminError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(AdminError::Pools(err @ PoolsError::Unavailable(_))) if !named => {
            notes.push(chain_text(&err));
            Ok(None)
        }
        Err(err) => Err(err),
    }
}
