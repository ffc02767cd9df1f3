//! Tests of the emulated device: durability, power cuts, faults, determinism, model figures.
//! Model figures are computed on a `VirtualClock` over a `MemDevice`: no wall-clock time.

use super::*;
use cairn_device::file::{FileDevice, FileOptions};
use cairn_device::mem::MemDevice;

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

fn untimed(seed: u64) -> EmuOptions {
    EmuOptions {
        seed,
        clock: None,
        ..EmuOptions::default()
    }
}

fn over_mem(
    model: DeviceModel,
    size_bytes: u64,
    options: EmuOptions,
) -> (Arc<EmulatedDevice>, Arc<MemDevice>) {
    let backing = Arc::new(MemDevice::new(size_bytes));
    let device = EmulatedDevice::new(backing.clone(), model, options);
    (device, backing)
}

fn read_vec(device: &dyn Device, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    device.read_at(offset, &mut buf).unwrap();
    buf
}

fn create_file(path: &std::path::Path, size_bytes: u64) -> FileDevice {
    FileDevice::open(
        path,
        FileOptions {
            create_size_bytes: Some(size_bytes),
            ..FileOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn volatile_cache_loses_unflushed_writes_at_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk");
    let device = EmulatedDevice::new(
        Arc::new(create_file(&path, MIB)),
        DeviceModel::Hdd7200,
        untimed(1),
    );
    assert_eq!(
        device.describe(),
        format!("emu:hdd-7200:{}", path.display())
    );
    device.write_at(0, &[0xAA; 4096]).unwrap();
    device.flush().unwrap();
    device.write_at(8192, &[0xBB; 4096]).unwrap();
    device.write_at(0, &[0xCC; 512]).unwrap();

    // Unflushed writes are visible to reads through the device...
    let seen = read_vec(&*device, 0, 12288);
    assert!(seen[..512].iter().all(|&b| b == 0xCC));
    assert!(seen[512..4096].iter().all(|&b| b == 0xAA));
    assert!(seen[8192..].iter().all(|&b| b == 0xBB));
    // ...but only in the drive's memory.
    assert_eq!(device.stats().pending_writes, 2);
    let backing = device.backing().unwrap();
    assert!(read_vec(&*backing, 8192, 4096).iter().all(|&b| b == 0));
    drop(backing);

    device.power_cut(false);
    assert!(device.is_powered_off());
    let mut buf = [0u8; 16];
    assert!(matches!(
        device.read_at(0, &mut buf),
        Err(DeviceError::PoweredOff { .. })
    ));
    assert!(matches!(
        device.write_at(0, &buf),
        Err(DeviceError::PoweredOff { .. })
    ));
    assert!(matches!(
        device.flush(),
        Err(DeviceError::PoweredOff { .. })
    ));
    assert!(matches!(
        device.discard(0, 512),
        Err(DeviceError::PoweredOff { .. })
    ));

    // The cut released the backing file: it can be reopened (and locked) at once.
    let reopened = FileDevice::open(&path, FileOptions::default()).unwrap();
    let after = read_vec(&reopened, 0, 12288);
    assert!(
        after[..4096].iter().all(|&b| b == 0xAA),
        "flushed data survives, overwrite lost"
    );
    assert!(
        after[8192..].iter().all(|&b| b == 0),
        "unflushed write is gone"
    );
}

#[test]
fn power_protected_models_keep_acknowledged_writes() {
    for model in [DeviceModel::SsdPlp, DeviceModel::Ram] {
        let (device, backing) = over_mem(model, MIB, untimed(0));
        device.write_at(4096, &[0x42; 4096]).unwrap();
        device.power_cut(true);
        assert!(
            read_vec(&*backing, 4096, 4096).iter().all(|&b| b == 0x42),
            "{model}"
        );
    }
    for model in DeviceModel::ALL {
        assert_eq!(
            model.has_volatile_cache(),
            matches!(
                model,
                DeviceModel::Hdd7200 | DeviceModel::SsdSata | DeviceModel::Nvme
            )
        );
        assert_eq!(
            model.has_volatile_cache(),
            model.volatile_cache_bytes() > 0,
            "{model}: a volatile cache has a size"
        );
        assert_eq!(DeviceModel::named(model.name()), Some(model));
    }
    assert_eq!(DeviceModel::named("floppy"), None);
}

#[test]
fn torn_writes_land_whole_sectors_only() {
    const WRITES: u64 = 8;
    const SECTORS_PER_WRITE: u64 = 16;
    let mut partial_writes = 0;
    let mut landed_total = 0;
    for seed in 0..8 {
        let (device, backing) = over_mem(DeviceModel::SsdSata, MIB, untimed(seed));
        for i in 0..WRITES {
            device
                .write_at(
                    i * 64 * KIB,
                    &vec![0xFF; (SECTORS_PER_WRITE * SECTOR_BYTES) as usize],
                )
                .unwrap();
        }
        device.power_cut(true);
        for i in 0..WRITES {
            let data = read_vec(
                &*backing,
                i * 64 * KIB,
                (SECTORS_PER_WRITE * SECTOR_BYTES) as usize,
            );
            let mut landed = 0;
            for sector in data.chunks(SECTOR_BYTES as usize) {
                let all_new = sector.iter().all(|&b| b == 0xFF);
                let all_old = sector.iter().all(|&b| b == 0);
                assert!(all_new || all_old, "seed {seed}: a sector is never split");
                landed += u64::from(all_new);
            }
            if landed > 0 && landed < SECTORS_PER_WRITE {
                partial_writes += 1;
            }
            landed_total += landed;
        }
    }
    assert!(partial_writes > 0, "some writes are torn");
    assert!(
        landed_total < 8 * WRITES * SECTORS_PER_WRITE / 2,
        "most sectors are lost"
    );

    // Without tear nothing lands.
    let (device, backing) = over_mem(DeviceModel::SsdSata, MIB, untimed(0));
    device.write_at(0, &[0xFF; 8192]).unwrap();
    device.power_cut(false);
    assert!(read_vec(&*backing, 0, 8192).iter().all(|&b| b == 0));
}

#[test]
fn power_switch_trips_at_exactly_the_nth_op_across_devices() {
    let switch = Arc::new(PowerSwitch::with_seed(3));
    let (a, a_backing) = over_mem(
        DeviceModel::Hdd7200,
        MIB,
        EmuOptions {
            power: Some(switch.clone()),
            ..untimed(1)
        },
    );
    let (b, _b_backing) = over_mem(DeviceModel::Nvme, MIB, untimed(2));
    switch.attach(&b);
    switch.arm_after_ops(5);

    a.write_at(0, &[1; 4096]).unwrap(); // op 1
    b.write_at(0, &[2; 4096]).unwrap(); // op 2
    a.flush().unwrap(); // op 3
    let mut buf = [0u8; 4096];
    b.read_at(0, &mut buf).unwrap(); // reads are not counted
    a.write_at(8192, &[3; 4096]).unwrap(); // op 4
    assert!(!switch.tripped());
    assert_eq!(switch.ops_seen(), 4);
    let fifth = b.flush(); // op 5: the power goes before it is performed
    assert!(
        matches!(fifth, Err(DeviceError::PoweredOff { .. })),
        "{fifth:?}"
    );
    assert!(switch.tripped());
    assert_eq!(switch.ops_seen(), 5);
    assert!(a.is_powered_off() && b.is_powered_off());
    assert!(matches!(
        a.read_at(0, &mut buf),
        Err(DeviceError::PoweredOff { .. })
    ));
    assert!(matches!(
        b.write_at(0, &buf),
        Err(DeviceError::PoweredOff { .. })
    ));
    assert_eq!(
        switch.ops_seen(),
        5,
        "operations after the trip are not counted"
    );
    assert!(
        read_vec(&*a_backing, 0, 4096).iter().all(|&x| x == 1),
        "flushed before the cut"
    );
}

#[test]
fn each_fault_kind_is_observable() {
    let (device, backing) = over_mem(DeviceModel::SsdPlp, MIB, untimed(9));
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    device.write_at(8192, &pattern).unwrap();

    // Read EIO.
    device.set_faults(FaultConfig {
        read_eio_probability: 1.0,
        ..FaultConfig::default()
    });
    let mut buf = vec![0u8; 4096];
    let err = device.read_at(8192, &mut buf).unwrap_err();
    assert!(
        matches!(err, DeviceError::Injected { op: "read", .. }),
        "{err}"
    );

    // Bit flip: exactly one bit differs in what is returned; the stored data stays intact.
    device.set_faults(FaultConfig {
        read_bit_flip_probability: 1.0,
        ..FaultConfig::default()
    });
    device.read_at(8192, &mut buf).unwrap();
    let flipped: u32 = buf
        .iter()
        .zip(&pattern)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    assert_eq!(flipped, 1);
    assert_eq!(read_vec(&*backing, 8192, 4096), pattern);

    // Write EIO: nothing is written.
    device.set_faults(FaultConfig {
        write_eio_probability: 1.0,
        ..FaultConfig::default()
    });
    let err = device.write_at(8192, &[0u8; 4096]).unwrap_err();
    assert!(
        matches!(err, DeviceError::Injected { op: "write", .. }),
        "{err}"
    );
    assert_eq!(read_vec(&*backing, 8192, 4096), pattern);

    // Lost write: acknowledged, never stored.
    device.set_faults(FaultConfig {
        lost_write_probability: 1.0,
        ..FaultConfig::default()
    });
    device.write_at(8192, &[0u8; 4096]).unwrap();
    device.flush().unwrap();
    assert_eq!(read_vec(&*device, 8192, 4096), pattern);

    // Misdirected write: the data lands at another sector-aligned offset.
    device.set_faults(FaultConfig {
        misdirected_write_probability: 1.0,
        ..FaultConfig::default()
    });
    device.write_at(65536, &[0x77; 1024]).unwrap();
    assert!(read_vec(&*backing, 65536, 1024).iter().all(|&b| b == 0));
    let everything = read_vec(&*backing, 0, MIB as usize);
    let landed = everything
        .windows(1024)
        .position(|w| w.iter().all(|&b| b == 0x77))
        .expect("the data landed somewhere");
    assert_eq!(landed % SECTOR_BYTES as usize, 0);

    // Missing: every operation fails until the device comes back.
    device.set_faults(FaultConfig {
        missing: true,
        ..FaultConfig::default()
    });
    assert!(matches!(
        device.read_at(0, &mut buf),
        Err(DeviceError::Missing { .. })
    ));
    assert!(matches!(
        device.write_at(0, &buf),
        Err(DeviceError::Missing { .. })
    ));
    assert!(matches!(device.flush(), Err(DeviceError::Missing { .. })));
    assert!(matches!(
        device.discard(0, 4096),
        Err(DeviceError::Missing { .. })
    ));
    device.set_faults(FaultConfig::default());
    assert_eq!(read_vec(&*device, 8192, 4096), pattern);

    let stats = device.stats();
    assert_eq!(
        (
            stats.injected_read_eio,
            stats.injected_bit_flips,
            stats.injected_write_eio,
            stats.injected_lost_writes,
            stats.injected_misdirected_writes
        ),
        (1, 1, 1, 1, 1)
    );
}

#[test]
fn corrupt_backing_flips_one_bit_per_4k() {
    let run = |seed: u64| {
        let (device, backing) = over_mem(DeviceModel::Ram, MIB, untimed(0));
        device.write_at(0, &vec![0x5A; 64 * KIB as usize]).unwrap();
        device.corrupt_backing(4096, 16 * KIB + 100, seed).unwrap();
        read_vec(&*backing, 0, 64 * KIB as usize)
    };
    let damaged = run(7);
    let flips_per_chunk: Vec<u32> = damaged
        .chunks(4096)
        .map(|c| c.iter().map(|&b| (b ^ 0x5A).count_ones()).sum())
        .collect();
    // Chunks 1..=4 are whole 4 KiB pieces of the range, chunk 5 holds its 100-byte tail.
    assert_eq!(&flips_per_chunk[..6], &[0, 1, 1, 1, 1, 1]);
    assert!(flips_per_chunk[6..].iter().all(|&n| n == 0));
    assert_eq!(run(7), damaged, "same seed, same damage");
    assert_ne!(run(8), damaged);
}

#[test]
fn early_destage_picks_random_entries() {
    let mut saw_non_fifo = false;
    for seed in 0..20 {
        let (device, backing) = over_mem(
            DeviceModel::Hdd7200,
            MIB,
            EmuOptions {
                destage_per_write_probability: 0.5,
                ..untimed(seed)
            },
        );
        for i in 0..10u8 {
            device
                .write_at(u64::from(i) * 4096, &[i + 1; 4096])
                .unwrap();
        }
        let stats = device.stats();
        assert_eq!(stats.pending_writes + stats.early_destages, 10);
        device.power_cut(false);
        let landed: Vec<bool> = (0..10)
            .map(|i| read_vec(&*backing, i * 4096, 1)[0] != 0)
            .collect();
        assert_eq!(
            landed.iter().filter(|&&l| l).count() as u64,
            stats.early_destages
        );
        let prefix_len = landed.iter().take_while(|&&l| l).count();
        saw_non_fifo |= landed[prefix_len..].iter().any(|&l| l);
    }
    assert!(saw_non_fifo, "destage order is not FIFO");
}

/// Runs a fixed workload with every kind of randomness enabled; returns what it observed.
fn chaotic_run(seed: u64) -> (Vec<bool>, Vec<u8>) {
    let (device, backing) = over_mem(
        DeviceModel::Hdd7200,
        256 * KIB,
        EmuOptions {
            destage_per_write_probability: 0.3,
            ..untimed(seed)
        },
    );
    device.set_faults(FaultConfig {
        write_eio_probability: 0.1,
        read_bit_flip_probability: 0.2,
        misdirected_write_probability: 0.1,
        lost_write_probability: 0.1,
        ..FaultConfig::default()
    });
    let mut results = Vec::new();
    let mut reads = Vec::new();
    for i in 0..40u64 {
        let offset = (i * 7919) % 60 * 4096;
        results.push(device.write_at(offset, &[i as u8 + 1; 4096]).is_ok());
        if i % 5 == 0 {
            reads.extend(read_vec(&*device, offset, 64));
        }
        if i % 13 == 0 {
            results.push(device.flush().is_ok());
        }
    }
    device.power_cut(true);
    reads.extend(read_vec(&*backing, 0, 256 * KIB as usize));
    (results, reads)
}

#[test]
fn same_seed_same_outcome() {
    let first = chaotic_run(42);
    assert_eq!(chaotic_run(42), first);
    assert_ne!(chaotic_run(43), first);
    assert!(
        first.0.iter().any(|&ok| !ok),
        "some injected errors happened"
    );
}

// ---- Model figures, on a virtual clock ----

fn timed(model: DeviceModel, size_bytes: u64) -> (Arc<EmulatedDevice>, Arc<VirtualClock>) {
    let clock = Arc::new(VirtualClock::new());
    let (device, _) = over_mem(
        model,
        size_bytes,
        EmuOptions {
            clock: Some(clock.clone()),
            ..untimed(0)
        },
    );
    (device, clock)
}

/// Write + flush at queue depth 1; returns commits per second of virtual time.
fn write_flush_iops(
    model: DeviceModel,
    size_bytes: u64,
    offsets: impl Iterator<Item = u64>,
    len: usize,
) -> f64 {
    let (device, clock) = timed(model, size_bytes);
    let data = vec![0xA5u8; len];
    let start = clock.now();
    let mut commits = 0u32;
    for offset in offsets {
        device.write_at(offset, &data).unwrap();
        device.flush().unwrap();
        commits += 1;
    }
    let elapsed = clock.now() - start;
    assert_eq!(
        device.busy_time(),
        elapsed,
        "QD1: the device is busy all the time"
    );
    f64::from(commits) / elapsed.as_secs_f64()
}

fn sequential(count: u64, len: u64) -> impl Iterator<Item = u64> {
    (0..count).map(move |i| i * len)
}

fn random_aligned(count: usize, region_bytes: u64, align: u64, seed: u64) -> Vec<u64> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| rng.random_range(0..region_bytes / align) * align)
        .collect()
}

