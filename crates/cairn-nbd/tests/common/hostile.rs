//! Hostile clients shared by the protocol server's test (in-memory export) and the `cairn serve`
//! process test: every way of breaking the protocol the server must survive (wrong magics,
//! unknown flags, truncated headers and payloads, huge lengths, offsets past the end, unknown
//! commands and options, clients vanishing with requests in flight, random bytes), and clients
//! that stall until a server timeout cuts them off. Each case reports what the server did wrong
//! instead of panicking, so a driver can run thousands of them from many threads.

// One hostile client's cases, each a script of bytes read top to bottom: split, it reads worse.
#![allow(clippy::too_many_lines)]

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::{Client, pattern};
use cairn_nbd::proto::*;

/// Number of distinct hostile cases (`hostile`'s `case` argument is below this).
pub const CASES: usize = 16;

/// Where the hostile clients go: a server address and one writable export on it.
pub struct Target<'a> {
    pub addr: SocketAddr,
    pub export: &'a str,
    pub export_size: u64,
}

/// Open file descriptors of process `pid` (`"self"` for this one).
pub fn open_fds(pid: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/PID/fd")
        .count()
}

/// Resident memory of process `pid` (`"self"` for this one), in KiB.
pub fn rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Sends bytes the server may already have stopped reading; errors are expected and ignored.
pub fn blast(c: &mut Client, b: &[u8]) {
    let _ = c.s.write_all(b);
}

pub fn header(flags: u16, kind: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
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
pub fn hostile(target: &Target, i: usize, case: usize) -> Result<(), String> {
    let (vol, vol_size) = (target.export, target.export_size);
    let mut c = Client::connect(target.addr);
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
            c.go(vol, false, false);
            let mut h = header(0, CMD_READ, 1, 0, 512);
            h[3] ^= 0x55;
            blast(&mut c, &h);
            expect_eof(&mut c, "bad request magic")
        }
        // Truncated request header, then vanish.
        9 => {
            c.go(vol, i.is_multiple_of(2), false);
            blast(&mut c, &header(0, CMD_WRITE, 1, 0, 512)[..(i % 27) + 1]);
            Ok(())
        }
        // Huge read: EOVERFLOW, then vanish without DISC.
        10 => {
            c.go(vol, i.is_multiple_of(2), false);
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
            c.go(vol, false, false);
            let mut b = header(0, CMD_WRITE, 1, 0, 0xffff_ff00);
            b.extend_from_slice(&[0x5a; 65536]);
            blast(&mut c, &b);
            Ok(())
        }
        // Offsets past the end, misalignment, unknown commands: errors, connection survives.
        12 => {
            c.go(vol, i % 2 == 1, false);
            let checks = [
                (c.read(vol_size, 512).err(), EINVAL),
                (c.read(u64::MAX - 511, 512).err(), EINVAL),
                (c.read(1, 512).err(), EINVAL),
                (Some(c.write(u64::MAX - 100, &[1u8; 512], 0)), ENOSPC),
                (Some(c.cmd(0x55 + (i as u16 % 100), 0, 0, 512, &[])), EINVAL),
                (Some(c.cmd(CMD_TRIM, 0, vol_size - 512, 4096, &[])), EINVAL),
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
            c.go(vol, true, false);
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
            c.go(vol, false, false);
            let mut b = header(CMD_FLAG_FUA, CMD_WRITE, 1, 1 << 20, 65536);
            b.extend_from_slice(&[0x77; 30000]);
            blast(&mut c, &b);
            Ok(())
        }
        _ => unreachable!(),
    }
}

/// A client that stalls (`k % 3`: silent after connecting, half a request header, a write with
/// part of its payload); the server must cut it off by its handshake or I/O timeout.
pub fn stalled(target: &Target, k: usize) -> Result<(), String> {
    let mut c = Client::connect(target.addr);
    c.set_timeout(Duration::from_secs(5));
    match k % 3 {
        0 => {}
        1 => {
            c.go(target.export, false, false);
            blast(&mut c, &header(0, CMD_READ, 1, 0, 512)[..13]);
        }
        _ => {
            c.go(target.export, false, false);
            let mut b = header(0, CMD_WRITE, 1, 0, 8192);
            b.extend_from_slice(&[1u8; 1000]);
            blast(&mut c, &b);
        }
    }
    if c.closed_by_server() {
        Ok(())
    } else {
        Err(format!("stalled client {k} was not cut off"))
    }
}

/// Runs `connections` hostile connections (cases in rotation) from `threads` client threads,
/// then `stalled_clients` stalling ones at once. Returns every misbehaviour seen; panics if a
/// case ran too rarely to count.
pub fn run_hostile(
    target: &Target,
    connections: usize,
    threads: usize,
    stalled_clients: usize,
) -> Vec<String> {
    let failures = Mutex::new(Vec::<String>::new());
    let next = AtomicUsize::new(0);
    let per_case: Vec<AtomicUsize> = (0..CASES).map(|_| AtomicUsize::new(0)).collect();
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= connections {
                        break;
                    }
                    let case = i % CASES;
                    per_case[case].fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = hostile(target, i, case) {
                        failures.lock().unwrap().push(e);
                    }
                }
            });
        }
    });
    for (case, n) in per_case.iter().enumerate() {
        assert!(
            n.load(Ordering::Relaxed) >= connections / CASES,
            "case {case} ran too rarely"
        );
    }
    std::thread::scope(|s| {
        for k in 0..stalled_clients {
            let failures = &failures;
            s.spawn(move || {
                if let Err(e) = stalled(target, k) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    failures.into_inner().unwrap()
}
