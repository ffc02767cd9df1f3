//! # cairn-fs: POSIX filesystem datasets over object sets (ZFS's ZPL)
//!
//! A filesystem is one object set. Every inode is an object whose dnode bonus holds its
//! attributes (`attrs`), so `stat` reads one dnode; a directory's entries are a hashed map in
//! its own object (`dirmap`); a file's bytes are the object's blocks. This crate knows nothing
//! of FUSE or NFS: front ends (the FUSE adapter in `cairn-frontend`) call `Filesystem` with
//! object numbers and names.
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
//! records. So while a file's block is smaller than `recordsize`, all its data sits in block 0.
//! A write covering part of a block reads the block first (read-modify-write); a block that
//! becomes all zeros is a hole. Truncation frees whole blocks past the end and zeroes the tail
//! of the last one.
//!
//! ## Changes, locks, durability
//! Every change joins the open txg under one `TxgHold` (`throttle` first), so a change is
//! atomic with respect to txg syncs: a crash shows it whole or not at all. Objects are locked
//! through a table of striped locks; an operation locks every object it changes in stripe
//! order (so two operations cannot deadlock), and directory renames also take the rename lock
//! (the loop check walks `parent` links). `fsync` waits for the txg holding the file's changes
//! to sync (the intent log for files is the next step; see Known gaps).
//!
//! ## Known gaps
//! No intent log yet: `fsync` costs a txg sync (the next step: namespace and data records in
//! the dataset's log, replayed at import, so fsync costs one log write as for volumes).
//! Partial-block writes read the old block first. No quotas or reservations. Extended
//! attribute values are at most `dirmap::VALUE_BYTES_MAX` bytes (E2BIG beyond); POSIX ACLs are
//! stored as any attribute but not enforced. No file locks beyond what the kernel keeps.

pub mod attrs;
pub mod check;
pub mod dirmap;

use crate::attrs::{FileKind, InodeAttrs, Timestamp};
use crate::dirmap::{DirMap, MAP_BLOCK_BYTES};
use bytes::Bytes;
use cairn_device::ErrorClass;
use cairn_format::{BLOCK_SIZE_GRANULE, ObjectType};
use cairn_object::{ObjectError, ObjectSet, is_all_zero};
use cairn_pool::txg::{TxgEngine, TxgError, TxgHold};
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
const MASTER_MAGIC: u64 = u64::from_le_bytes(*b"CAIRNFS\0");
const FORMAT_VERSION: u32 = 1;
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

    fn add_dirty(&self, bytes: u64) {
        if let Some(hold) = self.hold {
            hold.add_dirty(bytes);
        }
    }
}

/// What went wrong, with the errno a front end answers.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDirectory,
    #[error("is a directory")]
    IsDirectory,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name too long")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    TooLarge,
    #[error("read-only filesystem")]
    ReadOnly,
    #[error("no such extended attribute")]
    NoAttribute,
    #[error("value too large: {0}")]
    ValueTooLarge(String),
    #[error("no space: {0}")]
    NoSpace(String),
    #[error("corrupt filesystem metadata: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Object(#[from] ObjectError),
    #[error(transparent)]
    Txg(#[from] TxgError),
}

impl FsError {
    /// The errno a POSIX front end answers with.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDirectory => libc::ENOTDIR,
            FsError::IsDirectory => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::TooLarge => libc::EFBIG,
            FsError::ReadOnly => libc::EROFS,
            FsError::NoAttribute => libc::ENODATA,
            FsError::ValueTooLarge(_) => libc::E2BIG,
            FsError::NoSpace(_) => libc::ENOSPC,
            FsError::Corrupt(_) => libc::EIO,
            FsError::Object(err) => class_errno(err.class()),
            FsError::Txg(err) => class_errno(err.class()),
        }
    }
}

fn class_errno(class: ErrorClass) -> i32 {
    match class {
        ErrorClass::NoSpace => libc::ENOSPC,
        ErrorClass::ReadOnly => libc::EROFS,
        ErrorClass::Invalid => libc::EINVAL,
        _ => libc::EIO,
    }
}

/// Asks the pool whether `bytes` more may be dirtied (it may sync to find room); the error
/// explains why not. Deletes never ask: they must work on a full pool.
pub type SpaceCheck = Arc<dyn Fn(u64) -> Result<(), String> + Send + Sync>;

/// What a namespace change may add to the pool, metadata copies included (a dnode block and
/// a few directory blocks, two copies each): asked of the space check before it starts.
const NAMESPACE_CHANGE_BYTES: u64 = 64 << 10;

/// How a filesystem behaves (its dataset properties).
#[derive(Debug, Clone)]
pub struct FsConfig {
    /// Block size of files larger than one block (a power of two, 512 B to 1 MiB).
    pub recordsize_bytes: u32,
    pub readonly: bool,
}