#[test]
fn hdd_sync_writes_cost_about_one_revolution() {
    let seq = write_flush_iops(DeviceModel::Hdd7200, GIB, sequential(300, 8 * KIB), 8192);
    println!("hdd-7200 8 KiB write+flush QD1, sequential: {seq:.1} IOPS");
    assert!((100.0..=140.0).contains(&seq), "{seq}");

    // Random offsets over a 128 GiB volume (a quarter of the 500 GB platter).
    let offsets = random_aligned(300, 128 * GIB, 8 * KIB, 1);
    let random = write_flush_iops(DeviceModel::Hdd7200, 128 * GIB, offsets.into_iter(), 8192);
    println!("hdd-7200 8 KiB write+flush QD1, random over 128 GiB: {random:.1} IOPS");
    assert!((100.0..=140.0).contains(&random), "{random}");

    // Over the whole platter seeks average ~8 ms: fewer IOPS.
    let offsets = random_aligned(300, 500_000_000_000, 8 * KIB, 2);
    let full = write_flush_iops(
        DeviceModel::Hdd7200,
        500_000_000_000,
        offsets.into_iter(),
        8192,
    );
    println!("hdd-7200 8 KiB write+flush QD1, random over 500 GB: {full:.1} IOPS");
    assert!((60.0..100.0).contains(&full), "{full}");
}

