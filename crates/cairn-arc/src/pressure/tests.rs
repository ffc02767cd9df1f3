//! Tests of `pressure`: the readers against fake `/proc` and cgroup trees (v1, v2, nested
//! limits, namespaces, malformed files), the default limits, and the controller's invariants
//! (thresholds, bounded steps, hold-off, growth clear of the thresholds, random walks).

use super::reading::{
    CGROUP_UNLIMITED_BYTES, cgroup_levels, parse_meminfo_bytes, parse_psi_some_avg10,
};
use super::*;
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

const GIB: u64 = 1 << 30;

/// A fake filesystem root under the temp directory, removed when dropped.
struct FakeRoot {
    path: PathBuf,
}

impl FakeRoot {
    fn new(name: &str) -> FakeRoot {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "cairn-pressure-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        FakeRoot { path }
    }

    fn write(&self, relative: &str, contents: &str) -> &FakeRoot {
        let path = self.path.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap();
        self
    }

    fn read(&self) -> MemoryReading {
        read_memory_at(&self.path)
    }
}

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

const MEMINFO: &str = "MemTotal:       24683656 kB\n\
                       MemFree:        24369936 kB\n\
                       MemAvailable:   24331200 kB\n\
                       Buffers:             680 kB\n";

const PSI_IDLE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                        full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

fn psi(some_avg10: &str) -> String {
    format!(
        "some avg10={some_avg10} avg60=1.00 avg300=0.50 total=12345\n\
         full avg10=0.10 avg60=0.00 avg300=0.00 total=99\n"
    )
}

#[test]
fn meminfo_values_are_read_in_bytes() {
    let root = FakeRoot::new("meminfo");
    root.write("proc/meminfo", MEMINFO);
    let reading = root.read();
    assert_eq!(reading.ram_total_bytes, Some(24_683_656 * 1024));
    assert_eq!(reading.ram_available_bytes, Some(24_331_200 * 1024));
    assert_eq!(reading.cgroup_limit_bytes, None);
    assert_eq!(reading.psi_some_avg10_percent, None);
}

#[test]
fn malformed_meminfo_gives_none() {
    let cases = [
        ("", None, None),
        ("garbage\n\n:::\n", None, None),
        (
            "MemTotal: lots kB\nMemAvailable: 100 kB\n",
            None,
            Some(102_400),
        ),
        ("MemTotal: 100\nMemAvailable: 100 MB\n", None, None),
        ("MemTotal: 100 kB extra\nMemAvailable: -5 kB\n", None, None),
        ("MemTotal: 18446744073709551615 kB\n", None, None),
        ("MemTotal: 1 kB\n", Some(1024), None),
        // The first line with the key decides, so a later good one does not mask garbage.
        ("MemTotal: x kB\nMemTotal: 4 kB\n", None, None),
        ("MemTotalish: 4 kB\nMemAvailable:2 kB\n", None, Some(2048)),
    ];
    for (text, total, available) in cases {
        assert_eq!(parse_meminfo_bytes(text, "MemTotal"), total, "{text:?}");
        assert_eq!(
            parse_meminfo_bytes(text, "MemAvailable"),
            available,
            "{text:?}"
        );
    }
    let root = FakeRoot::new("meminfo-bad");
    root.write("proc/meminfo", "MemTotal: 12 bytes\n");
    assert_eq!(root.read(), MemoryReading::default());
}

#[test]
fn a_missing_tree_gives_an_empty_reading() {
    let root = FakeRoot::new("empty");
    assert_eq!(root.read(), MemoryReading::default());
    assert_eq!(
        read_memory_at(&root.path.join("does/not/exist")),
        MemoryReading::default()
    );
}

#[test]
fn cgroup_v2_limit_current_and_inactive_file_are_read() {
    let root = FakeRoot::new("v2");
    root.write("proc/meminfo", MEMINFO)
        .write("proc/self/cgroup", "0::/system.slice/cairn.service\n")
        .write(
            "sys/fs/cgroup/system.slice/cairn.service/memory.max",
            "2147483648\n",
        )
        .write(
            "sys/fs/cgroup/system.slice/cairn.service/memory.high",
            "max\n",
        )
        .write(
            "sys/fs/cgroup/system.slice/cairn.service/memory.current",
            "1073741824\n",
        )
        .write(
            "sys/fs/cgroup/system.slice/cairn.service/memory.stat",
            "anon 600000000\nfile 400000000\nactive_file 100\ninactive_file 300000000\n",
        );
    let reading = root.read();
    assert_eq!(reading.cgroup_limit_bytes, Some(2 * GIB));
    assert_eq!(reading.cgroup_current_bytes, Some(GIB));
    assert_eq!(reading.cgroup_inactive_file_bytes, Some(300_000_000));
    assert_eq!(reading.cgroup_working_set_bytes(), Some(GIB - 300_000_000));
    assert_eq!(usable_memory_bytes(&reading), Some(2 * GIB));
}

