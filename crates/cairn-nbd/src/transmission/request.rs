//! What a client's request asks for: the validated operation (`Op`) and, for a request that
//! fails validation, its refusal (`Refusal`).
//!
//! Invariant: `validate` runs before any export call and checks everything the export must not
//! see: alignment to 512, range, size limits, read-only, command flags. It depends on nothing
//! else of the transmission phase; every sibling builds on its `Op`.

use crate::handshake::Session;
use crate::proto::*;
use crate::stats::OpKind;

/// What a validated request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    Read {
        offset: u64,
        len: u32,
    },
    Write {
        offset: u64,
        len: u32,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        len: u32,
        fua: bool,
    },
    WriteZeroes {
        offset: u64,
        len: u32,
        fua: bool,
        may_trim: bool,
    },
    Cache {
        offset: u64,
        len: u32,
    },
    BlockStatus {
        offset: u64,
        len: u32,
        req_one: bool,
    },
}

impl Op {
    pub(super) fn kind(&self) -> OpKind {
        match self {
            Op::Read { .. } => OpKind::Read,
            Op::Write { .. } => OpKind::Write,
            Op::Flush => OpKind::Flush,
            Op::Trim { .. } => OpKind::Trim,
            Op::WriteZeroes { .. } => OpKind::WriteZeroes,
            Op::Cache { .. } => OpKind::Cache,
            Op::BlockStatus { .. } => OpKind::BlockStatus,
        }
    }

    /// Bytes of memory the request needs while in flight (payload or reply data).
    pub(super) fn buffer_bytes(&self) -> u32 {
        match self {
            Op::Read { len, .. } | Op::Write { len, .. } => *len,
            _ => 0,
        }
    }

    /// Whether the client waits for stable media (FUA, FLUSH): such a request is carried out
    /// on the thread that took it rather than handed to the blocking pool, sparing the two
    /// thread wake-ups of the hand-off on the path whose latency the client sees.
    pub(super) fn waits_for_media(&self) -> bool {
        matches!(
            self,
            Op::Flush
                | Op::Write { fua: true, .. }
                | Op::Trim { fua: true, .. }
                | Op::WriteZeroes { fua: true, .. }
        )
    }

    /// The byte range the operation covers (`None` for a flush).
    pub(super) fn range(&self) -> Option<(u64, u32)> {
        match *self {
            Op::Flush => None,
            Op::Read { offset, len }
            | Op::Write { offset, len, .. }
            | Op::Trim { offset, len, .. }
            | Op::WriteZeroes { offset, len, .. }
            | Op::Cache { offset, len }
            | Op::BlockStatus { offset, len, .. } => Some((offset, len)),
        }
    }

    pub(super) fn is_write_like(&self) -> bool {
        matches!(
            self,
            Op::Write { .. } | Op::Trim { .. } | Op::WriteZeroes { .. }
        )
    }
}

/// A refused request: the operation it was (if known), the NBD error and a message.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) kind: Option<OpKind>,
    pub(super) errno: u32,
    pub(super) message: String,
}

fn refuse(kind: OpKind, errno: u32, message: impl Into<String>) -> Refusal {
    Refusal {
        kind: Some(kind),
        errno,
        message: message.into(),
    }
}

/// Validates a request against the session. DISC is handled by the caller.
pub(super) fn validate(req: &Request, s: &Session) -> Result<Op, Refusal> {
    let f = req.flags;
    let (kind, allowed) = command(req.kind, s)?;
    if f & !allowed != 0 {
        return Err(refuse(
            kind,
            EINVAL,
            format!("command flags {f:#x} not valid here"),
        ));
    }
    check_permitted(kind, req.length, s)?;
    if kind != OpKind::Flush {
        check_range(kind, req.offset, req.length, s)?;
    }
    let op = op(kind, req, s)?;
    // What every export call may rely on (see the module doc).
    debug_assert!(
        op.range()
            .is_none_or(|(offset, len)| offset + u64::from(len) <= s.size),
        "{op:?} validated past the end of the export"
    );
    debug_assert!(
        !(op.is_write_like() && s.readonly),
        "{op:?} validated on a read-only export"
    );
    debug_assert!(
        op.buffer_bytes() <= s.block.max,
        "{op:?} validated past the block limit"
    );
    Ok(op)
}

