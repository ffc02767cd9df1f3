//! The Linux kernel's own NFS client against `cairn serve --nfs` (issue 35), in a throw-away
//! QEMU guest (`cairn-guest`: Debian's kernel, the host's root shared read-only; the host's
//! loopback is 10.0.2.2 there). The guest mounts a filesystem shared with
//! `sharenfs=no_root_squash` (its script runs as root, and these workloads need root to stay
//! root: ownership kept by tar, pjdfstest's chown and mknod) with
//! `vers=3,proto=tcp,nolock,port=P,mountport=P` (cairn answers MOUNT and PORTMAP on its NFS
//! port), and runs real workloads on it:
//!
//! - `kernel_client_runs_fsx_tar_and_git`: fsx (crates.io `fsx`, the binary `tests/fsx.rs`
//!   uses) with and without mmap; a tar of part of the host's /usr copied in, then, after a
//!   remount (so every byte comes back from the server, not the client's cache), compared by
//!   `tar --compare` (contents, sizes, modes, owners, mtimes, link targets); a `git clone` of
//!   this repository (a bare copy of it on the host, over file://) onto the mount and
//!   `git fsck --full --strict` plus a clean `git status` after a remount. On the host afterwards: the
//!   server stopped cleanly and `pool check` clean.
//! - `pjdfstest_on_cairn_is_no_worse_than_ganesha`: pjdfstest (crates.io, as `tests/
//!   pjdfstest.rs` runs it on FUSE) on the cairn mount and, in the same boot with the same
//!   mount options, on NFS-Ganesha exporting a directory of the host's ext4 (`Ganesha`, the
//!   reference server): cairn must fail exactly `KNOWN_FAILURES` (each explained there), and
//!   Ganesha each of them too. (Ganesha 4.3 also fails `utimensat::follow_symlink`, which
//!   cairn passes.)
//!
//! Each part's time in the guest is printed (`PART name ok|FAILED MS`) and kept in the failure
//! message. The emulated guest is slow, so CI runs fsx with `FSX_OPERATIONS` operations per
//! mode; `CAIRN_GUEST_FSX_OPERATIONS=100000` runs the long one by hand (docs/testing.md has
//! the result). The tools the guest runs are the host's: a missing one fails the test naming
//! its package (fsx and pjdfstest are installed by `.ci/run` with `cargo install`).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use cairn_guest::{BootOptions, Ganesha, Guest, GuestRun, HOST_ADDRESS, Share, shell_quote};
use nbd_common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// fsx operations per mode in CI: 5,000 take 15-20 s per mode in the emulated guest, 100,000
/// many minutes (19 with mmap on a loaded machine), too long for CI; docs/testing.md has the
/// long run, made by hand with `CAIRN_GUEST_FSX_OPERATIONS=100000`.
const FSX_OPERATIONS: u64 = 5_000;

/// What of the host's /usr the tar part copies (relative to /usr), from packages every Debian
/// system has (perl-base, libc6, and the required tools in /usr/sbin): ~26 MB in ~1,200
/// entries, many small files, symbolic links, directories and some large files. All of /usr
/// (5 GB here) or even /usr/share/doc (130 MB, 6,000 entries: 160 s in and compared) would
/// take too long in the emulated guest.
const TAR_PATHS: &[&str] = &[
    "lib/x86_64-linux-gnu/perl-base",
    "lib/x86_64-linux-gnu/gconv",
    "sbin",
];

/// The pjdfstest tests that fail on cairn's NFS mount, each with why: exactly these must fail,
/// and each must fail on Ganesha too (so cairn is no worse than the reference server). Both
/// are what any NFSv3 server gets from the Linux client, not something a server can change.
const KNOWN_FAILURES: &[(&str, &str)] = &[
    (
        "unlink::open_file_not_freed",
        "a file unlinked while open keeps st_nlink 1: the Linux NFS client does not send the \
         REMOVE of an open file but renames it to .nfsXXXX (\"silly rename\") until the last \
         close, so the server never sees an open, unlinked file",
    ),
    (
        "utimensat::y2038",
        "an mtime of 2^32 seconds (2106) does not fit NFSv3's nfstime3, whose seconds are 32 \
         bits unsigned (RFC 1813 2.6): the client cannot send it",
    ),
];

fn cargo_bin(name: &str, install: &str) -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo")
        });
    let installed = home.join("bin").join(name);
    if installed.exists() {
        return installed;
    }
    tool(name, install)
}

/// The mount options of a cairn NFS server on `port` (MOUNT and NFS on one port).
fn cairn_mount_options(port: u16) -> String {
    format!("vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock")
}

