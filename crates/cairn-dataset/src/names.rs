//! Names: a dataset's (`pool/child/…`), a snapshot's (`dataset@snapshot`) and a bookmark's
//! (`dataset#bookmark`), checked before anything is created or looked up, so a bad name is a
//! clear `InvalidName`, never a half-made dataset.
//!
//! Rules, as ZFS's: components of ASCII letters, digits and `-_.:`; a dataset name begins with a
//! letter; a whole name (snapshot or bookmark part included) is at most `NAME_BYTES_MAX` bytes;
//! a snapshot or bookmark part is one component (no `/`), and there is no snapshot of a
//! snapshot (one `@` at most, never beside a `#`).
//!
//! Hidden names: a receive builds its dataset under `TARGET%recv` (`receive_name`), a name
//! `validate_name` refuses (`%` is no name character), so no command can create, open or
//! destroy it by name; the directory accepts it (`validate_stored_name`) and listings leave
//! it out (`is_hidden`). At END it is renamed or swapped in; one left by a killed receive is
//! destroyed at the next import.

use crate::DatasetError;

/// Longest name of a dataset, snapshot or bookmark, in bytes.
pub const NAME_BYTES_MAX: usize = 255;

/// Checks a dataset name: `pool` or `pool/child[/child…]`, components of letters, digits and
/// `-_.:`; no empty components.
pub fn validate_name(name: &str) -> Result<(), DatasetError> {
    let invalid = |reason: &str| DatasetError::InvalidName {
        name: name.to_string(),
        reason: reason.to_string(),
    };
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(invalid("must be 1 to 255 characters"));
    }
    if name.contains(['@', '#']) {
        return Err(invalid(
            "a dataset name has no @ or # (those name a snapshot or a bookmark)",
        ));
    }
    for component in name.split('/') {
        if component.is_empty() {
            return Err(invalid("empty component"));
        }
        if !is_component(component) {
            return Err(invalid("only letters, digits and - _ . : are allowed"));
        }
    }
    if !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()) {
        return Err(invalid("must begin with a letter"));
    }
    Ok(())
}

/// The suffix of a receive's hidden dataset (see the module doc).
pub const RECEIVE_SUFFIX: &str = "%recv";

/// The hidden dataset a receive into `target` builds in.
pub fn receive_name(target: &str) -> String {
    format!("{target}{RECEIVE_SUFFIX}")
}

/// Whether dataset `name` is a receive's hidden one (never listed, never opened by name).
pub fn is_hidden(name: &str) -> bool {
    name.ends_with(RECEIVE_SUFFIX)
}

/// What the directory accepts as a dataset's name: a valid name, or a valid name with the
/// hidden suffix (`receive_name`).
pub fn validate_stored_name(name: &str) -> Result<(), DatasetError> {
    validate_name(name.strip_suffix(RECEIVE_SUFFIX).unwrap_or(name))
}

/// Whether `text` is made only of the characters a name component may hold.
fn is_component(text: &str) -> bool {
    text.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
}

/// A snapshot's name, `dataset@snapshot`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotName {
    pub dataset: String,
    pub snapshot: String,
}

impl SnapshotName {
    pub fn parse(name: &str) -> Result<SnapshotName, DatasetError> {
        let (dataset, snapshot) = split_name(name, '@', "snapshot")?;
        Ok(SnapshotName { dataset, snapshot })
    }
}

impl std::fmt::Display for SnapshotName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.dataset, self.snapshot)
    }
}

/// A bookmark's name, `dataset#bookmark`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookmarkName {
    pub dataset: String,
    pub bookmark: String,
}

impl BookmarkName {
    pub fn parse(name: &str) -> Result<BookmarkName, DatasetError> {
        let (dataset, bookmark) = split_name(name, '#', "bookmark")?;
        Ok(BookmarkName { dataset, bookmark })
    }
}

impl std::fmt::Display for BookmarkName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.dataset, self.bookmark)
    }
}

/// Splits `name` at its one `separator` into a checked dataset name and a checked component
/// (`what`: "snapshot" or "bookmark").
fn split_name(name: &str, separator: char, what: &str) -> Result<(String, String), DatasetError> {
    let invalid = |reason: String| DatasetError::InvalidName {
        name: name.to_string(),
        reason,
    };
    let Some((dataset, part)) = name.split_once(separator) else {
        return Err(invalid(format!("a {what} is named DATASET{separator}NAME")));
    };
    if part.contains(['@', '#']) || dataset.contains(['@', '#']) {
        return Err(invalid(format!(
            "one @ or # at most: there is no {what} of a snapshot or a bookmark"
        )));
    }
    if name.len() > NAME_BYTES_MAX {
        return Err(invalid(format!(
            "must be at most {NAME_BYTES_MAX} characters"
        )));
    }
    validate_name(dataset)?;
    if part.is_empty() {
        return Err(invalid(format!("empty {what} name after {separator}")));
    }
    if part.contains('/') {
        return Err(invalid(format!("a {what} name is one component (no /)")));
    }
    if !is_component(part) {
        return Err(invalid(format!(
            "a {what} name has only letters, digits and - _ . :"
        )));
    }
    Ok((dataset.to_string(), part.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_names_follow_zfs_rules() {
        assert!(validate_name("tank").is_ok());
        assert!(validate_name("tank/vol-1.a").is_ok());
        assert!(validate_name("tank//vol").is_err());
        assert!(validate_name("tank/vol/").is_err());
        assert!(validate_name("1tank").is_err());
        assert!(validate_name("tank/v ol").is_err());
    }

    #[test]
    fn snapshot_and_bookmark_names_are_checked_whole() {
        let name = SnapshotName::parse("tank/home@monday").unwrap();
        assert_eq!(
            (name.dataset.as_str(), name.snapshot.as_str()),
            ("tank/home", "monday")
        );
        assert_eq!(name.to_string(), "tank/home@monday");
        assert_eq!(BookmarkName::parse("tank#b-1.0").unwrap().bookmark, "b-1.0");
        let reason = |result: Result<SnapshotName, DatasetError>| match result {
            Err(DatasetError::InvalidName { reason, .. }) => reason,
            other => panic!("accepted: {other:?}"),
        };
        assert!(reason(SnapshotName::parse("tank/home")).contains("DATASET@NAME"));
        assert!(reason(SnapshotName::parse("tank/home@")).contains("empty"));
        assert!(reason(SnapshotName::parse("tank/home@a@b")).contains("one @"));
        assert!(reason(SnapshotName::parse("tank/home#b@a")).contains("one @"));
        assert!(reason(SnapshotName::parse("tank/home@a/b")).contains("one component"));
        assert!(reason(SnapshotName::parse("tank/home@mon day")).contains("letters"));
        assert!(reason(SnapshotName::parse("tank//home@a")).contains("empty component"));
        let long = format!("tank@{}", "a".repeat(NAME_BYTES_MAX - 5));
        assert!(SnapshotName::parse(&long).is_ok());
        let too_long = format!("{long}a");
        assert!(reason(SnapshotName::parse(&too_long)).contains("at most 255"));
        // A dataset name never holds the separators.
        assert!(validate_name("tank/home@monday").is_err());
        assert!(validate_name("tank#b").is_err());
    }
}
