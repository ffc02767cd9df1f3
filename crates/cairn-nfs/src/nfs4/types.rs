//! The NFSv4.1 data types shared by operation arguments and results (RFC 8881 §3): status
//! codes, file handles, names, stateids, bitmaps, `fattr4` as sent (a bitmap and opaque
//! values: [`super::attrs`] reads and writes the values), times, and the small structures of
//! sessions.
//!
//! Bounds (hostile input allocates nothing it was not sent): handles 128 bytes
//! (`NFS4_FHSIZE`), owner and client ids 1024 (`NFS4_OPAQUE_LIMIT`), path components 1024
//! (longer than any filesystem's name: the server answers NAMETOOLONG past its own limit, not
//! a decoding error), bitmaps 8 words (attribute 255; RFC 8881 defines up to 82), attribute
//! values 64 KiB. A status is an enumeration of RFC 8881's values; success is the `Ok` arm of
//! [`OpResult`], so a failure can never carry NFS4_OK.

use crate::xdr::{
    Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_bounded_bytes, xdr_enum, xdr_struct,
};

/// Bytes of an opaque owner or id (`NFS4_OPAQUE_LIMIT`).
pub const OPAQUE_LIMIT_BYTES: usize = 1024;
/// Words of a bitmap this codec accepts.
pub const BITMAP_WORDS_MAX: usize = 8;
/// Bytes of one `fattr4`'s values this codec accepts.
pub const ATTR_VALS_BYTES_MAX: usize = 64 * 1024;

xdr_bounded_bytes!(
    /// `nfs_fh4`: an opaque file handle of at most 128 bytes, built by the server.
    pub struct Nfs4Fh, max = 128, what = "NFSv4 file handle"
);

xdr_bounded_bytes!(
    /// `component4`: one path component (UTF-8 on the wire; kept as bytes).
    pub struct Component, max = 1024, what = "component4"
);

xdr_bounded_bytes!(
    /// An opaque of at most `NFS4_OPAQUE_LIMIT` bytes: owners, client ids, server scope,
    /// implementation names, owner strings.
    pub struct Opaque4, max = OPAQUE_LIMIT_BYTES, what = "NFSv4 opaque"
);

/// A verifier (`verifier4`): write, cookie, create and client verifiers.
pub type Verifier4 = [u8; 8];
/// A session id (`sessionid4`).
pub type SessionId = [u8; 16];

xdr_enum!(
    /// Every `nfsstat4` except NFS4_OK (RFC 8881 §15.1).
    pub enum Nfs4Error {
        Perm = 1,
        NoEnt = 2,
        Io = 5,
        NxIo = 6,
        Access = 13,
        Exist = 17,
        XDev = 18,
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
        BadHandle = 10001,
        BadCookie = 10003,
        NotSupp = 10004,
        TooSmall = 10005,
        ServerFault = 10006,
        BadType = 10007,
        Delay = 10008,
        Same = 10009,
        Denied = 10010,
        Expired = 10011,
        Locked = 10012,
        Grace = 10013,
        FhExpired = 10014,
        ShareDenied = 10015,
        WrongSec = 10016,
        ClidInUse = 10017,
        Resource = 10018,
        Moved = 10019,
        NoFileHandle = 10020,
        MinorVersMismatch = 10021,
        StaleClientid = 10022,
        StaleStateid = 10023,
        OldStateid = 10024,
        BadStateid = 10025,
        BadSeqid = 10026,
        NotSame = 10027,
        LockRange = 10028,
        Symlink = 10029,
        RestoreFh = 10030,
        LeaseMoved = 10031,
        AttrNotSupp = 10032,
        NoGrace = 10033,
        ReclaimBad = 10034,
        ReclaimConflict = 10035,
        BadXdr = 10036,
        LocksHeld = 10037,
        OpenMode = 10038,
        BadOwner = 10039,
        BadChar = 10040,
        BadName = 10041,
        BadRange = 10042,
        LockNotSupp = 10043,
        OpIllegal = 10044,
        Deadlock = 10045,
        FileOpen = 10046,
        AdminRevoked = 10047,
        CbPathDown = 10048,
        BadIoMode = 10049,
        BadLayout = 10050,
        BadSessionDigest = 10051,
        BadSession = 10052,
        BadSlot = 10053,
        CompleteAlready = 10054,
        ConnNotBoundToSession = 10055,
        DelegAlreadyWanted = 10056,
        BackChanBusy = 10057,
        LayoutTryLater = 10058,
        LayoutUnavailable = 10059,
        NoMatchingLayout = 10060,
        RecallConflict = 10061,
        UnknownLayoutType = 10062,
        SeqMisordered = 10063,
        SequencePos = 10064,
        ReqTooBig = 10065,
        RepTooBig = 10066,
        RepTooBigToCache = 10067,
        RetryUncachedRep = 10068,
        UnsafeCompound = 10069,
        TooManyOps = 10070,
        OpNotInSession = 10071,
        HashAlgUnsupp = 10072,
        ClientidBusy = 10074,
        PnfsIoHole = 10075,
        SeqFalseRetry = 10076,
        BadHighSlot = 10077,
        DeadSession = 10078,
        EncrAlgUnsupp = 10079,
        PnfsNoLayout = 10080,
        NotOnlyOp = 10081,
        WrongCred = 10082,
        WrongType = 10083,
        DirdelegUnavail = 10084,
        RejectDeleg = 10085,
        ReturnConflict = 10086,
        DelegRevoked = 10087,
    }
);

