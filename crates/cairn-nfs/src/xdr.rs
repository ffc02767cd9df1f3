//! XDR (RFC 4506): the byte cursor every protocol type of this crate is encoded to and decoded
//! from.
//!
//! **Why our own.** See the crate's top comment: the crates that offer XDR for NFS allocate a
//! length taken from the wire before checking it.
//!
//! **Invariants.** Decoding never panics and never allocates more than the input it has
//! already seen: every variable-length item is checked against its protocol bound *and*
//! against the bytes left in the buffer before anything is copied. Encoding cannot fail;
//! bounded types (file handles, names) check their bound when built, so what this crate
//! encodes always decodes again. Booleans and enumerations are strict: a value outside the
//! protocol's set is an error, not a guess.
//!
//! Everything is big-endian and padded to 4 bytes, as XDR requires; padding bytes are skipped
//! without being checked for zero (Linux clients and servers do the same).

use thiserror::Error;

/// What can go wrong decoding (or, for over-long values, building) an XDR item.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum XdrError {
    /// The input ended inside an item.
    #[error("XDR input truncated: {what} needs {needed_bytes} bytes, {remaining_bytes} left")]
    Truncated {
        what: &'static str,
        needed_bytes: usize,
        remaining_bytes: usize,
    },
    /// A length field over the protocol's bound for that item.
    #[error("{what} is {len_bytes} long, over its maximum of {max_bytes}")]
    TooLong {
        what: &'static str,
        len_bytes: u64,
        max_bytes: u64,
    },
    /// An enumeration or union discriminant the protocol does not define.
    #[error("{what} has no value {value}")]
    BadDiscriminant { what: &'static str, value: u32 },
    /// A procedure number the program does not have.
    #[error("procedure {0} does not exist in this program")]
    UnknownProcedure(u32),
    /// Two fields that must agree do not (WRITE's count and its data length).
    #[error("{what}: {first} and {second} disagree")]
    Mismatch {
        what: &'static str,
        first: u64,
        second: u64,
    },
}

/// A value that can be written as XDR.
pub trait XdrEncode {
    fn encode(&self, enc: &mut Encoder);
}

/// A value that can be read from XDR.
pub trait XdrDecode: Sized {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError>;
}

/// Bytes of zero padding that follow `len_bytes` bytes of opaque data.
pub fn padding_bytes(len_bytes: usize) -> usize {
    (4 - len_bytes % 4) % 4
}

