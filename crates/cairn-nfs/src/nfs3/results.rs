//! The results of the 22 NFSv3 procedures (RFC 1813 §3.3): one [`Outcome`] per procedure,
//! gathered in [`Nfs3Reply`], which the server encodes after the RPC reply header.
//!
//! Each result is `Outcome<Ok body, failure body>`; the failure bodies carry what RFC 1813
//! asks even on error (directory attributes, wcc data), so a client's cache stays coherent.
//! READ's `count` is its data's length, derived when encoding and checked when decoding.
//! [`decode_reply`] exists for tests and load generators (a server never decodes results).

use crate::xdr::{Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_struct};

use super::args::Nfs3Proc;
use super::types::{
    CookieVerf, Fattr3, FileHandle, Filename, NfsPath, NfsTime3, Outcome, PostOpAttr, PostOpFh3,
    StableHow, WccData, WriteVerf,
};

xdr_struct!(
    /// LOOKUP3resok.
    pub struct LookupOk {
        pub object: FileHandle,
        pub obj_attributes: PostOpAttr,
        pub dir_attributes: PostOpAttr,
    }
);

xdr_struct!(
    /// ACCESS3resok: the subset of the asked bits that are allowed.
    pub struct AccessOk {
        pub obj_attributes: PostOpAttr,
        pub access: u32,
    }
);

xdr_struct!(
    /// READLINK3resok.
    pub struct ReadlinkOk {
        pub symlink_attributes: PostOpAttr,
        pub target: NfsPath,
    }
);

/// READ3resok (`count` on the wire is `data.len()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOk {
    pub file_attributes: PostOpAttr,
    pub eof: bool,
    pub data: Vec<u8>,
}

impl XdrEncode for ReadOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.file_attributes);
        enc.put_u32(u32::try_from(self.data.len()).unwrap_or(u32::MAX));
        enc.put_bool(self.eof);
        enc.put_opaque(&self.data);
    }
}

impl XdrDecode for ReadOk {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let file_attributes = dec.get()?;
        let count_bytes = dec.get_u32()?;
        let eof = dec.get_bool()?;
        let data = dec.get_opaque(dec.max_data_bytes(), "READ data")?;
        if count_bytes as usize != data.len() {
            return Err(XdrError::Mismatch {
                what: "READ count and data length",
                first: u64::from(count_bytes),
                second: data.len() as u64,
            });
        }
        Ok(Self {
            file_attributes,
            eof,
            data: data.to_vec(),
        })
    }
}

xdr_struct!(
    /// WRITE3resok: how many bytes were written, how durably, under which verifier.
    pub struct WriteOk {
        pub file_wcc: WccData,
        pub count_bytes: u32,
        pub committed: StableHow,
        pub verf: WriteVerf,
    }
);

xdr_struct!(
    /// CREATE3resok, also MKDIR, SYMLINK and MKNOD's.
    pub struct CreateOk {
        pub object: PostOpFh3,
        pub obj_attributes: PostOpAttr,
        pub dir_wcc: WccData,
    }
);

xdr_struct!(
    /// RENAME3resok and RENAME3resfail.
    pub struct RenameWcc {
        pub fromdir_wcc: WccData,
        pub todir_wcc: WccData,
    }
);

xdr_struct!(
    /// LINK3resok and LINK3resfail.
    pub struct LinkWcc {
        pub file_attributes: PostOpAttr,
        pub linkdir_wcc: WccData,
    }
);

xdr_struct!(
    /// `entry3`: one READDIR entry.
    pub struct Entry3 {
        pub fileid: u64,
        pub name: Filename,
        pub cookie: u64,
    }
);

xdr_struct!(
    /// `entryplus3`: one READDIRPLUS entry.
    pub struct EntryPlus3 {
        pub fileid: u64,
        pub name: Filename,
        pub cookie: u64,
        pub name_attributes: PostOpAttr,
        pub name_handle: PostOpFh3,
    }
);

/// READDIR3resok and READDIRPLUS3resok (`dirlist3` flattened): `T` is [`Entry3`] or
/// [`EntryPlus3`]. Each entry costs its encoded size plus 4 bytes of list link on the wire
/// ([`crate::xdr::encoded_len_bytes`] helps a server fill a reply up to the client's count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirListOk<T> {
    pub dir_attributes: PostOpAttr,
    pub cookieverf: CookieVerf,
    pub entries: Vec<T>,
    pub eof: bool,
}

impl<T: XdrEncode> XdrEncode for DirListOk<T> {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.dir_attributes);
        enc.put(&self.cookieverf);
        crate::xdr::put_list(enc, &self.entries);
        enc.put_bool(self.eof);
    }
}

