//! Filesystem changes as intent-log records (`LogRecordKind::Fs`), and back.
//!
//! Every change a `Filesystem` makes is described by one `FsOp` carrying everything needed to
//! make it again exactly: the object numbers it creates, the times it sets, the names. The
//! live operation and the replay at import run the same code with the same `FsOp` (`apply`
//! in lib.rs), so a replayed change is the change that was acknowledged. File data goes in
//! ordinary `Write` records (object = the inode, offset = the file offset).
//!
//! Encoding: a tag byte, then fixed-width little-endian fields and length-prefixed byte
//! strings (u16 lengths), in the order of the variant's fields. Decoding checks every length
//! against the payload and refuses trailing bytes: a damaged record is an error, never a
//! guess. `SetXattr` has two tags: 6 for a value kept in the map (no value object; the
//! layout logs written before large values had), 9 for one with a value object, whose value
//! has a u32 length (the VFS's 64 KiB does not fit a u16).

use crate::attrs::{FileKind, Timestamp};
use crate::{Fallocate, FsError, RenameMode, SetAttrs, XattrMode};

/// One filesystem change, as logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsOp {
    Create {
        dir: u64,
        name: Vec<u8>,
        object: u64,
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        time: Timestamp,
        target: Vec<u8>,
    },
    Link {
        object: u64,
        dir: u64,
        name: Vec<u8>,
        time: Timestamp,
    },
    Remove {
        dir: u64,
        name: Vec<u8>,
        directory: bool,
        time: Timestamp,
    },
    Rename {
        old_dir: u64,
        old_name: Vec<u8>,
        new_dir: u64,
        new_name: Vec<u8>,
        mode: RenameMode,
        time: Timestamp,
    },
    SetAttrs {
        object: u64,
        changes: SetAttrs,
        time: Timestamp,
    },
    SetXattr {
        object: u64,
        /// The object a first attribute creates for the inode's map.
        map_object: u64,
        /// The object a value too large for the map is kept in (`xattr.rs`; 0: none).
        value_object: u64,
        name: Vec<u8>,
        value: Vec<u8>,
        mode: XattrMode,
        time: Timestamp,
    },
    RemoveXattr {
        object: u64,
        name: Vec<u8>,
        time: Timestamp,
    },
    Fallocate {
        object: u64,
        offset: u64,
        len: u64,
        op: Fallocate,
        time: Timestamp,
    },
}

impl FsOp {
    /// The inode the record is filed under.
    pub fn object(&self) -> u64 {
        match self {
            FsOp::Create { object, .. }
            | FsOp::Link { object, .. }
            | FsOp::SetAttrs { object, .. }
            | FsOp::SetXattr { object, .. }
            | FsOp::RemoveXattr { object, .. }
            | FsOp::Fallocate { object, .. } => *object,
            FsOp::Remove { dir, .. } => *dir,
            FsOp::Rename { old_dir, .. } => *old_dir,
        }
    }

    /// Whether only a commit of `object()` needs this record (a per-object record, logged
    /// with `IntentLog::log_deferred`): a change of one inode's attributes or allocation,
    /// which no other record depends on (replay never reads an inode's mode, size, times or
    /// blocks to apply another inode's change: a create carries its own mode and owner).
    /// Namespace changes (create, link, remove, rename) are not: they make objects exist and
    /// reach them, and every fsync carries them. Extended attributes are not either: an
    /// inherited ACL is one, and a new inode must never become durable without it (a mode
    /// derived from the ACL gives its group the mask's rights); they also create objects.
    pub fn per_object(&self) -> bool {
        matches!(self, FsOp::SetAttrs { .. } | FsOp::Fallocate { .. })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Encoder(Vec::with_capacity(64));
        match self {
            FsOp::Create { .. } | FsOp::Link { .. } | FsOp::Remove { .. } | FsOp::Rename { .. } => {
                self.encode_namespace(&mut out);
            }
            FsOp::SetAttrs { .. }
            | FsOp::SetXattr { .. }
            | FsOp::RemoveXattr { .. }
            | FsOp::Fallocate { .. } => self.encode_attributes(&mut out),
        }
        out.0
    }

