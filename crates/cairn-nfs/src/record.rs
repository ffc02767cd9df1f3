//! ONC RPC record marking over a byte stream (RFC 5531 §11): how calls and replies are cut
//! out of a TCP connection.
//!
//! A record is one or more fragments, each led by a 4-byte big-endian header whose top bit
//! marks the last fragment and whose low 31 bits give the fragment's length.
//!
//! **Invariants.** A record never grows past the `max_record_bytes` its reader was given: a
//! fragment header is checked against the bound (with what the record already holds) before
//! a byte of it is accepted, and buffers grow only with bytes actually received, so a header
//! claiming 2 GiB costs nothing but an error. An empty record (a last fragment of length 0
//! with nothing before it) is returned as such; the RPC layer rejects it.
//!
//! Two readers share the rules: [`RecordDecoder`], I/O-free (feed it whatever a socket read
//! returned, sync or async), and [`read_record`] for a blocking [`std::io::Read`].
//! Writing is [`crate::xdr::Encoder::into_record`] (one last fragment).

use std::io::Read;

use thiserror::Error;

/// The last-fragment bit of a fragment header.
pub const LAST_FRAGMENT: u32 = 0x8000_0000;
/// The length bits of a fragment header.
pub const FRAGMENT_LEN_MASK: u32 = 0x7fff_ffff;

#[derive(Debug, Error)]
pub enum RecordError {
    /// The record would pass the reader's bound.
    #[error("RPC record of at least {claimed_bytes} bytes is over the maximum of {max_bytes}")]
    TooLarge {
        claimed_bytes: u64,
        max_bytes: usize,
    },
    /// The stream ended inside a record.
    #[error("connection closed inside an RPC record ({received_bytes} bytes of it received)")]
    Truncated { received_bytes: usize },
    #[error("reading an RPC record: {0}")]
    Io(#[from] std::io::Error),
}

/// Where the decoder is inside the current fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Collecting the 4 header bytes (how many so far are in `header`).
    Header { have: usize },
    /// Copying `left_bytes` more bytes of a fragment; `last` from its header.
    Body { left_bytes: usize, last: bool },
}

/// Reassembles records from arbitrary chunks of a byte stream.
#[derive(Debug)]
pub struct RecordDecoder {
    max_record_bytes: usize,
    record: Vec<u8>,
    header: [u8; 4],
    state: State,
}

impl RecordDecoder {
    pub fn new(max_record_bytes: usize) -> Self {
        Self {
            max_record_bytes,
            record: Vec::new(),
            header: [0; 4],
            state: State::Header { have: 0 },
        }
    }

    /// True when no partial record is held (a connection closing now closes cleanly).
    pub fn is_idle(&self) -> bool {
        self.record.is_empty() && self.state == State::Header { have: 0 }
    }

    /// Bytes of the record being assembled.
    pub fn pending_bytes(&self) -> usize {
        self.record.len()
    }

    /// Consumes bytes from the front of `input` until a record is complete (returned, with the
    /// rest of `input` left for the next call) or `input` is used up (`Ok(None)`). After an
    /// error the stream is unusable: close the connection.
    pub fn feed(&mut self, input: &mut &[u8]) -> Result<Option<Vec<u8>>, RecordError> {
        loop {
            match self.state {
                State::Header { have } => {
                    if input.is_empty() {
                        return Ok(None);
                    }
                    let n = (4 - have).min(input.len());
                    self.header[have..have + n].copy_from_slice(&input[..n]);
                    *input = &input[n..];
                    if have + n < 4 {
                        self.state = State::Header { have: have + n };
                        continue;
                    }
                    let header = u32::from_be_bytes(self.header);
                    self.state = self.start_fragment(header)?;
                }
                State::Body { left_bytes, last } => {
                    let n = left_bytes.min(input.len());
                    self.record.extend_from_slice(&input[..n]);
                    *input = &input[n..];
                    if n < left_bytes {
                        self.state = State::Body {
                            left_bytes: left_bytes - n,
                            last,
                        };
                        return Ok(None);
                    }
                    self.state = State::Header { have: 0 };
                    if last {
                        return Ok(Some(std::mem::take(&mut self.record)));
                    }
                }
            }
        }
    }

    fn start_fragment(&self, header: u32) -> Result<State, RecordError> {
        let fragment_bytes = (header & FRAGMENT_LEN_MASK) as usize;
        check_bound(self.record.len(), fragment_bytes, self.max_record_bytes)?;
        Ok(State::Body {
            left_bytes: fragment_bytes,
            last: header & LAST_FRAGMENT != 0,
        })
    }
}

fn check_bound(
    held_bytes: usize,
    fragment_bytes: usize,
    max_bytes: usize,
) -> Result<(), RecordError> {
    let total_bytes = held_bytes as u64 + fragment_bytes as u64;
    if total_bytes > max_bytes as u64 {
        return Err(RecordError::TooLarge {
            claimed_bytes: total_bytes,
            max_bytes,
        });
    }
    Ok(())
}

