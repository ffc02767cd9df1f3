//! A bounded cache of verified metadata blocks (indirect blocks, dnode blocks, object-set roots),
//! keyed by physical identity: the first copy's address and the birth txg. Because frees are
//! deferred and a reused address always comes with a newer birth txg, a key never names two
//! different contents. Eviction is first-in first-out; the ARC (a later layer) replaces this.

use bytes::Bytes;
use cairn_format::BlockPointer;
use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};

type Key = (u32, u64, u64);

pub struct MetadataCache {
    bytes_max: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    blocks: BTreeMap<Key, Bytes>,
    order: VecDeque<Key>,
    bytes: u64,
}

fn key(bp: &BlockPointer) -> Key {
    let first = bp.copies()[0];
    (first.vdev, first.offset, bp.birth_txg)
}

impl MetadataCache {
    pub fn new(bytes_max: u64) -> MetadataCache {
        MetadataCache {
            bytes_max,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub fn get(&self, bp: &BlockPointer) -> Option<Bytes> {
        self.inner.lock().blocks.get(&key(bp)).cloned()
    }

    pub fn insert(&self, bp: &BlockPointer, data: Bytes) {
        let len = data.len() as u64;
        if len > self.bytes_max {
            return;
        }
        let mut inner = self.inner.lock();
        let key = key(bp);
        if inner.blocks.insert(key, data).is_some() {
            return;
        }
        inner.order.push_back(key);
        inner.bytes += len;
        while inner.bytes > self.bytes_max {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(evicted) = inner.blocks.remove(&old) {
                inner.bytes -= evicted.len() as u64;
            }
        }
        debug_assert_eq!(inner.blocks.len(), inner.order.len());
    }
}
