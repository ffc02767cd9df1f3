//! Real, unmodified NBD clients against the server, over TCP (127.0.0.1:0) and a Unix socket:
//! libnbd's `nbdinfo` (list, JSON details, allocation map) and QEMU's `qemu-io` and `qemu-img`
//! (patterned writes and verified reads, flush, FUA, discard, write-zeroes, image conversion in
//! and out). Every check looks at the data or the parsed output, not only the exit status. A
//! missing tool fails the test with the Debian package to install (`.ci/run` installs them).

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use std::time::Duration;

use cairn_nbd::ServerConfig;
use common::*;
use serde_json::Value;

const LIBNBD: &str = "libnbd-bin";
const QEMU: &str = "qemu-utils";

/// Runs a command (at most 120 s) and returns its output.
fn run(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    let mut cmd = std::mem::replace(cmd, Command::new("true"));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(cmd.output());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("could not run {what}: {e}"),
        Err(_) => panic!("{what} did not finish within 120 s"),
    }
}

/// Runs a command that must succeed; returns its stdout.
fn run_ok(cmd: &mut Command) -> String {
    let what = format!("{cmd:?}");
    let out = run(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    stdout + &stderr
}

fn nbdinfo() -> Command {
    Command::new(tool("nbdinfo", LIBNBD))
}

fn qemu_io(uri: &str, commands: &[&str]) -> String {
    let mut cmd = Command::new(tool("qemu-io", QEMU));
    cmd.arg("-f").arg("raw");
    for c in commands {
        cmd.arg("-c").arg(c);
    }
    cmd.arg(uri);
    run_ok(&mut cmd)
}

fn provider() -> MemProvider {
    standard_provider()
        .add("tank/img", MemExport::new(16 << 20))
        .describe("tank/img", "image target")
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("nbdinfo printed invalid JSON ({e}):\n{s}"))
}

#[test]
fn nbdinfo_lists_exports_over_tcp_and_unix() {
    let t = TestServer::start(provider(), ServerConfig::default());
    let tcp = format!("nbd://{}", t.addr);
    let unix = format!("nbd+unix://?socket={}", t.socket.display());
    for uri in [tcp, unix] {
        let v = json(&run_ok(nbdinfo().arg("--list").arg("--json").arg(&uri)));
        let exports = v["exports"].as_array().expect("exports array");
        let mut names: Vec<(String, u64)> = exports
            .iter()
            .map(|e| {
                (
                    e["export-name"].as_str().unwrap().to_owned(),
                    e["export-size"].as_u64().unwrap(),
                )
            })
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![
                ("tank/img".to_owned(), 16 << 20),
                ("tank/ro".to_owned(), 8 << 20),
                ("tank/slow".to_owned(), 16 << 20),
                ("tank/vol".to_owned(), 64 << 20),
            ],
            "{uri}"
        );
        let vol = exports
            .iter()
            .find(|e| e["export-name"] == "tank/vol")
            .unwrap();
        assert_eq!(vol["description"], "test volume");
        let ro = exports
            .iter()
            .find(|e| e["export-name"] == "tank/ro")
            .unwrap();
        assert_eq!(ro["is_read_only"], true);
    }
    t.stop();
}

#[test]
fn nbdinfo_reports_size_flags_and_block_sizes() {
    let t = TestServer::start(provider(), ServerConfig::default());
    let v = json(&run_ok(nbdinfo().arg("--json").arg(t.uri("tank/vol"))));
    assert_eq!(v["protocol"], "newstyle-fixed");
    assert_eq!(v["structured"], true);
    let e = &v["exports"][0];
    assert_eq!(e["export-name"], "tank/vol");
    assert_eq!(e["export-size"], 64u64 << 20);
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_fast_zero",
        "can_multi_conn",
        "can_cache",
        "can_df",
    ] {
        assert_eq!(e[flag], true, "{flag} in {e}");
    }
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["is_rotational"], false);
    assert_eq!(e["block_size_minimum"], 512);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["block_size_maximum"], 32u64 << 20);
    let contexts: Vec<&str> = e["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(contexts, vec!["base:allocation"]);

    // Read-only export over the Unix socket; its preferred block size is its chunk size.
    let v = json(&run_ok(nbdinfo().arg("--json").arg(t.unix_uri("tank/ro"))));
    let e = &v["exports"][0];
    assert_eq!(e["export-size"], 8u64 << 20);
    assert_eq!(e["is_read_only"], true);
    let v = json(&run_ok(
        nbdinfo().arg("--json").arg(t.unix_uri("tank/slow")),
    ));
    assert_eq!(v["exports"][0]["block_size_preferred"], 65536);

    // An unknown export is an error, reported as such.
    let out = run(nbdinfo().arg("--json").arg(t.uri("tank/missing")));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    // libnbd reports NBD_REP_ERR_UNKNOWN as ENOENT.
    assert!(stderr.contains("No such file or directory"), "{stderr}");
    t.stop();
}

