//! Queue tests. A `Recorder` device logs every call and holds each one at a gate until the test
//! opens it, so the order in which the queue issues requests is observable without timing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use proptest::prelude::*;

use crate::device::{Device, DeviceError};

use super::*;
use crate::iostats::SizeHistogram;
use crate::mem::MemDevice;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Call {
    op: &'static str,
    offset: u64,
    len: u64,
    buffers: usize,
}

struct Recorder {
    inner: MemDevice,
    workers: usize,
    log: Mutex<Vec<Call>>,
    open: Mutex<bool>,
    opened: Condvar,
    entered: Condvar,
}

impl Recorder {
    fn new(size_bytes: u64, workers: usize) -> Arc<Recorder> {
        Arc::new(Recorder {
            inner: MemDevice::new(size_bytes),
            workers,
            log: Mutex::new(Vec::new()),
            open: Mutex::new(false),
            opened: Condvar::new(),
            entered: Condvar::new(),
        })
    }

    fn open_gate(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }

    /// Blocks until `n` calls have reached the device.
    fn wait_for_calls(&self, n: usize) {
        let mut open = self.open.lock();
        while self.log.lock().len() < n {
            self.entered.wait(&mut open);
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.log.lock().clone()
    }

    fn pass(&self, op: &'static str, offset: u64, len: u64, buffers: usize) {
        let mut open = self.open.lock();
        self.log.lock().push(Call {
            op,
            offset,
            len,
            buffers,
        });
        self.entered.notify_all();
        while !*open {
            self.opened.wait(&mut open);
        }
    }
}

impl Device for Recorder {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.pass("read", offset, len, bufs.len());
        self.inner.read_vectored_at(offset, bufs)
    }
    fn write_vectored_at(&self, offset: u64, bufs: &[&[u8]]) -> Result<(), DeviceError> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        self.pass("write", offset, len, bufs.len());
        self.inner.write_vectored_at(offset, bufs)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.pass("flush", 0, 0, 0);
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.discard(offset, len)
    }
    fn describe(&self) -> String {
        "recorder".into()
    }
    fn concurrency_hint(&self) -> usize {
        self.workers
    }
}

fn block(value: u8, len: usize) -> Bytes {
    Bytes::from(vec![value; len])
}

/// A queue whose single worker is parked in the device on a first write at `parked_at`.
fn parked_queue(size_bytes: u64, parked_at: u64) -> (Arc<Recorder>, Arc<LeafQueue>, IoHandle<()>) {
    let device = Recorder::new(size_bytes, 1);
    let queue = LeafQueue::new(device.clone());
    let first = queue.write(IoClass::AsyncWrite, parked_at, block(0xEE, 512));
    device.wait_for_calls(1);
    (device, queue, first)
}

#[test]
fn contiguous_writes_become_one_device_call() {
    let (device, queue, first) = parked_queue(16 << 20, 0);
    // 32 contiguous 4 KiB writes, submitted out of order while the worker is busy.
    let mut order: Vec<u64> = (0..32).collect();
    order.reverse();
    order.swap(3, 17);
    let handles: Vec<_> = order
        .iter()
        .map(|&i| {
            queue.write(
                IoClass::AsyncWrite,
                (1 << 20) + i * 4096,
                block(i as u8, 4096),
            )
        })
        .collect();
    assert_eq!(queue.in_flight(), 33);
    device.open_gate();
    first.wait().unwrap();
    for h in handles {
        h.wait().unwrap();
    }
    let calls = device.calls();
    assert_eq!(
        calls[1],
        Call {
            op: "write",
            offset: 1 << 20,
            len: 32 * 4096,
            buffers: 32
        }
    );
    let stats = queue.stats();
    assert_eq!(stats.write_requests, 33);
    assert_eq!(stats.write_calls, 2);
    assert_eq!(stats.write_bytes, 512 + 32 * 4096);
    let back = queue
        .read_sync(IoClass::SyncRead, 1 << 20, 32 * 4096)
        .unwrap();
    for (i, chunk) in back.chunks(4096).enumerate() {
        assert!(chunk.iter().all(|&b| b == i as u8), "block {i}");
    }
    assert_eq!(queue.in_flight(), 0);
}

