//! Extended attributes: get, list, set and remove, and what POSIX ACLs and removals need of
//! them. As elsewhere, each changing call has a `do_*` twin that replay uses with the logged
//! times and object numbers.
//!
//! An inode's attributes live in one hashed map (`cairn_object::map`, object type `Xattrs`)
//! that its first attribute makes and that is freed with the inode. A value of at most
//! `map::VALUE_BYTES_MAX` bytes is kept in its entry, so a file's few small attributes are
//! one block. A larger value, up to the VFS's limit `XATTR_VALUE_BYTES_MAX` (64 KiB: large
//! ACLs, `rsync -X` of what other filesystems hold), is kept in an object of its own (type
//! `XattrValue`, written as a blob: its length in the bonus) and the entry holds that object's
//! number as an indirect value (`ValueKind::Indirect`, 8 bytes little-endian).
//!
//! Invariants: a value object is named by exactly one indirect entry of one inode's map;
//! the change that replaces or removes that entry frees it, and freeing an inode frees its
//! map and every value object the map names (`pool check` reports any object of either type
//! that no inode reaches). Object numbers for a new map or value object are taken before the
//! change, under the inode's lock, and logged (`FsOp::SetXattr`), so a replay makes the same
//! objects; a change refused after taking one leaves a hole in the object numbers, nothing
//! more.
//!
//! Known gaps: a value object is a blob of whole 16 KiB blocks (`ObjectSet::write_blob`),
//! and, as metadata, kept twice, so without compression a value of 1,025 bytes takes 32 KiB
//! on disk (the zeros past its end compress away when `compression` is on). Freeing an inode
//! with attributes reads its map to find value objects, one block for a few attributes.

use crate::SpaceAsk;
use crate::acl::{self, Acl};
use crate::attrs::InodeAttrs;
use crate::attrs::{FileKind, Timestamp};
use crate::log::FsOp;
use crate::{Filesystem, FsError, NAMESPACE_CHANGE_BYTES, NO_OBJECT, SetAttrs, Tx, XattrMode};
use cairn_format::ObjectType;
use cairn_object::map::{self, Entry, HashedMap, MAP_BLOCK_BYTES, ValueKind};
use cairn_pool::txg::TxgHold;
use std::sync::atomic::Ordering;

/// Largest extended attribute value (the VFS's `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_BYTES_MAX: usize = 64 * 1024;

impl Filesystem {
    /// The value of extended attribute `name` of inode `object`.
    pub fn getxattr(&self, object: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        if attrs.xattr_object == 0 {
            return Err(FsError::NoAttribute);
        }
        let entry = HashedMap::new(&self.objset, attrs.xattr_object)
            .get(name)?
            .ok_or(FsError::NoAttribute)?;
        self.xattr_value(object, entry)
    }

    /// An entry's value: itself, or the contents of the object it names.
    fn xattr_value(&self, object: u64, entry: Entry) -> Result<Vec<u8>, FsError> {
        let value_object = match entry.kind {
            ValueKind::Inline => return Ok(entry.value),
            ValueKind::Indirect => indirect_object(object, &entry)?,
        };
        let dnode = self.objset.dnode(value_object)?;
        let value = match dnode.object_type {
            ObjectType::XattrValue if !dnode.is_free() => self.objset.read_blob(value_object)?,
            _ => None,
        };
        match value {
            Some(value)
                if value.len() > map::VALUE_BYTES_MAX && value.len() <= XATTR_VALUE_BYTES_MAX =>
            {
                Ok(value)
            }
            Some(value) => Err(FsError::Corrupt(format!(
                "inode {object}: extended attribute value object {value_object} holds {} bytes",
                value.len()
            ))),
            None => Err(FsError::Corrupt(format!(
                "inode {object}: extended attribute value object {value_object} is missing"
            ))),
        }
    }

