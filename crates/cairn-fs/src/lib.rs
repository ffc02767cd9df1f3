//! # cairn-fs: POSIX filesystem datasets over object sets (ZFS's ZPL)
//!
//! A filesystem is one object set. Every inode is an object whose dnode bonus holds its
//! attributes (`attrs`), so `stat` reads one dnode; a directory's entries are a hashed map in
//! its own object (`cairn_object::map`); a file's bytes are the object's blocks. This crate
//! knows nothing of FUSE or NFS: front ends (the FUSE adapter in `cairn-frontend`) call
//! `Filesystem` with object numbers and names.
//!
//! ## Objects (see docs/format.md, "Filesystems")
//! - 1: the master node (bonus: format version, root directory, delete queue).
//! - 2: the root directory. 3: the delete queue, a map of inodes whose last name went away
//!   while they were open; they are freed at their last close or, after a crash, when the
//!   filesystem is next opened.
//! - Others: inodes, numbered from `ObjectSet::object_id_bound` up (never reused while the
//!   filesystem is open; the generation in the attributes tells incarnations apart).
//!
//! ## Files and their blocks
//! A file's blocks are `recordsize` bytes, except that a file that fits one record is a single
//! block of its own size rounded up to 512 bytes (as in ZFS): the block grows with the file
//! (`ObjectSet::set_block_size`) until it reaches `recordsize`, and from then on the file is
//! records. So while a file's block is smaller than `recordsize`, all its data sits in block 0,
//! unless `recordsize` was raised after the file grew past one block (a `set`, or a clone,
//! which takes its parent's `recordsize`, not its origin's): a file of several blocks keeps
//! their size, as in ZFS.
//! A write covering part of a block hands the object set only its bytes
//! (`ObjectSet::write_partial`): the old block is merged in when the txg syncs, not read in
//! the writer's path. A block that becomes all zeros is a hole. Truncation frees whole blocks
//! past the end and zeroes the tail of the last one (only if it holds data: zeroing a hole
//! would make a block there).
//!
//! ## Changes, locks, durability
//! Every change joins the open txg under one `TxgHold`, entering as volumes do
//! (cairn-dataset's `block_write::join_txg`: space check, throttle, locks, hold), so a change is
//! atomic with respect to txg syncs: a crash shows it whole or not at all. Objects are locked
//! through a table of striped locks; an operation locks every object it changes in stripe
//! order (so two operations cannot deadlock), and directory renames also take the rename lock
//! (the loop check walks `parent` links). Every change is also logged in the dataset's intent
//! log inside its hold (`log.rs` encodes it, `durability.rs` logs, commits and replays it):
//! `fsync` commits the file's changes and the namespace changes before it, and replay at
//! import rebuilds what was acknowledged. Modules:
//! `namespace.rs` (create, link, remove, rename), `read.rs` (lookup, readdir, reads,
//! readlink), `data.rs` (attributes, writes, fallocate, holes), `xattr.rs` (extended
//! attributes, large values in objects of their own), `check.rs` (the namespace check of
//! `pool check`), `diff.rs` and `diff_paths.rs` (what changed between two versions: `cairn
//! diff`), `rollback.rs` (a head replaced by a rollback while in use: the old filesystem
//! retired, the new one taking over inode numbers and opens).
//!
//! ## Space and access times
//! Every change that can grow the filesystem asks the `SpaceCheck` the engine gives it
//! (cairn-dataset's, the one volumes ask too) before it starts (so a refusal changes nothing): writes, creates, links, xattr sets,
//! extending truncation and `fallocate` (which only checks that the part of the range past
//! the end of the file would fit now: it reserves nothing). The engine answers EDQUOT for a
//! quota, ENOSPC for a full pool. Data a front end acknowledged before it could ask
//! (`write_acknowledged`: the kernel's writeback cache) may go past a quota by a margin the
//! front end states, never past the pool's room.
//! Deletes, truncation to a smaller size, punching holes and other attribute changes never
//! ask, so they work at a quota and on a full pool. Reads, `readlink` and `readdir` update
//! the access time as the `atime` property says (`AtimeMode`); the update joins the txg and
//! is logged (kept ctime included), but nothing waits for it to be committed.
//!
//! ## Known gaps
//! The log has one lane; an fsync commits its file's changes and every namespace change
//! logged before it (not other files' data: `durability.rs`). Data in `Write` records is
//! always copied (no read-back at commit). Extended
//! attribute values are at most `XATTR_VALUE_BYTES_MAX` (64 KiB, the VFS's limit; E2BIG
//! beyond). POSIX ACLs are
//! enforced by the kernel and kept true here (`acl.rs`; inheritance is two logged changes). No
//! file locks beyond what the kernel keeps.
//! A replayed write sets its file's mtime and ctime to the time of the replay (`Write`
//! records carry no time).

