//! The send package: what `cairn send -R`, `-I` and `-p` write, several send streams
//! (`send_stream`) in one, with what a receiver needs beyond their data: the tree of datasets
//! (names relative to the top one), each dataset's locally set properties, its snapshots by
//! name and guid, and which snapshot a clone comes from (by guid).
//!
//! Layout: a stream header (`SEND_HEADER_SIZE` bytes, `send_stream::StreamHeader`) whose
//! features hold `SEND_FEATURE_PACKAGE` and which names the top dataset's sent snapshot; one
//! MANIFEST record (a record header as a stream's, payload: `SEND_MANIFEST_VERSION` then the
//! postcard encoding of `PackageManifest`); then each sub-stream the manifest lists, in its
//! order, each a whole send stream (its own header, records and END, its own checksum chain);
//! then the package END record (fields: the header's to guid, the number of sub-streams).
//!
//! Why a second checksum chain over the whole package: each sub-stream proves itself whole,
//! but not that none was dropped, repeated or moved, nor that the manifest belongs with them.
//! The package's chain starts at its header's checksum and takes in, in order, the MANIFEST
//! record (as a stream's record: `send_stream::record_checksum`), then each sub-stream's END
//! checksum (`chain_stream`: BLAKE3 of the chain and that checksum), which covers every byte
//! of that sub-stream through its own chain; the package END's checksum is the record
//! checksum over that. So END verifies that the receiver saw exactly the bytes the sender
//! wrote, and the data is hashed once, by the sub-streams' chains. (Before, the package hashed
//! every sub-stream byte a second time: twice the hashing of a plain stream, which is most of
//! a send's CPU on fast devices.) Writer and reader are told each sub-stream's END checksum
//! by their caller (`stream_done`), which ran the sub-stream's `StreamWriter`/`StreamReader`.
//!
//! Invariants: decoding never trusts a length (the manifest is bounded by `SEND_PAYLOAD_MAX`
//! before it is read) and never panics; a manifest is refused unless its tree is well formed
//! (the top dataset first with an empty name, each other's parent before it, names unique and
//! valid, every stream naming a listed dataset). Whether the streams fit the tree (guids,
//! kinds) is the receiver's to check, stream by stream.

pub use crate::send_stream::SEND_FEATURE_PACKAGE;
use crate::send_stream::{
    SEND_HEADER_SIZE, SEND_PAYLOAD_MAX, SEND_RECORD_HEADER_SIZE, SEND_STREAM_MAGIC, StreamError,
    StreamHeader, StreamKind, record_checksum,
};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};

/// First byte of the MANIFEST payload; a reader refuses any other.
pub const SEND_MANIFEST_VERSION: u8 = 1;
/// Record kind of the manifest (after the stream kinds 2 to 6).
pub const SEND_KIND_MANIFEST: u16 = 7;
/// Record kind of the package's last record.
pub const SEND_KIND_PACKAGE_END: u16 = 8;
/// Bytes of a record header its checksum covers (as a stream's).
const RECORD_HASHED_BYTES: usize = 64;

/// What a package holds besides its sub-streams.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageManifest {
    /// Whether each dataset's local properties were sent (`-p`, `-R`): a receiver then sets
    /// them, and only them, as the received datasets' local properties.
    pub properties: bool,
    /// Whether the package holds the top dataset's descendants (`-R`): a receiver with `-F`
    /// then destroys what the sender no longer has (datasets below the target, snapshots).
    pub recursive: bool,
    /// The datasets, each one's parent (when sent) before it; the first is the top one.
    pub datasets: Vec<PackageDataset>,
    /// The sub-streams, in the order they follow the manifest.
    pub streams: Vec<PackageStream>,
}

/// One dataset of a package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageDataset {
    /// Its name below the top dataset ("" for the top one, "b/c" for `top/b/c`).
    pub name: String,
    /// 1 volume, 2 filesystem (as a stream header's kind).
    pub kind: u8,
    /// For a clone whose origin is sent in (or was sent before) this package: the origin
    /// snapshot's guid; else 0.
    pub origin_guid: u64,
    /// Its locally set properties (name, canonical value), when `properties`; `volsize` and
    /// `volblocksize` travel in the stream headers instead.
    pub properties: Vec<(String, String)>,
    /// Its snapshots up to the sent one (name after '@', guid), oldest first.
    pub snapshots: Vec<(String, u64)>,
}

