//! `cairn stat snapshots` and the events of snapshot changes, as a user sees them (issue 34):
//! a one-shot command prints the events its own work caused on stderr; a running server
//! writes each to its stderr as it comes and counts every change it made, which `stat
//! snapshots` shows as a table (`-p` exact, `-H` for scripts) and as JSON (`-j`,
//! docs/json.md); without a server the counters are the command's own (zero) while the levels
//! (snapshots, deadlists, freeing) are the pool's.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::time::{Duration, Instant};

/// The value of `POOL.field` in `stat snapshots -H` output.
fn scripted(out: &str, key: &str) -> u64 {
    out.lines()
        .find_map(|line| line.strip_prefix(&format!("{key}\t")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in:\n{out}"))
}

/// The row of `pool` in a `stat snapshots` table, by column header.
fn row(out: &str, pool: &str) -> std::collections::BTreeMap<String, String> {
    let mut lines = out.lines().skip_while(|line| !line.starts_with("POOL"));
    let header: Vec<&str> = lines.next().expect("a header").split_whitespace().collect();
    let values: Vec<&str> = lines
        .find(|line| line.split_whitespace().next() == Some(pool))
        .unwrap_or_else(|| panic!("no row for {pool}:\n{out}"))
        .split_whitespace()
        .collect();
    assert_eq!(header.len(), values.len(), "{out}");
    header
        .into_iter()
        .map(String::from)
        .zip(values.into_iter().map(String::from))
        .collect()
}

#[test]
fn stat_snapshots_counts_what_the_server_did_and_events_name_each_change() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "16M", &["volblocksize=8K"]);

    // One-shot: the command prints the event its change caused; the counters are its own.
    let taken = env.cairn(&["snapshot", "tank/vol@a"]).ok();
    assert!(
        taken
            .stderr
            .contains("cairn: snapshot tank/vol@a created in txg "),
        "{}",
        taken.describe()
    );
    let refused = env.cairn(&["snapshot", "tank/vol@a"]);
    assert!(!refused.success(), "{}", refused.describe());
    assert!(
        !refused.stderr.contains("created in txg"),
        "a refused snapshot announces nothing:\n{}",
        refused.describe()
    );
    let alone = env.ok(&["stat", "snapshots", "-p", "tank"]);
    assert!(alone.contains("no server is running"), "{alone}");
    let alone_row = row(&alone, "tank");
    assert_eq!(alone_row["SNAPS"], "1", "{alone}");
    assert_eq!(
        alone_row["CREATED"], "0",
        "this command created none: {alone}"
    );

    // With a server: every change goes through it and is counted there.
    let server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["write -P 1 0 4M", "flush"]);
    env.ok(&["snapshot", "tank/vol@b"]);
    qemu_io_ok(&uri, &["write -P 2 0 4M", "flush"]);
    env.ok(&["snapshot", "tank/vol@c"]);
    env.ok(&["clone", "tank/vol@b", "tank/c"]);
    env.ok(&["destroy", "tank/c"]);
    env.ok(&["destroy", "tank/vol@b"]);
    // The destroy's background free finishes within a few txgs: the server says so.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !server.stderr().contains("bytes of tank/vol@b in ") {
        assert!(
            Instant::now() < deadline,
            "no end of the destroy's background free:\n{}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = env.ok(&["stat", "snapshots", "-j", "tank"]);
    let json: serde_json::Value = serde_json::from_str(&text).expect("stat snapshots -j");
    assert_eq!(
        json["output_version"]["command"], "cairn stat snapshots",
        "{json}"
    );
    let tank = &json["pools"]["tank"];
    for (field, expected) in [
        ("snapshots_created", 2),
        ("snapshots_destroyed", 1),
        ("clones_created", 1),
        ("datasets_destroyed", 1),
        ("promotes", 0),
        ("rollbacks", 0),
        ("snapshots", 2),
        ("commands", 4),
    ] {
        assert_eq!(tank[field].as_u64(), Some(expected), "{field}: {json}");
    }
    assert_eq!(tank["name"], "tank", "{json}");
    assert_eq!(tank["served"], true, "{json}");
    assert!(
        tank["deadlist_blocks_freed"].as_u64() > Some(0)
            && tank["background_free_txgs"].as_u64() > Some(0)
            && tank["frees_finished"].as_u64() >= Some(1)
            && tank["command_latency_max_us"].as_u64() > Some(0),
        "{json}"
    );
    // What the deadlists hold is what only snapshots hold.
    let held: u64 = env
        .ok(&[
            "get",
            "-H",
            "-p",
            "-o",
            "value",
            "usedbysnapshots",
            "tank/vol",
        ])
        .trim()
        .parse()
        .expect("usedbysnapshots");
    assert_eq!(tank["deadlist_bytes"].as_u64(), Some(held), "{json}");

    let table = env.ok(&["stat", "snapshots", "-p"]);
    assert!(!table.contains("no server is running"), "{table}");
    let served = row(&table, "tank");
    for (column, expected) in [
        ("SNAPS", "2"),
        ("CREATED", "2"),
        ("DESTROYED", "1"),
        ("CLONES", "1"),
        ("DS-DESTR", "1"),
        ("CMDS", "4"),
    ] {
        assert_eq!(served[column], expected, "{column}: {table}");
    }
    let lines = env.ok(&["stat", "snapshots", "-H", "tank"]);
    assert_eq!(scripted(&lines, "tank.snapshots_created"), 2, "{lines}");
    assert_eq!(
        scripted(&lines, "tank.deadlist_blocks_freed"),
        tank["deadlist_blocks_freed"].as_u64().unwrap_or(0),
        "{lines}"
    );
    let both = env.cairn(&["stat", "snapshots", "-j", "-H"]);
    assert!(!both.success(), "-j with -H: {}", both.describe());

    // The server wrote each change's event to its stderr, with its txg.
    let deadline = Instant::now() + Duration::from_secs(5);
    let expected = [
        "cairn: snapshot tank/vol@b created in txg ",
        "cairn: snapshot tank/vol@c created in txg ",
        "cairn: clone tank/c of tank/vol@b created in txg ",
        "cairn: dataset tank/c destroyed in txg ",
        "cairn: snapshot tank/vol@b destroyed in txg ",
        "bytes of tank/vol@b in ",
    ];
    while !expected.iter().all(|line| server.stderr().contains(line)) {
        assert!(
            Instant::now() < deadline,
            "events missing from the server's stderr:\n{}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
