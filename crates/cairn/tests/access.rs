//! Who may reach the volumes (issue 13, safe defaults for access): TLS through NBD STARTTLS
//! with libnbd's `nbds://` URIs and qemu-img's x509 credentials, plain clients refused when TLS
//! is required, TCP off by default and never on a non-loopback address without TLS, files and
//! sockets private to their owner, and the control socket checking who connects.
//!
//! Certificates are made for each run with the `openssl` command (Debian package openssl): a CA,
//! a server certificate for localhost/127.0.0.1 and a client certificate, both signed by it, in
//! the layout GnuTLS clients read (`ca-cert.pem`, `client-cert.pem`, `client-key.pem`).

mod nbd_common;

use nbd_common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const EXPORT: &str = "tank/vol";

fn openssl(dir: &Path, args: &[&str]) {
    let run = run_limited(
        Command::new(tool("openssl", "openssl"))
            .args(args)
            .current_dir(dir),
        TOOL_TIME,
    );
    assert!(run.success(), "openssl {args:?}:\n{}", run.describe());
}

/// Makes `DIR/pki` (server side, CA included) and `DIR/client` (what a client with a
/// certificate holds) and `DIR/anonymous` (only the CA: a client without a certificate).
fn make_certificates(env: &Env) -> (PathBuf, PathBuf, PathBuf) {
    let pki = env.path("pki");
    std::fs::create_dir_all(&pki).expect("pki dir");
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(key);
    ca.extend(["-keyout", "ca-key.pem", "-out", "ca-cert.pem", "-days", "2"]);
    ca.extend(["-subj", "/CN=cairn test CA"]);
    openssl(&pki, &ca);
    for (name, subject, usage) in [
        (
            "server",
            "/CN=localhost",
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n",
        ),
        ("client", "/CN=client", "extendedKeyUsage=clientAuth\n"),
    ] {
        std::fs::write(pki.join(format!("{name}.ext")), usage).expect("extensions");
        let (key_file, csr, cert) = (
            format!("{name}-key.pem"),
            format!("{name}.csr"),
            format!("{name}-cert.pem"),
        );
        let mut request = vec!["req"];
        request.extend(key);
        request.extend([
            "-keyout",
            key_file.as_str(),
            "-out",
            csr.as_str(),
            "-subj",
            subject,
        ]);
        openssl(&pki, &request);
        let ext = format!("{name}.ext");
        openssl(
            &pki,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca-cert.pem",
                "-CAkey",
                "ca-key.pem",
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }
    let client = env.path("client");
    let anonymous = env.path("anonymous");
    for dir in [&client, &anonymous] {
        std::fs::create_dir_all(dir).expect("client dir");
        std::fs::copy(pki.join("ca-cert.pem"), dir.join("ca-cert.pem")).expect("copy CA");
    }
    for file in ["client-cert.pem", "client-key.pem"] {
        std::fs::copy(pki.join(file), client.join(file)).expect("copy client files");
    }
    (pki, client, anonymous)
}

fn tls_args(pki: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--tls-cert".into(),
        pki.join("server-cert.pem").display().to_string(),
        "--tls-key".into(),
        pki.join("server-key.pem").display().to_string(),
    ];
    args.extend(extra.iter().map(|arg| arg.to_string()));
    args
}

fn nbdinfo_size(uri: &str) -> Run {
    run_limited(Command::new(nbdinfo()).args(["--size", uri]), TOOL_TIME)
}