#[test]
fn cgroup_v2_max_means_no_limit() {
    let root = FakeRoot::new("v2-max");
    root.write("proc/self/cgroup", "0::/user.slice\n")
        .write("sys/fs/cgroup/user.slice/memory.max", "max\n")
        .write("sys/fs/cgroup/user.slice/memory.high", "max\n")
        .write("sys/fs/cgroup/user.slice/memory.current", "5000\n");
    let reading = root.read();
    assert_eq!(reading.cgroup_limit_bytes, None);
    // Without a limit the process's own charge is still reported, for statistics.
    assert_eq!(reading.cgroup_current_bytes, Some(5000));
    assert_eq!(PressureConfig::default().shortage(&reading), None);
}

#[test]
fn cgroup_v2_high_below_max_binds() {
    let root = FakeRoot::new("v2-high");
    root.write("proc/self/cgroup", "0::/a\n")
        .write("sys/fs/cgroup/a/memory.max", "4294967296\n")
        .write("sys/fs/cgroup/a/memory.high", "1073741824\n")
        .write("sys/fs/cgroup/a/memory.current", "10\n");
    assert_eq!(root.read().cgroup_limit_bytes, Some(GIB));
}

#[test]
fn cgroup_v2_tightest_ancestor_limit_binds() {
    let root = FakeRoot::new("v2-ancestor");
    root.write("proc/self/cgroup", "0::/pod/ctr\n")
        .write("sys/fs/cgroup/pod/ctr/memory.max", "max\n")
        .write("sys/fs/cgroup/pod/ctr/memory.current", "100\n")
        .write("sys/fs/cgroup/pod/memory.max", "536870912\n")
        .write("sys/fs/cgroup/pod/memory.current", "300\n")
        .write("sys/fs/cgroup/pod/memory.stat", "inactive_file 50\n")
        .write("sys/fs/cgroup/memory.max", "1073741824\n");
    let reading = root.read();
    assert_eq!(reading.cgroup_limit_bytes, Some(512 * MIB));
    assert_eq!(
        reading.cgroup_current_bytes,
        Some(300),
        "the pod's charge, not the leaf's"
    );
    assert_eq!(reading.cgroup_inactive_file_bytes, Some(50));

    // Equal limits: the fuller level (the parent, charged for its other children too) is
    // the one that reaches its limit first.
    root.write("sys/fs/cgroup/pod/ctr/memory.max", "536870912\n");
    assert_eq!(root.read().cgroup_current_bytes, Some(300));
    root.write("sys/fs/cgroup/pod/ctr/memory.current", "400\n");
    assert_eq!(root.read().cgroup_current_bytes, Some(400));
}

#[test]
fn cgroup_namespace_root_is_the_process_cgroup() {
    // Inside a cgroup namespace the process sees "0::/" and its cgroup at the mount.
    let root = FakeRoot::new("v2-ns");
    root.write("proc/self/cgroup", "0::/\n")
        .write("sys/fs/cgroup/memory.max", "268435456\n")
        .write("sys/fs/cgroup/memory.current", "1000\n");
    assert_eq!(root.read().cgroup_limit_bytes, Some(256 * MIB));
    // Without a namespace the path may name the host's directory, absent in the container.
    let root = FakeRoot::new("v2-host-path");
    root.write("proc/self/cgroup", "0::/kubepods/burstable/pod1/abc\n")
        .write("sys/fs/cgroup/memory.max", "268435456\n");
    assert_eq!(root.read().cgroup_limit_bytes, Some(256 * MIB));
}

