//! End-to-end tests of `cairn serve` with stock NBD clients (issue 3's acceptance): a real
//! server process on a private pool in a temporary directory, driven by qemu-img, qemu-io,
//! nbdinfo, nbdcopy and fio exactly as a user would. Each test checks the data or the reported
//! properties, not only exit codes.
//!
//! The clients come from Debian packages (qemu-utils, libnbd-bin, fio); a missing one fails the
//! test naming its package. The tests that move the most data take the `heavy()` lock so the
//! two shared cores are not oversubscribed.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::time::Duration;

/// qemu-img: a random image converted into the export and back out is the same, byte for byte;
/// `qemu-img compare` agrees, and notices a byte changed through NBD.
#[test]
fn qemu_img_convert_in_and_out() {
    let _heavy = heavy();
    let qemu_img = qemu_img();
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &[]);
    let server = env.serve();
    let uri = server.uri("tank/vol");

    let source = env.path("source.img");
    random_file(&source, 64 * MIB, 1);
    run(
        &qemu_img,
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            path_str(&source),
            &uri,
        ],
    )
    .ok();
    let copy = env.path("copy.img");
    run(
        &qemu_img,
        &["convert", "-f", "raw", "-O", "raw", &uri, path_str(&copy)],
    )
    .ok();
    assert_same_content(&source, &copy);

    let same = run(
        &qemu_img,
        &["compare", "-f", "raw", "-F", "raw", path_str(&source), &uri],
    )
    .ok();
    assert!(
        same.stdout.contains("Images are identical"),
        "{}",
        same.describe()
    );

    // One byte changed through NBD: compare must see it (so it really read the export).
    let offset = 40 * MIB + 12345;
    let byte = std::fs::read(&source).unwrap()[offset as usize];
    let changed = format!("write -P {:#04x} {offset} 1", byte ^ 0xff);
    qemu_io_ok(&uri, &[changed.as_str(), "flush"]);
    let differs = run(
        &qemu_img,
        &["compare", "-f", "raw", "-F", "raw", path_str(&source), &uri],
    );
    assert_eq!(differs.status.code(), Some(1), "{}", differs.describe());
    // qemu-img names the start of the 512-byte sector holding the first difference.
    let reported: u64 = differs
        .stdout
        .split("Content mismatch at offset ")
        .nth(1)
        .and_then(|rest| rest.split('!').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no mismatch offset:\n{}", differs.describe()));
    assert_eq!(reported, offset / 512 * 512, "{}", differs.describe());
}

/// qemu-io: patterned writes and verified reads (a wrong pattern is caught), flush, discard and
/// write-zeroes reading back zeros, FUA writes, an unaligned write that leaves its neighbours
/// alone; everything still there from a new connection.
#[test]
fn qemu_io_patterns_discard_zero_unaligned() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &["volblocksize=8K"]);
    let server = env.serve();
    let uri = server.uri("tank/vol");

    qemu_io_ok(
        &uri,
        &[
            "write -P 0xab 0 1M",
            "read -P 0xab 0 1M",
            "flush",
            // Unaligned (neither offset nor length a multiple of 512 or of the 8K block).
            "write -P 0x11 12345 7000",
            "read -P 0x11 12345 7000",
            "read -P 0xab 0 12345",
            "read -P 0xab 19345 1029231",
            // Discard: whole blocks become holes, reading zeros.
            "write -P 0xcd 1M 1M",
            "read -P 0xcd 1M 1M",
            "discard 1M 1M",
            "read -P 0 1M 1M",
            // Write zeroes over data.
            "write -P 0xef 2M 1M",
            "write -z 2M 1M",
            "read -P 0 2M 1M",
            // A write with FUA.
            "write -f -P 0x5a 3M 256k",
            "read -P 0x5a 3M 256k",
            // Discard of partial volume blocks (sector-aligned: the advertised minimum block
            // size is 512): the partial blocks are zeroed, the rest untouched.
            "write -P 0x77 4M 64k",
            "discard 4195840 10240",
            "read -P 0x77 4M 1536",
            "read -P 0 4195840 10240",
            "read -P 0x77 4206080 53760",
            // Unaligned write-zeroes (qemu pads it to sectors).
            "write -z 4220000 3000",
            "read -P 0 4220000 3000",
            "read -P 0x77 4223000 36840",
            "flush",
        ],
    );

    // A wrong pattern must be caught (so the verified reads above mean something).
    let wrong = qemu_io_run(&uri, &["read -P 0xcd 0 1M"]);
    assert!(
        !wrong.success() && wrong.stdout.contains("Pattern verification failed"),
        "reading 0xab data as 0xcd must fail:\n{}",
        wrong.describe()
    );
    let wrong = qemu_io_run(&uri, &["read -P 0xab 1M 4096"]);
    assert!(
        !wrong.success(),
        "discarded data must not read back:\n{}",
        wrong.describe()
    );

    // A new connection (and a new qemu-io) sees everything.
    qemu_io_ok(
        &uri,
        &[
            "read -P 0xab 0 12345",
            "read -P 0x11 12345 7000",
            "read -P 0xab 19345 1029231",
            "read -P 0 1M 2M",
            "read -P 0x5a 3M 256k",
            "read -P 0 3407872 786432",
            "read -P 0x77 4M 1536",
            "read -P 0 4195840 10240",
            "read -P 0x77 4206080 13920",
            "read -P 0 4220000 3000",
            "read -P 0x77 4223000 36840",
            "read -P 0 4259840 62849024",
        ],
    );
}

