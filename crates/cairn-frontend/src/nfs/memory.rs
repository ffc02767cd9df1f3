//! The NFS server's memory limit: one figure for the call buffers of all its connections
//! together, so many clients at once cannot take the server past its memory budget
//! (`cairn serve --nfs-memory-max`, by default the budget's request allowance).
//!
//! What is charged: every call from before its record's body is read until its reply has
//! been written — its record, the decoded copy of its arguments (a WRITE's data is copied out
//! of the record), and twice the largest reply its procedure can produce (a READ's data and
//! the encoded reply exist together): `call_charge_bytes`. The reader of a connection reads a
//! record's mark and the first bytes of its RPC header (program and procedure, at most
//! `PEEK_BYTES`, on the stack), takes the charge, and only then allocates and reads the rest;
//! so an idle connection holds nothing, and a connection that cannot be charged stops reading
//! its socket (TCP pushes back on its client) instead of allocating past the limit. A record
//! of several fragments is charged as the largest record (`RECORD_BYTES_MAX`), its size being
//! unknown until its last fragment; the excess is given back once it is whole.
//!
//! Not charged (fixed per connection, bounded by `CONNECTIONS_MAX`): each connection's small
//! read buffer and its threads' stacks; and what the duplicate-request cache keeps
//! (`DRC_BYTES_MAX`).
//!
//! Invariants: the charged total never passes the limit, except by one call when nothing at
//! all is charged (a call larger than the limit is served alone, so a limit smaller than one
//! call still progresses: no deadlock); every charge is taken whole before its bytes are
//! allocated (never in parts, which could deadlock readers each holding a part); waiters are
//! served first come, first served (a large READ is not starved by a stream of small calls);
//! a waiter gives up when the server stops (`wait` looks at the stop flag every
//! `STOP_POLL_MS`), so `NfsServer::stop` never hangs on it; a client that stops reading its
//! replies holds its calls' charges (at most `CALLS_IN_FLIGHT_MAX` and one more) for at most
//! the reply write timeout, then its connection is closed (`connection.rs`). Waits, the charged total and its
//! peak are counted in the statistics (`NfsStats::memory_*`).

