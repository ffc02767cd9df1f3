//! Unit tests of the transmission phase: request validation, extent normalisation, the FLUSH
//! habit behind flush ahead, and zero detection for hole replies.

use std::sync::Arc;

use super::exec::{MAX_EXTENTS, normalize_extents};
use super::reader::{FlushHabit, PAIRS_BEFORE_FLUSH_AHEAD};
use super::reply::is_zero;
use super::request::{Op, Refusal, validate};
use crate::export::{Export, ExportError};
use crate::handshake::{BlockSizes, Session};
use crate::proto::*;

struct Null(bool);

impl Export for Null {
    fn size(&self) -> u64 {
        1 << 20
    }
    fn preferred_block_size(&self) -> u32 {
        4096
    }
    fn readonly(&self) -> bool {
        self.0
    }
    fn read(&self, _: u64, _: &mut [u8]) -> Result<(), ExportError> {
        Ok(())
    }
    fn write(&self, _: u64, _: &[u8], _: bool) -> Result<(), ExportError> {
        Ok(())
    }
    fn flush(&self) -> Result<(), ExportError> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> Result<(), ExportError> {
        Ok(())
    }
    fn write_zeroes(&self, _: u64, _: u64, _: bool, _: bool) -> Result<(), ExportError> {
        Ok(())
    }
    fn block_status(&self, _: u64, len: u64) -> Result<Vec<(u64, u32)>, ExportError> {
        Ok(vec![(len, 0)])
    }
    fn fast_zero(&self) -> bool {
        false
    }
}

fn session(readonly: bool, structured: bool, meta: bool) -> Session {
    Session {
        name: "t".into(),
        export: Arc::new(Null(readonly)),
        size: (1 << 20) + 512,
        readonly,
        transmission_flags: FLAG_HAS_FLAGS,
        structured,
        meta_context: meta.then_some(1),
        block: BlockSizes {
            min: 512,
            preferred: 4096,
            max: 65536,
        },
        stats: Arc::default(),
    }
}

fn req(kind: u16, flags: u16, offset: u64, length: u32) -> Request {
    Request {
        flags,
        kind,
        cookie: 1,
        offset,
        length,
    }
}

fn errno(r: Result<Op, Refusal>) -> u32 {
    r.map(|_| 0).unwrap_or_else(|e| e.errno)
}