/// nbdinfo: the exports are listed (over the socket and over TCP) with the right size and
/// flags, the preferred block size is the volblocksize, and the allocation map shows data where
/// it was written and holes elsewhere.
#[test]
fn nbdinfo_list_flags_and_map() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &["volblocksize=8K"]);
    env.create_volume("tank/big", "96M", &[]);
    let server = env.serve();
    assert_eq!(server.announced, 2, "{}", server.stdout());
    let mut announced = server.announced_exports();
    announced.sort();
    assert_eq!(announced, ["tank/big", "tank/vol"], "{}", server.stdout());

    let listed = nbdinfo_list(&server.list_uri());
    assert_eq!(
        listed.keys().collect::<Vec<_>>(),
        ["tank/big", "tank/vol"],
        "{listed:?}"
    );
    let over_tcp = nbdinfo_list(&format!("nbd://127.0.0.1:{}", server.port));
    assert_eq!(
        over_tcp.keys().collect::<Vec<_>>(),
        ["tank/big", "tank/vol"],
        "{over_tcp:?}"
    );
    assert_eq!(listed["tank/big"].number("export-size"), 96 * MIB);
    assert_eq!(listed["tank/vol"].number("export-size"), 64 * MIB);

    let info = nbdinfo_json(&server.uri("tank/vol"));
    assert_eq!(info.number("export-size"), 64 * MIB, "{info:?}");
    assert!(!info.flag("is_read_only"), "{info:?}");
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_fast_zero",
        "can_multi_conn",
    ] {
        assert!(info.flag(flag), "{flag} must be true: {info:?}");
    }
    let contexts = info.get("contexts").and_then(|c| c.as_array()).cloned();
    assert!(
        contexts
            .unwrap_or_default()
            .iter()
            .any(|c| c.as_str() == Some("base:allocation")),
        "base:allocation negotiated: {info:?}"
    );
    let preferred = info.number("block_size_preferred");
    let minimum = info.number("block_size_minimum");
    let maximum = info.number("block_size_maximum");
    assert_eq!(preferred, 8192, "preferred = volblocksize: {info:?}");
    assert!(
        minimum.is_power_of_two() && minimum <= 4096 && preferred.is_multiple_of(minimum),
        "{info:?}"
    );
    assert!(maximum >= preferred && maximum >= MIB, "{info:?}");
    let big = nbdinfo_json(&server.tcp_uri("tank/big"));
    assert_eq!(big.number("export-size"), 96 * MIB, "{big:?}");
    assert_eq!(
        big.number("block_size_preferred"),
        16384,
        "default volblocksize: {big:?}"
    );

    // Allocation map.
    let uri = server.uri("tank/vol");
    const HOLE: u32 = 3; // hole|zero
    const DATA: u32 = 0;
    let ext = |offset: u64, length: u64, kind: u32| Extent {
        offset,
        length,
        kind,
    };
    assert_eq!(
        nbdinfo_map(&uri),
        [ext(0, 64 * MIB, HOLE)],
        "a new volume is all hole"
    );
    qemu_io_ok(
        &uri,
        &[
            "write -P 1 0 64k",
            "write -P 2 8M 16k",
            "write -P 3 67100672 8k", // the last block
            "flush",
        ],
    );
    let map = nbdinfo_map(&uri);
    assert_eq!(
        map,
        [
            ext(0, 64 << 10, DATA),
            ext(64 << 10, 8 * MIB - (64 << 10), HOLE),
            ext(8 * MIB, 16 << 10, DATA),
            ext(
                8 * MIB + (16 << 10),
                64 * MIB - 8192 - 8 * MIB - (16 << 10),
                HOLE
            ),
            ext(64 * MIB - 8192, 8192, DATA),
        ],
        "data where written, holes elsewhere"
    );
    // Discarded and zeroed blocks become holes again.
    qemu_io_ok(&uri, &["discard 8M 16k", "write -z 0 32k", "flush"]);
    let map = nbdinfo_map(&uri);
    assert_eq!(
        map,
        [
            ext(0, 32 << 10, HOLE),
            ext(32 << 10, 32 << 10, DATA),
            ext(64 << 10, 64 * MIB - 8192 - (64 << 10), HOLE),
            ext(64 * MIB - 8192, 8192, DATA),
        ],
        "discard and write-zeroes leave holes"
    );
    qemu_io_ok(
        &uri,
        &["read -P 0 0 32k", "read -P 1 32k 32k", "read -P 0 8M 16k"],
    );
}

