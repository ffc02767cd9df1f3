//! fsx (the file system exerciser, crates.io `fsx`) on a cairn filesystem mounted through the
//! kernel's FUSE: random reads, writes, truncations, reopenings and (in one run) mmap reads and
//! writes against one file, each checked against fsx's own copy; no miscompare. CI runs a short
//! sequence per mode; BENCHMARKS.md records the long runs (1,000,000 operations).
//!
//! Needs root, /dev/fuse and the `fsx` binary (`.ci/run` installs it with `cargo install fsx`).

mod nbd_common;

use nbd_common::*;
use std::time::Duration;

/// Operations per run in CI.
const OPERATIONS: &str = "10000";

/// The fsx configuration: its defaults, or with the mmap operations off.
fn config(mmap: bool) -> String {
    let map_weight = if mmap { 10 } else { 0 };
    format!(
        "[weights]\nclose_open = 1\nread = 10\nwrite = 10\nmapread = {map_weight}\n\
         mapwrite = {map_weight}\ninvalidate = 1\ntruncate = 10\nfsync = 0\nfdatasync = 0\n"
    )
}

#[test]
fn fsx_finds_no_miscompare_with_and_without_mmap() {
    let _heavy = heavy();
    let binary = fsx_binary();
    let env = Env::new();
    env.create_pool();
    env.ok(&["create", "-o", "recordsize=16K", "tank/fs"]);
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    let mut server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    for (mmap, seed) in [(true, "7"), (false, "11")] {
        let config_path = env.path(&format!("fsx-{mmap}.toml"));
        std::fs::write(&config_path, config(mmap)).unwrap();
        let artifacts = env.path(&format!("fsx-artifacts-{mmap}"));
        std::fs::create_dir_all(&artifacts).unwrap();
        let run = run_limited(
            std::process::Command::new(&binary)
                .args(["-N", OPERATIONS, "-S", seed, "-f"])
                .arg(&config_path)
                .arg("-P")
                .arg(&artifacts)
                .arg(at.join(format!("file-{mmap}"))),
            Duration::from_secs(600),
        );
        let output = format!("{}{}", run.stdout, run.stderr);
        assert!(
            run.success() && output.contains("All operations completed A-OK"),
            "fsx (mmap {mmap}, seed {seed}) failed:\n{}\n{}",
            run.describe(),
            server.logs()
        );
    }
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, Duration::from_secs(60));
    env.assert_pool_check_clean();
}