use crate::nfs_stats::NfsStats;
use cairn_nfs::rpc::{PROGRAM_MOUNT, PROGRAM_NFS};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Largest READ and WRITE (FSINFO's rtmax and wtmax, `procs.rs`): kept here, as every bound
/// of a call's memory is.
pub const IO_BYTES_MAX: u32 = 1 << 20;
/// Largest record a client may send: a 1 MiB WRITE and its headers (a larger one closes
/// its connection: `connection.rs`).
pub const RECORD_BYTES_MAX: usize = IO_BYTES_MAX as usize + 64 * 1024;
/// Bytes of a call record's start that name its program and procedure (xid, message type,
/// RPC version, program, version, procedure: six 4-byte words).
pub const PEEK_BYTES: usize = 24;
/// The largest reply of a procedure that returns no data or directory listing (attributes,
/// a handle, a path of at most 4 KiB), with room to spare.
const SMALL_REPLY_BYTES: u64 = 8 * 1024;
/// The largest reply of READ, READDIR, READDIRPLUS (their counts are capped at
/// `IO_BYTES_MAX`) and of MOUNT EXPORT (the list of shares), with headers.
const LARGE_REPLY_BYTES: u64 = IO_BYTES_MAX as u64 + 8 * 1024;
/// How often a waiter looks at the server's stop flag.
const STOP_POLL_MS: u64 = 100;

/// The program and procedure of the call whose record starts with `head`, as far as `head`
/// holds them (words 3 and 5 of the RPC call header).
pub fn program_and_procedure(head: &[u8]) -> (Option<u32>, Option<u32>) {
    let word = |index: usize| {
        head.get(index * 4..index * 4 + 4)
            .and_then(|bytes| bytes.try_into().ok())
            .map(u32::from_be_bytes)
    };
    (word(3), word(5))
}

/// The largest reply the call whose record starts with `head` can produce (`head` may be
/// shorter than `PEEK_BYTES`: a record too short for a header gets a small error reply).
fn reply_bytes_max(head: &[u8]) -> u64 {
    let version = head
        .get(16..20)
        .and_then(|bytes| bytes.try_into().ok())
        .map(u32::from_be_bytes);
    match program_and_procedure(head) {
        // Any NFSv4 COMPOUND may READ or READDIR.
        (Some(PROGRAM_NFS), Some(_)) if version == Some(4) => LARGE_REPLY_BYTES,
        // READ, READDIR, READDIRPLUS.
        (Some(PROGRAM_NFS), Some(6 | 16 | 17)) => LARGE_REPLY_BYTES,
        // EXPORT.
        (Some(PROGRAM_MOUNT), Some(5)) => LARGE_REPLY_BYTES,
        _ => SMALL_REPLY_BYTES,
    }
}

/// What a call of `record_bytes` (the whole record, as far as known) whose record starts
/// with `head` is charged: the record, its decoded arguments, and twice its largest reply.
pub fn call_charge_bytes(record_bytes: usize, head: &[u8]) -> u64 {
    2 * record_bytes as u64 + 2 * reply_bytes_max(head)
}

/// What a record whose size is not known yet (its first fragment is not its last) is charged
/// at first: as the largest record with the largest reply.
pub fn unknown_record_charge_bytes() -> u64 {
    2 * RECORD_BYTES_MAX as u64 + 2 * LARGE_REPLY_BYTES
}

struct State {
    charged_bytes: u64,
    /// Tickets of the waiters, first come first.
    queue: VecDeque<u64>,
    next_ticket: u64,
}

/// The limit shared by every connection of one server.
pub struct MemoryLimit {
    max_bytes: u64,
    state: Mutex<State>,
    changed: Condvar,
    stats: Arc<NfsStats>,
}

/// Bytes charged to one call; given back when dropped.
pub struct Charge<'a> {
    limit: &'a MemoryLimit,
    bytes: u64,
}

impl MemoryLimit {
    pub fn new(max_bytes: u64, stats: Arc<NfsStats>) -> MemoryLimit {
        stats.memory_limit_set(max_bytes);
        MemoryLimit {
            max_bytes,
            state: Mutex::new(State {
                charged_bytes: 0,
                queue: VecDeque::new(),
                next_ticket: 0,
            }),
            changed: Condvar::new(),
            stats,
        }
    }

    fn fits(&self, state: &State, bytes: u64) -> bool {
        state.charged_bytes == 0 || state.charged_bytes.saturating_add(bytes) <= self.max_bytes
    }

    fn take(&self, state: &mut State, bytes: u64) -> Charge<'_> {
        state.charged_bytes = state.charged_bytes.saturating_add(bytes);
        self.stats.memory_charged(state.charged_bytes);
        Charge { limit: self, bytes }
    }

    /// Charges `bytes`, waiting (first come, first served) until they fit; None when
    /// `stopping` is set meanwhile.
    pub fn charge(&self, bytes: u64, stopping: &AtomicBool) -> Option<Charge<'_>> {
        let mut state = self.state.lock();
        if state.queue.is_empty() && self.fits(&state, bytes) {
            return Some(self.take(&mut state, bytes));
        }
        self.stats.memory_wait();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.queue.push_back(ticket);
        loop {
            if stopping.load(Ordering::SeqCst) {
                state.queue.retain(|waiting| *waiting != ticket);
                self.changed.notify_all();
                return None;
            }
            if state.queue.front() == Some(&ticket) && self.fits(&state, bytes) {
                state.queue.pop_front();
                let charge = self.take(&mut state, bytes);
                // The next waiter may fit too.
                self.changed.notify_all();
                return Some(charge);
            }
            self.changed
                .wait_for(&mut state, Duration::from_millis(STOP_POLL_MS));
        }
    }

    /// Wakes every waiter (the server is stopping: they look at its flag).
    pub fn wake_all(&self) {
        let _state = self.state.lock();
        self.changed.notify_all();
    }

    fn give_back(&self, bytes: u64) {
        let mut state = self.state.lock();
        state.charged_bytes = state.charged_bytes.saturating_sub(bytes);
        self.stats.memory_charged(state.charged_bytes);
        self.changed.notify_all();
    }
}