#[test]
fn malformed_cgroup_files_give_none() {
    let root = FakeRoot::new("v2-bad");
    root.write("proc/self/cgroup", "0::/a\n")
        .write("sys/fs/cgroup/a/memory.max", "12 GB\n")
        .write("sys/fs/cgroup/a/memory.high", "-1\n")
        .write("sys/fs/cgroup/a/memory.current", "\n")
        .write(
            "sys/fs/cgroup/a/memory.stat",
            "inactive_file\ninactive_file 5 6\n",
        );
    let reading = root.read();
    assert_eq!(reading.cgroup_limit_bytes, None);
    assert_eq!(reading.cgroup_current_bytes, None);
    assert_eq!(reading.cgroup_inactive_file_bytes, None);

    // A path that climbs out of the hierarchy is refused, not followed.
    let root = FakeRoot::new("v2-climb");
    root.write("proc/self/cgroup", "0::/../../etc\n")
        .write("sys/fs/cgroup/memory.max", "1000000\n");
    assert_eq!(root.read().cgroup_limit_bytes, None);
    assert_eq!(cgroup_levels("relative/path"), None);
    assert_eq!(cgroup_levels("/a/./b"), None);

    // A cgroup file that is not a cgroup file.
    let root = FakeRoot::new("v2-junk");
    root.write("proc/self/cgroup", "nonsense\n\n0:\n")
        .write("sys/fs/cgroup/memory.max", "1000000\n");
    assert_eq!(root.read().cgroup_limit_bytes, None);
}

#[test]
fn cgroup_levels_run_from_the_leaf_to_the_mount() {
    let levels = cgroup_levels("/a//b/").unwrap();
    assert_eq!(
        levels,
        vec![PathBuf::from("a/b"), PathBuf::from("a"), PathBuf::new()]
    );
    assert_eq!(cgroup_levels("/").unwrap(), vec![PathBuf::new()]);
}

#[test]
fn cgroup_v1_is_the_fallback() {
    let root = FakeRoot::new("v1");
    root.write(
        "proc/self/cgroup",
        "9:name=systemd:/\n4:cpu,memory:/docker/abc\n0::/\n",
    )
    .write(
        "sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
        "536870912\n",
    )
    .write(
        "sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes",
        "400000000\n",
    )
    .write(
        "sys/fs/cgroup/memory/docker/abc/memory.stat",
        "inactive_file 7\ntotal_inactive_file 100000000\n",
    )
    .write(
        "sys/fs/cgroup/memory/memory.limit_in_bytes",
        "9223372036854771712\n",
    );
    let reading = root.read();
    assert_eq!(reading.cgroup_limit_bytes, Some(512 * MIB));
    assert_eq!(reading.cgroup_current_bytes, Some(400_000_000));
    assert_eq!(reading.cgroup_inactive_file_bytes, Some(100_000_000));

    // v1's "unlimited" is a huge number, not a limit.
    let root = FakeRoot::new("v1-unlimited");
    root.write("proc/self/cgroup", "4:memory:/x\n")
        .write(
            "sys/fs/cgroup/memory/x/memory.limit_in_bytes",
            "9223372036854771712\n",
        )
        .write("sys/fs/cgroup/memory/x/memory.usage_in_bytes", "1234\n");
    let reading = root.read();
    assert_eq!(reading.cgroup_limit_bytes, None);
    assert_eq!(reading.cgroup_current_bytes, Some(1234));
}

#[test]
fn cgroup_v2_limit_wins_over_v1() {
    let root = FakeRoot::new("v2-over-v1");
    root.write("proc/self/cgroup", "4:memory:/x\n0::/y\n")
        .write("sys/fs/cgroup/y/memory.max", "1073741824\n")
        .write(
            "sys/fs/cgroup/memory/x/memory.limit_in_bytes",
            "536870912\n",
        );
    assert_eq!(root.read().cgroup_limit_bytes, Some(GIB));
}

#[test]
fn psi_prefers_the_cgroup_file() {
    let root = FakeRoot::new("psi");
    root.write("proc/pressure/memory", &psi("3.25"));
    assert_eq!(root.read().psi_some_avg10_percent, Some(3.25));
    root.write("proc/self/cgroup", "0::/svc\n")
        .write("sys/fs/cgroup/svc/memory.pressure", &psi("42.50"));
    assert_eq!(root.read().psi_some_avg10_percent, Some(42.5));
    // An unreadable cgroup file falls back to the system's.
    root.write("sys/fs/cgroup/svc/memory.pressure", "some avg10=oops\n");
    assert_eq!(root.read().psi_some_avg10_percent, Some(3.25));
    root.write("proc/pressure/memory", PSI_IDLE);
    assert_eq!(root.read().psi_some_avg10_percent, Some(0.0));
}