/// The lines `PART NAME STATUS MS` a guest script printed: name -> (ok, milliseconds).
fn parts(output: &str) -> Vec<(String, bool, u64)> {
    output
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("PART ")?.split_whitespace();
            let name = words.next()?.to_string();
            let ok = words.next()? == "ok";
            let ms = words.next()?.trim_end_matches("ms").parse().ok()?;
            Some((name, ok, ms))
        })
        .collect()
}

fn part_table(parts: &[(String, bool, u64)]) -> String {
    parts
        .iter()
        .map(|(name, ok, ms)| {
            format!(
                "{name}: {} in {:.1} s\n",
                if *ok { "ok" } else { "FAILED" },
                *ms as f64 / 1000.0
            )
        })
        .collect()
}

/// The shell function guest scripts time their parts with: `part NAME COMMAND...` runs the
/// command, its output to `$RESULTS/NAME.log`, and prints `PART NAME ok|FAILED MS`.
const PART_FUNCTION: &str = r#"part() {
    name=$1; shift
    start=$(date +%s%N)
    if "$@" > "$RESULTS/$name.log" 2>&1; then status=ok; else status=FAILED; fi
    end=$(date +%s%N)
    echo "PART $name $status $(( (end - start) / 1000000 ))ms"
}
"#;

/// Boots `script` with a writable results share at /mnt/results (the host's `results`).
fn boot(guest: &Guest, script: &str, results: &Path, timeout: Duration) -> GuestRun {
    let options = BootOptions {
        memory_mib: 1024,
        timeout,
        shares: vec![Share {
            host_path: results.to_path_buf(),
            guest_path: PathBuf::from("/mnt/results"),
            writable: true,
        }],
        ..BootOptions::default()
    };
    let script = format!("RESULTS=/mnt/results\n{PART_FUNCTION}{script}");
    guest.boot(&script, &options).expect("boot the guest")
}

