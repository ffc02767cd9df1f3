//! ONC RPC version 2 messages (RFC 5531): the call header in front of every NFS, MOUNT and
//! PORTMAP call, credentials, and the reply header in front of every result.
//!
//! **Shape.** [`parse_call`] splits a record into a [`CallHeader`] and the argument bytes,
//! which the program's own decoder (e.g. [`crate::nfs3::decode_call`]) reads. A record that
//! is a call but cannot be served (wrong RPC version, unusable credential) yields a
//! [`CallError`] that knows its xid, and [`CallError::reply`] gives the denial to send; a
//! record too broken to have an xid yields no reply (the server drops it or the connection).
//! Replies are a [`ReplyHeader`] followed, for [`AcceptStat::Success`], by the results.
//!
//! **Bounds.** Credential and verifier bodies ≤ 400 bytes; AUTH_SYS machine names ≤ 255 bytes
//! and at most 16 supplementary groups, as RFC 5531 states them.

use thiserror::Error;

use crate::xdr::{Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_bounded_bytes, xdr_enum};

/// The only RPC protocol version (the `rpcvers` of every call).
pub const RPC_VERSION: u32 = 2;
/// Program number of PORTMAP/rpcbind.
pub const PROGRAM_PORTMAP: u32 = 100_000;
/// Program number of NFS.
pub const PROGRAM_NFS: u32 = 100_003;
/// Program number of MOUNT.
pub const PROGRAM_MOUNT: u32 = 100_005;

/// Credential flavor: none.
pub const AUTH_NONE: u32 = 0;
/// Credential flavor: UNIX uid/gid (called AUTH_UNIX in older texts).
pub const AUTH_SYS: u32 = 1;
/// Credential flavor: short-hand handle (never issued by this server).
pub const AUTH_SHORT: u32 = 2;
/// Credential flavor: Diffie-Hellman.
pub const AUTH_DH: u32 = 3;
/// Credential flavor: RPCSEC_GSS (Kerberos).
pub const RPCSEC_GSS: u32 = 6;

const MSG_CALL: u32 = 0;
const MSG_REPLY: u32 = 1;
const REPLY_ACCEPTED: u32 = 0;
const REPLY_DENIED: u32 = 1;

/// Longest credential or verifier body.
pub const MAX_AUTH_BYTES: usize = 400;
/// Most supplementary groups in an AUTH_SYS credential.
pub const MAX_AUTH_SYS_GIDS: usize = 16;

/// A credential or verifier as sent: flavor and opaque body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpaqueAuth {
    pub flavor: u32,
    pub body: Vec<u8>,
}

impl OpaqueAuth {
    /// AUTH_NONE with an empty body: the verifier of every reply this server sends.
    pub fn none() -> Self {
        Self::default()
    }
}

impl XdrEncode for OpaqueAuth {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u32(self.flavor);
        enc.put_opaque(&self.body);
    }
}

impl XdrDecode for OpaqueAuth {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let flavor = dec.get_u32()?;
        let body = dec.get_opaque(MAX_AUTH_BYTES, "auth body")?.to_vec();
        Ok(Self { flavor, body })
    }
}

xdr_bounded_bytes!(
    /// An AUTH_SYS machine name (≤ 255 bytes, not necessarily UTF-8).
    pub struct MachineName, max = 255, what = "machine name"
);

/// An AUTH_SYS credential (`authsys_parms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSys {
    pub stamp: u32,
    pub machine_name: MachineName,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, at most [`MAX_AUTH_SYS_GIDS`].
    pub gids: Vec<u32>,
}

impl XdrEncode for AuthSys {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u32(self.stamp);
        enc.put(&self.machine_name);
        enc.put_u32(self.uid);
        enc.put_u32(self.gid);
        crate::xdr::put_array(enc, &self.gids);
    }
}

impl XdrDecode for AuthSys {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Self {
            stamp: dec.get_u32()?,
            machine_name: dec.get()?,
            uid: dec.get_u32()?,
            gid: dec.get_u32()?,
            gids: dec.get_array(MAX_AUTH_SYS_GIDS, "AUTH_SYS gids")?,
        })
    }
}

/// A call's credential, interpreted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    None,
    Sys(AuthSys),
    /// A flavor this layer does not interpret (the server answers AUTH_ERROR TOOWEAK or
    /// BADCRED as its policy says).
    Other(OpaqueAuth),
}

impl Credential {
    /// Interprets a credential; an AUTH_SYS body that does not parse (or has bytes after its
    /// groups) is an error, answered with AUTH_BADCRED.
    pub fn from_opaque(auth: OpaqueAuth) -> Result<Self, XdrError> {
        match auth.flavor {
            AUTH_NONE => Ok(Credential::None),
            AUTH_SYS => {
                let mut dec = Decoder::new(&auth.body);
                let sys = AuthSys::decode(&mut dec)?;
                if dec.remaining_bytes() != 0 {
                    return Err(XdrError::Mismatch {
                        what: "AUTH_SYS body and its fields' length",
                        first: auth.body.len() as u64,
                        second: (auth.body.len() - dec.remaining_bytes()) as u64,
                    });
                }
                Ok(Credential::Sys(sys))
            }
            _ => Ok(Credential::Other(auth)),
        }
    }

