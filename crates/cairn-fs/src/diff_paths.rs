//! One version of a filesystem as `diff.rs` reads it: inode attributes, the names an object
//! has in a directory, and the path of a directory, each read on demand and remembered, so a
//! diff reads only what its changes lead to (see `diff.rs` for what that costs).
//!
//! A path is found bottom-up, as ZFS's `zfs diff` does: a directory's `parent` attribute names
//! the directory holding it (a directory has one name, so that is exact), and its name is the
//! entry of the parent whose value is the directory. A name a directory gained in the diff is
//! known from the diff itself (`learn`); any other is found by scanning the parent's entries
//! once and remembering every object's names there (a directory scanned answers all later
//! questions about it). Invariant: everything remembered is of this one version, which is
//! read-only (a snapshot, or a synced root of the head), so nothing goes stale.

use crate::attrs::{FileKind, InodeAttrs};
use crate::raw::decode_entry_value;
use crate::{DELETE_QUEUE_OBJECT, FsError, ROOT_OBJECT};
use cairn_format::{Dnode, ObjectType};
use cairn_object::map::HashedMap;
use cairn_object::{ObjectError, ObjectSet};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Deepest directory tree a path is followed through (a loop of `parent` links is damage).
const DEPTH_MAX: usize = 1 << 16;

/// One name of an object: entry `name` of directory `dir`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Link {
    pub(crate) dir: u64,
    pub(crate) name: Vec<u8>,
    pub(crate) object: u64,
    pub(crate) kind: FileKind,
}

/// A directory entry: its name, and the object it names with that object's kind.
pub(crate) type NamedEntry = (Vec<u8>, (u64, FileKind));

/// An object's names in one directory, by object.
type DirectoryNames = BTreeMap<u64, Vec<Vec<u8>>>;

/// One version of the filesystem, read lazily (see the module doc).
pub(crate) struct Side<'a> {
    objset: &'a ObjectSet,
    attrs: BTreeMap<u64, Option<InodeAttrs>>,
    names: BTreeMap<u64, DirectoryNames>,
    /// Directories whose entry in their parent the diff found: directory → (parent, name).
    known: BTreeMap<u64, (u64, Vec<u8>)>,
    /// Paths of directories resolved so far ("" for the root).
    paths: BTreeMap<u64, Vec<u8>>,
    /// Directories whose entries were scanned to find a name (a measure of the cost).
    pub(crate) directories_scanned: u64,
}

impl<'a> Side<'a> {
    pub(crate) fn new(objset: &'a ObjectSet) -> Side<'a> {
        Side {
            objset,
            attrs: BTreeMap::new(),
            names: BTreeMap::new(),
            known: BTreeMap::new(),
            paths: BTreeMap::from([(ROOT_OBJECT, Vec::new())]),
            directories_scanned: 0,
        }
    }

    pub(crate) fn objset(&self) -> &'a ObjectSet {
        self.objset
    }

    /// Records `object`'s dnode (already read by the walk), returning its attributes when it
    /// is an inode.
    pub(crate) fn note_dnode(
        &mut self,
        object: u64,
        dnode: &Dnode,
    ) -> Result<Option<InodeAttrs>, FsError> {
        let attrs = inode_attrs(object, dnode)?;
        self.attrs.insert(object, attrs.clone());
        Ok(attrs)
    }

    /// The attributes of inode `object` (`None`: no inode of that number in this version).
    pub(crate) fn attrs(&mut self, object: u64) -> Result<Option<InodeAttrs>, FsError> {
        if let Some(attrs) = self.attrs.get(&object) {
            return Ok(attrs.clone());
        }
        let attrs = match self
            .objset
            .with_dnode(object, |dnode| inode_attrs(object, dnode))
        {
            Ok(attrs) => attrs?,
            Err(ObjectError::NoSuchObject(_)) => None,
            Err(err) => return Err(err.into()),
        };
        self.attrs.insert(object, attrs.clone());
        Ok(attrs)
    }

    /// A directory's name found by the diff (an entry it gained or lost on this side).
    pub(crate) fn learn(&mut self, link: &Link) {
        if link.kind == FileKind::Directory {
            self.known
                .insert(link.object, (link.dir, link.name.clone()));
        }
    }

