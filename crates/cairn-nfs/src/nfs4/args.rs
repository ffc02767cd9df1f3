//! COMPOUND's arguments (RFC 8881 §16.2) and those of the operations cairn serves, with
//! [`decode_compound`], which turns a COMPOUND call's argument bytes into a typed
//! [`CompoundArgs`].
//!
//! An operation this codec does not decode cannot be skipped (XDR carries no lengths), so
//! decoding stops there: a defined operation becomes [`Nfs4Op::NotSupported`] (the server
//! answers NFS4ERR_NOTSUPP, and the compound ends with it, as every failure ends one), a
//! number RFC 8881 does not define becomes [`Nfs4Op::Illegal`] (NFS4ERR_OP_ILLEGAL in an
//! OP_ILLEGAL result). Operations after it are never looked at. File data (WRITE) is bounded
//! by the decoder's `max_data_bytes`; a compound holds at most [`COMPOUND_OPS_MAX`]
//! operations. Every argument also encodes, so tests and clients build calls with these types.

use crate::xdr::{Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_enum, xdr_struct};

use super::types::{
    Bitmap4, ChannelAttrs4, Component, Fattr4, ImplId4, Nfs4Fh, Opaque4, SessionId, StableHow4,
    StateOwner4, StateProtectOps4, Stateid4, Verifier4,
};
use crate::rpc::AuthSys;

/// The version of NFS these types speak; COMPOUND's `minorversion` is 1.
pub const NFS_V4: u32 = 4;
/// The minor version served.
pub const MINOR_VERSION: u32 = 1;
/// NFSv4's procedures: NULL and COMPOUND.
pub const PROC4_NULL: u32 = 0;
pub const PROC4_COMPOUND: u32 = 1;
/// Most operations in one compound this codec decodes (the server negotiates fewer).
pub const COMPOUND_OPS_MAX: usize = 128;
/// Bytes of a COMPOUND tag.
pub const TAG_BYTES_MAX: usize = 1024;

xdr_enum!(
    /// Operation numbers (`nfs_opnum4`) of NFSv4.0 and v4.1.
    pub enum OpNum {
        Access = 3,
        Close = 4,
        Commit = 5,
        Create = 6,
        Delegpurge = 7,
        Delegreturn = 8,
        Getattr = 9,
        Getfh = 10,
        Link = 11,
        Lock = 12,
        Lockt = 13,
        Locku = 14,
        Lookup = 15,
        Lookupp = 16,
        Nverify = 17,
        Open = 18,
        Openattr = 19,
        OpenConfirm = 20,
        OpenDowngrade = 21,
        Putfh = 22,
        Putpubfh = 23,
        Putrootfh = 24,
        Read = 25,
        Readdir = 26,
        Readlink = 27,
        Remove = 28,
        Rename = 29,
        Renew = 30,
        Restorefh = 31,
        Savefh = 32,
        Secinfo = 33,
        Setattr = 34,
        Setclientid = 35,
        SetclientidConfirm = 36,
        Verify = 37,
        Write = 38,
        ReleaseLockowner = 39,
        BackchannelCtl = 40,
        BindConnToSession = 41,
        ExchangeId = 42,
        CreateSession = 43,
        DestroySession = 44,
        FreeStateid = 45,
        GetDirDelegation = 46,
        Getdeviceinfo = 47,
        Getdevicelist = 48,
        Layoutcommit = 49,
        Layoutget = 50,
        Layoutreturn = 51,
        SecinfoNoName = 52,
        Sequence = 53,
        SetSsv = 54,
        TestStateid = 55,
        WantDelegation = 56,
        DestroyClientid = 57,
        ReclaimComplete = 58,
        Illegal = 10044,
    }
);

/// `state_protect4_a`: how EXCHANGE_ID's client wants its state protected. SSV is not
/// decoded (cairn speaks AUTH_SYS only): it is a decoding error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateProtect4A {
    None,
    MachCred(StateProtectOps4),
}

impl XdrEncode for StateProtect4A {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            StateProtect4A::None => enc.put_u32(0),
            StateProtect4A::MachCred(ops) => {
                enc.put_u32(1);
                enc.put(ops);
            }
        }
    }
}

