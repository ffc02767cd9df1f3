//! The send stream: what `cairn send` writes and `cairn receive` reads (ZFS's replay stream).
//! It is a wire format, not an on-disk one: it lives in a file or a pipe, and `docs/format.md`
//! ("Send stream") describes it byte for byte.
//!
//! Layout: a fixed 128-byte stream header (magic, version, features, what the stream carries:
//! the target snapshot's guid and txg, for an incremental the source's, the properties the
//! data needs), then records, each a fixed 96-byte record header and a payload of the length
//! it states: OBJECT (an object to create or redefine, its bonus as payload), FREEOBJECTS (a
//! range of object numbers that hold nothing), WRITE (one block's logical bytes, or with
//! `SEND_FEATURE_COMPRESSED` its bytes as stored, compressed), FREE (a byte range of an object
//! that reads as zero) and END (the last record).
//!
//! Why every record carries a checksum of everything before it: a receiver must know a stream
//! is whole and undamaged before it makes anything visible, and must stop at the first bad
//! byte, not at the end. The checksums form a chain (`record_checksum`): a record's is BLAKE3
//! of the checksum before it (the stream header's for the first record), the header's own
//! first 64 bytes and BLAKE3 of its payload. A flipped byte anywhere fails the record that
//! holds it (or the next one), a record moved or dropped fails the next, and a cut stream ends
//! before an END whose checksum verified.
//!
//! Why a chain of payload hashes and not one running hash of every byte (version 1): the
//! running hash had to be cloned and fed the payload once more to give each record its own
//! checksum, two passes over every byte, at offsets that straddle BLAKE3's 1 KiB chunks, so
//! most of the hashing went through its serial path (measured: 35 % of a full send's CPU and
//! the send's bottleneck on RAM-backed files). A payload hashed on its own starts chunk
//! aligned and goes through BLAKE3's wide SIMD path once; the chain itself is 128 bytes a
//! record. Version 1 streams are refused (the format never left this project's tests).
//!
//! Invariants: decoding never trusts a length (a payload is bounded by `SEND_PAYLOAD_MAX` before
//! anything is allocated, a bonus by `DNODE_BONUS_SIZE_MAX`), never panics on any input, and
//! refuses unknown kinds, features and flags instead of skipping them.

use crate::dnode::DNODE_BONUS_SIZE_MAX;
pub use crate::send_token::ResumePoint;
use crate::{BLOCK_SIZE_MAX, Compression, ObjectType};
use std::io::{Read, Write};
use thiserror::Error;

/// First 8 bytes of every stream: "CAIRNSND" read as a little-endian u64.
pub const SEND_STREAM_MAGIC: u64 = 0x444e_534e_5249_4143;
/// Version of the stream layout this build writes and reads (2: the checksum chain of
/// `record_checksum`).
pub const SEND_STREAM_VERSION: u32 = 2;
/// Size of the stream header.
pub const SEND_HEADER_SIZE: usize = 128;
/// Size of every record header.
pub const SEND_RECORD_HEADER_SIZE: usize = 96;
/// Largest payload of any record: one block's bytes.
pub const SEND_PAYLOAD_MAX: usize = BLOCK_SIZE_MAX as usize;
/// Longest snapshot name END carries (a dataset name's limit).
pub const SEND_SNAPSHOT_NAME_MAX: usize = 255;
/// Bytes of a record header the checksum covers (the checksum field follows them).
const RECORD_HASHED_BYTES: usize = 64;
/// Bytes of the stream header its own checksum covers.
const HEADER_HASHED_BYTES: usize = 96;

/// Feature bit (`send -c`): WRITE records may carry a block as stored, compressed
/// (`SEND_WRITE_FLAG_COMPRESSED`); a reader that does not know it refuses the stream.
pub const SEND_FEATURE_COMPRESSED: u32 = 1 << 0;

/// Feature bit: the stream is a package of streams with a manifest (`send_package`), what
/// `send -R`, `-I` and `-p` write. `StreamReader` reads no package: a receiver looks at the
/// header's features first (`send_package::is_package`).
pub const SEND_FEATURE_PACKAGE: u32 = 1 << 2;

/// Feature bit: the stream is the rest of a cut one (`cairn send -t`): it starts at the resume
/// point the header carries (bytes 80..96), not at the first object.
pub const SEND_FEATURE_RESUME: u32 = 1 << 1;

