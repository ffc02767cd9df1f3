//! raidz pools end to end through the real `cairn` binary: `pool create ... raidz2` (and the
//! refusal of too few devices, naming the minimum), fio with verify through `cairn serve` over
//! NBD, a volume copied in with qemu-img and compared after damage to one child's data region
//! (rebuilt on read, CKSUM on that child alone in `pool status`, repaired by `pool scrub`,
//! `pool check` clean) and with a child gone (DEGRADED, every byte still read back).

mod nbd_common;

use nbd_common::*;
use std::io::{Seek, SeekFrom, Write};
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// The row of `name` in `pool status` (its READ, WRITE and CKSUM after the state).
fn status_row(status: &str, name: &str) -> Vec<String> {
    status
        .lines()
        .find(|line| line.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no row {name}:\n{status}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Writes `len` bytes of garbage at `offset` of `path`.
fn scribble(path: &str, offset: u64, len: usize) {
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.seek(SeekFrom::Start(offset)).unwrap();
    let garbage: Vec<u8> = (0..len).map(|i| (i * 7 + 13) as u8).collect();
    file.write_all(&garbage).unwrap();
    file.sync_all().unwrap();
}

/// fio over NBD: random 8 KiB writes, every block verified on the read-back pass.
fn fio_verify(env: &Env, uri: &str) {
    let job =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/fio/nbd-verify.fio");
    let output = env.path("fio.json");
    let fio_run = run_limited(
        std::process::Command::new(fio())
            .arg(&job)
            .arg("--output-format=json")
            .arg(format!("--output={}", output.display()))
            .env("NBD_URI", uri)
            .env("VERIFY_SIZE", (16 * MIB).to_string())
            .current_dir(env.dir.path()),
        Duration::from_secs(240),
    );
    let report = std::fs::read_to_string(&output).unwrap_or_default();
    assert!(
        fio_run.success(),
        "fio failed:\n{}\n{report}",
        fio_run.describe()
    );
    let all = format!("{}{}{report}", fio_run.stdout, fio_run.stderr);
    assert!(
        !all.contains("verify: bad") && !all.contains("verify failed"),
        "{all}"
    );
}

/// The export holds `source`, byte for byte.
fn assert_export_is(source: &std::path::Path, uri: &str) {
    let same = run(
        &qemu_img(),
        &["compare", "-f", "raw", "-F", "raw", path_str(source), uri],
    );
    assert!(
        same.stdout.contains("Images are identical"),
        "{}",
        same.describe()
    );
}

#[test]
fn raidz2_pool_serves_a_volume_through_damage_and_a_missing_child() {
    let _heavy = heavy();
    let env = Env::new();
    let devices: Vec<String> = (0..6).map(|i| env.dev(&format!("d{i}.img"))).collect();
    let mut args = vec!["pool", "create", "--size", "256M", "tank", "raidz2"];
    let refused = env
        .cairn(&[&args[..], &[&devices[0], &devices[1]]].concat())
        .failed();
    assert!(
        refused.stderr.contains("at least 3 devices"),
        "{}",
        refused.describe()
    );
    args.extend(devices.iter().map(String::as_str));
    env.ok(&args);
    let status = env.ok(&["pool", "status", "tank"]);
    assert_eq!(status_row(&status, "raidz2-0")[1], "ONLINE", "{status}");
    env.create_volume("tank/vol", "96M", &["volblocksize=16K"]);

    let server = env.serve();
    fio_verify(&env, &server.uri("tank/vol"));

    // A known image over the whole volume, compared byte for byte.
    let source = env.path("source.img");
    let data: Vec<u8> = (0..96 * MIB)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&source, &data).unwrap();
    qemu_copy_in(&source, &server.uri("tank/vol"));
    let mut server = server;
    server.terminate();

    // Garbage over 8 MiB of d2's data region: rebuilt on read, charged to d2 alone.
    scribble(&devices[2], 16 * MIB, (8 * MIB) as usize);
    let mut server = env.serve();
    assert_export_is(&source, &server.uri("tank/vol"));
    env.ok(&["pool", "scrub", "tank"]);
    let status = env.ok(&["pool", "status", "tank"]);
    server.terminate();
    let cksum = |device: &str| -> String { status_row(&status, device).last().unwrap().clone() };
    let d2_cksum: u64 = cksum(&devices[2]).parse().unwrap();
    assert!(d2_cksum > 0, "{status}");
    for (i, device) in devices.iter().enumerate().filter(|(i, _)| *i != 2) {
        assert_eq!(cksum(device), "0", "d{i}:\n{status}");
    }
    env.assert_pool_check_clean();

    // d4 gone: DEGRADED, every byte still there.
    env.ok(&["pool", "export", "tank"]);
    std::fs::remove_file(&devices[4]).unwrap();
    let dir = env.path("devs").display().to_string();
    env.ok(&["pool", "import", "-d", &dir, "tank"]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert_eq!(status_row(&status, "raidz2-0")[1], "DEGRADED", "{status}");
    let mut server = env.serve();
    assert_export_is(&source, &server.uri("tank/vol"));
    server.terminate();
}

#[test]
fn raidz_of_mixed_sizes_warns_and_uses_the_smallest() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("devs")).unwrap();
    let devices: Vec<String> = (0..3).map(|i| env.dev(&format!("m{i}.img"))).collect();
    for (device, size_bytes) in devices.iter().zip([320 * MIB, 256 * MIB, 256 * MIB]) {
        let file = std::fs::File::create(device).unwrap();
        file.set_len(size_bytes).unwrap();
    }
    let mut args = vec!["pool", "create", "tank", "raidz1"];
    args.extend(devices.iter().map(String::as_str));
    let run = env.cairn(&args).ok();
    assert!(
        run.stderr.contains("raidz1-0 differ in size") && run.stderr.contains("smallest"),
        "{}",
        run.describe()
    );
    let list = env.ok(&["pool", "list", "tank"]);
    // Three times the smallest device's data region (a little under 256M each), no more.
    let size = list
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap();
    assert!(
        size.ends_with('M') && size.trim_end_matches('M').parse::<f64>().unwrap() < 768.0,
        "{list}"
    );
    env.ok(&["pool", "destroy", "tank"]);
}