impl XdrDecode for StateProtect4A {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(StateProtect4A::None),
            1 => Ok(StateProtect4A::MachCred(dec.get()?)),
            value => Err(XdrError::BadDiscriminant {
                what: "state_protect_how4",
                value,
            }),
        }
    }
}

xdr_struct!(
    /// EXCHANGE_ID4args.
    pub struct ExchangeIdArgs {
        pub verifier: Verifier4,
        pub owner_id: Opaque4,
        pub flags: u32,
        pub state_protect: StateProtect4A,
        pub client_impl_id: super::types::OneAtMost<ImplId4>,
    }
);

/// EXCHANGE_ID flags (`EXCHGID4_FLAG_*`).
pub mod exchgid4 {
    pub const SUPP_MOVED_REFER: u32 = 0x0000_0001;
    pub const SUPP_MOVED_MIGR: u32 = 0x0000_0002;
    pub const BIND_PRINC_STATEID: u32 = 0x0000_0100;
    pub const USE_NON_PNFS: u32 = 0x0001_0000;
    pub const USE_PNFS_MDS: u32 = 0x0002_0000;
    pub const USE_PNFS_DS: u32 = 0x0004_0000;
    pub const UPD_CONFIRMED_REC_A: u32 = 0x4000_0000;
    pub const CONFIRMED_R: u32 = 0x8000_0000;
}

/// `callback_sec_parms4`: the credential the server would call the client back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackSec {
    None,
    Sys(AuthSys),
    /// RPCSEC_GSS handles: service, handle from server, handle from client.
    Gss {
        service: u32,
        from_server: Opaque4,
        from_client: Opaque4,
    },
}

impl XdrEncode for CallbackSec {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            CallbackSec::None => enc.put_u32(crate::rpc::AUTH_NONE),
            CallbackSec::Sys(sys) => {
                enc.put_u32(crate::rpc::AUTH_SYS);
                enc.put(sys);
            }
            CallbackSec::Gss {
                service,
                from_server,
                from_client,
            } => {
                enc.put_u32(crate::rpc::RPCSEC_GSS);
                enc.put_u32(*service);
                enc.put(from_server);
                enc.put(from_client);
            }
        }
    }
}

impl XdrDecode for CallbackSec {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            crate::rpc::AUTH_NONE => Ok(CallbackSec::None),
            crate::rpc::AUTH_SYS => Ok(CallbackSec::Sys(dec.get()?)),
            crate::rpc::RPCSEC_GSS => Ok(CallbackSec::Gss {
                service: dec.get_u32()?,
                from_server: dec.get()?,
                from_client: dec.get()?,
            }),
            value => Err(XdrError::BadDiscriminant {
                what: "callback_sec_parms4",
                value,
            }),
        }
    }
}

/// Callback credentials in one CREATE_SESSION.
pub const CALLBACK_SEC_MAX: usize = 16;

/// CREATE_SESSION4args.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSessionArgs {
    pub clientid: u64,
    pub sequence: u32,
    pub flags: u32,
    pub fore_chan: ChannelAttrs4,
    pub back_chan: ChannelAttrs4,
    pub cb_program: u32,
    pub sec_parms: Vec<CallbackSec>,
}

impl XdrEncode for CreateSessionArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u64(self.clientid);
        enc.put_u32(self.sequence);
        enc.put_u32(self.flags);
        enc.put(&self.fore_chan);
        enc.put(&self.back_chan);
        enc.put_u32(self.cb_program);
        crate::xdr::put_array(enc, &self.sec_parms);
    }
}

impl XdrDecode for CreateSessionArgs {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(CreateSessionArgs {
            clientid: dec.get_u64()?,
            sequence: dec.get_u32()?,
            flags: dec.get_u32()?,
            fore_chan: dec.get()?,
            back_chan: dec.get()?,
            cb_program: dec.get_u32()?,
            sec_parms: dec.get_array(CALLBACK_SEC_MAX, "callback_sec_parms4")?,
        })
    }
}

/// CREATE_SESSION flags.
pub mod create_session4 {
    pub const FLAG_PERSIST: u32 = 0x1;
    pub const FLAG_CONN_BACK_CHAN: u32 = 0x2;
    pub const FLAG_CONN_RDMA: u32 = 0x4;
}

