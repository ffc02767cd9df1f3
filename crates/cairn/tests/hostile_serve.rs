//! Hostile clients against the real `cairn serve` process (the protocol server's own test runs
//! the same cases against an in-memory export): 10,000 connections that break the protocol,
//! then clients that stall until the server's timeouts (set to 1 s here) cut them off. The
//! server must answer what the protocol requires, keep serving a well-behaved client, never
//! panic, apply none of the refused or truncated writes, and end with the file descriptors and
//! resident memory it had before (measured from /proc of the server process). Afterwards the
//! pool stops cleanly and `pool check` finds it intact.

mod nbd_common;
#[path = "../../cairn-nbd/tests/common/mod.rs"]
mod wire;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cairn_nbd::proto::*;
use nbd_common::{Env, heavy};
use wire::hostile::{CASES, Target, open_fds, rss_kib, run_hostile};
use wire::{Client, pattern};

const VOL: &str = "tank/vol";
const VOL_SIZE: u64 = 64 << 20;
const CONNECTIONS: usize = 10_000;
const THREADS: usize = 16;
const STALLED: usize = 60;

/// Waits until the server holds at most `fds` descriptors (connections are closed
/// asynchronously after the client side is gone); returns the last count seen.
fn settle_fds(pid: &str, fds: usize, limit: Duration) -> usize {
    let deadline = Instant::now() + limit;
    loop {
        let now = open_fds(pid);
        if now <= fds || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn serve_survives_ten_thousand_hostile_connections() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("1G");
    env.create_volume(VOL, "64M", &[]);
    let mut server =
        env.serve_with_args(&["--handshake-timeout-ms", "1000", "--io-timeout-ms", "1000"]);
    let addr: SocketAddr = format!("127.0.0.1:{}", server.port).parse().unwrap();
    let pid = server.pid().to_string();

    // Warm up (runtime threads, blocking pool, allocator arenas, pool caches), then take the
    // baseline.
    for round in 0..3u64 {
        let mut c = Client::connect(addr);
        c.go(VOL, true, true);
        let data = pattern(9 + round, 1 << 20);
        assert_eq!(c.write(0, &data, CMD_FLAG_FUA), 0);
        assert_eq!(c.read(0, 1 << 20).unwrap(), data);
        c.disconnect();
    }
    std::thread::sleep(Duration::from_millis(500));
    let fds_before = open_fds(&pid);
    let rss_before = rss_kib(&pid);
    let started = Instant::now();

    let target = Target {
        addr,
        export: VOL,
        export_size: VOL_SIZE,
    };
    let failures = run_hostile(&target, CONNECTIONS, THREADS, STALLED);
    let elapsed = started.elapsed();
    assert!(
        failures.is_empty(),
        "{} misbehaviours, first: {:?}\n{}",
        failures.len(),
        &failures[..failures.len().min(5)],
        server.logs()
    );
    assert!(server.running(), "the server died\n{}", server.logs());

    // Every connection is gone, and with it every descriptor and buffer.
    let fds_after = settle_fds(&pid, fds_before, Duration::from_secs(10));
    let rss_after = rss_kib(&pid);
    eprintln!(
        "hostile (cairn serve): {CONNECTIONS} connections ({CASES} kinds) and {STALLED} stalled \
         in {elapsed:?}; fds {fds_before} -> {fds_after}; RSS {rss_before} KiB -> {rss_after} KiB"
    );
    assert!(
        fds_after <= fds_before,
        "file descriptors leaked: {fds_before} before, {fds_after} after"
    );
    assert!(
        rss_after < rss_before + 64 * 1024,
        "resident memory grew from {rss_before} KiB to {rss_after} KiB"
    );

    // A well-behaved client is still served, correctly; none of the refused, huge or cut-short
    // writes reached the volume (the region they aimed at was never written).
    let mut c = Client::connect(addr);
    let n = c.go(VOL, true, true);
    assert_eq!(n.size, VOL_SIZE);
    assert_eq!(
        c.read(1 << 20, 65536).unwrap(),
        vec![0u8; 65536],
        "a truncated write was applied"
    );
    let data = pattern(77, 512 * 1024);
    assert_eq!(c.write(4 << 20, &data, CMD_FLAG_FUA), 0);
    assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(c.read(4 << 20, data.len() as u32).unwrap(), data);
    assert_eq!(c.read(0, 1 << 20).unwrap(), pattern(11, 1 << 20));
    c.disconnect();

    server.terminate();
    let logs = server.logs();
    assert!(!logs.contains("panicked"), "the server panicked:\n{logs}");
    env.assert_pool_check_clean();
}
