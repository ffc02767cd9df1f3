//! Protocol tests with the raw-bytes client: handshake, every option and command, every error
//! path, concurrency and flush ordering, shutdown, statistics, Unix socket binding.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use cairn_nbd::proto::*;
use cairn_nbd::{NbdServer, ServerConfig};
use common::*;

const VOL: &str = "tank/vol";
const VOL_SIZE: u64 = 64 << 20;

#[test]
fn greeting_go_and_info_replies() {
    let t = TestServer::standard();
    let mut c = t.connect();
    let (a, b, flags) = c.greeting();
    assert_eq!(a, NBDMAGIC);
    assert_eq!(b, IHAVEOPT);
    assert_eq!(flags, FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    c.send(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();

    // INFO does not end the handshake.
    let replies = c.option(
        OPT_INFO,
        &Client::info_data(VOL, &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE]),
    );
    let (n, last) = Client::parse_info(&replies);
    assert_eq!(last, REP_ACK);
    assert_eq!(n.size, VOL_SIZE);
    let want = FLAG_HAS_FLAGS
        | FLAG_SEND_FLUSH
        | FLAG_SEND_FUA
        | FLAG_SEND_TRIM
        | FLAG_SEND_WRITE_ZEROES
        | FLAG_SEND_FAST_ZERO
        | FLAG_SEND_CACHE
        | FLAG_CAN_MULTI_CONN;
    assert_eq!(n.flags, want, "flags {:#x}", n.flags);
    assert_eq!(n.block, Some((512, 4096, 32 << 20)));
    assert_eq!(n.name.as_deref(), Some(VOL));
    assert_eq!(n.description.as_deref(), Some("test volume"));

    // Structured replies add DF; GO enters transmission.
    assert_eq!(c.option(OPT_STRUCTURED_REPLY, &[])[0].kind, REP_ACK);
    c.structured = true;
    let replies = c.option(OPT_GO, &Client::info_data("tank/ro", &[]));
    let (n, last) = Client::parse_info(&replies);
    assert_eq!(last, REP_ACK);
    assert_eq!(n.size, 8 << 20);
    assert_ne!(n.flags & FLAG_READ_ONLY, 0);
    assert_ne!(n.flags & FLAG_SEND_DF, 0);
    // BLOCK_SIZE is sent even unasked (constraints are enforced); NAME only when asked.
    assert!(n.block.is_some());
    assert!(n.name.is_none());
    assert_eq!(c.read(0, 4096).unwrap(), vec![0u8; 4096]);
    c.disconnect();
    t.stop();
}

#[test]
fn export_name_option_with_and_without_zeroes() {
    let t = TestServer::standard();
    t.export(VOL).fill(0, b"hello");
    for no_zeroes in [true, false] {
        let mut c = t.connect();
        c.greeting();
        let cf = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        c.send(&cf.to_be_bytes()).unwrap();
        c.send_option(OPT_EXPORT_NAME, VOL.as_bytes()).unwrap();
        let size = u64::from_be_bytes(c.recv(8).unwrap().try_into().unwrap());
        let flags = u16::from_be_bytes(c.recv(2).unwrap().try_into().unwrap());
        assert_eq!(size, VOL_SIZE);
        assert_ne!(flags & FLAG_HAS_FLAGS, 0);
        if !no_zeroes {
            assert_eq!(c.recv(124).unwrap(), vec![0u8; 124]);
        }
        // The next bytes are transmission replies, not padding.
        assert_eq!(&c.read(0, 512).unwrap()[..5], b"hello");
        c.disconnect();
    }
    // Unknown export with EXPORT_NAME: the server can only hang up.
    let mut c = t.connect();
    c.start();
    c.send_option(OPT_EXPORT_NAME, b"tank/nope").unwrap();
    assert!(c.closed_by_server());
    t.stop();
}

#[test]
fn default_export_is_the_only_one() {
    let provider = MemProvider::default().add("only/one", MemExport::new(1 << 20));
    let t = TestServer::start(provider, ServerConfig::default());
    let mut c = t.connect();
    let n = c.go("", false, false);
    assert_eq!(n.size, 1 << 20);
    assert_eq!(n.name.as_deref(), Some("only/one"));
    c.disconnect();
    // With several exports the empty name is unknown.
    let t2 = TestServer::standard();
    let mut c = t2.connect();
    c.start();
    let r = c.option(OPT_GO, &Client::info_data("", &[]));
    assert_eq!(r.last().unwrap().kind, REP_ERR_UNKNOWN);
    t.stop();
    t2.stop();
}

#[test]
fn list_unknown_options_and_bad_option_data() {
    let t = TestServer::standard();
    let mut c = t.connect();
    c.start();

    let r = c.option(OPT_LIST, &[]);
    assert_eq!(r.last().unwrap().kind, REP_ACK);
    let mut names = Vec::new();
    for rep in &r[..r.len() - 1] {
        assert_eq!(rep.kind, REP_SERVER);
        let len = u32::from_be_bytes(rep.data[0..4].try_into().unwrap()) as usize;
        let name = String::from_utf8(rep.data[4..4 + len].to_vec()).unwrap();
        let desc = String::from_utf8(rep.data[4 + len..].to_vec()).unwrap();
        names.push((name, desc));
    }
    assert_eq!(
        names,
        vec![
            ("tank/ro".to_owned(), String::new()),
            ("tank/slow".to_owned(), String::new()),
            ("tank/vol".to_owned(), "test volume".to_owned()),
        ]
    );

    // Unknown options (and STARTTLS, which this server does not do) → UNSUP; haggling goes on.
    for opt in [999u32, OPT_STARTTLS, 4, 11, 0xffff_ffff] {
        let r = c.option(opt, b"some data");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].kind, REP_ERR_UNSUP, "option {opt}");
    }
    // LIST / STRUCTURED_REPLY with data → INVALID.
    assert_eq!(c.option(OPT_LIST, b"x")[0].kind, REP_ERR_INVALID);
    assert_eq!(
        c.option(OPT_STRUCTURED_REPLY, b"x")[0].kind,
        REP_ERR_INVALID
    );
    // Malformed INFO/GO payloads → INVALID.
    for bad in [
        vec![],
        vec![0, 0, 0, 200, b'a'],
        {
            let mut d = Client::info_data(VOL, &[INFO_NAME]);
            d.pop();
            d
        },
        {
            let mut d = Client::info_data(VOL, &[]);
            d.push(7);
            d
        },
        Client::info_data("bad\0name", &[]),
    ] {
        assert_eq!(
            c.option(OPT_GO, &bad).last().unwrap().kind,
            REP_ERR_INVALID,
            "{bad:?}"
        );
    }
    // Unknown export → UNKNOWN, and no INFO before it.
    let r = c.option(OPT_INFO, &Client::info_data("tank/missing", &[]));
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].kind, REP_ERR_UNKNOWN);
    // Option data over 64 KiB: discarded and refused, stream stays in sync.
    let r = c.option(OPT_INFO, &vec![0u8; 100_000]);
    assert_eq!(r[0].kind, REP_ERR_TOO_BIG);
    // Still negotiating fine.
    let r = c.option(OPT_GO, &Client::info_data(VOL, &[]));
    assert_eq!(r.last().unwrap().kind, REP_ACK);
    c.disconnect();

    // ABORT is acknowledged, then the server closes.
    let mut c = t.connect();
    c.start();
    assert_eq!(c.option(OPT_ABORT, &[])[0].kind, REP_ACK);
    assert!(c.closed_by_server());
    t.stop();
}