#[test]
fn aggregates_respect_size_and_buffer_limits() {
    let (device, queue, first) = parked_queue(16 << 20, 0);
    // 100 contiguous 4 KiB writes (more than 64 buffers), then 24 x 64 KiB (more than 1 MiB).
    let mut handles: Vec<_> = (0..100u64)
        .map(|i| queue.write(IoClass::AsyncWrite, (1 << 20) + i * 4096, block(1, 4096)))
        .collect();
    handles.extend(
        (0..24u64)
            .map(|i| queue.write(IoClass::AsyncWrite, (8 << 20) + i * 65536, block(2, 65536))),
    );
    device.open_gate();
    first.wait().unwrap();
    for h in handles {
        h.wait().unwrap();
    }
    let calls = device.calls();
    assert!(
        calls
            .iter()
            .all(|c| c.len <= AGGREGATE_MAX_BYTES && c.buffers <= AGGREGATE_MAX_BUFFERS)
    );
    assert_eq!(calls.len(), 1 + 2 + 2, "{calls:?}");
    assert_eq!(calls[1].buffers, 64);
    assert_eq!(calls[3].len, AGGREGATE_MAX_BYTES);
}

#[test]
fn nearby_reads_merge_across_small_gaps() {
    let (device, queue, first) = parked_queue(16 << 20, 0);
    let pattern: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    device.inner.write_at(1 << 20, &pattern).unwrap();
    // 8 KiB reads every 16 KiB (8 KiB gaps), plus one 64 KiB further away (too far to merge).
    let mut wanted: Vec<u64> = (0..10).map(|i| i * 16384).collect();
    wanted.push(9 * 16384 + 8192 + 65536);
    let handles: Vec<_> = wanted
        .iter()
        .rev()
        .map(|&rel| (rel, queue.read(IoClass::AsyncRead, (1 << 20) + rel, 8192)))
        .collect();
    device.open_gate();
    first.wait().unwrap();
    for (rel, h) in handles {
        let data = h.wait().unwrap();
        assert_eq!(
            data[..],
            pattern[rel as usize..rel as usize + 8192],
            "read at +{rel}"
        );
    }
    let calls = device.calls();
    assert_eq!(
        calls[1..],
        [
            Call {
                op: "read",
                offset: 1 << 20,
                len: 9 * 16384 + 8192,
                buffers: 19
            },
            Call {
                op: "read",
                offset: (1 << 20) + 9 * 16384 + 8192 + 65536,
                len: 8192,
                buffers: 1
            },
        ]
    );
    let stats = queue.stats();
    assert_eq!((stats.read_requests, stats.read_calls), (11, 2));
}

#[test]
fn sync_read_overtakes_queued_async_writes() {
    let (device, queue, first) = parked_queue(64 << 20, 0);
    // 20 scattered async writes (nothing to merge), then one sync read.
    let writes: Vec<_> = (0..20u64)
        .map(|i| queue.write(IoClass::AsyncWrite, (i + 2) * 65536, block(3, 4096)))
        .collect();
    let read = queue.read(IoClass::SyncRead, 32 << 20, 4096);
    let scrub = queue.read(IoClass::Scrub, 40 << 20, 4096);
    assert_eq!(queue.in_flight(), 23);
    device.open_gate();
    first.wait().unwrap();
    read.wait().unwrap();
    scrub.wait().unwrap();
    for w in writes {
        w.wait().unwrap();
    }
    let calls = device.calls();
    assert_eq!(calls.len(), 23);
    assert_eq!(
        (calls[1].op, calls[1].offset),
        ("read", 32 << 20),
        "sync read goes first"
    );
    assert_eq!(
        (calls[22].op, calls[22].offset),
        ("read", 40 << 20),
        "scrub goes last"
    );
    let write_offsets: Vec<u64> = calls[2..22].iter().map(|c| c.offset).collect();
    assert!(
        write_offsets.is_sorted(),
        "async writes go in offset order: {write_offsets:?}"
    );
}