    /// Encodes a change of names: create, link, remove, rename.
    fn encode_namespace(&self, out: &mut Encoder) {
        match self {
            FsOp::Create {
                dir,
                name,
                object,
                kind,
                mode,
                uid,
                gid,
                rdev,
                time,
                target,
            } => {
                out.u8(1);
                out.u64(*dir);
                out.bytes(name);
                out.u64(*object);
                out.u8(*kind as u8);
                out.u32(*mode);
                out.u32(*uid);
                out.u32(*gid);
                out.u64(*rdev);
                out.time(*time);
                out.bytes(target);
            }
            FsOp::Link {
                object,
                dir,
                name,
                time,
            } => {
                out.u8(2);
                out.u64(*object);
                out.u64(*dir);
                out.bytes(name);
                out.time(*time);
            }
            FsOp::Remove {
                dir,
                name,
                directory,
                time,
            } => {
                out.u8(3);
                out.u64(*dir);
                out.bytes(name);
                out.u8(u8::from(*directory));
                out.time(*time);
            }
            FsOp::Rename {
                old_dir,
                old_name,
                new_dir,
                new_name,
                mode,
                time,
            } => {
                out.u8(4);
                out.u64(*old_dir);
                out.bytes(old_name);
                out.u64(*new_dir);
                out.bytes(new_name);
                out.u8(match mode {
                    RenameMode::Replace => 0,
                    RenameMode::NoReplace => 1,
                    RenameMode::Exchange => 2,
                });
                out.time(*time);
            }
            FsOp::SetAttrs { .. }
            | FsOp::SetXattr { .. }
            | FsOp::RemoveXattr { .. }
            | FsOp::Fallocate { .. } => unreachable!("`encode` sends these to encode_attributes"),
        }
    }

    /// Encodes a change of one inode's attributes, extended attributes or allocation.
    fn encode_attributes(&self, out: &mut Encoder) {
        match self {
            FsOp::SetAttrs {
                object,
                changes,
                time,
            } => {
                out.u8(5);
                out.u64(*object);
                out.option_u32(changes.mode);
                out.option_u32(changes.uid);
                out.option_u32(changes.gid);
                out.option_u64(changes.size);
                out.option_time(changes.atime);
                out.option_time(changes.mtime);
                out.option_time(changes.ctime);
                out.time(*time);
            }
            FsOp::SetXattr {
                object,
                map_object,
                value_object,
                name,
                value,
                mode,
                time,
            } => {
                if *value_object == 0 && value.len() <= usize::from(u16::MAX) {
                    out.u8(6);
                    out.u64(*object);
                    out.u64(*map_object);
                    out.bytes(name);
                    out.bytes(value);
                } else {
                    out.u8(9);
                    out.u64(*object);
                    out.u64(*map_object);
                    out.u64(*value_object);
                    out.bytes(name);
                    out.long_bytes(value);
                }
                out.u8(match mode {
                    XattrMode::Any => 0,
                    XattrMode::Create => 1,
                    XattrMode::Replace => 2,
                });
                out.time(*time);
            }
            FsOp::RemoveXattr { object, name, time } => {
                out.u8(7);
                out.u64(*object);
                out.bytes(name);
                out.time(*time);
            }
            FsOp::Fallocate {
                object,
                offset,
                len,
                op,
                time,
            } => {
                out.u8(8);
                out.u64(*object);
                out.u64(*offset);
                out.u64(*len);
                let (tag, keep_size) = match op {
                    Fallocate::Allocate { keep_size } => (0, *keep_size),
                    Fallocate::PunchHole => (1, true),
                    Fallocate::ZeroRange { keep_size } => (2, *keep_size),
                };
                out.u8(tag);
                out.u8(u8::from(keep_size));
                out.time(*time);
            }
            FsOp::Create { .. } | FsOp::Link { .. } | FsOp::Remove { .. } | FsOp::Rename { .. } => {
                unreachable!("`encode` sends these to encode_namespace")
            }
        }
    }

