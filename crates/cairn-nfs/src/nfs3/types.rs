//! The NFSv3 data types shared by arguments and results (RFC 1813 §2.5–2.6): status codes,
//! file handles and names, attributes (`fattr3`, `wcc_data`, `sattr3`), times, verifiers.
//!
//! Bounded byte types ([`FileHandle`] ≤ 64, [`Filename`] ≤ 255, [`NfsPath`] ≤ 1024) check
//! their bound when built and when decoded; names and paths are bytes, as on the wire (the
//! server decides what a non-UTF-8 name means). Optional attributes are `Option<…>`, whose
//! XDR form is the bool-discriminated union RFC 1813 uses (`post_op_attr`, `pre_op_attr`,
//! `post_op_fh3`, `set_mode3`…).

use crate::xdr::{
    Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_bounded_bytes, xdr_enum, xdr_struct,
};

xdr_bounded_bytes!(
    /// `nfs_fh3`: an opaque file handle of at most 64 bytes, built by the server.
    pub struct FileHandle, max = 64, what = "file handle"
);

xdr_bounded_bytes!(
    /// `filename3`: one path component, at most 255 bytes.
    pub struct Filename, max = 255, what = "filename"
);

xdr_bounded_bytes!(
    /// `nfspath3`: a symbolic link's target, at most 1024 bytes.
    pub struct NfsPath, max = 1024, what = "path"
);

/// A verifier of READDIR cookies (`cookieverf3`).
pub type CookieVerf = [u8; 8];
/// An exclusive-CREATE verifier (`createverf3`).
pub type CreateVerf = [u8; 8];
/// A write verifier (`writeverf3`): changes when uncommitted data may have been lost.
pub type WriteVerf = [u8; 8];

xdr_enum!(
    /// Every `nfsstat3` except NFS3_OK: why a procedure failed. (Success is the `Ok` arm of
    /// [`Outcome`], so a failure can never carry "OK".)
    pub enum Nfs3Error {
        Perm = 1,
        NoEnt = 2,
        Io = 5,
        NxIo = 6,
        Acces = 13,
        Exist = 17,
        XDev = 18,
        NoDev = 19,
        NotDir = 20,
        IsDir = 21,
        Inval = 22,
        FBig = 27,
        NoSpc = 28,
        RoFs = 30,
        MLink = 31,
        NameTooLong = 63,
        NotEmpty = 66,
        DQuot = 69,
        Stale = 70,
        Remote = 71,
        BadHandle = 10001,
        NotSync = 10002,
        BadCookie = 10003,
        NotSupp = 10004,
        TooSmall = 10005,
        ServerFault = 10006,
        BadType = 10007,
        Jukebox = 10008,
    }
);

/// `nfsstat3` NFS3_OK.
pub const NFS3_OK: u32 = 0;

/// A procedure's result: `NFS3_OK` and the success body, or an error and the failure body
/// (RFC 1813 writes each result as `union switch (nfsstat3 status)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<T, F> {
    Ok(T),
    Fail(Nfs3Error, F),
}

impl<T: XdrEncode, F: XdrEncode> XdrEncode for Outcome<T, F> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Outcome::Ok(ok) => {
                enc.put_u32(NFS3_OK);
                ok.encode(enc);
            }
            Outcome::Fail(status, fail) => {
                status.encode(enc);
                fail.encode(enc);
            }
        }
    }
}

impl<T: XdrDecode, F: XdrDecode> XdrDecode for Outcome<T, F> {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let status = dec.get_u32()?;
        if status == NFS3_OK {
            return Ok(Outcome::Ok(dec.get()?));
        }
        let error = Nfs3Error::from_u32(status).ok_or(XdrError::BadDiscriminant {
            what: "nfsstat3",
            value: status,
        })?;
        Ok(Outcome::Fail(error, dec.get()?))
    }
}

xdr_enum!(
    /// `ftype3`: the type of a file.
    pub enum Ftype3 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
    }
);

xdr_struct!(
    /// `specdata3`: a device's major and minor numbers.
    pub struct SpecData3 {
        pub major: u32,
        pub minor: u32,
    }
);

