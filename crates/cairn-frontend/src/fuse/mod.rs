//! The FUSE front end: a filesystem dataset (`cairn_fs::Filesystem`) mounted through the
//! kernel's FUSE, with `fuser` speaking the protocol.
//!
//! The adapter translates and nothing more: inode numbers (FUSE's root is inode 1, cairn's
//! root directory is object 2; the two numbers are swapped and every other object keeps its
//! number), attributes, errors (`FsError::class`) and the caller's identity for new inodes
//! (with set-group-ID directories passing on their group, as POSIX asks). Permission checks
//! are the kernel's (`default_permissions`); the mount admits every user (`allow_other`),
//! which needs root, as `cairn serve` runs.
//!
//! Caching: attributes and entries are cached by the kernel for `ATTR_TTL` (a minute); every
//! change goes through this process, which is the only writer, and the changes the
//! filesystem makes on its own (access times, set-ID bits taken away) are invalidated as they
//! happen (`Filesystem::observe_own_changes`), so the kernel's copy is not stale. Listings are
//! readdirplus (names with their attributes), and reads and writes go up to 1 MiB per request
//! (`init`). Inodes the kernel no longer caches are found again from file handles
//! (FUSE_EXPORT_SUPPORT, `lookup` of "."). A directory removed while the kernel still holds
//! it answers `getattr` with no links until the kernel forgets it (`RemovedDirs`). The kernel's own read-ahead on the
//! mount stays at what it offers (128 KiB here: asking for more is capped); sequential readers
//! are read ahead below instead, by the object set's stream detector, which file reads feed.
//!
//! Writes: the kernel's writeback cache is on, and used where it is safe
//! (`FuseAdapter::open_flags`). A file opened for writing on a dataset that is not
//! `sync=always` and has room for all the kernel may hold back (`WRITEBACK_HEADROOM_*`) has its
//! write(2)s kept in the page cache and written back in large calls; `fsync` writes them back
//! and commits, the durability point as on any file system. Everywhere else a file opened for
//! writing is opened direct (FOPEN_DIRECT_IO), so each write(2) reaches the filesystem and gets
//! its own answer: durable under `sync=always`, ENOSPC or EDQUOT when there is no room. Such a
//! file's reads come from the ARC, and it can still be mapped shared
//! (FUSE_DIRECT_IO_ALLOW_MMAP, without which the writeback cache stays off). A file opened
//! O_SYNC or O_DSYNC is always direct, so each of its writes is one round trip.
//!
//! While a file has opens through the writeback cache, the kernel may hold written pages of
//! it that the filesystem has not seen. `lseek`'s SEEK_DATA and SEEK_HOLE would call them
//! holes, so they first have the kernel write the file's pages back (on the kernel worker
//! thread, so no event loop waits for the WRITEs that brings). `stat` counts data not yet
//! synced in the file's blocks and reports the file's block size as `st_blksize`, the unit
//! SEEK_DATA and SEEK_HOLE answer in.
//!
//! What is decided at open stays for that descriptor. A file opened with room that then
//! nears the dataset's limit (a quota, or the pool's room) is stopped before anything it was
//! told was written can be refused: once a written-back call leaves the dataset less room
//! than the kernel may hold acknowledged (its per-mount dirty limit and 8 MiB), the file's
//! cached write(2)s fail with EDQUOT or ENOSPC (`stop_cached_writers_if_short`: the kernel
//! asks for a file's attributes before a cached write once they are stale, and that request
//! names the writer's handle, which `getattr` answers with the error). What the kernel still
//! holds is written back after and taken, up to that margin past a quota (a quota set live
//! below what is cached is the one way to use it); so the file's size and contents are what
//! write(2) acknowledged. Should even that not fit (the pool itself full), the refusal is
//! reported by `fsync` and `close` (as ENOSPC: the kernel reports anything else as EIO at
//! `close`) and the refused pages are dropped from the cache (`drop_refused_pages`), so
//! nothing the pool did not take is read back. The stop also fails a read at the end of
//! the file through that handle (the kernel asks for the size there too), until room
//! returns or the file's cached writers close. `sync=always` set while a file is open
//! applies to that file from its next open; until then its writes are durable from its next
//! `fsync` or `close`. The headroom is per mount: mounts of several datasets of one pool
//! each count their own.
//!
//! Round trips: each one costs two context switches, which on a small machine is most of a
//! small call's time, so the kernel is spared those it can do without: FLUSH at close (the
//! kernel writes a file's cached pages back itself first; nothing is left to do here),
//! opening directories (`FUSE_NO_OPENDIR_SUPPORT`), and asking for `security.capability`
//! before every write (`FUSE_HANDLE_KILLPRIV_V2`: set-ID bits and capabilities are taken away
//! here, `Filesystem::remove_privileges`). What a small-file create still costs (measured): a
//! negative LOOKUP, CREATE, an IOCTL if the program asks whether the file is a terminal
//! (Python's `open` does; answered ENOSYS, which the kernel does not remember), one GETXATTR
//! of `security.capability` at the inode's first write (the kernel then marks it S_NOSEC),
//! WRITE (at close, from the writeback cache), RELEASE after close (not waited for), and a
//! GETATTR of the directory before the next create (each create invalidates its attributes,
//! and `default_permissions` needs them for the search permission).
//!
//! Rollback: `cairn rollback` of a mounted filesystem keeps the mount, and what it shows is
//! the snapshot's at once: calls are stopped, the engine swaps the head, the mount swaps in
//! the new filesystem, and the kernel drops the names, attributes and pages it cached of the
//! old head; inodes it holds that the snapshot has not fail with EIO (`rollback.rs`,
//! `head.rs`).
//!
//! Snapshots: `.cairn/snapshot/<name>/` in the root of every mount shows each snapshot of the
//! dataset read-only, live (`snapdir.rs`: the design, the `snapdir` property, the reserved
//! name `.cairn`, and how the snapshots' inode numbers are kept apart from the mount's own).
//!
//! Observability: each call is timed from its arrival to its answer and recorded in the
//! filesystem's statistics (`cairn_fs::ops`), which `pool iostat` and `stat fs` show.
//!
//! Mounts have type `fuse.cairn` and the dataset as their source, and the flags the dataset's
//! `readonly`, `devices`, `setuid` and `exec` properties ask for (`MountFlags`; `cairn mount
//! -o` overrides them for one mount, `cairn set` changes them live by a remount). The server's
//! list of its mounts (`Mounts`) follows the kernel's: a mount let go from outside (a plain
//! `umount`) is forgotten at the next look, a busy one stays listed. A server killed without
//! unmounting leaves mounts that answer ENOTCONN; the next server of the same state directory
//! detaches those its record lists (`clear_dead_cairn_mounts`), and a mount over one detaches
//! it first.
//!
//! Threads: `fuser` runs `FUSE_THREADS` loops, each with its own /dev/fuse descriptor; calls
//! run on them and block on the pool as they must (the filesystem's locks order them).
//!
//! Files: `convert.rs` translates inode numbers, times, kinds, errors and attributes;
//! `mount_flags.rs` holds `MountFlags`; `mountinfo.rs` finds and detaches dead mounts in
//! /proc/self/mountinfo (`clear_dead_cairn_mounts`); `kernel_worker.rs` is the thread that
//! tells the kernel things; `writers.rs` counts cached writers (`CACHED_WRITER_FH_BIT`);
//! `removed_dirs.rs` is `RemovedDirs`; `snapdir.rs` numbers the control directory's inodes
//! and keeps the snapshots a mount shows (`SnapshotDir`); `head.rs` is the filesystem a mount
//! serves, swapped by a rollback, and the inodes the kernel holds (`MountedHead`); `adapter.rs` is `FuseAdapter`'s
//! state and the helpers its operations share (`ATTR_TTL`); `policy.rs` is the writeback and
//! open policy (`open_flags`, `WRITEBACK_HEADROOM_*`, `stop_cached_writers_if_short`,
//! `drop_refused_pages`); `control_ops.rs` answers requests under `.cairn`; `ops.rs` is the `fuser::Filesystem` operations (`init`, `getattr`,
//! `write`, `lseek`...); `mount.rs` makes one mount (`mount`, `FuseMount`, `FUSE_THREADS`);
//! `rollback.rs` rolls a mounted filesystem back under its mount (`FuseMount::roll_back`);
//! `mounts.rs` is the server's list of them (`Mounts`). Dependencies point one way, up
//! this list: each file uses only files named before it (the first six use none).

mod adapter;
mod control_ops;
mod convert;
mod head;
mod kernel_worker;
mod listing;
mod mount;
mod mount_flags;
mod mountinfo;
mod mounts;
mod ops;
mod policy;
mod removed_dirs;
mod rollback;
mod snapdir;
mod writers;

pub use adapter::SpaceFn;
pub use mount::{FuseMount, MountError, mount};
pub use mount_flags::{MountFlags, MountOptionError};
pub use mountinfo::{clear_dead_cairn_mounts, dead_cairn_mounts};
pub use mounts::{Mounts, Unmounted};
pub use snapdir::SnapshotDir;