#[test]
fn meta_contexts() {
    let t = TestServer::standard();
    let mut c = t.connect();
    c.start();
    // LIST with no query: every context; with "base:": the base namespace; unknown ns ignored.
    for queries in [
        &[][..],
        &["base:"][..],
        &["base:allocation", "x-other:thing"][..],
    ] {
        let r = c.option(OPT_LIST_META_CONTEXT, &Client::meta_data(VOL, queries));
        assert_eq!(r.len(), 2, "{queries:?}");
        assert_eq!(r[0].kind, REP_META_CONTEXT);
        assert_eq!(&r[0].data[4..], b"base:allocation");
        assert_eq!(r[1].kind, REP_ACK);
    }
    let r = c.option(
        OPT_LIST_META_CONTEXT,
        &Client::meta_data(VOL, &["x-other:thing"]),
    );
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].kind, REP_ACK);
    let r = c.option(OPT_LIST_META_CONTEXT, &Client::meta_data("tank/none", &[]));
    assert_eq!(r[0].kind, REP_ERR_UNKNOWN);
    let r = c.option(OPT_LIST_META_CONTEXT, &Client::meta_data(VOL, &["nocolon"]));
    assert_eq!(r[0].kind, REP_ERR_INVALID);
    // SET before STRUCTURED_REPLY is invalid.
    let r = c.option(
        OPT_SET_META_CONTEXT,
        &Client::meta_data(VOL, &["base:allocation"]),
    );
    assert_eq!(r[0].kind, REP_ERR_INVALID);
    // Truncated query list.
    let mut bad = Client::meta_data(VOL, &["base:allocation"]);
    bad.truncate(bad.len() - 3);
    assert_eq!(
        c.option(OPT_LIST_META_CONTEXT, &bad)[0].kind,
        REP_ERR_INVALID
    );
    c.disconnect_handshake();

    // SET for one export, GO to another: no context, so BLOCK_STATUS is EINVAL.
    let mut c = t.connect();
    c.start();
    assert_eq!(c.option(OPT_STRUCTURED_REPLY, &[])[0].kind, REP_ACK);
    c.structured = true;
    let r = c.option(
        OPT_SET_META_CONTEXT,
        &Client::meta_data("tank/ro", &["base:allocation"]),
    );
    assert_eq!(r[0].kind, REP_META_CONTEXT);
    let r = c.option(OPT_GO, &Client::info_data(VOL, &[]));
    assert_eq!(r.last().unwrap().kind, REP_ACK);
    assert_eq!(c.block_status(0, 4096, 0).unwrap_err(), EINVAL);
    c.disconnect();
    t.stop();
}

