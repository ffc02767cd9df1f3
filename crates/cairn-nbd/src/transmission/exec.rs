//! Export calls: carrying out a validated `Op` (`execute`), on the reader itself when the
//! export can answer at once (`read_now`, `write_now`), in place (`run_in_place`) or on the
//! blocking pool (`run_blocking`), and turning extent lists into wire descriptors.
//!
//! Invariant: a panicking export call becomes `EIO` here, so it cannot take the connection
//! down. Depends only on `request` among the siblings.

use bytes::Bytes;

use super::request::Op;
use crate::export::{Export, ExportError};
use crate::proto::{STATE_HOLE, STATE_ZERO};

/// Most extents sent in one block status reply (the protocol's recommended limit).
pub(super) const MAX_EXTENTS: usize = 1 << 20;

/// blocking pool and back); `None` for everything else.
pub(super) fn read_now(export: &dyn Export, op: &Op) -> Option<(Outcome, u64)> {
    let Op::Read { offset, len } = *op else {
        return None;
    };
    if len == 0 {
        return None;
    }
    let mut buf = vec![0u8; len as usize];
    let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        export.try_read_now(offset, &mut buf)
    }))
    .unwrap_or(false);
    done.then(|| (Outcome::Data(offset, buf), u64::from(len)))
}

/// A plain write the export takes at once (`Export::try_write_now`), done here on the async
/// worker; `None` when it would block (nothing was changed). A panic becomes `EIO`.
pub(super) fn write_now(
    export: &dyn Export,
    offset: u64,
    payload: &Bytes,
) -> Option<Result<(), ExportError>> {
    if payload.is_empty() {
        return None;
    }
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        export.try_write_now(offset, payload)
    }))
    .unwrap_or_else(|_| Some(Err(ExportError::Io("export operation panicked".into()))))
}

/// What an export call produced and the bytes it covered.
pub(super) type ExportResult = Result<(Outcome, u64), ExportError>;

pub(super) enum Outcome {
    Done,
    Data(u64, Vec<u8>),
    Extents(Vec<(u32, u32)>),
}

/// Runs an export call on this worker thread, which the runtime replaces meanwhile so other
/// connections carry on (`block_in_place`); a panic becomes `EIO`.
pub(super) fn run_in_place<T>(
    f: impl FnOnce() -> Result<T, ExportError>,
) -> Result<T, ExportError> {
    tokio::task::block_in_place(|| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|_| Err(ExportError::Io("export operation panicked".into())))
    })
}

/// Runs an export call on the blocking pool; a panic becomes `EIO`.
pub(super) async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ExportError> + Send + 'static,
) -> Result<T, ExportError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(_) => Err(ExportError::Io("export operation panicked".into())),
    }
}

/// Carries out a validated operation; returns the outcome and the bytes it covered.
pub(super) fn execute(export: &dyn Export, op: Op, payload: Bytes) -> ExportResult {
    match op {
        Op::Read { offset, len } => {
            let mut buf = vec![0u8; len as usize];
            if len > 0 {
                export.read(offset, &mut buf)?;
            }
            Ok((Outcome::Data(offset, buf), u64::from(len)))
        }
        Op::Write { offset, len, fua } => {
            if len > 0 {
                export.write_bytes(offset, payload, fua)?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::Flush => {
            export.flush()?;
            Ok((Outcome::Done, 0))
        }
        Op::Trim { offset, len, fua } => {
            if len > 0 {
                export.trim(offset, u64::from(len), fua)?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::WriteZeroes {
            offset,
            len,
            fua,
            may_trim,
        } => {
            if len > 0 {
                export.write_zeroes(offset, u64::from(len), fua, may_trim)?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::Cache { offset, len } => {
            if len > 0 {
                export.cache(offset, u64::from(len))?;
            }
            Ok((Outcome::Done, u64::from(len)))
        }
        Op::BlockStatus {
            offset,
            len,
            req_one,
        } => {
            let raw = export.block_status(offset, u64::from(len))?;
            let extents = normalize_extents(&raw, len, req_one);
            if extents.is_empty() {
                return Err(ExportError::Io("export reported no extents".into()));
            }
            let covered = extents.iter().map(|&(l, _)| u64::from(l)).sum();
            Ok((Outcome::Extents(extents), covered))
        }
    }
}

/// Turns an export's extent list into wire descriptors: zero-length extents dropped, clipped to
/// the request, unknown flag bits cleared, neighbours with equal flags merged, at most one
/// extent with `req_one` and at most [`MAX_EXTENTS`] otherwise.
pub(super) fn normalize_extents(raw: &[(u64, u32)], len: u32, req_one: bool) -> Vec<(u32, u32)> {
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut left = u64::from(len);
    for &(l, flags) in raw {
        if left == 0 {
            break;
        }
        if l == 0 {
            continue;
        }
        let l = l.min(left);
        left -= l;
        let flags = flags & (STATE_HOLE | STATE_ZERO);
        // `l <= len <= u32::MAX`, and merged lengths sum to at most `len`.
        let l = l as u32;
        match out.last_mut() {
            Some(last) if last.1 == flags => last.0 += l,
            _ => {
                if out.len() == MAX_EXTENTS {
                    break;
                }
                out.push((l, flags));
            }
        }
    }
    if req_one {
        out.truncate(1);
    }
    // The wire's promises: no empty extent, neighbours differ, never past the request.
    debug_assert!(out.iter().all(|&(l, _)| l > 0));
    debug_assert!(out.windows(2).all(|pair| pair[0].1 != pair[1].1));
    debug_assert!(out.iter().map(|&(l, _)| u64::from(l)).sum::<u64>() <= u64::from(len));
    out
}