    pub fn decode(bytes: &[u8]) -> Result<FsOp, FsError> {
        let mut input = Decoder { bytes, at: 0 };
        let op = match input.u8()? {
            1 => FsOp::Create {
                dir: input.u64()?,
                name: input.bytes()?,
                object: input.u64()?,
                kind: FileKind::from_u8(input.u8()?).ok_or_else(|| bad("kind"))?,
                mode: input.u32()?,
                uid: input.u32()?,
                gid: input.u32()?,
                rdev: input.u64()?,
                time: input.time()?,
                target: input.bytes()?,
            },
            2 => FsOp::Link {
                object: input.u64()?,
                dir: input.u64()?,
                name: input.bytes()?,
                time: input.time()?,
            },
            3 => FsOp::Remove {
                dir: input.u64()?,
                name: input.bytes()?,
                directory: input.flag()?,
                time: input.time()?,
            },
            4 => FsOp::Rename {
                old_dir: input.u64()?,
                old_name: input.bytes()?,
                new_dir: input.u64()?,
                new_name: input.bytes()?,
                mode: match input.u8()? {
                    0 => RenameMode::Replace,
                    1 => RenameMode::NoReplace,
                    2 => RenameMode::Exchange,
                    _ => return Err(bad("rename mode")),
                },
                time: input.time()?,
            },
            5 => FsOp::SetAttrs {
                object: input.u64()?,
                changes: SetAttrs {
                    mode: input.option_u32()?,
                    uid: input.option_u32()?,
                    gid: input.option_u32()?,
                    size: input.option_u64()?,
                    atime: input.option_time()?,
                    mtime: input.option_time()?,
                    ctime: input.option_time()?,
                },
                time: input.time()?,
            },
            6 => FsOp::SetXattr {
                object: input.u64()?,
                map_object: input.u64()?,
                value_object: 0,
                name: input.bytes()?,
                value: input.bytes()?,
                mode: input.xattr_mode()?,
                time: input.time()?,
            },
            9 => FsOp::SetXattr {
                object: input.u64()?,
                map_object: input.u64()?,
                value_object: input.u64()?,
                name: input.bytes()?,
                value: input.long_bytes()?,
                mode: input.xattr_mode()?,
                time: input.time()?,
            },
            7 => FsOp::RemoveXattr {
                object: input.u64()?,
                name: input.bytes()?,
                time: input.time()?,
            },
            8 => {
                let (object, offset, len) = (input.u64()?, input.u64()?, input.u64()?);
                let (tag, keep_size) = (input.u8()?, input.flag()?);
                let op = match tag {
                    0 => Fallocate::Allocate { keep_size },
                    1 => Fallocate::PunchHole,
                    2 => Fallocate::ZeroRange { keep_size },
                    _ => return Err(bad("fallocate mode")),
                };
                FsOp::Fallocate {
                    object,
                    offset,
                    len,
                    op,
                    time: input.time()?,
                }
            }
            tag => return Err(bad(&format!("tag {tag}"))),
        };
        if input.at != bytes.len() {
            return Err(bad("trailing bytes"));
        }
        Ok(op)
    }
}

fn bad(what: &str) -> FsError {
    FsError::Corrupt(format!("a logged filesystem change: {what}"))
}

struct Encoder(Vec<u8>);

impl Encoder {
    fn u8(&mut self, value: u8) {
        self.0.push(value);
    }
    fn u32(&mut self, value: u32) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn u64(&mut self, value: u64) {
        self.0.extend_from_slice(&value.to_le_bytes());
    }
    fn time(&mut self, time: Timestamp) {
        self.u64(time.secs as u64);
        self.u32(time.nanos);
    }
    fn bytes(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() <= usize::from(u16::MAX),
            "a logged string too long"
        );
        self.0
            .extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        self.0.extend_from_slice(bytes);
    }
    fn long_bytes(&mut self, bytes: &[u8]) {
        let len = u32::try_from(bytes.len()).expect("a logged value under 4 GiB");
        self.u32(len);
        self.0.extend_from_slice(bytes);
    }
    fn option_u32(&mut self, value: Option<u32>) {
        self.u8(u8::from(value.is_some()));
        self.u32(value.unwrap_or(0));
    }
    fn option_u64(&mut self, value: Option<u64>) {
        self.u8(u8::from(value.is_some()));
        self.u64(value.unwrap_or(0));
    }
    fn option_time(&mut self, value: Option<Timestamp>) {
        self.u8(u8::from(value.is_some()));
        self.time(value.unwrap_or_default());
    }
}