#[test]
fn hdd_random_reads_and_cached_writes() {
    // Random 8 KiB reads in a 10 MiB file (the seeds' iozone run): ~1.4 MB/s.
    let (device, clock) = timed(DeviceModel::Hdd7200, GIB);
    let mut buf = vec![0u8; 8192];
    let start = clock.now();
    let offsets = random_aligned(300, 10 * MIB, 8 * KIB, 3);
    for &offset in &offsets {
        device.read_at(offset, &mut buf).unwrap();
    }
    let read_mb_s = (offsets.len() as f64 * 8192.0) / (clock.now() - start).as_secs_f64() / 1e6;
    println!("hdd-7200 random 8 KiB reads QD1 in 10 MiB: {read_mb_s:.2} MB/s");
    assert!((1.0..=2.0).contains(&read_mb_s), "{read_mb_s}");

    // Writes without flushes are acknowledged from the cache: thousands of IOPS.
    let (device, clock) = timed(DeviceModel::Hdd7200, GIB);
    let start = clock.now();
    for offset in sequential(1000, 8 * KIB) {
        device.write_at(offset, &buf).unwrap();
    }
    let cached_iops = 1000.0 / (clock.now() - start).as_secs_f64();
    println!("hdd-7200 8 KiB writes without flush: {cached_iops:.0} IOPS");
    assert!((5_000.0..=15_000.0).contains(&cached_iops), "{cached_iops}");
}

