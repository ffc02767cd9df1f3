//! `pool create` and `pool add` never destroy data, and a create is honest about failing.
//!
//! Real processes on real files: a file of random bytes, an ext4 image made by `mkfs.ext4`
//! (e2fsprogs), a small text file, a member of an imported pool. Every refused device is
//! compared byte for byte before and after. Device failures come from the program's own fault
//! injection (`CAIRN_INJECT_POWER_CUT_AFTER_OPS` on `emu:ram:` devices, see cairn-engine's
//! `FaultInjection` and cairn's `environment.rs`), cutting a create at each of its device operations in turn.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Env {
        Env {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run_with(&self, args: &[&str], cut_after_ops: Option<u64>) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
        command
            .arg("--state-dir")
            .arg(self.path("state"))
            .args(args)
            .env_remove("CAIRN_STATE_DIR")
            .env_remove("CAIRN_INJECT_POWER_CUT_AFTER_OPS")
            .env("HOME", self.dir.path())
            .current_dir(self.dir.path());
        if let Some(ops) = cut_after_ops {
            command.env("CAIRN_INJECT_POWER_CUT_AFTER_OPS", ops.to_string());
        }
        command.output().expect("run cairn")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run_with(args, None);
        assert!(
            out.status.success(),
            "cairn {args:?} failed:\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 stdout")
    }

    /// Runs a command that must exit 1; returns its stderr.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run_with(args, None);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(
            out.status.code(),
            Some(1),
            "cairn {args:?} should fail:\nstdout: {}\nstderr: {stderr}",
            String::from_utf8_lossy(&out.stdout)
        );
        stderr
    }

    /// Names of the pools `pool list` shows.
    fn pools(&self) -> Vec<String> {
        self.ok(&["pool", "list", "-H"])
            .lines()
            .filter_map(|line| line.split('\t').next())
            .map(String::from)
            .collect()
    }
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// A file of `len` pseudo-random bytes (xorshift: no byte pattern a probe could special-case).
fn write_random(path: &Path, len: usize) {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    std::fs::write(path, bytes).expect("write random file");
}

fn mkfs_ext4(path: &Path, len: u64) {
    let file = std::fs::File::create(path).expect("create image");
    file.set_len(len).expect("size image");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(path)
        .output()
        .expect("mkfs.ext4 (e2fsprogs) must be installed");
    assert!(out.status.success(), "mkfs.ext4: {out:?}");
}

