//! `cairn pool iostat -l/-w/-q/-r` against a real `cairn serve`: a volume written by qemu-io in
//! known sizes and counts, then the device views read back in scripted exact form (`-H -p`)
//! and checked against the workload and against `cairn stat io`'s counters of the same queues.
//! Last, with the server stopped, the views open the pool themselves and say so.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;

/// Writes of 8 KiB the workload makes (contiguous, so the txg sync can merge them).
const WRITES: u64 = 256;
const LATENCY_BUCKETS: usize = 27;
const SIZE_BUCKETS: usize = 16;

/// Scripted output as rows of fields.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| line.split('\t').map(str::to_string).collect())
        .collect()
}

fn number(field: &str, text: &str) -> u64 {
    field
        .parse()
        .unwrap_or_else(|_| panic!("`{field}` is not a number in:\n{text}"))
}

/// `cairn stat io -H -p`'s `field` of the device named `device` (a leaf of the pool).
fn stat_io_field(env: &Env, device: &str, field: &str) -> u64 {
    let text = env.ok(&["stat", "io", "-H", "-p", "tank"]);
    let prefix = text
        .lines()
        .find_map(|line| {
            let (key, value) = line.split_once('\t')?;
            (value == device && key.ends_with(".name")).then(|| key.trim_end_matches(".name"))
        })
        .unwrap_or_else(|| panic!("{device} in stat io:\n{text}"))
        .to_string();
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{prefix}.{field}\t")))
        .map(|value| number(value, &text))
        .unwrap_or_else(|| panic!("{prefix}.{field} in stat io:\n{text}"))
}

/// The histogram lines of `name` in scripted `-w`/`-r` output: bucket floor, then counts.
fn histogram_of(text: &str, name: &str, buckets: usize) -> Vec<(u64, Vec<u64>)> {
    let lines: Vec<(u64, Vec<u64>)> = rows(text)
        .into_iter()
        .filter(|row| row[0] == name)
        .map(|row| {
            (
                number(&row[1], text),
                row[2..].iter().map(|field| number(field, text)).collect(),
            )
        })
        .collect();
    assert_eq!(lines.len(), buckets, "{name}'s buckets in:\n{text}");
    lines
}

fn column_sum(lines: &[(u64, Vec<u64>)], column: usize) -> u64 {
    lines.iter().map(|(_, counts)| counts[column]).sum()
}