xdr_struct!(
    /// SEQUENCE4args.
    pub struct SequenceArgs {
        pub sessionid: SessionId,
        pub sequenceid: u32,
        pub slotid: u32,
        pub highest_slotid: u32,
        pub cachethis: bool,
    }
);

/// How OPEN creates (`createhow4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow4 {
    /// Create, or open what exists (applying the size of the attributes).
    Unchecked(Fattr4),
    /// Create; EXIST if the name exists.
    Guarded(Fattr4),
    /// v4.0's exclusive create (the verifier only).
    Exclusive(Verifier4),
    /// v4.1's: the verifier and attributes to set.
    Exclusive41(Verifier4, Fattr4),
}

impl XdrEncode for CreateHow4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            CreateHow4::Unchecked(attrs) => {
                enc.put_u32(0);
                enc.put(attrs);
            }
            CreateHow4::Guarded(attrs) => {
                enc.put_u32(1);
                enc.put(attrs);
            }
            CreateHow4::Exclusive(verf) => {
                enc.put_u32(2);
                enc.put(verf);
            }
            CreateHow4::Exclusive41(verf, attrs) => {
                enc.put_u32(3);
                enc.put(verf);
                enc.put(attrs);
            }
        }
    }
}

impl XdrDecode for CreateHow4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(CreateHow4::Unchecked(dec.get()?)),
            1 => Ok(CreateHow4::Guarded(dec.get()?)),
            2 => Ok(CreateHow4::Exclusive(dec.get()?)),
            3 => Ok(CreateHow4::Exclusive41(dec.get()?, dec.get()?)),
            value => Err(XdrError::BadDiscriminant {
                what: "createmode4",
                value,
            }),
        }
    }
}

/// What OPEN names (`open_claim4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenClaim4 {
    /// A name in the current (directory) handle.
    Null(Component),
    /// Reclaim after a server restart: the delegation type held.
    Previous(u32),
    DelegateCur(Stateid4, Component),
    DelegatePrev(Component),
    /// The current handle itself.
    Fh,
    DelegPrevFh,
    DelegCurFh(Stateid4),
}

impl XdrEncode for OpenClaim4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            OpenClaim4::Null(name) => {
                enc.put_u32(0);
                enc.put(name);
            }
            OpenClaim4::Previous(kind) => {
                enc.put_u32(1);
                enc.put_u32(*kind);
            }
            OpenClaim4::DelegateCur(stateid, name) => {
                enc.put_u32(2);
                enc.put(stateid);
                enc.put(name);
            }
            OpenClaim4::DelegatePrev(name) => {
                enc.put_u32(3);
                enc.put(name);
            }
            OpenClaim4::Fh => enc.put_u32(4),
            OpenClaim4::DelegPrevFh => enc.put_u32(5),
            OpenClaim4::DelegCurFh(stateid) => {
                enc.put_u32(6);
                enc.put(stateid);
            }
        }
    }
}

impl XdrDecode for OpenClaim4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(OpenClaim4::Null(dec.get()?)),
            1 => Ok(OpenClaim4::Previous(dec.get_u32()?)),
            2 => Ok(OpenClaim4::DelegateCur(dec.get()?, dec.get()?)),
            3 => Ok(OpenClaim4::DelegatePrev(dec.get()?)),
            4 => Ok(OpenClaim4::Fh),
            5 => Ok(OpenClaim4::DelegPrevFh),
            6 => Ok(OpenClaim4::DelegCurFh(dec.get()?)),
            value => Err(XdrError::BadDiscriminant {
                what: "open_claim_type4",
                value,
            }),
        }
    }
}

/// OPEN4args; `create` is `openflag4` (None: OPEN4_NOCREATE).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenArgs {
    pub seqid: u32,
    /// `OPEN4_SHARE_ACCESS_*` (low byte) and v4.1's delegation wants (above it).
    pub share_access: u32,
    pub share_deny: u32,
    pub owner: StateOwner4,
    pub create: Option<CreateHow4>,
    pub claim: OpenClaim4,
}

