//! Errors as the CLI prints them (issue 32, point 24): each cause once, in order (an error's
//! message never repeats its source, which the CLI prints after it), and a device's error in a
//! note below `pool status`'s tree rather than in its NAME column, as zpool does.

mod nbd_common;

use nbd_common::*;

/// The first place in `text` where a run of ": "-separated parts is followed by the same
/// run ("A: B: A: B"), if any: a cause printed twice.
fn repeated_cause(text: &str) -> Option<String> {
    for line in text.lines() {
        let parts: Vec<&str> = line.split(": ").collect();
        for start in 0..parts.len() {
            for len in 1..=(parts.len() - start) / 2 {
                if parts[start..start + len] == parts[start + len..start + 2 * len] {
                    return Some(line.to_string());
                }
            }
        }
    }
    None
}

#[test]
fn repeated_causes_are_found() {
    assert!(repeated_cause("a: No such file (os error 2): No such file (os error 2)").is_some());
    assert!(
        repeated_cause(
            "x: KeyMismatch: keys may not be consistent: KeyMismatch: keys may not be consistent"
        )
        .is_some()
    );
    assert!(repeated_cause("cannot open d0: d0: open failed: No such file").is_none());
}

#[test]
fn an_unavailable_cache_device_has_its_reason_in_a_note_below_the_tree() {
    let env = Env::new();
    let (d0, c0) = (env.dev("d0.img"), env.dev("c0.img"));
    env.ok(&["pool", "create", "--size", "128M", "tank", &d0]);
    env.ok(&["pool", "add", "--size", "64M", "tank", "cache", &c0]);
    // Overwritten by something else: its superblock is gone.
    std::fs::write(&c0, vec![0x5a; 64 << 20]).expect("overwrite the cache device");
    let mut server = env.serve();

    let status = env.ok(&["pool", "status", "tank"]);
    let row = status
        .lines()
        .find(|line| line.contains("c0.img") && !line.contains("note:"))
        .unwrap_or_else(|| panic!("no cache row:\n{status}"));
    let name_column = row.split_whitespace().next().unwrap_or_default();
    assert!(
        name_column.ends_with("c0.img") && row.contains("UNAVAIL") && row.len() < 100,
        "the row holds the name and state, not the error:\n{status}"
    );
    let note = status
        .lines()
        .find(|line| line.trim_start().starts_with("note: cache device"))
        .unwrap_or_else(|| panic!("no note below the tree:\n{status}"));
    assert!(
        note.contains("c0.img") && note.contains("superblock"),
        "{status}"
    );
    assert_eq!(repeated_cause(&status), None, "{status}");

    let json = env.ok(&["pool", "status", "-j", "tank"]);
    assert!(json.contains("superblock"), "the reason is in -j:\n{json}");
    server.terminate();
}

#[test]
fn a_device_error_names_its_cause_once() {
    let env = Env::new();
    let inside_nothing = env.path("no-such-dir").join("d0.img");
    let run = env.cairn(&[
        "pool",
        "create",
        "--size",
        "64M",
        "tank",
        inside_nothing.to_str().expect("utf-8"),
    ]);
    assert!(!run.success(), "{}", run.describe());
    assert_eq!(
        run.stderr.matches("No such file or directory").count(),
        1,
        "{}",
        run.describe()
    );
    assert_eq!(repeated_cause(&run.stderr), None, "{}", run.describe());
}

/// A self-signed certificate and its key in `DIR/NAME-cert.pem`, `DIR/NAME-key.pem`.
fn self_signed(dir: &std::path::Path, name: &str) {
    let run = run_limited(
        std::process::Command::new("openssl")
            .current_dir(dir)
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "2"])
            .args(["-subj", "/CN=localhost", "-keyout"])
            .arg(format!("{name}-key.pem"))
            .arg("-out")
            .arg(format!("{name}-cert.pem")),
        std::time::Duration::from_secs(60),
    );
    assert!(run.success(), "openssl:\n{}", run.describe());
}

#[test]
fn a_certificate_and_a_key_that_do_not_match_are_refused_saying_why_once() {
    let env = Env::new();
    self_signed(env.dir.path(), "a");
    self_signed(env.dir.path(), "b");
    let (cert, key) = (env.path("a-cert.pem"), env.path("b-key.pem"));
    let socket = env.socket();
    let run = env.cairn(&[
        "serve",
        "--socket",
        socket.to_str().expect("utf-8"),
        "--tls-cert",
        cert.to_str().expect("utf-8"),
        "--tls-key",
        key.to_str().expect("utf-8"),
    ]);
    assert!(!run.success(), "{}", run.describe());
    assert!(run.stderr.contains("TLS"), "{}", run.describe());
    assert_eq!(repeated_cause(&run.stderr), None, "{}", run.describe());
}
