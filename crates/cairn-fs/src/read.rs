//! Reads: lookups, directory listings, file contents and symlink targets. None of them
//! changes the filesystem beyond the access time the `atime` property asks for
//! (`touch_atime`, which joins the txg and is logged but waits for nothing). They take the
//! inode's stripe lock for reading only where a read must see one change whole.

use crate::attrs::{FileKind, InodeAttrs};
use crate::{COOKIE_FIRST_ENTRY, DirEntry, Filesystem, FsError, ReadAhead, decode_entry_value};
use cairn_object::map::{self, HashedMap};
use std::sync::atomic::Ordering;

impl Filesystem {
    /// The inode `name` in directory `dir` names.
    pub fn lookup(&self, dir: u64, name: &[u8]) -> Result<(u64, InodeAttrs), FsError> {
        self.stats.lookups.fetch_add(1, Ordering::Relaxed);
        if name.len() > map::NAME_BYTES_MAX {
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
                let entry = HashedMap::new(&self.objset, dir)
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
        HashedMap::new(&self.objset, dir).for_each_from(
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
        drop(_guard);
        if failure.is_none() {
            self.touch_atime(dir, &attrs);
        }
        failure.map_or(Ok(()), Err)
    }

    /// Reads up to `len` bytes of file `object` from `offset` (short at its end), and
    /// updates its access time as the `atime` property says. A client's read: it feeds the
    /// object set's sequential-stream detector, so a file read in order is read ahead.
    pub fn read(&self, object: u64, offset: u64, len: usize) -> Result<Vec<u8>, FsError> {
        let (data, attrs) = self.read_data(object, offset, len, ReadAhead::Hint)?;
        self.touch_atime(object, &attrs);
        Ok(data)
    }

    /// `read` without the access time (the intent log reading data back, with no read-ahead:
    /// it is not a client's stream).
    pub(crate) fn read_data(
        &self,
        object: u64,
        offset: u64,
        len: usize,
        read_ahead: ReadAhead,
    ) -> Result<(Vec<u8>, InodeAttrs), FsError> {
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        match attrs.kind {
            FileKind::File => {}
            FileKind::Directory => return Err(FsError::IsDirectory),
            _ => return Err(FsError::Invalid("not a regular file".into())),
        }
        self.stats.reads.fetch_add(1, Ordering::Relaxed);
        if offset >= attrs.size {
            return Ok((Vec::new(), attrs));
        }
        let end = attrs.size.min(offset.saturating_add(len as u64));
        let block_bytes = u64::from(self.objset.dnode(object)?.data_block_size);
        if read_ahead == ReadAhead::Hint {
            // Before the demand reads, so the blocks past this request are on their way while
            // it is served (FUSE's own read-ahead keeps only a request or two in flight).
            let first = offset / block_bytes;
            self.objset
                .note_read(object, first, end.div_ceil(block_bytes) - first);
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut position = offset;
        while position < end {
            let blkid = position / block_bytes;
            let within = (position % block_bytes) as usize;
            let take = ((block_bytes - within as u64).min(end - position)) as usize;
            self.objset
                .append_block_range(object, blkid, within..within + take, &mut out)?;
            position += take as u64;
        }
        self.stats
            .read_bytes
            .fetch_add(out.len() as u64, Ordering::Relaxed);
        Ok((out, attrs))
    }

    /// The target of symlink `object`.
    pub fn readlink(&self, object: u64) -> Result<Vec<u8>, FsError> {
        let attrs = self.getattr(object)?;
        if attrs.kind != FileKind::Symlink {
            return Err(FsError::Invalid("not a symlink".into()));
        }
        let block = self.objset.read_block(object, 0)?.unwrap_or_default();
        let len = (attrs.size as usize).min(block.len());
        self.touch_atime(object, &attrs);
        Ok(block[..len].to_vec())
    }
}
