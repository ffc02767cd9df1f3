//! `cairn pool check` (issue 32, point 17), through the real binary:
//! - an exported pool is checked from its directory (`pool check -d DIR POOL`, as `zdb -e`):
//!   the whole check runs, nothing is written to its devices and the pool stays exported;
//! - a check of a live pool (a running server whose volume's intent log holds blocks) accounts
//!   for every allocated byte: when it finds no problem, allocated and referenced agree, the
//!   intent log's share shown on its own line.

mod nbd_common;

use nbd_common::*;
use std::path::PathBuf;

fn contents(paths: &[PathBuf]) -> Vec<Vec<u8>> {
    paths
        .iter()
        .map(|path| std::fs::read(path).expect("read device"))
        .collect()
}

/// The exact byte count of a `pool check` line such as `  allocated:  1.2M (1234 bytes)`.
fn bytes_of(report: &str, label: &str) -> u64 {
    let line = report
        .lines()
        .find(|line| line.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label} line in:\n{report}"));
    let inside = line
        .rsplit_once('(')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no byte count in {line:?}"));
    inside
        .parse()
        .unwrap_or_else(|_| panic!("no byte count in {line:?}"))
}

#[test]
fn an_exported_pool_is_checked_from_its_directory_and_never_written() {
    let env = Env::new();
    env.create_pool_of("128M");
    env.ok(&["create", "tank/fs"]);
    env.create_volume("tank/vol", "8M", &[]);
    env.ok(&["pool", "export", "tank"]);
    let devices = [env.path("devs/d0.img"), env.path("devs/d1.img")];
    let before = contents(&devices);
    let devs = env.path("devs").display().to_string();

    let report = env.ok(&["pool", "check", "-d", &devs, "tank"]);
    println!("{report}");
    assert!(report.contains("no problems found"), "{report}");
    assert!(report.contains("filesystems:"), "{report}");
    assert!(contents(&devices) == before, "pool check -d wrote");
    assert!(
        !env.ok(&["pool", "list", "-H"]).contains("tank"),
        "pool check -d left the pool imported"
    );
    // A relative directory works too, and a name not found there says where it looked.
    let relative = env.ok(&["pool", "check", "-d", "devs", "tank"]);
    assert!(relative.contains("no problems found"), "{relative}");
    let missing = env.cairn(&["pool", "check", "-d", &devs, "nosuch"]);
    assert!(!missing.success(), "{}", missing.describe());
    assert!(missing.stderr.contains(&devs), "{}", missing.describe());
    assert!(contents(&devices) == before);

    // An imported pool is checked by name: -d would look behind its owner's back.
    env.ok(&["pool", "import", "-d", &devs, "tank"]);
    let imported = env.cairn(&["pool", "check", "-d", &devs, "tank"]);
    assert!(!imported.success(), "{}", imported.describe());
    assert!(
        imported.stderr.contains("cairn pool check tank"),
        "{}",
        imported.describe()
    );
    let plain = env.ok(&["pool", "check", "tank"]);
    assert!(plain.contains("no problems found"), "{plain}");
}

#[test]
fn a_live_check_accounts_for_every_allocated_byte() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("128M");
    env.create_volume("tank/vol", "8M", &[]);
    let mut server = env.serve();
    let uri = server.uri("tank/vol");
    // Flushed writes: the volume's intent log holds blocks (and its next block, allocated
    // ahead) while the server runs.
    qemu_io_ok(
        &uri,
        &["write -P 7 0 64k", "flush", "write -P 8 1M 4k", "flush"],
    );
    for _ in 0..3 {
        let report = env.ok(&["pool", "check", "tank"]);
        println!("{report}");
        assert!(report.contains("no problems found"), "{report}");
        let allocated = bytes_of(&report, "allocated:");
        let referenced = bytes_of(&report, "referenced:");
        assert_eq!(
            allocated, referenced,
            "a clean check leaves allocated and referenced apart:\n{report}"
        );
        assert!(bytes_of(&report, "intent log:") > 0, "{report}");
        qemu_io_ok(&uri, &["write -P 9 2M 4k", "flush"]);
    }
    server.terminate();
    env.assert_pool_check_clean();
}