impl XdrEncode for OpenArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u32(self.seqid);
        enc.put_u32(self.share_access);
        enc.put_u32(self.share_deny);
        enc.put(&self.owner);
        match &self.create {
            Some(how) => {
                enc.put_u32(1);
                enc.put(how);
            }
            None => enc.put_u32(0),
        }
        enc.put(&self.claim);
    }
}

impl XdrDecode for OpenArgs {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let seqid = dec.get_u32()?;
        let share_access = dec.get_u32()?;
        let share_deny = dec.get_u32()?;
        let owner = dec.get()?;
        let create = match dec.get_u32()? {
            0 => None,
            1 => Some(dec.get()?),
            value => {
                return Err(XdrError::BadDiscriminant {
                    what: "opentype4",
                    value,
                });
            }
        };
        Ok(OpenArgs {
            seqid,
            share_access,
            share_deny,
            owner,
            create,
            claim: dec.get()?,
        })
    }
}

/// OPEN's share access bits.
pub mod share_access4 {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const BOTH: u32 = 3;
    /// The bits that are access (the rest are v4.1's delegation wants).
    pub const MASK: u32 = 0xff;
}

xdr_struct!(
    /// CLOSE4args.
    pub struct CloseArgs {
        pub seqid: u32,
        pub stateid: Stateid4,
    }
);

xdr_struct!(
    /// READ4args.
    pub struct ReadArgs {
        pub stateid: Stateid4,
        pub offset_bytes: u64,
        pub count_bytes: u32,
    }
);

/// WRITE4args (the data's length is its count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteArgs {
    pub stateid: Stateid4,
    pub offset_bytes: u64,
    pub stable: StableHow4,
    pub data: Vec<u8>,
}

impl XdrEncode for WriteArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.stateid);
        enc.put_u64(self.offset_bytes);
        enc.put(&self.stable);
        enc.put_opaque(&self.data);
    }
}

impl XdrDecode for WriteArgs {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(WriteArgs {
            stateid: dec.get()?,
            offset_bytes: dec.get_u64()?,
            stable: dec.get()?,
            data: dec.get_opaque(dec.max_data_bytes(), "WRITE data")?.to_vec(),
        })
    }
}

xdr_struct!(
    /// COMMIT4args (count 0: to the end of the file).
    pub struct CommitArgs {
        pub offset_bytes: u64,
        pub count_bytes: u32,
    }
);

xdr_struct!(
    /// READDIR4args.
    pub struct ReaddirArgs {
        pub cookie: u64,
        pub cookieverf: Verifier4,
        pub dircount_bytes: u32,
        pub maxcount_bytes: u32,
        pub attr_request: Bitmap4,
    }
);

xdr_struct!(
    /// SETATTR4args.
    pub struct SetattrArgs {
        pub stateid: Stateid4,
        pub attrs: Fattr4,
    }
);

xdr_enum!(
    /// `secinfo_style4`: SECINFO_NO_NAME of the current handle or of its parent.
    pub enum SecinfoStyle4 {
        CurrentFh = 0,
        Parent = 1,
    }
);

/// One operation of a compound, with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Nfs4Op {
    Access(u32),
    Close(CloseArgs),
    Commit(CommitArgs),
    Getattr(Bitmap4),
    Getfh,
    Lookup(Component),
    Lookupp,
    Open(Box<OpenArgs>),
    Putfh(Nfs4Fh),
    Putrootfh,
    Read(ReadArgs),
    Readdir(ReaddirArgs),
    Remove(Component),
    Restorefh,
    Savefh,
    Setattr(SetattrArgs),
    Write(WriteArgs),
    ExchangeId(Box<ExchangeIdArgs>),
    CreateSession(Box<CreateSessionArgs>),
    DestroySession(SessionId),
    SecinfoNoName(SecinfoStyle4),
    Sequence(SequenceArgs),
    DestroyClientid(u64),
    ReclaimComplete(bool),
    /// A defined operation this codec does not decode: answered NOTSUPP, ends the compound.
    NotSupported(OpNum),
    /// An operation number RFC 8881 does not define: answered OP_ILLEGAL.
    Illegal(u32),
}

