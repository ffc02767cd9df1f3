//! The attributes of `fattr4` (RFC 8881 §5) this codec reads and writes, as one typed
//! [`AttrValues`] with an `Option` per attribute: GETATTR and READDIR results are built as
//! values and turned into a [`Fattr4`] (mask and values in attribute order); OPEN's and
//! SETATTR's attributes are read back from a [`Fattr4`].
//!
//! The table (`attr_table!` below) is the one list of supported attributes: what the server
//! advertises in `supported_attrs` is [`supported`], and a received mask naming any other bit
//! is [`AttrError::NotSupported`] (the server answers ATTRNOTSUPP, not a decoding error).
//! Values that do not parse, or bytes left after the last, are [`AttrError::Garbage`]
//! (BADXDR). Owners are strings on the wire; the server speaks numeric ones only.

use crate::xdr::{Decoder, Encoder, XdrDecode, XdrEncode, XdrError, xdr_struct};

use super::types::{Bitmap4, Fattr4, Ftype4, Nfs4Fh, NfsTime4, Opaque4};

xdr_struct!(
    /// `fsid4`.
    pub struct Fsid4 {
        pub major: u64,
        pub minor: u64,
    }
);

xdr_struct!(
    /// `specdata4`: a device's numbers.
    pub struct Specdata4 {
        pub major: u32,
        pub minor: u32,
    }
);

/// `settime4`: set a time to the server's clock or to the client's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetTime4 {
    ServerTime,
    ClientTime(NfsTime4),
}

impl XdrEncode for SetTime4 {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            SetTime4::ServerTime => enc.put_u32(0),
            SetTime4::ClientTime(time) => {
                enc.put_u32(1);
                enc.put(time);
            }
        }
    }
}

impl XdrDecode for SetTime4 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match dec.get_u32()? {
            0 => Ok(SetTime4::ServerTime),
            1 => Ok(SetTime4::ClientTime(dec.get()?)),
            value => Err(XdrError::BadDiscriminant {
                what: "time_how4",
                value,
            }),
        }
    }
}

/// Why received attributes cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttrError {
    /// The mask names an attribute this server does not support (ATTRNOTSUPP).
    #[error("attribute {0} is not supported")]
    NotSupported(u32),
    /// The values do not parse as the mask says (BADXDR).
    #[error("attribute values do not parse: {0}")]
    Garbage(XdrError),
}

macro_rules! attr_table {
    ($($(#[$meta:meta])* $bit:literal $field:ident : $ty:ty),* $(,)?) => {
        /// Attribute numbers (`FATTR4_*`).
        pub mod attr {
            $(#[allow(non_upper_case_globals)] pub const $field: u32 = $bit;)*
        }

        /// Typed values of the supported attributes; `None` = not present.
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct AttrValues {
            $($(#[$meta])* pub $field: Option<$ty>,)*
        }

        /// Every attribute this codec (and so the server) supports, lowest first.
        pub const SUPPORTED_BITS: &[u32] = &[$($bit),*];

        impl AttrValues {
            /// As sent: the mask of the present attributes and their values, in order.
            pub fn to_fattr(&self) -> Fattr4 {
                let mut mask = Bitmap4::default();
                let mut enc = Encoder::new();
                $(if let Some(value) = &self.$field {
                    mask.set($bit);
                    enc.put(value);
                })*
                Fattr4 { mask, vals: enc.into_bytes() }
            }

            /// Reads received attributes (see the module comment for the errors).
            pub fn from_fattr(fattr: &Fattr4) -> Result<AttrValues, AttrError> {
                if let Some(bit) = fattr.mask.bits().find(|bit| !SUPPORTED_BITS.contains(bit)) {
                    return Err(AttrError::NotSupported(bit));
                }
                let mut values = AttrValues::default();
                let mut dec = Decoder::new(&fattr.vals);
                $(if fattr.mask.is_set($bit) {
                    values.$field = Some(dec.get().map_err(AttrError::Garbage)?);
                })*
                if dec.remaining_bytes() != 0 {
                    return Err(AttrError::Garbage(XdrError::Mismatch {
                        what: "attrlist4 and its attributes' length",
                        first: fattr.vals.len() as u64,
                        second: (fattr.vals.len() - dec.remaining_bytes()) as u64,
                    }));
                }
                Ok(values)
            }

            /// Keeps only the attributes `mask` names.
            pub fn only(mut self, mask: &Bitmap4) -> AttrValues {
                $(if !mask.is_set($bit) {
                    self.$field = None;
                })*
                self
            }
        }
    };
}

attr_table! {
    0 supported_attrs: Bitmap4,
    1 r#type: Ftype4,
    2 fh_expire_type: u32,
    3 change: u64,
    4 size: u64,
    5 link_support: bool,
    6 symlink_support: bool,
    7 named_attr: bool,
    8 fsid: Fsid4,
    9 unique_handles: bool,
    10 lease_time: u32,
    /// A status (`nfsstat4`, 0 = OK): why a READDIR entry's other attributes are missing.
    11 rdattr_error: u32,
    15 cansettime: bool,
    16 case_insensitive: bool,
    17 case_preserving: bool,
    18 chown_restricted: bool,
    19 filehandle: Nfs4Fh,
    20 fileid: u64,
    21 files_avail: u64,
    22 files_free: u64,
    23 files_total: u64,
    26 homogeneous: bool,
    27 maxfilesize: u64,
    28 maxlink: u32,
    29 maxname: u32,
    30 maxread: u64,
    31 maxwrite: u64,
    33 mode: u32,
    34 no_trunc: bool,
    35 numlinks: u32,
    36 owner: Opaque4,
    37 owner_group: Opaque4,
    41 rawdev: Specdata4,
    42 space_avail: u64,
    43 space_free: u64,
    44 space_total: u64,
    45 space_used: u64,
    47 time_access: NfsTime4,
    48 time_access_set: SetTime4,
    51 time_delta: NfsTime4,
    52 time_metadata: NfsTime4,
    53 time_modify: NfsTime4,
    54 time_modify_set: SetTime4,
    55 mounted_on_fileid: u64,
    75 suppattr_exclcreat: Bitmap4,
}

/// `supported_attrs`: every attribute of the table.
pub fn supported() -> Bitmap4 {
    Bitmap4::from_bits(SUPPORTED_BITS)
}

/// The attributes that may be set (SETATTR, OPEN's create attributes).
pub const SETTABLE_BITS: &[u32] = &[
    attr::size,
    attr::mode,
    attr::owner,
    attr::owner_group,
    attr::time_access_set,
    attr::time_modify_set,
];