/// One sub-stream of a package.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageStream {
    /// Index in `PackageManifest::datasets` of the dataset it is received into.
    pub dataset: u32,
    /// Its header's from guid (0: full) and to guid, checked by the receiver.
    pub from_guid: u64,
    pub to_guid: u64,
}

impl PackageDataset {
    /// The stream kind of `kind`, if it is one.
    pub fn stream_kind(&self) -> Option<StreamKind> {
        match self.kind {
            1 => Some(StreamKind::Volume),
            2 => Some(StreamKind::Filesystem),
            _ => None,
        }
    }
}

impl PackageManifest {
    /// `Err` says what makes the manifest unusable (see the module doc's invariants).
    pub fn validate(&self) -> Result<(), String> {
        let Some(top) = self.datasets.first() else {
            return Err("no dataset".into());
        };
        if !top.name.is_empty() {
            return Err(format!(
                "the first dataset is '{}', not the top one",
                top.name
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for dataset in &self.datasets {
            dataset
                .stream_kind()
                .ok_or_else(|| format!("'{}' has kind {}", dataset.name, dataset.kind))?;
            if !dataset.name.is_empty() {
                let bad = dataset.name.split('/').any(|part| {
                    part.is_empty() || part.contains(['@', '#', '%']) || part == "." || part == ".."
                });
                if bad || dataset.name.len() > 255 {
                    return Err(format!("a dataset named '{}'", dataset.name));
                }
                let parent = dataset
                    .name
                    .rsplit_once('/')
                    .map_or("", |(parent, _)| parent);
                if !seen.contains(parent) {
                    return Err(format!("'{}' comes before its parent", dataset.name));
                }
            }
            if !seen.insert(dataset.name.as_str()) {
                return Err(format!("'{}' twice", dataset.name));
            }
        }
        for stream in &self.streams {
            if stream.dataset as usize >= self.datasets.len() || stream.to_guid == 0 {
                return Err(format!("a stream {stream:?}"));
            }
        }
        Ok(())
    }
}

/// Counts every byte written or read through it.
struct Counting<T> {
    inner: T,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.bytes += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.bytes += read as u64;
        Ok(read)
    }
}

/// The package chain after a sub-stream whose END checksum is `end_checksum`.
fn chain_stream(chain: &[u8; 32], end_checksum: &[u8; 32]) -> [u8; 32] {
    let mut input = [0u8; 64];
    input[..32].copy_from_slice(chain);
    input[32..].copy_from_slice(end_checksum);
    *blake3::hash(&input).as_bytes()
}

/// The start of a package's chain: its header's own checksum (bytes 96..128).
fn header_chain(header: &[u8; SEND_HEADER_SIZE]) -> [u8; 32] {
    let mut chain = [0u8; 32];
    chain.copy_from_slice(&header[SEND_HEADER_SIZE - 32..]);
    chain
}

/// A package record header: `kind`, the payload length, `fields`, and its checksum
/// (`record_checksum` of the package chain `before`, the header and `payload`).
fn record_header(
    before: &[u8; 32],
    kind: u16,
    fields: [u64; 6],
    payload: &[u8],
) -> [u8; SEND_RECORD_HEADER_SIZE] {
    let mut header = [0u8; SEND_RECORD_HEADER_SIZE];
    header[0..2].copy_from_slice(&kind.to_le_bytes());
    // Bounded by the callers (`SEND_PAYLOAD_MAX` fits a u32).
    header[4..8].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    for (index, field) in fields.iter().enumerate() {
        let at = 8 + index * 8;
        header[at..at + 8].copy_from_slice(&field.to_le_bytes());
    }
    let checksum = record_checksum(before, &header, payload);
    header[RECORD_HASHED_BYTES..].copy_from_slice(&checksum);
    header
}

/// Writes a package: the header and manifest at `new`, sub-streams to `stream_out`, END with
/// `finish`.
pub struct PackageWriter<'w> {
    out: Counting<&'w mut dyn Write>,
    to_guid: u64,
    /// The package chain so far (see the module doc).
    chain: [u8; 32],
    streams_done: u64,
}

impl<'w> PackageWriter<'w> {
    /// Writes `header` (which must carry `SEND_FEATURE_PACKAGE`) and the MANIFEST record.
    pub fn new(
        out: &'w mut dyn Write,
        header: &StreamHeader,
        manifest: &PackageManifest,
    ) -> std::io::Result<Self> {
        let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, what);
        if header.features & SEND_FEATURE_PACKAGE == 0 {
            return Err(invalid(
                "a package header without SEND_FEATURE_PACKAGE".into(),
            ));
        }
        manifest.validate().map_err(invalid)?;
        let mut payload = vec![SEND_MANIFEST_VERSION];
        payload.extend(postcard::to_allocvec(manifest).map_err(|err| invalid(err.to_string()))?);
        if payload.len() > SEND_PAYLOAD_MAX {
            return Err(invalid(format!(
                "a manifest of {} bytes (more than {SEND_PAYLOAD_MAX})",
                payload.len()
            )));
        }
        let mut out = Counting {
            inner: out,
            bytes: 0,
        };
        let header_bytes = header.encode();
        out.write_all(&header_bytes)?;
        let fields = [manifest.streams.len() as u64, 0, 0, 0, 0, 0];
        let record = record_header(
            &header_chain(&header_bytes),
            SEND_KIND_MANIFEST,
            fields,
            &payload,
        );
        out.write_all(&record)?;
        out.write_all(&payload)?;
        let mut chain = [0u8; 32];
        chain.copy_from_slice(&record[RECORD_HASHED_BYTES..]);
        Ok(PackageWriter {
            out,
            to_guid: header.to_guid,
            chain,
            streams_done: 0,
        })
    }

