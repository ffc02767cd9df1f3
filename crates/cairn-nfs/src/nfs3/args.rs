//! The arguments of the 22 NFSv3 procedures (RFC 1813 §3.3) and [`decode_call`], which turns a
//! call's argument bytes into a typed [`Nfs3Call`].
//!
//! File data (WRITE) is bounded by the decoder's `max_data_bytes`, which the server sets to
//! what it advertises in FSINFO (`wtmax`); WRITE's `count` must equal its data's length (as
//! Linux's nfsd requires), so the server never has to guess which one to believe.
//! Every call also encodes, so tests and load generators build calls with the same types.

use crate::xdr::{Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_enum, xdr_struct};

use super::types::{
    CookieVerf, CreateVerf, DirOpArgs3, FileHandle, Ftype3, NfsPath, NfsTime3, Sattr3, SpecData3,
    StableHow,
};

/// The version of NFS these types speak.
pub const NFS_V3: u32 = 3;

xdr_enum!(
    /// NFSv3 procedure numbers.
    pub enum Nfs3Proc {
        Null = 0,
        Getattr = 1,
        Setattr = 2,
        Lookup = 3,
        Access = 4,
        Readlink = 5,
        Read = 6,
        Write = 7,
        Create = 8,
        Mkdir = 9,
        Symlink = 10,
        Mknod = 11,
        Remove = 12,
        Rmdir = 13,
        Rename = 14,
        Link = 15,
        Readdir = 16,
        Readdirplus = 17,
        Fsstat = 18,
        Fsinfo = 19,
        Pathconf = 20,
        Commit = 21,
    }
);

xdr_struct!(
    /// GETATTR, READLINK, FSSTAT, FSINFO and PATHCONF take only a handle.
    pub struct HandleArgs {
        pub object: FileHandle,
    }
);

xdr_struct!(
    /// SETATTR3args; `guard` is `sattrguard3`: apply only if the ctime still matches.
    pub struct SetattrArgs {
        pub object: FileHandle,
        pub new_attributes: Sattr3,
        pub guard: Option<NfsTime3>,
    }
);

xdr_struct!(
    /// ACCESS3args: the `access` bits the client asks about.
    pub struct AccessArgs {
        pub object: FileHandle,
        pub access: u32,
    }
);

xdr_struct!(
    /// READ3args, and COMMIT3args (same fields: a range; `count` 0 = to the end of file).
    pub struct RangeArgs {
        pub file: FileHandle,
        pub offset_bytes: u64,
        pub count_bytes: u32,
    }
);

/// WRITE3args. On the wire `count` is sent too; it must equal `data.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgs {
    pub file: FileHandle,
    pub offset_bytes: u64,
    pub stable: StableHow,
    pub data: Vec<u8>,
}

impl XdrEncode for WriteArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.file);
        enc.put_u64(self.offset_bytes);
        enc.put_u32(u32::try_from(self.data.len()).unwrap_or(u32::MAX));
        enc.put(&self.stable);
        enc.put_opaque(&self.data);
    }
}

impl XdrDecode for WriteArgs {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let file = dec.get()?;
        let offset_bytes = dec.get_u64()?;
        let count_bytes = dec.get_u32()?;
        let stable = dec.get()?;
        let data = dec.get_opaque(dec.max_data_bytes(), "WRITE data")?;
        if count_bytes as usize != data.len() {
            return Err(XdrError::Mismatch {
                what: "WRITE count and data length",
                first: u64::from(count_bytes),
                second: data.len() as u64,
            });
        }
        Ok(Self {
            file,
            offset_bytes,
            stable,
            data: data.to_vec(),
        })
    }
}

/// `createhow3`: how CREATE treats an existing name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow {
    /// Create or truncate, setting these attributes.
    Unchecked(Sattr3),
    /// Fail with EXIST if the name exists.
    Guarded(Sattr3),
    /// Exactly-once creation keyed by the verifier (stored by the server with the file).
    Exclusive(CreateVerf),
}

impl XdrEncode for CreateHow {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            CreateHow::Unchecked(attributes) => {
                enc.put_u32(0);
                enc.put(attributes);
            }
            CreateHow::Guarded(attributes) => {
                enc.put_u32(1);
                enc.put(attributes);
            }
            CreateHow::Exclusive(verf) => {
                enc.put_u32(2);
                enc.put(verf);
            }
        }
    }
}

impl XdrDecode for CreateHow {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(CreateHow::Unchecked(dec.get()?)),
            1 => Ok(CreateHow::Guarded(dec.get()?)),
            2 => Ok(CreateHow::Exclusive(dec.get()?)),
            value => Err(XdrError::BadDiscriminant {
                what: "createmode3",
                value,
            }),
        }
    }
}

xdr_struct!(
    /// CREATE3args.
    pub struct CreateArgs {
        pub location: DirOpArgs3,
        pub how: CreateHow,
    }
);