impl Default for FsConfig {
    fn default() -> FsConfig {
        FsConfig {
            recordsize_bytes: 128 << 10,
            readonly: false,
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
#[derive(Debug, Clone, Copy, Default)]
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
    dirty_txg: Mutex<HashMap<u64, u64>>,
    space_check: Option<SpaceCheck>,
    stats: FsStats,
}

fn encode_entry_value(object: u64, kind: FileKind) -> [u8; 9] {
    let mut value = [0u8; 9];
    value[..8].copy_from_slice(&object.to_le_bytes());
    value[8] = kind as u8;
    value
}

fn decode_entry_value(value: &[u8]) -> Result<(u64, FileKind), FsError> {
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

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > dirmap::NAME_BYTES_MAX {
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
        let mut master = Vec::with_capacity(28);
        master.extend_from_slice(&MASTER_MAGIC.to_le_bytes());
        master.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        master.extend_from_slice(&ROOT_OBJECT.to_le_bytes());
        master.extend_from_slice(&DELETE_QUEUE_OBJECT.to_le_bytes());
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
            DirMap::new(objset, object)
                .create(tx, object.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ txg)?;
        }
        Ok(())
    }

    /// Opens the filesystem in `objset` and frees what its delete queue holds (inodes whose
    /// last name went away while open, before a crash).
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
            dirty_txg: Mutex::new(HashMap::new()),
            space_check: None,
            stats: FsStats::default(),
        };
        if !fs.config.read().readonly {
            fs.drain_delete_queue()?;
        }
        Ok(fs)
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

    /// Fails with `NoSpace` when `bytes` more would not fit the pool.
    fn check_space(&self, bytes: u64) -> Result<(), FsError> {
        match &self.space_check {
            Some(check) => check(bytes).map_err(FsError::NoSpace),
            None => Ok(()),
        }
    }

    pub fn objset(&self) -> &Arc<ObjectSet> {
        &self.objset
    }

    pub fn stats(&self) -> &FsStats {
        &self.stats
    }

    pub fn root(&self) -> u64 {
        ROOT_OBJECT
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
        let dnode = self.objset.dnode(object).map_err(not_found_if_missing)?;
        if dnode.is_free()
            || !matches!(
                dnode.object_type,
                ObjectType::FileData | ObjectType::Directory
            )
            || object <= DELETE_QUEUE_OBJECT && object != ROOT_OBJECT
        {
            return Err(FsError::NotFound);
        }
        InodeAttrs::decode(object, &dnode.bonus)
    }

    /// The inode `name` in directory `dir` names.
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<(u64, InodeAttrs), FsError> {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        if name.len() > dirmap::NAME_BYTES_MAX {
            return Err(FsError::NameTooLong);
        }
        let dir_attrs = self.getattr(dir)?;
        if dir_attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        let object = match name {
            b"." => dir,
            b".." => dir_attrs.parent,
            _ => {
                let _guard = self.stripe(dir).read();
                let entry = DirMap::new(&self.objset, dir)
                    .get(name)?
                    .ok_or(FsError::NotFound)?;
                decode_entry_value(&entry.value)?.0
            }
        };
        Ok((object, self.getattr(object)?))
    }

    /// Entries of directory `dir` after `cookie` (0: from the start, with `.` and `..`), until
    /// `visit` returns false.
    pub fn readdir(
        &self,
        dir: u64,
        cookie: u64,
        mut visit: impl FnMut(&DirEntry) -> bool,
    ) -> Result<(), FsError> {
        let attrs = self.getattr(dir)?;
        if attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        if cookie < 1
            && !visit(&DirEntry {
                name: b".".to_vec(),
                object: dir,
                kind: FileKind::Directory,
                cookie: 1,
            })
        {
            return Ok(());
        }
        if cookie < 2
            && !visit(&DirEntry {
                name: b"..".to_vec(),
                object: attrs.parent,
                kind: FileKind::Directory,
                cookie: 2,
            })
        {
            return Ok(());
        }
        let start_key = cookie.saturating_sub(COOKIE_FIRST_ENTRY - 1);
        let _guard = self.stripe(dir).read();
        let mut failure = None;
        DirMap::new(&self.objset, dir).for_each_from(
            start_key,
            |entry| match decode_entry_value(&entry.value) {
                Ok((object, kind)) => visit(&DirEntry {
                    name: entry.name.clone(),
                    object,
                    kind,
                    cookie: entry.key + COOKIE_FIRST_ENTRY,
                }),
                Err(err) => {
                    failure = Some(err);
                    false
                }
            },
        )?;
        failure.map_or(Ok(()), Err)
    }

    /// Reads up to `len` bytes of file `object` from `offset` (short at its end).
    pub fn read(&self, object: u64, offset: u64, len: usize) -> Result<Vec<u8>, FsError> {
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        match attrs.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(FsError::IsDirectory),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        if offset >= attrs.size {
            return Ok(Vec::new());
        }
        let end = attrs.size.min(offset.saturating_add(len as u64));
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut position = offset;
        while position < end {
            let blkid = position / block_bytes;
            let within = (position % block_bytes) as usize;
            let take = ((block_bytes - within as u64).min(end - position)) as usize;
            match self.objset.read_block(object, blkid)? {
                Some(block) => out.extend_from_slice(&block[within..within + take]),
                None => out.resize(out.len() + take, 0),
            }
            position += take as u64;
        }
        self.stats
            .read_bytes
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok(out)
    }

    /// The target of symlink `object`.
    pub fn readlink(&self, object: u64) -> Result<Vec<u8>, FsError> {
        let attrs = self.getattr(object)?;
        if attrs.kind != FileKind::Symlink {
            return Err(FsError::Invalid("not a symlink".into()));
        }
        let block = self.objset.read_block(object, 0)?.unwrap_or_default();
        let len = (attrs.size as usize).min(block.len());
        Ok(block[..len].to_vec())
    }

    /// Space for `statfs`, given the pool's own figures.
    pub fn space(&self, pool_total_bytes: u64, pool_available_bytes: u64) -> FsSpace {
        FsSpace {
            total_bytes: pool_total_bytes,
            available_bytes: pool_available_bytes,
            used_objects: self.next_object.load(Ordering::Relaxed),
        }
    }

    // ----- namespace changes -----