/// Reads one whole record from a blocking reader. `Ok(None)` when the stream ends cleanly
/// before a record starts; ending anywhere else is [`RecordError::Truncated`].
pub fn read_record<R: Read>(
    reader: &mut R,
    max_record_bytes: usize,
) -> Result<Option<Vec<u8>>, RecordError> {
    let mut record = Vec::new();
    loop {
        let mut header = [0; 4];
        let got = read_full(reader, &mut header)?;
        if got == 0 && record.is_empty() {
            return Ok(None);
        }
        if got < 4 {
            return Err(RecordError::Truncated {
                received_bytes: record.len() + got,
            });
        }
        let header = u32::from_be_bytes(header);
        let fragment_bytes = (header & FRAGMENT_LEN_MASK) as usize;
        check_bound(record.len(), fragment_bytes, max_record_bytes)?;
        // `take` + `read_to_end` grows the buffer with the bytes that arrive, not the claim.
        let before = record.len();
        reader
            .by_ref()
            .take(fragment_bytes as u64)
            .read_to_end(&mut record)?;
        if record.len() - before < fragment_bytes {
            return Err(RecordError::Truncated {
                received_bytes: record.len(),
            });
        }
        if header & LAST_FRAGMENT != 0 {
            return Ok(Some(record));
        }
    }
}

/// Fills `buf` unless the stream ends first; returns how many bytes it got.
fn read_full<R: Read>(reader: &mut R, buf: &mut [u8]) -> Result<usize, RecordError> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err.into()),
        }
    }
    Ok(got)
}

/// Frames `payload` as a record of fragments of at most `fragment_bytes` each (clients may
/// split records; the server's tests use this to check reassembly).
pub fn frame_fragments(payload: &[u8], fragment_bytes: usize) -> Vec<u8> {
    let step = fragment_bytes.clamp(1, FRAGMENT_LEN_MASK as usize);
    let mut out = Vec::with_capacity(payload.len() + 4 * (payload.len() / step + 1));
    let mut chunks = payload.chunks(step).peekable();
    if chunks.peek().is_none() {
        out.extend_from_slice(&LAST_FRAGMENT.to_be_bytes());
    }
    while let Some(chunk) = chunks.next() {
        // `step` ≤ FRAGMENT_LEN_MASK, so the length fits the 31 bits.
        let mut header = chunk.len() as u32;
        if chunks.peek().is_none() {
            header |= LAST_FRAGMENT;
        }
        out.extend_from_slice(&header.to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reassembles_fragments_fed_byte_by_byte() {
        let payload: Vec<u8> = (0..=255).collect();
        let stream = [frame_fragments(&payload, 7), frame_fragments(b"xy", 100)].concat();
        let mut decoder = RecordDecoder::new(1024);
        let mut records = Vec::new();
        for byte in &stream {
            let mut input = std::slice::from_ref(byte);
            while let Some(record) = decoder.feed(&mut input).expect("valid stream") {
                records.push(record);
            }
            assert!(input.is_empty());
        }
        assert_eq!(records, vec![payload, b"xy".to_vec()]);
        assert!(decoder.is_idle());
    }

    #[test]
    fn oversized_fragment_is_refused_at_its_header() {
        let mut decoder = RecordDecoder::new(1 << 20);
        let mut input = &[0xff, 0xff, 0xff, 0xff][..];
        assert!(matches!(
            decoder.feed(&mut input),
            Err(RecordError::TooLarge { .. })
        ));
        assert_eq!(decoder.pending_bytes(), 0);
        // The sum of fragments counts, not each one alone.
        let stream = [frame_fragments(&[0; 12], 8)].concat();
        let mut decoder = RecordDecoder::new(10);
        let mut input = &stream[..];
        assert!(matches!(
            decoder.feed(&mut input),
            Err(RecordError::TooLarge { .. })
        ));
    }

    #[test]
    fn blocking_reader_matches_and_detects_truncation() {
        let stream = [frame_fragments(b"hello world", 3), frame_fragments(b"", 3)].concat();
        let mut reader = &stream[..];
        assert_eq!(
            read_record(&mut reader, 64).ok().flatten(),
            Some(b"hello world".to_vec())
        );
        assert_eq!(
            read_record(&mut reader, 64).ok().flatten(),
            Some(Vec::new())
        );
        assert!(matches!(read_record(&mut reader, 64), Ok(None)));
        let mut cut = &stream[..9];
        assert!(matches!(
            read_record(&mut cut, 64),
            Err(RecordError::Truncated { .. })
        ));
        let mut huge = &[0x80, 0, 1, 0][..];
        assert!(matches!(
            read_record(&mut huge, 64),
            Err(RecordError::TooLarge { .. })
        ));
    }
}
