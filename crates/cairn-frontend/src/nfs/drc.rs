//! The duplicate-request cache: replies to non-idempotent calls, kept so that a client's
//! retransmission (its reply was lost, or it reconnected) is answered as the first time
//! instead of being done twice (a second REMOVE would say NOENT for a file the first one
//! removed; a second CREATE GUARDED would say EXIST).
//!
//! Keyed by the client's IP address (not its port: a client that reconnects keeps its xids
//! but gets a new port), the call's xid, its procedure and a hash of its argument bytes (two
//! processes on one host may reuse an xid for different calls). Bounded in entries and in
//! bytes; the oldest go first. Only finished replies are kept: a retransmission that arrives
//! while the first is still being served is served again (a gap, rare with one connection per
//! client, which answers in order). Uses nothing else of `nfs/`.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;

/// Most replies kept.
pub const DRC_ENTRIES_MAX: usize = 4096;
/// Most reply bytes kept.
pub const DRC_BYTES_MAX: usize = 8 << 20;

/// Which call a reply answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub client: IpAddr,
    pub xid: u32,
    pub procedure: u32,
    pub args_hash: u64,
}

impl CallKey {
    pub fn new(client: IpAddr, xid: u32, procedure: u32, args: &[u8]) -> CallKey {
        // A fixed-key hasher: the same arguments hash alike in every process (the cache only
        // lives in one, but nothing here should depend on a random seed).
        let mut hasher =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .build_hasher();
        hasher.write(args);
        CallKey {
            client,
            xid,
            procedure,
            args_hash: hasher.finish(),
        }
    }
}

#[derive(Default)]
struct Inner {
    replies: HashMap<CallKey, Vec<u8>>,
    order: VecDeque<CallKey>,
    bytes: usize,
    hits: u64,
}

/// The cache (one per server, shared by its connections).
#[derive(Default)]
pub struct DuplicateCache {
    inner: Mutex<Inner>,
}

impl DuplicateCache {
    /// The reply recorded for `key`, if any (counted as a hit).
    pub fn get(&self, key: &CallKey) -> Option<Vec<u8>> {
        let mut inner = self.inner.lock();
        let reply = inner.replies.get(key).cloned();
        if reply.is_some() {
            inner.hits += 1;
        }
        reply
    }

    /// Records `reply` (the whole record as sent) for `key`, dropping the oldest beyond
    /// the bounds. A reply larger than the byte bound is not kept.
    pub fn insert(&self, key: CallKey, reply: Vec<u8>) {
        if reply.len() > DRC_BYTES_MAX {
            return;
        }
        let mut inner = self.inner.lock();
        let len = reply.len();
        if let Some(old) = inner.replies.insert(key, reply) {
            inner.bytes -= old.len();
        } else {
            inner.order.push_back(key);
        }
        inner.bytes += len;
        while inner.order.len() > DRC_ENTRIES_MAX || inner.bytes > DRC_BYTES_MAX {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(old) = inner.replies.remove(&oldest) {
                inner.bytes -= old.len();
            }
        }
    }

    /// Retransmissions answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.inner.lock().hits
    }

    pub fn len(&self) -> usize {
        self.inner.lock().replies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(xid: u32) -> CallKey {
        CallKey::new(IpAddr::from([127, 0, 0, 1]), xid, 12, b"args")
    }

    #[test]
    fn replays_and_stays_bounded() {
        let cache = DuplicateCache::default();
        cache.insert(key(1), vec![1, 2, 3]);
        assert_eq!(cache.get(&key(1)), Some(vec![1, 2, 3]));
        assert_eq!(cache.get(&key(2)), None);
        let other_args = CallKey::new(IpAddr::from([127, 0, 0, 1]), 1, 12, b"other");
        assert_eq!(cache.get(&other_args), None);
        for xid in 0..(DRC_ENTRIES_MAX as u32 + 10) {
            cache.insert(key(xid + 100), vec![0; 8]);
        }
        assert_eq!(cache.len(), DRC_ENTRIES_MAX);
        assert_eq!(cache.get(&key(1)), None, "the oldest went first");
        assert_eq!(cache.hits(), 1);
    }
}
