//! `AdminRequest::DiffFiles` (`cairn diff` of a filesystem; see `Pool::diff_files`): the
//! engine's changes as rows a front end renders, and where their paths start. Read-only: a
//! pool opened for it is not written.
//!
//! Where paths start, as `zfs diff` (which needs the dataset mounted): where this server has
//! the newer side's dataset mounted, else its `mountpoint` property, else nowhere (paths
//! from the dataset's root, "/" being the root itself). Paths are bytes: a name may be any
//! bytes but '/' and NUL, and escaping them is the renderer's business.

use super::AdminError;
use crate::pools::PoolAccess;
use cairn_fs::attrs::FileKind;
use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;

/// One changed path (`cairn_fs::diff::FsChange`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChangeRow {
    /// `zfs diff`'s letter: `-`, `+`, `M` or `R`.
    pub change: char,
    /// From the dataset's root (the old path of a rename).
    pub path: Vec<u8>,
    /// The new path of a rename.
    pub new_path: Option<Vec<u8>>,
    /// `zfs diff -F`'s letter: `F` file, `/` directory, `@` symlink, `|` fifo, `=` socket,
    /// `B` block device, `C` character device.
    pub kind: char,
    /// The inode's change time (before a removal, for a removal).
    pub ctime_secs: i64,
    pub ctime_nanos: u32,
    pub object: u64,
}

/// What `diff` of a filesystem found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiffReply {
    /// Sorted by path.
    pub changes: Vec<FileChangeRow>,
    /// Where paths start (see the module doc), as bytes; `None`: at the dataset's root.
    pub mountpoint: Option<Vec<u8>>,
    /// The cost: objects whose dnodes changed, blocks the walks read, directories scanned.
    pub objects_changed: u64,
    pub blocks_visited: u64,
    pub directories_scanned: u64,
}

/// `zfs diff -F`'s letter for a kind.
pub fn kind_letter(kind: FileKind) -> char {
    match kind {
        FileKind::File => 'F',
        FileKind::Directory => '/',
        FileKind::Symlink => '@',
        FileKind::Fifo => '|',
        FileKind::Socket => '=',
        FileKind::BlockDevice => 'B',
        FileKind::CharDevice => 'C',
    }
}

/// `diff` of a filesystem (see the module doc).
pub fn diff_files(
    access: &PoolAccess,
    older: &str,
    newer: &str,
) -> Result<FileDiffReply, AdminError> {
    let pool_name = older.split(['/', '@']).next().unwrap_or(older);
    let found = access.with_pool(pool_name, true, |pool| {
        pool.diff_files(older, newer).map_err(AdminError::from)
    })?;
    let mounted = access.served.as_ref().and_then(|served| {
        served
            .mounts
            .list()
            .into_iter()
            .find(|(dataset, _)| *dataset == found.dataset)
            .map(|(_, path)| path)
    });
    let mountpoint = mounted
        .or(found.mountpoint)
        .map(|path| path.as_os_str().as_bytes().to_vec());
    let diff = found.diff;
    Ok(FileDiffReply {
        changes: diff
            .changes
            .into_iter()
            .map(|change| FileChangeRow {
                change: change.change.symbol(),
                path: change.path,
                new_path: change.new_path,
                kind: kind_letter(change.kind),
                ctime_secs: change.ctime.secs,
                ctime_nanos: change.ctime.nanos,
                object: change.object,
            })
            .collect(),
        mountpoint,
        objects_changed: diff.objects_changed,
        blocks_visited: diff.blocks_visited,
        directories_scanned: diff.directories_scanned,
    })
}