/// TLS required, with client certificates: libnbd and qemu-img move data over `nbds://`; plain
/// clients (TCP and Unix socket) and clients without a certificate are refused.
#[test]
fn tls_clients_connect_and_plain_clients_are_refused() {
    let env = Env::new();
    let (pki, client, anonymous) = make_certificates(&env);
    env.create_pool();
    env.create_volume(EXPORT, "16M", &[]);
    let ca = pki.join("ca-cert.pem").display().to_string();
    let mut args = tls_args(&pki, &["--tls-client-ca", &ca]);
    args.extend(["--tls".into(), "require".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = env.serve_with_args(&args);
    assert!(
        server.stdout().contains("nbds://127.0.0.1:"),
        "the banner names the TLS scheme:\n{}",
        server.logs()
    );
    let tls_uri = |dir: &Path| {
        format!(
            "nbds://127.0.0.1:{}/{EXPORT}?tls-certificates={}",
            server.port,
            dir.display()
        )
    };

    // qemu-img writes random data in through TLS ...
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let input = env.path("in.raw");
    std::fs::write(&input, &data).expect("input");
    let qpki = client.display().to_string();
    let target = format!(
        "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={},export={EXPORT},tls-creds=tls0,tls-hostname=localhost",
        server.port
    );
    let run = run_limited(
        Command::new(qemu_img()).args([
            "convert",
            "-n",
            "-f",
            "raw",
            "--object",
            &format!("tls-creds-x509,id=tls0,endpoint=client,dir={qpki}"),
            input.to_str().expect("utf-8 path"),
            "--target-image-opts",
            &target,
        ]),
        TOOL_TIME,
    );
    assert!(
        run.success(),
        "qemu-img over TLS:\n{}\n{}",
        run.describe(),
        server.logs()
    );

    // ... and libnbd reads it back through TLS, byte for byte.
    let output = env.path("out.raw");
    let run = run_limited(
        Command::new(nbdcopy()).args([&tls_uri(&client), output.to_str().expect("utf-8")]),
        TOOL_TIME,
    );
    assert!(run.success(), "nbdcopy over TLS:\n{}", run.describe());
    let back = std::fs::read(&output).expect("output");
    assert_eq!(back.len(), 16 << 20);
    assert!(back[..data.len()] == data[..], "data read over TLS differs");

    // Plain clients are refused, on TCP and on the Unix socket alike.
    let plain = nbdinfo_size(&server.tcp_uri(EXPORT));
    assert!(
        !plain.success(),
        "a plain TCP client was served:\n{}",
        plain.describe()
    );
    let plain = nbdinfo_size(&server.uri(EXPORT));
    assert!(
        !plain.success(),
        "a plain Unix client was served:\n{}",
        plain.describe()
    );
    // A TLS client without a certificate is refused too.
    let anonymous_run = nbdinfo_size(&tls_uri(&anonymous));
    assert!(
        !anonymous_run.success(),
        "a client without a certificate was served:\n{}",
        anonymous_run.describe()
    );
    // And the one with a certificate still is (the refusals broke nothing).
    let run = nbdinfo_size(&tls_uri(&client));
    assert!(run.success(), "{}", run.describe());
    assert_eq!(run.stdout.trim(), (16u64 << 20).to_string());
}

/// `--tls allow`: TLS for those who start it, plain service for the rest.
#[test]
fn tls_allow_serves_both_kinds_of_client() {
    let env = Env::new();
    let (pki, client, _) = make_certificates(&env);
    env.create_pool();
    env.create_volume(EXPORT, "16M", &[]);
    let args = tls_args(&pki, &["--tls", "allow"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = env.serve_with_args(&args);
    let tls_uri = format!(
        "nbds://127.0.0.1:{}/{EXPORT}?tls-certificates={}",
        server.port,
        client.display()
    );
    for uri in [tls_uri, server.tcp_uri(EXPORT), server.uri(EXPORT)] {
        let run = nbdinfo_size(&uri);
        assert!(run.success(), "{uri}:\n{}", run.describe());
        assert_eq!(run.stdout.trim(), (16u64 << 20).to_string());
    }
}

/// The analytics endpoint (`--http`) with a certificate is HTTPS only, with the NBD
/// certificate: a TLS client reads the metrics, a plain HTTP request gets no answer.
#[test]
fn the_analytics_endpoint_speaks_https_with_the_servers_certificate() {
    let env = Env::new();
    let (pki, _, _) = make_certificates(&env);
    env.create_pool();
    env.create_volume(EXPORT, "16M", &[]);
    let args = tls_args(&pki, &["--http", "127.0.0.1:0"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = env.serve_with_args(&args);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let address = loop {
        let out = server.stdout();
        if let Some(rest) = out.split("metrics on https://").nth(1)
            && let Some((address, _)) = rest.split_once("/metrics")
        {
            break address.to_string();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no https address announced:\n{}",
            server.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // openssl s_client verifies the server against the CA and sends the request over TLS.
    let mut client = Command::new(tool("openssl", "openssl"));
    client
        .args(["s_client", "-quiet", "-verify_return_error", "-connect"])
        .arg(&address)
        .arg("-CAfile")
        .arg(pki.join("ca-cert.pem"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = client.spawn().expect("openssl s_client");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .expect("send request");
    }
    let output = child.wait_with_output().expect("s_client output");
    let response = String::from_utf8_lossy(&output.stdout);
    assert!(
        response.starts_with("HTTP/1.0 200") && response.contains("cairn_pool_health"),
        "metrics over TLS:\n{response}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Plain HTTP on the same port: the TLS acceptor refuses it; no HTTP answer comes back.
    let mut plain = std::net::TcpStream::connect(&address).expect("connect");
    plain
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    {
        use std::io::{Read, Write};
        plain
            .write_all(b"GET /metrics HTTP/1.0\r\n\r\n")
            .expect("send plain request");
        let mut answer = Vec::new();
        let _ = plain.read_to_end(&mut answer);
        assert!(
            !String::from_utf8_lossy(&answer).contains("HTTP/1"),
            "a plain HTTP request was answered: {}",
            String::from_utf8_lossy(&answer)
        );
    }
}

/// TCP is off unless asked for, never exposed beyond loopback without TLS, and everything the
/// server creates is its owner's alone.
#[test]
fn defaults_keep_the_volumes_private() {
    let env = Env::new();
    env.create_pool();
    env.create_volume(EXPORT, "16M", &[]);

    // A non-loopback address without TLS: refused before anything is served.
    let run = env.cairn(&["serve", "--listen", "0.0.0.0:0"]);
    assert_eq!(run.status.code(), Some(1), "{}", run.describe());
    assert!(
        run.stderr.contains("without TLS") && run.stderr.contains("0.0.0.0"),
        "{}",
        run.describe()
    );

    // No --listen: the Unix socket only.
    let mut cmd = env.cairn_command();
    let out_path = env.path("unix-only.out");
    cmd.args(["serve"])
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn serve");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&out_path)
        .unwrap_or_default()
        .contains('\n')
    {
        assert!(std::time::Instant::now() < deadline, "serve did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let banner = std::fs::read_to_string(&out_path).expect("banner");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !banner.contains("nbd://") && banner.contains("nbd+unix://"),
        "no TCP listener without --listen:\n{banner}"
    );

    // Files and sockets of the state directory are private (checked while a server runs, so
    // its sockets exist).
    let server = env.serve();
    let mode = |path: &Path| {
        std::fs::symlink_metadata(path)
            .unwrap_or_else(|err| panic!("{}: {err}", path.display()))
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&env.state()), 0o700, "state directory");
    for device in ["d0.img", "d1.img"] {
        assert_eq!(mode(Path::new(&env.dev(device))), 0o600, "{device}");
    }
    for file in ["pools.cache", "nbd.sock", "control.sock"] {
        assert_eq!(mode(&env.state().join(file)), 0o600, "{file}");
    }

    // Another user who gets past the file modes (loosened here on purpose) is still refused by
    // the control socket's peer check.
    std::fs::set_permissions(env.state(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    std::fs::set_permissions(env.control_socket(), std::fs::Permissions::from_mode(0o777))
        .expect("chmod");
    assert_eq!(
        own_uid(),
        0,
        "this test switches to another user and must run as root (CI does)"
    );
    let run = run_limited(
        Command::new(tool("setpriv", "util-linux"))
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_cairn"))
            .arg("--state-dir")
            .arg(env.state())
            .args(["pool", "list"])
            .env("HOME", "/tmp"),
        TOOL_TIME,
    );
    assert!(
        !run.success() && run.stderr.contains("refused") && run.stderr.contains("uid 65534"),
        "{}\n{}",
        run.describe(),
        server.logs()
    );
    // The owner still is served.
    assert!(env.ok(&["pool", "list", "-H"]).contains("tank"));
}

fn own_uid() -> u32 {
    // The test's own uid, from /proc (no extra dependency for one number).
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|uid| uid.parse().ok())
        .expect("Uid line")
}
