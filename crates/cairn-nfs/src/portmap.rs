//! PORTMAP version 2 (RFC 1833 §3): the port mapper on port 111 that clients ask where MOUNT
//! and NFS listen. A server that serves all three programs on one port answers GETPORT with
//! its own port for MOUNT v3 and NFS v3 and 0 (not registered) for anything else.
//!
//! Procedures NULL, SET, UNSET, GETPORT, DUMP are typed; CALLIT (indirect calls, a known
//! amplification vector) is deliberately not: it decodes as an unknown procedure, answered
//! PROC_UNAVAIL.

use crate::xdr::{Decoder, Encoder, XdrEncode, XdrError, xdr_enum, xdr_struct};

/// The version of PORTMAP these types speak.
pub const PORTMAP_V2: u32 = 2;
/// The well-known port of the port mapper.
pub const PORTMAP_PORT: u16 = 111;
/// `prot` of a TCP mapping.
pub const IPPROTO_TCP: u32 = 6;
/// `prot` of a UDP mapping.
pub const IPPROTO_UDP: u32 = 17;

xdr_enum!(
    /// PORTMAP procedure numbers (CALLIT, 5, left out on purpose).
    pub enum PortmapProc {
        Null = 0,
        Set = 1,
        Unset = 2,
        Getport = 3,
        Dump = 4,
    }
);

xdr_struct!(
    /// `mapping`: a program, version and protocol at a port.
    pub struct Mapping {
        pub program: u32,
        pub version: u32,
        pub protocol: u32,
        pub port: u32,
    }
);

/// A decoded PORTMAP call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortmapCall {
    Null,
    Set(Mapping),
    Unset(Mapping),
    /// The `port` field of the mapping is ignored.
    Getport(Mapping),
    Dump,
}

impl PortmapCall {
    pub fn procedure(&self) -> PortmapProc {
        match self {
            PortmapCall::Null => PortmapProc::Null,
            PortmapCall::Set(_) => PortmapProc::Set,
            PortmapCall::Unset(_) => PortmapProc::Unset,
            PortmapCall::Getport(_) => PortmapProc::Getport,
            PortmapCall::Dump => PortmapProc::Dump,
        }
    }
}

/// Encodes the arguments only.
impl XdrEncode for PortmapCall {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            PortmapCall::Set(mapping)
            | PortmapCall::Unset(mapping)
            | PortmapCall::Getport(mapping) => {
                enc.put(mapping);
            }
            PortmapCall::Null | PortmapCall::Dump => {}
        }
    }
}

/// Decodes a PORTMAP call's arguments; CALLIT and unknown procedures are
/// [`XdrError::UnknownProcedure`].
pub fn decode_portmap_call(procedure: u32, args: &[u8]) -> Result<PortmapCall, XdrError> {
    let proc = PortmapProc::from_u32(procedure).ok_or(XdrError::UnknownProcedure(procedure))?;
    let mut dec = Decoder::new(args);
    Ok(match proc {
        PortmapProc::Null => PortmapCall::Null,
        PortmapProc::Set => PortmapCall::Set(dec.get()?),
        PortmapProc::Unset => PortmapCall::Unset(dec.get()?),
        PortmapProc::Getport => PortmapCall::Getport(dec.get()?),
        PortmapProc::Dump => PortmapCall::Dump,
    })
}

/// A typed PORTMAP result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortmapReply {
    Null,
    /// SET and UNSET: whether the change was made.
    Done(bool),
    /// GETPORT: the port, 0 if not registered.
    Port(u32),
    Dump(Vec<Mapping>),
}

impl XdrEncode for PortmapReply {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            PortmapReply::Null => {}
            PortmapReply::Done(done) => enc.put_bool(*done),
            PortmapReply::Port(port) => enc.put_u32(*port),
            PortmapReply::Dump(mappings) => crate::xdr::put_list(enc, mappings),
        }
    }
}

/// Decodes a PORTMAP result (for tests and clients).
pub fn decode_portmap_reply(procedure: u32, results: &[u8]) -> Result<PortmapReply, XdrError> {
    let proc = PortmapProc::from_u32(procedure).ok_or(XdrError::UnknownProcedure(procedure))?;
    let mut dec = Decoder::new(results);
    Ok(match proc {
        PortmapProc::Null => PortmapReply::Null,
        PortmapProc::Set | PortmapProc::Unset => PortmapReply::Done(dec.get_bool()?),
        PortmapProc::Getport => PortmapReply::Port(dec.get_u32()?),
        PortmapProc::Dump => PortmapReply::Dump(dec.get_list::<Mapping>()?),
    })
}
