//! Where `cairn pool import` looks (issue 32, point 22), through the real binary on sparse
//! files: `import -d A` of a mirror whose side in A is damaged, while a like-named copy of the
//! pool sits in B (where the pool was created, so its labels name B's files): the missing side
//! is never looked for in B, and no later command (status, a write, export, another import)
//! opens, reads or writes B's files: the pool cache remembers only the devices import found
//! in A.

#[path = "../../cairn-engine/tests/craft/mod.rs"]
mod craft;

use cairn_format::label::{LABEL_COUNT, LABEL_SIZE, label_offset};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A test directory: `a/` and `b/` for device files, `state/` the state directory.
struct Dir {
    root: tempfile::TempDir,
}

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn describe(&self) -> String {
        format!(
            "exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

impl Dir {
    fn new() -> Dir {
        let root = tempfile::tempdir().expect("tempdir");
        for sub in ["a", "b"] {
            std::fs::create_dir(root.path().join(sub)).expect("mkdir");
        }
        Dir { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn arg(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    fn cairn(&self, args: &[&str]) -> Run {
        let out: Output = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .arg("--state-dir")
            .arg(self.path("state"))
            .args(args)
            .env_remove("CAIRN_STATE_DIR")
            .env("HOME", self.root.path())
            .current_dir(self.root.path())
            .output()
            .expect("run cairn");
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn ok(&self, args: &[&str]) -> Run {
        let run = self.cairn(args);
        assert_eq!(
            run.code,
            Some(0),
            "cairn {args:?} failed:\n{}",
            run.describe()
        );
        run
    }
}

/// Zeroes every label of a device: it no longer says which pool it belongs to.
fn erase_labels(path: &Path) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open device");
    let size = file.metadata().expect("stat").len();
    for index in 0..LABEL_COUNT {
        file.write_all_at(&vec![0u8; LABEL_SIZE as usize], label_offset(index, size))
            .expect("erase label");
    }
}

/// What a file looks like from outside: its bytes, and its modification and access times
/// (atimes were set far in the past first, so even a read under `relatime` moves them).
#[derive(PartialEq, Eq)]
struct Seen {
    bytes: Vec<u8>,
    mtime: std::time::SystemTime,
    atime: std::time::SystemTime,
}

fn seen(path: &Path) -> Seen {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let meta = std::fs::metadata(path).expect("stat");
    // O_NOATIME: looking must not move what is looked for.
    let mut bytes = Vec::new();
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOATIME)
        .open(path)
        .expect("open")
        .read_to_end(&mut bytes)
        .expect("read");
    Seen {
        bytes,
        mtime: meta.modified().expect("mtime"),
        atime: meta.accessed().expect("atime"),
    }
}

/// Sets a file's access time to 2001 (without reading it).
fn age_atime(path: &Path) {
    let status = Command::new("touch")
        .args(["-a", "-d", "2001-01-01 00:00:00"])
        .arg(path)
        .status()
        .expect("touch");
    assert!(status.success());
}

fn assert_untouched(paths: &[PathBuf], before: &[Seen], after_what: &str) {
    for (path, before) in paths.iter().zip(before) {
        let now = seen(path);
        assert!(
            now.bytes == before.bytes,
            "{} was written after {after_what}",
            path.display()
        );
        assert_eq!(
            now.mtime,
            before.mtime,
            "{} was modified after {after_what}",
            path.display()
        );
        assert_eq!(
            now.atime,
            before.atime,
            "{} was read after {after_what}",
            path.display()
        );
    }
}

#[test]
fn import_from_a_directory_never_opens_a_like_named_pool_elsewhere() {
    let dir = Dir::new();
    // The pool is made in B, so its labels name B's files.
    let b = [dir.path("b/s0.img"), dir.path("b/s1.img")];
    dir.ok(&[
        "pool",
        "create",
        "--size",
        "64M",
        "tank",
        "mirror",
        &dir.arg("b/s0.img"),
        &dir.arg("b/s1.img"),
    ]);
    dir.ok(&["create", "tank/kept"]);
    dir.ok(&["pool", "export", "tank"]);
    // A copy of it in A; A's second side is then damaged beyond recognition.
    let a = [dir.path("a/s0.img"), dir.path("a/s1.img")];
    for (from, to) in b.iter().zip(&a) {
        std::fs::copy(from, to).expect("copy device");
    }
    erase_labels(&a[1]);
    for path in &b {
        age_atime(path);
    }
    let before: Vec<Seen> = b.iter().map(|path| seen(path)).collect();

    let imported = dir.ok(&["pool", "import", "-d", &dir.arg("a"), "tank"]);
    println!("import:\n{}", imported.describe());
    assert_untouched(&b, &before, "import -d A");
    let cache = std::fs::read_to_string(dir.path("state/pools.cache")).expect("pool cache");
    assert!(
        !cache.contains(&dir.arg("b")),
        "the pool cache remembers a path outside A:\n{cache}"
    );

    let status = dir.ok(&["pool", "status", "tank"]);
    println!("status:\n{}", status.stdout);
    assert!(status.stdout.contains("DEGRADED"), "{}", status.describe());
    assert_untouched(&b, &before, "pool status");

    // Changes, and a close that writes the labels of every present leaf.
    dir.ok(&["create", "tank/new"]);
    dir.ok(&["pool", "status", "tank"]);
    assert_untouched(&b, &before, "a change to the pool");
    dir.ok(&["pool", "export", "tank"]);
    assert_untouched(&b, &before, "pool export");

    // The pool imports again from A alone; B's copy still is the old pool.
    dir.ok(&["pool", "import", "-d", &dir.arg("a"), "tank"]);
    let names = dir.ok(&["list", "-H", "-o", "name"]).stdout;
    assert!(names.contains("tank/new"), "{names}");
    dir.ok(&["pool", "export", "tank"]);
    assert_untouched(&b, &before, "a second import from A");
}
