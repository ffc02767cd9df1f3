//! The requests on the control directory's inodes (`.cairn`, `.cairn/snapshot` and the
//! snapshots under it; `snapdir.rs` tells the design): attributes, lookups, listings, and the
//! reads of a snapshot's files, each run inside the snapshot's gate
//! (`cairn_engine::SnapshotFilesystem::with`), so that none reads a destroyed snapshot.
//!
//! Invariant: nothing here changes anything; `ops.rs` refuses every change under `.cairn`
//! before it would get here. An `impl` of `adapter.rs`'s `FuseAdapter`, using `convert.rs`
//! and `snapdir.rs`.

use super::adapter::{ATTR_TTL, FuseAdapter, READDIRPLUS_ENTRIES_MAX, REPORTED_BLOCK_BYTES};
use super::convert::{file_attr, file_type};
use super::snapdir::{
    CONTROL_DIR_COOKIE, CONTROL_DIR_NAME, ListedEntry, Node, SNAPSHOT_DIR_NAME, SNAPSHOT_ENTRY_TTL,
    SnapshotDir, is_control_name,
};
use cairn_fs::{Filesystem, FsError, ROOT_OBJECT};
use fuser::{Errno, FileAttr, FileType};
use std::time::Duration;

/// Attributes of a snapshot's inode as the kernel is given them.
fn snapshot_attr(fs: &Filesystem, slot: u64, object: u64) -> Result<(FileAttr, u64), FsError> {
    let attrs = fs.getattr(object)?;
    let storage = fs.storage(object)?;
    let mut attr = file_attr(object, &attrs, storage);
    attr.ino = Node::Snapshot { slot, object }.ino()?;
    Ok((attr, attrs.generation))
}

impl FuseAdapter {
    fn snapdir(&self) -> Result<&SnapshotDir, FsError> {
        self.snapshots.as_ref().ok_or(FsError::NotFound)
    }

    /// Attributes of `.cairn` or `.cairn/snapshot`: directories of root's, readable and
    /// searchable by all and writable by none, with the mounted root's times.
    ///
    /// `.cairn/snapshot` is modified now, at every look: the kernel keeps a directory's
    /// listing (no opendir is asked, so it caches listings) until its mtime changes, and
    /// this listing changes with every snapshot taken or destroyed, which no mtime records.
    /// Its attributes are never cached (`SNAPSHOT_ENTRY_TTL`), so each path walk into it asks.
    fn control_attr(&self, node: Node) -> Result<FileAttr, FsError> {
        let root = self.fs().getattr(ROOT_OBJECT)?;
        let attrs = crate::control_dir::control_dir_attrs(root, node == Node::SnapshotDir);
        let mut attr = file_attr(
            ROOT_OBJECT,
            &attrs,
            cairn_fs::InodeStorage {
                allocated_bytes: 0,
                block_bytes: u64::from(REPORTED_BLOCK_BYTES),
            },
        );
        attr.ino = node.ino()?;
        Ok(attr)
    }

    /// Attributes (with their caching time and generation) of an inode under `.cairn`.
    pub(super) fn control_getattr(&self, node: Node) -> Result<(FileAttr, Duration, u64), FsError> {
        match node {
            Node::Head(_) => Err(FsError::Invalid("not under .cairn".into())),
            Node::ControlDir => Ok((self.control_attr(node)?, ATTR_TTL, 0)),
            Node::SnapshotDir => Ok((self.control_attr(node)?, SNAPSHOT_ENTRY_TTL, 0)),
            Node::Snapshot { slot, object } => {
                let (attr, generation) = self
                    .snapdir()?
                    .with(slot, |fs| snapshot_attr(fs, slot, object))?;
                let ttl = if object == ROOT_OBJECT {
                    SNAPSHOT_ENTRY_TTL
                } else {
                    ATTR_TTL
                };
                Ok((attr, ttl, generation))
            }
        }
    }

    /// `name` in `parent` (the mounted root's `.cairn`, or anything under it).
    pub(super) fn control_lookup(
        &self,
        parent: Node,
        name: &[u8],
    ) -> Result<(FileAttr, Duration, u64), FsError> {
        let snapdir = self.snapdir()?;
        match (parent, name) {
            (_, b".") => self.control_getattr(parent),
            (Node::Head(_), _) if is_control_name(parent, name) => {
                self.control_getattr(Node::ControlDir)
            }
            (Node::Head(_), _) => Err(FsError::Invalid("not under .cairn".into())),
            (Node::ControlDir, b"..") => {
                let attrs = self.fs().getattr(ROOT_OBJECT)?;
                Ok((self.attr(ROOT_OBJECT, &attrs), ATTR_TTL, attrs.generation))
            }
            (Node::ControlDir, SNAPSHOT_DIR_NAME) => self.control_getattr(Node::SnapshotDir),
            (Node::ControlDir, _) => Err(FsError::NotFound),
            (Node::SnapshotDir, b"..") => self.control_getattr(Node::ControlDir),
            (Node::SnapshotDir, name) => {
                let slot = snapdir.slot_named(name)?;
                self.control_getattr(Node::Snapshot {
                    slot,
                    object: ROOT_OBJECT,
                })
            }
            (
                Node::Snapshot {
                    slot,
                    object: ROOT_OBJECT,
                },
                b"..",
            ) => {
                // The snapshot's root must still be there for its parent to be asked.
                snapdir.with(slot, |fs| fs.getattr(ROOT_OBJECT))?;
                self.control_getattr(Node::SnapshotDir)
            }
            (Node::Snapshot { slot, object }, name) => {
                let (attr, generation) = snapdir.with(slot, |fs| {
                    let (found, _) = fs.lookup(object, name)?;
                    snapshot_attr(fs, slot, found)
                })?;
                Ok((attr, ATTR_TTL, generation))
            }
        }
    }