pub mod acl;
pub mod attrs;
pub mod check;
mod data;
pub mod diff;
mod diff_paths;
mod durability;
mod error;
pub mod log;
mod namespace;
pub mod ops;
mod read;
mod rollback;
mod xattr;

pub use cairn_dataset::properties::{AtimeMode, SyncMode};
pub use cairn_dataset::space_check::{SpaceAsk, SpaceCheck, SpaceRefusal};
/// Longest file name (a directory is a hashed map: its longest name).
pub use cairn_object::map::NAME_BYTES_MAX;
pub use error::FsError;
pub use rollback::{CarriedOver, OpenInode};
pub use xattr::XATTR_VALUE_BYTES_MAX;

use crate::attrs::{FileKind, InodeAttrs, Timestamp};
use cairn_dataset::block_write::{self, JoinError};
use cairn_format::{BLOCK_SIZE_GRANULE, ObjectType};
use cairn_object::map::{self, CountDirty, HashedMap, MAP_BLOCK_BYTES, MapTx};
use cairn_object::{ObjectError, ObjectSet};
use cairn_pool::txg::{TxgEngine, TxgHold};
use parking_lot::{Mutex, RwLock, RwLockWriteGuard};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The master node.
pub const MASTER_OBJECT: u64 = 1;
/// The root directory.
pub const ROOT_OBJECT: u64 = 2;
/// The delete queue.
pub const DELETE_QUEUE_OBJECT: u64 = 3;
/// First object number handed to new inodes.
const FIRST_INODE_OBJECT: u64 = 16;
/// No object (object 0 is the object set's own dnode array, never a filesystem's).
const NO_OBJECT: u64 = 0;
const MASTER_MAGIC: u64 = u64::from_le_bytes(*b"CAIRNFS\0");
/// Version of the master node's layout (and so of the filesystem's).
pub const MASTER_VERSION: u32 = 1;
const LOCK_STRIPES: usize = 256;
/// Longest symlink target.
pub const SYMLINK_BYTES_MAX: usize = 4095;

/// The txg a change joins, and the hold that counts its dirty bytes (none for a change made
/// by a sync task, in syncing context: `format`).
#[derive(Clone, Copy)]
pub struct Tx<'a> {
    pub txg: u64,
    hold: Option<&'a TxgHold>,
}

impl<'a> Tx<'a> {
    pub fn held(hold: &'a TxgHold) -> Tx<'a> {
        Tx {
            txg: hold.txg(),
            hold: Some(hold),
        }
    }

    /// For a sync task running in `txg`'s sync.
    pub fn syncing(txg: u64) -> Tx<'static> {
        Tx { txg, hold: None }
    }

    /// This change as a hashed map takes it: the txg, and the dirty bytes counted to the hold.
    pub fn map_tx(&self) -> MapTx<'_> {
        match self.hold {
            Some(_) => MapTx::counted(self.txg, self),
            None => MapTx::syncing(self.txg),
        }
    }

    fn add_dirty(&self, bytes: u64) {
        if let Some(hold) = self.hold {
            hold.add_dirty(bytes);
        }
    }
}