    /// Where the next sub-stream is written; once its `StreamWriter` finished, tell
    /// `stream_done` its END checksum.
    pub fn stream_out(&mut self) -> &mut dyn Write {
        &mut self.out
    }

    /// A sub-stream was written whole, its END checksum `end_checksum`
    /// (`StreamWriter::finish_with_checksum`): it joins the package's chain.
    pub fn stream_done(&mut self, end_checksum: &[u8; 32]) {
        self.chain = chain_stream(&self.chain, end_checksum);
        self.streams_done += 1;
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.out.bytes
    }

    /// Writes END, saying `streams` sub-streams were written, and flushes: returns the
    /// package's length.
    pub fn finish(mut self, streams: u64) -> std::io::Result<u64> {
        if streams != self.streams_done {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "a package END of {streams} sub-streams after {} were done",
                    self.streams_done
                ),
            ));
        }
        let fields = [self.to_guid, streams, 0, 0, 0, 0];
        let record = record_header(&self.chain, SEND_KIND_PACKAGE_END, fields, &[]);
        self.out.write_all(&record)?;
        self.out.flush()?;
        Ok(self.out.bytes)
    }
}

/// Whether a stream header's bytes (not yet verified) announce a package.
pub fn is_package(header: &[u8; SEND_HEADER_SIZE]) -> bool {
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&header[0..8]);
    let mut features = [0u8; 4];
    features.copy_from_slice(&header[12..16]);
    u64::from_le_bytes(magic) == SEND_STREAM_MAGIC
        && u32::from_le_bytes(features) & SEND_FEATURE_PACKAGE != 0
}

/// Reads a package: the header (already read by the caller, who looked at its features) and
/// manifest at `new`, sub-streams from `stream_input`, END with `finish`.
pub struct PackageReader<'r> {
    input: Counting<&'r mut dyn Read>,
    header: StreamHeader,
    manifest: PackageManifest,
    /// The package chain so far (see the module doc).
    chain: [u8; 32],
    streams_done: u64,
}

impl<'r> PackageReader<'r> {
    /// Verifies `header_bytes` and reads and verifies the MANIFEST record from `input`.
    pub fn new(
        header_bytes: &[u8; SEND_HEADER_SIZE],
        input: &'r mut dyn Read,
    ) -> Result<Self, StreamError> {
        let header = StreamHeader::decode(header_bytes)?;
        let malformed = |record: u64, what: String| StreamError::Malformed {
            record,
            offset_bytes: SEND_HEADER_SIZE as u64,
            what,
        };
        if header.features & SEND_FEATURE_PACKAGE == 0 {
            return Err(malformed(0, "not a package".into()));
        }
        let mut input = Counting {
            inner: input,
            bytes: SEND_HEADER_SIZE as u64,
        };
        let (fields, payload, chain) = read_record(
            &mut input,
            &header_chain(header_bytes),
            SEND_KIND_MANIFEST,
            1,
        )?;
        if payload.first() != Some(&SEND_MANIFEST_VERSION) {
            return Err(malformed(1, "an unknown manifest version".into()));
        }
        let manifest: PackageManifest = postcard::from_bytes(&payload[1..])
            .map_err(|err| malformed(1, format!("the manifest does not decode: {err}")))?;
        manifest.validate().map_err(|what| malformed(1, what))?;
        if fields[0] != manifest.streams.len() as u64 {
            return Err(malformed(
                1,
                "a stream count the manifest does not list".into(),
            ));
        }
        Ok(PackageReader {
            input,
            header,
            manifest,
            chain,
            streams_done: 0,
        })
    }