impl Client {
    /// Ends a handshake politely.
    fn disconnect_handshake(mut self) {
        assert_eq!(self.option(OPT_ABORT, &[])[0].kind, REP_ACK);
        assert!(self.closed_by_server());
    }
}

#[test]
fn read_write_simple_and_structured() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    let data = pattern(1, 256 * 1024);
    for structured in [false, true] {
        let mut c = t.connect();
        let n = c.go(VOL, structured, false);
        assert_eq!(n.size, VOL_SIZE);
        let off = if structured { 8 << 20 } else { 1 << 20 };
        assert_eq!(c.write(off, &data, 0), 0);
        assert_eq!(e.contents(off, data.len()), data);
        let r = c.read_full(off, data.len() as u32, 0).unwrap();
        assert_eq!(r.data, data);
        if structured {
            assert_eq!(r.data_chunks, 1);
            // An all-zero range comes back as a hole chunk; DF is accepted.
            let r = c.read_full(32 << 20, 65536, CMD_FLAG_DF).unwrap();
            assert_eq!(r.data, vec![0u8; 65536]);
            assert_eq!((r.holes, r.data_chunks), (1, 0));
        }
        // Zero-length read and write succeed and change nothing.
        assert_eq!(c.read(0, 0).unwrap(), Vec::<u8>::new());
        assert_eq!(c.write(0, &[], 0), 0);
        // Last sector of the export.
        assert_eq!(c.write(VOL_SIZE - 512, &[7u8; 512], 0), 0);
        assert_eq!(c.read(VOL_SIZE - 512, 512).unwrap(), vec![7u8; 512]);
        // The same reads when the export cannot serve them at once (a cache miss).
        let served_now = e.reads_now.load(Ordering::SeqCst);
        assert!(served_now > 0, "no read was served from memory");
        e.serve_reads_now.store(false, Ordering::SeqCst);
        assert_eq!(c.read_full(off, data.len() as u32, 0).unwrap().data, data);
        assert_eq!(c.read(VOL_SIZE - 512, 512).unwrap(), vec![7u8; 512]);
        assert_eq!(e.reads_now.load(Ordering::SeqCst), served_now);
        e.serve_reads_now.store(true, Ordering::SeqCst);
        c.disconnect();
    }
    t.stop();
}

#[test]
fn flush_fua_trim_zeroes_cache() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    let mut c = t.connect();
    c.go(VOL, true, true);
    let blk = pattern(2, 65536);
    assert_eq!(c.write(0, &blk, CMD_FLAG_FUA), 0);
    assert_eq!(e.fua_ops.load(Ordering::SeqCst), 1);
    let before = e.flushes.load(Ordering::SeqCst);
    assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(e.flushes.load(Ordering::SeqCst), before + 1);

    // TRIM punches whole chunks.
    assert_eq!(c.cmd(CMD_TRIM, 0, 0, 16384, &[]), 0);
    assert!(!e.is_allocated(0));
    assert!(e.is_allocated(16384));
    // WRITE_ZEROES without NO_HOLE may punch; with NO_HOLE keeps allocation.
    assert_eq!(c.cmd(CMD_WRITE_ZEROES, 0, 16384, 16384, &[]), 0);
    assert!(!e.is_allocated(16384));
    assert_eq!(
        c.cmd(
            CMD_WRITE_ZEROES,
            CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
            32768,
            16384,
            &[]
        ),
        0
    );
    assert!(e.is_allocated(32768));
    assert_eq!(e.contents(0, 65536)[..49152], vec![0u8; 49152][..]);
    assert_eq!(e.contents(49152, 16384), blk[49152..]);
    // FAST_ZERO: fine here, refused with NO_HOLE (not fast), refused on a slow-zero export.
    assert_eq!(
        c.cmd(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 1 << 20, 1 << 20, &[]),
        0
    );
    assert_eq!(
        c.cmd(
            CMD_WRITE_ZEROES,
            CMD_FLAG_FAST_ZERO | CMD_FLAG_NO_HOLE,
            0,
            4096,
            &[]
        ),
        ENOTSUP
    );
    // CACHE is accepted.
    assert_eq!(c.cmd(CMD_CACHE, 0, 0, 1 << 20, &[]), 0);
    // FUA on a read is accepted (the protocol says it must be).
    assert_eq!(
        c.read_full(49152, 4096, CMD_FLAG_FUA).unwrap().data,
        blk[49152..53248]
    );

    // Block status: hole+zero, then data.
    let (id, ext) = c.block_status(0, 65536, 0).unwrap();
    assert_eq!(id, 1);
    assert_eq!(ext, vec![(32768, NBD_STATE_HOLE_ZERO), (32768, 0)]);
    // REQ_ONE: exactly one extent, no longer than asked.
    let (_, ext) = c.block_status(0, 8192, CMD_FLAG_REQ_ONE).unwrap();
    assert_eq!(ext, vec![(8192, NBD_STATE_HOLE_ZERO)]);
    // A request ending at the export end.
    let (_, ext) = c.block_status(VOL_SIZE - 4096, 4096, 0).unwrap();
    assert_eq!(ext, vec![(4096, NBD_STATE_HOLE_ZERO)]);
    c.disconnect();

    let mut c = t.connect();
    c.go("tank/slow", true, false);
    let slow = t.export("tank/slow");
    slow.fill(0, &[1u8; 4096]);
    assert_eq!(
        c.cmd(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 65536, &[]),
        ENOTSUP
    );
    assert_eq!(
        slow.contents(0, 4096),
        vec![1u8; 4096],
        "a refused fast zero changed data"
    );
    assert_eq!(c.cmd(CMD_WRITE_ZEROES, 0, 0, 65536, &[]), 0);
    assert_eq!(slow.contents(0, 4096), vec![0u8; 4096]);
    c.disconnect();
    t.stop();
}