impl Nfs4Op {
    /// The operation's number (OP_ILLEGAL for an undefined one).
    pub fn opnum(&self) -> OpNum {
        match self {
            Nfs4Op::Access(_) => OpNum::Access,
            Nfs4Op::Close(_) => OpNum::Close,
            Nfs4Op::Commit(_) => OpNum::Commit,
            Nfs4Op::Getattr(_) => OpNum::Getattr,
            Nfs4Op::Getfh => OpNum::Getfh,
            Nfs4Op::Lookup(_) => OpNum::Lookup,
            Nfs4Op::Lookupp => OpNum::Lookupp,
            Nfs4Op::Open(_) => OpNum::Open,
            Nfs4Op::Putfh(_) => OpNum::Putfh,
            Nfs4Op::Putrootfh => OpNum::Putrootfh,
            Nfs4Op::Read(_) => OpNum::Read,
            Nfs4Op::Readdir(_) => OpNum::Readdir,
            Nfs4Op::Remove(_) => OpNum::Remove,
            Nfs4Op::Restorefh => OpNum::Restorefh,
            Nfs4Op::Savefh => OpNum::Savefh,
            Nfs4Op::Setattr(_) => OpNum::Setattr,
            Nfs4Op::Write(_) => OpNum::Write,
            Nfs4Op::ExchangeId(_) => OpNum::ExchangeId,
            Nfs4Op::CreateSession(_) => OpNum::CreateSession,
            Nfs4Op::DestroySession(_) => OpNum::DestroySession,
            Nfs4Op::SecinfoNoName(_) => OpNum::SecinfoNoName,
            Nfs4Op::Sequence(_) => OpNum::Sequence,
            Nfs4Op::DestroyClientid(_) => OpNum::DestroyClientid,
            Nfs4Op::ReclaimComplete(_) => OpNum::ReclaimComplete,
            Nfs4Op::NotSupported(num) => *num,
            Nfs4Op::Illegal(_) => OpNum::Illegal,
        }
    }

    /// Whether decoding stops after this operation (its arguments could not be read).
    pub fn ends_decoding(&self) -> bool {
        matches!(self, Nfs4Op::NotSupported(_) | Nfs4Op::Illegal(_))
    }

    fn encode_args(&self, enc: &mut Encoder) {
        match self {
            Nfs4Op::Access(bits) => enc.put_u32(*bits),
            Nfs4Op::Close(args) => enc.put(args),
            Nfs4Op::Commit(args) => enc.put(args),
            Nfs4Op::Getattr(mask) => enc.put(mask),
            Nfs4Op::Lookup(name) | Nfs4Op::Remove(name) => enc.put(name),
            Nfs4Op::Open(args) => enc.put(args.as_ref()),
            Nfs4Op::Putfh(fh) => enc.put(fh),
            Nfs4Op::Read(args) => enc.put(args),
            Nfs4Op::Readdir(args) => enc.put(args),
            Nfs4Op::Setattr(args) => enc.put(args),
            Nfs4Op::Write(args) => enc.put(args),
            Nfs4Op::ExchangeId(args) => enc.put(args.as_ref()),
            Nfs4Op::CreateSession(args) => enc.put(args.as_ref()),
            Nfs4Op::DestroySession(id) => enc.put(id),
            Nfs4Op::SecinfoNoName(style) => enc.put(style),
            Nfs4Op::Sequence(args) => enc.put(args),
            Nfs4Op::DestroyClientid(id) => enc.put_u64(*id),
            Nfs4Op::ReclaimComplete(one_fs) => enc.put_bool(*one_fs),
            Nfs4Op::Getfh
            | Nfs4Op::Lookupp
            | Nfs4Op::Putrootfh
            | Nfs4Op::Restorefh
            | Nfs4Op::Savefh
            | Nfs4Op::NotSupported(_)
            | Nfs4Op::Illegal(_) => {}
        }
    }
}

impl XdrEncode for Nfs4Op {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Nfs4Op::Illegal(number) => enc.put_u32(*number),
            op => enc.put(&op.opnum()),
        }
        self.encode_args(enc);
    }
}