/// Feature bits of the stream header this build knows; a reader refuses any other bit, so a
/// later stream that needs a feature is never half-understood.
pub const SEND_FEATURES_KNOWN: u32 =
    SEND_FEATURE_COMPRESSED | SEND_FEATURE_RESUME | SEND_FEATURE_PACKAGE;

/// WRITE flag: the payload is the block as stored, compressed (`send -c`); fields 3 and 4
/// give its logical size and compression id. Allowed only in a stream with
/// `SEND_FEATURE_COMPRESSED`.
pub const SEND_WRITE_FLAG_COMPRESSED: u16 = 1;

/// What a stream's dataset is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Volume = 1,
    Filesystem = 2,
}

/// The stream header: what a receiver checks before it applies a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamHeader {
    pub features: u32,
    pub kind: StreamKind,
    /// The sent snapshot's guid (unique and stable: it follows the snapshot into every pool
    /// that receives it).
    pub to_guid: u64,
    /// The txg the sent snapshot was taken in, in the sender's pool.
    pub to_txg: u64,
    /// For an incremental, the guid of the snapshot (or bookmark's snapshot) it starts from;
    /// 0 for a full stream.
    pub from_guid: u64,
    /// The source's txg in the sender's pool (0 for a full stream).
    pub from_txg: u64,
    /// A volume's size (0 for a filesystem).
    pub volsize_bytes: u64,
    /// `volblocksize` of a volume, `recordsize` of a filesystem.
    pub block_size_bytes: u32,
    /// The sent snapshot's creation time, ms since the epoch.
    pub creation_ms: u64,
    /// A resumed stream (`SEND_FEATURE_RESUME`): where it starts.
    pub resume: Option<ResumePoint>,
}

impl StreamHeader {
    /// Whether the stream is incremental.
    pub fn is_incremental(&self) -> bool {
        self.from_guid != 0
    }

    pub fn encode(&self) -> [u8; SEND_HEADER_SIZE] {
        let mut out = [0u8; SEND_HEADER_SIZE];
        out[0..8].copy_from_slice(&SEND_STREAM_MAGIC.to_le_bytes());
        out[8..12].copy_from_slice(&SEND_STREAM_VERSION.to_le_bytes());
        let features = match self.resume {
            Some(point) => {
                out[80..88].copy_from_slice(&point.object.to_le_bytes());
                out[88..96].copy_from_slice(&point.offset_bytes.to_le_bytes());
                self.features | SEND_FEATURE_RESUME
            }
            None => self.features & !SEND_FEATURE_RESUME,
        };
        out[12..16].copy_from_slice(&features.to_le_bytes());
        out[16] = self.kind as u8;
        out[24..32].copy_from_slice(&self.to_guid.to_le_bytes());
        out[32..40].copy_from_slice(&self.to_txg.to_le_bytes());
        out[40..48].copy_from_slice(&self.from_guid.to_le_bytes());
        out[48..56].copy_from_slice(&self.from_txg.to_le_bytes());
        out[56..64].copy_from_slice(&self.volsize_bytes.to_le_bytes());
        out[64..68].copy_from_slice(&self.block_size_bytes.to_le_bytes());
        out[72..80].copy_from_slice(&self.creation_ms.to_le_bytes());
        let checksum = blake3::hash(&out[..HEADER_HASHED_BYTES]);
        out[HEADER_HASHED_BYTES..].copy_from_slice(checksum.as_bytes());
        out
    }

