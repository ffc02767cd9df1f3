//! End-to-end tests of the `cairn` binary's smaller promises (issue 13, point 10): `-j` JSON
//! output of `pool list`, `pool status` and `list`; `pool status -v`; an idle server giving
//! freed space back without new writes; the `cairn up` hint naming the state directory really
//! in use; `pool import` pointing at `-d DIR`; device names shown beside, not glued to, their
//! pool.
//!
//! Real processes on sparse files; the server is driven with qemu-io (Debian package
//! qemu-utils; a missing one fails the test).

mod nbd_common;

use nbd_common::*;
use std::time::{Duration, Instant};

/// The `-H -p` row of `pool list` for `name`: (size, alloc, free).
fn space(env: &Env, name: &str) -> (u64, u64, u64) {
    let list = env.ok(&["pool", "list", "-H", "-p", name]);
    let fields: Vec<&str> = list.trim_end().split('\t').collect();
    let number = |index: usize| -> u64 {
        fields[index]
            .parse()
            .unwrap_or_else(|_| panic!("field {index} of {list:?}"))
    };
    (number(1), number(2), number(3))
}

/// JSON field `key` of `object` that must be an integer.
fn int(object: &Json, key: &str) -> u64 {
    object.number(key)
}

/// `-j` prints the numbers `-H -p` prints, under documented names; UNAVAIL pools and volumes
/// included.
#[test]
fn json_output_matches_the_exact_tables() {
    let env = Env::new();
    env.create_pool_of("128M");
    env.create_volume("tank/vol", "16M", &["volblocksize=8K"]);

    let list = env.ok(&["pool", "list", "-H", "-p", "tank"]);
    let exact: Vec<&str> = list.trim_end().split('\t').collect();
    let doc = Json::parse(&env.ok(&["pool", "list", "-j"])).expect("pool list -j");
    let version = doc.get("output_version").expect("output_version");
    assert_eq!(
        version.get("command").and_then(Json::as_str),
        Some("cairn pool list")
    );
    assert_eq!(int(version, "vers_major"), 1);
    let tank = doc.get("pools").and_then(|p| p.get("tank")).expect("tank");
    assert_eq!(tank.get("name").and_then(Json::as_str), Some("tank"));
    assert_eq!(tank.get("state").and_then(Json::as_str), Some("ONLINE"));
    assert_eq!(tank.get("reason"), Some(&Json::Null));
    assert_eq!(int(tank, "size_bytes").to_string(), exact[1]);
    assert_eq!(int(tank, "allocated_bytes").to_string(), exact[2]);
    assert_eq!(int(tank, "free_bytes").to_string(), exact[3]);
    assert_eq!(int(tank, "fragmentation_percent").to_string(), exact[4]);
    assert_eq!(int(tank, "capacity_percent").to_string(), exact[5]);
    let guid = tank.get("guid").and_then(Json::as_str).expect("guid");
    assert!(guid.parse::<u64>().is_ok(), "{guid}");

    let doc = Json::parse(&env.ok(&["pool", "status", "-j", "tank"])).expect("status -j");
    let tank = doc.get("pools").and_then(|p| p.get("tank")).expect("tank");
    assert_eq!(tank.get("guid").and_then(Json::as_str), Some(guid));
    assert!(int(tank, "txg") > 0);
    assert_eq!(tank.get("scan"), Some(&Json::Null), "never scrubbed");
    let vdevs = tank.get("vdevs").and_then(Json::as_array).expect("vdevs");
    assert_eq!(vdevs.len(), 1, "{vdevs:?}");
    let mirror = &vdevs[0];
    assert_eq!(mirror.get("name").and_then(Json::as_str), Some("mirror-0"));
    assert_eq!(
        mirror.get("vdev_type").and_then(Json::as_str),
        Some("mirror")
    );
    let leaves: Vec<&str> = mirror
        .get("children")
        .and_then(Json::as_array)
        .expect("children")
        .iter()
        .map(|leaf| leaf.get("name").and_then(Json::as_str).expect("leaf name"))
        .collect();
    assert_eq!(leaves, vec![env.dev("d0.img"), env.dev("d1.img")]);
    assert_eq!(int(mirror, "checksum_errors"), 0);

    let scripted = env.ok(&["list", "-H", "-p", "-o", "name,used,avail,refer,volsize"]);
    let doc = Json::parse(&env.ok(&["list", "-j"])).expect("list -j");
    let datasets = doc.get("datasets").expect("datasets");
    for line in scripted.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let dataset = datasets
            .get(fields[0])
            .unwrap_or_else(|| panic!("{} missing in {datasets:?}", fields[0]));
        assert_eq!(int(dataset, "used_bytes").to_string(), fields[1]);
        assert_eq!(int(dataset, "available_bytes").to_string(), fields[2]);
        assert_eq!(int(dataset, "referenced_bytes").to_string(), fields[3]);
        match dataset.get("volsize_bytes") {
            Some(Json::Null) => assert_eq!(fields[4], "-"),
            Some(size) => assert_eq!(
                size.as_u64().map(|v| v.to_string()).as_deref(),
                Some(fields[4])
            ),
            None => panic!("no volsize_bytes in {dataset:?}"),
        }
    }
    let vol = datasets.get("tank/vol").expect("tank/vol");
    assert_eq!(vol.get("type").and_then(Json::as_str), Some("volume"));
    assert_eq!(vol.get("pool").and_then(Json::as_str), Some("tank"));
    let block = vol
        .get("properties")
        .and_then(|p| p.get("volblocksize"))
        .expect("volblocksize");
    assert_eq!(block.get("value").and_then(Json::as_str), Some("8192"));
    assert_eq!(block.get("source").and_then(Json::as_str), Some("local"));

    // -j does not mix with the table flags.
    let run = env.cairn(&["pool", "list", "-j", "-H"]);
    assert_eq!(run.status.code(), Some(2), "{}", run.describe());
}