#[test]
fn flush_waits_for_earlier_writes() {
    let (device, queue, first) = parked_queue(1 << 20, 4096);
    let done = Arc::new(AtomicBool::new(false));
    let flusher = {
        let (queue, done) = (queue.clone(), done.clone());
        std::thread::spawn(move || {
            let result = queue.flush();
            done.store(true, Ordering::SeqCst);
            result
        })
    };
    while queue.waiting_flushes() == 0 {
        std::thread::yield_now();
    }
    // The flush is waiting for the parked write: it has not reached the device.
    assert!(!done.load(Ordering::SeqCst));
    assert_eq!(device.calls().len(), 1);
    // A write submitted after the flush started is not waited for.
    let later = queue.write(IoClass::AsyncWrite, 65536, block(5, 512));
    device.open_gate();
    flusher.join().unwrap().unwrap();
    first.wait().unwrap();
    later.wait().unwrap();
    let calls = device.calls();
    let flush_at = calls.iter().position(|c| c.op == "flush").unwrap();
    assert!(flush_at > 0 && calls[0].offset == 4096 && calls[0].op == "write");
    let stats = queue.stats();
    assert_eq!(stats.flushes, 1);
    assert_eq!(stats.flush_latency_us.len(), 1);
}

#[test]
fn empty_requests_complete_alone() {
    let (device, queue, first) = parked_queue(1 << 20, 0);
    let empty_write = queue.write(IoClass::AsyncWrite, 8192, Bytes::new());
    let neighbours: Vec<_> = [4096u64, 8192]
        .iter()
        .map(|&offset| queue.write(IoClass::AsyncWrite, offset, block(9, 4096)))
        .collect();
    let empty_read = queue.read(IoClass::Scrub, 8192, 0);
    device.open_gate();
    first.wait().unwrap();
    empty_write.wait().unwrap();
    assert!(empty_read.wait().unwrap().is_empty());
    for h in neighbours {
        h.wait().unwrap();
    }
    let calls = device.calls();
    assert!(calls.contains(&Call {
        op: "write",
        offset: 4096,
        len: 8192,
        buffers: 2
    }));
    assert!(calls.iter().any(|c| c.len == 0 && c.op == "write"));
    assert_eq!(queue.stats().write_requests, 4);
}

#[test]
fn errors_reach_every_merged_request() {
    struct Failing(MemDevice);
    impl Device for Failing {
        fn size_bytes(&self) -> u64 {
            self.0.size_bytes()
        }
        fn read_vectored_at(&self, o: u64, b: &mut [&mut [u8]]) -> Result<(), DeviceError> {
            self.0.read_vectored_at(o, b)
        }
        fn write_vectored_at(&self, _: u64, _: &[&[u8]]) -> Result<(), DeviceError> {
            Err(DeviceError::Io {
                device: "failing".into(),
                op: "write",
                offset: 0,
                source: std::io::Error::from_raw_os_error(libc::EIO),
            })
        }
        fn flush(&self) -> Result<(), DeviceError> {
            Ok(())
        }
        fn discard(&self, _: u64, _: u64) -> Result<(), DeviceError> {
            Ok(())
        }
        fn describe(&self) -> String {
            "failing".into()
        }
    }
    let queue = LeafQueue::new(Arc::new(Failing(MemDevice::new(1 << 20))));
    let handles: Vec<_> = (0..8u64)
        .map(|i| queue.write(IoClass::Log, i * 512, block(1, 512)))
        .collect();
    for h in handles {
        match h.wait() {
            Err(DeviceError::Io { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::EIO))
            }
            other => panic!("expected EIO, got {other:?}"),
        }
    }
    let stats = queue.stats();
    assert_eq!(stats.write_errors, 8);
    assert!(stats.to_string().contains("8 err"), "{stats}");
}