    pub fn header(&self) -> &StreamHeader {
        &self.header
    }

    pub fn manifest(&self) -> &PackageManifest {
        &self.manifest
    }

    /// Bytes read so far.
    pub fn offset_bytes(&self) -> u64 {
        self.input.bytes
    }

    /// Where the next sub-stream is read from; once its `StreamReader` verified its END, tell
    /// `stream_done` that END's checksum.
    pub fn stream_input(&mut self) -> &mut dyn Read {
        &mut self.input
    }

    /// A sub-stream was read whole and verified, its END checksum `end_checksum`
    /// (`StreamReader::checksum` after END): it joins the package's chain, which the package
    /// END verifies.
    pub fn stream_done(&mut self, end_checksum: &[u8; 32]) {
        self.chain = chain_stream(&self.chain, end_checksum);
        self.streams_done += 1;
    }

    /// Reads and verifies END: the whole package arrived as written, with the manifest's
    /// sub-streams. Returns the package's length.
    pub fn finish(mut self) -> Result<u64, StreamError> {
        let at = self.input.bytes;
        let (fields, _, _) = read_record(&mut self.input, &self.chain, SEND_KIND_PACKAGE_END, 2)?;
        if fields[0] != self.header.to_guid
            || fields[1] != self.manifest.streams.len() as u64
            || self.streams_done != fields[1]
        {
            return Err(StreamError::Malformed {
                record: 2,
                offset_bytes: at,
                what: format!(
                    "END names guid {:#x} and {} streams, the package {:#x} and {} ({} read)",
                    fields[0],
                    fields[1],
                    self.header.to_guid,
                    self.manifest.streams.len(),
                    self.streams_done
                ),
            });
        }
        Ok(self.input.bytes)
    }
}

/// A package record read and verified: its six fields, payload and checksum.
type PackageRecord = ([u64; 6], Vec<u8>, [u8; 32]);

/// Reads one package record of `kind` (`record`: its number, for errors) after the package
/// chain `before`, verified.
fn read_record(
    input: &mut Counting<&mut dyn Read>,
    before: &[u8; 32],
    kind: u16,
    record: u64,
) -> Result<PackageRecord, StreamError> {
    let at = input.bytes;
    let truncated = |err: std::io::Error| {
        if err.kind() == std::io::ErrorKind::UnexpectedEof {
            StreamError::Truncated {
                record,
                offset_bytes: at,
            }
        } else {
            StreamError::Io(err)
        }
    };
    let mut header = [0u8; SEND_RECORD_HEADER_SIZE];
    input.read_exact(&mut header).map_err(truncated)?;
    let mut length = [0u8; 4];
    length.copy_from_slice(&header[4..8]);
    let length = u32::from_le_bytes(length) as usize;
    let checksum = StreamError::Checksum {
        record,
        offset_bytes: at,
    };
    if length > SEND_PAYLOAD_MAX {
        return Err(checksum);
    }
    let mut payload = vec![0u8; length];
    input.read_exact(&mut payload).map_err(truncated)?;
    let mut fields = [0u64; 6];
    for (index, field) in fields.iter_mut().enumerate() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&header[8 + index * 8..16 + index * 8]);
        *field = u64::from_le_bytes(word);
    }
    let kind_found = u16::from_le_bytes([header[0], header[1]]);
    if record_header(before, kind_found, fields, &payload) != header {
        return Err(checksum);
    }
    if kind_found != kind {
        return Err(StreamError::Malformed {
            record,
            offset_bytes: at,
            what: format!("record kind {kind_found} where {kind} belongs"),
        });
    }
    let mut checksum = [0u8; 32];
    checksum.copy_from_slice(&header[RECORD_HASHED_BYTES..]);
    Ok((fields, payload, checksum))
}

#[cfg(test)]
mod tests;