/// NFS4_OK on the wire.
pub const NFS4_OK: u32 = 0;

/// What one operation answered: its result body, or why it failed (most failures carry
/// nothing more; SETATTR's, which does, has its own type).
pub type OpResult<T> = Result<T, Nfs4Error>;

impl<T: XdrEncode> XdrEncode for Result<T, Nfs4Error> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Ok(body) => {
                enc.put_u32(NFS4_OK);
                body.encode(enc);
            }
            Err(err) => err.encode(enc),
        }
    }
}

impl<T: XdrDecode> XdrDecode for Result<T, Nfs4Error> {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let value = dec.get_u32()?;
        if value == NFS4_OK {
            return Ok(Ok(T::decode(dec)?));
        }
        Nfs4Error::from_u32(value)
            .map(Err)
            .ok_or(XdrError::BadDiscriminant {
                what: "nfsstat4",
                value,
            })
    }
}

xdr_struct!(
    /// `stateid4`: a sequence number and the server's 12 bytes naming the state.
    pub struct Stateid4 {
        pub seqid: u32,
        pub other: [u8; 12],
    }
);

impl Stateid4 {
    /// The anonymous stateid (all zeros): I/O without an open.
    pub const ANONYMOUS: Stateid4 = Stateid4 {
        seqid: 0,
        other: [0; 12],
    };
    /// The READ bypass stateid (all ones).
    pub const BYPASS: Stateid4 = Stateid4 {
        seqid: u32::MAX,
        other: [0xff; 12],
    };
    /// The current stateid (seqid 1, other zeros): the one the compound's last operation set.
    pub const CURRENT: Stateid4 = Stateid4 {
        seqid: 1,
        other: [0; 12],
    };
    /// The invalid stateid (seqid all ones, other zeros): what CLOSE returns in v4.1.
    pub const INVALID: Stateid4 = Stateid4 {
        seqid: u32::MAX,
        other: [0; 12],
    };
}

/// `bitmap4`: which attributes (or operations) a request or result names; bit `n` is word
/// `n / 32`, bit `n % 32`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    pub fn from_bits(bits: &[u32]) -> Bitmap4 {
        let mut map = Bitmap4::default();
        for bit in bits {
            map.set(*bit);
        }
        map
    }

    pub fn is_set(&self, bit: u32) -> bool {
        self.0
            .get((bit / 32) as usize)
            .is_some_and(|word| word & (1 << (bit % 32)) != 0)
    }

    /// Sets `bit` (growing the map; bits past `BITMAP_WORDS_MAX` words are callers' bugs and
    /// are not set).
    pub fn set(&mut self, bit: u32) {
        let word = (bit / 32) as usize;
        if word >= BITMAP_WORDS_MAX {
            return;
        }
        if self.0.len() <= word {
            self.0.resize(word + 1, 0);
        }
        self.0[word] |= 1 << (bit % 32);
    }

    /// The set bits, lowest first.
    pub fn bits(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(word, value)| {
            (0..32)
                .filter(move |bit| value & (1 << bit) != 0)
                .map(move |bit| word as u32 * 32 + bit)
        })
    }

    /// The bits set in both.
    pub fn intersect(&self, other: &Bitmap4) -> Bitmap4 {
        let mut out: Vec<u32> = self.0.iter().zip(&other.0).map(|(a, b)| a & b).collect();
        while out.last() == Some(&0) {
            out.pop();
        }
        Bitmap4(out)
    }
}

