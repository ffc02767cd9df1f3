//! End-to-end tests of the `cairn` binary: real processes, real (sparse) device files in a
//! temporary directory, and a private `--state-dir` for the pool cache. They assert on what a
//! user or a script reads (output content and exit codes), not on engine internals.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("devs")).expect("devs dir");
        Env { dir }
    }

    fn devs(&self) -> PathBuf {
        self.dir.path().join("devs")
    }

    fn dev(&self, name: &str) -> String {
        self.devs().join(name).display().to_string()
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("--state-dir")
            .arg(self.dir.path().join("state"))
            .args(args)
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", self.dir.path())
            .current_dir(self.dir.path())
            .output()
            .expect("run cairn")
    }

    /// Runs a command that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "cairn {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 stdout")
    }

    /// Runs a command that must succeed, without `--state-dir` (for `up`, which keeps its state
    /// in its data directory); returns its stdout.
    fn ok_without_state_dir(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(args)
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", self.dir.path())
            .current_dir(self.dir.path())
            .output()
            .expect("run cairn");
        assert!(
            out.status.success(),
            "cairn {args:?} failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 stdout")
    }

    /// Runs a command that must fail with `code`; returns its stderr.
    fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(code),
            "cairn {args:?} should exit {code}:\nstdout: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }
}

fn fields(line: &str) -> Vec<&str> {
    line.split('\t').collect()
}