    pub fn decode(bytes: &[u8; SEND_HEADER_SIZE]) -> Result<StreamHeader, StreamError> {
        let magic = u64_at(bytes, 0);
        if magic != SEND_STREAM_MAGIC {
            return Err(StreamError::NotAStream { magic });
        }
        let version = u32_at(bytes, 8);
        if version != SEND_STREAM_VERSION {
            return Err(StreamError::Version { found: version });
        }
        if blake3::hash(&bytes[..HEADER_HASHED_BYTES]).as_bytes() != &bytes[HEADER_HASHED_BYTES..] {
            return Err(StreamError::Checksum {
                record: 0,
                offset_bytes: 0,
            });
        }
        let malformed = |what: String| StreamError::Malformed {
            record: 0,
            offset_bytes: 0,
            what,
        };
        let features = u32_at(bytes, 12);
        if features & !SEND_FEATURES_KNOWN != 0 {
            return Err(malformed(format!("unknown feature bits {features:#x}")));
        }
        let kind = match bytes[16] {
            1 => StreamKind::Volume,
            2 => StreamKind::Filesystem,
            other => return Err(malformed(format!("unknown stream kind {other}"))),
        };
        let header = StreamHeader {
            features,
            kind,
            to_guid: u64_at(bytes, 24),
            to_txg: u64_at(bytes, 32),
            from_guid: u64_at(bytes, 40),
            from_txg: u64_at(bytes, 48),
            volsize_bytes: u64_at(bytes, 56),
            block_size_bytes: u32_at(bytes, 64),
            creation_ms: u64_at(bytes, 72),
            resume: (features & SEND_FEATURE_RESUME != 0).then(|| ResumePoint {
                object: u64_at(bytes, 80),
                offset_bytes: u64_at(bytes, 88),
            }),
        };
        let block_ok = header.block_size_bytes != 0
            && header.block_size_bytes <= BLOCK_SIZE_MAX
            && header
                .block_size_bytes
                .is_multiple_of(crate::BLOCK_SIZE_GRANULE);
        if header.to_guid == 0 || !block_ok || header.from_txg >= header.to_txg.max(1) {
            return Err(malformed(format!("inconsistent header {header:?}")));
        }
        if header.is_incremental() != (header.from_txg != 0) {
            return Err(malformed("a source guid without a source txg".into()));
        }
        Ok(header)
    }
}

/// One record after the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamRecord {
    /// Object `object` exists with this shape and bonus (created, or redefined: a receiver
    /// drops what it held first when the type or block size differs).
    Object {
        object: u64,
        object_type: ObjectType,
        block_size_bytes: u32,
        indirect_shift: u8,
        bonus: Vec<u8>,
    },
    /// Objects `first .. first + count` hold nothing.
    FreeObjects { first: u64, count: u64 },
    /// The block of `object` at `offset_bytes` (a multiple of its block size) holds `data`.
    Write {
        object: u64,
        offset_bytes: u64,
        data: Vec<u8>,
    },
    /// The block of `object` at `offset_bytes` as stored: `data` is `logical_bytes` bytes
    /// compressed with `compression` in the pool's physical layout (`crate::compress`). Only in
    /// a stream with `SEND_FEATURE_COMPRESSED`; a receiver checks it decompresses to exactly
    /// `logical_bytes` before it uses it.
    WriteCompressed {
        object: u64,
        offset_bytes: u64,
        logical_bytes: u32,
        compression: Compression,
        data: Vec<u8>,
    },
    /// Bytes `offset_bytes .. offset_bytes + length_bytes` of `object` read as zero (whole
    /// blocks: the range is block aligned); `length_bytes` = `u64::MAX` runs to the end.
    Free {
        object: u64,
        offset_bytes: u64,
        length_bytes: u64,
    },
    /// The stream is complete; repeats the target guid and names the sent snapshot (the part
    /// after '@': a receiver makes a snapshot of that name).
    End { to_guid: u64, snapshot: String },
}

const KIND_OBJECT: u16 = 2;
const KIND_FREEOBJECTS: u16 = 3;
const KIND_WRITE: u16 = 4;
const KIND_FREE: u16 = 5;
const KIND_END: u16 = 6;

