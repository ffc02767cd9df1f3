//! `cairn diff` of a filesystem as a user runs it (issue 34): a filesystem mounted by `cairn
//! serve` through the real kernel FUSE is changed with ordinary file operations (writes,
//! creates, a delete, renames and moves, chmod, a hard link, a fifo, a symlink, names with a
//! space and a byte that is not UTF-8), snapshotted with the CLI, and `cairn diff` prints the
//! `zfs diff` lines for exactly those changes: paths under the mount, escaped; `-F`, `-H`,
//! `-t` and `-j`; against the live filesystem; nothing when nothing changed; paths from `/`
//! once unmounted (no mountpoint property); and clear errors for what cannot be compared.
//! Mounting needs root and /dev/fuse (CI runs as root).

// A test is one scenario read top to bottom: split into helpers, it reads worse.
#![allow(clippy::too_many_lines)]

mod nbd_common;

use nbd_common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;

#[test]
fn diff_prints_the_paths_changed_between_snapshots_of_a_mounted_filesystem() {
    let _heavy = heavy();
    let env = Env::new();
    let (at, _cleanup, _server) = served_mount(&env, "tank/fs", &[]);
    let mount = at.to_str().unwrap().to_string();
    assert!(
        mount.bytes().all(|byte| byte > b' ' && byte != b'\\'),
        "the mount's path needs no escaping: {mount}"
    );

    // Monday.
    std::fs::create_dir(at.join("docs")).unwrap();
    std::fs::write(at.join("docs/report.txt"), b"draft").unwrap();
    std::fs::write(at.join("notes"), b"to delete").unwrap();
    std::fs::write(at.join("old name"), b"to move").unwrap();
    std::fs::write(at.join("keep"), b"kept").unwrap();
    std::fs::create_dir(at.join("dir a")).unwrap();
    std::fs::write(at.join("dir a/inner"), b"inside").unwrap();
    std::fs::write(at.join("untouched"), b"same").unwrap();
    env.ok(&["snapshot", "tank/fs@monday"]);
    assert_eq!(
        env.ok(&["diff", "tank/fs@monday"]),
        "",
        "no change prints nothing"
    );

    // Tuesday: one of each change.
    let mut report = std::fs::OpenOptions::new()
        .append(true)
        .open(at.join("docs/report.txt"))
        .unwrap();
    std::io::Write::write_all(&mut report, b", revised").unwrap();
    drop(report);
    std::fs::remove_file(at.join("notes")).unwrap();
    std::fs::rename(at.join("old name"), at.join("docs/new name")).unwrap();
    std::fs::write(at.join("fresh file"), b"new").unwrap();
    std::fs::set_permissions(at.join("keep"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::hard_link(at.join("keep"), at.join("docs/keep-link")).unwrap();
    let fifo = std::ffi::CString::new(at.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    std::os::unix::fs::symlink("docs", at.join("link")).unwrap();
    std::fs::rename(at.join("dir a"), at.join("dir b")).unwrap();
    std::fs::write(at.join(OsStr::from_bytes(b"caf\xe9")), b"latin-1").unwrap();
    // Read only: an access time is no change.
    assert_eq!(std::fs::read(at.join("untouched")).unwrap(), b"same");
    env.ok(&["snapshot", "tank/fs@tuesday"]);

    let m = |path: &str| format!("{mount}{path}");
    let expected = [
        format!("M\t{}", m("/")),
        format!("+\t{}", m("/caf\\351")),
        format!("R\t{} -> {}", m("/dir\\040a"), m("/dir\\040b")),
        format!("M\t{}", m("/docs")),
        format!("+\t{}", m("/docs/keep-link")),
        format!("M\t{}", m("/docs/report.txt")),
        format!("+\t{}", m("/fresh\\040file")),
        format!("M\t{}", m("/keep")),
        format!("+\t{}", m("/link")),
        format!("-\t{}", m("/notes")),
        format!("R\t{} -> {}", m("/old\\040name"), m("/docs/new\\040name")),
        format!("+\t{}", m("/pipe")),
    ];
    let text = env.ok(&["diff", "tank/fs@monday", "tank/fs@tuesday"]);
    assert_eq!(text.lines().collect::<Vec<_>>(), expected, "{text}");
    // The snapshot against the live filesystem, the same (nothing changed since @tuesday).
    assert_eq!(env.ok(&["diff", "tank/fs@monday"]), text);

    // -F: the type after the change; -H: a rename's paths separated by a tab.
    let classified = env.ok(&["diff", "-F", "-H", "tank/fs@monday", "tank/fs@tuesday"]);
    let lines: Vec<&str> = classified.lines().collect();
    assert_eq!(lines.len(), expected.len(), "{classified}");
    assert_eq!(lines[0], format!("M\t/\t{}", m("/")));
    assert_eq!(
        lines[2],
        format!("R\t/\t{}\t{}", m("/dir\\040a"), m("/dir\\040b"))
    );
    assert_eq!(lines[8], format!("+\t@\t{}", m("/link")));
    assert_eq!(lines[9], format!("-\tF\t{}", m("/notes")));
    assert_eq!(lines[11], format!("+\t|\t{}", m("/pipe")));
    // -t: the change time first, seconds and nanoseconds.
    let timed = env.ok(&["diff", "-t", "tank/fs@monday", "tank/fs@tuesday"]);
    for (line, plain) in timed.lines().zip(&expected) {
        let (time, rest) = line.split_once('\t').unwrap();
        let (secs, nanos) = time.split_once('.').unwrap();
        assert!(secs.parse::<u64>().unwrap() > 1_600_000_000, "{line}");
        assert_eq!(nanos.len(), 9, "{line}");
        assert_eq!(rest, plain);
    }

    // -j: one document, the same lines.
    let json = env.ok(&["diff", "-j", "tank/fs@monday", "tank/fs@tuesday"]);
    let document = Json::parse(&json).unwrap_or_else(|err| panic!("{err}: {json}"));
    let diff = document.get("diff").unwrap_or_else(|| panic!("{json}"));
    assert_eq!(diff.get("mountpoint").and_then(Json::as_str), Some(&*mount));
    let changes = diff.get("changes").and_then(Json::as_array).unwrap();
    assert_eq!(changes.len(), expected.len(), "{json}");
    let field = |index: usize, key: &str| {
        changes[index]
            .get(key)
            .and_then(Json::as_str)
            .unwrap_or_else(|| panic!("{key}: {json}"))
            .to_string()
    };
    assert_eq!(field(10, "change"), "R");
    assert_eq!(field(10, "path"), m("/old\\040name"));
    assert_eq!(field(10, "new_path"), m("/docs/new\\040name"));
    assert_eq!(field(10, "type"), "file");
    assert_eq!(field(3, "type"), "directory");

    // Against the live filesystem: what came after @tuesday.
    std::fs::write(at.join("wednesday"), b"later").unwrap();
    std::fs::remove_file(at.join("docs/keep-link")).unwrap();
    assert_eq!(
        env.ok(&["diff", "tank/fs@tuesday"]),
        format!(
            "M\t{}\nM\t{}\n-\t{}\nM\t{}\n+\t{}\n",
            m("/"),
            m("/docs"),
            m("/docs/keep-link"),
            m("/keep"),
            m("/wednesday")
        )
    );

    // What cannot be compared: a clear error, and nothing printed on stdout.
    env.create_volume("tank/vol", "16M", &[]);
    env.ok(&["create", "tank/other"]);
    env.ok(&["snapshot", "tank/vol@a", "tank/other@a"]);
    for (args, message) in [
        (vec!["diff", "tank/fs"], "is not a snapshot"),
        (
            vec!["diff", "tank/fs@tuesday", "tank/fs@monday"],
            "name the older snapshot first",
        ),
        (vec!["diff", "tank/other@a", "tank/fs"], "does not descend"),
        (vec!["diff", "tank/vol@a"], "--blocks"),
        (vec!["diff", "tank/fs@nope"], "nope"),
    ] {
        let run = env.cairn(&args);
        assert!(!run.success(), "{args:?}: {}", run.describe());
        assert!(run.stdout.is_empty(), "{args:?}: {}", run.describe());
        assert!(run.stderr.contains(message), "{args:?}: {}", run.describe());
    }

    // Unmounted, with no mountpoint property: paths from the dataset's root.
    env.ok(&["unmount", "tank/fs"]);
    let rooted = env.ok(&["diff", "tank/fs@monday", "tank/fs@tuesday"]);
    assert_eq!(
        rooted.lines().collect::<Vec<_>>(),
        expected
            .iter()
            .map(|line| line.replace(&mount, ""))
            .collect::<Vec<_>>()
    );
}
