//! One request and what its caller holds: the request as the scheduler keeps it (`Request`,
//! its `Payload`), the caller's `IoHandle` to wait on, the read buffers (`ReadBuf`) and the
//! requests taken together for one device call (`Aggregate`).
//!
//! Invariants: a read's buffer is exactly the request's length and is not shared until its
//! read completes (`fresh_read_buf_mut`). This file uses only `priority` below it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use crossbeam_channel::{Receiver, Sender};

use super::priority::{Dir, IoClass};
use crate::device::DeviceError;

pub(super) type Reply<T> = Sender<Result<T, DeviceError>>;

/// What a read returns: its bytes in a shared buffer of exactly their length, so a cache can
/// keep the very buffer the device filled (no copy) and hand out references to it.
pub type ReadBuf = Arc<[u8]>;

/// A zero-filled buffer of `len` bytes for a read to fill (zeroed memory from the allocator:
/// large buffers come straight from the kernel, already zero, with no pass over them here).
pub(super) fn zeroed_read_buf(len: usize) -> ReadBuf {
    // SAFETY: every bit pattern, zero included, is a valid u8.
    unsafe { Arc::<[u8]>::new_zeroed_slice(len).assume_init() }
}

/// The bytes of a buffer from `zeroed_read_buf`, not shared with anyone yet.
pub(super) fn fresh_read_buf_mut(buf: &mut ReadBuf) -> &mut [u8] {
    Arc::get_mut(buf).expect("a read buffer is not shared before its read completes")
}

pub(super) enum Payload {
    Read {
        len: u64,
        reply: Reply<ReadBuf>,
    },
    /// `durable`: a FUA write (see `write_durable`).
    Write {
        data: Bytes,
        durable: bool,
        reply: Reply<()>,
    },
}

pub(super) struct Request {
    pub(super) seq: u64,
    pub(super) class: IoClass,
    pub(super) offset: u64,
    pub(super) submitted: Duration,
    pub(super) payload: Payload,
}

impl Request {
    pub(super) fn len(&self) -> u64 {
        match &self.payload {
            Payload::Read { len, .. } => *len,
            Payload::Write { data, .. } => data.len() as u64,
        }
    }

    pub(super) fn end(&self) -> u64 {
        self.offset + self.len()
    }

    pub(super) fn dir(&self) -> Dir {
        match self.payload {
            Payload::Read { .. } => Dir::Read,
            Payload::Write { .. } => Dir::Write,
        }
    }
}

/// A submitted request's result, to wait for.
#[must_use = "an I/O handle must be waited on to learn whether the I/O succeeded"]
pub struct IoHandle<T> {
    pub(super) rx: Receiver<Result<T, DeviceError>>,
    pub(super) device: Arc<str>,
}

impl<T> IoHandle<T> {
    /// Blocks until the request completes.
    pub fn wait(self) -> Result<T, DeviceError> {
        self.rx.recv().unwrap_or_else(|_| {
            Err(DeviceError::Invalid {
                device: self.device.to_string(),
                reason: "the I/O queue dropped the request".into(),
            })
        })
    }

    /// True once the result is available (`wait` will not block).
    pub fn is_done(&self) -> bool {
        !self.rx.is_empty()
    }
}

/// Requests taken together for one device call, in offset order.
pub(super) struct Aggregate {
    pub(super) class: IoClass,
    pub(super) dir: Dir,
    pub(super) members: Vec<Request>,
    /// When the device call was made (set by `execute`).
    pub(super) issued: Duration,
}
