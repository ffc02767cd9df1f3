//! COMPOUND's results (RFC 8881 §16.2) and those of the operations cairn serves. Each
//! result is an [`OpResult`] (status, and the body only on success) except SETATTR's, whose
//! `attrsset` comes with every status. [`decode_compound_reply`] exists for tests and clients
//! (a server never decodes results).
//!
//! READ's data is bounded by the decoder's `max_data_bytes`, READDIR's entries by the input
//! alone (each costs at least a list link).

use crate::xdr::{Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_struct};

use super::args::{COMPOUND_OPS_MAX, OpNum, TAG_BYTES_MAX};
use super::types::{
    Bitmap4, ChangeInfo4, ChannelAttrs4, Component, Fattr4, ImplId4, NFS4_OK, Nfs4Error, Nfs4Fh,
    OneAtMost, OpResult, Opaque4, SessionId, StableHow4, StateProtectOps4, Stateid4, Verifier4,
};

/// `state_protect4_r`: the protection granted (SSV is never granted by cairn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4R {
    None,
    MachCred(StateProtectOps4),
}

impl XdrEncode for StateProtect4R {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            StateProtect4R::None => enc.put_u32(0),
            StateProtect4R::MachCred(ops) => {
                enc.put_u32(1);
                enc.put(ops);
            }
        }
    }
}

impl XdrDecode for StateProtect4R {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(StateProtect4R::None),
            1 => Ok(StateProtect4R::MachCred(dec.get()?)),
            value => Err(XdrError::BadDiscriminant {
                what: "state_protect_how4",
                value,
            }),
        }
    }
}

xdr_struct!(
    /// EXCHANGE_ID4resok.
    pub struct ExchangeIdOk {
        pub clientid: u64,
        pub sequenceid: u32,
        pub flags: u32,
        pub state_protect: StateProtect4R,
        pub server_minor_id: u64,
        pub server_major_id: Opaque4,
        pub server_scope: Opaque4,
        pub server_impl_id: OneAtMost<ImplId4>,
    }
);

xdr_struct!(
    /// CREATE_SESSION4resok.
    pub struct CreateSessionOk {
        pub sessionid: SessionId,
        pub sequence: u32,
        pub flags: u32,
        pub fore_chan: ChannelAttrs4,
        pub back_chan: ChannelAttrs4,
    }
);

xdr_struct!(
    /// SEQUENCE4resok.
    pub struct SequenceOk {
        pub sessionid: SessionId,
        pub sequenceid: u32,
        pub slotid: u32,
        pub highest_slotid: u32,
        pub target_highest_slotid: u32,
        pub status_flags: u32,
    }
);

xdr_struct!(
    /// ACCESS4resok: the bits the server could check, and those granted.
    pub struct AccessOk {
        pub supported: u32,
        pub access: u32,
    }
);

/// `open_delegation4` as cairn answers it: no delegation (v4.1's NONE_EXT carries why;
/// read and write delegations are not granted and do not decode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenDelegation4 {
    None,
    /// `why_no_delegation4` (and, for CONTENTION and RESOURCE, whether the server will
    /// signal availability).
    NoneExt {
        why: u32,
        will_signal: bool,
    },
}

/// `why_no_delegation4`: the two reasons that carry a flag.
const WND4_CONTENTION: u32 = 4;
const WND4_RESOURCE: u32 = 5;

impl XdrEncode for OpenDelegation4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            OpenDelegation4::None => enc.put_u32(0),
            OpenDelegation4::NoneExt { why, will_signal } => {
                enc.put_u32(3);
                enc.put_u32(*why);
                if matches!(*why, WND4_CONTENTION | WND4_RESOURCE) {
                    enc.put_bool(*will_signal);
                }
            }
        }
    }
}

impl XdrDecode for OpenDelegation4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(OpenDelegation4::None),
            3 => {
                let why = dec.get_u32()?;
                let will_signal = if matches!(why, WND4_CONTENTION | WND4_RESOURCE) {
                    dec.get_bool()?
                } else {
                    false
                };
                Ok(OpenDelegation4::NoneExt { why, will_signal })
            }
            value => Err(XdrError::BadDiscriminant {
                what: "open_delegation_type4",
                value,
            }),
        }
    }
}

xdr_struct!(
    /// OPEN4resok.
    pub struct OpenOk {
        pub stateid: Stateid4,
        pub cinfo: ChangeInfo4,
        pub rflags: u32,
        pub attrset: Bitmap4,
        pub delegation: OpenDelegation4,
    }
);