#[test]
fn nbdinfo_map_shows_holes_and_data() {
    let t = TestServer::start(provider(), ServerConfig::default());
    let e = t.export("tank/vol");
    e.fill(1 << 20, &pattern(3, 65536));
    e.fill(8 << 20, &pattern(4, 1 << 20));
    for uri in [t.uri("tank/vol"), t.unix_uri("tank/vol")] {
        let v = json(&run_ok(nbdinfo().arg("--map").arg("--json").arg(&uri)));
        let map: Vec<(u64, u64, u64)> = v
            .as_array()
            .expect("map array")
            .iter()
            .map(|x| {
                (
                    x["offset"].as_u64().unwrap(),
                    x["length"].as_u64().unwrap(),
                    x["type"].as_u64().unwrap(),
                )
            })
            .collect();
        let mib = 1u64 << 20;
        assert_eq!(
            map,
            vec![
                (0, mib, 3),
                (mib, 65536, 0),
                (mib + 65536, 7 * mib - 65536, 3),
                (8 * mib, mib, 0),
                (9 * mib, 55 * mib, 3),
            ],
            "{uri}"
        );
    }
    t.stop();
}

#[test]
fn qemu_io_patterns_flush_fua_discard_and_zero() {
    let t = TestServer::start(provider(), ServerConfig::default());
    let e = t.export("tank/vol");
    let unix = t.unix_uri("tank/vol");
    let tcp = t.uri("tank/vol");

    // Patterned write + flush over the Unix socket: bytes land, flush reaches the export.
    let flushes = e.flushes.load(Ordering::SeqCst);
    let out = qemu_io(&unix, &["write -P 0xab 0 1M", "flush"]);
    assert!(out.contains("wrote 1048576/1048576 bytes"), "{out}");
    assert_eq!(e.contents(0, 1 << 20), vec![0xab; 1 << 20]);
    assert!(
        e.flushes.load(Ordering::SeqCst) > flushes,
        "flush never reached the export"
    );

    // Verified reads over TCP: the right pattern passes, a wrong one is detected.
    let out = qemu_io(&tcp, &["read -P 0xab 0 1M"]);
    assert!(out.contains("read 1048576/1048576 bytes"), "{out}");
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let out = run(Command::new(tool("qemu-io", QEMU))
        .args(["-f", "raw", "-c", "read -P 0xcd 0 1M"])
        .arg(&tcp));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "qemu-io accepted a wrong pattern: {text}"
    );
    assert!(
        text.contains("Pattern verification failed"),
        "wrong pattern not detected: {text}"
    );

    // FUA write.
    let fua = e.fua_ops.load(Ordering::SeqCst);
    let out = qemu_io(&tcp, &["write -f -P 0x5a 4M 64k"]);
    assert!(out.contains("wrote 65536/65536 bytes"), "{out}");
    assert_eq!(e.contents(4 << 20, 65536), vec![0x5a; 65536]);
    assert!(
        e.fua_ops.load(Ordering::SeqCst) > fua,
        "FUA flag did not reach the export"
    );

    // Discard punches holes; write -z zeroes; both read back as zeroes.
    let out = qemu_io(
        &unix,
        &[
            "discard 0 512k",
            "write -z 512k 256k",
            "read -P 0 0 768k",
            "read -P 0xab 768k 256k",
        ],
    );
    assert!(out.contains("discard 524288/524288 bytes"), "{out}");
    assert!(out.contains("wrote 262144/262144 bytes"), "{out}");
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert!(
        !e.is_allocated(0) && !e.is_allocated(256 << 10),
        "discard left data allocated"
    );
    assert_eq!(e.contents(0, 768 << 10), vec![0u8; 768 << 10]);
    assert_eq!(e.contents(768 << 10, 256 << 10), vec![0xab; 256 << 10]);

    // Writing to the read-only export fails; reading it works.
    let out = run(Command::new(tool("qemu-io", QEMU))
        .args(["-f", "raw", "-c", "write -P 1 0 4k"])
        .arg(t.uri("tank/ro")));
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !text.contains("wrote 4096/4096"),
        "write to a read-only export succeeded: {text}"
    );
    assert_eq!(t.export("tank/ro").allocated(), 0);

    let stats = t.server.stats();
    let s = &stats.iter().find(|(n, _)| n == "tank/vol").unwrap().1;
    assert!(s.write.bytes >= (1 << 20) + 65536, "{:?}", s.write.bytes);
    assert!(s.read.ops > 0 && s.flush.ops > 0 && s.trim.ops > 0 && s.write_zeroes.ops > 0);
    t.stop();
}