impl Charge<'_> {
    /// Gives back what passes `bytes` (a multi-fragment record turned out smaller than the
    /// largest one it was charged as).
    pub fn shrink_to(&mut self, bytes: u64) {
        if bytes < self.bytes {
            let excess = self.bytes - bytes;
            self.bytes = bytes;
            self.limit.give_back(excess);
        }
    }

    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Charge<'_> {
    fn drop(&mut self) {
        self.limit.give_back(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(program: u32, procedure: u32) -> Vec<u8> {
        [0, 0, 2, program, 3, procedure]
            .iter()
            .flat_map(|word: &u32| word.to_be_bytes())
            .collect()
    }

    #[test]
    fn reads_are_charged_their_largest_reply_and_small_calls_little() {
        let read = call_charge_bytes(120, &head(PROGRAM_NFS, 6));
        assert_eq!(read, 240 + 2 * LARGE_REPLY_BYTES);
        let getattr = call_charge_bytes(120, &head(PROGRAM_NFS, 1));
        assert_eq!(getattr, 240 + 2 * SMALL_REPLY_BYTES);
        let write = call_charge_bytes(1 << 20, &head(PROGRAM_NFS, 7));
        assert_eq!(write, (2 << 20) + 2 * SMALL_REPLY_BYTES);
        // Too short to name a procedure: a small error reply.
        assert_eq!(call_charge_bytes(3, &[1, 2, 3]), 6 + 2 * SMALL_REPLY_BYTES);
    }

    #[test]
    fn charges_wait_for_room_in_order_and_a_call_larger_than_the_limit_passes_alone() {
        let stats = Arc::new(NfsStats::default());
        let limit = Arc::new(MemoryLimit::new(100, stats.clone()));
        let stopping = AtomicBool::new(false);
        let first = limit.charge(60, &stopping).unwrap();
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| limit.charge(50, &stopping).map(|c| c.bytes()));
            // The waiter is queued: it counts as a wait, and takes nothing yet.
            while stats.snapshot().server.memory_waits == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(stats.snapshot().server.memory_charged_bytes, 60);
            drop(first);
            assert_eq!(waiter.join().unwrap(), Some(50));
        });
        // Nothing charged: larger than the limit, it passes alone.
        let huge = limit.charge(500, &stopping).unwrap();
        assert_eq!(stats.snapshot().server.memory_peak_bytes, 500);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| limit.charge(1, &stopping).is_none());
            while stats.snapshot().server.memory_waits < 2 {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Stopping releases a waiter without a charge.
            stopping.store(true, Ordering::SeqCst);
            limit.wake_all();
            assert!(waiter.join().unwrap());
        });
        drop(huge);
        assert_eq!(stats.snapshot().server.memory_charged_bytes, 0);
    }

    #[test]
    fn shrinking_gives_the_excess_back() {
        let stats = Arc::new(NfsStats::default());
        let limit = MemoryLimit::new(1000, stats.clone());
        let stopping = AtomicBool::new(false);
        let mut charge = limit.charge(900, &stopping).unwrap();
        charge.shrink_to(100);
        assert_eq!(stats.snapshot().server.memory_charged_bytes, 100);
        let other = limit.charge(900, &stopping).unwrap();
        assert_eq!(stats.snapshot().server.memory_charged_bytes, 1000);
        drop((charge, other));
        assert_eq!(stats.snapshot().server.memory_charged_bytes, 0);
        assert_eq!(stats.snapshot().server.memory_peak_bytes, 1000);
    }
}