impl XdrDecode for Nfs4Op {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let number = dec.get_u32()?;
        let Some(num) = OpNum::from_u32(number).filter(|num| *num != OpNum::Illegal) else {
            return Ok(Nfs4Op::Illegal(number));
        };
        Ok(match num {
            OpNum::Access => Nfs4Op::Access(dec.get_u32()?),
            OpNum::Close => Nfs4Op::Close(dec.get()?),
            OpNum::Commit => Nfs4Op::Commit(dec.get()?),
            OpNum::Getattr => Nfs4Op::Getattr(dec.get()?),
            OpNum::Getfh => Nfs4Op::Getfh,
            OpNum::Lookup => Nfs4Op::Lookup(dec.get()?),
            OpNum::Lookupp => Nfs4Op::Lookupp,
            OpNum::Open => Nfs4Op::Open(Box::new(dec.get()?)),
            OpNum::Putfh => Nfs4Op::Putfh(dec.get()?),
            OpNum::Putrootfh => Nfs4Op::Putrootfh,
            OpNum::Read => Nfs4Op::Read(dec.get()?),
            OpNum::Readdir => Nfs4Op::Readdir(dec.get()?),
            OpNum::Remove => Nfs4Op::Remove(dec.get()?),
            OpNum::Restorefh => Nfs4Op::Restorefh,
            OpNum::Savefh => Nfs4Op::Savefh,
            OpNum::Setattr => Nfs4Op::Setattr(dec.get()?),
            OpNum::Write => Nfs4Op::Write(dec.get()?),
            OpNum::ExchangeId => Nfs4Op::ExchangeId(Box::new(dec.get()?)),
            OpNum::CreateSession => Nfs4Op::CreateSession(Box::new(dec.get()?)),
            OpNum::DestroySession => Nfs4Op::DestroySession(dec.get()?),
            OpNum::SecinfoNoName => Nfs4Op::SecinfoNoName(dec.get()?),
            OpNum::Sequence => Nfs4Op::Sequence(dec.get()?),
            OpNum::DestroyClientid => Nfs4Op::DestroyClientid(dec.get_u64()?),
            OpNum::ReclaimComplete => Nfs4Op::ReclaimComplete(dec.get_bool()?),
            other => Nfs4Op::NotSupported(other),
        })
    }
}

/// COMPOUND4args. Only the last operation may be one that ends decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompoundArgs {
    pub tag: Vec<u8>,
    pub minor_version: u32,
    pub ops: Vec<Nfs4Op>,
}

impl XdrEncode for CompoundArgs {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_opaque(&self.tag);
        enc.put_u32(self.minor_version);
        crate::xdr::put_array(enc, &self.ops);
    }
}

impl XdrDecode for CompoundArgs {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let tag = dec.get_opaque(TAG_BYTES_MAX, "COMPOUND tag")?.to_vec();
        let minor_version = dec.get_u32()?;
        let count = dec.get_u32()?;
        if count as usize > COMPOUND_OPS_MAX {
            return Err(XdrError::TooLong {
                what: "COMPOUND operations",
                len_bytes: u64::from(count),
                max_bytes: COMPOUND_OPS_MAX as u64,
            });
        }
        let mut ops = Vec::with_capacity((count as usize).min(dec.remaining_bytes() / 4));
        for _ in 0..count {
            let op: Nfs4Op = dec.get()?;
            let ends = op.ends_decoding();
            ops.push(op);
            if ends {
                break;
            }
        }
        Ok(CompoundArgs {
            tag,
            minor_version,
            ops,
        })
    }
}

/// Decodes a COMPOUND call's arguments, accepting WRITE data up to `max_data_bytes`. Bytes
/// after the last operation decoded are ignored only when an operation ended decoding;
/// otherwise they are an error (a call is exactly its arguments).
pub fn decode_compound(args: &[u8], max_data_bytes: usize) -> Result<CompoundArgs, XdrError> {
    let mut dec = Decoder::new(args).with_max_data_bytes(max_data_bytes);
    let compound: CompoundArgs = dec.get()?;
    let ended = compound.ops.last().is_some_and(Nfs4Op::ends_decoding);
    if !ended && dec.remaining_bytes() != 0 {
        return Err(XdrError::Mismatch {
            what: "COMPOUND arguments and their operations' length",
            first: args.len() as u64,
            second: (args.len() - dec.remaining_bytes()) as u64,
        });
    }
    Ok(compound)
}