xdr_struct!(
    /// MKDIR3args.
    pub struct MkdirArgs {
        pub location: DirOpArgs3,
        pub attributes: Sattr3,
    }
);

xdr_struct!(
    /// SYMLINK3args (`symlinkdata3` flattened).
    pub struct SymlinkArgs {
        pub location: DirOpArgs3,
        pub attributes: Sattr3,
        pub target: NfsPath,
    }
);

/// `mknoddata3`: what MKNOD makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MknodData {
    Chr(Sattr3, SpecData3),
    Blk(Sattr3, SpecData3),
    Sock(Sattr3),
    Fifo(Sattr3),
    /// REG, DIR or LNK: no body; the server answers NFS3ERR_BADTYPE.
    NotSpecial(Ftype3),
}

impl XdrEncode for MknodData {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            MknodData::Chr(attributes, spec) | MknodData::Blk(attributes, spec) => {
                let ftype = if matches!(self, MknodData::Chr(..)) {
                    Ftype3::Chr
                } else {
                    Ftype3::Blk
                };
                enc.put(&ftype);
                enc.put(attributes);
                enc.put(spec);
            }
            MknodData::Sock(attributes) => {
                enc.put(&Ftype3::Sock);
                enc.put(attributes);
            }
            MknodData::Fifo(attributes) => {
                enc.put(&Ftype3::Fifo);
                enc.put(attributes);
            }
            MknodData::NotSpecial(ftype) => enc.put(ftype),
        }
    }
}

impl XdrDecode for MknodData {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(match dec.get::<Ftype3>()? {
            Ftype3::Chr => MknodData::Chr(dec.get()?, dec.get()?),
            Ftype3::Blk => MknodData::Blk(dec.get()?, dec.get()?),
            Ftype3::Sock => MknodData::Sock(dec.get()?),
            Ftype3::Fifo => MknodData::Fifo(dec.get()?),
            other @ (Ftype3::Reg | Ftype3::Dir | Ftype3::Lnk) => MknodData::NotSpecial(other),
        })
    }
}

xdr_struct!(
    /// MKNOD3args.
    pub struct MknodArgs {
        pub location: DirOpArgs3,
        pub what: MknodData,
    }
);

xdr_struct!(
    /// RENAME3args.
    pub struct RenameArgs {
        pub from: DirOpArgs3,
        pub to: DirOpArgs3,
    }
);

xdr_struct!(
    /// LINK3args: a new name `link` for `file`.
    pub struct LinkArgs {
        pub file: FileHandle,
        pub link: DirOpArgs3,
    }
);

xdr_struct!(
    /// READDIR3args; `count_bytes` bounds the whole reply.
    pub struct ReaddirArgs {
        pub dir: FileHandle,
        pub cookie: u64,
        pub cookieverf: CookieVerf,
        pub count_bytes: u32,
    }
);

xdr_struct!(
    /// READDIRPLUS3args: `dircount_bytes` bounds the names and cookies, `maxcount_bytes` the
    /// whole reply.
    pub struct ReaddirplusArgs {
        pub dir: FileHandle,
        pub cookie: u64,
        pub cookieverf: CookieVerf,
        pub dircount_bytes: u32,
        pub maxcount_bytes: u32,
    }
);

/// A decoded NFSv3 call's arguments, one variant per procedure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs3Call {
    Null,
    Getattr(HandleArgs),
    Setattr(SetattrArgs),
    Lookup(DirOpArgs3),
    Access(AccessArgs),
    Readlink(HandleArgs),
    Read(RangeArgs),
    Write(WriteArgs),
    Create(CreateArgs),
    Mkdir(MkdirArgs),
    Symlink(SymlinkArgs),
    Mknod(MknodArgs),
    Remove(DirOpArgs3),
    Rmdir(DirOpArgs3),
    Rename(RenameArgs),
    Link(LinkArgs),
    Readdir(ReaddirArgs),
    Readdirplus(ReaddirplusArgs),
    Fsstat(HandleArgs),
    Fsinfo(HandleArgs),
    Pathconf(HandleArgs),
    Commit(RangeArgs),
}

impl Nfs3Call {
    pub fn procedure(&self) -> Nfs3Proc {
        match self {
            Nfs3Call::Null => Nfs3Proc::Null,
            Nfs3Call::Getattr(_) => Nfs3Proc::Getattr,
            Nfs3Call::Setattr(_) => Nfs3Proc::Setattr,
            Nfs3Call::Lookup(_) => Nfs3Proc::Lookup,
            Nfs3Call::Access(_) => Nfs3Proc::Access,
            Nfs3Call::Readlink(_) => Nfs3Proc::Readlink,
            Nfs3Call::Read(_) => Nfs3Proc::Read,
            Nfs3Call::Write(_) => Nfs3Proc::Write,
            Nfs3Call::Create(_) => Nfs3Proc::Create,
            Nfs3Call::Mkdir(_) => Nfs3Proc::Mkdir,
            Nfs3Call::Symlink(_) => Nfs3Proc::Symlink,
            Nfs3Call::Mknod(_) => Nfs3Proc::Mknod,
            Nfs3Call::Remove(_) => Nfs3Proc::Remove,
            Nfs3Call::Rmdir(_) => Nfs3Proc::Rmdir,
            Nfs3Call::Rename(_) => Nfs3Proc::Rename,
            Nfs3Call::Link(_) => Nfs3Proc::Link,
            Nfs3Call::Readdir(_) => Nfs3Proc::Readdir,
            Nfs3Call::Readdirplus(_) => Nfs3Proc::Readdirplus,
            Nfs3Call::Fsstat(_) => Nfs3Proc::Fsstat,
            Nfs3Call::Fsinfo(_) => Nfs3Proc::Fsinfo,
            Nfs3Call::Pathconf(_) => Nfs3Proc::Pathconf,
            Nfs3Call::Commit(_) => Nfs3Proc::Commit,
        }
    }
}