/// Why a stream was refused. `record` counts records from 1 (0 is the stream header) and
/// `offset_bytes` is where that record starts in the stream.
#[derive(Debug, Error)]
pub enum StreamError {
    #[error("not a cairn send stream (magic {magic:#018x})")]
    NotAStream { magic: u64 },
    #[error("send stream version {found}: this build reads version {SEND_STREAM_VERSION}")]
    Version { found: u32 },
    #[error(
        "send stream damaged: checksum of record {record} (at byte {offset_bytes}) does not match"
    )]
    Checksum { record: u64, offset_bytes: u64 },
    #[error("send stream truncated in record {record} (at byte {offset_bytes})")]
    Truncated { record: u64, offset_bytes: u64 },
    #[error("send stream record {record} (at byte {offset_bytes}) is malformed: {what}")]
    Malformed {
        record: u64,
        offset_bytes: u64,
        what: String,
    },
    #[error("send stream: {0}")]
    Io(#[from] std::io::Error),
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

/// The start of a stream's checksum chain: the stream header's own checksum (bytes 96..128).
fn header_chain(header: &[u8; SEND_HEADER_SIZE]) -> [u8; 32] {
    let mut chain = [0u8; 32];
    chain.copy_from_slice(&header[HEADER_HASHED_BYTES..]);
    chain
}

/// A record's checksum (see the module doc): BLAKE3 of `before` (the previous record's
/// checksum, or the stream header's), the record header's first 64 bytes and BLAKE3 of
/// `payload`. Public so a tool that builds streams by hand (the fuzz cases) chains them the
/// same way.
pub fn record_checksum(
    before: &[u8; 32],
    header: &[u8; SEND_RECORD_HEADER_SIZE],
    payload: &[u8],
) -> [u8; 32] {
    let mut input = [0u8; 32 + RECORD_HASHED_BYTES + 32];
    input[..32].copy_from_slice(before);
    input[32..32 + RECORD_HASHED_BYTES].copy_from_slice(&header[..RECORD_HASHED_BYTES]);
    input[32 + RECORD_HASHED_BYTES..].copy_from_slice(blake3::hash(payload).as_bytes());
    *blake3::hash(&input).as_bytes()
}

/// Writes a stream: the header at `new`, records with `write`, END with `finish`. A
/// counting writer (`counting`, `send -n`) writes and hashes nothing: it adds up the bytes the
/// same records would take, so a size is exact without reading any block's data
/// (`count_data` stands for a WRITE whose payload was never read).
pub struct StreamWriter<'w> {
    out: &'w mut dyn Write,
    /// The checksum of the last record written (the stream header's at first).
    chain: [u8; 32],
    to_guid: u64,
    features: u32,
    bytes_written: u64,
    counting: bool,
}

impl<'w> StreamWriter<'w> {
    pub fn new(out: &'w mut dyn Write, header: &StreamHeader) -> std::io::Result<Self> {
        let bytes = header.encode();
        out.write_all(&bytes)?;
        Ok(StreamWriter {
            out,
            chain: header_chain(&bytes),
            to_guid: header.to_guid,
            features: header.features,
            bytes_written: SEND_HEADER_SIZE as u64,
            counting: false,
        })
    }