/// The operation a command code names and the command flags it accepts.
fn command(code: u16, s: &Session) -> Result<(OpKind, u16), Refusal> {
    Ok(match code {
        CMD_READ => (
            OpKind::Read,
            CMD_FLAG_FUA | if s.structured { CMD_FLAG_DF } else { 0 },
        ),
        CMD_WRITE => (OpKind::Write, CMD_FLAG_FUA),
        CMD_FLUSH => (OpKind::Flush, CMD_FLAG_FUA),
        CMD_TRIM => (OpKind::Trim, CMD_FLAG_FUA),
        CMD_CACHE => (OpKind::Cache, CMD_FLAG_FUA),
        CMD_WRITE_ZEROES => (
            OpKind::WriteZeroes,
            CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        ),
        CMD_BLOCK_STATUS => (OpKind::BlockStatus, CMD_FLAG_FUA | CMD_FLAG_REQ_ONE),
        other => {
            return Err(Refusal {
                kind: None,
                errno: EINVAL,
                message: format!("unknown command {other}"),
            });
        }
    })
}

/// What the session allows whatever the range: writes only to a writable export, transfers up
/// to the maximum block size, block status only once a context was negotiated.
fn check_permitted(kind: OpKind, len: u32, s: &Session) -> Result<(), Refusal> {
    if matches!(kind, OpKind::Write | OpKind::Trim | OpKind::WriteZeroes) && s.readonly {
        return Err(refuse(kind, EPERM, "export is read-only"));
    }
    let max = s.block.max;
    match kind {
        OpKind::Read if len > max => Err(refuse(
            kind,
            EOVERFLOW,
            format!("read of {len} bytes exceeds {max}"),
        )),
        OpKind::Write if len > max => Err(refuse(
            kind,
            EINVAL,
            format!("write of {len} bytes exceeds {max}"),
        )),
        OpKind::BlockStatus if s.meta_context.is_none() => {
            Err(refuse(kind, EINVAL, "no metadata context was negotiated"))
        }
        OpKind::BlockStatus if len == 0 => Err(refuse(kind, EINVAL, "block status of zero length")),
        _ => Ok(()),
    }
}

/// The byte range of a request that has one: inside the export and, for data transfers,
/// aligned to the minimum block size.
fn check_range(kind: OpKind, offset: u64, len: u32, s: &Session) -> Result<(), Refusal> {
    let end = offset.checked_add(u64::from(len));
    if end.is_none_or(|e| e > s.size) {
        let errno = if matches!(kind, OpKind::Write | OpKind::WriteZeroes) {
            ENOSPC
        } else {
            EINVAL
        };
        return Err(refuse(
            kind,
            errno,
            "request extends past the end of the export",
        ));
    }
    let min = u64::from(s.block.min);
    let end = offset + u64::from(len);
    // Trim and zeroing take any byte range (the export handles partial blocks): qemu
    // splits an unaligned discard and sends the leftover pieces below 512 bytes, and
    // only tolerates ENOTSUP for them. Data transfers keep the advertised alignment.
    let any_alignment = matches!(kind, OpKind::Trim | OpKind::WriteZeroes);
    if !any_alignment
        && (!offset.is_multiple_of(min) || (!u64::from(len).is_multiple_of(min) && end != s.size))
    {
        return Err(refuse(
            kind,
            EINVAL,
            format!("request not aligned to {min} bytes"),
        ));
    }
    Ok(())
}

/// The validated operation, from a request that passed every other check.
fn op(kind: OpKind, req: &Request, s: &Session) -> Result<Op, Refusal> {
    let f = req.flags;
    let fua = f & CMD_FLAG_FUA != 0;
    let offset = req.offset;
    let len = req.length;
    Ok(match kind {
        OpKind::Read => Op::Read { offset, len },
        OpKind::Write => Op::Write { offset, len, fua },
        OpKind::Flush => Op::Flush,
        OpKind::Trim => Op::Trim { offset, len, fua },
        OpKind::Cache => Op::Cache { offset, len },
        OpKind::WriteZeroes => {
            let no_hole = f & CMD_FLAG_NO_HOLE != 0;
            if f & CMD_FLAG_FAST_ZERO != 0 && (no_hole || !s.export.fast_zero()) {
                // Allocating zeroes is no faster than writing them: fail fast, change nothing.
                return Err(refuse(kind, ENOTSUP, "zeroing this range is not fast"));
            }
            Op::WriteZeroes {
                offset,
                len,
                fua,
                may_trim: !no_hole,
            }
        }
        OpKind::BlockStatus => Op::BlockStatus {
            offset,
            len,
            req_one: f & CMD_FLAG_REQ_ONE != 0,
        },
    })
}
