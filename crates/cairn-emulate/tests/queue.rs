//! A `LeafQueue` over an emulated device: many clients, each reading back its own writes.
//!
//! Moved from `cairn-device`'s queue tests when the emulator left that crate: a unit test there
//! cannot use `cairn-emulate` (the dev-dependency cycle would link two copies of `cairn-device`,
//! whose `Device` traits differ), so it lives here as an integration test, asserting the same.

use std::sync::Arc;

use bytes::Bytes;
use cairn_device::mem::MemDevice;
use cairn_device::queue::{IoClass, LeafQueue};
use cairn_emulate::{DeviceModel, EmuOptions, EmulatedDevice};

fn block(value: u8, len: usize) -> Bytes {
    Bytes::from(vec![value; len])
}

#[test]
fn concurrent_clients_read_their_own_writes() {
    let device = Arc::new(MemDevice::new(64 << 20));
    let queue = LeafQueue::new(EmulatedDevice::new(
        device,
        DeviceModel::Nvme,
        EmuOptions {
            clock: None,
            ..Default::default()
        },
    ));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let queue = queue.clone();
            std::thread::spawn(move || {
                let base = t * (8 << 20);
                let handles: Vec<_> = (0..200u64)
                    .map(|i| {
                        let class = if i % 2 == 0 {
                            IoClass::AsyncWrite
                        } else {
                            IoClass::SyncWrite
                        };
                        queue.write(class, base + i * 8192, block((t * 50 + i % 50) as u8, 8192))
                    })
                    .collect();
                for h in handles {
                    h.wait().unwrap();
                }
                queue.flush().unwrap();
                for i in (0..200u64).step_by(7) {
                    let data = queue
                        .read_sync(IoClass::AsyncRead, base + i * 8192, 8192)
                        .unwrap();
                    assert!(data.iter().all(|&b| b == (t * 50 + i % 50) as u8));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let stats = queue.stats();
    assert_eq!(stats.write_requests, 800);
    assert!(stats.write_calls <= 800);
    assert_eq!(stats.flushes, 4);
}
