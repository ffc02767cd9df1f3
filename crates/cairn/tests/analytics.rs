//! Issue 16 from the outside: `cairn serve --http` scraped by a real Prometheus (Debian
//! `prometheus`) and its page opened in headless Chromium (Debian `chromium`,
//! `chromium-driver`, `python3-selenium`), while real NBD clients write to volumes.
//!
//! - Prometheus scrapes every second; after a workload of known size on two volumes, its HTTP
//!   API must give each dataset's written bytes (the counter, and `increase()` over the run)
//!   within 5% of what was written, and a `histogram_quantile` of write latency within the
//!   bucket resolution (a factor of 2) of the p50 `cairn pool iostat -v` reports.
//! - The page (tests/page/page_check.py): heatmap cells drawn, two updates each within 2 s, no
//!   console errors, no horizontal scroll at 1280×800; the screenshot is kept in
//!   `target/tmp/analytics-page.png` (CARGO_TARGET_TMPDIR) as the CI artifact.
//! - The endpoint itself: 404 and 405 where due, the OpenMetrics content type, and a refusal
//!   to listen beyond loopback without TLS.
//! - Snapshots (issue 34): after snapshots and overwrites, `/metrics` counts them
//!   (`cairn_snapshot_*`) and gives each dataset's used and usedbysnapshots bytes as `get -p`
//!   shows them; `/api/status` carries the same per dataset, and the page's snapshot table
//!   draws a row for the volume with what its snapshots hold.
//! - NFS (issue 35): with `--nfs` too, a libnfs listing of a shared filesystem shows in the
//!   page's NFS panel as a client row (127.0.0.1) with its calls (the exact counts of
//!   `/metrics`' `cairn_nfs_*` are `tests/nfs_stats.rs`').

mod nbd_common;

use nbd_common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `GET path` over HTTP/1.0 (no chunking): status code and body.
fn http_get(address: &str, path: &str) -> (u16, String, String) {
    http_request(address, "GET", path)
}

fn http_request(address: &str, method: &str, path: &str) -> (u16, String, String) {
    try_http(address, method, path)
        .unwrap_or_else(|e| panic!("{method} http://{address}{path}: {e}"))
}

fn try_http(address: &str, method: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {address}\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {head:?}")))?;
    Ok((status, head.to_string(), body.to_string()))
}

