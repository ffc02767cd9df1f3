//! Filesystem datasets through the real kernel FUSE (issue 15, first step): `cairn create` of a
//! filesystem, `cairn mount` (with a server, and starting one when none runs), ordinary file
//! operations from this process through the kernel, `cairn unmount`, and everything still
//! there after the server restarts (mounting by the `mountpoint` property) and in `pool check`.
//! A quota set on the live mount gives EDQUOT to `dd` and shows as the size `df` reports;
//! `atime` set on the live mount decides whether reads update access times.
//! Mounting needs root and /dev/fuse (CI runs as root; .ci/run installs fuse3).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) as u8
        })
        .collect()
}

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn files_written_through_fuse_survive_unmount_and_restart() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.ok(&["create", "-o", "recordsize=32K", "tank/home"]);
    let listed = env.ok(&["list"]);
    assert!(
        listed.contains("tank/home") && listed.contains("filesystem"),
        "{listed}"
    );
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    let mut server = env.serve();
    let out = env.ok(&["mount", "tank/home", at.to_str().unwrap()]);
    assert!(out.contains("mounted tank/home"), "{out}");
    // The mount names its dataset and its type, as `mount` and `df -T` show them.
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = table
        .lines()
        .find(|line| line.contains(&format!(" {} ", at.display())))
        .unwrap_or_else(|| panic!("{} not in mountinfo:\n{table}", at.display()));
    assert!(line.contains(" - fuse.cairn tank/home "), "{line}");

    // Ordinary programs' file operations, through the kernel.
    let big = pattern(3 << 20, 1);
    std::fs::write(at.join("big.bin"), &big).unwrap();
    std::fs::create_dir(at.join("docs")).unwrap();
    std::fs::write(at.join("docs/note.txt"), b"cairn").unwrap();
    std::os::unix::fs::symlink("docs/note.txt", at.join("link")).unwrap();
    std::fs::hard_link(at.join("docs/note.txt"), at.join("hard")).unwrap();
    std::fs::rename(at.join("big.bin"), at.join("docs/big.bin")).unwrap();
    {
        // A rewrite in the middle, then fsync.
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(at.join("docs/big.bin"))
            .unwrap();
        file.seek(SeekFrom::Start(1_000_000)).unwrap();
        file.write_all(b"in the middle").unwrap();
        file.sync_all().unwrap();
    }
    let mut expected = big.clone();
    expected[1_000_000..1_000_013].copy_from_slice(b"in the middle");
    std::fs::set_permissions(at.join("hard"), std::fs::Permissions::from_mode(0o640)).unwrap();
    std::fs::write(at.join("gone"), b"x").unwrap();
    std::fs::remove_file(at.join("gone")).unwrap();
    assert_eq!(names(&at), ["docs", "hard", "link"]);
    // The server counts the filesystem's calls: iostat's row for it and `stat fs`.
    let iostat = env.ok(&["pool", "iostat", "-H", "-p"]);
    let row: Vec<&str> = iostat
        .lines()
        .map(|line| line.split('\t').collect::<Vec<_>>())
        .find(|fields| fields[0] == "tank/home")
        .unwrap_or_else(|| panic!("tank/home in iostat:\n{iostat}"));
    let number =
        |index: usize| -> f64 { row[index].parse().unwrap_or_else(|_| panic!("{iostat}")) };
    assert!(number(4) > 0.0, "W-BW/S of a written filesystem: {iostat}");
    assert!(number(5) > 0.0, "FLUSH/S of a filesystem fsynced: {iostat}");
    assert!(
        number(7) > 0.0,
        "META/S of a filesystem with creates: {iostat}"
    );
    // A txg sync publishes the new files' dnodes into the object set's memo.
    env.ok(&["pool", "sync", "tank"]);
    let stat = env.ok(&["stat", "fs", "-H", "-p"]);
    let field = |name: &str| -> u64 {
        stat.lines()
            .find_map(|line| line.strip_prefix(&format!("tank/home.{name}\t")))
            .unwrap_or_else(|| panic!("{name} in stat fs:\n{stat}"))
            .parse()
            .unwrap()
    };
    assert!(field("write.bytes") >= big.len() as u64, "{stat}");
    assert!(field("create.count") >= 4, "{stat}");
    assert_eq!(field("remove.count"), 1, "{stat}");
    assert!(field("fsync.count") >= 1, "{stat}");
    assert!(field("write.p99_us") > 0, "{stat}");
    assert!(field("memo_dnodes") >= 4, "{stat}");
    assert!(
        field("memo_dnode_bytes") >= field("memo_dnodes") * 256,
        "{stat}"
    );
    // Large requests (`init` asks for 1 MiB): the 3 MiB file came in a few writes, not in
    // dozens of 128 KiB ones.
    let mean_write_bytes = field("write.bytes") / field("write.count");
    assert!(
        mean_write_bytes >= 256 << 10,
        "mean write {mean_write_bytes} B: {stat}"
    );
    assert_eq!(
        std::fs::metadata(at.join("docs/note.txt")).unwrap().nlink(),
        2
    );
    assert_eq!(
        std::fs::read_link(at.join("link")).unwrap(),
        Path::new("docs/note.txt")
    );
    assert_eq!(std::fs::read(at.join("link")).unwrap(), b"cairn");
    let err = std::fs::remove_dir(at.join("docs")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOTEMPTY));
    let err = std::fs::create_dir(at.join("docs")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EEXIST));
    // An open file outlives its name.
    let mut open = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(at.join("tmp"))
        .unwrap();
    open.write_all(b"still here").unwrap();
    std::fs::remove_file(at.join("tmp")).unwrap();
    let mut back = String::new();
    open.seek(SeekFrom::Start(0)).unwrap();
    open.read_to_string(&mut back).unwrap();
    assert_eq!(back, "still here");
    drop(open);

    let out = env.ok(&["unmount", "tank/home"]);
    assert!(out.contains("unmounted"), "{out}");
    assert!(!at.join("docs").exists(), "still mounted after unmount");
    // The next server mounts it by its property.
    env.ok(&["set", &format!("mountpoint={}", at.display()), "tank/home"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    let mut server = env.serve();
    assert!(
        at.join("docs").exists(),
        "not mounted at start:\n{}",
        server.logs()
    );
    assert_eq!(std::fs::read(at.join("docs/big.bin")).unwrap(), expected);
    assert_eq!(std::fs::read(at.join("hard")).unwrap(), b"cairn");
    assert_eq!(
        std::fs::metadata(at.join("hard"))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777,
        0o640
    );
    assert!(!at.join("gone").exists() && !at.join("tmp").exists());
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    assert!(!at.join("docs").exists(), "a stopped server left its mount");
    env.assert_pool_check_clean();
}

#[test]
fn mount_without_a_server_starts_one() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.ok(&["create", "tank/fs"]);
    let at = env.path("mnt");
    let _cleanup = Unmount(at.clone());
    let run = env.cairn(&["mount", "tank/fs", at.to_str().unwrap()]);
    assert!(run.success(), "{}", run.describe());
    assert!(
        run.stderr.contains("started a server"),
        "{}",
        run.describe()
    );
    std::fs::write(at.join("f"), b"data").unwrap();
    assert_eq!(std::fs::read(at.join("f")).unwrap(), b"data");
    // Other commands go to that server while it runs.
    let listed = env.ok(&["list", "tank/fs"]);
    assert!(listed.contains("tank/fs"), "{listed}");
    env.ok(&["unmount", at.to_str().unwrap()]);
    let run = env.cairn(&["unmount", "tank/fs"]);
    assert!(!run.success(), "a second unmount succeeded");
    // Stop the server the mount started (it keeps running until told to), and wait for the
    // process to end: it exports the pool after its control socket is gone.
    let pattern = format!("{} serve", env.state().display());
    let status = std::process::Command::new("pkill")
        .args(["-INT", "-f", &pattern])
        .status()
        .unwrap();
    assert!(status.success(), "no server to stop");
    let running = || {
        std::process::Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .is_ok_and(|out| out.status.success())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while running() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!running(), "the server did not stop");
    env.assert_pool_check_clean();
}