struct Decoder<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Decoder<'_> {
    fn take(&mut self, len: usize) -> Result<&[u8], FsError> {
        let end = self.at.checked_add(len).ok_or_else(|| bad("length"))?;
        let slice = self.bytes.get(self.at..end).ok_or_else(|| bad("short"))?;
        self.at = end;
        Ok(slice)
    }
    fn u8(&mut self) -> Result<u8, FsError> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool, FsError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad("flag")),
        }
    }
    fn u32(&mut self) -> Result<u32, FsError> {
        let mut raw = [0u8; 4];
        raw.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(raw))
    }
    fn u64(&mut self) -> Result<u64, FsError> {
        let mut raw = [0u8; 8];
        raw.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(raw))
    }
    fn time(&mut self) -> Result<Timestamp, FsError> {
        let secs = self.u64()? as i64;
        let nanos = self.u32()?;
        if nanos >= 1_000_000_000 {
            return Err(bad("nanoseconds"));
        }
        Ok(Timestamp { secs, nanos })
    }
    fn bytes(&mut self) -> Result<Vec<u8>, FsError> {
        let mut raw = [0u8; 2];
        raw.copy_from_slice(self.take(2)?);
        let len = usize::from(u16::from_le_bytes(raw));
        Ok(self.take(len)?.to_vec())
    }
    fn long_bytes(&mut self) -> Result<Vec<u8>, FsError> {
        let len = self.u32()? as usize;
        Ok(self.take(len)?.to_vec())
    }
    fn xattr_mode(&mut self) -> Result<XattrMode, FsError> {
        match self.u8()? {
            0 => Ok(XattrMode::Any),
            1 => Ok(XattrMode::Create),
            2 => Ok(XattrMode::Replace),
            _ => Err(bad("xattr mode")),
        }
    }
    fn option<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, FsError>,
    ) -> Result<Option<T>, FsError> {
        let present = self.flag()?;
        let value = read(self)?;
        Ok(present.then_some(value))
    }
    fn option_u32(&mut self) -> Result<Option<u32>, FsError> {
        self.option(Self::u32)
    }
    fn option_u64(&mut self) -> Result<Option<u64>, FsError> {
        self.option(Self::u64)
    }
    fn option_time(&mut self) -> Result<Option<Timestamp>, FsError> {
        self.option(Self::time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(secs: i64) -> Timestamp {
        Timestamp { secs, nanos: 5 }
    }

    fn samples() -> Vec<FsOp> {
        vec![
            FsOp::Create {
                dir: 2,
                name: b"a".to_vec(),
                object: 99,
                kind: FileKind::Symlink,
                mode: 0o777,
                uid: 1,
                gid: 2,
                rdev: 3,
                time: t(-4),
                target: b"../b".to_vec(),
            },
            FsOp::Link {
                object: 99,
                dir: 17,
                name: b"x".to_vec(),
                time: t(1),
            },
            FsOp::Remove {
                dir: 2,
                name: b"a".to_vec(),
                directory: true,
                time: t(2),
            },
            FsOp::Rename {
                old_dir: 2,
                old_name: b"o".to_vec(),
                new_dir: 3,
                new_name: b"n".to_vec(),
                mode: RenameMode::Exchange,
                time: t(3),
            },
            FsOp::SetAttrs {
                object: 5,
                changes: SetAttrs {
                    mode: Some(0o4755),
                    uid: None,
                    gid: Some(7),
                    size: Some(1 << 40),
                    atime: Some(t(8)),
                    mtime: None,
                    ctime: Some(t(9)),
                },
                time: t(10),
            },
            FsOp::SetXattr {
                object: 5,
                map_object: 77,
                value_object: 0,
                name: b"user.x".to_vec(),
                value: vec![0; 1024],
                mode: XattrMode::Replace,
                time: t(11),
            },
            // A value of its own object, as large as the VFS allows (a u32 length).
            FsOp::SetXattr {
                object: 5,
                map_object: 0,
                value_object: 78,
                name: b"user.y".to_vec(),
                value: vec![9; 64 << 10],
                mode: XattrMode::Any,
                time: t(11),
            },
            FsOp::RemoveXattr {
                object: 5,
                name: b"user.x".to_vec(),
                time: t(12),
            },
            FsOp::Fallocate {
                object: 5,
                offset: 4096,
                len: 8192,
                op: Fallocate::ZeroRange { keep_size: true },
                time: t(13),
            },
        ]
    }

    #[test]
    fn every_change_round_trips() {
        for op in samples() {
            let raw = op.encode();
            assert_eq!(FsOp::decode(&raw).unwrap(), op);
        }
    }

    #[test]
    fn damaged_records_are_errors() {
        for op in samples() {
            let raw = op.encode();
            for cut in 0..raw.len() {
                assert!(FsOp::decode(&raw[..cut]).is_err(), "{op:?} cut at {cut}");
            }
            let mut longer = raw.clone();
            longer.push(0);
            assert!(FsOp::decode(&longer).is_err());
        }
        assert!(FsOp::decode(&[42]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = FsOp::decode(&bytes);
        }
    }
}