/// What failed parts left in their logs, for failure messages.
fn failed_logs(results: &Path, parts: &[(String, bool, u64)]) -> String {
    let mut text = String::new();
    for (name, ok, _) in parts {
        if !ok {
            let log =
                std::fs::read_to_string(results.join(format!("{name}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            text.push_str(&format!("--- {name}.log (last lines) ---\n"));
            for line in tail.into_iter().rev() {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    text
}

/// fsx's configuration: its defaults, or with the mmap operations off (as `tests/fsx.rs`).
fn fsx_config(mmap: bool) -> String {
    let map_weight = if mmap { 10 } else { 0 };
    format!(
        "[weights]\nclose_open = 1\nread = 10\nwrite = 10\nmapread = {map_weight}\n\
         mapwrite = {map_weight}\ninvalidate = 1\ntruncate = 10\nfsync = 0\nfdatasync = 0\n"
    )
}

fn fsx_operations() -> u64 {
    match std::env::var("CAIRN_GUEST_FSX_OPERATIONS") {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("CAIRN_GUEST_FSX_OPERATIONS={text:?} is not a count")),
        Err(_) => FSX_OPERATIONS,
    }
}

/// A bare copy of this repository for the guest to clone over file://.
fn bare_repository(env: &Env) -> PathBuf {
    let git = tool("git", "git");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let bare = env.path("repo.git");
    run_limited(
        std::process::Command::new(&git)
            .arg("clone")
            .arg("--bare")
            .arg("--quiet")
            .arg(&workspace)
            .arg(&bare),
        TOOL_TIME,
    )
    .ok();
    bare
}

#[test]
fn kernel_client_runs_fsx_tar_and_git() {
    let _heavy = heavy();
    let fsx = cargo_bin("fsx", "(crates.io) fsx: cargo install fsx --locked");
    tool("tar", "tar");
    tool("mount.nfs", "nfs-common");
    let guest = Guest::prepare(&guest_cache_dir()).expect("prepare the guest kernel");
    let env = Env::new();
    env.create_pool_of("1G");
    env.ok(&["create", "-o", "sharenfs=no_root_squash", "tank/fs"]);
    let port = free_port();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);
    let bare = bare_repository(&env);
    let head = run(
        &tool("git", "git"),
        &["-C", bare.to_str().unwrap(), "rev-parse", "HEAD"],
    )
    .ok()
    .stdout
    .trim()
    .to_string();
    for mmap in [true, false] {
        std::fs::write(env.path(&format!("fsx-{mmap}.toml")), fsx_config(mmap)).unwrap();
    }
    let results = env.path("results");
    std::fs::create_dir(&results).unwrap();
    let operations = fsx_operations();
    let tar_paths: Vec<String> = TAR_PATHS.iter().map(|path| shell_quote(path)).collect();

    let script = format!(
        r#"set -u
MNT=/mnt/cairn
mount_it() {{ mount -t nfs -o {options},retry=0 {HOST_ADDRESS}:/tank/fs $MNT; }}
remount() {{ umount $MNT && mount_it; }}
mkdir -p $MNT /tmp/fsx-mmap /tmp/fsx-plain
part mount mount_it
grep " $MNT nfs " /proc/mounts
part fsx-mmap {fsx} -N {operations} -S 7 -f {env}/fsx-true.toml -P /tmp/fsx-mmap $MNT/fsx-mmap
part fsx-plain {fsx} -N {operations} -S 11 -f {env}/fsx-false.toml -P /tmp/fsx-plain $MNT/fsx-plain
tar_in() {{ mkdir -p $MNT/usr && tar -C /usr -cf - {tar_paths} | tar -C $MNT/usr -xpf -; }}
part tar-in tar_in
part remount-tar remount
tar_compare() {{ tar -C /usr -cf - {tar_paths} | tar -C $MNT/usr --compare --file=-; }}
part tar-compare tar_compare
git_clone() {{ git clone --quiet --no-hardlinks file://{bare} $MNT/clone; }}
part git-clone git_clone
part remount-git remount
git_check() {{ git -C $MNT/clone fsck --full --strict && test -z "$(git -C $MNT/clone status --porcelain)" && echo "HEAD $(git -C $MNT/clone rev-parse HEAD)"; }}
part git-fsck git_check
cat $RESULTS/git-fsck.log
du -sk $MNT/usr $MNT/clone | sed 's/^/SIZE /'
part umount umount $MNT
echo GUEST-DONE
"#,
        options = cairn_mount_options(port),
        env = env.dir.path().display(),
        bare = bare.display(),
        tar_paths = tar_paths.join(" "),
        fsx = fsx.display(),
    );
    let run = boot(&guest, &script, &results, Duration::from_secs(1500));
    let output = run.output();
    let parts = parts(output);
    let table = part_table(&parts);
    eprintln!(
        "guest: boot {:?}, whole run {:?}\n{table}{}",
        run.boot_time,
        run.total_time,
        output
            .lines()
            .filter(|line| line.starts_with("SIZE "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        run.success() && output.contains("GUEST-DONE"),
        "the guest's script failed (exit {}):\n{}\n{}",
        run.exit_code,
        run.console,
        server.logs()
    );
    assert!(
        parts.len() == 10 && parts.iter().all(|(_, ok, _)| *ok),
        "parts:\n{table}{}\nconsole:\n{}\n{}",
        failed_logs(&results, &parts),
        run.console,
        server.logs()
    );
    for mode in ["mmap", "plain"] {
        let log = std::fs::read_to_string(results.join(format!("fsx-{mode}.log"))).unwrap();
        assert!(
            log.contains("All operations completed A-OK"),
            "fsx {mode}:\n{log}"
        );
    }
    assert!(
        output.contains(&format!("HEAD {head}")),
        "the clone's HEAD is not {head}:\n{output}"
    );
    server.stop(libc::SIGINT, Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// pjdfstest's configuration for an NFSv3 mount: `tests/pjdfstest.rs`'s without
/// `posix_fallocate` (NFSv3 has no ALLOCATE: the client answers EOPNOTSUPP on any server).
const PJDFSTEST_CONFIG: &str = r#"
[features]
rename_ctime = {}
utimensat = {}
utime_now = {}
[settings]
naptime = 0.01
allow_remount = false
[dummy_auth]
entries = [["nobody", "nogroup"], ["tests", "tests"]]
"#;

/// Creates the suite's dummy user `tests` (group `tests`) when this machine lacks it; the
/// guest reads the host's /etc/passwd as it is at boot.
fn ensure_dummy_users() {
    let has = |name: &str| {
        std::process::Command::new("id")
            .arg(name)
            .output()
            .is_ok_and(|out| out.status.success())
    };
    assert!(has("nobody"), "no user nobody on this machine");
    if !has("tests") {
        let mut child = std::process::Command::new("newusers")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("run newusers (needs root)");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(b"tests:x:::Dummy User for pjdfstest:/:/usr/sbin/nologin\n")
            .expect("write to newusers");
        assert!(child.wait().expect("newusers").success(), "newusers failed");
    }
}

/// pjdfstest's verdicts in a log: its summary line and the names of the tests that failed.
fn pjdfstest_verdicts(log: &str) -> (String, BTreeSet<String>) {
    let summary = log
        .lines()
        .find(|line| line.contains("Summary:"))
        .unwrap_or_default()
        .to_string();
    let failed = log
        .lines()
        .filter(|line| line.trim_end().ends_with("FAILED"))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    (summary, failed)
}

#[test]
fn pjdfstest_on_cairn_is_no_worse_than_ganesha() {
    let _heavy = heavy();
    let pjdfstest = cargo_bin(
        "pjdfstest",
        "(crates.io) pjdfstest: apt-get install libacl1-dev && cargo install pjdfstest --locked",
    );
    ensure_dummy_users();
    tool("mount.nfs", "nfs-common");
    let guest = Guest::prepare(&guest_cache_dir()).expect("prepare the guest kernel");
    let env = Env::new();
    env.create_pool_of("1G");
    env.ok(&["create", "-o", "sharenfs=no_root_squash", "tank/fs"]);
    let port = free_port();
    let mut server = env.serve_with_args(&["--nfs", &format!("127.0.0.1:{port}")]);
    // Ganesha exports a directory of the host's file system (ext4 on CI's Debian machines).
    let export = env.path("ganesha-export");
    let ganesha_work = env.path("ganesha-work");
    std::fs::create_dir(&export).unwrap();
    std::fs::create_dir(&ganesha_work).unwrap();
    let ganesha = Ganesha::start(&export, &ganesha_work).expect("start NFS-Ganesha");
    std::fs::write(env.path("pjdfstest.toml"), PJDFSTEST_CONFIG).unwrap();
    let results = env.path("results");
    std::fs::create_dir(&results).unwrap();

    let script = format!(
        r#"set -u
mkdir -p /mnt/cairn /mnt/ganesha /tmp/secondary
chmod 755 /tmp/secondary
part mount-cairn mount -t nfs -o {cairn_options},retry=0 {HOST_ADDRESS}:/tank/fs /mnt/cairn
part mount-ganesha mount -t nfs -o {ganesha_options},retry=0 {HOST_ADDRESS}:{export} /mnt/ganesha
for server in cairn ganesha; do
    mkdir -p /mnt/$server/pjd && chmod 755 /mnt/$server/pjd
    pjd() {{ cd /mnt/$server/pjd && {pjdfstest} -c {env}/pjdfstest.toml -p /mnt/$server/pjd -s /tmp/secondary; }}
    part pjdfstest-$server pjd
    cd /
    grep "Summary:" $RESULTS/pjdfstest-$server.log | sed "s/^/$server /"
done
umount /mnt/cairn
umount /mnt/ganesha
echo GUEST-DONE
"#,
        cairn_options = cairn_mount_options(port),
        ganesha_options = ganesha.mount_options(),
        export = export.display(),
        env = env.dir.path().display(),
        pjdfstest = pjdfstest.display(),
    );
    let run = boot(&guest, &script, &results, Duration::from_secs(1500));
    let output = run.output();
    let parts = parts(output);
    let table = part_table(&parts);
    eprintln!(
        "guest: boot {:?}, whole run {:?}\n{table}",
        run.boot_time, run.total_time
    );
    assert!(
        run.success() && output.contains("GUEST-DONE"),
        "the guest's script failed (exit {}):\n{}\n{}\n--- ganesha ---\n{}",
        run.exit_code,
        run.console,
        server.logs(),
        ganesha.log()
    );
    let mounted = parts
        .iter()
        .filter(|(name, ok, _)| name.starts_with("mount-") && *ok)
        .count();
    assert_eq!(mounted, 2, "{table}{}", failed_logs(&results, &parts));
    let log = |name: &str| {
        std::fs::read_to_string(results.join(format!("pjdfstest-{name}.log"))).unwrap_or_default()
    };
    // The pjdfstest parts show FAILED whenever any test fails (the suite's exit status): the
    // verdicts in their logs are what is compared.
    let (cairn_summary, cairn_failed) = pjdfstest_verdicts(&log("cairn"));
    let (ganesha_summary, ganesha_failed) = pjdfstest_verdicts(&log("ganesha"));
    eprintln!(
        "cairn: {cairn_summary}\n  failed: {cairn_failed:?}\nganesha: {ganesha_summary}\n  failed: {ganesha_failed:?}"
    );
    assert!(
        !cairn_summary.is_empty() && !ganesha_summary.is_empty(),
        "no summary from pjdfstest:\n{table}{}",
        failed_logs(&results, &parts)
    );
    let known: BTreeSet<String> = KNOWN_FAILURES
        .iter()
        .map(|(name, _)| name.to_string())
        .collect();
    assert_eq!(
        cairn_failed,
        known,
        "pjdfstest's failures on cairn are not the known ones (KNOWN_FAILURES)\ncairn: {cairn_summary}\nganesha: {ganesha_summary}\n{}{}",
        failed_logs(&results, &parts),
        server.logs()
    );
    let cairn_only: Vec<&String> = known
        .iter()
        .filter(|name| !ganesha_failed.contains(*name))
        .collect();
    assert!(
        cairn_only.is_empty(),
        "pjdfstest tests failing on cairn but not on Ganesha: {cairn_only:?}\nganesha: {ganesha_summary}"
    );
    drop(ganesha);
    server.stop(libc::SIGINT, Duration::from_secs(60));
    env.assert_pool_check_clean();
}