    /// Creates `name` in directory `dir`: a file, device, fifo or socket (`mkdir` and
    /// `symlink` have their own calls).
    pub fn create(
        &self,
        dir: u64,
        name: &[u8],
        new: NewInode,
    ) -> Result<(u64, InodeAttrs), FsError> {
        if matches!(new.kind, FileKind::Directory | FileKind::Symlink) {
            return Err(FsError::Invalid(
                "create makes files, devices, fifos and sockets".into(),
            ));
        }
        self.make(dir, name, new, &[])
    }

    pub fn mkdir(
        &self,
        dir: u64,
        name: &[u8],
        new: NewInode,
    ) -> Result<(u64, InodeAttrs), FsError> {
        self.make(
            dir,
            name,
            NewInode {
                kind: FileKind::Directory,
                ..new
            },
            &[],
        )
    }

    pub fn symlink(
        &self,
        dir: u64,
        name: &[u8],
        target: &[u8],
        new: NewInode,
    ) -> Result<(u64, InodeAttrs), FsError> {
        if target.is_empty() || target.len() > SYMLINK_BYTES_MAX {
            return Err(if target.is_empty() {
                FsError::NotFound
            } else {
                FsError::NameTooLong
            });
        }
        self.make(
            dir,
            name,
            NewInode {
                kind: FileKind::Symlink,
                mode: 0o777,
                ..new
            },
            target,
        )
    }

    fn make(
        &self,
        dir: u64,
        name: &[u8],
        new: NewInode,
        symlink_target: &[u8],
    ) -> Result<(u64, InodeAttrs), FsError> {
        check_name(name)?;
        self.check_writable()?;
        self.check_space(NAMESPACE_CHANGE_BYTES + symlink_target.len() as u64)?;
        let object = self.next_object.fetch_add(1, Ordering::Relaxed);
        let (hold, _guards) = self.hold_locked(&[dir, object], 3 * u64::from(MAP_BLOCK_BYTES))?;
        let txg = hold.txg();
        let mut dir_attrs = self.getattr(dir)?;
        if dir_attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        if dir_attrs.links == 0 {
            // A directory removed while a process still had it as its working directory.
            return Err(FsError::NotFound);
        }
        let map = DirMap::new(&self.objset, dir);
        if map.get(name)?.is_some() {
            return Err(FsError::Exists);
        }
        let is_dir = new.kind == FileKind::Directory;
        if is_dir && dir_attrs.links >= u64::from(u32::MAX) {
            return Err(FsError::TooManyLinks);
        }
        let now = Timestamp::now();
        let attrs = InodeAttrs {
            kind: new.kind,
            mode: new.mode & 0o7777,
            uid: new.uid,
            gid: new.gid,
            links: if is_dir { 2 } else { 1 },
            size: symlink_target.len() as u64,
            atime: now,
            mtime: now,
            ctime: now,
            crtime: now,
            generation: txg,
            parent: dir,
            rdev: new.rdev,
            xattr_object: 0,
        };
        let (object_type, block_bytes) = match new.kind {
            FileKind::Directory => (ObjectType::Directory, MAP_BLOCK_BYTES),
            FileKind::Symlink => (
                ObjectType::FileData,
                small_block_bytes(symlink_target.len() as u64, u32::MAX),
            ),
            _ => (ObjectType::FileData, BLOCK_SIZE_GRANULE),
        };
        self.objset.create_object_with_bonus(
            txg,
            object,
            object_type,
            block_bytes,
            attrs.encode(),
        )?;
        if is_dir {
            DirMap::new(&self.objset, object)
                .create(Tx::held(&hold), object ^ txg.rotate_left(32))?;
        }
        if !symlink_target.is_empty() {
            let mut block = vec![0u8; block_bytes as usize];
            block[..symlink_target.len()].copy_from_slice(symlink_target);
            self.write_block(&hold, object, 0, block);
        }
        map.insert(Tx::held(&hold), name, &encode_entry_value(object, new.kind))?;
        dir_attrs.size += 1;
        if is_dir {
            dir_attrs.links += 1;
        }
        dir_attrs.mtime = now;
        dir_attrs.ctime = now;
        self.put_attrs(&hold, dir, &dir_attrs)?;
        self.note_dirty(&[dir, object], txg);
        self.stats.creates.fetch_add(1, Ordering::Relaxed);
        Ok((object, attrs))
    }

    /// A new name `name` in `dir` for inode `object` (not a directory).
    pub fn link(&self, object: u64, dir: u64, name: &[u8]) -> Result<InodeAttrs, FsError> {
        check_name(name)?;
        self.check_writable()?;
        self.check_space(NAMESPACE_CHANGE_BYTES)?;
        let (hold, _guards) = self.hold_locked(&[dir, object], 2 * u64::from(MAP_BLOCK_BYTES))?;
        let mut attrs = self.getattr(object)?;
        if attrs.kind == FileKind::Directory {
            return Err(FsError::Invalid("hard links to directories".into()));
        }
        if attrs.links == 0 {
            return Err(FsError::NotFound);
        }
        if attrs.links >= u64::from(u32::MAX) {
            return Err(FsError::TooManyLinks);
        }
        let mut dir_attrs = self.getattr(dir)?;
        if dir_attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        if dir_attrs.links == 0 {
            return Err(FsError::NotFound);
        }
        DirMap::new(&self.objset, dir).insert(
            Tx::held(&hold),
            name,
            &encode_entry_value(object, attrs.kind),
        )?;
        let now = Timestamp::now();
        attrs.links += 1;
        attrs.ctime = now;
        self.put_attrs(&hold, object, &attrs)?;
        dir_attrs.size += 1;
        dir_attrs.mtime = now;
        dir_attrs.ctime = now;
        self.put_attrs(&hold, dir, &dir_attrs)?;
        self.note_dirty(&[dir, object], hold.txg());
        Ok(attrs)
    }

