//! The snapshot `digest`, `send -c` and `receive -c` as a user runs them (issue 36), through a
//! running server and with the pool opened in the command:
//!
//! - `get -H -p digest` of a snapshot and of its replica agree (`-` for a dataset), and
//!   `list -o name,digest` shows them; the same values once the server stopped;
//! - `send -c` of a volume written with a compressible pattern is several times smaller than
//!   `send`, received into another pool with the same digest, and byte for byte the same
//!   stream whether the server or the command writes it;
//! - a block damaged on both sides of the mirror (found by its pattern in the backing files)
//!   fails reads over NBD; `receive -c` of a stream of its snapshot says it healed it, reads
//!   then return the pattern, and `pool check` is clean; once through the server, once with
//!   the pool opened in the command.

mod nbd_common;
mod stream_common;

use nbd_common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use stream_common::*;

fn digest(env: &Env, name: &str) -> String {
    env.ok(&["get", "-H", "-p", "-o", "value", "digest", name])
        .trim()
        .to_string()
}

/// The offset in `path` of the first 512-byte-aligned run of 16 KiB of `byte`.
fn find_block(path: &str, byte: u8) -> u64 {
    const RUN: usize = 16 << 10;
    const CHUNK: usize = 4 << 20;
    let mut file = std::fs::File::open(path).unwrap();
    let mut buf = vec![0u8; CHUNK + RUN];
    let mut base = 0u64;
    loop {
        file.seek(SeekFrom::Start(base)).unwrap();
        let mut filled = 0;
        while filled < buf.len() {
            match file.read(&mut buf[filled..]).unwrap() {
                0 => break,
                n => filled += n,
            }
        }
        let mut at = 0;
        while at + RUN <= filled {
            if buf[at..at + RUN].iter().all(|&b| b == byte) {
                return base + at as u64;
            }
            at += 512;
        }
        assert!(filled == buf.len(), "no block of {byte:#x} in {path}");
        base += CHUNK as u64;
    }
}

/// Overwrites 64 bytes of the block of 0xc3 bytes on both devices of `tank` (the server
/// stopped).
fn damage_both_sides(env: &Env) {
    for device in ["d0.img", "d1.img"] {
        let path = env.dev(device);
        let at = find_block(&path, 0xc3);
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.seek(SeekFrom::Start(at + 1000)).unwrap();
        file.write_all(&[0x5a; 64]).unwrap();
        file.sync_all().unwrap();
    }
}

#[test]
fn digests_compressed_sends_and_corrective_receives() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    let backup = env.dev("b0.img");
    env.ok(&["pool", "create", "--size", "256M", "backup", &backup]);
    env.create_volume("tank/vol", "8M", &["volblocksize=16K", "compression=lz4"]);
    env.create_volume("tank/raw", "4M", &["volblocksize=16K"]);
    let mut server = env.serve();
    qemu_io_ok(&server.uri("tank/vol"), &["write -P 0x5a 0 3M", "flush"]);
    qemu_io_ok(
        &server.uri("tank/raw"),
        &["write -P 0x11 0 1M", "write -P 0xc3 1M 16k", "flush"],
    );
    env.ok(&["snapshot", "tank/vol@a"]);
    env.ok(&["snapshot", "tank/raw@a"]);

    // Through the server: digests, send -c, receive.
    let sent_digest = digest(&env, "tank/vol@a");
    assert_eq!(sent_digest.len(), 64, "{sent_digest}");
    assert_eq!(digest(&env, "tank/vol"), "-");
    assert!(send_to(&env, &["-c", "tank/vol@a"], "c.stream").success);
    assert!(send_to(&env, &["tank/vol@a"], "p.stream").success);
    let (small, plain) = (
        std::fs::read(env.path("c.stream")).unwrap(),
        std::fs::read(env.path("p.stream")).unwrap(),
    );
    eprintln!("send -c: {} bytes, send: {}", small.len(), plain.len());
    assert!(
        small.len() * 4 < plain.len(),
        "-c {} bytes, plain {}",
        small.len(),
        plain.len()
    );
    let run = receive_from(&env, &["backup/copy"], "c.stream");
    assert!(run.success, "{}", run.stderr);
    assert_eq!(digest(&env, "backup/copy@a"), sent_digest);
    let listed = env.ok(&["list", "-H", "-o", "name,digest", "-t", "snapshot"]);
    for name in ["tank/vol@a", "backup/copy@a"] {
        assert!(
            listed
                .lines()
                .any(|line| line == format!("{name}\t{sent_digest}")),
            "{listed}"
        );
    }
    assert!(send_to(&env, &["tank/raw@a"], "raw.stream").success);
    server.terminate();

    // In the command: the same digests, the same -c stream.
    assert_eq!(digest(&env, "backup/copy@a"), sent_digest);
    assert_eq!(digest(&env, "tank/vol@a"), sent_digest);
    assert!(send_to(&env, &["-c", "tank/vol@a"], "c2.stream").success);
    assert!(std::fs::read(env.path("c2.stream")).unwrap() == small);

    // Corrective receive, in the command.
    damage_both_sides(&env);
    let run = env.cairn(&["pool", "check", "tank"]);
    assert!(
        !run.stdout.contains("no problems found"),
        "{}",
        run.describe()
    );
    let run = receive_from(&env, &["-c", "tank/raw@a"], "raw.stream");
    assert!(run.success, "{}", run.stderr);
    assert!(run.stderr.contains("healed 1 blocks"), "{}", run.stderr);
    env.assert_pool_check_clean();

    // And through a server: reads fail until the receive heals the block.
    damage_both_sides(&env);
    let mut server = env.serve();
    let read = ["read -P 0xc3 1M 16k"];
    assert!(!qemu_io_run(&server.uri("tank/raw"), &read).success());
    let run = receive_from(&env, &["-c", "tank/raw@a"], "raw.stream");
    assert!(run.success, "{}", run.stderr);
    assert!(run.stderr.contains("healed 1 blocks"), "{}", run.stderr);
    qemu_io_ok(&server.uri("tank/raw"), &read);
    // Nothing left to heal.
    let run = receive_from(&env, &["-c", "tank/raw@a"], "raw.stream");
    assert!(run.stderr.contains("healed 0 blocks"), "{}", run.stderr);
    // A stream of another snapshot is refused.
    let run = receive_from(&env, &["-c", "tank/vol@a"], "raw.stream");
    assert!(
        !run.success && run.stderr.contains("guid"),
        "{}",
        run.stderr
    );
    server.terminate();
    env.assert_pool_check_clean();
}
