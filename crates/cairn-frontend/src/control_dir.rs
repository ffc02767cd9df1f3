//! The control directory's attributes, one answer for both front ends that show it (`.cairn`
//! and `.cairn/snapshot`: the FUSE mount's `fuse/control_ops.rs`, NFS's `nfs/handle.rs`), so
//! a client sees the same directories whichever way it comes in.
//!
//! They are directories of root's, readable and searchable by all and writable by none, with
//! the filesystem root's times. `.cairn/snapshot` is modified now, at every look: clients keep
//! a directory's listing until its mtime changes, and this listing changes with every
//! snapshot taken or destroyed, which no mtime records.

use cairn_fs::attrs::{FileKind, InodeAttrs, Timestamp};

/// The attributes of `.cairn` (`snapshot_dir` false) or `.cairn/snapshot` (true) of a
/// filesystem whose root has `root`.
pub fn control_dir_attrs(root: InodeAttrs, snapshot_dir: bool) -> InodeAttrs {
    let mut attrs = InodeAttrs {
        kind: FileKind::Directory,
        mode: 0o555,
        uid: 0,
        gid: 0,
        links: 2,
        size: 0,
        ..root
    };
    if snapshot_dir {
        attrs.mtime = Timestamp::now();
        attrs.ctime = attrs.mtime;
    }
    attrs
}