#[test]
fn validation_rules() {
    let s = session(false, false, false);
    let size = s.size;
    assert_eq!(
        validate(&req(CMD_READ, 0, 0, 4096), &s),
        Ok(Op::Read {
            offset: 0,
            len: 4096
        })
    );
    assert_eq!(
        errno(validate(&req(CMD_READ, 0, 0, 65536 + 512), &s)),
        EOVERFLOW
    );
    assert_eq!(
        errno(validate(&req(CMD_WRITE, 0, 0, 65536 + 512), &s)),
        EINVAL
    );
    assert_eq!(errno(validate(&req(CMD_READ, 0, size, 512), &s)), EINVAL);
    assert_eq!(errno(validate(&req(CMD_WRITE, 0, size, 512), &s)), ENOSPC);
    assert_eq!(
        errno(validate(&req(CMD_WRITE_ZEROES, 0, u64::MAX, 512), &s)),
        ENOSPC
    );
    assert_eq!(
        errno(validate(&req(CMD_TRIM, 0, u64::MAX - 10, 512), &s)),
        EINVAL
    );
    assert_eq!(errno(validate(&req(CMD_READ, 0, 1, 512), &s)), EINVAL);
    assert_eq!(errno(validate(&req(CMD_READ, 0, 0, 511), &s)), EINVAL);
    // An unaligned length is fine when it ends exactly at the (unaligned) end.
    let tail = validate(&req(CMD_READ, 0, size - 512, 512), &s);
    assert!(tail.is_ok());
    assert_eq!(
        errno(validate(&req(CMD_READ, CMD_FLAG_DF, 0, 512), &s)),
        EINVAL
    );
    assert_eq!(errno(validate(&req(CMD_READ, 1 << 9, 0, 512), &s)), EINVAL);
    assert_eq!(errno(validate(&req(42, 0, 0, 0), &s)), EINVAL);
    assert_eq!(validate(&req(42, 0, 0, 0), &s).unwrap_err().kind, None);
    assert_eq!(
        errno(validate(&req(CMD_BLOCK_STATUS, 0, 0, 512), &s)),
        EINVAL
    );
    // Trim/zero lengths may exceed the payload limit (no payload).
    assert!(validate(&req(CMD_TRIM, 0, 0, 1 << 20), &s).is_ok());
    // Fast zero on an export without cheap zeroing.
    assert_eq!(
        errno(validate(
            &req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 512),
            &s
        )),
        ENOTSUP
    );
    assert_eq!(
        validate(
            &req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE | CMD_FLAG_FUA, 0, 512),
            &s
        ),
        Ok(Op::WriteZeroes {
            offset: 0,
            len: 512,
            fua: true,
            may_trim: false
        })
    );
    // Flush ignores offset/length; FUA is accepted on every command.
    assert_eq!(
        validate(&req(CMD_FLUSH, CMD_FLAG_FUA, 7, 9), &s),
        Ok(Op::Flush)
    );

    let ro = session(true, true, true);
    for kind in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
        assert_eq!(errno(validate(&req(kind, 0, 0, 512), &ro)), EPERM);
    }
    assert!(validate(&req(CMD_READ, CMD_FLAG_DF, 0, 512), &ro).is_ok());
    assert_eq!(
        validate(&req(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 512), &ro),
        Ok(Op::BlockStatus {
            offset: 0,
            len: 512,
            req_one: true
        })
    );
    assert_eq!(
        errno(validate(&req(CMD_BLOCK_STATUS, 0, 0, 0), &ro)),
        EINVAL
    );
}

#[test]
fn extents_are_clipped_merged_and_limited() {
    let raw = [(0, 0), (512, 0), (512, 0), (1024, 3), (1 << 40, 0xff)];
    assert_eq!(
        normalize_extents(&raw, 4096, false),
        vec![(1024, 0), (3072, 3)]
    );
    assert_eq!(normalize_extents(&raw, 4096, true), vec![(1024, 0)]);
    assert_eq!(normalize_extents(&raw, 256, false), vec![(256, 0)]);
    assert!(normalize_extents(&[(0, 0)], 512, false).is_empty());
    let many: Vec<(u64, u32)> = (0..(MAX_EXTENTS as u64 + 10))
        .map(|i| (1, (i % 2) as u32))
        .collect();
    assert_eq!(normalize_extents(&many, u32::MAX, false).len(), MAX_EXTENTS);
}

#[test]
fn flush_habit_needs_pairs_in_a_row() {
    let write = Op::Write {
        offset: 0,
        len: 512,
        fua: false,
    };
    let mut habit = FlushHabit::default();
    for _ in 0..PAIRS_BEFORE_FLUSH_AHEAD {
        habit.note(&write);
        assert!(!habit.expects_flush());
        habit.note(&Op::Flush);
    }
    habit.note(&write);
    assert!(habit.expects_flush());
    // Reads in between change nothing; a second write breaks the habit.
    habit.note(&Op::Read {
        offset: 0,
        len: 512,
    });
    assert!(habit.expects_flush());
    habit.note(&write);
    assert!(!habit.expects_flush());
    habit.note(&Op::Flush);
    habit.note(&write);
    assert!(!habit.expects_flush());
    // A FLUSH with no write before it does not count as a pair either.
    let mut habit = FlushHabit::default();
    for _ in 0..PAIRS_BEFORE_FLUSH_AHEAD {
        habit.note(&Op::Flush);
    }
    habit.note(&write);
    assert!(!habit.expects_flush());
}

#[test]
fn zero_detection() {
    assert!(is_zero(&[]));
    assert!(is_zero(&[0u8; 100]));
    let mut v = vec![0u8; 100];
    v[99] = 1;
    assert!(!is_zero(&v));
    v[99] = 0;
    v[3] = 1;
    assert!(!is_zero(&v));
}