    /// A writer that only counts (see the type's doc): `out` is never written.
    pub fn counting(out: &'w mut dyn Write, header: &StreamHeader) -> StreamWriter<'w> {
        StreamWriter {
            out,
            chain: [0; 32],
            to_guid: header.to_guid,
            features: header.features,
            bytes_written: SEND_HEADER_SIZE as u64,
            counting: true,
        }
    }

    /// Whether this writer only counts.
    pub fn is_counting(&self) -> bool {
        self.counting
    }

    /// On a counting writer, a WRITE whose payload is `payload_bytes` long (a block's
    /// logical size, or its stored size for a compressed WRITE); refused on a real one.
    pub fn count_data(&mut self, payload_bytes: u64) -> std::io::Result<()> {
        if !self.counting || payload_bytes > SEND_PAYLOAD_MAX as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "count_data on a writer that writes, or a block larger than BLOCK_SIZE_MAX",
            ));
        }
        self.bytes_written += SEND_RECORD_HEADER_SIZE as u64 + payload_bytes;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// The stream header's feature bits.
    pub fn features(&self) -> u32 {
        self.features
    }

    /// Appends one record. END is written by `finish`, never here.
    pub fn write(&mut self, record: &StreamRecord) -> std::io::Result<()> {
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
        let (kind, fields, payload): (u16, [u64; 6], &[u8]) = match record {
            StreamRecord::Object {
                object,
                object_type,
                block_size_bytes,
                indirect_shift,
                bonus,
            } => {
                if bonus.len() > DNODE_BONUS_SIZE_MAX {
                    return Err(invalid("bonus larger than a dnode holds"));
                }
                (
                    KIND_OBJECT,
                    [
                        *object,
                        *object_type as u64,
                        u64::from(*block_size_bytes),
                        u64::from(*indirect_shift),
                        0,
                        0,
                    ],
                    bonus,
                )
            }
            StreamRecord::FreeObjects { first, count } => {
                (KIND_FREEOBJECTS, [*first, *count, 0, 0, 0, 0], &[])
            }
            StreamRecord::Write {
                object,
                offset_bytes,
                data,
            } => return self.write_data(*object, *offset_bytes, data),
            StreamRecord::WriteCompressed {
                object,
                offset_bytes,
                logical_bytes,
                compression,
                data,
            } => {
                return self.write_compressed(
                    *object,
                    *offset_bytes,
                    *logical_bytes,
                    *compression,
                    data,
                );
            }
            StreamRecord::Free {
                object,
                offset_bytes,
                length_bytes,
            } => (
                KIND_FREE,
                [*object, *offset_bytes, *length_bytes, 0, 0, 0],
                &[],
            ),
            StreamRecord::End { .. } => return Err(invalid("END is written by finish")),
        };
        self.emit(kind, 0, fields, payload)
    }

    /// Appends WRITE of `data` at `offset_bytes` of `object`: `write` of a `StreamRecord::Write`
    /// without the caller copying a block it holds into a record of its own.
    pub fn write_data(
        &mut self,
        object: u64,
        offset_bytes: u64,
        data: &[u8],
    ) -> std::io::Result<()> {
        if data.len() > SEND_PAYLOAD_MAX {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a block larger than BLOCK_SIZE_MAX",
            ));
        }
        let fields = [object, offset_bytes, data.len() as u64, 0, 0, 0];
        self.emit(KIND_WRITE, 0, fields, data)
    }

    /// Appends WRITE of a block as stored: `data` is `logical_bytes` bytes compressed with
    /// `compression`. The stream's header must have `SEND_FEATURE_COMPRESSED`.
    pub fn write_compressed(
        &mut self,
        object: u64,
        offset_bytes: u64,
        logical_bytes: u32,
        compression: Compression,
        data: &[u8],
    ) -> std::io::Result<()> {
        let invalid = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
        if self.features & SEND_FEATURE_COMPRESSED == 0 {
            return Err(invalid(
                "a compressed WRITE in a stream without the feature",
            ));
        }
        if compression == Compression::Off
            || data.is_empty()
            || data.len() > logical_bytes as usize
            || !(data.len() as u64).is_multiple_of(u64::from(crate::BLOCK_SIZE_GRANULE))
            || logical_bytes > BLOCK_SIZE_MAX
        {
            return Err(invalid("a compressed WRITE that is not a compressed block"));
        }
        let fields = [
            object,
            offset_bytes,
            data.len() as u64,
            u64::from(logical_bytes),
            compression as u64,
            0,
        ];
        self.emit(KIND_WRITE, SEND_WRITE_FLAG_COMPRESSED, fields, data)
    }

    /// Writes END naming the sent snapshot (`snapshot`: the part after '@') and flushes: the
    /// stream is complete.
    pub fn finish(self, snapshot: &str) -> std::io::Result<u64> {
        self.finish_with_checksum(snapshot).map(|(bytes, _)| bytes)
    }

    /// `finish`, also returning END's checksum (the end of the stream's chain, which a
    /// package takes into its own: `send_package`).
    pub fn finish_with_checksum(mut self, snapshot: &str) -> std::io::Result<(u64, [u8; 32])> {
        if snapshot.is_empty() || snapshot.len() > SEND_SNAPSHOT_NAME_MAX {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a snapshot name of 1 to 255 bytes",
            ));
        }
        let to_guid = self.to_guid;
        self.emit(KIND_END, 0, [to_guid, 0, 0, 0, 0, 0], snapshot.as_bytes())?;
        self.out.flush()?;
        Ok((self.bytes_written, self.chain))
    }

    fn emit(
        &mut self,
        kind: u16,
        flags: u16,
        fields: [u64; 6],
        payload: &[u8],
    ) -> std::io::Result<()> {
        if self.counting {
            self.bytes_written += (SEND_RECORD_HEADER_SIZE + payload.len()) as u64;
            return Ok(());
        }
        let mut header = [0u8; SEND_RECORD_HEADER_SIZE];
        header[0..2].copy_from_slice(&kind.to_le_bytes());
        header[2..4].copy_from_slice(&flags.to_le_bytes());
        // Bounded by the callers (`SEND_PAYLOAD_MAX` fits a u32).
        header[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        for (index, field) in fields.iter().enumerate() {
            let at = 8 + index * 8;
            header[at..at + 8].copy_from_slice(&field.to_le_bytes());
        }
        self.chain = record_checksum(&self.chain, &header, payload);
        header[RECORD_HASHED_BYTES..].copy_from_slice(&self.chain);
        self.out.write_all(&header)?;
        self.out.write_all(payload)?;
        self.bytes_written += (SEND_RECORD_HEADER_SIZE + payload.len()) as u64;
        Ok(())
    }
}