/// Appends XDR to a growing buffer.
///
/// Made with [`Encoder::for_record`], the first 4 bytes are kept for the RPC record mark,
/// filled by [`Encoder::into_record`], so a reply (up to a 1 MiB READ) is never copied to be
/// framed.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: Vec<u8>,
    record_mark: bool,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder whose output is one RPC record (see [`crate::record`]).
    pub fn for_record() -> Self {
        Self {
            buf: vec![0; 4],
            record_mark: true,
        }
    }

    pub fn put_u32(&mut self, value: u32) {
        self.buf.extend_from_slice(&value.to_be_bytes());
    }

    pub fn put_u64(&mut self, value: u64) {
        self.buf.extend_from_slice(&value.to_be_bytes());
    }

    pub fn put_bool(&mut self, value: bool) {
        self.put_u32(u32::from(value));
    }

    /// Fixed-length opaque data: the bytes and their padding, no length.
    pub fn put_fixed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        self.buf
            .extend_from_slice(&[0; 4][..padding_bytes(bytes.len())]);
    }

    /// Variable-length opaque data or a string: length, bytes, padding. Callers hold values
    /// whose length was bounded when they were built (far below 4 GiB); a longer slice would
    /// be a bug upstream, and its length is saturated rather than wrapped.
    pub fn put_opaque(&mut self, bytes: &[u8]) {
        self.put_u32(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
        self.put_fixed(bytes);
    }

    pub fn put<T: XdrEncode + ?Sized>(&mut self, value: &T) {
        value.encode(self);
    }

    /// Bytes written so far (without the record mark).
    pub fn len_bytes(&self) -> usize {
        self.buf.len() - if self.record_mark { 4 } else { 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.len_bytes() == 0
    }

    /// The XDR bytes, without any record mark.
    pub fn into_bytes(self) -> Vec<u8> {
        if self.record_mark {
            self.buf[4..].to_vec()
        } else {
            self.buf
        }
    }

    /// The bytes as one complete RPC record: a single last fragment. An encoder not made with
    /// [`Encoder::for_record`] is framed by copying. Fails only past 2 GiB, the largest fragment.
    pub fn into_record(self) -> Result<Vec<u8>, XdrError> {
        let mut buf = if self.record_mark {
            self.buf
        } else {
            let mut framed = Vec::with_capacity(self.buf.len() + 4);
            framed.extend_from_slice(&[0; 4]);
            framed.extend_from_slice(&self.buf);
            framed
        };
        let payload_bytes = buf.len() - 4;
        let max_bytes = crate::record::FRAGMENT_LEN_MASK;
        let len = u32::try_from(payload_bytes)
            .ok()
            .filter(|len| *len <= max_bytes)
            .ok_or(XdrError::TooLong {
                what: "RPC record",
                len_bytes: payload_bytes as u64,
                max_bytes: u64::from(max_bytes),
            })?;
        buf[..4].copy_from_slice(&(len | crate::record::LAST_FRAGMENT).to_be_bytes());
        Ok(buf)
    }
}

/// Reads XDR from a byte slice.
///
/// Carries the largest READ/WRITE payload the caller accepts ([`Decoder::max_data_bytes`]),
/// so types holding file data can bound themselves without a parameter of their own.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    bytes: &'a [u8],
    pos: usize,
    max_data_bytes: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder over `bytes` accepting file data up to 1 MiB (what cairn advertises).
    pub fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            pos: 0,
            max_data_bytes: DEFAULT_MAX_DATA_BYTES,
        }
    }

    /// The same with another bound on READ/WRITE/READLINK-sized file data.
    pub fn with_max_data_bytes(mut self, max_data_bytes: usize) -> Self {
        self.max_data_bytes = max_data_bytes;
        self
    }

    pub fn max_data_bytes(&self) -> usize {
        self.max_data_bytes
    }

    pub fn remaining_bytes(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The bytes not yet decoded (e.g. a call's arguments after its header).
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }

    fn take(&mut self, len_bytes: usize, what: &'static str) -> Result<&'a [u8], XdrError> {
        if len_bytes > self.remaining_bytes() {
            return Err(XdrError::Truncated {
                what,
                needed_bytes: len_bytes,
                remaining_bytes: self.remaining_bytes(),
            });
        }
        let start = self.pos;
        self.pos += len_bytes;
        Ok(&self.bytes[start..self.pos])
    }

    pub fn get_u32(&mut self) -> Result<u32, XdrError> {
        let mut word = [0; 4];
        word.copy_from_slice(self.take(4, "uint32")?);
        Ok(u32::from_be_bytes(word))
    }

    pub fn get_u64(&mut self) -> Result<u64, XdrError> {
        let mut word = [0; 8];
        word.copy_from_slice(self.take(8, "uint64")?);
        Ok(u64::from_be_bytes(word))
    }

    pub fn get_bool(&mut self) -> Result<bool, XdrError> {
        match self.get_u32()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(XdrError::BadDiscriminant {
                what: "bool",
                value,
            }),
        }
    }

    /// Fixed-length opaque data of `N` bytes (and its padding).
    pub fn get_fixed<const N: usize>(&mut self) -> Result<[u8; N], XdrError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, "fixed opaque")?);
        self.take(padding_bytes(N), "padding")?;
        Ok(out)
    }

    /// Variable-length opaque data or a string of at most `max_bytes`, borrowed from the input.
    /// The length is checked against the bound and the input before anything is touched.
    pub fn get_opaque(
        &mut self,
        max_bytes: usize,
        what: &'static str,
    ) -> Result<&'a [u8], XdrError> {
        let len = self.get_u32()?;
        let len_bytes = len as usize;
        if len_bytes > max_bytes {
            return Err(XdrError::TooLong {
                what,
                len_bytes: u64::from(len),
                max_bytes: max_bytes as u64,
            });
        }
        let bytes = self.take(len_bytes, what)?;
        self.take(padding_bytes(len_bytes), "padding")?;
        Ok(bytes)
    }

    pub fn get<T: XdrDecode>(&mut self) -> Result<T, XdrError> {
        T::decode(self)
    }

    /// A counted array of at most `max_items`. Each item takes at least 4 bytes of input, so
    /// the reservation is also capped by what is left: a huge count cannot allocate.
    pub fn get_array<T: XdrDecode>(
        &mut self,
        max_items: usize,
        what: &'static str,
    ) -> Result<Vec<T>, XdrError> {
        let count = self.get_u32()?;
        if count as usize > max_items {
            return Err(XdrError::TooLong {
                what,
                len_bytes: u64::from(count),
                max_bytes: max_items as u64,
            });
        }
        let mut items = Vec::with_capacity((count as usize).min(self.remaining_bytes() / 4));
        for _ in 0..count {
            items.push(T::decode(self)?);
        }
        Ok(items)
    }

    /// An XDR linked list (`*next` optional-data chain), as the entries of READDIR, DUMP or
    /// EXPORT: `true item`… `false`. Bounded by the input alone (each link costs 4 bytes).
    pub fn get_list<T: XdrDecode>(&mut self) -> Result<Vec<T>, XdrError> {
        let mut items = Vec::new();
        while self.get_bool()? {
            items.push(T::decode(self)?);
        }
        Ok(items)
    }
}

