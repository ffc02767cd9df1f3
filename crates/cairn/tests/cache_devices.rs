//! Cache devices from the command line (issue 14): `pool create ... cache`, `pool add ...
//! cache`, `pool status` and `stat l2arc` while `cairn serve` reads through them, a restart
//! that finds the cache warm, and `pool remove` of a cache device. The volume keeps its data
//! out of RAM (`primarycache=metadata`), so reads over NBD (qemu-io, Debian package qemu-utils;
//! a missing tool fails the test) go below the ARC. `serve --l2-write-max-per-day` limits
//! what the cache devices are written once full, and `stat l2arc` shows it.

mod nbd_common;

use nbd_common::*;

/// `stat l2arc -H` of tank as `field -> value`.
fn l2_fields(env: &Env) -> std::collections::BTreeMap<String, u64> {
    env.ok(&["stat", "l2arc", "-H", "tank"])
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once('\t')?;
            Some((name.strip_prefix("tank.")?.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn cache_devices_are_added_listed_used_kept_across_restarts_and_removed() {
    let env = Env::new();
    let (d0, c0, c1) = (
        env.dev("d0.img"),
        format!("emu:nvme:{}", env.dev("c0.img")),
        env.dev("c1.img"),
    );
    env.ok(&[
        "pool", "create", "--size", "512M", "tank", &d0, "cache", &c0,
    ]);
    env.ok(&["pool", "add", "--size", "64M", "tank", "cache", &c1]);
    env.create_volume(
        "tank/vol",
        "64M",
        &[
            "volblocksize=16K",
            "primarycache=metadata",
            "compression=on",
        ],
    );
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("cache") && status.contains("c0.img") && status.contains("c1.img"),
        "{status}"
    );

    let mut server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["write -P 0x6b 0 32M"]);
    env.ok(&["pool", "sync", "tank"]);
    qemu_io_ok(&uri, &["read -P 0x6b 0 32M"]);
    // The feed writes in the background: the second pass finds at least part of it.
    std::thread::sleep(std::time::Duration::from_millis(500));
    qemu_io_ok(&uri, &["read -P 0x6b 0 32M"]);
    let fields = l2_fields(&env);
    assert!(fields["feed_blocks"] > 0, "nothing fed: {fields:?}");
    // The pattern compresses: the cache devices keep the blocks as the pool does, a sector or
    // so each instead of 16 KiB.
    assert!(
        fields["feed_bytes"] * 8 < fields["feed_blocks"] * (16 << 10),
        "blocks fed uncompressed: {fields:?}"
    );
    assert!(fields["hits"] > 0, "no hits: {fields:?}");
    assert_eq!(fields["devices"], 2);
    assert_eq!(
        fields["write_budget_bytes_per_day"], 0,
        "no budget unless asked"
    );
    // The tier's I/O goes through the cache devices' queues: their reads are the hits.
    let io = env.ok(&["stat", "io", "-H", "tank"]);
    let cache_reads: u64 = io
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once('\t')?;
            let name = name.strip_prefix("tank.cache")?;
            name.ends_with(".read_requests")
                .then(|| value.parse::<u64>().ok())?
        })
        .sum();
    assert!(cache_reads >= fields["hits"], "{io}");
    assert!(io.contains("tank.cache1.name\t"), "{io}");
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("used)") && status.contains("ONLINE"),
        "{status}"
    );
    server.terminate();

    // After a restart the rebuilt index serves the same blocks.
    let mut server = env.serve();
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["read -P 0x6b 0 32M"]);
    let fields = l2_fields(&env);
    assert!(fields["rebuild_blocks"] > 0, "nothing rebuilt: {fields:?}");
    assert!(fields["hits"] > 0, "no hits after the restart: {fields:?}");

    env.ok(&["pool", "remove", "tank", &c0]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        !status.contains("c0.img") && status.contains("c1.img"),
        "{status}"
    );
    qemu_io_ok(&uri, &["read -P 0x6b 0 32M"]);
    server.terminate();

    // A cache device that is gone costs nothing but its hits.
    std::fs::remove_file(env.dev("c1.img")).unwrap();
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("UNAVAIL") && status.contains("state: ONLINE"),
        "{status}"
    );
    let mut server = env.serve();
    qemu_io_ok(&server.uri("tank/vol"), &["read -P 0x6b 0 32M"]);
    server.terminate();
}

#[test]
fn the_daily_write_budget_is_set_by_serve_and_shown_by_stat_l2arc() {
    let env = Env::new();
    let (d0, c0) = (env.dev("d0.img"), env.dev("c0.img"));
    env.ok(&["pool", "create", "--size", "512M", "tank", &d0]);
    env.ok(&["pool", "add", "--size", "64M", "tank", "cache", &c0]);
    // Uncompressed, so that 128 MiB written are 128 MiB to feed (the pattern packs to
    // almost nothing with lz4).
    env.create_volume(
        "tank/vol",
        "128M",
        &[
            "volblocksize=16K",
            "primarycache=metadata",
            "compression=off",
        ],
    );
    let refused = env
        .cairn(&["serve", "--l2-write-max-per-day", "lots"])
        .failed();
    assert!(
        refused.stderr.contains("--l2-write-max-per-day lots"),
        "{}",
        refused.describe()
    );

    let mut server = env.serve_with_args(&["--l2-write-max-per-day", "1M"]);
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["write -P 0x3c 0 128M"]);
    env.ok(&["pool", "sync", "tank"]);
    // Twice the cache device's size read from the pool: its first fill is free, the rest is
    // over a budget of 1 MiB a day.
    qemu_io_ok(&uri, &["read -P 0x3c 0 128M"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let fields = loop {
        let fields = l2_fields(&env);
        if fields["feed_over_budget"] > 0 || std::time::Instant::now() > deadline {
            break fields;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    assert_eq!(fields["write_budget_bytes_per_day"], 1 << 20, "{fields:?}");
    assert!(fields["feed_over_budget"] > 0, "{fields:?}");
    assert!(fields["feed_bytes"] <= 65 << 20, "{fields:?}");
    assert!(fields["write_budget_left_bytes"] < 64 << 10, "{fields:?}");
    let table = env.ok(&["stat", "l2arc", "tank"]);
    assert!(
        table.contains("BUDGET/DAY") && table.contains("LEFT"),
        "{table}"
    );
    server.terminate();
}