    pub fn to_opaque(&self) -> OpaqueAuth {
        match self {
            Credential::None => OpaqueAuth::none(),
            Credential::Sys(sys) => {
                let mut enc = Encoder::new();
                sys.encode(&mut enc);
                OpaqueAuth {
                    flavor: AUTH_SYS,
                    body: enc.into_bytes(),
                }
            }
            Credential::Other(auth) => auth.clone(),
        }
    }
}

/// The header of an RPC call (`rpc_msg` with a `call_body`, `rpcvers` = 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHeader {
    pub xid: u32,
    pub program: u32,
    pub version: u32,
    pub procedure: u32,
    pub credential: Credential,
    pub verifier: OpaqueAuth,
}

impl XdrEncode for CallHeader {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u32(self.xid);
        enc.put_u32(MSG_CALL);
        enc.put_u32(RPC_VERSION);
        enc.put_u32(self.program);
        enc.put_u32(self.version);
        enc.put_u32(self.procedure);
        enc.put(&self.credential.to_opaque());
        enc.put(&self.verifier);
    }
}

/// Why a record could not be taken as a call.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CallError {
    /// Not even an xid and message type: nothing can be answered.
    #[error("unreadable RPC message: {0}")]
    Unreadable(XdrError),
    /// A reply or an unknown message type sent to a server: ignored.
    #[error("RPC message {xid:#x} has type {msg_type}, not CALL")]
    NotACall { xid: u32, msg_type: u32 },
    /// `rpcvers` ≠ 2: answered with RPC_MISMATCH (2, 2).
    #[error("RPC call {xid:#x} has RPC version {version}, not 2")]
    RpcMismatch { xid: u32, version: u32 },
    /// The header after the version does not parse, or the credential is malformed:
    /// answered with AUTH_ERROR (`stat`) when the header got as far as the credential.
    #[error("RPC call {xid:#x} has a bad header or credential: {error}")]
    BadHeader {
        xid: u32,
        stat: AuthStat,
        error: XdrError,
    },
}

impl CallError {
    /// The reply the server should send, if any.
    pub fn reply(&self) -> Option<ReplyHeader> {
        match self {
            CallError::Unreadable(_) | CallError::NotACall { .. } => None,
            CallError::RpcMismatch { xid, .. } => Some(ReplyHeader::denied(
                *xid,
                RejectStat::RpcMismatch {
                    low: RPC_VERSION,
                    high: RPC_VERSION,
                },
            )),
            CallError::BadHeader { xid, stat, .. } => {
                Some(ReplyHeader::denied(*xid, RejectStat::AuthError(*stat)))
            }
        }
    }
}

/// Reads a call's header from a whole record; returns it with the argument bytes that follow.
pub fn parse_call(record: &[u8]) -> Result<(CallHeader, &[u8]), CallError> {
    let mut dec = Decoder::new(record);
    let xid = dec.get_u32().map_err(CallError::Unreadable)?;
    let msg_type = dec.get_u32().map_err(CallError::Unreadable)?;
    if msg_type != MSG_CALL {
        return Err(CallError::NotACall { xid, msg_type });
    }
    let version = dec.get_u32().map_err(CallError::Unreadable)?;
    if version != RPC_VERSION {
        return Err(CallError::RpcMismatch { xid, version });
    }
    let bad = |stat: AuthStat| move |error| CallError::BadHeader { xid, stat, error };
    let program = dec.get_u32().map_err(bad(AuthStat::BadCred))?;
    let version = dec.get_u32().map_err(bad(AuthStat::BadCred))?;
    let procedure = dec.get_u32().map_err(bad(AuthStat::BadCred))?;
    let credential = OpaqueAuth::decode(&mut dec).map_err(bad(AuthStat::BadCred))?;
    let credential = Credential::from_opaque(credential).map_err(bad(AuthStat::BadCred))?;
    let verifier = OpaqueAuth::decode(&mut dec).map_err(bad(AuthStat::BadVerf))?;
    let header = CallHeader {
        xid,
        program,
        version,
        procedure,
        credential,
        verifier,
    };
    Ok((header, dec.rest()))
}

xdr_enum!(
    /// Why a credential or verifier was refused (`auth_stat`).
    pub enum AuthStat {
        Ok = 0,
        BadCred = 1,
        RejectedCred = 2,
        BadVerf = 3,
        RejectedVerf = 4,
        TooWeak = 5,
        InvalidResp = 6,
        Failed = 7,
        KerbGeneric = 8,
        TimeExpire = 9,
        TktFile = 10,
        Decode = 11,
        NetAddr = 12,
        RpcsecGssCredProblem = 13,
        RpcsecGssCtxProblem = 14,
    }
);