impl CountDirty for Tx<'_> {
    fn add_dirty(&self, bytes: u64) {
        Tx::add_dirty(self, bytes);
    }
}

/// Told the inode whose attributes the filesystem changed on its own: not as the answer to
/// a caller's change (which returns the new attributes), but as a side effect (an access
/// time a read updated, set-ID bits a write took away). A front end whose clients cache
/// attributes (the kernel, over FUSE) invalidates them. Called with no lock held.
pub type OwnChanges = Arc<dyn Fn(u64) + Send + Sync>;

/// How old an access time `relatime` refreshes anyway.
const RELATIME_REFRESH_SECS: i64 = 24 * 60 * 60;

/// Whether a read at `now` updates, under `mode`, the access time of an inode with `attrs`.
pub(crate) fn atime_due(mode: AtimeMode, attrs: &InodeAttrs, now: Timestamp) -> bool {
    match mode {
        AtimeMode::Off => false,
        AtimeMode::On => attrs.atime != now,
        AtimeMode::Relatime => {
            attrs.atime <= attrs.mtime
                || attrs.atime <= attrs.ctime
                || now.secs.saturating_sub(attrs.atime.secs) >= RELATIME_REFRESH_SECS
        }
    }
}

/// What a namespace change may add to the pool, metadata copies included (a dnode block and
/// a few directory blocks, two copies each): asked of the space check before it starts.
const NAMESPACE_CHANGE_BYTES: u64 = 64 << 10;

/// How a filesystem behaves (its dataset properties).
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// Block size of files larger than one block (a power of two, 512 B to 1 MiB).
    pub recordsize_bytes: u32,
    pub readonly: bool,
    pub sync: SyncMode,
    pub atime: AtimeMode,
}

impl Default for FsConfig {
    fn default() -> FsConfig {
        FsConfig {
            recordsize_bytes: 128 << 10,
            readonly: false,
            sync: SyncMode::Standard,
            atime: AtimeMode::default(),
        }
    }
}

/// Who creates an inode and how.
#[derive(Debug, Clone, Copy)]
pub struct NewInode {
    pub kind: FileKind,
    /// Permission bits (`0o7777`), umask already applied.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u64,
}

/// Attribute changes (`setattr`); `None` leaves a field as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SetAttrs {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
    /// Set by the front end when the kernel asks for it (`utimensat` with explicit times
    /// sets ctime to now).
    pub ctime: Option<Timestamp>,
}

/// How a rename behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RenameMode {
    /// Replace the target if it exists (POSIX rename).
    #[default]
    Replace,
    /// Fail with `Exists` if the target exists (RENAME_NOREPLACE).
    NoReplace,
    /// Swap source and target, both of which must exist (RENAME_EXCHANGE).
    Exchange,
}

/// How `setxattr` treats an existing attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrMode {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with `Exists` if it exists (XATTR_CREATE).
    Create,
    /// Fail with `NoAttribute` if it does not (XATTR_REPLACE).
    Replace,
}

/// What `fallocate` does to a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallocate {
    /// Make the range readable and writable (extends the size unless `keep_size`). Space is
    /// not reserved ahead: copy-on-write allocates at write time, as in ZFS.
    Allocate { keep_size: bool },
    /// Turn the range into holes (the size stays).
    PunchHole,
    /// Make the range read as zeros (extends the size unless `keep_size`).
    ZeroRange { keep_size: bool },
}

/// Whether a read tells the object set's stream detector about itself (read-ahead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadAhead {
    /// A client's read: a sequential stream of them is read ahead.
    Hint,
    /// An internal read (the intent log copying data): no stream of a client's.
    None,
}

/// One directory entry as `readdir` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub object: u64,
    pub kind: FileKind,
    /// Pass this back to continue after the entry.
    pub cookie: u64,
}

/// Space as `statfs` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsSpace {
    pub total_bytes: u64,
    pub available_bytes: u64,
    pub used_objects: u64,
}

