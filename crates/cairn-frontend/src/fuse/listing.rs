//! Directory listings for FUSE (`readdir`, `readdirplus`): a directory of the filesystem, or
//! one under `.cairn` (`control_ops.rs`), with the root's `.cairn` entry shadowing a real one
//! of that name and listed last when `snapdir=visible`. Kept apart from `ops.rs`, which only
//! forwards the two calls here, so neither file grows past the size limit.

use super::adapter::{ATTR_TTL, FuseAdapter, READDIRPLUS_ENTRIES_MAX};
use super::convert::{errno, file_type, ino_of, object_of};
use super::snapdir::{CONTROL_DIR_NAME, Node, is_control_dir_cookie, node_of};
use cairn_fs::ops::FsOpKind;
use fuser::{Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

impl FuseAdapter {
    /// `readdir` of `ino` from `offset`.
    pub(super) fn list_directory(&self, ino: INodeNo, offset: u64, mut reply: ReplyDirectory) {
        let node = node_of(ino);
        if !node.is_head() {
            let result = self.timed(FsOpKind::Readdir, || {
                self.control_readdir(node, offset, false, |entry| {
                    !reply.add(
                        entry.ino,
                        entry.cookie,
                        entry.kind,
                        OsStr::from_bytes(&entry.name),
                    )
                })
            });
            return match result {
                Ok(()) => reply.ok(),
                Err(err) => reply.error(errno(&err)),
            };
        }
        let root = self.snapshots.is_some() && node == Node::Head(cairn_fs::ROOT_OBJECT);
        let mut full = false;
        let result = self.timed(FsOpKind::Readdir, || {
            if is_control_dir_cookie(offset) {
                return Ok(());
            }
            self.fs().readdir(object_of(ino), offset, |entry| {
                // A `.cairn` of the root's own is shadowed by the control directory.
                if root && entry.name == CONTROL_DIR_NAME {
                    return true;
                }
                full = reply.add(
                    ino_of(entry.object),
                    entry.cookie,
                    file_type(entry.kind),
                    OsStr::from_bytes(&entry.name),
                );
                !full
            })
        });
        // `snapdir=visible`: the root lists `.cairn`, last.
        if result.is_ok()
            && root
            && !full
            && !is_control_dir_cookie(offset)
            && self.control_dir_listed()
            && let Ok(entry) = self.control_dir_entry(false)
        {
            let _ = reply.add(
                entry.ino,
                entry.cookie,
                entry.kind,
                OsStr::from_bytes(&entry.name),
            );
        }
        match result {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(errno(&err)),
        }
    }

    /// `readdirplus` of `ino` from `offset`: entries with their attributes.
    pub(super) fn list_directory_plus(
        &self,
        ino: INodeNo,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let node = node_of(ino);
        if !node.is_head() {
            let result = self.timed(FsOpKind::Readdir, || {
                self.control_readdir(node, offset, true, |entry| {
                    let Some((attr, ttl, generation)) = entry.attr else {
                        return true;
                    };
                    !reply.add(
                        entry.ino,
                        entry.cookie,
                        OsStr::from_bytes(&entry.name),
                        &ttl,
                        &attr,
                        Generation(generation),
                    )
                })
            });
            return match result {
                Ok(()) => reply.ok(),
                Err(err) => reply.error(errno(&err)),
            };
        }
        let root = self.snapshots.is_some() && node == Node::Head(cairn_fs::ROOT_OBJECT);
        // Entries first, attributes after: no inode is looked at while the directory is read.
        let mut entries = Vec::new();
        let mut more = false;
        let listed = self.timed(FsOpKind::Readdir, || {
            if is_control_dir_cookie(offset) {
                return Ok(());
            }
            self.fs().readdir(object_of(ino), offset, |entry| {
                // A `.cairn` of the root's own is shadowed by the control directory.
                if !(root && entry.name == CONTROL_DIR_NAME) {
                    entries.push(entry.clone());
                }
                more = entries.len() >= READDIRPLUS_ENTRIES_MAX;
                !more
            })
        });
        if let Err(err) = listed {
            return reply.error(errno(&err));
        }
        // `snapdir=visible`: the root lists `.cairn`, after every other entry.
        let control =
            (root && !more && !is_control_dir_cookie(offset) && self.control_dir_listed())
                .then(|| self.control_dir_entry(true).ok())
                .flatten();
        for entry in entries {
            // An entry removed since it was listed is left out, as a later listing would.
            let Ok(attrs) = self.fs().getattr(entry.object) else {
                continue;
            };
            let attr = self.attr(entry.object, &attrs);
            let full = reply.add(
                ino_of(entry.object),
                entry.cookie,
                OsStr::from_bytes(&entry.name),
                &ATTR_TTL,
                &attr,
                Generation(self.head.generation(entry.object, attrs.generation)),
            );
            if full {
                return reply.ok();
            }
            // The kernel counts a lookup for each entry it is given but `.` and `..`.
            if entry.name != b"." && entry.name != b".." {
                self.head.looked_up(entry.object);
            }
        }
        if let Some(entry) = control
            && let Some((attr, ttl, generation)) = entry.attr
        {
            let _ = reply.add(
                entry.ino,
                entry.cookie,
                OsStr::from_bytes(&entry.name),
                &ttl,
                &attr,
                Generation(generation),
            );
        }
        reply.ok();
    }
}
