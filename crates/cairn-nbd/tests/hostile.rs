//! Hostile clients: 10,000 connections that break the protocol in every way the server must
//! survive (wrong magics, unknown flags, truncated headers and payloads, huge lengths, offsets
//! past the end, unknown commands and options, clients vanishing with requests in flight,
//! random bytes), plus clients that stall until the server's timeouts cut them off. Afterwards
//! a well-behaved client must still be served, nothing may have panicked, and the process's open
//! file descriptors and resident memory must be back near where they started.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cairn_nbd::ServerConfig;
use cairn_nbd::proto::*;
use common::*;

const VOL: &str = "tank/vol";
const VOL_SIZE: u64 = 64 << 20;
const CONNECTIONS: usize = 10_000;
const THREADS: usize = 16;
const CASES: usize = 16;

static PANICS: AtomicUsize = AtomicUsize::new(0);

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Sends bytes the server may already have stopped reading; errors are expected and ignored.
fn blast(c: &mut Client, b: &[u8]) {
    let _ = c.s.write_all(b);
}

fn header(flags: u16, kind: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    Request {
        flags,
        kind,
        cookie,
        offset,
        length,
    }
    .encode()
    .to_vec()
}

/// Runs hostile case `case` (seeded by `i`). Returns an error description when the server did
/// something other than what the protocol requires.
fn hostile(addr: std::net::SocketAddr, i: usize, case: usize) -> Result<(), String> {
    let mut c = Client::connect(addr);
    c.set_timeout(Duration::from_secs(5));
    let expect_eof = |c: &mut Client, what: &str| {
        if c.closed_by_server() {
            Ok(())
        } else {
            Err(format!("case {case}: {what}: not closed"))
        }
    };
    match case {
        // Connect and vanish.
        0 => Ok(()),
        // Unknown client flags.
        1 => {
            c.greeting();
            blast(&mut c, &0xdead_0000u32.to_be_bytes());
            expect_eof(&mut c, "unknown client flags")
        }
        // Garbage where IHAVEOPT belongs.
        2 => {
            c.start();
            blast(&mut c, &pattern(i as u64, 24));
            expect_eof(&mut c, "bad option magic")
        }
        // Truncated option header, then vanish.
        3 => {
            c.start();
            blast(&mut c, &IHAVEOPT.to_be_bytes()[..6]);
            Ok(())
        }
        // Option announcing ~4 GiB of data, a little of it, then vanish.
        4 => {
            c.start();
            let mut b = IHAVEOPT.to_be_bytes().to_vec();
            b.extend_from_slice(&OPT_GO.to_be_bytes());
            b.extend_from_slice(&0xffff_fff0u32.to_be_bytes());
            b.extend_from_slice(&[0x41; 1000]);
            blast(&mut c, &b);
            Ok(())
        }
        // Unknown option: must be answered UNSUP, then vanish.
        5 => {
            c.start();
            let r = c.option(1000 + (i as u32 % 50), b"junk");
            if r.len() == 1 && r[0].kind == REP_ERR_UNSUP {
                Ok(())
            } else {
                Err(format!("case 5: unknown option answered {r:?}"))
            }
        }
        // GO for an unknown export.
        6 => {
            c.start();
            let r = c.option(OPT_GO, &Client::info_data("no/such", &[]));
            if r.last().map(|r| r.kind) == Some(REP_ERR_UNKNOWN) {
                Ok(())
            } else {
                Err(format!("case 6: {r:?}"))
            }
        }
        // EXPORT_NAME for an unknown export: the server must hang up.
        7 => {
            c.start();
            blast(&mut c, &{
                let mut b = IHAVEOPT.to_be_bytes().to_vec();
                b.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
                b.extend_from_slice(&7u32.to_be_bytes());
                b.extend_from_slice(b"no/such");
                b
            });
            expect_eof(&mut c, "unknown EXPORT_NAME")
        }
        // Wrong request magic.
        8 => {
            c.go(VOL, false, false);
            let mut h = header(0, CMD_READ, 1, 0, 512);
            h[3] ^= 0x55;
            blast(&mut c, &h);
            expect_eof(&mut c, "bad request magic")
        }
        // Truncated request header, then vanish.
        9 => {
            c.go(VOL, i.is_multiple_of(2), false);
            blast(&mut c, &header(0, CMD_WRITE, 1, 0, 512)[..(i % 27) + 1]);
            Ok(())
        }
        // Huge read: EOVERFLOW, then vanish without DISC.
        10 => {
            c.go(VOL, i.is_multiple_of(2), false);
            match c.read(0, u32::MAX - (i as u32 % 512)) {
                Err(EOVERFLOW) => Ok(()),
                other => Err(format!(
                    "case 10: huge read answered {:?}",
                    other.map(|v| v.len())
                )),
            }
        }
        // Huge write header, part of the payload, vanish.
        11 => {
            c.go(VOL, false, false);
            let mut b = header(0, CMD_WRITE, 1, 0, 0xffff_ff00);
            b.extend_from_slice(&[0x5a; 65536]);
            blast(&mut c, &b);
            Ok(())
        }
        // Offsets past the end, misalignment, unknown commands: errors, connection survives.
        12 => {
            c.go(VOL, i % 2 == 1, false);
            let checks = [
                (c.read(VOL_SIZE, 512).err(), EINVAL),
                (c.read(u64::MAX - 511, 512).err(), EINVAL),
                (c.read(1, 512).err(), EINVAL),
                (Some(c.write(u64::MAX - 100, &[1u8; 512], 0)), ENOSPC),
                (Some(c.cmd(0x55 + (i as u16 % 100), 0, 0, 512, &[])), EINVAL),
                (Some(c.cmd(CMD_TRIM, 0, VOL_SIZE - 512, 4096, &[])), EINVAL),
            ];
            for (n, (got, want)) in checks.iter().enumerate() {
                if *got != Some(*want) {
                    return Err(format!("case 12 check {n}: got {got:?}, want {want}"));
                }
            }
            Ok(())
        }
        // Requests in flight, client vanishes without reading replies.
        13 => {
            c.go(VOL, true, false);
            let mut b = Vec::new();
            for k in 0..16u64 {
                b.extend_from_slice(&header(0, CMD_READ, k, k * 65536, 65536));
            }
            blast(&mut c, &b);
            Ok(())
        }
        // Random bytes instead of client flags and options.
        14 => {
            c.greeting();
            let len = 1 + (i * 7919) % 300;
            blast(&mut c, &pattern(i as u64 * 31 + 7, len));
            let _ = c.s.shutdown(std::net::Shutdown::Write);
            // Either closed, or (if the bytes happened to parse) waiting: both are fine, as
            // long as the server neither crashes nor keeps the connection after we leave.
            let mut sink = [0u8; 4096];
            c.set_timeout(Duration::from_millis(200));
            while let Ok(n) = c.s.read(&mut sink) {
                if n == 0 {
                    break;
                }
            }
            Ok(())
        }
        // A valid write whose payload is cut short, then vanish.
        15 => {
            c.go(VOL, false, false);
            let mut b = header(CMD_FLAG_FUA, CMD_WRITE, 1, 1 << 20, 65536);
            b.extend_from_slice(&[0x77; 30000]);
            blast(&mut c, &b);
            Ok(())
        }
        _ => unreachable!(),
    }
}