const NBD_STATE_HOLE_ZERO: u32 = 3;

#[test]
fn bad_requests_get_errors_and_the_connection_survives() {
    let config = ServerConfig {
        max_request_bytes: 1 << 20,
        ..ServerConfig::default()
    };
    let t = TestServer::start(standard_provider(), config);
    for structured in [false, true] {
        let mut c = t.connect();
        let n = c.go(VOL, structured, false);
        assert_eq!(n.block, Some((512, 4096, 1 << 20)));
        // Past the end.
        assert_eq!(c.read(VOL_SIZE, 512).unwrap_err(), EINVAL);
        assert_eq!(c.read(VOL_SIZE - 512, 1024).unwrap_err(), EINVAL);
        assert_eq!(c.read(u64::MAX - 511, 512).unwrap_err(), EINVAL);
        assert_eq!(c.write(VOL_SIZE, &[1u8; 512], 0), ENOSPC);
        assert_eq!(
            c.cmd(CMD_WRITE_ZEROES, 0, VOL_SIZE - 512, 1024, &[]),
            ENOSPC
        );
        assert_eq!(c.cmd(CMD_TRIM, 0, VOL_SIZE, 512, &[]), EINVAL);
        assert_eq!(c.cmd(CMD_CACHE, 0, VOL_SIZE, 512, &[]), EINVAL);
        // Misaligned.
        assert_eq!(c.read(100, 512).unwrap_err(), EINVAL);
        assert_eq!(c.read(0, 100).unwrap_err(), EINVAL);
        assert_eq!(c.write(512, &[1u8; 100], 0), EINVAL);
        // Trim and zeroing accept any byte range (qemu sends sub-512 leftovers of unaligned
        // discards and only tolerates ENOTSUP for them).
        assert_eq!(c.cmd(CMD_TRIM, 0, 1, 512, &[]), 0);
        assert_eq!(c.cmd(CMD_WRITE_ZEROES, 0, 3, 272, &[]), 0);
        // Too large: reads EOVERFLOW; a write's payload is read and discarded, then EINVAL.
        assert_eq!(c.read(0, (1 << 20) + 512).unwrap_err(), EOVERFLOW);
        assert_eq!(c.read(0, u32::MAX).unwrap_err(), EOVERFLOW);
        let big = vec![0xAAu8; (2 << 20) + 512];
        assert_eq!(c.write(0, &big, 0), EINVAL);
        assert!(
            !t.export(VOL).is_allocated(0),
            "refused write reached the export"
        );
        // Unknown command and flags; block status without a context.
        assert_eq!(c.cmd(99, 0, 0, 512, &[]), EINVAL);
        assert_eq!(c.cmd(CMD_FLUSH, 0x8000, 0, 0, &[]), EINVAL);
        assert_eq!(c.cmd(CMD_TRIM, CMD_FLAG_NO_HOLE, 0, 512, &[]), EINVAL);
        assert_eq!(
            c.cmd(CMD_WRITE_ZEROES, CMD_FLAG_REQ_ONE, 0, 512, &[]),
            EINVAL
        );
        if !structured {
            // DF is only valid once structured replies are negotiated.
            assert_eq!(c.read_full(0, 512, CMD_FLAG_DF).unwrap_err(), EINVAL);
        }
        assert_eq!(c.block_status(0, 512, 0).unwrap_err(), EINVAL);
        // After all that, the connection still works.
        assert_eq!(c.write(4096, &[9u8; 4096], 0), 0);
        assert_eq!(c.read(4096, 4096).unwrap(), vec![9u8; 4096]);
        c.disconnect();
    }
    // Read-only export: writes, trims and zeroes → EPERM; reads fine.
    let mut c = t.connect();
    c.go("tank/ro", true, false);
    assert_eq!(c.write(0, &[1u8; 512], 0), EPERM);
    assert_eq!(c.cmd(CMD_TRIM, 0, 0, 512, &[]), EPERM);
    assert_eq!(c.cmd(CMD_WRITE_ZEROES, 0, 0, 512, &[]), EPERM);
    assert_eq!(c.read(0, 512).unwrap(), vec![0u8; 512]);
    assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    c.disconnect();

    let stats = t.server.stats();
    let vol = &stats.iter().find(|(n, _)| n == VOL).unwrap().1;
    assert!(vol.read.errors >= 12, "{:?}", vol.read.errors);
    assert_eq!(vol.invalid_requests, 2);
    t.stop();
}