/// Reads a stream: the header at `new`, then records with `next` until END. A record is
/// returned only once its checksum verified, so nothing of a damaged record reaches a caller.
pub struct StreamReader<'r> {
    input: &'r mut dyn Read,
    header: StreamHeader,
    /// The checksum of the last record verified (the stream header's at first).
    chain: [u8; 32],
    records: u64,
    offset_bytes: u64,
    ended: bool,
}

impl<'r> StreamReader<'r> {
    pub fn new(input: &'r mut dyn Read) -> Result<Self, StreamError> {
        let mut bytes = [0u8; SEND_HEADER_SIZE];
        read_full(input, &mut bytes, 0, 0)?;
        let header = StreamHeader::decode(&bytes)?;
        Ok(StreamReader {
            input,
            header,
            chain: header_chain(&bytes),
            records: 0,
            offset_bytes: SEND_HEADER_SIZE as u64,
            ended: false,
        })
    }

    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    /// Bytes read so far.
    pub fn offset_bytes(&self) -> u64 {
        self.offset_bytes
    }

    /// The checksum of the last record verified (after END: the end of the stream's chain,
    /// which a package takes into its own).
    pub fn checksum(&self) -> [u8; 32] {
        self.chain
    }

    /// The next record, verified. After END, `Ok(None)`.
    pub fn next_record(&mut self) -> Result<Option<StreamRecord>, StreamError> {
        if self.ended {
            return Ok(None);
        }
        self.records += 1;
        let (record, at) = (self.records, self.offset_bytes);
        let mut header = [0u8; SEND_RECORD_HEADER_SIZE];
        read_full(self.input, &mut header, record, at)?;
        let payload_len = u32_at(&header, 4) as usize;
        if payload_len > SEND_PAYLOAD_MAX {
            // Checked before the checksum, so a damaged length never allocates: the record is
            // refused either way.
            return Err(StreamError::Checksum {
                record,
                offset_bytes: at,
            });
        }
        let mut payload = vec![0u8; payload_len];
        read_full(self.input, &mut payload, record, at)?;
        let checksum = record_checksum(&self.chain, &header, &payload);
        if checksum != header[RECORD_HASHED_BYTES..] {
            return Err(StreamError::Checksum {
                record,
                offset_bytes: at,
            });
        }
        self.chain = checksum;
        self.offset_bytes += (SEND_RECORD_HEADER_SIZE + payload_len) as u64;
        let parsed = self.parse(&header, payload, record, at)?;
        self.ended = matches!(parsed, StreamRecord::End { .. });
        Ok(Some(parsed))
    }

    /// The typed record of a verified header and payload.
    fn parse(
        &self,
        header: &[u8; SEND_RECORD_HEADER_SIZE],
        payload: Vec<u8>,
        record: u64,
        at: u64,
    ) -> Result<StreamRecord, StreamError> {
        let malformed = |what: String| StreamError::Malformed {
            record,
            offset_bytes: at,
            what,
        };
        let kind = u16_at(header, 0);
        let flags = u16_at(header, 2);
        let field = |index: usize| u64_at(header, 8 + index * 8);
        let compressed_write = kind == KIND_WRITE
            && flags == SEND_WRITE_FLAG_COMPRESSED
            && self.header.features & SEND_FEATURE_COMPRESSED != 0;
        if flags != 0 && !compressed_write {
            return Err(malformed(format!("unknown flags {flags:#x}")));
        }
        if compressed_write {
            return compressed_write_record(&field, payload).map_err(malformed);
        }
        let no_payload = |payload: &[u8]| {
            if payload.is_empty() {
                Ok(())
            } else {
                Err(malformed("a payload where none belongs".into()))
            }
        };
        let parsed = match kind {
            KIND_OBJECT => object_record(&field, payload).map_err(malformed)?,
            KIND_FREEOBJECTS => {
                no_payload(&payload)?;
                if field(1) == 0 || field(0).checked_add(field(1)).is_none() {
                    return Err(malformed(format!("objects {} + {}", field(0), field(1))));
                }
                StreamRecord::FreeObjects {
                    first: field(0),
                    count: field(1),
                }
            }
            KIND_WRITE => {
                if field(2) != payload.len() as u64 || payload.is_empty() {
                    return Err(malformed(format!(
                        "length {} with a {}-byte payload",
                        field(2),
                        payload.len()
                    )));
                }
                StreamRecord::Write {
                    object: field(0),
                    offset_bytes: field(1),
                    data: payload,
                }
            }
            KIND_FREE => {
                no_payload(&payload)?;
                StreamRecord::Free {
                    object: field(0),
                    offset_bytes: field(1),
                    length_bytes: field(2),
                }
            }
            KIND_END => {
                if payload.is_empty() || payload.len() > SEND_SNAPSHOT_NAME_MAX {
                    return Err(malformed(format!(
                        "a snapshot name of {} bytes",
                        payload.len()
                    )));
                }
                let snapshot = String::from_utf8(payload)
                    .map_err(|_| malformed("a snapshot name that is not UTF-8".into()))?;
                if field(0) != self.header.to_guid {
                    return Err(malformed(format!(
                        "END names guid {:#x}, the header {:#x}",
                        field(0),
                        self.header.to_guid
                    )));
                }
                StreamRecord::End {
                    to_guid: field(0),
                    snapshot,
                }
            }
            other => return Err(malformed(format!("unknown record kind {other}"))),
        };
        Ok(parsed)
    }
}

