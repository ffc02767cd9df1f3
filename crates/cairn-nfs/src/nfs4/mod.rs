//! NFS version 4.1 (RFC 8881): the data types ([`types`]), the attributes of `fattr4`
//! ([`attrs`]), COMPOUND and its operations' arguments ([`args`], with [`decode_compound`])
//! and results ([`results`], with [`CompoundReply`]).
//!
//! Served operations (the first step of docs/nfs-v4.md): sessions (EXCHANGE_ID,
//! CREATE_SESSION, SEQUENCE, DESTROY_SESSION, DESTROY_CLIENTID, RECLAIM_COMPLETE), handles
//! (PUTROOTFH, PUTFH, GETFH, SAVEFH, RESTOREFH, LOOKUP, LOOKUPP), GETATTR, ACCESS,
//! SECINFO_NO_NAME, OPEN, CLOSE, READ, WRITE, COMMIT, READDIR, REMOVE and SETATTR. Any other
//! defined operation decodes as [`args::Nfs4Op::NotSupported`], an undefined one as
//! [`args::Nfs4Op::Illegal`].
//!
//! `types` is the base; `attrs`, `args` and `results` build on it; `results` takes the
//! operation numbers and bounds from `args`.

pub mod args;
pub mod attrs;
pub mod results;
pub mod types;

pub use args::{CompoundArgs, NFS_V4, Nfs4Op, OpNum, decode_compound};
pub use attrs::{AttrError, AttrValues};
pub use results::{CompoundReply, Nfs4OpResult, decode_compound_reply};
pub use types::{Bitmap4, Fattr4, Nfs4Error, Nfs4Fh, OpResult, Stateid4};