impl XdrEncode for Bitmap4 {
    fn encode(&self, enc: &mut Encoder) {
        crate::xdr::put_array(enc, &self.0);
    }
}

impl XdrDecode for Bitmap4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Bitmap4(dec.get_array(BITMAP_WORDS_MAX, "bitmap4")?))
    }
}

/// `fattr4` as sent: which attributes, and their values in attribute order (read and written
/// by [`super::attrs::AttrValues`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fattr4 {
    pub mask: Bitmap4,
    pub vals: Vec<u8>,
}

impl XdrEncode for Fattr4 {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.mask);
        enc.put_opaque(&self.vals);
    }
}

impl XdrDecode for Fattr4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Fattr4 {
            mask: dec.get()?,
            vals: dec.get_opaque(ATTR_VALS_BYTES_MAX, "attrlist4")?.to_vec(),
        })
    }
}

xdr_struct!(
    /// `nfstime4`: seconds since the epoch (signed) and nanoseconds.
    pub struct NfsTime4 {
        pub seconds: i64,
        pub nseconds: u32,
    }
);

impl XdrEncode for i64 {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u64(*self as u64);
    }
}

impl XdrDecode for i64 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(dec.get_u64()? as i64)
    }
}

xdr_struct!(
    /// `change_info4`: a directory's change attribute before and after an operation.
    pub struct ChangeInfo4 {
        pub atomic: bool,
        pub before: u64,
        pub after: u64,
    }
);

xdr_struct!(
    /// `state_owner4` (open and lock owners): the client id and the client's owner bytes.
    pub struct StateOwner4 {
        pub clientid: u64,
        pub owner: Opaque4,
    }
);

xdr_struct!(
    /// `nfs_impl_id4`: who wrote the client or server.
    pub struct ImplId4 {
        pub domain: Opaque4,
        pub name: Opaque4,
        pub date: NfsTime4,
    }
);

xdr_struct!(
    /// `state_protect_ops4`: operations that must (or may) use the machine credential.
    pub struct StateProtectOps4 {
        pub must_enforce: Bitmap4,
        pub must_allow: Bitmap4,
    }
);

xdr_struct!(
    /// `channel_attrs4`: a session channel's limits, proposed by the client and negotiated
    /// down by the server. `rdma_ird` has at most one element.
    pub struct ChannelAttrs4 {
        pub headerpad_bytes: u32,
        pub max_request_bytes: u32,
        pub max_response_bytes: u32,
        pub max_response_cached_bytes: u32,
        pub max_operations: u32,
        pub max_requests: u32,
        pub rdma_ird: OneAtMost<u32>,
    }
);

/// An XDR array of at most one element (`T<1>`), as an option.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OneAtMost<T>(pub Option<T>);

impl<T: XdrEncode> XdrEncode for OneAtMost<T> {
    fn encode(&self, enc: &mut Encoder) {
        match &self.0 {
            Some(value) => {
                enc.put_u32(1);
                value.encode(enc);
            }
            None => enc.put_u32(0),
        }
    }
}

impl<T: XdrDecode> XdrDecode for OneAtMost<T> {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(OneAtMost(None)),
            1 => Ok(OneAtMost(Some(T::decode(dec)?))),
            count => Err(XdrError::TooLong {
                what: "array of at most one",
                len_bytes: u64::from(count),
                max_bytes: 1,
            }),
        }
    }
}

xdr_enum!(
    /// `stable_how4`.
    pub enum StableHow4 {
        Unstable = 0,
        DataSync = 1,
        FileSync = 2,
    }
);

xdr_enum!(
    /// `nfs_ftype4`.
    pub enum Ftype4 {
        Reg = 1,
        Dir = 2,
        Blk = 3,
        Chr = 4,
        Lnk = 5,
        Sock = 6,
        Fifo = 7,
        AttrDir = 8,
        NamedAttr = 9,
    }
);

/// ACCESS4 bits (RFC 8881 §18.1).
pub mod access4 {
    pub const READ: u32 = 0x01;
    pub const LOOKUP: u32 = 0x02;
    pub const MODIFY: u32 = 0x04;
    pub const EXTEND: u32 = 0x08;
    pub const DELETE: u32 = 0x10;
    pub const EXECUTE: u32 = 0x20;
}