impl<T: XdrDecode> XdrDecode for DirListOk<T> {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Self {
            dir_attributes: dec.get()?,
            cookieverf: dec.get()?,
            entries: dec.get_list()?,
            eof: dec.get_bool()?,
        })
    }
}

xdr_struct!(
    /// FSSTAT3resok: space and files, total / free / available to this user.
    pub struct FsstatOk {
        pub obj_attributes: PostOpAttr,
        pub total_bytes: u64,
        pub free_bytes: u64,
        pub avail_bytes: u64,
        pub total_files: u64,
        pub free_files: u64,
        pub avail_files: u64,
        /// Seconds for which these figures will not change (0: ask again).
        pub invarsec: u32,
    }
);

xdr_struct!(
    /// FSINFO3resok: the transfer sizes and properties the server advertises.
    pub struct FsinfoOk {
        pub obj_attributes: PostOpAttr,
        pub rtmax_bytes: u32,
        pub rtpref_bytes: u32,
        pub rtmult_bytes: u32,
        pub wtmax_bytes: u32,
        pub wtpref_bytes: u32,
        pub wtmult_bytes: u32,
        pub dtpref_bytes: u32,
        pub maxfilesize_bytes: u64,
        pub time_delta: NfsTime3,
        /// `FSF3_*` bits ([`super::types::fsf`]).
        pub properties: u32,
    }
);

xdr_struct!(
    /// PATHCONF3resok.
    pub struct PathconfOk {
        pub obj_attributes: PostOpAttr,
        pub linkmax: u32,
        pub name_max: u32,
        pub no_trunc: bool,
        pub chown_restricted: bool,
        pub case_insensitive: bool,
        pub case_preserving: bool,
    }
);

xdr_struct!(
    /// COMMIT3resok.
    pub struct CommitOk {
        pub file_wcc: WccData,
        pub verf: WriteVerf,
    }
);

/// A typed NFSv3 result, one variant per procedure (CREATE, MKDIR, SYMLINK and MKNOD share
/// a result type, as do REMOVE and RMDIR).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs3Reply {
    Null,
    Getattr(Outcome<Fattr3, ()>),
    Setattr(Outcome<WccData, WccData>),
    Lookup(Outcome<LookupOk, PostOpAttr>),
    Access(Outcome<AccessOk, PostOpAttr>),
    Readlink(Outcome<ReadlinkOk, PostOpAttr>),
    Read(Outcome<ReadOk, PostOpAttr>),
    Write(Outcome<WriteOk, WccData>),
    Create(Outcome<CreateOk, WccData>),
    Mkdir(Outcome<CreateOk, WccData>),
    Symlink(Outcome<CreateOk, WccData>),
    Mknod(Outcome<CreateOk, WccData>),
    Remove(Outcome<WccData, WccData>),
    Rmdir(Outcome<WccData, WccData>),
    Rename(Outcome<RenameWcc, RenameWcc>),
    Link(Outcome<LinkWcc, LinkWcc>),
    Readdir(Outcome<DirListOk<Entry3>, PostOpAttr>),
    Readdirplus(Outcome<DirListOk<EntryPlus3>, PostOpAttr>),
    Fsstat(Outcome<FsstatOk, PostOpAttr>),
    Fsinfo(Outcome<FsinfoOk, PostOpAttr>),
    Pathconf(Outcome<PathconfOk, PostOpAttr>),
    Commit(Outcome<CommitOk, WccData>),
}

impl XdrEncode for Nfs3Reply {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Nfs3Reply::Null => {}
            Nfs3Reply::Getattr(res) => enc.put(res),
            Nfs3Reply::Setattr(res) | Nfs3Reply::Remove(res) | Nfs3Reply::Rmdir(res) => {
                enc.put(res);
            }
            Nfs3Reply::Lookup(res) => enc.put(res),
            Nfs3Reply::Access(res) => enc.put(res),
            Nfs3Reply::Readlink(res) => enc.put(res),
            Nfs3Reply::Read(res) => enc.put(res),
            Nfs3Reply::Write(res) => enc.put(res),
            Nfs3Reply::Create(res)
            | Nfs3Reply::Mkdir(res)
            | Nfs3Reply::Symlink(res)
            | Nfs3Reply::Mknod(res) => enc.put(res),
            Nfs3Reply::Rename(res) => enc.put(res),
            Nfs3Reply::Link(res) => enc.put(res),
            Nfs3Reply::Readdir(res) => enc.put(res),
            Nfs3Reply::Readdirplus(res) => enc.put(res),
            Nfs3Reply::Fsstat(res) => enc.put(res),
            Nfs3Reply::Fsinfo(res) => enc.put(res),
            Nfs3Reply::Pathconf(res) => enc.put(res),
            Nfs3Reply::Commit(res) => enc.put(res),
        }
    }
}