#[test]
fn malformed_psi_gives_none() {
    for text in [
        "",
        "full avg10=5.00 avg60=0.00 avg300=0.00 total=0\n",
        "some avg60=5.00\n",
        "some avg10=\n",
        "some avg10=NaN avg60=0\n",
        "some avg10=inf\n",
        "some avg10=-1.0\n",
        "some avg10=100.5\n",
        "somewhat avg10=5.0\n",
    ] {
        assert_eq!(parse_psi_some_avg10(text), None, "{text:?}");
    }
    assert_eq!(parse_psi_some_avg10("some avg10=100.00\n"), Some(100.0));
}

#[test]
fn read_memory_on_this_machine() {
    let reading = read_memory();
    if !cfg!(target_os = "linux") {
        assert_eq!(reading.ram_total_bytes, None);
        return;
    }
    let total_bytes = reading.ram_total_bytes.expect("MemTotal on Linux");
    let available_bytes = reading.ram_available_bytes.expect("MemAvailable on Linux");
    assert!(total_bytes >= 64 * MIB, "MemTotal {total_bytes}");
    assert!(available_bytes > 0 && available_bytes <= total_bytes);
    if let Some(percent) = reading.psi_some_avg10_percent {
        assert!((0.0..=100.0).contains(&percent));
    }
    if let Some(limit_bytes) = reading.cgroup_limit_bytes {
        assert!(limit_bytes < CGROUP_UNLIMITED_BYTES);
    }
    let arc_max_bytes = default_arc_max_bytes(&reading);
    assert!(arc_max_bytes >= ARC_MAX_FLOOR_BYTES);
    assert!(arc_max_bytes <= total_bytes.max(2 * ARC_MAX_FLOOR_BYTES) / 2);
}

#[test]
fn defaults_follow_ram_and_the_cgroup_limit() {
    let ram = MemoryReading {
        ram_total_bytes: Some(16 * GIB),
        ..MemoryReading::default()
    };
    assert_eq!(usable_memory_bytes(&ram), Some(16 * GIB));
    assert_eq!(default_arc_max_bytes(&ram), 8 * GIB);
    let contained = MemoryReading {
        cgroup_limit_bytes: Some(2 * GIB),
        ..ram
    };
    assert_eq!(usable_memory_bytes(&contained), Some(2 * GIB));
    assert_eq!(default_arc_max_bytes(&contained), GIB);
    let limit_above_ram = MemoryReading {
        cgroup_limit_bytes: Some(64 * GIB),
        ..ram
    };
    assert_eq!(default_arc_max_bytes(&limit_above_ram), 8 * GIB);
    let limit_only = MemoryReading {
        cgroup_limit_bytes: Some(4 * GIB),
        ..MemoryReading::default()
    };
    assert_eq!(default_arc_max_bytes(&limit_only), 2 * GIB);
    let tiny = MemoryReading {
        cgroup_limit_bytes: Some(100 * MIB),
        ..ram
    };
    assert_eq!(default_arc_max_bytes(&tiny), 64 * MIB);
    assert_eq!(usable_memory_bytes(&MemoryReading::default()), None);
    assert_eq!(default_arc_max_bytes(&MemoryReading::default()), 64 * MIB);

    assert_eq!(default_arc_min_bytes(8 * GIB), 256 * MIB);
    assert_eq!(default_arc_min_bytes(GIB), 32 * MIB);
    assert_eq!(default_arc_min_bytes(64 * MIB), 32 * MIB);
    assert_eq!(
        default_arc_min_bytes(16 * MIB),
        16 * MIB,
        "never above arc_max"
    );
    assert_eq!(default_arc_min_bytes(0), 0);
}

// ---- The controller ----

const MIN: u64 = 256 * MIB;
const MAX: u64 = 8 * GIB;

fn plenty() -> MemoryReading {
    MemoryReading {
        ram_total_bytes: Some(64 * GIB),
        ram_available_bytes: Some(40 * GIB),
        cgroup_limit_bytes: Some(32 * GIB),
        cgroup_current_bytes: Some(10 * GIB),
        cgroup_inactive_file_bytes: Some(0),
        psi_some_avg10_percent: Some(0.0),
    }
}