/// nbdcopy: a 256 MiB random image copied into the export and back out has the same sha256.
#[test]
fn nbdcopy_256m_in_and_out() {
    let _heavy = heavy();
    let nbdcopy = nbdcopy();
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "256M", &[]);
    let server = env.serve();
    let uri = server.uri("tank/vol");

    let source = env.path("source.img");
    random_file(&source, 256 * MIB, 4);
    let limit = Duration::from_secs(180);
    run_limited(
        std::process::Command::new(&nbdcopy).args([path_str(&source), &uri]),
        limit,
    )
    .ok();
    let out = env.path("out.img");
    run_limited(
        std::process::Command::new(&nbdcopy).args([&uri, path_str(&out)]),
        limit,
    )
    .ok();
    let (expected, actual) = (sha256(&source), sha256(&out));
    if expected != actual {
        assert_same_content(&source, &out);
    }
    assert_eq!(expected, actual, "sha256 of the copy");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 256 * MIB);
}

/// fio over its nbd engine: two connections of random 8 KiB writes at queue depth 32, each block
/// verified by crc32c on the read-back pass (bench/fio/nbd-verify.fio).
#[test]
fn fio_verify_over_the_nbd_engine() {
    let _heavy = heavy();
    let fio = fio();
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &["volblocksize=8K"]);
    let server = env.serve();

    let job =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/fio/nbd-verify.fio");
    assert!(job.exists(), "{} is missing", job.display());
    let size = 32 * MIB;
    let output = env.path("fio.json");
    let run = run_limited(
        std::process::Command::new(&fio)
            .arg(&job)
            .arg("--output-format=json")
            .arg(format!("--output={}", output.display()))
            .env("NBD_URI", server.uri("tank/vol"))
            .env("VERIFY_SIZE", size.to_string())
            .current_dir(env.dir.path()),
        Duration::from_secs(180),
    );
    let report = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(
        run.success(),
        "fio failed:\n{}\n--- report ---\n{report}",
        run.describe()
    );
    let all = format!("{}{}{report}", run.stdout, run.stderr);
    assert!(
        !all.contains("verify: bad") && !all.contains("crc32c: verify failed"),
        "verify errors:\n{all}"
    );
    let doc = Json::parse(&report).unwrap_or_else(|err| panic!("{err}:\n{report}"));
    let jobs = doc.get("jobs").and_then(Json::as_array).expect("jobs");
    assert_eq!(jobs.len(), 2, "two jobs, two connections: {report}");
    for job in jobs {
        assert_eq!(job.number("error"), 0, "{report}");
        let written = job.get("write").map(|w| w.number("io_bytes"));
        let verified = job.get("read").map(|r| r.number("io_bytes"));
        assert_eq!(written, Some(size), "every block written once: {report}");
        assert_eq!(
            verified,
            Some(size),
            "every block read back and verified: {report}"
        );
        // The queue really was deep (the nbd engine is asynchronous).
        let depth32 = job
            .get("iodepth_level")
            .and_then(|levels| levels.get("32"))
            .and_then(Json::as_f64)
            .unwrap_or(0.0);
        assert!(depth32 > 50.0, "iodepth 32 reached: {report}");
    }
}

