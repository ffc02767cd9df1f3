//! POSIX ACLs (access and default), stored as the extended attributes `system.posix_acl_access`
//! and `system.posix_acl_default` in Linux's binary form: a 4-byte version (2), then 8-byte
//! entries of tag (u16), permissions (u16) and id (u32), little-endian.
//!
//! The kernel enforces ACLs (a FUSE mount asks it to, `FUSE_POSIX_ACL`); the filesystem keeps
//! them true, as that contract asks:
//! - **Mode and ACL agree.** Setting an access ACL sets the mode's permission bits from it
//!   (owner from the owner entry, group from the mask if there is one, else the owning group,
//!   other from other); a chmod of a file with an access ACL rewrites those three entries.
//!   Both happen inside the call's own change (`do_setxattr`, `do_setattr`), so replay of the
//!   intent log repeats them.
//! - **A minimal access ACL is the mode.** One with only the owner, owning-group and other
//!   entries sets the mode and is not stored (a stored one goes), as ext4 and ZFS do: reading
//!   it back gives ENODATA and the kernel shows the mode as the ACL. Default ACLs are always
//!   stored (even a minimal one replaces the umask of what is created below).
//! - **Inheritance.** A file or directory created in a directory with a default ACL gets that
//!   ACL as its access ACL, each class limited by the mode the creator asked for (the umask is
//!   not applied: the default ACL replaces it); a directory also inherits the default ACL.
//!   The new inode's mode comes from the result.
//!
//! Known gap: inheritance is two logged changes (the create with the derived mode, then the
//! ACLs set on the new inode): a crash between them, when another file's fsync committed the
//! first only, leaves the file with the derived mode and without its named entries (less
//! access than meant, never more).

use crate::FsError;

pub const ACCESS_XATTR: &[u8] = b"system.posix_acl_access";
pub const DEFAULT_XATTR: &[u8] = b"system.posix_acl_default";

const VERSION: u32 = 2;
const HEADER_BYTES: usize = 4;
const ENTRY_BYTES: usize = 8;
const TAG_USER_OBJ: u16 = 0x01;
const TAG_USER: u16 = 0x02;
const TAG_GROUP_OBJ: u16 = 0x04;
const TAG_GROUP: u16 = 0x08;
const TAG_MASK: u16 = 0x10;
const TAG_OTHER: u16 = 0x20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    tag: u16,
    perm: u16,
    id: u32,
}

/// A parsed ACL, entries in their stored order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    entries: Vec<Entry>,
}

impl Acl {
    /// Parses and checks an ACL: one owner, owning-group and other entry each, a mask when
    /// there are named entries, permissions within rwx.
    pub fn parse(raw: &[u8]) -> Result<Acl, FsError> {
        let invalid = |why: &str| FsError::Invalid(format!("POSIX ACL: {why}"));
        if raw.len() < HEADER_BYTES || !(raw.len() - HEADER_BYTES).is_multiple_of(ENTRY_BYTES) {
            return Err(invalid("not a whole number of entries"));
        }
        let version = u32::from_le_bytes(raw[..4].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(invalid("unknown version"));
        }
        let entries: Vec<Entry> = raw[HEADER_BYTES..]
            .chunks_exact(ENTRY_BYTES)
            .map(|e| Entry {
                tag: u16::from_le_bytes([e[0], e[1]]),
                perm: u16::from_le_bytes([e[2], e[3]]),
                id: u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            })
            .collect();
        let count = |tag| entries.iter().filter(|e| e.tag == tag).count();
        if count(TAG_USER_OBJ) != 1 || count(TAG_GROUP_OBJ) != 1 || count(TAG_OTHER) != 1 {
            return Err(invalid("needs one owner, owning-group and other entry"));
        }
        if count(TAG_MASK) > 1 || (count(TAG_USER) + count(TAG_GROUP) > 0 && count(TAG_MASK) != 1) {
            return Err(invalid("named entries need exactly one mask"));
        }
        if entries.iter().any(|e| {
            e.perm & !7 != 0
                || !matches!(
                    e.tag,
                    TAG_USER_OBJ | TAG_USER | TAG_GROUP_OBJ | TAG_GROUP | TAG_MASK | TAG_OTHER
                )
        }) {
            return Err(invalid("unknown tag or permission"));
        }
        Ok(Acl { entries })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut raw = VERSION.to_le_bytes().to_vec();
        for e in &self.entries {
            raw.extend_from_slice(&e.tag.to_le_bytes());
            raw.extend_from_slice(&e.perm.to_le_bytes());
            raw.extend_from_slice(&e.id.to_le_bytes());
        }
        raw
    }

