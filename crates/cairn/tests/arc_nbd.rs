//! The ARC through the whole program: a real `cairn serve` with `--arc-max`, a stock NBD client
//! (qemu-io) reading a volume twice, and `cairn stat arc` showing the second pass served from
//! RAM; `primarycache` and the interval mode of `stat arc` work against the live server.

mod nbd_common;

use nbd_common::*;
use std::collections::BTreeMap;

fn arc_counters(env: &Env) -> BTreeMap<String, u64> {
    let out = env.ok(&["stat", "arc", "-H", "-p"]);
    out.lines()
        .map(|line| {
            let (name, value) = line
                .split_once('\t')
                .unwrap_or_else(|| panic!("not name<TAB>value: {line:?} in\n{out}"));
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {line:?}"));
            (name.to_string(), value)
        })
        .collect()
}

fn demand_data(counters: &BTreeMap<String, u64>) -> (u64, u64) {
    (
        counters["demand_data_hits"] + counters["demand_data_iohits"],
        counters["demand_data_misses"],
    )
}

#[test]
fn a_second_read_pass_is_served_from_the_arc() {
    let env = Env::new();
    let d0 = env.dev("d0.img");
    env.ok(&["pool", "create", "--size", "256M", "tank", &d0]);
    env.create_volume("tank/vol", "16M", &["volblocksize=4K"]);
    let server = env.serve_with_args(&["--arc-max", "64M"]);
    let uri = server.uri("tank/vol");
    qemu_io_ok(&uri, &["write -P 0x5a 0 4M", "flush"]);
    // Let a txg sync move the data from memory to the pool, so reads go through the cache.
    env.ok(&["pool", "sync", "tank"]);
    let limits = arc_counters(&env);
    assert_eq!(limits["c_max"], 64 << 20, "--arc-max: {limits:?}");
    let before = arc_counters(&env);
    qemu_io_ok(&uri, &["read -P 0x5a 0 4M"]);
    let first = arc_counters(&env);
    qemu_io_ok(&uri, &["read -P 0x5a 0 4M"]);
    let second = arc_counters(&env);
    let (hits_a, misses_a) = demand_data(&before);
    let (hits_b, misses_b) = demand_data(&first);
    let (hits_c, misses_c) = demand_data(&second);
    assert!(
        misses_b - misses_a + (hits_b - hits_a) >= 1024 / 2,
        "the first pass read through the cache: {first:?}"
    );
    assert_eq!(misses_c, misses_b, "the second pass missed: {second:?}");
    assert!(hits_c - hits_b >= 1024, "1024 blocks hit: {second:?}");
    assert!(second["size"] <= second["c"], "{second:?}");
    assert!(
        second["size"] >= 4 << 20,
        "the 4 MiB read is cached: {second:?}"
    );

    // primarycache=metadata: data read again is not kept.
    env.ok(&["set", "primarycache=metadata", "tank/vol"]);
    let got = env.ok(&["get", "-H", "-o", "value", "primarycache", "tank/vol"]);
    assert_eq!(got.trim(), "metadata");
    qemu_io_ok(&uri, &["write -P 0x6b 8M 1M", "flush"]);
    env.ok(&["pool", "sync", "tank"]);
    let before = arc_counters(&env);
    qemu_io_ok(&uri, &["read -P 0x6b 8M 1M", "read -P 0x6b 8M 1M"]);
    let after = arc_counters(&env);
    assert!(
        after["uncached_reads"] - before["uncached_reads"] >= 2 * 256,
        "both passes read from the pool: {after:?}"
    );

    // arc_max changes at once for the whole server; a cache over it shrinks.
    env.ok(&["pool", "set", "arc_max=2M", "tank"]);
    let shrunk = arc_counters(&env);
    assert_eq!(shrunk["c_max"], 2 << 20, "{shrunk:?}");
    assert!(
        shrunk["size"] <= 2 << 20,
        "the cache kept {} bytes",
        shrunk["size"]
    );
    let got = env.ok(&["pool", "get", "-H", "-p", "tank"]);
    assert!(got.contains("arc_max\t2097152\t"), "{got}");
    let refused = env.cairn(&["pool", "set", "arc_min=4M", "tank"]);
    assert!(
        !refused.success() && refused.stderr.contains("must not exceed arc_max"),
        "{}",
        refused.describe()
    );
    let refused = env.cairn(&["pool", "set", "arc_mx=4M", "tank"]);
    assert!(
        !refused.success() && refused.stderr.contains("arc_mx"),
        "{}",
        refused.describe()
    );

    // Interval mode polls the server: a header and COUNT lines.
    let out = env.ok(&["stat", "arc", "0.2", "3"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert!(
        lines[0].contains("HIT%") && lines[0].contains("SIZE"),
        "{out}"
    );
    drop(server);
}