/// A volume with readonly=on is exported read-only: nbdinfo says so, qemu-io cannot write,
/// a raw WRITE gets EPERM (reads still work). `set readonly` while serving takes effect for new
/// connections.
#[test]
fn readonly_volume_is_exported_readonly() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/ro", "32M", &["readonly=on"]);
    env.create_volume("tank/vol", "32M", &[]);
    let server = env.serve();

    let info = nbdinfo_json(&server.uri("tank/ro"));
    assert!(info.flag("is_read_only"), "{info:?}");
    assert_eq!(info.number("export-size"), 32 * MIB);
    assert!(!nbdinfo_json(&server.uri("tank/vol")).flag("is_read_only"));

    let ro = server.uri("tank/ro");
    let write = qemu_io_run(&ro, &["write -P 0xab 0 64k"]);
    assert!(
        !write.success(),
        "writing a read-only export must fail:\n{}",
        write.describe()
    );
    let read = run_limited(
        std::process::Command::new(qemu_io()).args([
            "-r",
            "-f",
            "raw",
            "-c",
            "read -P 0 0 1M",
            &ro,
        ]),
        TOOL_TIME,
    );
    assert!(read.success(), "reads still work:\n{}", read.describe());

    // What the server itself answers to a write (qemu-io refuses on its own).
    let mut client = RawClient::connect(&server.socket, "tank/ro").expect("GO tank/ro");
    assert_eq!(client.size, 32 * MIB);
    assert!(
        client.flags & NBD_FLAG_READ_ONLY != 0,
        "flags {:#x}",
        client.flags
    );
    let (error, _) = client.request(NBD_CMD_WRITE, 0, 4096, &[0xab; 4096]);
    assert_eq!(error, NBD_EPERM, "a write to a read-only export gets EPERM");
    let (error, data) = client.request(NBD_CMD_READ, 0, 4096, &[]);
    assert_eq!(error, 0);
    assert!(data.iter().all(|&b| b == 0), "nothing was written");
    client.disconnect();

    // Turned read-only (and back) through a forwarded `cairn set`.
    qemu_io_ok(&server.uri("tank/vol"), &["write -P 0x42 0 64k", "flush"]);
    env.ok(&["set", "readonly=on", "tank/vol"]);
    assert!(nbdinfo_json(&server.uri("tank/vol")).flag("is_read_only"));
    let mut client = RawClient::connect(&server.socket, "tank/vol").expect("GO tank/vol");
    assert!(
        client.flags & NBD_FLAG_READ_ONLY != 0,
        "flags {:#x}",
        client.flags
    );
    let (error, _) = client.request(NBD_CMD_WRITE, 0, 4096, &[0xcd; 4096]);
    assert_eq!(error, NBD_EPERM, "readonly=on set while serving");
    client.disconnect();
    env.ok(&["set", "readonly=off", "tank/vol"]);
    assert!(!nbdinfo_json(&server.uri("tank/vol")).flag("is_read_only"));
    qemu_io_ok(
        &server.uri("tank/vol"),
        &[
            "read -P 0x42 0 64k",
            "write -P 0x43 64k 64k",
            "read -P 0x43 64k 64k",
        ],
    );
}