/// OPEN4resok's `rflags`.
pub mod open4_result {
    pub const CONFIRM: u32 = 0x2;
    pub const LOCKTYPE_POSIX: u32 = 0x4;
    pub const PRESERVE_UNLINKED: u32 = 0x8;
    pub const MAY_NOTIFY_LOCK: u32 = 0x20;
}

/// READ4resok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOk {
    pub eof: bool,
    pub data: Vec<u8>,
}

impl XdrEncode for ReadOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_bool(self.eof);
        enc.put_opaque(&self.data);
    }
}

impl XdrDecode for ReadOk {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(ReadOk {
            eof: dec.get_bool()?,
            data: dec.get_opaque(dec.max_data_bytes(), "READ data")?.to_vec(),
        })
    }
}

xdr_struct!(
    /// WRITE4resok.
    pub struct WriteOk {
        pub count_bytes: u32,
        pub committed: StableHow4,
        pub verf: Verifier4,
    }
);

xdr_struct!(
    /// `entry4` without its list link.
    pub struct Entry4 {
        pub cookie: u64,
        pub name: Component,
        pub attrs: Fattr4,
    }
);

/// READDIR4resok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirOk {
    pub cookieverf: Verifier4,
    pub entries: Vec<Entry4>,
    pub eof: bool,
}

impl XdrEncode for ReaddirOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.cookieverf);
        crate::xdr::put_list(enc, &self.entries);
        enc.put_bool(self.eof);
    }
}

impl XdrDecode for ReaddirOk {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(ReaddirOk {
            cookieverf: dec.get()?,
            entries: dec.get_list()?,
            eof: dec.get_bool()?,
        })
    }
}

/// One `secinfo4`: a flavor, with RPCSEC_GSS's mechanism details (oid, qop, service).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecInfo4 {
    Flavor(u32),
    Gss {
        oid: Opaque4,
        qop: u32,
        service: u32,
    },
}

impl XdrEncode for SecInfo4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SecInfo4::Flavor(flavor) => enc.put_u32(*flavor),
            SecInfo4::Gss { oid, qop, service } => {
                enc.put_u32(crate::rpc::RPCSEC_GSS);
                enc.put(oid);
                enc.put_u32(*qop);
                enc.put_u32(*service);
            }
        }
    }
}

impl XdrDecode for SecInfo4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            crate::rpc::RPCSEC_GSS => Ok(SecInfo4::Gss {
                oid: dec.get()?,
                qop: dec.get_u32()?,
                service: dec.get_u32()?,
            }),
            flavor => Ok(SecInfo4::Flavor(flavor)),
        }
    }
}

/// Flavors in one SECINFO answer this codec decodes.
pub const SECINFO_FLAVORS_MAX: usize = 16;

/// SECINFO4resok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecinfoOk(pub Vec<SecInfo4>);

impl XdrEncode for SecinfoOk {
    fn encode(&self, enc: &mut Encoder) {
        crate::xdr::put_array(enc, &self.0);
    }
}

impl XdrDecode for SecinfoOk {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(SecinfoOk(dec.get_array(SECINFO_FLAVORS_MAX, "secinfo4")?))
    }
}

/// SETATTR4res: the status and, whatever it is, the attributes set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetattrRes {
    pub status: Result<(), Nfs4Error>,
    pub attrsset: Bitmap4,
}

impl XdrEncode for SetattrRes {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.status);
        enc.put(&self.attrsset);
    }
}

impl XdrDecode for SetattrRes {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(SetattrRes {
            status: dec.get()?,
            attrsset: dec.get()?,
        })
    }
}

/// The result of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs4OpResult {
    Access(OpResult<AccessOk>),
    Close(OpResult<Stateid4>),
    Commit(OpResult<Verifier4>),
    Getattr(OpResult<Fattr4>),
    Getfh(OpResult<Nfs4Fh>),
    Lookup(OpResult<()>),
    Lookupp(OpResult<()>),
    Open(OpResult<Box<OpenOk>>),
    Putfh(OpResult<()>),
    Putrootfh(OpResult<()>),
    Read(OpResult<ReadOk>),
    Readdir(OpResult<ReaddirOk>),
    Remove(OpResult<ChangeInfo4>),
    Restorefh(OpResult<()>),
    Savefh(OpResult<()>),
    Setattr(SetattrRes),
    Write(OpResult<WriteOk>),
    ExchangeId(OpResult<Box<ExchangeIdOk>>),
    CreateSession(OpResult<CreateSessionOk>),
    DestroySession(OpResult<()>),
    SecinfoNoName(OpResult<SecinfoOk>),
    Sequence(OpResult<SequenceOk>),
    DestroyClientid(OpResult<()>),
    ReclaimComplete(OpResult<()>),
    /// Any other operation, which can only have failed (NOTSUPP; OP_ILLEGAL for
    /// `OpNum::Illegal`).
    Failed(OpNum, Nfs4Error),
}

