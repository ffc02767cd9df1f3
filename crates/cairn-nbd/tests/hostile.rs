//! Hostile clients: 10,000 connections that break the protocol in every way the server must
//! survive (wrong magics, unknown flags, truncated headers and payloads, huge lengths, offsets
//! past the end, unknown commands and options, clients vanishing with requests in flight,
//! random bytes), plus clients that stall until the server's timeouts cut them off. Afterwards
//! a well-behaved client must still be served, nothing may have panicked, and the process's open
//! file descriptors and resident memory must be back near where they started.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use cairn_nbd::ServerConfig;
use cairn_nbd::proto::*;
use common::hostile::{Target, open_fds, rss_kib, run_hostile};
use common::*;

const VOL: &str = "tank/vol";
const VOL_SIZE: u64 = 64 << 20;
const CONNECTIONS: usize = 10_000;
const THREADS: usize = 16;
const STALLED: usize = 60;

static PANICS: AtomicUsize = AtomicUsize::new(0);

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
    let fds_before = open_fds("self");
    let rss_before = rss_kib("self");
    let started = Instant::now();

    // 10,000 hostile connections from 16 client threads, then stalling clients, each cut off
    // by a server timeout (1 s here).
    let target = Target {
        addr,
        export: VOL,
        export_size: VOL_SIZE,
    };
    let failures = run_hostile(&target, CONNECTIONS, THREADS, STALLED);
    let elapsed = started.elapsed();

    assert!(
        failures.is_empty(),
        "{} misbehaviours, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Every connection is gone, and with it every descriptor and buffer.
    assert!(
        t.wait_no_connections(Duration::from_secs(10)),
        "{} connections left",
        t.server.connections()
    );
    let fds_after = open_fds("self");
    let rss_after = rss_kib("self");
    let counters = t.server.counters();
    eprintln!(
        "hostile: {CONNECTIONS} connections and {STALLED} stalled in {elapsed:?}; \
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
    assert!(counters.accepted >= (CONNECTIONS + STALLED + 1) as u64);
    assert_eq!(counters.refused, 0);
    assert!(
        counters.handshake_failures >= 3 * (CONNECTIONS / common::hostile::CASES) as u64,
        "{counters:?}"
    );
    assert!(
        counters.protocol_errors >= 2 * (CONNECTIONS / common::hostile::CASES) as u64,
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
