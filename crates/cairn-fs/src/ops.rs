//! Per-filesystem operation statistics: for each kind of call a front end makes (FUSE today,
//! NFS later), how many, bytes, errors and a latency histogram (`cairn_metrics::OpStats`).
//!
//! The front end measures each call from its arrival to its answer and records it here
//! (`Filesystem::record_op`), so the figures are what a client waits for, whatever the front
//! end. Recording takes one short lock of a small table; `pool iostat` and `stat fs` read
//! snapshots.

use cairn_metrics::OpStats;
use std::time::Duration;

/// The kinds of call counted separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FsOpKind {
    Lookup,
    Getattr,
    Setattr,
    /// create, mkdir, mknod, symlink, link
    Create,
    /// unlink, rmdir
    Remove,
    Rename,
    Readdir,
    Read,
    Write,
    /// fsync, fdatasync, fsyncdir
    Fsync,
    /// get/set/list/remove of extended attributes
    Xattr,
    /// fallocate, punch hole, zero range
    Fallocate,
    /// open, release, statfs, readlink, lseek, access: everything else
    Other,
}

impl FsOpKind {
    pub const ALL: [FsOpKind; 13] = [
        FsOpKind::Lookup,
        FsOpKind::Getattr,
        FsOpKind::Setattr,
        FsOpKind::Create,
        FsOpKind::Remove,
        FsOpKind::Rename,
        FsOpKind::Readdir,
        FsOpKind::Read,
        FsOpKind::Write,
        FsOpKind::Fsync,
        FsOpKind::Xattr,
        FsOpKind::Fallocate,
        FsOpKind::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FsOpKind::Lookup => "lookup",
            FsOpKind::Getattr => "getattr",
            FsOpKind::Setattr => "setattr",
            FsOpKind::Create => "create",
            FsOpKind::Remove => "remove",
            FsOpKind::Rename => "rename",
            FsOpKind::Readdir => "readdir",
            FsOpKind::Read => "read",
            FsOpKind::Write => "write",
            FsOpKind::Fsync => "fsync",
            FsOpKind::Xattr => "xattr",
            FsOpKind::Fallocate => "fallocate",
            FsOpKind::Other => "other",
        }
    }

    fn index(self) -> usize {
        FsOpKind::ALL
            .iter()
            .position(|kind| *kind == self)
            .expect("every kind is in ALL")
    }
}

/// A snapshot of one filesystem's operation statistics.
#[derive(Clone, Debug, Default)]
pub struct FsOpStats {
    ops: [OpStats; FsOpKind::ALL.len()],
}

impl FsOpStats {
    pub fn op(&self, kind: FsOpKind) -> &OpStats {
        &self.ops[kind.index()]
    }

    pub(crate) fn record(&mut self, kind: FsOpKind, bytes: u64, ok: bool, latency: Duration) {
        self.ops[kind.index()].record(bytes, ok, latency);
    }

    /// Every kind with its counters, in `FsOpKind::ALL` order.
    pub fn iter(&self) -> impl Iterator<Item = (FsOpKind, &OpStats)> {
        FsOpKind::ALL.iter().map(|kind| (*kind, self.op(*kind)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_counts_apart() {
        let mut stats = FsOpStats::default();
        stats.record(FsOpKind::Write, 8192, true, Duration::from_micros(40));
        stats.record(FsOpKind::Write, 8192, false, Duration::from_micros(90));
        stats.record(FsOpKind::Fsync, 0, true, Duration::from_micros(700));
        assert_eq!(stats.op(FsOpKind::Write).ops, 2);
        assert_eq!(stats.op(FsOpKind::Write).bytes, 8192);
        assert_eq!(stats.op(FsOpKind::Write).errors, 1);
        assert_eq!(stats.op(FsOpKind::Fsync).ops, 1);
        assert_eq!(stats.op(FsOpKind::Read).ops, 0);
        assert_eq!(stats.iter().count(), FsOpKind::ALL.len());
        for (index, kind) in FsOpKind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), index);
        }
    }
}