/// Encodes the arguments only (the RPC call header goes before them).
impl XdrEncode for Nfs3Call {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Nfs3Call::Null => {}
            Nfs3Call::Getattr(args)
            | Nfs3Call::Readlink(args)
            | Nfs3Call::Fsstat(args)
            | Nfs3Call::Fsinfo(args)
            | Nfs3Call::Pathconf(args) => enc.put(args),
            Nfs3Call::Setattr(args) => enc.put(args),
            Nfs3Call::Lookup(args) | Nfs3Call::Remove(args) | Nfs3Call::Rmdir(args) => {
                enc.put(args);
            }
            Nfs3Call::Access(args) => enc.put(args),
            Nfs3Call::Read(args) | Nfs3Call::Commit(args) => enc.put(args),
            Nfs3Call::Write(args) => enc.put(args),
            Nfs3Call::Create(args) => enc.put(args),
            Nfs3Call::Mkdir(args) => enc.put(args),
            Nfs3Call::Symlink(args) => enc.put(args),
            Nfs3Call::Mknod(args) => enc.put(args),
            Nfs3Call::Rename(args) => enc.put(args),
            Nfs3Call::Link(args) => enc.put(args),
            Nfs3Call::Readdir(args) => enc.put(args),
            Nfs3Call::Readdirplus(args) => enc.put(args),
        }
    }
}

/// Decodes the arguments of NFSv3 procedure `procedure` from `args` (the bytes after the RPC
/// call header), accepting WRITE data up to `max_data_bytes`. An unknown procedure is
/// [`XdrError::UnknownProcedure`] (reply PROC_UNAVAIL); any other error means GARBAGE_ARGS.
/// Bytes after the arguments are ignored.
pub fn decode_call(
    procedure: u32,
    args: &[u8],
    max_data_bytes: usize,
) -> Result<Nfs3Call, XdrError> {
    let proc = Nfs3Proc::from_u32(procedure).ok_or(XdrError::UnknownProcedure(procedure))?;
    let mut dec = Decoder::new(args).with_max_data_bytes(max_data_bytes);
    let dec = &mut dec;
    Ok(match proc {
        Nfs3Proc::Null => Nfs3Call::Null,
        Nfs3Proc::Getattr => Nfs3Call::Getattr(dec.get()?),
        Nfs3Proc::Setattr => Nfs3Call::Setattr(dec.get()?),
        Nfs3Proc::Lookup => Nfs3Call::Lookup(dec.get()?),
        Nfs3Proc::Access => Nfs3Call::Access(dec.get()?),
        Nfs3Proc::Readlink => Nfs3Call::Readlink(dec.get()?),
        Nfs3Proc::Read => Nfs3Call::Read(dec.get()?),
        Nfs3Proc::Write => Nfs3Call::Write(dec.get()?),
        Nfs3Proc::Create => Nfs3Call::Create(dec.get()?),
        Nfs3Proc::Mkdir => Nfs3Call::Mkdir(dec.get()?),
        Nfs3Proc::Symlink => Nfs3Call::Symlink(dec.get()?),
        Nfs3Proc::Mknod => Nfs3Call::Mknod(dec.get()?),
        Nfs3Proc::Remove => Nfs3Call::Remove(dec.get()?),
        Nfs3Proc::Rmdir => Nfs3Call::Rmdir(dec.get()?),
        Nfs3Proc::Rename => Nfs3Call::Rename(dec.get()?),
        Nfs3Proc::Link => Nfs3Call::Link(dec.get()?),
        Nfs3Proc::Readdir => Nfs3Call::Readdir(dec.get()?),
        Nfs3Proc::Readdirplus => Nfs3Call::Readdirplus(dec.get()?),
        Nfs3Proc::Fsstat => Nfs3Call::Fsstat(dec.get()?),
        Nfs3Proc::Fsinfo => Nfs3Call::Fsinfo(dec.get()?),
        Nfs3Proc::Pathconf => Nfs3Call::Pathconf(dec.get()?),
        Nfs3Proc::Commit => Nfs3Call::Commit(dec.get()?),
    })
}