fn low_available() -> MemoryReading {
    // The floor is 64 GiB / 64 = 1 GiB.
    MemoryReading {
        ram_available_bytes: Some(GIB - 1),
        ..plenty()
    }
}

fn cgroup_near_limit() -> MemoryReading {
    // Headroom 32 GiB / 16 = 2 GiB.
    MemoryReading {
        cgroup_current_bytes: Some(30 * GIB + 1),
        ..plenty()
    }
}

fn stalling() -> MemoryReading {
    MemoryReading {
        psi_some_avg10_percent: Some(10.5),
        ..plenty()
    }
}

fn controller() -> PressureController {
    PressureController::new(PressureConfig::default(), MIN, MAX)
}

#[test]
fn each_signal_is_recognised_at_its_threshold() {
    let config = PressureConfig::default();
    assert_eq!(config.shortage(&plenty()), None);
    assert_eq!(config.shortage(&MemoryReading::default()), None);
    assert_eq!(
        config.shortage(&low_available()),
        Some(PressureCause::LowAvailable)
    );
    let at_floor = MemoryReading {
        ram_available_bytes: Some(GIB),
        ..plenty()
    };
    assert_eq!(config.shortage(&at_floor), None);
    assert_eq!(
        config.shortage(&cgroup_near_limit()),
        Some(PressureCause::CgroupNearLimit)
    );
    let at_headroom = MemoryReading {
        cgroup_current_bytes: Some(30 * GIB),
        ..plenty()
    };
    assert_eq!(config.shortage(&at_headroom), None);
    assert_eq!(config.shortage(&stalling()), Some(PressureCause::Stall));
    let psi_at_threshold = MemoryReading {
        psi_some_avg10_percent: Some(10.0),
        ..plenty()
    };
    assert_eq!(config.shortage(&psi_at_threshold), None);
    // Both short: the machine-wide signal is named.
    let both = MemoryReading {
        ram_available_bytes: Some(0),
        ..cgroup_near_limit()
    };
    assert_eq!(config.shortage(&both), Some(PressureCause::LowAvailable));
}

#[test]
fn page_cache_near_the_cgroup_limit_is_not_pressure() {
    let full_of_page_cache = MemoryReading {
        cgroup_current_bytes: Some(32 * GIB),
        cgroup_inactive_file_bytes: Some(20 * GIB),
        ..plenty()
    };
    let mut pressure = controller();
    assert_eq!(
        PressureConfig::default().shortage(&full_of_page_cache),
        None
    );
    assert_eq!(
        pressure.tick(0, &full_of_page_cache, MAX, MAX),
        Decision::Hold
    );
    assert_eq!(pressure.shrinks(), 0);
    // Active memory at the limit is.
    let full_of_anon = MemoryReading {
        cgroup_inactive_file_bytes: Some(MIB),
        ..full_of_page_cache
    };
    assert!(matches!(
        pressure.tick(1000, &full_of_anon, MAX, MAX),
        Decision::Shrink {
            cause: PressureCause::CgroupNearLimit,
            ..
        }
    ));
}

/// Ticks once a second under `reading` with the cache at its target, applying each decision;
/// returns the targets reached.
fn run(
    pressure: &mut PressureController,
    reading: &MemoryReading,
    start_ms: u64,
    ticks: u64,
    mut target_bytes: u64,
) -> Vec<u64> {
    let mut targets = Vec::new();
    for tick in 0..ticks {
        match pressure.tick(start_ms + tick * 1000, reading, target_bytes, target_bytes) {
            Decision::Shrink { to_bytes, .. } | Decision::Grow { to_bytes } => {
                target_bytes = to_bytes;
            }
            Decision::Hold => {}
        }
        targets.push(target_bytes);
    }
    targets
}