impl Nfs3Reply {
    pub fn procedure(&self) -> Nfs3Proc {
        match self {
            Nfs3Reply::Null => Nfs3Proc::Null,
            Nfs3Reply::Getattr(_) => Nfs3Proc::Getattr,
            Nfs3Reply::Setattr(_) => Nfs3Proc::Setattr,
            Nfs3Reply::Lookup(_) => Nfs3Proc::Lookup,
            Nfs3Reply::Access(_) => Nfs3Proc::Access,
            Nfs3Reply::Readlink(_) => Nfs3Proc::Readlink,
            Nfs3Reply::Read(_) => Nfs3Proc::Read,
            Nfs3Reply::Write(_) => Nfs3Proc::Write,
            Nfs3Reply::Create(_) => Nfs3Proc::Create,
            Nfs3Reply::Mkdir(_) => Nfs3Proc::Mkdir,
            Nfs3Reply::Symlink(_) => Nfs3Proc::Symlink,
            Nfs3Reply::Mknod(_) => Nfs3Proc::Mknod,
            Nfs3Reply::Remove(_) => Nfs3Proc::Remove,
            Nfs3Reply::Rmdir(_) => Nfs3Proc::Rmdir,
            Nfs3Reply::Rename(_) => Nfs3Proc::Rename,
            Nfs3Reply::Link(_) => Nfs3Proc::Link,
            Nfs3Reply::Readdir(_) => Nfs3Proc::Readdir,
            Nfs3Reply::Readdirplus(_) => Nfs3Proc::Readdirplus,
            Nfs3Reply::Fsstat(_) => Nfs3Proc::Fsstat,
            Nfs3Reply::Fsinfo(_) => Nfs3Proc::Fsinfo,
            Nfs3Reply::Pathconf(_) => Nfs3Proc::Pathconf,
            Nfs3Reply::Commit(_) => Nfs3Proc::Commit,
        }
    }
}

/// Decodes the results of procedure `procedure` (the bytes after a SUCCESS reply header),
/// accepting READ data up to `max_data_bytes`.
pub fn decode_reply(
    procedure: u32,
    results: &[u8],
    max_data_bytes: usize,
) -> Result<Nfs3Reply, XdrError> {
    let proc = Nfs3Proc::from_u32(procedure).ok_or(XdrError::UnknownProcedure(procedure))?;
    let mut dec = Decoder::new(results).with_max_data_bytes(max_data_bytes);
    let dec = &mut dec;
    Ok(match proc {
        Nfs3Proc::Null => Nfs3Reply::Null,
        Nfs3Proc::Getattr => Nfs3Reply::Getattr(dec.get()?),
        Nfs3Proc::Setattr => Nfs3Reply::Setattr(dec.get()?),
        Nfs3Proc::Lookup => Nfs3Reply::Lookup(dec.get()?),
        Nfs3Proc::Access => Nfs3Reply::Access(dec.get()?),
        Nfs3Proc::Readlink => Nfs3Reply::Readlink(dec.get()?),
        Nfs3Proc::Read => Nfs3Reply::Read(dec.get()?),
        Nfs3Proc::Write => Nfs3Reply::Write(dec.get()?),
        Nfs3Proc::Create => Nfs3Reply::Create(dec.get()?),
        Nfs3Proc::Mkdir => Nfs3Reply::Mkdir(dec.get()?),
        Nfs3Proc::Symlink => Nfs3Reply::Symlink(dec.get()?),
        Nfs3Proc::Mknod => Nfs3Reply::Mknod(dec.get()?),
        Nfs3Proc::Remove => Nfs3Reply::Remove(dec.get()?),
        Nfs3Proc::Rmdir => Nfs3Reply::Rmdir(dec.get()?),
        Nfs3Proc::Rename => Nfs3Reply::Rename(dec.get()?),
        Nfs3Proc::Link => Nfs3Reply::Link(dec.get()?),
        Nfs3Proc::Readdir => Nfs3Reply::Readdir(dec.get()?),
        Nfs3Proc::Readdirplus => Nfs3Reply::Readdirplus(dec.get()?),
        Nfs3Proc::Fsstat => Nfs3Reply::Fsstat(dec.get()?),
        Nfs3Proc::Fsinfo => Nfs3Reply::Fsinfo(dec.get()?),
        Nfs3Proc::Pathconf => Nfs3Reply::Pathconf(dec.get()?),
        Nfs3Proc::Commit => Nfs3Reply::Commit(dec.get()?),
    })
}