/// A file's storage as `stat` reports it (`Filesystem::storage`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeStorage {
    /// Bytes it takes on disk, data not yet synced included (`st_blocks`).
    pub allocated_bytes: u64,
    /// Its block size: the unit in which it is allocated, and so in which SEEK_DATA and
    /// SEEK_HOLE answer (`st_blksize`; at least a page, the kernel's unit of caching).
    pub block_bytes: u64,
}

/// Least block size `stat` reports: a page.
const REPORTED_BLOCK_BYTES_MIN: u64 = 4096;

/// Cookies 1 and 2 are `.` and `..`; entries' cookies follow their map keys.
const COOKIE_FIRST_ENTRY: u64 = 3;

/// Counters a front end can show.
#[derive(Debug, Default)]
pub struct FsStats {
    pub lookups: AtomicU64,
    pub creates: AtomicU64,
    pub removes: AtomicU64,
    pub renames: AtomicU64,
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    pub fsyncs: AtomicU64,
    /// Synchronous writes whose whole blocks went in place (`logbias=throughput`).
    pub in_place_writes: AtomicU64,
    /// Of those, writes that could not go in place and were logged with their data.
    pub in_place_fallbacks: AtomicU64,
}

/// A mounted filesystem dataset.
pub struct Filesystem {
    name: String,
    objset: Arc<ObjectSet>,
    txg: Arc<TxgEngine>,
    config: RwLock<FsConfig>,
    next_object: AtomicU64,
    stripes: Vec<RwLock<()>>,
    rename_lock: Mutex<()>,
    /// Open handles per inode; an inode with no links is freed at its last close.
    opens: Mutex<HashMap<u64, u64>>,
    /// Last txg each inode changed in (what its `fsync` waits for).
    dirty_txg: Mutex<DirtyTxgs>,
    space_check: Option<SpaceCheck>,
    /// Told the inode of each attribute change the filesystem makes on its own (`OwnChanges`).
    own_changes: RwLock<Option<OwnChanges>>,
    intent_log: Option<Arc<cairn_zil::IntentLog>>,
    /// Built to replay the intent log (`for_replay`): an inode whose last name goes is queued
    /// for deletion instead of freed, as if open.
    replaying: bool,
    stats: FsStats,
    op_stats: Mutex<ops::FsOpStats>,
    /// Set by `retire` when a rollback replaced the head this filesystem serves: every call
    /// then fails with `Stale` (see `rollback.rs`).
    retired: std::sync::atomic::AtomicBool,
}