/// The `-H` line whose first field is `name`.
fn row<'a>(output: &'a str, name: &str) -> Option<Vec<&'a str>> {
    output.lines().map(fields).find(|f| f[0] == name)
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn mirror_pool_lifecycle() {
    let env = Env::new();
    let (a, b) = (env.dev("a.img"), env.dev("b.img"));
    let devs = env.devs();
    let devs = path_str(&devs);

    env.ok(&["pool", "create", "--size", "128M", "tank", "mirror", &a, &b]);
    let sparse = std::fs::metadata(&a).unwrap();
    assert_eq!(
        sparse.len(),
        128 << 20,
        "--size creates the file at the given size"
    );

    // pool list: scripted and exact.
    let list = env.ok(&["pool", "list", "-H", "-p"]);
    let tank = row(&list, "tank").unwrap_or_else(|| panic!("tank not listed: {list:?}"));
    assert_eq!(
        tank.len(),
        7,
        "NAME SIZE ALLOC FREE FRAG CAP HEALTH: {tank:?}"
    );
    let size: u64 = tank[1].parse().expect("exact SIZE");
    let alloc: u64 = tank[2].parse().expect("exact ALLOC");
    let free: u64 = tank[3].parse().expect("exact FREE");
    assert!(size > 0 && size <= 128 << 20, "{tank:?}");
    assert!(alloc + free <= size, "{tank:?}");
    assert!(
        !tank[5].ends_with('%'),
        "CAP is a bare number with -p: {tank:?}"
    );
    assert_eq!(tank[6], "ONLINE");
    // For people: a header, padded columns, units.
    let human = env.ok(&["pool", "list"]);
    assert!(human.starts_with("NAME"), "{human}");
    assert!(human.contains("HEALTH") && human.contains('%'), "{human}");
    assert!(!human.contains('\t'), "{human}");

    // A volume with a creation property.
    env.ok(&["create", "-V", "64M", "-o", "volblocksize=8K", "tank/vol"]);
    let list = env.ok(&["list", "-H"]);
    let vol = row(&list, "tank/vol").unwrap_or_else(|| panic!("tank/vol not listed: {list:?}"));
    assert_eq!(
        vol.len(),
        7,
        "NAME USED AVAIL REFER TYPE VOLSIZE VOLBLOCK: {vol:?}"
    );
    assert_eq!(vol[4], "volume");
    assert_eq!(vol[5], "64M");
    assert_eq!(vol[6], "8K");
    assert!(
        row(&list, "tank").is_some(),
        "the root dataset is listed: {list:?}"
    );
    let exact = env.ok(&["list", "-H", "-p", "-o", "name,volblocksize", "tank/vol"]);
    assert_eq!(exact, "tank/vol\t8192\n");

    // get: exact and human values.
    let got = env.ok(&["get", "-H", "-p", "volblocksize", "tank/vol"]);
    assert_eq!(
        fields(got.trim_end()),
        vec!["tank/vol", "volblocksize", "8192", "local"]
    );
    let got = env.ok(&["get", "-H", "volblocksize", "tank/vol"]);
    assert_eq!(fields(got.trim_end())[2], "8K");
    let got = env.ok(&["get", "all", "tank/vol"]);
    assert!(got.starts_with("NAME"), "{got}");
    for property in ["volsize", "checksum", "sync", "used", "available"] {
        assert!(got.contains(property), "get all shows {property}: {got}");
    }

    // set, then get shows the value as local.
    env.ok(&["set", "checksum=sha256", "tank/vol"]);
    let got = env.ok(&["get", "-H", "checksum", "tank/vol"]);
    assert_eq!(
        fields(got.trim_end()),
        vec!["tank/vol", "checksum", "sha256", "local"]
    );
    let got = env.ok(&["get", "-H", "-o", "value,source", "checksum", "tank"]);
    assert_eq!(got, "on\tdefault\n");

    // sync=disabled is flagged for people, plain for scripts.
    env.ok(&["set", "sync=disabled", "tank/vol"]);
    assert!(
        env.ok(&["get", "sync", "tank/vol"])
            .contains("disabled (UNSAFE)")
    );
    assert_eq!(
        env.ok(&["get", "-H", "-o", "value", "sync", "tank/vol"]),
        "disabled\n"
    );
    env.ok(&["set", "sync=standard", "tank/vol"]);

    // Unknown properties and bad values are errors naming the property.
    let err = env.fails(&["get", "frobnicate", "tank/vol"], 1);
    assert!(
        err.starts_with("cairn: ") && err.contains("frobnicate"),
        "{err}"
    );
    let err = env.fails(&["set", "frobnicate=on", "tank/vol"], 1);
    assert!(
        err.contains("frobnicate") && err.contains("tank/vol"),
        "{err}"
    );
    let err = env.fails(&["set", "checksum=crc7", "tank/vol"], 1);
    assert!(err.contains("checksum") && err.contains("crc7"), "{err}");
    let err = env.fails(&["get", "checksum", "tank/nope"], 1);
    assert!(err.contains("tank/nope"), "{err}");

    // status for people.
    let status = env.ok(&["pool", "status", "tank"]);
    for needle in [
        "pool: tank",
        "state: ONLINE",
        "none requested",
        "mirror-0",
        &a,
        &b,
        "CKSUM",
    ] {
        assert!(
            status.contains(needle),
            "status shows {needle:?}:\n{status}"
        );
    }
    assert!(status.contains("errors: No known data errors"), "{status}");

    // Export: the pool is gone until imported again.
    env.ok(&["pool", "export", "tank"]);
    let err = env.fails(&["pool", "status", "tank"], 1);
    assert!(
        err.contains("no such pool 'tank'") && err.contains("import"),
        "{err}"
    );
    assert!(row(&env.ok(&["pool", "list", "-H"]), "tank").is_none());
    let err = env.fails(&["list", "tank/vol"], 1);
    assert!(err.contains("'tank'"), "{err}");

    let importable = env.ok(&["pool", "import", "-d", devs]);
    assert!(importable.contains("pool: tank"), "{importable}");
    assert!(importable.contains("EXPORTED"), "{importable}");
    assert!(
        importable.contains(&a) && importable.contains(&b),
        "{importable}"
    );
    env.ok(&["pool", "import", "-d", devs, "tank"]);
    let list = env.ok(&["list", "-H"]);
    let vol =
        row(&list, "tank/vol").unwrap_or_else(|| panic!("volume survives export/import: {list:?}"));
    assert_eq!(vol[6], "8K");
    let got = env.ok(&["get", "-H", "checksum", "tank/vol"]);
    assert_eq!(fields(got.trim_end())[2], "sha256");
    let err = env.fails(&["pool", "import", "-d", devs, "tank"], 1);
    assert!(err.contains("already imported"), "{err}");

    // Offline check and scrub.
    let check = env.ok(&["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
    assert!(check.contains("blocks:"), "{check}");
    let scrub = env.ok(&["pool", "scrub", "tank"]);
    assert!(
        scrub.contains("scrub of pool 'tank' done") && scrub.contains("0 unrecoverable"),
        "{scrub}"
    );
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("scan: scrub repaired 0 (0 copies) in"),
        "{status}"
    );
    assert!(status.contains("with 0 errors on"), "{status}");

    // History of state-changing commands.
    let history = env.ok(&["pool", "history", "tank"]);
    for needle in [
        "History for 'tank'",
        "cairn pool create",
        "cairn create -V 64M",
        "cairn set checksum=sha256",
        "cairn pool scrub tank",
    ] {
        assert!(
            history.contains(needle),
            "history shows {needle:?}:\n{history}"
        );
    }
    assert!(!history.contains("--state-dir"), "{history}");

    let txgs = env.ok(&["pool", "txgs", "-H", "-p", "tank"]);
    // TXG TRIGGER DIRTY HOLDS OPEN QUIESCE SYNC DELAYS DELAYED BLOCKED RESERVED BACKGROUND
    // COMMANDS; with -p all but the trigger are plain integers.
    assert!(
        txgs.lines().all(|line| {
            let cells = fields(line);
            cells.len() == 13
                && cells
                    .iter()
                    .enumerate()
                    .all(|(i, cell)| i == 1 || cell.parse::<u64>().is_ok())
        }),
        "{txgs}"
    );

    // Destroy the volume, then the pool.
    env.ok(&["destroy", "tank/vol"]);
    assert!(row(&env.ok(&["list", "-H"]), "tank/vol").is_none());
    let err = env.fails(&["destroy", "tank"], 1);
    assert!(err.contains("pool destroy"), "{err}");
    env.ok(&["pool", "destroy", "tank"]);
    let importable = env.ok(&["pool", "import", "-d", devs]);
    assert!(
        !importable.contains("tank"),
        "a destroyed pool is not importable: {importable}"
    );
    assert!(
        importable.contains("no pools available to import"),
        "{importable}"
    );
    assert!(
        env.ok(&["pool", "import", "-D", "-d", devs])
            .contains("DESTROYED")
    );
}

#[test]
fn devices_of_another_pool_need_force() {
    let env = Env::new();
    let a = env.dev("a.img");
    env.ok(&["pool", "create", "--size", "64M", "tank", &a]);
    // A device of an imported pool is refused even with --force (see create_safety.rs).
    let err = env.fails(&["pool", "create", "--force", "other", &a], 1);
    assert!(err.contains("imported pool 'tank'"), "{err}");
    assert!(row(&env.ok(&["pool", "list", "-H"]), "other").is_none());

    let err = env.fails(&["pool", "create", "tank", &env.dev("b.img")], 1);
    assert!(err.contains("already imported"), "{err}");
    let err = env.fails(&["pool", "create", "more", &env.dev("missing.img")], 1);
    assert!(
        err.contains("missing.img") && err.contains("--size"),
        "{err}"
    );
    let err = env.fails(
        &[
            "pool",
            "create",
            "--size",
            "64M",
            "more",
            &a,
            "spare",
            &env.dev("l.img"),
        ],
        1,
    );
    assert!(
        err.contains("'spare'") && err.contains("not supported yet"),
        "{err}"
    );

    env.ok(&["pool", "export", "tank"]);
    env.ok(&["pool", "create", "--force", "other", &a]);
    let list = env.ok(&["pool", "list", "-H"]);
    assert_eq!(row(&list, "other").map(|r| r[6]), Some("ONLINE"), "{list}");
}

#[test]
fn emulated_ram_device_is_remembered() {
    let env = Env::new();
    let spec = format!("emu:ram:{}", env.dev("r.img"));
    let devs = env.devs();
    env.ok(&[
        "pool",
        "create",
        "--size",
        "64M",
        "-o",
        "ashift=12",
        "fast",
        &spec,
    ]);
    let status = env.ok(&["pool", "status", "fast"]);
    assert!(
        status.contains(&spec),
        "status names the emulated device: {status}"
    );
    env.ok(&["create", "-V", "16M", "fast/v"]);
    env.ok(&["pool", "export", "fast"]);
    env.ok(&["pool", "import", "-d", path_str(&devs), "fast"]);
    let status = env.ok(&["pool", "status", "fast"]);
    assert!(
        status.contains(&spec),
        "the model comes back from the label: {status}"
    );
    let list = env.ok(&["list", "-H", "-p", "fast/v"]);
    let vol = row(&list, "fast/v").expect("volume listed");
    assert_eq!(vol[5], (16u64 << 20).to_string());
    assert_eq!(vol[6], "16384", "default volblocksize");
}

/// `create -V` reserves the volume's full size, as zfs does; `-s` makes a sparse one.
#[test]
fn volumes_are_reserved_unless_sparse() {
    let env = Env::new();
    env.ok(&[
        "pool",
        "create",
        "--size",
        "256M",
        "tank",
        &env.dev("a.img"),
    ]);
    let avail = |name: &str| -> u64 {
        let list = env.ok(&["list", "-H", "-p", "-o", "name,avail", name]);
        row(&list, name).expect("listed")[1]
            .parse()
            .expect("exact AVAIL")
    };
    let root_avail = avail("tank");

    // Larger than the pool: refused, nothing created, and the message says what to do.
    let err = env.fails(&["create", "-V", "1T", "tank/huge"], 1);
    assert!(
        err.contains("tank/huge") && err.contains("reservation") && err.contains("-s"),
        "{err}"
    );
    let list = env.ok(&["list", "-H"]);
    assert!(row(&list, "tank/huge").is_none(), "{list}");

    // Thick: USED and the pool's AVAIL carry the promise before a byte is written.
    env.ok(&["create", "-V", "64M", "tank/thick"]);
    let list = env.ok(&["list", "-H", "-p", "-o", "name,used,refer", "tank/thick"]);
    let thick = row(&list, "tank/thick").expect("listed");
    let used: u64 = thick[1].parse().expect("exact USED");
    let refer: u64 = thick[2].parse().expect("exact REFER");
    assert!(used >= 64 << 20 && refer < 1 << 20, "{thick:?}");
    let got = env.ok(&[
        "get",
        "-H",
        "-p",
        "-o",
        "value",
        "refreservation",
        "tank/thick",
    ]);
    assert!(
        got.trim().parse::<u64>().expect("bytes") >= 64 << 20,
        "{got}"
    );
    assert!(
        avail("tank") + (64 << 20) <= root_avail,
        "AVAIL shrinks by the promise"
    );

    // Sparse: any size, no promise.
    env.ok(&["create", "-s", "-V", "1T", "tank/sparse"]);
    assert_eq!(
        env.ok(&["get", "-H", "-o", "value", "refreservation", "tank/sparse"]),
        "none\n"
    );
    // A second thick volume that does not fit beside the first is refused; giving up the
    // first one's promise makes room.
    env.fails(&["create", "-V", "192M", "tank/second"], 1);
    env.ok(&["set", "refreservation=none", "tank/thick"]);
    env.ok(&["create", "-V", "192M", "tank/second"]);
    let err = env.fails(&["set", "refreservation=64M", "tank/thick"], 1);
    assert!(err.contains("reservation"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let env = Env::new();
    for args in [
        &["frobnicate"][..],
        &["pool"][..],
        &["pool", "list", "--bogus"][..],
        &["set", "tank/vol"][..],
        &["set", "no-equals-sign", "tank/vol"][..],
        &["create", "-o", "volblocksize", "tank/v"][..],
    ] {
        let err = env.fails(args, 2);
        assert!(
            err.contains("error:") || err.contains("Usage:"),
            "{args:?}: {err}"
        );
        assert!(
            !err.starts_with("cairn: "),
            "usage errors come from the parser: {err}"
        );
    }
    let err = env.fails(&["pool", "status", "nope"], 1);
    assert_eq!(
        err.trim_end(),
        "cairn: no such pool 'nope' (not imported; try cairn pool import -d DIR)"
    );
}

/// Flips every non-zero 4 KiB block of a device's data region (between the front labels and
/// the end labels), leaving the labels intact; returns how many blocks were damaged.
fn damage_data_region(path: &str) -> usize {
    use std::io::{Read, Seek, SeekFrom, Write};
    const DATA_START: u64 = 1 << 20;
    const END_RESERVED: u64 = 512 << 10;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let end = file.metadata().unwrap().len() - END_RESERVED;
    let mut block = vec![0u8; 4096];
    let mut damaged = 0;
    let mut offset = DATA_START;
    while offset < end {
        file.seek(SeekFrom::Start(offset)).unwrap();
        file.read_exact(&mut block).unwrap();
        if block.iter().any(|&b| b != 0) {
            block.iter_mut().for_each(|b| *b = !*b);
            file.seek(SeekFrom::Start(offset)).unwrap();
            file.write_all(&block).unwrap();
            damaged += 1;
        }
        offset += 4096;
    }
    file.sync_all().unwrap();
    damaged
}

#[test]
fn check_finds_a_damaged_mirror_side_and_scrub_repairs_it() {
    let env = Env::new();
    let (a, b) = (env.dev("a.img"), env.dev("b.img"));
    env.ok(&["pool", "create", "--size", "128M", "tank", "mirror", &a, &b]);
    env.ok(&["create", "-V", "32M", "tank/vol"]);
    assert!(damage_data_region(&b) > 0, "the pool wrote data to {b}");

    let out = env.run(&["pool", "check", "tank"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "check fails on damage:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("bad copy"), "{stdout}");
    assert!(
        stderr.contains("pool 'tank' has") && stderr.contains("problems"),
        "{stderr}"
    );

    let scrub = env.ok(&["pool", "scrub", "tank"]);
    assert!(
        scrub.contains("0 unrecoverable") && !scrub.contains(" 0 repaired"),
        "{scrub}"
    );
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("scan: scrub repaired") && !status.contains("repaired 0 copies"),
        "{status}"
    );
    assert!(status.contains("errors: No known data errors"), "{status}");
    // The counters outlive the scrub's process: the damaged side shows CKSUM errors, the
    // healthy side none, until `pool clear`.
    let cksum = |status: &str, device: &str| -> u64 {
        let line = status
            .lines()
            .find(|line| line.trim_start().starts_with(device))
            .unwrap_or_else(|| panic!("{device} in status:\n{status}"));
        line.split_whitespace()
            .last()
            .expect("CKSUM column")
            .parse()
            .expect("a number")
    };
    assert!(cksum(&status, &b) > 0, "{status}");
    assert_eq!(cksum(&status, &a), 0, "{status}");
    env.ok(&["pool", "clear", "tank"]);
    let cleared = env.ok(&["pool", "status", "tank"]);
    assert_eq!(cksum(&cleared, &b), 0, "{cleared}");
    let check = env.ok(&["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}

#[test]
fn up_creates_the_embedded_default_then_reuses_it() {
    let env = Env::new();
    let data = env.dir.path().join("data");
    let data_arg = path_str(&data).to_string();
    let first = env.ok_without_state_dir(&[
        "up",
        "--no-serve",
        "--data-dir",
        &data_arg,
        "--size",
        "128M",
        "--volsize",
        "32M",
    ]);
    assert!(first.contains("creating pool 'cairn'"), "{first}");
    assert!(
        first.lines().any(|line| line.starts_with("cairn/vol0 ")),
        "{first}"
    );
    assert!(data.join("d0.img").exists() && data.join("state/pools.cache").exists());
    let second = env.ok_without_state_dir(&["up", "--no-serve", "--data-dir", &data_arg]);
    assert!(
        !second.contains("creating") && second.contains("ONLINE"),
        "{second}"
    );
    std::fs::remove_file(data.join("state/pools.cache")).unwrap();
    let third = env.ok_without_state_dir(&["up", "--no-serve", "--data-dir", &data_arg]);
    assert!(third.contains("importing pool 'cairn'"), "{third}");
    assert!(
        third.lines().any(|line| line.starts_with("cairn/vol0 ")),
        "{third}"
    );
}

#[test]
fn log_devices_are_added_and_removed_with_pool_add_and_remove() {
    let env = Env::new();
    let (d0, s1, s2, s3) = (
        env.dev("d0.img"),
        env.dev("s1.img"),
        env.dev("s2.img"),
        env.dev("s3.img"),
    );
    env.ok(&["pool", "create", "--size", "128M", "tank", &d0]);
    env.ok(&["create", "-V", "16M", "tank/vol"]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(!status.contains("logs"), "{status}");

    let added = env.ok(&["pool", "add", "--size", "64M", "tank", "log", &s1]);
    assert!(added.contains(&s1), "{added}");
    let added = env.ok(&[
        "pool", "add", "--size", "64M", "tank", "log", "mirror", &s2, &s3,
    ]);
    assert!(added.contains("mirror-"), "{added}");
    let status = env.ok(&["pool", "status", "tank"]);
    let logs_at = status.find("logs").unwrap_or_else(|| panic!("{status}"));
    assert!(
        status[logs_at..].contains(&s1) && status[logs_at..].contains(&s2),
        "{status}"
    );

    // The pool cache remembers the new devices: export and import by name finds them.
    env.ok(&["pool", "export", "tank"]);
    env.ok(&["pool", "import", "-d", path_str(&env.devs()), "tank"]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(status.contains(&s1) && status.contains(&s3), "{status}");

    // Bad input: a data vdev, a device already in the pool, an unknown vdev, a data device.
    let err = env.fails(
        &["pool", "add", "--size", "64M", "tank", &env.dev("d1.img")],
        1,
    );
    assert!(err.contains("only log and cache devices"), "{err}");
    assert!(
        !env.devs().join("d1.img").exists(),
        "a refused add leaves no file behind"
    );
    let err = env.fails(&["pool", "add", "tank", "log", &s1], 1);
    assert!(err.contains("already in pool"), "{err}");
    let err = env.fails(&["pool", "remove", "tank", "nosuch"], 1);
    assert!(err.contains("no vdev 'nosuch'"), "{err}");
    let err = env.fails(&["pool", "remove", "tank", &d0], 1);
    assert!(err.contains("only log and cache devices"), "{err}");

    // Named relative to the working directory (the test runs in the temp dir).
    env.ok(&["pool", "remove", "tank", "devs/s1.img"]);
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(!status.contains(&s1) && status.contains(&s2), "{status}");
    // The removed device is free for another pool without --force.
    env.ok(&["pool", "create", "other", &s1]);
    env.ok(&["pool", "destroy", "other"]);
    let history = env.ok(&["pool", "history", "tank"]);
    assert!(
        history.contains("pool add") && history.contains("pool remove"),
        "{history}"
    );
    let check = env.ok(&["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
}