    /// The names of inode `object`'s extended attributes.
    pub fn listxattr(&self, object: u64) -> Result<Vec<Vec<u8>>, FsError> {
        let _guard = self.stripe(object).read();
        let attrs = self.getattr(object)?;
        let mut names = Vec::new();
        if attrs.xattr_object != 0 {
            HashedMap::new(&self.objset, attrs.xattr_object).for_each_from(0, |entry| {
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
        if name.is_empty() || name.len() > map::NAME_BYTES_MAX {
            return Err(FsError::NameTooLong);
        }
        if value.len() > XATTR_VALUE_BYTES_MAX {
            return Err(FsError::ValueTooLarge(format!(
                "an extended attribute of {} bytes (at most {XATTR_VALUE_BYTES_MAX})",
                value.len(),
            )));
        }
        self.check_writable()?;
        let value_bytes = value.len() as u64;
        let space = SpaceAsk::bytes(NAMESPACE_CHANGE_BYTES + value_bytes);
        let (hold, guards) = self.hold_locked(
            &[object],
            u64::from(MAP_BLOCK_BYTES) + value_bytes,
            Some(space),
        )?;
        // An object number only for a map this change will make (under the inode's lock, so
        // the answer holds): numbers taken for nothing leave holes in the dnode array, and
        // `cp -a` sets an ACL on every file it copies.
        let makes_map = self.getattr(object)?.xattr_object == 0
            && !(name == acl::ACCESS_XATTR && Acl::parse(value).is_ok_and(|a| a.is_minimal()));
        let new_map = if makes_map {
            self.next_object.fetch_add(1, Ordering::Relaxed)
        } else {
            NO_OBJECT
        };
        let value_object = if value.len() > map::VALUE_BYTES_MAX {
            self.next_object.fetch_add(1, Ordering::Relaxed)
        } else {
            NO_OBJECT
        };
        let time = Timestamp::now();
        let new = NewObjects {
            map: new_map,
            value: value_object,
        };
        self.do_setxattr(&hold, object, new, name, value, mode, time)?;
        self.logged(
            &hold,
            FsOp::SetXattr {
                object,
                map_object: new_map,
                value_object,
                name: name.to_vec(),
                value: value.to_vec(),
                mode,
                time,
            },
        );
        self.note_dirty(&[object], &hold);
        drop(guards);
        self.commit_if_always(hold)
    }

    /// `new` names the objects the change may make: the inode's map for a first attribute
    /// (`NO_OBJECT` when the inode has one, or a minimal access ACL is only its mode), and the
    /// object of a value too large for the map (`NO_OBJECT` for a small one).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_setxattr(
        &self,
        hold: &TxgHold,
        object: u64,
        new: NewObjects,
        name: &[u8],
        value: &[u8],
        mode: XattrMode,
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut attrs = self.getattr(object)?;
        // A POSIX ACL is checked, and an access ACL sets the mode (`acl.rs`). One that the
        // mode alone says (owner, group, other) is not kept: what `cp -a` and `tar --acls`
        // set on every file they copy would otherwise cost each one a map of its own.
        if name == acl::ACCESS_XATTR {
            let access = Acl::parse(value)?;
            attrs.mode = (attrs.mode & !0o777) | access.mode_bits();
            if access.is_minimal() {
                if attrs.xattr_object != 0 {
                    let removed = HashedMap::new(&self.objset, attrs.xattr_object)
                        .remove(Tx::held(hold).map_tx(), acl::ACCESS_XATTR)?;
                    self.free_value_of(hold, object, removed.as_ref())?;
                }
                attrs.ctime = now;
                return self.put_attrs(hold, object, &attrs);
            }
        } else if name == acl::DEFAULT_XATTR {
            Acl::parse(value)?;
            if attrs.kind != FileKind::Directory {
                return Err(FsError::Invalid("a default ACL on a non-directory".into()));
            }
        }
        if attrs.xattr_object == 0 {
            if mode == XattrMode::Replace {
                return Err(FsError::NoAttribute);
            }
            if new.map == NO_OBJECT {
                // Replay of a record whose change made no map, now asked to make one.
                return Err(FsError::Corrupt(format!(
                    "an extended attribute of object {object} needs a map no object was taken for"
                )));
            }
            self.objset
                .create_object(hold.txg(), new.map, ObjectType::Xattrs, MAP_BLOCK_BYTES, 1);
            HashedMap::new(&self.objset, new.map)
                .create(Tx::held(hold).map_tx(), new.map ^ hold.txg())?;
            attrs.xattr_object = new.map;
        }
        let map = HashedMap::new(&self.objset, attrs.xattr_object);
        let old = map.get(name)?;
        match (&old, mode) {
            (Some(_), XattrMode::Create) => return Err(FsError::Exists),
            (None, XattrMode::Replace) => return Err(FsError::NoAttribute),
            _ => {}
        }
        let reference;
        let (stored, kind) = if value.len() > map::VALUE_BYTES_MAX {
            if new.value == NO_OBJECT {
                return Err(FsError::Corrupt(format!(
                    "an extended attribute of object {object} of {} bytes has no object taken \
                     for its value",
                    value.len()
                )));
            }
            self.objset
                .write_blob(hold.txg(), new.value, ObjectType::XattrValue, value)?;
            Tx::held(hold).add_dirty(value.len() as u64);
            reference = new.value.to_le_bytes();
            (&reference[..], ValueKind::Indirect)
        } else {
            (value, ValueKind::Inline)
        };
        match old {
            Some(old) => {
                map.set_value_as(Tx::held(hold).map_tx(), name, stored, kind)?;
                self.free_value_of(hold, object, Some(&old))?;
            }
            None => {
                map.insert_as(Tx::held(hold).map_tx(), name, stored, kind)?;
            }
        }
        attrs.ctime = now;
        self.put_attrs(hold, object, &attrs)
    }

    /// Frees the value object of `entry` if it has one (its entry has just gone or changed).
    fn free_value_of(
        &self,
        hold: &TxgHold,
        object: u64,
        entry: Option<&Entry>,
    ) -> Result<(), FsError> {
        if let Some(entry) = entry
            && entry.kind == ValueKind::Indirect
        {
            self.objset
                .free_object(hold.txg(), indirect_object(object, entry)?);
        }
        Ok(())
    }

    /// Frees inode `object`'s attribute map and every value object it names (the inode is
    /// being freed). A map that cannot be read does not keep its inode from going: the value
    /// objects it named stay allocated, and `pool check` names them.
    pub(crate) fn free_xattrs(&self, hold: &TxgHold, object: u64, attrs: &InodeAttrs) {
        if attrs.xattr_object == 0 {
            return;
        }
        let mut values = Vec::new();
        let walked = HashedMap::new(&self.objset, attrs.xattr_object).for_each_from(0, |entry| {
            if entry.kind == ValueKind::Indirect {
                values.push(indirect_object(object, entry));
            }
            true
        });
        if walked.is_ok() {
            for value in values.into_iter().flatten() {
                self.objset.free_object(hold.txg(), value);
            }
        }
        self.objset.free_object(hold.txg(), attrs.xattr_object);
    }

    /// A chmod of an inode with an access ACL rewrites the ACL's three classes (`acl.rs`).
    pub(crate) fn chmod_access_acl(
        &self,
        hold: &TxgHold,
        object: u64,
        attrs: &InodeAttrs,
    ) -> Result<(), FsError> {
        if attrs.xattr_object == 0 {
            return Ok(());
        }
        let map = HashedMap::new(&self.objset, attrs.xattr_object);
        let Some(entry) = map.get(acl::ACCESS_XATTR)? else {
            return Ok(());
        };
        let value_object = match entry.kind {
            ValueKind::Inline => None,
            ValueKind::Indirect => Some(indirect_object(object, &entry)?),
        };
        let acl = Acl::parse(&self.xattr_value(object, entry)?)?.with_mode(attrs.mode);
        let encoded = acl.encode();
        match value_object {
            None => Ok(map.set_value(Tx::held(hold).map_tx(), acl::ACCESS_XATTR, &encoded)?),
            // The same entries with other permissions: the same length, in the same object.
            Some(value_object) => {
                self.objset.write_blob(
                    hold.txg(),
                    value_object,
                    ObjectType::XattrValue,
                    &encoded,
                )?;
                Tx::held(hold).add_dirty(encoded.len() as u64);
                Ok(())
            }
        }
    }

    /// Takes set-group-ID away from `object` (after an access ACL set by a caller outside
    /// the file's group without CAP_FSETID, as Linux's `posix_acl_update_mode`); nothing is
    /// logged when it is not set.
    pub fn remove_set_group_id(&self, object: u64) -> Result<(), FsError> {
        let attrs = self.getattr(object)?;
        if attrs.mode & libc::S_ISGID == 0 {
            return Ok(());
        }
        let changes = SetAttrs {
            mode: Some(attrs.mode & !libc::S_ISGID),
            ..SetAttrs::default()
        };
        self.setattr(object, changes)?;
        self.changed_on_own(object);
        Ok(())
    }

    /// The default ACL of directory `dir`, if it has one (what new inodes in it inherit).
    pub fn default_acl(&self, dir: u64) -> Result<Option<Acl>, FsError> {
        match self.getxattr(dir, acl::DEFAULT_XATTR) {
            Ok(raw) => Acl::parse(&raw).map(Some),
            Err(FsError::NoAttribute) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Removes extended attribute `name` of inode `object`.
    pub fn removexattr(&self, object: u64, name: &[u8]) -> Result<(), FsError> {
        self.check_writable()?;
        let (hold, guards) = self.hold_locked(&[object], u64::from(MAP_BLOCK_BYTES), None)?;
        let time = Timestamp::now();
        self.do_removexattr(&hold, object, name, time)?;
        self.logged(
            &hold,
            FsOp::RemoveXattr {
                object,
                name: name.to_vec(),
                time,
            },
        );
        self.note_dirty(&[object], &hold);
        drop(guards);
        self.commit_if_always(hold)
    }

    pub(crate) fn do_removexattr(
        &self,
        hold: &TxgHold,
        object: u64,
        name: &[u8],
        now: Timestamp,
    ) -> Result<(), FsError> {
        let mut attrs = self.getattr(object)?;
        if attrs.xattr_object == 0 {
            return Err(FsError::NoAttribute);
        }
        let removed = HashedMap::new(&self.objset, attrs.xattr_object)
            .remove(Tx::held(hold).map_tx(), name)?
            .ok_or(FsError::NoAttribute)?;
        self.free_value_of(hold, object, Some(&removed))?;
        attrs.ctime = now;
        self.put_attrs(hold, object, &attrs)
    }
}

/// The objects a `SetXattr` change may make (`NO_OBJECT`: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NewObjects {
    pub(crate) map: u64,
    pub(crate) value: u64,
}

/// The value object an indirect entry of inode `object`'s map names.
pub fn indirect_object(object: u64, entry: &Entry) -> Result<u64, FsError> {
    debug_assert_eq!(entry.kind, ValueKind::Indirect);
    let raw: [u8; 8] = entry.value.as_slice().try_into().map_err(|_| {
        FsError::Corrupt(format!(
            "inode {object}: extended attribute {:?} has a value reference of {} bytes",
            String::from_utf8_lossy(&entry.name),
            entry.value.len()
        ))
    })?;
    let value_object = u64::from_le_bytes(raw);
    if value_object == NO_OBJECT {
        return Err(FsError::Corrupt(format!(
            "inode {object}: extended attribute {:?} names object 0",
            String::from_utf8_lossy(&entry.name)
        )));
    }
    Ok(value_object)
}