impl<T: XdrEncode> XdrEncode for Box<T> {
    fn encode(&self, enc: &mut Encoder) {
        self.as_ref().encode(enc);
    }
}

impl<T: XdrDecode> XdrDecode for Box<T> {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Box::new(T::decode(dec)?))
    }
}

/// Expands `$body` with `$r` bound to the result of each status-plus-body variant.
macro_rules! each_result {
    ($value:expr, $r:ident => $body:expr, setattr $s:ident => $sbody:expr, failed ($n:ident, $e:ident) => $fbody:expr) => {
        match $value {
            Nfs4OpResult::Access($r) => $body,
            Nfs4OpResult::Close($r) => $body,
            Nfs4OpResult::Commit($r) => $body,
            Nfs4OpResult::Getattr($r) => $body,
            Nfs4OpResult::Getfh($r) => $body,
            Nfs4OpResult::Lookup($r)
            | Nfs4OpResult::Lookupp($r)
            | Nfs4OpResult::Putfh($r)
            | Nfs4OpResult::Putrootfh($r)
            | Nfs4OpResult::Restorefh($r)
            | Nfs4OpResult::Savefh($r)
            | Nfs4OpResult::DestroySession($r)
            | Nfs4OpResult::DestroyClientid($r)
            | Nfs4OpResult::ReclaimComplete($r) => $body,
            Nfs4OpResult::Open($r) => $body,
            Nfs4OpResult::Read($r) => $body,
            Nfs4OpResult::Readdir($r) => $body,
            Nfs4OpResult::Remove($r) => $body,
            Nfs4OpResult::Write($r) => $body,
            Nfs4OpResult::ExchangeId($r) => $body,
            Nfs4OpResult::CreateSession($r) => $body,
            Nfs4OpResult::SecinfoNoName($r) => $body,
            Nfs4OpResult::Sequence($r) => $body,
            Nfs4OpResult::Setattr($s) => $sbody,
            Nfs4OpResult::Failed($n, $e) => $fbody,
        }
    };
}

impl Nfs4OpResult {
    /// The operation this answers.
    pub fn opnum(&self) -> OpNum {
        match self {
            Nfs4OpResult::Access(_) => OpNum::Access,
            Nfs4OpResult::Close(_) => OpNum::Close,
            Nfs4OpResult::Commit(_) => OpNum::Commit,
            Nfs4OpResult::Getattr(_) => OpNum::Getattr,
            Nfs4OpResult::Getfh(_) => OpNum::Getfh,
            Nfs4OpResult::Lookup(_) => OpNum::Lookup,
            Nfs4OpResult::Lookupp(_) => OpNum::Lookupp,
            Nfs4OpResult::Open(_) => OpNum::Open,
            Nfs4OpResult::Putfh(_) => OpNum::Putfh,
            Nfs4OpResult::Putrootfh(_) => OpNum::Putrootfh,
            Nfs4OpResult::Read(_) => OpNum::Read,
            Nfs4OpResult::Readdir(_) => OpNum::Readdir,
            Nfs4OpResult::Remove(_) => OpNum::Remove,
            Nfs4OpResult::Restorefh(_) => OpNum::Restorefh,
            Nfs4OpResult::Savefh(_) => OpNum::Savefh,
            Nfs4OpResult::Setattr(_) => OpNum::Setattr,
            Nfs4OpResult::Write(_) => OpNum::Write,
            Nfs4OpResult::ExchangeId(_) => OpNum::ExchangeId,
            Nfs4OpResult::CreateSession(_) => OpNum::CreateSession,
            Nfs4OpResult::DestroySession(_) => OpNum::DestroySession,
            Nfs4OpResult::SecinfoNoName(_) => OpNum::SecinfoNoName,
            Nfs4OpResult::Sequence(_) => OpNum::Sequence,
            Nfs4OpResult::DestroyClientid(_) => OpNum::DestroyClientid,
            Nfs4OpResult::ReclaimComplete(_) => OpNum::ReclaimComplete,
            Nfs4OpResult::Failed(num, _) => *num,
        }
    }

    /// The operation's status (None: NFS4_OK).
    pub fn error(&self) -> Option<Nfs4Error> {
        each_result!(self, r => r.as_ref().err().copied(),
            setattr s => s.status.err(),
            failed (_n, e) => Some(*e))
    }
}

