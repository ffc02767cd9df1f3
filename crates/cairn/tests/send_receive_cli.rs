//! `cairn send` and `cairn receive` as a user runs them (issue 36, first step): a volume
//! written over NBD by `qemu-io` is snapshotted, sent to a file and received into a second
//! pool with no server running; the received snapshot's stream carries the same records as
//! the original's; a damaged stream leaves nothing. (Through a running server:
//! `send_receive_server.rs`.) The received snapshot shows the sender's guid (`get guid`). A
//! receive SIGKILLed mid-stream leaves no dataset visible, the pool checks clean, and the
//! next writable import destroys what it left (the same stream then goes in). `send -n -P`
//! prints the stream's exact size.

mod nbd_common;
mod stream_common;

use cairn_format::send_stream::StreamRecord;
use nbd_common::*;
use std::process::Stdio;
use stream_common::*;

#[test]
fn a_volume_goes_to_a_file_and_into_another_pool() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    let backup = env.dev("b0.img");
    env.ok(&["pool", "create", "--size", "256M", "backup", &backup]);
    env.create_volume("tank/vol", "8M", &["volblocksize=16K"]);
    let mut server = env.serve();
    qemu_io_ok(
        &server.uri("tank/vol"),
        &["write -P 0x5a 0 3M", "write -P 0x21 5M 64k", "flush"],
    );
    env.ok(&["snapshot", "tank/vol@a"]);
    server.terminate();

    let sent = send_to(&env, &["tank/vol@a"], "vol.stream");
    assert!(sent.success, "{}", sent.stderr);
    let stream = std::fs::read(env.path("vol.stream")).unwrap();
    // 3 MiB + 64 KiB of data in 16 KiB blocks.
    assert_eq!(records(&stream).len(), 1 + 192 + 4);
    // `send -n -P`: the exact size, nothing sent (a terminal is fine: nothing is written).
    let size = env.ok(&["send", "-n", "-P", "tank/vol@a"]);
    assert_eq!(size.trim(), format!("size\t{}", stream.len()), "{size}");
    let run = receive_from(&env, &["backup/copy"], "vol.stream");
    assert!(run.success, "{}", run.stderr);
    let listed = env.ok(&["list", "-H", "-o", "name", "-t", "snapshot"]);
    assert!(listed.lines().any(|l| l == "backup/copy@a"), "{listed}");
    let guid = |name: &str| env.ok(&["get", "-H", "-p", "-o", "value", "guid", name]);
    let sent_guid = guid("tank/vol@a");
    assert!(
        sent_guid.trim().parse::<u64>().is_ok_and(|g| g != 0),
        "{sent_guid}"
    );
    assert_eq!(guid("backup/copy@a"), sent_guid);
    assert!(send_to(&env, &["backup/copy@a"], "copy.stream").success);
    let copy = std::fs::read(env.path("copy.stream")).unwrap();
    assert_eq!(records(&copy), records(&stream));

    // A damaged stream: refused, no dataset left.
    let mut damaged = stream.clone();
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x40;
    std::fs::write(env.path("damaged.stream"), &damaged).unwrap();
    let run = receive_from(&env, &["backup/other"], "damaged.stream");
    assert!(!run.success);
    assert!(run.stderr.contains("damaged"), "{}", run.stderr);
    let listed = env.ok(&["list", "-H", "-o", "name"]);
    assert!(!listed.contains("backup/other"), "{listed}");
    env.assert_pool_check_clean();
}

/// A volume stream of `blocks` 16 KiB blocks of pseudo-random bytes, made with the stream
/// writer itself (no pool needed to make a large one).
fn volume_stream(blocks: u64) -> Vec<u8> {
    use cairn_format::send_stream::{StreamHeader, StreamKind, StreamWriter};
    let block_bytes = 16u64 << 10;
    let header = StreamHeader {
        features: 0,
        kind: StreamKind::Volume,
        to_guid: 0x0123_4567_89ab_cdef,
        to_txg: 100,
        from_guid: 0,
        from_txg: 0,
        volsize_bytes: blocks * block_bytes,
        block_size_bytes: block_bytes as u32,
        resume: None,
        creation_ms: 1_700_000_000_000,
    };
    let mut out = Vec::new();
    let mut writer = StreamWriter::new(&mut out, &header).expect("header");
    writer
        .write(&StreamRecord::Object {
            object: 1,
            object_type: cairn_format::ObjectType::VolumeData,
            block_size_bytes: block_bytes as u32,
            indirect_shift: 17,
            bonus: Vec::new(),
        })
        .expect("object");
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for blkid in 0..blocks {
        let data: Vec<u8> = (0..block_bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        writer
            .write(&StreamRecord::Write {
                object: 1,
                offset_bytes: blkid * block_bytes,
                data,
            })
            .expect("write");
    }
    writer.finish("big").expect("end");
    out
}

#[test]
fn a_receive_killed_mid_stream_leaves_nothing_after_import() {
    use std::io::Write;
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    // 64 MiB through a pipe; killed once half of it has been read and the txg timer (5 s)
    // has committed received blocks of the hidden dataset.
    let stream = volume_stream(4096);
    let mut cmd = env.cairn_command();
    cmd.args(["receive", "tank/copy"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().expect("start cairn receive");
    let mut stdin = child.stdin.take().expect("a pipe");
    let half = stream.len() / 2;
    stdin
        .write_all(&stream[..half])
        .expect("the receiver reads half the stream");
    std::thread::sleep(std::time::Duration::from_millis(6000));
    stdin
        .write_all(&stream[half..half + (1 << 20)])
        .expect("the receiver reads on");
    std::thread::sleep(std::time::Duration::from_millis(200));
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    assert!(!status.success());
    drop(stdin);
    // Read-only commands: the target is not there, the hidden dataset is not listed, and the
    // pool (hidden dataset included) checks clean.
    let listed = env.ok(&["list", "-H", "-o", "name"]);
    assert!(
        !listed.contains("tank/copy"),
        "a killed receive left a visible dataset:\n{listed}"
    );
    env.assert_pool_check_clean();
    // What the killed receive had committed is still allocated (held by the hidden dataset).
    let allocated = || -> u64 {
        let list = env.ok(&["pool", "list", "-H", "-p"]);
        let row = list
            .lines()
            .find(|l| l.starts_with("tank\t"))
            .expect("tank listed");
        row.split('\t')
            .nth(2)
            .and_then(|v| v.parse().ok())
            .expect("ALLOC in bytes")
    };
    assert!(allocated() > 16 << 20, "{} bytes", allocated());
    // A writable import destroys what the killed receive left: the same stream goes in (it
    // would be refused as "under way" otherwise) and the pool checks clean after.
    std::fs::write(env.path("big.stream"), &stream).unwrap();
    let run = receive_from(&env, &["tank/copy"], "big.stream");
    assert!(run.success, "{}", run.stderr);
    let listed = env.ok(&["list", "-H", "-o", "name", "-t", "snapshot"]);
    assert!(listed.lines().any(|l| l == "tank/copy@big"), "{listed}");
    let guid = env.ok(&["get", "-H", "-p", "-o", "value", "guid", "tank/copy@big"]);
    assert_eq!(guid.trim(), 0x0123_4567_89ab_cdefu64.to_string());
    env.assert_pool_check_clean();
    // Destroying it gives back what it took: nothing of the killed receive stays allocated.
    env.ok(&["destroy", "tank/copy@big"]);
    env.ok(&["destroy", "tank/copy"]);
    env.assert_pool_check_clean();
}