/// Restart after SIGKILL: every flushed byte (and every FUA write, and a write flushed from
/// another connection) reads back from a new server; then a clean stop leaves a pool that
/// `pool check` finds clean.
#[test]
fn flushed_data_survives_sigkill() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &[]);
    let mut server = env.serve();
    let uri = server.uri("tank/vol");

    let source = env.path("source.img");
    random_file(&source, 48 * MIB, 7);
    run(&nbdcopy(), &["--flush", path_str(&source), &uri]).ok();
    // More writes: some flushed explicitly, one with FUA only.
    qemu_io_ok(&uri, &["write -P 0x3c 48M 4M", "flush"]);
    qemu_io_ok(&uri, &["write -f -P 0xc3 52M 1M"]);
    // Multi-conn: a write answered on one connection is made durable by a FLUSH on another.
    let mut writer = RawClient::connect(&server.socket, "tank/vol").expect("GO");
    let (error, _) = writer.request(NBD_CMD_WRITE, 56 * MIB, 256 << 10, &[0xa5; 256 << 10]);
    assert_eq!(error, 0, "write");
    let mut flusher = RawClient::connect(&server.socket, "tank/vol").expect("GO");
    let (error, _) = flusher.request(NBD_CMD_FLUSH, 0, 0, &[]);
    assert_eq!(error, 0, "flush");
    server.kill();
    drop((writer, flusher));
    assert!(
        server.socket.exists(),
        "SIGKILL cleans nothing up (the stale socket is left for the next server)"
    );
    // What the whole volume must hold.
    let expected = env.path("expected.img");
    {
        use std::io::Write;
        let mut bytes = std::fs::read(&source).unwrap();
        bytes.extend(std::iter::repeat_n(0x3c, 4 * MIB as usize));
        bytes.extend(std::iter::repeat_n(0xc3, MIB as usize));
        bytes.resize(56 * MIB as usize, 0);
        bytes.extend(std::iter::repeat_n(0xa5, 256 << 10));
        bytes.resize(64 * MIB as usize, 0);
        std::fs::File::create(&expected)
            .unwrap()
            .write_all(&bytes)
            .unwrap();
    }

    let mut server = env.serve();
    assert_eq!(server.announced, 1, "{}", server.stdout());
    let out = env.path("out.img");
    run(&nbdcopy(), &[&uri, path_str(&out)]).ok();
    assert_same_content(&expected, &out);
    server.terminate();
    env.assert_pool_check_clean();

    // And once more from the clean export.
    let server = env.serve();
    let out2 = env.path("out2.img");
    run(&nbdcopy(), &[&uri, path_str(&out2)]).ok();
    assert_same_content(&expected, &out2);
    drop(server);
}

/// SIGTERM while idle: exit 0 within seconds, sockets removed, the pool usable by ordinary
/// commands afterwards (and clean). SIGINT does the same.
#[test]
fn sigterm_stops_cleanly() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "32M", &[]);
    let mut server = env.serve();
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let meta = std::fs::metadata(&server.socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "NBD socket mode");
    assert!(
        env.control_socket().exists(),
        "control socket while serving"
    );
    qemu_io_ok(&server.uri("tank/vol"), &["write -P 0x99 0 1M"]);

    let took = server.terminate();
    assert!(took < Duration::from_secs(10), "SIGTERM took {took:?}");
    assert!(!server.socket.exists(), "NBD socket removed");
    assert!(!env.control_socket().exists(), "control socket removed");
    let stderr = server.stderr();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE"), "{status}");
    env.assert_pool_check_clean();

    // SIGINT: the same, and the unflushed write above was synced at the stop. An idle client
    // attached to the export does not hold it up; it is told the connection is over.
    let mut server = env.serve();
    qemu_io_ok(&server.uri("tank/vol"), &["read -P 0x99 0 1M"]);
    let attached = RawClient::connect(&server.socket, "tank/vol").expect("GO");
    let (status, took) = server.stop(libc::SIGINT, SERVER_STOP);
    let mut stream = attached.stream();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    let ended = std::io::Read::read_to_end(&mut stream, &mut rest);
    assert!(
        ended.is_ok()
            || ended
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the attached client's connection was closed: {ended:?}"
    );
    drop(attached);
    assert!(
        status.success(),
        "SIGINT exit status {status}\n{}",
        server.logs()
    );
    assert!(took < Duration::from_secs(10), "SIGINT took {took:?}");
    assert!(!server.socket.exists() && !env.control_socket().exists());
    env.assert_pool_check_clean();
}