#[test]
fn protocol_violations_close_only_that_connection() {
    let t = TestServer::standard();
    let mut good = t.connect();
    good.go(VOL, true, false);

    // Wrong request magic.
    let mut c = t.connect();
    c.go(VOL, false, false);
    let mut hdr = Request {
        flags: 0,
        kind: CMD_READ,
        cookie: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    hdr[0] = 0x12;
    c.send(&hdr).unwrap();
    assert!(c.closed_by_server());

    // Wrong IHAVEOPT.
    let mut c = t.connect();
    c.start();
    c.send(b"IHAVEOPX\0\0\0\x01\0\0\0\0").unwrap();
    assert!(c.closed_by_server());

    // Unknown client flags.
    let mut c = t.connect();
    c.greeting();
    c.send(&0x8000_0001u32.to_be_bytes()).unwrap();
    assert!(c.closed_by_server());

    // Truncated request header, then the client half-closes.
    let mut c = t.connect();
    c.go(VOL, false, false);
    c.send(&hdr[..10]).unwrap();
    c.s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(c.closed_by_server());

    // Truncated write payload.
    let mut c = t.connect();
    c.go(VOL, false, false);
    let w = Request {
        flags: 0,
        kind: CMD_WRITE,
        cookie: 1,
        offset: 0,
        length: 4096,
    }
    .encode();
    c.send(&w).unwrap();
    c.send(&[1u8; 100]).unwrap();
    c.s.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(c.closed_by_server());
    assert!(!t.export(VOL).is_allocated(0));

    assert!(t.server.counters().protocol_errors >= 3);
    assert!(t.server.counters().handshake_failures >= 2);
    // The well-behaved client never noticed.
    assert_eq!(good.write(0, &[5u8; 512], 0), 0);
    assert_eq!(good.read(0, 512).unwrap(), vec![5u8; 512]);
    good.disconnect();
    t.stop();
}

#[test]
fn replies_come_back_as_they_complete() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    *e.read_delay.lock() = Some((1 << 20, Duration::from_secs(1)));
    let mut c = t.connect();
    c.go(VOL, true, false);
    // Slow read first, then 20 fast ones: the fast ones are answered before the slow one.
    c.request(0, CMD_READ, 1000, 1 << 20, 4096, &[]);
    for i in 0..20u64 {
        c.request(0, CMD_READ, 2000 + i, i * 4096, 4096, &[]);
    }
    let mut order = Vec::new();
    while order.len() < 21 {
        let m = c.msg().unwrap();
        assert!(m.done());
        order.push(m.cookie());
    }
    assert_eq!(
        *order.last().unwrap(),
        1000,
        "slow read was not answered last: {order:?}"
    );
    let mut rest: Vec<_> = order[..20].to_vec();
    rest.sort();
    assert_eq!(rest, (2000..2020).collect::<Vec<_>>());
    c.disconnect();
    t.stop();
}

#[test]
fn flush_waits_for_writes_in_flight() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    *e.write_delay.lock() = Duration::from_millis(300);
    let mut c = t.connect();
    c.go(VOL, false, false);
    // Four slow writes then a flush, pipelined without waiting for replies.
    let data = vec![3u8; 4096];
    for i in 0..4u64 {
        c.request(0, CMD_WRITE, 10 + i, i * 4096, 4096, &data);
    }
    c.request(0, CMD_FLUSH, 99, 0, 0, &[]);
    let mut order = Vec::new();
    for _ in 0..5 {
        let m = c.msg().unwrap();
        assert!(matches!(m, Msg::Simple { error: 0, .. }), "{m:?}");
        order.push(m.cookie());
    }
    assert_eq!(order[4], 99, "flush answered before the writes: {order:?}");
    // The export saw all four writes completed when flush was called.
    assert_eq!(*e.flush_saw.lock(), vec![4]);
    c.disconnect();
    t.stop();
}