#[test]
fn every_signal_shrinks_one_bounded_step_per_tick_down_to_min() {
    for (reading, cause) in [
        (low_available(), PressureCause::LowAvailable),
        (cgroup_near_limit(), PressureCause::CgroupNearLimit),
        (stalling(), PressureCause::Stall),
    ] {
        let mut pressure = controller();
        assert_eq!(
            pressure.tick(0, &reading, MAX, MAX),
            Decision::Shrink {
                to_bytes: MAX - MAX / 32,
                cause
            },
            "{cause:?}"
        );
        assert_eq!(pressure.last_cause(), Some(cause));
        let mut target_bytes = MAX - MAX / 32;
        let mut ticks = 1;
        loop {
            match pressure.tick(ticks * 1000, &reading, target_bytes, target_bytes) {
                Decision::Shrink {
                    to_bytes,
                    cause: seen,
                } => {
                    assert_eq!(seen, cause);
                    let step = (target_bytes / 32).max(MIB);
                    assert_eq!(to_bytes, (target_bytes - step).max(MIN), "{cause:?}");
                    target_bytes = to_bytes;
                }
                Decision::Hold => break,
                grow @ Decision::Grow { .. } => panic!("{grow:?} under {cause:?}"),
            }
            ticks += 1;
            assert!(ticks < 1000, "never reached the floor");
        }
        assert_eq!(target_bytes, MIN, "stops exactly at min under {cause:?}");
        assert_eq!(pressure.shrinks(), ticks);
        // Pressure at the floor: nothing more to give, still counted and still held off.
        assert_eq!(
            pressure.tick(ticks * 1000 + 1000, &reading, MIN, MIN),
            Decision::Hold
        );
        assert_eq!(pressure.shrinks(), ticks);
        assert_eq!(pressure.pressure_ticks(), ticks + 2);
        assert!(pressure.no_grow(ticks * 1000 + 1000));
    }
}

#[test]
fn a_large_shortfall_still_takes_one_step() {
    let starved = MemoryReading {
        ram_available_bytes: Some(0),
        cgroup_current_bytes: Some(40 * GIB),
        psi_some_avg10_percent: Some(100.0),
        ..plenty()
    };
    let mut pressure = controller();
    assert_eq!(
        pressure.tick(0, &starved, MAX, MAX),
        Decision::Shrink {
            to_bytes: MAX - MAX / 32,
            cause: PressureCause::LowAvailable
        }
    );
    let targets = run(&mut pressure, &starved, 1000, 10, MAX - MAX / 32);
    let mut previous = MAX - MAX / 32;
    for target in targets {
        assert_eq!(target, previous - previous / 32);
        previous = target;
    }
}

#[test]
fn a_shrink_step_is_at_least_one_mib() {
    let mut pressure = PressureController::new(PressureConfig::default(), 0, 40 * MIB);
    assert_eq!(
        pressure.tick(0, &stalling(), 20 * MIB, 20 * MIB),
        Decision::Shrink {
            to_bytes: 19 * MIB,
            cause: PressureCause::Stall
        }
    );
    assert_eq!(
        pressure.tick(1000, &stalling(), MIB / 2, 0),
        Decision::Shrink {
            to_bytes: 0,
            cause: PressureCause::Stall
        }
    );
    assert_eq!(pressure.tick(2000, &stalling(), 0, 0), Decision::Hold);
}

#[test]
fn growth_waits_out_the_holdoff_after_a_shrink() {
    let mut pressure = controller();
    let shrunk_bytes = match pressure.tick(10_000, &low_available(), MAX, MAX) {
        Decision::Shrink { to_bytes, .. } => to_bytes,
        other => panic!("{other:?}"),
    };
    assert!(pressure.no_grow(10_000));
    for now_ms in [10_001, 11_000, 14_999] {
        assert!(pressure.no_grow(now_ms));
        assert_eq!(
            pressure.tick(now_ms, &plenty(), shrunk_bytes, shrunk_bytes),
            Decision::Hold,
            "at {now_ms} ms"
        );
    }
    // A clock that went backwards is still within the hold-off.
    assert!(pressure.no_grow(9_000));
    assert!(!pressure.no_grow(15_000));
    assert_eq!(
        pressure.tick(15_000, &plenty(), shrunk_bytes, shrunk_bytes),
        Decision::Grow {
            to_bytes: shrunk_bytes + MAX / 64
        }
    );
    assert_eq!(pressure.grows(), 1);
    // Pressure again restarts the hold-off.
    assert!(matches!(
        pressure.tick(16_000, &stalling(), MAX, MAX),
        Decision::Shrink { .. }
    ));
    assert!(pressure.no_grow(20_999));
    assert_eq!(pressure.tick(20_999, &plenty(), MIN, MIN), Decision::Hold);
    assert!(matches!(
        pressure.tick(21_000, &plenty(), MIN, MIN),
        Decision::Grow { .. }
    ));
}

