//! The namespace check of one filesystem (part of `cairn pool check`): every directory entry
//! leads to a live inode of the kind the entry names; a directory is reached once, its `..`
//! is the directory that names it, its size is its entry count and its links are 2 plus its
//! subdirectories; any other inode's links equal the names it has; and no inode is left that
//! no name reaches, except those in the delete queue (inodes unlinked while open, freed at
//! their last close or the next open of the filesystem). Extended attributes: each inode's
//! map reads, every value object its entries name is a live `XattrValue` object of a size
//! only an object holds, and every `Xattrs` or `XattrValue` object belongs to exactly one
//! inode (one left behind is leaked space).
//!
//! It reads what an `ObjectSet` shows (on a pool opened for checking, exactly what is on
//! disk) and never writes. Problems are reported as text naming the objects; a read that
//! fails is a problem too, and the walk goes on where it can.

use crate::attrs::{FileKind, InodeAttrs};
use crate::xattr::{XATTR_VALUE_BYTES_MAX, indirect_object};
use crate::{
    DELETE_QUEUE_OBJECT, FIRST_INODE_OBJECT, FsError, ROOT_OBJECT, decode_entry_value, master_ok,
};
use cairn_format::ObjectType;
use cairn_object::ObjectSet;
use cairn_object::map::{self, HashedMap, ValueKind};
use std::collections::{BTreeSet, HashMap, VecDeque};

/// What the namespace check found.
#[derive(Debug, Clone, Default)]
pub struct NamespaceReport {
    pub directories: u64,
    pub inodes: u64,
    pub problems: Vec<String>,
}

/// Stop listing problems past this many (the count of the rest is still given).
const PROBLEMS_LISTED_MAX: usize = 100;

struct Walk<'a> {
    objset: &'a ObjectSet,
    report: NamespaceReport,
    dropped_problems: u64,
    names: HashMap<u64, u64>,
    subdirectories: HashMap<u64, u64>,
}

impl Walk<'_> {
    fn problem(&mut self, text: String) {
        if self.report.problems.len() < PROBLEMS_LISTED_MAX {
            self.report.problems.push(text);
        } else {
            self.dropped_problems += 1;
        }
    }

    fn attrs(&self, object: u64) -> Result<Option<InodeAttrs>, FsError> {
        let dnode = self.objset.dnode(object)?;
        if dnode.is_free() {
            return Ok(None);
        }
        InodeAttrs::decode(object, &dnode.bonus).map(Some)
    }

    /// Lists directory `dir`, counting names and queueing subdirectories not seen yet.
    fn directory(
        &mut self,
        dir: u64,
        attrs: &InodeAttrs,
        seen: &mut BTreeSet<u64>,
        queue: &mut VecDeque<u64>,
    ) {
        let mut entries = Vec::new();
        if let Err(err) = HashedMap::new(self.objset, dir).for_each_from(0, |entry| {
            entries.push(entry.clone());
            true
        }) {
            self.problem(format!(
                "directory {dir}: {}",
                cairn_device::error_chain(&FsError::from(err))
            ));
            return;
        }
        if entries.len() as u64 != attrs.size {
            self.problem(format!(
                "directory {dir} holds {} entries, its size says {}",
                entries.len(),
                attrs.size
            ));
        }
        for entry in entries {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            let (object, kind) = match decode_entry_value(&entry.value) {
                Ok(found) => found,
                Err(err) => {
                    self.problem(format!(
                        "directory {dir} entry '{name}': {}",
                        cairn_device::error_chain(&err)
                    ));
                    continue;
                }
            };
            let child = match self.attrs(object) {
                Ok(Some(child)) => child,
                Ok(None) => {
                    self.problem(format!(
                        "directory {dir} entry '{name}' names object {object}, which is free"
                    ));
                    continue;
                }
                Err(err) => {
                    self.problem(format!(
                        "directory {dir} entry '{name}': {}",
                        cairn_device::error_chain(&err)
                    ));
                    continue;
                }
            };
            if child.kind != kind {
                self.problem(format!(
                    "directory {dir} entry '{name}' says {kind:?}, object {object} is {:?}",
                    child.kind
                ));
            }
            *self.names.entry(object).or_default() += 1;
            if child.kind == FileKind::Directory {
                *self.subdirectories.entry(dir).or_default() += 1;
                if child.parent != dir {
                    self.problem(format!(
                        "directory {object} ('{name}' in {dir}) has parent {}",
                        child.parent
                    ));
                }
                if seen.insert(object) {
                    queue.push_back(object);
                } else {
                    self.problem(format!(
                        "directory {object} is reached by more than one name"
                    ));
                }
            }
        }
    }
}

/// The extended attribute objects (maps and values) found, and those inodes reach.
#[derive(Default)]
struct XattrObjects {
    found: BTreeSet<u64>,
    owned: BTreeSet<u64>,
}