fn c_path(path: &Path) -> std::ffi::CString {
    std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap()
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[test]
fn xattrs_holes_and_fallocate_through_fuse() {
    use std::os::fd::AsRawFd;
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &["recordsize=8K"]);
    let file = at.join("f");
    std::fs::write(&file, vec![7u8; 64 << 10]).unwrap();
    let path = c_path(&file);
    // Extended attributes: set, create-only, replace-only, list, get, remove.
    let (name, value) = (c"user.colour", b"blue");
    // SAFETY: valid C strings and a buffer of the given length, for all the calls below.
    unsafe {
        assert_eq!(
            libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), 4, 0),
            0
        );
        assert_eq!(
            libc::setxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_ptr().cast(),
                4,
                libc::XATTR_CREATE
            ),
            -1
        );
        assert_eq!(errno(), libc::EEXIST);
        assert_eq!(
            libc::setxattr(
                path.as_ptr(),
                c"user.none".as_ptr(),
                value.as_ptr().cast(),
                4,
                libc::XATTR_REPLACE
            ),
            -1
        );
        assert_eq!(errno(), libc::ENODATA);
        let mut buf = [0u8; 64];
        let got = libc::getxattr(
            path.as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        );
        assert_eq!(&buf[..got as usize], value);
        assert_eq!(
            libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0),
            4
        );
        let listed = libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len());
        assert_eq!(&buf[..listed as usize], b"user.colour\0");
        assert_eq!(libc::removexattr(path.as_ptr(), name.as_ptr()), 0);
        assert_eq!(
            libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), 64),
            -1
        );
        assert_eq!(errno(), libc::ENODATA);
    }
    // Punch a hole of two whole records plus part of a third; SEEK_HOLE and SEEK_DATA find it.
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&file)
        .unwrap();
    let fd = handle.as_raw_fd();
    // SAFETY: an open descriptor; offsets within the file.
    unsafe {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        assert_eq!(
            libc::fallocate(fd, mode, 16 << 10, (16 << 10) + 100),
            0,
            "{}",
            errno()
        );
        assert_eq!(libc::lseek(fd, 0, libc::SEEK_HOLE), 16 << 10);
        assert_eq!(libc::lseek(fd, 16 << 10, libc::SEEK_DATA), 32 << 10);
        assert_eq!(libc::lseek(fd, 40 << 10, libc::SEEK_HOLE), 64 << 10);
        assert_eq!(libc::lseek(fd, 64 << 10, libc::SEEK_DATA), -1);
        assert_eq!(errno(), libc::ENXIO);
        // Allocating past the end extends the file.
        assert_eq!(libc::fallocate(fd, 0, 60 << 10, 20 << 10), 0, "{}", errno());
    }
    drop(handle);
    let contents = std::fs::read(&file).unwrap();
    assert_eq!(contents.len(), 80 << 10);
    assert!(contents[..16 << 10].iter().all(|b| *b == 7));
    assert!(contents[16 << 10..(32 << 10) + 100].iter().all(|b| *b == 0));
    assert!(contents[(32 << 10) + 100..64 << 10].iter().all(|b| *b == 7));
    assert!(contents[64 << 10..].iter().all(|b| *b == 0));
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