/// The outcome of an accepted call (`accept_stat` and its arms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptStat {
    /// The procedure's results follow the header.
    Success,
    ProgUnavail,
    ProgMismatch {
        low: u32,
        high: u32,
    },
    ProcUnavail,
    GarbageArgs,
    SystemErr,
}

/// Why a call was denied (`reject_stat` and its arms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectStat {
    RpcMismatch { low: u32, high: u32 },
    AuthError(AuthStat),
}

/// The body of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    Accepted {
        verifier: OpaqueAuth,
        stat: AcceptStat,
    },
    Denied(RejectStat),
}

/// The header of an RPC reply; for [`AcceptStat::Success`] the results are encoded after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHeader {
    pub xid: u32,
    pub body: ReplyBody,
}

impl ReplyHeader {
    /// An accepted reply with an AUTH_NONE verifier.
    pub fn accepted(xid: u32, stat: AcceptStat) -> Self {
        Self {
            xid,
            body: ReplyBody::Accepted {
                verifier: OpaqueAuth::none(),
                stat,
            },
        }
    }

    /// The header of a successful reply (results to follow).
    pub fn success(xid: u32) -> Self {
        Self::accepted(xid, AcceptStat::Success)
    }

    pub fn denied(xid: u32, stat: RejectStat) -> Self {
        Self {
            xid,
            body: ReplyBody::Denied(stat),
        }
    }
}

impl XdrEncode for ReplyHeader {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u32(self.xid);
        enc.put_u32(MSG_REPLY);
        match &self.body {
            ReplyBody::Accepted { verifier, stat } => {
                enc.put_u32(REPLY_ACCEPTED);
                enc.put(verifier);
                encode_accept_stat(enc, *stat);
            }
            ReplyBody::Denied(stat) => {
                enc.put_u32(REPLY_DENIED);
                match stat {
                    RejectStat::RpcMismatch { low, high } => {
                        enc.put_u32(0);
                        enc.put_u32(*low);
                        enc.put_u32(*high);
                    }
                    RejectStat::AuthError(auth) => {
                        enc.put_u32(1);
                        enc.put(auth);
                    }
                }
            }
        }
    }
}

fn encode_accept_stat(enc: &mut Encoder, stat: AcceptStat) {
    match stat {
        AcceptStat::Success => enc.put_u32(0),
        AcceptStat::ProgUnavail => enc.put_u32(1),
        AcceptStat::ProgMismatch { low, high } => {
            enc.put_u32(2);
            enc.put_u32(low);
            enc.put_u32(high);
        }
        AcceptStat::ProcUnavail => enc.put_u32(3),
        AcceptStat::GarbageArgs => enc.put_u32(4),
        AcceptStat::SystemErr => enc.put_u32(5),
    }
}

fn decode_accept_stat(dec: &mut Decoder<'_>) -> Result<AcceptStat, XdrError> {
    Ok(match dec.get_u32()? {
        0 => AcceptStat::Success,
        1 => AcceptStat::ProgUnavail,
        2 => AcceptStat::ProgMismatch {
            low: dec.get_u32()?,
            high: dec.get_u32()?,
        },
        3 => AcceptStat::ProcUnavail,
        4 => AcceptStat::GarbageArgs,
        5 => AcceptStat::SystemErr,
        value => {
            return Err(XdrError::BadDiscriminant {
                what: "accept_stat",
                value,
            });
        }
    })
}

/// Decoding a reply (for clients and tests): after it, the decoder is at the results.
impl XdrDecode for ReplyHeader {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let xid = dec.get_u32()?;
        let msg_type = dec.get_u32()?;
        if msg_type != MSG_REPLY {
            return Err(XdrError::BadDiscriminant {
                what: "msg_type of a reply",
                value: msg_type,
            });
        }
        let body = match dec.get_u32()? {
            REPLY_ACCEPTED => ReplyBody::Accepted {
                verifier: dec.get()?,
                stat: decode_accept_stat(dec)?,
            },
            REPLY_DENIED => ReplyBody::Denied(match dec.get_u32()? {
                0 => RejectStat::RpcMismatch {
                    low: dec.get_u32()?,
                    high: dec.get_u32()?,
                },
                1 => RejectStat::AuthError(dec.get()?),
                value => {
                    return Err(XdrError::BadDiscriminant {
                        what: "reject_stat",
                        value,
                    });
                }
            }),
            value => {
                return Err(XdrError::BadDiscriminant {
                    what: "reply_stat",
                    value,
                });
            }
        };
        Ok(Self { xid, body })
    }
}