impl Walk<'_> {
    /// Checks inode `inode`'s extended attribute map `map` and the value objects it names.
    fn xattrs(&mut self, inode: u64, map: u64, objects: &mut XattrObjects) {
        if !objects.owned.insert(map) {
            self.problem(format!(
                "inode {inode}'s extended attribute map {map} belongs to another inode too"
            ));
            return;
        }
        if !self.object_is(map, ObjectType::Xattrs) {
            self.problem(format!(
                "inode {inode}'s extended attribute map {map} is not a live map"
            ));
            return;
        }
        let mut values = Vec::new();
        if let Err(err) = HashedMap::new(self.objset, map).for_each_from(0, |entry| {
            if entry.kind == ValueKind::Indirect {
                values.push(indirect_object(inode, entry));
            }
            true
        }) {
            self.problem(format!(
                "inode {inode}'s extended attributes: {}",
                cairn_device::error_chain(&FsError::from(err))
            ));
            return;
        }
        for value in values {
            let value = match value {
                Ok(value) => value,
                Err(err) => {
                    self.problem(err.to_string());
                    continue;
                }
            };
            if !objects.owned.insert(value) {
                self.problem(format!(
                    "extended attribute value object {value} (inode {inode}) is named twice"
                ));
            } else if !self.object_is(value, ObjectType::XattrValue) {
                self.problem(format!(
                    "inode {inode}'s extended attribute value object {value} is not a live value"
                ));
            } else {
                self.value_size(inode, value);
            }
        }
    }

    fn object_is(&self, object: u64, object_type: ObjectType) -> bool {
        self.objset
            .dnode(object)
            .is_ok_and(|dnode| !dnode.is_free() && dnode.object_type == object_type)
    }

    /// A value object holds more than a map entry could, and no more than the VFS allows.
    fn value_size(&mut self, inode: u64, value: u64) {
        match self.objset.read_blob(value) {
            Ok(Some(bytes))
                if bytes.len() > map::VALUE_BYTES_MAX && bytes.len() <= XATTR_VALUE_BYTES_MAX => {}
            Ok(Some(bytes)) => self.problem(format!(
                "inode {inode}'s extended attribute value object {value} holds {} bytes",
                bytes.len()
            )),
            Ok(None) => self.problem(format!(
                "inode {inode}'s extended attribute value object {value} is free"
            )),
            Err(err) => self.problem(format!(
                "inode {inode}'s extended attribute value object {value}: {}",
                cairn_device::error_chain(&err)
            )),
        }
    }
}

impl Walk<'_> {
    /// Every object past the fixed ones: each inode's links against the names the walk
    /// counted and its extended attributes; then the attribute objects no inode reaches.
    fn objects(&mut self, queued: &BTreeSet<u64>) -> Result<(), FsError> {
        let bound = self.objset.object_id_bound();
        let mut xattr_objects = XattrObjects::default();
        for object in FIRST_INODE_OBJECT..bound {
            let dnode = self.objset.dnode(object)?;
            if dnode.is_free() {
                continue;
            }
            match dnode.object_type {
                ObjectType::FileData | ObjectType::Directory => {}
                ObjectType::Xattrs | ObjectType::XattrValue => {
                    xattr_objects.found.insert(object);
                    continue;
                }
                _ => continue,
            }
            self.report.inodes += 1;
            let attrs = match InodeAttrs::decode(object, &dnode.bonus) {
                Ok(attrs) => attrs,
                Err(err) => {
                    self.problem(err.to_string());
                    continue;
                }
            };
            if attrs.xattr_object != 0 {
                self.xattrs(object, attrs.xattr_object, &mut xattr_objects);
            }
            self.links(object, &attrs, queued);
        }
        for object in xattr_objects.found.difference(&xattr_objects.owned) {
            self.problem(format!(
                "extended attribute object {object} belongs to no inode (leaked)"
            ));
        }
        Ok(())
    }

    /// An inode's link count against the names that reach it (none: only an unlinked
    /// inode waiting in the delete queue).
    fn links(&mut self, object: u64, attrs: &InodeAttrs, queued: &BTreeSet<u64>) {
        let names = self.names.get(&object).copied().unwrap_or(0);
        if names == 0 {
            if !(queued.contains(&object) && attrs.links == 0) {
                self.problem(format!(
                    "inode {object} ({:?}, {} links) is reached by no name",
                    attrs.kind, attrs.links
                ));
            }
        } else if attrs.kind != FileKind::Directory && attrs.links != names {
            self.problem(format!(
                "inode {object} has {} links and {names} names",
                attrs.links
            ));
        }
    }
}

/// Checks the namespace of the filesystem in `objset`.
pub fn check_namespace(objset: &ObjectSet) -> Result<NamespaceReport, FsError> {
    master_ok(objset)?;
    let mut walk = Walk {
        objset,
        report: NamespaceReport::default(),
        dropped_problems: 0,
        names: HashMap::new(),
        subdirectories: HashMap::new(),
    };
    let mut seen = BTreeSet::from([ROOT_OBJECT]);
    let mut queue = VecDeque::from([ROOT_OBJECT]);
    let mut directories = Vec::new();
    while let Some(dir) = queue.pop_front() {
        let attrs = match walk.attrs(dir) {
            Ok(Some(attrs)) if attrs.kind == FileKind::Directory => attrs,
            Ok(_) => {
                walk.problem(format!("directory {dir} is not a directory"));
                continue;
            }
            Err(err) => {
                walk.problem(format!(
                    "directory {dir}: {}",
                    cairn_device::error_chain(&err)
                ));
                continue;
            }
        };
        walk.directory(dir, &attrs, &mut seen, &mut queue);
        directories.push((dir, attrs.links));
    }
    walk.report.directories = directories.len() as u64;
    for (dir, links) in directories {
        let expected = 2 + walk.subdirectories.get(&dir).copied().unwrap_or(0);
        if links != expected {
            walk.problem(format!(
                "directory {dir} has {links} links, expected {expected}"
            ));
        }
    }
    let mut queued = BTreeSet::new();
    HashedMap::new(objset, DELETE_QUEUE_OBJECT).for_each_from(0, |entry| {
        if let Some(object) = std::str::from_utf8(&entry.name)
            .ok()
            .and_then(|text| text.parse::<u64>().ok())
        {
            queued.insert(object);
        }
        true
    })?;
    walk.objects(&queued)?;
    if walk.dropped_problems > 0 {
        let more = walk.dropped_problems;
        walk.report
            .problems
            .push(format!("... and {more} more problems"));
    }
    Ok(walk.report)
}