xdr_struct!(
    /// `nfstime3`: seconds and nanoseconds since the epoch.
    pub struct NfsTime3 {
        pub seconds: u32,
        pub nseconds: u32,
    }
);

xdr_struct!(
    /// `fattr3`: a file's attributes.
    pub struct Fattr3 {
        pub ftype: Ftype3,
        /// Permission bits and setuid/setgid/sticky (not the type bits).
        pub mode: u32,
        pub nlink: u32,
        pub uid: u32,
        pub gid: u32,
        pub size_bytes: u64,
        /// Bytes of storage the file uses.
        pub used_bytes: u64,
        pub rdev: SpecData3,
        pub fsid: u64,
        pub fileid: u64,
        pub atime: NfsTime3,
        pub mtime: NfsTime3,
        pub ctime: NfsTime3,
    }
);

/// `post_op_attr`: attributes after an operation, when the server has them.
pub type PostOpAttr = Option<Fattr3>;

xdr_struct!(
    /// `wcc_attr`: the attributes weak cache consistency compares.
    pub struct WccAttr {
        pub size_bytes: u64,
        pub mtime: NfsTime3,
        pub ctime: NfsTime3,
    }
);

/// `pre_op_attr`.
pub type PreOpAttr = Option<WccAttr>;

xdr_struct!(
    /// `wcc_data`: a changed object's attributes before and after.
    pub struct WccData {
        pub before: PreOpAttr,
        pub after: PostOpAttr,
    }
);

impl WccData {
    /// No attributes either side (what a server sends when it has none).
    pub fn empty() -> Self {
        Self {
            before: None,
            after: None,
        }
    }
}

/// `post_op_fh3`.
pub type PostOpFh3 = Option<FileHandle>;

/// `set_atime` / `set_mtime` (`time_how`): leave, set to the server's clock, or to the
/// client's time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SetTime {
    #[default]
    DontChange,
    ServerTime,
    ClientTime(NfsTime3),
}

impl XdrEncode for SetTime {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SetTime::DontChange => enc.put_u32(0),
            SetTime::ServerTime => enc.put_u32(1),
            SetTime::ClientTime(time) => {
                enc.put_u32(2);
                time.encode(enc);
            }
        }
    }
}

impl XdrDecode for SetTime {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(SetTime::DontChange),
            1 => Ok(SetTime::ServerTime),
            2 => Ok(SetTime::ClientTime(dec.get()?)),
            value => Err(XdrError::BadDiscriminant {
                what: "time_how",
                value,
            }),
        }
    }
}

xdr_struct!(
    /// `sattr3`: attributes a client sets; `None` leaves one unchanged.
    pub struct Sattr3 {
        pub mode: Option<u32>,
        pub uid: Option<u32>,
        pub gid: Option<u32>,
        pub size_bytes: Option<u64>,
        pub atime: SetTime,
        pub mtime: SetTime,
    }
);

impl Default for Sattr3 {
    fn default() -> Self {
        Self {
            mode: None,
            uid: None,
            gid: None,
            size_bytes: None,
            atime: SetTime::DontChange,
            mtime: SetTime::DontChange,
        }
    }
}

xdr_struct!(
    /// `diropargs3`: a name in a directory.
    pub struct DirOpArgs3 {
        pub dir: FileHandle,
        pub name: Filename,
    }
);

xdr_enum!(
    /// `stable_how`: how durable a WRITE must be before its reply (and how durable it was).
    pub enum StableHow {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
);

/// ACCESS bits (`ACCESS3_*`).
pub mod access {
    pub const READ: u32 = 0x0001;
    pub const LOOKUP: u32 = 0x0002;
    pub const MODIFY: u32 = 0x0004;
    pub const EXTEND: u32 = 0x0008;
    pub const DELETE: u32 = 0x0010;
    pub const EXECUTE: u32 = 0x0020;
}

/// FSINFO `properties` bits (`FSF3_*`).
pub mod fsf {
    pub const LINK: u32 = 0x0001;
    pub const SYMLINK: u32 = 0x0002;
    pub const HOMOGENEOUS: u32 = 0x0008;
    pub const CANSETTIME: u32 = 0x0010;
}