    /// The names `object` has in directory `dir`, sorted.
    pub(crate) fn names_in(&mut self, dir: u64, object: u64) -> Result<Vec<Vec<u8>>, FsError> {
        if !self.names.contains_key(&dir) {
            let mut names = DirectoryNames::new();
            for (name, (child, _)) in entries(self.objset, dir)? {
                names.entry(child).or_default().push(name);
            }
            for list in names.values_mut() {
                list.sort();
            }
            self.directories_scanned += 1;
            self.names.insert(dir, names);
        }
        Ok(self
            .names
            .get(&dir)
            .and_then(|names| names.get(&object))
            .cloned()
            .unwrap_or_default())
    }

    /// The path of name `name` in directory `dir`: "/name" under the root.
    pub(crate) fn path_of(&mut self, dir: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let mut path = self.dir_path(dir)?;
        path.push(b'/');
        path.extend_from_slice(name);
        Ok(path)
    }

    /// The path of directory `dir` ("" for the root, "/a/b" below it).
    pub(crate) fn dir_path(&mut self, dir: u64) -> Result<Vec<u8>, FsError> {
        // Up to the first directory whose path is known, then down again.
        let mut chain: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut at = dir;
        let mut prefix = None;
        for _ in 0..DEPTH_MAX {
            if let Some(path) = self.paths.get(&at) {
                prefix = Some(path.clone());
                break;
            }
            let attrs = self.attrs(at)?.ok_or_else(|| {
                FsError::Corrupt(format!("directory {at} on the path of {dir} is missing"))
            })?;
            let parent = attrs.parent;
            let name = match self.known.get(&at) {
                Some((known_parent, name)) if *known_parent == parent => name.clone(),
                _ => self
                    .names_in(parent, at)?
                    .into_iter()
                    .next()
                    .ok_or_else(|| {
                        FsError::Corrupt(format!(
                            "directory {at} has no name in its parent {parent}"
                        ))
                    })?,
            };
            chain.push((at, name));
            at = parent;
        }
        let mut path =
            prefix.ok_or_else(|| FsError::Corrupt(format!("the parents of {dir} loop")))?;
        for (object, name) in chain.into_iter().rev() {
            path.push(b'/');
            path.extend_from_slice(&name);
            self.paths.insert(object, path.clone());
        }
        Ok(path)
    }

    /// Every path of each object of `wanted` in this version, found by walking the whole
    /// namespace from the root: the last resort for a changed file whose names are all in
    /// directories the diff has no other way to find (see `diff.rs`).
    pub(crate) fn all_paths(
        &mut self,
        wanted: &BTreeSet<u64>,
    ) -> Result<BTreeMap<u64, Vec<Vec<u8>>>, FsError> {
        let mut found: BTreeMap<u64, Vec<Vec<u8>>> = BTreeMap::new();
        let mut queue = VecDeque::from([(ROOT_OBJECT, Vec::new())]);
        while let Some((dir, path)) = queue.pop_front() {
            self.directories_scanned += 1;
            for (name, (child, kind)) in entries(self.objset, dir)? {
                let mut child_path = path.clone();
                child_path.push(b'/');
                child_path.extend_from_slice(&name);
                if wanted.contains(&child) {
                    found.entry(child).or_default().push(child_path.clone());
                }
                // A directory has one name, so the walk is a tree and ends.
                if kind == FileKind::Directory {
                    queue.push_back((child, child_path));
                }
            }
        }
        Ok(found)
    }
}

/// The attributes in `dnode` if it is an inode's (a file or directory of the filesystem, not
/// one of its internal objects).
fn inode_attrs(object: u64, dnode: &Dnode) -> Result<Option<InodeAttrs>, FsError> {
    let internal = object <= DELETE_QUEUE_OBJECT && object != ROOT_OBJECT;
    if internal
        || dnode.is_free()
        || !matches!(
            dnode.object_type,
            ObjectType::FileData | ObjectType::Directory
        )
    {
        return Ok(None);
    }
    InodeAttrs::decode(object, &dnode.bonus).map(Some)
}

/// Every entry of directory `dir`: name → (object, kind).
pub(crate) fn entries(objset: &ObjectSet, dir: u64) -> Result<Vec<NamedEntry>, FsError> {
    let mut out = Vec::new();
    let mut failure = None;
    HashedMap::new(objset, dir).for_each_from(0, |entry| {
        match decode_entry_value(&entry.value) {
            Ok(value) => out.push((entry.name.clone(), value)),
            Err(err) => failure = Some(err),
        }
        failure.is_none()
    })?;
    match failure {
        Some(err) => Err(err),
        None => Ok(out),
    }
}