    /// The entry that stands for the group class: the mask if any, else the owning group.
    fn group_class(&mut self) -> &mut Entry {
        let tag = if self.entries.iter().any(|e| e.tag == TAG_MASK) {
            TAG_MASK
        } else {
            TAG_GROUP_OBJ
        };
        self.entries
            .iter_mut()
            .find(|e| e.tag == tag)
            .expect("parse checked the base entries")
    }

    fn entry(&mut self, tag: u16) -> &mut Entry {
        self.entries
            .iter_mut()
            .find(|e| e.tag == tag)
            .expect("parse checked the base entries")
    }

    /// The permission bits (0o777) the ACL gives the three classes.
    pub fn mode_bits(&self) -> u32 {
        let mut acl = self.clone();
        let owner = u32::from(acl.entry(TAG_USER_OBJ).perm);
        let group = u32::from(acl.group_class().perm);
        let other = u32::from(acl.entry(TAG_OTHER).perm);
        owner << 6 | group << 3 | other
    }

    /// The ACL with its three classes set to `mode`'s permission bits (a chmod).
    pub fn with_mode(mut self, mode: u32) -> Acl {
        self.entry(TAG_USER_OBJ).perm = ((mode >> 6) & 7) as u16;
        self.group_class().perm = ((mode >> 3) & 7) as u16;
        self.entry(TAG_OTHER).perm = (mode & 7) as u16;
        self
    }

    /// A default ACL applied to a new inode created with `mode`: each class keeps only what
    /// both allow (POSIX's inheritance). Returns the access ACL and the inode's mode.
    pub fn inherited(mut self, mode: u32) -> (Acl, u32) {
        for (tag, shift) in [(TAG_USER_OBJ, 6), (TAG_OTHER, 0)] {
            let entry = self.entry(tag);
            entry.perm &= ((mode >> shift) & 7) as u16;
        }
        self.group_class().perm &= ((mode >> 3) & 7) as u16;
        let bits = self.mode_bits();
        (self, (mode & !0o777) | bits)
    }

    /// Whether the mode alone says everything (only the three base entries).
    pub fn is_minimal(&self) -> bool {
        self.entries.len() == 3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        Acl {
            entries: entries
                .iter()
                .map(|&(tag, perm, id)| Entry { tag, perm, id })
                .collect(),
        }
        .encode()
    }

    #[test]
    fn parse_checks_structure_and_round_trips() {
        let good = raw(&[
            (TAG_USER_OBJ, 6, 0),
            (TAG_USER, 6, 65534),
            (TAG_GROUP_OBJ, 4, 0),
            (TAG_MASK, 6, 0),
            (TAG_OTHER, 0, 0),
        ]);
        let acl = Acl::parse(&good).unwrap();
        assert_eq!(acl.encode(), good);
        assert_eq!(acl.mode_bits(), 0o660);
        assert!(!acl.is_minimal());
        // A named entry without a mask, a missing other entry, a bad version.
        assert!(
            Acl::parse(&raw(&[
                (TAG_USER_OBJ, 6, 0),
                (TAG_USER, 6, 1),
                (TAG_GROUP_OBJ, 4, 0),
                (TAG_OTHER, 0, 0)
            ]))
            .is_err()
        );
        assert!(Acl::parse(&raw(&[(TAG_USER_OBJ, 6, 0), (TAG_GROUP_OBJ, 4, 0)])).is_err());
        let mut bad = good.clone();
        bad[0] = 1;
        assert!(Acl::parse(&bad).is_err());
        assert!(Acl::parse(&good[..7]).is_err());
    }

    #[test]
    fn chmod_and_inheritance_follow_the_classes() {
        let acl = Acl::parse(&raw(&[
            (TAG_USER_OBJ, 7, 0),
            (TAG_USER, 7, 1000),
            (TAG_GROUP_OBJ, 5, 0),
            (TAG_MASK, 7, 0),
            (TAG_OTHER, 5, 0),
        ]))
        .unwrap();
        // chmod 640: the mask, not the owning group, takes the group bits.
        let changed = acl.clone().with_mode(0o640);
        assert_eq!(changed.mode_bits(), 0o640);
        let (inherited, mode) = acl.inherited(0o100_644);
        assert_eq!(mode, 0o100_644);
        assert_eq!(inherited.mode_bits(), 0o644);
        // Named entries stay; the mask limits them (r-- here).
        let mut mask = inherited.clone();
        assert_eq!(mask.group_class().perm, 4);
        let minimal = Acl::parse(&raw(&[
            (TAG_USER_OBJ, 7, 0),
            (TAG_GROUP_OBJ, 7, 0),
            (TAG_OTHER, 7, 0),
        ]))
        .unwrap();
        assert!(minimal.is_minimal());
        assert_eq!(minimal.inherited(0o40_750).1, 0o40_750);
    }
}