/// The `--http` address the server announced (`metrics on http://ADDR/metrics`).
fn analytics_address(server: &Server) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = server.stdout();
        if let Some(rest) = out.split("metrics on http://").nth(1)
            && let Some((address, _)) = rest.split_once("/metrics")
        {
            return address.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no analytics address announced\n{}",
            server.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A Prometheus scraping `target` every second, killed on drop.
struct Prometheus {
    child: Child,
    address: String,
    log: std::path::PathBuf,
}

impl Prometheus {
    fn start(env: &Env, target: &str) -> Prometheus {
        let binary = tool("prometheus", "prometheus");
        let config = env.path("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: cairn\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus config");
        let address = format!("127.0.0.1:{}", free_port());
        let log = env.path("prometheus.log");
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                env.path("prometheus-data").display()
            ))
            .arg(format!("--web.listen-address={address}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("prometheus log"))
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            child,
            address,
            log,
        };
        prometheus.wait_for("ready", || {
            try_http(&prometheus.address, "GET", "/-/ready")
                .is_ok_and(|(status, _, _)| status == 200)
        });
        prometheus
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// An instant query's result vector (`data.result`), at `time` (Unix seconds) if given.
    fn query(&self, expression: &str, time: Option<f64>) -> Vec<serde_json::Value> {
        let mut path = format!("/api/v1/query?query={}", encode(expression));
        if let Some(time) = time {
            path.push_str(&format!("&time={time:.3}"));
        }
        let (status, _, body) = http_get(&self.address, &path);
        assert_eq!(status, 200, "query {expression}: {body}\n{}", self.log());
        let value: serde_json::Value = serde_json::from_str(&body).expect("prometheus JSON");
        value["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The one sample of an instant query: (timestamp, value).
    fn single(&self, expression: &str, time: Option<f64>) -> Option<(f64, f64)> {
        let result = self.query(expression, time);
        let sample = result.first()?;
        let ts = sample["value"][0].as_f64()?;
        let value: f64 = sample["value"][1].as_str()?.parse().ok()?;
        Some((ts, value))
    }

    fn wait_for(&self, what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                Instant::now() < deadline,
                "Prometheus: {what} within 60 s\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a PromQL expression for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `cairn pool iostat -v -H -p tank`'s W-P50 of `dataset`, in µs.
fn iostat_write_p50_us(env: &Env, dataset: &str) -> u64 {
    let out = env.ok(&["pool", "iostat", "-v", "-H", "-p", "tank"]);
    let line = out
        .lines()
        .find(|line| line.split('\t').next() == Some(dataset))
        .unwrap_or_else(|| panic!("no iostat line for {dataset}:\n{out}"));
    // DATASET R-OPS W-OPS R-BW W-BW FLUSH TRIM META R-LAT W-LAT F-LAT ERRORS R-P50 R-P99 W-P50
    line.split('\t')
        .nth(14)
        .and_then(|field| field.parse().ok())
        .unwrap_or_else(|| panic!("no W-P50 in {line:?}"))
}

#[test]
fn prometheus_sees_each_datasets_written_bytes_and_write_latency() {
    let _heavy = heavy();
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/a", "64M", &[]);
    env.create_volume("tank/b", "64M", &[]);
    let server = env.serve_with_args(&["--http", "127.0.0.1:0"]);
    let address = analytics_address(&server);
    let (a, b) = (server.uri("tank/a"), server.uri("tank/b"));
    // A read on each makes both datasets' series exist (at 0 written bytes) before the writes,
    // so Prometheus sees each counter start from 0.
    qemu_io_ok(&a, &["read 0 4k"]);
    qemu_io_ok(&b, &["read 0 4k"]);
    let prometheus = Prometheus::start(&env, &address);
    let written =
        |dataset: &str| format!("cairn_dataset_bytes_total{{dataset=\"{dataset}\",op=\"write\"}}");
    prometheus.wait_for("both datasets scraped at 0 bytes written", || {
        ["tank/a", "tank/b"]
            .iter()
            .all(|d| prometheus.single(&written(d), None).map(|s| s.1) == Some(0.0))
    });
    // 24 MiB to a and 8 MiB to b, 1 MiB at a time with pauses, over a few seconds of scrapes.
    let mut a_commands = Vec::new();
    for i in 0..24 {
        a_commands.push(format!("write -P {} {}M 1M", i + 1, i));
        a_commands.push("sleep 150".to_string());
    }
    let mut b_commands = Vec::new();
    for i in 0..8 {
        b_commands.push(format!("write -P {} {}M 1M", i + 1, i));
        b_commands.push("sleep 400".to_string());
    }
    let a_refs: Vec<&str> = a_commands.iter().map(String::as_str).collect();
    let writer_b = {
        let b = b.clone();
        std::thread::spawn(move || {
            let refs: Vec<&str> = b_commands.iter().map(String::as_str).collect();
            qemu_io_ok(&b, &refs);
        })
    };
    qemu_io_ok(&a, &a_refs);
    writer_b.join().expect("writer of tank/b");
    let expected = [("tank/a", 24 * MIB), ("tank/b", 8 * MIB)];
    prometheus.wait_for("the written bytes scraped", || {
        expected.iter().all(|(d, bytes)| {
            prometheus.single(&written(d), None).map(|s| s.1) == Some(*bytes as f64)
        })
    });
    // Two more scrapes, so the last samples are settled.
    std::thread::sleep(Duration::from_millis(2500));
    for (dataset, bytes) in expected {
        let (_, value) = prometheus
            .single(&written(dataset), None)
            .expect("counter sample");
        // An instant result carries the evaluation time; `timestamp()` gives the sample's own.
        let (_, at) = prometheus
            .single(&format!("timestamp({})", written(dataset)), None)
            .expect("sample timestamp");
        let within = |measured: f64| (measured - bytes as f64).abs() <= 0.05 * bytes as f64;
        assert!(
            within(value),
            "{dataset}: counter {value} against {bytes} bytes written"
        );
        // The rate integrated over the run, evaluated at the last sample (no extrapolation
        // past it; the series began at 0, so none before it either).
        let increase = format!("increase({}[5m])", written(dataset));
        let (_, increased) = prometheus
            .single(&increase, Some(at))
            .expect("increase sample");
        assert!(
            within(increased),
            "{dataset}: increase() {increased} against {bytes} bytes written"
        );
    }
    let quantile = "histogram_quantile(0.5, sum by (le) (increase(cairn_dataset_latency_seconds_bucket{dataset=\"tank/a\",op=\"write\"}[5m])))";
    let (_, p50_seconds) = prometheus
        .single(quantile, None)
        .expect("histogram_quantile sample");
    let cairn_p50_us = iostat_write_p50_us(&env, "tank/a") as f64;
    let prometheus_p50_us = p50_seconds * 1e6;
    assert!(
        cairn_p50_us > 0.0
            && prometheus_p50_us >= cairn_p50_us / 2.0
            && prometheus_p50_us <= cairn_p50_us * 2.0,
        "write p50: Prometheus {prometheus_p50_us:.0} µs, cairn pool iostat {cairn_p50_us} µs \
         (the buckets are powers of two: they must agree within a factor of 2)"
    );
    let (_, up) = prometheus
        .single("up{job=\"cairn\"}", None)
        .expect("up sample");
    assert_eq!(up, 1.0, "the target is up");
}

/// An NFS client: a libnfs listing of `tank/shared` (MNT, then directory calls).
fn nfs_listing(nfs_port: u16) {
    let listing = run(
        &tool("nfs-ls", "libnfs-utils"),
        &[&format!(
            "nfs://127.0.0.1/tank/shared?version=3&nfsport={nfs_port}&mountport={nfs_port}&uid=1000&gid=1000"
        )],
    );
    assert!(listing.success(), "{}", listing.describe());
}

/// The page's NFS clients table (`nfsRows`: [address, calls, bytes read, bytes written]) has
/// the listing's client.
fn assert_nfs_client_row(seen: &serde_json::Value) {
    let nfs_rows = seen["final"]["nfsRows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        nfs_rows
            .iter()
            .any(|row| row[0] == "127.0.0.1" && row[1].as_u64() >= Some(2)),
        "no NFS client row for 127.0.0.1: {seen}"
    );
}

#[test]
fn the_page_draws_heatmaps_and_updates_live_in_headless_chromium() {
    let _heavy = heavy();
    tool("chromedriver", "chromium-driver");
    tool("chromium", "chromium");
    let python = std::path::Path::new("/usr/bin/python3");
    let selenium = Command::new(python)
        .args(["-c", "import selenium"])
        .status()
        .expect("run /usr/bin/python3");
    assert!(
        selenium.success(),
        "Debian's python3-selenium is missing: apt-get install python3-selenium"
    );
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "64M", &[]);
    env.ok(&["create", "-o", "sharenfs=on", "tank/shared"]);
    let nfs_port = free_port();
    let nfs_address = format!("127.0.0.1:{nfs_port}");
    let server = env.serve_with_args(&["--http", "127.0.0.1:0", "--nfs", &nfs_address]);
    let address = analytics_address(&server);
    let uri = server.uri("tank/vol");
    nfs_listing(nfs_port);
    let stop = Arc::new(AtomicBool::new(false));
    let workload = {
        let stop = stop.clone();
        let uri = uri.clone();
        std::thread::spawn(move || {
            let mut rounds = 0;
            while !stop.load(Ordering::Relaxed) {
                qemu_io_ok(
                    &uri,
                    &[
                        "write -P 7 0 256k",
                        "flush",
                        "read -P 7 0 256k",
                        "write 1M 64k",
                        "flush",
                        "sleep 200",
                    ],
                );
                rounds += 1;
            }
            rounds
        })
    };
    // A snapshot the workload's overwrites then hold blocks of; the second one's txg
    // carries them, so usedbysnapshots is set before the page opens.
    env.ok(&["snapshot", "tank/vol@first"]);
    std::thread::sleep(Duration::from_millis(500));
    env.ok(&["snapshot", "tank/vol@second"]);
    // A few seconds of history before the page opens.
    std::thread::sleep(Duration::from_secs(3));
    let artifacts = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let screenshot = artifacts.join("analytics-page.png");
    let _ = std::fs::remove_file(&screenshot);
    let check = run_limited(
        Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/page/page_check.py"
            ))
            .arg(format!("http://{address}/"))
            .arg(&screenshot),
        Duration::from_secs(120),
    );
    stop.store(true, Ordering::Relaxed);
    let rounds = workload.join().expect("workload");
    assert!(rounds > 0, "the workload ran");
    assert!(
        check.success(),
        "the page check failed:\n{}\n{}",
        check.describe(),
        server.logs()
    );
    let seen: serde_json::Value =
        serde_json::from_str(check.stdout.trim()).expect("page_check prints JSON");
    assert!(
        seen["final"]["heatCells"].as_u64().unwrap_or(0) > 0,
        "{seen}"
    );
    // The snapshot space table: a row for the volume, [name, used, usedbysnapshots], its
    // snapshots holding part of what it uses.
    let rows = seen["final"]["snapshotRows"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let vol = rows
        .iter()
        .find(|row| row[0] == "tank/vol")
        .unwrap_or_else(|| panic!("no snapshot row for tank/vol: {seen}"));
    let (used, held) = (vol[1].as_u64().unwrap_or(0), vol[2].as_u64().unwrap_or(0));
    assert!(
        held > 0 && held <= used,
        "tank/vol: used {used}, snapshots {held}: {seen}"
    );
    assert!(rows.iter().any(|row| row[0] == "tank"), "{seen}");
    assert_nfs_client_row(&seen);
    let png = std::fs::read(&screenshot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot at {}",
        screenshot.display()
    );
    eprintln!("page screenshot: {}", screenshot.display());
}

/// The value of the series `series` (name and labels, exactly) in an exposition.
fn metric_value(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{series} ")))
        .and_then(|value| value.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics:\n{body}"))
}

/// A snapshot, an overwrite and a second snapshot (whose txg carries the overwrite): the
/// snapshot counters, the command latency and each dataset's space appear in `/metrics`,
/// equal to what `get -p` shows, and `/api/status` carries the per-dataset figures.
fn snapshot_metrics(env: &Env, server: &Server, address: &str) {
    env.ok(&["snapshot", "tank/vol@one"]);
    qemu_io_ok(&server.uri("tank/vol"), &["write -P 9 0 64k", "flush"]);
    env.ok(&["snapshot", "tank/vol@two"]);
    let (_, _, body) = http_get(address, "/metrics");
    let tank = "{pool=\"tank\"}";
    assert_eq!(
        metric_value(&body, &format!("cairn_snapshot_created_total{tank}")),
        2.0
    );
    assert_eq!(
        metric_value(&body, &format!("cairn_snapshot_count{tank}")),
        2.0
    );
    assert_eq!(
        metric_value(&body, &format!("cairn_snapshot_destroyed_total{tank}")),
        0.0
    );
    assert_eq!(
        metric_value(&body, &format!("cairn_snapshot_freeing_bytes{tank}")),
        0.0
    );
    assert_eq!(
        metric_value(
            &body,
            &format!("cairn_snapshot_command_latency_seconds_count{tank}")
        ),
        2.0
    );
    let get = |property: &str| -> f64 {
        env.ok(&["get", "-H", "-p", "-o", "value", property, "tank/vol"])
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("get {property}"))
    };
    let vol = "{pool=\"tank\",dataset=\"tank/vol\"}";
    let held = metric_value(&body, &format!("cairn_dataset_snapshots_used_bytes{vol}"));
    assert!(held >= 65536.0, "@one holds the overwritten 64k: {held}");
    assert_eq!(held, get("usedbysnapshots"));
    assert_eq!(
        metric_value(&body, &format!("cairn_dataset_used_bytes{vol}")),
        get("used")
    );
    assert!(
        metric_value(&body, &format!("cairn_snapshot_deadlist_bytes{tank}")) >= held,
        "{body}"
    );
    assert!(body.contains("cairn_dataset_used_bytes{pool=\"tank\",dataset=\"tank\"}"));
    // The status the page reads: refreshed once a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, _, text) = http_get(address, "/api/status");
        let value: serde_json::Value = serde_json::from_str(&text).expect("status JSON");
        let pool = &value["pools"][0];
        let row = pool["dataset_space"]
            .as_array()
            .and_then(|rows| rows.iter().find(|row| row["name"] == "tank/vol"))
            .cloned();
        if let Some(row) = row
            && row["snapshots_bytes"].as_f64() == Some(held)
        {
            assert!(
                row["used_bytes"].as_u64() >= row["referenced_bytes"].as_u64(),
                "{row}"
            );
            assert_eq!(pool["snapshots"]["snapshots"], 2, "{value}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot space in /api/status: {value}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_endpoint_answers_what_it_serves_and_refuses_exposure_without_tls() {
    let env = Env::new();
    env.create_pool();
    env.create_volume("tank/vol", "16M", &[]);
    let refused = env.cairn(&["serve", "--http", "0.0.0.0:0"]);
    assert!(
        !refused.success() && refused.stderr.contains("without TLS"),
        "--http beyond loopback without TLS must be refused:\n{}",
        refused.describe()
    );
    let server = env.serve_with_args(&["--http", "127.0.0.1:0"]);
    let address = analytics_address(&server);
    // A synchronous write opens the volume and its intent log.
    qemu_io_ok(&server.uri("tank/vol"), &["write 0 64k", "flush"]);
    let (status, head, body) = http_get(&address, "/metrics");
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    assert!(
        body.contains("cairn_pool_health{pool=\"tank\",state=\"ONLINE\"} 1"),
        "{body}"
    );
    assert!(
        body.contains(
            "cairn_dataset_bytes_total{pool=\"tank\",dataset=\"tank/vol\",protocol=\"nbd\",op=\"write\"} 65536"
        ),
        "{body}"
    );
    for family in [
        "# TYPE cairn_device_wait_seconds histogram",
        "# TYPE cairn_device_request_size_bytes histogram",
        "# TYPE cairn_device_class_pending_requests gauge",
        "# TYPE cairn_zil_commit_latency_seconds histogram",
        "# TYPE cairn_arc_evicted_by_l2_state_bytes counter",
    ] {
        assert!(
            body.contains(family),
            "{family} missing from /metrics:\n{body}"
        );
    }
    snapshot_metrics(&env, &server, &address);
    assert_eq!(http_get(&address, "/nothing-here").0, 404);
    assert_eq!(http_request(&address, "POST", "/metrics").0, 405);
    let (status, _, page) = http_get(&address, "/");
    assert_eq!(status, 200);
    assert!(page.contains("<script src=\"/app.js\">"), "{page}");
    let (status, _, status_json) = http_get(&address, "/api/status");
    assert_eq!(status, 200);
    let value: serde_json::Value = serde_json::from_str(&status_json).expect("status JSON");
    assert_eq!(value["pools"][0]["name"], "tank", "{value}");
    assert_eq!(value["pools"][0]["health"], "ONLINE", "{value}");
    // The history fills once a second.
    std::thread::sleep(Duration::from_millis(2500));
    let (_, _, history) = http_get(&address, "/api/history?res=second&since=0");
    let value: serde_json::Value = serde_json::from_str(&history).expect("history JSON");
    assert!(
        value["t"].as_array().is_some_and(|t| !t.is_empty()),
        "{value}"
    );
}