    /// Removes `name` (not a directory) from `dir`.
    pub fn unlink(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, false)
    }

    /// Removes the empty directory `name` from `dir`.
    pub fn rmdir(&self, dir: u64, name: &[u8]) -> Result<(), FsError> {
        self.remove(dir, name, true)
    }

    fn remove(&self, dir: u64, name: &[u8], want_dir: bool) -> Result<(), FsError> {
        if name == b"." {
            return Err(FsError::Invalid("removing '.'".into()));
        }
        if name == b".." {
            return Err(FsError::NotEmpty);
        }
        check_name(name)?;
        self.check_writable()?;
        loop {
            // The child is found before locking it; if it changed meanwhile, look again.
            let (child, _) = self.lookup(dir, name)?;
            let (hold, _guards) =
                self.hold_locked(&[dir, child], 2 * u64::from(MAP_BLOCK_BYTES))?;
            let map = DirMap::new(&self.objset, dir);
            let Some(entry) = map.get(name)? else {
                return Err(FsError::NotFound);
            };
            let (object, kind) = decode_entry_value(&entry.value)?;
            if object != child {
                continue;
            }
            let mut attrs = self.getattr(object)?;
            match (want_dir, kind == FileKind::Directory) {
                (true, false) => return Err(FsError::NotDirectory),
                (false, true) => return Err(FsError::IsDirectory),
                (true, true) if !DirMap::new(&self.objset, object).is_empty()? => {
                    return Err(FsError::NotEmpty);
                }
                _ => {}
            }
            map.remove(Tx::held(&hold), name)?;
            let now = Timestamp::now();
            let mut dir_attrs = self.getattr(dir)?;
            dir_attrs.size = dir_attrs.size.saturating_sub(1);
            if want_dir {
                dir_attrs.links = dir_attrs.links.saturating_sub(1);
            }
            dir_attrs.mtime = now;
            dir_attrs.ctime = now;
            self.put_attrs(&hold, dir, &dir_attrs)?;
            attrs.links = if want_dir {
                0
            } else {
                attrs.links.saturating_sub(1)
            };
            attrs.ctime = now;
            self.drop_link(&hold, object, attrs)?;
            self.note_dirty(&[dir, object], hold.txg());
            self.stats.removes.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
    }

    /// Stores `attrs` after a link went away: an inode with no links left is freed now, or
    /// queued for deletion while it is open.
    fn drop_link(&self, hold: &TxgHold, object: u64, attrs: InodeAttrs) -> Result<(), FsError> {
        if attrs.links > 0 {
            return self.put_attrs(hold, object, &attrs);
        }
        if self.opens.lock().get(&object).copied().unwrap_or(0) > 0 {
            self.put_attrs(hold, object, &attrs)?;
            let name = object.to_string();
            match DirMap::new(&self.objset, DELETE_QUEUE_OBJECT).insert(
                Tx::held(hold),
                name.as_bytes(),
                &[],
            ) {
                Ok(_) | Err(FsError::Exists) => Ok(()),
                Err(err) => Err(err),
            }
        } else {
            self.free_inode(hold, object, &attrs);
            Ok(())
        }
    }

    fn free_inode(&self, hold: &TxgHold, object: u64, attrs: &InodeAttrs) {
        if attrs.xattr_object != 0 {
            self.objset.free_object(hold.txg(), attrs.xattr_object);
        }
        self.objset.free_object(hold.txg(), object);
        self.dirty_txg.lock().remove(&object);
    }

    /// Renames `old_dir/old_name` to `new_dir/new_name`.
    pub fn rename(
        &self,
        old_dir: u64,
        old_name: &[u8],
        new_dir: u64,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<(), FsError> {
        check_name(old_name)?;
        check_name(new_name)?;
        self.check_writable()?;
        // Directory moves are serialised: the loop check must see a stable tree.
        let _rename = self.rename_lock.lock();
        let (source, _) = self.lookup(old_dir, old_name)?;
        let target = match self.lookup(new_dir, new_name) {
            Ok((object, _)) => Some(object),
            Err(FsError::NotFound) => None,
            Err(err) => return Err(err),
        };
        let mut objects = vec![old_dir, new_dir, source];
        objects.extend(target);
        let (hold, _guards) = self.hold_locked(&objects, 4 * u64::from(MAP_BLOCK_BYTES))?;
        let old_map = DirMap::new(&self.objset, old_dir);
        let new_map = DirMap::new(&self.objset, new_dir);
        // Looked up again under the locks: only renames change names without the rename
        // lock... no: creates and unlinks do too, so check that nothing moved.
        let source_entry = old_map.get(old_name)?.ok_or(FsError::NotFound)?;
        let (source_now, source_kind) = decode_entry_value(&source_entry.value)?;
        let target_entry = new_map.get(new_name)?;
        let target_now = target_entry
            .as_ref()
            .map(|entry| decode_entry_value(&entry.value))
            .transpose()?;
        if source_now != source || target_now.map(|(object, _)| object) != target {
            drop(_guards);
            drop(hold);
            drop(_rename);
            return self.rename(old_dir, old_name, new_dir, new_name, mode);
        }
        let new_dir_attrs = self.getattr(new_dir)?;
        if new_dir_attrs.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        if source_kind == FileKind::Directory && old_dir != new_dir {
            self.check_not_ancestor(source, new_dir)?;
        }
        if let (RenameMode::Exchange, Some((target_object, FileKind::Directory))) =
            (mode, target_now)
            && old_dir != new_dir
        {
            self.check_not_ancestor(target_object, old_dir)?;
        }
        if source == target.unwrap_or(0) {
            // Two names of one inode: POSIX says do nothing.
            return Ok(());
        }
        let now = Timestamp::now();
        match (mode, target_now) {
            (RenameMode::Exchange, None) => return Err(FsError::NotFound),
            (RenameMode::NoReplace, Some(_)) => return Err(FsError::Exists),
            (RenameMode::Exchange, Some((target_object, target_kind))) => {
                old_map.set_value(
                    Tx::held(&hold),
                    old_name,
                    &encode_entry_value(target_object, target_kind),
                )?;
                new_map.set_value(
                    Tx::held(&hold),
                    new_name,
                    &encode_entry_value(source, source_kind),
                )?;
                if old_dir != new_dir {
                    let source_is_dir = source_kind == FileKind::Directory;
                    let target_is_dir = target_kind == FileKind::Directory;
                    self.reparent(&hold, source, new_dir, now)?;
                    self.reparent(&hold, target_object, old_dir, now)?;
                    if source_is_dir != target_is_dir {
                        let (gains, loses) = if source_is_dir {
                            (new_dir, old_dir)
                        } else {
                            (old_dir, new_dir)
                        };
                        self.adjust_dir(&hold, gains, 0, 1, now)?;
                        self.adjust_dir(&hold, loses, 0, -1, now)?;
                    }
                } else {
                    self.touch_ctime(&hold, source, now)?;
                    self.touch_ctime(&hold, target_object, now)?;
                }
                self.adjust_dir(&hold, old_dir, 0, 0, now)?;
                self.adjust_dir(&hold, new_dir, 0, 0, now)?;
            }
            (_, target_now) => {
                if let Some((target_object, target_kind)) = target_now {
                    let mut target_attrs = self.getattr(target_object)?;
                    match (
                        source_kind == FileKind::Directory,
                        target_kind == FileKind::Directory,
                    ) {
                        (true, false) => return Err(FsError::NotDirectory),
                        (false, true) => return Err(FsError::IsDirectory),
                        (true, true) if !DirMap::new(&self.objset, target_object).is_empty()? => {
                            return Err(FsError::NotEmpty);
                        }
                        _ => {}
                    }
                    new_map.remove(Tx::held(&hold), new_name)?;
                    let target_is_dir = target_kind == FileKind::Directory;
                    self.adjust_dir(&hold, new_dir, -1, if target_is_dir { -1 } else { 0 }, now)?;
                    target_attrs.links = if target_is_dir {
                        0
                    } else {
                        target_attrs.links.saturating_sub(1)
                    };
                    target_attrs.ctime = now;
                    self.drop_link(&hold, target_object, target_attrs)?;
                }
                old_map.remove(Tx::held(&hold), old_name)?;
                new_map.insert(
                    Tx::held(&hold),
                    new_name,
                    &encode_entry_value(source, source_kind),
                )?;
                let is_dir = source_kind == FileKind::Directory;
                self.adjust_dir(&hold, old_dir, -1, if is_dir { -1 } else { 0 }, now)?;
                self.adjust_dir(&hold, new_dir, 1, if is_dir { 1 } else { 0 }, now)?;
                if old_dir != new_dir {
                    self.reparent(&hold, source, new_dir, now)?;
                } else {
                    self.touch_ctime(&hold, source, now)?;
                }
            }
        }
        self.note_dirty(&objects, hold.txg());
        self.stats.renames.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Fails with `Invalid` when `dir` is `ancestor` or lies beneath it (a directory cannot
    /// move into itself).
    fn check_not_ancestor(&self, ancestor: u64, dir: u64) -> Result<(), FsError> {
        let mut at = dir;
        for _ in 0..(1 << 16) {
            if at == ancestor {
                return Err(FsError::Invalid(
                    "a directory cannot move beneath itself".into(),
                ));
            }
            if at == ROOT_OBJECT {
                return Ok(());
            }
            at = self.getattr(at)?.parent;
        }
        Err(FsError::Corrupt(format!("the parents of {dir} loop")))
    }

    fn adjust_dir(
        &self,
        hold: &TxgHold,
        dir: u64,
        entries: i64,
        links: i64,
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut attrs = self.getattr(dir)?;
        attrs.size = attrs.size.saturating_add_signed(entries);
        attrs.links = attrs.links.saturating_add_signed(links);
        attrs.mtime = now;
        attrs.ctime = now;
        self.put_attrs(hold, dir, &attrs)
    }

    fn reparent(
        &self,
        hold: &TxgHold,
        object: u64,
        parent: u64,
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut attrs = self.getattr(object)?;
        attrs.parent = parent;
        attrs.ctime = now;
        self.put_attrs(hold, object, &attrs)
    }

    fn touch_ctime(&self, hold: &TxgHold, object: u64, now: Timestamp) -> Result<(), FsError> {
        let mut attrs = self.getattr(object)?;
        attrs.ctime = now;
        self.put_attrs(hold, object, &attrs)
    }

    // ----- attributes and data -----

    /// Changes attributes; a size change truncates or extends the file.
    pub fn setattr(&self, object: u64, changes: SetAttrs) -> Result<InodeAttrs, FsError> {
        self.check_writable()?;
        let (hold, _guards) = self.hold_locked(&[object], 0)?;
        let mut attrs = self.getattr(object)?;
        let now = Timestamp::now();
        if let Some(size) = changes.size {
            match attrs.kind {
                FileKind::File => {}
                FileKind::Directory => return Err(FsError::IsDirectory),
                _ => return Err(FsError::Invalid("truncating a special file".into())),
            }
            if size != attrs.size {
                self.resize(&hold, object, attrs.size, size)?;
                attrs.size = size;
            }
            attrs.mtime = now;
            attrs.ctime = now;
        }
        if let Some(mode) = changes.mode {
            attrs.mode = mode & 0o7777;
            attrs.ctime = now;
        }
        if let Some(uid) = changes.uid {
            attrs.uid = uid;
            attrs.ctime = now;
        }
        if let Some(gid) = changes.gid {
            attrs.gid = gid;
            attrs.ctime = now;
        }
        if let Some(atime) = changes.atime {
            attrs.atime = atime;
            attrs.ctime = now;
        }
        if let Some(mtime) = changes.mtime {
            attrs.mtime = mtime;
            attrs.ctime = now;
        }
        if let Some(ctime) = changes.ctime {
            attrs.ctime = ctime;
        }
        self.put_attrs(&hold, object, &attrs)?;
        self.note_dirty(&[object], hold.txg());
        Ok(attrs)
    }

    /// Writes `data` into file `object` at `offset`; returns the new attributes.
    pub fn write(&self, object: u64, offset: u64, data: &[u8]) -> Result<InodeAttrs, FsError> {
        self.check_writable()?;
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or(FsError::TooLarge)?;
        // Data, its indirect blocks and the dnode's, with room to spare.
        self.check_space(data.len() as u64 + data.len() as u64 / 8 + NAMESPACE_CHANGE_BYTES)?;
        let (hold, _guards) = self.hold_locked(&[object], data.len() as u64)?;
        let mut attrs = self.getattr(object)?;
        match attrs.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(FsError::IsDirectory),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        if data.is_empty() {
            return Ok(attrs);
        }
        let block_bytes = self.grow_block(&hold, object, attrs.size, end)?;
        let mut position = offset;
        let mut taken = 0usize;
        while position < end {
            let blkid = position / block_bytes;
            let within = (position % block_bytes) as usize;
            let take = ((block_bytes - within as u64).min(end - position)) as usize;
            let piece = &data[taken..taken + take];
            let block = if take as u64 == block_bytes {
                piece.to_vec()
            } else {
                let mut block = match self.objset.read_block(object, blkid)? {
                    Some(old) => old.to_vec(),
                    None => vec![0u8; block_bytes as usize],
                };
                block[within..within + take].copy_from_slice(piece);
                block
            };
            self.write_block(&hold, object, blkid, block);
            position += take as u64;
            taken += take;
        }
        let now = Timestamp::now();
        attrs.size = attrs.size.max(end);
        attrs.mtime = now;
        attrs.ctime = now;
        // Writing by someone other than the owner would clear set-id bits; the kernel asks
        // for that through setattr (FUSE's handle_killpriv is off).
        self.put_attrs(&hold, object, &attrs)?;
        self.note_dirty(&[object], hold.txg());
        self.stats.writes.fetch_add(1, Ordering::Relaxed);
        self.stats
            .write_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(attrs)
    }

    /// Makes the file's block big enough for a file of `end` bytes (a single small block
    /// grows up to `recordsize`); returns the block size.
    fn grow_block(&self, hold: &TxgHold, object: u64, size: u64, end: u64) -> Result<u64, FsError> {
        let recordsize = self.config.read().recordsize_bytes;
        let dnode = self.objset.dnode(object)?;
        let current = dnode.data_block_size;
        if current >= recordsize || end <= u64::from(current) {
            return Ok(u64::from(current));
        }
        let wanted = if end > u64::from(recordsize) {
            recordsize
        } else {
            small_block_bytes(end.max(size), recordsize)
        };
        if wanted <= current {
            return Ok(u64::from(current));
        }
        let old = self.objset.read_block(object, 0)?;
        self.objset.set_block_size(hold.txg(), object, wanted)?;
        if let Some(old) = old {
            let mut block = vec![0u8; wanted as usize];
            block[..old.len()].copy_from_slice(&old);
            self.write_block(hold, object, 0, block);
        }
        Ok(u64::from(wanted))
    }

    /// Truncates or extends a file's contents from `old_size` to `new_size`.
    fn resize(
        &self,
        hold: &TxgHold,
        object: u64,
        old_size: u64,
        new_size: u64,
    ) -> Result<(), FsError> {
        if new_size > i64::MAX as u64 {
            return Err(FsError::TooLarge);
        }
        if new_size >= old_size {
            // Extending is a hole; a single small block grows only when written.
            return Ok(());
        }
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        let first_free = new_size.div_ceil(block_bytes);
        self.objset
            .free_blocks_from(hold.txg(), object, first_free)?;
        let tail = (new_size % block_bytes) as usize;
        if tail > 0 {
            let blkid = new_size / block_bytes;
            if let Some(old) = self.objset.read_block(object, blkid)? {
                let mut block = old.to_vec();
                block[tail..].fill(0);
                self.write_block(hold, object, blkid, block);
            }
        }
        Ok(())
    }

    fn write_block(&self, hold: &TxgHold, object: u64, blkid: u64, block: Vec<u8>) {
        let bytes = block.len() as u64;
        let newly_dirty = if is_all_zero(&block) {
            self.objset.free_block(hold.txg(), object, blkid)
        } else {
            self.objset
                .write_block(hold.txg(), object, blkid, Bytes::from(block))
        };
        if newly_dirty {
            hold.add_dirty(bytes);
        }
    }

    fn put_attrs(&self, hold: &TxgHold, object: u64, attrs: &InodeAttrs) -> Result<(), FsError> {
        self.objset.set_bonus(hold.txg(), object, attrs.encode())?;
        Ok(())
    }

    // ----- extended attributes -----

    /// The value of extended attribute `name` of inode `object`.
    pub fn getxattr(&self, object: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        if attrs.xattr_object == 0 {
            return Err(FsError::NoAttribute);
        }
        DirMap::new(&self.objset, attrs.xattr_object)
            .get(name)?
            .map(|entry| entry.value)
            .ok_or(FsError::NoAttribute)
    }

    /// The names of inode `object`'s extended attributes.
    pub fn listxattr(&self, object: u64) -> Result<Vec<Vec<u8>>, FsError> {
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        let mut names = Vec::new();
        if attrs.xattr_object != 0 {
            DirMap::new(&self.objset, attrs.xattr_object).for_each_from(0, |entry| {
                names.push(entry.name.clone());
                true
            })?;
        }
        Ok(names)
    }

    /// Sets extended attribute `name` of inode `object`.
    pub fn setxattr(
        &self,
        object: u64,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
    ) -> Result<(), FsError> {
        if name.is_empty() || name.len() > dirmap::NAME_BYTES_MAX {
            return Err(FsError::NameTooLong);
        }
        if value.len() > dirmap::VALUE_BYTES_MAX {
            return Err(FsError::ValueTooLarge(format!(
                "an extended attribute of {} bytes (at most {})",
                value.len(),
                dirmap::VALUE_BYTES_MAX
            )));
        }
        self.check_writable()?;
        self.check_space(NAMESPACE_CHANGE_BYTES)?;
        let new_map = self.next_object.fetch_add(1, Ordering::Relaxed);
        let (hold, _guards) = self.hold_locked(&[object], u64::from(MAP_BLOCK_BYTES))?;
        let mut attrs = self.getattr(object)?;
        if attrs.xattr_object == 0 {
            if mode == XattrMode::Replace {
                return Err(FsError::NoAttribute);
            }
            self.objset
                .create_object(hold.txg(), new_map, ObjectType::Xattrs, MAP_BLOCK_BYTES, 1);
            DirMap::new(&self.objset, new_map).create(Tx::held(&hold), new_map ^ hold.txg())?;
            attrs.xattr_object = new_map;
        }
        let map = DirMap::new(&self.objset, attrs.xattr_object);
        match (map.get(name)?.is_some(), mode) {
            (true, XattrMode::Create) => return Err(FsError::Exists),
            (false, XattrMode::Replace) => return Err(FsError::NoAttribute),
            (true, _) => map.set_value(Tx::held(&hold), name, value)?,
            (false, _) => {
                map.insert(Tx::held(&hold), name, value)?;
            }
        }
        attrs.ctime = Timestamp::now();
        self.put_attrs(&hold, object, &attrs)?;
        self.note_dirty(&[object], hold.txg());
        Ok(())
    }

    /// Removes extended attribute `name` of inode `object`.
    pub fn removexattr(&self, object: u64, name: &[u8]) -> Result<(), FsError> {
        self.check_writable()?;
        let (hold, _guards) = self.hold_locked(&[object], u64::from(MAP_BLOCK_BYTES))?;
        let mut attrs = self.getattr(object)?;
        if attrs.xattr_object == 0 {
            return Err(FsError::NoAttribute);
        }
        DirMap::new(&self.objset, attrs.xattr_object)
            .remove(Tx::held(&hold), name)?
            .ok_or(FsError::NoAttribute)?;
        attrs.ctime = Timestamp::now();
        self.put_attrs(&hold, object, &attrs)?;
        self.note_dirty(&[object], hold.txg());
        Ok(())
    }

    // ----- ranges: fallocate, holes -----

    /// `fallocate(2)` on file `object`.
    pub fn fallocate(
        &self,
        object: u64,
        offset: u64,
        len: u64,
        op: Fallocate,
    ) -> Result<InodeAttrs, FsError> {
        self.check_writable()?;
        let end = offset
            .checked_add(len)
            .filter(|end| *end <= i64::MAX as u64)
            .ok_or(FsError::TooLarge)?;
        if len == 0 {
            return Err(FsError::Invalid("fallocate of no bytes".into()));
        }
        let (hold, _guards) = self.hold_locked(&[object], 0)?;
        let mut attrs = self.getattr(object)?;
        match attrs.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(FsError::IsDirectory),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        let now = Timestamp::now();
        let keep_size = match op {
            Fallocate::Allocate { keep_size } => keep_size,
            Fallocate::PunchHole => true,
            Fallocate::ZeroRange { keep_size } => {
                self.zero_range(&hold, object, offset, end.min(attrs.size))?;
                keep_size
            }
        };
        if op == Fallocate::PunchHole {
            self.zero_range(&hold, object, offset, end.min(attrs.size))?;
        }
        if !keep_size && end > attrs.size {
            attrs.size = end;
        }
        if !matches!(op, Fallocate::Allocate { .. }) || !keep_size {
            attrs.mtime = now;
            attrs.ctime = now;
        }
        self.put_attrs(&hold, object, &attrs)?;
        self.note_dirty(&[object], hold.txg());
        Ok(attrs)
    }

    /// Makes `offset .. end` of a file read as zeros: whole blocks become holes, the edges of
    /// partly covered blocks are zeroed in place.
    fn zero_range(
        &self,
        hold: &TxgHold,
        object: u64,
        offset: u64,
        end: u64,
    ) -> Result<(), FsError> {
        if offset >= end {
            return Ok(());
        }
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        let mut position = offset;
        while position < end {
            let blkid = position / block_bytes;
            let within = (position % block_bytes) as usize;
            let take = (block_bytes - within as u64).min(end - position) as usize;
            if take as u64 == block_bytes {
                if self.objset.free_block(hold.txg(), object, blkid) {
                    hold.add_dirty(block_bytes);
                }
            } else if let Some(old) = self.objset.read_block(object, blkid)? {
                let mut block = old.to_vec();
                block[within..within + take].fill(0);
                self.write_block(hold, object, blkid, block);
            }
            position += take as u64;
        }
        Ok(())
    }

    /// `lseek` with SEEK_DATA (`data` true) or SEEK_HOLE from `offset`: the first offset at
    /// or after it that holds data (or is a hole; the end of the file counts as a hole).
    /// `NotFound` (ENXIO to the caller) when `offset` is at or past the end, or no data follows.
    pub fn seek_data_or_hole(&self, object: u64, offset: u64, data: bool) -> Result<u64, FsError> {
        const BLOCKS_PER_LOOK: u64 = 1 << 14;
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        if offset >= attrs.size {
            return Err(FsError::NotFound);
        }
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        let last = (attrs.size - 1) / block_bytes;
        let mut blkid = offset / block_bytes;
        while blkid <= last {
            let count = (last + 1 - blkid).min(BLOCKS_PER_LOOK);
            let map = self.objset.block_map(object, blkid, count)?;
            if let Some(index) = map.iter().position(|has_data| *has_data == data) {
                let found = (blkid + index as u64) * block_bytes;
                return Ok(found.max(offset));
            }
            blkid += count;
        }
        if data {
            Err(FsError::NotFound)
        } else {
            Ok(attrs.size)
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
        let (hold, _guards) = self.hold_locked(&[object], 0)?;
        if self.opens.lock().contains_key(&object) {
            return Ok(());
        }
        self.free_inode(&hold, object, &attrs);
        DirMap::new(&self.objset, DELETE_QUEUE_OBJECT)
            .remove(Tx::held(&hold), object.to_string().as_bytes())?;
        Ok(())
    }

    /// Makes every change of inode `object` durable.
    pub fn fsync(&self, object: u64) -> Result<(), FsError> {
        self.stats.fsyncs.fetch_add(1, Ordering::Relaxed);
        let txg = self.dirty_txg.lock().get(&object).copied();
        if let Some(txg) = txg
            && txg > self.txg.last_synced_txg()
        {
            self.txg.sync_now()?;
            self.txg.wait_synced(txg)?;
        }
        Ok(())
    }

    /// Makes every change of the filesystem durable.
    pub fn sync_all(&self) -> Result<(), FsError> {
        self.txg.sync_now()?;
        Ok(())
    }

    fn drain_delete_queue(&self) -> Result<(), FsError> {
        let queue = DirMap::new(&self.objset, DELETE_QUEUE_OBJECT);
        let mut names = Vec::new();
        queue.for_each_from(0, |entry| {
            names.push(entry.name.clone());
            true
        })?;
        if names.is_empty() {
            return Ok(());
        }
        let hold = self.txg.try_hold()?;
        for name in names {
            let object = std::str::from_utf8(&name)
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or_else(|| FsError::Corrupt("a delete queue entry".into()))?;
            if let Ok(attrs) = self.getattr(object)
                && attrs.links == 0
            {
                self.free_inode(&hold, object, &attrs);
            }
            queue.remove(Tx::held(&hold), &name)?;
        }
        Ok(())
    }

    // ----- helpers -----

    fn check_writable(&self) -> Result<(), FsError> {
        if self.config.read().readonly {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    fn stripe(&self, object: u64) -> &RwLock<()> {
        &self.stripes[(object.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % LOCK_STRIPES]
    }

    /// Throttles for `dirty_bytes`, locks the stripes of `objects` in order, and joins the
    /// open txg. Locks come before the hold, so a hold is never kept while waiting for a lock
    /// (which would hold up the txg's quiesce).
    fn hold_locked(
        &self,
        objects: &[u64],
        dirty_bytes: u64,
    ) -> Result<(TxgHold, Vec<RwLockWriteGuard<'_, ()>>), FsError> {
        self.txg.throttle(dirty_bytes);
        let mut stripes: Vec<usize> = objects
            .iter()
            .map(|object| {
                (object.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize % LOCK_STRIPES
            })
            .collect();
        stripes.sort_unstable();
        stripes.dedup();
        let guards = stripes
            .into_iter()
            .map(|stripe| self.stripes[stripe].write())
            .collect();
        let hold = self.txg.try_hold()?;
        Ok((hold, guards))
    }

    fn note_dirty(&self, objects: &[u64], txg: u64) {
        let mut dirty = self.dirty_txg.lock();
        for object in objects {
            let slot = dirty.entry(*object).or_insert(txg);
            *slot = (*slot).max(txg);
        }
        // Forget what has synced, so the map stays the size of what is dirty.
        if dirty.len() > 4096 {
            let synced = self.txg.last_synced_txg();
            dirty.retain(|_, txg| *txg > synced);
        }
    }
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
    if magic != Some(MASTER_MAGIC) || version != Some(FORMAT_VERSION) {
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