#[test]
fn ten_thousand_hostile_connections() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        default_hook(info);
    }));

    let config = ServerConfig {
        handshake_timeout: Duration::from_secs(1),
        io_timeout: Duration::from_secs(1),
        ..ServerConfig::default()
    };
    let t = TestServer::start(standard_provider(), config);
    let addr = t.addr;

    // Warm up (runtime threads, blocking pool, allocator arenas), then take the baseline.
    {
        let mut c = t.connect();
        c.go(VOL, true, true);
        assert_eq!(c.write(0, &pattern(9, 1 << 20), 0), 0);
        assert_eq!(c.read(0, 1 << 20).unwrap(), pattern(9, 1 << 20));
        c.disconnect();
    }
    assert!(t.wait_no_connections(Duration::from_secs(5)));
    let fds_before = open_fds();
    let rss_before = rss_kib();
    let started = Instant::now();

    // 10,000 hostile connections from 16 client threads.
    let failures = std::sync::Mutex::new(Vec::<String>::new());
    let next = AtomicUsize::new(0);
    let per_case: Vec<AtomicU64> = (0..CASES).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= CONNECTIONS {
                        break;
                    }
                    let case = i % CASES;
                    per_case[case].fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = hostile(addr, i, case) {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    let hostile_elapsed = started.elapsed();

    // Stalling clients: each is cut off by a server timeout (1 s here).
    let stalled_started = Instant::now();
    std::thread::scope(|s| {
        for k in 0..60usize {
            let failures = &failures;
            s.spawn(move || {
                let mut c = Client::connect(addr);
                c.set_timeout(Duration::from_secs(5));
                match k % 3 {
                    // Silent after connecting: handshake timeout.
                    0 => {}
                    // Half a request header: io timeout.
                    1 => {
                        c.go(VOL, false, false);
                        blast(&mut c, &header(0, CMD_READ, 1, 0, 512)[..13]);
                    }
                    // A write header and part of its payload: io timeout.
                    _ => {
                        c.go(VOL, false, false);
                        let mut b = header(0, CMD_WRITE, 1, 0, 8192);
                        b.extend_from_slice(&[1u8; 1000]);
                        blast(&mut c, &b);
                    }
                }
                if !c.closed_by_server() {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("stalled client {k} was not cut off"));
                }
            });
        }
    });
    let stalled_elapsed = stalled_started.elapsed();

    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} misbehaviours, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    for (case, n) in per_case.iter().enumerate() {
        assert!(
            n.load(Ordering::Relaxed) >= (CONNECTIONS / CASES) as u64,
            "case {case} ran too rarely"
        );
    }

    // Every connection is gone, and with it every descriptor and buffer.
    assert!(
        t.wait_no_connections(Duration::from_secs(10)),
        "{} connections left",
        t.server.connections()
    );
    let fds_after = open_fds();
    let rss_after = rss_kib();
    let counters = t.server.counters();
    eprintln!(
        "hostile: {CONNECTIONS} connections in {hostile_elapsed:?}, 60 stalled in {stalled_elapsed:?}; \
         fds {fds_before} -> {fds_after}; RSS {rss_before} KiB -> {rss_after} KiB \
         (+{} KiB); counters {counters:?}",
        rss_after.saturating_sub(rss_before)
    );
    assert!(
        fds_after <= fds_before + 4,
        "file descriptors leaked: {fds_before} before, {fds_after} after"
    );
    assert!(
        rss_after < rss_before + 64 * 1024,
        "resident memory grew from {rss_before} KiB to {rss_after} KiB"
    );
    assert!(counters.accepted >= (CONNECTIONS + 61) as u64);
    assert_eq!(counters.refused, 0);
    assert!(
        counters.handshake_failures >= 3 * (CONNECTIONS / CASES) as u64,
        "{counters:?}"
    );
    assert!(
        counters.protocol_errors >= 2 * (CONNECTIONS / CASES) as u64,
        "{counters:?}"
    );
    // No refused write reached the export: the huge and truncated writes left no data there.
    let e = t.export(VOL);
    assert_eq!(
        e.contents(1 << 20, 65536),
        vec![0u8; 65536],
        "a truncated write was applied"
    );

    // A well-behaved client is still served, correctly.
    let mut c = t.connect();
    let n = c.go(VOL, true, true);
    assert_eq!(n.size, VOL_SIZE);
    let data = pattern(77, 512 * 1024);
    assert_eq!(c.write(4 << 20, &data, CMD_FLAG_FUA), 0);
    assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(c.read(4 << 20, data.len() as u32).unwrap(), data);
    let (_, ext) = c.block_status(4 << 20, 1 << 20, 0).unwrap();
    assert_eq!(ext, vec![(512 * 1024, 0), (512 * 1024, 3)]);
    c.disconnect();

    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "something panicked");
    t.stop();
}