/// Plain writes the export takes at once are answered by the reader, and a client that sends a
/// FLUSH after each write gets its commits started ahead of the FLUSH: every flush, ahead or
/// asked for, comes after the write it covers, and a client whose writes stop pairing with
/// FLUSHes gets no more commits ahead.
#[test]
fn writes_served_now_and_flush_ahead_of_paired_flushes() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    let mut c = t.connect();
    c.go(VOL, true, false);
    const PAIRS: u64 = 8;
    for i in 0..PAIRS {
        assert_eq!(c.write(i * 4096, &pattern(i, 4096), 0), 0);
        assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
        // Every flush the export saw so far came after the writes answered before it.
        assert!(e.flush_saw.lock().iter().all(|&seen| seen >= 1));
        assert_eq!(*e.flush_saw.lock().last().unwrap(), i + 1);
    }
    assert_eq!(e.writes_now.load(Ordering::SeqCst), PAIRS);
    for i in 0..PAIRS {
        assert_eq!(c.read(i * 4096, 4096).unwrap(), pattern(i, 4096));
    }
    // Four pairs make the habit; the writes after that got a commit ahead of their FLUSH.
    let flushes = e.flushes.load(Ordering::SeqCst);
    assert_eq!(flushes, PAIRS + (PAIRS - 4), "flushes {flushes}");
    let saw = e.flush_saw.lock().clone();
    assert!(saw.windows(2).all(|w| w[0] <= w[1]), "{saw:?}");
    // Two writes without a FLUSH: the first still gets a commit ahead (the habit's one wrong
    // guess), the second breaks the habit, and the next pairs get none until it has been seen
    // four times again.
    assert_eq!(c.write(0, &[1u8; 4096], 0), 0);
    assert_eq!(c.write(4096, &[2u8; 4096], 0), 0);
    assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(e.flushes.load(Ordering::SeqCst), flushes + 2);
    for i in 0..4 {
        assert_eq!(c.write(i * 4096, &[3u8; 4096], 0), 0);
        assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    }
    assert_eq!(e.flushes.load(Ordering::SeqCst), flushes + 6);
    // A write the export cannot take at once goes the ordinary way.
    e.serve_writes_now.store(false, Ordering::SeqCst);
    let now = e.writes_now.load(Ordering::SeqCst);
    assert_eq!(c.write(8192, &[4u8; 4096], 0), 0);
    assert_eq!(e.writes_now.load(Ordering::SeqCst), now);
    assert_eq!(c.read(8192, 4096).unwrap(), vec![4u8; 4096]);
    c.disconnect();
    t.stop();
}

#[test]
fn multi_conn_flush_and_visibility() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    let mut a = t.connect();
    let mut b = t.connect();
    a.go(VOL, true, false);
    let n = b.go(VOL, false, false);
    assert_ne!(n.flags & FLAG_CAN_MULTI_CONN, 0);
    assert_eq!(a.write(1 << 20, &[0x42; 8192], 0), 0);
    let before = e.flushes.load(Ordering::SeqCst);
    assert_eq!(b.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(e.flushes.load(Ordering::SeqCst), before + 1);
    assert_eq!(*e.flush_saw.lock().last().unwrap(), 1);
    assert_eq!(b.read(1 << 20, 8192).unwrap(), vec![0x42; 8192]);
    a.disconnect();
    b.disconnect();
    t.stop();
}

#[test]
fn export_panic_becomes_eio() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    *e.panic_at.lock() = Some(1 << 20);
    let mut c = t.connect();
    c.go(VOL, true, false);
    assert_eq!(c.read(1 << 20, 4096).unwrap_err(), EIO);
    assert_eq!(c.read(0, 4096).unwrap(), vec![0u8; 4096]);
    c.disconnect();
    t.stop();
}

