//! Boots a real guest and checks every promise of the harness in one boot (a boot costs ~10 s
//! of emulated CPU): the script's exit status and output come back, the host's root is visible
//! (a file written before the boot) and read-only underneath (writes land in the guest's
//! overlay only), a writable share's writes reach the host, `modprobe` finds the guest kernel's
//! modules, the guest reaches the host's loopback at 10.0.2.2, and `mount.nfs` runs (the NFS
//! tests will mount through it).

use cairn_guest::{BootOptions, Guest, HOST_ADDRESS, Share};
use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

/// `$CARGO_TARGET_DIR/guest`: shared by every test that boots a guest, kept across runs.
fn cache_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent()
        .map_or(tmp.clone(), |target| target.join("guest"))
}

#[test]
fn one_boot_keeps_every_promise() {
    let guest = Guest::prepare(&cache_dir()).expect("prepare the guest kernel");
    assert!(
        guest.modules_dir().join("modules.dep").is_file(),
        "{}",
        guest.modules_dir().display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("from-host.txt");
    std::fs::write(&seen, "written by the host before the boot\n").expect("write");
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");

    // The guest says hello on a TCP connection to the host's loopback.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let accepted = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut text = String::new();
        stream.read_to_string(&mut text).expect("read");
        text
    });

    let script = format!(
        r#"set -eu
echo "release $(uname -r)"
cat {seen}
echo changed-in-guest > {seen}
echo "written by the guest" > /mnt/shared/from-guest.txt
modprobe loop
grep -q '^loop ' /proc/modules && echo "loop module loaded"
echo "hello over tcp" > /dev/tcp/{HOST_ADDRESS}/{port}
mount.nfs -V
exit 3
"#,
        seen = seen.display()
    );
    // /dev/tcp is bash's.
    let script = format!("exec /bin/bash -c '{}'", script.replace('\'', "'\\''"));
    let options = BootOptions {
        timeout: Duration::from_secs(180),
        shares: vec![Share {
            host_path: shared.clone(),
            guest_path: PathBuf::from("/mnt/shared"),
            writable: true,
        }],
        ..BootOptions::default()
    };
    let run = guest.boot(&script, &options).expect("boot");
    let output = run.output();
    eprintln!(
        "boot {:?}, total {:?}\n{output}",
        run.boot_time, run.total_time
    );
    assert_eq!(run.exit_code, 3, "{}", run.console);
    assert!(!run.success());
    assert!(
        output.contains(&format!("release {}", guest.kernel_release())),
        "{output}"
    );
    assert!(
        output.contains("written by the host before the boot"),
        "{output}"
    );
    assert!(output.contains("loop module loaded"), "{output}");
    assert!(output.contains("mount.nfs: (linux nfs-utils"), "{output}");
    assert_eq!(
        std::fs::read_to_string(&seen).expect("read"),
        "written by the host before the boot\n",
        "the host's root is read-only to the guest"
    );
    assert_eq!(
        std::fs::read_to_string(shared.join("from-guest.txt")).expect("the share's file"),
        "written by the guest\n"
    );
    assert_eq!(accepted.join().expect("listener"), "hello over tcp\n");
}

/// A QEMU that is not installed is an error naming the package to install, not a skip.
#[test]
fn missing_qemu_names_its_package() {
    let guest = Guest::prepare(&cache_dir()).expect("prepare the guest kernel");
    let options = BootOptions {
        qemu_program: "/nonexistent/qemu-system-x86_64".to_string(),
        ..BootOptions::default()
    };
    let err = guest.boot("exit 0", &options).expect_err("no such QEMU");
    let text = err.to_string();
    assert!(
        matches!(err, cairn_guest::Error::MissingTool { .. }),
        "{err:?}"
    );
    assert!(
        text.contains("/nonexistent/qemu-system-x86_64") && text.contains("`qemu-system-x86`"),
        "{text}"
    );
}

/// A guest that never finishes is killed at the timeout and reported as such, with its
/// console so far (the script had started and printed).
#[test]
fn a_guest_past_its_timeout_is_killed() {
    let guest = Guest::prepare(&cache_dir()).expect("prepare the guest kernel");
    let options = BootOptions {
        timeout: Duration::from_secs(10),
        ..BootOptions::default()
    };
    let err = guest
        .boot("echo still going; sleep 100000", &options)
        .expect_err("the script never ends");
    match err {
        cairn_guest::Error::Timeout { timeout, console } => {
            assert_eq!(timeout, options.timeout);
            // The guest never powered off (under a heavy load it may not even have reached
            // the script in 10 s, so its output is not required).
            assert!(!console.contains("reboot: Power down"), "{console}");
            assert!(!console.contains("payload exit status"), "{console}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}