/// Flips every 4 KiB block of `path` that holds nothing but `byte` (a volume's data written
/// with that pattern; pool metadata never looks like that); returns how many.
fn damage_pattern_blocks(path: &str, byte: u8) -> usize {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let size = file.metadata().unwrap().len();
    let mut block = vec![0u8; 4096];
    let mut damaged = 0;
    for offset in (0..size).step_by(4096) {
        file.seek(SeekFrom::Start(offset)).unwrap();
        file.read_exact(&mut block).unwrap();
        if block.iter().all(|&b| b == byte) {
            block.iter_mut().for_each(|b| *b = !*b);
            file.seek(SeekFrom::Start(offset)).unwrap();
            file.write_all(&block).unwrap();
            damaged += 1;
        }
    }
    file.sync_all().unwrap();
    damaged
}

/// Data a scrub cannot repair (one copy, damaged): `pool status` counts it and points at -v;
/// `pool status -v` lists the places, as `status -j` does; a healthy pool says "No known data
/// errors" with -v too.
#[test]
fn status_v_lists_the_places_with_permanent_errors() {
    let env = Env::new();
    let dev = env.dev("solo.img");
    env.ok(&["pool", "create", "--size", "128M", "tank", &dev]);
    // Uncompressed: the damage is done by finding the pattern on the device.
    env.create_volume("tank/vol", "16M", &["compression=off"]);
    let verbose = env.ok(&["pool", "status", "-v", "tank"]);
    assert!(
        verbose.contains("errors: No known data errors"),
        "{verbose}"
    );

    let mut server = env.serve();
    qemu_io_ok(&server.uri("tank/vol"), &["write -P 0xa5 0 1M", "flush"]);
    server.terminate();
    drop(server);
    assert!(damage_pattern_blocks(&dev, 0xa5) > 0, "no data block found");

    let scrub = env.cairn(&["pool", "scrub", "tank"]);
    assert!(!scrub.success(), "{}", scrub.describe());
    let status = env.ok(&["pool", "status", "tank"]);
    let summary = status
        .lines()
        .find(|line| line.starts_with("errors: "))
        .unwrap_or_else(|| panic!("{status}"));
    assert!(summary.ends_with("use '-v' for a list"), "{status}");
    let count: usize = summary
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(count > 0, "{status}");

    let verbose = env.ok(&["pool", "status", "-v", "tank"]);
    let listed: Vec<&str> = verbose
        .lines()
        .skip_while(|line| !line.starts_with("errors: "))
        .skip(1)
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    assert_eq!(listed.len(), count, "{verbose}");
    let doc = Json::parse(&env.ok(&["pool", "status", "-j", "tank"])).expect("status -j");
    let tank = doc.get("pools").and_then(|p| p.get("tank")).expect("tank");
    let errors: Vec<&str> = tank
        .get("data_errors")
        .and_then(Json::as_array)
        .expect("data_errors")
        .iter()
        .filter_map(Json::as_str)
        .collect();
    assert_eq!(errors, listed);
    let scan = tank.get("scan").expect("scan");
    assert_eq!(int(scan, "unrecoverable_blocks") as usize, count);
}