/// Commands forwarded to the running server: a new volume becomes an export at once, `list`
/// and `pool status` work, a destroyed volume disappears.
#[test]
fn commands_are_forwarded_while_serving() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "32M", &[]);
    let server = env.serve();

    env.create_volume("tank/vol2", "64M", &["volblocksize=8K"]);
    let listed = nbdinfo_list(&server.list_uri());
    assert!(listed.contains_key("tank/vol2"), "{listed:?}");
    assert_eq!(listed["tank/vol2"].number("export-size"), 64 * MIB);
    let uri2 = server.uri("tank/vol2");
    assert_eq!(nbdinfo_json(&uri2).number("block_size_preferred"), 8192);
    qemu_io_ok(&uri2, &["write -P 0x21 0 1M", "flush", "read -P 0x21 0 1M"]);

    let list = env.ok(&["list", "-H", "-p", "-o", "name,volsize,volblocksize"]);
    assert!(
        list.lines()
            .any(|line| line == format!("tank/vol2\t{}\t8192", 64 * MIB)),
        "{list}"
    );
    assert!(
        list.lines().any(|line| line.starts_with("tank/vol\t")),
        "{list}"
    );
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(status.contains("state: ONLINE"), "{status}");
    let pools = env.ok(&["pool", "list", "-H"]);
    assert!(
        pools.lines().any(|line| line.starts_with("tank\t")),
        "{pools}"
    );
    // Per-volume statistics of the running server (first report: since it started).
    let iostat = env.ok(&["pool", "iostat", "-H", "-p"]);
    let row: Vec<&str> = iostat
        .lines()
        .map(|line| line.split('\t').collect::<Vec<_>>())
        .find(|fields| fields[0] == "tank/vol2")
        .unwrap_or_else(|| panic!("tank/vol2 in iostat:\n{iostat}"));
    assert_eq!(row.len(), 12, "{iostat}");
    let write_bw: f64 = row[4]
        .parse()
        .unwrap_or_else(|_| panic!("W-BW/S: {iostat}"));
    assert!(write_bw > 0.0, "tank/vol2 was written: {iostat}");
    assert_eq!(row[11], "0", "no errors: {iostat}");
    // Over TCP as well as the socket.
    qemu_io_ok(&server.tcp_uri("tank/vol2"), &["read -P 0x21 0 1M"]);

    // A second server on the same state directory is refused, the first carries on.
    let second = env.cairn(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--socket",
        "/nonexistent/x.sock",
    ]);
    assert!(!second.success(), "{}", second.describe());
    assert!(second.stderr.contains("already"), "{}", second.describe());

    env.ok(&["destroy", "tank/vol2"]);
    let listed = nbdinfo_list(&server.list_uri());
    assert!(!listed.contains_key("tank/vol2"), "{listed:?}");
    assert!(listed.contains_key("tank/vol"), "{listed:?}");
    qemu_io_ok(
        &server.uri("tank/vol"),
        &["write -P 0x12 0 64k", "read -P 0x12 0 64k"],
    );
    drop(server);
}

/// An unknown export name gets the proper NBD error, and the server keeps serving.
#[test]
fn unknown_export_is_refused_and_serving_goes_on() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "32M", &[]);
    let mut server = env.serve();
    let good = server.uri("tank/vol");
    qemu_io_ok(&good, &["write -P 0x66 0 1M", "flush"]);

    for name in ["nope", "tank/nope", "nopool/vol", "tank"] {
        let bad = run(&nbdinfo(), &[&server.uri(name)]);
        assert!(
            !bad.success(),
            "export {name:?} must not exist:\n{}",
            bad.describe()
        );
        match RawClient::connect(&server.socket, name) {
            Err(kind) => assert_eq!(kind, NBD_REP_ERR_UNKNOWN, "{name}: reply type {kind:#x}"),
            Ok(_) => panic!("NBD_OPT_GO {name:?} succeeded"),
        }
    }
    assert!(server.running(), "{}", server.logs());
    let info = nbdinfo_json(&good);
    assert_eq!(info.number("export-size"), 32 * MIB);
    qemu_io_ok(
        &good,
        &[
            "read -P 0x66 0 1M",
            "write -P 0x67 1M 1M",
            "read -P 0x67 1M 1M",
        ],
    );
    server.terminate();
}

