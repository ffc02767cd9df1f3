//! `cairn diff --blocks` as a user runs it (issue 34): a volume served over NBD is written by
//! `qemu-io`, snapshotted, written again (rewrites, a trim) and the CLI reports exactly the
//! ranges touched since, against the live volume and between two snapshots, in the table,
//! `-H -p` and `-j` forms, through the running server and with the pool opened directly; a
//! diff asked the wrong way round is refused with a clear message.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;

#[test]
fn diff_blocks_reports_what_changed_since_a_snapshot() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("256M");
    env.create_volume("tank/vol", "16M", &["volblocksize=16K"]);
    let server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["write -P 0x11 0 16M", "flush"]);
    env.ok(&["snapshot", "tank/vol@a"]);
    // Since @a: 64 KiB rewritten at 1 MiB, one 16 KiB block at 5 MiB, a partial write inside
    // the block at 12 MiB, and 32 KiB trimmed (freed: holes) at 8 MiB.
    qemu_io_ok(
        &uri,
        &[
            "write -P 0x22 1M 64k",
            "write -P 0x33 5M 16k",
            "write -P 0x44 12584960 512",
            "discard 8M 32k",
            "flush",
        ],
    );
    let expected = "1048576\t65536\n5242880\t16384\n8388608\t32768\n12582912\t16384\n";
    // Against the live volume (the default newer side), through the server.
    assert_eq!(
        env.ok(&["diff", "--blocks", "-H", "-p", "tank/vol@a"]),
        expected
    );
    assert_eq!(
        env.ok(&["diff", "--blocks", "-H", "-p", "tank/vol@a", "tank/vol"]),
        expected
    );
    // For people: a header and sizes.
    let table = env.ok(&["diff", "--blocks", "tank/vol@a"]);
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["OFFSET", "LENGTH"], "{table}");
    assert_eq!(lines[1], ["1M", "64K"], "{table}");
    assert_eq!(lines.len(), 5, "{table}");

    // Between two snapshots, as JSON.
    env.ok(&["snapshot", "tank/vol@b"]);
    let text = env.ok(&["diff", "--blocks", "-j", "tank/vol@a", "tank/vol@b"]);
    let document = Json::parse(&text).unwrap_or_else(|err| panic!("{err}: {text}"));
    let diff = document.get("diff").unwrap_or_else(|| panic!("{text}"));
    let number = |key: &str| {
        diff.get(key)
            .and_then(Json::as_u64)
            .unwrap_or_else(|| panic!("{key}: {text}"))
    };
    assert_eq!(number("volsize_bytes"), 16 << 20);
    assert_eq!(number("volblocksize_bytes"), 16 << 10);
    assert_eq!(number("changed_bytes"), (64 + 16 + 32 + 16) << 10);
    // 1024 blocks; the walk reads the few that changed and the indirect blocks above them.
    assert!(number("blocks_visited") < 40, "{text}");
    let ranges: Vec<(u64, u64)> = diff
        .get("ranges")
        .and_then(Json::as_array)
        .unwrap_or_else(|| panic!("{text}"))
        .iter()
        .map(|range| {
            let field = |key: &str| range.get(key).and_then(Json::as_u64).unwrap();
            (field("offset_bytes"), field("length_bytes"))
        })
        .collect();
    assert_eq!(
        ranges,
        [
            (1 << 20, 64 << 10),
            (5 << 20, 16 << 10),
            (8 << 20, 32 << 10),
            (12 << 20, 16 << 10)
        ]
    );
    // Nothing written since @b.
    assert_eq!(env.ok(&["diff", "--blocks", "-H", "-p", "tank/vol@b"]), "");

    // Refused: the newer side first, and a name that is no snapshot.
    let refused = env.cairn(&["diff", "--blocks", "tank/vol@b", "tank/vol@a"]);
    assert!(
        !refused.success() && refused.stderr.contains("is not older than"),
        "{}",
        refused.describe()
    );
    let refused = env.cairn(&["diff", "--blocks", "tank/vol"]);
    assert!(
        !refused.success() && refused.stderr.contains("not a snapshot"),
        "{}",
        refused.describe()
    );
    let refused = env.cairn(&["diff", "tank/vol@a"]);
    assert!(
        !refused.success() && refused.stderr.contains("--blocks"),
        "{}",
        refused.describe()
    );

    // With no server, the CLI opens the pool itself (read-only) and says the same.
    drop(server);
    assert_eq!(
        env.ok(&["diff", "--blocks", "-H", "-p", "tank/vol@a"]),
        expected
    );
    env.assert_pool_check_clean();
}