#[test]
fn hdd_streams_at_media_speed() {
    let (device, clock) = timed(DeviceModel::Hdd7200, GIB);
    let chunk = vec![0x3Cu8; 128 * KIB as usize];
    let total = 64 * MIB;
    let start = clock.now();
    for offset in sequential(total / (128 * KIB), 128 * KIB) {
        device.write_at(offset, &chunk).unwrap();
    }
    device.flush().unwrap();
    let write_mb_s = total as f64 / (clock.now() - start).as_secs_f64() / 1e6;
    println!("hdd-7200 128 KiB sequential writes + final flush: {write_mb_s:.1} MB/s");
    assert!((100.0..=160.0).contains(&write_mb_s), "{write_mb_s}");
    assert!(
        device.stats().overflow_destages > 0,
        "the data cache stays bounded"
    );

    // Sequential reads at QD1 ride the drive's read-ahead.
    let mut buf = vec![0u8; 128 * KIB as usize];
    let start = clock.now();
    for offset in sequential(total / (128 * KIB), 128 * KIB) {
        device.read_at(offset, &mut buf).unwrap();
    }
    let read_mb_s = total as f64 / (clock.now() - start).as_secs_f64() / 1e6;
    println!("hdd-7200 128 KiB sequential reads QD1: {read_mb_s:.1} MB/s");
    assert!((100.0..=160.0).contains(&read_mb_s), "{read_mb_s}");
    assert_eq!(buf, chunk);
}

