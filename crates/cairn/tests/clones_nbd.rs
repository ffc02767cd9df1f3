//! Clones of volumes through real clients (issue 34), two scenarios.
//!
//! 1. ext4 on a served volume, snapshotted while it is mounted and busy. The volume's NBD
//!    export becomes a file through the kernel's FUSE (`nbdfuse`, Debian package libnbd-bin)
//!    and a block device through a loop device (the host kernel has no nbd module);
//!    `mkfs.ext4` formats it, it is mounted, and `fsx` (crates.io) works on a file in it with
//!    fsyncs among its operations. While fsx runs — no unmount, no sync — `cairn snapshot
//!    tank/vol@mid` is taken. A snapshot is a crash image: what the volume held at one instant,
//!    every write the kernel flushed before it included. So the snapshot's ext4 must be what a
//!    power cut would have left: a journal still to replay (the filesystem was mounted), and
//!    after the replay a filesystem `e2fsck -fn` finds clean. Then `cairn clone` makes a
//!    writable volume of it, which is mounted (the kernel replays the journal), worked on by
//!    fsx again, unmounted and found clean by `e2fsck -fn`; meanwhile the snapshot export and
//!    the origin volume keep every byte they had (`qemu-img compare` against copies taken
//!    before), and `pool check` is clean.
//!
//! 2. The seed's VM fleet in small: a 64 MiB "golden image" volume of random data (cached
//!    `primarycache=metadata`, so its data is not in the ARC when the clones are read),
//!    snapshot `@gold`, 20 clones `tank/vm0`..`tank/vm19` (`-o primarycache=all`). Reading every
//!    clone whole over NBD (`qemu-img compare` against the image file, which also proves the
//!    contents) grows the ARC's data by one image, not twenty: the cache is keyed by the block's
//!    physical address, which the clones share. Untouched clones use under 1 MiB each; a write
//!    to vm3 is seen neither in vm4 nor in the snapshot.
//!
//! Needs root, /dev/fuse, loop devices, e2fsprogs, qemu-utils, libnbd-bin and `fsx` (`.ci/run`
//! installs them); the tests fail, never skip, without them. Mounts, loop devices and nbdfuse
//! processes are released by guards, also when a test fails.

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// An NBD export as a block device: nbdfuse + a loop device
// ---------------------------------------------------------------------------------------------

/// An export of the server as a block device: `nbdfuse` makes it a file (`DIR/disk`), `losetup`
/// a loop device on that file. Dropping it detaches the loop device (deferred by the kernel
/// while a mount still holds it), unmounts the FUSE file and ends nbdfuse.
struct NbdDisk {
    fuse_dir: PathBuf,
    nbdfuse: Option<Child>,
    loop_dev: Option<String>,
}