#[test]
fn plentiful_memory_and_a_full_cache_grow_back_to_max_in_steps() {
    let mut pressure = controller();
    let targets = run(&mut pressure, &plenty(), 0, 200, MIN);
    let step = MAX / 64;
    let mut previous = MIN;
    for &target in &targets {
        assert!(
            target == previous + step || target == MAX,
            "{previous} -> {target}"
        );
        assert!(target <= MAX);
        previous = target;
        if target == MAX {
            break;
        }
    }
    assert_eq!(*targets.last().unwrap(), MAX);
    let growing_ticks = targets.iter().take_while(|&&target| target < MAX).count() as u64 + 1;
    assert_eq!(pressure.grows(), growing_ticks);
    assert_eq!(growing_ticks, (MAX - MIN).div_ceil(step));
    // At max: hold.
    assert_eq!(pressure.tick(500_000, &plenty(), MAX, MAX), Decision::Hold);
    assert!(!pressure.no_grow(500_000));
}

#[test]
fn no_growth_without_demand_and_no_collapse_without_pressure() {
    let mut pressure = controller();
    let target_bytes = 2 * GIB;
    // Half empty: no reason to claim more memory, and no reason to give any back.
    for tick in 0..100 {
        assert_eq!(
            pressure.tick(tick * 1000, &plenty(), target_bytes, GIB),
            Decision::Hold
        );
    }
    // Just under "nearly full" still holds; at it, grows.
    let full_bytes = target_bytes - target_bytes / 32;
    assert_eq!(
        pressure.tick(100_000, &plenty(), target_bytes, full_bytes - 1),
        Decision::Hold
    );
    assert_eq!(
        pressure.tick(101_000, &plenty(), target_bytes, full_bytes),
        Decision::Grow {
            to_bytes: target_bytes + MAX / 64
        }
    );
    assert_eq!(pressure.shrinks(), 0);
    assert_eq!(pressure.grows(), 1);
    assert_eq!(pressure.last_cause(), None);
}

#[test]
fn growth_keeps_clear_of_the_thresholds() {
    let mut pressure = controller();
    let step = MAX / 64; // 128 MiB
    // Not short (available above the 1 GiB floor), but a step would leave < 2 GiB.
    let tight = MemoryReading {
        ram_available_bytes: Some(2 * GIB + step - 1),
        ..plenty()
    };
    assert_eq!(PressureConfig::default().shortage(&tight), None);
    assert_eq!(pressure.tick(0, &tight, MIN, MIN), Decision::Hold);
    let roomy = MemoryReading {
        ram_available_bytes: Some(2 * GIB + step),
        ..plenty()
    };
    assert!(matches!(
        pressure.tick(1000, &roomy, MIN, MIN),
        Decision::Grow { .. }
    ));

    // The cgroup: limit 32 GiB less 2 GiB headroom.
    let near = MemoryReading {
        cgroup_current_bytes: Some(30 * GIB - step + 1),
        ..plenty()
    };
    assert_eq!(PressureConfig::default().shortage(&near), None);
    assert_eq!(pressure.tick(2000, &near, MIN, MIN), Decision::Hold);
    let clear = MemoryReading {
        cgroup_current_bytes: Some(30 * GIB - step),
        ..plenty()
    };
    assert!(matches!(
        pressure.tick(3000, &clear, MIN, MIN),
        Decision::Grow { .. }
    ));

    // Stalls above half the threshold.
    let stalls = MemoryReading {
        psi_some_avg10_percent: Some(5.5),
        ..plenty()
    };
    assert_eq!(pressure.tick(4000, &stalls, MIN, MIN), Decision::Hold);
    assert_eq!(pressure.shrinks(), 0, "none of these is pressure");
}