#[test]
fn shutdown_answers_requests_already_read() {
    let t = TestServer::standard();
    let e = t.export(VOL);
    *e.write_delay.lock() = Duration::from_millis(500);
    let mut c = t.connect();
    c.go(VOL, false, false);
    // An idle connection in the handshake is closed by shutdown too.
    let mut idle = t.connect();
    idle.start();
    c.request(0, CMD_WRITE, 7, 0, 4096, &[8u8; 4096]);
    // Shut down while the write is inside the export.
    let deadline = Instant::now() + Duration::from_secs(5);
    while e.writes_started.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the write never reached the export"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    t.server.shutdown();
    let m = c.msg().unwrap();
    assert_eq!(m.cookie(), 7);
    assert!(matches!(m, Msg::Simple { error: 0, .. }));
    assert!(c.closed_by_server());
    assert!(idle.closed_by_server());
    assert_eq!(e.contents(0, 4096), vec![8u8; 4096]);
    // New connections are refused (the listener is gone or the connection closed at once).
    let started = Instant::now();
    t.stop();
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn handshake_timeout_and_connection_limit() {
    let config = ServerConfig {
        handshake_timeout: Duration::from_secs(1),
        max_connections: 2,
        ..ServerConfig::default()
    };
    let t = TestServer::start(standard_provider(), config);
    let mut a = t.connect();
    a.go(VOL, false, false);
    let mut b = t.connect();
    b.start();
    // Third connection: over the limit, closed at once without a greeting.
    let mut c = t.connect();
    assert!(c.closed_by_server());
    assert_eq!(t.server.counters().refused, 1);
    // `b` never finishes its handshake: closed after the timeout.
    let started = Instant::now();
    assert!(b.closed_by_server());
    assert!(started.elapsed() < Duration::from_secs(3));
    // A connection in transmission has no idle deadline.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(a.read(0, 512).unwrap(), vec![0u8; 512]);
    assert!(t.wait_no_connections_except(1));
    a.disconnect();
    t.stop();
}

impl TestServer {
    fn wait_no_connections_except(&self, n: usize) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.server.connections() == n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

#[test]
fn stats_count_operations_bytes_and_latency() {
    let t = TestServer::standard();
    let mut c = t.connect();
    c.go(VOL, true, true);
    let snap0 = t.server.stats();
    for i in 0..10u64 {
        assert_eq!(c.write(i * 65536, &[1u8; 65536], 0), 0);
    }
    for i in 0..5u64 {
        c.read(i * 4096, 4096).unwrap();
    }
    assert_eq!(c.cmd(CMD_FLUSH, 0, 0, 0, &[]), 0);
    assert_eq!(c.cmd(CMD_TRIM, 0, 0, 65536, &[]), 0);
    assert_eq!(c.cmd(CMD_WRITE_ZEROES, 0, 0, 65536, &[]), 0);
    c.block_status(0, 65536, 0).unwrap();
    assert_eq!(c.read(VOL_SIZE, 512).unwrap_err(), EINVAL);
    let snap = t.server.stats();
    let (name, s) = &snap.iter().find(|(n, _)| n == VOL).unwrap();
    assert_eq!(name, VOL);
    assert_eq!(
        (s.write.ops, s.write.bytes, s.write.errors),
        (10, 655_360, 0)
    );
    assert_eq!((s.read.ops, s.read.bytes, s.read.errors), (6, 20_480, 1));
    assert_eq!(
        (
            s.flush.ops,
            s.trim.ops,
            s.write_zeroes.ops,
            s.block_status.ops
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(s.trim.bytes, 65536);
    assert_eq!(s.write.latency_us.len(), 10);
    assert!(s.write.mean_latency_us() > 0.0);
    assert_eq!(s.connections, 1);
    assert_eq!(s.errors(), 1);
    // Interval diff against the earlier snapshot.
    let s0 = &snap0.iter().find(|(n, _)| n == VOL).unwrap().1;
    let d = s.since(s0);
    assert_eq!(d.write.ops, 10);
    assert_eq!(d.connections, 0);
    c.disconnect();
    t.stop();
}

#[test]
fn bind_unix_mode_stale_socket_and_refusals() {
    use std::os::unix::fs::PermissionsExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sock");
    rt.block_on(async {
        let l = cairn_nbd::bind_unix(&path, 0o600).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Live socket: refused.
        let err = cairn_nbd::bind_unix(&path, 0o600).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        drop(l);
        // Stale socket file (listener gone): replaced.
        assert!(path.exists());
        let _l2 = cairn_nbd::bind_unix(&path, 0o640).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        // A regular file is never removed.
        let file = dir.path().join("file");
        std::fs::write(&file, b"keep").unwrap();
        let err = cairn_nbd::bind_unix(&file, 0o600).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        // No staging directories left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with(".nbd")), "{names:?}");
    });
}

#[test]
fn unix_socket_serves_the_same_protocol() {
    use std::io::{Read, Write};
    let t = TestServer::standard();
    let mut s = std::os::unix::net::UnixStream::connect(&t.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    assert_eq!(&g[0..8], b"NBDMAGIC");
    s.write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
        .unwrap();
    let mut opt = IHAVEOPT.to_be_bytes().to_vec();
    opt.extend_from_slice(&OPT_ABORT.to_be_bytes());
    opt.extend_from_slice(&0u32.to_be_bytes());
    s.write_all(&opt).unwrap();
    let mut rep = [0u8; 20];
    s.read_exact(&mut rep).unwrap();
    assert_eq!(u32::from_be_bytes(rep[12..16].try_into().unwrap()), REP_ACK);
    t.stop();
}

#[test]
fn serve_stream_and_wait_idle() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let provider = std::sync::Arc::new(standard_provider());
        let server = NbdServer::new(provider, ServerConfig::default());
        let (client, srv) = tokio::io::duplex(1 << 16);
        let (r, w) = tokio::io::split(srv);
        server.serve_stream(r, w);
        assert_eq!(server.connections(), 1);
        let (mut cr, mut cw) = tokio::io::split(client);
        let mut g = [0u8; 18];
        cr.read_exact(&mut g).await.unwrap();
        assert_eq!(&g[8..16], b"IHAVEOPT");
        cw.write_all(&1u32.to_be_bytes()).await.unwrap();
        drop(cw);
        drop(cr);
        tokio::time::timeout(Duration::from_secs(5), server.wait_idle())
            .await
            .unwrap();
        assert_eq!(server.connections(), 0);
    });
}

/// Sends `count` pipelined writes of `len` bytes on `c` from another thread (the server may
/// stop reading, which blocks the sender, not the reply reader) and returns once every reply
/// came back, with the most writes the export had in progress at once meanwhile.
fn pipelined_writes(t: &TestServer, clients: Vec<Client>, count: u64, len: u32) -> u64 {
    let e = t.export(VOL);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (e, done) = (e.clone(), done.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(Ordering::SeqCst) {
                let started = e.writes_started.load(Ordering::SeqCst);
                let completed = e.writes_completed.load(Ordering::SeqCst);
                most = most.max(started.saturating_sub(completed));
                std::thread::sleep(Duration::from_millis(2));
            }
            most
        })
    };
    let mut readers = Vec::new();
    for (n, mut c) in clients.into_iter().enumerate() {
        let mut stream = c.s.try_clone().expect("clone the stream");
        let sender = std::thread::spawn(move || {
            use std::io::Write;
            let payload = vec![n as u8 + 1; len as usize];
            for i in 0..count {
                let req = Request {
                    flags: 0,
                    kind: CMD_WRITE,
                    cookie: 100 + i,
                    offset: i * u64::from(len),
                    length: len,
                };
                stream.write_all(&req.encode()).expect("send a header");
                stream.write_all(&payload).expect("send a payload");
            }
        });
        readers.push(std::thread::spawn(move || {
            for _ in 0..count {
                let m = c.msg().expect("a reply");
                assert!(matches!(m, Msg::Simple { error: 0, .. }), "{m:?}");
            }
            sender.join().expect("sender");
            c.disconnect();
        }));
    }
    for reader in readers {
        reader.join().expect("reader");
    }
    done.store(true, Ordering::SeqCst);
    sampler.join().expect("sampler")
}