/// A 16 MiB raw image: data in some places, holes (never written) in others.
fn make_image(path: &Path) -> Vec<u8> {
    let size = 16usize << 20;
    let mut img = vec![0u8; size];
    for (k, (off, len)) in [
        (0usize, 65536usize),
        (3 << 20, 1 << 20),
        (9 << 20, 4096),
        ((16 << 20) - 8192, 8192),
    ]
    .into_iter()
    .enumerate()
    {
        img[off..off + len].copy_from_slice(&pattern(100 + k as u64, len));
    }
    // Write only the data regions so the file is sparse like a real image.
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::create(path).unwrap();
    f.set_len(size as u64).unwrap();
    for (off, len) in [
        (0usize, 65536usize),
        (3 << 20, 1 << 20),
        (9 << 20, 4096),
        ((16 << 20) - 8192, 8192),
    ] {
        f.write_all_at(&img[off..off + len], off as u64).unwrap();
    }
    img
}

#[test]
fn qemu_img_convert_in_and_out() {
    let t = TestServer::start(provider(), ServerConfig::default());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.img");
    let img = make_image(&src);
    let qemu_img = tool("qemu-img", QEMU);
    let cmp = tool("cmp", "diffutils");

    // Into an export with cheap zeroing (TCP) and one without (Unix socket: qemu-img's fast
    // zero probe is refused, and it must fall back to writing zeroes).
    for (name, uri) in [
        ("tank/img", t.uri("tank/img")),
        ("tank/slow", t.unix_uri("tank/slow")),
    ] {
        let e = t.export(name);
        e.fill(5 << 20, &[0xff; 65536]); // stale data where the image has a hole
        // `-n` (use the existing target) for one, qemu-img's own target probing for the other.
        let mut convert = Command::new(&qemu_img);
        convert.arg("convert");
        if name == "tank/img" {
            convert.arg("-n");
        }
        run_ok(convert.args(["-f", "raw", "-O", "raw"]).arg(&src).arg(&uri));
        assert!(
            e.contents(0, img.len()) == img,
            "{name}: export differs from the image"
        );
        if name == "tank/img" {
            let chunks = img.len() / 4096;
            assert!(
                e.allocated() < chunks / 2,
                "{name}: holes were written as data ({} of {chunks})",
                e.allocated()
            );
        }

        // And back out.
        let out = dir
            .path()
            .join(format!("out-{}.img", name.replace('/', "-")));
        run_ok(
            Command::new(&qemu_img)
                .args(["convert", "-f", "raw", "-O", "raw"])
                .arg(&uri)
                .arg(&out),
        );
        let back = std::fs::read(&out).unwrap();
        assert_eq!(back.len(), img.len());
        assert!(back == img, "{name}: converted-out image differs");
        let status = run(Command::new(&cmp).arg(&src).arg(&out)).status;
        assert!(
            status.success(),
            "cmp {} {} reports a difference",
            src.display(),
            out.display()
        );
    }
    // Only the image's data travelled as WRITE payload; its holes were sent as WRITE_ZEROES.
    let data_bytes = 65536 + (1 << 20) + 4096 + 8192;
    for (name, s) in t
        .server
        .stats()
        .iter()
        .filter(|(n, _)| n == "tank/img" || n == "tank/slow")
    {
        assert_eq!(s.write.bytes, data_bytes, "{name}: write bytes");
        assert!(
            s.write_zeroes.ops > 0 && s.write_zeroes.bytes >= (16 << 20) - data_bytes,
            "{name}"
        );
    }
    // qemu-img compare agrees too.
    let out = run_ok(
        Command::new(&qemu_img)
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&src)
            .arg(t.uri("tank/img")),
    );
    assert!(out.contains("Images are identical"), "{out}");
    t.stop();
}

#[test]
fn nbdcopy_in_and_out() {
    let t = TestServer::start(provider(), ServerConfig::default());
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.img");
    let img = make_image(&src);
    let nbdcopy = tool("nbdcopy", LIBNBD);
    // nbdcopy opens several connections at once (multi-conn) and many requests per connection.
    run_ok(
        Command::new(&nbdcopy)
            .arg("--flush")
            .arg(&src)
            .arg(t.uri("tank/img")),
    );
    assert!(
        t.export("tank/img").contents(0, img.len()) == img,
        "export differs from the image"
    );
    let out = dir.path().join("out.img");
    run_ok(Command::new(&nbdcopy).arg(t.unix_uri("tank/img")).arg(&out));
    assert!(
        std::fs::read(&out).unwrap() == img,
        "copied-out image differs"
    );
    let s = t
        .server
        .stats()
        .into_iter()
        .find(|(n, _)| n == "tank/img")
        .unwrap()
        .1;
    assert!(
        s.connections >= 2,
        "nbdcopy used {} connections",
        s.connections
    );
    assert!(s.flush.ops >= 1, "nbdcopy's final flush was not seen");
    t.stop();
}