#[test]
fn shutdown_drains_and_then_refuses() {
    let device = Arc::new(MemDevice::new(1 << 20));
    let queue = LeafQueue::new(device.clone());
    let handles: Vec<_> = (0..50u64)
        .map(|i| queue.write(IoClass::AsyncWrite, i * 4096, block(i as u8, 4096)))
        .collect();
    queue.shutdown();
    for h in handles {
        h.wait()
            .expect("queued work is finished before the workers stop");
    }
    let mut back = [0u8; 1];
    device.read_at(49 * 4096, &mut back).unwrap();
    assert_eq!(back[0], 49);
    let refused = queue.write_sync(IoClass::SyncWrite, 0, block(1, 1));
    assert!(matches!(refused, Err(DeviceError::Invalid { .. })));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any batch of reads and writes, however merged, gives every read the bytes that were on
    /// the device before the batch (reads and writes never overlap here) and stores every write.
    #[test]
    fn merged_batches_match_direct_io(
        requests in prop::collection::vec((0u64..64, 1u64..12, any::<bool>(), 0usize..6), 1..60)
    ) {
        const UNIT: u64 = 2048;
        let (device, queue, first) = parked_queue(1 << 20, 900 << 10);
        let before: Vec<u8> = (0..(256 * UNIT) as u32).map(|i| (i % 241) as u8).collect();
        device.inner.write_at(0, &before).unwrap();
        // Keep requests disjoint so the expected result does not depend on order.
        let mut used = vec![false; 256];
        let mut reads = Vec::new();
        let mut writes = Vec::new();
        for (slot, units, is_write, class) in requests {
            let start = (slot * 4) as usize;
            let end = (start + units as usize).min(256);
            if used[start..end].iter().any(|&u| u) {
                continue;
            }
            used[start..end].iter_mut().for_each(|u| *u = true);
            let (offset, len) = (start as u64 * UNIT, (end - start) as u64 * UNIT);
            let class = IoClass::ALL[class];
            if is_write {
                let data = block(slot as u8 ^ 0x80, len as usize);
                writes.push((offset, data.clone(), queue.write(class, offset, data)));
            } else {
                reads.push((offset, len, queue.read(class, offset, len as usize)));
            }
        }
        device.open_gate();
        first.wait().unwrap();
        for (offset, len, h) in reads {
            let data = h.wait().unwrap();
            prop_assert_eq!(&data[..], &before[offset as usize..(offset + len) as usize]);
        }
        for (offset, data, h) in writes {
            h.wait().unwrap();
            let mut back = vec![0u8; data.len()];
            device.inner.read_at(offset, &mut back).unwrap();
            prop_assert_eq!(&back[..], &data[..]);
        }
        for call in device.calls() {
            prop_assert!(call.len <= AGGREGATE_MAX_BYTES && call.buffers <= AGGREGATE_MAX_BUFFERS);
        }
        let stats = queue.stats();
        prop_assert!(stats.read_calls <= stats.read_requests);
        prop_assert!(stats.write_calls <= stats.write_requests);
    }
}

#[test]
fn a_durable_write_makes_its_aggregate_a_fua_write() {
    let (device, queue, first) = parked_queue(1 << 20, 0);
    // Queued while the worker is parked: a plain write and a durable one right after it.
    let plain = queue.write(IoClass::AsyncWrite, 65536, block(1, 4096));
    let durable = queue.write_durable(IoClass::Log, 65536 + 4096, block(2, 4096));
    device.open_gate();
    first.wait().unwrap();
    plain.wait().unwrap();
    durable.wait().unwrap();
    let calls = device.calls();
    // The recorder has no FUA of its own: the device default writes, then flushes.
    let merged = calls
        .iter()
        .position(|c| c.op == "write" && c.offset == 65536)
        .expect("the merged write");
    assert_eq!(calls[merged].len, 8192, "one aggregate: {calls:?}");
    assert_eq!(calls[merged + 1].op, "flush", "{calls:?}");
    assert_eq!(queue.stats().fua_writes, 1);
}

