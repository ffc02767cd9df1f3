//! cairn-nfs: the NFS wire layer — ONC RPC v2 framing and headers, and the XDR types of
//! NFSv3, MOUNT v3 and PORTMAP v2 — as pure encode/decode on byte buffers.
//!
//! **What for.** `cairn serve --nfs` (issue 35) answers NFSv3 clients from the filesystem
//! layer. This crate is its bottom: it turns bytes from a connection into typed calls and
//! typed results back into bytes, so the server above deals only in [`nfs3::Nfs3Call`],
//! [`nfs3::Nfs3Reply`] and friends. It depends on no other cairn crate and does no I/O of its
//! own except the optional blocking [`record::read_record`]; a Tokio server feeds socket reads
//! to [`record::RecordDecoder`].
//!
//! **Why our own codec (decided 2026-12, issue 35).** Candidates read:
//! - `nfsserve` 0.11 (the research digest's starting point): only its `xdr` and `nfs` modules
//!   are public; `rpc`, `mount` and `portmap` are private to its server. Its `Vec<u8>` decode
//!   calls `resize(length)` with the length read from the wire before reading the bytes, so a
//!   4-byte field of 0xffffffff allocates 4 GiB; names and handles have no bound. Using it
//!   would mean vendoring (copying) it, which the brief forbids, and fixing its core.
//! - `nfs3_types` 0.4 (the `nfs3_server` project): public mount/nfs3/portmap/rpc types on the
//!   `xdr-codec` traits, but its `Opaque` decode also does `vec![0; len]` on the wire's length
//!   and has no per-field bounds; young (0.x, one maintainer), types with lifetimes meant for
//!   its own server.
//! - `xdr-codec`, `serde-xdr`: general XDR without the RPC/NFS types or length bounds.
//!
//! The hostile-input rules issue 35 sets (bad input gets an error, never a panic or
//! unbounded memory) are exactly where these fall short, and the codec itself is small, so
//! cairn writes its own: an [`xdr::XdrEncode`]/[`xdr::XdrDecode`] pair over a byte cursor,
//! written from the RFCs (4506 XDR, 5531 RPC, 1813 NFSv3/MOUNT, 1833 PORTMAP); nothing was
//! copied from those crates.
//!
//! **Layers inside** (who uses whom; no loops): `record` uses nothing; `xdr` uses only
//! `record`'s framing constants (to frame a reply in place); `rpc`, `nfs3`, `portmap` use
//! `xdr`; `mount` also uses `nfs3`'s file handle; `nfs4` uses `xdr` and `rpc`'s AUTH_SYS
//! credential (CREATE_SESSION's callback credentials). Inside `nfs3`, `args` and `results` build on
//! `types`, and `results` takes the procedure numbers from `args`.
//!
//! **Invariants.** Nothing a peer sends can panic a decoder or make it allocate more than the
//! bytes it has received: records are bounded by the reader's `max_record_bytes`, each
//! variable-length field by its protocol maximum (handles 64 B, names 255 B, paths 1024 B,
//! credentials 400 B, AUTH_SYS groups 16) and file data by the `max_data_bytes` the server
//! gives (what it advertises in FSINFO, 1 MiB for cairn). Whatever this crate encodes,
//! it decodes to the same value.
//!
//! **Serving a call** (what the server does with this crate):
//! 1. [`record::RecordDecoder::feed`] → one record;
//! 2. [`rpc::parse_call`] → [`rpc::CallHeader`] (xid, program, version, procedure,
//!    [`rpc::Credential`]) and the argument bytes, or a [`rpc::CallError`] whose
//!    [`rpc::CallError::reply`] is the denial to send;
//! 3. by program: [`nfs3::decode_call`], [`mount::decode_mount_call`],
//!    [`portmap::decode_portmap_call`]; [`xdr::XdrError::UnknownProcedure`] → PROC_UNAVAIL,
//!    any other error → GARBAGE_ARGS ([`rpc::AcceptStat`]);
//! 4. reply: [`xdr::Encoder::for_record`], put [`rpc::ReplyHeader::success`] and the typed
//!    result, [`xdr::Encoder::into_record`] → bytes to write.

pub mod mount;
pub mod nfs3;
pub mod nfs4;
pub mod portmap;
pub mod record;
pub mod rpc;
pub mod xdr;

pub use xdr::{Decoder, Encoder, XdrDecode, XdrEncode, XdrError};