#[test]
fn flash_and_ram_outrun_the_disk_on_sync_writes() {
    let hdd = write_flush_iops(DeviceModel::Hdd7200, GIB, sequential(200, 8 * KIB), 8192);
    let plp = write_flush_iops(DeviceModel::SsdPlp, GIB, sequential(200, 8 * KIB), 8192);
    let sata = write_flush_iops(DeviceModel::SsdSata, GIB, sequential(200, 8 * KIB), 8192);
    let nvme = write_flush_iops(DeviceModel::Nvme, GIB, sequential(200, 8 * KIB), 8192);
    let ram = write_flush_iops(DeviceModel::Ram, GIB, sequential(200, 8 * KIB), 8192);
    println!(
        "8 KiB write+flush QD1 IOPS: hdd {hdd:.0}, ssd-sata {sata:.0}, ssd-plp {plp:.0}, \
         nvme {nvme:.0}, ram {ram:.0}"
    );
    assert!(plp >= 30.0 * hdd, "ssd-plp {plp} vs hdd {hdd}");
    assert!(ram >= 50.0 * hdd, "ram {ram} vs hdd {hdd}");
    // ~100 us per commit on the log SSD (the seeds' logzilla).
    assert!((8_000.0..=12_000.0).contains(&plp), "{plp}");
    // A SATA SSD without power-loss protection pays ~1.5 ms per flush.
    assert!((500.0..=800.0).contains(&sata), "{sata}");
    // A consumer NVMe drive flushes its DRAM cache in ~200 us: faster than SATA, slower than
    // a power-protected drive that needs no flush.
    assert!(nvme > sata && plp > nvme && ram > plp);
}

#[test]
fn flash_channels_serve_requests_in_parallel() {
    // 8 small reads arriving together on 4 channels: two rounds, not eight.
    let mut ssd = ModelTimer::new(DeviceModel::SsdSata, GIB);
    let done: Vec<Duration> = (0..8)
        .map(|i| {
            ssd.submit(
                Duration::ZERO,
                TimedOp::Read {
                    offset: i * 4096,
                    len: 4096,
                },
            )
        })
        .collect();
    let last = *done.iter().max().unwrap();
    assert!(
        last >= Duration::from_micros(100) && last <= Duration::from_micros(150),
        "{last:?}"
    );
    assert_eq!(ssd.busy_time(), last);

    // The disk has one mechanism: 8 random reads take 8 positionings.
    let mut disk = ModelTimer::new(DeviceModel::Hdd7200, GIB);
    let offsets = random_aligned(8, GIB, 4096, 5);
    let last = offsets
        .iter()
        .map(|&offset| disk.submit(Duration::ZERO, TimedOp::Read { offset, len: 4096 }))
        .max()
        .unwrap();
    assert!(last >= Duration::from_millis(8 * 2), "{last:?}");

    // Large transfers share the link: bandwidth does not multiply with channels.
    let mut nvme = ModelTimer::new(DeviceModel::Nvme, GIB);
    let last = (0..8)
        .map(|i| {
            nvme.submit(
                Duration::ZERO,
                TimedOp::Write {
                    offset: i * MIB,
                    len: MIB,
                },
            )
        })
        .max()
        .unwrap();
    let mb_s = 8.0 * MIB as f64 / last.as_secs_f64() / 1e6;
    assert!((1_800.0..=2_000.0).contains(&mb_s), "{mb_s}");
}