/// File data accepted by [`Decoder::new`]: the 1 MiB cairn advertises in FSINFO.
pub const DEFAULT_MAX_DATA_BYTES: usize = 1 << 20;

/// Encodes an XDR linked list (see [`Decoder::get_list`]).
pub fn put_list<T: XdrEncode>(enc: &mut Encoder, items: &[T]) {
    for item in items {
        enc.put_bool(true);
        item.encode(enc);
    }
    enc.put_bool(false);
}

/// Encodes a counted array.
pub fn put_array<T: XdrEncode>(enc: &mut Encoder, items: &[T]) {
    enc.put_u32(u32::try_from(items.len()).unwrap_or(u32::MAX));
    for item in items {
        item.encode(enc);
    }
}

/// Bytes `value` takes on the wire (encodes it into scratch space).
pub fn encoded_len_bytes<T: XdrEncode + ?Sized>(value: &T) -> usize {
    let mut enc = Encoder::new();
    value.encode(&mut enc);
    enc.len_bytes()
}

/// XDR `void`: nothing on the wire (GETATTR's failure body, MOUNT's UMNT result).
impl XdrEncode for () {
    fn encode(&self, _enc: &mut Encoder) {}
}

impl XdrDecode for () {
    fn decode(_dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(())
    }
}

impl XdrEncode for u32 {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u32(*self);
    }
}

impl XdrDecode for u32 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        dec.get_u32()
    }
}

impl XdrEncode for u64 {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_u64(*self);
    }
}

impl XdrDecode for u64 {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        dec.get_u64()
    }
}

impl XdrEncode for bool {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_bool(*self);
    }
}

impl XdrDecode for bool {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        dec.get_bool()
    }
}

impl<const N: usize> XdrEncode for [u8; N] {
    fn encode(&self, enc: &mut Encoder) {
        enc.put_fixed(self);
    }
}

impl<const N: usize> XdrDecode for [u8; N] {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        dec.get_fixed()
    }
}

/// XDR optional data (`*T`) and every bool-discriminated union whose false arm is void
/// (post_op_attr, pre_op_attr, post_op_fh3, set_mode3, sattrguard3…).
impl<T: XdrEncode> XdrEncode for Option<T> {
    fn encode(&self, enc: &mut Encoder) {
        match self {
            Some(value) => {
                enc.put_bool(true);
                value.encode(enc);
            }
            None => enc.put_bool(false),
        }
    }
}

impl<T: XdrDecode> XdrDecode for Option<T> {
    fn decode(dec: &mut Decoder<'_>) -> Result<Self, XdrError> {
        if dec.get_bool()? {
            Ok(Some(T::decode(dec)?))
        } else {
            Ok(None)
        }
    }
}

