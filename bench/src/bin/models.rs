//! `models`: the emulated device models measured on a virtual clock, next to the figures from
//! the seed documents they must reproduce.
//!
//! Deterministic (virtual time, seeded offsets), so two runs print the same table. Each model
//! runs the same three workloads: 8 KiB write + flush at QD1 (the sync-write cost), 128 KiB
//! sequential writes with one final flush (streaming), and random 8 KiB reads at QD1.
//!
//! ```text
//! cargo run --release -p cairn-bench --bin models
//! ```

use cairn_device::Device;
use cairn_device::clock::{Clock, VirtualClock};
use cairn_device::mem::MemDevice;
use cairn_emulate::{DeviceModel, EmuOptions, EmulatedDevice};
use std::sync::Arc;
use std::time::Duration;

const KIB: u64 = 1024;
const GIB: u64 = 1 << 30;
/// The device size the disk model is measured on: a quarter of its platter (see the model docs).
const DEVICE_BYTES: u64 = 128 * GIB;

fn device(model: DeviceModel) -> (Arc<EmulatedDevice>, Arc<VirtualClock>) {
    let clock = Arc::new(VirtualClock::new());
    let device = EmulatedDevice::new(
        Arc::new(MemDevice::new(DEVICE_BYTES)),
        model,
        EmuOptions {
            seed: 1,
            clock: Some(clock.clone() as Arc<dyn Clock>),
            destage_per_write_probability: 0.0,
            power: None,
        },
    );
    (device, clock)
}

/// splitmix64: seeded offsets without a dependency.
fn offsets(count: usize, region: u64, align: u64, seed: u64) -> Vec<u64> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % (region / align)) * align
        })
        .collect()
}

fn elapsed(clock: &VirtualClock, start: Duration) -> f64 {
    (clock.now() - start).as_secs_f64()
}

fn write_flush_iops(model: DeviceModel) -> f64 {
    let (device, clock) = device(model);
    let data = vec![0xa5u8; 8 * KIB as usize];
    let start = clock.now();
    let list = offsets(400, DEVICE_BYTES, 8 * KIB, 7);
    for &offset in &list {
        device.write_at(offset, &data).expect("write");
        device.flush().expect("flush");
    }
    list.len() as f64 / elapsed(&clock, start)
}

fn sequential_write_mb_s(model: DeviceModel) -> f64 {
    let (device, clock) = device(model);
    let data = vec![0x5au8; 128 * KIB as usize];
    let count = 2048u64;
    let start = clock.now();
    for index in 0..count {
        device.write_at(index * 128 * KIB, &data).expect("write");
    }
    device.flush().expect("flush");
    (count * 128 * KIB) as f64 / 1e6 / elapsed(&clock, start)
}

fn random_read_mb_s(model: DeviceModel) -> f64 {
    let (device, clock) = device(model);
    let mut buf = vec![0u8; 8 * KIB as usize];
    let list = offsets(400, 10 << 20, 8 * KIB, 3);
    let start = clock.now();
    for &offset in &list {
        device.read_at(offset, &mut buf).expect("read");
    }
    (list.len() as u64 * 8 * KIB) as f64 / 1e6 / elapsed(&clock, start)
}

fn main() {
    println!(
        "Emulated device models on a virtual clock (device of {} GiB)",
        DEVICE_BYTES / GIB
    );
    println!(
        "| model | 8 KiB write+flush QD1 (IOPS) | ratio to hdd-7200 | 128 KiB seq write (MB/s) | 8 KiB random read QD1 (MB/s) |"
    );
    println!("|---|---|---|---|---|");
    let hdd = write_flush_iops(DeviceModel::Hdd7200);
    for model in DeviceModel::ALL {
        let iops = write_flush_iops(model);
        println!(
            "| {} | {iops:.0} | {:.1}x | {:.0} | {:.2} |",
            model.name(),
            iops / hdd,
            sequential_write_mb_s(model),
            random_read_mb_s(model)
        );
    }
    println!();
    println!(
        "Seed figures: 7200 rpm disk ~118-120 sync IOPS, ~120 MB/s streaming, ~1.4 MB/s random 8 KiB reads."
    );
}