impl XdrEncode for Nfs4OpResult {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.opnum());
        each_result!(self, r => enc.put(r),
            setattr s => enc.put(s),
            failed (_n, e) => enc.put(e))
    }
}

impl XdrDecode for Nfs4OpResult {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let num: OpNum = dec.get()?;
        Ok(match num {
            OpNum::Access => Nfs4OpResult::Access(dec.get()?),
            OpNum::Close => Nfs4OpResult::Close(dec.get()?),
            OpNum::Commit => Nfs4OpResult::Commit(dec.get()?),
            OpNum::Getattr => Nfs4OpResult::Getattr(dec.get()?),
            OpNum::Getfh => Nfs4OpResult::Getfh(dec.get()?),
            OpNum::Lookup => Nfs4OpResult::Lookup(dec.get()?),
            OpNum::Lookupp => Nfs4OpResult::Lookupp(dec.get()?),
            OpNum::Open => Nfs4OpResult::Open(dec.get()?),
            OpNum::Putfh => Nfs4OpResult::Putfh(dec.get()?),
            OpNum::Putrootfh => Nfs4OpResult::Putrootfh(dec.get()?),
            OpNum::Read => Nfs4OpResult::Read(dec.get()?),
            OpNum::Readdir => Nfs4OpResult::Readdir(dec.get()?),
            OpNum::Remove => Nfs4OpResult::Remove(dec.get()?),
            OpNum::Restorefh => Nfs4OpResult::Restorefh(dec.get()?),
            OpNum::Savefh => Nfs4OpResult::Savefh(dec.get()?),
            OpNum::Setattr => Nfs4OpResult::Setattr(dec.get()?),
            OpNum::Write => Nfs4OpResult::Write(dec.get()?),
            OpNum::ExchangeId => Nfs4OpResult::ExchangeId(dec.get()?),
            OpNum::CreateSession => Nfs4OpResult::CreateSession(dec.get()?),
            OpNum::DestroySession => Nfs4OpResult::DestroySession(dec.get()?),
            OpNum::SecinfoNoName => Nfs4OpResult::SecinfoNoName(dec.get()?),
            OpNum::Sequence => Nfs4OpResult::Sequence(dec.get()?),
            OpNum::DestroyClientid => Nfs4OpResult::DestroyClientid(dec.get()?),
            OpNum::ReclaimComplete => Nfs4OpResult::ReclaimComplete(dec.get()?),
            other => {
                let value = dec.get_u32()?;
                let err = Nfs4Error::from_u32(value).ok_or(XdrError::BadDiscriminant {
                    what: "status of an operation that can only fail",
                    value,
                })?;
                Nfs4OpResult::Failed(other, err)
            }
        })
    }
}

/// COMPOUND4res: the status of the last operation run (NFS4_OK if all succeeded), the
/// call's tag, and one result per operation run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundReply {
    pub status: Result<(), Nfs4Error>,
    pub tag: Vec<u8>,
    pub results: Vec<Nfs4OpResult>,
}

impl CompoundReply {
    /// A reply whose status is that of its last result.
    pub fn of(tag: Vec<u8>, results: Vec<Nfs4OpResult>) -> CompoundReply {
        let status = match results.last().and_then(Nfs4OpResult::error) {
            Some(err) => Err(err),
            None => Ok(()),
        };
        CompoundReply {
            status,
            tag,
            results,
        }
    }
}

impl XdrEncode for CompoundReply {
    fn encode(&self, enc: &mut Encoder) {
        match self.status {
            Ok(()) => enc.put_u32(NFS4_OK),
            Err(err) => enc.put(&err),
        }
        enc.put_opaque(&self.tag);
        crate::xdr::put_array(enc, &self.results);
    }
}

impl XdrDecode for CompoundReply {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let status: Result<(), Nfs4Error> = dec.get()?;
        Ok(CompoundReply {
            status,
            tag: dec.get_opaque(TAG_BYTES_MAX, "COMPOUND tag")?.to_vec(),
            results: dec.get_array(COMPOUND_OPS_MAX, "COMPOUND results")?,
        })
    }
}

/// Decodes a COMPOUND reply's body (after the RPC reply header), accepting READ data up to
/// `max_data_bytes`.
pub fn decode_compound_reply(
    body: &[u8],
    max_data_bytes: usize,
) -> Result<CompoundReply, XdrError> {
    let mut dec = Decoder::new(body).with_max_data_bytes(max_data_bytes);
    dec.get()
}