/// Declares a struct whose XDR form is its fields in order, with both codec impls.
macro_rules! xdr_struct {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident : $ty:ty),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name { $($(#[$fmeta])* pub $field: $ty),* }

        impl $crate::xdr::XdrEncode for $name {
            #[allow(unused_variables)]
            fn encode(&self, enc: &mut $crate::xdr::Encoder) {
                $(enc.put(&self.$field);)*
            }
        }

        impl $crate::xdr::XdrDecode for $name {
            #[allow(unused_variables)]
            fn decode(dec: &mut $crate::xdr::Decoder<'_>) -> Result<Self, $crate::xdr::XdrError> {
                Ok(Self { $($field: dec.get()?),* })
            }
        }
    };
}

/// Declares a C-like enumeration with explicit wire values, with both codec impls (an
/// undefined value decodes to [`XdrError::BadDiscriminant`]) and `as_u32`/`from_u32`.
macro_rules! xdr_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant),* }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            pub fn as_u32(self) -> u32 {
                match self { $($name::$variant => $value),* }
            }

            pub fn from_u32(value: u32) -> Option<Self> {
                match value { $($value => Some($name::$variant),)* _ => None }
            }
        }

        impl $crate::xdr::XdrEncode for $name {
            fn encode(&self, enc: &mut $crate::xdr::Encoder) {
                enc.put_u32(self.as_u32());
            }
        }

        impl $crate::xdr::XdrDecode for $name {
            fn decode(dec: &mut $crate::xdr::Decoder<'_>) -> Result<Self, $crate::xdr::XdrError> {
                let value = dec.get_u32()?;
                Self::from_u32(value).ok_or($crate::xdr::XdrError::BadDiscriminant {
                    what: stringify!($name),
                    value,
                })
            }
        }
    };
}

/// Declares a newtype over bytes bounded to `$max` (file handle, name, path), checked when
/// built and when decoded.
macro_rules! xdr_bounded_bytes {
    ($(#[$meta:meta])* pub struct $name:ident, max = $max:expr, what = $what:expr) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
        pub struct $name(Vec<u8>);

        impl $name {
            /// Longest value, in bytes.
            pub const MAX_BYTES: usize = $max;

            pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, $crate::xdr::XdrError> {
                let bytes = bytes.into();
                if bytes.len() > Self::MAX_BYTES {
                    return Err($crate::xdr::XdrError::TooLong {
                        what: $what,
                        len_bytes: bytes.len() as u64,
                        max_bytes: Self::MAX_BYTES as u64,
                    });
                }
                Ok(Self(bytes))
            }

            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }

            pub fn into_bytes(self) -> Vec<u8> {
                self.0
            }
        }

        impl $crate::xdr::XdrEncode for $name {
            fn encode(&self, enc: &mut $crate::xdr::Encoder) {
                enc.put_opaque(&self.0);
            }
        }

        impl $crate::xdr::XdrDecode for $name {
            fn decode(dec: &mut $crate::xdr::Decoder<'_>) -> Result<Self, $crate::xdr::XdrError> {
                Ok(Self(dec.get_opaque(Self::MAX_BYTES, $what)?.to_vec()))
            }
        }
    };
}

pub(crate) use xdr_bounded_bytes;
pub(crate) use xdr_enum;
pub(crate) use xdr_struct;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_is_padded_and_bounded() {
        let mut enc = Encoder::new();
        enc.put_opaque(b"hello");
        let bytes = enc.into_bytes();
        assert_eq!(bytes, [0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 0, 0, 0]);
        let mut dec = Decoder::new(&bytes);
        assert_eq!(dec.get_opaque(5, "x"), Ok(&b"hello"[..]));
        assert_eq!(dec.remaining_bytes(), 0);
        let mut dec = Decoder::new(&bytes);
        assert!(matches!(
            dec.get_opaque(4, "x"),
            Err(XdrError::TooLong { .. })
        ));
    }

    #[test]
    fn huge_length_is_refused_before_allocating() {
        let bytes = [0xff, 0xff, 0xff, 0xff, 1, 2, 3, 4];
        let mut dec = Decoder::new(&bytes);
        assert!(matches!(
            dec.get_opaque(usize::MAX, "x"),
            Err(XdrError::Truncated { .. })
        ));
        let mut dec = Decoder::new(&bytes);
        assert!(matches!(
            dec.get_array::<u32>(usize::MAX, "x"),
            Err(XdrError::Truncated { .. })
        ));
    }

    #[test]
    fn bool_is_strict() {
        let mut dec = Decoder::new(&[0, 0, 0, 2]);
        assert!(matches!(
            dec.get_bool(),
            Err(XdrError::BadDiscriminant { .. })
        ));
    }

    #[test]
    fn record_encoder_frames_in_place() {
        let mut enc = Encoder::for_record();
        enc.put_u32(7);
        assert_eq!(enc.len_bytes(), 4);
        let record = enc.into_record();
        assert_eq!(record, Ok(vec![0x80, 0, 0, 4, 0, 0, 0, 7]));
    }
}