impl NbdDisk {
    fn attach(env: &Env, server: &Server, export: &str, read_only: bool) -> NbdDisk {
        let fuse_dir = env.path(&format!("fuse-{}", export.replace(['/', '@'], "-")));
        std::fs::create_dir_all(&fuse_dir).expect("nbdfuse mount dir");
        let mut cmd = Command::new(tool("nbdfuse", "libnbd-bin"));
        if read_only {
            cmd.arg("-r");
        }
        let nbdfuse = cmd
            .arg(fuse_dir.join("disk"))
            .arg(server.uri(export))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nbdfuse");
        let mut disk = NbdDisk {
            fuse_dir,
            nbdfuse: Some(nbdfuse),
            loop_dev: None,
        };
        let file = disk.file();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::metadata(&file).map_or(0, |meta| meta.len()) == 0 {
            assert!(
                Instant::now() < deadline,
                "nbdfuse did not expose {export} as {}",
                file.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut args = vec!["--find", "--show"];
        if read_only {
            args.push("--read-only");
        }
        args.push(path_str(&file));
        let losetup = run(&tool("losetup", "mount"), &args).ok();
        disk.loop_dev = Some(losetup.stdout.trim().to_string());
        disk
    }

    /// The FUSE file holding the export.
    fn file(&self) -> PathBuf {
        self.fuse_dir.join("disk")
    }

    /// The loop device, `/dev/loopN`.
    fn dev(&self) -> &str {
        self.loop_dev.as_deref().expect("attached")
    }
}

impl Drop for NbdDisk {
    fn drop(&mut self) {
        if let Some(dev) = self.loop_dev.take() {
            let _ = Command::new("losetup").arg("-d").arg(&dev).status();
        }
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg("-z")
            .arg(&self.fuse_dir)
            .stderr(Stdio::null())
            .status();
        if let Some(mut child) = self.nbdfuse.take() {
            // It ends by itself once unmounted; a hung one is killed.
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `mount DEV AT` with `options`; the returned guard detaches the mount if the test fails
/// before `umount`.
fn mount(dev: &str, at: &Path, options: &str) -> Unmount {
    std::fs::create_dir_all(at).expect("mount point");
    let guard = Unmount(at.to_path_buf());
    run(
        &tool("mount", "mount"),
        &["-t", "ext4", "-o", options, dev, path_str(at)],
    )
    .ok();
    guard
}

/// `umount AT`, which writes everything back and must succeed.
fn umount(at: &Path) {
    run(&tool("umount", "mount"), &[path_str(at)]).ok();
}

/// `e2fsck -f -n TARGET`: read-only, never changes anything.
fn e2fsck_n(target: &Path) -> Run {
    run(&e2fsck(), &["-f", "-n", path_str(target)])
}

fn e2fsck() -> PathBuf {
    tool("e2fsck", "e2fsprogs")
}

/// e2fsck exits 0 when it found nothing wrong (it may still note the superblock's free
/// block and inode counts, which ext4 does not keep current while mounted: those are not
/// errors) and 4 when errors were left uncorrected (as `-n` leaves them).
fn assert_e2fsck_clean(target: &Path, what: &str) {
    let check = e2fsck_n(target);
    assert!(
        check.success(),
        "e2fsck -fn finds {what} damaged:\n{}",
        check.describe()
    );
}

// ---------------------------------------------------------------------------------------------
// fsx
// ---------------------------------------------------------------------------------------------

/// fsx on ext4: its default reads, writes and truncations, mapped reads and writes, reopenings,
/// and fsyncs (so data and journal commits reach the volume while it runs, not only at
/// unmount), hole punching and fallocate, on a file of up to 4 MiB.
const FSX_CONFIG: &str = "flen = 4194304\n[weights]\nclose_open = 1\nread = 10\nwrite = 10\n\
    mapread = 5\nmapwrite = 5\ninvalidate = 1\ntruncate = 5\nfsync = 2\nfdatasync = 2\n\
    punch_hole = 2\nposix_fallocate = 2\n";

/// A running fsx whose output goes to files in the test's directory.
struct Fsx {
    child: Child,
    what: String,
    out: PathBuf,
    err: PathBuf,
}

impl Fsx {
    fn start(env: &Env, name: &str, file: &Path, operations: u32, seed: u32) -> Fsx {
        let config = env.path(&format!("{name}.toml"));
        std::fs::write(&config, FSX_CONFIG).unwrap();
        let artifacts = env.path(&format!("{name}-artifacts"));
        std::fs::create_dir_all(&artifacts).unwrap();
        let (out, err) = (
            env.path(&format!("{name}.out")),
            env.path(&format!("{name}.err")),
        );
        let mut cmd = Command::new(fsx_binary());
        cmd.args(["-N", &operations.to_string(), "-S", &seed.to_string(), "-f"])
            .arg(&config)
            .arg("-P")
            .arg(&artifacts)
            .arg(file)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap());
        let what = format!("{cmd:?}");
        let child = cmd.spawn().expect("spawn fsx");
        Fsx {
            child,
            what,
            out,
            err,
        }
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().expect("wait for fsx").is_none()
    }

    /// Waits for fsx to end; it must report no miscompare.
    fn finish(mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for fsx") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{} ran over {limit:?}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = std::fs::read_to_string(&self.out).unwrap_or_default();
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        assert!(
            status.success() && out.contains("All operations completed A-OK"),
            "{} -> {status}\n--- stdout ---\n{out}\n--- stderr ---\n{err}",
            self.what
        );
    }
}

impl Drop for Fsx {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `qemu-img convert` of an export to a raw file.
fn copy_out(uri: &str, to: &Path) {
    run(
        &qemu_img(),
        &["convert", "-f", "raw", "-O", "raw", uri, path_str(to)],
    )
    .ok();
}

/// `qemu-img compare` of a raw file against an export: whether they are identical.
fn compare(file: &Path, uri: &str) -> Run {
    run(
        &qemu_img(),
        &["compare", "-f", "raw", "-F", "raw", path_str(file), uri],
    )
}

fn assert_identical(file: &Path, uri: &str, what: &str) {
    let same = compare(file, uri);
    assert!(
        same.success() && same.stdout.contains("Images are identical"),
        "{what}:\n{}",
        same.describe()
    );
}

/// `qemu-img compare` must find a difference (exit 1, "Content mismatch"), not fail (exit 2).
fn assert_differ(file: &Path, uri: &str, what: &str) {
    let differs = compare(file, uri);
    assert!(
        differs.status.code() == Some(1) && differs.stdout.contains("Content mismatch"),
        "{what}:\n{}",
        differs.describe()
    );
}

// ---------------------------------------------------------------------------------------------
// 1. ext4: a crash-consistent snapshot and a clone that works
// ---------------------------------------------------------------------------------------------

/// fsx operations on the origin; enough that it is still running when the snapshot is taken.
const ORIGIN_OPERATIONS: u32 = 10000;
/// fsx operations on the clone.
const CLONE_OPERATIONS: u32 = 3000;

#[test]
fn a_snapshot_of_mounted_ext4_under_fsx_is_crash_consistent_and_its_clone_works() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool_of("1G");
    env.create_volume("tank/vol", "256M", &["volblocksize=16K"]);
    let mut server = env.serve();

    // The origin: ext4 on the volume, mounted, fsx running on a file in it.
    let origin = NbdDisk::attach(&env, &server, "tank/vol", false);
    run(
        &tool("mkfs.ext4", "e2fsprogs"),
        &["-q", "-F", "-b", "4096", origin.dev()],
    )
    .ok();
    let origin_at = env.path("origin");
    let origin_mount = mount(origin.dev(), &origin_at, "rw");
    let mut fsx_origin = Fsx::start(
        &env,
        "fsx-origin",
        &origin_at.join("fsx-file"),
        ORIGIN_OPERATIONS,
        17,
    );
    // Let it get going (its file made, fsyncs passed down), then snapshot in the middle.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        fsx_origin.running(),
        "fsx ended before the snapshot: raise ORIGIN_OPERATIONS"
    );
    env.ok(&["snapshot", "tank/vol@mid"]);
    assert!(
        fsx_origin.running(),
        "fsx ended while the snapshot was taken: raise ORIGIN_OPERATIONS"
    );
    fsx_origin.finish(Duration::from_secs(600));
    umount(&origin_at);
    drop(origin_mount);
    drop(origin);
    // The origin itself, cleanly unmounted, is clean.
    let origin_copy = env.path("origin-after.img");
    copy_out(&server.uri("tank/vol"), &origin_copy);
    assert_e2fsck_clean(&origin_copy, "the origin after its unmount");

    // The snapshot, read through nbdfuse: a filesystem that was mounted, so its journal needs
    // recovery. `e2fsck -n` does not replay a journal (it writes nothing): it says it skips
    // the recovery and checks the metadata as it stands without it, where what the journal
    // holds is missing — here it typically exits 4, finding fsx's file pointing at an inode the
    // on-disk bitmap still calls free, since the inode's allocation is only in the journal. So
    // its verdict on the unreplayed image is no measure of the snapshot and is not asserted;
    // that the recovery is pending shows the snapshot was taken of a live mount, the point of
    // the test.
    let snap_uri = server.uri("tank/vol@mid");
    let snapshot = NbdDisk::attach(&env, &server, "tank/vol@mid", true);
    let unreplayed = e2fsck_n(&snapshot.file());
    assert!(
        unreplayed.stdout.contains("journal recovery")
            || unreplayed.stderr.contains("journal recovery"),
        "the snapshot of a mounted ext4 should have a journal to recover:\n{}",
        unreplayed.describe()
    );
    drop(snapshot);
    // What a power cut leaves is judged after the journal replay, as the kernel's mount or a
    // boot-time fsck would do: a copy of the snapshot has only its journal replayed
    // (`-E journal_only`, no other check or repair), and then `e2fsck -fn` must find it clean.
    let snap_copy = env.path("snap-mid.img");
    copy_out(&snap_uri, &snap_copy);
    let replayed = env.path("snap-mid-replayed.img");
    std::fs::copy(&snap_copy, &replayed).unwrap();
    let replay = run(
        &e2fsck(),
        &["-E", "journal_only", "-p", path_str(&replayed)],
    );
    assert!(
        replay.success(),
        "the journal replay failed:\n{}",
        replay.describe()
    );
    assert_e2fsck_clean(&replayed, "the snapshot after its journal replay");

    // The clone: mounted read-write (the kernel replays the journal), fsx on a new file, with
    // discards passed down (ext4 `discard`: trims through the loop device, FUSE and NBD).
    env.ok(&["clone", "tank/vol@mid", "tank/clone"]);
    let got = env.ok(&["get", "-H", "-o", "value", "origin", "tank/clone"]);
    assert_eq!(got.trim(), "tank/vol@mid");
    let clone = NbdDisk::attach(&env, &server, "tank/clone", false);
    let clone_at = env.path("clone");
    let clone_mount = mount(clone.dev(), &clone_at, "rw,discard");
    assert!(
        clone_at.join("fsx-file").exists(),
        "the clone holds the origin's file"
    );
    Fsx::start(
        &env,
        "fsx-clone",
        &clone_at.join("fsx-clone-file"),
        CLONE_OPERATIONS,
        23,
    )
    .finish(Duration::from_secs(600));
    umount(&clone_at);
    drop(clone_mount);
    assert_e2fsck_clean(Path::new(clone.dev()), "the clone after fsx and unmount");
    drop(clone);

    // The clone's writes touched neither the snapshot nor the origin.
    assert_identical(
        &snap_copy,
        &snap_uri,
        "the snapshot changed under its clone",
    );
    assert_identical(
        &origin_copy,
        &server.uri("tank/vol"),
        "the origin changed under its clone",
    );
    assert_differ(
        &snap_copy,
        &server.uri("tank/clone"),
        "the clone was written",
    );

    let check = env.ok(&["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
    server.terminate();
    env.assert_pool_check_clean();
}

// ---------------------------------------------------------------------------------------------
// 2. A fleet of clones of one golden image
// ---------------------------------------------------------------------------------------------

const IMAGE_SIZE: u64 = 64 * MIB;
const CLONES: usize = 20;

fn arc_data_size(env: &Env) -> u64 {
    let out = env.ok(&["stat", "arc", "-H", "-p"]);
    out.lines()
        .find_map(|line| line.strip_prefix("data_size\t"))
        .unwrap_or_else(|| panic!("no data_size in:\n{out}"))
        .parse()
        .unwrap_or_else(|_| panic!("data_size is not a number:\n{out}"))
}

/// `list -H -p -o name,COLUMN` as (name, value) rows.
fn list_column(env: &Env, column: &str) -> Vec<(String, String)> {
    let out = env.ok(&[
        "list",
        "-t",
        "all",
        "-H",
        "-p",
        "-o",
        &format!("name,{column}"),
    ]);
    out.lines()
        .map(|line| {
            let (name, value) = line
                .split_once('\t')
                .unwrap_or_else(|| panic!("not name<TAB>value: {line:?} in\n{out}"));
            (name.to_string(), value.to_string())
        })
        .collect()
}

#[test]
fn twenty_clones_of_a_golden_image_share_its_blocks_in_the_arc_and_on_disk() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/image", "64M", &["primarycache=metadata"]);
    let server = env.serve_with_args(&["--arc-max", "1G"]);

    let image = env.path("image.img");
    random_file(&image, IMAGE_SIZE, 34);
    qemu_copy_in(&image, &server.uri("tank/image"));
    env.ok(&["pool", "sync", "tank"]);
    env.ok(&["snapshot", "tank/image@gold"]);
    for vm in 0..CLONES {
        env.ok(&[
            "clone",
            "-o",
            "primarycache=all",
            "tank/image@gold",
            &format!("tank/vm{vm}"),
        ]);
    }
    let origins = list_column(&env, "origin");
    for vm in 0..CLONES {
        let name = format!("tank/vm{vm}");
        assert!(
            origins.contains(&(name.clone(), "tank/image@gold".to_string())),
            "{name}'s origin: {origins:?}"
        );
    }

    let clones = list_column(&env, "clones");
    let of_gold = &clones
        .iter()
        .find(|(name, _)| name == "tank/image@gold")
        .unwrap_or_else(|| panic!("the snapshot is not listed: {clones:?}"))
        .1;
    let mut listed: Vec<&str> = of_gold.split(',').collect();
    listed.sort_unstable();
    let mut expected: Vec<String> = (0..CLONES).map(|vm| format!("tank/vm{vm}")).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected, "the snapshot's clones: {clones:?}");

    // Every clone read whole through NBD, and proved equal to the image.
    let before = arc_data_size(&env);
    for vm in 0..CLONES {
        assert_identical(
            &image,
            &server.uri(&format!("tank/vm{vm}")),
            &format!("tank/vm{vm} is not the image"),
        );
    }
    let after = arc_data_size(&env);
    let grown = after.saturating_sub(before);
    assert!(
        (IMAGE_SIZE..2 * IMAGE_SIZE).contains(&grown),
        "reading {CLONES} clones grew the ARC's data by {grown} bytes ({before} -> {after}); \
         one image is {IMAGE_SIZE}: the clones' shared blocks should be cached once"
    );

    // Untouched clones own nothing.
    let used = list_column(&env, "used");
    for vm in 0..CLONES {
        let name = format!("tank/vm{vm}");
        let bytes: u64 = used
            .iter()
            .find(|(row, _)| *row == name)
            .unwrap_or_else(|| panic!("{name} not listed: {used:?}"))
            .1
            .parse()
            .unwrap_or_else(|_| panic!("{used:?}"));
        assert!(bytes < MIB, "{name} uses {bytes} bytes untouched: {used:?}");
    }

    // A write to one clone is its own.
    let vm3 = server.uri("tank/vm3");
    qemu_io_ok(&vm3, &["write -P 0xa5 1M 64k", "flush"]);
    qemu_io_ok(&vm3, &["read -P 0xa5 1M 64k"]);
    assert_differ(&image, &vm3, "vm3 shows its write");
    assert_identical(&image, &server.uri("tank/vm4"), "vm3's write shows in vm4");
    assert_identical(
        &image,
        &server.uri("tank/image@gold"),
        "vm3's write shows in the snapshot",
    );

    let check = env.ok(&["pool", "check", "tank"]);
    assert!(check.contains("no problems found"), "{check}");
    drop(server);
}