#[test]
fn fsynced_files_survive_sigkill_of_the_server() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &["recordsize=16K"]);
    std::fs::create_dir(at.join("d")).unwrap();
    // A writer that creates, writes and fsyncs files (and their directory), and renames
    // every other one, recording what each fsync acknowledged, until the server dies.
    let writer = {
        let at = at.clone();
        std::thread::spawn(move || {
            let mut acknowledged: Vec<(String, Vec<u8>)> = Vec::new();
            for index in 0u64.. {
                let data = pattern(1000 + (index as usize * 7919) % 60_000, index);
                let name = format!("f{index}");
                let path = at.join("d").join(&name);
                let done = (|| -> std::io::Result<String> {
                    let mut file = std::fs::File::create(&path)?;
                    file.write_all(&data)?;
                    let name = if index % 2 == 1 {
                        let renamed = format!("r{index}");
                        std::fs::rename(&path, at.join("d").join(&renamed))?;
                        renamed
                    } else {
                        name
                    };
                    file.sync_all()?;
                    std::fs::File::open(at.join("d"))?.sync_all()?;
                    Ok(name)
                })();
                match done {
                    Ok(name) => acknowledged.push((name, data)),
                    Err(_) => break,
                }
                if index > 100_000 {
                    break;
                }
            }
            acknowledged
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    server.signal(libc::SIGKILL);
    let acknowledged = writer.join().unwrap();
    assert!(
        acknowledged.len() > 10,
        "only {} files before the kill",
        acknowledged.len()
    );
    eprintln!("{} files acknowledged before SIGKILL", acknowledged.len());
    let _ = server.stop(libc::SIGKILL, std::time::Duration::from_secs(10));
    // The dead server's mount answers nothing (ENOTCONN) until the next server detaches it.
    // (Asked with statfs, which always reaches the server: a stat may be answered from the
    // attributes the kernel keeps for a second.)
    let path = std::ffi::CString::new(at.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: a valid NUL-terminated path and a buffer of the type statfs fills.
    let status = unsafe { libc::statfs(path.as_ptr(), buf.as_mut_ptr()) };
    assert_eq!(status, -1, "a dead mount answered statfs");
    assert_eq!(errno(), libc::ENOTCONN);
    let _guard = Unmount(at.clone());
    let mut server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    for (name, data) in &acknowledged {
        let found = std::fs::read(at.join("d").join(name))
            .unwrap_or_else(|err| panic!("{name} acknowledged by fsync, lost: {err}"));
        assert!(&found == data, "{name}: contents differ after the kill");
    }
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// `df -B1 --output=size,avail` of `at`: (size, available) in bytes.
fn df(at: &Path) -> (u64, u64) {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=size,avail"])
        .arg(at)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let numbers: Vec<u64> = text
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .map(|field| field.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 2, "{text}");
    (numbers[0], numbers[1])
}

/// `dd` of `mib` MiB of random bytes into `file`: (succeeded, stderr).
fn dd(file: &Path, mib: u64) -> (bool, String) {
    let out = std::process::Command::new("dd")
        .arg("if=/dev/urandom")
        .arg(format!("of={}", file.display()))
        .args(["bs=1M", &format!("count={mib}")])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `cairn list -H -p -o used,avail,refer` of `dataset`.
fn used_avail_refer(env: &Env, dataset: &str) -> (u64, u64, u64) {
    let out = env.ok(&["list", "-H", "-p", "-o", "used,avail,refer", dataset]);
    let fields: Vec<u64> = out
        .split_whitespace()
        .map(|field| field.parse().unwrap())
        .collect();
    assert_eq!(fields.len(), 3, "{out}");
    (fields[0], fields[1], fields[2])
}

#[test]
fn a_quota_set_on_a_mounted_filesystem_gives_edquot_and_df_shows_it() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/home", &[]);
    let (pool_size, _) = df(&at);
    assert!(pool_size > 400 << 20, "df before the quota: {pool_size}");
    let quota: u64 = 32 << 20;
    env.ok(&["set", "quota=32M", "tank/home"]);
    env.ok(&["set", "atime=off", "tank/home"]);
    let got = env.ok(&["get", "-H", "-o", "value", "quota,atime", "tank/home"]);
    assert_eq!(got.split_whitespace().collect::<Vec<_>>(), ["32M", "off"]);
    let listed = env.ok(&["list", "-t", "filesystem"]);
    for column in ["USED", "AVAIL", "REFER", "MOUNTPOINT"] {
        assert!(listed.contains(column), "{listed}");
    }
    // The quota is the filesystem's size to df, on the live mount.
    let (size, avail) = df(&at);
    assert_eq!(size, quota);
    let (used, list_avail, _) = used_avail_refer(&env, "tank/home");
    assert_eq!(avail, quota - used);
    assert_eq!(list_avail, quota - used);

    // dd runs into the quota with EDQUOT ("Disk quota exceeded"), not ENOSPC.
    let (ok, stderr) = dd(&at.join("big"), 64);
    assert!(!ok, "dd of 64 MiB into a 32 MiB quota succeeded: {stderr}");
    assert!(stderr.contains("Disk quota exceeded"), "{stderr}");
    let written = std::fs::metadata(at.join("big")).unwrap().len();
    assert!(written > 24 << 20 && written < quota, "{written} bytes");
    env.ok(&["pool", "sync", "tank"]);
    let (used, list_avail, refer) = used_avail_refer(&env, "tank/home");
    assert!(used <= quota && used >= written, "USED {used}");
    assert_eq!(refer, used);
    assert_eq!(list_avail, quota - used);
    let (size, avail) = df(&at);
    assert_eq!((size, avail), (quota, quota - used));
    // Small changes are refused too once nothing fits; deletes work.
    let (ok, stderr) = dd(&at.join("more"), 4);
    assert!(!ok && stderr.contains("Disk quota exceeded"), "{stderr}");
    let rm = std::process::Command::new("rm")
        .arg(at.join("big"))
        .arg(at.join("more"))
        .output()
        .unwrap();
    assert!(rm.status.success(), "{rm:?}");
    let (ok, stderr) = dd(&at.join("after"), 16);
    assert!(ok, "dd after rm: {stderr}");
    env.ok(&["pool", "sync", "tank"]);
    let (used, _, _) = used_avail_refer(&env, "tank/home");
    assert!(used < 24 << 20, "USED {used} after rm and 16 MiB");
    // Raised live: the size df shows follows.
    env.ok(&["set", "quota=none", "tank/home"]);
    assert!(df(&at).0 > 400 << 20);
    let (ok, stderr) = dd(&at.join("big"), 48);
    assert!(ok, "dd without a quota: {stderr}");

    // atime=off (set above) leaves access times alone; atime=on, set on the live mount,
    // updates them on reads. (The kernel keeps attributes for a second.)
    let accessed = |path: &Path| {
        let meta = std::fs::metadata(path).unwrap();
        (meta.atime(), meta.atime_nsec())
    };
    let pause = || std::thread::sleep(std::time::Duration::from_millis(1100));
    let file = at.join("after");
    let before = accessed(&file);
    pause();
    assert_eq!(std::fs::read(&file).unwrap().len(), 16 << 20);
    pause();
    assert_eq!(accessed(&file), before);
    env.ok(&["set", "atime=on", "tank/home"]);
    std::fs::read(&file).unwrap();
    pause();
    assert!(accessed(&file) > before, "atime=on did not update it");
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

fn acl_tool(name: &str, args: &[&str], at: &Path) -> String {
    let run = run_limited(
        std::process::Command::new(tool(name, "acl"))
            .args(args)
            .current_dir(at),
        std::time::Duration::from_secs(30),
    );
    assert!(run.success(), "{name} {args:?}: {}", run.describe());
    run.stdout
}

/// A pool with filesystem tank/fs mounted by a server, reachable by other users (the test
/// directory opened to them, the mount's root given `root_mode`).
fn mounted_for_others(env: &Env, root_mode: u32) -> (PathBuf, Unmount, Server) {
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (at, cleanup, server) = served_mount(env, "tank/fs", &[]);
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(root_mode)).unwrap();
    (at, cleanup, server)
}

#[test]
fn posix_acls_are_enforced_kept_with_the_mode_and_inherited() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = mounted_for_others(&env, 0o755);
    let secret = at.join("secret");
    std::fs::write(&secret, b"for nobody's eyes").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let path = secret.to_str().unwrap();
    let (read, out) = as_nobody(&["cat", path]);
    assert!(!read, "mode 0600 keeps nobody out: {out}");
    // A named entry lets one user in; the mode's group bits show the mask.
    acl_tool("setfacl", &["-m", "u:nobody:r", "secret"], &at);
    let (read, out) = as_nobody(&["cat", path]);
    assert!(read && out.contains("for nobody's eyes"), "{out}");
    let mode = std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "group bits are the mask r--");
    // chmod rewrites the mask: g-r takes nobody's read away again.
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let listed = acl_tool("getfacl", &["-c", "secret"], &at);
    assert!(listed.contains("mask::---"), "{listed}");
    let (read, out) = as_nobody(&["cat", path]);
    assert!(!read, "the mask limits the named entry: {out}");
    // An ACL the mode alone says sets the mode and is not kept: getfacl shows the mode.
    std::fs::write(at.join("minimal"), b"m").unwrap();
    acl_tool("setfacl", &["--set", "u::rw,g::r,o::-", "minimal"], &at);
    assert_eq!(mode_of(&at.join("minimal")) & 0o777, 0o640);
    let listed = acl_tool("getfacl", &["-c", "minimal"], &at);
    assert!(
        listed.contains("user::rw-") && listed.contains("group::r--") && !listed.contains("mask"),
        "{listed}"
    );
    // A default ACL: new files and directories inherit it, the umask does not apply.
    std::fs::create_dir(at.join("shared")).unwrap();
    acl_tool(
        "setfacl",
        &["-d", "-m", "u:nobody:rwx,m::rwx", "shared"],
        &at,
    );
    std::fs::write(at.join("shared/new"), b"x").unwrap();
    std::fs::create_dir(at.join("shared/sub")).unwrap();
    let file_acl = acl_tool("getfacl", &["-c", "shared/new"], &at);
    assert!(file_acl.contains("user:nobody:rwx"), "{file_acl}");
    let dir_acl = acl_tool("getfacl", &["-c", "shared/sub"], &at);
    assert!(dir_acl.contains("default:user:nobody:rwx"), "{dir_acl}");
    let (wrote, out) = as_nobody(&[
        "sh",
        "-c",
        &format!("echo hi >> {}/shared/new", at.display()),
    ]);
    assert!(wrote, "nobody writes through the inherited entry: {out}");
    // Everything holds after a restart (the ACLs are xattrs of the pool, the modes agree).
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    let mut server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    let (read, _) = as_nobody(&["cat", path]);
    assert!(!read, "after the restart the mask still limits");
    assert_eq!(std::fs::read(at.join("shared/new")).unwrap(), b"xhi\n");
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// The mount asks the kernel to leave set-ID bits and capabilities to the filesystem
/// (handle_killpriv_v2, so that a write need not ask for `security.capability` first): a write
/// or truncate by an unprivileged user and any chown must still take them away, as on a local
/// filesystem, and a write by root must not.
#[test]
fn set_id_bits_and_capabilities_go_on_unprivileged_write_truncate_and_chown() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = mounted_for_others(&env, 0o777);
    let file = |name: &str, mode: u32| {
        let path = at.join(name);
        std::fs::write(&path, b"0123456789").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        assert_eq!(mode_of(&path), mode, "{name}: mode as set");
        path
    };
    let append = |path: &Path| format!("echo more >> {}", path.display());

    // A write by nobody: set-user-ID goes, set-group-ID too when the group may execute.
    let both = file("both", 0o6777);
    let (ok, out) = as_nobody(&["sh", "-c", &append(&both)]);
    assert!(ok, "{out}");
    assert_eq!(mode_of(&both), 0o0777, "set-ID bits after nobody's write");
    // Set-group-ID without group execute marks mandatory locking: it stays.
    let locking = file("locking", 0o2766);
    let (ok, out) = as_nobody(&["sh", "-c", &append(&locking)]);
    assert!(ok, "{out}");
    assert_eq!(
        mode_of(&locking),
        0o2766,
        "set-GID without g+x after nobody's write"
    );
    // A truncate by nobody.
    let truncated = file("truncated", 0o4777);
    let (ok, out) = as_nobody(&["truncate", "-s", "3", truncated.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert_eq!(std::fs::metadata(&truncated).unwrap().len(), 3);
    assert_eq!(
        mode_of(&truncated),
        0o0777,
        "set-UID after nobody's truncate"
    );
    // Root keeps them on its own writes (CAP_FSETID), loses them on chown.
    let rooted = file("rooted", 0o4755);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&rooted)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"root"))
        .unwrap();
    assert_eq!(mode_of(&rooted), 0o4755, "root's write keeps set-UID");
    std::os::unix::fs::chown(&rooted, Some(65534), None).unwrap();
    assert_eq!(mode_of(&rooted), 0o0755, "chown takes set-UID away");
    // File capabilities go with an unprivileged write too.
    let capable = file("capable", 0o0777);
    let setcap = run_limited(
        std::process::Command::new(tool("setcap", "libcap2-bin"))
            .args(["cap_net_raw+ep", capable.to_str().unwrap()]),
        std::time::Duration::from_secs(30),
    );
    assert!(setcap.success(), "setcap: {}", setcap.describe());
    let getcap = |path: &Path| {
        let run = run_limited(
            std::process::Command::new(tool("getcap", "libcap2-bin")).arg(path),
            std::time::Duration::from_secs(30),
        );
        assert!(run.success(), "getcap: {}", run.describe());
        run.stdout
    };
    assert!(getcap(&capable).contains("cap_net_raw"), "capability set");
    let (ok, out) = as_nobody(&["sh", "-c", &append(&capable)]);
    assert!(ok, "{out}");
    assert!(
        !getcap(&capable).contains("cap_net_raw"),
        "capability after nobody's write: {}",
        getcap(&capable)
    );
    // And all of it as the pool keeps it, after a restart.
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    let mut server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    assert_eq!(mode_of(&at.join("both")), 0o0777);
    assert_eq!(mode_of(&at.join("locking")), 0o2766);
    assert_eq!(mode_of(&at.join("rooted")), 0o0755);
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// Calls of `kind` the server counted for its filesystems (`stat fs`; a kind never called
/// has no row).
fn calls_counted(env: &Env, kind: &str) -> u64 {
    let out = env.ok(&["stat", "fs"]);
    out.lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.get(1) == Some(&kind))
        .map_or(0, |fields| fields[2].parse().expect("a count"))
}

/// A file opened O_DSYNC is served without the page cache: each write(2) is one WRITE made
/// durable before it is answered (no FSYNC follows it), a descriptor reading through the page
/// cache sees every such write, whole records go in place under `logbias=throughput`, the
/// file can still be mapped shared, and every acknowledged write survives SIGKILL of the
/// server.
#[test]
fn o_dsync_writes_are_durable_coherent_and_need_no_fsync() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &["recordsize=16K"]);
    const FILE_BYTES: usize = 256 << 10;
    const PIECE: usize = 8192;
    let path = at.join("db");
    let mut expected = pattern(FILE_BYTES, 1);
    std::fs::write(&path, &expected).unwrap();
    std::fs::File::open(&path).unwrap().sync_all().unwrap();
    // A reader through the page cache, its pages filled now.
    let reader = std::fs::File::open(&path).unwrap();
    let mut seen = vec![0u8; FILE_BYTES];
    reader.read_exact_at(&mut seen, 0).unwrap();
    assert!(seen == expected);
    let synced = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DSYNC)
        .open(&path)
        .unwrap();
    let fsyncs_before = calls_counted(&env, "fsync");
    for step in 0..64u64 {
        let offset = (step as usize * 5 * PIECE) % (FILE_BYTES - PIECE);
        let piece = pattern(PIECE, 100 + step);
        synced.write_all_at(&piece, offset as u64).unwrap();
        expected[offset..offset + PIECE].copy_from_slice(&piece);
        let mut cached = vec![0u8; PIECE];
        reader.read_exact_at(&mut cached, offset as u64).unwrap();
        assert!(
            cached == piece,
            "step {step}: the page cache reader did not see an O_DSYNC write at {offset}"
        );
    }
    assert_eq!(
        calls_counted(&env, "fsync"),
        fsyncs_before,
        "O_DSYNC writes were followed by FSYNC round trips"
    );
    // Under logbias=throughput, set on the live mount, whole records of such writes go in
    // place and the log holds their pointers.
    env.ok(&["set", "logbias=throughput", "tank/fs"]);
    const RECORD: usize = 16 << 10;
    for step in 0..4u64 {
        let offset = step as usize * 3 * RECORD;
        let piece = pattern(2 * RECORD, 200 + step);
        synced.write_all_at(&piece, offset as u64).unwrap();
        expected[offset..offset + 2 * RECORD].copy_from_slice(&piece);
    }
    let zil = env.ok(&["stat", "zil"]);
    let header: Vec<&str> = zil.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = zil
        .lines()
        .find(|line| line.starts_with("tank/fs"))
        .unwrap()
        .split_whitespace()
        .collect();
    let column = header.iter().position(|name| *name == "INPLACE").unwrap();
    assert!(
        row[column] != "0",
        "no record written in place under logbias=throughput:\n{zil}"
    );
    // Mapped shared through the O_DSYNC descriptor: the kernel allows it and shows the data.
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a fresh shared read-only mapping of an open file of FILE_BYTES bytes,
        // read within its length and unmapped before the descriptor closes.
        unsafe {
            let map = libc::mmap(
                std::ptr::null_mut(),
                FILE_BYTES,
                libc::PROT_READ,
                libc::MAP_SHARED,
                synced.as_raw_fd(),
                0,
            );
            assert_ne!(
                map,
                libc::MAP_FAILED,
                "mmap: {}",
                std::io::Error::last_os_error()
            );
            let mapped = std::slice::from_raw_parts(map as *const u8, FILE_BYTES);
            assert!(
                mapped == expected.as_slice(),
                "the mapping shows other data"
            );
            libc::munmap(map, FILE_BYTES);
        }
    }
    server.signal(libc::SIGKILL);
    let _ = server.stop(libc::SIGKILL, std::time::Duration::from_secs(10));
    drop((reader, synced));
    let _guard = Unmount(at.clone());
    let mut server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    let found = std::fs::read(&path).unwrap();
    assert!(
        found == expected,
        "acknowledged O_DSYNC writes lost or changed by SIGKILL"
    );
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}