#[test]
fn fua_writes_are_durable_without_a_flush() {
    let (device, backing) = over_mem(DeviceModel::Hdd7200, MIB, untimed(4));
    device.write_at(0, &[0xAA; 4096]).unwrap();
    device
        .write_vectored_at_fua(0, &[&[0xBB; 256], &[0xBC; 256]])
        .unwrap();
    device.write_at(8192, &[0xCC; 4096]).unwrap();
    // The FUA write is on the backing device at once; the cached writes are not.
    let stored = read_vec(&*backing, 0, 12288);
    assert!(stored[..256].iter().all(|&b| b == 0xBB));
    assert!(stored[256..512].iter().all(|&b| b == 0xBC));
    assert!(stored[512..].iter().all(|&b| b == 0));
    // Reads through the device see the newest bytes of every range.
    let seen = read_vec(&*device, 0, 4096);
    assert!(seen[..256].iter().all(|&b| b == 0xBB));
    assert!(seen[512..].iter().all(|&b| b == 0xAA));
    assert_eq!(device.stats().pending_writes, 2);

    device.power_cut(false);
    let after = read_vec(&*backing, 0, 12288);
    assert_eq!(after, stored, "a power cut loses only the cached writes");
}

#[test]
fn a_flush_after_a_fua_write_keeps_the_newer_bytes() {
    let (device, backing) = over_mem(DeviceModel::SsdSata, MIB, untimed(5));
    device.write_at(0, &[0xAA; 4096]).unwrap();
    device
        .write_vectored_at_fua(1024, &[&[0xBB; 1024]])
        .unwrap();
    device.flush().unwrap();
    let stored = read_vec(&*backing, 0, 4096);
    assert!(stored[..1024].iter().all(|&b| b == 0xAA));
    assert!(
        stored[1024..2048].iter().all(|&b| b == 0xBB),
        "older cached bytes must not win"
    );
    assert!(stored[2048..].iter().all(|&b| b == 0xAA));
}

#[test]
fn hdd_fua_writes_queued_back_to_back_stream_behind_each_other() {
    let mut timer = ModelTimer::new(DeviceModel::Hdd7200, GIB);
    let len = 128 * KIB;
    let ms = |ns: u64| Duration::from_nanos(ns);
    let first = timer.submit(ms(0), TimedOp::WriteFua { offset: 0, len });
    // Arrives while the first is still on its way to the platter, right behind it on the track.
    let second = timer.submit(ms(300_000), TimedOp::WriteFua { offset: len, len });
    let behind = second - first;
    println!("second FUA write completes {behind:?} after the first");
    assert!(
        behind < Duration::from_millis(2),
        "queued FUA writes follow each other on the track: {behind:?}"
    );
    // One that arrives after the head has passed its place waits for the platter to come round.
    let late_arrival = second + Duration::from_micros(100);
    let third = timer.submit(
        late_arrival,
        TimedOp::WriteFua {
            offset: 2 * len,
            len,
        },
    );
    let waited = third - late_arrival;
    println!("a FUA write arriving just too late completes after {waited:?}");
    assert!(waited > Duration::from_millis(7), "{waited:?}");
}

#[test]
fn a_fua_write_on_flash_does_not_drain_other_channels() {
    let mut timer = ModelTimer::new(DeviceModel::SsdSata, GIB);
    let big = timer.submit(
        Duration::ZERO,
        TimedOp::Write {
            offset: 0,
            len: 8 * MIB,
        },
    );
    let fua = timer.submit(
        Duration::ZERO,
        TimedOp::WriteFua {
            offset: 64 * MIB,
            len: 4 * KIB,
        },
    );
    let flush = timer.submit(Duration::ZERO, TimedOp::Flush);
    println!("8 MiB write done {big:?}, 4 KiB FUA done {fua:?}, flush done {flush:?}");
    assert!(
        fua < flush,
        "a FUA write does not wait for every channel as a flush does"
    );
}

