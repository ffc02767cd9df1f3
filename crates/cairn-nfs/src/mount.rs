//! MOUNT version 3 (RFC 1813 appendix I): how an NFSv3 client turns an export path into the
//! root file handle, and lists exports (`showmount -e`).
//!
//! Procedures: NULL, MNT (path → handle + accepted auth flavors), DUMP (who mounted what),
//! UMNT, UMNTALL, EXPORT. Paths are bytes ≤ 1024, host and group names ≤ 255, handles the
//! same ≤ 64-byte [`FileHandle`] as NFSv3's. Like [`crate::nfs3`], calls decode to a typed
//! [`MountCall`] and results encode from a typed [`MountReply`] (both ways, for tests).

use crate::nfs3::FileHandle;
use crate::xdr::{
    Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_bounded_bytes, xdr_enum, xdr_struct,
};

/// The version of MOUNT these types speak.
pub const MOUNT_V3: u32 = 3;
/// Most auth flavors a MNT reply lists.
pub const MAX_AUTH_FLAVORS: usize = 16;

xdr_bounded_bytes!(
    /// `dirpath`: an exported path, at most 1024 bytes.
    pub struct DirPath, max = 1024, what = "mount path"
);

xdr_bounded_bytes!(
    /// `name`: a host or group name, at most 255 bytes.
    pub struct MountName, max = 255, what = "mount name"
);

xdr_enum!(
    /// MOUNT procedure numbers.
    pub enum MountProc {
        Null = 0,
        Mnt = 1,
        Dump = 2,
        Umnt = 3,
        Umntall = 4,
        Export = 5,
    }
);

xdr_enum!(
    /// Every `mountstat3` except MNT3_OK.
    pub enum MountError {
        Perm = 1,
        NoEnt = 2,
        Io = 5,
        Acces = 13,
        NotDir = 20,
        Inval = 22,
        NameTooLong = 63,
        NotSupp = 10004,
        ServerFault = 10006,
    }
);

/// `mountres3_ok`: the export's root handle and the auth flavors the server accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MntOk {
    pub handle: FileHandle,
    pub auth_flavors: Vec<u32>,
}

/// `mountres3`.
pub type MntRes = Result<MntOk, MountError>;

impl XdrEncode for MntOk {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.handle);
        crate::xdr::put_array(enc, &self.auth_flavors);
    }
}

impl XdrDecode for MntOk {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Self {
            handle: dec.get()?,
            auth_flavors: dec.get_array(MAX_AUTH_FLAVORS, "MNT auth flavors")?,
        })
    }
}

fn encode_mnt_res(enc: &mut Encoder, res: &MntRes) {
    match res {
        Ok(ok) => {
            enc.put_u32(0);
            enc.put(ok);
        }
        Err(error) => enc.put(error),
    }
}

fn decode_mnt_res(dec: &mut Decoder<'_>) -> Result<MntRes, XdrError> {
    let status = dec.get_u32()?;
    if status == 0 {
        return Ok(Ok(dec.get()?));
    }
    MountError::from_u32(status)
        .map(Err)
        .ok_or(XdrError::BadDiscriminant {
            what: "mountstat3",
            value: status,
        })
}

xdr_struct!(
    /// `mountbody`: one entry of DUMP's list.
    pub struct MountEntry {
        pub hostname: MountName,
        pub directory: DirPath,
    }
);

/// `exportnode`: one export and the groups allowed to mount it (empty: everyone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportEntry {
    pub directory: DirPath,
    pub groups: Vec<MountName>,
}

impl XdrEncode for ExportEntry {
    fn encode(&self, enc: &mut Encoder) {
        enc.put(&self.directory);
        crate::xdr::put_list(enc, &self.groups);
    }
}

impl XdrDecode for ExportEntry {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(Self {
            directory: dec.get()?,
            groups: dec.get_list()?,
        })
    }
}

/// A decoded MOUNT call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountCall {
    Null,
    Mnt(DirPath),
    Dump,
    Umnt(DirPath),
    Umntall,
    Export,
}

impl MountCall {
    pub fn procedure(&self) -> MountProc {
        match self {
            MountCall::Null => MountProc::Null,
            MountCall::Mnt(_) => MountProc::Mnt,
            MountCall::Dump => MountProc::Dump,
            MountCall::Umnt(_) => MountProc::Umnt,
            MountCall::Umntall => MountProc::Umntall,
            MountCall::Export => MountProc::Export,
        }
    }
}

/// Encodes the arguments only.
impl XdrEncode for MountCall {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            MountCall::Mnt(path) | MountCall::Umnt(path) => enc.put(path),
            MountCall::Null | MountCall::Dump | MountCall::Umntall | MountCall::Export => {}
        }
    }
}

/// Decodes a MOUNT call's arguments; an unknown procedure is [`XdrError::UnknownProcedure`].
pub fn decode_mount_call(procedure: u32, args: &[u8]) -> Result<MountCall, XdrError> {
    let proc = MountProc::from_u32(procedure).ok_or(XdrError::UnknownProcedure(procedure))?;
    let mut dec = Decoder::new(args);
    Ok(match proc {
        MountProc::Null => MountCall::Null,
        MountProc::Mnt => MountCall::Mnt(dec.get()?),
        MountProc::Dump => MountCall::Dump,
        MountProc::Umnt => MountCall::Umnt(dec.get()?),
        MountProc::Umntall => MountCall::Umntall,
        MountProc::Export => MountCall::Export,
    })
}

/// A typed MOUNT result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountReply {
    Null,
    Mnt(MntRes),
    Dump(Vec<MountEntry>),
    Umnt,
    Umntall,
    Export(Vec<ExportEntry>),
}

impl XdrEncode for MountReply {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            MountReply::Mnt(res) => encode_mnt_res(enc, res),
            MountReply::Dump(entries) => crate::xdr::put_list(enc, entries),
            MountReply::Export(entries) => crate::xdr::put_list(enc, entries),
            MountReply::Null | MountReply::Umnt | MountReply::Umntall => {}
        }
    }
}

/// Decodes a MOUNT result (for tests and clients).
pub fn decode_mount_reply(procedure: u32, results: &[u8]) -> Result<MountReply, XdrError> {
    let proc = MountProc::from_u32(procedure).ok_or(XdrError::UnknownProcedure(procedure))?;
    let mut dec = Decoder::new(results);
    Ok(match proc {
        MountProc::Null => MountReply::Null,
        MountProc::Mnt => MountReply::Mnt(decode_mnt_res(&mut dec)?),
        MountProc::Dump => MountReply::Dump(dec.get_list()?),
        MountProc::Umnt => MountReply::Umnt,
        MountProc::Umntall => MountReply::Umntall,
        MountProc::Export => MountReply::Export(dec.get_list()?),
    })
}