/// WRITE calls the server counted so far (`stat fs`).
fn writes_counted(env: &Env) -> u64 {
    calls_counted(env, "write")
}

/// Writes `pieces` pieces of `piece` bytes one write(2) each at the start of `file`.
fn write_pieces(file: &std::fs::File, pieces: usize, piece: usize, seed: u64) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let data = pattern(pieces * piece, seed);
    for (index, chunk) in data.chunks(piece).enumerate() {
        file.write_all_at(chunk, (index * piece) as u64).unwrap();
    }
    data
}

/// The kernel's writeback cache is used only where it is safe: a file opened again with room
/// on a `sync=standard` dataset (or being created there) has its small writes gathered into
/// few WRITE calls; under
/// `sync=always` (set live) each write(2) is its own WRITE, durable when it returns (SIGKILL
/// loses none); near a quota each write(2) reaches the server and gets EDQUOT itself. A file
/// opened with room that then runs into a quota keeps what the kernel acknowledged, and its
/// next write(2) gets EDQUOT.
#[test]
fn the_writeback_cache_is_used_only_where_it_is_safe() {
    use std::os::unix::fs::FileExt;
    const PIECE: usize = 4096;
    const PIECES: usize = 256;
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, mut server) = served_mount(&env, "tank/fs", &[]);
    // Opens an existing file (made first if missing): how it is served is decided by the
    // dataset's state, not by its being created.
    let open = |name: &str| {
        let path = at.join(name);
        if !path.exists() {
            drop(std::fs::File::create(&path).unwrap());
        }
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap()
    };

    // A file being created goes through the cache too (a shared mapping of it would go
    // through the page cache anyway: see fuse_faults.rs).
    let before = writes_counted(&env);
    let created = std::fs::File::create(at.join("cached")).unwrap();
    write_pieces(&created, PIECES, PIECE, 0);
    drop(created);
    let gathered = writes_counted(&env) - before;
    assert!(
        gathered < PIECES as u64 / 4,
        "{gathered} WRITE calls for {PIECES} small writes into a file being created"
    );

    // Opened again, with room and sync=standard: gathered by the kernel, fsync makes it all
    // durable.
    let before = writes_counted(&env);
    let cached = open("cached");
    let cached_data = write_pieces(&cached, PIECES, PIECE, 1);
    cached.sync_all().unwrap();
    let gathered = writes_counted(&env) - before;
    assert!(
        gathered < PIECES as u64 / 4,
        "{gathered} WRITE calls for {PIECES} small writes with room: no writeback cache"
    );

    // sync=always, set on the live mount: every write(2) reaches the server and is durable.
    env.ok(&["set", "sync=always", "tank/fs"]);
    let before = writes_counted(&env);
    let always = open("always");
    let always_data = write_pieces(&always, PIECES, PIECE, 2);
    assert_eq!(
        writes_counted(&env) - before,
        PIECES as u64,
        "under sync=always a write(2) was held in the kernel's cache"
    );
    server.signal(libc::SIGKILL);
    let _ = server.stop(libc::SIGKILL, std::time::Duration::from_secs(10));
    drop((cached, always));
    let _guard = Unmount(at.clone());
    let mut server = env.serve();
    env.ok(&["mount", "tank/fs", at.to_str().unwrap()]);
    assert!(std::fs::read(at.join("cached")).unwrap() == cached_data);
    assert!(
        std::fs::read(at.join("always")).unwrap() == always_data,
        "writes acknowledged under sync=always lost to SIGKILL"
    );
    env.ok(&["set", "sync=standard", "tank/fs"]);

    // Near a quota: each write(2) reaches the server, the one that does not fit gets EDQUOT.
    env.ok(&["set", "quota=24M", "tank/fs"]);
    let before = writes_counted(&env);
    let near = open("near");
    write_pieces(&near, PIECES, PIECE, 3);
    assert_eq!(
        writes_counted(&env) - before,
        PIECES as u64,
        "near the quota a write(2) was held in the kernel's cache"
    );
    let refused = (0..64u64)
        .map(|step| near.write_all_at(&pattern(1 << 20, step), (2 + step) << 20))
        .find_map(Result::err)
        .expect("64 MiB more fit in a 24 MiB quota");
    assert_eq!(refused.raw_os_error(), Some(libc::EDQUOT), "{refused}");
    drop(near);
    std::fs::remove_file(at.join("near")).unwrap();

    // Opened with room, then a quota set below what it goes on to write: what the kernel
    // acknowledged is kept (past the quota by less than the kernel can hold), fsync
    // succeeds, and the file's next write(2) is refused with EDQUOT.
    env.ok(&["set", "quota=none", "tank/fs"]);
    let late = open("late");
    let stored = write_pieces(&late, PIECES, PIECE, 4);
    late.sync_all().unwrap();
    env.ok(&["pool", "sync", "tank"]);
    let (used, _, _) = used_avail_refer(&env, "tank/fs");
    let quota = used + (4 << 20);
    env.ok(&["set", &format!("quota={quota}"), "tank/fs"]);
    const MORE: usize = 16 << 20;
    let more = pattern(MORE, 5);
    late.write_all_at(&more, stored.len() as u64).unwrap();
    late.sync_all()
        .expect("data the kernel acknowledged was refused at writeback");
    let refused = (0..64u64)
        .map(|step| {
            late.write_all_at(
                &pattern(1 << 20, step),
                (MORE + stored.len()) as u64 + (step << 20),
            )
        })
        .find_map(Result::err)
        .expect("64 MiB more written past a quota");
    assert_eq!(refused.raw_os_error(), Some(libc::EDQUOT), "{refused}");
    late.sync_all().unwrap();
    let mut found = vec![0u8; MORE];
    late.read_exact_at(&mut found, stored.len() as u64).unwrap();
    assert!(
        found == more,
        "acknowledged writes past a quota set under them lost"
    );
    env.ok(&["pool", "sync", "tank"]);
    let (used, _, _) = used_avail_refer(&env, "tank/fs");
    assert!(
        used <= quota + (64 << 20),
        "USED {used} is past the quota {quota} by more than the kernel can hold"
    );
    drop(late);
    env.ok(&["set", "quota=none", "tank/fs"]);
    env.ok(&["unmount", "tank/fs"]);
    server.stop(libc::SIGINT, std::time::Duration::from_secs(60));
    env.assert_pool_check_clean();
}