/// SIGTERM with requests in flight: every request the server took is answered (the rest of the
/// pipeline may be cut off), the server exits 0, and every acknowledged write is there after a
/// restart (the stop synced the pool).
#[test]
fn sigterm_answers_requests_in_flight() {
    const COUNT: u64 = 4096;
    const LEN: u32 = 16 << 10;
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &[]);
    let mut server = env.serve();
    let client = RawClient::connect(&server.socket, "tank/vol").expect("GO");
    let pattern = |cookie: u64| (cookie % 251) as u8 + 1;
    let mut sender = client.stream();
    let sending = std::thread::spawn(move || {
        let mut sent = 0u64;
        for cookie in 1..=COUNT {
            let offset = (cookie - 1) * u64::from(LEN);
            let data = vec![pattern(cookie); LEN as usize];
            let request = encode_request(NBD_CMD_WRITE, cookie, offset, LEN, &data);
            if std::io::Write::write_all(&mut sender, &request).is_err() {
                break;
            }
            sent = cookie;
        }
        sent
    });
    let mut replies = client.stream();
    let mut answered = Vec::new();
    // Let the pipeline fill, then stop the server under load.
    while answered.len() < 32 {
        answered.push(read_simple_reply(&mut replies).expect("replies before the stop"));
    }
    let start = std::time::Instant::now();
    server.signal(libc::SIGTERM);
    while let Some(reply) = read_simple_reply(&mut replies) {
        answered.push(reply);
    }
    let (status, took) = server.wait_exit(libc::SIGTERM, start, SERVER_STOP);
    assert!(status.success(), "exit status {status}\n{}", server.logs());
    assert!(took < Duration::from_secs(15), "stopping took {took:?}");
    let sent = sending.join().expect("sender");
    eprintln!(
        "SIGTERM with writes in flight: {} of {sent} sent writes answered ({} with ESHUTDOWN)",
        answered.len(),
        answered
            .iter()
            .filter(|(_, error)| *error == NBD_ESHUTDOWN)
            .count()
    );

    let mut seen = std::collections::BTreeSet::new();
    for &(cookie, error) in &answered {
        assert!((1..=COUNT).contains(&cookie), "unknown cookie {cookie}");
        assert!(seen.insert(cookie), "cookie {cookie} answered twice");
        assert!(
            error == 0 || error == NBD_ESHUTDOWN,
            "write {cookie} answered with error {error}"
        );
    }
    drop(client);
    env.assert_pool_check_clean();

    let server = env.serve();
    let mut reader = RawClient::connect(&server.socket, "tank/vol").expect("GO");
    for &(cookie, error) in &answered {
        if error != 0 {
            continue;
        }
        let offset = (cookie - 1) * u64::from(LEN);
        let (error, data) = reader.request(NBD_CMD_READ, offset, LEN, &[]);
        assert_eq!(error, 0, "read back write {cookie}");
        assert!(
            data.iter().all(|&b| b == pattern(cookie)),
            "acknowledged write {cookie} (offset {offset}) did not survive the stop"
        );
    }
    reader.disconnect();
    drop(server);
}

/// Fills a 256 MiB pool through a thin 1 GiB volume until writes fail; returns the server.
fn fill_pool(env: &Env) -> Server {
    env.create_pool_of("256M");
    env.create_volume("tank/small", "16M", &[]);
    env.create_volume("tank/big", "1G", &["refreservation=none"]);
    let server = env.serve();
    qemu_io_ok(&server.uri("tank/small"), &["write -P 0x5a 0 1M", "flush"]);
    let source = env.path("fill.img");
    random_file(&source, 320 * MIB, 9);
    let fill = run_limited(
        std::process::Command::new(nbdcopy()).args([path_str(&source), &server.uri("tank/big")]),
        Duration::from_secs(180),
    );
    assert!(
        !fill.success() && fill.stderr.contains("No space left on device"),
        "320 MiB cannot fit in a 256 MiB pool:\n{}",
        fill.describe()
    );
    // nbdcopy gives up at its first ENOSPC with writes still in flight: the server carries
    // them out after the client is gone. A later client's trim is only ordered after them once
    // they are done, so wait until the server holds no request buffers.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let memory = env.ok(&["stat", "memory", "-H"]);
        let requests_now = memory
            .lines()
            .find_map(|line| line.strip_prefix("requests\t"))
            .and_then(|rest| rest.split('\t').nth(1))
            .map(str::to_string);
        if requests_now.as_deref() == Some("0") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server still holds request buffers after nbdcopy left:\n{memory}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    server
}

/// A full pool answers writes with ENOSPC; the server, the other volume and the data already
/// written carry on, and the pool stops cleanly and checks clean.
#[test]
fn full_pool_answers_enospc_and_carries_on() {
    let _heavy = heavy();
    let env = Env::new();
    let mut server = fill_pool(&env);
    let mut client = RawClient::connect(&server.socket, "tank/big").expect("GO");
    let (error, _) = client.request(NBD_CMD_WRITE, 900 * MIB, 1 << 20, &[7; 1 << 20]);
    assert_eq!(error, NBD_ENOSPC, "a write to a full pool");
    let (error, _) = client.request(NBD_CMD_READ, 0, 4096, &[]);
    assert_eq!(error, 0, "reads still work on the same connection");
    client.disconnect();
    assert!(server.running(), "{}", server.logs());
    qemu_io_ok(
        &server.uri("tank/small"),
        &["read -P 0x5a 0 1M", "read -P 0 1M 15M"],
    );
    let list = env.ok(&["list", "-H", "-p", "-o", "name,avail"]);
    assert!(list.contains("tank/big\t"), "{list}");
    server.terminate();
    assert!(!server.stderr().contains("panicked"), "{}", server.logs());
    env.assert_pool_check_clean();
}