    /// The entries of directory `dir` (under `.cairn`) after `cookie`, with their attributes
    /// when `plus`, until `visit` returns false.
    pub(super) fn control_readdir(
        &self,
        dir: Node,
        cookie: u64,
        plus: bool,
        mut visit: impl FnMut(ListedEntry) -> bool,
    ) -> Result<(), FsError> {
        let snapdir = self.snapdir()?;
        let (parent, children): (Node, Vec<(Node, Vec<u8>, u64)>) = match dir {
            Node::Head(_) => return Err(FsError::Invalid("not under .cairn".into())),
            Node::ControlDir => (
                Node::Head(ROOT_OBJECT),
                vec![(Node::SnapshotDir, SNAPSHOT_DIR_NAME.to_vec(), 3)],
            ),
            Node::SnapshotDir => (
                Node::ControlDir,
                snapdir
                    .listing()?
                    .into_iter()
                    .map(|(slot, name)| {
                        // Slots only grow: listed by slot, a cookie stays valid as
                        // snapshots come and go.
                        let node = Node::Snapshot {
                            slot,
                            object: ROOT_OBJECT,
                        };
                        (node, name.into_bytes(), slot + 2)
                    })
                    .collect(),
            ),
            Node::Snapshot { slot, object } => {
                return self.snapshot_readdir(snapdir, slot, object, cookie, plus, visit);
            }
        };
        let dots = [(dir, b".".to_vec(), 1), (parent, b"..".to_vec(), 2)];
        for (node, name, entry_cookie) in dots.into_iter().chain(children) {
            if entry_cookie <= cookie {
                continue;
            }
            let attr = if plus {
                let found = match node {
                    Node::Head(object) => self.fs().getattr(object).map(|attrs| {
                        let generation = self.head.generation(object, attrs.generation);
                        (self.attr(object, &attrs), ATTR_TTL, generation)
                    }),
                    node => self.control_getattr(node),
                };
                // A snapshot destroyed since it was listed is left out.
                match found {
                    Ok(found) => Some(found),
                    Err(_) => continue,
                }
            } else {
                None
            };
            let entry = ListedEntry {
                ino: node.ino()?,
                cookie: entry_cookie,
                kind: FileType::Directory,
                name,
                attr,
            };
            if !visit(entry) {
                break;
            }
        }
        Ok(())
    }

    /// A directory inside a snapshot: its entries with their inode numbers in the snapshot's
    /// slot (`..` of its root is `.cairn/snapshot`).
    fn snapshot_readdir(
        &self,
        snapdir: &SnapshotDir,
        slot: u64,
        dir: u64,
        cookie: u64,
        plus: bool,
        mut visit: impl FnMut(ListedEntry) -> bool,
    ) -> Result<(), FsError> {
        // Entries first, attributes after: no inode is looked at while the directory is read.
        let mut entries = Vec::new();
        snapdir.with(slot, |fs| {
            fs.readdir(dir, cookie, |entry| {
                entries.push(entry.clone());
                entries.len() < READDIRPLUS_ENTRIES_MAX
            })
        })?;
        for entry in entries {
            let node = if dir == ROOT_OBJECT && entry.name == b".." {
                Node::SnapshotDir
            } else {
                Node::Snapshot {
                    slot,
                    object: entry.object,
                }
            };
            let attr = if plus {
                match self.control_getattr(node) {
                    Ok(found) => Some(found),
                    Err(_) => continue,
                }
            } else {
                None
            };
            let listed = ListedEntry {
                ino: node.ino()?,
                cookie: entry.cookie,
                kind: file_type(entry.kind),
                name: entry.name,
                attr,
            };
            if !visit(listed) {
                break;
            }
        }
        Ok(())
    }

    /// Runs `call` on object `object` of a snapshot, for the requests that read a file (ENOENT
    /// for `.cairn` and `.cairn/snapshot`, which are directories: EISDIR).
    pub(super) fn in_snapshot<T>(
        &self,
        node: Node,
        call: impl FnOnce(&Filesystem, u64) -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        match node {
            Node::Snapshot { slot, object } => self.snapdir()?.with(slot, |fs| call(fs, object)),
            Node::ControlDir | Node::SnapshotDir => Err(FsError::IsDirectory),
            Node::Head(_) => Err(FsError::Invalid("not under .cairn".into())),
        }
    }

    /// A change under `.cairn` (a snapshot, or the control directory itself): EROFS. One that
    /// would make a name `.cairn` in the mounted root: EEXIST (the name is the control
    /// directory's). `None`: neither, go on.
    pub(super) fn refused_change(&self, parent: Node, name: &[u8]) -> Option<Errno> {
        if !parent.is_head() {
            return Some(Errno::EROFS);
        }
        (self.snapshots.is_some() && is_control_name(parent, name)).then_some(Errno::EEXIST)
    }

    /// Whether the root's listing shows `.cairn`.
    pub(super) fn control_dir_listed(&self) -> bool {
        self.snapshots.as_ref().is_some_and(SnapshotDir::visible)
    }

    /// The root's `.cairn` entry, for its listing (after every other entry).
    pub(super) fn control_dir_entry(&self, plus: bool) -> Result<ListedEntry, FsError> {
        let attr = if plus {
            Some(self.control_getattr(Node::ControlDir)?)
        } else {
            None
        };
        Ok(ListedEntry {
            ino: Node::ControlDir.ino()?,
            cookie: CONTROL_DIR_COOKIE,
            kind: FileType::Directory,
            name: CONTROL_DIR_NAME.to_vec(),
            attr,
        })
    }
}