#[test]
fn a_promoted_read_ahead_overtakes_what_it_was_queued_behind() {
    let (device, queue, first) = parked_queue(16 << 20, 0);
    // Read-ahead at 8 MiB, then a sync write at 1 MiB: strict priority serves the write first,
    // unless a demand reader raises the read-ahead to a sync read.
    let read_ahead = queue.read(IoClass::AsyncRead, 8 << 20, 4096);
    let other_read_ahead = queue.read(IoClass::AsyncRead, 12 << 20, 4096);
    let write = queue.write(IoClass::SyncWrite, 1 << 20, block(3, 4096));
    assert_eq!(
        queue.promote_reads(8 << 20, IoClass::AsyncRead, IoClass::SyncRead),
        1
    );
    assert_eq!(
        queue.promote_reads(4 << 20, IoClass::AsyncRead, IoClass::SyncRead),
        0,
        "nothing queued there"
    );
    device.open_gate();
    first.wait().unwrap();
    read_ahead.wait().unwrap();
    write.wait().unwrap();
    other_read_ahead.wait().unwrap();
    let order: Vec<(&str, u64)> = device.calls()[1..]
        .iter()
        .map(|call| (call.op, call.offset))
        .collect();
    assert_eq!(
        order,
        [("read", 8 << 20), ("write", 1 << 20), ("read", 12 << 20)],
        "the promoted read first, the unpromoted one after the write"
    );
    assert_eq!(queue.stats().promoted_reads, 1);
}

#[test]
fn a_cache_read_overtakes_queued_feed_writes() {
    let device = Recorder::new(64 << 20, 1);
    let queue = LeafQueue::new(device.clone());
    let first = queue.write(IoClass::CacheWrite, 0, block(0xEE, 4096));
    device.wait_for_calls(1);
    // Feed writes queued behind the parked one (apart: nothing merges), then a demand read.
    let writes: Vec<_> = (1..=5u64)
        .map(|i| queue.write(IoClass::CacheWrite, i << 20, block(i as u8, 4096)))
        .collect();
    let read = queue.read(IoClass::CacheRead, 32 << 20, 4096);
    device.open_gate();
    first.wait().unwrap();
    read.wait().unwrap();
    for write in writes {
        write.wait().unwrap();
    }
    let order: Vec<(&str, u64)> = device
        .calls()
        .iter()
        .map(|call| (call.op, call.offset))
        .collect();
    assert_eq!(
        order,
        [
            ("write", 0),
            ("read", 32 << 20),
            ("write", 1 << 20),
            ("write", 2 << 20),
            ("write", 3 << 20),
            ("write", 4 << 20),
            ("write", 5 << 20),
        ],
        "the read right after the write in service, the feed in submission order after it"
    );
}

#[test]
fn feed_writes_leave_workers_free_for_cache_reads() {
    let device = Recorder::new(64 << 20, 4);
    let queue = LeafQueue::new(device.clone());
    let max = IoClass::CacheWrite.max_active();
    let writes: Vec<_> = (0..6u64)
        .map(|i| queue.write(IoClass::CacheWrite, i << 20, block(i as u8, 4096)))
        .collect();
    // The feed holds as many workers as its class may, and no more, however much is queued.
    device.wait_for_calls(max);
    assert!(max < 4, "the feed must not take every worker");
    let read = queue.read(IoClass::CacheRead, 32 << 20, 4096);
    device.wait_for_calls(max + 1);
    let calls = device.calls();
    assert_eq!(calls.len(), max + 1, "{calls:?}");
    assert_eq!((calls[max].op, calls[max].offset), ("read", 32 << 20));
    device.open_gate();
    read.wait().unwrap();
    for write in writes {
        write.wait().unwrap();
    }
}

