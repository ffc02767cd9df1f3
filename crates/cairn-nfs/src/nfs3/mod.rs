//! NFS version 3 (RFC 1813): the data types ([`types`]), every procedure's arguments
//! ([`args`], with [`decode_call`]) and results ([`results`], with [`Nfs3Reply`]).
//!
//! `types` is the base; `args` and `results` both build on it and never on each other
//! except for the procedure numbers ([`Nfs3Proc`], in `args`).

pub mod args;
pub mod results;
pub mod types;

pub use args::{
    AccessArgs, CreateArgs, CreateHow, HandleArgs, LinkArgs, MkdirArgs, MknodArgs, MknodData,
    NFS_V3, Nfs3Call, Nfs3Proc, RangeArgs, ReaddirArgs, ReaddirplusArgs, RenameArgs, SetattrArgs,
    SymlinkArgs, WriteArgs, decode_call,
};
pub use results::{
    AccessOk, CommitOk, CreateOk, DirListOk, Entry3, EntryPlus3, FsinfoOk, FsstatOk, LinkWcc,
    LookupOk, Nfs3Reply, PathconfOk, ReadOk, ReadlinkOk, RenameWcc, WriteOk, decode_reply,
};
pub use types::{
    CookieVerf, CreateVerf, DirOpArgs3, Fattr3, FileHandle, Filename, Ftype3, NFS3_OK, Nfs3Error,
    NfsPath, NfsTime3, Outcome, PostOpAttr, PostOpFh3, PreOpAttr, Sattr3, SetTime, SpecData3,
    StableHow, WccAttr, WccData, WriteVerf, access, fsf,
};