/// A clock whose `sleep_until` waits until the test opens the gate, so a request can be held
/// in flight (submitted, not returned) for as long as the test needs.
struct GateClock {
    open: parking_lot::Mutex<bool>,
    opened: parking_lot::Condvar,
    sleepers: std::sync::atomic::AtomicUsize,
}

impl GateClock {
    fn new() -> Arc<GateClock> {
        Arc::new(GateClock {
            open: parking_lot::Mutex::new(false),
            opened: parking_lot::Condvar::new(),
            sleepers: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn wait_for_sleepers(&self, n: usize) {
        while self.sleepers.load(std::sync::atomic::Ordering::SeqCst) < n {
            std::thread::yield_now();
        }
    }

    fn open(&self) {
        *self.open.lock() = true;
        self.opened.notify_all();
    }
}

impl Clock for GateClock {
    fn now(&self) -> Duration {
        Duration::ZERO
    }

    fn sleep_until(&self, _deadline: Duration) {
        self.sleepers
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut open = self.open.lock();
        while !*open {
            self.opened.wait(&mut open);
        }
    }
}

/// Counts, per write of `sectors` sectors of `fill` at `offset`, how many sectors hold `fill`;
/// asserts every other sector holds `old` whole.
fn landed_sectors(backing: &dyn Device, offset: u64, sectors: u64, fill: u8, old: u8) -> u64 {
    let data = read_vec(backing, offset, (sectors * SECTOR_BYTES) as usize);
    let mut landed = 0;
    for sector in data.chunks(SECTOR_BYTES as usize) {
        let new = sector.iter().all(|&b| b == fill);
        assert!(
            new || sector.iter().all(|&b| b == old),
            "a sector is never split"
        );
        landed += u64::from(new);
    }
    landed
}

#[test]
fn the_write_that_trips_the_switch_lands_in_part_fua_and_vectored_too() {
    const SECTORS: u64 = 32;
    let mut partial = 0;
    for seed in 0..12u64 {
        for model in [DeviceModel::SsdPlp, DeviceModel::SsdSata, DeviceModel::Nvme] {
            let switch = Arc::new(PowerSwitch::with_seed(seed));
            let (device, backing) = over_mem(
                model,
                MIB,
                EmuOptions {
                    power: Some(switch.clone()),
                    ..untimed(seed)
                },
            );
            device
                .write_at(0, &vec![0x11; (SECTORS * SECTOR_BYTES) as usize])
                .unwrap();
            device.flush().unwrap();
            switch.arm_after_ops(1);
            let half = vec![0x22; (SECTORS * SECTOR_BYTES / 2) as usize];
            let result = if seed % 2 == 0 {
                device.write_vectored_at_fua(0, &[&half, &half])
            } else {
                device.write_vectored_at(0, &[&half, &half])
            };
            assert!(
                matches!(result, Err(DeviceError::PoweredOff { .. })),
                "{model} seed {seed}: {result:?}"
            );
            let report = switch.last_cut().expect("the switch tripped");
            assert_eq!(report.in_flight_writes, 1, "{model}: {report}");
            assert_eq!(
                report.in_flight_sectors_landed + report.in_flight_sectors_lost,
                SECTORS
            );
            let landed = landed_sectors(&*backing, 0, SECTORS, 0x22, 0x11);
            assert_eq!(landed, report.in_flight_sectors_landed, "{model}: {report}");
            if landed > 0 && landed < SECTORS {
                partial += 1;
            }
        }
    }
    assert!(
        partial >= 30,
        "only {partial} of 36 tripping writes landed in part"
    );
}

#[test]
fn a_fua_write_in_flight_at_a_cut_is_torn_and_fails() {
    const SECTORS: u64 = 64;
    let mut partial = 0;
    for seed in 0..8u64 {
        for model in [DeviceModel::SsdPlp, DeviceModel::Hdd7200] {
            let switch = Arc::new(PowerSwitch::with_seed(seed));
            let clock = GateClock::new();
            let backing = Arc::new(MemDevice::new(MIB));
            let device = EmulatedDevice::new(
                backing.clone(),
                model,
                EmuOptions {
                    seed,
                    clock: Some(clock.clone()),
                    destage_per_write_probability: 0.0,
                    power: Some(switch.clone()),
                },
            );
            let writer = {
                let device = device.clone();
                std::thread::spawn(move || {
                    let data = vec![0x33; (SECTORS * SECTOR_BYTES) as usize];
                    device.write_vectored_at_fua(4096, &[&data])
                })
            };
            // The write has reached the backing device and waits for the model to complete it.
            clock.wait_for_sleepers(1);
            assert_eq!(landed_sectors(&*backing, 4096, SECTORS, 0x33, 0), SECTORS);
            switch.cut_now();
            clock.open();
            let result = writer.join().unwrap();
            assert!(
                matches!(result, Err(DeviceError::PoweredOff { .. })),
                "{model} seed {seed}: a write caught in flight never returns Ok: {result:?}"
            );
            let report = switch.last_cut().unwrap();
            assert_eq!(report.in_flight_writes, 1, "{report}");
            let landed = landed_sectors(&*backing, 4096, SECTORS, 0x33, 0);
            assert_eq!(landed, report.in_flight_sectors_landed, "{model}: {report}");
            if landed > 0 && landed < SECTORS {
                partial += 1;
            }
        }
    }
    assert!(
        partial >= 14,
        "only {partial} of 16 writes in flight were torn"
    );
}

#[test]
fn a_write_that_returned_is_not_in_flight() {
    let switch = Arc::new(PowerSwitch::with_seed(1));
    let (device, backing) = over_mem(
        DeviceModel::SsdSata,
        MIB,
        EmuOptions {
            power: Some(switch.clone()),
            ..untimed(1)
        },
    );
    device.write_vectored_at_fua(0, &[&[0x44; 8192]]).unwrap();
    device.write_at(65536, &[0x55; 4096]).unwrap();
    switch.cut_now();
    let report = switch.last_cut().unwrap();
    assert_eq!(report.in_flight_writes, 0, "{report}");
    assert_eq!(report.cached_writes, 1, "{report}");
    assert!(report.caught_unfinished_work());
    assert!(read_vec(&*backing, 0, 8192).iter().all(|&b| b == 0x44));
}

#[test]
fn unflushed_discards_go_through_the_switch_and_can_be_lost() {
    for model in [
        DeviceModel::Hdd7200,
        DeviceModel::SsdSata,
        DeviceModel::Nvme,
    ] {
        let switch = Arc::new(PowerSwitch::with_seed(5));
        let (device, backing) = over_mem(
            model,
            MIB,
            EmuOptions {
                power: Some(switch.clone()),
                ..untimed(5)
            },
        );
        device.write_at(0, &[0x66; 16384]).unwrap();
        device.flush().unwrap(); // ops 1, 2
        device.discard(0, 4096).unwrap(); // op 3
        device.flush().unwrap(); // op 4: this discard is durable
        device.discard(8192, 4096).unwrap(); // op 5: not flushed
        // A write after the discard supersedes it for its range.
        device.write_at(8192, &[0x77; 512]).unwrap(); // op 6
        assert_eq!(switch.ops_seen(), 6, "{model}: discards are counted");
        device.power_cut(false);
        let after = read_vec(&*backing, 0, 16384);
        assert!(
            after[..4096].iter().all(|&b| b == 0),
            "{model}: flushed discard"
        );
        assert!(after[4096..8192].iter().all(|&b| b == 0x66), "{model}");
        assert!(
            after[8192..].iter().all(|&b| b == 0x66),
            "{model}: the unflushed discard and the cached write are lost"
        );
    }
    // Without a volatile cache a discard is durable on return; the one that trips is lost.
    let switch = Arc::new(PowerSwitch::with_seed(6));
    let (device, backing) = over_mem(
        DeviceModel::SsdPlp,
        MIB,
        EmuOptions {
            power: Some(switch.clone()),
            ..untimed(6)
        },
    );
    device.write_at(0, &[0x66; 8192]).unwrap();
    device.discard(0, 4096).unwrap();
    switch.arm_after_ops(1);
    assert!(matches!(
        device.discard(4096, 4096),
        Err(DeviceError::PoweredOff { .. })
    ));
    assert_eq!(switch.last_cut().unwrap().tripped_by, Some(OpKind::Discard));
    let after = read_vec(&*backing, 0, 8192);
    assert!(after[..4096].iter().all(|&b| b == 0));
    assert!(after[4096..].iter().all(|&b| b == 0x66));
}

#[test]
fn torn_cuts_keep_some_unflushed_discards_and_lose_others() {
    let (mut kept, mut lost) = (0, 0);
    for seed in 0..16 {
        let (device, backing) = over_mem(DeviceModel::SsdSata, MIB, untimed(seed));
        device.write_at(0, &vec![0x66; 64 * 4096]).unwrap();
        device.flush().unwrap();
        for i in 0..8 {
            device.discard(i * 8 * 4096, 4096).unwrap();
        }
        device.power_cut(true);
        for i in 0..8 {
            let block = read_vec(&*backing, i * 8 * 4096, 4096);
            if block.iter().all(|&b| b == 0) {
                kept += 1;
            } else {
                assert!(block.iter().all(|&b| b == 0x66));
                lost += 1;
            }
        }
    }
    assert!(kept > 20 && lost > 20, "kept {kept}, lost {lost}");
}