#[test]
fn per_class_statistics_show_queue_depths_waits_and_sizes() {
    let (device, queue, first) = parked_queue(16 << 20, 0);
    // 16 contiguous 8 KiB async writes (one 128 KiB aggregate) and two sync reads, queued
    // behind the parked write.
    let writes: Vec<_> = (0..16u64)
        .map(|i| queue.write(IoClass::AsyncWrite, (1 << 20) + i * 8192, block(1, 8192)))
        .collect();
    let reads: Vec<_> = [4u64 << 20, 8 << 20]
        .iter()
        .map(|&offset| queue.read(IoClass::SyncRead, offset, 4096))
        .collect();
    let parked = queue.stats();
    let async_write = parked.class(IoClass::AsyncWrite);
    assert_eq!(async_write.pending_requests, 16);
    assert_eq!(async_write.active_requests, 1);
    assert_eq!(parked.class(IoClass::SyncRead).pending_requests, 2);
    assert_eq!(parked.class(IoClass::SyncRead).active_requests, 0);
    assert_eq!(async_write.write.requests, 0, "nothing completed yet");

    device.open_gate();
    first.wait().unwrap();
    for handle in writes {
        handle.wait().unwrap();
    }
    for handle in reads {
        handle.wait().unwrap();
    }
    queue
        .write_direct(12 << 20, &[&[7u8; 4096], &[8u8; 4096]], true)
        .unwrap();
    // A direct read counts under its class, with no queue wait.
    let direct = queue
        .read_direct(IoClass::SyncRead, 12 << 20, 4096)
        .unwrap();
    assert!(direct.iter().all(|&byte| byte == 7));

    let stats = queue.stats();
    let written = stats.class(IoClass::AsyncWrite).write;
    assert_eq!(written.requests, 17);
    assert_eq!(written.bytes, 512 + 16 * 8192);
    let eight_k = SizeHistogram::bucket_of(8192);
    assert_eq!(written.request_size_bytes.counts[eight_k], 16);
    assert_eq!(written.request_size_bytes.counts[0], 1);
    assert_eq!(written.request_size_bytes.total(), 17);
    // The 16 writes went down as one 128 KiB call; the parked write alone is no aggregate.
    let aggregate = SizeHistogram::bucket_of(16 * 8192);
    assert_eq!(written.aggregate_size_bytes.counts[aggregate], 1);
    assert_eq!(written.aggregate_size_bytes.total(), 1);
    for histogram in [
        &written.queue_wait_us,
        &written.disk_wait_us,
        &written.total_wait_us,
    ] {
        assert_eq!(histogram.total(), 17);
    }
    assert!(written.queue_wait_ns > 0, "the queued writes waited");
    assert!(written.disk_wait_ns <= written.total_wait_ns);
    assert_eq!(
        written.total_wait_ns,
        written.queue_wait_ns + written.disk_wait_ns
    );

    let read = stats.class(IoClass::SyncRead).read;
    assert_eq!(read.requests, 3);
    assert_eq!(
        read.request_size_bytes.counts[SizeHistogram::bucket_of(4096)],
        3
    );
    assert_eq!(read.total_wait_us.total(), 3);
    assert_eq!(stats.class(IoClass::SyncRead).write.requests, 0);

    // A direct write counts as a log write that never queued.
    let log = stats.class(IoClass::Log).write;
    assert_eq!(log.requests, 1);
    assert_eq!(log.bytes, 8192);
    assert_eq!(log.queue_wait_ns, 0);
    assert_eq!(log.total_wait_us.total(), 1);

    for class in IoClass::ALL {
        assert_eq!(stats.class(class).pending_requests, 0, "{}", class.name());
        assert_eq!(stats.class(class).active_requests, 0, "{}", class.name());
    }
    // The per-class counts agree with the totals.
    let (reads, writes): (u64, u64) = stats.classes.iter().fold((0, 0), |(r, w), c| {
        (r + c.read.requests, w + c.write.requests)
    });
    assert_eq!(reads, stats.read_requests);
    assert_eq!(writes, stats.write_requests);
}