#[test]
fn targets_stay_within_limits() {
    let mut pressure = controller();
    // A target above max (arc_max lowered) under pressure lands at max, not beyond.
    assert_eq!(
        pressure.tick(0, &stalling(), 2 * MAX, 2 * MAX),
        Decision::Shrink {
            to_bytes: MAX,
            cause: PressureCause::Stall
        }
    );
    // Without pressure it is the caller's to clamp: the controller does not grow it.
    assert_eq!(
        pressure.tick(10_000, &plenty(), 2 * MAX, 2 * MAX),
        Decision::Hold
    );
    // Lowered limits apply to the next decisions.
    pressure.set_limits(MIN, 4 * GIB);
    assert_eq!(pressure.max_bytes(), 4 * GIB);
    assert_eq!(
        pressure.tick(20_000, &plenty(), 4 * GIB - MIB, 4 * GIB),
        Decision::Grow { to_bytes: 4 * GIB }
    );
    pressure.set_limits(2 * GIB, GIB);
    assert_eq!((pressure.min_bytes(), pressure.max_bytes()), (GIB, GIB));
    assert_eq!(pressure.tick(30_000, &stalling(), GIB, GIB), Decision::Hold);
}

#[test]
fn zero_divisors_do_not_panic() {
    let config = PressureConfig {
        shrink_step_divisor: 0,
        grow_step_divisor: 0,
        grow_holdoff_ms: 0,
        free_min_divisor: 0,
        cgroup_headroom_divisor: 0,
        psi_some_avg10_max_percent: 10.0,
    };
    let mut pressure = PressureController::new(config, 0, GIB);
    // No free floor: available 0 is not "low" by that signal.
    let empty = MemoryReading {
        ram_available_bytes: Some(0),
        psi_some_avg10_percent: None,
        cgroup_limit_bytes: None,
        ..plenty()
    };
    assert_eq!(config.shortage(&empty), None);
    // No headroom: short only beyond the limit itself.
    let over = MemoryReading {
        cgroup_current_bytes: Some(32 * GIB + 1),
        ..plenty()
    };
    assert_eq!(
        pressure.tick(0, &over, GIB, GIB),
        Decision::Shrink {
            to_bytes: GIB - MIB,
            cause: PressureCause::CgroupNearLimit
        }
    );
    assert_eq!(
        pressure.tick(0, &plenty(), GIB - MIB, GIB),
        Decision::Grow { to_bytes: GIB },
        "no hold-off: grows on the next tick"
    );
}

#[test]
fn random_walks_keep_every_invariant() {
    // A small deterministic generator: the test must not need a crate.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |bound: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % bound
    };
    let config = PressureConfig::default();
    let mut pressure = PressureController::new(config, MIN, MAX);
    let mut target_bytes = MAX;
    let mut last_pressure_ms = None;
    let mut now_ms = 0;
    for _ in 0..20_000 {
        now_ms += 200 + next(2000);
        let total_bytes = 16 * GIB;
        let limit_bytes = 4 * GIB + next(8) * GIB;
        let reading = MemoryReading {
            ram_total_bytes: Some(total_bytes),
            ram_available_bytes: (next(8) != 0).then(|| next(total_bytes)),
            cgroup_limit_bytes: (next(3) != 0).then_some(limit_bytes),
            cgroup_current_bytes: Some(next(limit_bytes + GIB)),
            cgroup_inactive_file_bytes: Some(next(GIB)),
            psi_some_avg10_percent: (next(4) != 0).then(|| next(20) as f64),
        };
        let size_bytes = target_bytes - next(target_bytes / 16 + 1);
        let short = config.shortage(&reading).is_some();
        let decision = pressure.tick(now_ms, &reading, target_bytes, size_bytes);
        match decision {
            Decision::Shrink { to_bytes, cause } => {
                assert_eq!(config.shortage(&reading), Some(cause));
                assert!(to_bytes < target_bytes);
                assert!(target_bytes - to_bytes <= config.shrink_step_bytes(target_bytes));
                target_bytes = to_bytes;
            }
            Decision::Grow { to_bytes } => {
                assert!(!short);
                assert!(last_pressure_ms.is_none_or(|last| now_ms - last >= 5000));
                assert!(size_bytes >= target_bytes - target_bytes / 32);
                assert!(to_bytes > target_bytes);
                assert!(to_bytes - target_bytes <= config.grow_step_bytes(MAX));
                target_bytes = to_bytes;
            }
            Decision::Hold => {}
        }
        if short {
            last_pressure_ms = Some(now_ms);
            assert!(!matches!(decision, Decision::Grow { .. }));
            assert!(pressure.no_grow(now_ms));
        }
        assert!((MIN..=MAX).contains(&target_bytes), "{target_bytes}");
    }
    assert!(
        pressure.shrinks() > 10 && pressure.grows() > 10,
        "both directions exercised"
    );
}