#[test]
fn device_views_show_the_workload_sizes_waits_and_queues() {
    let _heavy = heavy();
    let env = Env::new();
    let (d0, d1, log) = (env.dev("d0.img"), env.dev("d1.img"), env.dev("log.img"));
    env.ok(&[
        "pool", "create", "--size", "512M", "tank", "mirror", &d0, &d1, "log", &log,
    ]);
    // primarycache=metadata: reads of its data go to the devices; compression=off: each
    // 8 KiB block of the pattern is written as 8 KiB.
    env.create_volume(
        "tank/vol",
        "64M",
        &[
            "volblocksize=8K",
            "primarycache=metadata",
            "compression=off",
        ],
    );
    let mut server = env.serve();
    let uri = server.uri("tank/vol");

    // 256 separate 8 KiB writes side by side, a flush (the intent log's blocks go to the log
    // device), a txg sync (the blocks go to both sides of the mirror), then a read back (from
    // the devices: the volume keeps no data in RAM).
    let mut commands: Vec<String> = (0..WRITES)
        .map(|i| format!("write -P 0x5a {} 8k", i * 8192))
        .collect();
    commands.push("flush".into());
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    qemu_io_ok(&uri, &commands);
    env.ok(&["pool", "sync", "tank"]);
    qemu_io_ok(&uri, &[&format!("read -P 0x5a 0 {}", WRITES * 8192)]);

    // -r: every data block is an 8 KiB individual async write on each side; the txg sync
    // merged them into larger device calls.
    let sizes = env.ok(&["pool", "iostat", "-r", "-v", "-H", "-p", "tank"]);
    let header = [
        "SYNCR", "CACHER", "SYNCW", "LOG", "ASYNCR", "ASYNCW", "CACHEW", "SCRUB",
    ];
    let column = |class: &str, aggregated: bool| {
        2 * header.iter().position(|c| *c == class).unwrap() + usize::from(aggregated)
    };
    for side in [&d0, &d1] {
        let lines = histogram_of(&sizes, side, SIZE_BUCKETS);
        let (floor, counts) = &lines[4];
        assert_eq!(*floor, 8192, "{sizes}");
        let individual_8k = counts[column("ASYNCW", false)];
        assert!(
            individual_8k >= WRITES,
            "{side}: {individual_8k} async writes of 8K, expected at least {WRITES}:\n{sizes}"
        );
        let aggregated_large: u64 = lines
            .iter()
            .filter(|(floor, _)| *floor >= 64 << 10)
            .map(|(_, counts)| counts[column("ASYNCW", true)])
            .sum();
        assert!(
            aggregated_large >= 1,
            "{side}: no aggregated async write of 64K or more:\n{sizes}"
        );
        let aggregated_calls = column_sum(&lines, column("ASYNCW", true));
        assert!(
            aggregated_calls < individual_8k / 4,
            "{side}: {aggregated_calls} aggregates for {individual_8k} writes of 8K:\n{sizes}"
        );
    }
    // The read back went to the devices (one side or the other of the mirror), 8K by 8K.
    let reads_8k: u64 = [&d0, &d1]
        .iter()
        .map(|side| {
            let (_, counts) = &histogram_of(&sizes, side, SIZE_BUCKETS)[4];
            counts[column("SYNCR", false)] + counts[column("ASYNCR", false)]
        })
        .sum();
    assert!(reads_8k >= WRITES, "{reads_8k} reads of 8K:\n{sizes}");
    // The intent log's blocks went to the log device, as log writes.
    let log_lines = histogram_of(&sizes, &log, SIZE_BUCKETS);
    assert!(column_sum(&log_lines, column("LOG", false)) > 0, "{sizes}");
    assert_eq!(
        column_sum(&log_lines, column("ASYNCW", false)),
        0,
        "{sizes}"
    );

    // -w: each write is counted once per column pair, so a side's TOTAL-W and DISK-W add up
    // to its write requests, which `stat io` counts on the same queue. The server is idle
    // now, but allow for a background txg between the two reads.
    let before = stat_io_field(&env, &d0, "write_requests");
    let waits = env.ok(&["pool", "iostat", "-w", "-v", "-H", "-p", "tank"]);
    let after = stat_io_field(&env, &d0, "write_requests");
    let lines = histogram_of(&waits, &d0, LATENCY_BUCKETS);
    assert_eq!(lines[0].0, 1, "the first bucket starts at 1 us:\n{waits}");
    assert_eq!(lines[10].0, 1024, "{waits}");
    let (total_w, disk_w) = (column_sum(&lines, 1), column_sum(&lines, 3));
    assert_eq!(total_w, disk_w, "{waits}");
    assert!(
        (before..=after).contains(&total_w),
        "{d0}: -w counts {total_w} writes, stat io {before}..{after}:\n{waits}"
    );
    assert!(total_w >= WRITES, "{waits}");
    let reads = stat_io_field(&env, &d0, "read_requests");
    assert_eq!(column_sum(&lines, 0), reads, "TOTAL-R of {d0}:\n{waits}");
    // The pool line sums its devices (data and log).
    let pool_lines = histogram_of(&waits, "tank", LATENCY_BUCKETS);
    let device_sum: u64 = [&d0, &d1, &log]
        .iter()
        .map(|device| column_sum(&histogram_of(&waits, device, LATENCY_BUCKETS), 1))
        .sum();
    assert_eq!(column_sum(&pool_lines, 1), device_sum, "{waits}");

    // -l: waits of a written and read pool are there, and a device's own time is part of the
    // total.
    let latency = env.ok(&["pool", "iostat", "-l", "-v", "-H", "-p", "tank"]);
    let latency_rows = rows(&latency);
    let mut reads_seen = 0;
    for name in ["tank", d0.as_str(), d1.as_str(), log.as_str()] {
        let row = latency_rows
            .iter()
            .find(|row| row[0] == name)
            .unwrap_or_else(|| panic!("{name} in:\n{latency}"));
        assert_eq!(row.len(), 16, "{latency}");
        // NAME ALLOC FREE R-OPS W-OPS R-BW W-BW TOTAL-R TOTAL-W DISK-R DISK-W SYNCQ-R SYNCQ-W
        // ASYNCQ-R ASYNCQ-W SCRUB; a wait is `-` where nothing was done.
        let wait = |index: usize| (row[index] != "-").then(|| number(&row[index], &latency));
        assert!(
            number(&row[6], &latency) > 0,
            "{name} was written:\n{latency}"
        );
        let (total_w, disk_w) = (wait(8).unwrap_or(0), wait(10).unwrap_or(0));
        assert!(total_w > 0, "{name}: write waits are shown:\n{latency}");
        assert!(
            disk_w <= total_w,
            "{name}: disk wait within total:\n{latency}"
        );
        if let (Some(total_r), Some(disk_r)) = (wait(7), wait(9)) {
            assert!(
                disk_r <= total_r,
                "{name}: disk wait within total:\n{latency}"
            );
            reads_seen += 1;
        }
    }
    assert!(
        reads_seen >= 2,
        "read waits of the pool and a side:\n{latency}"
    );
    let pool_row = latency_rows.iter().find(|row| row[0] == "tank").unwrap();
    assert!(number(&pool_row[1], &latency) > 0, "ALLOC:\n{latency}");
    assert!(
        latency_rows.iter().any(|row| row[0] == "logs"),
        "a logs section:\n{latency}"
    );

    // -q: one pending and one active count per class, all numbers.
    let queues = env.ok(&["pool", "iostat", "-q", "-v", "-H", "-p"]);
    let queue_rows = rows(&queues);
    assert!(queue_rows.iter().any(|row| row[0] == "tank"), "{queues}");
    for row in queue_rows.iter().filter(|row| row[0] != "logs") {
        assert_eq!(row.len(), 7 + 16, "{queues}");
        for field in &row[7..] {
            number(field, &queues);
        }
    }

    // Interval mode prints what happened in each interval: the second report of an idle
    // server holds far fewer writes than the first (which covers the whole workload).
    let interval = env.ok(&["pool", "iostat", "-w", "-H", "-p", "tank", "1", "2"]);
    let all = rows(&interval);
    assert_eq!(all.len(), 2 * LATENCY_BUCKETS, "{interval}");
    let sum_w =
        |lines: &[Vec<String>]| -> u64 { lines.iter().map(|row| number(&row[3], &interval)).sum() };
    let (first, second) = all.split_at(LATENCY_BUCKETS);
    assert!(sum_w(first) >= 2 * WRITES, "{interval}");
    assert!(
        sum_w(second) < WRITES,
        "the second report covers one idle second:\n{interval}"
    );

    // Without flags the per-dataset report is unchanged.
    let datasets = env.ok(&["pool", "iostat", "-H", "-p"]);
    assert!(
        rows(&datasets)
            .iter()
            .any(|row| row[0] == "tank/vol" && row.len() == 12),
        "{datasets}"
    );

    // Without a server the pool is opened here: counters from zero, and a note saying so.
    server.terminate();
    let alone = env.cairn(&["pool", "iostat", "-l", "-H", "-p", "tank"]);
    assert!(alone.success(), "{}", alone.describe());
    assert!(
        alone.stderr.contains("no server runs"),
        "{}",
        alone.describe()
    );
    let row = rows(&alone.stdout)
        .into_iter()
        .find(|row| row[0] == "tank")
        .unwrap_or_else(|| panic!("{}", alone.describe()));
    assert_eq!(
        row[4],
        "0",
        "no writes since opened here: {}",
        alone.describe()
    );
    env.assert_pool_check_clean();
}