/// Freed space comes back on an idle server: after a discard, with no further writes, ALLOC +
/// FREE reaches SIZE again (the deferred frees need a few more txgs, which an idle pool now
/// syncs on the txg timeout).
#[test]
fn an_idle_server_releases_freed_space() {
    let env = Env::new();
    env.create_pool_of("128M");
    // Uncompressed, so that 32 MiB of the pattern take 32 MiB.
    env.create_volume("tank/vol", "48M", &["compression=off"]);
    let server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["write -P 0x33 0 32M", "flush"]);
    env.ok(&["pool", "sync", "tank"]);
    let (_, written_alloc, _) = space(&env, "tank");
    assert!(written_alloc >= 32 << 20, "{written_alloc}");

    qemu_io_ok(&uri, &["discard 0 32M", "flush"]);
    env.ok(&["pool", "sync", "tank"]);
    let (_, alloc, _) = space(&env, "tank");
    assert!(alloc < 16 << 20, "the discard freed the blocks: {alloc}");

    // No writes from here on; the server must get there on its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (size, alloc, free) = space(&env, "tank");
        if alloc + free == size {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "ALLOC {alloc} + FREE {free} still short of SIZE {size} by {} after 60 s idle\n{}",
            size - alloc - free,
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// With CAIRN_STATE_DIR set, `cairn up` names that directory in its hint, and the hint works.
#[test]
fn up_hints_the_state_directory_it_uses() {
    let env = Env::new();
    let state = env.path("elsewhere");
    let data = env.path("data");
    let run = run_limited(
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["up", "--no-serve", "--size", "128M", "--volsize", "16M"])
            .arg("--data-dir")
            .arg(&data)
            .env("CAIRN_STATE_DIR", &state)
            .env("HOME", env.dir.path())
            .current_dir(env.dir.path()),
        TOOL_TIME,
    )
    .ok();
    let hint = run
        .stdout
        .lines()
        .find_map(|line| line.split_once("cairn --state-dir "))
        .map(|(_, rest)| rest.trim_end_matches(" ..."))
        .unwrap_or_else(|| panic!("no hint:\n{}", run.describe()));
    assert_eq!(std::path::Path::new(hint), state, "{}", run.describe());
    let list = run_limited(
        std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["--state-dir", hint, "pool", "list", "-H"])
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", env.dir.path()),
        TOOL_TIME,
    )
    .ok();
    assert!(list.stdout.starts_with("cairn\t"), "{}", list.describe());
}

/// `pool import` that finds nothing says how to search elsewhere.
#[test]
fn import_that_finds_nothing_mentions_d_dir() {
    let env = Env::new();
    let empty = env.path("empty");
    std::fs::create_dir(&empty).unwrap();
    let empty = empty.to_str().unwrap();
    let out = env.ok(&["pool", "import", "-d", empty]);
    assert!(
        out.contains("no pools available to import") && out.contains("-d DIR"),
        "{out}"
    );
    let run = env.cairn(&["pool", "import", "-d", empty, "tank"]);
    assert!(
        !run.success() && run.stderr.contains("-d DIR"),
        "{}",
        run.describe()
    );
}

/// Device statistics name the pool and the device in separate columns: an absolute device
/// path is not glued to the pool name (`tank//…`).
#[test]
fn device_rows_show_pool_and_path_apart() {
    let env = Env::new();
    env.create_pool_of("128M");
    let out = env.ok(&["stat", "io"]);
    assert!(!out.contains("tank//"), "{out}");
    let d0 = env.dev("d0.img");
    let row = out
        .lines()
        .find(|line| line.contains(&d0))
        .unwrap_or_else(|| panic!("{d0} not shown:\n{out}"));
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(words[..2], ["tank", d0.as_str()], "{out}");
    assert!(
        out.lines()
            .any(|line| line.starts_with("POOL") && line.contains("DEVICE")),
        "{out}"
    );
}