/// A compressed WRITE record's fields checked: `Err` says what is wrong. Whether the payload
/// really decompresses to its logical size is the receiver's check (it needs the codec).
fn compressed_write_record(
    field: &dyn Fn(usize) -> u64,
    payload: Vec<u8>,
) -> Result<StreamRecord, String> {
    let compression = u8::try_from(field(4))
        .ok()
        .and_then(|id| Compression::from_u8(id).ok())
        .filter(|compression| *compression != Compression::Off)
        .ok_or_else(|| format!("compression id {}", field(4)))?;
    let logical_bytes = u32::try_from(field(3))
        .ok()
        .filter(|size| {
            *size != 0 && *size <= BLOCK_SIZE_MAX && size.is_multiple_of(crate::BLOCK_SIZE_GRANULE)
        })
        .ok_or_else(|| format!("logical size {}", field(3)))?;
    if field(2) != payload.len() as u64
        || payload.is_empty()
        || payload.len() > logical_bytes as usize
        || !(payload.len() as u64).is_multiple_of(u64::from(crate::BLOCK_SIZE_GRANULE))
    {
        return Err(format!(
            "length {} with a {}-byte payload of a {logical_bytes}-byte block",
            field(2),
            payload.len()
        ));
    }
    Ok(StreamRecord::WriteCompressed {
        object: field(0),
        offset_bytes: field(1),
        logical_bytes,
        compression,
        data: payload,
    })
}

/// An OBJECT record's fields checked: `Err` says what is wrong.
fn object_record(field: &dyn Fn(usize) -> u64, payload: Vec<u8>) -> Result<StreamRecord, String> {
    let object_type = u8::try_from(field(1))
        .ok()
        .and_then(|id| ObjectType::from_u8(id).ok())
        .filter(|t| *t != ObjectType::None)
        .ok_or_else(|| format!("object type {}", field(1)))?;
    let block_size_bytes = u32::try_from(field(2))
        .ok()
        .filter(|size| {
            *size != 0 && *size <= BLOCK_SIZE_MAX && size.is_multiple_of(crate::BLOCK_SIZE_GRANULE)
        })
        .ok_or_else(|| format!("block size {}", field(2)))?;
    let indirect_shift = u8::try_from(field(3))
        .ok()
        .filter(|shift| {
            (crate::dnode::INDIRECT_SHIFT_MIN..=crate::dnode::INDIRECT_SHIFT_MAX).contains(shift)
        })
        .ok_or_else(|| format!("indirect shift {}", field(3)))?;
    if field(0) == 0 || payload.len() > DNODE_BONUS_SIZE_MAX {
        return Err(format!(
            "object {} with a {}-byte bonus",
            field(0),
            payload.len()
        ));
    }
    Ok(StreamRecord::Object {
        object: field(0),
        object_type,
        block_size_bytes,
        indirect_shift,
        bonus: payload,
    })
}

/// Fills `buf` or says where the stream ended.
fn read_full(
    input: &mut dyn Read,
    buf: &mut [u8],
    record: u64,
    offset_bytes: u64,
) -> Result<(), StreamError> {
    match input.read_exact(buf) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(StreamError::Truncated {
                record,
                offset_bytes,
            })
        }
        Err(err) => Err(StreamError::Io(err)),
    }
}

#[cfg(test)]
mod tests;