#[test]
fn a_connection_out_of_buffer_allowance_is_not_read() {
    // One request's worth of buffers per connection: while a slow write is in progress the
    // next one stays in the socket, however many the client pipelines.
    let config = ServerConfig {
        max_request_bytes: 1 << 20,
        max_inflight_bytes: 1 << 20,
        ..ServerConfig::default()
    };
    let t = TestServer::start(standard_provider(), config);
    *t.export(VOL).write_delay.lock() = Duration::from_millis(50);
    let mut c = t.connect();
    c.set_timeout(Duration::from_secs(30));
    c.go(VOL, false, false);
    let most = pipelined_writes(&t, vec![c], 8, 1 << 20);
    assert_eq!(most, 1, "writes in progress at once on one connection");
    assert_eq!(t.export(VOL).writes_completed.load(Ordering::SeqCst), 8);
    t.stop();
}

#[test]
fn connections_share_the_server_wide_allowance_without_deadlock() {
    // Two connections, each allowed two requests, the server one in all; and an allowance
    // smaller than one request is raised to it, so every request still proceeds alone.
    let config = ServerConfig {
        max_request_bytes: 1 << 20,
        max_inflight_bytes: 2 << 20,
        max_total_inflight_bytes: 4096,
        ..ServerConfig::default()
    };
    let t = TestServer::start(standard_provider(), config);
    assert_eq!(t.server.config().max_total_inflight_bytes, 1 << 20);
    *t.export(VOL).write_delay.lock() = Duration::from_millis(30);
    let clients: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = t.connect();
            c.set_timeout(Duration::from_secs(30));
            c.go(VOL, false, false);
            c
        })
        .collect();
    let most = pipelined_writes(&t, clients, 6, 1 << 20);
    assert_eq!(most, 1, "writes in progress at once over both connections");
    assert_eq!(t.export(VOL).writes_completed.load(Ordering::SeqCst), 12);
    assert_eq!(t.server.inflight_bytes(), 0, "every buffer was given back");
    t.stop();
}