use raw::{decode_entry_value, encode_entry_value};

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > map::NAME_BYTES_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(FsError::Invalid(format!(
            "the name '{}'",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

/// Block size for a file whose single block must hold `end` bytes.
fn small_block_bytes(end: u64, recordsize: u32) -> u32 {
    let granule = u64::from(BLOCK_SIZE_GRANULE);
    end.max(1)
        .div_ceil(granule)
        .saturating_mul(granule)
        .min(u64::from(recordsize)) as u32
}

impl Filesystem {
    /// Lays out an empty filesystem in `objset` (new, of type `Filesystem`) in `txg`: master
    /// node, root directory and delete queue. `root` gives the root directory's owner and mode.
    pub fn format(objset: &ObjectSet, tx: Tx<'_>, root: NewInode) -> Result<(), FsError> {
        let txg = tx.txg;
        let master = raw::master_bonus();
        objset.create_object_with_bonus(
            txg,
            MASTER_OBJECT,
            ObjectType::FsMaster,
            BLOCK_SIZE_GRANULE,
            master,
        )?;
        let now = Timestamp::now();
        let root_attrs = InodeAttrs {
            kind: FileKind::Directory,
            mode: root.mode & 0o7777,
            uid: root.uid,
            gid: root.gid,
            links: 2,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            generation: txg,
            parent: ROOT_OBJECT,
            rdev: 0,
            xattr_object: 0,
        };
        for (object, attrs) in [
            (ROOT_OBJECT, root_attrs.clone()),
            (DELETE_QUEUE_OBJECT, root_attrs),
        ] {
            objset.create_object_with_bonus(
                txg,
                object,
                ObjectType::Directory,
                MAP_BLOCK_BYTES,
                attrs.encode(),
            )?;
            HashedMap::new(objset, object).create(
                tx.map_tx(),
                object.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ txg,
            )?;
        }
        Ok(())
    }

    /// Opens the filesystem in `objset` (the delete queue is drained by `drain_delete_queue`).
    pub fn open(
        name: String,
        objset: Arc<ObjectSet>,
        txg: Arc<TxgEngine>,
        config: FsConfig,
    ) -> Result<Filesystem, FsError> {
        master_ok(&objset).map_err(|err| match err {
            FsError::Corrupt(what) => FsError::Corrupt(format!("{name}: {what}")),
            other => other,
        })?;
        check_recordsize(config.recordsize_bytes)?;
        let next = objset.object_id_bound().max(FIRST_INODE_OBJECT);
        let fs = Filesystem {
            name,
            objset,
            txg,
            config: RwLock::new(config),
            next_object: AtomicU64::new(next),
            stripes: (0..LOCK_STRIPES).map(|_| RwLock::new(())).collect(),
            rename_lock: Mutex::new(()),
            opens: Mutex::new(HashMap::new()),
            dirty_txg: Mutex::new(DirtyTxgs::default()),
            space_check: None,
            intent_log: None,
            replaying: false,
            own_changes: RwLock::new(None),
            stats: FsStats::default(),
            op_stats: Mutex::default(),
            retired: std::sync::atomic::AtomicBool::new(false),
        };
        Ok(fs)
    }

    /// Tells `observer` of the attribute changes the filesystem makes on its own from now on
    /// (`None`: no one); one observer at a time (the front end that mounts it).
    pub fn observe_own_changes(&self, observer: Option<OwnChanges>) {
        *self.own_changes.write() = observer;
    }

    /// Reports an attribute change of `object` made on the filesystem's own (`OwnChanges`).
    pub(crate) fn changed_on_own(&self, object: u64) {
        let observer = self.own_changes.read().clone();
        if let Some(observer) = observer {
            observer(object);
        }
    }

    /// Gives the filesystem the pool's space check (before it is shared). Without one, a full
    /// pool is only found by a failing txg sync.
    pub fn with_space_check(mut self, check: SpaceCheck) -> Filesystem {
        self.space_check = Some(check);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Fails with `QuotaExceeded` when `bytes` more would exceed a quota, `NoSpace` when
    /// they would not fit the pool.
    fn check_space(&self, bytes: u64) -> Result<(), FsError> {
        match &self.space_check {
            Some(check) => check(SpaceAsk::bytes(bytes)).map_err(refusal_error),
            None => Ok(()),
        }
    }

    pub fn objset(&self) -> &Arc<ObjectSet> {
        &self.objset
    }

    /// Records one call a front end answered (see `ops`).
    pub fn record_op(
        &self,
        kind: ops::FsOpKind,
        bytes: u64,
        ok: bool,
        latency: std::time::Duration,
    ) {
        self.op_stats.lock().record(kind, bytes, ok, latency);
    }

    /// A snapshot of the calls front ends answered.
    pub fn op_stats(&self) -> ops::FsOpStats {
        self.op_stats.lock().clone()
    }

    /// What the partial-write path did (blocks merged later instead of read first).
    pub fn patch_stats(&self) -> cairn_object::PatchStats {
        self.objset.patch_stats()
    }

    pub fn stats(&self) -> &FsStats {
        &self.stats
    }

    pub fn root(&self) -> u64 {
        ROOT_OBJECT
    }

    /// The `sync` property now.
    pub fn sync_mode(&self) -> SyncMode {
        self.config.read().sync
    }

    /// Whether the filesystem refuses every change (`readonly`, or its pool is read-only).
    pub fn is_readonly(&self) -> bool {
        self.config.read().readonly
    }

    /// Changes the properties that may change while mounted.
    pub fn set_config(&self, config: FsConfig) -> Result<(), FsError> {
        check_recordsize(config.recordsize_bytes)?;
        *self.config.write() = config;
        Ok(())
    }

    // ----- reading -----

    /// The attributes of inode `object`.
    pub fn getattr(&self, object: u64) -> Result<InodeAttrs, FsError> {
        self.check_current()?;
        if object <= DELETE_QUEUE_OBJECT && object != ROOT_OBJECT {
            return Err(FsError::NotFound);
        }
        self.objset
            .with_dnode(object, |dnode| {
                if dnode.is_free()
                    || !matches!(
                        dnode.object_type,
                        ObjectType::FileData | ObjectType::Directory
                    )
                {
                    return Err(FsError::NotFound);
                }
                InodeAttrs::decode(object, &dnode.bonus)
            })
            .map_err(not_found_if_missing)?
    }

    /// What inode `object` takes on disk and its block size (see `InodeStorage`).
    pub fn storage(&self, object: u64) -> Result<InodeStorage, FsError> {
        let allocated_bytes = self
            .objset
            .allocated_bytes_estimate(object)
            .map_err(not_found_if_missing)?;
        let block_bytes = self
            .objset
            .with_dnode(object, |dnode| u64::from(dnode.data_block_size))
            .map_err(not_found_if_missing)?;
        Ok(InodeStorage {
            allocated_bytes,
            block_bytes: block_bytes.max(REPORTED_BLOCK_BYTES_MIN),
        })
    }

    /// Why `bytes` more could not be written now (a quota's `QuotaExceeded`, the pool's
    /// `NoSpace`), if they could not: what a front end that acknowledges writes before they
    /// reach the filesystem asks, to stop acknowledging them before there is no room.
    pub fn space_refusal(&self, bytes: u64) -> Option<FsError> {
        self.check_space(bytes).err()
    }

    /// Space for `statfs`, given the dataset's size and available bytes (the engine's
    /// `Pool::filesystem_space`: its quota when one binds, else what it uses plus AVAIL).
    pub fn space(&self, total_bytes: u64, available_bytes: u64) -> FsSpace {
        FsSpace {
            total_bytes,
            available_bytes,
            used_objects: self.next_object.load(Ordering::Relaxed),
        }
    }

    // ----- open files and durability -----

    /// A front end opened inode `object`.
    pub fn open_inode(&self, object: u64) -> Result<(), FsError> {
        self.getattr(object)?;
        *self.opens.lock().entry(object).or_insert(0) += 1;
        Ok(())
    }

    /// A front end closed inode `object`: frees it if that was its last use and it has no
    /// name left.
    pub fn release_inode(&self, object: u64) -> Result<(), FsError> {
        {
            let mut opens = self.opens.lock();
            let Some(count) = opens.get_mut(&object) else {
                return Ok(());
            };
            *count -= 1;
            if *count > 0 {
                return Ok(());
            }
            opens.remove(&object);
        }
        let attrs = match self.getattr(object) {
            Ok(attrs) => attrs,
            Err(FsError::NotFound) => return Ok(()),
            Err(err) => return Err(err),
        };
        if attrs.links > 0 || self.config.read().readonly {
            return Ok(());
        }
        let (hold, _guards) = self.hold_locked(&[object], 0, None)?;
        if self.opens.lock().contains_key(&object) {
            return Ok(());
        }
        self.free_inode(&hold, object, &attrs);
        HashedMap::new(&self.objset, DELETE_QUEUE_OBJECT)
            .remove(Tx::held(&hold).map_tx(), object.to_string().as_bytes())?;
        Ok(())
    }

    /// Frees what the delete queue holds (inodes whose last name went away while open, before
    /// a crash or an export): the front end calls it once, after any replay, before use.
    pub fn drain_delete_queue(&self) -> Result<(), FsError> {
        if self.config.read().readonly {
            return Ok(());
        }
        let queue = HashedMap::new(&self.objset, DELETE_QUEUE_OBJECT);
        let mut names = Vec::new();
        queue.for_each_from(0, |entry| {
            names.push(entry.name.clone());
            true
        })?;
        if names.is_empty() {
            return Ok(());
        }
        // Frees only: nothing to throttle or to ask the space check (see `block_write::join_txg`).
        let hold = self.txg.try_hold()?;
        for name in names {
            let object = std::str::from_utf8(&name)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or_else(|| FsError::Corrupt("a delete queue entry".into()))?;
            // Still open (carried over a rollback, `adopt`): its last close frees it.
            if self.opens.lock().contains_key(&object) {
                continue;
            }
            if let Ok(attrs) = self.getattr(object)
                && attrs.links == 0
            {
                self.free_inode(&hold, object, &attrs);
            }
            queue.remove(Tx::held(&hold).map_tx(), &name)?;
        }
        Ok(())
    }

    // ----- helpers -----

    fn check_writable(&self) -> Result<(), FsError> {
        self.check_current()?;
        if self.config.read().readonly {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    fn stripe(&self, object: u64) -> &RwLock<()> {
        &self.stripes[stripe_of(object)]
    }

    /// Joins the open txg for a change to `objects` that dirties up to `dirty_bytes`
    /// (cairn-dataset's `block_write::join_txg`, shared with volumes): asks the space check
    /// for `space` if the change can take room, throttles, locks the stripes of `objects` in
    /// stripe order (so two changes never wait on each other's locks), then holds the txg.
    fn hold_locked(
        &self,
        objects: &[u64],
        dirty_bytes: u64,
        space: Option<SpaceAsk>,
    ) -> Result<(TxgHold, Vec<RwLockWriteGuard<'_, ()>>), FsError> {
        let space = space.and_then(|ask| self.space_check.as_ref().map(|check| (check, ask)));
        let lock = || {
            let mut stripes: Vec<usize> = objects.iter().map(|object| stripe_of(*object)).collect();
            stripes.sort_unstable();
            stripes.dedup();
            stripes
                .into_iter()
                .map(|stripe| self.stripes[stripe].write())
                .collect()
        };
        block_write::join_txg(&self.txg, space, dirty_bytes, lock).map_err(|err| match err {
            JoinError::Space(refusal) => refusal_error(refusal),
            JoinError::Txg(err) => FsError::Txg(err),
        })
    }

    /// Notes `objects` as changed in the txg of `hold` (which the hold keeps from syncing, so
    /// the note can never name a txg already synced).
    fn note_dirty(&self, objects: &[u64], hold: &TxgHold) {
        let txg = hold.txg();
        let mut dirty = self.dirty_txg.lock();
        for object in objects {
            let slot = dirty.txgs.entry(*object).or_insert(txg);
            *slot = (*slot).max(txg);
        }
        // Forget what has synced, so the map stays the size of what is dirty. Only once it
        // has doubled since the last sweep: when everything in it is still dirty (20,000
        // files made within one txg) a sweep per call made each call walk the whole map.
        if dirty.txgs.len() > dirty.sweep_at_len.max(DIRTY_SWEEP_LEN_MIN) {
            let synced = self.txg.last_synced_txg();
            dirty.txgs.retain(|_, txg| *txg > synced);
            dirty.sweep_at_len = 2 * dirty.txgs.len();
        }
    }
}

/// The lock stripe of inode `object` (a multiplicative hash: neighbouring inode numbers, made
/// together, land on different stripes).
fn stripe_of(object: u64) -> usize {
    (object.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % LOCK_STRIPES
}

/// The error a space refusal is to a filesystem's client: EDQUOT for a quota, ENOSPC for the
/// pool.
fn refusal_error(refusal: SpaceRefusal) -> FsError {
    match refusal {
        SpaceRefusal::Pool(why) => FsError::NoSpace(why),
        SpaceRefusal::Quota(why) => FsError::QuotaExceeded(why),
    }
}

/// Sweeps of `DirtyTxgs` start at this many inodes.
const DIRTY_SWEEP_LEN_MIN: usize = 4096;

/// The last txg each inode changed in, swept of synced txgs as it grows (`note_dirty`).
#[derive(Default)]
struct DirtyTxgs {
    txgs: HashMap<u64, u64>,
    /// The next sweep comes when the map is longer than this.
    sweep_at_len: usize,
}

/// Checks that `objset` holds a filesystem of this format (its master node).
fn master_ok(objset: &ObjectSet) -> Result<(), FsError> {
    let master = objset.dnode(MASTER_OBJECT)?;
    if master.is_free() || master.object_type != ObjectType::FsMaster {
        return Err(FsError::Corrupt("no master node".into()));
    }
    let bonus = &master.bonus;
    let magic = bonus
        .get(..8)
        .map(|raw| u64::from_le_bytes(raw.try_into().unwrap_or([0; 8])));
    let version = bonus
        .get(8..12)
        .map(|raw| u32::from_le_bytes(raw.try_into().unwrap_or([0; 4])));
    if magic != Some(MASTER_MAGIC) || version != Some(MASTER_VERSION) {
        return Err(FsError::Corrupt(format!(
            "master node of an unknown format (version {version:?})"
        )));
    }
    Ok(())
}

fn not_found_if_missing(err: ObjectError) -> FsError {
    match err {
        ObjectError::NoSuchObject(_) => FsError::NotFound,
        other => FsError::Object(other),
    }
}

fn check_recordsize(bytes: u32) -> Result<(), FsError> {
    if !bytes.is_power_of_two() || !(512..=1 << 20).contains(&bytes) {
        return Err(FsError::Invalid(format!(
            "recordsize {bytes} (a power of two from 512 B to 1 MiB)"
        )));
    }
    Ok(())
}

/// cairn-fs's on-disk encodings that need no object set: for `tests/format_doc.rs` and the fuzz
/// cases in `cairn-fuzz-cases`, and the ones the filesystem itself uses (entry values, the
/// master node), so that what is checked is what is written.
#[doc(hidden)]
pub mod raw {
    use super::{
        DELETE_QUEUE_OBJECT, FileKind, FsError, MASTER_MAGIC, MASTER_VERSION, ROOT_OBJECT,
    };
    pub use crate::xattr::indirect_object;
    pub use cairn_object::map::raw::*;

    /// The master node's bonus: magic, version, root directory, delete queue.
    pub fn master_bonus() -> Vec<u8> {
        let mut master = Vec::with_capacity(28);
        master.extend_from_slice(&MASTER_MAGIC.to_le_bytes());
        master.extend_from_slice(&MASTER_VERSION.to_le_bytes());
        master.extend_from_slice(&ROOT_OBJECT.to_le_bytes());
        master.extend_from_slice(&DELETE_QUEUE_OBJECT.to_le_bytes());
        master
    }

    /// A directory entry's value: the object, then its kind.
    pub fn encode_entry_value(object: u64, kind: FileKind) -> [u8; 9] {
        let mut value = [0u8; 9];
        value[..8].copy_from_slice(&object.to_le_bytes());
        value[8] = kind as u8;
        value
    }

    /// A directory entry's value, checked (a non-zero object of a known kind).
    pub fn decode_entry_value(value: &[u8]) -> Result<(u64, FileKind), FsError> {
        let (object, kind) = match value {
            [o0, o1, o2, o3, o4, o5, o6, o7, kind] => (
                u64::from_le_bytes([*o0, *o1, *o2, *o3, *o4, *o5, *o6, *o7]),
                FileKind::from_u8(*kind),
            ),
            _ => (0, None),
        };
        match kind {
            Some(kind) if object != 0 => Ok((object, kind)),
            _ => Err(FsError::Corrupt("a directory entry's value".into())),
        }
    }
}