/// `blkid -p` as the reference for what a device holds ("" when it finds nothing).
fn blkid_type(path: &Path) -> String {
    let out = Command::new("blkid")
        .args(["-p", "-s", "TYPE", "-o", "value"])
        .arg(path)
        .output()
        .expect("blkid (util-linux) must be installed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The refused command names the device and what it holds, mentions -f, creates no pool and
/// leaves every byte of every file as it was.
fn assert_refused(env: &Env, args: &[&str], files: &[&Path], expected: &[&str]) {
    let before: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let pools_before = env.pools();
    let err = env.fails(args);
    for word in expected {
        assert!(err.contains(word), "{args:?}: expected {word:?} in: {err}");
    }
    assert!(err.contains("-f"), "{err}");
    for (file, bytes) in files.iter().zip(&before) {
        assert!(
            std::fs::read(file).unwrap() == *bytes,
            "{} changed",
            file.display()
        );
    }
    assert_eq!(env.pools(), pools_before, "{args:?} changed the pool list");
}

#[test]
fn devices_that_hold_data_are_refused_unless_forced() {
    let env = Env::new();
    let (random, ext4, note) = (
        env.path("random.img"),
        env.path("ext4.img"),
        env.path("note.txt"),
    );
    write_random(&random, 64 << 20);
    mkfs_ext4(&ext4, 64 << 20);
    std::fs::write(&note, b"sixteen bytes!!\n").unwrap();
    assert_eq!(
        blkid_type(&ext4),
        "ext4",
        "the reference agrees on the image"
    );
    let all = [random.as_path(), ext4.as_path(), note.as_path()];

    assert_refused(
        &env,
        &["pool", "create", "tank", text(&random)],
        &all,
        &[text(&random), "holds data"],
    );
    assert_refused(
        &env,
        &[
            "pool",
            "create",
            "tank",
            "mirror",
            text(&random),
            text(&ext4),
        ],
        &all,
        &[text(&random), "holds data"],
    );
    assert_refused(
        &env,
        &["pool", "create", "tank", text(&ext4)],
        &all,
        &[text(&ext4), "ext4 file system"],
    );
    // --size only creates missing files: an existing 16-byte file stays 16 bytes (and is too
    // small to be a device).
    let err = env.fails(&["pool", "create", "--size", "1G", "tank", text(&note)]);
    assert!(
        err.contains(text(&note)) && err.contains("16 bytes"),
        "{err}"
    );
    assert_eq!(std::fs::read(&note).unwrap(), b"sixteen bytes!!\n");

    // pool add checks its devices the same way.
    let log = env.path("log.img");
    env.ok(&[
        "pool",
        "create",
        "--size",
        "64M",
        "base",
        text(&env.path("base.img")),
    ]);
    assert_refused(
        &env,
        &["pool", "add", "base", "log", text(&ext4)],
        &all,
        &[text(&ext4), "ext4 file system"],
    );
    env.ok(&["pool", "add", "--size", "64M", "base", "log", text(&log)]);

    // -f takes the first two.
    env.ok(&["pool", "create", "-f", "tank", text(&random), text(&ext4)]);
    assert!(env.pools().contains(&"tank".to_string()));
    env.ok(&["pool", "check", "tank"]);
}

/// Runs a formatting tool from e2fsprogs or util-linux on `path`.
fn format(path: &Path, tool: &str, args: &[&str]) {
    let file = std::fs::File::create(path).expect("create image");
    file.set_len(64 << 20).expect("size image");
    let out = Command::new(tool)
        .args(args)
        .arg(path)
        .output()
        .unwrap_or_else(|err| panic!("{tool} must be installed: {err}"));
    assert!(out.status.success(), "{tool}: {out:?}");
}

#[test]
fn what_is_found_agrees_with_blkid() {
    let env = Env::new();
    let cases: [(&str, &[&str], &str, &str); 4] = [
        (
            "mke2fs",
            &["-q", "-F", "-t", "ext2"],
            "ext2",
            "an ext2 file system",
        ),
        (
            "mke2fs",
            &["-q", "-F", "-t", "ext3"],
            "ext3",
            "an ext3 file system",
        ),
        (
            "mke2fs",
            &["-q", "-F", "-t", "ext4"],
            "ext4",
            "an ext4 file system",
        ),
        ("mkswap", &["-q"], "swap", "Linux swap space"),
    ];
    for (tool, args, blkid, words) in cases {
        let image = env.path(&format!("{blkid}.img"));
        format(&image, tool, args);
        assert_eq!(blkid_type(&image), blkid, "{tool} {args:?}");
        assert_refused(
            &env,
            &["pool", "create", "tank", text(&image)],
            &[image.as_path()],
            &[text(&image), words],
        );
    }
}

#[test]
fn a_device_of_an_imported_pool_is_refused_even_with_force() {
    let env = Env::new();
    let (a, b) = (env.path("a.img"), env.path("b.img"));
    env.ok(&["pool", "create", "--size", "64M", "tank", text(&a)]);
    env.ok(&["create", "-V", "8M", "tank/vol"]);
    // A second name for the same file, and a byte-for-byte copy carrying tank's pool guid.
    let link = env.path("a-link.img");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let copy = env.path("copy.img");
    std::fs::copy(&a, &copy).unwrap();
    let files = [a.as_path(), copy.as_path()];
    for device in [&a, &link, &copy] {
        assert_refused(
            &env,
            &["pool", "create", "-f", "other", text(device)],
            &files,
            &["imported pool 'tank'", "even with -f"],
        );
    }
    env.ok(&["pool", "create", "--size", "64M", "other", text(&b)]);
    assert_refused(
        &env,
        &["pool", "add", "-f", "other", "log", text(&a)],
        &files,
        &["imported pool 'tank'", "even with -f"],
    );
    let status = env.ok(&["pool", "status", "tank"]);
    assert!(
        status.contains("ONLINE") && !status.contains("DEGRADED"),
        "{status}"
    );

    // Exported, the pool's device needs -f, and takes it.
    env.ok(&["pool", "export", "tank"]);
    assert_refused(
        &env,
        &["pool", "create", "third", text(&a)],
        &files,
        &["exported pool 'tank'"],
    );
    env.ok(&["pool", "create", "-f", "third", text(&a)]);
}

/// Cuts the power of `args` after `ops` device operations; returns the exit code.
fn cut_after(env: &Env, args: &[&str], ops: u64) -> i32 {
    let out = env.run_with(args, Some(ops));
    out.status.code().expect("exit code")
}

/// True if the file carries a cairn label config (the magic at the start of label 0's config).
fn has_cairn_label(path: &Path) -> bool {
    let bytes = std::fs::read(path).unwrap();
    let config_offset = 16 << 10;
    bytes[config_offset..config_offset + 8] == 0x6c62_6c6e_7269_6163_u64.to_le_bytes()
}

#[test]
fn a_create_failing_at_any_device_operation_exits_non_zero_and_leaves_nothing() {
    let env = Env::new();
    let device = env.path("a.img");
    let spec = format!("emu:ram:{}", device.display());
    let create = ["pool", "create", "--size", "64M", "tank", spec.as_str()];
    let mut ops = 1;
    // Cut at operation 1, 2, ... until a create runs to the end before the cut: every earlier
    // cut (the last of them at the create's final flush) must fail it and leave no trace.
    while cut_after(&env, &create, ops) != 0 {
        assert!(
            !device.exists(),
            "cut at op {ops}: the created file was left"
        );
        assert!(env.pools().is_empty(), "cut at op {ops}: {:?}", env.pools());
        ops += 1;
        assert!(ops < 1000, "create never completed");
    }
    assert!(
        ops > 5,
        "the create must have been cut several times ({ops})"
    );
    // The create that was not cut is a whole pool.
    env.ok(&["pool", "check", "tank"]);
    let history = env.ok(&["pool", "history", "tank"]);
    assert!(history.contains("pool create"), "{history}");

    // create -V (a new name each time: a cut after the volume's txg but before the history
    // entry's fails the command and leaves a whole volume): every cut inside the command, up
    // to its final flush, fails it; the one that completes made its volume, and the pool
    // stays sound throughout. Sparse, so the volumes left behind do not reserve the pool full.
    let mut ops = 1;
    let volume = |ops: u64| format!("tank/vol{ops}");
    while cut_after(&env, &["create", "-s", "-V", "8M", &volume(ops)], ops) != 0 {
        ops += 1;
        assert!(ops < 1000, "create -V never completed");
    }
    assert!(
        ops > 3,
        "create -V must have been cut several times ({ops})"
    );
    let list = env.ok(&["list", "-H"]);
    let wanted = format!("{}\t", volume(ops));
    assert!(list.lines().any(|l| l.starts_with(&wanted)), "{list}");
    env.ok(&["pool", "check", "tank"]);
}

#[test]
fn a_device_left_half_created_is_free_without_force() {
    let env = Env::new();
    let device = env.path("a.img");
    let spec = format!("emu:ram:{}", device.display());
    // A device that existed before the create, so a failed create does not remove it.
    let create = ["pool", "create", "tank", spec.as_str()];
    let mut half_created_reused = 0;
    let mut ops = 1;
    loop {
        let blank = std::fs::File::create(&device).unwrap();
        blank.set_len(64 << 20).unwrap();
        drop(blank);
        if cut_after(&env, &create, ops) == 0 {
            break;
        }
        let labelled = has_cairn_label(&device);
        let out = env.run_with(&["pool", "create", "again", text(&device)], None);
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            half_created_reused += u64::from(labelled);
            env.ok(&["pool", "destroy", "again"]);
        } else {
            // Only a cut after the first uberblock leaves a pool that needs -f.
            assert!(
                labelled && err.contains("belongs to active pool 'tank'"),
                "op {ops}: {err}"
            );
        }
        ops += 1;
        assert!(ops < 1000, "create never completed");
    }
    assert!(
        half_created_reused > 0,
        "no cut left labels without an uberblock to reuse"
    );
}