/// TRIM frees space, so it must work on a full pool.
#[test]
fn discard_works_on_a_full_pool() {
    let _heavy = heavy();
    let env = Env::new();
    let mut server = fill_pool(&env);
    let big = server.uri("tank/big");
    qemu_io_ok(&big, &["discard 0 64M", "write -z 64M 64M", "flush"]);
    qemu_io_ok(&big, &["read -P 0 0 128M"]);
    let small = server.uri("tank/small");
    qemu_io_ok(
        &small,
        &["write -P 0x6b 1M 8M", "flush", "read -P 0x6b 1M 8M"],
    );
    server.terminate();
    env.assert_pool_check_clean();
}

/// Space freed by destroying a volume on a full pool becomes usable again while serving.
#[test]
fn space_freed_by_destroy_on_a_full_pool_is_reusable() {
    let _heavy = heavy();
    let env = Env::new();
    let mut server = fill_pool(&env);
    env.ok(&["destroy", "tank/big"]);
    let small = server.uri("tank/small");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let run = qemu_io_run(&small, &["write -P 0x6c 1M 15M", "flush"]);
        if run.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the space of the destroyed volume never came back:\n{}\n{}",
            run.describe(),
            env.ok(&["pool", "list"])
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    qemu_io_ok(&small, &["read -P 0x5a 0 1M", "read -P 0x6c 1M 15M"]);
    server.terminate();
    env.assert_pool_check_clean();
}

/// A client that connects and never says anything must not hold up a stop.
#[test]
fn stop_is_not_held_up_by_a_silent_connection() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "32M", &[]);
    let mut server = env.serve();
    let silent = std::os::unix::net::UnixStream::connect(&server.socket).expect("connect");
    std::thread::sleep(Duration::from_millis(200));
    let took = server.terminate();
    assert!(took < Duration::from_secs(5), "SIGTERM took {took:?}");
    drop(silent);
    env.assert_pool_check_clean();
}

/// `pool add` and `pool remove` of a log device while `cairn serve` serves the volume: the
/// commands run inside the server, FLUSHes use the new device at once, removing it loses
/// nothing, and after SIGKILL every flushed byte is back.
#[test]
fn log_devices_come_and_go_while_serving() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &[]);
    let server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["write -P 0x11 0 4M", "flush"]);
    let slog = env.dev("slog.img");
    env.ok(&["pool", "add", "--size", "256M", "tank", "log", &slog]);
    qemu_io_ok(
        &uri,
        &[
            "write -P 0x22 4M 4M",
            "flush",
            "write -P 0x33 8M 64k",
            "flush",
        ],
    );
    let zil = env.ok(&["stat", "zil", "-H", "-p"]);
    let prefix = zil
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once('\t')?;
            (value.ends_with("slog.img")).then(|| name.trim_end_matches(".name").to_string())
        })
        .unwrap_or_else(|| panic!("the new log device is not listed:\n{zil}"));
    let writes: u64 = zil
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{prefix}.writes\t")))
        .unwrap_or_else(|| panic!("no {prefix}.writes line:\n{zil}"))
        .parse()
        .unwrap();
    assert!(
        writes > 0,
        "FLUSH wrote nothing to the new log device:\n{zil}"
    );
    qemu_io_ok(&uri, &["write -P 0x44 12M 64k", "flush"]);
    env.ok(&["pool", "remove", "tank", &slog]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(!status.contains("slog.img"), "{status}");
    qemu_io_ok(&uri, &["write -P 0x55 16M 64k", "flush"]);
    let mut server = server;
    server.kill();

    let server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(
        &uri,
        &[
            "read -P 0x11 0 4M",
            "read -P 0x22 4M 4M",
            "read -P 0x33 8M 64k",
            "read -P 0x44 12M 64k",
            "read -P 0x55 16M 64k",
        ],
    );
    let mut server = server;
    server.terminate();
    env.assert_pool_check_clean();
}
